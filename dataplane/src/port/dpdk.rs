//! The DPDK ethdev port backend.
