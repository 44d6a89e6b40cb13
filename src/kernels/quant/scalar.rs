//! The reference for ggml block types: [`crate::format::vec_dot`] per row and column.

use super::{QuantEntry, QuantKernels};
use crate::format::{QuantBlock, vec_dot};
use crate::kernels::Gemm;

/// The scalar path's table: the reference for every type.
pub(in crate::kernels) static KERNELS: QuantKernels = QuantKernels {
    q4_0: entry(),
    q4_1: entry(),
    q5_0: entry(),
    q5_1: entry(),
    q8_0: entry(),
    q4_k: entry(),
    q5_k: entry(),
    q6_k: entry(),
    q2_0_g64: entry(),
};

/// The reference's entry for `B`, which the paths without a step of their own for `B` name.
pub(in crate::kernels) const fn entry<B: QuantBlock>() -> QuantEntry<B> {
    QuantEntry::new(rows::<B>, "scalar")
}

fn rows<B: QuantBlock>(g: Gemm<'_, B, B::Act>) {
    let (x, nb, y, ncols, out, ld) = g.into_parts();
    for (r, row) in x.chunks_exact(nb).enumerate() {
        for (c, col) in y.chunks_exact(nb).take(ncols).enumerate() {
            out[c * ld + r] = vec_dot(row, col);
        }
    }
}
