//! A weight matrix as a layer uses it: T2P for ternary weights, dense f32 for the rest, and the
//! batch of activations it reads, quantized once for every T2P matrix that shares it.

use std::cell::OnceCell;
use std::sync::Mutex;

use super::error::{ModelError, Result};
use crate::format::{QK_PQ2_0, ROWS_PER_T2P, f16_to_f32};
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

    fn quantized(&self, act: ActQuant) -> Result<&QuantizedBatch> {
        if let Some(q) = self.quantized.get() {
            return Ok(q);
        }
        let q = QuantizedBatch::with(self.x, self.k, self.n, act)?;
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
            Linear::T2p(m) => {
                let nb = m.k() / QK_PQ2_0;
                let (g, rr) = (r / ROWS_PER_T2P, r % ROWS_PER_T2P);
                for (b, chunk) in m.blocks()[g * nb..(g + 1) * nb]
                    .iter()
                    .zip(out.chunks_exact_mut(QK_PQ2_0))
                {
                    let d = f16_to_f32(b.d[rr]);
                    for (j, o) in chunk.iter_mut().enumerate() {
                        *o = (b.code(rr, j) as i32 - 1) as f32 * d;
                    }
                }
            }
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
                input.quantized(exec.act)?,
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

/// f32 matmul split over row chunks; each job fills its own buffer, gathered afterwards.
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
    let n_jobs = rows.div_ceil(per);
    let parts: Vec<Mutex<Vec<f32>>> = (0..n_jobs).map(|_| Mutex::new(Vec::new())).collect();
    exec.pool.run(n_jobs, |j| {
        let r = j * per..((j + 1) * per).min(rows);
        let mut buf = Vec::with_capacity(r.len() * n);
        for t in 0..n {
            let xt = &x[t * k..(t + 1) * k];
            buf.extend(
                r.clone()
                    .map(|row| super::ops::dot(&w[row * k..(row + 1) * k], xt)),
            );
        }
        *parts[j].lock().unwrap_or_else(|e| e.into_inner()) = buf;
    });
    for (j, part) in parts.into_iter().enumerate() {
        let buf = part.into_inner().unwrap_or_else(|e| e.into_inner());
        let r0 = j * per;
        let m = buf.len() / n.max(1);
        for t in 0..n {
            out[t * rows + r0..t * rows + r0 + m].copy_from_slice(&buf[t * m..(t + 1) * m]);
        }
    }
}
