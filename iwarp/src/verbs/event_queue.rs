//! The RNIC's bounded event queues: asynchronous events and CQ notifications wait here
//! until the consumer polls them, up to a capacity; what does not fit is counted and lost
//! (VERBS-00 §8.3.3: events nobody handles are lost), so an RNIC nobody drains holds a
//! fixed amount of memory however long it runs.

use std::collections::VecDeque;

/// The state of one bounded queue (for monitoring).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Items waiting now.
    pub depth: usize,
    /// Most items the queue holds.
    pub capacity: usize,
    /// Most items that ever waited at once.
    pub high_water: usize,
    /// Items offered, queued or not.
    pub offered: u64,
    /// Items refused because the queue was full (lost).
    pub overflows: u64,
}

/// Both event queues of an RNIC ([`super::Rnic::event_queue_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventQueueStats {
    /// Asynchronous events ([`super::Rnic::poll_async_event`]).
    pub async_events: QueueStats,
    /// CQs whose armed notification fired ([`super::Rnic::poll_completion_event`]).
    pub cq_events: QueueStats,
}

/// A FIFO that refuses (and counts) what exceeds its capacity.
#[derive(Debug, Clone)]
pub(super) struct BoundedQueue<T> {
    items: VecDeque<T>,
    stats: QueueStats,
}

impl<T> BoundedQueue<T> {
    /// An empty queue holding at most `capacity` items (at least one).
    pub(super) fn new(capacity: usize) -> Self {
        BoundedQueue {
            items: VecDeque::new(),
            stats: QueueStats {
                capacity: capacity.max(1),
                ..QueueStats::default()
            },
        }
    }

    /// Queues `item`; returns false (and counts an overflow) when the queue is full.
    pub(super) fn push(&mut self, item: T) -> bool {
        self.stats.offered += 1;
        if self.items.len() >= self.stats.capacity {
            self.stats.overflows += 1;
            return false;
        }
        self.items.push_back(item);
        self.stats.high_water = self.stats.high_water.max(self.items.len());
        true
    }

    /// Whether nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The oldest item.
    pub(super) fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    /// True when an item equal to `item` waits.
    pub(super) fn contains(&self, item: &T) -> bool
    where
        T: PartialEq,
    {
        self.items.contains(item)
    }

    /// Depth, capacity, high-water mark and counters.
    pub(super) fn stats(&self) -> QueueStats {
        QueueStats {
            depth: self.items.len(),
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_and_counts_beyond_capacity() {
        let mut q = BoundedQueue::new(2);
        assert!(q.push(1));
        assert!(q.push(2));
        assert!(!q.push(3));
        assert_eq!(q.pop(), Some(1));
        assert!(q.push(4));
        let s = q.stats();
        assert_eq!(
            (s.depth, s.capacity, s.high_water, s.offered, s.overflows),
            (2, 2, 2, 4, 1)
        );
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(2), Some(4), None));
        assert_eq!(BoundedQueue::<u8>::new(0).stats().capacity, 1);
    }
}
