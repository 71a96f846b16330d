//! The placeholder ULP of connections not yet attached to an application.

use crate::tx::Unit;
use crate::ulp::Upper;

/// Placeholder ULP for connections accepted before the application attached one: keeps
/// in-order bytes (bounded by the advertised window) and sends nothing.
#[derive(Debug)]
pub(crate) struct Holding<'a> {
    pub(crate) buf: &'a mut Vec<u8>,
    pub(crate) start: &'a mut Option<u32>,
    pub(crate) cap: usize,
}

impl Upper for Holding<'_> {
    fn on_in_order(&mut self, seq: u32, bytes: &[u8]) {
        if self.start.is_none() {
            *self.start = Some(seq);
        }
        self.buf.extend_from_slice(bytes);
    }

    fn rx_window(&self) -> usize {
        self.cap.saturating_sub(self.buf.len())
    }

    fn next_unit(&mut self, _seq: u32, _max_len: usize) -> Option<Unit> {
        None
    }

    fn pending(&self) -> bool {
        false
    }
}
