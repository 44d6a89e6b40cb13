//! The reference for ggml block types: [`crate::format::vec_dot`] per row and column.

use super::QuantKernels;
use crate::format::{QuantBlock, vec_dot};
use crate::kernels::Gemm;

pub(super) static KERNELS: QuantKernels = QuantKernels {
    name: "scalar",
    inherits: None,
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

fn rows<B: QuantBlock>(g: Gemm<'_, B, B::Act>) {
    let (x, nb, y, ncols, out, ld) = g.into_parts();
    for (r, row) in x.chunks_exact(nb).enumerate() {
        for (c, col) in y.chunks_exact(nb).take(ncols).enumerate() {
            out[c * ld + r] = vec_dot(row, col);
        }
    }
}
