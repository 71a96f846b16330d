//! The verbs glue: a connection is the wire side of one QP of an [`Rnic`]; its WRs come
//! from the QP, its completions and stream events go back to the RNIC (VERBS-00 §6.2, §8.2).

use std::collections::VecDeque;

use tcp::Instant;

use super::connection::{Connection, LlpRequest, Phase};
use crate::mem::{HasMemoryTable, MemoryTable};
use crate::rdmap::WorkQueue;
use crate::verbs::{QpAction, QpId, Rnic};

impl Connection {
    /// Moves work between the verbs QP `qp` of `rnic` and this connection's engine: posted
    /// WRs in (once the QP is in RTS; a QP on an S-RQ takes its receive WQEs when messages
    /// arrive instead, [`crate::ddp::untagged::RecvSupply`]), engine completions and stream events out, with their
    /// automatic QP transitions (VERBS-00 §6.2, §8.2). The poll core calls it after creating
    /// the connection and after each activity that gave it something to move
    /// ([`Connection::verbs_pending`], [`Rnic::has_pending_wrs`]), lending the RNIC it owns.
    pub fn pump_verbs(&mut self, now: Instant, rnic: &mut Rnic, qp: QpId) {
        self.advance_time(now);
        self.verbs_events.get_or_insert_with(VecDeque::new);
        // Completions first: what the engine completed happened before the stream event
        // that followed it (a reset right after a placed Send must not flush that Send's
        // receive, VERBS-00 §8.2).
        self.forward_completions(rnic, qp);
        self.forward_verbs_events(rnic, qp);
        if matches!(self.phase, Phase::Fpdu(_) | Phase::Negotiating(_)) {
            loop {
                while let Some(wr) = rnic.next_rq_wr(qp) {
                    if self.post_recv(wr).is_err() {
                        break;
                    }
                }
                while let Some((wr, checked)) = rnic.next_checked_send_wr(qp) {
                    let (mem, pool) = rnic.table_and_pool();
                    if self.post_send_with(now, mem, pool, wr, checked).is_err() {
                        break;
                    }
                }
                // The QP's receives are posted (or, on an S-RQ, the RNIC lends them): what
                // followed a peer-to-peer RTR can go in.
                self.release_rx_gate(rnic);
                // Completions of what was just posted may lift the Local Fence holding the
                // rest of the SQ: post again then, in this same pump.
                if !(self.forward_completions(rnic, qp) && rnic.sq_fenced(qp)) {
                    break;
                }
            }
        } else {
            self.forward_completions(rnic, qp);
        }
        self.forward_verbs_events(rnic, qp);
        self.wrs_waiting = rnic.has_pending_wrs(qp);
    }

    /// Whether [`Connection::pump_verbs`] has something to move that no newly posted WR
    /// brought: completions, stream events for the verbs layer, receives held behind an
    /// open RTR gate, or its first run still to come (outside FPDU mode: always).
    pub fn verbs_pending(&self) -> bool {
        if self.verbs_events.as_ref().is_none_or(|e| !e.is_empty()) {
            return true;
        }
        match &self.phase {
            Phase::Fpdu(f) => {
                f.engine.has_completions() || f.inbound.gate.as_ref().is_some_and(|g| g.open)
            }
            Phase::Negotiating(_) | Phase::Closed(_) => true,
        }
    }

    /// Forwards the engine's completions and its unsignaled WRs' ends to the RNIC; whether
    /// there were any. SQ WRs finish in order: the unsignaled WRs ahead of a send
    /// completion's WR retire before it, the rest after the last completion. (The check
    /// for none is inline: the pump's first call usually finds none.)
    #[inline]
    fn forward_completions(&mut self, rnic: &mut Rnic, qp: QpId) -> bool {
        if !self
            .phase
            .stream()
            .is_some_and(|(e, _)| e.has_completions())
        {
            return false;
        }
        self.forward_engine_completions(rnic, qp)
    }

    #[inline(never)]
    fn forward_engine_completions(&mut self, rnic: &mut Rnic, qp: QpId) -> bool {
        let mut retired = self.take_retired();
        let mut any = retired != 0;
        while let Some(c) = self.poll_completion() {
            any = true;
            if retired != 0 && c.queue == WorkQueue::Send {
                retired = rnic.retire_unsignaled(qp, retired, Some(c.wr_id));
            }
            let _ = rnic.handle_completion(qp, c);
        }
        if retired != 0 {
            rnic.retire_unsignaled(qp, retired, None);
        }
        any
    }

    fn forward_verbs_events(&mut self, rnic: &mut Rnic, qp: QpId) {
        while let Some(ev) = self.verbs_events.as_mut().and_then(VecDeque::pop_front) {
            let _ = rnic.handle_engine_event(qp, ev);
        }
    }

    /// Carries out a verbs [`QpAction`] aimed at this connection; returns what the driver
    /// must then do with the TCP connection.
    pub fn apply_qp_action<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mem: &M,
        action: &QpAction,
    ) -> Option<LlpRequest> {
        match action {
            QpAction::SendTerminate { cause, .. } => {
                self.abort(now, mem, *cause);
                Some(LlpRequest::Close)
            }
            QpAction::CloseLlp { .. } => {
                self.close(now, mem);
                Some(LlpRequest::Close)
            }
            QpAction::ReleaseLlp { .. } => {
                self.release(now, mem);
                None
            }
            QpAction::ResetLlp { .. } => Some(LlpRequest::Reset),
            QpAction::Attach { .. } | QpAction::Destroyed { .. } => None,
        }
    }
}
