//! The activation quantizer of every ISA path this CPU supports writes the same `q8_0` quads,
//! byte for byte, as the portable reference (`format::quantize_row_q8_0`, ggml's x86 rounding):
//! random rows, exact rounding ties, all-zero blocks, a single non-zero value, the largest and
//! subnormal floats, and long rows. Every path's build is the same source compiled for its
//! features, so any difference is a miscompiled or misdispatched entry. The SwiGLU entry
//! (`silu_mul`) is held to its reference the same way, bit for bit.

mod common;

use common::{Lcg, paths_under_test};
use t2p::format::{BlockQ8_0Quad, quantize_row_q8_0};

/// Rows of 128 x `blocks` values that exercise the quantizer's corners.
fn rows(rng: &mut Lcg, blocks: usize) -> Vec<(String, Vec<f32>)> {
    let n = 128 * blocks;
    let mut random = |scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| (rng.next() as f32 / u32::MAX as f32 - 0.5) * scale)
            .collect()
    };
    let mut out = vec![
        ("random".to_string(), random(6.0)),
        ("random large".to_string(), random(3e37)),
        ("random subnormal".to_string(), random(1e-39)),
        ("zero".to_string(), vec![0.0; n]),
        ("negative zero".to_string(), vec![-0.0; n]),
    ];
    // amax 127 makes the inverse scale exactly 1: `k + 0.5` is a tie, which goes to even.
    let ties: Vec<f32> = (0..n)
        .map(|i| match i % 32 {
            0 => 127.0,
            j => (j as f32 - 16.0) + 0.5,
        })
        .collect();
    out.push(("ties".to_string(), ties));
    let mut one = vec![0.0; n];
    one[n - 1] = -3.25;
    out.push(("one value".to_string(), one));
    let extreme: Vec<f32> = (0..n)
        .map(|i| match i % 4 {
            0 => f32::MAX,
            1 => -f32::MAX,
            2 => f32::MIN_POSITIVE / 8.0,
            _ => 1.0,
        })
        .collect();
    out.push(("extreme".to_string(), extreme));
    out
}

#[test]
fn every_path_quantizes_q8_0_rows_exactly_as_the_reference() {
    let paths = paths_under_test();
    let mut rng = Lcg(0xac7);
    for blocks in [1, 2, 3, 16, 48] {
        for (what, x) in rows(&mut rng, blocks) {
            let mut want = vec![BlockQ8_0Quad::default(); blocks];
            quantize_row_q8_0(&x, &mut want);
            for kern in &paths {
                let mut got = vec![BlockQ8_0Quad::default(); blocks];
                kern.quantize_row_q8_0(&x, &mut got);
                let same =
                    bytemuck::cast_slice::<_, u8>(&got) == bytemuck::cast_slice::<_, u8>(&want);
                assert!(same, "{}: {what}, {blocks} blocks", kern.isa());
            }
        }
    }
}

/// Every path's SwiGLU gives the reference's bits: lengths on and off every vector width, the
/// whole range of gates (both signs, past the exponential's ends, zeros, subnormals, NaN,
/// infinities) and of ups.
#[test]
fn every_path_silu_mul_matches_the_reference_bit_for_bit() {
    let paths = paths_under_test();
    let mut rng = Lcg(0x5117);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for len in (0..=70).chain([127, 128, 129, 1000, 6144]) {
        for spread in [1e-40f32, 1e-3, 1.0, 12.0, 100.0, 3e38] {
            let mut gate: Vec<f32> = (0..len)
                .map(|_| (rng.next() as f32 / u32::MAX as f32 - 0.5) * spread)
                .collect();
            let specials = [0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -86.5];
            for (g, &v) in gate.iter_mut().step_by(7).zip(specials.iter().cycle()) {
                *g = v;
            }
            let up: Vec<f32> = (0..len)
                .map(|_| (rng.next() as f32 / u32::MAX as f32 - 0.5) * 8.0)
                .collect();
            let mut want = gate.clone();
            t2p::kernels::silu_mul(&mut want, &up);
            for kern in &paths {
                let mut got = gate.clone();
                kern.silu_mul(&mut got, &up);
                assert_eq!(
                    bits(&got),
                    bits(&want),
                    "{} len {len} spread {spread}",
                    kern.isa()
                );
            }
        }
    }
}

#[test]
fn the_reference_rounds_ties_to_even_and_keeps_zero_blocks_zero() {
    let mut x = [0.0f32; 128];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -3.5;
    x[3] = 0.5;
    let mut q = [BlockQ8_0Quad::default()];
    quantize_row_q8_0(&x, &mut q);
    assert_eq!(&q[0].qs[..4], &[127, 2, -4, 0]);
    assert_eq!(q[0].d[1..], [0.0; 3]);
    assert_eq!(q[0].sums, [127 + 2 - 4, 0, 0, 0]);
}
