//! The libraries end to end in one process, over the in-process software link between two
//! devices (`a` and `b`, no DPDK): devices and queries, rdma_cm connection setup with
//! private data, RDMA Write, Send and RDMA Read between buffers of this process's heap,
//! completions through channels, disconnect with flushed receives, teardown.
//!
//! The test calls the exported C functions as an application would, so it is unsafe code.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

mod common;

use std::ffi::CStr;
use std::os::raw::c_void;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use rdma_dataplane::abi::*;
use rdma_dataplane::cm::connect::*;
use rdma_dataplane::cm::events::*;
use rdma_dataplane::cm::id::*;
use rdma_dataplane::cm::qp::*;
use rdma_dataplane::verbs::cq::*;
use rdma_dataplane::verbs::device::*;
use rdma_dataplane::verbs::memory::*;
use rdma_dataplane::verbs::qp::*;

use common::{
    expect_event, nonblocking, poll_one, post_recv, post_send, reg, sge, signaled, sockaddr,
    use_config,
};

const CONFIG: &str = r#"
[poll]
burst = 32

[[ports]]
name = "a"
backend = "soft"
device = "librdma-loopback"
mac = "02:00:00:00:0a:01"
ipv4 = "10.77.0.1/24"
rx_desc = 4096

[[ports]]
name = "b"
backend = "soft"
device = "librdma-loopback"
mac = "02:00:00:00:0a:02"
ipv4 = "10.77.0.2/24"
rx_desc = 4096
"#;

const PORT: u16 = 7471;
const LEN: usize = 4096;

#[test]
fn two_devices_connect_write_send_read_and_disconnect() {
    let dir = use_config("librdma-loopback", CONFIG);

    // Devices, as ibv_devices / ibv_devinfo see them.
    let mut n = 0;
    let list = unsafe { ibv_get_device_list(&mut n) };
    assert_eq!(n, 2);
    let names: Vec<String> = (0..2)
        .map(|i| {
            unsafe { CStr::from_ptr(ibv_get_device_name(*list.add(i))) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names, ["a", "b"]);
    // EUI-64 of 02:00:00:00:0a:01.
    assert_eq!(
        u64::from_be(unsafe { ibv_get_device_guid(*list) }),
        0x0000_00ff_fe00_0a01
    );
    let ctx = unsafe { ibv_open_device(*list) };
    assert!(!ctx.is_null());
    let mut dattr = ibv_device_attr::default();
    assert_eq!(unsafe { ibv_query_device(ctx, &mut dattr) }, 0);
    assert_eq!((dattr.vendor_id, dattr.phys_port_cnt), (0x626d74, 1));
    let mut pattr = ibv_port_attr::default();
    assert_eq!(unsafe { ibv_query_port(ctx, 1, &mut pattr) }, 0);
    assert_eq!(
        (pattr.state, pattr.link_layer),
        (IBV_PORT_ACTIVE, IBV_LINK_LAYER_ETHERNET as u8)
    );
    assert_eq!(unsafe { ibv_query_port(ctx, 2, &mut pattr) }, libc::EINVAL);
    let mut gid = ibv_gid::default();
    assert_eq!(unsafe { ibv_query_gid(ctx, 1, 0, &mut gid) }, 0);
    assert_eq!(unsafe { &gid.raw[..6] }, &[2, 0, 0, 0, 0x0a, 1]);
    assert_eq!(unsafe { ibv_close_device(ctx) }, 0);
    unsafe { ibv_free_device_list(list) };

    // Connection setup: a listener on a, a client on b, one event channel.
    let ch = unsafe { rdma_create_event_channel() };
    assert!(!ch.is_null());
    nonblocking(unsafe { (*ch).fd });
    let mut listen = null_mut();
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut listen, null_mut(), RDMA_PS_TCP) },
        0
    );
    let mut sa = sockaddr([10, 77, 0, 1], PORT);
    assert_eq!(
        unsafe { rdma_bind_addr(listen, (&mut sa as *mut libc::sockaddr_in).cast()) },
        0
    );
    assert_eq!(unsafe { rdma_listen(listen, 4) }, 0);
    assert_eq!(unsafe { rdma_get_src_port(listen) }, PORT.to_be());

    let mut client = null_mut();
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut client, 7 as *mut c_void, RDMA_PS_TCP) },
        0
    );
    let mut dst = sockaddr([10, 77, 0, 1], PORT);
    assert_eq!(
        unsafe {
            rdma_resolve_addr(
                client,
                null_mut(),
                (&mut dst as *mut libc::sockaddr_in).cast(),
                2000,
            )
        },
        0
    );
    let ev = expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
    assert_eq!(unsafe { (*ev).id }, client);
    unsafe { rdma_ack_cm_event(ev) };
    assert_eq!(unsafe { rdma_resolve_route(client, 2000) }, 0);
    unsafe { rdma_ack_cm_event(expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) };
    let cctx = unsafe { (*client).verbs };
    assert!(!cctx.is_null(), "the client id is on device b");

    // Client resources: its own CQ and channel, a QP through rdma_create_qp.
    let cpd = unsafe { ibv_alloc_pd(cctx) };
    let cch = unsafe { ibv_create_comp_channel(cctx) };
    let ccq = unsafe { ibv_create_cq(cctx, 16, 9 as *mut c_void, cch, 0) };
    assert!(!ccq.is_null());
    let mut qattr = ibv_qp_init_attr {
        send_cq: ccq,
        recv_cq: ccq,
        cap: ibv_qp_cap {
            max_send_wr: 8,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: IBV_QPT_RC,
        ..Default::default()
    };
    assert_eq!(unsafe { rdma_create_qp(client, cpd, &mut qattr) }, 0);
    let cqp = unsafe { (*client).qp };
    let mut cbuf = vec![0u8; LEN];
    let cmr = reg(cpd, &mut cbuf);
    let mut crecv = sge(&cbuf, 2048, 64, cmr);
    post_recv(cqp, &mut crecv, 100);
    post_recv(cqp, &mut crecv, 101);
    let pdata = *b"hello from b";
    let mut param = rdma_conn_param {
        private_data: pdata.as_ptr().cast(),
        private_data_len: pdata.len() as u8,
        responder_resources: 4,
        initiator_depth: 4,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    };
    assert_eq!(unsafe { rdma_connect(client, &mut param) }, 0);

    // The request on a: a new id with the private data; the library makes the CQs.
    let ev = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    let (child, listen_id, pd_len) =
        unsafe { ((*ev).id, (*ev).listen_id, (*ev).param.conn.private_data_len) };
    assert_eq!(listen_id, listen);
    let got = unsafe {
        std::slice::from_raw_parts(
            (*ev).param.conn.private_data.cast::<u8>(),
            usize::from(pd_len),
        )
    };
    assert_eq!(got, pdata);
    unsafe { rdma_ack_cm_event(ev) };
    let sctx = unsafe { (*child).verbs };
    assert!(!sctx.is_null() && sctx != cctx, "the new id is on device a");
    let mut sattr = ibv_qp_init_attr {
        cap: qattr.cap,
        qp_type: IBV_QPT_RC,
        ..Default::default()
    };
    assert_eq!(unsafe { rdma_create_qp(child, null_mut(), &mut sattr) }, 0);
    let sqp = unsafe { (*child).qp };
    let (s_send_cq, s_recv_cq) = unsafe { ((*child).send_cq, (*child).recv_cq) };
    assert!(!s_send_cq.is_null() && s_send_cq != s_recv_cq);
    assert_eq!(
        unsafe { (*s_send_cq).cq_context },
        child.cast(),
        "cq_context is the id"
    );
    let mut sbuf = vec![0u8; LEN];
    let smr = reg(unsafe { (*child).pd }, &mut sbuf);
    let mut srecv = sge(&sbuf, 3072, 64, smr);
    post_recv(sqp, &mut srecv, 200);
    post_recv(sqp, &mut srecv, 201);
    assert_eq!(unsafe { rdma_accept(child, null_mut()) }, 0);

    let mut established = 0;
    while established < 2 {
        let ev = expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);
        let id = unsafe { (*ev).id };
        assert!(id == client || id == child);
        unsafe { rdma_ack_cm_event(ev) };
        established += 1;
    }

    // RDMA Write from b's heap into a's heap, by address and rkey (RFC 5040 §4.3).
    cbuf[..11].copy_from_slice(b"written by ");
    cbuf[11] = b'b';
    let mut wsge = sge(&cbuf, 0, 12, cmr);
    let remote = (sbuf.as_ptr() as u64 + 100, unsafe { (*smr).rkey });
    post_send(
        cqp,
        &mut signaled(1, &mut wsge, IBV_WR_RDMA_WRITE, Some(remote)),
    );
    let wc = poll_one(ccq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE)
    );

    // A Send tells a; a's receive completes with the length.
    let mut ssge = sge(&cbuf, 0, 12, cmr);
    post_send(cqp, &mut signaled(2, &mut ssge, IBV_WR_SEND, None));
    assert_eq!(poll_one(ccq).status, IBV_WC_SUCCESS);
    let wc = poll_one(s_recv_cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (200, IBV_WC_SUCCESS, IBV_WC_RECV, 12)
    );
    assert_eq!(
        &sbuf[100..112],
        b"written by b",
        "the Write landed before the Send"
    );
    assert_eq!(&sbuf[3072..3084], b"written by b");

    // RDMA Read: a reads b's buffer into its own.
    cbuf[512..520].copy_from_slice(b"readable");
    let mut rsge = sge(&sbuf, 1024, 8, smr);
    let remote = (cbuf.as_ptr() as u64 + 512, unsafe { (*cmr).rkey });
    post_send(
        sqp,
        &mut signaled(3, &mut rsge, IBV_WR_RDMA_READ, Some(remote)),
    );
    let wc = poll_one(s_send_cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (3, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 8)
    );
    assert_eq!(&sbuf[1024..1032], b"readable");

    // Disconnect: both sides get DISCONNECTED, the receives still posted are flushed and an
    // armed channel fires.
    nonblocking(unsafe { (*cch).fd });
    assert_eq!(unsafe { req_notify_cq(ccq, 0) }, 0);
    assert_eq!(unsafe { rdma_disconnect(client) }, 0);
    let mut disconnected = 0;
    while disconnected < 2 {
        let ev = expect_event(ch, RDMA_CM_EVENT_DISCONNECTED);
        unsafe { rdma_ack_cm_event(ev) };
        disconnected += 1;
    }
    for wr_id in [100, 101] {
        let wc = poll_one(ccq);
        assert_eq!((wc.wr_id, wc.status), (wr_id, IBV_WC_WR_FLUSH_ERR));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut ecq, mut ectx) = (null_mut(), null_mut());
    while unsafe { ibv_get_cq_event(cch, &mut ecq, &mut ectx) } != 0 {
        assert!(Instant::now() < deadline, "no completion event");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!((ecq, ectx), (ccq, 9 as *mut c_void));
    unsafe { ibv_ack_cq_events(ecq, 1) };
    let wc = poll_one(s_recv_cq);
    assert_eq!((wc.wr_id, wc.status), (201, IBV_WC_WR_FLUSH_ERR));

    // Teardown in rping's order: the new id before its QP.
    assert_eq!(unsafe { rdma_destroy_id(child) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(smr) }, 0);
    assert_eq!(unsafe { ibv_destroy_qp(sqp) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(cmr) }, 0);
    unsafe { rdma_destroy_qp(client) };
    assert_eq!(unsafe { ibv_destroy_cq(ccq) }, 0);
    assert_eq!(unsafe { ibv_destroy_comp_channel(cch) }, 0);
    assert_eq!(unsafe { ibv_dealloc_pd(cpd) }, 0);
    assert_eq!(unsafe { rdma_destroy_id(client) }, 0);
    assert_eq!(unsafe { rdma_destroy_id(listen) }, 0);
    unsafe { rdma_destroy_event_channel(ch) };
    let _ = std::fs::remove_dir_all(&dir);
}
