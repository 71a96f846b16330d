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
    let opened = args.ports.open(&cfg)?;
    let mut ports = opened.ports;
    let _idle = ports.split_off(used);
    for p in &ports {
        say!("port {} ({}): {}", p.info().name, p.kind(), p.info());
    }
    say!(
        "forwarding ({:?}, burst {}); Ctrl-C stops",
        args.mode,
        args.burst
    );
    let run = Run {
        mode: args.mode,
        burst: usize::from(args.burst),
        stop: &stop,
        deadline: deadline(args.duration),
        interval: args.stats_interval,
    };
    let kinds: Vec<String> = ports.iter().map(|p| p.kind()).collect();
    let (names, stats, dirs, elapsed) = if kinds.iter().all(|k| k == "soft") {
        run.forward(&mut concrete(ports, |b| match b {
            Backend::Soft(s) => Some(s),
            _ => None,
        }))
    } else {
        fast_or_any(run, ports, &kinds)
    };
    say!("stopped after {:.2}s", elapsed.as_secs_f64());
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mut t = Table::new([
        "port", "rx_pkts", "tx_pkts", "rx_drop", "tx_drop", "fwd_from", "fwd_drop", "rx_Mpps",
        "tx_Mpps",
    ]);
    for (i, (n, s)) in names.iter().zip(&stats).enumerate() {
        t.row([
            n.clone(),
            s.rx_packets.to_string(),
            s.tx_packets.to_string(),
            s.rx_dropped.to_string(),
            s.tx_dropped.to_string(),
            dirs[i].forwarded.to_string(),
            dirs[i].dropped.to_string(),
            format!("{:.3}", s.rx_packets as f64 / secs / 1e6),
            format!("{:.3}", s.tx_packets as f64 / secs / 1e6),
        ]);
    }
    say!(
        "
{}",
        t.to_string().trim_end()
    );
    Ok(())
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
    use dataplane::port::soft_pair::soft_pair;
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
