//! Shared Receive Queues (VERBS-00 §6.3, §9.2.4).

use std::collections::VecDeque;

use super::event::{AsyncEvent, AsyncEventKind, EventResource};
use super::handle::{QpId, SrqHandle};
use super::processing::{check_recv_wr, PostError};
use super::queues::Srq;
use super::rnic::Rnic;
use super::status::VerbError;
use super::wr::RecvWr;
use crate::mem::PdId;

/// Result of Query S-RQ (VERBS-00 §9.2.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttributes {
    /// Max outstanding WRs.
    pub max_wrs: u32,
    /// Max SGEs per WR.
    pub max_sges: u32,
    /// Protection domain.
    pub pd: PdId,
    /// S-RQ limit.
    pub limit: u32,
    /// Limit event armed.
    pub armed: bool,
    /// WQEs available (posted, not yet taken).
    pub available: u32,
}

impl Rnic {
    /// Create S-RQ (VERBS-00 §9.2.4.1). The limit event is armed when `limit` > 0.
    pub fn create_srq(
        &mut self,
        pd: PdId,
        max_wrs: u32,
        max_sges: u32,
        limit: u32,
    ) -> Result<(SrqHandle, u32), VerbError> {
        self.pd_owner(pd)?;
        if self.attrs.max_srqs == 0 || self.srqs.len() >= self.attrs.max_srqs as usize {
            return Err(VerbError::InsufficientResources);
        }
        if max_wrs > self.attrs.max_srq_wrs {
            return Err(VerbError::WrsExceedCapability);
        }
        if max_sges > self.attrs.max_send_recv_sges {
            return Err(VerbError::SgesExceedCapability);
        }
        let max_wrs = max_wrs.max(1);
        if limit > max_wrs {
            return Err(VerbError::SrqLimitOutOfRange);
        }
        let h = SrqHandle(self.new_handle());
        self.srqs.insert(
            h,
            Srq {
                pd,
                max_wrs,
                max_sges,
                limit,
                armed: limit > 0,
                queue: VecDeque::new(),
                slots: 0,
                waiters: VecDeque::new(),
            },
        );
        Ok((h, max_wrs))
    }

    /// Query S-RQ (VERBS-00 §9.2.4.2).
    pub fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttributes, VerbError> {
        let s = self.srqs.get(&srq).ok_or(VerbError::InvalidSrqHandle)?;
        Ok(SrqAttributes {
            max_wrs: s.max_wrs,
            max_sges: s.max_sges,
            pd: s.pd,
            limit: s.limit,
            armed: s.armed,
            available: s.queue.len() as u32,
        })
    }

    /// Modify S-RQ (VERBS-00 §6.3.2, §6.3.8, §9.2.4.3): resize, change the limit, re-arm.
    pub fn modify_srq(
        &mut self,
        srq: SrqHandle,
        max_wrs: Option<u32>,
        limit: Option<u32>,
        arm: bool,
    ) -> Result<u32, VerbError> {
        let cap = self.attrs.max_srq_wrs;
        let s = self.srqs.get_mut(&srq).ok_or(VerbError::InvalidSrqHandle)?;
        let new_max = max_wrs.unwrap_or(s.max_wrs);
        if new_max > cap {
            return Err(VerbError::WrsExceedCapability);
        }
        if new_max < s.slots {
            return Err(VerbError::ShrinkBelowOccupancy);
        }
        let new_limit = limit.unwrap_or(s.limit);
        if limit.is_none() && (arm || s.armed) && new_max < new_limit {
            // §6.3.8: shrinking below an armed limit is an invalid input modifier.
            return Err(VerbError::InvalidModifier);
        }
        if new_limit > new_max {
            return Err(VerbError::SrqLimitOutOfRange);
        }
        s.max_wrs = new_max.max(1);
        s.limit = new_limit;
        if arm {
            s.armed = new_limit > 0;
        }
        Ok(s.max_wrs)
    }

    /// Destroy S-RQ (VERBS-00 §6.3.3): refused while QPs use it; posted WRs are forgotten.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), VerbError> {
        if !self.srqs.contains_key(&srq) {
            return Err(VerbError::InvalidSrqHandle);
        }
        if self.qps.values().any(|q| q.srq == Some(srq)) {
            return Err(VerbError::SrqHasQps);
        }
        self.srqs.remove(&srq);
        Ok(())
    }

    /// PostRQ to an S-RQ (VERBS-00 §9.3.1.2). Returns the number of WRs posted; the first
    /// failing WR stops the list. Each WR posted wakes one of the QPs that found the S-RQ
    /// empty, oldest first ([`Rnic::take_touched_qps`]): O(1) per WR, however many QPs
    /// share the S-RQ.
    pub fn post_srq(&mut self, srq: SrqHandle, wrs: Vec<RecvWr>) -> Result<usize, PostError> {
        let s = self.srqs.get_mut(&srq).ok_or(PostError {
            posted: 0,
            error: VerbError::InvalidSrqHandle,
        })?;
        let mut posted = 0;
        let mut result = Ok(());
        for wr in wrs {
            if let Err(error) = check_recv_wr(&wr, s.slots, s.max_wrs, s.max_sges) {
                result = Err(PostError { posted, error });
                break;
            }
            s.slots += 1;
            s.queue.push_back(wr);
            posted += 1;
        }
        self.wake_srq_waiters(srq, posted);
        result.map(|()| posted)
    }

    /// Wakes up to `n` QPs waiting for WQEs of `srq`, oldest first (destroyed ones are
    /// skipped).
    fn wake_srq_waiters(&mut self, srq: SrqHandle, n: usize) {
        let mut woken = 0;
        while woken < n {
            let Some(qp) = self.srqs.get_mut(&srq).and_then(|s| s.waiters.pop_front()) else {
                return;
            };
            if let Some(q) = self.qps.get_mut(&qp).filter(|q| q.srq_waiting) {
                q.srq_waiting = false;
                self.touch(qp);
                woken += 1;
            }
        }
    }

    /// The QP found `srq` empty (or was woken and took nothing): it waits for the next
    /// post. A QP that will not take WQEs (not in RTS) hands the wake-up it had to the next
    /// waiter while the S-RQ holds some.
    pub(super) fn srq_wait(&mut self, qp: QpId, srq: SrqHandle, will_take: bool) {
        if will_take {
            if let Some(q) = self.qps.get_mut(&qp).filter(|q| !q.srq_waiting) {
                q.srq_waiting = true;
                if let Some(s) = self.srqs.get_mut(&srq) {
                    s.waiters.push_back(qp);
                }
            }
        } else if self.srqs.get(&srq).is_some_and(|s| !s.queue.is_empty()) {
            self.wake_srq_waiters(srq, 1);
        }
    }

    /// Takes one WQE from an S-RQ for a QP; raises the limit event when the number of
    /// available WQEs drops below the armed limit (VERBS-00 §6.3.8).
    pub(super) fn take_srq_wqe(&mut self, srq: SrqHandle) -> Option<RecvWr> {
        let s = self.srqs.get_mut(&srq)?;
        let wr = s.queue.pop_front()?;
        if s.armed && (s.queue.len() as u32) < s.limit {
            s.armed = false;
            self.raise(AsyncEvent {
                resource: EventResource::Srq(srq),
                kind: AsyncEventKind::SrqLimitReached,
            });
        }
        Some(wr)
    }
}
