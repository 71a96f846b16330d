//! Congestion control behind one trait: NewReno (RFC 5681, RFC 6582) and CUBIC (RFC 8312).
//!
//! The engine owns loss detection and recovery (RACK, RFC 8985, with SACK; RFC 6582
//! without) and the undo of spurious ones; a controller only decides the congestion window
//! and slow-start threshold, in bytes.

mod cubic;
mod newreno;

use core::fmt::Debug;
use core::time::Duration;

pub use cubic::Cubic;
pub use newreno::NewReno;

use crate::time::Instant;

/// A congestion controller: the engine reports ACKs and congestion signals.
pub trait CongestionControl: Debug + Send {
    /// Congestion window in bytes.
    fn cwnd(&self) -> usize;
    /// Slow-start threshold in bytes.
    fn ssthresh(&self) -> usize;
    /// `acked` new bytes were cumulatively acknowledged outside loss recovery.
    fn on_ack(&mut self, now: Instant, acked: usize, srtt: Option<Duration>, mss: usize);
    /// Loss detected (RACK, duplicate ACKs, or a tail loss probe that repaired one).
    fn on_congestion_event(&mut self, now: Instant, flight: usize, mss: usize);
    /// The retransmission timer expired.
    fn on_rto(&mut self, now: Instant, flight: usize, mss: usize);
}

/// A connection's controller, held inline in its TCB: the send path asks for the window on
/// every segment and each ACK updates it, so it sits with the connection's state instead of
/// behind a pointer to a heap object of its own, and calls dispatch by a match.
#[derive(Clone, Debug)]
pub enum Controller {
    /// RFC 5681 / RFC 6582.
    NewReno(NewReno),
    /// RFC 8312.
    Cubic(Cubic),
}

macro_rules! dispatch {
    ($self:ident, $c:ident => $e:expr) => {
        match $self {
            Controller::NewReno($c) => $e,
            Controller::Cubic($c) => $e,
        }
    };
}

impl Controller {
    /// Congestion window in bytes.
    #[inline]
    pub fn cwnd(&self) -> usize {
        dispatch!(self, c => c.cwnd())
    }

    /// Slow-start threshold in bytes.
    #[inline]
    pub fn ssthresh(&self) -> usize {
        dispatch!(self, c => c.ssthresh())
    }

    /// `acked` new bytes were cumulatively acknowledged outside loss recovery.
    #[inline]
    pub fn on_ack(&mut self, now: Instant, acked: usize, srtt: Option<Duration>, mss: usize) {
        dispatch!(self, c => c.on_ack(now, acked, srtt, mss))
    }

    /// Loss detected (RACK, duplicate ACKs, or a tail loss probe that repaired one).
    #[inline]
    pub fn on_congestion_event(&mut self, now: Instant, flight: usize, mss: usize) {
        dispatch!(self, c => c.on_congestion_event(now, flight, mss))
    }

    /// The retransmission timer expired.
    #[inline]
    pub fn on_rto(&mut self, now: Instant, flight: usize, mss: usize) {
        dispatch!(self, c => c.on_rto(now, flight, mss))
    }

    /// A copy of the controller's whole state, restored when a timeout or a recovery
    /// proves spurious (RFC 4015).
    pub fn snapshot(&self) -> Controller {
        self.clone()
    }
}

/// Which congestion controller a connection uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CongestionAlgorithm {
    /// RFC 5681 with RFC 3465 byte counting.
    NewReno,
    /// RFC 8312.
    #[default]
    Cubic,
}

impl CongestionAlgorithm {
    /// A controller with an initial window of `initial_segments` segments of `mss` bytes.
    pub fn build(self, mss: usize, initial_segments: usize) -> Controller {
        let iw = mss * initial_segments.max(1);
        match self {
            CongestionAlgorithm::NewReno => Controller::NewReno(NewReno::new(iw)),
            CongestionAlgorithm::Cubic => Controller::Cubic(Cubic::new(iw, mss)),
        }
    }
}
