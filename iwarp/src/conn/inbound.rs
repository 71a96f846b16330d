//! The receive side's state in FPDU mode: the MPA receiver, the stream-offset map, the
//! peer-to-peer RTR gate and the stalled-FPDU clock (the receive path itself is `receive`).

use tcp::Instant;

use crate::ddp::SegmentPos;
use crate::mpa::{MarkerSpacing, Receiver};

/// Maps receive sequence numbers to 64-bit stream offsets from the peer's first FPDU octet.
#[derive(Debug, Clone, Copy)]
pub(super) struct RxOffsets {
    pub(super) base_seq: u32,
    pub(super) base_off: u64,
}

impl RxOffsets {
    pub(super) fn offset(&self, seq: u32) -> u64 {
        let d = i64::from(seq.wrapping_sub(self.base_seq) as i32);
        u64::try_from(self.base_off as i64 + d).unwrap_or(0)
    }

    pub(super) fn advance(&mut self, seq: u32) {
        self.base_off = self.offset(seq);
        self.base_seq = seq;
    }
}

/// DDP segments received behind the RTR before the consumer saw the establishment
/// (RFC 6581 §5: the initiator may send its first message right behind the RTR, in the same
/// TCP segment, while the responder's QP is not yet in RTS).
#[derive(Debug, Default)]
pub(super) struct RxGate {
    /// The segments with their stream positions, in arrival order.
    pub(super) segments: Vec<(SegmentPos, Vec<u8>)>,
    /// Octets held.
    pub(super) bytes: usize,
    /// The highest in-order position TCP reported meanwhile.
    pub(super) position: Option<u64>,
    /// `Established` was polled: the next pump delivers the segments.
    pub(super) open: bool,
}

/// The receive side of FPDU mode. In declaration order (`repr(C)`): the service's checks
/// first, next to the sender's (see `Connection`), the partial-FPDU record and the RTR
/// flag that `Connection::poll_timeout` and `Connection::needs_service` read on every visit
/// in its first words.
#[derive(Debug)]
#[repr(C)]
pub(super) struct Inbound {
    /// The partial FPDU the receiver holds (its seq and octets held) and since when.
    pub(super) stall: Option<(u32, usize, Instant)>,
    /// A peer-to-peer responder waits for the RTR, the first FPDU.
    pub(super) awaiting_rtr: bool,
    /// Peer-to-peer responder: the FPDUs that followed the peer's RTR, held until the
    /// consumer has seen the establishment (and moved its QP to RTS).
    pub(super) gate: Option<RxGate>,
    pub(super) offsets: RxOffsets,
    pub(super) spacing: Option<MarkerSpacing>,
    pub(super) receiver: Receiver,
}

impl Inbound {
    /// The receive side of a stream whose first FPDU octet is at `rx_start`.
    pub(super) fn new(
        receiver: Receiver,
        rx_start: u32,
        spacing: Option<MarkerSpacing>,
        awaiting_rtr: bool,
    ) -> Self {
        Inbound {
            receiver,
            spacing,
            offsets: RxOffsets {
                base_seq: rx_start,
                base_off: 0,
            },
            awaiting_rtr,
            gate: None,
            stall: None,
        }
    }

    /// `Established` was polled: what waits behind the RTR may be delivered.
    pub(super) fn open_gate(&mut self) {
        if let Some(gate) = &mut self.gate {
            gate.open = true;
        }
    }
}

#[cfg(test)]
mod layout {
    use super::Inbound;
    use core::mem::offset_of;

    /// Every visit's timer and service checks read the stall record and the RTR flag: they
    /// lie in the receive side's first 40 octets, one line where it begins up to 24 octets
    /// into one (as in the TCP engine's slot; the flag behind the gate had taken a line of
    /// its own, 3.9 misses per Write with 1,000 QPs).
    #[test]
    fn the_stall_record_and_the_rtr_flag_lead_the_receive_side() {
        assert_eq!(offset_of!(Inbound, stall), 0);
        let rtr = offset_of!(Inbound, awaiting_rtr);
        assert!(rtr < 40, "awaiting_rtr at {rtr}");
    }
}
