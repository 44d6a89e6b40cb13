//! A weight matrix as a layer uses it: T2P for ternary weights, dense f32 for the rest, and the
//! activations it reads, quantized once for every T2P matrix that shares them. Nothing here
//! allocates once the buffers of a session have their size.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use super::error::{ModelError, Result};
use super::par::pieces;
use super::profile::{Phase, Profile};
use crate::kernels::Kernels;
use crate::matmul::{ActLayout, ActQuant, MatmulPlan, T2pMatrix};
use crate::pool::ThreadPool;
use crate::quant_matrix::QuantMatrix;
use crate::runner::{Tensor, TensorData};

/// Where matmuls run: the kernels and the one thread pool of the process.
pub struct Exec {
    /// The kernel path.
    pub kern: &'static Kernels,
    /// The persistent pool every parallel step uses.
    pub pool: ThreadPool,
    /// How activations are quantized for the T2P matrices.
    pub act: ActQuant,
    /// Time per phase of the forward passes run on this `Exec` (off unless enabled).
    pub profile: Profile,
}

impl Exec {
    /// The active kernels on a pool of `threads` threads, with the default activation type.
    pub fn new(threads: usize) -> Exec {
        Exec {
            kern: crate::kernels::active(),
            pool: ThreadPool::new(threads.max(1)),
            act: ActQuant::default(),
            profile: Profile::default(),
        }
    }

    /// The same with activations quantized as `act`.
    pub fn with_act(mut self, act: ActQuant) -> Exec {
        self.act = act;
        self
    }
}

/// The work buffer quantized activations live in, reused from one matmul group to the next.
#[derive(Debug, Default)]
pub struct ActBuffer {
    work: Vec<u32>,
}

/// `n` activation vectors of length `k` (token after token), with their quantized form when a
/// T2P matrix reads them.
pub struct Activations<'a> {
    x: &'a [f32],
    k: usize,
    n: usize,
    quant: Option<(ActLayout, &'a [u32])>,
}

impl ActBuffer {
    /// Wraps `x` (`n * k` values) and, if `quantize`, quantizes it as `exec.act` into this
    /// buffer, in shares spread over the pool.
    pub fn prepare<'a>(
        &'a mut self,
        exec: &Exec,
        x: &'a [f32],
        k: usize,
        quantize: bool,
    ) -> Result<Activations<'a>> {
        let n = x.len() / k.max(1);
        if !quantize || n == 0 {
            return Ok(Activations {
                x,
                k,
                n,
                quant: None,
            });
        }
        let t = exec.profile.start();
        let layout = ActLayout::new(k, n, exec.act)?;
        self.work.resize(layout.work_words(), 0);
        // Shares of at least 32 q8_0 quads (288 words): quantizing is cheap, waking threads
        // is not.
        let nth = (layout.work_words() / (32 * 36)).clamp(1, exec.pool.threads());
        let failed = AtomicBool::new(false);
        let shares = pieces(&mut self.work, nth, |i| layout.share(i, nth).len());
        exec.pool.for_each_item(nth, shares, |(i, share)| {
            if layout.quantize_share(x, k, i, nth, share).is_err() {
                failed.store(true, Ordering::Relaxed);
            }
        });
        exec.profile.stop(Phase::Quantize, t);
        if failed.into_inner() {
            return Err(ModelError::BadShape("quantizing activations failed".into()));
        }
        Ok(Activations {
            x,
            k,
            n,
            quant: Some((layout, &self.work)),
        })
    }
}

impl Activations<'_> {
    /// Vectors held.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Whether the vectors are quantized (a T2P matrix can read them).
    pub fn is_quantized(&self) -> bool {
        self.quant.is_some()
    }
}

/// A `rows x k` weight matrix.
pub enum Linear {
    /// Ternary weights in the T2P layout.
    T2p(T2pMatrix),
    /// One of ggml's block types (Q4_0 ... Q6_K), in the file's bytes: activations quantized
    /// to its ggml `vec_dot_type`, as llama.cpp does.
    Quant(QuantMatrix),
    /// F32 / F16 / BF16, widened to f32 at load (norm-sized or small models only).
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
            TensorData::Quant(m) => Linear::Quant(m),
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
            Linear::Quant(m) => m.rows(),
            Linear::Dense { rows, .. } => *rows,
        }
    }

    /// Inner dimension.
    pub fn k(&self) -> usize {
        match self {
            Linear::T2p(m) => m.k(),
            Linear::Quant(m) => m.k(),
            Linear::Dense { k, .. } => *k,
        }
    }

    /// Whether the matrix reads quantized activations.
    pub fn is_ternary(&self) -> bool {
        matches!(self, Linear::T2p(_))
    }

    /// Row `r` as f32 (the embedding lookup when the matrix is a token table).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        match self {
            Linear::T2p(m) => m.dequantize_row(r, out),
            Linear::Quant(m) => m.dequantize_row(r, out),
            Linear::Dense { k, w, .. } => out[..*k].copy_from_slice(&w[r * k..(r + 1) * k]),
        }
    }

    /// Bytes of weights read by one forward pass.
    pub fn size_bytes(&self) -> usize {
        match self {
            Linear::T2p(m) => m.size_bytes(),
            Linear::Quant(m) => m.size_bytes(),
            Linear::Dense { w, .. } => 4 * w.len(),
        }
    }

    /// `out[t * rows + r] = sum_k w[r][k] * x[t][k]` for every vector `t` of `input`; `tiles`
    /// is scratch for several columns. Its time counts as `phase` (T2P) or
    /// [`Phase::DenseMatmul`] when profiling.
    pub fn forward(
        &self,
        exec: &Exec,
        input: &Activations,
        out: &mut [f32],
        tiles: &mut Vec<f32>,
        phase: Phase,
    ) -> Result<()> {
        if input.k != self.k() {
            return Err(ModelError::BadShape(format!(
                "input of {} for a matrix of k = {}",
                input.k,
                self.k()
            )));
        }
        let rows = self.rows();
        let out = &mut out[..rows * input.n];
        if input.n == 0 {
            return Ok(());
        }
        match self {
            Linear::T2p(m) => {
                let quant = input.quant.ok_or_else(|| {
                    ModelError::BadShape("a T2P matrix read unquantized activations".into())
                })?;
                if input.n == 1 {
                    gemv_many(exec, input, &mut [(m, out)], Some, phase)
                } else {
                    gemm_forward(exec, m, quant, out, tiles, phase)
                }
            }
            Linear::Quant(m) => quant_forward(exec, m, input, out, tiles, phase),
            Linear::Dense { w, k, .. } => {
                let t = exec.profile.start();
                dense_forward(exec, w, *k, rows, input.x, out);
                exec.profile.stop(Phase::DenseMatmul, t);
                Ok(())
            }
        }
    }
}

/// Counts the time of a parallel matmul step (wall time split into compute and pool waits when
/// profiling) and keeps the first error of its chunks.
struct ChunkTimer<'a> {
    exec: &'a Exec,
    first_error: std::sync::OnceLock<crate::Error>,
    busy: AtomicU64,
    start: Option<Instant>,
}

impl<'a> ChunkTimer<'a> {
    fn new(exec: &'a Exec) -> Self {
        ChunkTimer {
            exec,
            first_error: std::sync::OnceLock::new(),
            busy: AtomicU64::new(0),
            start: exec.profile.is_on().then(Instant::now),
        }
    }

    /// Runs one chunk, timing it when profiling.
    fn run(&self, f: impl FnOnce() -> crate::Result<()>) {
        let t = self.start.is_some().then(Instant::now);
        if let Err(e) = f() {
            // Only the first is kept; the others are the same error on other rows.
            let _ = self.first_error.set(e);
        }
        if let Some(t) = t {
            self.busy
                .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }

    /// Books the step as `phase` over `chunks` chunks.
    fn finish(self, phase: Phase, chunks: usize) -> Result<()> {
        if let Some(t0) = self.start {
            let threads = self.exec.pool.threads().min(chunks);
            let wall = t0.elapsed().as_nanos() as u64;
            self.exec
                .profile
                .add_parallel(phase, wall, self.busy.into_inner(), threads);
        }
        match self.first_error.into_inner() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

/// `out_j = m_j x` for the T2P matrices `pick` finds in `jobs`, all reading the one quantized
/// column of `input`, in **one** pool call: the row chunks of every matrix are handed out
/// together, so the matrices of a layer that share an input (q/k/v, gate/up) wake the pool once
/// and wait for one last chunk instead of one per matrix. Jobs `pick` skips are left alone.
pub fn gemv_many<'m, M: Sync>(
    exec: &Exec,
    input: &Activations,
    jobs: &mut [(&'m M, &mut [f32])],
    pick: impl Fn(&'m M) -> Option<&'m T2pMatrix> + Sync,
    phase: Phase,
) -> Result<()> {
    let (layout, work) = input
        .quant
        .filter(|_| input.n == 1)
        .ok_or_else(|| ModelError::BadShape("gemv_many needs one quantized column".into()))?;
    let threads = exec.pool.threads();
    let mut total = 0;
    for (m, out) in jobs.iter() {
        let Some(t) = pick(*m) else { continue };
        if t.k() != input.k || out.len() < t.rows() {
            return Err(ModelError::BadShape(format!(
                "a {}x{} matrix for an input of {} and an output of {}",
                t.rows(),
                t.k(),
                input.k,
                out.len()
            )));
        }
        total += MatmulPlan::new(t.rows(), t.k(), 1, layout.act())?.chunk_count(threads);
    }
    let chunks = jobs
        .iter_mut()
        .filter_map(|(m, out)| {
            let t = pick(*m)?;
            let plan = MatmulPlan::new(t.rows(), t.k(), 1, layout.act()).ok()?;
            Some((t, plan, plan.chunk_count(threads), &mut out[..t.rows()]))
        })
        .flat_map(|(t, plan, n, out)| {
            pieces(out, n, move |i| plan.chunk_rows(i, n).len())
                .map(move |(i, piece)| (t, plan, n, i, piece))
        });
    let timer = ChunkTimer::new(exec);
    exec.pool
        .for_each_item(total, chunks, |(t, plan, n, i, piece)| {
            timer
                .run(|| plan.compute(exec.kern, t.blocks(), work, plan.chunk_rows(i, n), piece, 0));
        });
    timer.finish(phase, total)
}

/// `m` times the `ncols > 1` quantized columns in `work` into `out` (`ncols x rows`), row
/// chunks spread over the pool: each chunk computes its rows of every column into its own tile
/// of `tiles` (`ncols x len`, at `chunk_rows(i).start * ncols`), then each column gathers its
/// pieces (as `matmul_parallel` does, without its per-call allocations).
fn gemm_forward(
    exec: &Exec,
    m: &T2pMatrix,
    (layout, work): (ActLayout, &[u32]),
    out: &mut [f32],
    tiles: &mut Vec<f32>,
    phase: Phase,
) -> Result<()> {
    let (rows, ncols) = (m.rows(), layout.ncols());
    let plan = MatmulPlan::new(rows, m.k(), ncols, layout.act())?;
    let n = plan.chunk_count(exec.pool.threads());
    let timer = ChunkTimer::new(exec);
    tiles.resize(rows * ncols, 0.0);
    let chunks = pieces(tiles, n, |i| plan.chunk_rows(i, n).len() * ncols);
    exec.pool.for_each_item(n, chunks, |(i, tile)| {
        let r = plan.chunk_rows(i, n);
        timer.run(|| plan.compute(exec.kern, m.blocks(), work, r.clone(), tile, r.len()));
    });
    let tiles = &tiles[..];
    exec.pool
        .for_each_item(ncols, out.chunks_mut(rows).enumerate(), |(c, col)| {
            for i in 0..n {
                let r = plan.chunk_rows(i, n);
                let tile = &tiles[r.start * ncols..r.end * ncols];
                col[r.clone()].copy_from_slice(&tile[c * r.len()..(c + 1) * r.len()]);
            }
        });
    timer.finish(phase, n)
}

thread_local! {
    /// The quantized activations of [`quant_forward`], grown to the largest batch once.
    static QUANT_ACTS: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `m` times the `input.n` columns: activations quantized once (as the matrix's ggml
/// `vec_dot_type`), row chunks over the pool, each reading its rows once for every column.
fn quant_forward(
    exec: &Exec,
    m: &QuantMatrix,
    input: &Activations,
    out: &mut [f32],
    tiles: &mut Vec<f32>,
    phase: Phase,
) -> Result<()> {
    let (rows, ncols) = (m.rows(), input.n);
    QUANT_ACTS.with_borrow_mut(|work| {
        let t = exec.profile.start();
        work.resize(work.len().max(m.act_words(ncols)), 0);
        m.quantize_acts(&input.x[..ncols * m.k()], work)
            .map_err(|e| ModelError::BadShape(e.to_string()))?;
        exec.profile.stop(Phase::Quantize, t);
        let work = &work[..];
        let n = m.chunk_count(exec.pool.threads());
        let timer = ChunkTimer::new(exec);
        if ncols == 1 {
            let chunks = pieces(out, n, |i| m.chunk_rows(i, n).len());
            exec.pool.for_each_item(n, chunks, |(i, piece)| {
                let r = m.chunk_rows(i, n);
                timer.run(|| m.compute(exec.kern, work, 1, r.clone(), piece, r.len()));
            });
            return timer.finish(phase, n);
        }
        tiles.resize(tiles.len().max(rows * ncols), 0.0);
        let chunks = pieces(&mut tiles[..rows * ncols], n, |i| {
            m.chunk_rows(i, n).len() * ncols
        });
        exec.pool.for_each_item(n, chunks, |(i, tile)| {
            let r = m.chunk_rows(i, n);
            timer.run(|| m.compute(exec.kern, work, ncols, r.clone(), tile, r.len()));
        });
        let tiles = &tiles[..];
        exec.pool
            .for_each_item(ncols, out.chunks_mut(rows).enumerate(), |(c, col)| {
                for i in 0..n {
                    let r = m.chunk_rows(i, n);
                    let tile = &tiles[r.start * ncols..r.end * ncols];
                    col[r.clone()].copy_from_slice(&tile[c * r.len()..(c + 1) * r.len()]);
                }
            });
        timer.finish(phase, n)
    })
}

/// f32 matmul over chunks of the flat output: output `e` is row `e % rows` of token
/// `e / rows`, so any split is a contiguous piece.
fn dense_forward(exec: &Exec, w: &[f32], k: usize, rows: usize, x: &[f32], out: &mut [f32]) {
    let per = rows.div_ceil(exec.pool.threads() * 4).max(16);
    let n = out.len().div_ceil(per);
    exec.pool
        .for_each_item(n, out.chunks_mut(per).enumerate(), |(j, piece)| {
            for (i, o) in piece.iter_mut().enumerate() {
                let e = j * per + i;
                let (t, row) = (e / rows, e % rows);
                *o = super::ops::dot(&w[row * k..(row + 1) * k], &x[t * k..(t + 1) * k]);
            }
        });
}
