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

/// gemm on 4 and 64 columns (single thread).
fn gemm(c: &mut Criterion) {
    let (rows, k) = (1024, 5120);
    let w = T2pMatrix::from_pq2_0(&pq2_0(rows, k, 3), rows, k).expect("shape");
    for n in [4usize, 64] {
        let act = QuantizedBatch::new(&columns(k, n, 4), k, n, t2p::matmul::ActQuant::Q8K)
            .expect("shape");
        let mut out = vec![0.0f32; rows * n];
        let mut g = c.benchmark_group(format!("gemm_{rows}x{k}x{n}"));
        g.throughput(Throughput::Elements((rows * k * n) as u64));
        for kern in paths().into_iter().filter(|k| k.isa() != Isa::Scalar) {
            g.bench_function(BenchmarkId::new("t2p", kern.isa()), |b| {
                b.iter(|| {
                    let plan = MatmulPlan::for_batch(&w, &act).expect("shape");
                    plan.compute(kern, w.blocks(), act.work(), 0..rows, &mut out, rows)
                        .expect("shape")
                })
            });
        }
        g.finish();
    }
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

criterion_group!(benches, gemv, gemm, pool);
criterion_main!(benches);
