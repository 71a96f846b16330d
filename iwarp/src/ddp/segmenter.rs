//! Sender side: DDP messages → segments no larger than the MULPDU (RFC 5041 §5.2), tagged
//! TO progression, untagged MO progression, per-queue MSNs.

use crate::wire::ddp::{DdpRepr, TaggedRepr, UntaggedRepr, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};

/// Where a DDP message goes at the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageTarget {
    /// Tagged buffer: sink STag and the TO of the first octet.
    Tagged {
        /// Sink STag.
        stag: u32,
        /// Initial TO.
        to: u64,
    },
    /// Untagged buffer: queue, message sequence number and RsvdULP octets 1–4.
    Untagged {
        /// Queue Number.
        qn: u32,
        /// Message Sequence Number.
        msn: u32,
        /// RsvdULP octets 1–4 (RDMAP Invalidate STag or 0).
        rsvd_ulp_word: u32,
    },
}

/// One DDP message to transmit: where it goes, the RsvdULP octet and its payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// Tagged or untagged target.
    pub target: MessageTarget,
    /// RsvdULP octet 0 (RDMAP control), identical on every segment.
    pub rsvd_ulp: u8,
    /// Total DDP payload length (< 2^32).
    pub len: u32,
}

/// One segment to emit: its header and which payload octets of the message it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentPlan {
    /// The DDP header.
    pub header: DdpRepr,
    /// Offset of the first payload octet within the message.
    pub offset: u32,
    /// Payload octets in this segment.
    pub len: u32,
}

/// Splits one message into segments, created lazily with the MULPDU in force at that time
/// (so segments already handed down are never re-segmented, RFC 5041 §3).
#[derive(Debug, Clone)]
pub struct Segmenter {
    msg: OutgoingMessage,
    sent: u32,
    finished: bool,
}

impl Segmenter {
    /// Starts segmenting `msg`.
    pub fn new(msg: OutgoingMessage) -> Self {
        Segmenter {
            msg,
            sent: 0,
            finished: false,
        }
    }

    /// The message being segmented.
    pub fn message(&self) -> &OutgoingMessage {
        &self.msg
    }

    /// Payload octets already segmented.
    pub fn sent(&self) -> u32 {
        self.sent
    }

    /// Whether the L=1 segment has been produced.
    pub fn is_done(&self) -> bool {
        self.finished
    }

    /// Header length of every segment of this message.
    pub fn header_len(&self) -> usize {
        match self.msg.target {
            MessageTarget::Tagged { .. } => TAGGED_HEADER_LEN,
            MessageTarget::Untagged { .. } => UNTAGGED_HEADER_LEN,
        }
    }

    /// The next segment, or `None` when the message is finished or `mulpdu` cannot carry a
    /// header plus one payload octet. A zero-length message is exactly one segment.
    pub fn next_segment(&mut self, mulpdu: usize) -> Option<SegmentPlan> {
        if self.finished {
            return None;
        }
        let room = mulpdu.checked_sub(self.header_len())?;
        let remaining = self.msg.len - self.sent;
        if room == 0 && remaining > 0 {
            return None;
        }
        let len = remaining.min(u32::try_from(room).unwrap_or(u32::MAX));
        let offset = self.sent;
        let last = len == remaining;
        let header = match self.msg.target {
            MessageTarget::Tagged { stag, to } => DdpRepr::Tagged(TaggedRepr {
                last,
                rsvd_ulp: self.msg.rsvd_ulp,
                stag,
                to: to.wrapping_add(u64::from(offset)),
            }),
            MessageTarget::Untagged {
                qn,
                msn,
                rsvd_ulp_word,
            } => DdpRepr::Untagged(UntaggedRepr {
                last,
                rsvd_ulp: self.msg.rsvd_ulp,
                rsvd_ulp_word,
                qn,
                msn,
                mo: offset,
            }),
        };
        self.sent += len;
        self.finished = last;
        Some(SegmentPlan {
            header,
            offset,
            len,
        })
    }
}

/// Outbound MSN per untagged queue: the first message uses 1, then +1 modulo 2^32
/// (RFC 5041 §4.3).
#[derive(Debug, Clone)]
pub struct MsnCounters {
    next: [u32; 4],
}

impl Default for MsnCounters {
    fn default() -> Self {
        MsnCounters { next: [1; 4] }
    }
}

impl MsnCounters {
    /// All queues start at MSN 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// The MSN for the next message on `qn` (0..=3), advancing the counter.
    pub fn take(&mut self, qn: u32) -> u32 {
        let slot = &mut self.next[(qn as usize).min(3)];
        let msn = *slot;
        *slot = slot.wrapping_add(1);
        msn
    }

    /// The MSN the next message on `qn` will use.
    pub fn peek(&self, qn: u32) -> u32 {
        self.next[(qn as usize).min(3)]
    }

    /// Sets the next MSN of a queue (tests of MSN wrap; stream restart).
    pub fn set(&mut self, qn: u32, msn: u32) {
        self.next[(qn as usize).min(3)] = msn;
    }
}
