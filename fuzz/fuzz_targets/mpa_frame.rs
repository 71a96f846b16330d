//! MPA Request/Reply frames (RFC 5044 §7.1, RFC 6581 §5): the wire parser with an
//! emit → parse round trip, and both negotiator roles fed the same bytes cut into
//! arbitrary pieces.
//!
//! Input: `[config][ncuts][cut sizes; ncuts % 8][stream bytes...]`. `config` picks the
//! local policy (revision, CRC, markers, peer-to-peer RTR types, reserved-bit handling,
//! accept or reject); the stream is the peer's frame and whatever follows it.
#![no_main]

use std::time::Duration;

use iwarp::mpa::{Event, MpaConfig, Negotiator};
use iwarp::wire::mpa::{
    Frame, FrameKind, FrameRepr, ReservedBits, RtrTypes, FLAG_RESERVED, FRAME_HEADER_LEN,
};
use iwarp_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use tcp::Instant;

fn config(bits: u8, ird: u8) -> MpaConfig {
    MpaConfig {
        revision: if bits & 0x01 != 0 { 1 } else { 2 },
        require_crc: bits & 0x02 != 0,
        want_markers: bits & 0x04 != 0,
        accept_markers: bits & 0x08 != 0,
        ird: u16::from(ird & 0x1f),
        ord: u16::from(ird >> 3),
        p2p: (bits & 0x10 != 0).then_some(RtrTypes {
            send: ird & 0x01 != 0,
            write: ird & 0x02 != 0,
            read: ird & 0x04 != 0,
        }),
        private_data: vec![0xab; usize::from(ird >> 5)],
        timeout: Duration::from_secs(5),
        reply_timeout: Duration::from_secs(10),
        reserved_bits: if bits & 0x20 != 0 {
            ReservedBits::Ignore
        } else {
            ReservedBits::Reject
        },
    }
}

/// Wire parser: every accepted frame emits back to the same octets (reserved bits aside).
fn check_wire(stream: &[u8]) {
    for reserved in [ReservedBits::Reject, ReservedBits::Ignore] {
        let Ok(frame) = Frame::new_checked(stream) else {
            return;
        };
        let header_ok = FrameRepr::validate_header(&frame, reserved);
        let Ok(repr) = FrameRepr::parse(&frame, reserved) else {
            continue;
        };
        assert_eq!(header_ok, Ok(repr.kind), "header check agrees with parse");
        let out = repr.to_vec().expect("a parsed frame emits");
        let total = frame.total_len();
        assert_eq!(out.len(), total, "emitted length = PD_Length + 20");
        let mut want = stream[..total].to_vec();
        if reserved == ReservedBits::Ignore {
            want[16] &= !((FLAG_RESERVED >> 8) as u8);
        }
        assert_eq!(out, want, "emit(parse(frame)) == frame");
        let again = Frame::new_checked(&out[..]).expect("emitted frame is whole");
        assert_eq!(FrameRepr::parse(&again, ReservedBits::Reject), Ok(repr));
    }
}

/// Feeds `stream` in pieces; returns the octets the negotiator took.
fn feed(n: &mut Negotiator, now: Instant, stream: &[u8], cuts: &[u8]) -> usize {
    let mut pos = 0;
    let mut i = 0;
    while pos < stream.len() {
        let size = match cuts.get(i % cuts.len().max(1)) {
            Some(&c) => usize::from(c).max(1),
            None => stream.len(),
        };
        i += 1;
        let piece = &stream[pos..(pos + size).min(stream.len())];
        match n.handle_input(now, piece) {
            Ok(used) => {
                assert!(used <= piece.len(), "used more than offered");
                pos += used;
                if used < piece.len() {
                    // The frame is complete; the rest is FPDU stream.
                    return pos;
                }
            }
            Err(_) => return pos,
        }
    }
    pos
}

/// Everything a negotiator sends must be a frame our own parser accepts.
fn check_tx(n: &mut Negotiator, kind: FrameKind) {
    while let Some(bytes) = n.poll_transmit() {
        let f = Frame::new_checked(&bytes[..]).expect("sent frame is whole");
        assert_eq!(f.total_len(), bytes.len());
        let r = FrameRepr::parse(&f, ReservedBits::Reject).expect("sent frame parses");
        assert_eq!(r.kind, kind);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let bits = input.u8();
    let ird = input.u8();
    let ncuts = usize::from(input.u8() % 8);
    let cuts = input.bytes(ncuts).to_vec();
    let stream = input.rest();
    check_wire(stream);

    let now = Instant::from_millis(1_000);
    let cfg = config(bits, ird);

    // Responder: the stream is the initiator's Request.
    if let Ok(mut r) = Negotiator::responder(cfg.clone(), now) {
        let used = feed(&mut r, now, stream, &cuts);
        check_tx(&mut r, FrameKind::Reply);
        while let Some(ev) = r.poll_event() {
            if let Event::ConnectRequest(req) = ev {
                assert!(stream.len() >= FRAME_HEADER_LEN + req.private_data.len());
                let pd = &stream[used..stream.len().min(used + 16)];
                if bits & 0x40 != 0 {
                    let _ = r.reject(pd);
                } else if r.accept(now, pd).is_ok() {
                    let n = r.negotiated().expect("accepted").clone();
                    assert!(n.ird <= 0x3fff && n.ord <= 0x3fff);
                    if let Some(io) = req.ird_ord {
                        if n.enhanced {
                            assert!(n.ord <= io.ird, "ORD above the peer's IRD");
                        }
                    }
                    // Peer-to-peer: the bytes after the Request are the RTR candidate.
                    let _ = r.handle_rtr(now, &stream[used..]);
                }
                check_tx(&mut r, FrameKind::Reply);
            }
        }
        let _ = r.handle_timeout(now + Duration::from_secs(6));
        let _ = r.handle_input(now, stream);
    }

    // Initiator: the stream is the responder's Reply.
    if let Ok(mut i) = Negotiator::initiator(cfg, now) {
        check_tx(&mut i, FrameKind::Request);
        feed(&mut i, now, stream, &cuts);
        while let Some(ev) = i.poll_event() {
            if let Event::Established(n) = ev {
                assert!(n.ird <= 0x3fff && n.ord <= 0x3fff);
                let f = Frame::new_checked(stream).expect("a Reply was read");
                let reply =
                    FrameRepr::parse(&f, ReservedBits::Ignore).expect("the Reply was accepted");
                assert_eq!(reply.kind, FrameKind::Reply);
                assert!(!reply.reject, "rejecting Reply gave Established");
                if let (true, Some(io)) = (n.enhanced, reply.ird_ord) {
                    assert!(n.ord <= io.ird, "ORD above the peer's IRD");
                }
            }
        }
        check_tx(&mut i, FrameKind::Request);
        let _ = i.handle_timeout(now + Duration::from_secs(6));
    }
});
