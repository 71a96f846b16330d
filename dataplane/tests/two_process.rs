//! Two `dataplane` processes joined by a DPDK virtual link (memif, or vhost-user with
//! virtio-user): `fwd --mode macswap` on the server side reflects what `pktgen` sends from
//! the client side.

#![cfg(feature = "dpdk")]

mod dpdk_common;

use std::process::Command;

use dpdk_common::two_process::Link;

/// Starts the forwarder on the link's server side, sends 5000 frames from the client side,
/// and checks that
/// (nearly) all come back in order.
fn reflect(link: &Link) {
    // The server listens once it reports forwarding; then the client may connect.
    let _fwd = link.start_server(
        &[
            "fwd",
            "--config",
            &link.server,
            "--mode",
            "macswap",
            "-d",
            "20",
            "--stats-interval",
            "0",
        ],
        "forwarding",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args([
            "pktgen",
            "--config",
            &link.client,
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
