//! `dataplane soak`: the verified RDMA Write + Read + Send mix on many QPs (see
//! [`dataplane::apps::soak`]). Without a server address it is the server; with one, the
//! client, whose exit status covers the server's verdict too.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Duration;

use dataplane::clock;

use dataplane::apps::soak::{parse_bytes, SoakClient, SoakParams, SoakServer, SoakTally};
use dataplane::apps::{run_app, stop_connections, App, STOP_GRACE};
use dataplane::lcore::PollLoop;
use dataplane::port::fault::FaultCounters;
use dataplane::port::{AnyPort, Port};
use dataplane::rdma::RdmaHandler;
use dataplane::say;

use dataplane::runtime::LaneJob;

use super::common::{deadline, parse_secs, stop_flag, CmdError};
use super::rdma_args::{LaneFailure, LaneReport, Lanes, RdmaArgs, Session};

/// Arguments of `soak`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server's address, IPv4 or IPv6 (client); without it, run the server.
    pub server: Option<IpAddr>,
    /// QPs (connections) in parallel.
    #[arg(long, value_name = "Q", default_value_t = 8)]
    pub qps: usize,
    /// Stop after this volume moved (Write + Read + Send), e.g. 64MiB, 1GiB.
    #[arg(long, value_name = "N", value_parser = parse_bytes)]
    pub bytes: Option<u64>,
    /// Stop after this many minutes (fractions allowed).
    #[arg(long, value_name = "M")]
    pub minutes: Option<f64>,
    /// Seed of the data patterns and operation sizes.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Largest RDMA Write / Read.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes, default_value = "64KiB")]
    pub max_io: u64,
    /// Largest Send.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes, default_value = "32KiB")]
    pub max_msg: u64,
    /// Fail after this many seconds without any completion.
    #[arg(long, value_name = "SECS", value_parser = parse_secs, default_value = "30")]
    pub stall: Duration,
    /// Seconds between progress lines (0 = none).
    #[arg(long, value_name = "SECS", value_parser = parse_secs, default_value = "5")]
    pub progress: Duration,
    /// TCP port of the server.
    #[arg(
        short = 'p',
        long = "tcp-port",
        value_name = "PORT",
        default_value_t = 18600
    )]
    pub port: u16,
    /// Ports and iWARP settings.
    #[command(flatten)]
    pub rdma: RdmaArgs,
}

/// Both directions' fault counters of the loop's port.
fn faults(poll: &PollLoop<AnyPort, RdmaHandler>) -> FaultCounters {
    poll.ports()[0]
        .fault_counters()
        .map(|(rx, tx)| rx + tx)
        .unwrap_or_default()
}

fn fault_text(f: &FaultCounters) -> String {
    format!(
        "dropped {} reordered {} duplicated {} corrupted {}",
        f.dropped,
        f.reordered,
        f.duplicated,
        f.corrupted + f.corrupted_tcp
    )
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// Runs `app` on the session until it is done, stopped or out of time; every `every` (unless
/// zero) a progress line: `line`'s part, the RDMA counters and the faults injected.
fn drive<A: App>(
    s: &mut Session,
    app: &mut A,
    limit: Option<Duration>,
    every: Duration,
    mut line: impl FnMut(&A, Duration) -> String,
) -> Result<(), CmdError>
where
    CmdError: From<A::Error>,
{
    let stop = stop_flag()?;
    let started = clock::now();
    let r = run_app(
        &mut s.poll,
        app,
        &stop,
        deadline(limit),
        (!every.is_zero()).then_some(every),
        |poll, a, now| {
            let at = now.saturating_since(started);
            say!(
                "[{:>7.1}s] {} | {} | faults {}",
                at.as_secs_f64(),
                line(a, at),
                counters_line(poll.handler()),
                fault_text(&faults(poll))
            );
        },
    );
    if r.is_err() && stop.load(Ordering::Relaxed) {
        // Stopped by a signal in the middle: close what is open, flush what is queued.
        say!("{}", stop_connections(&mut s.poll, STOP_GRACE).summary());
    }
    r.map_err(CmdError::from)
}

fn counters_line(h: &RdmaHandler) -> String {
    let c = h.counters();
    format!(
        "tcp retx {} rto {} | ooo placed {} | crc err {} | term tx {} rx {}",
        c.tcp_retransmits,
        c.tcp_timeouts,
        c.fpdus_placed_ahead,
        c.crc_errors,
        c.terminates_sent,
        c.terminates_received
    )
}

/// The end-of-run table and the `key: value` lines tests parse.
fn summary(role: &str, s: &Session, t: &SoakTally, secs: f64, result: &Result<(), CmdError>) {
    let c = s.poll.handler().counters();
    let f = faults(&s.poll);
    let port = s.poll.ports()[0].stats();
    say!("soak summary ({role}, {secs:.1} s)");
    if role == "client" {
        say!(
            "  written     {:>14} B  {:>9.1} MiB  every byte read back and compared",
            t.written,
            mib(t.written)
        );
        say!(
            "  read        {:>14} B  {:>9.1} MiB  every byte compared",
            t.read,
            mib(t.read)
        );
        say!(
            "  sent        {:>14} B  {:>9.1} MiB  server verified {} B",
            t.sent,
            mib(t.sent),
            t.server_verified
        );
        say!(
            "  ops         rounds {} writes {} reads {} sends {}",
            t.rounds,
            t.writes,
            t.reads,
            t.sends
        );
    } else {
        say!(
            "  received    {:>14} B  {:>9.1} MiB  {} messages, every byte compared",
            t.sent,
            mib(t.sent),
            t.sends
        );
    }
    say!(
        "  tcp         retransmits {} timeouts {}",
        c.tcp_retransmits,
        c.tcp_timeouts
    );
    say!("  faults      {} (this port, rx + tx)", fault_text(&f));
    say!(
        "  mpa         ooo placed {} FPDUs ({} B) crc errors {}",
        c.fpdus_placed_ahead,
        c.bytes_placed_ahead,
        c.crc_errors
    );
    say!(
        "  terminates  sent {} received {}",
        c.terminates_sent,
        c.terminates_received
    );
    say!("{}", c.summary());
    say!("{}", s.poll.handler().queue_summary());
    say!(
        "port-rx-dropped: {}\nport-tx-dropped: {}",
        port.rx_dropped,
        port.tx_dropped + s.poll.counters(0).tx_dropped
    );
    say!(
        "fault-dropped: {}\nfault-reordered: {}\nfault-duplicated: {}\nfault-corrupted: {}",
        f.dropped,
        f.reordered,
        f.duplicated,
        f.corrupted + f.corrupted_tcp
    );
    if role == "client" {
        say!(
            "soak-written-bytes: {}\nsoak-read-bytes: {}\nsoak-sent-bytes: {}\nsoak-server-verified-bytes: {}",
            t.written,
            t.read,
            t.sent,
            t.server_verified
        );
    } else {
        say!("soak-received-bytes: {}", t.sent);
    }
    match result {
        Ok(()) => say!("soak-result: ok"),
        Err(why) => say!("soak-result: FAILED: {why}"),
    }
}

/// Runs `dataplane soak`.
pub fn run(args: Args) -> Result<(), CmdError> {
    let duration = match args.minutes {
        Some(m) if !(m.is_finite() && m > 0.0) => {
            return Err(CmdError::Usage("--minutes: a positive number".into()))
        }
        Some(m) => Some(Duration::from_secs_f64(m * 60.0)),
        None => None,
    };
    let params = SoakParams {
        qps: args.qps,
        bytes: match (args.bytes, duration) {
            (None, None) => Some(64 << 20),
            (b, _) => b,
        },
        duration,
        seed: args.seed,
        max_io: usize::try_from(args.max_io).unwrap_or(usize::MAX),
        max_msg: usize::try_from(args.max_msg).unwrap_or(usize::MAX),
        stall: args.stall,
    };
    params.check().map_err(|e| CmdError::Usage(e.to_string()))?;
    let mut rdma = args.rdma.clone();
    let need = params.client_memory().max(params.server_memory());
    rdma.mem_mb = rdma.mem_mb.max(need.div_ceil(1 << 20) + 4);
    let lanes = rdma.lane_sessions()?;
    if lanes.lanes.len() > 1 {
        return soak_lanes(&args, &rdma, params, lanes);
    }
    let mut s = lanes.into_single();
    let started = clock::now();
    match args.server {
        None => {
            let addr = s.listen_addr(None, args.port);
            let mut app = SoakServer::new(s.poll.handler_mut(), addr, args.stall)?;
            say!(
                "soak server listening on {addr} (memory: {}, CRC {}, markers {})",
                s.memory,
                if rdma.crc { "on" } else { "off" },
                if rdma.markers { "on" } else { "off" }
            );
            let r = drive(&mut s, &mut app, rdma.time_limit, args.progress, |a, _| {
                format!(
                    "server: {} QPs live, {} messages ({:.1} MiB) verified",
                    a.live(),
                    a.tally.sends,
                    mib(a.tally.sent),
                )
            });
            summary(
                "server",
                &s,
                &app.tally,
                clock::elapsed(started).as_secs_f64(),
                &r,
            );
            r
        }
        Some(ip) => {
            let remote = SocketAddr::new(ip, args.port);
            let local = s.local_for(ip)?;
            let mut app = SoakClient::new(s.poll.handler_mut(), local, remote, params.clone())?;
            say!(
                "soak client: {} QPs to {remote}, {} (memory: {}, CRC {}, markers {}, seed {})",
                params.qps,
                match (params.bytes, params.duration) {
                    (Some(b), None) => format!("{:.1} MiB", mib(b)),
                    (None, Some(d)) => format!("{:.1} min", d.as_secs_f64() / 60.0),
                    (Some(b), Some(d)) =>
                        format!("{:.1} MiB or {:.1} min", mib(b), d.as_secs_f64() / 60.0),
                    (None, None) => String::new(),
                },
                s.memory,
                if rdma.crc { "on" } else { "off" },
                if rdma.markers { "on" } else { "off" },
                params.seed
            );
            let mut last = (Duration::ZERO, 0u64);
            let r = drive(&mut s, &mut app, rdma.time_limit, args.progress, |a, at| {
                let bytes = a.tally.bytes();
                let dt = (at - last.0).as_secs_f64().max(1e-9);
                let rate = (bytes - last.1) as f64 * 8.0 / dt / 1e6;
                last = (at, bytes);
                format!(
                    "client: {}/{} QPs, {} rounds, {:.1} MiB verified ({rate:.0} Mbit/s)",
                    a.established(),
                    params.qps,
                    a.tally.rounds,
                    mib(bytes),
                )
            });
            let secs = if app.elapsed.is_zero() {
                clock::elapsed(started).as_secs_f64()
            } else {
                app.elapsed.as_secs_f64()
            };
            summary("client", &s, &app.tally, secs, &r);
            if r.is_ok() {
                say!(
                    "soak: {:.1} MiB verified on {} QPs in {secs:.1} s ({:.0} Mbit/s)",
                    mib(app.tally.bytes()),
                    params.qps,
                    app.tally.bytes() as f64 * 8.0 / secs.max(1e-9) / 1e6
                );
            }
            r
        }
    }
}

/// Adds `b`'s counts to `a`.
fn add_tally(a: &mut SoakTally, b: &SoakTally) {
    a.rounds += b.rounds;
    a.written += b.written;
    a.read += b.read;
    a.sent += b.sent;
    a.server_verified += b.server_verified;
    a.writes += b.writes;
    a.reads += b.reads;
    a.sends += b.sends;
}

/// `soak` on a multi-queue port: one share-nothing stack per lane, each on an lcore of its
/// own, with its share of the QPs and of the volume (each lane's server verifies the
/// connections its lane's client opened: they hash to it); per-lane counters, the summed
/// tallies and one verdict.
fn soak_lanes(
    args: &Args,
    rdma: &RdmaArgs,
    params: SoakParams,
    lanes: Lanes<Session>,
) -> Result<(), CmdError> {
    let Lanes {
        lanes: mut sessions,
        opened,
    } = lanes;
    let n = sessions.len();
    if args.server.is_some() && params.qps < n {
        return Err(CmdError::Usage(format!(
            "--qps {}: at least one QP per lane ({n} lanes)",
            params.qps
        )));
    }
    let started = clock::now();
    let mut servers = Vec::new();
    if args.server.is_none() {
        for s in sessions.iter_mut() {
            let addr = s.listen_addr(None, args.port);
            servers.push(Some(SoakServer::new(
                s.poll.handler_mut(),
                addr,
                args.stall,
            )?));
        }
        say!(
            "soak server listening on port {} on {n} lanes (memory per lane: {}, CRC {})",
            args.port,
            sessions[0].memory,
            if rdma.crc { "on" } else { "off" }
        );
    } else {
        servers.resize_with(n, || None);
        say!(
            "soak client: {} QPs on {n} lanes (memory per lane: {}, CRC {}, seed {})",
            params.qps,
            sessions[0].memory,
            if rdma.crc { "on" } else { "off" },
            params.seed
        );
    }
    let limit = rdma.time_limit;
    let failure = LaneFailure::new(stop_flag()?);
    type LaneOut = (SoakTally, Result<(), CmdError>);
    let jobs: Vec<LaneJob<'_, LaneOut>> = sessions
        .iter_mut()
        .zip(servers)
        .enumerate()
        .map(|(k, (s, server))| {
            let share = |v: u64| v * (k as u64 + 1) / n as u64 - v * k as u64 / n as u64;
            let lane_params = SoakParams {
                qps: params.qps / n + usize::from(k < params.qps % n),
                bytes: params.bytes.map(share),
                seed: params.seed.wrapping_add(k as u64),
                ..params.clone()
            };
            let (remote, port, progress) = (args.server, args.port, args.progress);
            let failure = &failure;
            let lane = move || -> LaneOut {
                if let Some(mut app) = server {
                    let r = drive(s, &mut app, limit, progress, |a, _| {
                        format!(
                            "lane {k} server: {} QPs live, {} messages",
                            a.live(),
                            a.tally.sends
                        )
                    });
                    return (app.tally, r);
                }
                let run = || -> Result<SoakClient, CmdError> {
                    let ip = remote.ok_or_else(|| CmdError::Usage("no server address".into()))?;
                    let remote = SocketAddr::new(ip, port);
                    let local = s.local_for(ip)?;
                    Ok(SoakClient::new(
                        s.poll.handler_mut(),
                        local,
                        remote,
                        lane_params,
                    )?)
                };
                let mut app = match run() {
                    Ok(app) => app,
                    Err(e) => return (SoakTally::default(), Err(e)),
                };
                let r = drive(s, &mut app, limit, progress, |a, _| {
                    format!(
                        "lane {k} client: {} QPs, {} rounds, {:.1} MiB verified",
                        a.established(),
                        a.tally.rounds,
                        mib(a.tally.bytes())
                    )
                });
                (app.tally, r)
            };
            Box::new(move || {
                let (t, r) = lane();
                if r.is_err() {
                    failure.report(k);
                }
                (t, r)
            }) as LaneJob<'_, LaneOut>
        })
        .collect();
    let (outs, places) = opened
        .run_lanes(jobs)
        .map_err(|e| CmdError::Runtime(e.to_string()))?;
    LaneReport::print(&places, sessions.iter().map(|s| vec![&s.poll]));
    let mut total = SoakTally::default();
    let mut result = Ok(());
    for (k, (t, r)) in outs.into_iter().enumerate() {
        add_tally(&mut total, &t);
        // The lane that failed first; the others were stopped by it.
        if let Err(e) = r {
            if result.is_ok() && failure.first().is_none_or(|f| f == k) {
                result = Err(CmdError::Runtime(format!("lane {k}: {e}")));
            }
        }
    }
    let secs = clock::elapsed(started).as_secs_f64();
    if args.server.is_some() {
        say!(
            "soak-written-bytes: {}\nsoak-read-bytes: {}\nsoak-sent-bytes: {}\nsoak-server-verified-bytes: {}",
            total.written,
            total.read,
            total.sent,
            total.server_verified
        );
    } else {
        say!("soak-received-bytes: {}", total.sent);
    }
    match &result {
        Ok(()) => {
            say!("soak-result: ok");
            say!(
                "soak: {:.1} MiB verified over {n} lanes in {secs:.1} s",
                mib(total.bytes())
            );
        }
        Err(why) => say!("soak-result: FAILED: {why}"),
    }
    drop(sessions);
    drop(opened);
    result
}
