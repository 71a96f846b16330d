//! Where the bytes of registered memory live.

/// A contiguous byte arena that registered regions point into. The data plane provides
/// hugepage-backed memory; tests use [`HeapBackend`].
pub trait MemoryBackend {
    /// All bytes of the arena.
    fn bytes(&self) -> &[u8];
    /// All bytes of the arena, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
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

impl MemoryBackend for HeapBackend {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}
