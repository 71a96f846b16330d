//! Arbitrary bytes into `handle_ddp_segment` never panic and never touch memory outside the
//! registered regions; the stream always ends with at most one Terminate.

use crate::common::*;
use iwarp::ddp::SegmentPos;
use iwarp::mem::{PdId, RegionSpec};
use proptest::prelude::*;

/// A segment whose header is mostly plausible so that deep paths are reached.
fn plausible() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        any::<bool>(),
        0u8..16,
        prop_oneof![Just(1u8), 0u8..4],
        prop_oneof![Just(1u8), 0u8..4],
        0u32..5,
        0u32..4,
        0u32..3000,
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(tagged, last, op, dv, rv, qn, msn, mo, to, payload)| {
            let mut v = vec![
                (if tagged { 0x80 } else { 0 }) | (if last { 0x40 } else { 0 }) | dv,
                (rv << 6) | op,
            ];
            if tagged {
                v.extend_from_slice(&[0, 0, 0, 0]);
                v.extend_from_slice(&(to % 9000).to_be_bytes());
            } else {
                v.extend_from_slice(&[0, 0, 0, 0]);
                v.extend_from_slice(&qn.to_be_bytes());
                v.extend_from_slice(&msn.to_be_bytes());
                v.extend_from_slice(&mo.to_be_bytes());
            }
            v.extend_from_slice(&payload);
            v
        })
}

fn check_side(segs: Vec<(u64, Vec<u8>)>, ext: bool) {
    let mut s = Side::new(if ext { cfg_ext(2) } else { cfg(2) });
    // Regions at [4096, 8192) and [16384, 16448); everything else is guard.
    let r1 = s.region(4096, 4096, all(), 0);
    let r2 = s.region_spec(RegionSpec::new(16384, 64, all(), PdId(1)));
    s.mem.bytes_mut()[16384..16448].fill(0);
    s.post_recv(1, r1, 0, 1000);
    s.post_recv(2, r1, 1000, 1000);
    let stags = [r1.0, r2.0];
    for (i, (pos, mut seg)) in segs.into_iter().enumerate() {
        if seg.len() >= 6 && seg[0] & 0x80 != 0 {
            seg[2..6].copy_from_slice(&stags[i % 2].to_be_bytes());
        }
        s.engine
            .handle_ddp_segment(now(), SegmentPos::index(pos), &seg, &mut s.mem);
        let _ = s.drain_tx(1500);
    }
    let _ = s.completions();
    let _ = s.events();
    let b = s.mem.bytes();
    assert!(b[..4096].iter().all(|&x| x == GUARD));
    assert!(b[8192..16384].iter().all(|&x| x == GUARD));
    assert!(b[16448..].iter().all(|&x| x == GUARD));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(segs in proptest::collection::vec(
        (0u64..12, proptest::collection::vec(any::<u8>(), 0..120)), 1..12), ext in any::<bool>()) {
        check_side(segs, ext);
    }

    #[test]
    fn plausible_segments_never_escape_regions(segs in proptest::collection::vec(
        (0u64..12, plausible()), 1..16), ext in any::<bool>()) {
        check_side(segs, ext);
    }
}

#[test]
fn at_most_one_terminate_under_garbage() {
    // RFC 5040 §5.4, §7.1 case 4
    let mut s = Side::new(cfg(2));
    let mut terminates = 0;
    for i in 0..50u64 {
        let seg = vec![i as u8; (i as usize * 7) % 60];
        s.engine
            .handle_ddp_segment(now(), SegmentPos::index(i), &seg, &mut s.mem);
        terminates += s
            .drain_tx(1500)
            .iter()
            .filter(|g| g.len() > 1 && g[1] & 0x0F == 7)
            .count();
    }
    assert_eq!(terminates, 1);
}
