//! NewReno window arithmetic: slow start and congestion avoidance of RFC 5681 §3.1 with
//! appropriate byte counting (RFC 3465, L = 2), halving on loss.

use core::time::Duration;

use super::CongestionControl;
use crate::time::Instant;

/// RFC 5681 congestion window.
#[derive(Clone, Debug)]
pub struct NewReno {
    cwnd: usize,
    ssthresh: usize,
    bytes_acked: usize,
}

impl NewReno {
    /// Start with `initial_window` bytes and an "arbitrarily high" ssthresh (RFC 5681 §3.1).
    pub fn new(initial_window: usize) -> Self {
        NewReno {
            cwnd: initial_window,
            ssthresh: usize::MAX,
            bytes_acked: 0,
        }
    }
}

impl CongestionControl for NewReno {
    fn cwnd(&self) -> usize {
        self.cwnd
    }

    fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    fn on_ack(&mut self, _now: Instant, acked: usize, _srtt: Option<Duration>, mss: usize) {
        if self.cwnd < self.ssthresh {
            // RFC 3465 §2.2: cwnd += min(N, L*SMSS) with L = 2.
            self.cwnd += acked.min(2 * mss);
        } else {
            // RFC 5681 §3.1 eq. (3) with byte counting (RFC 3465 §2.1).
            self.bytes_acked += acked;
            if self.bytes_acked >= self.cwnd {
                self.bytes_acked -= self.cwnd;
                self.cwnd += mss;
            }
        }
    }

    fn on_congestion_event(&mut self, _now: Instant, flight: usize, mss: usize) {
        // RFC 5681 eq. (4); RFC 6675 §5 step 4.2 sets cwnd = ssthresh.
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = self.ssthresh;
        self.bytes_acked = 0;
    }

    fn on_rto(&mut self, _now: Instant, flight: usize, mss: usize) {
        // RFC 5681 §3.1: ssthresh per eq. (4), cwnd = loss window = 1 SMSS.
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = mss;
        self.bytes_acked = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    // RFC 5681 §3.1 / RFC 3465 §2.2: slow start grows by at most 2 SMSS per ACK.
    #[test]
    fn slow_start_byte_counting() {
        let mut c = NewReno::new(10 * MSS);
        c.on_ack(Instant::ZERO, 5 * MSS, None, MSS);
        assert_eq!(c.cwnd(), 12 * MSS);
        c.on_ack(Instant::ZERO, MSS, None, MSS);
        assert_eq!(c.cwnd(), 13 * MSS);
    }

    // RFC 5681 eq. (4) and §3.1 congestion avoidance: one SMSS per cwnd of acked bytes.
    #[test]
    fn loss_halves_then_linear_growth() {
        let mut c = NewReno::new(10 * MSS);
        c.on_congestion_event(Instant::ZERO, 20 * MSS, MSS);
        assert_eq!(c.ssthresh(), 10 * MSS);
        assert_eq!(c.cwnd(), 10 * MSS);
        for _ in 0..9 {
            c.on_ack(Instant::ZERO, MSS, None, MSS);
        }
        assert_eq!(c.cwnd(), 10 * MSS);
        c.on_ack(Instant::ZERO, MSS, None, MSS);
        assert_eq!(c.cwnd(), 11 * MSS);
    }

    // RFC 5681 §3.1: after RTO cwnd is one segment; ssthresh never below 2 SMSS.
    #[test]
    fn rto_resets_to_loss_window() {
        let mut c = NewReno::new(10 * MSS);
        c.on_rto(Instant::ZERO, MSS, MSS);
        assert_eq!(c.cwnd(), MSS);
        assert_eq!(c.ssthresh(), 2 * MSS);
    }
}
