//! Verbs QP state machine: conformance checklist group I (SPEC-DIGEST §8) and a
//! model-based test comparing random verb sequences with a reference model of
//! VERBS-00 §6.2 (Fig. 6).

use crate::common::*;
use iwarp::verbs::*;
use proptest::prelude::*;

fn state(rnic: &Rnic, qp: QpId) -> QpState {
    rnic.query_qp(qp).unwrap().state
}

/// Drives a fresh QP into `s` through legal transitions.
fn qp_in(s: QpState) -> Fx {
    let mut fx = fixture();
    let qp = fx.qp;
    match s {
        QpState::Idle => {}
        QpState::Rts => to_rts(&mut fx.rnic, qp),
        QpState::Closing | QpState::Terminate | QpState::Error => {
            to_rts(&mut fx.rnic, qp);
            fx.rnic.modify_qp(qp, ModifyQp::to(s)).unwrap();
        }
    }
    assert_eq!(state(&fx.rnic, qp), s);
    fx
}

/// A QP in RTS, the actions and events of getting there taken; returns it with its id.
fn quiet_rts() -> (Fx, QpId) {
    let mut fx = qp_in(QpState::Rts);
    actions(&mut fx.rnic);
    events(&mut fx.rnic);
    let qp = fx.qp;
    (fx, qp)
}

#[test]
fn i01_new_qp_is_idle_and_does_not_process() {
    // VERBS-00 §6.1.1, §6.2.1
    let mut fx = fixture();
    assert_eq!(state(&fx.rnic, fx.qp), QpState::Idle);
    fx.post_sq(vec![send(1, vec![])]);
    fx.post_rq(vec![recv(2, vec![])]);
    assert_eq!(fx.rnic.next_send_wr(fx.qp), None);
    assert_eq!(fx.rnic.next_recv_wr(fx.qp), None);
    assert_eq!(fx.rnic.poll_cq(fx.cq), Err(VerbError::CqEmpty));
}

#[test]
fn i02_idle_to_terminate_or_closing_is_refused() {
    // VERBS-00 §6.2.1
    let mut fx = fixture();
    let before = fx.rnic.query_qp(fx.qp).unwrap();
    for to in [QpState::Terminate, QpState::Closing] {
        let mut m = ModifyQp::to(to);
        m.ord = Some(1);
        assert_eq!(
            fx.rnic.modify_qp(fx.qp, m),
            Err(VerbError::InvalidStateChange)
        );
        assert_eq!(fx.rnic.query_qp(fx.qp).unwrap(), before);
    }
}

#[test]
fn i03_idle_to_rts_needs_an_established_llp_stream() {
    // VERBS-00 §6.2.1.2, Fig. 4
    let mut fx = fixture();
    assert_eq!(
        fx.rnic.modify_qp(fx.qp, ModifyQp::to(QpState::Rts)),
        Err(VerbError::InvalidLlpStreamHandle)
    );
    let mut l = llp(7);
    l.established = false;
    assert_eq!(
        fx.rnic.modify_qp(fx.qp, ModifyQp::to_rts(l)),
        Err(VerbError::InvalidLlpStreamHandle)
    );
    assert_eq!(state(&fx.rnic, fx.qp), QpState::Idle);
    assert!(actions(&mut fx.rnic).is_empty());
    to_rts(&mut fx.rnic, fx.qp);
    assert_eq!(
        actions(&mut fx.rnic),
        vec![QpAction::Attach {
            qp: fx.qp,
            stream: LlpStreamHandle(u64::from(fx.qp.0)),
            stream_message: None
        }]
    );
}

#[test]
fn i04_rts_to_idle_is_refused() {
    // VERBS-00 §6.2.2
    let mut fx = qp_in(QpState::Rts);
    assert_eq!(
        fx.rnic.modify_qp(fx.qp, ModifyQp::to(QpState::Idle)),
        Err(VerbError::InvalidStateChange)
    );
    assert_eq!(state(&fx.rnic, fx.qp), QpState::Rts);
}

#[test]
fn i05_no_modify_in_terminate_or_closing() {
    // VERBS-00 §6.2.3, §6.2.5
    for s in [QpState::Terminate, QpState::Closing] {
        let mut fx = qp_in(s);
        for to in QpState::ALL {
            assert_eq!(
                fx.rnic.modify_qp(fx.qp, ModifyQp::to(to)),
                Err(VerbError::InvalidStateChange),
                "{s:?} -> {to:?}"
            );
            assert_eq!(state(&fx.rnic, fx.qp), s);
        }
    }
}

#[test]
fn i06_error_transitions_and_still_flushing() {
    // VERBS-00 §6.2.4
    let mut fx = qp_in(QpState::Error);
    for to in [QpState::Rts, QpState::Terminate, QpState::Closing] {
        assert_eq!(
            fx.rnic.modify_qp(fx.qp, ModifyQp::to(to)),
            Err(VerbError::InvalidStateChange)
        );
    }
    // A CQ with room for one entry: flushing three WRs cannot finish until polled.
    let ulp = UlpId(9);
    let pd = fx.rnic.alloc_pd(ulp).unwrap();
    let (cq, n) = fx.rnic.create_cq(ulp, 1).unwrap();
    assert_eq!(n, 1);
    let (qp, _) = fx.rnic.create_qp(QpInit::new(pd, cq, cq)).unwrap();
    fx.rnic
        .post_sq(qp, vec![send(1, vec![]), send(2, vec![]), send(3, vec![])])
        .unwrap();
    fx.rnic.modify_qp(qp, ModifyQp::to(QpState::Error)).unwrap();
    assert_eq!(
        fx.rnic.modify_qp(qp, ModifyQp::to(QpState::Idle)),
        Err(VerbError::StillFlushing)
    );
    let mut ids = Vec::new();
    while let Ok(wc) = fx.rnic.poll_cq(cq) {
        assert_eq!(wc.status, CompletionStatus::Flushed);
        ids.push(wc.wr_id);
    }
    assert_eq!(ids, vec![1, 2, 3]);
    fx.rnic.modify_qp(qp, ModifyQp::to(QpState::Idle)).unwrap();
    assert_eq!(state(&fx.rnic, qp), QpState::Idle);
}

// Several QPs flushing into one full CQ: each poll that makes room resumes the QPs waiting
// for it (and only they are looked at); a QP destroyed while it waits is skipped.
#[test]
fn flushes_waiting_for_a_full_cq_resume_as_it_is_polled() {
    let mut fx = fixture();
    let ulp = UlpId(9);
    let pd = fx.rnic.alloc_pd(ulp).unwrap();
    let (cq, _) = fx.rnic.create_cq(ulp, 2).unwrap();
    let qps: Vec<QpId> = (0..3)
        .map(|k| {
            let (qp, _) = fx.rnic.create_qp(QpInit::new(pd, cq, cq)).unwrap();
            let wrs = (0..3).map(|i| send(10 * k + i, vec![])).collect();
            fx.rnic.post_sq(qp, wrs).unwrap();
            qp
        })
        .collect();
    for &qp in &qps {
        fx.rnic.modify_qp(qp, ModifyQp::to(QpState::Error)).unwrap();
    }
    fx.rnic.destroy_qp(qps[1]).unwrap();
    let mut ids = Vec::new();
    while let Ok(wc) = fx.rnic.poll_cq(cq) {
        assert_eq!(wc.status, CompletionStatus::Flushed);
        ids.push(wc.wr_id);
    }
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2, 20, 21, 22], "every WR of the QPs left, once");
    for qp in [qps[0], qps[2]] {
        fx.rnic.modify_qp(qp, ModifyQp::to(QpState::Idle)).unwrap();
    }
}

#[test]
fn i07_idle_error_idle_flushes_every_wr() {
    // VERBS-00 §6.2.1.3
    let mut fx = fixture();
    fx.post_sq(vec![send(1, vec![]), send(2, vec![]).unsignaled()]);
    fx.post_rq(vec![recv(3, vec![]), recv(4, vec![])]);
    fx.rnic
        .modify_qp(fx.qp, ModifyQp::to(QpState::Error))
        .unwrap();
    let wcs = drain(&mut fx.rnic, fx.cq);
    let mut ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    ids.sort();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    assert!(wcs.iter().all(|w| w.status == CompletionStatus::Flushed));
    fx.rnic
        .modify_qp(fx.qp, ModifyQp::to(QpState::Idle))
        .unwrap();
    assert_eq!(state(&fx.rnic, fx.qp), QpState::Idle);
    // The slots were freed by polling: a full SQ's worth can be posted again.
    let depth = fx.rnic.query_qp(fx.qp).unwrap().init.sq_depth;
    let wrs = (0..depth).map(|i| send(u64::from(i), vec![])).collect();
    assert_eq!(fx.rnic.post_sq(fx.qp, wrs), Ok(depth as usize));
}

#[test]
fn i08_invalid_attribute_changes_nothing() {
    // VERBS-00 §6.1.3
    let mut fx = fixture();
    let before = fx.rnic.query_qp(fx.qp).unwrap();
    let max_ird = fx.rnic.query().max_ird_per_qp;
    let mut m = ModifyQp::to(QpState::Idle);
    m.ord = Some(1);
    m.sq_depth = Some(8);
    m.ird = Some(max_ird + 1);
    assert_eq!(
        fx.rnic.modify_qp(fx.qp, m),
        Err(VerbError::IrdExceedsCapability)
    );
    assert_eq!(fx.rnic.query_qp(fx.qp).unwrap(), before);
    // An attribute the transition does not allow (Fig. 4: Idle->Error carries none).
    let mut m = ModifyQp::to(QpState::Error);
    m.ord = Some(1);
    assert_eq!(fx.rnic.modify_qp(fx.qp, m), Err(VerbError::InvalidModifier));
    assert_eq!(fx.rnic.query_qp(fx.qp).unwrap(), before);
    // Shrinking an SQ below its occupancy fails too.
    fx.post_sq(vec![send(1, vec![]), send(2, vec![])]);
    let mut m = ModifyQp::to(QpState::Idle);
    m.sq_depth = Some(1);
    assert_eq!(
        fx.rnic.modify_qp(fx.qp, m),
        Err(VerbError::ShrinkBelowOccupancy)
    );
    // A valid change applies.
    let mut m = ModifyQp::to(QpState::Idle);
    m.ord = Some(1);
    assert_eq!(fx.rnic.modify_qp(fx.qp, m).unwrap().ord, 1);
}

#[test]
fn i09_destroy_from_every_state_unless_windows_bound() {
    // VERBS-00 §6.1.4, §9.2.5.4
    for s in QpState::ALL {
        let mut fx = qp_in(s);
        fx.rnic.destroy_qp(fx.qp).unwrap();
        assert_eq!(fx.rnic.query_qp(fx.qp), Err(VerbError::InvalidQpHandle));
    }
    let mut fx = qp_in(QpState::Rts);
    let mr = fx.reg_mr(0, PAGE, 0x10000, all_rights() | Access::BIND);
    let mw = fx.rnic.alloc_mw(fx.pd).unwrap();
    let bind = BindSpec {
        mw: STag::new(mw.index(), 3),
        mr,
        mr_to: 0x10000,
        len: 64,
        zero_based: false,
        access: Access::REMOTE_WRITE,
    };
    fx.post_sq(vec![SendWr::new(1, SqOp::Bind(bind))]);
    assert_eq!(fx.rnic.next_send_wr(fx.qp), None);
    assert_eq!(
        fx.rnic.poll_cq(fx.cq).unwrap().status,
        CompletionStatus::Success
    );
    assert_eq!(fx.rnic.destroy_qp(fx.qp), Err(VerbError::WindowsBoundToQp));
    fx.rnic.dealloc_stag(mw).unwrap();
    fx.rnic.destroy_qp(fx.qp).unwrap();
}

/// Operations of the model-based test.
#[derive(Debug, Clone)]
enum Op {
    Modify(QpState),
    Llp(LlpEvent),
    TerminateReceived,
    PostSend,
    PostRecv,
}

fn op() -> impl Strategy<Value = Op> {
    let st = prop::sample::select(QpState::ALL.to_vec());
    prop_oneof![
        3 => st.prop_map(Op::Modify),
        1 => any::<bool>().prop_map(|r| Op::Llp(LlpEvent::PeerClosed { reads_in_progress: r })),
        1 => Just(Op::Llp(LlpEvent::Closed)),
        1 => Just(Op::Llp(LlpEvent::Reset)),
        1 => Just(Op::Llp(LlpEvent::Lost)),
        1 => Just(Op::Llp(LlpEvent::SegmentWhileClosing)),
        1 => Just(Op::TerminateReceived),
        1 => Just(Op::PostSend),
        1 => Just(Op::PostRecv),
    ]
}

/// Reference model of VERBS-00 §6.2, Fig. 6 (with a CQ large enough that flushing always
/// finishes at once).
#[derive(Debug, Default)]
struct Model {
    state: Option<QpState>,
    sq: u32,
    rq: u32,
    flushed: u32,
}

impl Model {
    fn st(&self) -> QpState {
        self.state.unwrap_or(QpState::Idle)
    }
    fn error(&mut self) {
        self.state = Some(QpState::Error);
        self.flushed += self.sq + self.rq;
        self.sq = 0;
        self.rq = 0;
    }
    fn modify(&mut self, to: QpState) -> Result<(), VerbError> {
        use QpState::*;
        match (self.st(), to) {
            (Idle, Idle) | (Rts, Rts) => Ok(()),
            (Idle, Rts) => {
                self.state = Some(Rts);
                Ok(())
            }
            (Idle, Error) | (Rts, Error) => {
                self.error();
                Ok(())
            }
            (Rts, Closing) => {
                self.state = Some(Closing);
                self.flushed += self.rq;
                self.rq = 0;
                Ok(())
            }
            (Rts, Terminate) => {
                self.state = Some(Terminate);
                Ok(())
            }
            (Error, Idle) => {
                self.state = Some(Idle);
                Ok(())
            }
            _ => Err(VerbError::InvalidStateChange),
        }
    }
    fn llp(&mut self, e: LlpEvent) {
        use QpState::*;
        match (self.st(), e) {
            (Rts, LlpEvent::PeerClosed { reads_in_progress }) => {
                if self.sq == 0 && !reads_in_progress {
                    self.state = Some(Closing);
                    self.flushed += self.rq;
                    self.rq = 0;
                } else {
                    self.state = Some(Terminate);
                }
            }
            (Closing, LlpEvent::Closed | LlpEvent::PeerClosed { .. }) => {
                if self.sq == 0 {
                    self.state = Some(Idle);
                } else {
                    self.error();
                }
            }
            (Closing, LlpEvent::SegmentWhileClosing) => self.error(),
            (Terminate, LlpEvent::Closed | LlpEvent::PeerClosed { .. }) => self.error(),
            (Rts | Closing | Terminate, LlpEvent::Reset | LlpEvent::Lost) => self.error(),
            _ => {}
        }
    }
    fn terminate_received(&mut self) {
        match self.st() {
            QpState::Rts => self.state = Some(QpState::Terminate),
            QpState::Closing => self.error(),
            _ => {}
        }
    }
    fn post_send(&mut self) {
        match self.st() {
            QpState::Error => self.flushed += 1,
            QpState::Closing => {
                self.sq += 1;
                self.error();
            }
            _ => self.sq += 1,
        }
    }
    fn post_recv(&mut self) {
        match self.st() {
            QpState::Error | QpState::Closing => self.flushed += 1,
            _ => self.rq += 1,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random verb sequences against the reference model: every Modify status, every
    /// resulting state and the number of Flushed completions agree (VERBS-00 §6.2).
    #[test]
    fn model_random_verb_sequences_match_reference(ops in prop::collection::vec(op(), 1..80)) {
        let mut fx = fixture_with(|i| { i.sq_depth = 4096; i.rq_depth = 4096; });
        let (big, _) = fx.rnic.create_cq(fx.ulp, 60000).unwrap();
        let (qp, _) = fx.rnic.create_qp(QpInit { sq_depth: 4096, rq_depth: 4096, ..QpInit::new(fx.pd, big, big) }).unwrap();
        let mut model = Model::default();
        let mut flushed = 0u32;
        for op in ops {
            match op {
                Op::Modify(to) => {
                    let m = if model.st() == QpState::Idle && to == QpState::Rts {
                        ModifyQp::to_rts(llp(1))
                    } else {
                        ModifyQp::to(to)
                    };
                    let got = fx.rnic.modify_qp(qp, m).map(|_| ());
                    prop_assert_eq!(got, model.modify(to));
                }
                Op::Llp(e) => {
                    fx.rnic.handle_llp_event(qp, e).unwrap();
                    model.llp(e);
                }
                Op::TerminateReceived => {
                    fx.rnic.handle_terminate_received(qp, iwarp::wire::terminate::TerminateCause::RDMAP_LOCAL_CATASTROPHIC).unwrap();
                    model.terminate_received();
                }
                Op::PostSend => {
                    prop_assert_eq!(fx.rnic.post_sq(qp, vec![send(9, vec![])]), Ok(1));
                    model.post_send();
                }
                Op::PostRecv => {
                    prop_assert_eq!(fx.rnic.post_rq(qp, vec![recv(9, vec![])]), Ok(1));
                    model.post_recv();
                }
            }
            prop_assert_eq!(state(&fx.rnic, qp), model.st());
            while let Ok(wc) = fx.rnic.poll_cq(big) {
                prop_assert_eq!(wc.status, CompletionStatus::Flushed);
                flushed += 1;
            }
            prop_assert_eq!(flushed, model.flushed);
        }
    }
}

#[test]
fn transition_table_is_exactly_fig6() {
    // VERBS-00 §6.2, Fig. 6: the legal Modify QP transitions and nothing else.
    use QpState::*;
    let legal = [
        (Idle, Idle),
        (Idle, Rts),
        (Idle, Error),
        (Rts, Rts),
        (Rts, Closing),
        (Rts, Terminate),
        (Rts, Error),
        (Error, Idle),
    ];
    for from in QpState::ALL {
        for to in QpState::ALL {
            let r = modify_transition(from, to, false);
            assert_eq!(r.is_ok(), legal.contains(&(from, to)), "{from:?} -> {to:?}");
        }
    }
    assert_eq!(
        modify_transition(Error, Idle, true),
        Err(VerbError::StillFlushing)
    );
}

#[test]
fn auto_transitions_and_their_events() {
    // VERBS-00 §6.2.2.2 (peer FIN), §6.2.5 (Closing -> Idle, "LLP Close Complete",
    // digest D17), §6.2.2.3 (Terminate received), Fig. 24 (Bad LLP Close).
    let (mut fx, qp) = quiet_rts();
    fx.rnic
        .handle_llp_event(
            qp,
            LlpEvent::PeerClosed {
                reads_in_progress: false,
            },
        )
        .unwrap();
    assert_eq!(state(&fx.rnic, qp), QpState::Closing);
    fx.rnic.handle_llp_event(qp, LlpEvent::Closed).unwrap();
    assert_eq!(state(&fx.rnic, qp), QpState::Idle);
    assert_eq!(
        events(&mut fx.rnic),
        vec![AsyncEvent {
            resource: EventResource::Qp(qp),
            kind: AsyncEventKind::LlpCloseComplete
        }]
    );
    // FIN with a Read in progress: Bad LLP Close, Terminate 0/2/07 sent.
    to_rts(&mut fx.rnic, qp);
    actions(&mut fx.rnic);
    fx.rnic
        .handle_llp_event(
            qp,
            LlpEvent::PeerClosed {
                reads_in_progress: true,
            },
        )
        .unwrap();
    assert_eq!(state(&fx.rnic, qp), QpState::Terminate);
    assert_eq!(
        actions(&mut fx.rnic),
        vec![QpAction::SendTerminate {
            qp,
            cause: iwarp::wire::terminate::TerminateCause::RDMAP_CATASTROPHIC_STREAM
        }]
    );
    assert_eq!(events(&mut fx.rnic)[0].kind, AsyncEventKind::BadLlpClose);
    fx.rnic.handle_llp_event(qp, LlpEvent::Closed).unwrap();
    assert_eq!(state(&fx.rnic, qp), QpState::Error);
}

#[test]
fn terminate_received_is_never_answered() {
    // VERBS-00 §6.2.2.3, §6.6.2.4; digest G04
    use iwarp::wire::terminate::TerminateCause;
    let (mut fx, qp) = quiet_rts();
    fx.rnic
        .handle_terminate_received(qp, TerminateCause::DDP_BASE_BOUNDS)
        .unwrap();
    let a = fx.rnic.query_qp(qp).unwrap();
    assert_eq!(a.state, QpState::Terminate);
    assert_eq!(
        a.terminate,
        Some((TerminateCause::DDP_BASE_BOUNDS, TerminateOrigin::Remote))
    );
    assert_eq!(actions(&mut fx.rnic), vec![QpAction::CloseLlp { qp }]);
    assert_eq!(
        events(&mut fx.rnic)[0].kind,
        AsyncEventKind::TerminateMessageReceived
    );
    fx.rnic.handle_llp_event(qp, LlpEvent::Closed).unwrap();
    assert_eq!(state(&fx.rnic, qp), QpState::Error);
    // The received Terminate stays readable in Error.
    assert!(fx.rnic.query_qp(qp).unwrap().terminate.is_some());
}

#[test]
fn modify_rts_to_terminate_sends_local_catastrophic_without_error_event() {
    // VERBS-00 §6.2.2.3, §6.2.3, Fig. 12; digest G05, D24
    use iwarp::wire::terminate::TerminateCause;
    let (mut fx, qp) = quiet_rts();
    fx.rnic
        .modify_qp(qp, ModifyQp::to(QpState::Terminate))
        .unwrap();
    assert_eq!(
        actions(&mut fx.rnic),
        vec![QpAction::SendTerminate {
            qp,
            cause: TerminateCause::RDMAP_LOCAL_CATASTROPHIC
        }]
    );
    fx.rnic.handle_llp_event(qp, LlpEvent::Closed).unwrap();
    assert_eq!(state(&fx.rnic, qp), QpState::Error);
    assert!(events(&mut fx.rnic).is_empty());
}

#[test]
fn destroy_in_rts_releases_the_llp_instead_of_resetting_it() {
    // VERBS-00 §6.1.4 (Destroy QP disassociates the LLP and may reset it): released, as
    // Linux siw releases a destroyed QP's socket, so that sends already completed arrive.
    let (mut fx, qp) = quiet_rts();
    fx.rnic.post_rq(qp, vec![recv(5, vec![])]).unwrap();
    fx.rnic.destroy_qp(qp).unwrap();
    assert_eq!(
        actions(&mut fx.rnic),
        vec![QpAction::ReleaseLlp { qp }, QpAction::Destroyed { qp }]
    );
    assert!(
        drain(&mut fx.rnic, fx.cq).is_empty(),
        "no CQE after Destroy"
    );
}

#[test]
fn destroy_in_idle_or_error_has_no_llp_to_release() {
    // VERBS-00 §6.1.4: nothing is attached in Idle, and Error already reset the LLP.
    for s in [QpState::Idle, QpState::Error] {
        let mut fx = qp_in(s);
        let qp = fx.qp;
        actions(&mut fx.rnic);
        fx.rnic.destroy_qp(qp).unwrap();
        assert_eq!(
            actions(&mut fx.rnic),
            vec![QpAction::Destroyed { qp }],
            "{s:?}"
        );
    }
}

#[test]
fn modify_rts_to_error_resets_without_terminate() {
    // VERBS-00 §6.2.2.4; digest G06
    let (mut fx, qp) = quiet_rts();
    fx.rnic.post_rq(qp, vec![recv(5, vec![])]).unwrap();
    fx.rnic.modify_qp(qp, ModifyQp::to(QpState::Error)).unwrap();
    assert_eq!(actions(&mut fx.rnic), vec![QpAction::ResetLlp { qp }]);
    let wcs = drain(&mut fx.rnic, fx.cq);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, CompletionStatus::Flushed);
}
