//! Byte-stream sockets for ordinary TCP applications of the data plane: the second
//! [`SegmentSink`] / [`SegmentSource`] pair on the same engine.
//!
//! The application writes bytes; the source keeps them in buffers of the `max_len` the
//! engine offers (the effective MSS when the window allows) and hands those over as units
//! without a copy; the engine gives each buffer back once acknowledged, for later writes.
//! The sink takes in-order segments directly (one copy, from the segment into the receive
//! ring) and leaves out-of-order ones to the engine's reassembly.

use std::collections::VecDeque;

use crate::rx::SegmentSink;
use crate::time::Instant;
use crate::tx::{SegmentSource, Unit};

/// Unit size assumed until the engine first asks for a unit: the effective MSS of IPv4 on
/// an Ethernet MTU with TCP timestamps (1500 - 20 - 20 - 12).
const DEFAULT_UNIT_LEN: usize = 1448;

/// The send buffer: written bytes kept in unit-sized buffers, so that a unit is handed to
/// the engine without a copy, and buffers the engine gives back once acknowledged
/// ([`SegmentSource::recycle`]) are written into again: no allocation per segment.
///
/// Writes are cut at unit boundaries (every `unit_len` bytes from the front, where the next
/// unit starts), `unit_len` being what the engine asks for (its effective send MSS). Buffers
/// that do not match (written before the engine first asked, or before a unit the window
/// cut short) are cut or topped up when taken, and the next write realigns.
#[derive(Debug, Clone)]
struct SendBuffer {
    queue: VecDeque<Vec<u8>>,
    len: usize,
    unit_len: usize,
    /// Whether `unit_len` comes from the engine (else it is [`DEFAULT_UNIT_LEN`]).
    learned: bool,
    spare: Vec<Vec<u8>>,
    max_spare: usize,
}

impl SendBuffer {
    fn new(capacity: usize) -> Self {
        SendBuffer {
            queue: VecDeque::new(),
            len: 0,
            unit_len: DEFAULT_UNIT_LEN,
            learned: false,
            spare: Vec::new(),
            max_spare: capacity.div_ceil(DEFAULT_UNIT_LEN),
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// An empty buffer: a recycled one or a new one of `unit_len` capacity.
    fn fresh(&mut self) -> Vec<u8> {
        match self.spare.pop() {
            Some(mut b) => {
                b.clear();
                b
            }
            None => Vec::with_capacity(self.unit_len),
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        // The next unit starts at the front: fill the last buffer up to a unit boundary
        // counted from there (which realigns the buffers after a unit of another length),
        // then whole units.
        if let Some(back) = self.queue.back_mut() {
            let to_boundary = (self.unit_len - self.len % self.unit_len) % self.unit_len;
            let n = to_boundary.min(bytes.len());
            back.extend_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
        }
        self.len += bytes.len();
        while !bytes.is_empty() {
            let n = self.unit_len.min(bytes.len());
            let mut b = self.fresh();
            b.extend_from_slice(&bytes[..n]);
            self.queue.push_back(b);
            bytes = &bytes[n..];
        }
    }

    /// The next unit of at most `max_len` bytes (all of them when fewer are buffered).
    fn take(&mut self, max_len: usize) -> Option<Vec<u8>> {
        if max_len == 0 || self.len == 0 {
            return None;
        }
        // The engine asks for its effective MSS whenever the window allows (the largest
        // length it asks for): cut the buffers written from now on to that size.
        if !self.learned || max_len > self.unit_len {
            self.unit_len = max_len;
            self.learned = true;
        }
        let mut unit = self.queue.pop_front()?;
        if unit.len() > max_len {
            // Keep the tail (the shorter part, as units are cut to `unit_len`) buffered.
            let mut tail = self.fresh();
            tail.extend_from_slice(&unit[max_len..]);
            unit.truncate(max_len);
            self.queue.push_front(tail);
        }
        while unit.len() < max_len {
            let Some(next) = self.queue.front_mut() else {
                break;
            };
            let n = (max_len - unit.len()).min(next.len());
            unit.extend_from_slice(&next[..n]);
            if n == next.len() {
                let emptied = self.queue.pop_front().expect("front exists");
                self.recycle(emptied);
            } else {
                next.drain(..n);
            }
        }
        self.len -= unit.len();
        Some(unit)
    }

    /// Keep `buffer` for later writes (up to a send buffer's worth of spares).
    fn recycle(&mut self, buffer: Vec<u8>) {
        if buffer.capacity() > 0 && self.spare.len() < self.max_spare {
            self.spare.push(buffer);
        }
    }
}

/// A buffered byte stream attached to one connection.
#[derive(Debug, Clone)]
pub struct StreamSocket {
    rx: VecDeque<u8>,
    rx_capacity: usize,
    tx: SendBuffer,
    tx_capacity: usize,
    received_total: u64,
}

impl StreamSocket {
    /// A socket with receive and send buffers of the given capacities.
    pub fn new(rx_capacity: usize, tx_capacity: usize) -> Self {
        StreamSocket {
            rx: VecDeque::new(),
            rx_capacity,
            tx: SendBuffer::new(tx_capacity),
            tx_capacity,
            received_total: 0,
        }
    }

    /// Queue bytes for sending; returns how many fit into the send buffer.
    pub fn write(&mut self, data: &[u8]) -> usize {
        let n = data
            .len()
            .min(self.tx_capacity.saturating_sub(self.tx.len()));
        self.tx.push(&data[..n]);
        n
    }

    /// Room left in the send buffer.
    pub fn send_capacity(&self) -> usize {
        self.tx_capacity.saturating_sub(self.tx.len())
    }

    /// Bytes written but not yet handed to the engine.
    pub fn send_queued(&self) -> usize {
        self.tx.len()
    }

    /// Read received in-order bytes into `buf`; returns how many.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let n = buf.len().min(self.rx.len());
        let (a, b) = self.rx.as_slices();
        let first = n.min(a.len());
        buf[..first].copy_from_slice(&a[..first]);
        buf[first..n].copy_from_slice(&b[..n - first]);
        self.rx.drain(..n);
        n
    }

    /// Take every received byte (two slice copies: draining the ring through an iterator
    /// moved one byte at a time and made a bulk receiver four times slower).
    pub fn read_all(&mut self) -> Vec<u8> {
        let (a, b) = self.rx.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        self.rx.clear();
        all
    }

    /// Bytes ready to read.
    pub fn readable(&self) -> usize {
        self.rx.len()
    }

    /// Bytes received in order since the socket was created.
    pub fn received_total(&self) -> u64 {
        self.received_total
    }
}

impl StreamSocket {
    fn take_in_order(&mut self, bytes: &[u8]) {
        self.rx.extend(bytes);
        self.received_total += bytes.len() as u64;
    }

    fn take_unit(&mut self, max_len: usize) -> Option<Unit> {
        self.tx.take(max_len).map(Unit::new)
    }
}

/// A byte stream needs no context: it works in any engine.
impl<C: ?Sized> SegmentSink<C> for StreamSocket {
    fn on_in_order(&mut self, _cx: &mut C, _now: Instant, _seq: u32, bytes: &[u8]) {
        self.take_in_order(bytes);
    }

    fn rx_window(&self) -> usize {
        self.rx_capacity.saturating_sub(self.rx.len())
    }
}

impl<C: ?Sized> SegmentSource<C> for StreamSocket {
    fn next_unit(&mut self, _cx: &mut C, _now: Instant, _seq: u32, max_len: usize) -> Option<Unit> {
        self.take_unit(max_len)
    }

    fn pending(&self) -> bool {
        self.tx.len() > 0
    }

    fn recycle(&mut self, _cx: &mut C, buffer: Vec<u8>) {
        self.tx.recycle(buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_across_writes_units_and_reads() {
        let mut s = StreamSocket::new(100, 100);
        assert_eq!(s.write(&[1; 60]), 60);
        assert_eq!(s.write(&[2; 60]), 40, "bounded by the send buffer");
        assert_eq!(s.take_unit(50).unwrap().payload, vec![1; 50]);
        assert_eq!(s.write(&[3; 10]), 10);
        let u = s.take_unit(1000).unwrap().payload;
        assert_eq!(u.len(), 60);
        assert_eq!(&u[..10], &[1; 10]);
        assert_eq!(&u[10..50], &[2; 40]);
        assert_eq!(&u[50..], &[3; 10]);
        assert!(!SegmentSource::<()>::pending(&s));
        s.take_in_order(b"hello ");
        s.take_in_order(b"world");
        let mut b = [0u8; 3];
        assert_eq!(s.read(&mut b), 3);
        assert_eq!(&b, b"hel");
        assert_eq!(s.read_all(), b"lo world");
        assert_eq!(s.received_total(), 11);
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    // A buffer the engine gives back (acknowledged) carries later writes: no allocation.
    #[test]
    fn recycled_buffer_is_reused() {
        let mut s = StreamSocket::new(1 << 16, 1 << 16);
        let data = pattern(3 * 1448);
        assert_eq!(s.write(&data[..2 * 1448]), 2 * 1448);
        let first = s.take_unit(1448).unwrap().payload;
        assert_eq!(first, &data[..1448]);
        let at = first.as_ptr();
        SegmentSource::<()>::recycle(&mut s, &mut (), first);
        assert_eq!(s.write(&data[2 * 1448..]), 1448);
        assert_eq!(s.take_unit(1448).unwrap().payload, &data[1448..2 * 1448]);
        let third = s.take_unit(1448).unwrap().payload;
        assert_eq!(third, &data[2 * 1448..]);
        assert_eq!(
            third.as_ptr(),
            at,
            "the recycled buffer carries the new bytes"
        );
        assert!(s.take_unit(1448).is_none());
    }

    // Units are whole buffers when the engine asks for what they hold, and are cut or
    // topped up otherwise; the stream comes out in order either way.
    #[test]
    fn units_follow_the_offered_length() {
        let mut s = StreamSocket::new(1 << 16, 1 << 16);
        let data = pattern(20_000);
        assert_eq!(s.write(&data), data.len());
        let mut out = Vec::new();
        for max_len in [1000, 1448, 2000, 100, 2000, 2000, 1448, 5000] {
            let want = max_len.min(data.len() - out.len());
            let u = s.take_unit(max_len).unwrap().payload;
            assert_eq!(u.len(), want, "unit for max_len {max_len}");
            out.extend_from_slice(&u);
            assert_eq!(s.send_queued(), data.len() - out.len());
        }
        // Written after the engine asked for 5000: cut to that.
        assert_eq!(s.write(&data[..12_000]), 12_000);
        while let Some(u) = s.take_unit(5000) {
            assert!(u.payload.len() == 5000 || s.send_queued() == 0);
            out.extend_from_slice(&u.payload);
        }
        assert_eq!(&out[..data.len()], &data[..]);
        assert_eq!(&out[data.len()..], &data[..12_000]);
    }

    // An effective MSS below the default (IPv6 on a 1500-octet MTU): the buffers written
    // before the engine first asked are recut once, the later ones are units as written.
    #[test]
    fn smaller_mss_is_learned() {
        let mut s = StreamSocket::new(1 << 16, 1 << 16);
        let data = pattern(20_000);
        assert_eq!(s.write(&data[..3 * 1448]), 3 * 1448);
        let mut out = s.take_unit(1428).unwrap().payload;
        assert_eq!(s.write(&data[3 * 1448..]), data.len() - 3 * 1448);
        while let Some(u) = s.take_unit(1428) {
            assert!(u.payload.len() == 1428 || s.send_queued() == 0);
            out.extend_from_slice(&u.payload);
            let queued: Vec<usize> = s.tx.queue.iter().map(Vec::len).collect();
            if out.len() >= 4 * 1428 {
                // Past the buffers written before: every buffer but the last is one unit.
                let (last, full) = queued.split_last().unwrap_or((&0, &[]));
                assert!(
                    full.iter().all(|&n| n == 1428) && *last <= 1428,
                    "{queued:?}"
                );
            }
        }
        assert_eq!(out, data);
    }

    // A unit the window cut short shifts the unit boundaries; the buffers written after it
    // follow the new ones, so only those written before are topped up (copied).
    #[test]
    fn a_short_unit_realigns_later_writes() {
        let mut s = StreamSocket::new(1 << 16, 1 << 16);
        let data = pattern(15 * 1448);
        assert_eq!(s.write(&data[..10 * 1448]), 10 * 1448);
        let mut out = s.take_unit(1448).unwrap().payload;
        out.extend_from_slice(&s.take_unit(1000).unwrap().payload);
        assert_eq!(s.write(&data[10 * 1448..]), 5 * 1448);
        while let Some(u) = s.take_unit(1448) {
            out.extend_from_slice(&u.payload);
            if out.len() >= 10 * 1448 + 1000 {
                let queued: Vec<usize> = s.tx.queue.iter().map(Vec::len).collect();
                let (last, full) = queued.split_last().unwrap_or((&0, &[]));
                assert!(
                    full.iter().all(|&n| n == 1448) && *last <= 1448,
                    "{queued:?}"
                );
            }
        }
        assert_eq!(out, data);
    }

    // The spare pool holds at most a send buffer's worth; empty buffers are not kept.
    #[test]
    fn spare_pool_is_bounded() {
        let mut s = StreamSocket::new(100, 2 * 1448);
        for _ in 0..10 {
            SegmentSource::<()>::recycle(&mut s, &mut (), Vec::with_capacity(1448));
        }
        SegmentSource::<()>::recycle(&mut s, &mut (), Vec::new());
        assert_eq!(s.tx.spare.len(), 2);
    }
}
