//! Every shipped configuration parses; every broken one fails with the exact located error.

use std::path::{Path, PathBuf};

use dataplane::config::Config;

fn repo_configs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs")
}

fn bad_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad-configs")
}

#[test]
fn every_shipped_config_is_valid() {
    let mut n = 0;
    for entry in std::fs::read_dir(repo_configs()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let cfg = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!cfg.ports.is_empty(), "{}: no ports", path.display());
        n += 1;
    }
    assert!(n >= 6, "found only {n} configs");
}

#[test]
fn topology_configs_describe_their_links() {
    let load = |name: &str| Config::load(&repo_configs().join(name)).unwrap();
    let server = load("memif-pair-server.toml");
    let client = load("memif-pair-client.toml");
    assert!(server.needs_eal() && client.needs_eal());
    assert!(server.eal.args.iter().any(|a| a.contains("role=server")));
    assert!(client.eal.args.iter().any(|a| a.contains("role=client")));
    for name in ["vhost-server.toml", "vhost-client.toml"] {
        let c = load(name);
        assert!(
            c.eal.args.iter().any(|a| a == "--single-file-segments"),
            "{name} needs --single-file-segments"
        );
    }
    let tap = load("tap-kernel.toml");
    assert!(!tap.needs_eal());
    let soft = load("soft-pair.toml");
    assert_eq!(soft.ports.len(), 2);
    assert_eq!(soft.ports[0].device(), soft.ports[1].device());
}

#[test]
fn broken_configs_give_file_line_and_key() {
    let cases = [
        (
            "truncated.toml",
            "5: TOML syntax error: invalid string; expected `\"`, `'`",
        ),
        (
            "unknown-key.toml",
            "6: ports[0].rx_descs: unknown field `rx_descs`, expected one of `name`, `backend`, \
             `device`, `mac`, `ipv4`, `gateway`, `ipv6`, `gateway6`, `vlan`, `vlan_priority`, \
             `mtu`, `rx_desc`, `tx_desc`, `pool_size`, `promiscuous`, `start_wait`, `lcore`, \
             `queues`, `offloads`, `rx_buf`, `tx_zero_copy`, `capture`, `fault`",
        ),
        (
            "wrong-type.toml",
            "8: ports[0].mtu: invalid type: string \"1500\", expected an integer",
        ),
        (
            "out-of-range.toml",
            "8: ports[0].mtu: invalid value 70000 (must be 68..=9000)",
        ),
        (
            "bad-mac.toml",
            "5: ports[0].mac: invalid MAC address \"02:00:00:00:00:zz\" (expected 6 hex bytes \
             like 02:00:00:00:00:01)",
        ),
        (
            "bad-prefix.toml",
            "5: ports[0].ipv4: invalid prefix length \"33\" in \"10.99.1.1/33\" (must be 0..=32)",
        ),
        (
            "bad-ipv6.toml",
            "5: ports[0].ipv6: invalid IPv6 address \"fd00:99::1:\" in \"fd00:99::1:/64\"",
        ),
        (
            "gateway6-outside.toml",
            "6: ports[0].gateway6: gateway6 fd00:98::1 is outside fd00:99::1/64 and not \
             link-local",
        ),
        (
            "bad-offloads.toml",
            "6: ports[0].offloads: unknown variant `on`, expected `auto` or `off`",
        ),
        (
            "vlan-out-of-range.toml",
            "6: ports[0].vlan: invalid value 4095 (must be 1..=4094)",
        ),
        (
            "vlan-priority-without-vlan.toml",
            "6: ports[0].vlan_priority: vlan_priority set without vlan",
        ),
        (
            "duplicate-name.toml",
            "7: ports[1].name: duplicate port name \"p0\" (also ports[0])",
        ),
        (
            "unknown-backend.toml",
            "3: ports[0].backend: unknown variant `pcap`, expected one of `dpdk`, `tap`, `soft`",
        ),
        (
            "bad-fault-rate.toml",
            "7: ports[0].fault.drop: invalid rate \"150%\" (expected e.g. \"1.5%\" or \
             \"200ppm\", at most 100%)",
        ),
    ];
    let mut seen = 0;
    for (file, want) in cases {
        let path = bad_dir().join(file);
        let err = Config::load(&path).expect_err(file).to_string();
        assert_eq!(err, format!("{}:{want}", path.display()));
        seen += 1;
    }
    let on_disk = std::fs::read_dir(bad_dir()).unwrap().count();
    assert_eq!(seen, on_disk, "every file in tests/bad-configs has a case");
}

#[test]
fn missing_file_names_the_path() {
    let e = Config::load(Path::new("/nonexistent/x.toml")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "/nonexistent/x.toml: No such file or directory (os error 2)"
    );
}
