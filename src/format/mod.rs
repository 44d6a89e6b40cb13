//! Byte layouts: the GGML type table ([`GgmlType`]), the file format (`pq2_0`), ggml's standard
//! block types ([`QuantBlock`]: Q4_0 ... Q6_K, each with its scalar reference), the activation formats (`q8_K`, `q8_K x4`, `q8_0`) and the
//! T2P row-pair layout, with exact conversions between them.
//!
//! Every block is `#[repr(C)]`, plain old data ([`bytemuck::Pod`]) and checked at compile time
//! against the size the C header and ggml use.

/// Evaluates `$body` with the type name `$B` bound to the block struct of the [`GgmlType`]
/// `$ty`, or `$other` for a type without one in the family named first: `ternary` (pq2_0,
/// tq2_0, tq1_0, ptq1_0, mainline's group-64 Q2_0: a [`TernaryBlock`]) or `quant` (ggml's
/// standard types: a [`QuantBlock`]). The one place that turns a type id into a block struct
/// for the generic code. A macro because the body is generic code over a type, and a type id
/// is known only at run time.
macro_rules! with_block_type {
    (ternary $($rest:tt)*) => {
        $crate::format::with_block_type!(@match { PQ2_0: BlockPq2_0, TQ2_0: BlockTq2_0,
            TQ1_0: BlockTq1_0, PTQ1_0: BlockPtq1_0, Q2_0_G64: BlockQ2_0g64 } $($rest)*)
    };
    (quant $($rest:tt)*) => {
        $crate::format::with_block_type!(@match { Q8_0: BlockQ8_0, Q4_0: BlockQ4_0,
            Q4_1: BlockQ4_1, Q5_0: BlockQ5_0, Q5_1: BlockQ5_1, Q4_K: BlockQ4K, Q5_K: BlockQ5K,
            Q6_K: BlockQ6K, Q2_0_G64: BlockQ2_0g64 } $($rest)*)
    };
    (@match { $($t:ident: $S:ident),* }
     $ty:expr, $B:ident => $body:expr, _ => $other:expr $(,)?) => {
        match $ty {
            $($crate::format::GgmlType::$t => {
                type $B = $crate::format::$S;
                $body
            })*
            _ => $other,
        }
    };
}
pub(crate) use with_block_type;

mod ggml_type;
pub mod i2s;
mod pq2_0;
mod q8_0;
mod q8k;
mod quants;
mod repack;
mod t2p;
mod ternary;
mod trits;

pub use ggml_type::GgmlType;
pub use pq2_0::{BlockPq2_0, QK_PQ2_0, dequantize_row_pq2_0, quantize_row_pq2_0};
pub use q8_0::{BlockQ8_0, BlockQ8_0Quad, GGML_Q8_0_BLOCK_BYTES, QK8_0, quantize_row_q8_0};
pub use q8k::{
    BlockQ8K, BlockQ8Kx4, QK_K, deinterleave_q8k_x4, dequantize_row_q8k, interleave_q8k_x4,
    quantize_q8k_x4, quantize_row_q8k,
};
#[cfg(target_arch = "x86_64")]
pub(crate) use quants::scale_min_k4;
pub use quants::{
    ActBlock, BlockQ2_0g64, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K,
    BlockQ6K, BlockQ8_0x2, BlockQ8_1, QuantBlock, dequantize_blocks, quantize_act,
    quantize_q8_0_blocks, vec_dot,
};
pub use repack::{
    check_matrix_shape, repack_pq2_0_in_place, repack_pq2_0_to_t2p, t2p_block_count,
    t2p_row_groups, unpack_t2p_to_pq2_0,
};
pub use t2p::{
    BlockT2p, BlockT2pG64, ROWS_PER_T2P, RowPairBlock, T2P_LAYOUT_KEY, T2P_LAYOUT_VERSION,
    T2pSlice, T2pVec, T2pWords, dequantize_t2p_row,
};
pub use ternary::{
    BlockPtq1_0, BlockTq1_0, BlockTq2_0, TernaryBlock, dequantize_row, repack_to_t2p,
};
pub use trits::{decode_trits, pack_trits, trit};

/// Converts IEEE half-precision bits to `f32` (exact).
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// Converts `f32` to IEEE half-precision bits, rounding to nearest even (as ggml's `GGML_FP32_TO_FP16`).
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

/// Converts bfloat16 bits to `f32` (exact: bf16 is the top half of an f32).
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    half::bf16::from_bits(bits).to_f32()
}

/// Quantizes a row `x` into `out`, block `i` from values `n * i .. n * i + n` by `quantize`:
/// the one loop of every fixed-size quantizer.
///
/// # Panics
/// If `x.len() != out.len() * n`.
#[inline(always)]
pub(crate) fn quantize_row_by<B>(
    x: &[f32],
    out: &mut [B],
    n: usize,
    quantize: impl Fn(&[f32]) -> B,
) {
    assert_eq!(x.len(), out.len() * n, "row length must be {n} per block");
    for (chunk, block) in x.chunks_exact(n).zip(out.iter_mut()) {
        *block = quantize(chunk);
    }
}

/// Dequantizes `blocks` into `out`, block `i` into values `n * i .. n * i + n` by `dequantize`:
/// the one loop of every fixed-size dequantizer.
///
/// # Panics
/// If `out.len() != blocks.len() * n`.
#[inline]
pub(crate) fn dequantize_row_by<B>(
    blocks: &[B],
    out: &mut [f32],
    n: usize,
    dequantize: impl Fn(&B, &mut [f32]),
) {
    assert_eq!(
        out.len(),
        blocks.len() * n,
        "output length must be {n} per block"
    );
    for (block, chunk) in blocks.iter().zip(out.chunks_exact_mut(n)) {
        dequantize(block, chunk);
    }
}
