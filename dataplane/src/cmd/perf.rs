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
use dataplane::say;

use super::common::{parse_secs, CmdError};
use super::rdma_args::RdmaArgs;

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
        let mut pair = rdma.loopback()?;
        let addr = SocketAddr::new(pair.server.1, args.port);
        let mut server = PerfServer::new(pair.server.0.handler_mut(), addr)?;
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
        );
        say!("{}", pair.server.0.handler().counters().summary());
        rc?;
        return Ok(rs?);
    }
    let mut s = rdma.session()?;
    match args.server {
        None => {
            let addr = s.listen_addr(None, args.port);
            let mut app = PerfServer::new(s.poll.handler_mut(), addr)?;
            say!(
                "perf {} server listening on {addr} (memory: {})",
                op.name(),
                s.memory
            );
            let r = s.run(&mut app, rdma.time_limit);
            say!("perf server: {} connections served", app.served);
            r
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
            say!("perf-qps-connected: {}", app.connected);
            if let Some(t) = app.connect_times.first() {
                say!("perf-connect-ms: {}", t.as_millis());
            }
            r
        }
    }
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
    // The native protocol's peer is a dataplane server: no siw to wait for.
    rdma.first_fpdu_delay_ms.get_or_insert(0);
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
        );
        rc?;
        return Ok(rs?);
    }
    let mut s = rdma.session()?;
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
