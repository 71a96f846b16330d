//! The poll-loop handler that runs iWARP connections: the generic [`TcpHandler`] over
//! [`Connection`]s, lending them the RNIC it owns, with the connection manager
//! ([`ConnManager`]) on top as its service.
//!
//! Ownership is explicit: the handler owns the TCP engine, the RNIC and the manager; the
//! connections own their protocol state only and borrow the RNIC for each call (placement,
//! the QP's work requests and completions). Applications reach the RNIC between poll-loop
//! iterations through [`RdmaHandler::rnic`] / [`RdmaHandler::rnic_mut`], or from other
//! threads through the rings of [`iwarp::verbs::channel`].

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use iwarp::conn::{ConnConfig, ConnEvent, Connection, LlpRequest};
use iwarp::mpa::{MpaConfig, Negotiated};
use iwarp::rdmap;
use iwarp::verbs::channel::CoreEnd;
use iwarp::verbs::{
    AsyncEvent, LlpAttach, LlpStreamHandle, ModifyQp, MrSpec, PdId, QpAction, QpId, QpInit,
    QpState, Rnic, STag, VerbError,
};
use iwarp::wire::mpa::RtrTypes;
use iwarp::wire::terminate::TerminateCause;
use rustc_hash::FxHashMap;
use tcp::{CloseReason, ConnId, Engine, Event, FourTuple};

use super::counters::{CmCounters, RdmaCounters};
use super::events::{EventCounters, EventLog};
use super::shared::{LaneRegistrations, ShareError};
use super::table::ConnTable;
use crate::clock::Instant;
use crate::steer::{steered_port, Lane};
use crate::tcp_handler::{TcpHandler, TcpService};
use crate::telemetry::Snapshot;

/// Default of [`RdmaHandler::set_max_cm_events`].
pub const MAX_CM_EVENTS: usize = 4096;

/// Default of [`RdmaHandler::set_listen_backlog`].
pub const LISTEN_BACKLOG: usize = 64;

/// The TCP engine of the iWARP connections; every call lends them the RNIC.
pub type RdmaEngine = Engine<Connection, Rnic>;

/// The iWARP side of a poll core: the TCP engine and its connections, the RNIC they place
/// into (owned here, lent per call) and the connection manager.
pub type RdmaHandler = TcpHandler<Connection, Rnic, ConnManager>;

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
        remote: SocketAddr,
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
        /// How TCP ended, when it did (`None`: MPA negotiation failed on a live stream).
        llp: Option<CloseReason>,
    },
    /// A pending listener ([`RdmaHandler::listen_pending`]) got an MPA Request; no QP
    /// exists yet. Create one, post receives, then [`RdmaHandler::accept_with_qp`] or
    /// [`RdmaHandler::reject`].
    Request {
        /// The connection.
        id: ConnId,
        /// The listening address it arrived on.
        local: SocketAddr,
        /// The initiator's address.
        remote: SocketAddr,
        /// The initiator's private data.
        private_data: Vec<u8>,
        /// The initiator's IRD and ORD (RFC 6581), when its Request carried them.
        ird_ord: Option<(u16, u16)>,
    },
    /// A [`CmEvent::Request`] that was neither accepted nor rejected is gone (the initiator
    /// reset or closed the connection).
    RequestWithdrawn {
        /// The connection.
        id: ConnId,
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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// A verbs call failed.
    #[error("verbs: {0}")]
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
pub(super) struct Entry {
    /// The connection's QP; none yet for a Request to a pending listener.
    pub(super) qp: Option<QpId>,
    /// Its addresses (boxed: read for events and reports only, not on a visit).
    pub(super) addrs: Box<Addrs>,
    pub(super) established: bool,
    /// Disconnect asked: close TCP once the connection drained.
    closing: bool,
    tcp_close_sent: bool,
    aborted: bool,
    /// The application knows the QP (its own connect, or a ConnectRequest was reported);
    /// QPs it never saw are destroyed by the handler when the connection closes.
    announced: bool,
    /// The connection's timer as queued in [`ConnManager::timers`].
    timer_at: Option<Instant>,
}

/// A connection's local and remote addresses.
#[derive(Debug)]
pub(super) struct Addrs {
    pub(super) local: SocketAddr,
    pub(super) remote: SocketAddr,
}

/// The connection manager: the rdma_cm side of the iWARP connections (listeners, the
/// connections' QPs and their CM events), the service on top of the TCP engine.
pub struct ConnManager {
    cfg: RdmaConfig,
    /// Keyed by local ports and engine-assigned ids: a fast unkeyed hash. A listener makes
    /// each accepted connection's QP from its template, or leaves it to the application.
    listeners: FxHashMap<u16, Option<QpInit>>,
    /// By the engine's slot index: one indexed load per visit.
    pub(super) conns: ConnTable<Entry>,
    /// The connections in the order they were tracked; closed ones are dropped lazily
    /// (see [`ConnManager::ids`]).
    order: Vec<ConnId>,
    /// Closed connections still in `order`.
    order_dead: usize,
    /// Which connection runs each QP.
    by_qp: FxHashMap<QpId, ConnId>,
    /// The connections' own timers (MPA negotiation, first-FPDU hold, stalled FPDU),
    /// earliest first; an entry whose instant is not its connection's `timer_at` is stale.
    timers: BinaryHeap<Reverse<(Instant, ConnId)>>,
    /// Scratch lists of one iteration: the connections to service, the touched QPs.
    due: Vec<ConnId>,
    touched: Vec<QpId>,
    events: VecDeque<CmEvent>,
    /// Incoming connections are refused while this many CM events wait.
    max_cm_events: usize,
    /// Half-open connections of each listener with a QP template.
    listen_backlog: usize,
    cm_counters: CmCounters,
    pub(super) event_log: EventLog,
    closed: RdmaCounters,
    first_fpdu_delay: Duration,
    channels: Vec<CoreEnd>,
    /// The latest time the poll loop brought (for calls made between iterations).
    now: Instant,
    /// How the stream whose close is being handled ended (for the ULP's events then).
    closing: Option<CloseReason>,
    /// The lane this handler is of a multi-queue port (flow steering).
    lane: Lane,
    /// Where the search for a steered ephemeral port resumes.
    next_port: u16,
    /// Connections accepted whose 4-tuple hashes to another lane.
    foreign: u64,
    /// This lane's end of the registrations shared with the other lanes.
    registrations: Option<LaneRegistrations>,
}

impl RdmaHandler {
    /// A handler over `rnic`.
    pub fn with_rnic(cfg: RdmaConfig, rnic: Rnic) -> RdmaHandler {
        let engine = Engine::new(cfg.tcp.clone());
        let cm = ConnManager {
            cfg,
            listeners: FxHashMap::default(),
            conns: ConnTable::default(),
            order: Vec::new(),
            order_dead: 0,
            by_qp: FxHashMap::default(),
            timers: BinaryHeap::new(),
            due: Vec::new(),
            touched: Vec::new(),
            events: VecDeque::new(),
            max_cm_events: MAX_CM_EVENTS,
            listen_backlog: LISTEN_BACKLOG,
            cm_counters: CmCounters::default(),
            event_log: EventLog::default(),
            closed: RdmaCounters::default(),
            first_fpdu_delay: Duration::ZERO,
            channels: Vec::new(),
            now: crate::clock::now(),
            closing: None,
            lane: Lane::SOLE,
            next_port: 0,
            foreign: 0,
            registrations: None,
        };
        TcpHandler::new(engine, rnic, cm)
    }

    /// The RNIC: query it, read registered memory. Nothing else holds it between
    /// poll-loop iterations.
    pub fn rnic(&self) -> &Rnic {
        self.context()
    }

    /// The RNIC, mutably: register memory, create CQs/QPs, post WRs, poll CQs.
    pub fn rnic_mut(&mut self) -> &mut Rnic {
        self.context_mut()
    }

    /// How long an initiator holds its first FPDU after the MPA Reply. Linux siw 6.1 as
    /// responder can leave an FPDU that arrives right after its Reply unread (siwlab README);
    /// 100 ms avoids that. Zero (the default) sends at once.
    pub fn set_first_fpdu_delay(&mut self, delay: Duration) {
        self.parts().2.first_fpdu_delay = delay;
    }

    /// Makes this handler lane `lane` of a multi-queue port: its active opens pick local
    /// ports that hash to it ([`crate::steer`]), and accepted connections that hash to
    /// another lane are counted ([`RdmaHandler::foreign_connections`]).
    pub fn set_lane(&mut self, lane: Lane) {
        let cm = self.parts().2;
        cm.lane = lane;
        cm.next_port = cm.cfg.tcp.ephemeral_start();
    }

    /// Shares memory registrations with the other lanes through `regs`, this lane's copies
    /// of the shared regions in `pd`: every iteration applies the other lanes' changes.
    /// The RNIC must place into the memory the other lanes' do
    /// ([`super::open_shared_rnic`]); call it before registering anything.
    pub fn share_registrations(&mut self, mut regs: LaneRegistrations, pd: PdId) {
        let (_, rnic, cm) = self.parts();
        regs.attach(rnic, pd);
        cm.registrations = Some(regs);
    }

    /// Registers `spec` on every lane under one STag ([`LaneRegistrations::register`]):
    /// usable by the QPs of any lane when this returns.
    pub fn register_shared_mr(&mut self, spec: &MrSpec) -> Result<STag, ShareError> {
        let (_, rnic, cm) = self.parts();
        cm.registrations
            .as_mut()
            .ok_or(ShareError::NotShared)?
            .register(rnic, spec)
    }

    /// Deallocates the shared region `stag` on every lane ([`LaneRegistrations::deregister`]):
    /// no lane places into it when this returns.
    pub fn deregister_shared_mr(&mut self, stag: STag) -> Result<(), ShareError> {
        let (_, rnic, cm) = self.parts();
        cm.registrations
            .as_mut()
            .ok_or(ShareError::NotShared)?
            .deregister(rnic, stag)
    }

    /// The lane this handler is (the only one of a one-queue port by default).
    pub fn lane(&self) -> Lane {
        self.service().lane
    }

    /// Connections accepted whose 4-tuple hashes to another lane (a peer that does not
    /// steer, or a device that spreads differently): they live here all the same.
    pub fn foreign_connections(&self) -> u64 {
        self.service().foreign
    }

    /// IRD/ORD offered in the MPA exchange of new connections (RFC 6581), and the Read
    /// depths of MPA revision 1 connections, which exchange none.
    pub fn set_ird_ord(&mut self, ird: u16, ord: u16) {
        let cm = self.parts().2;
        cm.cfg.mpa.ird = ird;
        cm.cfg.mpa.ord = ord;
    }

    /// Serves an application on another thread: its WRs (from the ring) are posted on
    /// every iteration, completions of its CQs go back through the ring
    /// ([`iwarp::verbs::channel::pair`]).
    pub fn attach_channel(&mut self, core: CoreEnd) {
        self.parts().2.channels.push(core);
    }

    /// The connection `id` (monitoring: MPA parameters, counters).
    pub fn conn(&self, id: ConnId) -> Option<&Connection> {
        self.tcp().ulp(id)
    }

    /// Next connection-manager event.
    pub fn poll_cm_event(&mut self) -> Option<CmEvent> {
        self.parts().2.events.pop_front()
    }

    /// Most CM events kept for an application that does not poll them: while this many
    /// wait, incoming connections are refused (reset, counted in
    /// [`CmCounters::refused_events_full`]); the events of connections already accepted are
    /// still queued. Default [`MAX_CM_EVENTS`].
    pub fn set_max_cm_events(&mut self, n: usize) {
        self.parts().2.max_cm_events = n.max(1);
    }

    /// Most half-open connections (SYN received, handshake not complete) of each listener
    /// made by later [`RdmaHandler::listen`] calls; more SYNs are dropped, and their
    /// initiators retry after an initial RTO (1 s). Default [`LISTEN_BACKLOG`]; a server
    /// that many initiators connect to at once wants room for them all (Linux's
    /// `somaxconn` default is 4096).
    pub fn set_listen_backlog(&mut self, n: usize) {
        self.parts().2.listen_backlog = n.max(1);
    }

    /// What the connection manager refused and how deep its event queue got.
    pub fn cm_counters(&self) -> CmCounters {
        self.service().cm_counters()
    }

    /// `key: value` lines of the event queues' high-water marks and losses (the RNIC's
    /// asynchronous events and CQ notifications, the CM events), for end-of-run summaries.
    pub fn queue_summary(&self) -> String {
        let q = self.rnic().event_queue_stats();
        let cm = self.cm_counters();
        format!(
            "events-async-high-water: {}\nevents-async-overflows: {}\nevents-cq-high-water: {}\nevents-cq-overflows: {}\ncm-events-high-water: {}\ncm-refused: {}",
            q.async_events.high_water,
            q.async_events.overflows,
            q.cq_events.high_water,
            q.cq_events.overflows,
            cm.events_high_water,
            cm.refused_events_full + cm.refused_no_qp
        )
    }

    /// How the RNIC's asynchronous events and CQ notifications were handled.
    pub fn event_counters(&self) -> EventCounters {
        self.service().event_log.counters()
    }

    /// From now on, keeps the RNIC's asynchronous events that no attached application ring
    /// serves for [`RdmaHandler::poll_async_event`] (at most `capacity`, usually
    /// [`crate::rdma::MAX_KEPT_EVENTS`]; later ones are counted in
    /// [`EventCounters::kept_full`]): for an embedder that delivers them itself. The handler
    /// stays the only consumer of the RNIC's event queues.
    pub fn keep_async_events(&mut self, capacity: usize) {
        self.parts().2.event_log.keep(capacity);
    }

    /// The oldest asynchronous event kept since [`RdmaHandler::keep_async_events`].
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.parts().2.event_log.take()
    }

    /// The latest asynchronous events of the RNIC, oldest first (at most
    /// [`crate::rdma::RECENT_EVENTS`]).
    pub fn recent_events(&self) -> impl Iterator<Item = &AsyncEvent> {
        self.service().event_log.recent()
    }

    /// Listens on `addr` (IPv4 or IPv6; unspecified: every address of the port); each
    /// accepted connection gets a QP created from `init`.
    pub fn listen(&mut self, addr: impl Into<SocketAddr>, init: QpInit) -> Result<(), CmError> {
        let addr = addr.into();
        let (engine, _, cm) = self.parts();
        engine.listen(addr, cm.listen_backlog)?;
        cm.listeners.insert(addr.port(), Some(init));
        Ok(())
    }

    /// Listens on `addr` with at most `backlog` connections half-open; each MPA Request is
    /// reported as [`CmEvent::Request`] without a QP (rdma_cm's order: the application
    /// creates the QP on the new id, then accepts).
    pub fn listen_pending(
        &mut self,
        addr: impl Into<SocketAddr>,
        backlog: usize,
    ) -> Result<(), CmError> {
        let addr = addr.into();
        let (engine, _, cm) = self.parts();
        engine.listen(addr, backlog.max(1))?;
        cm.listeners.insert(addr.port(), None);
        Ok(())
    }

    /// Stops listening on `port` (connections accepted on it live on; the port can be
    /// listened on again at once).
    pub fn unlisten(&mut self, port: u16) -> bool {
        let (engine, _, cm) = self.parts();
        cm.listeners.remove(&port);
        engine.unlisten(port)
    }

    /// Connects from `local` to `remote` (addresses of one family) with a new QP from
    /// `init`, sending `private_data` in the MPA Request. [`CmEvent::Established`] follows,
    /// or Rejected / ConnectError.
    pub fn connect(
        &mut self,
        local: impl Into<IpAddr>,
        remote: impl Into<SocketAddr>,
        init: QpInit,
        private_data: &[u8],
    ) -> Result<(ConnId, QpId), CmError> {
        let (local, remote) = (local.into(), remote.into());
        if local.is_ipv4() != remote.is_ipv4() {
            let remote = remote.ip();
            return Err(tcp::Error::FamilyMismatch { local, remote }.into());
        }
        let (qp, _) = self.rnic_mut().create_qp(init)?;
        let id = self.connect_qp(local, remote, qp, private_data, None)?;
        Ok((id, qp))
    }

    /// Connects the existing QP `qp` (in Idle) from `local` to `remote` (addresses of one
    /// family), sending `private_data` in the MPA Request with `ird_ord` (this connection's
    /// IRD and ORD, when not the handler's). [`CmEvent::Established`] follows, or Rejected /
    /// ConnectError.
    pub fn connect_qp(
        &mut self,
        local: impl Into<IpAddr>,
        remote: impl Into<SocketAddr>,
        qp: QpId,
        private_data: &[u8],
        ird_ord: Option<(u16, u16)>,
    ) -> Result<ConnId, CmError> {
        let (local, remote) = (local.into(), remote.into());
        if local.is_ipv4() != remote.is_ipv4() {
            let remote = remote.ip();
            return Err(tcp::Error::FamilyMismatch { local, remote }.into());
        }
        let (engine, rnic, cm) = self.parts();
        let now = cm.now;
        let init = rnic.query_qp(qp)?.init;
        let mut mpa = cm.cfg.mpa.clone();
        mpa.private_data = private_data.to_vec();
        if let Some((ird, ord)) = ird_ord {
            mpa.ird = ird;
            mpa.ord = ord;
        }
        let cfg = cm.conn_config(mpa, &init, qp);
        let id = if cm.lane.lanes > 1 {
            // A local port of our own lane; one still in the engine's table toward this
            // peer (TIME-WAIT) is skipped. The QP's work is taken once the connection is in.
            let mut tries = 0;
            let id = loop {
                let port = cm.steered_port(local, remote)?;
                let conn = Connection::initiator(cfg.clone(), now)?;
                match engine.connect(now, SocketAddr::new(local, port), remote, conn) {
                    Err(tcp::Error::TupleInUse(_)) if tries < 64 => tries += 1,
                    r => break r?,
                }
            };
            if let Some(conn) = engine.ulp_mut(id) {
                conn.pump_verbs(now, rnic, qp);
            }
            id
        } else {
            let mut conn = Connection::initiator(cfg, now)?;
            conn.pump_verbs(now, rnic, qp);
            engine.connect(now, SocketAddr::new(local, 0), remote, conn)?
        };
        let local = engine
            .tuple(id)
            .map_or(SocketAddr::new(local, 0), |t| t.local);
        cm.track(id, Some(qp), local, remote, true);
        cm.arm_timer(engine, id);
        Ok(id)
    }

    /// Accepts the Request `id` of a pending listener with the application's QP `qp` (in
    /// Idle), answering with `private_data` and `ird_ord` (this connection's IRD and ORD in
    /// the Reply, when not the handler's).
    pub fn accept_with_qp(
        &mut self,
        id: ConnId,
        qp: QpId,
        private_data: &[u8],
        ird_ord: Option<(u16, u16)>,
    ) -> Result<(), CmError> {
        let (engine, rnic, cm) = self.parts();
        let entry = cm.conns.get_mut(&id).ok_or(CmError::NoConnection)?;
        if entry.qp.is_some() {
            return Err(CmError::NoConnection);
        }
        let pd = rnic.query_qp(qp)?.init.pd;
        let c = engine.ulp_mut(id).ok_or(CmError::NoConnection)?;
        if !c.bind_qp(pd, qp.stream()) {
            return Err(CmError::NoConnection);
        }
        if let Some((ird, ord)) = ird_ord {
            if !c.set_reply_ird_ord(ird, ord) {
                return Err(CmError::NoConnection);
            }
        }
        entry.qp = Some(qp);
        cm.by_qp.insert(qp, id);
        c.accept(cm.now, rnic.memory_mut(), private_data)?;
        cm.service(engine, rnic, id);
        Ok(())
    }

    /// Accepts the pending Request of `id` with `private_data` in the Reply.
    pub fn accept(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        let (engine, rnic, cm) = self.parts();
        let c = engine.ulp_mut(id).ok_or(CmError::NoConnection)?;
        c.accept(cm.now, rnic.memory_mut(), private_data)?;
        cm.service(engine, rnic, id);
        Ok(())
    }

    /// Rejects the pending Request of `id` with `private_data`; TCP closes after the Reply.
    pub fn reject(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        let (engine, rnic, cm) = self.parts();
        let c = engine.ulp_mut(id).ok_or(CmError::NoConnection)?;
        c.reject(private_data)?;
        cm.service(engine, rnic, id);
        Ok(())
    }

    /// Graceful disconnect (RDMAP §6.2): queued work drains, then TCP closes; the QP moves
    /// to Closing and, once the peer closed too, to Idle.
    pub fn disconnect(&mut self, id: ConnId) -> Result<(), CmError> {
        let (engine, rnic, cm) = self.parts();
        let e = cm.conns.get_mut(&id).ok_or(CmError::NoConnection)?;
        e.closing = true;
        let qp = e.qp;
        // VERBS-00 §6.2.2.2: RTS → Closing; the RNIC asks for the LLP close (CloseLlp).
        let moved = qp.is_some_and(|qp| rnic.modify_qp(qp, ModifyQp::to(QpState::Closing)).is_ok());
        if !moved {
            // Not in RTS (still negotiating): close the stream directly.
            if let Some(c) = engine.ulp_mut(id) {
                c.close(cm.now, rnic.memory());
            }
        }
        cm.qp_actions(engine, rnic);
        cm.service(engine, rnic, id);
        Ok(())
    }

    /// ULP-initiated termination (VERBS-00 §6.2.2.2, Modify RTS → Terminate): the QP's
    /// outstanding work is flushed, a Terminate sent and TCP closed gracefully after it,
    /// so that the Terminate reaches the peer (RFC 5040 §6.2.1); the connection ends once
    /// the peer closed its half too. A QP not in RTS is aborted ([`RdmaHandler::abort`]).
    pub fn terminate(&mut self, id: ConnId) -> Result<(), CmError> {
        let (engine, rnic, cm) = self.parts();
        let e = cm.conns.get_mut(&id).ok_or(CmError::NoConnection)?;
        let qp = e.qp;
        let moved =
            qp.is_some_and(|qp| rnic.modify_qp(qp, ModifyQp::to(QpState::Terminate)).is_ok());
        if !moved {
            return self.abort(id);
        }
        e.closing = true;
        cm.qp_actions(engine, rnic);
        cm.service(engine, rnic, id);
        Ok(())
    }

    /// The application let go of connection `id` without a disconnect (it destroyed its
    /// rdma_cm id): as Linux's iw_cm does, its QP moves to Error (its work requests are
    /// flushed) and is no longer the connection's, the stream stops without a Terminate,
    /// and TCP sends what it was already given, then closes gracefully (a socket closed by
    /// its owner). The connection ends by itself; its events reach no one.
    pub fn release(&mut self, id: ConnId) -> Result<(), CmError> {
        let (engine, rnic, cm) = self.parts();
        let e = cm.conns.get_mut(&id).ok_or(CmError::NoConnection)?;
        e.closing = true;
        let qp = e.qp.take();
        if let Some(qp) = qp {
            cm.by_qp.remove(&qp);
        }
        if let Some(c) = engine.ulp_mut(id) {
            c.release(cm.now, rnic.memory());
        }
        if let Some(qp) = qp {
            // Its LLP action (a reset) finds no connection any more: ignored.
            let _ = rnic.modify_qp(qp, ModifyQp::to(QpState::Error));
        }
        cm.qp_actions(engine, rnic);
        cm.service(engine, rnic, id);
        Ok(())
    }

    /// Abortive disconnect: a Terminate is queued, TCP reset at once (the Terminate may
    /// not get out), the QP flushed.
    pub fn abort(&mut self, id: ConnId) -> Result<(), CmError> {
        let (engine, rnic, cm) = self.parts();
        let e = cm.conns.get_mut(&id).ok_or(CmError::NoConnection)?;
        e.aborted = true;
        let qp = e.qp;
        if let Some(c) = engine.ulp_mut(id) {
            c.abort(cm.now, rnic.memory(), TerminateCause::RDMAP_OP_UNSPECIFIED);
        }
        if let Some(qp) = qp {
            let _ = rnic.modify_qp(qp, ModifyQp::to(QpState::Error));
        }
        cm.service(engine, rnic, id);
        let _ = engine.abort(id);
        Ok(())
    }

    /// Counters over every connection, live and closed, and the RNIC's send-buffer pool.
    pub fn counters(&self) -> RdmaCounters {
        self.service().totals(self.tcp(), self.rnic())
    }

    /// Connections alive.
    pub fn live(&self) -> usize {
        self.service().conns.len()
    }

    /// The earliest instant any timer of the handler is due (for idle waiting).
    pub fn next_timeout(&mut self) -> Option<Instant> {
        let (engine, _, cm) = self.parts();
        let t = engine.poll_timeout();
        Instant::earliest(t, cm.next_timer())
    }
}

impl ConnManager {
    /// The live connections in the order they were tracked.
    pub(super) fn ids(&self) -> Vec<ConnId> {
        self.order
            .iter()
            .copied()
            .filter(|id| self.conns.contains_key(id))
            .collect()
    }

    /// Queues the connection's timer when it is due earlier than the one queued.
    fn arm_timer(&mut self, engine: &RdmaEngine, id: ConnId) {
        let deadline = engine.ulp(id).and_then(Connection::poll_timeout);
        self.arm_deadline(id, deadline);
    }

    /// [`ConnManager::arm_timer`] with the connection's deadline at hand (read where the
    /// connection was, after the last change to it): no look-up when it has none.
    fn arm_deadline(&mut self, id: ConnId, deadline: Option<Instant>) {
        let Some(d) = deadline else {
            return;
        };
        let Some(e) = self.conns.get_mut(&id) else {
            return;
        };
        if e.timer_at.is_none_or(|t| d < t) {
            e.timer_at = Some(d);
            self.timers.push(Reverse((d, id)));
        }
    }

    /// The earliest queued connection timer (stale entries are dropped).
    fn next_timer(&mut self) -> Option<Instant> {
        while let Some(&Reverse((d, id))) = self.timers.peek() {
            if self.conns.get(&id).is_some_and(|e| e.timer_at == Some(d)) {
                return Some(d);
            }
            self.timers.pop();
        }
        None
    }

    /// Runs the connection timers due at `now`; the connections go to `due` for service.
    /// (Out of line: [`TcpService::work`] asks first whether the earliest is due.)
    #[inline(never)]
    fn run_timers(&mut self, engine: &mut RdmaEngine, rnic: &mut Rnic, now: Instant) {
        while let Some(&Reverse((d, id))) = self.timers.peek() {
            if d > now {
                break;
            }
            self.timers.pop();
            let Some(e) = self.conns.get_mut(&id) else {
                continue;
            };
            if e.timer_at != Some(d) {
                continue;
            }
            e.timer_at = None;
            // The deadline may have moved since it was queued (an initiator's MPA timer
            // restarts when its Request goes out).
            let fire = engine
                .ulp(id)
                .and_then(Connection::poll_timeout)
                .is_some_and(|t| t <= now);
            if fire {
                if let Some(c) = engine.ulp_mut(id) {
                    c.handle_timeout(now, rnic.memory());
                }
                self.due.push(id);
            } else {
                self.arm_timer(engine, id);
            }
        }
    }

    /// Counters over every connection, live and closed, and the RNIC's send-buffer pool.
    fn totals(&self, engine: &RdmaEngine, rnic: &Rnic) -> RdmaCounters {
        let mut c = self.closed;
        let pool = rnic.tx_pool().stats();
        c.tx_pool_reused = pool.reused;
        c.tx_pool_freed = pool.freed;
        for id in &self.order {
            if let Some(conn) = engine.ulp(*id) {
                c.add(&conn.stats());
            }
        }
        // The engine's totals cover SYN and SYN-ACK retransmissions and connections that
        // never reached the handler (half-open ones, failed connects).
        let tcp = engine.stats();
        c.tcp_retransmits = tcp.retransmits;
        c.tcp_timeouts = tcp.timeouts;
        c.tcp_spurious_timeouts = tcp.spurious_timeouts;
        c.tcp_recoveries = tcp.recoveries;
        c.tcp_spurious_recoveries = tcp.spurious_recoveries;
        c.tcp_syn_retransmits = tcp.syn_retransmits;
        c.tcp_loss_probes = tcp.loss_probes;
        c.tcp_pure_acks = tcp.pure_acks;
        c.tcp_delayed_acks = tcp.delayed_acks;
        c
    }

    fn cm_counters(&self) -> CmCounters {
        CmCounters {
            events_waiting: self.events.len(),
            ..self.cm_counters
        }
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

    /// DDP segment octets a connection reads from registered memory before TCP asks for
    /// them (`ConnConfig::tx_budget`): one full-sized IPv4 segment's worth, enough to pack
    /// small FPDUs into whole units. A payload is then copied, framed, CRC'd and sent while
    /// it is in the cache; iwarp's default (64 KiB) kept 64 MB copied and waiting over 1,000
    /// QPs, far beyond the L3, and read each 64 KiB Write at once when it was posted, which
    /// held up the poll loop.
    fn tx_ahead(&self) -> usize {
        usize::from(
            self.cfg
                .tcp
                .local_mss(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
        )
    }

    fn conn_config(&self, mpa: MpaConfig, init: &QpInit, qp: QpId) -> ConnConfig {
        ConnConfig {
            pd: init.pd,
            stream: qp.stream(),
            rx_window: self.cfg.rx_window,
            first_fpdu_delay: self.first_fpdu_delay,
            tx_budget: self.tx_ahead(),
            ..ConnConfig::new(mpa)
        }
    }

    /// Queues a CM event for the application.
    fn report(&mut self, e: CmEvent) {
        self.events.push_back(e);
        let c = &mut self.cm_counters;
        c.events_high_water = c.events_high_water.max(self.events.len());
    }

    /// The next ephemeral port from `local` to `remote` of this handler's lane that no
    /// listener uses (the engine refuses one whose 4-tuple is still in its table).
    fn steered_port(&mut self, local: IpAddr, remote: SocketAddr) -> Result<u16, CmError> {
        let (lo, hi) = self.cfg.tcp.ephemeral_ports;
        let start = self.next_port.clamp(lo, hi);
        let candidates = (start..=hi).chain(lo..start);
        let listeners = &self.listeners;
        let port = steered_port(local, remote, self.lane, candidates, |p| {
            !listeners.contains_key(&p)
        })
        .ok_or(tcp::Error::NoEphemeralPort)?;
        self.next_port = if port >= hi { lo } else { port + 1 };
        Ok(port)
    }

    fn track(
        &mut self,
        id: ConnId,
        qp: Option<QpId>,
        local: SocketAddr,
        remote: SocketAddr,
        announced: bool,
    ) {
        self.conns.insert(
            id,
            Entry {
                qp,
                addrs: Box::new(Addrs { local, remote }),
                established: false,
                closing: false,
                tcp_close_sent: false,
                aborted: false,
                announced,
                timer_at: None,
            },
        );
        if let Some(qp) = qp {
            self.by_qp.insert(qp, id);
        }
        self.order.push(id);
    }

    /// Moves one connection's WRs, completions and events.
    fn service(&mut self, engine: &mut RdmaEngine, rnic: &mut Rnic, id: ConnId) {
        let Some(entry) = self.conns.get(&id) else {
            return;
        };
        let qp = entry.qp;
        let closing = entry.closing && !entry.tcp_close_sent;
        let now = self.now;
        // A connection visited for its TCP activity alone (an ACK, a placed Write) with
        // nothing for the verbs layer, no WRs waiting, no events and no LLP requests: only
        // its drain (when closing) and its timer are looked at. TCP already polls it for
        // whatever that activity has it send.
        let Some(c) = engine.ulp(id) else {
            return;
        };
        let pump = qp.filter(|&qp| c.verbs_pending() || rnic.has_pending_wrs(qp));
        if pump.is_none() && !c.has_news() {
            if closing && c.is_drained() {
                self.close_tcp(engine, id);
                self.arm_timer(engine, id);
            } else {
                let deadline = c.poll_timeout();
                self.arm_deadline(id, deadline);
            }
            return;
        }
        let mut llp = Vec::new();
        let mut evs = Vec::new();
        let drained;
        let deadline;
        {
            let Some(c) = engine.ulp_mut(id) else {
                return;
            };
            if let Some(qp) = pump {
                c.pump_verbs(now, rnic, qp);
            }
            while let Some(e) = c.poll_event() {
                evs.push(e);
            }
            while let Some(r) = c.poll_llp_request() {
                llp.push(r);
            }
            drained = c.is_drained();
            deadline = c.poll_timeout();
        }
        let had_events = !evs.is_empty();
        // The deadline read above holds while nothing touched the connection since.
        let mut changed = had_events || !llp.is_empty();
        for e in evs {
            self.conn_event(rnic, id, e);
        }
        // Events may have moved the QP (e.g. to RTS): pump again. Without events nothing
        // changed since the first pump (it ran until the QP had nothing more to hand over).
        if let (true, Some(c), Some(qp)) = (had_events, engine.ulp_mut(id), qp) {
            c.pump_verbs(now, rnic, qp);
            while let Some(r) = c.poll_llp_request() {
                llp.push(r);
            }
        }
        for r in llp {
            match r {
                LlpRequest::Close => self.close_tcp(engine, id),
                LlpRequest::Reset => {
                    let _ = engine.abort(id);
                }
            }
        }
        if drained && self.conns.get(&id).is_some_and(|e| e.closing) {
            self.close_tcp(engine, id);
            changed = true;
        }
        if changed {
            self.arm_timer(engine, id);
        } else {
            self.arm_deadline(id, deadline);
        }
    }

    fn close_tcp(&mut self, engine: &mut RdmaEngine, id: ConnId) {
        if let Some(e) = self.conns.get_mut(&id) {
            if !e.tcp_close_sent {
                e.tcp_close_sent = true;
                let _ = engine.close(id);
            }
        }
    }

    fn conn_event(&mut self, rnic: &mut Rnic, id: ConnId, e: ConnEvent) {
        let Some(entry) = self.conns.get_mut(&id) else {
            return;
        };
        let (qp, local, remote) = (entry.qp, entry.addrs.local, entry.addrs.remote);
        match e {
            ConnEvent::ConnectRequest(req) => {
                entry.announced = true;
                self.report(match qp {
                    Some(qp) => CmEvent::ConnectRequest {
                        id,
                        qp,
                        remote,
                        private_data: req.private_data,
                    },
                    None => CmEvent::Request {
                        id,
                        local,
                        remote,
                        private_data: req.private_data,
                        ird_ord: req.ird_ord.map(|io| (io.ird, io.ord)),
                    },
                })
            }
            ConnEvent::Established(n) => {
                let Some(qp) = qp else {
                    return;
                };
                // VERBS-00 §6.2.1.2: Idle → RTS with the established LLP stream.
                let r = rnic.modify_qp(
                    qp,
                    ModifyQp::to_rts(LlpAttach {
                        stream: LlpStreamHandle(u64::from(qp.0)),
                        established: true,
                        stream_message: None,
                    }),
                );
                if let Err(err) = r {
                    log::warn!("qp {qp:?} to RTS: {err}");
                }
                entry.established = true;
                self.closed.established += 1;
                self.report(CmEvent::Established {
                    id,
                    qp,
                    negotiated: n,
                });
            }
            ConnEvent::Rejected { private_data } => {
                if let Some(qp) = qp {
                    self.report(CmEvent::Rejected {
                        id,
                        qp,
                        private_data,
                    })
                }
            }
            ConnEvent::NegotiationFailed { .. } | ConnEvent::LlpClosedDuringNegotiation
                if !entry.announced =>
            {
                // An incoming connection the application never saw (no valid MPA Request).
                log::debug!("incoming connection from {remote} failed before its Request: {e:?}");
            }
            ConnEvent::NegotiationFailed { .. } | ConnEvent::LlpClosedDuringNegotiation
                if qp.is_none() =>
            {
                self.report(CmEvent::RequestWithdrawn { id });
            }
            ConnEvent::NegotiationFailed { error, .. } => {
                if let Some(qp) = qp {
                    self.report(CmEvent::ConnectError {
                        id,
                        qp,
                        reason: error.to_string(),
                        llp: None,
                    })
                }
            }
            ConnEvent::LlpClosedDuringNegotiation => {
                if let Some(qp) = qp {
                    self.report(CmEvent::ConnectError {
                        id,
                        qp,
                        reason: "connection closed during MPA negotiation".into(),
                        llp: Some(self.closing.unwrap_or(CloseReason::Normal)),
                    })
                }
            }
            ConnEvent::Stream(ev) => {
                log::debug!("qp {qp:?}: {ev:?}");
                if matches!(ev, rdmap::Event::TerminateReceived(_)) {
                    entry.aborted = true;
                }
            }
        }
    }

    #[inline(never)]
    fn qp_actions(&mut self, engine: &mut RdmaEngine, rnic: &mut Rnic) {
        while let Some(a) = rnic.poll_action() {
            let qp = match &a {
                QpAction::Attach { qp, .. }
                | QpAction::SendTerminate { qp, .. }
                | QpAction::CloseLlp { qp }
                | QpAction::ResetLlp { qp }
                | QpAction::ReleaseLlp { qp }
                | QpAction::Destroyed { qp } => *qp,
            };
            let Some(&id) = self.by_qp.get(&qp) else {
                continue;
            };
            let now = self.now;
            let released = matches!(a, QpAction::ReleaseLlp { .. });
            let req = engine
                .ulp_mut(id)
                .and_then(|c| c.apply_qp_action(now, rnic.memory(), &a));
            match req {
                // The stream was released: TCP closes once what was built is handed over.
                None if released => {
                    if let Some(e) = self.conns.get_mut(&id) {
                        e.closing = true;
                    }
                    self.service(engine, rnic, id);
                }
                Some(LlpRequest::Close) => {
                    if let Some(e) = self.conns.get_mut(&id) {
                        e.closing = true;
                    }
                    self.service(engine, rnic, id);
                }
                Some(LlpRequest::Reset) => {
                    let _ = engine.abort(id);
                }
                None => {}
            }
        }
    }

    fn accepted(
        &mut self,
        engine: &mut RdmaEngine,
        rnic: &mut Rnic,
        conn: ConnId,
        tuple: FourTuple,
    ) {
        let Some(template) = self.listeners.get(&tuple.local.port()).cloned() else {
            let _ = engine.abort(conn);
            return;
        };
        if self.events.len() >= self.max_cm_events {
            self.cm_counters.refused_events_full += 1;
            if self.cm_counters.refused_events_full == 1 {
                log::warn!(
                    "{} CM events wait unpolled: refusing incoming connections until the \
                     application takes them (later refusals are counted only)",
                    self.events.len()
                );
            }
            let _ = engine.abort(conn);
            return;
        }
        // A template makes the QP now; a pending listener's application brings its own at
        // accept (the connection's PD and stream are bound then).
        let qp = match template.map(|init| rnic.create_qp(init)) {
            None => None,
            Some(Ok((qp, _))) => Some(qp),
            Some(Err(e)) => {
                self.cm_counters.refused_no_qp += 1;
                if self.cm_counters.refused_no_qp == 1 {
                    log::warn!(
                        "no QP for {}: {e} (later refusals are counted only)",
                        tuple.remote
                    );
                }
                let _ = engine.abort(conn);
                return;
            }
        };
        let cfg = match (template, qp) {
            (Some(init), Some(qp)) => self.conn_config(self.responder_mpa(), &init, qp),
            _ => ConnConfig {
                tx_budget: self.tx_ahead(),
                rx_window: self.cfg.rx_window,
                first_fpdu_delay: self.first_fpdu_delay,
                ..ConnConfig::new(self.responder_mpa())
            },
        };
        let free = |rnic: &mut Rnic| {
            if let Some(qp) = qp {
                let _ = rnic.destroy_qp(qp);
            }
        };
        match Connection::responder(cfg, self.now) {
            Ok(mut c) => {
                if let Some(qp) = qp {
                    c.pump_verbs(self.now, rnic, qp);
                }
                if engine.attach(self.now, rnic, conn, c).is_ok() {
                    if !self.lane.owns(tuple.local, tuple.remote) {
                        self.foreign += 1;
                    }
                    self.track(conn, qp, tuple.local, tuple.remote, false);
                    self.arm_timer(engine, conn);
                } else {
                    // Closed (e.g. reset) before we got to it: free the QP.
                    free(rnic);
                }
            }
            Err(e) => {
                log::warn!("responder: {e}");
                free(rnic);
                let _ = engine.abort(conn);
            }
        }
    }

    fn closed(
        &mut self,
        rnic: &mut Rnic,
        conn: ConnId,
        reason: CloseReason,
        ulp: Option<Connection>,
    ) {
        let Some(entry) = self.conns.get(&conn) else {
            return;
        };
        let qp = entry.qp;
        let now = self.now;
        let mut graceful = reason == CloseReason::Normal && !entry.aborted;
        if let Some(mut c) = ulp {
            if reason != CloseReason::Normal {
                c.handle_llp_closed(now, rnic.memory(), false);
            }
            if let Some(qp) = qp {
                c.pump_verbs(now, rnic, qp);
            }
            let mut evs = Vec::new();
            while let Some(e) = c.poll_event() {
                evs.push(e);
            }
            self.closing = Some(reason);
            for e in evs {
                if matches!(
                    e,
                    ConnEvent::Stream(rdmap::Event::TerminateReceived(_))
                        | ConnEvent::Stream(rdmap::Event::TerminateSent(_))
                ) {
                    graceful = false;
                }
                self.conn_event(rnic, conn, e);
            }
            self.closing = None;
            if let Some(qp) = qp {
                c.pump_verbs(now, rnic, qp);
            }
            let s = c.stats();
            if s.terminates_sent + s.terminates_received > 0 {
                graceful = false;
            }
            self.closed.add(&s);
            c.release_tx_buffers(rnic.tx_pool_mut());
        }
        let Some(entry) = self.conns.remove(&conn) else {
            return;
        };
        if let Some(qp) = entry.qp {
            self.by_qp.remove(&qp);
        }
        // Closed entries leave `order` in batches: O(1) per close, amortized.
        self.order_dead += 1;
        if self.order_dead > self.conns.len() {
            let conns = &self.conns;
            self.order.retain(|id| conns.contains_key(id));
            self.order_dead = 0;
        }
        let announced = entry.announced
            || self.events.iter().any(|e| {
                matches!(e, CmEvent::ConnectRequest { id, .. } | CmEvent::Request { id, .. }
                    if *id == conn)
            });
        let last_is = |events: &VecDeque<CmEvent>| match events.back() {
            Some(
                CmEvent::Rejected { id, .. }
                | CmEvent::ConnectError { id, .. }
                | CmEvent::RequestWithdrawn { id },
            ) => *id == conn,
            _ => false,
        };
        let Some(qp) = qp else {
            // A Request the application saw but did not accept: it is gone.
            if announced && !last_is(&self.events) {
                self.events
                    .push_back(CmEvent::RequestWithdrawn { id: conn });
            }
            return;
        };
        if !graceful {
            let _ = rnic.modify_qp(qp, ModifyQp::to(QpState::Error));
        }
        if !announced {
            // A connection that closed before its MPA Request: nobody holds its QP, so free
            // it (else resets before MPA use up the QP table).
            let _ = rnic.modify_qp(qp, ModifyQp::to(QpState::Error));
            if let Err(e) = rnic.destroy_qp(qp) {
                log::warn!("destroy unannounced qp {qp:?}: {e}");
            }
        } else if entry.established {
            self.report(CmEvent::Disconnected {
                id: conn,
                qp,
                graceful,
            });
        } else if !last_is(&self.events) {
            self.report(CmEvent::ConnectError {
                id: conn,
                qp,
                reason: format!("connection closed: {reason:?}"),
                llp: Some(reason),
            });
        }
    }

    /// Services the connections TCP was active on and those whose QP got work, then the
    /// RNIC's QP actions and the TCP events that raised.
    /// An idle pass (nothing due, no TCP activity, no QP touched, no QP action, no TCP
    /// event) returns after those checks.
    #[inline]
    fn service_due(&mut self, engine: &mut RdmaEngine, rnic: &mut Rnic) {
        if !self.due.is_empty() || engine.has_active() || rnic.has_touched_qps() {
            self.service_listed(engine, rnic);
        }
        if rnic.has_actions() {
            self.qp_actions(engine, rnic);
        }
        self.tcp_events(engine, rnic);
    }

    /// The connections of [`ConnManager::service_due`]'s lists, each serviced once (out of
    /// line, as the other work behind the idle pass's checks: those checks then inline).
    #[inline(never)]
    fn service_listed(&mut self, engine: &mut RdmaEngine, rnic: &mut Rnic) {
        let mut due = std::mem::take(&mut self.due);
        engine.take_active(&mut due);
        rnic.take_touched_qps(&mut self.touched);
        due.extend(self.touched.drain(..).filter_map(|qp| self.by_qp.get(&qp)));
        due.sort_unstable();
        due.dedup();
        for &id in &due {
            self.service(engine, rnic, id);
        }
        due.clear();
        self.due = due;
    }

    /// The TCP engine's events (an idle pass: one check).
    #[inline]
    fn tcp_events(&mut self, engine: &mut RdmaEngine, rnic: &mut Rnic) {
        if engine.has_events() {
            self.take_tcp_events(engine, rnic);
        }
    }

    #[inline(never)]
    fn take_tcp_events(&mut self, engine: &mut RdmaEngine, rnic: &mut Rnic) {
        while let Some(ev) = engine.poll_event() {
            match ev {
                Event::Accepted { conn, tuple } => self.accepted(engine, rnic, conn, tuple),
                Event::Connected(conn) => {
                    let mss = engine.info(conn).map(|i| i.effective_mss);
                    if let (Some(mss), Some(c)) = (mss, engine.ulp_mut(conn)) {
                        c.set_emss(mss);
                    }
                }
                Event::PeerClosed(conn) => {
                    if let Some(c) = engine.ulp_mut(conn) {
                        c.handle_llp_closed(self.now, rnic.memory(), true);
                    }
                    // The peer is done: finish our side once drained.
                    if let Some(e) = self.conns.get_mut(&conn) {
                        e.closing = true;
                    }
                    self.service(engine, rnic, conn);
                }
                Event::Closed { conn, reason, ulp } => self.closed(rnic, conn, reason, ulp),
            }
        }
    }
}

impl TcpService<Connection, Rnic> for ConnManager {
    /// Connection timers, TCP events, the application rings, every connection's WRs and
    /// completions, the RNIC's QP actions.
    ///
    /// Only the connections with something to do are visited: those whose timer is due,
    /// those TCP handed segments or polled ([`tcp::Engine::take_active`]) and those whose QP
    /// got work ([`Rnic::take_touched_qps`]); an idle connection costs nothing per
    /// iteration.
    #[inline]
    fn work(&mut self, engine: &mut RdmaEngine, rnic: &mut Rnic, now: Instant) {
        self.now = now;
        if let Some(regs) = &mut self.registrations {
            regs.apply(rnic);
        }
        if self.timers.peek().is_some_and(|&Reverse((d, _))| d <= now) {
            self.run_timers(engine, rnic, now);
        }
        self.tcp_events(engine, rnic);
        for ch in &mut self.channels {
            ch.pump(rnic);
        }
        self.service_due(engine, rnic);
        if rnic.has_queued_events() {
            self.event_log.drain(rnic, &self.channels);
        }
    }

    /// The connections whose QP got work since [`TcpService::work`] (an application
    /// stepped between it and the drain posted WRs): serviced now, so that those WRs leave
    /// in this iteration.
    fn flush(&mut self, engine: &mut RdmaEngine, rnic: &mut Rnic, now: Instant) {
        self.now = now;
        self.service_due(engine, rnic);
    }

    /// The checks of [`ConnManager::service_due`] (the TCP events are the handler's).
    #[inline]
    fn has_flush_work(&self, engine: &RdmaEngine, rnic: &Rnic) -> bool {
        !self.due.is_empty() || engine.has_active() || rnic.has_touched_qps() || rnic.has_actions()
    }

    fn after_transmit(&mut self, engine: &mut RdmaEngine, rnic: &mut Rnic, _now: Instant) {
        self.tcp_events(engine, rnic);
    }

    /// QPs, memory, event queues and totals (the telemetry entries `qps`, `qp`, `mrs`,
    /// `events` and `rdma`).
    fn observe(&self, engine: &RdmaEngine, rnic: &Rnic, snap: &mut Snapshot) {
        let totals = self.totals(engine, rnic);
        self.observe_into(engine, rnic, &totals, &self.cm_counters(), snap);
    }
}
