//! The ternary weight matrix in a T2P layout: repacked once at load from `pq2_0` (or taken as
//! T2P blocks from a loader that repacked another ternary format), read by the plans of
//! [`super::plan`] and row by row for a token-table lookup.

use bytemuck::Zeroable;

use crate::error::{Error, Result};
use crate::format::{
    BlockPq2_0, BlockT2p, QK_PQ2_0, ROWS_PER_T2P, RowPairBlock, T2pSlice, T2pVec,
    dequantize_t2p_row, repack_pq2_0_to_t2p, t2p_block_count,
};

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
