//! The neighbour cache behind ARP (IPv4, [`crate::arp`]) and neighbour discovery (IPv6,
//! [`crate::ndp`]): IP address to MAC with ages, and the record of resolutions under way,
//! one semantics for both families.
//!
//! The lanes of a multi-queue port share what they learn ([`NeighbourShare`]): a NIC's RSS
//! hashes IP, so ARP replies and neighbour advertisements all land on queue 0, whichever
//! lane asked. Each lane keeps its own cache (looked up per packet, no lock); what a lane
//! learns from an answer, and the addresses it asks for, go to the other lanes as messages
//! taken once per poll-loop iteration.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
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
    /// The entry [`NeighbourCache::lookup`] found last: a connection's packets all go to
    /// one next hop, found again without hashing. Forgotten whenever an entry changes.
    last: LastFound<A>,
    requested: HashMap<A, Instant>,
    evicted: u64,
    suppressed: u64,
    /// What the other lanes are to be told ([`NeighbourCache::record_news`]): addresses
    /// learned (with their MAC) and asked for (without).
    news: Option<Vec<(A, Option<[u8; 6]>)>>,
}

/// [`NeighbourCache::lookup`]'s last hit: the address, its MAC, when it was learned.
struct LastFound<A>(Cell<Option<(A, [u8; 6], Instant)>>);

impl<A> std::fmt::Debug for LastFound<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LastFound")
    }
}

impl<A> Default for NeighbourCache<A> {
    fn default() -> Self {
        NeighbourCache {
            entries: HashMap::new(),
            last: LastFound(Cell::new(None)),
            requested: HashMap::new(),
            evicted: 0,
            suppressed: 0,
            news: None,
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
        let (mac, at) = match self.last.0.get() {
            Some((last, mac, at)) if last == ip => (mac, at),
            _ => {
                let &(mac, at) = self.entries.get(&ip)?;
                self.last.0.set(Some((ip, mac, at)));
                (mac, at)
            }
        };
        (now.saturating_since(at) < ENTRY_LIFETIME).then_some(mac)
    }

    /// Records `ip` at `mac`; a resolution of `ip` under way is complete. The oldest
    /// neighbour makes room when the cache is full (counted in [`NeighbourCache::evicted`]).
    pub fn insert(&mut self, ip: A, mac: [u8; 6], now: Instant) {
        self.learn_from_lane(ip, mac, now);
        if let Some(news) = &mut self.news {
            news.push((ip, Some(mac)));
        }
    }

    /// Records `ip` at `mac` as another lane learned it (not news to pass on).
    pub fn learn_from_lane(&mut self, ip: A, mac: [u8; 6], now: Instant) {
        self.last.0.set(None);
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

    /// Notes that another lane asked for `ip` at `now`, so that an answer arriving here is
    /// one asked for; this lane's own requests for `ip` wait [`REQUEST_INTERVAL`] from
    /// then, the answer reaching every lane.
    pub fn asked_by_lane(&mut self, ip: A, now: Instant) {
        if self.requested.len() < CACHE_CAPACITY || self.requested.contains_key(&ip) {
            self.requested.entry(ip).or_insert(now);
        }
    }

    /// From now on, keeps what the other lanes are to be told: the addresses learned
    /// ([`NeighbourCache::insert`]) and asked for ([`NeighbourCache::should_request`]).
    pub fn record_news(&mut self) {
        self.news.get_or_insert_with(Vec::new);
    }

    /// Hands each piece of news kept since the last call to `f`: an address and its MAC
    /// when learned, without a MAC when asked for.
    pub fn drain_news(&mut self, mut f: impl FnMut(A, Option<[u8; 6]>)) {
        if let Some(news) = &mut self.news {
            for (ip, mac) in news.drain(..) {
                f(ip, mac);
            }
        }
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
        let asking = self.may_request(ip, now);
        if let (true, Some(news)) = (asking, &mut self.news) {
            news.push((ip, None));
        }
        asking
    }

    fn may_request(&mut self, ip: A, now: Instant) -> bool {
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

/// What one lane tells the other lanes of a port about its neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeighbourNews {
    /// `ip` is at this MAC (an answer the lane received).
    Learned(IpAddr, [u8; 6]),
    /// The lane asked for `ip`: an answer another lane receives was asked for.
    Asked(IpAddr),
}

/// News that may wait for a lane at once; beyond it news is dropped (counted): a lane that
/// stopped polling holds no more memory than this, and one that misses an answer asks
/// again.
pub const NEWS_BOUND: usize = 4096;

/// One lane's end of the neighbour news of a port that several lanes share: what it sends
/// to every other lane, and what they sent it.
#[derive(Debug)]
pub struct NeighbourShare {
    others: Vec<SyncSender<NeighbourNews>>,
    inbox: Receiver<NeighbourNews>,
    sent: u64,
    received: u64,
    dropped: u64,
}

/// The ends of `lanes` lanes sharing a port's neighbours, lane 0 first.
pub fn neighbour_shares(lanes: usize) -> Vec<NeighbourShare> {
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..lanes).map(|_| sync_channel(NEWS_BOUND)).unzip();
    receivers
        .into_iter()
        .enumerate()
        .map(|(lane, inbox)| NeighbourShare {
            others: senders
                .iter()
                .enumerate()
                .filter(|&(k, _)| k != lane)
                .map(|(_, s)| s.clone())
                .collect(),
            inbox,
            sent: 0,
            received: 0,
            dropped: 0,
        })
        .collect()
}

impl NeighbourShare {
    /// Tells every other lane (a lane that is gone is skipped; one with [`NEWS_BOUND`]
    /// pieces of news waiting misses this one, counted in [`NeighbourShare::dropped`]).
    pub fn publish(&mut self, news: NeighbourNews) {
        for o in &self.others {
            if let Err(TrySendError::Full(_)) = o.try_send(news) {
                self.dropped += 1;
            }
        }
        self.sent += 1;
    }

    /// News another lane missed because [`NEWS_BOUND`] pieces waited for it.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The next news from another lane.
    pub fn take(&mut self) -> Option<NeighbourNews> {
        let news = self.inbox.try_recv().ok();
        self.received += u64::from(news.is_some());
        news
    }

    /// News sent to the other lanes, and received from them.
    pub fn counts(&self) -> (u64, u64) {
        (self.sent, self.received)
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
    fn news_is_kept_only_when_asked_and_lanes_hear_each_other() {
        let now = clock::now();
        let a = Ipv4Addr::new(10, 99, 0, 2);
        let mut quiet = NeighbourCache::new();
        quiet.insert(a, MAC, now);
        let mut none = 0;
        quiet.drain_news(|_, _| none += 1);
        assert_eq!(none, 0, "no news without record_news");

        let mut cache = NeighbourCache::new();
        cache.record_news();
        assert!(cache.should_request(a, now));
        assert!(!cache.should_request(a, now), "rate-limited: no news");
        cache.insert(a, MAC, now);
        cache.learn_from_lane(Ipv4Addr::new(10, 99, 0, 9), MAC, now);
        let mut news = Vec::new();
        cache.drain_news(|ip, mac| news.push((ip, mac)));
        assert_eq!(
            news,
            [(a, None), (a, Some(MAC))],
            "not what other lanes said"
        );
        cache.drain_news(|_, _| panic!("drained"));

        // Another lane asked: an answer here was asked for, and this lane waits for it.
        let b = Ipv4Addr::new(10, 99, 0, 3);
        cache.asked_by_lane(b, now);
        assert!(cache.asked(b, now));
        assert!(!cache.should_request(b, now));
        assert!(cache.should_request(b, now + REQUEST_INTERVAL));

        let mut ends = neighbour_shares(3);
        ends[1].publish(NeighbourNews::Learned(a.into(), MAC));
        assert_eq!(ends[1].take(), None, "not to itself");
        for k in [0, 2] {
            assert_eq!(ends[k].take(), Some(NeighbourNews::Learned(a.into(), MAC)));
            assert_eq!(ends[k].take(), None);
            assert_eq!(ends[k].counts(), (0, 1));
        }
        assert_eq!(ends[1].counts(), (1, 0));
        // A lane that does not take its news holds at most NEWS_BOUND of them.
        for _ in 0..NEWS_BOUND + 5 {
            ends[0].publish(NeighbourNews::Asked(a.into()));
        }
        assert_eq!(
            ends[0].dropped(),
            2 * 5,
            "5 missed by each of lanes 1 and 2"
        );
        let mut n = 0;
        while ends[2].take().is_some() {
            n += 1;
        }
        assert_eq!(n, NEWS_BOUND);
    }

    #[test]
    fn lookup_sees_a_relearned_or_aged_entry() {
        let mut cache = NeighbourCache::new();
        let now = clock::now();
        let a = Ipv4Addr::new(10, 99, 0, 2);
        let other = [2, 0, 0, 0, 0, 9];
        cache.insert(a, MAC, now);
        assert_eq!(cache.lookup(a, now), Some(MAC));
        cache.insert(a, other, now);
        assert_eq!(
            cache.lookup(a, now),
            Some(other),
            "the new MAC, not the one found last"
        );
        assert_eq!(cache.lookup(a, now + ENTRY_LIFETIME), None, "aged out");
        assert_eq!(cache.lookup(Ipv4Addr::new(10, 99, 0, 3), now), None);
        assert_eq!(cache.lookup(a, now), Some(other));
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
