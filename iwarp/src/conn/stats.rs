//! Counters of one connection.

/// What one [`super::Connection`] did on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// TCP units handed out (MPA frames and FPDU units).
    pub units_sent: u64,
    /// FPDUs framed and handed to TCP.
    pub fpdus_sent: u64,
    /// FPDUs received and handed to the engine (in order and ahead).
    pub fpdus_received: u64,
    /// FPDUs found in segments ahead of RCV.NXT and placed at once.
    pub fpdus_placed_ahead: u64,
    /// ULPDU octets of those FPDUs.
    pub bytes_placed_ahead: u64,
    /// Octets of segments ahead of RCV.NXT that MPA could not place, left to TCP's
    /// reassembly store until they are in order.
    pub bytes_left_to_tcp: u64,
    /// Of those, octets whose segment part starts with a tagged DDP segment (by the
    /// FPDU-aligned sender rule, RFC 5044 §6.1). With markers and an FPDU-aligned sender
    /// (this crate's framer) it stays 0; what remains possible is a piece of an FPDU whose
    /// header is in another segment (see `mpa::Receiver`'s out-of-order placement).
    pub tagged_bytes_left_to_tcp: u64,
    /// FPDUs whose CRC did not match (each stops the stream with Terminate 2/0/02).
    pub crc_errors: u64,
    /// Partial FPDUs that stopped progressing (`ConnConfig::partial_fpdu_timeout`); each
    /// stops the stream with Terminate 2/0/03.
    pub stalled_fpdus: u64,
    /// Terminates this side sent (queued for sending).
    pub terminates_sent: u64,
    /// Terminates received from the peer.
    pub terminates_received: u64,
    /// Early segments the engine could not hold (each stops the stream).
    pub deferred_segments: u64,
}
