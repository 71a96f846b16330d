//! The stream socket's receive path with checksums verified: payloads are copied into the
//! receive ring in the same pass as their checksum is summed, and committed only when the
//! checksum is good.

mod common;

use std::time::Duration;

use common::*;
use smoltcp::wire::TcpControl;
use tcp::PacketError;

fn peer(buf: usize) -> (RawPeer, tcp::ConnId) {
    let mut p = RawPeer::new(test_config());
    let conn = p.handshake_with(Some(7), true, true, buf);
    (p, conn)
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// The data segment at the peer's current sequence number with one bit flipped at `at`
/// (counted from the end of the packet, so inside the payload for small `at`).
fn corrupted(p: &RawPeer, payload: &[u8], from_end: usize) -> Vec<u8> {
    let mut pkt = p.seg(TcpControl::Psh, payload).emit();
    let at = pkt.len() - 1 - from_end;
    pkt[at] ^= 0x10;
    pkt
}

/// What a bad segment could have changed: the socket, the connection, the counters.
fn trace(p: &RawPeer, conn: tcp::ConnId) -> (usize, u64, u32, usize) {
    let s = p.e.ulp(conn).unwrap();
    let info = p.e.info(conn).unwrap();
    (
        s.readable(),
        s.received_total(),
        info.rcv_nxt,
        p.e.stats().segments_in as usize,
    )
}

// A segment whose payload (or header) was damaged is refused and leaves no trace: nothing
// readable, RCV.NXT unmoved, no ACK; the good copy sent after it is delivered as sent.
#[test]
fn a_bad_segment_leaves_no_trace() {
    let (mut p, conn) = peer(1 << 16);
    let first = data(1000, 1);
    p.send_data(&first);
    let before = trace(&p, conn);
    let malformed = p.e.stats().malformed;
    let second = data(1448, 2);
    // A flipped payload bit, then a flipped bit in the TCP header (the window field).
    for from_end in [0, 700, 1447, 1448 + 12 + 5] {
        let bad = corrupted(&p, &second, from_end);
        assert_eq!(
            p.e.handle_packet(p.now, &mut (), &bad),
            Err(PacketError::BadTcp)
        );
        assert!(p.output().is_empty(), "no ACK for a bad segment");
        assert_eq!(trace(&p, conn), before);
    }
    assert_eq!(p.e.stats().malformed, malformed + 4);
    p.send_data(&second);
    let mut got = vec![0u8; 4096];
    let n = p.e.ulp_mut(conn).unwrap().read(&mut got);
    assert_eq!(&got[..n], [&first[..], &second[..]].concat());
    assert_eq!(p.e.ulp(conn).unwrap().received_total(), 2448);
}

// A damaged header that no longer parses (data offset under five words, RFC 9293 §3.1) is
// refused like any damaged segment. Its checksum fails too, so it counts as a bad checksum,
// as a damaged payload does (the loops count such frames the same way); a header malformed
// under a correct checksum counts as malformed only.
#[test]
fn an_unparseable_header_counts_by_its_checksum() {
    let (mut p, conn) = peer(1 << 16);
    let before = trace(&p, conn);
    let (bad_sums, malformed) = (p.e.stats().bad_checksums, p.e.stats().malformed);
    let mut pkt = p.seg(TcpControl::Psh, &data(100, 3)).emit();
    let tcp_at = 20; // an IPv4 header without options
    pkt[tcp_at + 12] = 0x30 | (pkt[tcp_at + 12] & 0x0f);
    let refused = p.e.handle_packet(p.now, &mut (), &pkt);
    assert_eq!(refused, Err(PacketError::BadTcp));
    assert_eq!(p.e.stats().bad_checksums, bad_sums + 1);

    let addr = |at: usize| std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&pkt[at..at + 4]).unwrap());
    let (src, dst) = (addr(12), addr(16));
    pkt[tcp_at + 16..tcp_at + 18].fill(0);
    let sum = tcp::checksum::tcp_checksum(src, dst, &pkt[tcp_at..]);
    pkt[tcp_at + 16..tcp_at + 18].copy_from_slice(&sum.to_be_bytes());
    assert!(tcp::checksum::tcp_checksum_ok(src, dst, &pkt[tcp_at..]));
    let refused = p.e.handle_packet(p.now, &mut (), &pkt);
    assert_eq!(refused, Err(PacketError::BadTcp));
    assert_eq!(p.e.stats().bad_checksums, bad_sums + 1);
    assert_eq!(p.e.stats().malformed, malformed + 2);
    assert!(p.output().is_empty(), "no ACK for either");
    assert_eq!(trace(&p, conn), before);
}

// A ring that wraps: payloads that do not fit at its tail in one piece are verified in a
// pass of their own and copied in two pieces; bad ones still leave no trace, including a
// bad one staged at the tail before a good copy of the same octets that does not fit there.
#[test]
fn a_wrapping_ring_stays_exact() {
    let (mut p, conn) = peer(4096);
    let mut sent = Vec::new();
    let mut read = Vec::new();
    for round in 0..40u8 {
        let len = 300 + usize::from(round) * 37 % 1100;
        let payload = data(len, round);
        // A short bad copy of the next octets (fits at the tail), then the good one.
        let bad = corrupted(&p, &payload[..len.min(64)], 3);
        assert_eq!(
            p.e.handle_packet(p.now, &mut (), &bad),
            Err(PacketError::BadTcp)
        );
        let room = p.e.ulp(conn).unwrap().send_capacity();
        assert!(room > 0);
        let free = 4096 - p.e.ulp(conn).unwrap().readable();
        if len > free {
            // Make room: read some, in place.
            let s = p.e.ulp_mut(conn).unwrap();
            while s.readable() > 4096 - len {
                s.read_with(|b| {
                    read.extend_from_slice(b);
                    b.len()
                });
            }
        }
        p.send_data(&payload);
        sent.extend_from_slice(&payload);
        p.advance(Duration::from_millis(1));
    }
    let s = p.e.ulp_mut(conn).unwrap();
    read.extend_from_slice(&s.read_all());
    assert_eq!(read, sent);
}
