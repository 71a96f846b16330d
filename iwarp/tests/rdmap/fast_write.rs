//! `Engine::place_next_write`, the in-order fast path for RDMA Write segments, against
//! `Engine::handle_ddp_segment`: whatever it takes is placed exactly as the general path
//! places it, whatever it declines changes nothing and then gets the general path's
//! answer (RFC 5041 §7.1, §7.2, §8.1; RFC 5040 §7.2).

use crate::common::*;
use iwarp::ddp::SegmentPos;
use iwarp::mem::{Access, PdId, RegionSpec, STag};
use iwarp::rdmap::{Handled, StreamState};

const OP_WRITE: u8 = 0x0;

/// A stream with a Write target (all rights) at arena offset 4096, a region without
/// Remote Write and one of another PD (the same STags on every side built this way).
fn sink() -> (Side, STag) {
    let (s, (target, _, _)) = sink_with_stags();
    (s, target)
}

/// [`sink`] with the STags of its three regions: the target, the one without Remote
/// Write, the one of another PD.
fn sink_with_stags() -> (Side, (STag, STag, STag)) {
    let mut s = Side::new(cfg(2));
    let target = s.region(4096, 8192, all(), 0);
    let read_only = s.region(16384, 4096, Access::LOCAL_READ | Access::LOCAL_WRITE, 0);
    let other_pd = s.region_spec(RegionSpec::new(20480, 4096, all(), PdId(9)));
    (s, (target, read_only, other_pd))
}

/// The STags every [`sink`] has.
fn stags() -> (STag, STag, STag) {
    sink_with_stags().1
}

/// Hands `seg` in order through the fast path, or the general path when it declines;
/// returns whether the fast path took it.
fn offer(side: &mut Side, seg: &[u8]) -> bool {
    let pos = SegmentPos::index(side.rx_pos);
    let before = side.mem.bytes().to_vec();
    if side.engine.place_next_write(now(), pos, seg, &mut side.mem) {
        side.rx_pos += 1;
        return true;
    }
    assert!(
        side.mem.bytes() == &before[..],
        "a declined segment placed octets"
    );
    side.receive(seg);
    false
}

/// What a side shows after its input: memory, segments to send (a Terminate), events,
/// completions and state.
fn outcome(side: &mut Side) -> (Vec<u8>, Vec<Vec<u8>>, String, String, StreamState) {
    let tx = side.drain_tx(1 << 16);
    let events = format!("{:?}", side.events());
    let completions = format!("{:?}", side.completions());
    (
        side.mem.bytes().to_vec(),
        tx,
        events,
        completions,
        side.engine.state(),
    )
}

#[test]
fn every_header_bit_flipped_mid_write_ends_as_through_the_general_path() {
    let mut taken = 0;
    let mut declined = 0;
    for bit in 0..14 * 8 {
        let (mut fast, stag) = sink();
        let (mut general, _) = sink();
        let seg = |i: u64| tagged_seg(OP_WRITE, false, stag.0, 100 * i, &pattern(100, i as u8));
        for i in 0..3 {
            assert!(offer(&mut fast, &seg(i)), "segment {i} of a Write");
            assert_eq!(general.receive(&seg(i)), Handled::Accepted);
        }
        let mut bad = seg(3);
        bad[bit / 8] ^= 0x80 >> (bit % 8);
        if offer(&mut fast, &bad) {
            taken += 1;
        } else {
            declined += 1;
        }
        general.receive(&bad);
        // The Write goes on (or the stream has stopped) alike.
        offer(&mut fast, &seg(4));
        general.receive(&seg(4));
        let (f, g) = (outcome(&mut fast), outcome(&mut general));
        assert!(f.0 == g.0, "bit {bit}: memory differs");
        assert_eq!(f.1, g.1, "bit {bit}: segments sent (Terminate) differ");
        assert_eq!((&f.2, &f.3, f.4), (&g.2, &g.3, g.4), "bit {bit}");
    }
    // Flips of L, the reserved bits and TO bits inside the region are taken; the rest
    // (T, DV, RV, opcode, STag, TO outside) declined.
    assert!(
        taken > 0 && declined > 0,
        "taken {taken}, declined {declined}"
    );
}

#[test]
fn refused_placements_mid_write_are_declined_with_the_general_terminate() {
    use iwarp::wire::terminate::TerminateCause as T;
    // (name, STag, TO, L, payload octets, cause): RFC 5041 §7.2 and §8.1.
    let (_, target) = sink();
    let (read_only, other_pd) = (stags().1, stags().2);
    let cases = [
        (
            "past the end",
            target,
            8192 - 50,
            false,
            100,
            T::DDP_BASE_BOUNDS,
        ),
        (
            "TO wraps",
            target,
            u64::MAX - 10,
            false,
            100,
            T::DDP_TO_WRAP,
        ),
        (
            "unknown STag",
            STag(target.0 ^ 0x100),
            0,
            false,
            100,
            T::DDP_INVALID_STAG,
        ),
        (
            "no Remote Write",
            read_only,
            0,
            false,
            100,
            T::DDP_INVALID_STAG,
        ),
        (
            "another PD",
            other_pd,
            0,
            false,
            100,
            T::DDP_STAG_NOT_ASSOCIATED,
        ),
        (
            "last, past the end",
            target,
            8192,
            true,
            1,
            T::DDP_BASE_BOUNDS,
        ),
    ];
    for (name, stag, to, last, len, cause) in cases {
        let (mut s, target) = sink();
        assert!(offer(
            &mut s,
            &tagged_seg(OP_WRITE, false, target.0, 0, &[7; 100])
        ));
        assert_eq!(s.bytes(4096, 100), &[7; 100], "{name}");
        let before = s.mem.bytes().to_vec();
        let bad = tagged_seg(OP_WRITE, last, stag.0, to, &vec![1; len]);
        assert!(!offer(&mut s, &bad), "{name}: taken");
        let t = expect_terminate_cause(&mut s, cause);
        assert_copy_d(&t, &bad);
        assert!(s.mem.bytes() == &before[..], "{name}: octets placed");
        assert_eq!(s.engine.state(), StreamState::Terminated, "{name}");
    }
}

#[test]
fn held_early_segments_are_delivered_behind_the_fast_path_and_other_messages_keep_it_out() {
    // RFC 5041 §5.3: a segment held early is delivered in order behind the gap, also when
    // the segments filling the gap take the fast path.
    let (mut s, stag) = sink();
    let seg = |i: u64| tagged_seg(OP_WRITE, false, stag.0, 100 * i, &pattern(100, i as u8));
    let early = s
        .engine
        .handle_ddp_segment(now(), SegmentPos::index(2), &seg(2), &mut s.mem);
    assert_eq!(early, Handled::Accepted);
    assert!(offer(&mut s, &seg(0)), "next in order, 2 held: placed");
    assert!(offer(&mut s, &seg(1)));
    // The held segment 2 was delivered behind 1: 3 is next, not 2.
    assert!(!s
        .engine
        .place_next_write(now(), SegmentPos::index(2), &seg(2), &mut s.mem));
    assert_eq!(
        s.engine
            .handle_ddp_segment(now(), SegmentPos::index(2), &seg(2), &mut s.mem),
        Handled::Duplicate
    );
    s.rx_pos = 3;
    assert!(offer(&mut s, &seg(3)));
    // Not the next position: declined (the general path finds it a duplicate).
    assert!(!s
        .engine
        .place_next_write(now(), SegmentPos::index(3), &seg(3), &mut s.mem));
    // A zero-length Write segment and a Send: declined, the general path takes them.
    s.post_recv(1, stag, 0, 100);
    assert!(!offer(&mut s, &tagged_seg(OP_WRITE, false, stag.0, 0, &[])));
    let send = untagged_seg(0x3, true, 0, 0, 1, 0, &[9; 10]);
    assert!(!offer(&mut s, &send));
    for i in 0..4 {
        let at = 4096 + 100 * i;
        if i == 0 {
            // The Send's ten octets landed over the first ones of segment 0.
            assert_eq!(s.bytes(at, 10), &[9; 10]);
            assert_eq!(s.bytes(at + 10, 90), &pattern(100, 0)[10..]);
        } else {
            assert_eq!(s.bytes(at, 100), &pattern(100, i as u8)[..], "segment {i}");
        }
    }
    assert_eq!(s.completions().len(), 1);
    assert_eq!(s.engine.state(), StreamState::Active);
}
