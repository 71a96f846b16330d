//! Addresses and Ethernet frames (checksums filled) for unit tests.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpRepr, EthernetAddress, Icmpv4Repr, Icmpv6Packet, Icmpv6Repr, IpAddress,
    IpProtocol, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

use crate::frame::Ends;
use crate::icmp;

/// The MAC of the port under test.
pub(crate) const OUR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// The MAC of its peer.
pub(crate) const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// The IPv4 address of the port under test.
pub(crate) const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
/// The IPv4 address of its peer.
pub(crate) const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
/// The IPv6 address of the port under test.
pub(crate) const OUR_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 1);
/// The IPv6 address of its peer.
pub(crate) const PEER_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 2);

/// A frame from the peer to the port under test.
pub(crate) const TO_US: Ends = Ends {
    src_mac: PEER_MAC,
    dst_mac: OUR_MAC,
    src_ip: IpAddr::V4(PEER_IP),
    dst_ip: IpAddr::V4(OUR_IP),
    vlan: None,
};

/// An IPv6 frame from the peer to the port under test.
pub(crate) const TO_US6: Ends = Ends {
    src_mac: PEER_MAC,
    dst_mac: OUR_MAC,
    src_ip: IpAddr::V6(PEER_IP6),
    dst_ip: IpAddr::V6(OUR_IP6),
    vlan: None,
};

/// A TCP segment (PSH, seq 1000, ack 2000, ports 4000 → 5000) carrying `payload`.
pub(crate) fn tcp_frame(ends: Ends, payload: &[u8]) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: 4000,
        dst_port: 5000,
        control: TcpControl::Psh,
        seq_number: TcpSeqNumber(1000),
        ack_number: Some(TcpSeqNumber(2000)),
        window_len: 1024,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let mut buf = vec![0u8; ends.frame_len(tcp.buffer_len())];
    tcp.emit(
        &mut TcpPacket::new_unchecked(ends.emit_headers(
            &mut buf,
            IpProtocol::Tcp,
            tcp.buffer_len(),
        )),
        &IpAddress::from(ends.src_ip),
        &IpAddress::from(ends.dst_ip),
        &ChecksumCapabilities::default(),
    );
    buf
}

/// An ICMP (IPv4) or ICMPv6 (IPv6) echo request, as a Linux `ping` would send it.
pub(crate) fn echo_request(ends: Ends, ident: u16, seq_no: u16, data: &[u8]) -> Vec<u8> {
    match (ends.src_ip, ends.dst_ip) {
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let req = Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            };
            let mut buf = vec![0u8; ends.frame_len(req.buffer_len())];
            let body = ends.emit_headers(&mut buf, IpProtocol::Icmpv6, req.buffer_len());
            req.emit(
                &s,
                &d,
                &mut Icmpv6Packet::new_unchecked(body),
                &ChecksumCapabilities::default(),
            );
            buf
        }
        _ => {
            let req = Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            };
            let mut buf = vec![0u8; ends.frame_len(req.buffer_len())];
            icmp::emit_icmp(&ends, &req, &mut buf);
            buf
        }
    }
}

/// An ARP reply from `mac`/`ip` to the port under test.
pub(crate) fn arp_reply_to_us(mac: [u8; 6], ip: Ipv4Addr) -> ArpRepr {
    ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Reply,
        source_hardware_addr: EthernetAddress(mac),
        source_protocol_addr: ip,
        target_hardware_addr: EthernetAddress(OUR_MAC),
        target_protocol_addr: OUR_IP,
    }
}
