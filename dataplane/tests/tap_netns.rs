//! `dataplane run` on a TAP port answers ARP and ping from the Linux kernel. The kernel side
//! of the TAP is moved into a network namespace this test creates (and always deletes), so
//! the traffic stays on that link. Needs root (as in CI).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Deletes the namespace and stops the data plane however the test ends.
struct Cleanup {
    netns: String,
    child: Option<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            // Ctrl-C first so EAL can clean up, then kill.
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .output();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && !matches!(c.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

fn sh(args: &[&str]) -> Output {
    let o = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        o.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Moves the kernel side of the TAP `tap` into the namespace `netns`, gives it `cidr` and
/// brings it up.
fn kernel_side(tap: &str, netns: &str, cidr: &str) {
    sh(&["ip", "link", "set", tap, "netns", netns]);
    sh(&["ip", "-n", netns, "addr", "add", cidr, "dev", tap]);
    sh(&["ip", "-n", netns, "link", "set", tap, "up"]);
}

/// The kernel's counter `name` in the namespace `netns` (`nstat -az`), and nstat's output.
fn kernel_counter(netns: &str, name: &str) -> (Option<u64>, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "nstat", "-az", name])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok());
    (value, text)
}

/// Runs `dataplane run` on `config` (whose port `tap0` at 10.99.7.1, MAC 02:00:00:00:07:01,
/// makes the kernel interface `tap`), pings it 3 times from a new namespace `netns`, stops it
/// with Ctrl-C and checks the summary. `running` is the start line to wait for; `row` the
/// summary row of `tap0`.
fn ping_dataplane(config: &str, tap: &str, netns: &str, running: &str, row: usize) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tap.toml");
    std::fs::write(&cfg, config).unwrap();
    let (tap, netns) = (tap.to_string(), netns.to_string());

    let mut guard = Cleanup {
        netns: netns.clone(),
        child: None,
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["run", "--config", cfg.to_str().unwrap(), "--duration", "30"])
        .args(["--stats-interval", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    guard.child = Some(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Wait for the data plane to report it is running (the TAP exists then).
    let start = Instant::now();
    let mut out = Vec::new();
    while !out.iter().any(|l: &String| l.starts_with(running)) {
        let left = Duration::from_secs(10).saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(l) => out.push(l),
            Err(_) => panic!("dataplane did not start: {out:?}"),
        }
    }

    sh(&["ip", "netns", "add", &netns]);
    kernel_side(&tap, &netns, "10.99.7.2/24");
    let ping = Command::new("ip")
        .args([
            "netns", "exec", &netns, "ping", "-c", "3", "-i", "0.2", "-W", "2",
        ])
        .arg("10.99.7.1")
        .output()
        .unwrap();
    let ping_out = String::from_utf8_lossy(&ping.stdout);
    assert!(ping.status.success(), "ping failed: {ping_out}");
    assert!(ping_out.contains("3 received"), "{ping_out}");
    // RFC 826: the kernel learned our MAC from the ARP reply.
    let neigh = sh(&["ip", "-n", &netns, "neigh", "show", "10.99.7.1"]);
    let neigh = String::from_utf8_lossy(&neigh.stdout);
    assert!(neigh.contains("02:00:00:00:07:01"), "{neigh}");

    // Ctrl-C ends the run cleanly with the summary.
    let child = guard.child.as_mut().unwrap();
    sh(&["kill", "-INT", &child.id().to_string()]);
    let status = child.wait().unwrap();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    guard.child = None;
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(2)) {
        out.push(l);
    }
    let text = out.join("\n");
    assert!(text.contains("(interrupted)"), "{text}");
    let h = out
        .iter()
        .position(|l| l.contains("echo_reply"))
        .unwrap_or_else(|| panic!("{text}"));
    let header: Vec<&str> = out[h].split_whitespace().collect();
    let row: Vec<&str> = out[h + row].split_whitespace().collect();
    assert_eq!(row[0], "tap0", "{text}");
    let col = |name: &str| -> u64 {
        let i = header.iter().position(|c| *c == name).unwrap();
        row[i].parse().unwrap()
    };
    assert_eq!(col("echo_reply"), 3, "{text}");
    assert!(col("arp_reply") >= 1, "{text}");
}

#[test]
fn kernel_pings_the_dataplane_over_tap_in_a_netns() {
    let pid = std::process::id();
    let tap = format!("dpt{}", pid % 1_000_000);
    // The TAP port runs on a second poll loop (its own thread); a soft link on the main
    // loop keeps that one busy meanwhile.
    let config = format!(
        "[[ports]]\nname = \"s0\"\nbackend = \"soft\"\ndevice = \"l\"\n\
         [[ports]]\nname = \"s1\"\nbackend = \"soft\"\ndevice = \"l\"\n\
         [[ports]]\nname = \"tap0\"\nbackend = \"tap\"\ndevice = \"{tap}\"\n\
         mac = \"02:00:00:00:07:01\"\nipv4 = \"10.99.7.1/24\"\nlcore = 1\n"
    );
    ping_dataplane(
        &config,
        &tap,
        &format!("dpcore{pid}"),
        "running 2 poll loops",
        3,
    );
}

/// The same through DPDK: the `net_tap` PMD makes the kernel interface, the data plane
/// drives it as an ethdev.
#[cfg(feature = "dpdk")]
#[test]
fn kernel_pings_a_dpdk_port_over_net_tap_in_a_netns() {
    let pid = std::process::id();
    let tap = format!("dpk{}", pid % 1_000_000);
    let config = format!(
        "[eal]\nargs = [\"--no-huge\", \"-m\", \"512\", \"--no-pci\", \
         \"--vdev\", \"net_tap0,iface={tap}\"]\n\
         [[ports]]\nname = \"tap0\"\nbackend = \"dpdk\"\ndevice = \"net_tap0\"\n\
         mac = \"02:00:00:00:07:01\"\nipv4 = \"10.99.7.1/24\"\n"
    );
    ping_dataplane(
        &config,
        &tap,
        &format!("dpcorek{pid}"),
        "running 1 poll loop",
        1,
    );
}

/// TCP between the kernel and a DPDK port over `net_tap` with the device's offloads
/// (`offloads = "auto"`: IPv4 and TCP checksums both ways, no TSO there): the kernel sends
/// 4 MB to `dataplane tcp echo`, which sends it back; every byte comes back unchanged, so
/// the checksums the device filled were right and those it verified were taken.
#[cfg(feature = "dpdk")]
#[test]
fn kernel_tcp_through_a_dpdk_port_with_offloads_over_net_tap() {
    let pid = std::process::id();
    let tap = format!("dpo{}", pid % 1_000_000);
    let netns = format!("dpoffl{pid}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tap.toml");
    std::fs::write(
        &cfg,
        format!(
            "[eal]\nargs = [\"--no-huge\", \"-m\", \"512\", \"--no-pci\", \
             \"--vdev\", \"net_tap0,iface={tap}\"]\n\
             [[ports]]\nname = \"tap0\"\nbackend = \"dpdk\"\ndevice = \"net_tap0\"\n\
             mac = \"02:00:00:00:08:01\"\nipv4 = \"10.99.8.1/24\"\noffloads = \"auto\"\n"
        ),
    )
    .unwrap();
    let mut guard = Cleanup {
        netns: netns.clone(),
        child: None,
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["tcp", "echo", "--listen", "7000", "--config"])
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    guard.child = Some(child);
    let err_text = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let start = Instant::now();
    let mut out = Vec::new();
    while !out.iter().any(|l: &String| l.contains("listening on")) {
        let left = Duration::from_secs(10).saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(l) => out.push(l),
            Err(_) => panic!("dataplane did not start: {out:?}"),
        }
    }
    sh(&["ip", "netns", "add", &netns]);
    kernel_side(&tap, &netns, "10.99.8.2/24");
    // The kernel's client: 4 MB of a pattern out, all of it back, compared.
    let client = r#"
import socket, threading
data = bytes((i * 7 + i // 251) & 0xff for i in range(4 << 20))
s = socket.create_connection(("10.99.8.1", 7000), timeout=20)
t = threading.Thread(target=s.sendall, args=(data,))
t.start()
got = bytearray()
while len(got) < len(data):
    b = s.recv(1 << 20)
    if not b:
        break
    got += b
t.join()
print("echoed", len(got), "identical" if bytes(got) == data else "DIFFERENT")
"#;
    let run = Command::new("ip")
        .args(["netns", "exec", &netns, "python3", "-c", client])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(said.contains("echoed 4194304 identical"), "{said}");
    let child = guard.child.as_mut().unwrap();
    sh(&["kill", "-INT", &child.id().to_string()]);
    let _ = child.wait();
    guard.child = None;
    let err = err_text.join().unwrap();
    assert!(
        err.contains("port tap0: offloads tx ipv4-cksum tcp-cksum, rx ipv4-cksum tcp-cksum"),
        "{err}"
    );
}

/// RFC 7323 §5.3/§5.5 against the Linux kernel's PAWS test: our TSval ticks in microseconds,
/// so after an idle period of more than 2^31 µs (35.8 minutes) a peer that kept TS.Recent
/// (Linux before 6.7 for 24 days; this kernel until 35.8 real minutes have passed) drops our
/// next segments as old duplicates, unless the idle connection kept the peer's TS.Recent
/// fresh. The engine's clock is an input (sans-IO): here it is advanced 10 s per poll
/// iteration through 40 idle minutes while the kernel's clock moves a few real seconds, then
/// 1000 octets must reach the kernel's socket at once, with its `TcpExtPAWSEstab` still 0.
#[test]
fn linux_accepts_data_after_forty_idle_minutes_of_the_engines_clock() {
    use dataplane::config::Ipv4Cidr;
    use dataplane::lcore::{PollLoop, PortAddr};
    use dataplane::port::tap::TapPort;
    use dataplane::port::PortInfo;
    use dataplane::tcp_handler::{TcpHandler, TcpService};
    use std::net::{Ipv4Addr, SocketAddrV4};
    use tcp::{Engine, StreamSocket};

    struct Quiet;
    type Loop = PollLoop<TapPort, TcpHandler<StreamSocket, (), Quiet>>;
    impl TcpService<StreamSocket, ()> for Quiet {
        fn work(&mut self, tcp: &mut Engine<StreamSocket>, _: &mut (), _: tcp::Instant) {
            while tcp.poll_event().is_some() {}
        }
    }

    let pid = std::process::id();
    let tap = format!("dpw{}", pid % 1_000_000);
    let netns = format!("dppaws{pid}");
    let _guard = Cleanup {
        netns: netns.clone(),
        child: None,
    };
    let info = PortInfo {
        name: "tap0".into(),
        mac: [0x02, 0, 0, 0, 0x0d, 0x01],
        mtu: 1500,
    };
    let port = TapPort::open(&tap, info).expect("open the TAP (needs root)");
    sh(&["ip", "netns", "add", &netns]);
    kernel_side(&tap, &netns, "10.99.13.2/24");
    // The kernel's server: prints the octets received so far after every read.
    let server = r#"
import socket
l = socket.socket()
l.bind(("10.99.13.2", 7000))
l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
total = 0
while True:
    b = c.recv(65536)
    if not b:
        break
    total += len(b)
    print("got", total, flush=True)
"#;
    let mut kernel = Command::new("ip")
        .args(["netns", "exec", &netns, "python3", "-u", "-c", server])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = kernel.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let wait_for = |want: &str, secs: u64| -> Result<(), String> {
        let end = Instant::now() + Duration::from_secs(secs);
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
                Ok(l) if l == want => return Ok(()),
                Ok(l) => seen.push(l),
                Err(_) => return Err(format!("no {want:?} from the kernel's server: {seen:?}")),
            }
        }
    };
    let result = (|| -> Result<u64, String> {
        wait_for("listening", 10)?;
        let local = Ipv4Addr::new(10, 99, 13, 1);
        let mut engine: Engine<StreamSocket> = Engine::new(tcp::Config::default());
        let t0 = Instant::now();
        let mut skipped = Duration::ZERO;
        let clock = |skipped: Duration| {
            tcp::Instant::from_nanos((t0.elapsed() + skipped).as_nanos() as u64 + 1)
        };
        let conn = engine
            .connect(
                clock(skipped),
                SocketAddrV4::new(local, 0),
                SocketAddrV4::new(Ipv4Addr::new(10, 99, 13, 2), 7000),
                StreamSocket::new(1 << 16, 1 << 16),
            )
            .map_err(|e| e.to_string())?;
        let mut poll = PollLoop::new(TcpHandler::new(engine, (), Quiet), 32);
        poll.add_port(
            port,
            PortAddr::on_subnet(Ipv4Cidr {
                addr: local,
                prefix: 24,
            }),
        );
        let write = |poll: &mut Loop, data: &[u8]| {
            let (tcp, _, _) = poll.handler_mut().parts();
            tcp.ulp_mut(conn).map(|s| s.write(data))
        };
        // Connected and 5 octets through, on the real clock.
        let mut sent = 0;
        let end = Instant::now() + Duration::from_secs(10);
        while sent < 5 && Instant::now() < end {
            poll.poll_once(clock(skipped));
            if poll.handler().tcp().state(conn) == Some(tcp::State::Established) {
                sent += write(&mut poll, &b"hello"[sent..]).unwrap_or(0);
            }
        }
        let settle = |poll: &mut Loop, skipped: Duration, real: Duration| {
            let end = Instant::now() + real;
            while Instant::now() < end {
                poll.poll_once(clock(skipped));
                std::thread::sleep(Duration::from_micros(200));
            }
        };
        settle(&mut poll, skipped, Duration::from_millis(300));
        wait_for("got 5", 5)?;
        // Forty idle minutes of the engine's clock, 10 s per iteration, a little real time
        // for each so that what the engine sends meanwhile reaches the kernel.
        for _ in 0..240 {
            skipped += Duration::from_secs(10);
            settle(&mut poll, skipped, Duration::from_millis(10));
        }
        let tcp_info = poll.handler().tcp().info(conn).ok_or("connection gone")?;
        if tcp_info.state != tcp::State::Established {
            return Err(format!("after the idle period: {:?}", tcp_info.state));
        }
        let data = [0x5a; 1000];
        if write(&mut poll, &data) != Some(1000) {
            return Err("write after the idle period".into());
        }
        let end = Instant::now() + Duration::from_secs(3);
        let mut delivered = false;
        while !delivered && Instant::now() < end {
            settle(&mut poll, skipped, Duration::from_millis(20));
            while let Ok(l) = rx.try_recv() {
                delivered |= l == "got 1005";
            }
        }
        if !delivered {
            return Err(
                "the kernel did not take the 1000 octets sent after the idle period".into(),
            );
        }
        Ok(0)
    })();
    let (paws, nstat) = kernel_counter(&netns, "TcpExtPAWSEstab");
    let _ = kernel.kill();
    let _ = kernel.wait();
    result.unwrap_or_else(|e| panic!("{e} (kernel: {nstat})"));
    assert_eq!(
        paws,
        Some(0),
        "segments the kernel dropped as PAWS failures: {nstat}"
    );
}

/// RFC 6056 §3.3.1 / RFC 6191 against the Linux kernel: four `dataplane tcp client` processes
/// in a row connect to a kernel echo server that closes first, so the kernel holds each
/// connection in TIME-WAIT. Every process picks its first ephemeral port from its own secret,
/// so none reuses the 4-tuple its predecessor left in TIME-WAIT (a reused one is taken by
/// the kernel only with a larger ISN or TSval; with per-process secrets half of the others
/// were refused, `TcpExtPAWSTimewait`, and the connection waited 2 s).
#[test]
fn processes_in_a_row_do_not_reuse_a_kernel_time_wait_4_tuple() {
    let pid = std::process::id();
    let tap = format!("dpr{}", pid % 1_000_000);
    let netns = format!("dpreuse{pid}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tap.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[ports]]\nname = \"tap0\"\nbackend = \"tap\"\ndevice = \"{tap}\"\n\
             mac = \"02:00:00:00:0e:01\"\nipv4 = \"10.99.14.1/24\"\n"
        ),
    )
    .unwrap();
    let _guard = Cleanup {
        netns: netns.clone(),
        child: None,
    };
    sh(&["ip", "netns", "add", &netns]);
    // The kernel's echo server: takes 4000 octets per connection, then echoes them and
    // closes first. The client closes as soon as it has all 4000 back, so the last echoed
    // octets must carry the kernel's FIN: corked, the tail that does not fill a segment waits
    // for the shutdown, which puts the FIN on it. (Echoed as they came, the FIN followed the
    // last data after python's next turn; under load the client's FIN came first and the
    // kernel, closing second, left no TIME-WAIT.)
    let server = r#"
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7000))
s.listen(8)
while True:
    c, _ = s.accept()
    data = b""
    while len(data) < 4000:
        b = c.recv(65536)
        if not b:
            break
        data += b
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    c.sendall(data)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    c.close()
"#;
    let mut kernel = Command::new("ip")
        .args(["netns", "exec", &netns, "python3", "-c", server])
        .spawn()
        .unwrap();
    // The first client must not reach the namespace before the server listens (it was
    // refused when python started slowly under load).
    let start = Instant::now();
    while !Command::new("ip")
        .args(["netns", "exec", &netns, "ss", "-Hltn", "sport = :7000"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty())
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no kernel listener"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut runs = Vec::new();
    for i in 0..4 {
        let start = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_dataplane"))
            .args([
                "tcp",
                "client",
                "--connect",
                "10.99.14.2:7000",
                "--bytes",
                "4000",
            ])
            .args(["--duration", "20", "--config"])
            .arg(&cfg)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        while Command::new("ip")
            .args(["link", "show", &tap])
            .output()
            .is_ok_and(|o| !o.status.success())
        {
            assert!(start.elapsed() < Duration::from_secs(10), "no TAP {tap}");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Each process makes a new interface; the kernel's address goes on it each time.
        kernel_side(&tap, &netns, "10.99.14.2/24");
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success() && said.contains("received 4000 bytes"),
            "run {i}: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        runs.push(start.elapsed());
    }
    let tw = Command::new("ip")
        .args(["netns", "exec", &netns, "ss", "-Htan", "state", "time-wait"])
        .output()
        .unwrap();
    let (refused, nstat) = kernel_counter(&netns, "TcpExtPAWSTimewait");
    let _ = kernel.kill();
    let _ = kernel.wait();
    let tw = String::from_utf8_lossy(&tw.stdout).to_string();
    let mut peers: Vec<&str> = tw
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .collect();
    peers.sort_unstable();
    peers.dedup();
    assert_eq!(peers.len(), 4, "four distinct 4-tuples in TIME-WAIT: {tw}");
    assert_eq!(refused, Some(0), "{nstat}; runs took {runs:?}");
}
