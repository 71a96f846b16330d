//! Work completions and asynchronous events of an RDMAP stream.

use crate::mem::STag;
use crate::wire::atomic::AtomicOp;
use crate::wire::terminate::{TerminateCause, TerminateRepr};

/// Which work queue a completion belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkQueue {
    /// Send queue.
    Send,
    /// Receive queue.
    Recv,
}

/// What completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionOpcode {
    /// Send (any variant).
    Send,
    /// RDMA Write.
    Write,
    /// RDMA Read.
    Read,
    /// Immediate Data.
    Immediate,
    /// Atomic operation.
    Atomic(AtomicOp),
    /// A received Send.
    Recv,
    /// A received Immediate Data message.
    RecvImmediate,
}

/// Completion status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionStatus {
    /// Success.
    Success,
    /// The stream stopped before the work request was processed.
    Flushed,
    /// A local SGE names an invalid STag or lacks rights (VERBS-00 Fig. 36).
    LocalProtection,
    /// RDMA Read / Atomic posted with ORD = 0.
    ZeroReadResources,
    /// The incoming message did not fit the receive buffer (SPEC-DIGEST D13).
    RecvOverflow,
    /// The remote invalidation requested by the incoming Send failed.
    InvalidateFailed,
    /// The operation failed because the stream was terminated by an error.
    Fatal,
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// Consumer's id.
    pub wr_id: u64,
    /// Queue.
    pub queue: WorkQueue,
    /// Operation.
    pub opcode: CompletionOpcode,
    /// Status.
    pub status: CompletionStatus,
    /// Octets transferred (received message length for receives).
    pub byte_len: u32,
    /// Immediate data of a received Immediate Data message.
    pub immediate: Option<[u8; 8]>,
    /// STag invalidated by a received Send with Invalidate.
    pub invalidated: Option<STag>,
    /// The received message asked for a Solicited Event.
    pub solicited: bool,
    /// Original remote value of an atomic operation.
    pub atomic_original: Option<u64>,
}

impl Completion {
    pub(crate) fn new(
        wr_id: u64,
        queue: WorkQueue,
        opcode: CompletionOpcode,
        status: CompletionStatus,
    ) -> Self {
        Completion {
            wr_id,
            queue,
            opcode,
            status,
            byte_len: 0,
            immediate: None,
            invalidated: None,
            solicited: false,
            atomic_original: None,
        }
    }
}

/// Asynchronous events of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A Send with SE / Immediate Data with SE was delivered (RFC 5040 §5.3).
    SolicitedEvent,
    /// The peer sent a Terminate (RFC 5040 §5.4); the stream has stopped.
    TerminateReceived(TerminateRepr),
    /// This side detected an error and sends a Terminate with this cause.
    TerminateSent(TerminateCause),
    /// The stream was closed gracefully and every queue is drained.
    Closed,
    /// The LLP failed (reset or lost); no Terminate can be sent.
    LlpLost,
}
