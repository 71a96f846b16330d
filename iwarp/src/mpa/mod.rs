//! MPA (RFC 5044, RFC 6581): negotiation, FPDU framing, markers, CRC, receiver.

pub mod error;
pub mod framer;
pub mod markers;
pub mod negotiate;
pub mod receiver;

/// The FPDU CRC32c, kept with the wire formats; re-exported under its former path.
pub use crate::wire::crc;
pub use error::{MpaError, Recovery};
pub use framer::{Framer, UnitInfo};
pub use markers::{mulpdu, MarkerSpacing};
pub use negotiate::{ConnectRequest, Event, MpaConfig, Negotiated, Negotiator, Role, RtrKind};
pub use receiver::{Consumed, CrcCheck, CrcErrorPolicy, Delivery, Receiver, ReceiverConfig};
