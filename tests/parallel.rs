//! The parallel driver and the pool: `matmul_parallel` must equal the single-threaded driver bit
//! for bit, for several thread counts, batch widths, strides and uneven row splits.

mod common;

use common::*;
use t2p::format::BlockPq2_0;
use t2p::matmul::{
    ActQuant, QuantizedBatch, T2pMatrix, T2pProduct, matmul, matmul_parallel, run_products,
};
use t2p::pool::ThreadPool;

#[test]
fn parallel_equals_single_threaded() {
    let mut rng = Lcg(42);
    let pools: Vec<ThreadPool> = [1, 2, 3, 4].into_iter().map(ThreadPool::new).collect();
    // 36 rows = 9 row groups: chunks do not divide evenly for 2, 3 or 4 threads.
    for (rows, k) in [(4, 256), (36, 512), (128, 1024)] {
        let pq = ternary_tensor::<BlockPq2_0>(rows, k, Codes::Random, Scales::Random, &mut rng);
        let w = T2pMatrix::from_pq2_0(&pq, rows, k).unwrap();
        // From 16 columns a thread a step splits its columns, not its rows: 37 and 69 leave a
        // short last chunk, and 69 a plain q8_K column.
        let acts = [ActQuant::Q8K, ActQuant::Q8_0];
        let widths = [1, 2, 3, 4, 5, 8, 13, 32, 37, 69];
        for (ncols, act) in widths.into_iter().flat_map(|n| acts.map(|a| (n, a))) {
            let x: Vec<f32> = (0..k * ncols)
                .map(|_| rng.next() as f32 / u32::MAX as f32 - 0.5)
                .collect();
            let act = QuantizedBatch::new(&x, k, ncols, act).unwrap();
            for kern in paths_under_test() {
                let want = matmul(kern, &w, &act).unwrap();
                for pool in &pools {
                    for ld in [rows, rows + 3] {
                        let sentinel = f32::from_bits(0x7fc0_4321);
                        let mut out = vec![sentinel; (ncols - 1) * ld + rows];
                        matmul_parallel(pool, kern, &w, &act, &mut out, ld).unwrap();
                        let got: Vec<f32> = (0..ncols)
                            .flat_map(|c| out[c * ld..c * ld + rows].to_vec())
                            .collect();
                        let what = format!(
                            "{} {rows}x{k}x{ncols} {:?} threads {} ld {ld}",
                            kern.isa(),
                            act.act(),
                            pool.threads()
                        );
                        assert_bits_eq(&got, &want, &what);
                        for c in 0..ncols - 1 {
                            assert!(
                                out[c * ld + rows..(c + 1) * ld]
                                    .iter()
                                    .all(|v| v.to_bits() == sentinel.to_bits()),
                                "{what}: stride gap written"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn parallel_rejects_bad_shapes() {
    let mut rng = Lcg(7);
    let pq = ternary_tensor::<BlockPq2_0>(8, 256, Codes::Random, Scales::One, &mut rng);
    let w = T2pMatrix::from_pq2_0(&pq, 8, 256).unwrap();
    let pool = ThreadPool::new(2);
    let kern = oracle();
    let act = QuantizedBatch::new(&vec![0.5; 512], 256, 2, ActQuant::Q8K).unwrap();
    let mut short = vec![0.0; 15];
    assert!(matmul_parallel(&pool, kern, &w, &act, &mut short, 8).is_err());
    let mut out = vec![0.0; 16];
    assert!(matmul_parallel(&pool, kern, &w, &act, &mut out, 4).is_err());
    let other = QuantizedBatch::new(&vec![0.5; 512], 512, 1, ActQuant::Q8K).unwrap();
    assert!(matmul_parallel(&pool, kern, &w, &other, &mut out, 8).is_err());
    matmul_parallel(&pool, kern, &w, &act, &mut out, 8).unwrap();
}

/// One step of more jobs than one pool call takes (`run_tiled` runs them 8 at a time), some
/// without a product, gives every product its single-threaded bits and leaves the others alone.
#[test]
fn a_step_of_many_jobs_equals_each_product_alone() {
    let mut rng = Lcg(11);
    let k = 512;
    let shapes: Vec<Option<usize>> = (0..11)
        .map(|j| (j % 4 != 3).then_some(4 * (j + 1) + 8 * (j % 3)))
        .collect();
    let weights: Vec<Option<T2pMatrix>> = shapes
        .iter()
        .map(|rows| {
            rows.map(|rows| {
                let pq =
                    ternary_tensor::<BlockPq2_0>(rows, k, Codes::Random, Scales::Random, &mut rng);
                T2pMatrix::from_pq2_0(&pq, rows, k).unwrap()
            })
        })
        .collect();
    let sentinel = f32::from_bits(0x7fc0_1234);
    for ncols in [2, 5, 9] {
        let x: Vec<f32> = (0..k * ncols)
            .map(|_| rng.next() as f32 / u32::MAX as f32 - 0.5)
            .collect();
        for act in [ActQuant::Q8K, ActQuant::Q8_0] {
            let batch = QuantizedBatch::new(&x, k, ncols, act).unwrap();
            for kern in paths_under_test() {
                for threads in [2, 3] {
                    let pool = ThreadPool::new(threads);
                    let mut outs: Vec<Vec<f32>> = shapes
                        .iter()
                        .map(|rows| vec![sentinel; rows.unwrap_or(8) * ncols])
                        .collect();
                    let mut jobs: Vec<(Option<T2pProduct>, &mut [f32])> = weights
                        .iter()
                        .zip(&mut outs)
                        .map(|(w, out)| {
                            let p = w.as_ref().map(|w| T2pProduct::new(w, &batch).unwrap());
                            (p, &mut out[..])
                        })
                        .collect();
                    run_products(&pool, kern, &mut jobs, |p| Ok(*p), false).unwrap();
                    for (j, (w, out)) in weights.iter().zip(&outs).enumerate() {
                        let what =
                            format!("{} job {j} {ncols} {act:?} threads {threads}", kern.isa());
                        match w {
                            Some(w) => {
                                assert_bits_eq(out, &matmul(kern, w, &batch).unwrap(), &what)
                            }
                            None => assert!(
                                out.iter().all(|v| v.to_bits() == sentinel.to_bits()),
                                "{what}: a job without a product was written"
                            ),
                        }
                    }
                }
            }
        }
    }
}
