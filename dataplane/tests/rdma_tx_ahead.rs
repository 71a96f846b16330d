//! How far a connection reads ahead of TCP, and fairness between many streaming QPs
//! (issue #17): a Write's payload is read from registered memory as TCP sends it, not all
//! at once when posted, and 1,000 QPs streaming 16 KiB Writes each get their share.

mod rdma_common;

use std::collections::HashMap;
use std::net::SocketAddrV4;
use std::time::Duration;

use dataplane::apps::{all_rights, Resources};
use dataplane::clock;
use dataplane::port::fault::FaultConfig;
use dataplane::rdma::Region;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{CompletionStatus, QpId, RemoteBuf, STag, SendOp, SendWr};
use rdma_common::*;

/// Connects `n` QPs from `lc` to `ls`; the client's QPs in connection order.
fn connect(
    ls: &mut Loop,
    lc: &mut Loop,
    sres: &Resources,
    cres: &Resources,
    n: usize,
) -> Vec<QpId> {
    let addr = SocketAddrV4::new(SERVER_IP, 7100);
    ls.handler_mut().set_listen_backlog(n);
    ls.handler_mut().listen(addr, sres.init).unwrap();
    connect_qps(ls, lc, addr, cres.init, n, |_, _, _| ()).client_by_index()
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
fn a_write_is_read_from_memory_as_tcp_sends_it() {
    const LEN: usize = 64 << 10;
    let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, FaultConfig::default());
    let mut sres = Resources::new(ls.handler_mut(), 64, 4, 4, 4).unwrap();
    let mut cres = Resources::new(lc.handler_mut(), 64, 4, 4, 4).unwrap();
    let dst = sres.buffer(ls.handler_mut(), LEN, all_rights()).unwrap();
    let src = cres.buffer(lc.handler_mut(), LEN, all_rights()).unwrap();
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 13 + i / 251) as u8).collect();
    src.bytes_mut(lc.handler_mut().rnic_mut())
        .copy_from_slice(&pattern);
    let qp = connect(&mut ls, &mut lc, &sres, &cres, 1)[0];

    lc.handler_mut()
        .rnic_mut()
        .post_sq(qp, vec![write(1, &src, &dst, 0, LEN)])
        .unwrap();
    // The client alone: its initial window goes out and no ACK comes back. A connection
    // that read the whole Write into segment buffers when it was posted would complete it
    // now; one that reads about a segment ahead of TCP has most of it still to read.
    for _ in 0..50 {
        lc.poll_once(clock::now());
    }
    assert!(
        cres.poll_cq(lc.handler_mut()).is_none(),
        "the Write completed before TCP could send most of it"
    );

    let end = clock::now() + Duration::from_secs(10);
    let wc = loop {
        assert!(clock::now() < end, "the Write did not complete");
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
        if let Some(wc) = cres.poll_cq(lc.handler_mut()) {
            break wc;
        }
    };
    assert_eq!(wc.status, CompletionStatus::Success, "{wc:?}");
    // The ACK of the last segment may still be on its way: poll until the bytes are placed.
    for _ in 0..100 {
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
    }
    assert_eq!(dst.bytes(ls.handler().rnic()), &pattern[..]);
}

#[test]
fn thousand_streaming_qps_each_get_a_share() {
    const QPS: usize = 1000;
    const LEN: usize = 16 << 10;
    /// Writes each QP keeps posted.
    const DEPTH: usize = 2;
    /// Completions over all QPs before the shares are compared.
    const TOTAL: usize = 4 * QPS;
    let (mut ls, mut lc) = pair(MpaConfig::default(), 64 << 20, FaultConfig::default());
    let cq_depth = (QPS * DEPTH * 2) as u32;
    let mut sres = Resources::new(ls.handler_mut(), cq_depth, 4, 4, 4).unwrap();
    let mut cres = Resources::new(lc.handler_mut(), cq_depth, 4, 4, 4).unwrap();
    let dst = sres
        .buffer(ls.handler_mut(), QPS * LEN, all_rights())
        .unwrap();
    // One source buffer shared by every QP (as `dataplane perf` does).
    let src = cres.buffer(lc.handler_mut(), LEN, all_rights()).unwrap();
    let qps = connect(&mut ls, &mut lc, &sres, &cres, QPS);
    let slot: HashMap<QpId, usize> = qps.iter().enumerate().map(|(i, &q)| (q, i)).collect();

    for (i, &qp) in qps.iter().enumerate() {
        let wrs = (0..DEPTH)
            .map(|_| write(i as u64, &src, &dst, i * LEN, LEN))
            .collect();
        lc.handler_mut().rnic_mut().post_sq(qp, wrs).unwrap();
    }
    let mut done = vec![0usize; QPS];
    let mut total = 0;
    let end = clock::now() + Duration::from_secs(60);
    while total < TOTAL {
        assert!(clock::now() < end, "{total} of {TOTAL} Writes completed");
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
        while let Some(wc) = cres.poll_cq(lc.handler_mut()) {
            assert_eq!(wc.status, CompletionStatus::Success, "{wc:?}");
            let i = slot[&wc.qp];
            done[i] += 1;
            total += 1;
            lc.handler_mut()
                .rnic_mut()
                .post_sq(wc.qp, vec![write(i as u64, &src, &dst, i * LEN, LEN)])
                .unwrap();
        }
    }
    let (min, max) = (done.iter().min().unwrap(), done.iter().max().unwrap());
    eprintln!("{TOTAL} Writes over {QPS} QPs: {min}..{max} per QP");
    // Every QP progressed, and none ran far ahead of the others (the mean is 4).
    assert!(*min >= 1, "a QP completed nothing: {done:?}");
    assert!(*max <= 12, "a QP took {max} of {TOTAL} Writes");
}
