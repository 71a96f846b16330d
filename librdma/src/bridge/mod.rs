//! A lane's side of the libraries: the lane's stacks (one per device) and what it knows of
//! the application's objects that live on it. Every iteration it applies the work requests
//! application threads posted ([`Bridge::apply_post`]), then moves what the RNICs produced
//! to the application ([`Bridge::distribute`]): completions into each CQ's ring (firing
//! armed notifications), QP states and posting windows, async events, and connection
//! manager events to the ids' channels ([`cm`]).

pub mod cm;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use dataplane::clock;
use dataplane::port::AnyPort;
use dataplane::rdma::{RdmaHandler, RdmaStack, MAX_KEPT_EVENTS};
use iwarp::verbs::{AsyncEventKind, EventResource, PostError, QpId, QpState, Rnic, VerbError};
use rustc_hash::FxHashMap;

use crate::abi::*;
use crate::convert;
use crate::shared::verbs::{qp_num, AsyncShared, CqShared, QpShared, SrqShared, Wc};
use cm::CmTable;

/// How long a program's exit waits for its connections to deliver what they queued and
/// close in order, before it resets the rest.
const CLOSE_WAIT: Duration = Duration::from_millis(300);

/// Work requests posted by application threads, applied by the data-plane thread in order.
#[derive(Debug)]
pub enum Post {
    /// PostSQ.
    Send {
        /// The QP.
        qp: Arc<QpShared>,
        /// The WR.
        wr: iwarp::verbs::SendWr,
    },
    /// PostRQ.
    Recv {
        /// The QP.
        qp: Arc<QpShared>,
        /// The WR.
        wr: iwarp::verbs::RecvWr,
    },
    /// PostRQ to a shared receive queue.
    SrqRecv {
        /// The S-RQ.
        srq: Arc<SrqShared>,
        /// The WR.
        wr: iwarp::verbs::RecvWr,
    },
}

impl Post {
    /// The lane the WR goes to: its QP's or S-RQ's.
    pub fn lane(&self) -> usize {
        match self {
            Post::Send { qp, .. } | Post::Recv { qp, .. } => qp.lane,
            Post::SrqRecv { srq, .. } => srq.lane,
        }
    }
}

/// What one lane's connections did, summed over its devices (the libraries' per-lane
/// counters: whether steering held, and that every lane carried traffic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneCounters {
    /// Frames received and sent.
    pub frames: (u64, u64),
    /// Connections established.
    pub established: u64,
    /// Connections accepted whose 4-tuple hashes to another lane.
    pub foreign: u64,
    /// TCP resets sent other than aborts: for segments of no connection (a segment on
    /// the wrong lane) and by connections (RFC 9293's reset cases).
    pub resets_sent: u64,
    /// TCP resets of connections the program reset (a QP moved to ERR while its
    /// connection was up).
    pub aborts: u64,
    /// Connections open now (a destroyed id's or QP's until its graceful close ends).
    pub live: u64,
    /// FPDUs sent and received.
    pub fpdus: (u64, u64),
}

impl LaneCounters {
    /// One line of `key value` pairs (the keys of `dataplane perf`'s lane lines).
    pub fn line(&self) -> String {
        format!(
            "rx-frames {} tx-frames {} established {} foreign {} resets-sent {} aborts {} live {} fpdus-sent {} fpdus-received {}",
            self.frames.0,
            self.frames.1,
            self.established,
            self.foreign,
            self.resets_sent,
            self.aborts,
            self.live,
            self.fpdus.0,
            self.fpdus.1
        )
    }
}

/// An application object the bridge knows (a CQ or an S-RQ) and the context its async
/// events go to.
struct Track<S> {
    shared: Arc<S>,
    asyncs: Arc<AsyncShared>,
}

/// Forgets the tracked object `gone`.
fn forget<S>(tracks: &mut Vec<Track<S>>, gone: &Arc<S>) {
    tracks.retain(|t| !Arc::ptr_eq(&t.shared, gone));
}

/// Device `dev`'s handler among `stacks` (borrowing the stacks alone, so that the bridge's
/// registries stay usable alongside); ENODEV if there is none.
fn handler_of(stacks: &mut [RdmaStack<AnyPort>], dev: usize) -> Result<&mut RdmaHandler, i32> {
    stacks
        .get_mut(dev)
        .map(|s| s.poll.handler_mut())
        .ok_or(libc::ENODEV)
}

/// Device `dev`'s RNIC among `stacks` (as [`handler_of`]).
fn rnic_of(stacks: &mut [RdmaStack<AnyPort>], dev: usize) -> Result<&mut Rnic, i32> {
    handler_of(stacks, dev).map(|h| h.rnic_mut())
}

/// A QP's work queue.
#[derive(Clone, Copy)]
enum Wq {
    Send,
    Recv,
}

struct QpTrack {
    shared: Arc<QpShared>,
    asyncs: Arc<AsyncShared>,
    /// WRs handed to the RNIC (or refused by it) so far.
    sq_applied: u64,
    rq_applied: u64,
}

impl QpTrack {
    /// Publishes the WRs the RNIC retired (applied and no longer occupying a slot).
    fn retire(&self, rnic: &Rnic) {
        let q = &self.shared;
        if let Some((sq, rq)) = rnic.wq_occupancy(q.id) {
            q.sq_retired.store(
                self.sq_applied - u64::from(sq).min(self.sq_applied),
                Ordering::Release,
            );
            q.rq_retired.store(
                self.rq_applied - u64::from(rq).min(self.rq_applied),
                Ordering::Release,
            );
        }
    }
}

/// A lane's stacks and the registry of the application's objects on it.
pub struct Bridge {
    /// The lane.
    lane: usize,
    /// How many lanes run.
    lanes: usize,
    stacks: Vec<RdmaStack<AnyPort>>,
    cqs: Vec<Track<CqShared>>,
    qps: FxHashMap<(usize, QpId), QpTrack>,
    srqs: Vec<Track<SrqShared>>,
    contexts: Vec<(usize, Arc<AsyncShared>)>,
    /// The connection manager's ids and connections.
    pub cm: CmTable,
}

impl Bridge {
    /// Lane `lane`'s (of `lanes`) bridge over `stacks` (device `i` is `stacks[i]`).
    pub fn new(mut stacks: Vec<RdmaStack<AnyPort>>, lane: usize, lanes: usize) -> Bridge {
        // The handlers take the RNICs' events every iteration; the bridge delivers the ones
        // they keep for it.
        for s in &mut stacks {
            s.poll.handler_mut().keep_async_events(MAX_KEPT_EVENTS);
        }
        Bridge {
            lane,
            lanes,
            stacks,
            cqs: Vec::new(),
            qps: FxHashMap::default(),
            srqs: Vec::new(),
            contexts: Vec::new(),
            cm: CmTable::default(),
        }
    }

    /// The lane this bridge serves.
    pub fn lane(&self) -> usize {
        self.lane
    }

    /// The lane's counters, summed over its devices.
    pub fn counters(&self) -> LaneCounters {
        let mut c = LaneCounters::default();
        for s in &self.stacks {
            let l = s.poll.counters(0);
            let h = s.poll.handler();
            let rdma = h.counters();
            c.frames.0 += l.rx;
            c.frames.1 += l.tx;
            c.established += rdma.established;
            c.foreign += h.foreign_connections();
            let tcp = h.tcp().stats();
            c.resets_sent += tcp.resets_sent - tcp.aborts_sent;
            c.aborts += tcp.aborts_sent;
            c.live += h.live() as u64;
            c.fpdus.0 += rdma.fpdus_sent;
            c.fpdus.1 += rdma.fpdus_received;
        }
        c
    }

    /// Device `dev`'s handler (TCP engine, connections, RNIC); ENODEV if there is none.
    pub fn handler(&mut self, dev: usize) -> Result<&mut RdmaHandler, i32> {
        handler_of(&mut self.stacks, dev)
    }

    /// The connection manager's table and device `dev`'s handler, together.
    pub fn cm_and_handler(&mut self, dev: usize) -> Result<(&mut CmTable, &mut RdmaHandler), i32> {
        let h = handler_of(&mut self.stacks, dev)?;
        Ok((&mut self.cm, h))
    }

    /// Device `dev`'s RNIC.
    pub fn rnic(&mut self, dev: usize) -> Result<&mut Rnic, i32> {
        self.handler(dev).map(|h| h.rnic_mut())
    }

    /// One poll-loop iteration on every device; frames handled.
    pub fn poll(&mut self, now: tcp::Instant) -> usize {
        self.stacks.iter_mut().map(|s| s.poll.poll_once(now)).sum()
    }

    /// Publishes each stack's telemetry snapshot when a reader (`dataplane stats`, DPDK's
    /// telemetry socket) asked since the last (two relaxed loads per stack otherwise).
    pub fn publish_if_asked(&mut self) {
        for s in &mut self.stacks {
            s.poll.publish_if_asked();
        }
    }

    /// Registers an opened context (device-wide async events go to it).
    pub fn add_context(&mut self, dev: usize, asyncs: Arc<AsyncShared>) {
        self.contexts.push((dev, asyncs));
    }

    /// Forgets a closed context.
    pub fn remove_context(&mut self, asyncs: &Arc<AsyncShared>) {
        self.contexts.retain(|(_, a)| !Arc::ptr_eq(a, asyncs));
    }

    /// Registers a created CQ.
    pub fn add_cq(&mut self, shared: Arc<CqShared>, asyncs: Arc<AsyncShared>) {
        self.cqs.push(Track { shared, asyncs });
    }

    /// Destroys a CQ (EBUSY while a QP uses it).
    pub fn destroy_cq(&mut self, cq: &Arc<CqShared>) -> Result<(), i32> {
        let handle = cq.handle(self.lane);
        self.destroy(cq.dev, |r| r.destroy_cq(handle))?;
        forget(&mut self.cqs, cq);
        Ok(())
    }

    /// Registers a created QP.
    pub fn add_qp(&mut self, shared: Arc<QpShared>, asyncs: Arc<AsyncShared>) {
        self.qps.insert(
            (shared.dev, shared.id),
            QpTrack {
                shared,
                asyncs,
                sq_applied: 0,
                rq_applied: 0,
            },
        );
    }

    /// Destroys a QP in any state: a connection it carries is reset (the RNIC asks for it).
    pub fn destroy_qp(&mut self, qp: &QpShared) -> Result<(), i32> {
        // Completions already on the RNIC's CQs belong to the application (they were
        // produced before the destroy): hand them over first.
        self.drain_cqs();
        if let Some(conn) = self.cm.conn_of(qp.dev, qp.id) {
            log::debug!(
                "lane {}: QP {:?} destroyed with its connection {conn:?} (released if open)",
                self.lane,
                qp.id
            );
        }
        self.destroy(qp.dev, |r| r.destroy_qp(qp.id))?;
        self.qps.remove(&(qp.dev, qp.id));
        self.cm.qp_destroyed(qp.dev, qp.id);
        Ok(())
    }

    /// Registers a created S-RQ.
    pub fn add_srq(&mut self, shared: Arc<SrqShared>, asyncs: Arc<AsyncShared>) {
        self.srqs.push(Track { shared, asyncs });
    }

    /// Destroys an S-RQ (EBUSY while QPs use it).
    pub fn destroy_srq(&mut self, srq: &Arc<SrqShared>) -> Result<(), i32> {
        self.destroy(srq.dev, |r| r.destroy_srq(srq.handle))?;
        forget(&mut self.srqs, srq);
        Ok(())
    }

    /// Runs a destroy verb on device `dev`'s RNIC; its error as an errno value.
    fn destroy(
        &mut self,
        dev: usize,
        verb: impl FnOnce(&mut Rnic) -> Result<(), VerbError>,
    ) -> Result<(), i32> {
        verb(self.rnic(dev)?).map_err(convert::errno_of)
    }

    /// Applies one posted work request. A WR the RNIC refuses completes in error on its CQ
    /// (the application's post already returned).
    pub fn apply_post(&mut self, p: Post) {
        match p {
            Post::Send { qp, wr } => {
                let refused = failed_wc(&qp, wr.wr_id, convert::send_opcode(&wr.op));
                self.apply_to_qp(&qp, Wq::Send, refused, |r| r.post_sq(qp.id, vec![wr]));
            }
            Post::Recv { qp, wr } => {
                let refused = failed_wc(&qp, wr.wr_id, IBV_WC_RECV);
                self.apply_to_qp(&qp, Wq::Recv, refused, |r| r.post_rq(qp.id, vec![wr]));
            }
            Post::SrqRecv { srq, wr } => {
                let Ok(rnic) = self.rnic(srq.dev) else {
                    return;
                };
                if let Err(e) = rnic.post_srq(srq.handle, vec![wr]) {
                    log::warn!("S-RQ {:?}: receive refused: {}", srq.handle, e.error);
                }
            }
        }
    }

    /// Applies one WR to `wq` of `qp` with `post`: it counts as applied, and if the RNIC
    /// refuses it, `refused` (its error completion) goes to the queue's CQ.
    fn apply_to_qp(
        &mut self,
        qp: &QpShared,
        wq: Wq,
        refused: Wc,
        post: impl FnOnce(&mut Rnic) -> Result<usize, PostError>,
    ) {
        let Ok(rnic) = rnic_of(&mut self.stacks, qp.dev) else {
            return;
        };
        let r = post(rnic);
        if let Some(t) = self.qps.get_mut(&(qp.dev, qp.id)) {
            match wq {
                Wq::Send => t.sq_applied += 1,
                Wq::Recv => t.rq_applied += 1,
            }
        }
        if let Err(e) = r {
            let cq = match wq {
                Wq::Send => &qp.send_cq,
                Wq::Recv => &qp.recv_cq,
            };
            refuse(qp, cq, e, refused);
        }
    }

    /// Moves what the RNICs produced to the application: completions, then (when `busy`:
    /// something happened this iteration) QP states and windows, async events and
    /// connection manager events.
    pub fn distribute(&mut self, busy: bool) {
        self.drain_cqs();
        if !busy {
            return;
        }
        self.sync_qps();
        self.async_events();
        for dev in 0..self.stacks.len() {
            let h = self.stacks[dev].poll.handler_mut();
            self.cm.route_events(dev, h);
        }
    }

    fn drain_cqs(&mut self) {
        for t in &self.cqs {
            let cq = &t.shared;
            let Ok(rnic) = rnic_of(&mut self.stacks, cq.dev) else {
                continue;
            };
            while !cq.ring.is_full() {
                let Ok(wc) = rnic.poll_cq(cq.handle(self.lane)) else {
                    break;
                };
                // The slot this completion frees is in the posting window before the
                // application can see the completion (and post again).
                if let Some(q) = self.qps.get(&(cq.dev, wc.qp)) {
                    q.retire(rnic);
                }
                let mut c = convert::completion(&wc);
                c.qp_num = qp_num(wc.qp, self.lane, self.lanes);
                cq.deliver(c);
            }
        }
    }

    fn sync_qps(&mut self) {
        for t in self.qps.values_mut() {
            let q = &t.shared;
            let Ok(rnic) = rnic_of(&mut self.stacks, q.dev) else {
                continue;
            };
            t.retire(rnic);
            if let Ok(a) = rnic.query_qp(q.id) {
                let s = match a.state {
                    QpState::Idle => None,
                    QpState::Rts => Some(IBV_QPS_RTS),
                    QpState::Closing => Some(IBV_QPS_SQD),
                    QpState::Terminate => Some(IBV_QPS_SQE),
                    QpState::Error => Some(IBV_QPS_ERR),
                };
                if let Some(s) = s {
                    q.state.store(s, Ordering::Release);
                }
            }
        }
    }

    fn async_events(&mut self) {
        for dev in 0..self.stacks.len() {
            while let Some(ev) = self.stacks[dev].poll.handler_mut().poll_async_event() {
                let Some(kind) = async_type(ev.kind) else {
                    continue;
                };
                match ev.resource {
                    EventResource::Qp(qp) => {
                        if let Some(t) = self.qps.get(&(dev, qp)) {
                            t.asyncs.push((t.shared.c_qp.load(Ordering::Acquire), kind));
                        }
                    }
                    EventResource::Cq(cq) => {
                        if let Some(t) = self
                            .cqs
                            .iter()
                            .find(|t| t.shared.dev == dev && t.shared.handle(self.lane) == cq)
                        {
                            t.asyncs
                                .push((t.shared.c_cq.load(Ordering::Acquire), IBV_EVENT_CQ_ERR));
                        }
                    }
                    EventResource::Srq(srq) => {
                        if let Some(t) = self
                            .srqs
                            .iter()
                            .find(|t| t.shared.dev == dev && t.shared.handle == srq)
                        {
                            t.asyncs
                                .push((t.shared.c_srq.load(Ordering::Acquire), kind));
                        }
                    }
                    EventResource::Rnic => {
                        for (_, a) in self.contexts.iter().filter(|(d, _)| *d == dev) {
                            a.push((1, kind));
                        }
                    }
                }
            }
        }
    }

    /// At process exit: every connection closes gracefully (what the program sent is
    /// delivered first) for up to 300 ms; what is still open then is reset, and the
    /// resets are given a moment to leave.
    pub fn shutdown(&mut self) {
        // What the program sent is delivered first (Linux closes the sockets of an exiting
        // program's QPs in order): a graceful close, as long as the peers answer in time.
        for dev in 0..self.stacks.len() {
            let h = self.stacks[dev].poll.handler_mut();
            self.cm.close_all(dev, h);
        }
        let until = clock::now() + CLOSE_WAIT;
        while clock::now() < until && !self.all_closed() {
            self.poll(clock::now());
        }
        for dev in 0..self.stacks.len() {
            let h = self.stacks[dev].poll.handler_mut();
            self.cm.abort_all(dev, h);
        }
        let until = clock::now() + Duration::from_millis(20);
        while clock::now() < until {
            self.poll(clock::now());
        }
    }

    fn all_closed(&mut self) -> bool {
        (0..self.stacks.len()).all(|dev| {
            let h = self.stacks[dev].poll.handler_mut();
            self.cm.all_closed(dev, h)
        })
    }
}

/// The error completion of a WR the RNIC refused.
fn failed_wc(qp: &QpShared, wr_id: u64, opcode: ibv_wc_opcode) -> Wc {
    Wc {
        wr_id,
        status: IBV_WC_LOC_QP_OP_ERR,
        opcode,
        qp_num: qp.num,
        ..Wc::default()
    }
}

/// Reports a refused WR on `cq`: flushed if the QP is in Error, else a local QP operation
/// error.
fn refuse(qp: &QpShared, cq: &CqShared, e: PostError, mut wc: Wc) {
    if qp.state() == IBV_QPS_ERR || e.error == VerbError::InvalidQpState {
        wc.status = IBV_WC_WR_FLUSH_ERR;
    }
    log::debug!(
        "QP {:?}: work request {} refused: {}",
        qp.id,
        wc.wr_id,
        e.error
    );
    if !cq.deliver(wc) {
        log::warn!(
            "CQ {:?} full: the error completion of WR {} is lost",
            cq.handles,
            wc.wr_id
        );
    }
}

/// The `ibv_event_type` of an RNIC async event (`None`: nothing to report).
fn async_type(kind: AsyncEventKind) -> Option<ibv_event_type> {
    use AsyncEventKind as K;
    Some(match kind {
        K::LlpCloseComplete | K::QpRqLimitReached => return None,
        K::ReadNotEnabled
        | K::WriteNotEnabled
        | K::InvalidReadRequest
        | K::InvalidStag
        | K::BaseBoundsViolation
        | K::AccessRightsViolation
        | K::InvalidPd
        | K::WrapError
        | K::IrrqInvalidStag
        | K::IrrqBaseBounds
        | K::IrrqAccessRights
        | K::IrrqInvalidPd
        | K::IrrqWrap => IBV_EVENT_QP_ACCESS_ERR,
        K::CqOverflow | K::CqOperationError => IBV_EVENT_CQ_ERR,
        K::SrqLimitReached => IBV_EVENT_SRQ_LIMIT_REACHED,
        K::SrqCatastrophic => IBV_EVENT_SRQ_ERR,
        K::RnicCatastrophic => IBV_EVENT_DEVICE_FATAL,
        _ => IBV_EVENT_QP_FATAL,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protection_errors_are_access_errors_and_the_rest_fatal() {
        assert_eq!(
            async_type(AsyncEventKind::InvalidStag),
            Some(IBV_EVENT_QP_ACCESS_ERR)
        );
        assert_eq!(
            async_type(AsyncEventKind::LlpConnectionReset),
            Some(IBV_EVENT_QP_FATAL)
        );
        assert_eq!(
            async_type(AsyncEventKind::CqOverflow),
            Some(IBV_EVENT_CQ_ERR)
        );
        assert_eq!(async_type(AsyncEventKind::LlpCloseComplete), None);
    }
}
