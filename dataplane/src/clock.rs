//! The data plane's clock. One time type, [`tcp::Instant`] (nanoseconds), runs from the poll
//! loop through TCP and iWARP to the applications, so nothing converts between clocks.

use std::sync::OnceLock;
use std::time::Duration;

pub use tcp::Instant;

static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();

/// The current time: nanoseconds of the monotonic clock since the process first asked.
pub fn now() -> Instant {
    let since = EPOCH.get_or_init(std::time::Instant::now).elapsed();
    // Seconds and nanoseconds apart: no 128-bit arithmetic on every poll iteration.
    Instant::from_nanos(
        since
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(since.subsec_nanos())),
    )
}

/// Time passed since `earlier`.
pub fn elapsed(earlier: Instant) -> Duration {
    now().saturating_since(earlier)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_measures_sleeps() {
        let a = now();
        std::thread::sleep(Duration::from_millis(2));
        let b = now();
        assert!(b > a);
        assert!(b - a >= Duration::from_millis(2));
        assert!(elapsed(a) >= b - a);
    }
}
