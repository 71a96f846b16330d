//! An in-process link: two port ends joined by bounded lock-free rings.
//!
//! What one end transmits the other end receives, in order, without copying (the frame
//! buffer moves through the ring). Each direction is a single-producer single-consumer ring
//! of fixed size; a transmit into a full ring is refused and counted. Both ends share one
//! buffer free list, so a steady flow does not allocate. The ends are `Send` and may be
//! driven by different threads.

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use super::api::{rx_one_by_one, tx_one_by_one, Offered, PacketBuf, Port, PortInfo, PortStats};
use super::heap::{BufPool, HeapBuf};
use crate::frame::MAX_L2_HLEN;

/// Layer-2 header length added to the IP MTU to get the largest frame: Ethernet with an
/// 802.1Q tag, as on a real link.
const ETH_HEADER_LEN: usize = MAX_L2_HLEN;

/// One end of a software link pair.
#[derive(Debug)]
pub struct SoftPort {
    info: PortInfo,
    rx: Arc<ArrayQueue<HeapBuf>>,
    tx: Arc<ArrayQueue<HeapBuf>>,
    pool: Arc<BufPool>,
    stats: PortStats,
}

/// Creates a linked pair of ports; `ring_size` frames fit in flight per direction.
pub fn soft_pair(a: PortInfo, b: PortInfo, ring_size: usize) -> (SoftPort, SoftPort) {
    let ring_size = ring_size.max(1);
    let a_to_b = Arc::new(ArrayQueue::new(ring_size));
    let b_to_a = Arc::new(ArrayQueue::new(ring_size));
    let frame_len = a.mtu.max(b.mtu) + ETH_HEADER_LEN;
    let pool = BufPool::new(ring_size * 2 + 64, frame_len);
    let end_a = SoftPort {
        info: a,
        rx: Arc::clone(&b_to_a),
        tx: Arc::clone(&a_to_b),
        pool: Arc::clone(&pool),
        stats: PortStats::default(),
    };
    let end_b = SoftPort {
        info: b,
        rx: a_to_b,
        tx: b_to_a,
        pool,
        stats: PortStats::default(),
    };
    (end_a, end_b)
}

/// A linked pair for tests: ends `a` and `b` with MACs 02:00:00:00:00:01 and :02, MTU 1500.
#[cfg(test)]
pub(crate) fn test_pair(ring_size: usize) -> (SoftPort, SoftPort) {
    let info = |name: &str, last| PortInfo {
        name: name.into(),
        mac: [2, 0, 0, 0, 0, last],
        mtu: 1500,
    };
    soft_pair(info("a", 1), info("b", 2), ring_size)
}

impl SoftPort {
    /// Frames waiting in this end's receive ring.
    pub fn rx_pending(&self) -> usize {
        self.rx.len()
    }
}

impl Port for SoftPort {
    type Buf = HeapBuf;

    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn rx_burst(&mut self, out: &mut Vec<HeapBuf>, max: usize) -> usize {
        rx_one_by_one(out, max, &mut self.stats, |_| self.rx.pop())
    }

    fn alloc_tx(&mut self, len: usize) -> Option<HeapBuf> {
        Some(self.pool.take(len))
    }

    fn tx_burst(&mut self, bufs: &mut Vec<HeapBuf>) -> usize {
        let max_frame = self.info.mtu + ETH_HEADER_LEN;
        tx_one_by_one(bufs, &mut self.stats, |buf| {
            if buf.len() > max_frame {
                // Oversized for the link: dropped, like a NIC would refuse it.
                return Offered::Dropped;
            }
            let frame = std::mem::replace(buf, HeapBuf::unpooled(Vec::new()));
            match self.tx.push(frame) {
                Ok(()) => Offered::Sent,
                Err(frame) => {
                    *buf = frame;
                    Offered::Full
                }
            }
        })
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::api::PacketBuf;

    fn frame(port: &mut SoftPort, tag: u8, len: usize) -> HeapBuf {
        let mut b = port.alloc_tx(len).unwrap();
        b.as_mut().fill(tag);
        b
    }

    #[test]
    fn frames_cross_in_order_both_ways() {
        let (mut a, mut b) = test_pair(16);
        let mut bufs: Vec<_> = (0..5).map(|i| frame(&mut a, i, 60 + i as usize)).collect();
        assert_eq!(a.tx_burst(&mut bufs), 5);
        assert!(bufs.is_empty());
        let mut got = Vec::new();
        assert_eq!(b.rx_burst(&mut got, 3), 3);
        assert_eq!(b.rx_burst(&mut got, 32), 2);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(f.len(), 60 + i);
            assert!(f.as_ref().iter().all(|&x| x == i as u8));
        }
        let mut back = vec![frame(&mut b, 9, 64)];
        assert_eq!(b.tx_burst(&mut back), 1);
        let mut got_a = Vec::new();
        assert_eq!(a.rx_burst(&mut got_a, 8), 1);
        assert_eq!(got_a[0].as_ref()[0], 9);
        assert_eq!(a.stats().tx_packets, 5);
        assert_eq!(a.stats().rx_packets, 1);
        assert_eq!(b.stats().rx_bytes, (60..65).sum::<usize>() as u64);
    }

    #[test]
    fn full_ring_refuses_and_counts() {
        let (mut a, mut b) = test_pair(4);
        let mut bufs: Vec<_> = (0..6).map(|i| frame(&mut a, i, 64)).collect();
        assert_eq!(a.tx_burst(&mut bufs), 4);
        assert_eq!(bufs.len(), 2, "refused frames stay with the caller");
        assert_eq!(
            bufs[0].as_ref()[0],
            4,
            "the first refused frame is the fifth"
        );
        assert_eq!(a.stats().tx_dropped, 2);
        let mut got = Vec::new();
        assert_eq!(b.rx_burst(&mut got, 32), 4);
        assert_eq!(b.rx_pending(), 0);
    }

    // The largest frame is the MTU plus an Ethernet header with an 802.1Q tag (1518 octets
    // at MTU 1500, FCS excluded); one octet more is dropped.
    #[test]
    fn oversized_frames_are_dropped() {
        let (mut a, mut b) = test_pair(4);
        let mut bufs = vec![frame(&mut a, 1, 1519), frame(&mut a, 2, 1518)];
        assert_eq!(a.tx_burst(&mut bufs), 1);
        assert!(bufs.is_empty());
        assert_eq!(a.stats().tx_dropped, 1);
        let mut got = Vec::new();
        assert_eq!(b.rx_burst(&mut got, 4), 1);
        assert_eq!(got[0].len(), 1518);
    }

    #[test]
    fn steady_state_reuses_buffers() {
        let (mut a, mut b) = test_pair(8);
        let mut seen = std::collections::HashSet::new();
        for round in 0..100u8 {
            let mut bufs = vec![frame(&mut a, round, 128)];
            seen.insert(bufs[0].as_ref().as_ptr() as usize);
            a.tx_burst(&mut bufs);
            let mut got = Vec::new();
            b.rx_burst(&mut got, 8);
            assert_eq!(got[0].as_ref()[0], round);
        }
        assert!(seen.len() <= 2, "{} distinct allocations", seen.len());
    }

    #[test]
    fn ends_work_across_threads() {
        let (mut a, mut b) = test_pair(64);
        const N: u32 = 10_000;
        let producer = std::thread::spawn(move || {
            let mut next = 0u32;
            let mut pending = Vec::new();
            while next < N || !pending.is_empty() {
                while pending.len() < 32 && next < N {
                    let mut f = a.alloc_tx(64).unwrap();
                    f.as_mut()[..4].copy_from_slice(&next.to_be_bytes());
                    pending.push(f);
                    next += 1;
                }
                a.tx_burst(&mut pending);
                std::thread::yield_now();
            }
        });
        let mut expect = 0u32;
        let mut got = Vec::new();
        while expect < N {
            got.clear();
            b.rx_burst(&mut got, 32);
            for f in &got {
                let seq = u32::from_be_bytes(f.as_ref()[..4].try_into().unwrap());
                assert_eq!(seq, expect);
                expect += 1;
            }
            std::thread::yield_now();
        }
        producer.join().unwrap();
        assert_eq!(b.stats().rx_packets, N as u64);
    }
}
