//! Frame classification: what a received frame is and whether it is for this port.
//!
//! Uses smoltcp's checked wire views, so any byte string is classified without panicking;
//! frames whose headers do not hold together are [`FrameClass::Malformed`] with the layer
//! that failed.

use std::net::Ipv4Addr;

use smoltcp::wire::{
    ArpPacket, EthernetAddress, EthernetFrame, EthernetProtocol, IpAddress, IpProtocol, Ipv4Packet,
    TcpPacket, UdpPacket,
};

/// Ethernet header length (no VLAN tag).
pub const ETH_HLEN: usize = 14;

/// The layer at which a malformed frame failed to parse or verify.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// Shorter than an Ethernet header.
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
    /// Another ethertype (IPv6, LLDP, ...).
    OtherEthertype,
    /// Destination MAC or IPv4 address is not this port's.
    NotForUs,
    /// Headers do not hold together.
    Malformed(Malformed),
}

impl FrameClass {
    /// All classes, in the order of [`FrameClass::index`].
    pub const ALL: [FrameClass; 17] = [
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
                }
            }
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
            },
        }
    }
}

/// The result of classifying one frame: its class and where its layers start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    /// What the frame is.
    pub class: FrameClass,
    /// Offset of the layer-4 header (TCP/UDP/ICMP), when the frame is IPv4.
    pub l4_offset: usize,
    /// Length of the layer-4 bytes (IPv4 payload; Ethernet padding excluded).
    pub l4_len: usize,
    /// IPv4 source, when the frame is IPv4.
    pub src_ip: Ipv4Addr,
    /// IPv4 destination, when the frame is IPv4.
    pub dst_ip: Ipv4Addr,
}

impl Classified {
    fn new(class: FrameClass) -> Classified {
        Classified {
            class,
            l4_offset: 0,
            l4_len: 0,
            src_ip: Ipv4Addr::UNSPECIFIED,
            dst_ip: Ipv4Addr::UNSPECIFIED,
        }
    }

    /// The layer-4 bytes of `frame` (empty unless the frame is IPv4).
    pub fn l4<'a>(&self, frame: &'a [u8]) -> &'a [u8] {
        frame
            .get(self.l4_offset..self.l4_offset + self.l4_len)
            .unwrap_or(&[])
    }
}

/// Classifies frames for one port.
#[derive(Clone, Debug)]
pub struct Classifier {
    mac: EthernetAddress,
    ipv4: Option<Ipv4Addr>,
    /// Accept frames to any destination MAC.
    pub promiscuous: bool,
    /// Verify IPv4/TCP/UDP checksums (off when the NIC verified them).
    pub verify_checksums: bool,
}

impl Classifier {
    /// A classifier for a port with this MAC and (optional) IPv4 address.
    pub fn new(mac: [u8; 6], ipv4: Option<Ipv4Addr>) -> Classifier {
        Classifier {
            mac: EthernetAddress(mac),
            ipv4,
            promiscuous: false,
            verify_checksums: true,
        }
    }

    /// Classifies `frame`; never panics, whatever the bytes.
    pub fn classify(&self, frame: &[u8]) -> Classified {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return Classified::new(FrameClass::Malformed(Malformed::Ethernet));
        };
        let dst = eth.dst_addr();
        if !(self.promiscuous || dst == self.mac || dst.is_broadcast()) {
            return Classified::new(FrameClass::NotForUs);
        }
        match eth.ethertype() {
            EthernetProtocol::Arp => match ArpPacket::new_checked(eth.payload()) {
                Ok(_) => Classified::new(FrameClass::Arp),
                Err(_) => Classified::new(FrameClass::Malformed(Malformed::Arp)),
            },
            EthernetProtocol::Ipv4 => self.classify_ipv4(eth.payload()),
            _ => Classified::new(FrameClass::OtherEthertype),
        }
    }

    fn classify_ipv4(&self, bytes: &[u8]) -> Classified {
        let malformed = |m| Classified::new(FrameClass::Malformed(m));
        let Ok(ip) = Ipv4Packet::new_checked(bytes) else {
            return malformed(Malformed::Ipv4);
        };
        if ip.version() != 4 {
            return malformed(Malformed::Ipv4);
        }
        if self.verify_checksums && !ip.verify_checksum() {
            return malformed(Malformed::Ipv4Checksum);
        }
        let hlen = ip.header_len() as usize;
        let total = ip.total_len() as usize;
        let mut c = Classified {
            class: FrameClass::OtherIpv4,
            l4_offset: ETH_HLEN + hlen,
            l4_len: total.saturating_sub(hlen),
            src_ip: ip.src_addr(),
            dst_ip: ip.dst_addr(),
        };
        if Some(c.dst_ip) != self.ipv4 && !c.dst_ip.is_broadcast() {
            c.class = FrameClass::NotForUs;
            return c;
        }
        if ip.more_frags() || ip.frag_offset() != 0 {
            c.class = FrameClass::Fragment;
            return c;
        }
        let payload = ip.payload();
        let (src, dst) = (IpAddress::Ipv4(c.src_ip), IpAddress::Ipv4(c.dst_ip));
        c.class = match ip.next_header() {
            IpProtocol::Tcp => match TcpPacket::new_checked(payload) {
                Err(_) => FrameClass::Malformed(Malformed::Tcp),
                Ok(_)
                    if self.verify_checksums
                        && !tcp::checksum::tcp_checksum_ok(c.src_ip, c.dst_ip, payload) =>
                {
                    FrameClass::Malformed(Malformed::TcpChecksum)
                }
                Ok(_) => FrameClass::Tcp,
            },
            IpProtocol::Udp => match UdpPacket::new_checked(payload) {
                Err(_) => FrameClass::Malformed(Malformed::Udp),
                Ok(u) if self.verify_checksums && !u.verify_checksum(&src, &dst) => {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Ends;
    use crate::test_frames::{self, OUR_IP, OUR_MAC, PEER_IP, TO_US};
    use proptest::prelude::*;

    fn classifier() -> Classifier {
        Classifier::new(OUR_MAC, Some(OUR_IP))
    }

    fn udp_frame(dst_mac: [u8; 6], dst_ip: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
        let ends = Ends {
            dst_mac,
            dst_ip,
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
        assert_eq!((c.src_ip, c.dst_ip), (PEER_IP, OUR_IP));
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

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let c = classifier();
            let r = c.classify(&bytes);
            prop_assert!(r.l4(&bytes).len() <= bytes.len());
        }

        #[test]
        fn mutated_valid_frames_never_panic(
            idx in 0usize..60, val in any::<u8>(), cut in 0usize..60,
        ) {
            let mut f = udp_frame(OUR_MAC, OUR_IP, b"0123456789abcdef");
            let i = idx % f.len();
            f[i] = val;
            f.truncate(f.len() - cut.min(f.len()));
            let c = classifier();
            let r = c.classify(&f);
            let _ = r.l4(&f);
        }
    }
}
