//! SPEC-DIGEST §8 group G: Terminate, teardown and stream lifecycle (engine level).

use crate::common::*;
use iwarp::mem::STag;
use iwarp::rdmap::{
    CompletionStatus, Event, Handled, PostError, RemoteBuf, SendOp, SendWr, StreamState,
};
use iwarp::wire::ddp::{DdpRepr, Segment};
use iwarp::wire::terminate::{TerminateCause, TerminateRepr};

#[test]
fn g01_terminate_layout() {
    // RFC 5040 §4.8, §5.4
    let mut s = Side::new(cfg(2));
    let bad = tagged_seg(0x0, true, 0x0000_0500, 0, b"abc");
    s.receive(&bad);
    let segs = s.drain_tx(1500);
    assert_eq!(segs.len(), 1);
    let g = &segs[0];
    let DdpRepr::Untagged(u) = DdpRepr::parse(&Segment::new_checked(&g[..]).unwrap()).unwrap()
    else {
        panic!("untagged")
    };
    assert!(u.last);
    assert_eq!((u.qn, u.mo, u.msn, u.rsvd_ulp_word), (2, 0, 1, 0));
    assert_eq!(g[1], 0x47);
    assert_eq!(g[18], 0x11, "layer 1 << 4 | etype 1");
    assert_eq!(g[19], 0x00);
    assert_eq!(g[20], 0xC0, "M and D, no R, reserved zero");
    assert_eq!(g[21], 0);
    assert_eq!(&g[22..24], &(bad.len() as u16).to_be_bytes());
    assert_eq!(&g[24..38], &bad[..14]);
    assert_eq!(g.len(), 38);
}

#[test]
fn g02_nothing_after_terminate() {
    // RFC 5040 §5.4
    let mut s = Side::new(cfg(1));
    let a = s.region(0, 8192, all(), 1);
    for i in 0..3 {
        s.engine.post_send(send_wr(i, a, 0, 3000)).unwrap();
    }
    let first = s.engine.poll_segment(now(), 1500, &s.mem).unwrap();
    assert_eq!(first.payload().len(), 1482);
    s.receive(&tagged_seg(0x0, true, 0x0000_0500, 0, b"abc"));
    let rest = s.drain_tx(1500);
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0][1] & 0x0F, 0x7);
    assert!(s.drain_tx(1500).is_empty());
    assert_eq!(
        s.engine.post_send(send_wr(9, a, 0, 1)),
        Err(PostError::NotActive)
    );
    // Every posted WR is flushed.
    s.expect_flushed(3);
}

#[test]
fn g03_first_error_is_reported_once() {
    // RFC 5040 §5.4, §7.1 case 4
    let mut s = Side::new(cfg(2));
    let first = tagged_seg(0x0, true, 0x0000_0500, 0, b"abc");
    let second = untagged_seg(0x3, true, 0, 9, 1, 0, b"q");
    s.receive(&first);
    assert_eq!(s.receive(&second), Handled::Dropped);
    let segs = s.drain_tx(1500);
    assert_eq!(segs.len(), 1);
    assert_eq!(
        parse_terminate(&segs[0]).cause,
        TerminateCause::DDP_INVALID_STAG
    );
    // Also when the first failing segment arrives later than the second (out of order):
    // the error of the earlier segment in stream order wins.
    let mut s = Side::new(cfg(2));
    let h = |s: &mut Side, i: u64, g: &[u8]| {
        s.engine
            .handle_ddp_segment(now(), iwarp::ddp::SegmentPos::index(i), g, &mut s.mem)
    };
    h(&mut s, 1, &second);
    assert!(s.drain_tx(1500).is_empty());
    h(&mut s, 0, &first);
    let segs = s.drain_tx(1500);
    assert_eq!(segs.len(), 1);
    assert_eq!(
        parse_terminate(&segs[0]).cause,
        TerminateCause::DDP_INVALID_STAG
    );
}

#[test]
fn g04_terminate_received() {
    // RFC 5040 §5.4; VERBS-00 §6.2.2.3
    let mut p = Pair::new(cfg(1), cfg(2), 1500);
    let a = p.a.region(0, 8192, all(), 1);
    p.a.engine.post_send(send_wr(1, a, 0, 10)).unwrap();
    p.b.engine.abort(TerminateCause::RDMAP_LOCAL_CATASTROPHIC);
    p.pump();
    let ev = p.a.events();
    let Event::TerminateReceived(t) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(t.cause, TerminateCause::RDMAP_LOCAL_CATASTROPHIC);
    assert_eq!(p.a.engine.state(), StreamState::Terminated);
    assert!(p.a.drain_tx(1500).is_empty(), "no Terminate in reply");
    assert_eq!(
        p.b.events(),
        vec![Event::TerminateSent(
            TerminateCause::RDMAP_LOCAL_CATASTROPHIC
        )]
    );
    p.a.engine.handle_llp_closed(true);
    assert_eq!(p.a.engine.state(), StreamState::Closed);
}

#[test]
fn g05_ulp_abort_sends_bare_terminate() {
    // VERBS-00 §6.2.2.3 (SPEC-DIGEST D4, D14)
    let mut s = Side::new(cfg(1));
    s.engine.abort(TerminateCause::RDMAP_LOCAL_CATASTROPHIC);
    let segs = s.drain_tx(1500);
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].len(), 22);
    assert_eq!(&segs[0][18..22], &[0, 0, 0, 0]);
}

#[test]
fn g06_llp_reset_flushes_without_terminate() {
    // VERBS-00 §6.2.2.4, §6.6.2.3
    let mut s = Side::new(cfg(1));
    let a = s.region(0, 8192, all(), 1);
    s.post_recv(5, a, 0, 10);
    s.engine.post_send(send_wr(1, a, 0, 10)).unwrap();
    s.engine.handle_llp_closed(false);
    assert!(s.drain_tx(1500).is_empty());
    assert_eq!(s.engine.state(), StreamState::Error);
    assert_eq!(s.events(), vec![Event::LlpLost]);
    s.expect_flushed(2);
}

#[test]
fn g07_local_error_building_send() {
    // RFC 5040 §7.1 case 1; VERBS-00 §6.4 item 4
    let mut s = Side::new(cfg(1));
    let a = s.region(0, 8192, all(), 1);
    s.engine.post_send(send_wr(1, a, 0, 10)).unwrap();
    s.engine
        .post_send(send_wr(2, STag(0x0099_9900), 0, 10))
        .unwrap();
    s.engine.post_send(send_wr(3, a, 0, 10)).unwrap();
    let segs = s.drain_tx(1500);
    assert_eq!(
        segs.len(),
        2,
        "first Send, then a Terminate instead of the second"
    );
    assert_eq!(segs[0][1] & 0x0F, 0x3);
    let t = parse_terminate(&segs[1]);
    assert_eq!(
        t,
        TerminateRepr::bare(TerminateCause::RDMAP_LOCAL_CATASTROPHIC)
    );
    let c: Vec<(u64, CompletionStatus)> = s
        .completions()
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        c,
        vec![
            (1, CompletionStatus::Success),
            (2, CompletionStatus::LocalProtection),
            (3, CompletionStatus::Flushed)
        ]
    );
}

#[test]
fn g08_any_terminate_is_accepted() {
    // RFC 5040 Fig. 9 (SPEC-DIGEST D4, D14)
    for body in [
        vec![0x00, 0xFF, 0, 0],
        vec![0x00, 0x13, 0, 0, 0, 0, 0, 0, 0, 0],
        vec![0x20, 0x02, 0, 0],
    ] {
        let mut s = Side::new(cfg(1));
        s.receive(&untagged_seg(0x7, true, 0, 2, 1, 0, &body));
        let ev = s.events();
        let Event::TerminateReceived(t) = &ev[0] else {
            panic!()
        };
        assert_eq!(
            (t.cause.layer, t.cause.etype, t.cause.code),
            (body[0] >> 4, body[0] & 15, body[1])
        );
        assert!(s.drain_tx(1500).is_empty());
    }
}

// RFC 5040 §4.8 puts the Layer in the high nibble of the Terminate Control; Linux siw sends
// the nibbles swapped (its bit-fields are little-endian). A received Terminate is reported
// with the cause siw meant: `0x02 0x07` without DDP header is 2/0/07 "no matching RTR"
// (RFC 6581 §7), not RDMAP 0/2/07 (which would carry the DDP header, RFC 5040 Fig. 10).
#[test]
fn g08_siw_nibble_swapped_terminate_names_its_cause() {
    let mut s = Side::new(cfg(1));
    s.receive(&untagged_seg(0x7, true, 0, 2, 1, 0, &[0x02, 0x07, 0, 0]));
    let ev = s.events();
    let Event::TerminateReceived(t) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!((t.cause.layer, t.cause.etype, t.cause.code), (2, 0, 0x07));
    assert_eq!(s.engine.state(), StreamState::Terminated);
}

#[test]
fn g09_peer_close_with_work_pending() {
    // VERBS-00 §6.2.2.2, Fig. 24 "Bad LLP Close"
    let mut s = Side::new(cfg(1));
    let a = s.region(0, 8192, all(), 1);
    s.engine.post_send(send_wr(1, a, 0, 10)).unwrap();
    s.engine.handle_llp_closed(true);
    expect_terminate_cause(&mut s, TerminateCause::RDMAP_CATASTROPHIC_STREAM);
    assert_eq!(s.engine.state(), StreamState::Terminated);
}

#[test]
fn g10_peer_close_idle() {
    // VERBS-00 §6.2.2.2, §6.2.5
    let mut s = Side::new(cfg(1));
    let a = s.region(0, 8192, all(), 1);
    s.post_recv(1, a, 0, 10);
    s.engine.handle_llp_closed(true);
    assert_eq!(s.engine.state(), StreamState::Closed);
    assert!(s.drain_tx(1500).is_empty());
    assert_eq!(s.events(), vec![Event::Closed]);
    assert_eq!(s.completions()[0].status, CompletionStatus::Flushed);
}

#[test]
fn g11_segment_after_close_is_dropped() {
    // VERBS-00 §6.2.5 Fig. 11: nothing is placed once closed (the QP resets TCP).
    let mut s = Side::new(cfg(1));
    let a = s.region(0, 8192, all(), 1);
    s.engine.handle_llp_closed(true);
    assert_eq!(
        s.receive(&tagged_seg(0, true, a.0, 0, b"x")),
        Handled::Dropped
    );
    assert_eq!(s.bytes(0, 1), &[1]);
}

#[test]
fn g12_flush_leaves_one_error_completion() {
    // VERBS-00 §6.2.4
    let mut s = Side::new(cfg(1));
    let a = s.region(0, 8192, all(), 1);
    for i in 0..3 {
        s.post_recv(10 + i, a, 0, 10);
    }
    s.engine.post_send(send_wr(1, a, 0, 5)).unwrap();
    s.engine
        .post_send(send_wr(2, STag(0x0012_3400), 0, 5))
        .unwrap();
    s.engine.post_send(send_wr(3, a, 0, 5)).unwrap();
    s.engine
        .post_send(SendWr::new(
            4,
            SendOp::Read {
                sink: RemoteBuf { stag: a, to: 0 },
                remote: RemoteBuf { stag: a, to: 0 },
                len: 5,
            },
        ))
        .unwrap();
    s.drain_tx(1500);
    let c = s.completions();
    assert_eq!(c.len(), 7);
    let odd = c
        .iter()
        .filter(|c| {
            !matches!(
                c.status,
                CompletionStatus::Success | CompletionStatus::Flushed
            )
        })
        .count();
    assert_eq!(odd, 1);
}

#[test]
fn graceful_close_drains_then_refuses() {
    // RFC 5041 §6; RFC 5040 §6.2 case 1
    let (mut p, a, b) = Pair::with_regions(1, 0);
    p.b.post_recv(1, b, 0, 100);
    p.a.engine.post_send(send_wr(1, a, 0, 50)).unwrap();
    p.a.engine.close();
    assert_eq!(p.a.engine.state(), StreamState::Closing);
    assert_eq!(
        p.a.engine.post_send(send_wr(2, a, 0, 1)),
        Err(PostError::NotActive)
    );
    assert!(!p.a.engine.is_drained());
    p.pump();
    assert!(p.a.engine.is_drained());
    assert_eq!(p.b.completions().len(), 1);
    p.b.engine.handle_llp_closed(true);
    assert_eq!(p.b.engine.state(), StreamState::Closed);
}

#[test]
fn multi_segment_read_request_rejected() {
    // SPEC-DIGEST D19
    let mut s = Side::new(cfg(2));
    let seg = untagged_seg(0x1, false, 0, 1, 1, 0, &[0; 28]);
    s.receive(&seg);
    expect_terminate_cause(&mut s, TerminateCause::RDMAP_CATASTROPHIC_STREAM);
    let mut s = Side::new(cfg(2));
    s.receive(&untagged_seg(0x1, true, 0, 1, 1, 0, &[0; 27]));
    expect_terminate_cause(&mut s, TerminateCause::RDMAP_CATASTROPHIC_STREAM);
}

#[test]
fn read_request_disabled_with_ird_zero() {
    // SPEC-DIGEST D21
    let mut c = cfg(2);
    c.ird = 0;
    let mut s = Side::new(c);
    s.receive(&untagged_seg(0x1, true, 0, 1, 1, 0, &[0; 28]));
    expect_terminate_cause(&mut s, TerminateCause::DDP_INVALID_QN);
}

#[test]
fn unexpected_read_response_and_wrong_queue() {
    // RFC 5040 §7.2: a Read Response nobody asked for, a Send on QN 1.
    let mut s = Side::new(cfg(2));
    let a = s.region(0, 64, all(), 0);
    s.receive(&tagged_seg(0x2, true, a.0, 0, b"x"));
    expect_terminate_cause(&mut s, TerminateCause::RDMAP_UNEXPECTED_OPCODE);
    assert_eq!(s.bytes(0, 1), &[0]);
    let mut s = Side::new(cfg(2));
    s.receive(&untagged_seg(0x3, true, 0, 1, 1, 0, b"x"));
    expect_terminate_cause(&mut s, TerminateCause::RDMAP_UNEXPECTED_OPCODE);
}
