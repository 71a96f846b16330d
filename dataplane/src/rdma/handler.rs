//! The poll-loop handler that runs iWARP connections: TCP engine, connections, RNIC, CM.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use iwarp::conn::{ConnConfig, ConnEvent, Connection, LlpRequest, Shared};
use iwarp::mpa::{MpaConfig, Negotiated};
use iwarp::rdmap;
use iwarp::verbs::channel::CoreEnd;
use iwarp::verbs::{
    LlpAttach, LlpStreamHandle, ModifyQp, QpAction, QpId, QpInit, QpState, Rnic, VerbError,
};
use iwarp::wire::mpa::RtrTypes;
use iwarp::wire::terminate::TerminateCause;
use rustc_hash::FxHashMap;
use tcp::{CloseReason, ConnId, Engine, Event};

use super::counters::RdmaCounters;
use crate::classify::{Classified, FrameClass};
use crate::lcore::{Handled, Handler, PortContext};
use crate::port::Port;

/// One iWARP connection over the shared RNIC.
pub type RdmaConn = Connection<Shared<Rnic>>;

/// Settings of a handler.
#[derive(Debug, Clone)]
pub struct RdmaConfig {
    /// MPA policy (revision, CRC, markers, IRD/ORD); `private_data` is set per connect.
    pub mpa: MpaConfig,
    /// TCP settings.
    pub tcp: tcp::Config,
    /// Receive window each connection offers.
    pub rx_window: usize,
}

/// Default of [`RdmaHandler::set_tx_per_poll`].
pub const TX_PER_POLL: usize = 128;

/// What the connection manager reports (the rdma_cm events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A listener got an MPA Request; its QP is created. Post receives, then
    /// [`RdmaHandler::accept`] or [`RdmaHandler::reject`].
    ConnectRequest {
        /// The connection.
        id: ConnId,
        /// Its QP.
        qp: QpId,
        /// The initiator's address.
        remote: SocketAddrV4,
        /// The initiator's private data.
        private_data: Vec<u8>,
    },
    /// FPDU mode: the QP is in RTS.
    Established {
        /// The connection.
        id: ConnId,
        /// Its QP.
        qp: QpId,
        /// What MPA negotiated (with the peer's private data).
        negotiated: Negotiated,
    },
    /// The responder rejected our Request.
    Rejected {
        /// The connection.
        id: ConnId,
        /// Its QP.
        qp: QpId,
        /// The responder's private data.
        private_data: Vec<u8>,
    },
    /// The connection could not be set up (TCP or MPA failure).
    ConnectError {
        /// The connection.
        id: ConnId,
        /// Its QP.
        qp: QpId,
        /// What went wrong.
        reason: String,
    },
    /// The connection is gone; the QP is in Error (flushed) or Idle.
    Disconnected {
        /// The connection.
        id: ConnId,
        /// Its QP.
        qp: QpId,
        /// Both sides closed in order (no reset, no Terminate).
        graceful: bool,
    },
}

/// Connection manager errors.
#[derive(Debug, thiserror::Error)]
pub enum CmError {
    /// A verbs call failed.
    #[error("verbs: {0:?}")]
    Verbs(VerbError),
    /// The TCP engine refused.
    #[error("tcp: {0}")]
    Tcp(#[from] tcp::Error),
    /// MPA refused.
    #[error("mpa: {0}")]
    Mpa(#[from] iwarp::mpa::MpaError),
    /// No such connection, or not in the state the call needs.
    #[error("no such connection or wrong state")]
    NoConnection,
}

impl From<VerbError> for CmError {
    fn from(e: VerbError) -> Self {
        CmError::Verbs(e)
    }
}

#[derive(Debug)]
struct Entry {
    qp: QpId,
    remote: SocketAddrV4,
    established: bool,
    /// Disconnect asked: close TCP once the connection drained.
    closing: bool,
    tcp_close_sent: bool,
    aborted: bool,
    /// The application knows the QP (its own connect, or a ConnectRequest was reported);
    /// QPs it never saw are destroyed by the handler when the connection closes.
    announced: bool,
}

/// The iWARP side of a poll core: owns the TCP engine, the connections and the RNIC.
pub struct RdmaHandler {
    cfg: RdmaConfig,
    engine: Engine<RdmaConn>,
    rnic: Shared<Rnic>,
    epoch: Instant,
    now: Instant,
    /// Keyed by local ports and engine-assigned ids: a fast unkeyed hash.
    listeners: FxHashMap<u16, QpInit>,
    conns: FxHashMap<ConnId, Entry>,
    order: Vec<ConnId>,
    events: VecDeque<CmEvent>,
    closed: RdmaCounters,
    tx_per_poll: usize,
    first_fpdu_delay: Duration,
    channels: Vec<CoreEnd>,
}

impl RdmaHandler {
    /// A handler over `rnic`.
    pub fn new(cfg: RdmaConfig, rnic: Rnic) -> RdmaHandler {
        let now = Instant::now();
        RdmaHandler {
            engine: Engine::new(cfg.tcp.clone()),
            cfg,
            rnic: Shared::new(rnic),
            epoch: now,
            now,
            listeners: FxHashMap::default(),
            conns: FxHashMap::default(),
            order: Vec::new(),
            events: VecDeque::new(),
            closed: RdmaCounters::default(),
            tx_per_poll: TX_PER_POLL,
            first_fpdu_delay: Duration::ZERO,
            channels: Vec::new(),
        }
    }

    /// The RNIC: register memory, create CQs/QPs, post WRs, poll CQs. Do not hold the
    /// borrow across a poll-loop iteration.
    pub fn rnic(&self) -> &Shared<Rnic> {
        &self.rnic
    }

    /// Most packets queued per poll-loop iteration and port, those the port refused
    /// earlier included, so that one burst does not overflow the port's transmit ring or
    /// the peer's receive ring (the rest goes out in the next iterations).
    pub fn set_tx_per_poll(&mut self, n: usize) {
        self.tx_per_poll = n.max(1);
    }

    /// How long an initiator holds its first FPDU after the MPA Reply. Linux siw 6.1 as
    /// responder can leave an FPDU that arrives right after its Reply unread (siwlab README);
    /// 100 ms avoids that. Zero (the default) sends at once.
    pub fn set_first_fpdu_delay(&mut self, delay: Duration) {
        self.first_fpdu_delay = delay;
    }

    /// IRD/ORD offered in the MPA exchange of new connections (RFC 6581), and the Read
    /// depths of MPA revision 1 connections, which exchange none.
    pub fn set_ird_ord(&mut self, ird: u16, ord: u16) {
        self.cfg.mpa.ird = ird;
        self.cfg.mpa.ord = ord;
    }

    /// Serves an application on another thread: its WRs (from the ring) are posted on
    /// every iteration, completions of its CQs go back through the ring
    /// ([`iwarp::verbs::channel::pair`]).
    pub fn attach_channel(&mut self, core: CoreEnd) {
        self.channels.push(core);
    }

    /// The TCP engine (monitoring).
    pub fn tcp(&self) -> &Engine<RdmaConn> {
        &self.engine
    }

    /// The connection `id` (monitoring: MPA parameters, counters).
    pub fn conn(&self, id: ConnId) -> Option<&RdmaConn> {
        self.engine.ulp(id)
    }

    /// Next connection-manager event.
    pub fn poll_cm_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// Listens on `addr`; each accepted connection gets a QP created from `init`.
    pub fn listen(&mut self, addr: SocketAddrV4, init: QpInit) -> Result<(), CmError> {
        self.engine.listen(addr, 64)?;
        self.listeners.insert(addr.port(), init);
        Ok(())
    }

    /// Connects from `local` to `remote` with a new QP from `init`, sending `private_data`
    /// in the MPA Request. [`CmEvent::Established`] follows, or Rejected / ConnectError.
    pub fn connect(
        &mut self,
        local: Ipv4Addr,
        remote: SocketAddrV4,
        init: QpInit,
        private_data: &[u8],
    ) -> Result<(ConnId, QpId), CmError> {
        let (qp, _) = self.rnic.0.borrow_mut().create_qp(init)?;
        let mut mpa = self.cfg.mpa.clone();
        mpa.private_data = private_data.to_vec();
        let cfg = self.conn_config(mpa, &init, qp);
        let mut conn = Connection::initiator(cfg, self.rnic.clone(), self.now)?;
        conn.pump_verbs(qp);
        let t = self.tcp_now(self.now);
        let id = self
            .engine
            .connect(t, SocketAddrV4::new(local, 0), remote, conn)?;
        self.track(id, qp, remote, true);
        Ok((id, qp))
    }

    /// Accepts the pending Request of `id` with `private_data` in the Reply.
    pub fn accept(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        let now = self.now;
        let c = self.engine.ulp_mut(id).ok_or(CmError::NoConnection)?;
        c.accept(now, private_data)?;
        self.service(id);
        Ok(())
    }

    /// Rejects the pending Request of `id` with `private_data`; TCP closes after the Reply.
    pub fn reject(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.engine.ulp_mut(id).ok_or(CmError::NoConnection)?;
        c.reject(private_data)?;
        self.service(id);
        Ok(())
    }

    /// Graceful disconnect (RDMAP §6.2): queued work drains, then TCP closes; the QP moves
    /// to Closing and, once the peer closed too, to Idle.
    pub fn disconnect(&mut self, id: ConnId) -> Result<(), CmError> {
        let e = self.conns.get_mut(&id).ok_or(CmError::NoConnection)?;
        e.closing = true;
        let qp = e.qp;
        // VERBS-00 §6.2.2.2: RTS → Closing; the RNIC asks for the LLP close (CloseLlp).
        let moved = self
            .rnic
            .0
            .borrow_mut()
            .modify_qp(qp, ModifyQp::to(QpState::Closing));
        if moved.is_err() {
            // Not in RTS (still negotiating): close the stream directly.
            if let Some(c) = self.engine.ulp_mut(id) {
                c.close();
            }
        }
        self.qp_actions();
        self.service(id);
        Ok(())
    }

    /// Abortive disconnect: a Terminate is sent, TCP reset, the QP flushed.
    pub fn abort(&mut self, id: ConnId) -> Result<(), CmError> {
        let e = self.conns.get_mut(&id).ok_or(CmError::NoConnection)?;
        e.aborted = true;
        let qp = e.qp;
        if let Some(c) = self.engine.ulp_mut(id) {
            c.abort(TerminateCause::RDMAP_OP_UNSPECIFIED);
        }
        let _ = self
            .rnic
            .0
            .borrow_mut()
            .modify_qp(qp, ModifyQp::to(QpState::Error));
        self.service(id);
        let _ = self.engine.abort(id);
        Ok(())
    }

    /// Counters over every connection, live and closed.
    pub fn counters(&self) -> RdmaCounters {
        let mut c = self.closed;
        for id in &self.order {
            if let Some(conn) = self.engine.ulp(*id) {
                c.add(&conn.stats());
            }
        }
        // The engine's totals cover SYN and SYN-ACK retransmissions and connections that
        // never reached the handler (half-open ones, failed connects).
        let tcp = self.engine.stats();
        c.tcp_retransmits = tcp.retransmits;
        c.tcp_timeouts = tcp.timeouts;
        c.tcp_spurious_timeouts = tcp.spurious_timeouts;
        c
    }

    /// Connections alive.
    pub fn live(&self) -> usize {
        self.conns.len()
    }

    /// MPA policy of accepted connections: peer-to-peer mode (RFC 6581) is accepted when an
    /// initiator asks for it, with a zero-length Send or RDMA Write as RTR (Linux siw with
    /// `peer_to_peer=1` offers Write and Read and takes Write), unless the configuration
    /// chose its own RTR types.
    fn responder_mpa(&self) -> MpaConfig {
        let mut mpa = self.cfg.mpa.clone();
        if mpa.p2p.is_none() && mpa.revision >= 2 {
            mpa.p2p = Some(RtrTypes {
                send: true,
                write: true,
                read: false,
            });
        }
        mpa
    }

    fn conn_config(&self, mpa: MpaConfig, init: &QpInit, qp: QpId) -> ConnConfig {
        ConnConfig {
            pd: init.pd,
            stream: qp.stream(),
            rx_window: self.cfg.rx_window,
            first_fpdu_delay: self.first_fpdu_delay,
            ..ConnConfig::new(mpa)
        }
    }

    fn track(&mut self, id: ConnId, qp: QpId, remote: SocketAddrV4, announced: bool) {
        self.conns.insert(
            id,
            Entry {
                qp,
                remote,
                established: false,
                closing: false,
                tcp_close_sent: false,
                aborted: false,
                announced,
            },
        );
        self.order.push(id);
    }

    fn tcp_now(&self, now: Instant) -> tcp::Instant {
        tcp::Instant::from_micros(now.saturating_duration_since(self.epoch).as_micros() as u64)
    }

    fn tcp_to_std(&self, t: tcp::Instant) -> Instant {
        self.epoch + std::time::Duration::from_micros(t.as_micros())
    }

    /// Moves one connection's WRs, completions and events.
    fn service(&mut self, id: ConnId) {
        let Some(entry) = self.conns.get(&id) else {
            return;
        };
        let qp = entry.qp;
        let remote = entry.remote;
        let now = self.now;
        let mut llp = Vec::new();
        let mut evs = Vec::new();
        let drained;
        {
            let Some(c) = self.engine.ulp_mut(id) else {
                return;
            };
            c.set_time(now);
            c.pump_verbs(qp);
            while let Some(e) = c.poll_event() {
                evs.push(e);
            }
            while let Some(r) = c.poll_llp_request() {
                llp.push(r);
            }
            drained = c.is_drained();
        }
        for e in evs {
            self.conn_event(id, qp, remote, e);
        }
        // Events may have moved the QP (e.g. to RTS): pump again.
        if let Some(c) = self.engine.ulp_mut(id) {
            c.pump_verbs(qp);
            while let Some(r) = c.poll_llp_request() {
                llp.push(r);
            }
        }
        for r in llp {
            match r {
                LlpRequest::Close => self.close_tcp(id),
                LlpRequest::Reset => {
                    let _ = self.engine.abort(id);
                }
            }
        }
        if drained && self.conns.get(&id).is_some_and(|e| e.closing) {
            self.close_tcp(id);
        }
    }

    fn close_tcp(&mut self, id: ConnId) {
        if let Some(e) = self.conns.get_mut(&id) {
            if !e.tcp_close_sent {
                e.tcp_close_sent = true;
                let _ = self.engine.close(id);
            }
        }
    }

    fn conn_event(&mut self, id: ConnId, qp: QpId, remote: SocketAddrV4, e: ConnEvent) {
        match e {
            ConnEvent::ConnectRequest(req) => {
                if let Some(entry) = self.conns.get_mut(&id) {
                    entry.announced = true;
                }
                self.events.push_back(CmEvent::ConnectRequest {
                    id,
                    qp,
                    remote,
                    private_data: req.private_data,
                })
            }
            ConnEvent::Established(n) => {
                // VERBS-00 §6.2.1.2: Idle → RTS with the established LLP stream.
                let r = self.rnic.0.borrow_mut().modify_qp(
                    qp,
                    ModifyQp::to_rts(LlpAttach {
                        stream: LlpStreamHandle(u64::from(qp.0)),
                        established: true,
                        stream_message: None,
                    }),
                );
                if let Err(err) = r {
                    log::warn!("qp {qp:?} to RTS: {err:?}");
                }
                if let Some(entry) = self.conns.get_mut(&id) {
                    entry.established = true;
                }
                self.closed.established += 1;
                self.events.push_back(CmEvent::Established {
                    id,
                    qp,
                    negotiated: n,
                });
            }
            ConnEvent::Rejected { private_data } => self.events.push_back(CmEvent::Rejected {
                id,
                qp,
                private_data,
            }),
            ConnEvent::NegotiationFailed { .. } | ConnEvent::LlpClosedDuringNegotiation
                if self.conns.get(&id).is_some_and(|e| !e.announced) =>
            {
                // An incoming connection the application never saw (no valid MPA Request).
                log::debug!("incoming connection from {remote} failed before its Request: {e:?}");
            }
            ConnEvent::NegotiationFailed { error, .. } => {
                self.events.push_back(CmEvent::ConnectError {
                    id,
                    qp,
                    reason: error.to_string(),
                })
            }
            ConnEvent::LlpClosedDuringNegotiation => self.events.push_back(CmEvent::ConnectError {
                id,
                qp,
                reason: "connection closed during MPA negotiation".into(),
            }),
            ConnEvent::Stream(ev) => {
                log::debug!("qp {qp:?}: {ev:?}");
                if matches!(ev, rdmap::Event::TerminateReceived(_)) {
                    if let Some(entry) = self.conns.get_mut(&id) {
                        entry.aborted = true;
                    }
                }
            }
        }
    }

    fn qp_actions(&mut self) {
        loop {
            let a = self.rnic.0.borrow_mut().poll_action();
            let Some(a) = a else { break };
            let qp = match &a {
                QpAction::Attach { qp, .. }
                | QpAction::SendTerminate { qp, .. }
                | QpAction::CloseLlp { qp }
                | QpAction::ResetLlp { qp }
                | QpAction::Destroyed { qp } => *qp,
            };
            let Some(id) = self
                .conns
                .iter()
                .find(|(_, e)| e.qp == qp)
                .map(|(id, _)| *id)
            else {
                continue;
            };
            let req = self.engine.ulp_mut(id).and_then(|c| c.apply_qp_action(&a));
            match req {
                Some(LlpRequest::Close) => {
                    if let Some(e) = self.conns.get_mut(&id) {
                        e.closing = true;
                    }
                    self.service(id);
                }
                Some(LlpRequest::Reset) => {
                    let _ = self.engine.abort(id);
                }
                None => {}
            }
        }
    }

    fn tcp_events(&mut self) {
        while let Some(ev) = self.engine.poll_event() {
            match ev {
                Event::Accepted { conn, tuple } => {
                    let Some(init) = self.listeners.get(&tuple.local.port()).cloned() else {
                        let _ = self.engine.abort(conn);
                        continue;
                    };
                    let created = self.rnic.0.borrow_mut().create_qp(init);
                    let qp = match created {
                        Ok((qp, _)) => qp,
                        Err(e) => {
                            log::warn!("no QP for {}: {e:?}", tuple.remote);
                            let _ = self.engine.abort(conn);
                            continue;
                        }
                    };
                    let cfg = self.conn_config(self.responder_mpa(), &init, qp);
                    match Connection::responder(cfg, self.rnic.clone(), self.now) {
                        Ok(mut c) => {
                            c.pump_verbs(qp);
                            if self.engine.attach(conn, c).is_ok() {
                                self.track(conn, qp, tuple.remote, false);
                            } else {
                                // Closed (e.g. reset) before we got to it: free the QP.
                                let _ = self.rnic.0.borrow_mut().destroy_qp(qp);
                            }
                        }
                        Err(e) => {
                            log::warn!("responder: {e}");
                            let _ = self.rnic.0.borrow_mut().destroy_qp(qp);
                            let _ = self.engine.abort(conn);
                        }
                    }
                }
                Event::Connected(conn) => {
                    let mss = self.engine.info(conn).map(|i| i.effective_mss);
                    if let (Some(mss), Some(c)) = (mss, self.engine.ulp_mut(conn)) {
                        c.set_emss(mss);
                    }
                }
                Event::PeerClosed(conn) => {
                    if let Some(c) = self.engine.ulp_mut(conn) {
                        c.handle_llp_closed(true);
                    }
                    // The peer is done: finish our side once drained.
                    if let Some(e) = self.conns.get_mut(&conn) {
                        e.closing = true;
                    }
                    self.service(conn);
                }
                Event::Closed { conn, reason, ulp } => {
                    let Some(entry) = self.conns.remove(&conn) else {
                        continue;
                    };
                    self.order.retain(|c| *c != conn);
                    let qp = entry.qp;
                    let mut graceful = reason == CloseReason::Normal && !entry.aborted;
                    if let Some(mut c) = ulp {
                        if reason != CloseReason::Normal {
                            c.handle_llp_closed(false);
                        }
                        c.pump_verbs(qp);
                        let mut evs = Vec::new();
                        while let Some(e) = c.poll_event() {
                            evs.push(e);
                        }
                        for e in evs {
                            if matches!(
                                e,
                                ConnEvent::Stream(rdmap::Event::TerminateReceived(_))
                                    | ConnEvent::Stream(rdmap::Event::TerminateSent(_))
                            ) {
                                graceful = false;
                            }
                            self.conn_event(conn, qp, entry.remote, e);
                        }
                        c.pump_verbs(qp);
                        let s = c.stats();
                        if s.terminates_sent + s.terminates_received > 0 {
                            graceful = false;
                        }
                        self.closed.add(&s);
                    }
                    if !graceful {
                        let _ = self
                            .rnic
                            .0
                            .borrow_mut()
                            .modify_qp(qp, ModifyQp::to(QpState::Error));
                    }
                    let announced = entry.announced
                        || self.events.iter().any(
                            |e| matches!(e, CmEvent::ConnectRequest { id, .. } if *id == conn),
                        );
                    if !announced {
                        // A connection that closed before its MPA Request: nobody holds its
                        // QP, so free it (else resets before MPA use up the QP table).
                        let mut rnic = self.rnic.0.borrow_mut();
                        let _ = rnic.modify_qp(qp, ModifyQp::to(QpState::Error));
                        if let Err(e) = rnic.destroy_qp(qp) {
                            log::warn!("destroy unannounced qp {qp:?}: {e:?}");
                        }
                    } else if entry.established {
                        self.events.push_back(CmEvent::Disconnected {
                            id: conn,
                            qp,
                            graceful,
                        });
                    } else if !matches!(self.events.back(), Some(CmEvent::Rejected { id, .. } | CmEvent::ConnectError { id, .. }) if *id == conn)
                    {
                        self.events.push_back(CmEvent::ConnectError {
                            id: conn,
                            qp,
                            reason: format!("connection closed: {reason:?}"),
                        });
                    }
                }
            }
        }
    }

    /// One round of the protocol work without a port: timers, events, WRs, completions.
    fn work(&mut self, now: Instant) {
        self.now = now;
        let t = self.tcp_now(now);
        if self.engine.poll_timeout().is_some_and(|d| d <= t) {
            self.engine.handle_timeout(t);
        }
        for i in 0..self.order.len() {
            let id = self.order[i];
            if let Some(c) = self.engine.ulp_mut(id) {
                if c.poll_timeout().is_some_and(|d| d <= now) {
                    c.handle_timeout(now);
                }
            }
        }
        self.tcp_events();
        if !self.channels.is_empty() {
            let mut rnic = self.rnic.0.borrow_mut();
            for ch in &mut self.channels {
                ch.pump(&mut rnic);
            }
        }
        for i in 0..self.order.len() {
            if let Some(&id) = self.order.get(i) {
                self.service(id);
            }
        }
        self.qp_actions();
        self.tcp_events();
    }

    /// The earliest instant any timer of the handler is due (for idle waiting).
    pub fn next_timeout(&mut self) -> Option<Instant> {
        let t = self.engine.poll_timeout().map(|t| self.tcp_to_std(t));
        let c = self
            .order
            .iter()
            .filter_map(|id| self.engine.ulp(*id).and_then(|c| c.poll_timeout()))
            .min();
        match (t, c) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl<P: Port> Handler<P> for RdmaHandler {
    fn handle(
        &mut self,
        _ctx: &mut PortContext<'_, P>,
        now: Instant,
        frame: P::Buf,
        meta: &Classified,
    ) -> Handled {
        if meta.class != FrameClass::Tcp {
            return Handled::Ignored;
        }
        self.now = now;
        let t = self.tcp_now(now);
        match self
            .engine
            .handle_tcp(t, meta.src_ip, meta.dst_ip, meta.l4(frame.as_ref()))
        {
            Ok(()) => Handled::Consumed,
            Err(e) => {
                log::debug!("tcp: {e}");
                Handled::Ignored
            }
        }
    }

    fn poll(&mut self, ctx: &mut PortContext<'_, P>, now: Instant) {
        self.work(now);
        let t = self.tcp_now(now);
        let engine = &mut self.engine;
        // Frames the port refused earlier count against the budget: while its ring stays
        // full the data waits in TCP's queues, and nothing is dropped.
        for _ in 0..self.tx_per_poll {
            if ctx.tx_pending() >= self.tx_per_poll
                || ctx
                    .send_ipv4(|buf| engine.poll_transmit(t, buf).map(|x| (x.dst, x.len)))
                    .is_none()
            {
                break;
            }
        }
        self.tcp_events();
    }
}
