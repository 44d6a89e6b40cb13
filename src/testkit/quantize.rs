//! Round-to-nearest writers of ggml block types for fixtures (`libt2p synth --mix default`):
//! valid blocks close to the input, not ggml's searched `quantize_row_*` (which only decides
//! *which* valid block is written; every reader dequantizes both the same way).

use crate::format::{BlockQ4K, BlockQ6K, QK_K, f16_to_f32, f32_to_f16};

/// Q6_K blocks of `x` (`x.len()` a multiple of 256): a scale per 16 from its largest magnitude.
pub fn quantize_q6_k(x: &[f32]) -> Vec<BlockQ6K> {
    x.chunks_exact(QK_K).map(q6_k_block).collect()
}

fn q6_k_block(x: &[f32]) -> BlockQ6K {
    let sub: Vec<f32> = x
        .chunks_exact(16)
        .map(|g| g.iter().fold(0f32, |m, v| m.max(v.abs())) / 31.0)
        .collect();
    let dmax = sub.iter().fold(0f32, |m, &v| m.max(v));
    let d = f16_to_f32(f32_to_f16(dmax / 127.0));
    let mut b = BlockQ6K {
        ql: [0; 128],
        qh: [0; 64],
        scales: [0; 16],
        d: f32_to_f16(d),
    };
    let mut q = [32u8; QK_K];
    for (g, &s) in sub.iter().enumerate() {
        let sc = if d > 0.0 {
            (s / d).round().clamp(-128.0, 127.0) as i8
        } else {
            0
        };
        b.scales[g] = sc;
        let step = d * sc as f32;
        for i in 16 * g..16 * g + 16 {
            if step != 0.0 {
                q[i] = ((x[i] / step).round().clamp(-32.0, 31.0) + 32.0) as u8;
            }
        }
    }
    for n in 0..2 {
        for l in 0..32 {
            let v = |o: usize| q[128 * n + o + l];
            let (q1, q2, q3, q4) = (v(0), v(32), v(64), v(96));
            b.ql[64 * n + l] = (q1 & 0xF) | ((q3 & 0xF) << 4);
            b.ql[64 * n + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
            b.qh[32 * n + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
    b
}

/// Q4_K blocks of `x` (`x.len()` a multiple of 256): per 32, `min` and `max` set the minimum
/// and the scale.
pub fn quantize_q4_k(x: &[f32]) -> Vec<BlockQ4K> {
    x.chunks_exact(QK_K).map(q4_k_block).collect()
}

fn q4_k_block(x: &[f32]) -> BlockQ4K {
    let (mut a, mut m) = ([0f32; 8], [0f32; 8]);
    for (j, g) in x.chunks_exact(32).enumerate() {
        let lo = g.iter().fold(0f32, |acc, &v| acc.min(v));
        let hi = g.iter().fold(0f32, |acc, &v| acc.max(v));
        m[j] = -lo;
        a[j] = (hi - lo) / 15.0;
    }
    let d = f16_to_f32(f32_to_f16(a.iter().fold(0f32, |x, &v| x.max(v)) / 63.0));
    let dmin = f16_to_f32(f32_to_f16(m.iter().fold(0f32, |x, &v| x.max(v)) / 63.0));
    let round6 = |v: f32, s: f32| {
        if s > 0.0 {
            (v / s).round().clamp(0.0, 63.0) as u8
        } else {
            0
        }
    };
    let sc: [u8; 8] = std::array::from_fn(|j| round6(a[j], d));
    let mn: [u8; 8] = std::array::from_fn(|j| round6(m[j], dmin));
    let mut b = BlockQ4K {
        d: f32_to_f16(d),
        dmin: f32_to_f16(dmin),
        scales: [0; 12],
        qs: [0; 128],
    };
    for j in 0..4 {
        b.scales[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        b.scales[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
        b.scales[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
    }
    let q: Vec<u8> = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let j = i / 32;
            let step = d * sc[j] as f32;
            if step == 0.0 {
                return 0;
            }
            ((v + dmin * mn[j] as f32) / step).round().clamp(0.0, 15.0) as u8
        })
        .collect();
    for c in 0..4 {
        for l in 0..32 {
            b.qs[32 * c + l] = q[64 * c + l] | (q[64 * c + 32 + l] << 4);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::QuantBlock;

    fn roundtrip<B: QuantBlock>(blocks: &[B], n: usize) -> Vec<f32> {
        let mut out = vec![0f32; n];
        crate::format::dequantize_blocks(blocks, &mut out);
        out
    }

    #[test]
    fn written_blocks_dequantize_close_to_the_input() {
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 7919 % 211) as f32 - 105.0) / 50.0)
            .collect();
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let q6 = roundtrip(&quantize_q6_k(&x), x.len());
        let q4 = roundtrip(&quantize_q4_k(&x), x.len());
        for (i, &v) in x.iter().enumerate() {
            assert!(
                (q6[i] - v).abs() <= amax / 40.0,
                "q6_K {i}: {} vs {v}",
                q6[i]
            );
            assert!(
                (q4[i] - v).abs() <= amax / 8.0,
                "q4_K {i}: {} vs {v}",
                q4[i]
            );
        }
    }
}
