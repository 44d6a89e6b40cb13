//! Kernels for ggml's standard block types ([`QuantBlock`]: Q4_0 ... Q6_K), multiplied as the
//! file holds them: the LM heads, token tables and fallback matrices of the files users have.
//!
//! One entry per type, [`Kernels::quant_rows`]: `rows` rows of `nb` blocks times `ncols`
//! activation columns. Each row's blocks are read from memory once for all columns. Every path
//! computes the block's exact integer sums and folds them with the float expression of
//! [`QuantBlock::fold`], block after block, so all paths give bit-identical results.

pub(super) mod scalar;

use super::{Gemm, Kernels};
use crate::format::{
    BlockQ2_0g64, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, GgmlType, QuantBlock,
};

/// `x`: `rows * nb` blocks (row `r` at `r * nb`), `y`: `ncols * nb` activation blocks (column
/// `c` at `c * nb`); writes `out[c * ld + r]`.
pub(crate) type QuantRowsFn<B> = fn(Gemm<'_, B, <B as QuantBlock>::Act>);

/// One type's kernel in a path's table, with the name of the path whose step it is (another
/// path's, or the scalar reference's, where the table's own path has none for the type).
#[derive(Clone, Copy)]
pub struct QuantEntry<B: QuantBlock> {
    rows: QuantRowsFn<B>,
    path: &'static str,
}

impl<B: QuantBlock> QuantEntry<B> {
    /// `rows`, the step of the path named `path`.
    pub(crate) const fn new(rows: QuantRowsFn<B>, path: &'static str) -> Self {
        QuantEntry { rows, path }
    }
}

/// The kernels of one path for ggml block types, one per type (opaque: reached through
/// [`Kernels::quant_rows`]).
pub struct QuantKernels {
    pub(crate) q4_0: QuantEntry<BlockQ4_0>,
    pub(crate) q4_1: QuantEntry<BlockQ4_1>,
    pub(crate) q5_0: QuantEntry<BlockQ5_0>,
    pub(crate) q5_1: QuantEntry<BlockQ5_1>,
    pub(crate) q8_0: QuantEntry<BlockQ8_0>,
    pub(crate) q4_k: QuantEntry<BlockQ4K>,
    pub(crate) q5_k: QuantEntry<BlockQ5K>,
    pub(crate) q6_k: QuantEntry<BlockQ6K>,
    pub(crate) q2_0_g64: QuantEntry<BlockQ2_0g64>,
}

/// A path's step for the block type `B`: the entry it puts in its table.
pub(crate) trait Step<B: QuantBlock> {
    /// The step, named after the path.
    const ENTRY: QuantEntry<B>;
}

impl QuantKernels {
    /// The table of a path `P` with a step of its own for every type.
    pub(crate) const fn every<P>() -> QuantKernels
    where
        P: Step<BlockQ4_0> + Step<BlockQ4_1> + Step<BlockQ5_0> + Step<BlockQ5_1>,
        P: Step<BlockQ8_0> + Step<BlockQ4K> + Step<BlockQ5K> + Step<BlockQ6K>,
        P: Step<BlockQ2_0g64>,
    {
        QuantKernels {
            q4_0: <P as Step<_>>::ENTRY,
            q4_1: <P as Step<_>>::ENTRY,
            q5_0: <P as Step<_>>::ENTRY,
            q5_1: <P as Step<_>>::ENTRY,
            q8_0: <P as Step<_>>::ENTRY,
            q4_k: <P as Step<_>>::ENTRY,
            q5_k: <P as Step<_>>::ENTRY,
            q6_k: <P as Step<_>>::ENTRY,
            q2_0_g64: <P as Step<_>>::ENTRY,
        }
    }

    /// The name of the path whose step runs `ty` (the scalar reference's for a type without
    /// kernels).
    pub(super) fn path(&self, ty: GgmlType) -> &'static str {
        match ty {
            BlockQ4_0::TYPE => self.q4_0.path,
            BlockQ4_1::TYPE => self.q4_1.path,
            BlockQ5_0::TYPE => self.q5_0.path,
            BlockQ5_1::TYPE => self.q5_1.path,
            BlockQ8_0::TYPE => self.q8_0.path,
            BlockQ4K::TYPE => self.q4_k.path,
            BlockQ5K::TYPE => self.q5_k.path,
            BlockQ6K::TYPE => self.q6_k.path,
            BlockQ2_0g64::TYPE => self.q2_0_g64.path,
            _ => "scalar",
        }
    }
}

/// A block type with kernels: its entry in a path's table.
pub trait QuantKernel: QuantBlock {
    #[doc(hidden)]
    const ENTRY: Pick<Self>;
}

/// Where a type's entry is in a path's table.
#[doc(hidden)]
pub type Pick<B> = fn(&QuantKernels) -> &QuantEntry<B>;

impl QuantKernel for BlockQ4_0 {
    const ENTRY: Pick<Self> = |k| &k.q4_0;
}

impl QuantKernel for BlockQ4_1 {
    const ENTRY: Pick<Self> = |k| &k.q4_1;
}

impl QuantKernel for BlockQ5_0 {
    const ENTRY: Pick<Self> = |k| &k.q5_0;
}

impl QuantKernel for BlockQ5_1 {
    const ENTRY: Pick<Self> = |k| &k.q5_1;
}

impl QuantKernel for BlockQ8_0 {
    const ENTRY: Pick<Self> = |k| &k.q8_0;
}

impl QuantKernel for BlockQ4K {
    const ENTRY: Pick<Self> = |k| &k.q4_k;
}

impl QuantKernel for BlockQ5K {
    const ENTRY: Pick<Self> = |k| &k.q5_k;
}

impl QuantKernel for BlockQ6K {
    const ENTRY: Pick<Self> = |k| &k.q6_k;
}

impl QuantKernel for BlockQ2_0g64 {
    const ENTRY: Pick<Self> = |k| &k.q2_0_g64;
}

impl Kernels {
    /// `out[c * ld + r] = dot(row r of x, column c of y)` for the `x.len() / nb` rows of ggml
    /// blocks `x` and the `ncols` activation columns `y` (column `c` at `c * nb`).
    ///
    /// # Panics
    /// If the slice lengths do not match that shape.
    pub fn quant_rows<B: QuantKernel>(&self, g: Gemm<'_, B, B::Act>) {
        let rows = g.assert_shape(1);
        assert_eq!(g.y.len(), g.ncols * g.nb, "activation blocks");
        if g.ncols > 0 && rows > 0 {
            (B::ENTRY(self.quant).rows)(g)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{Isa, quant_path_name};

    #[test]
    fn path_names_follow_the_types_with_their_own_steps() {
        assert_eq!(quant_path_name(Isa::Scalar, GgmlType::Q6_K), "scalar");
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(quant_path_name(Isa::Avx2, GgmlType::Q4_K), "avx2");
            assert_eq!(quant_path_name(Isa::AvxVnni, GgmlType::Q6_K), "avx2");
            assert_eq!(
                quant_path_name(Isa::Avx512Vnni, GgmlType::Q6_K),
                "avx512-vnni"
            );
            assert_eq!(
                quant_path_name(Isa::Avx512Vnni, GgmlType::Q4_0),
                "avx512-vnni"
            );
            assert_eq!(quant_path_name(Isa::AvxVnni, GgmlType::Q5_1), "avx-vnni");
            assert_eq!(quant_path_name(Isa::Avx512Vnni, GgmlType::Q8_0), "avx2");
        }
        #[cfg(target_arch = "aarch64")]
        {
            assert_eq!(quant_path_name(Isa::Neon, GgmlType::Q6_K), "scalar");
            assert_eq!(
                quant_path_name(Isa::NeonI8mm, GgmlType::Q6_K),
                "neon-dotprod"
            );
            assert_eq!(quant_path_name(Isa::NeonDotprod, GgmlType::Q4_K), "scalar");
        }
    }
}
