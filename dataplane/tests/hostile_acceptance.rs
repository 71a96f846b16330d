//! Robustness acceptance checks over the in-process software pair with fault injection:
//! an RDMA Write + Read + Send mix on several QPs completes byte-exact through loss,
//! reordering, duplication and bit flips; with checksum-preserving payload corruption and
//! CRCs on, every affected stream ends with Terminate 2/0/02 and nothing corrupted is ever
//! placed, while the other streams complete.
//!
//! `HOSTILE_MIB` sets the volume of the lossy-link check (default 64 MiB in CI; run the full
//! 1 GiB by hand with `HOSTILE_MIB=1024 cargo test --release -p dataplane --test
//! hostile_acceptance`). The soak (`testbed/soak --minutes N`) runs the ignored `soak` test.

mod hostile_common;

use std::time::Duration;

use dataplane::port::fault::{CorruptMode, Direction, FaultConfig, Rate};
use hostile_common::mix::{run_mix, MixParams};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// 1 % loss, 1 % reordering, 0.1 % duplication, 0.01 % plain bit flips, in each direction.
fn lossy() -> FaultConfig {
    FaultConfig {
        seed: env_u64("HOSTILE_SEED", 7),
        direction: Direction::Rx,
        drop: Rate::from_percent(1.0).expect("rate"),
        reorder: Rate::from_percent(1.0).expect("rate"),
        duplicate: Rate::from_percent(0.1).expect("rate"),
        corrupt: Rate::from_percent(0.01).expect("rate"),
        corrupt_mode: CorruptMode::BitFlip,
        ..FaultConfig::default()
    }
}

// RFC 5044 §4 (MPA over a reliable TCP stream) and RFC 5040 §5: TCP recovers loss,
// reordering, duplicates and checksum-detected corruption; every operation completes and
// every byte matches.
#[test]
fn lossy_link_mix_completes_byte_exact() {
    let mib = env_u64("HOSTILE_MIB", 64);
    let r = run_mix(&MixParams {
        qps: 4,
        total_bytes: Some(mib << 20),
        duration: None,
        faults: lossy(),
        crc: true,
        errors_allowed: false,
        progress: None,
        stall_limit: Duration::from_secs(20),
    });
    println!("lossy mix: {}", r.line());
    assert!(r.bytes >= mib << 20);
    assert_eq!(r.qps_completed, 4);
    assert!(r.faults.dropped > 0 && r.faults.reordered > 0 && r.faults.duplicated > 0);
}

// RFC 5044 §7.2 / MPA-FACTS §6: a CRC mismatch is reported with Terminate Layer 2 (LLP),
// EType 0, Code 0x02 and the stream ends; RFC 5041 §8.1: nothing is placed before it is
// validated, so no corrupted byte ever reaches a buffer. Unaffected streams complete. A flip
// that grows a ULPDU_Length beyond the segment size (RFC 5044 §4.1 MULPDU) ends the stream
// at once with 2/0/03 (error.rs: BadUlpduLength) instead of waiting for octets that never
// come.
// The fault decisions are seeded, but whether a run has both affected and unaffected
// streams is chance (about 1 seed in 15 corrupts nothing or every stream): such a run is
// still checked, then the next seed is tried, up to four.
#[test]
fn payload_corruption_ends_streams_with_crc_terminate() {
    let base = env_u64("HOSTILE_SEED", 7);
    let mut exercised = false;
    for seed in base..base + 4 {
        let r = run_mix(&MixParams {
            qps: 8,
            total_bytes: Some(env_u64("HOSTILE_CORRUPT_MIB", 12) << 20),
            duration: None,
            faults: FaultConfig {
                seed,
                direction: Direction::Rx,
                corrupt: Rate::from_ppm(300).expect("rate"),
                corrupt_mode: CorruptMode::TcpPayload,
                ..FaultConfig::default()
            },
            crc: true,
            errors_allowed: true,
            progress: None,
            stall_limit: Duration::from_secs(20),
        });
        println!("corruption mix, seed {seed}: {}", r.line());
        println!("failed: {:?}", r.failed_terminates);
        // Streams that ended without a Terminate did so in one known state only: corrupted
        // MPA negotiation (no CRC protects it, RFC 5044 §7.1). A partial FPDU whose grown
        // length never completes is not such a state: an FPDU-aligned sender never leaves
        // part of an FPDU unsent (RFC 5044 §4.1), so the receiver ends the stream with
        // 2/0/03 after ConnConfig::partial_fpdu_timeout (3 s, well inside the stall limit).
        println!("ended without a Terminate: {:?}", r.quiet_ends);
        for (i, why) in &r.quiet_ends {
            assert!(
                !why.starts_with("stalled"),
                "QP {i} waited on a partial FPDU instead of ending with 2/0/03: {why}"
            );
        }
        let mpa_error = |t: &(u8, u8, u8)| *t == (2, 0, 0x02) || *t == (2, 0, 0x03);
        for (i, terms) in &r.failed_terminates {
            assert!(
                terms.iter().any(mpa_error),
                "QP {i} ended without an MPA Terminate (2/0/02 or 2/0/03): {terms:?}"
            );
            assert!(
                terms.iter().all(mpa_error),
                "QP {i}: other Terminates {terms:?}"
            );
        }
        if r.faults.corrupted_tcp > 0 && !r.qps_failed.is_empty() && r.qps_completed > 0 {
            exercised = true;
            break;
        }
        println!("seed {seed}: no stream, or every stream, was hit; trying the next seed");
    }
    assert!(
        exercised,
        "no run had both corrupted and intact streams (seeds {base}..{})",
        base + 4
    );
}

/// The soak: `HOSTILE_SOAK_MINUTES` of the lossy mix on `HOSTILE_SOAK_QPS` QPs, progress
/// every 10 s and a final summary line. Run by `testbed/soak`; not in CI.
#[test]
#[ignore]
fn soak() {
    let minutes = env_u64("HOSTILE_SOAK_MINUTES", 1);
    let r = run_mix(&MixParams {
        qps: env_u64("HOSTILE_SOAK_QPS", 16) as usize,
        total_bytes: None,
        duration: Some(Duration::from_secs(minutes * 60)),
        faults: lossy(),
        crc: true,
        errors_allowed: false,
        progress: Some(Duration::from_secs(10)),
        stall_limit: Duration::from_secs(30),
    });
    println!(
        "soak summary: minutes {minutes} {} | every byte verified",
        r.line()
    );
    assert!(r.rounds > 0);
}
