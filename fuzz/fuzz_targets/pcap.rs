//! The capture reader the data plane's tools use on untrusted files (`dataplane::pcap`):
//! pcap and pcapng parsing, TCP segment extraction and stream reassembly of arbitrary
//! octets. Nothing panics; the reassembled streams stay consistent with their segments.
//!
//! Input: the capture file's octets.
#![no_main]

use dataplane::pcap;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(packets) = pcap::parse(data) else {
        return;
    };
    let mut payload = 0u64;
    for p in &packets {
        let _ = p.truncated();
        if let Some(s) = pcap::tcp_segment(p) {
            assert!(s.payload.len() <= p.data.len());
            payload += s.payload.len() as u64;
        }
    }
    for c in pcap::reassemble(&packets) {
        for d in &c.dirs {
            let _ = d.to_string();
            assert!(d.len() <= payload, "reassembled more than was captured");
            let mut seq = d.start_seq;
            for chunk in &d.chunks {
                assert_eq!(chunk.seq, seq, "chunks are contiguous");
                seq = seq.wrapping_add(chunk.data.len() as u32);
            }
        }
    }
});
