//! SPEC-DIGEST §8 group B: DDP receive validation and DDP-layer errors.

use crate::common::*;
use iwarp::mem::{Access, PdId, RegionSpec};
use iwarp::rdmap::{CompletionStatus, Event, Handled, StreamState, WorkQueue};
use iwarp::wire::terminate::{TerminateCause, TerminateRepr};

const OP_WRITE: u8 = 0x0;
const OP_SEND: u8 = 0x3;

/// `expect_refused` for an error found at the DDP layer: no RDMAP header is copied.
fn expect_ddp_refused(s: &mut Side, seg: &[u8], cause: TerminateCause) -> TerminateRepr {
    let t = expect_refused(s, seg, cause);
    assert!(t.rdma_header.is_none());
    t
}

fn sink() -> (Side, iwarp::mem::STag) {
    let mut s = Side::new(cfg(2));
    let stag = s.region(4096, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE, 0);
    (s, stag)
}

#[test]
fn b01_zero_length_tagged_unknown_stag_accepted() {
    // RFC 5041 §5.2; VERBS-00 §7.6.3
    let (mut s, _) = sink();
    let before = s.mem.bytes().to_vec();
    let seg = tagged_seg(OP_WRITE, true, 0xDEAD_BEEF, u64::MAX - 3, &[]);
    assert_eq!(s.receive(&seg), Handled::Accepted);
    assert!(s.drain_tx(1500).is_empty());
    assert!(s.events().is_empty());
    assert_eq!(s.engine.state(), StreamState::Active);
    assert_eq!(s.mem.bytes(), &before[..]);
}

#[test]
fn b02_reserved_control_bits_ignored() {
    // RFC 5041 §4.1
    let (mut s, stag) = sink();
    let mut seg = tagged_seg(OP_WRITE, true, stag.0, 10, b"hello");
    seg[0] |= 0x3C;
    s.receive(&seg);
    assert!(s.drain_tx(1500).is_empty());
    assert_eq!(s.bytes(4096 + 10, 5), b"hello");
}

#[test]
fn b03_tagged_bad_ddp_version() {
    // RFC 5041 §4.1, §7.2
    let (mut s, stag) = sink();
    let mut seg = tagged_seg(OP_WRITE, true, stag.0, 0, b"data");
    seg[0] = (seg[0] & !0x03) | 0x02;
    expect_ddp_refused(&mut s, &seg, TerminateCause::new(1, 1, 4));
    assert_eq!(s.bytes(4096, 4), &[0, 0, 0, 0]);
}

#[test]
fn b04_untagged_bad_ddp_version() {
    // RFC 5041 §7.2
    let (mut s, stag) = sink();
    s.post_recv(1, stag, 0, 100);
    let mut seg = untagged_seg(OP_SEND, true, 0, 0, 1, 0, b"x");
    seg[0] &= !0x03;
    expect_ddp_refused(&mut s, &seg, TerminateCause::new(1, 2, 6));
}

#[test]
fn b05_qn3_without_extensions() {
    // RFC 5041 §7.1 check 1, §7.2; RFC 5040 §3.1
    let (mut s, stag) = sink();
    s.post_recv(1, stag, 0, 100);
    let seg = untagged_seg(OP_SEND, true, 0, 3, 1, 0, b"x");
    expect_ddp_refused(&mut s, &seg, TerminateCause::DDP_INVALID_QN);
    // The receive WQE was not consumed: it is flushed, not completed.
    let c = s.completions();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].status, CompletionStatus::Flushed);
    assert_eq!(s.bytes(4096, 1), &[0]);
}

#[test]
fn b06_send_without_posted_wqe() {
    // RFC 5041 §7.1 check 2 (SPEC-DIGEST D15)
    let (mut s, _) = sink();
    let seg = untagged_seg(OP_SEND, true, 0, 0, 1, 0, b"x");
    expect_ddp_refused(&mut s, &seg, TerminateCause::DDP_NO_BUFFER);
}

#[test]
fn b07_send_with_old_msn() {
    // RFC 5041 §7.1 check 5 (SPEC-DIGEST D15)
    let (mut s, stag) = sink();
    s.post_recv(1, stag, 0, 100);
    s.post_recv(2, stag, 100, 100);
    s.receive(&untagged_seg(OP_SEND, true, 0, 0, 1, 0, b"first"));
    assert!(s.drain_tx(1500).is_empty());
    let dup = untagged_seg(OP_SEND, true, 0, 0, 1, 0, b"again");
    expect_ddp_refused(&mut s, &dup, TerminateCause::DDP_MSN_RANGE);
    assert_eq!(s.bytes(4096, 5), b"first");
    assert_eq!(s.bytes(4096 + 100, 5), &[0; 5]);
}

#[test]
fn b08_mo_beyond_buffer() {
    // RFC 5041 §7.1 check 3
    let (mut s, stag) = sink();
    s.post_recv(1, stag, 0, 100);
    let seg = untagged_seg(OP_SEND, false, 0, 0, 1, 200, b"0123456789");
    expect_ddp_refused(&mut s, &seg, TerminateCause::DDP_INVALID_MO);
}

#[test]
fn b09_send_longer_than_buffer() {
    // RFC 5041 §7.1 check 4; RFC 5040 §5.3; SPEC-DIGEST D13
    let (mut s, stag) = sink();
    s.post_recv(7, stag, 100, 16);
    let seg = untagged_seg(OP_SEND, true, 0, 0, 1, 0, &[0xAB; 20]);
    expect_ddp_refused(&mut s, &seg, TerminateCause::DDP_MESSAGE_TOO_LONG);
    // Nothing written at all, inside or outside the SGL.
    assert_eq!(s.bytes(4096 + 100, 16), &[0; 16]);
    assert_eq!(s.bytes(4096 + 116, 4), &[0; 4]);
    let c = s.completions();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].queue), (7, WorkQueue::Recv));
    assert_eq!(c[0].status, CompletionStatus::RecvOverflow);
}

#[test]
fn b10_write_to_unknown_stag() {
    // RFC 5041 §7.1, §7.2; RFC 5040 Fig. 10
    let (mut s, _) = sink();
    let seg = tagged_seg(OP_WRITE, true, 0x0042_4200, 0, b"abc");
    let t = expect_ddp_refused(&mut s, &seg, TerminateCause::DDP_INVALID_STAG);
    assert_eq!(t.ddp_header.unwrap().as_bytes(), &seg[..14]);
}

#[test]
fn b11_write_one_octet_outside_region() {
    // RFC 5041 §7.1 checks 3–4, §8.1
    for (to, len) in [(0x1000 - 1, 4usize), (0x1000 + 4096 - 3, 4)] {
        let mut s = Side::new(cfg(2));
        let mut spec = RegionSpec::new(
            4096,
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            PdId(1),
        );
        spec.base_to = 0x1000;
        let stag = s.region_spec(spec);
        let before = s.mem.bytes().to_vec();
        let seg = tagged_seg(OP_WRITE, true, stag.0, to, &vec![0x55; len]);
        expect_ddp_refused(&mut s, &seg, TerminateCause::DDP_BASE_BOUNDS);
        // Guards and region unchanged.
        assert_eq!(s.mem.bytes(), &before[..]);
    }
}

#[test]
fn b12_to_wrap() {
    // RFC 5041 §7.1 check 5 (wrap checked before bounds)
    let (mut s, stag) = sink();
    let seg = tagged_seg(OP_WRITE, true, stag.0, 0xFFFF_FFFF_FFFF_FFF0, &[1; 32]);
    expect_ddp_refused(&mut s, &seg, TerminateCause::DDP_TO_WRAP);
}

#[test]
fn b13_write_to_other_pd() {
    // RFC 5041 §8.2; RFC 5040 §8.1.1 item 1
    let mut s = Side::new(cfg(2));
    let stag = s.region_spec(RegionSpec::new(
        4096,
        64,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        PdId(99),
    ));
    let seg = tagged_seg(OP_WRITE, true, stag.0, 0, b"zz");
    expect_ddp_refused(&mut s, &seg, TerminateCause::DDP_STAG_NOT_ASSOCIATED);
    assert_eq!(s.bytes(4096, 2), &[GUARD, GUARD]);
}

#[test]
fn b14_nothing_placed_after_first_error() {
    // RFC 5041 §7.1; RFC 5040 §5.4
    let (mut s, stag) = sink();
    let bad = tagged_seg(OP_WRITE, true, 0x0000_0100, 0, b"bad");
    s.receive(&bad);
    let later = tagged_seg(OP_WRITE, true, stag.0, 0, b"later");
    assert_eq!(s.receive(&later), Handled::Dropped);
    assert_eq!(s.bytes(4096, 5), &[0; 5]);
    let segs = s.drain_tx(1500);
    assert_eq!(segs.len(), 1, "exactly one message: the Terminate");
    assert_eq!(
        parse_terminate(&segs[0]).cause,
        TerminateCause::DDP_INVALID_STAG
    );
    assert!(matches!(s.events()[0], Event::TerminateSent(_)));
}

// VERBS-00 §6.3.5 "sequential ordering": a stream on a shared receive queue takes, for a
// Send whose MSN has no buffer yet, one buffer for it and one for each earlier MSN still
// without one (a segment of a later message may arrive first); segments that need none
// (tagged, another queue, a message holding its buffer, an old or out-of-range MSN) ask for
// none.
#[test]
fn srq_buffers_wanted_follow_the_msn() {
    let (mut s, stag) = sink();
    let send = |msn, mo| untagged_seg(OP_SEND, true, 0, 0, msn, mo, b"x");
    let wanted = |s: &Side, seg: &[u8]| s.engine.recv_buffers_wanted(seg);
    assert_eq!(wanted(&s, &send(1, 0)), 1);
    assert_eq!(
        wanted(&s, &send(1, 50)),
        1,
        "not the message's first segment"
    );
    assert_eq!(wanted(&s, &send(3, 0)), 3, "MSNs 1 and 2 have none either");
    s.post_recv(1, stag, 0, 100);
    assert_eq!(wanted(&s, &send(1, 0)), 0);
    assert_eq!(wanted(&s, &send(3, 0)), 2);
    let write = tagged_seg(OP_WRITE, true, stag.0, 0, b"x");
    assert_eq!(wanted(&s, &write), 0);
    let read_request = untagged_seg(0x1, true, 0, 1, 1, 0, &[0; 28]);
    assert_eq!(wanted(&s, &read_request), 0);
    assert_eq!(wanted(&s, &send(0x9000_0000, 0)), 0, "out of range");
    assert_eq!(s.receive(&send(1, 0)), Handled::Accepted);
    assert_eq!(s.completions()[0].status, CompletionStatus::Success);
    assert_eq!(wanted(&s, &send(1, 0)), 0, "already delivered");
    assert_eq!(wanted(&s, &send(2, 0)), 1);
}
