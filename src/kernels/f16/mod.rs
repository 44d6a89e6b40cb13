//! F16 weight rows times f32 activation columns: the F16 LM heads and token tables (BitNet
//! b1.58 2B-4T's tied `token_embd`, Falcon3's `output.weight`) multiplied as the file holds
//! them, each row widened to f32 in registers, never in memory.
//!
//! # One summation order, every path
//!
//! A dot product of `k` values keeps **16 lane partial sums** `acc[0..16]`, all zero at first.
//! Element `i` (for `i < k - k % 16`) goes to lane `i % 16` by one fused multiply-add,
//! `acc[i % 16] = fma(w[i] as f32, x[i], acc[i % 16])`, in increasing `i`. The `k % 16` leftover
//! elements go to lanes `0..k % 16` the same way (the other lanes are left as they are). Then a
//! fixed tree folds the lanes: `acc[j] += acc[j + h]` for `j < h`, with `h = 8, 4, 2, 1`, and
//! `acc[0]` is the result. The f16 -> f32 widening is exact, so every path ([`scalar`], AVX2 +
//! F16C + FMA, AVX-512, NEON `fcvtl` + `fmla`) computes the same roundings in the same order and
//! is bit-identical to the scalar reference, which the tests assert on every path this CPU has.
//! The lanes of a path only decide which registers hold `acc`; the leftovers and the tree run in
//! the shared [`finish`].

use super::{Gemm, Kernels};
use crate::format::f16_to_f32;

/// Lanes of partial sums every path keeps (see the module docs).
pub const LANES: usize = 16;

/// f16 values in a 64-byte cache line.
const LINE_HALVES: usize = 32;

/// A path's F16 rows, with the name tools show for it.
#[derive(Clone, Copy)]
pub(crate) struct F16Kernel {
    rows: fn(Gemm<'_, u16, f32>),
    pub(super) path: &'static str,
}

impl F16Kernel {
    /// `rows`, named `path`.
    pub(crate) const fn new(rows: fn(Gemm<'_, u16, f32>), path: &'static str) -> Self {
        F16Kernel { rows, path }
    }
}

/// The scalar reference's entry.
pub(super) const SCALAR: F16Kernel = F16Kernel::new(rows_scalar, "scalar");

/// The 16 partial sums of one dot product, in a path's registers.
///
/// Implementations only run inside a function compiled for their features (the path's entry),
/// which is what the `unsafe` of the methods asks of callers.
pub(in crate::kernels) trait Lanes16: Copy {
    /// 16 weights widened to f32.
    type W: Copy;
    /// All lanes zero.
    ///
    /// # Safety
    /// The CPU must have the path's features.
    unsafe fn zero() -> Self;
    /// Widens the 16 f16 values at `w`.
    ///
    /// # Safety
    /// The CPU must have the path's features, and `w` must be valid for 16 reads.
    unsafe fn widen(w: *const u16) -> Self::W;
    /// `acc[j] = fma(w[j], x[j], acc[j])` for the 16 lanes.
    ///
    /// # Safety
    /// The CPU must have the path's features, and `x` must be valid for 16 reads.
    unsafe fn fma(self, w: Self::W, x: *const f32) -> Self;
    /// The lanes in order.
    ///
    /// # Safety
    /// The CPU must have the path's features.
    unsafe fn lanes(self) -> [f32; LANES];
    /// Hints the CPU to bring the line at `w` into cache (no effect where a path has no
    /// prefetch).
    #[inline(always)]
    fn prefetch(_w: *const u16) {}
}

/// The portable path: the lanes as an array, `f32::mul_add` (a correctly rounded fused
/// multiply-add, as the SIMD instructions are).
#[derive(Clone, Copy)]
struct Scalar([f32; LANES]);

impl Lanes16 for Scalar {
    type W = [f32; LANES];

    #[inline(always)]
    unsafe fn zero() -> Self {
        Scalar([0.0; LANES])
    }

    #[inline(always)]
    unsafe fn widen(w: *const u16) -> Self::W {
        // SAFETY: the caller guarantees 16 readable values at `w`.
        std::array::from_fn(|j| f16_to_f32(unsafe { *w.add(j) }))
    }

    #[inline(always)]
    unsafe fn fma(self, w: Self::W, x: *const f32) -> Self {
        Scalar(std::array::from_fn(|j| {
            // SAFETY: the caller guarantees 16 readable values at `x`.
            let x = unsafe { *x.add(j) };
            w[j].mul_add(x, self.0[j])
        }))
    }

    #[inline(always)]
    unsafe fn lanes(self) -> [f32; LANES] {
        self.0
    }
}

/// Adds the leftover elements (`w.len() < 16`) to the first lanes and folds the lanes with the
/// fixed tree: the common end of every path's dot products.
#[inline(always)]
fn finish(mut acc: [f32; LANES], w: &[u16], x: &[f32]) -> f32 {
    for ((a, &w), &x) in acc.iter_mut().zip(w).zip(x) {
        *a = f16_to_f32(w).mul_add(x, *a);
    }
    let mut h = LANES / 2;
    while h > 0 {
        for j in 0..h {
            acc[j] += acc[j + h];
        }
        h /= 2;
    }
    acc[0]
}

/// The dot products of `R` rows and `C` columns (each `k` long), every row and column read
/// once per 16 elements for all of them. `next` points at weights a caller reads later; they
/// are prefetched at the rate these rows are read (`R * 32` bytes a step), so that they are in
/// cache when their tile starts. The hardware prefetchers alone left a lone column's gemv at
/// half the DRAM bandwidth: every four-row tile starts four new streams a row (5 KB at
/// k = 2560) apart, which they pick up too late.
///
/// # Safety
/// The CPU must have `L`'s features; every slice must be `k` long. `next` is only a hint and
/// may point anywhere.
#[inline(always)]
unsafe fn tile<L: Lanes16, const R: usize, const C: usize>(
    w: [&[u16]; R],
    x: [&[f32]; C],
    k: usize,
    next: *const u16,
) -> [[f32; C]; R] {
    let full = k - k % LANES;
    // SAFETY: the caller guarantees the features.
    let zero = unsafe { L::zero() };
    let mut acc = [[zero; C]; R];
    let w_ptr: [*const u16; R] = std::array::from_fn(|r| w[r].as_ptr());
    let x_ptr: [*const f32; C] = std::array::from_fn(|c| x[c].as_ptr());
    let mut i = 0;
    // Indexed loops over the const bounds unroll fully, which keeps every partial sum in a
    // register (iterator chains over the arrays kept them on the stack).
    while i < full {
        let ahead = next.wrapping_add(i * R);
        for line in (0..R * LANES).step_by(LINE_HALVES) {
            L::prefetch(ahead.wrapping_add(line));
        }
        #[allow(clippy::needless_range_loop)]
        for r in 0..R {
            // SAFETY: `i + 16 <= full <= k`, the length of every row and column.
            let wv = unsafe { L::widen(w_ptr[r].add(i)) };
            for c in 0..C {
                // SAFETY: as above.
                acc[r][c] = unsafe { acc[r][c].fma(wv, x_ptr[c].add(i)) };
            }
        }
        i += LANES;
    }
    std::array::from_fn(|r| {
        std::array::from_fn(|c| {
            // SAFETY: the caller guarantees the features.
            let lanes = unsafe { acc[r][c].lanes() };
            finish(lanes, &w[r][full..k], &x[c][full..k])
        })
    })
}

/// `out[c * ld + r] = dot(row r, column c)` for the `w.len() / k` rows of `w` and the `ncols`
/// columns of `x` (column `c` at `c * k`): four rows at a time ([`row_tiles`]), each group
/// going through every column while it is in cache, so the matrix is read from memory once,
/// whatever `ncols`.
///
/// # Safety
/// The CPU must have `L`'s features; the shapes must have been checked ([`Kernels::f16_rows`]).
#[inline(always)]
pub(in crate::kernels) unsafe fn rows_with<L: Lanes16>(g: Gemm<'_, u16, f32>) {
    let (w, k, x, ncols, out, ld) = g.into_parts();
    let rows = w.len() / k;
    let groups = rows - rows % 4;
    let m = Product { w, k, x, ncols };
    for r0 in (0..groups).step_by(4) {
        // SAFETY: the caller guarantees the features and the shapes.
        unsafe { row_tiles::<L, 4>(m, r0, out, ld) };
    }
    for r in groups..rows {
        // SAFETY: as above.
        unsafe { row_tiles::<L, 1>(m, r, out, ld) };
    }
}

/// The operands of [`rows_with`]: whole rows of `k` weights and `ncols` columns of `k` values.
#[derive(Clone, Copy)]
struct Product<'a> {
    w: &'a [u16],
    k: usize,
    x: &'a [f32],
    ncols: usize,
}

impl Product<'_> {
    fn row(&self, r: usize) -> &[u16] {
        &self.w[r * self.k..(r + 1) * self.k]
    }

    fn col(&self, c: usize) -> &[f32] {
        &self.x[c * self.k..(c + 1) * self.k]
    }
}

/// Rows `r0 .. r0 + R` times every column, four columns at a time and then the one to three
/// left together, each tile reading the rows once for its columns. Four rows keep four
/// independent chains of `fma`s in flight even for one column (the decode's gemv); the
/// columns left over share the rows' reads too (two or three are a server step's or a draft's
/// logits).
///
/// # Safety
/// The CPU must have `L`'s features; the rows exist and `out` holds `ncols` columns of them
/// at stride `ld`.
#[inline(always)]
unsafe fn row_tiles<L: Lanes16, const R: usize>(m: Product, r0: usize, out: &mut [f32], ld: usize) {
    let rows: [&[u16]; R] = std::array::from_fn(|j| m.row(r0 + j));
    // The rows of the tile after the next, prefetched at the rate these are read (into L2 on
    // x86). The next tile's, into L1, left BitNet 2B-4T's F16 head at 25.5-26.6 GB/s on a Zen 4
    // whatever the memory; these read 32 GB/s at a 36 GB/s probe and 41 at a 55-62 GB/s one.
    let next = m.w.as_ptr().wrapping_add((r0 + 2 * R) * m.k);
    let quads = m.ncols - m.ncols % 4;
    for c0 in (0..quads).step_by(4) {
        let cols = std::array::from_fn(|j| m.col(c0 + j));
        // SAFETY: the caller guarantees the features; rows and columns are `k` long.
        let d = unsafe { tile::<L, R, 4>(rows, cols, m.k, next) };
        store_tile(out, ld, r0, c0, d);
    }
    let col = |c: usize| m.col(quads + c);
    match m.ncols - quads {
        1 => {
            // SAFETY: as above.
            let d = unsafe { tile::<L, R, 1>(rows, [col(0)], m.k, next) };
            store_tile(out, ld, r0, quads, d)
        }
        2 => {
            // SAFETY: as above.
            let d = unsafe { tile::<L, R, 2>(rows, [col(0), col(1)], m.k, next) };
            store_tile(out, ld, r0, quads, d)
        }
        3 => {
            // SAFETY: as above.
            let d = unsafe { tile::<L, R, 3>(rows, [col(0), col(1), col(2)], m.k, next) };
            store_tile(out, ld, r0, quads, d)
        }
        _ => {}
    }
}

/// `out[(c0 + c) * ld + r0 + r] = d[r][c]`.
#[inline(always)]
fn store_tile<const R: usize, const C: usize>(
    out: &mut [f32],
    ld: usize,
    r0: usize,
    c0: usize,
    d: [[f32; C]; R],
) {
    for (r, d) in d.into_iter().enumerate() {
        for (c, v) in d.into_iter().enumerate() {
            out[(c0 + c) * ld + r0 + r] = v;
        }
    }
}

/// The scalar reference (every path's oracle).
fn rows_scalar(g: Gemm<'_, u16, f32>) {
    // SAFETY: the scalar lanes need no CPU feature; the entry checked the shapes.
    unsafe { rows_with::<Scalar>(g) }
}

impl Kernels {
    /// `out[c * ld + r] = dot(row r of x, column c of y)` for the `x.len() / nb` rows of `nb`
    /// f16 weights (IEEE half bits) and the `ncols` f32 columns `y` (column `c` at `c * nb`), in
    /// the summation order of the F16 rows (`kernels/f16`) on every path.
    ///
    /// # Panics
    /// If the slice lengths do not match that shape.
    pub fn f16_rows(&self, g: Gemm<'_, u16, f32>) {
        let rows = g.assert_shape(1);
        assert_eq!(g.y.len(), g.ncols * g.nb, "activation values");
        if g.ncols > 0 && rows > 0 {
            (self.f16.rows)(g)
        }
    }
}

#[cfg(test)]
mod tests;
