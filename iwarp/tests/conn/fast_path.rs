//! The in-order fast path for the segments of an RDMA Write (`Engine::place_next_write`
//! behind `Connection`'s in-order receive): FPDUs fed to an established connection's sink
//! by hand, whole or cut, in order or ahead, good or failing a check, with the fast path on
//! and off (`ConnConfig::rx_fast_path`): the same octets land, the same Terminate goes out.

use std::time::Duration;

use crate::common::*;
use iwarp::conn::{ConnConfig, ConnEvent, ConnState};
use iwarp::mem::{Access, PdId, RegionSpec, STag, Sge, SimpleMemory};
use iwarp::mpa::{Framer, MpaConfig};
use iwarp::rdmap::{RemoteBuf, SendOp, SendWr, StreamState};
use iwarp::wire::ddp::{DdpRepr, TaggedRepr, UntaggedRepr};
use iwarp::wire::terminate::{TerminateCause as T, TerminateRepr};
use tcp::SegmentSink;

const MEM: usize = 1 << 20;
/// Where the Writes fed by hand land in B's memory (TO = arena offset: zero-based region).
const DST: u64 = 64 << 10;
/// ULPDU payload of each Write segment fed by hand.
const CHUNK: usize = 1000;
/// The TO of Write segment 3, the one the error cases replace.
const TO3: u64 = DST + 3 * CHUNK as u64;
/// RDMAP control octet of an RDMA Write (RV 01b, opcode 0000b, RFC 5040 §4.2).
const WRITE: u8 = 0x40;

/// The STags of the tests: A's source, B's Write target (all rights, PD 1) and those the
/// error cases aim at: a region of B without Remote Write, one of another PD.
struct Stags {
    /// A's region over its whole memory (the source of the Writes over TCP).
    a_whole: STag,
    target: STag,
    read_only: STag,
    other_pd: STag,
}

fn mpa(crc: bool, markers: bool) -> MpaConfig {
    MpaConfig {
        require_crc: crc,
        want_markers: markers,
        accept_markers: markers,
        ..MpaConfig::default()
    }
}

/// An established pair with `mpa` on both sides, B's fast path as `fast`.
fn established(mpa: MpaConfig, fast: bool) -> (Sim, Stags) {
    let (ma, a_whole) = memory(MEM);
    let (mut mb, target) = memory(MEM);
    let read_only = mb
        .register(RegionSpec::new(
            0,
            MEM as u64,
            Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_READ,
            PD,
        ))
        .unwrap();
    let other_pd = mb
        .register(RegionSpec::new(0, MEM as u64, rights(), PdId(2)))
        .unwrap();
    let cfg_b = ConnConfig {
        rx_fast_path: fast,
        ..conn_config(mpa.clone())
    };
    let mut s = Sim::new(
        7,
        clean_link(),
        (conn_config(mpa), ma),
        (cfg_b, mb),
        Decision::Accept(Vec::new()),
    );
    assert!(s.run_until(Duration::from_secs(2), |s| {
        s.established(Side::A) && s.established(Side::B)
    }));
    let stags = Stags {
        a_whole,
        target,
        read_only,
        other_pd,
    };
    (s, stags)
}

/// B's RCV.NXT: where the next in-order octet fed to its sink goes.
fn rcv_nxt(s: &Sim) -> u32 {
    let b = &s.nodes[Side::B.index()];
    b.engine.info(b.conn.unwrap()).unwrap().rcv_nxt
}

/// A tagged DDP segment (RFC 5041 §4.2) of a Write: `data` at `to` of `stag`.
fn write_seg(stag: u32, to: u64, last: bool, data: &[u8]) -> Vec<u8> {
    let mut seg = vec![0; 14];
    DdpRepr::Tagged(TaggedRepr {
        last,
        rsvd_ulp: WRITE,
        stag,
        to,
    })
    .emit(&mut seg)
    .unwrap();
    seg.extend_from_slice(data);
    seg
}

/// The `i`-th chunk of the pattern the Writes carry.
fn chunk(i: usize) -> Vec<u8> {
    pattern(CHUNK, 100 + i as u64)
}

/// The good Write segment `i`: chunk `i` at `DST + i * CHUNK`.
fn good(stags: &Stags, i: usize) -> Vec<u8> {
    let to = DST + (i * CHUNK) as u64;
    write_seg(stags.target.0, to, false, &chunk(i))
}

/// FPDUs (no markers, CRC on) carrying `segments`, the first at `seq`.
fn fpdus(seq: u32, segments: &[Vec<u8>]) -> Vec<u8> {
    let framer = Framer::new(true, None);
    let mut out = Vec::new();
    for s in segments {
        let at = seq.wrapping_add(out.len() as u32);
        framer.emit_fpdu(at, &[s], &mut out).unwrap();
    }
    out
}

/// Feeds `payload` at `seq` to B's sink as TCP would, `in_order` as given.
fn feed(s: &mut Sim, seq: u32, payload: &[u8], in_order: bool) -> tcp::Consumed {
    let now = s.now;
    s.with_conn(Side::B, |c, m, _| {
        <Conn as SegmentSink<SimpleMemory>>::on_segment(c, m, now, seq, payload, in_order, seq)
    })
}

/// Feeds an in-order `payload` at `seq` to B's sink, which must take it whole.
fn feed_whole(s: &mut Sim, seq: u32, payload: &[u8]) {
    let c = feed(s, seq, payload, true);
    assert_eq!(
        c.total(),
        payload.len(),
        "an in-order segment is taken whole"
    );
}

/// Tells B's sink that RCV.NXT moved to `rcv_nxt` (over octets it took ahead).
fn advance(s: &mut Sim, rcv_nxt: u32) {
    let now = s.now;
    s.with_conn(Side::B, |c, m, _| {
        <Conn as SegmentSink<SimpleMemory>>::on_advance(c, m, now, rcv_nxt)
    });
}

/// B's landed octets of chunk `i`.
fn landed(s: &Sim, i: usize) -> &[u8] {
    let at = DST as usize + i * CHUNK;
    &s.mem(Side::B).bytes()[at..at + CHUNK]
}

fn stats(s: &mut Sim) -> iwarp::conn::ConnStats {
    s.conn(Side::B).unwrap().stats()
}

fn local_terminate(s: &mut Sim) -> Option<TerminateRepr> {
    s.conn(Side::B)?.engine()?.local_terminate().copied()
}

#[test]
fn whole_write_fpdus_take_the_fast_path_and_land_exactly() {
    // RFC 5041 §5.3, §7.2: each tagged segment placed at its STag and TO.
    let (mut s, st) = established(mpa(true, false), true);
    let mut seq = rcv_nxt(&s);
    let mut i = 0;
    // Segments of one to five FPDUs each.
    for n in [1, 3, 5, 2, 4, 1] {
        let segs: Vec<_> = (i..i + n).map(|k| good(&st, k)).collect();
        let payload = fpdus(seq, &segs);
        feed_whole(&mut s, seq, &payload);
        seq = seq.wrapping_add(payload.len() as u32);
        i += n;
    }
    for k in 0..i {
        assert_eq!(landed(&s, k), &chunk(k)[..], "chunk {k}");
    }
    let mem = s.mem(Side::B).bytes();
    assert!(
        mem[..DST as usize].iter().all(|&b| b == 0),
        "nothing in front"
    );
    let end = DST as usize + i * CHUNK;
    assert!(mem[end..].iter().all(|&b| b == 0), "nothing behind");
    let st = stats(&mut s);
    assert_eq!(st.fpdus_fast, i as u64);
    assert_eq!(st.fpdus_received, i as u64);
    let ops = s.conn(Side::B).unwrap().op_counters().received[0];
    assert_eq!((ops.segments, ops.bytes), (i as u64, (i * CHUNK) as u64));
    assert!(local_terminate(&mut s).is_none());
}

#[test]
fn cut_fpdus_go_the_general_way_and_nothing_is_lost() {
    // RFC 5044 §4.1: an FPDU may span TCP segments; the receiver reassembles it.
    let (mut s, st) = established(mpa(true, false), true);
    let seq0 = rcv_nxt(&s);
    let segs: Vec<_> = (0..6).map(|k| good(&st, k)).collect();
    let stream = fpdus(seq0, &segs);
    let span = stream.len() / 6;
    // FPDU 0 whole (fast), FPDU 1 cut in three, FPDU 2 and the first half of FPDU 3,
    // the rest of 3, then 4 and 5 whole (fast again once at a boundary).
    let cuts = [
        0,
        span,
        span + 7,
        span + 700,
        2 * span,
        3 * span + 500,
        4 * span,
        6 * span,
    ];
    let mut fast_after = Vec::new();
    for w in cuts.windows(2) {
        let seq = seq0.wrapping_add(w[0] as u32);
        let c = feed(&mut s, seq, &stream[w[0]..w[1]], true);
        assert_eq!(c.total(), w[1] - w[0]);
        fast_after.push(stats(&mut s).fpdus_fast);
    }
    // Fast: FPDU 0; then FPDU 2 (at a boundary, before the cut FPDU 3); then 4 and 5.
    assert_eq!(fast_after, [1, 1, 1, 1, 2, 2, 4]);
    for k in 0..6 {
        assert_eq!(landed(&s, k), &chunk(k)[..], "chunk {k}");
    }
    assert_eq!(stats(&mut s).fpdus_received, 6);
    assert!(local_terminate(&mut s).is_none());
}

#[test]
fn the_fpdu_filling_the_hole_takes_the_fast_path() {
    // RFC 5041 §5.3: placement may happen out of order, delivery stays in order; the
    // in-order segment that fills the hole is placed as any other in order (RFC 5041 §7.2).
    let (mut s, st) = established(mpa(true, false), true);
    let seq0 = rcv_nxt(&s);
    let segs: Vec<_> = (0..5).map(|k| good(&st, k)).collect();
    let stream = fpdus(seq0, &segs);
    let span = stream.len() / 5;
    let at = |k: usize| seq0.wrapping_add((k * span) as u32);
    feed(&mut s, at(0), &stream[..span], true);
    // FPDU 2 arrives ahead of RCV.NXT: MPA places it at once (RFC 5044 §6, aligned).
    let c = feed(&mut s, at(2), &stream[2 * span..3 * span], false);
    assert_eq!(c.total(), span);
    assert_eq!(stats(&mut s).fpdus_placed_ahead, 1);
    assert_eq!(landed(&s, 2), &chunk(2)[..]);
    // FPDU 1 in order, with FPDU 2 held ahead behind it: the fast path takes it (it ends
    // where the FPDU placed ahead starts) and delivery moves on past FPDU 2.
    feed(&mut s, at(1), &stream[span..2 * span], true);
    assert_eq!(stats(&mut s).fpdus_fast, 2);
    assert_eq!(
        stats(&mut s).fpdus_received,
        3,
        "FPDU 2 not handed up again"
    );
    // TCP's RCV.NXT passes the FPDU taken ahead; FPDUs 3 and 4 take the fast path.
    advance(&mut s, at(3));
    feed(&mut s, at(3), &stream[3 * span..], true);
    let st_b = stats(&mut s);
    assert_eq!(st_b.fpdus_fast, 4);
    assert_eq!(st_b.fpdus_received, 5);
    for k in 0..5 {
        assert_eq!(landed(&s, k), &chunk(k)[..], "chunk {k}");
    }
    assert!(local_terminate(&mut s).is_none());
}

/// One FPDU arriving in the middle of a Write with a header or CRC the receiver refuses,
/// and the Terminate it must give (its layer, type and code).
struct Bad {
    name: &'static str,
    /// The segment (DDP header + payload) in place of Write segment 3.
    segment: fn(&Stags) -> Vec<u8>,
    /// Corrupts the FPDU's CRC after framing.
    bad_crc: bool,
    cause: T,
}

fn bad_cases() -> Vec<Bad> {
    vec![
        Bad {
            // RFC 5041 §7.2 (invalid STag); §8.1.
            name: "unknown STag",
            segment: |_| write_seg(0x00BA_D001, DST, false, &chunk(3)),
            bad_crc: false,
            cause: T::DDP_INVALID_STAG,
        },
        Bad {
            // RFC 5041 §7.2 (base or bounds violation); §8.1.
            name: "past the region's end",
            segment: |st| write_seg(st.target.0, MEM as u64 - 10, false, &chunk(3)),
            bad_crc: false,
            cause: T::DDP_BASE_BOUNDS,
        },
        Bad {
            // RFC 5041 §7.2 (TO wrap).
            name: "TO wraps",
            segment: |st| write_seg(st.target.0, u64::MAX - 99, false, &chunk(3)),
            bad_crc: false,
            cause: T::DDP_TO_WRAP,
        },
        Bad {
            // RFC 5041 §8.1: no Remote Write right; reported as an invalid STag (§7.2).
            name: "no Remote Write right",
            segment: |st| write_seg(st.read_only.0, TO3, false, &chunk(3)),
            bad_crc: false,
            cause: T::DDP_INVALID_STAG,
        },
        Bad {
            // RFC 5041 §8.2; RFC 5040 §8.1.1 item 1: the STag of another PD.
            name: "another protection domain",
            segment: |st| write_seg(st.other_pd.0, TO3, false, &chunk(3)),
            bad_crc: false,
            cause: T::DDP_STAG_NOT_ASSOCIATED,
        },
        Bad {
            // RFC 5041 §4.1, §7.2: DV 10b on a tagged segment.
            name: "DDP version",
            segment: |st| {
                let mut s = good(st, 3);
                s[0] = (s[0] & !0x03) | 0x02;
                s
            },
            bad_crc: false,
            cause: T::DDP_TAGGED_INVALID_VERSION,
        },
        Bad {
            // RFC 5040 §4.1, §7.2: RV 00b.
            name: "RDMAP version",
            segment: |st| {
                let mut s = good(st, 3);
                s[1] &= 0x3F;
                s
            },
            bad_crc: false,
            cause: T::RDMAP_INVALID_VERSION,
        },
        Bad {
            // RFC 5040 §7.2: a Read Response with no Read outstanding.
            name: "unexpected Read Response",
            segment: |st| {
                let mut s = good(st, 3);
                s[1] = 0x42;
                s
            },
            bad_crc: false,
            cause: T::RDMAP_UNEXPECTED_OPCODE,
        },
        Bad {
            // RFC 5041 §7.1 check 1, §7.2: untagged, Queue Number 5.
            name: "invalid QN",
            segment: |_| untagged_send(5, 1),
            bad_crc: false,
            cause: T::DDP_INVALID_QN,
        },
        Bad {
            // RFC 5041 §7.1 check 2, §7.2: QN 0, an MSN far beyond the posted buffers.
            name: "MSN out of range",
            segment: |_| untagged_send(0, 1 << 20),
            bad_crc: false,
            cause: T::DDP_MSN_RANGE,
        },
        Bad {
            // RFC 5044 §8: the FPDU's CRC does not match.
            name: "CRC",
            segment: |st| good(st, 3),
            bad_crc: true,
            cause: T::MPA_CRC_ERROR,
        },
    ]
}

/// An untagged Send segment (RFC 5041 §4.3) on queue `qn` with `msn`.
fn untagged_send(qn: u32, msn: u32) -> Vec<u8> {
    let mut seg = vec![0; 18];
    DdpRepr::Untagged(UntaggedRepr {
        last: true,
        rsvd_ulp: 0x43,
        rsvd_ulp_word: 0,
        qn,
        msn,
        mo: 0,
    })
    .emit(&mut seg)
    .unwrap();
    seg.extend_from_slice(&chunk(3));
    seg
}

/// Feeds Write segments 0..3 (one TCP segment), then a TCP segment of the bad FPDU and
/// the good segment 4 behind it; returns B's Terminate and its stats.
fn feed_bad(case: &Bad, fast: bool) -> (TerminateRepr, iwarp::conn::ConnStats, Vec<u8>) {
    let (mut s, st) = established(mpa(true, false), fast);
    let seq0 = rcv_nxt(&s);
    let first = fpdus(seq0, &(0..3).map(|k| good(&st, k)).collect::<Vec<_>>());
    feed(&mut s, seq0, &first, true);
    let seq1 = seq0.wrapping_add(first.len() as u32);
    let mut second = fpdus(seq1, &[(case.segment)(&st), good(&st, 4)]);
    if case.bad_crc {
        // The first FPDU's CRC: its last four octets before the second FPDU.
        let span = second.len() - fpdus(0, &[good(&st, 4)]).len();
        second[span - 1] ^= 0x01;
    }
    feed(&mut s, seq1, &second, true);
    let t = local_terminate(&mut s).unwrap_or_else(|| panic!("{}: no Terminate", case.name));
    let stats = stats(&mut s);
    let mem = s.mem(Side::B).bytes().to_vec();
    (t, stats, mem)
}

#[test]
fn checks_failing_mid_write_give_the_general_paths_terminate() {
    for case in bad_cases() {
        let (t_fast, st_fast, mem_fast) = feed_bad(&case, true);
        let (t_gen, st_gen, mem_gen) = feed_bad(&case, false);
        assert_eq!(t_fast.cause, case.cause, "{}", case.name);
        assert_eq!(t_fast, t_gen, "{}: the same Terminate both ways", case.name);
        // The three good FPDUs in front went the fast way, the refused one did not.
        assert_eq!(st_fast.fpdus_fast, 3, "{}", case.name);
        assert_eq!(st_gen.fpdus_fast, 0, "{}", case.name);
        assert_eq!(
            st_fast.fpdus_received, st_gen.fpdus_received,
            "{}",
            case.name
        );
        assert_eq!(st_fast.crc_errors, st_gen.crc_errors, "{}", case.name);
        // The same octets landed: the first three chunks, nothing of the refused FPDU or
        // of the one behind it (RFC 5041 §8.1: nothing outside the checked range).
        assert!(mem_fast == mem_gen, "{}: memory differs", case.name);
        for k in 0..3 {
            let at = DST as usize + k * CHUNK;
            assert_eq!(&mem_fast[at..at + CHUNK], &chunk(k)[..], "{}", case.name);
        }
        let rest = DST as usize + 3 * CHUNK;
        assert!(
            mem_fast[rest..].iter().all(|&b| b == 0),
            "{}: octets past the refused FPDU landed",
            case.name
        );
        assert!(
            mem_fast[..DST as usize].iter().all(|&b| b == 0),
            "{}",
            case.name
        );
    }
}

/// A Write of `len` octets from A's offset 0 to B's `DST`, over the simulated TCP.
fn sim_write(mpa: MpaConfig, fast: bool, len: usize) -> Sim {
    let (mut s, st) = established(mpa, fast);
    let src = pattern(len, 5);
    s.mem_mut(Side::A).bytes_mut()[..len].copy_from_slice(&src);
    let wr = SendWr::new(
        1,
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: st.a_whole,
                to: 0,
                len: len as u32,
            }),
            remote: RemoteBuf {
                stag: st.target,
                to: DST,
            },
        },
    );
    s.with_conn(Side::A, |c, m, now| c.post_send(now, m, wr))
        .unwrap();
    let done = s.run_until(Duration::from_secs(10), |s| {
        s.mem(Side::B).bytes()[DST as usize..DST as usize + len] == src[..]
    });
    assert!(done, "A {:?}\nB {:?}", s.events(Side::A), s.events(Side::B));
    assert!(matches!(
        s.conn(Side::B).unwrap().state(),
        ConnState::Rdma(StreamState::Active)
    ));
    assert!(!s
        .events(Side::B)
        .iter()
        .any(|e| matches!(e, ConnEvent::Stream(_))));
    s
}

#[test]
fn writes_over_tcp_take_the_fast_path_with_crcs_on_or_off() {
    for crc in [true, false] {
        let len = 256 << 10;
        let mut s = sim_write(mpa(crc, false), true, len);
        let st = stats(&mut s);
        // Every FPDU of the Write: one per TCP segment at most, all in order and whole.
        assert!(
            st.fpdus_received >= (len / 1460) as u64,
            "crc {crc}: {st:?}"
        );
        assert_eq!(st.fpdus_fast, st.fpdus_received, "crc {crc}: {st:?}");
    }
}

#[test]
fn with_markers_or_the_fast_path_off_the_general_path_places_the_write() {
    // RFC 5044 §5: markers inside FPDUs are left to the general receiver.
    let len = 128 << 10;
    for (markers, fast) in [(true, true), (false, false)] {
        let mut s = sim_write(mpa(true, markers), fast, len);
        let st = stats(&mut s);
        assert!(st.fpdus_received > 0);
        assert_eq!(st.fpdus_fast, 0, "markers {markers}, fast {fast}");
    }
}

/// Feeds `segments` (whole TCP payloads, in order from RCV.NXT) to B's sink as a receive
/// run (`on_run_segment` each, one `on_advance` at the end, as the engine's run entry does)
/// or segment by segment (`on_segment` and `on_advance` each, as outside a burst); returns
/// B's Terminate, stats, events and memory.
fn feed_run(fast: bool, run: bool, segments: impl Fn(&Stags, u32) -> Vec<Vec<u8>>) -> String {
    let (mut s, st) = established(mpa(true, false), fast);
    let seq0 = rcv_nxt(&s);
    let mut seq = seq0;
    for payload in segments(&st, seq0) {
        let now = s.now;
        if run {
            s.with_conn(Side::B, |c, m, _| {
                <Conn as SegmentSink<SimpleMemory>>::on_run_segment(c, m, now, seq, &payload)
            });
        } else {
            feed_whole(&mut s, seq, &payload);
        }
        seq = seq.wrapping_add(payload.len() as u32);
        if !run {
            advance(&mut s, seq);
        }
    }
    if run {
        advance(&mut s, seq);
    }
    let t = local_terminate(&mut s);
    let stats = stats(&mut s);
    let c = s.conn(Side::B).unwrap();
    let events: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    let mem = s.mem(Side::B).bytes().to_vec();
    format!("{t:?} {stats:?} {events:?} {:?}", mem)
}

#[test]
fn a_run_handed_over_segment_by_segment_or_as_a_run_answers_alike() {
    // RFC 5041 §5.3, §7.2 / RFC 5040 §7 / RFC 5044 §8: the same placements, Terminate
    // (with the data in front placed and nothing behind), events and counters whether the
    // run's segments come through `on_run_segment` with one `on_advance` at its end or
    // through `on_segment` with `on_advance` after each.
    let good_run = |st: &Stags, seq0: u32| {
        let mut out = Vec::new();
        let mut seq = seq0;
        for k in 0..6 {
            let p = fpdus(seq, &[good(st, k)]);
            seq = seq.wrapping_add(p.len() as u32);
            out.push(p);
        }
        out
    };
    // A Write ends (its last segment) and a new one starts mid-run.
    let new_message = |st: &Stags, seq0: u32| {
        let first = fpdus(
            seq0,
            &[
                good(st, 0),
                write_seg(st.target.0, DST + CHUNK as u64, true, &chunk(1)),
            ],
        );
        let seq1 = seq0.wrapping_add(first.len() as u32);
        let second = fpdus(seq1, &[write_seg(st.target.0, TO3, false, &chunk(3))]);
        let seq2 = seq1.wrapping_add(second.len() as u32);
        vec![first, second, fpdus(seq2, &[good(st, 4)])]
    };
    for fast in [true, false] {
        for (name, make) in [
            ("good", &good_run as &dyn Fn(&Stags, u32) -> Vec<Vec<u8>>),
            ("new message", &new_message),
        ] {
            let a = feed_run(fast, false, make);
            let b = feed_run(fast, true, make);
            assert!(a == b, "{name} (fast path {fast}): {a:.300} vs {b:.300}");
        }
        for case in bad_cases() {
            let make = |st: &Stags, seq0: u32| {
                let first = fpdus(seq0, &(0..3).map(|k| good(st, k)).collect::<Vec<_>>());
                let seq1 = seq0.wrapping_add(first.len() as u32);
                let mut bad = fpdus(seq1, &[(case.segment)(st)]);
                if case.bad_crc {
                    let n = bad.len();
                    bad[n - 1] ^= 0x01;
                }
                let seq2 = seq1.wrapping_add(bad.len() as u32);
                let after = fpdus(seq2, &[good(st, 4)]);
                let seq3 = seq2.wrapping_add(after.len() as u32);
                vec![first, bad, after, fpdus(seq3, &[good(st, 5)])]
            };
            let a = feed_run(fast, false, make);
            let b = feed_run(fast, true, make);
            assert!(a.starts_with("Some("), "{}: a Terminate", case.name);
            assert!(
                a == b,
                "{} (fast path {fast}): {a:.300} vs {b:.300}",
                case.name
            );
        }
    }
}

/// Feeds one FPDU per TCP segment, `fpdus_of` giving segment `k`'s DDP segment, to B's
/// sink in `order`, as TCP would: a segment at RCV.NXT in order (then RCV.NXT moves past
/// it and every segment taken ahead behind it, and `on_advance` tells so), any other
/// ahead; octets the sink leaves of a segment taken ahead come again in order once RCV.NXT
/// reaches them. Returns B's Terminate, stats (the fast path's count left out), events and
/// memory.
fn feed_ahead(fast: bool, order: &[usize], seg: &dyn Fn(&Stags, usize) -> Vec<u8>) -> String {
    let (mut s, st) = established(mpa(true, false), fast);
    let seq0 = rcv_nxt(&s);
    let mut stream = Vec::new();
    let mut starts = Vec::new();
    for k in 0..order.len() {
        starts.push(stream.len());
        let at = seq0.wrapping_add(stream.len() as u32);
        stream.extend(fpdus(at, &[seg(&st, k)]));
    }
    starts.push(stream.len());
    let range = |k: usize| starts[k]..starts[k + 1];
    // Per segment: not arrived, taken (the sink placed it), or left for the in-order pass.
    let mut arrived = vec![false; order.len()];
    let mut left = vec![false; order.len()];
    let mut next = 0;
    for &k in order {
        let at = seq0.wrapping_add(starts[k] as u32);
        arrived[k] = true;
        if k == next {
            feed_whole(&mut s, at, &stream[range(k)]);
            next += 1;
            while next < order.len() && arrived[next] {
                if left[next] {
                    let at = seq0.wrapping_add(starts[next] as u32);
                    feed_whole(&mut s, at, &stream[range(next)]);
                }
                next += 1;
            }
            let end = seq0.wrapping_add(starts[next] as u32);
            advance(&mut s, end);
        } else {
            let c = feed(&mut s, at, &stream[range(k)], false);
            assert!(
                c.total() == 0 || c.total() == range(k).len(),
                "a single FPDU taken whole or not at all"
            );
            left[k] = c.total() == 0;
        }
    }
    let t = local_terminate(&mut s);
    let mut stats = stats(&mut s);
    stats.fpdus_fast = 0;
    let c = s.conn(Side::B).unwrap();
    let events: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    let mem = s.mem(Side::B).bytes().to_vec();
    format!("{t:?} {stats:?} {events:?} {:?}", mem)
}

#[test]
fn writes_placed_ahead_answer_as_the_general_path() {
    // RFC 5041 §5.3, §7.2, §8.1 / RFC 5040 §7 / RFC 5044 §8: FPDUs of a Write placed
    // ahead of RCV.NXT (`Engine::place_early_write` with the fast path on) land, count,
    // report and Terminate as through `Engine::handle_ddp_segment` (fast path off), a
    // refused one ahead as well as in order, whatever the arrival order.
    let orders: [&[usize]; 4] = [
        &[0, 3, 4, 1, 2, 5],
        &[0, 5, 4, 3, 2, 1],
        &[1, 2, 3, 4, 5, 0],
        &[0, 1, 2, 3, 4, 5],
    ];
    let good_all = |st: &Stags, k: usize| good(st, k);
    for order in orders {
        let a = feed_ahead(true, order, &good_all);
        let b = feed_ahead(false, order, &good_all);
        assert!(a.starts_with("None"), "{order:?}: no Terminate: {a:.300}");
        assert!(a == b, "{order:?}: {a:.300} vs {b:.300}");
    }
    for case in bad_cases() {
        let seg = |st: &Stags, k: usize| match k {
            3 => (case.segment)(st),
            _ => good(st, k),
        };
        for order in orders {
            let a = feed_ahead(true, order, &seg);
            let b = feed_ahead(false, order, &seg);
            if !case.bad_crc {
                assert!(
                    a.starts_with("Some("),
                    "{} {order:?}: a Terminate: {a:.300}",
                    case.name
                );
            }
            assert!(a == b, "{} {order:?}: {a:.300} vs {b:.300}", case.name);
        }
    }
    // The fast way is taken: the FPDUs placed ahead count as such, and land.
    let (mut s, st) = established(mpa(true, false), true);
    let seq0 = rcv_nxt(&s);
    let stream = fpdus(seq0, &(0..3).map(|k| good(&st, k)).collect::<Vec<_>>());
    let span = stream.len() / 3;
    let c = feed(
        &mut s,
        seq0.wrapping_add(2 * span as u32),
        &stream[2 * span..],
        false,
    );
    assert_eq!(c.total(), span);
    assert_eq!(landed(&s, 2), &chunk(2)[..]);
    assert_eq!(stats(&mut s).fpdus_placed_ahead, 1);
}
