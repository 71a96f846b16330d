//! The memory-lookup interface the protocol core calls for every tagged access.

use thiserror::Error;

use super::pool::BufferPool;
use super::stag::{Access, PdId, STag, StreamId};
use crate::wire::crcsum::CrcSum;
use crate::wire::terminate::TerminateCause;

/// Why an access through an STag was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AccessError {
    /// No region or window with this index and key exists.
    #[error("invalid STag")]
    InvalidStag,
    /// The STag exists but is in the Invalid state.
    #[error("STag invalidated")]
    Invalidated,
    /// The range lies (partly) outside the registered range.
    #[error("base or bounds violation")]
    BaseBounds,
    /// The STag does not grant the needed rights.
    #[error("access rights violation")]
    AccessRights,
    /// The STag belongs to another protection domain.
    #[error("protection domain mismatch")]
    PdMismatch,
    /// The STag (window) is bound to another stream.
    #[error("STag not associated with this stream")]
    NotAssociated,
    /// TO + length wraps 2^64.
    #[error("tagged offset wrap")]
    ToWrap,
    /// The STag cannot be invalidated remotely (shared, windows bound, ...).
    #[error("STag cannot be invalidated")]
    CannotInvalidate,
}

impl AccessError {
    /// Terminate cause when detected by DDP tagged placement (RFC 5041 §7.2, D10).
    pub fn ddp_cause(self) -> TerminateCause {
        match self {
            AccessError::InvalidStag
            | AccessError::Invalidated
            | AccessError::AccessRights
            | AccessError::CannotInvalidate => TerminateCause::DDP_INVALID_STAG,
            AccessError::BaseBounds => TerminateCause::DDP_BASE_BOUNDS,
            AccessError::PdMismatch | AccessError::NotAssociated => {
                TerminateCause::DDP_STAG_NOT_ASSOCIATED
            }
            AccessError::ToWrap => TerminateCause::DDP_TO_WRAP,
        }
    }

    /// Terminate cause when detected by RDMAP (Read Request / Atomic source;
    /// RFC 5040 §7.2, SPEC-DIGEST §2.9).
    pub fn rdmap_cause(self) -> TerminateCause {
        match self {
            AccessError::InvalidStag | AccessError::Invalidated => {
                TerminateCause::RDMAP_INVALID_STAG
            }
            AccessError::BaseBounds => TerminateCause::RDMAP_BASE_BOUNDS,
            AccessError::AccessRights => TerminateCause::RDMAP_ACCESS_RIGHTS,
            AccessError::PdMismatch | AccessError::NotAssociated => {
                TerminateCause::RDMAP_STAG_NOT_ASSOCIATED
            }
            AccessError::ToWrap => TerminateCause::RDMAP_TO_WRAP,
            AccessError::CannotInvalidate => TerminateCause::RDMAP_PROT_CANNOT_INVALIDATE,
        }
    }

    /// Terminate cause for a failed remote invalidation (RFC 5040 §5.3; SPEC-DIGEST D6).
    pub fn invalidate_cause(self) -> TerminateCause {
        match self {
            AccessError::InvalidStag => TerminateCause::RDMAP_INVALID_STAG,
            AccessError::AccessRights => TerminateCause::RDMAP_ACCESS_RIGHTS,
            _ => TerminateCause::RDMAP_PROT_CANNOT_INVALIDATE,
        }
    }
}

/// A validated access: the table's handle for `len` octets starting at the requested TO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    /// The STag that was resolved.
    pub stag: STag,
    /// Table-private region handle.
    pub region: u32,
    /// Offset of the first octet in the table's backing memory.
    pub offset: u64,
    /// Number of octets covered.
    pub len: u64,
    /// Translated (host) address of the first octet, for alignment checks.
    pub addr: u64,
}

/// What the first read of a resolved range found, held for the next reads of the same range
/// (the segments of one outgoing message): while the table is unchanged (no STag
/// registered, invalidated, deallocated or re-keyed, no stream's rights changed), a read
/// needs only its range compared against the resolved length (RFC 5041 §7.2's checks on
/// the local source made once, when the message started). Opaque to its holder; a fresh
/// (default) grant holds nothing, and one grant belongs to one [`Resolved`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadGrant {
    /// The table's generation at the check, and the backend address of the range's first
    /// octet when the range is one backend range (`None`: it is not, reads take the
    /// checked path).
    held: Option<(u64, Option<u64>)>,
}

impl ReadGrant {
    /// A grant of a table at `generation` for a range that starts at backend address
    /// `start` when it is one backend range.
    pub fn new(generation: u64, start: Option<u64>) -> Self {
        ReadGrant {
            held: Some((generation, start)),
        }
    }

    /// Whether the grant holds a check (of some generation).
    #[inline]
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// What the grant holds for a table now at `generation`: `Some(start)` for one backend
    /// range, `Some(None)` for a range checked as not one backend range, `None` when the
    /// table changed since (or nothing is held).
    #[inline]
    pub fn held(&self, generation: u64) -> Option<Option<u64>> {
        self.held
            .filter(|&(g, _)| g == generation)
            .map(|(_, start)| start)
    }
}

/// Memory lookup and access, implemented by the verbs layer (full resource model) and by
/// [`super::SimpleMemory`].
pub trait MemoryTable {
    /// A number that grows with every change of the table that can change a check's
    /// outcome (an STag registered, invalidated, deallocated or re-keyed, a stream's
    /// rights changed): a check made at the same generation still holds. `None` (the
    /// default): not tracked, every access is checked.
    fn table_generation(&self) -> Option<u64> {
        None
    }

    /// Validates an access of `len` octets at `to` through `stag` on a stream of `pd`,
    /// needing rights `need`. Check order: STag, state, association, rights, wrap, bounds.
    fn resolve(
        &self,
        stag: STag,
        pd: PdId,
        stream: StreamId,
        to: u64,
        len: u64,
        need: Access,
    ) -> Result<Resolved, AccessError>;

    /// Writes `data` at octet `off` of a resolved range (`off + data.len() <= r.len`).
    fn write(&mut self, r: &Resolved, off: u64, data: &[u8]) -> Result<(), AccessError>;

    /// Validates an access of `data.len()` octets at `to` as [`MemoryTable::resolve`] does
    /// and writes `data` there (tagged placement, once per segment); nothing is written
    /// when the access is refused.
    fn place(
        &mut self,
        stag: STag,
        pd: PdId,
        stream: StreamId,
        to: u64,
        data: &[u8],
        need: Access,
    ) -> Result<(), AccessError> {
        let r = self.resolve(stag, pd, stream, to, data.len() as u64, need)?;
        self.write(&r, 0, data)
    }

    /// Reads `out.len()` octets at octet `off` of a resolved range.
    fn read(&self, r: &Resolved, off: u64, out: &mut [u8]) -> Result<(), AccessError>;

    /// [`MemoryTable::read`] for the consecutive reads of one resolved range (a message's
    /// segments): `grant` (a default one before the first read of `r`, then the same one
    /// for every later read of `r`) keeps what the first read's check found, so that the
    /// next reads skip the STag lookup while the table is unchanged; a change since sends
    /// the read through [`MemoryTable::read`]'s checks again, so an STag invalidated or
    /// deregistered mid-message fails the next read. By default every read is checked.
    #[inline]
    fn read_granted(
        &self,
        r: &Resolved,
        grant: &mut ReadGrant,
        off: u64,
        out: &mut [u8],
    ) -> Result<(), AccessError> {
        let _ = grant;
        self.read(r, off, out)
    }

    /// [`MemoryTable::read_granted`], the octets read also added to `digest` (an FPDU's
    /// CRC32c and TCP sum): by default in a second pass over `out`.
    #[inline]
    fn read_granted_digest(
        &self,
        r: &Resolved,
        grant: &mut ReadGrant,
        off: u64,
        out: &mut [u8],
        digest: &mut CrcSum,
    ) -> Result<(), AccessError> {
        self.read_granted(r, grant, off, out)?;
        digest.extend(out);
        Ok(())
    }

    /// Atomically replaces the 8 octets at the start of `r` (host byte order) by
    /// `f(original)` and returns the original value.
    fn atomic(&mut self, r: &Resolved, f: &mut dyn FnMut(u64) -> u64) -> Result<u64, AccessError>;

    /// Remote invalidation (Send with Invalidate) of `stag` on behalf of a stream.
    fn invalidate(&mut self, stag: STag, pd: PdId, stream: StreamId) -> Result<(), AccessError>;
}

/// What the connections borrow their memory table from for one call: a table itself, or an
/// RNIC, whose table is its memory model. The TCP engine lends it to every connection call.
pub trait HasMemoryTable {
    /// The table.
    type Table: MemoryTable + ?Sized;
    /// The table, for reads.
    fn table(&self) -> &Self::Table;
    /// The table, for placement.
    fn table_mut(&mut self) -> &mut Self::Table;
    /// The table, for reads, and the send buffers the connections share, if the context
    /// has them (an RNIC has; a bare table has none, and each connection keeps its own).
    fn table_and_pool(&mut self) -> (&Self::Table, Option<&mut BufferPool>) {
        (self.table(), None)
    }
}

impl<T: MemoryTable + ?Sized> HasMemoryTable for T {
    type Table = T;
    fn table(&self) -> &T {
        self
    }
    fn table_mut(&mut self) -> &mut T {
        self
    }
}

/// Checks `[off, off+len)` lies inside a resolved range.
pub(crate) fn check_sub_range(r: &Resolved, off: u64, len: usize) -> Result<(), AccessError> {
    let end = off.checked_add(len as u64).ok_or(AccessError::BaseBounds)?;
    if end > r.len {
        return Err(AccessError::BaseBounds);
    }
    Ok(())
}
