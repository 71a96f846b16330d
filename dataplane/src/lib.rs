//! The data plane: ports, the poll loop, TCP and iWARP wired together.
//!
//! Unsafe code is denied (workspace lints) except in the two modules that wrap foreign
//! memory: `dpdk` (the DPDK bindings) and `hugemem` (hugepage mappings).

pub mod apps;
pub mod arp;
pub mod classify;
pub mod clock;
pub mod config;
#[cfg(feature = "dpdk")]
#[allow(unsafe_code)]
pub mod dpdk;
pub mod frame;
#[allow(unsafe_code)]
pub mod hugemem;
pub mod icmp;
pub mod lcore;
pub mod ndp;
pub mod neighbour;
pub mod pcap;
pub mod port;
pub mod rdma;
pub mod runtime;
mod settings;
pub mod stats;
pub mod steer;
pub mod tcp_handler;
pub mod telemetry;
#[cfg(test)]
mod test_frames;
pub mod tso;
