//! Building an iWARP stack on a port: the RNIC over registered memory, the TCP engine and
//! the connection manager in an [`RdmaHandler`], on a poll loop that drives the port.
//! The RDMA tools, the tests and the application libraries all build their stacks here.

use std::net::IpAddr;
use std::time::Duration;

use iwarp::mpa::MpaConfig;
use iwarp::verbs::{Rnic, VerbError};

use super::handler::{RdmaConfig, RdmaHandler};
use super::memory::{open_rnic, MemoryKind};
use crate::lcore::{PollLoop, PortAddr};
use crate::port::Port;

/// Everything an iWARP stack on one port is built from.
#[derive(Debug, Clone)]
pub struct StackConfig {
    /// MPA policy, TCP settings, receive window.
    pub rdma: RdmaConfig,
    /// Octets of registered memory the RNIC's arena holds.
    pub memory: usize,
    /// Registered memory in hugepages when hugetlbfs has room (else the heap).
    pub hugepages: bool,
    /// Seed of the RNIC's sparse STag allocator.
    pub stag_seed: u64,
    /// Most packets sent per poll-loop iteration ([`RdmaHandler::set_tx_per_poll`]).
    pub tx_per_poll: usize,
    /// How long an initiator holds its first FPDU ([`RdmaHandler::set_first_fpdu_delay`]).
    pub first_fpdu_delay: Duration,
    /// Frames per receive burst.
    pub burst: usize,
}

impl StackConfig {
    /// A stack with `mpa` over `tcp`, 64 MiB of heap memory, defaults elsewhere.
    pub fn new(mpa: MpaConfig, tcp: tcp::Config) -> StackConfig {
        StackConfig {
            rdma: RdmaConfig {
                mpa,
                tcp,
                rx_window: 4 << 20,
            },
            memory: 64 << 20,
            hugepages: false,
            stag_seed: 1,
            tx_per_poll: crate::tcp_handler::TX_PER_POLL,
            first_fpdu_delay: Duration::ZERO,
            burst: 32,
        }
    }
}

/// An iWARP stack on one port: its poll loop (with the [`RdmaHandler`]), its addresses and
/// where its registered memory lives.
pub struct RdmaStack<P: Port> {
    /// The poll loop over the port.
    pub poll: PollLoop<P, RdmaHandler>,
    /// The port's main address: its IPv4 address, else its IPv6 one.
    pub ip: IpAddr,
    /// The port's addressing (both families, VLAN).
    pub addr: PortAddr,
    /// Where registered memory lives.
    pub memory: MemoryKind,
}

impl<P: Port> RdmaStack<P> {
    /// Builds the stack of `cfg` on `port`, whose address is `addr` (it must have an IPv4 or
    /// an IPv6 address: iWARP runs over TCP).
    pub fn new(port: P, addr: PortAddr, cfg: StackConfig) -> Result<RdmaStack<P>, StackError> {
        let (rnic, memory) = open_rnic(cfg.memory, cfg.hugepages, cfg.stag_seed)?;
        Self::with_rnic(port, addr, cfg, rnic, memory)
    }

    /// Builds the stack of `cfg` on `port` over an RNIC the caller opened (its own memory
    /// backend: an application's memory, say); `cfg.memory`, `hugepages` and `stag_seed`
    /// are not used. The TCP engine leaves out the checksums the port's device fills.
    pub fn with_rnic(
        port: P,
        addr: PortAddr,
        cfg: StackConfig,
        rnic: Rnic,
        memory: MemoryKind,
    ) -> Result<RdmaStack<P>, StackError> {
        let ip = addr.primary().ok_or(StackError::NoAddress)?;
        let mut rdma = cfg.rdma;
        // The device fills the checksums of the TCP frames the port sends.
        rdma.tcp.fill_checksums &= !port.offloads().tx_checksum;
        // All connections together keep in flight what one may (the receive window a peer
        // of ours offers), unless the caller chose a bound: with many QPs the copied
        // payload in flight stays cache-sized and a burst of initial windows cannot flood
        // the port (issue #17).
        rdma.tcp.max_flight.get_or_insert(rdma.rx_window);
        let mut handler = RdmaHandler::with_rnic(rdma, rnic);
        handler.set_tx_per_poll(cfg.tx_per_poll);
        handler.set_first_fpdu_delay(cfg.first_fpdu_delay);
        let mut poll = PollLoop::new(handler, cfg.burst);
        poll.add_port(port, addr);
        Ok(RdmaStack {
            poll,
            ip,
            addr,
            memory,
        })
    }
}

/// Why a stack could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The port has no IP address.
    #[error("the port has no ipv4 or ipv6 address")]
    NoAddress,
    /// The RNIC did not open.
    #[error("RNIC: {0}")]
    Rnic(#[from] VerbError),
}
