//! The handler as the RNIC's asynchronous event handler (VERBS-00 §8.3.3, §9.4.2): every
//! iteration it takes the RNIC's asynchronous events and CQ notifications, hands each to the
//! application thread whose ring serves the resource ([`iwarp::verbs::channel`]) and keeps
//! the latest few for monitoring. So the RNIC's bounded queues never fill in a long run,
//! and what the data plane itself holds is bounded too. An embedder that delivers the
//! events itself (librdma's bridge) has the ones no ring claims kept for it
//! ([`EventLog::keep`], a bounded number, by default [`MAX_KEPT_EVENTS`]): the handler stays the RNIC's only
//! consumer.

use std::collections::VecDeque;

use iwarp::verbs::channel::{CoreEnd, Notice};
use iwarp::verbs::{AsyncEvent, Rnic};

/// Asynchronous events kept for monitoring ([`crate::rdma::RdmaHandler::recent_events`]), the
/// oldest dropped.
pub const RECENT_EVENTS: usize = 32;

/// The usual bound on the asynchronous events kept for an embedder that polls them
/// ([`crate::rdma::RdmaHandler::keep_async_events`]); later ones are lost and counted.
pub const MAX_KEPT_EVENTS: usize = 4096;

/// What the handler did with the RNIC's events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCounters {
    /// Asynchronous events taken from the RNIC.
    pub async_events: u64,
    /// CQ notifications taken from the RNIC.
    pub cq_events: u64,
    /// Events and notifications handed to an application ring.
    pub forwarded: u64,
    /// Of those meant for an application ring, the ones its full ring refused (lost).
    pub ring_full: u64,
    /// Asynchronous events kept for the embedder, lost because as many as it allows waited.
    pub kept_full: u64,
}

/// The latest asynchronous events and the counters of their handling.
#[derive(Debug, Default)]
pub(super) struct EventLog {
    recent: VecDeque<AsyncEvent>,
    counters: EventCounters,
    /// Events no ring claimed, for the embedder, and how many may wait; `None` when there
    /// is no embedder.
    kept: Option<(VecDeque<AsyncEvent>, usize)>,
}

impl EventLog {
    /// From now on, keeps up to `capacity` asynchronous events no application ring claims
    /// for [`EventLog::take`].
    pub(super) fn keep(&mut self, capacity: usize) {
        let kept = self.kept.get_or_insert_with(|| (VecDeque::new(), capacity));
        kept.1 = capacity;
    }

    /// The oldest kept event.
    pub(super) fn take(&mut self) -> Option<AsyncEvent> {
        self.kept.as_mut()?.0.pop_front()
    }

    /// Takes every queued event and notification off `rnic`: to the ring that serves its
    /// resource, and (events) into the recent list.
    pub(super) fn drain(&mut self, rnic: &mut Rnic, channels: &[CoreEnd]) {
        while let Some(ev) = rnic.poll_async_event() {
            self.counters.async_events += 1;
            if self.recent.len() == RECENT_EVENTS {
                self.recent.pop_front();
            }
            self.recent.push_back(ev);
            if self.forward(Notice::Event(ev), channels) {
                continue;
            }
            if let Some((kept, capacity)) = &mut self.kept {
                if kept.len() < *capacity {
                    kept.push_back(ev);
                } else {
                    self.counters.kept_full += 1;
                }
            }
        }
        while let Some(cq) = rnic.poll_completion_event() {
            self.counters.cq_events += 1;
            self.forward(Notice::CqEvent(cq), channels);
        }
    }

    /// Hands `notice` to the ring that serves its resource; false when none does.
    fn forward(&mut self, notice: Notice, channels: &[CoreEnd]) -> bool {
        for ch in channels {
            match ch.forward(notice) {
                Ok(true) => {
                    self.counters.forwarded += 1;
                    return true;
                }
                Ok(false) => {}
                Err(_) => {
                    self.counters.ring_full += 1;
                    return true;
                }
            }
        }
        false
    }

    /// The latest events, oldest first.
    pub(super) fn recent(&self) -> impl Iterator<Item = &AsyncEvent> {
        self.recent.iter()
    }

    /// The counters.
    pub(super) fn counters(&self) -> EventCounters {
        self.counters
    }
}
