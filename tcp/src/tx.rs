//! The send path: whole units from a [`SegmentSource`], kept with their boundaries until
//! acknowledged, and a SACK scoreboard (RFC 6675) over those units.
//!
//! The engine never splits or merges units: each unit becomes exactly one segment, and a
//! retransmission carries exactly the same bytes at the same sequence number. The source is
//! told the sequence number a unit will start at (MPA markers depend on it) and the largest
//! length that fits — `min(effective send MSS, usable send window)` — so a unit never
//! exceeds the peer's MSS. When the window is too small for what the source wants to send,
//! the source returns `None` and the engine waits for the window to open, probing a zero
//! window with an empty segment below SND.UNA rather than with split data.

use std::collections::VecDeque;

use crate::checksum::PayloadSum;
use crate::conn_id::ConnId;
use crate::rack::Rack;
use crate::seq;
use crate::time::Instant;

/// One segment's worth of payload, handed over whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unit {
    /// The unit's buffer: the room in front of the payload ([`Unit::with_headroom`]; none
    /// for the other constructors), then the segment payload, sent and retransmitted
    /// unchanged ([`Unit::octets`]).
    pub(crate) buffer: Vec<u8>,
    /// The payload's checksum sum, when the source took it.
    sum: Option<PayloadSum>,
    /// Octets of room in front of the payload.
    head: u16,
}

impl Unit {
    /// A unit carrying `payload`.
    pub fn new(payload: Vec<u8>) -> Self {
        Unit {
            buffer: payload,
            sum: None,
            head: 0,
        }
    }

    /// A unit carrying `payload` whose checksum sum `sum` the source took in a pass over
    /// the octets it made anyway (the MPA sender, with the FPDU's CRC): the engine copies
    /// the payload into frames without summing it again. `sum` must be the payload's
    /// ([`crate::checksum::payload_sum`]).
    pub fn with_sum(payload: Vec<u8>, sum: PayloadSum) -> Self {
        Self::with_headroom(payload, 0, Some(sum))
    }

    /// A unit whose payload is `buffer` after its first `head` octets, room the engine may
    /// write a frame's headers into when it lends the buffer to a port
    /// ([`crate::Engine::poll_transmit_gather`], [`crate::Lent::with_headers`]): the
    /// device then sends headers and payload as one buffer. `sum`, when given, is the
    /// payload's as for [`Unit::with_sum`].
    pub fn with_headroom(buffer: Vec<u8>, head: u16, sum: Option<PayloadSum>) -> Self {
        debug_assert!(usize::from(head) <= buffer.len(), "room beyond the buffer");
        debug_assert!(
            sum.is_none_or(|s| s.octets() + usize::from(head) == buffer.len()),
            "the sum of another payload"
        );
        Unit { buffer, sum, head }
    }

    /// The payload's octets (the buffer after its room).
    pub fn octets(&self) -> &[u8] {
        self.buffer
            .get(usize::from(self.head)..)
            .unwrap_or_default()
    }

    /// The payload's octets, the room dropped.
    pub fn into_octets(mut self) -> Vec<u8> {
        self.buffer
            .drain(..usize::from(self.head).min(self.buffer.len()));
        self.buffer
    }

    /// Octets of room in front of the payload ([`Unit::with_headroom`]).
    pub fn headroom(&self) -> u16 {
        self.head
    }

    /// The payload's checksum sum, when the source took it ([`Unit::with_sum`]).
    pub fn sum(&self) -> Option<PayloadSum> {
        self.sum
    }
}

/// Gives the engine whole units to send (implemented by the MPA sender and by
/// [`crate::StreamSocket`]). `C` is the context lent for one call, as for
/// [`crate::SegmentSink`].
pub trait SegmentSource<C: ?Sized = ()> {
    /// The next unit, which will start at sequence number `seq` and must be at most
    /// `max_len` bytes (`max_len` never exceeds the effective send MSS). Return `None` when
    /// nothing fits or nothing is ready; the engine calls again when the window opens or
    /// the connection is woken.
    fn next_unit(&mut self, cx: &mut C, now: Instant, seq: u32, max_len: usize) -> Option<Unit>;

    /// Whether the source holds data it would send given enough window. Drives zero-window
    /// probing, and a graceful close sends FIN only once this is false.
    fn pending(&self) -> bool;

    /// The payload buffer of a unit the peer acknowledged, for reuse by later units (the
    /// default drops it).
    fn recycle(&mut self, _cx: &mut C, _buffer: Vec<u8>) {}

    /// The payload buffer of a unit never acknowledged, handed back as the engine removes
    /// the connection (reset, abort, timeout; no context is lent then), before the source
    /// comes back in [`crate::Event::Closed`] (the default drops it).
    fn reclaim(&mut self, _buffer: Vec<u8>) {}

    /// Whether a service on top has anything to do for this ULP after the engine ran it
    /// (a run of in-order segments, units sent, an ACK, a timer): one that says no is not
    /// put on the engine's active list ([`crate::Engine::take_active`]) for that activity,
    /// and is asked again at the next. Asked once per in-order run, after
    /// [`crate::SegmentSink::on_advance`], and once per sending turn, as it ends, not per
    /// segment: what the ULP leaves the service must wait for it (a yes stays a yes until
    /// the service took the work). The default always says yes.
    fn needs_service(&self) -> bool {
        true
    }
}

/// No loan: a unit whose payload was never lent to a port.
pub(crate) const NO_LOAN: u32 = u32::MAX;

/// Loan records an engine keeps at most: one per unit lent at least once and not yet
/// settled (acknowledged, or the connection gone, with no frame left holding it). With
/// every record taken, payloads are copied after the headers instead of lent.
pub(crate) const MAX_LOANS: usize = 1 << 16;

/// The payloads an engine lent to its ports ([`crate::Engine::poll_transmit_gather`]): per
/// unit lent, how many frames hold its buffer now, a plain count (the ports hand each
/// frame's token back on the engine's own thread, [`crate::Engine::payloads_returned`]:
/// no reference count shared between threads, no locked instruction per frame), and the
/// buffer itself once the unit was settled while frames still held it, until the last one
/// comes back. A unit keeps its record until it is settled (its retransmissions count on
/// it), so a token names the same record for as long as a frame holds it.
#[derive(Debug, Default)]
pub(crate) struct Loans {
    records: Vec<Loan>,
    /// Records settled and free for reuse (last in, first out).
    free: Vec<u32>,
}

/// One unit's loan.
#[derive(Debug)]
struct Loan {
    /// Frames holding the unit's buffer.
    frames: u32,
    /// The connection whose unit it is: a buffer settled while held goes back to its ULP.
    owner: ConnId,
    /// The buffer of a unit settled while frames held it.
    parked: Option<Vec<u8>>,
}

impl Loans {
    /// Whether no unit can be lent now (every record taken).
    pub(crate) fn full(&self) -> bool {
        self.free.is_empty() && self.records.len() >= MAX_LOANS
    }

    /// Whether a frame holds the buffer of the unit whose record is `r` ([`NO_LOAN`]:
    /// never lent, none).
    #[inline]
    pub(crate) fn held(&self, r: u32) -> bool {
        self.records.get(r as usize).is_some_and(|l| l.frames > 0)
    }

    /// One more frame holds `unit`'s buffer (a record is given to the unit the first
    /// time); the frame's token. `None` only when [`Loans::full`].
    pub(crate) fn lend(&mut self, unit: &mut TxUnit, owner: ConnId) -> Option<u32> {
        if unit.loan == NO_LOAN {
            let fresh = Loan {
                frames: 0,
                owner,
                parked: None,
            };
            unit.loan = match self.free.pop() {
                Some(r) => {
                    self.records[r as usize] = fresh;
                    r
                }
                None if self.records.len() < MAX_LOANS => {
                    self.records.push(fresh);
                    self.records.len() as u32 - 1
                }
                None => return None,
            };
        }
        self.records[unit.loan as usize].frames += 1;
        Some(unit.loan)
    }

    /// A frame holding a lent buffer let go of it (`token`, as [`Loans::lend`] gave it):
    /// the buffer and its owner when it was the last frame of a unit already settled.
    /// A token naming no frame held is ignored.
    pub(crate) fn returned(&mut self, token: u64) -> Option<(ConnId, Vec<u8>)> {
        let r = u32::try_from(token).ok()?;
        let loan = self.records.get_mut(r as usize)?;
        if loan.frames == 0 {
            return None;
        }
        loan.frames -= 1;
        if loan.frames > 0 {
            return None;
        }
        let buffer = loan.parked.take()?;
        self.free.push(r);
        Some((loan.owner, buffer))
    }

    /// The unit of loan `r` was acknowledged or its connection went away: its buffer back
    /// when no frame holds it (the record is free again), else kept until the last frame
    /// lets go.
    pub(crate) fn settle(&mut self, r: u32, buffer: Vec<u8>) -> Option<Vec<u8>> {
        let loan = &mut self.records[r as usize];
        if loan.frames > 0 {
            loan.parked = Some(buffer);
            return None;
        }
        self.free.push(r);
        Some(buffer)
    }

    /// The buffer of loan `r` when it was settled while held.
    #[cfg(test)]
    pub(crate) fn parked(&self, r: u32) -> Option<&[u8]> {
        self.records.get(r as usize)?.parked.as_deref()
    }
}

impl Drop for Loans {
    /// Buffers still held by frames are leaked, not freed: a device may read them yet.
    fn drop(&mut self) {
        for loan in &mut self.records {
            if loan.frames > 0 {
                if let Some(buffer) = loan.parked.take() {
                    core::mem::forget(buffer);
                }
            }
        }
    }
}

/// How a transmit call wants payloads: those of at least `min` octets are not copied after
/// the headers but lent (`lend`: the unit whose payload follows them).
#[derive(Debug)]
pub(crate) struct Gather {
    pub(crate) min: usize,
    /// A gathering call ([`Gather::from`]), even one that lends nothing (every loan record
    /// taken): units lent before are settled in it.
    gathering: bool,
    /// The send queue index of the unit whose headers alone were written.
    pub(crate) lend: Option<usize>,
    /// The payload lent: its connection, unit index, token and whether no other frame
    /// held the buffer (its room in front of the payload is free).
    pub(crate) lent: Option<(ConnId, usize, u32, bool)>,
}

impl Gather {
    /// Every payload copied after the headers.
    pub(crate) fn off() -> Self {
        Gather {
            min: usize::MAX,
            gathering: false,
            lend: None,
            lent: None,
        }
    }

    /// Payloads of at least `min` octets lent beside the headers.
    pub(crate) fn from(min: usize) -> Self {
        Gather {
            min: min.max(1),
            gathering: true,
            lend: None,
            lent: None,
        }
    }

    pub(crate) fn wants(&self, len: usize) -> bool {
        len >= self.min
    }

    /// Whether payloads may be lent in this call at all (and those lent before settled).
    #[inline(always)]
    pub(crate) fn lends(&self) -> bool {
        self.gathering
    }
}

/// A unit in flight.
#[derive(Clone, Debug)]
pub(crate) struct TxUnit {
    pub(crate) seq: u32,
    /// The unit's buffer: `head` octets of room, then the payload.
    pub(crate) data: Vec<u8>,
    /// The unit's record in the engine's [`Loans`] once its payload was lent, else
    /// [`NO_LOAN`].
    pub(crate) loan: u32,
    /// The payload's checksum sum, once taken (a unit sent from its own buffer is summed
    /// once, its retransmissions reuse the sum).
    pub(crate) sum: Option<PayloadSum>,
    pub(crate) fin: bool,
    pub(crate) sent_at: Instant,
    pub(crate) retransmitted: bool,
    pub(crate) sacked: bool,
    pub(crate) lost: bool,
    in_pipe: bool,
    /// Octets of room in front of the payload (at most `data.len()`): a lent unit's frame
    /// headers may be written there while no frame holds the buffer.
    pub(crate) head: u16,
}

impl TxUnit {
    /// The payload's octets.
    #[inline(always)]
    pub(crate) fn payload(&self) -> &[u8] {
        &self.data[usize::from(self.head)..]
    }

    pub(crate) fn seq_len(&self) -> u32 {
        // `head` is at most the buffer's length (checked as the unit was queued).
        (self.data.len() - usize::from(self.head)) as u32 + u32::from(self.fin)
    }
    pub(crate) fn end(&self) -> u32 {
        self.seq.wrapping_add(self.seq_len())
    }
}

/// What a cumulative ACK removed.
#[derive(Debug, Default)]
pub(crate) struct Acked {
    pub(crate) bytes: usize,
    /// When the highest unit delivered by this ACK (not SACKed before) was sent, unless it
    /// was retransmitted: the RTT sample.
    pub(crate) rtt_sample_sent_at: Option<Instant>,
    pub(crate) fin_acked: bool,
}

/// Units never retransmitted that one cumulative ACK delivers in a row, told to
/// [`Rack::on_delivered`] as three: the first, the most recently sent and the last. Their
/// ends rise, so the first and the last give RACK.fack and reordering_seen what all of them
/// would; the most recently sent (the latest send time, the later end on a tie) gives
/// RACK.xmit_ts, RACK.rtt and the minimum RTT what all of them would. The others would
/// change nothing.
#[derive(Default)]
struct DeliveredRun {
    /// Units in the run so far.
    units: usize,
    /// Its most recently sent unit (send time, end).
    latest: (Instant, u32),
    /// Its last unit (send time, end).
    last: (Instant, u32),
}

impl DeliveredRun {
    /// A unit never retransmitted, ending at `end` and sent at `sent_at`, was delivered.
    fn add(&mut self, now: Instant, sent_at: Instant, end: u32, rack: &mut Rack) {
        if self.units == 0 {
            // The run's first unit goes to RACK at once.
            rack.on_delivered(now, sent_at, end, false);
            self.latest = (sent_at, end);
        } else if sent_at >= self.latest.0 {
            self.latest = (sent_at, end);
        }
        self.last = (sent_at, end);
        self.units += 1;
    }

    /// Tells RACK of the run's most recently sent and last units; a new run starts.
    fn flush(&mut self, now: Instant, rack: &mut Rack) {
        if self.units > 1 {
            rack.on_delivered(now, self.latest.0, self.latest.1, false);
            rack.on_delivered(now, self.last.0, self.last.1, false);
        }
        self.units = 0;
    }
}

/// Units sent and not yet cumulatively acknowledged, in sequence order.
#[derive(Debug, Default)]
pub(crate) struct SendQueue {
    units: VecDeque<TxUnit>,
    /// RFC 6675 "pipe": bytes sent, not SACKed, not deemed lost (or retransmitted since).
    pipe: usize,
    /// Units marked lost and not yet retransmitted.
    lost_count: usize,
    /// Units SACKed.
    sacked_count: usize,
    /// Units retransmitted at least once.
    rtx_count: usize,
    /// Units acknowledged (or drained) whose payload was lent: loan record and buffer, for
    /// the engine to settle ([`Loans::settle`]) before the buffer is reused.
    lent_done: Vec<(u32, Vec<u8>)>,
}

impl SendQueue {
    pub(crate) fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// Empties the queue (the connection goes away), handing each unit's payload buffer
    /// that was never lent to `reclaim`; those lent wait for [`SendQueue::settle_lent`].
    pub(crate) fn drain_buffers(&mut self, mut reclaim: impl FnMut(Vec<u8>)) {
        self.pipe = 0;
        self.lost_count = 0;
        self.sacked_count = 0;
        self.rtx_count = 0;
        for u in self.units.drain(..) {
            if u.loan == NO_LOAN {
                reclaim(u.data);
            } else {
                self.lent_done.push((u.loan, u.data));
            }
        }
    }

    pub(crate) fn pipe(&self) -> usize {
        self.pipe
    }

    /// Units SACKed and not yet cumulatively acknowledged.
    pub(crate) fn sacked_count(&self) -> usize {
        self.sacked_count
    }

    /// Units marked lost and not yet retransmitted.
    pub(crate) fn lost_count(&self) -> usize {
        self.lost_count
    }

    pub(crate) fn len(&self) -> usize {
        self.units.len()
    }

    pub(crate) fn unit(&self, i: usize) -> &TxUnit {
        &self.units[i]
    }

    pub(crate) fn unit_mut(&mut self, i: usize) -> &mut TxUnit {
        &mut self.units[i]
    }

    /// A unit whose payload was lent was acknowledged: its buffer waits to be settled (out
    /// of line: the copying path's ACK loop keeps its instructions).
    #[inline(never)]
    fn lent_acked(lent_done: &mut Vec<(u32, Vec<u8>)>, loan: u32, buffer: Vec<u8>) {
        lent_done.push((loan, buffer));
    }

    /// Whether units whose payload was lent wait to be settled.
    #[inline(always)]
    pub(crate) fn has_lent_done(&self) -> bool {
        !self.lent_done.is_empty()
    }

    /// Settles the payloads of the units acknowledged (or drained) after being lent: each
    /// buffer no frame holds any more goes to `recycle`, the others stay with `loans`
    /// until their last frame lets go.
    pub(crate) fn settle_lent(&mut self, loans: &mut Loans, mut recycle: impl FnMut(Vec<u8>)) {
        for (r, buffer) in self.lent_done.drain(..) {
            if let Some(buffer) = loans.settle(r, buffer) {
                recycle(buffer);
            }
        }
    }

    /// Record a unit sent for the first time at `now`.
    pub(crate) fn push(&mut self, seq: u32, data: Vec<u8>, fin: bool, now: Instant) {
        self.push_unit(seq, data, 0, None, fin, now);
    }

    /// Record a data unit sent for the first time at `now`, with its room (at most its
    /// buffer's length, checked by the caller) and the payload's checksum sum when
    /// the source took it (kept for every transmission).
    pub(crate) fn push_summed(&mut self, seq: u32, unit: Unit, now: Instant) {
        self.push_unit(seq, unit.buffer, unit.head, unit.sum, false, now);
    }

    #[inline(always)]
    fn push_unit(
        &mut self,
        seq: u32,
        data: Vec<u8>,
        head: u16,
        sum: Option<PayloadSum>,
        fin: bool,
        now: Instant,
    ) {
        let u = TxUnit {
            head,
            seq,
            data,
            loan: NO_LOAN,
            sum,
            fin,
            sent_at: now,
            retransmitted: false,
            sacked: false,
            lost: false,
            in_pipe: true,
        };
        self.pipe += u.seq_len() as usize;
        // With room known, `push_back` has no growing call to keep the unit across, so it
        // is stored from registers into its slot: built on the stack (stores of its
        // fields' widths) and copied in 16-octet loads, the copy's loads could not take
        // the stores from the store buffer and waited for the frame's copy to commit.
        if self.units.len() < self.units.capacity() {
            self.units.push_back(u);
        } else {
            Self::push_growing(&mut self.units, u);
        }
    }

    /// [`VecDeque::push_back`] when the queue is full (it grows).
    #[cold]
    #[inline(never)]
    fn push_growing(units: &mut VecDeque<TxUnit>, u: TxUnit) {
        units.push_back(u);
    }

    /// Remove units wholly below `ack` (RFC 9293 §3.10.7.4, SND.UNA advance), handing their
    /// payload buffers to `recycle` and telling `rack` of those not SACKed before.
    pub(crate) fn ack(
        &mut self,
        ack: u32,
        now: Instant,
        rack: &mut Rack,
        mut recycle: impl FnMut(Vec<u8>),
    ) -> Acked {
        let mut out = Acked::default();
        let mut repaired = false;
        let mut run = DeliveredRun::default();
        // Each unit is moved out once: the first one the ACK does not cover goes back.
        while let Some(u) = self.units.pop_front() {
            let len = u.seq_len();
            let end = u.seq.wrapping_add(len);
            if !seq::le(end, ack) {
                self.units.push_front(u);
                break;
            }
            let len = len as usize;
            out.bytes += len;
            out.fin_acked |= u.fin;
            if u.in_pipe && !(u.lost | u.sacked | u.retransmitted) {
                // The usual unit: sent once, still in the pipe, delivered now.
                self.pipe -= len;
                run.add(now, u.sent_at, end, rack);
                out.rtt_sample_sent_at = Some(u.sent_at);
            } else {
                if u.in_pipe {
                    self.pipe -= len;
                }
                if u.lost {
                    self.lost_count -= 1;
                }
                if u.sacked {
                    self.sacked_count -= 1;
                } else {
                    if u.retransmitted {
                        run.flush(now, rack);
                        rack.on_delivered(now, u.sent_at, end, true);
                    } else {
                        run.add(now, u.sent_at, end, rack);
                    }
                    // Karn's algorithm (RFC 6298 §3): no samples from retransmitted units. A
                    // unit SACKed before was delivered then, not now (this ACK may come
                    // seconds later, once a hole below it was repaired): no sample either.
                    out.rtt_sample_sent_at = if u.retransmitted {
                        None
                    } else {
                        Some(u.sent_at)
                    };
                }
                if u.retransmitted {
                    self.rtx_count -= 1;
                    repaired = true;
                }
            }
            if u.loan == NO_LOAN {
                recycle(u.data);
            } else {
                Self::lent_acked(&mut self.lent_done, u.loan, u.data);
            }
        }
        run.flush(now, rack);
        // An ACK that covers a retransmission may have waited for it: the units above were
        // delivered earlier, whether a SACK said so or not (the SACK carrying them can be
        // lost, or have had no room for their block). No sample then.
        if repaired {
            out.rtt_sample_sent_at = None;
        }
        out
    }

    /// Mark units covered by a SACK block `[left, right)` (RFC 2018 §4), telling `rack` of
    /// each. Returns whether a unit became SACKed.
    pub(crate) fn sack(&mut self, left: u32, right: u32, now: Instant, rack: &mut Rack) -> bool {
        let mut changed = false;
        // Units are in sequence order: skip those ending at or before `left`.
        let first = self.units.partition_point(|u| seq::le(u.end(), left));
        for u in self.units.iter_mut().skip(first) {
            if !seq::lt(u.seq, right) {
                break;
            }
            if seq::ge(u.seq, left) && seq::le(u.end(), right) && !u.sacked {
                u.sacked = true;
                self.sacked_count += 1;
                rack.on_delivered(now, u.sent_at, u.end(), u.retransmitted);
                if u.lost {
                    u.lost = false;
                    self.lost_count -= 1;
                }
                if u.in_pipe {
                    u.in_pipe = false;
                    self.pipe -= u.seq_len() as usize;
                }
                changed = true;
            }
        }
        changed
    }

    /// Whether RACK may find a unit lost: only units sent before a delivered one can be,
    /// and without SACKed or retransmitted units in the queue none is (the rest were sent
    /// in sequence order after everything cumulatively acknowledged).
    pub(crate) fn rack_may_lose(&self) -> bool {
        self.sacked_count > 0 || self.rtx_count > 0
    }

    /// RACK loss detection (RFC 8985 §6.2 step 5, RACK_detect_loss): marks lost every unit
    /// neither SACKed nor already marked that was sent before the most recently sent
    /// delivered unit and is older than `rack`'s RTT plus `reo_wnd`. Returns whether a unit
    /// was newly marked, and when the next unit would be (the reordering timer).
    ///
    /// Each unit was first sent after every unit before it in sequence order, and sent
    /// again only later: once a unit never retransmitted was sent after RACK's reference,
    /// so was every unit beyond it, and the walk stops there (Linux walks its send-time
    /// ordered queue and stops the same way). A hole at the front of a long flight then
    /// costs an ACK a walk over the hole, not over the whole flight.
    pub(crate) fn rack_detect_loss(
        &mut self,
        now: Instant,
        rack: &Rack,
        reo_wnd: core::time::Duration,
    ) -> (bool, Option<Instant>) {
        let mut marked = false;
        let mut next: Option<Instant> = None;
        let mut pipe = self.pipe;
        let mut lost_count = self.lost_count;
        for u in self.units.iter_mut().filter(|u| !u.sacked && !u.lost) {
            let Some(at) = rack.lost_at(u.sent_at, u.end(), reo_wnd) else {
                if u.retransmitted {
                    continue;
                }
                break;
            };
            if at <= now {
                u.lost = true;
                lost_count += 1;
                marked = true;
                if u.in_pipe {
                    u.in_pipe = false;
                    pipe -= u.seq_len() as usize;
                }
            } else {
                // RFC 8985 §6.2: the timer covers the unit that is due last.
                next = Some(next.map_or(at, |n| n.max(at)));
            }
        }
        self.pipe = pipe;
        self.lost_count = lost_count;
        (marked, next)
    }

    /// Mark the first un-SACKed unit lost (fast retransmit, RFC 5681 §3.2 / RFC 6582).
    pub(crate) fn mark_first_lost(&mut self) {
        if let Some(u) = self.units.iter_mut().find(|u| !u.sacked) {
            if !u.lost {
                u.lost = true;
                self.lost_count += 1;
                if u.in_pipe {
                    u.in_pipe = false;
                    self.pipe -= u.seq_len() as usize;
                }
            }
        }
    }

    /// After a retransmission timeout every un-SACKed unit is considered lost.
    pub(crate) fn mark_all_lost(&mut self) {
        for u in self.units.iter_mut().filter(|u| !u.sacked) {
            if !u.lost {
                u.lost = true;
                self.lost_count += 1;
            }
            if u.in_pipe {
                u.in_pipe = false;
                self.pipe -= u.seq_len() as usize;
            }
        }
    }

    /// A timeout proved spurious (RFC 4015): units marked lost by it and not retransmitted
    /// yet are in flight after all.
    pub(crate) fn undo_lost(&mut self) {
        for u in self.units.iter_mut().filter(|u| u.lost) {
            u.lost = false;
            if !u.in_pipe {
                u.in_pipe = true;
                self.pipe += u.seq_len() as usize;
            }
        }
        self.lost_count = 0;
    }

    /// Index of the first unit awaiting retransmission (RFC 6675 NextSeg rule 1).
    pub(crate) fn next_lost(&self) -> Option<usize> {
        if self.lost_count == 0 {
            return None;
        }
        self.units.iter().position(|u| u.lost)
    }

    /// Record the retransmission of unit `i` at `now`.
    pub(crate) fn retransmitted(&mut self, i: usize, now: Instant) {
        let u = &mut self.units[i];
        if u.lost {
            u.lost = false;
            self.lost_count -= 1;
        }
        if !u.retransmitted {
            self.rtx_count += 1;
        }
        u.retransmitted = true;
        u.sent_at = now;
        if !u.in_pipe {
            u.in_pipe = true;
            self.pipe += u.seq_len() as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q() -> SendQueue {
        let mut q = SendQueue::default();
        for i in 0..6u32 {
            q.push(1000 + i * 100, vec![0; 100], false, Instant::ZERO);
        }
        q
    }

    // RFC 8985 §6.2: with the units sent together, SACKs above two holes mark both lost
    // once the reordering window has passed (zero here: DupThresh units SACKed).
    #[test]
    fn sack_marks_only_holes_lost() {
        let mut q = q();
        let mut rack = Rack::default();
        let now = Instant::from_micros(100);
        assert_eq!(q.pipe(), 600);
        q.sack(1100, 1200, now, &mut rack);
        q.sack(1300, 1600, now, &mut rack);
        assert_eq!(q.sacked_count(), 4);
        let wnd = rack.reo_wnd(false, q.sacked_count(), None);
        assert_eq!(q.rack_detect_loss(now, &rack, wnd), (true, None));
        assert_eq!(q.next_lost(), Some(0));
        let lost: Vec<bool> = (0..6).map(|i| q.unit(i).lost).collect();
        assert_eq!(lost, vec![true, false, true, false, false, false]);
        assert_eq!(q.pipe(), 0);
        q.retransmitted(0, now);
        assert_eq!(q.pipe(), 100);
        let a = q.ack(1200, now, &mut rack, drop);
        assert_eq!(a.bytes, 200);
        assert!(
            a.rtt_sample_sent_at.is_none(),
            "the unit delivered now was retransmitted, the other one SACKed before"
        );
        assert_eq!(q.next_lost(), Some(0));
        assert_eq!(q.sacked_count(), 3);
        // 1200..1300 was neither SACKed nor retransmitted: its delivery is a sample.
        let a = q.ack(1300, now, &mut rack, drop);
        assert_eq!(a.rtt_sample_sent_at, Some(Instant::ZERO));
    }

    // RFC 6298 §3 (Karn): an ACK that covers a retransmission gives no RTT sample, not even
    // from the units above it that no SACK reported (they may have waited for the repair).
    #[test]
    fn ack_covering_a_retransmission_gives_no_sample() {
        let mut q = q();
        let mut rack = Rack::default();
        q.retransmitted(0, Instant::from_micros(50));
        let a = q.ack(1300, Instant::from_micros(100), &mut rack, drop);
        assert_eq!(a.bytes, 300);
        assert_eq!(a.rtt_sample_sent_at, None);
        let a = q.ack(1400, Instant::from_micros(150), &mut rack, drop);
        assert_eq!(a.rtt_sample_sent_at, Some(Instant::ZERO));
    }

    // RFC 8985 §6.2: a hole is not lost before RTT + reo_wnd have passed since it was
    // sent; the reordering timer is set for then.
    #[test]
    fn rack_waits_out_the_reordering_window() {
        let mut q = q();
        let mut rack = Rack::default();
        let now = Instant::from_micros(40);
        q.sack(1100, 1200, now, &mut rack);
        let wnd = core::time::Duration::from_micros(10);
        let (marked, next) = q.rack_detect_loss(now, &rack, wnd);
        assert!(!marked);
        assert_eq!(next, Some(Instant::from_micros(50)));
        let (marked, _) = q.rack_detect_loss(Instant::from_micros(50), &rack, wnd);
        assert!(marked);
        assert_eq!(q.next_lost(), Some(0));
        assert!(
            !q.unit(2).lost,
            "sent at the same time, above the delivered unit"
        );
    }

    // RFC 9293 §3.10.7.4, RFC 6298 §3, RFC 8985 §6.1: a partial ACK frees only the units
    // wholly below it and leaves the first one it does not cover in place, state and all;
    // a duplicate ACK frees nothing; a cumulative ACK over a retransmission frees the rest
    // without an RTT sample and tells RACK of its newest unit.
    #[test]
    fn ack_sequence_frees_units_in_place() {
        let mut q = q();
        let mut rack = Rack::default();
        q.sack(1400, 1500, Instant::from_micros(10), &mut rack);
        q.mark_first_lost();
        q.retransmitted(0, Instant::from_micros(20));
        assert_eq!(q.pipe(), 500);
        let a = q.ack(1050, Instant::from_micros(30), &mut rack, drop);
        assert_eq!((a.bytes, q.len()), (0, 6), "inside the first unit");
        assert!(q.unit(0).retransmitted && q.unit(0).in_pipe);
        let a = q.ack(1050, Instant::from_micros(31), &mut rack, drop);
        assert_eq!((a.bytes, q.len()), (0, 6), "a duplicate frees nothing");
        let a = q.ack(1450, Instant::from_micros(40), &mut rack, drop);
        assert_eq!(a.bytes, 400);
        assert_eq!(a.rtt_sample_sent_at, None, "covers a retransmission");
        assert_eq!(q.len(), 2);
        assert_eq!((q.unit(0).seq, q.unit(0).sacked), (1400, true));
        assert_eq!(q.unit(0).data.len(), 100);
        assert_eq!((q.pipe(), q.sacked_count()), (100, 1));
        let a = q.ack(1600, Instant::from_micros(50), &mut rack, drop);
        assert_eq!(a.bytes, 200);
        assert_eq!(a.rtt_sample_sent_at, Some(Instant::ZERO));
        assert!(q.is_empty());
        assert_eq!(
            (q.pipe(), q.sacked_count(), q.rack_may_lose()),
            (0, 0, false)
        );
        // RACK's newest delivered unit is the retransmission (sent at 20, delivered at 40).
        let rack_rtt_end = rack.lost_at(Instant::ZERO, 1600, core::time::Duration::ZERO);
        assert_eq!(rack_rtt_end, Some(Instant::from_micros(20)));
    }

    // Acknowledged units hand their payload buffers back, in order, whole.
    #[test]
    fn ack_recycles_payload_buffers() {
        let mut q = q();
        let mut back = Vec::new();
        let a = q.ack(1250, Instant::ZERO, &mut Rack::default(), |b| back.push(b));
        assert_eq!(a.bytes, 200);
        assert_eq!(back.len(), 2, "only units wholly below the ACK");
        assert!(back.iter().all(|b| b.len() == 100 && b.capacity() >= 100));
        assert_eq!(q.len(), 4);
    }

    // A lent unit's buffer is reused only once it was acknowledged and every frame holding
    // it let go, whichever comes last; a token handed back twice changes nothing.
    #[test]
    fn lent_units_are_recycled_only_when_no_frame_holds_them() {
        let owner = ConnId::for_tests(3);
        let mut q = q();
        q.units[0].data = vec![7; 100];
        let mut loans = Loans::default();
        let held = loans.lend(q.unit_mut(0), owner).unwrap();
        assert_eq!(
            loans.lend(q.unit_mut(0), owner),
            Some(held),
            "a retransmission"
        );
        let released = loans.lend(q.unit_mut(1), owner).unwrap();
        assert_ne!(held, released);
        assert_eq!(
            loans.returned(u64::from(released)),
            None,
            "not acknowledged yet"
        );
        let mut back = Vec::new();
        let a = q.ack(1300, Instant::ZERO, &mut Rack::default(), |b| back.push(b));
        assert_eq!(a.bytes, 300);
        assert_eq!(back.len(), 1, "the unit never lent");
        assert!(q.has_lent_done());
        q.settle_lent(&mut loans, |b| back.push(b));
        assert_eq!(back.len(), 2, "the lent unit no frame holds");
        assert!(!q.has_lent_done());
        assert_eq!(
            loans.parked(held),
            Some(&[7u8; 100][..]),
            "two frames hold it"
        );
        assert_eq!(
            loans.returned(u64::from(held)),
            None,
            "one frame still holds it"
        );
        let (who, buffer) = loans.returned(u64::from(held)).unwrap();
        assert_eq!((who, buffer), (owner, vec![7; 100]));
        assert_eq!(loans.returned(u64::from(held)), None, "handed back twice");
        assert_eq!(
            loans.returned(u64::from(u32::MAX) + 1),
            None,
            "no such token"
        );
        assert_eq!(loans.free.len(), 2);
    }

    // A loan record is reused once its unit was settled (the next unit lent gets the same
    // token); at most MAX_LOANS records exist, and with all of them taken nothing is lent.
    #[test]
    fn loan_records_are_reused_and_bounded() {
        let owner = ConnId::for_tests(0);
        let mut loans = Loans::default();
        let mut q = SendQueue::default();
        let n = MAX_LOANS as u32 + 2;
        for i in 0..n {
            q.push(i, vec![i as u8], false, Instant::ZERO);
        }
        let first = loans.lend(q.unit_mut(0), owner).unwrap();
        assert_eq!(loans.returned(u64::from(first)), None);
        q.ack(1, Instant::ZERO, &mut Rack::default(), drop);
        let mut back = Vec::new();
        q.settle_lent(&mut loans, |b| back.push(b));
        assert_eq!(back, vec![vec![0u8]], "the buffer comes back whole");
        assert_eq!(
            loans.lend(q.unit_mut(0), owner),
            Some(first),
            "the same record"
        );
        for i in 1..MAX_LOANS {
            assert!(loans.lend(q.unit_mut(i), owner).is_some());
        }
        assert!(loans.full());
        assert_eq!(loans.records.len(), MAX_LOANS, "bounded");
        let last = MAX_LOANS;
        assert_eq!(loans.lend(q.unit_mut(last), owner), None);
        assert_eq!(q.unit(last).loan, NO_LOAN);
    }

    // RFC 6298 §3 (Karn): no RTT sample when the newest acked unit was retransmitted.
    #[test]
    fn karn_no_sample_from_retransmission() {
        let mut q = q();
        q.mark_first_lost();
        q.retransmitted(0, Instant::from_millis(5));
        let mut rack = Rack::default();
        let a = q.ack(1100, Instant::from_millis(6), &mut rack, drop);
        assert!(a.rtt_sample_sent_at.is_none());
    }

    /// A unit of [`acked_units_tell_rack_what_each_would`]: its length, when it was sent
    /// (first or last), whether it was retransmitted then, whether a SACK covered it.
    type UnitCase = (u32, u64, bool, bool);

    /// RACK's state after the units below `ack` were delivered, as the queue tells it.
    fn rack_after_ack(units: &[UnitCase], before: &[(u64, u32, bool)], ack: u32) -> String {
        let mut rack = Rack::default();
        for &(t, end, r) in before {
            rack.on_delivered(Instant::from_micros(500), Instant::from_micros(t), end, r);
        }
        let mut q = SendQueue::default();
        let mut seq = u32::MAX - 3000;
        for (i, &(len, t, rtx, sacked)) in units.iter().enumerate() {
            q.push(seq, vec![0; len as usize], false, Instant::from_micros(t));
            if rtx {
                q.retransmitted(i, Instant::from_micros(t));
            }
            if sacked {
                q.sack(
                    seq,
                    seq.wrapping_add(len),
                    Instant::from_micros(400),
                    &mut rack,
                );
            }
            seq = seq.wrapping_add(len);
        }
        q.ack(ack, Instant::from_micros(450), &mut rack, drop);
        format!("{rack:?}")
    }

    /// The same, telling RACK of each unit in turn (RFC 8985 §6.2 per segment).
    fn rack_after_each(units: &[UnitCase], before: &[(u64, u32, bool)], ack: u32) -> String {
        let mut rack = Rack::default();
        for &(t, end, r) in before {
            rack.on_delivered(Instant::from_micros(500), Instant::from_micros(t), end, r);
        }
        let mut seq = u32::MAX - 3000;
        for &(len, t, rtx, sacked) in units {
            let end = seq.wrapping_add(len);
            if sacked {
                rack.on_delivered(Instant::from_micros(400), Instant::from_micros(t), end, rtx);
            }
            seq = end;
        }
        let mut seq = u32::MAX - 3000;
        for &(len, t, rtx, sacked) in units {
            let end = seq.wrapping_add(len);
            if !seq::le(end, ack) {
                break;
            }
            if !sacked {
                rack.on_delivered(Instant::from_micros(450), Instant::from_micros(t), end, rtx);
            }
            seq = end;
        }
        format!("{rack:?}")
    }

    /// A unit of [`rack_walk_stops_early_with_the_same_outcome`]: microseconds after the
    /// previous unit's first send, a retransmission that many microseconds after its own
    /// first send (before later units' first sends, or after), SACKed, marked lost.
    type WalkUnit = (u64, Option<u64>, bool, bool);

    /// A queue of 100-octet units as `units` describe them.
    fn walk_queue(units: &[WalkUnit]) -> SendQueue {
        let mut q = SendQueue::default();
        let mut t = 0;
        for (i, &(gap, _, _, _)) in units.iter().enumerate() {
            t += gap;
            q.push(
                1000 + i as u32 * 100,
                vec![0; 100],
                false,
                Instant::from_micros(t),
            );
        }
        for (i, &(_, rtx, sacked, lost)) in units.iter().enumerate() {
            if let Some(after) = rtx {
                let first = q.units[i].sent_at;
                q.retransmitted(i, first + core::time::Duration::from_micros(after));
            }
            if sacked {
                let s = 1000 + i as u32 * 100;
                q.sack(s, s + 100, Instant::from_micros(t), &mut Rack::default());
            } else if lost {
                q.units[i].lost = true;
                q.lost_count += 1;
                if q.units[i].in_pipe {
                    q.units[i].in_pipe = false;
                    q.pipe -= 100;
                }
            }
        }
        q
    }

    /// RACK_detect_loss over every unit (RFC 8985 §6.2 step 5 as written).
    fn detect_over_all(
        q: &mut SendQueue,
        now: Instant,
        rack: &Rack,
        wnd: core::time::Duration,
    ) -> (bool, Option<Instant>) {
        let (mut marked, mut next) = (false, None::<Instant>);
        for u in q.units.iter_mut().filter(|u| !u.sacked && !u.lost) {
            let Some(at) = rack.lost_at(u.sent_at, u.end(), wnd) else {
                continue;
            };
            if at <= now {
                u.lost = true;
                q.lost_count += 1;
                marked = true;
                if u.in_pipe {
                    u.in_pipe = false;
                    q.pipe -= u.seq_len() as usize;
                }
            } else {
                next = Some(next.map_or(at, |n| n.max(at)));
            }
        }
        (marked, next)
    }

    proptest::proptest! {
        /// A cumulative ACK tells RACK of runs of units in three calls, not one a unit:
        /// RACK ends as it would after one call a unit, whatever the send times (out of
        /// order too), retransmissions, SACKs and RACK's state before.
        #[test]
        fn acked_units_tell_rack_what_each_would(
            units in proptest::collection::vec(
                (1u32..200, 0u64..400, proptest::bool::weighted(0.2), proptest::bool::weighted(0.2)),
                1..40,
            ),
            before in proptest::collection::vec(
                (0u64..400, 0u32..8000, proptest::bool::ANY),
                0..3,
            ),
            upto in 0usize..40,
        ) {
            let before: Vec<(u64, u32, bool)> = before
                .into_iter()
                .map(|(t, end, r)| (t, (u32::MAX - 4000).wrapping_add(end), r))
                .collect();
            let upto = upto.min(units.len());
            let ack = units[..upto]
                .iter()
                .fold(u32::MAX - 3000, |s, u| s.wrapping_add(u.0));
            proptest::prop_assert_eq!(
                rack_after_ack(&units, &before, ack),
                rack_after_each(&units, &before, ack)
            );
        }

        /// RFC 8985 §6.2 step 5: the walk that stops past the units sent after RACK's
        /// reference marks the same units lost, and arms the same reordering timer, as a
        /// walk over every unit, whatever the send times, retransmissions, SACKs and
        /// earlier marks.
        #[test]
        fn rack_walk_stops_early_with_the_same_outcome(
            units in proptest::collection::vec(
                (
                    0u64..4,
                    proptest::option::weighted(0.1, 0u64..30),
                    proptest::bool::weighted(0.2),
                    proptest::bool::weighted(0.1),
                ),
                1..60,
            ),
            reference in (0u64..300, 0u32..8000),
            wait in 0u64..60,
            wnd in 0u64..20,
        ) {
            let last = units.iter().map(|u| u.0).sum::<u64>();
            let now = Instant::from_micros(last + 30 + wait);
            let mut rack = Rack::default();
            rack.on_delivered(
                Instant::from_micros(last + 30),
                Instant::from_micros(reference.0),
                1000 + reference.1,
                false,
            );
            let wnd = core::time::Duration::from_micros(wnd);
            let mut q = walk_queue(&units);
            let mut all = walk_queue(&units);
            let got = q.rack_detect_loss(now, &rack, wnd);
            let want = detect_over_all(&mut all, now, &rack, wnd);
            proptest::prop_assert_eq!(got, want);
            let lost = |q: &SendQueue| q.units.iter().map(|u| u.lost).collect::<Vec<_>>();
            proptest::prop_assert_eq!(lost(&q), lost(&all));
            proptest::prop_assert_eq!((q.pipe, q.lost_count), (all.pipe, all.lost_count));
        }
    }
}
