//! Posting (PostSQ / PostRQ, VERBS-00 §8.2.1, §9.3.1) and the poll core's side of the
//! work queues: handing message WRs to the RDMAP engine, executing memory operations
//! (Bind, Fast-Register, Invalidate Local STag) in SQ order, and turning the engine's
//! completions into Work Completions in posting order (§8.2.2, §8.2.3).

use super::event::AsyncEventKind;
use super::handle::{CqHandle, QpId};
use super::memory::MemoryModel;
use super::qp_state::QpState;
use super::queues::{
    inline_copy, silent_on_success, ActiveRq, ActiveSq, Qp, StartedWr, TerminateOrigin, WqKind,
};
use super::rnic::{list_touched, Rnic};
use super::status::{CompletionStatus, VerbError};
use super::wc::{WcOpcode, WorkCompletion};
use super::wr::{RecvWr, SendWr, SqOp};
use crate::ddp::untagged::RecvSupply;
use crate::mem::{Access, MemoryTable, STag, Sge, Sgl, StreamId};
use crate::rdmap;
use crate::wire::terminate::TerminateCause;

/// The first Immediate Error of a posted WR list; WRs before it stay posted
/// (VERBS-00 §8.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{error} after {posted} work requests were posted")]
pub struct PostError {
    /// Number of WRs posted before the failing one.
    pub posted: usize,
    /// The failing WR's Immediate Error.
    pub error: VerbError,
}

/// Takes the QP's oldest SQ WR off as a success that leaves no WC: its slot and its inline
/// copy freed. Returns whether WRs finished behind it wait for [`Rnic::release_sq`].
#[inline]
fn retire_front(q: &mut Qp, memory: &mut MemoryModel) -> bool {
    let Some(a) = q.sq_active.pop_front() else {
        return false;
    };
    free_copy(memory, a.wr.inline_copy);
    q.sq_slots = q.sq_slots.saturating_sub(1);
    q.sq_active.front().is_some_and(|a| a.done.is_some())
}

/// Frees the RI's copy of an inline WR's data ([`StartedWr::inline_copy`], [`inline_copy`]).
#[inline]
fn free_copy(memory: &mut MemoryModel, copy: Option<STag>) {
    if let Some(stag) = copy {
        memory.free_inline(stag);
    }
}

fn status_from_engine(s: rdmap::CompletionStatus, remote_term: bool) -> CompletionStatus {
    use rdmap::CompletionStatus as E;
    match s {
        E::Success => CompletionStatus::Success,
        E::Flushed => CompletionStatus::Flushed,
        E::LocalProtection => CompletionStatus::InvalidStag,
        E::ZeroReadResources => CompletionStatus::ZeroReadResources,
        // SPEC-DIGEST D13: a too-short receive buffer completes with Base & Bounds.
        E::RecvOverflow => CompletionStatus::BaseBoundsViolation,
        E::InvalidateFailed => CompletionStatus::InvalidateStagMismatch,
        E::Fatal if remote_term => CompletionStatus::RemoteTermination,
        E::Fatal => CompletionStatus::LocalQpCatastrophic,
    }
}

impl Rnic {
    /// PostSQ (VERBS-00 §8.2.1, §9.3.1.1). WRs are checked and queued in list order; the
    /// first Immediate Error stops the list. In Error the WRs are accepted and flushed; a
    /// WR posted while Closing is a "Bad Close" (§6.2.5).
    pub fn post_sq(&mut self, qp: QpId, wrs: Vec<SendWr>) -> Result<usize, PostError> {
        let mut posted = 0;
        for wr in wrs {
            if let Err(error) = self.post_one_sq(qp, wr) {
                return Err(PostError { posted, error });
            }
            posted += 1;
        }
        Ok(posted)
    }

    /// [`Rnic::post_sq`] of one WR, without a list to allocate.
    pub fn post_sq_one(&mut self, qp: QpId, wr: SendWr) -> Result<(), PostError> {
        self.post_one_sq(qp, wr)
            .map_err(|error| PostError { posted: 0, error })
    }

    fn check_sq_wr(&self, q: &Qp, wr: &SendWr) -> Result<(), VerbError> {
        if q.sq_slots >= q.init.sq_depth {
            return Err(VerbError::TooManyWorkRequests);
        }
        use rdmap::SendOp as M;
        let fenceable = matches!(
            wr.op,
            SqOp::Message(M::Send { .. } | M::Write { .. } | M::Immediate { .. })
                | SqOp::Inline { .. }
        );
        if (wr.read_fence && !fenceable)
            || (wr.local_fence && !matches!(wr.op, SqOp::LocalInvalidate { .. }))
        {
            return Err(VerbError::InvalidModifier);
        }
        match &wr.op {
            SqOp::Message(M::Send { sgl, .. }) if sgl.len() > q.init.send_sges as usize => {
                Err(VerbError::InvalidSglLength)
            }
            SqOp::Message(M::Write { sgl, .. }) if sgl.len() > q.init.write_sges as usize => {
                Err(VerbError::InvalidSglLength)
            }
            SqOp::Message(M::Immediate { .. } | M::Atomic { .. }) if !self.attrs.extensions => {
                Err(VerbError::InvalidOperationType)
            }
            SqOp::Inline { op, data } => match op {
                M::Send { sgl, .. } | M::Write { sgl, .. } if sgl.is_empty() => {
                    if data.len() > self.attrs.max_inline as usize {
                        Err(VerbError::InvalidModifier)
                    } else {
                        Ok(())
                    }
                }
                _ => Err(VerbError::InvalidSglFormat),
            },
            SqOp::ReadInvalidate(op) if !matches!(op, M::Read { .. }) => {
                Err(VerbError::InvalidOperationType)
            }
            _ => Ok(()),
        }
    }

    fn post_one_sq(&mut self, qp: QpId, mut wr: SendWr) -> Result<(), VerbError> {
        let q = self.qps.get(&qp).ok_or(VerbError::InvalidQpHandle)?;
        self.check_sq_wr(q, &wr)?;
        let (state, pd) = (q.state, q.pd);
        if let SqOp::Inline { op, data } = &wr.op {
            // Inline data is copied now, into RI-owned memory readable only by this QP's
            // PD; the SGE the engine gathers from names that copy.
            let len = data.len() as u32;
            let stag = self.memory.store_inline(pd, data.clone());
            let sgl = Sgl::one(Sge { stag, to: 0, len });
            let op = match op.clone() {
                rdmap::SendOp::Send {
                    solicited,
                    invalidate,
                    ..
                } => rdmap::SendOp::Send {
                    sgl,
                    solicited,
                    invalidate,
                },
                rdmap::SendOp::Write { remote, .. } => rdmap::SendOp::Write { sgl, remote },
                other => other,
            };
            wr.op = SqOp::Inline {
                op,
                data: Vec::new(),
            };
        }
        let q = self.qps.get_mut(&qp).expect("checked");
        q.sq_slots += 1;
        let work = q.next_work();
        // Listed for the poll core's next service (`Rnic::touch` through the QP at hand).
        list_touched(&mut self.touched, qp, q);
        match state {
            QpState::Error => {
                let wc = WorkCompletion::new(qp, wr.wr_id, wr.opcode(), CompletionStatus::Flushed);
                free_copy(&mut self.memory, inline_copy(&wr));
                self.qps
                    .get_mut(&qp)
                    .expect("checked")
                    .flush_queue
                    .push_back((wc, WqKind::Sq));
                self.flush(qp);
            }
            QpState::Closing => {
                q.sq_pending.push_back((work, wr));
                self.pending_wrs += 1;
                self.reset_and_enter_error(qp, Some(AsyncEventKind::BadClose), true);
            }
            _ => {
                q.sq_pending.push_back((work, wr));
                self.pending_wrs += 1;
            }
        }
        self.bound_touched();
        Ok(())
    }

    /// PostRQ to a QP's own RQ (VERBS-00 §9.3.1.2). A QP attached to an S-RQ refuses it
    /// with "RQ Associated with S-RQ". In Closing and Error receives are flushed.
    pub fn post_rq(&mut self, qp: QpId, wrs: Vec<RecvWr>) -> Result<usize, PostError> {
        self.touch(qp);
        let mut posted = 0;
        for wr in wrs {
            let Some(q) = self.qps.get_mut(&qp) else {
                return Err(PostError {
                    posted,
                    error: VerbError::InvalidQpHandle,
                });
            };
            let fits = if q.srq.is_some() {
                Err(VerbError::RqAssociatedWithSrq)
            } else {
                check_recv_wr(&wr, q.rq_slots, q.init.rq_depth, q.init.recv_sges)
            };
            fits.map_err(|error| PostError { posted, error })?;
            q.rq_slots += 1;
            let work = q.next_work();
            if matches!(q.state, QpState::Error | QpState::Closing) {
                let wc =
                    WorkCompletion::new(qp, wr.wr_id, WcOpcode::Receive, CompletionStatus::Flushed);
                q.flush_queue.push_back((wc, WqKind::Rq));
                self.flush(qp);
            } else {
                q.rq_pending.push_back((work, wr));
                self.pending_wrs += 1;
            }
            posted += 1;
        }
        Ok(posted)
    }

    /// The next message WR for the QP's RDMAP engine, or `None` when the SQ is empty, the
    /// QP is not in RTS, or a Local Fence holds the queue (VERBS-00 §6.2.2, §8.2.2). Memory
    /// operations met on the way are executed here, in SQ order, and take effect before any
    /// later WR (§8.2.2.1). The returned WR's `wr_id` is the RI's work number, which the
    /// engine's completion echoes to [`Rnic::handle_completion`].
    pub fn next_send_wr(&mut self, qp: QpId) -> Option<rdmap::SendWr> {
        self.next_checked_send_wr(qp).map(|(wr, _)| wr)
    }

    /// [`Rnic::next_send_wr`] with the check of a message's one non-empty source SGE, for
    /// [`rdmap::Engine::post_checked_send`].
    pub fn next_checked_send_wr(
        &mut self,
        qp: QpId,
    ) -> Option<(rdmap::SendWr, Option<rdmap::CheckedSource>)> {
        loop {
            // No WR waits in any QP (the pump's call after it took the last one): no
            // look-up.
            if self.pending_wrs == 0 {
                return None;
            }
            let q = self.qps.get_mut(&qp)?;
            if q.state != QpState::Rts {
                return None;
            }
            let fenced = q.sq_pending.front()?.1.local_fence;
            if fenced && q.sq_active.iter().any(|a| a.done.is_none()) {
                return None;
            }
            let ctx = q.local_context();
            let (work, mut wr) = q.sq_pending.pop_front()?;
            self.pending_wrs -= 1;
            let result = match &wr.op {
                SqOp::Bind(spec) => Some(self.memory.bind(&ctx, spec)),
                SqOp::FastRegister(spec) => Some(self.memory.fast_register(&ctx, spec)),
                SqOp::LocalInvalidate { stag } => Some(self.memory.invalidate_local(&ctx, *stag)),
                _ => None,
            };
            if let Some(result) = result {
                let status = result.err().unwrap_or(CompletionStatus::Success);
                self.finish_local(qp, work, wr, status);
                continue;
            }
            // Check the source SGL here so a local protection error gets its precise
            // status (VERBS-00 Fig. 36) and a Local Catastrophic Terminate replaces the
            // message (RFC 5040 §7.1 case 1; digest G07).
            // A message's one non-empty SGE goes to the engine checked (RFC 5040 §5: the
            // same check, made once while the table is unchanged).
            let mut checked = None;
            if let Some(sgl) = wr.source_sgl().or_else(|| wr.inline_sgl()) {
                let mut total = 0u64;
                let mut status = CompletionStatus::Success;
                for s in sgl {
                    total += u64::from(s.len);
                    match self.memory.resolve_local_start(
                        &ctx,
                        s.stag,
                        s.to,
                        u64::from(s.len),
                        Access::LOCAL_READ,
                    ) {
                        Ok(piece) => checked = Some(piece).filter(|_| sgl.len() == 1 && s.len != 0),
                        Err(e) => {
                            status = e;
                            break;
                        }
                    }
                }
                if status.is_success() && total > u64::from(u32::MAX) {
                    status = CompletionStatus::InvalidLength;
                }
                if !status.is_success() {
                    self.finish_local(qp, work, wr, status);
                    return None;
                }
            }
            // A message's SGL moves on to the engine: the WR kept here needs only its kind
            // from now on. An inline WR keeps its SGL (the RI frees its copy at completion).
            let op = match &mut wr.op {
                SqOp::Message(op) => op.hand_over(),
                SqOp::Inline { op, .. } | SqOp::ReadInvalidate(op) => {
                    checked = None;
                    op.clone()
                }
                _ => unreachable!("memory operations handled above"),
            };
            // The engine completes an unsignaled WR's success with a count
            // ([`Rnic::retire_unsignaled`]); a Read with Invalidate's still needs its
            // completion here (VERBS-00 §8.2.2.1), and every error gets one.
            let engine_wr = rdmap::SendWr {
                wr_id: work,
                op,
                signaled: !silent_on_success(&wr),
                read_fence: wr.read_fence,
                local_fence: false,
            };
            let checked = checked.and_then(|(piece, start)| {
                let generation = self.memory.table_generation()?;
                Some(rdmap::CheckedSource {
                    generation,
                    piece,
                    start,
                })
            });
            // The QP looked up at the top (the checks above borrow only the memory model).
            q.sq_active.push_back(ActiveSq {
                work,
                wr: StartedWr::of(&wr),
                done: None,
                local: false,
            });
            return Some((engine_wr, checked));
        }
    }

    /// Whether `qp` has WRs waiting for [`Rnic::next_send_wr`] or [`Rnic::next_rq_wr`] (S-RQ
    /// WQEs wait for messages, not for a pump). While no QP has any, the answer is no
    /// without looking `qp` up (a connection's visit then reads nothing of its QP); else a
    /// QP not found always may.
    pub fn has_pending_wrs(&self, qp: QpId) -> bool {
        if self.pending_wrs == 0 {
            return false;
        }
        self.qps
            .get(&qp)
            .is_none_or(|q| !q.sq_pending.is_empty() || !q.rq_pending.is_empty())
    }

    /// Whether the head of the QP's SQ is a Local Fence WR (it waits for every earlier WR's
    /// completion before [`Rnic::next_send_wr`] hands anything out).
    pub fn sq_fenced(&self, qp: QpId) -> bool {
        self.pending_wrs != 0
            && self
                .qps
                .get(&qp)
                .and_then(|q| q.sq_pending.front())
                .is_some_and(|(_, wr)| wr.local_fence)
    }

    /// Completes a WR the RI itself executed or rejected.
    fn finish_local(&mut self, qp: QpId, work: u64, wr: SendWr, status: CompletionStatus) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        let wc = WorkCompletion::new(qp, wr.wr_id, wr.opcode(), status);
        q.sq_active.push_back(ActiveSq {
            work,
            wr: StartedWr::of(&wr),
            done: Some(wc),
            local: true,
        });
        self.release_sq(qp);
    }

    /// The next WQE of the QP's own RQ for its engine, which takes them ahead of the
    /// messages; `None` for a QP on an S-RQ, which takes one when a message needs it
    /// ([`RecvSupply`], VERBS-00 §6.3.5). See [`Rnic::next_recv_wr`].
    pub fn next_rq_wr(&mut self, qp: QpId) -> Option<RecvWr> {
        // No WR waits in any QP (every pump after the last WR was taken): no look-up. An
        // empty RQ (every pump of a QP that only sends) costs one.
        if self.pending_wrs == 0 {
            return None;
        }
        let q = self.qps.get(&qp)?;
        if q.srq.is_some() || q.rq_pending.is_empty() {
            return None;
        }
        self.next_recv_wr(qp)
    }

    /// Takes the next receive WQE for the QP's engine now (from its RQ or its S-RQ), in RTS
    /// only. Its `wr_id` is the RI's work number. Raises the QP RQ Limit event when the
    /// number of messages in progress exceeds the armed limit (VERBS-00 §6.3.8); a QP that
    /// finds its S-RQ empty joins the S-RQ's waiters.
    pub fn next_recv_wr(&mut self, qp: QpId) -> Option<RecvWr> {
        let q = self.qps.get_mut(&qp)?;
        if q.state != QpState::Rts {
            if let Some(srq) = q.srq {
                self.srq_wait(qp, srq, false);
            }
            return None;
        }
        let wr = match q.srq {
            None => {
                let (_, wr) = q.rq_pending.pop_front()?;
                self.pending_wrs -= 1;
                wr
            }
            Some(srq) => match self.take_srq_wqe(srq) {
                Some(wr) => wr,
                None => {
                    self.srq_wait(qp, srq, true);
                    return None;
                }
            },
        };
        let q = self.qps.get_mut(&qp).expect("QP exists");
        let work = q.next_work();
        let engine_wr = RecvWr {
            wr_id: work,
            sgl: wr.sgl.clone(),
        };
        q.rq_active.push_back(ActiveRq {
            work,
            wr,
            done: None,
        });
        if q.rq_limit_armed && q.rq_active.len() as u32 > q.init.rq_limit {
            q.rq_limit_armed = false;
            self.raise_qp(qp, AsyncEventKind::QpRqLimitReached);
        }
        Some(engine_wr)
    }

    /// Takes a completion from the QP's RDMAP engine (its `wr_id` is the work number handed
    /// out by [`Rnic::next_send_wr`] / [`Rnic::next_recv_wr`]) and releases Work
    /// Completions in posting order (VERBS-00 §8.2.2 rule 2).
    pub fn handle_completion(&mut self, qp: QpId, c: rdmap::Completion) -> Result<(), VerbError> {
        let q = self.qps.get_mut(&qp).ok_or(VerbError::InvalidQpHandle)?;
        let remote_term = matches!(q.terminate, Some((_, TerminateOrigin::Remote)));
        // Statuses after the first error are turned into Flushed when released (at most
        // one error WC per QP, VERBS-00 §6.2.4).
        let mut status = status_from_engine(c.status, remote_term);
        match c.queue {
            rdmap::WorkQueue::Send => {
                // The oldest WR done, successful and unsignaled (a Write's or Send's usual
                // end): it leaves the SQ at once, with no WC built and no second look-up
                // (what `release_sq` does with it); later WRs done before it follow.
                let retire = status.is_success()
                    && q.sq_active
                        .front()
                        .is_some_and(|a| a.work == c.wr_id && a.done.is_none() && a.wr.silent);
                if retire {
                    if retire_front(q, &mut self.memory) {
                        self.release_sq(qp);
                    }
                    return Ok(());
                }
                let ctx = q.local_context();
                let Some(pos) = q.awaiting_sq(c.wr_id) else {
                    return Ok(());
                };
                let wr = q.sq_active[pos].wr;
                if let Some(stag) = wr.invalidate.filter(|_| status.is_success()) {
                    // VERBS-00 §8.2.2.1: invalidate after the data landed, before the WC
                    // is retrievable.
                    if let Err(e) = self.memory.invalidate_local(&ctx, stag) {
                        status = e;
                    }
                }
                let mut wc = WorkCompletion::new(qp, wr.wr_id, wr.opcode, status);
                wc.byte_len = c.byte_len;
                wc.atomic_original = c.atomic_original;
                if pos == 0 && status.is_success() {
                    // The oldest WR, successful: its WC goes to the CQ now (what
                    // `release_sq` would do with it), not written into its entry and read
                    // back after a second look-up of the QP; later WRs done before it
                    // follow.
                    q.sq_active.pop_front();
                    let done_behind = q.sq_active.front().is_some_and(|a| a.done.is_some());
                    let cq = q.sq_cq;
                    if !wr.signaled {
                        q.sq_slots = q.sq_slots.saturating_sub(1);
                    }
                    free_copy(&mut self.memory, wr.inline_copy);
                    if wr.signaled && !self.complete_or_stop(qp, cq, wc, WqKind::Sq) {
                        return Ok(());
                    }
                    if done_behind {
                        self.release_sq(qp);
                    }
                    return Ok(());
                }
                q.sq_active[pos].done = Some(wc);
                q.sq_active[pos].local =
                    !status.is_success() && c.status == rdmap::CompletionStatus::Success;
                self.release_sq(qp);
            }
            rdmap::WorkQueue::Recv => {
                let Some(pos) = q.awaiting_rq(c.wr_id) else {
                    return Ok(());
                };
                let wr_id = q.rq_active[pos].wr.wr_id;
                let mut wc = WorkCompletion::new(qp, wr_id, WcOpcode::Receive, status);
                wc.byte_len = c.byte_len;
                wc.invalidated = c.invalidated;
                wc.solicited = c.solicited;
                wc.immediate = c.immediate;
                q.rq_active[pos].done = Some(wc);
                self.release_rq(qp);
            }
        }
        Ok(())
    }

    /// Retires up to `n` unsignaled WRs the engine finished successfully
    /// ([`rdmap::Engine::take_retired`]) from the head of the SQ: each leaves with no WC,
    /// its slot freed, and the WRs done behind it are released in order (VERBS-00 §8.2.1).
    /// Stops at the WR with work number `before` (the one whose engine completion comes
    /// next: the unsignaled WRs ahead of it are the counted ones, RFC 5040 §5 order) or at
    /// the first WR that is not an unsignaled one in flight; returns how many of `n` are
    /// left for after it.
    pub fn retire_unsignaled(&mut self, qp: QpId, mut n: u32, before: Option<u64>) -> u32 {
        loop {
            let Some(q) = self.qps.get_mut(&qp) else {
                return 0;
            };
            let mut done_behind = false;
            while n != 0
                && q.sq_active
                    .front()
                    .is_some_and(|a| Some(a.work) != before && a.done.is_none() && a.wr.silent)
            {
                n -= 1;
                done_behind = retire_front(q, &mut self.memory);
                if done_behind {
                    break;
                }
            }
            if !done_behind {
                return n;
            }
            self.release_sq(qp);
        }
    }

    /// Releases finished SQ WRs from the head of the active list as WCs.
    fn release_sq(&mut self, qp: QpId) {
        loop {
            let Some(q) = self.qps.get_mut(&qp) else {
                return;
            };
            let Some(front) = q.sq_active.front() else {
                return;
            };
            if front.done.is_none() {
                return;
            }
            let a = q.sq_active.pop_front().expect("front exists");
            let wc = q.one_error(a.done.expect("checked"));
            let cq = q.sq_cq;
            let to_cq = a.wr.signaled || !wc.status.is_success();
            if !to_cq {
                q.sq_slots = q.sq_slots.saturating_sub(1);
            }
            free_copy(&mut self.memory, a.wr.inline_copy);
            if to_cq && !self.complete_or_stop(qp, cq, wc, WqKind::Sq) {
                return;
            }
            if wc.status.is_error() {
                // A completion error stops the QP (VERBS-00 §8.3.2): Terminate, and the
                // later WRs are flushed once it reaches Error.
                self.local_error(qp, TerminateCause::RDMAP_LOCAL_CATASTROPHIC, a.local, None);
                return;
            }
        }
    }

    /// Puts `wc` of `qp`'s `kind` queue on CQ `cq`. A full CQ stops the QP with a
    /// CQ/SQ or CQ/RQ error (VERBS-00 Fig. 24; [`Rnic::push_wc`]): `false` then.
    fn complete_or_stop(
        &mut self,
        qp: QpId,
        cq: CqHandle,
        wc: WorkCompletion,
        kind: WqKind,
    ) -> bool {
        if self.push_wc(cq, wc, kind) {
            return true;
        }
        let event = match kind {
            WqKind::Sq => AsyncEventKind::CqSqError,
            WqKind::Rq | WqKind::Srq => AsyncEventKind::CqRqError,
        };
        self.local_error(
            qp,
            TerminateCause::RDMAP_CATASTROPHIC_STREAM,
            true,
            Some(event),
        );
        false
    }

    /// Releases finished receives from the head of the RQ as WCs.
    fn release_rq(&mut self, qp: QpId) {
        loop {
            let Some(q) = self.qps.get_mut(&qp) else {
                return;
            };
            if q.rq_active.front().is_none_or(|a| a.done.is_none()) {
                return;
            }
            let a = q.rq_active.pop_front().expect("front exists");
            let wc = q.one_error(a.done.expect("checked"));
            let cq = q.rq_cq;
            let kind = if q.srq.is_some() {
                WqKind::Srq
            } else {
                WqKind::Rq
            };
            if !self.complete_or_stop(qp, cq, wc, kind) {
                return;
            }
            if wc.status.is_error() {
                self.local_error(qp, TerminateCause::RDMAP_LOCAL_CATASTROPHIC, false, None);
                return;
            }
        }
    }
}

/// The connections of an RNIC take S-RQ WQEs through it, one when a message on queue 0 of a
/// QP on an S-RQ needs one (VERBS-00 §6.3.5): a QP holds only WQEs of messages that arrived,
/// so every QP on the S-RQ can consume what it holds. A QP's own RQ is never drawn on here.
impl RecvSupply for Rnic {
    fn take_recv(&mut self, stream: StreamId) -> Option<RecvWr> {
        let qp = QpId(stream.0);
        self.qps.get(&qp)?.srq?;
        self.next_recv_wr(qp)
    }
}

/// A receive WR fits a queue holding `slots` of its `depth` WRs, with at most `max_sges`
/// SGEs per WR (VERBS-00 §9.3.1.2).
pub(super) fn check_recv_wr(
    wr: &RecvWr,
    slots: u32,
    depth: u32,
    max_sges: u32,
) -> Result<(), VerbError> {
    if slots >= depth {
        return Err(VerbError::TooManyWorkRequests);
    }
    if wr.sgl.len() > max_sges as usize {
        return Err(VerbError::InvalidSglLength);
    }
    Ok(())
}
