//! The engines over the MPA framer and receiver (CRC, markers) and a lossy-order TCP model:
//! TCP segments cross a `tcp::sim::Link` that holds half of them back behind later ones;
//! MPA hands FPDUs up early where markers allow, the engine places them at once and
//! delivers in order (RFC 5041 §3 item 5, RFC 5044 §6–§7).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use iwarp::ddp::SegmentPos;
use iwarp::mem::{STag, Sge};
use iwarp::mpa::{CrcErrorPolicy, Framer, MarkerSpacing, Receiver, ReceiverConfig};
use iwarp::rdmap::{CompletionStatus, RemoteBuf, SendOp, SendWr, WorkQueue};
use tcp::sim::{self, Link, LinkConfig};
use tcp::Instant;

const EMSS: usize = 1460;
const START: u32 = 0xFFFF_F000; // sequence numbers wrap during the test

/// One direction: sender framer state and the receiver's MPA + TCP reassembly state.
struct Direction {
    framer: Framer,
    tx_seq: u32,
    rx: Receiver,
    rcv_nxt: u32,
    held: BTreeMap<u32, Vec<u8>>,
    /// FPDUs handed up ahead of RCV.NXT.
    early: usize,
}

impl Direction {
    fn new(markers: bool) -> Self {
        Direction {
            framer: Framer::new(true, markers.then(|| MarkerSpacing::new(START))),
            tx_seq: START,
            rx: Receiver::new(ReceiverConfig {
                crc: true,
                markers,
                start_seq: START,
                min_ulpdu_len: 14,
                max_ulpdu_len: u16::MAX,
                crc_errors: CrcErrorPolicy::Fail,
            }),
            rcv_nxt: START,
            held: BTreeMap::new(),
            early: 0,
        }
    }

    /// Frames everything `from` wants to send into FPDU-aligned TCP segments.
    fn transmit(&mut self, from: &mut Side, mulpdu: usize) -> Vec<(u32, Vec<u8>)> {
        let segs = from.drain_tx(mulpdu);
        let mut units = Vec::new();
        let mut rest: &[Vec<u8>] = &segs;
        while !rest.is_empty() {
            let gather: Vec<[&[u8]; 1]> = rest.iter().map(|s| [&s[..]]).collect();
            let mut out = Vec::new();
            let info = self
                .framer
                .build_unit(self.tx_seq, EMSS, &gather, &mut out)
                .unwrap();
            units.push((self.tx_seq, out));
            self.tx_seq = info.end_seq;
            rest = &rest[info.fpdus..];
        }
        units
    }

    /// Hands one TCP segment to the receiving side, like a TCP engine would.
    fn receive(&mut self, to: &mut Side, seq: u32, payload: Vec<u8>) {
        let framer = self.framer;
        let early = &mut self.early;
        let mut deliver = |side: &mut Side, d: iwarp::mpa::Delivery<'_>| {
            if !d.in_order {
                *early += 1;
            }
            let start = u64::from(d.seq.wrapping_sub(START));
            let end = start + framer.wire_len(d.seq, d.ulpdu.len()) as u64;
            side.engine.handle_ddp_segment(
                now(),
                SegmentPos { start, end },
                d.ulpdu,
                &mut side.mem,
            );
        };
        if seq == self.rcv_nxt {
            self.rx
                .handle_segment(seq, &payload, true, |d| deliver(to, d))
                .unwrap();
            self.rcv_nxt = seq.wrapping_add(payload.len() as u32);
            while let Some(p) = self.held.remove(&self.rcv_nxt) {
                let s = self.rcv_nxt;
                self.rx
                    .handle_segment(s, &p, true, |d| deliver(to, d))
                    .unwrap();
                self.rcv_nxt = s.wrapping_add(p.len() as u32);
            }
            to.engine.handle_in_order_position(
                now(),
                u64::from(self.rcv_nxt.wrapping_sub(START)),
                &mut to.mem,
            );
        } else {
            self.rx
                .handle_segment(seq, &payload, false, |d| deliver(to, d))
                .unwrap();
            self.held.insert(seq, payload);
        }
    }

    /// Sends everything `from` (link end `end`) wants to send across `link` at `now`, each
    /// packet its sequence number and the segment, and hands `to` what arrived 1 ms later.
    fn hop(
        &mut self,
        link: &mut Link,
        now: Instant,
        end: sim::Side,
        (from, to): (&mut Side, &mut Side),
        mulpdu: usize,
    ) {
        for (seq, unit) in self.transmit(from, mulpdu) {
            let mut packet = seq.to_be_bytes().to_vec();
            packet.extend(unit);
            link.send(now, end, packet);
        }
        while let Some(d) = link.poll_delivery(now + Duration::from_millis(1)) {
            let (seq, segment) = d.bytes.split_at(4);
            let seq = u32::from_be_bytes(seq.try_into().unwrap());
            self.receive(to, seq, segment.to_vec());
        }
    }
}

/// No loss; half the segments are held back behind the rest of their burst.
fn shuffling_link(seed: u64) -> Link {
    let cfg = LinkConfig {
        rate_bps: None,
        reorder: 0.5,
        ..LinkConfig::default()
    };
    Link::new(cfg, seed)
}

fn run(markers: bool, seed: u64) -> usize {
    let mulpdu = iwarp::mpa::mulpdu(EMSS, markers);
    let mut p = Pair::new(cfg(1), cfg(2), mulpdu);
    let a: STag = p.a.region(0, 1 << 16, all(), 0);
    let b: STag = p.b.region(0, 1 << 16, all(), 0);
    p.a.write_bytes(0, &pattern(1 << 15, 1));
    p.b.write_bytes(1 << 15, &pattern(1 << 15, 2));
    for i in 0..4 {
        p.b.post_recv(i, b, 8192 * i, 8192);
    }
    let mut id = 0;
    for n in [0u32, 100, 3000, 7000] {
        p.a.engine
            .post_send(SendWr::new(
                id,
                SendOp::Send {
                    sgl: iwarp::mem::Sgl::one(Sge {
                        stag: a,
                        to: 0,
                        len: n,
                    }),
                    solicited: false,
                    invalidate: None,
                },
            ))
            .unwrap();
        p.a.engine
            .post_send(SendWr::new(
                id + 1,
                SendOp::Write {
                    sgl: iwarp::mem::Sgl::one(Sge {
                        stag: a,
                        to: 100,
                        len: n,
                    }),
                    remote: RemoteBuf {
                        stag: b,
                        to: 40_000 + u64::from(n),
                    },
                },
            ))
            .unwrap();
        p.a.engine
            .post_send(SendWr::new(
                id + 2,
                SendOp::Read {
                    sink: RemoteBuf {
                        stag: a,
                        to: 40_000 + u64::from(n),
                    },
                    remote: RemoteBuf {
                        stag: b,
                        to: (1 << 15) + 7,
                    },
                    len: n,
                },
            ))
            .unwrap();
        id += 3;
    }
    let mut ab = Direction::new(markers);
    let mut ba = Direction::new(markers);
    let mut link = shuffling_link(seed);
    for round in 0..20 {
        let t = Instant::from_millis(2 * round);
        ab.hop(&mut link, t, sim::Side::A, (&mut p.a, &mut p.b), mulpdu);
        let t = t + Duration::from_millis(1);
        ba.hop(&mut link, t, sim::Side::B, (&mut p.b, &mut p.a), mulpdu);
    }
    let ca = p.a.completions();
    assert_eq!(
        ca.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        (0..12).collect::<Vec<_>>()
    );
    assert!(ca.iter().all(|c| c.status == CompletionStatus::Success));
    let cb = p.b.completions();
    assert_eq!(cb.len(), 4);
    assert!(cb.iter().all(|c| c.queue == WorkQueue::Recv));
    for (i, n) in [0usize, 100, 3000, 7000].into_iter().enumerate() {
        assert_eq!(cb[i].byte_len as usize, n);
        assert_eq!(p.b.bytes(8192 * i as u64, n), &pattern(1 << 15, 1)[..n]);
        assert_eq!(
            p.b.bytes(40_000 + n as u64, n),
            &pattern(1 << 15, 1)[100..100 + n]
        );
        assert_eq!(
            p.a.bytes(40_000 + n as u64, n),
            &pattern(1 << 15, 2)[7..7 + n]
        );
    }
    assert!(ab.held.is_empty() && ba.held.is_empty());
    ab.early + ba.early
}

#[test]
fn over_mpa_with_markers_shuffled() {
    let early: usize = (0..6).map(|seed| run(true, seed)).sum();
    assert!(early > 0, "some FPDUs were placed out of order");
}

#[test]
fn over_mpa_without_markers_shuffled() {
    let early: usize = (0..6).map(|seed| run(false, seed)).sum();
    assert!(early > 0, "aligned FPDUs were placed out of order");
}
