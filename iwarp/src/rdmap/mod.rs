//! RDMAP (RFC 5040, RFC 7306): the sans-IO engine of one stream, work requests,
//! completions and events.

pub mod completion;
mod engine;
mod rx;
mod tx;
pub mod wr;

pub use crate::ddp::untagged::RecvBuffer as RecvWr;
pub use completion::{Completion, CompletionOpcode, CompletionStatus, Event, WorkQueue};
pub use engine::{Engine, EngineConfig, Handled, PostError, StreamState};
pub use tx::DdpSegmentOut;
pub use wr::{RemoteBuf, SendOp, SendWr};
