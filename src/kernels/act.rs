//! The activations' loops as entries of each path's table: a row of floats into the `q8_0`
//! quads the T2P kernels read ([`Kernels::quantize_row_q8_0`]), up to four columns into the
//! `q8_K x4` blocks of their gemm tiles ([`Kernels::quantize_q8k_x4`]), the SwiGLU of the FFN
//! ([`Kernels::silu_mul`]), DeltaNet's recurrence ([`Kernels::delta_rule`]) and the Hadamard
//! transform of rotated checkpoints ([`Kernels::fwht_blocks`]). Each has one algorithm
//! ([`crate::format::quantize_row_q8_0`], ggml's x86 rounding, exactly;
//! [`crate::format::quantize_q8k_x4`], ggml's reference rounding; [`silu_mul`];
//! [`delta_rule`]; [`fwht_blocks`]); a path's entry is that same code compiled for the path's
//! features, so every path writes the same bits, and the portable build of it is the reference.

use crate::format::{BlockQ8_0Quad, BlockQ8Kx4, quantize_q8k_x4, quantize_row_q8_0};

use super::Kernels;
use super::delta::{DeltaRuleFn, delta_rule};
use super::fwht::{FwhtFn, fwht_blocks};

/// `out[i]` = the quad of `x[128 i .. 128 i + 128]`.
pub(crate) type Q8_0RowFn = fn(x: &[f32], out: &mut [BlockQ8_0Quad]);

/// `out[b]` = block `b` of the columns `cols` (each `k` long, at most four) interleaved.
pub(crate) type Q8KX4Fn = fn(cols: &[&[f32]], k: usize, out: &mut [BlockQ8Kx4]);

/// `gate[i] = silu(gate[i]) * up[i]`.
pub(crate) type SiluMulFn = fn(gate: &mut [f32], up: &[f32]);

/// A path's activation loops.
#[derive(Clone, Copy)]
pub(crate) struct ActKernels {
    q8_0_row: Q8_0RowFn,
    q8k_x4: Q8KX4Fn,
    silu_mul: SiluMulFn,
    pub(super) delta_rule: DeltaRuleFn,
    pub(super) fwht: FwhtFn,
}

impl ActKernels {
    /// The quantizers `q8_0_row` and `q8k_x4`, the SwiGLU `silu_mul`, DeltaNet's
    /// recurrence `delta_rule` and the Hadamard transform `fwht`.
    pub(crate) const fn new(
        q8_0_row: Q8_0RowFn,
        q8k_x4: Q8KX4Fn,
        silu_mul: SiluMulFn,
        delta_rule: DeltaRuleFn,
        fwht: FwhtFn,
    ) -> Self {
        ActKernels {
            q8_0_row,
            q8k_x4,
            silu_mul,
            delta_rule,
            fwht,
        }
    }
}

/// The reference: the portable build (on aarch64 NEON is the baseline, so this is vectorised).
pub(super) const SCALAR: ActKernels = ActKernels::new(
    quantize_row_q8_0,
    quantize_q8k_x4,
    silu_mul,
    delta_rule,
    fwht_blocks,
);

/// `gate[i] = silu(gate[i]) * up[i]` over the shorter of the two, with
/// [`crate::kernels::exp::silu`]: SwiGLU, the reference of every path's [`Kernels::silu_mul`].
#[inline(always)]
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = super::exp::silu(*g) * u;
    }
}

impl Kernels {
    /// Quantizes `x` (`x.len()` a multiple of 128) into `out` (`x.len() / 128` quads):
    /// bit-identical to [`quantize_row_q8_0`] on every path.
    ///
    /// # Panics
    /// If the lengths disagree.
    pub fn quantize_row_q8_0(&self, x: &[f32], out: &mut [BlockQ8_0Quad]) {
        (self.act.q8_0_row)(x, out)
    }

    /// Quantizes up to four columns of `k` values each into `k / 256` interleaved `q8_K x4`
    /// blocks (missing columns zero): bit-identical to [`quantize_q8k_x4`] on every path.
    ///
    /// # Panics
    /// As [`quantize_q8k_x4`].
    pub fn quantize_q8k_x4(&self, cols: &[&[f32]], k: usize, out: &mut [BlockQ8Kx4]) {
        (self.act.q8k_x4)(cols, k, out)
    }

    /// `gate[i] = silu(gate[i]) * up[i]` (SwiGLU) over the shorter of the two: bit-identical
    /// to [`silu_mul`] on every path.
    pub fn silu_mul(&self, gate: &mut [f32], up: &[f32]) {
        (self.act.silu_mul)(gate, up)
    }
}
