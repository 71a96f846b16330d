//! A running `dataplane perf` observed through DPDK telemetry (issue #20): DPDK's own
//! `dpdk-telemetry.py` and `dataplane stats --json` query the server (by file prefix) and
//! the client (by pid) in the middle of a transfer, beside DPDK's `/ethdev/` commands; the
//! QP and TCP figures agree between the two tools, grow while data flows, and stay within
//! what the run's own summaries report at the end.

#![cfg(feature = "dpdk")]

mod dpdk_common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dpdk_common::two_process::{counter, KillOnDrop, Link};
use serde_json::Value;

const IPS: Option<[&str; 2]> = Some(["10.97.0.1", "10.97.0.2"]);

/// `dataplane stats ARGS --json`: the one report.
fn stats(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .arg("stats")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stats {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `dpdk-telemetry.py -f PREFIX` with `cmds` on its standard input: one reply per command.
fn dpdk_telemetry_py(prefix: &str, cmds: &[&str]) -> Vec<Value> {
    let mut child = Command::new("dpdk-telemetry.py")
        .args(["-f", prefix])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dpdk-telemetry.py (Debian's dpdk package, testbed/setup installs it)");
    let mut input = child.stdin.take().unwrap();
    for c in cmds {
        writeln!(input, "{c}").unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let replies: Vec<Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        replies.len(),
        cmds.len(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    replies
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut v = v;
    for p in path {
        v = &v[*p];
    }
    v.as_u64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

/// The one QP of a `qps` section: its key and entry.
fn one_qp(qps: &Value) -> (String, Value) {
    let m = qps.as_object().expect("qps");
    assert_eq!(m.len(), 1, "one QP: {qps}");
    let (k, v) = m.iter().next().unwrap();
    (k.clone(), v.clone())
}

#[test]
fn perf_observed_with_dpdk_telemetry_py_and_dataplane_stats() {
    let link = Link::memif_telemetry("telemetry", IPS);
    let server_prefix = link.file_prefix("server");
    let common = ["--heap", "--time-limit", "90"];
    let mut args = vec!["perf", "write", "--config", &link.server];
    args.extend(common);
    let srv = link.start_server(&args, "listening");
    let client = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["perf", "write", "10.97.0.1", "-s", "65536", "-D", "4"])
        .args(["--config", &link.client])
        .args(common)
        .stdout(std::fs::File::create(link.dir.path().join("client.out")).unwrap())
        .stderr(std::fs::File::create(link.dir.path().join("client.err")).unwrap())
        .spawn()
        .unwrap();
    let client_pid = client.id().to_string();
    let mut client = KillOnDrop(client);

    // Wait for Writes to arrive at the server.
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        assert!(Instant::now() < deadline, "no Write seen by telemetry");
        let r = stats(&["--file-prefix", &server_prefix]);
        let qps = r["qps"].as_object().cloned().unwrap_or_default();
        if qps
            .values()
            .any(|q| q["rx_bytes"].as_u64().unwrap_or(0) > 0)
        {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_millis(300));
    let py = dpdk_telemetry_py(
        &server_prefix,
        &[
            "/dataplane/qps",
            "/dataplane/tcp",
            "/ethdev/stats,0",
            "/dataplane/info",
        ],
    );
    let second = stats(&["--file-prefix", &server_prefix]);
    let by_pid = stats(&["--pid", &client_pid]);

    // The server: one QP in RTS from the client, the same in both tools, growing.
    let (key, q1) = one_qp(&first["qps"]);
    let (key_py, q_py) = one_qp(&py[0]["/dataplane/qps"]);
    let (key2, q2) = one_qp(&second["qps"]);
    assert_eq!((&key_py, &key2), (&key, &key), "same QP in both tools");
    for q in [&q1, &q_py, &q2] {
        assert_eq!(q["state"], "Rts", "{q}");
        assert!(
            q["remote"].as_str().unwrap().starts_with("10.97.0.2:"),
            "{q}"
        );
        assert_eq!(
            (q["ird"].clone(), q["ord"].clone()),
            (q1["ird"].clone(), q1["ord"].clone())
        );
        assert_eq!(u(q, &["terminates_tx"]) + u(q, &["terminates_rx"]), 0);
        assert_eq!(
            u(q, &["tx_bytes"]),
            0,
            "the server only receives Writes: {q}"
        );
    }
    assert!(u(&q1, &["rx_bytes"]) <= u(&q_py, &["rx_bytes"]));
    assert!(
        u(&q_py, &["rx_bytes"]) < u(&q2, &["rx_bytes"]),
        "Writes keep arriving: {q_py} then {q2}"
    );
    // Per opcode, in the full entry (`/dataplane/qp,<key>`): they are all RDMA Writes.
    let py_qp = dpdk_telemetry_py(&server_prefix, &[&format!("/dataplane/qp,{key}")]);
    let full = &py_qp[0]["/dataplane/qp"];
    assert!(u(full, &["rx_write_msgs"]) > 0, "{full}");
    assert!(u(full, &["rx_write_bytes"]) >= u(&q2, &["rx_bytes"]) - 65536 * 64);
    // TCP like ss: one established connection from the client, with RTT and window.
    let conns: Vec<&Value> = second["tcp"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "engine")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(conns.len(), 1, "{}", second["tcp"]);
    let c = conns[0];
    assert_eq!(c["state"], "Established");
    assert_eq!(c["local"], "10.97.0.1:18515");
    assert!(c["remote"].as_str().unwrap().starts_with("10.97.0.2:"));
    assert_eq!(u(c, &["mss"]), 1448);
    assert!(u(c, &["srtt_us"]) > 0 && u(c, &["cwnd"]) > 0, "{c}");
    let tcp_py = &py[1]["/dataplane/tcp"];
    assert_eq!(
        tcp_py.as_object().unwrap().len(),
        second["tcp"].as_object().unwrap().len()
    );
    // DPDK's own ethdev telemetry beside ours: the same port, at least as many frames.
    let ethdev = &py[2]["/ethdev/stats"];
    assert!(u(ethdev, &["ipackets"]) >= u(&first["ports"], &["m", "rx_packets"]));
    assert_eq!(second["ports"]["m"]["driver"], "net_memif");
    assert_eq!(u(&py[3]["/dataplane/info"], &["poll_loops"]), 1);
    // The client, found by its pid: the Writes go out.
    let (_, cq) = one_qp(&by_pid["qps"]);
    assert!(
        u(&cq, &["tx_bytes"]) > 0 && u(&cq, &["rx_bytes"]) == 0,
        "{cq}"
    );
    assert_eq!(u(&by_pid["info"], &["pid"]).to_string(), client_pid);
    let events = &second["events"];
    assert_eq!(u(events, &["rnic_async_events", "overflows"]), 0);
    assert_eq!(u(events, &["rnic_cq_events", "overflows"]), 0);

    // The run's own summaries bound what telemetry showed in its middle.
    let cstatus = client.0.wait().unwrap();
    let read = |f: &str| std::fs::read_to_string(link.dir.path().join(f)).unwrap_or_default();
    let ctext = read("client.out");
    assert!(cstatus.success(), "client: {ctext}\n{}", read("client.err"));
    let (status, stext, serr) = srv.finish();
    assert!(status.success(), "server: {stext}\n{serr}");
    let row = ctext
        .lines()
        .find(|l| l.trim_start().starts_with("65536"))
        .unwrap_or_else(|| panic!("no result row: {ctext}"));
    let iterations: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(u(full, &["rx_write_msgs"]) <= iterations, "{row}");
    assert!(u(&q2, &["rx_bytes"]) <= iterations * 65536, "{row}");
    assert!(u(&second["rdma"], &["fpdus_received"]) <= counter(&stext, "rdma-fpdus-received"));
    assert!(u(&cq, &["tx_msgs"]) <= iterations);
    assert!(u(&second["rdma"], &["tcp_retransmits"]) <= counter(&stext, "tcp-retransmits"));
    // The server acknowledges the Writes: pure ACKs counted while they ran, never more
    // than the summary's total at exit.
    let acks = u(&second["rdma"], &["tcp_pure_acks"]);
    assert!(acks > 0, "no pure ACKs in telemetry: {second}");
    assert!(acks <= counter(&stext, "tcp-pure-acks"));
    assert!(u(&second["rdma"], &["tcp_loss_probes"]) <= counter(&stext, "tcp-loss-probes"));
    assert_eq!(counter(&stext, "rdma-terminates-received"), 0);
}
