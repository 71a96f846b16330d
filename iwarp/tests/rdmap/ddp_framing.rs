//! SPEC-DIGEST §8 group A: DDP framing at the sender.

use crate::common::*;
use iwarp::ddp::segmenter::MessageTarget;
use iwarp::ddp::{MsnCounters, OutgoingMessage, Segmenter};
use iwarp::mem::{Access, STag, Sge};
use iwarp::mpa::Framer;
use iwarp::rdmap::{Digesting, Engine, RemoteBuf, SendOp, SendWr};
use iwarp::wire::crc::crc32c;
use iwarp::wire::ddp::{DdpRepr, Segment, TaggedRepr, UntaggedRepr};
use tcp::checksum::payload_sum;

fn parse(seg: &[u8]) -> DdpRepr {
    DdpRepr::parse(&Segment::new_checked(seg).unwrap()).unwrap()
}

/// The header of `seg`, which must be untagged.
fn untagged(seg: &[u8]) -> UntaggedRepr {
    match parse(seg) {
        DdpRepr::Untagged(u) => u,
        DdpRepr::Tagged(t) => panic!("untagged segment expected, got {t:?}"),
    }
}

/// The header of `seg`, which must be tagged.
fn tagged(seg: &[u8]) -> TaggedRepr {
    match parse(seg) {
        DdpRepr::Tagged(t) => t,
        DdpRepr::Untagged(u) => panic!("tagged segment expected, got {u:?}"),
    }
}

/// A sender with a 1 MiB... region at offset 0 holding a pattern.
fn sender(len: u64) -> (Side, STag) {
    let mut s = Side::new(cfg(1));
    let stag = s.region(0, len.max(1), Access::LOCAL_READ | Access::LOCAL_WRITE, 0);
    s.write_bytes(0, &pattern(len as usize, 3));
    (s, stag)
}

/// The segments a fresh `sender(len)` emits at `mulpdu` after posting `wrs(stag)`.
fn sent(len: u64, mulpdu: usize, wrs: impl FnOnce(STag) -> Vec<SendWr>) -> Vec<Vec<u8>> {
    let (mut s, stag) = sender(len);
    for wr in wrs(stag) {
        s.engine.post_send(wr).unwrap();
    }
    s.drain_tx(mulpdu)
}

fn write_wr(id: u64, stag: STag, len: u32, to: u64) -> SendWr {
    SendWr::new(
        id,
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(Sge { stag, to: 0, len }),
            remote: RemoteBuf {
                stag: STag(0x1234_5600),
                to,
            },
        },
    )
}

#[test]
fn a01_tagged_header_is_14_octets() {
    // RFC 5041 §4.2
    let segs = sent(100, 1500, |stag| vec![write_wr(1, stag, 100, 7)]);
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].len(), 14 + 100);
    assert_eq!(&segs[0][2..6], &0x1234_5600u32.to_be_bytes());
    assert_eq!(&segs[0][6..14], &7u64.to_be_bytes());
    assert_eq!(&segs[0][14..], &pattern(100, 3)[..]);
}

#[test]
fn a02_untagged_header_is_18_octets() {
    // RFC 5041 §4.3
    let segs = sent(100, 1500, |stag| vec![send_wr(1, stag, 0, 100)]);
    assert_eq!(segs[0].len(), 18 + 100);
    assert_eq!(&segs[0][6..10], &0u32.to_be_bytes()); // QN 0
    assert_eq!(&segs[0][10..14], &1u32.to_be_bytes()); // MSN 1
    assert_eq!(&segs[0][14..18], &0u32.to_be_bytes()); // MO 0
    assert_eq!(&segs[0][18..], &pattern(100, 3)[..]);
}

#[test]
fn a03_control_octet_bits() {
    // RFC 5041 §4.1; RFC 5040 Fig. 4
    let segs = sent(3000, 1000, |stag| {
        vec![send_wr(1, stag, 0, 3000), write_wr(2, stag, 3000, 0)]
    });
    for seg in segs {
        assert_eq!(seg[0] & 0x3C, 0);
        assert_eq!(seg[0] & 0x03, 1);
        let tagged = seg[0] & 0x80 != 0;
        let opcode = seg[1] & 0x0F;
        assert_eq!(tagged, opcode == 0x0 || opcode == 0x2);
    }
}

#[test]
fn a04_exactly_one_last_segment_and_it_is_last() {
    // RFC 5041 §4.1
    let segs = sent(5000, 1000, |stag| vec![send_wr(1, stag, 0, 5000)]);
    let lasts: Vec<bool> = segs.iter().map(|g| parse(g).last()).collect();
    assert_eq!(lasts.iter().filter(|l| **l).count(), 1);
    assert!(*lasts.last().unwrap());
}

#[test]
fn a05_mo_contiguous_from_zero() {
    // RFC 5041 §4.1, §5.2
    let mut expect = 0u32;
    for seg in sent(5000, 777, |stag| vec![send_wr(1, stag, 0, 5000)]) {
        assert_eq!(untagged(&seg).mo, expect);
        expect += (seg.len() - 18) as u32;
    }
    assert_eq!(expect, 5000);
}

#[test]
fn a06_same_rsvdulp_stag_qn_msn_on_every_segment() {
    // RFC 5041 §4.2, §4.3
    let segs = sent(5000, 900, |stag| {
        vec![write_wr(1, stag, 5000, 0), send_wr(2, stag, 0, 5000)]
    });
    let mut tagged = Vec::new();
    let mut untagged = Vec::new();
    for g in &segs {
        match parse(g) {
            DdpRepr::Tagged(t) => tagged.push((t.rsvd_ulp, t.stag)),
            DdpRepr::Untagged(u) => untagged.push((u.rsvd_ulp, u.rsvd_ulp_word, u.qn, u.msn)),
        }
    }
    assert!(tagged.len() > 1 && untagged.len() > 1);
    assert!(tagged.windows(2).all(|w| w[0] == w[1]));
    assert!(untagged.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn a07_msn_starts_at_one_and_wraps() {
    // RFC 5041 §4.3; VERBS-00 §6.2.1.2
    let mut m = MsnCounters::new();
    for qn in 0..3 {
        assert_eq!(m.take(qn), 1);
        assert_eq!(m.take(qn), 2);
    }
    m.set(0, u32::MAX);
    assert_eq!(m.take(0), u32::MAX);
    assert_eq!(m.take(0), 0);
    assert_eq!(m.take(0), 1);
    // Through the engine: three Sends carry MSN 1, 2, 3; after a wrap MSN 0 follows.
    let (mut s, stag) = sender(10);
    for i in 0..3 {
        s.engine.post_send(send_wr(i, stag, 0, 10)).unwrap();
    }
    let msns: Vec<u32> = s.drain_tx(1500).iter().map(|g| untagged(g).msn).collect();
    assert_eq!(msns, vec![1, 2, 3]);
    s.engine.set_next_send_msn(0, u32::MAX);
    s.engine.post_send(send_wr(9, stag, 0, 10)).unwrap();
    s.engine.post_send(send_wr(10, stag, 0, 10)).unwrap();
    let msns: Vec<u32> = s.drain_tx(1500).iter().map(|g| untagged(g).msn).collect();
    assert_eq!(msns, vec![u32::MAX, 0]);
}

#[test]
fn a08_send_2048_mulpdu_1500() {
    // RFC 5041 §5.2 example
    let segs = sent(2048, 1500, |stag| vec![send_wr(1, stag, 0, 2048)]);
    assert_eq!(segs.len(), 2);
    let (a, b) = (untagged(&segs[0]), untagged(&segs[1]));
    assert_eq!((a.mo, segs[0].len() - 18, a.last), (0, 1482, false));
    assert_eq!((b.mo, segs[1].len() - 18, b.last), (1482, 566, true));
}

#[test]
fn a09_write_2048_at_16384_mulpdu_1500() {
    // RFC 5041 §5.2 example
    let segs = sent(2048, 1500, |stag| vec![write_wr(1, stag, 2048, 16384)]);
    assert_eq!(segs.len(), 2);
    let (a, b) = (tagged(&segs[0]), tagged(&segs[1]));
    assert_eq!((a.to, segs[0].len() - 14, a.last), (16384, 1486, false));
    assert_eq!((b.to, segs[1].len() - 14, b.last), (17870, 562, true));
}

#[test]
fn a10_segments_never_exceed_mulpdu_and_mulpdu_may_change() {
    // RFC 5041 §3 items 1–2, §5.2: segments are created when polled, with the MULPDU then
    // in force; none is re-segmented.
    let mut seg = Segmenter::new(OutgoingMessage {
        target: MessageTarget::Tagged { stag: 5, to: 0 },
        rsvd_ulp: 0x40,
        len: 10_000,
    });
    let mut total = 0;
    for mulpdu in [1500usize, 600, 2000, 100, 9000] {
        let p = seg.next_segment(mulpdu).unwrap();
        assert!(p.len as usize + 14 <= mulpdu);
        assert_eq!(p.offset, total);
        total += p.len;
    }
    assert!(seg.is_done());
    assert_eq!(total, 10_000);
    // Too small a MULPDU produces nothing rather than an oversize segment.
    let mut tiny = Segmenter::new(OutgoingMessage {
        target: MessageTarget::Tagged { stag: 5, to: 0 },
        rsvd_ulp: 0x40,
        len: 10,
    });
    assert!(tiny.next_segment(14).is_none());
    // Through the engine, with a random-ish MULPDU per poll.
    let (mut s, stag) = sender(20_000);
    s.engine.post_send(send_wr(1, stag, 0, 20_000)).unwrap();
    let mut got = 0;
    for i in 0.. {
        let mulpdu = 100 + (i * 397) % 3000;
        match s.engine.poll_segment(now(), mulpdu, &s.mem) {
            Some(g) => {
                assert!(g.len() <= mulpdu);
                got += g.payload().len();
            }
            None => break,
        }
    }
    assert_eq!(got, 20_000);
}

#[test]
fn a11_zero_length_messages_are_one_segment() {
    // RFC 5041 §5.2; RFC 5040 §5.1, §5.2.1, §5.3
    let segs = sent(0, 1500, |stag| {
        vec![send_wr(1, stag, 0, 0), write_wr(2, stag, 0, 99)]
    });
    assert_eq!(segs.len(), 2);
    assert_eq!(segs[0].len(), 18);
    assert_eq!(segs[1].len(), 14);
    assert!(parse(&segs[0]).last() && parse(&segs[1]).last());
    // Zero-length Read Response: see rdmap tests (e03).
}

#[test]
fn a12_messages_leave_in_posting_order() {
    // RFC 5041 §5.3; RFC 5040 §5.5 rule 13
    let segs = sent(3000, 1000, |stag| {
        (0..6u64)
            .map(|i| match i % 2 {
                0 => send_wr(i, stag, 0, 2500),
                _ => write_wr(i, stag, 2500, i * 10_000),
            })
            .collect()
    });
    let kinds: Vec<bool> = segs
        .iter()
        .filter(|g| parse(g).last())
        .map(|g| g[0] & 0x80 != 0)
        .collect();
    assert_eq!(kinds, vec![false, true, false, true, false, true]);
    // Sends carry MSN 1, 2, 3 in order.
    let msns: Vec<u32> = segs
        .iter()
        .filter_map(|g| match parse(g) {
            DdpRepr::Untagged(u) if u.last => Some(u.msn),
            _ => None,
        })
        .collect();
    assert_eq!(msns, vec![1, 2, 3]);
}

#[test]
fn reused_payload_buffers_carry_no_stale_bytes() {
    // RFC 5041 §5.2: each segment carries exactly its own payload.
    let (mut s, stag) = sender(3000);
    s.engine.post_send(send_wr(1, stag, 0, 3000)).unwrap();
    s.engine.post_send(write_wr(2, stag, 10, 0)).unwrap();
    let mut buf = vec![0xAA; 5000];
    let mut total = Vec::new();
    while let Some(seg) = s.engine.poll_segment_reusing(now(), 1000, &s.mem, buf) {
        assert!(seg.len() <= 1000);
        total.push(seg.to_vec());
        buf = seg.into_buffer();
    }
    let fresh = sent(3000, 1000, |stag| {
        vec![send_wr(1, stag, 0, 3000), write_wr(2, stag, 10, 0)]
    });
    assert_eq!(total, fresh);
}

#[test]
fn segments_built_in_buffers_of_any_length_are_the_same() {
    // RFC 5041 §5.2 (each segment its own header and payload); RFC 5044 §7.1 (an FPDU
    // finished in place is ULPDU_Length room, then the ULPDU). The segment is built in the
    // buffer it is handed: fresh, shorter than a header, longer than an FPDU, each with
    // stale octets; a Read Request (inline, no payload) between the Writes and Sends.
    let wrs = |stag| {
        vec![
            send_wr(1, stag, 0, 3000),
            write_wr(2, stag, 2500, 0),
            read_wr(3, stag, 0, STag(0x99), 0, 4000),
            send_wr(4, stag, 0, 0),
            write_wr(5, stag, 10, 0),
        ]
    };
    let (mut s, stag) = sender(3000);
    for wr in wrs(stag) {
        s.engine.post_send(wr).unwrap();
    }
    let lengths = [0usize, 7, 30, 5000];
    let mut total = Vec::new();
    let mut buf = Vec::new();
    while let Some(seg) = s.engine.poll_segment_reusing(now(), 1000, &s.mem, buf) {
        let whole = seg.to_vec();
        assert_eq!(whole, [seg.header(), seg.payload()].concat());
        assert_eq!(seg.len(), whole.len());
        let mut fpdu = vec![0, 0];
        fpdu.extend_from_slice(&whole);
        total.push(whole);
        // The FPDU is finished in place after the room for a frame's headers.
        assert_eq!(seg.into_ulpdu_buffer()[iwarp::rdmap::FRAME_ROOM..], fpdu);
        buf = vec![0xAA; lengths[total.len() % lengths.len()]];
    }
    let fresh = sent(3000, 1000, wrs);
    // 3000 octets in 982-octet Send segments, 2500 in 986-octet Write segments.
    assert_eq!(total.len(), 4 + 3 + 1 + 1 + 1);
    assert_eq!(total, fresh);
}

/// Every segment `engine` sends now, each with what `poll_segment_digested` summed of it.
fn drain_digested(
    engine: &mut Engine,
    mem: &iwarp::mem::SimpleMemory,
    mulpdu: usize,
    min_len: usize,
) -> Vec<(Vec<u8>, Option<iwarp::wire::crcsum::CrcSum>)> {
    let digesting = Digesting {
        seed: Framer::crc_seed,
        min_len,
    };
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some((seg, digest)) =
        engine.poll_segment_digested(now(), mulpdu, mem, &mut buf, digesting)
    {
        out.push((seg.to_vec(), digest));
        buf = seg.into_buffer();
    }
    out
}

// RFC 5044 §4.1: asked to, the engine takes each segment's FPDU CRC (continuing from the
// CRC of its ULPDU_Length field) and TCP sum as it builds the segment, the payload's in
// the pass that reads it out of registered memory: for gathered Sends and Writes (two
// SGEs, many segments), an inline Read Request and a Read Response served from a region.
// The segments are those `poll_segment` builds; one shorter than `min_len` is not summed.
#[test]
fn digested_segments_carry_their_fpdus_crc_and_sum() {
    let two_sges = |stag| {
        SendWr::new(
            7,
            SendOp::Send {
                sgl: iwarp::mem::Sgl::from(vec![
                    Sge {
                        stag,
                        to: 100,
                        len: 3000,
                    },
                    Sge {
                        stag,
                        to: 9000,
                        len: 1234,
                    },
                ]),
                solicited: false,
                invalidate: None,
            },
        )
    };
    let posts = |stag| {
        vec![
            write_wr(1, stag, 9000, 0),
            two_sges(stag),
            send_wr(3, stag, 5, 40),
        ]
    };
    let plain = sent(20_000, 1000, posts);
    let (mut s, stag) = sender(20_000);
    for wr in posts(stag) {
        s.engine.post_send(wr).unwrap();
    }
    let digested = drain_digested(&mut s.engine, &s.mem, 1000, 100);
    let check = |segs: &[(Vec<u8>, Option<iwarp::wire::crcsum::CrcSum>)], min_len: usize| {
        for (i, (seg, digest)) in segs.iter().enumerate() {
            if seg.len() < min_len {
                assert!(
                    digest.is_none(),
                    "segment {i} of {} octets summed",
                    seg.len()
                );
                continue;
            }
            let d = digest.expect("a long segment is summed");
            let mut covered = (seg.len() as u16).to_be_bytes().to_vec();
            covered.extend_from_slice(seg);
            assert_eq!(d.crc, crc32c(&covered), "segment {i}");
            assert_eq!(d.sum.folded(), payload_sum(seg).folded(), "segment {i}");
            assert_eq!(d.sum.octets(), seg.len());
        }
    };
    check(&digested, 100);
    assert!(digested.iter().any(|(seg, _)| seg.len() < 100));
    let segs: Vec<Vec<u8>> = digested.into_iter().map(|(seg, _)| seg).collect();
    assert_eq!(segs, plain);

    // A Read: its Request (inline), then the Response B builds from its region.
    let (mut p, a, b) = Pair::with_regions(0x11, 0x22);
    p.a.engine
        .post_send(read_wr(9, a, 0, b, 100, 5000))
        .unwrap();
    let request = drain_digested(&mut p.a.engine, &p.a.mem, 1500, 0);
    assert_eq!(request.len(), 1);
    check(&request, 0);
    p.b.receive(&request[0].0);
    let response = drain_digested(&mut p.b.engine, &p.b.mem, 1500, 0);
    assert_eq!(response.len(), 4);
    check(&response, 0);
    assert!(response.iter().all(|(seg, _)| seg.ends_with(&[0x22; 8])));
}
