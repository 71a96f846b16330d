//! RDMAP (RFC 5040, RFC 7306): the sans-IO engine of one stream, work requests,
//! completions and events.
//!
//! One [`Engine`] runs the DDP and RDMAP state of one stream (queue pair). It is driven by
//! the MPA layer and the verbs layer:
//!
//! * receive: every CRC-verified DDP segment (the MPA ULPDU) goes to
//!   [`Engine::handle_ddp_segment`] together with its [`crate::ddp::SegmentPos`], in any
//!   order. Segments are validated and placed at once; messages are delivered, completed
//!   and processed (Read Requests, Atomics, Send with Invalidate, Terminate) strictly in the
//!   sender's order.
//! * transmit: [`Engine::poll_segment`] yields [`DdpSegmentOut`]s no larger than the current
//!   MULPDU, ready for the MPA framer (`parts()` is the gather list).
//! * work: [`Engine::post_send`], [`Engine::post_recv`]; results come out of
//!   [`Engine::poll_completion`] (in the order RFC 5040 §5.5 requires) and
//!   [`Engine::poll_event`].
//! * errors: the first error on the stream queues one Terminate with the cause and header
//!   copies of RFC 5040 §4.8, flushes the queues and stops placement. LLP-detected errors
//!   are reported with [`Engine::abort`] (e.g. `TerminateCause::MPA_CRC_ERROR`), LLP loss
//!   or FIN with [`Engine::handle_llp_closed`].
//!
//! Memory is reached only through a [`crate::mem::MemoryTable`] passed into each call.
//!
//! ```
//! use tcp::Instant;
//! use iwarp::ddp::SegmentPos;
//! use iwarp::mem::{Access, PdId, RegionSpec, Sge, SimpleMemory, StreamId};
//! use iwarp::rdmap::{Engine, EngineConfig, RecvWr, SendOp, SendWr};
//!
//! let rights = Access::LOCAL_READ | Access::LOCAL_WRITE;
//! let (mut mem_a, mut mem_b) = (SimpleMemory::with_heap(4096), SimpleMemory::with_heap(4096));
//! let src = mem_a.register(RegionSpec::new(0, 64, rights, PdId(1))).unwrap();
//! let dst = mem_b.register(RegionSpec::new(0, 64, rights, PdId(1))).unwrap();
//! mem_a.bytes_mut()[..5].copy_from_slice(b"hello");
//!
//! let mut a = Engine::new(EngineConfig::new(PdId(1), StreamId(1), 4, 4));
//! let mut b = Engine::new(EngineConfig::new(PdId(1), StreamId(2), 4, 4));
//! b.post_recv(RecvWr { wr_id: 7, sgl: vec![Sge { stag: dst, to: 0, len: 64 }] }).unwrap();
//! a.post_send(SendWr::new(1, SendOp::Send {
//!     sgl: vec![Sge { stag: src, to: 0, len: 5 }],
//!     solicited: false,
//!     invalidate: None,
//! })).unwrap();
//!
//! let now = Instant::from_millis(1);
//! let mut pos = 0;
//! while let Some(seg) = a.poll_segment(now, 1460, &mem_a) {
//!     b.handle_ddp_segment(now, SegmentPos::index(pos), &seg.to_vec(), &mut mem_b);
//!     pos += 1;
//! }
//! assert_eq!(b.poll_completion().unwrap().byte_len, 5);
//! assert_eq!(&mem_b.bytes()[..5], b"hello");
//! assert_eq!(a.poll_completion().unwrap().wr_id, 1);
//! ```

pub mod completion;
mod engine;
mod rx;
mod state;
mod tx;
pub mod wr;

pub use crate::ddp::untagged::RecvBuffer as RecvWr;
pub use completion::{Completion, CompletionOpcode, CompletionStatus, Event, WorkQueue};
pub use engine::{Engine, EngineConfig, Handled, PostError, StreamState};
pub use tx::FRAME_ROOM;
pub use tx::{CrcSeed, DdpSegmentOut, Digesting};
pub use wr::{CheckedSource, RemoteBuf, SendOp, SendWr};
