//! ARP (RFC 826) for one port: answers requests for the port's IPv4 address, learns
//! neighbours, and builds requests for addresses the port needs to reach.

use std::net::Ipv4Addr;

use crate::clock::Instant;

use smoltcp::wire::{ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetProtocol};

use crate::frame::{l2_len, write_l2, Vlan, VLAN_TAG_LEN};
use crate::neighbour::NeighbourCache;

/// Length of an Ethernet/IPv4 ARP packet.
pub const ARP_LEN: usize = 28;
/// Minimum Ethernet frame length without FCS; ARP frames are padded to it (plus the tag's
/// length when tagged).
pub const MIN_FRAME_LEN: usize = 60;

/// What to do about a received ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArpOutcome {
    /// It asked for our address: send this reply frame (see [`emit_arp_frame`]).
    Reply(ArpRepr),
    /// It told us something (a reply, or a request not for us whose sender we know).
    Learned,
    /// Nothing to do (not Ethernet/IPv4 ARP, or not for us).
    Ignored,
    /// The packet is not valid ARP.
    Malformed,
}

/// The IPv4 neighbour cache ([`NeighbourCache`] of IPv4 addresses).
pub type ArpCache = NeighbourCache<Ipv4Addr>;

impl NeighbourCache<Ipv4Addr> {
    /// Handles the ARP payload `arp` (after the Ethernet header) received on a port with
    /// address `our_mac`/`our_ip`. Follows RFC 826's merge rule: the sender is learned if
    /// already known or if the packet is for us.
    pub fn handle(
        &mut self,
        arp: &[u8],
        our_mac: [u8; 6],
        our_ip: Option<Ipv4Addr>,
        now: Instant,
    ) -> ArpOutcome {
        let Ok(pkt) = ArpPacket::new_checked(arp) else {
            return ArpOutcome::Malformed;
        };
        let Ok(ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr,
            source_protocol_addr,
            target_protocol_addr,
            ..
        }) = ArpRepr::parse(&pkt)
        else {
            return ArpOutcome::Ignored;
        };
        let sender_ok = source_hardware_addr.is_unicast()
            && !source_protocol_addr.is_unspecified()
            && !source_protocol_addr.is_broadcast();
        let for_us = our_ip == Some(target_protocol_addr);
        let known = self.knows(source_protocol_addr);
        if sender_ok && (for_us || known) {
            self.insert(source_protocol_addr, source_hardware_addr.0, now);
        }
        match (operation, for_us, our_ip) {
            (ArpOperation::Request, true, Some(ip)) if sender_ok => {
                ArpOutcome::Reply(ArpRepr::EthernetIpv4 {
                    operation: ArpOperation::Reply,
                    source_hardware_addr: EthernetAddress(our_mac),
                    source_protocol_addr: ip,
                    target_hardware_addr: source_hardware_addr,
                    target_protocol_addr: source_protocol_addr,
                })
            }
            _ if sender_ok && (for_us || known) => ArpOutcome::Learned,
            _ => ArpOutcome::Ignored,
        }
    }
}

/// A request asking who has `target`, from `our_mac`/`our_ip`.
pub fn request(our_mac: [u8; 6], our_ip: Ipv4Addr, target: Ipv4Addr) -> ArpRepr {
    ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: EthernetAddress(our_mac),
        source_protocol_addr: our_ip,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: target,
    }
}

/// Length of an ARP frame with `tag` in it (the minimum frame, padded).
pub fn arp_frame_len(tag: Option<Vlan>) -> usize {
    MIN_FRAME_LEN + tag.map_or(0, |_| VLAN_TAG_LEN)
}

/// Writes `repr` as a complete Ethernet frame, 802.1Q-tagged with `tag` when given, into
/// `buf` (at least [`arp_frame_len`] bytes; the padding is zeroed). Requests go to
/// broadcast, replies to the target's MAC. Returns the frame length, or `None` if `buf` is
/// too short.
pub fn emit_arp_frame(repr: &ArpRepr, tag: Option<Vlan>, buf: &mut [u8]) -> Option<usize> {
    let frame_len = arp_frame_len(tag);
    if buf.len() < frame_len {
        return None;
    }
    let ArpRepr::EthernetIpv4 {
        operation,
        source_hardware_addr,
        target_hardware_addr,
        ..
    } = *repr
    else {
        return None;
    };
    let dst = match operation {
        ArpOperation::Request => EthernetAddress::BROADCAST,
        _ => target_hardware_addr,
    };
    let buf = &mut buf[..frame_len];
    buf.fill(0);
    let at = write_l2(
        buf,
        dst.0,
        source_hardware_addr.0,
        tag,
        EthernetProtocol::Arp,
    );
    debug_assert_eq!(at, l2_len(tag));
    let mut pkt = ArpPacket::new_unchecked(&mut buf[at..at + ARP_LEN]);
    repr.emit(&mut pkt);
    Some(frame_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;
    use crate::frame::ETH_HLEN;
    use crate::neighbour::ENTRY_LIFETIME;
    use crate::test_frames::{self, OUR_IP, OUR_MAC, PEER_IP, PEER_MAC};
    use smoltcp::wire::EthernetFrame;
    use std::time::Duration;

    fn frame_of(repr: &ArpRepr) -> Vec<u8> {
        let mut buf = vec![0xaa; 64];
        let n = emit_arp_frame(repr, None, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn request_for_us_gets_a_byte_exact_reply_and_teaches_the_sender() {
        let now = clock::now();
        let mut cache = ArpCache::new();
        let req = frame_of(&request(PEER_MAC, PEER_IP, OUR_IP));
        assert_eq!(req.len(), 60);
        assert_eq!(&req[0..6], &[0xff; 6], "requests are broadcast");
        let out = cache.handle(&req[ETH_HLEN..], OUR_MAC, Some(OUR_IP), now);
        let ArpOutcome::Reply(reply) = out else {
            panic!("{out:?}")
        };
        assert_eq!(cache.lookup(PEER_IP, now), Some(PEER_MAC));

        let bytes = frame_of(&reply);
        // Check the reply frame with smoltcp's parser (RFC 826: op 2, addresses swapped).
        let eth = EthernetFrame::new_checked(&bytes[..]).unwrap();
        assert_eq!(eth.dst_addr(), EthernetAddress(PEER_MAC));
        assert_eq!(eth.src_addr(), EthernetAddress(OUR_MAC));
        assert_eq!(eth.ethertype(), EthernetProtocol::Arp);
        let parsed = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert_eq!(
            parsed,
            ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Reply,
                source_hardware_addr: EthernetAddress(OUR_MAC),
                source_protocol_addr: OUR_IP,
                target_hardware_addr: EthernetAddress(PEER_MAC),
                target_protocol_addr: PEER_IP,
            }
        );
        // Raw bytes: htype 1, ptype 0x0800, hlen 6, plen 4, oper 2.
        assert_eq!(&bytes[14..22], &[0, 1, 8, 0, 6, 4, 0, 2]);
        assert!(bytes[42..].iter().all(|&b| b == 0), "padding zeroed");
    }

    #[test]
    fn request_for_someone_else_is_ignored_and_not_learned() {
        let now = clock::now();
        let mut cache = ArpCache::new();
        let req = frame_of(&request(PEER_MAC, PEER_IP, Ipv4Addr::new(10, 99, 0, 9)));
        assert_eq!(
            cache.handle(&req[ETH_HLEN..], OUR_MAC, Some(OUR_IP), now),
            ArpOutcome::Ignored
        );
        assert!(cache.is_empty());
        // Without an address of our own nothing is answered.
        let req = frame_of(&request(PEER_MAC, PEER_IP, OUR_IP));
        assert_eq!(
            cache.handle(&req[ETH_HLEN..], OUR_MAC, None, now),
            ArpOutcome::Ignored
        );
    }

    #[test]
    fn reply_to_us_is_learned_and_known_senders_are_refreshed() {
        let now = clock::now();
        let mut cache = ArpCache::new();
        let f = frame_of(&test_frames::arp_reply_to_us(PEER_MAC, PEER_IP));
        assert_eq!(
            cache.handle(&f[ETH_HLEN..], OUR_MAC, Some(OUR_IP), now),
            ArpOutcome::Learned
        );
        assert_eq!(cache.lookup(PEER_IP, now), Some(PEER_MAC));
        // A later gratuitous-style request from the known peer with a new MAC updates it.
        let new_mac = [2, 0, 0, 0, 0, 3];
        let f = frame_of(&request(new_mac, PEER_IP, Ipv4Addr::new(10, 99, 0, 9)));
        let later = now + Duration::from_secs(1);
        assert_eq!(
            cache.handle(&f[ETH_HLEN..], OUR_MAC, Some(OUR_IP), later),
            ArpOutcome::Learned
        );
        assert_eq!(cache.lookup(PEER_IP, later), Some(new_mac));
        assert_eq!(
            cache.lookup(PEER_IP, later + ENTRY_LIFETIME),
            None,
            "aged out"
        );
    }

    #[test]
    fn garbage_and_short_packets_are_malformed_or_ignored() {
        let mut cache = ArpCache::new();
        let now = clock::now();
        assert_eq!(
            cache.handle(&[0; 5], OUR_MAC, Some(OUR_IP), now),
            ArpOutcome::Malformed
        );
        let mut f = frame_of(&request(PEER_MAC, PEER_IP, OUR_IP));
        f[ETH_HLEN + 1] = 6; // hardware type 6 (IEEE 802): not Ethernet
        assert_eq!(
            cache.handle(&f[ETH_HLEN..], OUR_MAC, Some(OUR_IP), now),
            ArpOutcome::Ignored
        );
        let mut f = frame_of(&request([0xff; 6], PEER_IP, OUR_IP));
        f[6..12].copy_from_slice(&PEER_MAC);
        assert_eq!(
            cache.handle(&f[ETH_HLEN..], OUR_MAC, Some(OUR_IP), now),
            ArpOutcome::Ignored,
            "broadcast sender hardware address is not answered"
        );
    }

    // IEEE 802.1Q: a tagged ARP frame carries the tag before the ARP ethertype and is
    // padded to the minimum frame plus the tag.
    #[test]
    fn tagged_arp_frame() {
        let v = Vlan {
            id: 100,
            priority: 3,
        };
        let mut buf = vec![0xaa; 64];
        let n = emit_arp_frame(&request(OUR_MAC, OUR_IP, PEER_IP), Some(v), &mut buf).unwrap();
        assert_eq!(n, 64);
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0x60, 0x64, 0x08, 0x06]);
        let pkt = ArpPacket::new_checked(&buf[18..]).unwrap();
        let r = ArpRepr::parse(&pkt).unwrap();
        assert_eq!(r, request(OUR_MAC, OUR_IP, PEER_IP));
        assert!(buf[18 + ARP_LEN..].iter().all(|&b| b == 0));
        assert_eq!(emit_arp_frame(&r, Some(v), &mut buf[..60]), None);
    }
}
