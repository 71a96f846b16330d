//! The `dataplane` binary: exit codes, one-line errors, and a short `run` on software ports.

use std::process::{Command, Output};

fn dataplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("spawn dataplane")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts exit code `code` and exactly one stderr line starting `dataplane: error: `.
fn assert_one_error_line(o: &Output, code: i32) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected, got: {err:?}");
    assert!(lines[0].starts_with("dataplane: error: "), "{err}");
    lines[0].to_string()
}

/// Writes configuration `text` to a file in a new temporary directory (removed when the
/// returned handle drops); returns the handle and the file's path.
fn write_config(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("dp.toml");
    std::fs::write(&p, text).unwrap();
    (dir, p.display().to_string())
}

/// configs/soft-pair.toml: ports `a` and `b` on one soft link.
const SOFT_PAIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/soft-pair.toml");

/// Runs `dataplane COMMAND` on configs/soft-pair.toml with these extra arguments.
fn on_soft_pair(command: &str, extra: &[&str]) -> Output {
    let mut args = vec![command, "--config", SOFT_PAIR];
    args.extend_from_slice(extra);
    dataplane(&args)
}

/// Runs `pktgen` from port `a` to port `b` of a soft link with these extra arguments (no
/// periodic stats, at most 20 s); asserts exit code 0 and returns the standard output.
fn pktgen_over_a_soft_link(extra: &[&str]) -> String {
    let (_dir, path) = write_config(
        "[[ports]]\nname = \"a\"\nbackend = \"soft\"\ndevice = \"l\"\n\
         [[ports]]\nname = \"b\"\nbackend = \"soft\"\ndevice = \"l\"\n",
    );
    let mut args = vec![
        "pktgen",
        "--config",
        &path,
        "--tx-port",
        "a",
        "--rx-port",
        "b",
    ];
    args.extend_from_slice(extra);
    args.extend(["--stats-interval", "0", "-d", "20"]);
    let o = dataplane(&args);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn unknown_flag_is_a_usage_error() {
    let o = dataplane(&["run", "--bogus"]);
    let line = assert_one_error_line(&o, 2);
    assert!(line.contains("unexpected argument '--bogus'"), "{line}");
    let o = dataplane(&["frobnicate"]);
    assert_one_error_line(&o, 2);
    let o = dataplane(&["fwd", "--burst", "0"]);
    let line = assert_one_error_line(&o, 2);
    assert!(line.contains("0 is not in 1..=512"), "{line}");
}

#[test]
fn missing_required_argument_is_one_line() {
    let o = dataplane(&["run"]);
    let line = assert_one_error_line(&o, 2);
    assert!(line.contains("--config <FILE>"), "{line}");
}

#[test]
fn help_exits_zero() {
    let o = dataplane(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    for sub in ["run", "fwd", "pktgen"] {
        assert!(out.contains(sub), "{out}");
    }
}

#[test]
fn bad_config_names_file_and_line() {
    let (_dir, path) = write_config(
        "[[ports]]\nname = \"p0\"\nbackend = \"soft\"\ndevice = \"l\"\n\n\nmtu = 70000\n",
    );
    let o = dataplane(&["run", "--config", &path]);
    let line = assert_one_error_line(&o, 2);
    assert_eq!(
        line,
        format!(
            "dataplane: error: {path}:7: ports[0].mtu: invalid value 70000 (must be 68..=9000)"
        )
    );
}

#[test]
fn missing_config_file_is_a_config_error() {
    let o = dataplane(&["run", "--config", "/nonexistent/dp.toml"]);
    let line = assert_one_error_line(&o, 2);
    assert!(line.contains("/nonexistent/dp.toml"), "{line}");
}

#[test]
fn port_failure_is_a_runtime_error() {
    // A TAP name the kernel rejects (contains '/'): opening fails at run time.
    let (_dir, path) =
        write_config("[[ports]]\nname = \"t\"\nbackend = \"tap\"\ndevice = \"bad/name\"\n");
    let o = dataplane(&["run", "--config", &path, "--duration", "0.1"]);
    let line = assert_one_error_line(&o, 1);
    assert!(line.starts_with("dataplane: error: port t: "), "{line}");
}

#[test]
fn bad_fault_override_is_reported() {
    let o = on_soft_pair("run", &["--fault", "a:drop=lots", "-d", "0.1"]);
    let line = assert_one_error_line(&o, 1);
    assert!(
        line.contains("port a: fault setting drop: invalid rate"),
        "{line}"
    );
}

#[test]
fn run_on_soft_ports_stops_by_itself_with_a_summary() {
    let o = on_soft_pair("run", &["--duration", "1.2", "--stats-interval", "0.5"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    assert!(out.contains("stopped after 1.2"), "{out}");
    assert!(out.contains("(duration reached)"), "{out}");
    let stats_lines = out.lines().filter(|l| l.starts_with('[')).count();
    assert!(stats_lines >= 2, "periodic stats lines: {out}");
    // The summary table: header, one row per port, columns aligned (same width).
    let lines: Vec<&str> = out.lines().collect();
    let h = lines
        .iter()
        .position(|l| l.starts_with("port ") && l.contains("rx_pkts"))
        .unwrap();
    assert!(lines[h + 1].starts_with("a "), "{out}");
    assert!(lines[h + 2].starts_with("b "), "{out}");
    assert_eq!(lines[h].len(), lines[h + 1].len(), "aligned:\n{out}");
    assert_eq!(lines[h].len(), lines[h + 2].len(), "aligned:\n{out}");
    assert!(out.contains("faults"), "b has a fault layer: {out}");
}

#[test]
fn pktgen_over_a_soft_link_counts_every_frame() {
    let out = pktgen_over_a_soft_link(&["--count", "5000", "--size", "128"]);
    assert!(
        out.contains("received 5000 generated frames: 0 sequence gaps, 0 late"),
        "{out}"
    );
    assert!(out.contains("lost 0 of 5000 sent"), "{out}");
}

#[test]
fn pktgen_with_injected_loss_reports_it() {
    let out = pktgen_over_a_soft_link(&[
        "--count",
        "10000",
        "--fault",
        "b:direction=rx,drop=10%,seed=5",
    ]);
    let lost: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("lost "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!((800..1200).contains(&lost), "lost {lost}: {out}");
}

/// The `ping-pong: N round trips, L lost` line and the latency row's sample count and
/// typical value of a `pktgen --ping-pong` output.
fn ping_pong_figures(out: &str) -> (u64, u64, u64, f64) {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("ping-pong: "))
        .unwrap_or_else(|| panic!("{out}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    let row: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.contains("t_typical[usec]"))
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"))
        .split_whitespace()
        .collect();
    (
        w[0].parse().unwrap(),
        w[3].parse().unwrap(),
        row[1].parse().unwrap(),
        row[4].parse().unwrap(),
    )
}

#[test]
fn pktgen_ping_pong_times_every_frame() {
    let out = pktgen_over_a_soft_link(&["--ping-pong", "--count", "2000", "--size", "64"]);
    let (trips, lost, samples, typical) = ping_pong_figures(&out);
    assert_eq!((trips, lost, samples), (2000, 0, 2000), "{out}");
    assert!(typical > 0.0 && typical < 1000.0, "{out}");
}

#[test]
fn pktgen_ping_pong_counts_frames_that_do_not_come_back() {
    let out = pktgen_over_a_soft_link(&[
        "--ping-pong",
        "--count",
        "400",
        "--reply-timeout",
        "0.005",
        "--fault",
        "b:direction=rx,drop=25%,seed=3",
    ]);
    let (trips, lost, samples, _) = ping_pong_figures(&out);
    assert_eq!(trips + lost, 400, "{out}");
    assert_eq!(samples, trips, "{out}");
    assert!((60..140).contains(&lost), "lost {lost}: {out}");
}

#[test]
fn pktgen_ping_pong_needs_an_end() {
    let o = on_soft_pair("pktgen", &["--tx-port", "a", "--ping-pong"]);
    let line = assert_one_error_line(&o, 2);
    assert!(
        line.contains("--ping-pong needs --count or --duration"),
        "{line}"
    );
    let o = on_soft_pair("pktgen", &["--rx-port", "a", "--ping-pong", "-n", "1"]);
    let line = assert_one_error_line(&o, 2);
    assert!(line.contains("--ping-pong needs --tx-port"), "{line}");
}

#[test]
fn pktgen_size_is_checked() {
    let o = on_soft_pair("pktgen", &["--tx-port", "a", "--size", "20"]);
    let line = assert_one_error_line(&o, 2);
    assert!(line.contains("--size 20: must be 60..=1514"), "{line}");
    let o = on_soft_pair("pktgen", &["--tx-port", "zz"]);
    let line = assert_one_error_line(&o, 2);
    assert!(line.contains("--port zz: no such port"), "{line}");
}

#[test]
fn capture_dir_writes_pcaps_that_tshark_reads() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("cap");
    let o = on_soft_pair(
        "pktgen",
        &[
            "--tx-port",
            "a",
            "--rx-port",
            "b",
            "--count",
            "20",
            "--capture-dir",
            cap.to_str().unwrap(),
            "--stats-interval",
            "0",
            "-d",
            "20",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let pcap = cap.join("a.pcap");
    let bytes = std::fs::read(&pcap).unwrap();
    assert_eq!(bytes.len(), 24 + 20 * (16 + 64), "20 frames of 64 bytes");
    // tshark is installed by testbed/setup.
    let t = Command::new("tshark")
        .args([
            "-r",
            pcap.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "udp.dstport",
        ])
        .output()
        .expect("tshark (installed by testbed/setup)");
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let ports = String::from_utf8_lossy(&t.stdout);
    assert_eq!(ports.lines().count(), 20, "{ports}");
    assert!(ports.lines().all(|l| l.trim() == "9"), "{ports}");
}

#[test]
fn fwd_on_a_soft_port_runs_and_summarises() {
    let o = on_soft_pair("fwd", &["--port", "a", "--mode", "macswap", "-d", "0.3"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert!(out.contains("forwarding (Macswap, burst 32)"), "{out}");
    // Both ends of the soft link are opened, but only `a` forwards (to itself).
    assert!(out.lines().any(|l| l.starts_with("a ")), "{out}");
    assert!(!out.lines().any(|l| l.starts_with("b ")), "{out}");
    let o = on_soft_pair(
        "fwd",
        &["-d", "0.1", "--port", "a", "--port", "b", "--port", "a"],
    );
    let line = assert_one_error_line(&o, 2);
    assert!(line.contains("fwd needs one or two ports, got 3"), "{line}");
}

// A port of `queues = 2` gives `fwd` two lanes, each forwarding its own queue pair on a
// thread (an lcore under EAL) of its own; the table has a row per queue and their total.
#[test]
fn fwd_spreads_queue_pairs_over_lanes() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/rdma-soft-lanes.toml"
    );
    let o = dataplane(&["fwd", "--config", cfg, "--port", "a", "-d", "0.3"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    for line in [
        "forwarding (Io, burst 32, 2 lanes)",
        "lane-0 (thread): a.q0",
        "lane-1 (thread): a.q1",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
    for row in ["a.q0 ", "a.q1 ", "total "] {
        assert!(out.lines().any(|l| l.starts_with(row)), "{row}: {out}");
    }
    assert!(!out.lines().any(|l| l.starts_with("b.")), "{out}");
}

// A port of `queues = 2` gives `pktgen` two lanes: lane k sends its share of the frames on
// queue k of `a` and counts what queue k of `b` receives, each lane's frames numbered from 0
// (soft links pair queue k of one end with queue k of the other).
#[test]
fn pktgen_spreads_queue_pairs_over_lanes() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/rdma-soft-lanes.toml"
    );
    let o = dataplane(&[
        "pktgen",
        "--config",
        cfg,
        "--tx-port",
        "a",
        "--rx-port",
        "b",
        "-n",
        "1001",
        "--stats-interval",
        "0",
        "-d",
        "20",
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    for line in [
        "lane-0 (thread): sent 501 received 501 generated 501 gaps 0 late 0",
        "lane-1 (thread): sent 500 received 500 generated 500 gaps 0 late 0",
        "received 1001 generated frames: 0 sequence gaps, 0 late",
        "lost 0 of 1001 sent",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
    let o = dataplane(&[
        "pktgen",
        "--config",
        cfg,
        "--tx-port",
        "a",
        "--ping-pong",
        "-n",
        "1",
    ]);
    let line = assert_one_error_line(&o, 2);
    assert!(line.contains("--ping-pong takes one queue"), "{line}");
}

#[test]
fn ports_without_config_need_dpdk_devices() {
    let o = dataplane(&["fwd", "-d", "0.1"]);
    let line = assert_one_error_line(&o, 2);
    assert!(
        line.contains("no ports: give --config FILE or --port DEVICE"),
        "{line}"
    );
}

// A port of `queues = 2` is two ports `name.q0`, `name.q1`, queue k on lcore `lcore + k`;
// the summary has a row per lcore and their total.
#[test]
fn run_spreads_queue_pairs_over_lcores_and_totals_them() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/rdma-soft-lanes.toml"
    );
    let o = dataplane(&["run", "--config", cfg, "-d", "0.3"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for line in [
        "port a.q0 (soft, rdma-lanes, lcore 0)",
        "port b.q0 (soft, rdma-lanes, lcore 0)",
        "port a.q1 (soft, rdma-lanes, lcore 1)",
        "port b.q1 (soft, rdma-lanes, lcore 1)",
        "running 2 poll loops",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
    let lcores = out.split("\nlcores\n").nth(1).expect("lcores table");
    let rows: Vec<Vec<&str>> = lcores
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "{lcores}");
    assert_eq!(rows[0][..2], ["0", "2"]);
    assert_eq!(rows[1][..2], ["1", "2"]);
    assert_eq!(rows[2][..2], ["total", "4"]);
}
