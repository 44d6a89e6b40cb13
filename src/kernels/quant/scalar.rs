//! The reference for ggml block types: [`crate::format::vec_dot`] per row and column.

use super::{QuantEntry, QuantKernels, Step};
use crate::format::{QuantBlock, vec_dot};
use crate::kernels::Gemm;

/// The scalar path's table: the reference for every type.
pub(in crate::kernels) static KERNELS: QuantKernels = QuantKernels::every::<Reference>();

/// The reference's steps.
struct Reference;

impl<B: QuantBlock> Step<B> for Reference {
    const ENTRY: QuantEntry<B> = QuantEntry::new(rows::<B>, "scalar");
}

fn rows<B: QuantBlock>(g: Gemm<'_, B, B::Act>) {
    let (x, nb, y, ncols, out, ld) = g.into_parts();
    for (r, row) in x.chunks_exact(nb).enumerate() {
        for (c, col) in y.chunks_exact(nb).take(ncols).enumerate() {
            out[c * ld + r] = vec_dot(row, col);
        }
    }
}
