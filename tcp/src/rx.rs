//! The receive hook and out-of-order bookkeeping.
//!
//! Every arriving payload segment is offered to a [`SegmentSink`] with its absolute sequence
//! number **before** the engine copies anything. The sink (the MPA receiver) places what it
//! can — verified FPDUs, possibly out of order — and answers with the byte ranges it
//! [`Consumed`]. The engine marks the whole segment as received (so ACKs and SACK blocks
//! cover placed data) and copies only the unconsumed bytes into its reassembly store, which hands
//! them to [`SegmentSink::on_in_order`] once the stream reaches them. No byte is offered or
//! delivered twice: a segment that overlaps data already received is cut into its new pieces
//! before it is offered.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::checksum::PayloadSum;
use crate::time::Instant;

/// Maximum number of ranges a sink can report per segment.
pub const MAX_CONSUMED_RANGES: usize = 4;

/// Byte ranges of one offered payload (offsets into that payload) that the sink consumed.
///
/// Ranges are pushed in ascending order and may not overlap. Anything outside them is kept
/// by the engine and later handed to [`SegmentSink::on_in_order`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Consumed {
    ranges: [(u32, u32); MAX_CONSUMED_RANGES],
    len: u8,
}

/// [`Consumed::push`] was given a range out of order or more than [`MAX_CONSUMED_RANGES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("consumed ranges must ascend without overlap and number at most {MAX_CONSUMED_RANGES}")]
pub struct ConsumedError;

impl Consumed {
    /// The sink consumed nothing; the engine keeps the whole payload.
    pub const fn none() -> Self {
        Consumed {
            ranges: [(0, 0); MAX_CONSUMED_RANGES],
            len: 0,
        }
    }

    /// The sink consumed the first `n` bytes.
    pub fn prefix(n: usize) -> Self {
        let mut c = Consumed::none();
        if n > 0 {
            c.ranges[0] = (0, n as u32);
            c.len = 1;
        }
        c
    }

    /// The sink consumed the whole payload of `len` bytes.
    pub fn all(len: usize) -> Self {
        Consumed::prefix(len)
    }

    /// Add a consumed range (offsets into the offered payload).
    pub fn push(&mut self, range: Range<usize>) -> Result<(), ConsumedError> {
        if range.start >= range.end {
            return Ok(());
        }
        let (s, e) = (range.start as u32, range.end as u32);
        if self.len > 0 {
            let last = &mut self.ranges[self.len as usize - 1];
            if s < last.1 {
                return Err(ConsumedError);
            }
            if s == last.1 {
                last.1 = e;
                return Ok(());
            }
        }
        if self.len as usize == MAX_CONSUMED_RANGES {
            return Err(ConsumedError);
        }
        self.ranges[self.len as usize] = (s, e);
        self.len += 1;
        Ok(())
    }

    /// The consumed ranges, ascending.
    pub fn iter(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.ranges[..self.len as usize]
            .iter()
            .map(|&(s, e)| s as usize..e as usize)
    }

    /// Whether this is [`Consumed::all`] of a `len`-byte payload (of more than zero bytes).
    #[inline]
    pub(crate) fn is_all(&self, len: usize) -> bool {
        self.len == 1 && u32::try_from(len).is_ok_and(|len| self.ranges[0] == (0, len))
    }

    /// Total consumed bytes.
    pub fn total(&self) -> usize {
        self.iter().map(|r| r.len()).sum()
    }
}

/// Call `f(start, end)` for each byte range of a `len`-byte payload outside `consumed`;
/// inline, the usual payload (consumed whole) checked first.
#[inline]
pub(crate) fn for_each_unconsumed(consumed: &Consumed, len: usize, f: impl FnMut(usize, usize)) {
    if !consumed.is_all(len) {
        for_each_unconsumed_range(consumed, len, f);
    }
}

/// [`for_each_unconsumed`] of a payload not consumed whole.
fn for_each_unconsumed_range(consumed: &Consumed, len: usize, mut f: impl FnMut(usize, usize)) {
    let mut pos = 0;
    for r in consumed.iter() {
        let (a, b) = (r.start.min(len), r.end.min(len));
        if a > pos {
            f(pos, a);
        }
        pos = pos.max(b);
    }
    if pos < len {
        f(pos, len);
    }
}

/// Receives each arriving payload segment before reassembly (implemented by the MPA
/// receiver and by [`crate::StreamSocket`]).
///
/// `C` is the context the engine's caller lends for the duration of one call (quinn-style:
/// `Engine::handle_tcp(now, cx, ..)` hands `cx` to the connection's sink): the iWARP
/// connections receive the RNIC whose memory they place into, a plain byte stream needs none.
pub trait SegmentSink<C: ?Sized = ()> {
    /// A new payload segment arrived at `now`. `seq` is the absolute TCP sequence number of
    /// `payload[0]`; `in_order` is true when `seq == rcv_nxt`. Called before any copy; the
    /// payload was already trimmed to the receive window and to bytes never seen before.
    /// Return the ranges placed or otherwise taken; the rest is buffered by the engine.
    ///
    /// The default places nothing ahead of RCV.NXT: an in-order segment is taken whole
    /// through [`SegmentSink::on_in_order`], anything else is left to reassembly.
    fn on_segment(
        &mut self,
        cx: &mut C,
        now: Instant,
        seq: u32,
        payload: &[u8],
        in_order: bool,
        _rcv_nxt: u32,
    ) -> Consumed {
        if in_order {
            self.on_in_order(cx, now, seq, payload);
            Consumed::all(payload.len())
        } else {
            Consumed::none()
        }
    }

    /// An in-order segment of a receive run at `seq` (RCV.NXT), its checksum verified, in a
    /// burst ([`crate::Engine::begin_burst`]; [`SegmentSink::on_advance`] follows at the
    /// run's end), handed over by the engine's run entry: as [`SegmentSink::on_segment`]
    /// with `in_order`, the bytes it leaves then handed to [`SegmentSink::on_in_order`] at
    /// once (the default does just that). A sink that always takes such a segment whole
    /// may take it here without building a [`Consumed`].
    fn on_run_segment(&mut self, cx: &mut C, now: Instant, seq: u32, payload: &[u8]) {
        let consumed = self.on_segment(cx, now, seq, payload, true, seq);
        for_each_unconsumed(&consumed, payload.len(), |a, b| {
            self.on_in_order(cx, now, seq.wrapping_add(a as u32), &payload[a..b]);
        });
    }

    /// Bytes the sink did not consume, now in order, starting at sequence `seq`. The sink
    /// must take them all (the advertised window keeps their amount bounded).
    fn on_in_order(&mut self, cx: &mut C, now: Instant, seq: u32, bytes: &[u8]);

    /// RCV.NXT advanced to `rcv_nxt` (all bytes before it are received, placed or delivered).
    /// Follows every `on_segment` or `on_in_order` call that moved RCV.NXT, within the same
    /// engine call, except during a receive burst ([`crate::Engine::begin_burst`]): a run
    /// of in-order segments is followed by one call at the end of the run.
    fn on_advance(&mut self, _cx: &mut C, _now: Instant, _rcv_nxt: u32) {}

    /// How many bytes beyond RCV.NXT the sink is prepared to receive: the advertised window.
    fn rx_window(&self) -> usize;

    /// Offered the payload of an arriving segment starting at `seq` before its checksum is
    /// verified (when the engine verifies checksums): a sink may copy it to where it would
    /// go, without making it visible, and return its sum ([`crate::checksum::copy_payload`]).
    /// The engine then verifies the segment with that sum instead of reading the payload
    /// again; a bad segment goes no further, and of a good one the sink is handed the staged
    /// bytes as usual (`on_segment`, `on_in_order`), which it then commits without a copy.
    /// Each call replaces the previous staging. The default stages nothing (`None`): the
    /// engine sums the whole segment itself.
    fn stage(&mut self, _cx: &mut C, _seq: u32, _payload: &[u8]) -> Option<PayloadSum> {
        None
    }

    /// The engine is done with the segment whose payload [`SegmentSink::stage`] took
    /// (refused for its checksum, or handled): its staging must not apply to any later
    /// segment, which may arrive without a stage call (a checksum a device verified) in the
    /// same buffer. The default does nothing.
    fn unstage(&mut self, _cx: &mut C) {}
}

/// Out-of-order state beyond RCV.NXT, in 64-bit stream offsets (no wrap-around): which
/// byte ranges were received (consumed by the sink or stored) and the stored bytes. The
/// number of gaps is unbounded; stored bytes are bounded by the receive window.
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    ranges: BTreeMap<u64, u64>,
    data: BTreeMap<u64, Vec<u8>>,
    stored: usize,
    /// Buffers of delivered chunks, for the next stored ones (no allocation per segment).
    spare: Vec<Vec<u8>>,
}

/// How many delivered chunk buffers [`Reassembly`] keeps for reuse.
const SPARE_CHUNKS: usize = 64;

impl Reassembly {
    /// Nothing is held beyond RCV.NXT.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of disjoint received ranges beyond RCV.NXT (gaps in front of each).
    pub(crate) fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// Bytes copied and held for in-order delivery.
    pub(crate) fn stored_bytes(&self) -> usize {
        self.stored
    }

    /// The received ranges, ascending.
    pub(crate) fn ranges(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
    }

    /// The start of the first (lowest) received range, if any.
    #[inline]
    pub(crate) fn first_start(&self) -> Option<u64> {
        self.ranges.first_key_value().map(|(&s, _)| s)
    }

    /// The end of the last (highest) received range, if any.
    #[inline]
    pub(crate) fn last_end(&self) -> Option<u64> {
        self.ranges.last_key_value().map(|(_, &e)| e)
    }

    /// [`Reassembly::insert`] of `[s, e)` that starts where the last received range ends
    /// or beyond it: that range grows, or `[s, e)` becomes the last.
    #[inline]
    pub(crate) fn push_last(&mut self, s: u64, e: u64) {
        if let Some(mut last) = self.ranges.last_entry() {
            let end = last.get_mut();
            if *end == s {
                *end = e;
                return;
            }
        }
        self.ranges.insert(s, e);
    }

    /// The received range containing `off`, if any.
    pub(crate) fn range_containing(&self, off: u64) -> Option<(u64, u64)> {
        self.ranges
            .range(..=off)
            .next_back()
            .filter(|(_, &e)| e > off)
            .map(|(&s, &e)| (s, e))
    }

    /// Sub-intervals of `[s, e)` not yet received, appended to `out`.
    pub(crate) fn uncovered(&self, s: u64, e: u64, out: &mut Vec<(u64, u64)>) {
        let mut cur = s;
        if let Some((_, &pe)) = self.ranges.range(..s).next_back() {
            cur = cur.max(pe.min(e));
        }
        for (&rs, &re) in self.ranges.range(s..e) {
            if rs > cur {
                out.push((cur, rs));
            }
            cur = cur.max(re);
            if cur >= e {
                break;
            }
        }
        if cur < e {
            out.push((cur, e));
        }
    }

    /// Copy `bytes` (which start at offset `s` and must not be received yet) for later
    /// in-order delivery.
    pub(crate) fn store(&mut self, s: u64, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.stored += bytes.len();
            let mut chunk = self.spare.pop().unwrap_or_default();
            chunk.clear();
            chunk.extend_from_slice(bytes);
            self.data.insert(s, chunk);
        }
    }

    /// Keep the buffer of a delivered chunk for a later [`Reassembly::store`].
    pub(crate) fn recycle(&mut self, chunk: Vec<u8>) {
        if self.spare.len() < SPARE_CHUNKS {
            self.spare.push(chunk);
        }
    }

    /// Mark `[s, e)` as received, merging with neighbours.
    pub(crate) fn insert(&mut self, mut s: u64, mut e: u64) {
        if s >= e {
            return;
        }
        // The usual case behind a hole: the last range starting at or before `e` reaches
        // `s` from below (segments ahead of RCV.NXT arrive in order), so no other range
        // meets `[s, e)`: its end grows in place, one search.
        if let Some((&ls, le)) = self.ranges.range_mut(..=e).next_back() {
            if ls <= s && *le >= s {
                *le = (*le).max(e);
                return;
            }
        }
        if let Some((&ps, &pe)) = self.ranges.range(..=s).next_back() {
            if pe >= s {
                s = ps;
                e = e.max(pe);
                self.ranges.remove(&ps);
            }
        }
        while let Some((&ns, &ne)) = self.ranges.range(s..=e).next() {
            self.ranges.remove(&ns);
            e = e.max(ne);
        }
        self.ranges.insert(s, e);
    }

    /// If a received range starts at or before `base`, remove it and return its end.
    pub(crate) fn pop_front_at(&mut self, base: u64) -> Option<u64> {
        let (&s, &e) = self.ranges.iter().next()?;
        if s > base {
            return None;
        }
        self.ranges.remove(&s);
        Some(e.max(base))
    }

    /// Remove and return the first stored chunk starting before `end`.
    pub(crate) fn pop_stored_before(&mut self, end: u64) -> Option<(u64, Vec<u8>)> {
        let (&s, _) = self.data.iter().next()?;
        if s >= end {
            return None;
        }
        let v = self.data.remove(&s)?;
        self.stored -= v.len();
        Some((s, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that places the ranges it is told to and logs what reaches `on_in_order`.
    struct Partial {
        take: Consumed,
        in_order: Vec<(u32, Vec<u8>)>,
    }

    impl SegmentSink for Partial {
        fn on_segment(
            &mut self,
            _cx: &mut (),
            _now: Instant,
            _seq: u32,
            _payload: &[u8],
            in_order: bool,
            _rcv_nxt: u32,
        ) -> Consumed {
            assert!(in_order, "a run segment is in order");
            self.take
        }

        fn on_in_order(&mut self, _cx: &mut (), _now: Instant, seq: u32, bytes: &[u8]) {
            self.in_order.push((seq, bytes.to_vec()));
        }

        fn rx_window(&self) -> usize {
            1 << 16
        }
    }

    // RFC 9293 §3.10.7.4 (seventh): every octet of an in-order segment reaches the ULP
    // once; through `on_run_segment` a sink's unconsumed octets come back in order at once.
    #[test]
    fn a_run_segment_hands_back_what_the_sink_leaves_in_order() {
        let payload: Vec<u8> = (0..100).collect();
        let mut take = Consumed::none();
        take.push(10..20).unwrap();
        take.push(50..60).unwrap();
        let mut s = Partial {
            take,
            in_order: Vec::new(),
        };
        let seq = u32::MAX - 30;
        s.on_run_segment(&mut (), Instant::ZERO, seq, &payload);
        let want = [(0, 10), (20, 50), (60, 100)].map(|(a, b)| {
            (
                seq.wrapping_add(a),
                payload[a as usize..b as usize].to_vec(),
            )
        });
        assert_eq!(s.in_order, want);

        let mut whole = Partial {
            take: Consumed::all(payload.len()),
            in_order: Vec::new(),
        };
        whole.on_run_segment(&mut (), Instant::ZERO, seq, &payload);
        assert!(
            whole.in_order.is_empty(),
            "a segment taken whole comes back in no part"
        );
    }

    #[test]
    fn consumed_ranges_merge_and_reject_disorder() {
        let mut c = Consumed::none();
        c.push(0..10).unwrap();
        c.push(10..20).unwrap();
        c.push(30..40).unwrap();
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![0..20, 30..40]);
        assert_eq!(c.push(35..50), Err(ConsumedError));
        assert_eq!(c.total(), 30);
    }

    #[test]
    fn insert_merges_and_uncovered_finds_holes() {
        let mut r = Reassembly::default();
        r.insert(10, 20);
        r.insert(30, 40);
        let uncovered = |s, e| {
            let mut out = Vec::new();
            r.uncovered(s, e, &mut out);
            out
        };
        assert_eq!(uncovered(0, 50), vec![(0, 10), (20, 30), (40, 50)]);
        assert_eq!(uncovered(12, 18), vec![]);
        assert_eq!(uncovered(15, 35), vec![(20, 30)]);
        r.insert(20, 30);
        assert_eq!(r.range_count(), 1);
        assert_eq!(r.range_containing(25), Some((10, 40)));
    }

    // Ranges inserted in any order (growing ranges at their ends, filling holes, covering
    // several) give the maximal runs of the octets received, as a bitmap says.
    #[test]
    fn insert_matches_a_bitmap() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..200 {
            let mut r = Reassembly::default();
            let mut bits = [false; 300];
            for _ in 0..40 {
                let s = next(280);
                let long = next(2) == 0;
                let e = s + 1 + next(if long { 20 } else { 4 });
                r.insert(s, e);
                bits[s as usize..e as usize].fill(true);
                let mut runs = Vec::new();
                let mut i = 0;
                while i < bits.len() {
                    if bits[i] {
                        let j = (i..bits.len()).find(|&j| !bits[j]).unwrap_or(bits.len());
                        runs.push((i as u64, j as u64));
                        i = j;
                    } else {
                        i += 1;
                    }
                }
                assert_eq!(r.range_count(), runs.len());
                for &(a, b) in &runs {
                    assert_eq!(r.range_containing(a), Some((a, b)));
                    assert_eq!(r.range_containing(b - 1), Some((a, b)));
                }
            }
        }
    }

    // A delivered chunk's buffer holds the next stored chunk.
    #[test]
    fn delivered_chunk_buffer_is_reused() {
        let mut r = Reassembly::default();
        r.store(10, b"later");
        r.insert(10, 15);
        let (off, chunk) = r.pop_stored_before(15).expect("stored");
        assert_eq!((off, &chunk[..]), (10, &b"later"[..]));
        let at = chunk.as_ptr();
        r.recycle(chunk);
        r.store(30, b"again");
        let (_, chunk) = r.pop_stored_before(40).expect("stored");
        assert_eq!(&chunk[..], b"again");
        assert_eq!(chunk.as_ptr(), at);
        assert_eq!(r.stored_bytes(), 0);
    }

    // The gap list has no fixed limit (cf. smoltcp's 4-entry assembler).
    #[test]
    fn thousands_of_gaps() {
        let mut r = Reassembly::default();
        for i in 0..5000u64 {
            r.insert(i * 10 + 5, i * 10 + 10);
        }
        assert_eq!(r.range_count(), 5000);
        for i in 0..5000u64 {
            r.insert(i * 10, i * 10 + 5);
        }
        assert_eq!(r.range_count(), 1);
        assert_eq!(r.pop_front_at(0), Some(50_000));
    }
}
