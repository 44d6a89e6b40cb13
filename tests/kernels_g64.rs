//! Group-64 T2P (mainline llama.cpp's Q2_0: a scale per 64 weights) on every ISA path this CPU
//! supports: the `q8_0` gemv and every gemm width, bit-identical to the scalar oracle, including
//! code 3 (+2) with extreme activations, all-zero blocks, zero and negative scales, every
//! leftover column and row group; the oracle itself against ggml's `ggml_vec_dot_q2_0_q8_0`
//! written from its definition; and the driver on the real Q2_0 blocks equal, bit for bit, to
//! the as-stored ggml path on the same file bytes.

mod common;

use common::*;
use t2p::format::{
    BlockQ2_0g64, BlockQ8_0Quad, BlockT2pG64, GgmlType, QuantBlock, f16_to_f32, f32_to_f16,
    repack_to_t2p,
};
use t2p::kernels::Kernels;
use t2p::matmul::{ActQuant, ColumnMatrix, MatmulPlan, QuantMatrix, QuantizedBatch, T2pMatrix};

fn repack(src: &[BlockQ2_0g64], rows: usize, k: usize) -> Vec<BlockT2pG64> {
    let mut w = vec![BlockT2pG64::default(); rows.div_ceil(4) * k / 128];
    repack_to_t2p(src, rows, k, &mut w).unwrap();
    w
}

/// ggml's `ggml_vec_dot_q2_0_q8_0` for row `r` and one `q8_0` column, from the definitions:
/// `sum over 64-blocks of d_w * (d_a0 * isum0 + d_a1 * isum1)`, left to right.
fn ggml_row(src: &[BlockQ2_0g64], k: usize, r: usize, col: &[BlockQ8_0Quad]) -> f32 {
    let mut acc = 0.0f32;
    for (i, b) in src[r * k / 64..(r + 1) * k / 64].iter().enumerate() {
        let (quad, h) = (&col[i / 2], i % 2);
        let v = b.values();
        let isum = |j: usize| -> i32 {
            (0..32)
                .map(|t| v[32 * j + t] as i32 * quad.qs[64 * h + 32 * j + t] as i32)
                .sum()
        };
        let (d0, d1) = (quad.d[2 * h], quad.d[2 * h + 1]);
        acc += f16_to_f32(b.d) * (d0 * isum(0) as f32 + d1 * isum(1) as f32);
    }
    acc
}

/// Every output of the gemv (one column) or gemm (`ncols`) on every path equals the oracle's,
/// the oracle equals ggml's definition, and nothing past the real rows is written.
fn check(rows: usize, k: usize, ncols: usize, codes: Codes, scales: Scales, acts: Acts, seed: u64) {
    let mut rng = Lcg(seed);
    let src = ternary_tensor::<BlockQ2_0g64>(rows, k, codes, scales, &mut rng);
    let w = repack(&src, rows, k);
    let (nb, padded) = (k / 128, rows.div_ceil(4) * 4);
    let cols =
        act_columns::<BlockQ8_0Quad>(k, ncols, acts, matches!(scales, Scales::One), &mut rng);
    let written = Written::with_gap(padded, ncols, 4, f32::from_bits(0x7fc0_4321));
    let run = |kern: &Kernels| written.q8_0(kern, &w, &cols);
    let want = run(oracle());
    written.assert_untouched(&want);
    for c in 0..ncols {
        for (r, got) in written.column(&want, c)[..rows].iter().enumerate() {
            let g = ggml_row(&src, k, r, &cols[c * nb..(c + 1) * nb]);
            assert_eq!(
                got.to_bits(),
                g.to_bits(),
                "oracle vs ggml, row {r} col {c}"
            );
        }
    }
    let what = format!("g64 rows={rows} k={k} ncols={ncols} {codes:?} {scales:?} {acts:?}");
    assert_every_path(&want, &what, run);
}

#[test]
fn random_codes_and_scales_every_width() {
    const WIDTHS: [usize; 11] = [1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17];
    sweep_random_shapes(100, &WIDTHS, &[4, 8, 12, 20, 36], &[128, 384, 1024], check);
}

#[test]
fn exact_sums_code_three_extremes_and_zeros() {
    let mut seed = 500;
    for (codes, acts) in [
        (Codes::Constant(3), Acts::Min),
        (Codes::Constant(3), Acts::Extreme),
        (Codes::Constant(0), Acts::Constant(127)),
        (Codes::Constant(1), Acts::Random),
        (Codes::Random, Acts::Zero),
        (Codes::Random, Acts::Min),
    ] {
        for ncols in [1, 3, 8, 11] {
            for (rows, k) in [(16, 256), (8, 2048), (4, 128)] {
                seed += 1;
                check(rows, k, ncols, codes, Scales::One, acts, seed);
                check(rows, k, ncols, codes, Scales::Random, acts, seed);
            }
        }
    }
}

/// The two halves' scales really are separate: scaling only the second half's blocks changes
/// only what the second half contributes.
#[test]
fn each_half_has_its_own_scale() {
    let (rows, k) = (4, 128);
    let mut rng = Lcg(7);
    let mut src =
        ternary_tensor::<BlockQ2_0g64>(rows, k, Codes::Constant(2), Scales::One, &mut rng);
    for (i, b) in src.iter_mut().enumerate() {
        if i % 2 == 1 {
            b.d = f32_to_f16(0.5);
        }
    }
    let w = repack(&src, rows, k);
    let col = [BlockQ8_0Quad::from_qs([1; 128], [1.0; 4])];
    let mut out = [0.0f32; 4];
    oracle().gemv_q8_0(&w, 1, &col, &mut out);
    assert_eq!(out, [64.0 + 32.0; 4]);
    for kern in paths_under_test() {
        let mut got = [0.0f32; 4];
        kern.gemv_q8_0(&w, 1, &col, &mut got);
        assert_eq!(got, out, "{}", kern.isa());
    }
}

/// The driver on group-64 T2P (odd rows, row chunks, every path) equals the as-stored ggml
/// path (`QuantMatrix`, ggml's numerics) on the same Q2_0 bytes and the same activations, bit
/// for bit; a `q8_K` plan is refused with a clear error.
#[test]
fn driver_equals_the_ggml_path_on_the_same_bytes() {
    for (rows, k, ncols) in [(7, 256, 1), (13, 640, 3), (4, 128, 9), (30, 1024, 2)] {
        let mut rng = Lcg(rows as u64 * 31 + k as u64);
        let src = ternary_tensor::<BlockQ2_0g64>(rows, k, Codes::Random, Scales::Random, &mut rng);
        let t2p = T2pMatrix::from_t2p_blocks(repack(&src, rows, k), rows, k).unwrap();
        let words: Vec<u16> = bytemuck::cast_slice(bytemuck::cast_slice::<_, u8>(&src)).to_vec();
        let q = QuantMatrix::new(GgmlType::Q2_0_G64, rows, k, words).unwrap();
        assert_eq!(q.ggml_type(), BlockQ2_0g64::TYPE);
        let x: Vec<f32> = (0..k * ncols)
            .map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 97.0)
            .collect();
        let mut work = vec![0u32; q.act_words(ncols)];
        q.quantize_acts(&x, &mut work).unwrap();
        let mut want = vec![0f32; rows * ncols];
        q.compute(oracle(), &work, ncols, 0..rows, &mut want, rows)
            .unwrap();
        let batch = QuantizedBatch::new(&x, k, ncols, ActQuant::Q8_0).unwrap();
        for kern in std::iter::once(oracle()).chain(paths_under_test()) {
            let got = compute_in_chunks(kern, &t2p, &batch);
            assert_bits_eq(
                &got,
                &want,
                &format!("{} driver {rows}x{k}x{ncols}", kern.isa()),
            );
        }
        let q8k = QuantizedBatch::new(&x, k, ncols, ActQuant::Q8K).unwrap();
        if q8k.act() == ActQuant::Q8K {
            let plan = MatmulPlan::for_batch(&t2p, &q8k).unwrap();
            let mut out = vec![0f32; rows * ncols];
            let e = plan.compute(oracle(), t2p.blocks(), q8k.work(), 0..rows, &mut out, rows);
            assert!(e.unwrap_err().to_string().contains("q8_0"), "q8_K refused");
        }
        // Dequantized rows are the source's.
        let mut a = vec![0f32; k];
        let mut b = vec![0f32; k];
        for r in 0..rows {
            t2p.dequantize_row(r, &mut a);
            q.dequantize_row(r, &mut b);
            assert_bits_eq(&a, &b, "dequantized row");
        }
    }
}
