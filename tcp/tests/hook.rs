//! The MPA-facing hooks: segments offered to the sink before any copy (placement of
//! out-of-order data), and whole units from the source kept intact on the wire.

mod common;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tcp::Instant;
use tcp::{Consumed, SegmentSink, SegmentSource, Unit};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// Consume every segment, in order or not (an MPA receiver placing verified FPDUs).
    All,
    /// Consume the first half of every segment; the engine keeps the rest.
    FirstHalf,
}

/// A test ULP: a unit source with fixed planned sizes and a placing sink with a log.
struct TestUlp {
    sizes: Vec<usize>,
    next_size: usize,
    to_send: usize,
    rng: StdRng,
    units: Rc<RefCell<HashMap<u32, Vec<u8>>>>,
    sent_stream: Vec<u8>,
    max_len_seen: usize,
    waits: usize,
    placement: Placement,
    base: Option<u32>,
    placed: BTreeMap<u64, Vec<u8>>,
    offers: Vec<(u32, usize, bool)>,
    in_order_bytes: usize,
    cap: usize,
    unread: usize,
    /// What [`SegmentSource::needs_service`] answers, negated.
    quiet: bool,
    /// How often [`SegmentSource::needs_service`] was asked.
    asked: std::cell::Cell<usize>,
    /// Room in front of each unit's payload (`Unit::with_headroom`).
    head: u16,
}

impl TestUlp {
    fn new(placement: Placement, to_send: usize, seed: u64) -> Self {
        TestUlp {
            sizes: vec![1448, 700, 1448, 1200, 64, 1448, 1000, 333],
            next_size: 0,
            to_send,
            rng: StdRng::seed_from_u64(seed),
            units: Rc::default(),
            sent_stream: Vec::new(),
            max_len_seen: 0,
            waits: 0,
            placement,
            base: None,
            placed: BTreeMap::new(),
            offers: Vec::new(),
            in_order_bytes: 0,
            cap: 1 << 20,
            unread: 0,
            quiet: false,
            asked: std::cell::Cell::new(0),
            head: 0,
        }
    }

    fn place(&mut self, seq: u32, bytes: &[u8]) {
        let base = self.base.expect("base known");
        let off = u64::from(seq.wrapping_sub(base));
        let end = off + bytes.len() as u64;
        if let Some((&s, v)) = self.placed.range(..end).next_back() {
            assert!(
                s + v.len() as u64 <= off,
                "byte at {off} handed to the sink twice"
            );
        }
        self.placed.insert(off, bytes.to_vec());
        self.unread += bytes.len();
    }

    /// The received stream, asserting it is contiguous from offset 0.
    fn stream(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (&off, v) in &self.placed {
            assert_eq!(off, out.len() as u64, "hole in placed data");
            out.extend_from_slice(v);
        }
        out
    }
}

impl SegmentSink for TestUlp {
    fn on_segment(
        &mut self,
        _cx: &mut (),
        _now: Instant,
        seq: u32,
        payload: &[u8],
        in_order: bool,
        rcv_nxt: u32,
    ) -> Consumed {
        let base = *self.base.get_or_insert(rcv_nxt);
        let _ = base;
        self.offers.push((seq, payload.len(), in_order));
        let n = match self.placement {
            Placement::All => payload.len(),
            Placement::FirstHalf => payload.len() / 2,
        };
        self.place(seq, &payload[..n]);
        Consumed::prefix(n)
    }

    fn on_in_order(&mut self, _cx: &mut (), _now: Instant, seq: u32, bytes: &[u8]) {
        // Bytes held before the ULP was attached start the stream.
        self.base.get_or_insert(seq);
        self.in_order_bytes += bytes.len();
        self.place(seq, bytes);
    }

    fn rx_window(&self) -> usize {
        self.cap.saturating_sub(self.unread)
    }
}

impl SegmentSource for TestUlp {
    fn next_unit(&mut self, _cx: &mut (), _now: Instant, seq: u32, max_len: usize) -> Option<Unit> {
        self.max_len_seen = self.max_len_seen.max(max_len);
        let want = self.sizes[self.next_size % self.sizes.len()].min(self.to_send);
        if want == 0 || want > max_len {
            // An FPDU does not shrink to fit: wait for the window.
            self.waits += usize::from(want > 0);
            return None;
        }
        self.next_size += 1;
        self.to_send -= want;
        let bytes: Vec<u8> = (0..want).map(|_| self.rng.gen()).collect();
        self.sent_stream.extend_from_slice(&bytes);
        self.units.borrow_mut().insert(seq, bytes.clone());
        if self.head > 0 {
            let mut buffer = vec![0xee; usize::from(self.head)];
            buffer.extend_from_slice(&bytes);
            return Some(Unit::with_headroom(buffer, self.head, None));
        }
        Some(Unit::new(bytes))
    }

    fn pending(&self) -> bool {
        self.to_send > 0
    }

    fn needs_service(&self) -> bool {
        self.asked.set(self.asked.get() + 1);
        !self.quiet
    }
}

fn run_units(
    seed: u64,
    link: LinkConfig,
    placement: Placement,
    total: usize,
    receiver_cap: usize,
    drain_per_step: usize,
) -> (Sim<TestUlp>, tcp::ConnId, tcp::ConnId) {
    let mut s: Sim<TestUlp> = Sim::new(seed, link, test_config(), test_config());
    s.record = true;
    s.b.listen(
        std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, B_PORT),
        16,
    )
    .unwrap();
    s.accept[1] = Some(Box::new(move || {
        let mut u = TestUlp::new(placement, 0, 0);
        u.cap = receiver_cap;
        u
    }));
    let a =
        s.a.connect(
            s.now,
            a_addr(0),
            b_addr(),
            TestUlp::new(placement, total, seed),
        )
        .unwrap();
    let limit = s.now + Duration::from_secs(10);
    let done = s.run_until(limit, |s| {
        let Some(&b) = s.accepted(Side::B).first() else {
            return false;
        };
        // The application consumes placed data at its own pace.
        if let Some(u) = s.b.ulp_mut(b) {
            u.unread = u.unread.saturating_sub(drain_per_step);
        }
        s.b.ulp(b)
            .is_some_and(|u| u.placed.values().map(Vec::len).sum::<usize>() == total)
    });
    assert!(done, "transfer of {total} bytes in units did not complete");
    let b = s.accepted(Side::B)[0];
    (s, a, b)
}

// MPA-FACTS §5 / RFC 5044 §8: every segment carries exactly one unit, starting at the
// sequence number the source was told, and retransmissions repeat the unit unchanged.
#[test]
fn unit_boundaries_preserved_on_retransmission() {
    let link = LinkConfig {
        loss: 0.03,
        reorder: 0.05,
        duplicate: 0.02,
        ..LinkConfig::default()
    };
    let total = 1 << 20;
    let (s, a, b) = run_units(31, link, Placement::All, total, 64 * 1024, 4096);
    let units = s.a.ulp(a).unwrap().units.clone();
    let units = units.borrow();
    let mut per_seq: HashMap<u32, usize> = HashMap::new();
    let mut data_segments = 0;
    for (to, bytes) in &s.delivered {
        if *to != Side::B {
            continue;
        }
        let seg = Seg::parse(bytes).unwrap();
        if seg.payload.is_empty() {
            continue;
        }
        data_segments += 1;
        let unit = units
            .get(&seg.seq)
            .unwrap_or_else(|| panic!("segment at {} does not start a unit", seg.seq));
        assert_eq!(
            &seg.payload, unit,
            "segment differs from the unit at {}",
            seg.seq
        );
        *per_seq.entry(seg.seq).or_default() += 1;
    }
    assert!(data_segments >= units.len());
    assert!(
        per_seq.values().any(|&n| n > 1),
        "some units were retransmitted"
    );
    let ua = s.a.ulp(a).unwrap();
    assert!(
        ua.max_len_seen <= 1448,
        "source never asked for more than the MSS"
    );
    assert_eq!(s.b.ulp(b).unwrap().stream(), ua.sent_stream);
}

// The receive hook: out-of-order segments reach the sink before the gap is filled, and a
// sink that places everything leaves nothing for the engine to copy.
#[test]
fn sink_sees_out_of_order_before_gap_filled() {
    let mut s: Sim<TestUlp> = Sim::new(32, LinkConfig::default(), test_config(), test_config());
    s.b.listen(
        std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, B_PORT),
        16,
    )
    .unwrap();
    s.accept[1] = Some(Box::new(|| TestUlp::new(Placement::All, 0, 0)));
    let mut n = 0;
    s.set_filter(move |_, side, seg| {
        if side == Side::A && !seg.payload.is_empty() {
            n += 1;
            return n != 5;
        }
        true
    });
    let total = 100_000;
    let a =
        s.a.connect(
            s.now,
            a_addr(0),
            b_addr(),
            TestUlp::new(Placement::All, 0, 5),
        )
        .unwrap();
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| !s.accepted(Side::B).is_empty()));
    s.a.ulp_mut(a).unwrap().to_send = total;
    let mut max_stored = 0;
    let limit = s.now + Duration::from_secs(1);
    assert!(s.run_until(limit, |s| {
        let Some(&b) = s.accepted(Side::B).first() else {
            return false;
        };
        if let Some(i) = s.b.info(b) {
            max_stored = max_stored.max(i.rx_stored);
        }
        s.b.ulp(b)
            .is_some_and(|u| u.placed.values().map(Vec::len).sum::<usize>() == total)
    }));
    let b = s.accepted(Side::B)[0];
    let ub = s.b.ulp(b).unwrap();
    let first_ooo = ub
        .offers
        .iter()
        .position(|o| !o.2)
        .expect("an out-of-order offer");
    let (gap_seq, ..) = ub.offers[first_ooo - 1];
    let gap_seq = gap_seq.wrapping_add(ub.offers[first_ooo - 1].1 as u32);
    let fill = ub
        .offers
        .iter()
        .position(|o| o.0 == gap_seq && o.2)
        .expect("the gap is filled later");
    assert!(
        fill > first_ooo + 1,
        "several out-of-order segments offered before the fill"
    );
    assert_eq!(ub.in_order_bytes, 0, "everything was placed on offer");
    assert_eq!(max_stored, 0, "the engine copied nothing");
    assert_eq!(ub.stream(), s.a.ulp(a).unwrap().sent_stream);
}

// Partial consumption: what the sink leaves is buffered by the engine and handed over in
// order through `on_in_order`, each byte exactly once, under loss and reordering.
#[test]
fn partially_consumed_segments_complete_the_stream() {
    let link = LinkConfig {
        loss: 0.02,
        reorder: 0.05,
        duplicate: 0.02,
        ..LinkConfig::default()
    };
    let total = 500_000;
    let (s, a, b) = run_units(33, link, Placement::FirstHalf, total, 1 << 20, 4096);
    let ub = s.b.ulp(b).unwrap();
    assert!(ub.in_order_bytes > 0 && ub.in_order_bytes < total);
    assert_eq!(ub.stream(), s.a.ulp(a).unwrap().sent_stream);
}

// A receiver window smaller than the units: the engine never splits a unit; it waits (and
// probes) until the whole unit fits (RFC 9293 §3.8.6.1 with unit-preserving probes).
#[test]
fn small_window_never_splits_units() {
    let total = 200_000;
    let (s, a, _) = run_units(34, LinkConfig::default(), Placement::All, total, 2500, 300);
    assert!(
        s.a.ulp(a).unwrap().waits > 0,
        "the window was at times smaller than a unit"
    );
    let units = s.a.ulp(a).unwrap().units.clone();
    let units = units.borrow();
    for (to, bytes) in &s.delivered {
        let seg = Seg::parse(bytes).unwrap();
        if *to == Side::B && !seg.payload.is_empty() {
            assert_eq!(units.get(&seg.seq), Some(&seg.payload));
        }
    }
}

// RFC 2018 / the gap list has no fixed limit: 150 out-of-order segments with 150 holes are
// all kept and SACKed, then the holes are filled and the stream is exact.
#[test]
fn more_than_100_gaps() {
    let mut p = RawPeer::new(test_config());
    let c = p.handshake();
    p.output();
    let base = p.snd;
    let stream = payload(150 * 20, 8);
    for i in (0..150).rev() {
        p.snd = base.wrapping_add(20 * i + 10);
        let off = (20 * i + 10) as usize;
        let out = p.send_data(&stream[off..off + 10]);
        assert_eq!(out.len(), 1, "immediate ACK for out-of-order data");
        assert_eq!(out[0].ack, Some(base));
        assert_eq!(out[0].sack.first(), Some(&(p.snd.wrapping_sub(10), p.snd)));
    }
    assert_eq!(p.e.info(c).unwrap().rx_ranges, 150);
    assert_eq!(p.e.ulp(c).unwrap().readable(), 0);
    for i in 0..150 {
        p.snd = base.wrapping_add(20 * i);
        let off = (20 * i) as usize;
        p.send_data(&stream[off..off + 10]);
    }
    assert_eq!(p.e.info(c).unwrap().rx_ranges, 0);
    assert_eq!(p.e.ulp_mut(c).unwrap().read_all(), stream);
}

// A ULP that needs no service for what ran (`SegmentSource::needs_service`: an iWARP
// connection whose segments placed an RDMA Write, RFC 5040 §4.4) is not put on the engine's
// active list while it receives; its peer, which says yes, is listed for the ACKs.
#[test]
fn a_ulp_needing_no_service_is_not_listed_active() {
    let total = 64 * 1024;
    let (mut s, a, b) = run_units(7, LinkConfig::default(), Placement::All, total, 1 << 20, 0);
    let mut active = Vec::new();
    s.b.take_active(&mut active);
    assert_eq!(active, [b], "the receiver ran and said yes");
    s.b.ulp_mut(b).unwrap().quiet = true;
    s.a.ulp_mut(a).unwrap().to_send = total;
    let mut a_active = Vec::new();
    s.a.take_active(&mut a_active);
    active.clear();
    s.b.take_active(&mut active);
    let limit = s.now + Duration::from_secs(5);
    assert!(s.run_until(limit, |s| s.b.ulp(b).is_some_and(|u| u
        .placed
        .values()
        .map(Vec::len)
        .sum::<usize>()
        == 2 * total)));
    active.clear();
    s.b.take_active(&mut active);
    assert!(active.is_empty(), "the quiet receiver was not listed");
    a_active.clear();
    s.a.take_active(&mut a_active);
    assert_eq!(a_active, [a], "the sender was, for its ACKs");
}

// A sending turn (up to `TX_QUANTUM` segments of one connection in a row) asks the ULP
// whether a service on top has work once, as the turn ends, not after every segment it
// sent; a ULP that says yes is listed then.
#[test]
fn a_sending_turn_asks_for_service_once_at_its_end() {
    let total = 64 * 1024;
    for quiet in [true, false] {
        let (mut s, a, _b) = run_units(7, LinkConfig::default(), Placement::All, total, 1 << 20, 0);
        let mut active = Vec::new();
        s.a.take_active(&mut active);
        let u = s.a.ulp_mut(a).unwrap();
        u.quiet = quiet;
        u.to_send = total;
        u.asked.set(0);
        let mut buf = vec![0u8; 2048];
        let now = s.now;
        let mut sent = 0usize;
        while s.a.poll_transmit(now, &mut (), &mut buf).is_some() {
            sent += 1;
        }
        assert!(sent >= 2, "{sent} segments sent");
        let turns = sent.div_ceil(tcp::TX_QUANTUM as usize);
        let asked = s.a.ulp(a).unwrap().asked.get();
        assert!(
            (1..=turns).contains(&asked),
            "{sent} segments in {turns} turns, asked {asked} times"
        );
        active.clear();
        s.a.take_active(&mut active);
        if quiet {
            assert!(active.is_empty());
        } else {
            assert_eq!(active, [a], "listed at its turn's end");
        }
    }
}

// RFC 9293 §3.10 (SEND) with a port that sends each frame as one buffer: the headers
// written into the room a unit leaves in front of its payload (`Unit::with_headroom`,
// `Lent::with_headers`). Over a lossy, reordering link whose frames hold their buffers
// for a while, the packets on the wire are those of the headers and payload put together
// (identical to a run that copies them), the data arrive whole, and a unit lent again while
// a frame still holds its buffer (a retransmission) is offered no room, so the held
// frame's headers are never written over; once handed back, its retransmissions go out
// whole again.
#[test]
fn headers_go_into_a_units_room_only_while_no_frame_holds_it() {
    let run = |whole_frames: bool| {
        let link = LinkConfig {
            loss: 0.03,
            reorder: 0.03,
            ..LinkConfig::default()
        };
        let mut s: Sim<TestUlp> = Sim::new(41, link, test_config(), test_config());
        s.record = true;
        s.gather = Some(1);
        s.whole_frames = whole_frames;
        s.hold = Duration::from_micros(300);
        s.b.listen(
            std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, B_PORT),
            16,
        )
        .unwrap();
        s.accept[1] = Some(Box::new(|| TestUlp::new(Placement::All, 0, 0)));
        let total = 1 << 20;
        let mut ulp = TestUlp::new(Placement::All, total, 41);
        ulp.head = 80;
        let a = s.a.connect(s.now, a_addr(0), b_addr(), ulp).unwrap();
        let limit = s.now + Duration::from_secs(20);
        let done = s.run_until(limit, |s| {
            let Some(&b) = s.accepted(Side::B).first() else {
                return false;
            };
            // The application reads what was placed.
            let u = s.b.ulp_mut(b).unwrap();
            u.unread = u.unread.saturating_sub(4096);
            u.placed.values().map(Vec::len).sum::<usize>() == total
        });
        let placed: usize = s.accepted(Side::B).first().map_or(0, |&b| {
            s.b.ulp(b).unwrap().placed.values().map(Vec::len).sum()
        });
        assert!(done, "the transfer completes: {placed} of {total}");
        let b = s.accepted(Side::B)[0];
        assert_eq!(
            s.b.ulp(b).unwrap().stream(),
            s.a.ulp(a).unwrap().sent_stream
        );
        let (again, _) = s.regathered;
        assert!(again > 0, "retransmissions");
        s
    };
    let copied = run(false);
    let whole = run(true);
    assert_eq!(copied.whole.0, 0);
    assert_eq!(
        whole.delivered, copied.delivered,
        "the same packets on the wire"
    );
    let (sent_whole, lent_while_held, no_room) = whole.whole;
    assert!(sent_whole > 500, "{sent_whole} frames sent whole");
    assert!(
        lent_while_held > 0,
        "units lent again while a frame held them"
    );
    assert_eq!(
        no_room, lent_while_held,
        "no room while a frame holds the buffer"
    );
    // Every lend went out whole but those made while held; a unit first sent always does,
    // so retransmissions out of buffers handed back did too.
    let (firsts, (again, _)) = (whole.gathered.len() as u64, whole.regathered);
    assert_eq!(sent_whole + lent_while_held, firsts + again);
    assert!(
        sent_whole > firsts,
        "a retransmission after the hand-back went out whole"
    );
}
