//! The ports and iWARP options the RDMA commands (`rping`, `perf`, `soak`) share, and the
//! session that runs an application on the stack built from them.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dataplane::apps::{run_app, stop_connections, App, Step, STOP_GRACE};
use dataplane::classify::{FrameClass, Malformed};
use dataplane::clock;
use dataplane::lcore::{PollLoop, PortAddr};
use dataplane::neighbour::neighbour_shares;
use dataplane::port::{AnyPort, Port};
use dataplane::rdma::{MemoryKind, RdmaHandler, RdmaStack, StackConfig};
use dataplane::runtime::{LaneJob, OpenedPorts};
use dataplane::say;
use dataplane::steer::Lane;
use iwarp::mpa::MpaConfig;
use rand::Rng;

use super::common::{
    deadline, parse_fault_arg, parse_secs, stop_flag, CmdError, OpenArgs, PortArgs,
};

/// Ports and iWARP settings of the RDMA commands (long options only: the short letters
/// belong to rping's and perftest's own flags).
#[derive(Debug, Clone, clap::Args)]
pub struct RdmaArgs {
    /// Configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The port to use: a port name from --config, or a DPDK device name.
    #[arg(long = "dev", value_name = "NAME")]
    pub devs: Vec<String>,
    /// Write each port's frames to DIR/<port>.pcap.
    #[arg(long, value_name = "DIR")]
    pub capture_dir: Option<PathBuf>,
    /// Inject faults: `[PORT:]KEY=VALUE,...` with the keys of `[ports.fault]` (repeatable).
    #[arg(long = "fault", value_name = "SPEC", value_parser = parse_fault_arg)]
    pub faults: Vec<(Option<String>, String)>,
    /// Require MPA CRC32c on every FPDU.
    #[arg(long)]
    pub crc: bool,
    /// Ask for MPA markers (and accept them when the peer asks).
    #[arg(long)]
    pub markers: bool,
    /// MiB of registered memory (hugepages when hugetlbfs has room).
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub mem_mb: usize,
    /// Keep registered memory on the heap even when hugepages are available.
    #[arg(long)]
    pub heap: bool,
    /// Seconds between stats lines on stderr (default: the configuration's; 0 = none).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub stats: Option<Duration>,
    /// Minimum TCP retransmission timeout in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 20)]
    pub rto_min_ms: u64,
    /// Most packets sent per poll-loop iteration.
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub tx_per_poll: usize,
    /// Milliseconds to hold the first FPDU after the MPA Reply (Linux siw 6.1 can stall on
    /// an FPDU that follows its Reply at once; 0 = send at once); a responder's hold ends
    /// when the initiator's first FPDU arrives. Default 100, except 0 for `perf` without
    /// `-R` (its peer is always a dataplane).
    #[arg(long, value_name = "MS")]
    pub first_fpdu_delay_ms: Option<u64>,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub time_limit: Option<Duration>,
    /// DPDK EAL arguments (after `--`), added to the configuration's.
    #[arg(last = true, value_name = "EAL ARGS")]
    pub eal: Vec<String>,
}

/// Default hold of the first FPDU, long enough for Linux siw (see
/// `--first-fpdu-delay-ms`).
pub const SIW_FIRST_FPDU_DELAY_MS: u64 = 100;

/// An open port with an RDMA handler on its poll loop.
pub struct Session {
    /// The poll loop (dropped before the EAL).
    pub poll: PollLoop<AnyPort, RdmaHandler>,
    /// Our main address (IPv4, else IPv6).
    pub ip: IpAddr,
    /// Our addresses.
    pub addr: PortAddr,
    /// Where registered memory lives.
    pub memory: MemoryKind,
    stats_every: Option<Duration>,
    _opened: Option<OpenedPorts>,
}

/// Both ends of an in-process link, each with its own handler (`perf --loopback`).
pub struct LoopbackPair {
    /// The server's loop and address.
    pub server: (PollLoop<AnyPort, RdmaHandler>, IpAddr),
    /// The client's loop and address.
    pub client: (PollLoop<AnyPort, RdmaHandler>, IpAddr),
    /// Where registered memory lives.
    pub memory: MemoryKind,
    _opened: Option<OpenedPorts>,
}

/// The sessions of every lane of multi-queue ports, and the ports they run on (dropped
/// after the sessions).
pub struct Lanes<T> {
    /// One per lane (queue pair), in queue order.
    pub lanes: Vec<T>,
    /// The opened ports (EAL, lcores).
    pub opened: OpenedPorts,
}

impl Lanes<Session> {
    /// The one lane's session, owning the ports.
    pub fn into_single(mut self) -> Session {
        let mut s = self.lanes.remove(0);
        s._opened = Some(self.opened);
        s
    }
}

impl Lanes<LoopbackPair> {
    /// The one lane's pair, owning the ports.
    pub fn into_single(mut self) -> LoopbackPair {
        let mut p = self.lanes.remove(0);
        p._opened = Some(self.opened);
        p
    }
}

/// An application that also ends, successfully, once another lane's has ended (a server
/// listening on every lane for its one client: the lane the client lands on ends the run).
struct UntilOthers<'a, A> {
    app: A,
    others_done: &'a AtomicBool,
}

impl<A: App> App for UntilOthers<'_, A> {
    type Error = A::Error;

    fn step(&mut self, h: &mut RdmaHandler, now: clock::Instant) -> Step<A::Error> {
        match self.app.step(h, now) {
            Step::Continue if self.others_done.load(Ordering::Relaxed) => Step::Done(Ok(())),
            step => step,
        }
    }
}

/// What one lane's application of [`run_until_first`] became: the application and how its
/// run ended; `None` for a lane that had none.
pub type FirstDone<A> = Option<(A, Result<(), CmdError>)>;

/// Runs `apps[k]` on lane `k`'s session (`None`: the lane has nothing to run), each lane on
/// an lcore of its own, until the first lane's application ends; then the others end too.
/// Returns each lane's application and result, and where each lane ran.
pub fn run_until_first<A: App + Send>(
    sessions: &mut [Session],
    opened: &OpenedPorts,
    apps: Vec<Option<A>>,
    limit: Option<Duration>,
    stop: &AtomicBool,
) -> Result<(Vec<FirstDone<A>>, Vec<String>), CmdError>
where
    CmdError: From<A::Error>,
{
    let done = AtomicBool::new(false);
    let jobs: Vec<LaneJob<'_, FirstDone<A>>> = sessions
        .iter_mut()
        .zip(apps)
        .map(|(s, app)| {
            let done = &done;
            Box::new(move || {
                let mut lane = UntilOthers {
                    app: app?,
                    others_done: done,
                };
                let r = s.run_until(&mut lane, limit, stop);
                done.store(true, Ordering::Relaxed);
                Some((lane.app, r))
            }) as LaneJob<'_, FirstDone<A>>
        })
        .collect();
    opened
        .run_lanes(jobs)
        .map_err(|e| CmdError::Runtime(e.to_string()))
}

/// The first lane that failed; its failure stops the others (as one QP's failure ends a
/// one-lane run).
#[derive(Debug)]
pub struct LaneFailure {
    first: AtomicUsize,
    stop: Arc<AtomicBool>,
}

impl LaneFailure {
    /// Failures stop the lanes through `stop` (the flag their runs watch).
    pub fn new(stop: Arc<AtomicBool>) -> LaneFailure {
        LaneFailure {
            first: AtomicUsize::new(usize::MAX),
            stop,
        }
    }

    /// Lane `lane` failed: remembered if it is the first, and every lane is told to stop.
    pub fn report(&self, lane: usize) {
        let _ = self
            .first
            .compare_exchange(usize::MAX, lane, Ordering::AcqRel, Ordering::Acquire);
        self.stop.store(true, Ordering::Release);
    }

    /// The first lane that failed, if one did.
    pub fn first(&self) -> Option<usize> {
        Some(self.first.load(Ordering::Acquire)).filter(|&l| l != usize::MAX)
    }
}

/// What one lane did, for the per-lcore counters and their total.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneReport {
    /// Where it ran (`lcore 1`, `thread`).
    pub place: String,
    /// Frames received and sent by its loop.
    pub frames: (u64, u64),
    /// Connections established.
    pub established: u64,
    /// Connections accepted whose 4-tuple hashes to another lane.
    pub foreign: u64,
    /// TCP resets sent for segments of no connection (a segment on the wrong lane, or a
    /// late one of a connection already gone).
    pub resets: u64,
    /// Connections this lane aborted (a reset of its own: an application's abort, an
    /// iWARP error or timeout).
    pub aborts: u64,
    /// FPDUs sent and received.
    pub fpdus: (u64, u64),
    /// FPDUs whose CRC did not match.
    pub crc_errors: u64,
    /// TCP segments retransmitted.
    pub retransmits: u64,
}

impl LaneReport {
    /// The counters of the handlers on `loops` (one lane: a session, or both ends of a
    /// loopback pair), which ran at `place`.
    pub fn of(place: &str, loops: &[&PollLoop<AnyPort, RdmaHandler>]) -> LaneReport {
        let mut r = LaneReport {
            place: place.to_string(),
            ..LaneReport::default()
        };
        for l in loops {
            let c = l.counters(0);
            let h = l.handler();
            let rdma = h.counters();
            r.frames.0 += c.rx;
            r.frames.1 += c.tx;
            r.established += rdma.established;
            r.foreign += h.foreign_connections();
            let tcp = h.tcp().stats();
            r.resets += tcp.resets_sent - tcp.aborts_sent;
            r.aborts += tcp.aborts_sent;
            r.fpdus.0 += rdma.fpdus_sent;
            r.fpdus.1 += rdma.fpdus_received;
            r.crc_errors += rdma.crc_errors;
            r.retransmits += rdma.tcp_retransmits;
        }
        r
    }

    /// Adds another lane's counters (for the total).
    pub fn add(&mut self, o: &LaneReport) {
        self.frames.0 += o.frames.0;
        self.frames.1 += o.frames.1;
        self.established += o.established;
        self.foreign += o.foreign;
        self.resets += o.resets;
        self.aborts += o.aborts;
        self.fpdus.0 += o.fpdus.0;
        self.fpdus.1 += o.fpdus.1;
        self.crc_errors += o.crc_errors;
        self.retransmits += o.retransmits;
    }

    /// One line of `key value` pairs (stable names, parsed by tests).
    pub fn line(&self) -> String {
        format!(
            "rx-frames {} tx-frames {} established {} foreign {} resets-sent {} aborts-sent {} fpdus-sent {} fpdus-received {} crc-errors {} tcp-retransmits {}",
            self.frames.0,
            self.frames.1,
            self.established,
            self.foreign,
            self.resets,
            self.aborts,
            self.fpdus.0,
            self.fpdus.1,
            self.crc_errors,
            self.retransmits
        )
    }

    /// Prints each lane's line (`lane-K (PLACE): ...`, the counters of the loops `lanes`
    /// yields for lane K, which ran at `places[K]`) and their total (`lanes-total: ...`).
    pub fn print<'a>(
        places: &[String],
        lanes: impl IntoIterator<Item = Vec<&'a PollLoop<AnyPort, RdmaHandler>>>,
    ) {
        let mut total = LaneReport::default();
        for (k, (loops, place)) in lanes.into_iter().zip(places).enumerate() {
            let r = LaneReport::of(place, &loops);
            say!("lane-{k} ({}): {}", r.place, r.line());
            total.add(&r);
        }
        say!("lanes-total: {}", total.line());
    }
}

impl RdmaArgs {
    /// Milliseconds the first FPDUs are held (`--first-fpdu-delay-ms`).
    pub fn first_fpdu_delay(&self) -> u64 {
        self.first_fpdu_delay_ms.unwrap_or(SIW_FIRST_FPDU_DELAY_MS)
    }

    fn open(&self, want: usize) -> Result<(Vec<Session>, OpenedPorts), CmdError> {
        let (mut lanes, opened) = self.open_with(want, false)?;
        Ok((lanes.pop().unwrap_or_default(), opened))
    }

    /// Opens `want` ports with all their queue pairs: per lane, a session on each port
    /// (its handler steering to that lane when there are several).
    fn open_with(
        &self,
        want: usize,
        all_lanes: bool,
    ) -> Result<(Vec<Vec<Session>>, OpenedPorts), CmdError> {
        let pa = PortArgs {
            config: self.config.clone(),
            ports: self.devs.clone(),
            open: OpenArgs {
                capture_dir: self.capture_dir.clone(),
                faults: self.faults.clone(),
                eal: self.eal.clone(),
            },
        };
        let cfg = pa.config()?;
        if cfg.ports.len() != want {
            return Err(CmdError::Usage(format!(
                "this runs on exactly {want} port(s) ({} configured; pick with --dev)",
                cfg.ports.len()
            )));
        }
        let mut opened = if all_lanes {
            pa.open_lanes(&cfg)?
        } else {
            pa.open(&cfg)?
        };
        let stats_every = match self.stats {
            Some(d) => Some(d),
            None if cfg.poll.stats_interval > 0.0 => {
                Some(Duration::from_secs_f64(cfg.poll.stats_interval))
            }
            None => None,
        }
        .filter(|d| !d.is_zero());
        let mut lanes = vec![std::mem::take(&mut opened.ports)];
        lanes.append(&mut opened.lanes);
        let n_lanes = lanes.len() as u16;
        // Each port's lanes share what they learn about neighbours (an RSS NIC delivers
        // every ARP reply and neighbour advertisement to queue 0).
        let mut shares: Vec<_> = cfg
            .ports
            .iter()
            .map(|_| neighbour_shares(lanes.len()).into_iter())
            .collect();
        let mut all = Vec::new();
        for (lane, ports) in lanes.into_iter().enumerate() {
            let mut sessions = Vec::new();
            for ((port, pc), share) in ports.into_iter().zip(cfg.ports.iter()).zip(&mut shares) {
                if pc.ipv4.is_none() && pc.ipv6.is_none() {
                    return Err(CmdError::Usage(format!(
                        "port {} has no ipv4 or ipv6 address",
                        pc.name()
                    )));
                }
                let mtu = port.info().mtu;
                if lane == 0 {
                    eprintln!("port {}: offloads {}", pc.name(), port.offloads().summary);
                }
                let mpa = MpaConfig {
                    require_crc: self.crc,
                    want_markers: self.markers,
                    accept_markers: true,
                    ..MpaConfig::default()
                };
                let tcp = tcp::Config {
                    mtu,
                    verify_checksums: false,
                    isn_secret: rand::thread_rng().gen(),
                    rto_min: Duration::from_millis(self.rto_min_ms),
                    ..tcp::Config::default()
                };
                let stack = StackConfig {
                    memory: self.mem_mb << 20,
                    hugepages: !self.heap,
                    stag_seed: rand::thread_rng().gen(),
                    tx_per_poll: self.tx_per_poll,
                    first_fpdu_delay: Duration::from_millis(self.first_fpdu_delay()),
                    burst: cfg.poll.burst,
                    ..StackConfig::new(mpa, tcp)
                };
                let RdmaStack {
                    mut poll,
                    ip,
                    addr,
                    memory,
                } = RdmaStack::new(port, PortAddr::of(pc), stack)
                    .map_err(|e| CmdError::Runtime(e.to_string()))?;
                if n_lanes > 1 {
                    poll.handler_mut().set_lane(Lane {
                        lane: lane as u16,
                        lanes: n_lanes,
                    });
                    if let Some(share) = share.next() {
                        poll.share_neighbours(0, share);
                    }
                }
                sessions.push(Session {
                    poll,
                    ip,
                    addr,
                    memory,
                    stats_every,
                    _opened: None,
                });
            }
            all.push(sessions);
        }
        Ok((all, opened))
    }

    /// Opens the one port with all its queue pairs: a session per lane.
    pub fn lane_sessions(&self) -> Result<Lanes<Session>, CmdError> {
        let (lanes, opened) = self.open_with(1, true)?;
        Ok(Lanes {
            lanes: lanes.into_iter().flatten().collect(),
            opened,
        })
    }

    /// Opens two ports (the ends of one link) with all their queue pairs: a loopback pair
    /// per lane.
    pub fn loopback_lanes(&self) -> Result<Lanes<LoopbackPair>, CmdError> {
        let (lanes, opened) = self.open_with(2, true)?;
        let mut pairs = Vec::new();
        for sessions in lanes {
            let memory = sessions[0].memory;
            let mut it = sessions.into_iter().map(|s| (s.poll, s.ip));
            let (Some(server), Some(client)) = (it.next(), it.next()) else {
                return Err(CmdError::Usage("--loopback needs two ports".into()));
            };
            pairs.push(LoopbackPair {
                server,
                client,
                memory,
                _opened: None,
            });
        }
        Ok(Lanes {
            lanes: pairs,
            opened,
        })
    }

    /// Opens two ports (the ends of one link) with a handler each.
    pub fn loopback(&self) -> Result<LoopbackPair, CmdError> {
        let (sessions, opened) = self.open(2)?;
        let memory = sessions[0].memory;
        let mut it = sessions.into_iter().map(|s| (s.poll, s.ip));
        let (Some(server), Some(client)) = (it.next(), it.next()) else {
            return Err(CmdError::Usage("--loopback needs two ports".into()));
        };
        Ok(LoopbackPair {
            server,
            client,
            memory,
            _opened: Some(opened),
        })
    }
}

impl Session {
    /// The address a server listens on at `port`: `addr` when given, else every address of
    /// the port (`[::]`, either family) when it has both families, else its one address.
    pub fn listen_addr(&self, addr: Option<IpAddr>, port: u16) -> SocketAddr {
        let ip = addr.unwrap_or(match (self.addr.ipv4, self.addr.ipv6) {
            (Some(_), Some(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => self.ip,
        });
        SocketAddr::new(ip, port)
    }

    /// Our address of `remote`'s family, to connect from; a usage error when the port has
    /// none.
    pub fn local_for(&self, remote: IpAddr) -> Result<IpAddr, CmdError> {
        self.addr.source_for(remote).ok_or_else(|| {
            CmdError::Usage(format!(
                "the port has no {} address to reach {remote} from",
                if remote.is_ipv4() { "ipv4" } else { "ipv6" }
            ))
        })
    }

    /// Runs `app` until done; stats lines on stderr; the counters summary at the end.
    pub fn run<A: App>(&mut self, app: &mut A, limit: Option<Duration>) -> Result<(), CmdError>
    where
        CmdError: From<A::Error>,
    {
        let stop = stop_flag()?;
        let r = self.run_until(app, limit, &stop);
        self.print_summary();
        r
    }

    /// Runs `app` until done or `stop` is set (closing its connections then); stats lines
    /// on stderr, no summary.
    pub fn run_until<A: App>(
        &mut self,
        app: &mut A,
        limit: Option<Duration>,
        stop: &AtomicBool,
    ) -> Result<(), CmdError>
    where
        CmdError: From<A::Error>,
    {
        let started = clock::now();
        let r = run_app(
            &mut self.poll,
            app,
            stop,
            deadline(limit),
            self.stats_every,
            |poll, _, now| {
                let c = poll.counters(0);
                eprintln!(
                    "[{:>6.1}s] rx {} tx {} | {}",
                    now.saturating_since(started).as_secs_f64(),
                    c.rx,
                    c.tx,
                    poll.handler().counters().line()
                );
            },
        );
        if r.is_err() && stop.load(Ordering::Relaxed) {
            // Stopped by a signal in the middle: close what is open, flush what is queued.
            let report = stop_connections(&mut self.poll, STOP_GRACE);
            say!("{}", report.summary());
        }
        Ok(r?)
    }

    /// Prints the counters summary (handler, queues, loop, port).
    pub fn print_summary(&self) {
        say!("{}", self.poll.handler().counters().summary());
        say!("{}", self.poll.handler().queue_summary());
        let loop_counters = self.poll.counters(0);
        let port = self.poll.ports()[0].stats();
        say!(
            "loop-rx-frames: {}\nloop-busy-polls: {}\nloop-tx-frames: {}\nloop-busy-ns: rx {} process {} tx {}\n\
             port-rx-dropped: {}\nport-tx-dropped: {}\nport-tx-deferred: {}\narp-failures: {}\n\
             nd-failures: {}\nvlan-other-frames: {}\nipv6-dropped-frames: {}\n\
             port-rx-chained: {}\nport-rx-large: {}\nport-tx-tso: {}\nport-tx-external: {}\n\
             port-tx-external-whole: {}\ntx-payloads-lent: {}\ntx-payloads-returned: {}\nchecksum-dropped-frames: {}",
            loop_counters.rx,
            loop_counters.busy_polls,
            loop_counters.tx,
            loop_counters.rx_ns,
            loop_counters.process_ns,
            loop_counters.tx_ns,
            port.rx_dropped,
            port.tx_dropped + loop_counters.tx_dropped,
            loop_counters.tx_deferred,
            loop_counters.arp_failures,
            loop_counters.nd_failures,
            loop_counters.class(FrameClass::OtherVlan),
            loop_counters.class(FrameClass::Ipv6Fragment)
                + loop_counters.class(FrameClass::Ipv6ExtHeader)
                + loop_counters.class(FrameClass::Ipv6Jumbogram),
            port.rx_chained,
            port.rx_large,
            port.tx_tso,
            port.tx_external,
            port.tx_external_whole,
            port.tx_external,
            port.tx_external_returned,
            [
                Malformed::Ipv4Checksum,
                Malformed::TcpChecksum,
                Malformed::UdpChecksum
            ]
            .into_iter()
            .map(|m| loop_counters.class(FrameClass::Malformed(m)))
            .sum::<u64>()
        );
    }
}
