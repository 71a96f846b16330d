//! Verbs work requests and completions: conformance checklist group K (and the verbs
//! parts of F and G) from SPEC-DIGEST §8. The RDMAP engine's side is driven through
//! `next_send_wr` / `next_recv_wr` / `handle_completion`.

use crate::common::*;
use iwarp::rdmap::{CompletionStatus as EngineStatus, WorkQueue};
use iwarp::verbs::*;

const VA: u64 = 0x1000_0000;

fn rts() -> Fx {
    let mut fx = fixture();
    to_rts(&mut fx.rnic, fx.qp);
    fx
}

fn sge(stag: STag, off: u64, len: u32) -> Sge {
    Sge {
        stag,
        to: VA + off,
        len,
    }
}

#[test]
fn k01_list_stops_at_first_invalid_wr() {
    // VERBS-00 §8.2.1
    let mut fx = fixture();
    let s = Sge {
        stag: STag(0),
        to: 0,
        len: 0,
    };
    let too_many = vec![s; 5];
    let wrs = vec![
        send(1, vec![]),
        send(2, vec![]),
        send(3, too_many),
        send(4, vec![]),
        send(5, vec![]),
    ];
    assert_eq!(
        fx.rnic.post_sq(fx.qp, wrs),
        Err(PostError {
            posted: 2,
            error: VerbError::InvalidSglLength
        })
    );
    fx.rnic
        .modify_qp(fx.qp, ModifyQp::to(QpState::Error))
        .unwrap();
    let ids: Vec<u64> = drain(&mut fx.rnic, fx.cq).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn k02_full_sq_refuses_more() {
    // VERBS-00 §8.2.1, §9.3.1.1
    let mut fx = fixture_with(|i| i.sq_depth = 3);
    let wrs = (0..3).map(|i| send(i, vec![])).collect();
    assert_eq!(fx.rnic.post_sq(fx.qp, wrs), Ok(3));
    assert_eq!(
        fx.rnic.post_sq(fx.qp, vec![send(9, vec![])]),
        Err(PostError {
            posted: 0,
            error: VerbError::TooManyWorkRequests
        })
    );
    // The one-WR post checks and refuses alike.
    assert_eq!(
        fx.rnic.post_sq_one(fx.qp, send(10, vec![])),
        Err(PostError {
            posted: 0,
            error: VerbError::TooManyWorkRequests
        })
    );
    let mut fx = fixture_with(|i| i.sq_depth = 1);
    assert_eq!(fx.rnic.post_sq_one(fx.qp, send(1, vec![])), Ok(()));
    assert_eq!(
        fx.rnic.post_sq_one(fx.qp, send(2, vec![])),
        Err(PostError {
            posted: 0,
            error: VerbError::TooManyWorkRequests
        })
    );
    // Same for the RQ.
    let mut fx = fixture_with(|i| i.rq_depth = 1);
    fx.post_rq(vec![recv(1, vec![])]);
    assert_eq!(
        fx.rnic.post_rq(fx.qp, vec![recv(2, vec![])]),
        Err(PostError {
            posted: 0,
            error: VerbError::TooManyWorkRequests
        })
    );
}

#[test]
fn k03_unsignaled_success_silent_failure_reported_rest_flushed() {
    // VERBS-00 §8.1.3.1
    let mut fx = rts();
    let mr = fx.page_mr(VA);
    fx.post_sq(vec![
        send(1, vec![sge(mr, 0, 8)]).unsignaled(),
        send(2, vec![sge(mr, 0, 8)]).unsignaled(),
        send(3, vec![]),
    ]);
    let w1 = fx.rnic.next_send_wr(fx.qp).unwrap();
    let w2 = fx.rnic.next_send_wr(fx.qp).unwrap();
    let _w3 = fx.rnic.next_send_wr(fx.qp).unwrap();
    fx.complete(w1.wr_id, WorkQueue::Send, EngineStatus::Success, 8);
    assert_eq!(fx.rnic.poll_cq(fx.cq), Err(VerbError::CqEmpty));
    fx.complete(w2.wr_id, WorkQueue::Send, EngineStatus::LocalProtection, 0);
    let wc = fx.rnic.poll_cq(fx.cq).unwrap();
    assert_eq!((wc.wr_id, wc.status), (2, CompletionStatus::InvalidStag));
    assert_eq!(fx.rnic.query_qp(fx.qp).unwrap().state, QpState::Terminate);
    fx.rnic.handle_llp_event(fx.qp, LlpEvent::Closed).unwrap();
    let rest = drain(&mut fx.rnic, fx.cq);
    assert_eq!(rest.len(), 1);
    assert_eq!(
        (rest[0].wr_id, rest[0].status),
        (3, CompletionStatus::Flushed)
    );
}

#[test]
fn k04_receive_reports_message_length() {
    // VERBS-00 §8.1.2.1, §9.3.2.1
    let mut fx = rts();
    let mr = fx.page_mr(VA);
    fx.post_rq(vec![
        recv(1, vec![sge(mr, 0, 64)]),
        recv(2, vec![sge(mr, 64, 64)]),
    ]);
    let r1 = fx.rnic.next_recv_wr(fx.qp).unwrap();
    let r2 = fx.rnic.next_recv_wr(fx.qp).unwrap();
    assert_eq!(r1.sgl, vec![sge(mr, 0, 64)]);
    fx.complete(r1.wr_id, WorkQueue::Recv, EngineStatus::Success, 0);
    fx.complete(r2.wr_id, WorkQueue::Recv, EngineStatus::Success, 37);
    let wcs = drain(&mut fx.rnic, fx.cq);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.opcode, w.byte_len))
            .collect::<Vec<_>>(),
        vec![(1, WcOpcode::Receive, 0), (2, WcOpcode::Receive, 37)]
    );
}

#[test]
fn k05_read_fence_is_handed_to_the_engine_and_only_where_allowed() {
    // VERBS-00 §8.2.2.2: Read Fence applies to Send-type and Write WRs.
    let mut fx = rts();
    let mr = fx.page_mr(VA);
    let read = SendWr::message(
        1,
        SendOp::Read {
            sink: RemoteBuf { stag: mr, to: VA },
            remote: RemoteBuf {
                stag: STag(0x100),
                to: 0,
            },
            len: 16,
        },
    );
    let mut fenced = send(2, vec![sge(mr, 0, 8)]);
    fenced.read_fence = true;
    fx.post_sq(vec![read.clone(), fenced]);
    let r = fx.rnic.next_send_wr(fx.qp).unwrap();
    let s = fx.rnic.next_send_wr(fx.qp).unwrap();
    assert!(!r.read_fence);
    assert!(
        s.read_fence,
        "the engine must hold the Send until the Read completes"
    );
    let mut bad = read;
    bad.read_fence = true;
    assert_eq!(
        fx.rnic.post_sq(fx.qp, vec![bad]).unwrap_err().error,
        VerbError::InvalidModifier
    );
    // Completions still come in posting order even if the Send finishes first
    // (VERBS-00 §8.2.2 rule 2; digest C06).
    fx.complete(s.wr_id, WorkQueue::Send, EngineStatus::Success, 8);
    assert_eq!(fx.rnic.poll_cq(fx.cq), Err(VerbError::CqEmpty));
    fx.complete(r.wr_id, WorkQueue::Send, EngineStatus::Success, 16);
    let ids: Vec<_> = drain(&mut fx.rnic, fx.cq)
        .iter()
        .map(|w| (w.wr_id, w.opcode))
        .collect();
    assert_eq!(ids, vec![(1, WcOpcode::RdmaRead), (2, WcOpcode::Send)]);
}

#[test]
fn k06_local_fence_waits_for_earlier_wrs() {
    // VERBS-00 §8.2.2.2
    let mut fx = rts();
    let mr = fx.page_mr(VA);
    let mut inv = SendWr::new(2, SqOp::LocalInvalidate { stag: mr });
    inv.local_fence = true;
    fx.post_sq(vec![send(1, vec![sge(mr, 0, 8)]), inv]);
    let w1 = fx.rnic.next_send_wr(fx.qp).unwrap();
    assert_eq!(fx.rnic.next_send_wr(fx.qp), None);
    assert_eq!(fx.rnic.query_mr(mr).unwrap().state, StagState::Valid);
    fx.complete(w1.wr_id, WorkQueue::Send, EngineStatus::Success, 8);
    assert_eq!(fx.rnic.next_send_wr(fx.qp), None);
    assert_eq!(fx.rnic.query_mr(mr).unwrap().state, StagState::Invalid);
    let ids: Vec<_> = drain(&mut fx.rnic, fx.cq)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(
        ids,
        vec![
            (1, CompletionStatus::Success),
            (2, CompletionStatus::Success)
        ]
    );
    // Without the fence the invalidation does not wait (§8.2.2.1).
    let mut fx = rts();
    let mr = fx.page_mr(VA);
    fx.post_sq(vec![
        send(1, vec![sge(mr, 0, 8)]),
        SendWr::new(2, SqOp::LocalInvalidate { stag: mr }),
    ]);
    assert!(fx.rnic.next_send_wr(fx.qp).is_some());
    assert_eq!(fx.rnic.next_send_wr(fx.qp), None);
    assert_eq!(fx.rnic.query_mr(mr).unwrap().state, StagState::Invalid);
}

#[test]
fn k07_send_right_after_fast_register_uses_the_new_stag() {
    // VERBS-00 §8.2.2.1 item 3
    let mut fx = privileged_rts();
    let s = fx.rnic.alloc_mr_stag(fx.pd, 1, false).unwrap();
    let new = STag::new(s.index(), 0x42);
    let fr = SendWr::new(
        1,
        SqOp::FastRegister(FastRegSpec {
            stag: new,
            pbl: PageList::contiguous(0, PAGE, PAGE),
            base: TaggedBase::Va(VA),
            access: Access::LOCAL_READ,
        }),
    );
    let out = {
        fx.post_sq(vec![fr, send(2, vec![sge(new, 0, 100)])]);
        fx.rnic.next_send_wr(fx.qp)
    };
    let w = out.expect("the Send goes to the engine");
    assert!(matches!(w.op, SendOp::Send { .. }));
    let wc = fx.rnic.poll_cq(fx.cq).unwrap();
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (1, WcOpcode::FastRegister, CompletionStatus::Success)
    );
}

#[test]
fn k08_zero_length_receive_sge_is_not_validated() {
    // VERBS-00 §8.1.3.2
    let mut fx = rts();
    let bogus = Sge {
        stag: STag(0xDEAD_BEEF),
        to: u64::MAX,
        len: 0,
    };
    fx.post_rq(vec![recv(1, vec![bogus])]);
    let r = fx.rnic.next_recv_wr(fx.qp).unwrap();
    let ctx = LocalContext {
        qp: fx.qp,
        pd: fx.pd,
        privileged: false,
        bind_enabled: false,
    };
    assert!(fx
        .rnic
        .memory()
        .resolve_local(&ctx, bogus.stag, bogus.to, 0, Access::LOCAL_WRITE)
        .is_ok());
    fx.complete(r.wr_id, WorkQueue::Recv, EngineStatus::Success, 0);
    assert_eq!(
        fx.rnic.poll_cq(fx.cq).unwrap().status,
        CompletionStatus::Success
    );
    // Zero-length sends with a bogus SGE go out too.
    assert!(!run_sq(&mut fx.rnic, fx.qp, send(2, vec![bogus])).is_empty());
}

#[test]
fn k09_notification_is_one_shot_and_ignores_existing_cqes() {
    // VERBS-00 §8.2.5
    let mut fx = fixture();
    fx.post_sq(vec![send(1, vec![])]);
    fx.post_rq(vec![recv(2, vec![]), recv(3, vec![])]);
    // One CQE already present when arming.
    let (cq2, _) = fx.rnic.create_cq(fx.ulp, 8).unwrap();
    let (qp2, _) = fx.rnic.create_qp(QpInit::new(fx.pd, cq2, cq2)).unwrap();
    fx.rnic
        .post_sq(qp2, vec![send(10, vec![]), send(11, vec![])])
        .unwrap();
    fx.rnic
        .modify_qp(qp2, ModifyQp::to(QpState::Error))
        .unwrap();
    fx.rnic
        .request_notification(cq2, NotifyType::NextCompletion)
        .unwrap();
    assert_eq!(fx.rnic.poll_completion_event(), None);
    // Fires once on the next CQE, not again without re-arming.
    fx.rnic
        .request_notification(fx.cq, NotifyType::NextCompletion)
        .unwrap();
    fx.rnic
        .request_notification(fx.cq, NotifyType::NextSolicited)
        .unwrap();
    fx.rnic
        .modify_qp(fx.qp, ModifyQp::to(QpState::Error))
        .unwrap();
    assert_eq!(fx.rnic.query_cq(fx.cq).unwrap().occupancy, 3);
    assert_eq!(fx.rnic.poll_completion_event(), Some(fx.cq));
    assert_eq!(fx.rnic.poll_completion_event(), None);
}

#[test]
fn k10_post_rq_on_srq_qp_is_refused() {
    // VERBS-00 §6.3.5, §9.3.1.2
    let mut fx = fixture();
    let (srq, _) = fx.rnic.create_srq(fx.pd, 8, 2, 0).unwrap();
    let (qp, _) = fx.rnic.create_qp(fx.srq_qp_init(srq)).unwrap();
    assert_eq!(
        fx.rnic
            .post_rq(qp, vec![recv(1, vec![])])
            .unwrap_err()
            .error,
        VerbError::RqAssociatedWithSrq
    );
    assert_eq!(fx.rnic.post_srq(srq, vec![recv(1, vec![])]), Ok(1));
}

#[test]
fn k11_srq_limit_fires_once_until_rearmed() {
    // VERBS-00 §6.3.8
    let mut fx = fixture();
    let (srq, _) = fx.rnic.create_srq(fx.pd, 16, 1, 3).unwrap();
    let (qp, _) = fx.rnic.create_qp(fx.srq_qp_init(srq)).unwrap();
    to_rts(&mut fx.rnic, qp);
    events(&mut fx.rnic);
    let wrs = (0..6).map(|i| recv(i, vec![])).collect();
    fx.rnic.post_srq(srq, wrs).unwrap();
    let limit_events = |fx: &mut Fx| {
        events(&mut fx.rnic)
            .into_iter()
            .filter(|e| e.kind == AsyncEventKind::SrqLimitReached)
            .count()
    };
    for _ in 0..3 {
        fx.rnic.next_recv_wr(qp).unwrap(); // available 5, 4, 3
    }
    assert_eq!(limit_events(&mut fx), 0);
    fx.rnic.next_recv_wr(qp).unwrap(); // available 2 < 3
    assert_eq!(limit_events(&mut fx), 1);
    fx.rnic.next_recv_wr(qp).unwrap(); // 1: not again
    assert_eq!(limit_events(&mut fx), 0);
    assert!(!fx.rnic.query_srq(srq).unwrap().armed);
    fx.rnic.modify_srq(srq, None, None, true).unwrap();
    fx.rnic.next_recv_wr(qp).unwrap(); // 0
    assert_eq!(limit_events(&mut fx), 1);
    // Limit above the size is out of range.
    assert_eq!(
        fx.rnic.modify_srq(srq, None, Some(17), true),
        Err(VerbError::SrqLimitOutOfRange)
    );
}

#[test]
fn k12_empty_cq_and_error_wcs_until_destroy() {
    // VERBS-00 §8.2.4, §9.3.2.1
    let mut fx = fixture();
    assert_eq!(fx.rnic.poll_cq(fx.cq), Err(VerbError::CqEmpty));
    fx.post_sq(vec![send(1, vec![]), send(2, vec![])]);
    fx.rnic
        .modify_qp(fx.qp, ModifyQp::to(QpState::Error))
        .unwrap();
    assert_eq!(fx.rnic.poll_cq(fx.cq).unwrap().wr_id, 1);
    fx.rnic.destroy_qp(fx.qp).unwrap();
    assert_eq!(fx.rnic.poll_cq(fx.cq), Err(VerbError::CqEmpty));
}

#[test]
fn f05_f06_next_solicited_fires_on_se_and_errors_only() {
    // RFC 5040 §5.3; VERBS-00 §8.2.5
    let mut fx = rts();
    fx.post_rq(vec![recv(1, vec![]), recv(2, vec![]), recv(3, vec![])]);
    let r: Vec<_> = (0..3)
        .map(|_| fx.rnic.next_recv_wr(fx.qp).unwrap())
        .collect();
    fx.rnic
        .request_notification(fx.cq, NotifyType::NextSolicited)
        .unwrap();
    fx.complete(r[0].wr_id, WorkQueue::Recv, EngineStatus::Success, 1);
    assert_eq!(fx.rnic.poll_completion_event(), None);
    let mut se = engine_done(r[1].wr_id, WorkQueue::Recv, EngineStatus::Success, 1);
    se.solicited = true;
    fx.rnic.handle_completion(fx.qp, se).unwrap();
    assert_eq!(fx.rnic.poll_completion_event(), Some(fx.cq));
    // F06: an error WC triggers "next solicited" too.
    fx.rnic
        .request_notification(fx.cq, NotifyType::NextSolicited)
        .unwrap();
    fx.complete(r[2].wr_id, WorkQueue::Recv, EngineStatus::RecvOverflow, 0);
    assert_eq!(fx.rnic.poll_completion_event(), Some(fx.cq));
    let wcs = drain(&mut fx.rnic, fx.cq);
    assert_eq!(wcs[2].status, CompletionStatus::BaseBoundsViolation);
}

#[test]
fn f01_receive_reports_the_invalidated_stag() {
    // RFC 5040 §5.3; VERBS-00 §8.2.2.1 item 1, §9.3.2.1
    let mut fx = rts();
    let mr = fx.page_mr(VA);
    fx.post_rq(vec![recv(1, vec![])]);
    let r = fx.rnic.next_recv_wr(fx.qp).unwrap();
    peer_send_inv(&mut fx.rnic, fx.pd, fx.qp, mr).unwrap();
    let mut c = engine_done(r.wr_id, WorkQueue::Recv, EngineStatus::Success, 0);
    c.invalidated = Some(mr);
    fx.rnic.handle_completion(fx.qp, c).unwrap();
    let wc = fx.rnic.poll_cq(fx.cq).unwrap();
    assert_eq!(wc.invalidated, Some(mr));
    assert_eq!(fx.rnic.query_mr(mr).unwrap().state, StagState::Invalid);
    assert_eq!(
        peer_write(&mut fx.rnic, fx.pd, fx.qp, mr, VA, b"x"),
        Err(iwarp::wire::terminate::TerminateCause::DDP_INVALID_STAG)
    );
}

#[test]
fn g07_invalid_source_stag_terminates_instead_of_sending() {
    // RFC 5040 §7.1 case 1; VERBS-00 §6.4 item 4, Fig. 23
    let mut fx = rts();
    actions(&mut fx.rnic);
    let bad = Sge {
        stag: STag(0x00AB_CD01),
        to: 0,
        len: 4,
    };
    assert!(run_sq(&mut fx.rnic, fx.qp, send(1, vec![bad])).is_empty());
    assert_eq!(
        fx.rnic.poll_cq(fx.cq).unwrap().status,
        CompletionStatus::InvalidStag
    );
    assert_eq!(
        actions(&mut fx.rnic),
        vec![QpAction::SendTerminate {
            qp: fx.qp,
            cause: iwarp::wire::terminate::TerminateCause::RDMAP_LOCAL_CATASTROPHIC
        }]
    );
}

#[test]
fn g12_one_error_wc_then_only_flushed() {
    // VERBS-00 §6.2.4
    let mut fx = rts();
    let mr = fx.page_mr(VA);
    fx.post_sq(vec![
        send(1, vec![sge(mr, 0, 4)]),
        send(2, vec![sge(mr, 0, 4)]),
        send(3, vec![sge(mr, 0, 4)]),
    ]);
    fx.post_rq(vec![recv(4, vec![])]);
    let w: Vec<_> = (0..3)
        .map(|_| fx.rnic.next_send_wr(fx.qp).unwrap())
        .collect();
    // The engine fails the 2nd and 3rd (e.g. remote Terminate), the 1st is in flight.
    fx.complete(w[1].wr_id, WorkQueue::Send, EngineStatus::Fatal, 0);
    fx.complete(w[2].wr_id, WorkQueue::Send, EngineStatus::Fatal, 0);
    fx.rnic.handle_llp_event(fx.qp, LlpEvent::Reset).unwrap();
    let wcs = drain(&mut fx.rnic, fx.cq);
    assert_eq!(wcs.len(), 4);
    let errors = wcs
        .iter()
        .filter(|w| {
            !matches!(
                w.status,
                CompletionStatus::Success | CompletionStatus::Flushed
            )
        })
        .count();
    assert_eq!(errors, 1, "{wcs:?}");
}

/// A Send of `data` carried inline in the WQE.
fn inline_send(wr_id: u64, data: Vec<u8>) -> SendWr {
    SendWr::new(
        wr_id,
        SqOp::Inline {
            op: SendOp::Send {
                sgl: iwarp::mem::Sgl::new(),
                solicited: false,
                invalidate: None,
            },
            data,
        },
    )
}

#[test]
fn inline_data_is_copied_at_post_time() {
    // VERBS-00 §8.1.3.2 (the WQE holds the data; no STag of the consumer involved).
    let mut fx = rts();
    let mut data = b"inline payload".to_vec();
    let wr = inline_send(1, data.clone());
    let out = run_sq(&mut fx.rnic, fx.qp, wr);
    data[0] = b'X'; // the consumer's buffer is free right after posting
    let SendOp::Send { sgl, .. } = &out[0].op else {
        panic!("not a Send: {:?}", out[0].op);
    };
    use iwarp::mem::MemoryTable;
    let resolve = |fx: &Fx, access| {
        fx.rnic
            .memory()
            .resolve(sgl[0].stag, fx.pd, fx.qp.stream(), 0, 14, access)
    };
    let r = resolve(&fx, Access::LOCAL_READ).unwrap();
    let mut got = vec![0; 14];
    fx.rnic.memory().read(&r, 0, &mut got).unwrap();
    assert_eq!(got, b"inline payload");
    // Not reachable remotely, not writable.
    assert!(resolve(&fx, Access::REMOTE_READ).is_err());
    fx.complete(out[0].wr_id, WorkQueue::Send, EngineStatus::Success, 14);
    assert!(resolve(&fx, Access::LOCAL_READ).is_err());
    // Too long inline data is refused.
    let big = inline_send(2, vec![0; fx.rnic.query().max_inline as usize + 1]);
    assert_eq!(
        fx.rnic.post_sq(fx.qp, vec![big]).unwrap_err().error,
        VerbError::InvalidModifier
    );
}

#[test]
fn read_with_invalidate_local_invalidates_the_sink() {
    // VERBS-00 §8.1.2.2, §8.2.2.1
    let mut fx = rts();
    let mr = fx.page_mr(VA);
    let op = SendOp::Read {
        sink: RemoteBuf { stag: mr, to: VA },
        remote: RemoteBuf {
            stag: STag(0x100),
            to: 0,
        },
        len: 8,
    };
    let w = run_sq(
        &mut fx.rnic,
        fx.qp,
        SendWr::new(1, SqOp::ReadInvalidate(op)),
    );
    assert_eq!(fx.rnic.query_mr(mr).unwrap().state, StagState::Valid);
    fx.complete(w[0].wr_id, WorkQueue::Send, EngineStatus::Success, 8);
    assert_eq!(fx.rnic.query_mr(mr).unwrap().state, StagState::Invalid);
    let wc = fx.rnic.poll_cq(fx.cq).unwrap();
    assert_eq!(
        (wc.opcode, wc.status),
        (WcOpcode::RdmaReadInvalidate, CompletionStatus::Success)
    );
}

#[test]
fn channel_carries_wrs_in_and_completions_out() {
    // Thread model: SPSC rings between an application thread and the poll core.
    let mut fx = fixture();
    let (app, mut core) = channel::pair(4, vec![fx.cq], vec![fx.qp]);
    let t = std::thread::spawn(move || {
        for i in 0..3 {
            app.post_send(QpId(0), send(i, vec![])).unwrap();
        }
        app
    });
    let app = t.join().unwrap();
    // QpId(0) does not exist: every post is rejected and reported back.
    assert_eq!(core.pump(&mut fx.rnic), 3);
    let mut rejected = 0;
    while let Some(n) = app.poll() {
        assert!(matches!(
            n,
            channel::Notice::Rejected {
                error: VerbError::InvalidQpHandle,
                ..
            }
        ));
        rejected += 1;
    }
    assert_eq!(rejected, 3);
    for i in 0..3 {
        app.post_send(fx.qp, send(10 + i, vec![])).unwrap();
    }
    core.pump(&mut fx.rnic);
    fx.rnic
        .modify_qp(fx.qp, ModifyQp::to(QpState::Error))
        .unwrap();
    core.pump(&mut fx.rnic);
    let mut ids = Vec::new();
    while let Some(channel::Notice::Completion { wc, .. }) = app.poll() {
        ids.push(wc.wr_id);
    }
    assert_eq!(ids, vec![10, 11, 12]);
    // A full ring hands the command back.
    for i in 0..4 {
        app.post_send(fx.qp, send(i, vec![])).unwrap();
    }
    assert!(app.post_send(fx.qp, send(9, vec![])).is_err());
}

#[test]
fn completion_event_handler_identifiers() {
    // VERBS-00 §9.2.3.1, §9.2.3.2, §9.4.1, Figs. 30 and 35
    let mut fx = fixture();
    let bogus = CompletionHandlerId(12345);
    assert_eq!(
        fx.rnic.create_cq_with_handler(fx.ulp, 4, Some(bogus)),
        Err(VerbError::InvalidCompletionHandlerId)
    );
    let h = fx.rnic.add_completion_handler().unwrap();
    let (cq, _) = fx.rnic.create_cq_with_handler(fx.ulp, 4, Some(h)).unwrap();
    assert_eq!(fx.rnic.query_cq(cq).unwrap().handler, Some(h));
    fx.rnic.remove_completion_handler(h).unwrap();
    assert_eq!(fx.rnic.query_cq(cq).unwrap().handler, None);
    assert_eq!(
        fx.rnic.remove_completion_handler(h),
        Err(VerbError::InvalidCompletionHandlerId)
    );
    let max = fx.rnic.query().max_cq_handlers;
    for _ in 0..max {
        fx.rnic.add_completion_handler().unwrap();
    }
    assert_eq!(
        fx.rnic.add_completion_handler(),
        Err(VerbError::InsufficientResources)
    );
}

#[test]
fn rnic_can_be_opened_once_at_a_time() {
    // VERBS-00 §5.1.2, §5.1.4, §9.2.1.1
    let dev = device();
    let rnic = open(&dev);
    let again = dev.open(
        AddressingMode::Page,
        Box::new(iwarp::mem::HeapBackend::new(4096)),
        1,
    );
    assert_eq!(again.unwrap_err(), VerbError::RnicInUse);
    assert_eq!(
        device()
            .open(
                AddressingMode::Block,
                Box::new(iwarp::mem::HeapBackend::new(4096)),
                1
            )
            .unwrap_err(),
        VerbError::BlockModeUnsupported
    );
    assert_eq!(rnic.query().max_qps, RnicAttributes::default().max_qps);
    rnic.close();
    let mut reopened = open(&dev);
    // Close freed everything: a fresh RNIC has no PD to deallocate.
    assert_eq!(reopened.dealloc_pd(PdId(1)), Err(VerbError::InvalidPdId));
}

// The poll core moves work only for the QPs the RNIC lists as touched: every post (SQ, RQ,
// an S-RQ's QPs) and Modify QP lists its QP once; idle QPs are not listed.
#[test]
fn touched_qps_list_each_qp_with_new_work_once() {
    let mut fx = fixture();
    let take = |rnic: &mut Rnic| {
        let mut v = Vec::new();
        rnic.take_touched_qps(&mut v);
        v
    };
    let (idle, _) = fx.rnic.create_qp(QpInit::new(fx.pd, fx.cq, fx.cq)).unwrap();
    to_rts(&mut fx.rnic, fx.qp);
    assert_eq!(take(&mut fx.rnic), [fx.qp], "Modify QP lists the QP");
    assert!(take(&mut fx.rnic).is_empty());
    fx.rnic.post_rq(fx.qp, vec![recv(1, Vec::new())]).unwrap();
    fx.rnic.post_sq(fx.qp, vec![send(2, Vec::new())]).unwrap();
    fx.rnic.post_sq(fx.qp, vec![send(3, Vec::new())]).unwrap();
    assert_eq!(take(&mut fx.rnic), [fx.qp], "three posts, one entry");
    // An S-RQ post lists the QPs drawing on it that found it empty, not the others.
    let (srq, _) = fx.rnic.create_srq(fx.pd, 8, 1, 0).unwrap();
    let mut init = QpInit::new(fx.pd, fx.cq, fx.cq);
    init.srq = Some(srq);
    let (on_srq, _) = fx.rnic.create_qp(init).unwrap();
    to_rts(&mut fx.rnic, on_srq);
    assert_eq!(take(&mut fx.rnic), [on_srq]);
    assert!(fx.rnic.next_recv_wr(on_srq).is_none(), "the S-RQ is empty");
    fx.rnic.post_srq(srq, vec![recv(4, Vec::new())]).unwrap();
    assert_eq!(take(&mut fx.rnic), [on_srq]);
    assert!(!take(&mut fx.rnic).contains(&idle));
}

// Posting to an S-RQ that 1,000 QPs share costs O(1) per WR: each WR wakes one QP that
// found the S-RQ empty, oldest first; QPs that did not ask, destroyed ones and ones asking
// twice are not listed twice; a woken QP that is not in RTS hands its wake-up on.
#[test]
fn srq_post_wakes_one_waiting_qp_per_wr_oldest_first() {
    let mut fx = fixture();
    let take = |rnic: &mut Rnic| {
        let mut v = Vec::new();
        rnic.take_touched_qps(&mut v);
        v
    };
    let (srq, _) = fx.rnic.create_srq(fx.pd, 64, 1, 0).unwrap();
    let qps: Vec<QpId> = (0..1000)
        .map(|_| {
            let (qp, _) = fx.rnic.create_qp(fx.srq_qp_init(srq)).unwrap();
            to_rts(&mut fx.rnic, qp);
            qp
        })
        .collect();
    assert_eq!(take(&mut fx.rnic).len(), 1000);
    for &qp in &qps[..4] {
        assert!(fx.rnic.next_recv_wr(qp).is_none());
    }
    assert!(
        fx.rnic.next_recv_wr(qps[0]).is_none(),
        "asking twice queues once"
    );
    fx.rnic.post_srq(srq, vec![recv(1, Vec::new())]).unwrap();
    assert_eq!(take(&mut fx.rnic), [qps[0]]);
    let two = vec![recv(2, Vec::new()), recv(3, Vec::new())];
    fx.rnic.post_srq(srq, two).unwrap();
    assert_eq!(take(&mut fx.rnic), [qps[1], qps[2]]);
    fx.rnic.destroy_qp(qps[3]).unwrap();
    take(&mut fx.rnic);
    fx.rnic.post_srq(srq, vec![recv(4, Vec::new())]).unwrap();
    assert!(take(&mut fx.rnic).is_empty(), "nobody else waits");
    // The first QP woken takes every WQE, then waits again.
    let got: Vec<u64> = std::iter::from_fn(|| fx.rnic.next_recv_wr(qps[0]))
        .map(|w| w.wr_id)
        .collect();
    assert_eq!(got.len(), 4);
    fx.rnic.post_srq(srq, vec![recv(5, Vec::new())]).unwrap();
    assert_eq!(take(&mut fx.rnic), [qps[0]]);
    assert!(fx.rnic.next_recv_wr(qps[0]).is_some());
    // qps[10] and qps[11] wait; qps[10] leaves RTS; the wake-up it got goes to qps[11].
    for &qp in &qps[10..12] {
        assert!(fx.rnic.next_recv_wr(qp).is_none());
    }
    fx.rnic
        .modify_qp(qps[10], ModifyQp::to(QpState::Error))
        .unwrap();
    take(&mut fx.rnic);
    fx.rnic.post_srq(srq, vec![recv(6, Vec::new())]).unwrap();
    assert_eq!(take(&mut fx.rnic), [qps[10]]);
    assert!(fx.rnic.next_recv_wr(qps[10]).is_none());
    assert_eq!(take(&mut fx.rnic), [qps[11]]);
    assert!(fx.rnic.next_recv_wr(qps[11]).is_some());
}

// The RNIC counts the WRs waiting over all its QPs so that `has_pending_wrs` can answer
// without looking a QP up while none wait: the answer follows each QP's queues through
// posts, takes, a flush into Error and Destroy QP. A QP not found has WRs waiting only
// while some QP has (the lookup is made then), so asking for one shows the count at 0.
#[test]
fn pending_wrs_follow_posts_takes_flushes_and_destroy() {
    let mut fx = fixture();
    let (qp1, cq, pd) = (fx.qp, fx.cq, fx.pd);
    let (qp2, _) = fx.rnic.create_qp(QpInit::new(pd, cq, cq)).unwrap();
    let r = &mut fx.rnic;
    let gone = QpId(u32::MAX);
    assert!(!r.has_pending_wrs(qp1) && !r.has_pending_wrs(qp2));
    assert!(!r.has_pending_wrs(gone));
    r.post_sq(qp1, vec![send(1, vec![]), send(2, vec![])])
        .unwrap();
    r.post_rq(qp2, vec![recv(3, vec![])]).unwrap();
    assert!(r.has_pending_wrs(qp1) && r.has_pending_wrs(qp2));
    assert!(r.has_pending_wrs(gone), "looked up while WRs wait");
    to_rts(r, qp1);
    assert!(r.next_send_wr(qp1).is_some());
    assert!(r.has_pending_wrs(qp1), "one of two taken");
    assert!(r.next_send_wr(qp1).is_some());
    assert!(!r.has_pending_wrs(qp1));
    assert!(r.has_pending_wrs(qp2));
    to_rts(r, qp2);
    assert!(r.next_rq_wr(qp2).is_some());
    assert!(!r.has_pending_wrs(qp2));
    assert!(!r.has_pending_wrs(gone), "none waits anywhere");
    // Flushed by the entry to Error.
    r.post_sq(qp1, vec![send(4, vec![])]).unwrap();
    r.post_rq(qp1, vec![recv(5, vec![])]).unwrap();
    assert!(r.has_pending_wrs(qp1));
    r.modify_qp(qp1, ModifyQp::to(QpState::Error)).unwrap();
    assert!(!r.has_pending_wrs(qp1));
    assert!(!r.has_pending_wrs(gone));
    // Destroyed with WRs waiting.
    r.post_rq(qp2, vec![recv(6, vec![]), recv(7, vec![])])
        .unwrap();
    r.post_sq(qp2, vec![send(8, vec![])]).unwrap();
    assert!(r.has_pending_wrs(qp2));
    r.destroy_qp(qp2).unwrap();
    assert!(!r.has_pending_wrs(qp2) && !r.has_pending_wrs(gone));
    let (qp3, _) = r.create_qp(QpInit::new(pd, cq, cq)).unwrap();
    assert!(!r.has_pending_wrs(qp3));
    r.post_sq(qp3, vec![send(9, vec![])]).unwrap();
    assert!(r.has_pending_wrs(qp3));
    to_rts(r, qp3);
    assert!(r.next_send_wr(qp3).is_some());
    assert!(!r.has_pending_wrs(qp3) && !r.has_pending_wrs(gone));
}
