//! Every wire view and `Repr` of the DDP / RDMAP / RFC 7306 / Terminate / MPA FPDU layers
//! (RFC 5041 §4, RFC 5040 §4, RFC 7306 §5–§6, RFC 5044 §4–§5) parses arbitrary octets
//! without panicking, and whatever parses emits back to the same octets (reserved bits
//! and pad zeroed) and parses again to the same `Repr`.
//!
//! Input: the octets, handed to every parser at once (the DDP segment parser also to the
//! RDMAP parsers at the header's end, as the engine does).
#![no_main]

use iwarp::wire::atomic::{
    AtomicRequest, AtomicRequestRepr, AtomicResponseRepr, ATOMIC_REQUEST_LEN, ATOMIC_RESPONSE_LEN,
};
use iwarp::wire::ddp::{DdpRepr, Segment, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use iwarp::wire::mpa::{Fpdu, FpduRepr, IrdOrd, Marker, IRD_ORD_LEN, MARKER_LEN};
use iwarp::wire::rdmap::{
    ImmediateDataRepr, RdmapControl, ReadRequest, ReadRequestRepr, IMMEDIATE_DATA_LEN,
    READ_REQUEST_LEN,
};
use iwarp::wire::terminate::{CopiedDdpHeader, Terminate, TerminateRepr};
use libfuzzer_sys::fuzz_target;

fn ddp(data: &[u8]) -> Option<&[u8]> {
    let seg = Segment::new_checked(data).ok()?;
    // Each model's fields are read only on segments of that model (as the views document).
    if seg.tagged() {
        let _ = (seg.stag(), seg.to());
    } else {
        let _ = (seg.rsvd_ulp_word(), seg.qn(), seg.msn(), seg.mo());
    }
    let hlen = seg.header_len();
    assert!(hlen == TAGGED_HEADER_LEN || hlen == UNTAGGED_HEADER_LEN);
    assert_eq!(seg.payload(), &data[hlen..]);
    let repr = DdpRepr::parse(&seg).ok()?;
    assert_eq!(repr.buffer_len(), hlen);
    let mut out = [0u8; UNTAGGED_HEADER_LEN];
    assert_eq!(repr.emit(&mut out), Ok(hlen));
    // Only the control octet's reserved bits (RFC 5041 §4.1) are not kept.
    assert_eq!(out[0], data[0] & 0xc3, "control field");
    assert_eq!(&out[1..hlen], &data[1..hlen], "header fields");
    let again = Segment::new_checked(&out[..hlen]).expect("emitted header is whole");
    assert_eq!(DdpRepr::parse(&again), Ok(repr));
    assert!(repr.emit(&mut out[..hlen - 1]).is_err());
    Some(&data[hlen..])
}

fn rdmap(octet: u8, payload: &[u8]) {
    for version in 0..4 {
        if let Ok(c) = RdmapControl::parse(octet, version) {
            assert_eq!(c.to_octet(), octet & 0xcf, "RDMAP control round trip");
            assert_eq!(RdmapControl::parse(c.to_octet(), version), Ok(c));
        }
    }
    if let Ok(v) = ReadRequest::new_checked(payload) {
        let r = ReadRequestRepr::parse(&v).expect("a checked view parses");
        assert_eq!(&r.to_bytes()[..], &payload[..READ_REQUEST_LEN]);
    }
    if let Ok(r) = ImmediateDataRepr::parse(payload) {
        let mut out = [0u8; IMMEDIATE_DATA_LEN];
        assert_eq!(r.emit(&mut out), Ok(IMMEDIATE_DATA_LEN));
        assert_eq!(&out[..], payload);
    }
    if let Ok(v) = AtomicRequest::new_checked(payload) {
        if let Ok(r) = AtomicRequestRepr::parse(&v) {
            let mut out = [0u8; ATOMIC_REQUEST_LEN];
            assert_eq!(r.emit(&mut out), Ok(ATOMIC_REQUEST_LEN));
            // The upper 28 bits of the first word are reserved (RFC 7306 §5.2.1).
            assert_eq!(out[3], payload[3] & 0x0f);
            assert_eq!(&out[4..], &payload[4..ATOMIC_REQUEST_LEN]);
            assert_eq!(
                AtomicRequestRepr::parse(&AtomicRequest::new_unchecked(&out[..])),
                Ok(r)
            );
        }
    }
    if let Ok(r) = AtomicResponseRepr::parse(payload) {
        let mut out = [0u8; ATOMIC_RESPONSE_LEN];
        assert_eq!(r.emit(&mut out), Ok(ATOMIC_RESPONSE_LEN));
        assert_eq!(&out[..], &payload[..ATOMIC_RESPONSE_LEN]);
    }
    if let Ok(t) = Terminate::new_checked(payload) {
        let _ = (t.cause(), t.segment_len(), t.ddp_header(), t.rdma_header());
        if let Ok(r) = TerminateRepr::parse(&t) {
            let mut out = vec![0u8; r.buffer_len()];
            assert_eq!(r.emit(&mut out), Ok(r.buffer_len()));
            assert!(r.buffer_len() <= payload.len());
            assert_eq!(out[..2], payload[..2], "layer, type, code");
            let again = Terminate::new_checked(&out[..]).expect("emitted Terminate is whole");
            assert_eq!(TerminateRepr::parse(&again), Ok(r));
        }
    }
    if let Ok(h) = CopiedDdpHeader::from_segment(payload) {
        assert_eq!(h.as_bytes(), &payload[..h.as_bytes().len()]);
        assert_eq!(h.is_tagged(), payload[0] & 0x80 != 0);
    }
}

fn mpa(data: &[u8]) {
    if let Ok(f) = Fpdu::new_checked(data) {
        let total = f.total_len();
        assert!(total <= data.len() && total % 4 == 0, "FPDUs are 4-aligned");
        let r = FpduRepr::parse(&f).expect("a checked FPDU parses");
        let mut out = vec![0u8; r.buffer_len()];
        assert_eq!(r.emit(&mut out, false), Ok(total));
        let pad_start = 2 + r.ulpdu.len();
        let pad_end = total - 4;
        assert_eq!(out[..pad_start], data[..pad_start]);
        assert!(
            out[pad_start..pad_end].iter().all(|&b| b == 0),
            "pad zeroed"
        );
        assert_eq!(out[pad_end..], data[pad_end..total], "CRC kept");
        let again = Fpdu::new_checked(&out[..]).expect("emitted FPDU is whole");
        assert_eq!(FpduRepr::parse(&again), Ok(r));
    }
    if let Ok(m) = Marker::parse(data) {
        assert_eq!(m.to_bytes()[..], data[..MARKER_LEN]);
    }
    if let Ok(io) = IrdOrd::parse(data) {
        assert_eq!(IrdOrd::parse(&io.to_bytes()), Ok(io));
        assert_eq!(io.to_bytes()[..], data[..IRD_ORD_LEN]);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(payload) = ddp(data) {
        rdmap(data[1], payload);
    }
    rdmap(data.get(1).copied().unwrap_or(0), data);
    mpa(data);
});
