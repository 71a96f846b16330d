//! Sans-IO TCP engine built on smoltcp's wire layer, with an MPA-aware segment hook.
//!
//! Segments and time go in ([`Engine::handle_packet`], [`Engine::handle_timeout`]); IPv4 and
//! IPv6 packets and events come out ([`Engine::poll_transmit`], [`Engine::poll_event`]). The
//! engine knows nothing of Ethernet, ARP or neighbour discovery and never reads a clock.
//! Addresses are `std::net::SocketAddr` / `IpAddr` throughout: a connection's family is
//! that of its addresses, and only the IP header, the checksum's pseudo-header and the MSS
//! (the MTU less 40 or 60 octets) depend on it.
//!
//! What makes it "MPA-aware":
//! * **Receive**: each arriving payload segment is offered to the connection's
//!   [`SegmentSink`] with its sequence number before any copy; only what the sink does not
//!   consume is kept for in-order reassembly (see [`rx`]).
//! * **Send**: a [`SegmentSource`] hands whole units, each sent as exactly one segment and
//!   retransmitted unchanged (see [`tx`]).
//!
//! Driving it (what `dataplane tcp` does in its poll-loop handler):
//! 1. For each received TCP segment: [`Engine::handle_tcp`] with the IP addresses (or
//!    [`Engine::handle_packet`] with the whole IPv4 or IPv6 packet).
//! 2. Once per iteration: [`Engine::handle_timeout`] when [`Engine::poll_timeout`] is due,
//!    then drain [`Engine::poll_event`] (attach a ULP to each `Accepted` connection).
//! 3. Drain [`Engine::poll_transmit`] into transmit buffers right after the Ethernet header;
//!    the returned destination is the address to resolve (ARP or neighbour discovery) for
//!    the next hop.
//! 4. After the application gives a ULP new data or reads from it, [`Engine::ulp_mut`] (or
//!    [`Engine::wake`]) makes the next `poll_transmit` pick it up.
#![forbid(unsafe_code)]

pub mod cc;
pub mod checksum;
mod config;
mod conn_id;
mod engine;
mod ip;
mod isn;
mod options;
mod rack;
pub mod rto;
pub mod rx;
mod sack;
mod seq;
pub mod sim;
mod stream;
mod syn_cookie;
mod syn_hold;
mod tcb;
mod template;
mod time;
mod timer_wheel;
pub mod tx;
mod ulp;
mod wire;

pub use config::{Config, Keepalive};
pub use engine::{
    ConnId, Engine, Error, Event, FourTuple, GatherTransmit, Lent, Stats, Transmit,
    MAX_PENDING_RSTS, MAX_PENDING_SYN_ACKS, TX_QUANTUM,
};
pub use ip::{ip_header_len, PacketError, IPV4_HEADER_LEN, IPV6_HEADER_LEN};
pub use isn::IsnGenerator;
pub use options::Negotiated;
pub use rx::{Consumed, SegmentSink};
pub use stream::StreamSocket;
pub use tcb::{CloseReason, ConnInfo, State};
pub use time::Instant;
pub use tx::{SegmentSource, Unit};
pub use ulp::Ulp;
