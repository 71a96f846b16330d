//! Protection Domains (VERBS-00 §5.2, §9.2.2).

use super::handle::UlpId;
use super::rnic::Rnic;
use super::status::VerbError;
use crate::mem::PdId;

impl Rnic {
    /// Allocate PD (VERBS-00 §9.2.2.1) on behalf of `ulp`. Every object later created in
    /// this PD belongs to the same ULP.
    pub fn alloc_pd(&mut self, ulp: UlpId) -> Result<PdId, VerbError> {
        if self.pds.len() >= self.attrs.max_pds as usize {
            return Err(VerbError::InsufficientResources);
        }
        let pd = PdId(self.new_handle());
        self.pds.insert(pd, ulp);
        Ok(pd)
    }

    /// Deallocate PD (VERBS-00 §9.2.2.2): refused while any QP, S-RQ, MR or MW (bound or
    /// not) is in it (§5.2.2).
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), VerbError> {
        if !self.pds.contains_key(&pd) {
            return Err(VerbError::InvalidPdId);
        }
        let in_use = self.qps.values().any(|qp| qp.pd == pd)
            || self.srqs.values().any(|srq| srq.pd == pd)
            || self.memory.uses_pd(pd);
        if in_use {
            return Err(VerbError::PdInUse);
        }
        self.pds.remove(&pd);
        Ok(())
    }

    pub(super) fn pd_owner(&self, pd: PdId) -> Result<UlpId, VerbError> {
        self.pds.get(&pd).copied().ok_or(VerbError::InvalidPdId)
    }
}
