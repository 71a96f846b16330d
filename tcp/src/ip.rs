//! The IP layer under the engine: header lengths per family and reading the IPv4 or IPv6
//! header of a received packet.

use std::net::IpAddr;

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
        _ => {
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
    }
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
