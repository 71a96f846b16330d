//! Safe wrappers over DPDK: EAL (and its worker lcores), mempools, mbufs, ethdev, telemetry.
//!
//! Ownership model: [`Eal`] is the process-wide environment; every [`Mempool`] and ethdev
//! keeps the EAL alive, so `rte_eal_cleanup` runs only after the last of them is gone. A
//! [`Mbuf`] owns one `rte_mbuf` and frees it on drop; a mempool that still has mbufs out
//! when dropped is leaked (with a warning) rather than freed under them.

pub mod eal;
mod error;
pub mod ethdev;
mod intr;
pub mod mbuf;
pub mod mempool;
pub mod offload;
pub mod telemetry;
pub mod workers;

pub use eal::{Eal, EalError};
pub use error::{rte_errno, strerror, DpdkError};
pub use ethdev::{available_devices, EthDev, EthDevDescription, EthDevSetup, EthStats};
pub use mbuf::{Mbuf, MbufError};
pub use mempool::Mempool;
pub use offload::Offloads;
pub use workers::{LcoreRole, WorkerError, WorkerJob};

/// The TSC frequency EAL measured (0 before EAL init).
pub fn tsc_hz() -> u64 {
    // SAFETY: reads a global set by EAL init; returns 0 if not yet set.
    unsafe { dpdk_sys::rte_get_tsc_hz() }
}

/// The CPU's time-stamp counter (`rte_rdtsc`; inline on x86-64).
#[inline]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: executes rdtsc, which every x86-64 CPU has; no memory access.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: executes the CPU's cycle counter read; no memory access.
    unsafe {
        dpdk_sys::dpdk_shim_rdtsc()
    }
}

/// The calling thread's EAL lcore id, or `None` on a thread EAL does not manage.
pub fn lcore_id() -> Option<u32> {
    // SAFETY: reads a thread-local; valid on any thread.
    let id = unsafe { dpdk_sys::dpdk_shim_lcore_id() };
    (id != dpdk_sys::LCORE_ID_ANY).then_some(id)
}
