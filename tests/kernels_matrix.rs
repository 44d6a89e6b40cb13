//! The seed's integer-oracle matrix, run on every ISA path this CPU supports: batch widths 1-5,
//! 7, 8; rows 4, 8, 12; inner sizes 256, 512, 1024; all zeros, constants, extreme activations,
//! code 3; rejected shapes. Outputs must be bit-identical to the scalar oracle, for `q8_K`
//! activations and for `q8_0` ones (a scale per 32 values).

mod common;

use common::*;
use t2p::format::{BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockT2p};
use t2p::kernels::Kernels;
use t2p::matmul::{ActQuant, MatmulPlan, QuantizedBatch};

/// `q8_K x4` tiles of `ncols` q8_K columns, the last one zero-padded (the gemm kernel's operand).
fn tiles(cols: &[t2p::format::BlockQ8K], k: usize, ncols: usize) -> Vec<t2p::format::BlockQ8Kx4> {
    let per = k / 256;
    let zero = t2p::format::BlockQ8K::default();
    let mut out = Vec::new();
    for t in 0..ncols.div_ceil(4) {
        for b in 0..per {
            let c = |i: usize| {
                if 4 * t + i < ncols {
                    &cols[(4 * t + i) * per + b]
                } else {
                    &zero
                }
            };
            out.push(t2p::format::interleave_q8k_x4([c(0), c(1), c(2), c(3)]));
        }
    }
    out
}

/// Runs the driver on rows `range` of column-strided `out` (`ld`) from prepared q8_K columns.
#[allow(clippy::too_many_arguments)]
fn drive(
    kern: &Kernels,
    w: &[BlockT2p],
    rows: usize,
    k: usize,
    batch: &QuantizedBatch,
    out: &mut [f32],
    ld: usize,
    range: std::ops::Range<usize>,
) -> t2p::Result<()> {
    let plan = MatmulPlan::new(rows, k, batch.ncols(), batch.act())?;
    let n = batch.ncols();
    let need = (n - 1) * ld + range.end;
    let out = out
        .get_mut(range.start..need.max(range.start))
        .ok_or_else(|| t2p::Error::Shape("output too short".into()))?;
    plan.compute(kern, w, batch.work(), range, out, ld)
}

fn check_case(
    rows: usize,
    k: usize,
    ncols: usize,
    codes: Codes,
    scales: Scales,
    acts: Acts,
    seed: u64,
) {
    let mut rng = Lcg(seed);
    let pq = ternary_tensor::<BlockPq2_0>(rows, k, codes, scales, &mut rng);
    let w = repacked_pq2_0(&pq, rows, k);
    let cols = act_columns::<BlockQ8K>(k, ncols, acts, matches!(scales, Scales::One), &mut rng);
    let batch = QuantizedBatch::from_q8k_columns(&cols, k, ncols).unwrap();
    // A stride larger than the rows, to catch stride bugs.
    let written = Written::with_gap(rows, ncols, 4, f32::from_bits(0x7fc0_1234));
    let ld = written.ld;
    let run = |kern| {
        let mut out = written.buffer();
        drive(kern, &w, rows, k, &batch, &mut out, ld, 0..rows).unwrap();
        out
    };
    let want = run(oracle());
    // The oracle must have written every real output and nothing in the stride gaps.
    written.assert_all_written(&want);
    written.assert_untouched(&want);
    if matches!(scales, Scales::One) {
        // Scales of 1: outputs are the exact integer sums, checked against a direct i64 sum.
        for c in 0..ncols {
            for r in 0..rows {
                let exact: i64 = (0..k)
                    .map(|i| {
                        let b = &pq[r * k / 128 + i / 128];
                        (b.code(i % 128) as i64 - 1)
                            * cols[c * k / 256 + i / 256].qs[i % 256] as i64
                    })
                    .sum();
                assert_eq!(
                    want[c * ld + r] as i64,
                    exact,
                    "oracle integer sum row {r} col {c}"
                );
            }
        }
    }
    for kern in paths_under_test() {
        let what = format!(
            "{} rows={rows} k={k} ncols={ncols} {codes:?} {scales:?} {acts:?}",
            kern.isa()
        );
        assert_bits_eq(&run(kern), &want, &what);
        // Every sub-range of whole row groups gives the same values (ggml splits rows this way).
        if rows >= 8 {
            let mut out = written.buffer();
            for range in [0..4, 4..rows] {
                drive(kern, &w, rows, k, &batch, &mut out, ld, range).unwrap();
            }
            assert_bits_eq(&out, &want, &format!("{what} split rows"));
        }
    }
    check_q8_0(&pq, &w, rows, k, ncols, scales, acts, &mut rng);
}

/// The `q8_0` kernels on the same weights: the oracle writes every real output and only those,
/// equals the exact integer sums with unit scales, gives each gemm column the gemv's bits, and
/// every path matches it bit for bit.
#[allow(clippy::too_many_arguments)]
fn check_q8_0(
    pq: &[t2p::format::BlockPq2_0],
    w: &[BlockT2p],
    rows: usize,
    k: usize,
    ncols: usize,
    scales: Scales,
    acts: Acts,
    rng: &mut Lcg,
) {
    let nb = k / 128;
    let cols = act_columns::<BlockQ8_0Quad>(k, ncols, acts, matches!(scales, Scales::One), rng);
    let written = Written::with_gap(rows, ncols, 4, f32::from_bits(0x7fc0_4321));
    let run = |kern: &Kernels| written.q8_0(kern, w, &cols);
    let want = run(oracle());
    written.assert_all_written(&want);
    written.assert_untouched(&want);
    for c in 0..ncols {
        let col = written.column(&want, c);
        let mut alone = vec![0.0; rows];
        oracle().gemv_q8_0(w, nb, &cols[c * nb..(c + 1) * nb], &mut alone);
        assert_bits_eq(&col[..rows], &alone, "q8_0 gemm column vs gemv");
        if matches!(scales, Scales::One) {
            for (r, &got) in col[..rows].iter().enumerate() {
                let exact: i64 = (0..k)
                    .map(|i| {
                        let b = &pq[r * nb + i / 128];
                        (b.code(i % 128) as i64 - 1) * cols[c * nb + i / 128].qs[i % 128] as i64
                    })
                    .sum();
                assert_eq!(got as i64, exact, "q8_0 oracle integer sum row {r} col {c}");
            }
        }
    }
    let what = format!("q8_0 rows={rows} k={k} ncols={ncols} {scales:?} {acts:?}");
    assert_every_path(&want, &what, run);
}

#[test]
fn seed_matrix_random_codes_and_scales() {
    // 16 and 33 columns, 36 rows: whole and short AMX tiles where that path runs.
    const WIDTHS: [usize; 11] = [1, 2, 3, 4, 5, 7, 8, 9, 11, 16, 33];
    sweep_random_shapes(1, &WIDTHS, &[4, 8, 12, 36], &[256, 512, 1024], check_case);
}

/// Long rows: past the 256 blocks the AVX2 q8_K gemv holds on the stack at once (its sums
/// resume across chunks) and past 64 blocks, and still bit for bit with the oracle.
#[test]
fn long_rows_cross_the_gemv_stack_chunks() {
    for (k, seed) in [(8192 + 256, 91), (32768 + 512, 92)] {
        for ncols in [1, 3] {
            for acts in [Acts::Random, Acts::Extreme] {
                check_case(8, k, ncols, Codes::Random, Scales::Random, acts, seed);
            }
        }
    }
}

#[test]
fn exact_integer_sums_with_unit_scales() {
    // 19 columns: AMX tiles (16 and a short one) where that path runs.
    for ncols in [1, 3, 4, 5, 7, 8, 13, 19] {
        for acts in [
            Acts::Random,
            Acts::Extreme,
            Acts::Min,
            Acts::Constant(127),
            Acts::Constant(-1),
        ] {
            check_case(8, 512, ncols, Codes::Random, Scales::One, acts, 7);
        }
    }
}

#[test]
fn code_three_everywhere_with_extreme_activations() {
    for ncols in [1, 2, 4, 5, 6, 8, 9, 16] {
        for acts in [
            Acts::Constant(127),
            Acts::Constant(-127),
            Acts::Min,
            Acts::Extreme,
        ] {
            check_case(4, 1024, ncols, Codes::Constant(3), Scales::One, acts, 11);
        }
    }
}

#[test]
fn zeros_and_constants() {
    for ncols in [1, 2, 3, 4, 7, 8] {
        check_case(
            8,
            256,
            ncols,
            Codes::Constant(1),
            Scales::Random,
            Acts::Random,
            3,
        ); // all-zero weights
        check_case(8, 256, ncols, Codes::Random, Scales::Random, Acts::Zero, 4); // all-zero activations
        check_case(
            8,
            256,
            ncols,
            Codes::Constant(0),
            Scales::One,
            Acts::Constant(5),
            5,
        );
        check_case(
            8,
            256,
            ncols,
            Codes::Constant(2),
            Scales::One,
            Acts::Constant(-7),
            6,
        );
        check_case(
            12,
            512,
            ncols,
            Codes::Ternary,
            Scales::Random,
            Acts::Random,
            8,
        );
    }
}

#[test]
fn stock_vec_dot_matches_t2p_gemv() {
    for kern in paths_under_test() {
        for k in [256, 512, 1024] {
            let mut rng = Lcg(k as u64);
            let pq = ternary_tensor::<BlockPq2_0>(4, k, Codes::Random, Scales::Random, &mut rng);
            let y = act_columns::<BlockQ8K>(k, 1, Acts::Random, false, &mut rng);
            let w = repacked_pq2_0(&pq, 4, k);
            let mut want = vec![0.0; 4];
            let batch = QuantizedBatch::from_q8k_columns(&y, k, 1).unwrap();
            drive(oracle(), &w, 4, k, &batch, &mut want, 4, 0..4).unwrap();
            let got: Vec<f32> = (0..4)
                .map(|r| kern.vec_dot_stock(&pq[r * k / 128..(r + 1) * k / 128], &y))
                .collect();
            assert_bits_eq(&got, &want, &format!("{} stock vec_dot k={k}", kern.isa()));
        }
    }
}

/// Shapes the T2P layout now holds: rows that are not a multiple of 4 (a padded last group)
/// and k a multiple of 128 but not of 256 (q8_0 activations), through the driver, on every
/// path, against the oracle and (unit scales) the exact integer sums.
#[test]
fn odd_rows_and_k_of_128_through_the_driver() {
    for (rows, k) in [(6, 384), (13, 640), (1, 128), (7, 512)] {
        for ncols in 1..=9 {
            let mut rng = Lcg((rows * 1000 + k + ncols) as u64);
            let pq = ternary_tensor::<BlockPq2_0>(rows, k, Codes::Random, Scales::One, &mut rng);
            let w = t2p::matmul::T2pMatrix::from_pq2_0(&pq, rows, k).unwrap();
            let x: Vec<f32> = (0..k * ncols)
                .map(|i| ((i * 7919 + rows) % 255) as f32 - 127.0)
                .collect();
            for act in [ActQuant::Q8K, ActQuant::Q8_0] {
                let batch = QuantizedBatch::new(&x, k, ncols, act).unwrap();
                let want = t2p::matmul::matmul(oracle(), &w, &batch).unwrap();
                if batch.act() == ActQuant::Q8_0 {
                    // Unit weight scales and |x| <= 127 with amax 127 per 32: d = 1 exactly
                    // unless a block's amax is below 127; compare against the quads' own values.
                    let q = batch.q8_0_blocks();
                    for c in 0..ncols {
                        for r in 0..rows {
                            let exact: f64 = (0..k)
                                .map(|i| {
                                    let b = &q[c * (k / 128) + i / 128];
                                    (pq[r * k / 128 + i / 128].code(i % 128) as f64 - 1.0)
                                        * b.qs[i % 128] as f64
                                        * b.d[(i % 128) / 32] as f64
                                })
                                .sum();
                            let got = want[c * rows + r] as f64;
                            assert!(
                                (got - exact).abs() <= 1e-3 * exact.abs().max(1.0),
                                "{rows}x{k} c{c} r{r}"
                            );
                        }
                    }
                }
                for kern in paths_under_test() {
                    let pool = t2p::pool::ThreadPool::new(2);
                    let mut out = vec![f32::NAN; rows * ncols];
                    t2p::matmul::matmul_parallel(&pool, kern, &w, &batch, &mut out, rows).unwrap();
                    assert_bits_eq(
                        &out,
                        &want,
                        &format!("{} {rows}x{k} x{ncols} {act:?}", kern.isa()),
                    );
                }
            }
        }
    }
}

#[test]
fn shapes_that_must_be_rejected() {
    let mut rng = Lcg(9);
    let pq = ternary_tensor::<BlockPq2_0>(8, 512, Codes::Random, Scales::Random, &mut rng);
    let w = repacked_pq2_0(&pq, 8, 512);
    let y = QuantizedBatch::from_q8k_columns(
        &act_columns::<BlockQ8K>(512, 1, Acts::Random, false, &mut rng),
        512,
        1,
    )
    .unwrap();
    let x4 = QuantizedBatch::from_q8k_columns(
        &act_columns::<BlockQ8K>(512, 3, Acts::Random, false, &mut rng),
        512,
        3,
    )
    .unwrap();
    let y384 = QuantizedBatch::new(&[0.5; 384], 384, 1, ActQuant::Q8_0).unwrap();
    for kern in paths_under_test() {
        let mut out = vec![0.0; 64];
        let m = t2p::matmul::T2pMatrix::from_t2p_blocks(w.clone(), 8, 512).unwrap();
        assert!(
            MatmulPlan::for_batch(&m, &y384).is_err(),
            "activations of another k"
        );
        assert!(
            drive(kern, &w, 8, 512, &y, &mut out, 8, 2..8).is_err(),
            "range not on a row group"
        );
        assert!(
            drive(kern, &w, 8, 512, &y, &mut out, 8, 0..12).is_err(),
            "range past the rows"
        );
        assert!(
            drive(kern, &w[..7], 8, 512, &y, &mut out, 8, 0..8).is_err(),
            "short weights"
        );
        assert!(
            drive(kern, &w, 8, 512, &y, &mut out[..7], 8, 0..8).is_err(),
            "short output"
        );
        assert!(
            drive(kern, &w, 8, 512, &x4, &mut out[..19], 8, 0..8).is_err(),
            "short gemm output"
        );
        assert!(
            drive(kern, &w, 8, 512, &x4, &mut out, 4, 0..8).is_err(),
            "ld below rows"
        );
        let plan = MatmulPlan::new(8, 512, 1, ActQuant::Q8K).unwrap();
        assert!(
            plan.compute(kern, &w, &y.work()[1..], 0..8, &mut out[..8], 8)
                .is_err(),
            "short activations"
        );
        assert!(
            QuantizedBatch::from_q8k_columns(&[], 512, 1).is_err(),
            "no activation blocks"
        );
        assert!(
            QuantizedBatch::new(&[0.5; 512], 512, 0, ActQuant::Q8K).is_err(),
            "zero columns"
        );
        assert!(
            out.iter().all(|&v| v == 0.0),
            "a rejected call wrote output"
        );
    }
}

/// Every width of the zero-padded last tile (ncols 1..=9: 1, 2, 3 or no columns left over a
/// 4-column tile, 1..=7 over an 8-column one; 13 and 16 for a second 8-column tile, partial and
/// full) through the gemm entry points themselves (ncols 1 included, which the driver would
/// send to the gemv), `q8_0` and `q8_K`, with random codes (3 included), unit scales and
/// exact integer sums checked, then random scales; nothing outside the real columns is written.
#[test]
fn gemm_every_leftover_width() {
    let (rows, k) = (8, 512);
    let nb = k / 128;
    let sentinel = f32::from_bits(0x7fc0_5678);
    for ncols in (1..=9).chain([13, 16]) {
        for (scales, acts) in [
            (Scales::One, Acts::Extreme),
            (Scales::One, Acts::Min),
            (Scales::Random, Acts::Random),
        ] {
            let mut rng = Lcg(100 + ncols as u64);
            let pq = ternary_tensor::<BlockPq2_0>(rows, k, Codes::Random, scales, &mut rng);
            let w = repacked_pq2_0(&pq, rows, k);
            let one = matches!(scales, Scales::One);
            let q0 = act_columns::<BlockQ8_0Quad>(k, ncols, acts, one, &mut rng);
            let qk = act_columns::<BlockQ8K>(k, ncols, acts, one, &mut rng);
            let x4 = tiles(&qk, k, ncols);
            let written = Written::with_gap(rows, ncols, 4, sentinel);
            let run = |kern: &Kernels, q8_0: bool| {
                if q8_0 {
                    written.gemm_q8_0(kern, &w, &q0)
                } else {
                    written.q8k(kern, &w, None, &x4)
                }
            };
            for q8_0 in [true, false] {
                let want = run(oracle(), q8_0);
                written.assert_untouched(&want);
                for c in 0..ncols {
                    for (r, &got) in written.column(&want, c)[..rows].iter().enumerate() {
                        if one {
                            let exact: i64 = (0..k)
                                .map(|i| {
                                    let y = if q8_0 {
                                        q0[c * nb + i / 128].qs[i % 128]
                                    } else {
                                        qk[c * k / 256 + i / 256].qs[i % 256]
                                    };
                                    (pq[r * nb + i / 128].code(i % 128) as i64 - 1) * y as i64
                                })
                                .sum();
                            assert_eq!(got as i64, exact, "oracle row {r} col {c} q8_0={q8_0}");
                        } else {
                            assert_ne!(got.to_bits(), sentinel.to_bits());
                        }
                    }
                }
                let what = format!("gemm ncols={ncols} q8_0={q8_0} {acts:?}");
                assert_every_path(&want, &what, |kern| run(kern, q8_0));
            }
        }
    }
}
