//! Heap frame buffers for the software backends, recycled through a bounded free list.
//!
//! A [`HeapBuf`] returns its allocation to the [`BufPool`] it came from when dropped, so a
//! port in steady state reuses the same few `Vec`s instead of allocating per frame.

use std::sync::{Arc, Mutex, PoisonError};

use super::api::PacketBuf;

/// A bounded free list of frame allocations, shared by the ports that use it (the ends of
/// a software link, which may run on different threads).
///
/// Last in, first out, as a DPDK mempool's per-lcore cache: the buffer given back last,
/// whose lines are likeliest still in the cache, is the next one taken. A first-in,
/// first-out list cycles through every idle buffer instead: with many frames in flight
/// (1,000 QPs over the in-process link) each frame was then written into lines long
/// evicted, which no DPDK port does.
#[derive(Debug)]
pub struct BufPool {
    free: Mutex<Vec<Vec<u8>>>,
    slots: usize,
    capacity_hint: usize,
}

impl BufPool {
    /// Creates a pool keeping up to `slots` idle buffers, each pre-sized for `frame_len` bytes.
    pub fn new(slots: usize, frame_len: usize) -> Arc<BufPool> {
        let slots = slots.max(1);
        Arc::new(BufPool {
            free: Mutex::new(Vec::with_capacity(slots)),
            slots,
            capacity_hint: frame_len,
        })
    }

    /// The idle buffer given back last, or a new one of at least `len` bytes' capacity.
    fn pop(&self, len: usize) -> Vec<u8> {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.capacity_hint.max(len)))
    }

    /// Takes a buffer of exactly `len` bytes (contents unspecified) from the free list, or
    /// allocates one when the free list is empty. A recycled buffer keeps its last frame's
    /// octets (only those beyond its last length are zeroed), so a frame of the same size
    /// costs no clearing pass.
    pub fn take(self: &Arc<Self>, len: usize) -> HeapBuf {
        let mut data = self.pop(len);
        data.resize(len, 0);
        HeapBuf {
            data,
            pool: Some(Arc::clone(self)),
        }
    }

    /// Takes a buffer holding a copy of `bytes`.
    pub fn take_copy(self: &Arc<Self>, bytes: &[u8]) -> HeapBuf {
        let mut data = self.pop(bytes.len());
        data.clear();
        data.extend_from_slice(bytes);
        HeapBuf {
            data,
            pool: Some(Arc::clone(self)),
        }
    }

    /// Number of idle buffers on the free list.
    pub fn idle(&self) -> usize {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn give_back(&self, data: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        // A full free list means enough buffers are idle already: let this one go.
        if free.len() < self.slots {
            free.push(data);
        }
    }
}

/// A frame in heap memory (software ports). Returns to its pool when dropped.
#[derive(Debug)]
pub struct HeapBuf {
    data: Vec<u8>,
    pool: Option<Arc<BufPool>>,
}

impl HeapBuf {
    /// A buffer that belongs to no pool (freed normally on drop).
    pub fn unpooled(data: Vec<u8>) -> HeapBuf {
        HeapBuf { data, pool: None }
    }

    /// Moves the bytes out, detaching the buffer from its pool.
    pub fn into_vec(mut self) -> Vec<u8> {
        self.pool = None;
        std::mem::take(&mut self.data)
    }

    /// Resizes the frame to `len` bytes, zero-filling any new bytes.
    pub fn resize(&mut self, len: usize) {
        self.data.resize(len, 0);
    }
}

impl AsRef<[u8]> for HeapBuf {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl AsMut<[u8]> for HeapBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

impl PacketBuf for HeapBuf {
    type Spent = HeapBuf;

    fn truncate(&mut self, len: usize) {
        self.data.truncate(len);
    }
}

impl Drop for HeapBuf {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give_back(std::mem::take(&mut self.data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_buffers_return_to_the_pool_and_are_reused() {
        let pool = BufPool::new(4, 2048);
        let a = pool.take(60);
        let ptr = a.as_ref().as_ptr();
        assert_eq!(a.len(), 60);
        drop(a);
        assert_eq!(pool.idle(), 1);
        let b = pool.take(100);
        assert_eq!(b.as_ref().as_ptr(), ptr, "the idle allocation is reused");
        assert_eq!(b.len(), 100);
        assert_eq!(pool.idle(), 0);
    }

    // A recycled buffer is cut or grown to exactly the length asked for; octets past its
    // last length are zeroed, those within it are whatever the last frame left.
    #[test]
    fn recycled_buffers_take_the_length_asked_for() {
        let pool = BufPool::new(1, 2048);
        let mut a = pool.take(100);
        a.as_mut().fill(0xab);
        a.truncate(80);
        drop(a);
        let b = pool.take(60);
        assert_eq!(b.len(), 60);
        assert!(b.as_ref().iter().all(|&o| o == 0xab));
        drop(b);
        let c = pool.take(120);
        assert_eq!(c.len(), 120);
        assert!(c.as_ref()[60..].iter().all(|&o| o == 0));
    }

    #[test]
    fn free_list_is_bounded() {
        let pool = BufPool::new(2, 64);
        let bufs: Vec<_> = (0..5).map(|_| pool.take(10)).collect();
        drop(bufs);
        assert_eq!(pool.idle(), 2);
    }

    // The buffer given back last is taken first (last in, first out), so a steady flow
    // keeps writing into the same few, cached buffers.
    #[test]
    fn the_buffer_given_back_last_is_taken_first() {
        let pool = BufPool::new(8, 2048);
        let bufs: Vec<_> = (0..4).map(|_| pool.take(60)).collect();
        let ptrs: Vec<_> = bufs.iter().map(|b| b.as_ref().as_ptr()).collect();
        drop(bufs);
        assert_eq!(pool.idle(), 4);
        for want in ptrs.iter().rev() {
            let b = pool.take(60);
            assert_eq!(b.as_ref().as_ptr(), *want);
            drop(b.into_vec());
        }
        assert_eq!(pool.idle(), 0);
    }

    #[test]
    fn into_vec_detaches_from_the_pool() {
        let pool = BufPool::new(2, 64);
        let v = pool.take_copy(&[1, 2, 3]).into_vec();
        assert_eq!(v, vec![1, 2, 3]);
        assert_eq!(pool.idle(), 0);
    }
}
