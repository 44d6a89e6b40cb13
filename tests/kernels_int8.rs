//! BitNet matrices (I2_S, IQ2_BN) in T2P with per-token int8 activations, on every ISA path
//! this CPU runs (the gemv and every gemm width through the driver): bit-identical to the
//! scalar reference `format::i2s::reference_matmul_int8`, with code 3, all-zero blocks,
//! extreme and all-zero activations, rounding ties, padded row groups and every leftover
//! column.

mod common;

use common::*;
use half::f16;
use t2p::format::GgmlType;
use t2p::format::i2s::{
    decode_i2s, decode_iq1bn, decode_iq2bn, encode_i2s, encode_iq1bn, encode_iq2bn,
    reference_matmul_int8,
};
use t2p::kernels::Kernels;
use t2p::matmul::{Int8Acts, Int8Matrix, MatmulPlan};
use t2p::pool::ThreadPool;

/// How the activations are drawn.
#[derive(Clone, Copy, Debug)]
enum X {
    /// Uniform in -2..2.
    Random,
    /// One huge value per column, the rest tiny (most round to 0, the maximum to 127).
    Spike,
    /// Exact rounding ties: multiples of 0.5 / 127 of the column maximum 1.
    Ties,
    /// All zero (the 1e-5 floor of the scale).
    Zero,
}

fn draw_x(x: X, k: usize, ncols: usize, rng: &mut Lcg) -> Vec<f32> {
    (0..k * ncols)
        .map(|i| match x {
            X::Random => (rng.next() % 4001) as f32 / 1000.0 - 2.0,
            X::Spike if i % k == (7 * (i / k)) % k => -3.0e4,
            X::Spike => (rng.next() % 201) as f32 * 1e-3 - 0.1,
            X::Ties if i % k == 0 => 1.0,
            X::Ties => ((rng.next() % 255) as f32 - 127.0) * 0.5 / 127.0,
            X::Zero => 0.0,
        })
        .collect()
}

fn draw_codes(codes: Codes, n: usize, rng: &mut Lcg) -> Vec<u8> {
    (0..n).map(|_| draw_code(codes, rng)).collect()
}

/// Runs `m` on `x` with `kern` through the driver in 3 row chunks, as the model does:
/// per-token int8 quads, the T2P product, the f32 scales.
fn run(kern: &Kernels, m: &Int8Matrix, x: &[f32], ncols: usize) -> Vec<f32> {
    let k = m.k();
    // Quantized over a pool of 3: the vectors spread over threads, each quantized alone.
    let mut acts = Int8Acts::default();
    acts.quantize(&ThreadPool::new(3), x, k, ncols).unwrap();
    let mut out = compute_in_chunks(kern, m.t2p(), acts.batch());
    // The unit-scale gemm (the model's, integer sums where a path has them) gives the q8_0
    // gemm's bits.
    let unit = MatmulPlan::for_batch(m.t2p(), acts.batch())
        .unwrap()
        .with_unit_scales();
    let sums = compute_plan_in_chunks(kern, unit, m.t2p(), acts.batch());
    assert_bits_eq(&sums, &out, &format!("{}: unit-scale gemm", kern.isa()));
    m.apply_scales(acts.scales(), &mut out);
    out
}

/// `m` (repacked from `codes` with `scales`) on the oracle and on every path equals the
/// scalar reference of the definition.
fn check_matrix(m: &Int8Matrix, codes: &[u8], scales: &[f32], x: &[f32], ncols: usize, what: &str) {
    let want = reference_matmul_int8(codes, scales, m.rows(), m.k(), x, ncols).unwrap();
    assert_bits_eq(
        &run(oracle(), m, x, ncols),
        &want,
        &format!("oracle {what}"),
    );
    assert_every_path(&want, what, |kern| run(kern, m, x, ncols));
}

fn check(rows: usize, k: usize, ncols: usize, codes: Codes, x: X, seed: u64) {
    let mut rng = Lcg(seed);
    let c = draw_codes(codes, rows * k, &mut rng);
    let x = draw_x(x, k, ncols, &mut rng);
    let what = format!("rows={rows} k={k} ncols={ncols} {codes:?}");
    // I2_S: one f32 scale, not representable in fp16.
    let scale = 0.0231_f32 + seed as f32 * 1e-7;
    let bytes = encode_i2s(&c, scale).unwrap();
    let mut back = vec![0u8; rows * k];
    assert_eq!(decode_i2s(&bytes, rows * k, &mut back).unwrap(), scale);
    assert_eq!(back, c);
    let m = Int8Matrix::from_bitnet(GgmlType::I2_S, &bytes, rows, k).unwrap();
    check_matrix(&m, &c, &[scale], &x, ncols, &format!("i2_s {what}"));
    // IQ2_BN: a scale per row, negative and zero included.
    let scales: Vec<f32> = (0..rows)
        .map(|r| match r % 5 {
            0 => 0.0,
            1 => -0.3712,
            _ => (rng.next() % 10000) as f32 * 3.3e-5,
        })
        .collect();
    let bytes = encode_iq2bn(&c, &scales, k).unwrap();
    assert_eq!(decode_iq2bn(&bytes, rows, k, &mut back).unwrap(), scales);
    let m = Int8Matrix::from_bitnet(GgmlType::IQ2_BN, &bytes, rows, k).unwrap();
    check_matrix(&m, &c, &scales, &x, ncols, &format!("iq2_bn {what}"));
    // IQ1_BN: ternary codes only, fp16 row scales (these are exact in fp16).
    if c.iter().all(|&u| u <= 2) {
        let scales: Vec<f32> = scales.iter().map(|&d| f16::from_f32(d).to_f32()).collect();
        let bytes = encode_iq1bn(&c, &scales, k).unwrap();
        assert_eq!(decode_iq1bn(&bytes, rows, k, &mut back).unwrap(), scales);
        assert_eq!(back, c);
        let m = Int8Matrix::from_bitnet(GgmlType::IQ1_BN, &bytes, rows, k).unwrap();
        check_matrix(&m, &c, &scales, &x, ncols, &format!("iq1_bn {what}"));
    }
}

#[test]
fn random_shapes_every_width() {
    let mut seed = 1;
    for ncols in [1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17] {
        for (rows, k) in [(4, 128), (7, 384), (13, 256), (20, 1024)] {
            seed += 1;
            check(rows, k, ncols, Codes::Random, X::Random, seed);
        }
        // Ternary codes also run IQ1_BN, which has no +2.
        seed += 1;
        check(7, 384, ncols, Codes::Ternary, X::Random, seed);
    }
}

#[test]
fn code_edges_extreme_activations_and_zeros() {
    let mut seed = 900;
    for codes in [
        Codes::Constant(3),
        Codes::Constant(0),
        Codes::Constant(1),
        Codes::Ternary,
    ] {
        for x in [X::Spike, X::Ties, X::Zero, X::Random] {
            // 19: the AMX path's tiles (16 columns and a short one) where it runs.
            for ncols in [1, 3, 8, 11, 19] {
                for (rows, k) in [(5, 128), (8, 2048)] {
                    seed += 1;
                    check(rows, k, ncols, codes, x, seed);
                }
            }
        }
    }
}

/// The largest sums stay exact: k = 6912 (BitNet 2B-4T's FFN width) of code 3 against 127, on
/// the vector kernels (2 columns) and the AMX tiles (16).
#[test]
fn largest_sums_are_exact() {
    for ncols in [2, 16] {
        largest_sums_are_exact_at(ncols);
    }
}

fn largest_sums_are_exact_at(ncols: usize) {
    let (rows, k) = (4, 6912);
    let c = vec![3u8; rows * k];
    let x = vec![1.0f32; k * ncols];
    let m =
        Int8Matrix::from_bitnet(GgmlType::I2_S, &encode_i2s(&c, 1.0).unwrap(), rows, k).unwrap();
    let want = reference_matmul_int8(&c, &[1.0], rows, k, &x, ncols).unwrap();
    // 2 * 127 * 6912 times 1 / 127.
    assert_eq!(want[0], (2 * 127 * 6912) as f32 * (1.0f32 / 127.0));
    assert_every_path(&want, "k=6912 code 3", |kern| run(kern, &m, &x, ncols));
}
