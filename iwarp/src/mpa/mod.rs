//! MPA (RFC 5044, RFC 6581): negotiation, FPDU framing, markers, CRC, receiver.

pub mod crc;
pub mod error;
pub mod framer;
pub mod markers;
pub mod negotiate;
pub mod receiver;

pub use error::{MpaError, Recovery};
pub use framer::{Framer, UnitInfo};
pub use markers::{mulpdu, MarkerSpacing};
pub use negotiate::{ConnectRequest, Event, MpaConfig, Negotiated, Negotiator, Role, RtrKind};
pub use receiver::{Consumed, CrcCheck, CrcErrorPolicy, Delivery, Receiver, ReceiverConfig};
