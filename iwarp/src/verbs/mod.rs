//! RDMA verbs (draft-hilland-rddp-verbs-00, "VERBS-00"): the RNIC resource model, memory
//! registration, work requests and completions, sans-IO.
//!
//! An [`Rnic`] owns every resource: protection domains, CQs, S-RQs, QPs and the
//! [`MemoryModel`] (MRs and MWs over a [`MemoryBackend`]). Verbs are methods on it and
//! return the draft's Immediate status codes ([`VerbError`]); completions carry its
//! [`CompletionStatus`] codes; asynchronous events are queued ([`AsyncEvent`]).
//!
//! The poll core drives the protocol side: [`Rnic::next_send_wr`] / [`Rnic::next_rq_wr`]
//! feed each QP's RDMAP engine (a QP on an S-RQ takes a WQE through the RNIC's
//! [`crate::ddp::untagged::RecvSupply`] when a message arrives), [`Rnic::handle_completion`]
//! takes its completions, the [`MemoryModel`] is the engine's [`crate::mem::MemoryTable`], and [`Rnic::poll_action`]
//! tells the data plane what to do with LLP streams. Applications on other threads reach
//! the poll core through the lock-free rings of [`channel`].
//!
//! ```
//! use iwarp::mem::HeapBackend;
//! use iwarp::verbs::*;
//!
//! let device = RnicDevice::new("rnic0", RnicAttributes::default());
//! let mut rnic = device
//!     .open(AddressingMode::Page, Box::new(HeapBackend::new(1 << 16)), 42)
//!     .unwrap();
//! let ulp = UlpId(1);
//! let pd = rnic.alloc_pd(ulp).unwrap();
//! let (cq, _) = rnic.create_cq(ulp, 16).unwrap();
//! let (qp, _) = rnic.create_qp(QpInit::new(pd, cq, cq)).unwrap();
//! let access = Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE;
//! let mr = rnic
//!     .register_mr(&MrSpec {
//!         pbl: PageList::contiguous(0, 4096, 4096),
//!         base: TaggedBase::Va(0x1000),
//!         pd,
//!         key: 7,
//!         remote_access: true,
//!         access,
//!     })
//!     .unwrap();
//! assert_eq!(mr.key(), 7);
//! rnic.post_rq(qp, vec![RecvWr { wr_id: 1, sgl: vec![Sge { stag: mr, to: 0x1000, len: 64 }] }])
//!     .unwrap();
//! // Abortive teardown flushes the posted receive.
//! rnic.modify_qp(qp, ModifyQp::to(QpState::Error)).unwrap();
//! let wc = rnic.poll_cq(cq).unwrap();
//! assert_eq!((wc.wr_id, wc.status), (1, CompletionStatus::Flushed));
//! assert_eq!(rnic.poll_cq(cq), Err(VerbError::CqEmpty));
//! ```

pub mod channel;
mod cq;
mod event;
mod event_queue;
mod handle;
mod memory;
mod pd;
mod processing;
mod qp;
mod qp_state;
mod queues;
mod registration;
mod rnic;
mod srq;
mod status;
mod wc;
mod wr;

pub use crate::mem::{Access, PdId, STag, Sge, Sgl, StreamId};
pub use crate::rdmap::{RemoteBuf, SendOp};
pub use cq::CqAttributes;
pub use event::{AsyncEvent, AsyncEventKind, EventResource};
pub use event_queue::{EventQueueStats, QueueStats};
pub use handle::{CompletionHandlerId, CqHandle, QpId, SrqHandle, UlpId};
pub use memory::{
    BindSpec, FastRegSpec, LocalContext, MemoryBackend, MemoryModel, MrAttributes, MrSpec,
    MwAttributes, PageList, StagInfo, StagState, TaggedBase, LANE_STAG_BIT,
};
pub use processing::PostError;
pub use qp::{event_for_cause, LlpAttach, LlpEvent, ModifyQp, QpAttributes};
pub use qp_state::{modify_transition, AllowedAttributes, QpState};
pub use queues::{LlpStreamHandle, NotifyType, QpInit, TerminateOrigin};
pub use rnic::{AddressingMode, QpAction, Quota, Rnic, RnicAttributes, RnicDevice};
pub use srq::SrqAttributes;
pub use status::{CompletionStatus, VerbError};
pub use wc::{WcOpcode, WorkCompletion};
pub use wr::{RecvWr, SendWr, SqOp};
