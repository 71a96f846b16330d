//! Receive bursts (`Engine::begin_burst` .. `Engine::end_burst`): a run of one connection's
//! in-order segments tells its ULP once, at the end, that RCV.NXT advanced; every segment is
//! still offered at once, and what goes back to the peer is the same as without a burst.

mod common;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use common::*;
use tcp::{
    Config, ConnId, Consumed, Instant, SegmentSink, SegmentSource, StreamSocket, Unit, TX_QUANTUM,
};

/// What the engine called on a ULP, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Segment {
        seq: u32,
        len: usize,
        in_order: bool,
    },
    InOrder {
        seq: u32,
        len: usize,
    },
    Advance(u32),
}

/// A byte stream that logs the engine's calls.
struct Rec {
    sock: StreamSocket,
    log: Rc<RefCell<Vec<Call>>>,
    service: Rc<Service>,
    /// Reads what arrives at once (into `read`), so that the window stays whole, as with a
    /// ULP that places data where it belongs (iWARP).
    drain: bool,
    read: Vec<u8>,
}

/// What a [`Rec`] answers to [`SegmentSource::needs_service`], and how often it was asked.
#[derive(Default)]
struct Service {
    asked: Cell<usize>,
    /// The answer (until `on_advance` sets it, with `yes_on_advance`).
    yes: Cell<bool>,
    /// `on_advance` makes the answer yes (it left the service something to do).
    yes_on_advance: Cell<bool>,
}

impl Rec {
    fn new(log: &Rc<RefCell<Vec<Call>>>) -> Self {
        let service = Service::default();
        service.yes.set(true);
        Rec {
            sock: StreamSocket::new(1 << 20, 1 << 20),
            log: log.clone(),
            service: Rc::new(service),
            drain: false,
            read: Vec::new(),
        }
    }

    /// [`Rec::new`] reading what arrives at once.
    fn draining(log: &Rc<RefCell<Vec<Call>>>) -> Self {
        Rec {
            drain: true,
            ..Rec::new(log)
        }
    }

    /// Everything received so far, in order.
    fn received(&mut self) -> Vec<u8> {
        let mut all = std::mem::take(&mut self.read);
        all.extend(self.sock.read_all());
        all
    }

    fn store(&mut self, cx: &mut (), now: Instant, seq: u32, bytes: &[u8]) {
        self.sock.on_in_order(cx, now, seq, bytes);
        if self.drain {
            let got = self.sock.read_all();
            self.read.extend(got);
        }
    }
}

impl SegmentSink for Rec {
    fn on_segment(
        &mut self,
        cx: &mut (),
        now: Instant,
        seq: u32,
        payload: &[u8],
        in_order: bool,
        _rcv_nxt: u32,
    ) -> Consumed {
        self.log.borrow_mut().push(Call::Segment {
            seq,
            len: payload.len(),
            in_order,
        });
        if !in_order {
            return Consumed::none();
        }
        self.store(cx, now, seq, payload);
        Consumed::all(payload.len())
    }

    fn on_in_order(&mut self, cx: &mut (), now: Instant, seq: u32, bytes: &[u8]) {
        self.log.borrow_mut().push(Call::InOrder {
            seq,
            len: bytes.len(),
        });
        self.store(cx, now, seq, bytes);
    }

    fn on_advance(&mut self, _cx: &mut (), _now: Instant, rcv_nxt: u32) {
        self.log.borrow_mut().push(Call::Advance(rcv_nxt));
        if self.service.yes_on_advance.get() {
            self.service.yes.set(true);
        }
    }

    fn rx_window(&self) -> usize {
        SegmentSink::<()>::rx_window(&self.sock)
    }
}

impl SegmentSource for Rec {
    fn next_unit(&mut self, cx: &mut (), now: Instant, seq: u32, max_len: usize) -> Option<Unit> {
        self.sock.next_unit(cx, now, seq, max_len)
    }

    fn pending(&self) -> bool {
        SegmentSource::<()>::pending(&self.sock)
    }

    fn needs_service(&self) -> bool {
        self.service.asked.set(self.service.asked.get() + 1);
        self.service.yes.get()
    }
}

/// B's log of calls.
type Log = Rc<RefCell<Vec<Call>>>;

/// A connected pair (A sends, B logs), A's socket holding `data`, and A's data segments
/// as they left it (one window's worth), with B's connection. With `b_data`, B sent that
/// much first and A received it: A's segments acknowledge it (the first one advances B's
/// SND.UNA, the others repeat its ACK).
fn setup_with(data: &[u8], b_data: usize) -> (Sim<Rec>, ConnId, Log, Vec<Vec<u8>>) {
    setup_cfg(data, b_data, test_config())
}

/// [`setup_with`] with A's configuration `cfg_a`.
fn setup_cfg(data: &[u8], b_data: usize, cfg_a: Config) -> (Sim<Rec>, ConnId, Log, Vec<Vec<u8>>) {
    let log = Rc::new(RefCell::new(Vec::new()));
    let mut sim: Sim<Rec> = Sim::new(7, LinkConfig::default(), cfg_a, test_config());
    sim.b
        .listen(
            std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, B_PORT),
            16,
        )
        .expect("listen");
    let b_log = log.clone();
    sim.accept[1] = Some(Box::new(move || Rec::new(&b_log)));
    let a_log = Rc::new(RefCell::new(Vec::new()));
    let a = sim
        .a
        .connect(sim.now, a_addr(0), b_addr(), Rec::new(&a_log))
        .expect("connect");
    let limit = sim.now + std::time::Duration::from_secs(1);
    assert!(sim.run_until(limit, |s| s.connected(Side::A, a)
        && !s.accepted(Side::B).is_empty()));
    let b = sim.accepted(Side::B)[0];
    sim.run_until(limit, |_| false);
    let mut buf = vec![0u8; 1600];
    let now = sim.now;
    if b_data > 0 {
        let back = payload(b_data, 9);
        let n = sim.b.ulp_mut(b).expect("B's ULP").sock.write(&back);
        assert_eq!(n, b_data);
        while let Some(t) = sim.b.poll_transmit(now, &mut (), &mut buf) {
            sim.a
                .handle_packet(now, &mut (), &buf[..t.len])
                .expect("accepted");
        }
    }
    log.borrow_mut().clear();
    let written = sim.a.ulp_mut(a).expect("A's ULP").sock.write(data);
    assert_eq!(written, data.len());
    let mut frames = Vec::new();
    while let Some(t) = sim.a.poll_transmit(now, &mut (), &mut buf) {
        frames.push(buf[..t.len].to_vec());
    }
    (sim, b, log, frames)
}

fn setup(data: &[u8]) -> (Sim<Rec>, ConnId, Log, Vec<Vec<u8>>) {
    setup_with(data, 0)
}

/// The ACK numbers B sends now.
fn acks(sim: &mut Sim<Rec>) -> Vec<u32> {
    let mut buf = vec![0u8; 1600];
    let now = sim.now;
    let mut out = Vec::new();
    while let Some(t) = sim.b.poll_transmit(now, &mut (), &mut buf) {
        out.extend(Seg::parse(&buf[..t.len]).expect("valid").ack);
    }
    out
}

fn advances(log: &[Call]) -> Vec<u32> {
    log.iter()
        .filter_map(|c| match c {
            Call::Advance(n) => Some(*n),
            _ => None,
        })
        .collect()
}

// Eight in-order segments in one burst: eight offers at once, one `on_advance` at the end
// (none during the burst), the bytes delivered, and the same ACK as without a burst. The
// segments acknowledge data B sent: the first advances SND.UNA, the others repeat its
// acknowledgment fields and skip the ACK processing; B's state and timers end up the same.
#[test]
fn a_run_in_one_burst_advances_once() {
    let data = payload(8 * 1448, 3);
    let mut acked = Vec::new();
    let mut states = Vec::new();
    for burst in [false, true] {
        let (mut sim, b, log, frames) = setup_with(&data, 3000);
        let acks_b: Vec<Option<u32>> = frames
            .iter()
            .map(|f| Seg::parse(f).expect("valid").ack)
            .collect();
        assert!(acks_b.windows(2).all(|w| w[0] == w[1]));
        assert!(frames.len() >= 8, "{} segments sent", frames.len());
        let first = Seg::parse(&frames[0]).expect("valid").seq;
        let now = sim.now;
        if burst {
            sim.b.begin_burst();
        }
        for f in &frames {
            sim.b.handle_packet(now, &mut (), f).expect("accepted");
        }
        let end = first.wrapping_add(data.len() as u32);
        let offers = log
            .borrow()
            .iter()
            .filter(|c| matches!(c, Call::Segment { in_order: true, .. }))
            .count();
        assert_eq!(offers, frames.len());
        if burst {
            assert!(advances(&log.borrow()).is_empty());
            sim.b.end_burst(now, &mut ());
            assert_eq!(advances(&log.borrow()), vec![end]);
        } else {
            assert_eq!(advances(&log.borrow()).len(), frames.len());
            assert_eq!(advances(&log.borrow()).last(), Some(&end));
        }
        let got = sim.b.ulp_mut(b).expect("B's ULP").sock.read_all();
        assert_eq!(got, data);
        let info = sim.b.info(b).expect("B's connection");
        assert_eq!(info.snd_una, info.snd_nxt, "B's data acknowledged");
        states.push((format!("{info:?}"), sim.b.poll_timeout()));
        acked.push(acks(&mut sim));
    }
    assert_eq!(acked[0], acked[1]);
    assert!(!acked[1].is_empty());
    assert_eq!(states[0], states[1]);
}

// A segment that does not continue the run (one ahead of RCV.NXT) tells the ULP first where
// RCV.NXT is; the burst's end then has nothing left to tell; the hole's retransmission
// (outside a burst) advances as usual.
#[test]
fn a_segment_ahead_ends_the_run_first() {
    let data = payload(6 * 1448, 4);
    let (mut sim, b, log, frames) = setup(&data);
    let seqs: Vec<u32> = frames
        .iter()
        .map(|f| Seg::parse(f).expect("valid").seq)
        .collect();
    let now = sim.now;
    sim.b.begin_burst();
    for f in [&frames[0], &frames[1], &frames[2], &frames[4]] {
        sim.b.handle_packet(now, &mut (), f).expect("accepted");
    }
    let calls = log.borrow().clone();
    let ahead = calls
        .iter()
        .position(|c| {
            matches!(
                c,
                Call::Segment {
                    in_order: false,
                    ..
                }
            )
        })
        .expect("the segment ahead was offered");
    assert_eq!(calls[ahead - 1], Call::Advance(seqs[3]));
    assert_eq!(advances(&calls), vec![seqs[3]]);
    sim.b.end_burst(now, &mut ());
    assert_eq!(advances(&log.borrow()), vec![seqs[3]]);
    sim.b
        .handle_packet(now, &mut (), &frames[3])
        .expect("accepted");
    assert_eq!(advances(&log.borrow()), vec![seqs[3], seqs[5]]);
    assert!(log.borrow().contains(&Call::InOrder {
        seq: seqs[4],
        len: 1448
    }));
    sim.b
        .handle_packet(now, &mut (), &frames[5])
        .expect("accepted");
    let end = seqs[0].wrapping_add(data.len() as u32);
    assert_eq!(advances(&log.borrow()).last(), Some(&end));
    let got = sim.b.ulp_mut(b).expect("B's ULP").sock.read_all();
    assert_eq!(got, data);
}

// A run of in-order segments in one burst asks its ULP whether a service on top has work
// (`SegmentSource::needs_service`) once, at the run's end, after `on_advance`: not per
// segment. A ULP that says no there is not listed active; one whose `on_advance` left work
// (say, a completion) is, so the service's visit is skipped only when it would find nothing.
#[test]
fn a_run_asks_for_service_once_at_its_end() {
    let data = payload(8 * 1448, 5);
    for work in [false, true] {
        let (mut sim, b, log, frames) = setup(&data);
        assert!(frames.len() >= 8, "{} segments sent", frames.len());
        let service = sim.b.ulp(b).expect("B's ULP").service.clone();
        let mut active = Vec::new();
        sim.b.take_active(&mut active);
        service.yes.set(false);
        service.yes_on_advance.set(work);
        service.asked.set(0);
        let now = sim.now;
        sim.b.begin_burst();
        for f in &frames {
            sim.b.handle_packet(now, &mut (), f).expect("accepted");
        }
        assert_eq!(service.asked.get(), 0, "not asked per segment of the run");
        assert!(!sim.b.has_active(), "not listed during the run");
        sim.b.end_burst(now, &mut ());
        assert_eq!(advances(&log.borrow()).len(), 1);
        assert_eq!(service.asked.get(), 1, "asked once, at the run's end");
        active.clear();
        sim.b.take_active(&mut active);
        if work {
            assert_eq!(active, [b], "the work left by the run is serviced");
        } else {
            assert!(active.is_empty(), "nothing to service: not listed");
        }
        let got = sim.b.ulp_mut(b).expect("B's ULP").sock.read_all();
        assert_eq!(got, data);
    }
}

/// A's configuration with an initial window of `segments` (the stage for a turn of that
/// many segments at once; the product keeps RFC 6928's 10).
fn wide_config(segments: usize) -> Config {
    Config {
        initial_window: segments,
        ..test_config()
    }
}

/// B's segments handed in as bursts of the given sizes; each burst but the last is one
/// behind which more wait when `more` says so, and after the last the held ACKs are
/// released (as the data plane does once a burst no longer fills). The ACK numbers B sends
/// after each burst.
fn acks_per_burst(
    sim: &mut Sim<Rec>,
    frames: &[Vec<u8>],
    sizes: &[usize],
    more: bool,
) -> Vec<Vec<u32>> {
    let now = sim.now;
    let mut at = 0;
    let mut out = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let behind = more && i + 1 < sizes.len();
        if behind {
            sim.b.begin_burst_before_more();
        } else {
            sim.b.begin_burst();
        }
        for f in &frames[at..at + n] {
            sim.b.handle_packet(now, &mut (), f).expect("accepted");
        }
        at += n;
        sim.b.end_burst(now, &mut ());
        if !behind && sim.b.holds_acks() {
            sim.b.release_acks();
        }
        out.push(acks(sim));
    }
    out
}

// RFC 9293 §3.8.6.3, RFC 5681 §4.2: a run of 16 full segments split over two bursts
// (6 + 10) is acknowledged after each burst when nothing is known to wait behind it, once
// (all 16) when the first burst had more behind it. The octets and B's state end up the
// same.
#[test]
fn a_run_split_over_bursts_is_acknowledged_once_while_more_wait() {
    let data = payload(16 * 1448, 5);
    let mut got = Vec::new();
    for more in [false, true] {
        let (mut sim, b, _log, frames) = setup_cfg(&data, 0, wide_config(16));
        assert_eq!(frames.len(), 16);
        let first = Seg::parse(&frames[0]).expect("valid").seq;
        let seq_after = |n: usize| first.wrapping_add((n * 1448) as u32);
        let acked = acks_per_burst(&mut sim, &frames, &[6, 10], more);
        if more {
            assert_eq!(acked, vec![vec![], vec![seq_after(16)]]);
        } else {
            assert_eq!(acked, vec![vec![seq_after(6)], vec![seq_after(16)]]);
        }
        assert_eq!(
            sim.b.ulp_mut(b).expect("B's ULP").sock.read_all(),
            data,
            "more {more}"
        );
        got.push(format!("{:?}", sim.b.info(b).expect("B's connection")));
    }
    assert_eq!(got[0], got[1]);
}

// While more segments wait, B acknowledges at the latest every TX_QUANTUM full segments
// (one sender's turn), even when no burst ended without a backlog: 1.5 turns in three
// bursts, all with more behind them, give one ACK after TX_QUANTUM segments and, once the
// backlog is gone (release_acks), one for the rest.
#[test]
fn held_acks_go_every_quantum_and_when_the_backlog_is_gone() {
    let q = TX_QUANTUM as usize;
    let total = q + q / 2;
    let data = payload(total * 1448, 6);
    let (mut sim, _b, _log, frames) = setup_cfg(&data, 0, wide_config(total));
    assert_eq!(frames.len(), total);
    let first = Seg::parse(&frames[0]).expect("valid").seq;
    let seq_after = |n: usize| first.wrapping_add((n * 1448) as u32);
    let now = sim.now;
    let mut per_burst = Vec::new();
    for chunk in frames.chunks(q / 2) {
        sim.b.begin_burst_before_more();
        for f in chunk {
            sim.b.handle_packet(now, &mut (), f).expect("accepted");
        }
        sim.b.end_burst(now, &mut ());
        per_burst.push(acks(&mut sim));
    }
    assert_eq!(per_burst, vec![vec![], vec![seq_after(q)], vec![]]);
    assert!(sim.b.holds_acks());
    sim.b.release_acks();
    assert_eq!(acks(&mut sim), vec![seq_after(total)]);
    assert!(!sim.b.holds_acks());
    // Released once: nothing more is owed.
    sim.b.release_acks();
    assert!(acks(&mut sim).is_empty());
}

// RFC 1122 §4.2.3.2: a held ACK that nothing releases goes out when the delayed-ACK timer
// fires.
#[test]
fn a_held_ack_goes_at_the_delayed_ack_timer() {
    let data = payload(4 * 1448, 7);
    let (mut sim, _b, _log, frames) = setup(&data);
    let first = Seg::parse(&frames[0]).expect("valid").seq;
    let now = sim.now;
    sim.b.begin_burst_before_more();
    for f in &frames[..4] {
        sim.b.handle_packet(now, &mut (), f).expect("accepted");
    }
    sim.b.end_burst(now, &mut ());
    assert!(acks(&mut sim).is_empty());
    let due = sim.b.poll_timeout().expect("the delayed-ACK timer");
    assert!(due <= now + test_config().delayed_ack);
    sim.now = due;
    sim.b.handle_timeout(due);
    assert_eq!(acks(&mut sim), vec![first.wrapping_add(4 * 1448)]);
}

// RFC 5681 §4.2: out-of-order data is acknowledged at once (a duplicate ACK with SACK) even
// while more segments wait behind the burst.
#[test]
fn out_of_order_data_is_acknowledged_at_once_while_more_wait() {
    let data = payload(6 * 1448, 8);
    let (mut sim, _b, _log, frames) = setup(&data);
    let first = Seg::parse(&frames[0]).expect("valid").seq;
    let now = sim.now;
    sim.b.begin_burst_before_more();
    for f in [&frames[0], &frames[2]] {
        sim.b.handle_packet(now, &mut (), f).expect("accepted");
    }
    sim.b.end_burst(now, &mut ());
    assert_eq!(acks(&mut sim), vec![first.wrapping_add(1448)]);
}

// Many connections, their turns interleaved as a sender's engine sends them (TX_QUANTUM
// segments per turn) and cut into receive bursts of 32 frames, every burst but the last with
// more behind it: B acknowledges each turn once, where bursts that end a turn's first
// piece each cost an ACK of their own without the hold.
#[test]
fn many_connections_turns_across_bursts_are_acknowledged_once_each() {
    for drain in [false, true] {
        many_connections_turns(drain);
    }
}

/// [`many_connections_turns_across_bursts_are_acknowledged_once_each`] with B's sinks
/// reading what arrives at once (`drain`: the window stays whole, and a window update is due
/// every two segments) or keeping it.
fn many_connections_turns(drain: bool) {
    const CONNS: u16 = 8;
    const TURNS: usize = 2;
    let q = TX_QUANTUM as usize;
    let mut counts = Vec::new();
    for more in [false, true] {
        let log = Rc::new(RefCell::new(Vec::new()));
        let cfg_a = wide_config(TURNS * q);
        let mut sim: Sim<Rec> = Sim::new(9, LinkConfig::default(), cfg_a, test_config());
        sim.b
            .listen(
                std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, B_PORT),
                64,
            )
            .expect("listen");
        let b_log = log.clone();
        sim.accept[1] = Some(Box::new(move || {
            if drain {
                Rec::draining(&b_log)
            } else {
                Rec::new(&b_log)
            }
        }));
        let conns: Vec<ConnId> = (0..CONNS)
            .map(|i| {
                sim.a
                    .connect(sim.now, a_addr(i), b_addr(), Rec::new(&log))
                    .expect("connect")
            })
            .collect();
        let limit = sim.now + std::time::Duration::from_secs(1);
        assert!(
            sim.run_until(limit, |s| conns.iter().all(|&c| s.connected(Side::A, c))
                && s.accepted(Side::B).len() == CONNS as usize)
        );
        sim.run_until(limit, |_| false);
        let data = payload(TURNS * q * 1448, 10);
        for &c in &conns {
            let n = sim.a.ulp_mut(c).expect("A's ULP").sock.write(&data);
            assert_eq!(n, data.len());
        }
        let now = sim.now;
        let mut buf = vec![0u8; 1600];
        let mut frames = Vec::new();
        while let Some(t) = sim.a.poll_transmit(now, &mut (), &mut buf) {
            frames.push(buf[..t.len].to_vec());
        }
        let segs = CONNS as usize * TURNS * q;
        assert_eq!(frames.len(), segs);
        // Turns of TX_QUANTUM segments of one connection each.
        let ports: Vec<u16> = frames
            .iter()
            .map(|f| Seg::parse(f).expect("valid").sport)
            .collect();
        assert!(ports.chunks(q).all(|run| run.iter().all(|&p| p == run[0])));
        // Bursts of 32 starting mid-turn: 8, then 32s, then the rest.
        let mut sizes = vec![8];
        let mut left = segs - 8;
        while left > 0 {
            sizes.push(left.min(32));
            left -= left.min(32);
        }
        let acked = acks_per_burst(&mut sim, &frames, &sizes, more);
        let n: usize = acked.iter().map(Vec::len).sum();
        counts.push(n);
        for c in sim.accepted(Side::B) {
            let got = sim.b.ulp_mut(c).expect("B's ULP").received();
            assert_eq!(got, data);
        }
    }
    let turns = CONNS as usize * TURNS;
    assert_eq!(
        counts[1], turns,
        "one ACK per turn with more waiting (drain {drain})"
    );
    assert!(
        counts[0] > turns,
        "without: {} ACKs for {turns} turns (drain {drain})",
        counts[0]
    );
}
