//! Where the bytes of registered memory live.
//!
//! A backend is a physical address space that the page lists of regions point into. The data
//! plane's own memory is an [`Arena`]: one contiguous range from address 0 (hugepages, or the
//! heap in tests), which its tools carve buffers from. An application library backs the
//! application's own memory instead: its addresses are the application's virtual addresses,
//! and only the ranges the application registered are backed.

use crate::wire::crcsum::CrcSum;

/// A physical address space that placement writes into and reads come from.
pub trait MemoryBackend {
    /// Whether every octet of `[addr, addr + len)` is backed.
    fn contains(&self, addr: u64, len: u64) -> bool;

    /// Copies `data` to `addr`; false (nothing written) when the range is not backed.
    fn write(&mut self, addr: u64, data: &[u8]) -> bool;

    /// Copies the octets at `addr` into `out`; false (nothing read) when not backed.
    fn read(&self, addr: u64, out: &mut [u8]) -> bool;

    /// [`MemoryBackend::read`], the octets read also added to `digest` (an FPDU's CRC32c
    /// and TCP sum, [`crate::wire::crcsum`]): in the copy's pass where the backend lends
    /// its octets as a slice (an [`Arena`]), else in a second pass over `out`.
    fn read_digest(&self, addr: u64, out: &mut [u8], digest: &mut CrcSum) -> bool {
        if !self.read(addr, out) {
            return false;
        }
        digest.extend(out);
        true
    }

    /// Starts backing `[addr, addr + len)` (a backend that holds memory on request: an
    /// application's buffers as it registers them); false when the backend cannot (an
    /// [`Arena`] backs its fixed range only).
    fn back(&mut self, _addr: u64, _len: u64) -> bool {
        false
    }

    /// Stops backing a range [`MemoryBackend::back`] started; false when it was not backed.
    fn unback(&mut self, _addr: u64, _len: u64) -> bool {
        false
    }

    /// The whole address space as one slice, when it is an [`Arena`] (the owner's own CPU
    /// access: filling a buffer, checking what was placed).
    fn arena(&self) -> Option<&[u8]> {
        None
    }

    /// [`MemoryBackend::arena`], writable.
    fn arena_mut(&mut self) -> Option<&mut [u8]> {
        None
    }
}

/// A contiguous byte arena from address 0: every arena is a [`MemoryBackend`].
pub trait Arena {
    /// All bytes of the arena.
    fn bytes(&self) -> &[u8];
    /// All bytes of the arena, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl<A: Arena + ?Sized> MemoryBackend for A {
    fn contains(&self, addr: u64, len: u64) -> bool {
        addr.checked_add(len)
            .is_some_and(|end| end <= self.bytes().len() as u64)
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> bool {
        match usize::try_from(addr)
            .ok()
            .and_then(|a| self.bytes_mut().get_mut(a..a.checked_add(data.len())?))
        {
            Some(dst) => {
                dst.copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> bool {
        match usize::try_from(addr)
            .ok()
            .and_then(|a| self.bytes().get(a..a.checked_add(out.len())?))
        {
            Some(src) => {
                out.copy_from_slice(src);
                true
            }
            None => false,
        }
    }

    fn read_digest(&self, addr: u64, out: &mut [u8], digest: &mut CrcSum) -> bool {
        match usize::try_from(addr)
            .ok()
            .and_then(|a| self.bytes().get(a..a.checked_add(out.len())?))
        {
            Some(src) => {
                digest.extend_copy(src, out);
                true
            }
            None => false,
        }
    }

    fn arena(&self) -> Option<&[u8]> {
        Some(self.bytes())
    }

    fn arena_mut(&mut self) -> Option<&mut [u8]> {
        Some(self.bytes_mut())
    }
}

/// A heap-allocated arena.
#[derive(Debug, Clone, Default)]
pub struct HeapBackend(Vec<u8>);

impl HeapBackend {
    /// A zero-filled arena of `len` octets.
    pub fn new(len: usize) -> Self {
        HeapBackend(vec![0; len])
    }
}

impl Arena for HeapBackend {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arena_backs_exactly_its_range() {
        let mut a = HeapBackend::new(16);
        assert!(a.contains(0, 16) && a.contains(15, 1) && a.contains(16, 0));
        assert!(!a.contains(15, 2) && !a.contains(u64::MAX, 2));
        assert!(a.write(14, b"ab"));
        assert!(!a.write(15, b"ab"), "nothing written past the end");
        let mut out = [0u8; 2];
        assert!(a.read(14, &mut out));
        assert_eq!(&out, b"ab");
        assert!(!a.read(u64::MAX, &mut out));
        assert_eq!(a.arena().map(<[u8]>::len), Some(16));
    }
}
