//! `dpdk-sys`: raw bindings to the system's DPDK 22.11.
//!
//! Generated at build time by bindgen over `wrapper.h` (allowlisted EAL, ethdev, mempool,
//! mbuf, lcore, memzone, malloc, alarm and telemetry APIs), plus `dpdk_shim_*` functions
//! from `shim.c` that give DPDK's static-inline fast path (`rte_eth_rx_burst`,
//! `rte_pktmbuf_alloc`, ...), macros (`rte_pktmbuf_mtod`) and thread-locals (`rte_errno`) a
//! linkable symbol.
//!
//! Everything here is `unsafe` C API; the safe layer lives in the `dataplane` crate.

#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
// Bindgen output is unsafe C API by nature: the workspace's unsafe lints do not apply here.
#![allow(
    unsafe_code,
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks
)]
#![allow(clippy::all)]
#![allow(rustdoc::all)]
#![allow(missing_docs)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
