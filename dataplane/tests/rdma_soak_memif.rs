//! Issue 8's fault mix between two `dataplane soak` processes over a DPDK memif pair: 1 %
//! loss, 1 % reordering, 0.1 % duplication and 0.01 % bit flips on the frames each process
//! receives, a verified RDMA Write + Read + Send mix on several QPs with CRCs on. The client
//! exits 0 only if every byte matched on both sides (the server's verdict comes back in a
//! final Send); the server exits 0 only if every message it got matched.
//! (`testbed/soak --memif` runs the same between release builds for 1 GiB or N minutes.)

#![cfg(feature = "dpdk")]

mod dpdk_common;

use std::process::Command;
use std::time::Instant;

use dpdk_common::two_process::{counter, Link};

/// The fault mix on received frames, with this process's seed.
fn fault_mix(seed: u32) -> String {
    format!("direction=rx,seed={seed},drop=1%,reorder=1%,duplicate=0.1%,corrupt=0.01%")
}

// RFC 5044 §4 (MPA over TCP's reliable stream), RFC 5040 §5.1–5.3 (Write, Read, Send
// semantics): through loss, reordering, duplication and bit flips on a real DPDK link
// between two processes, every Write (read back), Read and Send arrives byte-exact.
#[test]
fn memif_fault_mix_soak_is_byte_exact() {
    let link = Link::memif("soak", Some(["10.97.0.1", "10.97.0.2"]));
    let started = Instant::now();
    let fault = fault_mix(1);
    let srv = link.start_server(
        &[
            "soak",
            "--crc",
            "--heap",
            "--time-limit",
            "100",
            "--config",
            &link.server,
            "--fault",
            &fault,
        ],
        "listening",
    );
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
        .args(["--config", &link.client, "--fault", &fault_mix(2)])
        .output()
        .unwrap();
    let c = String::from_utf8_lossy(&out.stdout).into_owned();
    let (status, s, serr) = srv.finish();
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
