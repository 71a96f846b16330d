//! IPv6 neighbour discovery (RFC 4861) for one port, beside ARP: answers solicitations for
//! the port's addresses, learns neighbours from solicitations and from the advertisements
//! it asked for, builds solicitations for addresses the port needs to reach, and runs
//! duplicate address detection (RFC 4862 §5.4) for the port's own addresses.
//!
//! The port's addresses are its configured one and the link-local address formed from its
//! MAC (RFC 4291 §2.5.6, modified EUI-64). Detection is optimistic (RFC 4429): an address is
//! used while its probe is out, and dropped from use if another node claims it. A frame
//! never changes the cache unless it answers a solicitation or comes from a neighbour we
//! know: an advertisement nobody asked for is counted and dropped.

use std::net::Ipv6Addr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, Icmpv6Packet, Icmpv6Repr, IpProtocol, NdiscNeighborFlags, NdiscRepr,
    RawHardwareAddress,
};

use crate::clock::Instant;
use crate::frame::{Ends, Vlan};
use crate::neighbour::{NeighbourCache, REQUEST_INTERVAL};

/// Hop limit of every neighbour discovery message; a received one with another is invalid
/// (RFC 4861 §7.1: it may have crossed a router).
pub const ND_HOP_LIMIT: u8 = 255;
/// The all-nodes multicast address (RFC 4291 §2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// Probes sent for each own address before it counts as unique (RFC 4862
/// DupAddrDetectTransmits), one [`REQUEST_INTERVAL`] apart (RetransTimer).
pub const DAD_TRANSMITS: u32 = 1;

/// The solicited-node multicast address of `a` (RFC 4291 §2.7.1): ff02::1:ffXX:XXXX.
pub fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// The Ethernet multicast address of the IPv6 multicast address `a` (RFC 2464 §7).
pub fn multicast_mac(a: Ipv6Addr) -> [u8; 6] {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// True for an Ethernet address of IPv6 multicast (33:33:...).
pub fn is_ipv6_multicast_mac(mac: [u8; 6]) -> bool {
    mac[0] == 0x33 && mac[1] == 0x33
}

/// The link-local address of a port with `mac` (RFC 4291 §2.5.6 and Appendix A).
pub fn link_local(mac: [u8; 6]) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o[0] = 0xfe;
    o[1] = 0x80;
    o[8] = mac[0] ^ 0x02;
    o[9] = mac[1];
    o[10] = mac[2];
    o[11] = 0xff;
    o[12] = 0xfe;
    o[13] = mac[3];
    o[14] = mac[4];
    o[15] = mac[5];
    Ipv6Addr::from(o)
}

/// True for a link-local unicast address (fe80::/10).
pub fn is_link_local(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// Where duplicate address detection of one address stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DadState {
    /// Probes go out; the address is used meanwhile (optimistic, RFC 4429).
    Tentative {
        /// Probes sent so far.
        sent: u32,
        /// When the last one went out.
        last: Option<Instant>,
    },
    /// No other node claimed it.
    Preferred,
    /// Another node uses it: the port no longer answers for it nor sends from it.
    Duplicate,
}

/// One of the port's own IPv6 addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnAddr {
    /// The address.
    pub addr: Ipv6Addr,
    /// Its detection state.
    pub dad: DadState,
}

/// The port's IPv6 addresses: the link-local one first, then the configured one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnAddrs {
    addrs: Vec<OwnAddr>,
}

impl OwnAddrs {
    /// The link-local address of `mac` and `configured`, both tentative.
    pub fn new(mac: [u8; 6], configured: Ipv6Addr) -> OwnAddrs {
        let mut addrs = vec![OwnAddr {
            addr: link_local(mac),
            dad: DadState::Tentative {
                sent: 0,
                last: None,
            },
        }];
        if configured != addrs[0].addr {
            addrs.push(OwnAddr {
                addr: configured,
                dad: DadState::Tentative {
                    sent: 0,
                    last: None,
                },
            });
        }
        OwnAddrs { addrs }
    }

    /// Every address with its state.
    pub fn all(&self) -> &[OwnAddr] {
        &self.addrs
    }

    /// The addresses in use (not found duplicate).
    pub fn usable(&self) -> impl Iterator<Item = Ipv6Addr> + '_ {
        self.addrs
            .iter()
            .filter(|a| a.dad != DadState::Duplicate)
            .map(|a| a.addr)
    }

    /// True when `a` is one of ours and in use.
    pub fn is_ours(&self, a: Ipv6Addr) -> bool {
        self.usable().any(|o| o == a)
    }

    fn state(&self, a: Ipv6Addr) -> Option<DadState> {
        self.addrs.iter().find(|o| o.addr == a).map(|o| o.dad)
    }

    /// The source address for a packet to `dst`: the link-local address toward link-local
    /// destinations, the configured one otherwise (RFC 6724 scope rule), skipping duplicates.
    pub fn source_for(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        let want_ll = is_link_local(dst);
        self.usable()
            .find(|&a| is_link_local(a) == want_ll)
            .or_else(|| self.usable().next())
    }

    /// True while some address still waits for its probe's time to pass.
    pub fn detecting(&self) -> bool {
        self.addrs
            .iter()
            .any(|a| matches!(a.dad, DadState::Tentative { .. }))
    }

    /// Advances detection at `now`: returns the addresses to probe now (each
    /// [`DAD_TRANSMITS`] times, [`REQUEST_INTERVAL`] apart); those whose last probe is an
    /// interval old become preferred.
    pub fn poll_dad(&mut self, now: Instant) -> Vec<Ipv6Addr> {
        let mut probe = Vec::new();
        for a in &mut self.addrs {
            if let DadState::Tentative { sent, last } = a.dad {
                let due = last.is_none_or(|t| now.saturating_since(t) >= REQUEST_INTERVAL);
                if !due {
                    continue;
                }
                if sent >= DAD_TRANSMITS {
                    a.dad = DadState::Preferred;
                } else {
                    a.dad = DadState::Tentative {
                        sent: sent + 1,
                        last: Some(now),
                    };
                    probe.push(a.addr);
                }
            }
        }
        probe
    }

    /// Marks `a` duplicate; true when it was one of ours still in use.
    fn conflict(&mut self, a: Ipv6Addr) -> bool {
        match self.addrs.iter_mut().find(|o| o.addr == a) {
            Some(o) if o.dad != DadState::Duplicate => {
                o.dad = DadState::Duplicate;
                true
            }
            _ => false,
        }
    }
}

/// What to do about a received neighbour discovery message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NdOutcome {
    /// A solicitation for one of our addresses: send this advertisement (see
    /// [`advertisement`]).
    Advertise {
        /// Where it goes: the solicitor, or all nodes for a probe's answer.
        to: Ipv6Addr,
        /// The solicitor's MAC (for all nodes: their multicast MAC).
        to_mac: [u8; 6],
        /// The address advertised (ours).
        target: Ipv6Addr,
        /// Solicited (S) flag: set when answering a unicast-sourced solicitation.
        solicited: bool,
    },
    /// It told us a neighbour's MAC (an advertisement we asked for, or a solicitor's).
    Learned,
    /// Another node uses one of our addresses (RFC 4862 §5.4.3, §5.4.4): it is no longer
    /// used.
    Duplicate(Ipv6Addr),
    /// An advertisement for an address nobody asked for and no neighbour we know: dropped.
    Unsolicited,
    /// Nothing to do (another node's business, router messages).
    Ignored,
    /// Not valid neighbour discovery (hop limit, code, checksum, options, addresses).
    Malformed,
}

/// The IPv6 neighbour cache ([`NeighbourCache`] of IPv6 addresses).
pub type NdCache = NeighbourCache<Ipv6Addr>;

fn ethernet_lladdr(l: Option<RawHardwareAddress>) -> Result<Option<[u8; 6]>, ()> {
    match l {
        None => Ok(None),
        Some(l) if l.len() == 6 => {
            let mut mac = [0u8; 6];
            mac.copy_from_slice(l.as_bytes());
            if EthernetAddress(mac).is_unicast() {
                Ok(Some(mac))
            } else {
                Err(())
            }
        }
        Some(_) => Err(()),
    }
}

impl NeighbourCache<Ipv6Addr> {
    /// Handles the ICMPv6 message `icmp` (a neighbour solicitation or advertisement, or
    /// another neighbour discovery message) from `src` to `dst` received with `hop_limit`
    /// on a port with addresses `own`. Validates as RFC 4861 §7.1.1 / §7.1.2 ask.
    pub fn handle_nd(
        &mut self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop_limit: u8,
        icmp: &[u8],
        own: &mut OwnAddrs,
        now: Instant,
    ) -> NdOutcome {
        if hop_limit != ND_HOP_LIMIT {
            return NdOutcome::Malformed;
        }
        let Ok(pkt) = Icmpv6Packet::new_checked(icmp) else {
            return NdOutcome::Malformed;
        };
        let caps = ChecksumCapabilities::default();
        let Ok(Icmpv6Repr::Ndisc(repr)) = Icmpv6Repr::parse(&src, &dst, &pkt, &caps) else {
            return NdOutcome::Malformed;
        };
        match repr {
            NdiscRepr::NeighborSolicit {
                target_addr,
                lladdr,
            } => {
                let Ok(mac) = ethernet_lladdr(lladdr) else {
                    return NdOutcome::Malformed;
                };
                self.solicitation(src, dst, target_addr, mac, own, now)
            }
            NdiscRepr::NeighborAdvert {
                flags,
                target_addr,
                lladdr,
            } => {
                let Ok(mac) = ethernet_lladdr(lladdr) else {
                    return NdOutcome::Malformed;
                };
                // RFC 4861 §7.1.2: a reply to a multicast solicitation has S clear.
                if target_addr.is_multicast()
                    || (dst.is_multicast() && flags.contains(NdiscNeighborFlags::SOLICITED))
                {
                    return NdOutcome::Malformed;
                }
                self.advertisement(target_addr, mac, own, now)
            }
            _ => NdOutcome::Ignored,
        }
    }

    fn solicitation(
        &mut self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        target: Ipv6Addr,
        mac: Option<[u8; 6]>,
        own: &mut OwnAddrs,
        now: Instant,
    ) -> NdOutcome {
        let probe = src.is_unspecified();
        // RFC 4861 §7.1.1: a probe goes to the solicited-node group and carries no address.
        if target.is_multicast() || (probe && (dst != solicited_node(target) || mac.is_some())) {
            return NdOutcome::Malformed;
        }
        let state = own.state(target);
        match state {
            None | Some(DadState::Duplicate) => return NdOutcome::Ignored,
            // RFC 4862 §5.4.3: another node probes for our tentative address.
            Some(DadState::Tentative { .. }) if probe => {
                own.conflict(target);
                return NdOutcome::Duplicate(target);
            }
            _ => {}
        }
        if probe {
            // RFC 4861 §7.2.4: answer a probe for an address in use to all nodes.
            return NdOutcome::Advertise {
                to: ALL_NODES,
                to_mac: multicast_mac(ALL_NODES),
                target,
                solicited: false,
            };
        }
        let to_mac = match mac {
            Some(m) => {
                self.insert(src, m, now);
                m
            }
            // Without the solicitor's address only a known neighbour can be answered.
            None => match self.lookup(src, now) {
                Some(m) => m,
                None => return NdOutcome::Ignored,
            },
        };
        NdOutcome::Advertise {
            to: src,
            to_mac,
            target,
            solicited: true,
        }
    }

    fn advertisement(
        &mut self,
        target: Ipv6Addr,
        mac: Option<[u8; 6]>,
        own: &mut OwnAddrs,
        now: Instant,
    ) -> NdOutcome {
        if own.conflict(target) {
            return NdOutcome::Duplicate(target);
        }
        if own.state(target).is_some() {
            return NdOutcome::Ignored;
        }
        if !(self.asked(target, now) || self.knows(target)) {
            return NdOutcome::Unsolicited;
        }
        match mac {
            Some(m) => {
                self.insert(target, m, now);
                NdOutcome::Learned
            }
            None => NdOutcome::Ignored,
        }
    }
}

/// A neighbour discovery message ready to be written: its frame's ends and the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NdMessage {
    /// Addresses (MAC and IPv6) and tag of the frame.
    pub ends: Ends,
    /// The message.
    pub repr: NdiscRepr<'static>,
}

impl NdMessage {
    /// Length of the whole frame.
    pub fn frame_len(&self) -> usize {
        self.ends.frame_len(self.repr.buffer_len())
    }

    /// Writes the frame into `buf` (exactly [`NdMessage::frame_len`] bytes); false when
    /// `buf` has another length.
    pub fn emit(&self, buf: &mut [u8]) -> bool {
        if buf.len() != self.frame_len() {
            return false;
        }
        let icmp = Icmpv6Repr::Ndisc(self.repr);
        let (src, dst) = match (self.ends.src_ip, self.ends.dst_ip) {
            (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => (s, d),
            _ => return false,
        };
        let body = self.ends.emit_headers_with_hop_limit(
            buf,
            IpProtocol::Icmpv6,
            icmp.buffer_len(),
            ND_HOP_LIMIT,
        );
        icmp.emit(
            &src,
            &dst,
            &mut Icmpv6Packet::new_unchecked(body),
            &ChecksumCapabilities::default(),
        );
        true
    }
}

/// A solicitation from `our_mac` for `target`: to its solicited-node group, from `src`
/// (with our MAC in the source link-layer option), or from the unspecified address without
/// it for a duplicate address detection probe (`src` `None`).
pub fn solicitation(
    our_mac: [u8; 6],
    src: Option<Ipv6Addr>,
    target: Ipv6Addr,
    tag: Option<Vlan>,
) -> NdMessage {
    let group = solicited_node(target);
    NdMessage {
        ends: Ends {
            src_mac: our_mac,
            dst_mac: multicast_mac(group),
            src_ip: src.unwrap_or(Ipv6Addr::UNSPECIFIED).into(),
            dst_ip: group.into(),
            vlan: tag,
        },
        repr: NdiscRepr::NeighborSolicit {
            target_addr: target,
            lladdr: src.map(|_| EthernetAddress(our_mac).into()),
        },
    }
}

/// The advertisement an [`NdOutcome::Advertise`] asks for, from `our_mac`: override set,
/// our MAC in the target link-layer option, sent from the target address itself.
pub fn advertisement(
    our_mac: [u8; 6],
    to: Ipv6Addr,
    to_mac: [u8; 6],
    target: Ipv6Addr,
    solicited: bool,
    tag: Option<Vlan>,
) -> NdMessage {
    let mut flags = NdiscNeighborFlags::OVERRIDE;
    if solicited {
        flags |= NdiscNeighborFlags::SOLICITED;
    }
    NdMessage {
        ends: Ends {
            src_mac: our_mac,
            dst_mac: to_mac,
            src_ip: target.into(),
            dst_ip: to.into(),
            vlan: tag,
        },
        repr: NdiscRepr::NeighborAdvert {
            flags,
            target_addr: target,
            lladdr: Some(EthernetAddress(our_mac).into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;
    use crate::frame::{parse_l2, ETH_HLEN};
    use smoltcp::wire::{EthernetProtocol, Ipv6Packet};

    const OUR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const OURS: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 1);
    const PEER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 2);

    fn frame(m: &NdMessage) -> Vec<u8> {
        let mut b = vec![0u8; m.frame_len()];
        assert!(m.emit(&mut b));
        b
    }

    /// (src, dst, hop limit, ICMPv6 bytes) of an Ethernet/IPv6 frame.
    fn icmp_of(f: &[u8]) -> (Ipv6Addr, Ipv6Addr, u8, Vec<u8>) {
        let l2 = parse_l2(f, None).unwrap();
        assert_eq!(l2.ethertype, EthernetProtocol::Ipv6);
        let ip = Ipv6Packet::new_checked(&f[l2.l3_offset..]).unwrap();
        (
            ip.src_addr(),
            ip.dst_addr(),
            ip.hop_limit(),
            ip.payload().to_vec(),
        )
    }

    fn handle(c: &mut NdCache, own: &mut OwnAddrs, m: &NdMessage, now: Instant) -> NdOutcome {
        let (s, d, h, icmp) = icmp_of(&frame(m));
        c.handle_nd(s, d, h, &icmp, own, now)
    }

    fn preferred() -> OwnAddrs {
        let mut own = OwnAddrs::new(OUR_MAC, OURS);
        let t0 = clock::now();
        assert_eq!(own.poll_dad(t0).len(), 2);
        assert!(own.poll_dad(t0 + REQUEST_INTERVAL).is_empty());
        assert!(!own.detecting());
        own
    }

    // RFC 4291 §2.5.6 / Appendix A and §2.7.1, RFC 2464 §7.
    #[test]
    fn derived_addresses() {
        assert_eq!(
            link_local([0x52, 0x54, 0, 0x12, 0x34, 0x56]),
            "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            solicited_node("fd00:99::1:2345:6789".parse().unwrap()),
            "ff02::1:ff45:6789".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            multicast_mac("ff02::1:ff45:6789".parse().unwrap()),
            [0x33, 0x33, 0xff, 0x45, 0x67, 0x89]
        );
        assert!(is_link_local(link_local(OUR_MAC)) && !is_link_local(OURS));
        let own = OwnAddrs::new(OUR_MAC, OURS);
        assert_eq!(own.source_for(PEER), Some(OURS));
        assert_eq!(
            own.source_for(link_local(PEER_MAC)),
            Some(link_local(OUR_MAC))
        );
    }

    // RFC 4861 §7.2.3/§7.2.4: a solicitation for our address (with the solicitor's MAC) is
    // answered with a solicited, override advertisement to the solicitor carrying our MAC,
    // and the solicitor is learned.
    #[test]
    fn solicitation_for_us_is_answered_and_teaches_the_solicitor() {
        let now = clock::now();
        let mut own = preferred();
        let mut c = NdCache::new();
        let ns = solicitation(PEER_MAC, Some(PEER), OURS, None);
        let f = frame(&ns);
        assert_eq!(&f[0..6], &[0x33, 0x33, 0xff, 0, 0, 1]);
        let (_, d, h, _) = icmp_of(&f);
        assert_eq!((d, h), (solicited_node(OURS), 255));
        let out = handle(&mut c, &mut own, &ns, now);
        assert_eq!(
            out,
            NdOutcome::Advertise {
                to: PEER,
                to_mac: PEER_MAC,
                target: OURS,
                solicited: true
            }
        );
        assert_eq!(c.lookup(PEER, now), Some(PEER_MAC));
        let na = advertisement(OUR_MAC, PEER, PEER_MAC, OURS, true, None);
        let f = frame(&na);
        assert_eq!(&f[0..12], &[PEER_MAC, OUR_MAC].concat()[..]);
        let (s, d, h, icmp) = icmp_of(&f);
        assert_eq!((s, d, h), (OURS, PEER, 255));
        let pkt = Icmpv6Packet::new_checked(&icmp[..]).unwrap();
        assert!(pkt.verify_checksum(&s, &d));
        let Ok(Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags,
            target_addr,
            lladdr,
        })) = Icmpv6Repr::parse(&s, &d, &pkt, &ChecksumCapabilities::default())
        else {
            panic!("not an advertisement")
        };
        assert_eq!(target_addr, OURS);
        assert!(flags.contains(NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE));
        assert!(!flags.contains(NdiscNeighborFlags::ROUTER));
        assert_eq!(lladdr.unwrap().as_bytes(), &OUR_MAC);
        // A solicitation for someone else is not ours to answer and teaches nothing.
        let mut c = NdCache::new();
        let other = solicitation(PEER_MAC, Some(PEER), "fd00:99::9".parse().unwrap(), None);
        assert_eq!(handle(&mut c, &mut own, &other, now), NdOutcome::Ignored);
        assert!(c.is_empty());
    }

    // RFC 4861 §7.2.5: an advertisement answering our solicitation is learned; one for an
    // address nobody asked for is dropped and changes nothing.
    #[test]
    fn advertisements_are_learned_only_when_asked_for() {
        let now = clock::now();
        let mut own = preferred();
        let mut c = NdCache::new();
        let na = advertisement(PEER_MAC, OURS, OUR_MAC, PEER, true, None);
        assert_eq!(handle(&mut c, &mut own, &na, now), NdOutcome::Unsolicited);
        assert!(c.is_empty());
        assert!(c.should_request(PEER, now));
        assert_eq!(handle(&mut c, &mut own, &na, now), NdOutcome::Learned);
        assert_eq!(c.lookup(PEER, now), Some(PEER_MAC));
        // A known neighbour's later advertisement (a new MAC) is taken.
        let moved = [2, 0, 0, 0, 0, 3];
        let na = advertisement(
            moved,
            ALL_NODES,
            multicast_mac(ALL_NODES),
            PEER,
            false,
            None,
        );
        assert_eq!(handle(&mut c, &mut own, &na, now), NdOutcome::Learned);
        assert_eq!(c.lookup(PEER, now), Some(moved));
    }

    // RFC 4862 §5.4: a probe (from ::, to the solicited-node group, no link-layer option)
    // goes out for each own address; a probe or advertisement from another node for a
    // tentative address makes it duplicate; after an interval without one it is preferred.
    #[test]
    fn duplicate_address_detection() {
        let t0 = clock::now();
        let mut own = OwnAddrs::new(OUR_MAC, OURS);
        let probes = own.poll_dad(t0);
        assert_eq!(probes, [link_local(OUR_MAC), OURS]);
        assert!(own.poll_dad(t0).is_empty(), "one probe per interval");
        let probe = solicitation(OUR_MAC, None, OURS, None);
        let (s, d, _, icmp) = icmp_of(&frame(&probe));
        assert_eq!((s, d), (Ipv6Addr::UNSPECIFIED, solicited_node(OURS)));
        assert_eq!(icmp.len(), 24, "no source link-layer option");
        // Another node probes for our configured address at the same time.
        let mut c = NdCache::new();
        let theirs = solicitation(PEER_MAC, None, OURS, None);
        assert_eq!(
            handle(&mut c, &mut own, &theirs, t0),
            NdOutcome::Duplicate(OURS)
        );
        assert!(!own.is_ours(OURS));
        assert_eq!(own.source_for(PEER), Some(link_local(OUR_MAC)));
        // No longer answered for.
        let ns = solicitation(PEER_MAC, Some(PEER), OURS, None);
        assert_eq!(handle(&mut c, &mut own, &ns, t0), NdOutcome::Ignored);
        own.poll_dad(t0 + REQUEST_INTERVAL);
        assert_eq!(own.all()[0].dad, DadState::Preferred);
        assert_eq!(own.all()[1].dad, DadState::Duplicate);
        // A probe for a preferred address is answered to all nodes (RFC 4861 §7.2.4).
        let ll = link_local(OUR_MAC);
        let theirs = solicitation(PEER_MAC, None, ll, None);
        assert_eq!(
            handle(&mut c, &mut own, &theirs, t0),
            NdOutcome::Advertise {
                to: ALL_NODES,
                to_mac: [0x33, 0x33, 0, 0, 0, 1],
                target: ll,
                solicited: false
            }
        );
        // An advertisement claiming our address is a conflict too (RFC 4862 §5.4.4).
        let mut own = OwnAddrs::new(OUR_MAC, OURS);
        let na = advertisement(
            PEER_MAC,
            ALL_NODES,
            [0x33, 0x33, 0, 0, 0, 1],
            OURS,
            false,
            None,
        );
        assert_eq!(
            handle(&mut c, &mut own, &na, t0),
            NdOutcome::Duplicate(OURS)
        );
    }

    // RFC 4861 §7.1: hop limit other than 255, a bad checksum, a multicast target, a probe
    // with a link-layer option or not to the solicited-node group: all invalid.
    #[test]
    fn invalid_messages_are_malformed() {
        let now = clock::now();
        let mut own = preferred();
        let mut c = NdCache::new();
        let ns = solicitation(PEER_MAC, Some(PEER), OURS, None);
        let (s, d, _, icmp) = icmp_of(&frame(&ns));
        assert_eq!(
            c.handle_nd(s, d, 64, &icmp, &mut own, now),
            NdOutcome::Malformed
        );
        let mut bad = icmp.clone();
        bad[10] ^= 1;
        assert_eq!(
            c.handle_nd(s, d, 255, &bad, &mut own, now),
            NdOutcome::Malformed
        );
        assert_eq!(
            c.handle_nd(s, d, 255, &icmp[..10], &mut own, now),
            NdOutcome::Malformed
        );
        let m = solicitation(PEER_MAC, Some(PEER), ALL_NODES, None);
        assert_eq!(handle(&mut c, &mut own, &m, now), NdOutcome::Malformed);
        let mut probe = solicitation(PEER_MAC, None, OURS, None);
        probe.ends.dst_ip = ALL_NODES.into();
        assert_eq!(handle(&mut c, &mut own, &probe, now), NdOutcome::Malformed);
        assert!(c.is_empty());
        // Router solicitations and the like are not ours to handle.
        let rs = NdMessage {
            repr: NdiscRepr::RouterSolicit { lladdr: None },
            ..ns
        };
        assert_eq!(handle(&mut c, &mut own, &rs, now), NdOutcome::Ignored);
    }

    #[test]
    fn tagged_solicitation() {
        let v = Vlan {
            id: 100,
            priority: 0,
        };
        let f = frame(&solicitation(OUR_MAC, Some(OURS), PEER, Some(v)));
        assert_eq!(f.len(), ETH_HLEN + 4 + 40 + 32);
        assert_eq!(parse_l2(&f, None).unwrap().vlan_id(), Some(100));
    }
}
