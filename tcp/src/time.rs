//! Engine time: a monotonic instant in nanoseconds, supplied by the caller.
//!
//! The engine never reads a clock; every entry point takes the current [`Instant`]. The same
//! type carries time from the data plane's poll loop through TCP to the iWARP connections and
//! the applications, so nothing converts between clocks on the way.

use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since an arbitrary epoch chosen by the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// An instant `ns` nanoseconds after the epoch.
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }

    /// An instant `us` microseconds after the epoch.
    pub const fn from_micros(us: u64) -> Self {
        Instant(us.saturating_mul(1_000))
    }

    /// An instant `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Microseconds since the epoch (truncated).
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    /// Milliseconds since the epoch (truncated).
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Whole microseconds elapsed from `earlier` to `self`, zero if `earlier` is later
    /// (`saturating_since` without a `Duration`, for the per-ACK path).
    pub const fn micros_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0) / 1_000
    }

    /// `self` plus `us` microseconds, saturating at the end of the clock (`self + d`
    /// without a `Duration`, for the per-ACK path).
    pub const fn saturating_add_micros(self, us: u64) -> Instant {
        Instant(self.0.saturating_add(us.saturating_mul(1_000)))
    }

    /// The earlier of two optional deadlines (`None` when both are). Pairwise on purpose:
    /// poll loops ask for their next deadline after every segment, and folding an array of
    /// options compiles to far more code.
    pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// `self + d`, or `None` past the end of the clock.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let ns = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(ns).map(Instant)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        let ns = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(ns))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        let ns = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_sub(ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The microsecond forms the per-ACK path uses agree with the `Duration` ones,
    // truncation and saturation included.
    #[test]
    fn micros_forms_match_durations() {
        let sent = Instant::from_nanos(1_234_567);
        for now in [0, 1_234_567, 1_235_566, 1_235_567, 9_999_999_999, u64::MAX] {
            let now = Instant::from_nanos(now);
            let d = now.saturating_since(sent);
            assert_eq!(now.micros_since(sent), d.as_micros() as u64);
        }
        for us in [0, 1, 200_000, 60_000_000, u64::MAX / 1_000 + 1, u64::MAX] {
            for at in [Instant::ZERO, sent, Instant::from_nanos(u64::MAX - 5)] {
                assert_eq!(
                    at.saturating_add_micros(us),
                    at + Duration::from_micros(us),
                    "{at:?} + {us} us"
                );
            }
        }
    }

    #[test]
    fn units_convert_and_saturate() {
        let t = Instant::from_micros(1_500);
        assert_eq!(t.as_nanos(), 1_500_000);
        assert_eq!(t.as_millis(), 1);
        assert_eq!(t + Duration::from_nanos(7) - t, Duration::from_nanos(7));
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(
            Instant::from_nanos(u64::MAX) + Duration::from_secs(1),
            Instant::from_nanos(u64::MAX)
        );
        assert_eq!(
            Instant::from_nanos(u64::MAX).checked_add(Duration::from_nanos(1)),
            None
        );
        assert_eq!(t - Duration::from_secs(1), Instant::ZERO);
        let (a, b) = (Some(Instant::from_nanos(5)), Some(Instant::from_nanos(3)));
        assert_eq!(Instant::earliest(a, b), b);
        assert_eq!(Instant::earliest(a, None), a);
        assert_eq!(Instant::earliest(None, None), None);
    }
}
