//! Loss recovery, timers and ACK policy, driven segment by segment through a scripted peer.

mod common;

use std::time::Duration;

use common::*;
use smoltcp::wire::TcpControl;
use tcp::{CloseReason, Config, Keepalive, State, StreamSocket};

/// A connection where the engine (server side) has `n` full segments in flight toward the
/// raw peer. Returns the peer and the data segments.
fn in_flight(cfg: Config, sack: bool, n: usize) -> (RawPeer, Vec<Seg>) {
    let mut p = RawPeer::new(cfg);
    let c = p.handshake_with(Some(7), true, sack, 1 << 20);
    let mss = p.e.info(c).unwrap().effective_mss;
    p.e.ulp_mut(c).unwrap().write(&payload(mss * n, 1));
    let segs: Vec<Seg> = p
        .output()
        .into_iter()
        .filter(|s| !s.payload.is_empty())
        .collect();
    assert_eq!(
        segs.len(),
        n,
        "initial window (RFC 6928) lets {n} segments out"
    );
    (p, segs)
}

/// The test configuration without tail loss probes (RFC 8985 §7), for the tests of what
/// happens without one: the RTO, RACK on its own.
fn no_tlp() -> Config {
    Config {
        tail_loss_probe: false,
        ..test_config()
    }
}

fn ack_for(p: &RawPeer, ack: u32, sack: &[(u32, u32)]) -> Seg {
    let mut s = p.seg(TcpControl::None, &[]);
    s.ack = Some(ack);
    s.sack = sack.to_vec();
    s
}

fn data(out: &[Seg]) -> Vec<Seg> {
    out.iter()
        .filter(|s| !s.payload.is_empty())
        .cloned()
        .collect()
}

// RFC 5681 §3.2: the third duplicate ACK (not the first or second) triggers a fast
// retransmit of the first unacknowledged segment, byte-identical to the original.
#[test]
fn fast_retransmit_on_third_dupack() {
    let (mut p, segs) = in_flight(test_config(), false, 10);
    let una = segs[1].seq;
    let out = p.send(&ack_for(&p, una, &[]));
    assert!(data(&out).iter().all(|s| s.seq != una));
    for i in 1..=3 {
        let out = data(&p.send(&ack_for(&p, una, &[])));
        if i < 3 {
            assert!(
                out.iter().all(|s| s.seq != una),
                "no retransmit after {i} dupacks"
            );
        } else {
            let r = out.iter().find(|s| s.seq == una).expect("fast retransmit");
            assert_eq!(r.payload, segs[1].payload, "same unit, same bytes");
        }
    }
    let info = p.e.info(p.conn.unwrap()).unwrap();
    assert_eq!(info.recoveries, 1);
    assert_eq!(info.timeouts, 0);
}

// The buffers of acknowledged units carry new data (`SegmentSource::recycle`); units still
// in flight keep theirs, so a retransmission sends the original bytes, and the new
// segments carry the new ones.
#[test]
fn retransmission_after_recycling_sends_identical_bytes() {
    let (mut p, segs) = in_flight(test_config(), false, 10);
    let c = p.conn.unwrap();
    let mss = p.e.info(c).unwrap().effective_mss;
    // The first five are acknowledged: their buffers go back to the socket.
    let una = segs[5].seq;
    let more = payload(mss * 5, 2);
    let mut fresh = data(&p.send(&ack_for(&p, una, &[])));
    assert_eq!(p.e.ulp_mut(c).unwrap().write(&more), more.len());
    fresh.extend(data(&p.output()));
    let sent: Vec<u8> = fresh.iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(sent, more, "new segments carry the new bytes");
    // Three duplicate ACKs: the first unacknowledged unit again, byte for byte.
    let mut again = Vec::new();
    for _ in 0..3 {
        again.extend(data(&p.send(&ack_for(&p, una, &[]))));
    }
    let r = again
        .iter()
        .find(|s| s.seq == una)
        .expect("fast retransmit");
    assert_eq!(r.payload, segs[5].payload, "same unit, same bytes");
    // And the retransmission timeout resends the rest unchanged.
    let out = data(&p.advance(Duration::from_secs(2)));
    let first = out.first().expect("timeout retransmission");
    let orig = segs.iter().chain(&fresh).find(|s| s.seq == first.seq);
    assert_eq!(Some(&first.payload), orig.map(|o| &o.payload));
}

// RFC 6675 §5: with SACK, recovery retransmits exactly the holes (IsLost, NextSeg rule 1)
// and nothing the receiver already holds.
#[test]
fn sack_recovery_retransmits_only_holes() {
    let (mut p, segs) = in_flight(test_config(), true, 10);
    let end = segs[9].seq.wrapping_add(segs[9].payload.len() as u32);
    let blocks = [(segs[5].seq, end), (segs[2].seq, segs[4].seq)];
    let mut retransmitted = Vec::new();
    for _ in 0..3 {
        let out = p.send(&ack_for(&p, segs[1].seq, &blocks));
        retransmitted.extend(data(&out));
    }
    let seqs: Vec<u32> = retransmitted.iter().map(|s| s.seq).collect();
    assert!(
        seqs.contains(&segs[1].seq) && seqs.contains(&segs[4].seq),
        "{seqs:?}"
    );
    for s in &retransmitted {
        let orig = segs
            .iter()
            .find(|o| o.seq == s.seq)
            .expect("retransmission of a unit");
        assert_eq!(s.payload, orig.payload);
        assert!(
            s.seq == segs[1].seq || s.seq == segs[4].seq,
            "only holes: {seqs:?}"
        );
    }
    assert_eq!(p.e.info(p.conn.unwrap()).unwrap().timeouts, 0);
}

// RFC 6298 §2.4 (minimum configurable, here 5 ms and 20 ms) and §5.5 (backoff doubles):
// a tail loss is retransmitted at the RTO, not earlier.
#[test]
fn rto_minimum_honoured_and_backoff() {
    for min_ms in [5u64, 20] {
        let cfg = Config {
            rto_min: Duration::from_millis(min_ms),
            ..no_tlp()
        };
        let (mut p, segs) = in_flight(cfg, true, 1);
        let start = p.now;
        let mut times = Vec::new();
        while times.len() < 2 {
            let out = p.advance(Duration::from_micros(100));
            if data(&out).iter().any(|s| s.seq == segs[0].seq) {
                times.push(p.now - start);
            }
            assert!(p.now - start < Duration::from_secs(1));
        }
        let min = Duration::from_millis(min_ms);
        assert!(
            times[0] >= min && times[0] <= min + Duration::from_micros(200),
            "{times:?}"
        );
        let second = times[1] - times[0];
        assert!(
            second >= 2 * min && second <= 2 * min + Duration::from_micros(200),
            "{times:?}"
        );
    }
}

// RFC 9293 §3.8.6.1: a zero window stops data; probes (empty segments below SND.UNA, so no
// unit is split) are sent with backoff until the window opens, then data flows again.
#[test]
fn zero_window_probe() {
    let mut p = RawPeer::new(test_config());
    let c = p.handshake_with(Some(7), true, true, 1 << 20);
    let mss = p.e.info(c).unwrap().effective_mss;
    let total = mss * 20;
    p.e.ulp_mut(c).unwrap().write(&payload(total, 2));
    let segs = data(&p.output());
    let end = segs
        .last()
        .map(|s| s.seq.wrapping_add(s.payload.len() as u32))
        .unwrap();
    let mut zero = ack_for(&p, end, &[]);
    zero.window = 0;
    assert!(data(&p.send(&zero)).is_empty());
    let mut probes = Vec::new();
    for _ in 0..400 {
        for s in p.advance(Duration::from_millis(1)) {
            assert!(s.payload.is_empty(), "no data into a zero window");
            if s.seq == end.wrapping_sub(1) {
                probes.push(p.now);
            }
        }
    }
    assert!(probes.len() >= 3, "probes: {probes:?}");
    assert!(
        probes[2] - probes[1] > probes[1] - probes[0],
        "probe interval backs off"
    );
    let mut open = ack_for(&p, end, &[]);
    open.window = 1000;
    let out = data(&p.send(&open));
    assert!(!out.is_empty(), "window opened: data resumes");
    assert_eq!(out[0].seq, end);
}

// RFC 9293 §3.8.4: keepalive probes after idle time; a live peer answers and the connection
// stays; an unreachable one is dropped after `count` unanswered probes.
#[test]
fn keepalive_probes_and_timeout() {
    let ka = Keepalive {
        idle: Duration::from_millis(50),
        interval: Duration::from_millis(10),
        count: 3,
    };
    let cfg_a = Config {
        keepalive: Some(ka),
        ..test_config()
    };
    let mut s = Sim::streams(21, LinkConfig::default(), cfg_a, test_config(), 4096);
    let a =
        s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(4096, 4096))
            .unwrap();
    let limit = s.now + Duration::from_millis(5);
    assert!(s.run_until(limit, |s| s.connected(Side::A, a)));
    let probes = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let seen = probes.clone();
    s.set_filter(move |_, side, seg| {
        if side == Side::A && seg.payload.is_empty() && seg.control == TcpControl::None {
            seen.set(seen.get() + 1);
        }
        true
    });
    let limit = s.now + Duration::from_millis(220);
    s.run_until(limit, |_| false);
    assert!(
        probes.get() >= 4,
        "one probe per idle period: {}",
        probes.get()
    );
    assert_eq!(s.a.state(a), Some(State::Established));
    s.set_filter(|_, _, _| false);
    let limit = s.now + Duration::from_millis(200);
    assert!(s.run_until(limit, |s| s.closed_reason(Side::A, a).is_some()));
    assert_eq!(s.closed_reason(Side::A, a), Some(CloseReason::TimedOut));
}

// RFC 7323 §5.3/§5.5: our TSval ticks in microseconds and passes 2^31 ticks after 35.8
// minutes, while a peer may keep TS.Recent for 24 days of idleness (Linux before 6.7). An idle
// connection therefore sends a pure ACK with the current TSval at least every 15 minutes, so
// that no two consecutive segments are 2^31 ticks apart, and data after a long idle period is
// in order for the peer's PAWS test.
#[test]
fn idle_connection_refreshes_the_peers_ts_recent() {
    let mut s = Sim::streams(
        22,
        LinkConfig::default(),
        test_config(),
        test_config(),
        4096,
    );
    let a =
        s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(4096, 4096))
            .unwrap();
    let limit = s.now + Duration::from_millis(5);
    assert!(s.run_until(limit, |s| s.connected(Side::A, a)));
    let sent = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = sent.clone();
    s.set_filter(move |now, side, seg| {
        if side == Side::A {
            log.borrow_mut().push((now, seg.clone()));
        }
        true
    });
    let idle_from = s.now;
    let limit = s.now + Duration::from_secs(70 * 60);
    s.run_until(limit, |_| false);
    let refreshes: Vec<_> = sent
        .borrow()
        .iter()
        .filter(|(_, g)| g.payload.is_empty() && g.control == TcpControl::None)
        .cloned()
        .collect();
    assert!(
        refreshes.len() >= 4,
        "one ACK per 15 idle minutes over 70: {}",
        refreshes.len()
    );
    let mut prev_ts = None;
    let mut prev_at = idle_from;
    for (at, g) in &refreshes {
        let (tsval, _) = g.ts.expect("timestamps negotiated");
        assert!(
            at.saturating_since(prev_at) <= Duration::from_secs(15 * 60),
            "ACKs at most 15 minutes apart"
        );
        if let Some(p) = prev_ts {
            let gap = tsval.wrapping_sub(p);
            assert!(gap < 1 << 31, "TSval in order for PAWS: {p} then {tsval}");
        }
        // A pure ACK at SND.NXT, not a keepalive probe below SND.UNA (keepalive is off).
        assert_eq!(g.seq, s.a.info(a).unwrap().snd_nxt);
        prev_ts = Some(tsval);
        prev_at = *at;
    }
    // The connection carries data after the idle hour, with no PAWS drop at B.
    s.a.ulp_mut(a).unwrap().write(b"after an idle hour");
    let b = s.accepted(Side::B)[0];
    let mut got = Vec::new();
    let limit = s.now + Duration::from_millis(50);
    assert!(s.run_until(limit, |s| {
        got.extend(s.b.ulp_mut(b).unwrap().read_all());
        got.len() == 18
    }));
    assert_eq!(got, b"after an idle hour");
    assert_eq!(s.b.info(b).unwrap().paws_drops, 0);
}

// RFC 5681 §4.2 / RFC 9293 §3.8.6.3: ACK every second full segment, delay a lone one by the
// delayed-ACK timeout, and ACK an out-of-order segment at once with a SACK block (RFC 2018).
#[test]
fn delayed_ack_and_quick_ack_on_reordering() {
    let mut p = RawPeer::new(test_config());
    p.handshake();
    let before = p.e.stats();
    // Attaching a 1 MiB socket opens the window beyond the pre-attach 64 KiB: an update.
    assert_eq!(p.output().len(), 1);
    assert!(
        p.send_data(&[1; 1000]).is_empty(),
        "first segment: ACK delayed"
    );
    let out = p.send_data(&[2; 1000]);
    assert_eq!(out.len(), 1, "second segment: immediate ACK");
    assert_eq!(out[0].ack, Some(p.snd));
    assert!(p.send_data(&[3; 100]).is_empty());
    let out = p.advance(Duration::from_millis(1));
    assert_eq!(out.len(), 1, "delayed ACK after 1 ms");
    // Out of order: skip 500 bytes.
    let hole = p.snd;
    p.snd = p.snd.wrapping_add(500);
    let out = p.send_data(&[4; 300]);
    assert_eq!(out.len(), 1, "quick ACK on reordering");
    assert_eq!(out[0].ack, Some(hole));
    assert_eq!(
        out[0].sack,
        vec![(hole.wrapping_add(500), hole.wrapping_add(800))]
    );
    // Counted: four pure ACKs (the window update, the second segment's, the delayed one, the
    // quick one), one of them sent because the delayed-ACK timer ran out.
    let st = p.e.stats();
    assert_eq!(
        (
            st.pure_acks - before.pure_acks,
            st.delayed_acks - before.delayed_acks
        ),
        (4, 1)
    );
}

// Fast retransmit in a simulated transfer without SACK (RFC 6582): a dropped segment is
// repaired well before the (deliberately long) RTO.
#[test]
fn fast_retransmit_beats_rto_in_transfer() {
    let cfg = Config {
        sack: false,
        rto_min: Duration::from_millis(200),
        ..test_config()
    };
    let mut s = Sim::streams(22, LinkConfig::default(), cfg.clone(), cfg, 1 << 20);
    let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let l = log.clone();
    let mut n = 0;
    s.set_filter(move |now, side, seg| {
        if side != Side::A || seg.payload.is_empty() {
            return true;
        }
        n += 1;
        l.borrow_mut().push((now, seg.seq, n == 40));
        n != 40
    });
    let data = payload(300_000, 3);
    let (got, took) = bulk_transfer(&mut s, &data, 1 << 20, Duration::from_secs(5)).expect("done");
    assert!(got == data);
    let log = log.borrow();
    let &(t0, seq, _) = log.iter().find(|e| e.2).expect("dropped one");
    let &(t1, _, _) = log
        .iter()
        .find(|e| e.1 == seq && e.0 > t0)
        .expect("retransmitted");
    assert!(
        t1 - t0 < Duration::from_millis(5),
        "repaired in {:?}",
        t1 - t0
    );
    assert!(took < Duration::from_millis(100), "took {took:?}");
}

// RFC 3042 Limited Transmit (no SACK): each of the first two duplicate ACKs lets one new
// segment out although cwnd is full; the third triggers the fast retransmit.
#[test]
fn limited_transmit_on_first_two_dupacks() {
    let (mut p, segs) = in_flight(test_config(), false, 10);
    let c = p.conn.unwrap();
    let mss = p.e.info(c).unwrap().effective_mss;
    p.e.ulp_mut(c).unwrap().write(&payload(mss * 5, 4));
    assert!(data(&p.output()).is_empty(), "cwnd is full");
    let una = segs[1].seq;
    // The ACK of the first segment frees one segment and grows cwnd by one (slow start).
    let opened = data(&p.send(&ack_for(&p, una, &[])));
    assert_eq!(opened.len(), 2);
    let end = opened[1].seq.wrapping_add(mss as u32);
    assert!(data(&p.output()).is_empty(), "cwnd full again");
    let first = data(&p.send(&ack_for(&p, una, &[])));
    assert_eq!(first.iter().map(|s| s.seq).collect::<Vec<_>>(), vec![end]);
    let second = data(&p.send(&ack_for(&p, una, &[])));
    assert_eq!(
        second.iter().map(|s| s.seq).collect::<Vec<_>>(),
        vec![end.wrapping_add(mss as u32)]
    );
    let third = data(&p.send(&ack_for(&p, una, &[])));
    assert_eq!(third.first().map(|s| s.seq), Some(una), "fast retransmit");
}

/// Ten segments in flight, then the retransmission timeout: returns the peer, the original
/// segments, the retransmission and the congestion window before the timeout.
fn timed_out() -> (RawPeer, Vec<Seg>, Seg, usize) {
    let (mut p, segs) = in_flight(no_tlp(), true, 10);
    let c = p.conn.unwrap();
    let cwnd = p.e.info(c).unwrap().cwnd;
    let start = p.now;
    let rtx = loop {
        let out = data(&p.advance(Duration::from_millis(1)));
        if let Some(s) = out.first() {
            break s.clone();
        }
        assert!(p.now - start < Duration::from_secs(2), "no RTO");
    };
    assert_eq!(rtx.seq, segs[0].seq, "go-back-N starts at SND.UNA");
    let info = p.e.info(c).unwrap();
    assert_eq!(info.timeouts, 1);
    assert!(
        info.cwnd < cwnd,
        "RFC 5681 §3.1: loss window after the timeout"
    );
    (p, segs, rtx, cwnd)
}

/// The peer's ACK of the first `n` original segments, echoing `tsecr`.
fn ack_echoing(p: &mut RawPeer, segs: &[Seg], n: usize, tsecr: u32) -> Vec<Seg> {
    let mut a = ack_for(p, segs[n - 1].seq + segs[n - 1].payload.len() as u32, &[]);
    let tsval = p.tsval.unwrap() + 1;
    p.tsval = Some(tsval);
    a.ts = Some((tsval, tsecr));
    p.send(&a)
}

// RFC 3522 §3.2 / RFC 4015 §3: after a timeout, an ACK echoing the TSval of the original
// transmission (older than the retransmission's) shows the timeout was spurious (the peer
// stalled): the congestion state is restored and the segments the timeout marked lost are
// not sent again.
#[test]
fn spurious_timeout_is_detected_and_undone() {
    let (mut p, segs, rtx, cwnd) = timed_out();
    let c = p.conn.unwrap();
    let original_ts = segs[4].ts.unwrap().0;
    assert!(
        original_ts < rtx.ts.unwrap().0,
        "timestamps tell them apart"
    );
    let out = ack_echoing(&mut p, &segs, 5, original_ts);
    let info = p.e.info(c).unwrap();
    assert_eq!((info.timeouts, info.spurious_timeouts), (1, 1));
    assert!(info.cwnd >= cwnd, "cwnd {} restored to {cwnd}", info.cwnd);
    let resent: Vec<u32> = data(&out)
        .iter()
        .map(|s| s.seq)
        .filter(|q| segs[5..].iter().any(|s| s.seq == *q))
        .collect();
    assert!(resent.is_empty(), "in flight, not lost: {resent:?}");
    assert_eq!(info.retransmits, 1);
}

// RFC 3522 §3.2: an ACK echoing the retransmission's TSval means the original was lost:
// the timeout stands, and go-back-N goes on.
#[test]
fn genuine_timeout_is_not_undone() {
    let (mut p, segs, rtx, cwnd) = timed_out();
    let c = p.conn.unwrap();
    let out = ack_echoing(&mut p, &segs, 1, rtx.ts.unwrap().0);
    let info = p.e.info(c).unwrap();
    assert_eq!((info.timeouts, info.spurious_timeouts), (1, 0));
    assert!(info.cwnd < cwnd);
    assert!(
        data(&out).iter().any(|s| s.seq == segs[1].seq),
        "the next lost segment is retransmitted"
    );
}

/// End sequence number of a data segment.
fn end_of(s: &Seg) -> u32 {
    s.seq.wrapping_add(s.payload.len() as u32)
}

/// Ten segments in flight (SACK on, timestamps as `ts`, no tail loss probes), then after a 100 µs round trip the
/// peer's ACK of the first two: RACK's minimum RTT is 100 µs (SRTT is less: the scripted
/// handshake took no time).
fn rtt_measured(ts: bool) -> (RawPeer, Vec<Seg>) {
    let mut p = RawPeer::new(no_tlp());
    let c = p.handshake_with(Some(7), ts, true, 1 << 20);
    let mss = p.e.info(c).unwrap().effective_mss;
    p.e.ulp_mut(c).unwrap().write(&payload(mss * 10, 1));
    let segs = data(&p.output());
    assert_eq!(segs.len(), 10);
    p.now = p.now + Duration::from_micros(100);
    let mut a = ack_for(&p, segs[2].seq, &[]);
    if ts {
        a.ts = Some((p.tsval.unwrap(), segs[1].ts.unwrap().0));
    }
    assert!(data(&p.send(&a)).is_empty() || p.e.info(c).unwrap().retransmits == 0);
    (p, segs)
}

/// RACK's reordering window before reordering is seen: min RTT / 4, at most SRTT.
fn reo_wnd(p: &RawPeer) -> Duration {
    let srtt = p.e.info(p.conn.unwrap()).unwrap().srtt.unwrap();
    Duration::from_micros(25).min(srtt)
}

// RFC 8985 §6.2: a unit SACKed above a hole is not enough to retransmit the hole until an
// RTT plus the reordering window (min RTT / 4, at most SRTT) passed since it was sent; the
// hole filled within that time (reordering, not loss) costs no retransmission and no
// recovery.
#[test]
fn rack_reordering_within_the_window_is_not_loss() {
    let (mut p, segs) = rtt_measured(true);
    let c = p.conn.unwrap();
    let cwnd = p.e.info(c).unwrap().cwnd;
    let wnd = reo_wnd(&p);
    assert!(wnd > Duration::from_micros(5));
    let out = p.send(&ack_for(
        &p,
        segs[2].seq,
        &[(segs[3].seq, end_of(&segs[4]))],
    ));
    assert!(data(&out).iter().all(|s| s.seq != segs[2].seq));
    let out = p.advance(wnd - Duration::from_micros(2));
    assert!(
        data(&out).iter().all(|s| s.seq != segs[2].seq),
        "within {wnd:?}"
    );
    p.send(&ack_for(&p, end_of(&segs[4]), &[]));
    let out = p.advance(Duration::from_millis(1));
    assert!(data(&out).iter().all(|s| s.seq != segs[2].seq));
    let info = p.e.info(c).unwrap();
    assert_eq!(
        (info.retransmits, info.recoveries, info.timeouts),
        (0, 0, 0)
    );
    assert!(info.cwnd >= cwnd);
}

// RFC 8985 §6.2-6.3: a real loss is still found: the reordering timer fires an RTT plus
// the reordering window after the hole was sent, long before the RTO (5 ms here).
#[test]
fn rack_timer_detects_a_real_loss() {
    let (mut p, segs) = rtt_measured(true);
    let c = p.conn.unwrap();
    let wnd = reo_wnd(&p);
    let out = p.send(&ack_for(
        &p,
        segs[2].seq,
        &[(segs[3].seq, end_of(&segs[4]))],
    ));
    assert!(data(&out).iter().all(|s| s.seq != segs[2].seq));
    let mut waited = Duration::ZERO;
    let rtx = loop {
        let out = data(&p.advance(Duration::from_micros(5)));
        waited += Duration::from_micros(5);
        if let Some(s) = out.iter().find(|s| s.seq == segs[2].seq) {
            break s.clone();
        }
        assert!(waited < Duration::from_millis(5), "no RACK retransmission");
    };
    // Sent at 0, RACK.rtt 100 µs: due the reordering window after the SACK arrived.
    assert!(
        waited >= wnd && waited < wnd + Duration::from_micros(5),
        "{waited:?}"
    );
    assert_eq!(rtx.payload, segs[2].payload);
    let info = p.e.info(c).unwrap();
    assert_eq!((info.recoveries, info.timeouts), (1, 0));
}

// RFC 8985 §6.2 step 4: with DupThresh (3) units SACKed and no reordering seen yet, the
// window is zero: the hole is retransmitted at once, as the duplicate-ACK rule did.
#[test]
fn rack_three_sacked_units_retransmit_at_once() {
    let (mut p, segs) = rtt_measured(true);
    let out = p.send(&ack_for(
        &p,
        segs[2].seq,
        &[(segs[3].seq, end_of(&segs[5]))],
    ));
    assert_eq!(data(&out).first().map(|s| s.seq), Some(segs[2].seq));
}

// RFC 3522 §3.2 applied to fast recovery: the ACK of the retransmitted hole echoes the
// original's TSval (microseconds older than the retransmission's): the original arrived,
// the recovery was spurious and is undone (the congestion window restored, RFC 4015 §3).
#[test]
fn spurious_fast_recovery_is_undone_by_eifel() {
    let (mut p, segs) = rtt_measured(true);
    let c = p.conn.unwrap();
    let cwnd = p.e.info(c).unwrap().cwnd;
    p.now = p.now + Duration::from_micros(3);
    let out = p.send(&ack_for(
        &p,
        segs[2].seq,
        &[(segs[3].seq, end_of(&segs[5]))],
    ));
    let rtx = data(&out)
        .into_iter()
        .find(|s| s.seq == segs[2].seq)
        .expect("fast rtx");
    assert!(rtx.ts.unwrap().0 > segs[2].ts.unwrap().0);
    let info = p.e.info(c).unwrap();
    assert_eq!(info.recoveries, 1);
    assert!(info.cwnd < cwnd, "reduced on entry");
    let mut a = ack_for(&p, end_of(&segs[5]), &[]);
    a.ts = Some((p.tsval.unwrap() + 1, segs[2].ts.unwrap().0));
    p.send(&a);
    let info = p.e.info(c).unwrap();
    assert_eq!(info.spurious_recoveries, 1);
    assert!(info.cwnd >= cwnd, "cwnd {} restored to {cwnd}", info.cwnd);
}

// RFC 3522 §3.2: an ACK echoing the retransmission's TSval: the loss was real, the window
// stays reduced.
#[test]
fn genuine_fast_recovery_is_not_undone() {
    let (mut p, segs) = rtt_measured(true);
    let c = p.conn.unwrap();
    let cwnd = p.e.info(c).unwrap().cwnd;
    p.now = p.now + Duration::from_micros(3);
    let out = p.send(&ack_for(
        &p,
        segs[2].seq,
        &[(segs[3].seq, end_of(&segs[5]))],
    ));
    let rtx = data(&out)
        .into_iter()
        .find(|s| s.seq == segs[2].seq)
        .expect("fast rtx");
    let mut a = ack_for(&p, end_of(&segs[5]), &[]);
    a.ts = Some((p.tsval.unwrap() + 1, rtx.ts.unwrap().0));
    p.send(&a);
    let info = p.e.info(c).unwrap();
    assert_eq!((info.recoveries, info.spurious_recoveries), (1, 0));
    assert!(info.cwnd < cwnd);
}

// RFC 3708 §3.2 without timestamps: a D-SACK (RFC 2883) for the one retransmission of the
// recovery shows both copies arrived: the recovery is undone, and RACK's reordering window
// grows (RFC 8985 §6.2 step 4), so the same reordering no longer counts as loss.
#[test]
fn spurious_fast_recovery_is_undone_by_dsack() {
    let (mut p, segs) = rtt_measured(false);
    let c = p.conn.unwrap();
    let cwnd = p.e.info(c).unwrap().cwnd;
    let out = p.send(&ack_for(
        &p,
        segs[2].seq,
        &[(segs[3].seq, end_of(&segs[5]))],
    ));
    assert!(data(&out).iter().any(|s| s.seq == segs[2].seq), "fast rtx");
    assert!(p.e.info(c).unwrap().cwnd < cwnd);
    p.send(&ack_for(&p, end_of(&segs[5]), &[]));
    assert_eq!(p.e.info(c).unwrap().spurious_recoveries, 0);
    let dsack = ack_for(&p, end_of(&segs[5]), &[(segs[2].seq, end_of(&segs[2]))]);
    p.send(&dsack);
    let info = p.e.info(c).unwrap();
    assert_eq!(info.spurious_recoveries, 1);
    assert!(info.cwnd >= cwnd, "cwnd {} restored to {cwnd}", info.cwnd);
    // Reordering was seen and the window grew: three units SACKed above the next hole are
    // not retransmitted at once now.
    let out = p.send(&ack_for(
        &p,
        segs[6].seq,
        &[(segs[7].seq, end_of(&segs[9]))],
    ));
    assert!(data(&out).iter().all(|s| s.seq != segs[6].seq));
}

// RFC 2883 §4: a duplicate below RCV.NXT is reported in the first SACK block of the next
// ACK; a duplicate of out-of-order data too, followed by the block that holds it.
#[test]
fn dsack_reports_duplicates() {
    let mut p = RawPeer::new(test_config());
    p.handshake();
    let start = p.snd;
    p.send_data(b"first");
    p.snd = start;
    let out = p.send_data(b"first");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack, Some(start + 5));
    assert_eq!(out[0].sack, vec![(start, start + 5)]);
    // Out of order, then again.
    p.snd = start + 10;
    let out = p.send_data(b"ahead");
    assert_eq!(out[0].sack, vec![(start + 10, start + 15)]);
    p.snd = start + 10;
    let out = p.send_data(b"ahead");
    assert_eq!(
        out[0].sack,
        vec![(start + 10, start + 15), (start + 10, start + 15)]
    );
    // Reported once: the next ACK carries the plain SACK block only.
    p.snd = start + 5;
    let out = p.send_data(b"ab");
    assert_eq!(out[0].sack, vec![(start + 10, start + 15)]);
}

// RFC 3522 §3.2 with nothing retransmitted: the SACKs that showed a hole and the ACK that
// filled it arrive in one receive burst (the engine transmits after the burst): the
// recovery they began retransmitted nothing and is undone.
#[test]
fn recovery_without_retransmission_is_undone() {
    let (mut p, segs) = rtt_measured(true);
    let c = p.conn.unwrap();
    let cwnd = p.e.info(c).unwrap().cwnd;
    let now = p.now;
    let sacks = ack_for(&p, segs[2].seq, &[(segs[3].seq, end_of(&segs[5]))]);
    let filled = ack_for(&p, end_of(&segs[5]), &[]);
    for s in [&sacks, &filled] {
        p.e.handle_packet(now, &mut (), &s.emit()).unwrap();
    }
    let out = p.output();
    assert!(
        data(&out).iter().all(|s| s.seq != segs[2].seq),
        "nothing to retransmit"
    );
    let info = p.e.info(c).unwrap();
    assert_eq!((info.recoveries, info.spurious_recoveries), (1, 1));
    assert_eq!(info.retransmits, 0);
    assert!(info.cwnd >= cwnd, "cwnd {} restored to {cwnd}", info.cwnd);
}

// RFC 8985 §6.2 step 2 after a spurious timeout: the ACK of the original of the unit the
// timeout retransmitted (its TSecr older than the retransmission) is no RACK sample, even
// when it comes later than the minimum RTT after the retransmission; else every unit sent
// before the retransmission would count as lost at once, and the whole window would be
// sent again.
#[test]
fn ack_of_the_original_after_a_spurious_timeout_marks_nothing_lost() {
    let (mut p, segs) = rtt_measured(true);
    let c = p.conn.unwrap();
    let start = p.now;
    loop {
        let out = data(&p.advance(Duration::from_millis(1)));
        if out.iter().any(|s| s.seq == segs[2].seq) {
            break;
        }
        assert!(p.now - start < Duration::from_secs(2), "no RTO");
    }
    assert_eq!(p.e.info(c).unwrap().timeouts, 1);
    p.now = p.now + Duration::from_micros(200);
    let mut a = ack_for(&p, segs[4].seq, &[(segs[7].seq, end_of(&segs[7]))]);
    a.ts = Some((p.tsval.unwrap() + 1, segs[3].ts.unwrap().0));
    let out = p.send(&a);
    let info = p.e.info(c).unwrap();
    assert_eq!(info.spurious_timeouts, 1);
    let resent: Vec<u32> = data(&out).iter().map(|s| s.seq).collect();
    assert!(
        resent.iter().all(|q| segs[4..].iter().all(|s| s.seq != *q)),
        "nothing sent again: {resent:?}"
    );
    assert_eq!((info.retransmits, info.recoveries), (1, 0));
}

// RFC 8985 §7: the last unit of a flight is lost and nothing follows it to be SACKed. Two
// SRTTs (plus the delayed ACK: one unit outstanding) after the last ACK, the tail loss
// probe sends it again, long before the RTO (5 ms); its ACK (echoing the probe's TSval)
// shows the probe repaired a loss, and the congestion window responds.
#[test]
fn tail_loss_probe_repairs_a_lost_last_segment() {
    let mut p = RawPeer::new(test_config());
    let c = p.handshake();
    let mss = p.e.info(c).unwrap().effective_mss;
    p.e.ulp_mut(c).unwrap().write(&payload(mss * 3, 1));
    let segs = data(&p.output());
    assert_eq!(segs.len(), 3);
    p.now = p.now + Duration::from_micros(100);
    let mut a = ack_for(&p, segs[2].seq, &[]);
    a.ts = Some((p.tsval.unwrap() + 1, segs[1].ts.unwrap().0));
    assert!(data(&p.send(&a)).is_empty());
    let info = p.e.info(c).unwrap();
    let (cwnd, pto) = (
        info.cwnd,
        info.srtt.unwrap() * 2 + test_config().delayed_ack,
    );
    let start = p.now;
    let probe = loop {
        let out = data(&p.advance(Duration::from_micros(10)));
        if let Some(s) = out.first() {
            break s.clone();
        }
        assert!(
            p.now - start < Duration::from_millis(5),
            "no probe before the RTO"
        );
    };
    let waited = p.now - start;
    assert!(
        waited >= pto && waited < pto + Duration::from_micros(10),
        "{waited:?}"
    );
    assert_eq!((probe.seq, &probe.payload), (segs[2].seq, &segs[2].payload));
    let mut a = ack_for(&p, end_of(&segs[2]), &[]);
    a.ts = Some((p.tsval.unwrap() + 2, probe.ts.unwrap().0));
    p.send(&a);
    let info = p.e.info(c).unwrap();
    assert_eq!((info.timeouts, info.retransmits), (0, 1));
    assert_eq!(p.e.stats().loss_probes, 1);
    assert!(info.cwnd < cwnd, "congestion response to the repaired loss");
}

// RFC 8985 §7.3: with new data the window allows, the probe is a new segment (none sent
// again); an ACK echoing the original's TSval after a probe that sent the last unit again
// means nothing was lost: no congestion response.
#[test]
fn tail_loss_probe_sends_new_data_and_spares_the_window() {
    let mut p = RawPeer::new(test_config());
    let c = p.handshake();
    let mss = p.e.info(c).unwrap().effective_mss;
    p.e.ulp_mut(c).unwrap().write(&payload(mss * 3, 1));
    let segs = data(&p.output());
    p.now = p.now + Duration::from_micros(100);
    let mut a = ack_for(&p, segs[2].seq, &[]);
    a.ts = Some((p.tsval.unwrap() + 1, segs[1].ts.unwrap().0));
    p.send(&a);
    let cwnd = p.e.info(c).unwrap().cwnd;
    let probe = loop {
        let out = data(&p.advance(Duration::from_micros(50)));
        if let Some(s) = out.first() {
            break s.clone();
        }
    };
    assert_eq!(
        probe.seq, segs[2].seq,
        "nothing new to send: the last unit again"
    );
    let mut a = ack_for(&p, end_of(&segs[2]), &[]);
    a.ts = Some((p.tsval.unwrap() + 2, segs[2].ts.unwrap().0));
    p.send(&a);
    assert!(
        p.e.info(c).unwrap().cwnd >= cwnd,
        "the original arrived: no response"
    );
    // Now with more data than the congestion window lets out at once: the probe is new.
    p.e.ulp_mut(c).unwrap().write(&payload(mss * 64, 2));
    let flight = data(&p.output());
    let last = flight.last().unwrap().clone();
    let probe = loop {
        let out = data(&p.advance(Duration::from_micros(50)));
        if let Some(s) = out.first() {
            break s.clone();
        }
    };
    assert_eq!(probe.seq, end_of(&last), "a new segment");
    assert_eq!(p.e.info(c).unwrap().retransmits, 1);
    // Both probes counted, the one with new data not as a retransmission.
    let st = p.e.stats();
    assert_eq!((st.loss_probes, st.retransmits), (2, 1));
}

// Payloads sent from the engine's own buffers (`poll_transmit_gather`): over a lossy,
// reordering link the data arrives whole with good checksums, and every retransmission
// hands out the very buffer of the original (the same octets, summed once).
#[test]
fn gathered_payloads_are_retransmitted_from_the_same_buffer() {
    for (seed, min) in [(31, 1), (32, 1000)] {
        let link = LinkConfig {
            loss: 0.02,
            reorder: 0.02,
            ..LinkConfig::default()
        };
        let mut s = Sim::streams(seed, link, test_config(), test_config(), 1 << 20);
        s.gather = Some(min);
        let data = payload(2_000_000, seed);
        let (got, _) =
            bulk_transfer(&mut s, &data, 1 << 20, Duration::from_secs(60)).expect("done");
        assert!(got == data);
        assert!(s.link.stats().lost > 0);
        assert!(s.gathered.len() > 1000, "{} payloads", s.gathered.len());
        let (again, same) = s.regathered;
        assert!(again > 0, "retransmissions");
        assert_eq!(same, again, "a retransmission reuses the original buffer");
        if min > 1 {
            assert!(s.gathered.values().all(|p| p.1 >= min));
        }
    }
}

// RFC 2018 §4: "SACK options SHOULD be included in all ACKs which do not ACK the highest
// sequence number in the data receiver's queue". A receiver that is also sending
// full-sized segments has no room for the blocks beside their payload: they follow in a
// pure ACK, else a peer whose data has a hole learns of it only from its RTO (data-bearing
// segments are not duplicate ACKs, RFC 5681 §2). Seen against Linux in the impaired
// echo of testbed/tcp-interop.
#[test]
fn sack_blocks_a_full_sized_segment_has_no_room_for_follow_in_a_pure_ack() {
    let mut p = RawPeer::new(test_config());
    let c = p.handshake();
    let mss = p.e.info(c).unwrap().effective_mss;
    let start = p.snd;
    p.e.ulp_mut(c).unwrap().write(&payload(mss * 4, 3));
    // Out of order: ten octets missing in front.
    p.snd = start + 10;
    let out = p.send_data(b"ahead");
    let full = data(&out);
    assert!(!full.is_empty(), "the engine sends its data");
    assert!(full.iter().all(|s| s.payload.len() == mss), "{full:?}");
    assert!(full.iter().all(|s| s.ack == Some(start)));
    let acks: Vec<&Seg> = out.iter().filter(|s| s.payload.is_empty()).collect();
    assert!(
        acks.iter()
            .any(|s| s.sack == vec![(start + 10, start + 15)]),
        "a pure ACK carries the SACK block: {out:?}"
    );
    // Once the hole is filled there is nothing to report: no extra pure ACKs.
    p.snd = start;
    let out = p.send_data(b"0123456789");
    assert!(out
        .iter()
        .filter(|s| s.payload.is_empty())
        .all(|s| s.sack.is_empty() && s.ack == Some(start + 15)));
}

// RFC 6298 §2-3: an RTT sample measures one round trip. Units SACKed at once above a lost
// one reach SND.UNA only when the hole is repaired, here after timeouts with backoff; they
// were delivered long before that ACK and give no sample. Taking one made the repair time
// (seconds) the SRTT, so every later loss on the connection waited an RTO of up to 60 s
// (1,000 in-process QPs sat 48-91 s on their last Writes, issue #17).
#[test]
fn units_sacked_before_a_repair_give_no_rtt_sample() {
    let (mut p, segs) = rtt_measured(false);
    let c = p.conn.unwrap();
    // segs[2] is lost; 100 µs later the peer SACKs everything above it.
    p.now = p.now + Duration::from_micros(100);
    let end = end_of(&segs[9]);
    p.send(&ack_for(&p, segs[2].seq, &[(segs[3].seq, end)]));
    // Its retransmissions are lost too, for a second and a half (RACK, then RTOs).
    let start = p.now;
    while p.now - start < Duration::from_millis(1500) {
        p.advance(Duration::from_millis(1));
    }
    assert!(p.e.info(c).unwrap().timeouts > 0);
    // The last retransmission arrives: everything is acknowledged.
    p.now = p.now + Duration::from_micros(100);
    p.send(&ack_for(&p, end, &[]));
    let info = p.e.info(c).unwrap();
    assert_eq!(info.snd_una, end);
    let srtt = info.srtt.expect("sampled");
    assert!(srtt < Duration::from_millis(1), "SRTT {srtt:?}: {info:?}");
    assert!(info.rto <= Duration::from_millis(5), "RTO {:?}", info.rto);
}
