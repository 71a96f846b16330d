//! Many QPs between two RDMA poll loops over the in-process software pair: 1,000
//! initiators connect at once (listen backlog, SYN and MPA handling under load, MPA timers),
//! all reach RTS on both sides, and every QP carries a Send and an RDMA Write whose bytes
//! are checked.

mod rdma_common;

use std::net::SocketAddrV4;
use std::time::Duration;

use dataplane::apps::{all_rights, Resources};
use dataplane::clock;
use dataplane::port::fault::FaultConfig;
use dataplane::rdma::Region;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{CompletionStatus, RecvWr, RemoteBuf, STag, SendOp, SendWr, WcOpcode};
use rdma_common::*;

const QPS: usize = 1000;
/// Bytes each QP sends and writes.
const LEN: usize = 256;

/// What QP `i` sends (`k` = 0) and writes (`k` = 1).
fn pattern(i: usize, k: usize) -> Vec<u8> {
    (0..LEN)
        .map(|j| (i.wrapping_mul(31) + j * 7 + k * 101) as u8)
        .collect()
}

#[test]
fn thousand_qps_connect_and_carry_checked_data() {
    let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, FaultConfig::default());
    let addr = SocketAddrV4::new(SERVER_IP, 7000);
    let cq_depth = (QPS * 4) as u32;
    let mut sres = Resources::new(ls.handler_mut(), cq_depth, 4, 4, 4).unwrap();
    let mut cres = Resources::new(lc.handler_mut(), cq_depth, 4, 4, 4).unwrap();
    let recv_area = sres
        .buffer(ls.handler_mut(), QPS * LEN, all_rights())
        .unwrap();
    let write_area = sres
        .buffer(ls.handler_mut(), QPS * LEN, all_rights())
        .unwrap();
    // Room for every initiator's SYN at once (the default backlog is 64).
    ls.handler_mut().set_listen_backlog(QPS);
    ls.handler_mut().listen(addr, sres.init).unwrap();
    // The client's source buffer: each QP's Send and Write bytes side by side.
    let src: Region = cres
        .buffer(lc.handler_mut(), QPS * 2 * LEN, all_rights())
        .unwrap();
    for i in 0..QPS {
        let b = src.bytes_mut(lc.handler_mut().rnic_mut());
        b[i * 2 * LEN..][..LEN].copy_from_slice(&pattern(i, 0));
        b[(i * 2 + 1) * LEN..][..LEN].copy_from_slice(&pattern(i, 1));
    }

    let start = clock::now();
    let up = connect_qps(&mut ls, &mut lc, addr, cres.init, QPS, |h, qp, slot| {
        h.rnic_mut()
            .post_rq(
                qp,
                vec![RecvWr {
                    wr_id: slot as u64,
                    sgl: vec![recv_area.sge(slot * LEN, LEN)],
                }],
            )
            .unwrap();
    });
    let (client_up, server_slots) = (up.client, up.server);
    let end = start + Duration::from_secs(30);
    let connected = clock::now().saturating_since(start);
    assert_eq!(lc.handler().live(), QPS);
    assert_eq!(ls.handler().live(), QPS);
    let tcp = ls.handler().tcp().stats();
    assert_eq!(
        tcp.syn_backlog_drops, 0,
        "no SYN dropped by the listen backlog"
    );
    // The first SYN waited for the server's MAC; the others waited in TCP's queues instead
    // of replacing it (each lost SYN would wait a whole initial RTO, 1 s).
    assert_eq!(lc.counters(0).unresolved, 1);

    // Every QP: a Write into its slot of the write area, then a Send into its slot of the
    // server's receive area (placed in order: once the Send is received, so is the Write).
    for &(i, _, qp) in &client_up {
        let wrs = vec![
            SendWr::message(
                i as u64,
                SendOp::Write {
                    sgl: iwarp::mem::Sgl::one(src.sge((i * 2 + 1) * LEN, LEN)),
                    remote: RemoteBuf {
                        stag: STag(write_area.stag.0),
                        to: write_area.addr(i * LEN),
                    },
                },
            ),
            SendWr::message(
                i as u64,
                SendOp::Send {
                    sgl: iwarp::mem::Sgl::one(src.sge(i * 2 * LEN, LEN)),
                    solicited: false,
                    invalidate: None,
                },
            ),
        ];
        lc.handler_mut().rnic_mut().post_sq(qp, wrs).unwrap();
    }
    let (mut sent, mut received) = (0, vec![false; QPS]);
    let mut nreceived = 0;
    while sent < 2 * QPS || nreceived < QPS {
        assert!(
            clock::now() < end,
            "{sent} of {} sends and writes completed, {nreceived} of {QPS} received",
            2 * QPS
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
            assert_eq!(wc.opcode, WcOpcode::Receive);
            assert_eq!(wc.byte_len as usize, LEN);
            let slot = server_slots[&wc.qp];
            assert_eq!(wc.wr_id, slot as u64);
            assert!(!received[slot], "slot {slot} received twice");
            received[slot] = true;
            nreceived += 1;
        }
    }
    let rnic = ls.handler().rnic();
    let (recv_bytes, write_bytes) = (recv_area.bytes(rnic), write_area.bytes(rnic));
    for i in 0..QPS {
        assert_eq!(
            recv_bytes[i * LEN..][..LEN],
            pattern(i, 0),
            "send of QP {i}"
        );
        assert_eq!(
            write_bytes[i * LEN..][..LEN],
            pattern(i, 1),
            "write of QP {i}"
        );
    }
    eprintln!(
        "{QPS} QPs connected in {} ms, data checked in {} ms more",
        connected.as_millis(),
        clock::now().saturating_since(start + connected).as_millis()
    );
}
