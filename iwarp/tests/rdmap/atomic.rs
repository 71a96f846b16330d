//! SPEC-DIGEST §8 group H: RFC 7306 atomics and immediate data (EXT-01), responder checks of
//! SPEC-DIGEST §3.9.

use crate::common::*;
use iwarp::ddp::SegmentPos;
use iwarp::mem::{Access, PdId, RegionSpec, STag, Sge, SimpleMemory};
use iwarp::rdmap::{CompletionOpcode, Engine, PostError, RemoteBuf, SendOp, SendWr};
use iwarp::wire::atomic::{AtomicOp, AtomicRequestRepr, AtomicResponseRepr};
use iwarp::wire::ddp::{DdpRepr, Segment};
use iwarp::wire::terminate::TerminateCause;

fn atomic_req(r: AtomicRequestRepr) -> Vec<u8> {
    let mut b = [0u8; 52];
    r.emit(&mut b).unwrap();
    b.to_vec()
}

fn fetch_add_wr(id: u64, remote: RemoteBuf, add: u64, result: Sge) -> SendWr {
    SendWr::new(
        id,
        SendOp::Atomic {
            op: AtomicOp::FetchAdd,
            remote,
            add_swap: add,
            add_swap_mask: 0,
            compare: 0,
            compare_mask: u64::MAX,
            result,
        },
    )
}

fn read_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_ne_bytes(a)
}

#[test]
fn h01_atomic_request_on_the_wire() {
    // EXT-01 §5.2.1
    let mut s = Side::new(cfg_ext(1));
    let a = s.region(0, 64, all(), 0);
    s.engine
        .post_send(fetch_add_wr(
            1,
            RemoteBuf {
                stag: STag(0x4400),
                to: 16,
            },
            3,
            Sge {
                stag: a,
                to: 0,
                len: 8,
            },
        ))
        .unwrap();
    let segs = s.drain_tx(1500);
    assert_eq!(segs.len(), 1);
    let g = &segs[0];
    assert_eq!(g.len(), 70);
    assert_eq!(g[1], 0x4A);
    let DdpRepr::Untagged(u) = DdpRepr::parse(&Segment::new_checked(&g[..]).unwrap()).unwrap()
    else {
        panic!()
    };
    assert_eq!((u.qn, u.msn, u.mo, u.last), (1, 1, 0, true));
    assert_eq!(&g[18..21], &[0, 0, 0]);
    assert_eq!(g[21], 0x00);
    assert_eq!(&g[26..30], &0x4400u32.to_be_bytes());
}

#[test]
fn h06_misaligned_target() {
    // EXT-01 §5.1, §8.2 (SPEC-DIGEST D20)
    let mut s = Side::new(cfg_ext(2));
    let t = s.region(0, 64, all(), 0x11);
    let before = s.mem.bytes().to_vec();
    let seg = untagged_seg(
        0xA,
        true,
        0,
        1,
        1,
        0,
        &atomic_req(AtomicRequestRepr::fetch_add(9, t.0, 4, 1, 0)),
    );
    s.receive(&seg);
    let term = expect_terminate_cause(&mut s, TerminateCause::RDMAP_CATASTROPHIC_STREAM);
    assert_eq!(term.ddp_header.unwrap().as_bytes(), &seg[..18]);
    assert!(term.rdma_header.is_none());
    assert_eq!(s.mem.bytes(), &before[..]);
    // A region whose arena offset is odd: TO 0 is aligned, the host address is not.
    let mut s = Side::new(cfg_ext(2));
    let t = s.region(3, 64, all(), 0x11);
    s.receive(&untagged_seg(
        0xA,
        true,
        0,
        1,
        1,
        0,
        &atomic_req(AtomicRequestRepr::fetch_add(9, t.0, 0, 1, 0)),
    ));
    expect_terminate_cause(&mut s, TerminateCause::RDMAP_CATASTROPHIC_STREAM);
}

#[test]
fn h07_responses_echo_ids_in_order() {
    // EXT-01 §5.2.1 items 7–8, §5.2.2 (SPEC-DIGEST D1: QN 3)
    let mut s = Side::new(cfg_ext(2));
    let t = s.region(0, 64, all(), 0);
    for (i, id) in [0xAAAA_0001u32, 0x0000_0007, 0x1234_5678]
        .into_iter()
        .enumerate()
    {
        s.receive(&untagged_seg(
            0xA,
            true,
            0,
            1,
            i as u32 + 1,
            0,
            &atomic_req(AtomicRequestRepr::fetch_add(id, t.0, 8, 1, 0)),
        ));
    }
    let segs = s.drain_tx(1500);
    assert_eq!(segs.len(), 3);
    let mut ids = Vec::new();
    for (i, g) in segs.iter().enumerate() {
        assert_eq!(g.len(), 30);
        assert_eq!(g[1] & 0x0F, 0xB);
        let DdpRepr::Untagged(u) = DdpRepr::parse(&Segment::new_checked(&g[..]).unwrap()).unwrap()
        else {
            panic!()
        };
        assert_eq!((u.qn, u.msn), (3, i as u32 + 1));
        let r = AtomicResponseRepr::parse(&g[18..]).unwrap();
        assert_eq!(r.original, i as u64);
        ids.push(r.request_id);
    }
    assert_eq!(ids, vec![0xAAAA_0001, 7, 0x1234_5678]);
    assert_eq!(read_u64(s.bytes(8, 8)), 3);
}

#[test]
fn h08_atomics_from_two_streams_on_one_memory() {
    // EXT-01 §5.3: 2 × 1000 FetchAdd(+1) on the same address → +2000.
    let mut shared = SimpleMemory::with_heap(4096);
    let target = shared
        .register(RegionSpec::new(64, 8, all(), PdId(1)))
        .unwrap();
    let mut responders = [Engine::new(cfg_ext(10)), Engine::new(cfg_ext(11))];
    let mut requesters: Vec<Side> = (0..2).map(|i| Side::new(cfg_ext(20 + i))).collect();
    let results: Vec<STag> = requesters
        .iter_mut()
        .map(|r| r.region(0, 8, all(), 0))
        .collect();
    let mut pos = [[0u64; 2]; 2];
    for round in 0..1000u64 {
        for k in 0..2 {
            requesters[k]
                .engine
                .post_send(fetch_add_wr(
                    round,
                    RemoteBuf {
                        stag: target,
                        to: 0,
                    },
                    1,
                    Sge {
                        stag: results[k],
                        to: 0,
                        len: 8,
                    },
                ))
                .unwrap();
        }
        for k in 0..2 {
            for g in requesters[k].drain_tx(1500) {
                responders[k].handle_ddp_segment(
                    now(),
                    SegmentPos::index(pos[k][0]),
                    &g,
                    &mut shared,
                );
                pos[k][0] += 1;
            }
            while let Some(g) = responders[k].poll_segment(now(), 1500, &shared) {
                requesters[k].receive(&g.to_vec());
            }
        }
    }
    assert_eq!(read_u64(&shared.bytes()[64..72]), 2000);
    for r in &mut requesters {
        let c = r.completions();
        assert_eq!(c.len(), 1000);
        assert!(c
            .iter()
            .all(|c| c.opcode == CompletionOpcode::Atomic(AtomicOp::FetchAdd)));
    }
}

#[test]
fn h09_immediate_data_format_and_length_check() {
    // EXT-01 §6.2, §6.3
    let mut s = Side::new(cfg_ext(1));
    s.engine
        .post_send(SendWr::new(
            1,
            SendOp::Immediate {
                data: [1, 2, 3, 4, 5, 6, 7, 8],
                solicited: true,
            },
        ))
        .unwrap();
    let g = s.drain_tx(1500).remove(0);
    assert_eq!(g.len(), 26);
    assert_eq!(g[1], 0x49);
    assert_eq!(&g[6..10], &0u32.to_be_bytes());
    assert_eq!(&g[18..], &[1, 2, 3, 4, 5, 6, 7, 8]);
    // Receiver: consumes one WQE; a 7- or 9-octet payload is rejected.
    for (len, ok) in [(8usize, true), (7, false), (9, false)] {
        let mut r = Side::new(cfg_ext(2));
        let b = r.region(0, 64, all(), 0);
        r.post_recv(5, b, 0, 64);
        r.receive(&untagged_seg(0x8, true, 0, 0, 1, 0, &vec![0x33; len]));
        if ok {
            let c = r.completions();
            assert_eq!(c[0].immediate, Some([0x33; 8]));
            assert!(r.drain_tx(1500).is_empty());
        } else {
            expect_terminate_cause(&mut r, TerminateCause::RDMAP_CATASTROPHIC_STREAM);
        }
    }
}

#[test]
fn atomic_responder_checks() {
    // SPEC-DIGEST §3.9 items 3–5 (D23: remote read and remote write needed)
    let run = |req: Vec<u8>, rights: Access| {
        let mut s = Side::new(cfg_ext(2));
        let t = s.region(0, 64, rights, 0);
        let mut req = req;
        if req.len() >= 12 {
            req[8..12].copy_from_slice(&t.0.to_be_bytes());
        }
        s.receive(&untagged_seg(0xA, true, 0, 1, 1, 0, &req));
        let c = expect_terminate(&mut s).cause;
        assert_eq!(s.bytes(0, 8), &[0; 8]);
        c
    };
    let ok = atomic_req(AtomicRequestRepr::fetch_add(1, 0, 0, 1, 0));
    assert_eq!(
        run(ok.clone(), Access::LOCAL_READ | Access::REMOTE_READ),
        TerminateCause::RDMAP_ACCESS_RIGHTS
    );
    let mut bad_op = ok.clone();
    bad_op[3] = 0x0F;
    assert_eq!(run(bad_op, all()), TerminateCause::RDMAP_UNEXPECTED_OPCODE);
    assert_eq!(
        run(ok[..51].to_vec(), all()),
        TerminateCause::RDMAP_OP_UNSPECIFIED
    );
    let mut oob = ok.clone();
    oob[12..20].copy_from_slice(&64u64.to_be_bytes());
    assert_eq!(run(oob, all()), TerminateCause::RDMAP_BASE_BOUNDS);
}

#[test]
fn extensions_disabled_refuses_posts() {
    // EXT-01 §5: optional support.
    let mut s = Side::new(cfg(1));
    assert_eq!(
        s.engine.post_send(SendWr::new(
            1,
            SendOp::Immediate {
                data: [0; 8],
                solicited: false
            }
        )),
        Err(PostError::ExtensionsDisabled)
    );
}

#[test]
fn the_remote_atomic_right_admits_an_atomic_request() {
    // RFC 7306 extends the access rights with remote atomic (what rdma-core applications
    // grant with IBV_ACCESS_REMOTE_ATOMIC); a target with it and without remote read and
    // write is updated and answered. Without it, D23's remote read + write rule applies.
    let mut s = Side::new(cfg_ext(2));
    let t = s.region(
        0,
        64,
        Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_ATOMIC,
        0,
    );
    s.receive(&untagged_seg(
        0xA,
        true,
        0,
        1,
        1,
        0,
        &atomic_req(AtomicRequestRepr::fetch_add(7, t.0, 0, 5, 0)),
    ));
    assert_eq!(read_u64(s.bytes(0, 8)), 5);
    let out = s.drain_tx(1500);
    assert_eq!(out.len(), 1, "one Atomic Response");
}
