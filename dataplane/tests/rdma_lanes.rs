//! Multi-queue ports with share-nothing lanes between two `dataplane perf` processes over
//! memif: each side runs 2 lanes (2 queue pairs, lanes on EAL lcores 0 and 1), the client
//! spreads 16 QPs over its lanes, choosing local ports that hash to its own lane; memif has
//! no RSS, so lane `i`'s queue `i` is the peer's queue `i`. Every byte is verified (CRC on
//! every FPDU, the server checks each connection's buffer), and the per-lane counters show
//! each connection on one lane only: every lane established its share on both sides, no
//! connection was accepted on a lane its 4-tuple does not hash to, and no segment reached
//! a lane without its connection (no reset sent). The same link carries `tcp` on 2 lanes.

#![cfg(feature = "dpdk")]

mod dpdk_common;

use std::process::Command;

use dpdk_common::two_process::{counter, Link};

const IPS: Option<[&str; 2]> = Some(["10.97.0.1", "10.97.0.2"]);
const QPS: u64 = 16;
const SIZE: u64 = 65536;

/// The value of `key` on the line of lane `lane` (`lane-K (PLACE): key value ...`).
fn lane_counter(text: &str, lane: &str, key: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{lane} ")) || l.starts_with(&format!("{lane}:")))
        .unwrap_or_else(|| panic!("no {lane} line in {text}"));
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == key {
            return words.next().and_then(|v| v.parse().ok()).unwrap();
        }
    }
    panic!("no {key} on {line}")
}

/// A memif link whose two sides run 2 lanes: two EAL lcores on each side (the main one,
/// lcore 0, runs lane 0, worker lcore 1 runs lane 1; the client's lane 0 on the second CPU,
/// its lane 1 on the first) and two queue pairs.
fn lanes_link(tag: &str) -> Link {
    let l = Link::memif(tag, IPS);
    for (path, from, to) in [
        (&l.server, "\"-l\", \"0\"", "\"-l\", \"0,1\""),
        (&l.client, "\"-l\", \"1\"", "\"--lcores\", \"0@1,1@0\""),
    ] {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.contains(from), "{text}");
        std::fs::write(path, text.replace(from, to)).unwrap();
    }
    l.add_port_keys("queues = 2", "queues = 2");
    l
}

#[test]
fn memif_two_lanes_sixteen_qps_every_byte_verified_one_lane_per_connection() {
    let l = lanes_link("lanes");
    let common = ["--heap", "--time-limit", "90", "--crc"];
    let mut args = vec!["perf", "write", "--verify", "--config", &l.server];
    args.extend(common);
    let srv = l.start_server(&args, "listening");
    let n = (QPS * 200).to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args([
            "perf",
            "write",
            "10.97.0.1",
            "-q",
            "16",
            "-s",
            "65536",
            "-n",
            &n,
        ])
        .args(["--config", &l.client])
        .args(common)
        .output()
        .unwrap();
    let c = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {c}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, s, serr) = srv.finish();
    assert!(status.success(), "server failed ({status}): {s}\n{serr}");

    let cerr = String::from_utf8_lossy(&out.stderr).into_owned();
    for (side, text, err) in [("server", &s, &serr), ("client", &c, &cerr)] {
        for lane in ["lane-0", "lane-1"] {
            let got = |key| lane_counter(text, lane, key);
            assert_eq!(got("established"), QPS / 2, "{side} {lane}: {text}");
            assert_eq!(got("foreign"), 0, "{side} {lane}: {text}");
            // A segment on the wrong lane finds no connection and is answered by a reset.
            assert_eq!(got("resets-sent"), 0, "{side} {lane}: {text}\n{err}");
            assert_eq!(got("aborts-sent"), 0, "{side} {lane}: {text}\n{err}");
            assert_eq!(got("crc-errors"), 0, "{side} {lane}: {text}");
            let moved = if side == "server" {
                "fpdus-received"
            } else {
                "fpdus-sent"
            };
            assert!(got(moved) > 0, "{side} {lane}: {text}");
            assert!(
                got("rx-frames") > 0 && got("tx-frames") > 0,
                "{side} {lane}"
            );
        }
        assert_eq!(lane_counter(text, "lanes-total", "established"), QPS);
    }
    // Lane 0 runs on the main lcore, lane 1 on the EAL worker.
    for text in [&s, &c] {
        assert!(text.contains("lane-0 (lcore 0)"), "{text}");
        assert!(text.contains("lane-1 (lcore 1)"), "{text}");
    }
    // The server received every write of every connection: the client's iterations in
    // FPDUs (a 64 KiB write is several FPDUs), and each connection's buffer as written.
    assert_eq!(counter(&s, "perf-verified-bytes"), QPS * SIZE);
    assert_eq!(counter(&s, "perf-verify-failures"), 0);
    let total = c
        .lines()
        .skip_while(|l| !l.starts_with(" #bytes"))
        .nth(1)
        .unwrap_or_else(|| panic!("no total row: {c}"));
    let iters: u64 = total.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(iters, QPS * 200, "{total}");
}

// `soak` on 2 lanes: each lane's client opens its share of the QPs from ports of its lane,
// its Writes are read back and compared, its Sends verified by the same lane's server; both
// sides' lanes see exactly the frames the other side's same lane sent.
#[test]
fn memif_two_lanes_soak_verified_lane_to_lane() {
    let l = lanes_link("lsoak");
    let common = ["--heap", "--time-limit", "90", "--crc"];
    let mut args = vec!["soak", "--config", &l.server];
    args.extend(common);
    let srv = l.start_server(&args, "listening");
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["soak", "10.97.0.1", "--qps", "4", "--bytes", "8MiB"])
        .args(["--config", &l.client])
        .args(common)
        .output()
        .unwrap();
    let c = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {c}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, s, serr) = srv.finish();
    assert!(status.success(), "server failed ({status}): {s}\n{serr}");
    for text in [&s, &c] {
        assert!(text.contains("soak-result: ok"), "{text}");
        for lane in ["lane-0", "lane-1"] {
            assert_eq!(lane_counter(text, lane, "established"), 2, "{lane}: {text}");
            assert_eq!(lane_counter(text, lane, "foreign"), 0, "{lane}: {text}");
            assert_eq!(lane_counter(text, lane, "resets-sent"), 0, "{lane}: {text}");
            assert_eq!(lane_counter(text, lane, "crc-errors"), 0, "{lane}: {text}");
        }
    }
    for lane in ["lane-0", "lane-1"] {
        assert_eq!(
            lane_counter(&c, lane, "fpdus-sent"),
            lane_counter(&s, lane, "fpdus-received"),
            "{lane}: every FPDU the client's lane sent reached the server's same lane"
        );
    }
    assert!(counter(&c, "soak-written-bytes") > 0);
    assert_eq!(
        counter(&c, "soak-server-verified-bytes"),
        counter(&s, "soak-received-bytes")
    );
}

// `tcp` on 2 lanes: the echo server listens on both lanes; the client's one connection,
// from a local port that hashes to lane 0, lives on lane 0 of both sides (memif's ring
// pairs); every byte comes back.
#[test]
fn memif_two_lanes_tcp_echo_on_the_lane_of_its_hash() {
    let l = lanes_link("ltcp");
    let srv = l.start_server(
        &[
            "tcp", "echo", "--listen", "7000", "--once", "-d", "60", "--config", &l.server,
        ],
        "listening",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["tcp", "client", "--connect", "10.97.0.1:7000"])
        .args(["--bytes", "4000000", "-d", "60", "--config", &l.client])
        .output()
        .unwrap();
    let c = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {c}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(c.contains("received 4000000 bytes"), "{c}");
    let (status, s, serr) = srv.finish();
    assert!(status.success(), "server failed ({status}): {s}\n{serr}");
    assert!(s.contains("listening on 10.97.0.1:7000 (2 lanes)"), "{s}");
    for (side, text) in [("server", &s), ("client", &c)] {
        assert_eq!(
            lane_counter(text, "lane-0", "connections"),
            1,
            "{side}: {text}"
        );
        assert_eq!(
            lane_counter(text, "lane-1", "connections"),
            0,
            "{side}: {text}"
        );
        assert!(
            lane_counter(text, "lane-0", "rx-frames") > 1000,
            "{side}: {text}"
        );
        assert!(text.contains("lane-0 (lcore 0)"), "{text}");
        assert!(text.contains("lane-1 (lcore 1)"), "{text}");
    }
    assert_eq!(lane_counter(&c, "lane-0", "received"), 4_000_000, "{c}");
}

// `rping` on 2 lanes: the server listens on both lanes; the client connects from lane 0 (a
// local port that hashes to it), so the server's lane 0 serves every ping, validated, and
// its lane 1 ends with it.
#[test]
fn memif_two_lanes_rping_served_on_the_lane_of_its_hash() {
    let l = lanes_link("lrping");
    let srv = l.start_server(
        &[
            "rping",
            "-s",
            "-V",
            "--time-limit",
            "60",
            "--config",
            &l.server,
        ],
        "listening",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args([
            "rping",
            "-c",
            "-a",
            "10.97.0.1",
            "-C",
            "20",
            "-V",
            "-S",
            "1000",
        ])
        .args(["--time-limit", "60", "--config", &l.client])
        .output()
        .unwrap();
    let c = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {c}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, s, serr) = srv.finish();
    assert!(status.success(), "server failed ({status}): {s}\n{serr}");
    assert!(
        s.contains("rping server listening on 10.97.0.1:7174 (2 lanes"),
        "{s}"
    );
    assert!(c.contains("rping: 20 pings of 1000 bytes"), "{c}");
    assert!(
        s.contains("lane-0: 20 pings") && s.contains("lane-1: 0 pings"),
        "{s}"
    );
    for (side, text) in [("server", &s), ("client", &c)] {
        assert_eq!(
            lane_counter(text, "lane-0", "established"),
            1,
            "{side}: {text}"
        );
        assert_eq!(lane_counter(text, "lane-0", "foreign"), 0, "{side}: {text}");
        assert!(text.contains("lane-1 (lcore 1)"), "{side}: {text}");
    }
    assert_eq!(lane_counter(&s, "lane-1", "established"), 0, "{s}");
}

// `perf -R` (perftest's rdma_cm exchange, a control and a data connection) on 2 lanes: the
// server listens on both lanes; the client's connections, from local ports that hash to
// lane 0, are served on lane 0; both sides print the same report.
#[test]
fn memif_two_lanes_perftest_exchange_on_the_lane_of_its_hash() {
    let l = lanes_link("lperftest");
    let common = ["--heap", "--time-limit", "60", "-s", "65536", "-n", "200"];
    let mut args = vec!["perf", "write", "-R", "--config", &l.server];
    args.extend(common);
    let srv = l.start_server(&args, "listening");
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["perf", "write", "-R", "10.97.0.1", "--config", &l.client])
        .args(common)
        .output()
        .unwrap();
    let c = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {c}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, s, serr) = srv.finish();
    assert!(status.success(), "server failed ({status}): {s}\n{serr}");
    assert!(s.contains("(2 lanes, memory per lane"), "{s}");
    for (side, text) in [("server", &s), ("client", &c)] {
        assert!(text.contains("peer perftest version"), "{side}: {text}");
        assert!(
            lane_counter(text, "lane-0", "established") >= 1,
            "{side}: {text}"
        );
        assert_eq!(
            lane_counter(text, "lane-1", "established"),
            0,
            "{side}: {text}"
        );
        assert_eq!(lane_counter(text, "lane-0", "foreign"), 0, "{side}: {text}");
    }
    // The report row (65536 bytes, 200 iterations) is the same on both sides.
    let row = |text: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with("65536"))
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no report row: {text}"))
    };
    assert_eq!(row(&c), "65536 200");
    assert_eq!(row(&s), row(&c));
    // perftest's peer may be Linux siw: the client holds its first FPDUs for siw's
    // accept race unless told otherwise (the native protocol's perf drops the hold).
    assert!(c.contains("first FPDUs held 100 ms"), "{c}");
}
