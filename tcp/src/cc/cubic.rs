//! CUBIC (RFC 8312): W_cubic(t) = C (t - K)^3 + W_max with C = 0.4 and beta = 0.7, a
//! TCP-friendly region, and fast convergence. Windows are computed in segments.

use core::time::Duration;

use super::CongestionControl;
use crate::time::Instant;

/// RFC 8312 §5.1: C = 0.4.
pub const C: f64 = 0.4;
/// RFC 8312 §4.5: beta_cubic = 0.7.
pub const BETA: f64 = 0.7;

/// CUBIC congestion window.
#[derive(Clone, Debug)]
pub struct Cubic {
    mss: usize,
    /// Congestion window in segments.
    cwnd: f64,
    ssthresh: f64,
    w_max: f64,
    w_last_max: f64,
    k: f64,
    epoch_start: Option<Instant>,
    /// `cwnd` in bytes, kept with it: the send path asks for it on every segment.
    cwnd_bytes: usize,
}

impl Cubic {
    /// Start in slow start with `initial_window` bytes.
    pub fn new(initial_window: usize, mss: usize) -> Self {
        let mss = mss.max(1);
        let mut c = Cubic {
            mss,
            cwnd: initial_window as f64 / mss as f64,
            ssthresh: f64::INFINITY,
            w_max: 0.0,
            w_last_max: 0.0,
            k: 0.0,
            epoch_start: None,
            cwnd_bytes: 0,
        };
        c.sync_bytes();
        c
    }

    /// Recomputes `cwnd_bytes` after `cwnd` or `mss` changed.
    fn sync_bytes(&mut self) {
        self.cwnd_bytes = (self.cwnd * self.mss as f64) as usize;
    }

    /// RFC 8312 eq. (2): K = cbrt(W_max (1 - beta) / C), in seconds.
    pub fn k_for(w_max: f64) -> f64 {
        (w_max * (1.0 - BETA) / C).cbrt()
    }

    /// RFC 8312 eq. (1): W_cubic(t) in segments, `t` seconds into the epoch.
    pub fn w_cubic(&self, t: f64) -> f64 {
        C * (t - self.k).powi(3) + self.w_max
    }

    /// RFC 8312 eq. (4): the Reno-friendly estimate W_est(t).
    pub fn w_est(&self, t: f64, rtt: f64) -> f64 {
        self.w_max * BETA + (3.0 * (1.0 - BETA) / (1.0 + BETA)) * (t / rtt)
    }

    /// W_max of the current epoch, in segments.
    pub fn w_max(&self) -> f64 {
        self.w_max
    }

    /// K of the current epoch, in seconds.
    pub fn k(&self) -> f64 {
        self.k
    }

    fn reduce(&mut self) {
        // RFC 8312 §4.6 fast convergence.
        if self.cwnd < self.w_last_max {
            self.w_last_max = self.cwnd;
            self.w_max = self.cwnd * (1.0 + BETA) / 2.0;
        } else {
            self.w_last_max = self.cwnd;
            self.w_max = self.cwnd;
        }
        self.k = Self::k_for(self.w_max);
        // RFC 8312 §4.5: ssthresh = cwnd * beta, never below 2 segments.
        self.ssthresh = (self.cwnd * BETA).max(2.0);
        self.epoch_start = None;
    }
}

impl CongestionControl for Cubic {
    fn cwnd(&self) -> usize {
        self.cwnd_bytes
    }

    fn ssthresh(&self) -> usize {
        if self.ssthresh.is_finite() {
            (self.ssthresh * self.mss as f64) as usize
        } else {
            usize::MAX
        }
    }

    fn on_ack(&mut self, now: Instant, acked: usize, srtt: Option<Duration>, mss: usize) {
        self.grow(now, acked, srtt, mss);
        self.sync_bytes();
    }

    fn on_congestion_event(&mut self, _now: Instant, _flight: usize, mss: usize) {
        self.mss = mss.max(1);
        self.reduce();
        self.cwnd = self.ssthresh;
        self.sync_bytes();
    }

    fn on_rto(&mut self, _now: Instant, _flight: usize, mss: usize) {
        self.mss = mss.max(1);
        self.reduce();
        // RFC 8312 §4.7: cwnd = 1 segment after a timeout.
        self.cwnd = 1.0;
        self.sync_bytes();
    }
}

impl Cubic {
    /// The window growth of [`CongestionControl::on_ack`], in segments.
    fn grow(&mut self, now: Instant, acked: usize, srtt: Option<Duration>, mss: usize) {
        self.mss = mss.max(1);
        let segs = acked as f64 / self.mss as f64;
        if self.cwnd < self.ssthresh {
            // RFC 8312 §4.8: standard slow start below ssthresh (RFC 3465, L = 2).
            self.cwnd += segs.min(2.0);
            return;
        }
        let epoch = *self.epoch_start.get_or_insert(now);
        let rtt = srtt.map(|d| d.as_secs_f64()).unwrap_or(0.1).max(1e-6);
        let t = now.saturating_since(epoch).as_secs_f64();
        let est = self.w_est(t, rtt);
        if self.w_cubic(t) < est {
            // RFC 8312 §4.2: TCP-friendly region.
            self.cwnd = self.cwnd.max(est);
        } else {
            // RFC 8312 §4.3/§4.4: move toward W_cubic(t + RTT) by (target - cwnd)/cwnd per ACK.
            let target = self.w_cubic(t + rtt).min(1.5 * self.cwnd);
            if target > self.cwnd {
                self.cwnd += (target - self.cwnd) / self.cwnd * segs;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    // RFC 8312 eq. (2): K = cbrt(W_max * (1 - beta) / C); W_cubic(K) = W_max.
    #[test]
    fn k_and_plateau() {
        let k = Cubic::k_for(100.0);
        assert!((k - 75f64.cbrt()).abs() < 1e-9);
        let mut c = Cubic::new(100 * MSS, MSS);
        c.on_congestion_event(Instant::ZERO, 0, MSS);
        assert!((c.w_cubic(c.k()) - c.w_max()).abs() < 1e-9);
        assert!((c.w_max() - 100.0).abs() < 1e-9);
    }

    // RFC 8312 §4.5: multiplicative decrease by beta = 0.7.
    #[test]
    fn decrease_by_beta() {
        let mut c = Cubic::new(100 * MSS, MSS);
        c.on_congestion_event(Instant::ZERO, 0, MSS);
        assert_eq!(c.cwnd(), 70 * MSS);
        assert_eq!(c.ssthresh(), 70 * MSS);
    }

    // RFC 8312 §4.6: fast convergence lowers W_max when the window shrank since the last loss.
    #[test]
    fn fast_convergence() {
        let mut c = Cubic::new(100 * MSS, MSS);
        c.on_congestion_event(Instant::ZERO, 0, MSS); // w_last_max = 100, cwnd = 70
        c.on_congestion_event(Instant::ZERO, 0, MSS); // 70 < 100: W_max = 70 * 1.7 / 2
        assert!((c.w_max() - 59.5).abs() < 1e-9);
    }

    /// Run `2 K` of ACK clocking at `rtt` after a loss at W = 100; return (cwnd at K, end).
    fn run_epoch(rtt: Duration) -> (f64, usize) {
        let mut c = Cubic::new(100 * MSS, MSS);
        c.on_congestion_event(Instant::ZERO, 0, MSS);
        let mut now = Instant::ZERO;
        let k_us = (c.k() * 1e6) as u64;
        let mut at_k = 0;
        while now.as_micros() < 2 * k_us {
            now = now + rtt;
            let acks = c.cwnd() / MSS;
            for _ in 0..acks {
                c.on_ack(now, MSS, Some(rtt), MSS);
            }
            if at_k == 0 && now.as_micros() >= k_us {
                at_k = c.cwnd();
            }
        }
        (at_k as f64 / MSS as f64, c.cwnd())
    }

    // RFC 8312 §4.3-4.4: with a long RTT the cubic function governs: the window climbs back
    // toward W_max (concave), plateaus near it at t = K, then grows beyond it (convex).
    #[test]
    fn concave_then_convex_growth() {
        let (k_window, end) = run_epoch(Duration::from_millis(100));
        assert!((k_window - 100.0).abs() < 5.0, "window at K = {k_window}");
        assert!(end > 120 * MSS, "convex region grows past W_max: {end}");
    }

    // RFC 8312 §4.2: with a short RTT the Reno-friendly estimate W_est exceeds W_cubic and
    // sets the window: W_est(K) = 0.7 W_max + 3 (1 - 0.7) / 1.7 * K / RTT.
    #[test]
    fn tcp_friendly_region_with_short_rtt() {
        let rtt = Duration::from_millis(10);
        let (k_window, _) = run_epoch(rtt);
        let k = Cubic::k_for(100.0);
        let w_est = 70.0 + 3.0 * 0.3 / 1.7 * (k / rtt.as_secs_f64());
        assert!(
            (k_window - w_est).abs() / w_est < 0.05,
            "{k_window} vs W_est {w_est}"
        );
    }

    // RFC 8312 §4.7: timeout sets cwnd to one segment.
    #[test]
    fn rto_one_segment() {
        let mut c = Cubic::new(100 * MSS, MSS);
        c.on_rto(Instant::ZERO, 0, MSS);
        assert_eq!(c.cwnd(), MSS);
        assert_eq!(c.ssthresh(), 70 * MSS);
    }
}
