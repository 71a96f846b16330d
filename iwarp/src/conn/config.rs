//! Settings of one iWARP connection.

use std::time::Duration;

use crate::mem::{PdId, StreamId};
use crate::mpa::MpaConfig;
use crate::wire::rdmap::RDMAP_VERSION;

/// Settings of one [`super::Connection`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnConfig {
    /// MPA negotiation policy (revision, CRC, markers, IRD/ORD, peer-to-peer, timeout).
    pub mpa: MpaConfig,
    /// Protection domain of the stream.
    pub pd: PdId,
    /// Stream identity for STag association.
    pub stream: StreamId,
    /// RFC 7306 atomics and immediate data.
    pub extensions: bool,
    /// RDMAP version to send and accept.
    pub rdmap_version: u8,
    /// Receive window offered to TCP (bytes beyond RCV.NXT).
    pub rx_window: usize,
    /// Most early DDP segments the engine holds for in-order delivery.
    pub max_held_segments: usize,
    /// DDP segment bytes prepared ahead of TCP (taken from the engine before TCP asks).
    pub tx_budget: usize,
    /// Effective send MSS, when known; otherwise the largest unit size TCP offered is used.
    pub emss: Option<usize>,
    /// How long the first FPDU is held once FPDU mode starts; zero sends at once.
    /// Initiator: after the Reply arrived (Linux siw 6.1 as responder drops an FPDU that
    /// arrives right after its Reply; siwlab README: 0.1 s avoids the stall). Responder
    /// outside peer-to-peer mode: after the Reply went out, ended early by the initiator's
    /// first FPDU (RFC 5044 §7.1.2 rule 4; Linux siw as initiator fails a connection whose
    /// first responder FPDU it finds behind the Reply, and an application whose responder
    /// speaks first still gets going after the delay).
    pub first_fpdu_delay: Duration,
    /// How long a partial FPDU may wait for its next in-order octet while TCP has nothing
    /// missing around it before the stream ends with Terminate 2/0/03 (an FPDU-aligned
    /// sender never leaves half an FPDU outstanding, RFC 5044 §4.1).
    pub partial_fpdu_timeout: Duration,
    /// The FPDUs of RDMA Writes received in order at an FPDU boundary are placed by the
    /// fast path (`Engine::place_next_write`); off, every FPDU goes through the general
    /// receiver (same placement, checks and Terminates: for comparisons).
    pub rx_fast_path: bool,
}

impl ConnConfig {
    /// Defaults around `mpa`: PD 0, stream 0, extensions on, 1 MiB window.
    pub fn new(mpa: MpaConfig) -> Self {
        ConnConfig {
            mpa,
            pd: PdId(0),
            stream: StreamId(0),
            extensions: true,
            rdmap_version: RDMAP_VERSION,
            rx_window: 1 << 20,
            max_held_segments: 1 << 16,
            tx_budget: 64 << 10,
            emss: None,
            first_fpdu_delay: Duration::ZERO,
            partial_fpdu_timeout: Duration::from_secs(3),
            rx_fast_path: true,
        }
    }
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig::new(MpaConfig::default())
    }
}
