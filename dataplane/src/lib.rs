//! The data plane: ports, the poll loop, TCP and iWARP wired together.

pub mod arp;
pub mod classify;
pub mod config;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod hugemem;
pub mod icmp;
pub mod lcore;
pub mod pcap;
pub mod port;
pub mod rdma;
mod settings;
pub mod stats;
#[cfg(test)]
mod test_frames;
