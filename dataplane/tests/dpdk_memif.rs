//! A `net_memif` pair between two processes: this test process is the memif server and
//! re-runs its own binary as the client. The client sends a known frame sequence; the
//! server checks every byte and counter and answers with one acknowledgement frame that the
//! client checks. Both sides stop by themselves (deadlines), and the socket directory is
//! removed.

#[path = "dpdk_common/mod.rs"]
mod dpdk_common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use dataplane::dpdk::{Eal, Mbuf};
use dataplane::port::dpdk::{DpdkPort, DpdkPortConfig};
use dataplane::port::{Port, PortStats};
use dpdk_common::*;

/// Set in the client process: the memif socket path.
const CLIENT_ENV: &str = "DPDK_MEMIF_TEST_CLIENT_SOCKET";
const TEST_NAME: &str = "memif_pair_between_two_processes";
/// Frames the client sends.
const N: u32 = 20_000;
/// Sequence number of the server's acknowledgement frame.
const ACK_SEQ: u32 = u32::MAX;
const LINK_TIMEOUT: Duration = Duration::from_secs(20);
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn memif_pair_between_two_processes() {
    if let Some(socket) = std::env::var_os(CLIENT_ENV) {
        run_client(Path::new(&socket));
        return;
    }
    let dir = std::env::temp_dir().join(format!("dp-memif-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("memif.sock");
    let result = std::panic::catch_unwind(|| run_server(&socket));
    std::fs::remove_dir_all(&dir).unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn memif_vdev(role: &str, socket: &Path) -> String {
    format!(
        "net_memif0,role={role},socket={},socket-abstract=no",
        socket.display()
    )
}

fn start_eal(role: &str, core: &str, socket: &Path) -> Eal {
    let vdev = memif_vdev(role, socket);
    let args = eal_args(&format!("memif-{role}"), &["-l", core, "--vdev", &vdev]);
    Eal::init(&args).unwrap_or_else(|e| panic!("{role}: EAL init: {e}"))
}

fn wait_link(port: &DpdkPort, role: &str) {
    assert!(
        port.wait_link_up(LINK_TIMEOUT),
        "{role}: memif link not up after {LINK_TIMEOUT:?}"
    );
}

/// Kills the client if the server side fails before it exits.
struct ClientGuard(Option<Child>);

impl ClientGuard {
    fn wait(&mut self, deadline: Instant) -> std::process::ExitStatus {
        let child = self.0.as_mut().expect("client running");
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.0 = None;
                return status;
            }
            assert!(Instant::now() < deadline, "client did not exit in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn run_server(socket: &Path) {
    let eal = start_eal("server", "0", socket);
    let mut port =
        DpdkPort::open(&eal, &DpdkPortConfig::new("memif-server", "net_memif0")).unwrap();
    let deadline = Instant::now() + RUN_TIMEOUT;
    // The client's output goes to a file, shown if it fails.
    let log_path = socket.with_file_name("client.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut client = ClientGuard(Some(
        Command::new(std::env::current_exe().unwrap())
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CLIENT_ENV, socket)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    ));
    wait_link(&port, "server");

    let mut rx: Vec<Mbuf> = Vec::new();
    let mut next = 0u32;
    while next < N {
        assert!(
            Instant::now() < deadline,
            "server: received {next} of {N} frames in time"
        );
        port.rx_burst(&mut rx, 64);
        for frame in rx.drain(..) {
            check_frame(next, frame.as_ref()).unwrap();
            next += 1;
        }
    }
    // Nothing beyond the sequence arrives.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(port.rx_burst(&mut rx, 64), 0, "unexpected extra frames");

    let expect_rx = PortStats {
        rx_packets: u64::from(N),
        rx_bytes: total_bytes(N),
        ..PortStats::default()
    };
    assert_eq!(port.stats(), expect_rx);
    let hw = port.hw_stats().unwrap();
    assert_eq!((hw.rx_packets, hw.rx_bytes), (u64::from(N), total_bytes(N)));

    let mut ack = vec![port.alloc_tx(frame_len(ACK_SEQ)).unwrap()];
    fill_frame(ACK_SEQ, ack[0].as_mut());
    while !ack.is_empty() {
        assert!(
            Instant::now() < deadline,
            "server: ack not accepted in time"
        );
        port.tx_burst(&mut ack);
    }
    let status = client.wait(deadline);
    assert!(
        status.success(),
        "client failed: {status}; its output:\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    assert_eq!(port.stats().tx_packets, 1);
    assert_eq!(port.stats().tx_bytes, frame_len(ACK_SEQ) as u64);
    drop(port);
    // EAL cleanup removes the runtime directory of the prefix `Eal::init` chose.
    let runtime_dir = eal
        .runtime_dir()
        .expect("EAL runtime dir exists while running");
    drop(eal);
    assert!(
        !runtime_dir.exists(),
        "{} left behind",
        runtime_dir.display()
    );
}

fn run_client(socket: &Path) {
    let socket: PathBuf = socket.to_path_buf();
    // Its own CPU when there is a second one.
    let two_cpus = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let eal = start_eal("client", if two_cpus { "1" } else { "0" }, &socket);
    let mut port =
        DpdkPort::open(&eal, &DpdkPortConfig::new("memif-client", "net_memif0")).unwrap();
    let deadline = Instant::now() + RUN_TIMEOUT;
    wait_link(&port, "client");

    let mut tx = Vec::new();
    let mut next = 0u32;
    while next < N || !tx.is_empty() {
        assert!(
            Instant::now() < deadline,
            "client: sent {next} of {N} frames in time"
        );
        while next < N && tx.len() < 32 {
            let mut m = port
                .alloc_tx(frame_len(next))
                .expect("client pool has mbufs");
            fill_frame(next, m.as_mut());
            tx.push(m);
            next += 1;
        }
        // memif refuses frames while its ring is full; they stay in `tx` for the retry.
        port.tx_burst(&mut tx);
    }
    let stats = port.stats();
    assert_eq!(
        (stats.tx_packets, stats.tx_bytes),
        (u64::from(N), total_bytes(N))
    );

    let mut rx = Vec::new();
    while rx.is_empty() {
        assert!(
            Instant::now() < deadline,
            "client: no ack from the server in time"
        );
        port.rx_burst(&mut rx, 8);
    }
    assert_eq!(rx.len(), 1);
    check_frame(ACK_SEQ, rx[0].as_ref()).unwrap();
    assert_eq!(port.stats().rx_packets, 1);
    let hw = port.hw_stats().unwrap();
    assert_eq!((hw.tx_packets, hw.tx_bytes), (u64::from(N), total_bytes(N)));
    assert_eq!(hw.rx_packets, 1);
    drop(rx);
    assert_eq!(port.pool().in_use(), 0);
}
