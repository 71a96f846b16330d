//! `dataplane fwd`: forward frames between two ports, or from one port back to itself, in
//! testpmd's `io` (unchanged) or `macswap` (Ethernet addresses swapped) mode.
//!
//! When every port is a plain DPDK port (or every port a plain soft port), the loop runs
//! monomorphised on the concrete port type; otherwise on [`AnyPort`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dataplane::clock::{self, Instant};

use dataplane::port::{AnyPort, Backend, Port, PortStats};
use dataplane::say;
use dataplane::stats::{RateReporter, Table};

use dataplane::runtime::LaneJob;

use super::common::{deadline, parse_secs, stop_flag, CmdError, PortArgs};

/// Forwarding mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Forward frames unchanged.
    Io,
    /// Swap source and destination MAC before forwarding.
    Macswap,
}

/// Arguments of `fwd`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The ports (one or two).
    #[command(flatten)]
    pub ports: PortArgs,
    /// Forwarding mode.
    #[arg(long, value_enum, default_value = "io")]
    pub mode: Mode,
    /// Frames per burst.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=512))]
    pub burst: u16,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long, short = 'd', value_name = "SECS", value_parser = parse_secs)]
    pub duration: Option<Duration>,
    /// Seconds between statistics lines (0: none).
    #[arg(long, value_name = "SECS", value_parser = parse_secs, default_value = "1")]
    pub stats_interval: Duration,
}

/// Counters of one forwarding direction.
#[derive(Clone, Copy, Debug, Default)]
struct DirCounters {
    forwarded: u64,
    dropped: u64,
}

/// Runs `dataplane fwd`.
pub fn run(args: Args) -> Result<(), CmdError> {
    let mut cfg = args.ports.config()?;
    // A forwarder passes frames as they came: the device neither checksums nor segments.
    for p in &mut cfg.ports {
        p.offloads = dataplane::config::OffloadMode::Off;
    }
    // The ports named with --port come first; a soft link's other end may follow (opened
    // so the link has two ends, but not forwarded from).
    let used = if args.ports.ports.is_empty() {
        cfg.ports.len()
    } else {
        args.ports.ports.len()
    };
    if !(1..=2).contains(&used) {
        return Err(CmdError::Usage(format!(
            "fwd needs one or two ports, got {used} (pick them with --port)"
        )));
    }
    let stop = stop_flag()?;
    let mut opened = args.ports.open_lanes(&cfg)?;
    // Lane k forwards between queue k of the ports, on an lcore of its own.
    let mut lanes = vec![std::mem::take(&mut opened.ports)];
    lanes.append(&mut opened.lanes);
    let _idle: Vec<Vec<AnyPort>> = lanes.iter_mut().map(|l| l.split_off(used)).collect();
    for p in lanes.iter().flatten() {
        say!("port {} ({}): {}", p.info().name, p.kind(), p.info());
    }
    let n_lanes = lanes.len();
    say!(
        "forwarding ({:?}, burst {}{}); Ctrl-C stops",
        args.mode,
        args.burst,
        if n_lanes > 1 {
            format!(", {n_lanes} lanes")
        } else {
            String::new()
        }
    );
    let run = Run {
        mode: args.mode,
        burst: usize::from(args.burst),
        stop: &stop,
        deadline: deadline(args.duration),
        interval: args.stats_interval,
    };
    let (outcomes, places) = opened.run_lanes(lane_jobs(run, lanes, forward_any))?;
    let elapsed = outcomes.iter().map(|o| o.3).max().unwrap_or(Duration::ZERO);
    say!("stopped after {:.2}s", elapsed.as_secs_f64());
    if n_lanes > 1 {
        for (k, (o, place)) in outcomes.iter().zip(&places).enumerate() {
            say!("lane-{k} ({place}): {}", o.0.join(" "));
        }
    }
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mut t = Table::new([
        "port", "rx_pkts", "tx_pkts", "rx_drop", "tx_drop", "fwd_from", "fwd_drop", "rx_Mpps",
        "tx_Mpps",
    ]);
    let row = |t: &mut Table, name: String, s: &PortStats, d: &DirCounters| {
        t.row([
            name,
            s.rx_packets.to_string(),
            s.tx_packets.to_string(),
            s.rx_dropped.to_string(),
            s.tx_dropped.to_string(),
            d.forwarded.to_string(),
            d.dropped.to_string(),
            format!("{:.3}", s.rx_packets as f64 / secs / 1e6),
            format!("{:.3}", s.tx_packets as f64 / secs / 1e6),
        ]);
    };
    let (mut total_s, mut total_d) = (PortStats::default(), DirCounters::default());
    for (names, stats, dirs, _) in &outcomes {
        for ((n, s), d) in names.iter().zip(stats).zip(dirs) {
            row(&mut t, n.clone(), s, d);
            total_s.rx_packets += s.rx_packets;
            total_s.tx_packets += s.tx_packets;
            total_s.rx_dropped += s.rx_dropped;
            total_s.tx_dropped += s.tx_dropped;
            total_d.forwarded += d.forwarded;
            total_d.dropped += d.dropped;
        }
    }
    if n_lanes > 1 {
        row(&mut t, "total".into(), &total_s, &total_d);
    }
    say!(
        "
{}",
        t.to_string().trim_end()
    );
    Ok(())
}

/// One job per lane: lane `k` forwards between its ports (queue `k` of each port) with
/// `forward`; lane 0 prints the periodic rate lines.
fn lane_jobs<'a, P: Send + 'a>(
    run: Run<'a>,
    lanes: Vec<Vec<P>>,
    forward: fn(Run<'_>, Vec<P>) -> Outcome,
) -> Vec<LaneJob<'a, Outcome>> {
    lanes
        .into_iter()
        .enumerate()
        .map(|(k, ports)| {
            let run = Run {
                interval: if k == 0 { run.interval } else { Duration::ZERO },
                ..run
            };
            Box::new(move || forward(run, ports)) as LaneJob<'a, Outcome>
        })
        .collect()
}

/// Forwards between `ports`, on a loop monomorphised for their backend when they share one.
fn forward_any(run: Run<'_>, ports: Vec<AnyPort>) -> Outcome {
    let kinds: Vec<String> = ports.iter().map(|p| p.kind()).collect();
    if kinds.iter().all(|k| k == "soft") {
        return run.forward(&mut concrete(ports, |b| match b {
            Backend::Soft(s) => Some(s),
            _ => None,
        }));
    }
    fast_or_any(run, ports, &kinds)
}

#[cfg(feature = "dpdk")]
fn fast_or_any(run: Run<'_>, ports: Vec<AnyPort>, kinds: &[String]) -> Outcome {
    if kinds.iter().all(|k| k == "dpdk") {
        return run.forward(&mut concrete(ports, |b| match b {
            Backend::Dpdk(d) => Some(d),
            _ => None,
        }));
    }
    let mut ports = ports;
    run.forward(&mut ports)
}

#[cfg(not(feature = "dpdk"))]
fn fast_or_any(run: Run<'_>, mut ports: Vec<AnyPort>, _kinds: &[String]) -> Outcome {
    run.forward(&mut ports)
}

/// The concrete ports inside `ports` that `pick` takes (all of them, when they are of one
/// backend).
fn concrete<T>(ports: Vec<AnyPort>, pick: fn(Backend) -> Option<T>) -> Vec<T> {
    ports
        .into_iter()
        .filter_map(|p| pick(p.into_backend()))
        .collect()
}

/// Port names, final port counters, per-port forwarding counters (frames received on the
/// port and forwarded), and run time.
type Outcome = (Vec<String>, Vec<PortStats>, Vec<DirCounters>, Duration);

#[derive(Clone, Copy)]
struct Run<'a> {
    mode: Mode,
    burst: usize,
    stop: &'a AtomicBool,
    deadline: Option<Instant>,
    interval: Duration,
}

impl Run<'_> {
    fn forward<P: Port>(&self, ports: &mut [P]) -> Outcome {
        let n = ports.len();
        let mut dirs = vec![DirCounters::default(); n];
        let mut bufs: Vec<P::Buf> = Vec::with_capacity(self.burst);
        let start = clock::now();
        let mut reporter = RateReporter::new(self.interval, start, n);
        let mut iter: u32 = 0;
        loop {
            iter = iter.wrapping_add(1);
            if iter.is_multiple_of(1024) {
                let now = clock::now();
                if self.stop.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| now >= d) {
                    break;
                }
                if let Some(line) = reporter.poll_ports(now, ports) {
                    say!("{line}");
                }
            }
            for from in 0..n {
                let to = (from + 1) % n;
                if ports[from].rx_burst(&mut bufs, self.burst) == 0 {
                    continue;
                }
                if self.mode == Mode::Macswap {
                    for b in bufs.iter_mut() {
                        swap_macs(b.as_mut());
                    }
                }
                let offered = bufs.len() as u64;
                ports[to].tx_burst(&mut bufs);
                let refused = bufs.len() as u64;
                dirs[from].forwarded += offered - refused;
                dirs[from].dropped += refused;
                bufs.clear();
            }
        }
        let elapsed = clock::elapsed(start);
        let names = ports.iter().map(|p| p.info().name.clone()).collect();
        let stats = ports.iter().map(|p| p.stats()).collect();
        (names, stats, dirs, elapsed)
    }
}

/// Swaps the destination and source MAC of an Ethernet frame (shorter frames unchanged).
fn swap_macs(frame: &mut [u8]) {
    if frame.len() >= 12 {
        let (dst, rest) = frame.split_at_mut(6);
        dst.swap_with_slice(&mut rest[..6]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::port::soft_pair::{soft_pair, SoftPort};
    use dataplane::port::PortInfo;

    #[test]
    fn macswap_swaps_addresses() {
        let mut f: Vec<u8> = (0..20).collect();
        swap_macs(&mut f);
        assert_eq!(&f[..12], &[6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5]);
        assert_eq!(&f[12..], &[12, 13, 14, 15, 16, 17, 18, 19]);
        let mut short = vec![1, 2, 3];
        swap_macs(&mut short);
        assert_eq!(short, vec![1, 2, 3]);
    }

    // Two lanes, each forwarding between its own queue of ports `a` and `b` on a thread of
    // its own: each lane forwards exactly the frames sent on its queue.
    #[test]
    fn lanes_forward_their_own_queues() {
        let info = |n: &str, m| PortInfo {
            name: n.into(),
            mac: [2, 0, 0, 0, 0, m],
            mtu: 1500,
        };
        let mut gens = Vec::new();
        let mut sinks = Vec::new();
        let mut lanes = Vec::new();
        for lane in 0..2u8 {
            let (mut gen, a) = soft_pair(info("gen", 1), info(&format!("a.q{lane}"), 2), 256);
            let (b, sink) = soft_pair(info(&format!("b.q{lane}"), 3), info("sink", 4), 256);
            let count = 40 + 20 * usize::from(lane);
            let mut frames: Vec<_> = (0..count)
                .map(|i| {
                    let mut f = gen.alloc_tx(64).unwrap();
                    f.as_mut().fill(lane);
                    f.as_mut()[20] = i as u8;
                    f
                })
                .collect();
            assert_eq!(gen.tx_burst(&mut frames), count);
            gens.push(gen);
            sinks.push(sink);
            lanes.push(vec![a, b]);
        }
        let stop = AtomicBool::new(false);
        let run = Run {
            mode: Mode::Io,
            burst: 32,
            stop: &stop,
            deadline: Some(clock::now() + Duration::from_millis(100)),
            interval: Duration::ZERO,
        };
        let jobs = lane_jobs(run, lanes, |run, mut ports: Vec<SoftPort>| {
            run.forward(&mut ports)
        });
        let outcomes: Vec<Outcome> = std::thread::scope(|s| {
            let handles: Vec<_> = jobs.into_iter().map(|j| s.spawn(j)).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (lane, (o, sink)) in outcomes.iter().zip(&mut sinks).enumerate() {
            let count = 40 + 20 * lane as u64;
            assert_eq!(o.0, [format!("a.q{lane}"), format!("b.q{lane}")]);
            assert_eq!((o.2[0].forwarded, o.2[1].forwarded), (count, 0));
            let mut got = Vec::new();
            while sink.rx_burst(&mut got, 64) > 0 {}
            assert_eq!(got.len() as u64, count);
            assert!(got
                .iter()
                .enumerate()
                .all(|(i, f)| { f.as_ref()[0] == lane as u8 && f.as_ref()[20] == i as u8 }));
        }
    }

    #[test]
    fn forwards_between_two_ports() {
        let info = |n: &str, m| PortInfo {
            name: n.into(),
            mac: [2, 0, 0, 0, 0, m],
            mtu: 1500,
        };
        // gen <-> a (fwd) b <-> sink
        let (mut gen, a) = soft_pair(info("gen", 1), info("a", 2), 256);
        let (b, mut sink) = soft_pair(info("b", 3), info("sink", 4), 256);
        let mut frames: Vec<_> = (0..100u8)
            .map(|i| {
                let mut f = gen.alloc_tx(64).unwrap();
                f.as_mut().fill(i);
                f
            })
            .collect();
        assert_eq!(gen.tx_burst(&mut frames), 100);
        let stop = AtomicBool::new(false);
        let run = Run {
            mode: Mode::Macswap,
            burst: 32,
            stop: &stop,
            deadline: Some(clock::now() + Duration::from_millis(50)),
            interval: Duration::ZERO,
        };
        let (_, stats, dirs, _) = run.forward(&mut [a, b]);
        assert_eq!(dirs[0].forwarded, 100);
        assert_eq!(stats[1].tx_packets, 100);
        let mut got = Vec::new();
        while sink.rx_burst(&mut got, 64) > 0 {}
        assert_eq!(got.len(), 100);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, f)| f.as_ref()[20] == i as u8));
    }
}
