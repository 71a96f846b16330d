//! `dataplane run`: bring up the configured ports, answer ARP and ping on them, print
//! periodic statistics and a summary at the end.
//!
//! Each lcore value of the ports is one poll loop on a thread named `lcore-N`: an EAL worker
//! lcore's loop runs on that worker (`rte_eal_remote_launch`, pinned by EAL to the lcore's
//! CPUs), the main lcore's on a thread with the main lcore's CPUs. That loop also prints
//! the periodic reports (the main thread does when every loop is on a worker). A port of
//! `queues = N` is N ports `name.q0` .. `name.qN-1` (its queue pairs), queue `k` on lcore
//! `lcore + k`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use dataplane::clock::{self, Instant};

use dataplane::classify::FrameClass;
#[cfg(feature = "dpdk")]
use dataplane::dpdk::{LcoreRole, WorkerJob};
use dataplane::lcore::{LoopCounters, NoHandler, PollLoop, PortAddr, StopReason};
use dataplane::neighbour::neighbour_shares;
use dataplane::port::fault::Direction;
use dataplane::port::{AnyPort, Port, PortStats};
use dataplane::runtime::OpenedPorts;
use dataplane::say;
use dataplane::stats::{RateReporter, Table};

use super::common::{deadline, parse_secs, stop_flag, CmdError, OpenArgs, PortArgs};

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
    /// How the ports are opened.
    #[command(flatten)]
    pub open: OpenArgs,
}

/// Runs `dataplane run`.
pub fn run(args: Args) -> Result<(), CmdError> {
    let port_args = PortArgs {
        config: Some(args.config.clone()),
        ports: Vec::new(),
        open: args.open.clone(),
    };
    let cfg = port_args.config()?;
    if cfg.ports.is_empty() {
        return Err(CmdError::Usage(format!(
            "{}: no [[ports]] configured",
            args.config.display()
        )));
    }
    let stop = stop_flag()?;
    let mut opened = port_args.open_lanes(&cfg)?;
    let interval = args
        .stats_interval
        .unwrap_or_else(|| Duration::from_secs_f64(cfg.poll.stats_interval));

    // One poll loop per lcore value; loop order follows the lowest lcore first. Queue `k`
    // of a port is row `k * ports + i`, on lcore `lcore + k`.
    let mut groups: BTreeMap<u32, Lcore> = BTreeMap::new();
    let mut lanes = vec![std::mem::take(&mut opened.ports)];
    lanes.append(&mut opened.lanes);
    let n_cfg = opened.configs.len();
    let n_lanes = lanes.len();
    // A port's queues share what they learn about neighbours (an RSS NIC delivers every ARP
    // reply and neighbour advertisement to queue 0).
    let mut shares: Vec<_> = (0..n_cfg)
        .map(|_| neighbour_shares(n_lanes).into_iter())
        .collect();
    let mut names = Vec::new();
    for (k, ports) in lanes.into_iter().enumerate() {
        for (i, port) in ports.into_iter().enumerate() {
            let pc = &opened.configs[i];
            let lcore = pc.lcore + k as u32;
            say!(
                "port {} ({}, {}, lcore {lcore}): {}{}",
                port.info().name,
                port.kind(),
                pc.device(),
                port.info(),
                pc.ipv4.map(|c| format!(" ipv4 {c}")).unwrap_or_default()
            );
            names.push(port.info().name.clone());
            let addr = PortAddr::of(pc);
            let group = groups.entry(lcore).or_insert_with(|| Lcore {
                id: lcore,
                poll: PollLoop::new(NoHandler, cfg.poll.burst),
                ports: Vec::new(),
            });
            let index = group.poll.add_port(port, addr);
            if let Some(share) = shares[i].next().filter(|_| n_lanes > 1) {
                group.poll.share_neighbours(index, share);
            }
            group.ports.push(k * n_cfg + i);
        }
    }
    let n_ports = names.len();
    say!(
        "running {} poll loop{}{}; Ctrl-C stops",
        groups.len(),
        if groups.len() == 1 { "" } else { "s" },
        args.duration
            .map(|d| format!(" for {:.1}s", d.as_secs_f64()))
            .unwrap_or_default()
    );
    let n_loops = groups.len();
    let placed: Vec<(Lcore, Place)> = groups
        .into_values()
        .map(|lc| {
            let (place, text) = placement(&opened, lc.id, n_loops);
            say!("lcore {}: {text}", lc.id);
            (lc, place)
        })
        .collect();

    let start = clock::now();
    let end = deadline(args.duration);
    let shared = Mutex::new(vec![PortStats::default(); n_ports]);
    let mut reporter = Some(RateReporter::new(interval, start, n_ports));
    let stop: &AtomicBool = &stop;
    let names = &names[..];
    let (reason, mut loops) = std::thread::scope(|s| -> Result<_, CmdError> {
        // Every loop stops when this scope ends, however it ends.
        let _stop_all = StopOnDrop(stop);
        let shared = &shared;
        // The first loop on a thread of its own (the main lcore's) also prints the reports
        // and stops the others when it stops; without one the main thread does that.
        let mut reporting = None;
        let mut threads = Vec::new();
        let mut workers: Vec<LoopJob<'_>> = Vec::new();
        for (mut lc, place) in placed {
            let id = lc.id;
            match place {
                Place::Worker => workers.push((
                    id,
                    Box::new(move || {
                        drive(&mut lc, stop, end, shared, None);
                        lc
                    }),
                )),
                Place::Thread => match reporter.take() {
                    Some(mut rep) => {
                        let h = std::thread::Builder::new()
                            .name(format!("lcore-{id}"))
                            .spawn_scoped(s, move || {
                                let _stop_all = StopOnDrop(stop);
                                let reason =
                                    drive(&mut lc, stop, end, shared, Some((&mut rep, names)));
                                (lc, reason)
                            });
                        reporting = Some(h.map_err(thread_error)?);
                    }
                    None => {
                        threads.push(
                            std::thread::Builder::new()
                                .name(format!("lcore-{id}"))
                                .spawn_scoped(s, move || {
                                    drive(&mut lc, stop, end, shared, None);
                                    lc
                                })
                                .map_err(thread_error)?,
                        );
                    }
                },
            }
        }
        let main = || match (reporting, reporter) {
            (Some(h), _) => h
                .join()
                .map(|(lc, reason)| (reason, Some(lc)))
                .map_err(|_| CmdError::Runtime("an lcore thread panicked".into())),
            (None, rep) => {
                let _stop_all = StopOnDrop(stop);
                let mut rep = rep.unwrap_or_else(|| RateReporter::new(Duration::ZERO, start, 0));
                Ok((supervise(stop, end, &mut rep, shared, names), None))
            }
        };
        let (main, launched) = run_loops(&opened, workers, main)?;
        let (reason, first) = main?;
        let mut loops: Vec<Lcore> = first.into_iter().collect();
        for lc in launched {
            loops.push(lc?);
        }
        for h in threads {
            loops.push(
                h.join()
                    .map_err(|_| CmdError::Runtime("an lcore thread panicked".into()))?,
            );
        }
        Ok((reason, loops))
    })?;
    loops.sort_by_key(|l| l.id);
    let elapsed = clock::elapsed(start);
    say!(
        "stopped after {:.2}s ({})",
        elapsed.as_secs_f64(),
        match reason {
            StopReason::Stopped => "interrupted",
            StopReason::Deadline => "duration reached",
        }
    );
    say!("{}", summary(&loops, n_ports, elapsed).trim_end());
    Ok(())
}

/// How often the loops copy their port counters for the periodic report.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// How often the main thread checks the stop flag, the deadline and the report timer.
const SUPERVISE_EVERY: Duration = Duration::from_millis(10);

/// A poll loop to start on an EAL worker: its lcore and what runs it.
type LoopJob<'a> = (u32, Box<dyn FnOnce() -> Lcore + Send + 'a>);

/// Where a poll loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// On its EAL worker lcore's thread (`rte_eal_remote_launch`), pinned by EAL.
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    Worker,
    /// On a thread of its own with the main thread's CPUs: the main lcore's when EAL runs.
    Thread,
}

/// Where the loop of `lcore` runs, and that said for the start-up log.
fn placement(opened: &OpenedPorts, lcore: u32, n_loops: usize) -> (Place, String) {
    #[cfg(feature = "dpdk")]
    if let Some(eal) = opened.eal() {
        let cpu = |id| {
            eal.lcore_cpu(id)
                .map_or_else(|| "?".into(), |c| c.to_string())
        };
        return match eal.lcore_role(lcore) {
            LcoreRole::Main => (
                Place::Thread,
                format!("CPU {} (EAL main lcore)", cpu(lcore)),
            ),
            LcoreRole::Worker => (
                Place::Worker,
                format!("CPU {} (EAL worker lcore)", cpu(lcore)),
            ),
            LcoreRole::Off => {
                let main = eal.main_lcore();
                if n_loops > 1 {
                    log::warn!(
                        "lcore {lcore} is not an EAL lcore (EAL -l/--lcores): its loop shares \
                         main lcore {main}'s CPU"
                    );
                }
                (
                    Place::Thread,
                    format!(
                        "CPU {} of main lcore {main} (lcore {lcore} is not in EAL's -l/--lcores)",
                        cpu(main)
                    ),
                )
            }
        };
    }
    let _ = (opened, lcore, n_loops);
    (Place::Thread, "not pinned (no EAL: no DPDK port)".into())
}

/// Runs the `workers` loops on their EAL worker lcores while `main` runs on this thread;
/// returns `main`'s value and each loop when all have returned.
fn run_loops<R>(
    opened: &OpenedPorts,
    workers: Vec<LoopJob<'_>>,
    main: impl FnOnce() -> R,
) -> Result<(R, Vec<Result<Lcore, CmdError>>), CmdError> {
    if workers.is_empty() {
        return Ok((main(), Vec::new()));
    }
    #[cfg(feature = "dpdk")]
    if let Some(eal) = opened.eal() {
        let jobs = workers
            .into_iter()
            .map(|(lcore, job)| WorkerJob {
                lcore,
                name: format!("lcore-{lcore}"),
                job,
            })
            .collect();
        let (r, loops) = eal
            .run_on_workers(jobs, main)
            .map_err(|e| CmdError::Runtime(format!("cannot start the poll loops: {e}")))?;
        let loops = loops
            .into_iter()
            .map(|l| l.map_err(|e| CmdError::Runtime(e.to_string())))
            .collect();
        return Ok((r, loops));
    }
    let _ = opened;
    Err(CmdError::Runtime(
        "poll loops for EAL workers but no EAL".into(),
    ))
}

/// Runs the poll loop of `lc` until the stop flag or the deadline, publishing its port
/// counters for the reports (and printing them, given the reporter and the port names).
fn drive(
    lc: &mut Lcore,
    stop: &AtomicBool,
    end: Option<Instant>,
    shared: &Mutex<Vec<PortStats>>,
    mut report: Option<(&mut RateReporter, &[String])>,
) -> StopReason {
    let mut last = clock::now();
    let ports = &lc.ports;
    let reason = lc.poll.run(stop, end, |l, now| match report.as_mut() {
        Some((reporter, names)) => {
            if reporter.due(now) {
                lc_publish(shared, ports, l);
                report_line(reporter, now, shared, names);
            }
        }
        // Fresh enough for the periodic reports, cheap for the loop.
        None => {
            if now.saturating_since(last) >= PUBLISH_EVERY {
                last = now;
                lc_publish(shared, ports, l);
            }
        }
    });
    lc_publish(shared, &lc.ports, &lc.poll);
    reason
}

/// Prints the periodic report line of the published counters, when due.
fn report_line(
    reporter: &mut RateReporter,
    now: Instant,
    shared: &Mutex<Vec<PortStats>>,
    names: &[String],
) {
    if !reporter.due(now) {
        return;
    }
    let stats = lock(shared).clone();
    let named: Vec<(&str, PortStats)> = names.iter().map(String::as_str).zip(stats).collect();
    if let Some(line) = reporter.poll(now, &named) {
        say!("{line}");
    }
}

/// The main thread's part while the loops run when none of them reports (all are on EAL
/// workers): the periodic reports, until the stop flag is set or the deadline passes.
fn supervise(
    stop: &AtomicBool,
    end: Option<Instant>,
    reporter: &mut RateReporter,
    shared: &Mutex<Vec<PortStats>>,
    names: &[String],
) -> StopReason {
    loop {
        let now = clock::now();
        if stop.load(Ordering::Relaxed) {
            return StopReason::Stopped;
        }
        if end.is_some_and(|e| now >= e) {
            return StopReason::Deadline;
        }
        report_line(reporter, now, shared, names);
        std::thread::sleep(SUPERVISE_EVERY);
    }
}

/// A thread that could not be started.
fn thread_error(e: std::io::Error) -> CmdError {
    CmdError::Runtime(format!("cannot start an lcore thread: {e}"))
}

/// Sets the stop flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One poll loop and the configuration indices of its ports.
struct Lcore {
    id: u32,
    poll: PollLoop<AnyPort, NoHandler>,
    ports: Vec<usize>,
}

/// Locks the shared stats, tolerating a poisoned lock (stats stay usable).
fn lock(m: &Mutex<Vec<PortStats>>) -> std::sync::MutexGuard<'_, Vec<PortStats>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Copies a loop's port counters into the shared table (indexed by configuration order).
fn lc_publish(shared: &Mutex<Vec<PortStats>>, idx: &[usize], l: &PollLoop<AnyPort, NoHandler>) {
    let mut g = lock(shared);
    for (k, p) in l.ports().iter().enumerate() {
        if let Some(slot) = idx.get(k).and_then(|&i| g.get_mut(i)) {
            *slot = p.stats();
        }
    }
}

/// `ns / n` as text, `-` when `n` is zero.
fn per_pkt(ns: u64, n: u64) -> String {
    ns.checked_div(n)
        .map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Frames per lcore (its ports' counters summed) and the total over every lcore.
fn lcore_table(loops: &[Lcore], secs: f64) -> Table {
    let mut t = Table::new(["lcore", "ports", "rx_pkts", "tx_pkts", "rx_pps", "tx_pps"]);
    let mut total = (0usize, 0u64, 0u64);
    let row = |t: &mut Table, id: String, n: usize, rx: u64, tx: u64| {
        t.row([
            id,
            n.to_string(),
            rx.to_string(),
            tx.to_string(),
            format!("{:.0}", rx as f64 / secs),
            format!("{:.0}", tx as f64 / secs),
        ]);
    };
    for lc in loops {
        let (rx, tx) = lc.poll.ports().iter().fold((0, 0), |(rx, tx), p| {
            let s = p.stats();
            (rx + s.rx_packets, tx + s.tx_packets)
        });
        let n = lc.poll.ports().len();
        row(&mut t, lc.id.to_string(), n, rx, tx);
        total = (total.0 + n, total.1 + rx, total.2 + tx);
    }
    row(&mut t, "total".into(), total.0, total.1, total.2);
    t
}

/// The end-of-run tables: port counters, poll loop counters, and faults if any.
fn summary(loops: &[Lcore], n_ports: usize, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mut ports = Table::new([
        "port", "backend", "lcore", "rx_pkts", "rx_bytes", "tx_pkts", "tx_bytes", "rx_drop",
        "tx_drop", "rx_err", "rx_pps", "tx_pps",
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
        "vlan_other",
        "arp_reply",
        "arp_fail",
        "nd_advert",
        "nd_fail",
        "nd_unsol",
        "dad_dup",
        "echo_reply",
        "unhandled",
        "tx_defer",
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
    // Rows in configuration order.
    let mut rows: Vec<Option<(u32, &AnyPort, LoopCounters)>> = vec![None; n_ports];
    for lc in loops {
        for (k, p) in lc.poll.ports().iter().enumerate() {
            if let Some(row) = lc.ports.get(k).and_then(|&i| rows.get_mut(i)) {
                *row = Some((lc.id, p, lc.poll.counters(k)));
            }
        }
    }
    for (lcore, p, c) in rows.into_iter().flatten() {
        let s = p.stats();
        let name = &p.info().name;
        ports.row([
            name.clone(),
            p.kind(),
            lcore.to_string(),
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
        let other = [
            FrameClass::OtherIpv4,
            FrameClass::Fragment,
            FrameClass::OtherEthertype,
            FrameClass::OtherIpv6,
            FrameClass::Ipv6Fragment,
            FrameClass::Ipv6ExtHeader,
            FrameClass::Ipv6Jumbogram,
        ]
        .map(|k| c.class(k))
        .iter()
        .sum::<u64>();
        lp.row([
            name.clone(),
            c.class(FrameClass::Arp).to_string(),
            (c.class(FrameClass::Icmp) + c.class(FrameClass::Icmpv6)).to_string(),
            c.class(FrameClass::Tcp).to_string(),
            c.class(FrameClass::Udp).to_string(),
            other.to_string(),
            c.class(FrameClass::NotForUs).to_string(),
            c.malformed().to_string(),
            c.class(FrameClass::OtherVlan).to_string(),
            c.arp_replies.to_string(),
            c.arp_failures.to_string(),
            c.nd_adverts.to_string(),
            c.nd_failures.to_string(),
            c.nd_unsolicited.to_string(),
            c.dad_conflicts.to_string(),
            c.echo_replies.to_string(),
            c.unhandled.to_string(),
            c.tx_deferred.to_string(),
            per_pkt(c.rx_ns, c.rx),
            per_pkt(c.process_ns, c.rx),
            per_pkt(c.tx_ns, c.tx),
        ]);
        if let (Some((rx, tx)), Some(fc)) = (p.fault_counters(), p.fault_config()) {
            let dirs = match fc.direction {
                Direction::Rx => vec![("rx", rx)],
                Direction::Tx => vec![("tx", tx)],
                Direction::Both => vec![("rx", rx), ("tx", tx)],
            };
            for (dir, f) in dirs {
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
    let mut out = format!(
        "\nports\n{ports}\npoll loop\n{lp}\nlcores\n{}",
        lcore_table(loops, secs)
    );
    if !faults.is_empty() {
        out.push_str(&format!("\nfaults\n{faults}"));
    }
    out
}
