//! A hashed timing wheel: the engine's connection timers, filed by due time in O(1).
//!
//! Entries due within a turn of the wheel ([`SLOTS`] ticks of about 4 ms) are
//! filed in the slot of their tick; later ones wait in an overflow heap and move to their
//! slot as the wheel turns. [`TimerWheel::expire`] takes every entry due at `now`, exactly
//! the entries a heap would pop at the same time; [`TimerWheel::peek_where`] names the
//! earliest live entry (cached between changes), dropping dead ones on the way.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::time::Instant;

/// Nanoseconds per tick, as a shift: 2^22 ns, about 4.2 ms.
const TICK_SHIFT: u32 = 22;
/// Slots in the wheel (a turn of about 4.3 s: retransmission timeouts of a loaded
/// connection stay within it).
const SLOTS: usize = 1024;

fn tick(at: Instant) -> u64 {
    at.as_nanos() >> TICK_SHIFT
}

fn slot_of(tick: u64) -> usize {
    (tick % SLOTS as u64) as usize
}

/// The wheel; `K` names what is due (a connection).
#[derive(Debug)]
pub(crate) struct TimerWheel<K> {
    /// Entries due within a turn from `swept`, by tick; entries due before `swept` are
    /// filed in its slot.
    slots: Vec<Vec<(Instant, K)>>,
    /// Entries due a turn or more from `swept`.
    later: BinaryHeap<Reverse<(Instant, K)>>,
    /// Every tick before this one has been swept.
    swept: u64,
    /// The earliest entry, when known (`None` inside: there is none).
    earliest: Option<Option<(Instant, K)>>,
    /// The time of the last sweep: every entry due then was taken.
    swept_at: Instant,
    /// An entry due at or before `swept_at` was filed since that sweep.
    filed_due: bool,
    /// Slots' buffers emptied by a sweep, for the next slot filed while it has none: the
    /// few slots near the sweep reuse them turn after turn, rather than every slot of the
    /// turn growing a buffer of its own (allocated as the wheel reaches it, and kept).
    spare: Vec<Vec<(Instant, K)>>,
}

impl<K: Copy + Ord> Default for TimerWheel<K> {
    fn default() -> Self {
        TimerWheel {
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            later: BinaryHeap::new(),
            swept: 0,
            earliest: Some(None),
            swept_at: Instant::ZERO,
            filed_due: false,
            spare: Vec::new(),
        }
    }
}

impl<K: Copy + Ord> TimerWheel<K> {
    /// Files `key` to come due at `at`.
    #[inline]
    pub(crate) fn push(&mut self, at: Instant, key: K) {
        self.filed_due |= at <= self.swept_at;
        if self.is_far(at) {
            self.later.push(Reverse((at, key)));
        } else {
            self.file(slot_of(tick(at).max(self.swept)), (at, key));
        }
        if let Some(e) = &mut self.earliest {
            if e.is_none_or(|first| (at, key) < first) {
                *e = Some((at, key));
            }
        }
    }

    /// Whether an entry due at `at`, filed now, waits in the overflow (a turn or more
    /// ahead). Such an entry is neither taken nor moved to a slot while this holds for its
    /// time: only [`TimerWheel::peek_where`] may drop it, when `live` refuses it.
    #[inline]
    pub(crate) fn is_far(&self, at: Instant) -> bool {
        tick(at).max(self.swept) - self.swept >= SLOTS as u64
    }

    /// Puts `entry` in slot `slot`, giving the slot a spare buffer if it has none.
    #[inline]
    fn file(&mut self, slot: usize, entry: (Instant, K)) {
        let entries = &mut self.slots[slot];
        if entries.capacity() == 0 {
            if let Some(b) = self.spare.pop() {
                *entries = b;
            }
        }
        entries.push(entry);
    }

    /// Entries filed and not taken or dropped yet, live or not.
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().map(Vec::len).sum::<usize>() + self.later.len()
    }

    /// The earliest entry `live` keeps (ties: the smallest key); the entries it refuses
    /// on the way are dropped.
    pub(crate) fn peek_where(
        &mut self,
        mut live: impl FnMut(Instant, K) -> bool,
    ) -> Option<(Instant, K)> {
        if let Some(e) = self.earliest {
            match e {
                Some((d, k)) if !live(d, k) => {}
                e => return e,
            }
        }
        let found = self.find_earliest(&mut live);
        self.earliest = Some(found);
        found
    }

    /// Moves every entry due at `now` (due no later than it) to `due`, earliest first
    /// (ties: the smallest key first).
    pub(crate) fn expire(&mut self, now: Instant, due: &mut Vec<(Instant, K)>) {
        // Nothing is due: swept at this time with nothing due filed since, or the
        // earliest entry known to be later.
        if now == self.swept_at && !self.filed_due {
            return;
        }
        if let Some(e) = self.earliest {
            if e.is_none_or(|(d, _)| d > now) {
                return;
            }
        }
        let now_tick = tick(now);
        if now_tick < self.swept {
            return;
        }
        self.swept_at = now;
        self.filed_due = false;
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
            if entries.is_empty() && entries.capacity() > 0 {
                self.spare.push(std::mem::take(entries));
            }
        }
        self.swept = now_tick;
        // The turn moved on: entries of the overflow now within it go to their slots.
        while let Some(&Reverse((d, k))) = self.later.peek() {
            if tick(d) - self.swept.min(tick(d)) >= SLOTS as u64 {
                break;
            }
            self.later.pop();
            if d <= now {
                due.push((d, k));
            } else {
                self.file(slot_of(tick(d)), (d, k));
            }
        }
        if due.len() > first {
            self.earliest = None;
            due[first..].sort_unstable();
        }
    }

    /// The earliest entry `live` keeps, looked for tick by tick from the swept one.
    fn find_earliest(&mut self, live: &mut impl FnMut(Instant, K) -> bool) -> Option<(Instant, K)> {
        for t in self.swept..self.swept + SLOTS as u64 {
            let entries = &mut self.slots[slot_of(t)];
            if entries.is_empty() {
                continue;
            }
            entries.retain(|&(d, k)| live(d, k));
            // Every entry of the slot is due in this tick (or before it, in the swept
            // tick's slot): the slot's earliest is the wheel's.
            if let Some(&e) = entries.iter().min() {
                return Some(e);
            }
        }
        while let Some(&Reverse((d, k))) = self.later.peek() {
            if live(d, k) {
                return Some((d, k));
            }
            self.later.pop();
        }
        None
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
        /// The earliest entry `live` keeps; dead ones met on the way are dropped.
        fn next_live(&mut self, live: &dyn Fn(Instant, u32) -> bool) -> Option<Instant>;
        fn expire(&mut self, now: Instant) -> Vec<(Instant, u32)>;
    }

    impl Queue for TimerWheel<u32> {
        fn push(&mut self, at: Instant, k: u32) {
            TimerWheel::push(self, at, k)
        }
        fn next_live(&mut self, live: &dyn Fn(Instant, u32) -> bool) -> Option<Instant> {
            self.peek_where(live).map(|(d, _)| d)
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
        fn next_live(&mut self, live: &dyn Fn(Instant, u32) -> bool) -> Option<Instant> {
            while let Some(&Reverse((d, k))) = BinaryHeap::peek(self) {
                if live(d, k) {
                    return Some(d);
                }
                BinaryHeap::pop(self);
            }
            None
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
            let conns = &self.conns;
            self.q.next_live(&|d, k| conns[k as usize].1 == Some(d))
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
            4 => (0..CONNS, prop_oneof![0u64..3_000, 0u64..600_000, 0u64..20_000_000])
                .prop_map(|(k, us)| Op::Arm(k, us)),
            1 => (0..CONNS).prop_map(Op::Cancel),
            3 => prop_oneof![0u64..500, 0u64..5_000, 0u64..400_000, 0u64..6_000_000].prop_map(Op::Advance),
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

    // A timer that fires can arm another one already due (the engine's `handle_timeout`
    // sweeps again): an entry filed at or before the last sweep's time is taken by the
    // next sweep at that same time, and a sweep before the earliest entry takes nothing.
    #[test]
    fn an_entry_filed_due_after_a_sweep_is_taken_at_the_same_time() {
        let ms = |n: u64| Instant::from_nanos(n * 1_000_000);
        let mut w = TimerWheel::default();
        let mut due = Vec::new();
        w.push(ms(5), 1u32);
        w.push(ms(900), 9);
        w.expire(ms(3), &mut due);
        assert!(due.is_empty());
        w.expire(ms(10), &mut due);
        assert_eq!(due, [(ms(5), 1)]);
        due.clear();
        w.expire(ms(10), &mut due);
        assert!(due.is_empty());
        w.push(ms(7), 2);
        w.push(ms(10), 3);
        w.push(ms(11), 4);
        w.expire(ms(10), &mut due);
        assert_eq!(due, [(ms(7), 2), (ms(10), 3)]);
        due.clear();
        w.expire(ms(11), &mut due);
        assert_eq!(due, [(ms(11), 4)]);
        due.clear();
        assert_eq!(w.peek_where(|_, _| true), Some((ms(900), 9)));
        w.expire(ms(899), &mut due);
        assert!(due.is_empty());
        w.expire(ms(900), &mut due);
        assert_eq!(due, [(ms(900), 9)]);
    }

    // Connections whose timers run a few ticks ahead, turn after turn: the slots' buffers
    // are those of the few slots in use, passed on as the sweep empties them, not one
    // buffer grown per slot of the turn.
    #[test]
    fn swept_slots_pass_their_buffers_on() {
        let mut w = TimerWheel::default();
        let mut due = Vec::new();
        let tick = 1u64 << TICK_SHIFT;
        let mut now = Instant::from_nanos(1 << 40);
        for step in 0..3 * SLOTS as u64 {
            for k in 0..20u32 {
                w.push(now.saturating_add_micros(20_000), k);
            }
            w.expire(now, &mut due);
            assert_eq!(due.len(), if step < 5 { 0 } else { 20 }, "step {step}");
            due.clear();
            now = Instant::from_nanos(now.as_nanos() + tick);
        }
        let buffers = w.slots.iter().filter(|s| s.capacity() > 0).count() + w.spare.len();
        assert!(
            buffers <= 8,
            "{buffers} slot buffers for entries 5 ticks ahead"
        );
    }

    #[test]
    fn an_entry_a_turn_away_waits_for_its_turn() {
        let mut w = TimerWheel::default();
        let t0 = Instant::from_nanos(1 << 40);
        let far = t0.saturating_add_micros(10_000_000);
        w.push(far, 1u32);
        let mut due = Vec::new();
        // The slot of `far` is swept several times before it is due.
        let mut now = t0;
        while now < far {
            w.expire(now, &mut due);
            assert!(due.is_empty(), "fired at {now:?}, due at {far:?}");
            assert_eq!(w.peek_where(|_, _| true), Some((far, 1)));
            now = now.saturating_add_micros(3_000);
        }
        w.expire(far, &mut due);
        assert_eq!(due, vec![(far, 1)]);
        assert_eq!(w.peek_where(|_, _| true), None);
    }
}
