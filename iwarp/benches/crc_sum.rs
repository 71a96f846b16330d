//! CRC32c and the TCP payload sum of one FPDU-sized range: the one-pass kernel
//! (`wire::crcsum`) against the two separate passes (crc-fast's CRC32c, then
//! `tcp::checksum::payload_sum`), on 1448 and 9000 octets, L1-hot (the same range again and
//! again) and cold (ranges spread over 256 MiB, out of every cache). Rounds alternate between
//! them (and each separate pass alone, the project's own CRC32c (`wire::crc::crc32c`, the
//! kernel without its sum where the CPU has one), and the send side's copy into the frame
//! with and without its sum, and the send side's read of a payload out of registered memory
//! into its unit followed by the one pass, against the read that sums in its own pass,
//! `wire::crcsum::copy_crc32c_and_sum_after`, the units taken in turn from 4 MiB of them as
//! the send path's are while that much is in flight); each figure is the median over the rounds of
//! the mean time per range. Run pinned: `taskset -c 1 cargo bench -p iwarp --bench crc_sum`.

use std::hint::black_box;
use std::time::Instant;

use crc_fast::crc32_iscsi;
use iwarp::wire::crc::crc32c;
use iwarp::wire::crcsum::{copy_crc32c_and_sum_after, crc32c_and_sum, one_pass};
use tcp::checksum::{copy_payload, payload_sum};

const ROUNDS: usize = 21;
const COLD_BYTES: usize = 256 << 20;
/// The units a send path keeps in flight (the engine's bound on octets in flight).
const UNITS_BYTES: usize = 4 << 20;

/// What a round computes.
#[derive(Clone, Copy)]
enum Work {
    OnePass,
    Separate,
    CrcOnly,
    /// `wire::crc::crc32c`.
    OwnCrc,
    SumOnly,
    /// The send side's copy into the frame with the sum (`tcp::checksum::copy_payload`).
    CopySum,
    /// The same copy alone.
    Copy,
    /// A payload read into its unit, then the one pass over the unit.
    ReadThenOnePass,
    /// The read summing in its own pass.
    ReadOnePass,
}

/// Mean nanoseconds per range of one round of `iters` ranges taken by `offset`.
fn round(buf: &[u8], len: usize, iters: usize, offset: impl Fn(usize) -> usize, work: Work) -> f64 {
    let mut frame = vec![0u8; len];
    let unit_stride = (len + 64).next_multiple_of(64);
    let mut units = vec![0u8; UNITS_BYTES + unit_stride];
    let n_units = UNITS_BYTES / unit_stride;
    let t = Instant::now();
    for i in 0..iters {
        let data = black_box(&buf[offset(i)..offset(i) + len]);
        match work {
            Work::OnePass => drop(black_box(crc32c_and_sum(data))),
            Work::Separate => drop(black_box((crc32_iscsi(data), payload_sum(data)))),
            Work::CrcOnly => drop(black_box(crc32_iscsi(data))),
            Work::OwnCrc => drop(black_box(crc32c(data))),
            Work::SumOnly => drop(black_box(payload_sum(data))),
            Work::CopySum => drop(black_box(copy_payload(&mut frame, data))),
            Work::Copy => frame.copy_from_slice(data),
            Work::ReadThenOnePass => {
                let at = i % n_units * unit_stride;
                let unit = &mut units[at..at + len];
                unit.copy_from_slice(data);
                black_box(crc32c_and_sum(unit));
            }
            Work::ReadOnePass => {
                let at = i % n_units * unit_stride;
                let unit = &mut units[at..at + len];
                black_box(copy_crc32c_and_sum_after(0, data, unit));
            }
        }
        black_box(&mut frame);
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    println!("one-pass kernel on this CPU: {}", one_pass());
    let buf: Vec<u8> = (0..COLD_BYTES as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    for len in [1448usize, 9000] {
        let stride = len.next_multiple_of(4096) + 64;
        let ranges = (COLD_BYTES - len) / stride;
        for (name, cold) in [("L1-hot", false), ("cold", true)] {
            let iters = if cold { ranges } else { 200_000 };
            let offset = |i: usize| {
                if cold {
                    (i * 7919 % ranges) * stride
                } else {
                    0
                }
            };
            let works = [
                Work::OnePass,
                Work::Separate,
                Work::CrcOnly,
                Work::OwnCrc,
                Work::SumOnly,
                Work::CopySum,
                Work::Copy,
                Work::ReadThenOnePass,
                Work::ReadOnePass,
            ];
            let mut times = [const { Vec::new() }; 9];
            for _ in 0..ROUNDS {
                for (t, &w) in times.iter_mut().zip(&works) {
                    t.push(round(&buf, len, iters, offset, w));
                }
            }
            let [a, b, c, o, s, cs, cp, rt, r1] = times.map(median);
            println!(
                "{len:5} octets {name:6}: one pass {a:6.1} ns, separate {b:6.1} ns ({:.2}x; \
                 crc-fast's CRC32c alone {c:.1}, own CRC32c {o:.1}, sum alone {s:.1}; \
                 copy with sum {cs:.1}, copy {cp:.1}; read then one pass {rt:.1}, read in \
                 one pass {r1:.1} ({:.2}x))",
                b / a,
                rt / r1
            );
        }
    }
}
