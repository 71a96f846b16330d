//! `dataplane perf`: perftest-style benchmarks (ib_write_bw, ib_read_lat, ...) over the data
//! plane's iWARP. Without a server address it is the server; with one, the client, which
//! prints perftest's table.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use dataplane::apps::perf::{
    all_sizes, PerfClient, PerfMode, PerfOp, PerfParams, PerfResult, PerfServer,
};
use dataplane::apps::perftest::{PerftestParams, PerftestSession, Test};
use dataplane::apps::run_pair;
use dataplane::port::Port;
use dataplane::runtime::LaneJob;
use dataplane::say;

use super::common::{parse_secs, stop_flag, CmdError};
use super::rdma_args::{run_until_first, LaneFailure, LaneReport, Lanes, RdmaArgs};

/// The operation to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    /// RDMA Write.
    Write,
    /// RDMA Read.
    Read,
    /// Send.
    Send,
    /// FetchAdd atomic.
    Atomic,
}

/// Arguments of `perf`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Operation.
    #[arg(value_enum)]
    pub op: Op,
    /// The server's address, IPv4 or IPv6 (client); without it, run the server.
    pub server: Option<IpAddr>,
    /// Run server and client in this process on the two ends of one link (e.g. the
    /// software pair of configs/rdma-soft-pair.toml).
    #[arg(long, conflicts_with = "server")]
    pub loopback: bool,
    /// Latency test instead of bandwidth.
    #[arg(long)]
    pub lat: bool,
    /// Speak perftest's rdma_cm exchange (its `-R`): a control connection with perftest's
    /// records, then the data connection; interoperates with ib_write_bw, ib_read_bw,
    /// ib_send_bw, ib_write_lat, ib_read_lat and ib_send_lat run with -R (same -s and -n
    /// on both sides).
    #[arg(short = 'R', long = "rdma-cm")]
    pub rdma_cm: bool,
    /// Message size in bytes.
    #[arg(short = 's', long = "size", value_name = "SIZE")]
    pub size: Option<usize>,
    /// Run all sizes from 2 bytes up to --size (default 1 MiB; perftest's -a).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Iterations per size (default 5000 bandwidth, 1000 latency).
    #[arg(short = 'n', long = "iters", value_name = "ITERS")]
    pub iters: Option<u64>,
    /// Run each size this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration", value_name = "SECS", value_parser = parse_secs)]
    pub duration: Option<Duration>,
    /// QPs (connections) in parallel (bandwidth).
    #[arg(short = 'q', long = "qps", value_name = "QPS", default_value_t = 1)]
    pub qps: u16,
    /// Work requests in flight per QP (bandwidth); at most 8192 over all QPs.
    #[arg(
        short = 't',
        long = "tx-depth",
        value_name = "N",
        default_value_t = 128
    )]
    pub tx_depth: u32,
    /// Post payloads up to this size inline (write, send).
    #[arg(
        short = 'I',
        long = "inline",
        value_name = "BYTES",
        default_value_t = 0
    )]
    pub inline: usize,
    /// Server: check, as each Write or Send bandwidth connection ends, that its buffer holds
    /// what the client sent (every octet of the message size); a mismatch fails the run.
    #[arg(long)]
    pub verify: bool,
    /// TCP port of the server.
    #[arg(
        short = 'p',
        long = "tcp-port",
        value_name = "PORT",
        default_value_t = 18515
    )]
    pub port: u16,
    /// Ports and iWARP settings.
    #[command(flatten)]
    pub rdma: RdmaArgs,
}

/// Runs `dataplane perf`.
pub fn run(args: Args) -> Result<(), CmdError> {
    let op = match args.op {
        Op::Write => PerfOp::Write,
        Op::Read => PerfOp::Read,
        Op::Send => PerfOp::Send,
        Op::Atomic => PerfOp::Atomic,
    };
    let mode = if args.lat {
        PerfMode::Lat
    } else {
        PerfMode::Bw
    };
    let default_size = match (op, mode) {
        (PerfOp::Atomic, _) => 8,
        (_, PerfMode::Lat) => 2,
        _ => 65536,
    };
    let sizes = if args.all {
        all_sizes(args.size.unwrap_or(1 << 20))
    } else {
        vec![args.size.unwrap_or(default_size)]
    };
    if op == PerfOp::Atomic && sizes.iter().any(|&s| s != 8) {
        return Err(CmdError::Usage(
            "atomic operations are 8 bytes (-s 8)".into(),
        ));
    }
    if op == PerfOp::Write && mode == PerfMode::Lat && sizes.contains(&0) {
        return Err(CmdError::Usage("write latency needs -s 1 or more".into()));
    }
    let max = sizes.iter().copied().max().unwrap_or(0);
    if max > 64 << 20 {
        return Err(CmdError::Usage("-s: at most 64 MiB".into()));
    }
    if args.rdma_cm {
        return run_perftest(&args, op, mode, sizes[0]);
    }
    let mut rdma = args.rdma.clone();
    // The native protocol's peer is a dataplane server: no siw to wait for.
    rdma.first_fpdu_delay_ms.get_or_insert(0);
    // Room for the buffers (client: source and sink; server: one per QP slot in latency
    // runs, one in all in bandwidth runs, where the QPs share them).
    let need_mb = (max * 2).div_ceil(1 << 20) + 8;
    rdma.mem_mb = rdma.mem_mb.max(need_mb);
    let params = PerfParams {
        op,
        mode,
        sizes,
        iters: args.iters.unwrap_or(match mode {
            PerfMode::Bw => 5000,
            PerfMode::Lat => 1000,
        }),
        duration: args.duration,
        qps: args.qps,
        tx_depth: args.tx_depth,
        inline: args.inline,
    };
    if args.loopback {
        let lanes = rdma.loopback_lanes()?;
        if lanes.lanes.len() > 1 {
            return loopback_lanes(&args, &rdma, lanes, params);
        }
        let mut pair = lanes.into_single();
        let addr = SocketAddr::new(pair.server.1, args.port);
        let mut server = PerfServer::new(pair.server.0.handler_mut(), addr)?;
        server.verify = args.verify;
        let local = pair.client.1;
        let mut client = PerfClient::new(pair.client.0.handler_mut(), local, addr, params)?;
        client.progress = true;
        say!(
            "perf {} {} in-process loopback to {addr} (memory: {})",
            op.name(),
            if args.lat { "latency" } else { "bandwidth" },
            pair.memory
        );
        say!("{}", PerfResult::header(mode));
        client.on_result = Some(Box::new(|r: &PerfResult| say!("{}", r.row())));
        let (rs, rc) = run_pair(
            &mut pair.server.0,
            &mut server,
            &mut pair.client.0,
            &mut client,
            rdma.time_limit.unwrap_or(Duration::from_secs(3600)),
            &*stop_flag()?,
        );
        for s in &client.shares {
            say!("{}", s.line());
        }
        say!("{}", pair.server.0.handler().counters().summary());
        if args.verify {
            say!("{}", verify_summary(&server));
        }
        rc?;
        rs?;
        return verify_result(&server);
    }
    let lanes = rdma.lane_sessions()?;
    if lanes.lanes.len() > 1 {
        return session_lanes(&args, &rdma, lanes, params);
    }
    let mut s = lanes.into_single();
    match args.server {
        None => {
            let addr = s.listen_addr(None, args.port);
            let mut app = PerfServer::new(s.poll.handler_mut(), addr)?;
            app.verify = args.verify;
            say!(
                "perf {} server listening on {addr} (memory: {})",
                op.name(),
                s.memory
            );
            let r = s.run(&mut app, rdma.time_limit);
            say!("perf server: {} connections served", app.served);
            if args.verify {
                say!("{}", verify_summary(&app));
            }
            r?;
            verify_result(&app)
        }
        Some(ip) => {
            let remote = SocketAddr::new(ip, args.port);
            let local = s.local_for(ip)?;
            let mut app = PerfClient::new(s.poll.handler_mut(), local, remote, params)?;
            app.progress = true;
            say!(
                "perf {} {} to {remote} (memory: {}, CRC {}, markers {}, first FPDUs held {} ms)",
                op.name(),
                if args.lat { "latency" } else { "bandwidth" },
                s.memory,
                if rdma.crc { "on" } else { "off" },
                if rdma.markers { "on" } else { "off" },
                rdma.first_fpdu_delay()
            );
            say!("{}", PerfResult::header(mode));
            app.on_result = Some(Box::new(|r: &PerfResult| say!("{}", r.row())));
            let r = s.run(&mut app, rdma.time_limit);
            // Connection set-up: how many QPs were up at once, and how long the first
            // size's took to all reach RTS.
            for s in &app.shares {
                say!("{}", s.line());
            }
            say!("perf-qps-connected: {}", app.connected);
            if let Some(t) = app.connect_times.first() {
                say!("perf-connect-ms: {}", t.as_millis());
            }
            r
        }
    }
}

/// The server's verification counters (`key: value` lines).
fn verify_summary(s: &PerfServer) -> String {
    format!(
        "perf-verified-bytes: {}\nperf-verify-failures: {}",
        s.verified_bytes, s.verify_failures
    )
}

/// An error when the server found a buffer that did not hold what the client sent.
fn verify_result(s: &PerfServer) -> Result<(), CmdError> {
    if s.verify_failures > 0 {
        return Err(CmdError::Runtime(format!(
            "{} connection(s) left data the client did not write",
            s.verify_failures
        )));
    }
    Ok(())
}

/// QPs of lane `k` of `lanes` when `qps` are spread evenly.
fn lane_share(qps: u16, lanes: usize, k: usize) -> u16 {
    let n = lanes as u16;
    qps / n + u16::from((k as u16) < qps % n)
}

/// The parameters of lane `k` of `lanes`: its share of the QPs, and of the iterations in
/// proportion (the lanes' iterations add up to `params.iters`).
fn lane_params(params: &PerfParams, lanes: usize, k: usize) -> PerfParams {
    let before: u64 = (0..k)
        .map(|j| u64::from(lane_share(params.qps, lanes, j)))
        .sum();
    let qps = lane_share(params.qps, lanes, k);
    let total = u64::from(params.qps.max(1));
    let upto = |q: u64| params.iters * q / total;
    PerfParams {
        qps,
        iters: upto(before + u64::from(qps)) - upto(before),
        ..params.clone()
    }
}

/// The sum of the lanes' results, size by size (bandwidth: rates add up; latency: lane 0's).
fn total_results(per_lane: &[Vec<PerfResult>]) -> Vec<PerfResult> {
    let mut total: Vec<PerfResult> = per_lane.first().cloned().unwrap_or_default();
    for lane in per_lane.iter().skip(1) {
        for (t, r) in total.iter_mut().zip(lane) {
            if let (
                PerfResult::Bw {
                    iters,
                    peak_mbs,
                    avg_mbs,
                    mpps,
                    ..
                },
                PerfResult::Bw {
                    iters: i2,
                    peak_mbs: p2,
                    avg_mbs: a2,
                    mpps: m2,
                    ..
                },
            ) = (t, r)
            {
                *iters += i2;
                *peak_mbs += p2;
                *avg_mbs += a2;
                *mpps += m2;
            }
        }
    }
    total
}

/// Prints each lane's results and the total table.
fn print_lane_results(mode: PerfMode, per_lane: &[Vec<PerfResult>]) {
    for (k, rs) in per_lane.iter().enumerate() {
        for r in rs {
            say!("lane-{k}-result: {}", r.row().trim());
        }
    }
    say!("{}", PerfResult::header(mode));
    for r in total_results(per_lane) {
        say!("{}", r.row());
    }
}

/// `perf` on a multi-queue port: one share-nothing stack per lane (queue pair), each on an
/// lcore of its own; the client spreads its QPs over the lanes (each lane's connections
/// hash to it, so the server's lane of the same queue gets them).
fn session_lanes(
    args: &Args,
    rdma: &RdmaArgs,
    lanes: Lanes<super::rdma_args::Session>,
    params: PerfParams,
) -> Result<(), CmdError> {
    let Lanes {
        lanes: mut sessions,
        opened,
    } = lanes;
    let n = sessions.len();
    let stop = stop_flag()?;
    let failure = LaneFailure::new(stop.clone());
    let limit = rdma.time_limit;
    let mode = params.mode;
    if args.server.is_some() && usize::from(args.qps) < n && mode == PerfMode::Bw {
        return Err(CmdError::Usage(format!(
            "-q {}: at least one QP per lane ({n} lanes)",
            args.qps
        )));
    }
    // Every lane listens before the server says so (a client may connect at once).
    let mut servers = Vec::new();
    if args.server.is_none() {
        for s in sessions.iter_mut() {
            let addr = s.listen_addr(None, args.port);
            let mut app = PerfServer::new(s.poll.handler_mut(), addr)?;
            app.verify = args.verify;
            servers.push(Some(app));
        }
    } else {
        servers.resize_with(n, || None);
    }
    say!(
        "perf {} {} on {n} lanes (memory per lane: {}, CRC {})",
        params.op.name(),
        match args.server {
            None => format!("server listening on port {}", args.port),
            Some(ip) => format!("to {ip}"),
        },
        sessions[0].memory,
        if rdma.crc { "on" } else { "off" },
    );
    type LaneOut = Result<(Vec<PerfResult>, (u64, u32, u32)), CmdError>;
    let jobs: Vec<LaneJob<'_, LaneOut>> = sessions
        .iter_mut()
        .zip(servers)
        .enumerate()
        .map(|(k, (s, server))| {
            let (stop, failure) = (&stop, &failure);
            let params = lane_params(&params, n, k);
            let (remote, port) = (args.server, args.port);
            let lane = move || -> LaneOut {
                if let Some(mut app) = server {
                    s.run_until(&mut app, limit, stop)?;
                    return Ok((
                        Vec::new(),
                        (app.verified_bytes, app.verify_failures, app.served),
                    ));
                }
                let ip = remote.ok_or_else(|| CmdError::Usage("no server address".into()))?;
                let remote = SocketAddr::new(ip, port);
                let local = s.local_for(ip)?;
                let mut app = PerfClient::new(s.poll.handler_mut(), local, remote, params)?;
                s.run_until(&mut app, limit, stop)?;
                Ok((std::mem::take(&mut app.results), (0, 0, 0)))
            };
            Box::new(move || {
                let r = lane();
                if r.is_err() {
                    failure.report(k);
                }
                r
            }) as LaneJob<'_, LaneOut>
        })
        .collect();
    let (outs, places) = opened
        .run_lanes(jobs)
        .map_err(|e| CmdError::Runtime(e.to_string()))?;
    LaneReport::print(&places, sessions.iter().map(|s| vec![&s.poll]));
    let mut per_lane = Vec::new();
    let (mut verified, mut failures, mut served) = (0, 0, 0);
    let mut first_err = None;
    for (k, out) in outs.into_iter().enumerate() {
        match out {
            Ok((rs, (v, f, c))) => {
                per_lane.push(rs);
                verified += v;
                failures += f;
                served += c;
            }
            // The lane that failed first; the others were stopped by it.
            Err(e) if failure.first().is_none_or(|f| f == k) => {
                first_err.get_or_insert(CmdError::Runtime(format!("lane {k}: {e}")));
            }
            Err(_) => {}
        }
    }
    if args.server.is_none() {
        say!("perf server: {served} connections served");
        if args.verify {
            say!("perf-verified-bytes: {verified}\nperf-verify-failures: {failures}");
        }
    } else if first_err.is_none() {
        print_lane_results(mode, &per_lane);
    }
    drop(sessions);
    drop(opened);
    if let Some(e) = first_err {
        return Err(e);
    }
    if failures > 0 {
        return Err(CmdError::Runtime(format!(
            "{failures} connection(s) left data the client did not write"
        )));
    }
    Ok(())
}

/// `perf --loopback` on multi-queue ports: each lane runs both ends of its share of the
/// QPs (server and client stacks on the two ends of its link) on an lcore of its own.
fn loopback_lanes(
    args: &Args,
    rdma: &RdmaArgs,
    lanes: Lanes<super::rdma_args::LoopbackPair>,
    params: PerfParams,
) -> Result<(), CmdError> {
    let Lanes {
        lanes: mut pairs,
        opened,
    } = lanes;
    let n = pairs.len();
    let mode = params.mode;
    if usize::from(args.qps) < n && mode == PerfMode::Bw {
        return Err(CmdError::Usage(format!(
            "-q {}: at least one QP per lane ({n} lanes)",
            args.qps
        )));
    }
    say!(
        "perf {} in-process loopback on {n} lanes (memory per lane: {}, CRC {})",
        params.op.name(),
        pairs[0].memory,
        if rdma.crc { "on" } else { "off" },
    );
    let limit = rdma.time_limit.unwrap_or(Duration::from_secs(3600));
    let stop = stop_flag()?;
    type LaneOut = Result<(Vec<PerfResult>, (u64, u32)), CmdError>;
    let jobs: Vec<LaneJob<'_, LaneOut>> = pairs
        .iter_mut()
        .enumerate()
        .map(|(k, pair)| {
            let params = lane_params(&params, n, k);
            let (port, verify) = (args.port, args.verify);
            let stop = &*stop;
            Box::new(move || -> LaneOut {
                let addr = SocketAddr::new(pair.server.1, port);
                let mut server = PerfServer::new(pair.server.0.handler_mut(), addr)?;
                server.verify = verify;
                let local = pair.client.1;
                let mut client = PerfClient::new(pair.client.0.handler_mut(), local, addr, params)?;
                let (rs, rc) = run_pair(
                    &mut pair.server.0,
                    &mut server,
                    &mut pair.client.0,
                    &mut client,
                    limit,
                    stop,
                );
                rc?;
                rs?;
                Ok((
                    std::mem::take(&mut client.results),
                    (server.verified_bytes, server.verify_failures),
                ))
            }) as LaneJob<'_, LaneOut>
        })
        .collect();
    let (outs, places) = opened
        .run_lanes(jobs)
        .map_err(|e| CmdError::Runtime(e.to_string()))?;
    LaneReport::print(
        &places,
        pairs.iter().map(|p| vec![&p.server.0, &p.client.0]),
    );
    let mut per_lane = Vec::new();
    let (mut verified, mut failures) = (0, 0);
    for out in outs {
        let (rs, (v, f)) = out?;
        per_lane.push(rs);
        verified += v;
        failures += f;
    }
    print_lane_results(mode, &per_lane);
    if args.verify {
        say!("perf-verified-bytes: {verified}\nperf-verify-failures: {failures}");
    }
    if failures > 0 {
        return Err(CmdError::Runtime(format!(
            "{failures} connection(s) left data the client did not write"
        )));
    }
    Ok(())
}

/// `perf -R`: perftest's own exchange.
fn run_perftest(args: &Args, op: PerfOp, mode: PerfMode, size: usize) -> Result<(), CmdError> {
    let test = match (op, mode) {
        (PerfOp::Write, PerfMode::Bw) => Test::WriteBw,
        (PerfOp::Read, PerfMode::Bw) => Test::ReadBw,
        (PerfOp::Send, PerfMode::Bw) => Test::SendBw,
        (PerfOp::Write, PerfMode::Lat) => Test::WriteLat,
        (PerfOp::Read, PerfMode::Lat) => Test::ReadLat,
        (PerfOp::Send, PerfMode::Lat) => Test::SendLat,
        _ => {
            return Err(CmdError::Usage(
                "-R speaks perftest's ib_{write,read,send}_{bw,lat}, not atomics".into(),
            ))
        }
    };
    if args.all || args.qps != 1 || args.duration.is_some() {
        return Err(CmdError::Usage(
            "-R runs one size on one QP for -n iterations (no -a, -q, -D)".into(),
        ));
    }
    let iters = args
        .iters
        .unwrap_or(if args.lat { 1000 } else { 5000 })
        .max(1);
    let mut params = PerftestParams::new(test, size, iters);
    params.tx_depth = params.tx_depth.min(args.tx_depth.max(1));
    let mut rdma = args.rdma.clone();
    // perftest's peer may be Linux siw: the first FPDUs keep siw's hold unless asked
    // otherwise (`--first-fpdu-delay-ms`); the native protocol's runs above drop it.
    rdma.mem_mb = rdma.mem_mb.max((size * 3).div_ceil(1 << 20) * 2 + 8);
    let header = PerfResult::header(mode);
    let print = |who: &'static str| {
        Box::new(move |r: &PerfResult| {
            say!("{}", header);
            say!("{}", r.row());
            if !who.is_empty() {
                say!("({who})");
            }
        }) as dataplane::apps::perf::ResultSink
    };
    if args.loopback {
        let mut pair = rdma.loopback()?;
        let addr = SocketAddr::new(pair.server.1, args.port);
        let mut server =
            PerftestSession::server(pair.server.0.handler_mut(), addr, params.clone())?;
        server.on_result = Some(print("server"));
        let mut client =
            PerftestSession::client(pair.client.0.handler_mut(), pair.client.1, addr, params)?;
        client.on_result = Some(print("client"));
        say!(
            "perf -R {} in-process loopback to {addr} (memory: {})",
            test.name(),
            pair.memory
        );
        let (rs, rc) = run_pair(
            &mut pair.server.0,
            &mut server,
            &mut pair.client.0,
            &mut client,
            rdma.time_limit.unwrap_or(Duration::from_secs(3600)),
            &*stop_flag()?,
        );
        rc?;
        return Ok(rs?);
    }
    let lanes = rdma.lane_sessions()?;
    if lanes.lanes.len() > 1 {
        return perftest_lanes(args, &rdma, test, mode, params, lanes);
    }
    let mut s = lanes.into_single();
    if let Some(p) = s.poll.ports().first() {
        params.mac = p.info().mac;
        params.mtu = p.info().mtu;
    }
    let r = match args.server {
        None => {
            let addr = s.listen_addr(None, args.port);
            let mut app = PerftestSession::server(s.poll.handler_mut(), addr, params)?;
            app.on_result = Some(print(""));
            say!(
                "perf -R {} server listening on {addr} (memory: {})",
                test.name(),
                s.memory
            );
            let r = s.run(&mut app, rdma.time_limit);
            if let Some(v) = app.peer_version() {
                say!("perf -R: peer perftest version {v}");
            }
            r
        }
        Some(ip) => {
            let remote = SocketAddr::new(ip, args.port);
            let local = s.local_for(ip)?;
            let mut app = PerftestSession::client(s.poll.handler_mut(), local, remote, params)?;
            app.on_result = Some(print(""));
            say!(
                "perf -R {} to {remote} (memory: {}, CRC {}, markers {}, first FPDUs held {} ms)",
                test.name(),
                s.memory,
                if rdma.crc { "on" } else { "off" },
                if rdma.markers { "on" } else { "off" },
                rdma.first_fpdu_delay()
            );
            let r = s.run(&mut app, rdma.time_limit);
            if let Some(v) = app.peer_version() {
                say!("perf -R: peer perftest version {v}");
            }
            r
        }
    };
    r
}

/// `perf -R` on a multi-queue port: the server listens on every lane (an lcore each) and
/// runs perftest's exchange on the lane its client's connections hash to (the others end
/// with it); the client connects from lane 0 (local ports that hash to it).
fn perftest_lanes(
    args: &Args,
    rdma: &RdmaArgs,
    test: Test,
    mode: PerfMode,
    mut params: PerftestParams,
    lanes: Lanes<super::rdma_args::Session>,
) -> Result<(), CmdError> {
    let Lanes {
        lanes: mut sessions,
        opened,
    } = lanes;
    let n = sessions.len();
    let stop = stop_flag()?;
    if let Some(p) = sessions[0].poll.ports().first() {
        params.mac = p.info().mac;
        params.mtu = p.info().mtu;
    }
    let sink = || -> dataplane::apps::perf::ResultSink {
        Box::new(move |r: &PerfResult| {
            say!("{}", PerfResult::header(mode));
            say!("{}", r.row());
        })
    };
    let mut apps = Vec::new();
    match args.server {
        None => {
            let addr = sessions[0].listen_addr(None, args.port);
            for s in sessions.iter_mut() {
                let mut app = PerftestSession::server(s.poll.handler_mut(), addr, params.clone())?;
                app.on_result = Some(sink());
                apps.push(Some(app));
            }
            say!(
                "perf -R {} server listening on {addr} ({n} lanes, memory per lane: {})",
                test.name(),
                sessions[0].memory
            );
        }
        Some(ip) => {
            let s = &mut sessions[0];
            let remote = SocketAddr::new(ip, args.port);
            let local = s.local_for(ip)?;
            let mut app = PerftestSession::client(s.poll.handler_mut(), local, remote, params)?;
            app.on_result = Some(sink());
            apps.push(Some(app));
            apps.resize_with(n, || None);
            say!(
                "perf -R {} to {remote} (lane 0 of {n}, memory: {}, CRC {}, first FPDUs held {} ms)",
                test.name(),
                s.memory,
                if rdma.crc { "on" } else { "off" },
                rdma.first_fpdu_delay()
            );
        }
    }
    let (outs, places) = run_until_first(&mut sessions, &opened, apps, rdma.time_limit, &stop)?;
    LaneReport::print(&places, sessions.iter().map(|s| vec![&s.poll]));
    let mut result = Ok(());
    for (k, (app, r)) in outs
        .into_iter()
        .enumerate()
        .filter_map(|(k, o)| Some((k, o?)))
    {
        if let Some(v) = app.peer_version() {
            say!("perf -R: peer perftest version {v} (lane {k})");
        }
        if let Err(e) = r {
            result = result.and(Err(CmdError::Runtime(format!("lane {k}: {e}"))));
        }
    }
    drop(sessions);
    drop(opened);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(qps: u16, iters: u64) -> PerfParams {
        PerfParams {
            op: PerfOp::Write,
            mode: PerfMode::Bw,
            sizes: vec![65536],
            iters,
            duration: None,
            qps,
            tx_depth: 128,
            inline: 0,
        }
    }

    #[test]
    fn lanes_share_the_qps_and_the_iterations() {
        for (qps, iters, lanes) in [
            (16u16, 3200u64, 2usize),
            (5, 1000, 2),
            (7, 10, 3),
            (4, 5000, 4),
        ] {
            let p = params(qps, iters);
            let shares: Vec<PerfParams> = (0..lanes).map(|k| lane_params(&p, lanes, k)).collect();
            assert_eq!(shares.iter().map(|s| s.qps).sum::<u16>(), qps);
            assert_eq!(shares.iter().map(|s| s.iters).sum::<u64>(), iters);
            let (lo, hi) = (
                shares.iter().map(|s| s.qps).min().unwrap(),
                shares.iter().map(|s| s.qps).max().unwrap(),
            );
            assert!(hi - lo <= 1, "{qps} QPs over {lanes} lanes");
        }
    }

    #[test]
    fn lane_bandwidths_add_up() {
        let bw = |iters, avg| PerfResult::Bw {
            bytes: 65536,
            iters,
            peak_mbs: avg + 1.0,
            avg_mbs: avg,
            mpps: 0.5,
        };
        let total = total_results(&[vec![bw(10, 100.0)], vec![bw(30, 250.0)]]);
        assert_eq!(
            total,
            vec![PerfResult::Bw {
                bytes: 65536,
                iters: 40,
                peak_mbs: 352.0,
                avg_mbs: 350.0,
                mpps: 1.0,
            }]
        );
    }
}
