//! The receive run's entry around a hole (`Config::rx_run_entry`): segments ahead of
//! RCV.NXT at or beyond the last range held, and the segment that fills a hole, go past the
//! general input. A sender's segments, reordered, duplicated and cut in bursts, go to a
//! receiver with the entry and to one without, whose ULP places parts of the segments
//! ahead of RCV.NXT itself (as the MPA receiver does): both must make the same calls on
//! their ULP (offers, placements, in-order hand-overs, advances of RCV.NXT) and send the
//! same segments back.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use proptest::prelude::*;
use tcp::{Config, ConnId, Consumed, Instant, SegmentSink, SegmentSource, StreamSocket, Unit};

/// What the engine called on the receiver's ULP, in order, with the octets concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Offered {
        seq: u32,
        bytes: Vec<u8>,
        in_order: bool,
        rcv_nxt: u32,
    },
    InOrder {
        seq: u32,
        bytes: Vec<u8>,
    },
    Advance(u32),
}

/// A byte stream that logs the engine's calls and, of a segment offered ahead of RCV.NXT,
/// takes all, the first half, the middle third or none (by a hash of its sequence number),
/// as a placing ULP would; of one in order, the first half or all.
struct Placer {
    sock: StreamSocket,
    log: Rc<RefCell<Vec<Call>>>,
}

impl SegmentSink for Placer {
    fn on_segment(
        &mut self,
        cx: &mut (),
        now: Instant,
        seq: u32,
        payload: &[u8],
        in_order: bool,
        rcv_nxt: u32,
    ) -> Consumed {
        self.log.borrow_mut().push(Call::Offered {
            seq,
            bytes: payload.to_vec(),
            in_order,
            rcv_nxt,
        });
        let n = payload.len();
        // Segments' sequence numbers differ by multiples of the MSS: hashed.
        let pick = seq.wrapping_mul(0x9e37_79b9) >> 30;
        if in_order {
            if pick == 1 {
                // Half placed: the rest comes back through `on_in_order`.
                return Consumed::prefix(n / 2);
            }
            self.sock.on_in_order(cx, now, seq, payload);
            return Consumed::all(n);
        }
        match pick {
            0 => Consumed::all(n),
            1 => Consumed::prefix(n / 2),
            2 => {
                let mut c = Consumed::none();
                c.push(n / 3..2 * n / 3).expect("one range");
                c
            }
            _ => Consumed::none(),
        }
    }

    fn on_in_order(&mut self, cx: &mut (), now: Instant, seq: u32, bytes: &[u8]) {
        self.log.borrow_mut().push(Call::InOrder {
            seq,
            bytes: bytes.to_vec(),
        });
        self.sock.on_in_order(cx, now, seq, bytes);
    }

    fn on_advance(&mut self, _cx: &mut (), _now: Instant, rcv_nxt: u32) {
        self.log.borrow_mut().push(Call::Advance(rcv_nxt));
    }

    fn rx_window(&self) -> usize {
        SegmentSink::<()>::rx_window(&self.sock)
    }
}

impl SegmentSource for Placer {
    fn next_unit(&mut self, cx: &mut (), now: Instant, seq: u32, max_len: usize) -> Option<Unit> {
        self.sock.next_unit(cx, now, seq, max_len)
    }

    fn pending(&self) -> bool {
        SegmentSource::<()>::pending(&self.sock)
    }
}

type Log = Rc<RefCell<Vec<Call>>>;

/// A connected pair, the receiver B with the entry on or off, A's socket holding `data`.
fn pair(entry: bool, data: &[u8]) -> (Sim<Placer>, ConnId, Log) {
    let log: Log = Rc::new(RefCell::new(Vec::new()));
    let cfg_b = Config {
        rx_run_entry: entry,
        ..test_config()
    };
    let mut sim: Sim<Placer> = Sim::new(7, LinkConfig::default(), test_config(), cfg_b);
    sim.b
        .listen(
            std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, B_PORT),
            16,
        )
        .expect("listen");
    let b_log = log.clone();
    sim.accept[1] = Some(Box::new(move || Placer {
        sock: StreamSocket::new(1 << 20, 1 << 20),
        log: b_log.clone(),
    }));
    let a = sim
        .a
        .connect(
            sim.now,
            a_addr(0),
            b_addr(),
            Placer {
                sock: StreamSocket::new(1 << 20, 1 << 20),
                log: Rc::new(RefCell::new(Vec::new())),
            },
        )
        .expect("connect");
    let limit = sim.now + std::time::Duration::from_secs(1);
    assert!(sim.run_until(limit, |s| s.connected(Side::A, a)
        && !s.accepted(Side::B).is_empty()));
    sim.run_until(limit, |_| false);
    let written = sim.a.ulp_mut(a).expect("A's ULP").sock.write(data);
    assert_eq!(written, data.len());
    log.borrow_mut().clear();
    (sim, a, log)
}

/// Everything `engine` sends now.
fn drain_out(engine: &mut tcp::Engine<Placer>, now: Instant) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 1600];
    let mut out = Vec::new();
    while let Some(t) = engine.poll_transmit(now, &mut (), &mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

/// How A's frames of one round reach B: each moved as `moves` say (from, to), the ones
/// `dups` name sent again at the given place, then cut into bursts of `bursts` sizes.
#[derive(Clone, Debug)]
struct Shuffle {
    moves: Vec<(usize, usize)>,
    dups: Vec<(usize, usize)>,
    bursts: Vec<usize>,
}

/// Runs `rounds` rounds (A sends what it may, B takes it in bursts as `shuffle` says, A
/// takes B's answers, the clock moves on by 1 ms) and returns per round B's calls on its
/// ULP, B's frames and B's counters, and the ooo entry's count.
fn run(entry: bool, data: &[u8], shuffle: &Shuffle, rounds: usize) -> (Vec<String>, u64) {
    let (mut sim, _a, log) = pair(entry, data);
    let mut seen = Vec::new();
    for _ in 0..rounds {
        let now = sim.now;
        let mut frames = drain_out(&mut sim.a, now);
        if !frames.is_empty() {
            for &(from, to) in &shuffle.moves {
                let f = frames.remove(from % frames.len());
                frames.insert(to % (frames.len() + 1), f);
            }
            for &(which, at) in &shuffle.dups {
                let f = frames[which % frames.len()].clone();
                frames.insert(at % (frames.len() + 1), f);
            }
        }
        let mut results = Vec::new();
        let mut rest = &frames[..];
        let mut sizes = shuffle.bursts.iter().cycle();
        while !rest.is_empty() {
            let n = (*sizes.next().expect("cycled")).clamp(1, rest.len());
            let (burst, tail) = rest.split_at(n);
            rest = tail;
            sim.b.begin_burst();
            for f in burst {
                results.push(sim.b.handle_packet(now, &mut (), f));
            }
            sim.b.end_burst(now, &mut ());
        }
        let back = drain_out(&mut sim.b, now);
        for f in &back {
            let _ = sim.a.handle_packet(now, &mut (), f);
        }
        let mut stats = sim.b.stats();
        stats.run_segments = 0;
        stats.ooo_run_segments = 0;
        let calls = std::mem::take(&mut *log.borrow_mut());
        seen.push(format!(
            "results {results:?}\ncalls {calls:?}\nback {back:?}\nstats {stats:?}"
        ));
        sim.now = now + std::time::Duration::from_millis(1);
        sim.a.handle_timeout(sim.now);
        sim.b.handle_timeout(sim.now);
    }
    (seen, sim.b.stats().ooo_run_segments)
}

/// Runs both receivers and asserts they answer alike; the entry's count.
fn both_ways(data: &[u8], shuffle: &Shuffle, rounds: usize) -> u64 {
    let (with, taken) = run(true, data, shuffle, rounds);
    let (without, none) = run(false, data, shuffle, rounds);
    assert_eq!(none, 0, "the entry is off");
    for (round, (a, b)) in with.iter().zip(&without).enumerate() {
        assert_eq!(a, b, "round {round}");
    }
    taken
}

// RFC 9293 §3.10.7.4 (seventh check), RFC 2018 §4, RFC 5681 §4.2: one segment held back
// behind the others of its round: the segments beyond the hole and the one that fills it
// take the entry, and the receiver's ULP sees the same offers (ahead of RCV.NXT, with what
// it placed of them), in-order hand-overs and advances, and the sender the same ACKs and
// SACK blocks, as without the entry.
#[test]
fn a_hole_and_its_filler_answer_as_the_general_path() {
    let data = payload(64 * 1448, 21);
    let shuffle = Shuffle {
        moves: vec![(1, 99)],
        dups: vec![],
        bursts: vec![32],
    };
    let taken = both_ways(&data, &shuffle, 12);
    assert!(taken >= 8, "the entry took {taken} segments");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    // RFC 9293 §3.10.7.4 (first and seventh checks), RFC 2018 §4, RFC 2883, RFC 5681
    // §4.2: random reorderings and duplicates of each round's segments, in bursts of
    // random sizes: the receiver with the entry answers as the one without, call by call
    // and frame by frame.
    #[test]
    fn reordered_rounds_answer_as_the_general_path(
        moves in proptest::collection::vec((0usize..64, 0usize..64), 0..8),
        dups in proptest::collection::vec((0usize..64, 0usize..64), 0..3),
        bursts in proptest::collection::vec(1usize..16, 1..6),
    ) {
        let data = payload(48 * 1448, 22);
        let shuffle = Shuffle { moves, dups, bursts };
        both_ways(&data, &shuffle, 8);
    }
}
