//! The receive side: every TCP segment goes to the MPA receiver before TCP copies it;
//! verified FPDUs go to the engine with their stream positions, out-of-order ones are placed
//! at once and reported as consumed, so TCP keeps only what nobody could place.

use tcp::{Instant, SegmentSink};

use super::connection::{Connection, Phase};
use super::inbound::RxGate;
use crate::ddp::untagged::RecvSupply;
use crate::ddp::SegmentPos;
use crate::mem::{BufferPool, HasMemoryTable, MemoryTable, StreamId};
use crate::mpa::{Delivery, MpaError, Receiver, Role};
use crate::rdmap::{Engine, Handled, StreamState};

/// What the receive path is lent for one call: the memory table it places through and the
/// shared receive queue (if any) its stream takes buffers from.
pub(super) trait RxContext: HasMemoryTable + RecvSupply {}

impl<C: HasMemoryTable + RecvSupply + ?Sized> RxContext for C {}

/// Hands `segment` to `engine`, after taking from `cx` the receive buffers it needs and the
/// engine lacks (a stream on a shared receive queue takes one per message, when the message
/// arrives: VERBS-00 §6.3.5). Without them the engine Terminates the stream ("no buffer").
#[inline]
fn hand_in<C: RxContext + ?Sized>(
    engine: &mut Engine,
    cx: &mut C,
    stream: StreamId,
    now: Instant,
    pos: SegmentPos,
    segment: &[u8],
) -> Handled {
    for _ in 0..engine.recv_buffers_wanted(segment) {
        let Some(b) = cx.take_recv(stream) else {
            break;
        };
        if engine.post_recv(b).is_err() {
            break;
        }
    }
    engine.handle_ddp_segment(now, pos, segment, cx.table_mut())
}
use crate::wire::mpa::{fpdu_len, MARKER_LEN, ULPDU_LENGTH_LEN};

/// A call into the receiver with the delivery closure of [`Connection::with_receiver`]:
/// generic over the closure, so that each FPDU reaches the engine by a direct call (a
/// `dyn FnMut` made one indirect call, and a frame of its own, per FPDU).
trait ReceiverCall {
    /// What the receiver answers.
    type Out;
    /// Runs the call on `rx`, handing its ULPDUs to `deliver`.
    fn run<F: FnMut(Delivery<'_>)>(self, rx: &mut Receiver, deliver: F) -> Self::Out;
}

/// [`Receiver::handle_in_order`].
struct InOrder<'d> {
    seq: u32,
    data: &'d [u8],
}

impl ReceiverCall for InOrder<'_> {
    type Out = Result<(), MpaError>;
    fn run<F: FnMut(Delivery<'_>)>(self, rx: &mut Receiver, deliver: F) -> Self::Out {
        rx.handle_in_order(self.seq, self.data, deliver)
    }
}

/// [`Receiver::handle_segment`] for a segment ahead of RCV.NXT.
struct Ahead<'d> {
    seq: u32,
    payload: &'d [u8],
}

impl ReceiverCall for Ahead<'_> {
    type Out = Result<crate::mpa::Consumed, MpaError>;
    fn run<F: FnMut(Delivery<'_>)>(self, rx: &mut Receiver, deliver: F) -> Self::Out {
        rx.handle_segment(self.seq, self.payload, false, deliver)
    }
}

impl Connection {
    /// Delivers the segments held behind a peer-to-peer RTR once the consumer has polled
    /// `Established` (it moves its QP to RTS before pumping or handing in more input).
    /// Inline, called for every segment: the gate is almost always gone.
    #[inline]
    pub(super) fn release_rx_gate<C: RxContext + ?Sized>(&mut self, cx: &mut C) {
        let Phase::Fpdu(f) = &self.phase else {
            return;
        };
        if f.inbound.gate.as_ref().is_some_and(|g| g.open) {
            self.release_open_rx_gate(cx);
        }
    }

    /// [`Connection::release_rx_gate`] once the gate is open.
    #[inline(never)]
    fn release_open_rx_gate<C: RxContext + ?Sized>(&mut self, cx: &mut C) {
        let Phase::Fpdu(f) = &mut self.phase else {
            return;
        };
        let Some(gate) = f.inbound.gate.take() else {
            return;
        };
        let mut deferred = false;
        let stream = self.cfg.stream;
        for (pos, seg) in &gate.segments {
            if hand_in(&mut f.engine, cx, stream, self.now, *pos, seg) == Handled::Deferred {
                deferred = true;
            }
        }
        if let Some(pos) = gate.position {
            f.engine
                .handle_in_order_position(self.now, pos, cx.table_mut());
        }
        if deferred {
            let e = self.early_segments_held();
            self.mpa_error(e);
        }
    }

    /// Counts a DDP segment that arrived early when the engine already holds as many as it
    /// may, and gives the error that ends the stream.
    fn early_segments_held(&mut self) -> MpaError {
        self.stats.deferred_segments += 1;
        MpaError::Framing("too many early segments held")
    }

    /// Octets at RCV.NXT, taken whole in every phase (the negotiation's, FPDUs, none once
    /// closed): what [`SegmentSink::on_run_segment`] and [`SegmentSink::on_in_order`] share
    /// before each pumps in its own way.
    #[inline(always)]
    fn take_in_order<C: RxContext + ?Sized>(
        &mut self,
        cx: &mut C,
        now: Instant,
        seq: u32,
        bytes: &[u8],
    ) {
        self.advance_time(now);
        self.release_rx_gate(cx);
        self.note_rx_end(seq, bytes.len());
        match &self.phase {
            Phase::Negotiating(_) => self.negotiate_input(seq, bytes, cx),
            Phase::Fpdu(_) => self.receive_in_order(seq, bytes, cx),
            Phase::Closed(_) => {}
        }
    }

    /// In-order stream octets in FPDU mode: the whole FPDUs of RDMA Writes at their start
    /// through the fast path ([`Connection::place_write_run`]), the rest through the
    /// receiver.
    pub(super) fn receive_in_order<C: RxContext + ?Sized>(
        &mut self,
        seq: u32,
        data: &[u8],
        cx: &mut C,
    ) {
        let done = self.place_write_run(seq, data, cx);
        if done < data.len() {
            self.receive_in_order_general(seq.wrapping_add(done as u32), &data[done..], cx);
        }
        if let Phase::Fpdu(f) = &mut self.phase {
            // RFC 5044 §7.1.2 rule 4: a responder sends once it received and validated an
            // FPDU of the initiator's.
            if f.sender.hold_until.is_some()
                && f.negotiated.role == Role::Responder
                && self.stats.fpdus_received > 0
            {
                f.sender.hold_until = None;
            }
        }
    }

    /// In-order stream octets through the receiver (out of line: the fast path's frame
    /// stays small).
    #[inline(never)]
    fn receive_in_order_general<C: RxContext + ?Sized>(
        &mut self,
        seq: u32,
        data: &[u8],
        cx: &mut C,
    ) {
        let r = self.with_receiver(cx, InOrder { seq, data });
        if let Some(Err(e)) = r {
            self.mpa_error(e);
        }
    }

    /// The in-order fast path: while `data` (in-order octets at `seq`) starts with a whole
    /// FPDU at the receiver's boundary whose CRC matches and whose ULPDU is the next
    /// segment of an RDMA Write that places ([`Receiver::whole_fpdu_at`],
    /// [`Engine::place_next_write`]), hands it up as the delivery closure of
    /// [`Connection::with_receiver`] would, and moves on. Returns the octets taken: whole
    /// FPDUs from the start, after which the receiver is at a boundary again. Whatever it
    /// declines (another message, an FPDU cut by the segment's end, markers, the RTR gate,
    /// a check that fails) goes the general way, which reports errors as before.
    ///
    /// [`Receiver::whole_fpdu_at`]: crate::mpa::Receiver::whole_fpdu_at
    #[inline]
    fn place_write_run<C: RxContext + ?Sized>(
        &mut self,
        seq: u32,
        data: &[u8],
        cx: &mut C,
    ) -> usize {
        let Phase::Fpdu(f) = &mut self.phase else {
            return 0;
        };
        let inbound = &mut f.inbound;
        if !self.rx_fast_path || inbound.awaiting_rtr || inbound.gate.is_some() {
            return 0;
        }
        let mem = cx.table_mut();
        let mut done = 0;
        while let Some(rest) = data.get(done..).filter(|r| !r.is_empty()) {
            let at = seq.wrapping_add(done as u32);
            let Some((ulpdu, span)) = inbound.receiver.whole_fpdu_at(at, rest) else {
                break;
            };
            // No markers: the FPDU's stream offsets are its own (see `with_receiver`).
            let start = inbound.offsets.offset(at);
            let pos = SegmentPos {
                start,
                end: start + span as u64,
            };
            if !f.engine.place_next_write(self.now, pos, ulpdu, mem) {
                break;
            }
            inbound.receiver.pass_fpdu(span);
            self.stats.fpdus_received += 1;
            self.stats.fpdus_fast += 1;
            self.ops.received(ulpdu);
            done += span;
        }
        done
    }

    /// Runs `call` with the receiver and a delivery closure that hands ULPDUs to the engine.
    fn with_receiver<C: RxContext + ?Sized, K: ReceiverCall>(
        &mut self,
        cx: &mut C,
        call: K,
    ) -> Option<K::Out> {
        let Connection {
            phase: Phase::Fpdu(fpdu),
            negotiator,
            stats,
            ops,
            cfg,
            now,
            ..
        } = self
        else {
            return None;
        };
        let now = *now;
        let stream = cfg.stream;
        let inbound = &mut fpdu.inbound;
        let engine = &mut fpdu.engine;
        let spacing = inbound.spacing;
        let offsets = inbound.offsets;
        let awaiting_rtr = &mut inbound.awaiting_rtr;
        let gate = &mut inbound.gate;
        let mut failure: Option<MpaError> = None;
        let mut deferred = false;
        let mut deliver = |d: Delivery<'_>| {
            stats.fpdus_received += 1;
            ops.received(d.ulpdu);
            if !d.in_order {
                stats.fpdus_placed_ahead += 1;
                stats.bytes_placed_ahead += d.ulpdu.len() as u64;
            }
            if *awaiting_rtr && d.in_order {
                // RFC 6581 §5: the first FPDU is the agreed zero-length message.
                *awaiting_rtr = false;
                match negotiator.handle_rtr(now, d.ulpdu) {
                    Ok(()) => *gate = Some(RxGate::default()),
                    Err(e) => {
                        failure.get_or_insert(e);
                    }
                }
                return;
            }
            // Stream offsets of the FPDU, its leading marker included (RFC 5044 §5: a
            // marker right in front of ULPDU_Length belongs to this FPDU), so consecutive
            // FPDUs have adjacent positions.
            let first = offsets.offset(d.seq);
            let len = fpdu_len(d.ulpdu.len());
            let (lead, span) = match spacing {
                Some(sp) => {
                    let lead = sp.is_marker_at(d.seq.wrapping_sub(MARKER_LEN as u32));
                    (
                        if lead { MARKER_LEN } else { 0 },
                        sp.interior_span(d.seq, len),
                    )
                }
                None => (0, len),
            };
            let pos = SegmentPos {
                start: first.saturating_sub(lead as u64),
                end: first + span as u64,
            };
            if let Some(gate) = gate {
                // Bounded by what the peer may send before our first answer: its window.
                if gate.bytes + d.ulpdu.len() > cfg.rx_window.max(64 * 1024) {
                    failure.get_or_insert(MpaError::Framing("too much data behind the RTR"));
                } else {
                    gate.bytes += d.ulpdu.len();
                    gate.segments.push((pos, d.ulpdu.to_vec()));
                }
                return;
            }
            let early = match cfg.rx_fast_path && !d.in_order {
                true => engine.place_early_write(now, pos, d.ulpdu, cx.table_mut()),
                false => None,
            };
            let handled = early.unwrap_or_else(|| hand_in(engine, cx, stream, now, pos, d.ulpdu));
            if handled == Handled::Deferred {
                deferred = true;
            }
        };
        let r = call.run(&mut inbound.receiver, &mut deliver);
        if deferred {
            let e = self.early_segments_held();
            failure.get_or_insert(e);
        }
        if let Some(e) = failure {
            self.mpa_error(e);
        }
        Some(r)
    }

    /// What `pump_and_fill` does after a segment, with the fill left out when the engine
    /// has nothing to give (the receiving side's usual case: the fill would only find that).
    fn pump_after_segment<M: MemoryTable + ?Sized>(
        &mut self,
        mem: &M,
        pool: Option<&mut BufferPool>,
    ) {
        if let Phase::Fpdu(f) = &self.phase {
            // FPDU mode with nothing to forward or send: only the stall clock to look at.
            if self.negotiator_done && !f.engine.has_events() && !f.engine.has_tx_work() {
                self.track_partial_fpdu();
                return;
            }
        }
        self.pump();
        if self.phase.stream().is_some_and(|(e, _)| e.has_tx_work()) {
            self.fill_tx(mem, pool);
        }
    }

    /// Counts octets of a segment ahead of RCV.NXT that MPA left to TCP.
    fn count_left(&mut self, seq: u32, payload: &[u8], range: std::ops::Range<usize>) {
        if range.is_empty() {
            return;
        }
        self.stats.bytes_left_to_tcp += range.len() as u64;
        let at = seq.wrapping_add(range.start as u32);
        let mut off = range.start;
        let spacing = match &self.phase {
            Phase::Fpdu(f) => f.inbound.spacing,
            _ => None,
        };
        if spacing.is_some_and(|sp| sp.is_marker_at(at)) {
            off += MARKER_LEN;
        }
        let tagged = payload
            .get(off + ULPDU_LENGTH_LEN)
            .is_some_and(|c| c & 0x80 != 0);
        if tagged {
            self.stats.tagged_bytes_left_to_tcp += range.len() as u64;
        }
    }

    /// Notes the end of stream octets TCP handed in.
    fn note_rx_end(&mut self, seq: u32, len: usize) {
        let end = seq.wrapping_add(len as u32);
        match self.rx_highest {
            Some(h) if (end.wrapping_sub(h) as i32) <= 0 => {}
            _ => self.rx_highest = Some(end),
        }
    }

    /// When the partial FPDU the receiver holds counts as stalled: it has not grown for
    /// `partial_fpdu_timeout` and TCP handed in nothing beyond it (nothing missing before
    /// it, nothing held ahead of it), so the peer sent all it means to send (RFC 5044 §4.1:
    /// an FPDU-aligned sender never leaves part of an FPDU unsent).
    pub(super) fn stall_deadline(&self) -> Option<Instant> {
        let Phase::Fpdu(f) = &self.phase else {
            return None;
        };
        let (_, _, since) = f.inbound.stall?;
        let next = f.inbound.receiver.next_seq();
        let beyond = self
            .rx_highest
            .is_some_and(|h| (h.wrapping_sub(next) as i32) > 0);
        if beyond {
            return None;
        }
        Some(since + self.cfg.partial_fpdu_timeout)
    }

    /// Ends the stream when its partial FPDU stalled (see [`Connection::stall_deadline`]).
    pub(super) fn check_stall(&mut self, now: Instant) {
        if self.stall_deadline().is_none_or(|t| now < t) {
            return;
        }
        let Phase::Fpdu(f) = &mut self.phase else {
            return;
        };
        if let Some((seq, held, claimed)) = f.inbound.receiver.pending_fpdu() {
            f.inbound.stall = None;
            self.stats.stalled_fpdus += 1;
            self.mpa_error(MpaError::IncompleteFpdu { seq, held, claimed });
        }
    }

    /// Restarts the stall clock whenever the partial FPDU changed. Inline, called after
    /// every segment: with no partial FPDU held and no clock running nothing changes.
    #[inline]
    pub(super) fn track_partial_fpdu(&mut self) {
        let Phase::Fpdu(f) = &self.phase else {
            return;
        };
        if f.inbound.stall.is_some() || f.inbound.receiver.holds_partial_fpdu() {
            self.track_held_fpdu();
        }
    }

    /// [`Connection::track_partial_fpdu`] with a partial FPDU held or the clock running.
    fn track_held_fpdu(&mut self) {
        let now = self.now;
        let Phase::Fpdu(f) = &mut self.phase else {
            return;
        };
        let active = matches!(f.engine.state(), StreamState::Active | StreamState::Closing);
        let pending = active.then(|| f.inbound.receiver.pending_fpdu()).flatten();
        f.inbound.stall = match (pending, f.inbound.stall) {
            (None, _) => None,
            (Some((seq, held, _)), Some((s, h, since))) if s == seq && h == held => {
                Some((s, h, since))
            }
            (Some((seq, held, _)), _) => Some((seq, held, now)),
        };
    }
}

impl<C: HasMemoryTable + RecvSupply + ?Sized> SegmentSink<C> for Connection {
    fn on_segment(
        &mut self,
        cx: &mut C,
        now: Instant,
        seq: u32,
        payload: &[u8],
        in_order: bool,
        _rcv_nxt: u32,
    ) -> tcp::Consumed {
        self.advance_time(now);
        self.release_rx_gate(cx);
        let all = tcp::Consumed::all(payload.len());
        self.note_rx_end(seq, payload.len());
        let out = match &self.phase {
            Phase::Negotiating(_) if in_order => {
                self.negotiate_input(seq, payload, cx);
                all
            }
            Phase::Negotiating(_) => tcp::Consumed::none(),
            Phase::Closed(_) => all,
            Phase::Fpdu(_) if in_order => {
                self.receive_in_order(seq, payload, cx);
                all
            }
            Phase::Fpdu(_) => {
                let r = self.with_receiver(cx, Ahead { seq, payload });
                match r {
                    Some(Ok(c)) => {
                        self.count_left(seq, payload, 0..c.start.min(payload.len()));
                        self.count_left(seq, payload, c.end.min(payload.len())..payload.len());
                        let mut out = tcp::Consumed::none();
                        // One ascending range: cannot be refused.
                        let _ = out.push(c.start..c.end);
                        out
                    }
                    Some(Err(e)) => {
                        self.mpa_error(e);
                        all
                    }
                    None => all,
                }
            }
        };
        let (mem, pool) = cx.table_and_pool();
        self.pump_after_segment(mem, pool);
        out
    }

    /// [`SegmentSink::on_segment`] of an in-order segment, which the connection always
    /// takes whole, without the [`tcp::Consumed`] that says so.
    fn on_run_segment(&mut self, cx: &mut C, now: Instant, seq: u32, payload: &[u8]) {
        self.take_in_order(cx, now, seq, payload);
        // `on_advance` follows at the run's end, in the same burst, and pumps, fills and
        // tracks the partial FPDU: with nothing to forward or send, nothing is left to do
        // now (`pump_after_segment` would only track the partial FPDU, at the same time).
        if let Phase::Fpdu(f) = &self.phase {
            if self.negotiator_done && !f.engine.has_events() && !f.engine.has_tx_work() {
                return;
            }
        }
        let (mem, pool) = cx.table_and_pool();
        self.pump_after_segment(mem, pool);
    }

    fn on_in_order(&mut self, cx: &mut C, now: Instant, seq: u32, bytes: &[u8]) {
        self.take_in_order(cx, now, seq, bytes);
        let (mem, pool) = cx.table_and_pool();
        self.pump_and_fill(mem, pool);
    }

    fn on_advance(&mut self, cx: &mut C, now: Instant, rcv_nxt: u32) {
        let mem = cx.table_mut();
        self.advance_time(now);
        let Phase::Fpdu(f) = &mut self.phase else {
            return;
        };
        if let Err(e) = f.inbound.receiver.handle_rcv_nxt(rcv_nxt) {
            self.mpa_error(e);
        }
        if let Phase::Fpdu(f) = &mut self.phase {
            f.inbound.offsets.advance(rcv_nxt);
            let pos = f.inbound.offsets.base_off;
            match &mut f.inbound.gate {
                Some(gate) => gate.position = Some(pos),
                None => f.engine.handle_in_order_position(self.now, pos, mem),
            }
        }
        let (mem, pool) = cx.table_and_pool();
        self.pump_and_fill(mem, pool);
    }

    fn rx_window(&self) -> usize {
        self.rx_window
    }

    fn stage(
        &mut self,
        _cx: &mut C,
        seq: u32,
        payload: &[u8],
    ) -> Option<tcp::checksum::PayloadSum> {
        match &mut self.phase {
            Phase::Fpdu(f) => f.inbound.receiver.stage(seq, payload),
            _ => None,
        }
    }

    fn unstage(&mut self, _cx: &mut C) {
        if let Phase::Fpdu(f) = &mut self.phase {
            f.inbound.receiver.unstage();
        }
    }
}
