//! The `rping` and `perf` commands from the outside: the in-process loopback over the
//! software pair, and one-line usage errors with exit code 2.

use std::process::Command;

fn dataplane(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn perf_loopback_on_the_software_pair() {
    let (code, out, err) = dataplane(&[
        "perf",
        "write",
        "--loopback",
        "-s",
        "4096",
        "-n",
        "200",
        "--crc",
        "--config",
        "configs/rdma-soft-pair.toml",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("BW peak[MB/sec]"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with(" 4096       200 ")),
        "{out}"
    );
    assert!(out.contains("rdma-crc-errors: 0"), "{out}");
}

// RFC 8200 / IEEE 802.1Q: the same loopback over IPv6 only, on VLAN 100 with priority 3.
// Every frame either end sent is tagged so, neighbour discovery resolved the peer, and the
// connection ran over the IPv6 addresses.
#[test]
fn perf_loopback_over_ipv6_on_a_vlan() {
    let dir = std::env::temp_dir().join(format!("dp-cli6-{}", std::process::id()));
    let (code, out, err) = dataplane(&[
        "perf",
        "write",
        "--loopback",
        "-s",
        "4096",
        "-n",
        "200",
        "--crc",
        "--config",
        "configs/rdma-soft-pair6.toml",
        "--capture-dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("to [fd00:99:7::1]:18515"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with(" 4096       200 ")),
        "{out}"
    );
    assert!(out.contains("rdma-crc-errors: 0"), "{out}");
    let packets = dataplane::pcap::read_file(&dir.join("b.pcap")).unwrap();
    assert!(packets.len() > 200);
    let mut ipv6 = 0;
    for p in &packets {
        let l2 = dataplane::frame::parse_l2(&p.data, None).unwrap();
        assert_eq!(
            l2.tci,
            Some(0x6064),
            "frame {}: VLAN 100, priority 3",
            p.number
        );
        if let Some(seg) = dataplane::pcap::tcp_segment(p) {
            assert!(seg.src.is_ipv6() && seg.dst.is_ipv6());
            ipv6 += 1;
        }
    }
    assert!(ipv6 > 200, "{ipv6} TCP segments");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_are_one_line_and_exit_2() {
    for args in [
        &["rping", "--config", "configs/rdma-soft-pair.toml"][..],
        &["rping", "-c", "--config", "configs/rdma-soft-pair.toml"][..],
        &[
            "rping",
            "-s",
            "-S",
            "4",
            "--config",
            "configs/rdma-soft-pair.toml",
        ][..],
        &[
            "perf",
            "atomic",
            "-s",
            "16",
            "--config",
            "configs/rdma-soft-pair.toml",
        ][..],
        // -a takes an IPv4 or an IPv6 address, nothing else.
        &[
            "rping",
            "-c",
            "-a",
            "fd00::1::2",
            "--config",
            "configs/rdma-soft-pair.toml",
        ][..],
    ] {
        let (code, out, err) = dataplane(args);
        assert_eq!(code, 2, "{args:?}: {out}\n{err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

// Issue #17: `perf --loopback` on two lanes of the software link (configs/rdma-soft-lanes):
// each lane runs both ends of its share of the QPs; the lanes' iterations add up to -n, every
// connection is on its own lane on both ends, and the server found every buffer as written.
#[test]
fn perf_loopback_on_two_lanes_of_the_software_link() {
    let (code, out, err) = dataplane(&[
        "perf",
        "write",
        "--loopback",
        "-q",
        "6",
        "-s",
        "8192",
        "-n",
        "600",
        "--crc",
        "--verify",
        "--config",
        "configs/rdma-soft-lanes.toml",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    for lane in ["lane-0 (thread): ", "lane-1 (thread): "] {
        let line = out
            .lines()
            .find(|l| l.starts_with(lane))
            .unwrap_or_else(|| panic!("no {lane} in {out}"));
        // Both ends of 3 QPs each: 6 connections established on each lane.
        for want in [
            " established 6 ",
            " foreign 0 ",
            " resets-sent 0 ",
            " crc-errors 0 ",
        ] {
            assert!(line.contains(want), "{want}: {line}");
        }
    }
    assert!(
        out.lines().any(|l| l.starts_with(" 8192       600 ")),
        "{out}"
    );
    assert!(out.contains("perf-verified-bytes: 49152"), "{out}");
    assert!(out.contains("perf-verify-failures: 0"), "{out}");
}
