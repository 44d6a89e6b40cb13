//! BitNet matrices (I2_S, IQ2_BN, IQ1_BN) in T2P: the codes in blocks of scale 1.0, the f32 tensor or
//! row scales kept aside, and per-token int8 activations (see [`crate::format::i2s`]).
//!
//! The product is the ordinary T2P matmul over `q8_0` quads whose block scales are all 1.0, so
//! every kernel path returns the exact integer sums `sum (c - 1) * q` (as f32: below 2^24 for
//! any `k` under 132000); [`Int8Matrix::apply_scales`] then multiplies each by `scale / s` in
//! f32, exactly as [`crate::format::i2s::reference_matmul_int8`] does.

use super::{QuantizedBatch, T2pMatrix};
use crate::error::{Error, Result, check_len};
use crate::format::i2s::{
    bitnet_bytes, int8_output_scale, quantize_row_i8_quads, repack_bitnet_to_t2p,
};
use crate::format::{BlockT2p, GgmlType, QK_PQ2_0, t2p_block_count};
use crate::pool::ThreadPool;

/// Activation vectors quantized per vector to int8 (`q8_0` quads of scale 1.0), with their
/// scales `s`: what every BitNet matrix reading those vectors multiplies.
#[derive(Debug, Default)]
pub struct Int8Acts {
    batch: QuantizedBatch,
    scales: Vec<f32>,
}

impl Int8Acts {
    /// Quantizes `ncols` activation vectors `x` (one after another, each `k` long, `k` a
    /// multiple of 128), the vectors spread over `pool`; reuses the buffers.
    pub fn quantize(&mut self, pool: &ThreadPool, x: &[f32], k: usize, ncols: usize) -> Result<()> {
        check_len("activation values", k * ncols, x.len())?;
        let scales = &mut self.scales;
        scales.clear();
        scales.resize(ncols, 0.0);
        self.batch.fill_q8_0_columns(k, ncols, |quads| {
            let nb = k / QK_PQ2_0;
            let vectors = quads.chunks_exact_mut(nb).zip(x.chunks_exact(k));
            pool.for_each_item(ncols, vectors.zip(scales.iter_mut()), |((q, x), s)| {
                *s = quantize_row_i8_quads(x, q);
            });
        })
    }

    /// The int8 vectors, as the T2P product reads them.
    pub fn batch(&self) -> &QuantizedBatch {
        &self.batch
    }

    /// The scale `s` of each vector.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }
}

/// A BitNet matrix: T2P blocks of scale 1.0 and the f32 scales of its rows.
#[derive(Clone, Debug)]
pub struct Int8Matrix {
    m: T2pMatrix,
    /// One scale for every row (I2_S) or one per row (IQ2_BN, IQ1_BN).
    scales: Vec<f32>,
}

impl Int8Matrix {
    /// Repacks a BitNet tensor of type `ty` (I2_S, IQ2_BN or IQ1_BN), `rows x k` (`k` a multiple
    /// of 128), from its bytes as the file holds them.
    pub fn from_bitnet(ty: GgmlType, data: &[u8], rows: usize, k: usize) -> Result<Self> {
        let mut blocks = vec![BlockT2p::default(); t2p_block_count(rows, k)?];
        let scales = Self::repack_bitnet(ty, data, rows, k, &mut blocks)?;
        Self::new(T2pMatrix::from_t2p_blocks(blocks, rows, k)?, scales)
    }

    /// [`from_bitnet`](Self::from_bitnet)'s checks and repack into blocks the caller holds
    /// (`t2p_block_count(rows, k)` of them, e.g. in one allocation with other matrices), for
    /// [`new`](Self::new) over them: returns the f32 scales.
    pub fn repack_bitnet(
        ty: GgmlType,
        data: &[u8],
        rows: usize,
        k: usize,
        dst: &mut [BlockT2p],
    ) -> Result<Vec<f32>> {
        // The shape first: it refuses a `rows x k` whose size overflows (a hostile file's).
        check_len("T2P blocks", t2p_block_count(rows, k)?, dst.len())?;
        let bytes = bitnet_bytes(ty, rows, k)
            .ok_or_else(|| Error::InvalidArgument(format!("{} is not a BitNet type", ty.name())))?;
        check_len("BitNet tensor bytes", bytes, data.len())?;
        repack_bitnet_to_t2p(ty, data, rows, k, dst)
    }

    /// Takes a T2P matrix whose block scales are all 1.0 and its f32 scales (one, or one per
    /// row). Non-finite scales are refused (a hostile file's).
    pub fn new(m: T2pMatrix, scales: Vec<f32>) -> Result<Self> {
        if scales.len() != 1 && scales.len() != m.rows() {
            return Err(Error::Shape(format!(
                "{} scales for {} rows (1 or one per row)",
                scales.len(),
                m.rows()
            )));
        }
        if let Some(i) = scales.iter().position(|s| !s.is_finite()) {
            return Err(Error::InvalidArgument(format!(
                "scale {i} is {} (not finite)",
                scales[i]
            )));
        }
        Ok(Int8Matrix { m, scales })
    }

    /// The codes as T2P blocks of scale 1.0.
    pub fn t2p(&self) -> &T2pMatrix {
        &self.m
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.m.rows()
    }

    /// Inner dimension.
    pub fn k(&self) -> usize {
        self.m.k()
    }

    /// The f32 scale of row `r`.
    pub fn scale(&self, r: usize) -> f32 {
        self.scales[if self.scales.len() == 1 { 0 } else { r }]
    }

    /// Bytes of weights read by one product (the T2P blocks).
    pub fn size_bytes(&self) -> usize {
        self.m.size_bytes()
    }

    /// Row `r` as f32 (`(c - 1) * scale`, exact).
    ///
    /// # Panics
    /// If `r >= rows` or `out` is shorter than `k`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        self.m.dequantize_row(r, out);
        let d = self.scale(r);
        out[..self.k()].iter_mut().for_each(|v| *v *= d);
    }

    /// Turns the integer sums of the T2P product (`out[c * rows + r]`) into the outputs:
    /// each times `int8_output_scale(scale_r, s_c)`.
    pub fn apply_scales(&self, s: &[f32], out: &mut [f32]) {
        let rows = self.rows();
        for (col, &sc) in out.chunks_exact_mut(rows).zip(s) {
            for (r, o) in col.iter_mut().enumerate() {
                *o *= int8_output_scale(self.scale(r), sc);
            }
        }
    }
}
