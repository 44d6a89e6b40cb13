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

use bytemuck::Zeroable;

use crate::error::{Error, Result, check_len};
use crate::format::{
    BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, QK_K, QK_PQ2_0, ROWS_PER_T2P,
    RowPairBlock, T2pSlice, T2pVec, check_matrix_shape, dequantize_t2p_row, quantize_q8k_x4,
    quantize_row_q8_0, quantize_row_q8k, repack_pq2_0_to_t2p, t2p_block_count, t2p_row_groups,
};
use crate::kernels::{Gemm, Kernels};
use crate::pool::{ThreadPool, unit_chunk};

mod int8;
pub mod parallel;

pub use int8::Int8Matrix;

pub use parallel::{F16Product, QuantProduct, RowChunked, StepTime, T2pProduct, run_products};

/// A `rows x k` ternary weight matrix in a T2P layout (`ceil(rows / 4)` row groups; a last
/// group of fewer than 4 rows is padded with zero rows), with a scale per 128 weights or, from
/// mainline's Q2_0, per 64.
#[derive(Clone, Debug)]
pub struct T2pMatrix {
    rows: usize,
    k: usize,
    blocks: T2pVec,
}

impl T2pMatrix {
    /// Repacks a row-major `rows x k` pq2_0 tensor.
    pub fn from_pq2_0(src: &[BlockPq2_0], rows: usize, k: usize) -> Result<Self> {
        let mut blocks = vec![BlockT2p::zeroed(); t2p_block_count(rows, k)?];
        repack_pq2_0_to_t2p(src, rows, k, &mut blocks)?;
        Self::from_t2p_blocks(blocks, rows, k)
    }

    /// Takes blocks of either layout that are already in T2P order (row groups of `k / 128`
    /// blocks).
    pub fn from_t2p_blocks<B: RowPairBlock>(blocks: Vec<B>, rows: usize, k: usize) -> Result<Self> {
        let n = t2p_block_count(rows, k)?;
        if blocks.len() != n {
            return Err(Error::Shape(format!(
                "{rows} x {k} needs {n} {} blocks, got {}",
                B::NAME,
                blocks.len()
            )));
        }
        Ok(T2pMatrix {
            rows,
            k,
            blocks: B::vec(blocks),
        })
    }

    /// Output rows (without padding).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inner dimension (weights per row).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The T2P blocks, row group by row group.
    pub fn blocks(&self) -> T2pSlice<'_> {
        self.blocks.as_slice()
    }

    /// Row `r` as f32 (`k` values into `out`; the embedding lookup of a token table).
    ///
    /// # Panics
    /// If `r >= rows` or `out` is shorter than `k`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows, "row {r} of {}", self.rows);
        let nb = self.k / QK_PQ2_0;
        let (g, out) = (r / ROWS_PER_T2P, &mut out[..self.k]);
        match self.blocks().range(g * nb..(g + 1) * nb) {
            T2pSlice::G128(b) => dequantize_t2p_row(b, r % ROWS_PER_T2P, out),
            T2pSlice::G64(b) => dequantize_t2p_row(b, r % ROWS_PER_T2P, out),
        }
    }

    /// Bytes of weights (the source size, plus the padding rows of a last partial group).
    pub fn size_bytes(&self) -> usize {
        self.blocks().bytes().len()
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

/// Words (`u32`) of one block of each activation type: the work buffer is a `[u32]` so that
/// every block type (all 4-byte aligned) can be viewed in it.
const Q8_0_WORDS: usize = size_of::<BlockQ8_0Quad>() / 4;
const Q8K_WORDS: usize = size_of::<BlockQ8K>() / 4;
const Q8KX4_WORDS: usize = size_of::<BlockQ8Kx4>() / 4;
const _: () = assert!(
    Q8_0_WORDS * 4 == size_of::<BlockQ8_0Quad>()
        && Q8K_WORDS * 4 == size_of::<BlockQ8K>()
        && Q8KX4_WORDS * 4 == size_of::<BlockQ8Kx4>()
);

/// A `q8_0` quantizer: one column's floats into its quads (the library's
/// [`quantize_row_q8_0`], or a caller's such as ggml's).
pub type Q8_0Quantizer = dyn Fn(&[f32], &mut [BlockQ8_0Quad]);

/// How `ncols` quantized activation columns of length `k` lie in a work buffer of `u32` words.
///
/// * `q8_0`: `k / 128` quads per column, column after column. A quantization unit is one quad.
/// * `q8_K`: first `ceil(t / 4)` tiles of `k / 256` `q8_K x4` blocks for the `t` columns that run
///   through gemm tiles (all of them, unless `ncols % 4 == 1`), then, if one column is left over
///   (or there is only one), that column as `k / 256` plain `q8_K` blocks for gemv. A unit is a
///   tile, or one block of the plain column (so a single column quantizes in parallel too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActLayout {
    k: usize,
    ncols: usize,
    act: ActQuant,
}

impl ActLayout {
    /// The layout for `ncols` columns of length `k` as `act`. `k` must be a positive multiple
    /// of 128; if it is not a multiple of 256, `q8_K` cannot hold it and the layout is `q8_0`
    /// (see [`ActLayout::act`]).
    pub fn new(k: usize, ncols: usize, act: ActQuant) -> Result<ActLayout> {
        if k == 0 || !k.is_multiple_of(QK_PQ2_0) {
            return Err(Error::Shape(format!(
                "k = {k} is not a positive multiple of 128"
            )));
        }
        if ncols == 0 {
            return Err(Error::Shape("a batch needs at least one column".into()));
        }
        let act = if k.is_multiple_of(QK_K) {
            act
        } else {
            ActQuant::Q8_0
        };
        let layout = ActLayout { k, ncols, act };
        k.checked_mul(ncols)
            .and_then(|_| layout.units().checked_mul(Q8KX4_WORDS.max(Q8_0_WORDS)))
            .and_then(|w| w.checked_mul(4))
            .ok_or_else(|| Error::Shape(format!("{ncols} columns of {k} overflow")))?;
        Ok(layout)
    }

    /// The activation type actually used.
    pub fn act(&self) -> ActQuant {
        self.act
    }

    /// Inner dimension.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.ncols
    }

    /// `q8_K`: the columns computed through gemm tiles.
    fn tile_cols(&self) -> usize {
        if self.ncols % 4 == 1 {
            self.ncols - 1
        } else {
            self.ncols
        }
    }

    /// `q8_K`: the tiles (`ceil(tile_cols / 4)`).
    fn tiles(&self) -> usize {
        self.tile_cols().div_ceil(4)
    }

    /// `q8_K`: whether the last column is held plain for gemv.
    fn has_plain_column(&self) -> bool {
        self.tile_cols() < self.ncols
    }

    fn units(&self) -> usize {
        match self.act {
            ActQuant::Q8_0 => self.ncols * (self.k / QK_PQ2_0),
            ActQuant::Q8K => self.tiles() + usize::from(self.has_plain_column()) * (self.k / QK_K),
        }
    }

    /// Word offset of unit `u` (`u <= units()`).
    fn unit_offset(&self, u: usize) -> usize {
        match self.act {
            ActQuant::Q8_0 => u * Q8_0_WORDS,
            ActQuant::Q8K => {
                let tile_words = (self.k / QK_K) * Q8KX4_WORDS;
                let t = u.min(self.tiles());
                t * tile_words + (u - t) * Q8K_WORDS
            }
        }
    }

    /// Words of work buffer the activations take.
    pub fn work_words(&self) -> usize {
        self.unit_offset(self.units())
    }

    /// Bytes of work buffer (4-byte aligned) the activations take.
    pub fn work_bytes(&self) -> usize {
        4 * self.work_words()
    }

    fn share_units(&self, ith: usize, nth: usize) -> Range<usize> {
        let total = self.units();
        let nth = nth.max(1);
        let ith = ith.min(nth);
        total * ith / nth..total * (ith + 1).min(nth) / nth
    }

    /// The words of the work buffer that share `ith` of `nth` writes (disjoint shares that
    /// together cover the buffer; some may be empty).
    pub fn share(&self, ith: usize, nth: usize) -> Range<usize> {
        let u = self.share_units(ith, nth);
        self.unit_offset(u.start)..self.unit_offset(u.end)
    }

    /// Checks the activations `x` (column `c` at `x[c * ld_x..c * ld_x + k]`).
    fn check_x(&self, x: &[f32], ld_x: usize) -> Result<()> {
        if self.ncols > 1 && ld_x < self.k {
            return Err(Error::Shape(format!(
                "ld_x = {ld_x} is smaller than k = {}",
                self.k
            )));
        }
        let need = (self.ncols - 1)
            .checked_mul(ld_x)
            .and_then(|v| v.checked_add(self.k))
            .ok_or_else(|| Error::Shape("activation extent overflows".into()))?;
        check_len("activation values", need, x.len())
    }

    /// Quantizes share `ith` of `nth` of the columns of `x` (column `c` at
    /// `x[c * ld_x..c * ld_x + k]`) into `out`, which is exactly the words
    /// [`ActLayout::share`] names. `q8_0` quads come from `q8_0` (another quantizer such as
    /// ggml's), or with `None` from the library's [`quantize_row_q8_0`].
    pub fn quantize_share(
        &self,
        x: &[f32],
        ld_x: usize,
        ith: usize,
        nth: usize,
        out: &mut [u32],
        q8_0: Option<&Q8_0Quantizer>,
    ) -> Result<()> {
        let q8_0: &Q8_0Quantizer = q8_0.unwrap_or(&quantize_row_q8_0);
        self.check_x(x, ld_x)?;
        let words = self.share(ith, nth);
        check_len("work-buffer share words", words.len(), out.len())?;
        let units = self.share_units(ith, nth);
        let base = words.start;
        let col = |c: usize| &x[c * ld_x..c * ld_x + self.k];
        match self.act {
            ActQuant::Q8_0 => {
                let nb = self.k / QK_PQ2_0;
                let quads: &mut [BlockQ8_0Quad] = bytemuck::cast_slice_mut(out);
                let mut u = units.start;
                while u < units.end {
                    // One run of quads within a column.
                    let (c, q) = (u / nb, u % nb);
                    let n = (nb - q).min(units.end - u);
                    let at = u - units.start;
                    q8_0(
                        &col(c)[q * QK_PQ2_0..(q + n) * QK_PQ2_0],
                        &mut quads[at..at + n],
                    );
                    u += n;
                }
            }
            ActQuant::Q8K => {
                let per_col = self.k / QK_K;
                for u in units {
                    let at = self.unit_offset(u) - base;
                    if u < self.tiles() {
                        let tile: &mut [BlockQ8Kx4] =
                            bytemuck::cast_slice_mut(&mut out[at..at + per_col * Q8KX4_WORDS]);
                        let c = 4 * u..(4 * u + 4).min(self.tile_cols());
                        let mut cols: [&[f32]; 4] = [&[]; 4];
                        for (slot, c) in cols.iter_mut().zip(c.clone()) {
                            *slot = col(c);
                        }
                        quantize_q8k_x4(&cols[..c.len()], self.k, tile);
                    } else {
                        let b = u - self.tiles();
                        let block: &mut [BlockQ8K] =
                            bytemuck::cast_slice_mut(&mut out[at..at + Q8K_WORDS]);
                        quantize_row_q8k(&col(self.ncols - 1)[b * QK_K..(b + 1) * QK_K], block);
                    }
                }
            }
        }
        Ok(())
    }

    /// The `q8_0` quads of a work buffer.
    fn q8_0<'a>(&self, work: &'a [u32]) -> &'a [BlockQ8_0Quad] {
        bytemuck::cast_slice(&work[..self.work_words()])
    }

    /// The `q8_K x4` tiles of a work buffer.
    fn q8k_tiles<'a>(&self, work: &'a [u32]) -> &'a [BlockQ8Kx4] {
        bytemuck::cast_slice(&work[..self.unit_offset(self.tiles())])
    }

    /// The plain `q8_K` column of a work buffer (empty if there is none).
    fn q8k_plain<'a>(&self, work: &'a [u32]) -> &'a [BlockQ8K] {
        bytemuck::cast_slice(&work[self.unit_offset(self.tiles())..self.work_words()])
    }
}

/// A batch of activation columns quantized once for every matmul that reads it (q, k and v
/// share one): an [`ActLayout`] and its work buffer. The default is an empty batch whose
/// buffer [`QuantizedBatch::quantize`] fills.
#[derive(Clone, Debug)]
pub struct QuantizedBatch {
    layout: ActLayout,
    work: Vec<u32>,
}

impl Default for QuantizedBatch {
    fn default() -> Self {
        QuantizedBatch {
            layout: ActLayout {
                k: QK_PQ2_0,
                ncols: 0,
                act: ActQuant::Q8_0,
            },
            work: Vec::new(),
        }
    }
}

impl QuantizedBatch {
    /// Quantizes `ncols` columns stored one after another in `x` (`x[c * k..(c + 1) * k]`) as
    /// `act`, on the calling thread.
    pub fn new(x: &[f32], k: usize, ncols: usize, act: ActQuant) -> Result<Self> {
        let layout = ActLayout::new(k, ncols, act)?;
        let mut work = vec![0u32; layout.work_words()];
        layout.quantize_share(x, k, 0, 1, &mut work, None)?;
        Ok(QuantizedBatch { layout, work })
    }

    /// A `q8_K` batch from columns already quantized (`ncols` columns of `k / 256` blocks, one
    /// after another), e.g. hand-made extreme activations in tests or ggml's own `block_q8_K`.
    pub fn from_q8k_columns(cols: &[BlockQ8K], k: usize, ncols: usize) -> Result<Self> {
        let layout = ActLayout::new(k, ncols, ActQuant::Q8K)?;
        if layout.act != ActQuant::Q8K {
            return Err(Error::Shape(format!("k = {k} cannot hold q8_K blocks")));
        }
        let per_col = k / QK_K;
        check_len("q8_K column blocks", ncols * per_col, cols.len())?;
        let mut work = vec![0u32; layout.work_words()];
        let zero = BlockQ8K::zeroed();
        let tiles: &mut [BlockQ8Kx4] =
            bytemuck::cast_slice_mut(&mut work[..layout.unit_offset(layout.tiles())]);
        for (i, tile) in tiles.iter_mut().enumerate() {
            let (t, b) = (i / per_col, i % per_col);
            let col = |j: usize| {
                let c = 4 * t + j;
                if c < layout.tile_cols() {
                    &cols[c * per_col + b]
                } else {
                    &zero
                }
            };
            *tile = crate::format::interleave_q8k_x4([col(0), col(1), col(2), col(3)]);
        }
        if layout.has_plain_column() {
            let plain: &mut [BlockQ8K] =
                bytemuck::cast_slice_mut(&mut work[layout.unit_offset(layout.tiles())..]);
            plain.copy_from_slice(&cols[(ncols - 1) * per_col..ncols * per_col]);
        }
        Ok(QuantizedBatch { layout, work })
    }

    /// A `q8_0` batch from quads already quantized (`ncols` columns of `k / 128` quads).
    pub fn from_q8_0_columns(quads: &[BlockQ8_0Quad], k: usize, ncols: usize) -> Result<Self> {
        let layout = ActLayout::new(k, ncols, ActQuant::Q8_0)?;
        check_len("q8_0 column quads", ncols * (k / QK_PQ2_0), quads.len())?;
        let mut work = vec![0u32; layout.work_words()];
        work.copy_from_slice(bytemuck::cast_slice(&quads[..ncols * (k / QK_PQ2_0)]));
        Ok(QuantizedBatch { layout, work })
    }

    /// Makes this a `q8_0` batch of `ncols` columns of length `k` whose quads `fill` writes
    /// (`k / 128` per column, column after column), reusing the buffer's allocation.
    pub fn fill_q8_0_columns(
        &mut self,
        k: usize,
        ncols: usize,
        fill: impl FnOnce(&mut [BlockQ8_0Quad]),
    ) -> Result<()> {
        let layout = ActLayout::new(k, ncols, ActQuant::Q8_0)?;
        self.layout = layout;
        self.work.resize(layout.work_words(), 0);
        fill(bytemuck::cast_slice_mut(&mut self.work[..]));
        Ok(())
    }

    /// Quantizes `ncols` columns of `x` (one after another) as `act` into this batch, in shares
    /// spread over `pool`, reusing the buffer's allocation (a forward pass quantizes every
    /// layer's activations into one batch).
    pub fn quantize(
        &mut self,
        pool: &ThreadPool,
        x: &[f32],
        k: usize,
        ncols: usize,
        act: ActQuant,
    ) -> Result<()> {
        let layout = ActLayout::new(k, ncols, act)?;
        layout.check_x(x, k)?;
        self.layout = layout;
        self.work.resize(layout.work_words(), 0);
        // Shares of at least 32 quads: quantizing is cheap, waking threads is not.
        let nth = (layout.work_words() / (32 * Q8_0_WORDS)).clamp(1, pool.threads());
        let first_error = std::sync::OnceLock::new();
        let shares = crate::pool::pieces(&mut self.work, nth, |i| layout.share(i, nth).len());
        pool.for_each_item(nth, shares, |(ith, share)| {
            if let Err(e) = layout.quantize_share(x, k, ith, nth, share, None) {
                let _ = first_error.set(e);
            }
        });
        first_error.into_inner().map_or(Ok(()), Err)
    }

    /// The layout (activation type, `k`, columns).
    pub fn layout(&self) -> &ActLayout {
        &self.layout
    }

    /// The activation type actually used (`q8_0` whenever `k` is not a multiple of 256).
    pub fn act(&self) -> ActQuant {
        self.layout.act
    }

    /// Inner dimension.
    pub fn k(&self) -> usize {
        self.layout.k
    }

    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.layout.ncols
    }

    /// The work buffer.
    pub fn work(&self) -> &[u32] {
        &self.work
    }

    /// The `q8_0` quads (column-major, `k / 128` per column); empty for a `q8_K` batch.
    pub fn q8_0_blocks(&self) -> &[BlockQ8_0Quad] {
        match self.layout.act {
            ActQuant::Q8_0 => self.layout.q8_0(&self.work),
            ActQuant::Q8K => &[],
        }
    }
}

/// Products below this many multiply-adds (`rows * k * ncols`, about 25 us of AVX2 work) run
/// as one chunk: waking the workers costs more than such a product saves.
const PARALLEL_MIN_MACS: usize = 1 << 21;

/// Row chunks per thread: claimed dynamically, so a thread slowed by another process does not
/// hold up the call.
const CHUNKS_PER_THREAD: usize = 4;

/// One T2P matmul: `out[c * ld + r] = sum_k w[r][k] * x[c][k]`. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulPlan {
    rows: usize,
    layout: ActLayout,
}

impl MatmulPlan {
    /// The plan for a `rows x k` matrix times `ncols` columns quantized as `act` (`q8_0`
    /// whenever `k` is not a multiple of 256).
    pub fn new(rows: usize, k: usize, ncols: usize, act: ActQuant) -> Result<MatmulPlan> {
        check_matrix_shape(rows, k)?;
        let layout = ActLayout::new(k, ncols, act)?;
        rows.checked_mul(ncols)
            .ok_or_else(|| Error::Shape(format!("{rows} rows x {ncols} columns overflow")))?;
        Ok(MatmulPlan { rows, layout })
    }

    /// The plan for `w` times the columns of `batch`.
    pub fn for_batch(w: &T2pMatrix, batch: &QuantizedBatch) -> Result<MatmulPlan> {
        if batch.k() != w.k {
            return Err(Error::Shape(format!(
                "activations have k = {}, weights k = {}",
                batch.k(),
                w.k
            )));
        }
        Ok(MatmulPlan {
            rows: w.rows,
            layout: batch.layout,
        })
    }

    /// The activations' layout in the work buffer.
    pub fn layout(&self) -> &ActLayout {
        &self.layout
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row chunks to hand out to `threads` threads: 4 per thread, at most one per row group,
    /// one for a product too small to be worth splitting.
    pub fn chunk_count(&self, threads: usize) -> usize {
        let groups = t2p_row_groups(self.rows);
        if self.rows * self.layout.k * self.layout.ncols < PARALLEL_MIN_MACS {
            return 1;
        }
        (threads.max(1) * CHUNKS_PER_THREAD).clamp(1, groups)
    }

    /// Rows of chunk `i` of `n`: whole row groups, as even as possible (the last chunk ends at
    /// `rows`, which need not be a multiple of 4); empty when `n` exceeds the groups.
    pub fn chunk_rows(&self, i: usize, n: usize) -> Range<usize> {
        unit_chunk(self.rows, ROWS_PER_T2P, i, n)
    }

    /// Splits a column-strided output (`(ncols - 1) * ld + rows` values, `ld >= rows`) into the
    /// disjoint pieces of `n` chunks: `parts[i][c]` is rows [`MatmulPlan::chunk_rows`]`(i, n)`
    /// of column `c`, ready for [`ThreadPool::run_parts`].
    ///
    /// # Panics
    /// If `out` is shorter than that or `ld < rows` with several columns (callers check first).
    pub fn split_output<'a>(
        &self,
        out: &'a mut [f32],
        ld: usize,
        n: usize,
    ) -> Vec<Vec<&'a mut [f32]>> {
        let (rows, ncols) = (self.rows, self.layout.ncols);
        let mut parts: Vec<Vec<&mut [f32]>> = (0..n).map(|_| Vec::with_capacity(ncols)).collect();
        let mut rest = &mut out[..(ncols - 1) * ld + rows];
        for c in 0..ncols {
            let (mut col, tail) = rest.split_at_mut(rows);
            for (i, part) in parts.iter_mut().enumerate() {
                let (piece, after) = col.split_at_mut(self.chunk_rows(i, n).len());
                part.push(piece);
                col = after;
            }
            rest = if c + 1 < ncols {
                &mut tail[ld - rows..]
            } else {
                tail
            };
        }
        parts
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
        let k = self.layout.k;
        let ncols = self.layout.ncols;
        check_len("T2P weight blocks", t2p_block_count(self.rows, k)?, w.len())?;
        if w.halves() > 1 && self.layout.act != ActQuant::Q8_0 {
            return Err(Error::InvalidArgument(format!(
                "{} weights (a scale per 64, from Q2_0) run with q8_0 activations, not {}",
                w.name(),
                self.layout.act.name()
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
        scratch.resize(n * self.layout.ncols, 0.0);
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
        let nb = l.k / QK_PQ2_0;
        let m = w.len() / nb * ROWS_PER_T2P;
        match l.act {
            ActQuant::Q8_0 if l.ncols == 1 => kern.gemv_q8_0(w, nb, l.q8_0(work), &mut out[..m]),
            ActQuant::Q8_0 => kern.gemm_q8_0(Gemm {
                x: w,
                nb,
                y: l.q8_0(work),
                ncols: l.ncols,
                out,
                ld,
            }),
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
                    let o = (l.ncols - 1) * ld;
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
    let mut out = vec![0.0; w.rows * batch.ncols()];
    plan.compute(kern, w.blocks(), &batch.work, 0..w.rows, &mut out, w.rows)?;
    Ok(out)
}

/// `w` times every column of `batch` into `out[c * ld + r]`, the rows split across `pool` in
/// chunks of whole row groups ([`MatmulPlan::chunk_rows`]), through [`run_products`].
///
/// Bit-identical to [`matmul`]: each output is computed by the same kernel over the same blocks
/// in the same order; only which thread computes it changes. Allocates its tiles (and, for
/// `ld != rows`, the output) per call; a forward pass calls [`run_products`] with its own.
pub fn matmul_parallel(
    pool: &ThreadPool,
    kern: &Kernels,
    w: &T2pMatrix,
    batch: &QuantizedBatch,
    out: &mut [f32],
    ld: usize,
) -> Result<()> {
    let product = T2pProduct::new(w, batch)?;
    let (rows, ncols) = (w.rows, batch.ncols());
    if ncols > 1 && ld < rows {
        return Err(Error::Shape(format!(
            "ld = {ld} is smaller than rows = {rows}"
        )));
    }
    check_len("output values", (ncols - 1) * ld + rows, out.len())?;
    let mut tiles = Vec::new();
    if ld == rows || ncols == 1 {
        let out = &mut out[..ncols * rows];
        run_products(
            pool,
            kern,
            &mut [(product, out)],
            |p| Ok(Some(*p)),
            &mut tiles,
            false,
        )?;
        return Ok(());
    }
    let mut packed = vec![0.0; ncols * rows];
    let job = (product, &mut packed[..]);
    run_products(pool, kern, &mut [job], |p| Ok(Some(*p)), &mut tiles, false)?;
    for (c, col) in packed.chunks_exact(rows).enumerate() {
        out[c * ld..c * ld + rows].copy_from_slice(col);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{Isa, Kernels};

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
                    assert_eq!(work, batch.work, "{rows}x{k} {ncols} {act:?} shares");
                    let plan = MatmulPlan::for_batch(&w, &batch).unwrap();
                    for isa in Isa::available() {
                        let kern = Kernels::for_isa(isa).unwrap();
                        let mut got = vec![f32::NAN; rows * ncols];
                        let n = 3;
                        for i in 0..n {
                            let r = plan.chunk_rows(i, n);
                            let mut scratch = Vec::new();
                            plan.compute_columns(
                                kern,
                                w.blocks(),
                                &work,
                                r.clone(),
                                &mut scratch,
                                |c, v| got[c * rows + r.start..c * rows + r.end].copy_from_slice(v),
                            )
                            .unwrap();
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
