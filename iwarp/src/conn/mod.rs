//! One iWARP connection: the "QP engine" that joins MPA negotiation, the MPA framer and
//! receiver, and the RDMAP/DDP [`crate::rdmap::Engine`] of one TCP connection.
//!
//! [`Connection`] implements [`tcp::SegmentSink`] and [`tcp::SegmentSource`], so a
//! `tcp::Engine<Connection, M>` (with `M` the memory table it places into) carries iWARP directly and both stay sans-IO:
//!
//! * phase 1, MPA negotiation (RFC 5044 §7.1, RFC 6581): the initiator's Request is the
//!   first unit it hands TCP; the responder reports [`ConnEvent::ConnectRequest`] and
//!   answers through [`Connection::accept`] or [`Connection::reject`]; in peer-to-peer mode
//!   the initiator sends the zero-length RTR first and the responder consumes it;
//! * phase 2, FPDU mode: every TCP segment goes to the MPA receiver before TCP copies it;
//!   verified FPDUs are handed to the engine with their stream offsets, out-of-order ones
//!   are placed at once and reported as consumed so TCP keeps only what nobody could place.
//!   Units for TCP are whole FPDUs built from the engine's DDP segments, sized by the
//!   MULPDU of the effective send MSS (RFC 5044 §4.1), with markers at their sequence
//!   positions.
//!
//! Driving it (the poll core; see `tests/conn/common.rs` for a complete simulation):
//!
//! * create it with [`Connection::initiator`] and hand it to `tcp::Engine::connect`, or with
//!   [`Connection::responder`] and `tcp::Engine::attach` after `tcp::Event::Accepted`;
//! * the connection owns no memory: the driver owns the memory table (the RNIC) and lends it
//!   per call, to the TCP engine's `handle_*` / `poll_transmit` (which hand it to the
//!   connection's [`tcp::SegmentSink`] / [`tcp::SegmentSource`]) and to the calls below; time
//!   is a [`tcp::Instant`] everywhere;
//! * run [`Connection::handle_timeout`] at [`Connection::poll_timeout`] (MPA negotiation
//!   deadline, first-FPDU hold, stalled partial FPDU);
//! * take [`Connection::poll_event`] (a responder answers
//!   [`ConnEvent::ConnectRequest`] with [`Connection::accept`] / [`Connection::reject`]) and
//!   [`Connection::poll_llp_request`], mapping [`LlpRequest::Close`] / [`LlpRequest::Reset`]
//!   to `tcp::Engine::close` / `abort`;
//! * report `tcp::Event::PeerClosed` as `handle_llp_closed(.., true)` and
//!   `tcp::Event::Closed` (which hands the connection back) as
//!   `handle_llp_closed(.., reason == Normal)`;
//! * with verbs, the memory table is a [`crate::verbs::Rnic`]: call
//!   [`Connection::pump_verbs`] after each activity, move the QP to RTS on
//!   [`ConnEvent::Established`], and carry out the RNIC's `QpAction`s with
//!   [`Connection::apply_qp_action`].
//!
//! The code follows the phases, the way Linux siw splits `siw_cm` / `siw_qp_rx` /
//! `siw_qp_tx`: `connection` holds the phase types and what the application calls;
//! `negotiation` (phase 1), `receive` and `send` (FPDU mode) and `verbs` (the QP glue) add
//! the behaviour; `inbound` and `outbound` are the receive and send sides' state.

mod config;
mod connection;
mod inbound;
mod negotiation;
mod outbound;
mod receive;
mod rtr;
mod send;
mod stats;
mod verbs;

pub use config::ConnConfig;
pub use connection::{ConnEvent, ConnState, Connection, LlpRequest};
pub use rtr::rtr_message;
pub use stats::{ConnStats, OpCount, OpCounters};
