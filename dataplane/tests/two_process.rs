//! Two `dataplane` processes joined by a DPDK virtual link (memif, or vhost-user with
//! virtio-user): `fwd --mode macswap` on the server side reflects what `pktgen` sends from
//! the client side.

#![cfg(feature = "dpdk")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Stops the forwarder however the test ends: Ctrl-C first (so EAL cleans up), then kill.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .output();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes a one-port configuration with these EAL arguments and returns its path.
fn config(dir: &std::path::Path, name: &str, lcore: u32, eal: &[&str], device: &str) -> String {
    let mut args = vec!["--no-huge", "-m", "512", "--no-pci"];
    args.extend_from_slice(eal);
    let lcore = lcore.to_string();
    args.extend_from_slice(&["-l", &lcore]);
    let quoted: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        "[eal]\nargs = [{}]\n[[ports]]\nname = \"m\"\nbackend = \"dpdk\"\ndevice = \"{device}\"\n",
        quoted.join(", ")
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Starts the forwarder on `server`, sends 5000 frames from `client`, and checks that
/// (nearly) all come back in order.
fn reflect(server: &str, client: &str) {
    let mut fwd = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["fwd", "--config", server, "--mode", "macswap", "-d", "20"])
        .args(["--stats-interval", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = fwd.stdout.take().unwrap();
    let _fwd = KillOnDrop(fwd);
    // The server listens once it reports forwarding; then the client may connect.
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    assert!(
        lines.any(|l| l.starts_with("forwarding")),
        "forwarder did not start"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args([
            "pktgen",
            "--config",
            client,
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
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("memif.sock");
    let dev = |role: &str| format!("net_memif0,role={role},id=0,socket={}", sock.display());
    let server = config(
        dir.path(),
        "server",
        0,
        &["--vdev", &dev("server")],
        "net_memif0",
    );
    let client = config(
        dir.path(),
        "client",
        1,
        &["--vdev", &dev("client")],
        "net_memif0",
    );
    reflect(&server, &client);
}

#[test]
fn pktgen_through_a_macswap_forwarder_over_vhost_user() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("vhost.sock");
    // Both sides need --single-file-segments (vhost-user's memory table limit).
    let server_dev = format!("net_vhost0,iface={},queues=1", sock.display());
    let client_dev = format!("virtio_user0,path={},queues=1", sock.display());
    let ssf = "--single-file-segments";
    let server = config(
        dir.path(),
        "server",
        0,
        &[ssf, "--vdev", &server_dev],
        "net_vhost0",
    );
    let client = config(
        dir.path(),
        "client",
        1,
        &[ssf, "--vdev", &client_dev],
        "virtio_user0",
    );
    reflect(&server, &client);
}
