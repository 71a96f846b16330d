//! Receiver-side SACK block selection (RFC 2018 §4): the first block holds the most
//! recently received segment, then the most recently reported other blocks.

use std::collections::VecDeque;

use crate::rx::Reassembly;

/// How many recent arrivals to remember.
const RECENT: usize = 4;
/// The most SACK blocks reported: what a segment with timestamps has room for (RFC 2018
/// §3).
pub(crate) const MAX_BLOCKS: usize = 3;

/// Up to [`MAX_BLOCKS`] SACK blocks as stream-offset ranges, in a fixed array (no
/// allocation per ACK).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SackBlocks {
    blocks: [(u64, u64); MAX_BLOCKS],
    len: usize,
}

impl SackBlocks {
    /// The blocks, most recent first.
    pub(crate) fn as_slice(&self) -> &[(u64, u64)] {
        &self.blocks[..self.len]
    }

    /// Adds `r` unless already present; `false` when full.
    fn add(&mut self, r: (u64, u64)) -> bool {
        if self.as_slice().contains(&r) {
            return true;
        }
        if self.len == MAX_BLOCKS {
            return false;
        }
        self.blocks[self.len] = r;
        self.len += 1;
        true
    }
}

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

    /// Up to [`MAX_BLOCKS`] blocks as stream-offset ranges, most recent first (RFC 2018 §4).
    pub(crate) fn blocks(&self, rx: &Reassembly) -> SackBlocks {
        let mut out = SackBlocks::default();
        let recent = self
            .recent
            .iter()
            .filter_map(|&off| rx.range_containing(off));
        for r in recent.chain(rx.ranges().rev()) {
            if !out.add(r) {
                break;
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
        let b = s.blocks(&rx);
        assert_eq!(b.as_slice(), &[(700, 800), (300, 400), (500, 600)]);
    }
}
