//! Retransmission timeout computation per RFC 6298, with microsecond RTT samples.

use core::time::Duration;

/// RFC 6298 smoothed RTT estimator and RTO with exponential backoff.
#[derive(Clone, Debug)]
pub struct RttEstimator {
    srtt_us: Option<u64>,
    rttvar_us: u64,
    rto_us: u64,
    min_us: u64,
    max_us: u64,
    backoff: u32,
}

/// Clock granularity G of RFC 6298 §2: one microsecond.
const GRANULARITY_US: u64 = 1;

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl RttEstimator {
    /// An estimator with no samples yet: RTO = `initial` (RFC 6298 §2.1), bounded by
    /// `[min, max]`.
    pub fn new(initial: Duration, min: Duration, max: Duration) -> Self {
        RttEstimator {
            srtt_us: None,
            rttvar_us: 0,
            rto_us: us(initial).clamp(us(min), us(max)),
            min_us: us(min),
            max_us: us(max),
            backoff: 0,
        }
    }

    /// Feed one RTT measurement (RFC 6298 §2.2 and §2.3, alpha = 1/8, beta = 1/4).
    pub fn sample(&mut self, rtt: Duration) {
        self.sample_micros(us(rtt));
    }

    /// [`sample`](Self::sample) of an RTT in whole microseconds.
    pub fn sample_micros(&mut self, rtt_us: u64) {
        let r = rtt_us.max(1);
        match self.srtt_us {
            None => {
                self.srtt_us = Some(r);
                self.rttvar_us = r / 2;
            }
            Some(srtt) => {
                let delta = srtt.abs_diff(r);
                self.rttvar_us = (3 * self.rttvar_us + delta) / 4;
                self.srtt_us = Some((7 * srtt + r) / 8);
            }
        }
        let srtt = self.srtt_us.unwrap_or(r);
        self.rto_us =
            (srtt + (4 * self.rttvar_us).max(GRANULARITY_US)).clamp(self.min_us, self.max_us);
        self.backoff = 0;
    }

    /// Double the timer after a retransmission timeout (RFC 6298 §5.5).
    pub fn backoff(&mut self) {
        self.backoff = (self.backoff + 1).min(30);
    }

    /// Forget the backoff after new data is acknowledged.
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// The current RTO including backoff, at most the configured maximum.
    pub fn rto(&self) -> Duration {
        Duration::from_micros(self.rto_micros())
    }

    /// [`rto`](Self::rto) in microseconds.
    pub fn rto_micros(&self) -> u64 {
        let v = self.rto_us.saturating_mul(1u64 << self.backoff.min(30));
        v.min(self.max_us)
    }

    /// The smoothed RTT, if any sample was taken.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt_us.map(Duration::from_micros)
    }

    /// The smoothed RTT in microseconds, if any sample was taken (no `Duration` on the
    /// per-segment path).
    pub fn srtt_micros(&self) -> Option<u64> {
        self.srtt_us
    }

    /// The RTT variation estimate.
    pub fn rttvar(&self) -> Duration {
        Duration::from_micros(self.rttvar_us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est() -> RttEstimator {
        RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(5),
            Duration::from_secs(60),
        )
    }

    // RFC 6298 §2.2/§2.3 and §5.5: the microsecond forms (per-ACK path) give what the
    // `Duration` ones do, backoff and clamping included.
    #[test]
    fn micros_forms_match_durations() {
        let (mut a, mut b) = (est(), est());
        for r in [0u64, 999, 10_000, 7_000, 90_000_000, 3] {
            a.sample(Duration::from_nanos(r * 1_000 + 999));
            b.sample_micros(r);
            assert_eq!(
                (a.srtt(), a.rttvar(), a.rto()),
                (b.srtt(), b.rttvar(), b.rto())
            );
            assert_eq!(Duration::from_micros(b.rto_micros()), b.rto());
        }
        for _ in 0..40 {
            b.backoff();
            assert_eq!(Duration::from_micros(b.rto_micros()), b.rto());
        }
        assert_eq!(b.rto(), Duration::from_secs(60), "clamped to the maximum");
    }

    // RFC 6298 §2.1: before any sample RTO is the initial value.
    #[test]
    fn initial_rto() {
        assert_eq!(est().rto(), Duration::from_secs(1));
    }

    // RFC 6298 §2.2: first sample R gives SRTT = R, RTTVAR = R/2, RTO = SRTT + 4 RTTVAR.
    #[test]
    fn first_sample() {
        let mut e = est();
        e.sample(Duration::from_micros(10_000));
        assert_eq!(e.srtt(), Some(Duration::from_micros(10_000)));
        assert_eq!(e.rttvar(), Duration::from_micros(5_000));
        assert_eq!(e.rto(), Duration::from_micros(30_000));
    }

    // RFC 6298 §2.3: later samples use alpha 1/8, beta 1/4; §2.4: RTO rounded up to the minimum.
    #[test]
    fn later_samples_and_minimum() {
        let mut e = est();
        e.sample(Duration::from_micros(100));
        e.sample(Duration::from_micros(200));
        // RTTVAR = 3/4*50 + 1/4*100 = 62, SRTT = (7*100 + 200)/8 = 112.
        assert_eq!(e.srtt(), Some(Duration::from_micros(112)));
        assert_eq!(e.rttvar(), Duration::from_micros(62));
        assert_eq!(e.rto(), Duration::from_millis(5));
    }

    // RFC 6298 §5.5: back off the timer, bounded by the maximum (§2.5).
    #[test]
    fn backoff_doubles_and_caps() {
        let mut e = est();
        e.backoff();
        assert_eq!(e.rto(), Duration::from_secs(2));
        for _ in 0..10 {
            e.backoff();
        }
        assert_eq!(e.rto(), Duration::from_secs(60));
        e.reset_backoff();
        assert_eq!(e.rto(), Duration::from_secs(1));
    }
}
