//! The tools that run on the iWARP stack ([`crate::rdma`]): rping, perftest-style runs
//! (with perftest's own `-R` exchange), the soak test. They are applications on the poll
//! core: run to completion, one application step after each poll-loop iteration, with the
//! verbs resources every application sets up.

mod error;
pub mod perf;
pub mod perftest;
pub mod rping;
pub mod soak;

pub use error::{AppError, ConnectFailure};

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::{self, Instant};

use iwarp::verbs::{Access, CqHandle, PdId, QpInit, UlpId, WorkCompletion};

use crate::lcore::PollLoop;
use crate::port::Port;
use crate::rdma::{Arena, Drained, RdmaHandler, Region, StopCounts};

/// What an application step decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<E = AppError> {
    /// Keep going.
    Continue,
    /// Finished: `Ok` or the reason it failed.
    Done(Result<(), E>),
}

/// An application driven by the poll loop.
pub trait App {
    /// Why it fails: its own failure kinds, and the shared ones of [`AppError`].
    type Error: std::error::Error + From<AppError>;

    /// Does whatever is possible now (CM events, completions, new work) without blocking.
    fn step(&mut self, h: &mut RdmaHandler, now: Instant) -> Step<Self::Error>;
}

/// The verbs resources of one application: a PD, one CQ for both queues, a QP template and
/// the buffer allocator over the RNIC's memory.
#[derive(Debug, Clone)]
pub struct Resources {
    /// Protection domain.
    pub pd: PdId,
    /// Completion queue (send and receive).
    pub cq: CqHandle,
    /// QP template for connect/listen.
    pub init: QpInit,
    /// Buffer allocator.
    pub arena: Arena,
}

impl Resources {
    /// Allocates a PD and a CQ of `cq_depth` entries; QPs get `sq_depth`/`rq_depth` WRs.
    pub fn new(
        h: &mut RdmaHandler,
        cq_depth: u32,
        sq_depth: u32,
        rq_depth: u32,
        ord_ird: u32,
    ) -> Result<Resources, AppError> {
        let rnic = h.rnic_mut();
        let ulp = UlpId(1);
        let pd = rnic.alloc_pd(ulp)?;
        let (cq, _) = rnic.create_cq(ulp, cq_depth)?;
        let mut init = QpInit::new(pd, cq, cq);
        init.sq_depth = sq_depth;
        init.rq_depth = rq_depth;
        init.ord = ord_ird;
        init.ird = ord_ird;
        init.inbound_read = true;
        init.inbound_write = true;
        init.inbound_atomic = true;
        let len = rnic.memory().bytes().len();
        Ok(Resources {
            pd,
            cq,
            init,
            arena: Arena::new(len),
        })
    }

    /// Registers a buffer of `len` octets.
    pub fn buffer(
        &mut self,
        h: &mut RdmaHandler,
        len: usize,
        access: Access,
    ) -> Result<Region, AppError> {
        let rnic = h.rnic_mut();
        Ok(self.arena.register(rnic, self.pd, len, access)?)
    }

    /// Polls one completion.
    pub fn poll_cq(&self, h: &mut RdmaHandler) -> Option<WorkCompletion> {
        h.rnic_mut().poll_cq(self.cq).ok()
    }
}

/// Every right: local and remote read/write and atomics.
pub fn all_rights() -> Access {
    Access::LOCAL_READ
        | Access::LOCAL_WRITE
        | Access::REMOTE_READ
        | Access::REMOTE_WRITE
        | Access::REMOTE_ATOMIC
}

/// Runs `app` on `poll` until it is done, `stop` is set or `deadline` passes; `tick` runs
/// about every `tick_every` (stats and progress lines) with the loop, the application and
/// the time. Once the application is done the loop runs 50 ms more (up to 1 s while TCP
/// has more to send) to let the last frames (FIN, ACKs) out.
pub fn run_app<P: Port, A: App>(
    poll: &mut PollLoop<P, RdmaHandler>,
    app: &mut A,
    stop: &AtomicBool,
    deadline: Option<Instant>,
    tick_every: Option<Duration>,
    mut tick: impl FnMut(&mut PollLoop<P, RdmaHandler>, &A, Instant),
) -> Result<(), A::Error> {
    let mut last_tick = clock::now();
    loop {
        let now = clock::now();
        if stop.load(Ordering::Relaxed) {
            return Err(AppError::Stopped.into());
        }
        if deadline.is_some_and(|d| now >= d) {
            return Err(AppError::TimeLimit.into());
        }
        // The application steps between the receive and the transmit halves of the
        // iteration: what it posts in answer to what arrived leaves at once.
        let mut step = Step::Continue;
        let frames = poll.poll_once_with(now, |h| step = app.step(h, now));
        poll.publish_if_asked();
        if let Step::Done(r) = step {
            // Let the last frames (FIN, ACKs) out: 50 ms, and up to a second while TCP
            // still has connections to send for (thousands of final ACKs take many
            // iterations; a peer left in LAST-ACK would resend its FIN to nobody).
            let start = clock::now();
            loop {
                let now = clock::now();
                let waited = now.saturating_since(start);
                let sending = poll.handler().tcp().ready_len() > 0;
                if waited >= LAST_FRAMES_MAX || (waited >= LAST_FRAMES && !sending) {
                    break;
                }
                poll.poll_once(now);
            }
            return r;
        }
        if let Some(every) = tick_every {
            if now.saturating_since(last_tick) >= every {
                tick(poll, app, now);
                last_tick = now;
            }
        }
        if frames == 0 {
            // Idle poll: let a sibling hardware thread run (as `PollLoop::run` does).
            std::hint::spin_loop();
        }
    }
}

/// How long [`run_app`] keeps the loop running after the application is done.
const LAST_FRAMES: Duration = Duration::from_millis(50);
/// The same while TCP still has connections to send for, at most.
const LAST_FRAMES_MAX: Duration = Duration::from_secs(1);

/// How long a stopped application's connections get to close gracefully before they are
/// aborted ([`stop_connections`]).
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// How long [`run_pair`] lets one application finish on its own after the other failed.
/// Longer than an application's own wait after a failure (the soak server gives its
/// verdicts 2 s to reach the client before it stops), so that its own error, not
/// [`AppError::PeerFailed`], is what it reports.
pub const PEER_GRACE: Duration = Duration::from_secs(5);

/// What [`stop_connections`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StopReport {
    /// Connections closed gracefully or terminated at first.
    pub counts: StopCounts,
    /// Connections aborted because they had not closed within the grace period.
    pub aborted: usize,
    /// Completions found on the CQs at the end.
    pub drained: Drained,
}

impl StopReport {
    /// `key: value` lines for the end of a stopped run (stable names, parsed by tests).
    pub fn summary(&self) -> String {
        format!(
            "stop-connections-graceful: {}\nstop-connections-terminated: {}\nstop-connections-aborted: {}\nstop-flushed-completions: {}\nstop-other-completions: {}",
            self.counts.graceful,
            self.counts.terminated,
            self.aborted,
            self.drained.flushed,
            self.drained.other
        )
    }
}

/// Ends an application that was stopped (its stop flag set) in the middle of its work:
/// every connection closes as its state calls for ([`RdmaHandler::close_all`]) while the
/// loop keeps running, for at most `grace`; what is left is aborted; then every QP's
/// outstanding work requests complete with a flush status and the CQs are drained
/// ([`RdmaHandler::drain_cqs`]).
pub fn stop_connections<P: Port>(
    poll: &mut PollLoop<P, RdmaHandler>,
    grace: Duration,
) -> StopReport {
    let [report] = stop_loops([poll], grace);
    report
}

/// [`stop_connections`] for several loops at once, polled together: the two loops of the
/// in-process pair are each other's peer, and one polled alone would wait for the other's
/// FINs until its grace period ran out.
fn stop_loops<P: Port, const N: usize>(
    mut loops: [&mut PollLoop<P, RdmaHandler>; N],
    grace: Duration,
) -> [StopReport; N] {
    let counts = loops.each_mut().map(|l| l.handler_mut().close_all());
    let end = clock::now() + grace;
    while loops.iter().any(|l| l.handler().live() > 0) && clock::now() < end {
        for l in loops.iter_mut() {
            l.poll_once(clock::now());
            l.publish_if_asked();
        }
    }
    let aborted = loops.each_mut().map(|l| {
        if l.handler().live() > 0 {
            l.handler_mut().abort_all()
        } else {
            0
        }
    });
    // Let the last Terminates, resets and acknowledgements out.
    let flush = clock::now() + Duration::from_millis(20);
    while clock::now() < flush {
        for l in loops.iter_mut() {
            l.poll_once(clock::now());
        }
    }
    let drained = loops.each_mut().map(|l| l.handler_mut().drain_cqs());
    std::array::from_fn(|i| StopReport {
        counts: counts[i],
        aborted: aborted[i],
        drained: drained[i],
    })
}

/// Runs two applications on two loops in one thread (the in-process software pair) until
/// both are done, `stop` is set (Ctrl-C: both fail with [`AppError::Stopped`]) or `limit`
/// passes (the unfinished ones fail with [`AppError::TimeLimit`]); returns both results.
/// When one fails, the other gets [`PEER_GRACE`] to finish on its own and then fails with
/// [`AppError::PeerFailed`]: a server whose in-process client gave up would otherwise wait
/// for it forever. An application ended this way has its connections closed as
/// [`stop_connections`] does, on both loops at once (each is the other's peer).
pub fn run_pair<P: Port, A: App, B: App>(
    la: &mut PollLoop<P, RdmaHandler>,
    a: &mut A,
    lb: &mut PollLoop<P, RdmaHandler>,
    b: &mut B,
    limit: Duration,
    stop: &AtomicBool,
) -> (Result<(), A::Error>, Result<(), B::Error>) {
    let end = clock::now() + limit;
    let mut ra: Option<Result<(), A::Error>> = None;
    let mut rb: Option<Result<(), B::Error>> = None;
    let mut peer_failed_at = None;
    let cut = loop {
        if ra.is_some() && rb.is_some() {
            break None;
        }
        let now = clock::now();
        if stop.load(Ordering::Relaxed) {
            break Some(AppError::Stopped);
        }
        if now >= end {
            break Some(AppError::TimeLimit);
        }
        if peer_failed_at.is_none()
            && (ra.as_ref().is_some_and(Result::is_err) || rb.as_ref().is_some_and(Result::is_err))
        {
            peer_failed_at = Some(now);
        }
        if peer_failed_at.is_some_and(|t| now.saturating_since(t) >= PEER_GRACE) {
            break Some(AppError::PeerFailed);
        }
        // Each application steps between its loop's receive and transmit halves: a
        // ping-pong's request and its reply cross the link in one iteration.
        la.poll_once_with(now, |h| {
            if ra.is_none() {
                if let Step::Done(r) = a.step(h, now) {
                    ra = Some(r);
                }
            }
        });
        lb.poll_once_with(now, |h| {
            if rb.is_none() {
                if let Step::Done(r) = b.step(h, now) {
                    rb = Some(r);
                }
            }
        });
    };
    if cut.is_some() {
        stop_loops([la, lb], STOP_GRACE);
    }
    // Flush what is still in flight (FIN, ACKs).
    for _ in 0..200 {
        let now = clock::now();
        la.poll_once(now);
        lb.poll_once(now);
    }
    let cut = cut.unwrap_or(AppError::TimeLimit);
    (
        ra.unwrap_or_else(|| Err(cut.clone().into())),
        rb.unwrap_or_else(|| Err(cut.into())),
    )
}
