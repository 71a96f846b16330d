//! Fuzz-style property tests: nothing panics on network input.

mod common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use smoltcp::wire::TcpControl;

fn control(i: u8) -> TcpControl {
    match i % 5 {
        0 => TcpControl::None,
        1 => TcpControl::Psh,
        2 => TcpControl::Syn,
        3 => TcpControl::Fin,
        _ => TcpControl::Rst,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    // Arbitrary bytes as an IPv4 packet: a typed error or a processed segment, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1600)) {
        let mut p = RawPeer::new(test_config());
        p.handshake();
        let _ = p.e.handle_packet(p.now, &mut (), &bytes);
        p.output();
        let _ = p.e.handle_tcp(p.now, &mut (), A_IP, B_IP, &bytes);
        p.output();
        p.advance(Duration::from_secs(2));
    }

    // Well-formed (checksummed) segments with arbitrary flags, numbers, options and payload,
    // near and far from the connection's sequence space: never a panic, and the engine's
    // output always parses.
    #[test]
    fn arbitrary_segments_never_panic(
        segs in proptest::collection::vec(
            (any::<u8>(), -70_000i64..70_000, -70_000i64..70_000, any::<bool>(), any::<u16>(),
             proptest::option::of(any::<(u32, u32)>()),
             proptest::collection::vec((any::<u32>(), any::<u32>()), 0..3),
             proptest::collection::vec(any::<u8>(), 0..1500), any::<bool>(), 0u64..300),
            1..24)
    ) {
        let mut p = RawPeer::new(test_config());
        let c = p.handshake();
        p.e.ulp_mut(c).unwrap().write(&[9u8; 20_000]);
        p.output();
        for (ctl, dseq, dack, has_ack, window, ts, sack, data, near_port, wait_ms) in segs {
            let mut s = p.seg(control(ctl), &data);
            s.seq = (i64::from(p.snd) + dseq) as u32;
            s.ack = has_ack.then_some((i64::from(p.rcv) + dack) as u32);
            s.window = window;
            s.ts = ts;
            s.sack = sack;
            if !near_port {
                s.sport = s.sport.wrapping_add(1);
            }
            let _ = p.send(&s);
            p.advance(Duration::from_millis(wait_ms));
        }
        p.advance(Duration::from_secs(120));
    }
}
