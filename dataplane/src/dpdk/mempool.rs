//! Packet-buffer pools (`rte_pktmbuf_pool_create`).

use std::ffi::CString;
use std::ptr::NonNull;

use super::eal::EalHandle;
use super::error::DpdkError;

/// A pool of packet mbufs. Freed on drop once every mbuf is back; a pool dropped while
/// mbufs are still out is leaked (logged) so those mbufs stay valid.
pub struct Mempool {
    raw: NonNull<dpdk_sys::rte_mempool>,
    name: String,
    eal: EalHandle,
}

// SAFETY: a pktmbuf pool uses the default multi-producer/multi-consumer ring ops, so it may
// be used and freed from any thread; the pointer is not tied to the creating thread.
unsafe impl Send for Mempool {}
// SAFETY: all operations through `&Mempool` (alloc, counts) are thread-safe in DPDK.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Bytes of buffer per mbuf DPDK uses by default: 2048 data + the headroom.
    pub const DEFAULT_DATA_ROOM: u16 = dpdk_sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16;

    /// Creates a pktmbuf pool of `n` mbufs with a per-lcore cache of `cache` mbufs, each
    /// with `data_room` bytes of buffer (headroom included, see [`Self::headroom`]), on NUMA
    /// `socket` (`-1` for any). Needs a running [`super::Eal`].
    pub fn new(
        name: &str,
        n: u32,
        cache: u32,
        data_room: u16,
        socket: i32,
    ) -> Result<Mempool, DpdkError> {
        let op = || {
            format!("rte_pktmbuf_pool_create({name}, n={n}, cache={cache}, data_room={data_room})")
        };
        let eal = EalHandle::current().ok_or_else(|| DpdkError::NoEal { op: op() })?;
        let c_name = CString::new(name).map_err(|_| DpdkError::InvalidName(name.to_string()))?;
        // SAFETY: EAL is running (we hold a handle); c_name is a valid NUL-terminated string
        // that DPDK copies.
        let raw = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(c_name.as_ptr(), n, cache, 0, data_room, socket)
        };
        let raw = NonNull::new(raw).ok_or_else(|| DpdkError::from_rte_errno(op()))?;
        Ok(Mempool {
            raw,
            name: name.to_string(),
            eal,
        })
    }

    /// Headroom reserved in front of each mbuf's data (`RTE_PKTMBUF_HEADROOM`).
    pub fn headroom() -> u16 {
        // SAFETY: returns a compile-time constant.
        unsafe { dpdk_sys::dpdk_shim_pktmbuf_headroom_default() }
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of mbufs in the pool.
    pub fn size(&self) -> u32 {
        // SAFETY: self.raw is a live mempool.
        unsafe { dpdk_sys::dpdk_shim_mempool_size(self.raw.as_ptr()) }
    }

    /// Mbufs currently free (in the pool or in per-lcore caches).
    pub fn available(&self) -> u32 {
        // SAFETY: self.raw is a live mempool.
        unsafe { dpdk_sys::dpdk_shim_mempool_avail_count(self.raw.as_ptr()) }
    }

    /// Mbufs currently allocated.
    pub fn in_use(&self) -> u32 {
        self.size().saturating_sub(self.available())
    }

    /// The raw pool, for DPDK calls (queue setup, bulk allocation).
    pub fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.raw.as_ptr()
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        let in_use = self.in_use();
        if in_use != 0 {
            log::warn!(
                "mempool {}: {in_use} mbufs still in use at drop; leaking the pool (and EAL) to keep them valid",
                self.name
            );
            // Keeps EAL from being cleaned up under the leaked pool.
            std::mem::forget(self.eal.clone());
            return;
        }
        // SAFETY: every mbuf is back in the pool, so nothing refers to its memory any more;
        // EAL is alive (self.eal).
        unsafe { dpdk_sys::rte_mempool_free(self.raw.as_ptr()) };
    }
}
