//! A deterministic simulated IPv4 link for tests, examples and benchmarks: delay, rate,
//! loss, duplication, reordering, corruption and a rewrite hook, all drawn from a seeded
//! PRNG.
//!
//! Sans-IO like the engine: the caller queues each packet a side sends with the current
//! time ([`Link::send`]), and takes the packets that are due back out
//! ([`Link::poll_delivery`]), waking up at [`Link::next_due`]. The link reads no clock and
//! does not parse packets (only a rewrite hook may); the same seed and the same calls give
//! the same deliveries. Each harness drives its own engines around it.
//!
//! ```
//! use std::time::Duration;
//! use tcp::sim::{Link, LinkConfig, Side};
//! use tcp::Instant;
//!
//! let cfg = LinkConfig { loss: 0.01, reorder: 0.05, ..LinkConfig::default() };
//! let mut link = Link::new(cfg, 42);
//! let now = Instant::from_millis(1);
//! link.send(now, Side::A, vec![0x45; 60]); // an IPv4 packet from A's engine
//! let later = now + Duration::from_millis(1);
//! while let Some(d) = link.poll_delivery(later) {
//!     assert_eq!(d.to, Side::B); // hand `d.bytes` to B's engine at `d.due`
//! }
//! ```

use core::cmp::Ordering;
use core::time::Duration;
use std::collections::{BinaryHeap, VecDeque};

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{IpAddress, IpProtocol, TcpPacket};

use crate::ip::PacketError;
use crate::time::Instant;

/// One end of the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The first end.
    A,
    /// The second end.
    B,
}

impl Side {
    /// 0 for `A`, 1 for `B`: an index into per-side arrays.
    pub fn index(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }

    /// The opposite end.
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// Impairments of the link, the same in both directions and drawn independently per packet.
/// Probabilities at or below 0 never happen and draw nothing; at or above 1 always happen.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Serialization rate of each direction in bit/s; `None` sends in no time.
    pub rate_bps: Option<u64>,
    /// Probability that a packet is lost.
    pub loss: f64,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// The copy of a duplicated packet arrives up to this much later than the original.
    pub duplicate_spread: Duration,
    /// Probability that a packet is held back by `reorder_extra`, behind later ones.
    pub reorder: f64,
    /// Extra delay of a reordered packet.
    pub reorder_extra: Duration,
    /// Probability that one bit of a packet is flipped.
    pub corrupt: f64,
}

impl Default for LinkConfig {
    /// A 10 Gbit/s link, 50 µs one way, without impairment.
    fn default() -> Self {
        LinkConfig {
            delay: Duration::from_micros(50),
            rate_bps: Some(10_000_000_000),
            loss: 0.0,
            duplicate: 0.0,
            duplicate_spread: Duration::from_micros(20),
            reorder: 0.0,
            reorder_extra: Duration::from_micros(100),
            corrupt: 0.0,
        }
    }
}

/// Counters of what the link did, both directions together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets handed to [`Link::send`].
    pub sent: u64,
    /// Packets the rewrite hook dropped.
    pub dropped: u64,
    /// Packets lost at random.
    pub lost: u64,
    /// Packets sent twice.
    pub duplicated: u64,
    /// Packets held back behind later ones.
    pub reordered: u64,
    /// Packets with a bit flipped (a duplicated one counts once).
    pub corrupted: u64,
    /// Packets handed out by [`Link::poll_delivery`].
    pub delivered: u64,
    /// Of those, packets with a flipped bit.
    pub corrupted_delivered: u64,
}

/// A packet handed out at its due time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The side that receives it.
    pub to: Side,
    /// When it was due (not later than the `now` it was polled at).
    pub due: Instant,
    /// The packet as it arrives.
    pub bytes: Vec<u8>,
    /// Whether the link flipped a bit of it.
    pub corrupted: bool,
}

/// Sees every packet a side sends, at the send time, before any impairment: it may rewrite
/// the packet, and drops it by returning false.
type Rewrite = Box<dyn FnMut(Instant, Side, &mut Vec<u8>) -> bool>;

/// A packet on its way, ordered by due time, then by the order it was queued.
struct Pending {
    due: Instant,
    id: u64,
    delivery: Delivery,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.id) == (other.due, other.id)
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    /// Reversed, so that the max-heap pops the earliest packet first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.id).cmp(&(self.due, self.id))
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014): a small seeded generator, enough for test
/// impairments.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p`; draws only when the outcome is not certain.
    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        if p >= 1.0 {
            return true;
        }
        // The top 53 bits as a uniform float in [0, 1).
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// The simulated link between sides A and B.
pub struct Link {
    config: LinkConfig,
    stats: LinkStats,
    rewrite: Option<Rewrite>,
    rng: SplitMix64,
    /// Packets in due order, as long as each is due no earlier than the one before (the
    /// common case, kept cheap for benchmarks).
    queue: VecDeque<Pending>,
    /// Packets due before the last one in `queue` (held back less, or a faster rate).
    overtaking: BinaryHeap<Pending>,
    next_id: u64,
    /// When each side's transmitter is free again.
    busy_until: [Instant; 2],
}

impl Link {
    /// A link with `config`, its impairments drawn from a generator seeded with `seed`.
    pub fn new(config: LinkConfig, seed: u64) -> Self {
        Link {
            config,
            stats: LinkStats::default(),
            rewrite: None,
            rng: SplitMix64(seed),
            queue: VecDeque::new(),
            overtaking: BinaryHeap::new(),
            next_id: 0,
            busy_until: [Instant::ZERO; 2],
        }
    }

    /// The impairments.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// The impairments, to change for the packets sent from now on.
    pub fn config_mut(&mut self) -> &mut LinkConfig {
        &mut self.config
    }

    /// What the link did so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Installs `hook` for every packet sent from now on, replacing any earlier one.
    pub fn set_rewrite(&mut self, hook: impl FnMut(Instant, Side, &mut Vec<u8>) -> bool + 'static) {
        self.rewrite = Some(Box::new(hook));
    }

    /// Removes the rewrite hook.
    pub fn clear_rewrite(&mut self) {
        self.rewrite = None;
    }

    /// Queues a packet `from` sends at `now` toward the other side. The rewrite hook sees it
    /// first; then it is serialized after the side's previous packet, and may be lost, held
    /// back, corrupted or duplicated, in that order.
    pub fn send(&mut self, now: Instant, from: Side, mut bytes: Vec<u8>) {
        self.stats.sent += 1;
        if let Some(hook) = self.rewrite.as_mut() {
            if !hook(now, from, &mut bytes) {
                self.stats.dropped += 1;
                return;
            }
        }
        let busy = &mut self.busy_until[from.index()];
        let serialization = self.config.rate_bps.map_or(0, |rate| {
            (bytes.len() as u128 * 8_000_000_000)
                .checked_div(u128::from(rate))
                .map_or(0, |ns| u64::try_from(ns).unwrap_or(u64::MAX))
        });
        *busy = now.max(*busy) + Duration::from_nanos(serialization);
        let departed = *busy;
        if self.rng.chance(self.config.loss) {
            self.stats.lost += 1;
            return;
        }
        let mut due = departed + self.config.delay;
        if self.rng.chance(self.config.reorder) {
            self.stats.reordered += 1;
            due = due + self.config.reorder_extra;
        }
        let mut corrupted = false;
        if !bytes.is_empty() && self.rng.chance(self.config.corrupt) {
            let i = self.rng.below(bytes.len() as u64) as usize;
            bytes[i] ^= 1 << self.rng.below(8);
            corrupted = true;
            self.stats.corrupted += 1;
        }
        let to = from.other();
        if self.rng.chance(self.config.duplicate) {
            self.stats.duplicated += 1;
            let spread = u64::try_from(self.config.duplicate_spread.as_nanos()).unwrap_or(u64::MAX);
            let later = due + Duration::from_nanos(self.rng.below(spread));
            self.enqueue(later, to, bytes.clone(), corrupted);
        }
        self.enqueue(due, to, bytes, corrupted);
    }

    fn enqueue(&mut self, due: Instant, to: Side, bytes: Vec<u8>, corrupted: bool) {
        let id = self.next_id;
        self.next_id += 1;
        let p = Pending {
            due,
            id,
            delivery: Delivery {
                to,
                due,
                bytes,
                corrupted,
            },
        };
        if self.queue.back().is_none_or(|last| last.due <= due) {
            self.queue.push_back(p);
        } else {
            self.overtaking.push(p);
        }
    }

    /// Whether the earliest packet is in `overtaking` rather than at the front of `queue`.
    fn overtaking_first(&self) -> bool {
        match (self.queue.front(), self.overtaking.peek()) {
            (Some(q), Some(o)) => (o.due, o.id) < (q.due, q.id),
            (q, _) => q.is_none(),
        }
    }

    /// When the next packet is due, if any is on its way.
    pub fn next_due(&self) -> Option<Instant> {
        let next = if self.overtaking_first() {
            self.overtaking.peek()
        } else {
            self.queue.front()
        };
        next.map(|p| p.due)
    }

    /// Packets on their way.
    pub fn in_flight(&self) -> usize {
        self.queue.len() + self.overtaking.len()
    }

    /// The next packet due at or before `now`: the earliest first, those due at the same
    /// time in the order they were queued.
    pub fn poll_delivery(&mut self, now: Instant) -> Option<Delivery> {
        if self.next_due()? > now {
            return None;
        }
        let next = if self.overtaking_first() {
            self.overtaking.pop()
        } else {
            self.queue.pop_front()
        };
        let d = next?.delivery;
        self.stats.delivered += 1;
        if d.corrupted {
            self.stats.corrupted_delivered += 1;
        }
        Some(d)
    }
}

/// Recomputes the TCP checksum of an IPv4 or IPv6 packet whose segment a rewrite hook
/// changed, so that only a check above TCP (an MPA CRC, say) can notice the change.
pub fn refresh_tcp_checksum(packet: &mut [u8]) -> Result<(), PacketError> {
    let ip = crate::ip::parse_ip(packet, &ChecksumCapabilities::ignored())?;
    if ip.next != IpProtocol::Tcp {
        return Err(PacketError::NotTcp(ip.next.into()));
    }
    let (src, dst) = (IpAddress::from(ip.src), IpAddress::from(ip.dst));
    let (at, len) = (ip.offset, ip.payload.len());
    let mut tcp =
        TcpPacket::new_checked(&mut packet[at..at + len]).map_err(|_| PacketError::BadTcp)?;
    tcp.fill_checksum(&src, &dst);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// A link of 50 µs without rate limit, then `edit`ed.
    fn link(seed: u64, edit: impl FnOnce(&mut LinkConfig)) -> Link {
        let mut cfg = LinkConfig {
            rate_bps: None,
            ..LinkConfig::default()
        };
        edit(&mut cfg);
        Link::new(cfg, seed)
    }

    fn drain(link: &mut Link, now: Instant) -> Vec<Delivery> {
        core::iter::from_fn(|| link.poll_delivery(now)).collect()
    }

    #[test]
    fn delivers_after_delay_in_order_to_the_other_side() {
        let mut link = link(1, |_| {});
        let t0 = Instant::from_millis(1);
        for i in 0..3u8 {
            link.send(t0, Side::A, vec![i]);
        }
        link.send(t0, Side::B, vec![9]);
        assert_eq!(link.next_due(), Some(t0 + Duration::from_micros(50)));
        assert!(drain(&mut link, t0 + Duration::from_micros(49)).is_empty());
        let got = drain(&mut link, t0 + Duration::from_micros(50));
        let seen: Vec<_> = got.iter().map(|d| (d.to, d.bytes[0])).collect();
        assert_eq!(
            seen,
            [(Side::B, 0), (Side::B, 1), (Side::B, 2), (Side::A, 9)]
        );
        assert_eq!(link.next_due(), None);
        assert_eq!(link.stats().delivered, 4);
    }

    #[test]
    fn rate_serializes_each_direction() {
        let mut link = link(1, |c| c.rate_bps = Some(8_000_000)); // one octet per µs
        let t0 = Instant::from_millis(1);
        link.send(t0, Side::A, vec![0; 100]);
        link.send(t0, Side::A, vec![0; 100]);
        link.send(t0, Side::B, vec![0; 10]);
        let dues: Vec<_> = drain(&mut link, Instant::from_millis(1_000))
            .iter()
            .map(|d| (d.to, d.due - t0))
            .collect();
        assert_eq!(
            dues,
            [
                (Side::A, Duration::from_micros(60)),
                (Side::B, Duration::from_micros(150)),
                (Side::B, Duration::from_micros(250)),
            ]
        );
    }

    #[test]
    fn impairments_are_counted_and_seeded() {
        let run = |seed| {
            let mut link = link(seed, |c| {
                (c.loss, c.duplicate, c.reorder, c.corrupt) = (0.1, 0.1, 0.1, 0.1);
            });
            for i in 0..1000u32 {
                link.send(Instant::from_micros(u64::from(i)), Side::A, vec![0; 64]);
            }
            let got = drain(&mut link, Instant::from_millis(1_000));
            (link.stats(), got)
        };
        let (s, got) = run(7);
        assert_eq!(s, run(7).0, "same seed, same draws");
        assert_ne!(s, run(8).0, "another seed, other draws");
        for n in [s.lost, s.duplicated, s.reordered, s.corrupted] {
            assert!((50..150).contains(&n), "{s:?}");
        }
        assert_eq!(s.delivered, s.sent - s.lost + s.duplicated);
        assert_eq!(got.len() as u64, s.delivered);
        let flipped = got.iter().filter(|d| d.bytes != [0; 64]).count() as u64;
        assert_eq!(flipped, s.corrupted_delivered);
        assert!(
            got.iter()
                .all(|d| d.bytes.iter().map(|b| b.count_ones()).sum::<u32>()
                    == u32::from(d.corrupted))
        );
    }

    #[test]
    fn reordered_packets_arrive_behind_later_ones() {
        let mut link = link(5, |c| c.reorder = 0.3);
        for i in 0..100u8 {
            link.send(Instant::from_micros(u64::from(i)), Side::B, vec![i]);
        }
        let order: Vec<u8> = drain(&mut link, Instant::from_millis(1))
            .iter()
            .map(|d| d.bytes[0])
            .collect();
        let behind = order.windows(2).filter(|w| w[0] > w[1]).count();
        assert!(behind > 0 && link.stats().reordered > 0);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<u8>>());
    }

    #[test]
    fn held_back_packet_is_overtaken_in_send_order() {
        let mut link = link(1, |c| c.reorder = 1.0);
        let t0 = Instant::from_millis(1);
        link.send(t0, Side::A, vec![0]);
        link.config_mut().reorder = 0.0;
        for i in 1..4 {
            link.send(t0, Side::A, vec![i]);
        }
        link.send(t0 + Duration::from_micros(100), Side::A, vec![4]);
        let got = drain(&mut link, Instant::from_millis(2));
        let order: Vec<(u8, Duration)> = got.iter().map(|d| (d.bytes[0], d.due - t0)).collect();
        let (normal, held) = (Duration::from_micros(50), Duration::from_micros(150));
        assert_eq!(
            order,
            [(1, normal), (2, normal), (3, normal), (0, held), (4, held)]
        );
        assert_eq!(link.stats().reordered, 1);
    }

    #[test]
    fn certain_loss_drops_everything() {
        let mut link = link(3, |c| c.loss = 1.0);
        link.send(Instant::ZERO, Side::B, vec![1]);
        assert_eq!(link.in_flight(), 0);
        assert_eq!(link.stats().lost, 1);
    }

    #[test]
    fn rewrite_hook_edits_and_drops() {
        let mut link = link(1, |_| {});
        link.set_rewrite(|_, side, p| {
            p.push(0xee);
            side == Side::A
        });
        link.send(Instant::ZERO, Side::A, vec![1]);
        link.send(Instant::ZERO, Side::B, vec![2]);
        let got = drain(&mut link, Instant::from_millis(1));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].bytes, [1, 0xee]);
        assert_eq!(link.stats().dropped, 1);
        link.clear_rewrite();
        link.send(Instant::ZERO, Side::B, vec![2]);
        assert_eq!(drain(&mut link, Instant::from_millis(1))[0].bytes, [2]);
    }

    #[test]
    fn refreshed_checksum_verifies() {
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut p = vec![0u8; 20 + 20 + 4];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&44u16.to_be_bytes());
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&src.octets());
        p[16..20].copy_from_slice(&dst.octets());
        p[32] = 5 << 4;
        p[40..].copy_from_slice(b"data");
        refresh_tcp_checksum(&mut p).unwrap();
        assert!(crate::checksum::tcp_checksum_ok(src, dst, &p[20..]));
        p[41] ^= 1;
        assert!(!crate::checksum::tcp_checksum_ok(src, dst, &p[20..]));
        refresh_tcp_checksum(&mut p).unwrap();
        assert!(crate::checksum::tcp_checksum_ok(src, dst, &p[20..]));
        p[9] = 17;
        assert_eq!(refresh_tcp_checksum(&mut p), Err(PacketError::NotTcp(17)));
        assert_eq!(
            refresh_tcp_checksum(&mut [0; 10]),
            Err(PacketError::BadIpv4)
        );
    }

    // The same over IPv6 (the pseudo-header of RFC 8200 §8.1), trailing octets ignored.
    #[test]
    fn refreshed_checksum_verifies_over_ipv6() {
        let (src, dst) = (
            std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
        );
        let mut p = vec![0u8; 40 + 20 + 4 + 2];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&24u16.to_be_bytes());
        p[6] = 6;
        p[7] = 64;
        p[8..24].copy_from_slice(&src.octets());
        p[24..40].copy_from_slice(&dst.octets());
        p[52] = 5 << 4;
        p[60..64].copy_from_slice(b"data");
        refresh_tcp_checksum(&mut p).unwrap();
        assert!(crate::checksum::tcp_checksum_ok(src, dst, &p[40..64]));
        p[61] ^= 1;
        refresh_tcp_checksum(&mut p).unwrap();
        assert!(crate::checksum::tcp_checksum_ok(src, dst, &p[40..64]));
        p[6] = 0;
        assert_eq!(refresh_tcp_checksum(&mut p), Err(PacketError::NotTcp(0)));
        assert_eq!(
            refresh_tcp_checksum(&mut p[..30]),
            Err(PacketError::BadIpv6)
        );
    }
}
