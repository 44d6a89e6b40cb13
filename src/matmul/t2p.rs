//! The ternary weight matrix in a T2P layout: repacked once at load from `pq2_0` (or taken as
//! T2P blocks from a loader that repacked another ternary format), read by the plans of
//! [`super::plan`] and row by row for a token-table lookup.

use std::ops::Range;
use std::sync::Arc;

use bytemuck::Zeroable;

use crate::error::{Error, Result};
use crate::format::{
    BlockPq2_0, BlockT2p, BlockT2pG64, QK_PQ2_0, ROWS_PER_T2P, RowPairBlock, T2pSlice, T2pVec,
    dequantize_t2p_row, repack_pq2_0_to_t2p, t2p_block_count,
};

/// A `rows x k` ternary weight matrix in a T2P layout (`ceil(rows / 4)` row groups; a last
/// group of fewer than 4 rows is padded with zero rows), with a scale per 128 weights or, from
/// mainline's Q2_0, per 64.
#[derive(Clone, Debug)]
pub struct T2pMatrix {
    rows: usize,
    k: usize,
    blocks: Storage,
}

/// Bytes several matrices can borrow their blocks from at once: a mapped file of T2P blocks
/// (`libt2p convert`), read in place instead of copied.
pub type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where a matrix's blocks live.
#[derive(Clone)]
enum Storage {
    /// Blocks of its own (repacked at load).
    Owned(T2pVec),
    /// Blocks at `range` of shared bytes, checked at construction to be whole, aligned blocks
    /// of the layout (`g64`: [`BlockT2pG64`], else [`BlockT2p`]).
    Shared {
        bytes: SharedBytes,
        range: Range<usize>,
        g64: bool,
    },
}

impl Storage {
    fn as_slice(&self) -> T2pSlice<'_> {
        match self {
            Storage::Owned(v) => v.as_slice(),
            Storage::Shared { bytes, range, g64 } => {
                let b = &(**bytes).as_ref()[range.clone()];
                // Cannot fail: `T2pMatrix::from_shared` checked the same cast.
                match g64 {
                    true => T2pSlice::G64(bytemuck::cast_slice(b)),
                    false => T2pSlice::G128(bytemuck::cast_slice(b)),
                }
            }
        }
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Storage::Owned(v) => v.fmt(f),
            Storage::Shared { range, g64, .. } => f
                .debug_struct("Shared")
                .field("range", range)
                .field("g64", g64)
                .finish(),
        }
    }
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
            blocks: Storage::Owned(B::vec(blocks)),
        })
    }

    /// A matrix whose blocks are `bytes[range]`, borrowed in place (no copy): whole row groups
    /// of T2P blocks, group 64 when `g64`. Fails unless the range holds exactly the blocks of
    /// a `rows x k` matrix, aligned for the block type.
    pub fn from_shared(
        bytes: SharedBytes,
        range: Range<usize>,
        rows: usize,
        k: usize,
        g64: bool,
    ) -> Result<Self> {
        let n = t2p_block_count(rows, k)?;
        let block = match g64 {
            true => std::mem::size_of::<BlockT2pG64>(),
            false => std::mem::size_of::<BlockT2p>(),
        };
        let held = (*bytes).as_ref().get(range.clone()).ok_or_else(|| {
            Error::Shape(format!(
                "blocks at {range:?} of {} bytes",
                (*bytes).as_ref().len()
            ))
        })?;
        if n.checked_mul(block) != Some(held.len()) {
            return Err(Error::Shape(format!(
                "{rows} x {k} needs {n} T2P blocks of {block} bytes, got {} bytes",
                held.len()
            )));
        }
        let aligned = match g64 {
            true => bytemuck::try_cast_slice::<u8, BlockT2pG64>(held).is_ok(),
            false => bytemuck::try_cast_slice::<u8, BlockT2p>(held).is_ok(),
        };
        if !aligned {
            return Err(Error::Shape(format!(
                "T2P blocks at byte {} are not aligned for their type",
                range.start
            )));
        }
        Ok(T2pMatrix {
            rows,
            k,
            blocks: Storage::Shared { bytes, range, g64 },
        })
    }

    /// Whether the blocks are borrowed from shared bytes ([`T2pMatrix::from_shared`]) rather
    /// than owned.
    pub fn is_shared(&self) -> bool {
        matches!(self.blocks, Storage::Shared { .. })
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
