//! RDMA verbs (draft-hilland-rddp-verbs-00, "VERBS-00"): the RNIC resource model, memory
//! registration, work requests and completions, sans-IO.
//!
//! An [`Rnic`] owns every resource: protection domains, CQs, S-RQs, QPs and the
//! [`MemoryModel`] (MRs and MWs over a [`MemoryBackend`]). Verbs are methods on it and
//! return the draft's Immediate status codes ([`VerbError`]); completions carry its
//! [`CompletionStatus`] codes; asynchronous events are queued ([`AsyncEvent`]).
//!
//! The poll core drives the protocol side: [`Rnic::next_send_wr`] / [`Rnic::next_recv_wr`]
//! feed each QP's RDMAP engine, [`Rnic::handle_completion`] takes its completions, the
//! [`MemoryModel`] is the engine's [`crate::mem::MemoryTable`], and [`Rnic::poll_action`]
//! tells the data plane what to do with LLP streams. Applications on other threads reach
//! the poll core through the lock-free rings of [`channel`].

pub mod channel;
mod cq;
mod event;
mod memory;
mod pd;
mod processing;
mod qp;
mod qp_state;
mod registration;
mod rnic;
mod srq;
mod status;
mod wc;
mod wr;

pub use crate::mem::{Access, PdId, STag, Sge, StreamId};
pub use crate::rdmap::{RemoteBuf, SendOp};
pub use cq::{CqAttributes, NotifyType};
pub use event::{AsyncEvent, AsyncEventKind, EventResource};
pub use memory::{
    BindSpec, FastRegSpec, LocalContext, MemoryBackend, MemoryModel, MrAttributes, MrSpec,
    MwAttributes, PageList, StagState, TaggedBase,
};
pub use processing::{PostError, QpAction};
pub use qp::{
    event_for_cause, LlpAttach, LlpEvent, LlpStreamHandle, ModifyQp, QpAttributes, QpInit,
    TerminateOrigin,
};
pub use qp_state::{modify_transition, AllowedAttributes, QpState};
pub use rnic::{AddressingMode, Quota, Rnic, RnicAttributes, RnicDevice};
pub use srq::SrqAttributes;
pub use status::{CompletionStatus, VerbError};
pub use wc::{WcOpcode, WorkCompletion};
pub use wr::{RecvWr, SendWr, SqOp};

/// Identifies the consumer (ULP) on whose behalf resources are created; objects of
/// different ULPs never share CQs (RFC 5040 §8.1.1 item 9) and quotas are per ULP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UlpId(pub u32);

/// Identifies a Completion Event Handler (VERBS-00 §9.4.1); given at Create CQ so the
/// consumer can route a CQ's notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CompletionHandlerId(pub u32);

/// A Completion Queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqHandle(pub u32);

/// A Shared Receive Queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqHandle(pub u32);

/// A Queue Pair's ID, which is also its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpId(pub u32);

impl QpId {
    /// The RDMAP/DDP stream identifier of this QP, as used by the memory table.
    pub fn stream(self) -> StreamId {
        StreamId(self.0)
    }
}
