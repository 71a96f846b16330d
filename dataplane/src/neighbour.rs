//! The neighbour cache behind ARP (IPv4, [`crate::arp`]) and neighbour discovery (IPv6,
//! [`crate::ndp`]): IP address to MAC with ages, and the record of resolutions under way,
//! one semantics for both families.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use crate::clock::Instant;

/// How long a learned neighbour stays valid.
pub const ENTRY_LIFETIME: Duration = Duration::from_secs(300);
/// Least time between two requests (ARP requests, neighbour solicitations) for the same
/// address.
pub const REQUEST_INTERVAL: Duration = Duration::from_secs(1);
/// Most neighbours kept per family; the oldest is evicted beyond that.
pub const CACHE_CAPACITY: usize = 1024;

/// Neighbour cache: address `A` to MAC, with ages, and the addresses a request was sent
/// for.
#[derive(Debug)]
pub struct NeighbourCache<A> {
    entries: HashMap<A, ([u8; 6], Instant)>,
    requested: HashMap<A, Instant>,
    evicted: u64,
    suppressed: u64,
}

impl<A> Default for NeighbourCache<A> {
    fn default() -> Self {
        NeighbourCache {
            entries: HashMap::new(),
            requested: HashMap::new(),
            evicted: 0,
            suppressed: 0,
        }
    }
}

impl<A: Copy + Eq + Hash> NeighbourCache<A> {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The MAC of `ip` if known and fresh.
    pub fn lookup(&self, ip: A, now: Instant) -> Option<[u8; 6]> {
        self.entries
            .get(&ip)
            .filter(|(_, at)| now.saturating_since(*at) < ENTRY_LIFETIME)
            .map(|(mac, _)| *mac)
    }

    /// Records `ip` at `mac`; a resolution of `ip` under way is complete. The oldest
    /// neighbour makes room when the cache is full (counted in [`NeighbourCache::evicted`]).
    pub fn insert(&mut self, ip: A, mac: [u8; 6], now: Instant) {
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

    /// True when `ip` has an entry (fresh or not).
    pub fn knows(&self, ip: A) -> bool {
        self.entries.contains_key(&ip)
    }

    /// True when a request for `ip` went out in the last [`ENTRY_LIFETIME`] and no answer
    /// came yet: an answer about `ip` was asked for.
    pub fn asked(&self, ip: A, now: Instant) -> bool {
        self.requested
            .get(&ip)
            .is_some_and(|at| now.saturating_since(*at) < ENTRY_LIFETIME)
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
    /// resolved: requests older than [`ENTRY_LIFETIME`] are forgotten first); records that
    /// one is being sent.
    pub fn should_request(&mut self, ip: A, now: Instant) -> bool {
        match self.requested.get(&ip) {
            Some(at) if now.saturating_since(*at) < REQUEST_INTERVAL => false,
            Some(_) => {
                self.requested.insert(ip, now);
                true
            }
            None => {
                if self.requested.len() >= CACHE_CAPACITY {
                    self.requested
                        .retain(|_, at| now.saturating_since(*at) < ENTRY_LIFETIME);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

    #[test]
    fn requests_are_rate_limited_per_address() {
        let mut cache = NeighbourCache::new();
        let now = clock::now();
        let (a, b) = (Ipv4Addr::new(10, 99, 0, 2), Ipv4Addr::new(10, 99, 0, 3));
        assert!(cache.should_request(a, now));
        assert!(!cache.should_request(a, now + Duration::from_millis(10)));
        assert!(cache.should_request(b, now));
        assert!(cache.should_request(a, now + REQUEST_INTERVAL));
        assert!(cache.asked(a, now));
        cache.insert(a, MAC, now);
        assert!(!cache.asked(a, now), "answered");
        assert!(cache.asked(b, now));
        assert!(!cache.asked(b, now + ENTRY_LIFETIME), "asked too long ago");
    }

    #[test]
    fn cache_is_bounded_and_ages() {
        let mut cache = NeighbourCache::new();
        let now = clock::now();
        for i in 0..(CACHE_CAPACITY as u128 + 10) {
            let ip = Ipv6Addr::from(0xfd00_u128 << 112 | i);
            cache.insert(ip, MAC, now + Duration::from_micros(i as u64));
        }
        assert_eq!(cache.len(), CACHE_CAPACITY);
        assert_eq!(cache.lookup(Ipv6Addr::from(0xfd00_u128 << 112), now), None);
        let last = Ipv6Addr::from(0xfd00_u128 << 112 | (CACHE_CAPACITY as u128 + 9));
        assert_eq!(cache.lookup(last, now), Some(MAC));
        assert_eq!(
            cache.lookup(last, now + ENTRY_LIFETIME * 2),
            None,
            "aged out"
        );
        assert!(cache.knows(last));
        assert_eq!(cache.evicted(), 10);
    }

    #[test]
    fn addresses_being_resolved_are_bounded() {
        let mut cache = NeighbourCache::new();
        let now = clock::now();
        let ip = |i: u32| Ipv4Addr::from(0x0a00_0000 + i);
        for i in 0..CACHE_CAPACITY as u32 {
            assert!(cache.should_request(ip(i), now));
        }
        // Full of fresh requests: a new address waits (counted), known ones are unaffected.
        assert!(!cache.should_request(ip(5000), now));
        assert_eq!((cache.pending(), cache.suppressed()), (CACHE_CAPACITY, 1));
        cache.insert(ip(3), MAC, now);
        assert_eq!(cache.lookup(ip(3), now), Some(MAC));
        assert!(cache.should_request(ip(5000), now), "a reply made room");
        // Requests older than an entry's lifetime are forgotten to make room.
        let later = now + ENTRY_LIFETIME;
        assert!(cache.should_request(ip(6000), later));
        assert_eq!(cache.pending(), 1);
        assert_eq!(cache.suppressed(), 1);
    }
}
