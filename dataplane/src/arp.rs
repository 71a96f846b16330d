//! ARP (RFC 826) for one port: answers requests for the port's IPv4 address, learns
//! neighbours, and builds requests for addresses the port needs to reach.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use crate::clock::Instant;

use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr,
};

use crate::classify::ETH_HLEN;

/// Length of an Ethernet/IPv4 ARP packet.
pub const ARP_LEN: usize = 28;
/// Minimum Ethernet frame length without FCS; ARP frames are padded to it.
pub const MIN_FRAME_LEN: usize = 60;

/// How long a learned neighbour stays valid.
pub const ENTRY_LIFETIME: Duration = Duration::from_secs(300);
/// Least time between two requests for the same address.
pub const REQUEST_INTERVAL: Duration = Duration::from_secs(1);
/// Most neighbours kept; the oldest is evicted beyond that.
pub const CACHE_CAPACITY: usize = 1024;

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

/// Neighbour cache: IPv4 address to MAC, with ages, and the addresses being resolved.
/// Both tables hold at most [`CACHE_CAPACITY`] addresses, however many neighbours (or
/// spoofed sources a handler answers) there are.
#[derive(Debug, Default)]
pub struct ArpCache {
    entries: HashMap<Ipv4Addr, ([u8; 6], Instant)>,
    requested: HashMap<Ipv4Addr, Instant>,
    evicted: u64,
    suppressed: u64,
}

impl ArpCache {
    /// An empty cache.
    pub fn new() -> ArpCache {
        ArpCache::default()
    }

    /// The MAC of `ip` if known and fresh.
    pub fn lookup(&self, ip: Ipv4Addr, now: Instant) -> Option<[u8; 6]> {
        self.entries
            .get(&ip)
            .filter(|(_, at)| now.saturating_since(*at) < ENTRY_LIFETIME)
            .map(|(mac, _)| *mac)
    }

    /// Records `ip` at `mac` (the oldest neighbour makes room when the cache is full,
    /// counted in [`ArpCache::evicted`]).
    pub fn insert(&mut self, ip: Ipv4Addr, mac: [u8; 6], now: Instant) {
        if self.entries.len() >= CACHE_CAPACITY && !self.entries.contains_key(&ip) {
            let oldest = self.entries.iter().min_by_key(|(_, (_, at))| *at);
            if let Some((&old, _)) = oldest {
                self.entries.remove(&old);
                self.evicted += 1;
            }
        }
        self.entries.insert(ip, (mac, now));
        self.requested.remove(&ip);
    }

    /// Number of neighbours known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no neighbour is known.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Addresses being resolved (a request sent, no reply yet).
    pub fn pending(&self) -> usize {
        self.requested.len()
    }

    /// Neighbours evicted to make room for newer ones.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Requests not sent because [`CACHE_CAPACITY`] addresses were being resolved at once.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }

    /// True when a request for `ip` may be sent now (none sent in the last
    /// [`REQUEST_INTERVAL`], and fewer than [`CACHE_CAPACITY`] other addresses being
    /// resolved: requests older than the interval are forgotten first); records that one is
    /// being sent.
    pub fn should_request(&mut self, ip: Ipv4Addr, now: Instant) -> bool {
        match self.requested.get(&ip) {
            Some(at) if now.saturating_since(*at) < REQUEST_INTERVAL => false,
            Some(_) => {
                self.requested.insert(ip, now);
                true
            }
            None => {
                if self.requested.len() >= CACHE_CAPACITY {
                    self.requested
                        .retain(|_, at| now.saturating_since(*at) < REQUEST_INTERVAL);
                }
                if self.requested.len() >= CACHE_CAPACITY {
                    self.suppressed += 1;
                    return false;
                }
                self.requested.insert(ip, now);
                true
            }
        }
    }

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
        let known = self.entries.contains_key(&source_protocol_addr);
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

/// Writes `repr` as a complete Ethernet frame into `buf` (at least [`MIN_FRAME_LEN`] bytes;
/// the padding is zeroed). Requests go to broadcast, replies to the target's MAC.
/// Returns the frame length, or `None` if `buf` is too short.
pub fn emit_arp_frame(repr: &ArpRepr, buf: &mut [u8]) -> Option<usize> {
    if buf.len() < MIN_FRAME_LEN {
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
    let frame_len = MIN_FRAME_LEN;
    let buf = &mut buf[..frame_len];
    buf.fill(0);
    let mut eth = EthernetFrame::new_unchecked(&mut *buf);
    EthernetRepr {
        src_addr: source_hardware_addr,
        dst_addr: dst,
        ethertype: EthernetProtocol::Arp,
    }
    .emit(&mut eth);
    let mut pkt = ArpPacket::new_unchecked(&mut eth.payload_mut()[..ARP_LEN]);
    repr.emit(&mut pkt);
    debug_assert_eq!(ETH_HLEN + ARP_LEN, 42);
    Some(frame_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;
    use crate::test_frames::{self, OUR_IP, OUR_MAC, PEER_IP, PEER_MAC};

    fn frame_of(repr: &ArpRepr) -> Vec<u8> {
        let mut buf = vec![0xaa; 64];
        let n = emit_arp_frame(repr, &mut buf).unwrap();
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

    #[test]
    fn requests_are_rate_limited_per_address() {
        let mut cache = ArpCache::new();
        let now = clock::now();
        assert!(cache.should_request(PEER_IP, now));
        assert!(!cache.should_request(PEER_IP, now + Duration::from_millis(10)));
        assert!(cache.should_request(Ipv4Addr::new(10, 99, 0, 3), now));
        assert!(cache.should_request(PEER_IP, now + REQUEST_INTERVAL));
    }

    #[test]
    fn cache_is_bounded() {
        let mut cache = ArpCache::new();
        let now = clock::now();
        for i in 0..(CACHE_CAPACITY as u32 + 10) {
            let ip = Ipv4Addr::from(0x0a00_0000 + i);
            cache.insert(ip, PEER_MAC, now + Duration::from_micros(i as u64));
        }
        assert_eq!(cache.len(), CACHE_CAPACITY);
        assert_eq!(cache.lookup(Ipv4Addr::from(0x0a00_0000), now), None);
        assert_eq!(cache.evicted(), 10);
    }

    #[test]
    fn addresses_being_resolved_are_bounded() {
        let mut cache = ArpCache::new();
        let now = clock::now();
        let ip = |i: u32| Ipv4Addr::from(0x0a00_0000 + i);
        for i in 0..CACHE_CAPACITY as u32 {
            assert!(cache.should_request(ip(i), now));
        }
        // Full of fresh requests: a new address waits (counted), known ones are unaffected.
        assert!(!cache.should_request(ip(5000), now));
        assert_eq!((cache.pending(), cache.suppressed()), (CACHE_CAPACITY, 1));
        cache.insert(ip(3), PEER_MAC, now);
        assert_eq!(cache.lookup(ip(3), now), Some(PEER_MAC));
        assert!(cache.should_request(ip(5000), now), "a reply made room");
        // An interval later the stale requests are forgotten to make room.
        let later = now + REQUEST_INTERVAL;
        assert!(cache.should_request(ip(6000), later));
        assert_eq!(cache.pending(), 1);
        assert_eq!(cache.suppressed(), 1);
    }
}
