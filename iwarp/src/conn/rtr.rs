//! The zero-length ready-to-receive message of peer-to-peer mode (RFC 6581 §5).

use crate::mpa::RtrKind;
use crate::wire::ddp::{DdpRepr, TaggedRepr, UntaggedRepr};
use crate::wire::rdmap::{Opcode, RdmapControl, RDMAP_VERSION, READ_REQUEST_LEN};

/// The DDP segment an initiator sends as its RTR: a zero-length RDMA Write (STag 1, TO 0,
/// as Linux siw sends it), a zero-length Send (QN 0, MSN 1) or a zero-length RDMA Read
/// Request (QN 1, MSN 1, every field zero). The responder's MPA layer consumes it, so
/// neither side's RDMAP engine counts it.
pub fn rtr_message(kind: RtrKind) -> Vec<u8> {
    let control = |opcode| {
        RdmapControl {
            version: RDMAP_VERSION,
            opcode,
        }
        .to_octet()
    };
    let (repr, body) = match kind {
        RtrKind::Write => (
            DdpRepr::Tagged(TaggedRepr {
                last: true,
                rsvd_ulp: control(Opcode::Write),
                stag: 1,
                to: 0,
            }),
            0,
        ),
        RtrKind::Send => (
            DdpRepr::Untagged(UntaggedRepr {
                last: true,
                rsvd_ulp: control(Opcode::Send),
                rsvd_ulp_word: 0,
                qn: 0,
                msn: 1,
                mo: 0,
            }),
            0,
        ),
        RtrKind::Read => (
            DdpRepr::Untagged(UntaggedRepr {
                last: true,
                rsvd_ulp: control(Opcode::ReadRequest),
                rsvd_ulp_word: 0,
                qn: 1,
                msn: 1,
                mo: 0,
            }),
            READ_REQUEST_LEN,
        ),
    };
    let mut out = vec![0u8; repr.buffer_len() + body];
    // The buffer is sized for the header, so emitting cannot fail.
    let _ = repr.emit(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpa::negotiate::rtr_matches;

    // RFC 6581 §5: each RTR kind is recognised by the responder's check.
    #[test]
    fn rtr_messages_match_their_kind_only() {
        for k in [RtrKind::Write, RtrKind::Send, RtrKind::Read] {
            let m = rtr_message(k);
            for other in [RtrKind::Write, RtrKind::Send, RtrKind::Read] {
                assert_eq!(rtr_matches(other, &m), other == k, "{k:?} vs {other:?}");
            }
        }
        assert_eq!(
            rtr_message(RtrKind::Write),
            [0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]
        );
    }
}
