//! A `net_memif` link of two queue pairs between two processes: this test process is the
//! memif server and re-runs its own binary as the client. Each side opens the device with
//! `queues = 2` (one `DpdkPort` per queue pair, each with its own mempool). The client sends
//! frame `k` on queue `k % 2`; the server checks that each of its queues receives exactly
//! the frames sent on the same queue of the client (memif's ring pairs), in order, every
//! byte, and answers on queue 1 only, which the client must see on its queue 1.

#[path = "dpdk_common/mod.rs"]
mod dpdk_common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use dataplane::dpdk::{Eal, Mbuf};
use dataplane::port::dpdk::{DpdkPort, DpdkPortConfig};
use dataplane::port::Port;
use dpdk_common::*;

const CLIENT_ENV: &str = "DPDK_MEMIF_QUEUES_TEST_CLIENT_SOCKET";
const TEST_NAME: &str = "memif_two_queue_pairs_between_two_processes";
/// Frames the client sends (half on each queue).
const N: u32 = 10_000;
const ACK_SEQ: u32 = u32::MAX;
const LINK_TIMEOUT: Duration = Duration::from_secs(20);
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn memif_two_queue_pairs_between_two_processes() {
    if let Some(socket) = std::env::var_os(CLIENT_ENV) {
        run_client(Path::new(&socket));
        return;
    }
    let dir = std::env::temp_dir().join(format!("dp-memifq-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("memif.sock");
    let result = std::panic::catch_unwind(|| run_server(&socket));
    std::fs::remove_dir_all(&dir).unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn open(role: &str, core: &str, socket: &Path) -> (Eal, Vec<DpdkPort>) {
    let vdev = format!(
        "net_memif0,role={role},socket={},socket-abstract=no",
        socket.display()
    );
    let args = eal_args(&format!("memifq-{role}"), &["-l", core, "--vdev", &vdev]);
    let eal = Eal::init(&args).unwrap_or_else(|e| panic!("{role}: EAL init: {e}"));
    let cfg = DpdkPortConfig {
        queues: 2,
        pool_size: 4095,
        ..DpdkPortConfig::new(format!("memif-{role}"), "net_memif0")
    };
    let ports = DpdkPort::open_queues(&eal, &cfg).unwrap();
    assert_eq!(ports.len(), 2);
    for (i, p) in ports.iter().enumerate() {
        assert_eq!(p.queue(), (i as u16, 2));
    }
    assert_ne!(
        ports[0].pool().as_ptr(),
        ports[1].pool().as_ptr(),
        "a mempool per queue"
    );
    (eal, ports)
}

/// Waits until the memif link of `ports` is up.
fn wait_up(ports: &[DpdkPort], role: &str) {
    assert!(
        ports[0].wait_link_up(LINK_TIMEOUT),
        "{role}: memif link not up after {LINK_TIMEOUT:?}"
    );
}

fn run_server(socket: &Path) {
    // The server's socket exists before the client starts (a client that finds no socket
    // does not come back).
    let (eal, mut ports) = open("server", "0", socket);
    let log_path = socket.with_file_name("client.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut client = Command::new(std::env::current_exe().unwrap())
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CLIENT_ENV, socket)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_up(&ports, "server");
        let deadline = Instant::now() + RUN_TIMEOUT;
        let mut next = [0u32, 1];
        let mut rx: Vec<Mbuf> = Vec::new();
        while next[0] < N || next[1] < N + 1 {
            assert!(
                Instant::now() < deadline,
                "server: frames {next:?} of {N} in time"
            );
            for (q, port) in ports.iter_mut().enumerate() {
                port.rx_burst(&mut rx, 64);
                for frame in rx.drain(..) {
                    check_frame(next[q], frame.as_ref())
                        .unwrap_or_else(|e| panic!("queue {q}: {e}"));
                    next[q] += 2;
                }
            }
        }
        for (q, port) in ports.iter().enumerate() {
            let s = port.stats();
            assert_eq!(s.rx_packets, u64::from(N / 2), "queue {q}");
        }
        let mut ack = vec![ports[1].alloc_tx(frame_len(ACK_SEQ)).unwrap()];
        fill_frame(ACK_SEQ, ack[0].as_mut());
        while !ack.is_empty() {
            assert!(Instant::now() < deadline, "server: ack not accepted");
            ports[1].tx_burst(&mut ack);
        }
        let end = Instant::now() + RUN_TIMEOUT;
        let status = loop {
            if let Some(status) = client.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < end, "client did not exit in time");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            status.success(),
            "client failed: {status}; its output:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        drop(ports);
        drop(eal);
    }));
    let _ = client.kill();
    let _ = client.wait();
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}

fn run_client(socket: &Path) {
    let two_cpus = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    let (_eal, mut ports) = open("client", if two_cpus { "1" } else { "0" }, socket);
    wait_up(&ports, "client");
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut tx: [Vec<Mbuf>; 2] = [Vec::new(), Vec::new()];
    let mut next = 0u32;
    while next < N || tx.iter().any(|t| !t.is_empty()) {
        assert!(Instant::now() < deadline, "client: sent {next} of {N}");
        while next < N && tx[(next % 2) as usize].len() < 32 {
            let q = (next % 2) as usize;
            let mut m = ports[q].alloc_tx(frame_len(next)).expect("pool has mbufs");
            fill_frame(next, m.as_mut());
            tx[q].push(m);
            next += 1;
        }
        for (q, port) in ports.iter_mut().enumerate() {
            port.tx_burst(&mut tx[q]);
        }
    }
    for (q, port) in ports.iter().enumerate() {
        assert_eq!(port.stats().tx_packets, u64::from(N / 2), "queue {q}");
    }
    let mut rx = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "client: no ack on queue 1");
        assert_eq!(ports[0].rx_burst(&mut rx, 8), 0, "nothing on queue 0");
        if ports[1].rx_burst(&mut rx, 8) > 0 {
            break;
        }
    }
    assert_eq!(rx.len(), 1);
    check_frame(ACK_SEQ, rx[0].as_ref()).unwrap();
}
