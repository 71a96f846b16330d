//! Safe wrappers over DPDK: EAL, mempools, mbufs, ethdev.
//!
//! Ownership model: [`Eal`] is the process-wide environment; every [`Mempool`] and ethdev
//! keeps the EAL alive, so `rte_eal_cleanup` runs only after the last of them is gone. A
//! [`Mbuf`] owns one `rte_mbuf` and frees it on drop; a mempool that still has mbufs out
//! when dropped is leaked (with a warning) rather than freed under them.

pub mod eal;
pub mod ethdev;
pub mod mbuf;
pub mod mempool;

use std::ffi::CStr;

pub use eal::{Eal, EalError};
pub use ethdev::{available_devices, EthDev, EthDevSetup};
pub use mbuf::{Mbuf, MbufError};
pub use mempool::Mempool;

/// A failed DPDK call.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    /// A DPDK function returned an error.
    #[error("{op}: {reason} (errno {code})")]
    Call {
        /// The DPDK function (and its subject) that failed.
        op: String,
        /// DPDK's `rte_strerror` text.
        reason: String,
        /// The positive errno value.
        code: i32,
    },
    /// No EAL is running in this process.
    #[error("{op}: the DPDK EAL is not initialised (call Eal::init first)")]
    NoEal {
        /// What needed the EAL.
        op: String,
    },
    /// No ethdev has this name.
    #[error("no DPDK ethdev named {device:?} (probed: {probed}); add it with --vdev or check the PCI address")]
    NoDevice {
        /// The name looked up.
        device: String,
        /// Names of the ethdevs that exist.
        probed: String,
    },
    /// The ethdev is already opened by another port in this process.
    #[error("DPDK ethdev {0:?} is already opened in this process")]
    InUse(String),
    /// A name passed to DPDK was not valid (interior NUL byte).
    #[error("invalid name {0:?}: contains a NUL byte")]
    InvalidName(String),
}

impl DpdkError {
    /// Error for DPDK call `op` that failed with errno `code` (sign ignored).
    pub fn call(op: impl Into<String>, code: i32) -> DpdkError {
        let code = code.abs();
        DpdkError::Call {
            op: op.into(),
            reason: strerror(code),
            code,
        }
    }

    /// Error for DPDK call `op` that reported failure through `rte_errno`.
    pub fn from_rte_errno(op: impl Into<String>) -> DpdkError {
        DpdkError::call(op, rte_errno())
    }
}

/// The calling thread's `rte_errno`.
pub fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local int; no preconditions.
    unsafe { dpdk_sys::dpdk_shim_errno() }
}

/// DPDK's text for errno value `code` (covers both libc and DPDK-specific codes).
pub fn strerror(code: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a NUL-terminated string (static or in a
    // thread-local buffer) that stays valid until the next call on this thread; we copy it
    // out immediately.
    unsafe {
        let p = dpdk_sys::rte_strerror(code);
        if p.is_null() {
            return format!("error {code}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The TSC frequency EAL measured (0 before EAL init).
pub fn tsc_hz() -> u64 {
    // SAFETY: reads a global set by EAL init; returns 0 if not yet set.
    unsafe { dpdk_sys::rte_get_tsc_hz() }
}

/// The CPU's time-stamp counter.
pub fn rdtsc() -> u64 {
    // SAFETY: executes rdtsc; no memory access.
    unsafe { dpdk_sys::dpdk_shim_rdtsc() }
}

/// The calling thread's EAL lcore id, or `None` on a thread EAL does not manage.
pub fn lcore_id() -> Option<u32> {
    // SAFETY: reads a thread-local; valid on any thread.
    let id = unsafe { dpdk_sys::dpdk_shim_lcore_id() };
    (id != dpdk_sys::LCORE_ID_ANY).then_some(id)
}
