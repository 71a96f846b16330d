//! The connection state machine: MPA negotiation, then FPDU mode over one RDMAP engine.

use std::collections::VecDeque;
use std::time::Instant;

use tcp::{SegmentSink, SegmentSource, Unit};

use super::config::ConnConfig;
use super::rtr::rtr_message;
use super::shared::Shared;
use super::stats::ConnStats;
use crate::ddp::SegmentPos;
use crate::mem::MemoryTable;
use crate::mpa::{
    mulpdu, ConnectRequest, Delivery, Event as MpaEvent, Framer, MarkerSpacing, MpaError,
    Negotiated, Negotiator, Receiver, ReceiverConfig, Recovery, Role,
};
use crate::rdmap::{
    self, Completion, DdpSegmentOut, Engine, EngineConfig, Handled, PostError, RecvWr, SendWr,
    StreamState,
};
use crate::verbs::{QpAction, QpId, Rnic};
use crate::wire::ddp::UNTAGGED_HEADER_LEN;
use crate::wire::mpa::{fpdu_len, MARKER_LEN, ULPDU_LENGTH_LEN};
use crate::wire::rdmap::READ_REQUEST_LEN;
use crate::wire::terminate::TerminateCause;

/// Smallest MULPDU worth segmenting for (an untagged header plus a Read Request body).
const MIN_MULPDU: usize = UNTAGGED_HEADER_LEN + READ_REQUEST_LEN;

/// FPDUs of one unit gathered on the stack (more, e.g. many tiny Sends, take a Vec).
const UNIT_PARTS: usize = 8;

/// Payload buffers of framed DDP segments kept for the next ones (no allocation per
/// segment in a steady stream).
const SPARE_BUFFERS: usize = 32;

/// Unit buffers given back by TCP once acknowledged, kept for the next units. ACKs arrive in
/// bursts that free many units at once, so the pool is deeper than [`SPARE_BUFFERS`]; it
/// only ever holds buffers that were in flight before.
const SPARE_UNITS: usize = 256;

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// MPA negotiation (for a responder: also while the ULP decides on the Request).
    Negotiating,
    /// FPDU mode; the RDMAP stream's state.
    Rdma(StreamState),
    /// The responder rejected the connection (either side's view).
    Rejected,
    /// Negotiation failed or the LLP went away before FPDU mode.
    Failed,
}

/// What the application learns about the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnEvent {
    /// Responder: the initiator's Request; answer with [`Connection::accept`] or
    /// [`Connection::reject`].
    ConnectRequest(ConnectRequest),
    /// FPDU mode started with these parameters (a peer-to-peer responder: the RTR arrived).
    Established(Negotiated),
    /// Initiator: the responder rejected the Request with this private data.
    Rejected {
        /// The responder's ULP private data.
        private_data: Vec<u8>,
    },
    /// MPA negotiation failed; the LLP is closed or reset as `recovery` says.
    NegotiationFailed {
        /// The error.
        error: MpaError,
        /// What happens to the TCP connection.
        recovery: Recovery,
    },
    /// The LLP closed before FPDU mode.
    LlpClosedDuringNegotiation,
    /// An event of the RDMAP stream (Terminate sent or received, close, LLP loss, SE).
    Stream(rdmap::Event),
}

/// What the TCP connection carrying this stream must do; the driver calls the TCP
/// engine's `close` or `abort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlpRequest {
    /// Close gracefully once everything queued was sent (FIN after the last unit).
    Close,
    /// Reset the connection at once.
    Reset,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Negotiating,
    Fpdu,
    Rejected,
    Failed,
}

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

/// Maps receive sequence numbers to 64-bit stream offsets from the peer's first FPDU octet.
#[derive(Debug, Clone, Copy)]
struct RxOffsets {
    base_seq: u32,
    base_off: u64,
}

impl RxOffsets {
    fn offset(&self, seq: u32) -> u64 {
        let d = i64::from(seq.wrapping_sub(self.base_seq) as i32);
        u64::try_from(self.base_off as i64 + d).unwrap_or(0)
    }

    fn advance(&mut self, seq: u32) {
        self.base_off = self.offset(seq);
        self.base_seq = seq;
    }
}

/// One iWARP connection (one TCP connection, one MPA/DDP/RDMAP stream: a QP's wire side)
/// over the memory table `M`.
#[derive(Debug)]
pub struct Connection<M> {
    cfg: ConnConfig,
    mem: M,
    now: Instant,
    negotiator: Negotiator,
    phase: Phase,
    negotiated: Option<Negotiated>,
    engine: Option<Engine>,
    framer: Option<Framer>,
    receiver: Option<Receiver>,
    rx_spacing: Option<MarkerSpacing>,
    rx_start: Option<u32>,
    rx_offsets: RxOffsets,
    /// Stream octets after the peer's frame that arrived before the receiver existed.
    rx_early: Option<(u32, Vec<u8>)>,
    awaiting_rtr: bool,
    /// CRC and markers of the one Terminate sent when negotiation fails after the peer's
    /// frame (RFC 6581 §7: 2/0/06, 2/0/07).
    terminate_framing: Option<(bool, bool)>,
    /// Responder: the peer's Request, for the framing of such a Terminate.
    request: Option<ConnectRequest>,
    /// Initiator: no FPDU before this time (`ConnConfig::first_fpdu_delay`).
    hold_until: Option<Instant>,
    tx_start: Option<u32>,
    frames: VecDeque<Vec<u8>>,
    tx: VecDeque<TxSeg>,
    tx_bytes: usize,
    spare: Vec<Vec<u8>>,
    /// Buffers of acknowledged units, for the next units.
    spare_units: Vec<Vec<u8>>,
    pre_sq: Vec<SendWr>,
    pre_rq: Vec<RecvWr>,
    /// Completions of work posted during a negotiation that failed.
    flushed: VecDeque<Completion>,
    emss: usize,
    events: VecDeque<ConnEvent>,
    llp: VecDeque<LlpRequest>,
    verbs_events: Option<VecDeque<rdmap::Event>>,
    /// End of the highest stream octets TCP handed in (in order or ahead of RCV.NXT).
    rx_highest: Option<u32>,
    /// The partial FPDU the receiver holds (its seq and octets held) and since when.
    stall: Option<(u32, usize, Instant)>,
    /// Responder in peer-to-peer mode: the FPDUs that followed the peer's RTR, held until
    /// the consumer has seen [`ConnEvent::Established`] (and moved its QP to RTS).
    rx_gate: Option<RxGate>,
    stats: ConnStats,
}

/// DDP segments received behind the RTR before the consumer saw the establishment
/// (RFC 6581 §5: the initiator may send its first message right behind the RTR, in the same
/// TCP segment, while the responder's QP is not yet in RTS).
#[derive(Debug, Default)]
struct RxGate {
    /// The segments with their stream positions, in arrival order.
    segments: Vec<(SegmentPos, Vec<u8>)>,
    /// Octets held.
    bytes: usize,
    /// The highest in-order position TCP reported meanwhile.
    position: Option<u64>,
    /// `Established` was polled: the next pump delivers the segments.
    open: bool,
}

impl<M: MemoryTable> Connection<M> {
    /// The initiator (active side): its MPA Request is the first unit it hands TCP.
    pub fn initiator(cfg: ConnConfig, mem: M, now: Instant) -> Result<Self, MpaError> {
        let n = Negotiator::initiator(cfg.mpa.clone(), now)?;
        Ok(Self::with_negotiator(cfg, mem, now, n))
    }

    /// The responder (passive side): waits for the Request and reports
    /// [`ConnEvent::ConnectRequest`].
    pub fn responder(cfg: ConnConfig, mem: M, now: Instant) -> Result<Self, MpaError> {
        let n = Negotiator::responder(cfg.mpa.clone(), now)?;
        Ok(Self::with_negotiator(cfg, mem, now, n))
    }

    fn with_negotiator(cfg: ConnConfig, mem: M, now: Instant, negotiator: Negotiator) -> Self {
        let mut c = Connection {
            emss: cfg.emss.unwrap_or(0),
            cfg,
            mem,
            now,
            negotiator,
            phase: Phase::Negotiating,
            negotiated: None,
            engine: None,
            framer: None,
            receiver: None,
            rx_spacing: None,
            rx_start: None,
            rx_offsets: RxOffsets {
                base_seq: 0,
                base_off: 0,
            },
            rx_early: None,
            awaiting_rtr: false,
            terminate_framing: None,
            request: None,
            hold_until: None,
            tx_start: None,
            frames: VecDeque::new(),
            tx: VecDeque::new(),
            tx_bytes: 0,
            spare: Vec::new(),
            spare_units: Vec::new(),
            pre_sq: Vec::new(),
            pre_rq: Vec::new(),
            flushed: VecDeque::new(),
            events: VecDeque::new(),
            llp: VecDeque::new(),
            verbs_events: None,
            rx_highest: None,
            stall: None,
            rx_gate: None,
            stats: ConnStats::default(),
        };
        c.pump();
        c
    }

    // ------------------------------------------------------------------ accessors

    /// Our role.
    pub fn role(&self) -> Role {
        self.negotiator.role()
    }

    /// Where the connection is.
    pub fn state(&self) -> ConnState {
        match self.phase {
            Phase::Negotiating => ConnState::Negotiating,
            Phase::Rejected => ConnState::Rejected,
            Phase::Failed => ConnState::Failed,
            Phase::Fpdu if self.awaiting_rtr => ConnState::Negotiating,
            Phase::Fpdu => match &self.engine {
                Some(e) => ConnState::Rdma(e.state()),
                None => ConnState::Negotiating,
            },
        }
    }

    /// The negotiated MPA parameters, once known.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// Counters.
    pub fn stats(&self) -> ConnStats {
        self.stats
    }

    /// Initiator: until when FPDUs are held after the MPA Reply
    /// (`ConnConfig::first_fpdu_delay`); `None` without a hold or once it is over. Work
    /// posted before then waits, so a measurement should not start earlier.
    pub fn fpdu_hold_until(&self) -> Option<Instant> {
        self.hold_until.filter(|&t| self.now < t)
    }

    /// The memory table.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// The memory table, mutably (registration, test setup).
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }

    /// The RDMAP engine, once FPDU mode started.
    pub fn engine(&self) -> Option<&Engine> {
        self.engine.as_ref()
    }

    /// The MULPDU in use for our sending direction (0 until the EMSS is known).
    pub fn mulpdu(&self) -> usize {
        let markers = self.negotiated.as_ref().is_some_and(|n| n.markers_tx);
        mulpdu(self.emss, markers)
    }

    /// Sets the TCP effective send MSS (e.g. from `tcp::ConnInfo::effective_mss`); the
    /// MULPDU follows it (RFC 5044 §4.1). Segments already prepared keep their size.
    pub fn set_emss(&mut self, emss: usize) {
        self.emss = emss;
        self.cfg.emss = Some(emss);
    }

    /// The current time, for the calls TCP makes without one.
    pub fn set_time(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
    }

    // ------------------------------------------------------------------ the application

    /// Responder: accepts the pending Request, answering with `private_data`.
    pub fn accept(&mut self, now: Instant, private_data: &[u8]) -> Result<(), MpaError> {
        self.set_time(now);
        match self.negotiator.accept(now, private_data) {
            Ok(()) => {
                let n = self.negotiator.negotiated().cloned();
                if let Some(n) = n {
                    self.enter_fpdu_mode(n);
                }
                self.pump();
                Ok(())
            }
            Err(e @ MpaError::NoMatchingRtr(_)) => {
                self.fail_negotiation(e.clone());
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Responder: rejects the pending Request with `private_data`; the Reply is sent and
    /// the LLP closed (RFC 5044 §7.1).
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), MpaError> {
        self.negotiator.reject(private_data)?;
        self.phase = Phase::Rejected;
        self.flush_pre_posted();
        self.llp.push_back(LlpRequest::Close);
        self.pump();
        Ok(())
    }

    /// Posts a send-queue work request; before FPDU mode it waits for the negotiation.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        match (&mut self.engine, self.phase) {
            (Some(e), _) => e.post_send(wr)?,
            (None, Phase::Negotiating) => self.pre_sq.push(wr),
            _ => return Err(PostError::NotActive),
        }
        self.pump();
        Ok(())
    }

    /// Posts a receive buffer; before FPDU mode it waits for the negotiation.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        match (&mut self.engine, self.phase) {
            (Some(e), _) => e.post_recv(wr)?,
            (None, Phase::Negotiating) => self.pre_rq.push(wr),
            _ => return Err(PostError::NotActive),
        }
        self.pump();
        Ok(())
    }

    /// Next work completion, in the order RFC 5040 §5.5 requires.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        if let Some(c) = self.flushed.pop_front() {
            return Some(c);
        }
        self.engine.as_mut()?.poll_completion()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<ConnEvent> {
        let e = self.events.pop_front();
        if matches!(e, Some(ConnEvent::Established(_))) {
            if let Some(gate) = &mut self.rx_gate {
                gate.open = true;
            }
        }
        e
    }

    /// Delivers the segments held behind a peer-to-peer RTR once the consumer has polled
    /// `Established` (it moves its QP to RTS before pumping or handing in more input).
    fn release_rx_gate(&mut self) {
        if !self.rx_gate.as_ref().is_some_and(|g| g.open) {
            return;
        }
        let Some(gate) = self.rx_gate.take() else {
            return;
        };
        let Some(engine) = &mut self.engine else {
            return;
        };
        let mut deferred = false;
        for (pos, seg) in &gate.segments {
            if engine.handle_ddp_segment(self.now, *pos, seg, &mut self.mem) == Handled::Deferred {
                deferred = true;
            }
        }
        if let Some(pos) = gate.position {
            engine.handle_in_order_position(self.now, pos, &mut self.mem);
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

    /// Next thing the driver must do with the TCP connection.
    pub fn poll_llp_request(&mut self) -> Option<LlpRequest> {
        self.llp.pop_front()
    }

    /// Abortive termination by the ULP (RFC 5040 §6.2.1): a Terminate with `cause` is
    /// sent, then the LLP closed. Before FPDU mode the TCP connection is reset.
    pub fn abort(&mut self, cause: TerminateCause) {
        match &mut self.engine {
            Some(e) => e.abort(cause),
            None => {
                if self.phase == Phase::Negotiating {
                    self.phase = Phase::Failed;
                    self.flush_pre_posted();
                    self.llp.push_back(LlpRequest::Reset);
                }
            }
        }
        self.pump();
    }

    /// Local graceful close (RFC 5040 §6.2, RFC 5041 §6): new work is refused, queued work
    /// drains, and [`LlpRequest::Close`] asks for the TCP FIN, which TCP sends after the
    /// last unit.
    pub fn close(&mut self) {
        if let Some(e) = &mut self.engine {
            e.close();
        }
        self.llp.push_back(LlpRequest::Close);
        self.pump();
    }

    /// Whether nothing is left to send.
    pub fn is_drained(&self) -> bool {
        self.frames.is_empty()
            && self.tx.is_empty()
            && self.engine.as_ref().is_none_or(|e| e.is_drained())
    }

    /// The LLP closed: `graceful` for the peer's FIN, otherwise reset or loss.
    pub fn handle_llp_closed(&mut self, graceful: bool) {
        match &mut self.engine {
            Some(e) => e.handle_llp_closed(graceful),
            None => {
                if self.phase == Phase::Negotiating {
                    self.phase = Phase::Failed;
                    self.flush_pre_posted();
                    self.events.push_back(ConnEvent::LlpClosedDuringNegotiation);
                }
            }
        }
        self.pump();
    }

    /// When [`Connection::handle_timeout`] must run: the MPA negotiation or RTR deadline,
    /// the end of the first-FPDU hold, or the partial-FPDU deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let negotiation = if self.phase == Phase::Negotiating || self.awaiting_rtr {
            self.negotiator.poll_timeout()
        } else {
            None
        };
        [negotiation, self.hold_until, self.stall_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs the timers: a peer that never completes the exchange is reset (RFC 5044 §7.1,
    /// reported with Terminate cause 2/0/01); a held first FPDU is released (the driver
    /// then wakes the TCP connection).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.set_time(now);
        if self.hold_until.is_some_and(|t| now >= t) {
            self.hold_until = None;
        }
        if self.phase == Phase::Negotiating || self.awaiting_rtr {
            if let Err(e) = self.negotiator.handle_timeout(now) {
                self.awaiting_rtr = false;
                self.fail_negotiation(e);
            }
        }
        if self.stall_deadline().is_some_and(|t| now >= t) {
            if let Some((seq, held, claimed)) =
                self.receiver.as_ref().and_then(|r| r.pending_fpdu())
            {
                self.stall = None;
                self.stats.stalled_fpdus += 1;
                self.mpa_error(MpaError::IncompleteFpdu { seq, held, claimed });
            }
        }
        self.pump();
    }

    /// When the partial FPDU the receiver holds counts as stalled: it has not grown for
    /// `partial_fpdu_timeout` and TCP handed in nothing beyond it (nothing missing before
    /// it, nothing held ahead of it), so the peer sent all it means to send (RFC 5044 §4.1:
    /// an FPDU-aligned sender never leaves part of an FPDU unsent).
    fn stall_deadline(&self) -> Option<Instant> {
        let (_, _, since) = self.stall?;
        let next = self.receiver.as_ref()?.next_seq();
        let beyond = self
            .rx_highest
            .is_some_and(|h| (h.wrapping_sub(next) as i32) > 0);
        if beyond || self.phase != Phase::Fpdu {
            return None;
        }
        Some(since + self.cfg.partial_fpdu_timeout)
    }

    /// Restarts the stall clock whenever the partial FPDU changed.
    fn track_partial_fpdu(&mut self) {
        let pending = self
            .engine
            .as_ref()
            .filter(|e| matches!(e.state(), StreamState::Active | StreamState::Closing))
            .and_then(|_| self.receiver.as_ref()?.pending_fpdu());
        self.stall = match (pending, self.stall) {
            (None, _) => None,
            (Some((seq, held, _)), Some((s, h, since))) if s == seq && h == held => {
                Some((s, h, since))
            }
            (Some((seq, held, _)), _) => Some((seq, held, self.now)),
        };
    }

    /// Notes the end of stream octets TCP handed in.
    fn note_rx_end(&mut self, seq: u32, len: usize) {
        let end = seq.wrapping_add(len as u32);
        match self.rx_highest {
            Some(h) if (end.wrapping_sub(h) as i32) <= 0 => {}
            _ => self.rx_highest = Some(end),
        }
    }

    // ------------------------------------------------------------------ verbs

    /// Carries out a verbs [`QpAction`] aimed at this connection; returns what the driver
    /// must then do with the TCP connection.
    pub fn apply_qp_action(&mut self, action: &QpAction) -> Option<LlpRequest> {
        match action {
            QpAction::SendTerminate { cause, .. } => {
                self.abort(*cause);
                Some(LlpRequest::Close)
            }
            QpAction::CloseLlp { .. } => {
                self.close();
                Some(LlpRequest::Close)
            }
            QpAction::ResetLlp { .. } => Some(LlpRequest::Reset),
            QpAction::Attach { .. } | QpAction::Destroyed { .. } => None,
        }
    }

    // ------------------------------------------------------------------ internals

    fn fail_negotiation(&mut self, error: MpaError) {
        let recovery = error.recovery();
        log::debug!("conn: negotiation failed: {error}");
        self.phase = Phase::Failed;
        if recovery == Recovery::Terminate && self.engine.is_none() {
            // The frames were exchanged, so the peer can parse one FPDU: the Terminate.
            let (crc, markers) = match &self.request {
                Some(r) => (
                    r.crc || self.cfg.mpa.require_crc,
                    r.markers && self.cfg.mpa.accept_markers,
                ),
                None => (self.cfg.mpa.require_crc, false),
            };
            self.terminate_framing = Some((crc, markers));
            let mut engine = self.standby_engine();
            engine.abort(error.terminate_cause());
            self.engine = Some(engine);
            self.setup_tx();
        }
        self.flush_pre_posted();
        self.llp.push_back(match recovery {
            Recovery::Reset => LlpRequest::Reset,
            Recovery::Close | Recovery::Terminate => LlpRequest::Close,
        });
        self.events
            .push_back(ConnEvent::NegotiationFailed { error, recovery });
        self.pump();
    }

    /// An engine holding the work posted during negotiation (IRD/ORD 0: it only flushes).
    fn standby_engine(&mut self) -> Engine {
        let mut cfg = EngineConfig::new(self.cfg.pd, self.cfg.stream, 0, 0);
        cfg.extensions = self.cfg.extensions;
        let mut engine = Engine::new(cfg);
        for wr in self.pre_rq.drain(..) {
            let _ = engine.post_recv(wr);
        }
        for wr in self.pre_sq.drain(..) {
            let _ = engine.post_send(wr);
        }
        engine
    }

    /// Completes the work posted during a negotiation that failed as Flushed.
    fn flush_pre_posted(&mut self) {
        if self.pre_sq.is_empty() && self.pre_rq.is_empty() {
            return;
        }
        let mut engine = self.standby_engine();
        engine.handle_llp_closed(false);
        while let Some(c) = engine.poll_completion() {
            self.flushed.push_back(c);
        }
    }

    /// Sets up the receive side and the engine once the parameters are known.
    fn enter_fpdu_mode(&mut self, n: Negotiated) {
        let Some(rx_start) = self.rx_start else {
            return;
        };
        let rcfg = ReceiverConfig::from_negotiated(&n, rx_start).limit_to_mss(self.emss);
        self.rx_spacing = n.markers_rx.then(|| MarkerSpacing::new(rx_start));
        self.receiver = Some(Receiver::new(rcfg));
        self.rx_offsets = RxOffsets {
            base_seq: rx_start,
            base_off: 0,
        };
        let (ird, ord) = if n.enhanced {
            (n.ird, n.ord)
        } else {
            (self.cfg.mpa.ird, self.cfg.mpa.ord)
        };
        let mut ecfg =
            EngineConfig::new(self.cfg.pd, self.cfg.stream, u32::from(ird), u32::from(ord));
        ecfg.extensions = self.cfg.extensions;
        ecfg.rdmap_version = self.cfg.rdmap_version;
        ecfg.max_held_segments = self.cfg.max_held_segments;
        // A peer-to-peer responder's MPA layer consumes the RTR, the first FPDU.
        let start = match (n.role, n.rtr) {
            (Role::Responder, Some(kind)) => {
                self.awaiting_rtr = true;
                let len = fpdu_len(rtr_message(kind).len());
                match self.rx_spacing {
                    Some(sp) => {
                        let first = rx_start.wrapping_add(MARKER_LEN as u32);
                        (MARKER_LEN + sp.interior_span(first, len)) as u64
                    }
                    None => len as u64,
                }
            }
            _ => 0,
        };
        let mut engine = Engine::with_start_position(ecfg, start);
        for wr in self.pre_rq.drain(..) {
            let _ = engine.post_recv(wr);
        }
        for wr in self.pre_sq.drain(..) {
            let _ = engine.post_send(wr);
        }
        self.engine = Some(engine);
        if n.role == Role::Initiator && !self.cfg.first_fpdu_delay.is_zero() {
            self.hold_until = Some(self.now + self.cfg.first_fpdu_delay);
        }
        self.negotiated = Some(n);
        self.phase = Phase::Fpdu;
        self.setup_tx();
        if let Some((seq, bytes)) = self.rx_early.take() {
            self.receive_in_order(seq, &bytes);
        }
    }

    /// Creates the framer once our frame went out and the parameters are known.
    fn setup_tx(&mut self) {
        let Some(start) = self.tx_start else {
            return;
        };
        if self.framer.is_some() {
            return;
        }
        if let Some((crc, markers)) = self.terminate_framing {
            self.framer = Some(Framer::new(crc, markers.then(|| MarkerSpacing::new(start))));
            return;
        }
        let (Some(n), Phase::Fpdu) = (&self.negotiated, self.phase) else {
            return;
        };
        self.framer = Some(Framer::from_negotiated(n, start));
        if let (Role::Initiator, Some(kind)) = (n.role, n.rtr) {
            let m = rtr_message(kind);
            self.tx_bytes += m.len();
            self.tx.push_front(TxSeg::Raw(m));
        }
    }

    /// Stream octets in order during negotiation.
    fn negotiate_input(&mut self, seq: u32, data: &[u8]) {
        if self.rx_start.is_some() {
            // The peer's frame is complete; the ULP has not decided yet: keep the octets.
            let cap = self.cfg.rx_window;
            let early = self.rx_early.get_or_insert_with(|| (seq, Vec::new()));
            let room = cap.saturating_sub(early.1.len());
            early.1.extend_from_slice(&data[..data.len().min(room)]);
            return;
        }
        let used = match self.negotiator.handle_input(self.now, data) {
            Ok(n) => n,
            Err(e) => {
                self.fail_negotiation(e);
                return;
            }
        };
        let frame_end = seq.wrapping_add(used as u32);
        let mut established = None;
        while let Some(ev) = self.negotiator.poll_event() {
            match ev {
                MpaEvent::ConnectRequest(r) => {
                    self.rx_start = Some(frame_end);
                    self.request = Some(r.clone());
                    self.events.push_back(ConnEvent::ConnectRequest(r));
                }
                MpaEvent::Established(n) => {
                    self.rx_start = Some(frame_end);
                    established = Some(n.clone());
                    self.events.push_back(ConnEvent::Established(n));
                }
                MpaEvent::Rejected { private_data } => {
                    self.phase = Phase::Rejected;
                    self.flush_pre_posted();
                    self.llp.push_back(LlpRequest::Close);
                    self.events.push_back(ConnEvent::Rejected { private_data });
                }
            }
        }
        let rest = &data[used.min(data.len())..];
        if let Some(n) = established {
            self.enter_fpdu_mode(n);
            if !rest.is_empty() {
                self.receive_in_order(frame_end, rest);
            }
        } else if self.phase == Phase::Negotiating && self.rx_start.is_some() && !rest.is_empty() {
            self.rx_early = Some((frame_end, rest.to_vec()));
        }
    }

    /// In-order stream octets in FPDU mode.
    fn receive_in_order(&mut self, seq: u32, data: &[u8]) {
        let r = self.with_receiver(|rx, deliver| rx.handle_in_order(seq, data, deliver));
        if let Some(Err(e)) = r {
            self.mpa_error(e);
        }
    }

    /// Runs `f` with the receiver and a delivery closure that hands ULPDUs to the engine.
    fn with_receiver<R>(
        &mut self,
        f: impl FnOnce(&mut Receiver, &mut dyn FnMut(Delivery<'_>)) -> R,
    ) -> Option<R> {
        let Connection {
            receiver,
            engine,
            mem,
            negotiator,
            stats,
            rx_spacing,
            rx_offsets,
            awaiting_rtr,
            rx_gate,
            cfg,
            now,
            ..
        } = self;
        let receiver = receiver.as_mut()?;
        let engine = engine.as_mut()?;
        let now = *now;
        let spacing = *rx_spacing;
        let offsets = *rx_offsets;
        let mut failure: Option<MpaError> = None;
        let mut deferred = false;
        let mut deliver = |d: Delivery<'_>| {
            stats.fpdus_received += 1;
            if !d.in_order {
                stats.fpdus_placed_ahead += 1;
                stats.bytes_placed_ahead += d.ulpdu.len() as u64;
            }
            if *awaiting_rtr && d.in_order {
                // RFC 6581 §5: the first FPDU is the agreed zero-length message.
                *awaiting_rtr = false;
                match negotiator.handle_rtr(now, d.ulpdu) {
                    Ok(()) => *rx_gate = Some(RxGate::default()),
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
            if let Some(gate) = rx_gate {
                // Bounded by what the peer may send before our first answer: its window.
                if gate.bytes + d.ulpdu.len() > cfg.rx_window.max(64 * 1024) {
                    failure.get_or_insert(MpaError::Framing("too much data behind the RTR"));
                } else {
                    gate.bytes += d.ulpdu.len();
                    gate.segments.push((pos, d.ulpdu.to_vec()));
                }
                return;
            }
            if engine.handle_ddp_segment(now, pos, d.ulpdu, mem) == Handled::Deferred {
                deferred = true;
            }
        };
        let r = f(receiver, &mut deliver);
        if deferred {
            let e = self.early_segments_held();
            failure.get_or_insert(e);
        }
        if let Some(e) = failure {
            self.mpa_error(e);
        }
        Some(r)
    }

    /// An MPA error in FPDU mode: the engine sends a Terminate with its cause and stops.
    fn mpa_error(&mut self, e: MpaError) {
        if matches!(e, MpaError::Stopped) {
            return;
        }
        log::debug!("conn: MPA error: {e}");
        if matches!(e, MpaError::CrcMismatch { .. }) {
            self.stats.crc_errors += 1;
        }
        match &mut self.engine {
            Some(engine) => engine.abort(e.terminate_cause()),
            None => self.fail_negotiation(e),
        }
    }

    /// Moves queued frames out, forwards engine events and prepares DDP segments.
    fn pump(&mut self) {
        while let Some(f) = self.negotiator.poll_transmit() {
            self.frames.push_back(f);
        }
        while let Some(ev) = self.negotiator.poll_event() {
            // Events outside input handling: a responder's Established after accept or RTR.
            match ev {
                MpaEvent::Established(n) => self.events.push_back(ConnEvent::Established(n)),
                MpaEvent::ConnectRequest(r) => self.events.push_back(ConnEvent::ConnectRequest(r)),
                MpaEvent::Rejected { private_data } => {
                    self.events.push_back(ConnEvent::Rejected { private_data })
                }
            }
        }
        if let Some(engine) = &mut self.engine {
            while let Some(ev) = engine.poll_event() {
                match &ev {
                    rdmap::Event::TerminateSent(_) => {
                        self.stats.terminates_sent += 1;
                        // The flushed work's segments are not sent; the Terminate goes next.
                        self.tx.retain(|s| matches!(s, TxSeg::Raw(_)));
                        self.tx_bytes = self.tx.iter().map(TxSeg::len).sum();
                        self.llp.push_back(LlpRequest::Close);
                    }
                    rdmap::Event::TerminateReceived(_) => {
                        self.stats.terminates_received += 1;
                        self.tx.clear();
                        self.tx_bytes = 0;
                        self.llp.push_back(LlpRequest::Close);
                    }
                    // The peer closed gracefully and nothing is pending: close our half.
                    rdmap::Event::Closed => self.llp.push_back(LlpRequest::Close),
                    _ => {}
                }
                if let Some(v) = self.verbs_events.as_mut() {
                    v.push_back(ev.clone());
                }
                self.events.push_back(ConnEvent::Stream(ev));
            }
        }
        self.track_partial_fpdu();
        self.fill_tx();
    }

    /// Whether FPDUs may go out now.
    fn may_send(&self) -> bool {
        self.framer.is_some()
            && (self.negotiator.may_send_fpdus() || self.terminate_framing.is_some())
            && self.hold_until.is_none_or(|t| self.now >= t)
    }

    /// Takes DDP segments from the engine up to the budget.
    fn fill_tx(&mut self) {
        if !self.may_send() {
            return;
        }
        let mulpdu = self.mulpdu();
        if mulpdu < MIN_MULPDU {
            return;
        }
        let Some(engine) = &mut self.engine else {
            return;
        };
        while self.tx_bytes < self.cfg.tx_budget {
            let buffer = self.spare.pop().unwrap_or_default();
            match engine.poll_segment_reusing(self.now, mulpdu, &self.mem, buffer) {
                Some(s) => {
                    self.tx_bytes += s.len();
                    self.tx.push_back(TxSeg::Engine(s));
                }
                None => break,
            }
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
        if self.rx_spacing.is_some_and(|sp| sp.is_marker_at(at)) {
            off += MARKER_LEN;
        }
        let tagged = payload
            .get(off + ULPDU_LENGTH_LEN)
            .is_some_and(|c| c & 0x80 != 0);
        if tagged {
            self.stats.tagged_bytes_left_to_tcp += range.len() as u64;
        }
    }
}

impl<M: MemoryTable> SegmentSink for Connection<M> {
    fn on_segment(
        &mut self,
        seq: u32,
        payload: &[u8],
        in_order: bool,
        _rcv_nxt: u32,
    ) -> tcp::Consumed {
        self.release_rx_gate();
        let all = tcp::Consumed::all(payload.len());
        self.note_rx_end(seq, payload.len());
        let out = match self.phase {
            Phase::Negotiating if in_order => {
                self.negotiate_input(seq, payload);
                all
            }
            Phase::Negotiating => tcp::Consumed::none(),
            Phase::Rejected | Phase::Failed => all,
            Phase::Fpdu if in_order => {
                self.receive_in_order(seq, payload);
                all
            }
            Phase::Fpdu => {
                let r = self
                    .with_receiver(|rx, deliver| rx.handle_segment(seq, payload, false, deliver));
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
        self.pump();
        out
    }

    fn on_in_order(&mut self, seq: u32, bytes: &[u8]) {
        self.release_rx_gate();
        self.note_rx_end(seq, bytes.len());
        match self.phase {
            Phase::Negotiating => self.negotiate_input(seq, bytes),
            Phase::Fpdu => self.receive_in_order(seq, bytes),
            Phase::Rejected | Phase::Failed => {}
        }
        self.pump();
    }

    fn on_advance(&mut self, rcv_nxt: u32) {
        if self.phase != Phase::Fpdu {
            return;
        }
        if let Some(rx) = &mut self.receiver {
            if let Err(e) = rx.handle_rcv_nxt(rcv_nxt) {
                self.mpa_error(e);
            }
        }
        if self.rx_start.is_some() {
            self.rx_offsets.advance(rcv_nxt);
            let pos = self.rx_offsets.base_off;
            if let Some(gate) = &mut self.rx_gate {
                gate.position = Some(pos);
            } else if let Some(engine) = &mut self.engine {
                engine.handle_in_order_position(self.now, pos, &mut self.mem);
            }
        }
        self.pump();
    }

    fn rx_window(&self) -> usize {
        self.cfg.rx_window
    }
}

impl<M: MemoryTable> SegmentSource for Connection<M> {
    fn next_unit(&mut self, seq: u32, max_len: usize) -> Option<Unit> {
        if self.cfg.emss.is_none() && max_len > self.emss {
            self.emss = max_len;
        }
        if let Some(f) = self.frames.front() {
            if f.len() > max_len {
                return None;
            }
            let f = self.frames.pop_front()?;
            self.stats.units_sent += 1;
            self.tx_start = Some(seq.wrapping_add(f.len() as u32));
            self.setup_tx();
            self.fill_tx();
            return Some(Unit::new(f));
        }
        let framer = self.framer?;
        if !self.may_send() {
            return None;
        }
        self.fill_tx();
        if self.tx.is_empty() {
            return None;
        }
        let mut out = self.spare_units.pop().unwrap_or_default();
        out.clear();
        out.reserve(max_len);
        // The FPDUs that fit (at least one, so that a unit too small is refused as such).
        let mut fit = 0;
        let (mut end, mut len) = (seq, 0);
        for s in &self.tx {
            let n = framer.wire_len(end, s.len());
            if fit > 0 && len + n > max_len {
                break;
            }
            fit += 1;
            len += n;
            end = end.wrapping_add(n as u32);
        }
        let info = if fit <= UNIT_PARTS {
            let mut parts: [[&[u8]; 2]; UNIT_PARTS] = [[&[], &[]]; UNIT_PARTS];
            for (p, s) in parts.iter_mut().zip(&self.tx) {
                *p = s.parts();
            }
            framer
                .build_unit(seq, max_len, &parts[..fit], &mut out)
                .ok()?
        } else {
            let parts: Vec<[&[u8]; 2]> = self.tx.iter().take(fit).map(TxSeg::parts).collect();
            framer.build_unit(seq, max_len, &parts, &mut out).ok()?
        };
        for s in self.tx.drain(..info.fpdus) {
            self.tx_bytes -= s.len();
            if let (TxSeg::Engine(s), true) = (s, self.spare.len() < SPARE_BUFFERS) {
                self.spare.push(s.into_buffer());
            }
        }
        self.stats.units_sent += 1;
        self.stats.fpdus_sent += info.fpdus as u64;
        self.fill_tx();
        Some(Unit::new(out))
    }

    fn pending(&self) -> bool {
        !self.frames.is_empty() || (self.may_send() && !self.tx.is_empty())
    }

    fn recycle(&mut self, buffer: Vec<u8>) {
        if self.spare_units.len() < SPARE_UNITS {
            self.spare_units.push(buffer);
        }
    }
}

impl Connection<Shared<Rnic>> {
    /// Moves work between the verbs QP `qp` of the shared [`Rnic`] and this connection's
    /// engine: posted WRs in (once the QP is in RTS), engine completions and stream events
    /// out, with their automatic QP transitions (VERBS-00 §6.2, §8.2). The poll core calls
    /// it after creating the connection and after each activity; the RNIC is borrowed only
    /// for each single call into it.
    pub fn pump_verbs(&mut self, qp: QpId) {
        let rnic = self.mem.0.clone();
        self.verbs_events.get_or_insert_with(VecDeque::new);
        self.forward_verbs_events(&rnic, qp);
        if matches!(self.phase, Phase::Fpdu | Phase::Negotiating) {
            loop {
                let wr = rnic.borrow_mut().next_recv_wr(qp);
                let Some(wr) = wr else { break };
                if self.post_recv(wr).is_err() {
                    break;
                }
            }
            loop {
                let wr = rnic.borrow_mut().next_send_wr(qp);
                let Some(wr) = wr else { break };
                if self.post_send(wr).is_err() {
                    break;
                }
            }
            // The QP's receives are posted: what followed a peer-to-peer RTR can go in.
            self.release_rx_gate();
        }
        while let Some(c) = self.poll_completion() {
            let _ = rnic.borrow_mut().handle_completion(qp, c);
        }
        self.forward_verbs_events(&rnic, qp);
    }

    fn forward_verbs_events(&mut self, rnic: &std::cell::RefCell<Rnic>, qp: QpId) {
        while let Some(ev) = self.verbs_events.as_mut().and_then(VecDeque::pop_front) {
            let _ = rnic.borrow_mut().handle_engine_event(qp, ev);
        }
    }
}
