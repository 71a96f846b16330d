//! The connection: its phases, what the application calls, and the bookkeeping that moves
//! the parts' outputs (frames, events, LLP requests) to where the driver finds them.

use std::collections::VecDeque;

use tcp::Instant;

use super::config::ConnConfig;
use super::inbound::Inbound;
use super::outbound::Sender;
use super::stats::{ConnStats, OpCounters};
use crate::mem::{BufferPool, MemoryTable, PdId, StreamId};
use crate::mpa::{
    mulpdu, ConnectRequest, Event as MpaEvent, MpaError, Negotiated, Negotiator, Recovery, Role,
};
use crate::rdmap::{
    self, CheckedSource, Completion, Engine, EngineConfig, PostError, RecvWr, SendWr, StreamState,
};
use crate::wire::terminate::TerminateCause;

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

/// What the connection keeps while MPA negotiates.
#[derive(Debug, Default)]
pub(super) struct Negotiating {
    /// Sequence number of the peer's first FPDU octet, once its frame is complete.
    pub(super) rx_start: Option<u32>,
    /// Responder: the peer's Request, for the framing of a Terminate if negotiation fails
    /// after it (RFC 6581 §7: 2/0/06, 2/0/07).
    pub(super) request: Option<ConnectRequest>,
    /// Stream octets after the peer's frame that arrived before FPDU mode.
    pub(super) early: Option<(u32, Vec<u8>)>,
    /// Work posted before FPDU mode, in order.
    pub(super) pre_sq: Vec<SendWr>,
    /// Receive buffers posted before FPDU mode, in order.
    pub(super) pre_rq: Vec<RecvWr>,
}

impl Negotiating {
    /// An engine holding the work posted during negotiation (IRD/ORD 0: it only flushes).
    pub(super) fn standby_engine(&mut self, cfg: &ConnConfig) -> Engine {
        let mut ecfg = EngineConfig::new(cfg.pd, cfg.stream, 0, 0);
        ecfg.extensions = cfg.extensions;
        let mut engine = Engine::new(ecfg);
        self.move_work_to(&mut engine);
        engine
    }

    /// Hands the work posted so far to `engine`, receives first.
    pub(super) fn move_work_to(&mut self, engine: &mut Engine) {
        for wr in self.pre_rq.drain(..) {
            let _ = engine.post_recv(wr);
        }
        for wr in self.pre_sq.drain(..) {
            let _ = engine.post_send(wr);
        }
    }

    /// Completes the work posted during a negotiation that ended as Flushed.
    pub(super) fn flush(&mut self, cfg: &ConnConfig) -> VecDeque<Completion> {
        let mut flushed = VecDeque::new();
        if self.pre_sq.is_empty() && self.pre_rq.is_empty() {
            return flushed;
        }
        let mut engine = self.standby_engine(cfg);
        engine.handle_llp_closed(false);
        while let Some(c) = engine.poll_completion() {
            flushed.push_back(c);
        }
        flushed
    }
}

/// The RDMAP stream of FPDU mode: the engine, the MPA receiver in front of it and the
/// framer behind it. In declaration order (`repr(C)`), the fields a visit reads first
/// (see [`Connection`]).
#[derive(Debug)]
#[repr(C)]
pub(super) struct Fpdu {
    /// Send side: framer and the DDP segments waiting to be framed.
    pub(super) sender: Sender,
    /// What MPA negotiated.
    pub(super) negotiated: Negotiated,
    /// Receive side: MPA receiver, stream offsets, RTR and stall tracking.
    pub(super) inbound: Inbound,
    /// The RDMAP/DDP engine.
    pub(super) engine: Engine,
}

/// Why the connection never reached (or left early) FPDU mode, and what is left of it.
#[derive(Debug)]
pub(super) struct Closed {
    /// [`ConnState::Rejected`] or [`ConnState::Failed`].
    pub(super) state: ConnState,
    /// Completions of work posted during a negotiation that ended.
    pub(super) flushed: VecDeque<Completion>,
    /// An engine that still has something to do: the one Terminate sent when negotiation
    /// fails after the frames were exchanged (RFC 6581 §7), or the stream of a peer-to-peer
    /// responder whose RTR never came (its work is flushed when the LLP closes).
    pub(super) stream: Option<Box<Stream>>,
}

/// What is left of a stream after negotiation ended without FPDU mode.
#[derive(Debug)]
pub(super) struct Stream {
    /// The engine (its queued Terminate, or work to flush).
    pub(super) engine: Engine,
    /// Its sender.
    pub(super) sender: Sender,
}

/// The connection's phase: each holds only what means something in it.
// FPDU mode is where a connection spends its life: it stays inline (no indirection on
// every segment); the other phases are small.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Phase {
    /// The MPA exchange.
    Negotiating(Negotiating),
    /// FPDU mode.
    Fpdu(Fpdu),
    /// Rejected or failed before FPDU mode.
    Closed(Closed),
}

impl Phase {
    /// The engine and sender of FPDU mode, or those a closed connection still has.
    pub(super) fn stream(&self) -> Option<(&Engine, &Sender)> {
        match self {
            Phase::Fpdu(f) => Some((&f.engine, &f.sender)),
            Phase::Closed(Closed {
                stream: Some(s), ..
            }) => Some((&s.engine, &s.sender)),
            _ => None,
        }
    }

    /// [`Phase::stream`], mutably.
    pub(super) fn stream_mut(&mut self) -> Option<(&mut Engine, &mut Sender)> {
        match self {
            Phase::Fpdu(f) => Some((&mut f.engine, &mut f.sender)),
            Phase::Closed(Closed {
                stream: Some(s), ..
            }) => Some((&mut s.engine, &mut s.sender)),
            _ => None,
        }
    }
}

/// One iWARP connection (one TCP connection, one MPA/DDP/RDMAP stream: a QP's wire side).
///
/// It owns no memory: every call that places or reads payload borrows the memory table
/// (`M: MemoryTable`: the RNIC's memory model on the poll core, a plain table in tests) from
/// its caller, and the TCP engine lends it (or the RNIC holding it: any
/// [`crate::mem::HasMemoryTable`]) to the [`tcp::SegmentSink`] / [`tcp::SegmentSource`]
/// calls.
///
/// Laid out in declaration order (`repr(C)`): what a visit of the TCP engine or the driver's
/// service reads on a plainly open stream comes first (the queues and flags of
/// [`Connection::needs_service`], the send side's checks, then the FPDU phase, itself hot
/// first), so that a visit to a cold connection reads a few adjacent lines; the
/// configuration, the negotiator and the counters follow.
#[derive(Debug)]
#[repr(C)]
pub struct Connection {
    /// The latest time any call brought.
    pub(super) now: Instant,
    /// Effective send MSS.
    pub(super) emss: usize,
    /// The negotiator reached its final state, Established, and handed over its frames
    /// and events: the data path no longer reads it (its state lies lines away from the
    /// fields each visit reads).
    pub(super) negotiator_done: bool,
    /// The last [`Connection::pump_verbs`] left WRs in its QP (they wait for room here).
    pub(super) wrs_waiting: bool,
    /// `cfg.rx_fast_path`, read by every in-order run (fixed at creation), kept in this
    /// line with the time the run also reads rather than in the configuration's last line.
    pub(super) rx_fast_path: bool,
    pub(super) events: VecDeque<ConnEvent>,
    pub(super) llp: VecDeque<LlpRequest>,
    /// Stream events for the verbs layer (see [`Connection::pump_verbs`]), once enabled.
    pub(super) verbs_events: Option<VecDeque<rdmap::Event>>,
    /// MPA frames (Request, Reply) waiting for TCP.
    pub(super) frames: VecDeque<Vec<u8>>,
    /// `cfg.rx_window`, read on every visit that may acknowledge (fixed at creation),
    /// kept here with the other hot fields rather than in the configuration's lines.
    pub(super) rx_window: usize,
    /// Sequence number of our first FPDU octet, once our frame went out.
    pub(super) tx_start: Option<u32>,
    /// End of the highest stream octets TCP handed in (in order or ahead of RCV.NXT).
    pub(super) rx_highest: Option<u32>,
    pub(super) phase: Phase,
    pub(super) cfg: ConnConfig,
    pub(super) negotiator: Negotiator,
    pub(super) stats: ConnStats,
    /// Segments, messages and octets per RDMAP opcode, both ways.
    pub(super) ops: OpCounters,
}

impl Connection {
    /// The initiator (active side): its MPA Request is the first unit it hands TCP.
    pub fn initiator(cfg: ConnConfig, now: Instant) -> Result<Self, MpaError> {
        let n = Negotiator::initiator(cfg.mpa.clone(), now)?;
        Ok(Self::with_negotiator(cfg, now, n))
    }

    /// The responder (passive side): waits for the Request and reports
    /// [`ConnEvent::ConnectRequest`].
    pub fn responder(cfg: ConnConfig, now: Instant) -> Result<Self, MpaError> {
        let n = Negotiator::responder(cfg.mpa.clone(), now)?;
        Ok(Self::with_negotiator(cfg, now, n))
    }

    fn with_negotiator(cfg: ConnConfig, now: Instant, negotiator: Negotiator) -> Self {
        let mut c = Connection {
            emss: cfg.emss.unwrap_or(0),
            rx_window: cfg.rx_window,
            rx_fast_path: cfg.rx_fast_path,
            cfg,
            now,
            negotiator,
            negotiator_done: false,
            phase: Phase::Negotiating(Negotiating::default()),
            frames: VecDeque::new(),
            tx_start: None,
            events: VecDeque::new(),
            llp: VecDeque::new(),
            verbs_events: None,
            wrs_waiting: false,
            rx_highest: None,
            stats: ConnStats::default(),
            ops: OpCounters::default(),
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
        match &self.phase {
            Phase::Negotiating(_) => ConnState::Negotiating,
            Phase::Closed(c) => c.state,
            Phase::Fpdu(f) if f.inbound.awaiting_rtr => ConnState::Negotiating,
            Phase::Fpdu(f) => ConnState::Rdma(f.engine.state()),
        }
    }

    /// The negotiated MPA parameters, once known.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        match &self.phase {
            Phase::Fpdu(f) => Some(&f.negotiated),
            _ => None,
        }
    }

    /// Counters.
    pub fn stats(&self) -> ConnStats {
        self.stats
    }

    /// Segments, messages and octets per RDMAP opcode, both ways.
    pub fn op_counters(&self) -> &OpCounters {
        &self.ops
    }

    /// Until when FPDUs are held after the MPA Reply (`ConnConfig::first_fpdu_delay`; a
    /// responder's ends early with the initiator's first FPDU); `None` without a hold or
    /// once it is over. Work posted before then waits, so a measurement should not start
    /// earlier.
    pub fn fpdu_hold_until(&self) -> Option<Instant> {
        self.sender()?.hold_until.filter(|&t| self.now < t)
    }

    /// The RDMAP engine, once FPDU mode started.
    pub fn engine(&self) -> Option<&Engine> {
        self.phase.stream().map(|(e, _)| e)
    }

    /// The MULPDU in use for our sending direction (0 until the EMSS is known).
    pub fn mulpdu(&self) -> usize {
        let markers = self.negotiated().is_some_and(|n| n.markers_tx);
        mulpdu(self.emss, markers)
    }

    /// Sets the TCP effective send MSS (e.g. from `tcp::ConnInfo::effective_mss`); the
    /// MULPDU follows it (RFC 5044 §4.1). Segments already prepared keep their size.
    pub fn set_emss(&mut self, emss: usize) {
        self.emss = emss;
        self.cfg.emss = Some(emss);
    }

    /// Binds a responder whose consumer creates its QP only after the Request (rdma_cm's
    /// order) to the QP's protection domain and stream, before accepting; false once the
    /// negotiation is over (the stream is fixed then).
    pub fn bind_qp(&mut self, pd: PdId, stream: StreamId) -> bool {
        if !matches!(self.phase, Phase::Negotiating(_)) {
            return false;
        }
        self.cfg.pd = pd;
        self.cfg.stream = stream;
        true
    }

    /// Responder, before `accept`: the IRD/ORD of its MPA Reply instead of the
    /// configuration's ([`Negotiator::set_reply_ird_ord`]); false once the Reply is out.
    pub fn set_reply_ird_ord(&mut self, ird: u16, ord: u16) -> bool {
        self.negotiator.set_reply_ird_ord(ird, ord)
    }

    /// Records the time a call brought (time never goes back).
    pub(super) fn advance_time(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
    }

    pub(super) fn engine_mut(&mut self) -> Option<&mut Engine> {
        self.phase.stream_mut().map(|(e, _)| e)
    }

    pub(super) fn sender(&self) -> Option<&Sender> {
        self.phase.stream().map(|(_, s)| s)
    }

    // ------------------------------------------------------------------ the application

    /// Responder: accepts the pending Request, answering with `private_data`.
    pub fn accept<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mem: &mut M,
        private_data: &[u8],
    ) -> Result<(), MpaError> {
        self.advance_time(now);
        match self.negotiator.accept(now, private_data) {
            Ok(()) => {
                if let Some(n) = self.negotiator.negotiated().cloned() {
                    self.enter_fpdu_mode(n, mem);
                }
                self.pump_and_fill(mem, None);
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
        self.end_negotiation(ConnState::Rejected);
        self.llp.push_back(LlpRequest::Close);
        self.pump();
        Ok(())
    }

    /// Posts a send-queue work request; before FPDU mode it waits for the negotiation.
    pub fn post_send<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mem: &M,
        wr: SendWr,
    ) -> Result<(), PostError> {
        self.post_send_with(now, mem, None, wr, None)
    }

    /// [`Connection::post_send`], reading ahead into buffers of `pool` (the RNIC's shared
    /// one) instead of the connection's own.
    pub(super) fn post_send_with<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mem: &M,
        pool: Option<&mut BufferPool>,
        wr: SendWr,
        checked: Option<CheckedSource>,
    ) -> Result<(), PostError> {
        self.advance_time(now);
        match &mut self.phase {
            // Posted after the negotiation without the check: the engine makes its own.
            Phase::Negotiating(n) => n.pre_sq.push(wr),
            phase => match phase.stream_mut() {
                Some((e, _)) => e.post_checked_send(wr, checked)?,
                None => return Err(PostError::NotActive),
            },
        }
        self.pump_and_fill(mem, pool);
        Ok(())
    }

    /// Posts a receive buffer; before FPDU mode it waits for the negotiation.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        match &mut self.phase {
            Phase::Negotiating(n) => n.pre_rq.push(wr),
            phase => match phase.stream_mut() {
                Some((e, _)) => e.post_recv(wr)?,
                None => return Err(PostError::NotActive),
            },
        }
        self.pump();
        Ok(())
    }

    /// Next work completion, in the order RFC 5040 §5.5 requires.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        if let Phase::Closed(c) = &mut self.phase {
            if let Some(c) = c.flushed.pop_front() {
                return Some(c);
            }
        }
        self.engine_mut()?.poll_completion()
    }

    /// Unsignaled SQ WRs finished successfully since the last call
    /// ([`Engine::take_retired`]).
    pub fn take_retired(&mut self) -> u32 {
        self.engine_mut().map_or(0, Engine::take_retired)
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<ConnEvent> {
        let e = self.events.pop_front();
        if matches!(e, Some(ConnEvent::Established(_))) {
            if let Phase::Fpdu(f) = &mut self.phase {
                f.inbound.open_gate();
            }
        }
        e
    }

    /// Whether events or LLP requests wait for [`Connection::poll_event`] and
    /// [`Connection::poll_llp_request`].
    pub fn has_news(&self) -> bool {
        !self.events.is_empty() || !self.llp.is_empty()
    }

    /// Whether the driver's service has anything to do after TCP ran the connection: not
    /// yet (or no longer) a plainly open RDMA stream (negotiating, closing, terminated),
    /// events or LLP requests ([`Connection::has_news`]), completions or verbs events to
    /// forward ([`Connection::verbs_pending`]), a timer ([`Connection::poll_timeout`]: a
    /// partial FPDU on record, a held first FPDU, an RTR awaited), or WRs the last
    /// [`Connection::pump_verbs`] left in the QP. An open stream whose segments placed
    /// data (a Write at its sink, RFC 5040 §4.4: nothing to report) or were acknowledged
    /// without completing a WR gives it none of these. Cheap checks first: the TCP engine
    /// asks after every activity that would list the connection.
    pub fn needs_service(&self) -> bool {
        let Phase::Fpdu(f) = &self.phase else {
            return true;
        };
        f.engine.state() != StreamState::Active
            || f.engine.has_completions()
            || self.wrs_waiting
            || self.has_news()
            || self.verbs_events.as_ref().is_none_or(|e| !e.is_empty())
            || f.inbound.awaiting_rtr
            || f.inbound.stall.is_some()
            || f.inbound.gate.is_some()
            || f.sender.hold_until.is_some()
    }

    /// Next thing the driver must do with the TCP connection.
    pub fn poll_llp_request(&mut self) -> Option<LlpRequest> {
        self.llp.pop_front()
    }

    /// Abortive termination by the ULP (RFC 5040 §6.2.1): a Terminate with `cause` is
    /// sent, then the LLP closed. Before FPDU mode the TCP connection is reset.
    pub fn abort<M: MemoryTable + ?Sized>(&mut self, now: Instant, mem: &M, cause: TerminateCause) {
        self.advance_time(now);
        match self.engine_mut() {
            Some(e) => e.abort(cause),
            None => {
                if matches!(self.phase, Phase::Negotiating(_)) {
                    self.end_negotiation(ConnState::Failed);
                    self.llp.push_back(LlpRequest::Reset);
                }
            }
        }
        self.pump_and_fill(mem, None);
    }

    /// Local graceful close (RFC 5040 §6.2, RFC 5041 §6): new work is refused, queued work
    /// drains, and [`LlpRequest::Close`] asks for the TCP FIN, which TCP sends after the
    /// last unit.
    pub fn close<M: MemoryTable + ?Sized>(&mut self, now: Instant, mem: &M) {
        self.advance_time(now);
        if let Some(e) = self.engine_mut() {
            e.close();
        }
        self.llp.push_back(LlpRequest::Close);
        self.pump_and_fill(mem, None);
    }

    /// The QP was destroyed while the connection was up ([`Engine::release`]): the stream
    /// stops without a Terminate, the frames already built are still sent and the LLP is
    /// closed gracefully after them. Before FPDU mode the TCP connection is reset.
    pub fn release<M: MemoryTable + ?Sized>(&mut self, now: Instant, mem: &M) {
        self.advance_time(now);
        match self.engine_mut() {
            Some(e) => {
                e.release();
                self.llp.push_back(LlpRequest::Close);
            }
            None => {
                if matches!(self.phase, Phase::Negotiating(_)) {
                    self.end_negotiation(ConnState::Failed);
                    self.llp.push_back(LlpRequest::Reset);
                }
            }
        }
        self.pump_and_fill(mem, None);
    }

    /// Whether nothing is left to send.
    pub fn is_drained(&self) -> bool {
        self.frames.is_empty()
            && self.sender().is_none_or(Sender::is_empty)
            && self.engine().is_none_or(Engine::is_drained)
    }

    /// The LLP closed: `graceful` for the peer's FIN, otherwise reset or loss.
    pub fn handle_llp_closed<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mem: &M,
        graceful: bool,
    ) {
        self.advance_time(now);
        match self.engine_mut() {
            Some(e) => e.handle_llp_closed(graceful),
            None => {
                if matches!(self.phase, Phase::Negotiating(_)) {
                    self.end_negotiation(ConnState::Failed);
                    self.events.push_back(ConnEvent::LlpClosedDuringNegotiation);
                }
            }
        }
        self.pump_and_fill(mem, None);
    }

    /// When [`Connection::handle_timeout`] must run: the MPA negotiation or RTR deadline,
    /// the end of the first-FPDU hold, or the partial-FPDU deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let negotiation = match &self.phase {
            Phase::Negotiating(_) => self.negotiator.poll_timeout(),
            Phase::Fpdu(f) if f.inbound.awaiting_rtr => self.negotiator.poll_timeout(),
            _ => None,
        };
        let hold = self.sender().and_then(|s| s.hold_until);
        Instant::earliest(Instant::earliest(negotiation, hold), self.stall_deadline())
    }

    /// Runs the timers: a peer that never completes the exchange is reset (RFC 5044 §7.1,
    /// reported with Terminate cause 2/0/01); a held first FPDU is released (the driver
    /// then wakes the TCP connection).
    pub fn handle_timeout<M: MemoryTable + ?Sized>(&mut self, now: Instant, mem: &M) {
        self.advance_time(now);
        if let Phase::Fpdu(f) = &mut self.phase {
            f.sender.release_hold(now);
        }
        let awaiting = match &self.phase {
            Phase::Negotiating(_) => true,
            Phase::Fpdu(f) => f.inbound.awaiting_rtr,
            Phase::Closed(_) => false,
        };
        if awaiting {
            if let Err(e) = self.negotiator.handle_timeout(now) {
                self.fail_negotiation(e);
            }
        }
        self.check_stall(now);
        self.pump_and_fill(mem, None);
    }

    // ------------------------------------------------------------------ bookkeeping

    /// An MPA error in FPDU mode: the engine sends a Terminate with its cause and stops.
    pub(super) fn mpa_error(&mut self, e: MpaError) {
        if matches!(e, MpaError::Stopped) {
            return;
        }
        log::debug!("conn: MPA error: {e}");
        if matches!(e, MpaError::CrcMismatch { .. }) {
            self.stats.crc_errors += 1;
        }
        match self.engine_mut() {
            Some(engine) => engine.abort(e.terminate_cause()),
            None => self.fail_negotiation(e),
        }
    }

    /// [`Connection::pump`], then DDP segments from the engine up to the budget.
    pub(super) fn pump_and_fill<M: MemoryTable + ?Sized>(
        &mut self,
        mem: &M,
        pool: Option<&mut BufferPool>,
    ) {
        self.pump();
        self.fill_tx(mem, pool);
    }

    /// Moves queued frames out and forwards the negotiator's and the engine's events.
    /// Inline: after a segment the engine usually has no event to forward.
    #[inline]
    pub(super) fn pump(&mut self) {
        if !self.negotiator_done {
            self.pump_negotiator();
        }
        match self.phase.stream() {
            Some((engine, _)) if engine.has_events() => self.pump_events(),
            Some(_) => self.track_partial_fpdu(),
            None => {}
        }
    }

    /// [`Connection::pump`] with events to forward.
    fn pump_events(&mut self) {
        let Some((engine, sender)) = self.phase.stream_mut() else {
            return;
        };
        while let Some(ev) = engine.poll_event() {
            match &ev {
                rdmap::Event::TerminateSent(_) => {
                    self.stats.terminates_sent += 1;
                    // The flushed work's segments are not sent; the Terminate goes next.
                    sender.drop_engine_segments();
                    self.llp.push_back(LlpRequest::Close);
                }
                rdmap::Event::TerminateReceived(_) => {
                    self.stats.terminates_received += 1;
                    sender.clear();
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
        self.track_partial_fpdu();
    }

    /// Moves the negotiator's frames and events out; notes when it has nothing more to
    /// give (Established is final: nothing reaches it afterwards).
    fn pump_negotiator(&mut self) {
        while let Some(f) = self.negotiator.poll_transmit() {
            self.frames.push_back(f);
        }
        while let Some(ev) = self.negotiator.poll_event() {
            // Events outside input handling: a responder's Established after accept or RTR.
            self.events.push_back(match ev {
                MpaEvent::Established(n) => ConnEvent::Established(n),
                MpaEvent::ConnectRequest(r) => ConnEvent::ConnectRequest(r),
                MpaEvent::Rejected { private_data } => ConnEvent::Rejected { private_data },
            });
        }
        self.negotiator_done = self.negotiator.may_send_fpdus();
    }
}
