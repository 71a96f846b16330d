//! Hostile-peer tests: a scripted attacker speaking raw Ethernet/IP/TCP to a poll loop
//! running `RdmaHandler`. Each attack gets the outcome the specs name (Terminate
//! layer/type/code parsed from the server's frames, or a TCP reset), and afterwards a
//! well-behaved connection set up beforehand still completes an RDMA Write + Read with
//! byte-exact data, and the server's connection tables stay bounded. Every attack runs over
//! IPv4 (`ipv4::`) and over IPv6 on an 802.1Q VLAN (`ipv6_vlan::`) with the same expected
//! outcome.

mod hostile_common;

use std::time::Duration;

use hostile_common::*;
use iwarp::verbs::{CompletionStatus, WcOpcode};

const EVIL_PORT: u16 = 40_000;

/// Defines each attack as a function of the [`Lan`] and a test of it over IPv4 and one over
/// IPv6 on a VLAN.
macro_rules! over_both {
    ($($(#[$m:meta])* fn $name:ident($lan:ident: Lan) $body:block)*) => {
        $($(#[$m])* fn $name($lan: Lan) $body)*

        mod ipv4 {
            $(#[test]
            fn $name() {
                super::$name(super::Lan::IPV4)
            })*
        }

        mod ipv6_vlan {
            $(#[test]
            fn $name() {
                super::$name(super::Lan::IPV6_VLAN)
            })*
        }
    };
}

/// A server with a good connection that already moved data once.
fn setup(lan: Lan) -> Net {
    let mut net = Net::with_good_client_on(lan);
    net.good_write_read(1, 0, 4096);
    net
}

/// The good connection still works and the server holds only a bounded number of
/// connections (the good one plus at most `extra`).
fn still_serving(net: &mut Net, extra: usize) {
    net.good_write_read(0x5a, 8192, 6000);
    let tcp = net.server.handler().tcp();
    // A torn-down attacker connection may linger in FIN-WAIT/TIME-WAIT (one entry).
    assert!(
        tcp.connection_count() <= 2 + extra,
        "server holds {} TCP connections",
        tcp.connection_count()
    );
    assert!(
        net.server.handler().live() <= 1 + extra,
        "server holds {} iWARP connections",
        net.server.handler().live()
    );
}

/// Waits until the attacker's connection is reset or closed by the server.
fn torn_down(net: &mut Net, sport: u16) -> bool {
    net.run_until(Duration::from_secs(3), |n| {
        n.evil[&sport].rst || n.evil[&sport].fin
    })
}

/// MPA negotiation attack: the server never answers with a Reply and resets the
/// connection (MPA-FACTS §1, RFC 5044 §7.1: malformed Request → reset).
fn mpa_attack(lan: Lan, request: Vec<u8>) {
    let mut net = setup(lan);
    net.evil_connect(EVIL_PORT);
    net.evil_send(EVIL_PORT, &request);
    assert!(torn_down(&mut net, EVIL_PORT), "connection not torn down");
    let c = &net.evil[&EVIL_PORT];
    assert!(c.rst, "expected a TCP reset");
    assert!(
        c.rx.is_empty(),
        "server answered a malformed Request: {:?}",
        c.rx
    );
    still_serving(&mut net, 0);
}

/// FPDU-mode attack: `stream` after the MPA exchange; the server answers with Terminate
/// `want` and tears the connection down.
fn fpdu_attack(lan: Lan, stream: Vec<u8>, want: (u8, u8, u8)) -> Net {
    let mut net = setup(lan);
    net.evil_establish(EVIL_PORT);
    let before = net.server_region();
    net.evil_send(EVIL_PORT, &stream);
    let t = net.await_terminate(EVIL_PORT);
    let Some((layer, etype, code, _)) = t else {
        panic!(
            "no Terminate from the server (rst {})",
            net.evil[&EVIL_PORT].rst
        );
    };
    assert_eq!((layer, etype, code), want, "Terminate layer/type/code");
    assert!(torn_down(&mut net, EVIL_PORT), "connection not torn down");
    // Nothing of the attack was placed in the region (the good client only writes at 0 and
    // 8192, after this point).
    assert!(net.server_region() == before, "attack bytes placed");
    still_serving(&mut net, 0);
    net
}

over_both! {
// RFC 5044 §7.1.1: the key must be "MPA ID Req Frame"; anything else is not an MPA peer.
fn mpa_bad_key_is_reset(lan: Lan) {
    let mut req = mpa_request(0x4000 | 1, &[]);
    req[4] = b'X';
    mpa_attack(lan, req);
}

// RFC 5044 §7.1.1: PD_Length at most 512.
fn mpa_private_data_over_512_is_reset(lan: Lan) {
    let mut req = mpa_request(0x4000 | 1, &[0u8; 600]);
    req[18..20].copy_from_slice(&600u16.to_be_bytes());
    mpa_attack(lan, req);
}

// RFC 5044 §7.1.1: Res bits must be zero (MPA-FACTS §1: reject malformed frames).
fn mpa_reserved_bits_is_reset(lan: Lan) {
    mpa_attack(lan, mpa_request(0x4000 | 0x0100 | 1, &[]));
}

// RFC 5044 §7.1 (Rev): a receiver that cannot interoperate with the received revision
// terminates the connection; this responder speaks revisions 1 and 2 (RFC 6581), so a
// Request with revision 3 is refused with a reset and no Reply.
fn mpa_revision_3_is_reset(lan: Lan) {
    mpa_attack(lan, mpa_request(0x4000 | 3, &[]));
}

// RFC 5041 §7.2 (DDP) via RFC 5040 §7.1 case 2: Terminate layer 1.

// RFC 5041 §7.2: QN not valid for this stream → 1/2/01 Invalid QN.
fn ddp_invalid_qn(lan: Lan) {
    fpdu_attack(lan, fpdu(&untagged(3, 5, 1, 0, b"hello")), (1, 2, 0x01));
}

// RFC 5041 §7.2, SPEC-DIGEST D15: an old MSN (0, before the first message) is outside
// the legal window → 1/2/03 Invalid MSN – MSN range is not valid.
fn ddp_msn_out_of_range(lan: Lan) {
    fpdu_attack(lan, fpdu(&untagged(3, 0, 0, 0, b"hello")), (1, 2, 0x03));
}

// RFC 5041 §7.2, SPEC-DIGEST D15: an MSN beyond the posted receive buffers → 1/2/02
// Invalid MSN – no buffer available.
fn ddp_msn_beyond_posted_buffers(lan: Lan) {
    fpdu_attack(lan, fpdu(&untagged(3, 0, 1000, 0, b"hello")), (1, 2, 0x02));
}

// RFC 5041 §7.2 / §8.2: STag not associated with the stream (other PD) → 1/1/02.
fn ddp_stag_of_another_pd(lan: Lan) {
    let mut net = Net::on(lan);
    let other = {
        let h = net.server.handler_mut();
        let rnic = h.rnic_mut();
        let pd = rnic.alloc_pd(iwarp::verbs::UlpId(9)).expect("pd");
        let mut arena = dataplane::rdma::Arena::new(rnic.memory().bytes().len());
        // Skip what the harness registered.
        arena
            .register(rnic, net.srv.pd, 1 << 20, dataplane::apps::all_rights())
            .expect("skip");
        arena
            .register(rnic, pd, 4096, dataplane::apps::all_rights())
            .expect("other pd region")
    };
    net.evil_arp();
    net.connect_good();
    net.evil_establish(EVIL_PORT);
    net.evil_send(
        EVIL_PORT,
        &fpdu(&tagged(0, other.stag.0, other.addr(0), &[0xee; 64])),
    );
    let t = net.await_terminate(EVIL_PORT).expect("terminate");
    assert_eq!((t.0, t.1, t.2), (1, 1, 0x02));
    let h = net.server.handler();
    {
        let rnic = h.rnic();
        assert!(
            other.bytes(rnic)[..64].iter().all(|&b| b != 0xee),
            "placed into another PD's region"
        );
    }
    assert!(torn_down(&mut net, EVIL_PORT));
    still_serving(&mut net, 0);
}

// RFC 5041 §7.2: TO + length past the region's end → 1/1/01 Base or bounds violation.
fn ddp_to_past_region_end(lan: Lan) {
    let net = Net::on(lan);
    let (stag, end) = (net.srv_region.stag.0, net.srv_region.addr(REGION_LEN - 16));
    drop(net);
    fpdu_attack(lan, fpdu(&tagged(0, stag, end, &[0xee; 64])), (1, 1, 0x01));
}

// RFC 5041 §7.2: an STag nobody registered → 1/1/00 Invalid STag.
fn ddp_unknown_stag(lan: Lan) {
    fpdu_attack(lan, fpdu(&tagged(0, 0x00ab_cd00, 0, &[0xee; 64])), (1, 1, 0x00));
}

// RFC 5040 §7.2 item 2: an opcode RDMAP does not define → 0/2/06 Unexpected OpCode.
fn rdmap_unknown_opcode(lan: Lan) {
    fpdu_attack(lan, fpdu(&untagged(0xf, 0, 1, 0, b"hello")), (0, 2, 0x06));
}

// RFC 5040 §4.1 / SPEC-DIGEST D11: RDMAP version 3 → 0/2/05 Invalid RDMAP version.
fn rdmap_bad_version(lan: Lan) {
    let mut seg = untagged(3, 0, 1, 0, b"hello");
    seg[1] = 0xc0 | 3;
    fpdu_attack(lan, fpdu(&seg), (0, 2, 0x05));
}

// RFC 5044 §7.2 (MPA-FACTS §6): CRC mismatch → 2/0/02.
fn mpa_crc_error(lan: Lan) {
    let mut f = fpdu(&untagged(3, 0, 1, 0, b"hello"));
    let n = f.len();
    f[n - 1] ^= 0x55;
    fpdu_attack(lan, f, (2, 0, 0x02));
}

// RFC 5044 §4.1/§7.2: an FPDU whose ULPDU_Length is shorter than any DDP header (CRC
// right). The framing itself is inconsistent; MPA's only length code is 2/0/03 ("marker
// and ULPDU_Length disagree"), which the data plane uses for every impossible length.
fn fpdu_shorter_than_headers(lan: Lan) {
    fpdu_attack(lan, fpdu(&[0x41, 0x43, 0, 0]), (2, 0, 0x03));
}

// RFC 5044 §4.1: a long ULPDU_Length (30 000, far above the MULPDU of a 1500-octet MTU)
// is not rejected by length alone (the receiver cannot know the sender's EMSS); the
// octets that follow are zeros, so the CRC fails → 2/0/02 (RFC 5044 §7.2).
fn ulpdu_length_long_with_garbage(lan: Lan) {
    let mut s = 30_000u16.to_be_bytes().to_vec();
    s.extend_from_slice(&[0u8; 31_000]);
    fpdu_attack(lan, s, (2, 0, 0x02));
}

// RFC 5044 §4.1: ULPDU_Length larger than what follows; the next octets are taken as
// the rest of the FPDU, so its CRC fails → 2/0/02 (RFC 5044 §7.2).
fn ulpdu_length_beyond_segment(lan: Lan) {
    let mut s = vec![0x05, 0xdc]; // 1500 octets announced
    s.extend_from_slice(&untagged(3, 0, 1, 0, b"short"));
    s.extend_from_slice(&[0u8; 4]);
    // More FPDUs follow; they become part of the big one.
    for _ in 0..100 {
        s.extend_from_slice(&fpdu(&untagged(3, 0, 1, 0, b"after")));
    }
    fpdu_attack(lan, s, (2, 0, 0x02));
}

// RFC 5040 §7.2, SPEC-DIGEST §3.9/D15: more Read Requests than IRD at once → 1/2/03.
fn read_requests_beyond_ird(lan: Lan) {
    let net = Net::on(lan);
    let (stag, addr) = (net.srv_region.stag.0, net.srv_region.addr(0));
    drop(net);
    let mut s = Vec::new();
    for msn in 1..=SERVER_IRD + 1 {
        s.extend_from_slice(&fpdu(&read_request(msn, (0x77, 0), 16_000, (stag, addr))));
    }
    fpdu_attack(lan, s, (1, 2, 0x03));
}

// RFC 5040 §7.2 item 4: Read Request with TO past the source region → 0/1/01.
fn read_request_out_of_bounds(lan: Lan) {
    let net = Net::on(lan);
    let (stag, addr) = (net.srv_region.stag.0, net.srv_region.addr(REGION_LEN - 8));
    drop(net);
    fpdu_attack(lan,
        fpdu(&read_request(1, (0x77, 0), 64, (stag, addr))),
        (0, 1, 0x01),
    );
}

// RFC 5040 §6.3/§7 and RFC 5041 §7.1: after a Terminate the stream is dead: later
// segments are not placed or delivered, and no Terminate is sent back for a Terminate.
fn terminate_then_more_data(lan: Lan) {
    let mut net = setup(lan);
    let sc = net.evil_establish(EVIL_PORT);
    let before = net.server_region();
    // Terminate: QN 2, MSN 1, Layer 0 EType 0 Code 0, no headers.
    let mut s = fpdu(&untagged(7, 2, 1, 0, &[0x00, 0x00, 0x00, 0x00]));
    s.extend_from_slice(&fpdu(&untagged(3, 0, 1, 0, b"after terminate")));
    s.extend_from_slice(&fpdu(&tagged(
        0,
        net.srv_region.stag.0,
        net.srv_region.addr(30_000),
        &[0xee; 100],
    )));
    net.evil_send(EVIL_PORT, &s);
    assert!(torn_down(&mut net, EVIL_PORT), "connection not torn down");
    net.run_for(Duration::from_millis(50));
    assert!(
        find_terminate(&net.evil[&EVIL_PORT].rx).is_none(),
        "Terminate answered with a Terminate"
    );
    assert!(
        !net.server_wcs.iter().any(|wc| wc.qp == sc.qp
            && wc.opcode == WcOpcode::Receive
            && wc.status == CompletionStatus::Success),
        "a Send after Terminate was delivered"
    );
    assert!(
        net.server_region() == before,
        "a Write after Terminate was placed"
    );
    still_serving(&mut net, 0);
}

// RFC 793 §3.4 / RFC 4987: 10 000 half-open connections (SYN, never ACK) are bounded by
// the listener's backlog, the SYNs beyond it answered with SYN cookies that keep nothing
// (§3.6); the good connection keeps working.
fn ten_thousand_half_open(lan: Lan) {
    let mut net = setup(lan);
    for i in 0..10_000u16 {
        net.evil_syn(20_000 + i, false);
        if i % 256 == 255 {
            for _ in 0..8 {
                net.step();
            }
            let tcp = net.server.handler().tcp();
            assert!(
                tcp.half_open(LISTEN_PORT) <= 64,
                "half-open {}",
                tcp.half_open(LISTEN_PORT)
            );
        }
    }
    net.run_for(Duration::from_millis(20));
    let tcp = net.server.handler().tcp();
    assert!(tcp.half_open(LISTEN_PORT) <= 64);
    let st = tcp.stats();
    assert!(st.syn_cookies_sent >= 10_000 - 64 * 4, "{st:?}");
    assert_eq!(st.syn_cookies_accepted, 0, "{st:?}");
    assert!(tcp.connection_count() <= 1 + 64);
    still_serving(&mut net, 64);
}

// RFC 5044 §7.1 (MPA-FACTS §1): TCP connections that never send an MPA Request are timed
// out; they do not accumulate.
fn silent_connections_time_out(lan: Lan) {
    let mut net = setup(lan);
    for i in 0..40u16 {
        net.evil_connect(30_000 + i);
    }
    assert!(net.server.handler().tcp().connection_count() >= 41);
    // MPA timeout is 2 s in the harness.
    let ok = net.run_until(Duration::from_secs(6), |n| {
        n.server.handler().tcp().connection_count() <= 1
    });
    assert!(
        ok,
        "silent connections still held: {}",
        net.server.handler().tcp().connection_count()
    );
    assert!((0..40u16).all(|i| net.evil[&(30_000 + i)].rst || net.evil[&(30_000 + i)].fin));
    still_serving(&mut net, 0);
}

// RFC 4987 §3: a SYN flood, bounded in count (20 000 SYNs) and time (a few seconds).
fn syn_flood_bounded(lan: Lan) {
    let mut net = setup(lan);
    let start = dataplane::clock::now();
    for i in 0..20_000u32 {
        let sport = 1024 + (i % 60_000) as u16;
        let f = net.tcp_frame(
            sport,
            smoltcp::wire::TcpControl::Syn,
            i.wrapping_mul(7919),
            None,
            &[],
        );
        net.inject(&f);
        if i % 512 == 511 {
            net.step();
        }
    }
    net.run_for(Duration::from_millis(20));
    assert!(dataplane::clock::elapsed(start) < Duration::from_secs(30));
    let tcp = net.server.handler().tcp();
    assert!(tcp.half_open(LISTEN_PORT) <= 64);
    assert!(tcp.connection_count() <= 1 + 64);
    still_serving(&mut net, 64);
}

// VERBS-00 §6.6.1 / RFC 4987: connections that are reset before the MPA exchange must not
// use up the RNIC's QP table (1024 QPs; more than that many of each kind); a
// legitimate client connects afterwards.
fn connection_churn_does_not_exhaust_qps(lan: Lan) {
    let mut net = Net::on(lan);
    net.evil_arp();
    for i in 0..2100u16 {
        let sport = 10_000 + i;
        net.evil_connect(sport);
        if i % 2 == 0 {
            // Let the server attach its connection first (the other half is reset while
            // the accept is still queued).
            net.step();
            net.step();
        }
        let c = net.evil[&sport].clone();
        let f = net.tcp_frame(sport, smoltcp::wire::TcpControl::Rst, c.snd_nxt, None, &[]);
        net.inject(&f);
        net.step();
    }
    net.run_for(Duration::from_millis(20));
    assert_eq!(
        net.server.handler().live(),
        0,
        "reset connections still tracked"
    );
    {
        let h = net.server.handler_mut();
        let rnic = h.rnic_mut();
        let (qp, _) = rnic.create_qp(net.srv.init).expect("QP table has room");
        rnic.destroy_qp(qp).expect("destroy");
    }
    net.connect_good();
    still_serving(&mut net, 0);
}

// RFC 5044 §5 / §7.2 (MPA-FACTS §6): with markers negotiated towards the server, an FPDU
// whose marker FPDUPTR disagrees with ULPDU_Length (CRC recomputed, so only the marker is
// wrong) → Terminate 2/0/03. The FPDU before it, with correct markers, is delivered.
fn marker_disagrees_with_length(lan: Lan) {
    use iwarp::mpa::{Framer, MarkerSpacing};
    let mut cfg = rdma_config();
    cfg.mpa.want_markers = true;
    cfg.mpa.accept_markers = true;
    let mut net = Net::with_config_on(cfg, lan);
    net.evil_arp();
    net.connect_good();
    let sc = net.evil_establish(EVIL_PORT);
    let framer = Framer::new(true, Some(MarkerSpacing::new(0)));
    let mut s = Vec::new();
    let first = untagged(3, 0, 1, 0, &[0x11; 700]);
    framer.emit_fpdu(0, &[&first], &mut s).expect("fpdu");
    let start = s.len();
    let second = untagged(3, 0, 2, 0, &[0x22; 700]);
    framer
        .emit_fpdu(start as u32, &[&second], &mut s)
        .expect("fpdu");
    let end = s.len();
    let m = start.div_ceil(512) * 512;
    assert!(
        m > start && m + 4 < end - 4,
        "a marker inside the second FPDU"
    );
    let ptr = u16::from_be_bytes([s[m + 2], s[m + 3]]);
    assert_eq!(usize::from(ptr), m - start, "framer's marker");
    s[m + 2..m + 4].copy_from_slice(&(ptr + 64).to_be_bytes());
    let crc = iwarp::mpa::crc::crc32c(&s[start..end - 4]);
    s[end - 4..end].copy_from_slice(&iwarp::mpa::crc::to_wire(crc));
    net.evil_send(EVIL_PORT, &s);
    // The attacker did not ask for markers, so the server's FPDUs to it carry none.
    let t = net.await_terminate(EVIL_PORT).expect("terminate");
    assert_eq!((t.0, t.1, t.2), (2, 0, 0x03));
    assert!(
        net.server_wcs.iter().any(|wc| wc.qp == sc.qp
            && wc.opcode == WcOpcode::Receive
            && wc.status == CompletionStatus::Success
            && wc.byte_len == 700),
        "the FPDU with correct markers was not delivered"
    );
    assert!(torn_down(&mut net, EVIL_PORT));
    still_serving(&mut net, 0);
}

// RFC 9293 §3.10.7.4 (FIN-WAIT-2) / RFC 5040 §7: an attacker that provokes a Terminate and
// then never closes its side does not hold the connection (and its QP) forever: the
// FIN-WAIT-2 timer (1 s here) reclaims it.
fn attacker_that_never_closes_is_reaped(lan: Lan) {
    let mut cfg = rdma_config();
    cfg.tcp.fin_wait2_timeout = Duration::from_secs(1);
    let mut net = Net::with_config_on(cfg, lan);
    net.evil_closes = false;
    net.evil_arp();
    net.connect_good();
    net.evil_establish(EVIL_PORT);
    net.evil_send(EVIL_PORT, &fpdu(&untagged(3, 5, 1, 0, b"bad qn")));
    let t = net.await_terminate(EVIL_PORT).expect("terminate");
    assert_eq!((t.0, t.1, t.2), (1, 2, 0x01));
    assert!(torn_down(&mut net, EVIL_PORT));
    assert!(!net.evil[&EVIL_PORT].fin_sent);
    let ok = net.run_until(Duration::from_secs(5), |n| {
        n.server.handler().tcp().connection_count() == 1 && n.server.handler().live() == 1
    });
    assert!(
        ok,
        "half-closed attacker connection still held: {} TCP, {} iWARP",
        net.server.handler().tcp().connection_count(),
        net.server.handler().live()
    );
    still_serving(&mut net, 0);
}

// RFC 6581 §5 (peer-to-peer mode): a P2P initiator sends the agreed zero-length RTR as its
// first FPDU and may send its first real message right behind it, in the same TCP segment
// (Linux siw's perftest clients do). The responder must hold that Send until its QP is in
// RTS and then deliver it: no Terminate, no reset, the receive completes.
fn p2p_send_right_behind_the_rtr_is_delivered(lan: Lan) {
    let mut net = setup(lan);
    net.evil_connect(EVIL_PORT);
    // Revision 2, CRC, RFC 6581 enhanced mode (H); IRD 4 with the P2P bit, ORD 4 with the
    // zero-length RDMA Write RTR bit.
    let ird_ord = [0x80, 4, 0x80, 4];
    net.evil_send(EVIL_PORT, &mpa_request(0x5000 | 2, &ird_ord));
    let ok = net.run_until(Duration::from_secs(3), |n| {
        n.evil[&EVIL_PORT].rx.len() >= 24
    });
    assert!(ok, "no MPA Reply");
    let rx = net.evil[&EVIL_PORT].rx.clone();
    assert_eq!(&rx[..16], b"MPA ID Rep Frame");
    assert_eq!(rx[16] & 0x20, 0, "reply must not reject");
    assert_eq!(rx[20] & 0x80, 0x80, "reply must keep peer-to-peer mode");
    net.evil.get_mut(&EVIL_PORT).expect("conn").rx.drain(..24);
    let sc = *net
        .accepted
        .iter()
        .find(|c| c.remote.port() == EVIL_PORT)
        .expect("accepted");
    // The RTR (zero-length RDMA Write, STag 1, TO 0, as siw sends it) and a Send in one
    // segment.
    let mut stream = fpdu(&tagged(0, 1, 0, &[]));
    stream.extend_from_slice(&fpdu(&untagged(3, 0, 1, 0, b"right behind the RTR")));
    net.evil_send(EVIL_PORT, &stream);
    let delivered = net.run_until(Duration::from_secs(3), |n| {
        n.server_wcs.iter().any(|wc| {
            wc.qp == sc.qp
                && wc.opcode == WcOpcode::Receive
                && wc.status == CompletionStatus::Success
                && wc.byte_len == 20
        })
    });
    let c = &net.evil[&EVIL_PORT];
    assert!(
        delivered,
        "Send behind the RTR not delivered (terminate {:?}, rst {})",
        find_terminate(&c.rx),
        c.rst
    );
    assert_eq!(find_terminate(&c.rx), None);
    assert!(!c.rst);
    still_serving(&mut net, 1);
}
}
