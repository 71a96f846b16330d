//! The poll loop of one lcore: run to completion over its ports.
//!
//! Each iteration, for every port: receive a burst, classify each frame, answer ARP and
//! ping, hand TCP/UDP to the [`Handler`], let the handler emit (timers, queued data), and
//! transmit the burst of replies. Counters are kept per port and per stage; the loop stops
//! when a shared flag is set or a deadline passes.
//!
//! Plugging in an engine (e.g. `tcp::Engine`): implement [`Handler`] for it. In
//! [`Handler::handle`], pass the segment on with the addresses the classifier found:
//! `engine.handle_tcp(now, meta.src_ip, meta.dst_ip, meta.l4(frame.as_ref()))`, then drop
//! the frame (or keep it while the payload is placed). In [`Handler::poll`], drain the
//! engine's output with [`PortContext::send_ip`], which adds the Ethernet header for the
//! ARP-resolved next hop: `while ctx.send_ip(|b| engine.poll_transmit(t, b).map(|x|
//! (x.dst, x.len))).is_some() {}`; timers are driven from `poll` as well.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::{self, Instant};

use crate::arp::{self, ArpCache, ArpOutcome};
use crate::classify::{Classified, Classifier, FrameClass, ETH_HLEN};
use crate::config::{Ipv4Cidr, PortConfig};
use crate::icmp;
use crate::port::{PacketBuf, Port, PortInfo};

/// A port's layer-3 identity in the poll loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortAddr {
    /// Own address and subnet; ARP and ping are answered for the address.
    pub ipv4: Option<Ipv4Cidr>,
    /// Next hop for destinations outside the subnet.
    pub gateway: Option<Ipv4Addr>,
    /// Accept frames for any destination MAC.
    pub promiscuous: bool,
}

impl PortAddr {
    /// A port's layer-3 identity as its configuration gives it.
    pub fn of(pc: &PortConfig) -> PortAddr {
        PortAddr {
            ipv4: pc.ipv4,
            gateway: pc.gateway.as_ref().map(|g| *g.get_ref()),
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
}

/// What became of a packet offered with [`PortContext::send_ip`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// Queued for transmission.
    Sent,
    /// The next hop's MAC is unknown: an ARP request went out and the packet is held until
    /// the reply arrives (one packet per port; a newer one replaces it). While one is held,
    /// the loop repeats the request once per interval, [`ARP_ATTEMPTS`] requests in all;
    /// then the packet is dropped and counted in [`LoopCounters::arp_failures`].
    Unresolved,
    /// No route: the destination is off-link and no gateway is configured.
    NoRoute,
}

/// ARP requests sent for a held packet before it is dropped: resolution gives up
/// `ARP_ATTEMPTS` × [`arp::REQUEST_INTERVAL`] after the first request (Linux's default of
/// three multicast solicitations a second apart).
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
    /// Held packets dropped because their next hop did not answer [`ARP_ATTEMPTS`]
    /// requests.
    pub arp_failures: u64,
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

/// What a handler can do on the port a frame came from: allocate and queue frames, and
/// resolve next hops.
pub struct PortContext<'a, P: Port> {
    index: usize,
    port: &'a mut P,
    tx: &'a mut Vec<P::Buf>,
    arp: &'a mut ArpCache,
    addr: PortAddr,
    spare: &'a mut Option<P::Buf>,
    held: &'a mut Option<Held<P::Buf>>,
    counters: &'a mut LoopCounters,
    backlog: usize,
    now: Instant,
}

impl<P: Port> PortContext<'_, P> {
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

    /// The port's addressing.
    pub fn addr(&self) -> PortAddr {
        self.addr
    }

    /// The neighbour to send to for `dst`: `dst` itself when on-link, else the gateway.
    pub fn next_hop(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        match self.addr.ipv4 {
            Some(net) if net.contains(dst) || dst.is_broadcast() => Some(dst),
            _ => self.addr.gateway,
        }
    }

    /// Sends one IPv4 packet that `write` produces: `write` gets the buffer after the
    /// Ethernet header (room for an MTU-sized packet) and returns the packet's destination
    /// and length, or `None` when it has nothing to send. The Ethernet header is filled in
    /// for the next hop (ARP-resolved). Returns `None` when nothing was written or no
    /// buffer was available (counted), else what became of the packet.
    ///
    /// Typical use, draining an engine's output:
    /// `while ctx.send_ip(|b| engine.poll_transmit(now, b).map(|t| (t.dst, t.len))).is_some() {}`
    pub fn send_ip(
        &mut self,
        write: impl FnOnce(&mut [u8]) -> Option<(IpAddr, usize)>,
    ) -> Option<SendOutcome> {
        let full = self.port.info().mtu + ETH_HLEN;
        let mut buf = match self.spare.take() {
            Some(b) => b,
            None => self.alloc(full)?,
        };
        let written = buf.as_mut().get_mut(ETH_HLEN..).and_then(write);
        let Some((dst, len)) = written else {
            *self.spare = Some(buf);
            return None;
        };
        let IpAddr::V4(dst) = dst else {
            self.counters.unresolved += 1;
            return Some(SendOutcome::NoRoute);
        };
        let Some(hop) = self.next_hop(dst) else {
            self.counters.unresolved += 1;
            return Some(SendOutcome::NoRoute);
        };
        let own = self.port.info().mac;
        let frame = buf.as_mut();
        frame[6..12].copy_from_slice(&own);
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        buf.truncate(ETH_HLEN + len.min(full - ETH_HLEN));
        let mac = if hop.is_broadcast() {
            Some([0xff; 6])
        } else {
            self.resolve(hop)
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
            return Some(SendOutcome::Unresolved);
        };
        buf.as_mut()[0..6].copy_from_slice(&mac);
        self.send(buf);
        Some(SendOutcome::Sent)
    }

    /// Sends the packet held for an unresolved neighbour once its MAC is known; until then
    /// repeats the ARP request (rate-limited by [`PortContext::resolve`]), so a request or
    /// reply lost (e.g. while the link comes up) does not wait for the sender's next
    /// retransmission. After [`ARP_ATTEMPTS`] unanswered requests the packet is dropped
    /// (counted; logged once per port): the neighbour is gone, and the sender's own
    /// retransmission starts a new resolution.
    fn flush_held(&mut self) {
        let Some((hop, since)) = self.held.as_ref().map(|h| (h.hop, h.since)) else {
            return;
        };
        if let Some(mac) = self.arp.lookup(hop, self.now) {
            if let Some(mut h) = self.held.take() {
                h.buf.as_mut()[0..6].copy_from_slice(&mac);
                self.send(h.buf);
            }
            return;
        }
        if self.now.saturating_since(since) >= arp::REQUEST_INTERVAL * ARP_ATTEMPTS {
            *self.held = None;
            self.counters.arp_failures += 1;
            if self.counters.arp_failures == 1 {
                log::warn!(
                    "port {}: no ARP reply from {hop} after {ARP_ATTEMPTS} requests; \
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
        self.backlog + self.tx.len()
    }

    /// Queues `frame` for the transmit burst at the end of this iteration.
    pub fn send(&mut self, frame: P::Buf) {
        self.counters.tx += 1;
        self.tx.push(frame);
    }

    /// The MAC of neighbour `ip`; on a miss, sends an ARP request (at most one per second
    /// per address) and returns `None`.
    pub fn resolve(&mut self, ip: Ipv4Addr) -> Option<[u8; 6]> {
        if let Some(mac) = self.arp.lookup(ip, self.now) {
            return Some(mac);
        }
        let our_ip = self.ipv4()?;
        if self.arp.should_request(ip, self.now) {
            let repr = arp::request(self.port.info().mac, our_ip, ip);
            if let Some(mut buf) = self.alloc(arp::MIN_FRAME_LEN) {
                if arp::emit_arp_frame(&repr, buf.as_mut()).is_some() {
                    self.counters.arp_requests += 1;
                    self.send(buf);
                }
            }
        }
        None
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

    /// Called once per iteration for each port, after its receive burst was handled: emit
    /// due retransmissions, acknowledgements, queued data.
    fn poll(&mut self, _ctx: &mut PortContext<'_, P>, _now: Instant) {}
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
    hop: Ipv4Addr,
    buf: B,
    /// When resolution of `hop` started (the first packet held for it).
    since: Instant,
}

/// Per-port state of the loop.
#[derive(Debug)]
struct PortSlot<B> {
    classifier: Classifier,
    addr: PortAddr,
    arp: ArpCache,
    spare: Option<B>,
    held: Option<Held<B>>,
    /// Frames the port refused, offered again first on the next iteration.
    backlog: Vec<B>,
    counters: LoopCounters,
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
}

impl<P: Port, H: Handler<P>> Drop for PollLoop<P, H> {
    /// The buffers the loop holds (spare, held, backlog, rx, tx) go back to their pools
    /// before the ports free those pools (a DPDK pool with an mbuf still out is leaked, and
    /// EAL with it). The ports then stop first, before the handler's teardown: the sooner a
    /// memif port stops, the narrower DPDK 22.11 memif's window where the peer's disconnect
    /// (on EAL's interrupt thread) races this thread's stop (see configs/rdma-memif-*.toml).
    fn drop(&mut self) {
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
        }
    }

    /// Adds a port with its addressing (ARP and ping are answered for its IPv4 address);
    /// returns its index.
    pub fn add_port(&mut self, port: P, addr: PortAddr) -> usize {
        let mut classifier = Classifier::new(port.info().mac, addr.ipv4.map(|c| c.addr));
        classifier.promiscuous = addr.promiscuous;
        self.ports.push(port);
        self.slots.push(PortSlot {
            classifier,
            addr,
            arp: ArpCache::new(),
            spare: None,
            held: None,
            backlog: Vec::new(),
            counters: LoopCounters::default(),
        });
        self.ports.len() - 1
    }

    /// The ports.
    pub fn ports(&self) -> &[P] {
        &self.ports
    }

    /// The loop counters of port `i`.
    pub fn counters(&self, i: usize) -> LoopCounters {
        self.slots[i].counters
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
            total += self.poll_port(i, now);
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
                last_tick = now;
            }
            if n == 0 {
                std::hint::spin_loop();
            }
        }
    }

    fn poll_port(&mut self, i: usize, now: Instant) -> usize {
        let port = &mut self.ports[i];
        let slot = &mut self.slots[i];
        // `now` was taken just before the first port's turn: one clock read less per idle
        // poll of a one-port loop. Stage times are taken on a sample of busy iterations.
        let due = slot.counters.busy_polls.is_multiple_of(TIMING_SAMPLE);
        let t0 = if i == 0 || !due { now } else { clock::now() };
        let n = port.rx_burst(&mut self.rx, self.burst);
        let timed = due && n > 0;
        let mut t1 = t0;
        if n > 0 {
            slot.counters.busy_polls += 1;
            slot.counters.rx += n as u64;
        }
        if timed {
            t1 = clock::now();
            slot.counters.rx_ns += (t1 - t0).as_nanos() as u64 * TIMING_SAMPLE;
        }
        let mut ctx = PortContext {
            index: i,
            port: &mut *port,
            tx: &mut self.tx,
            arp: &mut slot.arp,
            addr: slot.addr,
            spare: &mut slot.spare,
            held: &mut slot.held,
            counters: &mut slot.counters,
            backlog: slot.backlog.len(),
            now,
        };
        for frame in self.rx.drain(..) {
            let meta = slot.classifier.classify(frame.as_ref());
            ctx.counters.classified[meta.class.index()] += 1;
            match meta.class {
                FrameClass::Arp => handle_arp(&mut ctx, frame),
                FrameClass::Icmp => handle_icmp(&mut ctx, frame),
                FrameClass::Tcp | FrameClass::Udp => {
                    match self.handler.handle(&mut ctx, now, frame, &meta) {
                        Handled::Consumed => ctx.counters.handled += 1,
                        Handled::Ignored => ctx.counters.unhandled += 1,
                    }
                }
                _ => {}
            }
        }
        ctx.flush_held();
        self.handler.poll(&mut ctx, now);
        if timed {
            let t2 = clock::now();
            ctx.counters.process_ns += (t2 - t1).as_nanos() as u64 * TIMING_SAMPLE;
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
            let c = &mut slot.counters;
            c.tx_deferred += slot.backlog.len() as u64;
            if slot.backlog.len() > MAX_TX_BACKLOG {
                c.tx_dropped += (slot.backlog.len() - MAX_TX_BACKLOG) as u64;
                slot.backlog.truncate(MAX_TX_BACKLOG);
            }
            if timed {
                c.tx_ns += clock::elapsed(t1).as_nanos() as u64 * TIMING_SAMPLE;
            }
        }
        n
    }
}

fn handle_arp<P: Port>(ctx: &mut PortContext<'_, P>, frame: P::Buf) {
    let mac = ctx.port.info().mac;
    let arp_bytes = frame.as_ref().get(ETH_HLEN..).unwrap_or(&[]);
    let ipv4 = ctx.ipv4();
    if let ArpOutcome::Reply(repr) = ctx.arp.handle(arp_bytes, mac, ipv4, ctx.now) {
        drop(frame);
        if let Some(mut buf) = ctx.alloc(arp::MIN_FRAME_LEN) {
            if arp::emit_arp_frame(&repr, buf.as_mut()).is_some() {
                ctx.counters.arp_replies += 1;
                ctx.send(buf);
            }
        }
    }
}

fn handle_icmp<P: Port>(ctx: &mut PortContext<'_, P>, frame: P::Buf) {
    // Echo requests to our own address only: broadcast pings are not answered (as Linux
    // does by default), so a reply's source is always our address.
    let req = icmp::parse_echo_request(frame.as_ref()).filter(|r| Some(r.dst_ip) == ctx.ipv4());
    let Some(req) = req else {
        ctx.counters.unhandled += 1;
        return;
    };
    let mac = ctx.port.info().mac;
    let Some(mut buf) = ctx.alloc(req.reply_len()) else {
        return;
    };
    if icmp::emit_echo_reply(&req, mac, buf.as_mut()) {
        ctx.counters.echo_replies += 1;
        ctx.send(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::heap::HeapBuf;
    use crate::port::soft_pair::{soft_pair, SoftPort};
    use crate::test_frames::{self, OUR_IP, OUR_MAC, PEER_IP, PEER_MAC, TO_US};
    use smoltcp::wire::{ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame};

    const GW_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 254);

    fn setup<H: Handler<SoftPort>>(h: H) -> (PollLoop<SoftPort, H>, SoftPort) {
        let info = |n: &str, mac| PortInfo {
            name: n.into(),
            mac,
            mtu: 1500,
        };
        let (dp, peer) = soft_pair(info("dp", OUR_MAC), info("peer", PEER_MAC), 64);
        let mut l = PollLoop::new(h, 32);
        l.add_port(
            dp,
            PortAddr {
                ipv4: Some(Ipv4Cidr {
                    addr: OUR_IP,
                    prefix: 24,
                }),
                gateway: Some(GW_IP),
                promiscuous: false,
            },
        );
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
        arp::emit_arp_frame(&arp::request(PEER_MAC, PEER_IP, OUR_IP), &mut f).unwrap();
        f
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
        let req = icmp::parse_echo_request(&ping).unwrap();
        let mut want = vec![0u8; req.reply_len()];
        icmp::emit_echo_reply(&req, OUR_MAC, &mut want);
        assert_eq!(out[1], want);

        let c = l.counters(0);
        assert_eq!(c.rx, 3);
        assert_eq!(c.class(FrameClass::Arp), 1);
        assert_eq!(c.class(FrameClass::Icmp), 1);
        assert_eq!(c.malformed(), 1);
        assert_eq!((c.arp_replies, c.echo_replies, c.tx), (1, 1, 2));
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

    /// A handler that sends one small IPv4 packet to each queued destination per poll.
    #[derive(Default)]
    struct Sender {
        dsts: Vec<Ipv4Addr>,
        outcomes: Vec<Option<SendOutcome>>,
    }

    impl Emitter for Sender {
        fn emit(&mut self, ctx: &mut PortContext<'_, SoftPort>) {
            use smoltcp::phy::ChecksumCapabilities;
            use smoltcp::wire::{IpProtocol, Ipv4Packet, Ipv4Repr};
            for &dst in &self.dsts {
                let out = ctx.send_ip(|buf| {
                    let repr = Ipv4Repr {
                        src_addr: OUR_IP,
                        dst_addr: dst,
                        next_header: IpProtocol::Udp,
                        payload_len: 0,
                        hop_limit: 64,
                    };
                    let mut p = Ipv4Packet::new_unchecked(&mut buf[..20]);
                    repr.emit(&mut p, &ChecksumCapabilities::default());
                    Some((dst.into(), 20))
                });
                self.outcomes.push(out);
            }
            // Nothing to write: no frame, and the buffer is kept for the next call.
            assert_eq!(ctx.send_ip(|_| None), None);
        }
    }

    fn arp_reply_from(ip: Ipv4Addr, mac: [u8; 6]) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        arp::emit_arp_frame(&test_frames::arp_reply_to_us(mac, ip), &mut f).unwrap();
        f
    }

    #[test]
    fn send_ip_routes_on_link_and_via_gateway() {
        let off_link = Ipv4Addr::new(192, 0, 2, 9);
        let (mut l, mut peer) = setup(Sender {
            dsts: vec![PEER_IP, off_link],
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

    /// A loop whose handler sent one packet to the (unresolved) peer at the returned time,
    /// and nothing after.
    fn one_packet_held_for_peer() -> (PollLoop<SoftPort, Sender>, SoftPort, Instant) {
        let (mut l, peer) = setup(Sender {
            dsts: vec![PEER_IP],
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
        l.poll_once(t0 + arp::REQUEST_INTERVAL / 2);
        assert!(recv(&mut peer).is_empty());
        l.poll_once(t0 + arp::REQUEST_INTERVAL);
        let out = recv(&mut peer);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][12..14], &[0x08, 0x06]);
        assert_eq!(&out[0][38..42], &PEER_IP.octets());
        assert_eq!(l.counters(0).arp_requests, 2);
        // The reply releases the held packet without the handler sending again.
        send(&mut peer, &arp_reply_from(PEER_IP, PEER_MAC));
        l.poll_once(t0 + arp::REQUEST_INTERVAL);
        let out = recv(&mut peer);
        assert_eq!(out.len(), 1);
        assert_eq!(&out[0][0..6], &PEER_MAC);
        assert_eq!(&out[0][6..12], &OUR_MAC);
        assert_eq!(&out[0][12..14], &[0x08, 0x00]);
        assert_eq!(&out[0][30..34], &PEER_IP.octets());
        l.poll_once(t0 + 3 * arp::REQUEST_INTERVAL);
        assert!(recv(&mut peer).is_empty(), "nothing held any more");
    }

    #[test]
    fn unresolved_packet_is_dropped_after_arp_attempts() {
        let (mut l, mut peer, t0) = one_packet_held_for_peer();
        // RFC 826 gives no retry policy; ours: ARP_ATTEMPTS requests a second apart.
        let mut requests = recv(&mut peer).len();
        for k in 1..ARP_ATTEMPTS {
            l.poll_once(t0 + arp::REQUEST_INTERVAL * k);
            requests += recv(&mut peer).len();
            assert_eq!(l.counters(0).arp_failures, 0, "still trying after {k} s");
        }
        assert_eq!(requests, ARP_ATTEMPTS as usize);
        // No reply within an interval of the last request: the packet is dropped, once.
        l.poll_once(t0 + arp::REQUEST_INTERVAL * ARP_ATTEMPTS);
        assert!(recv(&mut peer).is_empty(), "no further request");
        let c = l.counters(0);
        assert_eq!(
            (c.arp_failures, c.arp_requests),
            (1, u64::from(ARP_ATTEMPTS))
        );
        l.poll_once(t0 + arp::REQUEST_INTERVAL * (ARP_ATTEMPTS + 5));
        assert!(recv(&mut peer).is_empty(), "nothing held any more");
        assert_eq!(l.counters(0).arp_failures, 1);
        // A late reply sends nothing: the packet is gone.
        send(&mut peer, &arp_reply_from(PEER_IP, PEER_MAC));
        l.poll_once(t0 + arp::REQUEST_INTERVAL * (ARP_ATTEMPTS + 5));
        assert!(recv(&mut peer).is_empty());
        // The sender's next packet to the neighbour starts over, and now goes out.
        l.handler_mut().dsts.push(PEER_IP);
        l.poll_once(t0 + arp::REQUEST_INTERVAL * (ARP_ATTEMPTS + 6));
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
}
