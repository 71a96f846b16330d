//! Two `dataplane` processes joined by a DPDK virtual link (memif, or vhost-user with
//! virtio-user): `fwd --mode macswap` on the server side reflects what `pktgen` sends from
//! the client side.

#![cfg(feature = "dpdk")]

mod dpdk_common;

use std::process::{Command, Stdio};
use std::time::Duration;

use dpdk_common::two_process::{KillOnDrop, Link};

/// The forwarder's arguments: macswap on port `m` of `config` for at most 20 s.
fn fwd_args(config: &str) -> [&str; 9] {
    [
        "fwd",
        "--config",
        config,
        "--mode",
        "macswap",
        "-d",
        "20",
        "--stats-interval",
        "0",
    ]
}

/// Starts the forwarder on the link's server side, sends 5000 frames from the client side,
/// and checks that (nearly) all come back in order.
fn reflect(link: &Link) {
    // The server listens once it reports forwarding; then the client may connect.
    let _fwd = link.start_server(&fwd_args(&link.server), "forwarding");
    send_and_count(&link.client);
}

/// Runs pktgen on port `m` of `config` (5000 frames of 256 octets), checks that nearly all
/// come back and in order.
fn send_and_count(config: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args([
            "pktgen",
            "--config",
            config,
            "--tx-port",
            "m",
            "--rx-port",
            "m",
        ])
        .args(["--count", "5000", "--rate", "20000", "--size", "256"])
        .args(["--stats-interval", "0", "-d", "15"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let received: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("received "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    // A few frames may be lost while the memif link comes up; the rest come back.
    assert!(
        received >= 4750,
        "only {received} of 5000 came back:\n{text}"
    );
    assert!(text.contains(" 0 late"), "memif keeps order:\n{text}");
}

#[test]
fn pktgen_through_a_macswap_forwarder_over_memif() {
    reflect(&Link::memif("fwd", None));
}

#[test]
fn pktgen_through_a_macswap_forwarder_over_vhost_user() {
    reflect(&Link::vhost("fwd", None));
}

// A memif client started before its server (no socket yet) keeps retrying the start for
// `start_wait` (10 s by default) instead of failing, so the two sides may start in any order.
#[test]
fn memif_client_started_before_its_server_waits_for_it() {
    let link = Link::memif("client-first", None);
    let mut fwd = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_dataplane"))
            .args(fwd_args(&link.client))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(1500));
    if let Some(status) = fwd.0.try_wait().unwrap() {
        let mut err = String::new();
        std::io::Read::read_to_string(&mut fwd.0.stderr.take().unwrap(), &mut err).unwrap();
        panic!("the memif client gave up before its server started ({status}):\n{err}");
    }
    send_and_count(&link.server);
}
