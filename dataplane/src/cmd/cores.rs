//! `dataplane cores`: how long a cache line takes to travel from one CPU to another.
//!
//! Two threads, pinned to the two CPUs, take turns incrementing one counter in a cache
//! line of its own; each turn moves the line across, so half a round trip is the one-way
//! transfer. Which CPUs share a cache decides what every memif ring slot, descriptor and
//! shared counter costs between two lcores: on the project's 2-vCPU VM the host moves the
//! two vCPUs between cores that share an L3 (about 45 ns one way) and cores that do not
//! (about 180 ns), and the memif pair's rates and the raw-frame ping-pong follow (README,
//! "Performance"). The bench scripts print it with every round for that reason.

use std::num::ParseIntError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use super::common::CmdError;

/// Round trips timed together; the median over batches leaves out those a preemption hit.
const BATCH: u32 = 1_000;

/// A turn the other CPU has not taken by then ends the measurement with an error.
const TURN_LIMIT: Duration = Duration::from_secs(2);

/// Spins between two looks at the clock (or the stop flag) while waiting for a turn.
const SPINS_PER_CHECK: u32 = 1 << 12;

/// Arguments of `dataplane cores`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// CPUs to measure between, e.g. `0,1` or `0-3,6` (default: every CPU this process may
    /// run on). Every pair of them is measured.
    #[arg(long, value_name = "LIST", value_parser = parse_cpu_list)]
    cpus: Option<CpuList>,
    /// Round trips per pair (timed in batches of 1,000).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1_000..))]
    round_trips: u32,
}

/// CPUs named on the command line, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// One pair's one-way transfer time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairLatency {
    /// Median over the batches, nanoseconds.
    pub median_ns: f64,
    /// The fastest batch, nanoseconds.
    pub best_ns: f64,
}

/// The counter the two threads pass between them, alone in its cache lines (two, so the
/// adjacent-line prefetcher does not drag a neighbour along).
#[repr(align(128))]
#[derive(Default)]
struct Line(AtomicU64);

/// Parses a CPU list as Linux and EAL write them: numbers and ranges, comma-separated.
pub fn parse_cpu_list(s: &str) -> Result<CpuList, String> {
    let num = |t: &str| {
        t.trim()
            .parse::<usize>()
            .map_err(|e: ParseIntError| format!("'{t}' in the CPU list '{s}': {e}"))
    };
    let mut cpus = Vec::new();
    for part in s.split(',') {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (num(lo)?, num(hi)?);
                if lo > hi {
                    return Err(format!(
                        "range '{part}' in the CPU list '{s}' runs backwards"
                    ));
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(num(part)?),
        }
    }
    let mut sorted = cpus.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("CPU {} is listed twice in '{s}'", w[0]));
    }
    Ok(CpuList(cpus))
}

/// The CPUs this thread may run on.
fn allowed_cpus() -> Result<Vec<usize>, CmdError> {
    let set = sched_getaffinity(Pid::from_raw(0))
        .map_err(|e| CmdError::Runtime(format!("cannot read the CPU affinity: {e}")))?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) -> Result<(), String> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(|e| format!("CPU {cpu}: {e}"))?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))
}

/// Spins until `line` holds `want`; `false` when `give_up` says so first.
fn wait_for(line: &AtomicU64, want: u64, mut give_up: impl FnMut() -> bool) -> bool {
    let mut spins = 0u32;
    while line.load(Ordering::Acquire) != want {
        std::hint::spin_loop();
        spins += 1;
        if spins == SPINS_PER_CHECK {
            spins = 0;
            if give_up() {
                return false;
            }
            // Let a thread that shares this CPU (another pinned process) have its turn.
            std::thread::yield_now();
        }
    }
    true
}

/// Measures the one-way cache-line transfer between CPUs `a` and `b` over `round_trips`.
pub fn measure_pair(a: usize, b: usize, round_trips: u32) -> Result<PairLatency, CmdError> {
    let line = Arc::new(Line::default());
    let stop = Arc::new(AtomicBool::new(false));
    let batches = (round_trips / BATCH).max(1);
    let total = u64::from(batches * BATCH);

    let answerer = {
        let (line, stop) = (line.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("cores-{b}"))
            .spawn(move || -> Result<(), String> {
                pin(b)?;
                for k in 0..total {
                    if !wait_for(&line.0, 2 * k + 1, || stop.load(Ordering::Relaxed)) {
                        return Ok(());
                    }
                    line.0.store(2 * k + 2, Ordering::Release);
                }
                Ok(())
            })
            .map_err(|e| CmdError::Runtime(format!("cannot start a thread: {e}")))?
    };
    let asker = {
        let (line, stop) = (line.clone(), stop.clone());
        std::thread::Builder::new()
            .name(format!("cores-{a}"))
            .spawn(move || -> Result<Vec<f64>, String> {
                let result = ask(&line.0, a, b, batches);
                stop.store(true, Ordering::Relaxed);
                result
            })
            .map_err(|e| CmdError::Runtime(format!("cannot start a thread: {e}")))?
    };
    let asked = asker.join();
    stop.store(true, Ordering::Relaxed);
    let answered = answerer.join();
    let thread_died = || CmdError::Runtime("a measuring thread panicked".into());
    answered
        .map_err(|_| thread_died())?
        .map_err(CmdError::Runtime)?;
    let mut per_batch = asked
        .map_err(|_| thread_died())?
        .map_err(CmdError::Runtime)?;
    per_batch.sort_by(f64::total_cmp);
    Ok(PairLatency {
        median_ns: per_batch[per_batch.len() / 2],
        best_ns: per_batch[0],
    })
}

/// The asking side: `batches` batches of round trips from `a`, each timed; one-way
/// nanoseconds per batch.
fn ask(line: &AtomicU64, a: usize, b: usize, batches: u32) -> Result<Vec<f64>, String> {
    pin(a)?;
    let mut per_batch = Vec::with_capacity(batches as usize);
    let mut k = 0u64;
    for _ in 0..batches {
        let start = Instant::now();
        for _ in 0..BATCH {
            line.store(2 * k + 1, Ordering::Release);
            let turn = Instant::now();
            if !wait_for(line, 2 * k + 2, || turn.elapsed() > TURN_LIMIT) {
                return Err(format!(
                    "CPU {b} did not answer within {} s (is it running something else \
                     pinned at a higher priority?)",
                    TURN_LIMIT.as_secs()
                ));
            }
            k += 1;
        }
        per_batch.push(start.elapsed().as_nanos() as f64 / f64::from(BATCH) / 2.0);
    }
    Ok(per_batch)
}

/// Runs `dataplane cores`.
pub fn run(args: Args) -> Result<(), CmdError> {
    let allowed = allowed_cpus()?;
    let cpus = match args.cpus {
        Some(CpuList(cpus)) => {
            if let Some(c) = cpus.iter().find(|c| !allowed.contains(c)) {
                return Err(CmdError::Usage(format!(
                    "CPU {c} is not among the CPUs this process may run on ({})",
                    list(&allowed)
                )));
            }
            cpus
        }
        None => allowed,
    };
    if cpus.len() < 2 {
        return Err(CmdError::Usage(format!(
            "core-to-core latency needs two CPUs or more, got {}",
            list(&cpus)
        )));
    }
    let mut medians = Vec::new();
    for (i, &a) in cpus.iter().enumerate() {
        for &b in &cpus[i + 1..] {
            let p = measure_pair(a, b, args.round_trips)?;
            println!(
                "cpu {a} <-> cpu {b}: {:.0} ns one way (median of {} batches; fastest {:.0} ns)",
                p.median_ns,
                (args.round_trips / BATCH).max(1),
                p.best_ns
            );
            medians.push(p.median_ns);
        }
    }
    medians.sort_by(f64::total_cmp);
    let (lo, hi) = (medians[0], medians[medians.len() - 1]);
    if medians.len() > 1 {
        println!(
            "core-to-core-ns: {:.0} (pairs {lo:.0}-{hi:.0})",
            medians[medians.len() / 2]
        );
    } else {
        println!("core-to-core-ns: {lo:.0}");
    }
    Ok(())
}

/// A CPU list for messages.
fn list(cpus: &[usize]) -> String {
    let v: Vec<String> = cpus.iter().map(ToString::to_string).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_linux_writes_them() {
        assert_eq!(parse_cpu_list("0,1"), Ok(CpuList(vec![0, 1])));
        assert_eq!(parse_cpu_list("0-3,6"), Ok(CpuList(vec![0, 1, 2, 3, 6])));
        assert_eq!(parse_cpu_list("5"), Ok(CpuList(vec![5])));
        assert!(parse_cpu_list("3-1").unwrap_err().contains("backwards"));
        assert!(parse_cpu_list("0,x").unwrap_err().contains("'x'"));
        assert!(parse_cpu_list("0-2,1")
            .unwrap_err()
            .contains("CPU 1 is listed twice"));
        assert!(parse_cpu_list("").is_err());
    }

    #[test]
    fn the_command_line_reaches_the_arguments() {
        use crate::cmd::{Cli, Command};
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "dataplane",
            "cores",
            "--cpus",
            "0-1,3",
            "--round-trips",
            "5000",
        ])
        .unwrap();
        let Command::Cores(args) = cli.command else {
            panic!("not the cores command: {cli:?}");
        };
        assert_eq!(args.cpus, Some(CpuList(vec![0, 1, 3])));
        assert_eq!(args.round_trips, 5_000);
        let err = Cli::try_parse_from(["dataplane", "cores", "--round-trips", "10"]).unwrap_err();
        assert!(err.to_string().contains("10"), "{err}");
    }

    #[test]
    fn a_pair_of_allowed_cpus_gives_a_positive_latency() {
        let cpus = allowed_cpus().unwrap();
        // With one CPU the two threads take turns on it (the waits yield): slow, still a
        // transfer of the line between two threads.
        let (a, b) = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
        let p = measure_pair(a, b, 2_000).unwrap();
        assert!(p.best_ns > 0.0 && p.best_ns <= p.median_ns, "{p:?}");
        assert!(p.median_ns < 1e7, "{p:?}");
    }

    #[test]
    fn a_cpu_outside_the_affinity_is_refused() {
        let allowed = allowed_cpus().unwrap();
        let outside = allowed.iter().max().unwrap() + 1;
        let err = run(Args {
            cpus: Some(CpuList(vec![allowed[0], outside])),
            round_trips: 1_000,
        })
        .unwrap_err();
        assert!(err.to_string().contains("not among the CPUs"), "{err}");
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn one_cpu_is_not_a_pair() {
        let allowed = allowed_cpus().unwrap();
        let err = run(Args {
            cpus: Some(CpuList(vec![allowed[0]])),
            round_trips: 1_000,
        })
        .unwrap_err();
        assert!(err.to_string().contains("two CPUs or more"), "{err}");
    }
}
