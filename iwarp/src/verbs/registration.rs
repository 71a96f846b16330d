//! Memory management verbs (VERBS-00 §7.3, §7.7, §7.9, §7.10.1, §9.2.6).

use super::handle::UlpId;
use super::memory::{MrAttributes, MrSpec, MwAttributes, TaggedBase};
use super::rnic::Rnic;
use super::status::VerbError;
use crate::mem::{Access, PdId, STag};

impl Rnic {
    /// Checks the STag count of the PD's ULP against its quota and the RNIC limit.
    fn stag_room(&self, pd: PdId, mw: bool) -> Result<(), VerbError> {
        let ulp = self.pd_owner(pd)?;
        let (count, max) = if mw {
            (self.memory.mw_count(), self.attrs.max_mws)
        } else {
            (self.memory.mr_count(), self.attrs.max_mrs)
        };
        let pds: Vec<PdId> = self
            .pds
            .iter()
            .filter(|(_, u)| **u == ulp)
            .map(|(p, _)| *p)
            .collect();
        if count >= max as usize
            || self.memory.stags_in(&pds) as u64 >= u64::from(self.quota(ulp).max_stags)
        {
            return Err(VerbError::InsufficientResources);
        }
        Ok(())
    }

    /// Allocate Non-Shared MR STag (VERBS-00 §7.3.2.1, §9.2.6.1): an Invalid STag (key 0)
    /// with room for `pbl_entries` pages, usable by Fast-Register and RI-Reregister.
    pub fn alloc_mr_stag(
        &mut self,
        pd: PdId,
        pbl_entries: u32,
        remote_access: bool,
    ) -> Result<STag, VerbError> {
        self.stag_room(pd, false)?;
        self.memory.allocate_mr(pd, pbl_entries, remote_access)
    }

    /// RI-Register Non-Shared MR (VERBS-00 §7.3.2.2, §9.2.6.2). Returns the STag
    /// `(index << 8) | key`; a failed registration consumes nothing (§7.3).
    pub fn register_mr(&mut self, spec: &MrSpec) -> Result<STag, VerbError> {
        self.stag_room(spec.pd, false)?;
        self.memory.register(spec)
    }

    /// Leaves the STag indices with [`super::memory::LANE_STAG_BIT`] to
    /// [`Rnic::register_mr_at`]: this RNIC is one of several (a data plane's lanes) that
    /// hold the same regions under the same STags.
    pub fn reserve_lane_stags(&mut self) {
        self.memory.reserve_lane_stags();
    }

    /// Registers `spec` under the STag index `index` (which has
    /// [`super::memory::LANE_STAG_BIT`]; [`Rnic::reserve_lane_stags`] first), as every RNIC
    /// sharing the region does. The region behaves as a Shared MR: Invalidate, Reregister
    /// and Fast-Register are refused, only [`Rnic::dealloc_stag`] removes it. Fails with
    /// `InvalidStagIndex` when the index is taken or not reserved.
    pub fn register_mr_at(&mut self, index: u32, spec: &MrSpec) -> Result<STag, VerbError> {
        self.stag_room(spec.pd, false)?;
        self.memory.register_at(index, spec)
    }

    /// RI-Reregister Non-Shared MR (VERBS-00 §7.3.2.3, §9.2.6.5) keeping the index.
    /// Refused without change if windows are bound or the index is bad; any other failure
    /// deallocates the region.
    pub fn reregister_mr(&mut self, stag: STag, spec: &MrSpec) -> Result<STag, VerbError> {
        if self.pd_owner(spec.pd).is_err() {
            if self.memory.query_mr(stag.index()).is_ok() {
                let _ = self.memory.deallocate(stag.index());
            }
            return Err(VerbError::InvalidPdId);
        }
        self.memory.reregister(stag.index(), spec)
    }

    /// Register Shared MR (VERBS-00 §7.3.2.4, §9.2.6.6): a new STag over the PBL of the
    /// Valid region `source` (whose key must match); the source becomes Shared for good.
    pub fn register_shared_mr(
        &mut self,
        source: STag,
        base: TaggedBase,
        pd: PdId,
        key: u8,
        remote_access: bool,
        access: Access,
    ) -> Result<STag, VerbError> {
        self.stag_room(pd, false)?;
        self.memory
            .register_shared(source, base, pd, key, remote_access, access)
    }

    /// Query MR (VERBS-00 §9.2.6.3).
    pub fn query_mr(&self, stag: STag) -> Result<MrAttributes, VerbError> {
        self.memory.query_mr(stag.index())
    }

    /// Deallocate STag of an MR or MW (VERBS-00 §7.9, §7.10.4, §9.2.6.4): state and key are
    /// not checked; refused while windows are bound to the MR.
    pub fn dealloc_stag(&mut self, stag: STag) -> Result<(), VerbError> {
        self.memory.deallocate(stag.index())
    }

    /// Allocate MW (VERBS-00 §7.10.1, §9.2.6.7): an Invalid window STag (key 0) in `pd`.
    pub fn alloc_mw(&mut self, pd: PdId) -> Result<STag, VerbError> {
        self.stag_room(pd, true)?;
        Ok(self.memory.allocate_mw(pd))
    }

    /// Query MW (VERBS-00 §9.2.6.8).
    pub fn query_mw(&self, stag: STag) -> Result<MwAttributes, VerbError> {
        self.memory.query_mw(stag.index())
    }

    /// The ULP owning a PD.
    pub fn pd_ulp(&self, pd: PdId) -> Result<UlpId, VerbError> {
        self.pd_owner(pd)
    }
}
