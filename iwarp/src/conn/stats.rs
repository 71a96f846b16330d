//! Counters of one connection.

use crate::wire::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};

/// What one [`super::Connection`] did on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// TCP units handed out (MPA frames and FPDU units).
    pub units_sent: u64,
    /// FPDUs framed and handed to TCP.
    pub fpdus_sent: u64,
    /// Units of one FPDU finished in the buffer its payload was read into from registered
    /// memory (no copy into a unit buffer).
    pub units_in_place: u64,
    /// Buffers the send side allocated because its pool of spare ones was empty (segment
    /// and unit buffers come back to the pool once TCP has them acknowledged).
    pub tx_buffers_allocated: u64,
    /// FPDUs received and handed to the engine (in order and ahead).
    pub fpdus_received: u64,
    /// Of those, FPDUs of RDMA Writes received in order that the fast path placed
    /// (`Engine::place_next_write`), past the general receiver's state machine.
    pub fpdus_fast: u64,
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

/// Messages, DDP segments and octets of one RDMAP opcode in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCount {
    /// Messages (segments with the Last flag).
    pub messages: u64,
    /// DDP segments.
    pub segments: u64,
    /// Payload octets after the DDP and RDMAP headers (a Read Request's or Terminate's
    /// own fields included).
    pub bytes: u64,
}

/// What a connection sent and received per RDMAP opcode (RFC 5040 §4.2, RFC 7306 §6),
/// indexed by the 4-bit opcode; counted on every DDP segment it framed or was handed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounters {
    /// Sent, by opcode.
    pub sent: [OpCount; 16],
    /// Received, by opcode (in order or placed ahead).
    pub received: [OpCount; 16],
}

impl OpCounters {
    /// Counts one DDP segment of `len` octets whose first two octets (DDP and RDMAP
    /// control) are `control`.
    pub(crate) fn count(dir: &mut [OpCount; 16], control: [u8; 2], len: usize) {
        let tagged = control[0] & 0x80 != 0;
        let last = control[0] & 0x40 != 0;
        let header = if tagged {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        let c = &mut dir[usize::from(control[1] & 0x0F)];
        c.segments += 1;
        c.messages += u64::from(last);
        c.bytes += len.saturating_sub(header) as u64;
    }

    /// Counts a received DDP segment (its bytes, headers first).
    pub(crate) fn received(&mut self, segment: &[u8]) {
        if let [a, b, ..] = *segment {
            Self::count(&mut self.received, [a, b], segment.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_opcode_with_headers_off() {
        let mut c = OpCounters::default();
        // Tagged Write (opcode 0), last: 14 header octets + 100.
        c.received(&[0xC1, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let mut seg = vec![0xC1, 0x40];
        seg.resize(114, 0);
        c.received(&seg);
        // Untagged Send (opcode 3), not last: 18 header octets + 10.
        let mut send = vec![0x41 & !0x40, 0x43];
        send.resize(28, 0);
        c.received(&send);
        assert_eq!(
            c.received[0],
            OpCount {
                messages: 2,
                segments: 2,
                bytes: 100
            }
        );
        assert_eq!(
            c.received[3],
            OpCount {
                messages: 0,
                segments: 1,
                bytes: 10
            }
        );
        c.received(&[0x80]);
        assert_eq!(c.received.iter().map(|o| o.segments).sum::<u64>(), 3);
    }
}
