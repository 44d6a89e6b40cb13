//! The small float operations of a transformer layer, written once for every architecture.

/// `x = x / sqrt(mean(x^2) + eps) * w` over `x.len()` values (the sum in f64, as ggml does;
/// in eight lanes, so that the adds do not wait on each other: the squares are exact in f64,
/// and the order moves the sum by about `1e-16` of itself, far below the f32 it becomes).
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    let mut lanes = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail: f64 = chunks
        .remainder()
        .iter()
        .map(|&v| v as f64 * v as f64)
        .sum();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v as f64 * v as f64;
        }
    }
    let ss = lanes.iter().sum::<f64>() + tail;
    let scale = 1.0 / ((ss / x.len() as f64) as f32 + eps).sqrt();
    for (v, &g) in x.iter_mut().zip(w) {
        *v = *v * scale * g;
    }
}

/// [`rms_norm`] of `src` into `dst`.
pub fn rms_norm_into(dst: &mut [f32], src: &[f32], w: &[f32], eps: f32) {
    dst.copy_from_slice(src);
    rms_norm(dst, w, eps);
}

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i + 1)` (llama.cpp `LLAMA_ROPE_TYPE_NORM`: llama).
    Normal,
    /// Halves `(i, i + n/2)` (llama.cpp `LLAMA_ROPE_TYPE_NEOX`: qwen3, qwen35).
    Neox,
}

/// Rotary position embedding tables for one position: `cos`/`sin` of `pos * base^(-2i/n_dims)`
/// for `i < n_dims / 2`, the angle advanced by repeated multiplication in f32 as ggml does.
pub fn rope_angles(pos: usize, n_dims: usize, base: f32, cos: &mut [f32], sin: &mut [f32]) {
    let theta_scale = base.powf(-2.0 / n_dims as f32);
    let mut theta = pos as f32;
    for i in 0..n_dims / 2 {
        cos[i] = theta.cos();
        sin[i] = theta.sin();
        theta *= theta_scale;
    }
}

/// Rotates the first `n_dims` values of one head in place.
pub fn rope(head: &mut [f32], n_dims: usize, style: RopeStyle, cos: &[f32], sin: &[f32]) {
    let half = n_dims / 2;
    let turn = |x0: f32, x1: f32, c: f32, s: f32| (x0 * c - x1 * s, x0 * s + x1 * c);
    match style {
        RopeStyle::Normal => {
            let pairs = head[..2 * half].chunks_exact_mut(2);
            for ((p, &c), &s) in pairs.zip(&cos[..half]).zip(&sin[..half]) {
                (p[0], p[1]) = turn(p[0], p[1], c, s);
            }
        }
        // Separate halves: the loop runs over four slices and vectorises.
        RopeStyle::Neox => {
            let (lo, hi) = head[..2 * half].split_at_mut(half);
            for (((a, b), &c), &s) in lo.iter_mut().zip(hi).zip(&cos[..half]).zip(&sin[..half]) {
                (*a, *b) = turn(*a, *b, c, s);
            }
        }
    }
}

/// `x / (1 + e^-x)` (the kernels' branch-free one, so SwiGLU's loop and every other SiLU agree).
pub use crate::kernels::exp::silu;

/// The gate activation of an FFN `down(act(gate(x)) * up(x))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnAct {
    /// `x * sigmoid(x)` (SwiGLU: llama, qwen).
    Silu,
    /// `max(x, 0)^2` (BitNet b1.58).
    ReluSquared,
}

impl FfnAct {
    /// The activation of `x`.
    #[inline]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            FfnAct::Silu => silu(x),
            FfnAct::ReluSquared => {
                let r = x.max(0.0);
                r * r
            }
        }
    }
}

/// `1 / (1 + e^-x)`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// In-place softmax (the attention reference's, which every kernel path's softmax equals).
pub use crate::kernels::attention::softmax;

/// Rounds to the nearest IEEE half and back (the KV cache stores f16, as llama.cpp's does).
#[inline]
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// `sum a[i] * b[i]` with eight partial sums, so the compiler vectorises it (the attention
/// kernels' order).
pub use crate::kernels::attention::dot;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_of_constant_is_the_weight() {
        let mut x = [3.0f32; 8];
        rms_norm(&mut x, &[2.0; 8], 0.0);
        assert!(x.iter().all(|&v| (v - 2.0).abs() < 1e-6));
    }

    #[test]
    fn rope_at_position_zero_is_identity_and_preserves_norm() {
        let (mut c, mut s) = ([0.0; 4], [0.0; 4]);
        rope_angles(0, 8, 10000.0, &mut c, &mut s);
        let mut h: Vec<f32> = (0..8).map(|i| i as f32).collect();
        rope(&mut h, 8, RopeStyle::Neox, &c, &s);
        assert_eq!(h, (0..8).map(|i| i as f32).collect::<Vec<_>>());
        rope_angles(17, 8, 10000.0, &mut c, &mut s);
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let mut h: Vec<f32> = (0..8).map(|i| i as f32 + 1.0).collect();
            let n0: f32 = h.iter().map(|v| v * v).sum();
            rope(&mut h, 8, style, &c, &s);
            assert!((h.iter().map(|v| v * v).sum::<f32>() - n0).abs() < 1e-3);
        }
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = [1.0, 2.0, 3.0, -1e9];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6 && x[3] == 0.0);
    }
}
