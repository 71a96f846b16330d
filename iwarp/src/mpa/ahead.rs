//! The FPDUs an MPA receiver handed up ahead of its in-order position (RFC 5044 §8: FPDUs
//! found in segments that arrive out of order), until the in-order stream reaches them.

use std::collections::VecDeque;
use std::ops::Range;

/// FPDUs handed up ahead: boundary → end, relative stream positions, sorted by boundary.
///
/// A sorted `VecDeque`: FPDUs are found ahead almost in stream order (inserted at the back
/// after one comparison) and passed by the in-order stream from the front, and only a few
/// are outstanding at a time; unlike a map it allocates nothing once it has grown.
#[derive(Debug, Clone, Default)]
pub(crate) struct HandedUpAhead {
    fpdus: VecDeque<(u64, u64)>,
}

impl HandedUpAhead {
    /// Whether none is outstanding.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.fpdus.is_empty()
    }

    /// How many are outstanding.
    pub(crate) fn len(&self) -> usize {
        self.fpdus.len()
    }

    /// Index of the first FPDU whose boundary is not below `pos`.
    fn first_from(&self, pos: u64) -> usize {
        match self.fpdus.front() {
            Some(&(b, _)) if b >= pos => 0,
            _ => self.fpdus.partition_point(|&(b, _)| b < pos),
        }
    }

    /// Whether one starts at `boundary`.
    pub(crate) fn contains(&self, boundary: u64) -> bool {
        self.fpdus
            .get(self.first_from(boundary))
            .is_some_and(|&(b, _)| b == boundary)
    }

    /// Whether one starts inside `range`.
    pub(crate) fn starts_in(&self, range: Range<u64>) -> bool {
        self.fpdus
            .get(self.first_from(range.start))
            .is_some_and(|&(b, _)| b < range.end)
    }

    /// Whether the last one starting before `pos` ends exactly there.
    pub(crate) fn ends_at(&self, pos: u64) -> bool {
        let i = self.first_from(pos);
        i > 0 && self.fpdus[i - 1].1 == pos
    }

    /// Records one from `boundary` to `end` (replacing the end of one at that boundary).
    pub(crate) fn insert(&mut self, boundary: u64, end: u64) {
        match self.fpdus.back() {
            Some(&(last, _)) if last >= boundary => {}
            _ => return self.fpdus.push_back((boundary, end)),
        }
        let i = self.first_from(boundary);
        match self.fpdus.get_mut(i) {
            Some(e) if e.0 == boundary => e.1 = end,
            _ => self.fpdus.insert(i, (boundary, end)),
        }
    }

    /// Forgets the one at `boundary` and returns its end.
    pub(crate) fn remove(&mut self, boundary: u64) -> Option<u64> {
        let i = self.first_from(boundary);
        match self.fpdus.get(i) {
            Some(&(b, _)) if b == boundary => self.fpdus.remove(i).map(|(_, end)| end),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Remove(u64),
        StartsIn(u64, u64),
        EndsAt(u64),
        Contains(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..48, 1u64..8).prop_map(|(b, l)| Op::Insert(b, b + l)),
            3 => (0u64..48).prop_map(Op::Remove),
            2 => (0u64..48, 0u64..10).prop_map(|(a, l)| Op::StartsIn(a, a + l)),
            2 => (0u64..56).prop_map(Op::EndsAt),
            2 => (0u64..48).prop_map(Op::Contains),
        ]
    }

    proptest! {
        /// RFC 5044 §8: FPDUs found ahead in any arrival order (early, late, the same one
        /// twice, overlapping) give the answers the map they were kept in before gave,
        /// query by query.
        #[test]
        fn sorted_queue_matches_the_map(ops in proptest::collection::vec(op(), 0..200)) {
            let mut q = HandedUpAhead::default();
            let mut m: BTreeMap<u64, u64> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(b, e) => {
                        q.insert(b, e);
                        m.insert(b, e);
                    }
                    Op::Remove(b) => prop_assert_eq!(q.remove(b), m.remove(&b)),
                    Op::StartsIn(a, e) => {
                        prop_assert_eq!(q.starts_in(a..e), m.range(a..e).next().is_some())
                    }
                    Op::EndsAt(p) => prop_assert_eq!(
                        q.ends_at(p),
                        m.range(..p).next_back().is_some_and(|(_, &end)| end == p)
                    ),
                    Op::Contains(b) => prop_assert_eq!(q.contains(b), m.contains_key(&b)),
                }
                prop_assert_eq!(q.len(), m.len());
                prop_assert_eq!(q.is_empty(), m.is_empty());
            }
        }
    }
}
