//! A memory table shared by the connections of one poll loop.

use std::cell::RefCell;
use std::rc::Rc;

use crate::mem::{Access, AccessError, MemoryTable, PdId, Resolved, STag, StreamId};
use crate::verbs::Rnic;

/// A shared handle to a memory table (or to an [`Rnic`], whose memory model is the table):
/// every [`super::Connection`] of one poll loop holds a clone and reaches the same regions.
///
/// The poll loop is single-threaded; the handle must not be borrowed elsewhere while a
/// connection runs (the table is borrowed only for the duration of one access).
#[derive(Debug, Default)]
pub struct Shared<T>(pub Rc<RefCell<T>>);

impl<T> Shared<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Self {
        Shared(Rc::new(RefCell::new(inner)))
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(Rc::clone(&self.0))
    }
}

/// Something that holds a memory table.
pub trait HasMemoryTable {
    /// The table, for reads.
    fn table(&self) -> &dyn MemoryTable;
    /// The table, for writes.
    fn table_mut(&mut self) -> &mut dyn MemoryTable;
}

impl<T: MemoryTable> HasMemoryTable for T {
    fn table(&self) -> &dyn MemoryTable {
        self
    }
    fn table_mut(&mut self) -> &mut dyn MemoryTable {
        self
    }
}

impl HasMemoryTable for Rnic {
    fn table(&self) -> &dyn MemoryTable {
        self.memory()
    }
    fn table_mut(&mut self) -> &mut dyn MemoryTable {
        self.memory_mut()
    }
}

impl<T: HasMemoryTable> MemoryTable for Shared<T> {
    fn resolve(
        &self,
        stag: STag,
        pd: PdId,
        stream: StreamId,
        to: u64,
        len: u64,
        need: Access,
    ) -> Result<Resolved, AccessError> {
        self.0
            .borrow()
            .table()
            .resolve(stag, pd, stream, to, len, need)
    }

    fn write(&mut self, r: &Resolved, off: u64, data: &[u8]) -> Result<(), AccessError> {
        self.0.borrow_mut().table_mut().write(r, off, data)
    }

    fn read(&self, r: &Resolved, off: u64, out: &mut [u8]) -> Result<(), AccessError> {
        self.0.borrow().table().read(r, off, out)
    }

    fn atomic(&mut self, r: &Resolved, f: &mut dyn FnMut(u64) -> u64) -> Result<u64, AccessError> {
        self.0.borrow_mut().table_mut().atomic(r, f)
    }

    fn invalidate(&mut self, stag: STag, pd: PdId, stream: StreamId) -> Result<(), AccessError> {
        self.0.borrow_mut().table_mut().invalidate(stag, pd, stream)
    }
}
