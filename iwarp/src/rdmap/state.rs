//! The engine's private state: the record of a detected error, send-queue and
//! outstanding-request entries, responses owed to the peer, the records the receive path
//! holds until in-order delivery and the message the transmit path is segmenting.
//!
//! `engine` builds the [`super::Engine`] from these types; `rx` and `tx` fill and drain them.
//! This module imports none of the three.

use super::completion::CompletionStatus;
use super::wr::{CheckedSource, SendWr};
use crate::ddp::segmenter::Segmenter;
use crate::mem::{ReadGrant, Resolved};
use crate::wire::atomic::AtomicResponseRepr;
use crate::wire::ddp::UntaggedRepr;
use crate::wire::rdmap::{Opcode, ReadRequestRepr, READ_REQUEST_LEN};
use crate::wire::terminate::{CopiedDdpHeader, TerminateCause, TERMINATE_MAX_LEN};

/// Largest RDMAP header kept inline for untagged control messages.
pub(super) const INLINE_MAX: usize = TERMINATE_MAX_LEN;

/// Which work request an error belongs to (it completes with a specific status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Culprit {
    None,
    Send(u64, CompletionStatus),
    Recv(u32, CompletionStatus),
}

/// A detected error and the header copies its Terminate carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Failure {
    pub cause: TerminateCause,
    pub segment_len: Option<u16>,
    pub ddp: Option<CopiedDdpHeader>,
    pub rdma: Option<[u8; READ_REQUEST_LEN]>,
    pub culprit: Culprit,
}

impl Failure {
    pub(super) fn bare(cause: TerminateCause, culprit: Culprit) -> Self {
        Failure {
            cause,
            segment_len: None,
            ddp: None,
            rdma: None,
            culprit,
        }
    }
}

/// A posted send-queue work request, kept until it completes in posting order. What
/// its completion reads (`Engine::finish_sq`, `Engine::drain_sq`: the sequence number,
/// the status, the lengths, then the WR's ID and kind) comes first and the entry starts
/// a cache line: with many streams it is cold when its completion comes.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub(super) struct SqEntry {
    pub seq: u64,
    pub atomic_original: Option<u64>,
    pub byte_len: u32,
    pub done: Option<CompletionStatus>,
    pub wr: SendWr,
    /// The verbs layer's check of the source SGL ([`super::Engine::post_checked_send`]).
    pub checked: Option<CheckedSource>,
}

/// An RDMA Read Request sent and not yet fully answered.
#[derive(Debug, Clone)]
pub(super) struct OutstandingRead {
    pub seq: u64,
    pub len: u32,
    pub received: u64,
}

/// An Atomic Request sent and not yet answered.
#[derive(Debug, Clone)]
pub(super) struct OutstandingAtomic {
    pub seq: u64,
    pub request_id: u32,
    pub result: Option<Resolved>,
}

/// A response owed to the peer, generated in request-delivery order.
#[derive(Debug, Clone)]
pub(super) enum Response {
    /// RDMA Read Response from a validated source (None for zero length).
    Read {
        src: Option<Resolved>,
        req: ReadRequestRepr,
        copy: CopiedDdpHeader,
        segment_len: u16,
    },
    /// Atomic Response.
    Atomic(AtomicResponseRepr),
}

/// What the in-order stage needs to know about one placed untagged segment.
#[derive(Debug, Clone)]
pub(super) struct UntaggedRecord {
    pub opcode: Opcode,
    pub hdr: UntaggedRepr,
    pub len: u32,
    pub inline: [u8; INLINE_MAX],
    pub inline_len: usize,
    pub segment_len: u16,
    pub copy: CopiedDdpHeader,
}

impl UntaggedRecord {
    /// The RDMAP header of a control message, as received.
    pub(super) fn inline(&self) -> &[u8] {
        &self.inline[..self.inline_len]
    }

    /// An error found in this segment that fails no particular work request.
    pub(super) fn error(&self, cause: TerminateCause) -> Failure {
        self.failure(cause, Culprit::None)
    }

    /// An error found in this segment, with its header copies.
    pub(super) fn failure(&self, cause: TerminateCause, culprit: Culprit) -> Failure {
        Failure {
            cause,
            segment_len: Some(self.segment_len),
            ddp: Some(self.copy),
            rdma: None,
            culprit,
        }
    }
}

/// Per-segment record held until the segment is delivered in order.
#[derive(Debug, Clone)]
pub(super) enum RxRecord {
    /// A placed tagged segment.
    Tagged {
        opcode: Opcode,
        last: bool,
        len: u32,
        recheck: Option<EarlyTagged>,
    },
    /// A placed / stored untagged segment.
    Untagged(Box<UntaggedRecord>),
    /// Validation failed while in order: report when reached.
    Failed(Failure),
    /// Validation failed out of order: the state may differ once in order, so retry then.
    Retry(Vec<u8>),
}

/// A tagged segment placed before every earlier segment arrived: its STag is checked again
/// when it is reached in order, so an invalidation earlier in the stream still reports the
/// error the in-order stream requires (VERBS-00 §7.8), unless the memory table did not
/// change since the placement's check (the same generation: the check still holds).
#[derive(Debug, Clone)]
pub(super) struct EarlyTagged {
    /// The memory table's generation at the placement's check (`None`: not tracked).
    pub generation: Option<u64>,
    pub stag: u32,
    pub to: u64,
    pub segment_len: u16,
    pub copy: CopiedDdpHeader,
}

/// Where the payload of the message being segmented comes from.
#[derive(Debug, Clone)]
pub(super) enum TxPayload {
    Inline { bytes: [u8; INLINE_MAX], len: usize },
    Gather(Vec<(Option<Resolved>, u32)>),
    Source(Option<Resolved>),
}

/// What happens once the last segment of the message has been sent.
#[derive(Debug, Clone)]
pub(super) enum TxDone {
    Complete(u64),
    AwaitResponse,
    ReadResponse {
        req: ReadRequestRepr,
        copy: CopiedDdpHeader,
        segment_len: u16,
    },
    ReleaseIrd,
}

/// What the last read of the payload's registered memory found, for the next segments:
/// the piece of the gather list it read (0 for a source) and its grant.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PieceGrant {
    pub piece: usize,
    pub grant: ReadGrant,
}

impl PieceGrant {
    /// The grant for piece `piece`: the one held, or a fresh one when another piece held it.
    #[inline]
    pub fn for_piece(&mut self, piece: usize) -> &mut ReadGrant {
        if self.piece != piece {
            *self = PieceGrant {
                piece,
                grant: ReadGrant::default(),
            };
        }
        &mut self.grant
    }
}

/// The message currently being segmented.
#[derive(Debug, Clone)]
pub(super) struct TxMessage {
    pub seg: Segmenter,
    pub payload: TxPayload,
    pub done: TxDone,
    /// Reads of `payload` after the first skip the STag lookup ([`ReadGrant`]).
    pub grant: PieceGrant,
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// An early tagged segment's recheck is held in the record itself, not boxed: the
    /// record stays as large as a held failure makes it anyway.
    #[test]
    fn an_early_tagged_record_is_no_larger_than_a_failed_one() {
        assert!(std::mem::size_of::<EarlyTagged>() <= std::mem::size_of::<Failure>());
    }
}
