//! TCP option negotiation on SYN / SYN-ACK: MSS (RFC 9293 §3.7.1, RFC 6691), window scale,
//! timestamps (RFC 7323) and SACK-permitted (RFC 2018).

use smoltcp::wire::TcpRepr;

/// MSS assumed when the peer sends no MSS option (RFC 9293 §3.7.1).
pub const DEFAULT_PEER_MSS: u16 = 536;
/// Bytes of option space the timestamps option takes in every segment (with padding).
pub const TIMESTAMP_OVERHEAD: usize = 12;

/// Options in force for a connection once both SYNs were seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The MSS the peer announced.
    pub peer_mss: u16,
    /// Shift applied to windows the peer advertises (its window scale).
    pub snd_shift: u8,
    /// Shift applied to windows we advertise (our window scale).
    pub rcv_shift: u8,
    /// Both sides sent SACK-permitted.
    pub sack: bool,
    /// Both sides sent timestamps.
    pub timestamps: bool,
}

/// What we offer in our SYN.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Offer {
    pub(crate) mss: u16,
    pub(crate) wscale: Option<u8>,
    pub(crate) sack: bool,
    pub(crate) timestamps: bool,
}

impl Negotiated {
    /// Combine our offer with the options of the peer's SYN. RFC 7323 §2.2: scaling only if
    /// both sides sent the option; §3.2: timestamps only if both did.
    pub(crate) fn from_syn(offer: &Offer, peer: &TcpRepr) -> Self {
        let scaled = offer.wscale.is_some() && peer.window_scale.is_some();
        Negotiated {
            peer_mss: peer.max_seg_size.unwrap_or(DEFAULT_PEER_MSS).max(64),
            snd_shift: if scaled {
                peer.window_scale.unwrap_or(0).min(14)
            } else {
                0
            },
            rcv_shift: if scaled { offer.wscale.unwrap_or(0) } else { 0 },
            sack: offer.sack && peer.sack_permitted,
            timestamps: offer.timestamps && peer.timestamp.is_some(),
        }
    }

    /// Effective send MSS in payload bytes (RFC 6691 §2): the peer's MSS and our own limit,
    /// less the options carried in every data segment.
    pub fn effective_mss(&self, local_mss: u16) -> usize {
        let base = usize::from(self.peer_mss.min(local_mss));
        let opts = if self.timestamps {
            TIMESTAMP_OVERHEAD
        } else {
            0
        };
        base.saturating_sub(opts).max(1)
    }
}
