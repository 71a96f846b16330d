//! `dataplane tcp`: plain TCP over the data plane's own engine (crate `tcp`) on one port.
//!
//! Modes: `echo` and `sink` listen; `source` and `client` connect. The engine runs in the
//! poll loop's generic [`TcpHandler`] (the one the iWARP stack uses too), with this
//! application as its [`TcpService`]: each iteration it takes the engine's events and moves
//! application bytes between the sockets and the data.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dataplane::clock::{self, Instant};

use dataplane::lcore::{PollLoop, PortAddr};
use dataplane::neighbour::neighbour_shares;
use dataplane::port::Port;
use dataplane::runtime::LaneJob;
use dataplane::say;
use dataplane::steer::{steered_port, Lane};
use dataplane::tcp_handler::{TcpHandler, TcpService};
use rand::Rng;
use tcp::cc::CongestionAlgorithm;
use tcp::{CloseReason, ConnId, ConnInfo, Engine, Event, StreamSocket};

use super::common::{deadline, parse_secs, stop_flag, CmdError, PortArgs};

/// Socket buffer per connection (send and receive), which bounds the advertised window.
const SOCKET_BUF: usize = 4 << 20;

/// What `dataplane tcp` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Listen and send every received byte back.
    Echo,
    /// Listen and consume (optionally save) every received byte.
    Sink,
    /// Connect, send the data, close.
    Source,
    /// Connect, send the data, read it back from an echo server, close.
    Client,
}

/// Congestion controller choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cc {
    /// RFC 5681 / RFC 6582.
    Newreno,
    /// RFC 8312.
    Cubic,
}

/// Arguments of `tcp`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to run.
    #[arg(value_enum)]
    pub mode: Mode,
    /// TCP port to listen on (echo, sink).
    #[arg(long, value_name = "PORT")]
    pub listen: Option<u16>,
    /// Peer to connect to (source, client): `IPV4:PORT` or `[IPV6]:PORT`.
    #[arg(long, value_name = "IP:PORT")]
    pub connect: Option<SocketAddr>,
    /// Send the contents of this file (source, client).
    #[arg(long, value_name = "FILE", conflicts_with = "bytes")]
    pub file: Option<PathBuf>,
    /// Send this many pseudo-random bytes (source, client).
    #[arg(long, value_name = "N")]
    pub bytes: Option<u64>,
    /// Write the received bytes to this file (sink: the stream; client: the echo).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Serve one connection, then exit (echo, sink).
    #[arg(long)]
    pub once: bool,
    /// Stop after this many seconds (default: when done, or Ctrl-C).
    #[arg(long, short = 'd', value_name = "SECS", value_parser = parse_secs)]
    pub duration: Option<Duration>,
    /// Congestion control.
    #[arg(long, value_enum, default_value = "cubic")]
    pub cc: Cc,
    /// Minimum retransmission timeout in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5)]
    pub rto_min_ms: u64,
    /// Ports (exactly one).
    #[command(flatten)]
    pub ports: PortArgs,
}

/// Why a transfer failed.
#[derive(Debug, thiserror::Error)]
enum TransferError {
    /// Writing the received bytes to `--output` failed.
    #[error("--output: {0}")]
    Output(std::io::Error),
    /// The connection ended before the transfer was complete.
    #[error("connection ended ({reason:?}) after {sent} bytes sent, {received} received")]
    Ended {
        /// How it ended.
        reason: CloseReason,
        /// Bytes sent.
        sent: usize,
        /// Bytes received.
        received: u64,
    },
}

/// One connection of the application.
#[derive(Debug)]
struct AppConn {
    id: ConnId,
    /// The peer closed; close our side once everything read was echoed.
    peer_closed: bool,
    close_sent: bool,
}

/// The application on top of the engine.
struct TcpApp {
    mode: Mode,
    once: bool,
    data: Vec<u8>,
    written: usize,
    received: u64,
    output: Option<BufWriter<File>>,
    conns: Vec<AppConn>,
    stop: Arc<AtomicBool>,
    outcome: Option<Result<(), TransferError>>,
    started: Option<Instant>,
    finished: Option<Instant>,
    last_info: Option<ConnInfo>,
    scratch: Vec<u8>,
    /// Connections accepted or opened.
    connections: u64,
}

/// Bounds of [`time_wait_linger`].
const LINGER_MIN: Duration = Duration::from_millis(20);
const LINGER_MAX: Duration = Duration::from_secs(1);

/// How long a lane keeps running after a transfer that this side closed first (source,
/// client) and that ended well, i.e. with its connection in TIME-WAIT: the ACK of the peer's
/// FIN is the last frame the process sends, and a link that goes away with the process
/// (memif) loses what the peer has not read yet, which would leave the peer in LAST-ACK
/// retransmitting its FIN to nobody. One retransmission timeout (`rto`, at least 20 ms, at
/// most 1 s) lets the ACK be read and a retransmitted FIN be answered again (RFC 9293
/// §3.10.7.4). Nothing for the side that closed second or a transfer that failed.
fn time_wait_linger(mode: Mode, ended_well: bool, rto: Option<Duration>) -> Option<Duration> {
    let closed_first = matches!(mode, Mode::Source | Mode::Client);
    (closed_first && ended_well).then(|| rto.unwrap_or(LINGER_MIN).clamp(LINGER_MIN, LINGER_MAX))
}

impl TcpApp {
    fn finish(&mut self, now: Instant, outcome: Result<(), TransferError>) {
        if let Some(out) = self.output.as_mut() {
            if let Err(e) = out.flush() {
                self.outcome = Some(Err(TransferError::Output(e)));
            }
        }
        self.finished.get_or_insert(now);
        self.outcome.get_or_insert(outcome);
        self.stop.store(true, Ordering::Relaxed);
    }

    /// How long this lane keeps running after its transfer: see [`time_wait_linger`].
    fn time_wait_linger(&self) -> Option<Duration> {
        time_wait_linger(
            self.mode,
            matches!(self.outcome, Some(Ok(()))),
            self.last_info.map(|i| i.rto),
        )
    }

    fn take_received(&mut self, bytes: &[u8]) {
        self.received += bytes.len() as u64;
        if let Some(out) = self.output.as_mut() {
            if let Err(e) = out.write_all(bytes) {
                self.outcome = Some(Err(TransferError::Output(e)));
                self.stop.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Takes every readable byte where it lies in the socket's receive buffer (no copy
    /// into a buffer of ours, no allocation).
    fn read_in_place(&mut self, sock: &mut StreamSocket) {
        while sock.read_with(|bytes| {
            self.take_received(bytes);
            bytes.len()
        }) > 0
        {}
    }

    fn handle_events(&mut self, engine: &mut Engine<StreamSocket>, now: Instant) {
        while let Some(ev) = engine.poll_event() {
            match ev {
                Event::Accepted { conn, tuple } => {
                    say!("accepted {} from {}", tuple.local, tuple.remote);
                    if self.once && !self.conns.is_empty() {
                        let _ = engine.abort(conn);
                        continue;
                    }
                    let sock = StreamSocket::new(SOCKET_BUF, SOCKET_BUF);
                    if let Err(e) = engine.attach(now, &mut (), conn, sock) {
                        log::warn!("attach: {e}");
                        continue;
                    }
                    self.started.get_or_insert(now);
                    self.connections += 1;
                    self.conns.push(AppConn {
                        id: conn,
                        peer_closed: false,
                        close_sent: false,
                    });
                }
                Event::Connected(conn) => {
                    if let Some(t) = engine.tuple(conn) {
                        say!("connected {} to {}", t.local, t.remote);
                    }
                    self.connections += 1;
                    self.started.get_or_insert(now);
                }
                Event::PeerClosed(conn) => {
                    if let Some(c) = self.conns.iter_mut().find(|c| c.id == conn) {
                        c.peer_closed = true;
                    }
                }
                Event::Closed { conn, reason, ulp } => {
                    if let Some(mut sock) = ulp {
                        if matches!(self.mode, Mode::Sink | Mode::Client) {
                            self.read_in_place(&mut sock);
                        }
                    }
                    self.conns.retain(|c| c.id != conn);
                    say!("connection closed: {reason:?}");
                    let ok = match self.mode {
                        Mode::Source => {
                            reason == CloseReason::Normal && self.written == self.data.len()
                        }
                        Mode::Client => {
                            reason == CloseReason::Normal && self.received == self.data.len() as u64
                        }
                        Mode::Echo | Mode::Sink => reason == CloseReason::Normal,
                    };
                    if self.once || matches!(self.mode, Mode::Source | Mode::Client) {
                        let outcome = if ok {
                            Ok(())
                        } else {
                            Err(TransferError::Ended {
                                reason,
                                sent: self.written,
                                received: self.received,
                            })
                        };
                        self.finish(now, outcome);
                    }
                }
            }
        }
    }

    fn move_bytes(&mut self, engine: &mut Engine<StreamSocket>) {
        for i in 0..self.conns.len() {
            let id = self.conns[i].id;
            let Some(sock) = engine.ulp(id) else {
                continue;
            };
            let readable = sock.readable();
            let sendable = sock.send_capacity();
            let can_write = self.written < self.data.len() && sendable > 0;
            let done_sending = self.written == self.data.len();
            match self.mode {
                Mode::Echo => {
                    let n = readable.min(sendable);
                    if n > 0 {
                        self.scratch.resize(n, 0);
                        let Some(sock) = engine.ulp_mut(id) else {
                            continue;
                        };
                        let got = sock.read(&mut self.scratch[..n]);
                        sock.write(&self.scratch[..got]);
                    }
                    let drained = engine.ulp(id).is_some_and(|s| s.readable() == 0);
                    let c = &mut self.conns[i];
                    if c.peer_closed && drained && !c.close_sent {
                        c.close_sent = true;
                        let _ = engine.close(id);
                    }
                }
                Mode::Sink => {
                    if readable > 0 {
                        let Some(sock) = engine.ulp_mut(id) else {
                            continue;
                        };
                        self.read_in_place(sock);
                    }
                    let c = &mut self.conns[i];
                    if c.peer_closed && !c.close_sent {
                        c.close_sent = true;
                        let _ = engine.close(id);
                    }
                }
                Mode::Source | Mode::Client => {}
            }
            if self.mode == Mode::Client && readable > 0 {
                if let Some(sock) = engine.ulp_mut(id) {
                    self.read_in_place(sock);
                }
            }
            if can_write {
                if let Some(sock) = engine.ulp_mut(id) {
                    self.written += sock.write(&self.data[self.written..]);
                }
            }
            let all_back = self.mode != Mode::Client || self.received == self.data.len() as u64;
            let c = &mut self.conns[i];
            if matches!(self.mode, Mode::Source | Mode::Client)
                && done_sending
                && all_back
                && !c.close_sent
            {
                c.close_sent = true;
                let _ = engine.close(id);
            }
            if let Some(info) = engine.info(id) {
                self.last_info = Some(info);
            }
        }
    }
}

impl TcpService<StreamSocket, ()> for TcpApp {
    fn work(&mut self, engine: &mut Engine<StreamSocket>, _cx: &mut (), now: Instant) {
        self.handle_events(engine, now);
        self.move_bytes(engine);
    }

    fn after_transmit(&mut self, engine: &mut Engine<StreamSocket>, _cx: &mut (), now: Instant) {
        self.handle_events(engine, now);
    }
}

fn pseudo_random(n: u64) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Runs `dataplane tcp`.
pub fn run(args: Args) -> Result<(), CmdError> {
    let listen = matches!(args.mode, Mode::Echo | Mode::Sink);
    if listen && args.listen.is_none() {
        return Err(CmdError::Usage(
            format!("{:?} needs --listen PORT", args.mode).to_lowercase(),
        ));
    }
    if !listen && args.connect.is_none() {
        return Err(CmdError::Usage(
            format!("{:?} needs --connect IP:PORT", args.mode).to_lowercase(),
        ));
    }
    let data = match (&args.file, args.bytes) {
        _ if listen => Vec::new(),
        (Some(f), _) => {
            std::fs::read(f).map_err(|e| CmdError::Usage(format!("--file {}: {e}", f.display())))?
        }
        (None, Some(n)) => pseudo_random(n),
        (None, None) => {
            return Err(CmdError::Usage(
                "source and client need --file FILE or --bytes N".into(),
            ))
        }
    };
    let output = match &args.output {
        Some(p) => Some(BufWriter::new(File::create(p).map_err(|e| {
            CmdError::Usage(format!("--output {}: {e}", p.display()))
        })?)),
        None => None,
    };
    let cfg = args.ports.config()?;
    if cfg.ports.len() != 1 {
        return Err(CmdError::Usage(format!(
            "tcp runs on exactly one port ({} configured; pick one with --port)",
            cfg.ports.len()
        )));
    }
    let pc = cfg.ports[0].clone();
    let addr = PortAddr::of(&pc);
    let Some(primary) = addr.primary() else {
        return Err(CmdError::Usage(format!(
            "port {} has no ipv4 or ipv6 address",
            pc.name()
        )));
    };
    // A port with both families listens on both.
    let listen_ip = match (addr.ipv4, addr.ipv6) {
        (Some(_), Some(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => primary,
    };
    let local = match args.connect.filter(|_| !listen) {
        Some(remote) => Some(addr.source_for(remote.ip()).ok_or_else(|| {
            CmdError::Usage(format!(
                "port {} has no address of {}'s family",
                pc.name(),
                remote.ip()
            ))
        })?),
        None => None,
    };
    let stop = stop_flag()?;
    let mut opened = args.ports.open_lanes(&cfg)?;
    // A port of `queues = N` runs N lanes, each with an engine of its own: listeners on
    // every lane take the connections steered to them; a client's connection is lane 0's.
    let mut lanes = vec![std::mem::take(&mut opened.ports)];
    lanes.append(&mut opened.lanes);
    let n_lanes = lanes.len();
    if n_lanes > 1 && listen && output.is_some() {
        return Err(CmdError::Usage(format!(
            "{:?} --output takes one queue (the connections of {n_lanes} lanes would share the file)",
            args.mode
        )
        .to_lowercase()));
    }
    let mut shares = neighbour_shares(n_lanes).into_iter();
    let (mut data, mut output) = (Some(data), output);
    let mut jobs: Vec<LaneJob<'_, LaneOutcome>> = Vec::new();
    for (k, ports) in lanes.into_iter().enumerate() {
        let Some(port) = ports.into_iter().next() else {
            return Err(CmdError::Usage("no port".into()));
        };
        let offloads = port.offloads();
        if k == 0 {
            eprintln!("port {}: offloads {}", pc.name(), offloads.summary);
        }
        let tcp_cfg = tcp::Config {
            mtu: port.info().mtu,
            verify_checksums: false,
            // The device fills the checksums of the TCP frames the port sends.
            fill_checksums: !offloads.tx_checksum,
            isn_secret: rand::thread_rng().gen(),
            rto_min: Duration::from_millis(args.rto_min_ms),
            congestion: match args.cc {
                Cc::Newreno => CongestionAlgorithm::NewReno,
                Cc::Cubic => CongestionAlgorithm::Cubic,
            },
            ..tcp::Config::default()
        };
        let ephemeral = tcp_cfg.ephemeral_ports;
        let first_port = tcp_cfg.ephemeral_start();
        let mut engine: Engine<StreamSocket> = Engine::new(tcp_cfg);
        if let Some(p) = args.listen.filter(|_| listen) {
            engine
                .listen(SocketAddr::new(listen_ip, p), 128)
                .map_err(|e| CmdError::Runtime(e.to_string()))?;
            if k == 0 {
                say!(
                    "tcp {:?}: listening on {}{}",
                    args.mode,
                    SocketAddr::new(listen_ip, p),
                    if n_lanes > 1 {
                        format!(" ({n_lanes} lanes)")
                    } else {
                        String::new()
                    }
                );
            }
        }
        let data = if k == 0 {
            data.take().unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut conns = Vec::new();
        if let (Some(remote), Some(local), 0) = (args.connect.filter(|_| !listen), local, k) {
            // On lanes, a local port whose 4-tuple hashes to lane 0 (the peer's lane 0 too).
            let lane = Lane {
                lane: 0,
                lanes: n_lanes as u16,
            };
            let port = match n_lanes {
                1 => 0,
                _ => {
                    let ports = (first_port..=ephemeral.1).chain(ephemeral.0..first_port);
                    steered_port(local, remote, lane, ports, |_| true).unwrap_or(0)
                }
            };
            let id = engine
                .connect(
                    clock::now(),
                    SocketAddr::new(local, port),
                    remote,
                    StreamSocket::new(SOCKET_BUF, SOCKET_BUF),
                )
                .map_err(|e| CmdError::Runtime(e.to_string()))?;
            say!(
                "tcp {:?}: connecting to {remote}, {} bytes",
                args.mode,
                data.len()
            );
            conns.push(AppConn {
                id,
                peer_closed: false,
                close_sent: false,
            });
        }
        let app = TcpApp {
            mode: args.mode,
            once: args.once,
            data,
            written: 0,
            received: 0,
            output: if k == 0 { output.take() } else { None },
            conns,
            stop: Arc::clone(&stop),
            outcome: None,
            started: None,
            finished: None,
            last_info: None,
            scratch: Vec::new(),
            connections: 0,
        };
        let mut poll = PollLoop::new(TcpHandler::new(engine, (), app), cfg.poll.burst);
        poll.add_port(port, addr);
        if n_lanes > 1 {
            if let Some(share) = shares.next() {
                poll.share_neighbours(0, share);
            }
        }
        let (stop, limit) = (Arc::clone(&stop), deadline(args.duration));
        jobs.push(Box::new(move || {
            poll.run(&stop, limit, |_, _| {});
            if let Some(linger) = poll.handler().service().time_wait_linger() {
                let until = clock::now() + linger;
                let until = limit.map_or(until, |l| l.min(until));
                poll.run(&AtomicBool::new(false), Some(until), |_, _| {});
            }
            LaneOutcome::of(&poll)
        }));
    }
    let (outcomes, places) = opened.run_lanes(jobs)?;
    if n_lanes > 1 {
        for (k, (o, place)) in outcomes.iter().zip(&places).enumerate() {
            say!(
                "lane-{k} ({place}): connections {} sent {} received {} rx-frames {} tx-frames {}",
                o.connections,
                o.written,
                o.received,
                o.rx_frames,
                o.tx_frames
            );
        }
    }
    let app = LaneOutcome::total(outcomes);
    let secs = match (app.started, app.finished) {
        (Some(s), Some(f)) => f.saturating_since(s).as_secs_f64(),
        (Some(s), None) => clock::elapsed(s).as_secs_f64(),
        _ => 0.0,
    };
    let moved = (app.written as u64).max(app.received);
    let rate = if secs > 0.0 {
        moved as f64 * 8.0 / secs / 1e6
    } else {
        0.0
    };
    say!(
        "tcp {:?}: sent {} bytes, received {} bytes in {secs:.3} s ({rate:.1} Mbit/s)",
        args.mode,
        app.written,
        app.received
    );
    if let Some(i) = app.last_info {
        say!(
            "tcp: srtt {:?}, rto {:?}, cwnd {}, retransmits {}, timeouts {} ({} spurious), \
             recoveries {} ({} spurious)",
            i.srtt,
            i.rto,
            i.cwnd,
            i.retransmits,
            i.timeouts,
            i.spurious_timeouts,
            i.recoveries,
            i.spurious_recoveries
        );
        say!(
            "tcp: state {:?}, in flight {} of window {}, unacked {}, rcv window {}, \
             {} ranges held ({} bytes), {} PAWS drops",
            i.state,
            i.pipe,
            i.snd_wnd,
            i.snd_nxt.wrapping_sub(i.snd_una),
            i.rcv_wnd,
            i.rx_ranges,
            i.rx_stored,
            i.paws_drops
        );
    }
    match app.outcome {
        Some(Err(e)) => Err(CmdError::Runtime(e)),
        Some(Ok(())) => Ok(()),
        None if matches!(args.mode, Mode::Source | Mode::Client) || args.once => Err(
            CmdError::Runtime("stopped before the transfer completed".into()),
        ),
        None => Ok(()),
    }
}

/// What one lane's application did.
#[derive(Debug, Default)]
struct LaneOutcome {
    written: usize,
    received: u64,
    started: Option<Instant>,
    finished: Option<Instant>,
    last_info: Option<ConnInfo>,
    outcome: Option<Result<(), String>>,
    /// Connections the lane served (accepted or opened).
    connections: u64,
    rx_frames: u64,
    tx_frames: u64,
}

impl LaneOutcome {
    fn of<P: Port>(poll: &PollLoop<P, TcpHandler<StreamSocket, (), TcpApp>>) -> LaneOutcome {
        let app = poll.handler().service();
        let c = poll.counters(0);
        LaneOutcome {
            written: app.written,
            received: app.received,
            started: app.started,
            finished: app.finished,
            last_info: app.last_info,
            outcome: app
                .outcome
                .as_ref()
                .map(|r| r.as_ref().map(|_| ()).map_err(ToString::to_string)),
            connections: app.connections,
            rx_frames: c.rx,
            tx_frames: c.tx,
        }
    }

    /// The lanes together: bytes summed, the earliest start and latest finish, the first
    /// failure (else a success).
    fn total(lanes: Vec<LaneOutcome>) -> LaneOutcome {
        let mut t = LaneOutcome::default();
        for l in lanes {
            t.written += l.written;
            t.received += l.received;
            t.started = t.started.into_iter().chain(l.started).min();
            t.finished = t.finished.into_iter().chain(l.finished).max();
            t.last_info = t.last_info.or(l.last_info);
            t.connections += l.connections;
            t.outcome = match (t.outcome.take(), l.outcome) {
                (Some(Err(e)), _) | (_, Some(Err(e))) => Some(Err(e)),
                (a, b) => a.or(b),
            };
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The side that closed first lingers one RTO (bounded) after a transfer that ended well;
    // the side that closed second, or a failed transfer, ends at once.
    #[test]
    fn only_the_first_closer_lingers_after_success() {
        let ms = Duration::from_millis;
        assert_eq!(
            time_wait_linger(Mode::Client, true, Some(ms(230))),
            Some(ms(230))
        );
        assert_eq!(
            time_wait_linger(Mode::Source, true, Some(ms(5))),
            Some(LINGER_MIN)
        );
        assert_eq!(time_wait_linger(Mode::Source, true, None), Some(LINGER_MIN));
        assert_eq!(
            time_wait_linger(Mode::Client, true, Some(Duration::from_secs(34))),
            Some(LINGER_MAX)
        );
        assert_eq!(time_wait_linger(Mode::Client, false, Some(ms(230))), None);
        assert_eq!(time_wait_linger(Mode::Echo, true, Some(ms(230))), None);
        assert_eq!(time_wait_linger(Mode::Sink, true, Some(ms(230))), None);
    }
}
