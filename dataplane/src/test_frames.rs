//! Ethernet frames built with smoltcp's emitters (checksums filled), for unit tests.

use std::net::Ipv4Addr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

/// Addresses of a test frame.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ends {
    pub(crate) src_mac: [u8; 6],
    pub(crate) dst_mac: [u8; 6],
    pub(crate) src_ip: Ipv4Addr,
    pub(crate) dst_ip: Ipv4Addr,
}

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
    let ip = Ipv4Repr {
        src_addr: ends.src_ip,
        dst_addr: ends.dst_ip,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let mut buf = vec![0u8; 14 + ip.buffer_len() + ip.payload_len];
    let caps = ChecksumCapabilities::default();
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    EthernetRepr {
        src_addr: EthernetAddress(ends.src_mac),
        dst_addr: EthernetAddress(ends.dst_mac),
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut frame);
    let mut ipp = Ipv4Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut ipp, &caps);
    tcp.emit(
        &mut TcpPacket::new_unchecked(ipp.payload_mut()),
        &IpAddress::Ipv4(ends.src_ip),
        &IpAddress::Ipv4(ends.dst_ip),
        &caps,
    );
    buf
}
