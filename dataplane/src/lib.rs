//! The data plane: ports, the poll loop, TCP and iWARP wired together.

pub mod apps;
pub mod arp;
pub mod classify;
pub mod clock;
pub mod config;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod hugemem;
pub mod icmp;
pub mod lcore;
pub mod pcap;
pub mod port;
pub mod rdma;
pub mod stats;
pub mod tcp_handler;
#[cfg(test)]
mod test_frames;
