//! The sans-IO TCP engine's segment input (RFC 9293, RFC 7323, RFC 2018): a listener, an
//! established passive connection, optionally an active open, and a peer that sends
//! arbitrary segments (near or far from the connections' sequence spaces, any flags and
//! options, valid checksums) or raw packets, while time passes and the application
//! writes, reads and closes.
//!
//! Checked: no panic; every packet the engine sends parses with valid checksums; the MPA
//! hook contract holds (no byte offered to `on_segment` twice, no byte consumed or
//! delivered twice, everything below RCV.NXT delivered).
//!
//! Input: `[config][ops...]`; each op starts with a code byte (`code % 4`, see
//! `iwarp_fuzz::format::tcp`); segments whose code byte has its top bit set arrive together
//! in one receive burst (`Engine::begin_burst`), where in-order data takes the run entry.
#![no_main]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use iwarp_fuzz::format::tcp::*;
use iwarp_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{IpAddress, Ipv4Packet, Ipv4Repr, TcpPacket, TcpRepr};
use tcp::{Config, ConnId, Consumed, Engine, Event, Instant, SegmentSink, SegmentSource, Unit};

const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const LISTEN_PORT: u16 = 5000;
const PEER_PORT: u16 = 33000;
const ACTIVE_PORT: u16 = 6000;

thread_local! {
    /// How the sinks consume offered segments (set by the input).
    static POLICY: Cell<u8> = const { Cell::new(0) };
}

/// Disjoint ranges of relative stream positions.
#[derive(Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    fn insert(&mut self, s: u64, e: u64, what: &str) {
        if s >= e {
            return;
        }
        if let Some((&ps, &pe)) = self.0.range(..e).next_back() {
            assert!(pe <= s, "{what}: [{s}, {e}) overlaps [{ps}, {pe})");
        }
        let mut s2 = s;
        let mut e2 = e;
        if let Some((&ps, &pe)) = self.0.range(..=s).next_back() {
            if pe == s {
                s2 = ps;
                self.0.remove(&ps);
            }
        }
        if let Some(&ne) = self.0.get(&e) {
            e2 = ne;
            self.0.remove(&e);
        }
        self.0.insert(s2, e2);
    }
}

/// A ULP that checks the segment hook contract and sends what the application writes.
#[derive(Default)]
struct CheckingUlp {
    base: Option<u32>,
    offered: Ranges,
    delivered: Ranges,
    tx: Vec<u8>,
    window: usize,
}

impl CheckingUlp {
    fn new(window: usize) -> Self {
        CheckingUlp {
            window,
            ..CheckingUlp::default()
        }
    }

    fn rel(&mut self, seq: u32) -> u64 {
        let base = *self.base.get_or_insert(seq.wrapping_sub(1 << 30));
        u64::from(seq.wrapping_sub(base))
    }
}

impl SegmentSink for CheckingUlp {
    fn on_segment(
        &mut self,
        _cx: &mut (),
        _now: Instant,
        seq: u32,
        payload: &[u8],
        in_order: bool,
        rcv_nxt: u32,
    ) -> Consumed {
        assert_eq!(in_order, seq == rcv_nxt, "in_order flag");
        let s = self.rel(seq);
        let e = s + payload.len() as u64;
        self.offered.insert(s, e, "offered twice");
        let n = payload.len();
        let policy = POLICY.with(Cell::get);
        let mut c = Consumed::none();
        match policy % 4 {
            0 => {}
            1 => c = Consumed::all(n),
            2 => c = Consumed::prefix(n / 2),
            _ => {
                // Two inner ranges, as an MPA receiver placing FPDUs in the middle does.
                let a = n / 4;
                let _ = c.push(a..a + n / 8);
                let _ = c.push(n / 2..n / 2 + n / 4);
            }
        }
        for r in c.iter() {
            self.delivered
                .insert(s + r.start as u64, s + r.end as u64, "consumed twice");
        }
        c
    }

    fn on_in_order(&mut self, _cx: &mut (), _now: Instant, seq: u32, bytes: &[u8]) {
        let s = self.rel(seq);
        self.delivered
            .insert(s, s + bytes.len() as u64, "delivered twice");
    }

    fn on_advance(&mut self, _cx: &mut (), _now: Instant, rcv_nxt: u32) {
        let r = self.rel(rcv_nxt);
        if let Some((&s, &e)) = self.delivered.0.iter().next() {
            // Everything before RCV.NXT was placed or delivered (a FIN takes one number).
            assert!(
                s >= r || e + 1 >= r,
                "gap before RCV.NXT: [{s}, {e}) vs {r}"
            );
        }
    }

    fn rx_window(&self) -> usize {
        self.window
    }
}

impl SegmentSource for CheckingUlp {
    fn next_unit(
        &mut self,
        _cx: &mut (),
        _now: Instant,
        _seq: u32,
        max_len: usize,
    ) -> Option<Unit> {
        if self.tx.is_empty() || max_len == 0 {
            return None;
        }
        let n = self.tx.len().min(max_len);
        Some(Unit::new(self.tx.drain(..n).collect()))
    }

    fn pending(&self) -> bool {
        !self.tx.is_empty()
    }
}

/// The peer's view of one connection.
struct PeerConn {
    local_port: u16,
    remote_port: u16,
    snd: u32,
    rcv: u32,
    tsval: u32,
    peer_tsval: u32,
}

struct World {
    engine: Engine<CheckingUlp>,
    now: Instant,
    conns: Vec<PeerConn>,
    window: usize,
    accepted: Vec<ConnId>,
    verify: bool,
}

fn checksum(mut sum: u32, data: &[u8]) -> u32 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 + TCP packet with valid checksums. `options` is padded to a multiple of 4.
#[allow(clippy::too_many_arguments)]
fn packet(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let opt_len = options.len().min(40).div_ceil(4) * 4;
    let tcp_len = 20 + opt_len + payload.len();
    let total = 20 + tcp_len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&src.ip().octets());
    p[16..20].copy_from_slice(&dst.ip().octets());
    let c = fold(checksum(0, &p[..20]));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let t = &mut p[20..];
    t[0..2].copy_from_slice(&src.port().to_be_bytes());
    t[2..4].copy_from_slice(&dst.port().to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = (((20 + opt_len) / 4) as u8) << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&window.to_be_bytes());
    let n = options.len().min(40);
    t[20..20 + n].copy_from_slice(&options[..n]);
    t[20 + opt_len..].copy_from_slice(payload);
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&src.ip().octets());
    pseudo.extend_from_slice(&dst.ip().octets());
    pseudo.extend_from_slice(&[0, 6]);
    pseudo.extend_from_slice(&(tcp_len as u16).to_be_bytes());
    let c = fold(checksum(checksum(0, &pseudo), t));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    p
}

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

impl World {
    fn new(cfg_bits: u8, window: u16) -> World {
        let cfg = Config {
            isn_secret: [3; 16],
            sack: cfg_bits & 1 != 0,
            timestamps: cfg_bits & 2 != 0,
            window_scale: (cfg_bits >> 2) & 0x0f,
            verify_checksums: cfg_bits & 0x40 == 0,
            max_connections: 8,
            mtu: if cfg_bits & 0x80 != 0 { 576 } else { 1500 },
            ..Config::default()
        };
        let verify = cfg.verify_checksums;
        let mut engine = Engine::new(cfg);
        engine
            .listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, LISTEN_PORT), 4)
            .expect("listen");
        let mut w = World {
            engine,
            now: Instant::from_millis(10),
            conns: Vec::new(),
            window: usize::from(window) * 16,
            accepted: Vec::new(),
            verify,
        };
        // Passive open by the peer, with every option.
        w.conns.push(PeerConn {
            local_port: LISTEN_PORT,
            remote_port: PEER_PORT,
            snd: 7000,
            rcv: 0,
            tsval: 1000,
            peer_tsval: 0,
        });
        let opts = [
            2, 4, 0x05, 0xb4, 3, 3, 7, 4, 2, 8, 10, 0, 0, 3, 0xe8, 0, 0, 0, 0, 1, 1,
        ];
        let syn = w.build(0, SYN, 0, 0, 65535, &opts, &[]);
        w.conns[0].snd = w.conns[0].snd.wrapping_add(1);
        w.input(&syn);
        w.output();
        let ack = w.build(0, ACK, 0, 0, 65535, &[], &[]);
        w.input(&ack);
        w.output();
        w
    }

    fn addrs(&self, i: usize) -> (SocketAddrV4, SocketAddrV4) {
        let c = &self.conns[i];
        (
            SocketAddrV4::new(PEER, c.remote_port),
            SocketAddrV4::new(LOCAL, c.local_port),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        &self,
        i: usize,
        flags: u8,
        dseq: i32,
        dack: i32,
        window: u16,
        options: &[u8],
        payload: &[u8],
    ) -> Vec<u8> {
        let c = &self.conns[i];
        let (src, dst) = self.addrs(i);
        packet(
            src,
            dst,
            c.snd.wrapping_add(dseq as u32),
            c.rcv.wrapping_add(dack as u32),
            flags,
            window,
            options,
            payload,
        )
    }

    fn input(&mut self, p: &[u8]) {
        let _ = self.engine.handle_packet(self.now, &mut (), p);
    }

    /// Drains the engine: every packet must be well formed; the peer learns RCV.NXT.
    fn output(&mut self) {
        let caps = ChecksumCapabilities::default();
        let mut buf = vec![0u8; 1500];
        let mut n = 0;
        while let Some(t) = self.engine.poll_transmit(self.now, &mut (), &mut buf) {
            n += 1;
            assert!(n < 100_000, "engine keeps transmitting at one instant");
            let bytes = &buf[..t.len];
            let ip = Ipv4Packet::new_checked(bytes).expect("IPv4 header");
            let ipr = Ipv4Repr::parse(&ip, &caps).expect("IPv4 header checksum");
            let tcp = TcpPacket::new_checked(ip.payload()).expect("TCP header");
            let r = TcpRepr::parse(
                &tcp,
                &IpAddress::Ipv4(ipr.src_addr),
                &IpAddress::Ipv4(ipr.dst_addr),
                &caps,
            )
            .expect("TCP segment and checksum");
            let seq = r.seq_number.0 as u32;
            let end = seq.wrapping_add(r.segment_len() as u32);
            if let Some(ts) = r.timestamp {
                for c in &mut self.conns {
                    if c.local_port == r.src_port && c.remote_port == r.dst_port {
                        c.peer_tsval = ts.tsval;
                    }
                }
            }
            for c in &mut self.conns {
                if c.local_port == r.src_port && c.remote_port == r.dst_port {
                    if tcp.syn() {
                        c.rcv = seq.wrapping_add(1);
                    }
                    if (end.wrapping_sub(c.rcv) as i32) > 0 {
                        c.rcv = end;
                    }
                }
            }
            // An active open: the peer learns its local port from the SYN.
            if tcp.syn() && !tcp.ack() && r.dst_port == ACTIVE_PORT {
                if let Some(c) = self.conns.get_mut(1) {
                    c.local_port = r.src_port;
                    c.rcv = seq.wrapping_add(1);
                }
            }
        }
        while let Some(ev) = self.engine.poll_event() {
            if let Event::Accepted { conn, .. } = ev {
                let _ = self
                    .engine
                    .attach(self.now, &mut (), conn, CheckingUlp::new(self.window));
                self.accepted.push(conn);
            }
        }
    }

    fn options(&self, i: usize, input: &mut Input<'_>) -> Vec<u8> {
        let sel = input.u8();
        if sel & 0x80 != 0 {
            let n = usize::from(sel & 0x3f).min(40);
            return input.bytes(n).to_vec();
        }
        let c = &self.conns[i];
        let mut o = Vec::new();
        if sel & 1 != 0 {
            o.extend_from_slice(&[2, 4]);
            o.extend_from_slice(&input.u16().to_be_bytes());
        }
        if sel & 2 != 0 {
            o.extend_from_slice(&[3, 3, input.u8() % 16]);
        }
        if sel & 4 != 0 {
            o.extend_from_slice(&[4, 2]);
        }
        if sel & 8 != 0 {
            o.extend_from_slice(&[8, 10]);
            o.extend_from_slice(&c.tsval.wrapping_add(u32::from(input.u8())).to_be_bytes());
            o.extend_from_slice(&c.peer_tsval.to_be_bytes());
        }
        if sel & 0x10 != 0 {
            let blocks = 1 + usize::from(input.u8() % 3);
            o.extend_from_slice(&[5, 2 + 8 * blocks as u8]);
            for _ in 0..blocks {
                let l = c.rcv.wrapping_add(u32::from(input.u16()));
                let r = l.wrapping_add(u32::from(input.u16()));
                o.extend_from_slice(&l.to_be_bytes());
                o.extend_from_slice(&r.to_be_bytes());
            }
        }
        o
    }

    fn segment(&mut self, input: &mut Input<'_>) {
        let target = input.u8();
        let i = usize::from(target % 4).min(self.conns.len() - 1);
        let flags = input.u8();
        let near = |v: u16| -> i32 {
            // Mostly near the expected number, sometimes anywhere in the window's reach.
            if v & 0x8000 == 0 {
                i32::from(v as i16 >> 4)
            } else {
                i32::from(v as i16) * 1024
            }
        };
        let dseq = near(input.u16());
        let dack = near(input.u16());
        let window = input.u16();
        let options = self.options(i, input);
        let payload = input.chunk(1400).to_vec();
        let mut p = self.build(i, flags, dseq, dack, window, &options, &payload);
        if target & 0x10 != 0 {
            // Another source port: a new connection attempt or a stray segment.
            let port = u16::from(input.u8()) + 40000;
            p[20..22].copy_from_slice(&port.to_be_bytes());
        }
        if target & 0x20 != 0 && !self.verify {
            // Checksums are not verified: a corrupted header byte.
            let at = 20 + usize::from(input.u8()) % 20;
            p[at] ^= input.u8();
        }
        if dseq == 0 && target & 0x10 == 0 {
            let c = &mut self.conns[i];
            let len =
                payload.len() as u32 + u32::from(flags & SYN != 0) + u32::from(flags & FIN != 0);
            c.snd = c.snd.wrapping_add(len);
            c.tsval = c.tsval.wrapping_add(1);
        }
        self.input(&p);
    }

    fn app(&mut self, input: &mut Input<'_>) {
        let op = input.u8();
        let conn = self.accepted.first().copied();
        match op % 8 {
            0 => {
                let n = usize::from(input.u16() % 20_000);
                if let Some(u) = conn.and_then(|c| self.engine.ulp_mut(c)) {
                    u.tx.extend((0..n).map(|i| i as u8));
                }
                if let Some(c) = conn {
                    self.engine.wake(c);
                }
            }
            1 => {
                if let Some(c) = conn {
                    let _ = self.engine.close(c);
                }
            }
            2 => {
                if let Some(c) = conn {
                    let _ = self.engine.abort(c);
                }
            }
            3 => POLICY.with(|p| p.set(input.u8())),
            4 => {
                self.window = usize::from(input.u16()) * 16;
                if let Some(u) = conn.and_then(|c| self.engine.ulp_mut(c)) {
                    u.window = self.window;
                }
            }
            5 => {
                if self.conns.len() < 2 {
                    let r = self.engine.connect(
                        self.now,
                        SocketAddrV4::new(LOCAL, 0),
                        SocketAddrV4::new(PEER, ACTIVE_PORT),
                        CheckingUlp::new(self.window),
                    );
                    if let Ok(c) = r {
                        self.accepted.push(c);
                        self.conns.push(PeerConn {
                            local_port: 0,
                            remote_port: ACTIVE_PORT,
                            snd: 900_000,
                            rcv: 0,
                            tsval: 50,
                            peer_tsval: 0,
                        });
                    }
                }
            }
            6 => {
                let _ = self.engine.unlisten(LISTEN_PORT);
            }
            _ => {
                let _ = self.engine.stats();
                if let Some(c) = conn {
                    let _ = (self.engine.info(c), self.engine.state(c));
                }
            }
        }
    }

    fn advance(&mut self, ms: u64) {
        self.now = self.now + Duration::from_millis(ms);
        self.engine.handle_timeout(self.now);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    POLICY.with(|p| p.set(0));
    let mut w = World::new(input.u8(), input.u16());
    while !input.is_empty() {
        let code = input.u8();
        // A segment whose code has the top bit set joins a receive burst (the ground of the
        // engine's run entry), begun if none is open; any other operation ends it first, and
        // nothing is transmitted inside it.
        let burst = code % COUNT == SEGMENT && code & 0x80 != 0;
        if burst && !w.engine.in_burst() {
            w.engine.begin_burst();
        }
        if !burst && w.engine.in_burst() {
            w.engine.end_burst(w.now, &mut ());
            w.output();
        }
        match code % COUNT {
            SEGMENT => w.segment(&mut input),
            RAW => {
                let p = input.chunk(1600).to_vec();
                w.input(&p);
                let _ = w.engine.handle_tcp(w.now, &mut (), PEER, LOCAL, &p);
            }
            ADVANCE => {
                let b = input.u8();
                let ms = if b & 0x80 != 0 {
                    u64::from(b & 0x7f) * 1000
                } else {
                    u64::from(b)
                };
                w.advance(ms);
            }
            _ => w.app(&mut input),
        }
        if !burst {
            w.output();
        }
    }
    if w.engine.in_burst() {
        w.engine.end_burst(w.now, &mut ());
        w.output();
    }
    for _ in 0..4 {
        w.advance(30_000);
        w.output();
    }
});
