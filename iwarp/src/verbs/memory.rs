//! The verbs memory model (VERBS-00 §7): Memory Regions (Non-Shared and Shared) over Page
//! Lists, Memory Windows, STag states and every local and remote access check. It
//! implements [`MemoryTable`] so the protocol engine places data into verbs-registered
//! memory, and answers local (SGE) accesses with the draft's completion statuses.

use std::ops::Range;
use std::sync::Arc;

use rustc_hash::FxHashMap;

pub use crate::mem::MemoryBackend;
use crate::mem::{AccessError, MemoryTable, ReadGrant, Resolved};
use crate::wire::crcsum::CrcSum;

use super::handle::QpId;
use super::status::{CompletionStatus, VerbError};
use crate::mem::{Access, PdId, STag, StreamId};

/// How the TO of a region's first octet is chosen (VERBS-00 §7.6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaggedBase {
    /// VA-based: the first octet's TO is this virtual address.
    Va(u64),
    /// Zero-based: the first octet's TO is 0.
    ZeroBased,
}

impl TaggedBase {
    fn base_to(self) -> u64 {
        match self {
            TaggedBase::Va(va) => va,
            TaggedBase::ZeroBased => 0,
        }
    }
}

/// A Physical Buffer List in Page mode (VERBS-00 §7.6.2.1). Page addresses are offsets in
/// the RNIC's memory backend ("physical addresses" of this soft RNIC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageList {
    /// Page size, a power of two supported by the RNIC.
    pub page_size: u64,
    /// Address of every page, each a multiple of `page_size`.
    pub pages: Vec<u64>,
    /// First Byte Offset into the first page.
    pub fbo: u64,
    /// Length of the region in octets.
    pub len: u64,
}

impl PageList {
    /// The page list covering the contiguous backend range `[offset, offset + len)`.
    pub fn contiguous(offset: u64, len: u64, page_size: u64) -> PageList {
        let page_size = page_size.max(1);
        let first = offset - offset % page_size;
        let end = offset.saturating_add(len.max(1));
        let pages = (first..end).step_by(page_size as usize).collect();
        PageList {
            page_size,
            pages,
            fbo: offset % page_size,
            len,
        }
    }
}

/// Inputs of RI-Register / RI-Reregister Non-Shared MR (VERBS-00 §9.2.6.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrSpec {
    /// The buffer.
    pub pbl: PageList,
    /// VA-based or zero-based TO.
    pub base: TaggedBase,
    /// Protection domain.
    pub pd: PdId,
    /// Consumer key (low 8 bits of the STag).
    pub key: u8,
    /// Remote Access Flag: remote rights may be granted (now or by a later Fast-Register).
    pub remote_access: bool,
    /// Access rights (LR, LW, RR, RW, BIND; REMOTE_ATOMIC as RFC 7306 extension).
    pub access: Access,
}

/// State of an MR or MW STag (VERBS-00 §7.2.2, §7.10.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StagState {
    /// Usable.
    Valid,
    /// Allocated, every access fails.
    Invalid,
}

/// Result of Query MR (VERBS-00 §9.2.6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrAttributes {
    /// Key, if Valid.
    pub key: Option<u8>,
    /// Remote Access Flag.
    pub remote_access: bool,
    /// Protection domain.
    pub pd: PdId,
    /// State.
    pub state: StagState,
    /// Shared MR.
    pub shared: bool,
    /// PBL entries allocated.
    pub pbl_entries: u32,
    /// Access rights.
    pub access: Access,
    /// Number of Memory Windows bound to it.
    pub bound_windows: u32,
}

/// Result of Query MW (VERBS-00 §9.2.6.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwAttributes {
    /// Key, if Valid.
    pub key: Option<u8>,
    /// State.
    pub state: StagState,
    /// Protection domain.
    pub pd: PdId,
    /// QP the window is bound to, if Valid.
    pub qp: Option<QpId>,
    /// Remote rights, if Valid.
    pub access: Access,
}

/// One STag of the memory model, for monitoring ([`MemoryModel::stags`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagInfo {
    /// The STag index (its upper 24 bits).
    pub index: u32,
    /// A Memory Window (else a Memory Region).
    pub window: bool,
    /// Protection domain.
    pub pd: PdId,
    /// Valid (usable) or Invalid.
    pub state: StagState,
    /// The key in effect.
    pub key: u8,
    /// Octets it covers (0 for an MR without a mapping or an unbound MW).
    pub len: u64,
    /// Tagged offset of its first octet.
    pub base_to: u64,
    /// Access rights.
    pub access: Access,
    /// MR: windows bound to it; MW: 1 when bound.
    pub bound: u32,
}

/// Inputs of a Bind MW work request (VERBS-00 §8.1.2.3, Fig. 27).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindSpec {
    /// The MW: index and the new key.
    pub mw: STag,
    /// The MR (index and key) the window is bound into.
    pub mr: STag,
    /// TO (in the MR's VA space) of the window's first octet.
    pub mr_to: u64,
    /// Window length.
    pub len: u64,
    /// The window's own TO addressing.
    pub zero_based: bool,
    /// Remote rights of the window.
    pub access: Access,
}

/// Inputs of a Fast-Register work request (VERBS-00 §7.3.2.5, Fig. 27).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastRegSpec {
    /// STag index and the new key.
    pub stag: STag,
    /// The buffer.
    pub pbl: PageList,
    /// VA-based or zero-based TO.
    pub base: TaggedBase,
    /// Access rights.
    pub access: Access,
}

/// What a local access is checked against: the posting QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalContext {
    /// QP ID.
    pub qp: QpId,
    /// PD of the QP (or of its S-RQ for receive buffers, VERBS-00 §6.3.5).
    pub pd: PdId,
    /// STag 0 and Fast-Register are enabled (privileged QP, VERBS-00 §6.1.1).
    pub privileged: bool,
    /// Memory Window binding is enabled on the QP.
    pub bind_enabled: bool,
}

/// Inbound enables of a QP, checked together with the STag's rights for every remote
/// access (VERBS-00 §8.1.2.2, Fig. 21).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StreamRights {
    pub(super) privileged: bool,
    /// PD of the QP's S-RQ: receive buffers taken from it belong to that PD
    /// (VERBS-00 §6.3.5).
    pub(super) srq_pd: Option<PdId>,
    pub(super) inbound_read: bool,
    pub(super) inbound_write: bool,
    pub(super) inbound_atomic: bool,
}

/// Where an access goes in the backend.
enum Span {
    /// One range from this backend address (the usual access).
    One(u64),
    /// Several ranges (pages not adjacent in the backend).
    Pages(Chunks),
}

/// Where a resolved range lives, found with one lookup per access.
enum Live<'a> {
    /// STag 0: backend addresses.
    Physical,
    /// The pages of a region (of a window's region).
    Mapped(&'a Mapping),
    /// An inline buffer (local reads only).
    Inline(&'a [u8]),
}

#[derive(Debug, Clone)]
struct Mapping {
    pages: Arc<Vec<u64>>,
    page_size: u64,
    fbo: u64,
    len: u64,
}

impl Mapping {
    /// The backend address of `offset` when the `len` (> 0) octets there lie on physically
    /// adjacent pages (one backend range); `None` otherwise.
    fn one_range(&self, offset: u64, len: u64) -> Option<u64> {
        // Page sizes are powers of two (`check_pbl`).
        let shift = self.page_size.trailing_zeros();
        let pos = self.fbo.checked_add(offset)?;
        let last_pos = pos.checked_add(len.checked_sub(1)?)?;
        let pages = self
            .pages
            .get((pos >> shift) as usize..=(last_pos >> shift) as usize)?;
        if !pages
            .windows(2)
            .all(|w| w[1].wrapping_sub(w[0]) == self.page_size)
        {
            return None;
        }
        Some(pages[0] + (pos & (self.page_size - 1)))
    }
}

#[derive(Debug, Clone)]
struct Mr {
    pd: PdId,
    key: u8,
    valid: bool,
    shared: bool,
    remote_access: bool,
    pbl_capacity: u32,
    access: Access,
    base_to: u64,
    zero_based: bool,
    mapping: Option<Mapping>,
    bound_windows: u32,
}

#[derive(Debug, Clone, Copy)]
struct MwBinding {
    qp: QpId,
    mr: u32,
    /// Offset of the window's first octet within the MR.
    mr_offset: u64,
    len: u64,
    base_to: u64,
    access: Access,
}

#[derive(Debug, Clone)]
struct Mw {
    pd: PdId,
    key: u8,
    binding: Option<MwBinding>,
}

#[derive(Debug, Clone)]
enum Entry {
    Mr(Mr),
    Mw(Mw),
    /// Inline data of a posted WR, readable locally by QPs of `pd` (VERBS-00 §8.1.3.2).
    Inline {
        pd: PdId,
        data: Vec<u8>,
    },
}

/// Index 0 of `Resolved::region` stands for STag 0 (physical addressing).
const STAG0_REGION: u32 = 0;

/// The STag index bit of regions registered on several RNICs at once under one STag
/// ([`super::Rnic::register_mr_at`]): an RNIC that reserves it
/// ([`super::Rnic::reserve_lane_stags`]) never picks such an index itself.
pub const LANE_STAG_BIT: u32 = 1 << 23;

/// The STag entries, counting every change (a [`Grant`] holds while none happened). The
/// map is reachable only through these methods, so no change goes uncounted.
#[derive(Default)]
struct Entries {
    map: FxHashMap<u32, Entry>,
    changes: u64,
}

impl Entries {
    fn get(&self, index: &u32) -> Option<&Entry> {
        self.map.get(index)
    }

    fn contains_key(&self, index: &u32) -> bool {
        self.map.contains_key(index)
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn values(&self) -> impl Iterator<Item = &Entry> {
        self.map.values()
    }

    fn iter(&self) -> impl Iterator<Item = (&u32, &Entry)> {
        self.map.iter()
    }

    fn get_mut(&mut self, index: &u32) -> Option<&mut Entry> {
        self.changes += 1;
        self.map.get_mut(index)
    }

    fn insert(&mut self, index: u32, e: Entry) -> Option<Entry> {
        self.changes += 1;
        self.map.insert(index, e)
    }

    fn remove(&mut self, index: &u32) -> Option<Entry> {
        self.changes += 1;
        self.map.remove(index)
    }
}

/// What a successful remote access check of one STag found, for the same check of the
/// next segments of a Write: while the table's generation is unchanged, the same STag,
/// PD, stream and rights pass every check of [`MemoryModel::check_access`] but the range
/// check (wrap, then bounds of `[base, base + size)`), which is made for every segment.
struct Grant {
    generation: u64,
    stag: STag,
    pd: PdId,
    stream: StreamId,
    need: Access,
    /// The TO range the STag covers.
    base: u64,
    size: u64,
    /// The offset of `base` in the region the range lives in.
    mr_offset: u64,
    map: Mapping,
    /// The backend address of `base` when the whole range lies on physically adjacent
    /// pages (one backend range): an access inside it needs no page arithmetic, and the
    /// backend's write checks that it is backed, as `contains` would.
    one: Option<u64>,
}

impl Grant {
    /// Whether the grant answers for `stag` used by `stream` in `pd` for `need` while the
    /// table's generation is `generation`.
    #[inline]
    fn holds(&self, generation: u64, stag: STag, pd: PdId, stream: StreamId, need: Access) -> bool {
        self.generation == generation
            && self.stag == stag
            && self.pd == pd
            && self.stream == stream
            && self.need == need
    }
}

/// All MRs and MWs of an RNIC over one memory backend.
pub struct MemoryModel {
    backend: Box<dyn MemoryBackend + Send>,
    read_only: Vec<(u64, u64)>,
    /// Keyed by STag indices this RNIC chose (unkeyed fast hash: the network cannot insert).
    entries: Entries,
    streams: FxHashMap<QpId, StreamRights>,
    /// Changes of `streams` (with the entries' changes: the table's generation).
    stream_changes: u64,
    /// What the last tagged placement's STag check found, for the next segments of the
    /// same Write.
    grant: Option<Grant>,
    rng: u64,
    /// Indices with [`LANE_STAG_BIT`] are left to [`MemoryModel::register_at`].
    lane_stags: bool,
    pub(super) page_sizes: Vec<u64>,
    pub(super) max_pbl_entries: u32,
    pub(super) max_mr_size: u64,
}

impl std::fmt::Debug for MemoryModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryModel")
            .field("arena", &self.backend.arena().map(<[u8]>::len))
            .field("stags", &self.entries.len())
            .finish()
    }
}

fn mr_access_valid(a: Access, remote_flag: bool) -> bool {
    let local = a.contains(Access::LOCAL_READ) || a.contains(Access::LOCAL_WRITE);
    let rr_ok = !a.contains(Access::REMOTE_READ) || a.contains(Access::LOCAL_READ);
    let rw_ok = !a.contains(Access::REMOTE_WRITE) || a.contains(Access::LOCAL_WRITE);
    let ra_ok =
        !a.contains(Access::REMOTE_ATOMIC) || a.contains(Access::LOCAL_READ | Access::LOCAL_WRITE);
    local && rr_ok && rw_ok && ra_ok && (remote_flag || !a.any_remote())
}

/// Checks `[to, to+len)` against a TO range `[base, base+size)`: wrap first, then bounds
/// (digest B12 decision). Returns the offset of `to` in the range.
fn check_range(base: u64, size: u64, to: u64, len: u64) -> Result<u64, AccessError> {
    if len > 0 && to.checked_add(len - 1).is_none() {
        return Err(AccessError::ToWrap);
    }
    if to < base {
        return Err(AccessError::BaseBounds);
    }
    let rel = to - base;
    match rel.checked_add(len) {
        Some(end) if end <= size => Ok(rel),
        _ => Err(AccessError::BaseBounds),
    }
}

/// Maps a remote-access error to the completion status of a local access.
fn local_status(e: AccessError) -> CompletionStatus {
    match e {
        AccessError::InvalidStag | AccessError::Invalidated | AccessError::CannotInvalidate => {
            CompletionStatus::InvalidStag
        }
        AccessError::BaseBounds => CompletionStatus::BaseBoundsViolation,
        AccessError::AccessRights => CompletionStatus::AccessViolation,
        AccessError::PdMismatch | AccessError::NotAssociated => CompletionStatus::InvalidPdId,
        AccessError::ToWrap => CompletionStatus::WrapError,
    }
}

/// Ranges an access keeps inline; more (tiny pages, long accesses) go to a `Vec`.
const INLINE_CHUNKS: usize = 4;

/// Backend byte ranges `(start, len)` of one access, in order, physically adjacent pages
/// merged. The usual access (one range, or a segment across two pages) allocates nothing.
#[derive(Default)]
struct Chunks {
    inline: [(usize, usize); INLINE_CHUNKS],
    count: usize,
    more: Vec<(usize, usize)>,
    at: usize,
}

impl Chunks {
    fn push(&mut self, start: usize, len: usize) {
        let last = match self.count {
            0 => None,
            n if n <= INLINE_CHUNKS => Some(&mut self.inline[n - 1]),
            _ => self.more.last_mut(),
        };
        if let Some((s, l)) = last {
            if *s + *l == start {
                *l += len;
                return;
            }
        }
        if self.count < INLINE_CHUNKS {
            self.inline[self.count] = (start, len);
        } else {
            self.more.push((start, len));
        }
        self.count += 1;
    }

    /// Each backend range with the range of the access it holds.
    fn with_parts(self) -> impl Iterator<Item = (Range<usize>, Range<usize>)> {
        self.scan(0, |done, (start, n)| {
            let part = *done..*done + n;
            *done += n;
            Some((start..start + n, part))
        })
    }
}

impl Iterator for Chunks {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        if self.at >= self.count {
            return None;
        }
        let c = if self.at < INLINE_CHUNKS {
            self.inline[self.at]
        } else {
            self.more[self.at - INLINE_CHUNKS]
        };
        self.at += 1;
        Some(c)
    }
}

impl MemoryModel {
    pub(super) fn new(backend: Box<dyn MemoryBackend + Send>, seed: u64) -> Self {
        MemoryModel {
            backend,
            read_only: Vec::new(),
            entries: Entries::default(),
            streams: FxHashMap::default(),
            stream_changes: 0,
            grant: None,
            rng: seed | 1,
            lane_stags: false,
            page_sizes: vec![4096],
            max_pbl_entries: 1 << 20,
            max_mr_size: 1 << 40,
        }
    }

    /// The backend's arena (local CPU access by the owner of the memory); empty when the
    /// backend is not one contiguous arena (an application's own memory).
    pub fn bytes(&self) -> &[u8] {
        self.backend.arena().unwrap_or(&[])
    }

    /// The backend, for the owner that adds or removes the ranges it backs
    /// ([`MemoryBackend::back`]); regions that point into a range must be gone before the
    /// range is.
    pub fn backend_mut(&mut self) -> &mut dyn MemoryBackend {
        &mut *self.backend
    }

    /// The backend's bytes, writable (local CPU access by the owner of the memory).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.backend.arena_mut().unwrap_or(&mut [])
    }

    /// Marks a backend range as mapped read-only for consumers: registrations covering it
    /// with a write right are refused (RFC 5040 §8.1.2 item 4, VERBS-00 §7.5).
    pub fn mark_read_only(&mut self, offset: u64, len: u64) {
        self.read_only.push((offset, offset.saturating_add(len)));
    }

    /// Number of MR and MW STags in any of `pds`.
    pub(super) fn stags_in(&self, pds: &[PdId]) -> usize {
        self.entries
            .values()
            .filter(|e| match e {
                Entry::Mr(m) => pds.contains(&m.pd),
                Entry::Mw(w) => pds.contains(&w.pd),
                Entry::Inline { .. } => false,
            })
            .count()
    }

    pub(super) fn uses_pd(&self, pd: PdId) -> bool {
        self.stags_in(&[pd]) > 0
    }

    /// Every MR and MW (not the inline-data entries of posted WRs), by STag index.
    pub fn stags(&self) -> Vec<StagInfo> {
        let state = |valid: bool| {
            if valid {
                StagState::Valid
            } else {
                StagState::Invalid
            }
        };
        let mut v: Vec<StagInfo> = self
            .entries
            .iter()
            .filter_map(|(&index, e)| match e {
                Entry::Mr(mr) => Some(StagInfo {
                    index,
                    window: false,
                    pd: mr.pd,
                    state: state(mr.valid),
                    key: mr.key,
                    len: mr.mapping.as_ref().map_or(0, |m| m.len),
                    base_to: mr.base_to,
                    access: mr.access,
                    bound: mr.bound_windows,
                }),
                Entry::Mw(mw) => Some(StagInfo {
                    index,
                    window: true,
                    pd: mw.pd,
                    state: state(mw.binding.is_some()),
                    key: mw.key,
                    len: mw.binding.map_or(0, |b| b.len),
                    base_to: mw.binding.map_or(0, |b| b.base_to),
                    access: mw.binding.map_or(Access::NONE, |b| b.access),
                    bound: u32::from(mw.binding.is_some()),
                }),
                Entry::Inline { .. } => None,
            })
            .collect();
        v.sort_by_key(|i| i.index);
        v
    }

    /// Number of MRs.
    pub(super) fn mr_count(&self) -> usize {
        self.entries
            .values()
            .filter(|e| matches!(e, Entry::Mr(_)))
            .count()
    }

    /// Number of MWs.
    pub(super) fn mw_count(&self) -> usize {
        self.entries
            .values()
            .filter(|e| matches!(e, Entry::Mw(_)))
            .count()
    }

    /// Keeps a copy of inline data and returns the STag naming it (key 0).
    pub(super) fn store_inline(&mut self, pd: PdId, data: Vec<u8>) -> STag {
        let idx = self.fresh_index();
        self.entries.insert(idx, Entry::Inline { pd, data });
        STag::new(idx, 0)
    }

    /// Releases inline data once its WR completed.
    pub(super) fn free_inline(&mut self, stag: STag) {
        if matches!(self.entries.get(&stag.index()), Some(Entry::Inline { .. })) {
            self.entries.remove(&stag.index());
        }
    }

    /// Number of windows bound to `qp`.
    pub(super) fn windows_bound_to(&self, qp: QpId) -> usize {
        self.entries
            .values()
            .filter(|e| matches!(e, Entry::Mw(Mw { binding: Some(b), .. }) if b.qp == qp))
            .count()
    }

    pub(super) fn set_stream(&mut self, qp: QpId, rights: StreamRights) {
        self.stream_changes += 1;
        self.streams.insert(qp, rights);
    }

    pub(super) fn remove_stream(&mut self, qp: QpId) {
        self.stream_changes += 1;
        self.streams.remove(&qp);
    }

    /// Grows with every change of the entries or the streams' rights: a [`Grant`] of the
    /// same generation still describes the table.
    fn generation(&self) -> u64 {
        self.entries.changes + self.stream_changes
    }

    /// [`MemoryTable::place`] past a grant over one backend range: the lookups, or the
    /// grant's range page by page (out of line: the grant's path stays small).
    #[inline(never)]
    fn place_checked(
        &mut self,
        stag: STag,
        pd: PdId,
        stream: StreamId,
        to: u64,
        data: &[u8],
        need: Access,
    ) -> Result<(), AccessError> {
        if data.is_empty() {
            return Ok(());
        }
        let len = data.len() as u64;
        let generation = self.generation();
        let granted = self
            .grant
            .as_ref()
            .filter(|g| g.holds(generation, stag, pd, stream, need));
        let span = match granted {
            Some(g) => {
                let rel = check_range(g.base, g.size, to, len)?;
                self.mapped_span(&g.map, g.mr_offset + rel, data.len())?
            }
            None => {
                let span = match self.resolve_live(stag, pd, stream, to, len, need)? {
                    (_, None) => return Ok(()),
                    (_, Some(Live::Inline(_))) => return Err(AccessError::AccessRights),
                    (r, Some(live)) => self.span(&r, 0, data.len(), Ok(live))?,
                };
                self.grant = self.grant_for(stag, pd, stream, need);
                span
            }
        };
        self.write_span(span, data)
    }

    /// The grant a successful remote check of `stag` found (a region's or a bound window's
    /// TO range and the region's pages); `None` for STag 0 and inline data.
    fn grant_for(&self, stag: STag, pd: PdId, stream: StreamId, need: Access) -> Option<Grant> {
        let (base, size, mr_offset, map) = match self.entries.get(&stag.index())? {
            Entry::Mr(mr) => {
                let map = mr.mapping.as_ref()?;
                (mr.base_to, map.len, 0, map)
            }
            Entry::Mw(mw) => {
                let b = mw.binding?;
                let Entry::Mr(mr) = self.entries.get(&b.mr)? else {
                    return None;
                };
                (b.base_to, b.len, b.mr_offset, mr.mapping.as_ref()?)
            }
            Entry::Inline { .. } => return None,
        };
        let one = map
            .one_range(mr_offset, size)
            .filter(|&start| self.backend.contains(start, size));
        Some(Grant {
            generation: self.generation(),
            stag,
            pd,
            stream,
            need,
            base,
            size,
            mr_offset,
            map: map.clone(),
            one,
        })
    }

    /// A fresh sparse non-zero index (xorshift64*, RFC 5040 §8.1.1 item 8).
    fn fresh_index(&mut self) -> u32 {
        loop {
            let mut x = self.rng;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            self.rng = x;
            let mut idx = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as u32 & 0x00FF_FFFF;
            if self.lane_stags {
                idx &= !LANE_STAG_BIT;
            }
            if idx != 0 && !self.entries.contains_key(&idx) {
                return idx;
            }
        }
    }

    /// Validates a page list and base (VERBS-00 §7.6.1, §7.6.2.1); `capacity` bounds the
    /// number of pages.
    fn check_pbl(&self, pbl: &PageList, base: TaggedBase, capacity: u32) -> Result<(), VerbError> {
        if !pbl.page_size.is_power_of_two() || !self.page_sizes.contains(&pbl.page_size) {
            return Err(VerbError::InvalidPhysicalBufferSize);
        }
        if pbl.pages.len() > capacity as usize {
            return Err(VerbError::InvalidLength);
        }
        for &p in &pbl.pages {
            if p % pbl.page_size != 0 || !self.backend.contains(p, pbl.page_size) {
                return Err(VerbError::InvalidPblEntry);
            }
        }
        if pbl.fbo >= pbl.page_size {
            return Err(VerbError::InvalidFbo);
        }
        let covered = (pbl.pages.len() as u64)
            .checked_mul(pbl.page_size)
            .and_then(|c| c.checked_sub(pbl.fbo))
            .unwrap_or(0);
        if pbl.len > covered || pbl.len > self.max_mr_size {
            return Err(VerbError::InvalidLength);
        }
        if let TaggedBase::Va(va) = base {
            if va % pbl.page_size != pbl.fbo || va.checked_add(pbl.len).is_none() {
                return Err(VerbError::InvalidVirtualAddress);
            }
        }
        Ok(())
    }

    fn writes_read_only(&self, pbl: &PageList, access: Access) -> bool {
        if !access.contains(Access::LOCAL_WRITE) && !access.contains(Access::REMOTE_WRITE) {
            return false;
        }
        pbl.pages.iter().any(|&p| {
            let end = p + pbl.page_size;
            self.read_only.iter().any(|&(s, e)| p < e && s < end)
        })
    }

    fn check_spec(&self, spec: &MrSpec, capacity: u32) -> Result<(), VerbError> {
        self.check_pbl(&spec.pbl, spec.base, capacity)?;
        if !mr_access_valid(spec.access, spec.remote_access)
            || self.writes_read_only(&spec.pbl, spec.access)
        {
            return Err(VerbError::InvalidAccessRights);
        }
        Ok(())
    }

    /// Stores the valid region `spec`, with PBL room for `capacity` entries, at `index`;
    /// returns its STag.
    fn install_mr(&mut self, index: u32, spec: &MrSpec, capacity: u32) -> STag {
        let mr = Mr {
            pd: spec.pd,
            key: spec.key,
            valid: true,
            shared: false,
            remote_access: spec.remote_access,
            pbl_capacity: capacity,
            access: spec.access,
            base_to: spec.base.base_to(),
            zero_based: spec.base == TaggedBase::ZeroBased,
            mapping: Some(Mapping {
                pages: Arc::new(spec.pbl.pages.clone()),
                page_size: spec.pbl.page_size,
                fbo: spec.pbl.fbo,
                len: spec.pbl.len,
            }),
            bound_windows: 0,
        };
        self.entries.insert(index, Entry::Mr(mr));
        STag::new(index, spec.key)
    }

    pub(super) fn register(&mut self, spec: &MrSpec) -> Result<STag, VerbError> {
        self.check_spec(spec, self.max_pbl_entries)?;
        let idx = self.fresh_index();
        Ok(self.install_mr(idx, spec, spec.pbl.pages.len() as u32))
    }

    /// Leaves the indices with [`LANE_STAG_BIT`] to [`MemoryModel::register_at`].
    pub(super) fn reserve_lane_stags(&mut self) {
        self.lane_stags = true;
    }

    /// Registers `spec` at `index`, an index with [`LANE_STAG_BIT`] the caller chose (the
    /// same on every RNIC that shares the region). The region is Shared (VERBS-00 §7.3.2.4):
    /// no Invalidate, Reregister or Fast-Register changes one RNIC's copy alone.
    pub(super) fn register_at(&mut self, index: u32, spec: &MrSpec) -> Result<STag, VerbError> {
        if !self.lane_stags
            || index & LANE_STAG_BIT == 0
            || index > 0x00FF_FFFF
            || self.entries.contains_key(&index)
        {
            return Err(VerbError::InvalidStagIndex);
        }
        self.check_spec(spec, self.max_pbl_entries)?;
        let stag = self.install_mr(index, spec, spec.pbl.pages.len() as u32);
        if let Some(Entry::Mr(mr)) = self.entries.get_mut(&index) {
            mr.shared = true;
        }
        Ok(stag)
    }

    pub(super) fn allocate_mr(
        &mut self,
        pd: PdId,
        pbl_entries: u32,
        remote: bool,
    ) -> Result<STag, VerbError> {
        if pbl_entries > self.max_pbl_entries {
            return Err(VerbError::InsufficientResources);
        }
        let idx = self.fresh_index();
        self.entries.insert(
            idx,
            Entry::Mr(Mr {
                pd,
                key: 0,
                valid: false,
                shared: false,
                remote_access: remote,
                pbl_capacity: pbl_entries.max(1),
                access: Access::NONE,
                base_to: 0,
                zero_based: true,
                mapping: None,
                bound_windows: 0,
            }),
        );
        Ok(STag::new(idx, 0))
    }

    pub(super) fn reregister(&mut self, index: u32, spec: &MrSpec) -> Result<STag, VerbError> {
        let mr = match self.entries.get(&index) {
            Some(Entry::Mr(mr)) if index != 0 && !mr.shared => mr,
            _ => return Err(VerbError::InvalidStagIndex),
        };
        if mr.bound_windows > 0 {
            return Err(VerbError::WindowsBoundToRegion);
        }
        let capacity = mr.pbl_capacity.max(spec.pbl.pages.len() as u32);
        if let Err(e) = self.check_spec(spec, self.max_pbl_entries) {
            // VERBS-00 §7.3.2.3: any failure other than bound windows or a bad index
            // deallocates the region.
            self.entries.remove(&index);
            return Err(e);
        }
        Ok(self.install_mr(index, spec, capacity))
    }

    pub(super) fn register_shared(
        &mut self,
        source: STag,
        base: TaggedBase,
        pd: PdId,
        key: u8,
        remote_access: bool,
        access: Access,
    ) -> Result<STag, VerbError> {
        let src = match self.entries.get(&source.index()) {
            Some(Entry::Mr(mr)) if source.index() != 0 && mr.valid && mr.key == source.key() => mr,
            _ => return Err(VerbError::InvalidStagIndex),
        };
        let mapping = src.mapping.clone().ok_or(VerbError::InvalidStagIndex)?;
        if let TaggedBase::Va(va) = base {
            if va % mapping.page_size != mapping.fbo || va.checked_add(mapping.len).is_none() {
                return Err(VerbError::InvalidVirtualAddress);
            }
        }
        let pbl = PageList {
            page_size: mapping.page_size,
            pages: mapping.pages.to_vec(),
            fbo: mapping.fbo,
            len: mapping.len,
        };
        if !mr_access_valid(access, remote_access) || self.writes_read_only(&pbl, access) {
            return Err(VerbError::InvalidAccessRights);
        }
        let capacity = src.pbl_capacity;
        let idx = self.fresh_index();
        if let Some(Entry::Mr(src)) = self.entries.get_mut(&source.index()) {
            src.shared = true;
        }
        self.entries.insert(
            idx,
            Entry::Mr(Mr {
                pd,
                key,
                valid: true,
                shared: true,
                remote_access,
                pbl_capacity: capacity,
                access,
                base_to: base.base_to(),
                zero_based: base == TaggedBase::ZeroBased,
                mapping: Some(mapping),
                bound_windows: 0,
            }),
        );
        Ok(STag::new(idx, key))
    }

    pub(super) fn allocate_mw(&mut self, pd: PdId) -> STag {
        let idx = self.fresh_index();
        self.entries.insert(
            idx,
            Entry::Mw(Mw {
                pd,
                key: 0,
                binding: None,
            }),
        );
        STag::new(idx, 0)
    }

    pub(super) fn query_mr(&self, index: u32) -> Result<MrAttributes, VerbError> {
        match self.entries.get(&index) {
            Some(Entry::Mr(mr)) if index != 0 => Ok(MrAttributes {
                key: mr.valid.then_some(mr.key),
                remote_access: mr.remote_access,
                pd: mr.pd,
                state: if mr.valid {
                    StagState::Valid
                } else {
                    StagState::Invalid
                },
                shared: mr.shared,
                pbl_entries: mr.pbl_capacity,
                access: mr.access,
                bound_windows: mr.bound_windows,
            }),
            _ => Err(VerbError::InvalidStagIndex),
        }
    }

    pub(super) fn query_mw(&self, index: u32) -> Result<MwAttributes, VerbError> {
        match self.entries.get(&index) {
            Some(Entry::Mw(mw)) if index != 0 => Ok(MwAttributes {
                key: mw.binding.map(|_| mw.key),
                state: if mw.binding.is_some() {
                    StagState::Valid
                } else {
                    StagState::Invalid
                },
                pd: mw.pd,
                qp: mw.binding.map(|b| b.qp),
                access: mw.binding.map_or(Access::NONE, |b| b.access),
            }),
            _ => Err(VerbError::InvalidStagIndex),
        }
    }

    pub(super) fn deallocate(&mut self, index: u32) -> Result<(), VerbError> {
        match self.entries.get(&index) {
            None => return Err(VerbError::InvalidStagIndex),
            Some(Entry::Inline { .. }) => return Err(VerbError::InvalidStagIndex),
            Some(_) if index == 0 => return Err(VerbError::InvalidStagIndex),
            Some(Entry::Mr(mr)) if mr.bound_windows > 0 => {
                return Err(VerbError::WindowsBoundToRegion)
            }
            Some(_) => {}
        }
        if let Some(Entry::Mw(Mw {
            binding: Some(b), ..
        })) = self.entries.remove(&index)
        {
            self.unbind_from_mr(b.mr);
        }
        Ok(())
    }

    fn unbind_from_mr(&mut self, mr: u32) {
        if let Some(Entry::Mr(mr)) = self.entries.get_mut(&mr) {
            mr.bound_windows = mr.bound_windows.saturating_sub(1);
        }
    }

    /// Validates a local access (SGE) of `len` octets at `to` needing `need` (LOCAL_READ or
    /// LOCAL_WRITE) for the QP in `ctx` (VERBS-00 §7.4.1, §7.6.3, §8.1.3.2), with the
    /// draft's completion statuses. Zero-length SGEs are not checked; MW STags are refused
    /// (§7.10, digest J18); STag 0 is allowed on privileged QPs only and addresses the
    /// backend physically (§7.2.1).
    pub fn resolve_local(
        &self,
        ctx: &LocalContext,
        stag: STag,
        to: u64,
        len: u64,
        need: Access,
    ) -> Result<Resolved, CompletionStatus> {
        self.check_access(stag, ctx.pd, ctx.qp, to, len, need, ctx.privileged, true)
            .map_err(local_status)
    }

    /// [`MemoryModel::resolve_local`], also giving the backend address of the range's first
    /// octet when the whole range is one backend range (as [`MemoryTable::read_granted`]'s
    /// grant holds it), found from the entry the check read: no second look-up.
    #[inline]
    pub fn resolve_local_start(
        &self,
        ctx: &LocalContext,
        stag: STag,
        to: u64,
        len: u64,
        need: Access,
    ) -> Result<(Resolved, Option<u64>), CompletionStatus> {
        let (r, live) = self
            .check_access_live(stag, ctx.pd, ctx.qp, to, len, need, ctx.privileged, true)
            .map_err(local_status)?;
        let start = live.and_then(|live| self.start_of(&r, live));
        Ok((r, start))
    }

    /// The one access check behind every local and remote access.
    #[allow(clippy::too_many_arguments)]
    fn check_access(
        &self,
        stag: STag,
        pd: PdId,
        qp: QpId,
        to: u64,
        len: u64,
        need: Access,
        privileged: bool,
        qp_allows: bool,
    ) -> Result<Resolved, AccessError> {
        self.check_access_live(stag, pd, qp, to, len, need, privileged, qp_allows)
            .map(|(r, _)| r)
    }

    /// [`MemoryModel::check_access`], also giving where the range lives (none for a
    /// zero-length access).
    #[allow(clippy::too_many_arguments)]
    fn check_access_live(
        &self,
        stag: STag,
        pd: PdId,
        qp: QpId,
        to: u64,
        len: u64,
        need: Access,
        privileged: bool,
        qp_allows: bool,
    ) -> Result<(Resolved, Option<Live<'_>>), AccessError> {
        if len == 0 {
            // VERBS-00 §7.6.3: zero-length accesses are not checked and touch nothing.
            let r = Resolved {
                stag,
                region: u32::MAX,
                offset: 0,
                len: 0,
                addr: 0,
            };
            return Ok((r, None));
        }
        let remote = need.any_remote();
        if stag.0 == 0 {
            // §7.2.1: never remote; local only on privileged QPs; TO is a physical address.
            if remote || !privileged {
                return Err(AccessError::InvalidStag);
            }
            // Wrap first, then bounds (digest B12), as for every range.
            if to.checked_add(len - 1).is_none() {
                return Err(AccessError::ToWrap);
            }
            if !self.backend.contains(to, len) {
                return Err(AccessError::BaseBounds);
            }
            let r = Resolved {
                stag,
                region: STAG0_REGION,
                offset: to,
                len,
                addr: to,
            };
            return Ok((r, Some(Live::Physical)));
        }
        match self.entries.get(&stag.index()) {
            Some(Entry::Mr(mr)) if mr.key == stag.key() => {
                if !mr.valid {
                    return Err(AccessError::Invalidated);
                }
                if mr.pd != pd {
                    return Err(AccessError::PdMismatch);
                }
                if !mr.access.contains(need) || !qp_allows {
                    return Err(AccessError::AccessRights);
                }
                let r = self.resolved_in_mr(stag, stag.index(), mr, to, len)?;
                Ok((r, mr.mapping.as_ref().map(Live::Mapped)))
            }
            Some(Entry::Mw(mw)) if remote && mw.key == stag.key() => {
                let b = mw.binding.ok_or(AccessError::Invalidated)?;
                if b.qp != qp {
                    return Err(AccessError::NotAssociated);
                }
                if !b.access.contains(need) || !qp_allows {
                    return Err(AccessError::AccessRights);
                }
                let rel = check_range(b.base_to, b.len, to, len)?;
                let Some(Entry::Mr(mr)) = self.entries.get(&b.mr) else {
                    return Err(AccessError::Invalidated);
                };
                let map = mr.mapping.as_ref().ok_or(AccessError::Invalidated)?;
                let offset = b.mr_offset + rel;
                let r = Resolved {
                    stag,
                    region: b.mr,
                    offset,
                    len,
                    addr: Self::translate(map, offset),
                };
                Ok((r, Some(Live::Mapped(map))))
            }
            Some(Entry::Inline { pd: owner, data }) if !remote && stag.key() == 0 => {
                if *owner != pd {
                    return Err(AccessError::PdMismatch);
                }
                if need.contains(Access::LOCAL_WRITE) {
                    return Err(AccessError::AccessRights);
                }
                let rel = check_range(0, data.len() as u64, to, len)?;
                let r = Resolved {
                    stag,
                    region: stag.index(),
                    offset: rel,
                    len,
                    addr: rel,
                };
                Ok((r, Some(Live::Inline(data))))
            }
            _ => Err(AccessError::InvalidStag),
        }
    }

    /// [`MemoryTable::resolve`], also giving where the range lives (none for a zero-length
    /// access).
    fn resolve_live(
        &self,
        stag: STag,
        pd: PdId,
        stream: StreamId,
        to: u64,
        len: u64,
        need: Access,
    ) -> Result<(Resolved, Option<Live<'_>>), AccessError> {
        let qp = QpId(stream.0);
        let rights = self.streams.get(&qp);
        let qp_allows = rights.is_some_and(|s| {
            (!need.contains(Access::REMOTE_READ) || s.inbound_read)
                && (!need.contains(Access::REMOTE_WRITE) || s.inbound_write)
                && (!need.contains(Access::REMOTE_ATOMIC) || s.inbound_atomic)
        });
        let privileged = rights.is_some_and(|s| s.privileged);
        let result = self.check_access_live(stag, pd, qp, to, len, need, privileged, qp_allows);
        // Local writes of an S-RQ QP are receive placements into S-RQ WQEs, whose SGEs
        // are checked against the S-RQ's PD (VERBS-00 §6.3.5).
        match (result, rights.and_then(|s| s.srq_pd)) {
            (Err(AccessError::PdMismatch), Some(srq_pd))
                if need == Access::LOCAL_WRITE && srq_pd != pd =>
            {
                self.check_access_live(stag, srq_pd, qp, to, len, need, privileged, qp_allows)
            }
            (result, _) => result,
        }
    }

    fn resolved_in_mr(
        &self,
        stag: STag,
        index: u32,
        mr: &Mr,
        to: u64,
        len: u64,
    ) -> Result<Resolved, AccessError> {
        let map = mr.mapping.as_ref().ok_or(AccessError::Invalidated)?;
        let rel = check_range(mr.base_to, map.len, to, len)?;
        Ok(Resolved {
            stag,
            region: index,
            offset: rel,
            len,
            addr: Self::translate(map, rel),
        })
    }

    fn translate(map: &Mapping, rel: u64) -> u64 {
        let pos = map.fbo + rel;
        // Page sizes are powers of two (`check_pbl`).
        let page = (pos >> map.page_size.trailing_zeros()) as usize;
        map.pages.get(page).copied().unwrap_or(0) + (pos & (map.page_size - 1))
    }

    /// Checks a resolved range is still accessible (the STag was not invalidated,
    /// deallocated or re-keyed since it was resolved, VERBS-00 §7.9, §7.10.4.1) and returns
    /// where it lives; an inline buffer is returned as such, whatever its key (one lookup
    /// per access).
    fn live(&self, r: &Resolved) -> Result<Live<'_>, AccessError> {
        if r.region == STAG0_REGION && r.stag.0 == 0 {
            return Ok(Live::Physical);
        }
        match self.entries.get(&r.stag.index()) {
            Some(Entry::Inline { data, .. }) => Ok(Live::Inline(data)),
            Some(Entry::Mr(mr)) if mr.key == r.stag.key() && mr.valid => mr
                .mapping
                .as_ref()
                .map(Live::Mapped)
                .ok_or(AccessError::Invalidated),
            Some(Entry::Mw(mw)) if mw.key == r.stag.key() => {
                let b = mw.binding.ok_or(AccessError::Invalidated)?;
                match self.entries.get(&b.mr) {
                    Some(Entry::Mr(mr)) if b.mr == r.region => mr
                        .mapping
                        .as_ref()
                        .map(Live::Mapped)
                        .ok_or(AccessError::Invalidated),
                    _ => Err(AccessError::Invalidated),
                }
            }
            _ => Err(AccessError::Invalidated),
        }
    }

    /// The backend address of a resolved range's first octet when the whole range is one
    /// backend range that the backend holds (physical, or pages adjacent in the backend);
    /// `None` otherwise (pages apart, inline data, no longer live).
    fn one_range(&self, r: &Resolved) -> Option<u64> {
        if r.len == 0 {
            return None;
        }
        self.start_of(r, self.live(r).ok()?)
    }

    /// [`MemoryModel::one_range`] of a range of one octet or more, with where it lives
    /// already found (a zero-length access has no `Live`).
    #[inline(always)]
    fn start_of(&self, r: &Resolved, live: Live<'_>) -> Option<u64> {
        let start = match live {
            Live::Inline(_) => return None,
            Live::Physical => r.offset,
            Live::Mapped(map) => map.one_range(r.offset, r.len)?,
        };
        self.backend.contains(start, r.len).then_some(start)
    }

    /// The backend range(s) holding `len` (> 0) octets at `off` of a resolved range that
    /// lives at `live`: page by page, physically adjacent pages as one range, all checked
    /// before any is used.
    #[inline(always)]
    fn span(
        &self,
        r: &Resolved,
        off: u64,
        len: usize,
        live: Result<Live<'_>, AccessError>,
    ) -> Result<Span, AccessError> {
        match off.checked_add(len as u64) {
            Some(end) if end <= r.len => {}
            _ => return Err(AccessError::BaseBounds),
        }
        match live? {
            Live::Inline(_) => Err(AccessError::Invalidated),
            Live::Physical => {
                let start = usize::try_from(r.offset + off).map_err(|_| AccessError::BaseBounds)?;
                if !self.backend.contains(start as u64, len as u64) {
                    return Err(AccessError::BaseBounds);
                }
                Ok(Span::One(start as u64))
            }
            Live::Mapped(map) => self.mapped_span(map, r.offset + off, len),
        }
    }

    /// The backend range(s) holding `len` (> 0) octets at `offset` of the region mapped by
    /// `map`, checked as [`MemoryModel::span`] checks them.
    #[inline(always)]
    fn mapped_span(&self, map: &Mapping, offset: u64, len: usize) -> Result<Span, AccessError> {
        // Page sizes are powers of two (`check_pbl`).
        let shift = map.page_size.trailing_zeros();
        let mask = map.page_size - 1;
        let mut pos = map.fbo + offset;
        let first = (pos >> shift) as usize;
        let last = ((pos + len as u64 - 1) >> shift) as usize;
        let pages = map.pages.get(first..=last).ok_or(AccessError::BaseBounds)?;
        if pages
            .windows(2)
            .all(|w| w[1].wrapping_sub(w[0]) == map.page_size)
        {
            // One backend range: checked as a whole, as its pages would be.
            let start = pages[0] + (pos & mask);
            if !self.backend.contains(start, len as u64) {
                return Err(AccessError::BaseBounds);
            }
            return Ok(Span::One(start));
        }
        let mut out = Chunks::default();
        let mut left = len as u64;
        for &base in pages {
            let in_page = pos & mask;
            let n = left.min(map.page_size - in_page);
            let start = (base + in_page) as usize;
            if !self.backend.contains(start as u64, n) {
                return Err(AccessError::BaseBounds);
            }
            out.push(start, n as usize);
            pos += n;
            left -= n;
        }
        Ok(Span::Pages(out))
    }

    /// Copies `data` into a checked span.
    #[inline(always)]
    fn write_span(&mut self, span: Span, data: &[u8]) -> Result<(), AccessError> {
        let written = match span {
            Span::One(start) => self.backend.write(start, data),
            Span::Pages(chunks) => chunks
                .with_parts()
                .all(|(backend, part)| self.backend.write(backend.start as u64, &data[part])),
        };
        written.then_some(()).ok_or(AccessError::BaseBounds)
    }

    /// Executes a Bind MW work request posted on `ctx.qp` (VERBS-00 §7.10.2, checks of
    /// §7.10.6.1, Figs. 19 and 20).
    pub(super) fn bind(
        &mut self,
        ctx: &LocalContext,
        spec: &BindSpec,
    ) -> Result<(), CompletionStatus> {
        use CompletionStatus as S;
        let mw = match self.entries.get(&spec.mw.index()) {
            Some(Entry::Mw(mw)) if spec.mw.index() != 0 => mw,
            _ => return Err(S::InvalidWindow),
        };
        if mw.binding.is_some() {
            return Err(S::StagNotInvalid);
        }
        if !ctx.bind_enabled {
            return Err(S::AccessViolation);
        }
        let mw_pd = mw.pd;
        let mr = match self.entries.get(&spec.mr.index()) {
            Some(Entry::Mr(mr)) if spec.mr.0 != 0 && mr.key == spec.mr.key() && mr.valid => mr,
            _ => return Err(S::InvalidRegion),
        };
        if mw_pd != ctx.pd || mr.pd != ctx.pd {
            return Err(S::InvalidPdId);
        }
        if mr.zero_based {
            return Err(S::InvalidRegion);
        }
        let a = spec.access;
        let remote = a.contains(Access::REMOTE_READ) || a.contains(Access::REMOTE_WRITE);
        if !mr.access.contains(Access::BIND)
            || !remote
            || (a.contains(Access::REMOTE_READ) && !mr.access.contains(Access::LOCAL_READ))
            || (a.contains(Access::REMOTE_WRITE) && !mr.access.contains(Access::LOCAL_WRITE))
            || (a.contains(Access::REMOTE_ATOMIC)
                && !mr.access.contains(Access::LOCAL_READ | Access::LOCAL_WRITE))
        {
            return Err(S::AccessViolation);
        }
        let len = mr.mapping.as_ref().map_or(0, |m| m.len);
        let rel = check_range(mr.base_to, len, spec.mr_to, spec.len).map_err(local_status)?;
        let binding = MwBinding {
            qp: ctx.qp,
            mr: spec.mr.index(),
            mr_offset: rel,
            len: spec.len,
            base_to: if spec.zero_based { 0 } else { spec.mr_to },
            access: a,
        };
        if let Some(Entry::Mr(mr)) = self.entries.get_mut(&spec.mr.index()) {
            mr.bound_windows += 1;
        }
        if let Some(Entry::Mw(mw)) = self.entries.get_mut(&spec.mw.index()) {
            mw.key = spec.mw.key();
            mw.binding = Some(binding);
        }
        Ok(())
    }

    /// Executes a Fast-Register work request (VERBS-00 §7.3.2.5; statuses of Fig. 36).
    pub(super) fn fast_register(
        &mut self,
        ctx: &LocalContext,
        spec: &FastRegSpec,
    ) -> Result<(), CompletionStatus> {
        use CompletionStatus as S;
        if !ctx.privileged {
            return Err(S::QpNotPrivileged);
        }
        let mr = match self.entries.get(&spec.stag.index()) {
            Some(Entry::Mr(mr)) if spec.stag.index() != 0 && !mr.shared => mr,
            _ => return Err(S::InvalidStag),
        };
        if mr.pd != ctx.pd {
            return Err(S::InvalidPdId);
        }
        if mr.valid {
            return Err(S::StagNotInvalid);
        }
        let capacity = mr.pbl_capacity;
        let remote_flag = mr.remote_access;
        let pbl = &spec.pbl;
        if pbl.pages.len() > capacity as usize {
            return Err(S::PblTooLong);
        }
        if let Err(e) = self.check_pbl(pbl, spec.base, capacity) {
            return Err(match e {
                VerbError::InvalidPhysicalBufferSize => S::InvalidPageSize,
                VerbError::InvalidPblEntry => S::InvalidPblEntry,
                VerbError::InvalidFbo => S::InvalidFbo,
                VerbError::InvalidVirtualAddress => S::InvalidVirtualAddress,
                _ => S::InvalidFastRegLength,
            });
        }
        if !mr_access_valid(spec.access, remote_flag) || self.writes_read_only(pbl, spec.access) {
            return Err(S::InvalidAccessRights);
        }
        let new = MrSpec {
            pbl: pbl.clone(),
            base: spec.base,
            pd: ctx.pd,
            key: spec.stag.key(),
            remote_access: remote_flag,
            access: spec.access,
        };
        self.install_mr(spec.stag.index(), &new, capacity);
        Ok(())
    }

    /// Executes an Invalidate Local STag (or the invalidation of RDMA Read with Invalidate
    /// Local STag) posted on `ctx.qp` (VERBS-00 §7.8, §7.10.4, §7.10.6.3).
    pub(super) fn invalidate_local(
        &mut self,
        ctx: &LocalContext,
        stag: STag,
    ) -> Result<(), CompletionStatus> {
        use CompletionStatus as S;
        let index = stag.index();
        match self.entries.get_mut(&index) {
            Some(Entry::Mr(mr)) if stag.0 != 0 => {
                if mr.shared || mr.key != stag.key() {
                    return Err(S::InvalidStag);
                }
                if mr.pd != ctx.pd {
                    return Err(S::InvalidPdId);
                }
                if mr.bound_windows > 0 {
                    return Err(S::AccessViolation);
                }
                mr.valid = false;
                Ok(())
            }
            Some(Entry::Mw(mw)) if stag.0 != 0 => {
                match mw.binding {
                    Some(b) => {
                        if mw.key != stag.key() {
                            return Err(S::InvalidStag);
                        }
                        if b.qp != ctx.qp {
                            return Err(S::InvalidPdId);
                        }
                        mw.binding = None;
                        mw.pd = ctx.pd;
                        self.unbind_from_mr(b.mr);
                    }
                    None if mw.pd != ctx.pd => return Err(S::InvalidPdId),
                    None => {}
                }
                Ok(())
            }
            _ => Err(S::InvalidStag),
        }
    }

    /// [`MemoryTable::read_granted`], adding what it reads to `digest` when there is one.
    #[inline]
    fn read_granted_with(
        &self,
        r: &Resolved,
        grant: &mut ReadGrant,
        off: u64,
        out: &mut [u8],
        digest: Option<&mut CrcSum>,
    ) -> Result<(), AccessError> {
        if out.is_empty() {
            return Ok(());
        }
        let generation = self.generation();
        match grant.held(generation) {
            Some(Some(start)) => {
                match off.checked_add(out.len() as u64) {
                    Some(end) if end <= r.len => {}
                    _ => return Err(AccessError::BaseBounds),
                }
                let read = match digest {
                    Some(d) => self.backend.read_digest(start + off, out, d),
                    None => self.backend.read(start + off, out),
                };
                return read.then_some(()).ok_or(AccessError::BaseBounds);
            }
            Some(None) => self.read(r, off, out)?,
            None => {
                self.read(r, off, out)?;
                *grant = ReadGrant::new(generation, self.one_range(r));
            }
        }
        if let Some(d) = digest {
            d.extend(out);
        }
        Ok(())
    }
}

impl MemoryTable for MemoryModel {
    fn table_generation(&self) -> Option<u64> {
        Some(self.generation())
    }

    /// Remote access check (VERBS-00 §7.4.2, §7.6.3, §7.10.6.2; RFC 5040 §8.1.1): STag 0
    /// is never usable remotely; all 32 STag bits are compared; the QP's inbound enables
    /// and the STag's rights must both allow the access (Fig. 21); MWs check only their own
    /// rights and their QP; zero-length accesses are not checked (§7.6.3).
    fn resolve(
        &self,
        stag: STag,
        pd: PdId,
        stream: StreamId,
        to: u64,
        len: u64,
        need: Access,
    ) -> Result<Resolved, AccessError> {
        self.resolve_live(stag, pd, stream, to, len, need)
            .map(|(r, _)| r)
    }

    /// [`MemoryTable::resolve`] then [`MemoryTable::write`] with the one lookup of the STag
    /// both need (nothing can change the table between them). The consecutive segments of
    /// one Write skip the lookups: the checks that depend only on the table (STag, state,
    /// PD, rights, association) passed for the previous segment and the table has not
    /// changed since; the range check is made for every segment (RFC 5041 §7.2, §8.1).
    fn place(
        &mut self,
        stag: STag,
        pd: PdId,
        stream: StreamId,
        to: u64,
        data: &[u8],
        need: Access,
    ) -> Result<(), AccessError> {
        if let Some(g) = &self.grant {
            if let Some(start) = g.one {
                if g.holds(self.generation(), stag, pd, stream, need) && !data.is_empty() {
                    let rel = check_range(g.base, g.size, to, data.len() as u64)?;
                    // One backend range: `write` refuses what `contains` would.
                    return self
                        .backend
                        .write(start + rel, data)
                        .then_some(())
                        .ok_or(AccessError::BaseBounds);
                }
            }
        }
        self.place_checked(stag, pd, stream, to, data, need)
    }

    fn write(&mut self, r: &Resolved, off: u64, data: &[u8]) -> Result<(), AccessError> {
        if data.is_empty() {
            return Ok(());
        }
        let span = match self.live(r) {
            Ok(Live::Inline(_)) => return Err(AccessError::AccessRights),
            live => self.span(r, off, data.len(), live)?,
        };
        self.write_span(span, data)
    }

    fn read(&self, r: &Resolved, off: u64, out: &mut [u8]) -> Result<(), AccessError> {
        if out.is_empty() {
            return Ok(());
        }
        let live = self.live(r);
        if let Ok(Live::Inline(data)) = live {
            let start = r.offset.checked_add(off).ok_or(AccessError::BaseBounds)?;
            let src = usize::try_from(start)
                .ok()
                .and_then(|st| data.get(st..st.checked_add(out.len())?))
                .ok_or(AccessError::BaseBounds)?;
            out.copy_from_slice(src);
            return Ok(());
        }
        let read = match self.span(r, off, out.len(), live)? {
            Span::One(start) => self.backend.read(start, out),
            Span::Pages(chunks) => chunks
                .with_parts()
                .all(|(backend, part)| self.backend.read(backend.start as u64, &mut out[part])),
        };
        read.then_some(()).ok_or(AccessError::BaseBounds)
    }

    /// A grant holds the backend address of a range that is one backend range (the usual
    /// registration: contiguous pages), so the next reads are a length compare and a copy.
    #[inline]
    fn read_granted(
        &self,
        r: &Resolved,
        grant: &mut ReadGrant,
        off: u64,
        out: &mut [u8],
    ) -> Result<(), AccessError> {
        self.read_granted_with(r, grant, off, out, None)
    }

    /// The granted read as [`MemoryTable::read_granted`] makes it, the octets summed in the
    /// backend's copy where the backend can.
    #[inline]
    fn read_granted_digest(
        &self,
        r: &Resolved,
        grant: &mut ReadGrant,
        off: u64,
        out: &mut [u8],
        digest: &mut CrcSum,
    ) -> Result<(), AccessError> {
        self.read_granted_with(r, grant, off, out, Some(digest))
    }

    fn atomic(&mut self, r: &Resolved, f: &mut dyn FnMut(u64) -> u64) -> Result<u64, AccessError> {
        let mut cell = [0u8; 8];
        self.read(r, 0, &mut cell)?;
        let original = u64::from_ne_bytes(cell);
        self.write(r, 0, &f(original).to_ne_bytes())?;
        Ok(original)
    }

    /// Remote invalidation by an incoming Send with Invalidate (VERBS-00 §7.8, §7.10.6.3;
    /// digest D6/D16): STag 0, Shared MRs, MRs of another PD or with bound windows, and
    /// windows bound to another QP cannot be invalidated; the QP and the STag must both
    /// have a remote right.
    fn invalidate(&mut self, stag: STag, pd: PdId, stream: StreamId) -> Result<(), AccessError> {
        if stag.0 == 0 {
            return Err(AccessError::CannotInvalidate);
        }
        let qp = QpId(stream.0);
        let qp_remote = self
            .streams
            .get(&qp)
            .is_some_and(|s| s.inbound_read || s.inbound_write);
        let unbind = match self.entries.get_mut(&stag.index()) {
            Some(Entry::Mr(mr)) if mr.key == stag.key() => {
                if mr.shared || mr.pd != pd || mr.bound_windows > 0 {
                    return Err(AccessError::CannotInvalidate);
                }
                if !mr.access.any_remote() || !qp_remote {
                    return Err(AccessError::AccessRights);
                }
                mr.valid = false;
                None
            }
            Some(Entry::Mw(mw)) if mw.key == stag.key() => match mw.binding {
                Some(b) if b.qp != qp => return Err(AccessError::CannotInvalidate),
                Some(b) => {
                    if !qp_remote {
                        return Err(AccessError::AccessRights);
                    }
                    mw.binding = None;
                    Some(b.mr)
                }
                None if mw.pd != pd => return Err(AccessError::CannotInvalidate),
                None => None,
            },
            _ => return Err(AccessError::InvalidStag),
        };
        if let Some(mr) = unbind {
            self.unbind_from_mr(mr);
        }
        Ok(())
    }
}
