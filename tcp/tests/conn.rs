//! Connection state machine tests (RFC 9293 §3.5-§3.10, RFC 5961, RFC 7323).

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use common::*;
use smoltcp::wire::TcpControl;
use tcp::{CloseReason, Config, ConnId, Event, Instant, State, StreamSocket};

fn sim() -> Sim<StreamSocket> {
    Sim::streams(
        11,
        LinkConfig::default(),
        test_config(),
        test_config(),
        1 << 16,
    )
}

// RFC 9293 §3.5 figure 6: three-way handshake, both ends ESTABLISHED, options negotiated.
#[test]
fn three_way_handshake() {
    let mut s = sim();
    let a =
        s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(1000, 1000))
            .unwrap();
    assert_eq!(s.a.state(a), Some(State::SynSent));
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| s.connected(Side::A, a)
        && !s.accepted(Side::B).is_empty()));
    let b = s.accepted(Side::B)[0];
    assert_eq!(s.a.state(a), Some(State::Established));
    assert_eq!(s.b.state(b), Some(State::Established));
    let info = s.a.info(a).unwrap();
    assert!(info.options.sack && info.options.timestamps);
    assert_eq!(info.options.snd_shift, 7);
    // RFC 6691: 1500 MTU - 40 = 1460, less 12 bytes of timestamps.
    assert_eq!(info.effective_mss, 1448);
    assert!(info.srtt.is_some(), "handshake RTT sampled");
    // Monitoring lists each side's one connection; the ids are the ones handed out.
    assert_eq!(s.a.connections().collect::<Vec<_>>(), [a]);
    assert_eq!(s.b.connections().collect::<Vec<_>>(), [b]);
    assert_eq!(
        s.b.connections().map(|id| id.index()).collect::<Vec<_>>(),
        [b.index()]
    );
}

// RFC 9293 §3.5 figure 8: simultaneous open; both sides reach ESTABLISHED and exchange data.
#[test]
fn simultaneous_open() {
    let mut s: Sim<StreamSocket> =
        Sim::new(12, LinkConfig::default(), test_config(), test_config());
    let pa = SocketAddrV4::new(A_IP, 1111);
    let pb = SocketAddrV4::new(B_IP, 2222);
    let a =
        s.a.connect(s.now, pa, pb, StreamSocket::new(4096, 4096))
            .unwrap();
    let b =
        s.b.connect(s.now, pb, pa, StreamSocket::new(4096, 4096))
            .unwrap();
    let limit = s.now + Duration::from_millis(50);
    assert!(s.run_until(limit, |s| s.connected(Side::A, a)
        && s.connected(Side::B, b)));
    s.a.ulp_mut(a).unwrap().write(b"hello from a");
    s.b.ulp_mut(b).unwrap().write(b"hello from b");
    let limit = s.now + Duration::from_millis(50);
    assert!(s.run_until(limit, |s| {
        s.a.ulp(a).unwrap().readable() == 12 && s.b.ulp(b).unwrap().readable() == 12
    }));
    assert_eq!(s.a.ulp_mut(a).unwrap().read_all(), b"hello from b");
    assert_eq!(s.b.ulp_mut(b).unwrap().read_all(), b"hello from a");
}

// RFC 9293 §3.10.7.1: a SYN to a closed port draws <SEQ=0><ACK=SEG.SEQ+1><CTL=RST,ACK>.
#[test]
fn syn_to_closed_port_gets_rst() {
    let mut e: tcp::Engine<StreamSocket> = tcp::Engine::new(test_config());
    let syn = Seg::new(a_addr(4000), b_addr(), TcpControl::Syn, 1000, None);
    e.handle_packet(Instant::ZERO, &mut (), &syn.emit())
        .unwrap();
    let out = drain(&mut e, Instant::ZERO);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].control, TcpControl::Rst);
    assert_eq!(out[0].seq, 0);
    assert_eq!(out[0].ack, Some(1001));
    // An ACK segment to a closed port draws <SEQ=SEG.ACK><CTL=RST>.
    let ack = Seg::new(a_addr(4000), b_addr(), TcpControl::None, 5, Some(777));
    e.handle_packet(Instant::ZERO, &mut (), &ack.emit())
        .unwrap();
    let out = drain(&mut e, Instant::ZERO);
    assert_eq!(
        (out[0].control, out[0].seq, out[0].ack),
        (TcpControl::Rst, 777, None)
    );
    // A RST to a closed port is dropped silently.
    let rst = Seg::new(a_addr(4000), b_addr(), TcpControl::Rst, 5, None);
    e.handle_packet(Instant::ZERO, &mut (), &rst.emit())
        .unwrap();
    assert!(drain(&mut e, Instant::ZERO).is_empty());
}

/// An engine that holds SYNs to a port without a listener for 250 ms.
fn holding_engine() -> tcp::Engine<StreamSocket> {
    tcp::Engine::new(Config {
        syn_hold: Duration::from_millis(250),
        ..test_config()
    })
}

/// When the engine's next timer is due, if it is due by `now`.
fn due_by(e: &mut tcp::Engine<StreamSocket>, now: Instant) -> bool {
    e.poll_timeout().is_some_and(|d| d <= now)
}

// Config::syn_hold: a SYN to a port nobody listens on yet is answered by the listener that
// appears within the hold (SYN-ACK acknowledging it), without a new SYN from the peer.
#[test]
fn a_held_syn_is_answered_by_a_listener_that_appears_in_time() {
    let mut e = holding_engine();
    let syn = Seg::new(a_addr(4000), b_addr(), TcpControl::Syn, 1000, None);
    e.handle_packet(Instant::ZERO, &mut (), &syn.emit())
        .unwrap();
    assert!(drain(&mut e, Instant::ZERO).is_empty(), "no RST while held");
    assert_eq!(e.stats().syns_held, 1);
    let t = Instant::from_millis(100);
    assert!(!due_by(&mut e, t));
    e.listen(b_addr(), 16).unwrap();
    assert!(
        due_by(&mut e, t),
        "the held SYN is due once its port listens"
    );
    e.handle_timeout(t);
    let out = drain(&mut e, t);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].control, TcpControl::Syn);
    assert_eq!(out[0].ack, Some(1001));
    assert_eq!(e.half_open(B_PORT), 1);
    assert_eq!(e.stats().resets_sent, 0);
}

// RFC 9293 §3.10.7.1 after the hold: without a listener the held SYN is refused
// (<SEQ=0><ACK=SEG.SEQ+1><CTL=RST,ACK>) when its time is up, and not before; a listener on
// another port or address does not take it.
#[test]
fn a_held_syn_is_refused_when_its_time_is_up() {
    let mut e = holding_engine();
    let syn = Seg::new(a_addr(4000), b_addr(), TcpControl::Syn, 1000, None);
    e.handle_packet(Instant::ZERO, &mut (), &syn.emit())
        .unwrap();
    e.listen(SocketAddrV4::new(Ipv4Addr::new(10, 9, 9, 9), B_PORT), 16)
        .unwrap();
    e.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, B_PORT + 1), 16)
        .unwrap();
    // The retransmitted SYN is held with the first, not twice.
    e.handle_packet(Instant::from_millis(200), &mut (), &syn.emit())
        .unwrap();
    assert_eq!(e.stats().syns_held, 2);
    // Due at once (its port got a listener) but not taken: held on until it expires.
    assert!(due_by(&mut e, Instant::from_millis(200)));
    e.handle_timeout(Instant::from_millis(200));
    assert!(drain(&mut e, Instant::from_millis(200)).is_empty());
    assert_eq!(e.poll_timeout(), Some(Instant::from_millis(250)));
    e.handle_timeout(Instant::from_millis(249));
    assert!(drain(&mut e, Instant::from_millis(249)).is_empty());
    e.handle_timeout(Instant::from_millis(250));
    let out = drain(&mut e, Instant::from_millis(250));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (out[0].control, out[0].seq, out[0].ack),
        (TcpControl::Rst, 0, Some(1001))
    );
    assert_eq!(e.poll_timeout(), None, "nothing held any more");
    assert_eq!(e.connection_count(), 0);
}

// Without Config::syn_hold (the default) nothing is held: the RST goes out at once.
#[test]
fn by_default_a_syn_to_a_closed_port_is_not_held() {
    assert_eq!(Config::default().syn_hold, Duration::ZERO);
    let mut e: tcp::Engine<StreamSocket> = tcp::Engine::new(test_config());
    let syn = Seg::new(a_addr(4000), b_addr(), TcpControl::Syn, 1000, None);
    e.handle_packet(Instant::ZERO, &mut (), &syn.emit())
        .unwrap();
    assert_eq!(drain(&mut e, Instant::ZERO)[0].control, TcpControl::Rst);
    assert_eq!(e.stats().syns_held, 0);
}

// RFC 9293 §3.10.7.3: RST in SYN-SENT acknowledging our SYN refuses the connection.
#[test]
fn rst_in_syn_sent_refuses() {
    let mut s: Sim<StreamSocket> =
        Sim::new(13, LinkConfig::default(), test_config(), test_config());
    let a =
        s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(100, 100))
            .unwrap();
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| s.closed_reason(Side::A, a).is_some()));
    assert_eq!(s.closed_reason(Side::A, a), Some(CloseReason::Refused));
    assert_eq!(s.a.connection_count(), 0);
}

/// A sim whose A side retries refused active opens for 200 ms (Config::refused_retry) and
/// whose B side listens on nothing yet (and refuses at once).
fn refused_retry_sim(seed: u64) -> Sim<StreamSocket> {
    let a = Config {
        refused_retry: Duration::from_millis(200),
        ..test_config()
    };
    Sim::new(seed, LinkConfig::default(), a, test_config())
}

// Config::refused_retry: the active opener sends its SYN again while its RSTs come within the
// retry time; the listener that comes up meanwhile takes the connection.
#[test]
fn a_refused_syn_is_sent_again_until_the_listener_is_up() {
    let mut s = refused_retry_sim(14);
    let a =
        s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(100, 100))
            .unwrap();
    let limit = s.now + Duration::from_millis(90);
    assert!(!s.run_until(limit, |s| s.closed_reason(Side::A, a).is_some()));
    assert_eq!(s.a.state(a), Some(State::SynSent));
    let refusals = s.b.stats().resets_sent;
    assert!(refusals >= 3, "{refusals} RSTs in 90 ms");
    s.b.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, B_PORT), 16)
        .unwrap();
    let limit = s.now + Duration::from_millis(50);
    assert!(s.run_until(limit, |s| s.connected(Side::A, a)));
    assert_eq!(s.b.stats().resets_sent, refusals);
}

// RFC 9293 §3.10.7.3 after the retry time: a refusal closes the open as Refused.
#[test]
fn a_refused_syn_gives_up_when_the_retry_time_is_over() {
    let mut s = refused_retry_sim(15);
    let start = s.now;
    let a =
        s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(100, 100))
            .unwrap();
    let limit = s.now + Duration::from_secs(1);
    assert!(s.run_until(limit, |s| s.closed_reason(Side::A, a).is_some()));
    assert_eq!(s.closed_reason(Side::A, a), Some(CloseReason::Refused));
    let took = s.now.saturating_since(start);
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_millis(300),
        "refused after {took:?}"
    );
    assert_eq!(s.a.connection_count(), 0);
}

// RFC 9293 §3.10.7.4: RST in SYN-RECEIVED of a passive open returns to LISTEN silently.
#[test]
fn rst_in_syn_received_returns_to_listen() {
    let mut p = RawPeer::new(test_config());
    let syn = Seg::new(p.me, b_addr(), TcpControl::Syn, p.snd, None);
    let out = p.send(&syn);
    assert_eq!(out[0].control, TcpControl::Syn);
    assert_eq!(p.e.half_open(B_PORT), 1);
    let rst = Seg::new(p.me, b_addr(), TcpControl::Rst, p.snd.wrapping_add(1), None);
    p.send(&rst);
    assert_eq!(p.e.connection_count(), 0);
    assert_eq!(p.e.half_open(B_PORT), 0);
    assert!(
        p.events.is_empty(),
        "no event for a never-accepted connection"
    );
    // The listener still works.
    p.snd = 9_000;
    p.handshake();
}

/// Bring a raw-peer connection into `state` (the engine side).
fn into_state(state: State) -> RawPeer {
    let mut p = RawPeer::new(test_config());
    let c = p.handshake();
    match state {
        State::Established => {}
        State::CloseWait | State::LastAck => {
            let fin = p.seg(TcpControl::Fin, &[]);
            p.snd += 1;
            p.send(&fin);
            if state == State::LastAck {
                p.e.close(c).unwrap();
                let out = p.output();
                assert_eq!(out[0].control, TcpControl::Fin);
            }
        }
        State::FinWait1 | State::FinWait2 | State::Closing | State::TimeWait => {
            p.e.close(c).unwrap();
            let out = p.output();
            assert_eq!(out[0].control, TcpControl::Fin);
            match state {
                State::FinWait2 | State::TimeWait => {
                    p.rcv += 1;
                    let ack = p.seg(TcpControl::None, &[]);
                    p.send(&ack);
                    if state == State::TimeWait {
                        let fin = p.seg(TcpControl::Fin, &[]);
                        p.snd += 1;
                        p.send(&fin);
                    }
                }
                State::Closing => {
                    // Our FIN does not acknowledge theirs.
                    let fin = p.seg(TcpControl::Fin, &[]);
                    p.snd += 1;
                    p.send(&fin);
                    p.rcv += 1;
                }
                _ => {}
            }
        }
        _ => unreachable!(),
    }
    let info_state = p.e.info(c).map(|i| i.state);
    if state == State::TimeWait {
        assert_eq!(
            info_state, None,
            "TIME-WAIT is invisible to the application"
        );
        assert_eq!(p.e.connection_count(), 1);
    } else {
        assert_eq!(info_state, Some(state));
    }
    p
}

// RFC 9293 §3.10.7.4 second check and RFC 5961 §3.2: an exact-sequence RST closes the
// connection in every synchronized state; the reported reason depends on the state.
#[test]
fn rst_in_each_synchronized_state() {
    for (state, reason) in [
        (State::Established, Some(CloseReason::Reset)),
        (State::CloseWait, Some(CloseReason::Reset)),
        (State::FinWait1, Some(CloseReason::Reset)),
        (State::FinWait2, Some(CloseReason::Reset)),
        (State::Closing, Some(CloseReason::Normal)),
        (State::LastAck, Some(CloseReason::Normal)),
        (State::TimeWait, Some(CloseReason::Normal)),
    ] {
        let mut p = into_state(state);
        let rst = p.seg(TcpControl::Rst, &[]);
        p.send(&rst);
        assert_eq!(p.e.connection_count(), 0, "{state:?}: RST removes the TCB");
        assert_eq!(p.closed_reason(), reason, "{state:?}");
    }
}

// RFC 5961 §3.2: an in-window RST that is not exactly RCV.NXT draws a challenge ACK and
// leaves the connection alone; an out-of-window RST is ignored.
#[test]
fn rst_challenge_ack() {
    let mut p = into_state(State::Established);
    let mut rst = p.seg(TcpControl::Rst, &[]);
    rst.seq = p.snd.wrapping_add(100);
    let out = p.send(&rst);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].control, TcpControl::None);
    assert_eq!(out[0].ack, Some(p.snd));
    assert_eq!(p.e.state(p.conn.unwrap()), Some(State::Established));
    rst.seq = p.snd.wrapping_add(50_000_000);
    p.send(&rst);
    assert_eq!(p.e.state(p.conn.unwrap()), Some(State::Established));
}

// RFC 5961 §4.2: a SYN in a synchronized state draws a challenge ACK.
#[test]
fn syn_in_established_gets_challenge_ack() {
    let mut p = into_state(State::Established);
    let mut syn = Seg::new(p.me, b_addr(), TcpControl::Syn, p.snd.wrapping_add(5), None);
    syn.ts = p.tsval.map(|v| (v, 0));
    let out = p.send(&syn);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].control, TcpControl::None);
    assert_eq!(out[0].ack, Some(p.snd));
    assert_eq!(p.e.state(p.conn.unwrap()), Some(State::Established));
}

// RFC 9293 §3.6 half-close: A closes its sending side, B keeps sending, A keeps receiving;
// then B closes and both report a normal close.
#[test]
fn half_close_both_directions() {
    let mut s = sim();
    let a =
        s.a.connect(
            s.now,
            a_addr(0),
            b_addr(),
            StreamSocket::new(1 << 16, 1 << 16),
        )
        .unwrap();
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| s.connected(Side::A, a)));
    s.a.ulp_mut(a).unwrap().write(b"request");
    s.a.close(a).unwrap();
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| {
        s.accepted(Side::B)
            .first()
            .is_some_and(|&b| s.peer_closed(Side::B, b))
            && s.a.state(a) == Some(State::FinWait2)
    }));
    let b = s.accepted(Side::B)[0];
    assert_eq!(s.b.state(b), Some(State::CloseWait));
    assert_eq!(s.a.state(a), Some(State::FinWait2));
    assert_eq!(s.b.ulp_mut(b).unwrap().read_all(), b"request");
    let reply = payload(50_000, 9);
    let mut off = 0;
    let mut got = Vec::new();
    let limit = s.now + Duration::from_millis(100);
    assert!(s.run_until(limit, |s| {
        if let Some(sock) = s.b.ulp_mut(b) {
            off += sock.write(&reply[off..]);
        }
        if let Some(sock) = s.a.ulp_mut(a) {
            got.extend(sock.read_all());
        }
        got.len() == reply.len()
    }));
    assert_eq!(got, reply);
    s.b.close(b).unwrap();
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| s.closed_reason(Side::B, b).is_some()
        && s.closed_reason(Side::A, a).is_some()));
    assert_eq!(s.closed_reason(Side::A, a), Some(CloseReason::Normal));
    assert_eq!(s.closed_reason(Side::B, b), Some(CloseReason::Normal));
    // B (passive closer) is gone at once; A (active closer) lingers in TIME-WAIT.
    assert_eq!(s.b.connection_count(), 0);
    assert_eq!(s.a.connection_count(), 1);
}

// RFC 9293 §3.4.2 / §3.10.7.4: TIME-WAIT lasts 2 MSL; a retransmitted FIN is re-ACKed and
// restarts the timer; then the TCB disappears.
#[test]
fn time_wait_expiry() {
    let cfg = Config {
        msl: Duration::from_millis(100),
        ..test_config()
    };
    let mut p = RawPeer::new(cfg);
    let c = p.handshake();
    p.e.close(c).unwrap();
    p.output();
    p.rcv += 1;
    let fin = p.seg(TcpControl::Fin, &[]);
    p.snd += 1;
    let out = p.send(&fin);
    assert_eq!(out.last().unwrap().ack, Some(p.snd));
    assert_eq!(p.e.connection_count(), 1);
    p.advance(Duration::from_millis(150));
    assert_eq!(p.e.connection_count(), 1);
    // Retransmitted FIN (the peer lost our ACK).
    let mut again = fin.clone();
    again.ts = p.tsval.map(|v| (v + 1, p.peer_tsval));
    let out = p.send(&again);
    assert_eq!(out.len(), 1, "FIN in TIME-WAIT is acknowledged");
    assert_eq!(out[0].ack, Some(p.snd));
    p.advance(Duration::from_millis(150));
    assert_eq!(p.e.connection_count(), 1, "timer restarted by the FIN");
    p.advance(Duration::from_millis(60));
    assert_eq!(p.e.connection_count(), 0);
}

// RFC 9293 §3.6.1 / RFC 6191: a new SYN with a higher sequence number (or newer timestamp)
// reopens a 4-tuple in TIME-WAIT; an old one does not.
#[test]
fn time_wait_reuse_by_new_syn() {
    let mut p = into_state(State::TimeWait);
    let old = p.snd;
    let mut stale = Seg::new(
        p.me,
        b_addr(),
        TcpControl::Syn,
        old.wrapping_sub(1000),
        None,
    );
    stale.ts = Some((1, 0));
    let out = p.send(&stale);
    assert!(
        out.iter().all(|s| s.control != TcpControl::Syn),
        "old SYN: no new connection"
    );
    assert_eq!(p.e.connection_count(), 1);
    p.events.clear();
    p.snd = old.wrapping_add(100_000);
    p.tsval = p.tsval.map(|v| v + 100);
    p.handshake();
    assert_eq!(p.e.connection_count(), 1, "the TIME-WAIT TCB was replaced");
}

// RFC 7323 §5.3: PAWS drops a segment whose TSval is older than TS.Recent, and ACKs it.
#[test]
fn paws_rejects_old_timestamps() {
    let mut p = RawPeer::new(test_config());
    let c = p.handshake();
    p.tsval = Some(2_000);
    p.send_data(b"fresh");
    assert_eq!(p.e.ulp(c).unwrap().readable(), 5);
    p.tsval = Some(1_500);
    let out = p.send_data(b"stale");
    assert_eq!(
        p.e.ulp(c).unwrap().readable(),
        5,
        "old TSval: segment dropped"
    );
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].ack,
        Some(p.snd.wrapping_sub(5)),
        "ACK of what was accepted"
    );
    p.snd = p.snd.wrapping_sub(5);
    p.tsval = Some(2_001);
    p.send_data(b"again");
    assert_eq!(p.e.ulp_mut(c).unwrap().read_all(), b"freshagain");
}

// RFC 7323 §5.5: TS.Recent is not enforced after an idle time the peer's clock may have
// wrapped in. At 1 µs a tick 2^31 ticks are 35.8 minutes, so after 31 minutes a TSval
// "older" than TS.Recent is accepted; before that, PAWS still drops it.
#[test]
fn paws_forgets_ts_recent_after_long_idleness() {
    let mut p = RawPeer::new(test_config());
    let c = p.handshake();
    p.tsval = Some(2_000_000_000);
    p.send_data(b"fresh");
    p.now = p.now + Duration::from_secs(20 * 60);
    p.tsval = Some(1_000);
    p.send_data(b"early");
    assert_eq!(p.e.ulp(c).unwrap().readable(), 5, "20 min idle: PAWS drops");
    p.snd = p.snd.wrapping_sub(5);
    p.now = p.now + Duration::from_secs(11 * 60);
    p.send_data(b"later");
    assert_eq!(p.e.ulp_mut(c).unwrap().read_all(), b"freshlater");
}

// RFC 7323 §5.4 leaves the clock rate open: ours ticks in microseconds, so two segments
// sent 10 µs apart carry TSvals 10 apart.
#[test]
fn timestamps_tick_in_microseconds() {
    let mut p = RawPeer::new(test_config());
    p.handshake();
    // Two segments: at least one ACK goes out at once (RFC 5681 §4.2).
    let acks = |p: &mut RawPeer| {
        let mut out = p.send_data(b"one");
        out.extend(p.send_data(b"two"));
        out.pop().expect("an ACK")
    };
    let a = acks(&mut p);
    p.now = p.now + Duration::from_micros(10);
    let b = acks(&mut p);
    let (ta, tb) = (a.ts.unwrap().0, b.ts.unwrap().0);
    assert_eq!(tb.wrapping_sub(ta), 10);
}

// RFC 7323 §1.3/§2.2: window scale in the SYN-ACK only when the SYN had it; SYN windows are
// never scaled, later windows are.
#[test]
fn window_scale_negotiation() {
    let mut p = RawPeer::new(test_config());
    let mut syn = Seg::new(p.me, b_addr(), TcpControl::Syn, 100, None);
    syn.wscale = None;
    let out = p.send(&syn);
    assert_eq!(out[0].wscale, None);
    let mut p = RawPeer::new(test_config());
    let c = p.handshake_with(Some(3), false, false, 1 << 20);
    let info = p.e.info(c).unwrap();
    assert_eq!((info.options.snd_shift, info.options.rcv_shift), (3, 7));
    // Peer's window field 1000 means 8000 bytes.
    let mut ack = p.seg(TcpControl::None, &[]);
    ack.window = 1000;
    p.send(&ack);
    assert_eq!(p.e.info(c).unwrap().snd_wnd, 8000);
    // Our advertised window is scaled by 2^7: 1 MiB socket buffer -> field 8192.
    let out = p.send_data(&[1; 10]);
    let _ = out;
    let out = p.advance(Duration::from_millis(5));
    let w = out.last().expect("delayed ACK").window;
    assert!((8100..=8192).contains(&w), "window field {w}");
}

// RFC 9293 §3.10.7.4: data beyond the right window edge is trimmed; a zero window accepts
// nothing and is answered with an ACK.
#[test]
fn receive_window_enforced() {
    let cfg = Config {
        max_rx_window: 1000,
        ..test_config()
    };
    let mut p = RawPeer::new(cfg);
    let c = p.handshake_with(None, false, false, 1000);
    let out = p.send_data(&[7; 1500]);
    let _ = out;
    assert_eq!(
        p.e.ulp(c).unwrap().readable(),
        1000,
        "trimmed to the 1000-byte window"
    );
}

// Connection table: 4-tuples are looked up by hash; many connections coexist.
#[test]
fn many_connections_hashed_lookup() {
    let mut s = sim();
    let conns: Vec<_> = (0..200)
        .map(|i| {
            s.a.connect(
                s.now,
                a_addr(20_000 + i),
                b_addr(),
                StreamSocket::new(1000, 1000),
            )
            .unwrap()
        })
        .collect();
    let limit = s.now + Duration::from_millis(50);
    assert!(s.run_until(limit, |s| conns.iter().all(|&c| s.connected(Side::A, c))));
    assert_eq!(s.b.connection_count(), 200);
    for (i, &c) in conns.iter().enumerate() {
        s.a.ulp_mut(c)
            .unwrap()
            .write(format!("conn {i}").as_bytes());
    }
    let limit = s.now + Duration::from_millis(50);
    let mut seen = std::collections::HashMap::new();
    assert!(s.run_until(limit, |s| {
        for b in s.accepted(Side::B) {
            let t = s.b.tuple(b).unwrap();
            if let Some(sock) = s.b.ulp_mut(b) {
                seen.entry(t.remote.port())
                    .or_insert_with(Vec::new)
                    .extend(sock.read_all());
            }
        }
        seen.values().map(|v| v.len()).sum::<usize>()
            >= (0..200).map(|i| format!("conn {i}").len()).sum()
    }));
    for i in 0..200u16 {
        assert_eq!(seen[&(20_000 + i)], format!("conn {i}").as_bytes());
    }
}

// SYN flood: 10 000 SYNs from distinct sources; half-open connections stay within the
// backlog (memory bounded), the SYNs beyond it answered with SYN cookies that keep nothing
// (RFC 4987 §3.6), or dropped with cookies off; SYN-ACK retries expire the half-open ones
// (RFC 9293 §3.10.7.2, RFC 4987 §3.2), and the listener then accepts a genuine client.
#[test]
fn syn_flood_bounded_by_backlog() {
    for cookies in [true, false] {
        syn_flood(cookies);
    }
}

fn syn_flood(syn_cookies: bool) {
    let cfg = Config {
        synack_retries: 2,
        syn_cookies,
        ..test_config()
    };
    let mut e: tcp::Engine<StreamSocket> = tcp::Engine::new(cfg);
    e.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, B_PORT), 64)
        .unwrap();
    let mut now = Instant::from_millis(1);
    let mut syn_acks = 0;
    for i in 0..10_000u32 {
        let src = SocketAddrV4::new(
            Ipv4Addr::new(192, 168, (i >> 8) as u8, i as u8),
            1024 + (i % 50_000) as u16,
        );
        let syn = Seg::new(src, b_addr(), TcpControl::Syn, i.wrapping_mul(7919), None);
        e.handle_packet(now, &mut (), &syn.emit()).unwrap();
        syn_acks += drain(&mut e, now)
            .iter()
            .filter(|s| s.control == TcpControl::Syn && s.ack.is_some())
            .count();
        assert!(e.connection_count() <= 64);
    }
    assert_eq!(e.half_open(B_PORT), 64);
    let st = e.stats();
    if syn_cookies {
        assert_eq!(
            (st.syn_cookies_sent, st.syn_backlog_drops),
            (10_000 - 64, 0)
        );
        assert_eq!(syn_acks, 10_000, "every SYN answered");
    } else {
        assert_eq!(
            (st.syn_cookies_sent, st.syn_backlog_drops),
            (0, 10_000 - 64)
        );
        assert_eq!(syn_acks, 64);
    }
    while let Some(t) = e.poll_timeout() {
        now = t;
        e.handle_timeout(now);
        drain(&mut e, now);
    }
    assert_eq!(e.connection_count(), 0, "half-open connections expire");
    assert_eq!(e.half_open(B_PORT), 0);
    let mut p = RawPeer::new(test_config());
    p.e = e;
    p.now = now;
    p.handshake();
}

// RFC 4987 §3.6: a listener whose backlog (1) is full answers further SYNs with SYN cookies;
// each ACK returning one makes the connection, with the MSS, window scale and SACK the SYN
// offered (carried by the cookie and the timestamp echo), and data flows both ways at once,
// where a dropped SYN would have waited for its retransmission (1 s).
#[test]
fn syn_cookies_make_the_connections_a_full_backlog_cannot_hold() {
    let mut s = Sim::new(12, LinkConfig::default(), test_config(), test_config());
    s.b.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, B_PORT), 1)
        .unwrap();
    s.accept[1] = Some(Box::new(|| StreamSocket::new(1 << 16, 1 << 16)));
    let conns: Vec<ConnId> = (0..4)
        .map(|i| {
            s.a.connect(
                s.now,
                a_addr(30_000 + i),
                b_addr(),
                StreamSocket::new(1 << 16, 1 << 16),
            )
            .unwrap()
        })
        .collect();
    let limit = s.now + Duration::from_millis(100);
    assert!(
        s.run_until(limit, |s| conns.iter().all(|&c| s.connected(Side::A, c))
            && s.accepted(Side::B).len() == 4)
    );
    let st = s.b.stats();
    assert!(st.syn_cookies_sent >= 3, "{st:?}");
    assert_eq!(st.syn_cookies_accepted, st.syn_cookies_sent);
    assert_eq!(st.syn_backlog_drops, 0);
    for &b in &s.accepted(Side::B) {
        let o = s.b.info(b).unwrap().options;
        assert!(o.sack && o.timestamps, "{o:?}");
        assert_eq!((o.snd_shift, o.peer_mss), (7, 1460));
    }
    for (i, &c) in conns.iter().enumerate() {
        s.a.ulp_mut(c).unwrap().write(&payload(3000, i as u64));
    }
    let limit = s.now + Duration::from_millis(100);
    let mut got = std::collections::HashMap::new();
    assert!(s.run_until(limit, |s| {
        for b in s.accepted(Side::B) {
            let port = s.b.tuple(b).unwrap().remote.port();
            let sock = s.b.ulp_mut(b).unwrap();
            got.entry(port)
                .or_insert_with(Vec::new)
                .extend(sock.read_all());
        }
        got.values().map(Vec::len).sum::<usize>() == 4 * 3000
    }));
    for i in 0..4u16 {
        assert_eq!(got[&(30_000 + i)], payload(3000, u64::from(i)));
    }
    for b in s.accepted(Side::B) {
        s.b.ulp_mut(b).unwrap().write(b"answer");
    }
    let limit = s.now + Duration::from_millis(100);
    assert!(s.run_until(limit, |s| conns.iter().all(|&c| s
        .a
        .ulp_mut(c)
        .unwrap()
        .readable()
        == 6)));
}

// RFC 4987 §3.6: an ACK to a listener that returns no cookie of ours (a wrong number, or one
// of an expired slot) makes nothing and is answered with a reset (RFC 9293 §3.10.7.2).
#[test]
fn an_ack_without_a_good_cookie_makes_no_connection() {
    let mut e: tcp::Engine<StreamSocket> = tcp::Engine::new(test_config());
    e.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, B_PORT), 1)
        .unwrap();
    let now = Instant::from_millis(1);
    let first = Seg::new(a_addr(40_000), b_addr(), TcpControl::Syn, 100, None);
    e.handle_packet(now, &mut (), &first.emit()).unwrap();
    drain(&mut e, now);
    let syn = Seg::new(a_addr(40_001), b_addr(), TcpControl::Syn, 500, None);
    e.handle_packet(now, &mut (), &syn.emit()).unwrap();
    let answer = drain(&mut e, now);
    let cookie = answer
        .iter()
        .find(|s| s.control == TcpControl::Syn)
        .expect("a SYN-ACK")
        .seq;
    let ack = |at: Instant, ack: u32, e: &mut tcp::Engine<StreamSocket>| {
        let seg = Seg::new(a_addr(40_001), b_addr(), TcpControl::None, 501, Some(ack));
        e.handle_packet(at, &mut (), &seg.emit()).unwrap();
        drain(e, at)
    };
    // A wrong number, then the right one too late (two 64 s slots on).
    let out = ack(now, cookie.wrapping_add(9), &mut e);
    assert!(out.iter().any(|s| s.control == TcpControl::Rst), "{out:?}");
    let late = now + Duration::from_secs(200);
    let out = ack(late, cookie.wrapping_add(1), &mut e);
    assert!(out.iter().any(|s| s.control == TcpControl::Rst), "{out:?}");
    assert_eq!(
        e.connection_count(),
        1,
        "the first SYN's half-open connection only"
    );
    assert_eq!(e.stats().syn_cookies_accepted, 0);
    // In time, the cookie makes the connection.
    let out = ack(now, cookie.wrapping_add(1), &mut e);
    assert!(out.iter().all(|s| s.control != TcpControl::Rst), "{out:?}");
    assert_eq!(e.connection_count(), 2);
    assert_eq!(e.stats().syn_cookies_accepted, 1);
}

/// Connects A (port 0) to B's listener and waits for B to accept; A's and B's connections.
fn connect_and_accept(s: &mut Sim<StreamSocket>) -> (ConnId, ConnId) {
    let a =
        s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(100, 100))
            .unwrap();
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| !s.accepted(Side::B).is_empty()));
    (a, s.accepted(Side::B)[0])
}

// RFC 9293 §3.10.4: close in SYN-SENT deletes the TCB; abort sends RST and the peer
// reports a reset.
#[test]
fn abort_sends_rst() {
    let mut s = sim();
    let (a, b) = connect_and_accept(&mut s);
    s.a.abort(a).unwrap();
    assert_eq!(s.a.state(a), None);
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| s.closed_reason(Side::B, b).is_some()));
    assert_eq!(s.closed_reason(Side::B, b), Some(CloseReason::Reset));
    assert!(matches!(
        s.events[0]
            .iter()
            .find(|e| matches!(e, Event::Closed { .. })),
        Some(Event::Closed {
            reason: CloseReason::Aborted,
            ulp: Some(_),
            ..
        })
    ));
}

// Stats::aborts_sent: the RST of an abort is counted in resets_sent and apart, in
// aborts_sent; the RST answering a segment to no connection (a SYN to a port nobody
// listens on) only in resets_sent.
#[test]
fn abort_resets_are_counted_apart_from_answers() {
    let mut s = sim();
    let (a, b) = connect_and_accept(&mut s);
    s.a.abort(a).unwrap();
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| s.closed_reason(Side::B, b).is_some()));
    assert_eq!((s.a.stats().resets_sent, s.a.stats().aborts_sent), (1, 1));
    assert_eq!((s.b.stats().resets_sent, s.b.stats().aborts_sent), (0, 0));

    let refused = SocketAddrV4::new(*b_addr().ip(), B_PORT + 1);
    let c =
        s.a.connect(s.now, a_addr(0), refused, StreamSocket::new(100, 100))
            .unwrap();
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| s.closed_reason(Side::A, c).is_some()));
    assert_eq!((s.b.stats().resets_sent, s.b.stats().aborts_sent), (1, 0));
    assert_eq!(s.a.stats().aborts_sent, 1);
}

// RFC 9293 §3.8.1 / RFC 6298 §5.5 (and RFC 6298 §5.7 for the SYN): a SYN that draws no
// answer is retransmitted with the same ISS on each backed-off timeout; every retransmission
// and timeout is counted, per connection and in the engine totals, which survive the
// connection's removal when it finally gives up.
#[test]
fn unanswered_syn_is_retransmitted_and_counted() {
    let cfg = Config {
        syn_retries: 3,
        ..test_config()
    };
    let mut e: tcp::Engine<StreamSocket> = tcp::Engine::new(cfg);
    let mut now = Instant::from_millis(1);
    let c = e
        .connect(now, a_addr(0), b_addr(), StreamSocket::new(100, 100))
        .unwrap();
    let first = drain(&mut e, now);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].control, TcpControl::Syn);
    let iss = first[0].seq;
    assert_eq!(e.info(c).unwrap().retransmits, 0);
    let mut syns = 0;
    for round in 1..=3u64 {
        now = e.poll_timeout().expect("SYN retransmission timer armed");
        e.handle_timeout(now);
        let out = drain(&mut e, now);
        assert_eq!(out.len(), 1, "one SYN per timeout");
        assert_eq!((out[0].control, out[0].seq), (TcpControl::Syn, iss));
        syns += 1;
        let info = e.info(c).unwrap();
        assert_eq!((info.retransmits, info.timeouts), (round, round));
        let stats = e.stats();
        assert_eq!((stats.retransmits, stats.timeouts), (round, round));
    }
    // The fourth timeout exceeds syn_retries: the connection is given up.
    now = e.poll_timeout().expect("last timer");
    e.handle_timeout(now);
    assert!(drain(&mut e, now).is_empty());
    let mut reason = None;
    while let Some(ev) = e.poll_event() {
        if let Event::Closed { reason: r, .. } = ev {
            reason = Some(r);
        }
    }
    assert_eq!(reason, Some(CloseReason::TimedOut));
    assert_eq!(e.connection_count(), 0);
    let stats = e.stats();
    assert_eq!(stats.retransmits, syns);
    assert_eq!(
        stats.timeouts,
        syns + 1,
        "the giving-up timeout is counted too"
    );
}

// RFC 9293 §3.10.7.2: a SYN-ACK that is never acknowledged is retransmitted on timeout, and
// again when the peer's SYN is retransmitted; both count as retransmissions, in the engine
// totals, also for a half-open connection no application ever saw.
#[test]
fn unanswered_syn_ack_is_retransmitted_and_counted() {
    let mut p = RawPeer::new(Config {
        synack_retries: 2,
        ..test_config()
    });
    let syn = Seg::new(p.me, b_addr(), TcpControl::Syn, p.snd, None);
    let out = p.send(&syn);
    assert_eq!(out[0].control, TcpControl::Syn);
    assert_eq!(p.e.stats().retransmits, 0);
    // The peer's SYN again: the SYN-ACK is repeated.
    let out = p.send(&syn);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].control, TcpControl::Syn);
    assert_eq!((p.e.stats().retransmits, p.e.stats().timeouts), (1, 0));
    let t = p.e.poll_timeout().expect("SYN-ACK timer");
    let out = p.advance(t.saturating_since(p.now));
    assert_eq!(out[0].control, TcpControl::Syn);
    assert_eq!((p.e.stats().retransmits, p.e.stats().timeouts), (2, 1));
    let t = p.e.poll_timeout().expect("SYN-ACK timer");
    let out = p.advance(t.saturating_since(p.now));
    assert_eq!(out[0].control, TcpControl::Syn);
    let t = p.e.poll_timeout().expect("SYN-ACK timer");
    assert!(p.advance(t.saturating_since(p.now)).is_empty());
    assert_eq!(p.e.connection_count(), 0);
    assert_eq!((p.e.stats().retransmits, p.e.stats().timeouts), (3, 3));
}

// RFC 9293 §3.10.7.3: in SYN-SENT an ACK that does not acknowledge our SYN (the peer still
// holds an old connection on the same four-tuple, e.g. in FIN-WAIT-1, and answers with a
// challenge ACK) draws <SEQ=SEG.ACK><CTL=RST>; the connection stays in SYN-SENT and the
// SYN is sent again at its timeout, then completes.
#[test]
fn stale_ack_in_syn_sent_draws_rst_then_syn_retransmission() {
    let mut e: tcp::Engine<StreamSocket> = tcp::Engine::new(test_config());
    let t0 = Instant::ZERO;
    let c = e
        .connect(t0, a_addr(49152), b_addr(), StreamSocket::new(100, 100))
        .unwrap();
    let syn = drain(&mut e, t0);
    assert_eq!(syn.len(), 1);
    assert_eq!(syn[0].control, TcpControl::Syn);
    let iss = syn[0].seq;
    let stale = Seg::new(
        b_addr(),
        a_addr(49152),
        TcpControl::None,
        77,
        Some(iss.wrapping_add(5000)),
    );
    e.handle_packet(t0, &mut (), &stale.emit()).unwrap();
    let out = drain(&mut e, t0);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (out[0].control, out[0].seq),
        (TcpControl::Rst, iss.wrapping_add(5000))
    );
    assert_eq!(e.state(c), Some(State::SynSent));
    let at = e
        .poll_timeout()
        .expect("the SYN's retransmission timer runs");
    e.handle_timeout(at);
    let again = drain(&mut e, at);
    assert!(
        again
            .iter()
            .any(|s| s.control == TcpControl::Syn && s.seq == iss),
        "{again:?}"
    );
    let mut synack = Seg::new(
        b_addr(),
        a_addr(49152),
        TcpControl::Syn,
        9000,
        Some(iss.wrapping_add(1)),
    );
    synack.mss = Some(1460);
    e.handle_packet(at, &mut (), &synack.emit()).unwrap();
    assert_eq!(e.state(c), Some(State::Established));
}

// The connection table's bound (`Config::max_connections`): SYNs beyond it are dropped and
// counted apart from the backlog's; the connections in the table are unaffected, and once
// one is gone a new one is accepted.
#[test]
fn connection_table_full_drops_syns_and_counts() {
    let cfg = Config {
        max_connections: 3,
        ..test_config()
    };
    let mut e: tcp::Engine<StreamSocket> = tcp::Engine::new(cfg);
    e.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, B_PORT), 64)
        .unwrap();
    let now = Instant::from_millis(1);
    let syn_from = |port: u16| Seg::new(a_addr(port), b_addr(), TcpControl::Syn, 1000, None).emit();
    for port in 40_000..40_005 {
        e.handle_packet(now, &mut (), &syn_from(port)).unwrap();
        drain(&mut e, now);
    }
    assert_eq!(e.connection_count(), 3);
    let st = e.stats();
    assert_eq!((st.table_full_drops, st.syn_backlog_drops), (2, 0));
    assert_eq!(e.half_open(B_PORT), 3);
    // A reset frees a slot: the next SYN is accepted.
    let rst = Seg::new(a_addr(40_000), b_addr(), TcpControl::Rst, 1001, None).emit();
    e.handle_packet(now, &mut (), &rst).unwrap();
    assert_eq!(e.connection_count(), 2);
    e.handle_packet(now, &mut (), &syn_from(40_005)).unwrap();
    let out = drain(&mut e, now);
    assert!(out.iter().any(|s| s.control == TcpControl::Syn), "SYN-ACK");
    assert_eq!(e.stats().table_full_drops, 2);
}

// RSTs for segments to no connection wait for transmission up to `MAX_PENDING_RSTS`; more
// are dropped and counted (RFC 5961 §7: an engine under attack need not answer every one),
// and once sent, answering resumes.
#[test]
fn pending_resets_are_bounded_and_counted() {
    let mut e: tcp::Engine<StreamSocket> = tcp::Engine::new(test_config());
    let now = Instant::from_millis(1);
    let extra = 10;
    for i in 0..(tcp::MAX_PENDING_RSTS + extra) as u32 {
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 1, (i >> 8) as u8, i as u8), 5000);
        let ack = Seg::new(src, b_addr(), TcpControl::None, 1, Some(i)).emit();
        e.handle_packet(now, &mut (), &ack).unwrap();
    }
    let st = e.stats();
    assert_eq!(st.resets_dropped, extra as u64);
    let out = drain(&mut e, now);
    assert_eq!(out.len(), tcp::MAX_PENDING_RSTS);
    assert!(out.iter().all(|s| s.control == TcpControl::Rst));
    let ack = Seg::new(a_addr(5001), b_addr(), TcpControl::None, 1, Some(7)).emit();
    e.handle_packet(now, &mut (), &ack).unwrap();
    assert_eq!(drain(&mut e, now).len(), 1);
    assert_eq!(e.stats().resets_dropped, extra as u64);
}

// RFC 4987 §3.6: SYN cookies keep no connection state, but their SYN-ACKs wait for
// transmission, up to `MAX_PENDING_SYN_ACKS`: while the port's ring stays full (nothing
// drained here) the SYNs beyond that are dropped and counted, as a full qdisc drops Linux's;
// every queued SYN-ACK still goes out once transmission resumes, and new SYNs are answered
// again.
#[test]
fn pending_syn_cookies_are_bounded_and_counted() {
    let mut e: tcp::Engine<StreamSocket> = tcp::Engine::new(test_config());
    e.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, B_PORT), 4)
        .unwrap();
    let now = Instant::from_millis(1);
    let syn = |i: u32| {
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 2, (i >> 8) as u8, i as u8), 6000);
        Seg::new(src, b_addr(), TcpControl::Syn, i.wrapping_mul(7919), None).emit()
    };
    let extra = 10;
    let n = 4 + tcp::MAX_PENDING_SYN_ACKS + extra;
    for i in 0..n as u32 {
        e.handle_packet(now, &mut (), &syn(i)).unwrap();
    }
    let st = e.stats();
    assert_eq!(e.half_open(B_PORT), 4);
    assert_eq!(
        (st.syn_cookies_sent, st.syn_backlog_drops),
        (tcp::MAX_PENDING_SYN_ACKS as u64, extra as u64)
    );
    let out = drain(&mut e, now);
    let syn_acks = out
        .iter()
        .filter(|s| s.control == TcpControl::Syn && s.ack.is_some())
        .count();
    assert_eq!(
        syn_acks,
        4 + tcp::MAX_PENDING_SYN_ACKS,
        "every SYN kept or cookied answered"
    );
    e.handle_packet(now, &mut (), &syn(n as u32)).unwrap();
    assert_eq!(drain(&mut e, now).len(), 1, "answered again");
    assert_eq!(e.stats().syn_backlog_drops, extra as u64);
}

// The engine lists the connections whose ULP ran, each once, so a service on top visits
// those instead of every connection; idle connections are not listed.
#[test]
fn active_lists_only_connections_that_ran() {
    let mut s = sim();
    let conns: Vec<_> = (0..4)
        .map(|_| {
            s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(4096, 4096))
                .unwrap()
        })
        .collect();
    let limit = s.now + Duration::from_millis(10);
    assert!(
        s.run_until(limit, |s| conns.iter().all(|c| s.connected(Side::A, *c))
            && s.accepted(Side::B).len() == 4)
    );
    let mut active = Vec::new();
    s.a.take_active(&mut active);
    active.sort();
    assert_eq!(
        active, conns,
        "every connection ran during the handshake, listed once"
    );
    active.clear();
    s.a.take_active(&mut active);
    assert!(active.is_empty(), "taken lists are emptied");
    // Quiet: delayed ACKs and the like are over.
    let quiet = s.now + Duration::from_millis(500);
    s.run_until(quiet, |_| false);
    s.a.take_active(&mut active);
    active.clear();
    // Data on one connection: only it (and its peer on B) run.
    assert_eq!(s.a.ulp_mut(conns[2]).unwrap().write(b"hello"), 5);
    let mut b_active = Vec::new();
    s.b.take_active(&mut b_active);
    let limit = s.now + Duration::from_millis(10);
    let peer = s.accepted(Side::B);
    assert!(s.run_until(limit, |s| peer
        .iter()
        .any(|b| s.b.ulp(*b).is_some_and(|u| u.readable() == 5))));
    s.a.take_active(&mut active);
    assert_eq!(active, [conns[2]]);
    b_active.clear();
    s.b.take_active(&mut b_active);
    assert_eq!(b_active.len(), 1);
    assert_eq!(s.b.ulp(b_active[0]).map(|u| u.readable()), Some(5));
}

// With several connections ready, each sends up to TX_QUANTUM segments in a row before the
// next one's turn (cache locality, runs of one connection for the peer's ACKs), and the
// turns go round.
#[test]
fn ready_connections_take_turns_of_a_quantum() {
    let q = tcp::TX_QUANTUM as usize;
    // Two turns each and a part of a third, all within the initial window.
    let per = 2 * q + q / 2;
    let cfg = Config {
        initial_window: 2 * per,
        ..test_config()
    };
    let mut s = Sim::streams(11, LinkConfig::default(), cfg.clone(), cfg, 1 << 20);
    let conns: Vec<_> = (0..2)
        .map(|_| {
            s.a.connect(
                s.now,
                a_addr(0),
                b_addr(),
                StreamSocket::new(1 << 20, 1 << 20),
            )
            .unwrap()
        })
        .collect();
    let limit = s.now + Duration::from_millis(10);
    assert!(
        s.run_until(limit, |s| conns.iter().all(|c| s.connected(Side::A, *c))
            && s.accepted(Side::B).len() == 2)
    );
    let quiet = s.now + Duration::from_millis(500);
    s.run_until(quiet, |_| false);
    for c in &conns {
        assert_eq!(
            s.a.ulp_mut(*c).unwrap().write(&vec![7; per * 1448]),
            per * 1448
        );
    }
    let segs: Vec<_> = drain(&mut s.a, s.now)
        .into_iter()
        .filter(|g| !g.payload.is_empty())
        .collect();
    assert_eq!(segs.len(), 2 * per);
    let port = |i: usize| segs[i].sport;
    // Runs of a quantum, alternating, then the rest.
    for (i, g) in segs.iter().enumerate().take(4 * q) {
        assert_eq!(g.sport, port((i / q) % 2 * q), "segment {i}");
    }
    assert_ne!(port(0), port(q));
}

// An engine whose active list nobody takes does not grow with the connections it has had:
// closed ones leave the list in batches.
#[test]
fn active_list_stays_bounded_when_not_taken() {
    let mut s = sim();
    for _ in 0..300 {
        let c =
            s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(1024, 1024))
                .unwrap();
        let limit = s.now + Duration::from_millis(10);
        assert!(s.run_until(limit, |s| s.connected(Side::A, c)));
        s.a.abort(c).unwrap();
    }
    let mut active = Vec::new();
    s.a.take_active(&mut active);
    assert!(
        active.len() <= 2 * s.a.connection_count() + 64,
        "{} entries for {} connections",
        active.len(),
        s.a.connection_count()
    );
}

// The data plane asks where the next packet goes and can put that connection behind the
// others (its peer's MAC is unknown): the other connection's packet comes first.
#[test]
fn next_ready_connection_can_be_deferred() {
    let mut s = sim();
    let a =
        s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(4096, 4096))
            .unwrap();
    let b =
        s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(4096, 4096))
            .unwrap();
    assert_eq!(s.a.ready_len(), 2);
    assert_eq!(s.a.next_remote(), Some(std::net::IpAddr::V4(B_IP)));
    assert!(!s.a.rsts_pending());
    s.a.defer_next();
    let segs = drain(&mut s.a, s.now);
    let port = |c| s.a.tuple(c).unwrap().local.port();
    assert_eq!(
        segs.iter().map(|g| g.sport).collect::<Vec<_>>(),
        [port(b), port(a)],
        "the deferred SYN goes second"
    );
    assert_eq!(s.a.next_remote(), None);
}

// RFC 6056 §3.3.1: the search for an ephemeral port starts at a point the secret chooses, so
// that a new process (a new secret) does not begin with its predecessor's 4-tuple, which the
// peer may still hold in TIME-WAIT (RFC 6191). Within the configured range, and consecutive
// connections still take consecutive free ports.
#[test]
fn first_ephemeral_port_follows_the_secret() {
    let mut firsts = Vec::new();
    for k in 0u8..8 {
        let cfg = Config {
            isn_secret: [k; 16],
            ephemeral_ports: (40000, 40999),
            ..Config::default()
        };
        let start = cfg.ephemeral_start();
        assert!((40000..=40999).contains(&start));
        let mut e: tcp::Engine<StreamSocket> = tcp::Engine::new(cfg);
        let mut ports = Vec::new();
        for _ in 0..2 {
            let c = e
                .connect(
                    Instant::ZERO,
                    a_addr(0),
                    b_addr(),
                    StreamSocket::new(64, 64),
                )
                .unwrap();
            ports.push(e.tuple(c).unwrap().local.port());
        }
        assert_eq!(ports[0], start);
        assert_eq!(ports[1], if start == 40999 { 40000 } else { start + 1 });
        firsts.push(start);
    }
    firsts.sort_unstable();
    firsts.dedup();
    assert!(firsts.len() >= 7, "eight secrets, starts {firsts:?}");
}

// After its segment, a connection with nothing more to send leaves the ready list (the
// engine is not polled once more to find that out); one with more data stays on it until
// its last segment, and writing again brings it back.
#[test]
fn a_connection_with_nothing_more_to_send_leaves_the_ready_list() {
    let mut s = sim();
    let a =
        s.a.connect(s.now, a_addr(0), b_addr(), StreamSocket::new(8192, 8192))
            .unwrap();
    let limit = s.now + Duration::from_millis(10);
    assert!(s.run_until(limit, |s| s.connected(Side::A, a)
        && !s.accepted(Side::B).is_empty()));
    let mut buf = vec![0u8; 1500];
    assert_eq!(s.a.ulp_mut(a).unwrap().write(b"ping"), 4);
    assert_eq!(s.a.ready_len(), 1);
    assert!(s.a.poll_transmit(s.now, &mut (), &mut buf).is_some());
    assert_eq!(
        s.a.ready_len(),
        0,
        "nothing more to send: off the ready list"
    );
    assert!(s.a.poll_transmit(s.now, &mut (), &mut buf).is_none());
    assert_eq!(s.a.ulp_mut(a).unwrap().write(&[7; 3000]), 3000);
    assert!(s.a.poll_transmit(s.now, &mut (), &mut buf).is_some());
    assert_eq!(s.a.ready_len(), 1, "more data queued: still ready");
    let mut segments = 1;
    while s.a.poll_transmit(s.now, &mut (), &mut buf).is_some() {
        segments += 1;
    }
    assert!(segments >= 3, "3000 octets in {segments} segments");
    assert_eq!(s.a.ready_len(), 0);
}

// A connection's queued timer whose deadline moved later (an ACK restarted the RTO) comes
// due without anything due in the TCB: the connection is not run (not listed active, sends
// nothing), and the timer it has now still fires (the unacknowledged segment goes again).
#[test]
fn timer_whose_deadline_moved_later_does_not_run_the_connection() {
    let mut p = RawPeer::new(test_config());
    let conn = p.handshake_with(Some(7), true, false, 1 << 20);
    let mut active = Vec::new();
    p.e.take_active(&mut active);
    assert_eq!(p.e.ulp_mut(conn).unwrap().write(&[7u8; 2000]), 2000);
    let out = p.output();
    assert_eq!(out.len(), 2, "two segments of data");
    let queued = p.e.poll_timeout().expect("RTO armed");
    // Half way to it, the first segment is acknowledged: the RTO restarts from now.
    p.now = p.now + (queued - p.now) / 2;
    p.rcv = out[0].seq.wrapping_add(out[0].payload.len() as u32);
    if let Some(v) = p.tsval.as_mut() {
        *v += 1;
    }
    let ack = p.seg(TcpControl::None, &[]);
    assert!(p.send(&ack).is_empty());
    let moved = p.e.info(conn).map(|i| i.rto).expect("info");
    active.clear();
    p.e.take_active(&mut active);
    // The queued instant passes: nothing is due.
    p.now = queued;
    p.e.handle_timeout(p.now);
    active.clear();
    p.e.take_active(&mut active);
    assert!(active.is_empty(), "not run: {active:?}");
    assert!(p.output().is_empty());
    let next = p.e.poll_timeout().expect("RTO still armed");
    assert!(next > queued, "{next:?} after {queued:?}");
    assert!(next <= queued + moved);
    // At the RTO the second segment goes again.
    p.now = next;
    p.e.handle_timeout(p.now);
    let again = p.output();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].seq, out[1].seq);
    p.e.take_active(&mut active);
    assert_eq!(active, [conn]);
}

/// Records what a `Hash` impl hands its hasher.
#[derive(Default)]
struct Recorder {
    writes: Vec<Vec<u8>>,
}

impl std::hash::Hasher for Recorder {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.writes.push(bytes.to_vec());
    }
}

fn hashed(t: &tcp::FourTuple) -> Vec<Vec<u8>> {
    let mut r = Recorder::default();
    std::hash::Hash::hash(t, &mut r);
    r.writes
}

// The 4-tuple table's key (keyed SipHash, which pays per `write`): the whole tuple goes to
// the hasher in one write, and each address and port is in it (tuples that differ in any
// one of them write different octets; equal tuples the same).
#[test]
fn a_four_tuple_hashes_in_one_write_of_all_its_fields() {
    use std::net::{IpAddr, Ipv6Addr, SocketAddr};
    let sa = |ip: IpAddr, port| SocketAddr::new(ip, port);
    let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
    let base = tcp::FourTuple {
        local: sa(v4(10, 0, 0, 1), 4791),
        remote: sa(v4(10, 0, 0, 2), 50_000),
    };
    let v6 = tcp::FourTuple {
        local: sa(IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)), 4791),
        remote: sa(
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            50_000,
        ),
    };
    for t in [base, v6] {
        let w = hashed(&t);
        assert_eq!(w.len(), 1, "one write: {w:?}");
        assert_eq!(hashed(&t.clone()), w, "equal tuples write the same");
    }
    let variants = [
        tcp::FourTuple {
            local: sa(v4(10, 0, 0, 3), 4791),
            ..base
        },
        tcp::FourTuple {
            remote: sa(v4(10, 0, 0, 3), 50_000),
            ..base
        },
        tcp::FourTuple {
            local: sa(v4(10, 0, 0, 1), 4792),
            ..base
        },
        tcp::FourTuple {
            remote: sa(v4(10, 0, 0, 2), 50_001),
            ..base
        },
        // Local and remote swapped.
        tcp::FourTuple {
            local: base.remote,
            remote: base.local,
        },
    ];
    for v in variants {
        assert_ne!(hashed(&v), hashed(&base), "{v:?}");
    }
    let v6_port = tcp::FourTuple {
        remote: sa(v6.remote.ip(), 50_001),
        ..v6
    };
    assert_ne!(hashed(&v6_port), hashed(&v6));
}
