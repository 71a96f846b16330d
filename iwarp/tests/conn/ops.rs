//! Every RDMAP operation between two connections over simulated TCP with delay, loss,
//! reordering and duplication: Send variants, RDMA Write, several outstanding RDMA Reads,
//! Immediate Data, atomics, sizes from 0 B to over 1 MiB (RFC 5040 §5, RFC 7306).

use std::time::Duration;

use crate::common::*;
use iwarp::conn::{ConnEvent, ConnState};
use iwarp::mem::{STag, Sge};
use iwarp::mpa::MpaConfig;
use iwarp::rdmap::{
    Completion, CompletionOpcode, CompletionStatus, Event, RecvWr, RemoteBuf, SendOp, SendWr,
    StreamState, WorkQueue,
};
use iwarp::wire::atomic::AtomicOp;
use iwarp::wire::terminate::TerminateCause;

const MEM: usize = 16 << 20;
const BIG: u32 = (1 << 20) + 4097;
/// Source data of A lives at 0..SRC_LEN of A's memory.
const SRC_LEN: usize = 2 << 20;

struct Fx {
    s: Sim,
    sa: STag,
    sb: STag,
}

fn fixture(seed: u64, link: LinkConfig, mpa_a: MpaConfig, mpa_b: MpaConfig) -> Fx {
    let (ma, sa) = memory(MEM);
    let (mb, sb) = memory(MEM);
    let mut s = Sim::new(
        seed,
        link,
        (conn_config(mpa_a), ma),
        (conn_config(mpa_b), mb),
        Decision::Accept(Vec::new()),
    );
    let up = s.run_until(Duration::from_secs(2), |s| {
        s.established(Side::A) && s.established(Side::B)
    });
    assert!(up, "A {:?}\nB {:?}", s.events(Side::A), s.events(Side::B));
    let src = pattern(SRC_LEN, 42);
    s.mem_mut(Side::A).bytes_mut()[..SRC_LEN].copy_from_slice(&src);
    let srcb = pattern(SRC_LEN, 43);
    s.mem_mut(Side::B).bytes_mut()[..SRC_LEN].copy_from_slice(&srcb);
    Fx { s, sa, sb }
}

fn drain(s: &mut Sim, side: Side, out: &mut Vec<Completion>) {
    if let Some(c) = s.conn(side) {
        while let Some(wc) = c.poll_completion() {
            out.push(wc);
        }
    }
}

fn bytes(s: &Sim, side: Side, at: usize, len: usize) -> Vec<u8> {
    s.mem(side).bytes()[at..at + len].to_vec()
}

fn sge(stag: STag, to: u64, len: u32) -> Vec<Sge> {
    vec![Sge { stag, to, len }]
}

/// Runs every operation from A to B once; returns A's and B's completions.
fn all_operations(fx: &mut Fx) -> (Vec<Completion>, Vec<Completion>) {
    let (sa, sb) = (fx.sa, fx.sb);
    let s = &mut fx.s;
    // B: receive buffers for the Sends and the Immediate Data (RFC 5040 §5.3).
    let recv_at = 2 << 20;
    let send_sizes: [u32; 5] = [0, 1, 1000, 70_000, BIG];
    for (i, _) in send_sizes.iter().enumerate() {
        s.conn(Side::B)
            .unwrap()
            .post_recv(RecvWr {
                wr_id: 500 + i as u64,
                sgl: sge(
                    sb,
                    recv_at as u64 + (i as u64) * (BIG as u64 + 64),
                    BIG + 64,
                ),
            })
            .unwrap();
    }
    s.conn(Side::B)
        .unwrap()
        .post_recv(RecvWr {
            wr_id: 600,
            sgl: sge(sb, 0, 0),
        })
        .unwrap();
    let mut id = 0u64;
    let mut post = |s: &mut Sim, op: SendOp| {
        id += 1;
        let wr = SendWr::new(id, op);
        s.with_conn(Side::A, |a, m, now| a.post_send(now, m, wr))
            .unwrap();
    };
    // Send, Send with SE, Send with Invalidate (of B's second region, set up by the
    // caller), Send with SE and Invalidate are covered in their own test; here Send / SE.
    for (i, n) in send_sizes.into_iter().enumerate() {
        post(
            s,
            SendOp::Send {
                sgl: sge(sa, 7 * i as u64, n).into(),
                solicited: i % 2 == 1,
                invalidate: None,
            },
        );
    }
    // RDMA Writes of every size class into B's second MiB-sized area.
    let write_at = 8 << 20;
    for (n, off) in [(0u32, 0u64), (1, 16), (13, 64), (4096, 4096), (BIG, 8192)] {
        post(
            s,
            SendOp::Write {
                sgl: sge(sa, 3, n).into(),
                remote: RemoteBuf {
                    stag: sb,
                    to: write_at + off,
                },
            },
        );
    }
    // Several RDMA Reads outstanding at once (ORD 16), into A's sink area.
    let read_at = 3 << 20;
    for (i, n) in [(0u64, 0u32), (1, 100), (2, 65_536), (3, BIG)] {
        post(
            s,
            SendOp::Read {
                sink: RemoteBuf {
                    stag: sa,
                    to: read_at + i * (BIG as u64 + 64),
                },
                remote: RemoteBuf {
                    stag: sb,
                    to: 11 + i,
                },
                len: n,
            },
        );
    }
    post(
        s,
        SendOp::Immediate {
            data: *b"imm-data",
            solicited: true,
        },
    );
    // RFC 7306 §5: atomics on an 8-octet aligned word of B.
    let word = (12 << 20) as u64;
    let result = (12 << 20) as u64;
    for op in [AtomicOp::FetchAdd, AtomicOp::CmpSwap, AtomicOp::Swap] {
        post(
            s,
            SendOp::Atomic {
                op,
                remote: RemoteBuf { stag: sb, to: word },
                add_swap: 5,
                add_swap_mask: if op == AtomicOp::FetchAdd {
                    0
                } else {
                    u64::MAX
                },
                compare: 0x1000_0005,
                compare_mask: u64::MAX,
                result: Sge {
                    stag: sa,
                    to: result + 8 * op as u64,
                    len: 8,
                },
            },
        );
    }
    let total = id as usize;
    s.mem_mut(Side::B).bytes_mut()[word as usize..word as usize + 8]
        .copy_from_slice(&0x1000_0000u64.to_ne_bytes());
    let mut ca = Vec::new();
    let mut cb = Vec::new();
    let ok = s.run_until(Duration::from_secs(60), |s| {
        drain(s, Side::A, &mut ca);
        drain(s, Side::B, &mut cb);
        ca.len() == total && cb.len() == send_sizes.len() + 1
    });
    assert!(
        ok,
        "A done {} of {total}, B {:?}; events A {:?} B {:?}",
        ca.len(),
        cb,
        s.events(Side::A),
        s.events(Side::B)
    );
    (ca, cb)
}

fn check_all_operations(fx: &mut Fx, ca: &[Completion], cb: &[Completion]) {
    let s = &mut fx.s;
    // RFC 5040 §5.5: send-queue completions in posting order, all successful.
    let ids: Vec<u64> = ca.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (1..=ca.len() as u64).collect::<Vec<_>>());
    assert!(
        ca.iter().all(|c| c.status == CompletionStatus::Success),
        "{ca:?}"
    );
    assert!(ca.iter().all(|c| c.queue == WorkQueue::Send));
    // Receives complete in message order with the sent lengths.
    let src = pattern(SRC_LEN, 42);
    let srcb = pattern(SRC_LEN, 43);
    let recv_at = 2 << 20;
    let send_sizes = [0usize, 1, 1000, 70_000, BIG as usize];
    for (i, n) in send_sizes.into_iter().enumerate() {
        assert_eq!(cb[i].wr_id, 500 + i as u64);
        assert_eq!(cb[i].opcode, CompletionOpcode::Recv);
        assert_eq!(cb[i].byte_len as usize, n);
        assert_eq!(cb[i].solicited, i % 2 == 1);
        let at = recv_at + i * (BIG as usize + 64);
        assert_eq!(
            hash(&bytes(s, Side::B, at, n)),
            hash(&src[7 * i..7 * i + n]),
            "send {i} of {n} bytes"
        );
    }
    let imm = &cb[send_sizes.len()];
    assert_eq!(imm.opcode, CompletionOpcode::RecvImmediate);
    assert_eq!(imm.immediate, Some(*b"imm-data"));
    let write_at = 8 << 20;
    for (n, off) in [
        (0usize, 0usize),
        (1, 16),
        (13, 64),
        (4096, 4096),
        (BIG as usize, 8192),
    ] {
        assert_eq!(
            hash(&bytes(s, Side::B, write_at + off, n)),
            hash(&src[3..3 + n]),
            "write of {n} bytes"
        );
    }
    let read_at = 3 << 20;
    for (i, n) in [(0usize, 0usize), (1, 100), (2, 65_536), (3, BIG as usize)] {
        let at = read_at + i * (BIG as usize + 64);
        assert_eq!(
            hash(&bytes(s, Side::A, at, n)),
            hash(&srcb[11 + i..11 + i + n]),
            "read of {n} bytes"
        );
    }
    let reads: Vec<u32> = ca
        .iter()
        .filter(|c| c.opcode == CompletionOpcode::Read)
        .map(|c| c.byte_len)
        .collect();
    assert_eq!(reads, vec![0, 100, 65_536, BIG]);
    // FetchAdd saw 0x1000_0000 (→ 0x1000_0005), CmpSwap matched 0x1000_0005 (→ 5), Swap saw 5.
    let originals: Vec<Option<u64>> = ca
        .iter()
        .filter(|c| matches!(c.opcode, CompletionOpcode::Atomic(_)))
        .map(|c| c.atomic_original)
        .collect();
    assert_eq!(
        originals,
        vec![Some(0x1000_0000), Some(0x1000_0005), Some(5)]
    );
    let word = bytes(s, Side::B, 12 << 20, 8);
    assert_eq!(u64::from_ne_bytes(word.try_into().unwrap()), 5);
}

// RFC 5040 §5.1–§5.3, RFC 7306 §5–§6 over a clean link.
#[test]
fn every_operation_clean_link() {
    let mut fx = fixture(1, clean_link(), MpaConfig::default(), MpaConfig::default());
    let (ca, cb) = all_operations(&mut fx);
    check_all_operations(&mut fx, &ca, &cb);
    // RFC 5040 §5.3: Sends and Immediate Data with SE raise the Solicited Event.
    let se =
        fx.s.events(Side::B)
            .iter()
            .filter(|e| matches!(e, ConnEvent::Stream(Event::SolicitedEvent)))
            .count();
    assert_eq!(se, 3);
    let st = fx.s.conn(Side::B).unwrap().stats();
    assert_eq!(st.crc_errors, 0);
    assert_eq!(st.terminates_sent + st.terminates_received, 0);
}

// The same over a link with loss, duplication and reordering, CRC on: TCP recovers, MPA
// places what arrives early, RDMAP still completes in order (RFC 5041 §5.3, RFC 5044 §6).
#[test]
fn every_operation_lossy_link_crc() {
    for seed in [2, 3] {
        let mpa = MpaConfig {
            require_crc: true,
            ..MpaConfig::default()
        };
        let mut fx = fixture(seed, lossy_link(), mpa.clone(), mpa);
        let (ca, cb) = all_operations(&mut fx);
        check_all_operations(&mut fx, &ca, &cb);
        let placed = fx.s.conn(Side::B).unwrap().stats().fpdus_placed_ahead
            + fx.s.conn(Side::A).unwrap().stats().fpdus_placed_ahead;
        assert!(placed > 0, "aligned FPDUs after a loss are placed ahead");
    }
}

// RFC 5040 §5.3 (Send with Invalidate), §7.2: the peer's STag is invalidated when the
// message is delivered; a later RDMA Write to it is refused with a Terminate
// (DDP 1/1/00 invalid STag) and the writer's stream stops.
#[test]
fn send_with_invalidate_then_write_to_invalidated_stag() {
    let mut fx = fixture(4, lossy_link(), MpaConfig::default(), MpaConfig::default());
    let (sa, sb) = (fx.sa, fx.sb);
    let s = &mut fx.s;
    let victim = s
        .mem_mut(Side::B)
        .register(iwarp::mem::RegionSpec::new(1 << 20, 4096, rights(), PD))
        .unwrap();
    for i in 0..2 {
        s.conn(Side::B)
            .unwrap()
            .post_recv(RecvWr {
                wr_id: 10 + i,
                sgl: sge(sb, 4096 * i, 4096),
            })
            .unwrap();
    }
    let wrs = [
        SendWr::new(
            1,
            SendOp::Write {
                sgl: sge(sa, 0, 100).into(),
                remote: RemoteBuf {
                    stag: victim,
                    to: 0,
                },
            },
        ),
        SendWr::new(
            2,
            SendOp::Send {
                sgl: sge(sa, 0, 10).into(),
                solicited: true,
                invalidate: Some(victim),
            },
        ),
        SendWr::new(
            3,
            SendOp::Write {
                sgl: sge(sa, 200, 100).into(),
                remote: RemoteBuf {
                    stag: victim,
                    to: 1000,
                },
            },
        ),
    ];
    s.with_conn(Side::A, |a, m, now| {
        for wr in wrs {
            a.post_send(now, m, wr).unwrap();
        }
    });
    let mut ca = Vec::new();
    let mut cb = Vec::new();
    let ok = s.run_until(Duration::from_secs(10), |s| {
        drain(s, Side::A, &mut ca);
        drain(s, Side::B, &mut cb);
        s.events(Side::A).iter().any(|e| {
            matches!(e, ConnEvent::Stream(Event::TerminateReceived(t))
                if t.cause == TerminateCause::DDP_INVALID_STAG)
        })
    });
    assert!(
        ok,
        "A events {:?}\nB events {:?}",
        s.events(Side::A),
        s.events(Side::B)
    );
    drain(s, Side::B, &mut cb);
    let src = pattern(SRC_LEN, 42);
    // The first Write landed; the Send invalidated the STag; the second Write did not land.
    assert_eq!(bytes(s, Side::B, 1 << 20, 100), &src[..100]);
    assert!(!s.mem(Side::B).is_valid(victim));
    assert_ne!(bytes(s, Side::B, (1 << 20) + 1000, 100), &src[200..300]);
    let recv = cb
        .iter()
        .find(|c| c.wr_id == 10)
        .expect("receive completion");
    assert_eq!(recv.status, CompletionStatus::Success);
    assert_eq!(recv.invalidated, Some(victim));
    assert!(s.events(Side::B).iter().any(|e| matches!(
        e,
        ConnEvent::Stream(Event::TerminateSent(c)) if *c == TerminateCause::DDP_INVALID_STAG
    )));
    assert_eq!(s.conn(Side::B).unwrap().stats().terminates_sent, 1);
    assert_eq!(s.conn(Side::A).unwrap().stats().terminates_received, 1);
    // The writer's stream stopped (RFC 5040 §5.4): no more work is accepted.
    assert!(matches!(
        s.conn(Side::A).unwrap().state(),
        ConnState::Rdma(StreamState::Terminated | StreamState::Closed | StreamState::Error)
    ));
    let wr = SendWr::new(
        4,
        SendOp::Immediate {
            data: [1; 8],
            solicited: false,
        },
    );
    assert!(s
        .with_conn(Side::A, |a, m, now| a.post_send(now, m, wr))
        .is_err());
}
