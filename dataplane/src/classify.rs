//! Frame classification: what a received frame is and whether it is for this port.
//!
//! Uses smoltcp's checked wire views, so any byte string is classified without panicking;
//! frames whose headers do not hold together are [`FrameClass::Malformed`] with the layer
//! that failed. A port on a VLAN takes only frames tagged with its VLAN identifier (the tag
//! in the frame, or the one the device stripped); a port on no VLAN takes untagged and
//! priority-tagged (VLAN 0) frames. Every other frame is [`FrameClass::OtherVlan`].
//!
//! IPv6 packets with an extension header (a fragment, a jumbogram's hop-by-hop header, any
//! chain) are counted in their own classes and not processed: the data plane carries TCP and
//! neighbour discovery, which need none.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use smoltcp::wire::{
    ArpPacket, EthernetProtocol, IpAddress, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket,
    UdpPacket,
};

pub use crate::frame::ETH_HLEN;
use crate::frame::{parse_l2, Checked, RxChecksum, TPID_8021AD};
use crate::ndp::{is_ipv6_multicast_mac, solicited_node, ALL_NODES};

/// The layer at which a malformed frame failed to parse or verify.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// Shorter than an Ethernet header (or its VLAN tag).
    Ethernet,
    /// ARP packet too short.
    Arp,
    /// IPv4 header invalid (version, lengths).
    Ipv4,
    /// IPv4 header checksum wrong.
    Ipv4Checksum,
    /// TCP header invalid (too short, bad data offset).
    Tcp,
    /// TCP checksum wrong.
    TcpChecksum,
    /// UDP header invalid.
    Udp,
    /// UDP checksum wrong.
    UdpChecksum,
    /// ICMP message too short.
    Icmp,
    /// IPv6 header invalid (version, a payload length past the frame).
    Ipv6,
    /// ICMPv6 message too short.
    Icmpv6,
}

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameClass {
    /// An ARP packet (any operation) for this port or broadcast.
    Arp,
    /// An ICMPv4 message addressed to this port.
    Icmp,
    /// A TCP segment addressed to this port (checksum verified).
    Tcp,
    /// A UDP datagram addressed to this port (checksum verified).
    Udp,
    /// IPv4 to this port with another protocol.
    OtherIpv4,
    /// An IPv4 fragment (not reassembled).
    Fragment,
    /// Another ethertype (LLDP, IPv6 on a port without an IPv6 address, ...).
    OtherEthertype,
    /// Destination MAC or IP address is not this port's.
    NotForUs,
    /// Headers do not hold together.
    Malformed(Malformed),
    /// An ICMPv6 message to one of this port's addresses or groups (neighbour discovery,
    /// echo).
    Icmpv6,
    /// IPv6 to this port with another protocol (or No Next Header).
    OtherIpv6,
    /// An IPv6 fragment (a Fragment header first; not reassembled).
    Ipv6Fragment,
    /// An IPv6 packet with another extension header (a chain, routing, options).
    Ipv6ExtHeader,
    /// An IPv6 jumbogram (RFC 2675: payload length 0, a hop-by-hop header).
    Ipv6Jumbogram,
    /// A frame of another VLAN (or untagged on a VLAN port, or tagged on a port on none).
    OtherVlan,
}

impl FrameClass {
    /// All classes, in the order of [`FrameClass::index`].
    pub const ALL: [FrameClass; 25] = [
        FrameClass::Arp,
        FrameClass::Icmp,
        FrameClass::Tcp,
        FrameClass::Udp,
        FrameClass::OtherIpv4,
        FrameClass::Fragment,
        FrameClass::OtherEthertype,
        FrameClass::NotForUs,
        FrameClass::Malformed(Malformed::Ethernet),
        FrameClass::Malformed(Malformed::Arp),
        FrameClass::Malformed(Malformed::Ipv4),
        FrameClass::Malformed(Malformed::Ipv4Checksum),
        FrameClass::Malformed(Malformed::Tcp),
        FrameClass::Malformed(Malformed::TcpChecksum),
        FrameClass::Malformed(Malformed::Udp),
        FrameClass::Malformed(Malformed::UdpChecksum),
        FrameClass::Malformed(Malformed::Icmp),
        FrameClass::Malformed(Malformed::Ipv6),
        FrameClass::Malformed(Malformed::Icmpv6),
        FrameClass::Icmpv6,
        FrameClass::OtherIpv6,
        FrameClass::Ipv6Fragment,
        FrameClass::Ipv6ExtHeader,
        FrameClass::Ipv6Jumbogram,
        FrameClass::OtherVlan,
    ];

    /// Dense index for counter arrays.
    pub fn index(self) -> usize {
        match self {
            FrameClass::Arp => 0,
            FrameClass::Icmp => 1,
            FrameClass::Tcp => 2,
            FrameClass::Udp => 3,
            FrameClass::OtherIpv4 => 4,
            FrameClass::Fragment => 5,
            FrameClass::OtherEthertype => 6,
            FrameClass::NotForUs => 7,
            FrameClass::Malformed(m) => {
                8 + match m {
                    Malformed::Ethernet => 0,
                    Malformed::Arp => 1,
                    Malformed::Ipv4 => 2,
                    Malformed::Ipv4Checksum => 3,
                    Malformed::Tcp => 4,
                    Malformed::TcpChecksum => 5,
                    Malformed::Udp => 6,
                    Malformed::UdpChecksum => 7,
                    Malformed::Icmp => 8,
                    Malformed::Ipv6 => 9,
                    Malformed::Icmpv6 => 10,
                }
            }
            FrameClass::Icmpv6 => 19,
            FrameClass::OtherIpv6 => 20,
            FrameClass::Ipv6Fragment => 21,
            FrameClass::Ipv6ExtHeader => 22,
            FrameClass::Ipv6Jumbogram => 23,
            FrameClass::OtherVlan => 24,
        }
    }

    /// Short name for stats output.
    pub fn name(self) -> &'static str {
        match self {
            FrameClass::Arp => "arp",
            FrameClass::Icmp => "icmp",
            FrameClass::Tcp => "tcp",
            FrameClass::Udp => "udp",
            FrameClass::OtherIpv4 => "ipv4-other",
            FrameClass::Fragment => "ipv4-frag",
            FrameClass::OtherEthertype => "ethertype-other",
            FrameClass::NotForUs => "not-for-us",
            FrameClass::Malformed(m) => match m {
                Malformed::Ethernet => "bad-eth",
                Malformed::Arp => "bad-arp",
                Malformed::Ipv4 => "bad-ipv4",
                Malformed::Ipv4Checksum => "bad-ipv4-csum",
                Malformed::Tcp => "bad-tcp",
                Malformed::TcpChecksum => "bad-tcp-csum",
                Malformed::Udp => "bad-udp",
                Malformed::UdpChecksum => "bad-udp-csum",
                Malformed::Icmp => "bad-icmp",
                Malformed::Ipv6 => "bad-ipv6",
                Malformed::Icmpv6 => "bad-icmpv6",
            },
            FrameClass::Icmpv6 => "icmpv6",
            FrameClass::OtherIpv6 => "ipv6-other",
            FrameClass::Ipv6Fragment => "ipv6-frag",
            FrameClass::Ipv6ExtHeader => "ipv6-ext",
            FrameClass::Ipv6Jumbogram => "ipv6-jumbo",
            FrameClass::OtherVlan => "vlan-other",
        }
    }
}

/// The result of classifying one frame: its class and where its layers start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    /// What the frame is.
    pub class: FrameClass,
    /// Offset of the layer-3 header (ARP, IPv4, IPv6): after the Ethernet header and the
    /// VLAN tag in the frame, if any.
    pub l3_offset: usize,
    /// Offset of the layer-4 header (TCP/UDP/ICMP), when the frame is IP.
    pub l4_offset: usize,
    /// Length of the layer-4 bytes (IP payload; Ethernet padding excluded).
    pub l4_len: usize,
    /// IP source, when the frame is IP (unspecified IPv4 otherwise).
    pub src_ip: IpAddr,
    /// IP destination, when the frame is IP.
    pub dst_ip: IpAddr,
    /// IPv6 hop limit (IPv4 TTL is not kept): neighbour discovery checks it.
    pub hop_limit: u8,
    /// A TCP segment whose checksum is still to be verified, by the handler
    /// ([`Classifier::defer_tcp_checksum`]).
    pub tcp_unverified: bool,
}

impl Classified {
    fn new(class: FrameClass) -> Classified {
        Classified {
            class,
            l3_offset: ETH_HLEN,
            l4_offset: 0,
            l4_len: 0,
            src_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            dst_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            hop_limit: 0,
            tcp_unverified: false,
        }
    }

    /// The layer-4 bytes of `frame` (empty unless the frame is IP).
    pub fn l4<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        frame
            .get(self.l4_offset..self.l4_offset + self.l4_len)
            .unwrap_or(&[])
    }

    /// The layer-3 bytes of `frame` (ARP, IP header onward).
    pub fn l3<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        frame.get(self.l3_offset..).unwrap_or(&[])
    }
}

/// An IPv4 header without options.
const IPV4_MIN_HLEN: usize = 20;
/// A TCP header without options.
const TCP_MIN_HLEN: usize = 20;

/// IPv6 Next Header values of extension headers (RFC 8200 §4, RFC 7045): a packet whose
/// first Next Header is one of these is not processed.
const EXTENSION_HEADERS: [u8; 9] = [0, 43, 44, 50, 51, 60, 135, 139, 140];

/// Classifies frames for one port.
#[derive(Clone, Debug)]
pub struct Classifier {
    mac: [u8; 6],
    ipv4: Option<Ipv4Addr>,
    /// The port's IPv6 addresses in use (link-local and configured); empty: no IPv6.
    ipv6: Vec<Ipv6Addr>,
    /// The port's VLAN identifier; `None`: untagged.
    vlan: Option<u16>,
    /// Accept frames to any destination MAC.
    pub promiscuous: bool,
    /// Verify IPv4/TCP/UDP checksums (off when the NIC verified them).
    pub verify_checksums: bool,
    /// Leave the checksum of a TCP segment the device gave no verdict on to the handler,
    /// which verifies it before the segment touches any state
    /// ([`crate::lcore::Handler::verifies_tcp_checksums`]): the segment is
    /// [`FrameClass::Tcp`] with [`Classified::tcp_unverified`] set. Device verdicts are
    /// taken as ever.
    pub defer_tcp_checksum: bool,
}

impl Classifier {
    /// A classifier for a port with this MAC and (optional) IPv4 address, untagged, without
    /// IPv6.
    pub fn new(mac: [u8; 6], ipv4: Option<Ipv4Addr>) -> Classifier {
        Classifier {
            mac,
            ipv4,
            ipv6: Vec::new(),
            vlan: None,
            promiscuous: false,
            verify_checksums: true,
            defer_tcp_checksum: false,
        }
    }

    /// Sets the port's IPv6 addresses (the link-local and the configured one; none: IPv6
    /// frames are [`FrameClass::OtherEthertype`]).
    pub fn set_ipv6(&mut self, addrs: impl IntoIterator<Item = Ipv6Addr>) {
        self.ipv6 = addrs.into_iter().collect();
    }

    /// Puts the port on VLAN `id` (`None`: untagged).
    pub fn set_vlan(&mut self, id: Option<u16>) {
        self.vlan = id;
    }

    /// Classifies `frame`; never panics, whatever the bytes.
    pub fn classify(&self, frame: &[u8]) -> Classified {
        self.classify_stripped(frame, None)
    }

    /// Classifies `frame`, whose 802.1Q tag the device stripped when `stripped` holds its
    /// TCI; never panics, whatever the bytes.
    pub fn classify_stripped(&self, frame: &[u8], stripped: Option<u16>) -> Classified {
        self.classify_offloaded(frame, stripped, RxChecksum::default())
    }

    /// Classifies `frame` as [`Classifier::classify_stripped`] does, taking the device's
    /// checksum verdicts `csum` for its own checks: a good checksum is not checked again, a
    /// bad one makes the frame malformed as the software check would.
    pub fn classify_offloaded(
        &self,
        frame: &[u8],
        stripped: Option<u16>,
        csum: RxChecksum,
    ) -> Classified {
        if stripped.is_none() {
            if let Some(c) = self.usual_tcp(frame, csum) {
                return c;
            }
        }
        self.classify_offloaded_generally(frame, stripped, csum)
    }

    /// [`Classifier::classify_offloaded`] for any frame.
    fn classify_offloaded_generally(
        &self,
        frame: &[u8],
        stripped: Option<u16>,
        csum: RxChecksum,
    ) -> Classified {
        let Some(l2) = parse_l2(frame, stripped) else {
            return Classified::new(FrameClass::Malformed(Malformed::Ethernet));
        };
        let vlan_ok = match (self.vlan, l2.vlan_id()) {
            (Some(ours), Some(theirs)) => ours == theirs,
            (None, tag) => tag.is_none_or(|id| id == 0),
            (Some(_), None) => false,
        };
        if !vlan_ok || u16::from(l2.ethertype) == TPID_8021AD {
            return Classified::new(FrameClass::OtherVlan);
        }
        let dst = l2.dst;
        let multicast_ok = !self.ipv6.is_empty() && is_ipv6_multicast_mac(dst);
        if !(self.promiscuous || dst == self.mac || dst == [0xff; 6] || multicast_ok) {
            return Classified::new(FrameClass::NotForUs);
        }
        let l3 = &frame[l2.l3_offset..];
        let mut c = match l2.ethertype {
            EthernetProtocol::Arp => match ArpPacket::new_checked(l3) {
                Ok(_) => Classified::new(FrameClass::Arp),
                Err(_) => Classified::new(FrameClass::Malformed(Malformed::Arp)),
            },
            EthernetProtocol::Ipv4 => self.classify_ipv4(l3, l2.l3_offset, csum),
            EthernetProtocol::Ipv6 if !self.ipv6.is_empty() => {
                self.classify_ipv6(l3, l2.l3_offset, csum.l4)
            }
            _ => Classified::new(FrameClass::OtherEthertype),
        };
        c.l3_offset = l2.l3_offset;
        c
    }

    /// The class of the usual frame of a transfer, read field by field: untagged on a port
    /// on no VLAN, to this port's MAC and IPv4 address, an IPv4 header without options, not
    /// a fragment, a TCP segment whose header holds together, both checksums passing
    /// ([`Classifier::passes`], or the TCP one left to the handler). `None` for anything
    /// else, left to the general path, which gives the same answer for these (tested).
    #[inline]
    fn usual_tcp(&self, frame: &[u8], csum: RxChecksum) -> Option<Classified> {
        const IP: usize = ETH_HLEN;
        const TCP: usize = IP + IPV4_MIN_HLEN;
        let h: &[u8; TCP + TCP_MIN_HLEN] = frame.get(..TCP + TCP_MIN_HLEN)?.try_into().ok()?;
        let ours = self.ipv4?.octets();
        // Ethertype IPv4; version 4 with a 20-octet header; TCP; no MF flag, offset 0.
        if h[12..14] != [0x08, 0x00]
            || h[IP] != 0x45
            || h[IP + 9] != u8::from(IpProtocol::Tcp)
            || h[IP + 6] & 0x3f != 0
            || h[IP + 7] != 0
            || h[..6] != self.mac
            || h[IP + 16..IP + 20] != ours
            || self.vlan.is_some()
        {
            return None;
        }
        let total = usize::from(u16::from_be_bytes([h[IP + 2], h[IP + 3]]));
        let tcp_header = usize::from(h[TCP + 12] >> 4) * 4;
        if total > frame.len() - IP
            || total < IPV4_MIN_HLEN + tcp_header
            || tcp_header < TCP_MIN_HLEN
        {
            return None;
        }
        let ip_ok = match csum.ip {
            Checked::Good => true,
            Checked::Bad => false,
            Checked::Unknown => !self.verify_checksums || tcp::checksum::header_sum_ok(&h[IP..TCP]),
        };
        if !ip_ok {
            return None;
        }
        let src = Ipv4Addr::new(h[IP + 12], h[IP + 13], h[IP + 14], h[IP + 15]);
        let dst = Ipv4Addr::from(ours);
        let segment = &frame[TCP..IP + total];
        let unverified =
            csum.l4 == Checked::Unknown && self.verify_checksums && self.defer_tcp_checksum;
        if !unverified
            && !self.passes(csum.l4, || {
                tcp::checksum::tcp_checksum_ok(src, dst, segment)
            })
        {
            return None;
        }
        Some(Classified {
            class: FrameClass::Tcp,
            l3_offset: IP,
            l4_offset: TCP,
            l4_len: total - IPV4_MIN_HLEN,
            src_ip: IpAddr::V4(src),
            dst_ip: IpAddr::V4(dst),
            hop_limit: 0,
            tcp_unverified: unverified,
        })
    }

    /// Whether a checksum passes: the device's verdict `v` when it has one, else the
    /// software check `ok` (when checksums are verified at all).
    fn passes(&self, v: Checked, ok: impl FnOnce() -> bool) -> bool {
        match v {
            Checked::Good => true,
            Checked::Bad => false,
            Checked::Unknown => !self.verify_checksums || ok(),
        }
    }

    fn classify_ipv4(&self, bytes: &[u8], l3_offset: usize, csum: RxChecksum) -> Classified {
        let malformed = |m| Classified::new(FrameClass::Malformed(m));
        let Ok(ip) = Ipv4Packet::new_checked(bytes) else {
            return malformed(Malformed::Ipv4);
        };
        if ip.version() != 4 {
            return malformed(Malformed::Ipv4);
        }
        let hlen = ip.header_len() as usize;
        if !self.passes(csum.ip, || {
            bytes.get(..hlen).is_some_and(tcp::checksum::header_sum_ok)
        }) {
            return malformed(Malformed::Ipv4Checksum);
        }
        let total = ip.total_len() as usize;
        let (src_ip, dst_ip) = (ip.src_addr(), ip.dst_addr());
        let mut c = Classified {
            class: FrameClass::OtherIpv4,
            l3_offset,
            l4_offset: l3_offset + hlen,
            l4_len: total.saturating_sub(hlen),
            src_ip: IpAddr::V4(src_ip),
            dst_ip: IpAddr::V4(dst_ip),
            hop_limit: 0,
            tcp_unverified: false,
        };
        if Some(dst_ip) != self.ipv4 && !dst_ip.is_broadcast() {
            c.class = FrameClass::NotForUs;
            return c;
        }
        if ip.more_frags() || ip.frag_offset() != 0 {
            c.class = FrameClass::Fragment;
            return c;
        }
        let payload = ip.payload();
        let (src, dst) = (IpAddress::Ipv4(src_ip), IpAddress::Ipv4(dst_ip));
        c.class = match ip.next_header() {
            IpProtocol::Tcp => {
                let (class, unverified) = self.tcp_class(src_ip, dst_ip, payload, csum.l4);
                c.tcp_unverified = unverified;
                class
            }
            IpProtocol::Udp => match UdpPacket::new_checked(payload) {
                Err(_) => FrameClass::Malformed(Malformed::Udp),
                Ok(u) if !self.passes(csum.l4, || u.verify_checksum(&src, &dst)) => {
                    FrameClass::Malformed(Malformed::UdpChecksum)
                }
                Ok(_) => FrameClass::Udp,
            },
            IpProtocol::Icmp if payload.len() < 8 => FrameClass::Malformed(Malformed::Icmp),
            IpProtocol::Icmp => FrameClass::Icmp,
            _ => FrameClass::OtherIpv4,
        };
        c
    }

    /// The class of a TCP segment between `src` and `dst` (either family): malformed, a bad
    /// checksum (the device's verdict `l4`, else checked when checksums are), or TCP; and
    /// whether its checksum is left to the handler ([`Classifier::defer_tcp_checksum`]).
    fn tcp_class<A: tcp::checksum::PseudoHeader>(
        &self,
        src: A,
        dst: A,
        payload: &[u8],
        l4: Checked,
    ) -> (FrameClass, bool) {
        match TcpPacket::new_checked(payload) {
            Err(_) => (FrameClass::Malformed(Malformed::Tcp), false),
            Ok(_) if l4 == Checked::Unknown && self.verify_checksums && self.defer_tcp_checksum => {
                (FrameClass::Tcp, true)
            }
            Ok(_) if !self.passes(l4, || tcp::checksum::tcp_checksum_ok(src, dst, payload)) => {
                (FrameClass::Malformed(Malformed::TcpChecksum), false)
            }
            Ok(_) => (FrameClass::Tcp, false),
        }
    }

    /// True when `dst` is one of the port's IPv6 addresses, or a group it listens to (all
    /// nodes, its solicited-node groups).
    fn ipv6_dst_ok(&self, dst: Ipv6Addr) -> bool {
        if dst.is_multicast() {
            dst == ALL_NODES || self.ipv6.iter().any(|&a| solicited_node(a) == dst)
        } else {
            self.ipv6.contains(&dst)
        }
    }

    fn classify_ipv6(&self, bytes: &[u8], l3_offset: usize, l4: Checked) -> Classified {
        let malformed = |m| Classified::new(FrameClass::Malformed(m));
        let Ok(ip) = Ipv6Packet::new_checked(bytes) else {
            return malformed(Malformed::Ipv6);
        };
        if ip.version() != 6 {
            return malformed(Malformed::Ipv6);
        }
        let (src_ip, dst_ip) = (ip.src_addr(), ip.dst_addr());
        let payload = ip.payload();
        let mut c = Classified {
            class: FrameClass::OtherIpv6,
            l3_offset,
            l4_offset: l3_offset + crate::frame::IPV6_HLEN,
            l4_len: payload.len(),
            src_ip: IpAddr::V6(src_ip),
            dst_ip: IpAddr::V6(dst_ip),
            hop_limit: ip.hop_limit(),
            tcp_unverified: false,
        };
        if !self.ipv6_dst_ok(dst_ip) || src_ip.is_multicast() {
            c.class = FrameClass::NotForUs;
            return c;
        }
        let next = ip.next_header();
        let multicast = dst_ip.is_multicast();
        c.class = match next {
            IpProtocol::HopByHop if ip.payload_len() == 0 => FrameClass::Ipv6Jumbogram,
            IpProtocol::Ipv6Frag => FrameClass::Ipv6Fragment,
            n if EXTENSION_HEADERS.contains(&u8::from(n)) => FrameClass::Ipv6ExtHeader,
            IpProtocol::Icmpv6 if payload.len() < 4 => FrameClass::Malformed(Malformed::Icmpv6),
            IpProtocol::Icmpv6 => FrameClass::Icmpv6,
            // Only neighbour discovery and echo go to groups here.
            _ if multicast => FrameClass::NotForUs,
            IpProtocol::Tcp => {
                let (class, unverified) = self.tcp_class(src_ip, dst_ip, payload, l4);
                c.tcp_unverified = unverified;
                class
            }
            IpProtocol::Udp => match UdpPacket::new_checked(payload) {
                Err(_) => FrameClass::Malformed(Malformed::Udp),
                // RFC 8200 §8.1: a zero UDP checksum is invalid over IPv6.
                Ok(u)
                    if !self.passes(l4, || {
                        u.checksum() != 0
                            && u.verify_checksum(&IpAddress::Ipv6(src_ip), &IpAddress::Ipv6(dst_ip))
                    }) =>
                {
                    FrameClass::Malformed(Malformed::UdpChecksum)
                }
                Ok(_) => FrameClass::Udp,
            },
            _ => FrameClass::OtherIpv6,
        };
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{Ends, Vlan};
    use crate::test_frames::{self, OUR_IP, OUR_IP6, OUR_MAC, PEER_IP, TO_US, TO_US6};
    use proptest::prelude::*;

    fn classifier() -> Classifier {
        Classifier::new(OUR_MAC, Some(OUR_IP))
    }

    fn udp_frame(dst_mac: [u8; 6], dst_ip: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
        let ends = Ends {
            dst_mac,
            dst_ip: IpAddr::V4(dst_ip),
            ..TO_US
        };
        ends.udp_frame(1000, 2000, payload)
    }

    #[test]
    fn udp_to_us_is_udp_with_offsets() {
        let mut f = udp_frame(OUR_MAC, OUR_IP, b"hello");
        f.extend_from_slice(&[0; 20]); // Ethernet padding is not layer-4 data
        let c = classifier().classify(&f);
        assert_eq!(c.class, FrameClass::Udp);
        assert_eq!(c.l4_offset, 34);
        assert_eq!(c.l4(&f).len(), 8 + 5);
        assert_eq!(
            (c.src_ip, c.dst_ip),
            (IpAddr::V4(PEER_IP), IpAddr::V4(OUR_IP))
        );
        assert_eq!(c.l3_offset, ETH_HLEN);
    }

    #[test]
    fn wrong_destination_is_not_for_us() {
        let c = classifier();
        let f = udp_frame([2, 0, 0, 0, 0, 9], OUR_IP, b"x");
        assert_eq!(c.classify(&f).class, FrameClass::NotForUs);
        let f = udp_frame(OUR_MAC, Ipv4Addr::new(10, 99, 0, 7), b"x");
        assert_eq!(c.classify(&f).class, FrameClass::NotForUs);
        let mut promisc = c.clone();
        promisc.promiscuous = true;
        let f = udp_frame([2, 0, 0, 0, 0, 9], OUR_IP, b"x");
        assert_eq!(promisc.classify(&f).class, FrameClass::Udp);
    }

    #[test]
    fn checksum_errors_are_malformed() {
        let c = classifier();
        let mut f = udp_frame(OUR_MAC, OUR_IP, b"hello");
        f[ETH_HLEN + 8] ^= 1; // TTL: IPv4 header checksum breaks
        assert_eq!(
            c.classify(&f).class,
            FrameClass::Malformed(Malformed::Ipv4Checksum)
        );
        let mut f = udp_frame(OUR_MAC, OUR_IP, b"hello");
        let last = f.len() - 1;
        f[last] ^= 0x40;
        assert_eq!(
            c.classify(&f).class,
            FrameClass::Malformed(Malformed::UdpChecksum)
        );
    }

    // The device's verdicts stand in for the software checks: a segment it marked good is
    // taken whatever its checksum field (a virtio peer's partial sum), one it marked bad is
    // malformed as the software check would make it; without a verdict the software checks.
    #[test]
    fn device_checksum_verdicts_replace_the_checks() {
        let c = classifier();
        let good = tcp_frame(b"offloaded");
        let mut partial = good.clone();
        let last = partial.len() - 1;
        partial[last] ^= 0x01;
        let verdict = |ip, l4| RxChecksum { ip, l4 };
        let class = |f: &[u8], v| c.classify_offloaded(f, None, v).class;
        let tcp_bad = FrameClass::Malformed(Malformed::TcpChecksum);
        assert_eq!(
            class(&partial, verdict(Checked::Good, Checked::Good)),
            FrameClass::Tcp
        );
        assert_eq!(
            class(&partial, verdict(Checked::Unknown, Checked::Good)),
            FrameClass::Tcp
        );
        assert_eq!(class(&good, verdict(Checked::Good, Checked::Bad)), tcp_bad);
        assert_eq!(class(&partial, RxChecksum::default()), tcp_bad);
        assert_eq!(
            class(&good, verdict(Checked::Bad, Checked::Good)),
            FrameClass::Malformed(Malformed::Ipv4Checksum)
        );
        let mut ttl = good.clone();
        ttl[ETH_HLEN + 8] ^= 1;
        assert_eq!(
            class(&ttl, verdict(Checked::Unknown, Checked::Good)),
            FrameClass::Malformed(Malformed::Ipv4Checksum)
        );
        assert_eq!(
            class(&ttl, verdict(Checked::Good, Checked::Good)),
            FrameClass::Tcp
        );
    }

    // A classifier that leaves TCP checksums to the handler does so only for segments the
    // device gave no verdict on: those are TCP, marked unverified, good or bad; a device's
    // good or bad verdict is taken as without it; the IPv4 header checksum and UDP are
    // checked as ever; without checksum verification nothing is marked.
    #[test]
    fn deferred_tcp_checksums_keep_the_device_verdicts() {
        let mut c = classifier();
        c.defer_tcp_checksum = true;
        let good = tcp_frame(b"deferred");
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x01;
        let verdict = |ip, l4| RxChecksum { ip, l4 };
        let class = |c: &Classifier, f: &[u8], v| {
            let m = c.classify_offloaded(f, None, v);
            (m.class, m.tcp_unverified)
        };
        let tcp_bad = FrameClass::Malformed(Malformed::TcpChecksum);
        for f in [&good, &bad] {
            assert_eq!(class(&c, f, RxChecksum::default()), (FrameClass::Tcp, true));
            assert_eq!(
                class(&c, f, verdict(Checked::Good, Checked::Good)),
                (FrameClass::Tcp, false)
            );
            assert_eq!(
                class(&c, f, verdict(Checked::Good, Checked::Bad)),
                (tcp_bad, false)
            );
        }
        let mut ttl = good.clone();
        ttl[ETH_HLEN + 8] ^= 1;
        assert_eq!(
            class(&c, &ttl, RxChecksum::default()),
            (FrameClass::Malformed(Malformed::Ipv4Checksum), false)
        );
        let mut udp = udp_frame(OUR_MAC, OUR_IP, b"hello");
        let last = udp.len() - 1;
        udp[last] ^= 0x40;
        assert_eq!(
            class(&c, &udp, RxChecksum::default()),
            (FrameClass::Malformed(Malformed::UdpChecksum), false)
        );
        c.verify_checksums = false;
        assert_eq!(
            class(&c, &bad, RxChecksum::default()),
            (FrameClass::Tcp, false)
        );
        c.verify_checksums = true;
        c.defer_tcp_checksum = false;
        assert_eq!(class(&c, &bad, RxChecksum::default()), (tcp_bad, false));
        assert_eq!(
            class(&c, &good, RxChecksum::default()),
            (FrameClass::Tcp, false)
        );
    }

    /// An Ethernet frame to us carrying a TCP segment, checksummed by smoltcp.
    fn tcp_frame(payload: &[u8]) -> Vec<u8> {
        test_frames::tcp_frame(TO_US, payload)
    }

    // RFC 9293 §3.1: the checksum covers pseudo-header, header and data; an odd data length
    // is padded for the sum. smoltcp's value is accepted, any flipped data bit is not.
    #[test]
    fn tcp_checksum_errors_are_malformed() {
        let c = classifier();
        for len in [0usize, 5, 1448] {
            let data: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
            let f = tcp_frame(&data);
            assert_eq!(c.classify(&f).class, FrameClass::Tcp, "{len} octets");
            let mut bad = f.clone();
            let last = bad.len() - 1;
            bad[last] ^= 0x01;
            assert_eq!(
                c.classify(&bad).class,
                FrameClass::Malformed(Malformed::TcpChecksum),
                "{len} octets"
            );
        }
    }

    #[test]
    fn short_and_odd_frames() {
        let c = classifier();
        assert_eq!(
            c.classify(&[]).class,
            FrameClass::Malformed(Malformed::Ethernet)
        );
        assert_eq!(
            c.classify(&[0xff; 13]).class,
            FrameClass::Malformed(Malformed::Ethernet)
        );
        let mut ipv6 = vec![0xff; 14];
        ipv6[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(c.classify(&ipv6).class, FrameClass::OtherEthertype);
        let mut arp_short = vec![0xff; 20];
        arp_short[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            c.classify(&arp_short).class,
            FrameClass::Malformed(Malformed::Arp)
        );
        let f = udp_frame(OUR_MAC, OUR_IP, b"hello");
        assert_eq!(
            c.classify(&f[..30]).class,
            FrameClass::Malformed(Malformed::Ipv4)
        );
    }

    #[test]
    fn class_indices_are_dense_and_unique() {
        for (i, c) in FrameClass::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
    }

    const V100: Vlan = Vlan {
        id: 100,
        priority: 5,
    };

    fn tagged(ends: Ends, tag: Option<Vlan>) -> Vec<u8> {
        Ends { vlan: tag, ..ends }.udp_frame(1000, 2000, b"hello")
    }

    // IEEE 802.1Q: a port on VLAN 100 takes frames tagged 100 (in the frame or stripped by
    // the device) and no others; a port on no VLAN takes untagged and priority-tagged
    // (VLAN 0) frames. Offsets follow the tag.
    #[test]
    fn vlan_membership() {
        let mut on100 = classifier();
        on100.set_vlan(Some(100));
        let plain = classifier();
        let prio = Some(Vlan { id: 0, priority: 6 });
        let v7 = Some(Vlan { id: 7, priority: 0 });
        let cases = [
            (&on100, tagged(TO_US, Some(V100)), FrameClass::Udp),
            (&on100, tagged(TO_US, v7), FrameClass::OtherVlan),
            (&on100, tagged(TO_US, None), FrameClass::OtherVlan),
            (&on100, tagged(TO_US, prio), FrameClass::OtherVlan),
            (&plain, tagged(TO_US, None), FrameClass::Udp),
            (&plain, tagged(TO_US, prio), FrameClass::Udp),
            (&plain, tagged(TO_US, Some(V100)), FrameClass::OtherVlan),
        ];
        for (i, (c, f, want)) in cases.iter().enumerate() {
            let got = c.classify(f);
            assert_eq!(got.class, *want, "case {i}");
            if *want == FrameClass::Udp {
                let tag_len = f.len() - ipv4_len(5);
                assert_eq!(got.l3_offset, ETH_HLEN + tag_len, "case {i}");
                assert_eq!(got.l4_offset, ETH_HLEN + tag_len + 20);
                assert_eq!(got.l4(f).len(), 8 + 5);
            }
        }
        // The device stripped the tag: the frame is untagged, the TCI comes beside it.
        let untagged = tagged(TO_US, None);
        let c = on100.classify_stripped(&untagged, Some(V100.tci()));
        assert_eq!((c.class, c.l3_offset), (FrameClass::Udp, ETH_HLEN));
        let c = on100.classify_stripped(&untagged, Some(7));
        assert_eq!(c.class, FrameClass::OtherVlan);
        // A service tag (802.1ad) is not ours either; a tag cut short is malformed.
        let mut qinq = tagged(TO_US, Some(V100));
        qinq[16..18].copy_from_slice(&TPID_8021AD.to_be_bytes());
        assert_eq!(on100.classify(&qinq).class, FrameClass::OtherVlan);
        let f = tagged(TO_US, Some(V100));
        assert_eq!(
            on100.classify(&f[..16]).class,
            FrameClass::Malformed(Malformed::Ethernet)
        );
    }

    fn ipv4_len(udp_payload: usize) -> usize {
        crate::frame::ipv4_frame_len(8 + udp_payload)
    }

    fn classifier6() -> Classifier {
        let mut c = classifier();
        c.set_ipv6([crate::ndp::link_local(OUR_MAC), OUR_IP6]);
        c
    }

    /// An IPv6 frame to us whose packet `edit` changes (next header at 6, payload length
    /// at 4..6 of the IPv6 header, which starts at octet 14).
    fn ipv6_frame(edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut f = test_frames::tcp_frame(TO_US6, b"segment");
        edit(&mut f);
        f
    }

    // RFC 8200: TCP to our address is TCP (checksum over the IPv6 pseudo-header); a packet
    // whose first Next Header is an extension header is counted by kind and not processed:
    // Fragment (44), a hop-by-hop header with payload length 0 (a jumbogram, RFC 2675), any
    // other (routing, destination options, a chain). None of them panics.
    #[test]
    fn ipv6_classes() {
        let c = classifier6();
        let f = ipv6_frame(|_| ());
        let got = c.classify(&f);
        assert_eq!(got.class, FrameClass::Tcp);
        assert_eq!(got.src_ip, TO_US6.src_ip);
        assert_eq!((got.l3_offset, got.l4_offset), (14, 54));
        assert_eq!(got.l4(&f).len(), 20 + 7);
        assert_eq!(got.hop_limit, crate::frame::TTL);
        let mut bad = f.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(
            c.classify(&bad).class,
            FrameClass::Malformed(Malformed::TcpChecksum)
        );
        let next = |n: u8| ipv6_frame(|f| f[14 + 6] = n);
        assert_eq!(c.classify(&next(44)).class, FrameClass::Ipv6Fragment);
        for n in [0u8, 43, 60, 51, 135] {
            assert_eq!(c.classify(&next(n)).class, FrameClass::Ipv6ExtHeader, "{n}");
        }
        assert_eq!(c.classify(&next(59)).class, FrameClass::OtherIpv6);
        let jumbo = ipv6_frame(|f| {
            f[14 + 6] = 0;
            f[14 + 4..14 + 6].copy_from_slice(&[0, 0]);
        });
        assert_eq!(c.classify(&jumbo).class, FrameClass::Ipv6Jumbogram);
        let long = ipv6_frame(|f| f[14 + 4..14 + 6].copy_from_slice(&[0x10, 0]));
        assert_eq!(
            c.classify(&long).class,
            FrameClass::Malformed(Malformed::Ipv6)
        );
        // Another address, or no IPv6 on the port.
        let other = Ends {
            dst_ip: IpAddr::V6("fd00:99::9".parse().unwrap()),
            ..TO_US6
        };
        let f2 = test_frames::tcp_frame(other, b"x");
        assert_eq!(c.classify(&f2).class, FrameClass::NotForUs);
        assert_eq!(classifier().classify(&f).class, FrameClass::OtherEthertype);
    }

    // Neighbour discovery reaches the port through its solicited-node group and all-nodes
    // (multicast MAC 33:33:...); TCP to a group does not.
    #[test]
    fn ipv6_groups() {
        let c = classifier6();
        let group = crate::ndp::solicited_node(OUR_IP6);
        let to_group = Ends {
            dst_mac: crate::ndp::multicast_mac(group),
            dst_ip: IpAddr::V6(group),
            ..TO_US6
        };
        let ping = test_frames::echo_request(to_group, 1, 1, b"x");
        assert_eq!(c.classify(&ping).class, FrameClass::Icmpv6);
        let all = Ends {
            dst_mac: crate::ndp::multicast_mac(ALL_NODES),
            dst_ip: IpAddr::V6(ALL_NODES),
            ..TO_US6
        };
        assert_eq!(
            c.classify(&test_frames::echo_request(all, 1, 1, b"x"))
                .class,
            FrameClass::Icmpv6
        );
        assert_eq!(
            c.classify(&test_frames::tcp_frame(to_group, b"x")).class,
            FrameClass::NotForUs
        );
        let other_group = Ends {
            dst_ip: IpAddr::V6(crate::ndp::solicited_node("fd00:99::9".parse().unwrap())),
            ..to_group
        };
        assert_eq!(
            c.classify(&test_frames::echo_request(other_group, 1, 1, b"x"))
                .class,
            FrameClass::NotForUs
        );
    }

    /// A UDP frame to us whose IPv4 header carries `words` 32-bit words of options
    /// (NOPs), its header checksum filled in.
    fn udp_frame_with_options(words: usize) -> Vec<u8> {
        let mut f = udp_frame(OUR_MAC, OUR_IP, b"options");
        let at = ETH_HLEN + 20;
        f.splice(at..at, std::iter::repeat_n(1u8, 4 * words));
        let mut ip = Ipv4Packet::new_unchecked(&mut f[ETH_HLEN..]);
        ip.set_header_len((20 + 4 * words) as u8);
        let total = ip.total_len() + 4 * words as u16;
        ip.set_total_len(total);
        ip.fill_checksum();
        f
    }

    // RFC 791 §3.1: the header checksum covers the whole header, options included.
    #[test]
    fn ipv4_header_checksum_covers_the_options() {
        let c = classifier();
        for words in [0, 1, 3, 10] {
            let f = udp_frame_with_options(words);
            assert_eq!(c.classify(&f).class, FrameClass::Udp, "{words} words");
            let mut bad = f.clone();
            bad[ETH_HLEN + 20 + 4 * words - 1] ^= 0x10;
            assert_eq!(
                c.classify(&bad).class,
                FrameClass::Malformed(Malformed::Ipv4Checksum),
                "{words} words"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        // The usual TCP frame's path gives the general path's answer: for a TCP frame (over
        // IPv4 or IPv6, tagged or not) with any header octet changed, cut short or padded,
        // under any device verdicts and classifier settings.
        #[test]
        fn the_usual_tcp_path_answers_as_the_general_one(
            at in 0usize..60, val in any::<u8>(), change in prop::bool::weighted(0.8),
            cut in prop_oneof![Just(0usize), 0usize..40],
            pad in 0usize..8, v6 in prop::bool::weighted(0.2), tag in prop::bool::weighted(0.2),
            port_vlan in prop::bool::weighted(0.1), promiscuous: bool,
            verify in prop::bool::weighted(0.8), defer: bool,
            ip in 0u8..3, l4 in 0u8..3,
        ) {
            let checked = [Checked::Unknown, Checked::Good, Checked::Bad];
            let csum = RxChecksum { ip: checked[usize::from(ip)], l4: checked[usize::from(l4)] };
            let ends = if v6 { TO_US6 } else { TO_US };
            let vlan = tag.then_some(V100);
            let mut f = test_frames::tcp_frame(Ends { vlan, ..ends }, b"0123456789abcdef");
            if change {
                let i = at % f.len();
                f[i] = val;
            }
            f.truncate(f.len() - cut.min(f.len()));
            f.extend(std::iter::repeat_n(0, pad));
            let mut c = classifier6();
            c.set_vlan(port_vlan.then_some(V100.id));
            c.promiscuous = promiscuous;
            c.verify_checksums = verify;
            c.defer_tcp_checksum = defer;
            let general = c.classify_offloaded_generally(&f, None, csum);
            if let Some(usual) = c.usual_tcp(&f, csum) {
                prop_assert_eq!(usual, general);
            }
            prop_assert_eq!(c.classify_offloaded(&f, None, csum), general);
        }

        // The header checksum's verdict is smoltcp's for any header octet changed (the sum
        // is taken in 32-bit words here, smoltcp's in 16-bit ones).
        #[test]
        fn ipv4_header_checksum_agrees_with_smoltcp(
            words in 0usize..=10, at in 0usize..60, val in any::<u8>(),
        ) {
            let mut f = udp_frame_with_options(words);
            let hlen = 20 + 4 * words;
            f[ETH_HLEN + at % hlen] = val;
            let class = classifier().classify(&f).class;
            let bad_csum = FrameClass::Malformed(Malformed::Ipv4Checksum);
            match Ipv4Packet::new_checked(&f[ETH_HLEN..]) {
                Ok(ip) if ip.version() == 4 => {
                    prop_assert_eq!(class == bad_csum, !ip.verify_checksum());
                }
                _ => prop_assert_eq!(class, FrameClass::Malformed(Malformed::Ipv4)),
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let c = classifier();
            let r = c.classify(&bytes);
            prop_assert!(r.l4(&bytes).len() <= bytes.len());
        }

        #[test]
        fn mutated_valid_frames_never_panic(
            idx in 0usize..80, val in any::<u8>(), cut in 0usize..80, v6: bool, tag: bool,
        ) {
            let ends = if v6 { TO_US6 } else { TO_US };
            let vlan = tag.then_some(V100);
            let mut f = Ends { vlan, ..ends }.udp_frame(1, 2, b"0123456789abcdef");
            let i = idx % f.len();
            f[i] = val;
            f.truncate(f.len() - cut.min(f.len()));
            let mut c = classifier6();
            c.set_vlan(vlan.map(|v| v.id));
            let r = c.classify(&f);
            prop_assert!(r.l4(&f).len() <= f.len());
            let _ = r.l3(&f);
        }
    }
}
