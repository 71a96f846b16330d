//! Completion Queues (VERBS-00 §5.3, §8.2.4, §8.2.5, §9.2.3, §9.3.2).

use std::collections::VecDeque;

use super::event::{AsyncEvent, AsyncEventKind, EventResource};
use super::handle::{CompletionHandlerId, CqHandle, QpId, UlpId};
use super::queues::{Cq, NotifyType, WqKind};
use super::rnic::Rnic;
use super::status::VerbError;
use super::wc::WorkCompletion;

/// Result of Query CQ (VERBS-00 §9.2.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqAttributes {
    /// Number of entries the CQ can hold.
    pub entries: u32,
    /// Number of CQEs currently on the CQ.
    pub occupancy: u32,
    /// The ULP owning the CQ.
    pub ulp: UlpId,
    /// Its Completion Event Handler.
    pub handler: Option<CompletionHandlerId>,
    /// Completions that found the CQ full (each a CQ Overflow Detected event on the CQ and
    /// a CQ/SQ or CQ/RQ error on its QP).
    pub overflows: u64,
}

impl Rnic {
    /// Create CQ (VERBS-00 §9.2.3.1). Returns the handle and the actual number of entries
    /// (at least `min_entries`).
    pub fn create_cq(
        &mut self,
        ulp: UlpId,
        min_entries: u32,
    ) -> Result<(CqHandle, u32), VerbError> {
        self.create_cq_with_handler(ulp, min_entries, None)
    }

    /// Create CQ with a Completion Event Handler identifier (VERBS-00 §9.2.3.1).
    pub fn create_cq_with_handler(
        &mut self,
        ulp: UlpId,
        min_entries: u32,
        handler: Option<CompletionHandlerId>,
    ) -> Result<(CqHandle, u32), VerbError> {
        if handler.is_some_and(|h| !self.handlers.contains(&h)) {
            return Err(VerbError::InvalidCompletionHandlerId);
        }
        if min_entries > self.attrs.max_cqes_per_cq {
            return Err(VerbError::CqeExceedsCapability);
        }
        if self.cqs.len() >= self.attrs.max_cqs as usize {
            return Err(VerbError::InsufficientResources);
        }
        let entries = min_entries.max(1);
        let held: u64 = self
            .cqs
            .values()
            .filter(|cq| cq.ulp == ulp)
            .map(|cq| u64::from(cq.capacity))
            .sum();
        if held + u64::from(entries) > self.quota(ulp).max_cqes {
            return Err(VerbError::InsufficientResources);
        }
        let handle = CqHandle(self.new_handle());
        self.cqs.insert(
            handle,
            Cq {
                ulp,
                capacity: entries,
                entries: VecDeque::with_capacity(entries as usize),
                notify: None,
                handler,
                overflows: 0,
                flush_blocked: Vec::new(),
            },
        );
        Ok((handle, entries))
    }

    /// Every CQ of the RNIC, by handle (monitoring, with [`Rnic::query_cq`]).
    pub fn cq_handles(&self) -> Vec<CqHandle> {
        let mut v: Vec<CqHandle> = self.cqs.keys().copied().collect();
        v.sort_by_key(|c| c.0);
        v
    }

    /// Query CQ (VERBS-00 §9.2.3.2).
    pub fn query_cq(&self, cq: CqHandle) -> Result<CqAttributes, VerbError> {
        let c = self.cqs.get(&cq).ok_or(VerbError::InvalidCqHandle)?;
        Ok(CqAttributes {
            entries: c.capacity,
            occupancy: c.entries.len() as u32,
            ulp: c.ulp,
            handler: c.handler,
            overflows: c.overflows,
        })
    }

    /// Modify CQ (resize, VERBS-00 §5.3.3, §9.2.3.3): atomic, never below the current
    /// occupancy, never loses a WC.
    pub fn resize_cq(&mut self, cq: CqHandle, min_entries: u32) -> Result<u32, VerbError> {
        let max = self.attrs.max_cqes_per_cq;
        let c = self.cqs.get_mut(&cq).ok_or(VerbError::InvalidCqHandle)?;
        if min_entries > max {
            return Err(VerbError::CqeExceedsCapability);
        }
        if (min_entries as usize) < c.entries.len() {
            return Err(VerbError::ShrinkBelowOccupancy);
        }
        c.capacity = min_entries.max(1);
        let actual = c.capacity;
        self.resume_flushing(cq);
        Ok(actual)
    }

    /// Destroy CQ (VERBS-00 §9.2.3.4): refused while any work queue uses it.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), VerbError> {
        if !self.cqs.contains_key(&cq) {
            return Err(VerbError::InvalidCqHandle);
        }
        if self.qps.values().any(|qp| qp.sq_cq == cq || qp.rq_cq == cq) {
            return Err(VerbError::CqInUse);
        }
        self.cqs.remove(&cq);
        Ok(())
    }

    /// Poll CQ (VERBS-00 §9.3.2.1): the oldest WC, each returned once; `CqEmpty` when none.
    /// Polling frees the WQE slot of the completed WR.
    /// An empty CQ (a poll loop's usual answer) costs the look-up and the check, inline.
    #[inline]
    pub fn poll_cq(&mut self, cq: CqHandle) -> Result<WorkCompletion, VerbError> {
        let c = self.cqs.get_mut(&cq).ok_or(VerbError::InvalidCqHandle)?;
        let (wc, kind) = c.entries.pop_front().ok_or(VerbError::CqEmpty)?;
        if c.entries.is_empty() {
            // The ring starts again at its first entry: a CQ sized for many QPs (the
            // capacity is allocated at creation) but emptied by every poll loop keeps its
            // WCs in a few lines, not in a lap over the whole buffer (cold lines and, on the
            // first lap, page faults on every push).
            c.entries.clear();
        }
        self.polled(cq, wc.qp, kind);
        Ok(wc)
    }

    /// What polling a WC of `qp` off `cq` frees: its WQE slot, and room for flushing.
    #[inline(never)]
    fn polled(&mut self, cq: CqHandle, qp: QpId, kind: WqKind) {
        self.retire_slot(qp, kind);
        self.resume_flushing(cq);
    }

    /// Request Completion Notification (VERBS-00 §8.2.5, §9.3.2.2): one-shot; CQEs already
    /// on the CQ do not trigger it; "next completion" wins over "next solicited".
    pub fn request_notification(
        &mut self,
        cq: CqHandle,
        kind: NotifyType,
    ) -> Result<(), VerbError> {
        let c = self.cqs.get_mut(&cq).ok_or(VerbError::InvalidCqHandle)?;
        c.notify = Some(c.notify.map_or(kind, |k| k.max(kind)));
        Ok(())
    }

    /// Puts a CQE on `cq`. On overflow the CQE is dropped, an unaffiliated "CQ Overflow
    /// Detected" event is raised and `false` is returned: the caller then moves the QP to
    /// Terminate with a CQ/SQ or CQ/RQ error (VERBS-00 Fig. 24). Other CQs and QPs are not
    /// affected (RFC 5040 §8.1.1 item 10).
    pub(super) fn push_wc(&mut self, cq: CqHandle, wc: WorkCompletion, kind: WqKind) -> bool {
        let Some(c) = self.cqs.get_mut(&cq) else {
            return false;
        };
        if c.entries.len() >= c.capacity as usize {
            c.overflows += 1;
            log::warn!("CQ {cq:?} overflow, completion of QP {:?} dropped", wc.qp);
            self.raise(AsyncEvent {
                resource: EventResource::Cq(cq),
                kind: AsyncEventKind::CqOverflow,
            });
            return false;
        }
        let fire = match c.notify {
            Some(NotifyType::NextCompletion) => true,
            Some(NotifyType::NextSolicited) => wc.solicited || !wc.status.is_success(),
            None => false,
        };
        c.entries.push_back((wc, kind));
        if fire {
            c.notify = None;
            if !self.cq_events.contains(&cq) {
                self.cq_events.push(cq);
            }
        }
        true
    }

    /// Free room on `cq`.
    pub(super) fn cq_room(&self, cq: CqHandle) -> usize {
        self.cqs
            .get(&cq)
            .map_or(0, |c| (c.capacity as usize).saturating_sub(c.entries.len()))
    }

    /// Resumes the QPs whose flush stopped because `cq` was full ([`Rnic::flush`] lists
    /// them); O(1) when none waits.
    fn resume_flushing(&mut self, cq: CqHandle) {
        let Some(c) = self.cqs.get_mut(&cq) else {
            return;
        };
        if c.flush_blocked.is_empty() {
            return;
        }
        let mut waiting = std::mem::take(&mut c.flush_blocked).into_iter();
        for qp in waiting.by_ref() {
            self.flush(qp);
            if self.cq_room(cq) == 0 {
                break;
            }
        }
        // The ones not tried wait first, then any the flushes above listed again.
        if let Some(c) = self.cqs.get_mut(&cq) {
            let again = std::mem::take(&mut c.flush_blocked);
            c.flush_blocked = waiting.chain(again).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::rnic::{AddressingMode, RnicAttributes, RnicDevice};
    use super::super::status::CompletionStatus;
    use super::super::wc::WcOpcode;
    use super::*;
    use crate::mem::HeapBackend;

    /// A CQ emptied by each poll keeps its WCs at the start of its buffer (VERBS-00
    /// §9.3.2.1: each WC is returned once, oldest first, whatever the buffer's order).
    #[test]
    fn an_emptied_cq_starts_again_at_its_first_entry() {
        let device = RnicDevice::new("rnic0", RnicAttributes::default());
        let mut rnic = device
            .open(AddressingMode::Page, Box::new(HeapBackend::new(4096)), 1)
            .expect("open");
        let (cq, _) = rnic.create_cq(UlpId(1), 4096).expect("CQ");
        let start = rnic.cqs[&cq].entries.as_slices().0.as_ptr();
        for round in 0..1000u64 {
            for i in 0..3 {
                let wc = WorkCompletion::new(
                    QpId(7),
                    round * 3 + i,
                    WcOpcode::RdmaWrite,
                    CompletionStatus::Success,
                );
                assert!(rnic.push_wc(cq, wc, WqKind::Sq));
            }
            assert_eq!(
                rnic.cqs[&cq].entries.as_slices().0.as_ptr(),
                start,
                "round {round}: the WCs lie where the buffer starts"
            );
            for i in 0..3 {
                assert_eq!(rnic.poll_cq(cq).expect("a WC").wr_id, round * 3 + i);
            }
            assert_eq!(rnic.poll_cq(cq), Err(VerbError::CqEmpty));
        }
    }
}
