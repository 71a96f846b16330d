//! `dataplane run` pins each poll loop to the CPU of its lcore (issue #17): with two
//! `net_null` ports on lcores 0 and 1 (EAL `-l 0-1`), the thread `lcore-0` may run on CPU 0
//! only and `lcore-1` on CPU 1 only, and no idle EAL worker is left holding CPU 1. Read
//! from `/proc/<pid>/task/*/{comm,status}` of the running process.

#![cfg(feature = "dpdk")]

mod dpdk_common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dataplane::dpdk::eal::hugepages_available;
use dpdk_common::two_process::KillOnDrop;

/// Set when this machine is known to have fewer than two CPUs: the test is then skipped
/// (with a message) instead of failing.
const FEW_CPUS_ENV: &str = "DATAPLANE_TEST_FEW_CPUS";

/// Each thread of process `pid`: its name (`comm`) and `Cpus_allowed_list`, by thread id.
fn threads(pid: u32) -> BTreeMap<u32, (String, String)> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap_or_default();
        out.insert(tid, (comm.trim().to_string(), cpus.trim().to_string()));
    }
    out
}

/// The CPU lists of the threads named `name`.
fn cpus_of<'a>(threads: &'a BTreeMap<u32, (String, String)>, name: &str) -> Vec<&'a str> {
    threads
        .values()
        .filter(|(comm, _)| comm == name)
        .map(|(_, cpus)| cpus.as_str())
        .collect()
}

/// Whether this machine has the two CPUs a test of `what` needs: panics without them,
/// unless [`FEW_CPUS_ENV`] is set (then `false`, with a message).
fn two_cpus(what: &str) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus >= 2 {
        return true;
    }
    if std::env::var_os(FEW_CPUS_ENV).is_some() {
        eprintln!("skipped: {cpus} CPU available, {what} need two ({FEW_CPUS_ENV} set)");
        return false;
    }
    panic!("{cpus} CPU available: this test needs two (set {FEW_CPUS_ENV}=1 to skip it)");
}

/// The EAL memory arguments of a test config (TOML list items): `-m MB`, without hugepages
/// when none are reserved.
fn eal_memory(mb: u32) -> String {
    if hugepages_available() {
        format!(r#""-m", "{mb}""#)
    } else {
        format!(r#""--no-huge", "-m", "{mb}""#)
    }
}

/// Starts `dataplane run` with `cfg` (its output in pipes: little, it stays there until
/// the process exits) and waits, at most 30 s, until its threads satisfy `ready`, named
/// in the failure; returns the process and those threads.
fn run_until(
    cfg: &Path,
    what: &str,
    ready: impl Fn(&BTreeMap<u32, (String, String)>) -> bool,
) -> (KillOnDrop, BTreeMap<u32, (String, String)>) {
    let child = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["run", "--config", cfg.to_str().unwrap()])
        .args(["--duration", "60", "--stats-interval", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let pid = child.0.id();
    let started = Instant::now();
    loop {
        let seen = threads(pid);
        if ready(&seen) {
            return (child, seen);
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("dataplane run exited early ({status}); threads {seen:?}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no {what} after 30 s: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn run_pins_each_poll_loop_to_its_lcores_cpu() {
    if !two_cpus("two lcores") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let memory = eal_memory(256);
    let cfg = dir.path().join("two-lcores.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"[eal]
lcores = "0-1"
args = [{memory}, "--no-pci", "--no-telemetry", "--vdev", "net_null0", "--vdev", "net_null1"]

[[ports]]
name = "null0"
backend = "dpdk"
device = "net_null0"
lcore = 0

[[ports]]
name = "null1"
backend = "dpdk"
device = "net_null1"
lcore = 1
"#
        ),
    )
    .unwrap();
    // Both loops are up once both threads carry their names.
    let (mut child, seen) = run_until(&cfg, "lcore-0 and lcore-1 threads", |seen| {
        let named = |n| seen.values().any(|(comm, _)| comm == n);
        named("lcore-0") && named("lcore-1")
    });
    let pid = child.0.id();
    let mut stdout_pipe = child.0.stdout.take().unwrap();
    let mut stderr_pipe = child.0.stderr.take().unwrap();
    assert_eq!(cpus_of(&seen, "lcore-0"), ["0"], "threads: {seen:?}");
    assert_eq!(cpus_of(&seen, "lcore-1"), ["1"], "threads: {seen:?}");
    // The loop of lcore 1 is EAL's worker of lcore 1: no idle worker holds CPU 1.
    let on_cpu1: Vec<&str> = seen
        .values()
        .filter(|(_, cpus)| cpus == "1")
        .map(|(comm, _)| comm.as_str())
        .collect();
    assert_eq!(on_cpu1, ["lcore-1"], "threads: {seen:?}");
    assert!(
        !seen
            .values()
            .any(|(comm, _)| comm.starts_with("rte-worker")),
        "threads: {seen:?}"
    );

    let kill = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "no exit 30 s after SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    stdout_pipe.read_to_string(&mut stdout).unwrap();
    stderr_pipe.read_to_string(&mut stderr).unwrap();
    assert!(status.success(), "{status}\n{stdout}\n{stderr}");
    // The mapping is logged at start, and both loops polled their port.
    assert!(
        stdout.contains("lcore 0: CPU 0 (EAL main lcore)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("lcore 1: CPU 1 (EAL worker lcore)"),
        "{stdout}"
    );
    assert!(stdout.contains("stopped after"), "{stdout}");
    for port in ["null0", "null1"] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(port) && l.contains("dpdk"))
            .unwrap_or_else(|| panic!("no {port} row: {stdout}"));
        let rx: u64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert!(rx > 0, "{port} received nothing: {row}");
    }
}

/// The CPUs of EAL's interrupt thread in `dataplane run` on lcore 1 (one `net_null` port),
/// with `[eal] control_threads` set to `mode`, read while the loop runs; and every thread
/// of the process with its CPUs.
fn interrupt_thread_cpus(mode: &str) -> (String, BTreeMap<u32, (String, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let memory = eal_memory(128);
    let cfg = dir.path().join("lcore-1.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"[eal]
lcores = "1"
control_threads = "{mode}"
args = [{memory}, "--no-pci", "--in-memory", "--vdev", "net_null0"]

[[ports]]
name = "null0"
backend = "dpdk"
device = "net_null0"
"#
        ),
    )
    .unwrap();
    let (_child, seen) = run_until(&cfg, "poll loop and eal-intr-thread", |seen| {
        let named = |p: &str| seen.values().any(|(comm, _)| comm.starts_with(p));
        named("lcore-") && named("eal-intr-thread")
    });
    let cpus = cpus_of(&seen, "eal-intr-thread").concat();
    (cpus, seen)
}

/// `[eal] control_threads`: DPDK's own choice ("spare") leaves EAL's interrupt thread off
/// the lcore's CPU (on the start-up CPUs no lcore uses, here CPU 0, which another process
/// may be polling); "main-lcore" moves it, and EAL's other control threads, onto CPU 1 with
/// the loop.
#[test]
fn control_threads_follow_the_main_lcore_when_asked() {
    if !two_cpus("lcore 1 and a spare CPU") {
        return;
    }
    let (spare, seen) = interrupt_thread_cpus("spare");
    assert!(!spare.is_empty() && spare != "1", "threads: {seen:?}");
    let (own, seen) = interrupt_thread_cpus("main-lcore");
    assert_eq!(own, "1", "threads: {seen:?}");
    // Every thread but EAL's idle workers (none here: one lcore) is on CPU 1.
    for (comm, cpus) in seen.values() {
        assert_eq!(cpus, "1", "{comm}: threads {seen:?}");
    }
}
