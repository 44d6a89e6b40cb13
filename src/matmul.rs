//! The safe driver: checks shapes, runs whole 4-column tiles through gemm, pads a leftover of
//! 2 or 3 columns into one more tile (computed in the same pass, only real outputs written), and
//! sends a single leftover column through gemv, never one gemv per leftover column.
//!
//! Outputs are column-strided: value of row `r`, column `c` at `out[c * ld + r]` (ggml's `dst`
//! layout). Row ranges are given in rows and must be whole T2P row groups (multiples of 4), so a
//! caller (ggml, the thread pool) can split rows across threads.

use std::ops::Range;
use std::sync::Mutex;

use bytemuck::Zeroable;

use crate::error::{Error, Result, check_len};
use crate::format::{
    BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, QK_K, QK_PQ2_0, ROWS_PER_T2P,
    check_matrix_shape, deinterleave_q8k_x4, quantize_q8k_x4, quantize_row_q8_0, quantize_row_q8k,
    repack_pq2_0_to_t2p, t2p_block_count,
};
use crate::kernels::Kernels;
use crate::pool::ThreadPool;

/// A `rows x k` ternary weight matrix in the T2P layout.
#[derive(Clone, Debug)]
pub struct T2pMatrix {
    rows: usize,
    k: usize,
    blocks: Vec<BlockT2p>,
}

impl T2pMatrix {
    /// Repacks a row-major `rows x k` pq2_0 tensor.
    pub fn from_pq2_0(src: &[BlockPq2_0], rows: usize, k: usize) -> Result<Self> {
        let mut blocks = vec![BlockT2p::zeroed(); t2p_block_count(rows, k)?];
        repack_pq2_0_to_t2p(src, rows, k, &mut blocks)?;
        Ok(T2pMatrix { rows, k, blocks })
    }

    /// Takes blocks that are already in T2P order (row groups of `k / 128` blocks).
    pub fn from_t2p_blocks(blocks: Vec<BlockT2p>, rows: usize, k: usize) -> Result<Self> {
        let n = t2p_block_count(rows, k)?;
        if blocks.len() != n {
            return Err(Error::Shape(format!(
                "{rows} x {k} needs {n} T2P blocks, got {}",
                blocks.len()
            )));
        }
        Ok(T2pMatrix { rows, k, blocks })
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inner dimension (weights per row).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The T2P blocks, row group by row group.
    pub fn blocks(&self) -> &[BlockT2p] {
        &self.blocks
    }

    /// Bytes of weights (equal to the pq2_0 size).
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of_val(self.blocks.as_slice())
    }
}

/// How activations are quantized before a T2P matmul.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ActQuant {
    /// `q8_K`: one scale per 256 values, ggml's activation type for the K-quants and `tq*`. One
    /// float step per 128-weight block: the fastest form.
    Q8K,
    /// `q8_0`: one scale per 32 values, llama.cpp's activation type for `pq2_0` (its outputs are
    /// what the pq2_0 references hold). Half the quantization noise of `q8_K`, four float steps
    /// per block. The default: decode is memory-bound on most machines, where the extra float
    /// work is free.
    #[default]
    Q8_0,
}

impl ActQuant {
    /// The name used on command lines: `q8_K` or `q8_0`.
    pub fn name(self) -> &'static str {
        match self {
            ActQuant::Q8K => "q8_K",
            ActQuant::Q8_0 => "q8_0",
        }
    }

    /// Parses [`ActQuant::name`] (case-insensitive).
    pub fn from_name(name: &str) -> Result<ActQuant> {
        match name.to_ascii_lowercase().as_str() {
            "q8_k" | "q8k" => Ok(ActQuant::Q8K),
            "q8_0" | "q80" => Ok(ActQuant::Q8_0),
            _ => Err(Error::InvalidArgument(format!(
                "unknown activation type {name:?} (expected q8_K or q8_0)"
            ))),
        }
    }
}

/// A batch of `ncols` activation columns of length `k`, quantized once for every matmul that
/// reads it. As `q8_K`: `q8_K x4` tiles for gemm (the last one zero-padded) and, when the batch
/// ends in a single leftover column, that column as plain `q8_K` for gemv. As `q8_0`: `k / 128`
/// blocks per column, column after column.
#[derive(Clone, Debug)]
pub struct QuantizedBatch {
    k: usize,
    ncols: usize,
    tiles: Vec<BlockQ8Kx4>,
    last_column: Vec<BlockQ8K>,
    q8_0: Vec<BlockQ8_0Quad>,
}

impl QuantizedBatch {
    /// Quantizes `ncols` columns stored one after another in `x` (`x[c * k .. (c + 1) * k]`) as
    /// `q8_K`.
    pub fn new(x: &[f32], k: usize, ncols: usize) -> Result<Self> {
        Self::with(x, k, ncols, ActQuant::Q8K)
    }

    /// Quantizes `ncols` columns stored one after another in `x` as `act`.
    pub fn with(x: &[f32], k: usize, ncols: usize, act: ActQuant) -> Result<Self> {
        if k == 0 || !k.is_multiple_of(QK_K) {
            return Err(Error::Shape(format!(
                "k = {k} is not a positive multiple of 256"
            )));
        }
        if ncols == 0 {
            return Err(Error::Shape("a batch needs at least one column".into()));
        }
        let n = k
            .checked_mul(ncols)
            .ok_or_else(|| Error::Shape("k * ncols overflows".into()))?;
        check_len("activation values", n, x.len())?;
        let mut batch = QuantizedBatch {
            k,
            ncols,
            tiles: Vec::new(),
            last_column: Vec::new(),
            q8_0: Vec::new(),
        };
        if act == ActQuant::Q8_0 {
            batch.q8_0 = vec![BlockQ8_0Quad::zeroed(); n / QK_PQ2_0];
            quantize_row_q8_0(&x[..n], &mut batch.q8_0);
            return Ok(batch);
        }
        let per_col = k / QK_K;
        let gemm_cols = if ncols % 4 == 1 { ncols - 1 } else { ncols };
        batch.tiles = vec![BlockQ8Kx4::zeroed(); gemm_cols.div_ceil(4) * per_col];
        for (t, tile) in batch.tiles.chunks_exact_mut(per_col).enumerate() {
            let cols: Vec<&[f32]> = (4 * t..(4 * t + 4).min(gemm_cols))
                .map(|c| &x[c * k..(c + 1) * k])
                .collect();
            quantize_q8k_x4(&cols, k, tile);
        }
        if ncols % 4 == 1 {
            batch.last_column = vec![BlockQ8K::zeroed(); per_col];
            quantize_row_q8k(&x[(ncols - 1) * k..ncols * k], &mut batch.last_column);
        }
        Ok(batch)
    }

    /// The activation type.
    pub fn act(&self) -> ActQuant {
        if self.q8_0.is_empty() {
            ActQuant::Q8K
        } else {
            ActQuant::Q8_0
        }
    }

    /// The `q8_0` blocks (column-major, `k / 128` per column); empty for a `q8_K` batch.
    pub fn q8_0_blocks(&self) -> &[BlockQ8_0Quad] {
        &self.q8_0
    }

    /// Inner dimension.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.ncols
    }

    /// The gemm tiles (tile-major, `k / 256` blocks per tile).
    pub fn tiles(&self) -> &[BlockQ8Kx4] {
        &self.tiles
    }

    /// The last column as `q8_K`, present when `ncols % 4 == 1`.
    pub fn last_column(&self) -> Option<&[BlockQ8K]> {
        (!self.last_column.is_empty()).then_some(self.last_column.as_slice())
    }
}

/// Checks a row range against a matrix and returns it as a range of T2P blocks.
fn block_range(rows: usize, k: usize, range: &Range<usize>) -> Result<Range<usize>> {
    check_matrix_shape(rows, k)?;
    if range.start > range.end
        || range.end > rows
        || !range.start.is_multiple_of(ROWS_PER_T2P)
        || !range.end.is_multiple_of(ROWS_PER_T2P)
    {
        return Err(Error::Shape(format!(
            "row range {}..{} must lie in 0..{rows} on multiples of 4",
            range.start, range.end
        )));
    }
    let nb = k / QK_PQ2_0;
    Ok(range.start / ROWS_PER_T2P * nb..range.end / ROWS_PER_T2P * nb)
}

fn check_out(
    ncols: usize,
    ld: usize,
    rows: usize,
    range: &Range<usize>,
    out_len: usize,
) -> Result<()> {
    if ld < rows && ncols > 1 {
        return Err(Error::Shape(format!(
            "ld = {ld} is smaller than rows = {rows}"
        )));
    }
    check_len("output values", (ncols - 1) * ld + range.end, out_len)
}

/// gemv over a row range: `w` is the whole `rows x k` T2P matrix, `y` its `k / 256` activation
/// blocks; writes `out[r]` for `r` in `range` only.
pub fn gemv_rows(
    kern: &Kernels,
    w: &[BlockT2p],
    rows: usize,
    k: usize,
    y: &[BlockQ8K],
    out: &mut [f32],
    range: Range<usize>,
) -> Result<()> {
    check_out(1, rows, rows, &range, out.len())?;
    gemv_range(kern, w, rows, k, y, range.clone(), &mut out[range])
}

/// gemv over a row range writing only that range: `out[i]` is row `range.start + i`
/// (`out.len() == range.len()`). This is the form for callers that split rows across threads.
pub fn gemv_range(
    kern: &Kernels,
    w: &[BlockT2p],
    rows: usize,
    k: usize,
    y: &[BlockQ8K],
    range: Range<usize>,
    out: &mut [f32],
) -> Result<()> {
    let blocks = block_range(rows, k, &range)?;
    check_len("T2P weight blocks", t2p_block_count(rows, k)?, w.len())?;
    check_len("q8_K activation blocks", k / QK_K, y.len())?;
    if out.len() != range.len() {
        return Err(Error::Shape(format!(
            "output holds {} values for {} rows",
            out.len(),
            range.len()
        )));
    }
    if !range.is_empty() {
        kern.gemv(&w[blocks], k / QK_PQ2_0, &y[..k / QK_K], out);
    }
    Ok(())
}

/// gemm over a row range and `ncols` columns given as `ceil(ncols / 4)` tiles of `k / 256`
/// `q8_K x4` blocks (padded with zero columns); writes `out[c * ld + r]` for `r` in `range`.
/// A single leftover column is extracted from its tile and runs through gemv.
#[allow(clippy::too_many_arguments)]
pub fn gemm_rows(
    kern: &Kernels,
    w: &[BlockT2p],
    rows: usize,
    k: usize,
    y: &[BlockQ8Kx4],
    ncols: usize,
    out: &mut [f32],
    ld: usize,
    range: Range<usize>,
) -> Result<()> {
    if ncols == 0 {
        return Err(Error::Shape("gemm needs at least one column".into()));
    }
    check_out(ncols, ld, rows, &range, out.len())?;
    gemm_range(
        kern,
        w,
        rows,
        k,
        y,
        ncols,
        range.clone(),
        &mut out[range.start..],
        ld,
    )
}

/// gemm over a row range writing `out[c * ld + i]` for row `range.start + i` (so `out` may be a
/// per-thread buffer with `ld = range.len()`).
#[allow(clippy::too_many_arguments)]
pub fn gemm_range(
    kern: &Kernels,
    w: &[BlockT2p],
    rows: usize,
    k: usize,
    y: &[BlockQ8Kx4],
    ncols: usize,
    range: Range<usize>,
    out: &mut [f32],
    ld: usize,
) -> Result<()> {
    if ncols == 0 {
        return Err(Error::Shape("gemm needs at least one column".into()));
    }
    let per_col = k / QK_K;
    let blocks = block_range(rows, k, &range)?;
    check_len("T2P weight blocks", t2p_block_count(rows, k)?, w.len())?;
    check_len(
        "q8_K x4 activation blocks",
        ncols.div_ceil(4) * per_col,
        y.len(),
    )?;
    if range.is_empty() {
        return Ok(());
    }
    check_out(ncols, ld, range.len(), &(0..range.len()), out.len())?;
    let nb = k / QK_PQ2_0;
    let n = range.len();
    if ncols % 4 == 1 {
        let last: Vec<BlockQ8K> = y[(ncols / 4) * per_col..(ncols / 4 + 1) * per_col]
            .iter()
            .map(|b| deinterleave_q8k_x4(b, 0))
            .collect();
        let col = ncols - 1;
        run_tiles(kern, &w[blocks.clone()], k, y, col, out, ld);
        kern.gemv(&w[blocks], nb, &last, &mut out[col * ld..col * ld + n]);
    } else {
        run_tiles(kern, &w[blocks], k, y, ncols, out, ld);
    }
    Ok(())
}

fn run_tiles(
    kern: &Kernels,
    w: &[BlockT2p],
    k: usize,
    y: &[BlockQ8Kx4],
    ncols: usize,
    out: &mut [f32],
    ld: usize,
) {
    if ncols > 0 {
        kern.gemm(
            w,
            k / QK_PQ2_0,
            &y[..ncols.div_ceil(4) * (k / QK_K)],
            ncols,
            out,
            ld,
        );
    }
}

/// `out[c * ld + r] = sum_k w[r][k] * x[c][k]` for the rows in `range` and every column of
/// `act`, on the kernels `kern`.
pub fn matmul_rows(
    kern: &Kernels,
    w: &T2pMatrix,
    act: &QuantizedBatch,
    out: &mut [f32],
    ld: usize,
    range: Range<usize>,
) -> Result<()> {
    if act.k != w.k {
        return Err(Error::Shape(format!(
            "activations have k = {}, weights k = {}",
            act.k, w.k
        )));
    }
    if act.act() == ActQuant::Q8_0 {
        check_out(act.ncols, ld, w.rows, &range, out.len())?;
        block_range(w.rows, w.k, &range)?;
        matmul_block(kern, w, act, range.clone(), &mut out[range.start..], ld);
        return Ok(());
    }
    match act.ncols {
        1 => gemv_rows(kern, &w.blocks, w.rows, w.k, &act.last_column, out, range),
        n if n % 4 == 1 => {
            let col = n - 1;
            check_out(n, ld, w.rows, &range, out.len())?;
            gemm_rows(
                kern,
                &w.blocks,
                w.rows,
                w.k,
                &act.tiles,
                col,
                out,
                ld,
                range.clone(),
            )?;
            gemv_rows(
                kern,
                &w.blocks,
                w.rows,
                w.k,
                &act.last_column,
                &mut out[col * ld..],
                range,
            )
        }
        n => gemm_rows(kern, &w.blocks, w.rows, w.k, &act.tiles, n, out, ld, range),
    }
}

/// [`matmul_rows`] over all rows with `ld = rows`; returns the `ncols * rows` outputs.
pub fn matmul(kern: &Kernels, w: &T2pMatrix, act: &QuantizedBatch) -> Result<Vec<f32>> {
    let mut out = vec![0.0; w.rows * act.ncols];
    matmul_rows(kern, w, act, &mut out, w.rows, 0..w.rows)?;
    Ok(out)
}

/// Rows of one parallel job for `rows` rows on `threads` threads: whole row groups (a multiple
/// of 4), about 4 jobs per thread (indices are claimed dynamically, so a thread slowed by
/// another process does not hold up the call).
pub fn rows_per_job(rows: usize, threads: usize) -> usize {
    let groups = rows / ROWS_PER_T2P;
    let jobs = (threads * JOBS_PER_THREAD).clamp(1, groups.max(1));
    groups.div_ceil(jobs) * ROWS_PER_T2P
}

// Not `pub`: cbindgen would export a public constant into the C header.
const JOBS_PER_THREAD: usize = 4;

/// All columns of `act` for the rows `rows` (whole row groups), written relative to the range:
/// `out[c * ld + (r - rows.start)]`. Shapes were checked by the caller.
fn matmul_block(
    kern: &Kernels,
    w: &T2pMatrix,
    act: &QuantizedBatch,
    rows: Range<usize>,
    out: &mut [f32],
    ld: usize,
) {
    let nb = w.k / QK_PQ2_0;
    let wb = &w.blocks[rows.start / ROWS_PER_T2P * nb..rows.end / ROWS_PER_T2P * nb];
    let n = act.ncols;
    if act.act() == ActQuant::Q8_0 {
        if n == 1 {
            kern.gemv_q8_0(wb, nb, &act.q8_0, &mut out[..rows.len()]);
        } else {
            kern.gemm_q8_0(wb, nb, &act.q8_0, n, out, ld);
        }
        return;
    }
    let gemm_cols = if n % 4 == 1 { n - 1 } else { n };
    if gemm_cols > 0 {
        kern.gemm(wb, nb, &act.tiles, gemm_cols, out, ld);
    }
    if n % 4 == 1 {
        let o = (n - 1) * ld;
        kern.gemv(wb, nb, &act.last_column, &mut out[o..o + rows.len()]);
    }
}

/// [`matmul_rows`] over all rows, split across `pool` in jobs of whole T2P row groups.
///
/// Results are bit-identical to the single-threaded driver (each output is computed by the same
/// kernel over the same blocks in the same order; only which thread computes it changes). Each
/// job owns disjoint `&mut` pieces of `out`: for one column the row range itself, for several
/// columns one piece per column, filled from a job-local `rows x ncols` buffer.
///
/// Products below 2^21 multiply-adds (`rows * k * ncols`, about 25 us of AVX2 work) run on the
/// calling thread alone: waking the workers costs more than such a product saves (see
/// [`matmul_parallel_min`] to choose).
pub fn matmul_parallel(
    pool: &ThreadPool,
    kern: &Kernels,
    w: &T2pMatrix,
    act: &QuantizedBatch,
    out: &mut [f32],
    ld: usize,
) -> Result<()> {
    matmul_parallel_min(pool, kern, w, act, out, ld, PARALLEL_MIN_MACS)
}

// Not `pub`: cbindgen would export a public constant into the C header.
const PARALLEL_MIN_MACS: usize = 1 << 21;

/// [`matmul_parallel`] with an explicit threshold: products of fewer than `min_macs`
/// multiply-adds run as one job on the calling thread (`0` always splits).
pub fn matmul_parallel_min(
    pool: &ThreadPool,
    kern: &Kernels,
    w: &T2pMatrix,
    act: &QuantizedBatch,
    out: &mut [f32],
    ld: usize,
    min_macs: usize,
) -> Result<()> {
    if act.k != w.k {
        return Err(Error::Shape(format!(
            "activations have k = {}, weights k = {}",
            act.k, w.k
        )));
    }
    let (rows, ncols) = (w.rows, act.ncols);
    check_matrix_shape(rows, w.k)?;
    check_out(ncols, ld, rows, &(0..rows), out.len())?;
    // One job runs inline on the calling thread (ThreadPool::run does not wake the workers).
    let per = if rows * w.k * ncols < min_macs {
        rows
    } else {
        rows_per_job(rows, pool.threads())
    };
    let n_jobs = rows.div_ceil(per);
    let range = |j: usize| j * per..(j * per + per).min(rows);
    if ncols == 1 {
        let slots: Vec<Mutex<&mut [f32]>> = out[..rows].chunks_mut(per).map(Mutex::new).collect();
        pool.run(n_jobs, |j| {
            let mut o = slots[j].lock().unwrap_or_else(|e| e.into_inner());
            matmul_block(kern, w, act, range(j), &mut o, per);
        });
        return Ok(());
    }
    // slots[j][c] = rows range(j) of column c; columns are disjoint because ld >= rows.
    let mut slots: Vec<Vec<&mut [f32]>> = (0..n_jobs).map(|_| Vec::with_capacity(ncols)).collect();
    let mut rest = &mut out[..(ncols - 1) * ld + rows];
    for c in 0..ncols {
        let (col, tail) = rest.split_at_mut(rows.min(rest.len()));
        for (j, piece) in col.chunks_mut(per).enumerate() {
            slots[j].push(piece);
        }
        rest = if c + 1 < ncols {
            &mut tail[ld - rows..]
        } else {
            tail
        };
    }
    let slots: Vec<Mutex<Vec<&mut [f32]>>> = slots.into_iter().map(Mutex::new).collect();
    pool.run(n_jobs, |j| {
        let r = range(j);
        let m = r.len();
        let mut buf = vec![0.0f32; m * ncols];
        matmul_block(kern, w, act, r, &mut buf, m);
        let mut dst = slots[j].lock().unwrap_or_else(|e| e.into_inner());
        for (c, d) in dst.iter_mut().enumerate() {
            d.copy_from_slice(&buf[c * m..(c + 1) * m]);
        }
    });
    Ok(())
}
