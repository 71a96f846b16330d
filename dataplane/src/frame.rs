//! Writing Ethernet/IPv4 frames with smoltcp's emitters (checksums filled): the headers at
//! the front of every IPv4 frame the data plane builds itself (ICMP replies, generated UDP),
//! and whole UDP frames.

use std::net::Ipv4Addr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr,
};

use crate::classify::ETH_HLEN;

/// Length of an IPv4 header without options.
pub const IPV4_HLEN: usize = 20;

/// Hop limit (TTL) of the frames written here.
pub const TTL: u8 = 64;

/// Length of a frame carrying `payload_len` octets of IPv4 payload (no padding).
pub fn ipv4_frame_len(payload_len: usize) -> usize {
    ETH_HLEN + IPV4_HLEN + payload_len
}

/// The addresses of an Ethernet/IPv4 frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ends {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
}

impl Ends {
    /// Writes the Ethernet header (type IPv4) and the IPv4 header (`protocol`, `payload_len`
    /// octets of payload, checksum filled) at the front of `buf`, and returns the
    /// `payload_len` octets of payload that follow, for the caller to write.
    ///
    /// Panics when `buf` is shorter than [`ipv4_frame_len`]`(payload_len)`.
    pub fn emit_headers<'a>(
        &self,
        buf: &'a mut [u8],
        protocol: IpProtocol,
        payload_len: usize,
    ) -> &'a mut [u8] {
        let ip = Ipv4Repr {
            src_addr: self.src_ip,
            dst_addr: self.dst_ip,
            next_header: protocol,
            payload_len,
            hop_limit: TTL,
        };
        let mut eth = EthernetFrame::new_unchecked(&mut *buf);
        EthernetRepr {
            src_addr: EthernetAddress(self.src_mac),
            dst_addr: EthernetAddress(self.dst_mac),
            ethertype: EthernetProtocol::Ipv4,
        }
        .emit(&mut eth);
        ip.emit(
            &mut Ipv4Packet::new_unchecked(eth.payload_mut()),
            &ChecksumCapabilities::default(),
        );
        &mut buf[ipv4_frame_len(0)..ipv4_frame_len(payload_len)]
    }

    /// A frame carrying a UDP datagram from `src_port` to `dst_port` with `payload`.
    pub fn udp_frame(&self, src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
        let udp = UdpRepr { src_port, dst_port };
        let udp_len = udp.header_len() + payload.len();
        let mut buf = vec![0u8; ipv4_frame_len(udp_len)];
        udp.emit(
            &mut UdpPacket::new_unchecked(self.emit_headers(&mut buf, IpProtocol::Udp, udp_len)),
            &IpAddress::Ipv4(self.src_ip),
            &IpAddress::Ipv4(self.dst_ip),
            payload.len(),
            |p| p.copy_from_slice(payload),
            &ChecksumCapabilities::default(),
        );
        buf
    }
}
