//! Kernels for ggml's standard block types ([`QuantBlock`]: Q4_0 ... Q6_K), multiplied as the
//! file holds them: the LM heads, token tables and fallback matrices of the files users have.
//!
//! One entry per type, [`Kernels::quant_rows`]: `rows` rows of `nb` blocks times `ncols`
//! activation columns. Each row's blocks are read from memory once for all columns. Every path
//! computes the block's exact integer sums and folds them with the float expression of
//! [`QuantBlock::fold`], block after block, so all paths give bit-identical results.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod zmm;

use super::{Gemm, Isa, Kernels};
use crate::format::{
    BlockQ2_0g64, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, GgmlType, QuantBlock,
};

/// `x`: `rows * nb` blocks (row `r` at `r * nb`), `y`: `ncols * nb` activation blocks (column
/// `c` at `c * nb`); writes `out[c * ld + r]`.
pub(crate) type QuantRowsFn<B> = fn(Gemm<'_, B, <B as QuantBlock>::Act>);

/// The kernels of one path for ggml block types, one per type (opaque: reached through
/// [`Kernels::quant_rows`]).
pub struct QuantKernels {
    /// The path's name, for `libt2p check` / `info`.
    name: &'static str,
    /// Where this table takes some types' entries from another one's: that table, and the
    /// types this one has its own steps for.
    inherits: Option<(&'static QuantKernels, &'static [GgmlType])>,
    q4_0: QuantRowsFn<BlockQ4_0>,
    q4_1: QuantRowsFn<BlockQ4_1>,
    q5_0: QuantRowsFn<BlockQ5_0>,
    q5_1: QuantRowsFn<BlockQ5_1>,
    q8_0: QuantRowsFn<BlockQ8_0>,
    q4_k: QuantRowsFn<BlockQ4K>,
    q5_k: QuantRowsFn<BlockQ5K>,
    q6_k: QuantRowsFn<BlockQ6K>,
    q2_0_g64: QuantRowsFn<BlockQ2_0g64>,
}

/// A block type with kernels: picks its entry from a path's table.
pub trait QuantKernel: QuantBlock {
    #[doc(hidden)]
    fn pick(k: &QuantKernels) -> QuantRowsFn<Self>;
}

macro_rules! quant_kernel {
    ($($B:ty => $field:ident),* $(,)?) => {
        $(impl QuantKernel for $B {
            fn pick(k: &QuantKernels) -> QuantRowsFn<Self> {
                k.$field
            }
        })*
    };
}
quant_kernel!(
    BlockQ4_0 => q4_0, BlockQ4_1 => q4_1, BlockQ5_0 => q5_0, BlockQ5_1 => q5_1,
    BlockQ8_0 => q8_0, BlockQ4K => q4_k, BlockQ5K => q5_k, BlockQ6K => q6_k,
    BlockQ2_0g64 => q2_0_g64,
);

/// The table of `isa`: AVX2 for the AVX2 and AVX-VNNI paths, AVX-512 for Q6_K on the AVX-512
/// one (its other types AVX2), SDOT for the aarch64 paths with dotprod, the scalar reference
/// elsewhere.
fn table(isa: Isa) -> &'static QuantKernels {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => &avx2::KERNELS,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => &zmm::KERNELS,
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod | Isa::NeonI8mm => &neon::KERNELS,
        _ => &scalar::KERNELS,
    }
}

/// Which implementation `isa` runs for the ggml block type `ty` (for `libt2p info` / `bench`).
pub fn quant_path_name(isa: Isa, ty: GgmlType) -> &'static str {
    let mut t = table(isa);
    while let Some((base, own)) = t.inherits {
        if own.contains(&ty) {
            break;
        }
        t = base;
    }
    t.name
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
            (B::pick(table(self.isa())))(g)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(quant_path_name(Isa::Avx512Vnni, GgmlType::Q4_0), "avx2");
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
