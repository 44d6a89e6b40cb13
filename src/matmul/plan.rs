//! The one matmul driver: every caller (the runner's pool, the C ABI, the llama.cpp extra buffer
//! type through the C ABI) runs a T2P matmul through a [`MatmulPlan`]; a pool of threads runs
//! the plans' row chunks through [`run_products`] ([`parallel`]).
//!
//! A plan is built from the matrix shape, the activation type and the number of columns. It
//! says how big the work buffer of quantized activations is ([`ActLayout`]), quantizes the
//! activations into it in shares (`ith` of `nth`, so each thread of a pool or of ggml fills its
//! own part), cuts the rows into chunks of whole row groups, and computes any chunk into a
//! column-strided output. The rules of which kernel runs live here and nowhere else:
//!
//! * one column: gemv;
//! * `q8_0`, several columns: the gemm kernel over all of them (it tiles internally);
//! * `q8_K`, several columns: 4-column `q8_K x4` tiles, a leftover of 2 or 3 columns as one
//!   zero-padded tile, a single leftover column through gemv;
//! * a matrix whose `rows` is not a multiple of 4 has a padded last row group: its outputs are
//!   computed into a scratch tile and only the real rows are written;
//! * `k` a multiple of 128 but not of 256 cannot hold `q8_K` blocks: such a matrix always uses
//!   `q8_0` activations (see [`ActLayout::new`]);
//! * a matrix with a scale per 64 weights (group-64 T2P, from mainline's Q2_0) runs with `q8_0`
//!   activations only, ggml's `vec_dot_type` for Q2_0.
//!
//! Outputs are column-strided: row `r` of column `c` at `out[c * ld + r]` (ggml's `dst` layout).

use std::cell::{Cell, RefCell};
use std::ops::Range;

use super::{ActLayout, ActQuant, QuantizedBatch, T2pMatrix};
use crate::error::{Error, Result, check_len};
use crate::format::{
    QK_PQ2_0, ROWS_PER_T2P, RowPairBlock, T2pSlice, check_matrix_shape, t2p_block_count,
};
use crate::kernels::{Gemm, Kernels};
use crate::pool::unit_chunk;

/// Products below this many multiply-adds (`rows * k * ncols`, about 25 us of AVX2 work) run
/// as one chunk: waking the workers costs more than such a product saves.
const PARALLEL_MIN_MACS: usize = 1 << 21;

/// Row chunks per thread of a one-column product: claimed dynamically, so a thread slowed by
/// another process does not hold up the call.
const CHUNKS_PER_THREAD: usize = 4;

/// Row chunks per thread of a product of several columns: every chunk stages or gathers its
/// columns again for its kernel (the AMX tiles, the `q8_K` passes), so fewer, larger chunks pay
/// (on a 2-core Xeon the 1.7B's pp512 ran about 5 % faster on `amx` with 2 than with 4, 1-2 % on
/// `avx512-vnni`; pp128 the same within the noise).
const CHUNKS_PER_THREAD_MANY_COLUMNS: usize = 2;

/// Rows of a row group, the unit a chunk is made of: the T2P layout's 4 rows, which the ggml
/// block and F16 kernels also compute together.
const ROWS_PER_CHUNK_UNIT: usize = ROWS_PER_T2P;

/// The row-chunk rule of every matrix kind: how many chunks a `rows x k` matrix times `ncols`
/// columns is split into for `threads` threads. Four per thread for one column, two for
/// several, at most one per row group, and one for a product too small to be worth waking
/// the pool. Chunking only decides which thread computes a row, never how: the outputs are
/// the same bit for bit for any count.
pub fn chunk_count(rows: usize, k: usize, ncols: usize, threads: usize) -> usize {
    let macs = rows.saturating_mul(k).saturating_mul(ncols);
    if macs < PARALLEL_MIN_MACS {
        return 1;
    }
    let per_thread = match ncols {
        0 | 1 => CHUNKS_PER_THREAD,
        _ => CHUNKS_PER_THREAD_MANY_COLUMNS,
    };
    (threads.max(1) * per_thread).clamp(1, rows.div_ceil(ROWS_PER_CHUNK_UNIT).max(1))
}

/// Rows of chunk `i` of `n` of a matrix of `rows` rows: whole row groups, as even as possible
/// (consecutive chunks cover `0..rows`; the last one ends at `rows`, which need not be a
/// multiple of 4); empty when `n` exceeds the groups.
pub fn chunk_rows(rows: usize, i: usize, n: usize) -> Range<usize> {
    unit_chunk(rows, ROWS_PER_CHUNK_UNIT, i, n)
}

/// Checks the arguments of a product of rows `range` of a `rows`-row matrix times `ncols`
/// columns into `out[c * ld + (r - range.start)]` (the ggml block and F16 kinds): the range
/// within the matrix and, when there is anything to compute, `ld` and `out` big enough.
/// Returns whether there is anything to compute.
pub(super) fn check_row_range(
    range: &Range<usize>,
    rows: usize,
    ncols: usize,
    ld: usize,
    out: &[f32],
) -> Result<bool> {
    if range.start > range.end || range.end > rows {
        return Err(Error::Shape(format!("rows {range:?} of {rows}")));
    }
    let len = range.len();
    if ncols == 0 || len == 0 {
        return Ok(false);
    }
    if ld < len {
        return Err(Error::Shape(format!("ld {ld} below the {len} rows")));
    }
    check_len("output", (ncols - 1) * ld + len, out.len())?;
    Ok(true)
}

/// One T2P matmul: `out[c * ld + r] = sum_k w[r][k] * x[c][k]`. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulPlan {
    rows: usize,
    layout: ActLayout,
    /// Every weight and activation block has scale 1.0 ([`MatmulPlan::with_unit_scales`]).
    unit_scales: bool,
}

impl MatmulPlan {
    /// The plan for a `rows x k` matrix times `ncols` columns quantized as `act` (`q8_0`
    /// whenever `k` is not a multiple of 256).
    pub fn new(rows: usize, k: usize, ncols: usize, act: ActQuant) -> Result<MatmulPlan> {
        check_matrix_shape(rows, k)?;
        let layout = ActLayout::new(k, ncols, act)?;
        rows.checked_mul(ncols)
            .ok_or_else(|| Error::Shape(format!("{rows} rows x {ncols} columns overflow")))?;
        Ok(MatmulPlan {
            rows,
            layout,
            unit_scales: false,
        })
    }

    /// The plan for `w` times the columns of `batch`.
    pub fn for_batch(w: &T2pMatrix, batch: &QuantizedBatch) -> Result<MatmulPlan> {
        if batch.k() != w.k() {
            return Err(Error::Shape(format!(
                "activations have k = {}, weights k = {}",
                batch.k(),
                w.k()
            )));
        }
        Ok(MatmulPlan {
            rows: w.rows(),
            layout: *batch.layout(),
            unit_scales: false,
        })
    }

    /// This plan for weights and `q8_0` activations whose block scales are all 1.0 (BitNet's
    /// integer sums, [`crate::matmul::Int8Matrix`]): several columns then run on the
    /// unit-scale gemm ([`Kernels::gemm_unit`]), which returns what the `q8_0` gemm would.
    pub fn with_unit_scales(self) -> MatmulPlan {
        MatmulPlan {
            unit_scales: true,
            ..self
        }
    }

    /// This plan for the columns `cols` of its activations, and the words of the work buffer
    /// they take ([`ActLayout::columns`]).
    pub(super) fn columns(&self, cols: Range<usize>) -> Option<(MatmulPlan, Range<usize>)> {
        let (layout, words) = self.layout.columns(cols)?;
        Some((MatmulPlan { layout, ..*self }, words))
    }

    /// The activations' layout in the work buffer.
    pub fn layout(&self) -> &ActLayout {
        &self.layout
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row chunks to hand out to `threads` threads ([`chunk_count`]).
    pub fn chunk_count(&self, threads: usize) -> usize {
        chunk_count(self.rows, self.layout.k(), self.layout.ncols(), threads)
    }

    /// Rows of chunk `i` of `n` ([`chunk_rows`]).
    pub fn chunk_rows(&self, i: usize, n: usize) -> Range<usize> {
        chunk_rows(self.rows, i, n)
    }

    /// Splits a column-strided output (`(ncols - 1) * ld + rows` values, `ld >= rows`) into the
    /// disjoint pieces of `n` chunks: `parts[i][c]` is rows [`MatmulPlan::chunk_rows`]`(i, n)`
    /// of column `c`, ready for [`crate::pool::ThreadPool::run_parts`].
    ///
    /// # Panics
    /// If `out` is shorter than that or `ld < rows` with several columns (callers check first).
    pub fn split_output<'a>(
        &self,
        out: &'a mut [f32],
        ld: usize,
        n: usize,
    ) -> Vec<Vec<&'a mut [f32]>> {
        let (rows, ncols) = (self.rows, self.layout.ncols());
        let (mut rests, mut pieces) = (Vec::new(), Vec::new());
        let lens = (0..n).map(|i| self.chunk_rows(i, n).len());
        chunk_pieces(out, rows, ld, ncols, lens, &mut rests, &mut pieces);
        let mut pieces = pieces.into_iter();
        (0..n)
            .map(|_| pieces.by_ref().take(ncols).collect())
            .collect()
    }

    fn check_rows(&self, rows: &Range<usize>) -> Result<()> {
        let ends_ok = rows.end.is_multiple_of(ROWS_PER_T2P) || rows.end == self.rows;
        if rows.start > rows.end
            || rows.end > self.rows
            || !rows.start.is_multiple_of(ROWS_PER_T2P)
            || !ends_ok
        {
            return Err(Error::Shape(format!(
                "row range {}..{} must lie in 0..{} on row-group boundaries",
                rows.start, rows.end, self.rows
            )));
        }
        Ok(())
    }

    /// Computes rows `rows` (whole row groups; the end may be `self.rows()`) of every column
    /// into `out[c * ld + (r - rows.start)]`, from the quantized activations in `work`, on the
    /// kernels `kern`. `w` is the whole matrix's T2P blocks, of either layout (group-64 blocks
    /// need a `q8_0` plan).
    pub fn compute<'w>(
        &self,
        kern: &Kernels,
        w: impl Into<T2pSlice<'w>>,
        work: &[u32],
        rows: Range<usize>,
        out: &mut [f32],
        ld: usize,
    ) -> Result<()> {
        let w = w.into();
        let k = self.layout.k();
        let ncols = self.layout.ncols();
        check_len("T2P weight blocks", t2p_block_count(self.rows, k)?, w.len())?;
        if w.halves() > 1 && self.layout.act() != ActQuant::Q8_0 {
            return Err(Error::InvalidArgument(format!(
                "{} weights (a scale per 64, from Q2_0) run with q8_0 activations, not {}",
                w.name(),
                self.layout.act().name()
            )));
        }
        check_len("work-buffer words", self.layout.work_words(), work.len())?;
        self.check_rows(&rows)?;
        let n = rows.len();
        if ncols > 1 && ld < n {
            return Err(Error::Shape(format!(
                "ld = {ld} is smaller than the {n} rows"
            )));
        }
        check_len("output values", (ncols - 1) * ld + n, out.len())?;
        if n == 0 {
            return Ok(());
        }
        let nb = k / QK_PQ2_0;
        let (g0, g_full) = (rows.start / ROWS_PER_T2P, rows.end / ROWS_PER_T2P);
        if g_full > g0 {
            self.run_kernels(kern, w.range(g0 * nb..g_full * nb), work, out, ld);
        }
        if !rows.end.is_multiple_of(ROWS_PER_T2P) {
            // The padded last group: all four rows into a scratch tile, the real ones copied.
            let real = rows.end % ROWS_PER_T2P;
            let at = g_full * ROWS_PER_T2P - rows.start;
            let mut tile = PAD_TILE.take();
            tile.resize(ROWS_PER_T2P * ncols, 0.0);
            self.run_kernels(
                kern,
                w.range(g_full * nb..(g_full + 1) * nb),
                work,
                &mut tile,
                ROWS_PER_T2P,
            );
            for c in 0..ncols {
                out[c * ld + at..c * ld + at + real]
                    .copy_from_slice(&tile[c * ROWS_PER_T2P..c * ROWS_PER_T2P + real]);
            }
            PAD_TILE.set(tile);
        }
        Ok(())
    }

    /// [`MatmulPlan::compute`] for callers whose output columns cannot be one `&mut` slice
    /// (threads sharing a strided output): computes into `scratch` and hands column `c`'s
    /// `rows.len()` values to `put(c, values)`.
    pub fn compute_columns<'w>(
        &self,
        kern: &Kernels,
        w: impl Into<T2pSlice<'w>>,
        work: &[u32],
        rows: Range<usize>,
        scratch: &mut Vec<f32>,
        mut put: impl FnMut(usize, &[f32]),
    ) -> Result<()> {
        let n = rows.len();
        scratch.clear();
        scratch.resize(n * self.layout.ncols(), 0.0);
        self.compute(kern, w, work, rows, scratch, n)?;
        for (c, col) in scratch.chunks_exact(n.max(1)).enumerate() {
            put(c, col);
        }
        Ok(())
    }

    /// The kernels for whole row groups `w` (shapes and the activation type checked by the
    /// caller).
    fn run_kernels(
        &self,
        kern: &Kernels,
        w: T2pSlice<'_>,
        work: &[u32],
        out: &mut [f32],
        ld: usize,
    ) {
        match w {
            T2pSlice::G128(w) => self.run_kernels_on(kern, w, work, out, ld),
            T2pSlice::G64(w) => self.run_kernels_on(kern, w, work, out, ld),
        }
    }

    fn run_kernels_on<B: RowPairBlock>(
        &self,
        kern: &Kernels,
        w: &[B],
        work: &[u32],
        out: &mut [f32],
        ld: usize,
    ) {
        let l = &self.layout;
        let nb = l.k() / QK_PQ2_0;
        let m = w.len() / nb * ROWS_PER_T2P;
        match l.act() {
            ActQuant::Q8_0 if l.ncols() == 1 => kern.gemv_q8_0(w, nb, l.q8_0(work), &mut out[..m]),
            ActQuant::Q8_0 => {
                let g = Gemm {
                    x: w,
                    nb,
                    y: l.q8_0(work),
                    ncols: l.ncols(),
                    out,
                    ld,
                };
                match B::slice(w) {
                    T2pSlice::G128(x) if self.unit_scales => kern.gemm_unit(g.with_weights(x)),
                    _ => kern.gemm_q8_0(g),
                }
            }
            ActQuant::Q8K => {
                let T2pSlice::G128(w) = B::slice(w) else {
                    unreachable!("compute refuses q8_K plans for group-64 weights")
                };
                if l.tile_cols() > 0 {
                    kern.gemm(Gemm {
                        x: w,
                        nb,
                        y: l.q8k_tiles(work),
                        ncols: l.tile_cols(),
                        out,
                        ld,
                    });
                }
                if l.has_plain_column() {
                    let o = (l.ncols() - 1) * ld;
                    kern.gemv(w, nb, l.q8k_plain(work), &mut out[o..o + m]);
                }
            }
        }
    }
}

thread_local! {
    /// Per-thread output tile of [`MatmulPlan::compute_columns`] callers (pool jobs, C threads).
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Per-thread tile of a padded last row group: taken out for the call and put back, so
    /// only a thread's first (or a wider) padded group allocates.
    static PAD_TILE: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` with this thread's reusable scratch buffer.
pub fn with_scratch<R>(f: impl FnOnce(&mut Vec<f32>) -> R) -> R {
    SCRATCH.with_borrow_mut(f)
}

/// `w` times every column of `batch` on the calling thread; returns the `ncols * rows` outputs
/// (`ld = rows`).
pub fn matmul(kern: &Kernels, w: &T2pMatrix, batch: &QuantizedBatch) -> Result<Vec<f32>> {
    let plan = MatmulPlan::for_batch(w, batch)?;
    let mut out = vec![0.0; w.rows() * batch.ncols()];
    plan.compute(
        kern,
        w.blocks(),
        batch.work(),
        0..w.rows(),
        &mut out,
        w.rows(),
    )?;
    Ok(out)
}

/// Appends to `pieces` the pieces of `out` (`ncols` columns of `rows` values, `ld` apart) that
/// row chunks of the lengths `lens` own, chunk by chunk: chunk `i`'s rows of column `c` land at
/// `i * ncols + c` from where `pieces` started. `rests` is scratch. Neither allocates once they
/// have grown, so a forward pass can keep them from step to step.
///
/// # Panics
/// If `out` is shorter than `(ncols - 1) * ld + rows`, `ld < rows` with several columns, or the
/// lengths add up to more than `rows`.
pub(crate) fn chunk_pieces<'a>(
    out: &'a mut [f32],
    rows: usize,
    ld: usize,
    ncols: usize,
    lens: impl Iterator<Item = usize>,
    rests: &mut Vec<&'a mut [f32]>,
    pieces: &mut Vec<&'a mut [f32]>,
) {
    rests.clear();
    let mut rest = out;
    for c in 0..ncols {
        let (col, tail) = rest.split_at_mut(rows);
        rests.push(col);
        rest = if c + 1 < ncols {
            &mut tail[ld - rows..]
        } else {
            tail
        };
    }
    for len in lens {
        for col in rests.iter_mut() {
            let (piece, tail) = std::mem::take(col).split_at_mut(len);
            *col = tail;
            pieces.push(piece);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::BlockPq2_0;
    use crate::kernels::Isa;
    use crate::matmul::matmul_parallel;
    use crate::pool::ThreadPool;

    fn lcg(s: &mut u64) -> u64 {
        *s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *s >> 33
    }

    fn matrix(rows: usize, k: usize, seed: u64) -> T2pMatrix {
        let mut s = seed;
        let src: Vec<BlockPq2_0> = (0..rows * k / QK_PQ2_0)
            .map(|_| {
                let mut b = BlockPq2_0::default();
                b.qs.iter_mut().for_each(|q| *q = lcg(&mut s) as u8);
                b.d = 0x3000 | (lcg(&mut s) as u16 & 0x3ff);
                b
            })
            .collect();
        T2pMatrix::from_pq2_0(&src, rows, k).unwrap()
    }

    fn columns(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| (lcg(&mut s) % 2001) as f32 / 1000.0 - 1.0)
            .collect()
    }

    /// Every shape family, both activation types, split into chunks and quantized in shares,
    /// equals one whole-matrix call on the scalar oracle bit for bit.
    #[test]
    fn shares_and_chunks_equal_one_call_on_every_path() {
        let oracle = Kernels::for_isa(Isa::Scalar).unwrap();
        for (rows, k) in [(8, 256), (6, 384), (13, 640), (4, 128)] {
            let w = matrix(rows, k, rows as u64);
            for ncols in 1..=6 {
                let x = columns(k * ncols, ncols as u64);
                for act in [ActQuant::Q8K, ActQuant::Q8_0] {
                    let batch = QuantizedBatch::new(&x, k, ncols, act).unwrap();
                    let want = matmul(oracle, &w, &batch).unwrap();
                    let layout = *batch.layout();
                    let mut work = vec![0u32; layout.work_words()];
                    for ith in 0..3 {
                        let s = layout.share(ith, 3);
                        layout
                            .quantize_share(&x, k, ith, 3, &mut work[s], None)
                            .unwrap();
                    }
                    assert_eq!(work, batch.work(), "{rows}x{k} {ncols} {act:?} shares");
                    let plan = MatmulPlan::for_batch(&w, &batch).unwrap();
                    for isa in Isa::available() {
                        let kern = Kernels::for_isa(isa).unwrap();
                        // Each chunk into a tile of its own, handed out by split_output.
                        let mut got = vec![f32::NAN; rows * ncols];
                        let n = 3;
                        let parts = plan.split_output(&mut got, rows, n);
                        for (i, cols) in parts.into_iter().enumerate() {
                            let r = plan.chunk_rows(i, n);
                            let mut tile = vec![f32::NAN; r.len() * ncols];
                            plan.compute(kern, w.blocks(), &work, r.clone(), &mut tile, r.len())
                                .unwrap();
                            for (piece, col) in cols.into_iter().zip(tile.chunks(r.len().max(1))) {
                                piece.copy_from_slice(col);
                            }
                        }
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(same, "{isa} {rows}x{k} {ncols} {act:?}");
                        let pool = ThreadPool::new(2);
                        let mut par = vec![f32::NAN; rows * ncols];
                        matmul_parallel(&pool, kern, &w, &batch, &mut par, rows).unwrap();
                        assert!(
                            par.iter()
                                .zip(&want)
                                .all(|(a, b)| a.to_bits() == b.to_bits())
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn k_of_128_always_uses_q8_0_and_bad_plans_are_errors() {
        assert_eq!(
            ActLayout::new(384, 2, ActQuant::Q8K).unwrap().act(),
            ActQuant::Q8_0
        );
        assert_eq!(
            ActLayout::new(512, 2, ActQuant::Q8K).unwrap().act(),
            ActQuant::Q8K
        );
        assert!(ActLayout::new(200, 1, ActQuant::Q8_0).is_err());
        assert!(ActLayout::new(256, 0, ActQuant::Q8_0).is_err());
        assert!(MatmulPlan::new(0, 256, 1, ActQuant::Q8_0).is_err());
        assert!(MatmulPlan::new(usize::MAX, 256, 1, ActQuant::Q8_0).is_err());
        let plan = MatmulPlan::new(10, 256, 2, ActQuant::Q8_0).unwrap();
        let oracle = Kernels::for_isa(Isa::Scalar).unwrap();
        let w = matrix(10, 256, 1);
        let work = vec![0u32; plan.layout().work_words()];
        let mut out = vec![0.0; 20];
        assert!(
            plan.compute(oracle, w.blocks(), &work, 2..8, &mut out, 10)
                .is_err()
        );
        assert!(
            plan.compute(oracle, w.blocks(), &work, 0..9, &mut out, 10)
                .is_err()
        );
        assert!(
            plan.compute(oracle, w.blocks(), &work, 8..10, &mut out, 10)
                .is_ok()
        );
        assert!(
            plan.compute(oracle, w.blocks(), &work[1..], 0..10, &mut out, 10)
                .is_err()
        );
        assert!(
            plan.compute(oracle, w.blocks(), &work, 0..10, &mut out[..19], 10)
                .is_err()
        );
        assert!(
            plan.compute(oracle, w.blocks(), &work, 0..10, &mut out, 9)
                .is_err()
        );
        assert_eq!(plan.chunk_rows(2, 3), 8..10);
    }
}
