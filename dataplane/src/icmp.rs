//! ICMP echo (RFC 792): replies to pings addressed to the port.

use std::net::Ipv4Addr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Packet,
};

use crate::frame::{self, ipv4_frame_len, Ends};

/// Hop limit of replies.
pub const REPLY_TTL: u8 = frame::TTL;

/// An echo request that deserves a reply: who asked, and the echo fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EchoRequest<'a> {
    /// Requester's MAC.
    pub src_mac: [u8; 6],
    /// Requester's IPv4 address.
    pub src_ip: Ipv4Addr,
    /// The address the request was sent to (ours).
    pub dst_ip: Ipv4Addr,
    /// Echo identifier.
    pub ident: u16,
    /// Echo sequence number.
    pub seq_no: u16,
    /// Echo data, returned unchanged.
    pub data: &'a [u8],
}

impl EchoRequest<'_> {
    /// Length of the reply frame.
    pub fn reply_len(&self) -> usize {
        ipv4_frame_len(8 + self.data.len())
    }
}

/// Parses `frame` (Ethernet/IPv4/ICMP) as an echo request with valid checksums; `None` for
/// anything else.
pub fn parse_echo_request(frame: &[u8]) -> Option<EchoRequest<'_>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let src_mac = eth.src_addr();
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != IpProtocol::Icmp || ip.more_frags() || ip.frag_offset() != 0 {
        return None;
    }
    let (src_ip, dst_ip) = (ip.src_addr(), ip.dst_addr());
    let icmp = Icmpv4Packet::new_checked(ip.payload()).ok()?;
    match Icmpv4Repr::parse(&icmp, &ChecksumCapabilities::default()).ok()? {
        Icmpv4Repr::EchoRequest {
            ident,
            seq_no,
            data,
        } => Some(EchoRequest {
            src_mac: src_mac.0,
            src_ip,
            dst_ip,
            ident,
            seq_no,
            data,
        }),
        _ => None,
    }
}

/// Writes the echo reply to `req` from `our_mac` into `buf` (exactly `req.reply_len()`
/// bytes). Returns false if `buf` has the wrong length.
pub fn emit_echo_reply(req: &EchoRequest<'_>, our_mac: [u8; 6], buf: &mut [u8]) -> bool {
    if buf.len() != req.reply_len() {
        return false;
    }
    let reply = Icmpv4Repr::EchoReply {
        ident: req.ident,
        seq_no: req.seq_no,
        data: req.data,
    };
    let ends = Ends {
        src_mac: our_mac,
        dst_mac: req.src_mac,
        src_ip: req.dst_ip,
        dst_ip: req.src_ip,
    };
    emit_icmp(&ends, &reply, buf);
    true
}

/// Writes the ICMP message `repr` from `ends` as a whole frame into `buf` (exactly
/// [`ipv4_frame_len`] of the message's length).
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
    use crate::test_frames::{self, OUR_IP, OUR_MAC, PEER_IP, PEER_MAC, TO_US};
    use smoltcp::wire::EthernetAddress;

    /// An echo request frame as a Linux `ping` would send it.
    fn echo_request_frame(data: &[u8]) -> Vec<u8> {
        test_frames::echo_request(TO_US, 0x1234, 7, data)
    }

    #[test]
    fn echo_reply_is_byte_checked() {
        let data: Vec<u8> = (0..56).collect();
        let req_frame = echo_request_frame(&data);
        let req = parse_echo_request(&req_frame).unwrap();
        assert_eq!((req.ident, req.seq_no, req.src_ip), (0x1234, 7, PEER_IP));
        let mut out = vec![0u8; req.reply_len()];
        assert!(emit_echo_reply(&req, OUR_MAC, &mut out));

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

    #[test]
    fn non_requests_and_bad_checksums_get_no_reply() {
        let mut f = echo_request_frame(b"abc");
        let last = f.len() - 1;
        f[last] ^= 1;
        assert!(parse_echo_request(&f).is_none(), "bad ICMP checksum");
        let f = echo_request_frame(b"abc");
        assert!(parse_echo_request(&f[..20]).is_none());
        let req = parse_echo_request(&f).unwrap();
        let mut out = vec![0u8; 10];
        assert!(!emit_echo_reply(&req, OUR_MAC, &mut out));
        // A reply is not answered.
        let mut reply = vec![0u8; req.reply_len()];
        emit_echo_reply(&req, OUR_MAC, &mut reply);
        assert!(parse_echo_request(&reply).is_none());
    }
}
