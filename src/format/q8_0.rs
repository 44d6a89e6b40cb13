//! `q8_0` activations grouped per T2P block: llama.cpp's activation type for `pq2_0` weights
//! (blocks of 32 int8 with an fp16 scale), four blocks to one 128-weight T2P block, with the
//! scales widened to f32 and the block sums precomputed for the kernels.
//!
//! This is the "llama.cpp numerics" activation mode: a scale per 32 values instead of q8_K's
//! one per 256, so half the quantization noise, at the price of four float multiplies per
//! block instead of one (see [`crate::kernels::Kernels::gemv_q8_0`]).

use bytemuck::{Pod, Zeroable};

use super::{GgmlType, QK_PQ2_0, f16_to_f32, f32_to_f16};

/// Values per `q8_0` block (ggml's `QK8_0`).
pub const QK8_0: usize = 32;

/// One ggml `block_q8_0` as stored in files: `{ ggml_half d; int8_t qs[32]; }`, value `qs[i] * d`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ8_0 {
    /// Scale, IEEE fp16 bits.
    pub d: u16,
    /// Quantized values.
    pub qs: [i8; QK8_0],
}

const _: () = assert!(GgmlType::Q8_0.has_block(QK8_0, std::mem::size_of::<BlockQ8_0>()));

impl BlockQ8_0 {
    /// Dequantizes the block into `out` (32 values): `qs[i] * d`.
    pub fn dequantize_into(&self, out: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (o, &q) in out[..QK8_0].iter_mut().zip(&self.qs) {
            *o = q as f32 * d;
        }
    }
}

/// Four consecutive `q8_0` blocks: the 128 activations one T2P block multiplies (160 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8_0Quad {
    /// Scale of each 32-value block (an fp16 value, held as f32): value `i` is `qs[i] * d[i / 32]`.
    pub d: [f32; 4],
    /// `sums[j]` = sum of `qs[32j .. 32j + 32]`.
    pub sums: [i32; 4],
    /// Quantized values.
    pub qs: [i8; 128],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0Quad>() == 160);

impl Default for BlockQ8_0Quad {
    fn default() -> Self {
        Self::zeroed()
    }
}

impl BlockQ8_0Quad {
    /// Builds a block from raw values and four scales, computing `sums`.
    #[inline(always)]
    pub fn from_qs(qs: [i8; QK_PQ2_0], d: [f32; 4]) -> Self {
        // A loop, not `array::from_fn`: its closure stays a call when inlined into a kernel
        // path's build (`quantize_row_q8_0`).
        let mut sums = [0i32; 4];
        for (s, q) in sums.iter_mut().zip(qs.chunks_exact(QK8_0)) {
            *s = q.iter().map(|&q| q as i32).sum();
        }
        BlockQ8_0Quad { d, sums, qs }
    }

    /// Quantizes 128 values exactly as ggml's x86 `quantize_row_q8_0` does per 32 (see
    /// [`BlockQ8_0::quantize`]).
    #[inline(always)]
    pub fn quantize(x: &[f32; QK_PQ2_0]) -> Self {
        let mut qs = [0i8; QK_PQ2_0];
        let mut d = [0.0f32; 4];
        for (j, (chunk, q)) in x
            .chunks_exact(QK8_0)
            .zip(qs.chunks_exact_mut(QK8_0))
            .enumerate()
        {
            let (q32, dj) = quantize_32(chunk.try_into().expect("32 values"));
            q.copy_from_slice(&q32);
            d[j] = f16_to_f32(f32_to_f16(dj));
        }
        Self::from_qs(qs, d)
    }
}

impl BlockQ8_0 {
    /// [`BlockQ8_0::quantize`] of a slice of 32 values.
    ///
    /// # Panics
    /// If `x` does not hold 32 values.
    pub fn quantize_slice(x: &[f32]) -> Self {
        Self::quantize(x.try_into().expect("32 values"))
    }

    /// Quantizes 32 values exactly as ggml's x86 `quantize_row_q8_0`: `amax` sets
    /// `d = amax / 127` (stored as fp16) and `q = round_half_even(x * (127 / amax))`; an
    /// all-zero block gets `d = 0` and zero values.
    pub fn quantize(x: &[f32; QK8_0]) -> Self {
        let (qs, d) = quantize_32(x);
        BlockQ8_0 {
            d: f32_to_f16(d),
            qs,
        }
    }
}

/// The values and the (not yet fp16-rounded) scale `amax / 127` of 32 values, as ggml's x86
/// q8_0 / q8_1 quantizers compute them.
#[inline(always)]
pub(crate) fn quantize_32(x: &[f32; QK8_0]) -> ([i8; QK8_0], f32) {
    // Plain loops over the fixed arrays, so that the compiler vectorizes both at the baseline
    // ISA (an `array::map` closure was not inlined: a call per block).
    // The largest |v| as the largest of the magnitude bits: for finite values (and infinity)
    // their order as integers is their order as floats, and an integer max vectorizes where
    // `f32::max` (which must skip NaN) does not.
    let mut amax_bits = 0u32;
    for v in x {
        amax_bits = amax_bits.max(v.to_bits() & 0x7fff_ffff);
    }
    let amax = f32::from_bits(amax_bits);
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut qs = [0i8; QK8_0];
    for (q, &v) in qs.iter_mut().zip(x) {
        // |v * id| <= 127 up to rounding; the clamp mirrors ggml's saturating packs.
        *q = round_half_even(v * id).clamp(-128, 127) as i8;
    }
    (qs, amax / 127.0)
}

/// Round half to even through the float mantissa: equal to `f32::round_ties_even` for
/// |x| < 2^22 (the quantizer's values are within +-128), without a libm call, so the loop
/// vectorizes. NaN (from a non-finite input) gives an arbitrary value, as in ggml.
#[inline(always)]
fn round_half_even(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Bytes of one ggml `block_q8_0` ([`BlockQ8_0`]).
pub const GGML_Q8_0_BLOCK_BYTES: usize = std::mem::size_of::<BlockQ8_0>();

impl BlockQ8_0Quad {
    /// Four ggml `block_q8_0` (as ggml's own quantizer wrote them, native byte order) as one
    /// quad, exactly: the scales widened to f32, the sums computed, the values copied.
    pub fn from_ggml(blocks: &[u8; 4 * GGML_Q8_0_BLOCK_BYTES]) -> Self {
        let mut qs = [0i8; QK_PQ2_0];
        let mut d = [0.0f32; 4];
        for (j, blk) in blocks.chunks_exact(GGML_Q8_0_BLOCK_BYTES).enumerate() {
            // The caller's bytes need not be 2-byte aligned.
            let blk: BlockQ8_0 = bytemuck::pod_read_unaligned(blk);
            d[j] = f16_to_f32(blk.d);
            qs[QK8_0 * j..QK8_0 * (j + 1)].copy_from_slice(&blk.qs);
        }
        Self::from_qs(qs, d)
    }
}

/// Quantizes a row (`x.len()` a multiple of 128) into `out` (`x.len() / 128` blocks).
///
/// # Panics
/// If the lengths disagree.
///
/// Inlined everywhere: the kernel paths compile this same code for their own features
/// (`crate::kernels`' activation entries). A plain loop rather than `quantize_row_by`'s
/// closure, which would stay a call compiled without them.
#[inline(always)]
pub fn quantize_row_q8_0(x: &[f32], out: &mut [BlockQ8_0Quad]) {
    assert_eq!(
        x.len(),
        out.len() * QK_PQ2_0,
        "row length must be 128 per block"
    );
    for (chunk, block) in x.chunks_exact(QK_PQ2_0).zip(out.iter_mut()) {
        *block = BlockQ8_0Quad::quantize(chunk.try_into().expect("chunk of 128"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_follows_ggml_per_32() {
        let mut x = [0.0f32; 128];
        x[0] = -2.0; // amax of block 0: d = 2/127, id = 63.5
        x[1] = 0.5 / 63.5; // 0.5 rounds to even: 0
        x[2] = 1.5 / 63.5; // 1.5 rounds to even: 2
        x[3] = 1.0;
        x[40] = 0.25; // block 1: amax 0.25
        x[41] = -0.125;
        let b = BlockQ8_0Quad::quantize(&x);
        assert_eq!(&b.qs[..4], &[-127, 0, 2, 64]);
        assert_eq!(&b.qs[40..42], &[127, -64]);
        assert_eq!(b.d[0], f16_to_f32(f32_to_f16(2.0 / 127.0)));
        assert_eq!(b.d[2], 0.0);
        assert_eq!(b.sums, [-127 + 2 + 64, 127 - 64, 0, 0]);
    }

    #[test]
    fn rounding_matches_round_ties_even() {
        for i in -130_000..=130_000 {
            let x = i as f32 / 1000.0;
            assert_eq!(round_half_even(x), x.round_ties_even() as i32, "{x}");
        }
        for x in [0.5f32, 1.5, 2.5, -0.5, -1.5, -2.5, 127.5, -127.5, 126.49999] {
            assert_eq!(round_half_even(x), x.round_ties_even() as i32, "{x}");
        }
    }

    #[test]
    fn all_zero_input_gives_zero_block() {
        assert_eq!(
            BlockQ8_0Quad::quantize(&[0.0; 128]),
            BlockQ8_0Quad::zeroed()
        );
    }
}
