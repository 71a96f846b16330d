//! iWARP on the poll core: the [`RdmaHandler`] plugs `tcp::Engine<iwarp::conn::Connection>`
//! and a verbs [`iwarp::verbs::Rnic`] into the poll loop.
//!
//! Receive: port rx burst → classifier → `tcp::Engine::handle_tcp` → the connection's MPA
//! receiver (CRC, markers, FPDUs located even ahead of RCV.NXT) → DDP placement through the
//! RNIC's memory model (hugepage memory when hugetlbfs has room) → RDMAP → CQ. Send: WRs
//! posted on the RNIC's QPs → RDMAP → DDP → MPA FPDU-aligned units → TCP → tx burst.
//!
//! Applications running on the poll core (run to completion: one application step, then
//! [`crate::lcore::PollLoop::poll_once`]; the tools are in [`crate::apps`]) use the RNIC
//! directly through [`RdmaHandler::rnic_mut`]; the connection manager ([`RdmaHandler::listen`],
//! [`RdmaHandler::connect`], [`RdmaHandler::accept`], [`RdmaHandler::reject`],
//! [`RdmaHandler::disconnect`], [`RdmaHandler::abort`], [`RdmaHandler::poll_cm_event`])
//! mirrors what rdma_cm users expect.

mod arena;
mod counters;
mod events;
mod handler;
mod memory;
mod observe;
mod shared;
mod stack;
mod stop;
mod table;

pub use arena::{Arena, ArenaError, Region, REGION_VA_BASE};
pub use counters::{CmCounters, RdmaCounters};
pub use events::{EventCounters, MAX_KEPT_EVENTS, RECENT_EVENTS};
pub use handler::{
    CmError, CmEvent, ConnManager, RdmaConfig, RdmaEngine, RdmaHandler, LISTEN_BACKLOG,
    MAX_CM_EVENTS,
};
pub use memory::{open_rnic, open_shared_rnic, MemoryKind};
pub use observe::OPCODE_NAMES;
pub use shared::{
    lane_registrations, LaneRegistrations, LaneStagIndices, ShareError, SHARE_TIMEOUT,
};
pub use stack::{RdmaStack, StackConfig, StackError};
pub use stop::{Drained, StopCounts};
