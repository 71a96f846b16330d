//! Handles and identifiers of the verbs resources: the consumer (ULP), Completion Event
//! Handlers, CQs, S-RQs and QPs.

use crate::mem::StreamId;

/// Identifies the consumer (ULP) on whose behalf resources are created; objects of
/// different ULPs never share CQs (RFC 5040 §8.1.1 item 9) and quotas are per ULP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UlpId(pub u32);

/// Identifies a Completion Event Handler (VERBS-00 §9.4.1); given at Create CQ so the
/// consumer can route a CQ's notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CompletionHandlerId(pub u32);

/// A Completion Queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqHandle(pub u32);

/// A Shared Receive Queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqHandle(pub u32);

/// A Queue Pair's ID, which is also its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpId(pub u32);

impl QpId {
    /// The RDMAP/DDP stream identifier of this QP, as used by the memory table.
    pub fn stream(self) -> StreamId {
        StreamId(self.0)
    }
}
