//! MPA errors and their Terminate causes (RFC 5044 §8; RFC 6581 §7: Layer 2 = LLP, EType 0).

use thiserror::Error;

use crate::wire::mpa::WireError;
use crate::wire::terminate::TerminateCause;

/// How a connection must end after an MPA error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Send an RDMAP Terminate carrying `MpaError::terminate_cause`, then close.
    Terminate,
    /// Send what `poll_transmit` still holds (a reject Reply), then close the TCP
    /// connection gracefully.
    Close,
    /// Abort the TCP connection (RST): the error happened before FPDU mode, when no
    /// Terminate can be framed for the peer (RFC 5044 §7.1).
    Reset,
}

/// An MPA protocol error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MpaError {
    /// Malformed or unexpected MPA Request/Reply frame (2/0/04).
    #[error("invalid MPA Request/Reply frame: {0}")]
    InvalidFrame(#[from] WireError),
    /// The peer asked for markers and local policy refuses to send them (2/0/04).
    #[error("peer requested markers, refused by local policy")]
    MarkersRefused,
    /// The Reply carries a revision above the one requested (2/0/04).
    #[error("reply revision {reply} above requested revision {requested}")]
    RevisionMismatch {
        /// Revision sent in the Request.
        requested: u8,
        /// Revision received in the Reply.
        reply: u8,
    },
    /// The peer did not complete the MPA exchange in time (2/0/01, with a reset).
    #[error("MPA negotiation timed out")]
    Timeout,
    /// Frame bytes arrived after the negotiation finished or failed (2/0/04).
    #[error("MPA negotiation already {0}")]
    NotNegotiating(&'static str),
    /// The responder's ORD exceeds the initiator's IRD (2/0/06, RFC 6581 §7).
    #[error("insufficient IRD: local IRD {local_ird} < peer ORD {peer_ord}")]
    InsufficientIrd {
        /// Our IRD.
        local_ird: u16,
        /// The peer's ORD.
        peer_ord: u16,
    },
    /// Peer-to-peer mode without an agreeable RTR message, or the wrong RTR (2/0/07).
    #[error("no matching RTR option: {0}")]
    NoMatchingRtr(&'static str),
    /// FPDU CRC mismatch (2/0/02).
    #[error(
        "MPA CRC error at seq {seq:#010x}: computed {computed:#010x}, received {received:#010x}"
    )]
    CrcMismatch {
        /// TCP sequence number of the FPDU.
        seq: u32,
        /// CRC computed over the FPDU.
        computed: u32,
        /// CRC found on the wire.
        received: u32,
    },
    /// A marker's FPDUPTR disagrees with the FPDU boundaries found by ULPDU_Length (2/0/03).
    #[error("marker at seq {seq:#010x} points {fpduptr} back, FPDU starts {expected} back")]
    MarkerMismatch {
        /// TCP sequence number of the marker.
        seq: u32,
        /// FPDUPTR found.
        fpduptr: u16,
        /// Distance to the FPDU start that ULPDU_Length implies.
        expected: u32,
    },
    /// ULPDU_Length shorter than a DDP header or above the receive limit: the FPDU start
    /// cannot be trusted (2/0/03, as Linux siw reports it).
    #[error("ULPDU_Length {len} at seq {seq:#010x} outside {min}..={max}")]
    BadUlpduLength {
        /// TCP sequence number of the FPDU.
        seq: u32,
        /// ULPDU_Length found.
        len: u16,
        /// Smallest acceptable value.
        min: u16,
        /// Largest acceptable value.
        max: u16,
    },
    /// A partial FPDU saw no further in-order octets for the configured time while TCP had
    /// nothing missing before or after it. An FPDU-aligned sender sends whole FPDUs (RFC
    /// 5044 §4.1, §5), so its ULPDU_Length cannot be trusted and, with CRCs on, never
    /// checked (RFC 5044 §7.1): reported as a bad FPDU length (2/0/03, SPEC-DIGEST §8 item 8).
    #[error("FPDU at seq {seq:#010x} holds {held} of {claimed} octets and the stream stopped")]
    IncompleteFpdu {
        /// TCP sequence number of the FPDU's ULPDU_Length.
        seq: u32,
        /// Octets received.
        held: usize,
        /// Octets its ULPDU_Length claims (0 if the field itself is incomplete).
        claimed: usize,
    },
    /// In-order data was handed with a gap the receiver never consumed (local error, 2/0/05).
    #[error("in-order data at seq {seq:#010x} leaves a gap after {expected:#010x}")]
    StreamGap {
        /// Sequence number of the data handed in.
        seq: u32,
        /// Next sequence number the receiver expected.
        expected: u32,
    },
    /// An earlier error stopped the receiver.
    #[error("MPA receiver stopped after an earlier error")]
    Stopped,
    /// A DDP segment too large for one FPDU, or a unit limit too small for the next FPDU.
    #[error("cannot frame: {0}")]
    Framing(&'static str),
}

impl MpaError {
    /// The Terminate Layer/EType/Code for this error (Layer 2, EType 0).
    pub fn terminate_cause(&self) -> TerminateCause {
        match self {
            MpaError::InvalidFrame(_)
            | MpaError::MarkersRefused
            | MpaError::RevisionMismatch { .. }
            | MpaError::NotNegotiating(_) => TerminateCause::MPA_INVALID_REQ_REP,
            MpaError::Timeout => TerminateCause::MPA_TCP_CLOSED,
            MpaError::InsufficientIrd { .. } => TerminateCause::MPA_INSUFFICIENT_IRD,
            MpaError::NoMatchingRtr(_) => TerminateCause::MPA_NO_MATCHING_RTR,
            MpaError::CrcMismatch { .. } => TerminateCause::MPA_CRC_ERROR,
            MpaError::MarkerMismatch { .. }
            | MpaError::BadUlpduLength { .. }
            | MpaError::IncompleteFpdu { .. } => TerminateCause::MPA_MARKER_MISMATCH,
            MpaError::StreamGap { .. } | MpaError::Stopped | MpaError::Framing(_) => {
                TerminateCause::MPA_LOCAL_CATASTROPHIC
            }
        }
    }

    /// Whether to send a Terminate or reset the connection.
    pub fn recovery(&self) -> Recovery {
        match self {
            MpaError::MarkersRefused => Recovery::Close,
            MpaError::InvalidFrame(_)
            | MpaError::RevisionMismatch { .. }
            | MpaError::NotNegotiating(_)
            | MpaError::Timeout => Recovery::Reset,
            _ => Recovery::Terminate,
        }
    }
}
