//! Verbs resources, registration and memory windows: conformance checklist group J
//! (SPEC-DIGEST §8). Remote accesses enter at the memory-table boundary the RDMAP/DDP
//! engine uses (DDP tagged placement, Read Request source resolution, remote
//! invalidation).

use crate::common::*;
use iwarp::verbs::*;
use iwarp::wire::terminate::TerminateCause;

const VA: u64 = 0x7f00_0000_0000;

fn bind_spec(mw: STag, key: u8, mr: STag, mr_to: u64, len: u64, access: Access) -> BindSpec {
    BindSpec {
        mw: STag::new(mw.index(), key),
        mr,
        mr_to,
        len,
        zero_based: false,
        access,
    }
}

fn one_wc(fx: &mut Fx) -> WorkCompletion {
    let wcs = drain(&mut fx.rnic, fx.cq);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    wcs[0]
}

/// Posts Bind `b` as WR `wr_id` on the fixture's QP; returns its one completion's status.
fn bind(fx: &mut Fx, wr_id: u64, b: BindSpec) -> CompletionStatus {
    run_sq(&mut fx.rnic, fx.qp, SendWr::new(wr_id, SqOp::Bind(b)));
    one_wc(fx).status
}

#[test]
fn j01_dealloc_pd_in_use() {
    // VERBS-00 §5.2.2, §9.2.2.2
    let mut fx = fixture();
    assert_eq!(fx.rnic.dealloc_pd(fx.pd), Err(VerbError::PdInUse)); // QP
    fx.rnic.destroy_qp(fx.qp).unwrap();
    let (srq, _) = fx.rnic.create_srq(fx.pd, 8, 1, 0).unwrap();
    assert_eq!(fx.rnic.dealloc_pd(fx.pd), Err(VerbError::PdInUse)); // S-RQ
    fx.rnic.destroy_srq(srq).unwrap();
    let mr = fx.reg_mr(0, PAGE, VA, Access::LOCAL_READ);
    assert_eq!(fx.rnic.dealloc_pd(fx.pd), Err(VerbError::PdInUse)); // MR
    fx.rnic.dealloc_stag(mr).unwrap();
    let mw = fx.rnic.alloc_mw(fx.pd).unwrap();
    assert_eq!(fx.rnic.dealloc_pd(fx.pd), Err(VerbError::PdInUse)); // MW (invalid)
    fx.rnic.dealloc_stag(mw).unwrap();
    let nsmr = fx.rnic.alloc_mr_stag(fx.pd, 4, true).unwrap();
    assert_eq!(fx.rnic.dealloc_pd(fx.pd), Err(VerbError::PdInUse)); // allocated STag
    fx.rnic.dealloc_stag(nsmr).unwrap();
    fx.rnic.dealloc_pd(fx.pd).unwrap();
    assert_eq!(fx.rnic.dealloc_pd(fx.pd), Err(VerbError::InvalidPdId));
}

#[test]
fn j02_destroy_cq_in_use_and_resize_below_occupancy() {
    // VERBS-00 §5.3.3, §5.3.4
    let mut fx = fixture();
    assert_eq!(fx.rnic.destroy_cq(fx.cq), Err(VerbError::CqInUse));
    fx.post_sq(vec![send(1, vec![]), send(2, vec![]), send(3, vec![])]);
    fx.rnic
        .modify_qp(fx.qp, ModifyQp::to(QpState::Error))
        .unwrap();
    assert_eq!(fx.rnic.query_cq(fx.cq).unwrap().occupancy, 3);
    assert_eq!(
        fx.rnic.resize_cq(fx.cq, 2),
        Err(VerbError::ShrinkBelowOccupancy)
    );
    assert_eq!(fx.rnic.resize_cq(fx.cq, 3), Ok(3));
    let ids: Vec<u64> = drain(&mut fx.rnic, fx.cq).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![1, 2, 3]);
    fx.rnic.destroy_qp(fx.qp).unwrap();
    fx.rnic.destroy_cq(fx.cq).unwrap();
    assert_eq!(fx.rnic.poll_cq(fx.cq), Err(VerbError::InvalidCqHandle));
}

#[test]
fn j03_invalid_access_combinations_allocate_nothing() {
    // VERBS-00 §7.4.1, §7.4.2, Fig. 18, §7.3
    let mut fx = fixture();
    for access in [
        Access::LOCAL_WRITE | Access::REMOTE_READ,
        Access::LOCAL_READ | Access::REMOTE_WRITE,
        Access::NONE,
        Access::REMOTE_READ | Access::REMOTE_WRITE,
    ] {
        assert_eq!(
            fx.rnic.register_mr(&mr_spec(fx.pd, 0, PAGE, VA, access)),
            Err(VerbError::InvalidAccessRights),
            "{access:?}"
        );
    }
    // Remote rights without the Remote Access Flag.
    let mut spec = mr_spec(fx.pd, 0, PAGE, VA, all_rights());
    spec.remote_access = false;
    assert_eq!(
        fx.rnic.register_mr(&spec),
        Err(VerbError::InvalidAccessRights)
    );
    // Every valid combination of Fig. 18 registers.
    for access in [
        Access::LOCAL_READ,
        Access::LOCAL_READ | Access::REMOTE_READ,
        Access::LOCAL_WRITE,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        Access::LOCAL_READ | Access::LOCAL_WRITE,
        all_rights(),
    ] {
        let s = fx.reg_mr(0, PAGE, VA, access);
        fx.rnic.dealloc_stag(s).unwrap();
    }
    // Nothing was left allocated by the failures.
    fx.rnic.destroy_qp(fx.qp).unwrap();
    fx.rnic.dealloc_pd(fx.pd).unwrap();
}

#[test]
fn j04_stag_is_index_and_consumer_key() {
    // VERBS-00 §7.2, §7.2.1 item 7
    let mut fx = fixture();
    let mut spec = mr_spec(fx.pd, 0, PAGE, VA, all_rights());
    spec.key = 0xC3;
    let mr = fx.rnic.register_mr(&spec).unwrap();
    let mut spec2 = spec.clone();
    spec2.key = 0x11;
    let re = fx.rnic.reregister_mr(mr, &spec2).unwrap();
    let shared = fx
        .rnic
        .register_shared_mr(
            re,
            TaggedBase::ZeroBased,
            fx.pd,
            0x77,
            false,
            Access::LOCAL_READ,
        )
        .unwrap();
    let alloc = fx.rnic.alloc_mr_stag(fx.pd, 1, false).unwrap();
    let mw = fx.rnic.alloc_mw(fx.pd).unwrap();
    for (stag, key) in [(mr, 0xC3), (re, 0x11), (shared, 0x77), (alloc, 0), (mw, 0)] {
        assert_ne!(stag.index(), 0);
        assert_eq!(stag.0, (stag.index() << 8) | key);
    }
    assert_eq!(re.index(), mr.index());
}

#[test]
fn j05_right_index_wrong_key_is_invalid_stag() {
    // VERBS-00 §7.4, §7.10.2; RFC 5041 §7.2
    let mut fx = fixture();
    let mr = fx.page_mr(VA);
    fill(&mut fx.rnic, 0);
    let stale = STag::new(mr.index(), mr.key().wrapping_add(1));
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, stale, VA, b"x"),
        Err(TerminateCause::DDP_INVALID_STAG)
    );
    assert_eq!(touched(&fx.rnic, 0), 0);
    assert_eq!(peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"x"), Ok(()));
}

#[test]
fn j06_allocated_but_unregistered_stag_is_invalid() {
    // VERBS-00 §7.3.2.1
    let mut fx = fixture();
    let s = fx.rnic.alloc_mr_stag(fx.pd, 4, true).unwrap();
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, s, 0, b"x"),
        Err(TerminateCause::DDP_INVALID_STAG)
    );
    assert_eq!(fx.rnic.query_mr(s).unwrap().state, StagState::Invalid);
}

/// Posts a Fast-Register of `stag` (new key 9) over backend page 0 at `VA` on the
/// fixture's QP; returns its one completion's status.
fn fast_reg(fx: &mut Fx, stag: STag, access: Access) -> CompletionStatus {
    let wr = SendWr::new(
        1,
        SqOp::FastRegister(FastRegSpec {
            stag: STag::new(stag.index(), 9),
            pbl: PageList::contiguous(0, PAGE, PAGE),
            base: TaggedBase::Va(VA),
            access,
        }),
    );
    run_sq(&mut fx.rnic, fx.qp, wr);
    one_wc(fx).status
}

#[test]
fn j07_fast_register_valid_stag_or_unprivileged_qp() {
    // VERBS-00 §7.3.2.5, Fig. 23, Fig. 36
    let mut fx = privileged_rts();
    let mr = fx.page_mr(VA);
    assert_eq!(
        fast_reg(&mut fx, mr, Access::LOCAL_READ),
        CompletionStatus::StagNotInvalid
    );
    assert_eq!(fx.rnic.query_qp(fx.qp).unwrap().state, QpState::Terminate);

    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    let s = fx.rnic.alloc_mr_stag(fx.pd, 1, false).unwrap();
    assert_eq!(
        fast_reg(&mut fx, s, Access::LOCAL_READ),
        CompletionStatus::QpNotPrivileged
    );
    assert_eq!(fx.rnic.query_qp(fx.qp).unwrap().state, QpState::Terminate);
    assert_eq!(fx.rnic.query_mr(s).unwrap().state, StagState::Invalid);
}

#[test]
fn j08_fast_register_remote_rights_need_remote_access_flag() {
    // VERBS-00 §7.3.2.5
    let mut fx = privileged_rts();
    let s = fx.rnic.alloc_mr_stag(fx.pd, 1, false).unwrap();
    assert_eq!(
        fast_reg(&mut fx, s, all_rights()),
        CompletionStatus::InvalidAccessRights
    );
    // With the flag set at allocation the same request succeeds.
    let mut fx = privileged_rts();
    let s = fx.rnic.alloc_mr_stag(fx.pd, 1, true).unwrap();
    assert_eq!(
        fast_reg(&mut fx, s, all_rights()),
        CompletionStatus::Success
    );
    let s9 = STag::new(s.index(), 9);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, s9, VA, b"ok"),
        Ok(())
    );
    assert_eq!(&fx.rnic.memory().bytes()[..2], b"ok");
}

#[test]
fn j09_va_must_agree_with_fbo() {
    // VERBS-00 §7.6.1.1, §7.6.2.1
    let mut fx = fixture();
    let mut spec = mr_spec(fx.pd, 100, 200, VA + 100, all_rights());
    assert!(fx.rnic.register_mr(&spec).is_ok());
    spec.base = TaggedBase::Va(VA + 101);
    assert_eq!(
        fx.rnic.register_mr(&spec),
        Err(VerbError::InvalidVirtualAddress)
    );
    spec.base = TaggedBase::Va(VA + 100);
    spec.pbl.fbo = PAGE;
    assert_eq!(fx.rnic.register_mr(&spec), Err(VerbError::InvalidFbo));
    // Other PBL checks of §7.6.2.1.
    let mut spec = mr_spec(fx.pd, 0, PAGE, VA, all_rights());
    spec.pbl.pages = vec![100];
    assert_eq!(fx.rnic.register_mr(&spec), Err(VerbError::InvalidPblEntry));
    let mut spec = mr_spec(fx.pd, 0, PAGE, VA, all_rights());
    spec.pbl.len = PAGE + 1;
    assert_eq!(fx.rnic.register_mr(&spec), Err(VerbError::InvalidLength));
    let mut spec = mr_spec(fx.pd, 0, PAGE, VA, all_rights());
    spec.pbl.page_size = 512;
    assert_eq!(
        fx.rnic.register_mr(&spec),
        Err(VerbError::InvalidPhysicalBufferSize)
    );
}

fn bind_fixture() -> (Fx, STag, STag) {
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    let mr = fx.reg_mr(
        0,
        2 * PAGE,
        VA,
        Access::LOCAL_READ | Access::LOCAL_WRITE | Access::BIND,
    );
    let mw = fx.rnic.alloc_mw(fx.pd).unwrap();
    (fx, mr, mw)
}

#[test]
fn j10_no_window_on_zero_based_region() {
    // VERBS-00 §7.6.1.2, Fig. 19, §7.10.6.1
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    let mut spec = mr_spec(fx.pd, 0, PAGE, 0, all_rights() | Access::BIND);
    spec.base = TaggedBase::ZeroBased;
    let mr = fx.rnic.register_mr(&spec).unwrap();
    let mw = fx.rnic.alloc_mw(fx.pd).unwrap();
    let b = bind_spec(mw, 1, mr, 0, 16, Access::REMOTE_READ);
    run_sq(&mut fx.rnic, fx.qp, SendWr::new(5, SqOp::Bind(b)));
    let wc = one_wc(&mut fx);
    assert_eq!(wc.status, CompletionStatus::InvalidRegion);
    assert_eq!(fx.rnic.query_mw(mw).unwrap().state, StagState::Invalid);
}

#[test]
fn j11_bind_rights_and_bounds() {
    // VERBS-00 §7.10.2, Fig. 20, §7.10.6.1, Fig. 36
    let (mut fx, _, mw) = bind_fixture();
    let ro = fx.reg_mr(0, PAGE, VA, Access::LOCAL_READ | Access::BIND);
    let b = bind_spec(mw, 1, ro, VA, 16, Access::REMOTE_WRITE);
    assert_eq!(bind(&mut fx, 1, b), CompletionStatus::AccessViolation);

    let (mut fx, mr, mw) = bind_fixture();
    let b = bind_spec(mw, 1, mr, VA + PAGE, PAGE + 1, Access::REMOTE_READ);
    run_sq(&mut fx.rnic, fx.qp, SendWr::new(1, SqOp::Bind(b)));
    assert_eq!(
        one_wc(&mut fx).status,
        CompletionStatus::BaseBoundsViolation
    );

    // The exact end of the region is fine.
    let (mut fx, mr, mw) = bind_fixture();
    let b = bind_spec(mw, 1, mr, VA + PAGE, PAGE, Access::REMOTE_READ);
    assert_eq!(bind(&mut fx, 1, b), CompletionStatus::Success);
}

#[test]
fn j12_bind_of_valid_window_fails() {
    // VERBS-00 §7.10.6.1, §8.2.2.1
    let (mut fx, mr, mw) = bind_fixture();
    let b = bind_spec(mw, 1, mr, VA, 16, Access::REMOTE_READ);
    assert_eq!(bind(&mut fx, 1, b), CompletionStatus::Success);
    let b = bind_spec(mw, 2, mr, VA, 16, Access::REMOTE_READ);
    assert_eq!(bind(&mut fx, 2, b), CompletionStatus::StagNotInvalid);
    // The first binding (key 1) is untouched.
    assert_eq!(fx.rnic.query_mw(mw).unwrap().key, Some(1));
}

#[test]
fn j13_window_is_tied_to_the_binding_qp() {
    // VERBS-00 §7.10.2, §7.10.6.2
    let (mut fx, mr, mw) = bind_fixture();
    let (other, _) = fx.rnic.create_qp(QpInit::new(fx.pd, fx.cq, fx.cq)).unwrap();
    let b = bind_spec(mw, 4, mr, VA + 64, 128, Access::REMOTE_WRITE);
    assert_eq!(bind(&mut fx, 1, b), CompletionStatus::Success);
    let w = STag::new(mw.index(), 4);
    fill(&mut fx.rnic, 0);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, other, w, VA + 64, b"abc"),
        Err(TerminateCause::DDP_STAG_NOT_ASSOCIATED)
    );
    assert_eq!(touched(&fx.rnic, 0), 0);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, w, VA + 64, b"abc"),
        Ok(())
    );
    assert_eq!(&fx.rnic.memory().bytes()[64..67], b"abc");
    // The MR itself has no remote rights: the same Write through the MR STag fails.
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 64, b"x"),
        Err(TerminateCause::DDP_INVALID_STAG)
    );
}

#[test]
fn j14_invalidate_window_only_from_its_qp() {
    // VERBS-00 §7.10.4, §7.10.6.3
    let (mut fx, mr, mw) = bind_fixture();
    let (other, _) = fx.rnic.create_qp(QpInit::new(fx.pd, fx.cq, fx.cq)).unwrap();
    to_rts(&mut fx.rnic, other);
    let b = bind_spec(mw, 4, mr, VA, 16, Access::REMOTE_READ);
    assert_eq!(bind(&mut fx, 1, b), CompletionStatus::Success);
    let w = STag::new(mw.index(), 4);
    let inv = SendWr::new(2, SqOp::LocalInvalidate { stag: w });
    run_sq(&mut fx.rnic, other, inv.clone());
    assert_eq!(one_wc(&mut fx).status, CompletionStatus::InvalidPdId);
    assert_eq!(fx.rnic.query_mw(mw).unwrap().state, StagState::Valid);
    run_sq(&mut fx.rnic, fx.qp, inv);
    assert_eq!(one_wc(&mut fx).status, CompletionStatus::Success);
    assert_eq!(fx.rnic.query_mw(mw).unwrap().state, StagState::Invalid);
    // Re-bindable, with a new key.
    let b = bind_spec(mw, 5, mr, VA, 16, Access::REMOTE_READ);
    assert_eq!(bind(&mut fx, 3, b), CompletionStatus::Success);
    assert_eq!(fx.rnic.query_mw(mw).unwrap().key, Some(5));
}

#[test]
fn j15_invalidate_shared_fails_invalid_again_succeeds() {
    // VERBS-00 §7.8
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    let mr = fx.page_mr(VA);
    let shared = fx
        .rnic
        .register_shared_mr(mr, TaggedBase::Va(VA), fx.pd, 3, true, all_rights())
        .unwrap();
    run_sq(
        &mut fx.rnic,
        fx.qp,
        SendWr::new(1, SqOp::LocalInvalidate { stag: shared }),
    );
    assert_eq!(one_wc(&mut fx).status, CompletionStatus::InvalidStag);
    assert_eq!(fx.rnic.query_mr(shared).unwrap().state, StagState::Valid);

    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    let mr = fx.page_mr(VA);
    for id in [1, 2] {
        run_sq(
            &mut fx.rnic,
            fx.qp,
            SendWr::new(id, SqOp::LocalInvalidate { stag: mr }),
        );
        assert_eq!(one_wc(&mut fx).status, CompletionStatus::Success);
        assert_eq!(fx.rnic.query_mr(mr).unwrap().state, StagState::Invalid);
    }
}

#[test]
fn j16_deallocate_with_bound_window_then_every_access_fails() {
    // VERBS-00 §7.9
    let (mut fx, mr, mw) = bind_fixture();
    let b = bind_spec(mw, 4, mr, VA, 16, Access::REMOTE_WRITE);
    assert_eq!(bind(&mut fx, 1, b), CompletionStatus::Success);
    assert_eq!(
        fx.rnic.dealloc_stag(mr),
        Err(VerbError::WindowsBoundToRegion)
    );
    let w = STag::new(mw.index(), 4);
    fx.rnic.dealloc_stag(w).unwrap();
    fx.rnic.dealloc_stag(mr).unwrap();
    fill(&mut fx.rnic, 0);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, w, VA, b"x"),
        Err(TerminateCause::DDP_INVALID_STAG)
    );
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"x"),
        Err(TerminateCause::DDP_INVALID_STAG)
    );
    assert_eq!(touched(&fx.rnic, 0), 0);
    assert_eq!(fx.rnic.query_mr(mr), Err(VerbError::InvalidStagIndex));
    assert_eq!(fx.rnic.dealloc_stag(mr), Err(VerbError::InvalidStagIndex));
}

#[test]
fn j17_stag_zero_remote_and_unprivileged() {
    // VERBS-00 §7.2.1, §8.1.3.2.1
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    fill(&mut fx.rnic, 0);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, STag(0), 0, b"x"),
        Err(TerminateCause::DDP_INVALID_STAG)
    );
    assert_eq!(touched(&fx.rnic, 0), 0);
    let sge = Sge {
        stag: STag(0),
        to: 0,
        len: 8,
    };
    assert!(run_sq(&mut fx.rnic, fx.qp, send(7, vec![sge])).is_empty());
    assert_eq!(one_wc(&mut fx).status, CompletionStatus::InvalidStag);
    // On a privileged QP STag 0 is a physical address and the Send goes to the engine.
    let mut fx = privileged_rts();
    assert_eq!(run_sq(&mut fx.rnic, fx.qp, send(7, vec![sge])).len(), 1);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, STag(0), 0, b"x"),
        Err(TerminateCause::DDP_INVALID_STAG)
    );
}

#[test]
fn j18_window_stag_in_a_send_sge_fails() {
    // VERBS-00 §8.1.3.2
    let (mut fx, mr, mw) = bind_fixture();
    let b = bind_spec(mw, 4, mr, VA, 16, Access::REMOTE_READ);
    assert_eq!(bind(&mut fx, 1, b), CompletionStatus::Success);
    let sge = Sge {
        stag: STag::new(mw.index(), 4),
        to: VA,
        len: 8,
    };
    assert!(run_sq(&mut fx.rnic, fx.qp, send(2, vec![sge])).is_empty());
    assert_eq!(one_wc(&mut fx).status, CompletionStatus::InvalidStag);
    assert_eq!(fx.rnic.query_qp(fx.qp).unwrap().state, QpState::Terminate);
}

#[test]
fn j19_inbound_write_disabled_on_qp() {
    // VERBS-00 §8.1.2.2, Fig. 21; digest D10
    let mut fx = fixture_with(|i| i.inbound_write = false);
    let mr = fx.page_mr(VA);
    fill(&mut fx.rnic, 0);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"x"),
        Err(TerminateCause::DDP_INVALID_STAG)
    );
    assert_eq!(touched(&fx.rnic, 0), 0);
    // Reads are still enabled.
    assert!(peer_read(&fx.rnic, fx.pd, fx.qp, mr, VA, 4).is_ok());
}

#[test]
fn reregister_failure_deallocates_but_bound_windows_refuse() {
    // VERBS-00 §7.3.2.3
    let (mut fx, mr, mw) = bind_fixture();
    let b = bind_spec(mw, 4, mr, VA, 16, Access::REMOTE_READ);
    assert_eq!(bind(&mut fx, 1, b), CompletionStatus::Success);
    let spec = mr_spec(fx.pd, 0, PAGE, VA, all_rights());
    assert_eq!(
        fx.rnic.reregister_mr(mr, &spec),
        Err(VerbError::WindowsBoundToRegion)
    );
    assert_eq!(fx.rnic.query_mr(mr).unwrap().state, StagState::Valid);
    run_sq(
        &mut fx.rnic,
        fx.qp,
        SendWr::new(
            2,
            SqOp::LocalInvalidate {
                stag: STag::new(mw.index(), 4),
            },
        ),
    );
    assert_eq!(one_wc(&mut fx).status, CompletionStatus::Success);
    let mut bad = spec.clone();
    bad.access = Access::REMOTE_WRITE;
    assert_eq!(
        fx.rnic.reregister_mr(mr, &bad),
        Err(VerbError::InvalidAccessRights)
    );
    assert_eq!(fx.rnic.query_mr(mr), Err(VerbError::InvalidStagIndex));
}

#[test]
fn shared_region_sees_the_same_bytes() {
    // VERBS-00 §7.3.2.4, §7.4.3
    let mut fx = fixture();
    let mr = fx.reg_mr(PAGE, PAGE, VA, all_rights());
    let shared = fx
        .rnic
        .register_shared_mr(
            mr,
            TaggedBase::ZeroBased,
            fx.pd,
            8,
            true,
            Access::LOCAL_READ | Access::REMOTE_READ,
        )
        .unwrap();
    assert!(fx.rnic.query_mr(mr).unwrap().shared);
    peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 10, b"hello").unwrap();
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, shared, 10, 5).unwrap(),
        b"hello"
    );
    // Read-only view: writes through it are refused.
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, shared, 10, b"x"),
        Err(TerminateCause::DDP_INVALID_STAG)
    );
    // VA with a different FBO is refused.
    assert_eq!(
        fx.rnic.register_shared_mr(
            mr,
            TaggedBase::Va(VA + 1),
            fx.pd,
            9,
            false,
            Access::LOCAL_READ
        ),
        Err(VerbError::InvalidVirtualAddress)
    );
}

/// Registers `len` octets over `pages` (physical addresses, in list order) starting `fbo`
/// into the first page, at VA + fbo, all rights, remote access.
fn page_list_mr(fx: &mut Fx, pages: Vec<u64>, fbo: u64, len: u64) -> STag {
    page_list_mr_access(fx, pages, fbo, len, all_rights())
}

/// [`page_list_mr`] with the right to bind windows too.
fn page_list_mr_with(fx: &mut Fx, pages: Vec<u64>, fbo: u64, len: u64) -> STag {
    page_list_mr_access(fx, pages, fbo, len, all_rights() | Access::BIND)
}

fn page_list_mr_access(fx: &mut Fx, pages: Vec<u64>, fbo: u64, len: u64, access: Access) -> STag {
    let spec = MrSpec {
        pbl: PageList {
            page_size: PAGE,
            pages,
            fbo,
            len,
        },
        base: TaggedBase::Va(VA + fbo),
        pd: fx.pd,
        key: 1,
        remote_access: true,
        access,
    };
    fx.rnic.register_mr(&spec).unwrap()
}

#[test]
fn page_list_scatters_across_non_contiguous_pages() {
    // VERBS-00 §7.6.2.1: a region over pages 5 and 2 (in that order) with FBO 4000.
    let mut fx = fixture();
    let mr = page_list_mr(&mut fx, vec![5 * PAGE, 2 * PAGE], 4000, 200);
    fill(&mut fx.rnic, 0);
    let data: Vec<u8> = (0..200u8).collect();
    peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 4000, &data).unwrap();
    let bytes = fx.rnic.memory().bytes();
    assert_eq!(
        &bytes[(5 * PAGE + 4000) as usize..(6 * PAGE) as usize],
        &data[..96]
    );
    assert_eq!(
        &bytes[(2 * PAGE) as usize..(2 * PAGE + 104) as usize],
        &data[96..]
    );
    assert_eq!(touched(&fx.rnic, 0), 200 - 1); // data[0] == 0
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, mr, VA + 4000, 200).unwrap(),
        data
    );
}

// RFC 5041 §7.2, §8.1: the segments of one Write after the first are placed through the
// grant the first one's STag check left, and land where a first segment would put them:
// across non-contiguous pages of a region, and through a window bound at an offset into
// one; a segment past the end is refused whole (base and bounds), nothing written.
#[test]
fn page_list_segments_after_the_first_land_through_the_grant() {
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    let mr = page_list_mr(&mut fx, vec![5 * PAGE, 2 * PAGE, 7 * PAGE], 4000, 2 * PAGE);
    fill(&mut fx.rnic, 0);
    let data: Vec<u8> = (0..2 * PAGE).map(|i| (i % 253) as u8 + 1).collect();
    for part in data.chunks(1448) {
        let at = (part.as_ptr() as usize - data.as_ptr() as usize) as u64;
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 4000 + at, part).unwrap();
    }
    let bytes = fx.rnic.memory().bytes();
    let first = (PAGE - 4000) as usize;
    assert_eq!(
        &bytes[(5 * PAGE + 4000) as usize..(6 * PAGE) as usize],
        &data[..first]
    );
    assert_eq!(
        &bytes[(2 * PAGE) as usize..(3 * PAGE) as usize],
        &data[first..first + PAGE as usize]
    );
    assert_eq!(
        &bytes[(7 * PAGE) as usize..(8 * PAGE) as usize - first],
        &data[first + PAGE as usize..]
    );
    assert_eq!(
        peer_write(
            &mut fx.rnic,
            fx.pd,
            fx.qp,
            mr,
            VA + 4000 + 2 * PAGE - 10,
            &[9; 11]
        ),
        Err(TerminateCause::DDP_BASE_BOUNDS)
    );
    assert_eq!(touched(&fx.rnic, 0), 2 * PAGE as usize);

    // A window over region octets 100..400 of a second page-list region.
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    // The region starts 200 octets before the end of its first page (VA + FBO).
    let base = VA + PAGE - 200;
    let spec = MrSpec {
        pbl: PageList {
            page_size: PAGE,
            pages: vec![3 * PAGE, PAGE],
            fbo: PAGE - 200,
            len: 600,
        },
        base: TaggedBase::Va(base),
        pd: fx.pd,
        key: 1,
        remote_access: true,
        access: all_rights() | Access::BIND,
    };
    let mr = fx.rnic.register_mr(&spec).unwrap();
    let mw = fx.rnic.alloc_mw(fx.pd).unwrap();
    let b = bind_spec(mw, 1, mr, base + 100, 300, Access::REMOTE_WRITE);
    assert_eq!(bind(&mut fx, 1, b), CompletionStatus::Success);
    let mw = STag::new(mw.index(), 1);
    fill(&mut fx.rnic, 0);
    let data: Vec<u8> = (1..=300).map(|i| (i % 251) as u8 + 1).collect();
    for part in data.chunks(70) {
        let at = (part.as_ptr() as usize - data.as_ptr() as usize) as u64;
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mw, base + 100 + at, part).unwrap();
    }
    let bytes = fx.rnic.memory().bytes();
    // Region octet r lives at page 3 for r < 200, else at page 1 + (r - 200).
    assert_eq!(
        &bytes[(3 * PAGE + PAGE - 100) as usize..(4 * PAGE) as usize],
        &data[..100]
    );
    assert_eq!(&bytes[PAGE as usize..(PAGE + 200) as usize], &data[100..]);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mw, base + 390, &[9; 11]),
        Err(TerminateCause::DDP_BASE_BOUNDS)
    );
    assert_eq!(touched(&fx.rnic, 0), 300);
}

// RFC 5041 §7.2, §8.1: over physically adjacent pages the grant holds the range's backend
// address, and a Write's later segments land by offset from it: the same octets as page
// by page, the last octet of the range taken, a segment one octet past it refused whole
// (base and bounds), nothing written.
// A window at an offset into such a region: the same.
#[test]
fn adjacent_page_segments_land_through_the_grant_range() {
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    let len = 3 * PAGE - 300;
    let mr = page_list_mr(&mut fx, vec![10 * PAGE, 11 * PAGE, 12 * PAGE], 300, len);
    fill(&mut fx.rnic, 0);
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
    for part in data.chunks(1448) {
        let at = (part.as_ptr() as usize - data.as_ptr() as usize) as u64;
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 300 + at, part).unwrap();
    }
    let start = (10 * PAGE + 300) as usize;
    assert_eq!(
        &fx.rnic.memory().bytes()[start..start + len as usize],
        &data[..]
    );
    assert_eq!(touched(&fx.rnic, 0), len as usize);
    let end = VA + 300 + len;
    peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, end - 1, &[0xAB]).unwrap();
    assert_eq!(fx.rnic.memory().bytes()[start + len as usize - 1], 0xAB);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, end - 10, &[9; 11]),
        Err(TerminateCause::DDP_BASE_BOUNDS)
    );
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 299, &[9; 2]),
        Err(TerminateCause::DDP_BASE_BOUNDS)
    );
    assert_eq!(touched(&fx.rnic, 0), len as usize);

    // A window over region octets 5000..8000 of it: the grant's range starts inside the
    // region's second page.
    let mr_all = page_list_mr_with(&mut fx, vec![10 * PAGE, 11 * PAGE, 12 * PAGE], 300, len);
    let mw = fx.rnic.alloc_mw(fx.pd).unwrap();
    let b = bind_spec(mw, 1, mr_all, VA + 300 + 5000, 3000, Access::REMOTE_WRITE);
    assert_eq!(bind(&mut fx, 1, b), CompletionStatus::Success);
    let mw = STag::new(mw.index(), 1);
    fill(&mut fx.rnic, 0);
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 249) as u8 + 1).collect();
    for part in data.chunks(1448) {
        let at = (part.as_ptr() as usize - data.as_ptr() as usize) as u64;
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mw, VA + 5300 + at, part).unwrap();
    }
    let start = (10 * PAGE + 5300) as usize;
    assert_eq!(&fx.rnic.memory().bytes()[start..start + 3000], &data[..]);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mw, VA + 8299, &[9; 2]),
        Err(TerminateCause::DDP_BASE_BOUNDS)
    );
    assert_eq!(touched(&fx.rnic, 0), 3000);
}

// RFC 5044 §4.1 with RFC 5041 §7.2: a Write's payload read out of registered memory for
// its FPDUs is summed (CRC32c continued from the header's, TCP sum) in the read's pass over
// physically adjacent pages (one range: the grant's), and in a second pass over
// non-contiguous ones; the octets are the same as a plain read's, the digest the one of
// the octets read; a region deregistered mid-message fails the next read, digest or not.
#[test]
fn granted_reads_with_a_digest_read_and_sum_the_same_octets() {
    use iwarp::mem::{MemoryTable, ReadGrant};
    use iwarp::wire::crcsum::{crc32c_and_sum, CrcSum};
    for pages in [
        vec![10 * PAGE, 11 * PAGE, 12 * PAGE],
        vec![5 * PAGE, 2 * PAGE, 7 * PAGE],
    ] {
        let mut fx = fixture();
        to_rts(&mut fx.rnic, fx.qp);
        let len = 3 * PAGE - 300;
        let mr = page_list_mr(&mut fx, pages.clone(), 300, len);
        fill(&mut fx.rnic, 0);
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8 + 1).collect();
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 300, &data).unwrap();
        let mem = fx.rnic.memory();
        let r = mem
            .resolve(mr, fx.pd, fx.qp.stream(), VA + 300, len, Access::LOCAL_READ)
            .unwrap();
        let (mut grant, mut plain_grant) = (ReadGrant::default(), ReadGrant::default());
        for (i, part) in data.chunks(1448).enumerate() {
            let off = i as u64 * 1448;
            let seed = iwarp::wire::crc::crc32c(&[0x05, 0xa8]);
            let mut digest = CrcSum::after(seed);
            let mut out = vec![0; part.len()];
            mem.read_granted_digest(&r, &mut grant, off, &mut out, &mut digest)
                .unwrap();
            assert_eq!(out, part, "pages {pages:?}, segment {i}");
            let mut plain = vec![0; part.len()];
            mem.read_granted(&r, &mut plain_grant, off, &mut plain)
                .unwrap();
            assert_eq!(plain, part);
            let mut covered = vec![0x05, 0xa8];
            covered.extend_from_slice(part);
            let want = iwarp::wire::crc::crc32c(&covered);
            assert_eq!(digest.crc, want, "pages {pages:?}, segment {i}");
            assert_eq!(digest.sum.folded(), crc32c_and_sum(part).sum.folded());
            assert_eq!(digest.sum.octets(), part.len());
        }
        fx.rnic.dealloc_stag(mr).unwrap();
        let mem = fx.rnic.memory();
        let mut digest = CrcSum::after(0);
        let mut out = vec![0; 100];
        assert!(mem
            .read_granted_digest(&r, &mut grant, 0, &mut out, &mut digest)
            .is_err());
    }
}

#[test]
fn page_list_merges_adjacent_pages_and_takes_many_ranges() {
    // VERBS-00 §7.6.2.1: pages in list order, whatever their physical order. Pages 3-4-5 and
    // 10-11 are physically adjacent; 9, 8 and 1 are not: five ranges for one access.
    let order = [3u64, 4, 5, 9, 8, 10, 11, 1];
    let mut fx = fixture();
    let len = order.len() as u64 * PAGE - 300;
    let mr = page_list_mr(&mut fx, order.iter().map(|p| p * PAGE).collect(), 100, len);
    fill(&mut fx.rnic, 0);
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
    peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA + 100, &data).unwrap();
    let bytes = fx.rnic.memory().bytes();
    for (i, p) in order.iter().enumerate() {
        // Region octet r lives at list page (r + fbo) / PAGE.
        let lo = (i as u64 * PAGE).max(100);
        let hi = ((i as u64 + 1) * PAGE).min(len + 100);
        let phys = (p * PAGE + lo % PAGE) as usize;
        assert_eq!(
            &bytes[phys..phys + (hi - lo) as usize],
            &data[(lo - 100) as usize..(hi - 100) as usize],
            "list page {i} (physical page {p})"
        );
    }
    assert_eq!(touched(&fx.rnic, 0), len as usize);
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, mr, VA + 100, len as usize).unwrap(),
        data
    );
    // A part inside the merged run 10-11 and across into page 1.
    let at = 5 * PAGE + 50;
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, mr, VA + at, 2 * PAGE as usize + 10).unwrap(),
        &data[(at - 100) as usize..(at - 100) as usize + 2 * PAGE as usize + 10]
    );
}

#[test]
fn stags_list_regions_and_windows_for_monitoring() {
    let mut fx = fixture();
    let mr = fx.reg_mr(0, 8192, 0x10_000, all_rights());
    let mw = fx.rnic.alloc_mw(fx.pd).unwrap();
    let list = fx.rnic.memory().stags();
    let of = |stag: STag| {
        list.iter()
            .find(|i| i.index == stag.index())
            .copied()
            .unwrap()
    };
    let m = of(mr);
    assert_eq!(
        (m.window, m.pd, m.state, m.key, m.len, m.base_to, m.access, m.bound),
        (
            false,
            fx.pd,
            StagState::Valid,
            mr.key(),
            8192,
            0x10_000,
            all_rights(),
            0
        )
    );
    let w = of(mw);
    assert_eq!(
        (w.window, w.state, w.len, w.bound),
        (true, StagState::Invalid, 0, 0)
    );
    assert_eq!(fx.rnic.cq_handles(), [fx.cq]);
}

#[test]
fn a_region_registered_at_a_lane_index_is_shared_and_its_index_is_reserved() {
    // The same region under the same STag on two RNICs (a data plane's lanes): indices
    // with LANE_STAG_BIT are never picked by the RNIC itself, a taken or unreserved index is
    // refused, and the region behaves as a Shared MR (no Invalidate).
    let mut fx = fixture();
    let spec = mr_spec(fx.pd, 0, PAGE, VA, all_rights());
    let index = LANE_STAG_BIT | 0x1234;
    assert_eq!(
        fx.rnic.register_mr_at(index, &spec),
        Err(VerbError::InvalidStagIndex),
        "not reserved"
    );
    fx.rnic.reserve_lane_stags();
    for _ in 0..2000 {
        let mr = fx.reg_mr(0, PAGE, VA, all_rights());
        assert_eq!(mr.index() & LANE_STAG_BIT, 0, "{mr:?}");
        fx.rnic.dealloc_stag(mr).unwrap();
    }
    assert_eq!(
        fx.rnic.register_mr_at(0x1234, &spec),
        Err(VerbError::InvalidStagIndex),
        "an index without the lane bit"
    );
    let stag = fx.rnic.register_mr_at(index, &spec).unwrap();
    assert_eq!(stag, STag::new(index, spec.key));
    assert_eq!(
        fx.rnic.register_mr_at(index, &spec),
        Err(VerbError::InvalidStagIndex),
        "taken"
    );
    assert!(fx.rnic.query_mr(stag).unwrap().shared);
    peer_write(&mut fx.rnic, fx.pd, fx.qp, stag, VA + 3, b"lane").unwrap();
    assert_eq!(
        peer_read(&fx.rnic, fx.pd, fx.qp, stag, VA + 3, 4).unwrap(),
        b"lane"
    );
    to_rts(&mut fx.rnic, fx.qp);
    run_sq(
        &mut fx.rnic,
        fx.qp,
        SendWr::new(1, SqOp::LocalInvalidate { stag }),
    );
    assert_eq!(one_wc(&mut fx).status, CompletionStatus::InvalidStag);
    fx.rnic.dealloc_stag(stag).unwrap();
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, stag, VA + 3, b"x"),
        Err(TerminateCause::DDP_INVALID_STAG)
    );
}
