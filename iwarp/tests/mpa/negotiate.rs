//! MPA connection setup, both roles (RFC 5044 §7.1; RFC 6581 §5, §7).

use std::time::Duration;

use tcp::Instant;

use iwarp::mpa::error::Recovery;
use iwarp::mpa::negotiate::rtr_matches;
use iwarp::mpa::{Event, MpaConfig, MpaError, Negotiated, Negotiator, Role, RtrKind};
use iwarp::wire::mpa::{
    FrameKind, FrameRepr, IrdOrd, ReservedBits, RtrTypes, WireError, REPLY_KEY, REQUEST_KEY,
};
use iwarp::wire::terminate::TerminateCause;

const NOW: Instant = Instant::from_millis(1_000);

const RTR_SEND: RtrTypes = RtrTypes {
    send: true,
    ..RtrTypes::NONE
};
const RTR_WRITE: RtrTypes = RtrTypes {
    write: true,
    ..RtrTypes::NONE
};
const RTR_WRITE_READ: RtrTypes = RtrTypes {
    read: true,
    ..RTR_WRITE
};
const RTR_ALL: RtrTypes = RtrTypes {
    send: true,
    ..RTR_WRITE_READ
};

fn initiator(cfg: MpaConfig) -> Negotiator {
    Negotiator::initiator(cfg, NOW).unwrap()
}

fn responder(cfg: MpaConfig) -> Negotiator {
    Negotiator::responder(cfg, NOW).unwrap()
}

/// The default configuration with IRD `ird` and ORD `ord`.
fn ird_ord(ird: u16, ord: u16) -> MpaConfig {
    MpaConfig {
        ird,
        ord,
        ..MpaConfig::default()
    }
}

/// The default configuration, peer-to-peer with the RTR types `rtr`.
fn p2p(rtr: RtrTypes) -> MpaConfig {
    MpaConfig {
        p2p: Some(rtr),
        ..MpaConfig::default()
    }
}

/// A rev 2 Reply without markers, CRC, reject or private data, carrying `ird_ord`.
fn rev2_reply(ird_ord: IrdOrd) -> Vec<u8> {
    FrameRepr {
        kind: FrameKind::Reply,
        markers: false,
        crc: false,
        reject: false,
        revision: 2,
        ird_ord: Some(ird_ord),
        private_data: &[],
    }
    .to_vec()
    .unwrap()
}

fn drain(n: &mut Negotiator) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(b) = n.poll_transmit() {
        out.extend_from_slice(&b);
    }
    out
}

fn events(n: &mut Negotiator) -> Vec<Event> {
    std::iter::from_fn(|| n.poll_event()).collect()
}

/// Runs a full exchange; returns (initiator, responder) outcomes.
fn run(
    icfg: MpaConfig,
    rcfg: MpaConfig,
    accept_pd: &[u8],
) -> (Result<Negotiated, MpaError>, Result<Negotiated, MpaError>) {
    let mut i = initiator(icfg);
    let mut r = responder(rcfg);
    let req = drain(&mut i);
    let used = match r.handle_input(NOW, &req) {
        Ok(u) => u,
        Err(e) => return (Err(MpaError::Timeout), Err(e)),
    };
    assert_eq!(used, req.len());
    let ev = events(&mut r);
    assert!(
        matches!(ev.as_slice(), [Event::ConnectRequest(_)]),
        "{ev:?}"
    );
    let accepted = r.accept(NOW, accept_pd);
    let rep = drain(&mut r);
    let rres = accepted.map(|_| r.negotiated().unwrap().clone());
    let ires = i.handle_input(NOW, &rep).map(|used| {
        assert_eq!(used, rep.len());
        match events(&mut i).pop() {
            Some(Event::Established(n)) => n,
            other => panic!("unexpected {other:?}"),
        }
    });
    (ires, rres)
}

#[test]
fn rev2_default_matches_siw_request_and_both_roles_agree() {
    // RFC 6581 §5: H bit (0x1000) + rev 2, PD = IRD, ORD.
    let cfg = ird_ord(1, 1);
    let mut i = initiator(cfg.clone());
    let req = drain(&mut i);
    let mut expect = REQUEST_KEY.to_vec();
    expect.extend_from_slice(&[0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01]);
    assert_eq!(req, expect, "same octets as Linux siw's rping request");
    let (a, b) = run(cfg.clone(), cfg, b"hello");
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.role, Role::Initiator);
    assert_eq!(b.role, Role::Responder);
    for n in [&a, &b] {
        assert_eq!(n.revision, 2);
        assert!(n.enhanced && !n.crc && !n.markers_tx && !n.markers_rx);
        assert_eq!((n.ird, n.ord, n.rtr), (1, 1, None));
    }
    assert_eq!(a.private_data, b"hello");
}

#[test]
fn rev1_fallback_when_responder_speaks_rev1() {
    // RFC 6581 §5: a rev 1 responder answers rev 1; the rev 2 initiator accepts it.
    let r1 = MpaConfig {
        revision: 1,
        ..MpaConfig::default()
    };
    let (a, b) = run(MpaConfig::default(), r1.clone(), b"");
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.revision, b.revision), (1, 1));
    assert!(!a.enhanced && !b.enhanced);
    // And a rev 1 initiator against a rev 2 responder.
    let (a, b) = run(r1, MpaConfig::default(), b"");
    assert_eq!(a.unwrap().revision, 1);
    assert_eq!(b.unwrap().revision, 1);
}

#[test]
fn rev1_reply_frame_has_no_ird_ord() {
    let mut r = responder(MpaConfig {
        revision: 1,
        ..MpaConfig::default()
    });
    let mut i = initiator(MpaConfig::default());
    r.handle_input(NOW, &drain(&mut i)).unwrap();
    r.accept(NOW, b"").unwrap();
    let rep = drain(&mut r);
    assert_eq!(&rep[..16], REPLY_KEY);
    assert_eq!(&rep[16..20], &[0x00, 0x01, 0x00, 0x00]);
}

#[test]
fn crc_if_either_side_asks() {
    // RFC 5044 §7.1: CRC is used in both directions when either side sets C.
    for (ic, rc) in [(false, false), (true, false), (false, true), (true, true)] {
        let i = MpaConfig {
            require_crc: ic,
            ..MpaConfig::default()
        };
        let r = MpaConfig {
            require_crc: rc,
            ..MpaConfig::default()
        };
        let (a, b) = run(i, r, b"");
        assert_eq!(a.unwrap().crc, ic || rc);
        assert_eq!(b.unwrap().crc, ic || rc);
    }
}

#[test]
fn markers_negotiated_per_direction() {
    // RFC 5044 §7.1: M asks the peer to send markers to us.
    for (im, rm) in [(false, false), (true, false), (false, true), (true, true)] {
        let i = MpaConfig {
            want_markers: im,
            accept_markers: true,
            ..MpaConfig::default()
        };
        let r = MpaConfig {
            want_markers: rm,
            accept_markers: true,
            ..MpaConfig::default()
        };
        let (a, b) = run(i, r, b"");
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!((a.markers_rx, a.markers_tx), (im, rm));
        assert_eq!((b.markers_rx, b.markers_tx), (rm, im));
    }
}

#[test]
fn responder_refusing_markers_rejects_like_siw() {
    let mut i = initiator(MpaConfig {
        want_markers: true,
        ..MpaConfig::default()
    });
    let mut r = responder(MpaConfig::default());
    let err = r.handle_input(NOW, &drain(&mut i)).unwrap_err();
    assert_eq!(err, MpaError::MarkersRefused);
    assert_eq!(err.recovery(), Recovery::Close);
    let rep = drain(&mut r);
    // Reply with R set and the request bits echoed (siwlab README).
    assert_eq!(&rep[16..18], &[0xa0, 0x02]);
    i.handle_input(NOW, &rep).unwrap();
    assert_eq!(
        events(&mut i),
        vec![Event::Rejected {
            private_data: vec![]
        }]
    );
}

#[test]
fn initiator_refusing_markers_fails() {
    let i = MpaConfig::default();
    let r = MpaConfig {
        want_markers: true,
        ..MpaConfig::default()
    };
    let (a, _) = run(i, r, b"");
    assert_eq!(a.unwrap_err(), MpaError::MarkersRefused);
}

#[test]
fn reject_with_private_data_reaches_initiator() {
    // RFC 5044 §7.1: R in the Reply, private data reported to the initiator's ULP.
    let mut i = initiator(MpaConfig::default());
    let mut r = responder(MpaConfig::default());
    r.handle_input(NOW, &drain(&mut i)).unwrap();
    r.reject(b"no thanks").unwrap();
    assert!(!r.may_send_fpdus());
    let rep = drain(&mut r);
    assert_eq!(rep[16] & 0x20, 0x20);
    assert_eq!(i.handle_input(NOW, &rep).unwrap(), rep.len());
    assert_eq!(
        events(&mut i),
        vec![Event::Rejected {
            private_data: b"no thanks".to_vec()
        }]
    );
    assert!(!i.may_send_fpdus());
    assert!(i.handle_input(NOW, b"x").is_err());
}

#[test]
fn timeout_driven_by_now() {
    // RFC 5044 §7.1: a peer that never completes the exchange is timed out.
    let t0 = NOW;
    // The initiator waits `reply_timeout` for the Reply, the responder `timeout` for the
    // Request (Linux siw: 10 s and 5 s).
    let cfg = MpaConfig {
        timeout: Duration::from_secs(5),
        reply_timeout: Duration::from_secs(7),
        ..MpaConfig::default()
    };
    for (mut n, secs) in [(initiator(cfg.clone()), 7), (responder(cfg.clone()), 5)] {
        let limit = t0 + Duration::from_secs(secs);
        assert_eq!(n.poll_timeout(), Some(limit));
        n.handle_timeout(limit - Duration::from_millis(1)).unwrap();
        let e = n.handle_timeout(limit).unwrap_err();
        assert_eq!(e, MpaError::Timeout);
        assert_eq!(e.recovery(), Recovery::Reset);
        assert_eq!(n.poll_timeout(), None);
    }
    // A late frame is refused too.
    let mut r = responder(cfg.clone());
    let mut i = initiator(cfg);
    let e = r
        .handle_input(t0 + Duration::from_secs(6), &drain(&mut i))
        .unwrap_err();
    assert_eq!(e, MpaError::Timeout);
}

fn request_with(bits: [u8; 2], pd: &[u8]) -> Vec<u8> {
    let mut v = REQUEST_KEY.to_vec();
    v.extend_from_slice(&bits);
    v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    v.extend_from_slice(pd);
    v
}

fn responder_error(frame: &[u8]) -> MpaError {
    responder(MpaConfig::default())
        .handle_input(NOW, frame)
        .unwrap_err()
}

#[test]
fn malformed_frames_map_to_2_0_04() {
    // RFC 5044 §7.1, §8: invalid Request/Reply → LLP/MPA error 0x04, connection reset.
    let mut bad_key = request_with([0x10, 0x02], &[0, 1, 0, 1]);
    bad_key[4] = b'X';
    let cases: Vec<(Vec<u8>, MpaError)> = vec![
        (bad_key, WireError::BadKey.into()),
        (
            {
                let mut v = REQUEST_KEY.to_vec();
                v.extend_from_slice(&[0x10, 0x02, 0x02, 0x01]);
                v
            },
            WireError::PrivateDataTooLong(513).into(),
        ),
        (
            request_with([0x11, 0x02], &[0, 1, 0, 1]),
            WireError::ReservedBits(0x0100).into(),
        ),
        (
            request_with([0x00, 0x03], &[]),
            WireError::UnsupportedRevision(3).into(),
        ),
        (
            request_with([0x00, 0x00], &[]),
            WireError::UnsupportedRevision(0).into(),
        ),
        (
            request_with([0x20, 0x02], &[]),
            WireError::RejectInRequest.into(),
        ),
        (
            request_with([0x10, 0x01], &[0, 1, 0, 1]),
            WireError::EnhancedInRevision1.into(),
        ),
        (
            request_with([0x10, 0x02], &[0, 1]),
            WireError::MissingIrdOrd(2).into(),
        ),
        (
            {
                let mut v = request_with([0x10, 0x02], &[0, 1, 0, 1]);
                v[..16].copy_from_slice(REPLY_KEY);
                v
            },
            WireError::UnexpectedKind {
                expected: FrameKind::Request,
            }
            .into(),
        ),
    ];
    for (frame, expected) in cases {
        let e = responder_error(&frame);
        assert_eq!(e, expected);
        assert_eq!(e.terminate_cause(), TerminateCause::MPA_INVALID_REQ_REP);
        assert_eq!(e.terminate_cause(), TerminateCause::new(2, 0, 0x04));
        assert_eq!(e.recovery(), Recovery::Reset);
    }
}

#[test]
fn oversized_pd_refused_before_private_data_arrives() {
    let mut v = REQUEST_KEY.to_vec();
    v.extend_from_slice(&[0x10, 0x02, 0x02, 0x01]);
    let mut r = responder(MpaConfig::default());
    assert_eq!(
        r.handle_input(NOW, &v).unwrap_err(),
        MpaError::InvalidFrame(WireError::PrivateDataTooLong(513))
    );
}

#[test]
fn reserved_bits_can_be_ignored_by_policy() {
    // RFC 5044 §7.1 "not checked on reception"; Linux siw's private GSO bit is 0x0800.
    let mut r = responder(MpaConfig {
        reserved_bits: ReservedBits::Ignore,
        ..MpaConfig::default()
    });
    let f = request_with([0x18, 0x02], &[0, 1, 0, 1]);
    assert_eq!(r.handle_input(NOW, &f).unwrap(), f.len());
}

#[test]
fn frame_split_at_every_point_and_trailing_fpdus_left() {
    // The frame may arrive in any pieces; octets after it are the FPDU stream.
    let mut i0 = initiator(MpaConfig::default());
    let req = drain(&mut i0);
    for split in 0..=req.len() {
        let mut r = responder(MpaConfig::default());
        let a = r.handle_input(NOW, &req[..split]).unwrap();
        let b = r.handle_input(NOW, &req[split..]).unwrap();
        assert_eq!(a + b, req.len());
        assert!(matches!(r.poll_event(), Some(Event::ConnectRequest(_))));
    }
    // Byte by byte, then a Reply followed by FPDU octets in one segment.
    let mut r = responder(MpaConfig::default());
    for b in &req {
        assert_eq!(r.handle_input(NOW, std::slice::from_ref(b)).unwrap(), 1);
    }
    r.accept(NOW, b"pd").unwrap();
    let mut seg = drain(&mut r);
    let rep_len = seg.len();
    seg.extend_from_slice(&[0x00, 0x0e, 0xc1, 0x40]);
    let mut i = initiator(MpaConfig::default());
    drain(&mut i);
    assert_eq!(i.handle_input(NOW, &seg).unwrap(), rep_len);
    assert!(i.may_send_fpdus());
    assert_eq!(i.handle_input(NOW, &seg[rep_len..]).unwrap(), 0);
}

#[test]
fn ird_ord_exchange_and_insufficient_ird_2_0_06() {
    // RFC 6581 §5: the responder never promises more Reads than the initiator's IRD.
    let (a, b) = run(ird_ord(2, 8), ird_ord(4, 6), b"");
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((b.ird, b.ord), (4, 2));
    assert_eq!((a.ird, a.ord), (2, 4));
    // A Reply whose ORD exceeds our IRD: Terminate 2/0/06 (RFC 6581 §7).
    let mut init = initiator(MpaConfig {
        ird: 1,
        ..MpaConfig::default()
    });
    drain(&mut init);
    let rep = rev2_reply(IrdOrd {
        ird: 1,
        ord: 5,
        p2p: false,
        rtr: RtrTypes::NONE,
    });
    let e = init.handle_input(NOW, &rep).unwrap_err();
    assert_eq!(
        e,
        MpaError::InsufficientIrd {
            local_ird: 1,
            peer_ord: 5
        }
    );
    assert_eq!(e.terminate_cause(), TerminateCause::new(2, 0, 0x06));
    assert_eq!(e.recovery(), Recovery::Terminate);
}

#[test]
fn responder_offers_the_applications_ird_ord_in_its_reply() {
    // rdma_accept with responder_resources 1 / initiator_depth 1 (rping) on a responder
    // configured for 64/64: the Reply carries 1/1, the octets Linux siw answers with.
    let mut i = initiator(ird_ord(1, 1));
    let mut r = responder(ird_ord(64, 64));
    assert!(r.set_reply_ird_ord(1, 1), "before the Request");
    r.handle_input(NOW, &drain(&mut i)).unwrap();
    assert!(matches!(
        events(&mut r).as_slice(),
        [Event::ConnectRequest(_)]
    ));
    assert!(r.set_reply_ird_ord(1, 1), "with the Request pending");
    r.accept(NOW, b"").unwrap();
    let rep = drain(&mut r);
    let mut expect = REPLY_KEY.to_vec();
    expect.extend_from_slice(&[0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01]);
    assert_eq!(rep, expect);
    assert_eq!(r.negotiated().map(|n| (n.ird, n.ord)), Some((1, 1)));
    i.handle_input(NOW, &rep).unwrap();
    match events(&mut i).pop() {
        Some(Event::Established(n)) => assert_eq!((n.ird, n.ord), (1, 1)),
        other => panic!("unexpected {other:?}"),
    }
    // Too late once the Reply is out; never for an initiator.
    assert!(!r.set_reply_ird_ord(0, 0));
    assert_eq!(r.negotiated().map(|n| (n.ird, n.ord)), Some((1, 1)));
    assert!(!initiator(MpaConfig::default()).set_reply_ird_ord(0, 0));
}

// perftest's write and send servers accept with 0/0: no Reads either way.
#[test]
fn responder_reply_with_zero_ird_ord() {
    let mut i = initiator(ird_ord(0, 0));
    let mut r = responder(ird_ord(64, 64));
    r.handle_input(NOW, &drain(&mut i)).unwrap();
    events(&mut r);
    assert!(r.set_reply_ird_ord(0, 0));
    r.accept(NOW, b"").unwrap();
    let rep = drain(&mut r);
    assert_eq!(&rep[rep.len() - 4..], &[0, 0, 0, 0], "IRD 0, ORD 0");
    assert_eq!(r.negotiated().map(|n| (n.ird, n.ord)), Some((0, 0)));
}

fn zero_write() -> Vec<u8> {
    // Tagged, L, DV 1 | RV 1, opcode Write | STag 1 | TO 0 (the siw p2p RTR).
    vec![0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]
}

fn zero_send() -> Vec<u8> {
    let mut v = vec![0x41, 0x43, 0, 0, 0, 0];
    v.extend_from_slice(&0u32.to_be_bytes());
    v.extend_from_slice(&1u32.to_be_bytes());
    v.extend_from_slice(&0u32.to_be_bytes());
    v
}

fn zero_read() -> Vec<u8> {
    let mut v = vec![0x41, 0x41, 0, 0, 0, 0];
    v.extend_from_slice(&1u32.to_be_bytes());
    v.extend_from_slice(&1u32.to_be_bytes());
    v.extend_from_slice(&0u32.to_be_bytes());
    v.extend_from_slice(&[0u8; 28]);
    v
}

#[test]
fn p2p_rtr_exchange() {
    // RFC 6581 §5: P2P with RTR types; the responder waits for the RTR before sending.
    let mut i = initiator(MpaConfig {
        p2p: Some(RTR_WRITE_READ),
        ..ird_ord(0, 1)
    });
    let req = drain(&mut i);
    // IRD word with P2P, ORD word with Write and Read RTR (siw p2p capture: 8000 c001).
    assert_eq!(&req[20..24], &[0x80, 0x00, 0xc0, 0x01]);
    let mut r = responder(MpaConfig {
        p2p: Some(RTR_ALL),
        ..ird_ord(1, 0)
    });
    r.handle_input(NOW, &req).unwrap();
    events(&mut r);
    r.accept(NOW, b"").unwrap();
    let rep = drain(&mut r);
    assert_eq!(&rep[20..24], &[0x80, 0x01, 0x80, 0x00]);
    assert!(!r.may_send_fpdus(), "responder waits for the RTR");
    assert!(events(&mut r).is_empty());
    assert_eq!(r.negotiated().unwrap().rtr, Some(RtrKind::Write));
    assert!(r.poll_timeout().is_some());
    i.handle_input(NOW, &rep).unwrap();
    match events(&mut i).as_slice() {
        [Event::Established(n)] => assert_eq!(n.rtr, Some(RtrKind::Write)),
        other => panic!("{other:?}"),
    }
    r.handle_rtr(NOW, &zero_write()).unwrap();
    assert!(r.may_send_fpdus());
    assert!(matches!(events(&mut r).as_slice(), [Event::Established(_)]));
}

#[test]
fn wrong_rtr_is_2_0_07() {
    let mut i = initiator(p2p(RTR_WRITE));
    let mut r = responder(p2p(RTR_WRITE));
    r.handle_input(NOW, &drain(&mut i)).unwrap();
    r.accept(NOW, b"").unwrap();
    let e = r.handle_rtr(NOW, &zero_send()).unwrap_err();
    assert!(matches!(e, MpaError::NoMatchingRtr(_)));
    assert_eq!(e.terminate_cause(), TerminateCause::new(2, 0, 0x07));
    assert_eq!(e.recovery(), Recovery::Terminate);
}

#[test]
fn no_common_rtr_type_is_2_0_07() {
    let mut i = initiator(p2p(RTR_WRITE));
    let mut r = responder(p2p(RTR_SEND));
    r.handle_input(NOW, &drain(&mut i)).unwrap();
    let e = r.accept(NOW, b"").unwrap_err();
    assert_eq!(e.terminate_cause(), TerminateCause::MPA_NO_MATCHING_RTR);
    // The Reply is still sent, so that the Terminate can follow in FPDU mode.
    assert!(!drain(&mut r).is_empty());
    // An initiator that gets a Reply choosing two RTR types fails with 2/0/07 as well.
    let mut i = initiator(p2p(RTR_ALL));
    drain(&mut i);
    let rep = rev2_reply(IrdOrd {
        ird: 1,
        ord: 1,
        p2p: true,
        rtr: RTR_WRITE_READ,
    });
    let e = i.handle_input(NOW, &rep).unwrap_err();
    assert_eq!(e.terminate_cause(), TerminateCause::MPA_NO_MATCHING_RTR);
}

#[test]
fn p2p_ignored_by_non_p2p_responder() {
    let (a, b) = run(p2p(RTR_ALL), MpaConfig::default(), b"");
    assert_eq!(a.unwrap().rtr, None);
    assert_eq!(b.unwrap().rtr, None);
}

#[test]
fn rtr_message_shapes() {
    // RFC 6581 §5 with RFC 5040 §4: zero-length Write (tagged, 14 octets), Send (18),
    // Read Request with RDMARDSZ 0 (46).
    assert!(rtr_matches(RtrKind::Write, &zero_write()));
    assert!(rtr_matches(RtrKind::Send, &zero_send()));
    assert!(rtr_matches(RtrKind::Read, &zero_read()));
    assert!(!rtr_matches(RtrKind::Write, &zero_send()));
    assert!(!rtr_matches(RtrKind::Send, &zero_read()));
    let mut nonzero = zero_read();
    nonzero[18 + 15] = 1;
    assert!(!rtr_matches(RtrKind::Read, &nonzero));
    let mut with_payload = zero_write();
    with_payload.push(0);
    assert!(!rtr_matches(RtrKind::Write, &with_payload));
    assert!(!rtr_matches(RtrKind::Write, &[0xc1]));
}

#[test]
fn reply_revision_above_request_is_invalid() {
    let mut i = initiator(MpaConfig {
        revision: 1,
        ..MpaConfig::default()
    });
    drain(&mut i);
    let mut rep = REPLY_KEY.to_vec();
    rep.extend_from_slice(&[0x00, 0x02, 0x00, 0x00]);
    let e = i.handle_input(NOW, &rep).unwrap_err();
    assert_eq!(
        e,
        MpaError::RevisionMismatch {
            requested: 1,
            reply: 2
        }
    );
    assert_eq!(e.terminate_cause(), TerminateCause::MPA_INVALID_REQ_REP);
}
