//! The send side's state: the framer and the DDP segments waiting for it, and how they
//! become one unit (the send path itself is `send`).

use std::collections::VecDeque;

use tcp::Instant;

use super::stats::OpCounters;
use crate::mem::{BufferPool, MemoryTable};
use crate::mpa::{Framer, MarkerSpacing};
use crate::rdmap::{DdpSegmentOut, Digesting, Engine, FRAME_ROOM};
use crate::wire::ddp::UNTAGGED_HEADER_LEN;
use crate::wire::rdmap::READ_REQUEST_LEN;

/// The shortest DDP segment whose CRC and TCP sum are taken in the pass that reads its
/// payload out of registered memory (`rdmap::Engine::poll_segment_digested`); shorter ones
/// are read, then summed in a second pass over their buffer. `benches/crc_sum.rs` on an AMD
/// EPYC (Zen 3), the read into a unit that is out of the caches (4 MiB of units in
/// flight): at 9,000 octets the one pass took 1.08–1.36× less time than the two, with the
/// source cached or not; at 1,448 it gained 1.03–1.15× with the source cached but lost
/// 0.79–0.83× with it out of every cache (its loads run fewer at once than a plain copy's).
pub(super) const DIGEST_MIN_LEN: usize = 4096;

/// Smallest MULPDU worth segmenting for (an untagged header plus a Read Request body).
pub(super) const MIN_MULPDU: usize = UNTAGGED_HEADER_LEN + READ_REQUEST_LEN;

/// FPDUs of one unit gathered on the stack (more, e.g. many tiny Sends, take a Vec).
const UNIT_PARTS: usize = 8;

/// Octets of buffers a connection keeps for itself ([`Sender`]'s own pool, 256 buffers of
/// a 1,536-octet unit): unit buffers given back by TCP once acknowledged, and those of
/// segments copied into a unit, when its context lends no shared pool
/// ([`crate::mem::HasMemoryTable::table_and_pool`]); ACKs arrive in bursts that free many
/// units at once, hence the depth. With a shared pool it only passes buffers on to it.
pub(super) const SPARE_BYTES: usize = 256 * 1536;

/// One DDP segment waiting to be framed.
#[derive(Debug)]
enum TxSeg {
    Engine(DdpSegmentOut),
    Raw(Vec<u8>),
}

impl TxSeg {
    fn parts(&self) -> [&[u8]; 2] {
        match self {
            TxSeg::Engine(s) => s.parts(),
            TxSeg::Raw(v) => [&v[..], &[]],
        }
    }

    fn len(&self) -> usize {
        match self {
            TxSeg::Engine(s) => s.len(),
            TxSeg::Raw(v) => v.len(),
        }
    }
}

/// A unit [`Sender::frame_unit`] framed.
#[derive(Debug)]
pub(super) struct FramedUnit {
    /// The unit's buffer: `head` octets of room, then the unit's octets.
    pub(super) bytes: Vec<u8>,
    /// Room in front of the unit's octets (for a frame's headers).
    pub(super) head: u16,
    /// Their TCP checksum sum, when the CRC's pass took it.
    pub(super) sum: Option<tcp::checksum::PayloadSum>,
    /// FPDUs in it.
    pub(super) fpdus: usize,
    /// Finished in its DDP segment's own buffer.
    pub(super) in_place: bool,
    /// A buffer had to be allocated for it.
    pub(super) allocated: bool,
}

/// The framer and the DDP segments waiting for it. In declaration order (`repr(C)`): what
/// the send checks read first, the spare buffers last.
#[derive(Debug)]
#[repr(C)]
pub(super) struct Sender {
    /// No FPDU before this time (`ConnConfig::first_fpdu_delay`).
    pub(super) hold_until: Option<Instant>,
    queue: VecDeque<TxSeg>,
    bytes: usize,
    /// Frames FPDUs once our first FPDU's sequence number is known.
    pub(super) framer: Option<Framer>,
    /// A sender that exists only for the Terminate of a failed negotiation: its CRC and
    /// marker settings (from the peer's Request) and no negotiated stream behind it.
    terminate_framing: Option<(bool, bool)>,
    /// Buffers for the next DDP segments and units when the context lends no shared pool
    /// ([`SPARE_BYTES`]); with one, those freed without it (a flush, a teardown), passed
    /// on at the next call that lends it.
    spare: BufferPool,
}

impl Default for Sender {
    fn default() -> Self {
        Sender {
            framer: None,
            terminate_framing: None,
            hold_until: None,
            queue: VecDeque::new(),
            bytes: 0,
            spare: BufferPool::new(SPARE_BYTES),
        }
    }
}

impl Sender {
    /// A sender for the one Terminate of a failed negotiation (RFC 6581 §7).
    pub(super) fn terminate_only(crc: bool, markers: bool) -> Self {
        Sender {
            terminate_framing: Some((crc, markers)),
            ..Sender::default()
        }
    }

    /// Whether the framer exists.
    pub(super) fn is_started(&self) -> bool {
        self.framer.is_some()
    }

    /// A terminate-only sender learns where its first FPDU starts.
    pub(super) fn start(&mut self, start: u32) {
        if let (None, Some((crc, markers))) = (self.framer, self.terminate_framing) {
            self.framer = Some(Framer::new(crc, markers.then(|| MarkerSpacing::new(start))));
        }
    }

    /// Queues a ready DDP segment in front of everything else (the peer-to-peer RTR).
    pub(super) fn push_front_raw(&mut self, segment: Vec<u8>) {
        self.bytes += segment.len();
        self.queue.push_front(TxSeg::Raw(segment));
    }

    /// Drops the engine's queued segments (flushed work after a Terminate was queued),
    /// keeping their buffers.
    pub(super) fn drop_engine_segments(&mut self) {
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for s in self.queue.drain(..) {
            match s {
                TxSeg::Engine(s) => self.spare.give(s.into_buffer()),
                raw => kept.push_back(raw),
            }
        }
        self.queue = kept;
        self.bytes = self.queue.iter().map(TxSeg::len).sum();
    }

    /// Drops everything queued, keeping the buffers.
    pub(super) fn clear(&mut self) {
        for s in self.queue.drain(..) {
            if let TxSeg::Engine(s) = s {
                self.spare.give(s.into_buffer());
            }
        }
        self.bytes = 0;
    }

    /// Gives every buffer it holds (queued segments', its own pool's) to `pool`: the
    /// connection is going away.
    pub(super) fn release(&mut self, pool: &mut BufferPool) {
        self.clear();
        pool.give_all(&mut self.spare);
    }

    /// The pool to take buffers from and give them to: the shared one when lent (after
    /// passing on what this sender kept meanwhile), else its own.
    #[inline]
    fn pool<'a>(
        spare: &'a mut BufferPool,
        shared: Option<&'a mut BufferPool>,
    ) -> &'a mut BufferPool {
        match shared {
            Some(p) => {
                if !spare.is_empty() {
                    p.give_all(spare);
                }
                p
            }
            None => spare,
        }
    }

    /// Whether no segment waits.
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Ends the first-FPDU hold once its time came.
    pub(super) fn release_hold(&mut self, now: Instant) {
        if self.hold_until.is_some_and(|t| now >= t) {
            self.hold_until = None;
        }
    }

    /// Whether FPDUs may go out at `now` (`established`: the MPA exchange allows FPDUs).
    pub(super) fn may_send(&self, now: Instant, established: bool) -> bool {
        self.framer.is_some()
            && (established || self.terminate_framing.is_some())
            && self.hold_until.is_none_or(|t| now >= t)
    }

    /// Takes DDP segments from `engine` until `budget` octets wait, their buffers from
    /// `shared` (or its own pool), counting them in `ops`; returns how many buffers it had
    /// to allocate.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill<M: MemoryTable + ?Sized>(
        &mut self,
        engine: &mut Engine,
        mem: &M,
        shared: Option<&mut BufferPool>,
        now: Instant,
        mulpdu: usize,
        budget: usize,
        ops: &mut OpCounters,
    ) -> u64 {
        if self.bytes >= budget {
            return 0;
        }
        let pool = Self::pool(&mut self.spare, shared);
        let mut allocated = 0;
        let mut buffer = Vec::new();
        while self.bytes < budget {
            if buffer.capacity() == 0 {
                buffer = pool.take();
            }
            let fresh = buffer.capacity() == 0;
            match engine.poll_segment_into(now, mulpdu, mem, &mut buffer) {
                Some(s) => {
                    count_sent(ops, &s);
                    if fresh {
                        allocated += 1;
                    }
                    self.bytes += s.len();
                    self.queue.push_back(TxSeg::Engine(s));
                }
                None => break,
            }
        }
        // A buffer nothing was read into goes back.
        pool.give(buffer);
        allocated
    }

    /// The usual unit in one step: with nothing queued and no markers, the engine's next
    /// DDP segment, when it is a whole unit's worth (`budget` octets or more) and fits
    /// `max_len`, finished in place as [`Sender::frame_unit`] would finish it, without
    /// passing through the queue. Otherwise `None`, with the segment read (if any) queued:
    /// [`Sender::fill`] and [`Sender::frame_unit`] go on from there and build the same unit.
    /// Counts the segment in `ops` and a buffer allocated for it in `allocated`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn direct_unit<M: MemoryTable + ?Sized>(
        &mut self,
        engine: &mut Engine,
        mem: &M,
        shared: Option<&mut BufferPool>,
        now: Instant,
        mulpdu: usize,
        budget: usize,
        seq: u32,
        max_len: usize,
        ops: &mut OpCounters,
        allocated: &mut u64,
    ) -> Option<FramedUnit> {
        let framer = self.framer?;
        if budget == 0 || !self.queue.is_empty() || framer.markers().is_some() {
            return None;
        }
        let pool = Self::pool(&mut self.spare, shared);
        let mut buffer = pool.take();
        let fresh = buffer.capacity() == 0;
        // With CRCs a long segment's CRC and TCP sum are taken while its payload is read out
        // of registered memory (one pass over it), the framer summing only what it adds.
        let polled = if framer.crc() {
            let digesting = Digesting {
                seed: Framer::crc_seed,
                min_len: budget.max(DIGEST_MIN_LEN),
            };
            engine.poll_segment_digested(now, mulpdu, mem, &mut buffer, digesting)
        } else {
            engine
                .poll_segment_into(now, mulpdu, mem, &mut buffer)
                .map(|s| (s, None))
        };
        let Some((s, digest)) = polled else {
            pool.give(buffer);
            return None;
        };
        count_sent(ops, &s);
        *allocated += u64::from(fresh);
        if s.len() < budget || framer.wire_len(seq, s.len()) > max_len {
            self.bytes += s.len();
            self.queue.push_back(TxSeg::Engine(s));
            return None;
        }
        let mut bytes = s.into_ulpdu_buffer();
        let (_, sum) = match digest {
            Some(d) => framer.frame_in_place_digested(&mut bytes, FRAME_ROOM, d),
            None => framer.frame_in_place(&mut bytes, FRAME_ROOM),
        }
        .ok()?;
        Some(FramedUnit {
            bytes,
            head: FRAME_ROOM as u16,
            sum,
            fpdus: 1,
            in_place: true,
            allocated: false,
        })
    }

    /// Frames the queued segments that fit `max_len` octets from `seq` (at least one, so
    /// that a unit too small is refused as such) into a unit. A unit of one FPDU without markers is the DDP segment's own buffer,
    /// finished in place (the payload read from registered memory is not copied again);
    /// others are built in a buffer of `shared` (or its own pool), and the segments'
    /// buffers go back there.
    pub(super) fn frame_unit(
        &mut self,
        seq: u32,
        max_len: usize,
        shared: Option<&mut BufferPool>,
    ) -> Option<FramedUnit> {
        let framer = self.framer?;
        let mut fit = 0;
        let (mut end, mut len) = (seq, 0);
        for s in &self.queue {
            let n = framer.wire_len(end, s.len());
            if fit > 0 && len + n > max_len {
                break;
            }
            fit += 1;
            len += n;
            end = end.wrapping_add(n as u32);
        }
        let single = fit == 1 && matches!(self.queue.front(), Some(TxSeg::Engine(_)));
        if single && framer.markers().is_none() {
            if len > max_len {
                return None;
            }
            let Some(TxSeg::Engine(s)) = self.queue.pop_front() else {
                return None;
            };
            self.bytes -= s.len();
            let mut bytes = s.into_ulpdu_buffer();
            let (_, sum) = framer.frame_in_place(&mut bytes, FRAME_ROOM).ok()?;
            return Some(FramedUnit {
                bytes,
                head: FRAME_ROOM as u16,
                sum,
                fpdus: 1,
                in_place: true,
                allocated: false,
            });
        }
        let pool = Self::pool(&mut self.spare, shared);
        let mut out = pool.take();
        let allocated = out.capacity() == 0;
        out.clear();
        out.reserve(max_len);
        let info = if fit <= UNIT_PARTS {
            let mut parts: [[&[u8]; 2]; UNIT_PARTS] = [[&[], &[]]; UNIT_PARTS];
            for (p, s) in parts.iter_mut().zip(&self.queue) {
                *p = s.parts();
            }
            framer.build_unit(seq, max_len, &parts[..fit], &mut out)
        } else {
            let parts: Vec<[&[u8]; 2]> = self.queue.iter().take(fit).map(TxSeg::parts).collect();
            framer.build_unit(seq, max_len, &parts, &mut out)
        };
        let Ok(info) = info else {
            pool.give(out);
            return None;
        };
        for s in self.queue.drain(..info.fpdus) {
            self.bytes -= s.len();
            if let TxSeg::Engine(s) = s {
                pool.give(s.into_buffer());
            }
        }
        Some(FramedUnit {
            bytes: out,
            head: 0,
            sum: None,
            fpdus: info.fpdus,
            in_place: false,
            allocated,
        })
    }

    /// Gives `buffer` (an acknowledged unit's) back to `shared`, or keeps it in its own
    /// pool for the next segments.
    #[inline]
    pub(super) fn recycle(&mut self, buffer: Vec<u8>, shared: Option<&mut BufferPool>) {
        Self::pool(&mut self.spare, shared).give(buffer);
    }

    /// Keeps `buffer` (an unacknowledged unit's, its connection being removed) until
    /// [`Sender::release`].
    pub(super) fn reclaim(&mut self, buffer: Vec<u8>) {
        self.spare.give(buffer);
    }
}

/// Counts a segment the engine gave in the sent operations of `ops`.
#[inline]
fn count_sent(ops: &mut OpCounters, s: &DdpSegmentOut) {
    if let [a, b, ..] = *s.header() {
        OpCounters::count(&mut ops.sent, [a, b], s.len());
    }
}
