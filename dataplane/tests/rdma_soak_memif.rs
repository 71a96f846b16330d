//! Issue 8's fault mix between two `dataplane soak` processes over a DPDK memif pair: 1 %
//! loss, 1 % reordering, 0.1 % duplication and 0.01 % bit flips on the frames each process
//! receives, a verified RDMA Write + Read + Send mix on several QPs with CRCs on. The client
//! exits 0 only if every byte matched on both sides (the server's verdict comes back in a
//! final Send); the server exits 0 only if every message it got matched.
//! (`testbed/soak --memif` runs the same between release builds for 1 GiB or N minutes.)

#![cfg(feature = "dpdk")]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Stops a process however the test ends: Ctrl-C first (so EAL cleans up), then kill.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
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

/// Removes the EAL runtime directories of both processes (EAL keeps a directory whose
/// `--file-prefix` was given explicitly).
struct RuntimeDirs(Vec<String>);

impl Drop for RuntimeDirs {
    fn drop(&mut self) {
        let mut bases = vec!["/var/run/dpdk".to_string(), "/tmp/dpdk".to_string()];
        if let Ok(x) = std::env::var("XDG_RUNTIME_DIR") {
            bases.push(format!("{x}/dpdk"));
        }
        for b in &bases {
            for p in &self.0 {
                let _ = std::fs::remove_dir_all(format!("{b}/{p}"));
            }
        }
    }
}

fn prefix(role: &str) -> String {
    format!("soak-memif-{role}-{}", std::process::id())
}

/// A one-port memif configuration for `role` pinned to `lcore`; returns its path.
fn config(dir: &std::path::Path, role: &str, lcore: u32, ip: &str) -> String {
    let sock = dir.join("memif.sock").display().to_string();
    let args = [
        "--no-huge".to_string(),
        "-m".to_string(),
        "512".to_string(),
        "--no-pci".to_string(),
        "--no-telemetry".to_string(),
        "--file-prefix".to_string(),
        prefix(role),
        "--vdev".to_string(),
        format!("net_memif0,role={role},id=0,socket={sock}"),
        "-l".to_string(),
        lcore.to_string(),
    ];
    let quoted: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        "[eal]\nargs = [{}]\n[poll]\nstats_interval = 0\n[[ports]]\nname = \"m\"\nbackend = \"dpdk\"\ndevice = \"net_memif0\"\nipv4 = \"{ip}/24\"\nmtu = 1500\n",
        quoted.join(", ")
    );
    let path = dir.join(format!("{role}.toml"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// The fault mix on received frames, with this process's seed.
fn fault_mix(seed: u32) -> String {
    format!("direction=rx,seed={seed},drop=1%,reorder=1%,duplicate=0.1%,corrupt=0.01%")
}

// RFC 5044 §4 (MPA over TCP's reliable stream), RFC 5040 §5.1–5.3 (Write, Read, Send
// semantics): through loss, reordering, duplication and bit flips on a real DPDK link
// between two processes, every Write (read back), Read and Send arrives byte-exact.
#[test]
fn memif_fault_mix_soak_is_byte_exact() {
    let dir = tempfile::tempdir().unwrap();
    let _runtime = RuntimeDirs(vec![prefix("server"), prefix("client")]);
    let server_cfg = config(dir.path(), "server", 0, "10.97.0.1");
    let client_cfg = config(dir.path(), "client", 1, "10.97.0.2");
    let started = Instant::now();
    let mut srv = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["soak", "--crc", "--heap", "--time-limit", "100"])
        .args(["--config", &server_cfg, "--fault", &fault_mix(1)])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("server.err")).unwrap())
        .spawn()
        .unwrap();
    let stdout = srv.stdout.take().unwrap();
    let mut srv = KillOnDrop(srv);
    let mut reader = BufReader::new(stdout);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            let err = std::fs::read_to_string(dir.path().join("server.err")).unwrap_or_default();
            panic!("server did not start: {head}\n{err}");
        }
        head.push_str(&line);
        if line.contains("listening") {
            break;
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args([
            "soak",
            "10.97.0.1",
            "--qps",
            "6",
            "--bytes",
            "32MiB",
            "--seed",
            "9",
        ])
        .args(["--crc", "--heap", "--time-limit", "100", "--stall", "20"])
        .args(["--config", &client_cfg, "--fault", &fault_mix(2)])
        .output()
        .unwrap();
    let c = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    let status = srv.0.wait().unwrap();
    let s = head + &rest;
    let serr = std::fs::read_to_string(dir.path().join("server.err")).unwrap_or_default();
    println!(
        "{c}\n{s}\n(two processes, {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "client failed: {c}\n{}\nserver: {s}\n{serr}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status.success(), "server failed ({status}): {s}\n{serr}");
    assert!(c.contains("soak-result: ok") && s.contains("soak-result: ok"));
    // Every octet moved was compared: Write + Read + Send ≥ 32 MiB, and the server verified
    // exactly what the client sent.
    let (w, r, sent) = (
        counter(&c, "soak-written-bytes"),
        counter(&c, "soak-read-bytes"),
        counter(&c, "soak-sent-bytes"),
    );
    assert!(w + r + sent >= 32 << 20, "{c}");
    assert!(w > 0 && r > w && sent > 0, "{c}");
    assert_eq!(counter(&c, "soak-server-verified-bytes"), sent);
    assert_eq!(counter(&s, "soak-received-bytes"), sent);
    // The faults were really injected, on both ports.
    for f in ["fault-dropped", "fault-reordered", "fault-duplicated"] {
        assert!(counter(&c, f) > 0 && counter(&s, f) > 0, "{f}: {c}\n{s}");
    }
    // Loss was repaired by retransmission; nothing ended in a Terminate.
    assert!(counter(&c, "tcp-retransmits") + counter(&s, "tcp-retransmits") > 0);
    for t in ["rdma-terminates-sent", "rdma-terminates-received"] {
        assert_eq!(counter(&c, t) + counter(&s, t), 0, "{t}");
    }
}
