//! Stopping a handler's connections when the process is asked to stop (SIGINT, SIGTERM):
//! outstanding work requests complete with a flush status and every connection closes the
//! way its state calls for, so the peers learn that it ended and nothing waits forever.
//!
//! A QP in RTS with work requests outstanding (sends not completed, receives posted) is
//! terminated (RDMAP §6.2.1: its work requests flushed, a Terminate, then TCP closed
//! gracefully after it so that the Terminate gets through; see
//! [`RdmaHandler::terminate`]). An idle one closes gracefully (RDMAP §6.2: FIN). Connections still negotiating
//! MPA, where no Terminate can be sent, close their TCP stream. What has not closed when
//! the caller's grace period ends is aborted ([`RdmaHandler::abort_all`]).

use iwarp::verbs::{CompletionStatus, ModifyQp, QpState};

use super::handler::RdmaHandler;

/// How the connections were closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StopCounts {
    /// Connections closed gracefully (FIN).
    pub graceful: usize,
    /// Connections terminated (Terminate and reset) because work was outstanding.
    pub terminated: usize,
}

/// The completions a stop drained from the CQs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Work completions with the flush status.
    pub flushed: u64,
    /// Other work completions.
    pub other: u64,
}

impl RdmaHandler {
    /// Starts closing every connection for a stop (see the module docs).
    pub fn close_all(&mut self) -> StopCounts {
        let mut counts = StopCounts::default();
        let ids = self.service().ids();
        for id in ids {
            let Some((qp, established)) =
                self.service().conns.get(&id).map(|e| (e.qp, e.established))
            else {
                continue;
            };
            // A Request to a pending listener has no QP yet: it closes its stream.
            let rts = qp.is_some_and(|qp| {
                self.rnic()
                    .query_qp(qp)
                    .is_ok_and(|a| a.state == QpState::Rts)
            });
            let busy = qp.is_some_and(|qp| {
                self.rnic()
                    .outstanding(qp)
                    .is_some_and(|(sq, rq)| sq + rq > 0)
            });
            let r = if established && rts && busy {
                counts.terminated += 1;
                self.terminate(id)
            } else {
                counts.graceful += 1;
                self.disconnect(id)
            };
            if let Err(e) = r {
                log::debug!("stop: connection {id:?}: {e}");
            }
        }
        counts
    }

    /// Aborts every connection still open (a Terminate where the QP is in RTS, then a
    /// reset); returns how many.
    pub fn abort_all(&mut self) -> usize {
        let ids = self.service().ids();
        let n = ids.len();
        for id in ids {
            let _ = self.abort(id);
        }
        n
    }

    /// Moves every QP not yet in Error there, so that whatever work is still queued
    /// completes as flushed (VERBS-00 §6.2.3), and polls every CQ empty.
    pub fn drain_cqs(&mut self) -> Drained {
        let rnic = self.rnic_mut();
        let qps = rnic.qp_ids();
        for qp in qps {
            let state = rnic.query_qp(qp).map(|a| a.state);
            if state.is_ok_and(|s| s != QpState::Error) {
                let _ = rnic.modify_qp(qp, ModifyQp::to(QpState::Error));
            }
        }
        let mut d = Drained::default();
        for cq in rnic.cq_handles() {
            while let Ok(wc) = rnic.poll_cq(cq) {
                if wc.status == CompletionStatus::Flushed {
                    d.flushed += 1;
                } else {
                    d.other += 1;
                }
            }
        }
        d
    }
}
