//! Placement may happen out of order, Delivery must happen in the sender's order
//! (RFC 5041 §1.2, §5.3, §5.4). The LLP (MPA) names each segment's place in the stream with
//! a [`SegmentPos`]; [`DeliveryOrder`] holds what arrived early until the gap before it
//! closes: either the next segment starts exactly where the previous one ended, or the LLP
//! reports that every segment starting before some position has been handed in (for
//! coordinates with holes between segments, e.g. MPA markers between FPDUs).

use std::collections::BTreeMap;

/// Position of a DDP segment in the sender's order: `start..end` in any monotone coordinate
/// where consecutive segments satisfy `next.start == prev.end` (MPA: the FPDU's TCP stream
/// offsets; a simple counter `i..i+1` also works).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SegmentPos {
    /// First position of the segment.
    pub start: u64,
    /// One past its last position.
    pub end: u64,
}

impl SegmentPos {
    /// The `index`-th segment of a stream counted by a plain counter.
    pub fn index(index: u64) -> Self {
        SegmentPos {
            start: index,
            end: index + 1,
        }
    }
}

/// Outcome of offering a segment to [`DeliveryOrder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// New segment, accepted.
    Accepted,
    /// Already delivered or already held: ignore it.
    Duplicate,
    /// Too many segments held early; the LLP must keep the bytes and offer it again later.
    Full,
}

/// Holds per-segment records until every earlier segment was offered.
#[derive(Debug, Clone)]
pub struct DeliveryOrder<T> {
    next: u64,
    held: BTreeMap<u64, (u64, T)>,
    limit: usize,
}

impl<T> DeliveryOrder<T> {
    /// Starts at position `start`, holding at most `limit` early segments.
    pub fn new(start: u64, limit: usize) -> Self {
        DeliveryOrder {
            next: start,
            held: BTreeMap::new(),
            limit,
        }
    }

    /// The position the next in-order segment must start at.
    pub fn next_position(&self) -> u64 {
        self.next
    }

    /// Whether `pos` is the next segment in order.
    pub fn is_next(&self, pos: SegmentPos) -> bool {
        pos.start == self.next
    }

    /// Whether `pos` was already delivered or is held.
    pub fn is_duplicate(&self, pos: SegmentPos) -> bool {
        pos.start < self.next || (!self.held.is_empty() && self.held.contains_key(&pos.start))
    }

    /// Offers a record for `pos`.
    pub fn offer(&mut self, pos: SegmentPos, record: T) -> Offer {
        if self.is_duplicate(pos) || pos.end <= pos.start {
            return Offer::Duplicate;
        }
        if !self.is_next(pos) && self.held.len() >= self.limit {
            return Offer::Full;
        }
        self.held.insert(pos.start, (pos.end, record));
        Offer::Accepted
    }

    /// Records that the next in-order segment, `pos`, was delivered directly without being
    /// held. Returns false (and changes nothing) when `pos` is not the next segment.
    pub fn advance(&mut self, pos: SegmentPos) -> bool {
        if !self.is_next(pos) || pos.end <= pos.start {
            return false;
        }
        self.next = pos.end;
        true
    }

    /// The next record in order, if it has arrived.
    pub fn pop_ready(&mut self) -> Option<T> {
        if self.held.is_empty() {
            // The usual case, in order: no call into the map.
            return None;
        }
        let (end, rec) = self.held.remove(&self.next)?;
        self.next = end;
        Some(rec)
    }

    /// The LLP handed in every segment that starts before `position`: the earliest held
    /// record is released if it starts before it (call repeatedly until `None`).
    pub fn pop_before(&mut self, position: u64) -> Option<T> {
        let (&start, _) = self.held.iter().next()?;
        if start >= position {
            return None;
        }
        let (end, rec) = self.held.remove(&start)?;
        self.next = self.next.max(end);
        Some(rec)
    }

    /// Number of records held.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Drops every held record (stream stopped: placed but undelivered data is never
    /// delivered, VERBS-00 §6.4).
    pub fn clear(&mut self) {
        self.held.clear();
    }
}
