//! The layer-2 framing of every frame the data plane reads or writes (Ethernet II, with or
//! without an 802.1Q VLAN tag), and whole frames built with smoltcp's emitters (checksums
//! filled): the headers at the front of every IP frame the data plane builds itself (ICMP
//! replies, neighbour discovery, generated UDP), and whole UDP frames.

use std::net::IpAddr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetProtocol, IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, UdpPacket,
    UdpRepr,
};

/// Ethernet header length (no VLAN tag).
pub const ETH_HLEN: usize = 14;
/// Length of an 802.1Q tag (TPID and TCI).
pub const VLAN_TAG_LEN: usize = 4;
/// Longest layer-2 header: Ethernet with one 802.1Q tag. Frames carry up to the IP MTU plus
/// this much.
pub const MAX_L2_HLEN: usize = ETH_HLEN + VLAN_TAG_LEN;
/// The 802.1Q tag protocol identifier (the ethertype of a tagged frame).
pub const TPID_8021Q: u16 = 0x8100;
/// The 802.1ad service tag identifier (a tag this data plane does not take).
pub const TPID_8021AD: u16 = 0x88a8;

/// Length of an IPv4 header without options.
pub const IPV4_HLEN: usize = 20;
/// Length of an IPv6 header without extension headers.
pub const IPV6_HLEN: usize = 40;

/// Hop limit (TTL) of the frames written here.
pub const TTL: u8 = 64;

/// What a device found of one checksum of a received frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checked {
    /// Not checked by the device: the stack checks it.
    #[default]
    Unknown,
    /// Correct (or the data is intact and the field was left to the device).
    Good,
    /// Wrong: the frame is dropped as the stack's own check would.
    Bad,
}

/// The device's checksum verdicts on a received frame (DPDK's receive checksum offloads;
/// [`Checked::Unknown`] on ports without them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxChecksum {
    /// The IPv4 header checksum.
    pub ip: Checked,
    /// The TCP or UDP checksum.
    pub l4: Checked,
}

/// An 802.1Q tag: VLAN identifier and priority (PCP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Vlan {
    /// VLAN identifier, 1..=4094.
    pub id: u16,
    /// Priority code point, 0..=7.
    pub priority: u8,
}

impl Vlan {
    /// The tag control information: priority, DEI 0, VLAN identifier (IEEE 802.1Q §9.6).
    pub fn tci(self) -> u16 {
        (u16::from(self.priority & 7) << 13) | (self.id & 0x0fff)
    }
}

/// Length of the Ethernet header written with `tag` in the frame (see [`write_l2`]).
pub fn l2_len(tag: Option<Vlan>) -> usize {
    ETH_HLEN + if tag.is_some() { VLAN_TAG_LEN } else { 0 }
}

/// Writes an Ethernet header from `src` to `dst` for `ethertype`, with the 802.1Q tag `tag`
/// when given, at the front of `buf`; returns its length.
///
/// Panics when `buf` is shorter than [`l2_len`]`(tag)`.
pub fn write_l2(
    buf: &mut [u8],
    dst: [u8; 6],
    src: [u8; 6],
    tag: Option<Vlan>,
    ethertype: EthernetProtocol,
) -> usize {
    buf[0..6].copy_from_slice(&dst);
    buf[6..12].copy_from_slice(&src);
    let mut at = 12;
    if let Some(v) = tag {
        buf[12..14].copy_from_slice(&TPID_8021Q.to_be_bytes());
        buf[14..16].copy_from_slice(&v.tci().to_be_bytes());
        at = 16;
    }
    buf[at..at + 2].copy_from_slice(&u16::from(ethertype).to_be_bytes());
    at + 2
}

/// The layer-2 header of a received frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2View {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// The 802.1Q TCI: from the frame's tag, or the one the device stripped.
    pub tci: Option<u16>,
    /// The ethertype after the tag, if any.
    pub ethertype: EthernetProtocol,
    /// Where the layer-3 header starts.
    pub l3_offset: usize,
}

impl L2View {
    /// The VLAN identifier of the tag, if any (0: a priority tag).
    pub fn vlan_id(&self) -> Option<u16> {
        self.tci.map(|t| t & 0x0fff)
    }
}

/// Reads the Ethernet header of `frame`, skipping one 802.1Q tag; `stripped` is the TCI the
/// device took off the frame (DPDK's receive VLAN offload), which a tag in the frame then
/// cannot be. `None` when the frame is shorter than its header.
pub fn parse_l2(frame: &[u8], stripped: Option<u16>) -> Option<L2View> {
    let word = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
    };
    let mut dst = [0u8; 6];
    let mut src = [0u8; 6];
    dst.copy_from_slice(frame.get(0..6)?);
    src.copy_from_slice(frame.get(6..12)?);
    let first = word(12)?;
    let (tci, ethertype, l3_offset) = match stripped {
        None if first == TPID_8021Q => (Some(word(14)?), word(16)?, ETH_HLEN + VLAN_TAG_LEN),
        tci => (tci, first, ETH_HLEN),
    };
    Some(L2View {
        dst,
        src,
        tci,
        ethertype: EthernetProtocol::from(ethertype),
        l3_offset,
    })
}

/// Where the headers of a TCP frame are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpFrame {
    /// Start of the IP header.
    pub l3: usize,
    /// IP header octets.
    pub l3_len: usize,
    /// TCP header octets.
    pub l4_len: usize,
    /// TCP header and payload octets.
    pub tcp_len: usize,
    /// IPv4 (else IPv6).
    pub ipv4: bool,
}

impl TcpFrame {
    /// All headers' length: where the payload starts.
    pub fn header_len(&self) -> usize {
        self.l3 + self.l3_len + self.l4_len
    }

    /// Payload octets.
    pub fn payload_len(&self) -> usize {
        self.tcp_len - self.l4_len
    }

    /// Whether the headers of frames `a` and `b` (both laid out as `self`) are equal but
    /// for what differs between the segments of one TSO frame: IP length, identification
    /// and checksum, TCP sequence number and checksum.
    pub fn same_headers(&self, a: &[u8], b: &[u8]) -> bool {
        a[..self.l3] == b[..self.l3] && self.same_packet_headers(&a[self.l3..], &b[self.l3..])
    }

    /// [`TcpFrame::same_headers`] for the IP packets `a` and `b` (starting at their IP
    /// headers).
    pub fn same_packet_headers(&self, a: &[u8], b: &[u8]) -> bool {
        let (l4, end) = (self.l3_len, self.l3_len + self.l4_len);
        if a.len() < end || b.len() < end {
            return false;
        }
        let same = |r: std::ops::Range<usize>| a[r.clone()] == b[r];
        let ip = if self.ipv4 {
            same(0..2) && same(6..10) && same(12..l4)
        } else {
            same(0..4) && same(6..l4)
        };
        ip && same(l4..l4 + 4) && same(l4 + 8..l4 + 16) && same(l4 + 18..end)
    }

    /// The TCP sequence number of `frame`.
    pub fn seq(&self, frame: &[u8]) -> u32 {
        let at = self.l3 + self.l3_len + 4;
        u32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]])
    }
}

/// Parses an unfragmented TCP segment over IPv4 or IPv6 without extension headers.
pub fn parse_tcp(frame: &[u8], tag_offloaded: Option<u16>) -> Option<TcpFrame> {
    let l2 = parse_l2(frame, tag_offloaded)?;
    let l3 = l2.l3_offset;
    let ip = frame.get(l3..)?;
    let (l3_len, tcp_len, ipv4) = match u16::from(l2.ethertype) {
        0x0800 => {
            let ihl = usize::from(*ip.first()? & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
            let fragment = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x3fff != 0;
            if ip[0] >> 4 != 4 || ihl < 20 || *ip.get(9)? != 6 || fragment || total < ihl {
                return None;
            }
            (ihl, total - ihl, true)
        }
        0x86dd => {
            if *ip.get(6)? != 6 {
                return None;
            }
            let payload = usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]));
            (IPV6_HLEN, payload, false)
        }
        _ => return None,
    };
    let l4 = l3 + l3_len;
    let l4_len = usize::from(*frame.get(l4 + 12)? >> 4) * 4;
    if l4_len < 20 || tcp_len < l4_len || frame.len() < l4 + tcp_len {
        return None;
    }
    Some(TcpFrame {
        l3,
        l3_len,
        l4_len,
        tcp_len,
        ipv4,
    })
}

/// Length of a frame carrying `payload_len` octets of IPv4 payload (no padding, no tag).
pub fn ipv4_frame_len(payload_len: usize) -> usize {
    ETH_HLEN + IPV4_HLEN + payload_len
}

/// The addresses of an Ethernet/IP frame (IPv4 or IPv6: the family of the addresses, which
/// agree) and its VLAN tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ends {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IP address.
    pub src_ip: IpAddr,
    /// Destination IP address.
    pub dst_ip: IpAddr,
    /// The 802.1Q tag written in the frame, if any.
    pub vlan: Option<Vlan>,
}

impl Ends {
    /// Length of the Ethernet and IP headers.
    pub fn header_len(&self) -> usize {
        l2_len(self.vlan)
            + match self.src_ip {
                IpAddr::V4(_) => IPV4_HLEN,
                IpAddr::V6(_) => IPV6_HLEN,
            }
    }

    /// Length of a frame carrying `payload_len` octets of IP payload (no padding).
    pub fn frame_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len
    }

    /// The same ends the other way round (a reply's).
    pub fn reversed(&self) -> Ends {
        Ends {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            vlan: self.vlan,
        }
    }

    /// Writes the Ethernet header (type IPv4 or IPv6, tagged when `vlan` is set) and the IP
    /// header (`protocol`, `payload_len` octets of payload, IPv4 checksum filled, hop limit
    /// [`TTL`] or `hop_limit`) at the front of `buf`, and returns the `payload_len` octets of
    /// payload that follow, for the caller to write.
    ///
    /// Panics when `buf` is shorter than [`Ends::frame_len`]`(payload_len)` or the
    /// addresses are of different families.
    pub fn emit_headers<'a>(
        &self,
        buf: &'a mut [u8],
        protocol: IpProtocol,
        payload_len: usize,
    ) -> &'a mut [u8] {
        self.emit_headers_with_hop_limit(buf, protocol, payload_len, TTL)
    }

    /// [`Ends::emit_headers`] with the given hop limit (255 for neighbour discovery).
    pub fn emit_headers_with_hop_limit<'a>(
        &self,
        buf: &'a mut [u8],
        protocol: IpProtocol,
        payload_len: usize,
        hop_limit: u8,
    ) -> &'a mut [u8] {
        match (self.src_ip, self.dst_ip) {
            (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => {
                let at = write_l2(
                    buf,
                    self.dst_mac,
                    self.src_mac,
                    self.vlan,
                    EthernetProtocol::Ipv4,
                );
                Ipv4Repr {
                    src_addr,
                    dst_addr,
                    next_header: protocol,
                    payload_len,
                    hop_limit,
                }
                .emit(
                    &mut Ipv4Packet::new_unchecked(&mut buf[at..]),
                    &ChecksumCapabilities::default(),
                );
            }
            (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) => {
                let at = write_l2(
                    buf,
                    self.dst_mac,
                    self.src_mac,
                    self.vlan,
                    EthernetProtocol::Ipv6,
                );
                Ipv6Repr {
                    src_addr,
                    dst_addr,
                    next_header: protocol,
                    payload_len,
                    hop_limit,
                }
                .emit(&mut Ipv6Packet::new_unchecked(&mut buf[at..]));
            }
            (s, d) => panic!("Ends::emit_headers: {s} and {d} are of different families"),
        }
        let start = self.header_len();
        &mut buf[start..start + payload_len]
    }

    /// A frame carrying a UDP datagram from `src_port` to `dst_port` with `payload`.
    pub fn udp_frame(&self, src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
        let udp = UdpRepr { src_port, dst_port };
        let udp_len = udp.header_len() + payload.len();
        let mut buf = vec![0u8; self.frame_len(udp_len)];
        udp.emit(
            &mut UdpPacket::new_unchecked(self.emit_headers(&mut buf, IpProtocol::Udp, udp_len)),
            &IpAddress::from(self.src_ip),
            &IpAddress::from(self.dst_ip),
            payload.len(),
            |p| p.copy_from_slice(payload),
            &ChecksumCapabilities::default(),
        );
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    // IEEE 802.1Q §9.6: TPID 0x8100, then PCP (3 bits), DEI (1), VID (12).
    #[test]
    fn tagged_header_layout_and_parse() {
        let v = Vlan {
            id: 100,
            priority: 5,
        };
        assert_eq!(v.tci(), 0xa064);
        let mut buf = [0u8; 18];
        let n = write_l2(&mut buf, [1; 6], [2; 6], Some(v), EthernetProtocol::Ipv6);
        assert_eq!(n, 18);
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0xa0, 0x64, 0x86, 0xdd]);
        let l2 = parse_l2(&buf, None).unwrap();
        assert_eq!((l2.dst, l2.src), ([1; 6], [2; 6]));
        assert_eq!((l2.tci, l2.vlan_id()), (Some(0xa064), Some(100)));
        assert_eq!((l2.ethertype, l2.l3_offset), (EthernetProtocol::Ipv6, 18));
        assert_eq!(
            write_l2(&mut buf, [1; 6], [2; 6], None, EthernetProtocol::Arp),
            14
        );
        let l2 = parse_l2(&buf, None).unwrap();
        assert_eq!(
            (l2.tci, l2.ethertype, l2.l3_offset),
            (None, EthernetProtocol::Arp, 14)
        );
        // A tag the device stripped is reported as the frame's.
        let l2 = parse_l2(&buf, Some(0x0064)).unwrap();
        assert_eq!((l2.vlan_id(), l2.l3_offset), (Some(100), 14));
        assert_eq!(parse_l2(&buf[..13], None), None);
        let mut cut = [0u8; 16];
        cut[12] = 0x81;
        assert_eq!(parse_l2(&cut, None), None, "a tag cut short");
    }

    #[test]
    fn ends_write_either_family_with_or_without_tag() {
        let v4 = Ends {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            vlan: None,
        };
        let f = v4.udp_frame(1, 2, b"x");
        assert_eq!(f.len(), ipv4_frame_len(9));
        let v6 = Ends {
            src_ip: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
            dst_ip: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            vlan: Some(Vlan { id: 7, priority: 0 }),
            ..v4
        };
        let f = v6.udp_frame(1, 2, b"x");
        assert_eq!(f.len(), 18 + 40 + 9);
        let l2 = parse_l2(&f, None).unwrap();
        assert_eq!(
            (l2.vlan_id(), l2.ethertype),
            (Some(7), EthernetProtocol::Ipv6)
        );
        let ip = Ipv6Packet::new_checked(&f[18..]).unwrap();
        assert_eq!((ip.next_header(), ip.hop_limit()), (IpProtocol::Udp, TTL));
        assert_eq!(ip.payload_len(), 9);
        let udp = UdpPacket::new_checked(ip.payload()).unwrap();
        assert!(udp.verify_checksum(&v6.src_ip.into(), &v6.dst_ip.into()));
        assert_eq!(v6.reversed().reversed(), v6);
    }
}
