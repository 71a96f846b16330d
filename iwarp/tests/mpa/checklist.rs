//! SPEC-DIGEST §8 checklist items that MPA carries, and the MPA items of §6, end to end:
//! negotiation, then framing, then receiving.

use tcp::Instant;

use iwarp::mpa::{
    mulpdu, Event, Framer, MarkerSpacing, MpaConfig, Negotiator, Receiver, ReceiverConfig,
};
use iwarp::wire::mpa::{fpdu_len, Fpdu, FRAME_HEADER_LEN};

/// A10: no DDP segment larger than MULPDU, and MULPDU is chosen so that one FPDU carrying
/// MULPDU octets fits one EMSS-sized TCP segment wherever it starts, markers included.
/// [RFC 5041 §3 items 1–2, §5.2; RFC 5044 §4.1 (MULPDU)]
#[test]
fn a10_mulpdu_fpdu_fits_emss_at_every_position() {
    for emss in (64..=9000).step_by(7).chain([536, 1448, 1460, 8960]) {
        for markers in [false, true] {
            let m = mulpdu(emss, markers);
            let framer = Framer::new(true, markers.then(|| MarkerSpacing::new(0)));
            for pos in (0..512u32).step_by(4) {
                let len = framer.wire_len(pos, m);
                assert!(
                    len <= emss,
                    "EMSS {emss} markers {markers} at {pos}: FPDU {len} octets"
                );
                // The unit builder agrees: a MULPDU segment always fits, one more octet
                // may not.
                let seg = vec![0xc1u8; m];
                let mut out = Vec::new();
                let info = framer
                    .build_unit(pos, emss, &[[&seg[..]]], &mut out)
                    .unwrap();
                assert_eq!((info.fpdus, info.len), (1, len));
            }
            if !markers {
                // Without markers the bound is tight up to the pad (RFC 5044 §4.1).
                assert!(fpdu_len(m + 4) > emss);
            }
        }
    }
}

/// G13: once in RDMA mode only FPDUs are written: after negotiation the negotiator emits
/// nothing more and every framed unit parses as whole FPDUs. [RFC 5040 §6.1; VERBS-00 §6.6.1]
#[test]
fn g13_only_fpdus_after_negotiation() {
    let now = Instant::from_millis(1_000);
    let mut i = Negotiator::initiator(MpaConfig::default(), now).unwrap();
    let mut r = Negotiator::responder(MpaConfig::default(), now).unwrap();
    let req = i.poll_transmit().unwrap();
    r.handle_input(now, &req).unwrap();
    r.accept(now, b"").unwrap();
    let rep = r.poll_transmit().unwrap();
    i.handle_input(now, &rep).unwrap();
    assert!(i.poll_transmit().is_none() && r.poll_transmit().is_none());
    let framer = Framer::from_negotiated(i.negotiated().unwrap(), 1000);
    let segs: Vec<Vec<u8>> = (0..10).map(|n| vec![0xc1; 14 + n * 9]).collect();
    let gathers: Vec<[&[u8]; 1]> = segs.iter().map(|s| [&s[..]]).collect();
    let mut unit = Vec::new();
    let info = framer.build_unit(1000, 1460, &gathers, &mut unit).unwrap();
    assert_eq!(info.fpdus, 10);
    let mut at = 0;
    for s in &segs {
        let f = Fpdu::new_checked(&unit[at..]).unwrap();
        assert_eq!(f.ulpdu(), &s[..]);
        at += f.total_len();
    }
    assert_eq!(at, unit.len());
}

/// Digest §6 items 6 and 9: the Reply and the first FPDUs share one TCP segment (the
/// initiator may send as soon as it has the Reply); the frame length tells where FPDU mode
/// starts, and the receiver delivers ULPDUs only after CRC validation, with their length.
/// [RFC 5044 §7.1, §4.1; RFC 6581 §5]
#[test]
fn reply_and_first_fpdus_in_one_segment() {
    let now = Instant::from_millis(1_000);
    let cfg = MpaConfig {
        require_crc: true,
        ..MpaConfig::default()
    };
    let mut i = Negotiator::initiator(cfg.clone(), now).unwrap();
    let mut r = Negotiator::responder(MpaConfig::default(), now).unwrap();
    let isn_r = u32::MAX - 30;
    let req = i.poll_transmit().unwrap();
    r.handle_input(now, &req).unwrap();
    assert!(matches!(r.poll_event(), Some(Event::ConnectRequest(_))));
    r.accept(now, b"ulp").unwrap();
    let rep = r.poll_transmit().unwrap();
    assert_eq!(rep.len(), FRAME_HEADER_LEN + 4 + 3);
    // The responder sends FPDUs right behind its Reply.
    let neg_r = r.negotiated().unwrap().clone();
    assert!(neg_r.crc, "the initiator asked for CRC");
    let tx_start = isn_r.wrapping_add(1).wrapping_add(rep.len() as u32);
    let framer = Framer::from_negotiated(&neg_r, tx_start);
    let a = vec![0xc1u8; 30];
    let b = vec![0x41u8; 50];
    let mut segment = rep.clone();
    framer
        .build_unit(tx_start, 1460, &[[&a[..]], [&b[..]]], &mut segment)
        .unwrap();
    // The initiator's side: the negotiator takes the frame, the receiver the rest.
    let seg_seq = isn_r.wrapping_add(1);
    let used = i.handle_input(now, &segment).unwrap();
    assert_eq!(used, rep.len());
    let neg_i = match i.poll_event() {
        Some(Event::Established(n)) => n,
        other => panic!("{other:?}"),
    };
    assert_eq!(neg_i.private_data, b"ulp");
    let rx_start = seg_seq.wrapping_add(used as u32);
    let mut rx = Receiver::new(ReceiverConfig::from_negotiated(&neg_i, rx_start));
    let mut got = Vec::new();
    rx.handle_segment(rx_start, &segment[used..], true, |d| {
        got.push((d.ulpdu.to_vec(), d.crc))
    })
    .unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].0, a);
    assert_eq!(got[1].0, b);
    assert!(got.iter().all(|g| g.1 == iwarp::mpa::CrcCheck::Good));
}
