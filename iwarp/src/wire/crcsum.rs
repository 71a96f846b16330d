//! The MPA CRC ([`super::crc`], CRC32c) and the Internet checksum's sum (RFC 1071, TCP's
//! payload sum, [`tcp::checksum`]) of the same octets in one pass over them.
//!
//! Where the CPU has AVX-512 and VPCLMULQDQ, each 64-octet block is loaded once into a
//! 512-bit register; the register is folded into the CRC (carry-less multiplication, four
//! 128-bit lanes, four registers in flight) and added into the one's complement sum from the
//! same register. The 512-bit remainder is reduced to 128 bits by folding its lanes, and the
//! last 128 bits and the tail of the data go through the SSE4.2 `crc32` instruction. Where it
//! has VPCLMULQDQ with AVX2 only (AMD Zen 3, Intel Alder Lake), the same in 256-bit registers
//! (32-octet blocks, two lanes each). Elsewhere it is the two separate passes (crc-fast's
//! CRC32c and [`tcp::checksum::sum`]).
//!
//! The folding constants are x^n mod P for the reflected CRC32c polynomial, computed at
//! compile time below; the tests check the results against crc-fast and the scalar sum.

use tcp::checksum::PayloadSum;

/// The CRC32c and the one's complement sum of one range of octets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrcSum {
    /// CRC32c of the range, as [`super::crc::crc32c`] gives it.
    pub crc: u32,
    /// Partial TCP checksum sum of the range.
    pub sum: PayloadSum,
}

impl CrcSum {
    /// Nothing summed yet, the CRC continuing from `crc` (the CRC32c of what comes before,
    /// 0 for nothing).
    pub fn after(crc: u32) -> CrcSum {
        CrcSum {
            crc,
            sum: PayloadSum::from_folded(0, 0),
        }
    }

    /// `data` added: the CRC continued over it, its sum appended.
    pub fn extend(&mut self, data: &[u8]) {
        self.append(crc32c_and_sum_after(self.crc, data));
    }

    /// `src` copied into `dst` (as long) and added as [`CrcSum::extend`] adds it, in the
    /// copy's pass ([`copy_crc32c_and_sum_after`]).
    pub fn extend_copy(&mut self, src: &[u8], dst: &mut [u8]) {
        self.append(copy_crc32c_and_sum_after(self.crc, src, dst));
    }

    /// `next`, taken with the CRC continuing from this one's, as what follows.
    fn append(&mut self, next: CrcSum) {
        self.crc = next.crc;
        self.sum = self.sum.then(next.sum);
    }
}

/// CRC32c and one's complement sum of `data`, in one pass where the CPU allows it.
pub fn crc32c_and_sum(data: &[u8]) -> CrcSum {
    crc32c_and_sum_after(0, data)
}

/// The CRC32c of what gave `crc` (0 for nothing before) followed by `data`, and the one's
/// complement sum of `data`: [`crc32c_and_sum`] continuing a CRC.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2",
    "x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2"
))]
pub fn crc32c_and_sum_after(crc: u32, data: &[u8]) -> CrcSum {
    let (crc, folded) = multiversion::target::match_target! {
        "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2" => avx512_entry::crc_sum(!crc, data),
        "x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2" => avx2_entry::crc_sum(!crc, data),
        _ => (crc32c_after(crc, data), tcp::checksum::sum(data)),
    };
    CrcSum {
        crc,
        sum: PayloadSum::from_folded(folded, data.len()),
    }
}

/// Whether this CPU takes a one-pass kernel (VPCLMULQDQ with AVX-512 or AVX2) rather than the
/// two separate passes.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2",
    "x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2"
))]
pub fn one_pass() -> bool {
    multiversion::target::match_target! {
        "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2" => true,
        "x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2" => true,
        _ => false,
    }
}

/// The CRC32c of what gave `crc` followed by `data` (`crc` 0 for nothing before): the
/// one-pass kernel where the CPU has one (its sum unused; on CPUs whose `crc32` instruction
/// is slow, AMD's, it is several times faster than crc-fast's CRC), crc-fast elsewhere.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2",
    "x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2"
))]
pub(super) fn crc32c_after(crc: u32, data: &[u8]) -> u32 {
    multiversion::target::match_target! {
        "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2" => avx512_entry::crc_sum(!crc, data).0,
        "x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2" => avx2_entry::crc_sum(!crc, data).0,
        _ => if crc == 0 {
            crc_fast::crc32_iscsi(data)
        } else {
            let mut d = crc_fast::Digest::new_with_init_state(
                crc_fast::CrcAlgorithm::Crc32Iscsi,
                u64::from(!crc),
            );
            d.update(data);
            d.finalize() as u32
        },
    }
}

/// The CRC32c of what gave `crc` (0 for nothing before) followed by `src`, and the one's
/// complement sum of `src`, taken while `src` is copied into `dst` (as long): one pass over
/// the octets where the CPU has a one-pass kernel, else the copy and then both passes.
///
/// # Panics
/// When `dst` is not as long as `src`.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2",
    "x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2"
))]
pub fn copy_crc32c_and_sum_after(crc: u32, src: &[u8], dst: &mut [u8]) -> CrcSum {
    assert_eq!(src.len(), dst.len(), "copy into a range of another length");
    let (crc, folded) = multiversion::target::match_target! {
        "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2" => avx512_entry::crc_sum_copy(!crc, src, dst),
        "x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2" => avx2_entry::crc_sum_copy(!crc, src, dst),
        _ => {
            dst.copy_from_slice(src);
            (crc32c_after(crc, dst), tcp::checksum::sum(dst))
        },
    };
    CrcSum {
        crc,
        sum: PayloadSum::from_folded(folded, src.len()),
    }
}

/// The whole blocks of `len` octets (at least one) folded into one register, four registers in
/// flight, each block also added into `sum`; the register holding the first block is
/// `xor`ed with `init`. Expands inside each width's kernel, whose `BLOCK`, `load`, `splat`,
/// `fold` and multipliers `K1`..`K4` it uses, so that the intrinsics stay in functions
/// compiled with their target features (a shared generic function would not be).
#[cfg(target_arch = "x86_64")]
macro_rules! fold_blocks {
    ($len:ident, $blocks:ident, $sum:ident, $xor:ident, $init:ident) => {{
        let mut next = || {
            let x = load($blocks.next().expect("a block"));
            $sum.add(x);
            x
        };
        let mut acc = $xor(next(), $init);
        let mut whole = $len / BLOCK - 1;
        if whole >= 3 {
            // Four registers in flight, each moved along by four blocks.
            let (mut a1, mut a2, mut a3) = (next(), next(), next());
            whole -= 3;
            let k4 = splat(K4);
            while whole >= 4 {
                acc = fold(acc, k4, next());
                a1 = fold(a1, k4, next());
                a2 = fold(a2, k4, next());
                a3 = fold(a3, k4, next());
                whole -= 4;
            }
            let t = fold(a2, splat(K1), a3);
            let t = fold(a1, splat(K2), t);
            acc = fold(acc, splat(K3), t);
        }
        let k1 = splat(K1);
        for _ in 0..whole {
            acc = fold(acc, k1, next());
        }
        acc
    }};
}

/// The `N`-octet blocks of a source, each copied into the same place of a destination as
/// it is taken (a fixed-size copy: one vector load and store, no call).
#[cfg(target_arch = "x86_64")]
struct CopyBlocks<'a, const N: usize> {
    src: &'a [u8],
    dst: &'a mut [u8],
}

#[cfg(target_arch = "x86_64")]
impl<'a, const N: usize> CopyBlocks<'a, N> {
    /// The blocks of `src` copied into `dst` (as long).
    fn new(src: &'a [u8], dst: &'a mut [u8]) -> Self {
        CopyBlocks { src, dst }
    }
}

#[cfg(target_arch = "x86_64")]
impl<'a, const N: usize> Iterator for CopyBlocks<'a, N> {
    type Item = &'a [u8];

    #[inline(always)]
    fn next(&mut self) -> Option<&'a [u8]> {
        let (s, rest) = self.src.split_first_chunk::<N>()?;
        let (d, dst_rest) = std::mem::take(&mut self.dst).split_first_chunk_mut::<N>()?;
        *d = *s;
        (self.src, self.dst) = (rest, dst_rest);
        Some(s)
    }
}

/// A width's two entry points, over its `Sum`, `BLOCK`, `first_register`, `reduce` and
/// register `xor` (the target features the width's own, so that everything inlines into one
/// function).
#[cfg(target_arch = "x86_64")]
macro_rules! entry_points {
    ($features:literal, $xor:ident) => {
        /// CRC32c of `data` from the CRC register `init` (`!0` for a fresh CRC) and folded
        /// one's complement sum of `data`.
        #[target_feature(enable = $features)]
        pub(super) fn crc_sum(init: u32, data: &[u8]) -> (u32, u16) {
            let mut sum = Sum::new();
            let mut blocks = data.chunks_exact(BLOCK);
            let state = whole_blocks!(init, data.len(), blocks, sum, $xor);
            finish(state, blocks.remainder(), sum.total())
        }

        /// [`crc_sum`] of `src` while it is copied into `dst` (as long), block by block.
        #[target_feature(enable = $features)]
        pub(super) fn crc_sum_copy(init: u32, src: &[u8], dst: &mut [u8]) -> (u32, u16) {
            let mut sum = Sum::new();
            let whole = src.len() / BLOCK * BLOCK;
            let ((src, src_tail), (dst, dst_tail)) = (src.split_at(whole), dst.split_at_mut(whole));
            let mut blocks = CopyBlocks::<BLOCK>::new(src, dst);
            let state = whole_blocks!(init, whole, blocks, sum, $xor);
            dst_tail.copy_from_slice(src_tail);
            finish(state, src_tail, sum.total())
        }
    };
}

/// The CRC register after the whole blocks of `len` octets that `blocks` yields (`init`
/// when there is none), each block also added into `sum`: in the entry point's own body, so
/// that its loop is compiled there.
#[cfg(target_arch = "x86_64")]
macro_rules! whole_blocks {
    ($init:ident, $len:expr, $blocks:ident, $sum:ident, $xor:ident) => {{
        let len = $len;
        if len < BLOCK {
            $init
        } else {
            let first = first_register($init);
            reduce(fold_blocks!(len, $blocks, $sum, $xor, first))
        }
    }};
}

/// What both widths share: the folding constants, the final 128 bits and the tail.
#[cfg(target_arch = "x86_64")]
mod fold {
    use core::arch::x86_64::{
        __m128i, _mm_crc32_u64, _mm_crc32_u8, _mm_cvtsi128_si64, _mm_extract_epi64,
    };

    /// CRC32c's generator polynomial without its x^32 term, bit k the coefficient of x^k.
    const POLY: u32 = 0x1EDC_6F41;

    /// x^n mod P.
    const fn x_pow_mod_p(n: u32) -> u32 {
        let mut r: u32 = 1;
        let mut i = 0;
        while i < n {
            let carry = r & 0x8000_0000 != 0;
            r <<= 1;
            if carry {
                r ^= POLY;
            }
            i += 1;
        }
        r
    }

    /// x^n mod P as a reflected 64-bit operand (coefficient of x^k at bit 63 − k).
    const fn reflected(n: u32) -> u64 {
        (x_pow_mod_p(n).reverse_bits() as u64) << 32
    }

    /// The multipliers that move a 128-bit lane `d` bits further along the data: the low
    /// quadword (the lane's higher powers) by x^(d+64), the high one by x^d, each less one
    /// power for the product of two reflected operands, which carries one extra.
    pub(super) const fn fold_by(d: u32) -> (i64, i64) {
        (reflected(d + 63) as i64, reflected(d - 1) as i64)
    }

    /// The CRC register after the folded 128 bits `r` (the remainder of everything before
    /// them, as the CRC of these 16 octets from a zero register).
    #[inline]
    #[target_feature(enable = "sse4.2")]
    pub(super) fn remainder(r: __m128i) -> u32 {
        let (lo, hi) = (
            _mm_cvtsi128_si64(r) as u64,
            _mm_extract_epi64::<1>(r) as u64,
        );
        _mm_crc32_u64(_mm_crc32_u64(0, lo), hi) as u32
    }

    /// The CRC32c and the folded sum of `data` once the whole blocks before `tail` left
    /// the CRC register `state` and the wide sum `sum` (native 32-bit words in 64 bits).
    #[inline]
    #[target_feature(enable = "sse4.2")]
    pub(super) fn finish(mut state: u32, tail: &[u8], sum: u64) -> (u32, u16) {
        let mut words = tail.chunks_exact(8);
        let mut tail_sum: u64 = 0;
        for w in &mut words {
            let v = u64::from_le_bytes(w.try_into().expect("8 octets"));
            state = _mm_crc32_u64(u64::from(state), v) as u32;
            tail_sum += (v & 0xffff_ffff) + (v >> 32);
        }
        // The last 0 to 7 octets, as the low octets of a little-endian word for the sum:
        // assembled in a register (a copy into a stack word took a call to `memcpy` and
        // a load that waited for its narrower stores to commit).
        let mut v: u64 = 0;
        for (i, &b) in words.remainder().iter().enumerate() {
            state = _mm_crc32_u8(state, b);
            v |= u64::from(b) << (8 * i);
        }
        tail_sum += (v & 0xffff_ffff) + (v >> 32);
        (!state, fold16(sum + tail_sum))
    }

    /// A wide sum of native (little-endian) 32-bit words folded to 16 bits, network order.
    fn fold16(acc: u64) -> u16 {
        let mut x = (acc >> 32) + (acc & 0xffff_ffff);
        x = (x >> 32) + (x & 0xffff_ffff);
        x = (x >> 16) + (x & 0xffff);
        x = (x >> 16) + (x & 0xffff);
        u16::from_be(x as u16)
    }
}

/// A width's entry points as the dispatchers call them. multiversion compiles a dispatcher's
/// arms in its default copy too, without `#[target_feature]`, when the build itself enables
/// their features (`-C target-cpu=native` on a CPU that has them, or `-C target-feature`);
/// a function without the attribute may call a kernel only in an `unsafe` block, so for such
/// a build the entry points are wrappers holding that block. Otherwise they are the kernels,
/// called only from the copies that carry the features.
#[cfg(target_arch = "x86_64")]
macro_rules! entry_module {
    ($entry:ident, $kernels:ident, $($feature:literal),+) => {
        #[cfg(all($(target_feature = $feature),+))]
        mod $entry {
            /// The kernel's `crc_sum`, the build's features being the kernel's.
            #[allow(unsafe_code)]
            #[inline(always)]
            pub(super) fn crc_sum(init: u32, data: &[u8]) -> (u32, u16) {
                // SAFETY: compiled only when the build enables every feature the kernel
                // needs, for every CPU it runs on.
                unsafe { super::$kernels::crc_sum(init, data) }
            }

            /// The kernel's `crc_sum_copy`, the build's features being the kernel's.
            #[allow(unsafe_code)]
            #[inline(always)]
            pub(super) fn crc_sum_copy(init: u32, src: &[u8], dst: &mut [u8]) -> (u32, u16) {
                // SAFETY: as for `crc_sum`.
                unsafe { super::$kernels::crc_sum_copy(init, src, dst) }
            }
        }
        #[cfg(not(all($(target_feature = $feature),+)))]
        use $kernels as $entry;
    };
}

#[cfg(target_arch = "x86_64")]
entry_module!(
    avx512_entry,
    avx512,
    "avx512f",
    "avx512bw",
    "avx512vl",
    "vpclmulqdq",
    "pclmulqdq",
    "sse4.2"
);
#[cfg(target_arch = "x86_64")]
entry_module!(
    avx2_entry,
    avx2,
    "avx2",
    "vpclmulqdq",
    "pclmulqdq",
    "sse4.2"
);

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use core::arch::x86_64::{
        __m512i, _mm512_add_epi64, _mm512_and_si512, _mm512_clmulepi64_epi128,
        _mm512_extracti32x4_epi32, _mm512_reduce_add_epi64, _mm512_set1_epi64, _mm512_set_epi64,
        _mm512_srli_epi64, _mm512_ternarylogic_epi64, _mm512_xor_si512, _mm_xor_si128,
    };

    use super::fold::{finish, fold_by, remainder};
    use super::CopyBlocks;

    const BLOCK: usize = 64;

    /// Multipliers for one block (512 bits), two, three and four blocks, and for the lanes of
    /// the last register (384, 256 and 128 bits), evaluated at compile time.
    const K1: (i64, i64) = fold_by(512);
    const K2: (i64, i64) = fold_by(2 * 512);
    const K3: (i64, i64) = fold_by(3 * 512);
    const K4: (i64, i64) = fold_by(4 * 512);
    const L0: (i64, i64) = fold_by(384);
    const L1: (i64, i64) = fold_by(256);
    const L2: (i64, i64) = fold_by(128);

    /// The 64 octets of `b` in one register (one unaligned load).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load(b: &[u8]) -> __m512i {
        let q = |i: usize| {
            let w: [u8; 8] = b[i * 8..i * 8 + 8].try_into().expect("8 octets");
            i64::from_le_bytes(w)
        };
        _mm512_set_epi64(q(7), q(6), q(5), q(4), q(3), q(2), q(1), q(0))
    }

    /// The same multipliers in every lane.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn splat((lo, hi): (i64, i64)) -> __m512i {
        _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo)
    }

    /// `acc` moved along by the multipliers `k`, plus `x`.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold(acc: __m512i, k: __m512i, x: __m512i) -> __m512i {
        let lo = _mm512_clmulepi64_epi128::<0x00>(acc, k);
        let hi = _mm512_clmulepi64_epi128::<0x11>(acc, k);
        _mm512_ternarylogic_epi64::<0x96>(lo, hi, x)
    }

    /// The native 32-bit words of a block, added into two sets of 64-bit lanes.
    struct Sum {
        lo: __m512i,
        hi: __m512i,
        mask: __m512i,
    }

    impl Sum {
        #[inline]
        #[target_feature(enable = "avx512f")]
        fn new() -> Sum {
            Sum {
                lo: _mm512_set1_epi64(0),
                hi: _mm512_set1_epi64(0),
                mask: _mm512_set1_epi64(0xffff_ffff),
            }
        }

        #[inline]
        #[target_feature(enable = "avx512f")]
        fn add(&mut self, x: __m512i) {
            self.lo = _mm512_add_epi64(self.lo, _mm512_and_si512(x, self.mask));
            self.hi = _mm512_add_epi64(self.hi, _mm512_srli_epi64::<32>(x));
        }

        #[inline]
        #[target_feature(enable = "avx512f")]
        fn total(&self) -> u64 {
            _mm512_reduce_add_epi64(_mm512_add_epi64(self.lo, self.hi)) as u64
        }
    }

    entry_points!(
        "avx512f,avx512bw,avx512vl,vpclmulqdq,pclmulqdq,sse4.2",
        _mm512_xor_si512
    );

    /// The CRC register `init` as the register the first block is `xor`ed with (its first
    /// four octets).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn first_register(init: u32) -> __m512i {
        _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, i64::from(init))
    }

    /// The CRC register after the folded blocks `acc`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,vpclmulqdq,pclmulqdq,sse4.2")]
    fn reduce(acc: __m512i) -> u32 {
        // Lanes 0, 1 and 2 moved to lane 3's place; lane 3 kept.
        let k = _mm512_set_epi64(0, 0, L2.1, L2.0, L1.1, L1.0, L0.1, L0.0);
        let t = fold(acc, k, _mm512_set1_epi64(0));
        let r = _mm_xor_si128(
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<0>(t),
                _mm512_extracti32x4_epi32::<1>(t),
            ),
            _mm_xor_si128(
                _mm512_extracti32x4_epi32::<2>(t),
                _mm512_extracti32x4_epi32::<3>(acc),
            ),
        );
        remainder(r)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use core::arch::x86_64::{
        __m256i, _mm256_add_epi64, _mm256_and_si256, _mm256_clmulepi64_epi128,
        _mm256_extract_epi64, _mm256_extracti128_si256, _mm256_set1_epi64x, _mm256_set_epi64x,
        _mm256_setzero_si256, _mm256_srli_epi64, _mm256_xor_si256, _mm_xor_si128,
    };

    use super::fold::{finish, fold_by, remainder};
    use super::CopyBlocks;

    const BLOCK: usize = 32;

    /// Multipliers for one block (256 bits), two, three and four blocks, and for the first
    /// lane of the last register (128 bits), evaluated at compile time.
    const K1: (i64, i64) = fold_by(256);
    const K2: (i64, i64) = fold_by(2 * 256);
    const K3: (i64, i64) = fold_by(3 * 256);
    const K4: (i64, i64) = fold_by(4 * 256);
    const L0: (i64, i64) = fold_by(128);

    /// The 32 octets of `b` in one register (one unaligned load).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn load(b: &[u8]) -> __m256i {
        let q = |i: usize| {
            let w: [u8; 8] = b[i * 8..i * 8 + 8].try_into().expect("8 octets");
            i64::from_le_bytes(w)
        };
        _mm256_set_epi64x(q(3), q(2), q(1), q(0))
    }

    /// The same multipliers in both lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn splat((lo, hi): (i64, i64)) -> __m256i {
        _mm256_set_epi64x(hi, lo, hi, lo)
    }

    /// `acc` moved along by the multipliers `k`, plus `x`.
    #[inline]
    #[target_feature(enable = "avx2,vpclmulqdq")]
    fn fold(acc: __m256i, k: __m256i, x: __m256i) -> __m256i {
        let lo = _mm256_clmulepi64_epi128::<0x00>(acc, k);
        let hi = _mm256_clmulepi64_epi128::<0x11>(acc, k);
        _mm256_xor_si256(_mm256_xor_si256(lo, hi), x)
    }

    /// The native 32-bit words of a block, added into two sets of 64-bit lanes.
    struct Sum {
        lo: __m256i,
        hi: __m256i,
        mask: __m256i,
    }

    impl Sum {
        #[inline]
        #[target_feature(enable = "avx2")]
        fn new() -> Sum {
            Sum {
                lo: _mm256_setzero_si256(),
                hi: _mm256_setzero_si256(),
                mask: _mm256_set1_epi64x(0xffff_ffff),
            }
        }

        #[inline]
        #[target_feature(enable = "avx2")]
        fn add(&mut self, x: __m256i) {
            self.lo = _mm256_add_epi64(self.lo, _mm256_and_si256(x, self.mask));
            self.hi = _mm256_add_epi64(self.hi, _mm256_srli_epi64::<32>(x));
        }

        #[inline]
        #[target_feature(enable = "avx2")]
        fn total(&self) -> u64 {
            let t = _mm256_add_epi64(self.lo, self.hi);
            [
                _mm256_extract_epi64::<0>(t),
                _mm256_extract_epi64::<1>(t),
                _mm256_extract_epi64::<2>(t),
                _mm256_extract_epi64::<3>(t),
            ]
            .iter()
            .map(|&q| q as u64)
            .sum()
        }
    }

    entry_points!("avx2,vpclmulqdq,pclmulqdq,sse4.2", _mm256_xor_si256);

    /// The CRC register `init` as the register the first block is `xor`ed with (its first
    /// four octets).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn first_register(init: u32) -> __m256i {
        _mm256_set_epi64x(0, 0, 0, i64::from(init))
    }

    /// The CRC register after the folded blocks `acc`.
    #[inline]
    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.2")]
    fn reduce(acc: __m256i) -> u32 {
        // Lane 0 moved to lane 1's place; lane 1 kept.
        let k = _mm256_set_epi64x(0, 0, L0.1, L0.0);
        let t = fold(acc, k, _mm256_setzero_si256());
        let r = _mm_xor_si128(
            _mm256_extracti128_si256::<0>(t),
            _mm256_extracti128_si256::<1>(acc),
        );
        remainder(r)
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crc_fast::crc32_iscsi as crc32c;

    /// The 512-bit kernel, where this CPU runs it.
    #[allow(unused_variables)] // the copy without the features does not read `data`
    #[multiversion::multiversion(targets(
        "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2"
    ))]
    fn avx512_kernel(data: &[u8]) -> Option<(u32, u16)> {
        multiversion::target::match_target! {
            "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2" =>
                Some(avx512_entry::crc_sum(!0, data)),
            _ => None,
        }
    }

    /// The 256-bit kernel, where this CPU runs it (an AVX-512 CPU runs it too).
    #[allow(unused_variables)] // the copy without the features does not read `data`
    #[multiversion::multiversion(targets("x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2"))]
    fn avx2_kernel(data: &[u8]) -> Option<(u32, u16)> {
        multiversion::target::match_target! {
            "x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2" => Some(avx2_entry::crc_sum(!0, data)),
            _ => None,
        }
    }

    /// The 512-bit copying kernel, where this CPU runs it.
    #[allow(unused_variables)]
    #[multiversion::multiversion(targets(
        "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2"
    ))]
    fn avx512_copy_kernel(init: u32, src: &[u8], dst: &mut [u8]) -> Option<(u32, u16)> {
        multiversion::target::match_target! {
            "x86_64+avx512f+avx512bw+avx512vl+vpclmulqdq+pclmulqdq+sse4.2" =>
                Some(avx512_entry::crc_sum_copy(init, src, dst)),
            _ => None,
        }
    }

    /// The 256-bit copying kernel, where this CPU runs it.
    #[allow(unused_variables)]
    #[multiversion::multiversion(targets("x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2"))]
    fn avx2_copy_kernel(init: u32, src: &[u8], dst: &mut [u8]) -> Option<(u32, u16)> {
        multiversion::target::match_target! {
            "x86_64+avx2+vpclmulqdq+pclmulqdq+sse4.2" => Some(avx2_entry::crc_sum_copy(init, src, dst)),
            _ => None,
        }
    }

    /// A copying kernel: CRC register in, CRC and folded sum out, or `None` where the CPU
    /// does not run it.
    type CopyKernel = fn(u32, &[u8], &mut [u8]) -> Option<(u32, u16)>;

    type CopyWay = (&'static str, fn(u32, &[u8], &mut [u8]) -> CrcSum);

    /// Every way this CPU has of copying while summing: the dispatched entry point and
    /// each copying kernel it can run.
    fn copy_ways() -> Vec<CopyWay> {
        fn with(k: CopyKernel, crc: u32, src: &[u8], dst: &mut [u8]) -> CrcSum {
            let (crc, folded) = k(!crc, src, dst).expect("checked available");
            CrcSum {
                crc,
                sum: PayloadSum::from_folded(folded, src.len()),
            }
        }
        let mut ways: Vec<CopyWay> = vec![("dispatched", copy_crc32c_and_sum_after)];
        if avx512_copy_kernel(0, &[], &mut []).is_some() {
            ways.push(("avx512", |c, s, d| with(avx512_copy_kernel, c, s, d)));
        }
        if avx2_copy_kernel(0, &[], &mut []).is_some() {
            ways.push(("avx2", |c, s, d| with(avx2_copy_kernel, c, s, d)));
        }
        ways
    }

    // The copying pass leaves the exact octets in the destination (nothing around it
    // touched) and gives the CRC of what came before followed by them, and their sum, as
    // the separate passes do: every length up to a few blocks past a jumbo frame's tail,
    // every alignment of source and destination within a block.
    #[test]
    fn copying_pass_copies_and_matches_the_separate_passes() {
        let src: Vec<u8> = (0..12_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        let prefix = b"\x00\x2aDDP+RDMAP header";
        let mut lens: Vec<usize> = (0..=300).collect();
        lens.extend([511, 512, 513, 1447, 1448, 1449, 4096, 8960, 9000, 11_000]);
        let mut dst = vec![0u8; 12_200];
        for (way, f) in copy_ways() {
            for &len in &lens {
                for (s_off, d_off) in [(0, 0), (1, 0), (0, 7), (13, 31), (63, 2)] {
                    dst.fill(0xa5);
                    let data = &src[s_off..s_off + len];
                    let got = f(crc32c(prefix), data, &mut dst[d_off..d_off + len]);
                    assert_eq!(&dst[d_off..d_off + len], data, "{way}: copy, len {len}");
                    assert!(dst[..d_off].iter().all(|&b| b == 0xa5), "{way}: before");
                    assert!(
                        dst[d_off + len..].iter().all(|&b| b == 0xa5),
                        "{way}: after"
                    );
                    let mut whole = prefix.to_vec();
                    whole.extend_from_slice(data);
                    assert_eq!(got.crc, crc32c(&whole), "{way}: crc, len {len} at {s_off}");
                    assert_eq!(
                        got.sum,
                        PayloadSum::from_folded(tcp::checksum::sum(data), len),
                        "{way}: sum, len {len} at {s_off}"
                    );
                }
            }
        }
    }

    // A digest built piece by piece (pieces of odd lengths, some copied, some summed in
    // place) equals the one pass over the whole: CRC continued, sums joined in order (RFC
    // 1071 §2(A): a piece after an odd length is summed byte-swapped).
    #[test]
    fn a_digest_taken_in_pieces_is_the_whole_ones() {
        let data: Vec<u8> = (0..5_000u32).map(|i| (i * 31 + 7) as u8).collect();
        let mut copy = vec![0u8; data.len()];
        for cuts in [
            &[0usize, 1, 2, 3, 5000][..],
            &[0, 17, 1465, 1466, 3001, 5000],
            &[0, 2, 1450, 2898, 4346, 5000],
        ] {
            let mut d = CrcSum::after(0);
            for (i, w) in cuts.windows(2).enumerate() {
                let (a, b) = (w[0], w[1]);
                if i % 2 == 0 {
                    d.extend_copy(&data[a..b], &mut copy[a..b]);
                } else {
                    copy[a..b].copy_from_slice(&data[a..b]);
                    d.extend(&data[a..b]);
                }
            }
            let whole = crc32c_and_sum(&data);
            assert_eq!(copy, data);
            assert_eq!(d.crc, whole.crc, "cuts {cuts:?}");
            assert_eq!(d.sum.folded(), whole.sum.folded(), "cuts {cuts:?}");
            assert_eq!(d.sum.octets(), data.len());
        }
    }

    type Way = (&'static str, fn(&[u8]) -> CrcSum);

    /// Every way this CPU has of computing both: the dispatched entry point and each kernel
    /// it can run, so that a CPU with AVX-512 checks the 256-bit kernel as well.
    fn ways() -> Vec<Way> {
        fn with(k: fn(&[u8]) -> Option<(u32, u16)>, data: &[u8]) -> CrcSum {
            let (crc, folded) = k(data).expect("checked available");
            CrcSum {
                crc,
                sum: PayloadSum::from_folded(folded, data.len()),
            }
        }
        let mut ways: Vec<Way> = vec![("dispatched", crc32c_and_sum)];
        if avx512_kernel(&[]).is_some() {
            ways.push(("avx512", |d| with(avx512_kernel, d)));
        }
        if avx2_kernel(&[]).is_some() {
            ways.push(("avx2", |d| with(avx2_kernel, d)));
        }
        ways
    }

    // The dispatched entry point takes a one-pass kernel exactly when the CPU has one.
    #[test]
    fn one_pass_where_a_kernel_runs() {
        let kernels = ways().len() - 1;
        assert_eq!(one_pass(), kernels > 0, "{kernels} kernels");
    }

    /// RFC 1071 the plain way: 16-bit big-endian words, an odd last octet padded, carries
    /// added back after every word.
    fn scalar_sum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for pair in data.chunks(2) {
            acc += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    /// 0 and 0xffff are the same one's complement value.
    fn same_sum(a: u16, b: u16) -> bool {
        a == b || (a | b == 0xffff && a & b == 0)
    }

    // RFC 3720 §B.4 vectors, and longer inputs of the same kind through the folding path.
    #[test]
    fn rfc3720_vectors() {
        let asc: Vec<u8> = (0u8..32).collect();
        let desc: Vec<u8> = (0u8..32).rev().collect();
        let cases: [(&[u8], u32); 5] = [
            (&[0u8; 32], 0x8A91_36AA),
            (&[0xffu8; 32], 0x62A8_AB43),
            (&asc, 0x46DD_794E),
            (&desc, 0x113F_DB5C),
            (b"123456789", 0xE306_9283),
        ];
        for (way, f) in ways() {
            for (data, value) in cases {
                assert_eq!(f(data).crc, value, "{way}");
            }
            for len in [64, 128, 256, 320, 1448, 9000] {
                for fill in [0x00, 0xff] {
                    let data = vec![fill; len];
                    assert_eq!(f(&data).crc, crc32c(&data), "{way}, len {len}");
                }
            }
        }
    }

    // Every length up to 2048 at every offset within 64 octets: the CRC is crc-fast's and the
    // sum the scalar RFC 1071 sum, with data that carries (all 0xff) and mixed data.
    #[test]
    fn matches_the_separate_passes_everywhere() {
        let ways = ways();
        let mut buf = vec![0u8; 2048 + 64];
        for fill in [0x5a_u8, 0xff] {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = if fill == 0xff {
                    0xff
                } else {
                    (i as u8).wrapping_mul(167).wrapping_add(fill) ^ (i >> 8) as u8
                };
            }
            for off in 0..64 {
                let mut want_sum: u32 = 0;
                for len in 0..=2048 {
                    if len > 0 {
                        let b = u32::from(buf[off + len - 1]);
                        want_sum += if (len - 1) % 2 == 0 { b << 8 } else { b };
                        want_sum = (want_sum & 0xffff) + (want_sum >> 16);
                    }
                    let data = &buf[off..off + len];
                    if len % 512 == 0 {
                        assert_eq!(want_sum as u16, scalar_sum(data), "the running sum");
                    }
                    let folded = tcp::checksum::sum(data);
                    assert!(
                        same_sum(folded, want_sum as u16),
                        "reference sum, len {len} offset {off}"
                    );
                    let crc = crc32c(data);
                    for (way, f) in &ways {
                        let got = f(data);
                        assert_eq!(got.crc, crc, "{way}: crc, len {len} offset {off}");
                        assert_eq!(got.sum.octets(), len);
                        assert_eq!(
                            got.sum,
                            PayloadSum::from_folded(folded, len),
                            "{way}: sum, len {len} offset {off}"
                        );
                    }
                }
            }
        }
    }

    // Long inputs (jumbo frames and beyond) and any single flipped bit changes the CRC.
    #[test]
    fn long_inputs_and_flipped_bits() {
        let data: Vec<u8> = (0..20_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for (way, f) in ways() {
            for len in [4095, 4096, 8999, 9000, 9001, 20_000] {
                let got = f(&data[..len]);
                assert_eq!(got.crc, crc32c(&data[..len]), "{way}, len {len}");
                assert_eq!(
                    got.sum,
                    PayloadSum::from_folded(tcp::checksum::sum(&data[..len]), len),
                    "{way}, len {len}"
                );
            }
            let mut d = data[..1448].to_vec();
            let good = f(&d).crc;
            for at in [0, 1, 3, 4, 31, 32, 63, 64, 700, 1447] {
                d[at] ^= 0x10;
                assert_ne!(f(&d).crc, good, "{way}, flip at {at}");
                d[at] ^= 0x10;
            }
        }
    }
}
