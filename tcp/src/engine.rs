//! The sans-IO engine: connection table (hashed 4-tuple lookup), listeners, timers and the
//! `handle_*` / `poll_*` API the data plane drives.

use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};

use rustc_hash::FxHashMap;
use smoltcp::wire::{IpProtocol, TcpControl, TcpRepr};

use crate::config::Config;
use crate::ip::{parse_ip, PacketError};
use crate::isn::IsnGenerator;
use crate::syn_cookie;
use crate::syn_hold::HeldSyns;
use crate::tcb::{CloseReason, ConnInfo, Holding, LossCounters, State, Tcb, TcbEvent};
use crate::time::Instant;
use crate::timer_wheel::TimerWheel;
use crate::tx::{Gather, Loans};
use crate::ulp::{Bound, Ulp};
use crate::wire::{checksum_caps, parse_segment, write_packet, Header};

mod run;

pub use crate::conn_id::ConnId;

/// A connection's addresses (both of one family).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FourTuple {
    /// Our address and port.
    pub local: SocketAddr,
    /// The peer's address and port.
    pub remote: SocketAddr,
}

/// The addresses and ports go to the hasher in one `write` (12 octets for IPv4, 36 for
/// IPv6): the engine's 4-tuple table hashes with keyed SipHash, which pays a buffering step
/// per `write`, and the derived `Hash` made a dozen of them (discriminants, octets, ports).
/// Tuples equal under `Eq` write the same octets (flow labels and scope ids, which `Eq`
/// also compares, are left out).
impl std::hash::Hash for FourTuple {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let ports = |a: &SocketAddr, b: &SocketAddr| {
            let mut p = [0u8; 4];
            p[..2].copy_from_slice(&a.port().to_ne_bytes());
            p[2..].copy_from_slice(&b.port().to_ne_bytes());
            p
        };
        match (self.local.ip(), self.remote.ip()) {
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                let mut b = [0u8; 12];
                b[..4].copy_from_slice(&l.octets());
                b[4..8].copy_from_slice(&r.octets());
                b[8..].copy_from_slice(&ports(&self.local, &self.remote));
                state.write(&b);
            }
            (l, r) => {
                let v6 = |a: IpAddr| match a {
                    IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                    IpAddr::V6(a) => a.octets(),
                };
                let mut b = [0u8; 36];
                b[..16].copy_from_slice(&v6(l));
                b[16..32].copy_from_slice(&v6(r));
                b[32..].copy_from_slice(&ports(&self.local, &self.remote));
                state.write(&b);
            }
        }
    }
}

/// Something the application must learn about.
#[derive(Debug)]
pub enum Event<U> {
    /// An active open completed.
    Connected(ConnId),
    /// A passive open completed; attach a ULP with [`Engine::attach`].
    Accepted {
        /// The new connection.
        conn: ConnId,
        /// Its addresses.
        tuple: FourTuple,
    },
    /// The peer sent FIN: no more data will arrive.
    PeerClosed(ConnId),
    /// The connection is over; the handle is no longer valid. The ULP is handed back.
    Closed {
        /// The connection.
        conn: ConnId,
        /// Why it ended.
        reason: CloseReason,
        /// The attached ULP, if any.
        ulp: Option<U>,
    },
}

/// One IPv4 or IPv6 packet written by [`Engine::poll_transmit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written at the start of the buffer.
    pub len: usize,
    /// Source address.
    pub src: IpAddr,
    /// Destination (the data plane resolves the next hop for it); its family is the
    /// packet's.
    pub dst: IpAddr,
}

/// A packet of [`Engine::poll_transmit_gather`]: its headers (or all of it) in the buffer,
/// and the payload that follows them when it was not copied there.
#[derive(Debug)]
pub struct GatherTransmit<'a> {
    /// The packet; `len` counts the octets in the buffer (without `payload`).
    pub packet: Transmit,
    /// The payload after the headers, lent.
    pub payload: Option<Lent<'a>>,
}

/// A payload the engine lends for one frame ([`Engine::poll_transmit_gather`]): the unit's
/// own buffer, which stays allocated at the same address and unchanged until
/// [`Lent::token`] is handed back to the engine ([`Engine::payloads_returned`]), beyond
/// this borrow: a device may read it from there until then. A token never handed back
/// keeps the buffer allocated for the engine's lifetime (and leaked when it is dropped).
/// Only the engine makes one, and one only per frame (not `Clone`: its token is handed back
/// once).
///
/// When no other frame holds the buffer and the unit was made with room in front of its
/// payload ([`crate::Unit::with_headroom`]), the frame's headers may be written there
/// ([`Lent::with_headers`]), so that headers and payload go out as one buffer; that room
/// then stays unchanged with the payload until the token comes back.
#[derive(Debug)]
pub struct Lent<'a> {
    octets: LentOctets<'a>,
    token: u64,
}

/// The octets of a [`Lent`].
#[derive(Debug)]
enum LentOctets<'a> {
    /// The payload alone (another frame holds the buffer, or it has no room).
    Payload(&'a [u8]),
    /// The room in front of the payload (the first `head` octets, free) and the payload.
    Room { buffer: &'a mut [u8], head: usize },
}

impl<'a> Lent<'a> {
    /// The payload's octets.
    pub fn payload(&self) -> &[u8] {
        match &self.octets {
            LentOctets::Payload(p) => p,
            LentOctets::Room { buffer, head } => buffer.get(*head..).unwrap_or_default(),
        }
    }

    /// Octets of room free in front of the payload for a frame's headers (0 when another
    /// frame holds the buffer).
    pub fn headroom(&self) -> usize {
        match self.octets {
            LentOctets::Payload(_) => 0,
            LentOctets::Room { head, .. } => head,
        }
    }

    /// Writes `headers` right in front of the payload and gives the frame, headers and
    /// payload as one slice, kept unchanged like the payload until the token comes back;
    /// `None` (nothing written) when they do not fit the room ([`Lent::headroom`]).
    pub fn with_headers(&mut self, headers: &[u8]) -> Option<&[u8]> {
        let LentOctets::Room { buffer, head } = &mut self.octets else {
            return None;
        };
        let start = head.checked_sub(headers.len())?;
        let frame = buffer.get_mut(start..)?;
        frame.get_mut(..headers.len())?.copy_from_slice(headers);
        Some(frame)
    }

    /// What the holder hands back ([`Engine::payloads_returned`]) once it no longer reads
    /// the payload, exactly once.
    pub fn token(&self) -> u64 {
        self.token
    }
}

/// Errors from the engine's API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The handle does not name a live connection.
    #[error("no such connection")]
    NoSuchConnection,
    /// A listener already uses this port.
    #[error("port {0} already has a listener")]
    PortInUse(u16),
    /// The 4-tuple is taken.
    #[error("connection {0:?} already exists")]
    TupleInUse(FourTuple),
    /// No free ephemeral port toward this peer.
    #[error("no free ephemeral port")]
    NoEphemeralPort,
    /// The local and remote addresses of an active open are of different families.
    #[error("{local} and {remote} are of different address families")]
    FamilyMismatch {
        /// The local address asked for.
        local: IpAddr,
        /// The peer's address.
        remote: IpAddr,
    },
    /// The connection table is full.
    #[error("connection table full ({0} entries)")]
    TableFull(usize),
    /// A ULP is already attached.
    #[error("a ULP is already attached")]
    AlreadyAttached,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Segments handed to a TCB or listener.
    pub segments_in: u64,
    /// Of [`Stats::segments_in`], the in-order data segments a receive run's entry took
    /// (`Config::rx_run_entry`).
    pub run_segments: u64,
    /// Of [`Stats::segments_in`], the data segments ahead of RCV.NXT, at or beyond the end
    /// of the last range held out of order, that the receive run's entry took
    /// (`Config::rx_run_entry`).
    pub ooo_run_segments: u64,
    /// Packets written by `poll_transmit`.
    pub segments_out: u64,
    /// Packets rejected by parsing or checksum.
    pub malformed: u64,
    /// Of [`Stats::malformed`], TCP segments refused for their checksum.
    pub bad_checksums: u64,
    /// SYNs dropped because a listener's backlog of half-open connections was full (SYN
    /// cookies off, or too many cookies waiting to be sent).
    pub syn_backlog_drops: u64,
    /// SYNs to a full backlog answered with a SYN cookie ([`Config::syn_cookies`]).
    pub syn_cookies_sent: u64,
    /// Connections made from the ACK returning a SYN cookie.
    pub syn_cookies_accepted: u64,
    /// SYNs dropped because the connection table was full (`Config::max_connections`).
    pub table_full_drops: u64,
    /// RSTs sent: for segments to no connection, by connections (RFC 9293's reset
    /// cases) and for aborts (those also in [`Stats::aborts_sent`]).
    pub resets_sent: u64,
    /// Of [`Stats::resets_sent`], those of connections this side aborted
    /// ([`Engine::abort`]): no answer to a peer's segment.
    pub aborts_sent: u64,
    /// RSTs not sent because [`MAX_PENDING_RSTS`] already waited for transmission.
    pub resets_dropped: u64,
    /// SYNs to a port without a listener held for `Config::syn_hold` (then answered by a
    /// listener that appeared, or refused).
    pub syns_held: u64,
    /// Segments retransmitted by every connection, live and removed, SYN and SYN-ACK
    /// included (half-open connections that never reached the ULP too).
    pub retransmits: u64,
    /// Retransmission timeouts of every connection, live and removed.
    pub timeouts: u64,
    /// Of those, timeouts found spurious and undone (RFC 3522, RFC 4015).
    pub spurious_timeouts: u64,
    /// Fast-recovery episodes of every connection, live and removed.
    pub recoveries: u64,
    /// Of those, episodes found spurious (reordering, not loss) and undone.
    pub spurious_recoveries: u64,
    /// Of [`Stats::retransmits`], SYNs and SYN-ACKs sent again.
    pub syn_retransmits: u64,
    /// Tail loss probes sent (RFC 8985 §7.3), with new data or a retransmission.
    pub loss_probes: u64,
    /// Segments sent without data, SYN or FIN (ACKs and window updates), RSTs not
    /// included.
    pub pure_acks: u64,
    /// Delayed-ACK timers that ran out with an ACK owed (RFC 9293 §3.8.6.3).
    pub delayed_acks: u64,
}

impl Stats {
    fn add_loss(&mut self, l: LossCounters) {
        self.retransmits += l.retransmits;
        self.timeouts += l.timeouts;
        self.spurious_timeouts += l.spurious_timeouts;
        self.recoveries += l.recoveries;
        self.spurious_recoveries += l.spurious_recoveries;
        self.syn_retransmits += l.syn_retransmits;
        self.loss_probes += l.loss_probes;
        self.pure_acks += l.pure_acks;
        self.delayed_acks += l.delayed_acks;
    }
}

#[derive(Debug)]
struct Listener {
    addr: IpAddr,
    backlog: usize,
    half_open: usize,
}

/// One connection's slot. Laid out in declaration order (`repr(C)`): the TCB, then the
/// fields every visit reads (the generation check, the list flags, the timer entries, the
/// flight count) in the line after it, where the ULP's own hot fields begin (see
/// `iwarp::Connection`), so that a visit to a cold connection reads one line for them
/// instead of a line at the slot's far end.
#[derive(Debug)]
#[repr(C)]
struct Conn<U> {
    tcb: Tcb,
    generation: u32,
    queued: bool,
    /// In [`Engine::active`]'s list.
    active: bool,
    /// In [`Engine`]'s list of connections waiting for room under `Config::max_flight`.
    waiting: bool,
    /// When the timer wheel's entry for the connection comes due, if it has one.
    timer_at: Due,
    /// The due time of the entry last filed for the connection a turn or more ahead of the
    /// timer wheel (in its overflow), while that entry may still be there: filing the same
    /// time again makes it live instead of adding one ([`file_timer`]).
    far_at: Due,
    /// Its octets in flight as counted in [`Engine`]'s total (a FlightSize: below 2^31).
    flight: u32,
    /// Woken from that list: may send new data for one turn though others wait, within
    /// these octets it reserved of the bound (0: not woken; a turn's worth of segments).
    /// This and `flight` are 32 bits so that the ULP's marker ([`UlpSlot`]) and its first
    /// fields still share this line.
    admitted: u32,
    ulp: UlpSlot<U>,
    listen_port: Option<u16>,
    held_start: Option<u32>,
    held: Vec<u8>,
}

/// A time a connection's timer entry is due, or none: an `Instant` in one word (an
/// `Option<Instant>` takes two), so that the slot's header line holds two of them. No
/// deadline lies at the last nanosecond of the clock (585 years on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Due(u64);

impl Due {
    const NONE: Due = Due(u64::MAX);

    #[inline]
    fn at(t: Instant) -> Due {
        Due(t.as_nanos())
    }

    #[inline]
    fn get(self) -> Option<Instant> {
        (self != Due::NONE).then(|| Instant::from_nanos(self.0))
    }
}

/// A slot's ULP, if one is attached: an `Option<U>` whose tag lies in the slot's header
/// line. A plain `Option<U>` keeps its tag in a niche the compiler picks inside `U` (for
/// the iWARP connection, a field of its negotiator, lines away from what a visit reads),
/// and every `Some(ulp)` match of the engine reads that line. Here the ULP follows a
/// marker whose one valid value leaves a wider niche than any field of `U` offers, so the
/// `Option` keeps its tag in the marker, the first word of the ULP's place.
#[derive(Debug)]
struct UlpSlot<U>(Option<Attached<U>>);

/// An attached ULP behind its marker (`repr(C)`: the marker first).
#[derive(Debug)]
#[repr(C)]
struct Attached<U> {
    marker: Marker,
    ulp: U,
}

/// The marker's one value: a whole word with one valid value, the widest niche there is
/// in a word.
#[derive(Clone, Copy, Debug)]
#[repr(u64)]
enum Marker {
    Attached = 1,
}

impl<U> UlpSlot<U> {
    fn new(ulp: Option<U>) -> Self {
        UlpSlot(ulp.map(|ulp| Attached {
            marker: Marker::Attached,
            ulp,
        }))
    }

    fn is_some(&self) -> bool {
        self.0.is_some()
    }

    fn as_ref(&self) -> Option<&U> {
        self.0.as_ref().map(|a| &a.ulp)
    }

    fn as_mut(&mut self) -> Option<&mut U> {
        self.0.as_mut().map(|a| &mut a.ulp)
    }

    fn take(&mut self) -> Option<U> {
        self.0.take().map(|a| a.ulp)
    }

    fn into_inner(self) -> Option<U> {
        self.0.map(|a| a.ulp)
    }
}

#[derive(Clone, Copy, Debug)]
struct Rst {
    local: SocketAddr,
    remote: SocketAddr,
    seq: u32,
    ack: Option<u32>,
    /// Sent by [`Engine::abort`].
    abort: bool,
}

/// Segments a connection sends in a row before the next ready connection's turn: with
/// many connections sending, each visit amortizes the connection's state coming into the
/// cache, and the peer gets runs of one connection's segments (one ACK for several).
pub const TX_QUANTUM: u32 = 32;

/// Bound on queued RSTs for unknown connections (excess is dropped and counted in
/// [`Stats::resets_dropped`], RFC 5961 §7 spirit).
pub const MAX_PENDING_RSTS: usize = 1024;

/// Bound on SYN-ACKs carrying SYN cookies that wait for transmission (the port's transmit
/// ring full): beyond it SYNs are dropped and counted ([`Stats::syn_backlog_drops`]). Each
/// waits in about 150 octets; a burst of connects that outran the listener's backlog while
/// the peer was slow to drain the link (3,000 `cmtime` connects against a backlog of 1,024,
/// the peer's data plane sharing a CPU with its application) is answered whole, not left
/// to the peer's one-second SYN retransmission.
pub const MAX_PENDING_SYN_ACKS: usize = 4096;

/// The TCP engine. `U` is the per-connection upper layer: a [`crate::SegmentSink`] +
/// [`crate::SegmentSource`] (the MPA endpoint, a [`crate::StreamSocket`], or an enum of
/// several). `C` is the context the caller lends to every call that
/// reaches a ULP (`handle_*`, `poll_transmit`, `attach`): the engine hands it on and keeps
/// nothing of it, so the caller owns what the connections share (an RNIC, say).
pub struct Engine<U, C: ?Sized = ()> {
    cfg: Config,
    isn: IsnGenerator,
    slots: Vec<Option<Conn<U>>>,
    generations: Vec<u32>,
    free: Vec<u32>,
    live: usize,
    /// Keyed by what the network sends: SipHash with a per-process random key (std's
    /// `RandomState`), so crafted 4-tuples cannot flood one bucket.
    by_tuple: HashMap<FourTuple, ConnId>,
    /// The last `by_tuple` hit: a burst of one connection's segments hashes once.
    last_hit: Option<(FourTuple, ConnId)>,
    /// The connection of the last segment handed to one, for the next segment of its run.
    run_key: Option<run::RunKey>,
    /// Keyed by our own listening ports: a fast unkeyed hash.
    listeners: FxHashMap<u16, Listener>,
    ready: VecDeque<ConnId>,
    /// Segments the connection at the head of `ready` sent in a row ([`TX_QUANTUM`]).
    turn: u32,
    /// Connections whose ULP ran since the last [`Engine::take_active`].
    active: Vec<ConnId>,
    /// Octets in flight over all connections (`Config::max_flight`).
    flight: usize,
    /// Connections waiting for room under `Config::max_flight`, oldest first.
    waiters: VecDeque<ConnId>,
    /// Octets of the bound reserved for the connections woken from `waiters` whose turn
    /// has not ended yet.
    reserved: usize,
    /// Each connection's earliest deadline (and stale entries: deadlines since moved).
    timers: TimerWheel<ConnId>,
    /// The entries [`Engine::handle_timeout`] took from `timers`, kept for its buffer.
    due: Vec<(Instant, ConnId)>,
    events: VecDeque<Event<U>>,
    rsts: VecDeque<Rst>,
    /// SYN-ACKs carrying SYN cookies, sent without a connection (at most
    /// `MAX_PENDING_SYN_ACKS`).
    cookies: VecDeque<(SocketAddr, SocketAddr, Header)>,
    held_syns: HeldSyns,
    next_port: u16,
    scratch: Vec<TcbEvent>,
    /// Inside [`Engine::begin_burst`] .. [`Engine::end_burst`].
    burst: bool,
    /// Bursts begun so far.
    bursts: u64,
    /// Connections whose ULP waits for `on_advance` until the burst ends.
    deferred: Vec<ConnId>,
    stats: Stats,
    /// The units' payloads lent to ports ([`Engine::poll_transmit_gather`]).
    loans: Loans,
    context: PhantomData<fn(&mut C)>,
}

impl<U: std::fmt::Debug, C: ?Sized> std::fmt::Debug for Engine<U, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("live", &self.live)
            .field("listeners", &self.listeners.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<U, C: ?Sized> Drop for Engine<U, C> {
    /// The buffers of units still lent stay allocated (leaked with the loans, never freed
    /// under a device).
    fn drop(&mut self) {
        for c in self.slots.iter_mut().flatten() {
            c.tcb.drain_unit_buffers(drop);
            c.tcb.txq_mut().settle_lent(&mut self.loans, drop);
        }
    }
}

impl<U: Ulp<C>, C: ?Sized> Engine<U, C> {
    /// An engine with no connections.
    pub fn new(cfg: Config) -> Self {
        let isn = IsnGenerator::new(cfg.isn_secret);
        let next_port = cfg.ephemeral_start();
        Engine {
            cfg,
            isn,
            slots: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
            live: 0,
            by_tuple: HashMap::new(),
            last_hit: None,
            run_key: None,
            listeners: FxHashMap::default(),
            ready: VecDeque::new(),
            turn: 0,
            active: Vec::new(),
            flight: 0,
            waiters: VecDeque::new(),
            reserved: 0,
            timers: TimerWheel::default(),
            due: Vec::new(),
            events: VecDeque::new(),
            rsts: VecDeque::new(),
            cookies: VecDeque::new(),
            held_syns: HeldSyns::default(),
            next_port,
            scratch: Vec::new(),
            burst: false,
            bursts: 0,
            deferred: Vec::new(),
            stats: Stats::default(),
            loans: Loans::default(),
            context: PhantomData,
        }
    }

    /// Window offered while no ULP is attached: what fits an unscaled SYN-ACK, so that the
    /// ULP attached later can still choose a smaller window (windows never shrink).
    fn holding_window(&self) -> usize {
        self.cfg.max_rx_window.min(65_535)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters (the loss counters summed over the connections in the table: O(n)).
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        for c in self.slots.iter().flatten() {
            s.add_loss(c.tcb.loss_counters());
        }
        s
    }

    /// Connections in the table, in any state (TIME-WAIT and half-open included).
    pub fn connection_count(&self) -> usize {
        self.live
    }

    /// The connections the application can see (not yet reported closed), in table order
    /// (monitoring: `ss`-like listings through [`Engine::info`] and [`Engine::tuple`]).
    pub fn connections(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, c)| {
            let c = c.as_ref().filter(|c| !c.tcb.reported_closed)?;
            Some(ConnId {
                index: i as u32,
                generation: c.generation,
            })
        })
    }

    /// Half-open (SYN-RECEIVED) connections of the listener on `port`.
    pub fn half_open(&self, port: u16) -> usize {
        self.listeners.get(&port).map_or(0, |l| l.half_open)
    }

    /// Listen on `addr` with at most `backlog` half-open connections (RFC 9293 §3.10.1
    /// passive OPEN). An unspecified address (`0.0.0.0` or `::`) accepts connections to any
    /// address of either family; one listener per port.
    pub fn listen(&mut self, addr: impl Into<SocketAddr>, backlog: usize) -> Result<(), Error> {
        let addr = addr.into();
        if self.listeners.contains_key(&addr.port()) {
            return Err(Error::PortInUse(addr.port()));
        }
        self.listeners.insert(
            addr.port(),
            Listener {
                addr: addr.ip(),
                backlog,
                half_open: 0,
            },
        );
        self.held_syns.listening(addr.port());
        Ok(())
    }

    /// Stop listening on `port`; established connections are unaffected.
    pub fn unlisten(&mut self, port: u16) -> bool {
        self.listeners.remove(&port).is_some()
    }

    /// Active open (RFC 9293 §3.10.1) from `local` (port 0: pick an ephemeral port) to
    /// `remote`, both of one family, with `ulp` attached. Completion is reported by
    /// [`Event::Connected`].
    pub fn connect(
        &mut self,
        now: Instant,
        local: impl Into<SocketAddr>,
        remote: impl Into<SocketAddr>,
        ulp: U,
    ) -> Result<ConnId, Error> {
        let (local, remote) = (local.into(), remote.into());
        if local.is_ipv4() != remote.is_ipv4() {
            return Err(Error::FamilyMismatch {
                local: local.ip(),
                remote: remote.ip(),
            });
        }
        let local = if local.port() == 0 {
            self.ephemeral(local.ip(), remote)?
        } else {
            local
        };
        let tuple = FourTuple { local, remote };
        if self.by_tuple.contains_key(&tuple) {
            return Err(Error::TupleInUse(tuple));
        }
        if self.live >= self.cfg.max_connections {
            return Err(Error::TableFull(self.live));
        }
        let iss = self.isn.isn(now, local, remote);
        let tcb = Tcb::new_active(
            now,
            &self.cfg,
            local,
            remote,
            iss,
            self.isn.ts_offset(local, remote),
        );
        let id = self.insert(tuple, tcb, Some(ulp), None);
        self.wake(id);
        Ok(id)
    }

    fn ephemeral(&mut self, ip: IpAddr, remote: SocketAddr) -> Result<SocketAddr, Error> {
        let (lo, hi) = self.cfg.ephemeral_ports;
        let span = u32::from(hi.saturating_sub(lo)) + 1;
        for _ in 0..span {
            let port = self.next_port;
            self.next_port = if port >= hi { lo } else { port + 1 };
            let local = SocketAddr::new(ip, port);
            if !self.listeners.contains_key(&port)
                && !self.by_tuple.contains_key(&FourTuple { local, remote })
            {
                return Ok(local);
            }
        }
        Err(Error::NoEphemeralPort)
    }

    fn insert(
        &mut self,
        tuple: FourTuple,
        tcb: Tcb,
        ulp: Option<U>,
        listen_port: Option<u16>,
    ) -> ConnId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.generations[index as usize];
        self.slots[index as usize] = Some(Conn {
            generation,
            tcb,
            ulp: UlpSlot::new(ulp),
            held: Vec::new(),
            held_start: None,
            queued: false,
            active: false,
            timer_at: Due::NONE,
            far_at: Due::NONE,
            listen_port,
            flight: 0,
            waiting: false,
            admitted: 0,
        });
        self.live += 1;
        let id = ConnId { index, generation };
        if self.by_tuple.insert(tuple, id).is_some() {
            self.last_hit = None;
        }
        id
    }

    fn conn(&self, id: ConnId) -> Option<&Conn<U>> {
        slot_ref(&self.slots, id)
    }

    fn conn_mut(&mut self, id: ConnId) -> Option<&mut Conn<U>> {
        slot_mut(&mut self.slots, id)
    }

    fn visible(&self, id: ConnId) -> Option<&Conn<U>> {
        self.conn(id).filter(|c| !c.tcb.reported_closed)
    }

    /// Attach the ULP of an accepted connection. Bytes that arrived in the meantime are
    /// handed to it through `on_in_order`, with `cx` and `now`.
    pub fn attach(
        &mut self,
        now: Instant,
        cx: &mut C,
        conn: ConnId,
        mut ulp: U,
    ) -> Result<(), Error> {
        if self.visible(conn).is_none() {
            return Err(Error::NoSuchConnection);
        }
        let c = self.conn_mut(conn).ok_or(Error::NoSuchConnection)?;
        if c.ulp.is_some() {
            return Err(Error::AlreadyAttached);
        }
        if let Some(start) = c.held_start.take() {
            ulp.on_in_order(cx, now, start, &c.held);
            ulp.on_advance(cx, now, c.tcb.rcv_nxt());
        }
        c.held = Vec::new();
        c.ulp = UlpSlot::new(Some(ulp));
        self.wake(conn);
        self.mark_active(conn);
        Ok(())
    }

    /// The attached ULP.
    pub fn ulp(&self, conn: ConnId) -> Option<&U> {
        self.visible(conn)?.ulp.as_ref()
    }

    /// The attached ULP, mutably. The connection is woken: new data of the source and a
    /// grown receive window are picked up by the next `poll_transmit`.
    pub fn ulp_mut(&mut self, conn: ConnId) -> Option<&mut U> {
        self.visible(conn)?;
        self.wake(conn);
        self.conn_mut(conn)?.ulp.as_mut()
    }

    /// Ask for the connection to be polled for transmission.
    pub fn wake(&mut self, conn: ConnId) {
        if let Some(c) = self.conn_mut(conn) {
            if !c.queued {
                c.queued = true;
                self.ready.push_back(conn);
            }
        }
    }

    /// Whether a connection's ULP ran since the last [`Engine::take_active`] (a service's
    /// idle pass asks this first).
    pub fn has_active(&self) -> bool {
        !self.active.is_empty()
    }

    /// Moves the connections whose ULP the engine called (segment input, timers, a
    /// transmitted segment, attach) since the last call into `out`, each once: a service on top
    /// visits those instead of every connection. Closed ones may be among them.
    pub fn take_active(&mut self, out: &mut Vec<ConnId>) {
        for id in self.active.drain(..) {
            if let Some(c) = slot_mut(&mut self.slots, id) {
                c.active = false;
            }
            out.push(id);
        }
    }

    #[inline]
    fn mark_active(&mut self, id: ConnId) {
        let Some(c) = slot_mut(&mut self.slots, id) else {
            return;
        };
        if list_active(&mut self.active, c, id) {
            self.bound_active();
        }
    }

    /// Nobody may be taking the list: closed connections' entries leave it in batches, so
    /// it stays within twice the table (checked as it grows).
    fn bound_active(&mut self) {
        if self.active.len() > 2 * self.live + 64 {
            let slots = &self.slots;
            self.active.retain(|id| {
                slots.get(id.index as usize).is_some_and(|c| {
                    c.as_ref()
                        .is_some_and(|c| c.generation == id.generation && c.active)
                })
            });
        }
    }

    /// The peer of the next ready connection [`Engine::poll_transmit`] will consider
    /// (stale entries are dropped). Queued RSTs go before it.
    pub fn next_remote(&mut self) -> Option<IpAddr> {
        while let Some(&id) = self.ready.front() {
            match self.conn(id) {
                Some(c) => return Some(c.tcb.remote.ip()),
                None => {
                    self.ready.pop_front();
                    self.turn = 0;
                }
            }
        }
        None
    }

    /// Moves the next ready connection behind the others (its packets wait, say, for its
    /// peer's MAC while others can go).
    pub fn defer_next(&mut self) {
        if let Some(id) = self.ready.pop_front() {
            self.ready.push_back(id);
            self.turn = 0;
        }
    }

    /// Connections waiting to be polled for transmission.
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// RSTs wait to go out (before any connection's packet).
    pub fn rsts_pending(&self) -> bool {
        !self.rsts.is_empty() || !self.cookies.is_empty()
    }

    /// State of a live connection.
    pub fn state(&self, conn: ConnId) -> Option<State> {
        self.visible(conn).map(|c| c.tcb.state)
    }

    /// Monitoring information of a live connection.
    pub fn info(&self, conn: ConnId) -> Option<ConnInfo> {
        self.visible(conn).map(|c| c.tcb.info())
    }

    /// Where a live connection stands with the engine's scheduling (diagnostics of a
    /// connection that makes no progress): on the ready list, and when its timer is due.
    pub fn schedule_state(&self, conn: ConnId) -> Option<(bool, Option<Instant>)> {
        self.visible(conn).map(|c| (c.queued, c.timer_at.get()))
    }

    /// Entries in the engine's connection timers, live and superseded (diagnostics: what
    /// the timers hold stays within a few entries per connection, however often connections
    /// go idle and busy again).
    pub fn timer_entries(&self) -> usize {
        self.timers.len()
    }

    /// The connection's addresses.
    pub fn tuple(&self, conn: ConnId) -> Option<FourTuple> {
        self.visible(conn).map(|c| FourTuple {
            local: c.tcb.local,
            remote: c.tcb.remote,
        })
    }

    /// Graceful close (RFC 9293 §3.10.4): FIN is sent once the source has no pending
    /// data; receiving continues (half-close) until the peer's FIN.
    pub fn close(&mut self, conn: ConnId) -> Result<(), Error> {
        if self.visible(conn).is_none() {
            return Err(Error::NoSuchConnection);
        }
        let c = self.conn_mut(conn).ok_or(Error::NoSuchConnection)?;
        let pending = c.ulp.as_ref().is_some_and(|u| u.pending());
        match c.tcb.state {
            // RFC 9293 §3.10.4: in SYN-SENT with nothing queued, delete the TCB; with data
            // queued, FIN follows it once established.
            State::SynSent if !pending => {
                self.remove(conn, Some(CloseReason::Normal));
                return Ok(());
            }
            _ => c.tcb.close(),
        }
        self.wake(conn);
        Ok(())
    }

    /// Abort (RFC 9293 §3.10.5): send RST and drop the connection at once.
    pub fn abort(&mut self, conn: ConnId) -> Result<(), Error> {
        let c = self.visible(conn).ok_or(Error::NoSuchConnection)?;
        if c.tcb.synchronized() || c.tcb.state == State::SynReceived {
            let rst = Rst {
                local: c.tcb.local,
                remote: c.tcb.remote,
                seq: c.tcb.snd_nxt(),
                ack: Some(c.tcb.rcv_nxt()),
                abort: true,
            };
            self.push_rst(rst);
        }
        self.remove(conn, Some(CloseReason::Aborted));
        Ok(())
    }

    fn push_rst(&mut self, rst: Rst) {
        if self.rsts.len() < MAX_PENDING_RSTS {
            self.rsts.push_back(rst);
        } else {
            self.stats.resets_dropped += 1;
        }
    }

    fn remove(&mut self, id: ConnId, reason: Option<CloseReason>) {
        let Some(slot) = self.slots.get_mut(id.index as usize) else {
            return;
        };
        let Some(mut c) = slot.take_if(|c| c.generation == id.generation) else {
            return;
        };
        // Every unit's buffer leaves the queue here: those lent stay with the loans while
        // frames hold them (never freed under a device).
        let mut ulp = c.ulp.as_mut();
        let mut reclaim = |b| {
            if let Some(u) = ulp.as_mut() {
                u.reclaim(b);
            }
        };
        c.tcb.drain_unit_buffers(&mut reclaim);
        c.tcb.txq_mut().settle_lent(&mut self.loans, reclaim);
        self.generations[id.index as usize] = c.generation.wrapping_add(1);
        self.free.push(id.index);
        self.live -= 1;
        self.flight -= c.flight as usize;
        self.reserved -= c.admitted as usize;
        self.stats.add_loss(c.tcb.loss_counters());
        let tuple = FourTuple {
            local: c.tcb.local,
            remote: c.tcb.remote,
        };
        self.by_tuple.remove(&tuple);
        if self.last_hit.is_some_and(|(t, _)| t == tuple) {
            self.last_hit = None;
        }
        if c.tcb.state == State::SynReceived {
            if let Some(l) = c.listen_port.and_then(|p| self.listeners.get_mut(&p)) {
                l.half_open = l.half_open.saturating_sub(1);
            }
        }
        if !c.tcb.reported_closed {
            if let Some(reason) = reason {
                self.events.push_back(Event::Closed {
                    conn: id,
                    reason,
                    ulp: c.ulp.into_inner(),
                });
            }
        }
    }

    /// Whether events wait for [`Engine::poll_event`].
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Next application event.
    pub fn poll_event(&mut self) -> Option<Event<U>> {
        self.events.pop_front()
    }

    // ------------------------------------------------------------------ input

    /// Handle one IPv4 or IPv6 packet (header included) addressed to us. An IPv6 packet
    /// whose first Next Header is not TCP (an extension header) is not processed.
    pub fn handle_packet(
        &mut self,
        now: Instant,
        cx: &mut C,
        packet: &[u8],
    ) -> Result<(), PacketError> {
        let ip = parse_ip(packet, &checksum_caps(&self.cfg)).map_err(|e| self.malformed(e))?;
        if ip.next != IpProtocol::Tcp {
            return Err(PacketError::NotTcp(u8::from(ip.next)));
        }
        self.handle_tcp(now, cx, ip.src, ip.dst, ip.payload)
    }

    fn malformed(&mut self, e: PacketError) -> PacketError {
        self.stats.malformed += 1;
        e
    }

    /// Handle one TCP segment (header + payload) from `src` to `dst` (both of one family),
    /// for a data plane that already parsed the IP header.
    pub fn handle_tcp(
        &mut self,
        now: Instant,
        cx: &mut C,
        src: impl Into<IpAddr>,
        dst: impl Into<IpAddr>,
        segment: &[u8],
    ) -> Result<(), PacketError> {
        self.handle_tcp_checking(now, cx, &src.into(), &dst.into(), segment, false)
    }

    /// Handle one TCP segment as [`Engine::handle_tcp`] does; when `unverified`, its
    /// checksum is verified whatever `Config::verify_checksums` says: for a data plane
    /// whose classifier left the checksum of this segment to the engine (no device
    /// verdict), so that the connection's sink can take the payload's sum in a pass of its
    /// own ([`crate::SegmentSink::stage`]). A bad checksum counts in
    /// [`Stats::bad_checksums`].
    ///
    /// The addresses are taken by reference: a data plane's classifier has just written
    /// them field by field, and a copy of the whole `IpAddr` (one 16-octet load over those
    /// narrower stores) waits for the stores to commit, as store forwarding fails.
    pub fn handle_tcp_checking(
        &mut self,
        now: Instant,
        cx: &mut C,
        src: &IpAddr,
        dst: &IpAddr,
        segment: &[u8],
        unverified: bool,
    ) -> Result<(), PacketError> {
        let verify = unverified || self.cfg.verify_checksums;
        if let Some(done) = self.input_run(now, cx, src, dst, segment, verify) {
            return done;
        }
        self.input_tcp(now, cx, *src, *dst, segment, verify)
    }

    fn input_tcp(
        &mut self,
        now: Instant,
        cx: &mut C,
        src: IpAddr,
        dst: IpAddr,
        segment: &[u8],
        verify: bool,
    ) -> Result<(), PacketError> {
        if !is_unicast(src) || !is_unicast(dst) || src.is_ipv4() != dst.is_ipv4() {
            return Err(self.malformed(PacketError::NotUnicast));
        }
        let Some(repr) = parse_segment(src, dst, segment) else {
            // A damaged header usually fails its checksum too: counted as such, like a
            // damaged payload, where the checksum is ours to verify.
            if verify && !crate::checksum::tcp_checksum_ok(src, dst, segment) {
                self.stats.bad_checksums += 1;
            }
            return Err(self.malformed(PacketError::BadTcp));
        };
        let tuple = FourTuple {
            local: SocketAddr::new(dst, repr.dst_port),
            remote: SocketAddr::new(src, repr.src_port),
        };
        let found = match self.last_hit {
            Some((t, id)) if t == tuple => Some(id),
            _ => {
                let found = self.by_tuple.get(&tuple).copied();
                if let Some(id) = found {
                    self.last_hit = Some((tuple, id));
                }
                found
            }
        };
        // The TCP checksum is verified here (crate::checksum), not by the parser, before
        // the segment touches any state.
        let mut staged = false;
        if verify {
            let seq = repr.seq_number.0 as u32;
            let (ok, by_sink) = self.checksum_ok(cx, found, src, dst, segment, seq, repr.payload);
            staged = by_sink;
            if !ok {
                if staged {
                    self.unstage(cx, found);
                }
                self.stats.bad_checksums += 1;
                return Err(self.malformed(PacketError::BadTcp));
            }
        }
        self.stats.segments_in += 1;
        match found {
            Some(id)
                if self
                    .conn(id)
                    .is_some_and(|c| c.tcb.time_wait_reusable_by(&repr)) =>
            {
                self.remove(id, None);
                if let Some(id) = self.segment_to_listener(now, tuple, &repr) {
                    self.segment_to_conn(now, cx, id, &repr);
                }
            }
            Some(id) => {
                self.segment_to_conn(now, cx, id, &repr);
                self.run_key = Some(run::RunKey::new(src, dst, &repr, id));
            }
            None => {
                if let Some(id) = self.segment_to_listener(now, tuple, &repr) {
                    self.segment_to_conn(now, cx, id, &repr);
                }
            }
        }
        if staged {
            self.unstage(cx, found);
        }
        Ok(())
    }

    /// Tells the sink of connection `found` that the segment it staged is done with.
    fn unstage(&mut self, cx: &mut C, found: Option<ConnId>) {
        let ulp = found
            .and_then(|id| slot_mut(&mut self.slots, id))
            .and_then(|c| c.ulp.as_mut());
        if let Some(u) = ulp {
            u.unstage(cx);
        }
    }

    /// Whether `segment` (its `payload` at `seq`) carries a correct TCP checksum, and
    /// whether the connection's ULP staged its payload. The payload is first offered to the
    /// ULP ([`crate::SegmentSink::stage`]): when the ULP takes it and returns its sum, only
    /// the header is summed here (one pass over the payload, not two).
    #[allow(clippy::too_many_arguments)]
    fn checksum_ok(
        &mut self,
        cx: &mut C,
        found: Option<ConnId>,
        src: IpAddr,
        dst: IpAddr,
        segment: &[u8],
        seq: u32,
        payload: &[u8],
    ) -> (bool, bool) {
        debug_assert_eq!(
            payload.as_ptr_range().end,
            segment.as_ptr_range().end,
            "the payload is the segment's tail"
        );
        let header = &segment[..segment.len() - payload.len()];
        if !payload.is_empty() && header.len().is_multiple_of(2) {
            let ulp = found
                .and_then(|id| slot_mut(&mut self.slots, id))
                .and_then(|c| c.ulp.as_mut());
            if let Some(sum) = ulp.and_then(|u| u.stage(cx, seq, payload)) {
                let ok = crate::checksum::tcp_checksum_split_ok(src, dst, header, sum);
                return (ok, true);
            }
        }
        (crate::checksum::tcp_checksum_ok(src, dst, segment), false)
    }

    fn segment_to_conn(&mut self, now: Instant, cx: &mut C, id: ConnId, repr: &TcpRepr) {
        let cap = self.holding_window();
        let mut evs = std::mem::take(&mut self.scratch);
        {
            let Some(c) = slot_mut(&mut self.slots, id) else {
                return;
            };
            let was_half_open = c.tcb.state == State::SynReceived;
            let Conn {
                tcb,
                ulp,
                held,
                held_start,
                ..
            } = c;
            match ulp.as_mut() {
                Some(ulp) => {
                    let mut u = Bound { ulp, cx, now };
                    let pending = tcb.advance_pending;
                    tcb.defer_advance = self.burst;
                    tcb.burst = self.bursts;
                    tcb.handle_segment(now, &self.cfg, repr, &mut u, &mut evs);
                    tcb.defer_advance = false;
                    if tcb.advance_pending && !pending {
                        self.deferred.push(id);
                    }
                }
                None => {
                    let mut h = Holding {
                        buf: held,
                        start: held_start,
                        cap,
                    };
                    tcb.handle_segment(now, &self.cfg, repr, &mut h, &mut evs)
                }
            }
            if was_half_open && c.tcb.state != State::SynReceived {
                if let Some(l) = c.listen_port.and_then(|p| self.listeners.get_mut(&p)) {
                    l.half_open = l.half_open.saturating_sub(1);
                }
            }
            count_flight(&mut self.flight, c);
            if evs.is_empty() {
                // The usual segment asks nothing of the engine: the connection in hand is
                // listed active, woken and scheduled without being looked up again. A
                // segment of an in-order run is not listed: the run's end
                // (`end_burst`, or the connection's next other segment) lists the
                // connection, asking its ULP once per run.
                let listed = !c.tcb.advance_pending && list_active(&mut self.active, c, id);
                if !c.queued {
                    c.queued = true;
                    self.ready.push_back(id);
                }
                schedule_conn(&mut self.timers, c, id);
                self.scratch = evs;
                if listed {
                    self.bound_active();
                }
                self.release_waiters();
                return;
            }
        }
        self.mark_active(id);
        self.apply_events(id, &mut evs);
        self.scratch = evs;
        self.after_activity(id);
        self.release_waiters();
    }

    /// Ends the turn a connection was woken for.
    fn end_admission(reserved: &mut usize, c: &mut Conn<U>) {
        *reserved -= c.admitted as usize;
        c.admitted = 0;
    }

    /// Wakes the oldest waiting connections while the room under `Config::max_flight`
    /// lasts, reserving a turn's worth of it for each. Inline, called after every segment:
    /// usually none waits.
    #[inline]
    fn release_waiters(&mut self) {
        if !self.waiters.is_empty() {
            self.release_waiting();
        }
    }

    /// [`Engine::release_waiters`] with connections waiting.
    fn release_waiting(&mut self) {
        let Some(cap) = self.cfg.max_flight else {
            return;
        };
        while self.flight + self.reserved < cap {
            let Some(id) = self.waiters.pop_front() else {
                return;
            };
            let Some(c) = slot_mut(&mut self.slots, id) else {
                continue;
            };
            c.waiting = false;
            if c.admitted == 0 {
                let mss = u32::try_from(c.tcb.eff_mss()).unwrap_or(u32::MAX);
                c.admitted = TX_QUANTUM.saturating_mul(mss).max(1);
                self.reserved += c.admitted as usize;
            }
            self.wake(id);
        }
    }

    /// Starts a receive burst: the segments handed in until [`Engine::end_burst`] arrived
    /// together. A run of one connection's in-order data segments then tells its ULP once,
    /// at the end of the burst or before the connection's next other segment, that RCV.NXT
    /// advanced ([`crate::SegmentSink::on_advance`]), instead of after every segment; each
    /// segment is still offered through `on_segment` at once. Within the run, a segment
    /// whose acknowledgment fields repeat the previous one's skips the ACK processing,
    /// which would find nothing new. The caller must end the burst before it calls anything
    /// else that reaches the connections or their ULPs (transmission, timers).
    pub fn begin_burst(&mut self) {
        self.burst = true;
        self.bursts += 1;
    }

    /// Ends a receive burst: the ULPs whose RCV.NXT advance waited are told now.
    pub fn end_burst(&mut self, now: Instant, cx: &mut C) {
        self.burst = false;
        let mut deferred = std::mem::take(&mut self.deferred);
        for id in deferred.drain(..) {
            let Some(c) = slot_mut(&mut self.slots, id) else {
                continue;
            };
            let Conn { tcb, ulp, .. } = c;
            let Some(ulp) = ulp.as_mut() else {
                tcb.advance_pending = false;
                continue;
            };
            if !tcb.advance_pending {
                continue;
            }
            tcb.flush_advance(&mut Bound { ulp, cx, now });
            self.mark_active(id);
            self.after_activity(id);
        }
        self.deferred = deferred;
    }

    /// Whether a receive burst is open ([`Engine::begin_burst`]).
    pub fn in_burst(&self) -> bool {
        self.burst
    }

    /// A segment of no connection: to a listener (a SYN, or the ACK returning a SYN cookie),
    /// else refused. Returns the connection a SYN cookie made, which the caller hands the
    /// segment to.
    fn segment_to_listener(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        repr: &TcpRepr,
    ) -> Option<ConnId> {
        match (
            listener_for(&self.listeners, tuple.local),
            repr.control,
            repr.ack_number,
        ) {
            (_, TcpControl::Rst, _) => {}
            // RFC 9293 §3.10.7.1/§3.10.7.2: ACK to a closed port or a listener: RST seq=ack,
            // unless it returns a SYN cookie of a listener's.
            (listener, control, Some(ack)) => {
                let returns_cookie = listener.is_some()
                    && self.cfg.syn_cookies
                    && matches!(
                        control,
                        TcpControl::None | TcpControl::Psh | TcpControl::Fin
                    );
                if returns_cookie {
                    if let Some(id) = self.cookie_connection(now, tuple, repr, ack.0 as u32) {
                        return Some(id);
                    }
                }
                self.push_rst(Rst {
                    local: tuple.local,
                    remote: tuple.remote,
                    seq: ack.0 as u32,
                    ack: None,
                    abort: false,
                });
            }
            (Some(l), TcpControl::Syn, None) => {
                if l.half_open >= l.backlog {
                    self.send_cookie(now, tuple, repr);
                    return None;
                }
                if !self.table_has_room() {
                    return None;
                }
                let iss = self.isn.isn(now, tuple.local, tuple.remote);
                let tcb = self.passive_tcb(now, tuple, iss, repr);
                let id = self.insert_half_open(tuple, tcb);
                self.after_activity(id);
            }
            (Some(_), _, None) => {}
            (None, TcpControl::Syn, None)
                if !self.cfg.syn_hold.is_zero()
                    && repr.payload.is_empty()
                    && self.held_syns.hold(
                        now,
                        tuple.local,
                        tuple.remote,
                        repr,
                        self.cfg.syn_hold,
                    ) =>
            {
                self.stats.syns_held += 1;
            }
            (None, _, None) => self.refuse(tuple, repr),
        }
        None
    }

    /// Answers the SYN `repr` to a listener whose backlog is full with a SYN cookie
    /// ([`crate::syn_cookie`]), keeping nothing; or drops it (counted) when cookies are off
    /// or too many wait to be sent.
    fn send_cookie(&mut self, now: Instant, tuple: FourTuple, repr: &TcpRepr) {
        if !self.cfg.syn_cookies || self.cookies.len() >= MAX_PENDING_SYN_ACKS {
            self.stats.syn_backlog_drops += 1;
            return;
        }
        let peer_isn = repr.seq_number.0 as u32;
        let iss = syn_cookie::iss(
            &self.isn,
            now,
            tuple.local,
            tuple.remote,
            peer_isn,
            repr.max_seg_size.unwrap_or(536),
        );
        // The SYN-ACK the connection would send, from a connection made for it and dropped.
        let mut tcb = self.passive_tcb(now, tuple, iss, repr);
        let mut hdr = tcb.syn_ack_header(now, &self.cfg, self.holding_window());
        if let Some((tsval, tsecr)) = hdr.timestamp {
            let tsval = syn_cookie::with_options(tsval, repr.window_scale, repr.sack_permitted);
            hdr.timestamp = Some((tsval, tsecr));
        }
        self.cookies.push_back((tuple.local, tuple.remote, hdr));
        self.stats.syn_cookies_sent += 1;
    }

    /// The connection the ACK `repr` (acknowledging `ack`) to a listener makes when it
    /// returns a SYN cookie of ours: in SYN-RECEIVED as if its SYN had been kept (the SYN
    /// rebuilt from the cookie: ISN, MSS, and with timestamps window scale and SACK), for
    /// the caller to hand the ACK. `None` when the cookie does not check out or the table is
    /// full.
    fn cookie_connection(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        repr: &TcpRepr,
        ack: u32,
    ) -> Option<ConnId> {
        let peer_isn = (repr.seq_number.0 as u32).wrapping_sub(1);
        let iss = ack.wrapping_sub(1);
        let mss = syn_cookie::check(&self.isn, now, tuple.local, tuple.remote, peer_isn, iss)?;
        if !self.table_has_room() {
            return None;
        }
        let (window_scale, sack_permitted) = repr
            .timestamp
            .map_or((None, false), |t| syn_cookie::options(t.tsecr));
        let syn = TcpRepr {
            src_port: repr.src_port,
            dst_port: repr.dst_port,
            control: TcpControl::Syn,
            seq_number: smoltcp::wire::TcpSeqNumber(peer_isn as i32),
            ack_number: None,
            window_len: repr.window_len,
            window_scale,
            max_seg_size: Some(mss),
            sack_permitted,
            sack_ranges: [None; 3],
            timestamp: repr
                .timestamp
                .map(|t| smoltcp::wire::TcpTimestampRepr::new(t.tsval, 0)),
            payload: &[],
        };
        let mut tcb = self.passive_tcb(now, tuple, iss, &syn);
        tcb.syn_ack_sent_statelessly();
        let id = self.insert_half_open(tuple, tcb);
        self.stats.syn_cookies_accepted += 1;
        Some(id)
    }

    /// The TCB of a passive open (SYN-RECEIVED) answering the SYN `syn` of `tuple` with ISS
    /// `iss`.
    fn passive_tcb(&self, now: Instant, tuple: FourTuple, iss: u32, syn: &TcpRepr) -> Tcb {
        let ts_offset = self.isn.ts_offset(tuple.local, tuple.remote);
        Tcb::new_passive(
            now,
            &self.cfg,
            tuple.local,
            tuple.remote,
            iss,
            ts_offset,
            syn,
        )
    }

    /// Whether the table takes another connection (`Config::max_connections`); a refusal
    /// is counted. Asked before a passive connection is built, so that a flood on a full
    /// table costs no TCB.
    fn table_has_room(&mut self) -> bool {
        let room = self.live < self.cfg.max_connections;
        if !room {
            self.stats.table_full_drops += 1;
        }
        room
    }

    /// Puts the half-open `tcb` in the table as a connection of the listener on `tuple`'s
    /// local port, counted in its backlog ([`Engine::table_has_room`] said it fits).
    fn insert_half_open(&mut self, tuple: FourTuple, tcb: Tcb) -> ConnId {
        let port = tuple.local.port();
        if let Some(l) = self.listeners.get_mut(&port) {
            l.half_open += 1;
        }
        self.insert(tuple, tcb, None, Some(port))
    }

    /// RFC 9293 §3.10.7.1: a segment without ACK to a closed port gets an RST with
    /// ACK = SEG.SEQ + SEG.LEN.
    fn refuse(&mut self, tuple: FourTuple, repr: &TcpRepr) {
        let len = repr.payload.len() as u32 + repr.control.len() as u32;
        self.push_rst(Rst {
            local: tuple.local,
            remote: tuple.remote,
            seq: 0,
            ack: Some((repr.seq_number.0 as u32).wrapping_add(len)),
            abort: false,
        });
    }

    /// Held SYNs that are due: answered by the listener that appeared for their port, else
    /// refused once expired.
    fn release_held_syns(&mut self, now: Instant) {
        for h in self.held_syns.take_due(now) {
            let tuple = FourTuple {
                local: h.local,
                remote: h.remote,
            };
            if listener_for(&self.listeners, h.local).is_some() {
                self.segment_to_listener(now, tuple, &h.repr);
            } else if now >= h.expires {
                self.refuse(tuple, &h.repr);
            } else {
                self.held_syns.hold_on(h);
            }
        }
    }

    /// Acts on what a TCB asked for; most segments ask for nothing.
    #[inline]
    fn apply_events(&mut self, id: ConnId, evs: &mut Vec<TcbEvent>) {
        if !evs.is_empty() {
            self.apply_pending_events(id, evs);
        }
    }

    fn apply_pending_events(&mut self, id: ConnId, evs: &mut Vec<TcbEvent>) {
        for ev in evs.drain(..) {
            match ev {
                TcbEvent::Connected => self.events.push_back(Event::Connected(id)),
                TcbEvent::Accepted => {
                    if let Some(t) = self.tuple(id) {
                        self.events
                            .push_back(Event::Accepted { conn: id, tuple: t });
                    }
                }
                TcbEvent::PeerFin => {
                    if self.visible(id).is_some() {
                        self.events.push_back(Event::PeerClosed(id));
                    }
                }
                TcbEvent::Closed(reason) => {
                    if let Some(c) = self.conn_mut(id) {
                        if !c.tcb.reported_closed {
                            c.tcb.reported_closed = true;
                            let ulp = c.ulp.take();
                            self.events.push_back(Event::Closed {
                                conn: id,
                                reason,
                                ulp,
                            });
                        }
                    }
                }
                TcbEvent::Rst { seq, ack } => {
                    if let Some(c) = self.conn(id) {
                        let rst = Rst {
                            local: c.tcb.local,
                            remote: c.tcb.remote,
                            seq,
                            ack,
                            abort: false,
                        };
                        self.push_rst(rst);
                    }
                }
                TcbEvent::Remove => self.remove(id, None),
            }
        }
    }

    fn after_activity(&mut self, id: ConnId) {
        self.wake(id);
        self.schedule(id);
    }

    fn schedule(&mut self, id: ConnId) {
        if let Some(c) = slot_mut(&mut self.slots, id) {
            schedule_conn(&mut self.timers, c, id);
        }
    }

    // ------------------------------------------------------------------ timers

    /// When `handle_timeout` should next be called.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let held = self.held_syns.next_due();
        let slots = &mut self.slots;
        // An entry found superseded may be dropped: a far one no longer stands for its
        // connection's next filing at that time.
        let live = |d, id| match slot_mut(slots, id) {
            Some(c) if c.timer_at.get() == Some(d) => true,
            Some(c) => {
                if c.far_at.get() == Some(d) {
                    c.far_at = Due::NONE;
                }
                false
            }
            None => false,
        };
        let next = self.timers.peek_where(live).map(|(d, _)| d);
        Instant::earliest(next, held)
    }

    /// Run every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.release_held_syns(now);
        let mut due = std::mem::take(&mut self.due);
        loop {
            self.timers.expire(now, &mut due);
            if due.is_empty() {
                break;
            }
            for (d, id) in due.drain(..) {
                let Some(c) = slot_mut(&mut self.slots, id).filter(|c| c.timer_at.get() == Some(d))
                else {
                    continue;
                };
                match c.tcb.next_deadline() {
                    // The deadline it was queued for moved later (an ACK restarted the RTO
                    // or the probe timer): nothing is due, so the TCB, its ULP and the
                    // service on top are not visited; the entry is filed at the new
                    // deadline.
                    Some(t) if t > now => {
                        file_timer(&mut self.timers, c, id, t);
                        continue;
                    }
                    None => {
                        c.timer_at = Due::NONE;
                        continue;
                    }
                    Some(_) => c.timer_at = Due::NONE,
                }
                let mut evs = std::mem::take(&mut self.scratch);
                c.tcb.handle_timeout(now, &self.cfg, &mut evs);
                count_flight(&mut self.flight, c);
                self.mark_active(id);
                self.apply_events(id, &mut evs);
                self.scratch = evs;
                self.after_activity(id);
            }
        }
        self.due = due;
        self.release_waiters();
    }

    // ------------------------------------------------------------------ output

    /// Write the next IPv4 packet to send into `buf` (at least `Config::mtu` bytes).
    /// Call until it returns `None` after any `handle_*` call or ULP activity.
    pub fn poll_transmit(&mut self, now: Instant, cx: &mut C, buf: &mut [u8]) -> Option<Transmit> {
        self.transmit(now, cx, buf, &mut Gather::off())
    }

    /// Like [`Engine::poll_transmit`], but a payload of at least `min_payload` octets is not
    /// copied after the headers: `buf` gets the headers (their length in
    /// [`GatherTransmit::packet`]) and the payload is lent out as the unit's own buffer
    /// ([`Lent`]), which the engine keeps unchanged for retransmission and reuses only once
    /// the peer acknowledged it and every frame's token came back
    /// ([`Engine::payloads_returned`]). The TCP checksum (when filled) covers the payload;
    /// its sum is taken once per unit.
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        cx: &mut C,
        buf: &mut [u8],
        min_payload: usize,
    ) -> Option<GatherTransmit<'_>> {
        let min = if self.loans.full() {
            usize::MAX
        } else {
            min_payload
        };
        let mut gather = Gather::from(min);
        let packet = self.transmit(now, cx, buf, &mut gather)?;
        // The unit lent is still in its send queue (acknowledged units are settled before
        // a turn, never lent), so its payload is there.
        let payload = gather.lent.and_then(|(id, i, token, room)| {
            let unit = slot_mut(&mut self.slots, id)?.tcb.unit_at(i)?;
            let head = usize::from(unit.head);
            let octets = if room && head > 0 {
                LentOctets::Room {
                    buffer: unit.data.as_mut_slice(),
                    head,
                }
            } else {
                LentOctets::Payload(unit.payload())
            };
            Some(Lent {
                octets,
                token: u64::from(token),
            })
        });
        Some(GatherTransmit { packet, payload })
    }

    /// The holders of lent payloads ([`Lent`]) let go of them: `tokens`, each as
    /// [`Lent::token`] gave it, once per frame. A unit's buffer is reused once it was
    /// acknowledged and no frame holds it. Tokens naming no frame held are ignored.
    pub fn payloads_returned(&mut self, cx: &mut C, tokens: impl IntoIterator<Item = u64>) {
        for token in tokens {
            let Some((owner, buffer)) = self.loans.returned(token) else {
                continue;
            };
            if let Some(ulp) = slot_mut(&mut self.slots, owner).and_then(|c| c.ulp.as_mut()) {
                ulp.recycle(cx, buffer);
            }
        }
    }

    fn transmit(
        &mut self,
        now: Instant,
        cx: &mut C,
        buf: &mut [u8],
        gather: &mut Gather,
    ) -> Option<Transmit> {
        if let Some(rst) = self.rsts.pop_front() {
            let hdr = Header {
                control: TcpControl::Rst,
                seq: rst.seq,
                ack: rst.ack,
                window: 0,
                syn: None,
                sack: [None; 3],
                timestamp: None,
            };
            if let Some(len) = write_packet(buf, &self.cfg, rst.local, rst.remote, &hdr, &[]) {
                self.stats.resets_sent += 1;
                self.stats.aborts_sent += u64::from(rst.abort);
                self.stats.segments_out += 1;
                return Some(Transmit {
                    len,
                    src: rst.local.ip(),
                    dst: rst.remote.ip(),
                });
            }
        }
        if let Some((local, remote, hdr)) = self.cookies.pop_front() {
            if let Some(len) = write_packet(buf, &self.cfg, local, remote, &hdr, &[]) {
                self.stats.segments_out += 1;
                return Some(Transmit {
                    len,
                    src: local.ip(),
                    dst: remote.ip(),
                });
            }
        }
        let cap = self.holding_window();
        // The connection at the front stays there while its turn lasts (it leaves the list
        // on every other path).
        while let Some(&id) = self.ready.front() {
            let mut evs = std::mem::take(&mut self.scratch);
            let sent = {
                let Some(c) = slot_mut(&mut self.slots, id) else {
                    self.ready.pop_front();
                    self.scratch = evs;
                    self.turn = 0;
                    continue;
                };
                let open = flight_open(
                    self.cfg.max_flight,
                    self.flight + self.reserved,
                    self.waiters.is_empty(),
                    c,
                );
                c.tcb.flight_open = open;
                c.tcb.flight_held = false;
                let Conn {
                    tcb,
                    ulp,
                    held,
                    held_start,
                    ..
                } = c;
                if gather.lends() && tcb.txq_mut().has_lent_done() {
                    settle_lent(tcb, ulp.as_mut(), cx, &mut self.loans);
                }
                let r = match ulp.as_mut() {
                    Some(ulp) => {
                        let mut u = Bound {
                            ulp,
                            cx: &mut *cx,
                            now,
                        };
                        tcb.poll_transmit(now, &self.cfg, &mut u, buf, gather, &mut evs)
                    }
                    None => {
                        let mut h = Holding {
                            buf: held,
                            start: held_start,
                            cap,
                        };
                        tcb.poll_transmit(now, &self.cfg, &mut h, buf, gather, &mut evs)
                    }
                };
                if gather.lends() {
                    if let Some(i) = gather.lend.take() {
                        // `poll_transmit_gather` asks only with a loan record free. The
                        // room in front of the payload is free when no frame holds it.
                        let unit = tcb.txq_mut().unit_mut(i);
                        let room = !self.loans.held(unit.loan);
                        let token = self.loans.lend(unit, id);
                        gather.lent = token.map(|t| (id, i, t, room));
                    }
                }
                // The addresses of a packet sent, read back from the header just written
                // (in the cache) rather than from the TCB's address line, which an ACK
                // through the header template does not read otherwise.
                let addresses = r.map(|_| {
                    crate::ip::header_addresses(buf)
                        .unwrap_or_else(|| (tcb.local.ip(), tcb.remote.ip()))
                });
                count_flight(&mut self.flight, c);
                if let (Some(len), Some((local, remote)), true) = (r, addresses, evs.is_empty()) {
                    // A segment went out and the TCB asks nothing of the engine: the
                    // connection in hand is scheduled, asked whether it has more and, at
                    // the end of its turn, listed active, without being looked up again.
                    // Listed once per turn, not per segment: what the ULP leaves the
                    // service (`SegmentSource::needs_service`) waits there until the
                    // service takes it, so asking at the turn's end sees it all.
                    schedule_conn(&mut self.timers, c, id);
                    let more = c
                        .ulp
                        .as_ref()
                        .is_none_or(|u| c.tcb.may_send_more(&self.cfg, u.pending(), u.rx_window()));
                    c.queued = more;
                    let turn_over = more && self.turn + 1 >= TX_QUANTUM;
                    let listed = (!more || turn_over) && list_active(&mut self.active, c, id);
                    if turn_over {
                        Self::end_admission(&mut self.reserved, c);
                    }
                    self.scratch = evs;
                    if listed {
                        self.bound_active();
                    }
                    if !more {
                        self.turn = 0;
                        self.ready.pop_front();
                    } else if turn_over {
                        self.turn = 0;
                        self.ready.pop_front();
                        self.ready.push_back(id);
                    } else {
                        self.turn += 1;
                    }
                    self.stats.segments_out += 1;
                    return Some(Transmit {
                        len,
                        src: local,
                        dst: remote,
                    });
                }
                self.ready.pop_front();
                if r.is_none() {
                    c.queued = false;
                    Self::end_admission(&mut self.reserved, c);
                    if c.tcb.flight_held && !c.waiting {
                        c.waiting = true;
                        self.waiters.push_back(id);
                    }
                }
                r.zip(addresses)
                    .map(|(len, (local, remote))| (len, local, remote))
            };
            // A ULP that only had nothing to send is not listed: the service that woke it
            // would be called back for it on every poll. One whose turn sent segments
            // (`turn`, not listed yet: listing waits for the turn's end) is listed as the
            // turn ends here.
            if sent.is_some() || self.turn > 0 {
                self.mark_active(id);
            }
            self.apply_events(id, &mut evs);
            self.scratch = evs;
            self.schedule(id);
            if sent.is_none() {
                self.turn = 0;
            }
            if let Some((len, local, remote)) = sent {
                // A connection that certainly has nothing more to send now leaves the ready
                // list (the next call would only find that out); a later wake brings it back.
                let more = slot_mut(&mut self.slots, id).map(|c| {
                    let more = c
                        .ulp
                        .as_ref()
                        .is_none_or(|u| c.tcb.may_send_more(&self.cfg, u.pending(), u.rx_window()));
                    c.queued = more;
                    more
                });
                if more == Some(true) {
                    self.turn += 1;
                    if self.turn < TX_QUANTUM {
                        self.ready.push_front(id);
                    } else {
                        self.turn = 0;
                        self.ready.push_back(id);
                        if let Some(c) = slot_mut(&mut self.slots, id) {
                            Self::end_admission(&mut self.reserved, c);
                        }
                    }
                } else {
                    self.turn = 0;
                }
                self.stats.segments_out += 1;
                return Some(Transmit {
                    len,
                    src: local,
                    dst: remote,
                });
            }
            if !self.rsts.is_empty() || !self.cookies.is_empty() {
                return self.transmit(now, cx, buf, gather);
            }
            if self.ready.is_empty() && !self.waiters.is_empty() {
                // Room may have been left by connections admitted with nothing to send.
                self.release_waiters();
            }
        }
        None
    }
}

/// Whether `c` may send new data under `Config::max_flight` (`cap`), with `taken` octets
/// of it in flight or reserved: it was woken from the waiting list for room (its turn), or
/// room is left and nobody waits (`none_waiting`).
#[inline]
fn flight_open<U>(cap: Option<usize>, taken: usize, none_waiting: bool, c: &Conn<U>) -> bool {
    cap.is_none_or(|cap| c.admitted > 0 || (taken < cap && none_waiting))
}

/// Lists `c` (of `id`) among the connections whose ULP ran, unless it is listed, has no
/// ULP or its ULP needs no service for what ran ([`crate::SegmentSource::needs_service`], asked
/// while its state is in the cache); returns whether it was added.
#[inline]
fn list_active<U: Ulp<C>, C: ?Sized>(
    active: &mut Vec<ConnId>,
    c: &mut Conn<U>,
    id: ConnId,
) -> bool {
    if c.active || c.ulp.as_ref().is_none_or(|u| !u.needs_service()) {
        return false;
    }
    c.active = true;
    active.push(id);
    true
}

/// Makes the engine's timer wheel hold an entry for `c` (of `id`) due no later than its
/// earliest deadline.
#[inline]
fn schedule_conn<U>(timers: &mut TimerWheel<ConnId>, c: &mut Conn<U>, id: ConnId) {
    // The wheel's entry for the connection (at `timer_at`) was due no later than each of
    // its deadlines; only one armed since can be earlier.
    let armed = c.tcb.take_armed();
    if c.timer_at.get().is_some_and(|t| armed >= t.as_nanos()) {
        debug_assert!(
            c.tcb
                .next_deadline()
                .is_none_or(|d| c.timer_at.get().is_some_and(|t| t <= d)),
            "a deadline earlier than the engine's timer was armed unnoticed"
        );
        return;
    }
    let Some(d) = c.tcb.next_deadline() else {
        return;
    };
    if c.timer_at.get().is_none_or(|t| d < t) {
        file_timer(timers, c, id, d);
    }
}

/// Files `c`'s timer entry (of `id`) due at `at`. An entry a turn or more ahead waits in
/// the wheel's overflow until the wheel comes near it; one filed there earlier at the same
/// time and still there is made live again instead of a second one being added. An idle
/// connection's far deadline (the idle or keepalive one, which stays put while the
/// connection comes and goes) is filed again each time its retransmission deadline passes
/// with nothing in flight: one copy each time, each kept until that deadline, would grow
/// the overflow with every idle spell of every connection.
#[inline]
fn file_timer<U>(timers: &mut TimerWheel<ConnId>, c: &mut Conn<U>, id: ConnId, at: Instant) {
    c.timer_at = Due::at(at);
    if timers.is_far(at) {
        if c.far_at == Due::at(at) {
            return;
        }
        c.far_at = Due::at(at);
    }
    timers.push(at, id);
}

/// Brings `c`'s share of the engine's octets in flight (`total`) up to date.
fn count_flight<U>(total: &mut usize, c: &mut Conn<U>) {
    let f = u32::try_from(c.tcb.flight_size()).unwrap_or(u32::MAX);
    *total = *total - c.flight as usize + f as usize;
    c.flight = f;
}

/// Settles the payloads of `tcb`'s units acknowledged after being lent
/// ([`crate::tx::SendQueue::settle_lent`]): buffers no frame holds go back to `ulp`.
#[inline(never)]
fn settle_lent<U: Ulp<C>, C: ?Sized>(
    tcb: &mut Tcb,
    ulp: Option<&mut U>,
    cx: &mut C,
    loans: &mut Loans,
) {
    match ulp {
        Some(ulp) => tcb.txq_mut().settle_lent(loans, |b| ulp.recycle(cx, b)),
        None => tcb.txq_mut().settle_lent(loans, drop),
    }
}

fn slot_ref<U>(slots: &[Option<Conn<U>>], id: ConnId) -> Option<&Conn<U>> {
    slots
        .get(id.index as usize)?
        .as_ref()
        .filter(|c| c.generation == id.generation)
}

fn slot_mut<U>(slots: &mut [Option<Conn<U>>], id: ConnId) -> Option<&mut Conn<U>> {
    slots
        .get_mut(id.index as usize)?
        .as_mut()
        .filter(|c| c.generation == id.generation)
}

/// The listener of `listeners` that takes connections to `local`.
fn listener_for(listeners: &FxHashMap<u16, Listener>, local: SocketAddr) -> Option<&Listener> {
    listeners
        .get(&local.port())
        .filter(|l| l.addr.is_unspecified() || l.addr == local.ip())
}

fn is_unicast(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => !(a.is_broadcast() || a.is_multicast() || a.is_unspecified()),
        IpAddr::V6(a) => !(a.is_multicast() || a.is_unspecified()),
    }
}

#[cfg(test)]
mod layout {
    use super::{Attached, Conn, Tcb};
    use core::mem::{offset_of, size_of};

    /// Every visit reads the slot's generation, list flags, timer entry and flight count:
    /// they must share the line after the TCB, where the ULP begins (see [`Conn`]).
    #[test]
    fn the_visit_fields_share_the_line_after_the_tcb() {
        let line = size_of::<Tcb>() / 64;
        let starts = [
            offset_of!(Conn<u64>, generation),
            offset_of!(Conn<u64>, queued),
            offset_of!(Conn<u64>, active),
            offset_of!(Conn<u64>, waiting),
            offset_of!(Conn<u64>, timer_at),
            offset_of!(Conn<u64>, far_at),
            offset_of!(Conn<u64>, flight),
            offset_of!(Conn<u64>, admitted),
            offset_of!(Conn<u64>, ulp),
        ];
        assert!(
            starts.iter().all(|&o| o / 64 == line),
            "offsets {starts:?}, line {line}"
        );
    }

    /// The ULP's marker (the tag of its `Option`) and the ULP's first three words (the
    /// iWARP connection's time, EMSS and flags) share that line too.
    #[test]
    fn the_ulp_marker_and_the_ulps_first_words_share_it() {
        let line = size_of::<Tcb>() / 64;
        let marker = offset_of!(Conn<u64>, ulp) + offset_of!(Attached<u64>, marker);
        let ulp = offset_of!(Conn<u64>, ulp) + offset_of!(Attached<u64>, ulp);
        assert_eq!(marker / 64, line, "marker at {marker}");
        assert_eq!((ulp + 3 * 8 - 1) / 64, line, "ULP at {ulp}");
    }
}
