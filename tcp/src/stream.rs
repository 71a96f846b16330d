//! Byte-stream sockets for ordinary TCP applications of the data plane: the second
//! [`SegmentSink`] / [`SegmentSource`] pair on the same engine.
//!
//! The application writes bytes; the source cuts them into units of at most the `max_len`
//! the engine offers (the effective MSS when the window allows). The sink takes in-order
//! segments directly (one copy, from the segment into the receive buffer) and leaves
//! out-of-order ones to the engine's reassembly.

use std::collections::VecDeque;

use crate::rx::{Consumed, SegmentSink};
use crate::tx::{SegmentSource, Unit};

/// A buffered byte stream attached to one connection.
#[derive(Debug, Clone)]
pub struct StreamSocket {
    rx: VecDeque<u8>,
    rx_capacity: usize,
    tx: VecDeque<u8>,
    tx_capacity: usize,
    received_total: u64,
}

impl StreamSocket {
    /// A socket with receive and send buffers of the given capacities.
    pub fn new(rx_capacity: usize, tx_capacity: usize) -> Self {
        StreamSocket {
            rx: VecDeque::new(),
            rx_capacity,
            tx: VecDeque::new(),
            tx_capacity,
            received_total: 0,
        }
    }

    /// Queue bytes for sending; returns how many fit into the send buffer.
    pub fn write(&mut self, data: &[u8]) -> usize {
        let n = data
            .len()
            .min(self.tx_capacity.saturating_sub(self.tx.len()));
        self.tx.extend(&data[..n]);
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
        for (d, s) in buf.iter_mut().zip(self.rx.drain(..n)) {
            *d = s;
        }
        n
    }

    /// Take every received byte.
    pub fn read_all(&mut self) -> Vec<u8> {
        self.rx.drain(..).collect()
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

impl SegmentSink for StreamSocket {
    fn on_segment(&mut self, seq: u32, payload: &[u8], in_order: bool, _rcv_nxt: u32) -> Consumed {
        if in_order {
            self.on_in_order(seq, payload);
            Consumed::all(payload.len())
        } else {
            Consumed::none()
        }
    }

    fn on_in_order(&mut self, _seq: u32, bytes: &[u8]) {
        self.rx.extend(bytes);
        self.received_total += bytes.len() as u64;
    }

    fn rx_window(&self) -> usize {
        self.rx_capacity.saturating_sub(self.rx.len())
    }
}

impl SegmentSource for StreamSocket {
    fn next_unit(&mut self, _seq: u32, max_len: usize) -> Option<Unit> {
        let n = max_len.min(self.tx.len());
        if n == 0 {
            return None;
        }
        Some(Unit::new(self.tx.drain(..n).collect()))
    }

    fn pending(&self) -> bool {
        !self.tx.is_empty()
    }
}
