//! Sans-IO TCP engine built on smoltcp's wire layer, with an MPA-aware segment hook.
//!
//! Segments and time go in ([`Engine::handle_packet`], [`Engine::handle_timeout`]); IPv4
//! packets and events come out ([`Engine::poll_transmit`], [`Engine::poll_event`]). The
//! engine knows nothing of Ethernet or ARP and never reads a clock.
//!
//! What makes it "MPA-aware":
//! * **Receive**: each arriving payload segment is offered to the connection's
//!   [`SegmentSink`] with its sequence number before any copy; only what the sink does not
//!   consume is kept for in-order reassembly (see [`rx`]).
//! * **Send**: a [`SegmentSource`] hands whole units, each sent as exactly one segment and
//!   retransmitted unchanged (see [`tx`]).
//!
//! Driving it (what `dataplane tcp` does in its poll-loop handler):
//! 1. For each received TCP segment: [`Engine::handle_tcp`] with the IPv4 addresses (or
//!    [`Engine::handle_packet`] with the whole IPv4 packet).
//! 2. Once per iteration: [`Engine::handle_timeout`] when [`Engine::poll_timeout`] is due,
//!    then drain [`Engine::poll_event`] (attach a ULP to each `Accepted` connection).
//! 3. Drain [`Engine::poll_transmit`] into transmit buffers right after the Ethernet header;
//!    the returned destination is the address to resolve (ARP) for the next hop.
//! 4. After the application gives a ULP new data or reads from it, [`Engine::ulp_mut`] (or
//!    [`Engine::wake`]) makes the next `poll_transmit` pick it up.
#![forbid(unsafe_code)]

pub mod cc;
pub mod checksum;
mod config;
mod engine;
mod isn;
mod options;
pub mod rto;
pub mod rx;
mod sack;
mod seq;
mod stream;
mod tcb;
mod time;
pub mod tx;
mod upper;
mod wire;

pub use config::{Config, Keepalive};
pub use engine::{ConnId, Engine, Error, Event, FourTuple, PacketError, Stats, Transmit};
pub use isn::IsnGenerator;
pub use options::Negotiated;
pub use rx::{Consumed, SegmentSink};
pub use stream::StreamSocket;
pub use tcb::{CloseReason, ConnInfo, State};
pub use time::Instant;
pub use tx::{SegmentSource, Unit};
pub use wire::IPV4_HEADER_LEN;

/// A connection's upper layer: receives through [`SegmentSink`], sends through
/// [`SegmentSource`], both with the context `C` the engine's caller lends per call.
/// Implemented for every type that implements both.
pub trait Ulp<C: ?Sized = ()>: SegmentSink<C> + SegmentSource<C> {}

impl<C: ?Sized, T: SegmentSink<C> + SegmentSource<C> + ?Sized> Ulp<C> for T {}

impl<C: ?Sized, T: SegmentSink<C> + ?Sized> SegmentSink<C> for Box<T> {
    fn on_segment(
        &mut self,
        cx: &mut C,
        now: Instant,
        seq: u32,
        payload: &[u8],
        in_order: bool,
        rcv_nxt: u32,
    ) -> Consumed {
        (**self).on_segment(cx, now, seq, payload, in_order, rcv_nxt)
    }
    fn on_in_order(&mut self, cx: &mut C, now: Instant, seq: u32, bytes: &[u8]) {
        (**self).on_in_order(cx, now, seq, bytes)
    }
    fn on_advance(&mut self, cx: &mut C, now: Instant, rcv_nxt: u32) {
        (**self).on_advance(cx, now, rcv_nxt)
    }
    fn rx_window(&self) -> usize {
        (**self).rx_window()
    }
}

impl<C: ?Sized, T: SegmentSource<C> + ?Sized> SegmentSource<C> for Box<T> {
    fn next_unit(&mut self, cx: &mut C, now: Instant, seq: u32, max_len: usize) -> Option<Unit> {
        (**self).next_unit(cx, now, seq, max_len)
    }
    fn pending(&self) -> bool {
        (**self).pending()
    }
    fn recycle(&mut self, buffer: Vec<u8>) {
        (**self).recycle(buffer)
    }
}
