use super::*;
use crate::format::f32_to_f16;
use crate::kernels::{Isa, f16_path_name};
use crate::test_rng::XorShift;

/// Roughly uniform in [-1, 1), with an occasional large or tiny value so that the order of
/// the sums shows in the last bits.
fn value(rng: &mut XorShift) -> f32 {
    let v = (rng.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
    match rng.below(16) {
        0 => v * 300.0,
        1 => v * 1e-6,
        _ => v,
    }
}

/// `out[c * ld + r]` from the entry of `isa`, with the output's padding rows poisoned.
fn run(isa: Isa, w: &[u16], k: usize, x: &[f32], ncols: usize, ld: usize) -> Vec<f32> {
    let kern = Kernels::for_isa(isa).unwrap();
    let mut out = vec![f32::NAN; ncols * ld];
    kern.f16_rows(Gemm {
        x: w,
        nb: k,
        y: x,
        ncols,
        out: &mut out,
        ld,
    });
    out
}

/// The documented order, written out once more without lanes types or tiles.
fn documented_dot(w: &[u16], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (i, (&w, &x)) in w.iter().zip(x).enumerate() {
        acc[i % LANES] = f16_to_f32(w).mul_add(x, acc[i % LANES]);
    }
    for h in [8, 4, 2, 1] {
        for j in 0..h {
            acc[j] += acc[j + h];
        }
    }
    acc[0]
}

fn random_case(rng: &mut XorShift) -> (usize, usize, usize, Vec<u16>, Vec<f32>) {
    let rows = 1 + rng.below(13);
    let k = 1 + rng.below(90);
    let ncols = 1 + rng.below(10);
    let w = (0..rows * k).map(|_| f32_to_f16(value(rng))).collect();
    let x = (0..ncols * k).map(|_| value(rng)).collect();
    (rows, k, ncols, w, x)
}

#[test]
fn scalar_reference_follows_the_documented_order_and_is_close_to_f64() {
    let mut rng = XorShift::new(1);
    for _ in 0..300 {
        let (rows, k, ncols, w, x) = random_case(&mut rng);
        let ld = rows + rng.below(3);
        let out = run(Isa::Scalar, &w, k, &x, ncols, ld);
        for c in 0..ncols {
            for r in 0..rows {
                let (wr, xc) = (&w[r * k..(r + 1) * k], &x[c * k..(c + 1) * k]);
                let got = out[c * ld + r];
                assert_eq!(
                    got.to_bits(),
                    documented_dot(wr, xc).to_bits(),
                    "r {r} c {c} k {k}"
                );
                let exact: f64 = wr
                    .iter()
                    .zip(xc)
                    .map(|(&w, &x)| f16_to_f32(w) as f64 * x as f64)
                    .sum();
                let mag: f64 = wr
                    .iter()
                    .zip(xc)
                    .map(|(&w, &x)| (f16_to_f32(w) as f64 * x as f64).abs())
                    .sum();
                assert!(
                    (got as f64 - exact).abs() <= 1e-6 * mag + 1e-30,
                    "{got} vs {exact}"
                );
            }
            // The padding between columns is not written.
            assert!(out[c * ld + rows..(c + 1) * ld].iter().all(|v| v.is_nan()));
        }
    }
}

#[test]
fn every_path_equals_the_scalar_reference_bit_for_bit() {
    let paths = Isa::available();
    eprintln!(
        "f16 rows paths: {:?}",
        paths.iter().map(|&i| f16_path_name(i)).collect::<Vec<_>>()
    );
    let mut rng = XorShift::new(2);
    for case in 0..400 {
        let (rows, k, ncols, w, x) = random_case(&mut rng);
        // Some long rows too: many full 16-lane steps before the leftovers.
        let (rows, k, ncols, w, x) = if case % 10 == 0 {
            let k = 16 * (20 + rng.below(20)) + rng.below(16);
            let w = (0..rows * k).map(|_| f32_to_f16(value(&mut rng))).collect();
            let x = (0..ncols * k).map(|_| value(&mut rng)).collect();
            (rows, k, ncols, w, x)
        } else {
            (rows, k, ncols, w, x)
        };
        let want = run(Isa::Scalar, &w, k, &x, ncols, rows);
        for &isa in &paths {
            let got = run(isa, &w, k, &x, ncols, rows);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got),
                bits(&want),
                "{isa}: {rows} x {k}, {ncols} columns"
            );
        }
    }
}

#[test]
#[should_panic(expected = "activation values")]
fn a_short_activation_slice_is_refused() {
    run(Isa::Scalar, &[0; 8], 4, &[0.0; 7], 2, 2);
}
