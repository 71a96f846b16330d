//! The upper layer of a connection: [`Ulp`] (a [`SegmentSink`] and [`SegmentSource`] over
//! one context type) as the engine's users see it, and [`Upper`], the same ULP as one
//! connection's TCB sees it: bound to the caller's context and the time of the call, so the
//! state machine deals with neither. The TCB is generic over it (no dynamic dispatch on the
//! per-segment path).

use crate::rx::{for_each_unconsumed, Consumed, SegmentSink};
use crate::time::Instant;
use crate::tx::{SegmentSource, Unit};

/// A connection's upper layer: receives through [`SegmentSink`], sends through
/// [`SegmentSource`], both with the context `C` the engine's caller lends per call.
/// Implemented for every type that implements both.
pub trait Ulp<C: ?Sized = ()>: SegmentSink<C> + SegmentSource<C> {}

impl<C: ?Sized, T: SegmentSink<C> + SegmentSource<C> + ?Sized> Ulp<C> for T {}

/// A connection's upper layer during one engine call (context-free).
pub(crate) trait Upper {
    /// See [`crate::SegmentSink::on_segment`]; by default in-order segments are taken whole.
    fn on_segment(&mut self, seq: u32, payload: &[u8], in_order: bool, _rcv_nxt: u32) -> Consumed {
        if in_order {
            self.on_in_order(seq, payload);
            Consumed::all(payload.len())
        } else {
            Consumed::none()
        }
    }
    /// See [`crate::SegmentSink::on_run_segment`].
    fn on_run_segment(&mut self, seq: u32, payload: &[u8]) {
        let consumed = self.on_segment(seq, payload, true, seq);
        for_each_unconsumed(&consumed, payload.len(), |a, b| {
            self.on_in_order(seq.wrapping_add(a as u32), &payload[a..b]);
        });
    }
    /// See [`crate::SegmentSink::on_in_order`].
    fn on_in_order(&mut self, seq: u32, bytes: &[u8]);
    /// See [`crate::SegmentSink::on_advance`].
    fn on_advance(&mut self, _rcv_nxt: u32) {}
    /// See [`crate::SegmentSink::rx_window`].
    fn rx_window(&self) -> usize;
    /// See [`crate::SegmentSource::next_unit`].
    fn next_unit(&mut self, seq: u32, max_len: usize) -> Option<Unit>;
    /// See [`crate::SegmentSource::pending`].
    fn pending(&self) -> bool;
    /// See [`crate::SegmentSource::recycle`].
    fn recycle(&mut self, _buffer: Vec<u8>) {}
}

/// A ULP with the context and time of the current engine call.
pub(crate) struct Bound<'a, U: ?Sized, C: ?Sized> {
    pub(crate) ulp: &'a mut U,
    pub(crate) cx: &'a mut C,
    pub(crate) now: Instant,
}

impl<U: Ulp<C> + ?Sized, C: ?Sized> Upper for Bound<'_, U, C> {
    fn on_segment(&mut self, seq: u32, payload: &[u8], in_order: bool, rcv_nxt: u32) -> Consumed {
        self.ulp
            .on_segment(self.cx, self.now, seq, payload, in_order, rcv_nxt)
    }
    fn on_run_segment(&mut self, seq: u32, payload: &[u8]) {
        self.ulp.on_run_segment(self.cx, self.now, seq, payload)
    }
    fn on_in_order(&mut self, seq: u32, bytes: &[u8]) {
        self.ulp.on_in_order(self.cx, self.now, seq, bytes)
    }
    fn on_advance(&mut self, rcv_nxt: u32) {
        self.ulp.on_advance(self.cx, self.now, rcv_nxt)
    }
    fn rx_window(&self) -> usize {
        self.ulp.rx_window()
    }
    fn next_unit(&mut self, seq: u32, max_len: usize) -> Option<Unit> {
        self.ulp.next_unit(self.cx, self.now, seq, max_len)
    }
    fn pending(&self) -> bool {
        self.ulp.pending()
    }
    fn recycle(&mut self, buffer: Vec<u8>) {
        self.ulp.recycle(self.cx, buffer)
    }
}
