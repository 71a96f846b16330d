//! Wire round trips of every DDP / RDMAP / Terminate / atomic header (smoltcp-style views
//! and `Repr`s), and malformed-input handling.

use iwarp::wire::atomic::{
    masked_add, AtomicOp, AtomicRequest, AtomicRequestRepr, AtomicResponseRepr, ATOMIC_REQUEST_LEN,
};
use iwarp::wire::ddp::{DdpRepr, ParseError, Segment, TaggedRepr, UntaggedRepr};
use iwarp::wire::rdmap::{
    ImmediateDataRepr, Opcode, RdmapControl, ReadRequest, ReadRequestRepr, READ_REQUEST_LEN,
};
use iwarp::wire::terminate::{CopiedDdpHeader, Terminate, TerminateCause, TerminateRepr};
use proptest::prelude::*;

fn ddp_repr() -> impl Strategy<Value = DdpRepr> {
    prop_oneof![
        (any::<bool>(), any::<u8>(), any::<u32>(), any::<u64>()).prop_map(
            |(last, rsvd_ulp, stag, to)| DdpRepr::Tagged(TaggedRepr {
                last,
                rsvd_ulp,
                stag,
                to
            })
        ),
        (
            any::<bool>(),
            any::<u8>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(
                |(last, rsvd_ulp, w, qn, msn, mo)| DdpRepr::Untagged(UntaggedRepr {
                    last,
                    rsvd_ulp,
                    rsvd_ulp_word: w,
                    qn,
                    msn,
                    mo
                })
            ),
    ]
}

proptest! {
    // RFC 5041 §4.2, §4.3
    #[test]
    fn ddp_header_round_trip(repr in ddp_repr(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut buf = vec![0u8; repr.buffer_len() + payload.len()];
        let n = repr.emit(&mut buf).unwrap();
        prop_assert_eq!(n, repr.buffer_len());
        buf[n..].copy_from_slice(&payload);
        let seg = Segment::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(DdpRepr::parse(&seg).unwrap(), repr);
        prop_assert_eq!(seg.payload(), &payload[..]);
        // RFC 5041 §4.1: Rsvd bits 0, DV 01b.
        prop_assert_eq!(buf[0] & 0x3C, 0);
        prop_assert_eq!(buf[0] & 0x03, 1);
    }

    // RFC 5040 §4.4
    #[test]
    fn read_request_round_trip(a in any::<u32>(), b in any::<u64>(), c in any::<u32>(), d in any::<u32>(), e in any::<u64>()) {
        let r = ReadRequestRepr { sink_stag: a, sink_to: b, size: c, src_stag: d, src_to: e };
        let mut buf = [0u8; READ_REQUEST_LEN];
        prop_assert_eq!(r.emit(&mut buf).unwrap(), r.buffer_len());
        prop_assert_eq!(ReadRequestRepr::parse(&ReadRequest::new_checked(&buf[..]).unwrap()).unwrap(), r);
    }

    // EXT-01 §5.2.1
    #[test]
    fn atomic_request_round_trip(op in 0u8..3, id in any::<u32>(), stag in any::<u32>(), to in any::<u64>(),
                                 d1 in any::<u64>(), m1 in any::<u64>(), d2 in any::<u64>(), m2 in any::<u64>()) {
        let r = AtomicRequestRepr { op: AtomicOp::from_u4(op).unwrap(), request_id: id, stag, to,
            add_swap_data: d1, add_swap_mask: m1, compare_data: d2, compare_mask: m2 };
        let mut buf = [0u8; ATOMIC_REQUEST_LEN];
        prop_assert_eq!(r.emit(&mut buf).unwrap(), 52);
        prop_assert_eq!(AtomicRequestRepr::parse(&AtomicRequest::new_checked(&buf[..]).unwrap()).unwrap(), r);
    }

    // EXT-01 §5.2.2
    #[test]
    fn atomic_response_round_trip(id in any::<u32>(), v in any::<u64>()) {
        let r = AtomicResponseRepr { request_id: id, original: v };
        let mut buf = [0u8; 12];
        prop_assert_eq!(r.emit(&mut buf).unwrap(), r.buffer_len());
        prop_assert_eq!(AtomicResponseRepr::parse(&buf).unwrap(), r);
    }

    // EXT-01 §6.2
    #[test]
    fn immediate_round_trip(data in any::<[u8; 8]>()) {
        let r = ImmediateDataRepr { data };
        let mut buf = [0u8; 8];
        prop_assert_eq!(r.emit(&mut buf).unwrap(), r.buffer_len());
        prop_assert_eq!(ImmediateDataRepr::parse(&buf).unwrap(), r);
    }

    // RFC 5040 §4.8, Fig. 10
    #[test]
    fn terminate_round_trip(layer in 0u8..3, etype in 0u8..16, code in any::<u8>(), m in any::<bool>(),
                            hdr in prop::option::of(ddp_repr()), rdma in prop::option::of(any::<[u8; 28]>()),
                            seg_len in any::<u16>()) {
        let ddp_header = hdr.map(|h| {
            let mut b = [0u8; 18];
            h.emit(&mut b).unwrap();
            CopiedDdpHeader::from_segment(&b).unwrap()
        });
        let r = TerminateRepr {
            cause: TerminateCause::new(layer, etype, code),
            segment_len: if m { Some(seg_len) } else { None },
            ddp_header,
            rdma_header: rdma,
        };
        let mut buf = vec![0u8; r.buffer_len()];
        prop_assert_eq!(r.emit(&mut buf).unwrap(), r.buffer_len());
        let parsed = TerminateRepr::parse(&Terminate::new_checked(&buf[..]).unwrap()).unwrap();
        prop_assert_eq!(parsed, r);
        // reserved 13 bits are zero
        prop_assert_eq!(buf[2] & 0x1F, 0);
        prop_assert_eq!(buf[3], 0);
    }

    // RFC 5040 §4.1: every control octet round-trips; reserved bits ignored.
    #[test]
    fn rdmap_control_round_trip(op in 0u8..12, rsv in 0u8..4) {
        let opcode = Opcode::from_u4(op).unwrap();
        let octet = RdmapControl::new(opcode).to_octet();
        prop_assert_eq!(octet >> 6, 1);
        prop_assert_eq!(octet & 0x30, 0);
        prop_assert_eq!(RdmapControl::parse(octet | (rsv << 4), 1).unwrap().opcode, opcode);
    }

    // Views never panic on arbitrary bytes.
    #[test]
    fn views_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        if let Ok(s) = Segment::new_checked(&bytes[..]) {
            let _ = DdpRepr::parse(&s);
            let _ = s.payload();
        }
        if let Ok(t) = Terminate::new_checked(&bytes[..]) {
            let _ = TerminateRepr::parse(&t);
        }
        let _ = AtomicRequest::new_checked(&bytes[..]).map(|a| AtomicRequestRepr::parse(&a));
        let _ = AtomicResponseRepr::parse(&bytes);
        let _ = ImmediateDataRepr::parse(&bytes);
        let _ = CopiedDdpHeader::from_segment(&bytes);
    }

    // EXT-01 §5.1.1: mask 0 is an ordinary wrapping add.
    #[test]
    fn fetch_add_mask_zero_is_wrapping_add(a in any::<u64>(), b in any::<u64>()) {
        prop_assert_eq!(masked_add(a, b, 0), a.wrapping_add(b));
    }
}

#[test]
fn truncated_headers_are_errors() {
    // RFC 5041 §4.2/4.3: 14 / 18 octet headers.
    assert_eq!(
        Segment::new_checked(&[0x81u8; 13][..]).unwrap_err(),
        ParseError::Truncated
    );
    assert!(Segment::new_checked(&[0x81u8; 14][..]).is_ok());
    assert_eq!(
        Segment::new_checked(&[0x01u8; 17][..]).unwrap_err(),
        ParseError::Truncated
    );
    assert!(Segment::new_checked(&[][..]).is_err());
    // RFC 5040 §4.8: D=1 announces a DDP header that is missing.
    assert!(Terminate::new_checked(&[0x10u8, 0, 0x40, 0, 0, 14][..]).is_err());
    assert!(ReadRequest::new_checked(&[0u8; 27][..]).is_err());
}

#[test]
fn ddp_version_rejected_by_repr() {
    // RFC 5041 §4.1
    let mut b = [0u8; 14];
    DdpRepr::Tagged(TaggedRepr {
        last: true,
        rsvd_ulp: 0x40,
        stag: 1,
        to: 0,
    })
    .emit(&mut b)
    .unwrap();
    b[0] = (b[0] & !0x03) | 0x02;
    assert_eq!(
        DdpRepr::parse(&Segment::new_checked(&b[..]).unwrap()),
        Err(ParseError::DdpVersion(2))
    );
}

#[test]
fn opcode_table_matches_rfc5040_fig4() {
    // RFC 5040 Fig. 4, EXT-01 Fig. 2 (body-text QNs, SPEC-DIGEST D1)
    let table = [
        (0x0, Opcode::Write, true, None),
        (0x1, Opcode::ReadRequest, false, Some(1)),
        (0x2, Opcode::ReadResponse, true, None),
        (0x3, Opcode::Send, false, Some(0)),
        (0x4, Opcode::SendInvalidate, false, Some(0)),
        (0x5, Opcode::SendSe, false, Some(0)),
        (0x6, Opcode::SendSeInvalidate, false, Some(0)),
        (0x7, Opcode::Terminate, false, Some(2)),
        (0x8, Opcode::ImmediateData, false, Some(0)),
        (0x9, Opcode::ImmediateDataSe, false, Some(0)),
        (0xA, Opcode::AtomicRequest, false, Some(1)),
        (0xB, Opcode::AtomicResponse, false, Some(3)),
    ];
    for (v, op, tagged, qn) in table {
        assert_eq!(Opcode::from_u4(v), Some(op));
        assert_eq!(op.to_u4(), v);
        assert_eq!(op.is_tagged(), tagged);
        assert_eq!(op.queue(), qn);
    }
    for v in 0xC..=0xF {
        assert_eq!(Opcode::from_u4(v), None);
    }
}

#[test]
fn terminate_bare_has_no_optional_fields() {
    // SPEC-DIGEST D4: optional fields only with their bits.
    let r = TerminateRepr::bare(TerminateCause::RDMAP_LOCAL_CATASTROPHIC);
    let mut b = [0u8; 4];
    assert_eq!(r.emit(&mut b).unwrap(), 4);
    assert_eq!(b, [0, 0, 0, 0]);
    // Extra trailing zero octets are tolerated on receive (G08).
    let t =
        TerminateRepr::parse(&Terminate::new_checked(&[0x00u8, 0x42, 0, 0, 0, 0, 0][..]).unwrap())
            .unwrap();
    assert_eq!(t.cause, TerminateCause::new(0, 0, 0x42));
    assert_eq!(t.ddp_header, None);
}

#[test]
fn terminate_cause_llp_codes() {
    // MPA-FACTS §6 / RFC 5044 §8
    assert_eq!(TerminateCause::MPA_CRC_ERROR, TerminateCause::new(2, 0, 2));
    assert_eq!(
        TerminateCause::MPA_NO_MATCHING_RTR,
        TerminateCause::new(2, 0, 7)
    );
    assert_eq!(TerminateCause::DDP_MSN_RANGE.to_string(), "1/2/03");
}

#[test]
fn h01_atomic_request_layout() {
    // EXT-01 §5.2.1: AOpCode in the low nibble of header octet 3, upper 28 bits zero.
    let r = AtomicRequestRepr {
        op: AtomicOp::CmpSwap,
        request_id: 0x01020304,
        stag: 0x0A0B0C0D,
        to: 0x1122334455667788,
        add_swap_data: 1,
        add_swap_mask: 2,
        compare_data: 3,
        compare_mask: 4,
    };
    let mut b = [0xFFu8; 52];
    r.emit(&mut b).unwrap();
    assert_eq!(&b[0..4], &[0, 0, 0, 2]);
    assert_eq!(&b[4..8], &[1, 2, 3, 4]);
    assert_eq!(&b[8..12], &[0x0A, 0x0B, 0x0C, 0x0D]);
    assert_eq!(&b[12..20], &0x1122334455667788u64.to_be_bytes());
    assert_eq!(&b[44..52], &4u64.to_be_bytes());
    // Reserved AOpCode is rejected.
    b[3] = 0x03;
    assert_eq!(
        AtomicRequestRepr::parse(&AtomicRequest::new_checked(&b[..]).unwrap()),
        Err(ParseError::AtomicOpcode(3))
    );
}

#[test]
fn h02_fetch_add_carries() {
    // EXT-01 §5.1.1
    let r = AtomicRequestRepr::fetch_add(1, 1, 0, 1, 0);
    assert_eq!(r.apply(0x0000_0000_FFFF_FFFF), 0x0000_0001_0000_0000);
}

#[test]
fn h03_fetch_add_mask_stops_carry() {
    // EXT-01 §5.1.1
    let r = AtomicRequestRepr::fetch_add(1, 1, 0, 1, 0x0000_0000_8000_0000);
    assert_eq!(r.apply(0x0000_0000_FFFF_FFFF), 0);
}

/// Request 1, a CmpSwap at STag 1, TO 0.
fn cmp_swap(swap: u64, swap_mask: u64, compare: u64, compare_mask: u64) -> AtomicRequestRepr {
    AtomicRequestRepr {
        op: AtomicOp::CmpSwap,
        request_id: 1,
        stag: 1,
        to: 0,
        add_swap_data: swap,
        add_swap_mask: swap_mask,
        compare_data: compare,
        compare_mask,
    }
}

#[test]
fn h04_cmp_swap_masked() {
    // EXT-01 §5.1.3
    let r = cmp_swap(0xAAAA_BBBB_CCCC_DDDD, 0xFFFF_0000_0000_0000, 0x4444, 0xFFFF);
    assert_eq!(r.apply(0x1111_2222_3333_4444), 0xAAAA_2222_3333_4444);
}

#[test]
fn h05_cmp_swap_mismatch_unchanged() {
    // EXT-01 §5.1.3
    let r = cmp_swap(0xAAAA_BBBB_CCCC_DDDD, u64::MAX, 0x5555, 0xFFFF);
    assert_eq!(r.apply(0x1111_2222_3333_4444), 0x1111_2222_3333_4444);
}
