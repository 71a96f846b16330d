//! The data plane: ports, the poll loop, TCP and iWARP wired together.

#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod port;
