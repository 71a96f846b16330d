//! Safe wrappers over DPDK: EAL, mempools, mbufs, ethdev.
