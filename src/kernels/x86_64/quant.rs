//! AVX2 + F16C kernels for ggml block types.
//!
//! The products go in tiles of four (row, column) pairs: four rows of one column (a gemv), two
//! of two, or one row of four columns. Per block each pair's exact integer sums come from its
//! SIMD dot step as eight int32 lanes, one `hadd` tree reduces the four pairs to one vector,
//! and the fold runs on the four at once, lane = pair, with the same separately rounded
//! operations, in the same order, as [`QuantBlock::fold`]. So the results equal the scalar
//! reference bit for bit, whatever the tile.
//!
//! The int8 products go through `maddubs`, whose int16 pair sums saturate, so every weight
//! operand is bounded: unsigned codes `<= 63` as they are (Q4_1, Q5_1, the K types; Q6_K adds
//! its offset back once per block from the activation sums), signed weights `|w| <= 16` as
//! `maddubs(|y|, sign(w, y))` (Q4_0, Q5_0), and Q8_0, whose weights reach -128, widened to
//! int16. No pair sum exceeds 2 * 128 * 63, whatever the activations, -128 included.

use std::arch::x86_64::*;

use super::prefetch::{self, PassGroups};
use crate::format::{
    ActBlock, BlockQ2_0g64, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K,
    BlockQ6K, BlockQ8_0, BlockQ8_0x2, BlockQ8_1, BlockQ8K, QuantBlock,
};
use crate::kernels::quant::{QuantEntry, QuantKernels, Step};
use crate::kernels::{Gemm, const_table};

/// The AVX2 path's table: its own step for every type (the base of the VNNI paths' tables).
pub(in crate::kernels) static KERNELS: QuantKernels = QuantKernels::every::<Ymm>();

impl<B: Avx2Block> Step<B> for Ymm {
    const ENTRY: QuantEntry<B> = QuantEntry::new(rows_avx2::<B>, "avx2");
}

fn rows_avx2<B: Avx2Block>(g: Gemm<'_, B, B::Act>) {
    // SAFETY: this entry is only in the tables of the x86 paths, which are handed out only on
    // CPUs with AVX2 and F16C (`Isa::required_features`).
    unsafe { rows::<B>(g) }
}

/// # Safety
///
/// The CPU must have AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
unsafe fn rows<B: Avx2Block>(g: Gemm<'_, B, B::Act>) {
    // SAFETY: the CPU has AVX2 and F16C (this fn's contract), all `Ymm` needs.
    unsafe { drive::<B, Ymm>(g) }
}

/// A block type's AVX2 steps.
pub(super) trait Avx2Block: QuantBlock<Act: Avx2Act> {
    /// The block's `isum` as eight int32 lanes and its `msum`.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX2.
    unsafe fn dot(&self, a: &Self::Act) -> (__m256i, i32);
    /// `acc + fold` for four (weight block, activation block) pairs `w[l]`, `a[l]` (lane `l`),
    /// from their sums `[isum, msum]` (one lane each): the activation type's fold ([`Avx2Act::fold4`]) unless the type has its
    /// own.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX2 and F16C.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn fold4(w: [&Self; 4], a: [&Self::Act; 4], sums: [__m128i; 2], acc: __m128) -> __m128 {
        // SAFETY: this fn is compiled for what the fold needs.
        unsafe { Self::Act::fold4(w.map(|b| b.scale_bits()), a, sums, acc) }
    }
}

/// An activation type's AVX2 float step: the fold of [`QuantBlock::fold`] of the weight types
/// that take it, on four lanes.
pub(super) trait Avx2Act: ActBlock {
    /// `acc + fold` for four pairs (lane `l`) with the weight scales `w[l]`
    /// ([`QuantBlock::scale_bits`]), the activation blocks `a[l]` and the sums `[isum, msum]`.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX2 and F16C.
    unsafe fn fold4(w: [[u16; 2]; 4], a: [&Self; 4], sums: [__m128i; 2], acc: __m128) -> __m128;
}

/// The dot step [`drive`] runs on a block type: AVX2's ([`Ymm`]), or a wider one for the types
/// that have it (`super::quant_zmm`).
pub(super) trait DotStep<B: Avx2Block> {
    /// The block's sums, as [`Avx2Block::dot`] gives them.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX2, F16C and the step's own features.
    unsafe fn dot(b: &B, a: &B::Act) -> (__m256i, i32);
}

/// The AVX2 path: its dot steps are [`Avx2Block::dot`].
struct Ymm;

impl<B: Avx2Block> DotStep<B> for Ymm {
    #[inline(always)]
    unsafe fn dot(b: &B, a: &B::Act) -> (__m256i, i32) {
        // SAFETY: the caller guarantees AVX2.
        unsafe { b.dot(a) }
    }
}

/// The one driver of the AVX2 path and of the AVX-512 one: the rows of `g` times its columns,
/// with `D`'s dot step. Inlined into each path's entry, so it is compiled for that entry's
/// features.
///
/// # Safety
///
/// The CPU must have AVX2, F16C and `D`'s features.
#[inline(always)]
pub(super) unsafe fn drive<B: Avx2Block, D: DotStep<B>>(mut g: Gemm<'_, B, B::Act>) {
    let ncols = g.ncols;
    // Columns in tiles of four one row wide, then what is left of them in the tile shape that
    // wastes no lane (four rows of one column, two of two, or one row of three and a copy).
    let wide = ncols / 4 * 4;
    // SAFETY: the CPU has what `D` needs (this fn's contract).
    unsafe {
        tiles::<B, D, 1, 4>(&mut g, 0..wide);
        match ncols - wide {
            0 => {}
            1 => tiles::<B, D, 4, 1>(&mut g, wide..ncols),
            2 => tiles::<B, D, 2, 2>(&mut g, wide..ncols),
            _ => tiles::<B, D, 1, 4>(&mut g, wide..ncols),
        }
    }
}

/// The columns `cols` of every row, in tiles of `R` rows by `C` columns (`R * C = 4`), lane
/// `l` = row `l / C`, column `l % C`; a short tile repeats its last row or column and drops
/// the copies. The rows of a tile are decoded once per block for all of its columns: the
/// lanes that share a row share the weight loads and decode steps of `dot` (one expression,
/// which the compiler computes once).
///
/// # Safety
///
/// The CPU must have AVX2, F16C and `D`'s features.
#[inline(always)]
unsafe fn tiles<B: Avx2Block, D: DotStep<B>, const R: usize, const C: usize>(
    g: &mut Gemm<'_, B, B::Act>,
    cols: std::ops::Range<usize>,
) {
    let (w, nb, y, ncols, ld) = (g.x, g.nb, g.y, g.ncols, g.ld);
    let lane = |l: usize| (l / C, l % C);
    for pass in PassGroups::all::<R>(w.len() / nb) {
        let row = |l: usize| &w[pass.group(lane(l).0) * nb..][..nb];
        let wr = [row(0), row(1), row(2), row(3)];
        for c0 in cols.clone().step_by(C) {
            let col = |l: usize| &y[(c0 + lane(l).1).min(ncols - 1) * nb..][..nb];
            let yc = [col(0), col(1), col(2), col(3)];
            // SAFETY: SSE is part of x86_64.
            let mut acc = unsafe { _mm_setzero_ps() };
            for b in 0..nb {
                if c0 == cols.start {
                    // The rows are interleaved streams, which the hardware prefetchers
                    // follow badly: each asks for its own blocks ahead into L2 at the rate it
                    // reads them (the Q6_K head gemv ran at 18 % of the 1-thread memory
                    // ceiling without a hint, 75-100 % with the next tile's into L1 on a Zen 5;
                    // on a Zen 4 that one left it at 9.5 GB/s, the next tile but one into L2
                    // 22.5-24.3 GB/s, with no loss in the four-column tiles).
                    for i in 0..R {
                        prefetch::stream_ahead(w, pass.group(i) * nb + b);
                    }
                }
                let ws = [&wr[0][b], &wr[1][b], &wr[2][b], &wr[3][b]];
                let ys = [&yc[0][b], &yc[1][b], &yc[2][b], &yc[3][b]];
                // SAFETY: the CPU has what `D` and the folds need (this fn's contract).
                acc = unsafe {
                    let [(i0, m0), (i1, m1), (i2, m2), (i3, m3)] = [
                        D::dot(ws[0], ys[0]),
                        D::dot(ws[1], ys[1]),
                        D::dot(ws[2], ys[2]),
                        D::dot(ws[3], ys[3]),
                    ];
                    let isum = reduce4(i0, i1, i2, i3);
                    B::fold4(ws, ys, [isum, _mm_setr_epi32(m0, m1, m2, m3)], acc)
                };
            }
            let mut lanes = [0f32; 4];
            // SAFETY: `lanes` holds four f32.
            unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), acc) };
            for (l, v) in lanes.into_iter().enumerate() {
                let (r, c) = lane(l);
                if r < pass.real && c0 + c < cols.end {
                    g.out[(c0 + c) * ld + pass.group(r)] = v;
                }
            }
        }
    }
}

/// The four totals of four int32x8 vectors.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn reduce4(v0: __m256i, v1: __m256i, v2: __m256i, v3: __m256i) -> __m128i {
    let a = _mm256_hadd_epi32(v0, v1);
    let b = _mm256_hadd_epi32(v2, v3);
    let c = _mm256_hadd_epi32(a, b);
    _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256::<1>(c))
}

/// Exact int16 pair sums of `w * y` for `|w| <= 64` and any int8 `y`.
#[inline]
#[target_feature(enable = "avx2")]
fn mul_pairs(w: __m256i, y: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_abs_epi8(y), _mm256_sign_epi8(w, y))
}

/// Exact int32 lanes of `w * y` (`|w| <= 64`).
#[inline]
#[target_feature(enable = "avx2")]
fn dot32(w: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(mul_pairs(w, y), _mm256_set1_epi16(1))
}

/// Exact int32 lanes of `w * y` for unsigned `w <= 63` (the first operand of `maddubs`).
#[inline]
#[target_feature(enable = "avx2")]
fn dot32_unsigned(w: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), _mm256_set1_epi16(1))
}

#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load32(p: &[i8; 32]) -> __m256i {
    // SAFETY: `p` is 32 readable bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

/// The 32 nibbles of `qs`: low halves in the low lane, high halves in the high lane.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn nibbles(qs: &[u8; 16]) -> __m256i {
    // SAFETY: `qs` is 16 readable bytes.
    let q = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
    let m = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(q, m);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), m);
    _mm256_set_m128i(hi, lo)
}

/// `0x10` in byte `j` where bit `j` of the little-endian word `qh` is set.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn fifth_bits(qh: [u8; 4]) -> __m256i {
    let v = _mm256_set1_epi32(i32::from_le_bytes(qh));
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    bit_bytes(
        _mm256_shuffle_epi8(v, spread),
        0x8040_2010_0804_0201u64 as i64,
    )
}

/// `0x10` in each byte of `v` whose bit given by the byte's place in `masks` is set.
#[inline]
#[target_feature(enable = "avx2")]
fn bit_bytes(v: __m256i, masks: i64) -> __m256i {
    let m = _mm256_set1_epi64x(masks);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(v, m), m);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

#[inline]
#[target_feature(enable = "f16c")]
fn half4(b: [u16; 4]) -> __m128 {
    let v = _mm_setr_epi16(
        b[0] as i16,
        b[1] as i16,
        b[2] as i16,
        b[3] as i16,
        0,
        0,
        0,
        0,
    );
    _mm_cvtph_ps(v)
}

/// `acc + isum * (d_w * d_a)` on four rows.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn fold_scaled(d_w: [u16; 4], d_a: __m128, isum: __m128i, acc: __m128) -> __m128 {
    let dd = _mm_mul_ps(half4(d_w), d_a);
    _mm_add_ps(acc, _mm_mul_ps(_mm_cvtepi32_ps(isum), dd))
}

/// One fp16 scale `d` against Q8_0's (Q4_0, Q5_0, Q8_0); no minimum part (`msum` is 0).
impl Avx2Act for BlockQ8_0 {
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn fold4(w: [[u16; 2]; 4], a: [&Self; 4], sums: [__m128i; 2], acc: __m128) -> __m128 {
        let [isum, _] = sums;
        fold_scaled(w.map(|w| w[0]), half4(a.map(|a| a.d)), isum, acc)
    }
}

/// A scale `d` and a minimum `m` against Q8_1 (Q4_1, Q5_1): `acc + ((d * d_a) * isum +
/// m * s_a)`, the minimum's part from the activation sums `s`, not from `msum` (0).
impl Avx2Act for BlockQ8_1 {
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn fold4(w: [[u16; 2]; 4], a: [&Self; 4], sums: [__m128i; 2], acc: __m128) -> __m128 {
        let [isum, _] = sums;
        let dd = _mm_mul_ps(half4(w.map(|w| w[0])), half4(a.map(|a| a.d)));
        let ms = _mm_mul_ps(half4(w.map(|w| w[1])), half4(a.map(|a| a.s)));
        _mm_add_ps(acc, _mm_add_ps(_mm_mul_ps(dd, _mm_cvtepi32_ps(isum)), ms))
    }
}

/// Super-block scales `d` and `dmin` against q8_K (Q4_K, Q5_K): `acc + ((d * d_a) * isum -
/// (dmin * d_a) * msum)`. (Q6_K, without a minimum, has its own fold.)
impl Avx2Act for BlockQ8K {
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn fold4(w: [[u16; 2]; 4], a: [&Self; 4], sums: [__m128i; 2], acc: __m128) -> __m128 {
        let [isum, msum] = sums;
        let da = q8k_scales(a);
        let dd = _mm_mul_ps(half4(w.map(|w| w[0])), da);
        let dm = _mm_mul_ps(half4(w.map(|w| w[1])), da);
        let sum = _mm_sub_ps(
            _mm_mul_ps(dd, _mm_cvtepi32_ps(isum)),
            _mm_mul_ps(dm, _mm_cvtepi32_ps(msum)),
        );
        _mm_add_ps(acc, sum)
    }
}

/// One fp16 scale against the two Q8_0 halves of a Q8_0x2 (Q2_0 g64): `acc + d * (d_a0 *
/// isum0 + d_a1 * isum1)`, `isum` holding half 0 and `msum` half 1.
impl Avx2Act for BlockQ8_0x2 {
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn fold4(w: [[u16; 2]; 4], a: [&Self; 4], sums: [__m128i; 2], acc: __m128) -> __m128 {
        let [isum, msum] = sums;
        let d0 = half4(a.map(|a| a.b[0].d));
        let d1 = half4(a.map(|a| a.b[1].d));
        let inner = _mm_add_ps(
            _mm_mul_ps(d0, _mm_cvtepi32_ps(isum)),
            _mm_mul_ps(d1, _mm_cvtepi32_ps(msum)),
        );
        _mm_add_ps(acc, _mm_mul_ps(half4(w.map(|w| w[0])), inner))
    }
}

impl Avx2Block for BlockQ4_0 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(&self, a: &BlockQ8_0) -> (__m256i, i32) {
        let w = _mm256_sub_epi8(nibbles(&self.qs), _mm256_set1_epi8(8));
        (dot32(w, load32(&a.qs)), 0)
    }
}

impl Avx2Block for BlockQ5_0 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(&self, a: &BlockQ8_0) -> (__m256i, i32) {
        let q = _mm256_or_si256(nibbles(&self.qs), fifth_bits(self.qh));
        let w = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
        (dot32(w, load32(&a.qs)), 0)
    }
}

impl Avx2Block for BlockQ4_1 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(&self, a: &BlockQ8_1) -> (__m256i, i32) {
        (dot32_unsigned(nibbles(&self.qs), load32(&a.qs)), 0)
    }
}

impl Avx2Block for BlockQ5_1 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(&self, a: &BlockQ8_1) -> (__m256i, i32) {
        let q = _mm256_or_si256(nibbles(&self.qs), fifth_bits(self.qh));
        (dot32_unsigned(q, load32(&a.qs)), 0)
    }
}

impl Avx2Block for BlockQ8_0 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(&self, a: &BlockQ8_0) -> (__m256i, i32) {
        // Weights reach -128: widen both to int16 (exact products, pair sums <= 2^15).
        let (w, y) = (load32(&self.qs), load32(&a.qs));
        let lo = _mm256_madd_epi16(
            _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w)),
            _mm256_cvtepi8_epi16(_mm256_castsi256_si128(y)),
        );
        let hi = _mm256_madd_epi16(
            _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(w)),
            _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(y)),
        );
        (_mm256_add_epi32(lo, hi), 0)
    }
}

/// The scales of four `q8_K` blocks.
#[inline]
#[target_feature(enable = "avx2")]
fn q8k_scales(a: [&BlockQ8K; 4]) -> __m128 {
    _mm_setr_ps(a[0].d, a[1].d, a[2].d, a[3].d)
}

/// Activation bytes `32c .. 32c + 32` of a `q8_K` block.
#[inline]
#[target_feature(enable = "avx2")]
fn q8k_chunk(a: &BlockQ8K, c: usize) -> __m256i {
    load32(a.qs[32 * c..32 * c + 32].try_into().expect("32 bytes"))
}

/// `sum_j m_j * (bsums[2j] + bsums[2j + 1])`: the minimums' part of Q4_K / Q5_K.
#[inline]
fn min_sum(scales: &[u8; 12], a: &BlockQ8K) -> i32 {
    (0..8)
        .map(|j| {
            let (_, m) = crate::format::scale_min_k4(j, scales);
            m as i32 * (a.bsums[2 * j] as i32 + a.bsums[2 * j + 1] as i32)
        })
        .sum()
}

/// The Q4_K / Q5_K integer sums, the fifth bits from `qh` when given.
#[inline]
#[target_feature(enable = "avx2")]
fn dot_k4(
    scales: &[u8; 12],
    qs: &[u8; 128],
    qh: Option<&[u8; 32]>,
    a: &BlockQ8K,
) -> (__m256i, i32) {
    let low = _mm256_set1_epi8(0x0F);
    // SAFETY: `qh` is 32 readable bytes.
    let h = qh.map(|qh| unsafe { _mm256_loadu_si256(qh.as_ptr().cast()) });
    let mut acc = _mm256_setzero_si256();
    for c in 0..4 {
        // SAFETY: bytes `32c .. 32c + 32` of the 128 in `qs`.
        let q = unsafe { _mm256_loadu_si256(qs.as_ptr().add(32 * c).cast()) };
        for hi in 0..2 {
            let j = 2 * c + hi;
            let mut v =
                _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * hi as i32)), low);
            if let Some(h) = h {
                v = _mm256_or_si256(v, bit_bytes(h, 0x0101_0101_0101_0101i64 << j));
            }
            let (sc, _) = crate::format::scale_min_k4(j, scales);
            let p = _mm256_maddubs_epi16(v, q8k_chunk(a, j));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(sc as i16)));
        }
    }
    (acc, min_sum(scales, a))
}

impl Avx2Block for BlockQ4K {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(&self, a: &BlockQ8K) -> (__m256i, i32) {
        dot_k4(&self.scales, &self.qs, None, a)
    }
}

impl Avx2Block for BlockQ5K {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(&self, a: &BlockQ8K) -> (__m256i, i32) {
        dot_k4(&self.scales, &self.qs, Some(&self.qh), a)
    }
}

/// `pshufb` masks that put int16 scale `2i` of a lane's eight in every word of the low lane and
/// scale `2i + 1` in every word of the high lane.
const Q6K_SCALE_PICK: [[i8; 32]; 4] = const_table!([[i8; 32]; 4], |i, b| {
    let word = if b < 16 { 2 * i } else { 2 * i + 1 };
    (2 * word + b % 2) as i8
});

/// A Q6_K block's sixteen scales as int16, and `-32 * sc_g * bsums_g` over eight int32 lanes
/// (the offset of its unsigned codes, which every dot step starts from).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn q6k_scales_and_offset(b: &BlockQ6K, a: &BlockQ8K) -> (__m256i, __m256i) {
    // SAFETY: `scales` is 16 bytes, `bsums` 16 int16.
    let (sc, bsums) = unsafe {
        (
            _mm256_cvtepi8_epi16(_mm_loadu_si128(b.scales.as_ptr().cast())),
            _mm256_loadu_si256(a.bsums.as_ptr().cast()),
        )
    };
    let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc, bsums));
    (sc, _mm256_sub_epi32(_mm256_setzero_si256(), offset))
}

impl Avx2Block for BlockQ6K {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(&self, a: &BlockQ8K) -> (__m256i, i32) {
        // The six-bit codes `u = q + 32` go unsigned into `maddubs` (pairs <= 2 * 63 * 128); the
        // offset comes back once per block as `32 * sum_g sc_g * bsums_g`.
        let low = _mm256_set1_epi8(0x0F);
        let two = _mm256_set1_epi8(0x30);
        let (_, mut acc) = q6k_scales_and_offset(self, a);
        for n in 0..2 {
            // SAFETY: bytes `64n .. 64n + 64` of `ql` (128), `32n .. 32n + 32` of `qh` (64),
            // `8n .. 8n + 8` of `scales` (16).
            let (qa, qb, h, sc8) = unsafe {
                (
                    _mm256_loadu_si256(self.ql.as_ptr().add(64 * n).cast()),
                    _mm256_loadu_si256(self.ql.as_ptr().add(64 * n + 32).cast()),
                    _mm256_loadu_si256(self.qh.as_ptr().add(32 * n).cast()),
                    _mm_loadl_epi64(self.scales.as_ptr().add(8 * n).cast()),
                )
            };
            let sc = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8));
            let q = [
                _mm256_or_si256(
                    _mm256_and_si256(qa, low),
                    _mm256_and_si256(_mm256_slli_epi16::<4>(h), two),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(qb, low),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(h), two),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(qa), low),
                    _mm256_and_si256(h, two),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(qb), low),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(h), two),
                ),
            ];
            for (i, q) in q.into_iter().enumerate() {
                // SAFETY: the mask is 32 bytes.
                let pick = unsafe { _mm256_loadu_si256(Q6K_SCALE_PICK[i].as_ptr().cast()) };
                let p = _mm256_maddubs_epi16(q, q8k_chunk(a, 4 * n + i));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_shuffle_epi8(sc, pick)));
            }
        }
        (acc, 0)
    }

    /// One fp16 scale `d` against q8_K's f32 one; no minimum part (`msum` is 0).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn fold4(w: [&Self; 4], a: [&BlockQ8K; 4], sums: [__m128i; 2], acc: __m128) -> __m128 {
        let [isum, _] = sums;
        fold_scaled(w.map(|b| b.d), q8k_scales(a), isum, acc)
    }
}

impl Avx2Block for BlockQ2_0g64 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(&self, a: &BlockQ8_0x2) -> (__m256i, i32) {
        // Codes `u <= 3` unsigned into `maddubs`; `w = u - 1` comes back as `- sum(y)`, per half.
        // The two halves' sums travel as lanes 0..4 (half 0) and 4..8 (half 1) of `isum`'s
        // vector and as `msum = isum1` after the reduction.
        // Both halves' integers, exactly, through the shared scalar-free path: the codes of
        // half h are bytes 8h .. 8h + 8 of `qs`, spread to one byte per weight.
        let spread = |h: usize| {
            let mut c = [0u8; 32];
            for (j, c) in c.iter_mut().enumerate() {
                *c = (self.qs[8 * h + j / 4] >> (2 * (j % 4))) & 3;
            }
            // SAFETY: `c` is 32 bytes.
            unsafe { _mm256_loadu_si256(c.as_ptr().cast()) }
        };
        let ones = _mm256_set1_epi8(1);
        let half = |h: usize| {
            let y = load32(&a.b[h].qs);
            let dot = dot32_unsigned(spread(h), y);
            _mm256_sub_epi32(dot, dot32_unsigned(ones, y))
        };
        let (h0, h1) = (half(0), half(1));
        let total1 = {
            let s = _mm_add_epi32(
                _mm256_castsi256_si128(h1),
                _mm256_extracti128_si256::<1>(h1),
            );
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)))
        };
        (h0, total1)
    }
}
