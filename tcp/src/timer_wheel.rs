//! A hashed timing wheel: the engine's connection timers, filed by due time in O(1).
//!
//! Entries are `(due, key)` pairs filed in the slot of their tick (`due >> TICK_SHIFT`, about
//! a millisecond) modulo [`SLOTS`]; an entry more than a turn of the wheel away waits in its
//! slot and is passed over until its turn. [`TimerWheel::expire`] takes every entry due at
//! `now`, exactly the entries a heap would pop at the same time; [`TimerWheel::peek`]
//! names the earliest entry (cached between changes).

use crate::time::Instant;

/// Nanoseconds per tick, as a shift: 2^20 ns, about 1.05 ms.
const TICK_SHIFT: u32 = 20;
/// Slots in the wheel (a turn of about 268 ms).
const SLOTS: usize = 256;

fn tick(at: Instant) -> u64 {
    at.as_nanos() >> TICK_SHIFT
}

fn slot_of(tick: u64) -> usize {
    (tick % SLOTS as u64) as usize
}

/// The wheel; `K` names what is due (a connection).
#[derive(Debug)]
pub(crate) struct TimerWheel<K> {
    slots: Vec<Vec<(Instant, K)>>,
    /// Every tick before this one has been swept: no entry is due before its start,
    /// entries due earlier than that are filed in this tick's slot.
    swept: u64,
    len: usize,
    /// The earliest entry and its slot, when known.
    earliest: Option<(Instant, K, usize)>,
    /// Whether `earliest` is up to date.
    earliest_known: bool,
}

impl<K: Copy + Ord> Default for TimerWheel<K> {
    fn default() -> Self {
        TimerWheel {
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            swept: 0,
            len: 0,
            earliest: None,
            earliest_known: true,
        }
    }
}

impl<K: Copy + Ord> TimerWheel<K> {
    /// Files `key` to come due at `at`.
    #[inline]
    pub(crate) fn push(&mut self, at: Instant, key: K) {
        let slot = slot_of(tick(at).max(self.swept));
        self.slots[slot].push((at, key));
        self.len += 1;
        if self.earliest_known && self.earliest.is_none_or(|(d, k, _)| (at, key) < (d, k)) {
            self.earliest = Some((at, key, slot));
        }
    }

    /// The earliest entry (ties: the smallest key).
    pub(crate) fn peek(&mut self) -> Option<(Instant, K)> {
        if !self.earliest_known {
            self.earliest = self.find_earliest();
            self.earliest_known = true;
        }
        self.earliest.map(|(d, k, _)| (d, k))
    }

    /// Removes the entry [`TimerWheel::peek`] named.
    pub(crate) fn pop_earliest(&mut self) {
        if self.peek().is_none() {
            return;
        }
        let Some((d, k, slot)) = self.earliest.take() else {
            return;
        };
        let entries = &mut self.slots[slot];
        if let Some(i) = entries.iter().position(|&e| e == (d, k)) {
            entries.swap_remove(i);
            self.len -= 1;
        }
        self.earliest_known = false;
    }

    /// Moves every entry due at `now` (due no later than it) to `due`, earliest first
    /// (ties: the smallest key first).
    pub(crate) fn expire(&mut self, now: Instant, due: &mut Vec<(Instant, K)>) {
        let now_tick = tick(now);
        if self.len == 0 || now_tick < self.swept {
            self.swept = self.swept.max(now_tick);
            return;
        }
        let first = due.len();
        let span = (now_tick - self.swept).min(SLOTS as u64 - 1);
        for t in now_tick - span..=now_tick {
            let entries = &mut self.slots[slot_of(t)];
            let mut i = 0;
            while i < entries.len() {
                if entries[i].0 <= now {
                    due.push(entries.swap_remove(i));
                } else {
                    i += 1;
                }
            }
        }
        self.swept = now_tick;
        let taken = due.len() - first;
        if taken > 0 {
            self.len -= taken;
            self.earliest_known = false;
            due[first..].sort_unstable();
        }
    }

    /// The earliest entry, looked for slot by slot from the swept tick.
    fn find_earliest(&self) -> Option<(Instant, K, usize)> {
        if self.len == 0 {
            return None;
        }
        let best = |slot: usize, upto: Option<u64>| {
            self.slots[slot]
                .iter()
                .filter(|&&(d, _)| upto.is_none_or(|t| tick(d) <= t))
                .min()
                .map(|&(d, k)| (d, k, slot))
        };
        // Every entry's tick is at least `swept` (earlier ones are filed in its slot): the
        // first tick with an entry of its own holds the earliest.
        for t in self.swept..self.swept + SLOTS as u64 {
            if let Some(e) = best(slot_of(t), Some(t)) {
                return Some(e);
            }
        }
        (0..SLOTS).filter_map(|s| best(s, None)).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// The timers the engine keeps, over either structure: one deadline per connection,
    /// a queued entry per earlier deadline armed, stale entries dropped when met, entries
    /// whose deadline moved later re-filed (as `Engine::handle_timeout` does).
    trait Queue {
        fn push(&mut self, at: Instant, k: u32);
        fn peek(&mut self) -> Option<(Instant, u32)>;
        fn pop(&mut self);
        fn expire(&mut self, now: Instant) -> Vec<(Instant, u32)>;
    }

    impl Queue for TimerWheel<u32> {
        fn push(&mut self, at: Instant, k: u32) {
            TimerWheel::push(self, at, k)
        }
        fn peek(&mut self) -> Option<(Instant, u32)> {
            TimerWheel::peek(self)
        }
        fn pop(&mut self) {
            self.pop_earliest()
        }
        fn expire(&mut self, now: Instant) -> Vec<(Instant, u32)> {
            let mut due = Vec::new();
            TimerWheel::expire(self, now, &mut due);
            due
        }
    }

    /// The reference: the binary heap the engine used before.
    impl Queue for BinaryHeap<Reverse<(Instant, u32)>> {
        fn push(&mut self, at: Instant, k: u32) {
            BinaryHeap::push(self, Reverse((at, k)))
        }
        fn peek(&mut self) -> Option<(Instant, u32)> {
            BinaryHeap::peek(self).map(|r| r.0)
        }
        fn pop(&mut self) {
            BinaryHeap::pop(self);
        }
        fn expire(&mut self, now: Instant) -> Vec<(Instant, u32)> {
            let mut due = Vec::new();
            while BinaryHeap::peek(self).is_some_and(|r| r.0 .0 <= now) {
                due.push(BinaryHeap::pop(self).unwrap().0);
            }
            due
        }
    }

    #[derive(Default)]
    struct Timers<Q> {
        q: Q,
        /// Each connection's deadline and the due time of its queued entry.
        conns: Vec<(Option<Instant>, Option<Instant>)>,
    }

    impl<Q: Queue> Timers<Q> {
        fn schedule(&mut self, k: u32) {
            let (deadline, timer_at) = &mut self.conns[k as usize];
            if let Some(d) = *deadline {
                if timer_at.is_none_or(|t| d < t) {
                    *timer_at = Some(d);
                    self.q.push(d, k);
                }
            }
        }

        /// The connections whose deadline fired at `now`, in firing order.
        fn poll(&mut self, now: Instant) -> Vec<u32> {
            let mut fired = Vec::new();
            for (d, k) in self.q.expire(now) {
                let (deadline, timer_at) = &mut self.conns[k as usize];
                if *timer_at != Some(d) {
                    continue;
                }
                match *deadline {
                    Some(t) if t > now => {
                        *timer_at = Some(t);
                        self.q.push(t, k);
                    }
                    None => *timer_at = None,
                    Some(_) => {
                        *timer_at = None;
                        *deadline = None;
                        fired.push(k);
                    }
                }
            }
            fired
        }

        /// `Engine::poll_timeout`: the earliest live entry.
        fn next(&mut self) -> Option<Instant> {
            while let Some((d, k)) = self.q.peek() {
                if self.conns[k as usize].1 == Some(d) {
                    return Some(d);
                }
                self.q.pop();
            }
            None
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Arm (or move) a connection's deadline to `now + micros`.
        Arm(u32, u64),
        Cancel(u32),
        /// Advance the clock and run the timers.
        Advance(u64),
        /// Ask for the next deadline.
        Next,
    }

    const CONNS: u32 = 24;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..CONNS, prop_oneof![0u64..3_000, 0u64..600_000, 0u64..5_000_000])
                .prop_map(|(k, us)| Op::Arm(k, us)),
            1 => (0..CONNS).prop_map(Op::Cancel),
            3 => prop_oneof![0u64..500, 0u64..5_000, 0u64..400_000].prop_map(Op::Advance),
            1 => Just(Op::Next),
        ]
    }

    proptest! {
        /// Every deadline fires at the same poll with the wheel as with the heap (so no
        /// earlier than it is due and no later than the heap would fire it), and both name
        /// the same next deadline.
        #[test]
        fn the_wheel_fires_what_the_heap_fires(
            start in 0u64..u64::MAX / 4,
            ops in proptest::collection::vec(op(), 1..400),
        ) {
            let mut wheel = Timers::<TimerWheel<u32>> {
                conns: vec![(None, None); CONNS as usize],
                ..Timers::default()
            };
            let mut heap = Timers::<BinaryHeap<Reverse<(Instant, u32)>>> {
                conns: vec![(None, None); CONNS as usize],
                ..Timers::default()
            };
            let mut now = Instant::from_nanos(start);
            for op in ops {
                match op {
                    Op::Arm(k, us) => {
                        let at = now.saturating_add_micros(us);
                        wheel.conns[k as usize].0 = Some(at);
                        heap.conns[k as usize].0 = Some(at);
                        wheel.schedule(k);
                        heap.schedule(k);
                    }
                    Op::Cancel(k) => {
                        wheel.conns[k as usize].0 = None;
                        heap.conns[k as usize].0 = None;
                    }
                    Op::Advance(us) => {
                        now = now.saturating_add_micros(us);
                        let (mut w, mut h) = (wheel.poll(now), heap.poll(now));
                        w.sort_unstable();
                        h.sort_unstable();
                        prop_assert_eq!(w, h);
                    }
                    Op::Next => prop_assert_eq!(wheel.next(), heap.next()),
                }
                prop_assert_eq!(&wheel.conns, &heap.conns);
            }
        }
    }

    #[test]
    fn an_entry_a_turn_away_waits_for_its_turn() {
        let mut w = TimerWheel::default();
        let t0 = Instant::from_nanos(1 << 40);
        let far = t0.saturating_add_micros(2_000_000);
        w.push(far, 1u32);
        let mut due = Vec::new();
        // The slot of `far` is swept several times before it is due.
        let mut now = t0;
        while now < far {
            w.expire(now, &mut due);
            assert!(due.is_empty(), "fired at {now:?}, due at {far:?}");
            assert_eq!(w.peek(), Some((far, 1)));
            now = now.saturating_add_micros(700);
        }
        w.expire(far, &mut due);
        assert_eq!(due, vec![(far, 1)]);
        assert_eq!(w.peek(), None);
    }
}
