//! Deterministic simulation harness: two engines joined by a `tcp::sim::Link` (delay,
//! serialization rate, loss, reordering, duplication and corruption, all from a seeded PRNG).
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, TcpControl, TcpPacket,
    TcpRepr, TcpSeqNumber, TcpTimestampRepr,
};
pub use tcp::sim::{Link, LinkConfig, Side};
use tcp::{Config, ConnId, Engine, Event, Instant, StreamSocket, Ulp};

pub const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const B_PORT: u16 = 5000;

pub fn a_addr(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(A_IP, port)
}
pub fn b_addr() -> SocketAddrV4 {
    SocketAddrV4::new(B_IP, B_PORT)
}

pub const A_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 1);
pub const B_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x99, 0, 0, 0, 0, 0, 2);

pub fn a_addr6(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V6(A_IP6), port)
}
pub fn b_addr6() -> SocketAddr {
    SocketAddr::new(IpAddr::V6(B_IP6), B_PORT)
}

pub struct Sim<U> {
    pub now: Instant,
    pub a: Engine<U>,
    pub b: Engine<U>,
    pub link: Link,
    /// Corrupted packets the receiving engine refused.
    pub corrupted_rejected: u64,
    pub events: [Vec<Event<U>>; 2],
    /// Packets delivered intact (destination, bytes), when `record` is set.
    pub delivered: Vec<(Side, Vec<u8>)>,
    pub record: bool,
    pub accept: [Option<Box<dyn FnMut() -> U>>; 2],
    /// Transmit with `Engine::poll_transmit_gather` and this smallest payload, as a port
    /// that sends payloads from the engine's buffers does (the packet is put together for
    /// the link).
    pub gather: Option<usize>,
    /// Payloads lent beside their headers, by sender and sequence number: the address and
    /// length of the first of each.
    pub gathered: HashMap<(Side, u32), (usize, usize)>,
    /// The tokens of the payloads lent, with when: held as a port holds frames until its
    /// next burst, handed back at the start of the first flush `hold` after.
    pub lent: [Vec<(Instant, u64)>; 2],
    /// How long frames hold their payloads (nothing: until the next flush).
    pub hold: Duration,
    /// Write the headers into the room in front of a lent payload when it has some
    /// (`tcp::Lent::with_headers`), as a port sending the frame as one buffer does.
    pub whole_frames: bool,
    /// Frames sent as one buffer with the headers in the payload's room; of the lends made
    /// while a frame held the same unit's buffer, those offered no room (all must be).
    pub whole: (u64, u64, u64),
    /// Payloads handed out again at a sequence number (retransmissions), and of those the
    /// ones in the same buffer as the first.
    pub regathered: (u64, u64),
}

pub fn test_config() -> Config {
    Config {
        isn_secret: [3; 16],
        ..Config::default()
    }
}

impl<U: Ulp> Sim<U> {
    pub fn new(seed: u64, link: LinkConfig, cfg_a: Config, cfg_b: Config) -> Self {
        Sim {
            now: Instant::from_millis(1),
            a: Engine::new(cfg_a),
            b: Engine::new(cfg_b),
            link: Link::new(link, seed),
            corrupted_rejected: 0,
            events: [Vec::new(), Vec::new()],
            delivered: Vec::new(),
            record: false,
            accept: [None, None],
            gather: None,
            gathered: HashMap::new(),
            lent: [Vec::new(), Vec::new()],
            hold: Duration::ZERO,
            whole_frames: false,
            whole: (0, 0, 0),
            regathered: (0, 0),
        }
    }

    pub fn engine(&mut self, side: Side) -> &mut Engine<U> {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// Drop the packets (sent by `Side` at the time given, parsed) for which `f` returns
    /// false; the link counts them as dropped.
    pub fn set_filter(&mut self, mut f: impl FnMut(Instant, Side, &Seg) -> bool + 'static) {
        self.link.set_rewrite(move |now, side, bytes| {
            Seg::parse(bytes).is_none_or(|s| f(now, side, &s))
        });
    }

    fn flush(&mut self) {
        let mut buf = vec![0u8; 1500];
        for side in [Side::A, Side::B] {
            let (now, hold) = (self.now, self.hold);
            let lent = &mut self.lent[side as usize];
            let back: Vec<u64> = lent
                .iter()
                .filter(|(at, _)| now - *at >= hold)
                .map(|&(_, t)| t)
                .collect();
            lent.retain(|(at, _)| now - *at < hold);
            self.engine(side).payloads_returned(&mut (), back);
            for n in 0.. {
                assert!(n < 1_000_000, "engine keeps transmitting at one instant");
                let now = self.now;
                if let Some(min) = self.gather {
                    let held: Vec<u64> = self.lent[side as usize].iter().map(|x| x.1).collect();
                    let whole_frames = self.whole_frames;
                    let mut whole = self.whole;
                    let Some(t) =
                        self.engine(side)
                            .poll_transmit_gather(now, &mut (), &mut buf, min)
                    else {
                        break;
                    };
                    let mut packet = buf[..t.packet.len].to_vec();
                    let lent = t.payload.map(|mut p| {
                        let token = p.token();
                        let at = (p.payload().as_ptr() as usize, p.payload().len());
                        let payload = p.payload().to_vec();
                        packet.extend_from_slice(&payload);
                        if held.contains(&token) {
                            // Another frame holds this buffer: its headers must stay.
                            whole.1 += 1;
                            whole.2 += u64::from(p.headroom() == 0);
                        }
                        if whole_frames {
                            let hlen = t.packet.len;
                            if let Some(frame) = p.with_headers(&buf[..hlen]) {
                                assert_eq!(frame, &packet[..], "headers, then the payload");
                                assert_eq!(
                                    frame.as_ptr() as usize + hlen,
                                    at.0,
                                    "the headers right in front of the payload"
                                );
                                whole.0 += 1;
                            }
                        }
                        (token, at)
                    });
                    self.whole = whole;
                    if let Some((token, at)) = lent {
                        self.lent[side as usize].push((now, token));
                        let seq = Seg::parse(&packet).expect("a whole packet").seq;
                        match self.gathered.get(&(side, seq)) {
                            Some(&first) => {
                                self.regathered.0 += 1;
                                self.regathered.1 += u64::from(first == at);
                            }
                            None => {
                                self.gathered.insert((side, seq), at);
                            }
                        }
                    }
                    self.link.send(now, side, packet);
                    continue;
                }
                let Some(t) = self.engine(side).poll_transmit(now, &mut (), &mut buf) else {
                    break;
                };
                self.link.send(now, side, buf[..t.len].to_vec());
            }
        }
        self.drain_events();
    }

    fn drain_events(&mut self) {
        for side in [Side::A, Side::B] {
            while let Some(ev) = self.engine(side).poll_event() {
                if let Event::Accepted { conn, .. } = ev {
                    if let Some(f) = self.accept[side.index()].as_mut() {
                        let u = f();
                        let now = self.now;
                        self.engine(side)
                            .attach(now, &mut (), conn, u)
                            .expect("attach");
                    }
                }
                self.events[side.index()].push(ev);
            }
        }
    }

    /// Advance to the next packet arrival or timer and process it. False when idle.
    pub fn step(&mut self) -> bool {
        self.flush();
        let next = [
            self.link.next_due(),
            self.a.poll_timeout(),
            self.b.poll_timeout(),
        ];
        let Some(t) = next.into_iter().flatten().min() else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.now;
        while let Some(p) = self.link.poll_delivery(now) {
            if self.record && !p.corrupted {
                self.delivered.push((p.to, p.bytes.clone()));
            }
            let r = self.engine(p.to).handle_packet(now, &mut (), &p.bytes);
            if p.corrupted && r.is_err() {
                self.corrupted_rejected += 1;
            }
        }
        self.a.handle_timeout(now);
        self.b.handle_timeout(now);
        self.flush();
        true
    }

    /// Step until `done` holds or simulated time passes `limit`. Returns whether `done` held.
    pub fn run_until(&mut self, limit: Instant, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.now > limit || !self.step() {
                return done(self);
            }
        }
    }

    pub fn connected(&self, side: Side, conn: ConnId) -> bool {
        self.events[side.index()].iter().any(|e| match e {
            Event::Connected(c) => *c == conn,
            _ => false,
        })
    }

    pub fn accepted(&self, side: Side) -> Vec<ConnId> {
        self.events[side.index()]
            .iter()
            .filter_map(|e| match e {
                Event::Accepted { conn, .. } => Some(*conn),
                _ => None,
            })
            .collect()
    }

    pub fn peer_closed(&self, side: Side, conn: ConnId) -> bool {
        self.events[side.index()]
            .iter()
            .any(|e| matches!(e, Event::PeerClosed(c) if *c == conn))
    }

    pub fn closed_reason(&self, side: Side, conn: ConnId) -> Option<tcp::CloseReason> {
        self.events[side.index()].iter().find_map(|e| match e {
            Event::Closed {
                conn: c, reason, ..
            } if *c == conn => Some(*reason),
            _ => None,
        })
    }
}

impl Sim<StreamSocket> {
    /// A stream sim where B listens and auto-accepts with `StreamSocket`s.
    pub fn streams(seed: u64, link: LinkConfig, cfg_a: Config, cfg_b: Config, buf: usize) -> Self {
        let mut s = Sim::new(seed, link, cfg_a, cfg_b);
        s.b.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, B_PORT), 1024)
            .expect("listen");
        s.accept[1] = Some(Box::new(move || StreamSocket::new(buf, buf)));
        s
    }
}

/// Deterministic pseudo-random payload.
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}

/// Transfer `data` from A to B over stream sockets, A closing when done. Returns the bytes
/// B received and the simulated duration, or `None` if not finished before `limit`.
pub fn bulk_transfer(
    sim: &mut Sim<StreamSocket>,
    data: &[u8],
    buf: usize,
    limit: Duration,
) -> Option<(Vec<u8>, Duration)> {
    bulk_transfer_between(sim, a_addr(0).into(), b_addr().into(), data, buf, limit)
}

/// [`bulk_transfer`] from `local` to `remote` (either family).
pub fn bulk_transfer_between(
    sim: &mut Sim<StreamSocket>,
    local: SocketAddr,
    remote: SocketAddr,
    data: &[u8],
    buf: usize,
    limit: Duration,
) -> Option<(Vec<u8>, Duration)> {
    let start = sim.now;
    let a = sim
        .a
        .connect(sim.now, local, remote, StreamSocket::new(buf, buf))
        .expect("connect");
    let mut written = 0usize;
    let mut received = Vec::with_capacity(data.len());
    let mut closed = false;
    let deadline = start + limit;
    let ok = sim.run_until(deadline, |s| {
        if let Some(sock) = s.a.ulp_mut(a) {
            written += sock.write(&data[written..]);
        }
        if written == data.len() && !closed && s.a.state(a) == Some(tcp::State::Established) {
            s.a.close(a).expect("close");
            closed = true;
        }
        for c in s.accepted(Side::B) {
            if let Some(sock) = s.b.ulp_mut(c) {
                received.extend(sock.read_all());
            }
        }
        received.len() == data.len()
            && s.accepted(Side::B)
                .iter()
                .any(|&c| s.peer_closed(Side::B, c))
    });
    ok.then(|| (received, sim.now - start))
}

/// An owned, parsed segment.
#[derive(Clone, Debug)]
pub struct Seg {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub control: TcpControl,
    pub seq: u32,
    pub ack: Option<u32>,
    pub window: u16,
    pub wscale: Option<u8>,
    pub mss: Option<u16>,
    pub sack_permitted: bool,
    pub sack: Vec<(u32, u32)>,
    pub ts: Option<(u32, u32)>,
    pub payload: Vec<u8>,
}

impl Seg {
    /// Parses an IPv4 or IPv6 packet carrying TCP (checksums verified).
    pub fn parse(bytes: &[u8]) -> Option<Seg> {
        let caps = ChecksumCapabilities::default();
        let (src, dst, payload) = if bytes.first()? >> 4 == 6 {
            let ip = Ipv6Packet::new_checked(bytes).ok()?;
            let ipr = Ipv6Repr::parse(&ip).ok()?;
            if ipr.next_header != IpProtocol::Tcp {
                return None;
            }
            (
                IpAddr::V6(ipr.src_addr),
                IpAddr::V6(ipr.dst_addr),
                ip.payload(),
            )
        } else {
            let ip = Ipv4Packet::new_checked(bytes).ok()?;
            let ipr = Ipv4Repr::parse(&ip, &caps).ok()?;
            (
                IpAddr::V4(ipr.src_addr),
                IpAddr::V4(ipr.dst_addr),
                ip.payload(),
            )
        };
        let tcp = TcpPacket::new_checked(payload).ok()?;
        let r = TcpRepr::parse(&tcp, &IpAddress::from(src), &IpAddress::from(dst), &caps).ok()?;
        Some(Seg {
            src,
            dst,
            sport: r.src_port,
            dport: r.dst_port,
            control: r.control,
            seq: r.seq_number.0 as u32,
            ack: r.ack_number.map(|a| a.0 as u32),
            window: r.window_len,
            wscale: r.window_scale,
            mss: r.max_seg_size,
            sack_permitted: r.sack_permitted,
            sack: r.sack_ranges.iter().flatten().copied().collect(),
            ts: r.timestamp.map(|t| (t.tsval, t.tsecr)),
            payload: r.payload.to_vec(),
        })
    }

    /// A segment from `src` to `dst` with no options.
    pub fn new(
        src: impl Into<SocketAddr>,
        dst: impl Into<SocketAddr>,
        control: TcpControl,
        seq: u32,
        ack: Option<u32>,
    ) -> Seg {
        let (src, dst) = (src.into(), dst.into());
        Seg {
            src: src.ip(),
            dst: dst.ip(),
            sport: src.port(),
            dport: dst.port(),
            control,
            seq,
            ack,
            window: 65535,
            wscale: None,
            mss: None,
            sack_permitted: false,
            sack: Vec::new(),
            ts: None,
            payload: Vec::new(),
        }
    }

    pub fn emit(&self) -> Vec<u8> {
        let caps = ChecksumCapabilities::default();
        let mut sack = [None; 3];
        for (i, b) in self.sack.iter().take(3).enumerate() {
            sack[i] = Some(*b);
        }
        let r = TcpRepr {
            src_port: self.sport,
            dst_port: self.dport,
            control: self.control,
            seq_number: TcpSeqNumber(self.seq as i32),
            ack_number: self.ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: self.window,
            window_scale: self.wscale,
            max_seg_size: self.mss,
            sack_permitted: self.sack_permitted,
            sack_ranges: sack,
            timestamp: self.ts.map(|(a, b)| TcpTimestampRepr::new(a, b)),
            payload: &self.payload,
        };
        let hlen = tcp::ip_header_len(self.src);
        let mut buf = vec![0u8; hlen + r.buffer_len()];
        match (self.src, self.dst) {
            (IpAddr::V4(src_addr), IpAddr::V4(dst_addr)) => Ipv4Repr {
                src_addr,
                dst_addr,
                next_header: IpProtocol::Tcp,
                payload_len: r.buffer_len(),
                hop_limit: 64,
            }
            .emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]), &caps),
            (IpAddr::V6(src_addr), IpAddr::V6(dst_addr)) => Ipv6Repr {
                src_addr,
                dst_addr,
                next_header: IpProtocol::Tcp,
                payload_len: r.buffer_len(),
                hop_limit: 64,
            }
            .emit(&mut Ipv6Packet::new_unchecked(&mut buf[..])),
            _ => panic!("mixed address families"),
        }
        r.emit(
            &mut TcpPacket::new_unchecked(&mut buf[hlen..]),
            &IpAddress::from(self.src),
            &IpAddress::from(self.dst),
            &caps,
        );
        buf
    }
}

/// Drain every packet `engine` wants to send now, parsed.
pub fn drain<U: Ulp>(engine: &mut Engine<U>, now: Instant) -> Vec<Seg> {
    let mut buf = vec![0u8; 1500];
    let mut out = Vec::new();
    while let Some(t) = engine.poll_transmit(now, &mut (), &mut buf) {
        assert!(
            out.len() < 100_000,
            "engine keeps transmitting at one instant"
        );
        out.push(Seg::parse(&buf[..t.len]).expect("engine emits valid packets"));
    }
    out
}

/// A scripted peer (the "A" side, as raw segments) against one engine listening on
/// `b_addr()`.
pub struct RawPeer {
    pub e: Engine<StreamSocket>,
    pub now: Instant,
    pub me: SocketAddr,
    /// The engine's listening address the peer sends to.
    pub server: SocketAddr,
    /// Next sequence number the raw peer sends.
    pub snd: u32,
    /// Next sequence number expected from the engine.
    pub rcv: u32,
    pub conn: Option<ConnId>,
    /// Timestamps offered in the SYN (TSval sent next).
    pub tsval: Option<u32>,
    pub peer_tsval: u32,
    pub events: Vec<Event<StreamSocket>>,
}

impl RawPeer {
    pub fn new(cfg: Config) -> Self {
        Self::between(cfg, a_addr(33_000).into(), b_addr().into())
    }

    /// A raw peer at `me` sending to the engine listening (on any address) at `server`'s
    /// port.
    pub fn between(cfg: Config, me: SocketAddr, server: SocketAddr) -> Self {
        let mut e = Engine::new(cfg);
        e.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, server.port()), 16)
            .expect("listen");
        RawPeer {
            e,
            now: Instant::from_millis(10),
            me,
            server,
            snd: 7_000,
            rcv: 0,
            conn: None,
            tsval: None,
            peer_tsval: 0,
            events: Vec::new(),
        }
    }

    /// A segment from the raw peer at its current sequence state.
    pub fn seg(&self, control: TcpControl, payload: &[u8]) -> Seg {
        let mut s = Seg::new(self.me, self.server, control, self.snd, Some(self.rcv));
        s.payload = payload.to_vec();
        s.ts = self.tsval.map(|v| (v, self.peer_tsval));
        s
    }

    /// Deliver `seg` to the engine; return what the engine sends now.
    pub fn send(&mut self, seg: &Seg) -> Vec<Seg> {
        let _ = self.e.handle_packet(self.now, &mut (), &seg.emit());
        self.output()
    }

    /// Whatever the engine sends now, and pending events collected.
    pub fn output(&mut self) -> Vec<Seg> {
        let out = drain(&mut self.e, self.now);
        for s in &out {
            if let Some((v, _)) = s.ts {
                self.peer_tsval = v;
            }
        }
        while let Some(ev) = self.e.poll_event() {
            self.events.push(ev);
        }
        out
    }

    /// Advance time by `d`, running timers.
    pub fn advance(&mut self, d: Duration) -> Vec<Seg> {
        self.now = self.now + d;
        self.e.handle_timeout(self.now);
        self.output()
    }

    /// Three-way handshake (RFC 9293 §3.5); attaches a StreamSocket of `buf` bytes.
    pub fn handshake_with(
        &mut self,
        wscale: Option<u8>,
        ts: bool,
        sack: bool,
        buf: usize,
    ) -> ConnId {
        let mut syn = Seg::new(self.me, self.server, TcpControl::Syn, self.snd, None);
        syn.mss = Some(1460);
        syn.wscale = wscale;
        syn.sack_permitted = sack;
        if ts {
            self.tsval = Some(1_000);
            syn.ts = Some((1_000, 0));
        }
        let out = self.send(&syn);
        let synack = out
            .iter()
            .find(|s| s.control == TcpControl::Syn)
            .expect("SYN-ACK");
        assert_eq!(synack.ack, Some(self.snd.wrapping_add(1)));
        self.snd = self.snd.wrapping_add(1);
        self.rcv = synack.seq.wrapping_add(1);
        if let Some(v) = self.tsval.as_mut() {
            *v += 1;
        }
        let ack = self.seg(TcpControl::None, &[]);
        self.send(&ack);
        let conn = self
            .events
            .iter()
            .find_map(|e| match e {
                Event::Accepted { conn, .. } => Some(*conn),
                _ => None,
            })
            .expect("accepted");
        self.e
            .attach(self.now, &mut (), conn, StreamSocket::new(buf, buf))
            .expect("attach");
        self.conn = Some(conn);
        conn
    }

    pub fn handshake(&mut self) -> ConnId {
        self.handshake_with(Some(7), true, true, 1 << 20)
    }

    /// Send data at the current sequence number and advance it.
    pub fn send_data(&mut self, data: &[u8]) -> Vec<Seg> {
        let s = self.seg(TcpControl::Psh, data);
        self.snd = self.snd.wrapping_add(data.len() as u32);
        self.send(&s)
    }

    pub fn closed_reason(&self) -> Option<tcp::CloseReason> {
        self.events.iter().find_map(|e| match e {
            Event::Closed { reason, .. } => Some(*reason),
            _ => None,
        })
    }
}
