//! Activation quantization for the T2P matmul: the activation types ([`ActQuant`]), how a batch
//! of quantized columns lies in a work buffer ([`ActLayout`]) and that buffer filled once for
//! every matrix that reads it ([`QuantizedBatch`]), in shares so that each thread of a pool (or
//! of ggml) quantizes its own part.

use std::ops::Range;

use bytemuck::Zeroable;

use crate::error::{Error, Result, check_len};
use crate::format::{BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, QK_K, QK_PQ2_0, quantize_row_q8k};
use crate::pool::ThreadPool;

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
/// [`quantize_row_q8_0`](crate::format::quantize_row_q8_0), or a caller's such as ggml's).
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
    pub(super) fn tile_cols(&self) -> usize {
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
    pub(super) fn has_plain_column(&self) -> bool {
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

    /// The columns `cols` of this layout as a layout of their own, and the words of the work
    /// buffer they take: `None` where they are not one run of whole units (a `q8_K` range
    /// must start on a tile and end on one or at the last column).
    pub(super) fn columns(&self, cols: Range<usize>) -> Option<(ActLayout, Range<usize>)> {
        if cols.start >= cols.end || cols.end > self.ncols {
            return None;
        }
        let sub = ActLayout {
            ncols: cols.len(),
            ..*self
        };
        let first = match self.act {
            ActQuant::Q8_0 => cols.start * (self.k / QK_PQ2_0),
            ActQuant::Q8K => {
                let whole = cols.start.is_multiple_of(4)
                    && (cols.end.is_multiple_of(4) || cols.end == self.ncols);
                if !whole {
                    return None;
                }
                cols.start / 4
            }
        };
        let start = self.unit_offset(first);
        Some((sub, start..start + sub.work_words()))
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
    pub(crate) fn check_x(&self, x: &[f32], ld_x: usize) -> Result<()> {
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
    /// ggml's), or with `None` from the library's
    /// [`quantize_row_q8_0`](crate::format::quantize_row_q8_0) (as the active kernel
    /// path builds it, [`crate::kernels::Kernels::quantize_row_q8_0`]).
    pub fn quantize_share(
        &self,
        x: &[f32],
        ld_x: usize,
        ith: usize,
        nth: usize,
        out: &mut [u32],
        q8_0: Option<&Q8_0Quantizer>,
    ) -> Result<()> {
        // The active path's build of the library's quantizer: the same bytes as
        // `quantize_row_q8_0` on every path.
        let kern = crate::kernels::active();
        let own = |x: &[f32], out: &mut [BlockQ8_0Quad]| kern.quantize_row_q8_0(x, out);
        let q8_0: &Q8_0Quantizer = q8_0.unwrap_or(&own);
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
                        kern.quantize_q8k_x4(&cols[..c.len()], self.k, tile);
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
    pub(super) fn q8_0<'a>(&self, work: &'a [u32]) -> &'a [BlockQ8_0Quad] {
        bytemuck::cast_slice(&work[..self.work_words()])
    }

    /// The `q8_K x4` tiles of a work buffer.
    pub(super) fn q8k_tiles<'a>(&self, work: &'a [u32]) -> &'a [BlockQ8Kx4] {
        bytemuck::cast_slice(&work[..self.unit_offset(self.tiles())])
    }

    /// The plain `q8_K` column of a work buffer (empty if there is none).
    pub(super) fn q8k_plain<'a>(&self, work: &'a [u32]) -> &'a [BlockQ8K] {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A cut of a batch's columns ([`ActLayout::columns`]) holds exactly what quantizing those
    /// columns alone gives, and cuts that split a `q8_K` tile are refused.
    #[test]
    fn column_cuts_are_the_columns_quantized_alone() {
        let k = 512;
        for act in [ActQuant::Q8_0, ActQuant::Q8K] {
            for ncols in [1, 2, 5, 8, 9, 13, 16] {
                let x: Vec<f32> = (0..k * ncols)
                    .map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 97.0)
                    .collect();
                let full = QuantizedBatch::new(&x, k, ncols, act).unwrap();
                for c0 in 0..ncols {
                    for c1 in c0 + 1..=ncols {
                        let what = format!("{act:?} {ncols} columns, cut {c0}..{c1}");
                        let cut = full.layout().columns(c0..c1);
                        let whole = c0 % 4 == 0 && (c1 % 4 == 0 || c1 == ncols);
                        if act == ActQuant::Q8K && !whole {
                            assert!(cut.is_none(), "{what}");
                            continue;
                        }
                        let (layout, words) = cut.expect(&what);
                        let alone =
                            QuantizedBatch::new(&x[c0 * k..c1 * k], k, c1 - c0, act).unwrap();
                        assert_eq!(&layout, alone.layout(), "{what}");
                        assert_eq!(&full.work()[words], alone.work(), "{what}");
                    }
                }
                assert!(full.layout().columns(0..ncols + 1).is_none());
                assert!(full.layout().columns(1..1).is_none());
            }
        }
    }
}
