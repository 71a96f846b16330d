//! Two RDMAP engines back to back: every operation at sizes from 0 to several MULPDUs,
//! segments handed over in order and shuffled (placed out of order, delivered in order).
//! Data must arrive byte-exact and completions appear in the order RFC 5040 §5.5 requires.

use crate::common::*;
use iwarp::mem::{STag, Sge};
use iwarp::rdmap::{
    Completion, CompletionOpcode, CompletionStatus, Event, RemoteBuf, SendOp, SendWr, WorkQueue,
};
use iwarp::wire::atomic::AtomicOp;
use iwarp::wire::terminate::TerminateCause;

const MULPDU: usize = 512;
const SIZES: [usize; 8] = [0, 1, 100, 493, 494, 495, 512, 3 * 512 + 7];

const SRC: u64 = 0;
const DST: u64 = 1 << 18;

struct Setup {
    p: Pair,
    a_src: STag,
    a_dst: STag,
    b_src: STag,
    b_dst: STag,
}

fn setup(ext: bool) -> Setup {
    let (ca, cb) = if ext {
        (cfg_ext(1), cfg_ext(2))
    } else {
        (cfg(1), cfg(2))
    };
    let mut p = Pair::new(ca, cb, MULPDU);
    let a_src = p.a.region(SRC, 1 << 16, all(), 0);
    let a_dst = p.a.region(DST, 1 << 16, all(), 0);
    let b_src = p.b.region(SRC, 1 << 16, all(), 0);
    let b_dst = p.b.region(DST, 1 << 16, all(), 0);
    p.a.write_bytes(SRC, &pattern(1 << 16, 7));
    p.b.write_bytes(SRC, &pattern(1 << 16, 91));
    Setup {
        p,
        a_src,
        a_dst,
        b_src,
        b_dst,
    }
}

impl Setup {
    /// Posts `wr` at A, runs the pair (see `run`) and returns A's completions.
    fn post_and_run(&mut self, wr: SendWr, shuffled: Option<u64>) -> Vec<Completion> {
        self.p.a.engine.post_send(wr).unwrap();
        run(&mut self.p, shuffled);
        self.p.a.completions()
    }
}

/// Moves segments until the pair is quiet, shuffled with the seed if one is given.
fn run(p: &mut Pair, shuffled: Option<u64>) {
    match shuffled {
        Some(seed) => p.pump_shuffled(seed),
        None => p.pump(),
    };
}

fn modes() -> Vec<Option<u64>> {
    vec![None, Some(1), Some(2), Some(0xDEAD)]
}

#[test]
fn send_every_size_and_variant() {
    // RFC 5040 §5.3: the four Send variants, delivered byte-exact, lengths reported.
    for mode in modes() {
        for (vi, (solicited, inval)) in [(false, false), (true, false), (false, true), (true, true)]
            .into_iter()
            .enumerate()
        {
            for &n in &SIZES {
                let mut s = setup(false);
                let victim = s.p.b.region(1 << 19, 64, all(), 0);
                s.p.b.post_recv(77, s.b_dst, 0, 8192);
                let wr = SendWr::new(
                    5,
                    SendOp::Send {
                        sgl: iwarp::mem::Sgl::one(Sge {
                            stag: s.a_src,
                            to: 0,
                            len: n as u32,
                        }),
                        solicited,
                        invalidate: inval.then_some(victim),
                    },
                );
                let ca = s.post_and_run(wr, mode);
                assert_eq!(ca.len(), 1, "variant {vi} size {n}");
                assert_eq!(ca[0].status, CompletionStatus::Success);
                assert_eq!(ca[0].opcode, CompletionOpcode::Send);
                assert_eq!(ca[0].byte_len, n as u32);
                let cb = s.p.b.completions();
                assert_eq!(cb.len(), 1);
                assert_eq!(cb[0].wr_id, 77);
                assert_eq!(cb[0].queue, WorkQueue::Recv);
                assert_eq!(cb[0].byte_len, n as u32);
                assert_eq!(cb[0].solicited, solicited);
                assert_eq!(cb[0].invalidated, inval.then_some(victim));
                assert_eq!(s.p.b.mem.is_valid(victim), !inval);
                assert_eq!(s.p.b.bytes(DST, n), &pattern(1 << 16, 7)[..n]);
                assert_eq!(s.p.b.bytes(DST + n as u64, 1), &[0]);
                assert_eq!(s.p.b.events().contains(&Event::SolicitedEvent), solicited);
            }
        }
    }
}

#[test]
fn write_every_size() {
    // RFC 5040 §5.1: placed, never delivered; no completion at the sink.
    for mode in modes() {
        for &n in &SIZES {
            let mut s = setup(false);
            let wr = SendWr::new(
                1,
                SendOp::Write {
                    sgl: iwarp::mem::Sgl::from([
                        Sge {
                            stag: s.a_src,
                            to: 0,
                            len: (n / 2) as u32,
                        },
                        Sge {
                            stag: s.a_src,
                            to: 5000,
                            len: (n - n / 2) as u32,
                        },
                    ]),
                    remote: RemoteBuf {
                        stag: s.b_dst,
                        to: 33,
                    },
                },
            );
            let ca = s.post_and_run(wr, mode);
            assert_eq!(ca.len(), 1);
            assert_eq!(
                (ca[0].opcode, ca[0].status),
                (CompletionOpcode::Write, CompletionStatus::Success)
            );
            assert!(s.p.b.completions().is_empty());
            let src = pattern(1 << 16, 7);
            let mut expect = src[..n / 2].to_vec();
            expect.extend_from_slice(&src[5000..5000 + n - n / 2]);
            assert_eq!(s.p.b.bytes(DST + 33, n), &expect[..]);
            assert_eq!(s.p.b.bytes(DST + 33 + n as u64, 1), &[0]);
            assert_eq!(s.p.b.bytes(DST + 32, 1), &[0]);
        }
    }
}

#[test]
fn read_every_size() {
    // RFC 5040 §5.2: Read Request + Read Response, completes at the requester on delivery.
    for mode in modes() {
        for &n in &SIZES {
            let mut s = setup(false);
            let wr = read_wr(3, s.a_dst, 10, s.b_src, 20, n as u32);
            let ca = s.post_and_run(wr, mode);
            assert_eq!(ca.len(), 1);
            assert_eq!(
                (ca[0].opcode, ca[0].status, ca[0].byte_len),
                (CompletionOpcode::Read, CompletionStatus::Success, n as u32)
            );
            assert!(s.p.b.completions().is_empty());
            assert_eq!(s.p.a.bytes(DST + 10, n), &pattern(1 << 16, 91)[20..20 + n]);
            assert_eq!(s.p.a.bytes(DST + 10 + n as u64, 1), &[0]);
            assert_eq!(s.p.a.engine.outstanding_requests(), 0);
        }
    }
}

#[test]
fn immediate_data_both_variants() {
    // EXT-01 §6
    for mode in modes() {
        for solicited in [false, true] {
            let mut s = setup(true);
            s.p.b.post_recv(8, s.b_dst, 0, 64);
            let data = *b"imm-data";
            let wr = SendWr::new(4, SendOp::Immediate { data, solicited });
            let ca = s.post_and_run(wr, mode);
            assert_eq!(
                (ca[0].opcode, ca[0].status),
                (CompletionOpcode::Immediate, CompletionStatus::Success)
            );
            let cb = s.p.b.completions();
            assert_eq!(cb.len(), 1);
            assert_eq!(cb[0].opcode, CompletionOpcode::RecvImmediate);
            assert_eq!(cb[0].immediate, Some(data));
            assert_eq!(cb[0].solicited, solicited);
        }
    }
}

#[test]
fn atomics_back_to_back() {
    // EXT-01 §5.1: FetchAdd, Swap, CmpSwap executed at the responder; original returned.
    for mode in modes() {
        let mut s = setup(true);
        s.p.b.write_bytes(DST + 64, &100u64.to_ne_bytes());
        let remote = RemoteBuf {
            stag: s.b_dst,
            to: 64,
        };
        let ops = [
            (AtomicOp::FetchAdd, 5u64, 0u64, 0u64, u64::MAX),
            (AtomicOp::Swap, 7, u64::MAX, 0, u64::MAX),
            (AtomicOp::CmpSwap, 9, u64::MAX, 7, u64::MAX),
            (AtomicOp::CmpSwap, 11, u64::MAX, 1234, u64::MAX),
        ];
        for (i, (op, d, m, c, cm)) in ops.into_iter().enumerate() {
            s.p.a
                .engine
                .post_send(SendWr::new(
                    i as u64,
                    SendOp::Atomic {
                        op,
                        remote,
                        add_swap: d,
                        add_swap_mask: m,
                        compare: c,
                        compare_mask: cm,
                        result: Sge {
                            stag: s.a_dst,
                            to: 8 * i as u64,
                            len: 8,
                        },
                    },
                ))
                .unwrap();
        }
        run(&mut s.p, mode);
        let ca = s.p.a.completions();
        let originals: Vec<u64> = ca.iter().map(|c| c.atomic_original.unwrap()).collect();
        assert_eq!(originals, vec![100, 105, 7, 9]);
        assert!(ca.iter().all(|c| c.status == CompletionStatus::Success));
        assert_eq!(
            ca.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        let mut v = [0u8; 8];
        v.copy_from_slice(s.p.b.bytes(DST + 64, 8));
        assert_eq!(u64::from_ne_bytes(v), 9);
        for (i, o) in originals.iter().enumerate() {
            v.copy_from_slice(s.p.a.bytes(DST + 8 * i as u64, 8));
            assert_eq!(u64::from_ne_bytes(v), *o);
        }
    }
}

#[test]
fn mixed_workload_completes_in_posting_order() {
    // RFC 5040 §5.5 rule 15; VERBS-00 §8.2.2 rule 2 (C06): Reads mixed with Sends and
    // Writes complete in posting order on both sides, shuffled or not.
    for mode in modes() {
        let mut s = setup(true);
        for i in 0..10 {
            s.p.b.post_recv(100 + i, s.b_dst, 4096 * i, 4096);
            s.p.a.post_recv(200 + i, s.a_dst, 4096 * i, 4096);
        }
        let mut expect = Vec::new();
        for i in 0..12u64 {
            let n = (i as u32 * 333) % 1700;
            let op = match i % 4 {
                0 => SendOp::Read {
                    sink: RemoteBuf {
                        stag: s.a_dst,
                        to: 50_000,
                    },
                    remote: RemoteBuf {
                        stag: s.b_src,
                        to: 0,
                    },
                    len: n,
                },
                1 => SendOp::Send {
                    sgl: iwarp::mem::Sgl::one(Sge {
                        stag: s.a_src,
                        to: 0,
                        len: n,
                    }),
                    solicited: false,
                    invalidate: None,
                },
                2 => SendOp::Write {
                    sgl: iwarp::mem::Sgl::one(Sge {
                        stag: s.a_src,
                        to: 0,
                        len: n,
                    }),
                    remote: RemoteBuf {
                        stag: s.b_dst,
                        to: 60_000,
                    },
                },
                _ => SendOp::Immediate {
                    data: [i as u8; 8],
                    solicited: false,
                },
            };
            expect.push(i);
            s.p.a.engine.post_send(SendWr::new(i, op)).unwrap();
            // B also sends towards A concurrently.
            let wr = read_wr(1000 + i, s.b_dst, 50_000, s.a_src, 0, 700);
            s.p.b.engine.post_send(wr).unwrap();
        }
        run(&mut s.p, mode);
        let ca: Vec<u64> =
            s.p.a
                .completions()
                .into_iter()
                .filter(|c| c.queue == WorkQueue::Send)
                .map(|c| c.wr_id)
                .collect();
        assert_eq!(ca, expect);
        let cb: Vec<u64> = s.p.b.completions().into_iter().map(|c| c.wr_id).collect();
        let mut want_b: Vec<u64> = (100..106).collect();
        want_b.extend(1000..1012);
        let mut got_b = cb.clone();
        got_b.sort();
        assert_eq!(got_b, want_b);
        // Receives complete in MSN order (C05).
        let recvs: Vec<u64> = cb.iter().copied().filter(|w| *w < 1000).collect();
        assert_eq!(recvs, (100..106).collect::<Vec<_>>());
        let reads: Vec<u64> = cb.iter().copied().filter(|w| *w >= 1000).collect();
        assert_eq!(reads, (1000..1012).collect::<Vec<_>>());
    }
}

mod random {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Send(u32),
        Write(u32),
        Read(u32),
        Imm(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..3000).prop_map(Op::Send),
            (0u32..3000).prop_map(Op::Write),
            (0u32..3000).prop_map(Op::Read),
            any::<u8>().prop_map(Op::Imm),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

        // RFC 5040 §5.5 rules 10–20, RFC 5041 §5.3–§5.4: any mix of operations, any MULPDU,
        // in order or shuffled: byte-exact data, completions in posting / MSN order.
        #[test]
        fn random_workloads(ops in proptest::collection::vec(op(), 1..12),
                            mulpdu in 80usize..2000, shuffle in proptest::option::of(any::<u64>())) {
            let mut s = setup(true);
            s.p.mulpdu = mulpdu;
            let src_a = pattern(1 << 16, 7);
            let src_b = pattern(1 << 16, 91);
            let mut recv_expect = Vec::new();
            for (i, o) in ops.iter().enumerate() {
                let i64 = i as u64;
                let slot = 4096 * i64;
                let op = match *o {
                    Op::Send(n) => {
                        s.p.b.post_recv(500 + i64, s.b_dst, slot, 4096);
                        recv_expect.push((500 + i64, n, slot, None));
                        SendOp::Send {
                            sgl: iwarp::mem::Sgl::one(Sge { stag: s.a_src, to: i64 * 3, len: n }),
                            solicited: i % 3 == 0,
                            invalidate: None,
                        }
                    }
                    Op::Imm(v) => {
                        s.p.b.post_recv(500 + i64, s.b_dst, slot, 4096);
                        recv_expect.push((500 + i64, 0, slot, Some([v; 8])));
                        SendOp::Immediate { data: [v; 8], solicited: false }
                    }
                    Op::Write(n) => SendOp::Write {
                        sgl: iwarp::mem::Sgl::one(Sge { stag: s.a_src, to: i64 * 3, len: n }),
                        remote: RemoteBuf { stag: s.b_dst, to: slot },
                    },
                    Op::Read(n) => SendOp::Read {
                        sink: RemoteBuf { stag: s.a_dst, to: slot },
                        remote: RemoteBuf { stag: s.b_src, to: i64 * 5 },
                        len: n,
                    },
                };
                s.p.a.engine.post_send(SendWr::new(i64, op)).unwrap();
            }
            match shuffle {
                Some(seed) => s.p.pump_shuffled(seed),
                None => s.p.pump(),
            };
            let ca = s.p.a.completions();
            prop_assert_eq!(ca.iter().map(|c| c.wr_id).collect::<Vec<_>>(), (0..ops.len() as u64).collect::<Vec<_>>());
            prop_assert!(ca.iter().all(|c| c.status == CompletionStatus::Success));
            let cb = s.p.b.completions();
            prop_assert_eq!(cb.len(), recv_expect.len());
            for (c, (id, n, slot, imm)) in cb.iter().zip(&recv_expect) {
                prop_assert_eq!(c.wr_id, *id);
                prop_assert_eq!(c.byte_len, *n);
                prop_assert_eq!(c.immediate, *imm);
                let i = (id - 500) as usize;
                prop_assert_eq!(s.p.b.bytes(DST + slot, *n as usize), &src_a[i * 3..i * 3 + *n as usize]);
            }
            for (i, o) in ops.iter().enumerate() {
                let slot = 4096 * i as u64;
                match *o {
                    Op::Write(n) => prop_assert_eq!(s.p.b.bytes(DST + slot, n as usize), &src_a[i * 3..i * 3 + n as usize]),
                    Op::Read(n) => prop_assert_eq!(s.p.a.bytes(DST + slot, n as usize), &src_b[i * 5..i * 5 + n as usize]),
                    _ => {}
                }
            }
            prop_assert!(s.p.a.engine.is_drained() && s.p.b.engine.is_drained());
        }
    }
}

/// Whether `side` says it has something to send, both ways of asking: `has_tx_work` and
/// `has_segment` (no fences or ORD limits in this test, so the two agree).
fn says_work(side: &Side) -> bool {
    let work = side.engine.has_tx_work();
    assert_eq!(work, side.engine.has_segment(MULPDU), "has_segment");
    work
}

/// Polls one segment of `side`'s, which must exist.
fn poll_one(side: &mut Side) -> Vec<u8> {
    let s = side.engine.poll_segment(now(), MULPDU, &side.mem);
    s.expect("a segment").to_vec()
}

/// `a`'s posted request (`what`: Read, Atomic) goes to `b` and is answered: `a` has nothing
/// left once it is taken, `b` owes the response until it is taken, then `a` receives it.
fn request_answered(a: &mut Side, b: &mut Side, what: &str) {
    let request = poll_one(a);
    assert!(!says_work(a), "the {what} Request taken");
    b.receive(&request);
    assert!(says_work(b), "{what} Response owed");
    let response = poll_one(b);
    assert!(!says_work(b), "the {what} Response taken");
    a.receive(&response);
}

/// The engine answers "anything to send?" from a summary kept in its first line (nothing
/// under way, no response owed, every SQ WR started). Each change of what waits to start
/// must show in the answer: a posted WR, a message's segments until its last, a Read
/// Response and an Atomic Response owed to the peer (RFC 5040 §5.2, RFC 7306 §5.1), a
/// Terminate queued over pending work (RFC 5040 §5.4) and sent.
#[test]
fn the_idle_summary_follows_what_waits_to_start() {
    let mut s = setup(true);
    let (a, b) = (&mut s.p.a, &mut s.p.b);
    assert!(!says_work(a) && !says_work(b), "fresh streams have nothing");

    // A Write of two segments: work from the post until its last segment is taken.
    let write = SendOp::Write {
        sgl: iwarp::mem::Sgl::one(Sge {
            stag: s.a_src,
            to: 0,
            len: MULPDU as u32,
        }),
        remote: RemoteBuf {
            stag: s.b_dst,
            to: 0,
        },
    };
    a.engine.post_send(SendWr::new(1, write.clone())).unwrap();
    assert!(says_work(a), "a posted Write");
    let first = poll_one(a);
    assert!(says_work(a), "the Write's second segment");
    let second = poll_one(a);
    assert!(!says_work(a), "the Write fully taken");
    b.receive(&first);
    b.receive(&second);
    assert!(!says_work(b), "a placed Write owes nothing (RFC 5040 §4.4)");

    // A Read: its Request from A, then the Response B owes.
    let read = read_wr(2, s.a_dst, 0, s.b_src, 0, 100);
    a.engine.post_send(read).unwrap();
    assert!(says_work(a), "a posted Read");
    request_answered(a, b, "Read");
    assert!(!says_work(a), "the Read completed");

    // An Atomic: the Atomic Response B owes.
    let atomic = SendOp::Atomic {
        op: AtomicOp::FetchAdd,
        remote: RemoteBuf {
            stag: s.b_dst,
            to: 4096,
        },
        add_swap: 1,
        add_swap_mask: 0,
        compare: 0,
        compare_mask: 0,
        result: Sge {
            stag: s.a_dst,
            to: 4096,
            len: 8,
        },
    };
    a.engine.post_send(SendWr::new(3, atomic)).unwrap();
    request_answered(a, b, "Atomic");

    // A Terminate over a posted Write: the Terminate is the work until it is sent.
    a.engine.post_send(SendWr::new(4, write)).unwrap();
    a.engine.abort(TerminateCause::RDMAP_CATASTROPHIC_STREAM);
    assert!(says_work(a), "a Terminate to send");
    let terminate = poll_one(a);
    assert_eq!(terminate[1] & 0x0F, 0x7, "the Terminate opcode");
    assert!(!says_work(a), "the Terminate sent, the Write flushed");
}
