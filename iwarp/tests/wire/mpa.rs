//! MPA wire formats: encode → parse round trips and robustness against arbitrary input
//! (RFC 5044 §4.1, §5, §7.1; RFC 6581 §5).

use proptest::prelude::*;

use iwarp::mpa::crc::crc32c;
use iwarp::mpa::markers::strip;
use iwarp::mpa::{CrcErrorPolicy, Framer, MarkerSpacing, Receiver, ReceiverConfig};
use iwarp::wire::mpa::{
    fpdu_len, Fpdu, FpduRepr, Frame, FrameKind, FrameRepr, IrdOrd, Marker, ReservedBits, RtrTypes,
    MAX_PRIVATE_DATA_LEN,
};

fn rtr() -> impl Strategy<Value = RtrTypes> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(send, write, read)| RtrTypes {
        send,
        write,
        read,
    })
}

fn ird_ord() -> impl Strategy<Value = IrdOrd> {
    (0u16..=0x3fff, 0u16..=0x3fff, any::<bool>(), rtr()).prop_map(|(ird, ord, p2p, rtr)| IrdOrd {
        ird,
        ord,
        p2p,
        rtr,
    })
}

proptest! {
    #[test]
    fn request_reply_round_trip(
        reply in any::<bool>(),
        markers in any::<bool>(),
        crc in any::<bool>(),
        reject in any::<bool>(),
        rev2 in any::<bool>(),
        io in proptest::option::of(ird_ord()),
        pd in proptest::collection::vec(any::<u8>(), 0..=MAX_PRIVATE_DATA_LEN - 4),
    ) {
        let kind = if reply { FrameKind::Reply } else { FrameKind::Request };
        let revision = if rev2 { 2 } else { 1 };
        let repr = FrameRepr {
            kind,
            markers,
            crc,
            reject: reject && reply,
            revision,
            ird_ord: if rev2 { io } else { None },
            private_data: &pd,
        };
        let bytes = repr.to_vec().unwrap();
        prop_assert_eq!(bytes.len(), repr.buffer_len());
        let frame = Frame::new_checked(&bytes[..]).unwrap();
        let back = FrameRepr::parse(&frame, ReservedBits::Reject).unwrap();
        prop_assert_eq!(back, repr);
    }

    #[test]
    fn frame_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let frame = Frame::new_unchecked(&bytes[..]);
        let _ = FrameRepr::parse(&frame, ReservedBits::Reject);
        let _ = FrameRepr::parse(&frame, ReservedBits::Ignore);
        let _ = Frame::new_checked(&bytes[..]);
    }

    #[test]
    fn fpdu_round_trip(ulpdu in proptest::collection::vec(any::<u8>(), 0..2000), with_crc in any::<bool>()) {
        let repr = FpduRepr { ulpdu: &ulpdu, crc: 0 };
        let mut buf = vec![0xaau8; repr.buffer_len()];
        prop_assert_eq!(repr.emit(&mut buf, with_crc).unwrap(), fpdu_len(ulpdu.len()));
        prop_assert_eq!(buf.len() % 4, 0);
        let f = Fpdu::new_checked(&buf[..]).unwrap();
        let back = FpduRepr::parse(&f).unwrap();
        prop_assert_eq!(back.ulpdu, &ulpdu[..]);
        prop_assert!(f.pad().iter().all(|&b| b == 0));
        let expect = if with_crc { crc32c(f.crc_covered()) } else { 0 };
        prop_assert_eq!(back.crc, expect);
    }

    #[test]
    fn fpdu_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let f = Fpdu::new_unchecked(&bytes[..]);
        if f.check_len().is_ok() {
            let _ = (f.ulpdu(), f.pad(), f.crc());
        }
        let _ = Fpdu::new_checked(&bytes[..]).map(|f| FpduRepr::parse(&f).map(|r| r.ulpdu.len()));
    }

    #[test]
    fn marker_and_ird_ord_round_trip(ptr in any::<u16>(), io in ird_ord()) {
        prop_assert_eq!(Marker::parse(&Marker::new(ptr).to_bytes()).unwrap(), Marker::new(ptr));
        prop_assert_eq!(IrdOrd::parse(&io.to_bytes()).unwrap(), io);
    }

    #[test]
    fn marked_fpdu_strip_round_trip(
        start in any::<u32>(),
        at in 0u32..4096,
        ulpdu in proptest::collection::vec(any::<u8>(), 14..1500),
    ) {
        // RFC 5044 §5: markers inserted at start + 512k, FPDUPTR back to the FPDU start.
        let spacing = MarkerSpacing::new(start);
        let seq = start.wrapping_add(at * 4);
        let framer = Framer::new(true, Some(spacing));
        let mut out = Vec::new();
        let n = framer.emit_fpdu(seq, &[&ulpdu], &mut out).unwrap();
        prop_assert_eq!(n, framer.wire_len(seq, ulpdu.len()));
        let mut plain = Vec::new();
        let found = strip(spacing, seq, &out, &mut plain);
        prop_assert_eq!(plain.len(), fpdu_len(ulpdu.len()));
        prop_assert_eq!(&plain[2..2 + ulpdu.len()], &ulpdu[..]);
        for (mseq, m) in found {
            prop_assert!(spacing.is_marker_at(mseq));
            prop_assert_eq!(m.fpduptr as u32, mseq.wrapping_sub(seq));
        }
    }

    #[test]
    fn receiver_never_panics_on_garbage(
        crc in any::<bool>(),
        markers in any::<bool>(),
        chunks in proptest::collection::vec((any::<bool>(), 0u32..3000, proptest::collection::vec(any::<u8>(), 0..700)), 1..8),
    ) {
        let mut rx = Receiver::new(ReceiverConfig {
            crc,
            markers,
            start_seq: 0,
            min_ulpdu_len: 14,
            max_ulpdu_len: u16::MAX,
            crc_errors: CrcErrorPolicy::Fail,
        });
        for (in_order, seq, data) in chunks {
            let seq = if in_order { rx.next_seq() } else { seq };
            match rx.handle_segment(seq, &data, in_order, |d| assert!(d.ulpdu.len() >= 14)) {
                Ok(c) => prop_assert!(c.start <= c.end && c.end <= data.len()),
                Err(e) => {
                    let cause = e.terminate_cause();
                    prop_assert_eq!((cause.layer, cause.etype), (2, 0));
                }
            }
        }
    }
}
