//! Failed DPDK calls: [`DpdkError`], and the errno text DPDK gives for them.

use std::ffi::CStr;

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
    /// The device has fewer queue pairs than asked for.
    #[error("DPDK ethdev {device:?}: {want} queues asked for, it has at most {max}")]
    TooManyQueues {
        /// The device.
        device: String,
        /// Queue pairs asked for.
        want: u16,
        /// Its `max_rx_queues` / `max_tx_queues`, the smaller.
        max: u16,
    },
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
