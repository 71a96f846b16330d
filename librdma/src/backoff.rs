//! How the data-plane thread waits when an iteration found nothing to do.
//!
//! It spins a while (a reply to what was just sent is usually that close), then naps for
//! 20 µs per idle iteration (200 µs after 20 ms of silence); work queued by an application
//! thread wakes it at once. How long it spins depends on the traffic: while frames stream
//! (bandwidth tests, bulk transfers: more than [`STREAM_FRAMES_PER_MS`] in the last
//! millisecond) a gap is almost always the next frame a few microseconds away, so it spins
//! [`STREAM_SPIN`]; in request/response traffic a gap is the peer's turn, and on a machine
//! with fewer cores than spinning threads (perftest's latency tests spin on memory) the
//! application's thread needs the core, so it spins only the configured quiet spin (none
//! below four CPUs). A thread that naps is scheduled as soon as it wakes, ahead of threads
//! spinning on the same core, which keeps latency in microseconds rather than scheduler
//! slices.

use std::time::Duration;

use dataplane::clock::Instant;

/// Frames in one millisecond above which the traffic counts as streaming (300,000 frames
/// a second: a 64 KiB write bandwidth test moves over a million; a latency test about
/// 70,000).
pub const STREAM_FRAMES_PER_MS: u64 = 300;

/// How long the thread spins before it naps while frames stream.
pub const STREAM_SPIN: Duration = Duration::from_micros(30);

/// The window over which frames are counted.
const WINDOW: Duration = Duration::from_millis(1);

/// Silence after which naps grow from 20 µs to 200 µs.
const LONG_SILENCE: Duration = Duration::from_millis(20);

/// What the thread does after an idle iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Poll again at once.
    Spin,
    /// Sleep this long unless woken.
    Nap(Duration),
}

/// The data-plane thread's idle policy (see the module documentation).
#[derive(Debug)]
pub struct Backoff {
    quiet_spin: Duration,
    idle_since: Instant,
    window_start: Instant,
    window_frames: u64,
    streaming: bool,
}

impl Backoff {
    /// A policy that spins `quiet_spin` between requests and responses.
    pub fn new(now: Instant, quiet_spin: Duration) -> Backoff {
        Backoff {
            quiet_spin,
            idle_since: now,
            window_start: now,
            window_frames: 0,
            streaming: false,
        }
    }

    /// Records an iteration at `now` that handled `frames` frames; `busy` when it did
    /// anything at all (frames, work from applications).
    pub fn record(&mut self, now: Instant, frames: usize, busy: bool) {
        if busy {
            self.idle_since = now;
        }
        self.window_frames += frames as u64;
        if now.saturating_since(self.window_start) >= WINDOW {
            self.streaming = self.window_frames > STREAM_FRAMES_PER_MS;
            self.window_start = now;
            self.window_frames = 0;
        }
    }

    /// Whether the last full window counted as streaming.
    pub fn streaming(&self) -> bool {
        self.streaming
    }

    /// What to do after an idle iteration at `now`.
    pub fn wait(&self, now: Instant) -> Wait {
        let quiet = now.saturating_since(self.idle_since);
        let spin = if self.streaming {
            self.quiet_spin.max(STREAM_SPIN)
        } else {
            self.quiet_spin
        };
        if quiet < spin {
            Wait::Spin
        } else if quiet < LONG_SILENCE {
            Wait::Nap(Duration::from_micros(20))
        } else {
            Wait::Nap(Duration::from_micros(200))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn request_response_traffic_naps_at_once_without_a_quiet_spin() {
        let t0 = Instant::ZERO;
        let mut b = Backoff::new(t0, Duration::ZERO);
        // A latency test: two frames every 30 µs, 66 a millisecond.
        let mut t = t0;
        for _ in 0..200 {
            t = t + 30 * US;
            b.record(t, 2, true);
        }
        assert!(!b.streaming());
        assert_eq!(b.wait(t + US), Wait::Nap(20 * US));
    }

    #[test]
    fn streaming_traffic_spins_before_it_naps_then_calms_down() {
        let t0 = Instant::ZERO;
        let mut b = Backoff::new(t0, Duration::ZERO);
        // A bandwidth test: 32 frames every 20 µs, 1,600 a millisecond.
        let mut t = t0;
        for _ in 0..200 {
            t = t + 20 * US;
            b.record(t, 32, true);
        }
        assert!(b.streaming());
        assert_eq!(b.wait(t + 5 * US), Wait::Spin);
        assert_eq!(b.wait(t + 29 * US), Wait::Spin);
        assert_eq!(b.wait(t + 31 * US), Wait::Nap(20 * US));
        // A millisecond with few frames ends the streaming.
        t = t + 2000 * US;
        b.record(t, 1, true);
        assert!(!b.streaming());
        assert_eq!(b.wait(t + 5 * US), Wait::Nap(20 * US));
        assert_eq!(
            b.wait(t + LONG_SILENCE + US),
            Wait::Nap(Duration::from_micros(200))
        );
    }

    #[test]
    fn a_configured_quiet_spin_applies_to_all_traffic() {
        let b = Backoff::new(Instant::ZERO, 50 * US);
        assert_eq!(b.wait(Instant::ZERO + 40 * US), Wait::Spin);
        assert_eq!(b.wait(Instant::ZERO + 60 * US), Wait::Nap(20 * US));
    }
}
