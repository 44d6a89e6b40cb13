//! The parallel matmul driver: the row chunks of one or several products handed out to a
//! thread pool in one call, into the caller's buffers, allocating nothing.
//!
//! A product is anything split into row chunks ([`RowChunked`]): a T2P matrix times quantized
//! columns ([`T2pProduct`]), a matrix of one of ggml's block types times its `vec_dot_type`
//! activations ([`QuantProduct`]), or an F16 matrix times f32 columns ([`F16Product`]).
//! Products that read the same columns (a layer's q / k / v, gate / up) run together, so the
//! pool wakes once and waits for one last chunk instead of one per matrix. A one-column step
//! (a decode) hands its rows out in one big chunk per thread, then shrinking chunks
//! ([`GuidedChunks`]). A step of many columns over matrices that stay in cache (a prompt)
//! hands out runs of columns, each chunk every row of its columns, written straight into the
//! output; any other several-column step the plan's even row chunks ([`chunk_rows`]), each
//! computed into a tile of its thread's and copied from there into its rows of every column in
//! the same job (a second pool call to gather the tiles cost 9 % of a prompt on AMX). Every
//! output is computed by the same kernel over the same blocks as a single-threaded call; only
//! which thread computes it changes, so the result is bit-identical.

use std::cell::Cell;
use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::plan::chunk_pieces;
use super::{
    F16Matrix, MatmulPlan, QuantMatrix, QuantizedBatch, T2pMatrix, chunk_count, chunk_rows,
};
use crate::error::{Error, Result, check_len};
use crate::format::{ROWS_PER_T2P, T2pSlice};
use crate::kernels::{Kernels, PerCallBuffer};
use crate::pool::ThreadPool;

/// A matrix product whose output rows can be computed chunk by chunk, on any thread.
pub trait RowChunked: Sync {
    /// `[rows, k, ncols]`: output rows, inner dimension, columns (activation vectors).
    fn shape(&self) -> [usize; 3];
    /// Output rows.
    fn rows(&self) -> usize {
        self.shape()[0]
    }
    /// Columns.
    fn ncols(&self) -> usize {
        self.shape()[2]
    }
    /// How many row chunks to hand out to `threads` threads: the one rule of every matrix
    /// kind ([`chunk_count`]).
    fn chunk_count(&self, threads: usize) -> usize {
        let [rows, k, ncols] = self.shape();
        chunk_count(rows, k, ncols, threads)
    }
    /// Rows of chunk `i` of `n` ([`chunk_rows`]).
    fn chunk_rows(&self, i: usize, n: usize) -> Range<usize> {
        chunk_rows(self.rows(), i, n)
    }
    /// Computes the rows `dst` names, for every column.
    fn compute_rows(&self, kern: &Kernels, dst: RowsOut<'_>) -> Result<()>;
    /// The product of the same matrix with only the columns `cols`, or `None` where the
    /// columns cannot be cut there.
    fn columns(&self, cols: Range<usize>) -> Option<Self>
    where
        Self: Sized;
}

/// Where a chunk's results go: rows `rows` of every column, row `r` of column `c` at
/// `out[c * ld + (r - rows.start)]`.
#[derive(Debug)]
pub struct RowsOut<'a> {
    /// The rows to compute.
    pub rows: Range<usize>,
    /// The output.
    pub out: &'a mut [f32],
    /// The stride between columns.
    pub ld: usize,
}

/// A T2P matrix times the quantized columns of a batch.
#[derive(Clone, Copy, Debug)]
pub struct T2pProduct<'a> {
    plan: MatmulPlan,
    w: T2pSlice<'a>,
    work: &'a [u32],
}

impl<'a> T2pProduct<'a> {
    /// `w` times the columns of `batch` (their `k` must agree).
    pub fn new(w: &'a T2pMatrix, batch: &'a QuantizedBatch) -> Result<Self> {
        Ok(T2pProduct {
            plan: MatmulPlan::for_batch(w, batch)?,
            w: w.blocks(),
            work: batch.work(),
        })
    }

    /// `w` times the columns of `batch`, where every block of both has scale 1.0 (a BitNet
    /// matrix and its int8 activations): the exact integer sums, on the unit-scale gemm
    /// ([`MatmulPlan::with_unit_scales`]).
    pub fn unit_scales(w: &'a T2pMatrix, batch: &'a QuantizedBatch) -> Result<Self> {
        let p = Self::new(w, batch)?;
        Ok(T2pProduct {
            plan: p.plan.with_unit_scales(),
            ..p
        })
    }
}

/// A matrix that multiplies columns handed to it whole, as a slice of [`Input`](Self::Input)s:
/// a ggml block matrix (its columns quantized to its `vec_dot_type`) and an F16 matrix (f32
/// columns). [`ColumnsProduct`] binds one to its columns.
pub trait ColumnMatrix: Sync {
    /// What the columns are made of: `u32` activation words, or `f32` values.
    type Input: Sync;
    /// What a length error calls the input.
    const INPUT: &'static str;
    /// `(rows, k)`.
    fn shape(&self) -> (usize, usize);
    /// Inputs `ncols` columns take.
    fn input_len(&self, ncols: usize) -> usize;
    /// `out[c * ld + (r - rows.start)] = dot(row r, column c)` for the rows `rows` and the
    /// `ncols` columns of `x`.
    fn compute(
        &self,
        kern: &Kernels,
        x: &[Self::Input],
        ncols: usize,
        rows: Range<usize>,
        out: &mut [f32],
        ld: usize,
    ) -> Result<()>;
}

/// A [`ColumnMatrix`] times `ncols` columns.
#[derive(Debug)]
pub struct ColumnsProduct<'a, M: ColumnMatrix> {
    m: &'a M,
    x: &'a [M::Input],
    ncols: usize,
}

// Copy whatever `M` is: the product holds only references (a derive would ask `M: Copy`).
impl<M: ColumnMatrix> Clone for ColumnsProduct<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: ColumnMatrix> Copy for ColumnsProduct<'_, M> {}

impl<'a, M: ColumnMatrix> ColumnsProduct<'a, M> {
    /// `m` times the `ncols` columns in `x`.
    pub fn new(m: &'a M, x: &'a [M::Input], ncols: usize) -> Result<Self> {
        check_len(M::INPUT, m.input_len(ncols), x.len())?;
        Ok(ColumnsProduct { m, x, ncols })
    }
}

/// A matrix of one of ggml's block types times `ncols` columns already quantized to its
/// `vec_dot_type` ([`QuantMatrix::quantize_acts`]).
pub type QuantProduct<'a> = ColumnsProduct<'a, QuantMatrix>;

/// An F16 matrix times `ncols` f32 columns (column `c` at `c * k`).
pub type F16Product<'a> = ColumnsProduct<'a, F16Matrix>;

impl RowChunked for T2pProduct<'_> {
    fn shape(&self) -> [usize; 3] {
        let layout = self.plan.layout();
        [self.plan.rows(), layout.k(), layout.ncols()]
    }

    fn compute_rows(&self, kern: &Kernels, dst: RowsOut<'_>) -> Result<()> {
        let RowsOut { rows, out, ld } = dst;
        self.plan.compute(kern, self.w, self.work, rows, out, ld)
    }

    fn columns(&self, cols: Range<usize>) -> Option<Self> {
        let (plan, words) = self.plan.columns(cols)?;
        Some(T2pProduct {
            plan,
            work: self.work.get(words)?,
            ..*self
        })
    }
}

impl<M: ColumnMatrix> RowChunked for ColumnsProduct<'_, M> {
    fn shape(&self) -> [usize; 3] {
        let (rows, k) = self.m.shape();
        [rows, k, self.ncols]
    }

    fn compute_rows(&self, kern: &Kernels, dst: RowsOut<'_>) -> Result<()> {
        self.m
            .compute(kern, self.x, self.ncols, dst.rows, dst.out, dst.ld)
    }

    fn columns(&self, cols: Range<usize>) -> Option<Self> {
        // Columns lie one after another, each in the same number of inputs.
        let per = self.m.input_len(1);
        if cols.start >= cols.end
            || cols.end > self.ncols
            || self.m.input_len(self.ncols) != self.ncols * per
        {
            return None;
        }
        Some(ColumnsProduct {
            m: self.m,
            x: self.x.get(cols.start * per..cols.end * per)?,
            ncols: cols.len(),
        })
    }
}

/// Multiply-adds below which a one-column step does not cut a chunk smaller: about 64 KiB of
/// T2P weights, a couple of microseconds of streaming, where claiming a chunk costs a lock.
const MIN_GUIDED_MACS: usize = 1 << 18;

/// The share of a one-column product's row groups, in eighths, that its first round of chunks
/// (one per thread) covers ([`GuidedChunks`]).
const FIRST_ROUND_EIGHTHS: usize = 7;

/// The row chunks of a one-column step's product, in the order the pool hands them out: a
/// first round of one even chunk per thread over [`FIRST_ROUND_EIGHTHS`] of the row groups,
/// then guided self-scheduling over the rest, each chunk `1 / (2 * threads)` of the row groups
/// still left, down to [`MIN_GUIDED_MACS`].
///
/// A decode step streams its weights at the memory's speed, so whatever one thread still
/// computes after the other ran out of chunks is a wait; with chunks that shrink, the last
/// ones (the only ones anyone waits for) are small. But every chunk also starts its weight
/// streams cold and claims under a lock, and a 1-4 MB projection cut into shrinking chunks
/// from the start took 8-15 of them: on the Xeon (2 threads) the 1.7B's matrices, back to back,
/// streamed at 29.7 GB/s against 32.7 for one big matrix. The big first round (one chunk per
/// thread, 2-3 chunks after it) brought them to 30.6 and the 1.7B's decode up 1-9 %. A product
/// [`chunk_count`] keeps whole is one chunk. Which thread computes a row never changes its bits.
#[derive(Clone, Debug)]
struct GuidedChunks {
    rows: usize,
    at: usize,
    divisor: usize,
    min_units: usize,
    /// Row groups of each chunk of the first round.
    first_units: usize,
    /// Chunks of the first round still to hand out.
    first_left: usize,
}

impl GuidedChunks {
    /// The chunks of a `rows x k` product (one column) for `threads` threads.
    fn new(rows: usize, k: usize, threads: usize) -> Self {
        let (units, threads) = (rows.div_ceil(ROWS_PER_T2P), threads.max(1));
        let min_units = match chunk_count(rows, k, 1, threads) {
            1 => units,
            _ => (MIN_GUIDED_MACS / (ROWS_PER_T2P * k.max(1))).max(1),
        };
        GuidedChunks {
            rows,
            at: 0,
            divisor: 2 * threads,
            min_units,
            first_units: (units * FIRST_ROUND_EIGHTHS / 8).div_ceil(threads),
            first_left: threads,
        }
    }
}

impl Iterator for GuidedChunks {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        if self.at >= self.rows {
            return None;
        }
        let left = (self.rows - self.at).div_ceil(ROWS_PER_T2P);
        let take = match self.first_left {
            0 => left.div_ceil(self.divisor),
            _ => {
                self.first_left -= 1;
                self.first_units
            }
        };
        let end = (self.at + take.max(self.min_units) * ROWS_PER_T2P).min(self.rows);
        let chunk = self.at..end;
        self.at = end;
        Some(chunk)
    }
}

/// Columns of a many-column step's chunks are a multiple of this: the x86 gemm's widest pass
/// (and two `q8_K x4` tiles, where a batch can be cut).
const COLUMN_STEP: usize = 8;

/// Columns per thread from which a step splits its columns instead of its rows.
const COLUMN_SPLIT_MIN_PER_THREAD: usize = 16;

/// Weights (`rows * k`) of the largest product a many-column step cuts by columns: each column
/// chunk streams the whole matrix, which pays while it stays in the last-level cache (4 MiB
/// of T2P weights). The 27B's FFN matrices (89M weights, 22 MB) ran 5 % slower cut by columns
/// than by rows, whose chunks each stay in cache through all their column passes.
const COLUMN_SPLIT_MAX_WEIGHTS: usize = 1 << 24;

/// Whether a step of several columns cuts its products by columns ([`Step::run_column_chunks`])
/// rather than by rows ([`Step::run_tiled`]): with at least [`COLUMN_SPLIT_MIN_PER_THREAD`]
/// columns a thread, when every product is small enough and can be cut, and unless the
/// kernels decode the weights once for every column of a call (the AMX tiles: a column chunk
/// would decode the whole matrix again).
fn splits_columns<M, P: RowChunked>(
    kern: &Kernels,
    jobs: &[(M, &mut [f32])],
    product: &impl Fn(&M) -> Option<P>,
    ncols: usize,
    threads: usize,
) -> bool {
    ncols >= COLUMN_SPLIT_MIN_PER_THREAD * threads
        && !kern.gemm_decodes_once(ncols)
        && jobs.iter().filter_map(|(m, _)| product(m)).all(|p| {
            let [rows, k, _] = p.shape();
            rows.saturating_mul(k) <= COLUMN_SPLIT_MAX_WEIGHTS
                && p.columns(0..COLUMN_STEP.min(ncols)).is_some()
        })
}

/// Columns of each of the column chunks of an `ncols`-column product that the chunk rule cuts
/// into `chunks` ([`chunk_count`]).
fn column_chunk_width(ncols: usize, chunks: usize) -> usize {
    ncols.div_ceil(chunks.max(1)).next_multiple_of(COLUMN_STEP)
}

/// Where a parallel step's time went (when it was asked to measure).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTime {
    /// Wall time of the whole step, in nanoseconds.
    pub wall_ns: u64,
    /// Time the chunks computed, summed over threads, in nanoseconds.
    pub busy_ns: u64,
    /// Threads that took part (at most one per chunk).
    pub threads: usize,
}

/// Keeps the first error of a step's chunks and, when timing, their busy time.
struct ChunkRunner {
    first_error: OnceLock<Error>,
    busy: AtomicU64,
    start: Option<Instant>,
}

impl ChunkRunner {
    fn new(timed: bool) -> Self {
        ChunkRunner {
            first_error: OnceLock::new(),
            busy: AtomicU64::new(0),
            start: timed.then(Instant::now),
        }
    }

    fn run(&self, f: impl FnOnce() -> Result<()>) {
        let t = self.start.is_some().then(Instant::now);
        if let Err(e) = f() {
            // Only the first is kept: the others are the same error on other rows.
            let _ = self.first_error.set(e);
        }
        if let Some(t) = t {
            self.busy
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }

    fn finish(self, threads: usize) -> Result<Option<StepTime>> {
        if let Some(e) = self.first_error.into_inner() {
            return Err(e);
        }
        Ok(self.start.map(|t0| StepTime {
            wall_ns: t0.elapsed().as_nanos() as u64,
            busy_ns: self.busy.into_inner(),
            threads,
        }))
    }
}

/// `out_j = product(m_j)` for every job whose `product` is `Some`, in one pool call: each
/// job's output holds its `ncols` columns one after another (`out[c * rows + r]`); jobs without
/// a product are left alone (a layer's matrices of other types). Products of many columns cut
/// into runs of columns (a prompt over matrices that stay in cache) write straight into the
/// outputs; other products of several columns compute each row chunk into a tile of the
/// thread's own and copy it into the chunk's rows of every column.
///
/// Returns the first error `product` or any chunk met, and with `timed` the step's
/// [`StepTime`].
pub fn run_products<M: Send + Sync, P: RowChunked + Copy + Send>(
    pool: &ThreadPool,
    kern: &Kernels,
    jobs: &mut [(M, &mut [f32])],
    product: impl Fn(&M) -> Result<Option<P>> + Sync,
    timed: bool,
) -> Result<Option<StepTime>> {
    let threads = pool.threads();
    let (mut ncols, mut chunks) = (None, 0);
    for (m, out) in jobs.iter() {
        let Some(p) = product(m)? else { continue };
        let n = *ncols.get_or_insert(p.ncols());
        if p.ncols() != n {
            return Err(Error::Shape(format!(
                "products of {} and {n} columns in one step",
                p.ncols()
            )));
        }
        check_len("output values", p.rows() * n, out.len())?;
        chunks += p.chunk_count(threads);
    }
    let Some(ncols) = ncols else {
        return Ok(timed.then(StepTime::default));
    };
    // Checked above: from here on `product` gives the same `Some` again.
    let product = |m: &M| product(m).ok().flatten();
    let runner = ChunkRunner::new(timed);
    let step = Step {
        pool,
        kern,
        ncols,
        runner: &runner,
    };
    if ncols == 1 {
        step.run_one_column(jobs, &product);
    } else if splits_columns(kern, jobs, &product, ncols, threads) {
        step.run_column_chunks(jobs, &product);
    } else {
        step.run_tiled(jobs, &product);
    }
    runner.finish(threads.min(chunks))
}

/// A step's fixed parts, for the passes of a several-column step.
#[derive(Clone, Copy)]
struct Step<'a> {
    pool: &'a ThreadPool,
    kern: &'a Kernels,
    ncols: usize,
    runner: &'a ChunkRunner,
}

impl Step<'_> {
    /// One column: each chunk's rows are one contiguous piece of its output.
    fn run_one_column<M: Send + Sync, P: RowChunked + Copy + Send>(
        &self,
        jobs: &mut [(M, &mut [f32])],
        product: &(impl Fn(&M) -> Option<P> + Sync),
    ) {
        let (kern, runner, threads) = (self.kern, self.runner, self.pool.threads());
        let chunks = |p: &P| {
            let [rows, k, _] = p.shape();
            GuidedChunks::new(rows, k, threads)
        };
        let n: usize = jobs
            .iter()
            .filter_map(|(m, _)| product(m))
            .map(|p| chunks(&p).count())
            .sum();
        let items = jobs
            .iter_mut()
            .filter_map(|(m, out)| Some((product(m)?, out)))
            .flat_map(|(p, out)| {
                let mut rest = &mut out[..p.rows()];
                chunks(&p).map(move |rows| {
                    let (piece, tail) = std::mem::take(&mut rest).split_at_mut(rows.len());
                    rest = tail;
                    (p, rows, piece)
                })
            });
        self.pool.for_each_item(n, items, |(p, rows, piece)| {
            runner.run(|| {
                let ld = rows.len();
                p.compute_rows(
                    kern,
                    RowsOut {
                        rows,
                        out: piece,
                        ld,
                    },
                )
            });
        });
    }

    /// Many columns: each chunk is every row of a run of columns ([`column_chunk_width`]),
    /// computed straight into its piece of the output.
    fn run_column_chunks<M: Send + Sync, P: RowChunked + Copy + Send>(
        &self,
        jobs: &mut [(M, &mut [f32])],
        product: &(impl Fn(&M) -> Option<P> + Sync),
    ) {
        let (kern, runner, ncols, threads) =
            (self.kern, self.runner, self.ncols, self.pool.threads());
        let width = |p: &P| column_chunk_width(ncols, p.chunk_count(threads));
        let n = jobs
            .iter()
            .filter_map(|(m, _)| product(m))
            .map(|p| ncols.div_ceil(width(&p)))
            .sum();
        let items = jobs
            .iter_mut()
            .filter_map(|(m, out)| Some((product(m)?, out)))
            .flat_map(|(p, out)| {
                let (rows, width) = (p.rows(), width(&p));
                out[..rows * ncols]
                    .chunks_mut(rows * width)
                    .enumerate()
                    .map(move |(i, piece)| (p, i * width..((i + 1) * width).min(ncols), piece))
            });
        self.pool.for_each_item(n, items, |(p, cols, piece)| {
            runner.run(|| {
                let p = p
                    .columns(cols)
                    .ok_or_else(|| Error::Shape("a product's columns could not be cut".into()))?;
                let rows = p.rows();
                p.compute_rows(
                    kern,
                    RowsOut {
                        rows: 0..rows,
                        out: piece,
                        ld: rows,
                    },
                )
            });
        });
    }

    /// Several columns: every chunk computes its rows of every column into this thread's tile
    /// ([`CHUNK_TILE`], reused from chunk to chunk, so it stays in cache) and copies them into
    /// its pieces of the columns ([`chunk_pieces`]), one pool call per [`TILED_JOBS`] jobs.
    fn run_tiled<M: Send + Sync, P: RowChunked + Copy + Send>(
        &self,
        jobs: &mut [(M, &mut [f32])],
        product: &(impl Fn(&M) -> Option<P> + Sync),
    ) {
        let Step {
            pool,
            kern,
            ncols,
            runner,
        } = *self;
        let threads = pool.threads();
        let (mut rests, mut pieces) = (lend(&COLUMN_RESTS), lend(&CHUNK_PIECES));
        for jobs in jobs.chunks_mut(TILED_JOBS) {
            let mut products = [None; TILED_JOBS];
            for ((m, out), slot) in jobs.iter_mut().zip(&mut products) {
                if let Some(p) = product(m) {
                    let (n, rows) = (p.chunk_count(threads), p.rows());
                    let lens = (0..n).map(|i| p.chunk_rows(i, n).len());
                    chunk_pieces(out, rows, rows, ncols, lens, &mut rests, &mut pieces);
                    *slot = Some((p, n));
                }
            }
            let chunks = products.iter().flatten().map(|&(_, n)| n).sum();
            let items = products
                .into_iter()
                .flatten()
                .flat_map(|(p, n)| (0..n).map(move |i| (p, p.chunk_rows(i, n))))
                .zip(pieces.chunks_mut(ncols));
            pool.for_each_item(chunks, items, |((p, rows), cols)| {
                runner.run(|| {
                    let len = rows.len();
                    let mut tile = CHUNK_TILE.take();
                    tile.resize(len * ncols, 0.0);
                    let out = &mut tile[..len * ncols];
                    let done = p.compute_rows(kern, RowsOut { rows, out, ld: len });
                    for (col, from) in cols.iter_mut().zip(tile.chunks_exact(len)) {
                        col.copy_from_slice(from);
                    }
                    CHUNK_TILE.set(tile);
                    done
                });
            });
            pieces.clear();
        }
        give_back(&COLUMN_RESTS, rests);
        give_back(&CHUNK_PIECES, pieces);
    }
}

/// Jobs of a several-column step per pool call ([`Step::run_tiled`]): a layer's steps have at
/// most four matrices, so one call.
const TILED_JOBS: usize = 8;

/// A vector of output pieces, kept by a thread from call to call ([`lend`], [`give_back`]).
type PieceBuffer = PerCallBuffer<&'static mut [f32]>;

thread_local! {
    /// A chunk's rows of every column of a several-column step ([`Step::run_tiled`]), grown to
    /// the largest chunk once per thread.
    static CHUNK_TILE: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    /// The columns of one product while [`chunk_pieces`] cuts them.
    static COLUMN_RESTS: Cell<Vec<&'static mut [f32]>> = const { Cell::new(Vec::new()) };
    /// The pieces of a step's outputs, chunk by chunk ([`chunk_pieces`]).
    static CHUNK_PIECES: Cell<Vec<&'static mut [f32]>> = const { Cell::new(Vec::new()) };
}

/// This thread's vector `buf`, empty, for pieces of any lifetime (a vector of `&'static mut`
/// is one of `&'a mut`), so a step allocates only when its vectors first grow.
fn lend<'a>(buf: &'static PieceBuffer) -> Vec<&'a mut [f32]> {
    buf.take()
}

/// Puts `v`'s allocation back into `buf`: an empty vector collected in place into references
/// of another lifetime (the same layout) keeps its allocation.
fn give_back(buf: &'static PieceBuffer, mut v: Vec<&mut [f32]>) {
    v.clear();
    buf.set(v.into_iter().map(|_| unreachable!("emptied")).collect());
}

/// `w` times every column of `batch` into `out[c * ld + r]`, the rows split across `pool` in
/// chunks of whole row groups ([`MatmulPlan::chunk_rows`]), through [`run_products`].
///
/// Bit-identical to [`matmul`](super::matmul): each output is computed by the same kernel over the same blocks
/// in the same order; only which thread computes it changes. For `ld != rows` it allocates its
/// output per call.
pub fn matmul_parallel(
    pool: &ThreadPool,
    kern: &Kernels,
    w: &T2pMatrix,
    batch: &QuantizedBatch,
    out: &mut [f32],
    ld: usize,
) -> Result<()> {
    let product = T2pProduct::new(w, batch)?;
    let (rows, ncols) = (w.rows(), batch.ncols());
    if ncols > 1 && ld < rows {
        return Err(Error::Shape(format!(
            "ld = {ld} is smaller than rows = {rows}"
        )));
    }
    check_len("output values", (ncols - 1) * ld + rows, out.len())?;
    if ld == rows || ncols == 1 {
        let out = &mut out[..ncols * rows];
        run_products(pool, kern, &mut [(product, out)], |p| Ok(Some(*p)), false)?;
        return Ok(());
    }
    let mut packed = vec![0.0; ncols * rows];
    let job = (product, &mut packed[..]);
    run_products(pool, kern, &mut [job], |p| Ok(Some(*p)), false)?;
    for (c, col) in packed.chunks_exact(rows).enumerate() {
        out[c * ld..c * ld + rows].copy_from_slice(col);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guided chunks cover the rows in order, in whole row groups, each no bigger than the
    /// one before but the last, the first round one even chunk per thread over seven eighths.
    #[test]
    fn guided_chunks_cover_the_rows_in_whole_groups() {
        for (rows, k) in [
            (1, 32),
            (4, 2048),
            (30, 128),
            (1000, 2048),
            (2048, 2048),
            (6144, 2048),
        ]
        .into_iter()
        .chain([(2048, 6144), (151_936, 2048), (5, 1 << 20)])
        {
            for threads in 1..=16 {
                let chunks: Vec<_> = GuidedChunks::new(rows, k, threads).collect();
                let what = format!("rows {rows}, k {k}, threads {threads}: {chunks:?}");
                assert_eq!(chunks[0].start, 0, "{what}");
                assert_eq!(chunks.last().expect("a chunk").end, rows, "{what}");
                for w in chunks.windows(2) {
                    assert_eq!(w[0].end, w[1].start, "{what}");
                }
                for (i, c) in chunks.iter().enumerate() {
                    assert!(!c.is_empty() && c.start % ROWS_PER_T2P == 0, "{what}");
                    if i + 2 < chunks.len() {
                        assert!(chunks[i + 1].len() <= c.len(), "{what}");
                    }
                }
                if chunk_count(rows, k, 1, threads) == 1 {
                    assert_eq!(chunks.len(), 1, "{what}");
                }
            }
        }
        // An LM head on 2 threads: two chunks of 7/16, then ever smaller down to 128 rows
        // (64 KiB of weights).
        let head: Vec<_> = GuidedChunks::new(151_936, 2048, 2).collect();
        let first = 151_936 / ROWS_PER_T2P * 7 / 8 / 2 * ROWS_PER_T2P;
        assert_eq!((head[0].len(), head[1].len()), (first, first));
        assert!(head[2].len() < first / 4, "{head:?}");
        assert!((10..=30).contains(&head.len()), "{}", head.len());
        assert!(head.last().expect("a chunk").len() <= 128, "{head:?}");
        // A 2 MB projection on 2 threads: a few chunks, not a dozen.
        let proj: Vec<_> = GuidedChunks::new(4096, 2048, 2).collect();
        assert!(proj.len() <= 6, "{proj:?}");
    }
}
