//! The IP layer under the engine: header lengths per family and reading the IPv4 or IPv6
//! header of a received packet.

use std::net::{IpAddr, Ipv4Addr};

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};

/// IPv4 header length the engine emits (no options).
pub const IPV4_HEADER_LEN: usize = 20;
/// IPv6 header length the engine emits (no extension headers).
pub const IPV6_HEADER_LEN: usize = 40;

/// Length of the IP header the engine puts in front of a segment to or from `ip`.
pub fn ip_header_len(ip: IpAddr) -> usize {
    match ip {
        IpAddr::V4(_) => IPV4_HEADER_LEN,
        IpAddr::V6(_) => IPV6_HEADER_LEN,
    }
}

/// The source and destination of the IP header at the start of `packet`, one the engine
/// wrote (no options or extension headers are needed: the addresses come first), by its
/// version nibble; `None` for a packet too short or of another version.
pub(crate) fn header_addresses(packet: &[u8]) -> Option<(IpAddr, IpAddr)> {
    match packet.first()? >> 4 {
        4 => {
            let src: [u8; 4] = packet.get(12..16)?.try_into().ok()?;
            let dst: [u8; 4] = packet.get(16..20)?.try_into().ok()?;
            Some((IpAddr::from(src), IpAddr::from(dst)))
        }
        6 => {
            let src: [u8; 16] = packet.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = packet.get(24..40)?.try_into().ok()?;
            Some((IpAddr::from(src), IpAddr::from(dst)))
        }
        _ => None,
    }
}

/// The addresses, protocol and payload of an IPv4 or IPv6 packet (by its version nibble).
/// IPv4: a valid header (its checksum checked when `caps` says so), no fragment; IPv6:
/// `next` is the first Next Header (an extension header is not skipped), the payload ends
/// where the payload length says.
pub(crate) struct IpView<'a> {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) next: IpProtocol,
    /// Where the payload starts in the packet.
    pub(crate) offset: usize,
    pub(crate) payload: &'a [u8],
}

/// Reads the IP header of `packet`; see [`IpView`].
pub(crate) fn parse_ip<'a>(
    packet: &'a [u8],
    caps: &ChecksumCapabilities,
) -> Result<IpView<'a>, PacketError> {
    match packet.first().map(|b| b >> 4) {
        Some(6) => {
            let ip = Ipv6Packet::new_checked(packet).map_err(|_| PacketError::BadIpv6)?;
            let repr = Ipv6Repr::parse(&ip).map_err(|_| PacketError::BadIpv6)?;
            Ok(IpView {
                src: IpAddr::V6(repr.src_addr),
                dst: IpAddr::V6(repr.dst_addr),
                next: repr.next_header,
                offset: IPV6_HEADER_LEN,
                payload: ip.payload(),
            })
        }
        _ => match parse_ipv4_common(packet, caps.ipv4.rx()) {
            Some(view) => Ok(view),
            None => parse_ipv4(packet, caps),
        },
    }
}

/// An IPv4 packet through smoltcp's parser.
fn parse_ipv4<'a>(
    packet: &'a [u8],
    caps: &ChecksumCapabilities,
) -> Result<IpView<'a>, PacketError> {
    let ip = Ipv4Packet::new_checked(packet).map_err(|_| PacketError::BadIpv4)?;
    let repr = Ipv4Repr::parse(&ip, caps).map_err(|_| PacketError::BadIpv4)?;
    Ok(IpView {
        src: IpAddr::V4(repr.src_addr),
        dst: IpAddr::V4(repr.dst_addr),
        next: repr.next_header,
        offset: usize::from(ip.header_len()),
        payload: ip.payload(),
    })
}

/// The usual IPv4 packet (no options, not a fragment, a valid header checksum when `verify`)
/// read field by field, as [`parse_ipv4`] reads it (tested against it); `None` leaves the
/// packet to [`parse_ipv4`], which also refuses what is wrong with it.
fn parse_ipv4_common(packet: &[u8], verify: bool) -> Option<IpView<'_>> {
    let h = packet.get(..IPV4_HEADER_LEN)?;
    // Version 4, header length 5 words.
    if h[0] != 0x45 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    // More Fragments and the fragment offset: no fragments.
    let fragment = u16::from_be_bytes([h[6], h[7]]) & 0x3fff;
    if total < IPV4_HEADER_LEN || total > packet.len() || fragment != 0 {
        return None;
    }
    if verify && crate::checksum::sum(h) != 0xffff {
        return None;
    }
    Some(IpView {
        src: IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15])),
        dst: IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19])),
        next: IpProtocol::from(h[9]),
        offset: IPV4_HEADER_LEN,
        payload: &packet[IPV4_HEADER_LEN..total],
    })
}

/// Why an incoming packet was not processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Not a well-formed IPv4 packet (or bad header checksum, or a fragment).
    #[error("malformed IPv4 packet")]
    BadIpv4,
    /// Not a well-formed IPv6 packet (a header longer than the packet, a wrong version).
    #[error("malformed IPv6 packet")]
    BadIpv6,
    /// Not TCP (for IPv6: the first Next Header, so an extension header counts here).
    #[error("not a TCP packet (protocol {0})")]
    NotTcp(u8),
    /// Malformed TCP header, bad options or bad checksum.
    #[error("malformed TCP segment or bad checksum")]
    BadTcp,
    /// Source or destination is not a unicast address.
    #[error("non-unicast address")]
    NotUnicast,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use smoltcp::phy::Checksum;

    fn view(
        v: Result<IpView<'_>, PacketError>,
    ) -> Result<(IpAddr, IpAddr, u8, usize, &[u8]), PacketError> {
        v.map(|v| (v.src, v.dst, u8::from(v.next), v.offset, v.payload))
    }

    /// IPv4 packets, mostly with a consistent header (then with the checksum filled in)
    /// and sometimes with any octets at all.
    fn packets() -> impl Strategy<Value = Vec<u8>> {
        (
            any::<[u8; 20]>(),
            proptest::collection::vec(any::<u8>(), 0..48),
            any::<bool>(),
            any::<bool>(),
            prop::bool::weighted(0.8),
        )
            .prop_map(|(mut h, rest, shorter, fragment, consistent)| {
                if consistent {
                    h[0] = 0x45;
                    let total = (20 + rest.len() - usize::from(shorter && !rest.is_empty())) as u16;
                    h[2..4].copy_from_slice(&total.to_be_bytes());
                    if !fragment {
                        h[6] &= 0xc0;
                        h[7] = 0;
                    }
                    h[10..12].fill(0);
                    let sum = !crate::checksum::sum(&h);
                    h[10..12].copy_from_slice(&sum.to_be_bytes());
                }
                let mut p = h.to_vec();
                p.extend_from_slice(&rest);
                p
            })
    }

    proptest! {
        // RFC 791 §3.1, RFC 8200 §3: the addresses read back from a header the engine
        // wrote (what `Engine::poll_transmit` reports for the packet) are its endpoints'.
        #[test]
        fn header_addresses_are_the_written_packets(
            (src, dst) in crate::wire::tests::endpoints(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let (_, _, hdr) = crate::wire::tests::data_segment();
            let mut buf = [0u8; 256];
            let cfg = crate::Config::default();
            let len = crate::wire::write_packet(&mut buf, &cfg, src, dst, &hdr, &payload);
            prop_assert!(len.is_some());
            prop_assert_eq!(header_addresses(&buf), Some((src.ip(), dst.ip())));
            let short = ip_header_len(src.ip()) - 1;
            prop_assert_eq!(header_addresses(&buf[..short]), None);
        }

        // The direct reading and smoltcp's parser agree on every packet not of version 6.
        #[test]
        fn ipv4_same_as_smoltcp(p in packets(), verify in any::<bool>()) {
            let mut caps = ChecksumCapabilities::ignored();
            caps.ipv4 = if verify { Checksum::Both } else { Checksum::None };
            // Version 6 is the IPv6 parser's.
            prop_assume!(p[0] >> 4 != 6);
            prop_assert_eq!(view(parse_ip(&p, &caps)), view(parse_ipv4(&p, &caps)));
        }
    }

    // A plain packet takes the direct path; a bad checksum is refused when verifying.
    #[test]
    fn plain_ipv4_takes_the_direct_path() {
        let mut p = vec![
            0x45, 0, 0, 24, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let sum = !crate::checksum::sum(&p);
        p[10..12].copy_from_slice(&sum.to_be_bytes());
        p.extend_from_slice(b"tcp!");
        let v = parse_ipv4_common(&p, true).expect("direct path");
        assert_eq!(v.payload, b"tcp!");
        assert_eq!(v.next, IpProtocol::Tcp);
        p[8] = 63;
        assert!(parse_ipv4_common(&p, true).is_none());
        assert!(parse_ipv4_common(&p, false).is_some());
        let mut caps = ChecksumCapabilities::ignored();
        caps.ipv4 = Checksum::Both;
        assert_eq!(view(parse_ip(&p, &caps)), Err(PacketError::BadIpv4));
    }
}
