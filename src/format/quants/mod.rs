//! ggml's standard (non-ternary) block types as files hold them, for the matrices that are not
//! ternary in the files users have: `llama-quantize`'s default mix (Q6_K head, Q4_K embedding,
//! Q4_0 / Q5_0 / Q5_1 / Q8_0 fallbacks) and community repacks (Q4_0 embedding and head).
//!
//! Each weight block names the activation block ggml multiplies it with (its `vec_dot_type`:
//! `q8_0` for Q4_0 / Q5_0 / Q8_0, `q8_1` for Q4_1 / Q5_1, `q8_K` for the K types) and gives
//! the scalar reference of that dot product in two steps: the exact integer sums
//! ([`QuantBlock::int_dot`]) and their float fold ([`QuantBlock::fold`]). SIMD kernels compute
//! the same integers their own way and call the same fold, so every path gives the same floats.

mod kquants;
mod legacy;

#[cfg(target_arch = "x86_64")]
pub(crate) use kquants::scale_min_k4;
pub use kquants::{BlockQ4K, BlockQ5K, BlockQ6K};
pub use legacy::{
    BlockQ2_0g64, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0x2, BlockQ8_1,
    quantize_q8_0_blocks,
};

use bytemuck::Pod;

use super::{BlockQ8_0, BlockQ8K, GgmlType, QK_K, QK8_0, f16_to_f32};

/// An activation block: the values one weight block multiplies, quantized as ggml's CPU
/// quantizer for that type does.
pub trait ActBlock: Pod + Send + Sync {
    /// Values per block.
    const VALUES: usize;
    /// Quantizes `x` (`VALUES` values) into a block.
    fn quantize(x: &[f32]) -> Self;
}

impl ActBlock for BlockQ8_0 {
    const VALUES: usize = QK8_0;
    fn quantize(x: &[f32]) -> Self {
        BlockQ8_0::quantize(x.try_into().expect("32 values"))
    }
}

impl ActBlock for BlockQ8K {
    const VALUES: usize = QK_K;
    fn quantize(x: &[f32]) -> Self {
        BlockQ8K::quantize(x.try_into().expect("256 values"))
    }
}

/// One block of a ggml weight type, with its scalar reference dot product.
pub trait QuantBlock: Pod + Send + Sync {
    /// The GGML type id.
    const TYPE: GgmlType;
    /// Weights per block (32 or 256).
    const WEIGHTS: usize;
    /// The activation block (ggml's `vec_dot_type`), covering the same `WEIGHTS` values.
    type Act: ActBlock;
    /// Writes the block's `WEIGHTS` values into `out`, exactly as ggml's `dequantize_row_*`.
    fn dequantize(&self, out: &mut [f32]);
    /// The exact integer sums of the block's dot product with `a`: `[isum, msum]`, where `msum`
    /// is the part the type's offsets or minimums contribute (0 where it has none).
    fn int_dot(&self, a: &Self::Act) -> [i32; 2];
    /// Adds the block's contribution, from the sums `int_dot` gives, to `acc`: the one float
    /// order every path uses.
    fn fold(&self, a: &Self::Act, sums: [i32; 2], acc: f32) -> f32;
    /// The block's fp16 scale and that of its minimum (`m`, `dmin`; 0 where it has none), as
    /// stored: what the folds read, and what the SIMD folds load four blocks at a time.
    fn scale_bits(&self) -> [u16; 2];
    /// Whether the block's float scales are finite (a file with inf/NaN scales is refused).
    fn scales_finite(&self) -> bool {
        self.scale_bits().iter().all(|&h| f16_to_f32(h).is_finite())
    }
}

const _: () = {
    assert!(BlockQ4_0::TYPE.has_block(32, size_of::<BlockQ4_0>()));
    assert!(BlockQ4_1::TYPE.has_block(32, size_of::<BlockQ4_1>()));
    assert!(BlockQ5_0::TYPE.has_block(32, size_of::<BlockQ5_0>()));
    assert!(BlockQ5_1::TYPE.has_block(32, size_of::<BlockQ5_1>()));
    assert!(BlockQ8_0::TYPE.has_block(32, size_of::<BlockQ8_0>()));
    assert!(BlockQ4K::TYPE.has_block(256, size_of::<BlockQ4K>()));
    assert!(BlockQ5K::TYPE.has_block(256, size_of::<BlockQ5K>()));
    assert!(BlockQ6K::TYPE.has_block(256, size_of::<BlockQ6K>()));
    assert!(GgmlType(9).has_block(32, size_of::<BlockQ8_1>()));
    assert!(BlockQ2_0g64::TYPE.has_block(64, size_of::<BlockQ2_0g64>()));
};

/// The scalar reference: the dot product of one row of weight blocks with its activation
/// blocks, folded block after block from 0.
pub fn vec_dot<B: QuantBlock>(w: &[B], a: &[B::Act]) -> f32 {
    assert_eq!(w.len(), a.len(), "one activation block per weight block");
    w.iter()
        .zip(a)
        .fold(0.0, |acc, (b, y)| b.fold(y, b.int_dot(y), acc))
}

/// Dequantizes a row of blocks into `out` (`blocks.len() * WEIGHTS` values).
pub fn dequantize_blocks<B: QuantBlock>(blocks: &[B], out: &mut [f32]) {
    super::dequantize_row_by(blocks, out, B::WEIGHTS, B::dequantize);
}

/// Quantizes a row `x` into activation blocks (`x.len() / VALUES` of them).
pub fn quantize_act<A: ActBlock>(x: &[f32], out: &mut [A]) {
    super::quantize_row_by(x, out, A::VALUES, A::quantize);
}

/// `sum_i w[i] * y[i]` over equal-length int8 slices (the scalar integer dot every block uses).
#[inline]
pub(crate) fn idot(w: &[i8], y: &[i8]) -> i32 {
    w.iter().zip(y).map(|(&a, &b)| a as i32 * b as i32).sum()
}
