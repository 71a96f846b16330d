//! ICMP echo (RFC 792) and ICMPv6 echo (RFC 4443 §4): replies to pings addressed to the port.

use std::net::IpAddr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetProtocol, Icmpv4Packet, Icmpv4Repr, Icmpv6Packet, Icmpv6Repr, IpProtocol, Ipv4Packet,
    Ipv6Packet,
};

use crate::frame::{self, parse_l2, Ends, Vlan};

/// Hop limit of replies.
pub const REPLY_TTL: u8 = frame::TTL;

/// An echo request that deserves a reply: who asked, and the echo fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EchoRequest<'a> {
    /// Requester's MAC.
    pub src_mac: [u8; 6],
    /// Requester's address (IPv4 or IPv6).
    pub src_ip: IpAddr,
    /// The address the request was sent to (ours).
    pub dst_ip: IpAddr,
    /// Echo identifier.
    pub ident: u16,
    /// Echo sequence number.
    pub seq_no: u16,
    /// Echo data, returned unchanged.
    pub data: &'a [u8],
}

impl EchoRequest<'_> {
    /// The reply's frame ends from `our_mac`, tagged with `tag`.
    fn reply_ends(&self, our_mac: [u8; 6], tag: Option<Vlan>) -> Ends {
        Ends {
            src_mac: our_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            vlan: tag,
        }
    }

    /// Length of the reply frame with the tag `tag` in it.
    pub fn reply_len(&self, tag: Option<Vlan>) -> usize {
        // Echo header (8 octets) and data, for either version.
        self.reply_ends([0; 6], tag).frame_len(8 + self.data.len())
    }
}

/// Parses `frame` (Ethernet, an 802.1Q tag or the `stripped` TCI, IPv4/ICMP or IPv6/ICMPv6)
/// as an echo request with valid checksums; `None` for anything else.
pub fn parse_echo_request(frame: &[u8], stripped: Option<u16>) -> Option<EchoRequest<'_>> {
    let l2 = parse_l2(frame, stripped)?;
    let l3 = frame.get(l2.l3_offset..)?;
    let caps = ChecksumCapabilities::default();
    let (src_ip, dst_ip, ident, seq_no, data) = match l2.ethertype {
        EthernetProtocol::Ipv4 => {
            let ip = Ipv4Packet::new_checked(l3).ok()?;
            if ip.next_header() != IpProtocol::Icmp || ip.more_frags() || ip.frag_offset() != 0 {
                return None;
            }
            let icmp = Icmpv4Packet::new_checked(ip.payload()).ok()?;
            let Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } = Icmpv4Repr::parse(&icmp, &caps).ok()?
            else {
                return None;
            };
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            (IpAddr::V4(s), IpAddr::V4(d), ident, seq_no, data)
        }
        EthernetProtocol::Ipv6 => {
            let ip = Ipv6Packet::new_checked(l3).ok()?;
            if ip.next_header() != IpProtocol::Icmpv6 {
                return None;
            }
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            let icmp = Icmpv6Packet::new_checked(ip.payload()).ok()?;
            let Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } = Icmpv6Repr::parse(&s, &d, &icmp, &caps).ok()?
            else {
                return None;
            };
            (IpAddr::V6(s), IpAddr::V6(d), ident, seq_no, data)
        }
        _ => return None,
    };
    Some(EchoRequest {
        src_mac: l2.src,
        src_ip,
        dst_ip,
        ident,
        seq_no,
        data,
    })
}

/// Writes the echo reply to `req` from `our_mac`, tagged with `tag`, into `buf` (exactly
/// `req.reply_len(tag)` bytes). Returns false if `buf` has the wrong length.
pub fn emit_echo_reply(
    req: &EchoRequest<'_>,
    our_mac: [u8; 6],
    tag: Option<Vlan>,
    buf: &mut [u8],
) -> bool {
    if buf.len() != req.reply_len(tag) {
        return false;
    }
    let ends = req.reply_ends(our_mac, tag);
    match (ends.src_ip, ends.dst_ip) {
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let reply = Icmpv6Repr::EchoReply {
                ident: req.ident,
                seq_no: req.seq_no,
                data: req.data,
            };
            let icmp = ends.emit_headers(buf, IpProtocol::Icmpv6, reply.buffer_len());
            reply.emit(
                &s,
                &d,
                &mut Icmpv6Packet::new_unchecked(icmp),
                &ChecksumCapabilities::default(),
            );
        }
        _ => {
            let reply = Icmpv4Repr::EchoReply {
                ident: req.ident,
                seq_no: req.seq_no,
                data: req.data,
            };
            emit_icmp(&ends, &reply, buf);
        }
    }
    true
}

/// Writes the ICMP message `repr` from `ends` (IPv4) as a whole frame into `buf` (exactly
/// [`Ends::frame_len`] of the message's length).
pub(crate) fn emit_icmp(ends: &Ends, repr: &Icmpv4Repr<'_>, buf: &mut [u8]) {
    let icmp = ends.emit_headers(buf, IpProtocol::Icmp, repr.buffer_len());
    repr.emit(
        &mut Icmpv4Packet::new_unchecked(icmp),
        &ChecksumCapabilities::default(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_frames::{
        self, OUR_IP, OUR_IP6, OUR_MAC, PEER_IP, PEER_IP6, PEER_MAC, TO_US, TO_US6,
    };
    use smoltcp::wire::{EthernetAddress, EthernetFrame};

    /// An echo request frame as a Linux `ping` would send it.
    fn echo_request_frame(data: &[u8]) -> Vec<u8> {
        test_frames::echo_request(TO_US, 0x1234, 7, data)
    }

    #[test]
    fn echo_reply_is_byte_checked() {
        let data: Vec<u8> = (0..56).collect();
        let req_frame = echo_request_frame(&data);
        let req = parse_echo_request(&req_frame, None).unwrap();
        assert_eq!((req.ident, req.seq_no), (0x1234, 7));
        assert_eq!(req.src_ip, IpAddr::V4(PEER_IP));
        let mut out = vec![0u8; req.reply_len(None)];
        assert!(emit_echo_reply(&req, OUR_MAC, None, &mut out));

        // RFC 792: type 0, same identifier, sequence number and data; addresses reversed.
        let eth = EthernetFrame::new_checked(&out[..]).unwrap();
        assert_eq!(eth.dst_addr(), EthernetAddress(PEER_MAC));
        assert_eq!(eth.src_addr(), EthernetAddress(OUR_MAC));
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.src_addr(), ip.dst_addr()), (OUR_IP, PEER_IP));
        assert_eq!(ip.hop_limit(), REPLY_TTL);
        let icmp = Icmpv4Packet::new_checked(ip.payload()).unwrap();
        assert!(icmp.verify_checksum());
        assert_eq!(
            Icmpv4Repr::parse(&icmp, &ChecksumCapabilities::default()).unwrap(),
            Icmpv4Repr::EchoReply {
                ident: 0x1234,
                seq_no: 7,
                data: &data
            }
        );
        assert_eq!(ip.payload()[0], 0, "ICMP type 0 = echo reply");
    }

    // RFC 4443 §4.2: type 129, the request's identifier, sequence number and data, from the
    // address the request went to; the checksum covers the IPv6 pseudo-header (§2.3). Also
    // over a VLAN, where the reply carries the same tag.
    #[test]
    fn icmpv6_echo_reply_is_byte_checked() {
        let data: Vec<u8> = (0..56).collect();
        for tag in [
            None,
            Some(Vlan {
                id: 100,
                priority: 2,
            }),
        ] {
            let to_us = Ends {
                vlan: tag,
                ..TO_US6
            };
            let f = test_frames::echo_request(to_us, 0x4321, 9, &data);
            let req = parse_echo_request(&f, None).unwrap();
            assert_eq!(
                (req.src_ip, req.dst_ip),
                (IpAddr::V6(PEER_IP6), IpAddr::V6(OUR_IP6))
            );
            let mut out = vec![0u8; req.reply_len(tag)];
            assert!(emit_echo_reply(&req, OUR_MAC, tag, &mut out));
            let l2 = parse_l2(&out, None).unwrap();
            assert_eq!((l2.dst, l2.src), (PEER_MAC, OUR_MAC));
            assert_eq!(l2.vlan_id(), tag.map(|v| v.id));
            let ip = Ipv6Packet::new_checked(&out[l2.l3_offset..]).unwrap();
            assert_eq!((ip.src_addr(), ip.dst_addr()), (OUR_IP6, PEER_IP6));
            assert_eq!(ip.hop_limit(), REPLY_TTL);
            let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
            assert!(icmp.verify_checksum(&OUR_IP6, &PEER_IP6));
            assert_eq!(ip.payload()[0], 129, "ICMPv6 type 129 = echo reply");
            assert_eq!(
                Icmpv6Repr::parse(&OUR_IP6, &PEER_IP6, &icmp, &ChecksumCapabilities::default())
                    .unwrap(),
                Icmpv6Repr::EchoReply {
                    ident: 0x4321,
                    seq_no: 9,
                    data: &data
                }
            );
            // A reply is not answered.
            assert!(parse_echo_request(&out, None).is_none());
        }
    }

    #[test]
    fn non_requests_and_bad_checksums_get_no_reply() {
        let mut f = echo_request_frame(b"abc");
        let last = f.len() - 1;
        f[last] ^= 1;
        assert!(parse_echo_request(&f, None).is_none(), "bad ICMP checksum");
        let f = echo_request_frame(b"abc");
        assert!(parse_echo_request(&f[..20], None).is_none());
        let req = parse_echo_request(&f, None).unwrap();
        let mut out = vec![0u8; 10];
        assert!(!emit_echo_reply(&req, OUR_MAC, None, &mut out));
        // A reply is not answered.
        let mut reply = vec![0u8; req.reply_len(None)];
        emit_echo_reply(&req, OUR_MAC, None, &mut reply);
        assert!(parse_echo_request(&reply, None).is_none());
        let mut f6 = test_frames::echo_request(TO_US6, 1, 1, b"abc");
        let last = f6.len() - 1;
        f6[last] ^= 1;
        assert!(
            parse_echo_request(&f6, None).is_none(),
            "bad ICMPv6 checksum"
        );
    }
}
