//! A weight matrix ([`Matrix`]) as a layer uses it: made from a loaded tensor, multiplied on the
//! session's pool through the matmul driver, and the activations it reads, quantized once for
//! every T2P matrix that shares them. Nothing here allocates once the buffers of a session have
//! their size.

use super::error::{ModelError, Result};
use super::exec::Exec;
use super::profile::Phase;
use crate::kernels::attention::{dot, dot_rows};
use crate::matmul::{
    F16Matrix, F16Product, Int8Acts, Matrix, QuantProduct, QuantizedBatch, RowChunked, T2pProduct,
    run_products,
};
use crate::runner::{Tensor, TensorData};

/// `n` activation vectors of length `k` (token after token), with their quantized form when a
/// T2P matrix reads them.
pub struct Activations<'a> {
    x: &'a [f32],
    k: usize,
    n: usize,
    quant: Option<&'a QuantizedBatch>,
}

impl<'a> Activations<'a> {
    /// Wraps `x` (`n * k` values) and, if `quantize`, quantizes it as `exec.act` into `batch`,
    /// in shares spread over the pool.
    pub fn prepare(
        exec: &Exec,
        batch: &'a mut QuantizedBatch,
        x: &'a [f32],
        k: usize,
        quantize: bool,
    ) -> Result<Activations<'a>> {
        let n = x.len() / k.max(1);
        let quant = if quantize && n > 0 {
            let _t = exec.profile.time(Phase::Quantize);
            batch.quantize(&exec.pool, x, k, n, exec.act)?;
            Some(&*batch)
        } else {
            None
        };
        Ok(Activations { x, k, n, quant })
    }
}

impl Activations<'_> {
    /// Vectors held.
    pub fn n(&self) -> usize {
        self.n
    }

    /// The quantized vectors a T2P matrix reads, if they were quantized.
    pub fn quantized(&self) -> Option<&'_ QuantizedBatch> {
        self.quant
    }
}

/// The runner's side of a weight matrix: made from a loaded tensor, multiplied on the session's
/// pool with its time booked in the profile.
impl Matrix {
    /// Takes a loaded 2-D tensor (`shape = [k, rows]`).
    pub(crate) fn from_tensor(t: Tensor) -> Result<Matrix> {
        if t.shape.len() != 2 {
            return Err(ModelError::BadShape(format!(
                "{} has {} dimensions, a matrix needs 2",
                t.name,
                t.shape.len()
            )));
        }
        let (k, rows) = (t.row_len(), t.n_rows());
        Ok(match t.data {
            TensorData::T2p(m) => Matrix::T2p(m),
            TensorData::Quant(m) => Matrix::Quant(m),
            TensorData::Int8(m) => Matrix::Int8(m),
            TensorData::F16(w) => Matrix::F16(F16Matrix::new(rows, k, w)?),
            _ => Matrix::Dense {
                rows,
                k,
                w: t.to_f32_vec()?,
            },
        })
    }

    /// `out[t * rows + r] = sum_k w[r][k] * x[t][k]` for every vector `t` of `input`. Its time
    /// counts as `phase` (T2P) or
    /// [`Phase::DenseMatmul`] when profiling.
    pub(crate) fn forward(
        &self,
        exec: &Exec,
        input: &Activations,
        out: &mut [f32],
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
            Matrix::T2p(m) => {
                let batch = input.quantized().ok_or_else(|| {
                    ModelError::BadShape("a T2P matrix read unquantized activations".into())
                })?;
                let product = T2pProduct::new(m, batch)?;
                run_one(exec, product, out, phase, m.size_bytes())
            }
            // Activations quantized once (as the matrix's ggml `vec_dot_type`), then row chunks
            // over the pool, each reading its rows once for every column.
            Matrix::Quant(m) => QUANT_ACTS.with_borrow_mut(|work| {
                {
                    let _t = exec.profile.time(Phase::Quantize);
                    work.resize(work.len().max(m.act_words(input.n)), 0);
                    m.quantize_acts(&input.x[..input.n * m.k()], work)?;
                }
                let product = QuantProduct::new(m, work, input.n)?;
                run_one(exec, product, out, phase, m.size_bytes())
            }),
            // Each token quantized to int8 with its own scale, the integer sums from the T2P
            // kernels, then the f32 scales.
            Matrix::Int8(m) => INT8_ACTS.with_borrow_mut(|acts| {
                {
                    let _t = exec.profile.time(Phase::Quantize);
                    acts.quantize(&exec.pool, &input.x[..input.n * input.k], input.k, input.n)?;
                }
                let product = T2pProduct::unit_scales(m.t2p(), acts.batch())?;
                run_one(exec, product, &mut *out, phase, m.size_bytes())?;
                m.apply_scales(acts.scales(), out);
                Ok(())
            }),
            // Row chunks over the pool, each reading its rows once for every column.
            Matrix::F16(m) => {
                let product = F16Product::new(m, &input.x[..input.n * input.k], input.n)?;
                run_one(exec, product, out, Phase::DenseMatmul, m.size_bytes())
            }
            Matrix::Dense { .. } => dense_step(exec, input, &mut [(self, out)], |m| Some(*m)),
        }
    }
}

/// One product into `out` as one parallel step ([`run_step`]), `bytes` its weights.
fn run_one<P: RowChunked + Copy + Send + Sync>(
    exec: &Exec,
    product: P,
    out: &mut [f32],
    phase: Phase,
    bytes: usize,
) -> Result<()> {
    run_step(
        exec,
        &mut [(product, out)],
        |p| Ok(Some(*p)),
        phase,
        bytes as u64,
    )
}

/// Runs the products `product` finds in `jobs` as one parallel step of the matmul driver
/// ([`run_products`]), booking its time as `phase` (compute) and [`Phase::PoolWait`] when
/// profiling, and `bytes` (the weights the products read) as the step's traffic.
pub(crate) fn run_step<M: Send + Sync, P: RowChunked + Copy + Send>(
    exec: &Exec,
    jobs: &mut [(M, &mut [f32])],
    product: impl Fn(&M) -> crate::Result<Option<P>> + Sync,
    phase: Phase,
    bytes: u64,
) -> Result<()> {
    let timed = exec.profile.is_on();
    if let Some(t) = run_products(&exec.pool, exec.kern, jobs, product, timed)? {
        exec.profile
            .add_parallel(phase, t.wall_ns, t.busy_ns, t.threads, bytes);
    }
    Ok(())
}

thread_local! {
    /// The quantized activations of `Matrix::forward` for a ggml block matrix, grown to the
    /// largest batch once.
    static QUANT_ACTS: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The int8 activations and their per-token scales of `Matrix::forward` for a BitNet
    /// matrix, grown to the largest batch once.
    static INT8_ACTS: std::cell::RefCell<Int8Acts> = std::cell::RefCell::new(Int8Acts::default());
}

/// The products of the `Matrix::Dense` jobs `dense_of` picks (matrices that read the same
/// `input`: the DeltaNet's alpha and beta) as one pool call, booked as one
/// [`Phase::DenseMatmul`] step. An item is up to [`dense_rows_per_item`] rows of one matrix
/// for one token, four rows at a time through `dot_rows` (each output is the [`dot`] of its
/// row and token, as one at a time), so the matrices share one wake and one wait.
pub(crate) fn dense_step<M: Send + Sync>(
    exec: &Exec,
    input: &Activations,
    jobs: &mut [(M, &mut [f32])],
    dense_of: impl Fn(&M) -> Option<&Matrix> + Sync,
) -> Result<()> {
    let (x, k, n) = (input.x, input.k, input.n);
    fn weights(m: Option<&Matrix>, k: usize) -> Option<(&[f32], usize)> {
        match m? {
            Matrix::Dense { w, rows, .. } => Some((&w[..k * rows], *rows)),
            _ => None,
        }
    }
    if let Some(m) = jobs
        .iter()
        .filter_map(|(m, _)| dense_of(m))
        .find(|m| m.k() != k)
    {
        return Err(ModelError::BadShape(format!(
            "input of {k} for a matrix of k = {}",
            m.k()
        )));
    }
    let all_rows: usize = jobs
        .iter()
        .filter_map(|(m, _)| weights(dense_of(m), k))
        .map(|(_, r)| r)
        .sum();
    if all_rows == 0 || n == 0 {
        return Ok(());
    }
    let per = dense_rows_per_item(all_rows, exec.pool.threads());
    let items: usize = jobs
        .iter()
        .filter_map(|(m, _)| weights(dense_of(m), k))
        .map(|(_, rows)| n * rows.div_ceil(per))
        .sum();
    let start = exec.profile.is_on().then(std::time::Instant::now);
    let pieces = jobs.iter_mut().filter_map(|(m, out)| {
        let (w, rows) = weights(dense_of(m), k)?;
        let tokens = out[..n * rows].chunks_mut(rows).zip(x.chunks_exact(k));
        Some(tokens.flat_map(move |(out, x)| {
            let chunks = out.chunks_mut(per).enumerate();
            chunks.map(move |(j, out)| (&w[j * per * k..], x, out))
        }))
    });
    exec.pool
        .for_each_item(items, pieces.flatten(), |(w, x, out)| {
            let mut rows = w.chunks_exact(k);
            for quad in out.chunks_mut(4) {
                match quad {
                    [a, b, c, d] => {
                        let r = [(); 4].map(|_| rows.next().expect("a row per output"));
                        [*a, *b, *c, *d] = dot_rows(r, x);
                    }
                    rest => rest
                        .iter_mut()
                        .for_each(|o| *o = dot(rows.next().expect("a row per output"), x)),
                }
            }
        });
    if let Some(t) = start {
        let ns = t.elapsed().as_nanos() as u64;
        let bytes: usize = jobs
            .iter()
            .filter_map(|(m, _)| weights(dense_of(m), k))
            .map(|(w, _)| 4 * w.len())
            .sum();
        exec.profile.add(Phase::DenseMatmul, ns);
        exec.profile.add_step(Phase::DenseMatmul, bytes as u64, ns);
    }
    Ok(())
}

/// Rows of one item of [`dense_step`]: about four items per thread over all its rows, a
/// multiple of four, at least 16.
fn dense_rows_per_item(rows: usize, threads: usize) -> usize {
    rows.div_ceil(4 * threads).next_multiple_of(4).max(16)
}
