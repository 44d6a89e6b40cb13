//! The x86 attention loops over an f16 KV cache: AVX2 with F16C (`vcvtph2ps` converts eight
//! halves in a register) and AVX-512F (sixteen halves a register; the scores keep two rows'
//! eight-lane sums in one register, so every lane adds what the AVX2 lane adds, in the same
//! order). Both evaluate the expression of the reference ([`crate::kernels::attention`]) in its
//! order, so they agree with it bit for bit.

use half::f16;
use std::arch::x86_64::*;

use crate::kernels::attention::{AttentionKernels, check_heads, check_weights};

/// The AVX2 and AVX-VNNI paths' attention loops.
pub(in crate::kernels) const AVX2: AttentionKernels =
    AttentionKernels::new(scores_avx2, weighted_sum_avx2, "avx2");
/// The AVX-512 VNNI path's attention loops.
pub(in crate::kernels) const AVX512: AttentionKernels =
    AttentionKernels::new(scores_avx512, weighted_sum_avx512, "avx512");

fn scores_avx2(q: &[f32], heads: usize, k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
    let (hd, n) = check_heads(q, heads, k, stride, out);
    // SAFETY: this entry is only in the x86 paths' tables, which are handed out only on CPUs
    // with AVX2 and F16C (`Isa::required_features`); the rows were bounds-checked above.
    unsafe {
        match heads {
            2 => scores::<2>(0, q, hd, k, stride, scale, out, n),
            4 => scores::<4>(0, q, hd, k, stride, scale, out, n),
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
    let (n, width) = check_weights(w, heads, v, stride, out);
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
    let (hd, n) = check_heads(q, heads, k, stride, out);
    // SAFETY: this entry is only in the AVX-512 VNNI path's table, which is handed out only on
    // CPUs with AVX-512F, AVX2 and F16C; the rows were bounds-checked above.
    unsafe {
        match heads {
            2 => scores_zmm::<2>(q, hd, k, stride, scale, out, n),
            4 => scores_zmm::<4>(q, hd, k, stride, scale, out, n),
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
    let (n, width) = check_weights(w, heads, v, stride, out);
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

/// The scores of positions `p..` for the `G` query heads of `q` (each `hd` wide, sharing the K
/// rows) in passes of `N` registers of `R` per head (`N * R::ROWS` positions, one independent
/// sum each in flight) while a pass fits; returns the first position left. Each K row is
/// loaded and widened once for all `G` heads; every head's lanes add the same products in the
/// same order whatever `R`, `N` and `G`. Head `g`'s scores go to `out[g * n..]`. Inlined into a
/// function compiled for `R`'s features.
///
/// # Safety
/// The CPU has `R`'s features (which include AVX2 and F16C); `q` holds `G` heads of `hd`,
/// `out` `G` rows of `n`, and `k` holds `n` rows of `stride` (`hd` wide).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_pass<R: Reg, const N: usize, const G: usize>(
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
    while p + N * R::ROWS <= n {
        // SAFETY: the caller guarantees `R`'s features.
        let mut acc = [[unsafe { R::zero() }; N]; G];
        let mut i = 0;
        while i < body {
            // SAFETY: `i + 8 <= hd`, so every head of q and the pass's rows (in bounds by the
            // caller's guarantee) have eight values at `i`; the CPU has `R`'s features.
            unsafe {
                let mut qv = [R::zero(); G];
                for (g, v) in qv.iter_mut().enumerate() {
                    *v = R::q8(q.as_ptr().add(g * hd + i));
                }
                for r in 0..N {
                    let row = k.as_ptr().add((p + R::ROWS * r) * stride + i);
                    let rows = R::rows8(row, stride);
                    for (a, &qg) in acc.iter_mut().zip(&qv) {
                        a[r] = R::add(a[r], R::mul(qg, rows));
                    }
                }
            }
            i += 8;
        }
        for (g, head) in acc.into_iter().enumerate() {
            let qh = &q[g * hd..(g + 1) * hd];
            for (r, a) in head.into_iter().enumerate() {
                for h in 0..R::ROWS {
                    let at = p + R::ROWS * r + h;
                    let row = at * stride;
                    // SAFETY: the CPU has `R`'s features, AVX2 and F16C among them.
                    let s = unsafe { finish(a.row_sums(h), &qh[body..], &k[row + body..row + hd]) };
                    out[g * n + at] = s * scale;
                }
            }
        }
        p += N * R::ROWS;
    }
    p
}

/// `out[g][d..]` of the weighted sums of the `G` heads of `w` (each `n` weights, sharing the V
/// rows) in passes of `N` registers of `R` per head (`N * R::LANES` outputs over all the rows)
/// while a pass fits; returns the first output left. Each V row is loaded and widened once for
/// all `G` heads; every output adds the same products in the same order whatever `R`, `N` and
/// `G`. Head `g`'s outputs are `out[g * width..]`. Inlined into a function compiled for `R`'s
/// features.
///
/// # Safety
/// The CPU has `R`'s features; `w` holds `G` rows of `n`, `out` `G` rows of `width`, and `v`
/// holds `n` rows of `stride` (`width` wide).
#[inline(always)]
unsafe fn weighted_sum_pass<R: Reg, const N: usize, const G: usize>(
    mut d: usize,
    w: &[f32],
    n: usize,
    v: &[f16],
    stride: usize,
    out: &mut [f32],
    width: usize,
) -> usize {
    while d + N * R::LANES <= width {
        // SAFETY: the caller guarantees `R`'s features.
        let mut acc = [[unsafe { R::zero() }; N]; G];
        for p in 0..n {
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
                let at = g * width + d + R::LANES * j;
                assert!(at + R::LANES <= out.len());
                // SAFETY: `out[at..at + LANES]` is in bounds (checked above).
                unsafe { R::store(out.as_mut_ptr().add(at), a) };
            }
        }
        d += N * R::LANES;
    }
    d
}

/// The scores of `G` heads from position `p` on, four positions per pass per head (four
/// independent sums in flight; two when four heads share the rows, so the sums fit the sixteen
/// registers), then the rest one at a time.
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
            1 | 2 => scores_pass::<__m256, 4, G>(p, q, hd, k, stride, scale, out, n),
            _ => scores_pass::<__m256, 2, G>(p, q, hd, k, stride, scale, out, n),
        };
        scores_pass::<__m256, 1, G>(p, q, hd, k, stride, scale, out, n);
    }
}

/// [`scores`] eight positions per pass: register `r` holds the eight lane sums of rows
/// `p + 2r` (low half) and `p + 2r + 1` (high half), each lane adding exactly the products
/// [`scores`]' lane adds; the rest of the rows go to [`scores`].
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
    // SAFETY: this fn's contract is the passes'; the CPU has AVX2 and F16C as well.
    unsafe {
        let p = scores_pass::<__m512, 4, G>(0, q, hd, k, stride, scale, out, n);
        scores::<G>(p, q, hd, k, stride, scale, out, n);
    }
}

/// The weighted sums, 128 outputs per pass per head (64 for two heads, 32 for four: eight sums
/// in flight); the rest of the outputs go to [`weighted_sum_from`].
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
            1 => weighted_sum_pass::<__m512, 8, G>(0, w, n, v, stride, out, width),
            2 => weighted_sum_pass::<__m512, 4, G>(0, w, n, v, stride, out, width),
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
