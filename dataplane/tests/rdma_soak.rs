//! The verified soak (`dataplane soak`'s library part) between two poll loops joined by the
//! in-process software pair with fault injection. The two-process run over a DPDK memif
//! pair is in rdma_soak_memif.rs.

mod rdma_common;

use std::net::SocketAddrV4;
use std::time::Duration;

use dataplane::classify::{FrameClass, Malformed};
use dataplane::clock::{self};

use dataplane::apps::soak::{SoakClient, SoakError, SoakParams, SoakServer};
use dataplane::apps::{run_pair, App, Step};
use dataplane::port::fault::{CorruptMode, Direction, FaultConfig, FaultCounters, Rate};
use iwarp::mpa::MpaConfig;
use rdma_common::{pair, Loop, CLIENT_IP, NO_STOP, SERVER_IP};

/// Issue 8's mix: 1 % loss, 1 % reordering, 0.1 % duplication, 0.01 % bit flips, on the
/// frames each side receives.
fn lossy(seed: u64) -> FaultConfig {
    FaultConfig {
        seed,
        direction: Direction::Rx,
        drop: Rate::from_percent(1.0).expect("rate"),
        reorder: Rate::from_percent(1.0).expect("rate"),
        duplicate: Rate::from_percent(0.1).expect("rate"),
        corrupt: Rate::from_percent(0.01).expect("rate"),
        corrupt_mode: CorruptMode::BitFlip,
        ..FaultConfig::default()
    }
}

fn faults(l: &Loop) -> FaultCounters {
    let (rx, tx) = l.ports()[0].counters();
    rx + tx
}

/// Frames of both loops dropped for a bad TCP checksum: as counted by the loops'
/// classification, and as found by the TCP engines (which verify what the classifiers leave
/// them: every segment here, the software pair gives no device verdicts).
fn tcp_checksum_drops(loops: [&Loop; 2]) -> (u64, u64) {
    let class = FrameClass::Malformed(Malformed::TcpChecksum);
    loops.iter().fold((0, 0), |(c, e), l| {
        (
            c + l.counters(0).class(class),
            e + l.handler().tcp().stats().bad_checksums,
        )
    })
}

struct Outcome {
    server: Result<(), SoakError>,
    client: Result<(), SoakError>,
    srv: SoakServer,
    cli: SoakClient,
    faults: FaultCounters,
    tcp_checksum_drops: (u64, u64),
}

fn soak(crc: bool, faults_cfg: FaultConfig, params: SoakParams) -> Outcome {
    let mpa = MpaConfig {
        require_crc: crc,
        ..MpaConfig::default()
    };
    let (mut ls, mut lc) = pair(mpa, 12 << 20, faults_cfg);
    let addr = SocketAddrV4::new(SERVER_IP, 18600);
    let mut srv = SoakServer::new(ls.handler_mut(), addr, params.stall).expect("server");
    let mut cli = SoakClient::new(lc.handler_mut(), CLIENT_IP, addr, params).expect("client");
    let (server, client) = run_pair(
        &mut ls,
        &mut srv,
        &mut lc,
        &mut cli,
        Duration::from_secs(120),
        &NO_STOP,
    );
    Outcome {
        server,
        client,
        srv,
        cli,
        faults: faults(&ls) + faults(&lc),
        tcp_checksum_drops: tcp_checksum_drops([&ls, &lc]),
    }
}

// RFC 5044 §4 and RFC 5040 §5: over a lossy, reordering, duplicating link TCP recovers
// every segment; each RDMA Write (read back), RDMA Read and Send arrives byte-exact, and the
// server's verdict (in a final Send) agrees with what the client sent.
#[test]
fn lossy_link_soak_verifies_every_byte() {
    let volume = 12 << 20;
    let o = soak(
        true,
        lossy(3),
        SoakParams {
            qps: 6,
            bytes: Some(volume),
            stall: Duration::from_secs(20),
            ..SoakParams::default()
        },
    );
    assert_eq!(o.client, Ok(()));
    assert_eq!(o.server, Ok(()));
    let t = o.cli.tally;
    assert!(t.bytes() >= volume, "{t:?}");
    assert!(t.written > 0 && t.read > t.written && t.sent > 0, "{t:?}");
    assert_eq!(t.server_verified, t.sent);
    assert_eq!(o.srv.tally.sent, t.sent);
    assert_eq!(o.srv.tally.sends, t.rounds);
    assert_eq!(t.writes, t.rounds);
    assert_eq!(t.reads, 2 * t.rounds);
    assert!(
        o.faults.dropped > 0 && o.faults.reordered > 0 && o.faults.duplicated > 0,
        "{:?}",
        o.faults
    );
}

// Corrupted frames in the middle of receive runs (1 % of the frames each side receives get
// a flipped bit; the TCP, IP or Ethernet check drops them): a run of in-order segments is
// cut at the hole, the segments behind it wait, and the retransmission fills it. Nothing
// wrong is placed or completed: every Write (read back), Read and Send arrives byte-exact
// with the CRC on, and the server's verdict agrees.
#[test]
fn corrupted_frames_inside_receive_runs_place_nothing_wrong() {
    let volume = 6 << 20;
    let o = soak(
        true,
        FaultConfig {
            seed: 11,
            direction: Direction::Rx,
            corrupt: Rate::from_percent(1.0).expect("rate"),
            corrupt_mode: CorruptMode::BitFlip,
            ..FaultConfig::default()
        },
        SoakParams {
            qps: 4,
            bytes: Some(volume),
            stall: Duration::from_secs(20),
            ..SoakParams::default()
        },
    );
    assert_eq!(o.client, Ok(()));
    assert_eq!(o.server, Ok(()));
    assert!(o.faults.corrupted > 10, "{:?}", o.faults);
    // Most flipped bits are in TCP payloads: the engines refuse those segments (from the
    // sum the MPA receiver takes with the CRCs, for FPDU-aligned ones), counted as the
    // classifier counts a bad checksum.
    let (counted, refused) = o.tcp_checksum_drops;
    assert!(counted > 0, "{:?}", o.faults);
    assert_eq!(counted, refused);
    let t = o.cli.tally;
    assert!(t.bytes() >= volume, "{t:?}");
    assert_eq!(t.server_verified, t.sent);
    assert_eq!(o.srv.tally.sent, t.sent);
    assert_eq!(t.writes, t.rounds);
    assert_eq!(t.reads, 2 * t.rounds);
}

// The check is real: with the MPA CRC off (RFC 5044 §7.1 negotiates it) and payload bit
// flips that keep the TCP checksum valid, corrupted octets reach the buffers and the soak
// must fail rather than report success.
#[test]
fn undetected_corruption_fails_the_soak() {
    let o = soak(
        false,
        FaultConfig {
            seed: 5,
            direction: Direction::Rx,
            corrupt: Rate::from_percent(1.0).expect("rate"),
            corrupt_mode: CorruptMode::TcpPayload,
            ..FaultConfig::default()
        },
        SoakParams {
            qps: 2,
            bytes: Some(8 << 20),
            stall: Duration::from_secs(5),
            ..SoakParams::default()
        },
    );
    assert!(o.faults.corrupted_tcp > 0);
    let why = o
        .client
        .expect_err("corrupted data went unnoticed")
        .to_string();
    println!("client: {why}\nserver: {:?}", o.server);
    assert!(o.server.is_err() || why.contains("differs"), "{why}");
}

// A link that stops carrying frames ends the client's run with a stall error naming the
// open QPs instead of hanging (the server, which never heard of the client, keeps
// listening).
#[test]
fn dead_link_is_reported_as_a_stall() {
    let dead = FaultConfig {
        seed: 1,
        direction: Direction::Rx,
        drop: Rate::ALWAYS,
        ..FaultConfig::default()
    };
    let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, dead);
    let addr = SocketAddrV4::new(SERVER_IP, 18600);
    let params = SoakParams {
        qps: 2,
        bytes: Some(1 << 20),
        stall: Duration::from_secs(1),
        ..SoakParams::default()
    };
    let mut srv = SoakServer::new(ls.handler_mut(), addr, params.stall).expect("server");
    let mut cli = SoakClient::new(lc.handler_mut(), CLIENT_IP, addr, params).expect("client");
    let started = clock::now();
    let why = loop {
        assert!(
            clock::elapsed(started) < Duration::from_secs(20),
            "no stall reported"
        );
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
        assert_eq!(srv.step(ls.handler_mut(), now), Step::Continue);
        if let Step::Done(r) = cli.step(lc.handler_mut(), now) {
            break r.expect_err("a dead link passed").to_string();
        }
    };
    assert!(why.starts_with("stall: no completion for 1 s"), "{why}");
    assert!(
        why.contains("QP 0 Connecting") && why.contains("QP 1 Connecting"),
        "{why}"
    );
    assert!(clock::elapsed(started) < Duration::from_secs(5));
    assert_eq!(cli.tally.rounds, 0);
}

// A server without memory for the client's buffers rejects the QP with the reason in the
// Reply's private data (RFC 5044 §7.1), and both sides fail with it.
#[test]
fn server_out_of_memory_rejects_with_the_reason() {
    let o = soak(
        true,
        FaultConfig::default(),
        SoakParams {
            qps: 4,
            max_io: 4096,
            max_msg: 1 << 20,
            bytes: Some(1 << 20),
            stall: Duration::from_secs(5),
            ..SoakParams::default()
        },
    );
    let why = o.client.expect_err("client passed").to_string();
    assert!(why.starts_with("rejected: QP "), "{why}");
    assert!(why.contains("--mem-mb"), "{why}");
    let srv = o.server.expect_err("server passed").to_string();
    assert!(srv.contains("--mem-mb"), "{srv}");
}

/// Runs the `dataplane` binary; returns (exit code, stdout, stderr).
fn dataplane(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(args)
        .output()
        .expect("run dataplane");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn soak_usage_errors_exit_2() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/rdma-soft-pair.toml"
    );
    for (args, want) in [
        (vec!["soak", "--qps", "0"], "--qps: 1 to 64"),
        (vec!["soak", "--bytes", "12parsecs"], "unknown unit"),
        (
            vec!["soak", "--minutes", "0"],
            "--minutes: a positive number",
        ),
        (vec!["soak", "--max-msg", "8"], "--max-msg"),
    ] {
        let mut a = args.clone();
        a.extend(["--config", cfg]);
        let (code, _, err) = dataplane(&a);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}
