//! SPEC-DIGEST §4: security requirements as negative tests at the protocol core
//! (RFC 5040 §8.1.1, RFC 5041 §8.1–§8.3, VERBS-00 §7).

use crate::common::*;
use iwarp::mem::{Access, AccessError, PdId, RegionSpec, STag, SimpleMemory, StreamId};
use iwarp::wire::terminate::TerminateCause;

/// A local way to take a region's STag out of use.
type Revoke = fn(&mut SimpleMemory, STag) -> Result<(), AccessError>;

fn write_cause(setup: impl FnOnce(&mut Side) -> u32, to: u64, len: usize) -> TerminateCause {
    let mut s = Side::new(cfg(2));
    let stag = setup(&mut s);
    let before = s.mem.bytes().to_vec();
    s.receive(&tagged_seg(0x0, true, stag, to, &vec![0x77; len]));
    let t = expect_terminate(&mut s);
    assert_eq!(s.mem.bytes(), &before[..], "nothing placed");
    t.cause
}

#[test]
fn sec26_stag_zero_is_never_valid() {
    // VERBS-00 §7.2.1 item 3, §8.1.3.2.1
    assert_eq!(write_cause(|_| 0, 0, 4), TerminateCause::DDP_INVALID_STAG);
}

#[test]
fn sec28_stale_key_is_invalid() {
    // VERBS-00 §7.4 (J05): right index, other key.
    let c = write_cause(
        |s| {
            let mut spec = RegionSpec::new(0, 64, all(), PdId(1));
            spec.key = 5;
            let stag = s.region_spec(spec);
            STag::new(stag.index(), 6).0
        },
        0,
        4,
    );
    assert_eq!(c, TerminateCause::DDP_INVALID_STAG);
}

#[test]
fn sec2_window_bound_to_other_stream() {
    // RFC 5040 §8.1.1 item 2 (J13)
    let c = write_cause(
        |s| {
            let mut spec = RegionSpec::new(0, 64, all(), PdId(1));
            spec.stream = Some(StreamId(42));
            s.region_spec(spec).0
        },
        0,
        4,
    );
    assert_eq!(c, TerminateCause::DDP_STAG_NOT_ASSOCIATED);
    // The same window on its own stream accepts the Write.
    let mut s = Side::new(cfg(42));
    let mut spec = RegionSpec::new(0, 64, all(), PdId(1));
    spec.stream = Some(StreamId(42));
    let stag = s.region_spec(spec);
    s.receive(&tagged_seg(0x0, true, stag.0, 0, b"ok"));
    assert!(s.drain_tx(1500).is_empty());
    assert_eq!(s.bytes(0, 2), b"ok");
}

#[test]
fn sec5_read_only_region_refuses_writes() {
    // RFC 5040 §8.1.1 item 5
    let c = write_cause(
        |s| {
            s.region(0, 64, Access::LOCAL_READ | Access::REMOTE_READ, 0)
                .0
        },
        0,
        4,
    );
    assert_eq!(c, TerminateCause::DDP_INVALID_STAG);
}

#[test]
fn sec6_local_invalidation_is_immediate() {
    // RFC 5040 §8.1.1 item 6; RFC 5041 §8.3 (23)
    // Local invalidation, then deregistration.
    let revocations: [Revoke; 2] = [SimpleMemory::invalidate_local, SimpleMemory::deregister];
    for revoke in revocations {
        let c = write_cause(
            |s| {
                let stag = s.region(0, 64, all(), 0);
                revoke(&mut s.mem, stag).unwrap();
                stag.0
            },
            0,
            4,
        );
        assert_eq!(c, TerminateCause::DDP_INVALID_STAG);
    }
}

#[test]
fn sec21_partial_overlap_places_nothing() {
    // RFC 5041 §8.1: validated before any octet is placed (a Write straddling the end).
    let c = write_cause(|s| s.region(0, 64, all(), 0).0, 60, 8);
    assert_eq!(c, TerminateCause::DDP_BASE_BOUNDS);
}
