//! The x86 attention loops over an f16 KV cache: AVX2 with F16C (`vcvtph2ps` converts eight
//! halves in a register) and AVX-512F (sixteen halves a register; the scores keep two rows'
//! eight-lane sums in one register, so every lane adds what the AVX2 lane adds, in the same
//! order, and add the lanes of sixteen sums at once; the softmax keeps its sixteen lanes in
//! two registers or one). Both evaluate the
//! expressions of the reference ([`crate::kernels::attention`]) in its order, so they agree
//! with it bit for bit.

use half::f16;
use std::arch::x86_64::*;

use crate::kernels::attention::{AttentionKernels, HeadCall, SOFTMAX_LANES, check_heads};
use crate::kernels::exp::{EXP_MIN, exp_consts};

use super::prefetch;

/// Rows ahead the loops ask for. They were added when a head's row was a few lines out of
/// every cache row, which the hardware prefetchers did not follow (a deep decode read its cache
/// at a quarter of the memory's speed without them). Since the cache is head-major a head's
/// rows are one run; re-measured then (Zen 4, criterion `attention/decode_at4096`, four pairs
/// in turn), the AVX2 loops still ran 1.10-1.22 ms without the hints against 1.09-1.13 ms with
/// them, and the AVX-512 ones 540-644 us against 585-627 us, so they stay.
const ROWS_AHEAD: usize = 16;

/// Rows ahead the loops also ask for into L2 (32 KiB of a head of 128 in halves). The near
/// hint alone waits on the L1 fill buffers: from memory (criterion `attention/decode_at4096`,
/// which cycles a decode's 28 layers of cache, 470 MB, so that none of it stays in a cache
/// level; Intel Xeon, Sapphire Rapids class, two threads) a layer took 1.13-1.18 ms with it
/// alone and 0.78-0.87 ms with both; 64 to 256 rows measured alike, 32 and 512 slower, the far
/// hint alone slower.
const L2_ROWS_AHEAD: usize = 128;

/// Rows from which the loops prefetch: below, a head's rows (a few hundred KiB of cache rows)
/// are mostly in the caches already, and the hints only cost instructions (a prompt's tiles
/// ran 10 % slower with them).
const PREFETCH_MIN_ROWS: usize = 1024;

/// Asks for the `rows` K rows [`ROWS_AHEAD`] past row `p` (each `hd` wide, `stride` apart):
/// what a scores pass reads next but one; and for those [`L2_ROWS_AHEAD`] past it into L2.
#[inline(always)]
fn prefetch_rows(k: &[f16], p: usize, rows: usize, stride: usize, hd: usize) {
    for r in p..p + rows {
        prefetch_row(k, r, stride, 0, hd);
    }
}

/// Asks for `len` values from `at` of the row [`ROWS_AHEAD`] past row `p` (rows `stride`
/// apart) into L1, and of the row [`L2_ROWS_AHEAD`] past it into L2.
#[inline(always)]
fn prefetch_row(x: &[f16], p: usize, stride: usize, at: usize, len: usize) {
    prefetch::span(x, (p + ROWS_AHEAD) * stride + at, len);
    prefetch::span_to_l2(x, (p + L2_ROWS_AHEAD) * stride + at, len);
}

/// The AVX2 and AVX-VNNI paths' attention loops.
pub(in crate::kernels) const AVX2: AttentionKernels =
    AttentionKernels::new(scores_avx2, softmax_avx2, weighted_sum_avx2, "avx2");
/// The AVX-512 VNNI path's attention loops.
pub(in crate::kernels) const AVX512: AttentionKernels =
    AttentionKernels::new(scores_avx512, softmax_avx512, weighted_sum_avx512, "avx512");

fn softmax_avx2(x: &mut [f32]) {
    // SAFETY: this entry is only in the x86 paths' tables, handed out only on CPUs with AVX2.
    unsafe { softmax_ymm(x) }
}

fn softmax_avx512(x: &mut [f32]) {
    // SAFETY: this entry is only in the AVX-512 VNNI path's table, handed out only on CPUs
    // with AVX-512F and AVX2.
    unsafe { softmax_zmm(x) }
}

/// [`softmax`] on AVX2 registers: the sixteen lanes are two registers.
///
/// # Safety
/// The CPU has AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
unsafe fn softmax_ymm(x: &mut [f32]) {
    // SAFETY: the CPU has `__m256`'s features.
    unsafe { softmax::<__m256>(x) }
}

/// [`softmax`] on AVX-512 registers: the sixteen lanes are one register.
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and F16C.
#[target_feature(enable = "avx512f,avx2,f16c")]
unsafe fn softmax_zmm(x: &mut [f32]) {
    // SAFETY: the CPU has `__m512`'s features.
    unsafe { softmax::<__m512>(x) }
}

/// The reference [`crate::kernels::attention::softmax`] on registers of `R`, lane for lane:
/// register `j` of a sixteen-value chunk holds lanes `j * R::LANES..`, and the last chunk is
/// padded with `-inf`, whose `exp` is 0 and leaves every lane's sum as it was. Inlined into a
/// function compiled for `R`'s features.
///
/// # Safety
/// The CPU has `R`'s features.
#[inline(always)]
unsafe fn softmax<R: Reg>(x: &mut [f32]) {
    const L: usize = SOFTMAX_LANES;
    let regs = L / R::LANES;
    let (body, tail) = x.split_at_mut(x.len() / L * L);
    let mut pad = [f32::NEG_INFINITY; L];
    pad[..tail.len()].copy_from_slice(tail);
    let mut lanes = [0.0f32; L];
    // SAFETY: `body` holds whole chunks of `L` values and `pad` is one, so every register's
    // `R::LANES` values read or written below are inside them; `lanes` holds `L`; the CPU has
    // `R`'s features.
    unsafe {
        let mut max = R::set1(f32::NEG_INFINITY);
        for c in (0..body.len()).step_by(R::LANES) {
            max = R::max(max, R::loadf(body.as_ptr().add(c)));
        }
        for j in 0..regs {
            max = R::max(max, R::loadf(pad.as_ptr().add(j * R::LANES)));
        }
        R::store(lanes.as_mut_ptr(), max);
        let m = lanes[..R::LANES]
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let m = R::set1(m);
        let mut sums = [R::zero(); 2];
        for c in (0..body.len()).step_by(L) {
            exp_chunk(body.as_mut_ptr().add(c), m, &mut sums[..regs]);
        }
        exp_chunk(pad.as_mut_ptr(), m, &mut sums[..regs]);
        for (j, &sum) in sums[..regs].iter().enumerate() {
            R::store(lanes.as_mut_ptr().add(j * R::LANES), sum);
        }
    }
    tail.copy_from_slice(&pad[..tail.len()]);
    let inv = 1.0 / lanes.iter().fold(0.0f32, |s, &l| s + l);
    // SAFETY: as above.
    unsafe {
        let vinv = R::set1(inv);
        for c in (0..body.len()).step_by(R::LANES) {
            let at = body.as_mut_ptr().add(c);
            R::store(at, R::mul(R::loadf(at), vinv));
        }
    }
    tail.iter_mut().for_each(|v| *v *= inv);
}

/// `e = exp(x - m)` over the `sums.len() * R::LANES` values at `chunk`, stored in place and
/// added to `sums` (register `j` holding lanes `j * R::LANES..`).
///
/// # Safety
/// The CPU has `R`'s features; the values at `chunk` are readable and writable.
#[inline(always)]
unsafe fn exp_chunk<R: Reg>(chunk: *mut f32, m: R, sums: &mut [R]) {
    for (j, sum) in sums.iter_mut().enumerate() {
        // SAFETY: register `j`'s values are inside the chunk; the CPU has `R`'s features.
        unsafe {
            let at = chunk.add(j * R::LANES);
            let e = exp(R::sub(R::loadf(at), m));
            R::store(at, e);
            *sum = R::add(*sum, e);
        }
    }
}

/// The reference [`crate::kernels::exp::exp`] in every lane: the same multiplies and adds
/// in the same order, `2^n` added to the exponent bits, 0 where `x` is below
/// [`EXP_MIN`] or NaN.
///
/// # Safety
/// The CPU has `R`'s features.
#[inline(always)]
unsafe fn exp<R: Reg>(x: R) -> R {
    use exp_consts::*;
    // SAFETY: the CPU has `R`'s features.
    unsafe {
        let round = R::set1(ROUND);
        let n = R::sub(R::add(R::mul(x, R::set1(LOG2E)), round), round);
        let r = R::sub(
            R::sub(x, R::mul(n, R::set1(LN2_HI))),
            R::mul(n, R::set1(LN2_LO)),
        );
        let mut p = R::set1(P[0]);
        for &k in &P[1..] {
            p = R::add(R::mul(p, r), R::set1(k));
        }
        let e = R::add(R::add(R::mul(p, R::mul(r, r)), r), R::set1(1.0));
        R::zero_below(R::scale_pow2(e, n), x, EXP_MIN)
    }
}

fn scores_avx2(q: &[f32], heads: usize, k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
    let (hd, n) = check_heads(q, heads, k, stride, out, HeadCall::Scores);
    // SAFETY: this entry is only in the x86 paths' tables, which are handed out only on CPUs
    // with AVX2 and F16C (`Isa::required_features`); the rows were bounds-checked above.
    unsafe {
        match heads {
            2 => scores::<2>(0, q, hd, k, stride, scale, out, n),
            4 => scores::<4>(0, q, hd, k, stride, scale, out, n),
            8 => scores::<8>(0, q, hd, k, stride, scale, out, n),
            _ => {
                for g in 0..heads {
                    let (qh, oh) = (&q[g * hd..(g + 1) * hd], &mut out[g * n..(g + 1) * n]);
                    scores::<1>(0, qh, hd, k, stride, scale, oh, n);
                }
            }
        }
    }
}

fn weighted_sum_avx2(w: &[f32], heads: usize, v: &[f16], stride: usize, out: &mut [f32]) {
    let (n, width) = check_heads(w, heads, v, stride, out, HeadCall::Weights);
    // SAFETY: as in `scores_avx2`: the CPU has AVX2 and F16C, the rows are in bounds.
    unsafe {
        match heads {
            2 => weighted_sum_from::<2>(0, w, n, v, stride, out, width),
            4 => weighted_sum_from::<4>(0, w, n, v, stride, out, width),
            _ => {
                for g in 0..heads {
                    let (wh, oh) = (&w[g * n..(g + 1) * n], &mut out[g * width..(g + 1) * width]);
                    weighted_sum_from::<1>(0, wh, n, v, stride, oh, width);
                }
            }
        }
    }
}

fn scores_avx512(q: &[f32], heads: usize, k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
    let (hd, n) = check_heads(q, heads, k, stride, out, HeadCall::Scores);
    // SAFETY: this entry is only in the AVX-512 VNNI path's table, which is handed out only on
    // CPUs with AVX-512F, AVX2 and F16C; the rows were bounds-checked above.
    unsafe {
        match heads {
            2 => scores_zmm::<2>(q, hd, k, stride, scale, out, n),
            4 => scores_zmm::<4>(q, hd, k, stride, scale, out, n),
            8 => scores_zmm::<8>(q, hd, k, stride, scale, out, n),
            _ => {
                for g in 0..heads {
                    let (qh, oh) = (&q[g * hd..(g + 1) * hd], &mut out[g * n..(g + 1) * n]);
                    scores_zmm::<1>(qh, hd, k, stride, scale, oh, n);
                }
            }
        }
    }
}

fn weighted_sum_avx512(w: &[f32], heads: usize, v: &[f16], stride: usize, out: &mut [f32]) {
    let (n, width) = check_heads(w, heads, v, stride, out, HeadCall::Weights);
    // SAFETY: as in `scores_avx512`: the CPU has AVX-512F, AVX2 and F16C, the rows are in bounds.
    unsafe {
        match heads {
            2 => weighted_sum_zmm::<2>(w, n, v, stride, out, width),
            4 => weighted_sum_zmm::<4>(w, n, v, stride, out, width),
            _ => {
                for g in 0..heads {
                    let (wh, oh) = (&w[g * n..(g + 1) * n], &mut out[g * width..(g + 1) * width]);
                    weighted_sum_zmm::<1>(wh, n, v, stride, oh, width);
                }
            }
        }
    }
}

/// What the shared passes ([`scores_pass`], [`weighted_sum_pass`]) need of a register type.
/// Every method is compiled for the type's features, which its callers must have.
trait Reg: Copy {
    /// f32 lanes of a register.
    const LANES: usize;
    /// All lanes zero.
    ///
    /// # Safety
    /// The CPU must have the register's features.
    unsafe fn zero() -> Self;
    /// `a + b`, lane by lane.
    ///
    /// # Safety
    /// The CPU must have the register's features.
    unsafe fn add(a: Self, b: Self) -> Self;
    /// `a - b`, lane by lane.
    ///
    /// # Safety
    /// The CPU must have the register's features.
    unsafe fn sub(a: Self, b: Self) -> Self;
    /// `a * b`, lane by lane.
    ///
    /// # Safety
    /// The CPU must have the register's features.
    unsafe fn mul(a: Self, b: Self) -> Self;
    /// The larger of `a` and `b`, lane by lane (`b` where either is NaN).
    ///
    /// # Safety
    /// The CPU must have the register's features.
    unsafe fn max(a: Self, b: Self) -> Self;
    /// `e * 2^n` for integral `n` (`|n| < 127`, the result normal), by adding `n` to the
    /// exponent bits.
    ///
    /// # Safety
    /// The CPU must have the register's features.
    unsafe fn scale_pow2(e: Self, n: Self) -> Self;
    /// `v`, with 0 in the lanes where `x >= min` does not hold (NaN included).
    ///
    /// # Safety
    /// The CPU must have the register's features.
    unsafe fn zero_below(v: Self, x: Self, min: f32) -> Self;
    /// `LANES` values from `p`.
    ///
    /// # Safety
    /// The CPU must have the register's features; `p..p + LANES` must be readable.
    unsafe fn loadf(p: *const f32) -> Self;
    /// `x` in every lane.
    ///
    /// # Safety
    /// The CPU must have the register's features.
    unsafe fn set1(x: f32) -> Self;
    /// Stores the lanes at `p`.
    ///
    /// # Safety
    /// The CPU must have the register's features; `p..p + LANES` must be writable.
    unsafe fn store(p: *mut f32, v: Self);
    /// `LANES` halves from `p`, widened.
    ///
    /// # Safety
    /// The CPU must have the register's features; `p..p + LANES` must be readable.
    unsafe fn load(p: *const f16) -> Self;
}

/// AVX2: eight lanes.
impl Reg for __m256 {
    const LANES: usize = 8;

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn zero() -> Self {
        _mm256_setzero_ps()
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn add(a: Self, b: Self) -> Self {
        _mm256_add_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn sub(a: Self, b: Self) -> Self {
        _mm256_sub_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn mul(a: Self, b: Self) -> Self {
        _mm256_mul_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn max(a: Self, b: Self) -> Self {
        _mm256_max_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scale_pow2(e: Self, n: Self) -> Self {
        let n = _mm256_slli_epi32::<23>(_mm256_cvtps_epi32(n));
        _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(e), n))
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn zero_below(v: Self, x: Self, min: f32) -> Self {
        _mm256_and_ps(v, _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_set1_ps(min)))
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn loadf(p: *const f32) -> Self {
        // SAFETY: the caller guarantees eight readable values; `loadu` needs no alignment.
        unsafe { _mm256_loadu_ps(p) }
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn set1(x: f32) -> Self {
        _mm256_set1_ps(x)
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn store(p: *mut f32, v: Self) {
        // SAFETY: the caller guarantees eight writable values; `storeu` needs no alignment.
        unsafe { _mm256_storeu_ps(p, v) }
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load(p: *const f16) -> Self {
        // SAFETY: the caller guarantees eight readable halves; `loadu` needs no alignment.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
    }
}

/// AVX-512: sixteen lanes.
impl Reg for __m512 {
    const LANES: usize = 16;

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn zero() -> Self {
        _mm512_setzero_ps()
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn add(a: Self, b: Self) -> Self {
        _mm512_add_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn sub(a: Self, b: Self) -> Self {
        _mm512_sub_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn mul(a: Self, b: Self) -> Self {
        _mm512_mul_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn max(a: Self, b: Self) -> Self {
        _mm512_max_ps(a, b)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn scale_pow2(e: Self, n: Self) -> Self {
        let n = _mm512_slli_epi32::<23>(_mm512_cvtps_epi32(n));
        _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(e), n))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn zero_below(v: Self, x: Self, min: f32) -> Self {
        _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_set1_ps(min)), v)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn loadf(p: *const f32) -> Self {
        // SAFETY: the caller guarantees sixteen readable values; `loadu` needs no alignment.
        unsafe { _mm512_loadu_ps(p) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn set1(x: f32) -> Self {
        _mm512_set1_ps(x)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn store(p: *mut f32, v: Self) {
        // SAFETY: the caller guarantees sixteen writable values; `storeu` needs no alignment.
        unsafe { _mm512_storeu_ps(p, v) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn load(p: *const f16) -> Self {
        // SAFETY: the caller guarantees sixteen readable halves; no alignment needed.
        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
    }
}

/// `out[j] = (lanes of row j added from lane 0 on) * scale` for the `count <= 8` rows of eight
/// lane sums, after the leftover products `q_tail . k_tail(j)` of each (the reference
/// [`crate::kernels::attention::dot`]'s order).
///
/// # Safety
/// The CPU has AVX2 and F16C; `out` holds `count` values and each `k_tail(j)` `q_tail.len()`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn finish<'k>(
    rows: [__m256; 8],
    count: usize,
    q_tail: &[f32],
    k_tail: impl Fn(usize) -> &'k [f16],
    scale: f32,
    out: &mut [f32],
) {
    let mut s = [0.0f32; 8];
    // SAFETY: `s` holds eight f32.
    unsafe { _mm256_storeu_ps(s.as_mut_ptr(), lane_sums(rows)) };
    for (j, o) in out[..count].iter_mut().enumerate() {
        let k = k_tail(j);
        let v = q_tail
            .iter()
            .zip(k)
            .fold(s[j], |v, (x, y)| v + x * y.to_f32());
        *o = v * scale;
    }
}

/// Lane `j` = the lanes of row `j` added from lane 0 on, for eight rows of eight lane sums: the
/// rows are transposed so that one vector add adds lane `i` of every row at once.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn lane_sums(rows: [__m256; 8]) -> __m256 {
    let [r0, r1, r2, r3, r4, r5, r6, r7] = rows;
    let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
    let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
    let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
    let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
    // Lanes (0, 4), (1, 5), (2, 6), (3, 7) of rows 0-3, then of rows 4-7.
    let u = [
        _mm256_shuffle_ps::<0x44>(t0, t2),
        _mm256_shuffle_ps::<0xee>(t0, t2),
        _mm256_shuffle_ps::<0x44>(t1, t3),
        _mm256_shuffle_ps::<0xee>(t1, t3),
        _mm256_shuffle_ps::<0x44>(t4, t6),
        _mm256_shuffle_ps::<0xee>(t4, t6),
        _mm256_shuffle_ps::<0x44>(t5, t7),
        _mm256_shuffle_ps::<0xee>(t5, t7),
    ];
    // Lane i of every row: the low 128 bits of rows 0-3's and rows 4-7's pairs for i < 4,
    // the high ones after. (No closure: it would not be compiled with this fn's features.)
    let mut sums = _mm256_permute2f128_ps::<0x20>(u[0], u[4]);
    for i in 1..4 {
        sums = _mm256_add_ps(sums, _mm256_permute2f128_ps::<0x20>(u[i], u[i + 4]));
    }
    for i in 0..4 {
        sums = _mm256_add_ps(sums, _mm256_permute2f128_ps::<0x31>(u[i], u[i + 4]));
    }
    sums
}

/// The scores of positions `p..` for the `G` query heads of `q` (each `hd` wide, sharing the K
/// rows) in passes of `N` positions per head (one independent sum each in flight) while a pass
/// fits; returns the first position left. Each K row is loaded and widened once for all `G`
/// heads; every head's lanes add the same products in the same order whatever `N` and `G`.
/// Head `g`'s scores go to `out[g * n..]`.
///
/// # Safety
/// The CPU has AVX2 and F16C; `q` holds `G` heads of `hd`, `out` `G` rows of `n`, and `k` holds
/// `n` rows of `stride` (`hd` wide).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_pass<const N: usize, const G: usize>(
    mut p: usize,
    q: &[f32],
    hd: usize,
    k: &[f16],
    stride: usize,
    scale: f32,
    out: &mut [f32],
    n: usize,
) -> usize {
    let body = hd / 8 * 8;
    let ahead = n >= PREFETCH_MIN_ROWS;
    while p + N <= n {
        if ahead {
            prefetch_rows(k, p, N, stride, hd);
        }
        // SAFETY: the caller guarantees AVX2 and F16C.
        let mut acc = [[unsafe { _mm256_setzero_ps() }; N]; G];
        let mut i = 0;
        while i < body {
            // SAFETY: `i + 8 <= hd`, so every head of q and the pass's rows (in bounds by the
            // caller's guarantee) have eight values at `i`; the CPU has AVX2 and F16C.
            unsafe {
                let mut qv = [_mm256_setzero_ps(); G];
                for (g, v) in qv.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(q.as_ptr().add(g * hd + i));
                }
                for r in 0..N {
                    let row = <__m256 as Reg>::load(k.as_ptr().add((p + r) * stride + i));
                    for (a, &qg) in acc.iter_mut().zip(&qv) {
                        a[r] = _mm256_add_ps(a[r], _mm256_mul_ps(qg, row));
                    }
                }
            }
            i += 8;
        }
        // SAFETY: the CPU has AVX2 and F16C.
        let mut rows = [unsafe { _mm256_setzero_ps() }; 8];
        if body == hd && G * N <= 8 {
            // No leftovers: every head's sums are added and scaled in one go.
            for (j, row) in rows[..G * N].iter_mut().enumerate() {
                *row = acc[j / N][j % N];
            }
            let mut s = [0.0f32; 8];
            // SAFETY: `s` holds eight f32; the CPU has AVX2 and F16C.
            unsafe {
                let sums = _mm256_mul_ps(lane_sums(rows), _mm256_set1_ps(scale));
                _mm256_storeu_ps(s.as_mut_ptr(), sums);
            }
            for g in 0..G {
                out[g * n + p..g * n + p + N].copy_from_slice(&s[g * N..(g + 1) * N]);
            }
            p += N;
            continue;
        }
        for (g, head) in acc.into_iter().enumerate() {
            let qh = &q[g * hd..(g + 1) * hd];
            rows[..N].copy_from_slice(&head);
            let k_tail = |j: usize| &k[(p + j) * stride + body..(p + j) * stride + hd];
            let out = &mut out[g * n + p..g * n + p + N];
            // SAFETY: as above; `out` holds the pass's rows, each with `hd - body` leftovers.
            unsafe { finish(rows, N, &qh[body..], k_tail, scale, out) };
        }
        p += N;
    }
    p
}

/// `out[g][d..]` of the weighted sums of the `G` heads of `w` (each `n` weights, sharing the V
/// rows) in passes of `N` registers of `R` per head (`N * R::LANES` outputs) while a pass
/// fits; returns the first output left. Where several passes read many rows, the rows go in
/// blocks of [`SUM_BLOCK_ROWS`]: each block runs every pass, resuming its sums from `out`, so
/// that the passes read a block's rows while they are in L1 instead of each streaming all of V
/// (the AVX2 loops of a deep decode, Zen 4: 1.09-1.25 ms -> 0.84-0.97 ms per layer from
/// memory). Each V row is loaded and widened once per pass for all `G` heads; every output adds
/// the same products in the same order whatever `R`, `N`, `G` and the blocks. Head `g`'s
/// outputs are `out[g * width..]`. Inlined into a function compiled for `R`'s features.
///
/// # Safety
/// The CPU has `R`'s features; `w` holds `G` rows of `n`, `out` `G` rows of `width`, and `v`
/// holds `n` rows of `stride` (`width` wide).
#[inline(always)]
unsafe fn weighted_sum_pass<R: Reg, const N: usize, const G: usize>(
    d0: usize,
    w: &[f32],
    n: usize,
    v: &[f16],
    stride: usize,
    out: &mut [f32],
    width: usize,
) -> usize {
    let span = N * R::LANES;
    let end = d0 + width.saturating_sub(d0) / span * span;
    assert!(G * width <= out.len() && end <= width);
    let ahead = n >= PREFETCH_MIN_ROWS;
    // Blocks pay where the rows come from memory and several passes read them.
    let block = match ahead && end - d0 > span {
        true => SUM_BLOCK_ROWS,
        false => n.max(1),
    };
    // At least one block, so that no rows still store zero sums.
    for p0 in (0..n.max(1)).step_by(block) {
        let rows = p0..n.min(p0 + block);
        for d in (d0..end).step_by(span) {
            // SAFETY: the caller guarantees `R`'s features; `out[g * width + d..][..span]` is
            // in bounds (`d + span <= end <= width`, `G * width <= out.len()`, checked above).
            let mut acc = [[unsafe { R::zero() }; N]; G];
            if p0 > 0 {
                for (g, head) in acc.iter_mut().enumerate() {
                    for (j, a) in head.iter_mut().enumerate() {
                        // SAFETY: as above.
                        *a = unsafe { R::loadf(out.as_ptr().add(g * width + d + R::LANES * j)) };
                    }
                }
            }
            for p in rows.clone() {
                if ahead {
                    prefetch_row(v, p, stride, d, span);
                }
                // SAFETY: the caller guarantees `R`'s features.
                let mut wv = [unsafe { R::zero() }; G];
                for (g, x) in wv.iter_mut().enumerate() {
                    // SAFETY: as above.
                    *x = unsafe { R::set1(w[g * n + p]) };
                }
                for j in 0..N {
                    let at = p * stride + d + R::LANES * j;
                    // SAFETY: `d + LANES * (j + 1) <= width`, inside row `p`; the CPU has the
                    // features.
                    let x = unsafe { R::load(v.as_ptr().add(at)) };
                    for (a, &wg) in acc.iter_mut().zip(&wv) {
                        // SAFETY: as above.
                        a[j] = unsafe { R::add(a[j], R::mul(wg, x)) };
                    }
                }
            }
            for (g, head) in acc.into_iter().enumerate() {
                for (j, a) in head.into_iter().enumerate() {
                    // SAFETY: in bounds, as above.
                    unsafe { R::store(out.as_mut_ptr().add(g * width + d + R::LANES * j), a) };
                }
            }
        }
    }
    end
}

/// Rows of V one block of [`weighted_sum_pass`] reads: 16 KiB of a head of 128 in halves.
const SUM_BLOCK_ROWS: usize = 64;

/// The scores of `G` heads from position `p` on, four positions per pass per head (four
/// independent sums in flight; two when four heads share the rows, one for eight, so the sums
/// fit the sixteen registers), then the rest one at a time.
///
/// # Safety
/// The CPU has AVX2 and F16C; the shapes are as [`scores_pass`] asks.
#[target_feature(enable = "avx2,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn scores<const G: usize>(
    p: usize,
    q: &[f32],
    hd: usize,
    k: &[f16],
    stride: usize,
    scale: f32,
    out: &mut [f32],
    n: usize,
) {
    // SAFETY: this fn's contract is the passes'.
    unsafe {
        let p = match G {
            1 | 2 => scores_pass::<4, G>(p, q, hd, k, stride, scale, out, n),
            4 => scores_pass::<2, G>(p, q, hd, k, stride, scale, out, n),
            _ => p,
        };
        scores_pass::<1, G>(p, q, hd, k, stride, scale, out, n);
    }
}

/// [`scores`] on AVX-512: for head widths that are a multiple of sixteen,
/// [`scores_pass_zmm`] sixteen (head, position) sums per pass; the rest of the rows, and other
/// widths, go to [`scores`].
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and F16C; the shapes are as [`scores_pass`] asks.
#[target_feature(enable = "avx512f,avx2,f16c")]
unsafe fn scores_zmm<const G: usize>(
    q: &[f32],
    hd: usize,
    k: &[f16],
    stride: usize,
    scale: f32,
    out: &mut [f32],
    n: usize,
) {
    let mut dup = [_mm512_setzero_ps(); DUP_QUERY_REGS];
    let p = match hd.is_multiple_of(16) && G * hd / 8 <= DUP_QUERY_REGS {
        true => {
            // Eight query values of a head in both halves of a register, for the pass's
            // multiplies to take straight from memory.
            for (c, d) in dup[..G * hd / 8].iter_mut().enumerate() {
                // SAFETY: `8c + 8 <= G * hd = q.len()`; the CPU has AVX-512F.
                let x = unsafe { _mm256_loadu_pd(q.as_ptr().add(8 * c).cast()) };
                *d = _mm512_castpd_ps(_mm512_broadcast_f64x4(x));
            }
            let dup = &dup[..G * hd / 8];
            // SAFETY: this fn's contract is the pass's, and `hd % 16 == 0`.
            unsafe {
                match G {
                    1 => scores_pass_zmm::<8, 1>(dup, hd, k, stride, scale, out, n),
                    2 => scores_pass_zmm::<4, 2>(dup, hd, k, stride, scale, out, n),
                    4 => scores_pass_zmm::<2, 4>(dup, hd, k, stride, scale, out, n),
                    _ => scores_pass_zmm::<1, 8>(dup, hd, k, stride, scale, out, n),
                }
            }
        }
        false => 0,
    };
    // SAFETY: this fn's contract is the passes'; the CPU has AVX2 and F16C as well.
    unsafe { scores::<G>(p, q, hd, k, stride, scale, out, n) };
}

/// Registers of duplicated query values [`scores_zmm`] keeps (8 KiB): eight heads of 128, or
/// two of 512; wider queries take the AVX2 loops.
const DUP_QUERY_REGS: usize = 128;

/// The scores of positions `0..` for `G` query heads (each `hd` wide, a multiple of sixteen)
/// in passes of `2N` positions while a pass fits (`G * N = 8`: eight registers of sums);
/// returns the first position left. `q[g * hd / 8 + c]` holds values `8c..8c + 8` of head `g`
/// in both halves. Register `(g, r)` holds head `g`'s eight lane sums of rows `p + 2r` (low
/// half) and `p + 2r + 1` (high half). Each step widens sixteen halves of both rows with one
/// convert each and regroups them into the rows' first eight and last eight values (two lane
/// shuffles, shared by the `G` heads), so every lane adds the products of the reference's lane
/// in its order: a multiply and an add per eight values, chunk after chunk. [`finish_zmm`]
/// then adds each row's lanes for all sixteen sums at once.
///
/// # Safety
/// The CPU has AVX-512F; `hd % 16 == 0`; `q` holds `G * hd / 8` registers, `out` `G` rows of
/// `n`, and `k` holds `n` rows of `stride` (`hd` wide).
#[inline(always)]
unsafe fn scores_pass_zmm<const N: usize, const G: usize>(
    q: &[__m512],
    hd: usize,
    k: &[f16],
    stride: usize,
    scale: f32,
    out: &mut [f32],
    n: usize,
) -> usize {
    const { assert!(N * G == 8, "a pass keeps eight registers of sums") };
    let ahead = n >= PREFETCH_MIN_ROWS;
    let per_head = hd / 8;
    let mut p = 0;
    while p + 2 * N <= n {
        if ahead {
            prefetch_rows(k, p, 2 * N, stride, hd);
        }
        // SAFETY: the CPU has AVX-512F (all of this fn's intrinsics), and every read is inside
        // rows `p..p + 2N` of `k` (`i + 16 <= hd`, `p + 2N <= n`, in bounds by the caller's
        // guarantee).
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); N]; G];
            for i in (0..hd).step_by(16) {
                for r in 0..N {
                    let row = k.as_ptr().add((p + 2 * r) * stride + i);
                    let a = _mm512_cvtph_ps(_mm256_loadu_si256(row.cast()));
                    let b = _mm512_cvtph_ps(_mm256_loadu_si256(row.add(stride).cast()));
                    // The first eight values of both rows, then the last eight.
                    let first = _mm512_shuffle_f32x4::<0x44>(a, b);
                    let last = _mm512_shuffle_f32x4::<0xee>(a, b);
                    for (g, head) in acc.iter_mut().enumerate() {
                        let c = g * per_head + i / 8;
                        head[r] = _mm512_add_ps(head[r], _mm512_mul_ps(q[c], first));
                        head[r] = _mm512_add_ps(head[r], _mm512_mul_ps(q[c + 1], last));
                    }
                }
            }
            let mut regs = [_mm512_setzero_ps(); 8];
            for (j, reg) in regs.iter_mut().enumerate() {
                *reg = acc[j / N][j % N];
            }
            let sums = finish_zmm(regs, scale);
            for g in 0..G {
                let at = g * n + p;
                out[at..at + 2 * N].copy_from_slice(&sums[g * 2 * N..(g + 1) * 2 * N]);
            }
        }
        p += 2 * N;
    }
    p
}

/// `sums[2j + h] = (lanes of row h of register j, added from lane 0 on) * scale` for eight
/// registers of two rows of eight lane sums each (the reference's [`dot`] over a width with no
/// leftovers): two 4x4 transposes within the 128-bit lanes and one regrouping of the lanes put
/// lane `i` of all sixteen rows in one register, so seven vector adds sum every row in order.
///
/// [`dot`]: crate::kernels::attention::dot
///
/// # Safety
/// The CPU has AVX-512F.
#[inline]
#[target_feature(enable = "avx512f,avx2,f16c")]
unsafe fn finish_zmm(x: [__m512; 8], scale: f32) -> [f32; 16] {
    // A register's 128-bit lanes: row 0 values 0-3, row 0 values 4-7, row 1 0-3, row 1 4-7.
    // After the transpose of registers 4t..4t + 4, `y[t][i]`'s 128-bit lane `l` holds value
    // `i` of lane `l` of those four registers. (Loops, not closures: a closure would not be
    // compiled with this fn's features.)
    let mut y = [[_mm512_setzero_ps(); 4]; 2];
    for (t, yt) in y.iter_mut().enumerate() {
        let x = &x[4 * t..4 * t + 4];
        let (t0, t1) = (
            _mm512_unpacklo_ps(x[0], x[1]),
            _mm512_unpackhi_ps(x[0], x[1]),
        );
        let (t2, t3) = (
            _mm512_unpacklo_ps(x[2], x[3]),
            _mm512_unpackhi_ps(x[2], x[3]),
        );
        *yt = [
            _mm512_shuffle_ps::<0x44>(t0, t2),
            _mm512_shuffle_ps::<0xee>(t0, t2),
            _mm512_shuffle_ps::<0x44>(t1, t3),
            _mm512_shuffle_ps::<0xee>(t1, t3),
        ];
    }
    // Values 0-3 of every row: lanes 0 and 2 of both transposes; values 4-7: lanes 1 and 3.
    // The sums' lanes then hold rows 0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15.
    let [y0, y1] = y;
    let mut sum = _mm512_shuffle_f32x4::<0x88>(y0[0], y1[0]);
    for (&a, &b) in y0[1..].iter().zip(&y1[1..]) {
        sum = _mm512_add_ps(sum, _mm512_shuffle_f32x4::<0x88>(a, b));
    }
    for (&a, &b) in y0.iter().zip(&y1) {
        sum = _mm512_add_ps(sum, _mm512_shuffle_f32x4::<0xdd>(a, b));
    }
    let sum = _mm512_mul_ps(sum, _mm512_set1_ps(scale));
    // Back to row order: lane `j` takes the lane holding row `j`.
    let order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    let mut out = [0.0f32; 16];
    // SAFETY: `out` holds sixteen f32.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), _mm512_permutexvar_ps(order, sum)) };
    out
}

/// The weighted sums, 128 outputs per pass per head (for one or two heads: 16 of the 32
/// registers hold sums; 64 for four heads, 32 for eight), so a head of 128 reads each V row in
/// one pass; the rest of the outputs go to [`weighted_sum_from`].
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and F16C; the shapes are as [`weighted_sum_pass`] asks.
#[target_feature(enable = "avx512f,avx2,f16c")]
unsafe fn weighted_sum_zmm<const G: usize>(
    w: &[f32],
    n: usize,
    v: &[f16],
    stride: usize,
    out: &mut [f32],
    width: usize,
) {
    // SAFETY: this fn's contract is the pass's.
    let d = unsafe {
        match G {
            1 | 2 => weighted_sum_pass::<__m512, 8, G>(0, w, n, v, stride, out, width),
            4 => weighted_sum_pass::<__m512, 4, G>(0, w, n, v, stride, out, width),
            _ => weighted_sum_pass::<__m512, 2, G>(0, w, n, v, stride, out, width),
        }
    };
    // SAFETY: the columns from `d` on are inside every row; the CPU has AVX2, F16C.
    unsafe { weighted_sum_from::<G>(d, w, n, v, stride, out, width) }
}

/// The weighted sums from output `d` on: 64 outputs per pass over the rows (32 for two heads,
/// 16 for four), then 8 at a time, then the leftovers one by one.
///
/// # Safety
/// The CPU has AVX2 and F16C; the shapes are as [`weighted_sum_pass`] asks.
#[target_feature(enable = "avx2,f16c")]
unsafe fn weighted_sum_from<const G: usize>(
    d: usize,
    w: &[f32],
    n: usize,
    v: &[f16],
    stride: usize,
    out: &mut [f32],
    width: usize,
) {
    // SAFETY: this fn's contract is the passes'.
    let d = unsafe {
        let d = match G {
            1 => weighted_sum_pass::<__m256, 8, G>(d, w, n, v, stride, out, width),
            2 => weighted_sum_pass::<__m256, 4, G>(d, w, n, v, stride, out, width),
            _ => weighted_sum_pass::<__m256, 2, G>(d, w, n, v, stride, out, width),
        };
        weighted_sum_pass::<__m256, 1, G>(d, w, n, v, stride, out, width)
    };
    for g in 0..G {
        for dd in d..width {
            let mut s = 0.0f32;
            for p in 0..n {
                s += w[g * n + p] * v[p * stride + dd].to_f32();
            }
            out[g * width + dd] = s;
        }
    }
}
