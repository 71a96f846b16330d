//! Ports: where frames enter and leave the data plane.
//!
//! One trait, several backends: DPDK ethdev (feature `dpdk`), an in-process software link
//! pair, a Linux TAP device, and middleware ports (fault injection, capture) that wrap any
//! other port. The poll loop is generic over [`Port`], so each backend is monomorphised and
//! a DPDK port forwards mbufs without copying them.

#[cfg(feature = "dpdk")]
pub mod dpdk;

pub mod any;
mod api;
pub mod capture;
pub mod fault;
pub mod heap;
pub mod open;
pub mod soft_pair;
pub mod tap;

pub use any::{AnyBuf, AnyPort, Backend};
pub use api::{PacketBuf, Port, PortError, PortInfo, PortOffloads, PortStats};
pub use heap::{BufPool, HeapBuf};
