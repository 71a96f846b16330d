//! Queue Pairs: Create/Query/Modify/Destroy QP (VERBS-00 §6.1, §9.2.5), the state machine
//! with its automatic transitions (§6.2), flushing (§6.2.4) and the QP's view of the LLP.

use std::collections::VecDeque;

use super::event::{AsyncEvent, AsyncEventKind, EventResource};
use super::handle::QpId;
use super::qp_state::{modify_transition, QpState};
use super::queues::{LlpStreamHandle, Qp, QpInit, TerminateOrigin, WqKind};
use super::rnic::{QpAction, Rnic};
use super::status::{CompletionStatus, VerbError};
use super::wc::{WcOpcode, WorkCompletion};
use crate::wire::terminate::TerminateCause;

/// The LLP stream given with Modify QP Idle→RTS (VERBS-00 §6.2.1.2, §6.6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlpAttach {
    /// The stream.
    pub stream: LlpStreamHandle,
    /// Whether the stream is Established (checked by the RI; else Immediate Error).
    pub established: bool,
    /// Last streaming-mode message to send before iWARP mode (active side only).
    pub stream_message: Option<Vec<u8>>,
}

/// Result of Query QP (VERBS-00 §9.2.5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttributes {
    /// QP ID.
    pub id: QpId,
    /// State.
    pub state: QpState,
    /// Creation attributes as currently in force.
    pub init: QpInit,
    /// Terminate message cause and origin (Terminate / Error only).
    pub terminate: Option<(TerminateCause, TerminateOrigin)>,
    /// QP RQ limit armed (S-RQ only).
    pub rq_limit_armed: bool,
    /// LLP stream (not in Idle).
    pub llp: Option<LlpStreamHandle>,
}

/// Inputs of Modify QP (VERBS-00 §9.2.5.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModifyQp {
    /// Next state (required for every transition).
    pub next_state: QpState,
    /// New ORD.
    pub ord: Option<u32>,
    /// New IRD.
    pub ird: Option<u32>,
    /// New SQ depth.
    pub sq_depth: Option<u32>,
    /// New RQ depth.
    pub rq_depth: Option<u32>,
    /// New QP RQ limit (S-RQ only).
    pub rq_limit: Option<u32>,
    /// Re-arm the QP RQ limit (S-RQ only).
    pub arm_rq_limit: bool,
    /// LLP stream (Idle→RTS only, required there).
    pub llp: Option<LlpAttach>,
}

impl ModifyQp {
    /// A bare state change.
    pub fn to(next_state: QpState) -> Self {
        ModifyQp {
            next_state,
            ord: None,
            ird: None,
            sq_depth: None,
            rq_depth: None,
            rq_limit: None,
            arm_rq_limit: false,
            llp: None,
        }
    }

    /// Idle→RTS with an LLP stream.
    pub fn to_rts(llp: LlpAttach) -> Self {
        ModifyQp {
            llp: Some(llp),
            ..Self::to(QpState::Rts)
        }
    }
}

/// What the LLP (the data plane's TCP engine) reports about a QP's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlpEvent {
    /// The peer closed its side (TCP FIN) without a Terminate.
    PeerClosed {
        /// The IRRQ holds Read Requests not yet answered.
        reads_in_progress: bool,
    },
    /// The graceful close started by this side finished.
    Closed,
    /// An LLP Reset (TCP RST) arrived.
    Reset,
    /// The connection was lost (timeouts, retries).
    Lost,
    /// An iWARP segment other than a Terminate arrived while Closing.
    SegmentWhileClosing,
}

impl Rnic {
    /// Create QP (VERBS-00 §6.1.1, §9.2.5.1). The QP starts Idle. Returns its ID and the
    /// attributes actually granted. CQs and S-RQ must belong to the same ULP as the PD
    /// (RFC 5040 §8.1.1 item 9: no CQ shared without mutual trust).
    pub fn create_qp(&mut self, init: QpInit) -> Result<(QpId, QpInit), VerbError> {
        let ulp = self.pd_owner(init.pd)?;
        for cq in [init.sq_cq, init.rq_cq] {
            match self.cqs.get(&cq) {
                Some(c) if c.ulp == ulp => {}
                _ => return Err(VerbError::InvalidCqHandle),
            }
        }
        let a = &self.attrs;
        if init.ord > a.max_ord_per_qp {
            return Err(VerbError::OrdExceedsCapability);
        }
        if init.ird > a.max_ird_per_qp {
            return Err(VerbError::IrdExceedsCapability);
        }
        if init.sq_depth > a.max_wrs_per_wq
            || (init.srq.is_none() && init.rq_depth > a.max_wrs_per_wq)
        {
            return Err(VerbError::WrsExceedCapability);
        }
        if init.send_sges > a.max_send_recv_sges
            || init.recv_sges > a.max_send_recv_sges
            || init.write_sges > a.max_write_sges
        {
            return Err(VerbError::SgesExceedCapability);
        }
        if let Some(srq) = init.srq {
            let s = self.srqs.get(&srq).ok_or(VerbError::InvalidSrqHandle)?;
            if self.pds.get(&s.pd) != Some(&ulp) {
                return Err(VerbError::InvalidSrqHandle);
            }
            if init.rq_limit > s.max_wrs {
                return Err(VerbError::RqLimitOutOfRange);
            }
        } else if init.rq_limit != 0 {
            return Err(VerbError::RqLimitOutOfRange);
        }
        let quota = self.quota(ulp);
        let (qps, ird) = self.ulp_qps.get(&ulp).copied().unwrap_or_default();
        if self.qps.len() >= self.attrs.max_qps as usize
            || qps >= quota.max_qps
            || ird.saturating_add(init.ird) > quota.max_ird
        {
            return Err(VerbError::InsufficientResources);
        }
        let id = QpId(self.new_handle());
        let mut granted = init;
        granted.sq_depth = init.sq_depth.max(1);
        granted.rq_depth = if init.srq.is_some() {
            0
        } else {
            init.rq_depth.max(1)
        };
        let qp = Qp {
            id,
            ulp,
            pd: init.pd,
            sq_cq: init.sq_cq,
            rq_cq: init.rq_cq,
            srq: init.srq,
            init: granted,
            state: QpState::Idle,
            terminate_by_modify: false,
            terminate: None,
            llp: None,
            sq_pending: VecDeque::new(),
            sq_active: VecDeque::new(),
            sq_slots: 0,
            rq_pending: VecDeque::new(),
            rq_active: VecDeque::new(),
            rq_slots: 0,
            flush_queue: VecDeque::new(),
            next_work: 0,
            rq_limit_armed: init.rq_limit > 0,
            error_reported: false,
            touched: false,
            srq_waiting: false,
        };
        let srq_pd = init.srq.and_then(|s| self.srqs.get(&s)).map(|s| s.pd);
        self.memory.set_stream(id, qp.stream_rights(srq_pd));
        let usage = self.ulp_qps.entry(ulp).or_default();
        *usage = (usage.0 + 1, usage.1.saturating_add(qp.init.ird));
        self.qps.insert(id, qp);
        log::debug!("QP {id:?} created");
        Ok((id, granted))
    }

    /// Query QP (VERBS-00 §9.2.5.2).
    pub fn query_qp(&self, qp: QpId) -> Result<QpAttributes, VerbError> {
        let q = self.qps.get(&qp).ok_or(VerbError::InvalidQpHandle)?;
        Ok(QpAttributes {
            id: q.id,
            state: q.state,
            init: q.init,
            terminate: q.terminate,
            rq_limit_armed: q.rq_limit_armed,
            llp: q.llp,
        })
    }

    /// Every QP of the RNIC, by ID (monitoring, shutdown).
    pub fn qp_ids(&self) -> Vec<QpId> {
        let mut v: Vec<QpId> = self.qps.keys().copied().collect();
        v.sort_by_key(|q| q.0);
        v
    }

    /// Work requests of the QP not completed yet (posted, or started and waiting for the
    /// peer): `(send queue, receive queue)`; `None` for an unknown QP.
    pub fn outstanding(&self, qp: QpId) -> Option<(usize, usize)> {
        self.qps.get(&qp).map(|q| {
            let sq = q.sq_pending.len() + q.sq_active.iter().filter(|a| a.done.is_none()).count();
            let rq = q.rq_pending.len() + q.rq_active.iter().filter(|a| a.done.is_none()).count();
            (sq, rq)
        })
    }

    /// Work requests occupying the QP's send and receive queues: posted and not yet
    /// retired (a WR retires when its completion is polled, or, unsignaled, when the engine is
    /// done with it), as the consumer's posting window sees them.
    pub fn wq_occupancy(&self, qp: QpId) -> Option<(u32, u32)> {
        self.qps.get(&qp).map(|q| (q.sq_slots, q.rq_slots))
    }

    /// Modify QP (VERBS-00 §6.1.3, §9.2.5.3). Either every requested change happens or
    /// none does and an Immediate Error is returned.
    pub fn modify_qp(&mut self, qp: QpId, m: ModifyQp) -> Result<QpInit, VerbError> {
        self.touch(qp);
        let q = self.qps.get(&qp).ok_or(VerbError::InvalidQpHandle)?;
        let from = q.state;
        let to = m.next_state;
        let allowed = modify_transition(from, to, q.has_flush_pending())?;
        let sizes = m.ird.is_some() || m.sq_depth.is_some() || m.rq_depth.is_some();
        let limit = m.rq_limit.is_some() || m.arm_rq_limit;
        if (m.ord.is_some() && !allowed.ord)
            || (sizes && !allowed.sizes)
            || (limit && !allowed.rq_limit)
            || (m.llp.is_some() && !allowed.llp)
        {
            return Err(VerbError::InvalidModifier);
        }
        if allowed.llp {
            match &m.llp {
                Some(l) if l.established => {}
                _ => return Err(VerbError::InvalidLlpStreamHandle),
            }
        }
        let a = &self.attrs;
        let mut new = q.init;
        if let Some(ord) = m.ord {
            if ord > a.max_ord_per_qp {
                return Err(VerbError::OrdExceedsCapability);
            }
            if ord > q.init.ord && !a.ord_increasable {
                return Err(VerbError::CannotChangeAttribute);
            }
            new.ord = ord;
        }
        if let Some(ird) = m.ird {
            if ird > a.max_ird_per_qp {
                return Err(VerbError::IrdExceedsCapability);
            }
            if !a.ird_modifiable {
                return Err(VerbError::CannotChangeAttribute);
            }
            let quota = self.quota(q.ulp);
            let all = self.ulp_qps.get(&q.ulp).map_or(0, |u| u.1);
            let others = all.saturating_sub(q.init.ird);
            if others.saturating_add(ird) > quota.max_ird {
                return Err(VerbError::InsufficientResources);
            }
            new.ird = ird;
        }
        for (req, cur, slot) in [
            (m.sq_depth, q.sq_slots, &mut new.sq_depth),
            (m.rq_depth, q.rq_slots, &mut new.rq_depth),
        ] {
            if let Some(d) = req {
                if !a.wq_resizable {
                    return Err(VerbError::CannotChangeAttribute);
                }
                if d > a.max_wrs_per_wq {
                    return Err(VerbError::WrsExceedCapability);
                }
                if d < cur {
                    return Err(VerbError::ShrinkBelowOccupancy);
                }
                *slot = d.max(1);
            }
        }
        if m.rq_limit.is_some() || m.arm_rq_limit {
            let Some(srq) = q.srq.and_then(|s| self.srqs.get(&s)) else {
                return Err(VerbError::InvalidModifier);
            };
            if let Some(l) = m.rq_limit {
                if l > srq.max_wrs {
                    return Err(VerbError::RqLimitOutOfRange);
                }
                new.rq_limit = l;
            }
        }
        // Every check passed: apply.
        let q = self.qps.get_mut(&qp).expect("QP checked above");
        if let Some(u) = self.ulp_qps.get_mut(&q.ulp) {
            u.1 = u.1.saturating_sub(q.init.ird).saturating_add(new.ird);
        }
        q.init = new;
        if m.arm_rq_limit || (m.rq_limit.is_some() && new.rq_limit > 0) {
            q.rq_limit_armed = new.rq_limit > 0;
        }
        let srq_pd = q.srq.and_then(|s| self.srqs.get(&s)).map(|s| s.pd);
        let rights = q.stream_rights(srq_pd);
        self.memory.set_stream(qp, rights);
        self.apply_modify(qp, from, to, m.llp);
        Ok(new)
    }

    fn apply_modify(&mut self, qp: QpId, from: QpState, to: QpState, llp: Option<LlpAttach>) {
        use QpState::*;
        match (from, to) {
            (Idle, Rts) => {
                let llp = llp.expect("checked by modify_qp");
                let q = self.qps.get_mut(&qp).expect("QP exists");
                q.state = Rts;
                q.llp = Some(llp.stream);
                q.terminate = None;
                self.actions.push_back(QpAction::Attach {
                    qp,
                    stream: llp.stream,
                    stream_message: llp.stream_message,
                });
            }
            (Idle, Error) => self.enter_error(qp, None, false),
            (Rts, Closing) => {
                self.set_state(qp, Closing);
                self.flush_rq(qp);
                self.actions.push_back(QpAction::CloseLlp { qp });
            }
            (Rts, Terminate) => {
                let cause = TerminateCause::RDMAP_LOCAL_CATASTROPHIC;
                let q = self.qps.get_mut(&qp).expect("QP exists");
                q.state = Terminate;
                q.terminate_by_modify = true;
                q.terminate = Some((cause, TerminateOrigin::Local));
                self.actions
                    .push_back(QpAction::SendTerminate { qp, cause });
            }
            (Rts, Error) => {
                self.reset_and_enter_error(qp, None, false);
            }
            (Error, Idle) => {
                let q = self.qps.get_mut(&qp).expect("QP exists");
                q.state = Idle;
                q.llp = None;
                q.terminate = None;
                q.terminate_by_modify = false;
                q.error_reported = false;
            }
            _ => {}
        }
    }

    /// Destroy QP (VERBS-00 §6.1.4, §9.2.5.4): allowed in every state unless Memory
    /// Windows are bound to it. Its CQEs are removed and no further ones are produced.
    pub fn destroy_qp(&mut self, qp: QpId) -> Result<(), VerbError> {
        let q = self.qps.get(&qp).ok_or(VerbError::InvalidQpHandle)?;
        if self.memory.windows_bound_to(qp) > 0 {
            return Err(VerbError::WindowsBoundToQp);
        }
        let attached = q.llp.is_some() && !matches!(q.state, QpState::Idle | QpState::Error);
        let q = self.qps.remove(&qp).expect("QP exists");
        self.pending_wrs -= q.sq_pending.len() + q.rq_pending.len();
        if let Some(u) = self.ulp_qps.get_mut(&q.ulp) {
            *u = (u.0.saturating_sub(1), u.1.saturating_sub(q.init.ird));
        }
        if let Some(srq) = q.srq.and_then(|s| self.srqs.get_mut(&s)) {
            if q.srq_waiting {
                srq.waiters.retain(|&w| w != qp);
            }
            let taken = q.rq_active.len() as u32
                + q.flush_queue
                    .iter()
                    .filter(|(_, k)| *k == WqKind::Srq)
                    .count() as u32;
            srq.slots = srq.slots.saturating_sub(taken);
        }
        let mut srq_wcs = 0u32;
        for cq in [q.sq_cq, q.rq_cq] {
            if let Some(c) = self.cqs.get_mut(&cq) {
                c.entries.retain(|(wc, kind)| {
                    let mine = wc.qp == qp;
                    if mine && *kind == WqKind::Srq {
                        srq_wcs += 1;
                    }
                    !mine
                });
            }
        }
        if let Some(srq) = q.srq.and_then(|s| self.srqs.get_mut(&s)) {
            srq.slots = srq.slots.saturating_sub(srq_wcs);
        }
        self.memory.remove_stream(qp);
        if attached {
            self.actions.push_back(QpAction::ReleaseLlp { qp });
        }
        self.actions.push_back(QpAction::Destroyed { qp });
        log::debug!("QP {qp:?} destroyed");
        Ok(())
    }

    pub(super) fn set_state(&mut self, qp: QpId, state: QpState) {
        if let Some(q) = self.qps.get_mut(&qp) {
            log::debug!("QP {qp:?}: {:?} -> {state:?}", q.state);
            q.state = state;
        }
    }

    pub(super) fn raise_qp(&mut self, qp: QpId, kind: AsyncEventKind) {
        self.raise(AsyncEvent {
            resource: EventResource::Qp(qp),
            kind,
        });
    }

    /// Resets the LLP stream, then `enter_error`.
    pub(super) fn reset_and_enter_error(
        &mut self,
        qp: QpId,
        event: Option<AsyncEventKind>,
        auto: bool,
    ) {
        self.actions.push_back(QpAction::ResetLlp { qp });
        self.enter_error(qp, event, auto);
    }

    /// Moves the QP to Error, detaches the LLP and queues every incomplete WQE for flushing
    /// (VERBS-00 §6.2.4). `event` is raised as an affiliated event.
    pub(super) fn enter_error(&mut self, qp: QpId, event: Option<AsyncEventKind>, auto: bool) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        let by_modify = q.terminate_by_modify;
        q.state = QpState::Error;
        q.llp = None;
        let id = q.id;
        let mut flushed = Vec::new();
        for a in q.sq_active.drain(..) {
            let wc = a.done.unwrap_or_else(|| {
                WorkCompletion::new(id, a.wr.wr_id, a.wr.opcode, CompletionStatus::Flushed)
            });
            if a.wr.signaled || !wc.status.is_success() {
                flushed.push((wc, WqKind::Sq));
            } else {
                q.sq_slots = q.sq_slots.saturating_sub(1);
            }
        }
        self.pending_wrs -= q.sq_pending.len() + q.rq_pending.len();
        for (_, wr) in q.sq_pending.drain(..) {
            let wc = WorkCompletion::new(id, wr.wr_id, wr.opcode(), CompletionStatus::Flushed);
            flushed.push((wc, WqKind::Sq));
        }
        let rq_kind = if q.srq.is_some() {
            WqKind::Srq
        } else {
            WqKind::Rq
        };
        for a in q.rq_active.drain(..) {
            let wc = a.done.unwrap_or_else(|| {
                WorkCompletion::new(id, a.wr.wr_id, WcOpcode::Receive, CompletionStatus::Flushed)
            });
            flushed.push((wc, rq_kind));
        }
        for (_, wr) in q.rq_pending.drain(..) {
            let wc =
                WorkCompletion::new(id, wr.wr_id, WcOpcode::Receive, CompletionStatus::Flushed);
            flushed.push((wc, WqKind::Rq));
        }
        for (wc, _) in flushed.iter_mut() {
            *wc = q.one_error(*wc);
        }
        q.flush_queue.extend(flushed);
        if let Some(kind) = event {
            self.raise_qp(qp, kind);
        } else if auto && !by_modify {
            // digest ⚑D18/⚑D24: raised on automatic entry unless Terminate came from Modify.
            self.raise_qp(qp, AsyncEventKind::ErrorStateEntered);
        }
        self.flush(qp);
    }

    /// Flushes the RQ only (entry to Closing, VERBS-00 §6.2.5).
    fn flush_rq(&mut self, qp: QpId) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        let id = q.id;
        self.pending_wrs -= q.rq_pending.len();
        let rq: Vec<_> = q.rq_pending.drain(..).map(|(_, wr)| wr).collect();
        for wr in rq {
            let wc =
                WorkCompletion::new(id, wr.wr_id, WcOpcode::Receive, CompletionStatus::Flushed);
            q.flush_queue.push_back((wc, WqKind::Rq));
        }
        self.flush(qp);
    }

    /// Moves queued flush WCs onto the CQs while they have room; the rest stays queued
    /// ("RI still flushing WQEs") until the consumer polls.
    pub(super) fn flush(&mut self, qp: QpId) {
        loop {
            let Some(q) = self.qps.get(&qp) else {
                return;
            };
            let Some(&(wc, kind)) = q.flush_queue.front() else {
                return;
            };
            let cq = if kind == WqKind::Sq { q.sq_cq } else { q.rq_cq };
            if self.cq_room(cq) == 0 {
                // Resumed when a poll of `cq` makes room.
                if let Some(c) = self.cqs.get_mut(&cq) {
                    if !c.flush_blocked.contains(&qp) {
                        c.flush_blocked.push(qp);
                    }
                }
                return;
            }
            self.qps
                .get_mut(&qp)
                .expect("QP exists")
                .flush_queue
                .pop_front();
            self.push_wc(cq, wc, kind);
        }
    }

    /// Frees the WQE slot of a polled WC (VERBS-00 §8.2.1).
    pub(super) fn retire_slot(&mut self, qp: QpId, kind: WqKind) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        match kind {
            WqKind::Sq => q.sq_slots = q.sq_slots.saturating_sub(1),
            WqKind::Rq => q.rq_slots = q.rq_slots.saturating_sub(1),
            WqKind::Srq => {
                if let Some(srq) = q.srq.and_then(|s| self.srqs.get_mut(&s)) {
                    srq.slots = srq.slots.saturating_sub(1);
                }
            }
        }
    }

    /// A local error on a QP in RTS (completion error, CQ overflow, ...): the QP enters
    /// Terminate and, when `send` is set, the RI sends a Terminate with `cause`
    /// (VERBS-00 §6.2.2.3, §6.4, Fig. 12).
    pub(super) fn local_error(
        &mut self,
        qp: QpId,
        cause: TerminateCause,
        send: bool,
        event: Option<AsyncEventKind>,
    ) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        match q.state {
            QpState::Rts => {
                q.state = QpState::Terminate;
                q.terminate_by_modify = false;
                q.terminate = Some((cause, TerminateOrigin::Local));
                if send {
                    self.actions
                        .push_back(QpAction::SendTerminate { qp, cause });
                } else {
                    self.actions.push_back(QpAction::CloseLlp { qp });
                }
                if let Some(kind) = event {
                    self.raise_qp(qp, kind);
                }
            }
            QpState::Closing | QpState::Idle => {
                self.reset_and_enter_error(qp, event, true);
            }
            QpState::Terminate | QpState::Error => {}
        }
    }

    /// Reports an LLP event for a QP's stream (automatic transitions, VERBS-00 §6.2.2.2,
    /// §6.2.3, §6.2.5, Fig. 6).
    pub fn handle_llp_event(&mut self, qp: QpId, event: LlpEvent) -> Result<(), VerbError> {
        let q = self.qps.get(&qp).ok_or(VerbError::InvalidQpHandle)?;
        let state = q.state;
        let sq_empty = q.sq_empty();
        let by_modify = q.terminate_by_modify;
        let local_term = matches!(q.terminate, Some((_, TerminateOrigin::Local)));
        use QpState::*;
        match (state, event) {
            (Rts, LlpEvent::PeerClosed { reads_in_progress }) => {
                if sq_empty && !reads_in_progress {
                    self.set_state(qp, Closing);
                    self.flush_rq(qp);
                    self.actions.push_back(QpAction::CloseLlp { qp });
                } else {
                    self.local_error(
                        qp,
                        TerminateCause::RDMAP_CATASTROPHIC_STREAM,
                        true,
                        Some(AsyncEventKind::BadLlpClose),
                    );
                }
            }
            (Closing, LlpEvent::Closed) | (Closing, LlpEvent::PeerClosed { .. }) => {
                if sq_empty {
                    self.set_state(qp, Idle);
                    if let Some(q) = self.qps.get_mut(&qp) {
                        q.llp = None;
                    }
                    self.raise_qp(qp, AsyncEventKind::LlpCloseComplete);
                } else {
                    self.reset_and_enter_error(qp, Some(AsyncEventKind::BadClose), true);
                }
            }
            (Closing, LlpEvent::SegmentWhileClosing) => {
                self.reset_and_enter_error(qp, Some(AsyncEventKind::BadClose), true);
            }
            (Terminate, LlpEvent::Closed) | (Terminate, LlpEvent::PeerClosed { .. }) => {
                self.enter_error(qp, None, true);
            }
            (Terminate, LlpEvent::Reset) | (Terminate, LlpEvent::Lost) => {
                let ev = (by_modify || local_term).then_some(AsyncEventKind::BadClose);
                self.enter_error(qp, ev, !by_modify);
            }
            (Rts | Closing, LlpEvent::Reset) => {
                self.enter_error(qp, Some(AsyncEventKind::LlpConnectionReset), true);
            }
            (Rts | Closing, LlpEvent::Lost) => {
                self.reset_and_enter_error(qp, Some(AsyncEventKind::LlpConnectionLost), true);
            }
            // Idle and Error have no stream; a late event is harmless.
            _ => {}
        }
        Ok(())
    }

    /// Reports a Terminate received from the peer (VERBS-00 §6.2.2.3, §6.6.2.4): RTS →
    /// Terminate with "Terminate Message Received" (and never a Terminate in reply);
    /// Closing → Error with an LLP Reset.
    pub fn handle_terminate_received(
        &mut self,
        qp: QpId,
        cause: TerminateCause,
    ) -> Result<(), VerbError> {
        let q = self.qps.get_mut(&qp).ok_or(VerbError::InvalidQpHandle)?;
        match q.state {
            QpState::Rts => {
                q.state = QpState::Terminate;
                q.terminate_by_modify = false;
                q.terminate = Some((cause, TerminateOrigin::Remote));
                self.actions.push_back(QpAction::CloseLlp { qp });
                self.raise_qp(qp, AsyncEventKind::TerminateMessageReceived);
            }
            QpState::Closing => {
                q.terminate = Some((cause, TerminateOrigin::Remote));
                self.reset_and_enter_error(qp, Some(AsyncEventKind::BadClose), true);
            }
            _ => {}
        }
        Ok(())
    }

    /// Reports a protocol error the engine detected on an inbound segment and answered with
    /// a Terminate (`cause`): RTS → Terminate and the matching affiliated event (VERBS-00
    /// §6.2.2.3, Fig. 24).
    pub fn handle_remote_error(
        &mut self,
        qp: QpId,
        cause: TerminateCause,
    ) -> Result<(), VerbError> {
        if !self.qps.contains_key(&qp) {
            return Err(VerbError::InvalidQpHandle);
        }
        self.local_error(qp, cause, false, Some(event_for_cause(cause)));
        Ok(())
    }
}

impl Rnic {
    /// Takes an event of the QP's RDMAP engine and applies the matching automatic
    /// transition (VERBS-00 §6.2.2.3, §6.2.3, §6.6.2.4). A Terminate the engine sent for a
    /// Local Catastrophic error is already reported by the failing WR's WC, so it raises no
    /// asynchronous event (§6.2.2.3).
    pub fn handle_engine_event(
        &mut self,
        qp: QpId,
        event: crate::rdmap::Event,
    ) -> Result<(), VerbError> {
        use crate::rdmap::Event;
        match event {
            Event::SolicitedEvent => {
                if !self.qps.contains_key(&qp) {
                    return Err(VerbError::InvalidQpHandle);
                }
                Ok(())
            }
            Event::TerminateReceived(t) => self.handle_terminate_received(qp, t.cause),
            Event::TerminateSent(cause) if cause.layer == 0 && cause.etype == 0 => {
                if !self.qps.contains_key(&qp) {
                    return Err(VerbError::InvalidQpHandle);
                }
                self.local_error(qp, cause, false, None);
                Ok(())
            }
            Event::TerminateSent(cause) => self.handle_remote_error(qp, cause),
            Event::Closed => self.handle_llp_event(qp, LlpEvent::Closed),
            Event::LlpLost => self.handle_llp_event(qp, LlpEvent::Lost),
        }
    }
}

/// The affiliated asynchronous event reporting a Terminate cause (VERBS-00 Fig. 24 and
/// Fig. 37, with RFC numbering per digest §5.11).
pub fn event_for_cause(c: TerminateCause) -> AsyncEventKind {
    use AsyncEventKind as E;
    match (c.layer, c.etype, c.code) {
        (2, 0, 0x02) => E::LlpInvalidCrc,
        (2, 0, 0x03) => E::LlpBadFpdu,
        (2, _, _) => E::LlpSegmentSizeInvalid,
        (1, 1, 0x00) => E::InvalidStag,
        (1, 1, 0x01) => E::BaseBoundsViolation,
        (1, 1, 0x02) => E::InvalidPd,
        (1, 1, 0x03) => E::WrapError,
        (1, 1, 0x04) | (1, 2, 0x06) => E::InvalidDdpVersion,
        (1, 2, 0x01) => E::InvalidDdpQueueNumber,
        (1, 2, 0x02) => E::RqInvalidMsnRange,
        (1, 2, 0x03) => E::IrrqTooManyReads,
        (1, 2, _) => E::RqMsnGap,
        (0, 1, 0x00) => E::IrrqInvalidStag,
        (0, 1, 0x01) => E::IrrqBaseBounds,
        (0, 1, 0x02) => E::IrrqAccessRights,
        (0, 1, 0x03) => E::IrrqInvalidPd,
        (0, 1, 0x04) => E::IrrqWrap,
        (0, 2, 0x05) => E::InvalidRdmaVersion,
        (0, 2, 0x06) => E::UnexpectedOpcode,
        (0, 2, 0x07) => E::NoLastBit,
        _ => E::LocalQpCatastrophic,
    }
}
