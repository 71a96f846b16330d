//! Receiver-side SACK block selection (RFC 2018 §4): the first block holds the most
//! recently received segment, then the most recently reported other blocks.

use std::collections::VecDeque;

use crate::rx::Reassembly;

/// How many recent arrivals to remember.
const RECENT: usize = 4;

/// Tracks recent out-of-order arrivals to order SACK blocks.
#[derive(Debug, Default)]
pub(crate) struct SackReporter {
    recent: VecDeque<u64>,
}

impl SackReporter {
    /// An out-of-order segment starting at stream offset `off` arrived.
    pub(crate) fn record(&mut self, off: u64) {
        self.recent.retain(|&o| o != off);
        self.recent.push_front(off);
        self.recent.truncate(RECENT);
    }

    /// Up to `max` blocks as stream-offset ranges, most recent first (RFC 2018 §4).
    pub(crate) fn blocks(&self, rx: &Reassembly, max: usize) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(max);
        for &off in &self.recent {
            if out.len() == max {
                return out;
            }
            if let Some(r) = rx.range_containing(off) {
                if !out.contains(&r) {
                    out.push(r);
                }
            }
        }
        for r in rx.ranges().rev() {
            if out.len() == max {
                break;
            }
            if !out.contains(&r) {
                out.push(r);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 2018 §4: the first SACK block reports the most recently received segment.
    #[test]
    fn most_recent_first() {
        let mut rx = Reassembly::default();
        let mut s = SackReporter::default();
        for (a, b) in [(100u64, 200u64), (300, 400), (500, 600), (700, 800)] {
            rx.insert(a, b);
        }
        s.record(300);
        s.record(700);
        let b = s.blocks(&rx, 3);
        assert_eq!(b, vec![(700, 800), (300, 400), (500, 600)]);
    }
}
