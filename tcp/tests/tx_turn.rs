//! The sender's turn around the source: a new unit's segment written from the unit in
//! hand before it is queued, and the source asked for a unit before it is asked whether it
//! holds data.

mod common;

use common::*;
use smoltcp::wire::TcpControl;

/// A raw peer connected to an engine whose socket holds `data` to send; the peer offers
/// `wscale` and timestamps.
fn peer_with(data: &[u8], wscale: Option<u8>) -> (RawPeer, tcp::ConnId) {
    let mut p = RawPeer::new(test_config());
    let conn = p.handshake_with(wscale, true, true, 1 << 20);
    assert_eq!(p.e.ulp_mut(conn).unwrap().write(data), data.len());
    (p, conn)
}

// RFC 9293 §3.10 (SEND: the data goes out in segments) and RFC 7323 §3 (the Timestamps
// option on every segment): a new unit's first segment, written from the unit before it
// is queued, carries the octets of the path that queues it first and writes it from the
// send queue (the engine takes that path when a port gathers payloads): headers,
// sequence and acknowledgment numbers, window, timestamps and both checksums.
#[test]
fn a_new_units_segment_is_the_queued_units_segment() {
    let data = payload(40_000, 11);
    let (mut copied, _) = peer_with(&data, Some(7));
    let (mut gathered, _) = peer_with(&data, Some(7));
    let now = copied.now;
    assert_eq!(now, gathered.now);
    let (mut a, mut b) = (vec![0u8; 1600], vec![0u8; 1600]);
    let mut segments = 0;
    let mut octets = 0;
    loop {
        let x = copied.e.poll_transmit(now, &mut (), &mut a);
        let y = gathered.e.poll_transmit_gather(now, &mut (), &mut b, 1);
        let (x, y) = match (x, y) {
            (None, None) => break,
            (Some(x), Some(y)) => (x, y),
            (x, y) => panic!("one path sent, the other not: {x:?} / {y:?}"),
        };
        let mut packet = b[..y.packet.len].to_vec();
        let payload = y.payload.expect("a data segment's payload is gathered");
        packet.extend_from_slice(payload.payload());
        assert_eq!(&a[..x.len], &packet[..], "segment {segments}");
        let seg = Seg::parse(&a[..x.len]).expect("a valid segment");
        assert!(seg.ts.is_some(), "RFC 7323 §3: timestamps on every segment");
        assert_eq!(seg.payload, data[octets..octets + seg.payload.len()]);
        octets += seg.payload.len();
        segments += 1;
    }
    assert!(segments >= 10, "the initial window's segments: {segments}");
}

// RFC 9293 §3.8.6.2.1 (sender SWS avoidance) and §3.10 (what the window allows): with the
// source asked for units first, a window that closes within a run stops it at the last
// whole unit that fits, the rest held (no unit split, no persist probe while data is in
// flight), and the window reopened by the peer's ACK resumes the run at the next octet.
#[test]
fn a_window_closing_within_a_run_stops_it_at_the_right_octet() {
    let data = payload(20_000, 5);
    let mut p = RawPeer::new(test_config());
    let conn = p.handshake_with(None, true, true, 1 << 20);
    let start = p.rcv;
    let mut ack = p.seg(TcpControl::None, &[]);
    ack.window = 5_000;
    assert!(p.send(&ack).is_empty(), "nothing to send yet");
    assert_eq!(p.e.ulp_mut(conn).unwrap().write(&data), data.len());
    let mss = p.e.info(conn).unwrap().effective_mss;
    let first = p.output();
    let sent: usize = first.iter().map(|s| s.payload.len()).sum();
    assert_eq!(sent, 5_000 / mss * mss, "whole units up to the window");
    let mut at = start;
    for s in &first {
        assert_eq!(s.seq, at);
        assert_eq!(s.payload, data[(at - start) as usize..][..s.payload.len()]);
        at = at.wrapping_add(s.payload.len() as u32);
    }
    assert!(p.output().is_empty(), "the rest waits for the window");
    // The peer acknowledges it all and offers the same window again.
    p.rcv = at;
    let mut ack = p.seg(TcpControl::None, &[]);
    ack.window = 5_000;
    let second = p.send(&ack);
    let resent: usize = second.iter().map(|s| s.payload.len()).sum();
    assert_eq!(resent, 5_000 / mss * mss);
    assert_eq!(second[0].seq, at, "the run resumes at the next octet");
    for s in &second {
        assert_eq!(s.seq, at);
        assert_eq!(s.payload, data[(at - start) as usize..][..s.payload.len()]);
        at = at.wrapping_add(s.payload.len() as u32);
    }
}

// RFC 7323 §3 (TSval from the clock, TSecr the last TS.Recent, on every segment) and RFC
// 9293 §3.10.7.4 (ACK and window from the receive state): a run of data segments at one
// instant shares its acknowledgment, window and timestamps, and what arrives between runs
// (the peer's data with a newer TSval, time passing) is in the next run's headers.
#[test]
fn a_runs_shared_header_follows_what_arrives_between_runs() {
    let data = payload(60_000, 3);
    let (mut p, _) = peer_with(&data, Some(7));
    let first = p.output();
    assert!(first.len() >= 5, "the initial window's run");
    let (ack, window, ts) = (first[0].ack, first[0].window, first[0].ts);
    assert_eq!(ack, Some(p.snd));
    for s in &first {
        assert_eq!((s.ack, s.window, s.ts), (ack, window, ts));
        assert!(!s.payload.is_empty());
    }
    // The peer acknowledges the run with data of its own and a newer TSval, a millisecond
    // later.
    p.now = p.now + std::time::Duration::from_millis(1);
    *p.tsval.as_mut().unwrap() += 5;
    p.rcv = first
        .last()
        .map(|s| s.seq.wrapping_add(s.payload.len() as u32))
        .unwrap();
    let second = p.send_data(&[9; 100]);
    let data_segs: Vec<&Seg> = second.iter().filter(|s| !s.payload.is_empty()).collect();
    assert!(!data_segs.is_empty(), "the ACK opens the window for more");
    let new_ts = data_segs[0].ts.unwrap();
    assert_eq!(new_ts.1, p.tsval.unwrap(), "TSecr: the peer's newer TSval");
    assert!(new_ts.0 > ts.unwrap().0, "TSval: a millisecond later");
    for s in &data_segs {
        assert_eq!(s.ack, Some(p.snd), "the peer's 100 octets acknowledged");
        assert_eq!(s.ts, Some(new_ts));
        assert_eq!(s.window, data_segs[0].window);
    }
}

/// The next payload `p`'s engine lends (with gathering on), sent to the peer's view: its
/// address and token; every other packet of the call is sent as is.
fn lend_next(p: &mut RawPeer) -> (usize, u64) {
    let mut buf = vec![0u8; 1600];
    let t =
        p.e.poll_transmit_gather(p.now, &mut (), &mut buf, 1)
            .expect("a data segment");
    let lent = t.payload.expect("its payload lent");
    let out = (lent.payload().as_ptr() as usize, lent.token());
    assert!(p
        .e
        .poll_transmit_gather(p.now, &mut (), &mut buf, 1)
        .is_none());
    out
}

// A lent payload's buffer is reused only once the peer acknowledged its unit (RFC 9293
// §3.10.7.4: SND.UNA passed it) and the frame holding it let go: acknowledged while held, it
// is not given back to the source for new data; its token handed back, it is.
#[test]
fn a_lent_buffer_is_reused_only_once_acknowledged_and_handed_back() {
    let mut p = RawPeer::new(test_config());
    let conn = p.handshake_with(None, true, true, 1 << 20);
    let start = p.rcv;
    let write = |p: &mut RawPeer, seed| {
        let data = payload(1000, seed);
        assert_eq!(p.e.ulp_mut(conn).unwrap().write(&data), data.len());
    };
    write(&mut p, 1);
    let (first, held) = lend_next(&mut p);
    // The peer acknowledges the unit; the frame still holds its buffer.
    p.rcv = start.wrapping_add(1000);
    let ack = p.seg(TcpControl::None, &[]);
    let _ = p.e.handle_packet(p.now, &mut (), &ack.emit());
    write(&mut p, 2);
    let (second, token) = lend_next(&mut p);
    p.e.payloads_returned(&mut (), [token]);
    write(&mut p, 3);
    let (third, token) = lend_next(&mut p);
    p.e.payloads_returned(&mut (), [token]);
    assert_ne!(second, first);
    assert_ne!(third, first, "a buffer a frame holds is not written again");
    // Every unit so far acknowledged: the buffers come back to the source, the held one
    // with its token.
    p.rcv = start.wrapping_add(3000);
    let ack = p.seg(TcpControl::None, &[]);
    let _ = p.e.handle_packet(p.now, &mut (), &ack.emit());
    p.e.payloads_returned(&mut (), [held]);
    let mut reused = Vec::new();
    for seed in 4..7 {
        write(&mut p, seed);
        let (at, token) = lend_next(&mut p);
        p.e.payloads_returned(&mut (), [token]);
        reused.push(at);
    }
    assert!(
        reused.contains(&first),
        "the held buffer, handed back, is reused"
    );
}
