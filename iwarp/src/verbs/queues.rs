//! The queue objects an [`Rnic`](super::Rnic) keeps in its tables: Completion Queues,
//! Shared Receive Queues and Queue Pairs (VERBS-00 §5.3, §6), with the public types they
//! hold (a CQ's [`NotifyType`]; a QP's [`QpInit`], [`TerminateOrigin`] and LLP stream handle).
//! The verbs that create and use them build on this module.

use std::collections::VecDeque;

use super::handle::{CompletionHandlerId, CqHandle, QpId, SrqHandle, UlpId};
use super::memory::{LocalContext, StreamRights};
use super::qp_state::QpState;
use super::status::CompletionStatus;
use super::wc::{WcOpcode, WorkCompletion};
use super::wr::{RecvWr, SendWr, SqOp};
use crate::mem::{PdId, STag};
use crate::rdmap;
use crate::wire::terminate::TerminateCause;

/// Which completion the next notification waits for (VERBS-00 §8.2.5, §9.3.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NotifyType {
    /// The next Receive of a Send with Solicited Event, or any error completion.
    NextSolicited,
    /// The next completion of any kind.
    NextCompletion,
}

/// Which work queue a CQE came from; used to free the WQE slot when the CQE is polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WqKind {
    Sq,
    Rq,
    Srq,
}

/// A Completion Queue.
#[derive(Debug)]
pub(super) struct Cq {
    pub(super) ulp: UlpId,
    pub(super) capacity: u32,
    pub(super) entries: VecDeque<(WorkCompletion, WqKind)>,
    pub(super) notify: Option<NotifyType>,
    pub(super) handler: Option<CompletionHandlerId>,
    /// Completions dropped because the CQ was full.
    pub(super) overflows: u64,
    /// QPs whose flushed WRs wait for room on this CQ, each once: a poll that makes room
    /// resumes them, and only them.
    pub(super) flush_blocked: Vec<QpId>,
}

/// A Shared Receive Queue.
#[derive(Debug)]
pub(super) struct Srq {
    pub(super) pd: PdId,
    pub(super) max_wrs: u32,
    pub(super) max_sges: u32,
    pub(super) limit: u32,
    pub(super) armed: bool,
    /// WQEs posted and not yet taken by a QP.
    pub(super) queue: VecDeque<RecvWr>,
    /// WQEs posted whose WC was not yet polled (VERBS-00 §6.3.5).
    pub(super) slots: u32,
    /// QPs that found the S-RQ empty, oldest first: a post wakes one per WQE posted.
    pub(super) waiters: VecDeque<QpId>,
}

/// An LLP stream (TCP connection) handle chosen by the data plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LlpStreamHandle(pub u64);

/// Inputs of Create QP (VERBS-00 §9.2.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInit {
    /// Protection domain.
    pub pd: PdId,
    /// CQ of the SQ.
    pub sq_cq: CqHandle,
    /// CQ of the RQ (or of the S-RQ WQEs this QP consumes).
    pub rq_cq: CqHandle,
    /// S-RQ to take receive WQEs from.
    pub srq: Option<SrqHandle>,
    /// Max outstanding SQ WRs.
    pub sq_depth: u32,
    /// Max outstanding RQ WRs (ignored with an S-RQ).
    pub rq_depth: u32,
    /// Max SGEs per Send WR.
    pub send_sges: u32,
    /// Max SGEs per RDMA Write WR.
    pub write_sges: u32,
    /// Max SGEs per Receive WR.
    pub recv_sges: u32,
    /// Inbound RDMA Read Requests the QP can hold.
    pub ird: u32,
    /// Outbound RDMA Read Requests the QP may have outstanding.
    pub ord: u32,
    /// Inbound RDMA Read enable.
    pub inbound_read: bool,
    /// Inbound RDMA Write and Read Response enable.
    pub inbound_write: bool,
    /// Inbound atomic enable (RFC 7306).
    pub inbound_atomic: bool,
    /// Memory Window binding enable.
    pub bind_enabled: bool,
    /// STag 0 and Fast-Register enable (privileged consumers only).
    pub privileged: bool,
    /// QP RQ Limit (S-RQ only; 0 = disarmed).
    pub rq_limit: u32,
}

impl QpInit {
    /// A QP with modest depths, 4 SGEs, IRD = ORD = 4, inbound Read and Write enabled,
    /// binding enabled, not privileged.
    pub fn new(pd: PdId, sq_cq: CqHandle, rq_cq: CqHandle) -> Self {
        QpInit {
            pd,
            sq_cq,
            rq_cq,
            srq: None,
            sq_depth: 64,
            rq_depth: 64,
            send_sges: 4,
            write_sges: 4,
            recv_sges: 4,
            ird: 4,
            ord: 4,
            inbound_read: true,
            inbound_write: true,
            inbound_atomic: false,
            bind_enabled: true,
            privileged: false,
            rq_limit: 0,
        }
    }
}

/// Where a Terminate recorded by the QP came from (Query QP, VERBS-00 §9.2.5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminateOrigin {
    /// Sent by this side.
    Local,
    /// Received from the peer.
    Remote,
}

/// What the RI keeps of an SQ WR once started (its operation and gather list handed to
/// the engine, or executed): what the WR's WC and its release from the SQ need.
#[derive(Debug, Clone, Copy)]
pub(super) struct StartedWr {
    /// The consumer's WR ID.
    pub(super) wr_id: u64,
    /// The WC opcode.
    pub(super) opcode: WcOpcode,
    /// Whether a success produces a WC.
    pub(super) signaled: bool,
    /// A success ends with no WC: unsignaled, and not a Read with Invalidate (whose end
    /// the verbs layer completes itself, VERBS-00 §8.2.2.1).
    pub(super) silent: bool,
    /// A Read with Invalidate's local sink STag, invalidated once the Read completed.
    pub(super) invalidate: Option<STag>,
    /// The STag of the RI's copy of an inline WR's data, freed when the WR leaves the SQ.
    pub(super) inline_copy: Option<STag>,
}

impl StartedWr {
    /// What is kept of `wr`.
    pub(super) fn of(wr: &SendWr) -> Self {
        let invalidate = match &wr.op {
            SqOp::ReadInvalidate(rdmap::SendOp::Read { sink, .. }) => Some(sink.stag),
            _ => None,
        };
        StartedWr {
            wr_id: wr.wr_id,
            opcode: wr.opcode(),
            signaled: wr.signaled,
            silent: silent_on_success(wr),
            invalidate,
            inline_copy: inline_copy(wr),
        }
    }
}

/// Whether `wr` ends with no WC when it succeeds: unsignaled, and not a Read with
/// Invalidate (whose end the verbs layer completes itself, VERBS-00 §8.2.2.1).
#[inline]
pub(super) fn silent_on_success(wr: &SendWr) -> bool {
    !wr.signaled && !matches!(wr.op, SqOp::ReadInvalidate(_))
}

/// The STag of the RI's copy of an inline WR's data: the one SGE `Rnic::post_sq` made for
/// it.
#[inline]
pub(super) fn inline_copy(wr: &SendWr) -> Option<STag> {
    wr.inline_sgl().and_then(<[_]>::first).map(|s| s.stag)
}

/// An SQ WR started (handed to the engine or executed) and not yet released as a WC.
#[derive(Debug, Clone)]
pub(super) struct ActiveSq {
    pub(super) work: u64,
    pub(super) wr: StartedWr,
    pub(super) done: Option<WorkCompletion>,
    /// The error was found by the RI itself (it sends the Terminate, not the engine).
    pub(super) local: bool,
}

/// A receive WQE taken by the engine and not yet completed.
#[derive(Debug, Clone)]
pub(super) struct ActiveRq {
    pub(super) work: u64,
    pub(super) wr: RecvWr,
    pub(super) done: Option<WorkCompletion>,
}

/// A Queue Pair: its state and both work queues.
#[derive(Debug)]
pub(super) struct Qp {
    pub(super) id: QpId,
    pub(super) ulp: UlpId,
    pub(super) pd: PdId,
    pub(super) sq_cq: CqHandle,
    pub(super) rq_cq: CqHandle,
    pub(super) srq: Option<SrqHandle>,
    pub(super) init: QpInit,
    pub(super) state: QpState,
    /// Terminate was entered by Modify QP (no "Error State Entered" afterwards, §6.2.3).
    pub(super) terminate_by_modify: bool,
    pub(super) terminate: Option<(TerminateCause, TerminateOrigin)>,
    pub(super) llp: Option<LlpStreamHandle>,
    pub(super) sq_pending: VecDeque<(u64, SendWr)>,
    pub(super) sq_active: VecDeque<ActiveSq>,
    pub(super) sq_slots: u32,
    pub(super) rq_pending: VecDeque<(u64, RecvWr)>,
    pub(super) rq_active: VecDeque<ActiveRq>,
    pub(super) rq_slots: u32,
    pub(super) flush_queue: VecDeque<(WorkCompletion, WqKind)>,
    pub(super) next_work: u64,
    pub(super) rq_limit_armed: bool,
    /// A WC with a status other than Success or Flushed was produced (VERBS-00 §6.2.4:
    /// at most one per QP).
    pub(super) error_reported: bool,
    /// In the RNIC's list of QPs with new work ([`Rnic::take_touched_qps`]).
    pub(super) touched: bool,
    /// In its S-RQ's list of waiters.
    pub(super) srq_waiting: bool,
}

impl Qp {
    pub(super) fn has_flush_pending(&self) -> bool {
        !self.flush_queue.is_empty()
    }

    pub(super) fn sq_empty(&self) -> bool {
        self.sq_pending.is_empty() && self.sq_active.iter().all(|a| a.done.is_some())
    }

    /// At most one error WC per QP (VERBS-00 §6.2.4): an error status after the first one
    /// becomes Flushed.
    pub(super) fn one_error(&mut self, mut wc: WorkCompletion) -> WorkCompletion {
        if wc.status.is_error() {
            if self.error_reported {
                wc.status = CompletionStatus::Flushed;
            }
            self.error_reported = true;
        }
        wc
    }

    /// Where work `work` waits in `sq_active` for its engine completion.
    pub(super) fn awaiting_sq(&self, work: u64) -> Option<usize> {
        self.sq_active
            .iter()
            .position(|a| a.work == work && a.done.is_none())
    }

    /// Where work `work` waits in `rq_active` for its engine completion.
    pub(super) fn awaiting_rq(&self, work: u64) -> Option<usize> {
        self.rq_active
            .iter()
            .position(|a| a.work == work && a.done.is_none())
    }

    pub(super) fn local_context(&self) -> LocalContext {
        LocalContext {
            qp: self.id,
            pd: self.pd,
            privileged: self.init.privileged,
            bind_enabled: self.init.bind_enabled,
        }
    }

    pub(super) fn stream_rights(&self, srq_pd: Option<PdId>) -> StreamRights {
        StreamRights {
            privileged: self.init.privileged,
            srq_pd,
            inbound_read: self.init.inbound_read,
            inbound_write: self.init.inbound_write,
            inbound_atomic: self.init.inbound_atomic,
        }
    }

    pub(super) fn next_work(&mut self) -> u64 {
        self.next_work += 1;
        self.next_work
    }
}
