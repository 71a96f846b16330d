//! Stopping the RDMA tools with SIGTERM in the middle of a transfer (issue #20): the
//! signalled process stops cleanly and exits with 128 + 15; its outstanding work requests
//! complete with the flush status (counted in its `stop-flushed-completions` line); its
//! connections close (a Terminate while work was outstanding), so the peer does not wait;
//! and neither its DPDK runtime directory nor any hugepage file is left behind. A second
//! signal exits at once, with the same cleanup.

#![cfg(feature = "dpdk")]

mod dpdk_common;

use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use dpdk_common::two_process::{counter, KillOnDrop, Link};

/// One pair of busy-polling processes at a time: the cases share two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// With enough free hugepages and hugetlbfs mounted, DPDK and registered memory use
/// hugepages (so the test sees that no hugepage file is left); else the heap.
fn memory_args() -> (Vec<&'static str>, Vec<&'static str>) {
    let free: u64 =
        std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
    let mounted = std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
    });
    if free >= 300 && mounted {
        (vec!["-m", "128"], vec![])
    } else {
        (vec![], vec!["--heap"])
    }
}

/// Hugetlbfs mount points.
fn hugetlbfs_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

/// Asserts that process `pid` with EAL file prefix `prefix` left nothing: no runtime
/// directory, no DPDK hugepage file, no registered-memory file.
fn assert_nothing_left(prefix: &str, pid: u32) {
    for base in ["/var/run/dpdk", "/tmp/dpdk"] {
        let dir = Path::new(base).join(prefix);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    for mount in hugetlbfs_mounts() {
        let left: Vec<String> = std::fs::read_dir(&mount)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| {
                        n.starts_with(prefix) || n.starts_with(&format!("iwarp-mem-{pid}-"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "hugepage files left in {mount}: {left:?}");
    }
}

/// `dataplane ARGS --config CONFIG` with stdout and stderr in files of the link's directory.
fn spawn(link: &Link, name: &str, args: &[&str], config: &str) -> KillOnDrop {
    let file =
        |ext: &str| std::fs::File::create(link.dir.path().join(format!("{name}.{ext}"))).unwrap();
    KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_dataplane"))
            .args(args)
            .args(["--config", config])
            .stdout(file("out"))
            .stderr(file("err"))
            .spawn()
            .unwrap(),
    )
}

fn read(link: &Link, name: &str, ext: &str) -> String {
    std::fs::read_to_string(link.dir.path().join(format!("{name}.{ext}"))).unwrap_or_default()
}

/// Waits until `name`'s standard output contains `what` (the process must still run).
fn wait_for(link: &Link, name: &str, child: &mut Child, what: &str) {
    let end = Instant::now() + Duration::from_secs(20);
    while !read(link, name, "out").contains(what) {
        if let Ok(Some(s)) = child.try_wait() {
            panic!(
                "{name} exited ({s}) before {what:?}: {}\n{}",
                read(link, name, "out"),
                read(link, name, "err")
            );
        }
        assert!(
            Instant::now() < end,
            "{name}: no {what:?} in {}",
            read(link, name, "out")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

fn wait(child: &mut Child, secs: u64) -> ExitStatus {
    wait_or(child, secs, String::new)
}

/// [`wait`], with `what()` (the process's output) in the failure message.
fn wait_or(child: &mut Child, secs: u64, what: impl Fn() -> String) -> ExitStatus {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            Instant::now() < end,
            "still running after {secs} s: {}",
            what()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `server` then `client` over a fresh memif link, waits until `client` prints
/// `running`, sends SIGTERM to the one `victim` names ("client" or "server") and checks its
/// stop; the other one must end too (by itself, or after a SIGTERM of its own when it
/// serves forever). Returns the victim's output.
fn sigterm_mid_transfer(
    tag: &str,
    server: &[&str],
    client: &[&str],
    running: &str,
    victim: &str,
) -> String {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (eal, heap) = memory_args();
    let link = Link::memif_with(tag, Some(["10.96.7.1", "10.96.7.2"]), &eal);
    let mut sargs = server.to_vec();
    sargs.extend(&heap);
    sargs.extend(["--time-limit", "60"]);
    let mut cargs = client.to_vec();
    cargs.extend(&heap);
    cargs.extend(["--time-limit", "60"]);
    let mut srv = spawn(&link, "server", &sargs, &link.server);
    wait_for(&link, "server", &mut srv.0, "listening");
    let mut cli = spawn(&link, "client", &cargs, &link.client);
    wait_for(&link, "client", &mut cli.0, running);
    std::thread::sleep(Duration::from_millis(500));
    let (victim_child, other_child) = if victim == "client" {
        (&mut cli, &mut srv)
    } else {
        (&mut srv, &mut cli)
    };
    signal(&victim_child.0, "-TERM");
    let status = wait(&mut victim_child.0, 15);
    let out = read(&link, victim, "out");
    let err = read(&link, victim, "err");
    assert_eq!(status.code(), Some(143), "{victim}: {out}\n{err}");
    assert!(err.contains("stopped by SIGTERM"), "{err}");
    let flushed = counter(&out, "stop-flushed-completions");
    assert!(flushed > 0, "{victim}: nothing flushed:\n{out}");
    let closed = counter(&out, "stop-connections-graceful")
        + counter(&out, "stop-connections-terminated")
        + counter(&out, "stop-connections-aborted");
    assert!(closed > 0, "{out}");
    // The peer learns that the connections ended: it stops by itself (it may call the run
    // a failure), well before its time limit.
    let other = if victim == "client" {
        "server"
    } else {
        "client"
    };
    let ostatus = wait_or(&mut other_child.0, 15, || {
        format!(
            "{other}: {}\n{}\n{victim}: {out}\n{err}",
            read(&link, other, "out"),
            read(&link, other, "err")
        )
    });
    assert!(ostatus.code().is_some(), "{other} killed: {ostatus}");
    // RFC 5040 §6.2.1: a terminated connection closes its stream gracefully after the
    // Terminate, so the Terminate reaches the peer (one aborted after the grace period
    // may lose it). A peer that fails at the first Terminate terminates its other
    // connections itself (soak does), and one that arrives on a connection already
    // terminated there is not counted again (RFC 5040 §5.4: no answer, the stream is
    // stopped): each of the victim's Terminates was received, or crossed the peer's own.
    let terminated = counter(&out, "stop-connections-terminated");
    if terminated > 0 && counter(&out, "stop-connections-aborted") == 0 {
        let oout = read(&link, other, "out");
        let received = counter(&oout, "rdma-terminates-received");
        let crossed = counter(&oout, "rdma-terminates-sent");
        assert!(
            received >= 1 && received <= terminated && received + crossed >= terminated,
            "{terminated} terminated, the {other} received {received} and sent {crossed}: {oout}"
        );
    }
    assert_nothing_left(&link.file_prefix(victim), victim_child.0.id());
    assert_nothing_left(&link.file_prefix(other), other_child.0.id());
    out
}

#[test]
fn perf_client_stopped_mid_transfer() {
    let out = sigterm_mid_transfer(
        "sig-perf",
        &["perf", "write"],
        &["perf", "write", "10.96.7.1", "-D", "20"],
        "#bytes",
        "client",
    );
    // Writes were outstanding: the connection was terminated, not closed with a FIN.
    assert_eq!(counter(&out, "stop-connections-terminated"), 1, "{out}");
}

#[test]
fn rping_client_stopped_mid_run() {
    sigterm_mid_transfer(
        "sig-rping",
        &["rping", "-s"],
        &[
            "rping",
            "-c",
            "-a",
            "10.96.7.1",
            "-C",
            "1000000",
            "-S",
            "4000",
        ],
        "rping client connecting",
        "client",
    );
}

/// A soak client that would run for minutes.
const SOAK_CLIENT: &[&str] = &[
    "soak",
    "10.96.7.1",
    "--qps",
    "4",
    "--minutes",
    "5",
    "--crc",
    "--progress",
    "0.2",
];

#[test]
fn soak_client_and_server_stopped_mid_run() {
    let client = sigterm_mid_transfer(
        "sig-soak-c",
        &["soak", "--crc"],
        SOAK_CLIENT,
        "faults ",
        "client",
    );
    assert!(
        counter(&client, "stop-connections-terminated") >= 1,
        "{client}"
    );
    sigterm_mid_transfer(
        "sig-soak-s",
        &["soak", "--crc"],
        SOAK_CLIENT,
        "faults ",
        "server",
    );
}

#[test]
fn second_signal_exits_at_once_and_cleans_up() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (eal, heap) = memory_args();
    let link = Link::memif_with("sig-twice", Some(["10.96.7.1", "10.96.7.2"]), &eal);
    let mut args = vec!["perf", "write"];
    args.extend(&heap);
    let mut srv = spawn(&link, "server", &args, &link.server);
    wait_for(&link, "server", &mut srv.0, "listening");
    // Both signals pending at once: the second is read right after the first, while the
    // clean stop has only begun.
    signal(&srv.0, "-STOP");
    signal(&srv.0, "-INT");
    signal(&srv.0, "-TERM");
    signal(&srv.0, "-CONT");
    let status = wait(&mut srv.0, 10);
    let err = read(&link, "server", "err");
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(err.contains("SIGINT: stopping"), "{err}");
    assert!(
        err.contains("SIGTERM: second stop signal, exiting at once"),
        "{err}"
    );
    assert_nothing_left(&link.file_prefix("server"), srv.0.id());
}
