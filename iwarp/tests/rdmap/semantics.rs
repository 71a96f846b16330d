//! SPEC-DIGEST §8 groups C (placement, delivery, ordering), D (RDMAP header and opcodes),
//! E (RDMA Read, IRD/ORD), F (Send with Invalidate, Solicited Events).

use crate::common::*;
use iwarp::ddp::SegmentPos;
use iwarp::mem::{Access, PdId, RegionSpec, STag, Sge, StreamId};
use iwarp::rdmap::{
    CompletionOpcode, CompletionStatus, Event, Handled, RemoteBuf, SendOp, SendWr, WorkQueue,
};
use iwarp::wire::ddp::{DdpRepr, Segment};
use iwarp::wire::rdmap::{ReadRequest, ReadRequestRepr};
use iwarp::wire::terminate::{TerminateCause, TerminateRepr};

const OP_WRITE: u8 = 0x0;
const OP_READ_REQ: u8 = 0x1;
const OP_SEND: u8 = 0x3;
const OP_SEND_INV: u8 = 0x4;
const OP_SEND_SE: u8 = 0x5;

fn read_req(sink: u32, sink_to: u64, size: u32, src: u32, src_to: u64) -> Vec<u8> {
    ReadRequestRepr {
        sink_stag: sink,
        sink_to,
        size,
        src_stag: src,
        src_to,
    }
    .to_bytes()
    .to_vec()
}

/// An RDMA Read Request segment (queue 1, message `msn`) carrying the header `rr`.
fn read_req_seg(msn: u32, rr: &[u8]) -> Vec<u8> {
    untagged_seg(OP_READ_REQ, true, 0, 1, msn, 0, rr)
}

/// An RDMA Write of `len` octets at `to` of `local` to `dst_to` of the peer's `dst`.
fn write_wr(id: u64, local: STag, to: u64, len: u32, dst: STag, dst_to: u64) -> SendWr {
    SendWr::new(
        id,
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: local,
                to,
                len,
            }),
            remote: RemoteBuf {
                stag: dst,
                to: dst_to,
            },
        },
    )
}

// ---------------------------------------------------------------- C

#[test]
fn c01_delivery_only_after_all_earlier_placed() {
    // RFC 5041 §5.3, §5.4: out-of-order feed; delivery in order, exactly once.
    let mut s = Side::new(cfg(2));
    let buf = s.region(0, 8192, all(), 0);
    s.post_recv(1, buf, 0, 4096);
    s.post_recv(2, buf, 4096, 4096);
    let m1a = untagged_seg(OP_SEND, false, 0, 0, 1, 0, &[1; 100]);
    let m1b = untagged_seg(OP_SEND, true, 0, 0, 1, 100, &[2; 50]);
    let m2 = untagged_seg(OP_SEND, true, 0, 0, 2, 0, &[3; 10]);
    let h = |s: &mut Side, i: u64, seg: &[u8]| {
        s.engine
            .handle_ddp_segment(now(), SegmentPos::index(i), seg, &mut s.mem)
    };
    // Message 2 first, then message 1's last segment: placed, nothing delivered.
    assert_eq!(h(&mut s, 2, &m2), Handled::Accepted);
    assert_eq!(h(&mut s, 1, &m1b), Handled::Accepted);
    assert_eq!(s.bytes(4096, 10), &[3; 10], "placed out of order");
    assert_eq!(s.bytes(100, 50), &[2; 50]);
    assert!(
        s.completions().is_empty(),
        "not delivered before the gap closes"
    );
    // Duplicate placement of an early segment is harmless.
    assert_eq!(h(&mut s, 1, &m1b), Handled::Duplicate);
    assert_eq!(h(&mut s, 0, &m1a), Handled::Accepted);
    let c = s.completions();
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.byte_len)).collect::<Vec<_>>(),
        vec![(1, 150), (2, 10)]
    );
    // Re-offering delivered segments delivers nothing twice.
    assert_eq!(h(&mut s, 0, &m1a), Handled::Duplicate);
    assert_eq!(h(&mut s, 2, &m2), Handled::Duplicate);
    assert!(s.completions().is_empty());
    assert!(s.drain_tx(1500).is_empty());
}

#[test]
fn c02_length_is_mo_plus_last_payload() {
    // RFC 5041 §5.4
    let mut s = Side::new(cfg(2));
    let buf = s.region(0, 8192, all(), 0);
    s.post_recv(1, buf, 0, 4096);
    s.receive(&untagged_seg(OP_SEND, false, 0, 0, 1, 0, &[1; 1000]));
    s.receive(&untagged_seg(OP_SEND, true, 0, 0, 1, 1000, &[1; 234]));
    assert_eq!(s.completions()[0].byte_len, 1234);
}

#[test]
fn c03_write_consumes_no_wqe_and_no_cqe() {
    // RFC 5040 §5.1; VERBS-00 §8.1.2.2
    let mut s = Side::new(cfg(2));
    let buf = s.region(0, 8192, all(), 0);
    s.post_recv(1, buf, 0, 100);
    s.receive(&tagged_seg(OP_WRITE, true, buf.0, 500, b"written"));
    assert!(s.completions().is_empty());
    assert_eq!(s.bytes(500, 7), b"written");
    // The WQE is still there for the next Send (MSN 1).
    s.receive(&untagged_seg(OP_SEND, true, 0, 0, 1, 0, b"s"));
    assert_eq!(s.completions()[0].wr_id, 1);
}

#[test]
fn c04_send_completion_after_earlier_write_placed() {
    // RFC 5040 §5.5 rule 10: Write(X) then Send, fed out of order; the receive completion
    // appears only once all of X is placed.
    let mut s = Side::new(cfg(2));
    let buf = s.region(0, 8192, all(), 0);
    s.post_recv(1, buf, 6000, 100);
    let w1 = tagged_seg(OP_WRITE, false, buf.0, 0, &[9; 1000]);
    let w2 = tagged_seg(OP_WRITE, true, buf.0, 1000, &[8; 1000]);
    let send = untagged_seg(OP_SEND, true, 0, 0, 1, 0, b"done");
    let h = |s: &mut Side, i: u64, seg: &[u8]| {
        s.engine
            .handle_ddp_segment(now(), SegmentPos::index(i), seg, &mut s.mem);
    };
    h(&mut s, 2, &send);
    h(&mut s, 0, &w1);
    assert!(s.completions().is_empty());
    h(&mut s, 1, &w2);
    let c = s.completions();
    assert_eq!(c.len(), 1);
    assert_eq!(s.bytes(1000, 1000), &[8; 1000][..]);
}

#[test]
fn c05_receives_complete_in_msn_order() {
    // RFC 5040 §5.3; VERBS-00 §8.2.2 rule 12
    let mut s = Side::new(cfg(2));
    let buf = s.region(0, 8192, all(), 0);
    for i in 0..5 {
        s.post_recv(i, buf, 100 * i, 100);
    }
    let order = [3u64, 1, 4, 0, 2];
    for &i in &order {
        let seg = untagged_seg(OP_SEND, true, 0, 0, i as u32 + 1, 0, &[i as u8; 5]);
        s.engine
            .handle_ddp_segment(now(), SegmentPos::index(i), &seg, &mut s.mem);
    }
    let ids: Vec<u64> = s.completions().iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4]);
}

#[test]
fn c06_sq_completes_in_posting_order() {
    // RFC 5040 §5.5 rule 15: a Send posted after a Read completes after it.
    let (mut p, a, b) = Pair::with_regions(1, 2);
    p.b.post_recv(1, b, 0, 100);
    p.a.engine
        .post_send(read_wr(10, a, 1000, b, 0, 3000))
        .unwrap();
    p.a.engine.post_send(send_wr(11, a, 0, 10)).unwrap();
    // Transmit A's two messages; the Send is handed to DDP but the Read is not answered yet.
    let segs = p.a.drain_tx(1500);
    assert_eq!(segs.len(), 2);
    assert!(
        p.a.completions().is_empty(),
        "Send must not complete before the earlier Read"
    );
    for s in &segs {
        p.b.receive(s);
    }
    p.pump();
    let ids: Vec<u64> = p.a.completions().iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![10, 11]);
}

// ---------------------------------------------------------------- D

/// Posts one of every RFC 5040 message type and returns the transmitted segments with the
/// expected (opcode, tagged, QN, RsvdULP word).
/// (opcode, tagged, QN, RsvdULP word) expected for each transmitted message.
type Expected = [(u8, bool, Option<u32>, u32); 6];

fn one_of_each() -> (Vec<Vec<u8>>, Expected) {
    let inv = STag(0x00AB_CD01);
    let mut s = Side::new(cfg(1));
    let a = s.region(0, 8192, all(), 1);
    let ops = vec![
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: a,
                to: 0,
                len: 5,
            }),
            remote: RemoteBuf {
                stag: STag(0x100),
                to: 0,
            },
        },
        SendOp::Read {
            sink: RemoteBuf { stag: a, to: 0 },
            remote: RemoteBuf {
                stag: STag(0x200),
                to: 0,
            },
            len: 5,
        },
        SendOp::Send {
            sgl: iwarp::mem::Sgl::new(),
            solicited: false,
            invalidate: None,
        },
        SendOp::Send {
            sgl: iwarp::mem::Sgl::new(),
            solicited: false,
            invalidate: Some(inv),
        },
        SendOp::Send {
            sgl: iwarp::mem::Sgl::new(),
            solicited: true,
            invalidate: None,
        },
        SendOp::Send {
            sgl: iwarp::mem::Sgl::new(),
            solicited: true,
            invalidate: Some(inv),
        },
    ];
    for (i, op) in ops.into_iter().enumerate() {
        s.engine.post_send(SendWr::new(i as u64, op)).unwrap();
    }
    let segs = s.drain_tx(1500);
    assert_eq!(segs.len(), 6);
    (
        segs,
        [
            (0x0, true, None, 0),
            (0x1, false, Some(1), 0),
            (0x3, false, Some(0), 0),
            (0x4, false, Some(0), inv.0),
            (0x5, false, Some(0), 0),
            (0x6, false, Some(0), inv.0),
        ],
    )
}

#[test]
fn d01_rdmap_control_octet() {
    // RFC 5040 §4.1
    let (segs, want) = one_of_each();
    for (seg, (op, ..)) in segs.iter().zip(want) {
        assert_eq!(seg[1] & 0xC0, 0x40, "RV 01b");
        assert_eq!(seg[1] & 0x30, 0, "reserved bits");
        assert_eq!(seg[1] & 0x0F, op);
    }
}

#[test]
fn d02_opcode_t_bit_and_queue() {
    // RFC 5040 Fig. 4
    let (segs, want) = one_of_each();
    for (seg, (_, tagged, qn, _)) in segs.iter().zip(want) {
        match DdpRepr::parse(&Segment::new_checked(&seg[..]).unwrap()).unwrap() {
            DdpRepr::Tagged(_) => assert!(tagged),
            DdpRepr::Untagged(u) => {
                assert!(!tagged);
                assert_eq!(Some(u.qn), qn);
            }
        }
    }
    // Terminate: QN 2 (see g01).
}

#[test]
fn d03_invalidate_stag_field() {
    // RFC 5040 §4.1, §4.7
    let (segs, want) = one_of_each();
    for (seg, (_, tagged, _, word)) in segs.iter().zip(want) {
        if !tagged {
            assert_eq!(&seg[2..6], &word.to_be_bytes());
        }
    }
}

#[test]
fn d04_bad_rdmap_version() {
    // RFC 5040 §7.2 (SPEC-DIGEST D11)
    let mut s = Side::new(cfg(2));
    let buf = s.region(0, 8192, all(), 0);
    let mut seg = tagged_seg(OP_WRITE, true, buf.0, 0, b"x");
    seg[1] = (seg[1] & 0x3F) | 0x80; // RV 10b
    expect_refused(&mut s, &seg, TerminateCause::RDMAP_INVALID_VERSION);
    assert_eq!(s.bytes(0, 1), &[0]);
}

#[test]
fn d05_extension_opcode_without_extensions() {
    // RFC 5040 Fig. 4, §7.2
    for op in 0x8..=0xF {
        let mut s = Side::new(cfg(2));
        let buf = s.region(0, 8192, all(), 0);
        s.post_recv(1, buf, 0, 100);
        let seg = untagged_seg(op, true, 0, 0, 1, 0, &[0; 8]);
        s.receive(&seg);
        let t = expect_terminate(&mut s);
        assert_eq!(
            t.cause,
            TerminateCause::RDMAP_UNEXPECTED_OPCODE,
            "opcode {op:#x}"
        );
        assert_copy_d(&t, &seg);
    }
}

#[test]
fn d06_reserved_bits_and_stray_invalidate_stag_ignored() {
    // RFC 5040 §4.1
    let mut s = Side::new(cfg(2));
    let buf = s.region(0, 8192, all(), 0);
    let victim = s.region(8192, 64, all(), 0);
    s.post_recv(1, buf, 0, 100);
    s.post_recv(2, buf, 100, 100);
    let mut seg = untagged_seg(OP_SEND, true, victim.0, 0, 1, 0, b"a");
    seg[1] |= 0x30;
    s.receive(&seg);
    s.receive(&untagged_seg(OP_SEND_SE, true, victim.0, 0, 2, 0, b"b"));
    let c = s.completions();
    assert_eq!(c.len(), 2);
    assert!(c
        .iter()
        .all(|c| c.status == CompletionStatus::Success && c.invalidated.is_none()));
    assert!(s.mem.is_valid(victim));
    assert!(s.drain_tx(1500).is_empty());
}

// ---------------------------------------------------------------- E

fn responder() -> (Side, STag) {
    let mut s = Side::new(cfg(2));
    let src = s.region(0, 4096, all(), 0);
    s.write_bytes(0, &pattern(4096, 5));
    (s, src)
}

#[test]
fn e01_read_request_layout() {
    // RFC 5040 §4.4, App. A.2
    let mut s = Side::new(cfg(1));
    let a = s.region(0, 4096, all(), 0);
    s.engine
        .post_send(read_wr(1, a, 0x1122, STag(0x0000_7700), 0x3344, 999))
        .unwrap();
    let segs = s.drain_tx(1500);
    assert_eq!(segs.len(), 1);
    let g = &segs[0];
    assert_eq!(g.len(), 46);
    let DdpRepr::Untagged(u) = DdpRepr::parse(&Segment::new_checked(&g[..]).unwrap()).unwrap()
    else {
        panic!()
    };
    assert!(u.last);
    assert_eq!((u.mo, u.qn, u.msn), (0, 1, 1));
    let r = ReadRequestRepr::parse(&ReadRequest::new_checked(&g[18..]).unwrap()).unwrap();
    assert_eq!(
        r,
        ReadRequestRepr {
            sink_stag: a.0,
            sink_to: 0x1122,
            size: 999,
            src_stag: 0x7700,
            src_to: 0x3344
        }
    );
}

#[test]
fn e02_read_response_uses_sink_stag_and_to() {
    // RFC 5040 §4.4, §5.2.2
    let (mut s, src) = responder();
    s.receive(&read_req_seg(
        1,
        &read_req(0xABCD_EF00, 5000, 3000, src.0, 100),
    ));
    let segs = s.drain_tx(1000);
    let mut total = 0;
    let mut expect_to = 5000u64;
    for g in &segs {
        let DdpRepr::Tagged(t) = DdpRepr::parse(&Segment::new_checked(&g[..]).unwrap()).unwrap()
        else {
            panic!()
        };
        assert_eq!(g[1] & 0x0F, 0x2);
        assert_eq!(t.stag, 0xABCD_EF00);
        assert_eq!(t.to, expect_to);
        expect_to += (g.len() - 14) as u64;
        total += g.len() - 14;
    }
    assert_eq!(total, 3000);
    let body: Vec<u8> = segs.iter().flat_map(|g| g[14..].to_vec()).collect();
    assert_eq!(body, pattern(4096, 5)[100..3100].to_vec());
}

#[test]
fn e03_zero_length_read_not_validated() {
    // RFC 5040 §5.2.1
    let (mut s, _) = responder();
    s.receive(&read_req_seg(
        1,
        &read_req(0x500, 7, 0, 0xDEAD_0000, u64::MAX),
    ));
    let segs = s.drain_tx(1500);
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].len(), 14);
    assert_eq!(segs[0][1] & 0x0F, 0x2);
    assert!(segs[0][0] & 0x40 != 0);
    assert!(s.engine.local_terminate().is_none());
}

fn read_error(
    src_stag: u32,
    src_to: u64,
    size: u32,
    setup: impl FnOnce(&mut Side) -> u32,
) -> (TerminateRepr, Vec<u8>) {
    let (mut s, _) = responder();
    let stag = if src_stag == 0 {
        setup(&mut s)
    } else {
        src_stag
    };
    let rr = read_req(0x900, 0, size, stag, src_to);
    let seg = read_req_seg(1, &rr);
    s.receive(&seg);
    let t = expect_terminate(&mut s);
    assert_copy_d(&t, &seg);
    assert_eq!(
        t.rdma_header.map(|h| h.to_vec()),
        Some(rr.clone()),
        "copy(D+R) original header"
    );
    (t, seg)
}

#[test]
fn e04_read_unknown_src_stag() {
    // RFC 5040 §7.1 case 3, §7.2 4a
    let (t, _) = read_error(0x0033_3300, 0, 10, |_| 0);
    assert_eq!(t.cause, TerminateCause::RDMAP_INVALID_STAG);
}

#[test]
fn e05_read_src_stag_other_pd_or_stream() {
    // RFC 5040 §7.2 4b
    let (t, _) = read_error(0, 0, 10, |s| {
        s.region_spec(RegionSpec::new(8192, 100, all(), PdId(77))).0
    });
    assert_eq!(t.cause, TerminateCause::RDMAP_STAG_NOT_ASSOCIATED);
    let (t, _) = read_error(0, 0, 10, |s| {
        let mut spec = RegionSpec::new(8192, 100, all(), PdId(1));
        spec.stream = Some(StreamId(999));
        s.region_spec(spec).0
    });
    assert_eq!(t.cause, TerminateCause::RDMAP_STAG_NOT_ASSOCIATED);
}

#[test]
fn e06_read_bounds_and_wrap() {
    // RFC 5040 §7.2 4c–4e
    let (t, _) = read_error(0, 4096 - 9, 10, |s| s.region(8192, 4096, all(), 0).0);
    assert_eq!(t.cause, TerminateCause::RDMAP_BASE_BOUNDS);
    let (t, _) = read_error(0, u64::MAX - 4, 10, |s| s.region(8192, 4096, all(), 0).0);
    assert_eq!(t.cause, TerminateCause::RDMAP_TO_WRAP);
}

#[test]
fn e07_read_without_remote_read() {
    // RFC 5040 Fig. 9; VERBS-00 §7.4.2
    let (t, _) = read_error(0, 0, 10, |s| {
        s.region(
            8192,
            100,
            Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            0,
        )
        .0
    });
    assert_eq!(t.cause, TerminateCause::RDMAP_ACCESS_RIGHTS);
}

#[test]
fn e08_failed_read_response_reports_progress() {
    // RFC 5040 §4.8: SinkTO + N, SrcTO + N, size − N.
    let (mut s, src) = responder();
    let rr = read_req(0x900, 1000, 3000, src.0, 100);
    s.receive(&read_req_seg(1, &rr));
    let first = s.engine.poll_segment(now(), 1014, &s.mem).unwrap();
    assert_eq!(first.payload().len(), 1000);
    s.mem.invalidate_local(src).unwrap();
    let t = expect_terminate_cause(&mut s, TerminateCause::RDMAP_INVALID_STAG);
    let h = t.rdma_header.unwrap();
    let r = ReadRequestRepr::parse(&ReadRequest::new_checked(&h[..]).unwrap()).unwrap();
    assert_eq!(
        r,
        ReadRequestRepr {
            sink_stag: 0x900,
            sink_to: 2000,
            size: 2000,
            src_stag: src.0,
            src_to: 1100
        }
    );
}

#[test]
fn e09_read_responses_in_request_order() {
    // RFC 5040 §5.2.2, §5.5 rule 20
    let (mut s, src) = responder();
    for i in 0..3u32 {
        s.receive(&read_req_seg(
            i + 1,
            &read_req(0x100 * (i + 1), 0, 600, src.0, 0),
        ));
    }
    let stags: Vec<u32> = s
        .drain_tx(400)
        .iter()
        .map(|g| u32::from_be_bytes([g[2], g[3], g[4], g[5]]))
        .collect();
    let mut dedup = stags.clone();
    dedup.dedup();
    assert_eq!(dedup, vec![0x100, 0x200, 0x300]);
}

#[test]
fn e10_write_then_read_returns_written_data() {
    // RFC 5040 §5.5 rules 12, 17
    let mut p = Pair::new(cfg(1), cfg(2), 700);
    let a = p.a.region(0, 8192, all(), 0);
    let b = p.b.region(0, 8192, all(), 0);
    p.a.write_bytes(0, &pattern(3000, 42));
    p.a.engine
        .post_send(write_wr(1, a, 0, 3000, b, 100))
        .unwrap();
    p.a.engine
        .post_send(read_wr(2, a, 4000, b, 100, 3000))
        .unwrap();
    p.pump_shuffled(9);
    assert_eq!(p.a.bytes(4000, 3000), &pattern(3000, 42)[..]);
}

#[test]
fn e11_ord_limits_outstanding_reads() {
    // RFC 5040 §6.1; VERBS-00 §6.5
    let mut ca = cfg(1);
    ca.ord = 2;
    let mut p = Pair::new(ca, cfg(2), 1500);
    let a = p.a.region(0, 8192, all(), 0);
    let b = p.b.region(0, 8192, all(), 0);
    for i in 0..4 {
        p.a.engine
            .post_send(read_wr(i, a, 100 * i, b, 0, 50))
            .unwrap();
    }
    let mut done = Vec::new();
    for _ in 0..10 {
        let ab = p.a.drain_tx(1500);
        let reqs = ab.iter().filter(|g| g[1] & 0x0F == 1).count();
        assert!(p.a.engine.outstanding_requests() <= 2);
        assert!(reqs <= 2);
        for g in &ab {
            p.b.receive(g);
        }
        for g in p.b.drain_tx(1500) {
            p.a.receive(&g);
        }
        done.extend(p.a.completions().into_iter().map(|c| c.wr_id));
    }
    assert_eq!(done, vec![0, 1, 2, 3]);
}

#[test]
fn e12_ird_exceeded() {
    // RFC 5041 §7.1 check 5; VERBS-00 Fig. 24
    let mut c = cfg(2);
    c.ird = 2;
    let mut s = Side::new(c);
    let src = s.region(0, 4096, all(), 0);
    for i in 1..=2 {
        s.receive(&read_req_seg(i, &read_req(0x100, 0, 10, src.0, 0)));
    }
    let third = read_req_seg(3, &read_req(0x100, 0, 10, src.0, 0));
    let t = expect_refused(&mut s, &third, TerminateCause::DDP_MSN_RANGE);
    assert_eq!(
        &t.ddp_header.unwrap().as_bytes()[6..10],
        &1u32.to_be_bytes()
    );
}

#[test]
fn e12b_ird_slots_free_after_response() {
    // RFC 5040 §5.2.2: slots are reused once the responses were generated.
    let mut c = cfg(2);
    c.ird = 1;
    let mut s = Side::new(c);
    let src = s.region(0, 4096, all(), 0);
    for i in 1..=5 {
        s.receive(&read_req_seg(i, &read_req(0x100, 0, 10, src.0, 0)));
        assert_eq!(s.drain_tx(1500).len(), 1);
    }
    assert!(s.engine.local_terminate().is_none());
}

#[test]
fn e13_read_with_ord_zero() {
    // VERBS-00 §8.2.2 rule 18, Fig. 36
    let mut c = cfg(1);
    c.ord = 0;
    let mut s = Side::new(c);
    let a = s.region(0, 4096, all(), 0);
    s.engine
        .post_send(read_wr(5, a, 0, STag(0x100), 0, 10))
        .unwrap();
    assert!(s.drain_tx(1500).is_empty());
    let c = s.completions();
    assert_eq!(
        (c[0].wr_id, c[0].status),
        (5, CompletionStatus::ZeroReadResources)
    );
}

#[test]
fn e14_read_response_into_buffer_without_remote_write() {
    // VERBS-00 §7.4.2 (SPEC-DIGEST D10): 1/1/00 at the requester.
    let mut p = Pair::new(cfg(1), cfg(2), 1500);
    let a =
        p.a.region(0, 4096, Access::LOCAL_READ | Access::LOCAL_WRITE, 0);
    let b = p.b.region(0, 4096, all(), 9);
    p.a.engine.post_send(read_wr(1, a, 0, b, 0, 10)).unwrap();
    for g in p.a.drain_tx(1500) {
        p.b.receive(&g);
    }
    for g in p.b.drain_tx(1500) {
        p.a.receive(&g);
    }
    expect_terminate_cause(&mut p.a, TerminateCause::DDP_INVALID_STAG);
    assert_eq!(p.a.bytes(0, 10), &[0; 10]);
    let c = p.a.completions();
    assert_eq!(c[0].status, CompletionStatus::Flushed);
}

// ---------------------------------------------------------------- F

fn inval_side() -> (Side, STag) {
    let mut s = Side::new(cfg(2));
    let buf = s.region(0, 4096, all(), 0);
    s.post_recv(3, buf, 0, 100);
    (s, buf)
}

#[test]
fn f01_send_with_invalidate() {
    // RFC 5040 §5.3; VERBS-00 §8.2.2.1 item 1
    let (mut s, _) = inval_side();
    let victim = s.region(8192, 64, all(), 0);
    s.receive(&untagged_seg(
        OP_SEND_INV,
        true,
        victim.0,
        0,
        1,
        0,
        b"payload",
    ));
    let c = s.completions();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].invalidated, Some(victim));
    assert!(!s.mem.is_valid(victim));
    assert_eq!(s.bytes(0, 7), b"payload");
}

#[test]
fn f02_write_after_remote_invalidate() {
    // VERBS-00 §7.8
    let (mut s, _) = inval_side();
    let victim = s.region(8192, 64, all(), 0);
    s.receive(&untagged_seg(OP_SEND_INV, true, victim.0, 0, 1, 0, b""));
    s.receive(&tagged_seg(OP_WRITE, true, victim.0, 0, b"x"));
    expect_terminate_cause(&mut s, TerminateCause::DDP_INVALID_STAG);
    assert_eq!(s.bytes(8192, 1), &[0]);
}

#[test]
fn f03_cannot_invalidate() {
    // RFC 5040 §5.3; VERBS-00 §7.8 (SPEC-DIGEST D6)
    let cases: [fn(&mut Side) -> STag; 3] = [
        |s| s.region_spec(RegionSpec::new(8192, 64, all(), PdId(5))),
        |s| {
            let mut spec = RegionSpec::new(8192, 64, all(), PdId(1));
            spec.shared = true;
            s.region_spec(spec)
        },
        |_| STag(0),
    ];
    for make in cases {
        let (mut s, _) = inval_side();
        let victim = make(&mut s);
        let valid_before = s.mem.is_valid(victim);
        let seg = untagged_seg(OP_SEND_INV, true, victim.0, 0, 1, 0, b"p");
        expect_refused(&mut s, &seg, TerminateCause::RDMAP_PROT_CANNOT_INVALIDATE);
        assert_eq!(s.mem.is_valid(victim), valid_before);
        let c = s.completions();
        assert_eq!(c[0].status, CompletionStatus::InvalidateFailed);
    }
}

#[test]
fn f04_invalidate_local_only_stag() {
    // VERBS-00 §7.4.2, Fig. 23
    let (mut s, _) = inval_side();
    let victim = s.region(8192, 64, Access::LOCAL_READ | Access::LOCAL_WRITE, 0);
    let seg = untagged_seg(OP_SEND_INV, true, victim.0, 0, 1, 0, b"p");
    expect_refused(&mut s, &seg, TerminateCause::RDMAP_ACCESS_RIGHTS);
    assert!(s.mem.is_valid(victim));
}

#[test]
fn f05_solicited_event_only_for_se_variants() {
    // RFC 5040 §5.3
    let mut s = Side::new(cfg(2));
    let buf = s.region(0, 4096, all(), 0);
    for i in 0..4 {
        s.post_recv(i, buf, 100 * i, 100);
    }
    let victim = s.region(8192, 64, all(), 0);
    s.receive(&untagged_seg(OP_SEND, true, 0, 0, 1, 0, b"a"));
    assert!(s.events().is_empty());
    s.receive(&untagged_seg(OP_SEND_SE, true, 0, 0, 2, 0, b"b"));
    assert_eq!(s.events(), vec![Event::SolicitedEvent]);
    s.receive(&untagged_seg(OP_SEND_INV, true, victim.0, 0, 3, 0, b"c"));
    assert!(s.events().is_empty());
    let victim2 = s.region(9000, 64, all(), 0);
    s.receive(&untagged_seg(0x6, true, victim2.0, 0, 4, 0, b"d"));
    assert_eq!(s.events(), vec![Event::SolicitedEvent]);
    let sol: Vec<bool> = s.completions().iter().map(|c| c.solicited).collect();
    assert_eq!(sol, vec![false, true, false, true]);
}

#[test]
fn f06_error_completion_is_reported() {
    // VERBS-00 §8.2.5: an error WC is produced (the verbs layer arms notification on it).
    let (mut s, _) = inval_side();
    s.receive(&untagged_seg(OP_SEND, true, 0, 0, 1, 0, &[0; 200]));
    let c = s.completions();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].queue, WorkQueue::Recv);
    assert_eq!(c[0].status, CompletionStatus::RecvOverflow);
    assert_eq!(c[0].opcode, CompletionOpcode::Recv);
}

// ---------------------------------------------------------------- reordering and fences

#[test]
fn f02_reordered_write_after_remote_invalidate() {
    // VERBS-00 §7.8 with out-of-order arrival: the Write placed early is checked again when
    // it is reached in order, after the Send with Invalidate.
    let (mut s, _) = inval_side();
    let victim = s.region(8192, 64, all(), 0);
    let inv = untagged_seg(OP_SEND_INV, true, victim.0, 0, 1, 0, b"");
    let write = tagged_seg(OP_WRITE, true, victim.0, 0, b"x");
    s.engine
        .handle_ddp_segment(now(), SegmentPos::index(1), &write, &mut s.mem);
    s.engine
        .handle_ddp_segment(now(), SegmentPos::index(0), &inv, &mut s.mem);
    let t = expect_terminate_cause(&mut s, TerminateCause::DDP_INVALID_STAG);
    assert_copy_d(&t, &write);
}

#[test]
fn early_segment_failing_validation_is_retried_in_order() {
    // RFC 5041 §5.3: an early Send whose buffer is posted before the gap closes.
    let mut s = Side::new(cfg(2));
    let buf = s.region(0, 4096, all(), 0);
    s.post_recv(1, buf, 0, 100);
    let m1 = untagged_seg(OP_SEND, true, 0, 0, 1, 0, b"one");
    let m2 = untagged_seg(OP_SEND, true, 0, 0, 2, 0, b"two");
    s.engine
        .handle_ddp_segment(now(), SegmentPos::index(1), &m2, &mut s.mem);
    assert!(
        s.drain_tx(1500).is_empty(),
        "no error reported out of order"
    );
    s.post_recv(2, buf, 100, 100);
    s.engine
        .handle_ddp_segment(now(), SegmentPos::index(0), &m1, &mut s.mem);
    assert!(s.drain_tx(1500).is_empty());
    let ids: Vec<u64> = s.completions().iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![1, 2]);
    assert_eq!(s.bytes(100, 3), b"two");
}

#[test]
fn held_segment_limit_defers() {
    // RFC 5041 App. A: bounded buffering of early segments; the LLP keeps the rest.
    let mut c = cfg(2);
    c.max_held_segments = 2;
    let mut s = Side::new(c);
    let buf = s.region(0, 4096, all(), 0);
    let w = |i: u64| tagged_seg(OP_WRITE, true, buf.0, i, &[i as u8]);
    let mut h = |i: u64| {
        s.engine
            .handle_ddp_segment(now(), SegmentPos::index(i), &w(i), &mut s.mem)
    };
    assert_eq!(h(1), Handled::Accepted);
    assert_eq!(h(2), Handled::Accepted);
    assert_eq!(h(3), Handled::Deferred);
    assert_eq!(h(0), Handled::Accepted);
    assert_eq!(h(3), Handled::Accepted);
    assert_eq!(s.bytes(0, 4), &[0, 1, 2, 3]);
}

#[test]
fn k05_read_fence_holds_later_send() {
    // VERBS-00 §8.2.2.2; RFC 5040 App. B footnote 2
    let (mut p, a, b) = Pair::with_regions(1, 2);
    p.b.post_recv(1, b, 4000, 100);
    p.a.engine
        .post_send(read_wr(1, a, 1000, b, 0, 100))
        .unwrap();
    let mut fenced = send_wr(2, a, 1000, 100);
    fenced.read_fence = true;
    p.a.engine.post_send(fenced).unwrap();
    let first = p.a.drain_tx(1500);
    assert_eq!(first.len(), 1, "only the Read Request before the response");
    assert_eq!(first[0][1] & 0x0F, 0x1);
    p.b.receive(&first[0]);
    p.pump();
    // The Send carried the data the Read brought back.
    assert_eq!(p.b.bytes(4000, 100), &[2; 100][..]);
    let ids: Vec<u64> = p.a.completions().iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn local_fence_waits_for_earlier_completions() {
    // VERBS-00 §8.2.2.2
    let (mut p, a, b) = Pair::with_regions(1, 2);
    p.a.engine.post_send(read_wr(1, a, 0, b, 0, 10)).unwrap();
    let mut w = write_wr(2, a, 0, 10, b, 100);
    w.local_fence = true;
    p.a.engine.post_send(w).unwrap();
    assert_eq!(p.a.drain_tx(1500).len(), 1);
    assert_eq!(p.a.engine.posted_recv_count(), 0);
    p.pump();
    assert_eq!(p.b.bytes(100, 10), &[2; 10][..]);
}

#[test]
fn positions_with_holes_deliver_on_in_order_position() {
    // RFC 5041 §3 item 5: the LLP supplies the order; with MPA markers between FPDUs the
    // stream offsets of consecutive segments are not contiguous.
    let mut s = Side::new(cfg(2));
    // The first FPDU follows the MPA Reply at stream offset 1000.
    s.engine = iwarp::rdmap::Engine::with_start_position(cfg(2), 1000);
    let buf = s.region(0, 4096, all(), 0);
    for i in 0..3 {
        s.post_recv(i, buf, 100 * i, 100);
    }
    let seg = |msn: u32| untagged_seg(OP_SEND, true, 0, 0, msn, 0, &[msn as u8; 4]);
    let pos = |start, end| SegmentPos { start, end };
    s.engine
        .handle_ddp_segment(now(), pos(1000, 1030), &seg(1), &mut s.mem);
    assert_eq!(s.completions().len(), 1);
    // Next FPDU sits behind a 4-octet marker: held until the LLP says it is in order.
    s.engine
        .handle_ddp_segment(now(), pos(1034, 1064), &seg(2), &mut s.mem);
    assert!(s.completions().is_empty());
    s.engine.handle_in_order_position(now(), 1064, &mut s.mem);
    assert_eq!(s.completions()[0].wr_id, 1);
    // Contiguous again.
    s.engine
        .handle_ddp_segment(now(), pos(1064, 1094), &seg(3), &mut s.mem);
    assert_eq!(s.completions()[0].wr_id, 2);
    assert_eq!(s.engine.next_segment_position(), 1094);
    // Old positions are duplicates.
    assert_eq!(
        s.engine
            .handle_ddp_segment(now(), pos(1034, 1064), &seg(2), &mut s.mem),
        Handled::Duplicate
    );
}

#[test]
fn d11_rdma_consortium_version_when_configured() {
    // RFC 5040 §4.1 (SPEC-DIGEST D11): RV 00b both ways when negotiated so.
    let mut c1 = cfg(1);
    c1.rdmap_version = 0;
    let mut c2 = cfg(2);
    c2.rdmap_version = 0;
    let mut p = Pair::new(c1, c2, 1500);
    let a = p.a.region(0, 4096, all(), 1);
    let b = p.b.region(0, 4096, all(), 0);
    p.b.post_recv(1, b, 0, 100);
    p.a.engine.post_send(send_wr(1, a, 0, 10)).unwrap();
    let segs = p.a.drain_tx(1500);
    assert_eq!(segs[0][1] & 0xC0, 0x00);
    p.b.receive(&segs[0]);
    assert_eq!(p.b.completions().len(), 1);
    // An RV 01b message is then a version error.
    let seg = untagged_seg(OP_SEND, true, 0, 0, 2, 0, b"x");
    p.b.receive(&seg);
    expect_terminate_cause(&mut p.b, TerminateCause::RDMAP_INVALID_VERSION);
}
