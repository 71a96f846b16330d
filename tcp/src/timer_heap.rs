//! The engine's timer queue: a min-heap with four children per node, each node's children
//! in one 64-octet cache line.
//!
//! With many connections the queue holds thousands of entries and every sift walks it
//! from the root to a leaf; a binary heap reads one cold line per level, this one half as
//! many levels and still one line per level (the four children of a node are what a
//! sift-down compares, and they share a line).

/// Entries per group, a cache line's worth of 16-octet entries.
const ARITY: usize = 4;
/// Heap position of the root: positions 0–2 are unused, so that the children of position
/// `k` (`ARITY * k - 8 ..= ARITY * k - 5`) are always one whole group.
const ROOT: usize = 3;

/// Four entries, aligned to a cache line.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Group<T>([T; ARITY]);

/// A min-heap of `T` (the engine's `(deadline, connection)` pairs): the least entry first.
#[derive(Debug)]
pub(crate) struct TimerHeap<T> {
    groups: Vec<Group<T>>,
    len: usize,
}

impl<T: Ord + Copy> TimerHeap<T> {
    /// An empty heap.
    pub(crate) fn new() -> Self {
        TimerHeap {
            groups: Vec::new(),
            len: 0,
        }
    }

    /// How many entries it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn get(&self, pos: usize) -> T {
        self.groups[pos / ARITY].0[pos % ARITY]
    }

    fn set(&mut self, pos: usize, v: T) {
        self.groups[pos / ARITY].0[pos % ARITY] = v;
    }

    /// The least entry.
    pub(crate) fn peek(&self) -> Option<T> {
        (self.len > 0).then(|| self.get(ROOT))
    }

    /// Adds `v`.
    pub(crate) fn push(&mut self, v: T) {
        let mut pos = ROOT + self.len;
        if pos / ARITY >= self.groups.len() {
            // The group's unused places hold copies of `v` until entries fill them.
            self.groups.push(Group([v; ARITY]));
        }
        self.len += 1;
        while pos > ROOT {
            let parent = pos / ARITY + 2;
            let p = self.get(parent);
            if p <= v {
                break;
            }
            self.set(pos, p);
            pos = parent;
        }
        self.set(pos, v);
    }

    /// Removes and returns the least entry.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let top = self.peek()?;
        self.len -= 1;
        if self.len > 0 {
            let last = self.get(ROOT + self.len);
            self.sift_down(last);
        }
        Some(top)
    }

    /// Replaces the least entry with `v` (one sift instead of a pop and a push); false
    /// when the heap is empty.
    pub(crate) fn replace_top(&mut self, v: T) -> bool {
        if self.len == 0 {
            return false;
        }
        self.sift_down(v);
        true
    }

    /// Puts `v` at the root's place and moves it down to where it belongs.
    fn sift_down(&mut self, v: T) {
        let end = ROOT + self.len;
        let mut pos = ROOT;
        loop {
            let first = ARITY * pos - 8;
            if first >= end {
                break;
            }
            let group = &self.groups[first / ARITY].0;
            let n = (end - first).min(ARITY);
            let (mut least, mut at) = (group[0], 0);
            for (i, &c) in group.iter().enumerate().take(n).skip(1) {
                if c < least {
                    least = c;
                    at = i;
                }
            }
            if v <= least {
                break;
            }
            self.set(pos, least);
            pos = first + at;
        }
        self.set(pos, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// A small deterministic generator (xorshift) for the sequences below.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn children_of_a_position_are_one_group() {
        for pos in ROOT..1000 {
            let first = ARITY * pos - 8;
            assert_eq!(first % ARITY, 0);
            for c in first..first + ARITY {
                assert_eq!(c / ARITY + 2, pos, "parent of {c}");
            }
        }
        assert_eq!(std::mem::align_of::<Group<(u64, u64)>>(), 64);
        assert_eq!(std::mem::size_of::<Group<(u64, u64)>>(), 64);
    }

    /// Pushes, pops and in-place replacements in random order give the same entries in the
    /// same order as the standard library's binary heap.
    #[test]
    fn same_order_as_binary_heap() {
        for seed in 1..40u64 {
            let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut ours = TimerHeap::new();
            let mut std = BinaryHeap::new();
            for _ in 0..3000 {
                match next(&mut s) % 8 {
                    0..=3 => {
                        let v = (next(&mut s) % 500, next(&mut s) % 50);
                        ours.push(v);
                        std.push(Reverse(v));
                    }
                    4 | 5 => assert_eq!(ours.pop(), std.pop().map(|r| r.0)),
                    6 => {
                        let v = (next(&mut s) % 500, next(&mut s) % 50);
                        let replaced = ours.replace_top(v);
                        match std.peek_mut() {
                            Some(mut top) => {
                                assert!(replaced);
                                *top = Reverse(v);
                            }
                            None => assert!(!replaced),
                        }
                    }
                    _ => assert_eq!(ours.peek(), std.peek().map(|r| r.0)),
                }
                assert_eq!(ours.len(), std.len());
            }
            while let Some(v) = std.pop() {
                assert_eq!(ours.pop(), Some(v.0));
            }
            assert_eq!(ours.pop(), None);
            assert_eq!(ours.peek(), None);
        }
    }
}
