//! Two `dataplane` processes speaking iWARP over a DPDK virtual link (memif, or vhost-user
//! with virtio-user): rping and perf, server and client, with CRC, markers and injected
//! reordering and loss.

#![cfg(feature = "dpdk")]

mod dpdk_common;

use std::process::Command;

use dpdk_common::two_process::{counter, Link};

const IPS: Option<[&str; 2]> = Some(["10.98.0.1", "10.98.0.2"]);

/// One pair of busy-polling processes at a time: the cases share two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `server` until it says it listens, then `client`; both must exit 0. Returns both
/// outputs.
fn run(link: &Link, server: &[&str], client: &[&str]) -> (String, String) {
    let (s, c, _) = run_with_stderr(link, server, client);
    (s, c)
}

/// [`run`], also returning both processes' standard error (server's, then client's).
fn run_with_stderr(link: &Link, server: &[&str], client: &[&str]) -> (String, String, [String; 2]) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let common = ["--heap", "--time-limit", "90"];
    let mut args = server.to_vec();
    args.extend(["--config", &link.server]);
    args.extend(common);
    let srv = link.start_server(&args, "listening");
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(client)
        .args(["--config", &link.client])
        .args(common)
        .output()
        .unwrap();
    let ctext = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {ctext}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, stext, serr) = srv.finish();
    assert!(
        status.success(),
        "server failed ({status}): {stext}\n{serr}"
    );
    let cerr = String::from_utf8_lossy(&out.stderr).into_owned();
    (stext, ctext, [serr, cerr])
}

// RFC 5040 §5.1–5.3 via rping's exchange, CRC on (RFC 5044 §6.5); every ping validated.
#[test]
fn memif_rping_crc() {
    let l = Link::memif("rping", IPS);
    let (_, c) = run(
        &l,
        &["rping", "-s", "--crc"],
        &[
            "rping",
            "-c",
            "-a",
            "10.98.0.1",
            "-C",
            "50",
            "-S",
            "4000",
            "-V",
            "--crc",
        ],
    );
    assert!(c.contains("rping: 50 pings of 4000 bytes"), "{c}");
    assert_eq!(counter(&c, "rdma-crc-errors"), 0);
}

// RFC 5044 §5/§6 with markers, 1 % reordering and loss injected at the client's port:
// out-of-order FPDUs are placed at once, no tagged data is held.
#[test]
fn memif_perf_write_markers_reordering() {
    let l = Link::memif("reorder", IPS);
    let (s, c) = run(
        &l,
        &["perf", "write", "--markers", "--crc"],
        &[
            "perf",
            "write",
            "10.98.0.1",
            "-s",
            "65536",
            "-n",
            "300",
            "--markers",
            "--crc",
            "--fault",
            "reorder=1%,drop=1%",
        ],
    );
    assert!(c.contains(" 65536      300"), "{c}");
    // The server receives the Writes; the client's port reorders what it sends and gets.
    let placed = counter(&s, "rdma-ooo-placed") + counter(&c, "rdma-ooo-placed");
    assert!(placed > 0, "{s}\n{c}");
    // Our sender is FPDU-aligned (RFC 5044 §6.1): every segment starts with an FPDU, so
    // with markers every tagged FPDU that arrives ahead is placed at once, also the short
    // last FPDU of each 64 KiB message; no tagged octet is left to TCP.
    assert_eq!(counter(&s, "rdma-held-tagged-bytes"), 0, "{s}");
    assert_eq!(counter(&s, "rdma-crc-errors"), 0);
}

#[test]
fn memif_perf_read_send_atomic() {
    let l = Link::memif("ops", IPS);
    let (_, c) = run(
        &l,
        &["perf", "read"],
        &["perf", "read", "10.98.0.1", "-s", "1048576", "-n", "20"],
    );
    assert!(c.contains(" 1048576    20"), "{c}");
    // Its peer is a dataplane: no first-FPDU hold for siw unless asked for.
    assert!(c.contains("first FPDUs held 0 ms"), "{c}");
    let (_, c) = run(
        &l,
        &["perf", "send"],
        &["perf", "send", "10.98.0.1", "--lat", "-s", "8", "-n", "200"],
    );
    assert!(c.contains(" 8      200"), "{c}");
    let (_, c) = run(
        &l,
        &["perf", "atomic"],
        &[
            "perf",
            "atomic",
            "10.98.0.1",
            "-n",
            "200",
            "--first-fpdu-delay-ms",
            "30",
        ],
    );
    assert!(c.contains(" 8          200"), "{c}");
    assert!(c.contains("first FPDUs held 30 ms"), "{c}");
}

#[test]
fn vhost_rping_and_perf_write() {
    let l = Link::vhost("rping", IPS);
    let (_, c) = run(
        &l,
        &["rping", "-s"],
        &["rping", "-c", "-a", "10.98.0.1", "-C", "30", "-V"],
    );
    assert!(c.contains("rping: 30 pings"), "{c}");
    let (_, c) = run(
        &l,
        &["perf", "write"],
        &["perf", "write", "10.98.0.1", "-s", "4194304", "-n", "10"],
    );
    assert!(c.contains(" 4194304    10"), "{c}");
}

// Checksum offloads and TSO over vhost-user/virtio-user, which negotiate them: 64 KiB CRC
// Writes with offloads on (the first lines name them) and off give the same bytes, every
// one verified in the server's buffers, and no frame fails a checksum on either side; with
// offloads on, the client's segments go out in TSO frames the server takes whole.
#[test]
fn vhost_offloads_on_and_off_give_identical_bytes() {
    let mut verified = Vec::new();
    for mode in ["auto", "off"] {
        let l = Link::vhost_tso(&format!("offloads-{mode}"), IPS);
        let key = format!("offloads = \"{mode}\"");
        l.add_port_keys(&key, &key);
        let (s, c, [serr, cerr]) = run_with_stderr(
            &l,
            &["perf", "write", "--crc", "--verify"],
            &[
                "perf",
                "write",
                "10.98.0.1",
                "-s",
                "65536",
                "-n",
                "200",
                "--crc",
            ],
        );
        assert!(c.contains(" 65536      200"), "{c}");
        for err in [&serr, &cerr] {
            let line = err
                .lines()
                .find(|l| l.contains(": offloads "))
                .unwrap_or_else(|| panic!("no offloads line: {err}"));
            if mode == "off" {
                assert!(line.ends_with("offloads none"), "{line}");
            } else {
                assert!(line.contains("tx tcp-cksum"), "{line}");
                assert!(line.contains("rx tcp-cksum"), "{line}");
            }
        }
        if mode == "auto" {
            assert!(cerr.contains("offloads tx tcp-cksum tso,"), "{cerr}");
        }
        assert_eq!(counter(&s, "perf-verify-failures"), 0, "{s}");
        assert_eq!(counter(&s, "rdma-crc-errors"), 0, "{s}");
        assert_eq!(counter(&c, "rdma-crc-errors"), 0, "{c}");
        assert_eq!(counter(&s, "checksum-dropped-frames"), 0, "{s}");
        assert_eq!(counter(&c, "checksum-dropped-frames"), 0, "{c}");
        // virtio-user (the client, which sends the Writes) has TSO from its backend (tso=1),
        // which hands the server the whole frames: one TCP segment each.
        let (tso, large) = (counter(&c, "port-tx-tso"), counter(&s, "port-rx-large"));
        if mode == "off" {
            assert_eq!((tso, large), (0, 0), "{c}\n{s}");
        } else {
            assert!(tso >= 100, "{c}");
            assert_eq!(large, tso, "{s}");
        }
        verified.push(counter(&s, "perf-verified-bytes"));
    }
    assert_eq!(verified[0], verified[1]);
    // The server checks its whole buffer, which every Write filled with the pattern.
    assert!(verified[0] >= 65536, "{verified:?}");
}

// Receive buffers of 512 octets on both sides of a vhost-user/virtio-user link: 1514-octet
// frames arrive in chained mbufs, which the ports copy into one; 64 KiB CRC Writes, every
// byte verified in the server's buffers.
#[test]
fn vhost_chained_mbuf_receive() {
    let l = Link::vhost("chained", IPS);
    l.add_port_keys("rx_buf = 512", "rx_buf = 512");
    let (s, c) = run(
        &l,
        &["perf", "write", "--crc", "--verify"],
        &[
            "perf",
            "write",
            "10.98.0.1",
            "-s",
            "65536",
            "-n",
            "200",
            "--crc",
        ],
    );
    assert!(c.contains(" 65536      200"), "{c}");
    assert!(counter(&s, "port-rx-chained") >= 200 * 44, "{s}");
    assert_eq!(counter(&s, "perf-verify-failures"), 0, "{s}");
    assert!(counter(&s, "perf-verified-bytes") >= 65536, "{s}");
    assert_eq!(counter(&s, "rdma-crc-errors"), 0, "{s}");
    assert_eq!(counter(&s, "checksum-dropped-frames"), 0, "{s}");
}

// RFC 8200 and IEEE 802.1Q over vhost-user/virtio-user, whose devices strip and insert the
// tags (DPDK's VLAN offloads, virtio's through rte_eth_tx_prepare): IPv6 only on VLAN 100,
// neighbour discovery resolving the peers, rping validated.
#[test]
fn vhost_rping_over_ipv6_on_a_vlan() {
    let l = Link::vhost("vlan6", None);
    l.add_port_keys(
        "ipv6 = \"fd00:98::1/64\"\nvlan = 100\nvlan_priority = 4",
        "ipv6 = \"fd00:98::2/64\"\nvlan = 100\nvlan_priority = 4",
    );
    let (s, c) = run(
        &l,
        &["rping", "-s"],
        &["rping", "-c", "-a", "fd00:98::1", "-C", "30", "-V"],
    );
    assert!(c.contains("rping: 30 pings"), "{c}");
    assert!(s.contains("connect request from [fd00:98::2]:"), "{s}");
    assert_eq!(counter(&c, "vlan-other-frames"), 0, "{c}");
    assert_eq!(counter(&c, "nd-failures"), 0, "{c}");
}

/// Every FPDU tshark's MPA dissector finds in `pcap`, with its CRC verdict: (good, bad),
/// and the first verdict line that is not good.
fn tshark_crc_verdicts(pcap: &std::path::Path) -> (usize, usize, String) {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args([
            "--disable-heuristic",
            "rpcrdma_iwarp",
            "-V",
            "-Y",
            "iwarp_ddp_rdmap",
        ])
        .output()
        .expect("run tshark");
    let text = String::from_utf8_lossy(&out.stdout);
    let checks: Vec<&str> = text.lines().filter(|l| l.contains("CRC check:")).collect();
    let good = checks.iter().filter(|l| l.contains("Good CRC32")).count();
    let other = checks
        .iter()
        .find(|l| !l.contains("Good CRC32"))
        .map_or(String::new(), |l| l.to_string());
    (good, checks.len() - good, other)
}

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

// The send path without the frame copy (issue #18 item 2, `tx_zero_copy = true`): over
// memif (without memif's own zero-copy) the client's FPDUs go out of the TCP engine's unit
// buffers, attached to the frames' mbufs. 64 KiB CRC Writes with that on and off give the same bytes, every one
// verified in the server's buffers; every payload lent to an mbuf comes back; with 1 % of
// the client's frames dropped, the retransmitted FPDUs (the same buffers again) carry good
// CRCs in tshark's MPA dissector on the server's capture.
#[test]
fn memif_zero_copy_send_on_and_off_give_identical_bytes() {
    let mut verified = Vec::new();
    for on in [true, false] {
        let l = Link::memif(&format!("zc-{on}"), IPS);
        let key = format!("tx_zero_copy = {on}");
        l.add_port_keys(&key, &key);
        let (s, c) = run(
            &l,
            &["perf", "write", "--crc", "--verify"],
            &[
                "perf",
                "write",
                "10.98.0.1",
                "-s",
                "65536",
                "-n",
                "300",
                "--crc",
            ],
        );
        assert!(c.contains(" 65536      300"), "{c}");
        assert_eq!(counter(&s, "perf-verify-failures"), 0, "{s}");
        assert_eq!(counter(&s, "rdma-crc-errors"), 0, "{s}");
        let external = counter(&c, "port-tx-external");
        let (lent, returned) = (
            counter(&c, "tx-payloads-lent"),
            counter(&c, "tx-payloads-returned"),
        );
        let whole = counter(&c, "port-tx-external-whole");
        if on {
            // 300 Writes of 64 KiB in segments of one FPDU each.
            assert!(external >= 300 * 45, "{c}");
            assert_eq!(lent, external, "{c}");
            // Nearly every FPDU's frame is one mbuf, its headers in the room in front of
            // it (not those sent before the route was cached).
            assert!(whole * 20 >= external * 19 && whole <= external, "{c}");
        } else {
            assert_eq!((external, whole), (0, 0), "{c}");
        }
        assert_eq!(returned, lent, "every lent payload came back: {c}");
        // The unit buffers cycle through the connection's pool: allocated for the window in
        // flight, not per unit.
        let allocated = counter(&c, "rdma-tx-buffers-allocated");
        assert!(allocated * 5 < counter(&c, "rdma-fpdus-sent"), "{c}");
        verified.push(counter(&s, "perf-verified-bytes"));
    }
    assert_eq!(verified[0], verified[1]);
    assert!(verified[0] >= 65536, "{verified:?}");

    let l = Link::memif("zc-loss", IPS);
    l.add_port_keys("tx_zero_copy = true", "tx_zero_copy = true");
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().to_str().unwrap().to_string();
    let (s, c) = run(
        &l,
        &[
            "perf",
            "write",
            "--crc",
            "--verify",
            "--capture-dir",
            &capture,
        ],
        &[
            "perf",
            "write",
            "10.98.0.1",
            "-s",
            "65536",
            "-n",
            "100",
            "--crc",
            "--fault",
            "drop=1%",
        ],
    );
    assert!(c.contains(" 65536      100"), "{c}");
    assert_eq!(counter(&s, "perf-verify-failures"), 0, "{s}");
    assert_eq!(counter(&s, "rdma-crc-errors"), 0, "{s}");
    assert!(counter(&c, "tcp-retransmits") > 0, "{c}");
    assert!(counter(&c, "port-tx-external") > 0, "{c}");
    assert!(counter(&c, "port-tx-external-whole") > 0, "{c}");
    assert_eq!(
        counter(&c, "tx-payloads-returned"),
        counter(&c, "tx-payloads-lent"),
        "{c}"
    );
    if tshark_available() {
        let pcap = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "pcap"))
            .expect("the server's capture");
        let (good, bad, other) = tshark_crc_verdicts(&pcap);
        assert_eq!(bad, 0, "FPDUs without a good CRC: {other}");
        assert!(good >= 100 * 45, "{good} FPDUs with a good CRC");
    }
}

// The same over vhost-user, whose backend (the server, net_vhost) copies the frames it sends
// into the virtio side's buffers by address: the server's Read Responses go out of its unit
// buffers (checksum offloads off, which that path needs), arrive with good CRCs and TCP
// checksums, and every payload lent comes back; with zero-copy off none is lent.
#[test]
fn vhost_zero_copy_send_of_read_responses() {
    for on in [true, false] {
        let l = Link::vhost(&format!("zc-{on}"), IPS);
        let key = format!("offloads = \"off\"\ntx_zero_copy = {on}");
        l.add_port_keys(&key, &key);
        let (s, c) = run(
            &l,
            &["perf", "read", "--crc"],
            &[
                "perf",
                "read",
                "10.98.0.1",
                "-s",
                "65536",
                "-n",
                "200",
                "--crc",
            ],
        );
        assert!(c.contains(" 65536      200"), "{c}");
        assert_eq!(counter(&c, "rdma-crc-errors"), 0, "{c}");
        assert_eq!(counter(&c, "checksum-dropped-frames"), 0, "{c}");
        let external = counter(&s, "port-tx-external");
        let whole = counter(&s, "port-tx-external-whole");
        if on {
            assert!(external >= 200 * 45, "{s}");
            // Read Responses framed in place go out as one mbuf each.
            assert!(whole * 2 >= external, "{s}");
        } else {
            assert_eq!((external, whole), (0, 0), "{s}");
        }
        assert_eq!(counter(&s, "tx-payloads-lent"), external, "{s}");
        assert_eq!(
            counter(&s, "tx-payloads-returned"),
            counter(&s, "tx-payloads-lent"),
            "{s}"
        );
    }
}
