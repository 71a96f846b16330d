//! A simple registration table over one byte arena: regions with a VA-based or zero-based
//! TO range, rights, a protection domain, an optional stream binding and a valid flag.

use std::collections::HashMap;
use std::ops::Range;

use super::backend::{Arena, HeapBackend};
use super::stag::{Access, PdId, STag, StreamId};
use super::table::{check_sub_range, AccessError, MemoryTable, Resolved};

/// Parameters of a region registered in [`SimpleMemory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionSpec {
    /// Offset of the region's first octet in the arena.
    pub offset: u64,
    /// Length in octets.
    pub len: u64,
    /// TO of the first octet (its VA for VA-based regions, 0 for zero-based ones).
    pub base_to: u64,
    /// Rights.
    pub access: Access,
    /// Protection domain.
    pub pd: PdId,
    /// Stream the STag is bound to (memory windows); `None` = usable by every stream of `pd`.
    pub stream: Option<StreamId>,
    /// Shared by several streams explicitly: cannot be invalidated remotely (SPEC-DIGEST D16).
    pub shared: bool,
    /// Consumer key (low 8 bits of the STag).
    pub key: u8,
}

impl RegionSpec {
    /// A zero-based, PD-scoped, unshared region with key 0.
    pub fn new(offset: u64, len: u64, access: Access, pd: PdId) -> Self {
        RegionSpec {
            offset,
            len,
            base_to: 0,
            access,
            pd,
            stream: None,
            shared: false,
            key: 0,
        }
    }
}

#[derive(Debug, Clone)]
struct Region {
    spec: RegionSpec,
    valid: bool,
}

/// Heap- (or backend-) backed memory table used by tests, fuzzing and simulations.
#[derive(Debug)]
pub struct SimpleMemory<B: Arena = HeapBackend> {
    backend: B,
    regions: HashMap<u32, Region>,
    next_seed: u32,
}

impl SimpleMemory<HeapBackend> {
    /// A table over a zero-filled heap arena of `len` octets.
    pub fn with_heap(len: usize) -> Self {
        Self::new(HeapBackend::new(len))
    }
}

impl<B: Arena> SimpleMemory<B> {
    /// A table over `backend`.
    pub fn new(backend: B) -> Self {
        SimpleMemory {
            backend,
            regions: HashMap::new(),
            next_seed: 0x9E37_79B9,
        }
    }

    /// The arena.
    pub fn bytes(&self) -> &[u8] {
        self.backend.bytes()
    }

    /// The arena, writable (local CPU access).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.backend.bytes_mut()
    }

    /// Registers a region and returns its STag; indices are sparse and never 0.
    pub fn register(&mut self, spec: RegionSpec) -> Result<STag, AccessError> {
        self.check_in_arena(&spec)?;
        let index = loop {
            // xorshift32 gives a sparse, non-sequential walk over the 24-bit index space.
            let mut x = self.next_seed;
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            self.next_seed = x;
            let idx = x & 0x00FF_FFFF;
            if idx != 0 && !self.regions.contains_key(&idx) {
                break idx;
            }
        };
        self.regions.insert(index, Region { spec, valid: true });
        Ok(STag::new(index, spec.key))
    }

    /// Registers a region under a caller-chosen STag (capture replay, simulations); fails
    /// when the index is 0 or already in use.
    pub fn register_with_stag(&mut self, spec: RegionSpec, stag: STag) -> Result<(), AccessError> {
        self.check_in_arena(&spec)?;
        if stag.index() == 0 || self.regions.contains_key(&stag.index()) {
            return Err(AccessError::InvalidStag);
        }
        let spec = RegionSpec {
            key: stag.key(),
            ..spec
        };
        self.regions
            .insert(stag.index(), Region { spec, valid: true });
        Ok(())
    }

    /// Local invalidation: the STag stays allocated but every access fails.
    pub fn invalidate_local(&mut self, stag: STag) -> Result<(), AccessError> {
        let r = self.lookup_mut(stag)?;
        r.valid = false;
        Ok(())
    }

    /// Deregisters a region.
    pub fn deregister(&mut self, stag: STag) -> Result<(), AccessError> {
        self.lookup(stag)?;
        self.regions.remove(&stag.index());
        Ok(())
    }

    /// Whether the STag is registered and valid.
    pub fn is_valid(&self, stag: STag) -> bool {
        self.lookup(stag).map(|r| r.valid).unwrap_or(false)
    }

    /// A region must lie inside the arena.
    fn check_in_arena(&self, spec: &RegionSpec) -> Result<(), AccessError> {
        let end = spec
            .offset
            .checked_add(spec.len)
            .ok_or(AccessError::BaseBounds)?;
        if end > self.backend.bytes().len() as u64 {
            return Err(AccessError::BaseBounds);
        }
        Ok(())
    }

    fn lookup(&self, stag: STag) -> Result<&Region, AccessError> {
        match self.regions.get(&stag.index()) {
            Some(r) if r.spec.key == stag.key() => Ok(r),
            _ => Err(AccessError::InvalidStag),
        }
    }

    fn lookup_mut(&mut self, stag: STag) -> Result<&mut Region, AccessError> {
        match self.regions.get_mut(&stag.index()) {
            Some(r) if r.spec.key == stag.key() => Ok(r),
            _ => Err(AccessError::InvalidStag),
        }
    }

    /// The backend octets of `len` at `off` in `r`, when the region is still valid.
    fn octets(&self, r: &Resolved, off: u64, len: usize) -> Result<&[u8], AccessError> {
        let range = self.slice_range(r, off, len)?;
        let bytes = self.backend.bytes();
        bytes.get(range).ok_or(AccessError::BaseBounds)
    }

    /// `octets`, writable.
    fn octets_mut(&mut self, r: &Resolved, off: u64, len: usize) -> Result<&mut [u8], AccessError> {
        let range = self.slice_range(r, off, len)?;
        let bytes = self.backend.bytes_mut();
        bytes.get_mut(range).ok_or(AccessError::BaseBounds)
    }

    fn slice_range(&self, r: &Resolved, off: u64, len: usize) -> Result<Range<usize>, AccessError> {
        check_sub_range(r, off, len)?;
        let region = self
            .regions
            .get(&r.region)
            .filter(|g| g.valid)
            .ok_or(AccessError::Invalidated)?;
        let start = r.offset.checked_add(off).ok_or(AccessError::BaseBounds)?;
        let end = start
            .checked_add(len as u64)
            .ok_or(AccessError::BaseBounds)?;
        if start < region.spec.offset || end > region.spec.offset + region.spec.len {
            return Err(AccessError::BaseBounds);
        }
        let start = usize::try_from(start).map_err(|_| AccessError::BaseBounds)?;
        Ok(start..start + len)
    }
}

impl<B: Arena> MemoryTable for SimpleMemory<B> {
    fn resolve(
        &self,
        stag: STag,
        pd: PdId,
        stream: StreamId,
        to: u64,
        len: u64,
        need: Access,
    ) -> Result<Resolved, AccessError> {
        let region = self.lookup(stag)?;
        if !region.valid {
            return Err(AccessError::Invalidated);
        }
        let spec = &region.spec;
        if spec.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if let Some(bound) = spec.stream {
            if bound != stream {
                return Err(AccessError::NotAssociated);
            }
        }
        if !spec.access.contains(need) {
            return Err(AccessError::AccessRights);
        }
        if len > 0 && to.checked_add(len - 1).is_none() {
            return Err(AccessError::ToWrap);
        }
        if to < spec.base_to {
            return Err(AccessError::BaseBounds);
        }
        let rel = to - spec.base_to;
        match rel.checked_add(len) {
            Some(end) if end <= spec.len => {}
            _ => return Err(AccessError::BaseBounds),
        }
        let offset = spec.offset + rel;
        Ok(Resolved {
            stag,
            region: stag.index(),
            offset,
            len,
            addr: offset,
        })
    }

    fn write(&mut self, r: &Resolved, off: u64, data: &[u8]) -> Result<(), AccessError> {
        self.octets_mut(r, off, data.len())?.copy_from_slice(data);
        Ok(())
    }

    fn read(&self, r: &Resolved, off: u64, out: &mut [u8]) -> Result<(), AccessError> {
        out.copy_from_slice(self.octets(r, off, out.len())?);
        Ok(())
    }

    fn atomic(&mut self, r: &Resolved, f: &mut dyn FnMut(u64) -> u64) -> Result<u64, AccessError> {
        let cell = self.octets_mut(r, 0, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(cell);
        let original = u64::from_ne_bytes(a);
        cell.copy_from_slice(&f(original).to_ne_bytes());
        Ok(original)
    }

    fn invalidate(&mut self, stag: STag, pd: PdId, stream: StreamId) -> Result<(), AccessError> {
        let region = self.lookup_mut(stag)?;
        let spec = region.spec;
        if spec.pd != pd || spec.shared || spec.stream.is_some_and(|s| s != stream) {
            return Err(AccessError::CannotInvalidate);
        }
        if !spec.access.any_remote() {
            return Err(AccessError::AccessRights);
        }
        region.valid = false;
        Ok(())
    }
}
