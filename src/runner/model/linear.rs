//! A weight matrix as a layer uses it: T2P for ternary weights, dense f32 for the rest, and the
//! batch of activations it reads, quantized once for every T2P matrix that shares it.

use std::cell::OnceCell;

use super::error::{ModelError, Result};
use crate::kernels::Kernels;
use crate::matmul::{ActQuant, QuantizedBatch, T2pMatrix, matmul_parallel};
use crate::pool::ThreadPool;
use crate::runner::{Tensor, TensorData};

/// Where matmuls run: the kernels and the one thread pool of the process.
pub struct Exec {
    /// The kernel path.
    pub kern: &'static Kernels,
    /// The persistent pool every parallel step uses.
    pub pool: ThreadPool,
    /// How activations are quantized for the T2P matrices.
    pub act: ActQuant,
}

impl Exec {
    /// The active kernels on a pool of `threads` threads, with the default activation type.
    pub fn new(threads: usize) -> Exec {
        Exec {
            kern: crate::kernels::active(),
            pool: ThreadPool::new(threads.max(1)),
            act: ActQuant::default(),
        }
    }

    /// The same with activations quantized as `act`.
    pub fn with_act(mut self, act: ActQuant) -> Exec {
        self.act = act;
        self
    }
}

/// `n` activation vectors of length `k` (token-major) plus their quantized form, computed on
/// first use and then shared by every T2P matrix reading this input (q/k/v, gate/up).
pub struct Input<'a> {
    x: &'a [f32],
    k: usize,
    n: usize,
    quantized: OnceCell<QuantizedBatch>,
}

impl<'a> Input<'a> {
    /// Wraps `x` (`n * k` values, token after token).
    pub fn new(x: &'a [f32], k: usize) -> Input<'a> {
        Input {
            x,
            k,
            n: x.len() / k.max(1),
            quantized: OnceCell::new(),
        }
    }

    /// Number of vectors.
    pub fn n(&self) -> usize {
        self.n
    }

    fn quantized(&self, exec: &Exec) -> Result<&QuantizedBatch> {
        if let Some(q) = self.quantized.get() {
            return Ok(q);
        }
        let mut q = QuantizedBatch::empty();
        q.quantize(&exec.pool, self.x, self.k, self.n, exec.act)?;
        Ok(self.quantized.get_or_init(|| q))
    }
}

/// A `rows x k` weight matrix.
pub enum Linear {
    /// Ternary weights in the T2P layout.
    T2p(T2pMatrix),
    /// Any other type, dequantized to f32 at load (norm-sized or small models only).
    Dense {
        /// Output rows.
        rows: usize,
        /// Inner dimension.
        k: usize,
        /// Row-major weights.
        w: Vec<f32>,
    },
}

impl Linear {
    /// Takes a loaded 2-D tensor (`shape = [k, rows]`).
    pub fn from_tensor(t: Tensor) -> Result<Linear> {
        if t.shape.len() != 2 {
            return Err(ModelError::BadShape(format!(
                "{} has {} dimensions, a matrix needs 2",
                t.name,
                t.shape.len()
            )));
        }
        let (k, rows) = (t.row_len(), t.n_rows());
        Ok(match t.data {
            TensorData::T2p(m) => Linear::T2p(m),
            _ => Linear::Dense {
                rows,
                k,
                w: t.to_f32_vec()?,
            },
        })
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        match self {
            Linear::T2p(m) => m.rows(),
            Linear::Dense { rows, .. } => *rows,
        }
    }

    /// Inner dimension.
    pub fn k(&self) -> usize {
        match self {
            Linear::T2p(m) => m.k(),
            Linear::Dense { k, .. } => *k,
        }
    }

    /// Row `r` as f32 (the embedding lookup when the matrix is a token table).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        match self {
            Linear::T2p(m) => m.dequantize_row(r, out),
            Linear::Dense { k, w, .. } => out[..*k].copy_from_slice(&w[r * k..(r + 1) * k]),
        }
    }

    /// Bytes of weights read by one forward pass.
    pub fn size_bytes(&self) -> usize {
        match self {
            Linear::T2p(m) => m.size_bytes(),
            Linear::Dense { w, .. } => 4 * w.len(),
        }
    }

    /// `out[t * rows + r] = sum_k w[r][k] * x[t][k]` for every vector `t` of `input`.
    pub fn forward(&self, exec: &Exec, input: &Input, out: &mut [f32]) -> Result<()> {
        if input.k != self.k() {
            return Err(ModelError::BadShape(format!(
                "input of {} for a matrix of k = {}",
                input.k,
                self.k()
            )));
        }
        let rows = self.rows();
        let out = &mut out[..rows * input.n];
        match self {
            Linear::T2p(m) => Ok(matmul_parallel(
                &exec.pool,
                exec.kern,
                m,
                input.quantized(exec)?,
                out,
                rows,
            )?),
            Linear::Dense { w, k, .. } => {
                dense_forward(exec, w, *k, rows, input.x, input.n, out);
                Ok(())
            }
        }
    }
}

/// f32 matmul split over row chunks; each job writes its rows of every token's output.
fn dense_forward(
    exec: &Exec,
    w: &[f32],
    k: usize,
    rows: usize,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) {
    let per = rows.div_ceil(exec.pool.threads() * 4).max(16);
    // parts[j][t]: rows j * per.. of token t's output.
    let mut parts: Vec<Vec<&mut [f32]>> = (0..rows.div_ceil(per)).map(|_| Vec::new()).collect();
    for token in out.chunks_mut(rows).take(n) {
        for (part, piece) in parts.iter_mut().zip(token.chunks_mut(per)) {
            part.push(piece);
        }
    }
    exec.pool.run_parts(parts, |j, mut tokens| {
        for (t, piece) in tokens.iter_mut().enumerate() {
            let xt = &x[t * k..(t + 1) * k];
            for (i, o) in piece.iter_mut().enumerate() {
                let row = j * per + i;
                *o = super::ops::dot(&w[row * k..(row + 1) * k], xt);
            }
        }
    });
}
