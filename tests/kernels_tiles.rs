//! Small-batch tiles and row-group pairing against the oracle, bit for bit, on every path: the
//! x86 `q8_0` gemv works on two row groups per pass (an odd last group runs alone) and the gemms
//! on tiles of up to eight columns per pass (column pairs, an odd last column, leftovers of 1-7
//! columns after full passes), so these cases cover odd and even group counts, every column
//! count 1..=17 and the extreme activations at widths 1-9, 12 and 16.

mod common;

use common::*;
use t2p::format::{BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, interleave_q8k_x4};
use t2p::kernels::Kernels;

fn weights(rows: usize, k: usize, codes: Codes, scales: Scales, rng: &mut Lcg) -> Vec<BlockT2p> {
    let pq = ternary_tensor::<BlockPq2_0>(rows, k, codes, scales, rng);
    repacked_pq2_0(&pq, rows, k)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// Every real output of `ncols` columns with stride `ld`, and the stride gaps untouched.
fn check_q8_0(rows: usize, k: usize, ncols: usize, codes: Codes, acts: Acts, seed: u64) {
    let mut rng = Lcg(seed);
    let w = weights(rows, k, codes, Scales::Random, &mut rng);
    let nb = k / 128;
    let cols = act_columns::<BlockQ8_0Quad>(k, ncols, acts, false, &mut rng);
    let written = Written::with_gap(rows, ncols, 8, f32::from_bits(0x7fc0_7777));
    let run = |kern: &Kernels| written.q8_0(kern, &w, &cols);
    let want = run(oracle());
    for kern in paths_under_test() {
        let got = run(kern);
        assert_eq!(
            bits(&got),
            bits(&want),
            "{} q8_0 rows={rows} k={k} ncols={ncols} {codes:?} {acts:?}",
            kern.isa()
        );
        // Each gemm column equals the gemv on it, on the same path.
        for c in 0..ncols {
            let mut alone = vec![0.0; rows];
            kern.gemv_q8_0(&w, nb, &cols[c * nb..(c + 1) * nb], &mut alone);
            assert_eq!(
                bits(&written.column(&got, c)[..rows]),
                bits(&alone),
                "column {c}"
            );
        }
    }
}

fn check_q8k(rows: usize, k: usize, ncols: usize, acts: Acts, seed: u64) {
    let mut rng = Lcg(seed);
    let w = weights(rows, k, Codes::Random, Scales::Random, &mut rng);
    let per = k / 256;
    let cols = act_columns::<BlockQ8K>(k, ncols, acts, false, &mut rng);
    let zero = t2p::format::BlockQ8K::default();
    let tiles: Vec<BlockQ8Kx4> = (0..ncols.div_ceil(4))
        .flat_map(|t| {
            let cols = &cols;
            let zero = &zero;
            (0..per).map(move |b| {
                let c = |i: usize| {
                    cols.get((4 * t + i) * per + b)
                        .filter(|_| 4 * t + i < ncols)
                };
                interleave_q8k_x4([0, 1, 2, 3].map(|i| c(i).unwrap_or(zero)))
            })
        })
        .collect();
    let written = Written::with_gap(rows, ncols, 8, f32::from_bits(0x7fc0_8888));
    let run = |kern: &Kernels| written.q8k(kern, &w, Some(&cols), &tiles);
    let want = run(oracle());
    for kern in paths_under_test() {
        assert_eq!(
            bits(&run(kern)),
            bits(&want),
            "{} q8_K rows={rows} k={k} ncols={ncols} {acts:?}",
            kern.isa()
        );
    }
}

#[test]
fn q8_0_odd_and_even_group_counts_every_width() {
    let mut seed = 100;
    for rows in [4, 8, 12, 16, 20, 36] {
        for ncols in 1..=17 {
            seed += 1;
            check_q8_0(rows, 2048, ncols, Codes::Random, Acts::Random, seed);
        }
    }
}

#[test]
fn q8_0_extremes_in_tiles() {
    for acts in [
        Acts::Min,
        Acts::Extreme,
        Acts::Constant(127),
        Acts::Constant(-127),
    ] {
        for ncols in [1, 2, 3, 4, 5, 6, 7, 8, 9, 16] {
            check_q8_0(20, 512, ncols, Codes::Constant(3), acts, 7);
            check_q8_0(12, 256, ncols, Codes::Random, acts, 8);
        }
    }
}

#[test]
fn q8k_tiles_every_width() {
    let mut seed = 200;
    for rows in [4, 12, 20] {
        for ncols in 1..=17 {
            seed += 1;
            check_q8k(rows, 1024, ncols, Acts::Random, seed);
        }
    }
    for acts in [Acts::Min, Acts::Extreme] {
        for ncols in [2, 3, 4, 5, 6, 7, 8, 9, 12, 16] {
            check_q8k(8, 512, ncols, acts, 9);
        }
    }
}
