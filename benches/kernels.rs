//! Criterion micro-benchmarks of the kernels on every path this CPU runs (`cargo bench`).
//! `libt2p bench` is the report against the memory ceiling; these are for A/B work on a kernel.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use t2p::format::{BlockPq2_0, BlockQ8K, QK_K, QK_PQ2_0, f32_to_f16, quantize_row_q8k};
use t2p::kernels::{Isa, Kernels};
use t2p::matmul::{MatmulPlan, QuantizedBatch, T2pMatrix, matmul_parallel};
use t2p::pool::ThreadPool;

fn lcg(s: &mut u64) -> u32 {
    *s = s
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*s >> 33) as u32
}

fn pq2_0(rows: usize, k: usize, seed: u64) -> Vec<BlockPq2_0> {
    let mut s = seed;
    (0..rows * k / QK_PQ2_0)
        .map(|_| {
            let codes = std::array::from_fn(|_| (lcg(&mut s) % 3) as u8);
            BlockPq2_0::from_codes(&codes, f32_to_f16((lcg(&mut s) % 100) as f32 / 1000.0))
        })
        .collect()
}

fn columns(k: usize, n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..k * n)
        .map(|_| lcg(&mut s) as f32 / u32::MAX as f32 - 0.5)
        .collect()
}

fn paths() -> Vec<&'static Kernels> {
    Isa::available()
        .into_iter()
        .map(|i| Kernels::for_isa(i).expect("available"))
        .collect()
}

/// gemv (T2P) and the stock vec_dot per row, on an L2-sized and an L3-sized matrix.
fn gemv(c: &mut Criterion) {
    for (rows, k) in [(1024, 1024), (4096, 14336)] {
        let pq = pq2_0(rows, k, 1);
        let w = T2pMatrix::from_pq2_0(&pq, rows, k).expect("shape");
        let x = columns(k, 1, 2);
        let act = QuantizedBatch::new(&x, k, 1, t2p::matmul::ActQuant::Q8K).expect("shape");
        let mut y = vec![BlockQ8K::default(); k / QK_K];
        quantize_row_q8k(&x, &mut y);
        let mut out = vec![0.0f32; rows];
        let mut g = c.benchmark_group(format!("gemv_{rows}x{k}"));
        g.throughput(Throughput::Bytes(w.size_bytes() as u64));
        for kern in paths() {
            g.bench_function(BenchmarkId::new("t2p", kern.isa()), |b| {
                b.iter(|| {
                    let plan = MatmulPlan::for_batch(&w, &act).expect("shape");
                    plan.compute(kern, w.blocks(), act.work(), 0..rows, &mut out, rows)
                        .expect("shape")
                })
            });
            if kern.isa() == Isa::Scalar && k > 1024 {
                continue; // the scalar stock loop takes ~0.1 s here
            }
            let nb = k / QK_PQ2_0;
            g.bench_function(BenchmarkId::new("stock", kern.isa()), |b| {
                b.iter(|| {
                    for (r, o) in out.iter_mut().enumerate() {
                        *o = kern.vec_dot_stock(&pq[r * nb..(r + 1) * nb], &y);
                    }
                    black_box(&out);
                })
            });
        }
        g.finish();
    }
}

/// gemm on 4 and 64 columns (single thread), with `q8_K` and `q8_0` activations.
fn gemm(c: &mut Criterion) {
    use t2p::matmul::ActQuant;
    let (rows, k) = (1024, 5120);
    let w = T2pMatrix::from_pq2_0(&pq2_0(rows, k, 3), rows, k).expect("shape");
    for (n, quant) in [4usize, 64]
        .into_iter()
        .flat_map(|n| [(n, ActQuant::Q8K), (n, ActQuant::Q8_0)])
    {
        let act = QuantizedBatch::new(&columns(k, n, 4), k, n, quant).expect("shape");
        let mut out = vec![0.0f32; rows * n];
        let mut g = c.benchmark_group(format!("gemm_{rows}x{k}x{n}_{}", quant.name()));
        g.throughput(Throughput::Elements((rows * k * n) as u64));
        matmul_on_vector_paths(&mut g, &w, &act, &mut out);
        g.finish();
    }
}

/// The `q8_0` gemv of a 1 MiB matrix (2048 x 2048, Bonsai 1.7B's attention output) that stays
/// in L2 across iterations on one thread: the kernel's instruction cost without memory's, for
/// A/B runs of its decode and fold.
fn gemv_in_l2(c: &mut Criterion) {
    let (rows, k) = (2048, 2048);
    let w = T2pMatrix::from_pq2_0(&pq2_0(rows, k, 9), rows, k).expect("shape");
    let act =
        QuantizedBatch::new(&columns(k, 1, 10), k, 1, t2p::matmul::ActQuant::Q8_0).expect("shape");
    let mut out = vec![0.0f32; rows];
    let mut g = c.benchmark_group(format!("gemv_{rows}x{k}_q8_0_in_l2"));
    g.throughput(Throughput::Bytes(w.size_bytes() as u64));
    matmul_on_vector_paths(&mut g, &w, &act, &mut out);
    g.finish();
}

/// One single-threaded benchmark of `w` times `act` per vector path, named `t2p/PATH`.
fn matmul_on_vector_paths(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    w: &T2pMatrix,
    act: &QuantizedBatch,
    out: &mut [f32],
) {
    let rows = w.rows();
    for kern in paths().into_iter().filter(|k| k.isa() != Isa::Scalar) {
        g.bench_function(BenchmarkId::new("t2p", kern.isa()), |b| {
            b.iter(|| {
                let plan = MatmulPlan::for_batch(w, act).expect("shape");
                plan.compute(kern, w.blocks(), act.work(), 0..rows, out, rows)
                    .expect("shape")
            })
        });
    }
}

/// A decode step's gemv from memory: a 71 MB matrix and Bonsai 1.7B's LM head (83 MB, the
/// model's k = 2048), far past the caches, both activation types, on one thread and on every
/// thread of the pool. What `libt2p bench` reports against the ceiling; here for A/B runs of
/// the kernels' streaming (prefetch distance, hints).
fn gemv_memory(c: &mut Criterion) {
    use t2p::matmul::ActQuant;
    let kern = t2p::kernels::active();
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (rows, k) in [(32768, 8192), (151936, 2048)] {
        let w = T2pMatrix::from_pq2_0(&pq2_0(rows, k, 7), rows, k).expect("shape");
        let mut out = vec![0.0f32; rows];
        for quant in [ActQuant::Q8_0, ActQuant::Q8K] {
            let act = QuantizedBatch::new(&columns(k, 1, 8), k, 1, quant).expect("shape");
            let mut g = c.benchmark_group(format!("gemv_{rows}x{k}_{}", quant.name()));
            g.throughput(Throughput::Bytes(w.size_bytes() as u64));
            for threads in [1, all] {
                let pool = ThreadPool::new(threads);
                g.bench_function(BenchmarkId::new(kern.isa().to_string(), threads), |b| {
                    b.iter(|| {
                        matmul_parallel(&pool, kern, &w, &act, &mut out, rows).expect("shape")
                    })
                });
            }
            g.finish();
        }
    }
}

/// Narrow gemms from memory: 1, 2, 3, 4 and 8 `q8_0` columns of the 71 MB matrix on every thread
/// (a decode, and what verifying drafts or a server batch of decodes multiplies), as bytes of
/// weights per second: a narrow gemm should stream as fast as the gemv.
fn gemm_narrow(c: &mut Criterion) {
    use t2p::matmul::ActQuant;
    let kern = t2p::kernels::active();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = ThreadPool::new(threads);
    let (rows, k) = (32768, 8192);
    let w = T2pMatrix::from_pq2_0(&pq2_0(rows, k, 7), rows, k).expect("shape");
    let mut g = c.benchmark_group(format!("gemm_{rows}x{k}_narrow_q8_0"));
    g.throughput(Throughput::Bytes(w.size_bytes() as u64));
    for n in [1usize, 2, 3, 4, 8] {
        let act = QuantizedBatch::new(&columns(k, n, 8), k, n, ActQuant::Q8_0).expect("shape");
        let mut out = vec![0.0f32; rows * n];
        g.bench_function(BenchmarkId::new(kern.isa().to_string(), n), |b| {
            b.iter(|| matmul_parallel(&pool, kern, &w, &act, &mut out, rows).expect("shape"))
        });
    }
    g.finish();
}

/// Narrow gemms in L2: 1, 2, 3, 4 and 8 `q8_0` columns of a 0.5 MB matrix on one thread, per
/// vector path. From memory a narrow pass waits on the weights; here it shows its instructions.
fn gemm_narrow_in_l2(c: &mut Criterion) {
    use t2p::matmul::ActQuant;
    let (rows, k) = (1024, 2048);
    let w = T2pMatrix::from_pq2_0(&pq2_0(rows, k, 11), rows, k).expect("shape");
    let mut g = c.benchmark_group(format!("gemm_{rows}x{k}_narrow_q8_0_in_l2"));
    g.throughput(Throughput::Bytes(w.size_bytes() as u64));
    for n in [1usize, 2, 3, 4, 8] {
        let act = QuantizedBatch::new(&columns(k, n, 12), k, n, ActQuant::Q8_0).expect("shape");
        let mut out = vec![0.0f32; rows * n];
        for kern in paths().into_iter().filter(|k| k.isa() != Isa::Scalar) {
            g.bench_function(BenchmarkId::new(kern.isa().to_string(), n), |b| {
                b.iter(|| {
                    let plan = MatmulPlan::for_batch(&w, &act).expect("shape");
                    plan.compute(kern, w.blocks(), act.work(), 0..rows, &mut out, rows)
                        .expect("shape")
                })
            });
        }
    }
    g.finish();
}

/// The pool's per-call overhead and a small parallel gemv.
fn pool(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = ThreadPool::new(threads);
    let mut g = c.benchmark_group("pool");
    g.bench_function("empty_call", |b| {
        b.iter(|| {
            pool.run(threads, |i| {
                black_box(i);
            })
        })
    });
    let (rows, k) = (4096, 4096);
    let w = T2pMatrix::from_pq2_0(&pq2_0(rows, k, 5), rows, k).expect("shape");
    let act =
        QuantizedBatch::new(&columns(k, 1, 6), k, 1, t2p::matmul::ActQuant::Q8K).expect("shape");
    let mut out = vec![0.0f32; rows];
    let kern = t2p::kernels::active();
    g.throughput(Throughput::Bytes(w.size_bytes() as u64));
    g.bench_function("gemv_4096x4096_parallel", |b| {
        b.iter(|| matmul_parallel(&pool, kern, &w, &act, &mut out, rows).expect("shape"))
    });
    g.finish();
}

/// Attention of a prompt (512 columns of one sequence) and of one deep decode step (4096
/// cached positions), Bonsai 1.7B's head shape (16 query heads over 8 KV heads of 128), on
/// two threads: what `libt2p bench`'s attention phase spends per layer.
fn attention(c: &mut Criterion) {
    use t2p::runner::model::{AttnShape, Exec, KvCache, attend};
    let s = AttnShape {
        n_head: 16,
        n_head_kv: 8,
        head_dim: 128,
        scale: 1.0 / (128f32).sqrt(),
    };
    let kv_dim = s.n_head_kv * s.head_dim;
    let q_dim = s.n_head * s.head_dim;
    let mut g = c.benchmark_group("attention");
    // The deep decode cycles through the 1.7B's 28 layers (470 MB of cache), so that its rows
    // come from memory as a model's do, not from a cache level (8 layers, 134 MB, partly stayed
    // in a Xeon's L3 and ran 35 % faster); its one-layer twin (16.8 MB) stays in L3 and times
    // the loops' instructions alone.
    for (name, ctx, cols, layers) in [
        ("prompt512", 512usize, 512usize, 1usize),
        ("decode_at4096", 4096, 1, 28),
        ("decode_at4096_in_l3", 4096, 1, 1),
    ] {
        let mut cache = KvCache::new(layers, ctx, s.n_head_kv, s.head_dim);
        cache.reserve(ctx);
        for layer in 0..layers {
            for p in 0..ctx {
                let k = columns(kv_dim, 1, 3 + p as u64);
                let v = columns(kv_dim, 1, 7 + p as u64);
                cache.store(layer, p, &k, &v);
            }
        }
        let q = columns(q_dim, cols, 5);
        let mut out = vec![0.0f32; q_dim * cols];
        for kern in paths() {
            let mut exec = Exec::new(2);
            exec.kern = kern;
            let mut layer = 0;
            g.bench_function(BenchmarkId::new(name, kern.isa()), |b| {
                b.iter(|| {
                    layer = (layer + 1) % layers;
                    let at = |c| (&cache, ctx - cols + c);
                    attend(&exec, s, black_box(&q), layer, at, &mut out);
                })
            });
        }
    }
    g.finish();
}

/// DeltaNet's recurrence on one value head of the 27B's shape (128 x 128 state, 32 tokens:
/// a pp32 batch), one thread: instructions and latency, the state staying in L1 and L2.
fn delta_rule(c: &mut Criterion) {
    use t2p::kernels::delta::DeltaSeq;
    let (dk, dv, n) = (128usize, 128usize, 32usize);
    let stride = 2 * dk + dv;
    // Unit-length queries and keys, as the model's l2 norm leaves them: the state stays bounded.
    let mut rows = columns(stride, n, 11);
    for qk in rows
        .chunks_exact_mut(stride)
        .flat_map(|r| r[..2 * dk].chunks_exact_mut(dk))
    {
        let norm = qk.iter().map(|x| x * x).sum::<f32>().sqrt();
        qk.iter_mut().for_each(|x| *x /= norm);
    }
    let gates: Vec<f32> = columns(2, n, 12).iter().map(|g| 0.5 + g.abs()).collect();
    let seq = DeltaSeq {
        rows: &rows,
        stride,
        dk,
        q: 0,
        k: dk,
        v: 2 * dk,
        decay: &gates,
        beta: &gates[1..],
        gate_stride: 2,
        scale: 1.0 / (dv as f32).sqrt(),
    };
    let mut state = columns(dk, dv, 13);
    let mut out = vec![0.0f32; n * dv];
    let mut g = c.benchmark_group("delta_rule");
    g.throughput(Throughput::Elements((n * dk * dv) as u64));
    for kern in paths() {
        g.bench_function(BenchmarkId::new("head128_x32", kern.isa()), |b| {
            b.iter(|| kern.delta_rule(&mut state, black_box(&seq), &mut out))
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    gemv,
    gemv_in_l2,
    gemv_memory,
    gemm_narrow,
    gemm_narrow_in_l2,
    gemm,
    pool,
    attention,
    delta_rule
);
criterion_main!(benches);
