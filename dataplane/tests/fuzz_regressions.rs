//! Inputs found by the coverage-guided fuzzers (testbed/fuzz), kept as regression tests.

use dataplane::pcap;

/// A classic pcap (Ethernet) holding IPv4/TCP frames from 10.0.0.1:1000 to 10.0.0.2:2000.
fn capture(frames: &[(u32, u8, &[u8])]) -> Vec<u8> {
    let mut v = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    v.extend_from_slice(&65535u32.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    for &(seq, flags, payload) in frames {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (40 + payload.len()) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&1000u16.to_be_bytes());
        f.extend_from_slice(&2000u16.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(payload);
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(&f);
    }
    v
}

fn assert_contiguous(d: &pcap::TcpStream) {
    let mut seq = d.start_seq;
    for c in &d.chunks {
        assert_eq!(c.seq, seq, "chunks are contiguous from start_seq");
        seq = seq.wrapping_add(c.data.len() as u32);
    }
}

#[test]
fn syn_after_data_starts_the_stream_over() {
    // fuzz target `pcap`: data seen before a SYN of the same addresses (a capture that
    // starts mid-stream, then the 4-tuple is reused) left the old chunks in front of the
    // new stream, so the chunks no longer followed `start_seq` (RFC 9293 §3.4: a new
    // connection has a new ISN).
    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    let bytes = capture(&[(1000, ACK, b"old"), (5000, SYN, b""), (5001, ACK, b"new")]);
    let packets = pcap::parse(&bytes).unwrap();
    let conns = pcap::reassemble(&packets);
    assert_eq!(conns.len(), 1);
    let d = &conns[0].dirs[0];
    assert!(d.syn_seen);
    assert_eq!(d.start_seq, 5001);
    assert_contiguous(d);
    let data: Vec<u8> = d.chunks.iter().flat_map(|c| c.data.clone()).collect();
    assert_eq!(data, b"new");
}

#[test]
fn retransmitted_syn_keeps_the_stream() {
    // fuzz target `pcap`, same invariant: a retransmitted SYN (same ISN) after data must not
    // restart the stream (RFC 9293 §3.10.7.3: a duplicate SYN carries no new data).
    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    let bytes = capture(&[
        (5000, SYN, b""),
        (5001, ACK, b"abc"),
        (5000, SYN, b""),
        (5004, ACK, b"def"),
    ]);
    let packets = pcap::parse(&bytes).unwrap();
    let d = &pcap::reassemble(&packets)[0].dirs[0];
    assert_contiguous(d);
    let data: Vec<u8> = d.chunks.iter().flat_map(|c| c.data.clone()).collect();
    assert_eq!(data, b"abcdef");
    assert!(d.hole.is_none());
}
