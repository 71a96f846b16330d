//! Two `dataplane` processes joined by a DPDK memif link: `fwd --mode macswap` on the
//! server side reflects what `pktgen` sends from the client side.

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

fn config(dir: &std::path::Path, role: &str, lcore: u32) -> String {
    let sock = dir.join("memif.sock");
    let text = format!(
        "[eal]\nargs = [\"--no-huge\", \"-m\", \"512\", \"--no-pci\", \"-l\", \"{lcore}\", \
         \"--vdev\", \"net_memif0,role={role},id=0,socket={}\"]\n\
         [[ports]]\nname = \"m\"\nbackend = \"dpdk\"\ndevice = \"net_memif0\"\n",
        sock.display()
    );
    let path = dir.join(format!("{role}.toml"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn pktgen_through_a_macswap_forwarder_over_memif() {
    let dir = tempfile::tempdir().unwrap();
    let server = config(dir.path(), "server", 0);
    let client = config(dir.path(), "client", 1);
    let mut fwd = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["fwd", "--config", &server, "--mode", "macswap", "-d", "20"])
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
        "memif server did not start"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args([
            "pktgen",
            "--config",
            &client,
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
