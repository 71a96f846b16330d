//! The data plane's clock. One time type, [`tcp::Instant`] (nanoseconds), runs from the poll
//! loop through TCP and iWARP to the applications, so nothing converts between clocks.
//!
//! The poll loops read it once per iteration and hand that time down, so a read has to be
//! cheap: where the kernel itself keeps `CLOCK_MONOTONIC` on an invariant time-stamp counter
//! (x86-64, `current_clocksource` = `tsc`), the clock reads the TSC (one `rdtsc`, a multiply
//! and a shift) at a rate calibrated against the monotonic clock on first use; elsewhere it
//! reads the monotonic clock (`clock_gettime` through the vDSO). The TSC's rate is not slewed
//! by NTP as `CLOCK_MONOTONIC` is: the two drift apart by the calibration's error (about
//! 10 ppm) plus the slew, which no timer here notices.

use std::sync::OnceLock;
use std::time::Duration;

pub use tcp::Instant;

/// How long the TSC is counted against the monotonic clock, once per process.
const CALIBRATION: Duration = Duration::from_millis(10);

static CLOCK: OnceLock<Clock> = OnceLock::new();

/// The process's clock: where it counts from and what it reads.
struct Clock {
    epoch: std::time::Instant,
    tsc: Option<TscScale>,
}

/// Nanoseconds from TSC ticks: `ns0 + (ticks - tsc0) * ns_per_tick` (32.32 fixed point,
/// rounded to the nearest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TscScale {
    tsc0: u64,
    ns0: u64,
    ns_per_tick_q32: u64,
}

impl TscScale {
    /// The scale through two (ticks, nanoseconds) readings; `None` when they do not make one.
    fn through(a: (u64, u64), b: (u64, u64)) -> Option<TscScale> {
        let ticks = b.0.checked_sub(a.0).filter(|&t| t > 0)?;
        let ns = b.1.checked_sub(a.1).filter(|&n| n > 0)?;
        let q32 = ((u128::from(ns) << 32) + u128::from(ticks / 2)) / u128::from(ticks);
        Some(TscScale {
            tsc0: a.0,
            ns0: a.1,
            ns_per_tick_q32: u64::try_from(q32).ok().filter(|&q| q > 0)?,
        })
    }

    /// Nanoseconds at `ticks` (a counter read before `tsc0`, on a core whose TSC lags by a
    /// few cycles, reads as `ns0`).
    #[inline]
    fn nanos(&self, ticks: u64) -> u64 {
        let d = ticks.saturating_sub(self.tsc0);
        // One 64×64→128 multiply (cheaper than splitting the product), rounded.
        let ns = (u128::from(d) * u128::from(self.ns_per_tick_q32) + (1 << 31)) >> 32;
        self.ns0
            .saturating_add(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

impl Clock {
    fn new() -> Clock {
        let epoch = std::time::Instant::now();
        let tsc = if tsc::usable() {
            let a = tsc::reading(epoch);
            std::thread::sleep(CALIBRATION);
            let b = tsc::reading(epoch);
            TscScale::through(a, b)
        } else {
            None
        };
        log::debug!(
            "clock: {}",
            match &tsc {
                Some(s) => format!(
                    "TSC at {:.3} MHz",
                    (1u128 << 32) as f64 / s.ns_per_tick_q32 as f64 * 1e3
                ),
                None => "the monotonic clock (no invariant TSC the kernel keeps time on)".into(),
            }
        );
        Clock { epoch, tsc }
    }
}

/// Nanoseconds of the monotonic clock since `epoch`.
fn monotonic_nanos(epoch: std::time::Instant) -> u64 {
    let since = epoch.elapsed();
    // Seconds and nanoseconds apart: no 128-bit arithmetic.
    since
        .as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(since.subsec_nanos()))
}

/// The current time: nanoseconds since the process first asked.
#[inline]
pub fn now() -> Instant {
    let c = CLOCK.get_or_init(Clock::new);
    Instant::from_nanos(match &c.tsc {
        Some(s) => s.nanos(tsc::ticks()),
        None => monotonic_nanos(c.epoch),
    })
}

/// Whether [`now`] reads the TSC (rather than the monotonic clock).
pub fn reads_tsc() -> bool {
    CLOCK.get_or_init(Clock::new).tsc.is_some()
}

/// Time passed since `earlier`.
pub fn elapsed(earlier: Instant) -> Duration {
    now().saturating_since(earlier)
}

/// The TSC where it is read through the DPDK layer (x86-64 with the `dpdk` feature).
#[cfg(all(target_arch = "x86_64", feature = "dpdk"))]
mod tsc {
    use std::arch::x86_64::__cpuid;

    /// The time-stamp counter.
    #[inline]
    pub(super) fn ticks() -> u64 {
        crate::dpdk::rdtsc()
    }

    /// Whether the TSC runs at one rate in every power state (CPUID 8000_0007h EDX bit 8)
    /// and the kernel keeps the monotonic clock on it (so it found it synchronised across
    /// CPUs and stable).
    pub(super) fn usable() -> bool {
        let invariant =
            __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0;
        invariant
            && std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|s| s.trim() == "tsc")
    }

    /// One (ticks, nanoseconds since `epoch`) pair read close together: of five tries, the
    /// one with the fewest ticks around the monotonic clock's read (an interrupt or a
    /// preemption in between spoils a try), the ticks taken in the middle.
    pub(super) fn reading(epoch: std::time::Instant) -> (u64, u64) {
        (0..5)
            .map(|_| {
                let t0 = ticks();
                let ns = super::monotonic_nanos(epoch);
                let t1 = ticks();
                (t1.wrapping_sub(t0), t0 + t1.wrapping_sub(t0) / 2, ns)
            })
            .min_by_key(|&(spread, _, _)| spread)
            .map(|(_, t, ns)| (t, ns))
            .unwrap_or((ticks(), super::monotonic_nanos(epoch)))
    }
}

/// No TSC path: the monotonic clock only.
#[cfg(not(all(target_arch = "x86_64", feature = "dpdk")))]
mod tsc {
    pub(super) fn ticks() -> u64 {
        0
    }
    pub(super) fn usable() -> bool {
        false
    }
    pub(super) fn reading(_: std::time::Instant) -> (u64, u64) {
        (0, 0)
    }
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

    /// Successive reads never go back, on several threads at once (the TSC path reads each
    /// core's counter).
    #[test]
    fn never_goes_back() {
        let threads: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(|| {
                    let mut last = now();
                    for _ in 0..200_000 {
                        let t = now();
                        assert!(t >= last, "{t:?} after {last:?}");
                        last = t;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    /// Over a sleep the clock advances as `CLOCK_MONOTONIC` does: within 0.5 % and 200 µs
    /// (the two reads of each pair are taken back to back; a preemption between them spoils
    /// a try, so the closest of three tries counts).
    #[test]
    fn agrees_with_the_monotonic_clock_over_a_sleep() {
        let sleep = Duration::from_millis(60);
        let diff = (0..3)
            .map(|_| {
                let (m0, c0) = (std::time::Instant::now(), now());
                std::thread::sleep(sleep);
                let (m1, c1) = (std::time::Instant::now(), now());
                let mono = (m1 - m0).as_nanos() as i128;
                let ours = (c1 - c0).as_nanos() as i128;
                assert!(mono >= sleep.as_nanos() as i128);
                (ours - mono).abs()
            })
            .min()
            .unwrap();
        let bound = 200_000 + sleep.as_nanos() as i128 / 200;
        assert!(
            diff <= bound,
            "{diff} ns apart over {sleep:?} (bound {bound} ns)"
        );
        println!(
            "reads the TSC: {}; {diff} ns apart over {sleep:?}",
            reads_tsc()
        );
    }

    #[test]
    fn tsc_scale_converts_ticks_to_nanoseconds() {
        // 2.5 GHz: 25,000,000 ticks in 10 ms.
        let s = TscScale::through((1_000, 500), (25_001_000, 10_000_500)).unwrap();
        assert_eq!(s.nanos(1_000), 500);
        assert_eq!(s.nanos(2_501_000), 1_000_500);
        // An hour later, within a microsecond (the 32.32 rate's rounding).
        let hour = s.nanos(1_000 + 2_500_000_000 * 3_600) - 500;
        assert!(hour.abs_diff(3_600_000_000_000) < 1_000, "{hour}");
        // A counter behind `tsc0` (another core's, by a few cycles) reads as the start.
        assert_eq!(s.nanos(900), 500);
    }

    #[test]
    fn tsc_scale_refuses_readings_that_make_none() {
        assert_eq!(TscScale::through((10, 10), (10, 20)), None);
        assert_eq!(TscScale::through((10, 10), (20, 10)), None);
        assert_eq!(TscScale::through((20, 10), (10, 20)), None);
    }
}
