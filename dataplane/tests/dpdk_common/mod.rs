//! Shared helpers of the DPDK integration tests (each `dpdk_*.rs` test binary is its own
//! process, because EAL can be initialised once per process).

#![allow(dead_code)]

pub mod two_process;

use std::sync::OnceLock;

use dataplane::dpdk::eal::hugepages_available;
use dataplane::dpdk::Eal;

/// EAL arguments for a test process: `extra` plus `--no-huge -m 512` when this machine has
/// no hugepages, and no PCI scan or telemetry socket. `Eal::init` adds the unique
/// `--file-prefix=dataplane-<pid>`.
pub fn eal_args(test: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        format!("dpdk-test-{test}"),
        "--no-pci".to_string(),
        "--no-telemetry".to_string(),
    ];
    if !hugepages_available() {
        args.extend(["--no-huge", "-m", "512"].map(String::from));
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// The process's EAL, started on first use with `eal_args(test, extra)`.
pub fn shared_eal(test: &str, extra: &[&str]) -> &'static Eal {
    static EAL: OnceLock<Eal> = OnceLock::new();
    EAL.get_or_init(|| {
        let args = eal_args(test, extra);
        let eal = Eal::init(&args).unwrap_or_else(|e| panic!("EAL init with {args:?}: {e}"));
        // A static is never dropped, so EAL cleanup never runs: remove the runtime directory
        // now (it is empty: `Eal::init` adds `--no-shconf`).
        if let Some(dir) = eal.runtime_dir() {
            std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("rm {}: {e}", dir.display()));
        }
        eal
    })
}

/// Destination MAC of test frames.
pub const DST: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
/// Source MAC of test frames.
pub const SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// EtherType of test frames (IEEE 802 local experimental).
pub const ETHERTYPE: u16 = 0x88b5;

/// Length of test frame `seq`: sweeps 60..=1514 bytes.
pub fn frame_len(seq: u32) -> usize {
    60 + (seq as usize * 97) % (1514 - 60 + 1)
}

/// Writes test frame `seq` into `buf` (whose length is `frame_len(seq)`): Ethernet header,
/// the sequence number, then bytes derived from `seq` and their offset.
pub fn fill_frame(seq: u32, buf: &mut [u8]) {
    buf[0..6].copy_from_slice(&DST);
    buf[6..12].copy_from_slice(&SRC);
    buf[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    buf[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in buf.iter_mut().enumerate().skip(18) {
        *b = pattern_byte(seq, i);
    }
}

fn pattern_byte(seq: u32, i: usize) -> u8 {
    (seq as usize)
        .wrapping_mul(31)
        .wrapping_add(i.wrapping_mul(7)) as u8
}

/// Checks that `frame` is exactly test frame `seq`; returns a description of the first
/// difference.
pub fn check_frame(seq: u32, frame: &[u8]) -> Result<(), String> {
    let want_len = frame_len(seq);
    if frame.len() != want_len {
        return Err(format!("frame {seq}: length {} != {want_len}", frame.len()));
    }
    let mut want = vec![0u8; want_len];
    fill_frame(seq, &mut want);
    match frame.iter().zip(&want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!(
            "frame {seq}: byte {i} is {:#04x}, expected {:#04x}",
            frame[i], want[i]
        )),
    }
}

/// Sum of the lengths of test frames `0..n`.
pub fn total_bytes(n: u32) -> u64 {
    (0..n).map(|s| frame_len(s) as u64).sum()
}
