//! Simulation harness: two `tcp::Engine<iwarp::conn::Connection, SimpleMemory>`, each with
//! its node's memory, joined by a `tcp::sim::Link` (delay, loss, reordering, duplication
//! and a packet-rewriting hook).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use iwarp::conn::{ConnConfig, ConnEvent, Connection, LlpRequest};
use iwarp::mem::{Access, PdId, RegionSpec, STag, SimpleMemory};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tcp::sim::Link;
pub use tcp::sim::{refresh_tcp_checksum, LinkConfig, Side};
use tcp::{CloseReason, Config, ConnId, Engine, Event, Instant};

pub type Conn = Connection;

pub const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const PORT: u16 = 7174;
pub const PD: PdId = PdId(1);

/// The conn tests' link: 20 µs one way, no rate limit, no impairment.
pub fn clean_link() -> LinkConfig {
    LinkConfig {
        delay: Duration::from_micros(20),
        rate_bps: None,
        duplicate_spread: Duration::from_micros(30),
        reorder_extra: Duration::from_micros(60),
        ..LinkConfig::default()
    }
}

/// [`clean_link`] with 1 % loss, 1 % duplication and 5 % reordering.
pub fn lossy_link() -> LinkConfig {
    LinkConfig {
        loss: 0.01,
        duplicate: 0.01,
        reorder: 0.05,
        ..clean_link()
    }
}

/// What the responder's application answers to a Request.
#[derive(Clone, Debug)]
pub enum Decision {
    Accept(Vec<u8>),
    Reject(Vec<u8>),
    Ignore,
}

pub struct Node {
    pub engine: Engine<Conn, SimpleMemory>,
    /// The memory the node's connection places into and sends from (lent per call).
    pub mem: SimpleMemory,
    pub conn: Option<ConnId>,
    pub events: Vec<ConnEvent>,
    pub closed: Option<(CloseReason, Option<Conn>)>,
    pub peer_fin: bool,
    /// Most octets TCP held in its reassembly store at once (tcp::ConnInfo::rx_stored).
    pub max_rx_stored: usize,
}

impl Node {
    /// The connection (alive or handed back by TCP) and the memory it works with.
    fn parts(&mut self) -> Option<(&mut Conn, &mut SimpleMemory)> {
        let conn = match self.conn {
            Some(id) if self.engine.ulp(id).is_some() => self.engine.ulp_mut(id),
            _ => self.closed.as_mut().and_then(|(_, c)| c.as_mut()),
        };
        Some((conn?, &mut self.mem))
    }
}

pub struct Sim {
    pub now: Instant,
    pub nodes: [Node; 2],
    /// The link; its rewrite hook sees every packet either node sends.
    pub link: Link,
    pub decision: Decision,
    resp: Option<ConnConfig>,
    /// Room for one packet of the engines' MTU.
    tx_buf: Vec<u8>,
}

pub fn tcp_config(secret: u8) -> Config {
    Config {
        isn_secret: [secret; 16],
        ..Config::default()
    }
}

pub fn rights() -> Access {
    Access::LOCAL_READ
        | Access::LOCAL_WRITE
        | Access::REMOTE_READ
        | Access::REMOTE_WRITE
        | Access::REMOTE_ATOMIC
}

/// A heap memory of `len` octets with one region covering it all.
pub fn memory(len: usize) -> (SimpleMemory, STag) {
    let mut m = SimpleMemory::with_heap(len);
    let stag = m
        .register(RegionSpec::new(0, len as u64, rights(), PD))
        .expect("region");
    (m, stag)
}

pub fn conn_config(mpa: iwarp::mpa::MpaConfig) -> ConnConfig {
    ConnConfig {
        pd: PD,
        ..ConnConfig::new(mpa)
    }
}

impl Sim {
    /// A connects to B; B accepts with `decision`.
    pub fn new(
        seed: u64,
        link: LinkConfig,
        (cfg_a, mem_a): (ConnConfig, SimpleMemory),
        (cfg_b, mem_b): (ConnConfig, SimpleMemory),
        decision: Decision,
    ) -> Self {
        Self::with_mtu(
            Config::default().mtu,
            seed,
            link,
            (cfg_a, mem_a),
            (cfg_b, mem_b),
            decision,
        )
    }

    /// [`Sim::new`] with both TCP engines at `mtu` (their MSS follows it).
    pub fn with_mtu(
        mtu: usize,
        seed: u64,
        link: LinkConfig,
        (cfg_a, mem_a): (ConnConfig, SimpleMemory),
        (cfg_b, mem_b): (ConnConfig, SimpleMemory),
        decision: Decision,
    ) -> Self {
        let now = Instant::from_millis(1);
        let mut a = Engine::new(Config {
            mtu,
            ..tcp_config(1)
        });
        let mut b = Engine::new(Config {
            mtu,
            ..tcp_config(2)
        });
        b.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, PORT), 16)
            .expect("listen");
        let ca = Connection::initiator(cfg_a, now).expect("initiator");
        let id = a
            .connect(
                now,
                SocketAddrV4::new(A_IP, 0),
                SocketAddrV4::new(B_IP, PORT),
                ca,
            )
            .expect("connect");
        let node = |engine, mem, conn| Node {
            engine,
            mem,
            conn,
            events: Vec::new(),
            closed: None,
            peer_fin: false,
            max_rx_stored: 0,
        };
        Sim {
            now,
            nodes: [node(a, mem_a, Some(id)), node(b, mem_b, None)],
            link: Link::new(link, seed),
            decision,
            resp: Some(cfg_b),
            tx_buf: vec![0; mtu],
        }
    }

    /// The connection of `side`, alive or handed back by TCP.
    pub fn conn(&mut self, side: Side) -> Option<&mut Conn> {
        self.nodes[side.index()].parts().map(|(c, _)| c)
    }

    /// The memory of `side`.
    pub fn mem(&self, side: Side) -> &SimpleMemory {
        &self.nodes[side.index()].mem
    }

    /// The memory of `side`, mutably.
    pub fn mem_mut(&mut self, side: Side) -> &mut SimpleMemory {
        &mut self.nodes[side.index()].mem
    }

    /// Runs `f` on the connection of `side` (alive or handed back by TCP) with the node's
    /// memory and the current time: for the calls that need both (post_send, close, ...).
    /// Panics if `side` has no connection.
    pub fn with_conn<R>(
        &mut self,
        side: Side,
        f: impl FnOnce(&mut Conn, &mut SimpleMemory, Instant) -> R,
    ) -> R {
        let now = self.now;
        let (conn, mem) = self.nodes[side.index()]
            .parts()
            .unwrap_or_else(|| panic!("{side:?} has no connection"));
        f(conn, mem, now)
    }

    pub fn events(&self, side: Side) -> &[ConnEvent] {
        &self.nodes[side.index()].events
    }

    fn flush(&mut self) {
        let buf = &mut self.tx_buf;
        for side in [Side::A, Side::B] {
            loop {
                let now = self.now;
                let n = &mut self.nodes[side.index()];
                let Some(t) = n.engine.poll_transmit(now, &mut n.mem, buf) else {
                    break;
                };
                self.link.send(now, side, buf[..t.len].to_vec());
            }
        }
    }

    /// Tcp events, connection events, decisions and LLP requests.
    fn service(&mut self) {
        let t = self.now;
        for side in [Side::A, Side::B] {
            self.tcp_events(side, t);
            let node = &mut self.nodes[side.index()];
            let Some(id) = node.conn else { continue };
            let mut requests = Vec::new();
            if let Some(c) = node.engine.ulp_mut(id) {
                while let Some(e) = c.poll_event() {
                    if let ConnEvent::ConnectRequest(_) = &e {
                        match &self.decision {
                            // A refused accept is reported as an event too.
                            Decision::Accept(pd) => {
                                let _ = c.accept(t, &mut node.mem, pd);
                            }
                            Decision::Reject(pd) => c.reject(pd).expect("reject"),
                            Decision::Ignore => {}
                        }
                    }
                    node.events.push(e);
                }
                while let Some(r) = c.poll_llp_request() {
                    requests.push(r);
                }
            }
            for r in requests {
                let _ = match r {
                    LlpRequest::Close => node.engine.close(id),
                    LlpRequest::Reset => node.engine.abort(id),
                };
            }
            self.tcp_events(side, t);
        }
    }

    fn tcp_events(&mut self, side: Side, t: Instant) {
        let node = &mut self.nodes[side.index()];
        while let Some(ev) = node.engine.poll_event() {
            match ev {
                Event::Accepted { conn, .. } => {
                    if let Some(cfg) = self.resp.take() {
                        let c = Connection::responder(cfg, t).expect("responder");
                        node.engine
                            .attach(t, &mut node.mem, conn, c)
                            .expect("attach");
                        node.conn = Some(conn);
                    }
                }
                Event::PeerClosed(id) => {
                    node.peer_fin = true;
                    if let Some(c) = node.engine.ulp_mut(id) {
                        c.handle_llp_closed(t, &node.mem, true);
                    }
                }
                Event::Closed {
                    reason, mut ulp, ..
                } => {
                    if let Some(c) = ulp.as_mut() {
                        // Both FINs exchanged: graceful; otherwise reset or lost.
                        c.handle_llp_closed(t, &node.mem, reason == CloseReason::Normal);
                        while let Some(e) = c.poll_event() {
                            node.events.push(e);
                        }
                    }
                    node.closed = Some((reason, ulp));
                }
                Event::Connected(_) => {}
            }
        }
    }

    fn conn_timeout(&self, side: Side) -> Option<Instant> {
        let n = &self.nodes[side.index()];
        let id = n.conn?;
        n.engine.ulp(id)?.poll_timeout().map(|t| t.max(self.now))
    }

    /// Advances to the next arrival or timer. False when nothing is left to do.
    pub fn step(&mut self) -> bool {
        self.service();
        self.flush();
        let next = [
            self.link.next_due(),
            self.nodes[0].engine.poll_timeout(),
            self.nodes[1].engine.poll_timeout(),
            self.conn_timeout(Side::A),
            self.conn_timeout(Side::B),
        ];
        let Some(t) = next.into_iter().flatten().min() else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.now;
        while let Some(p) = self.link.poll_delivery(now) {
            let n = &mut self.nodes[p.to.index()];
            let _ = n.engine.handle_packet(now, &mut n.mem, &p.bytes);
        }
        for side in [Side::A, Side::B] {
            let n = &mut self.nodes[side.index()];
            if let Some(info) = n.conn.and_then(|id| n.engine.info(id)) {
                n.max_rx_stored = n.max_rx_stored.max(info.rx_stored);
            }
            n.engine.handle_timeout(now);
            if let Some(c) = n.conn.and_then(|id| n.engine.ulp_mut(id)) {
                c.handle_timeout(now, &n.mem);
            }
        }
        self.service();
        self.flush();
        true
    }

    /// Steps until `done` or until `limit` of simulated time passed. Returns `done`.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Sim) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if self.now > end || !self.step() {
                return done(self);
            }
        }
    }

    pub fn established(&self, side: Side) -> bool {
        self.events(side)
            .iter()
            .any(|e| matches!(e, ConnEvent::Established(_)))
    }
}

/// Deterministic pseudo-random bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}

/// FNV-1a, to compare large buffers by hash.
pub fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Parsed view of an IPv4/TCP packet built by the TCP engine (no IP options).
pub struct TcpView {
    pub ip_header: usize,
    pub tcp_header: usize,
}

impl TcpView {
    pub fn parse(p: &[u8]) -> Option<TcpView> {
        if p.len() < 40 || p[0] >> 4 != 4 || p[9] != 6 {
            return None;
        }
        let ip_header = usize::from(p[0] & 0x0f) * 4;
        let tcp_header = usize::from(p.get(ip_header + 12)? >> 4) * 4;
        Some(TcpView {
            ip_header,
            tcp_header,
        })
    }

    pub fn payload_start(&self) -> usize {
        self.ip_header + self.tcp_header
    }
}
