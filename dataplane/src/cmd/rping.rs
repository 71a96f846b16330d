//! `dataplane rping`: rdma-core's rping (Send / RDMA Read / RDMA Write ping-pong of
//! `{addr, rkey, size}` records) over the data plane's iWARP, server (`-s`) or client
//! (`-c`), with rping's flags.

use std::net::{IpAddr, SocketAddr};

use dataplane::apps::rping::{Rping, RpingOptions, MAX_SIZE, MIN_SIZE};
use dataplane::say;

use super::common::{stop_flag, CmdError};
use super::rdma_args::{run_until_first, LaneReport, Lanes, RdmaArgs, Session};

/// Arguments of `rping`.
#[derive(Debug, clap::Args)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// Server side.
    #[arg(short = 's', conflicts_with = "client")]
    pub server: bool,
    /// Client side.
    #[arg(short = 'c')]
    pub client: bool,
    /// Address, IPv4 or IPv6 (server: to listen on, default the port's; client: the
    /// server's).
    #[arg(short = 'a', value_name = "ADDR")]
    pub addr: Option<IpAddr>,
    /// TCP port.
    #[arg(short = 'p', value_name = "PORT", default_value_t = 7174)]
    pub port: u16,
    /// Ping count (client; 0 = until stopped).
    #[arg(short = 'C', value_name = "COUNT", default_value_t = 0)]
    pub count: u32,
    /// Ping data size.
    #[arg(short = 'S', value_name = "SIZE", default_value_t = 64)]
    pub size: usize,
    /// Display ping data.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Validate ping data.
    #[arg(short = 'V')]
    pub validate: bool,
    /// Ports and iWARP settings.
    #[command(flatten)]
    pub rdma: RdmaArgs,
}

/// Runs `dataplane rping`.
pub fn run(args: Args) -> Result<(), CmdError> {
    if args.server == args.client {
        return Err(CmdError::Usage("give -s (server) or -c (client)".into()));
    }
    if !(MIN_SIZE..=MAX_SIZE).contains(&args.size) {
        return Err(CmdError::Usage(format!(
            "Invalid size {} (valid range is {MIN_SIZE} to {MAX_SIZE})",
            args.size
        )));
    }
    if args.client && args.addr.is_none() {
        return Err(CmdError::Usage("the client needs -a ADDR".into()));
    }
    let opts = RpingOptions {
        size: args.size,
        count: args.count,
        verbose: args.verbose,
        validate: args.validate,
    };
    let lanes = args.rdma.lane_sessions()?;
    if lanes.lanes.len() > 1 {
        return rping_lanes(&args, opts, lanes);
    }
    let mut s = lanes.into_single();
    let mut app = if args.server {
        let addr = s.listen_addr(args.addr, args.port);
        let app = Rping::server(s.poll.handler_mut(), addr, opts)?;
        say!("rping server listening on {addr} (memory: {})", s.memory);
        app
    } else {
        let remote = SocketAddr::new(args.addr.unwrap_or(s.ip), args.port);
        let ip = s.local_for(remote.ip())?;
        let app = Rping::client(s.poll.handler_mut(), ip, remote, opts)?;
        say!("rping client connecting to {remote} (memory: {})", s.memory);
        app
    };
    let r = s.run(&mut app, args.rdma.time_limit);
    summary(&app, args.size);
    r
}

/// The pings line of a finished run.
fn summary(app: &Rping, size: usize) {
    let secs = match (app.started, app.finished) {
        (Some(a), Some(b)) => b.saturating_since(a).as_secs_f64(),
        _ => 0.0,
    };
    say!(
        "rping: {} pings of {size} bytes in {secs:.3} s{}",
        app.pings,
        if app.pings > 0 && secs > 0.0 {
            format!(" ({:.1} us per ping)", secs * 1e6 / f64::from(app.pings))
        } else {
            String::new()
        }
    );
}

/// `rping` on a multi-queue port: the server listens on every lane (each lane's stack on an
/// lcore of its own) and serves its client on the lane the connection hashes to; the
/// client connects from lane 0 (a local port that hashes to it), the other lanes idle.
fn rping_lanes(args: &Args, opts: RpingOptions, lanes: Lanes<Session>) -> Result<(), CmdError> {
    let Lanes {
        lanes: mut sessions,
        opened,
    } = lanes;
    let n = sessions.len();
    let stop = stop_flag()?;
    let mut apps = Vec::new();
    if args.server {
        let addr = sessions[0].listen_addr(args.addr, args.port);
        for s in sessions.iter_mut() {
            apps.push(Some(Rping::server(
                s.poll.handler_mut(),
                addr,
                opts.clone(),
            )?));
        }
        say!(
            "rping server listening on {addr} ({n} lanes, memory per lane: {})",
            sessions[0].memory
        );
    } else {
        let s = &mut sessions[0];
        let remote = SocketAddr::new(args.addr.unwrap_or(s.ip), args.port);
        let ip = s.local_for(remote.ip())?;
        apps.push(Some(Rping::client(s.poll.handler_mut(), ip, remote, opts)?));
        apps.resize_with(n, || None);
        say!(
            "rping client connecting to {remote} (lane 0 of {n}, memory: {})",
            sessions[0].memory
        );
    }
    let (outs, places) =
        run_until_first(&mut sessions, &opened, apps, args.rdma.time_limit, &stop)?;
    LaneReport::print(&places, sessions.iter().map(|s| vec![&s.poll]));
    let mut result = Ok(());
    let mut served = None;
    for (k, (app, r)) in outs
        .into_iter()
        .enumerate()
        .filter_map(|(k, o)| Some((k, o?)))
    {
        say!("lane-{k}: {} pings", app.pings);
        if let Err(e) = r {
            result = result.and(Err(CmdError::Runtime(format!("lane {k}: {e}"))));
        }
        if served.as_ref().is_none_or(|a: &Rping| app.pings > a.pings) {
            served = Some(app);
        }
    }
    if let Some(app) = &served {
        summary(app, args.size);
    }
    drop(sessions);
    drop(opened);
    result
}
