//! CRC32c and the TCP payload sum of one FPDU-sized range: the one-pass kernel
//! (`wire::crcsum`) against the two separate passes (crc-fast's CRC32c, then
//! `tcp::checksum::payload_sum`), on 1448 and 9000 octets, L1-hot (the same range again and
//! again) and cold (ranges spread over 256 MiB, out of every cache). Rounds alternate between
//! them (and each separate pass alone, the project's own CRC32c (`wire::crc::crc32c`, the
//! kernel without its sum where the CPU has one), and the send side's copy into the frame
//! with and without its sum); each figure is the median over the rounds of the mean time per
//! range.
//!
//! Then the send side's read of a payload out of registered memory: the copy followed by the
//! one-pass kernel over the copy (A) against the copying kernel
//! (`wire::crcsum::copy_crc32c_and_sum`, B), into one reused destination, from a hot source
//! and from a cold one (a 64 MiB window walked in order, range after range, as a long
//! message's segments are read). A and B alternate round by round; the line gives each
//! one's median and range over the rounds and the median of the per-round ratios A/B with
//! their range (the machine's speed swings between rounds). Run pinned:
//! `taskset -c 1 cargo bench -p iwarp --bench crc_sum`.

use std::hint::black_box;
use std::time::Instant;

use crc_fast::crc32_iscsi;
use iwarp::wire::crc::crc32c;
use iwarp::wire::crcsum::{copy_crc32c_and_sum, crc32c_and_sum, one_pass};
use tcp::checksum::{copy_payload, payload_sum};

const ROUNDS: usize = 21;
const COLD_BYTES: usize = 256 << 20;
const WINDOW_BYTES: usize = 64 << 20;

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
    /// The copy, then the one-pass kernel over the copy (the send path before the copying
    /// kernel).
    CopyThenOnePass,
    /// The copying kernel.
    CopyingKernel,
}

/// Mean nanoseconds per range of one round of `iters` ranges taken by `offset`.
fn round(buf: &[u8], len: usize, iters: usize, offset: impl Fn(usize) -> usize, work: Work) -> f64 {
    let mut frame = vec![0u8; len];
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
            Work::CopyThenOnePass => {
                frame.copy_from_slice(data);
                black_box(crc32c_and_sum(&frame));
            }
            Work::CopyingKernel => drop(black_box(copy_crc32c_and_sum(0, &mut frame, data))),
        }
        black_box(&mut frame);
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median, least and greatest of `v`.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    (median(v.to_vec()), lo, hi)
}

/// The copy then the one-pass kernel (A) against the copying kernel (B), rounds
/// interleaved, on `len`-octet ranges of `buf`.
fn copy_a_b(buf: &[u8], len: usize) {
    let ranges = WINDOW_BYTES / len;
    for (name, cold) in [("hot", false), ("cold", true)] {
        let iters = if cold { ranges } else { 200_000 };
        let offset = |i: usize| if cold { i * len } else { 0 };
        let (mut a, mut b, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..ROUNDS {
            // Which goes first alternates too.
            let (x, y) = if r % 2 == 0 {
                let x = round(buf, len, iters, offset, Work::CopyThenOnePass);
                (x, round(buf, len, iters, offset, Work::CopyingKernel))
            } else {
                let y = round(buf, len, iters, offset, Work::CopyingKernel);
                (round(buf, len, iters, offset, Work::CopyThenOnePass), y)
            };
            a.push(x);
            b.push(y);
            ratio.push(x / y);
        }
        let (am, alo, ahi) = spread(&a);
        let (bm, blo, bhi) = spread(&b);
        let (rm, rlo, rhi) = spread(&ratio);
        println!(
            "{len:5} octets {name:4}: copy then one pass {am:6.1} ns ({alo:.1}..{ahi:.1}), \
             copying kernel {bm:6.1} ns ({blo:.1}..{bhi:.1}); A/B median {rm:.2}x \
             ({rlo:.2}..{rhi:.2})"
        );
    }
}

fn main() {
    println!("one-pass kernel on this CPU: {}", one_pass());
    let buf: Vec<u8> = (0..COLD_BYTES as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    for len in [1448usize, 9000] {
        copy_a_b(&buf, len);
    }
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
            ];
            let mut times = [const { Vec::new() }; 7];
            for _ in 0..ROUNDS {
                for (t, &w) in times.iter_mut().zip(&works) {
                    t.push(round(&buf, len, iters, offset, w));
                }
            }
            let [a, b, c, o, s, cs, cp] = times.map(median);
            println!(
                "{len:5} octets {name:6}: one pass {a:6.1} ns, separate {b:6.1} ns ({:.2}x; \
                 crc-fast's CRC32c alone {c:.1}, own CRC32c {o:.1}, sum alone {s:.1}; \
                 copy with sum {cs:.1}, copy {cp:.1})",
                b / a
            );
        }
    }
}
