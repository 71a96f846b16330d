//! The poll loop of one lcore: run to completion over its ports.
//!
//! Each iteration, for every port: receive a burst, classify each frame, answer ARP,
//! neighbour discovery and ping (IPv4 and IPv6), hand TCP/UDP to the [`Handler`], let the
//! handler emit (timers, queued data), and transmit the burst of replies. Counters are kept
//! per port and per stage; the loop stops when a shared flag is set or a deadline passes.
//!
//! A port on a VLAN sends every frame 802.1Q-tagged (the tag written by the loop, or by the
//! device when it offers the insert offload) and takes only its VLAN's frames; a port with
//! an IPv6 address also uses its link-local address, checks both for duplicates when it
//! starts (RFC 4862, optimistic) and resolves IPv6 next hops by neighbour discovery.
//!
//! Plugging in an engine (e.g. `tcp::Engine`): implement [`Handler`] for it. In
//! [`Handler::handle`], pass the segment on with the addresses the classifier found:
//! `engine.handle_tcp(now, meta.src_ip, meta.dst_ip, meta.l4(frame.as_ref()))`, then drop
//! the frame (or keep it while the payload is placed). In [`Handler::poll`], drain the
//! engine's output with [`PortContext::send_ip`], which adds the Ethernet header (and VLAN
//! tag) for the next hop, resolved by ARP or neighbour discovery: `while ctx.send_ip(|b|
//! engine.poll_transmit(t, b).map(|x| (x.dst, x.len))).is_some() {}`; timers are driven
//! from `poll` as well.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tcp::Lent;

use smoltcp::wire::EthernetProtocol;

use crate::clock::{self, Instant};

use crate::arp::{self, ArpCache, ArpOutcome};
use crate::classify::{Classified, Classifier, FrameClass, Malformed};
use crate::config::{Ipv4Cidr, Ipv6Cidr, PortConfig};
use crate::frame::{l2_len, write_l2, Vlan, ETH_HLEN, MAX_L2_HLEN};
use crate::icmp;
use crate::ndp::{self, NdCache, NdOutcome, OwnAddrs};
use crate::neighbour::{NeighbourNews, NeighbourShare, REQUEST_INTERVAL};
use crate::port::{PacketBuf, Port, PortInfo};
use crate::telemetry::{self, Dict, Snapshot};
use crate::tso::{InPlaceTso, MAX_PACKET_HEADERS};

/// A port's layer-2 and layer-3 identity in the poll loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortAddr {
    /// Own address and subnet; ARP and ping are answered for the address.
    pub ipv4: Option<Ipv4Cidr>,
    /// Next hop for destinations outside the subnet.
    pub gateway: Option<Ipv4Addr>,
    /// Own IPv6 address and prefix; neighbour solicitations and ping are answered for it
    /// and for the port's link-local address.
    pub ipv6: Option<Ipv6Cidr>,
    /// IPv6 next hop for destinations outside the prefix.
    pub gateway6: Option<Ipv6Addr>,
    /// The port's 802.1Q VLAN and the priority of its tags.
    pub vlan: Option<Vlan>,
    /// Accept frames for any destination MAC.
    pub promiscuous: bool,
}

impl PortAddr {
    /// A port's layer-3 identity as its configuration gives it.
    pub fn of(pc: &PortConfig) -> PortAddr {
        PortAddr {
            ipv4: pc.ipv4,
            gateway: pc.gateway.as_ref().map(|g| *g.get_ref()),
            ipv6: pc.ipv6,
            gateway6: pc.gateway6.as_ref().map(|g| *g.get_ref()),
            vlan: pc.vlan_tag(),
            promiscuous: pc.promiscuous,
        }
    }

    /// An address on its subnet, without a gateway (tests and point-to-point links).
    pub fn on_subnet(ipv4: Ipv4Cidr) -> PortAddr {
        PortAddr {
            ipv4: Some(ipv4),
            ..PortAddr::default()
        }
    }

    /// An IPv6 address on its prefix, without a gateway.
    pub fn on_prefix(ipv6: Ipv6Cidr) -> PortAddr {
        PortAddr {
            ipv6: Some(ipv6),
            ..PortAddr::default()
        }
    }

    /// The port's own address of `dst`'s family, to send to `dst` from: the IPv4 address,
    /// or the configured IPv6 one.
    pub fn source_for(&self, dst: IpAddr) -> Option<IpAddr> {
        match dst {
            IpAddr::V4(_) => self.ipv4.map(|c| IpAddr::V4(c.addr)),
            IpAddr::V6(_) => self.ipv6.map(|c| IpAddr::V6(c.addr)),
        }
    }

    /// The port's main address: its IPv4 address, else its IPv6 one.
    pub fn primary(&self) -> Option<IpAddr> {
        self.ipv4
            .map(|c| IpAddr::V4(c.addr))
            .or(self.ipv6.map(|c| IpAddr::V6(c.addr)))
    }
}

/// What became of a packet offered with [`PortContext::send_ip`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// Queued for transmission.
    Sent,
    /// The next hop's MAC is unknown: an ARP request (IPv4) or a neighbour solicitation
    /// (IPv6) went out and the packet is held until the answer arrives (one packet per
    /// port; a newer one replaces it). While one is held, the loop repeats the request once
    /// per interval, [`ARP_ATTEMPTS`] requests in all; then the packet is dropped and
    /// counted in [`LoopCounters::arp_failures`] or [`LoopCounters::nd_failures`].
    Unresolved,
    /// No route: the destination is off-link and no gateway is configured, or the port has
    /// no address of the destination's family.
    NoRoute,
}

/// ARP requests (or neighbour solicitations) sent for a held packet before it is dropped:
/// resolution gives up `ARP_ATTEMPTS` × [`REQUEST_INTERVAL`] after the first request
/// (Linux's default of three multicast solicitations a second apart).
pub const ARP_ATTEMPTS: u32 = 3;

/// Most frames kept per port when the port's transmit ring is full (a peer that stopped
/// consuming: a memif peer descheduled, say); beyond it new frames are dropped. Handlers see
/// the backlog through [`PortContext::tx_pending`] and stop producing well before.
pub const MAX_TX_BACKLOG: usize = 4096;

/// One busy iteration in this many times its stages (the clock read costs about as much as
/// a small frame's handling).
pub const TIMING_SAMPLE: u64 = 8;

/// Number of frame classes counted.
pub const CLASS_COUNT: usize = FrameClass::ALL.len();

/// Per-port counters of the poll loop (the port's own counters are in `Port::stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopCounters {
    /// Frames received from the port.
    pub rx: u64,
    /// Frames per class, indexed by [`FrameClass::index`].
    pub classified: [u64; CLASS_COUNT],
    /// ARP replies sent.
    pub arp_replies: u64,
    /// ARP requests sent (address resolution for the handler).
    pub arp_requests: u64,
    /// ICMP echo replies sent.
    pub echo_replies: u64,
    /// Frames the handler consumed.
    pub handled: u64,
    /// Frames nobody wanted (no handler for the protocol, ICMP other than echo request).
    pub unhandled: u64,
    /// Frames queued for transmission.
    pub tx: u64,
    /// Frames dropped by the loop because the port kept refusing them and the backlog was
    /// full ([`MAX_TX_BACKLOG`]).
    pub tx_dropped: u64,
    /// Frames the port refused (ring full) that were kept and offered again on the next
    /// iteration, counted at each refusal.
    pub tx_deferred: u64,
    /// Replies not sent because no transmit buffer could be allocated.
    pub alloc_failures: u64,
    /// Packets `send_ip` could not send at once for want of a neighbour's MAC (held) or
    /// of a route (dropped).
    pub unresolved: u64,
    /// Held packets dropped because their IPv4 next hop did not answer [`ARP_ATTEMPTS`]
    /// requests.
    pub arp_failures: u64,
    /// Neighbour solicitations sent (address resolution and duplicate address detection).
    pub nd_solicits: u64,
    /// Neighbour advertisements sent.
    pub nd_adverts: u64,
    /// Neighbour advertisements for addresses nobody asked for, dropped.
    pub nd_unsolicited: u64,
    /// Invalid neighbour discovery messages (hop limit, checksum, options), dropped.
    pub nd_invalid: u64,
    /// Held packets dropped because their IPv6 next hop did not answer [`ARP_ATTEMPTS`]
    /// solicitations.
    pub nd_failures: u64,
    /// Own IPv6 addresses another node turned out to use (no longer used here).
    pub dad_conflicts: u64,
    /// Iterations that received at least one frame.
    pub busy_polls: u64,
    /// Nanoseconds spent in receive bursts that returned frames. Like `process_ns` and
    /// `tx_ns`, estimated from every [`TIMING_SAMPLE`]th busy iteration (times that
    /// factor), so that most iterations read the clock once.
    pub rx_ns: u64,
    /// Nanoseconds spent classifying and handling frames (estimated, see `rx_ns`).
    pub process_ns: u64,
    /// Nanoseconds spent in transmit bursts (estimated, see `rx_ns`).
    pub tx_ns: u64,
}

impl LoopCounters {
    /// Frames counted as malformed (any layer).
    pub fn malformed(&self) -> u64 {
        FrameClass::ALL
            .iter()
            .filter(|c| matches!(c, FrameClass::Malformed(_)))
            .map(|c| self.classified[c.index()])
            .sum()
    }

    /// Frames of class `c`.
    pub fn class(&self, c: FrameClass) -> u64 {
        self.classified[c.index()]
    }
}

/// What a handler did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// The handler used the frame (it may have queued frames in response).
    Consumed,
    /// The handler does not want the frame; it is dropped and counted as unhandled.
    Ignored,
}

/// How a port's frames start: its MAC, and its VLAN tag, written into each frame or handed
/// to the device that inserts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct L2Out {
    mac: [u8; 6],
    tag: Option<Vlan>,
    /// The device inserts the tag (DPDK's transmit VLAN offload).
    offloaded: bool,
}

impl L2Out {
    /// The tag written into frames by the loop (none when the device inserts it).
    fn in_frame(&self) -> Option<Vlan> {
        self.tag.filter(|_| !self.offloaded)
    }

    /// Length of the layer-2 header the loop writes.
    fn header_len(&self) -> usize {
        l2_len(self.in_frame())
    }

    /// Hands the tag to the device for a frame written with [`L2Out::in_frame`].
    fn finish<B: PacketBuf>(&self, buf: &mut B) {
        if let (Some(v), true) = (self.tag, self.offloaded) {
            buf.set_offloaded_vlan(v.tci());
        }
    }
}

/// A port's neighbours and own IPv6 addresses.
#[derive(Debug, Default)]
struct Neighbours {
    arp: ArpCache,
    nd: NdCache,
    /// The port's IPv6 addresses with their duplicate detection (none: no IPv6).
    own6: Option<OwnAddrs>,
    /// An own address was found duplicate: the classifier must forget it.
    own6_changed: bool,
    /// The other lanes of a multi-queue port, told what this lane learns and asks for.
    share: Option<NeighbourShare>,
}

impl Neighbours {
    /// Takes in what the other lanes learned and asked for.
    #[inline]
    fn take_news(&mut self, now: Instant) {
        if self.share.is_some() {
            self.take_shared_news(now);
        }
    }

    /// [`Neighbours::take_news`] with a share.
    fn take_shared_news(&mut self, now: Instant) {
        let Some(share) = &mut self.share else {
            return;
        };
        while let Some(news) = share.take() {
            match news {
                NeighbourNews::Learned(IpAddr::V4(a), mac) => self.arp.learn_from_lane(a, mac, now),
                NeighbourNews::Learned(IpAddr::V6(a), mac) => self.nd.learn_from_lane(a, mac, now),
                NeighbourNews::Asked(IpAddr::V4(a)) => self.arp.asked_by_lane(a, now),
                NeighbourNews::Asked(IpAddr::V6(a)) => self.nd.asked_by_lane(a, now),
            }
        }
    }

    /// Tells the other lanes what this lane learned and asked for since the last call.
    #[inline]
    fn give_news(&mut self) {
        if self.share.is_some() {
            self.give_shared_news();
        }
    }

    /// [`Neighbours::give_news`] with a share.
    fn give_shared_news(&mut self) {
        let Some(share) = &mut self.share else {
            return;
        };
        let news = |ip: IpAddr, mac: Option<[u8; 6]>| match mac {
            Some(mac) => NeighbourNews::Learned(ip, mac),
            None => NeighbourNews::Asked(ip),
        };
        self.arp
            .drain_news(|ip, mac| share.publish(news(ip.into(), mac)));
        self.nd
            .drain_news(|ip, mac| share.publish(news(ip.into(), mac)));
    }
}

/// What a handler can do on the port a frame came from: allocate and queue frames, and
/// resolve next hops.
pub struct PortContext<'a, P: Port> {
    index: usize,
    port: &'a mut P,
    tx: &'a mut Vec<P::Buf>,
    nb: &'a mut Neighbours,
    addr: &'a PortAddr,
    l2: L2Out,
    spare: &'a mut Option<P::Buf>,
    held: &'a mut Option<Held<P::Buf>>,
    /// Received frames a handler is done with, freed together at the burst's end.
    spent: &'a mut Vec<<P::Buf as PacketBuf>::Spent>,
    counters: &'a mut LoopCounters,
    backlog: usize,
    now: Instant,
    /// The TSO frame being built in place ([`Port::tso_room`]), queued when a packet does
    /// not continue it, before any other frame, and when the context ends.
    tso: Option<(P::Buf, InPlaceTso)>,
    /// The route of the last packet sent to a resolved neighbour, for the packets after
    /// it to the same destination.
    route: Option<Route>,
}

/// A destination's next hop and the layer-2 header of frames to it (the neighbour's MAC
/// filled in), kept by a [`PortContext`] for the packets after the first of a run (a
/// connection's segments): the next hop is looked up and the header written once per
/// context, i.e. per half iteration, with one `now`. A neighbour's MAC learned or changed
/// (ARP, neighbour discovery) in a later half iteration is used from then on; one learned
/// within the context drops the route.
#[derive(Clone, Copy, Debug)]
struct Route {
    dst: IpAddr,
    l2: [u8; MAX_L2_HLEN],
}

impl Route {
    /// Writes the first `len` octets of the layer-2 header into `buf` (a copy of fixed
    /// length for the usual untagged header, not a call).
    #[inline(always)]
    fn write(&self, buf: &mut [u8], len: usize) {
        if len == ETH_HLEN {
            buf[..ETH_HLEN].copy_from_slice(&self.l2[..ETH_HLEN]);
        } else {
            buf[..len].copy_from_slice(&self.l2[..len]);
        }
    }
}

impl<P: Port> Drop for PortContext<'_, P> {
    fn drop(&mut self) {
        self.close_tso();
    }
}

impl<P: Port> PortContext<'_, P> {
    /// Gives back a received frame nothing reads any more ([`PacketBuf::retire`]): where
    /// the backend frees in bulk, the loop frees the burst's frames together once it is
    /// handled ([`PacketBuf::free_all`]).
    #[inline]
    pub fn retire(&mut self, frame: P::Buf) {
        frame.retire(self.spent);
    }

    /// A TCP segment the classifier left unverified ([`Classified::tcp_unverified`]) had a
    /// bad checksum: it counts as the classifier would have counted it.
    pub fn count_bad_tcp_checksum(&mut self) {
        let classified = &mut self.counters.classified;
        let tcp = &mut classified[FrameClass::Tcp.index()];
        *tcp = tcp.saturating_sub(1);
        classified[FrameClass::Malformed(Malformed::TcpChecksum).index()] += 1;
    }

    /// Index of the port in the loop.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Static facts about the port.
    pub fn info(&self) -> &PortInfo {
        self.port.info()
    }

    /// The port's IPv4 address.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.addr.ipv4.map(|c| c.addr)
    }

    /// The port's configured IPv6 address.
    pub fn ipv6(&self) -> Option<Ipv6Addr> {
        self.addr.ipv6.map(|c| c.addr)
    }

    /// The port's addressing.
    pub fn addr(&self) -> PortAddr {
        *self.addr
    }

    /// A packet waits for its next hop's MAC ([`SendOutcome::Unresolved`]); another
    /// unresolved one would replace it.
    pub fn holds_unresolved(&self) -> bool {
        self.held.is_some()
    }

    /// Whether a packet to `dst` would go out at once: its next hop's MAC is known (or it
    /// needs none), or it has no route (it would be dropped, not held).
    pub fn resolves(&self, dst: IpAddr) -> bool {
        match self.next_hop(dst) {
            None => true,
            Some(IpAddr::V4(h)) if h.is_broadcast() => true,
            Some(IpAddr::V6(h)) if h.is_multicast() => true,
            Some(hop) => self.lookup(hop).is_some(),
        }
    }

    /// The 802.1Q tag a frame of this port carries in its bytes (none when the port is on
    /// no VLAN or the device inserts the tag), for handlers that write whole frames; finish
    /// such a frame with [`PortContext::send_tagged`].
    pub fn vlan_tag(&self) -> Option<Vlan> {
        self.l2.in_frame()
    }

    /// The neighbour to send to for `dst`: `dst` itself when on-link, else the gateway of
    /// its family. IPv6 link-local destinations are on-link.
    pub fn next_hop(&self, dst: IpAddr) -> Option<IpAddr> {
        match dst {
            IpAddr::V4(d) => match self.addr.ipv4 {
                Some(net) if net.contains(d) || d.is_broadcast() => Some(dst),
                _ => self.addr.gateway.map(IpAddr::V4),
            },
            IpAddr::V6(d) => {
                let net = self.addr.ipv6?;
                if net.contains(d) || ndp::is_link_local(d) || d.is_multicast() {
                    Some(dst)
                } else {
                    self.addr.gateway6.map(IpAddr::V6)
                }
            }
        }
    }

    /// Sends one IPv4 or IPv6 packet that `write` produces: `write` gets the buffer after
    /// the Ethernet header (and VLAN tag; room for an MTU-sized packet) and returns the
    /// packet's destination and length, or `None` when it has nothing to send. The
    /// Ethernet header is filled in for the next hop (resolved by ARP or neighbour
    /// discovery). Returns `None` when nothing was written or no buffer was available
    /// (counted), else what became of the packet.
    ///
    /// On a port that takes TSO frames built in place ([`Port::tso_room`]), `write` gets
    /// room in such a frame: a TCP segment that continues the one before (same connection
    /// and headers, the next sequence number) joins it ([`InPlaceTso`]).
    ///
    /// Typical use, draining an engine's output:
    /// `while ctx.send_ip(|b| engine.poll_transmit(now, b).map(|t| (t.dst, t.len))).is_some() {}`
    pub fn send_ip(
        &mut self,
        write: impl FnOnce(&mut [u8]) -> Option<(IpAddr, usize)>,
    ) -> Option<SendOutcome> {
        let room = self.port.tso_room();
        if room > 0 {
            return self.send_ip_in_place(room, write);
        }
        self.send_ip_with_payload(&mut Vec::new(), |b| {
            write(b).map(|(dst, len)| (dst, len, None))
        })
    }

    /// [`PortContext::send_ip`] into TSO frames built in place in buffers of `room` octets:
    /// the packet is written where the open frame's payload ends (the octets its headers
    /// cover saved and put back); one that does not continue the frame is copied out, the
    /// frame queued, and the packet sent on its own or as the start of the next frame.
    fn send_ip_in_place(
        &mut self,
        room: usize,
        write: impl FnOnce(&mut [u8]) -> Option<(IpAddr, usize)>,
    ) -> Option<SendOutcome> {
        let (l2, mtu) = (self.l2.header_len(), self.port.info().mtu);
        if self
            .tso
            .as_ref()
            .is_some_and(|(_, t)| !t.takes_more(mtu, room))
        {
            self.close_tso();
        }
        if self.tso.is_none() {
            let Some(mut buf) = self.port.alloc_tso() else {
                return self.send_ip_with_payload(&mut Vec::new(), |b| {
                    write(b).map(|(dst, len)| (dst, len, None))
                });
            };
            let (dst, len) = write(&mut buf.as_mut()[l2..l2 + mtu])?;
            return Some(self.route_in_place(buf, dst, len, room));
        }
        // The open frame stays in place (a move per packet would copy the builder).
        let (buf, tso) = self.tso.as_mut()?;
        let (at, h) = (tso.next_packet(), tso.packet_headers());
        let mut saved = [0u8; MAX_PACKET_HEADERS];
        saved[..h].copy_from_slice(&buf.as_ref()[at..at + h]);
        let written = write(&mut buf.as_mut()[at..at + mtu]);
        let joined = written.is_some_and(|(_, len)| tso.join(buf.as_ref(), len));
        // A packet that does not continue the frame is copied out (into a buffer for the
        // next frame when there is one) before the payload its headers cover is put back.
        let moved = match written {
            Some((dst, len)) if !joined => {
                let copy = match self.port.alloc_tso() {
                    Some(b) => Some(b),
                    None => self.port.alloc_tx(l2 + mtu),
                };
                let copy = copy.map(|mut c| {
                    c.as_mut()[l2..l2 + len].copy_from_slice(&buf.as_ref()[at..at + len]);
                    c
                });
                Some((dst, len, copy))
            }
            _ => None,
        };
        buf.as_mut()[at..at + h].copy_from_slice(&saved[..h]);
        match (written, moved) {
            (None, _) => None,
            (Some(_), None) => {
                self.counters.tx += 1;
                Some(SendOutcome::Sent)
            }
            (Some(_), Some((dst, len, copy))) => {
                self.close_tso();
                let Some(copy) = copy else {
                    self.counters.alloc_failures += 1;
                    return None;
                };
                Some(self.route_in_place(copy, dst, len, room))
            }
        }
    }

    /// Sends the IP packet of `len` octets in `buf` (after the layer-2 header) to `dst`; a
    /// TCP segment with payload in a buffer of `room` octets whose next hop is known opens
    /// a TSO frame built in place.
    fn route_in_place(
        &mut self,
        mut buf: P::Buf,
        dst: IpAddr,
        len: usize,
        room: usize,
    ) -> SendOutcome {
        let Some(hop) = self.next_hop(dst) else {
            self.counters.unresolved += 1;
            return SendOutcome::NoRoute;
        };
        write_l2(
            buf.as_mut(),
            [0; 6],
            self.l2.mac,
            self.l2.in_frame(),
            ethertype_of(dst),
        );
        self.l2.finish(&mut buf);
        if buf.len() >= room {
            if let Some(mac) = self.lookup(hop) {
                buf.as_mut()[0..6].copy_from_slice(&mac);
                if let Some(t) = InPlaceTso::open(buf.as_ref(), buf.offloaded_vlan()) {
                    self.close_tso();
                    self.counters.tx += 1;
                    self.tso = Some((buf, t));
                    return SendOutcome::Sent;
                }
            }
        }
        buf.truncate(self.l2.header_len() + len);
        self.deliver(buf, hop)
    }

    /// Queues the TSO frame built in place, readied for the device. The test is inline
    /// (twice per poll iteration, almost always without a frame); the work is not.
    #[inline]
    fn close_tso(&mut self) {
        if self.tso.is_some() {
            self.queue_tso();
        }
    }

    #[inline(never)]
    fn queue_tso(&mut self) {
        if let Some((mut buf, tso)) = self.tso.take() {
            buf.truncate(tso.len());
            self.port.finish_tso(&mut buf, &tso);
            self.tx.push(buf);
        }
    }

    /// Whether the port sends a payload given to [`PortContext::send_ip_with_payload`]
    /// from its own buffer (attached behind the headers) rather than copied.
    pub fn sends_payloads_in_place(&self) -> bool {
        self.port.sends_payloads_in_place()
    }

    /// Moves the tokens of the payloads this port's frames no longer hold into `out`
    /// ([`Port::take_returned_payloads`]).
    pub fn take_returned_payloads(&mut self, out: &mut Vec<u64>) {
        self.port.take_returned_payloads(out);
    }

    /// [`PortContext::send_ip`] for a `write` that may leave the payload out of the
    /// buffer: it returns the destination, the octets it wrote (the headers, or the whole
    /// packet) and the payload lent to follow them. The port sends that payload from the
    /// lender's buffer where it can ([`Port::attach_payload`]; its token comes back through
    /// [`PortContext::take_returned_payloads`]), else it is copied behind the headers
    /// (`None`, the packet dropped and counted, when it does not fit the buffer) and its
    /// token goes to `unlent` at once.
    pub fn send_ip_with_payload<'p>(
        &mut self,
        unlent: &mut Vec<u64>,
        write: impl FnOnce(&mut [u8]) -> Option<(IpAddr, usize, Option<Lent<'p>>)>,
    ) -> Option<SendOutcome> {
        let l2 = self.l2.header_len();
        let mtu = self.port.info().mtu;
        let mut buf = match self.spare.take() {
            Some(b) => b,
            None => self.alloc(mtu + l2)?,
        };
        let written = buf.as_mut().get_mut(l2..).and_then(write);
        let Some((dst, len, payload)) = written else {
            *self.spare = Some(buf);
            return None;
        };
        let route = self.route.filter(|r| r.dst == dst);
        let hop = match route {
            Some(r) => {
                r.write(buf.as_mut(), l2);
                None
            }
            None => {
                let Some(hop) = self.next_hop(dst) else {
                    self.counters.unresolved += 1;
                    unlent.extend(payload.map(|p| p.token()));
                    return Some(SendOutcome::NoRoute);
                };
                write_l2(
                    buf.as_mut(),
                    [0; 6],
                    self.l2.mac,
                    self.l2.in_frame(),
                    ethertype_of(dst),
                );
                Some(hop)
            }
        };
        match payload {
            None => buf.truncate(l2 + len.min(mtu)),
            Some(p) => self.place_payload(&mut buf, l2 + len, p, hop.is_none(), unlent)?,
        }
        self.l2.finish(&mut buf);
        let Some(hop) = hop else {
            self.send(buf);
            return Some(SendOutcome::Sent);
        };
        let outcome = self.deliver(buf, hop);
        if outcome == SendOutcome::Sent && l2 <= MAX_L2_HLEN {
            if let Some(sent) = self.tx.last() {
                let mut r = Route {
                    dst,
                    l2: [0; MAX_L2_HLEN],
                };
                r.l2[..l2].copy_from_slice(&sent.as_ref()[..l2]);
                self.route = Some(r);
            }
        }
        Some(outcome)
    }

    /// Puts lent payload `p` behind `buf`'s first `at` octets (the headers, final when
    /// `headers_final`: the route was known). A payload with room free in front of it goes
    /// out with the headers written there, as one buffer (`buf` becomes it, the headers'
    /// buffer is kept for the next packet); else attached behind the headers; else copied
    /// there, its token to `unlent` at once. `None` (the packet dropped and counted) when
    /// the copy does not fit the buffer.
    #[inline]
    fn place_payload<'p>(
        &mut self,
        buf: &mut P::Buf,
        at: usize,
        p: Lent<'p>,
        headers_final: bool,
        unlent: &mut Vec<u64>,
    ) -> Option<()> {
        let p = if headers_final && p.headroom() >= at {
            match self.port.attach_frame(buf, at, p) {
                Ok(headers) => {
                    *self.spare = Some(headers);
                    return Some(());
                }
                Err(p) => p,
            }
        } else {
            p
        };
        let Err(p) = self.port.attach_payload(buf, at, p) else {
            return Some(());
        };
        unlent.push(p.token());
        let p = p.payload();
        let Some(room) = buf.as_mut().get_mut(at..at + p.len()) else {
            // Longer than the buffer (an MTU's worth): dropped, like a transmit buffer the
            // pool could not give.
            self.counters.tx_dropped += 1;
            return None;
        };
        room.copy_from_slice(p);
        buf.truncate(at + p.len());
        Some(())
    }

    /// Sends `buf` to next hop `hop`: its destination MAC filled in, or held while it is
    /// resolved.
    fn deliver(&mut self, mut buf: P::Buf, hop: IpAddr) -> SendOutcome {
        let mac = match hop {
            IpAddr::V4(h) if h.is_broadcast() => Some([0xff; 6]),
            IpAddr::V6(h) if h.is_multicast() => Some(ndp::multicast_mac(h)),
            _ => self.resolve(hop),
        };
        let Some(mac) = mac else {
            self.counters.unresolved += 1;
            // A newer packet to the same neighbour replaces the held one but not the time
            // resolution started.
            let since = match self.held.as_ref() {
                Some(h) if h.hop == hop => h.since,
                _ => self.now,
            };
            *self.held = Some(Held { hop, buf, since });
            return SendOutcome::Unresolved;
        };
        buf.as_mut()[0..6].copy_from_slice(&mac);
        self.send(buf);
        SendOutcome::Sent
    }

    /// The MAC of neighbour `ip` if known.
    fn lookup(&self, ip: IpAddr) -> Option<[u8; 6]> {
        match ip {
            IpAddr::V4(a) => self.nb.arp.lookup(a, self.now),
            IpAddr::V6(a) => self.nb.nd.lookup(a, self.now),
        }
    }

    /// Sends the packet held for an unresolved neighbour once its MAC is known; until then
    /// repeats the ARP request or neighbour solicitation (rate-limited by
    /// [`PortContext::resolve`]), so a request or answer lost (e.g. while the link comes up)
    /// does not wait for the sender's next retransmission. After [`ARP_ATTEMPTS`]
    /// unanswered requests the packet is dropped (counted; logged once per port): the
    /// neighbour is gone, and the sender's own retransmission starts a new resolution.
    #[inline]
    fn flush_held(&mut self) {
        if self.held.is_some() {
            self.flush_held_packet();
        }
    }

    /// [`PortContext::flush_held`] with a packet held.
    fn flush_held_packet(&mut self) {
        let Some((hop, since)) = self.held.as_ref().map(|h| (h.hop, h.since)) else {
            return;
        };
        if let Some(mac) = self.lookup(hop) {
            if let Some(mut h) = self.held.take() {
                h.buf.as_mut()[0..6].copy_from_slice(&mac);
                self.send(h.buf);
            }
            return;
        }
        if self.now.saturating_since(since) >= REQUEST_INTERVAL * ARP_ATTEMPTS {
            *self.held = None;
            let (failures, what) = match hop {
                IpAddr::V4(_) => (&mut self.counters.arp_failures, "ARP reply"),
                IpAddr::V6(_) => (&mut self.counters.nd_failures, "neighbour advertisement"),
            };
            *failures += 1;
            if *failures == 1 {
                log::warn!(
                    "port {}: no {what} from {hop} after {ARP_ATTEMPTS} requests; \
                     dropping the packet held for it (later failures are counted only)",
                    self.port.info().name
                );
            }
            return;
        }
        self.resolve(hop);
    }

    /// A transmit buffer of `len` bytes, or `None` when the pool is exhausted (counted).
    pub fn alloc(&mut self, len: usize) -> Option<P::Buf> {
        let b = self.port.alloc_tx(len);
        if b.is_none() {
            self.counters.alloc_failures += 1;
        }
        b
    }

    /// Frames waiting for the port: refused earlier (ring full) and kept, plus those queued
    /// in this iteration. A handler producing bulk traffic stops while this is high, so
    /// that its packets wait in its own queues (TCP: unsent data) rather than here.
    pub fn tx_pending(&self) -> usize {
        self.backlog + self.tx.len() + usize::from(self.tso.is_some())
    }

    /// Queues `frame` for the transmit burst at the end of this iteration.
    #[inline]
    pub fn send(&mut self, frame: P::Buf) {
        self.close_tso();
        self.counters.tx += 1;
        self.tx.push(frame);
    }

    /// Queues a whole frame written with [`PortContext::vlan_tag`] in it, handing the tag
    /// to the device when the device inserts it.
    pub fn send_tagged(&mut self, mut frame: P::Buf) {
        self.l2.finish(&mut frame);
        self.send(frame);
    }

    /// Allocates a frame of `len` bytes, lets `write` fill it (false: nothing to send) and
    /// queues it tagged. Returns whether it was queued.
    fn emit_frame(&mut self, len: usize, write: impl FnOnce(&mut [u8]) -> bool) -> bool {
        let Some(mut buf) = self.alloc(len) else {
            return false;
        };
        if !write(buf.as_mut()) {
            return false;
        }
        self.send_tagged(buf);
        true
    }

    /// The MAC of neighbour `ip`; on a miss, sends an ARP request or a neighbour
    /// solicitation (at most one per second per address) and returns `None`.
    pub fn resolve(&mut self, ip: IpAddr) -> Option<[u8; 6]> {
        if let Some(mac) = self.lookup(ip) {
            return Some(mac);
        }
        let (mac, tag, now) = (self.l2.mac, self.l2.in_frame(), self.now);
        match ip {
            IpAddr::V4(target) => {
                let our_ip = self.ipv4()?;
                if self.nb.arp.should_request(target, now) {
                    let repr = arp::request(mac, our_ip, target);
                    let len = arp::arp_frame_len(tag);
                    if self.emit_frame(len, |b| arp::emit_arp_frame(&repr, tag, b).is_some()) {
                        self.counters.arp_requests += 1;
                    }
                }
            }
            IpAddr::V6(target) => {
                let src = self.nb.own6.as_ref()?.source_for(target)?;
                if self.nb.nd.should_request(target, now) {
                    let m = ndp::solicitation(mac, Some(src), target, tag);
                    if self.emit_frame(m.frame_len(), |b| m.emit(b)) {
                        self.counters.nd_solicits += 1;
                    }
                }
            }
        }
        None
    }

    /// Sends the duplicate address detection probes that are due, and takes the
    /// addresses whose probes went unanswered into use.
    #[inline]
    fn run_dad(&mut self) {
        if self.nb.own6.as_ref().is_some_and(|o| o.detecting()) {
            self.solicit_own();
        }
    }

    /// Duplicate address detection's solicitations that are due (RFC 4862 §5.4.2).
    fn solicit_own(&mut self) {
        let Some(own) = self.nb.own6.as_mut().filter(|o| o.detecting()) else {
            return;
        };
        let (mac, tag) = (self.l2.mac, self.l2.in_frame());
        for target in own.poll_dad(self.now) {
            let m = ndp::solicitation(mac, None, target, tag);
            if self.emit_frame(m.frame_len(), |b| m.emit(b)) {
                self.counters.nd_solicits += 1;
            }
        }
    }
}

/// The protocol logic behind the poll loop: receives the TCP and UDP frames addressed to a
/// port (checksums verified) and emits frames of its own. The TCP engine plugs in here.
pub trait Handler<P: Port> {
    /// Handles one TCP or UDP frame (`meta.class` says which; `meta.l4(frame.as_ref())`
    /// gives the segment).
    fn handle(
        &mut self,
        ctx: &mut PortContext<'_, P>,
        now: Instant,
        frame: P::Buf,
        meta: &Classified,
    ) -> Handled;

    /// Called once per iteration for each port, right after its receive burst was handled
    /// and before [`Handler::poll`]: the work what arrived calls for (placement finished,
    /// completions, events), so that an application run between the two
    /// ([`PollLoop::poll_once_with`]) sees it and what it posts in answer leaves in the
    /// same iteration. The default does nothing.
    fn settle(&mut self, _ctx: &mut PortContext<'_, P>, _now: Instant) {}

    /// Called once per iteration for each port, after [`Handler::settle`]: emit due
    /// retransmissions, acknowledgements, queued data.
    fn poll(&mut self, _ctx: &mut PortContext<'_, P>, _now: Instant) {}

    /// Whether [`Handler::poll`] may have anything to do (frames to queue, work an
    /// application posted to hand on). When it says no and the port's backlog is empty, the
    /// transmit half skips the port's context and the call. The default: always.
    fn has_transmit_work(&self) -> bool {
        true
    }

    /// Adds what the handler shows in telemetry (connections, QPs, ...) to `snap`; the
    /// default adds nothing.
    fn observe(&self, _snap: &mut Snapshot) {}

    /// Whether [`Handler::handle`] verifies the TCP checksum of segments the classifier
    /// left unverified ([`Classified::tcp_unverified`]), counting a bad one with
    /// [`PortContext::count_bad_tcp_checksum`]. When it does, the loop's classifiers leave
    /// the checksums of segments without a device verdict to it
    /// ([`crate::classify::Classifier::defer_tcp_checksum`]). The default: it does not.
    fn verifies_tcp_checksums(&self) -> bool {
        false
    }
}

/// The handler of a loop without upper protocols: ignores TCP and UDP.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHandler;

impl<P: Port> Handler<P> for NoHandler {
    fn handle(
        &mut self,
        _ctx: &mut PortContext<'_, P>,
        _now: Instant,
        _frame: P::Buf,
        _meta: &Classified,
    ) -> Handled {
        Handled::Ignored
    }
}

/// A packet waiting for its next hop's MAC.
#[derive(Debug)]
struct Held<B> {
    hop: IpAddr,
    buf: B,
    /// When resolution of `hop` started (the first packet held for it).
    since: Instant,
}

/// What a [`PortContext`] lends of a port's state: its addressing, neighbours, spare and
/// held buffers, and counters.
#[derive(Debug)]
struct PortLink<B: PacketBuf> {
    addr: PortAddr,
    l2: L2Out,
    nb: Neighbours,
    spare: Option<B>,
    held: Option<Held<B>>,
    spent: Vec<B::Spent>,
    counters: LoopCounters,
}

impl<B: PacketBuf> PortLink<B> {
    /// The context a handler gets for port `index` (`port`, whose buffers are `B`), with
    /// the loop's transmit queue `tx`, `backlog` frames waiting in the port's backlog.
    fn context<'a, P: Port<Buf = B>>(
        &'a mut self,
        index: usize,
        port: &'a mut P,
        tx: &'a mut Vec<B>,
        backlog: usize,
        now: Instant,
    ) -> PortContext<'a, P> {
        PortContext {
            index,
            port,
            tx,
            nb: &mut self.nb,
            // Borrowed, not copied: a context is built twice per poll iteration.
            addr: &self.addr,
            l2: self.l2,
            spare: &mut self.spare,
            held: &mut self.held,
            spent: &mut self.spent,
            counters: &mut self.counters,
            backlog,
            now,
            tso: None,
            route: None,
        }
    }
}

/// Per-port state of the loop.
#[derive(Debug)]
struct PortSlot<B: PacketBuf> {
    classifier: Classifier,
    link: PortLink<B>,
    /// Frames the port refused, offered again first on the next iteration (and, between
    /// an iteration's receive and transmit halves, those the receive half queued).
    backlog: Vec<B>,
    /// This iteration's stage times are taken (set by the receive half).
    timed: bool,
}

/// Why a poll loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The stop flag was set.
    Stopped,
    /// The deadline passed.
    Deadline,
}

/// A run-to-completion poll loop over a set of ports of one type.
pub struct PollLoop<P: Port, H: Handler<P>> {
    ports: Vec<P>,
    slots: Vec<PortSlot<P::Buf>>,
    handler: H,
    burst: usize,
    rx: Vec<P::Buf>,
    tx: Vec<P::Buf>,
    /// What it publishes its telemetry snapshots under ([`telemetry::new_loop_id`]).
    id: u32,
    /// The lcore it runs on, as telemetry names it, when set ([`PollLoop::set_lcore`]);
    /// otherwise the EAL lcore of the thread that takes the snapshot, if any.
    lcore: Option<u32>,
    /// The last telemetry request answered.
    telemetry_seen: u64,
}

impl<P: Port, H: Handler<P>> Drop for PollLoop<P, H> {
    /// The loop leaves telemetry. The buffers it holds (spare, held, backlog, rx, tx) go
    /// back to their pools before the ports free those pools (a DPDK pool with an mbuf
    /// still out is leaked, and EAL with it). The ports then stop first, before the
    /// handler's teardown, so that the link goes down as soon as the loop is done.
    fn drop(&mut self) {
        telemetry::withdraw(self.id);
        self.slots.clear();
        self.rx.clear();
        self.tx.clear();
    }
}

impl<P: Port, H: Handler<P>> PollLoop<P, H> {
    /// A loop with `burst` frames per receive burst.
    pub fn new(handler: H, burst: usize) -> PollLoop<P, H> {
        PollLoop {
            ports: Vec::new(),
            slots: Vec::new(),
            handler,
            burst: burst.max(1),
            rx: Vec::with_capacity(burst),
            tx: Vec::with_capacity(burst * 2),
            id: telemetry::new_loop_id(),
            lcore: None,
            telemetry_seen: telemetry::latest_request(),
        }
    }

    /// Names the lcore the loop runs on in telemetry (by default the EAL lcore of the
    /// thread that polls it, none on a thread EAL does not manage).
    pub fn set_lcore(&mut self, lcore: u32) {
        self.lcore = Some(lcore);
    }

    /// The id the loop publishes its telemetry under, unique in the process.
    pub fn telemetry_id(&self) -> u32 {
        self.id
    }

    /// The lcore the loop shows in telemetry: the one set, else the calling thread's.
    fn shown_lcore(&self) -> Option<u32> {
        #[cfg(feature = "dpdk")]
        return self.lcore.or_else(crate::dpdk::lcore_id);
        #[cfg(not(feature = "dpdk"))]
        return self.lcore;
    }

    /// What the loop shows in telemetry: its ports (`ports`), its counters per port
    /// (`lcores`) and whatever its handler adds.
    pub fn snapshot(&self) -> Snapshot {
        let lcore = self.shown_lcore();
        let mut snap = Snapshot {
            lcore,
            thread: thread_name(),
            ..Snapshot::default()
        };
        // Where its counters are filed: by lcore when it has one, else by loop.
        let place = lcore.map_or_else(|| format!("loop{}", self.id), |l| format!("lcore{l}"));
        for (i, (port, slot)) in self.ports.iter().zip(&self.slots).enumerate() {
            let info = port.info();
            let st = port.stats();
            let mut d = Dict::new()
                .with("index", i)
                .with("loop", self.id)
                .with("mac", mac_text(&info.mac))
                .with("mtu", info.mtu)
                .with(
                    "ipv4",
                    slot.link
                        .addr
                        .ipv4
                        .map(|c| c.to_string())
                        .unwrap_or_default(),
                )
                .with(
                    "ipv6",
                    slot.link
                        .addr
                        .ipv6
                        .map(|c| c.to_string())
                        .unwrap_or_default(),
                )
                .with("vlan", slot.link.addr.vlan.map_or(0, |v| u32::from(v.id)));
            port.describe(&mut d);
            for (k, v) in [
                ("rx_packets", st.rx_packets),
                ("rx_bytes", st.rx_bytes),
                ("tx_packets", st.tx_packets),
                ("tx_bytes", st.tx_bytes),
                ("rx_dropped", st.rx_dropped),
                ("tx_dropped", st.tx_dropped),
                ("rx_errors", st.rx_errors),
            ] {
                d.put(k, v);
            }
            snap.section("ports").dict(&info.name, d);
            let c = &slot.link.counters;
            let news = slot
                .link
                .nb
                .share
                .as_ref()
                .map_or((0, 0, 0), |n| (n.counts().0, n.counts().1, n.dropped()));
            let mut d = Dict::new()
                .with("loop", self.id)
                .with("port", info.name.as_str())
                .with("rx", c.rx)
                .with("tx", c.tx)
                .with("handled", c.handled)
                .with("unhandled", c.unhandled)
                .with("malformed", c.malformed())
                .with("arp_replies", c.arp_replies)
                .with("arp_requests", c.arp_requests)
                .with("echo_replies", c.echo_replies)
                .with("tx_deferred", c.tx_deferred)
                .with("tx_dropped", c.tx_dropped)
                .with("tx_backlog", slot.backlog.len())
                .with("tx_backlog_max", MAX_TX_BACKLOG)
                .with("alloc_failures", c.alloc_failures)
                .with("unresolved", c.unresolved)
                .with("arp_failures", c.arp_failures)
                .with("arp_cache", slot.link.nb.arp.len())
                .with("arp_evicted", slot.link.nb.arp.evicted())
                .with("arp_pending", slot.link.nb.arp.pending())
                .with("arp_suppressed", slot.link.nb.arp.suppressed())
                .with("nd_cache", slot.link.nb.nd.len())
                .with("nd_evicted", slot.link.nb.nd.evicted())
                .with("nd_pending", slot.link.nb.nd.pending())
                .with("nd_suppressed", slot.link.nb.nd.suppressed())
                .with("arp_held", slot.link.held.is_some())
                .with("neighbour_news_sent", news.0)
                .with("neighbour_news_received", news.1)
                .with("neighbour_news_dropped", news.2)
                .with("busy_polls", c.busy_polls)
                .with("rx_ns", c.rx_ns)
                .with("process_ns", c.process_ns)
                .with("tx_ns", c.tx_ns);
            for class in FrameClass::ALL {
                let name = class.name().replace('-', "_");
                d.put(&format!("class_{name}"), c.class(class));
            }
            if let Some(l) = lcore {
                d.put("lcore", l);
            }
            snap.section("lcores")
                .dict(&format!("{place}_{}", info.name), d);
        }
        self.handler.observe(&mut snap);
        snap
    }

    /// Publishes a snapshot when a telemetry reader asked for one since the last (two
    /// relaxed loads otherwise); returns whether it published.
    pub fn publish_if_asked(&mut self) -> bool {
        if !telemetry::wanted(self.telemetry_seen) {
            return false;
        }
        let asked = telemetry::latest_request();
        if telemetry::publish(self.id, self.snapshot()) {
            self.telemetry_seen = asked;
            return true;
        }
        false
    }

    /// Adds a port with its addressing (ARP, neighbour solicitations and ping are answered
    /// for its addresses; frames are tagged for its VLAN); returns its index.
    pub fn add_port(&mut self, port: P, addr: PortAddr) -> usize {
        let mac = port.info().mac;
        let mut classifier = Classifier::new(mac, addr.ipv4.map(|c| c.addr));
        classifier.defer_tcp_checksum = self.handler.verifies_tcp_checksums();
        classifier.promiscuous = addr.promiscuous;
        classifier.set_vlan(addr.vlan.map(|v| v.id));
        let own6 = addr.ipv6.map(|c| OwnAddrs::new(mac, c.addr));
        if let Some(own) = &own6 {
            classifier.set_ipv6(own.usable());
        }
        let l2 = L2Out {
            mac,
            tag: addr.vlan,
            offloaded: port.vlan_offload().tx_insert,
        };
        self.ports.push(port);
        self.slots.push(PortSlot {
            classifier,
            link: PortLink {
                addr,
                l2,
                nb: Neighbours {
                    own6,
                    ..Neighbours::default()
                },
                spare: None,
                held: None,
                spent: Vec::new(),
                counters: LoopCounters::default(),
            },
            backlog: Vec::new(),
            timed: false,
        });
        self.ports.len() - 1
    }

    /// Makes port `i` one lane of a multi-queue port whose other lanes are at the other
    /// ends of `share`: what this lane learns about neighbours (answers it receives) and
    /// the addresses it asks for go to them, and theirs come here, once per iteration.
    pub fn share_neighbours(&mut self, i: usize, share: NeighbourShare) {
        let nb = &mut self.slots[i].link.nb;
        nb.arp.record_news();
        nb.nd.record_news();
        nb.share = Some(share);
    }

    /// News about neighbours port `i` sent to its other lanes and received from them
    /// ([`PollLoop::share_neighbours`]).
    pub fn neighbour_news(&self, i: usize) -> (u64, u64) {
        self.slots[i]
            .link
            .nb
            .share
            .as_ref()
            .map_or((0, 0), NeighbourShare::counts)
    }

    /// The ports.
    pub fn ports(&self) -> &[P] {
        &self.ports
    }

    /// The loop counters of port `i`.
    pub fn counters(&self, i: usize) -> LoopCounters {
        self.slots[i].link.counters
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// The handler, for work between iterations (e.g. from the `run` tick).
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
    }

    /// Takes the ports back.
    pub fn into_ports(mut self) -> Vec<P> {
        std::mem::take(&mut self.ports)
    }

    /// Runs one iteration over all ports; returns the number of frames received.
    pub fn poll_once(&mut self, now: Instant) -> usize {
        let mut total = 0;
        for i in 0..self.ports.len() {
            total += self.receive_port(i, now);
            self.transmit_port(i, now);
        }
        total
    }

    /// [`PollLoop::poll_once`] with `between` run on the handler once every port's receive
    /// burst was handled and settled ([`Handler::settle`]) and before any port transmits:
    /// an application stepped there answers what arrived within the same iteration (a
    /// ping-pong's reply leaves in the iteration its request came in).
    pub fn poll_once_with(&mut self, now: Instant, between: impl FnOnce(&mut H)) -> usize {
        let mut total = 0;
        for i in 0..self.ports.len() {
            total += self.receive_port(i, now);
        }
        between(&mut self.handler);
        for i in 0..self.ports.len() {
            self.transmit_port(i, now);
        }
        total
    }

    /// Runs until `stop` is set or `deadline` passes, calling `tick` between iterations
    /// about once a millisecond (periodic stats, work handed to the handler).
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        deadline: Option<Instant>,
        mut tick: impl FnMut(&mut Self, Instant),
    ) -> StopReason {
        let mut last_tick = clock::now();
        loop {
            let now = clock::now();
            if stop.load(Ordering::Relaxed) {
                return StopReason::Stopped;
            }
            if deadline.is_some_and(|d| now >= d) {
                return StopReason::Deadline;
            }
            let n = self.poll_once(now);
            if now.saturating_since(last_tick) >= Duration::from_millis(1) {
                tick(self, now);
                self.publish_if_asked();
                last_tick = now;
            }
            if n == 0 {
                std::hint::spin_loop();
            }
        }
    }

    /// The receive half of port `i`'s iteration: the burst received, classified and
    /// handled, then the handler's [`Handler::settle`]. Returns the frames received.
    fn receive_port(&mut self, i: usize, now: Instant) -> usize {
        let port = &mut self.ports[i];
        let slot = &mut self.slots[i];
        // `now` was taken just before the first port's turn: one clock read less per idle
        // poll of a one-port loop. Stage times are taken on a sample of busy iterations.
        let due = slot.link.counters.busy_polls.is_multiple_of(TIMING_SAMPLE);
        let t0 = if i == 0 || !due { now } else { clock::now() };
        let n = port.rx_burst(&mut self.rx, self.burst);
        slot.timed = due && n > 0;
        let mut t1 = t0;
        if n > 0 {
            slot.link.counters.busy_polls += 1;
            slot.link.counters.rx += n as u64;
        }
        if slot.timed {
            t1 = clock::now();
            slot.link.counters.rx_ns += (t1 - t0).as_nanos() as u64 * TIMING_SAMPLE;
        }
        slot.link.nb.take_news(now);
        // The context is dropped in place at the block's end (`drop(ctx)` copied it first,
        // a memcpy per half iteration), queueing a TSO frame still being built.
        {
            let mut ctx = slot
                .link
                .context(i, port, &mut self.tx, slot.backlog.len(), now);
            ctx.run_dad();
            // An idle poll skips the (out-of-line) drop of an empty drain.
            if !self.rx.is_empty() {
                for frame in self.rx.drain(..) {
                    let meta = slot.classifier.classify_offloaded(
                        frame.as_ref(),
                        frame.offloaded_vlan(),
                        frame.rx_checksum(),
                    );
                    ctx.counters.classified[meta.class.index()] += 1;
                    match meta.class {
                        FrameClass::Tcp | FrameClass::Udp => {
                            match self.handler.handle(&mut ctx, now, frame, &meta) {
                                Handled::Consumed => ctx.counters.handled += 1,
                                Handled::Ignored => ctx.counters.unhandled += 1,
                            }
                        }
                        FrameClass::Arp => handle_arp(&mut ctx, frame, &meta),
                        FrameClass::Icmp => handle_echo(&mut ctx, frame),
                        FrameClass::Icmpv6 => handle_icmpv6(&mut ctx, frame, &meta),
                        _ => {}
                    }
                }
            }
            if std::mem::take(&mut ctx.nb.own6_changed) {
                if let Some(own) = &ctx.nb.own6 {
                    slot.classifier.set_ipv6(own.usable());
                }
            }
            ctx.flush_held();
            self.handler.settle(&mut ctx, now);
        }
        if !slot.link.spent.is_empty() {
            <P::Buf as PacketBuf>::free_all(&mut slot.link.spent);
        }
        // What this half queued (ARP and echo replies, a held packet) waits with the
        // port's own frames: the transmit halves of other ports may come first.
        if !self.tx.is_empty() {
            slot.backlog.append(&mut self.tx);
        }
        if slot.timed {
            slot.link.counters.process_ns += clock::elapsed(t1).as_nanos() as u64 * TIMING_SAMPLE;
        }
        n
    }

    /// The transmit half of port `i`'s iteration: the handler's [`Handler::poll`], then
    /// the frames queued (and those the port refused earlier) offered to the port. When
    /// nothing can be sent (an idle iteration) only the neighbour news go on: no context,
    /// no call.
    #[inline]
    fn transmit_port(&mut self, i: usize, now: Instant) {
        let slot = &mut self.slots[i];
        if slot.backlog.is_empty() && !self.handler.has_transmit_work() {
            slot.link.nb.give_news();
        } else {
            self.transmit_port_work(i, now);
        }
    }

    /// [`PollLoop::transmit_port`] with something to send (out of line, so that the idle
    /// check inlines into the loop).
    #[inline(never)]
    fn transmit_port_work(&mut self, i: usize, now: Instant) {
        let port = &mut self.ports[i];
        let slot = &mut self.slots[i];
        let timed = slot.timed;
        let mut t1 = if timed { clock::now() } else { now };
        // Dropped in place at the block's end, queueing a TSO frame still being built.
        {
            let mut ctx = slot
                .link
                .context(i, port, &mut self.tx, slot.backlog.len(), now);
            self.handler.poll(&mut ctx, now);
            // Before the requests go out: another lane may receive their answers.
            ctx.nb.give_news();
        }
        if timed {
            let t2 = clock::now();
            slot.link.counters.process_ns += (t2 - t1).as_nanos() as u64 * TIMING_SAMPLE;
            t1 = t2;
        }
        if !self.tx.is_empty() || !slot.backlog.is_empty() {
            // Back-pressure: what the port refuses stays queued, in order, for the next
            // iteration (a drop here would cost the sender a retransmission). Offered a
            // burst at a time, so that a full ring costs one burst's work per iteration,
            // not the whole backlog's.
            slot.backlog.append(&mut self.tx);
            while !slot.backlog.is_empty() {
                let k = slot.backlog.len().min(self.burst);
                self.tx.extend(slot.backlog.drain(..k));
                port.tx_burst(&mut self.tx);
                if !self.tx.is_empty() {
                    slot.backlog.splice(0..0, self.tx.drain(..));
                    break;
                }
            }
            let c = &mut slot.link.counters;
            c.tx_deferred += slot.backlog.len() as u64;
            if slot.backlog.len() > MAX_TX_BACKLOG {
                c.tx_dropped += (slot.backlog.len() - MAX_TX_BACKLOG) as u64;
                slot.backlog.truncate(MAX_TX_BACKLOG);
            }
            if timed {
                c.tx_ns += clock::elapsed(t1).as_nanos() as u64 * TIMING_SAMPLE;
            }
        }
    }
}

/// The calling thread's name: Rust's, else the kernel's (threads EAL started for its
/// worker lcores are not Rust's), else "?".
fn thread_name() -> String {
    if let Some(n) = std::thread::current().name() {
        return n.to_string();
    }
    std::fs::read_to_string("/proc/thread-self/comm")
        .map(|n| n.trim_end().to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// The ethertype of an IP packet to `dst`.
fn ethertype_of(dst: IpAddr) -> EthernetProtocol {
    match dst {
        IpAddr::V4(_) => EthernetProtocol::Ipv4,
        IpAddr::V6(_) => EthernetProtocol::Ipv6,
    }
}

/// `02:00:00:00:00:01`.
fn mac_text(mac: &[u8; 6]) -> String {
    let hex: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    hex.join(":")
}

fn handle_arp<P: Port>(ctx: &mut PortContext<'_, P>, frame: P::Buf, meta: &Classified) {
    let mac = ctx.l2.mac;
    let ipv4 = ctx.ipv4();
    ctx.route = None;
    let outcome = ctx
        .nb
        .arp
        .handle(meta.l3(frame.as_ref()), mac, ipv4, ctx.now);
    drop(frame);
    if let ArpOutcome::Reply(repr) = outcome {
        let tag = ctx.l2.in_frame();
        if ctx.emit_frame(arp::arp_frame_len(tag), |b| {
            arp::emit_arp_frame(&repr, tag, b).is_some()
        }) {
            ctx.counters.arp_replies += 1;
        }
    }
}

/// Answers an ICMP or ICMPv6 echo request to one of our unicast addresses: broadcast and
/// multicast pings are not answered (as Linux does by default), so a reply's source is
/// always our address.
fn handle_echo<P: Port>(ctx: &mut PortContext<'_, P>, frame: P::Buf) {
    let req = icmp::parse_echo_request(frame.as_ref(), frame.offloaded_vlan()).filter(|r| match r
        .dst_ip
    {
        IpAddr::V4(d) => Some(d) == ctx.ipv4(),
        IpAddr::V6(d) => ctx.nb.own6.as_ref().is_some_and(|o| o.is_ours(d)),
    });
    let Some(req) = req else {
        ctx.counters.unhandled += 1;
        return;
    };
    let (mac, tag) = (ctx.l2.mac, ctx.l2.in_frame());
    if ctx.emit_frame(req.reply_len(tag), |b| {
        icmp::emit_echo_reply(&req, mac, tag, b)
    }) {
        ctx.counters.echo_replies += 1;
    }
}

/// ICMPv6 type of a neighbour solicitation (RFC 4861 §4.3).
const ND_SOLICIT: u8 = 135;
/// ICMPv6 type of a neighbour advertisement (RFC 4861 §4.4).
const ND_ADVERT: u8 = 136;

/// Echo requests and neighbour discovery; other ICMPv6 messages (router discovery,
/// multicast listener reports, errors) are not handled.
fn handle_icmpv6<P: Port>(ctx: &mut PortContext<'_, P>, frame: P::Buf, meta: &Classified) {
    let bytes = meta.l4(frame.as_ref());
    let kind = bytes.first().copied().unwrap_or(0);
    if kind != ND_SOLICIT && kind != ND_ADVERT {
        handle_echo(ctx, frame);
        return;
    }
    let (IpAddr::V6(src), IpAddr::V6(dst)) = (meta.src_ip, meta.dst_ip) else {
        return;
    };
    let Some(own) = ctx.nb.own6.as_mut() else {
        return;
    };
    ctx.route = None;
    let outcome = ctx
        .nb
        .nd
        .handle_nd(src, dst, meta.hop_limit, bytes, own, ctx.now);
    drop(frame);
    match outcome {
        NdOutcome::Advertise {
            to,
            to_mac,
            target,
            solicited,
        } => {
            let m =
                ndp::advertisement(ctx.l2.mac, to, to_mac, target, solicited, ctx.l2.in_frame());
            if ctx.emit_frame(m.frame_len(), |b| m.emit(b)) {
                ctx.counters.nd_adverts += 1;
            }
        }
        NdOutcome::Learned => {}
        NdOutcome::Duplicate(addr) => {
            ctx.counters.dad_conflicts += 1;
            ctx.nb.own6_changed = true;
            log::error!(
                "port {}: another node uses {addr}; it is no longer used here",
                ctx.port.info().name
            );
        }
        NdOutcome::Unsolicited => ctx.counters.nd_unsolicited += 1,
        NdOutcome::Malformed => ctx.counters.nd_invalid += 1,
        NdOutcome::Ignored => ctx.counters.unhandled += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{parse_l2, Ends};
    use crate::port::heap::HeapBuf;
    use crate::port::soft_pair::{soft_pair, SoftPort};
    use crate::test_frames::{
        self, OUR_IP, OUR_IP6, OUR_MAC, PEER_IP, PEER_IP6, PEER_MAC, TO_US, TO_US6,
    };
    use smoltcp::wire::{ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame};

    const GW_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 254);

    fn setup<H: Handler<SoftPort>>(h: H) -> (PollLoop<SoftPort, H>, SoftPort) {
        setup_with(
            h,
            PortAddr {
                ipv4: Some(Ipv4Cidr {
                    addr: OUR_IP,
                    prefix: 24,
                }),
                gateway: Some(GW_IP),
                ..PortAddr::default()
            },
        )
    }

    fn setup_with<H: Handler<SoftPort>>(h: H, addr: PortAddr) -> (PollLoop<SoftPort, H>, SoftPort) {
        let info = |n: &str, mac| PortInfo {
            name: n.into(),
            mac,
            mtu: 1500,
        };
        let (dp, peer) = soft_pair(info("dp", OUR_MAC), info("peer", PEER_MAC), 64);
        let mut l = PollLoop::new(h, 32);
        l.add_port(dp, addr);
        (l, peer)
    }

    fn send(peer: &mut SoftPort, frame: &[u8]) {
        let mut v = vec![HeapBuf::unpooled(frame.to_vec())];
        assert_eq!(peer.tx_burst(&mut v), 1);
    }

    fn recv(peer: &mut SoftPort) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        peer.rx_burst(&mut out, 64);
        out.into_iter().map(|b| b.into_vec()).collect()
    }

    fn arp_request() -> Vec<u8> {
        let mut f = vec![0u8; 60];
        arp::emit_arp_frame(&arp::request(PEER_MAC, PEER_IP, OUR_IP), None, &mut f).unwrap();
        f
    }

    #[test]
    fn replies_of_a_split_iteration_leave_on_their_own_ports() {
        let info = |n: &str, mac| PortInfo {
            name: n.into(),
            mac,
            mtu: 1500,
        };
        let mut l = PollLoop::new(NoHandler, 32);
        let mut peers = Vec::new();
        for k in 0..2u8 {
            let (dp, peer) = soft_pair(info("dp", OUR_MAC), info("peer", PEER_MAC), 64);
            let ip = Ipv4Addr::new(10, 99, k, 1);
            l.add_port(
                dp,
                PortAddr {
                    ipv4: Some(Ipv4Cidr {
                        addr: ip,
                        prefix: 24,
                    }),
                    ..PortAddr::default()
                },
            );
            let mut f = vec![0u8; 60];
            let peer_ip = Ipv4Addr::new(10, 99, k, 2);
            arp::emit_arp_frame(&arp::request(PEER_MAC, peer_ip, ip), None, &mut f).unwrap();
            peers.push((peer, ip, f));
        }
        for (peer, _, f) in &mut peers {
            send(peer, f);
        }
        let mut between = 0;
        assert_eq!(l.poll_once_with(clock::now(), |_| between += 1), 2);
        assert_eq!(between, 1);
        for (peer, ip, _) in &mut peers {
            let out = recv(peer);
            assert_eq!(out.len(), 1, "one reply on each port");
            let eth = EthernetFrame::new_checked(&out[0][..]).unwrap();
            let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
            let ArpRepr::EthernetIpv4 {
                source_protocol_addr,
                ..
            } = arp
            else {
                panic!()
            };
            assert_eq!(source_protocol_addr, *ip);
        }
        assert_eq!((l.counters(0).tx, l.counters(1).tx), (1, 1));
    }

    #[test]
    fn answers_arp_and_ping_and_counts() {
        let (mut l, mut peer) = setup(NoHandler);
        send(&mut peer, &arp_request());
        let ping = icmp_frame();
        send(&mut peer, &ping);
        send(&mut peer, &[0u8; 5]);
        assert_eq!(l.poll_once(clock::now()), 3);
        let out = recv(&mut peer);
        assert_eq!(out.len(), 2);
        let eth = EthernetFrame::new_checked(&out[0][..]).unwrap();
        let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        let ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr,
            ..
        } = arp
        else {
            panic!()
        };
        assert_eq!(operation, ArpOperation::Reply);
        assert_eq!(source_hardware_addr, EthernetAddress(OUR_MAC));
        let req = icmp::parse_echo_request(&ping, None).unwrap();
        let mut want = vec![0u8; req.reply_len(None)];
        icmp::emit_echo_reply(&req, OUR_MAC, None, &mut want);
        assert_eq!(out[1], want);

        let c = l.counters(0);
        assert_eq!(c.rx, 3);
        assert_eq!(c.class(FrameClass::Arp), 1);
        assert_eq!(c.class(FrameClass::Icmp), 1);
        assert_eq!(c.malformed(), 1);
        assert_eq!((c.arp_replies, c.echo_replies, c.tx), (1, 1, 2));
    }

    #[test]
    fn snapshot_shows_ports_and_loop_counters_when_asked() {
        let (mut l, mut peer) = setup(NoHandler);
        l.set_lcore(7);
        send(&mut peer, &arp_request());
        l.poll_once(clock::now());
        let snap = l.snapshot();
        let port = snap.sections["ports"].get_dict("dp").unwrap();
        assert_eq!(port.get("rx_packets"), Some(&telemetry::Scalar::U64(1)));
        assert_eq!(
            port.get("mac"),
            Some(&telemetry::Scalar::Str(mac_text(&OUR_MAC)))
        );
        let lc = snap.sections["lcores"].get_dict("lcore7_dp").unwrap();
        assert_eq!(lc.get("arp_replies"), Some(&telemetry::Scalar::U64(1)));
        assert_eq!(lc.get("class_arp"), Some(&telemetry::Scalar::U64(1)));
        // Published when a reader asked since the last time.
        assert_eq!(lc.get("lcore"), Some(&telemetry::Scalar::U64(7)));
        // Published when a reader asked since the last time, under the loop's own id; a
        // second loop (another lane, the libraries' second device) publishes beside it;
        // a loop dropped leaves.
        let (mut other, _peer) = setup(NoHandler);
        assert_ne!(l.telemetry_id(), other.telemetry_id());
        telemetry::request();
        assert!(l.publish_if_asked());
        assert!(other.publish_if_asked());
        let ids = |all: Vec<(u32, _, _)>| all.into_iter().map(|(id, _, _)| id).collect::<Vec<_>>();
        let (a, b) = (l.telemetry_id(), other.telemetry_id());
        let published = ids(telemetry::latest());
        assert!(published.contains(&a) && published.contains(&b));
        let theirs = telemetry::latest()
            .into_iter()
            .find(|(id, _, _)| *id == b)
            .unwrap()
            .2;
        assert_eq!(theirs.lcore, None, "no lcore set, not on an EAL lcore");
        let key = format!("loop{b}_dp");
        assert!(theirs.sections["lcores"].get_dict(&key).is_some(), "{key}");
        drop(other);
        let published = ids(telemetry::latest());
        assert!(published.contains(&a) && !published.contains(&b));
    }

    #[test]
    fn broadcast_ping_is_not_answered() {
        let (mut l, mut peer) = setup(NoHandler);
        let mut ping = icmp_frame();
        // Destination 255.255.255.255 (and broadcast MAC); fix the IPv4 checksum.
        ping[0..6].copy_from_slice(&[0xff; 6]);
        ping[30..34].copy_from_slice(&[255; 4]);
        {
            use smoltcp::wire::Ipv4Packet;
            let mut ip = Ipv4Packet::new_unchecked(&mut ping[14..]);
            ip.fill_checksum();
        }
        send(&mut peer, &ping);
        l.poll_once(clock::now());
        assert!(recv(&mut peer).is_empty());
        let c = l.counters(0);
        assert_eq!(
            (c.class(FrameClass::Icmp), c.echo_replies, c.unhandled),
            (1, 0, 1)
        );
    }

    fn icmp_frame() -> Vec<u8> {
        test_frames::echo_request(TO_US, 1, 2, b"ping payload")
    }

    /// A handler that echoes UDP frames back with swapped MACs, resolving via ARP first.
    #[derive(Default)]
    struct Echo {
        seen: usize,
        polls: usize,
    }

    impl Handler<SoftPort> for Echo {
        fn handle(
            &mut self,
            ctx: &mut PortContext<'_, SoftPort>,
            _now: Instant,
            mut frame: HeapBuf,
            meta: &Classified,
        ) -> Handled {
            if meta.class != FrameClass::Udp {
                return Handled::Ignored;
            }
            self.seen += 1;
            let Some(mac) = ctx.resolve(meta.src_ip) else {
                return Handled::Consumed;
            };
            let f = frame.as_mut();
            f[0..6].copy_from_slice(&mac);
            f[6..12].copy_from_slice(&OUR_MAC);
            ctx.send(frame);
            Handled::Consumed
        }

        fn poll(&mut self, _ctx: &mut PortContext<'_, SoftPort>, _now: Instant) {
            self.polls += 1;
        }
    }

    fn udp_frame() -> Vec<u8> {
        TO_US.udp_frame(1, 2, b"data")
    }

    #[test]
    fn handler_gets_udp_and_resolves_through_arp() {
        let (mut l, mut peer) = setup(Echo::default());
        send(&mut peer, &udp_frame());
        l.poll_once(clock::now());
        // Unknown neighbour: the handler's resolve sent an ARP request instead.
        let out = recv(&mut peer);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][0..6], &[0xff; 6]);
        assert_eq!(&out[0][12..14], &[0x08, 0x06]);
        assert_eq!(&out[0][20..22], &[0, 1], "ARP request");
        assert_eq!(l.counters(0).arp_requests, 1);

        // The peer answers; the next datagram is echoed.
        send(&mut peer, &arp_reply_from(PEER_IP, PEER_MAC));
        send(&mut peer, &udp_frame());
        l.poll_once(clock::now());
        let out = recv(&mut peer);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][0..6], &PEER_MAC);
        assert_eq!(&out[0][6..12], &OUR_MAC);
        assert_eq!(l.handler().seen, 2);
        assert_eq!(l.handler().polls, 2);
        assert_eq!(l.counters(0).handled, 2);
    }

    /// A soft port that takes TSO frames built in place and cuts them as a device with TSO
    /// would (IPv4, no options: the lengths and sequence numbers written per segment, the
    /// checksums left to the device); records each one's segment size (0: one segment, no
    /// TSO) in the order they came.
    struct TsoSoft {
        inner: SoftPort,
        finished: Vec<usize>,
        /// Segment sizes of the frames finished but not yet sent.
        pending: std::collections::VecDeque<usize>,
    }

    /// `frame` (IPv4 and TCP without options) cut every `segsz` payload octets.
    fn cut_tso_frame(frame: &[u8], segsz: usize) -> Vec<Vec<u8>> {
        let seq0 = u32::from_be_bytes(frame[38..42].try_into().unwrap());
        frame[54..]
            .chunks(segsz)
            .enumerate()
            .map(|(i, chunk)| {
                let mut s = frame[..54].to_vec();
                s.extend_from_slice(chunk);
                let seq = seq0 + (i * segsz) as u32;
                s[38..42].copy_from_slice(&seq.to_be_bytes());
                let total = (s.len() - 14) as u16;
                s[16..18].copy_from_slice(&total.to_be_bytes());
                s
            })
            .collect()
    }

    impl Port for TsoSoft {
        type Buf = HeapBuf;

        fn info(&self) -> &PortInfo {
            self.inner.info()
        }

        fn rx_burst(&mut self, out: &mut Vec<HeapBuf>, max: usize) -> usize {
            self.inner.rx_burst(out, max)
        }

        fn alloc_tx(&mut self, len: usize) -> Option<HeapBuf> {
            self.inner.alloc_tx(len)
        }

        fn tx_burst(&mut self, bufs: &mut Vec<HeapBuf>) -> usize {
            let mut cut = Vec::new();
            for b in bufs.drain(..) {
                match self.pending.pop_front() {
                    Some(segsz) if segsz > 0 => cut.extend(
                        cut_tso_frame(b.as_ref(), segsz)
                            .into_iter()
                            .map(HeapBuf::unpooled),
                    ),
                    _ => cut.push(b),
                }
            }
            *bufs = cut;
            self.inner.tx_burst(bufs)
        }

        fn stats(&self) -> crate::port::PortStats {
            self.inner.stats()
        }

        fn tso_room(&self) -> usize {
            65535
        }

        fn alloc_tso(&mut self) -> Option<HeapBuf> {
            Some(HeapBuf::unpooled(vec![0; 65535]))
        }

        fn finish_tso(&mut self, _buf: &mut HeapBuf, tso: &InPlaceTso) {
            self.finished.push(tso.segsz());
            self.pending.push_back(tso.segsz());
        }
    }

    /// A handler that sends its queued IP packets to the peer, in one poll.
    struct Packets(Vec<Vec<u8>>);

    impl<P: Port> Handler<P> for Packets {
        fn handle(
            &mut self,
            _ctx: &mut PortContext<'_, P>,
            _now: Instant,
            _frame: P::Buf,
            _meta: &Classified,
        ) -> Handled {
            Handled::Ignored
        }

        fn poll(&mut self, ctx: &mut PortContext<'_, P>, _now: Instant) {
            for p in self.0.drain(..) {
                let out = ctx.send_ip(|b| {
                    b[..p.len()].copy_from_slice(&p);
                    Some((PEER_IP.into(), p.len()))
                });
                assert_eq!(out, Some(SendOutcome::Sent));
            }
        }
    }

    /// Sends `packets` through a loop over `port` (the other end: `peer`) once the peer's
    /// MAC is known; returns the frames the peer got.
    fn sent_through<P: Port>(
        port: P,
        mut peer: SoftPort,
        packets: Vec<Vec<u8>>,
    ) -> (Vec<Vec<u8>>, P) {
        let mut l = PollLoop::new(Packets(Vec::new()), 32);
        l.add_port(
            port,
            PortAddr {
                ipv4: Some(Ipv4Cidr {
                    addr: OUR_IP,
                    prefix: 24,
                }),
                ..PortAddr::default()
            },
        );
        send(&mut peer, &arp_request());
        l.poll_once(clock::now());
        assert_eq!(recv(&mut peer).len(), 1, "the ARP reply");
        l.handler_mut().0 = packets;
        l.poll_once(clock::now());
        let out = recv(&mut peer);
        let port = l.ports.pop().unwrap();
        (out, port)
    }

    // TCP segments sent on a port that takes TSO frames built in place leave as TSO frames:
    // a run of one connection's segments (up to a shorter one, which ends it) as one frame
    // of the first one's headers and all the payload, a lone segment as itself; cut by the
    // segment size as a device does, they give back exactly the frames a port without TSO
    // sends (but for the lengths and sequence numbers the device writes).
    #[test]
    fn segments_sent_in_place_leave_as_tso_frames_that_cut_back_into_them() {
        let out = Ends {
            src_mac: OUR_MAC,
            dst_mac: PEER_MAC,
            src_ip: IpAddr::V4(OUR_IP),
            dst_ip: IpAddr::V4(PEER_IP),
            vlan: None,
        };
        // (source port, sequence number, payload octets)
        let segs = [
            (4000, 1000, 1448),
            (4000, 2448, 1448),
            (4000, 3896, 1448),
            (4000, 5344, 500),
            (4000, 5844, 1448),
            (4001, 1000, 1448),
            (4001, 2448, 1448),
        ];
        let packets: Vec<Vec<u8>> = segs
            .iter()
            .map(|&(port, seq, len)| {
                let payload: Vec<u8> = (0..len).map(|i| (seq as usize + i) as u8).collect();
                let mut f = test_frames::tcp_frame(out, &payload);
                f[34..36].copy_from_slice(&u16::to_be_bytes(port));
                f[38..42].copy_from_slice(&u32::to_be_bytes(seq));
                // The checksums are the device's.
                f[24..26].fill(0);
                f[50..52].fill(0);
                f[14..].to_vec()
            })
            .collect();
        let info = |n: &str, mac| PortInfo {
            name: n.into(),
            mac,
            mtu: 1500,
        };
        let (dp, peer) = soft_pair(info("dp", OUR_MAC), info("peer", PEER_MAC), 64);
        let (plain, _) = sent_through(dp, peer, packets.clone());
        assert_eq!(plain.len(), segs.len());
        let (dp, peer) = soft_pair(info("dp", OUR_MAC), info("peer", PEER_MAC), 64);
        let tso = TsoSoft {
            inner: dp,
            finished: Vec::new(),
            pending: Default::default(),
        };
        let (cut, tso) = sent_through(tso, peer, packets);
        // Four segments up to the short one; the next alone (the other connection's does
        // not continue it); the other connection's two.
        assert_eq!(tso.finished, [1448, 0, 1448]);
        assert_eq!(cut, plain);
    }

    /// A test handler that only sends, from each poll; what it receives is ignored.
    trait Emitter {
        /// Queues this poll's frames.
        fn emit(&mut self, ctx: &mut PortContext<'_, SoftPort>);
    }

    impl<E: Emitter> Handler<SoftPort> for E {
        fn handle(
            &mut self,
            _ctx: &mut PortContext<'_, SoftPort>,
            _now: Instant,
            _frame: HeapBuf,
            _meta: &Classified,
        ) -> Handled {
            Handled::Ignored
        }

        fn poll(&mut self, ctx: &mut PortContext<'_, SoftPort>, _now: Instant) {
            self.emit(ctx);
        }
    }

    /// A handler that sends one small IPv4 or IPv6 packet to each queued destination per
    /// poll.
    #[derive(Default)]
    struct Sender {
        dsts: Vec<IpAddr>,
        outcomes: Vec<Option<SendOutcome>>,
    }

    impl Emitter for Sender {
        fn emit(&mut self, ctx: &mut PortContext<'_, SoftPort>) {
            use smoltcp::phy::ChecksumCapabilities;
            use smoltcp::wire::{IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};
            for &dst in &self.dsts {
                let out = ctx.send_ip(|buf| match dst {
                    IpAddr::V4(d) => {
                        let repr = Ipv4Repr {
                            src_addr: OUR_IP,
                            dst_addr: d,
                            next_header: IpProtocol::Udp,
                            payload_len: 0,
                            hop_limit: 64,
                        };
                        let mut p = Ipv4Packet::new_unchecked(&mut buf[..20]);
                        repr.emit(&mut p, &ChecksumCapabilities::default());
                        Some((dst, 20))
                    }
                    IpAddr::V6(d) => {
                        let repr = Ipv6Repr {
                            src_addr: OUR_IP6,
                            dst_addr: d,
                            next_header: IpProtocol::Udp,
                            payload_len: 0,
                            hop_limit: 64,
                        };
                        repr.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..40]));
                        Some((dst, 40))
                    }
                });
                self.outcomes.push(out);
            }
            // Nothing to write: no frame, and the buffer is kept for the next call.
            assert_eq!(ctx.send_ip(|_| None), None);
        }
    }

    fn arp_reply_from(ip: Ipv4Addr, mac: [u8; 6]) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        arp::emit_arp_frame(&test_frames::arp_reply_to_us(mac, ip), None, &mut f).unwrap();
        f
    }

    #[test]
    fn send_ip_routes_on_link_and_via_gateway() {
        let off_link = Ipv4Addr::new(192, 0, 2, 9);
        let (mut l, mut peer) = setup(Sender {
            dsts: vec![PEER_IP.into(), off_link.into()],
            ..Sender::default()
        });
        l.poll_once(clock::now());
        assert_eq!(
            l.handler().outcomes,
            [Some(SendOutcome::Unresolved), Some(SendOutcome::Unresolved)]
        );
        let out = recv(&mut peer);
        let targets: Vec<&[u8]> = out.iter().map(|f| &f[38..42]).collect();
        assert_eq!(
            targets,
            [&PEER_IP.octets()[..], &GW_IP.octets()[..]],
            "ARP for the peer and for the gateway, not the off-link address"
        );
        assert_eq!(l.counters(0).unresolved, 2);

        let gw_mac = [2, 0, 0, 0, 0, 0xfe];
        send(&mut peer, &arp_reply_from(PEER_IP, PEER_MAC));
        send(&mut peer, &arp_reply_from(GW_IP, gw_mac));
        l.poll_once(clock::now());
        assert_eq!(
            l.handler().outcomes[2..],
            [Some(SendOutcome::Sent), Some(SendOutcome::Sent)]
        );
        let out = recv(&mut peer);
        // First the packet held since the first poll (the later of the two unresolved
        // ones: one is held per port), then the two new ones.
        assert_eq!(out.len(), 3);
        assert_eq!(&out[0][0..6], &gw_mac, "the held packet, to the gateway");
        assert_eq!(&out[0][30..34], &off_link.octets());
        assert_eq!(&out[1][0..6], &PEER_MAC);
        assert_eq!(&out[2][0..6], &gw_mac, "off-link goes to the gateway's MAC");
        for f in &out {
            assert_eq!(f.len(), 14 + 20);
            assert_eq!(&f[6..12], &OUR_MAC);
            assert_eq!(&f[12..14], &[0x08, 0x00]);
        }
        assert_eq!(&out[2][30..34], &off_link.octets());
    }

    // RFC 826 (a neighbour's new hardware address replaces the old one), RFC 4861 §7.2.5
    // alike: packets to one destination in a poll are routed once (the next hop and the
    // layer-2 header kept for the rest of the run) and carry the octets routing each one
    // gives; a MAC changed by ARP between polls is used by every packet of the next poll.
    #[test]
    fn a_run_to_one_destination_is_routed_once_and_a_new_mac_is_used_next_poll() {
        let off_link = Ipv4Addr::new(192, 0, 2, 9);
        let dsts: Vec<IpAddr> = vec![
            PEER_IP.into(),
            PEER_IP.into(),
            PEER_IP.into(),
            off_link.into(),
            off_link.into(),
            PEER_IP.into(),
        ];
        let (mut l, mut peer) = setup(Sender {
            dsts: dsts.clone(),
            ..Sender::default()
        });
        l.poll_once(clock::now());
        recv(&mut peer);
        let gw_mac = [2, 0, 0, 0, 0, 0xfe];
        send(&mut peer, &arp_reply_from(PEER_IP, PEER_MAC));
        send(&mut peer, &arp_reply_from(GW_IP, gw_mac));
        l.poll_once(clock::now());
        let first = recv(&mut peer);
        // The packet held in the first poll, then this poll's.
        assert_eq!(first.len(), 1 + dsts.len());
        let new_mac = [2, 0, 0, 0, 0, 0x22];
        send(&mut peer, &arp_reply_from(PEER_IP, new_mac));
        l.poll_once(clock::now());
        let second = recv(&mut peer);
        assert_eq!(second.len(), dsts.len());
        assert!(l.handler().outcomes[dsts.len()..]
            .iter()
            .all(|o| *o == Some(SendOutcome::Sent)));
        for (frames, peer_mac) in [(&first[1..], PEER_MAC), (&second[..], new_mac)] {
            for (f, dst) in frames.iter().zip(&dsts) {
                let IpAddr::V4(d) = dst else { unreachable!() };
                let mac = if *d == PEER_IP { peer_mac } else { gw_mac };
                let mut want = vec![0u8; 14 + 20];
                write_l2(&mut want, mac, OUR_MAC, None, EthernetProtocol::Ipv4);
                want[14..].copy_from_slice(&f[14..]);
                assert_eq!(f, &want, "to {d}");
                assert_eq!(&f[30..34], &d.octets());
            }
        }
    }

    /// A loop whose handler sent one packet to the (unresolved) peer at the returned time,
    /// and nothing after.
    fn one_packet_held_for_peer() -> (PollLoop<SoftPort, Sender>, SoftPort, Instant) {
        let (mut l, peer) = setup(Sender {
            dsts: vec![PEER_IP.into()],
            ..Sender::default()
        });
        let t0 = clock::now();
        l.poll_once(t0);
        l.handler_mut().dsts.clear();
        assert_eq!(l.handler().outcomes, [Some(SendOutcome::Unresolved)]);
        (l, peer, t0)
    }

    #[test]
    fn unresolved_packet_is_held_and_arp_repeated_until_reply() {
        let (mut l, mut peer, t0) = one_packet_held_for_peer();
        assert_eq!(
            recv(&mut peer).len(),
            1,
            "the first ARP request (lost, say)"
        );
        // No more traffic from the handler: the loop repeats the request once per interval.
        l.poll_once(t0 + REQUEST_INTERVAL / 2);
        assert!(recv(&mut peer).is_empty());
        l.poll_once(t0 + REQUEST_INTERVAL);
        let out = recv(&mut peer);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][12..14], &[0x08, 0x06]);
        assert_eq!(&out[0][38..42], &PEER_IP.octets());
        assert_eq!(l.counters(0).arp_requests, 2);
        // The reply releases the held packet without the handler sending again.
        send(&mut peer, &arp_reply_from(PEER_IP, PEER_MAC));
        l.poll_once(t0 + REQUEST_INTERVAL);
        let out = recv(&mut peer);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][0..6], &PEER_MAC);
        assert_eq!(&out[0][6..12], &OUR_MAC);
        assert_eq!(&out[0][12..14], &[0x08, 0x00]);
        assert_eq!(&out[0][30..34], &PEER_IP.octets());
        l.poll_once(t0 + 3 * REQUEST_INTERVAL);
        assert!(recv(&mut peer).is_empty(), "nothing held any more");
    }

    #[test]
    fn unresolved_packet_is_dropped_after_arp_attempts() {
        let (mut l, mut peer, t0) = one_packet_held_for_peer();
        // RFC 826 gives no retry policy; ours: ARP_ATTEMPTS requests a second apart.
        let mut requests = recv(&mut peer).len();
        for k in 1..ARP_ATTEMPTS {
            l.poll_once(t0 + REQUEST_INTERVAL * k);
            requests += recv(&mut peer).len();
            assert_eq!(l.counters(0).arp_failures, 0, "still trying after {k} s");
        }
        assert_eq!(requests, ARP_ATTEMPTS as usize);
        // No reply within an interval of the last request: the packet is dropped, once.
        l.poll_once(t0 + REQUEST_INTERVAL * ARP_ATTEMPTS);
        assert!(recv(&mut peer).is_empty(), "no further request");
        let c = l.counters(0);
        assert_eq!(
            (c.arp_failures, c.arp_requests),
            (1, u64::from(ARP_ATTEMPTS))
        );
        l.poll_once(t0 + REQUEST_INTERVAL * (ARP_ATTEMPTS + 5));
        assert!(recv(&mut peer).is_empty(), "nothing held any more");
        assert_eq!(l.counters(0).arp_failures, 1);
        // A late reply sends nothing: the packet is gone.
        send(&mut peer, &arp_reply_from(PEER_IP, PEER_MAC));
        l.poll_once(t0 + REQUEST_INTERVAL * (ARP_ATTEMPTS + 5));
        assert!(recv(&mut peer).is_empty());
        // The sender's next packet to the neighbour starts over, and now goes out.
        l.handler_mut().dsts.push(PEER_IP.into());
        l.poll_once(t0 + REQUEST_INTERVAL * (ARP_ATTEMPTS + 6));
        let out = recv(&mut peer);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][0..6], &PEER_MAC);
    }

    /// Queues `n` numbered frames (id at octet 14) for the peer on its first poll.
    struct Burst {
        n: u16,
        pending_seen: Vec<usize>,
    }

    impl Emitter for Burst {
        fn emit(&mut self, ctx: &mut PortContext<'_, SoftPort>) {
            self.pending_seen.push(ctx.tx_pending());
            for id in 0..std::mem::take(&mut self.n) {
                let Some(mut f) = ctx.alloc(60) else {
                    return;
                };
                f.as_mut()[..6].copy_from_slice(&PEER_MAC);
                f.as_mut()[14..16].copy_from_slice(&id.to_be_bytes());
                ctx.send(f);
            }
        }
    }

    #[test]
    fn refused_frames_are_kept_and_sent_in_order() {
        // The peer's ring holds 64 frames; 100 are sent while it does not read.
        let (mut l, mut peer) = setup(Burst {
            n: 100,
            pending_seen: Vec::new(),
        });
        let t0 = clock::now();
        l.poll_once(t0);
        let c = l.counters(0);
        assert_eq!((c.tx, c.tx_dropped, c.tx_deferred), (100, 0, 36));
        // Still full: offered again, nothing lost, and the handler sees the backlog.
        l.poll_once(t0);
        assert_eq!(l.counters(0).tx_dropped, 0);
        assert_eq!(l.handler().pending_seen, [0, 36]);
        let mut got = recv(&mut peer);
        l.poll_once(t0);
        got.extend(recv(&mut peer));
        assert_eq!(got.len(), 100);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(u16::from_be_bytes([f[14], f[15]]), i as u16, "in order");
        }
        l.poll_once(t0);
        assert_eq!(l.handler().pending_seen.last(), Some(&0));
        assert_eq!(l.counters(0).tx_dropped, 0);
    }

    #[test]
    fn tx_backlog_is_bounded_and_drops_are_counted() {
        // The peer's ring holds 64 frames and is not read: of MAX_TX_BACKLOG + 100 frames,
        // 64 go out, MAX_TX_BACKLOG wait, the last 36 are dropped and counted.
        let n = MAX_TX_BACKLOG + 100;
        let (mut l, mut peer) = setup(Burst {
            n: n as u16,
            pending_seen: Vec::new(),
        });
        let t0 = clock::now();
        l.poll_once(t0);
        let c = l.counters(0);
        assert_eq!((c.tx, c.tx_dropped), (n as u64, 36));
        assert_eq!(
            l.snapshot().sections["lcores"]
                .get_dict(&format!("loop{}_dp", l.telemetry_id()))
                .unwrap()
                .get("tx_backlog"),
            Some(&telemetry::Scalar::U64(MAX_TX_BACKLOG as u64))
        );
        // Nothing else is lost: once the peer reads, the kept frames follow in order.
        let mut got = Vec::new();
        for _ in 0..(n / 32 + 4) {
            got.extend(recv(&mut peer));
            l.poll_once(t0);
        }
        got.extend(recv(&mut peer));
        assert_eq!(got.len(), 64 + MAX_TX_BACKLOG);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(u16::from_be_bytes([f[14], f[15]]), i as u16, "in order");
        }
        assert_eq!(l.counters(0).tx_dropped, 36);
    }

    #[test]
    fn run_stops_on_flag_and_deadline() {
        let (mut l, _peer) = setup(NoHandler);
        let stop = AtomicBool::new(true);
        assert_eq!(l.run(&stop, None, |_, _| {}), StopReason::Stopped);
        let stop = AtomicBool::new(false);
        let start = clock::now();
        let mut ticks = 0;
        let r = l.run(&stop, Some(start + Duration::from_millis(30)), |_, _| {
            ticks += 1
        });
        assert_eq!(r, StopReason::Deadline);
        assert!(clock::elapsed(start) >= Duration::from_millis(30));
        assert!(ticks > 0);
    }

    const V100: Vlan = Vlan {
        id: 100,
        priority: 5,
    };

    fn on_vlan100() -> PortAddr {
        PortAddr {
            ipv4: Some(Ipv4Cidr {
                addr: OUR_IP,
                prefix: 24,
            }),
            ipv6: Some(Ipv6Cidr {
                addr: OUR_IP6,
                prefix: 64,
            }),
            vlan: Some(V100),
            ..PortAddr::default()
        }
    }

    // IEEE 802.1Q: a port on VLAN 100 answers ARP and ping (both families) tagged 100 with
    // its priority, counts and drops frames of other VLANs and untagged ones, and tags what
    // its handler sends.
    #[test]
    fn vlan_port_tags_its_frames_and_drops_other_vlans() {
        let (mut l, mut peer) = setup_with(
            Sender {
                dsts: vec![PEER_IP.into()],
                ..Sender::default()
            },
            on_vlan100(),
        );
        let t0 = clock::now();
        l.poll_once(t0);
        // DAD probes (tagged) and the ARP request for the handler's packet.
        for f in recv(&mut peer) {
            assert_eq!(
                &f[12..16],
                &[0x81, 0x00, 0xa0, 0x64],
                "tagged 100, priority 5"
            );
        }
        l.handler_mut().dsts.clear();
        let tagged = |tag| Ends { vlan: tag, ..TO_US };
        let mut arp_reply = vec![0u8; 64];
        arp::emit_arp_frame(
            &test_frames::arp_reply_to_us(PEER_MAC, PEER_IP),
            Some(V100),
            &mut arp_reply,
        )
        .unwrap();
        send(&mut peer, &arp_reply);
        send(
            &mut peer,
            &test_frames::echo_request(tagged(Some(V100)), 1, 2, b"v4"),
        );
        let to_us6 = Ends {
            vlan: Some(V100),
            ..TO_US6
        };
        send(&mut peer, &test_frames::echo_request(to_us6, 3, 4, b"v6"));
        let v7 = Some(Vlan { id: 7, priority: 0 });
        send(
            &mut peer,
            &test_frames::echo_request(tagged(v7), 1, 3, b"x"),
        );
        send(
            &mut peer,
            &test_frames::echo_request(tagged(None), 1, 4, b"x"),
        );
        l.poll_once(t0);
        let out = recv(&mut peer);
        // The held UDP packet (ARP answered) and the two echo replies, all tagged.
        assert_eq!(out.len(), 3, "{out:?}");
        for f in &out {
            let l2 = parse_l2(f, None).unwrap();
            assert_eq!((l2.tci, l2.dst), (Some(V100.tci()), PEER_MAC));
        }
        assert_eq!(&out[0][18..20], &[0x45, 0x00], "IPv4 after the tag");
        let c = l.counters(0);
        assert_eq!(c.class(FrameClass::OtherVlan), 2);
        assert_eq!(c.echo_replies, 2);
        assert_eq!(c.class(FrameClass::Icmpv6), 1);
    }

    // Two lanes of one port (an RSS NIC: answers land on queue 0 whichever lane asked):
    // lane 1's ARP request and neighbour solicitation are answered to lane 0, which passes
    // the answers on; lane 1's held packets go out.
    #[test]
    fn a_lane_learns_the_neighbours_whose_answers_reach_another_lane() {
        let addr = PortAddr {
            ipv4: Some(Ipv4Cidr {
                addr: OUR_IP,
                prefix: 24,
            }),
            ipv6: Some(Ipv6Cidr {
                addr: OUR_IP6,
                prefix: 64,
            }),
            ..PortAddr::default()
        };
        let (mut l0, mut peer0) = setup_with(Sender::default(), addr);
        let (mut l1, mut peer1) = setup_with(Sender::default(), addr);
        let mut shares = crate::neighbour::neighbour_shares(2);
        l1.share_neighbours(0, shares.pop().unwrap());
        l0.share_neighbours(0, shares.pop().unwrap());
        let t0 = clock::now();
        let of_type = |frames: &[Vec<u8>], ethertype: [u8; 2]| -> Vec<Vec<u8>> {
            frames
                .iter()
                .filter(|f| f[12..14] == ethertype)
                .cloned()
                .collect()
        };

        l1.handler_mut().dsts = vec![PEER_IP.into()];
        l1.poll_once(t0);
        l1.handler_mut().dsts.clear();
        let arp = of_type(&recv(&mut peer1), [0x08, 0x06]);
        assert_eq!(arp.len(), 1, "lane 1 asks on its own queue");
        send(&mut peer0, &arp_reply_from(PEER_IP, PEER_MAC));
        l0.poll_once(t0);
        assert!(of_type(&recv(&mut peer0), [0x08, 0x00]).is_empty());
        l1.poll_once(t0);
        let ip = of_type(&recv(&mut peer1), [0x08, 0x00]);
        assert_eq!(ip.len(), 1, "the held packet");
        assert_eq!(&ip[0][0..6], &PEER_MAC);
        assert_eq!(&ip[0][30..34], &PEER_IP.octets());

        let other: Ipv6Addr = "fd00:99::3".parse().unwrap();
        let other_mac = [2, 0, 0, 0, 0, 3];
        l1.handler_mut().dsts = vec![other.into()];
        l1.poll_once(t0);
        l1.handler_mut().dsts.clear();
        let solicited = ndp::multicast_mac(ndp::solicited_node(other));
        assert!(recv(&mut peer1).iter().any(|f| f[0..6] == solicited));
        let na = ndp::advertisement(other_mac, OUR_IP6, OUR_MAC, other, true, None);
        let mut f = vec![0u8; na.frame_len()];
        assert!(na.emit(&mut f));
        send(&mut peer0, &f);
        l0.poll_once(t0);
        assert_eq!(l0.counters(0).nd_unsolicited, 0, "lane 1 asked for it");
        l1.poll_once(t0);
        let ip6 = of_type(&recv(&mut peer1), [0x86, 0xdd]);
        assert_eq!(ip6.len(), 1, "the held packet");
        assert_eq!(&ip6[0][0..6], &other_mac);
        assert_eq!(
            (l1.counters(0).arp_failures, l1.counters(0).nd_failures),
            (0, 0)
        );
        // Lane 1 asked twice; lane 0 learned twice.
        assert_eq!(l0.neighbour_news(0), (2, 2));
        assert_eq!(l1.neighbour_news(0), (2, 2));
        l0.set_lcore(3);
        let snap = l0.snapshot();
        let lc = snap.sections["lcores"].get_dict("lcore3_dp").unwrap();
        assert_eq!(
            lc.get("neighbour_news_sent"),
            Some(&telemetry::Scalar::U64(2))
        );
        assert_eq!(
            lc.get("neighbour_news_received"),
            Some(&telemetry::Scalar::U64(2))
        );
    }

    // RFC 4861/4862 over the loop: the port probes its two addresses when it starts,
    // answers a solicitation and a ping, resolves a neighbour by solicitation and sends the
    // held packet when the advertisement comes, counts an advertisement nobody asked for,
    // and stops answering for an address another node claims.
    #[test]
    fn ipv6_neighbour_discovery_and_ping() {
        let addr = PortAddr {
            ipv6: Some(Ipv6Cidr {
                addr: OUR_IP6,
                prefix: 64,
            }),
            ..PortAddr::default()
        };
        let (mut l, mut peer) = setup_with(Sender::default(), addr);
        let t0 = clock::now();
        l.poll_once(t0);
        let probes = recv(&mut peer);
        assert_eq!(probes.len(), 2, "one probe per own address");
        for f in &probes {
            assert_eq!(&f[0..3], &[0x33, 0x33, 0xff]);
            assert_eq!(&f[22..38], &Ipv6Addr::UNSPECIFIED.octets(), "from ::");
        }
        assert_eq!(l.counters(0).nd_solicits, 2);
        l.poll_once(t0 + REQUEST_INTERVAL);
        assert!(recv(&mut peer).is_empty(), "no second probe");

        // The peer solicits our address; then pings it.
        let ns = ndp::solicitation(PEER_MAC, Some(PEER_IP6), OUR_IP6, None);
        let mut f = vec![0u8; ns.frame_len()];
        assert!(ns.emit(&mut f));
        send(&mut peer, &f);
        send(
            &mut peer,
            &test_frames::echo_request(TO_US6, 9, 1, b"ping6"),
        );
        l.poll_once(t0 + REQUEST_INTERVAL);
        let out = recv(&mut peer);
        assert_eq!(out.len(), 2);
        assert_eq!(&out[0][0..6], &PEER_MAC);
        assert_eq!(out[0][14 + 40], 136, "a neighbour advertisement");
        assert_eq!(out[1][14 + 40], 129, "an echo reply");
        let c = l.counters(0);
        assert_eq!((c.nd_adverts, c.echo_replies), (1, 1));

        // A packet to an unknown neighbour: solicitation, then the held packet on answer.
        let other: Ipv6Addr = "fd00:99::3".parse().unwrap();
        let other_mac = [2, 0, 0, 0, 0, 3];
        l.handler_mut().dsts = vec![other.into()];
        l.poll_once(t0 + REQUEST_INTERVAL);
        l.handler_mut().dsts.clear();
        let out = recv(&mut peer);
        assert_eq!(out.len(), 1);
        assert_eq!(
            &out[0][0..6],
            &ndp::multicast_mac(ndp::solicited_node(other))
        );
        assert_eq!(l.handler().outcomes, [Some(SendOutcome::Unresolved)]);
        let na = ndp::advertisement(other_mac, OUR_IP6, OUR_MAC, other, true, None);
        let mut f = vec![0u8; na.frame_len()];
        assert!(na.emit(&mut f));
        send(&mut peer, &f);
        l.poll_once(t0 + REQUEST_INTERVAL);
        let out = recv(&mut peer);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][0..6], &other_mac);
        assert_eq!(&out[0][12..14], &[0x86, 0xdd]);

        // An advertisement nobody asked for is counted and changes nothing.
        let stranger: Ipv6Addr = "fd00:99::66".parse().unwrap();
        let na = ndp::advertisement(
            [2, 0, 0, 0, 0, 0x66],
            OUR_IP6,
            OUR_MAC,
            stranger,
            true,
            None,
        );
        let mut f = vec![0u8; na.frame_len()];
        assert!(na.emit(&mut f));
        send(&mut peer, &f);
        l.poll_once(t0 + REQUEST_INTERVAL);
        assert_eq!(l.counters(0).nd_unsolicited, 1);
        assert!(recv(&mut peer).is_empty());

        // Another node advertises our configured address: it is no longer answered.
        let na = ndp::advertisement(
            PEER_MAC,
            ndp::ALL_NODES,
            ndp::multicast_mac(ndp::ALL_NODES),
            OUR_IP6,
            false,
            None,
        );
        let mut f = vec![0u8; na.frame_len()];
        assert!(na.emit(&mut f));
        send(&mut peer, &f);
        l.poll_once(t0 + REQUEST_INTERVAL);
        assert_eq!(l.counters(0).dad_conflicts, 1);
        send(
            &mut peer,
            &test_frames::echo_request(TO_US6, 9, 2, b"ping6"),
        );
        l.poll_once(t0 + REQUEST_INTERVAL);
        assert!(recv(&mut peer).is_empty());
        assert_eq!(l.counters(0).class(FrameClass::NotForUs), 1);
    }

    // A neighbour that never answers: the held IPv6 packet is dropped after ARP_ATTEMPTS
    // solicitations and counted apart from ARP's failures.
    #[test]
    fn unanswered_solicitations_drop_the_held_packet() {
        let addr = PortAddr {
            ipv6: Some(Ipv6Cidr {
                addr: OUR_IP6,
                prefix: 64,
            }),
            ..PortAddr::default()
        };
        let (mut l, mut peer) = setup_with(
            Sender {
                dsts: vec![PEER_IP6.into()],
                ..Sender::default()
            },
            addr,
        );
        let t0 = clock::now();
        l.poll_once(t0);
        l.handler_mut().dsts.clear();
        for k in 1..=ARP_ATTEMPTS {
            l.poll_once(t0 + REQUEST_INTERVAL * k);
        }
        let solicits = recv(&mut peer)
            .iter()
            .filter(|f| f[14 + 40] == 135 && f[22..38] != Ipv6Addr::UNSPECIFIED.octets())
            .count();
        assert_eq!(solicits, ARP_ATTEMPTS as usize);
        let c = l.counters(0);
        assert_eq!((c.nd_failures, c.arp_failures), (1, 0));
        // No address of the family: no route.
        l.handler_mut().dsts = vec![PEER_IP.into()];
        l.poll_once(t0 + REQUEST_INTERVAL * 9);
        assert_eq!(
            l.handler().outcomes.last(),
            Some(&Some(SendOutcome::NoRoute))
        );
    }

    // A client connects from the port's address of the server's family; a port with both
    // families names IPv4 as its main address.
    #[test]
    fn source_address_follows_the_family() {
        let v4 = Ipv4Cidr {
            addr: OUR_IP,
            prefix: 24,
        };
        let v6 = Ipv6Cidr {
            addr: OUR_IP6,
            prefix: 64,
        };
        let both = PortAddr {
            ipv6: Some(v6),
            ..PortAddr::on_subnet(v4)
        };
        assert_eq!(both.source_for(PEER_IP.into()), Some(OUR_IP.into()));
        assert_eq!(both.source_for(PEER_IP6.into()), Some(OUR_IP6.into()));
        assert_eq!(both.primary(), Some(OUR_IP.into()));
        let only6 = PortAddr::on_prefix(v6);
        assert_eq!(only6.source_for(PEER_IP.into()), None);
        assert_eq!(only6.primary(), Some(OUR_IP6.into()));
        assert_eq!(PortAddr::on_subnet(v4).source_for(PEER_IP6.into()), None);
        assert_eq!(PortAddr::default().primary(), None);
    }
}
