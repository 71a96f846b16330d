//! The receive run's entry (`Config::rx_run_entry`): the in-order data segments of a run
//! after its first in a burst go past the general input. Each case feeds the same frames
//! to an engine with the entry and to one without, and the two must answer alike: the
//! result of every segment, the bytes delivered, the ACKs (number, window, echoed
//! timestamp), the delayed ACK, the connection's state, timers, counters and events.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use smoltcp::wire::TcpControl;
use tcp::{Config, PacketError, StreamSocket};

/// Segment size of the runs below.
const MSS: usize = 1000;
/// Octets the engine sends first, for the peer's segments to acknowledge.
const BACK: usize = 3000;

/// An engine with the entry on or off, connected to a raw peer (timestamps, SACK, window
/// scale 7), which sent `BACK` octets the peer has not acknowledged yet.
fn peer(entry: bool) -> RawPeer {
    let cfg = Config {
        rx_run_entry: entry,
        ..test_config()
    };
    let mut p = RawPeer::new(cfg);
    let conn = p.handshake();
    let back = payload(BACK, 5);
    let sock = p.e.ulp_mut(conn).expect("attached");
    assert_eq!(sock.write(&back), BACK);
    let out = p.output();
    assert!(
        out.iter().any(|s| !s.payload.is_empty()),
        "the engine sent data"
    );
    p
}

/// `n` in-order data segments of `MSS` octets from the peer, from its next sequence
/// number: the same ACK, window and echoed timestamp, the peer's TSval ticking by one.
fn run_of(p: &RawPeer, n: usize) -> Vec<Seg> {
    let data = payload(n * MSS, 9);
    (0..n)
        .map(|i| {
            let mut s = p.seg(TcpControl::Psh, &data[i * MSS..(i + 1) * MSS]);
            s.seq = p.snd.wrapping_add((i * MSS) as u32);
            s.ts = p.tsval.map(|v| (v + i as u32, p.peer_tsval));
            s
        })
        .collect()
}

/// What an engine made of a burst: per segment its result and whether the run's entry
/// took it, then what it sent, sent after the delayed-ACK time, delivered, and its state.
#[derive(Debug)]
struct Outcome {
    results: Vec<Result<(), PacketError>>,
    taken: Vec<bool>,
    /// Per segment, whether the entry took it beyond a hole (out of order).
    ooo: Vec<bool>,
    /// What the engine sent right after the burst.
    out: Vec<Seg>,
    /// Everything, compared as text: both engines must agree on all of it.
    seen: String,
}

/// Feeds `frames` to `p`'s engine in one receive burst, then lets the delayed ACK run out.
fn feed(p: &mut RawPeer, frames: &[Vec<u8>]) -> Outcome {
    let mut results = Vec::new();
    let mut taken = Vec::new();
    let mut ooo = Vec::new();
    let now = p.now;
    p.e.begin_burst();
    for f in frames {
        let before = p.e.stats();
        results.push(p.e.handle_packet(now, &mut (), f));
        let after = p.e.stats();
        taken.push(after.run_segments > before.run_segments);
        ooo.push(after.ooo_run_segments > before.ooo_run_segments);
    }
    p.e.end_burst(now, &mut ());
    let timeout = p.e.poll_timeout();
    let out = p.output();
    let later = p.advance(Duration::from_millis(1));
    let conn = p.conn.expect("connected");
    let info = p.e.info(conn).map(|i| format!("{i:?}"));
    let data = p.e.ulp_mut(conn).map(StreamSocket::read_all);
    let mut stats = p.e.stats();
    stats.run_segments = 0;
    stats.ooo_run_segments = 0;
    let events: Vec<String> = p.events.iter().map(|e| format!("{e:?}")).collect();
    let seen = format!(
        "out {out:?}\nlater {later:?}\ntimeout {timeout:?}\ninfo {info:?}\n\
         data {data:?}\nstats {stats:?}\nevents {events:?}"
    );
    Outcome {
        results,
        taken,
        ooo,
        out,
        seen,
    }
}

/// Builds the frames of a case from the peer's state; the same for both engines.
type Frames = dyn Fn(&RawPeer) -> Vec<Vec<u8>>;

/// Runs `frames` against an engine with the entry and one without; asserts that both
/// answer alike and returns the first's outcome.
fn both_ways(frames: &Frames) -> Outcome {
    both_ways_from(peer, frames)
}

/// [`both_ways`] with the engines `make` connects.
fn both_ways_from(make: fn(bool) -> RawPeer, frames: &Frames) -> Outcome {
    let mut with = make(true);
    let mut without = make(false);
    let a = frames(&with);
    let b = frames(&without);
    assert_eq!(a, b, "both engines get the same frames");
    let fast = feed(&mut with, &a);
    let general = feed(&mut without, &b);
    assert_eq!(fast.results, general.results);
    assert_eq!(fast.seen, general.seen);
    assert!(general.taken.iter().all(|t| !t), "the entry is off");
    assert!(general.ooo.iter().all(|t| !t), "the entry is off");
    fast
}

fn emit_all(segs: &[Seg]) -> Vec<Vec<u8>> {
    segs.iter().map(Seg::emit).collect()
}

/// The eight segments of a run with the one at `k` replaced by what `edit` makes of it.
fn with_edit(k: usize, edit: impl Fn(&RawPeer, &mut Seg) + 'static) -> Box<Frames> {
    Box::new(move |p| {
        let mut segs = run_of(p, 8);
        edit(p, &mut segs[k]);
        emit_all(&segs)
    })
}

// RFC 9293 §3.10.7.4: a run of in-order segments in one burst; after the first, each goes
// through the entry, and every byte arrives in order with the ACKs of the general path:
// one after the burst (every second segment owes one, RFC 9293 §3.8.6.3; the decision is
// made once per burst), echoing the TSval of the run's first segment, the one at the left
// edge of the last ACK sent (RFC 7323 §4.3).
#[test]
fn a_run_takes_the_entry_and_answers_as_the_general_path() {
    let o = both_ways(&|p| emit_all(&run_of(p, 8)));
    assert!(o.results.iter().all(Result::is_ok));
    assert_eq!(o.taken, [false, true, true, true, true, true, true, true]);
    let p = peer(true);
    let segs = run_of(&p, 8);
    let first_ts = segs[0].ts.expect("timestamps").0;
    let end = p.snd.wrapping_add((8 * MSS) as u32);
    let acks: Vec<_> = o.out.iter().map(|s| (s.ack, s.ts.map(|t| t.1))).collect();
    assert_eq!(acks, [(Some(end), Some(first_ts))]);
    let sent: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
    assert!(o.seen.contains(&format!("data Some({sent:?})")));
}

// An odd run leaves one segment unacknowledged: the delayed ACK goes out when its time is
// up (RFC 9293 §3.8.6.3), the same with the entry as without.
#[test]
fn an_odd_run_leaves_the_delayed_ack() {
    let o = both_ways(&|p| emit_all(&run_of(p, 3)));
    assert_eq!(o.taken, [false, true, true]);
    assert!(o.seen.contains("later [Seg"), "{}", o.seen);
}

// Segments spread over several bursts: each burst's first segment goes the general way
// (the run's acknowledgment fields are of another burst and time).
#[test]
fn each_burst_begins_the_general_way() {
    let mut with = peer(true);
    let mut without = peer(false);
    let segs = run_of(&with, 9);
    assert_eq!(segs.len(), run_of(&without, 9).len());
    for chunk in segs.chunks(3) {
        let frames = emit_all(chunk);
        let a = feed(&mut with, &frames);
        let b = feed(&mut without, &frames);
        assert_eq!(a.taken, [false, true, true]);
        assert_eq!((a.results, a.seen), (b.results, b.seen));
        with.now = with.now + Duration::from_micros(10);
        without.now = without.now + Duration::from_micros(10);
    }
}

// RFC 9293 §3.10.7.4: a segment ahead of RCV.NXT in the middle of a run is held and
// acknowledged at once with a SACK block (RFC 2018); the segments after it and the one that
// fills the hole, later in the same burst, go the general way; nothing is lost.
#[test]
fn a_segment_out_of_order_goes_the_general_way() {
    let o = both_ways(&|p| {
        let segs = run_of(p, 8);
        let order = [0, 1, 2, 3, 5, 6, 7, 4];
        order.iter().map(|&i| segs[i].emit()).collect()
    });
    assert_eq!(
        o.taken,
        [false, true, true, true, false, false, false, false]
    );
    assert!(o.results.iter().all(Result::is_ok));
}

// A hole filled at the start of a burst: the runs after it take the entry again.
#[test]
fn the_run_after_a_filled_gap_takes_the_entry_again() {
    let o = both_ways(&|p| {
        let segs = run_of(p, 8);
        let order = [0, 2, 1, 3, 4, 5, 6, 7];
        order.iter().map(|&i| segs[i].emit()).collect()
    });
    assert_eq!(
        o.taken,
        [false, false, false, false, true, true, true, true]
    );
}

// RFC 9293 §3.10.7.4 fifth check: a new ACK (the engine's data) in the middle of a run is
// processed as ever, and the run goes on with the new acknowledgment fields.
#[test]
fn a_new_ack_in_the_middle_goes_the_general_way() {
    let o = both_ways(&|p| {
        let mut segs = run_of(p, 8);
        for s in &mut segs[4..] {
            s.ack = Some(p.rcv.wrapping_add(BACK as u32));
        }
        emit_all(&segs)
    });
    assert_eq!(o.taken, [false, true, true, true, false, true, true, true]);
    assert!(o.seen.contains("snd_una"), "{}", o.seen);
}

// RFC 9293 §3.10.7.4: a window update in the middle of a run moves SND.WND as ever, and
// so does the next segment, which moves it back; the run then goes on.
#[test]
fn a_window_change_goes_the_general_way() {
    let o = both_ways(&*with_edit(4, |_, s| s.window = 1000));
    assert_eq!(o.taken, [false, true, true, true, false, false, true, true]);
}

// RFC 7323 §4.3: a new TSecr (the peer echoes a newer TSval of ours) is processed as ever.
#[test]
fn a_new_echo_goes_the_general_way() {
    let o = both_ways(&*with_edit(4, |_, s| {
        s.ts = s.ts.map(|(v, e)| (v, e.wrapping_add(1)));
    }));
    assert_eq!(o.taken, [false, true, true, true, false, false, true, true]);
}

// RFC 9293 §3.10.7.4 eighth check: a FIN with the run's last data; the segments after it
// are beyond the FIN.
#[test]
fn a_fin_goes_the_general_way() {
    let o = both_ways(&*with_edit(4, |_, s| s.control = TcpControl::Fin));
    assert_eq!(o.taken[..5], [false, true, true, true, false]);
    assert!(o.seen.contains("PeerClosed"), "{}", o.seen);
}

// RFC 9293 §3.10.7.4 second check: a RST at RCV.NXT in the middle of a run resets the
// connection; the segments after it find none.
#[test]
fn a_rst_goes_the_general_way() {
    let o = both_ways(&*with_edit(4, |_, s| {
        s.control = TcpControl::Rst;
        s.payload.clear();
    }));
    assert_eq!(
        o.taken,
        [false, true, true, true, false, false, false, false]
    );
    assert!(o.seen.contains("Reset"), "{}", o.seen);
}

// RFC 9293 §3.7.5: URG is not supported, the segment is processed as data; it does not go
// through the entry.
#[test]
fn urg_goes_the_general_way() {
    let o = both_ways(&|p| {
        let mut frames = emit_all(&run_of(p, 8));
        let ip = tcp::IPV4_HEADER_LEN;
        frames[4][ip + 13] |= 0x20;
        tcp::sim::refresh_tcp_checksum(&mut frames[4]).expect("TCP");
        frames
    });
    assert_eq!(o.taken, [false, true, true, true, false, true, true, true]);
    assert!(o.results.iter().all(Result::is_ok));
}

// RFC 2018 §4: a SACK block in the middle of a run is processed as ever.
#[test]
fn a_sack_option_goes_the_general_way() {
    let o = both_ways(&*with_edit(4, |p, s| {
        let l = p.rcv.wrapping_add(1000);
        s.sack = vec![(l, l.wrapping_add(1000))];
    }));
    assert_eq!(o.taken[..5], [false, true, true, true, false]);
}

// RFC 7323 §5.3 R1: a segment whose TSval is older than TS.Recent is dropped by PAWS and
// acknowledged at once; the run then goes on.
#[test]
fn paws_rejection_goes_the_general_way() {
    let o = both_ways(&*with_edit(4, |_, s| {
        s.ts = s.ts.map(|(v, e)| (v.wrapping_sub(100), e));
    }));
    assert_eq!(o.taken[..5], [false, true, true, true, false]);
    assert!(o.seen.contains("paws_drops: 1"), "{}", o.seen);
}

// RFC 9293 §3.1: a segment with a bad checksum in the middle of a run is refused before it
// touches any state, counted, and not acknowledged; the next segments are held out of order.
#[test]
fn a_bad_checksum_is_refused_as_by_the_general_path() {
    let o = both_ways(&|p| {
        let mut frames = emit_all(&run_of(p, 8));
        let last = frames[4].len() - 1;
        frames[4][last] ^= 0x40;
        frames
    });
    assert_eq!(o.results[4], Err(PacketError::BadTcp));
    assert!(o.seen.contains("bad_checksums: 1"), "{}", o.seen);
    assert_eq!(
        o.taken,
        [false, true, true, true, false, false, false, false]
    );
}

// A duplicate of a segment already received goes the general way (RFC 2883 D-SACK).
#[test]
fn a_duplicate_goes_the_general_way() {
    let o = both_ways(&|p| {
        let segs = run_of(p, 8);
        let order = [0, 1, 2, 3, 2, 4, 5, 6, 7];
        order.iter().map(|&i| segs[i].emit()).collect()
    });
    assert_eq!(o.taken[..5], [false, true, true, true, false]);
}

// Segments to no connection between a run's segments are refused (RFC 9293 §3.10.7.1) and
// leave the run to go on through the entry.
#[test]
fn segments_to_no_connection_leave_the_run() {
    let o = both_ways(&|p| {
        let mut stray = p.seg(TcpControl::Psh, b"stray");
        stray.sport = stray.sport.wrapping_add(1);
        let mut frames = Vec::new();
        for s in run_of(p, 4) {
            frames.push(s.emit());
            frames.push(stray.emit());
        }
        frames
    });
    assert_eq!(
        o.taken,
        [false, false, true, false, true, false, true, false]
    );
    assert_eq!(
        o.out
            .iter()
            .filter(|s| s.control == TcpControl::Rst)
            .count(),
        4
    );
}

// Two connections' segments interleaved in one burst: each finds the other's key and goes
// the general way; both connections get every byte and the same ACKs as without the entry.
#[test]
fn interleaved_connections_go_the_general_way() {
    let mut results = Vec::new();
    for entry in [true, false] {
        let mut p = peer(entry);
        // A second connection on the same engine, from the next port.
        let mut q = RawPeer::between(
            Config {
                rx_run_entry: entry,
                ..test_config()
            },
            a_addr(33_001).into(),
            b_addr().into(),
        );
        std::mem::swap(&mut q.e, &mut p.e);
        q.handshake();
        std::mem::swap(&mut q.e, &mut p.e);
        let (a, b) = (run_of(&p, 4), run_of(&q, 4));
        let now = p.now;
        p.e.begin_burst();
        let mut taken = 0;
        for (x, y) in a.iter().zip(&b) {
            for f in [x.emit(), y.emit()] {
                let before = p.e.stats().run_segments;
                p.e.handle_packet(now, &mut (), &f).expect("accepted");
                taken += p.e.stats().run_segments - before;
            }
        }
        p.e.end_burst(now, &mut ());
        assert_eq!(taken, 0);
        let out = p.output();
        let data: Vec<_> = [p.conn, q.conn]
            .map(|c| {
                p.e.ulp_mut(c.expect("connected"))
                    .map(StreamSocket::read_all)
            })
            .into();
        let sent = |segs: &[Seg]| Some(segs.iter().flat_map(|s| s.payload.clone()).collect());
        assert_eq!(data, vec![sent(&a), sent(&b)]);
        results.push(format!("{out:?}"));
    }
    assert_eq!(results[0], results[1]);
}

/// [`peer`], its runs acknowledging the `BACK` octets: from the first segment's ACK on,
/// nothing the engine sent is outstanding.
fn peer_acked(entry: bool) -> RawPeer {
    let mut p = peer(entry);
    p.rcv = p.rcv.wrapping_add(BACK as u32);
    p
}

/// Three bursts of three in-order segments each (the peer's TSval ticking on, its echo the
/// engine's latest) to an engine with the entry and one without, both made by `make`,
/// `between` run on both after each burst (after the burst's ACKs and delayed ACK went
/// out); asserts that both answer alike and returns which segments the entry took.
fn bursts_both_ways(make: fn(bool) -> RawPeer, between: fn(&mut RawPeer)) -> Vec<Vec<bool>> {
    let mut with = make(true);
    let mut without = make(false);
    let mut taken = Vec::new();
    for _ in 0..3 {
        let frames = emit_all(&run_of(&with, 3));
        let same = emit_all(&run_of(&without, 3));
        assert_eq!(frames, same, "both engines get the same frames");
        let a = feed(&mut with, &frames);
        let b = feed(&mut without, &frames);
        assert_eq!((a.results, &a.seen), (b.results, &b.seen));
        assert!(b.taken.iter().all(|t| !t), "the entry is off");
        assert!(b.ooo.iter().all(|t| !t), "the entry is off");
        taken.push(a.taken);
        for p in [&mut with, &mut without] {
            p.snd = p.snd.wrapping_add((3 * MSS) as u32);
            p.tsval = p.tsval.map(|v| v + 3);
            between(p);
        }
    }
    taken
}

// RFC 9293 §3.10.7.4 fifth check: with nothing the engine sent outstanding, an ACK of
// SND.UNA finds nothing to process but the send window, whatever burst, time or echo it
// comes with; so a run goes on through the entry across bursts, the pure ACKs sent in
// between (RFC 9293 §3.8.6.3) and the peer's new echo of them (RFC 7323 §4.3) included,
// and every byte, ACK, timer and counter is the general path's.
#[test]
fn a_run_continues_across_bursts_with_nothing_outstanding() {
    let taken = bursts_both_ways(peer_acked, |_| {});
    assert_eq!(
        taken,
        [[false, true, true], [true, true, true], [true, true, true]]
    );
}

// With data sent between the bursts (outstanding, not acknowledged by the next burst's
// segments), each burst's first segment goes the general way: its ACK processing has
// units to look at (RFC 8985 §6.2: RACK, RFC 9293 §3.10.7.4); the run then goes on.
#[test]
fn data_sent_between_bursts_ends_the_run() {
    let taken = bursts_both_ways(peer_acked, |p| {
        let conn = p.conn.expect("connected");
        let sock = p.e.ulp_mut(conn).expect("attached");
        assert_eq!(sock.write(&payload(500, 3)), 500);
        let out = p.output();
        assert!(
            out.iter().any(|s| s.payload.len() == 500),
            "the data went out"
        );
    });
    assert_eq!(
        taken,
        [
            [false, true, true],
            [false, true, true],
            [false, true, true]
        ]
    );
}

// Data of the engine outstanding from the start (the ACKs do not cover it): every burst's
// first segment goes the general way, as before.
#[test]
fn a_run_with_data_outstanding_begins_each_burst_the_general_way() {
    let taken = bursts_both_ways(peer, |_| {});
    assert_eq!(
        taken,
        [
            [false, true, true],
            [false, true, true],
            [false, true, true]
        ]
    );
}

// RFC 7323 §4.3: with nothing outstanding, a new echo in the middle of a run (and the
// older one after it) changes nothing the ACK processing would look at: the entry takes
// them, answering as the general path.
#[test]
fn a_new_echo_with_nothing_outstanding_stays_in_the_run() {
    let o = both_ways_from(
        peer_acked,
        &*with_edit(4, |_, s| {
            s.ts = s.ts.map(|(v, e)| (v, e.wrapping_add(1)));
        }),
    );
    assert_eq!(o.taken, [false, true, true, true, true, true, true, true]);
    assert!(o.seen.contains("snd_una"), "{}", o.seen);
}

// RFC 9293 §3.10.7.4 (seventh check), RFC 2018 §4, RFC 5681 §4.2: with nothing the engine
// sent outstanding, the segments ahead of RCV.NXT at or beyond the end of the last range
// held (5 beyond the hole, 6 and 7 behind it) take the entry's out-of-order way; each is
// held, its arrival reported first in the SACK blocks and acknowledged at once, as the
// general path does; so does the one that fills the hole (4), which hands 4 to 7 over in
// order.
#[test]
fn segments_beyond_a_hole_take_the_entry_and_answer_as_the_general_path() {
    let o = both_ways_from(peer_acked, &|p| {
        let segs = run_of(p, 8);
        let order = [0, 1, 2, 3, 5, 6, 7, 4];
        order.iter().map(|&i| segs[i].emit()).collect()
    });
    assert_eq!(
        o.taken,
        [false, true, true, true, false, false, false, false]
    );
    assert_eq!(o.ooo, [false, false, false, false, true, true, true, true]);
    assert!(o.results.iter().all(Result::is_ok));
    let p = peer_acked(true);
    let segs = run_of(&p, 8);
    let sent: Vec<u8> = segs.iter().flat_map(|s| s.payload.clone()).collect();
    assert!(o.seen.contains(&format!("data Some({sent:?})")));
}

/// Octets in a unit of [`pieces_of`].
const UNIT: usize = 100;

/// The peer's segments of a case: `(start, end)` in octets of one stream, each with a
/// TSval that ticks every fourth unit (so some reordered segments carry an older one than a
/// segment before them, RFC 7323 §5.3).
fn pieces_of(p: &RawPeer, pieces: &[(usize, usize)]) -> Vec<Vec<u8>> {
    let data = payload(64 * UNIT, 11);
    pieces
        .iter()
        .map(|&(start, end)| {
            let mut s = p.seg(TcpControl::Psh, &data[start..end]);
            s.seq = p.snd.wrapping_add(start as u32);
            s.ts = p
                .tsval
                .map(|v| (v + (start / UNIT / 4) as u32, p.peer_tsval));
            s.emit()
        })
        .collect()
}

/// A stream of 48 units cut into in-order segments of `lens` units, then each segment
/// moved as `moves` say (from, to: reordered), and `extras` (start in units, length in
/// units, where, octets off the unit's start: 0 to 99) put in (duplicates, overlaps of
/// any octet count, segments across holes). Octet ranges.
fn shuffled(
    lens: &[usize],
    moves: &[(usize, usize)],
    extras: &[(usize, usize, usize, usize)],
) -> Vec<(usize, usize)> {
    let mut segs = Vec::new();
    let mut at = 0;
    for &l in lens {
        if at >= 48 {
            break;
        }
        let l = l.min(48 - at);
        segs.push((at * UNIT, (at + l) * UNIT));
        at += l;
    }
    for &(from, to) in moves {
        let from = from % segs.len();
        let s = segs.remove(from);
        segs.insert(to % (segs.len() + 1), s);
    }
    for &(start, len, pos, off) in extras {
        let s = (start * UNIT + off).saturating_sub(UNIT / 2);
        segs.insert(pos % (segs.len() + 1), (s, s + len * UNIT));
    }
    segs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    // RFC 9293 §3.10.7.4 (first and seventh checks), RFC 2018 §4 (SACK blocks), RFC 2883
    // (D-SACK), RFC 5681 §4.2 (an ACK at once for out-of-order data): segments in random
    // orders, with overlaps, duplicates and holes, over several bursts, to an engine with
    // the entry and one without; with nothing outstanding, those beyond a hole that
    // continue the last range held take the entry. Both answer alike after every burst:
    // each segment's result, the ACKs with their SACK blocks, the delayed ACK, the bytes
    // delivered in order, the state, timers and counters.
    #[test]
    fn out_of_order_segments_answer_as_the_general_path(
        lens in proptest::collection::vec(1usize..5, 12..48),
        moves in proptest::collection::vec((0usize..64, 0usize..64), 0..12),
        extras in proptest::collection::vec(
            (0usize..44, 1usize..5, 0usize..64, prop_oneof![49usize..52, 0usize..UNIT]),
            0..5,
        ),
        bursts in proptest::collection::vec(1usize..12, 1..8),
    ) {
        let order = shuffled(&lens, &moves, &extras);
        let mut with = peer_acked(true);
        let mut without = peer_acked(false);
        let frames = pieces_of(&with, &order);
        prop_assert_eq!(&frames, &pieces_of(&without, &order));
        let mut rest = &frames[..];
        let mut sizes = bursts.iter().cycle();
        while !rest.is_empty() {
            let n = (*sizes.next().expect("cycled")).min(rest.len());
            let (burst, tail) = rest.split_at(n);
            rest = tail;
            let a = feed(&mut with, burst);
            let b = feed(&mut without, burst);
            prop_assert_eq!(&a.results, &b.results);
            prop_assert_eq!(&a.seen, &b.seen);
            prop_assert!(b.ooo.iter().all(|t| !t), "the entry is off");
        }
    }
}

// RFC 2018 §4: the first SACK block reports the range the most recent segment went into,
// when that segment took the entry (6 continuing 5's range behind the segment 3, which
// went the general way into the range before): the ACK after the burst reports 5..7
// first, then 2..4.
#[test]
fn the_first_sack_block_is_of_the_segment_the_entry_took_last() {
    let o = both_ways_from(peer_acked, &|p| {
        let segs = run_of(p, 8);
        [0, 2, 5, 3, 6].iter().map(|&i| segs[i].emit()).collect()
    });
    assert_eq!(o.ooo, [false, true, true, false, true]);
    let p = peer_acked(true);
    let at = |i: usize| p.snd.wrapping_add((i * MSS) as u32);
    let ack = o.out.last().expect("an ACK");
    assert_eq!(ack.sack, [(at(5), at(7)), (at(2), at(4))]);
}

// The case above takes the entry's out-of-order way: a stream cut in segments of two
// units, the fourth segment moved to the end, a duplicate and an overlap beyond the hole.
#[test]
fn the_case_takes_the_out_of_order_way() {
    let order = shuffled(&[2; 24], &[(3, 63)], &[(8, 2, 6, 50), (9, 3, 9, 51)]);
    let mut with = peer_acked(true);
    let mut without = peer_acked(false);
    let frames = pieces_of(&with, &order);
    let a = feed(&mut with, &frames);
    let b = feed(&mut without, &frames);
    assert_eq!((&a.results, &a.seen), (&b.results, &b.seen));
    assert!(a.ooo.iter().filter(|&&t| t).count() >= 10, "{:?}", a.ooo);
    let sent = payload(64 * 100, 11)[..4800].to_vec();
    assert!(a.seen.contains(&format!("data Some({sent:?})")));
}
