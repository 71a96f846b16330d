//! `dpdk-sys`: raw bindings to DPDK 22.11.
