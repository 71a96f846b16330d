//! Two `dataplane` processes joined by a DPDK virtual link (memif, or vhost-user with
//! virtio-user): their configuration files, starting the server and waiting until it is
//! ready, stopping it however the test ends, and removing EAL's runtime directories.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::Duration;

/// Stops a process however the test ends: Ctrl-C first (so EAL cleans up), then kill.
pub struct KillOnDrop(pub Child);

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

/// Removes the EAL runtime directories of these file prefixes (EAL keeps a directory whose
/// `--file-prefix` was given explicitly).
pub struct RuntimeDirs(pub Vec<String>);

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

/// Writes `dir/<name>.toml`, a one-port configuration on `lcore` with these extra EAL
/// arguments (no PCI scan; no hugepages unless `eal` gives `-m`; no telemetry socket unless
/// `eal` has `--telemetry`; EAL's control threads on the lcore's CPU, not on the other
/// process's), port `m` on `device`, with `ipv4` (a /24, MTU 1500) if given; returns its path.
pub fn config(
    dir: &Path,
    name: &str,
    lcore: u32,
    eal: &[String],
    device: &str,
    ipv4: Option<&str>,
) -> String {
    let mut args = vec!["--no-pci".to_string()];
    if !eal.iter().any(|a| a == "-m") {
        args.extend(["--no-huge", "-m", "512"].map(String::from));
    }
    // DPDK 22.11 ignores --telemetry (telemetry is on unless --no-telemetry).
    if !eal.iter().any(|a| a == "--telemetry") {
        args.push("--no-telemetry".to_string());
    }
    args.extend_from_slice(eal);
    args.extend(["-l".to_string(), lcore.to_string()]);
    let quoted: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    let mut text = format!(
        "[eal]\nargs = [{}]\ncontrol_threads = \"main-lcore\"\n[poll]\nstats_interval = 0\n[[ports]]\nname = \"m\"\nbackend = \"dpdk\"\ndevice = \"{device}\"\n",
        quoted.join(", ")
    );
    if let Some(ip) = ipv4 {
        text.push_str(&format!("ipv4 = \"{ip}/24\"\nmtu = 1500\n"));
    }
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A virtual link's two configurations (server on lcore 0, client on lcore 1) in a
/// temporary directory; both EAL runtime directories are removed on drop.
pub struct Link {
    /// Holds the configurations, the link's socket and the server's stderr.
    pub dir: tempfile::TempDir,
    /// The server's configuration file.
    pub server: String,
    /// The client's configuration file.
    pub client: String,
    tag: String,
    _runtime: RuntimeDirs,
}

impl Link {
    /// A memif link; `tag` makes the EAL file prefixes unique; `ipv4` are the server's and
    /// the client's addresses, if the ports have any.
    pub fn memif(tag: &str, ipv4: Option<[&str; 2]>) -> Link {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("memif.sock").display().to_string();
        let vdev = |role: &str| format!("net_memif0,role={role},id=0,socket={sock}");
        Link::new(dir, &format!("memif-{tag}"), ipv4, &[], |role| {
            (vdev(role), "net_memif0")
        })
    }

    /// A memif link like [`Link::memif`] with DPDK telemetry on in both processes (its
    /// socket is `/var/run/dpdk/<Link::file_prefix(role)>/dpdk_telemetry.v2`).
    pub fn memif_telemetry(tag: &str, ipv4: Option<[&str; 2]>) -> Link {
        Link::memif_with(tag, ipv4, &["--telemetry"])
    }

    /// A memif link like [`Link::memif`] with more EAL arguments on both sides (`-m MIB`
    /// puts DPDK's memory in hugepages).
    pub fn memif_with(tag: &str, ipv4: Option<[&str; 2]>, eal: &[&str]) -> Link {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("memif.sock").display().to_string();
        let vdev = |role: &str| format!("net_memif0,role={role},id=0,socket={sock}");
        let extra: Vec<String> = eal.iter().map(|a| a.to_string()).collect();
        Link::new(dir, &format!("memif-{tag}"), ipv4, &extra, |role| {
            (vdev(role), "net_memif0")
        })
    }

    /// The EAL file prefix of "server" or "client" of a link made with `tag`.
    fn prefix(tag: &str, role: &str) -> String {
        format!("two-process-{tag}-{role}-{}", std::process::id())
    }

    /// The EAL file prefix of this link's "server" or "client".
    pub fn file_prefix(&self, role: &str) -> String {
        Link::prefix(&self.tag, role)
    }

    /// A vhost-user link: the server is the vhost-user backend, the client virtio-user.
    pub fn vhost(tag: &str, ipv4: Option<[&str; 2]>) -> Link {
        Link::vhost_with(tag, ipv4, "")
    }

    /// A vhost-user link like [`Link::vhost`] whose backend offers TSO to the virtio side
    /// (`tso=1`: virtio-user may send frames of up to 64 KiB, which the backend takes whole).
    pub fn vhost_tso(tag: &str, ipv4: Option<[&str; 2]>) -> Link {
        Link::vhost_with(tag, ipv4, ",tso=1")
    }

    /// A vhost-user link with `devargs` added to the backend's.
    fn vhost_with(tag: &str, ipv4: Option<[&str; 2]>, devargs: &str) -> Link {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("vhost.sock").display().to_string();
        // Both sides need --single-file-segments (vhost-user's memory table limit).
        let ssf = ["--single-file-segments".to_string()];
        Link::new(dir, &format!("vhost-{tag}"), ipv4, &ssf, |role| {
            if role == "server" {
                (
                    format!("net_vhost0,iface={sock},queues=1{devargs}"),
                    "net_vhost0",
                )
            } else {
                (format!("virtio_user0,path={sock},queues=1"), "virtio_user0")
            }
        })
    }

    /// Adds `server` and `client` (TOML lines) to the port of each side's configuration.
    pub fn add_port_keys(&self, server: &str, client: &str) {
        for (path, lines) in [(&self.server, server), (&self.client, client)] {
            let mut text = std::fs::read_to_string(path).unwrap();
            text.push_str(lines);
            text.push('\n');
            std::fs::write(path, text).unwrap();
        }
    }

    /// `vdev(role)` gives the `--vdev` argument and the port's device name of "server" and
    /// "client".
    fn new(
        dir: tempfile::TempDir,
        tag: &str,
        ipv4: Option<[&str; 2]>,
        extra: &[String],
        vdev: impl Fn(&str) -> (String, &'static str),
    ) -> Link {
        let prefix = |role: &str| Link::prefix(tag, role);
        let side = |role: &str, lcore: u32, ip: Option<&str>| {
            let (vdev, device) = vdev(role);
            let mut eal = vec!["--file-prefix".to_string(), prefix(role)];
            eal.extend_from_slice(extra);
            eal.extend(["--vdev".to_string(), vdev]);
            config(dir.path(), role, lcore, &eal, device, ip)
        };
        Link {
            server: side("server", 0, ipv4.map(|[s, _]| s)),
            client: side("client", 1, ipv4.map(|[_, c]| c)),
            _runtime: RuntimeDirs(vec![prefix("server"), prefix("client")]),
            tag: tag.to_string(),
            dir,
        }
    }

    /// Starts `dataplane args` and reads its standard output until a line contains
    /// `ready`; its standard error goes to `server.err` in the link's directory. Panics with
    /// both if it exits first.
    pub fn start_server(&self, args: &[&str], ready: &str) -> Server {
        let err = self.dir.path().join("server.err");
        let mut child = Command::new(env!("CARGO_BIN_EXE_dataplane"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let child = KillOnDrop(child);
        let mut reader = BufReader::new(stdout);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 {
                let text = std::fs::read_to_string(&err).unwrap_or_default();
                panic!("server did not start: {head}\n{text}");
            }
            head.push_str(&line);
            if line.contains(ready) {
                break;
            }
        }
        Server {
            child,
            reader,
            head,
            err,
        }
    }
}

/// A server process started by [`Link::start_server`]; stopped on drop if still running.
pub struct Server {
    child: KillOnDrop,
    reader: BufReader<ChildStdout>,
    head: String,
    err: PathBuf,
}

impl Server {
    /// Waits for the server to exit by itself: its status, whole standard output and
    /// standard error.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let mut rest = String::new();
        self.reader.read_to_string(&mut rest).unwrap();
        let status = self.child.0.wait().unwrap();
        let err = std::fs::read_to_string(&self.err).unwrap_or_default();
        (status, std::mem::take(&mut self.head) + &rest, err)
    }
}

/// The last value of counter `name` (a `name: value` line) in a process's output.
pub fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}
