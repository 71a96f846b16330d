//! TCP over IPv6 (RFC 8200, RFC 9293): the same engine, only the IP header, the checksum's
//! pseudo-header and the MSS differ.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use common::*;
use smoltcp::wire::{TcpControl, TcpPacket};
use tcp::{Config, Engine, Error, Instant, PacketError, StreamSocket};

fn v6_peer() -> RawPeer {
    RawPeer::between(test_config(), a_addr6(33_000), b_addr6())
}

// A transfer between two IPv6 addresses with loss, reordering and duplication is
// byte-exact, and every packet on the link is IPv6.
#[test]
fn impaired_transfer_over_ipv6_is_byte_exact() {
    let link = LinkConfig {
        loss: 0.01,
        reorder: 0.01,
        duplicate: 0.005,
        ..LinkConfig::default()
    };
    let buf = 1 << 20;
    let mut sim = Sim::streams(6, link, test_config(), test_config(), buf);
    sim.record = true;
    let data = payload(2 << 20, 6);
    let (got, _) = bulk_transfer_between(
        &mut sim,
        a_addr6(0),
        b_addr6(),
        &data,
        buf,
        Duration::from_secs(5),
    )
    .expect("transfer finished");
    assert!(got == data, "received bytes differ from sent bytes");
    assert!(sim.link.stats().lost > 0);
    assert!(!sim.delivered.is_empty());
    for (_, p) in &sim.delivered {
        assert_eq!(p[0] >> 4, 6, "IPv6 only");
        let s = Seg::parse(p).expect("valid IPv6/TCP with a good checksum");
        assert!(s.src == IpAddr::V6(A_IP6) || s.src == IpAddr::V6(B_IP6));
        assert!(p.len() <= 1500, "within the MTU: {}", p.len());
    }
}

// RFC 8200 §8.3 / RFC 9293 §3.7.1: the MSS offered over IPv6 is the MTU less 60 octets
// (40 of IPv6 header, 20 of TCP), over IPv4 less 40; data segments carry at most the MSS
// less the timestamps option and fill the MTU exactly.
#[test]
fn mss_follows_the_address_family() {
    for (mut p, ip_len) in [(v6_peer(), 40usize), (RawPeer::new(test_config()), 20)] {
        let mut syn = Seg::new(p.me, p.server, TcpControl::Syn, p.snd, None);
        syn.mss = Some(9000);
        syn.ts = Some((1, 0));
        let out = p.send(&syn);
        let synack = out.iter().find(|s| s.control == TcpControl::Syn).unwrap();
        assert_eq!(synack.mss, Some((1500 - ip_len - 20) as u16));
        let conn = p.handshake();
        let info = p.e.info(conn).unwrap();
        assert_eq!(info.effective_mss, 1500 - ip_len - 20 - 12);
        p.e.ulp_mut(conn).unwrap().write(&payload(20_000, 1));
        let mut buf = vec![0u8; 1500];
        let mut full = 0;
        while let Some(t) = p.e.poll_transmit(p.now, &mut (), &mut buf) {
            let s = Seg::parse(&buf[..t.len]).unwrap();
            assert!(s.payload.len() <= info.effective_mss);
            if s.payload.len() == info.effective_mss {
                assert_eq!(t.len, 1500, "a full segment fills the MTU");
                full += 1;
            }
            assert_eq!(t.dst, p.me.ip());
            assert_eq!(t.src, p.server.ip());
        }
        assert!(full > 0);
    }
}

// RFC 8200 §3: version 6, Next Header 6 (TCP), hop limit 64, Payload Length the segment's.
#[test]
fn ipv6_header_of_emitted_packets() {
    let mut p = v6_peer();
    let syn = Seg::new(p.me, p.server, TcpControl::Syn, p.snd, None);
    p.e.handle_packet(p.now, &mut (), &syn.emit()).unwrap();
    let mut buf = vec![0u8; 1500];
    let t =
        p.e.poll_transmit(p.now, &mut (), &mut buf)
            .expect("SYN-ACK");
    let pkt = &buf[..t.len];
    assert_eq!(pkt[0] >> 4, 6);
    assert_eq!(u16::from_be_bytes([pkt[4], pkt[5]]) as usize, t.len - 40);
    assert_eq!((pkt[6], pkt[7]), (6, 64));
    assert_eq!(&pkt[8..24], &B_IP6.octets());
    assert_eq!(&pkt[24..40], &A_IP6.octets());
    assert!(TcpPacket::new_checked(&pkt[40..])
        .unwrap()
        .verify_checksum(&B_IP6.into(), &A_IP6.into()));
}

// RFC 9293 §3.10.7.1 over IPv6: a SYN to a closed port gets a RST back to its source; a
// listener on one IPv6 address does not take a SYN for another.
#[test]
fn closed_port_and_other_address_get_a_reset() {
    let mut e: Engine<StreamSocket> = Engine::new(test_config());
    e.listen(b_addr6(), 4).unwrap();
    let other = SocketAddr::new(
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 9)),
        5000,
    );
    for dst in [SocketAddr::new(IpAddr::V6(B_IP6), 5001), other] {
        let syn = Seg::new(a_addr6(4000), dst, TcpControl::Syn, 1000, None);
        e.handle_packet(Instant::ZERO, &mut (), &syn.emit())
            .unwrap();
        let out = drain(&mut e, Instant::ZERO);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].control, TcpControl::Rst);
        assert_eq!((out[0].src, out[0].dst), (dst.ip(), a_addr6(4000).ip()));
        assert_eq!(out[0].ack, Some(1001));
    }
    assert_eq!(e.connection_count(), 0);
    let syn = Seg::new(a_addr6(4000), b_addr6(), TcpControl::Syn, 1000, None);
    e.handle_packet(Instant::ZERO, &mut (), &syn.emit())
        .unwrap();
    assert_eq!(e.half_open(5000), 1);
}

// One listener on the unspecified address serves both families; each connection keeps its
// own family.
#[test]
fn unspecified_listener_takes_both_families() {
    let mut p6 = v6_peer();
    let c6 = p6.handshake();
    assert_eq!(p6.e.tuple(c6).unwrap().remote, a_addr6(33_000));
    let mut p4 = RawPeer::new(test_config());
    let c4 = p4.handshake();
    assert_eq!(p4.e.tuple(c4).unwrap().remote, a_addr(33_000).into());
    let out = p6.send_data(b"over ipv6");
    assert!(out.iter().all(|s| s.src == IpAddr::V6(B_IP6)));
    assert_eq!(p6.e.ulp_mut(c6).unwrap().read_all(), b"over ipv6");
}

// An active open needs both addresses of one family.
#[test]
fn connect_across_families_is_refused() {
    let mut e: Engine<StreamSocket> = Engine::new(Config::default());
    let r = e.connect(
        Instant::ZERO,
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 0),
        b_addr6(),
        StreamSocket::new(64, 64),
    );
    assert_eq!(
        r.unwrap_err(),
        Error::FamilyMismatch {
            local: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            remote: IpAddr::V6(B_IP6),
        }
    );
    let c = e
        .connect(
            Instant::ZERO,
            a_addr6(0),
            b_addr6(),
            StreamSocket::new(64, 64),
        )
        .unwrap();
    let local = e.tuple(c).unwrap().local;
    assert!(local.is_ipv6() && local.port() >= Config::default().ephemeral_ports.0);
}

// Packets the engine does not take: an extension header first (RFC 8200 §4: not skipped
// here, the data plane drops such packets before), a truncated header, a bad checksum,
// multicast. None panics; the malformed ones are counted.
#[test]
fn bad_ipv6_packets_are_refused() {
    let mut p = v6_peer();
    let conn = p.handshake();
    let good = p.seg(TcpControl::Psh, b"abcd").emit();
    let mut hbh = good.clone();
    hbh[6] = 0; // Next Header: Hop-by-Hop Options
    assert_eq!(
        p.e.handle_packet(p.now, &mut (), &hbh),
        Err(PacketError::NotTcp(0))
    );
    let before = p.e.stats().malformed;
    assert_eq!(
        p.e.handle_packet(p.now, &mut (), &good[..30]),
        Err(PacketError::BadIpv6)
    );
    let mut long = good.clone();
    long[4..6].copy_from_slice(&2000u16.to_be_bytes()); // Payload Length past the packet
    assert_eq!(
        p.e.handle_packet(p.now, &mut (), &long),
        Err(PacketError::BadIpv6)
    );
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert_eq!(
        p.e.handle_packet(p.now, &mut (), &flipped),
        Err(PacketError::BadTcp)
    );
    let mut multicast = Seg::new(p.me, p.server, TcpControl::Psh, p.snd, Some(p.rcv));
    multicast.dst = IpAddr::V6(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1));
    assert_eq!(
        p.e.handle_packet(p.now, &mut (), &multicast.emit()),
        Err(PacketError::NotUnicast)
    );
    assert_eq!(p.e.stats().malformed, before + 4);
    // The connection is unharmed.
    p.send_data(b"abcd");
    assert_eq!(p.e.ulp_mut(conn).unwrap().read_all(), b"abcd");
}
