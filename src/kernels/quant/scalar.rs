//! The reference for ggml block types: [`crate::format::vec_dot`] per row and column.

use super::QuantKernels;
use crate::format::{QuantBlock, vec_dot};

pub(super) static KERNELS: QuantKernels = QuantKernels {
    name: "scalar",
    q4_0: rows,
    q4_1: rows,
    q5_0: rows,
    q5_1: rows,
    q8_0: rows,
    q4_k: rows,
    q5_k: rows,
    q6_k: rows,
    q2_0_g64: rows,
};

fn rows<B: QuantBlock>(w: &[B], nb: usize, y: &[B::Act], ncols: usize, out: &mut [f32], ld: usize) {
    for (r, row) in w.chunks_exact(nb).enumerate() {
        for (c, col) in y.chunks_exact(nb).take(ncols).enumerate() {
            out[c * ld + r] = vec_dot(row, col);
        }
    }
}
