//! Byte-stream sockets for ordinary TCP applications of the data plane: the second
//! [`SegmentSink`] / [`SegmentSource`] pair on the same engine.
//!
//! The application writes bytes; the source cuts them into units of at most the `max_len`
//! the engine offers (the effective MSS when the window allows). The sink takes in-order
//! segments directly (one copy, from the segment into the receive buffer) and leaves
//! out-of-order ones to the engine's reassembly.

use crate::rx::SegmentSink;
use crate::time::Instant;
use crate::tx::{SegmentSource, Unit};

/// A byte FIFO: a vector with a read offset, compacted when half consumed, so that
/// appends and reads are `memcpy`s.
#[derive(Debug, Clone, Default)]
struct Fifo {
    buf: Vec<u8>,
    head: usize,
}

impl Fifo {
    fn len(&self) -> usize {
        self.buf.len() - self.head
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.head > 0 && self.head >= self.buf.len() / 2 {
            self.buf.drain(..self.head);
            self.head = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    fn peek(&self, n: usize) -> &[u8] {
        &self.buf[self.head..self.head + n.min(self.len())]
    }

    fn consume(&mut self, n: usize) {
        self.head += n.min(self.len());
        if self.head == self.buf.len() {
            self.buf.clear();
            self.head = 0;
        }
    }
}

/// A buffered byte stream attached to one connection.
#[derive(Debug, Clone)]
pub struct StreamSocket {
    rx: Fifo,
    rx_capacity: usize,
    tx: Fifo,
    tx_capacity: usize,
    received_total: u64,
}

impl StreamSocket {
    /// A socket with receive and send buffers of the given capacities.
    pub fn new(rx_capacity: usize, tx_capacity: usize) -> Self {
        StreamSocket {
            rx: Fifo::default(),
            rx_capacity,
            tx: Fifo::default(),
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
        buf[..n].copy_from_slice(self.rx.peek(n));
        self.rx.consume(n);
        n
    }

    /// Take every received byte.
    pub fn read_all(&mut self) -> Vec<u8> {
        let all = self.rx.peek(self.rx.len()).to_vec();
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
    fn take_in_order(&mut self, bytes: &[u8]) {
        self.rx.push(bytes);
        self.received_total += bytes.len() as u64;
    }

    fn take_unit(&mut self, max_len: usize) -> Option<Unit> {
        let n = max_len.min(self.tx.len());
        if n == 0 {
            return None;
        }
        let unit = Unit::new(self.tx.peek(n).to_vec());
        self.tx.consume(n);
        Some(unit)
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
        !self.tx.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_order_across_compaction() {
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
}
