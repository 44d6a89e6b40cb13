//! The three inner loops of attention over an f16 KV cache: the scores `q . k[p]` of one query
//! head against every cached position, their softmax, and the weighted sum of the cached V rows,
//! as entries of each path's table ([`Kernels::attention_scores`], [`Kernels::attention_softmax`],
//! [`Kernels::attention_weighted_sum`]); this is their reference, and the loops over an f32
//! cache. The loops read the halves directly, and every path evaluates the same f32 expression
//! in the same order, so they agree bit for bit: a dot product is [`dot`]'s (eight lane sums,
//! added lane 0 first, then the leftover products), `out[d]` sums `w[p] * v[p][d]` over `p` in
//! increasing order, and the softmax is [`softmax`]'s (a polynomial `exp` of plain multiplies and
//! adds, summed in sixteen lanes).
//!
//! A slice of rows is addressed as `rows[p * stride..p * stride + width]`.

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::Kernels;
pub use super::exp::exp;

/// `out[g * n + p] = dot(q[g], k[p]) * scale` for the `heads` query heads `q[g]` (each
/// `q.len() / heads` wide, the width of a row) sharing the rows, `n = out.len() / heads`.
pub(crate) type ScoresFn =
    fn(q: &[f32], heads: usize, k: &[f16], stride: usize, scale: f32, out: &mut [f32]);
/// `out[g * width + d] = sum_p w[g * n + p] * v[p][d]` for the `heads` rows of weights `w[g]`
/// (each `n = w.len() / heads` long) sharing the rows, `width = out.len() / heads`.
pub(crate) type WeightedSumFn =
    fn(w: &[f32], heads: usize, v: &[f16], stride: usize, out: &mut [f32]);

/// `x = softmax(x)` in place, as [`softmax`] computes it.
pub(crate) type SoftmaxFn = fn(x: &mut [f32]);

/// A path's attention loops, with the name tools show for them. Each entry checks the rows'
/// bounds itself.
#[derive(Clone, Copy)]
pub(crate) struct AttentionKernels {
    scores: ScoresFn,
    softmax: SoftmaxFn,
    weighted_sum: WeightedSumFn,
    pub(super) path: &'static str,
}

impl AttentionKernels {
    /// The loops `scores`, `softmax` and `weighted_sum`, named `path`.
    pub(crate) const fn new(
        scores: ScoresFn,
        softmax: SoftmaxFn,
        weighted_sum: WeightedSumFn,
        path: &'static str,
    ) -> Self {
        AttentionKernels {
            scores,
            softmax,
            weighted_sum,
            path,
        }
    }
}

/// The reference, every path's oracle (on aarch64 the compiler vectorises its f32 loops).
pub(super) const SCALAR: AttentionKernels =
    AttentionKernels::new(scores_portable, softmax, weighted_sum_portable, "scalar");

impl Kernels {
    /// `out[g * n + p] = dot(q[g], k[p]) * scale` for the `heads` query heads of `q` (each
    /// `hd = q.len() / heads` wide, the width of a row; grouped-query attention's heads that
    /// share one KV head) and the `n = out.len() / heads` positions, over f16 rows: each row is
    /// read once for all the heads, and each head's scores are bit-identical to
    /// [`scores_f32`] on the rows' values, on every path.
    ///
    /// # Panics
    /// If `heads` is 0 or does not divide `q.len()` and `out.len()`, or `k` is too short for
    /// `n` rows of `stride`.
    pub fn attention_scores(
        &self,
        q: &[f32],
        heads: usize,
        k: &[f16],
        stride: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        (self.attention.scores)(q, heads, k, stride, scale, out)
    }

    /// `x = softmax(x)` in place, bit-identical to [`softmax`] on every path.
    pub fn attention_softmax(&self, x: &mut [f32]) {
        (self.attention.softmax)(x)
    }

    /// `out[g * width + d] = sum_p w[g * n + p] * v[p][d]` for the `heads` weight rows of `w`
    /// (each `n = w.len() / heads` long) and the `width = out.len() / heads` outputs of each,
    /// over f16 rows: each row is read once for all the heads, and each head's sums are
    /// bit-identical to [`weighted_sum_f32`] on the rows' values, on every path.
    ///
    /// # Panics
    /// If `heads` is 0 or does not divide `w.len()` and `out.len()`, or `v` is too short for
    /// `n` rows of `stride`.
    pub fn attention_weighted_sum(
        &self,
        w: &[f32],
        heads: usize,
        v: &[f16],
        stride: usize,
        out: &mut [f32],
    ) {
        (self.attention.weighted_sum)(w, heads, v, stride, out)
    }
}

/// The dot product in the order every attention path keeps: eight lane sums (lane `i % 8` adds
/// `a[i] * b[i]` for the whole chunks of eight, in increasing `i`), added from lane 0 on, then
/// the leftover products added one by one. The shorter of `a` and `b` bounds the sum.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let [d] = dot_rows([&a[..n]], &b[..n]);
    d
}

/// [`dot`] of each of `R` rows with `b`, the rows' sums interleaved so that their chains of
/// adds overlap (one row's chain is as long as `b.len() / 8` dependent adds).
///
/// # Panics
/// If a row is shorter than `b`.
#[inline(always)]
pub(crate) fn dot_rows<const R: usize>(rows: [&[f32]; R], b: &[f32]) -> [f32; R] {
    let n = b.len();
    let whole = n - n % 8;
    let rows = rows.map(|r| &r[..n]);
    let mut acc = [[0.0f32; 8]; R];
    for (c, y) in b[..whole].chunks_exact(8).enumerate() {
        let y: &[f32; 8] = y.try_into().expect("a chunk of 8");
        for (acc, row) in acc.iter_mut().zip(&rows) {
            let x: &[f32; 8] = row[8 * c..8 * c + 8].try_into().expect("a chunk of 8");
            *acc = std::array::from_fn(|i| acc[i] + x[i] * y[i]);
        }
    }
    std::array::from_fn(|r| {
        let lanes = acc[r][1..].iter().fold(acc[r][0], |s, &l| s + l);
        let tail = rows[r][whole..].iter().zip(&b[whole..]);
        tail.fold(lanes, |s, (x, y)| s + x * y)
    })
}

/// Lanes of the softmax's sum: value `i` of a row is added to lane `i % SOFTMAX_LANES`.
pub(crate) const SOFTMAX_LANES: usize = 16;

/// `x = softmax(x)` in place, the order every path keeps: the largest value `m`, each
/// `e_i = exp(x_i - m)` ([`exp`]), `e_i` added to lane `i % 16`, the lanes added lane 0 first,
/// then every `e_i` multiplied by `1 / sum`.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut lanes = [0.0f32; SOFTMAX_LANES];
    for chunk in x.chunks_mut(SOFTMAX_LANES) {
        for (v, lane) in chunk.iter_mut().zip(&mut lanes) {
            *v = exp(*v - max);
            *lane += *v;
        }
    }
    let inv = 1.0 / lanes.iter().fold(0.0f32, |s, &l| s + l);
    x.iter_mut().for_each(|v| *v *= inv);
}

/// [`Kernels::attention_scores`] over f32 rows (an f32 cache): [`dot`] per row, on any CPU.
///
/// # Panics
/// If `k` is too short for `out.len()` rows of `stride`.
pub fn scores_f32(q: &[f32], k: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
    check_rows(k, out.len(), stride, q.len());
    for (p, s) in out.iter_mut().enumerate() {
        *s = dot(q, &k[p * stride..p * stride + q.len()]) * scale;
    }
}

/// [`Kernels::attention_weighted_sum`] over f32 rows (an f32 cache), `p` in increasing order.
///
/// # Panics
/// If `v` is too short for `w.len()` rows of `stride`.
pub fn weighted_sum_f32(w: &[f32], v: &[f32], stride: usize, out: &mut [f32]) {
    check_rows(v, w.len(), stride, out.len());
    out.fill(0.0);
    for (p, &wp) in w.iter().enumerate() {
        for (o, &x) in out.iter_mut().zip(&v[p * stride..]) {
            *o += wp * x;
        }
    }
}

/// Which attention call [`check_heads`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeadCall {
    /// Scores: `x` holds the queries (`hd` per head), `out` a score per head and position,
    /// the rows are K.
    Scores,
    /// Weighted sum: `x` holds the weights (one per head and position), `out` the values (the
    /// row width per head), the rows are V.
    Weights,
}

/// `(x.len() / heads, out.len() / heads)` of an attention call, after checking that `heads`
/// divides both and `rows` holds the positions: what every entry checks before it reads. For
/// [`HeadCall::Scores`] that is `(hd, n)`, for [`HeadCall::Weights`] `(n, width)`.
pub(crate) fn check_heads(
    x: &[f32],
    heads: usize,
    rows: &[f16],
    stride: usize,
    out: &[f32],
    call: HeadCall,
) -> (usize, usize) {
    let (x_name, out_name) = match call {
        HeadCall::Scores => ("query values", "scores"),
        HeadCall::Weights => ("weights", "outputs"),
    };
    assert!(
        heads > 0 && x.len().is_multiple_of(heads) && out.len().is_multiple_of(heads),
        "{heads} heads do not divide {} {x_name} and {} {out_name}",
        x.len(),
        out.len()
    );
    let (per_x, per_out) = (x.len() / heads, out.len() / heads);
    match call {
        HeadCall::Scores => check_rows(rows, per_out, stride, per_x),
        HeadCall::Weights => check_rows(rows, per_x, stride, per_out),
    }
    (per_x, per_out)
}

/// Panics unless `rows` holds `n` rows of `stride`, `width` wide: what every entry checks
/// before it reads.
pub(crate) fn check_rows<T>(rows: &[T], n: usize, stride: usize, width: usize) {
    assert!(
        n == 0 || (n - 1) * stride + width <= rows.len(),
        "KV rows out of bounds"
    );
}

fn scores_portable(q: &[f32], heads: usize, k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
    let (hd, n) = check_heads(q, heads, k, stride, out, HeadCall::Scores);
    let mut row = ROW.take();
    row.clear();
    row.reserve(hd.max(MIN_ROW));
    row.resize(hd, 0.0);
    for p in 0..n {
        k[p * stride..p * stride + hd].convert_to_f32_slice(&mut row);
        for g in 0..heads {
            out[g * n + p] = dot(&q[g * hd..(g + 1) * hd], &row) * scale;
        }
    }
    ROW.set(row);
}

fn weighted_sum_portable(w: &[f32], heads: usize, v: &[f16], stride: usize, out: &mut [f32]) {
    let (n, width) = check_heads(w, heads, v, stride, out, HeadCall::Weights);
    let mut row = ROW.take();
    row.clear();
    row.reserve(width.max(MIN_ROW));
    row.resize(width, 0.0);
    out.fill(0.0);
    for p in 0..n {
        v[p * stride..p * stride + width].convert_to_f32_slice(&mut row);
        for g in 0..heads {
            let wp = w[g * n + p];
            for (o, &x) in out[g * width..(g + 1) * width].iter_mut().zip(&row) {
                *o += wp * x;
            }
        }
    }
    ROW.set(row);
}

/// Values the row buffer holds from its first use (every head width in use is at most this).
const MIN_ROW: usize = 512;

thread_local! {
    /// One K or V row converted to f32, per thread, for the portable loops (allocated once).
    static ROW: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

#[cfg(test)]
mod tests;
