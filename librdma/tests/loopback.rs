//! The libraries end to end in one process, over the in-process software link between two
//! devices (`a` and `b`, no DPDK): devices and queries, rdma_cm connection setup with
//! private data, RDMA Write, Send and RDMA Read between buffers of this process's heap,
//! completions through channels, disconnect with flushed receives, teardown; async events
//! of a Write to an invalid STag on both sides; a Send that still arrives when its QP and
//! id are destroyed right after its completion; two connections sharing one S-RQ.
//!
//! The test calls the exported C functions as an application would, so it is unsafe code.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

mod common;

use common::*;
use common::{post_recv, post_send};
use rdma_dataplane::abi::*;
use rdma_dataplane::cm::connect::*;
use rdma_dataplane::cm::events::*;
use rdma_dataplane::cm::id::*;
use rdma_dataplane::cm::qp::*;
use rdma_dataplane::verbs::cq::*;
use rdma_dataplane::verbs::device::*;
use rdma_dataplane::verbs::memory::*;
use rdma_dataplane::verbs::qp::*;
use rdma_dataplane::verbs::srq::*;

const PORT: u16 = 7471;
const LEN: usize = 4096;

/// Two connected ids and their resources (see [`connect`]).
struct Conn {
    ch: *mut rdma_event_channel,
    listen: *mut rdma_cm_id,
    client: *mut rdma_cm_id,
    child: *mut rdma_cm_id,
    cctx: *mut ibv_context,
    cpd: *mut ibv_pd,
    cch: *mut ibv_comp_channel,
    ccq: *mut ibv_cq,
    cqp: *mut ibv_qp,
    cmr: *mut ibv_mr,
    cbuf: Box<[u8]>,
    sqp: *mut ibv_qp,
    s_send_cq: *mut ibv_cq,
    s_recv_cq: *mut ibv_cq,
    smr: *mut ibv_mr,
    sbuf: Box<[u8]>,
}

/// Connection setup on `port`: a listener on a, a client on b with receives 100 and 101
/// posted, one event channel; the request accepted on a with receives 200 and 201 posted;
/// both sides established.
fn connect(port: u16) -> Conn {
    let ch = unsafe { rdma_create_event_channel() };
    assert!(!ch.is_null());
    nonblocking(unsafe { (*ch).fd });
    let mut listen = null_mut();
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut listen, null_mut(), RDMA_PS_TCP) },
        0
    );
    let mut sa = sockaddr([10, 77, 0, 1], port);
    assert_eq!(
        unsafe { rdma_bind_addr(listen, (&mut sa as *mut libc::sockaddr_in).cast()) },
        0
    );
    assert_eq!(unsafe { rdma_listen(listen, 4) }, 0);
    assert_eq!(unsafe { rdma_get_src_port(listen) }, port.to_be());

    let mut client = null_mut();
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut client, 7 as *mut c_void, RDMA_PS_TCP) },
        0
    );
    let mut dst = sockaddr([10, 77, 0, 1], port);
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
    let ev = expect_ok(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
    assert_eq!(unsafe { (*ev).id }, client);
    unsafe { rdma_ack_cm_event(ev) };
    assert_eq!(unsafe { rdma_resolve_route(client, 2000) }, 0);
    unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) };
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
    let mut cbuf = vec![0u8; LEN].into_boxed_slice();
    let access =
        (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE) as c_int;
    let cmr = unsafe { ibv_reg_mr(cpd, cbuf.as_mut_ptr().cast(), LEN, access) };
    assert!(!cmr.is_null());
    let mut crecv = ibv_sge {
        addr: cbuf.as_ptr() as u64 + 2048,
        length: 64,
        lkey: unsafe { (*cmr).lkey },
    };
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
    let ev = expect_ok(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
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
    let mut sbuf = vec![0u8; LEN].into_boxed_slice();
    let smr = unsafe { ibv_reg_mr((*child).pd, sbuf.as_mut_ptr().cast(), LEN, access) };
    assert!(!smr.is_null());
    let mut srecv = ibv_sge {
        addr: sbuf.as_ptr() as u64 + 3072,
        length: 64,
        lkey: unsafe { (*smr).lkey },
    };
    post_recv(sqp, &mut srecv, 200);
    post_recv(sqp, &mut srecv, 201);
    assert_eq!(unsafe { rdma_accept(child, null_mut()) }, 0);

    let mut established = 0;
    while established < 2 {
        let ev = expect_ok(ch, RDMA_CM_EVENT_ESTABLISHED);
        let id = unsafe { (*ev).id };
        assert!(id == client || id == child);
        unsafe { rdma_ack_cm_event(ev) };
        established += 1;
    }
    Conn {
        ch,
        listen,
        client,
        child,
        cctx,
        cpd,
        cch,
        ccq,
        cqp,
        cmr,
        cbuf,
        sqp,
        s_send_cq,
        s_recv_cq,
        smr,
        sbuf,
    }
}

/// Teardown in rping's order (the new id before its QP).
fn teardown(c: Conn) {
    assert_eq!(unsafe { rdma_destroy_id(c.child) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(c.smr) }, 0);
    assert_eq!(unsafe { ibv_destroy_qp(c.sqp) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(c.cmr) }, 0);
    unsafe { rdma_destroy_qp(c.client) };
    assert_eq!(unsafe { ibv_destroy_cq(c.ccq) }, 0);
    assert_eq!(unsafe { ibv_destroy_comp_channel(c.cch) }, 0);
    assert_eq!(unsafe { ibv_dealloc_pd(c.cpd) }, 0);
    assert_eq!(unsafe { rdma_destroy_id(c.client) }, 0);
    assert_eq!(unsafe { rdma_destroy_id(c.listen) }, 0);
    unsafe { rdma_destroy_event_channel(c.ch) };
}

/// Points `DATAPLANE_CONFIG` at the two-device configuration; the libraries read it once,
/// at their first use.
fn configure() {
    use_config(
        "librdma-loopback",
        &two_soft_ports("librdma-loopback", 0x0a, [10, 77, 0]),
    )
}

#[test]
fn two_devices_connect_write_send_read_and_disconnect() {
    configure();

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

    let mut c = connect(PORT);
    let (ch, client, ccq, cqp, cmr, cch) = (c.ch, c.client, c.ccq, c.cqp, c.cmr, c.cch);
    let (sqp, s_send_cq, s_recv_cq, smr) = (c.sqp, c.s_send_cq, c.s_recv_cq, c.smr);

    // RDMA Write from b's heap into a's heap, by address and rkey (RFC 5040 §4.3).
    c.cbuf[..11].copy_from_slice(b"written by ");
    c.cbuf[11] = b'b';
    let mut wsge = sge(&c.cbuf, 0, 12, cmr);
    let to = c.sbuf.as_ptr() as u64 + 100;
    let mut wr = rdma_wr(1, &mut wsge, IBV_WR_RDMA_WRITE, to, unsafe { (*smr).rkey });
    post_send(cqp, &mut wr);
    let wc = poll_one(ccq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE)
    );

    // A Send tells a; a's receive completes with the length.
    let mut ssge = sge(&c.cbuf, 0, 12, cmr);
    let mut swr = send_wr(2, &mut ssge, IBV_WR_SEND);
    post_send(cqp, &mut swr);
    assert_eq!(poll_one(ccq).status, IBV_WC_SUCCESS);
    let wc = poll_one(s_recv_cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (200, IBV_WC_SUCCESS, IBV_WC_RECV, 12)
    );
    assert_eq!(
        &c.sbuf[100..112],
        b"written by b",
        "the Write landed before the Send"
    );
    assert_eq!(&c.sbuf[3072..3084], b"written by b");

    // RDMA Read: a reads b's buffer into its own.
    c.cbuf[512..520].copy_from_slice(b"readable");
    let mut rsge = sge(&c.sbuf, 1024, 8, smr);
    let from = c.cbuf.as_ptr() as u64 + 512;
    let mut rwr = rdma_wr(3, &mut rsge, IBV_WR_RDMA_READ, from, unsafe { (*cmr).rkey });
    post_send(sqp, &mut rwr);
    let wc = poll_one(s_send_cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (3, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 8)
    );
    assert_eq!(&c.sbuf[1024..1032], b"readable");

    // Disconnect: both sides get DISCONNECTED, the receives still posted are flushed and an
    // armed channel fires.
    nonblocking(unsafe { (*cch).fd });
    assert_eq!(unsafe { req_notify_cq(ccq, 0) }, 0);
    assert_eq!(unsafe { rdma_disconnect(client) }, 0);
    let mut disconnected = 0;
    while disconnected < 2 {
        let ev = expect_ok(ch, RDMA_CM_EVENT_DISCONNECTED);
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

    teardown(c);
}

// The data plane's handler takes the RNIC's async events and keeps them for the libraries,
// which deliver them to ibv_get_async_event: an RDMA Write to an invalid STag is an access
// error on the responder's QP (which sends a Terminate) and a fatal error on the
// requester's (Terminate received).
#[test]
fn a_write_to_an_invalid_stag_is_an_async_event_on_both_sides() {
    configure();
    let c = connect(PORT + 1);
    let sctx = unsafe { (*c.child).verbs };
    let mut wsge = ibv_sge {
        addr: c.cbuf.as_ptr() as u64,
        length: 8,
        lkey: unsafe { (*c.cmr).lkey },
    };
    let mut wr = ibv_send_wr {
        wr_id: 1,
        sg_list: &mut wsge,
        num_sge: 1,
        opcode: IBV_WR_RDMA_WRITE,
        send_flags: IBV_SEND_SIGNALED,
        ..Default::default()
    };
    wr.wr.rdma.remote_addr = c.sbuf.as_ptr() as u64;
    wr.wr.rdma.rkey = unsafe { (*c.smr).rkey } ^ 0x100;
    post_send(c.cqp, &mut wr);
    let ev = next_async_event(sctx);
    assert_eq!(
        (ev.event_type, unsafe { ev.element.qp }),
        (IBV_EVENT_QP_ACCESS_ERR, c.sqp)
    );
    let ev = next_async_event(c.cctx);
    assert_eq!(
        (ev.event_type, unsafe { ev.element.qp }),
        (IBV_EVENT_QP_FATAL, c.cqp)
    );
    // The Write itself completed when it was sent (RFC 5040: the requester learns of the
    // error from the Terminate, as the async event above).
    assert_eq!(poll_one(c.ccq).wr_id, 1);

    teardown(c);
}

// perftest's last handshake with `-R`: a Send whose completion the sender polls, then its
// QP and id destroyed at once, without rdma_disconnect, and the process exits. Linux siw
// releases the QP's socket (tcp_close: what was written still goes out, then a FIN), and
// the peer relies on that to receive the Send. VERBS-00 §6.1.4: Destroy QP disassociates
// the LLP and "may" reset it; the library releases it the way Linux does: the peer's
// receive completes, it sees DISCONNECTED and its connection closed gracefully, without
// the fatal async event a reset brings (VERBS-00 §6.2.4).
#[test]
fn a_send_completed_just_before_its_qp_and_id_are_destroyed_still_arrives() {
    configure();
    let c = connect(PORT + 3);
    let sctx = unsafe { (*c.child).verbs };
    let mut cbuf = c.cbuf;
    cbuf[..64].copy_from_slice(&[0x5a; 64]);
    let mut ssge = sge(&cbuf, 0, 64, c.cmr);
    let mut swr = send_wr(7, &mut ssge, IBV_WR_SEND);
    post_send(c.cqp, &mut swr);
    let wc = poll_one(c.ccq);
    assert_eq!((wc.wr_id, wc.status), (7, IBV_WC_SUCCESS));
    unsafe { rdma_destroy_qp(c.client) };
    assert_eq!(unsafe { rdma_destroy_id(c.client) }, 0);

    let wc = poll_one(c.s_recv_cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (200, IBV_WC_SUCCESS, IBV_WC_RECV, 64)
    );
    assert_eq!(&c.sbuf[3072..3136], &[0x5a; 64]);
    let ev = expect_ok(c.ch, RDMA_CM_EVENT_DISCONNECTED);
    assert_eq!(unsafe { (*ev).id }, c.child);
    unsafe { rdma_ack_cm_event(ev) };
    // A graceful close flushes the receive still posted (VERBS-00 §6.2.5) and raises no
    // async event; a reset would have raised IBV_EVENT_QP_FATAL.
    let wc = poll_one(c.s_recv_cq);
    assert_eq!((wc.wr_id, wc.status), (201, IBV_WC_WR_FLUSH_ERR));
    if let Some(ev) = try_async_event(sctx, Duration::from_millis(300)) {
        panic!("async event {} on the peer", ev.event_type);
    }

    assert_eq!(unsafe { rdma_destroy_id(c.child) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(c.smr) }, 0);
    assert_eq!(unsafe { ibv_destroy_qp(c.sqp) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(c.cmr) }, 0);
    assert_eq!(unsafe { ibv_destroy_cq(c.ccq) }, 0);
    assert_eq!(unsafe { ibv_destroy_comp_channel(c.cch) }, 0);
    assert_eq!(unsafe { ibv_dealloc_pd(c.cpd) }, 0);
    assert_eq!(unsafe { rdma_destroy_id(c.listen) }, 0);
    unsafe { rdma_destroy_event_channel(c.ch) };
}

/// One client on b: its id (routed toward `port` on a), PD, CQ, QP, registered buffer.
struct Client {
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    mr: *mut ibv_mr,
    buf: Box<[u8]>,
}

fn client(ch: *mut rdma_event_channel, port: u16) -> Client {
    let id = create_id(ch);
    let mut dst = sockaddr([10, 77, 0, 1], port);
    assert_eq!(
        unsafe { rdma_resolve_addr(id, null_mut(), sa(&mut dst), 2000) },
        0
    );
    unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_ADDR_RESOLVED)) };
    assert_eq!(unsafe { rdma_resolve_route(id, 2000) }, 0);
    unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) };
    let pd = unsafe { ibv_alloc_pd((*id).verbs) };
    let cq = unsafe { ibv_create_cq((*id).verbs, 16, null_mut(), null_mut(), 0) };
    assert!(!pd.is_null() && !cq.is_null());
    let mut qattr = rc_attr(cq, qp_caps(8, 1));
    assert_eq!(unsafe { rdma_create_qp(id, pd, &mut qattr) }, 0);
    let mut buf = vec![0u8; LEN].into_boxed_slice();
    let mr = reg(pd, &mut buf);
    Client {
        id,
        pd,
        cq,
        qp: unsafe { (*id).qp },
        mr,
        buf,
    }
}

// VERBS-00 §6.3.5 through the libraries: two connections whose QPs on a share one S-RQ
// (ibv_create_srq, ibv_post_srq_recv) holding exactly as many receives as Sends arrive;
// both clients send, and each Send completes on the receive CQ of the QP it arrived on,
// with its bytes in the receive buffer its completion names. The S-RQ's receives are not
// taken ahead by whichever QP came first.
#[test]
fn two_connections_share_one_srq() {
    const SENDS: usize = 2;
    configure();
    let port = PORT + 2;
    let ch = channel();
    let listen = create_id(ch);
    let mut at = sockaddr([10, 77, 0, 1], port);
    assert_eq!(unsafe { rdma_bind_addr(listen, sa(&mut at)) }, 0);
    assert_eq!(unsafe { rdma_listen(listen, 4) }, 0);
    let mut clients = [client(ch, port), client(ch, port)];
    for (i, c) in clients.iter().enumerate() {
        let pdata = [i as u8];
        let mut param = rdma_conn_param {
            private_data: pdata.as_ptr().cast(),
            private_data_len: 1,
            ..Default::default()
        };
        assert_eq!(unsafe { rdma_connect(c.id, &mut param) }, 0);
    }

    // Both requests on a; the S-RQ on the first one's device and PD, every receive posted
    // before either QP exists.
    let mut requests = Vec::new();
    for _ in 0..2 {
        let ev = expect_ok(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
        requests.push((unsafe { (*ev).id }, private_data(ev)[0] as usize));
        unsafe { rdma_ack_cm_event(ev) };
    }
    requests.sort_by_key(|&(_, i)| i);
    let pd = unsafe { (*requests[0].0).pd };
    let mut sbuf = vec![0u8; LEN].into_boxed_slice();
    let smr = reg(pd, &mut sbuf);
    let mut attr = ibv_srq_init_attr {
        attr: ibv_srq_attr {
            max_wr: (2 * SENDS) as u32,
            max_sge: 1,
            srq_limit: 0,
        },
        ..Default::default()
    };
    let srq = unsafe { ibv_create_srq(pd, &mut attr) };
    assert!(!srq.is_null());
    let mut sges: Vec<ibv_sge> = (0..2 * SENDS)
        .map(|k| sge(&sbuf, k * 256, 256, smr))
        .collect();
    let mut wrs: Vec<ibv_recv_wr> = sges
        .iter_mut()
        .enumerate()
        .map(|(k, s)| recv_wr(300 + k as u64, s))
        .collect();
    for k in 1..wrs.len() {
        let next: *mut ibv_recv_wr = &mut wrs[k];
        wrs[k - 1].next = next;
    }
    let mut bad = null_mut();
    let ops = unsafe { &(*(*srq).context).ops };
    assert_eq!(
        unsafe { ops.post_srq_recv.unwrap()(srq, &mut wrs[0], &mut bad) },
        0
    );
    // Each QP with a CQ of its own (a CQ the library made would be sized by the QP's
    // receive queue, which an S-RQ replaces: librdmacm's rdma_create_qp(3) does the same).
    let mut server = Vec::new();
    for &(child, _) in &requests {
        let cq = unsafe { ibv_create_cq((*child).verbs, 16, null_mut(), null_mut(), 0) };
        assert!(!cq.is_null());
        let mut qattr = ibv_qp_init_attr {
            srq,
            ..rc_attr(cq, qp_caps(8, 0))
        };
        assert_eq!(unsafe { rdma_create_qp(child, pd, &mut qattr) }, 0);
        server.push((child, unsafe { (*child).qp }, cq));
        assert_eq!(unsafe { rdma_accept(child, null_mut()) }, 0);
    }
    for _ in 0..4 {
        unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_ESTABLISHED)) };
    }

    // Each client sends SENDS messages of 100 bytes, filled with 0x10 * (client + 1) + k.
    let fill = |i: usize, k: usize| (0x10 * (i + 1) + k) as u8;
    for (i, c) in clients.iter_mut().enumerate() {
        for k in 0..SENDS {
            c.buf[k * 128..][..100].fill(fill(i, k));
        }
        for k in 0..SENDS {
            let mut s = sge(&c.buf, k * 128, 100, c.mr);
            let mut wr = send_wr(k as u64, &mut s, IBV_WR_SEND);
            post_send(c.qp, &mut wr);
        }
    }
    for c in &clients {
        for wc in poll_n(c.cq, SENDS) {
            assert_eq!((wc.status, wc.opcode), (IBV_WC_SUCCESS, IBV_WC_SEND));
        }
    }
    for (i, &(_, qp, cq)) in server.iter().enumerate() {
        let wcs = poll_n(cq, SENDS);
        for (k, wc) in wcs.iter().enumerate() {
            assert_eq!(
                (wc.status, wc.opcode, wc.byte_len, wc.qp_num),
                (IBV_WC_SUCCESS, IBV_WC_RECV, 100, unsafe { (*qp).qp_num }),
                "QP {i} Send {k}"
            );
            let slot = (wc.wr_id - 300) as usize;
            assert_eq!(
                &sbuf[slot * 256..][..100],
                &[fill(i, k); 100],
                "QP {i} Send {k}"
            );
        }
    }

    for (child, qp, cq) in server {
        assert_eq!(unsafe { rdma_destroy_id(child) }, 0);
        assert_eq!(unsafe { ibv_destroy_qp(qp) }, 0);
        assert_eq!(unsafe { ibv_destroy_cq(cq) }, 0);
    }
    assert_eq!(unsafe { ibv_destroy_srq(srq) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(smr) }, 0);
    for c in clients {
        assert_eq!(unsafe { ibv_dereg_mr(c.mr) }, 0);
        unsafe { rdma_destroy_qp(c.id) };
        assert_eq!(unsafe { ibv_destroy_cq(c.cq) }, 0);
        assert_eq!(unsafe { ibv_dealloc_pd(c.pd) }, 0);
        assert_eq!(unsafe { rdma_destroy_id(c.id) }, 0);
    }
    assert_eq!(unsafe { rdma_destroy_id(listen) }, 0);
    unsafe { rdma_destroy_event_channel(ch) };
}
