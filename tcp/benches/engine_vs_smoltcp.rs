//! `engine-vs-smoltcp`: in-memory bulk goodput of the TCP engine against smoltcp 0.14's own
//! TCP socket and interface doing the same work: one connection between two endpoints in
//! memory, MTU 1500, IPv4 and TCP checksums filled on send and verified on receive, every
//! received byte checked against the sent pattern, the same send and receive buffer sizes
//! on both. The two are run interleaved (engine, smoltcp, engine, ...) on one pinned CPU;
//! the figure is the median of the pairwise goodput ratios. Goodput is bytes per second of
//! the thread's CPU time (what the work costs, robust to other processes taking the CPU
//! away); the wall-clock figures are printed alongside.
//!
//! Each side's applications use the best API their stack offers. smoltcp's sender writes
//! the pattern straight into the socket's send buffer (`Socket::send` closure) and its
//! receiver checks the received bytes where they lie in the socket's receive buffer
//! (`Socket::recv` closure). The engine's applications are the connection's segment source
//! and sink (`SegmentSource`, `SegmentSink`: the hooks the iWARP path sends and places
//! through): the sender writes the pattern into a unit's buffer when the engine asks for
//! the next segment, summing it as it writes (`checksum::copy_payload`, `Unit::with_sum`),
//! so the engine copies it into the frame without summing it again; the receiver checks
//! each arriving in-order payload where it lies in the packet, summing it for the engine's
//! checksum verification (`SegmentSink::stage`), and counts the bytes only once the engine
//! accepted the segment (checksums right, in order, in the window).
//!
//! Both run the same round loop over the same in-memory wire: each round the simulated
//! clock advances 10 µs, the applications write and read, then each endpoint takes the
//! packets sent to it in the previous round and sends what it has. Packet buffers are
//! reused, so the wire allocates nothing per packet.
//!
//!     cargo bench -p tcp --bench engine_vs_smoltcp -- [MiB] [pairs]
//!
//! Environment: `BENCH_MIB` (per run, default 256), `BENCH_PAIRS` (default 5),
//! `BENCH_BUF_KIB` (send and receive buffers of each side, default 4096), `BENCH_CPU` (the
//! CPU to pin to; default the one the process starts on), `BENCH_ONLY` (`engine` or
//! `smoltcp`: run only that one, for profiling). Exits non-zero when a transfer is short,
//! stalls or delivers a wrong byte.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant as WallClock};

use smoltcp::iface::{Config as IfaceConfig, Interface, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp::{Socket as SmolSocket, SocketBuffer};
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr};
use tcp::checksum::{copy_payload, payload_sum, PayloadSum};
use tcp::{Config, Consumed, Engine, Event, Instant, SegmentSink, SegmentSource, Unit};

/// The MTU of both implementations.
const MTU: usize = 1500;
/// The pattern's period: it divides no power of two, so a misplaced chunk does not compare
/// equal by accident.
const PERIOD: usize = 251;
/// The applications write and check at most this many bytes at a time.
const CHUNK: usize = 1 << 16;
/// Simulated time per round (the one-way delay of the wire).
const ROUND: Duration = Duration::from_micros(10);
/// A transfer that makes no progress for this much simulated time has stalled.
const STALL: Duration = Duration::from_secs(5);

/// The sent byte stream: byte `off` is `off % PERIOD`.
struct Pattern(Vec<u8>);

impl Pattern {
    fn new() -> Self {
        Pattern((0..PERIOD + CHUNK).map(|i| (i % PERIOD) as u8).collect())
    }

    /// The `len` (at most [`CHUNK`]) pattern bytes from stream offset `off`.
    fn at(&self, off: u64, len: usize) -> &[u8] {
        let s = (off % PERIOD as u64) as usize;
        &self.0[s..s + len]
    }
}

/// The receiving application: checks every byte against the pattern.
#[derive(Default)]
struct Checker {
    received: u64,
    mismatches: u64,
}

impl Checker {
    /// Checks `bytes`, the next received ones, in place; returns how many (all).
    fn take(&mut self, pattern: &Pattern, bytes: &[u8]) -> usize {
        for piece in bytes.chunks(CHUNK) {
            if !self.matches(pattern, piece) {
                self.mismatches += 1;
            }
            self.received += piece.len() as u64;
        }
        bytes.len()
    }

    /// Whether `piece` (at most [`CHUNK`] bytes) is the pattern at the next offset.
    fn matches(&self, pattern: &Pattern, piece: &[u8]) -> bool {
        piece == pattern.at(self.received, piece.len())
    }
}

/// The verdict on a payload offered before its checksum was verified.
#[derive(Clone, Copy)]
struct Staged {
    seq: u32,
    len: usize,
    matched: bool,
}

/// The engine's endpoints' upper layer: the sending application as the segment source,
/// writing the pattern into a unit's buffer when the engine asks for the next segment, and
/// the receiving application as the segment sink, checking payloads in the packets they
/// arrived in.
struct Endpoint {
    /// Bytes to send in all, and sent so far.
    total: usize,
    written: usize,
    /// Buffers of acknowledged units, for the next ones.
    spare: Vec<Vec<u8>>,
    pattern: Rc<Pattern>,
    check: Checker,
    /// The sequence number of the next in-order byte, once one arrived.
    next_seq: Option<u32>,
    staged: Option<Staged>,
    window: usize,
}

impl Endpoint {
    /// An endpoint that sends `total` bytes of the pattern and takes a window of `buf`.
    fn new(total: usize, buf: usize, pattern: &Rc<Pattern>) -> Self {
        Endpoint {
            total,
            written: 0,
            spare: Vec::new(),
            pattern: Rc::clone(pattern),
            check: Checker::default(),
            next_seq: None,
            staged: None,
            window: buf,
        }
    }

    /// Counts in-order `bytes` at `seq`, checked now or, when staged, before.
    fn deliver(&mut self, seq: u32, bytes: &[u8]) {
        match self.staged.take() {
            Some(s) if s.seq == seq && s.len == bytes.len() => {
                self.check.mismatches += u64::from(!s.matched);
                self.check.received += bytes.len() as u64;
            }
            _ => {
                self.check.take(&self.pattern, bytes);
            }
        }
        self.next_seq = Some(seq.wrapping_add(bytes.len() as u32));
    }
}

impl SegmentSink for Endpoint {
    fn on_segment(
        &mut self,
        _cx: &mut (),
        _now: Instant,
        seq: u32,
        payload: &[u8],
        in_order: bool,
        _rcv_nxt: u32,
    ) -> Consumed {
        if !in_order {
            // Out of order: the engine keeps it and hands it over in order.
            return Consumed::none();
        }
        self.deliver(seq, payload);
        Consumed::all(payload.len())
    }

    fn on_in_order(&mut self, _cx: &mut (), _now: Instant, seq: u32, bytes: &[u8]) {
        self.deliver(seq, bytes);
    }

    fn rx_window(&self) -> usize {
        // Every byte is consumed as it arrives.
        self.window
    }

    /// The next in-order payload is checked and summed where it lies; its verdict counts
    /// only if the engine hands the same bytes over (checksum verified, in the window).
    fn stage(&mut self, _cx: &mut (), seq: u32, payload: &[u8]) -> Option<PayloadSum> {
        self.staged = None;
        if self.next_seq.is_some_and(|next| next != seq) || payload.len() > CHUNK {
            return None;
        }
        let sum = payload_sum(payload);
        self.staged = Some(Staged {
            seq,
            len: payload.len(),
            matched: self.check.matches(&self.pattern, payload),
        });
        Some(sum)
    }

    fn unstage(&mut self, _cx: &mut ()) {
        self.staged = None;
    }
}

impl SegmentSource for Endpoint {
    /// The next `max_len` bytes of the pattern, written into a spare buffer and summed in
    /// the same pass (the engine then copies them into the frame without summing again).
    fn next_unit(
        &mut self,
        _cx: &mut (),
        _now: Instant,
        _seq: u32,
        max_len: usize,
    ) -> Option<Unit> {
        let n = max_len.min(self.total - self.written);
        if n == 0 {
            return None;
        }
        let mut payload = self.spare.pop().unwrap_or_default();
        // A spare buffer's old bytes are overwritten below, not zeroed first.
        if payload.len() < n {
            payload.resize(n, 0);
        }
        payload.truncate(n);
        let sum = copy_payload(&mut payload, self.pattern.at(self.written as u64, n));
        self.written += n;
        Some(Unit::with_sum(payload, sum))
    }

    fn pending(&self) -> bool {
        self.written < self.total
    }

    fn recycle(&mut self, _cx: &mut (), buffer: Vec<u8>) {
        self.spare.push(buffer);
    }
}

/// One endpoint's side of the wire: packets to take this round, packets sent this round,
/// and packet buffers (each [`MTU`] long) to reuse.
#[derive(Default)]
struct Port {
    inbox: VecDeque<(Vec<u8>, usize)>,
    outbox: VecDeque<(Vec<u8>, usize)>,
    free: Vec<Vec<u8>>,
    used: Vec<Vec<u8>>,
}

impl Port {
    fn buffer(free: &mut Vec<Vec<u8>>) -> Vec<u8> {
        free.pop().unwrap_or_else(|| vec![0; MTU])
    }
}

/// End of a round: what each side sent reaches the other, and the buffers each side took
/// go back to the side that sent them.
fn exchange(a: &mut Port, b: &mut Port) {
    a.inbox.append(&mut b.outbox);
    b.inbox.append(&mut a.outbox);
    a.free.append(&mut b.used);
    b.free.append(&mut a.used);
}

/// How one transfer went.
struct Run {
    cpu_secs: f64,
    wall_secs: f64,
    exact: bool,
}

impl Run {
    /// Goodput per second of CPU time and per second of wall-clock time, Gbit/s.
    fn gbps(&self, total: usize) -> (f64, f64) {
        let bits = total as f64 * 8.0 / 1e9;
        (bits / self.cpu_secs, bits / self.wall_secs)
    }
}

/// Both clocks at the start of a transfer.
struct Clocks {
    cpu: Duration,
    wall: WallClock,
}

impl Clocks {
    /// The CPU time this thread used so far.
    fn cpu() -> Duration {
        use nix::time::{clock_gettime, ClockId};
        clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(Duration::ZERO, Duration::from)
    }

    fn start() -> Self {
        Clocks {
            cpu: Self::cpu(),
            wall: WallClock::now(),
        }
    }

    fn finish(&self, check: &Checker, total: usize) -> Run {
        Run {
            cpu_secs: (Self::cpu() - self.cpu).as_secs_f64(),
            wall_secs: self.wall.elapsed().as_secs_f64(),
            exact: check.received == total as u64 && check.mismatches == 0,
        }
    }
}

/// Stall detection in simulated time.
struct Progress {
    last: u64,
    since: Duration,
}

impl Progress {
    fn new() -> Self {
        Progress {
            last: 0,
            since: Duration::ZERO,
        }
    }

    /// Whether `received` moved within [`STALL`].
    fn moving(&mut self, received: u64) -> bool {
        if received != self.last {
            self.last = received;
            self.since = Duration::ZERO;
        } else {
            self.since += ROUND;
        }
        self.since < STALL
    }
}

/// The engine: `Engine<Endpoint>` on both sides.
fn run_engine(total: usize, buf: usize, pattern: &Rc<Pattern>) -> Run {
    let cfg = Config {
        mtu: MTU,
        max_rx_window: buf,
        fill_checksums: true,
        verify_checksums: true,
        ..Config::default()
    };
    let mut a: Engine<Endpoint> = Engine::new(cfg.clone());
    let mut b: Engine<Endpoint> = Engine::new(cfg);
    let b_addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
    b.listen(b_addr, 16).expect("listen");
    let mut now = Instant::ZERO;
    a.connect(
        now,
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 49152),
        b_addr,
        Endpoint::new(total, buf, pattern),
    )
    .expect("connect");
    let (mut pa, mut pb) = (Port::default(), Port::default());
    let mut accepted = None;
    let mut progress = Progress::new();
    let received = |b: &Engine<Endpoint>, c: Option<_>| {
        c.and_then(|c| b.ulp(c))
            .map_or(0, |e: &Endpoint| e.check.received)
    };
    let start = Clocks::start();
    while received(&b, accepted) < total as u64 && progress.moving(received(&b, accepted)) {
        now = now + ROUND;
        // a's application writes when the engine asks for segments (`Endpoint`'s source).
        for (pkt, len) in pa.inbox.drain(..) {
            let _ = a.handle_packet(now, &mut (), &pkt[..len]);
            pa.used.push(pkt);
        }
        a.handle_timeout(now);
        while a.poll_event().is_some() {}
        transmit(&mut a, now, &mut pa);

        // b's application checks what arrives as it arrives (`Endpoint`'s sink).
        for (pkt, len) in pb.inbox.drain(..) {
            let _ = b.handle_packet(now, &mut (), &pkt[..len]);
            pb.used.push(pkt);
        }
        b.handle_timeout(now);
        while let Some(ev) = b.poll_event() {
            if let Event::Accepted { conn, .. } = ev {
                b.attach(now, &mut (), conn, Endpoint::new(0, buf, pattern))
                    .expect("attach");
                accepted = Some(conn);
            }
        }
        transmit(&mut b, now, &mut pb);
        exchange(&mut pa, &mut pb);
    }
    let check = accepted
        .and_then(|c| b.ulp(c))
        .map_or_else(Checker::default, |e| Checker {
            received: e.check.received,
            mismatches: e.check.mismatches,
        });
    start.finish(&check, total)
}

/// Every packet `engine` has to send now, into `port`'s outbox.
fn transmit(engine: &mut Engine<Endpoint>, now: Instant, port: &mut Port) {
    loop {
        let mut pkt = Port::buffer(&mut port.free);
        match engine.poll_transmit(now, &mut (), &mut pkt) {
            Some(t) => port.outbox.push_back((pkt, t.len)),
            None => {
                port.free.push(pkt);
                break;
            }
        }
    }
}

/// A received packet, handed to smoltcp.
struct PortRx<'a> {
    pkt: (Vec<u8>, usize),
    used: &'a mut Vec<Vec<u8>>,
}

impl RxToken for PortRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let (pkt, len) = self.pkt;
        let r = f(&pkt[..len]);
        self.used.push(pkt);
        r
    }
}

/// Room for one packet smoltcp sends.
struct PortTx<'a> {
    outbox: &'a mut VecDeque<(Vec<u8>, usize)>,
    free: &'a mut Vec<Vec<u8>>,
}

impl TxToken for PortTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut pkt = Port::buffer(self.free);
        if pkt.len() < len {
            pkt.resize(len, 0);
        }
        let r = f(&mut pkt[..len]);
        self.outbox.push_back((pkt, len));
        r
    }
}

impl Device for Port {
    type RxToken<'a> = PortRx<'a>;
    type TxToken<'a> = PortTx<'a>;

    fn receive(&mut self, _now: SmolInstant) -> Option<(PortRx<'_>, PortTx<'_>)> {
        let pkt = self.inbox.pop_front()?;
        Some((
            PortRx {
                pkt,
                used: &mut self.used,
            },
            PortTx {
                outbox: &mut self.outbox,
                free: &mut self.free,
            },
        ))
    }

    fn transmit(&mut self, _now: SmolInstant) -> Option<PortTx<'_>> {
        Some(PortTx {
            outbox: &mut self.outbox,
            free: &mut self.free,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        // Checksums: filled and verified (the default).
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = MTU;
        caps
    }
}

/// smoltcp's simulated clock in milliseconds, for its TCP timestamps (the generator is a
/// plain function).
static SMOL_MILLIS: AtomicU32 = AtomicU32::new(0);

fn smol_tsval() -> u32 {
    SMOL_MILLIS.load(Ordering::Relaxed)
}

/// One smoltcp interface with one TCP socket.
fn smol_endpoint(ip: IpAddress, port: &mut Port, buf: usize) -> (Interface, SocketSet<'static>) {
    let mut iface = Interface::new(
        IfaceConfig::new(HardwareAddress::Ip),
        port,
        SmolInstant::ZERO,
    );
    iface.update_ip_addrs(|addrs| {
        addrs.push(IpCidr::new(ip, 24)).expect("address");
    });
    let mut socket = SmolSocket::new(
        SocketBuffer::new(vec![0; buf]),
        SocketBuffer::new(vec![0; buf]),
    );
    // The engine sends timestamps on every segment; so does smoltcp here.
    socket.set_tsval_generator(Some(smol_tsval));
    let mut sockets = SocketSet::new(Vec::new());
    sockets.add(socket);
    (iface, sockets)
}

/// smoltcp: `socket::tcp::Socket` + `iface::Interface` on both sides.
fn run_smoltcp(total: usize, buf: usize, pattern: &Rc<Pattern>) -> Run {
    let (mut pa, mut pb) = (Port::default(), Port::default());
    let (a_ip, b_ip) = (IpAddress::v4(10, 0, 0, 1), IpAddress::v4(10, 0, 0, 2));
    let (mut a_if, mut a_set) = smol_endpoint(a_ip, &mut pa, buf);
    let (mut b_if, mut b_set) = smol_endpoint(b_ip, &mut pb, buf);
    let a_h = a_set.iter().next().map(|(h, _)| h).expect("socket");
    let b_h = b_set.iter().next().map(|(h, _)| h).expect("socket");
    b_set.get_mut::<SmolSocket>(b_h).listen(80).expect("listen");
    a_set
        .get_mut::<SmolSocket>(a_h)
        .connect(a_if.context(), (b_ip, 80), 49152)
        .expect("connect");
    let mut now = Duration::ZERO;
    let mut written = 0usize;
    let mut check = Checker::default();
    let mut progress = Progress::new();
    let start = Clocks::start();
    while check.received < total as u64 && progress.moving(check.received) {
        now += ROUND;
        SMOL_MILLIS.store(now.as_millis() as u32, Ordering::Relaxed);
        let t = SmolInstant::from_micros(now.as_micros() as i64);
        let s = a_set.get_mut::<SmolSocket>(a_h);
        if s.may_send() {
            while written < total {
                let sent = s.send(|room| {
                    let n = room.len().min(total - written).min(CHUNK);
                    room[..n].copy_from_slice(pattern.at(written as u64, n));
                    (n, n)
                });
                match sent {
                    Ok(n) if n > 0 => written += n,
                    _ => break,
                }
            }
        }
        a_if.poll(t, &mut pa, &mut a_set);

        let s = b_set.get_mut::<SmolSocket>(b_h);
        while let Ok(n) = s.recv(|bytes| {
            let n = check.take(pattern, bytes);
            (n, n)
        }) {
            if n == 0 {
                break;
            }
        }
        b_if.poll(t, &mut pb, &mut b_set);
        exchange(&mut pa, &mut pb);
    }
    start.finish(&check, total)
}

/// Pin the process to `cpu` (or to the CPU it runs on); returns the CPU.
fn pin(cpu: Option<usize>) -> Option<usize> {
    use nix::sched::{sched_getcpu, sched_setaffinity, CpuSet};
    let cpu = cpu.or_else(|| sched_getcpu().ok())?;
    let mut set = CpuSet::new();
    set.set(cpu).ok()?;
    sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).ok()?;
    Some(cpu)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A positional argument (cargo bench adds `--bench`) or else an environment variable.
fn setting(pos: usize, env: &str, default: usize) -> usize {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .nth(pos)
        .or_else(|| std::env::var(env).ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let mib = setting(0, "BENCH_MIB", 256).max(1);
    let pairs = setting(1, "BENCH_PAIRS", 5).max(1);
    let buf = setting(usize::MAX, "BENCH_BUF_KIB", 4096).max(64) << 10;
    let cpu = std::env::var("BENCH_CPU").ok().and_then(|v| v.parse().ok());
    let total = mib << 20;
    let pinned = pin(cpu);
    println!(
        "engine-vs-smoltcp: {mib} MiB per run, interleaved pairs: {pairs}, MTU {MTU}, buffers {} KiB each side, checksums filled and verified, every byte checked, {}",
        buf >> 10,
        pinned.map_or("not pinned".to_string(), |c| format!("pinned to CPU {c}"))
    );
    let pattern = Rc::new(Pattern::new());
    if let Ok(only) = std::env::var("BENCH_ONLY") {
        let run = match only.as_str() {
            "engine" => run_engine,
            "smoltcp" => run_smoltcp,
            other => {
                eprintln!("engine-vs-smoltcp: BENCH_ONLY must be engine or smoltcp, not '{other}'");
                return ExitCode::from(2);
            }
        };
        let mut gbps = Vec::new();
        let mut exact = true;
        for _ in 0..pairs {
            let r = run(total, buf, &pattern);
            exact &= r.exact;
            gbps.push(r.gbps(total).0);
        }
        println!(
            "{only}-gbps: {:.2} (median per CPU-second)",
            median(&mut gbps)
        );
        return if exact {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let (mut engine, mut smol, mut ratios, mut wall_ratios) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut exact = true;
    for i in 0..pairs {
        let e = run_engine(total, buf, &pattern);
        let s = run_smoltcp(total, buf, &pattern);
        exact &= e.exact && s.exact;
        let ((eg, ew), (sg, sw)) = (e.gbps(total), s.gbps(total));
        println!(
            "pair {}: engine {eg:.2} Gbit/s{} (wall {ew:.2}), smoltcp {sg:.2} Gbit/s{} (wall {sw:.2}), ratio {:.2} (wall {:.2})",
            i + 1,
            if e.exact { "" } else { " NOT byte-exact" },
            if s.exact { "" } else { " NOT byte-exact" },
            eg / sg,
            ew / sw
        );
        engine.push(eg);
        smol.push(sg);
        ratios.push(eg / sg);
        wall_ratios.push(ew / sw);
    }
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        (lo, hi)
    };
    let (elo, ehi) = spread(&engine);
    let (slo, shi) = spread(&smol);
    let (rlo, rhi) = spread(&ratios);
    println!(
        "engine-gbps: {:.2} (median per CPU-second; {elo:.2}..{ehi:.2})",
        median(&mut engine)
    );
    println!(
        "smoltcp-gbps: {:.2} (median per CPU-second; {slo:.2}..{shi:.2})",
        median(&mut smol)
    );
    println!(
        "engine-vs-smoltcp: {:.2} (median of {pairs} pairwise ratios; spread {rlo:.2}..{rhi:.2}; wall-clock median {:.2})",
        median(&mut ratios),
        median(&mut wall_ratios)
    );
    if exact {
        ExitCode::SUCCESS
    } else {
        println!("engine-vs-smoltcp: a transfer was short, stalled or not byte-exact");
        ExitCode::FAILURE
    }
}
