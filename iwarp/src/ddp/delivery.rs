//! Placement may happen out of order, Delivery must happen in the sender's order
//! (RFC 5041 §1.2, §5.3, §5.4). The LLP (MPA) names each segment's place in the stream with
//! a [`SegmentPos`]; [`DeliveryOrder`] holds what arrived early until the gap before it
//! closes: either the next segment starts exactly where the previous one ended, or the LLP
//! reports that every segment starting before some position has been handed in (for
//! coordinates with holes between segments, e.g. MPA markers between FPDUs).

use std::collections::VecDeque;

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
///
/// The records are kept sorted by start in a `VecDeque`: segments held early arrive almost
/// in order (each behind the previous one), so an insert is a push at the back after one
/// comparison, and the in-order stream takes them from the front.
#[derive(Debug, Clone)]
pub struct DeliveryOrder<T> {
    next: u64,
    /// `(start, end, record)`, sorted by `start`, no two with the same start.
    held: VecDeque<(u64, u64, T)>,
    limit: usize,
}

impl<T> DeliveryOrder<T> {
    /// Starts at position `start`, holding at most `limit` early segments.
    pub fn new(start: u64, limit: usize) -> Self {
        DeliveryOrder {
            next: start,
            held: VecDeque::new(),
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

    /// Where a record starting at `start` is held (`Ok`) or would be inserted (`Err`):
    /// searched from the back, where early segments usually go.
    fn search(&self, start: u64) -> Result<usize, usize> {
        match self.held.back() {
            None => Err(0),
            Some(&(last, _, _)) if last < start => Err(self.held.len()),
            Some(&(last, _, _)) if last == start => Ok(self.held.len() - 1),
            _ => self.held.binary_search_by_key(&start, |&(s, _, _)| s),
        }
    }

    /// Whether `pos` was already delivered or is held.
    pub fn is_duplicate(&self, pos: SegmentPos) -> bool {
        pos.start < self.next || self.search(pos.start).is_ok()
    }

    /// Offers a record for `pos`.
    pub fn offer(&mut self, pos: SegmentPos, record: T) -> Offer {
        if pos.start < self.next || pos.end <= pos.start {
            return Offer::Duplicate;
        }
        let Err(at) = self.search(pos.start) else {
            return Offer::Duplicate;
        };
        if !self.is_next(pos) && self.held.len() >= self.limit {
            return Offer::Full;
        }
        if at == self.held.len() {
            self.held.push_back((pos.start, pos.end, record));
        } else {
            self.held.insert(at, (pos.start, pos.end, record));
        }
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
        // In order nothing is held; behind a hole the next one is usually at the front
        // (records before `next` stay only after a segment delivered directly ran past them).
        let &(first, _, _) = self.held.front()?;
        let (_, end, rec) = match first.cmp(&self.next) {
            std::cmp::Ordering::Equal => self.held.pop_front()?,
            std::cmp::Ordering::Greater => return None,
            std::cmp::Ordering::Less => {
                let at = self.search(self.next).ok()?;
                self.held.remove(at)?
            }
        };
        self.next = end;
        Some(rec)
    }

    /// The LLP handed in every segment that starts before `position`: the earliest held
    /// record is released if it starts before it (call repeatedly until `None`).
    pub fn pop_before(&mut self, position: u64) -> Option<T> {
        let &(start, _, _) = self.held.front()?;
        if start >= position {
            return None;
        }
        let (_, end, rec) = self.held.pop_front()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// The map-based order the sorted queue replaced: the reference it must agree with.
    struct MapOrder {
        next: u64,
        held: BTreeMap<u64, (u64, u32)>,
        limit: usize,
    }

    impl MapOrder {
        fn is_duplicate(&self, pos: SegmentPos) -> bool {
            pos.start < self.next || self.held.contains_key(&pos.start)
        }

        fn offer(&mut self, pos: SegmentPos, record: u32) -> Offer {
            if self.is_duplicate(pos) || pos.end <= pos.start {
                return Offer::Duplicate;
            }
            if pos.start != self.next && self.held.len() >= self.limit {
                return Offer::Full;
            }
            self.held.insert(pos.start, (pos.end, record));
            Offer::Accepted
        }

        fn advance(&mut self, pos: SegmentPos) -> bool {
            if pos.start != self.next || pos.end <= pos.start {
                return false;
            }
            self.next = pos.end;
            true
        }

        fn pop_ready(&mut self) -> Option<u32> {
            let (end, rec) = self.held.remove(&self.next)?;
            self.next = end;
            Some(rec)
        }

        fn pop_before(&mut self, position: u64) -> Option<u32> {
            let (&start, _) = self.held.iter().next()?;
            if start >= position {
                return None;
            }
            let (end, rec) = self.held.remove(&start)?;
            self.next = self.next.max(end);
            Some(rec)
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Offer(u64, u64),
        Advance(u64, u64),
        PopReady,
        PopBefore(u64),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..64, 0u64..6).prop_map(|(s, l)| Op::Offer(s, l)),
            2 => (0u64..64, 0u64..12).prop_map(|(s, l)| Op::Advance(s, l)),
            3 => Just(Op::PopReady),
            1 => (0u64..72).prop_map(Op::PopBefore),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// RFC 5041 §5.3, §7.2: segments placed in any arrival order (early, late,
        /// overlapping, duplicated, beyond the limit) are delivered in the sender's order;
        /// the sorted queue gives every answer the map gave, op by op.
        #[test]
        fn sorted_queue_matches_the_map(ops in proptest::collection::vec(op(), 0..200),
                                        limit in 1usize..8) {
            let mut q = DeliveryOrder::new(0, limit);
            let mut m = MapOrder { next: 0, held: BTreeMap::new(), limit };
            for (id, op) in ops.into_iter().enumerate() {
                let id = id as u32;
                match op {
                    Op::Offer(s, l) => {
                        let pos = SegmentPos { start: s, end: s + l };
                        prop_assert_eq!(q.is_duplicate(pos), m.is_duplicate(pos));
                        prop_assert_eq!(q.offer(pos, id), m.offer(pos, id));
                    }
                    Op::Advance(s, l) => {
                        let pos = SegmentPos { start: s, end: s + l };
                        prop_assert_eq!(q.advance(pos), m.advance(pos));
                    }
                    Op::PopReady => prop_assert_eq!(q.pop_ready(), m.pop_ready()),
                    Op::PopBefore(p) => prop_assert_eq!(q.pop_before(p), m.pop_before(p)),
                    Op::Clear => {
                        q.clear();
                        m.held.clear();
                    }
                }
                prop_assert_eq!(q.next_position(), m.next);
                prop_assert_eq!(q.held(), m.held.len());
            }
        }
    }

    /// RFC 5041 §5.3: records held behind a hole come out in order once it is filled, and a
    /// record the in-order stream ran past stays until the LLP's position releases it.
    #[test]
    fn held_records_come_out_in_order_behind_the_hole() {
        let mut q = DeliveryOrder::new(0, 8);
        assert_eq!(
            q.offer(SegmentPos { start: 20, end: 30 }, 'c'),
            Offer::Accepted
        );
        assert_eq!(
            q.offer(SegmentPos { start: 10, end: 20 }, 'b'),
            Offer::Accepted
        );
        assert_eq!(
            q.offer(SegmentPos { start: 10, end: 20 }, 'x'),
            Offer::Duplicate
        );
        assert_eq!(q.pop_ready(), None);
        assert!(q.advance(SegmentPos { start: 0, end: 10 }));
        assert_eq!(q.pop_ready(), Some('b'));
        assert_eq!(q.pop_ready(), Some('c'));
        assert_eq!(q.pop_ready(), None);
        assert_eq!(q.next_position(), 30);
        assert_eq!(
            q.offer(SegmentPos { start: 35, end: 40 }, 'd'),
            Offer::Accepted
        );
        assert!(q.advance(SegmentPos { start: 30, end: 50 }));
        assert_eq!(q.pop_ready(), None);
        assert_eq!(q.held(), 1);
        assert_eq!(q.pop_before(50), Some('d'));
        assert_eq!(q.next_position(), 50);
        assert_eq!(q.held(), 0);
    }
}
