//! Receive bursts (`Engine::begin_burst` .. `Engine::end_burst`): a run of one connection's
//! in-order segments tells its ULP once, at the end, that RCV.NXT advanced; every segment is
//! still offered at once, and what goes back to the peer is the same as without a burst.

mod common;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use common::*;
use tcp::{ConnId, Consumed, Instant, SegmentSink, SegmentSource, StreamSocket, Unit};

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
        self.sock.on_in_order(cx, now, seq, payload);
        Consumed::all(payload.len())
    }

    fn on_in_order(&mut self, cx: &mut (), now: Instant, seq: u32, bytes: &[u8]) {
        self.log.borrow_mut().push(Call::InOrder {
            seq,
            len: bytes.len(),
        });
        self.sock.on_in_order(cx, now, seq, bytes);
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
    let log = Rc::new(RefCell::new(Vec::new()));
    let mut sim: Sim<Rec> = Sim::new(7, LinkConfig::default(), test_config(), test_config());
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
