//! The libraries on two lanes, in one process over the in-process software link with two
//! queue pairs (`a` and `b`, no DPDK): connections spread over both lanes (each QP's
//! connection on the lane its 4-tuple hashes to, on both ends), a CQ shared by QPs of both
//! lanes on each side, a region registered once and written through connections of both
//! lanes, every byte verified, the per-lane counters, and a deregistration every lane
//! honours.
//!
//! The test calls the exported C functions as an application would, so it is unsafe code.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

use std::collections::BTreeSet;
use std::os::raw::c_void;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

mod common;

use common::*;
use common::{post_recv, post_send};
use rdma_dataplane::abi::*;
use rdma_dataplane::cm::connect::*;
use rdma_dataplane::cm::events::*;
use rdma_dataplane::cm::id::*;
use rdma_dataplane::cm::objects::id_obj;
use rdma_dataplane::cm::qp::*;
use rdma_dataplane::runtime::runtime;
use rdma_dataplane::verbs::cq::*;
use rdma_dataplane::verbs::memory::*;
use rdma_dataplane::verbs::objects::{obj, Qp, Srq};
use rdma_dataplane::verbs::qp::*;
use rdma_dataplane::verbs::srq::*;

const PORT: u16 = 7481;
/// Connections: two per lane.
const CONNS: usize = 4;
/// Octets each connection writes.
const CHUNK: usize = 64 << 10;

/// Two soft ports joined in this process, two queue pairs (lanes) each.
fn configure() {
    let cfg = two_soft_ports("librdma-lanes", 0x0b, [10, 78, 0])
        .replace("rx_desc = 4096\n", "rx_desc = 4096\nqueues = 2\n");
    use_config("librdma-lanes", &cfg)
}

/// The lane `qp` lives on.
fn lane_of(qp: *mut ibv_qp) -> usize {
    unsafe { obj::<ibv_qp, Qp>(qp) }.unwrap().shared.lane
}

/// Resolves `client`'s address and route to the server (device a) at `port`.
fn resolve(ch: *mut rdma_event_channel, client: *mut rdma_cm_id, port: u16) {
    let mut dst = sockaddr([10, 78, 0, 1], port);
    assert_eq!(
        unsafe { rdma_resolve_addr(client, null_mut(), common::sa(&mut dst), 2000) },
        0
    );
    unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_ADDR_RESOLVED)) };
    assert_eq!(unsafe { rdma_resolve_route(client, 2000) }, 0);
    unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) };
}

#[test]
fn connections_spread_over_two_lanes_share_cqs_and_registrations() {
    configure();
    let ch = channel();
    let listen = new_id(ch, null_mut());
    let mut sa = sockaddr([10, 78, 0, 1], PORT);
    assert_eq!(unsafe { rdma_bind_addr(listen, common::sa(&mut sa)) }, 0);
    assert_eq!(unsafe { rdma_listen(listen, 8) }, 0);

    // Server (device a): one CQ for every accepted QP, one region for every connection.
    let (sctx, spd) = unsafe { ((*listen).verbs, (*listen).pd) };
    assert!(!sctx.is_null() && !spd.is_null());
    let scq = unsafe { ibv_create_cq(sctx, 64, null_mut(), null_mut(), 0) };
    assert!(!scq.is_null());
    let mut sbuf = vec![0u8; CONNS * CHUNK].into_boxed_slice();
    let smr = reg(spd, &mut sbuf);
    let mut srecv = vec![0u8; CONNS * 64].into_boxed_slice();
    let srecv_mr = reg(spd, &mut srecv);

    let mut clients = Vec::new();
    let mut children = Vec::new();
    let (mut cpd, mut ccq) = (null_mut(), null_mut());
    for k in 0..CONNS {
        let client = new_id(ch, k as *mut c_void);
        resolve(ch, client, PORT);
        if k == 0 {
            // Client (device b): one PD and one CQ for every QP.
            let cctx = unsafe { (*client).verbs };
            cpd = unsafe { ibv_alloc_pd(cctx) };
            ccq = unsafe { ibv_create_cq(cctx, 64, null_mut(), null_mut(), 0) };
            assert!(!cpd.is_null() && !ccq.is_null());
        }
        let mut attr = rc_attr(ccq, qp_caps(8, 4));
        assert_eq!(unsafe { rdma_create_qp(client, cpd, &mut attr) }, 0);
        assert_eq!(unsafe { rdma_connect(client, null_mut()) }, 0);

        let ev = expect_ok(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
        let child = unsafe { (*ev).id };
        unsafe { rdma_ack_cm_event(ev) };
        let mut sattr = rc_attr(scq, qp_caps(8, 4));
        assert_eq!(unsafe { rdma_create_qp(child, spd, &mut sattr) }, 0);
        let mut sge = sge(&srecv, k * 64, 64, srecv_mr);
        post_recv(unsafe { (*child).qp }, &mut sge, 1000 + k as u64);
        assert_eq!(unsafe { rdma_accept(child, null_mut()) }, 0);
        for _ in 0..2 {
            let ev = expect_ok(ch, RDMA_CM_EVENT_ESTABLISHED);
            let id = unsafe { (*ev).id };
            assert!(id == client || id == child);
            unsafe { rdma_ack_cm_event(ev) };
        }
        clients.push(client);
        children.push(child);
    }
    let cqps: Vec<*mut ibv_qp> = clients.iter().map(|&c| unsafe { (*c).qp }).collect();
    let sqps: Vec<*mut ibv_qp> = children.iter().map(|&c| unsafe { (*c).qp }).collect();

    // Active QPs go to the lanes in turn; each request came in, and its QP lives, on the
    // lane of its client's QP (the client picked a port that hashes there).
    let lanes: Vec<usize> = cqps.iter().map(|&q| lane_of(q)).collect();
    assert_eq!(lanes, [0, 1, 0, 1]);
    let slanes: Vec<usize> = sqps.iter().map(|&q| lane_of(q)).collect();
    assert_eq!(slanes, lanes);
    // Each lane's RNIC numbers its QPs alone; the numbers applications see are unique on
    // each device.
    for qps in [&cqps, &sqps] {
        let nums: BTreeSet<u32> = qps.iter().map(|&q| unsafe { (*q).qp_num }).collect();
        assert_eq!(nums.len(), CONNS, "{nums:?}");
    }

    // Each connection writes its own pattern into its part of the one server region, then
    // sends a message; both CQs see completions of QPs of both lanes.
    let mut cbuf: Box<[u8]> = (0..CONNS * CHUNK)
        .map(|i| (i / CHUNK * 61 + i * 7 + i / 251) as u8)
        .collect();
    let cmr = reg(cpd, &mut cbuf);
    for (k, &qp) in cqps.iter().enumerate() {
        let mut wsge = sge(&cbuf, k * CHUNK, CHUNK as u32, cmr);
        let mut wr = write_wr(
            10 + k as u64,
            &mut wsge,
            sbuf.as_ptr() as u64 + (k * CHUNK) as u64,
            unsafe { (*smr).rkey },
            IBV_SEND_SIGNALED,
        );
        post_send(qp, &mut wr);
        let mut msge = sge(&cbuf, k * CHUNK, 8, cmr);
        let mut send = send_wr(20 + k as u64, &mut msge, IBV_WR_SEND);
        post_send(qp, &mut send);
    }
    let cwcs = poll_n(ccq, 2 * CONNS);
    let statuses: Vec<(u64, u32)> = cwcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert!(
        cwcs.iter().all(|w| w.status == IBV_WC_SUCCESS),
        "{statuses:?}"
    );
    let ids: BTreeSet<u64> = cwcs.iter().map(|w| w.wr_id).collect();
    let want: BTreeSet<u64> = (0..CONNS as u64).flat_map(|k| [10 + k, 20 + k]).collect();
    assert_eq!(ids, want);
    let swcs = poll_n(scq, CONNS);
    let mut got_lanes = BTreeSet::new();
    for w in &swcs {
        assert_eq!(
            (w.status, w.opcode, w.byte_len),
            (IBV_WC_SUCCESS, IBV_WC_RECV, 8)
        );
        let k = (w.wr_id - 1000) as usize;
        assert_eq!(w.qp_num, unsafe { (*sqps[k]).qp_num });
        got_lanes.insert(slanes[k]);
        assert_eq!(&srecv[k * 64..k * 64 + 8], &cbuf[k * CHUNK..k * CHUNK + 8]);
    }
    assert_eq!(
        got_lanes,
        BTreeSet::from([0, 1]),
        "one CQ, completions of both lanes"
    );
    // The Sends follow the Writes on each connection: every byte is in place.
    let placed: Vec<u8> = (0..sbuf.len())
        .map(|i| unsafe { sbuf.as_ptr().add(i).read_volatile() })
        .collect();
    assert!(placed == *cbuf, "the written bytes differ");

    // Per-lane counters: both lanes carried connections (both ends of two each), and no
    // segment reached a lane without its connection.
    let core = runtime().unwrap().core().unwrap();
    assert_eq!(core.lanes(), 2);
    let counters = core.lane_counters();
    assert_eq!(counters.len(), 2);
    for (lane, c) in counters.iter().enumerate() {
        let line = c.line();
        assert_eq!(c.established, 4, "lane {lane}: {line}");
        assert_eq!((c.foreign, c.resets_sent), (0, 0), "lane {lane}: {line}");
        assert_eq!(c.aborts, 0, "lane {lane}: {line}");
        assert!(c.fpdus.0 >= 4 && c.fpdus.1 >= 4, "lane {lane}: {line}");
        assert!(c.frames.0 > 0 && c.frames.1 > 0, "lane {lane}: {line}");
    }

    // A CQ or a PD in use by QPs (of any lane) is not destroyed, on no lane.
    assert_eq!(unsafe { ibv_destroy_cq(ccq) }, libc::EBUSY);
    assert_eq!(unsafe { ibv_dealloc_pd(cpd) }, libc::EBUSY);

    // Deregistration: once it returns, a Write through a connection of either lane meets
    // an invalid STag (an access error on the server's QP of that lane).
    let rkey = unsafe { (*smr).rkey };
    assert_eq!(unsafe { ibv_dereg_mr(smr) }, 0);
    for k in [0, 1] {
        let mut wsge = sge(&cbuf, k * CHUNK, 64, cmr);
        let mut wr = write_wr(
            30 + k as u64,
            &mut wsge,
            sbuf.as_ptr() as u64 + (k * CHUNK) as u64,
            rkey,
            IBV_SEND_SIGNALED,
        );
        post_send(cqps[k], &mut wr);
    }
    // Each of the two server QPs reports the access error (its Terminate then closes the
    // connection, which may add a fatal event for it); no other QP hears of anything.
    let mut access_errors = BTreeSet::new();
    while access_errors.len() < 2 {
        let ev = next_async_event(sctx);
        let qp = unsafe { ev.element.qp };
        let k = sqps.iter().position(|&q| q == qp);
        assert!(
            matches!(k, Some(0 | 1)),
            "event {} on a QP that wrote nothing",
            ev.event_type
        );
        if ev.event_type == IBV_EVENT_QP_ACCESS_ERR {
            access_errors.insert(slanes[k.unwrap()]);
        }
    }
    assert_eq!(access_errors, BTreeSet::from([0, 1]), "both lanes refused");

    for (&client, &child) in clients.iter().zip(&children) {
        assert_eq!(unsafe { rdma_destroy_id(child) }, 0);
        unsafe { rdma_destroy_qp(client) };
        assert_eq!(unsafe { rdma_destroy_id(client) }, 0);
    }
    // The ids of the two connections still up (one on each lane) were destroyed while up:
    // each lane released its own connection, which closed gracefully (no reset, neither
    // an abort nor one answering a segment on the wrong lane), and every connection ends.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let counters = core.lane_counters();
        assert!(
            counters.iter().all(|c| c.aborts == 0 && c.resets_sent == 0),
            "a lane reset a connection: {counters:?}"
        );
        if counters.iter().all(|c| c.live == 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "connections still open: {counters:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for q in sqps {
        assert_eq!(unsafe { ibv_destroy_qp(q) }, 0);
    }
    assert_eq!(unsafe { ibv_dereg_mr(cmr) }, 0);
    assert_eq!(unsafe { ibv_dereg_mr(srecv_mr) }, 0);
    assert_eq!(unsafe { ibv_destroy_cq(ccq) }, 0);
    assert_eq!(unsafe { ibv_destroy_cq(scq) }, 0);
    assert_eq!(unsafe { ibv_dealloc_pd(cpd) }, 0);
    assert_eq!(unsafe { rdma_destroy_id(listen) }, 0);
    unsafe { rdma_destroy_event_channel(ch) };
}

/// The lane of the S-RQ `srq`.
fn srq_lane(srq: *mut ibv_srq) -> usize {
    unsafe { obj::<ibv_srq, Srq>(srq) }.unwrap().shared.lane
}

/// An S-RQ and its QPs live on one lane: an active QP with an S-RQ is placed on the S-RQ's
/// lane, and a request that came in on another lane cannot take a QP on it (EINVAL) while
/// one on the S-RQ's lane can; a Send through that connection consumes the S-RQ's receive.
#[test]
fn an_srq_keeps_its_qps_on_its_lane() {
    configure();
    let ch = channel();
    let listen = new_id(ch, null_mut());
    let mut sa = sockaddr([10, 78, 0, 1], PORT + 1);
    assert_eq!(unsafe { rdma_bind_addr(listen, common::sa(&mut sa)) }, 0);
    assert_eq!(unsafe { rdma_listen(listen, 8) }, 0);
    let (sctx, spd) = unsafe { ((*listen).verbs, (*listen).pd) };
    let scq = unsafe { ibv_create_cq(sctx, 16, null_mut(), null_mut(), 0) };
    let mut sinit = ibv_srq_init_attr::default();
    sinit.attr.max_wr = 8;
    sinit.attr.max_sge = 1;
    let ssrq = unsafe { ibv_create_srq(spd, &mut sinit) };
    assert!(!scq.is_null() && !ssrq.is_null());
    let mut sbuf = vec![0u8; 256].into_boxed_slice();
    let smr = reg(spd, &mut sbuf);
    let mut rsge = sge(&sbuf, 0, 64, smr);
    let mut rwr = recv_wr(500, &mut rsge);
    let mut bad = null_mut();
    let ops = unsafe { &(*sctx).ops };
    assert_eq!(
        unsafe { ops.post_srq_recv.unwrap()(ssrq, &mut rwr, &mut bad) },
        0
    );

    // The client's S-RQ decides where its QP goes.
    let mut clients = Vec::new();
    let mut accepted = None;
    let mut refused_on_other_lane = false;
    let (mut cpd, mut ccq) = (null_mut(), null_mut());
    for k in 0..2 {
        let client = new_id(ch, null_mut());
        resolve(ch, client, PORT + 1);
        if k == 0 {
            let cctx = unsafe { (*client).verbs };
            cpd = unsafe { ibv_alloc_pd(cctx) };
            ccq = unsafe { ibv_create_cq(cctx, 16, null_mut(), null_mut(), 0) };
            let mut cinit = ibv_srq_init_attr::default();
            cinit.attr.max_wr = 4;
            cinit.attr.max_sge = 1;
            let csrq = unsafe { ibv_create_srq(cpd, &mut cinit) };
            assert!(!csrq.is_null());
            let mut attr = ibv_qp_init_attr {
                srq: csrq,
                ..rc_attr(ccq, qp_caps(4, 4))
            };
            // Round-robin would give lane 1 after the S-RQ took lane 0 and vice versa.
            let mut probe_attr = rc_attr(ccq, qp_caps(4, 4));
            let probe = unsafe { ibv_create_qp(cpd, &mut probe_attr) };
            assert_ne!(lane_of(probe), srq_lane(csrq));
            assert_eq!(unsafe { ibv_destroy_qp(probe) }, 0);
            let qp = unsafe { ibv_create_qp(cpd, &mut attr) };
            assert!(!qp.is_null());
            assert_eq!(
                lane_of(qp),
                srq_lane(csrq),
                "an active QP goes to its S-RQ's lane"
            );
            assert_eq!(unsafe { ibv_destroy_qp(qp) }, 0);
            assert_eq!(unsafe { ibv_destroy_srq(csrq) }, 0);
        }
        let mut attr = rc_attr(ccq, qp_caps(4, 4));
        assert_eq!(unsafe { rdma_create_qp(client, cpd, &mut attr) }, 0);
        assert_eq!(unsafe { rdma_connect(client, null_mut()) }, 0);
        let ev = expect_ok(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
        let child = unsafe { (*ev).id };
        unsafe { rdma_ack_cm_event(ev) };
        let lane = unsafe { id_obj(child) }.unwrap().state().lane;
        assert_eq!(lane, lane_of(unsafe { (*client).qp }));
        let mut sattr = ibv_qp_init_attr {
            srq: ssrq,
            ..rc_attr(scq, qp_caps(4, 4))
        };
        if lane == srq_lane(ssrq) {
            assert_eq!(unsafe { rdma_create_qp(child, spd, &mut sattr) }, 0);
            assert_eq!(unsafe { rdma_accept(child, null_mut()) }, 0);
            for _ in 0..2 {
                unsafe { rdma_ack_cm_event(expect_ok(ch, RDMA_CM_EVENT_ESTABLISHED)) };
            }
            accepted = Some((k, child));
        } else {
            clear_errno();
            assert_eq!(unsafe { rdma_create_qp(child, spd, &mut sattr) }, -1);
            assert_eq!(errno(), libc::EINVAL, "S-RQ on another lane");
            assert_eq!(unsafe { rdma_reject(child, null_mut(), 0) }, 0);
            unsafe {
                rdma_ack_cm_event(expect_event(
                    ch,
                    RDMA_CM_EVENT_REJECTED,
                    -libc::ECONNREFUSED,
                ))
            };
            assert_eq!(unsafe { rdma_destroy_id(child) }, 0);
            refused_on_other_lane = true;
        }
        clients.push(client);
    }
    assert!(
        refused_on_other_lane,
        "one request came in on the other lane"
    );
    let (k, child) = accepted.expect("one request came in on the S-RQ's lane");

    // A Send through the accepted connection takes the S-RQ's receive.
    let mut cbuf = *b"to the srq";
    let cmr = reg(cpd, &mut cbuf);
    let mut msge = sge(&cbuf, 0, cbuf.len() as u32, cmr);
    let mut send = send_wr(1, &mut msge, IBV_WR_SEND);
    post_send(unsafe { (*clients[k]).qp }, &mut send);
    assert_eq!(poll_one(ccq).status, IBV_WC_SUCCESS);
    let wc = poll_one(scq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (500, IBV_WC_SUCCESS, 10)
    );
    assert_eq!(wc.qp_num, unsafe { (*(*child).qp).qp_num });
    assert_eq!(&sbuf[..10], b"to the srq");

    assert_eq!(unsafe { rdma_destroy_id(child) }, 0);
    unsafe { rdma_destroy_qp(child) };
    for c in clients {
        unsafe { rdma_destroy_qp(c) };
        assert_eq!(unsafe { rdma_destroy_id(c) }, 0);
    }
    assert_eq!(unsafe { ibv_destroy_srq(ssrq) }, 0);
    assert_eq!(unsafe { rdma_destroy_id(listen) }, 0);
    unsafe { rdma_destroy_event_channel(ch) };
}
