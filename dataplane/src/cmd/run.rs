//! `dataplane run`: bring up the configured ports, answer ARP and ping on them, print
//! periodic statistics and a summary at the end.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dataplane::classify::FrameClass;
use dataplane::lcore::{NoHandler, PollLoop, PortAddr, StopReason};
use dataplane::port::{AnyPort, Port};
use dataplane::say;
use dataplane::stats::{RateReporter, Table};

use super::{deadline, parse_fault_arg, parse_secs, stop_flag, CmdError, PortArgs};

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: PathBuf,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long, short = 'd', value_name = "SECS", value_parser = parse_secs)]
    pub duration: Option<Duration>,
    /// Seconds between statistics lines (0: none; default from the configuration).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub stats_interval: Option<Duration>,
    /// Write each port's frames to DIR/<port>.pcap.
    #[arg(long, value_name = "DIR")]
    pub capture_dir: Option<PathBuf>,
    /// Inject faults: `[PORT:]KEY=VALUE,...` with the keys of `[ports.fault]` (repeatable).
    #[arg(long = "fault", value_name = "SPEC", value_parser = parse_fault_arg)]
    pub faults: Vec<(Option<String>, String)>,
    /// DPDK EAL arguments (after `--`), added to the configuration's.
    #[arg(last = true, value_name = "EAL ARGS")]
    pub eal: Vec<String>,
}

/// Runs `dataplane run`.
pub fn run(args: Args) -> Result<(), CmdError> {
    let port_args = PortArgs {
        config: Some(args.config.clone()),
        ports: Vec::new(),
        capture_dir: args.capture_dir.clone(),
        faults: args.faults.clone(),
        eal: args.eal.clone(),
    };
    let cfg = port_args.config()?;
    if cfg.ports.is_empty() {
        return Err(CmdError::Usage(format!(
            "{}: no [[ports]] configured",
            args.config.display()
        )));
    }
    let stop = stop_flag()?;
    let opened = port_args.open(&cfg)?;
    let interval = args
        .stats_interval
        .unwrap_or_else(|| Duration::from_secs_f64(cfg.poll.stats_interval));

    let mut poll = PollLoop::new(NoHandler, cfg.poll.burst);
    for (i, port) in opened.ports.into_iter().enumerate() {
        let pc = &opened.configs[i];
        say!(
            "port {} ({}, {}): {}{}",
            port.info().name,
            port.kind(),
            pc.device(),
            port.info(),
            pc.ipv4.map(|c| format!(" ipv4 {c}")).unwrap_or_default()
        );
        let addr = PortAddr {
            ipv4: pc.ipv4,
            gateway: pc.gateway.as_ref().map(|g| *g.get_ref()),
            promiscuous: pc.promiscuous,
        };
        poll.add_port(port, addr);
    }
    say!(
        "running{}; Ctrl-C stops",
        args.duration
            .map(|d| format!(" for {:.1}s", d.as_secs_f64()))
            .unwrap_or_default()
    );

    let start = Instant::now();
    let mut reporter = RateReporter::new(interval, start, poll.ports().len());
    let reason = poll.run(&stop, deadline(args.duration), |l, now| {
        let stats: Vec<(&str, _)> = l
            .ports()
            .iter()
            .map(|p| (p.info().name.as_str(), p.stats()))
            .collect();
        if let Some(line) = reporter.poll(now, &stats) {
            say!("{line}");
        }
    });
    let elapsed = start.elapsed();
    say!(
        "stopped after {:.2}s ({})",
        elapsed.as_secs_f64(),
        match reason {
            StopReason::Stopped => "interrupted",
            StopReason::Deadline => "duration reached",
        }
    );
    say!("{}", summary(&poll, elapsed).trim_end());
    Ok(())
}

/// `ns / n` as text, `-` when `n` is zero.
fn per_pkt(ns: u64, n: u64) -> String {
    ns.checked_div(n)
        .map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The end-of-run tables: port counters, poll loop counters, and faults if any.
fn summary(poll: &PollLoop<AnyPort, NoHandler>, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mut ports = Table::new([
        "port", "backend", "rx_pkts", "rx_bytes", "tx_pkts", "tx_bytes", "rx_drop", "tx_drop",
        "rx_err", "rx_pps", "tx_pps",
    ]);
    let mut lp = Table::new([
        "port",
        "arp",
        "icmp",
        "tcp",
        "udp",
        "other",
        "not_for_us",
        "malformed",
        "arp_reply",
        "echo_reply",
        "unhandled",
        "rx_ns/pkt",
        "proc_ns/pkt",
        "tx_ns/pkt",
    ]);
    let mut faults = Table::new([
        "port",
        "dir",
        "seen",
        "dropped",
        "reordered",
        "duplicated",
        "corrupted",
        "truncated",
        "delayed",
    ]);
    for (i, p) in poll.ports().iter().enumerate() {
        let s = p.stats();
        let name = &p.info().name;
        ports.row([
            name.clone(),
            p.kind(),
            s.rx_packets.to_string(),
            s.rx_bytes.to_string(),
            s.tx_packets.to_string(),
            s.tx_bytes.to_string(),
            s.rx_dropped.to_string(),
            s.tx_dropped.to_string(),
            s.rx_errors.to_string(),
            format!("{:.0}", s.rx_packets as f64 / secs),
            format!("{:.0}", s.tx_packets as f64 / secs),
        ]);
        let c = poll.counters(i);
        let other = c.class(FrameClass::OtherIpv4)
            + c.class(FrameClass::Fragment)
            + c.class(FrameClass::OtherEthertype);
        lp.row([
            name.clone(),
            c.class(FrameClass::Arp).to_string(),
            c.class(FrameClass::Icmp).to_string(),
            c.class(FrameClass::Tcp).to_string(),
            c.class(FrameClass::Udp).to_string(),
            other.to_string(),
            c.class(FrameClass::NotForUs).to_string(),
            c.malformed().to_string(),
            c.arp_replies.to_string(),
            c.echo_replies.to_string(),
            c.unhandled.to_string(),
            per_pkt(c.rx_ns, c.rx),
            per_pkt(c.process_ns, c.rx),
            per_pkt(c.tx_ns, c.tx),
        ]);
        if let Some((rx, tx)) = p.fault_counters() {
            for (dir, f) in [("rx", rx), ("tx", tx)] {
                faults.row([
                    name.clone(),
                    dir.into(),
                    f.seen.to_string(),
                    f.dropped.to_string(),
                    f.reordered.to_string(),
                    f.duplicated.to_string(),
                    (f.corrupted + f.corrupted_tcp).to_string(),
                    f.truncated.to_string(),
                    f.delayed.to_string(),
                ]);
            }
        }
    }
    let mut out = format!("\nports\n{ports}\npoll loop\n{lp}");
    if !faults.is_empty() {
        out.push_str(&format!("\nfaults\n{faults}"));
    }
    out
}
