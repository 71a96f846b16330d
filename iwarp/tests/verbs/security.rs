//! The 30 security requirements of SPEC-DIGEST §4 (RFC 5040 §8.1, RFC 5041 §8, VERBS-00)
//! as negative tests against the verbs resource model. Remote accesses enter where the
//! RDMAP/DDP engine enters: DDP tagged placement, Read Request source resolution and
//! remote invalidation through the `MemoryTable` the verbs layer implements.

use crate::common::*;
use iwarp::mem::{MemoryTable, Resolved};
use iwarp::rdmap::{CompletionStatus as EngineStatus, WorkQueue};
use iwarp::verbs::*;
use iwarp::wire::terminate::TerminateCause as T;

const VA: u64 = 0x4000_0000;
const GUARD: u8 = 0xEE;

/// A QP in RTS and a one-page all-rights MR in the middle of the backend, everything
/// else filled with guard octets.
fn setup() -> (Fx, STag) {
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    let mr = fx.reg_mr(8 * PAGE, PAGE, VA, all_rights());
    fill(&mut fx.rnic, GUARD);
    (fx, mr)
}

/// Registers the first page as a bindable region at `va` and binds a new window (key `key`)
/// over its first `len` octets on the fixture's QP; returns the region and the window.
fn bind_window(
    fx: &mut Fx,
    va: u64,
    key: u8,
    len: u64,
    zero_based: bool,
    access: Access,
) -> (STag, STag) {
    let mr = fx.reg_mr(0, PAGE, va, all_rights() | Access::BIND);
    let mw = fx.rnic.alloc_mw(fx.pd).unwrap();
    let w = STag::new(mw.index(), key);
    run_sq(
        &mut fx.rnic,
        fx.qp,
        SendWr::new(
            1,
            SqOp::Bind(BindSpec {
                mw: w,
                mr,
                mr_to: va,
                len,
                zero_based,
                access,
            }),
        ),
    );
    (mr, w)
}

/// Fast-Register of `stag` over backend page 0, zero-based.
fn fast_reg_page0(wr_id: u64, stag: STag, access: Access) -> SendWr {
    SendWr::new(
        wr_id,
        SqOp::FastRegister(FastRegSpec {
            stag,
            pbl: PageList::contiguous(0, PAGE, PAGE),
            base: TaggedBase::ZeroBased,
            access,
        }),
    )
}

/// A peer's Send with Invalidate of `stag` on the fixture's QP fails with `cause`; the
/// STag stays Valid.
fn assert_remote_invalidate_refused(fx: &mut Fx, stag: STag, cause: T) {
    assert_eq!(peer_send_inv(&mut fx.rnic, fx.pd, fx.qp, stag), Err(cause));
    assert_eq!(fx.rnic.query_mr(stag).unwrap().state, StagState::Valid);
}

#[test]
fn sec01_pd_mismatch() {
    // RFC 5040 §8.1.1 item 1; RFC 5041 §8.2
    let (mut fx, mr_a) = setup();
    let pd_b = fx.rnic.alloc_pd(fx.ulp).unwrap();
    let (qp_b, _) = fx.rnic.create_qp(QpInit::new(pd_b, fx.cq, fx.cq)).unwrap();
    assert_eq!(
        peer_write(&mut fx.rnic, pd_b, qp_b, mr_a, VA, b"x"),
        Err(T::DDP_STAG_NOT_ASSOCIATED)
    );
    assert_eq!(
        peer_read(&fx.rnic, pd_b, qp_b, mr_a, VA, 4),
        Err(T::RDMAP_STAG_NOT_ASSOCIATED)
    );
    assert_eq!(touched(&fx.rnic, GUARD), 0);
}

#[test]
fn sec02_window_of_another_stream() {
    // RFC 5040 §8.1.1 item 2; VERBS-00 §7.10.6.2
    let (mut fx, _) = setup();
    let (_, w) = bind_window(
        &mut fx,
        VA,
        1,
        64,
        false,
        Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    let (y, _) = fx.rnic.create_qp(QpInit::new(fx.pd, fx.cq, fx.cq)).unwrap();
    assert_eq!(
        drain(&mut fx.rnic, fx.cq)[0].status,
        CompletionStatus::Success
    );
    fill(&mut fx.rnic, GUARD);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, y, w, VA, b"x"),
        Err(T::DDP_STAG_NOT_ASSOCIATED)
    );
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, y, w, VA, 1),
        Err(T::RDMAP_STAG_NOT_ASSOCIATED)
    );
    assert_eq!(touched(&fx.rnic, GUARD), 0);
}

#[test]
fn sec03_out_of_bounds_and_wrap() {
    // RFC 5040 §8.1.1 item 3; RFC 5041 §7.1 checks 3-5, §8.1
    let (mut fx, mr) = setup();
    let len = PAGE;
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA - 1, b"ab"),
        Err(T::DDP_BASE_BOUNDS)
    );
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + len - 1, b"ab"),
        Err(T::DDP_BASE_BOUNDS)
    );
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, u64::MAX - 15, &[0; 32]),
        Err(T::DDP_TO_WRAP)
    );
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, mr, VA + len - 1, 2),
        Err(T::RDMAP_BASE_BOUNDS)
    );
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, mr, u64::MAX, 2),
        Err(T::RDMAP_TO_WRAP)
    );
    assert_eq!(touched(&fx.rnic, GUARD), 0);
    // The exact edges are fine and write only inside the region.
    peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"F").unwrap();
    peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + len - 1, b"L").unwrap();
    let b = fx.rnic.memory().bytes();
    assert_eq!(b[(8 * PAGE) as usize], b'F');
    assert_eq!(b[(9 * PAGE - 1) as usize], b'L');
    assert_eq!(b[(8 * PAGE - 1) as usize], GUARD);
    assert_eq!(b[(9 * PAGE) as usize], GUARD);
    assert_eq!(touched(&fx.rnic, GUARD), 2);
    // A region that does not end on a page boundary: one octet past it is still mapped
    // memory, and must stay untouched.
    let small = fx.reg_mr(100, 200, VA + 100, all_rights());
    fill(&mut fx.rnic, GUARD);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, small, VA + 299, b"ab"),
        Err(T::DDP_BASE_BOUNDS)
    );
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, small, VA + 99, b"ab"),
        Err(T::DDP_BASE_BOUNDS)
    );
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, small, VA + 250, 51),
        Err(T::RDMAP_BASE_BOUNDS)
    );
    assert_eq!(touched(&fx.rnic, GUARD), 0);
}

#[test]
fn sec04_unbind_and_deallocate_revoke() {
    // RFC 5040 §8.1.1 item 4; VERBS-00 §7.9, §7.10.4
    let (mut fx, mr) = setup();
    let (win_mr, w) = bind_window(&mut fx, 0x9000_0000, 7, 128, true, Access::REMOTE_WRITE);
    peer_write(&mut fx.rnic, fx.pd, fx.qp, w, 0, b"ok").unwrap();
    run_sq(
        &mut fx.rnic,
        fx.qp,
        SendWr::new(2, SqOp::LocalInvalidate { stag: w }),
    );
    assert!(drain(&mut fx.rnic, fx.cq)
        .iter()
        .all(|wc| wc.status == CompletionStatus::Success));
    fill(&mut fx.rnic, GUARD);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, w, 0, b"x"),
        Err(T::DDP_INVALID_STAG)
    );
    // A window bound to a region blocks its deregistration; after unbinding it works.
    fx.rnic.dealloc_stag(win_mr).unwrap();
    fx.rnic.dealloc_stag(mr).unwrap();
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"x"),
        Err(T::DDP_INVALID_STAG)
    );
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, mr, VA, 1),
        Err(T::RDMAP_INVALID_STAG)
    );
    assert_eq!(touched(&fx.rnic, GUARD), 0);
}

#[test]
fn sec05_grant_read_or_write_only() {
    // RFC 5040 §8.1.1 item 5; VERBS-00 §7.4.2
    let (mut fx, _) = setup();
    let ro = fx.reg_mr(0, PAGE, VA, Access::LOCAL_READ | Access::REMOTE_READ);
    let wo = fx.reg_mr(
        PAGE,
        PAGE,
        VA + PAGE,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, ro, VA, b"x"),
        Err(T::DDP_INVALID_STAG)
    );
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, wo, VA + PAGE, 4),
        Err(T::RDMAP_ACCESS_RIGHTS)
    );
    assert_eq!(touched(&fx.rnic, GUARD), 0);
    assert!(peer_read(&fx.rnic, fx.pd, fx.qp, ro, VA, 4).is_ok());
    assert!(peer_write(&mut fx.rnic, fx.pd, fx.qp, wo, VA + PAGE, b"x").is_ok());
}

/// A remote Write of 4 octets at `VA` through `mr`, validated now and placed later.
fn in_flight_write(fx: &Fx, mr: STag) -> Resolved {
    let mem = fx.rnic.memory();
    mem.resolve(mr, fx.pd, fx.qp.stream(), VA, 4, Access::REMOTE_WRITE)
        .unwrap()
}

#[test]
fn sec06_revoked_rights_and_in_flight_access() {
    // RFC 5040 §8.1.1 item 6; VERBS-00 §7.9, §7.10.4.1
    let (mut fx, mr) = setup();
    // An access validated before the invalidation and placed after it fails.
    let in_flight = in_flight_write(&fx, mr);
    run_sq(
        &mut fx.rnic,
        fx.qp,
        SendWr::new(1, SqOp::LocalInvalidate { stag: mr }),
    );
    assert_eq!(
        drain(&mut fx.rnic, fx.cq)[0].status,
        CompletionStatus::Success
    );
    assert!(fx.rnic.memory_mut().write(&in_flight, 0, b"late").is_err());
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"x"),
        Err(T::DDP_INVALID_STAG)
    );
    assert_eq!(touched(&fx.rnic, GUARD), 0);
    // Same after Deallocate.
    let (mut fx, mr) = setup();
    let in_flight = in_flight_write(&fx, mr);
    fx.rnic.dealloc_stag(mr).unwrap();
    assert!(fx.rnic.memory_mut().write(&in_flight, 0, b"late").is_err());
    assert_eq!(touched(&fx.rnic, GUARD), 0);
}

#[test]
fn sec07_shared_stag_cannot_be_invalidated_remotely() {
    // RFC 5040 §8.1.1 item 7, §5.3; digest D6, D16
    let (mut fx, mr) = setup();
    let shared = fx
        .rnic
        .register_shared_mr(mr, TaggedBase::Va(VA), fx.pd, 2, true, all_rights())
        .unwrap();
    for s in [mr, shared] {
        assert_remote_invalidate_refused(&mut fx, s, T::RDMAP_PROT_CANNOT_INVALIDATE);
    }
}

#[test]
fn sec08_stags_are_sparse_and_never_zero() {
    // RFC 5040 §8.1.1 item 8
    let mut fx = fixture();
    let mut idx: Vec<u32> = (0..512)
        .map(|_| fx.rnic.alloc_mw(fx.pd).unwrap().index())
        .collect();
    assert!(idx.iter().all(|&i| i != 0 && i < (1 << 24)));
    let sequential = idx.windows(2).filter(|w| w[1] == w[0] + 1).count();
    assert!(sequential < 4, "{sequential} sequential indices");
    assert!(
        idx.iter().any(|&i| i >= 1 << 23),
        "upper half of the index space used"
    );
    assert!(
        idx.iter().any(|&i| i < 1 << 23),
        "lower half of the index space used"
    );
    idx.sort();
    idx.dedup();
    assert_eq!(idx.len(), 512);
}

#[test]
fn sec09_no_cq_shared_across_ulps() {
    // RFC 5040 §8.1.1 item 9
    let mut fx = fixture();
    let pd_b = fx.rnic.alloc_pd(UlpId(2)).unwrap();
    assert_eq!(
        fx.rnic
            .create_qp(QpInit::new(pd_b, fx.cq, fx.cq))
            .unwrap_err(),
        VerbError::InvalidCqHandle
    );
    let (cq_b, _) = fx.rnic.create_cq(UlpId(2), 4).unwrap();
    assert_eq!(
        fx.rnic
            .create_qp(QpInit::new(pd_b, cq_b, fx.cq))
            .unwrap_err(),
        VerbError::InvalidCqHandle
    );
    assert!(fx.rnic.create_qp(QpInit::new(pd_b, cq_b, cq_b)).is_ok());
}

#[test]
fn sec10_cq_overflow_affects_only_its_users() {
    // RFC 5040 §8.1.1 item 10; VERBS-00 §5.3.1, Fig. 24
    let mut fx = fixture();
    let (cq1, _) = fx.rnic.create_cq(fx.ulp, 1).unwrap();
    let (qp1, _) = fx.rnic.create_qp(QpInit::new(fx.pd, cq1, cq1)).unwrap();
    to_rts(&mut fx.rnic, qp1);
    to_rts(&mut fx.rnic, fx.qp);
    actions(&mut fx.rnic);
    events(&mut fx.rnic);
    fx.rnic
        .post_sq(qp1, vec![send(1, vec![]), send(2, vec![])])
        .unwrap();
    let a = fx.rnic.next_send_wr(qp1).unwrap();
    let b = fx.rnic.next_send_wr(qp1).unwrap();
    for w in [a, b] {
        fx.rnic
            .handle_completion(
                qp1,
                engine_done(w.wr_id, WorkQueue::Send, EngineStatus::Success, 0),
            )
            .unwrap();
    }
    assert_eq!(fx.rnic.query_qp(qp1).unwrap().state, QpState::Terminate);
    let ev: Vec<_> = events(&mut fx.rnic);
    assert!(ev.contains(&AsyncEvent {
        resource: EventResource::Cq(cq1),
        kind: AsyncEventKind::CqOverflow
    }));
    assert!(ev.contains(&AsyncEvent {
        resource: EventResource::Qp(qp1),
        kind: AsyncEventKind::CqSqError
    }));
    assert_eq!(
        actions(&mut fx.rnic),
        vec![QpAction::SendTerminate {
            qp: qp1,
            cause: T::RDMAP_CATASTROPHIC_STREAM
        }]
    );
    // The other QP and CQ carry on.
    fx.post_sq(vec![send(3, vec![])]);
    let w = fx.rnic.next_send_wr(fx.qp).unwrap();
    fx.complete(w.wr_id, WorkQueue::Send, EngineStatus::Success, 0);
    let wc = fx.rnic.poll_cq(fx.cq).unwrap();
    assert_eq!((wc.wr_id, wc.status), (3, CompletionStatus::Success));
    assert_eq!(fx.rnic.query_qp(fx.qp).unwrap().state, QpState::Rts);
}

#[test]
fn sec11_ird_is_capped() {
    // RFC 5040 §8.1.1 item 11; VERBS-00 §6.5. (The IRD+1-th Read Request answered with
    // Terminate 1/2/03 is the RDMAP engine's check; here: IRD never exceeds the cap.)
    let mut fx = fixture();
    let max = fx.rnic.query().max_ird_per_qp;
    let mut init = QpInit::new(fx.pd, fx.cq, fx.cq);
    init.ird = max + 1;
    assert_eq!(
        fx.rnic.create_qp(init).unwrap_err(),
        VerbError::IrdExceedsCapability
    );
    let mut m = ModifyQp::to(QpState::Idle);
    m.ird = Some(max + 1);
    assert_eq!(
        fx.rnic.modify_qp(fx.qp, m),
        Err(VerbError::IrdExceedsCapability)
    );
    init.ird = max;
    assert_eq!(fx.rnic.create_qp(init).unwrap().1.ird, max);
}

#[test]
fn sec12_no_remote_path_changes_rnic_configuration() {
    // RFC 5040 §8.1.1 item 12: a storm of remote operations leaves the RNIC, QP and MR
    // configuration untouched (the engine only sees the MemoryTable).
    let (mut fx, mr) = setup();
    let attrs = fx.rnic.query().clone();
    let qp_before = fx.rnic.query_qp(fx.qp).unwrap();
    let mr_before = fx.rnic.query_mr(mr).unwrap();
    for i in 0..2000u64 {
        let stag = STag((i as u32).wrapping_mul(0x9E37_79B9));
        let to = i.wrapping_mul(0x1234_5678_9ABC);
        let _ = peer_write(&mut fx.rnic, fx.pd, fx.qp, stag, to, b"zz");
        let _ = peer_read(&fx.rnic, fx.pd, fx.qp, stag, to, 2);
        if stag != mr {
            let _ = peer_send_inv(&mut fx.rnic, fx.pd, fx.qp, stag);
        }
    }
    assert_eq!(fx.rnic.query(), &attrs);
    assert_eq!(fx.rnic.query_qp(fx.qp).unwrap(), qp_before);
    assert_eq!(fx.rnic.query_mr(mr).unwrap(), mr_before);
    assert_eq!(touched(&fx.rnic, GUARD), 0);
}

#[test]
fn sec13_ulps_cannot_reach_each_others_resources() {
    // RFC 5040 §8.1.2 item 1: objects of another ULP are refused, not shared.
    let mut fx = fixture();
    let (srq_a, _) = fx.rnic.create_srq(fx.pd, 4, 1, 0).unwrap();
    let pd_b = fx.rnic.alloc_pd(UlpId(2)).unwrap();
    let (cq_b, _) = fx.rnic.create_cq(UlpId(2), 4).unwrap();
    let mut init = QpInit::new(pd_b, cq_b, cq_b);
    init.srq = Some(srq_a);
    assert_eq!(
        fx.rnic.create_qp(init).unwrap_err(),
        VerbError::InvalidSrqHandle
    );
    let mr_a = fx.page_mr(VA);
    let (qp_b, _) = fx.rnic.create_qp(QpInit::new(pd_b, cq_b, cq_b)).unwrap();
    assert!(peer_write(&mut fx.rnic, pd_b, qp_b, mr_a, VA, b"x").is_err());
}

#[test]
fn sec14_qp_allocation_respects_quota() {
    // RFC 5040 §8.1.2 item 2
    let mut fx = fixture();
    fx.rnic.set_quota(
        fx.ulp,
        Quota {
            max_qps: 2,
            ..Quota::UNLIMITED
        },
    );
    assert!(fx.rnic.create_qp(QpInit::new(fx.pd, fx.cq, fx.cq)).is_ok());
    assert_eq!(
        fx.rnic
            .create_qp(QpInit::new(fx.pd, fx.cq, fx.cq))
            .unwrap_err(),
        VerbError::InsufficientResources
    );
    // Another ULP is not affected.
    let pd_b = fx.rnic.alloc_pd(UlpId(2)).unwrap();
    let (cq_b, _) = fx.rnic.create_cq(UlpId(2), 4).unwrap();
    assert!(fx.rnic.create_qp(QpInit::new(pd_b, cq_b, cq_b)).is_ok());
}

#[test]
fn sec15_no_implicit_trust_between_ulps() {
    // RFC 5040 §8.1.2 item 3: same STag value, other ULP's PD: refused.
    let mut fx = fixture();
    let mr = fx.page_mr(VA);
    let pd_b = fx.rnic.alloc_pd(UlpId(2)).unwrap();
    let (cq_b, _) = fx.rnic.create_cq(UlpId(2), 4).unwrap();
    let (qp_b, _) = fx.rnic.create_qp(QpInit::new(pd_b, cq_b, cq_b)).unwrap();
    to_rts(&mut fx.rnic, qp_b);
    // Local use of ULP A's STag in ULP B's Send fails with Invalid PD.
    assert!(run_sq(
        &mut fx.rnic,
        qp_b,
        send(
            1,
            vec![Sge {
                stag: mr,
                to: VA,
                len: 4
            }]
        )
    )
    .is_empty());
    assert_eq!(
        fx.rnic.poll_cq(cq_b).unwrap().status,
        CompletionStatus::InvalidPdId
    );
    assert_eq!(
        peer_send_inv(&mut fx.rnic, pd_b, qp_b, mr),
        Err(T::RDMAP_PROT_CANNOT_INVALIDATE)
    );
    assert_eq!(fx.rnic.query_mr(mr).unwrap().state, StagState::Valid);
}

#[test]
fn sec16_read_only_memory_cannot_become_writable() {
    // RFC 5040 §8.1.2 item 4; VERBS-00 §7.5
    let mut fx = fixture();
    fx.rnic.memory_mut().mark_read_only(2 * PAGE, PAGE);
    for access in [
        Access::LOCAL_WRITE,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    ] {
        assert_eq!(
            fx.rnic
                .register_mr(&mr_spec(fx.pd, 2 * PAGE, PAGE, VA, access)),
            Err(VerbError::InvalidAccessRights)
        );
    }
    let ro = fx.reg_mr(2 * PAGE, PAGE, VA, Access::LOCAL_READ | Access::REMOTE_READ);
    assert_eq!(
        fx.rnic
            .register_shared_mr(ro, TaggedBase::Va(VA), fx.pd, 1, true, all_rights()),
        Err(VerbError::InvalidAccessRights)
    );
    // Fast-Register is held to the same rule.
    let mut fx2 = fixture_with(|i| i.privileged = true);
    to_rts(&mut fx2.rnic, fx2.qp);
    fx2.rnic.memory_mut().mark_read_only(0, PAGE);
    let s = fx2.rnic.alloc_mr_stag(fx2.pd, 1, true).unwrap();
    run_sq(&mut fx2.rnic, fx2.qp, fast_reg_page0(1, s, all_rights()));
    assert_eq!(
        fx2.rnic.poll_cq(fx2.cq).unwrap().status,
        CompletionStatus::InvalidAccessRights
    );
}

#[test]
fn sec17_cq_entries_are_allocated_under_control() {
    // The fixture already holds a 64-entry CQ.
    // RFC 5040 §8.1.2 item 5
    let mut fx = fixture();
    fx.rnic.set_quota(
        fx.ulp,
        Quota {
            max_cqes: 101,
            ..Quota::UNLIMITED
        },
    );
    assert_eq!(fx.rnic.create_cq(fx.ulp, 37).unwrap().1, 37);
    assert_eq!(
        fx.rnic.create_cq(fx.ulp, 1).unwrap_err(),
        VerbError::InsufficientResources
    );
    let over = fx.rnic.query().max_cqes_per_cq + 1;
    assert_eq!(
        fx.rnic.create_cq(UlpId(5), over).unwrap_err(),
        VerbError::CqeExceedsCapability
    );
}

#[test]
fn sec18_fair_share_of_stags() {
    // RFC 5040 §8.1.2 item 6
    let mut fx = fixture();
    fx.rnic.set_quota(
        fx.ulp,
        Quota {
            max_stags: 3,
            ..Quota::UNLIMITED
        },
    );
    fx.rnic.alloc_mw(fx.pd).unwrap();
    fx.rnic.alloc_mr_stag(fx.pd, 1, false).unwrap();
    fx.reg_mr(0, PAGE, VA, Access::LOCAL_READ);
    assert_eq!(
        fx.rnic.alloc_mw(fx.pd),
        Err(VerbError::InsufficientResources)
    );
    assert_eq!(
        fx.rnic
            .register_mr(&mr_spec(fx.pd, 0, PAGE, VA, Access::LOCAL_READ)),
        Err(VerbError::InsufficientResources)
    );
    let pd_b = fx.rnic.alloc_pd(UlpId(2)).unwrap();
    assert!(fx.rnic.alloc_mw(pd_b).is_ok());
}

#[test]
fn sec19_irrq_resources_are_per_ulp() {
    // RFC 5040 §8.1.2 item 7
    let mut fx = fixture(); // its QP holds IRD 4
    fx.rnic.set_quota(
        fx.ulp,
        Quota {
            max_ird: 6,
            ..Quota::UNLIMITED
        },
    );
    let mut init = QpInit::new(fx.pd, fx.cq, fx.cq);
    init.ird = 3;
    assert_eq!(
        fx.rnic.create_qp(init).unwrap_err(),
        VerbError::InsufficientResources
    );
    init.ird = 2;
    assert!(fx.rnic.create_qp(init).is_ok());
    let pd_b = fx.rnic.alloc_pd(UlpId(2)).unwrap();
    let (cq_b, _) = fx.rnic.create_cq(UlpId(2), 4).unwrap();
    let mut init_b = QpInit::new(pd_b, cq_b, cq_b);
    init_b.ird = 8;
    assert!(fx.rnic.create_qp(init_b).is_ok());
}

// A ULP's QP count and IRD sum (its quota's use) follow QPs as they are destroyed and as
// Modify QP changes their IRD.
#[test]
fn ulp_quota_use_follows_destroy_and_modify() {
    let mut fx = fixture(); // its QP holds IRD 4
    fx.rnic.set_quota(
        fx.ulp,
        Quota {
            max_qps: 2,
            max_ird: 6,
            ..Quota::UNLIMITED
        },
    );
    let mut init = QpInit::new(fx.pd, fx.cq, fx.cq);
    init.ird = 2;
    let (b, _) = fx.rnic.create_qp(init).unwrap();
    init.ird = 0;
    assert_eq!(
        fx.rnic.create_qp(init).unwrap_err(),
        VerbError::InsufficientResources,
        "two QPs already"
    );
    fx.rnic.destroy_qp(b).unwrap();
    init.ird = 3;
    assert_eq!(
        fx.rnic.create_qp(init).unwrap_err(),
        VerbError::InsufficientResources,
        "4 + 3 > 6"
    );
    init.ird = 2;
    let (c, _) = fx.rnic.create_qp(init).unwrap();
    let ird = |n: u32| {
        let mut m = ModifyQp::to(QpState::Idle);
        m.ird = Some(n);
        m
    };
    assert_eq!(
        fx.rnic.modify_qp(c, ird(3)),
        Err(VerbError::InsufficientResources),
        "4 + 3 > 6"
    );
    fx.rnic.modify_qp(fx.qp, ird(1)).unwrap();
    fx.rnic.modify_qp(c, ird(5)).unwrap();
    assert_eq!(
        fx.rnic.modify_qp(fx.qp, ird(2)),
        Err(VerbError::InsufficientResources),
        "5 + 2 > 6"
    );
}

#[test]
fn sec20_srq_consumption_is_detectable() {
    // RFC 5040 §8.1.2 item 8; VERBS-00 §6.3.8 (QP RQ limit)
    let mut fx = fixture();
    let (srq, _) = fx.rnic.create_srq(fx.pd, 32, 1, 0).unwrap();
    let mut init = fx.srq_qp_init(srq);
    init.rq_limit = 2;
    let (greedy, _) = fx.rnic.create_qp(init).unwrap();
    to_rts(&mut fx.rnic, greedy);
    fx.rnic
        .post_srq(srq, (0..8).map(|i| recv(i, vec![])).collect())
        .unwrap();
    events(&mut fx.rnic);
    fx.rnic.next_recv_wr(greedy).unwrap();
    fx.rnic.next_recv_wr(greedy).unwrap();
    assert!(events(&mut fx.rnic).is_empty());
    fx.rnic.next_recv_wr(greedy).unwrap();
    assert_eq!(
        events(&mut fx.rnic),
        vec![AsyncEvent {
            resource: EventResource::Qp(greedy),
            kind: AsyncEventKind::QpRqLimitReached
        }]
    );
    // A limit above the S-RQ size is refused.
    let mut init = fx.srq_qp_init(srq);
    init.rq_limit = 33;
    assert_eq!(
        fx.rnic.create_qp(init).unwrap_err(),
        VerbError::RqLimitOutOfRange
    );
}

#[test]
fn sec21_nothing_placed_unless_the_whole_segment_is_valid() {
    // RFC 5041 §8.1
    let (mut fx, mr) = setup();
    let data = vec![0xAB; 100];
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + PAGE - 50, &data),
        Err(T::DDP_BASE_BOUNDS)
    );
    assert_eq!(
        touched(&fx.rnic, GUARD),
        0,
        "no prefix of the segment was placed"
    );
}

#[test]
fn consecutive_segments_through_one_stag_are_each_checked() {
    // RFC 5041 §7.2, §8.1: every segment's range, and the STag as the table holds it now,
    // also when the segment before passed through the same STag.
    let (mut fx, mr) = setup();
    peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"a").unwrap();
    peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 1, b"b").unwrap();
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + PAGE - 1, b"ab"),
        Err(T::DDP_BASE_BOUNDS)
    );
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA - 1, b"ab"),
        Err(T::DDP_BASE_BOUNDS)
    );
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, u64::MAX - 15, &[0; 32]),
        Err(T::DDP_TO_WRAP)
    );
    let other_pd = fx.rnic.alloc_pd(fx.ulp).unwrap();
    assert_eq!(
        peer_write(&mut fx.rnic, other_pd, fx.qp, mr, VA + 2, b"x"),
        Err(T::DDP_STAG_NOT_ASSOCIATED)
    );
    peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 2, b"c").unwrap();
    fx.rnic.dealloc_stag(mr).unwrap();
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 3, b"x"),
        Err(T::DDP_INVALID_STAG)
    );
    let b = fx.rnic.memory().bytes();
    assert_eq!(&b[(8 * PAGE) as usize..(8 * PAGE + 3) as usize], b"abc");
    assert_eq!(touched(&fx.rnic, GUARD), 3);
}

#[test]
fn sec22_pd_and_stream_association_both_supported() {
    // RFC 5041 §8.2
    let (mut fx, mr) = setup();
    let (other, _) = fx.rnic.create_qp(QpInit::new(fx.pd, fx.cq, fx.cq)).unwrap();
    // PD association: every QP of the PD may use the MR.
    assert!(peer_write(&mut fx.rnic, fx.pd, other, mr, VA, b"a").is_ok());
    assert!(peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"b").is_ok());
    // Stream association: a window only on its QP.
    let (_, w) = bind_window(&mut fx, 0x5000_0000, 2, 16, false, Access::REMOTE_WRITE);
    assert!(peer_write(&mut fx.rnic, fx.pd, fx.qp, w, 0x5000_0000, b"c").is_ok());
    assert!(peer_write(&mut fx.rnic, fx.pd, other, w, 0x5000_0000, b"d").is_err());
}

#[test]
fn sec23_revocation_is_immediate() {
    // RFC 5041 §8.2: invalidated by the peer, re-validated by Fast-Register with a new key.
    let mut fx = privileged_rts();
    let s = fx.rnic.alloc_mr_stag(fx.pd, 1, true).unwrap();
    let k1 = STag::new(s.index(), 1);
    run_sq(&mut fx.rnic, fx.qp, fast_reg_page0(1, k1, all_rights()));
    assert!(peer_write(&mut fx.rnic, fx.pd, fx.qp, k1, 0, b"1").is_ok());
    peer_send_inv(&mut fx.rnic, fx.pd, fx.qp, k1).unwrap();
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, k1, 0, b"x"),
        Err(T::DDP_INVALID_STAG)
    );
    let k2 = STag::new(s.index(), 2);
    run_sq(&mut fx.rnic, fx.qp, fast_reg_page0(1, k2, all_rights()));
    assert!(peer_write(&mut fx.rnic, fx.pd, fx.qp, k2, 0, b"2").is_ok());
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, k1, 0, b"x"),
        Err(T::DDP_INVALID_STAG)
    );
    assert!(drain(&mut fx.rnic, fx.cq)
        .iter()
        .all(|w| w.status == CompletionStatus::Success));
}

#[test]
fn sec24_invalid_stag_is_reported_and_terminates() {
    // RFC 5041 §8.2; VERBS-00 Fig. 24
    let (mut fx, _) = setup();
    let cause = peer_write(&mut fx.rnic, fx.pd, fx.qp, STag(0x0012_3400), 0, b"x").unwrap_err();
    events(&mut fx.rnic);
    fx.rnic.handle_remote_error(fx.qp, cause).unwrap();
    assert_eq!(fx.rnic.query_qp(fx.qp).unwrap().state, QpState::Terminate);
    assert_eq!(
        fx.rnic.query_qp(fx.qp).unwrap().terminate,
        Some((T::DDP_INVALID_STAG, TerminateOrigin::Local))
    );
    assert_eq!(
        events(&mut fx.rnic),
        vec![AsyncEvent {
            resource: EventResource::Qp(fx.qp),
            kind: AsyncEventKind::InvalidStag
        }]
    );
}

#[test]
fn sec25_stream_must_be_attached_by_the_ulp() {
    // RFC 5041 §8.3: the ULP validates the LLP stream; the RI runs a QP only on the
    // Established stream the consumer attached.
    let mut fx = fixture();
    let mut l = llp(5);
    l.established = false;
    assert_eq!(
        fx.rnic.modify_qp(fx.qp, ModifyQp::to_rts(l)),
        Err(VerbError::InvalidLlpStreamHandle)
    );
    fx.post_sq(vec![send(1, vec![])]);
    assert_eq!(fx.rnic.next_send_wr(fx.qp), None);
    fx.rnic.modify_qp(fx.qp, ModifyQp::to_rts(llp(5))).unwrap();
    assert_eq!(
        fx.rnic.query_qp(fx.qp).unwrap().llp,
        Some(LlpStreamHandle(5))
    );
    assert!(fx.rnic.next_send_wr(fx.qp).is_some());
}

#[test]
fn sec26_stag_zero_never_remote() {
    // VERBS-00 §7.2.1 item 3, §8.1.3.2.1
    let mut fx = fixture_with(|i| i.privileged = true);
    fill(&mut fx.rnic, GUARD);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, STag(0), 0, b"x"),
        Err(T::DDP_INVALID_STAG)
    );
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, STag(0), 0, 1),
        Err(T::RDMAP_INVALID_STAG)
    );
    assert_eq!(
        peer_send_inv(&mut fx.rnic, fx.pd, fx.qp, STag(0)),
        Err(T::RDMAP_PROT_CANNOT_INVALIDATE)
    );
    assert_eq!(touched(&fx.rnic, GUARD), 0);
    assert_eq!(fx.rnic.query_mr(STag(0)), Err(VerbError::InvalidStagIndex));
    assert_eq!(
        fx.rnic.dealloc_stag(STag(0)),
        Err(VerbError::InvalidStagIndex)
    );
}

#[test]
fn sec27_stag_zero_and_fast_register_need_privilege() {
    // VERBS-00 §6.1.1
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    run_sq(
        &mut fx.rnic,
        fx.qp,
        send(
            1,
            vec![Sge {
                stag: STag(0),
                to: 0,
                len: 4,
            }],
        ),
    );
    assert_eq!(
        fx.rnic.poll_cq(fx.cq).unwrap().status,
        CompletionStatus::InvalidStag
    );
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    let s = fx.rnic.alloc_mr_stag(fx.pd, 1, false).unwrap();
    run_sq(
        &mut fx.rnic,
        fx.qp,
        fast_reg_page0(2, s, Access::LOCAL_READ),
    );
    assert_eq!(
        fx.rnic.poll_cq(fx.cq).unwrap().status,
        CompletionStatus::QpNotPrivileged
    );
}

#[test]
fn sec28_all_32_bits_are_checked() {
    // VERBS-00 §7.4
    let (mut fx, mr) = setup();
    let mut spec = mr_spec(fx.pd, 8 * PAGE, PAGE, VA, all_rights());
    spec.key = 0x99;
    let re = fx.rnic.reregister_mr(mr, &spec).unwrap();
    assert_eq!(re.index(), mr.index());
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"x"),
        Err(T::DDP_INVALID_STAG)
    );
    assert_eq!(touched(&fx.rnic, GUARD), 0);
    for key in [0u8, 0x98, 0x9A, 0xFF] {
        let s = STag::new(mr.index(), key);
        assert_eq!(
            peer_write(&mut fx.rnic, fx.pd, fx.qp, s, VA, b"x"),
            Err(T::DDP_INVALID_STAG)
        );
    }
    assert!(peer_write(&mut fx.rnic, fx.pd, fx.qp, re, VA, b"x").is_ok());
}

#[test]
fn sec29_qp_enable_and_stag_right_both_needed() {
    // VERBS-00 §8.1.2.2, Fig. 21
    let mut fx = fixture_with(|i| {
        i.inbound_read = false;
    });
    let mr = fx.page_mr(VA);
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, mr, VA, 4),
        Err(T::RDMAP_ACCESS_RIGHTS)
    );
    assert!(peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"x").is_ok());
    // Enabling it later via Modify is not possible; a new QP with Read enabled works.
    let (qp2, _) = fx.rnic.create_qp(QpInit::new(fx.pd, fx.cq, fx.cq)).unwrap();
    assert!(peer_read(&fx.rnic, fx.pd, qp2, mr, VA, 4).is_ok());
    // Atomics (RFC 7306) need the QP's atomic enable on top of the STag rights.
    let mut a = Access::REMOTE_ATOMIC;
    a |= Access::REMOTE_READ;
    assert!(fx
        .rnic
        .memory()
        .resolve(mr, fx.pd, qp2.stream(), VA, 8, a)
        .is_err());
}

#[test]
fn sec30_local_only_stag_cannot_be_invalidated_remotely() {
    // VERBS-00 §7.4.2, Fig. 23 (0x0102)
    let mut fx = fixture();
    let mr = fx.reg_mr(0, PAGE, VA, Access::LOCAL_READ | Access::LOCAL_WRITE);
    assert_remote_invalidate_refused(&mut fx, mr, T::RDMAP_ACCESS_RIGHTS);
}

#[test]
fn sq_and_rq_exhaustion_return_immediate_errors() {
    // VERBS-00 §8.2.1; resource exhaustion never touches memory or other QPs.
    let mut fx = fixture_with(|i| {
        i.sq_depth = 1;
        i.rq_depth = 1;
    });
    fx.post_sq(vec![send(1, vec![])]);
    let sq_full = fx.rnic.post_sq(fx.qp, vec![send(2, vec![])]);
    fx.post_rq(vec![recv(1, vec![])]);
    let rq_full = fx.rnic.post_rq(fx.qp, vec![recv(2, vec![])]);
    let (srq, _) = fx.rnic.create_srq(fx.pd, 1, 1, 0).unwrap();
    fx.rnic.post_srq(srq, vec![recv(1, vec![])]).unwrap();
    let srq_full = fx.rnic.post_srq(srq, vec![recv(2, vec![])]);
    for full in [sq_full, rq_full, srq_full] {
        assert_eq!(full.unwrap_err().error, VerbError::TooManyWorkRequests);
    }
}

#[test]
fn zero_ord_read_completes_in_error() {
    // VERBS-00 §6.5, §8.2.2 rule 18, Fig. 36 (the engine reports it; the verbs layer
    // maps it to "Zero RDMA Read Resources")
    let mut fx = fixture_with(|i| i.ord = 0);
    to_rts(&mut fx.rnic, fx.qp);
    let mr = fx.page_mr(VA);
    let w = run_sq(
        &mut fx.rnic,
        fx.qp,
        SendWr::message(
            1,
            SendOp::Read {
                sink: RemoteBuf { stag: mr, to: VA },
                remote: RemoteBuf {
                    stag: STag(0x100),
                    to: 0,
                },
                len: 4,
            },
        ),
    );
    fx.complete(
        w[0].wr_id,
        WorkQueue::Send,
        EngineStatus::ZeroReadResources,
        0,
    );
    assert_eq!(
        fx.rnic.poll_cq(fx.cq).unwrap().status,
        CompletionStatus::ZeroReadResources
    );
}
