//! Byte-stream sockets for ordinary TCP applications of the data plane: the second
//! [`SegmentSink`] / [`SegmentSource`] pair on the same engine.
//!
//! The application writes bytes; the source keeps them in buffers of the `max_len` the
//! engine offers (the effective MSS when the window allows) and hands those over as units
//! without a copy; the engine gives each buffer back once acknowledged, for later writes.
//! The sink takes in-order segments directly (one copy, from the segment into the receive
//! ring, in the same pass as the checksum when the engine verifies checksums: see
//! [`SegmentSink::stage`]) and leaves out-of-order ones to the engine's reassembly.
//!
//! Applications that can produce or consume bytes in place skip the socket copies:
//! [`StreamSocket::write_with`] fills the send buffers the engine takes as units,
//! [`StreamSocket::read_with`] reads straight out of the receive ring.

use std::collections::VecDeque;

use crate::checksum::{copy_payload, PayloadSum};
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

    /// Octets from the end of the buffered data to the next unit boundary counted from
    /// the front (0 on a boundary): one division.
    fn to_boundary(&self) -> usize {
        match self.len % self.unit_len {
            0 => 0,
            r => self.unit_len - r,
        }
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
        let to_boundary = self.to_boundary();
        if let Some(back) = self.queue.back_mut() {
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

    /// Lets `fill` write up to `limit` bytes in place: into the last buffer up to the next
    /// unit boundary, or into a buffer of one unit. Returns how many it wrote (at most what
    /// it was offered). A recycled buffer is offered with its old contents (no zeroing).
    fn push_with(&mut self, limit: usize, fill: impl FnOnce(&mut [u8]) -> usize) -> usize {
        if limit == 0 {
            return 0;
        }
        let to_boundary = self.to_boundary();
        let (mut buffer, start) = match self.queue.pop_back() {
            Some(back) if to_boundary > 0 => {
                let start = back.len();
                (back, start)
            }
            back => {
                self.queue.extend(back);
                (self.spare.pop().unwrap_or_default(), 0)
            }
        };
        let room = if start > 0 {
            to_boundary
        } else {
            self.unit_len
        }
        .min(limit);
        if buffer.len() < start + room {
            buffer.resize(start + room, 0);
        }
        let n = fill(&mut buffer[start..start + room]).min(room);
        buffer.truncate(start + n);
        self.len += n;
        if buffer.is_empty() {
            self.recycle(buffer);
        } else {
            self.queue.push_back(buffer);
        }
        n
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

/// The receive buffer: a ring of octets, reset to its start whenever it is emptied (so a
/// reader that keeps up sees one contiguous piece and arriving payloads rarely wrap).
#[derive(Debug, Clone)]
struct RecvRing {
    buf: Vec<u8>,
    head: usize,
    len: usize,
}

impl RecvRing {
    fn new(capacity: usize) -> Self {
        RecvRing {
            buf: vec![0; capacity],
            head: 0,
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn free(&self) -> usize {
        self.buf.len() - self.len
    }

    /// Where the next received octet goes.
    fn tail(&self) -> usize {
        let t = self.head + self.len;
        if t >= self.buf.len() {
            t - self.buf.len()
        } else {
            t
        }
    }

    /// The free room from the tail on, as far as it is contiguous.
    fn free_run(&mut self) -> &mut [u8] {
        let tail = self.tail();
        let end = if tail < self.head || self.len == self.buf.len() {
            self.head.max(tail)
        } else {
            self.buf.len()
        };
        &mut self.buf[tail..end]
    }

    /// Makes `n` octets written at the tail (through [`RecvRing::free_run`]) readable.
    fn commit(&mut self, n: usize) {
        debug_assert!(n <= self.free());
        self.len += n;
    }

    /// Appends `bytes` (at most [`RecvRing::free`] of them).
    fn push(&mut self, bytes: &[u8]) {
        let first = self.free_run();
        let n = first.len().min(bytes.len());
        first[..n].copy_from_slice(&bytes[..n]);
        self.commit(n);
        let rest = &bytes[n..];
        if !rest.is_empty() {
            let second = self.free_run();
            second[..rest.len()].copy_from_slice(rest);
            self.commit(rest.len());
        }
    }

    /// The readable octets: the piece from the head on, then the wrapped piece.
    fn as_slices(&self) -> (&[u8], &[u8]) {
        let end = self.head + self.len;
        if end <= self.buf.len() {
            (&self.buf[self.head..end], &[])
        } else {
            (&self.buf[self.head..], &self.buf[..end - self.buf.len()])
        }
    }

    /// Drops the first `n` readable octets.
    fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        self.len -= n;
        self.head = if self.len == 0 {
            0
        } else {
            let h = self.head + n;
            if h >= self.buf.len() {
                h - self.buf.len()
            } else {
                h
            }
        };
    }
}

/// A payload copied into the receive ring's free room by [`SegmentSink::stage`] and not yet
/// readable: `len` octets at ring position `at`, of the segment starting at `seq`.
#[derive(Debug, Clone, Copy)]
struct Staged {
    seq: u32,
    at: usize,
    len: usize,
}

/// A buffered byte stream attached to one connection.
#[derive(Debug, Clone)]
pub struct StreamSocket {
    rx: RecvRing,
    staged: Option<Staged>,
    /// The sequence number of the next in-order octet, once one arrived.
    next_seq: Option<u32>,
    tx: SendBuffer,
    tx_capacity: usize,
    received_total: u64,
}

impl StreamSocket {
    /// A socket with receive and send buffers of the given capacities.
    pub fn new(rx_capacity: usize, tx_capacity: usize) -> Self {
        StreamSocket {
            rx: RecvRing::new(rx_capacity),
            staged: None,
            next_seq: None,
            tx: SendBuffer::new(tx_capacity),
            tx_capacity,
            received_total: 0,
        }
    }

    /// Writes in place, without a copy through the socket: `fill` is handed free room of
    /// the send buffer (at most one unit: up to the next unit boundary, where the engine
    /// will cut a segment), writes its bytes to the front of it and returns how many it
    /// wrote; those are queued for sending. Returns that count (0 when the send buffer is
    /// full, without calling `fill`). The room may hold older bytes: only the first count
    /// of them are sent. Call again for more room.
    pub fn write_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> usize {
        let limit = self.send_capacity();
        self.tx.push_with(limit, fill)
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
        self.rx.consume(n);
        n
    }

    /// Reads in place, without a copy out of the socket: `take` is handed the received
    /// bytes at the front of the receive buffer (one contiguous piece, empty when nothing
    /// is readable; after it is consumed, the next call hands the rest) and returns how many
    /// of them it consumed, which leave the buffer. Returns that count.
    pub fn read_with(&mut self, take: impl FnOnce(&[u8]) -> usize) -> usize {
        let front = self.rx.as_slices().0;
        let n = take(front).min(front.len());
        self.rx.consume(n);
        n
    }

    /// Take every received byte.
    pub fn read_all(&mut self) -> Vec<u8> {
        let (a, b) = self.rx.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        self.rx.consume(all.len());
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
    /// In-order bytes starting at `seq`: made readable where [`StreamSocket::stage_payload`]
    /// already put them, copied otherwise.
    fn take_in_order(&mut self, seq: u32, bytes: &[u8]) {
        match self.staged.take() {
            Some(s) if s.seq == seq && s.at == self.rx.tail() && bytes.len() <= s.len => {
                self.rx.commit(bytes.len());
            }
            _ => self.rx.push(bytes),
        }
        self.next_seq = Some(seq.wrapping_add(bytes.len() as u32));
        self.received_total += bytes.len() as u64;
    }

    /// Copies the payload of a segment at `seq` to the ring's tail, not readable yet, and
    /// returns its sum: when it is the next in-order payload and fits there unwrapped.
    fn stage_payload(&mut self, seq: u32, payload: &[u8]) -> Option<PayloadSum> {
        self.staged = None;
        if self.next_seq.is_some_and(|next| next != seq) {
            return None;
        }
        let at = self.rx.tail();
        let room = self.rx.free_run();
        if payload.len() > room.len() {
            return None;
        }
        let sum = copy_payload(&mut room[..payload.len()], payload);
        self.staged = Some(Staged {
            seq,
            at,
            len: payload.len(),
        });
        Some(sum)
    }

    fn take_unit(&mut self, max_len: usize) -> Option<Unit> {
        self.tx.take(max_len).map(Unit::new)
    }
}

/// A byte stream needs no context: it works in any engine.
impl<C: ?Sized> SegmentSink<C> for StreamSocket {
    fn on_in_order(&mut self, _cx: &mut C, _now: Instant, seq: u32, bytes: &[u8]) {
        self.take_in_order(seq, bytes);
    }

    fn rx_window(&self) -> usize {
        self.rx.free()
    }

    fn stage(&mut self, _cx: &mut C, seq: u32, payload: &[u8]) -> Option<PayloadSum> {
        self.stage_payload(seq, payload)
    }

    fn unstage(&mut self, _cx: &mut C) {
        self.staged = None;
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
        assert_eq!(s.take_unit(50).unwrap().into_octets(), vec![1; 50]);
        assert_eq!(s.write(&[3; 10]), 10);
        let u = s.take_unit(1000).unwrap().into_octets();
        assert_eq!(u.len(), 60);
        assert_eq!(&u[..10], &[1; 10]);
        assert_eq!(&u[10..50], &[2; 40]);
        assert_eq!(&u[50..], &[3; 10]);
        assert!(!SegmentSource::<()>::pending(&s));
        s.take_in_order(0, b"hello ");
        s.take_in_order(6, b"world");
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
        let first = s.take_unit(1448).unwrap().into_octets();
        assert_eq!(first, &data[..1448]);
        let at = first.as_ptr();
        SegmentSource::<()>::recycle(&mut s, &mut (), first);
        assert_eq!(s.write(&data[2 * 1448..]), 1448);
        assert_eq!(
            s.take_unit(1448).unwrap().into_octets(),
            &data[1448..2 * 1448]
        );
        let third = s.take_unit(1448).unwrap().into_octets();
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
            let u = s.take_unit(max_len).unwrap().into_octets();
            assert_eq!(u.len(), want, "unit for max_len {max_len}");
            out.extend_from_slice(&u);
            assert_eq!(s.send_queued(), data.len() - out.len());
        }
        // Written after the engine asked for 5000: cut to that.
        assert_eq!(s.write(&data[..12_000]), 12_000);
        while let Some(u) = s.take_unit(5000) {
            assert!(u.octets().len() == 5000 || s.send_queued() == 0);
            out.extend_from_slice(u.octets());
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
        let mut out = s.take_unit(1428).unwrap().into_octets();
        assert_eq!(s.write(&data[3 * 1448..]), data.len() - 3 * 1448);
        while let Some(u) = s.take_unit(1428) {
            assert!(u.octets().len() == 1428 || s.send_queued() == 0);
            out.extend_from_slice(u.octets());
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
        let mut out = s.take_unit(1448).unwrap().into_octets();
        out.extend_from_slice(&s.take_unit(1000).unwrap().into_octets());
        assert_eq!(s.write(&data[10 * 1448..]), 5 * 1448);
        while let Some(u) = s.take_unit(1448) {
            out.extend_from_slice(u.octets());
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

    // write_with fills whole units in place (a recycled buffer without zeroing it), tops up
    // a partly written one to the unit boundary, and is bounded by the send buffer.
    #[test]
    fn write_with_fills_units_in_place() {
        let mut s = StreamSocket::new(100, 4 * 1448);
        let data = pattern(5 * 1448);
        let mut at = 0;
        let n = s.write_with(|room| {
            assert_eq!(room.len(), 1448, "one unit");
            room[..1000].copy_from_slice(&data[..1000]);
            1000
        });
        assert_eq!(n, 1000);
        at += n;
        let n = s.write_with(|room| {
            assert_eq!(room.len(), 448, "up to the unit boundary");
            room.copy_from_slice(&data[at..at + 448]);
            448
        });
        at += n;
        let first = s.take_unit(1448).unwrap().into_octets();
        assert_eq!(first, &data[..1448]);
        let buffer = first.as_ptr();
        SegmentSource::<()>::recycle(&mut s, &mut (), first);
        let n = s.write_with(|room| {
            assert_eq!(room.as_ptr(), buffer, "the recycled buffer");
            assert_eq!(&room[..10], &data[..10], "offered as it was, not zeroed");
            room.copy_from_slice(&data[at..at + 1448]);
            usize::MAX
        });
        assert_eq!(n, 1448, "no more than offered");
        at += n;
        assert_eq!(s.write_with(|_| 0), 0);
        while s.send_capacity() > 0 {
            at += s.write_with(|room| {
                room.copy_from_slice(&data[at..at + room.len()]);
                room.len()
            });
        }
        assert_eq!(at, 5 * 1448);
        assert_eq!(s.write_with(|_| panic!("no room to offer")), 0);
        let mut out = Vec::new();
        while let Some(u) = s.take_unit(1448) {
            assert_eq!(u.octets().len(), 1448);
            out.extend_from_slice(u.octets());
        }
        assert_eq!(out, &data[1448..]);
    }

    // read_with hands the readable bytes in place, as one piece up to the ring's end; the
    // ring starts over at its beginning once emptied.
    #[test]
    fn read_with_reads_in_place_across_the_wrap() {
        let mut s = StreamSocket::new(1000, 100);
        let data = pattern(3000);
        s.take_in_order(0, &data[..700]);
        assert_eq!(s.read_with(|b| b.len().min(600)), 600);
        assert_eq!(SegmentSink::<()>::rx_window(&s), 900);
        s.take_in_order(700, &data[700..1500]);
        assert_eq!(s.readable(), 900);
        let mut out = data[..600].to_vec();
        let n = s.read_with(|b| {
            assert_eq!(b.len(), 400, "up to the ring's end");
            out.extend_from_slice(b);
            b.len()
        });
        assert_eq!(n, 400);
        s.read_with(|b| {
            assert_eq!(b.len(), 500, "then the wrapped piece");
            out.extend_from_slice(&b[..200]);
            200
        });
        assert_eq!(s.read_with(|_| usize::MAX), 300, "no more than handed");
        out.extend_from_slice(&data[1200..1500]);
        assert_eq!(out, &data[..1500]);
        assert_eq!(s.read_with(|b| b.len()), 0);
        // Emptied: the next bytes start at the ring's beginning, in one piece.
        s.take_in_order(1500, &data[1500..2500]);
        assert_eq!(s.read_with(|b| b.len()), 1000);
    }

    // A staged payload becomes readable only when handed over in order (then without a
    // copy); another staging or a payload at another sequence number replaces it.
    #[test]
    fn staged_bytes_are_committed_only_in_order() {
        let mut s = StreamSocket::new(1000, 100);
        let data = pattern(900);
        assert!(s.stage_payload(5000, &data[..300]).is_some());
        assert_eq!(s.readable(), 0, "staged is not readable");
        s.take_in_order(5000, &data[..300]);
        assert_eq!(s.readable(), 300);
        assert!(
            s.stage_payload(6000, &data[300..400]).is_none(),
            "not the next in order"
        );
        let mut bad = data[300..600].to_vec();
        bad[7] ^= 1;
        assert!(s.stage_payload(5300, &bad).is_some());
        assert_eq!(s.readable(), 300);
        assert!(s.stage_payload(5300, &data[300..600]).is_some());
        s.take_in_order(5300, &data[300..500]);
        assert!(s.stage_payload(5500, &data[500..600]).is_some());
        // Handed more than was staged (from reassembly): copied.
        s.take_in_order(5500, &data[500..900]);
        assert_eq!(s.read_all(), data);
        assert!(
            s.stage_payload(5900, &[0; 1001]).is_none(),
            "larger than the ring"
        );
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
