//! The x86 attention loops over an f16 KV cache: AVX2 with F16C (`vcvtph2ps` converts eight
//! halves in a register) and AVX-512F (sixteen halves a register; the scores keep two rows'
//! eight-lane sums in one register, so every lane adds what the AVX2 lane adds, in the same
//! order). Both evaluate the expression of the reference ([`crate::kernels::attention`]) in its
//! order, so they agree with it bit for bit.

use half::f16;
use std::arch::x86_64::*;

use crate::kernels::attention::{AttentionKernels, check_rows};

/// The AVX2 and AVX-VNNI paths' attention loops.
pub(in crate::kernels) const AVX2: AttentionKernels =
    AttentionKernels::new(scores_avx2, weighted_sum_avx2, "avx2");
/// The AVX-512 VNNI path's attention loops.
pub(in crate::kernels) const AVX512: AttentionKernels =
    AttentionKernels::new(scores_avx512, weighted_sum_avx512, "avx512");

fn scores_avx2(q: &[f32], k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
    check_rows(k, out.len(), stride, q.len());
    // SAFETY: this entry is only in the x86 paths' tables, which are handed out only on CPUs
    // with AVX2 and F16C (`Isa::required_features`); the rows were bounds-checked above.
    unsafe { scores(q, k, stride, scale, out) }
}

fn weighted_sum_avx2(w: &[f32], v: &[f16], stride: usize, out: &mut [f32]) {
    check_rows(v, w.len(), stride, out.len());
    // SAFETY: as in `scores_avx2`: the CPU has AVX2 and F16C, the rows are in bounds.
    unsafe { weighted_sum(w, v, stride, out) }
}

fn scores_avx512(q: &[f32], k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
    check_rows(k, out.len(), stride, q.len());
    // SAFETY: this entry is only in the AVX-512 VNNI path's table, which is handed out only on
    // CPUs with AVX-512F, AVX2 and F16C; the rows were bounds-checked above.
    unsafe { scores_zmm(q, k, stride, scale, out) }
}

fn weighted_sum_avx512(w: &[f32], v: &[f16], stride: usize, out: &mut [f32]) {
    check_rows(v, w.len(), stride, out.len());
    // SAFETY: as in `scores_avx512`: the CPU has AVX-512F, AVX2 and F16C, the rows are in bounds.
    unsafe { weighted_sum_zmm(w, v, stride, out) }
}

/// What the shared passes ([`scores_pass`], [`weighted_sum_pass`]) need of a register type.
/// Every method is compiled for the type's features, which its callers must have.
trait Reg: Copy {
    /// f32 lanes of a register.
    const LANES: usize;
    /// K rows one scores register sums (eight lanes each).
    const ROWS: usize;
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
    /// `a * b`, lane by lane.
    ///
    /// # Safety
    /// The CPU must have the register's features.
    unsafe fn mul(a: Self, b: Self) -> Self;
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
    /// Eight query values from `p`, in each row's part of the register.
    ///
    /// # Safety
    /// The CPU must have the register's features; `p..p + 8` must be readable.
    unsafe fn q8(p: *const f32) -> Self;
    /// Eight halves of each of the register's rows (row `r` at `p + r * stride`), widened.
    ///
    /// # Safety
    /// The CPU must have the register's features; eight halves at each row must be readable.
    unsafe fn rows8(p: *const f16, stride: usize) -> Self;
    /// `LANES` halves from `p`, widened.
    ///
    /// # Safety
    /// The CPU must have the register's features; `p..p + LANES` must be readable.
    unsafe fn load(p: *const f16) -> Self;
    /// The eight lane sums of row `h < ROWS` of the register.
    ///
    /// # Safety
    /// The CPU must have the register's features.
    unsafe fn row_sums(self, h: usize) -> __m256;
}

/// AVX2: eight lanes, one K row per scores register.
impl Reg for __m256 {
    const LANES: usize = 8;
    const ROWS: usize = 1;

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
    unsafe fn mul(a: Self, b: Self) -> Self {
        _mm256_mul_ps(a, b)
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
    unsafe fn q8(p: *const f32) -> Self {
        // SAFETY: the caller guarantees eight readable values; `loadu` needs no alignment.
        unsafe { _mm256_loadu_ps(p) }
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn rows8(p: *const f16, _stride: usize) -> Self {
        // SAFETY: as the caller guarantees.
        unsafe { Self::load(p) }
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load(p: *const f16) -> Self {
        // SAFETY: the caller guarantees eight readable halves; `loadu` needs no alignment.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
    }

    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn row_sums(self, _h: usize) -> __m256 {
        self
    }
}

/// AVX-512: sixteen lanes; a scores register holds the eight lane sums of one row in its low
/// half and of the next in its high half.
impl Reg for __m512 {
    const LANES: usize = 16;
    const ROWS: usize = 2;

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
    unsafe fn mul(a: Self, b: Self) -> Self {
        _mm512_mul_ps(a, b)
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
    unsafe fn q8(p: *const f32) -> Self {
        // SAFETY: the caller guarantees eight readable values; `loadu` needs no alignment.
        let d = _mm256_castps_pd(unsafe { _mm256_loadu_ps(p) });
        _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(d), d, 1))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn rows8(p: *const f16, stride: usize) -> Self {
        // SAFETY: the caller guarantees eight readable halves at each; no alignment needed.
        let (lo, hi) = unsafe {
            (
                _mm_loadu_si128(p.cast()),
                _mm_loadu_si128(p.add(stride).cast()),
            )
        };
        _mm512_cvtph_ps(_mm256_set_m128i(hi, lo))
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn load(p: *const f16) -> Self {
        // SAFETY: the caller guarantees sixteen readable halves; no alignment needed.
        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx2,f16c")]
    unsafe fn row_sums(self, h: usize) -> __m256 {
        if h == 0 {
            _mm512_castps512_ps256(self)
        } else {
            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(self), 1))
        }
    }
}

/// The lanes of `acc` added in the reference [`crate::kernels::attention::dot`]'s order, plus
/// the leftover products.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn finish(acc: __m256, q_tail: &[f32], k_tail: &[f16]) -> f32 {
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds eight f32.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    let tail: f32 = q_tail.iter().zip(k_tail).map(|(x, y)| x * y.to_f32()).sum();
    lanes.iter().sum::<f32>() + tail
}

/// The scores of positions `p..` in passes of `N` registers of `R` (`N * R::ROWS` positions,
/// one independent sum each in flight) while a pass fits; returns the first position left.
/// Every position's lanes add the same products in the same order whatever `R` and `N`.
/// Inlined into a function compiled for `R`'s features.
///
/// # Safety
/// The CPU has `R`'s features (which include AVX2 and F16C), and `k` holds `out.len()` rows of
/// `stride` (`q.len()` wide).
#[inline(always)]
unsafe fn scores_pass<R: Reg, const N: usize>(
    mut p: usize,
    q: &[f32],
    k: &[f16],
    stride: usize,
    scale: f32,
    out: &mut [f32],
) -> usize {
    let hd = q.len();
    let body = hd / 8 * 8;
    while p + N * R::ROWS <= out.len() {
        // SAFETY: the caller guarantees `R`'s features.
        let mut acc = [unsafe { R::zero() }; N];
        let mut i = 0;
        while i < body {
            // SAFETY: `i + 8 <= hd`, so q and the pass's rows (in bounds by the caller's
            // guarantee) have eight values at `i`; the CPU has `R`'s features.
            unsafe {
                let qv = R::q8(q.as_ptr().add(i));
                for (r, a) in acc.iter_mut().enumerate() {
                    let row = k.as_ptr().add((p + R::ROWS * r) * stride + i);
                    *a = R::add(*a, R::mul(qv, R::rows8(row, stride)));
                }
            }
            i += 8;
        }
        for (r, a) in acc.into_iter().enumerate() {
            for h in 0..R::ROWS {
                let at = p + R::ROWS * r + h;
                let row = at * stride;
                // SAFETY: the CPU has `R`'s features, AVX2 and F16C among them.
                let s = unsafe { finish(a.row_sums(h), &q[body..], &k[row + body..row + hd]) };
                out[at] = s * scale;
            }
        }
        p += N * R::ROWS;
    }
    p
}

/// `out[d..]` of the weighted sum in passes of `N` registers of `R` (`N * R::LANES` outputs
/// over all the rows) while a pass fits; returns the first output left. Every output adds the
/// same products in the same order whatever `R` and `N`. Inlined into a function compiled for
/// `R`'s features.
///
/// # Safety
/// The CPU has `R`'s features, and `v` holds `w.len()` rows of `stride` (`out.len()` wide).
#[inline(always)]
unsafe fn weighted_sum_pass<R: Reg, const N: usize>(
    mut d: usize,
    w: &[f32],
    v: &[f16],
    stride: usize,
    out: &mut [f32],
) -> usize {
    while d + N * R::LANES <= out.len() {
        // SAFETY: the caller guarantees `R`'s features.
        let mut acc = [unsafe { R::zero() }; N];
        for (p, &wp) in w.iter().enumerate() {
            // SAFETY: as above.
            let wv = unsafe { R::set1(wp) };
            for (j, a) in acc.iter_mut().enumerate() {
                let at = p * stride + d + R::LANES * j;
                // SAFETY: `d + LANES * (j + 1) <= hd`, inside row `p`; the CPU has the
                // features.
                *a = unsafe { R::add(*a, R::mul(wv, R::load(v.as_ptr().add(at)))) };
            }
        }
        for (j, a) in acc.into_iter().enumerate() {
            // SAFETY: `out[d + LANES * j..d + LANES * (j + 1)]` is in bounds.
            unsafe { R::store(out.as_mut_ptr().add(d + R::LANES * j), a) };
        }
        d += N * R::LANES;
    }
    d
}

/// The scores four positions per pass, four independent sums in flight (one sum alone would
/// wait on the add latency), then the rest one at a time.
///
/// # Safety
/// The CPU has AVX2 and F16C, and `k` holds `out.len()` rows of `stride` (`q.len()` wide).
#[target_feature(enable = "avx2,f16c")]
unsafe fn scores(q: &[f32], k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
    // SAFETY: this fn's contract is the passes'.
    unsafe {
        let p = scores_pass::<__m256, 4>(0, q, k, stride, scale, out);
        scores_pass::<__m256, 1>(p, q, k, stride, scale, out);
    }
}

/// [`scores`] eight positions per pass: register `r` holds the eight lane sums of rows
/// `p + 2r` (low half) and `p + 2r + 1` (high half), each lane adding exactly the products
/// [`scores`]' lane adds; the rest of the rows go to [`scores`].
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and F16C, and `k` holds `out.len()` rows of `stride`.
#[target_feature(enable = "avx512f,avx2,f16c")]
unsafe fn scores_zmm(q: &[f32], k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
    // SAFETY: this fn's contract is the pass's.
    let p = unsafe { scores_pass::<__m512, 4>(0, q, k, stride, scale, out) };
    if p < out.len() {
        // SAFETY: the rows from `p` on are in bounds as the caller guaranteed; the CPU
        // has AVX2 and F16C.
        unsafe { scores(q, &k[p * stride..], stride, scale, &mut out[p..]) }
    }
}

/// [`weighted_sum`] 128 outputs per pass in eight registers (each output adds the same
/// products in the same order); the rest of the outputs go to [`weighted_sum`].
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and F16C, and `v` holds `w.len()` rows of `stride`.
#[target_feature(enable = "avx512f,avx2,f16c")]
unsafe fn weighted_sum_zmm(w: &[f32], v: &[f16], stride: usize, out: &mut [f32]) {
    // SAFETY: this fn's contract is the pass's.
    let d = unsafe { weighted_sum_pass::<__m512, 8>(0, w, v, stride, out) };
    if d < out.len() {
        // SAFETY: the columns from `d` on are inside every row; the CPU has AVX2, F16C.
        unsafe { weighted_sum(w, &v[d..], stride, &mut out[d..]) }
    }
}

/// The weighted sum 64 outputs per pass over the rows in eight registers, then 8 at a time,
/// then the leftovers one by one.
///
/// # Safety
/// The CPU has AVX2 and F16C, and `v` holds `w.len()` rows of `stride` (`out.len()` wide).
#[target_feature(enable = "avx2,f16c")]
unsafe fn weighted_sum(w: &[f32], v: &[f16], stride: usize, out: &mut [f32]) {
    // SAFETY: this fn's contract is the passes'.
    let d = unsafe {
        let d = weighted_sum_pass::<__m256, 8>(0, w, v, stride, out);
        weighted_sum_pass::<__m256, 1>(d, w, v, stride, out)
    };
    for (dd, o) in out.iter_mut().enumerate().skip(d) {
        let mut s = 0.0f32;
        for (p, &wp) in w.iter().enumerate() {
            s += wp * v[p * stride + dd].to_f32();
        }
        *o = s;
    }
}
