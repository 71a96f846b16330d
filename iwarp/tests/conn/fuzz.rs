//! Arbitrary TCP input never panics a connection: random segments (valid FPDUs, mangled
//! FPDUs, garbage) at random positions, in or out of order, in every phase.

use std::time::Duration;

use tcp::Instant;

use iwarp::conn::{ConnConfig, Connection};
use iwarp::mem::{Access, PdId, RegionSpec, STag, SimpleMemory};
use iwarp::mpa::{Framer, MarkerSpacing};
use iwarp::mpa::{MpaConfig, RtrKind};
use iwarp::wire::ddp::{DdpRepr, TaggedRepr, UntaggedRepr};
use iwarp::wire::mpa::RtrTypes;
use proptest::prelude::*;
use tcp::{SegmentSink, SegmentSource};

const REPLY: &[u8] = b"MPA ID Rep Frame\x10\x02\x00\x04\x00\x01\x00\x01";
const REQUEST_CRC_MARKERS: &[u8] = b"MPA ID Req Frame\xd0\x02\x00\x04\x80\x01\xc0\x01";

#[derive(Debug, Clone)]
enum Op {
    /// A segment at `offset` from RCV.NXT (0 = in order).
    Segment { offset: u16, data: Vec<u8> },
    /// Bytes handed in order.
    InOrder(Vec<u8>),
    /// Time passes.
    Wait(u16),
    /// TCP asks for a unit.
    Poll(u16),
    /// A well-formed FPDU in order: an RDMA Write of `len` octets at `to`, or a Send.
    Fpdu { tagged: bool, to: u16, len: u16 },
}

fn op() -> impl Strategy<Value = Op> {
    let data = prop::collection::vec(any::<u8>(), 0..300);
    prop_oneof![
        (0u16..3000, data.clone()).prop_map(|(offset, data)| Op::Segment { offset, data }),
        data.prop_map(Op::InOrder),
        any::<u16>().prop_map(Op::Wait),
        (0u16..2000).prop_map(Op::Poll),
        (any::<bool>(), any::<u16>(), 0u16..1400).prop_map(|(tagged, to, len)| Op::Fpdu {
            tagged,
            to,
            len
        }),
    ]
}

fn memory() -> (SimpleMemory, STag) {
    let mut m = SimpleMemory::with_heap(1 << 16);
    let rights = Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_READ;
    let stag = m
        .register(RegionSpec::new(
            0,
            1 << 16,
            rights | Access::REMOTE_WRITE,
            PdId(1),
        ))
        .unwrap();
    (m, stag)
}

/// Frames FPDUs as the peer would: `framer` for the direction, `stag` a valid sink.
struct Peer {
    framer: Framer,
    stag: STag,
    msn: u32,
    /// First FPDU octet of the direction: FPDUs start 4-aligned from here (RFC 5044 §4.1).
    start: u32,
}

impl Peer {
    fn fpdu(&mut self, seq: u32, tagged: bool, to: u16, len: u16) -> Vec<u8> {
        let body = vec![0xab; usize::from(len)];
        let mut hdr = [0u8; 18];
        let n = if tagged {
            DdpRepr::Tagged(TaggedRepr {
                last: true,
                rsvd_ulp: 0x40,
                stag: self.stag.0,
                to: u64::from(to),
            })
        } else {
            self.msn += 1;
            DdpRepr::Untagged(UntaggedRepr {
                last: true,
                rsvd_ulp: 0x43,
                rsvd_ulp_word: 0,
                qn: 0,
                msn: self.msn,
                mo: 0,
            })
        }
        .emit(&mut hdr)
        .unwrap();
        let mut out = Vec::new();
        self.framer
            .emit_fpdu(seq, &[&hdr[..n], &body], &mut out)
            .unwrap();
        out
    }
}

fn drive(
    mut c: Connection,
    mut mem: SimpleMemory,
    start: u32,
    prefix: &[u8],
    ops: Vec<Op>,
    mut peer: Option<Peer>,
) {
    let t0 = Instant::from_millis(1_000);
    let mut now = t0;
    let mut rcv_nxt = start;
    let mut snd_nxt = 100u32;
    c.on_segment(&mut mem, now, rcv_nxt, prefix, true, rcv_nxt);
    rcv_nxt = rcv_nxt.wrapping_add(prefix.len() as u32);
    c.on_advance(&mut mem, now, rcv_nxt);
    for op in ops {
        match op {
            Op::Segment { offset, data } => {
                let seq = rcv_nxt.wrapping_add(u32::from(offset));
                let in_order = offset == 0;
                let consumed = c.on_segment(&mut mem, now, seq, &data, in_order, rcv_nxt);
                assert!(consumed.total() <= data.len());
                if in_order {
                    assert_eq!(consumed.total(), data.len(), "in-order bytes are taken");
                    rcv_nxt = rcv_nxt.wrapping_add(data.len() as u32);
                    c.on_advance(&mut mem, now, rcv_nxt);
                }
            }
            Op::InOrder(data) => {
                c.on_in_order(&mut mem, now, rcv_nxt, &data);
                rcv_nxt = rcv_nxt.wrapping_add(data.len() as u32);
                c.on_advance(&mut mem, now, rcv_nxt);
            }
            Op::Wait(ms) => {
                now = now + Duration::from_millis(u64::from(ms));
                c.handle_timeout(now, &mem);
            }
            Op::Fpdu { tagged, to, len } => {
                if let Some(p) = peer.as_mut() {
                    let misalign = (rcv_nxt.wrapping_sub(p.start) % 4) as usize;
                    if misalign != 0 {
                        c.on_in_order(&mut mem, now, rcv_nxt, &[0; 3][..4 - misalign]);
                        rcv_nxt = rcv_nxt.wrapping_add(4 - misalign as u32);
                        c.on_advance(&mut mem, now, rcv_nxt);
                    }
                    let f = p.fpdu(rcv_nxt, tagged, to, len);
                    let consumed = c.on_segment(&mut mem, now, rcv_nxt, &f, true, rcv_nxt);
                    assert_eq!(consumed.total(), f.len());
                    rcv_nxt = rcv_nxt.wrapping_add(f.len() as u32);
                    c.on_advance(&mut mem, now, rcv_nxt);
                }
            }
            Op::Poll(max) => {
                if let Some(u) = c.next_unit(&mut mem, now, snd_nxt, usize::from(max)) {
                    assert!(u.octets().len() <= usize::from(max));
                    snd_nxt = snd_nxt.wrapping_add(u.octets().len() as u32);
                }
            }
        }
        while c.poll_event().is_some() {}
        while c.poll_completion().is_some() {}
        while c.poll_llp_request().is_some() {}
        let _ = c.state();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    // RFC 5044 §7.1 (negotiation phase): any bytes where the Reply should be.
    #[test]
    fn initiator_negotiating(ops in prop::collection::vec(op(), 0..40)) {
        let cfg = ConnConfig::new(MpaConfig::default());
        let t0 = Instant::from_millis(1_000);
        let mut mem = memory().0;
        let mut c = Connection::initiator(cfg, t0).unwrap();
        c.next_unit(&mut mem, t0, 1, 1448);
        drive(c, mem, 1, &[], ops, None);
    }

    // RFC 5044 §4–§6 (FPDU mode, CRC and markers): any bytes after a valid Reply.
    #[test]
    fn initiator_fpdu_mode(ops in prop::collection::vec(op(), 0..40), crc in any::<bool>()) {
        let mpa = MpaConfig {
            want_markers: true,
            accept_markers: true,
            require_crc: crc,
            ird: 1,
            ord: 1,
            ..MpaConfig::default()
        };
        let cfg = ConnConfig { pd: PdId(1), ..ConnConfig::new(mpa) };
        let t0 = Instant::from_millis(1_000);
        let (mut mem, stag) = memory();
        let mut c = Connection::initiator(cfg, t0).unwrap();
        c.next_unit(&mut mem, t0, 1, 1448);
        let start = u32::MAX - 10;
        let rx_start = start.wrapping_add(REPLY.len() as u32);
        let framer = Framer::new(crc, Some(MarkerSpacing::new(rx_start)));
        drive(c, mem, start, REPLY, ops, Some(Peer { framer, stag, msn: 0, start: rx_start }));
    }

    // RFC 6581 §5: a peer-to-peer responder fed anything after a valid Request.
    #[test]
    fn responder_awaiting_rtr(ops in prop::collection::vec(op(), 0..40)) {
        let mpa = MpaConfig {
            accept_markers: true,
            p2p: Some(RtrTypes { send: true, write: true, read: true }),
            ..MpaConfig::default()
        };
        let cfg = ConnConfig { pd: PdId(1), ..ConnConfig::new(mpa) };
        let t0 = Instant::from_millis(1_000);
        let (mut mem, stag) = memory();
        let mut c = Connection::responder(cfg, t0).unwrap();
        c.on_segment(&mut mem, t0, 1, REQUEST_CRC_MARKERS, true, 1);
        c.on_advance(&mut mem, t0, 1 + REQUEST_CRC_MARKERS.len() as u32);
        while c.poll_event().is_some() {}
        c.accept(t0, &mut mem, b"pd").unwrap();
        c.next_unit(&mut mem, t0, 1, 1448);
        assert_eq!(c.negotiated().and_then(|n| n.rtr), Some(RtrKind::Write));
        let rx_start = 1 + REQUEST_CRC_MARKERS.len() as u32;
        // The Request asked for CRC and markers: both apply to what the initiator sends.
        let framer = Framer::new(true, Some(MarkerSpacing::new(rx_start)));
        drive(c, mem, rx_start, &[], ops, Some(Peer { framer, stag, msn: 0, start: rx_start }));
    }
}
