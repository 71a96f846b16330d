//! Registered memory: STags, access rights, the lookup interface the protocol core uses for
//! every tagged access, and a simple heap-backed table for tests and fuzzing.

mod backend;
mod pool;
mod sgl;
mod simple;
mod stag;
mod table;

pub use backend::{Arena, HeapBackend, MemoryBackend};
pub use pool::{BufferPool, PoolStats, DEFAULT_POOL_BYTES};
pub use sgl::Sgl;
pub use simple::{RegionSpec, SimpleMemory};
pub use stag::{Access, PdId, STag, Sge, StreamId};
pub use table::{AccessError, HasMemoryTable, MemoryTable, ReadGrant, Resolved};
