//! The libraries over IPv6 in one process: two soft devices on VLAN 100, `a` with only an
//! IPv6 address and `b` dual-stack. rdma_cm with `sockaddr_in6` addresses (a wildcard `::`
//! listener, address resolution picking the device and the source address of the
//! destination's family, the ids' route addresses and ports), a Send and an RDMA Write,
//! disconnect; `rdma_getaddrinfo` of both families; the refusals (a source of the other
//! family, an address no device has).
//!
//! The test calls the exported C functions as an application would, so it is unsafe code.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

mod common;

use std::ffi::CString;
use std::net::{IpAddr, SocketAddr};
use std::os::raw::c_int;
use std::ptr::null_mut;

use rdma_dataplane::abi::*;
use rdma_dataplane::cm::addr;
use rdma_dataplane::cm::connect::*;
use rdma_dataplane::cm::endpoint::*;
use rdma_dataplane::cm::events::*;
use rdma_dataplane::cm::id::*;
use rdma_dataplane::cm::qp::*;
use rdma_dataplane::verbs::memory::ibv_dereg_mr;
use rdma_dataplane::verbs::qp::*;

use common::{
    expect_ok, new_id, nonblocking, poll_one, post_recv, post_send, rdma_wr, reg, send_wr, sge,
    sockaddr, sockaddr6, use_config,
};

const CONFIG: &str = r#"
[poll]
burst = 32

[[ports]]
name = "a"
backend = "soft"
device = "librdma-loopback6"
mac = "02:00:00:00:0b:01"
ipv6 = "fd00:77::1/64"
vlan = 100
rx_desc = 4096

[[ports]]
name = "b"
backend = "soft"
device = "librdma-loopback6"
mac = "02:00:00:00:0b:02"
ipv4 = "10.78.0.2/24"
ipv6 = "fd00:77::2/64"
vlan = 100
rx_desc = 4096
"#;

const PORT: u16 = 7481;
const LEN: usize = 4096;

/// The route address of `slot` (the id's source or destination).
fn route_addr<T>(slot: &T) -> SocketAddr {
    unsafe { addr::read((slot as *const T).cast()) }.expect("an IP address")
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn rdma_cm_and_traffic_over_ipv6() {
    use_config("librdma-loopback6", CONFIG);
    let ch = unsafe { rdma_create_event_channel() };
    assert!(!ch.is_null());
    nonblocking(unsafe { (*ch).fd });

    // Refusals: an address no device has, a source of the other family.
    let probe = new_id(ch, null_mut());
    let mut foreign = sockaddr6("fd00:77::9", 0);
    assert_eq!(
        unsafe { rdma_bind_addr(probe, (&mut foreign as *mut libc::sockaddr_in6).cast()) },
        -1
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EADDRNOTAVAIL)
    );
    let (mut src4, mut dst6) = (sockaddr([10, 78, 0, 2], 0), sockaddr6("fd00:77::1", PORT));
    let rc = unsafe {
        rdma_resolve_addr(
            probe,
            (&mut src4 as *mut libc::sockaddr_in).cast(),
            (&mut dst6 as *mut libc::sockaddr_in6).cast(),
            2000,
        )
    };
    assert_eq!(rc, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EINVAL)
    );
    assert_eq!(unsafe { rdma_destroy_id(probe) }, 0);

    // A wildcard IPv6 listener: every device, the IPv6-only one included.
    let listen = new_id(ch, null_mut());
    let mut any = sockaddr6("::", PORT);
    assert_eq!(
        unsafe { rdma_bind_addr(listen, (&mut any as *mut libc::sockaddr_in6).cast()) },
        0
    );
    assert_eq!(unsafe { rdma_listen(listen, 4) }, 0);
    assert_eq!(unsafe { rdma_get_src_port(listen) }, PORT.to_be());

    // The client resolves a's address: device b, source b's IPv6 address.
    let client = new_id(ch, null_mut());
    let rc = unsafe {
        rdma_resolve_addr(
            client,
            null_mut(),
            (&mut dst6 as *mut libc::sockaddr_in6).cast(),
            2000,
        )
    };
    assert_eq!(rc, 0);
    unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_ADDR_RESOLVED)) };
    let route = unsafe { &(*client).route.addr };
    assert_eq!(route_addr(&route.__bindgen_anon_1).ip(), ip("fd00:77::2"));
    assert_eq!(
        route_addr(&route.__bindgen_anon_2),
        SocketAddr::new(ip("fd00:77::1"), PORT)
    );
    assert_eq!(unsafe { rdma_get_dst_port(client) }, PORT.to_be());
    assert_eq!(unsafe { rdma_resolve_route(client, 2000) }, 0);
    unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) };
    let cctx = unsafe { (*client).verbs };
    assert!(!cctx.is_null());

    let cap = ibv_qp_cap {
        max_send_wr: 8,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut cattr = ibv_qp_init_attr {
        cap,
        qp_type: IBV_QPT_RC,
        ..Default::default()
    };
    assert_eq!(unsafe { rdma_create_qp(client, null_mut(), &mut cattr) }, 0);
    let (cqp, c_send_cq) = unsafe { ((*client).qp, (*client).send_cq) };
    let mut cbuf = vec![0u8; LEN];
    let cmr = reg(unsafe { (*client).pd }, &mut cbuf);
    let pdata = *b"over IPv6";
    let mut param = rdma_conn_param {
        private_data: pdata.as_ptr().cast(),
        private_data_len: pdata.len() as u8,
        responder_resources: 4,
        initiator_depth: 4,
        ..Default::default()
    };
    assert_eq!(unsafe { rdma_connect(client, &mut param) }, 0);

    // The request on a, with both ends' IPv6 addresses.
    let ev = expect_ok(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    let child = unsafe { (*ev).id };
    unsafe { rdma_ack_cm_event(ev) };
    let route = unsafe { &(*child).route.addr };
    assert_eq!(
        route_addr(&route.__bindgen_anon_1),
        SocketAddr::new(ip("fd00:77::1"), PORT)
    );
    let peer = route_addr(&route.__bindgen_anon_2);
    assert_eq!(peer.ip(), ip("fd00:77::2"));
    assert_eq!(unsafe { rdma_get_dst_port(child) }, peer.port().to_be());
    let sctx = unsafe { (*child).verbs };
    assert!(!sctx.is_null() && sctx != cctx, "the new id is on device a");
    let mut sattr = ibv_qp_init_attr {
        cap,
        qp_type: IBV_QPT_RC,
        ..Default::default()
    };
    assert_eq!(unsafe { rdma_create_qp(child, null_mut(), &mut sattr) }, 0);
    let (sqp, s_recv_cq) = unsafe { ((*child).qp, (*child).recv_cq) };
    let mut sbuf = vec![0u8; LEN];
    let smr = reg(unsafe { (*child).pd }, &mut sbuf);
    let mut srecv = sge(&sbuf, 2048, 64, smr);
    post_recv(sqp, &mut srecv, 300);
    assert_eq!(unsafe { rdma_accept(child, null_mut()) }, 0);
    for _ in 0..2 {
        unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_ESTABLISHED)) };
    }

    // An RDMA Write, then a Send that finds it landed.
    cbuf[..9].copy_from_slice(b"v6 write!");
    let mut csge = sge(&cbuf, 0, 9, cmr);
    let to = sbuf.as_ptr() as u64 + 100;
    let rkey = unsafe { (*smr).rkey };
    post_send(cqp, &mut rdma_wr(1, &mut csge, IBV_WR_RDMA_WRITE, to, rkey));
    assert_eq!(poll_one(c_send_cq).status, IBV_WC_SUCCESS);
    post_send(cqp, &mut send_wr(2, &mut csge, IBV_WR_SEND));
    assert_eq!(poll_one(c_send_cq).status, IBV_WC_SUCCESS);
    let wc = poll_one(s_recv_cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (300, IBV_WC_SUCCESS, IBV_WC_RECV, 9)
    );
    assert_eq!(&sbuf[100..109], b"v6 write!");
    assert_eq!(&sbuf[2048..2057], b"v6 write!");

    assert_eq!(unsafe { rdma_disconnect(client) }, 0);
    for _ in 0..2 {
        unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_DISCONNECTED)) };
    }
    assert_eq!(unsafe { rdma_destroy_id(child) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(smr) }, 0);
    assert_eq!(unsafe { ibv_destroy_qp(sqp) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(cmr) }, 0);
    unsafe { rdma_destroy_qp(client) };
    assert_eq!(unsafe { rdma_destroy_id(client) }, 0);
    assert_eq!(unsafe { rdma_destroy_id(listen) }, 0);
    unsafe { rdma_destroy_event_channel(ch) };
}

/// The family of `rdma_getaddrinfo`'s answer for `node` with hints of `family`.
fn resolved(node: &str, family: c_int) -> SocketAddr {
    let node = CString::new(node).unwrap();
    let service = CString::new("7481").unwrap();
    let hints = rdma_addrinfo {
        ai_family: family,
        ai_flags: RAI_NUMERICHOST as c_int,
        ..Default::default()
    };
    let mut res = null_mut();
    let rc = unsafe { rdma_getaddrinfo(node.as_ptr(), service.as_ptr(), &hints, &mut res) };
    assert_eq!(rc, 0, "rdma_getaddrinfo {node:?}");
    let a = unsafe { &*res };
    let got = unsafe { addr::read(a.ai_dst_addr.cast()) }.unwrap();
    assert_eq!(
        a.ai_family,
        if got.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        }
    );
    assert_eq!(a.ai_port_space, RDMA_PS_TCP as c_int);
    unsafe { rdma_freeaddrinfo(res) };
    got
}

#[test]
fn getaddrinfo_answers_both_families() {
    assert_eq!(
        resolved("fd00:77::1", libc::AF_UNSPEC),
        SocketAddr::new(ip("fd00:77::1"), 7481)
    );
    assert_eq!(
        resolved("fd00:77::1", libc::AF_INET6),
        SocketAddr::new(ip("fd00:77::1"), 7481)
    );
    assert_eq!(
        resolved("10.78.0.2", libc::AF_UNSPEC),
        SocketAddr::new(ip("10.78.0.2"), 7481)
    );
    let node = CString::new("fd00:77::1").unwrap();
    let hints = rdma_addrinfo {
        ai_family: libc::AF_INET,
        ai_flags: RAI_NUMERICHOST as c_int,
        ..Default::default()
    };
    let mut res = null_mut();
    let rc = unsafe { rdma_getaddrinfo(node.as_ptr(), null_mut(), &hints, &mut res) };
    assert_ne!(rc, 0, "an IPv6 literal is no IPv4 address");
    let hints = rdma_addrinfo {
        ai_family: libc::AF_IB,
        ..Default::default()
    };
    let rc = unsafe { rdma_getaddrinfo(node.as_ptr(), null_mut(), &hints, &mut res) };
    assert_eq!(rc, libc::EAI_FAMILY);
}
