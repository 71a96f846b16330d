//! Two `dataplane` processes speaking iWARP over a DPDK virtual link (memif, or vhost-user
//! with virtio-user): rping and perf, server and client, with CRC, markers and injected
//! reordering and loss.

#![cfg(feature = "dpdk")]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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

/// A one-port configuration with these EAL arguments; returns its path.
fn config(
    dir: &std::path::Path,
    name: &str,
    lcore: u32,
    eal: &[String],
    device: &str,
    ip: &str,
) -> String {
    let mut args: Vec<String> = ["--no-huge", "-m", "512", "--no-pci"]
        .map(String::from)
        .to_vec();
    args.extend_from_slice(eal);
    args.extend(["-l".to_string(), lcore.to_string()]);
    let quoted: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    let text = format!(
        "[eal]\nargs = [{}]\n[poll]\nstats_interval = 0\n[[ports]]\nname = \"m\"\nbackend = \"dpdk\"\ndevice = \"{device}\"\nipv4 = \"{ip}/24\"\nmtu = 1500\n",
        quoted.join(", ")
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

struct Link {
    _dir: tempfile::TempDir,
    server: String,
    client: String,
}

fn memif(name: &str) -> Link {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("memif.sock").display().to_string();
    let tag = std::process::id();
    let eal = |role: &str| {
        vec![
            "--file-prefix".to_string(),
            format!("rdma-memif-{name}-{role}-{tag}"),
            "--vdev".to_string(),
            format!("net_memif0,role={role},id=0,socket={sock}"),
        ]
    };
    Link {
        server: config(
            dir.path(),
            "s",
            0,
            &eal("server"),
            "net_memif0",
            "10.98.0.1",
        ),
        client: config(
            dir.path(),
            "c",
            1,
            &eal("client"),
            "net_memif0",
            "10.98.0.2",
        ),
        _dir: dir,
    }
}

fn vhost(name: &str) -> Link {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("vhost.sock").display().to_string();
    let tag = std::process::id();
    let s = vec![
        "--file-prefix".to_string(),
        format!("rdma-vhost-{name}-s-{tag}"),
        "--single-file-segments".to_string(),
        "--vdev".to_string(),
        format!("net_vhost0,iface={sock},queues=1"),
    ];
    let c = vec![
        "--file-prefix".to_string(),
        format!("rdma-vhost-{name}-c-{tag}"),
        "--single-file-segments".to_string(),
        "--vdev".to_string(),
        format!("virtio_user0,path={sock},queues=1"),
    ];
    Link {
        server: config(dir.path(), "s", 0, &s, "net_vhost0", "10.98.0.1"),
        client: config(dir.path(), "c", 1, &c, "virtio_user0", "10.98.0.2"),
        _dir: dir,
    }
}

/// One pair of busy-polling processes at a time: the cases share two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `server` until it says it listens, then `client`; both must exit 0. Returns both
/// outputs.
fn run(link: &Link, server: &[&str], client: &[&str]) -> (String, String) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut srv = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(server)
        .args(["--config", &link.server, "--heap", "--time-limit", "90"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(link._dir.path().join("server.err")).unwrap())
        .spawn()
        .unwrap();
    let stdout = srv.stdout.take().unwrap();
    let mut srv = KillOnDrop(srv);
    let mut reader = BufReader::new(stdout);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("server did not start: {head}");
        }
        head.push_str(&line);
        if line.contains("listening") {
            break;
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(client)
        .args(["--config", &link.client, "--heap", "--time-limit", "90"])
        .output()
        .unwrap();
    let ctext = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {ctext}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    let status = srv.0.wait().unwrap();
    let stext = head + &rest;
    let serr = std::fs::read_to_string(link._dir.path().join("server.err")).unwrap_or_default();
    assert!(
        status.success(),
        "server failed ({status}): {stext}\n{serr}"
    );
    (stext, ctext)
}

fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

// RFC 5040 §5.1–5.3 via rping's exchange, CRC on (RFC 5044 §6.5); every ping validated.
#[test]
fn memif_rping_crc() {
    let l = memif("rping");
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
    let l = memif("reorder");
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
    let l = memif("ops");
    let (_, c) = run(
        &l,
        &["perf", "read"],
        &["perf", "read", "10.98.0.1", "-s", "1048576", "-n", "20"],
    );
    assert!(c.contains(" 1048576    20"), "{c}");
    let (_, c) = run(
        &l,
        &["perf", "send"],
        &["perf", "send", "10.98.0.1", "--lat", "-s", "8", "-n", "200"],
    );
    assert!(c.contains(" 8      200"), "{c}");
    let (_, c) = run(
        &l,
        &["perf", "atomic"],
        &["perf", "atomic", "10.98.0.1", "-n", "200"],
    );
    assert!(c.contains(" 8          200"), "{c}");
}

#[test]
fn vhost_rping_and_perf_write() {
    let l = vhost("rping");
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
