//! Lock-free rings between an application thread and the poll core that owns the
//! [`Rnic`]: work requests in, completions and events out (two single-producer /
//! single-consumer queues, no mutex on the fast path). The rings are plain data; the data
//! plane owns the threads and calls [`CoreEnd::pump`] from its poll loop.

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use super::event::{AsyncEvent, EventResource};
use super::handle::{CqHandle, QpId, SrqHandle};
use super::processing::PostError;
use super::queues::NotifyType;
use super::rnic::Rnic;
use super::status::VerbError;
use super::wc::WorkCompletion;
use super::wr::{RecvWr, SendWr};

/// A request from the application to the poll core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// PostSQ.
    PostSend {
        /// The QP.
        qp: QpId,
        /// The WR.
        wr: SendWr,
    },
    /// PostRQ.
    PostRecv {
        /// The QP.
        qp: QpId,
        /// The WR.
        wr: RecvWr,
    },
    /// PostRQ to an S-RQ.
    PostSrq {
        /// The S-RQ.
        srq: SrqHandle,
        /// The WR.
        wr: RecvWr,
    },
    /// Request Completion Notification.
    Notify {
        /// The CQ.
        cq: CqHandle,
        /// Next or next solicited.
        kind: NotifyType,
    },
}

/// What the poll core hands back to the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A Work Completion polled from one of the application's CQs.
    Completion {
        /// The CQ it came from.
        cq: CqHandle,
        /// The WC.
        wc: WorkCompletion,
    },
    /// A posted WR was refused with an Immediate Error (not queued).
    Rejected {
        /// The consumer's WR ID.
        wr_id: u64,
        /// The Immediate Error.
        error: VerbError,
    },
    /// An armed CQ notification fired.
    CqEvent(CqHandle),
    /// An asynchronous event concerning the application's resources.
    Event(AsyncEvent),
}

/// The ring is full; the value is handed back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ring full")]
pub struct Full<T>(pub T);

/// The application's end: owned by one application thread.
#[derive(Debug)]
pub struct AppEnd {
    commands: Arc<ArrayQueue<Command>>,
    notices: Arc<ArrayQueue<Notice>>,
}

/// The poll core's end.
#[derive(Debug)]
pub struct CoreEnd {
    commands: Arc<ArrayQueue<Command>>,
    notices: Arc<ArrayQueue<Notice>>,
    cqs: Vec<CqHandle>,
    qps: Vec<QpId>,
}

/// A pair of rings with room for `capacity` commands and `capacity` notices. `cqs` are
/// the CQs whose completions are forwarded, `qps` the QPs whose events are forwarded.
pub fn pair(capacity: usize, cqs: Vec<CqHandle>, qps: Vec<QpId>) -> (AppEnd, CoreEnd) {
    let commands = Arc::new(ArrayQueue::new(capacity.max(1)));
    let notices = Arc::new(ArrayQueue::new(capacity.max(1)));
    (
        AppEnd {
            commands: commands.clone(),
            notices: notices.clone(),
        },
        CoreEnd {
            commands,
            notices,
            cqs,
            qps,
        },
    )
}

impl AppEnd {
    /// Queues a command for the poll core.
    pub fn submit(&self, cmd: Command) -> Result<(), Full<Command>> {
        self.commands.push(cmd).map_err(Full)
    }

    /// PostSQ through the ring.
    pub fn post_send(&self, qp: QpId, wr: SendWr) -> Result<(), Full<Command>> {
        self.submit(Command::PostSend { qp, wr })
    }

    /// PostRQ through the ring.
    pub fn post_recv(&self, qp: QpId, wr: RecvWr) -> Result<(), Full<Command>> {
        self.submit(Command::PostRecv { qp, wr })
    }

    /// The next notice (completion, rejection, event), if any.
    pub fn poll(&self) -> Option<Notice> {
        self.notices.pop()
    }
}

impl CoreEnd {
    /// Applies queued commands to `rnic`, then forwards completions of the application's
    /// CQs while the notice ring has room (a CQE stays on its CQ otherwise, so nothing is
    /// lost). Returns the number of commands applied.
    pub fn pump(&mut self, rnic: &mut Rnic) -> usize {
        let mut applied = 0;
        while self.notices.len() < self.notices.capacity() {
            let Some(cmd) = self.commands.pop() else {
                break;
            };
            applied += 1;
            let (wr_id, result) = match cmd {
                Command::PostSend { qp, wr } => (wr.wr_id, rnic.post_sq_one(qp, wr).map(|_| ())),
                Command::PostRecv { qp, wr } => (wr.wr_id, rnic.post_rq(qp, vec![wr]).map(|_| ())),
                Command::PostSrq { srq, wr } => {
                    (wr.wr_id, rnic.post_srq(srq, vec![wr]).map(|_| ()))
                }
                Command::Notify { cq, kind } => (
                    0,
                    rnic.request_notification(cq, kind)
                        .map_err(|error| PostError { posted: 0, error }),
                ),
            };
            if let Err(e) = result {
                // Room was checked above and only this thread pushes.
                let _ = self.notices.push(Notice::Rejected {
                    wr_id,
                    error: e.error,
                });
            }
        }
        for &cq in &self.cqs {
            while self.notices.len() < self.notices.capacity() {
                match rnic.poll_cq(cq) {
                    Ok(wc) => {
                        let _ = self.notices.push(Notice::Completion { cq, wc });
                    }
                    Err(_) => break,
                }
            }
        }
        applied
    }

    /// Forwards an asynchronous event or CQ event if it concerns this application; returns
    /// `Err` with the notice when the ring is full.
    pub fn forward(&self, notice: Notice) -> Result<bool, Full<Notice>> {
        let mine = match notice {
            Notice::CqEvent(cq) | Notice::Completion { cq, .. } => self.cqs.contains(&cq),
            Notice::Event(ev) => match ev.resource {
                EventResource::Qp(qp) => self.qps.contains(&qp),
                EventResource::Cq(cq) => self.cqs.contains(&cq),
                _ => true,
            },
            Notice::Rejected { .. } => true,
        };
        if !mine {
            return Ok(false);
        }
        self.notices.push(notice).map(|()| true).map_err(Full)
    }
}
