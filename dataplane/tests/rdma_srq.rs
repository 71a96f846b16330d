//! QPs on one shared receive queue between two RDMA poll loops over the in-process software
//! pair: the server's QPs all take their receives from one S-RQ holding exactly as many WQEs
//! as Sends arrive, and every client QP sends several multi-segment Sends. Each WQE goes to
//! the QP a Send arrives on, when it arrives (VERBS-00 §6.3.5), so every Send completes on
//! its QP with its bytes and no stream is Terminated, on a clean link and on a lossy one
//! (out-of-order segments placed ahead take the WQEs of their message and of every earlier
//! message without one, "sequential ordering").

mod rdma_common;

use std::net::SocketAddrV4;
use std::time::Duration;

use dataplane::apps::{all_rights, Resources};
use dataplane::clock;
use dataplane::port::fault::{FaultConfig, Rate};
use dataplane::rdma::{RdmaCounters, Region};
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{CompletionStatus, RecvWr, SendOp, SendWr, WcOpcode};
use rdma_common::*;

const QPS: usize = 4;
/// Sends per QP.
const SENDS: usize = 16;
/// Bytes per Send: three DDP segments at the default MULPDU.
const LEN: usize = 3000;

/// What client QP `i` sends in its Send `k`.
fn pattern(i: usize, k: usize) -> Vec<u8> {
    (0..LEN)
        .map(|j| (i.wrapping_mul(53) + k.wrapping_mul(17) + j * 3) as u8)
        .collect()
}

/// Runs the exchange; the server's and the client's counters.
fn sends_on_qps_sharing_an_srq(faults: FaultConfig) -> (RdmaCounters, RdmaCounters) {
    let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, faults);
    let addr = SocketAddrV4::new(SERVER_IP, 7100);
    let total = QPS * SENDS;
    let mut sres = Resources::new(ls.handler_mut(), 4 * total as u32, 4, 4, 4).unwrap();
    let mut cres = Resources::new(lc.handler_mut(), 4 * total as u32, SENDS as u32, 4, 4).unwrap();
    let recv_area = sres
        .buffer(ls.handler_mut(), total * LEN, all_rights())
        .unwrap();
    let (srq, _) = ls
        .handler_mut()
        .rnic_mut()
        .create_srq(sres.pd, total as u32, 1, 0)
        .unwrap();
    let wqes = (0..total)
        .map(|slot| RecvWr {
            wr_id: slot as u64,
            sgl: vec![recv_area.sge(slot * LEN, LEN)],
        })
        .collect();
    assert_eq!(ls.handler_mut().rnic_mut().post_srq(srq, wqes), Ok(total));
    let mut init = sres.init;
    init.srq = Some(srq);
    ls.handler_mut().listen(addr, init).unwrap();
    let src: Region = cres
        .buffer(lc.handler_mut(), total * LEN, all_rights())
        .unwrap();
    for i in 0..QPS {
        for k in 0..SENDS {
            let b = src.bytes_mut(lc.handler_mut().rnic_mut());
            b[(i * SENDS + k) * LEN..][..LEN].copy_from_slice(&pattern(i, k));
        }
    }

    let end = clock::now() + Duration::from_secs(30);
    let up = connect_qps(&mut ls, &mut lc, addr, cres.init, QPS, |_, _, _| ());
    let (client_up, server_qps) = (up.client, up.server);
    let attrs = ls.handler().rnic().query_srq(srq).unwrap();
    assert_eq!(attrs.available, total as u32, "no QP took a WQE ahead");

    for &(i, _, qp) in &client_up {
        let wrs = (0..SENDS)
            .map(|k| {
                let send = SendOp::Send {
                    sgl: iwarp::mem::Sgl::one(src.sge((i * SENDS + k) * LEN, LEN)),
                    solicited: false,
                    invalidate: None,
                };
                SendWr::message(k as u64, send)
            })
            .collect();
        lc.handler_mut().rnic_mut().post_sq(qp, wrs).unwrap();
    }
    // Per server QP, the S-RQ slots its receives completed into, in completion order.
    let mut slots: Vec<Vec<usize>> = vec![Vec::new(); QPS];
    let (mut sent, mut received) = (0, 0);
    while sent < total || received < total {
        assert!(
            clock::now() < end,
            "{sent} of {total} Sends completed, {received} received; server {:?}",
            ls.handler().counters()
        );
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
        while let Some(wc) = cres.poll_cq(lc.handler_mut()) {
            assert_eq!(wc.status, CompletionStatus::Success, "{wc:?}");
            sent += 1;
        }
        while let Some(wc) = sres.poll_cq(ls.handler_mut()) {
            assert_eq!(wc.status, CompletionStatus::Success, "{wc:?}");
            assert_eq!((wc.opcode, wc.byte_len as usize), (WcOpcode::Receive, LEN));
            slots[server_qps[&wc.qp]].push(wc.wr_id as usize);
            received += 1;
        }
    }
    let bytes = recv_area.bytes(ls.handler().rnic());
    for (i, slots) in slots.iter().enumerate() {
        assert_eq!(slots.len(), SENDS, "QP {i}");
        for (k, &slot) in slots.iter().enumerate() {
            assert_eq!(bytes[slot * LEN..][..LEN], pattern(i, k), "QP {i} Send {k}");
        }
    }
    assert_eq!(ls.handler().rnic().query_srq(srq).unwrap().available, 0);
    let (s, c) = (ls.handler().counters(), lc.handler().counters());
    assert_eq!(
        (s.terminates_sent, c.terminates_received),
        (0, 0),
        "{s:?} {c:?}"
    );
    (s, c)
}

#[test]
fn sends_on_qps_sharing_an_srq_clean_link() {
    let (s, _) = sends_on_qps_sharing_an_srq(FaultConfig::default());
    assert_eq!(s.fpdus_placed_ahead, 0);
}

#[test]
fn sends_on_qps_sharing_an_srq_lossy_link() {
    let faults = FaultConfig {
        drop: Rate::from_percent(3.0).unwrap(),
        reorder: Rate::from_percent(3.0).unwrap(),
        ..FaultConfig::default()
    };
    let (s, _) = sends_on_qps_sharing_an_srq(faults);
    assert!(s.fpdus_placed_ahead > 0, "{s:?}");
}

/// Sends per QP in the reposting exchange.
const REPOST_SENDS: usize = 200;
/// Bytes per Send there: twelve DDP segments at the default MULPDU, as `ib_send_bw -s 16384`.
const REPOST_LEN: usize = 16384;
/// S-RQ WQEs each server buffer area posts first (`ib_send_bw --use-srq -r` divided by the
/// QPs); a client QP keeps more Sends than that in flight.
const AREA_WQES: usize = 16;

/// What `ib_send_bw -q 2 --use-srq` does: two QPs on one S-RQ, each of the server's two
/// buffer areas posts its share of WQEs, and the server reposts a WQE to the S-RQ as soon as
/// its receive completes (whichever QP took it), until its area has posted one per Send of a
/// QP. Each client QP keeps all its Sends in flight, more than an area's share of WQEs. Every
/// Send completes on its QP with its bytes, no stream is Terminated, nothing is left waiting.
#[test]
fn sends_on_qps_sharing_an_srq_reposted_as_they_complete() {
    const Q: usize = 2;
    let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, FaultConfig::default());
    let addr = SocketAddrV4::new(SERVER_IP, 7101);
    let total = Q * REPOST_SENDS;
    let depth = Q * AREA_WQES;
    let mut sres = Resources::new(ls.handler_mut(), 4 * total as u32, 4, 4, 4).unwrap();
    let mut cres = Resources::new(
        lc.handler_mut(),
        4 * total as u32,
        REPOST_SENDS as u32,
        4,
        4,
    )
    .unwrap();
    let recv_area = sres
        .buffer(ls.handler_mut(), depth * REPOST_LEN, all_rights())
        .unwrap();
    let (srq, _) = ls
        .handler_mut()
        .rnic_mut()
        .create_srq(sres.pd, depth as u32, 1, 0)
        .unwrap();
    // WQE `slot` belongs to area `slot / AREA_WQES` and always receives into the same bytes.
    let wqe = |slot: usize| RecvWr {
        wr_id: slot as u64,
        sgl: vec![recv_area.sge(slot * REPOST_LEN, REPOST_LEN)],
    };
    assert_eq!(
        ls.handler_mut()
            .rnic_mut()
            .post_srq(srq, (0..depth).map(wqe).collect()),
        Ok(depth)
    );
    let mut posted = [AREA_WQES; Q];
    let mut init = sres.init;
    init.srq = Some(srq);
    ls.handler_mut().listen(addr, init).unwrap();
    // Client QP `i` sends pattern(i, k % 4) in its Send `k`.
    let src: Region = cres
        .buffer(lc.handler_mut(), Q * 4 * REPOST_LEN, all_rights())
        .unwrap();
    let rpattern = |i: usize, k: usize| -> Vec<u8> {
        (0..REPOST_LEN)
            .map(|j| (i * 101 + (k % 4) * 29 + j * 7 + j / 251) as u8)
            .collect()
    };
    for i in 0..Q {
        for k in 0..4 {
            let b = src.bytes_mut(lc.handler_mut().rnic_mut());
            b[(i * 4 + k) * REPOST_LEN..][..REPOST_LEN].copy_from_slice(&rpattern(i, k));
        }
    }
    let end = clock::now() + Duration::from_secs(30);
    let up = connect_qps(&mut ls, &mut lc, addr, cres.init, Q, |_, _, _| ());
    let (client_up, server_qps) = (up.client, up.server);
    for &(i, _, qp) in &client_up {
        let wrs = (0..REPOST_SENDS)
            .map(|k| {
                let send = SendOp::Send {
                    sgl: iwarp::mem::Sgl::one(src.sge((i * 4 + k % 4) * REPOST_LEN, REPOST_LEN)),
                    solicited: false,
                    invalidate: None,
                };
                SendWr::message(k as u64, send)
            })
            .collect();
        lc.handler_mut().rnic_mut().post_sq(qp, wrs).unwrap();
    }
    let mut received_on = [0usize; Q];
    // Receives per (QP, area of the WQE).
    let mut by_area = [[0usize; Q]; Q];
    let (mut sent, mut received) = (0, 0);
    while sent < total || received < total {
        assert!(
            clock::now() < end,
            "{sent} of {total} Sends completed, {received} received ({received_on:?}), \
             WQEs posted per area {posted:?}, S-RQ {:?}; server {:?}",
            ls.handler().rnic().query_srq(srq),
            ls.handler().counters()
        );
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
        while let Some(wc) = cres.poll_cq(lc.handler_mut()) {
            assert_eq!(wc.status, CompletionStatus::Success, "{wc:?}");
            sent += 1;
        }
        while let Some(wc) = sres.poll_cq(ls.handler_mut()) {
            assert_eq!(wc.status, CompletionStatus::Success, "{wc:?}");
            assert_eq!(
                (wc.opcode, wc.byte_len as usize),
                (WcOpcode::Receive, REPOST_LEN)
            );
            let (slot, i) = (wc.wr_id as usize, server_qps[&wc.qp]);
            let bytes = &recv_area.bytes(ls.handler().rnic())[slot * REPOST_LEN..][..REPOST_LEN];
            assert!(
                bytes == rpattern(i, received_on[i]),
                "QP {i} Send {}",
                received_on[i]
            );
            received_on[i] += 1;
            received += 1;
            let area = slot / AREA_WQES;
            by_area[i][area] += 1;
            if posted[area] < REPOST_SENDS {
                assert_eq!(
                    ls.handler_mut().rnic_mut().post_srq(srq, vec![wqe(slot)]),
                    Ok(1)
                );
                posted[area] += 1;
            }
        }
    }
    assert_eq!(received_on, [REPOST_SENDS; Q]);
    // The S-RQ lends any WQE to whichever QP a Send arrives on: the areas are not the QPs'
    // (what perftest's iWARP Send credits assume, counting receives per area).
    assert!(
        by_area.iter().any(|a| a.iter().all(|&n| n > 0)),
        "{by_area:?}"
    );
    let (s, c) = (ls.handler().counters(), lc.handler().counters());
    assert_eq!(
        (s.terminates_sent, c.terminates_received),
        (0, 0),
        "{s:?} {c:?}"
    );
}
