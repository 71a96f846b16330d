//! The send buffers the connections of one RNIC share (issue #17): unit buffers come back
//! to the RNIC's pool once TCP has them acknowledged, and when a connection is reset with
//! data in flight; the pool stays within its bound.

mod rdma_common;

use std::net::SocketAddrV4;
use std::time::Duration;

use dataplane::apps::{all_rights, Resources};
use dataplane::clock;
use dataplane::port::fault::FaultConfig;
use dataplane::rdma::Region;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{CompletionStatus, QpId, RemoteBuf, STag, SendOp, SendWr};
use rdma_common::*;
use tcp::ConnId;

/// Connects `n` QPs from `lc` to `ls`: the client's connection ids and QPs.
fn connect(
    ls: &mut Loop,
    lc: &mut Loop,
    sres: &Resources,
    cres: &Resources,
    n: usize,
) -> Vec<(ConnId, QpId)> {
    let addr = SocketAddrV4::new(SERVER_IP, 7200);
    ls.handler_mut().listen(addr, sres.init).unwrap();
    let up = connect_qps(ls, lc, addr, cres.init, n, |_, _, _| ());
    up.client.into_iter().map(|(_, id, qp)| (id, qp)).collect()
}

/// A Write of `len` octets from the start of `src` to `dst` at `offset`.
fn write(wr_id: u64, src: &Region, dst: &Region, offset: usize, len: usize) -> SendWr {
    SendWr::message(
        wr_id,
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(src.sge(0, len)),
            remote: RemoteBuf {
                stag: STag(dst.stag.0),
                to: dst.addr(offset),
            },
        },
    )
}

#[test]
fn acknowledged_units_come_back_to_the_rnic_pool() {
    const QPS: usize = 4;
    const LEN: usize = 64 << 10;
    const ROUNDS: usize = 3;
    let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, FaultConfig::default());
    let mut sres = Resources::new(ls.handler_mut(), 64, 4, 4, 4).unwrap();
    let mut cres = Resources::new(lc.handler_mut(), 64, 4, 4, 4).unwrap();
    let dst = sres
        .buffer(ls.handler_mut(), QPS * LEN, all_rights())
        .unwrap();
    let src = cres.buffer(lc.handler_mut(), LEN, all_rights()).unwrap();
    let qps = connect(&mut ls, &mut lc, &sres, &cres, QPS);

    let mut reused_before = 0;
    for round in 0..ROUNDS {
        for (i, &(_, qp)) in qps.iter().enumerate() {
            lc.handler_mut()
                .rnic_mut()
                .post_sq(qp, vec![write(i as u64, &src, &dst, i * LEN, LEN)])
                .unwrap();
        }
        let mut done = 0;
        let end = clock::now() + Duration::from_secs(10);
        while done < QPS {
            assert!(clock::now() < end, "round {round}: {done} of {QPS} Writes");
            settle(&mut ls, &mut lc, 1);
            while let Some(wc) = cres.poll_cq(lc.handler_mut()) {
                assert_eq!(wc.status, CompletionStatus::Success, "{wc:?}");
                done += 1;
            }
        }
        // The ACKs of the last segments may still be on their way.
        settle(&mut ls, &mut lc, 200);
        let pool = lc.handler().rnic().tx_pool();
        let stats = pool.stats();
        let counters = lc.handler().counters();
        assert_eq!(
            (counters.tx_pool_reused, counters.tx_pool_freed),
            (stats.reused, stats.freed),
            "the summary's pool counters are the RNIC pool's"
        );
        let allocated = counters.tx_buffers_allocated;
        assert!(
            pool.len() as u64 + stats.freed >= allocated,
            "round {round}: {} buffers in the pool and {} freed at its bound, but the \
             connections allocated {allocated}: some never came back",
            pool.len(),
            stats.freed
        );
        assert!(pool.bytes() <= pool.max_bytes());
        if round > 0 {
            // 4 × 64 KiB are about 180 units: later rounds send from the pool's buffers.
            assert!(
                stats.reused - reused_before >= 150,
                "round {round}: only {} buffers reused",
                stats.reused - reused_before
            );
        }
        reused_before = stats.reused;
    }
    let allocated = lc.handler().counters().tx_buffers_allocated;
    assert!(
        allocated < 2 * 180,
        "{allocated} buffers allocated for {ROUNDS} rounds of about 180 units"
    );
}

#[test]
fn reset_connections_give_their_buffers_back() {
    const QPS: usize = 8;
    const LEN: usize = 64 << 10;
    let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, FaultConfig::default());
    let mut sres = Resources::new(ls.handler_mut(), 64, 4, 4, 4).unwrap();
    let mut cres = Resources::new(lc.handler_mut(), 64, 4, 4, 4).unwrap();
    let dst = sres
        .buffer(ls.handler_mut(), QPS * LEN, all_rights())
        .unwrap();
    let src = cres.buffer(lc.handler_mut(), LEN, all_rights()).unwrap();
    let qps = connect(&mut ls, &mut lc, &sres, &cres, QPS);
    settle(&mut ls, &mut lc, 50);

    for (i, &(_, qp)) in qps.iter().enumerate() {
        lc.handler_mut()
            .rnic_mut()
            .post_sq(qp, vec![write(i as u64, &src, &dst, i * LEN, LEN)])
            .unwrap();
    }
    // The client alone: each connection sends its initial window (10 units) and no ACK
    // comes back; those units are in flight, their buffers held by TCP.
    for _ in 0..50 {
        lc.poll_once(clock::now());
    }
    let before = lc.handler().rnic().tx_pool().len();
    for &(id, _) in &qps {
        lc.handler_mut().abort(id).unwrap();
    }
    for _ in 0..50 {
        lc.poll_once(clock::now());
    }
    assert_eq!(lc.handler().live(), 0, "every connection is gone");
    let pool = lc.handler().rnic().tx_pool();
    assert!(
        pool.len() >= before + 10 * QPS,
        "{} buffers in the pool after resetting {QPS} connections with at least 10 units \
         in flight each, {before} before",
        pool.len()
    );
    assert!(pool.bytes() <= pool.max_bytes());
    let allocated = lc.handler().counters().tx_buffers_allocated;
    assert!(
        pool.len() as u64 + pool.stats().freed >= allocated,
        "{} buffers in the pool and {} freed at its bound, but the connections allocated \
         {allocated}: some never came back",
        pool.len(),
        pool.stats().freed
    );
}
