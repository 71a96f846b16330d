//! Connections facing the bytes of a real Linux siw rping exchange
//! (captures/siw-rping-mpa2*.pcap, siw 6.1, MPA revision 2, no markers): as initiator
//! it sends the MPA Request siw's initiator sent, negotiates what siw negotiated and
//! answers siw's RDMA Read Request with the same Read Response octets; as responder it
//! answers siw's Request with siw's Reply and sends siw's server FPDUs (RFC 5044 §7.1,
//! RFC 6581, RFC 5040 §4.4).

use tcp::Instant;

use iwarp::conn::{ConnConfig, ConnEvent, ConnState, Connection};
use iwarp::mem::{Access, PdId, RegionSpec, STag, Sge, SimpleMemory};
use iwarp::mpa::{MpaConfig, Negotiated, Role, RtrKind};
use iwarp::rdmap::{
    CompletionOpcode, CompletionStatus, RecvWr, RemoteBuf, SendOp, SendWr, WorkQueue,
};
use iwarp::wire::mpa::RtrTypes;
use tcp::{SegmentSink, SegmentSource};

/// One captured rping start, as hex payloads of the TCP segments.
struct Capture {
    /// MPA policy that matches the siw client of the capture.
    mpa: MpaConfig,
    /// Client → server: MPA Request.
    request: &'static str,
    /// Server → client: MPA Reply.
    reply: &'static str,
    /// Client → server: the peer-to-peer RTR, if any.
    rtr: Option<&'static str>,
    /// Client → server: rping's Send of its 16-octet buffer descriptor (QN 0, MSN 1).
    client_send: &'static str,
    /// Server → client: RDMA Read Request (QN 1, MSN 1) for the client's 64 octets.
    server_read_request: &'static str,
    /// Client → server: the Read Response carrying "rdma-ping-0: ABC…".
    client_read_response: &'static str,
    /// Server → client: Send "go ahead" (QN 0, MSN 1, 16 zero octets), if captured.
    server_send: Option<&'static str>,
}

/// captures/siw-rping-mpa2.pcap frames 4, 6, 8, 9, 10, 11: stock siw, CRC off.
fn plain() -> Capture {
    Capture {
        mpa: MpaConfig {
            ird: 1,
            ord: 1,
            ..MpaConfig::default()
        },
        request: "4d504120494420526571204672616d651002000400010001",
        reply: "4d504120494420526570204672616d651002000400010001",
        rtr: None,
        client_send: "00224143000000000000000000000001000000000000555bd2707370e2b5ae00\
                      0000004000000000",
        server_read_request: "002e4141000000000000000100000001000000007ac8e4000000559512ae0550\
                              00000040e2b5ae000000555bd270737000000000",
        client_read_response: "004ec1427ac8e4000000559512ae055072646d612d70696e672d303a20\
                               4142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60\
                               6162636465666768696a6b6c6d6e6f7071720000000000",
        server_send: Some(
            "00224143000000000000000000000001000000000000000000000000000000000000000000000000",
        ),
    }
}

/// captures/siw-rping-mpa2-crc.pcap frames 4, 6, 8, 9, 10, 11: siw with CRC required.
fn crc() -> Capture {
    Capture {
        mpa: MpaConfig {
            ird: 1,
            ord: 1,
            require_crc: true,
            ..MpaConfig::default()
        },
        request: "4d504120494420526571204672616d655002000400010001",
        reply: "4d504120494420526570204672616d655002000400010001",
        rtr: None,
        client_send: "0022414300000000000000000000000100000000000055aa6ed633701f5abd00\
                      00000040 14e7e4df",
        server_read_request: "002e414100000000000000010000000100000000b07e9d00000055c41b3db550\
                              000000401f5abd00000055aa6ed6337059b40b10",
        client_read_response: "004ec142b07e9d00000055c41b3db55072646d612d70696e672d303a20\
                               4142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60\
                               6162636465666768696a6b6c6d6e6f70717200b1ba0149",
        server_send: Some(
            "00224143000000000000000000000001000000000000000000000000000000000000000084609a12",
        ),
    }
}

/// captures/siw-rping-mpa2-p2p.pcap frames 4, 6, 8, 9, 11, 12: siw-tunable peer_to_peer=1.
fn p2p() -> Capture {
    Capture {
        mpa: MpaConfig {
            ird: 1,
            ord: 1,
            p2p: Some(RtrTypes {
                send: false,
                write: true,
                read: true,
            }),
            ..MpaConfig::default()
        },
        request: "4d504120494420526571204672616d65100200048001c001",
        reply: "4d504120494420526570204672616d651002000480018001",
        rtr: Some("000ec14000000001000000000000000000000000"),
        client_send: "00224143000000000000000000000001000000000000560420178370ba2cf800\
                      0000004000000000",
        server_read_request: "002e414100000000000000010000000100000000eb3d3200000055e4b7e9f550\
                              00000040ba2cf800000056042017837000000000",
        client_read_response: "004ec142eb3d3200000055e4b7e9f55072646d612d70696e672d303a20\
                               4142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60\
                               6162636465666768696a6b6c6d6e6f7071720000000000",
        server_send: None,
    }
}

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const PD: PdId = PdId(1);
const MSS: usize = 1448;

/// 4 KiB of memory with a local 1 KiB buffer at 0 and, at 2048, 64 octets with `access`
/// registered under the STag and tagged offset the capture's Read Request `rr` names at
/// octet `at`: after ULPDU_Length (2) and the untagged header (18) come the sink STag (20),
/// sink TO, size, source STag (36) and source TO (RFC 5040 §4.4). Returns the memory, the
/// local buffer, and that STag and TO.
fn replay_memory(rr: &[u8], at: usize, access: Access) -> (SimpleMemory, STag, STag, u64) {
    let mut mem = SimpleMemory::with_heap(4096);
    let local = mem
        .register(RegionSpec::new(
            0,
            1024,
            Access::LOCAL_READ | Access::LOCAL_WRITE,
            PD,
        ))
        .unwrap();
    let stag = STag(u32::from_be_bytes(rr[at..at + 4].try_into().unwrap()));
    let to = u64::from_be_bytes(rr[at + 4..at + 12].try_into().unwrap());
    let mut spec = RegionSpec::new(2048, 64, Access::LOCAL_READ | access, PD);
    spec.base_to = to;
    spec.key = stag.key();
    mem.register_with_stag(spec, stag).unwrap();
    (mem, local, stag, to)
}

/// Plays the server's segments to an initiator and compares what it sends with the
/// capture's client segments. Sequence numbers are the capture's relative ones.
fn replay(cap: Capture) -> Negotiated {
    let now = Instant::from_millis(1_000);
    let send = hex(cap.client_send);
    let rr = hex(cap.server_read_request);
    let resp = hex(cap.client_read_response);
    // rping's source buffer as the server's Read Request names it (RFC 5040 §4.4).
    let (mut mem, local, _, _) = replay_memory(&rr, 36, Access::REMOTE_READ);
    mem.bytes_mut()[2048..2112].copy_from_slice(&resp[16..80]);
    mem.bytes_mut()[..16].copy_from_slice(&send[20..36]);
    let cfg = ConnConfig {
        pd: PD,
        ..ConnConfig::new(cap.mpa)
    };
    let mut c = Connection::initiator(cfg, now).unwrap();

    // The Request is the first unit and equals siw's octet for octet.
    assert!(SegmentSource::<SimpleMemory>::pending(&c));
    let u = c.next_unit(&mut mem, now, 1, MSS).expect("request");
    assert_eq!(u.octets(), hex(cap.request));
    assert!(
        c.next_unit(&mut mem, now, 25, MSS).is_none(),
        "no FPDU before the Reply"
    );

    let reply = hex(cap.reply);
    let consumed = c.on_segment(&mut mem, now, 1, &reply, true, 1);
    assert_eq!(consumed.total(), reply.len());
    c.on_advance(&mut mem, now, 25);
    let n = loop {
        match c.poll_event() {
            Some(ConnEvent::Established(n)) => break n,
            Some(_) => {}
            None => panic!("not established"),
        }
    };

    let mut seq = 25u32;
    if let Some(rtr) = cap.rtr {
        // RFC 6581 §5: the RTR goes first, as siw's initiator sent it.
        let u = c.next_unit(&mut mem, now, seq, MSS).expect("rtr");
        assert_eq!(u.octets(), hex(rtr));
        seq += u.octets().len() as u32;
    }
    for i in 0..2 {
        c.post_recv(RecvWr {
            wr_id: 10 + i,
            sgl: vec![Sge {
                stag: local,
                to: 512 + 16 * i,
                len: 16,
            }],
        })
        .unwrap();
    }
    c.post_send(
        now,
        &mem,
        SendWr::new(
            1,
            SendOp::Send {
                sgl: iwarp::mem::Sgl::one(Sge {
                    stag: local,
                    to: 0,
                    len: 16,
                }),
                solicited: false,
                invalidate: None,
            },
        ),
    )
    .unwrap();
    let u = c.next_unit(&mut mem, now, seq, MSS).expect("send");
    assert_eq!(u.octets(), send);
    seq += u.octets().len() as u32;

    // siw's Read Request is answered with the Read Response siw's client sent.
    c.on_segment(&mut mem, now, 25, &rr, true, 25);
    c.on_advance(&mut mem, now, 25 + rr.len() as u32);
    let u = c.next_unit(&mut mem, now, seq, MSS).expect("read response");
    assert_eq!(u.octets(), resp);

    let mut wcs = Vec::new();
    if let Some(ss) = cap.server_send {
        // siw's Send lands in the first receive buffer.
        let ss = hex(ss);
        let at = 25 + rr.len() as u32;
        c.on_segment(&mut mem, now, at, &ss, true, at);
        c.on_advance(&mut mem, now, at + ss.len() as u32);
    }
    while let Some(wc) = c.poll_completion() {
        wcs.push(wc);
    }
    assert_eq!(
        (wcs[0].queue, wcs[0].opcode, wcs[0].wr_id),
        (WorkQueue::Send, CompletionOpcode::Send, 1)
    );
    if cap.server_send.is_some() {
        assert_eq!(wcs.len(), 2, "{wcs:?}");
        assert_eq!(
            (wcs[1].queue, wcs[1].wr_id, wcs[1].byte_len),
            (WorkQueue::Recv, 10, 16)
        );
    }
    assert!(wcs.iter().all(|w| w.status == CompletionStatus::Success));
    let st = c.stats();
    assert_eq!(
        st.crc_errors + st.terminates_sent + st.terminates_received,
        0
    );
    n
}

// RFC 5044 §7.1, RFC 6581: stock siw negotiates revision 2, enhanced, CRC and markers off,
// IRD 1 / ORD 1 for rping.
#[test]
fn initiator_against_siw_responder_bytes() {
    let n = replay(plain());
    assert_eq!(n.role, Role::Initiator);
    assert_eq!(n.revision, 2);
    assert!(n.enhanced);
    assert!(!n.crc);
    assert!(!n.markers_tx && !n.markers_rx);
    assert_eq!((n.ird, n.ord), (1, 1));
    assert_eq!(n.rtr, None);
    assert!(n.private_data.is_empty());
}

// RFC 5044 §4.1: with CRC required siw echoes C; our CRC32c matches siw's on the wire and
// siw's CRCs verify here.
#[test]
fn initiator_against_siw_responder_with_crc() {
    let n = replay(crc());
    assert!(n.crc);
    assert_eq!((n.revision, n.ird, n.ord), (2, 1, 1));
}

// RFC 6581 §5: siw-tunable peer_to_peer=1 chooses the zero-length RDMA Write RTR; our RTR
// FPDU equals siw's.
#[test]
fn initiator_against_siw_responder_peer_to_peer() {
    let n = replay(p2p());
    assert_eq!(n.rtr, Some(RtrKind::Write));
    assert_eq!((n.ird, n.ord), (1, 1));
}

/// Plays the client's segments to a responder and compares what it sends with the
/// capture's server segments.
fn replay_responder(cap: Capture) -> Negotiated {
    let now = Instant::from_millis(1_000);
    let send = hex(cap.client_send);
    let rr = hex(cap.server_read_request);
    let resp = hex(cap.client_read_response);
    // rping server's sink buffer as its Read Request names it.
    let (mut mem, local, sink, sink_to) = replay_memory(&rr, 20, Access::REMOTE_WRITE);
    let cfg = ConnConfig {
        pd: PD,
        ..ConnConfig::new(MpaConfig {
            private_data: Vec::new(),
            ..cap.mpa.clone()
        })
    };
    let mut c = Connection::responder(cfg, now).unwrap();
    assert!(!SegmentSource::<SimpleMemory>::pending(&c));

    let req = hex(cap.request);
    c.on_segment(&mut mem, now, 1, &req, true, 1);
    c.on_advance(&mut mem, now, 1 + req.len() as u32);
    match c.poll_event() {
        Some(ConnEvent::ConnectRequest(r)) => {
            assert_eq!(r.revision, 2);
            assert_eq!(r.crc, cap.mpa.require_crc);
            assert!(r.private_data.is_empty());
        }
        other => panic!("{other:?}"),
    }
    c.post_recv(RecvWr {
        wr_id: 20,
        sgl: vec![Sge {
            stag: local,
            to: 512,
            len: 16,
        }],
    })
    .unwrap();
    c.accept(now, &mut mem, &[]).unwrap();
    let u = c.next_unit(&mut mem, now, 1, MSS).expect("reply");
    assert_eq!(u.octets(), hex(cap.reply));
    let mut cseq = 25u32;
    if let Some(rtr) = cap.rtr {
        assert_eq!(c.state(), ConnState::Negotiating, "waits for the RTR");
        let rtr = hex(rtr);
        c.on_segment(&mut mem, now, cseq, &rtr, true, cseq);
        cseq += rtr.len() as u32;
        c.on_advance(&mut mem, now, cseq);
    }
    let n = loop {
        match c.poll_event() {
            Some(ConnEvent::Established(n)) => break n,
            Some(_) => {}
            None => panic!("not established"),
        }
    };
    // The client's Send (its buffer descriptor) lands in the posted receive.
    c.on_segment(&mut mem, now, cseq, &send, true, cseq);
    cseq += send.len() as u32;
    c.on_advance(&mut mem, now, cseq);
    let wc = c.poll_completion().expect("receive");
    assert_eq!(
        (wc.wr_id, wc.byte_len, wc.status),
        (20, 16, CompletionStatus::Success)
    );
    let desc = mem.bytes()[512..528].to_vec();
    assert_eq!(&desc[..], &send[20..36]);
    // The server reads the advertised buffer: siw's Read Request, octet for octet.
    let src = STag(u32::from_be_bytes(desc[8..12].try_into().unwrap()));
    let src_to = u64::from_be_bytes(desc[..8].try_into().unwrap());
    c.post_send(
        now,
        &mem,
        SendWr::new(
            1,
            SendOp::Read {
                sink: RemoteBuf {
                    stag: sink,
                    to: sink_to,
                },
                remote: RemoteBuf {
                    stag: src,
                    to: src_to,
                },
                len: 64,
            },
        ),
    )
    .unwrap();
    let u = c.next_unit(&mut mem, now, 25, MSS).expect("read request");
    assert_eq!(u.octets(), rr);
    let mut sseq = 25 + rr.len() as u32;
    c.on_segment(&mut mem, now, cseq, &resp, true, cseq);
    cseq += resp.len() as u32;
    c.on_advance(&mut mem, now, cseq);
    let wc = c.poll_completion().expect("read");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len, wc.status),
        (1, CompletionOpcode::Read, 64, CompletionStatus::Success)
    );
    assert_eq!(&mem.bytes()[2048..2112], &resp[16..80]);
    if let Some(ss) = cap.server_send {
        // "go ahead": 16 zero octets, siw's FPDU octet for octet.
        c.post_send(
            now,
            &mem,
            SendWr::new(
                2,
                SendOp::Send {
                    sgl: iwarp::mem::Sgl::one(Sge {
                        stag: local,
                        to: 256,
                        len: 16,
                    }),
                    solicited: false,
                    invalidate: None,
                },
            ),
        )
        .unwrap();
        let u = c.next_unit(&mut mem, now, sseq, MSS).expect("send");
        assert_eq!(u.octets(), hex(ss));
        sseq += u.octets().len() as u32;
    }
    assert!(sseq > 25);
    let st = c.stats();
    assert_eq!(
        st.crc_errors + st.terminates_sent + st.terminates_received,
        0
    );
    n
}

// RFC 5044 §7.1, RFC 6581 §5: our responder's Reply to siw's Request is siw's Reply.
#[test]
fn responder_against_siw_initiator_bytes() {
    let n = replay_responder(plain());
    assert_eq!(n.role, Role::Responder);
    assert_eq!((n.revision, n.crc, n.ird, n.ord), (2, false, 1, 1));
}

// RFC 5044 §4.1: CRCs computed here equal siw's for the server's FPDUs.
#[test]
fn responder_against_siw_initiator_with_crc() {
    let n = replay_responder(crc());
    assert!(n.crc);
}

// RFC 6581 §5: the responder picks the Write RTR as siw does, consumes siw's RTR, and only
// then is established.
#[test]
fn responder_against_siw_initiator_peer_to_peer() {
    let mut cap = p2p();
    cap.mpa.p2p = Some(RtrTypes {
        send: false,
        write: true,
        read: true,
    });
    let n = replay_responder(cap);
    assert_eq!(n.rtr, Some(RtrKind::Write));
}

// RFC 5044 §7.1: frames may arrive in any segmentation: the Request one octet at a time,
// and the Reply sharing a segment with the first FPDU.
#[test]
fn frames_split_and_joined_across_segments() {
    let cap = plain();
    let now = Instant::from_millis(1_000);
    let cfg = || ConnConfig {
        pd: PD,
        ..ConnConfig::new(cap.mpa.clone())
    };
    let mut rmem = SimpleMemory::with_heap(256);
    let mut r = Connection::responder(cfg(), now).unwrap();
    let req = hex(cap.request);
    for (i, b) in req.iter().enumerate() {
        let seq = 1 + i as u32;
        r.on_segment(&mut rmem, now, seq, std::slice::from_ref(b), true, seq);
        r.on_advance(&mut rmem, now, seq + 1);
        let ev = r.poll_event();
        assert_eq!(ev.is_some(), i == req.len() - 1, "octet {i}: {ev:?}");
    }

    let mut imem = SimpleMemory::with_heap(256);
    let mut i = Connection::initiator(cfg(), now).unwrap();
    i.next_unit(&mut imem, now, 1, MSS).unwrap();
    // The Reply and siw's Read Request in one segment: the Read Request is processed in
    // FPDU mode (it fails the access check here: no such STag, RFC 5040 §7.2).
    let mut joined = hex(cap.reply);
    joined.extend_from_slice(&hex(cap.server_read_request));
    let c = i.on_segment(&mut imem, now, 1, &joined, true, 1);
    assert_eq!(c.total(), joined.len());
    i.on_advance(&mut imem, now, 1 + joined.len() as u32);
    assert!(matches!(i.poll_event(), Some(ConnEvent::Established(_))));
    assert_eq!(i.stats().fpdus_received, 1);
    assert_eq!(i.stats().terminates_sent, 1);
    let t = i.next_unit(&mut imem, now, 25, MSS).expect("terminate");
    // Untagged QN 2 (Terminate), RDMAP layer / remote protection error, invalid STag.
    assert_eq!(&t.octets()[2..4], &[0x41, 0x47]);
    assert_eq!(&t.octets()[8..12], &[0, 0, 0, 2]);
    assert_eq!(t.octets()[20], 0x01, "RDMAP layer, remote protection EType");
    assert_eq!(t.octets()[21], 0x00, "invalid STag");
}

// RFC 6581 §5 / RFC 5044 §7.1: a peer-to-peer responder that never gets the RTR times out
// and resets the connection.
#[test]
fn p2p_responder_times_out_without_rtr() {
    let mut cap = p2p();
    cap.mpa.p2p = Some(RtrTypes {
        send: false,
        write: true,
        read: false,
    });
    let now = Instant::from_millis(1_000);
    let cfg = ConnConfig {
        pd: PD,
        ..ConnConfig::new(cap.mpa.clone())
    };
    let mut rmem = SimpleMemory::with_heap(256);
    let mut r = Connection::responder(cfg, now).unwrap();
    let req = hex(cap.request);
    r.on_segment(&mut rmem, now, 1, &req, true, 1);
    r.on_advance(&mut rmem, now, 25);
    assert!(matches!(r.poll_event(), Some(ConnEvent::ConnectRequest(_))));
    r.accept(now, &mut rmem, &[]).unwrap();
    assert!(r.next_unit(&mut rmem, now, 1, MSS).is_some(), "reply");
    assert_eq!(r.state(), ConnState::Negotiating);
    let deadline = r.poll_timeout().expect("RTR deadline");
    assert!(deadline > now);
    r.handle_timeout(deadline, &rmem);
    assert_eq!(r.state(), ConnState::Failed);
    assert!(matches!(
        r.poll_event(),
        Some(ConnEvent::NegotiationFailed {
            recovery: iwarp::mpa::Recovery::Reset,
            ..
        })
    ));
    assert_eq!(r.poll_llp_request(), Some(iwarp::conn::LlpRequest::Reset));
}
