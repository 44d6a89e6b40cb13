//! The one matmul driver and the one name for each kind of weight matrix.
//!
//! * [`Matrix`]: a `rows x k` weight matrix of any kind a model holds, each kind in its own
//!   module: [`T2pMatrix`] (`t2p.rs`, ternary weights in the T2P layout), [`QuantMatrix`]
//!   (`quant.rs`, one of ggml's block types as the file holds it), [`Int8Matrix`] (`int8.rs`,
//!   BitNet codes in T2P with f32 scales), [`F16Matrix`] (`f16.rs`) and dense f32 (here);
//! * `act.rs`: activation quantization for T2P ([`ActQuant`], [`ActLayout`],
//!   [`QuantizedBatch`]);
//! * `plan.rs`: one T2P product ([`MatmulPlan`]: which kernel runs, padded tiles and row
//!   groups, any row range into a strided output) and the one row-chunk rule of every kind
//!   ([`chunk_count`], [`chunk_rows`]);
//! * `parallel.rs`: the parallel step ([`run_products`]): the chunks of the products that share
//!   an input in one pool call (shrinking row chunks for one column, runs of columns for a prompt
//!   over matrices that stay in cache, else even row chunks, each copied from its thread's tile
//!   into its rows of the columns).
//!
//! Every caller (the runner's pool, the C ABI, the llama.cpp extra buffer type through the C
//! ABI) runs a T2P matmul through a [`MatmulPlan`].

mod act;
mod f16;
mod int8;
mod parallel;
mod plan;
mod quant;
mod t2p;

pub use act::{ActLayout, ActQuant, Q8_0Quantizer, QuantizedBatch};
pub use f16::F16Matrix;
pub use int8::{Int8Acts, Int8Matrix};
pub use parallel::{
    ColumnMatrix, ColumnsProduct, F16Product, QuantProduct, RowChunked, RowsOut, StepTime,
    T2pProduct, matmul_parallel, run_products,
};
pub use plan::{MatmulPlan, chunk_count, chunk_rows, matmul, with_scratch};
pub use quant::QuantMatrix;
pub use t2p::{SharedBytes, T2pMatrix};

/// A `rows x k` weight matrix of any kind a model holds: the one name for a weight matrix (the
/// runner multiplies it by a layer's activations, and reads a token table's rows from it).
#[derive(Clone, Debug)]
pub enum Matrix {
    /// Ternary weights in the T2P layout.
    T2p(T2pMatrix),
    /// One of ggml's block types (Q4_0 ... Q6_K), in the file's bytes: activations quantized
    /// to its ggml `vec_dot_type`, as llama.cpp does.
    Quant(QuantMatrix),
    /// BitNet weights (I2_S, IQ2_BN): T2P codes with f32 scales, times per-token int8
    /// activations (bitnet.cpp's numerics, see [`crate::format::i2s`]).
    Int8(Int8Matrix),
    /// F16 as the file holds it (the F16 LM heads and token tables of BitNet b1.58 and
    /// Falcon3): each row widened in registers, f32 activations.
    F16(F16Matrix),
    /// F32 / BF16, widened to f32 at load (norm-sized or small models only).
    Dense {
        /// Output rows.
        rows: usize,
        /// Inner dimension.
        k: usize,
        /// Row-major weights.
        w: Vec<f32>,
    },
}

impl Matrix {
    /// Output rows.
    pub fn rows(&self) -> usize {
        match self {
            Matrix::T2p(m) => m.rows(),
            Matrix::Quant(m) => m.rows(),
            Matrix::Int8(m) => m.rows(),
            Matrix::F16(m) => m.rows(),
            Matrix::Dense { rows, .. } => *rows,
        }
    }

    /// Inner dimension.
    pub fn k(&self) -> usize {
        match self {
            Matrix::T2p(m) => m.k(),
            Matrix::Quant(m) => m.k(),
            Matrix::Int8(m) => m.k(),
            Matrix::F16(m) => m.k(),
            Matrix::Dense { k, .. } => *k,
        }
    }

    /// Whether the matrix reads the shared quantized activations ([`QuantizedBatch`]).
    pub fn is_ternary(&self) -> bool {
        matches!(self, Matrix::T2p(_))
    }

    /// Row `r` as f32 into `out[..k]` (the embedding lookup when the matrix is a token table).
    ///
    /// # Panics
    /// If `r >= rows` or `out` is shorter than `k`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        match self {
            Matrix::T2p(m) => m.dequantize_row(r, out),
            Matrix::Quant(m) => m.dequantize_row(r, out),
            Matrix::Int8(m) => m.dequantize_row(r, out),
            Matrix::F16(m) => m.dequantize_row(r, out),
            Matrix::Dense { k, w, .. } => out[..*k].copy_from_slice(&w[r * k..(r + 1) * k]),
        }
    }

    /// Bytes of weights one product reads.
    pub fn size_bytes(&self) -> usize {
        match self {
            Matrix::T2p(m) => m.size_bytes(),
            Matrix::Quant(m) => m.size_bytes(),
            Matrix::Int8(m) => m.size_bytes(),
            Matrix::F16(m) => m.size_bytes(),
            Matrix::Dense { w, .. } => 4 * w.len(),
        }
    }
}
