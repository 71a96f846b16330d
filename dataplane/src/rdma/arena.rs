//! Carving application buffers out of the RNIC's memory and registering them.

use iwarp::verbs::Sgl;
use iwarp::verbs::{
    Access, MrSpec, PageList, PdId, RecvWr, RemoteBuf, Rnic, STag, SendOp, Sge, TaggedBase,
    VerbError,
};

/// Tagged offset (virtual address) of the start of the RNIC's memory: a region at arena
/// offset `o` has the address `REGION_VA_BASE + o`.
pub const REGION_VA_BASE: u64 = 0x7f00_0000_0000;

/// Page size used for registrations.
const PAGE: usize = 4096;

/// A bump allocator over the RNIC's memory (page-aligned buffers, never freed: the
/// applications allocate their buffers once at start-up).
#[derive(Debug, Clone)]
pub struct Arena {
    next: usize,
    len: usize,
}

/// A registered buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Offset in the RNIC's memory.
    pub offset: usize,
    /// Length in octets.
    pub len: usize,
    /// The memory region's STag (lkey and rkey).
    pub stag: STag,
}

impl Region {
    /// The tagged address of octet `off` of the buffer.
    pub fn addr(&self, off: usize) -> u64 {
        REGION_VA_BASE + (self.offset + off) as u64
    }

    /// A gather/scatter element over `len` octets from `off`.
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            stag: self.stag,
            to: self.addr(off),
            len: len as u32,
        }
    }

    /// The buffer from `off` as the target or source of a peer's RDMA Write or Read.
    pub fn remote(&self, off: usize) -> RemoteBuf {
        RemoteBuf {
            stag: self.stag,
            to: self.addr(off),
        }
    }

    /// A Send of `len` octets from `off` (not solicited, invalidating nothing).
    pub fn send(&self, off: usize, len: usize) -> SendOp {
        SendOp::Send {
            sgl: Sgl::one(self.sge(off, len)),
            solicited: false,
            invalidate: None,
        }
    }

    /// Receive WR `wr_id` into `len` octets from `off`.
    pub fn recv_wr(&self, wr_id: u64, off: usize, len: usize) -> RecvWr {
        RecvWr {
            wr_id,
            sgl: vec![self.sge(off, len)],
        }
    }

    /// The buffer's bytes in `rnic`'s memory.
    pub fn bytes<'a>(&self, rnic: &'a Rnic) -> &'a [u8] {
        &rnic.memory().bytes()[self.offset..self.offset + self.len]
    }

    /// The buffer's bytes in `rnic`'s memory, writable.
    pub fn bytes_mut<'a>(&self, rnic: &'a mut Rnic) -> &'a mut [u8] {
        &mut rnic.memory_mut().bytes_mut()[self.offset..self.offset + self.len]
    }
}

/// Why a buffer could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArenaError {
    /// The RNIC's memory is used up.
    #[error("registered memory exhausted: {want} octets wanted, {left} left")]
    Exhausted {
        /// Octets asked for.
        want: usize,
        /// Octets left.
        left: usize,
    },
    /// The registration failed.
    #[error("memory registration: {0}")]
    Register(VerbError),
}

impl Arena {
    /// An allocator over `len` octets.
    pub fn new(len: usize) -> Arena {
        Arena { next: 0, len }
    }

    /// Octets not handed out yet.
    pub fn left(&self) -> usize {
        self.len - self.next
    }

    /// Allocates `len` octets (at least one page) and registers them in `pd` with `access`.
    pub fn register(
        &mut self,
        rnic: &mut Rnic,
        pd: PdId,
        len: usize,
        access: Access,
    ) -> Result<Region, ArenaError> {
        let size = len.max(1).div_ceil(PAGE) * PAGE;
        if size > self.left() {
            return Err(ArenaError::Exhausted {
                want: size,
                left: self.left(),
            });
        }
        let offset = self.next;
        let remote = access.any_remote();
        let stag = rnic
            .register_mr(&MrSpec {
                pbl: PageList::contiguous(offset as u64, size as u64, PAGE as u64),
                base: TaggedBase::Va(REGION_VA_BASE + offset as u64),
                pd,
                key: (offset / PAGE) as u8,
                remote_access: remote,
                access,
            })
            .map_err(ArenaError::Register)?;
        self.next += size;
        Ok(Region { offset, len, stag })
    }
}
