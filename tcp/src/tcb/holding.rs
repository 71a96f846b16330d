//! The placeholder ULP of connections not yet attached to an application.

use crate::rx::{Consumed, SegmentSink};
use crate::tx::{SegmentSource, Unit};

/// Placeholder ULP for connections accepted before the application attached one: keeps
/// in-order bytes (bounded by the advertised window) and sends nothing.
#[derive(Debug)]
pub(crate) struct Holding<'a> {
    pub(crate) buf: &'a mut Vec<u8>,
    pub(crate) start: &'a mut Option<u32>,
    pub(crate) cap: usize,
}

impl SegmentSink for Holding<'_> {
    fn on_segment(&mut self, seq: u32, payload: &[u8], in_order: bool, _rcv_nxt: u32) -> Consumed {
        if in_order {
            self.on_in_order(seq, payload);
            Consumed::all(payload.len())
        } else {
            Consumed::none()
        }
    }

    fn on_in_order(&mut self, seq: u32, bytes: &[u8]) {
        if self.start.is_none() {
            *self.start = Some(seq);
        }
        self.buf.extend_from_slice(bytes);
    }

    fn rx_window(&self) -> usize {
        self.cap.saturating_sub(self.buf.len())
    }
}

impl SegmentSource for Holding<'_> {
    fn next_unit(&mut self, _seq: u32, _max_len: usize) -> Option<Unit> {
        None
    }

    fn pending(&self) -> bool {
        false
    }
}
