//! Bad input over IPv6 and VLANs: an attacker with an established iWARP connection to the
//! server (IPv6 on VLAN 100) wraps a valid FPDU (a Send the server would complete) in
//! frames the data plane does not take: an extension-header chain, a jumbogram, fragments,
//! another VLAN or none, and sends a neighbour advertisement nobody asked for. Each is
//! counted in its class and dropped: the Send is not delivered, nothing panics, the same
//! Send sent plainly afterwards is delivered, and the good connection still moves data.

mod hostile_common;

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use dataplane::classify::FrameClass;
use dataplane::frame::{write_l2, Vlan};
use dataplane::lcore::LoopCounters;
use dataplane::ndp;
use hostile_common::*;
use iwarp::verbs::{CompletionStatus, WcOpcode};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetProtocol, IpAddress, IpProtocol, Ipv6Packet, Ipv6Repr, TcpControl, TcpPacket, TcpRepr,
    TcpSeqNumber,
};

const EVIL_PORT: u16 = 41_000;
const LAN: Lan = Lan::IPV6_VLAN;

/// The attacker connected (MPA done) next to the good client.
fn setup() -> (Net, ServerConn) {
    let mut net = Net::with_good_client_on(LAN);
    let sc = net.evil_establish(EVIL_PORT);
    (net, sc)
}

/// The TCP segment (checksum over the IPv6 pseudo-header) carrying the next Send of the
/// attacker's connection, without advancing its sequence number.
fn send_segment(net: &Net) -> Vec<u8> {
    let c = &net.evil[&EVIL_PORT];
    let payload = fpdu(&untagged(3, 0, 1, 0, b"should never arrive"));
    let tcp = TcpRepr {
        src_port: EVIL_PORT,
        dst_port: LISTEN_PORT,
        control: TcpControl::Psh,
        seq_number: TcpSeqNumber(c.snd_nxt as i32),
        ack_number: Some(TcpSeqNumber(c.rcv_nxt as i32)),
        window_len: 65535,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &payload,
    };
    let mut seg = vec![0u8; tcp.buffer_len()];
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut seg[..]),
        &IpAddress::from(LAN.evil_ip()),
        &IpAddress::from(LAN.server_ip()),
        &ChecksumCapabilities::default(),
    );
    seg
}

/// An Ethernet frame tagged `tag` from the attacker to the server carrying an IPv6 header
/// with `next` and `payload_len`, then `rest` (extension headers and upper layer).
fn ipv6_frame(tag: Option<Vlan>, next: IpProtocol, payload_len: u16, rest: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 18 + 40 + rest.len()];
    let at = write_l2(&mut f, SERVER_MAC, EVIL_MAC, tag, EthernetProtocol::Ipv6);
    f.truncate(at + 40 + rest.len());
    let (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) = (LAN.evil_ip(), LAN.server_ip()) else {
        unreachable!()
    };
    Ipv6Repr {
        src_addr,
        dst_addr,
        next_header: next,
        payload_len: usize::from(payload_len),
        hop_limit: 64,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut f[at..]));
    Ipv6Packet::new_unchecked(&mut f[at..]).set_payload_len(payload_len);
    f[at + 40..].copy_from_slice(rest);
    f
}

/// The server's RCV.NXT on the attacker's connection.
fn server_rcv_nxt(net: &Net, sc: ServerConn) -> u32 {
    net.server
        .handler()
        .tcp()
        .info(sc.id)
        .expect("connection")
        .rcv_nxt
}

/// Sends `frames`, lets the server run, and checks that the Send was not delivered and
/// its octets never reached the server's TCP; returns how the server's counters moved.
fn refused(net: &mut Net, sc: ServerConn, frames: &[Vec<u8>]) -> LoopCounters {
    let before = net.server.counters(0);
    let rcv = server_rcv_nxt(net, sc);
    for f in frames {
        net.inject(f);
    }
    net.run_for(Duration::from_millis(30));
    assert!(
        !delivered(net, sc),
        "the Send in a refused frame was delivered"
    );
    assert_eq!(server_rcv_nxt(net, sc), rcv, "a refused frame reached TCP");
    assert!(!net.evil[&EVIL_PORT].rst);
    let after = net.server.counters(0);
    let mut d = after;
    for (i, c) in d.classified.iter_mut().enumerate() {
        *c -= before.classified[i];
    }
    d.nd_unsolicited -= before.nd_unsolicited;
    d.nd_solicits -= before.nd_solicits;
    d
}

fn delivered(net: &Net, sc: ServerConn) -> bool {
    net.server_wcs.iter().any(|wc| {
        wc.qp == sc.qp && wc.opcode == WcOpcode::Receive && wc.status == CompletionStatus::Success
    })
}

/// The same Send, sent plainly, is delivered; the good client still moves data.
fn still_fine(net: &mut Net, sc: ServerConn) {
    let payload = fpdu(&untagged(3, 0, 1, 0, b"should never arrive"));
    net.evil_send(EVIL_PORT, &payload);
    let ok = net.run_until(Duration::from_secs(3), |n| delivered(n, sc));
    assert!(ok, "the plain Send was not delivered");
    net.good_write_read(0x33, 4096, 5000);
}

// RFC 8200 §4: a Hop-by-Hop Options header, then Destination Options, then TCP (both with
// a PadN option only). The data plane takes no extension headers: counted as ipv6-ext.
#[test]
fn extension_header_chain_is_counted_and_dropped() {
    let (mut net, sc) = setup();
    let seg = send_segment(&net);
    let mut rest = vec![60, 0, 1, 4, 0, 0, 0, 0]; // HBH: next DestOpts, 8 octets, PadN(4)
    rest.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]); // DestOpts: next TCP
    rest.extend_from_slice(&seg);
    let f = ipv6_frame(LAN.vlan, IpProtocol::HopByHop, rest.len() as u16, &rest);
    let d = refused(&mut net, sc, &[f]);
    assert_eq!(d.class(FrameClass::Ipv6ExtHeader), 1);
    // A routing header first, alone, counts the same way.
    let mut rest = vec![6, 0, 0, 0, 0, 0, 0, 0];
    rest.extend_from_slice(&seg);
    let f = ipv6_frame(LAN.vlan, IpProtocol::Ipv6Route, rest.len() as u16, &rest);
    assert_eq!(
        refused(&mut net, sc, &[f]).class(FrameClass::Ipv6ExtHeader),
        1
    );
    still_fine(&mut net, sc);
}

// RFC 2675: a jumbogram (Payload Length 0, a Hop-by-Hop header with the Jumbo Payload
// option giving the real length). Counted as ipv6-jumbo.
#[test]
fn jumbogram_is_counted_and_dropped() {
    let (mut net, sc) = setup();
    let seg = send_segment(&net);
    let jumbo_len = (8 + seg.len()) as u32;
    let mut rest = vec![6, 0, 0xc2, 4];
    rest.extend_from_slice(&jumbo_len.to_be_bytes());
    rest.extend_from_slice(&seg);
    let f = ipv6_frame(LAN.vlan, IpProtocol::HopByHop, 0, &rest);
    let d = refused(&mut net, sc, &[f]);
    assert_eq!(d.class(FrameClass::Ipv6Jumbogram), 1);
    still_fine(&mut net, sc);
}

// RFC 8200 §4.5: the Send's segment in two fragments (first with M set, the second at
// offset 8 units). Not reassembled: both counted as ipv6-frag.
#[test]
fn fragments_are_counted_and_dropped() {
    let (mut net, sc) = setup();
    let seg = send_segment(&net);
    let (a, b) = seg.split_at(64);
    let mut first = vec![6, 0, 0, 1, 0, 0, 0x12, 0x34]; // offset 0, M = 1
    first.extend_from_slice(a);
    let mut second = vec![6, 0, 0, 64, 0, 0, 0x12, 0x34]; // offset 64 octets, M = 0
    second.extend_from_slice(b);
    let frames = [first, second]
        .map(|rest| ipv6_frame(LAN.vlan, IpProtocol::Ipv6Frag, rest.len() as u16, &rest));
    let d = refused(&mut net, sc, &frames);
    assert_eq!(d.class(FrameClass::Ipv6Fragment), 2);
    still_fine(&mut net, sc);
}

// IEEE 802.1Q: the valid frame in VLAN 7, and untagged, on a port of VLAN 100: both
// counted as vlan-other before any layer above looks at them.
#[test]
fn frames_of_other_vlans_are_counted_and_dropped() {
    let (mut net, sc) = setup();
    let seg = send_segment(&net);
    let v7 = Some(Vlan { id: 7, priority: 2 });
    let frames = [v7, None].map(|tag| ipv6_frame(tag, IpProtocol::Tcp, seg.len() as u16, &seg));
    let d = refused(&mut net, sc, &frames);
    assert_eq!(d.class(FrameClass::OtherVlan), 2);
    still_fine(&mut net, sc);
}

// RFC 4861 §7.2.5: a neighbour advertisement for an address the server never asked for
// (with override, the attacker's MAC) is counted and dropped: when the server later needs
// that address it solicits it instead of trusting the advertisement.
#[test]
fn unsolicited_neighbour_advertisement_is_counted_and_dropped() {
    let (mut net, sc) = setup();
    let stranger: Ipv6Addr = "fd00:88::77".parse().unwrap();
    let IpAddr::V6(server) = LAN.server_ip() else {
        unreachable!()
    };
    let na = ndp::advertisement(EVIL_MAC, server, SERVER_MAC, stranger, true, LAN.vlan);
    let d = refused(&mut net, sc, &[nd_frame(&na)]);
    assert_eq!(d.class(FrameClass::Icmpv6), 1);
    assert_eq!(d.nd_unsolicited, 1);
    assert_eq!(d.nd_solicits, 0, "nothing answered");
    // A SYN from the stranger's address: the server must resolve it first.
    let mut syn = tcp_frame_on(LAN, 43_000, TcpControl::Syn, 7, None, &[]);
    let at = 18 + 8; // source address of the IPv6 header
    syn[at..at + 16].copy_from_slice(&stranger.octets());
    let mut tcp = TcpPacket::new_unchecked(&mut syn[18 + 40..]);
    tcp.fill_checksum(
        &IpAddress::Ipv6(stranger),
        &IpAddress::from(LAN.server_ip()),
    );
    let before = net.server.counters(0);
    net.inject(&syn);
    net.run_for(Duration::from_millis(20));
    let after = net.server.counters(0);
    assert_eq!(
        after.nd_solicits,
        before.nd_solicits + 1,
        "solicited the stranger"
    );
    assert!(
        after.unresolved > before.unresolved,
        "the SYN-ACK waits for it"
    );
    still_fine(&mut net, sc);
}
