//! The sans-IO RDMAP engine of one stream: state, work queues, completion ordering,
//! Terminate generation and stream lifecycle (RFC 5040 §5.5, §6, §7).

use std::collections::VecDeque;
use tcp::Instant;

use thiserror::Error;

use super::completion::{Completion, CompletionOpcode, CompletionStatus, Event, WorkQueue};
use super::state::{
    Culprit, Failure, OutstandingAtomic, OutstandingRead, Response, RxRecord, SqEntry, TxMessage,
};
use super::wr::{CheckedSource, SendOp, SendWr};
use crate::ddp::delivery::DeliveryOrder;
use crate::ddp::segmenter::MsnCounters;
use crate::ddp::untagged::{RecvBuffer, UntaggedQueues};
use crate::mem::{Access, AccessError, MemoryTable, PdId, Resolved, STag, StreamId};
use crate::wire::rdmap::RDMAP_VERSION;
use crate::wire::terminate::{TerminateCause, TerminateRepr};

/// Static parameters of one RDMAP stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Protection domain of the stream (queue pair).
    pub pd: PdId,
    /// Stream identity for STag association.
    pub stream: StreamId,
    /// Inbound RDMA Read (and Atomic) Request queue depth.
    pub ird: u32,
    /// Outbound RDMA Read (and Atomic) Requests allowed outstanding.
    pub ord: u32,
    /// RFC 7306 atomics and immediate data enabled.
    pub extensions: bool,
    /// RDMAP version to send and to accept (1 = IETF; 0 = RDMA Consortium, SPEC-DIGEST D11).
    pub rdmap_version: u8,
    /// Most early (out-of-order) segments held for in-order delivery.
    pub max_held_segments: usize,
}

impl EngineConfig {
    /// A configuration with RV 01b, no extensions and room for 1024 early segments.
    pub fn new(pd: PdId, stream: StreamId, ird: u32, ord: u32) -> Self {
        EngineConfig {
            pd,
            stream,
            ird,
            ord,
            extensions: false,
            rdmap_version: RDMAP_VERSION,
            max_held_segments: 1024,
        }
    }
}

/// Lifecycle of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamState {
    /// RDMA mode, both directions open.
    Active,
    /// Local graceful close requested: queued work drains, new work is refused.
    Closing,
    /// A Terminate was queued/sent or received: nothing more is placed or delivered.
    Terminated,
    /// Closed gracefully.
    Closed,
    /// The LLP failed.
    Error,
}

/// Outcome of handing a DDP segment to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Processed (placed, and delivered once every earlier segment arrived).
    Accepted,
    /// Already seen; nothing done.
    Duplicate,
    /// Too many early segments held; offer it again later (the LLP keeps the bytes).
    Deferred,
    /// The stream has stopped; the segment was silently dropped (RFC 5041 §7.1).
    Dropped,
}

/// Why a work request was refused at post time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PostError {
    /// The stream is closing, terminated or closed.
    #[error("stream is not active")]
    NotActive,
    /// The operation needs the RDMAP extensions, which are disabled.
    #[error("RDMAP extensions not enabled")]
    ExtensionsDisabled,
    /// The total length exceeds 2^32 − 1 octets.
    #[error("message too long")]
    TooLong,
}

/// The RDMAP (+ DDP) protocol engine of one stream, driven by `handle_*` / `poll_*` calls.
///
/// Laid out in declaration order (`repr(C)`): the first line holds what an idle stream's
/// check reads ([`Engine::has_segment`]: the state and the `tx_idle` summary), what the
/// service's check reads ([`Engine::has_completions`]: `retired` and `completed`) and what an
/// in-order Write segment reads besides ([`Engine::place_next_write`]: the configuration,
/// the time of the last segment); the next line the delivery order and the MSNs; then the
/// completions and responses (the service's checks), the send queue and the message under
/// way, the rest after.
#[derive(Debug)]
#[repr(C)]
pub struct Engine {
    pub(super) state: StreamState,
    pub(super) terminate_sent: bool,
    pub(super) prefer_response: bool,
    /// Nothing to start: no message under way, no response waiting and every SQ WR
    /// started ([`Engine::nothing_to_start`], which it equals between calls). Read first
    /// by [`Engine::has_segment`] and [`Engine::has_tx_work`], so that asking an idle
    /// stream (a receiver's, after every run) reads this line and not the queues' and the
    /// current message's.
    pub(super) tx_idle: bool,
    /// Unsignaled SQ WRs finished successfully since [`Engine::take_retired`] (no
    /// [`Completion`] is built for them; their order is the SQ's).
    pub(super) retired: u32,
    /// SQ entries started (handed to a message or finished at start), from the queue's
    /// head; 32 bits, so that `completed` shares this line.
    pub(super) sq_started: u32,
    /// A [`Completion`] waits in `completions` (read by [`Engine::has_completions`], which
    /// every visit of the service and the TCP engine asks: this line, not the queue's).
    pub(super) completed: bool,
    pub(super) cfg: EngineConfig,
    pub(super) last_rx: Option<Instant>,
    pub(super) order: DeliveryOrder<RxRecord>,
    pub(super) msn: MsnCounters,
    pub(super) completions: VecDeque<Completion>,
    pub(super) responses: VecDeque<Response>,
    pub(super) sq: VecDeque<SqEntry>,
    pub(super) current: Option<TxMessage>,
    pub(super) terminate: Option<TerminateRepr>,
    pub(super) last_tx: Option<Instant>,
    pub(super) events: VecDeque<Event>,
    pub(super) next_seq: u64,
    pub(super) queues: UntaggedQueues,
    /// The gather list of the last finished message, emptied, reused for the next one.
    pub(super) spare_pieces: Vec<(Option<Resolved>, u32)>,
    pub(super) reads: VecDeque<OutstandingRead>,
    pub(super) atomics: VecDeque<OutstandingAtomic>,
    pub(super) next_request_id: u32,
}

fn op_completion_opcode(op: &SendOp) -> CompletionOpcode {
    match op {
        SendOp::Send { .. } => CompletionOpcode::Send,
        SendOp::Write { .. } => CompletionOpcode::Write,
        SendOp::Read { .. } => CompletionOpcode::Read,
        SendOp::Immediate { .. } => CompletionOpcode::Immediate,
        SendOp::Atomic { op, .. } => CompletionOpcode::Atomic(*op),
    }
}

impl Engine {
    /// A stream in RDMA mode (all MSNs start at 1, segment positions at 0).
    pub fn new(cfg: EngineConfig) -> Self {
        Self::with_start_position(cfg, 0)
    }

    /// Like [`Engine::new`], with the position of the first incoming segment given in the
    /// coordinate the LLP uses for [`crate::ddp::SegmentPos`].
    pub fn with_start_position(cfg: EngineConfig, start: u64) -> Self {
        Engine {
            cfg,
            state: StreamState::Active,
            msn: MsnCounters::new(),
            sq: VecDeque::new(),
            sq_started: 0,
            completed: false,
            next_seq: 0,
            current: None,
            spare_pieces: Vec::new(),
            responses: VecDeque::new(),
            prefer_response: true,
            tx_idle: true,
            reads: VecDeque::new(),
            atomics: VecDeque::new(),
            next_request_id: 1,
            terminate: None,
            terminate_sent: false,
            order: DeliveryOrder::new(start, cfg.max_held_segments),
            queues: UntaggedQueues::new(cfg.ird, cfg.extensions),
            completions: VecDeque::new(),
            retired: 0,
            events: VecDeque::new(),
            last_rx: None,
            last_tx: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Current lifecycle state.
    pub fn state(&self) -> StreamState {
        self.state
    }

    /// The Terminate this side sent or will send, if any.
    pub fn local_terminate(&self) -> Option<&TerminateRepr> {
        self.terminate.as_ref()
    }

    /// Time of the last segment handled.
    pub fn last_rx(&self) -> Option<Instant> {
        self.last_rx
    }

    /// Time of the last segment polled.
    pub fn last_tx(&self) -> Option<Instant> {
        self.last_tx
    }

    /// Number of RDMA Read / Atomic Requests sent and not yet answered.
    pub fn outstanding_requests(&self) -> usize {
        self.reads.len() + self.atomics.len()
    }

    /// Next MSN this side will use on untagged queue `qn`.
    pub fn next_send_msn(&self, qn: u32) -> u32 {
        self.msn.peek(qn)
    }

    /// Sets the next outbound MSN of queue `qn` (MSN wrap tests, restarts).
    pub fn set_next_send_msn(&mut self, qn: u32, msn: u32) {
        self.msn.set(qn, msn);
    }

    /// Posts a send-queue work request. Messages go to DDP in posting order and complete in
    /// posting order (RFC 5040 §5.5 rules 13, 15).
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        self.post_checked_send(wr, None)
    }

    /// [`Engine::post_send`] of a WR whose source SGL the verbs layer checked (`checked`).
    pub fn post_checked_send(
        &mut self,
        wr: SendWr,
        checked: Option<CheckedSource>,
    ) -> Result<(), PostError> {
        if self.state != StreamState::Active {
            return Err(PostError::NotActive);
        }
        match &wr.op {
            SendOp::Send { sgl, .. } | SendOp::Write { sgl, .. } => {
                let total: u64 = sgl.iter().map(|s| u64::from(s.len)).sum();
                if total > u64::from(u32::MAX) {
                    return Err(PostError::TooLong);
                }
            }
            SendOp::Immediate { .. } | SendOp::Atomic { .. } if !self.cfg.extensions => {
                return Err(PostError::ExtensionsDisabled);
            }
            _ => {}
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.sq.push_back(SqEntry {
            seq,
            wr,
            done: None,
            byte_len: 0,
            atomic_original: None,
            checked,
        });
        self.tx_idle = false;
        Ok(())
    }

    /// Posts a receive buffer for incoming Sends / Immediate Data (QN 0).
    pub fn post_recv(&mut self, wr: RecvBuffer) -> Result<(), PostError> {
        match self.state {
            StreamState::Active | StreamState::Closing => {
                self.queues.post_recv(wr);
                Ok(())
            }
            _ => Err(PostError::NotActive),
        }
    }

    /// The position (in the coordinate of [`crate::ddp::SegmentPos`]) the next in-order
    /// segment must start at.
    pub fn next_segment_position(&self) -> u64 {
        self.order.next_position()
    }

    /// Number of receive buffers posted and not yet consumed.
    pub fn posted_recv_count(&self) -> usize {
        self.queues.recv_posted()
    }

    /// Next work completion, in the order the RFC requires.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        let c = self.completions.pop_front();
        self.completed = !self.completions.is_empty();
        c
    }

    /// Whether a work completion waits for [`Engine::poll_completion`] or an unsignaled WR's
    /// end for [`Engine::take_retired`].
    pub fn has_completions(&self) -> bool {
        debug_assert_eq!(self.completed, !self.completions.is_empty());
        self.completed || self.retired != 0
    }

    /// Queues `c` for [`Engine::poll_completion`].
    #[inline]
    pub(super) fn complete(&mut self, c: Completion) {
        self.completions.push_back(c);
        self.completed = true;
    }

    /// How many unsignaled SQ WRs finished successfully since the last call. They finish in
    /// SQ order, interleaved with the completions [`Engine::poll_completion`] gives: one such
    /// WR ends after every earlier SQ WR (RFC 5040 §5, §6).
    pub fn take_retired(&mut self) -> u32 {
        std::mem::take(&mut self.retired)
    }

    /// Whether [`Engine::poll_event`] has an event to give.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Next asynchronous event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Local graceful close (RFC 5040 §6.2 case 1, RFC 5041 §6): queued work still drains,
    /// new send work is refused. The LLP may close once [`Engine::is_drained`].
    pub fn close(&mut self) {
        if self.state == StreamState::Active {
            self.state = StreamState::Closing;
        }
    }

    /// Whether nothing is left to send or to wait for.
    pub fn is_drained(&self) -> bool {
        self.sq.is_empty()
            && self.responses.is_empty()
            && self.current.is_none()
            && (self.terminate.is_none() || self.terminate_sent)
    }

    /// Abortive termination by the ULP (RFC 5040 §6.2.1): queue a Terminate with `cause`
    /// (no optional fields) and stop the stream.
    pub fn abort(&mut self, cause: TerminateCause) {
        self.fail(Failure::bare(cause, Culprit::None));
    }

    /// The QP that owns the stream was destroyed (VERBS-00 §6.1.4): nothing more is built,
    /// placed or delivered, no Terminate is sent (one already queued still goes out), and
    /// the pending work is dropped without completions, which no one could poll any more.
    /// What was built before stays with the LLP, which the caller closes gracefully, as
    /// Linux closes the socket of a QP its owner let go of.
    pub fn release(&mut self) {
        if matches!(self.state, StreamState::Active | StreamState::Closing) {
            self.state = StreamState::Closed;
        }
        self.flush(Culprit::None);
        self.completions.clear();
        self.completed = false;
    }

    /// The LLP closed: `graceful` for a peer FIN, otherwise reset or loss.
    pub fn handle_llp_closed(&mut self, graceful: bool) {
        match self.state {
            StreamState::Closed | StreamState::Error => return,
            StreamState::Terminated => {
                self.state = if graceful {
                    StreamState::Closed
                } else {
                    StreamState::Error
                };
                return;
            }
            _ => {}
        }
        if !graceful {
            self.state = StreamState::Error;
            self.flush(Culprit::None);
            self.events.push_back(Event::LlpLost);
            return;
        }
        let busy = !self.sq.is_empty() || !self.responses.is_empty() || self.current.is_some();
        if busy {
            // VERBS-00 Fig. 24 "Bad LLP Close".
            self.fail(Failure::bare(
                TerminateCause::RDMAP_CATASTROPHIC_STREAM,
                Culprit::None,
            ));
        } else {
            self.state = StreamState::Closed;
            self.flush(Culprit::None);
            self.events.push_back(Event::Closed);
        }
    }

    /// Records an error: the first one wins (RFC 5040 §7.1 case 4), a Terminate is queued,
    /// every queue is flushed and nothing more is placed.
    pub(super) fn fail(&mut self, f: Failure) {
        if self.terminate.is_some()
            || matches!(
                self.state,
                StreamState::Terminated | StreamState::Closed | StreamState::Error
            )
        {
            return;
        }
        log::debug!("stream {:?}: terminate {}", self.cfg.stream, f.cause);
        let carry = f.cause.carries_ddp_header();
        self.terminate = Some(TerminateRepr {
            cause: f.cause,
            segment_len: if carry { f.segment_len } else { None },
            ddp_header: if carry { f.ddp } else { None },
            rdma_header: f.rdma,
        });
        self.state = StreamState::Terminated;
        self.events.push_back(Event::TerminateSent(f.cause));
        self.flush(f.culprit);
    }

    /// Peer Terminate: stop without answering (RFC 5040 §5.4).
    pub(super) fn remote_terminated(&mut self, t: TerminateRepr) {
        if self.state == StreamState::Terminated {
            return;
        }
        self.state = StreamState::Terminated;
        self.terminate_sent = true;
        self.events.push_back(Event::TerminateReceived(t));
        self.flush(Culprit::None);
    }

    /// Completes every pending work request in error (RFC 5040 §5.4, §6.2.1).
    pub(super) fn flush(&mut self, culprit: Culprit) {
        self.current = None;
        self.responses.clear();
        self.reads.clear();
        self.atomics.clear();
        self.order.clear();
        for e in self.sq.iter_mut() {
            if e.done.is_none() {
                e.done = Some(match culprit {
                    Culprit::Send(seq, st) if seq == e.seq => st,
                    _ => CompletionStatus::Flushed,
                });
            }
        }
        self.sq_started = 0;
        self.drain_sq();
        self.tx_idle = self.nothing_to_start();
        for (i, b) in self.queues.drain_recv().into_iter().enumerate() {
            let status = match culprit {
                Culprit::Recv(idx, st) if idx as usize == i => st,
                _ => CompletionStatus::Flushed,
            };
            self.complete(Completion::new(
                b.wr_id,
                WorkQueue::Recv,
                CompletionOpcode::Recv,
                status,
            ));
        }
    }

    /// Marks SQ entry `seq` done and emits every completion that is now in order.
    pub(super) fn finish_sq(&mut self, seq: u64, status: CompletionStatus) {
        if let Some(e) = self.sq.iter_mut().find(|e| e.seq == seq) {
            if e.done.is_none() {
                e.done = Some(status);
            }
        }
        self.drain_sq();
    }

    /// Validates an access of `len` octets at `to` through `stag` by this stream, in its PD.
    pub(super) fn resolve_on_stream<M: MemoryTable + ?Sized>(
        &self,
        mem: &M,
        stag: STag,
        to: u64,
        len: u64,
        need: Access,
    ) -> Result<Resolved, AccessError> {
        mem.resolve(stag, self.cfg.pd, self.cfg.stream, to, len, need)
    }

    pub(super) fn sq_entry_mut(&mut self, seq: u64) -> Option<&mut SqEntry> {
        self.sq.iter_mut().find(|e| e.seq == seq)
    }

    /// Queues a response owed to the peer (a Read Response, an Atomic Response): the
    /// stream has something to start.
    pub(super) fn queue_response(&mut self, r: Response) {
        self.responses.push_back(r);
        self.tx_idle = false;
    }

    /// No message under way, no response waiting, every SQ WR started: what
    /// [`Engine::tx_idle`] summarises.
    pub(super) fn nothing_to_start(&self) -> bool {
        self.current.is_none() && self.nothing_waiting()
    }

    /// No response waiting, every SQ WR started. Out of line so that asking a stream with
    /// a message under way (after each of its segments) reads the message's line alone:
    /// inline, the compiler reads the queues' lines too, to answer without a branch.
    #[inline(never)]
    fn nothing_waiting(&self) -> bool {
        self.responses.is_empty() && self.sq_started as usize >= self.sq.len()
    }

    fn drain_sq(&mut self) {
        // Each finished entry is read where it lies, then dropped there: `SqEntry` keeps
        // what is read here in its first line, and the rest is not read.
        while let Some(e) = self.sq.front() {
            let Some(status) = e.done else { break };
            self.sq_started = self.sq_started.saturating_sub(1);
            if e.wr.signaled || status != CompletionStatus::Success {
                let mut c = Completion::new(
                    e.wr.wr_id,
                    WorkQueue::Send,
                    op_completion_opcode(&e.wr.op),
                    status,
                );
                c.byte_len = e.byte_len;
                c.atomic_original = e.atomic_original;
                self.complete(c);
            } else {
                self.retired += 1;
            }
            // Dropped in place: `pop_front` would copy the whole entry out first.
            self.sq.drain(..1);
        }
    }
}

#[cfg(test)]
mod layout {
    use super::Engine;
    use core::mem::{offset_of, size_of_val};

    /// An idle stream's check and an in-order Write segment read the engine's first line
    /// (the state, `tx_idle`, the configuration, `last_rx`), the Write's delivery order
    /// and the MSNs the second (see [`Engine`]); the service's check for completions
    /// (`retired`, `completed`) reads the first line only.
    #[test]
    fn the_idle_check_and_a_writes_fields_share_the_first_line() {
        let e = Engine::new(super::EngineConfig::new(
            crate::mem::PdId(1),
            crate::mem::StreamId(1),
            4,
            4,
        ));
        let end = |o: usize, len: usize| (o + len - 1) / 64;
        let first = [
            end(offset_of!(Engine, state), size_of_val(&e.state)),
            end(offset_of!(Engine, tx_idle), 1),
            end(offset_of!(Engine, cfg), size_of_val(&e.cfg)),
            end(offset_of!(Engine, last_rx), size_of_val(&e.last_rx)),
            end(offset_of!(Engine, retired), size_of_val(&e.retired)),
            end(offset_of!(Engine, completed), 1),
        ];
        assert_eq!(first, [0; 6]);
        let second = [
            offset_of!(Engine, order) / 64,
            end(offset_of!(Engine, order), size_of_val(&e.order)),
            end(offset_of!(Engine, msn), size_of_val(&e.msn)),
        ];
        assert_eq!(second, [1; 3]);
    }

    /// A finished send-queue entry's completion (`Engine::finish_sq`, `Engine::drain_sq`)
    /// reads its sequence number, status and lengths, and its WR's ID, flags and kind: all
    /// in the entry's first line, the entry aligned to one (the SGL and the checked source
    /// behind them are not read).
    #[test]
    fn a_send_queue_entrys_completion_fields_share_its_first_line() {
        use super::super::state::SqEntry;
        use super::super::wr::SendWr;
        use core::mem::{align_of, size_of};
        let wr = offset_of!(SqEntry, wr);
        let end = |o: usize, len: usize| (o + len - 1) / 64;
        let first = [
            end(offset_of!(SqEntry, seq), 8),
            end(offset_of!(SqEntry, done), 1),
            end(offset_of!(SqEntry, byte_len), 4),
            end(
                offset_of!(SqEntry, atomic_original),
                size_of::<Option<u64>>(),
            ),
            end(wr + offset_of!(SendWr, wr_id), 8),
            end(wr + offset_of!(SendWr, signaled), 1),
            // The operation's kind: its first octets.
            end(wr + offset_of!(SendWr, op), 2),
        ];
        assert_eq!(first, [0; 7]);
        assert_eq!(align_of::<SqEntry>(), 64);
    }
}
