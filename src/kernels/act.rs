//! Activation quantization as an entry of each path's table: a row of floats into the `q8_0`
//! quads the T2P kernels read ([`Kernels::quantize_row_q8_0`]). There is one algorithm,
//! [`crate::format::quantize_row_q8_0`] (ggml's x86 rounding, exactly); a path's entry is that
//! same code compiled for the path's features, so every path writes the same bytes, and the
//! portable build of it is the reference.

use crate::format::{BlockQ8_0Quad, quantize_row_q8_0};

use super::Kernels;

/// `out[i]` = the quad of `x[128 i .. 128 i + 128]`.
pub(crate) type Q8_0RowFn = fn(x: &[f32], out: &mut [BlockQ8_0Quad]);

/// A path's activation quantizer.
#[derive(Clone, Copy)]
pub(crate) struct ActKernels {
    q8_0_row: Q8_0RowFn,
}

impl ActKernels {
    /// The quantizer `q8_0_row`.
    pub(crate) const fn new(q8_0_row: Q8_0RowFn) -> Self {
        ActKernels { q8_0_row }
    }
}

/// The reference: the portable build (on aarch64 NEON is the baseline, so this is vectorised).
pub(super) const SCALAR: ActKernels = ActKernels::new(quantize_row_q8_0);

impl Kernels {
    /// Quantizes `x` (`x.len()` a multiple of 128) into `out` (`x.len() / 128` quads):
    /// bit-identical to [`quantize_row_q8_0`] on every path.
    ///
    /// # Panics
    /// If the lengths disagree.
    pub fn quantize_row_q8_0(&self, x: &[f32], out: &mut [BlockQ8_0Quad]) {
        (self.act.q8_0_row)(x, out)
    }
}
