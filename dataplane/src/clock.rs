//! The data plane's clock. One time type, [`tcp::Instant`] (nanoseconds), runs from the poll
//! loop through TCP and iWARP to the applications, so nothing converts between clocks.

use std::sync::OnceLock;
use std::time::Duration;

pub use tcp::Instant;

static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();

/// The current time: nanoseconds of the monotonic clock since the process first asked.
pub fn now() -> Instant {
    let epoch = *EPOCH.get_or_init(std::time::Instant::now);
    Instant::from_nanos(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
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
