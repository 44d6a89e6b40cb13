//! The activation quantizer of every ISA path this CPU supports writes the same `q8_0` quads,
//! byte for byte, as the portable reference (`format::quantize_row_q8_0`, ggml's x86 rounding):
//! random rows, exact rounding ties, all-zero blocks, a single non-zero value, the largest and
//! subnormal floats, and long rows. Every path's build is the same source compiled for its
//! features, so any difference is a miscompiled or misdispatched entry. The `q8_K x4` quantizer
//! of the gemm tiles (`quantize_q8k_x4`) is held to its portable build on the same rows, the
//! SwiGLU entry (`silu_mul`) and DeltaNet's recurrence (`delta_rule`) to their references, the
//! same way, bit for bit.

mod common;

use common::{Lcg, paths_under_test};
use t2p::format::{BlockQ8_0Quad, BlockQ8Kx4, quantize_q8k_x4, quantize_row_q8_0};

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

/// Every path's `q8_K x4` quantizer writes the portable build's bytes, for one to four columns
/// (the rows above, each column a different one, so a tile mixes their corners) of 256 x 1 to 24
/// values.
#[test]
fn every_path_quantizes_q8k_tiles_exactly_as_the_reference() {
    let paths = paths_under_test();
    let mut rng = Lcg(0x8c4);
    for blocks in [2, 4, 48] {
        let rows = rows(&mut rng, blocks);
        for first in 0..rows.len() {
            for ncols in 1..=4 {
                let cols: Vec<&[f32]> = (0..ncols)
                    .map(|c| &rows[(first + c) % rows.len()].1[..])
                    .collect();
                let k = 128 * blocks;
                let mut want = vec![BlockQ8Kx4::default(); k / 256];
                quantize_q8k_x4(&cols, k, &mut want);
                for kern in &paths {
                    let mut got = vec![BlockQ8Kx4::default(); k / 256];
                    kern.quantize_q8k_x4(&cols, k, &mut got);
                    let same =
                        bytemuck::cast_slice::<_, u8>(&got) == bytemuck::cast_slice::<_, u8>(&want);
                    assert!(
                        same,
                        "{}: {} + {ncols} columns, k {k}",
                        kern.isa(),
                        rows[first].0
                    );
                }
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

/// The delta rule a row at a time with `dot` ([`t2p::kernels::delta::delta_rule`]'s
/// definition): the reference's rows in groups must give the same bits.
fn delta_rule_row_by_row(state: &mut [f32], seq: &t2p::kernels::delta::DeltaSeq, out: &mut [f32]) {
    use t2p::kernels::attention::dot;
    let dk = seq.dk;
    let dv = state.len() / dk;
    for (t, out) in out.chunks_exact_mut(dv).enumerate() {
        let row = &seq.rows[t * seq.stride..];
        let (q, k, v) = (
            &row[seq.q..][..dk],
            &row[seq.k..][..dk],
            &row[seq.v..][..dv],
        );
        let (g, b) = (
            seq.decay[t * seq.gate_stride],
            seq.beta[t * seq.gate_stride],
        );
        for ((srow, o), &vj) in state.chunks_exact_mut(dk).zip(out).zip(v) {
            srow.iter_mut().for_each(|x| *x *= g);
            let d = (vj - dot(srow, k)) * b;
            srow.iter_mut().zip(k).for_each(|(x, &kk)| *x += kk * d);
            *o = dot(srow, q) * seq.scale;
        }
    }
}

/// A head's state `S` (`dv` rows of `dk`, row-major) in the kernels' layout
/// ([`t2p::kernels::delta::state_index`]).
fn layout(s: &[f32], dv: usize, dk: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; dv * dk];
    for r in 0..dv {
        for j in 0..dk {
            out[t2p::kernels::delta::state_index(r, j, dv, dk)] = s[r * dk + j];
        }
    }
    out
}

/// Every path's DeltaNet recurrence gives the bits of the row-by-row definition: heads of 128
/// (the models') and of widths off every vector length and row group, one token (decode) and
/// batches, decays and betas over their whole range (zero, one, tiny), the state carried from
/// one call into the next.
#[test]
fn every_path_delta_rule_matches_the_reference_bit_for_bit() {
    use t2p::kernels::delta::{DeltaSeq, delta_rule};
    let paths = paths_under_test();
    let mut rng = Lcg(0xde17a);
    let mut uniform = |n: usize, lo: f32, hi: f32| -> Vec<f32> {
        (0..n)
            .map(|_| lo + (hi - lo) * (rng.next() as f32 / u32::MAX as f32))
            .collect()
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (dk, dv) in [(128, 128), (16, 8), (13, 7), (40, 24)] {
        for n in [1, 2, 5, 17] {
            // Rows of q | k | v | an unused tail, so the offsets and the stride are exercised.
            let stride = 2 * dk + dv + 3;
            let rows = uniform(n * stride, -1.0, 1.0);
            let mut decay = uniform(2 * n, 0.0, 1.0);
            let mut beta = uniform(2 * n, 0.0, 1.0);
            decay[0] = 0.0;
            beta[1 % (2 * n)] = 1.0;
            decay[2 * n - 1] = 1e-30;
            let seq = DeltaSeq {
                rows: &rows,
                stride,
                dk,
                q: 0,
                k: dk,
                v: 2 * dk,
                decay: &decay[1..],
                beta: &beta[1..],
                gate_stride: 2,
                scale: 1.0 / (dv as f32).sqrt(),
            };
            let start = uniform(dk * dv, -2.0, 2.0);
            let (mut want_state, mut want) = (start.clone(), vec![0.0f32; n * dv]);
            delta_rule_row_by_row(&mut want_state, &seq, &mut want);
            delta_rule_row_by_row(&mut want_state, &seq, &mut want);
            // The kernels hold the state in their own layout.
            let (start, want_state) = (layout(&start, dv, dk), layout(&want_state, dv, dk));
            let (mut state, mut got) = (start.clone(), vec![f32::NAN; n * dv]);
            delta_rule(&mut state, &seq, &mut got);
            delta_rule(&mut state, &seq, &mut got);
            assert_eq!(
                bits(&got),
                bits(&want),
                "reference output, dk {dk} dv {dv} n {n}"
            );
            assert_eq!(
                bits(&state),
                bits(&want_state),
                "reference state, dk {dk} dv {dv} n {n}"
            );
            for kern in &paths {
                let (mut state, mut got) = (start.clone(), vec![f32::NAN; n * dv]);
                kern.delta_rule(&mut state, &seq, &mut got);
                kern.delta_rule(&mut state, &seq, &mut got);
                let what = format!("{} dk {dk} dv {dv} n {n}", kern.isa());
                assert_eq!(bits(&got), bits(&want), "output, {what}");
                assert_eq!(bits(&state), bits(&want_state), "state, {what}");
            }
        }
    }
}

/// The Hadamard transform as plain butterflies, one distance per pass, then the scale: the
/// definition [`t2p::kernels::fwht::fwht_blocks`] must give the bits of.
fn fwht_plain(x: &mut [f32], block: usize) {
    let scale = 1.0 / (block as f32).sqrt();
    for b in x.chunks_exact_mut(block) {
        let mut h = 1;
        while h < block {
            for pair in b.chunks_exact_mut(2 * h) {
                let (lo, hi) = pair.split_at_mut(h);
                for (a, c) in lo.iter_mut().zip(hi.iter_mut()) {
                    let (u, w) = (*a, *c);
                    *a = u + w;
                    *c = u - w;
                }
            }
            h *= 2;
        }
        b.iter_mut().for_each(|v| *v *= scale);
    }
}

/// Every path's Hadamard transform gives the plain butterflies' bits: every block size from 2
/// to 2048, three blocks a call, values from 1e-30 to 1e30 of both signs (sums that round,
/// cancel and overflow to infinity).
#[test]
fn every_path_fwht_matches_the_plain_butterflies_bit_for_bit() {
    let paths = paths_under_test();
    let mut rng = Lcg(0xf4a7);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for log in 1..=11 {
        let block = 1usize << log;
        let x: Vec<f32> = (0..3 * block)
            .map(|_| {
                let r = rng.next();
                let mag = 10f32.powi((r % 61) as i32 - 30);
                let sign = if r & (1 << 20) == 0 { 1.0 } else { -1.0 };
                sign * mag * (1.0 + (r >> 8) as f32 / (1u32 << 24) as f32)
            })
            .collect();
        let mut want = x.clone();
        fwht_plain(&mut want, block);
        let mut got = x.clone();
        t2p::kernels::fwht::fwht_blocks(&mut got, block);
        assert_eq!(bits(&got), bits(&want), "reference, block {block}");
        for kern in &paths {
            let mut got = x.clone();
            kern.fwht_blocks(&mut got, block);
            assert_eq!(bits(&got), bits(&want), "{} block {block}", kern.isa());
        }
    }
}
