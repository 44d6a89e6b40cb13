//! `pq2_0`: PrismML's ternary file format, 128 weights in 34 bytes.

use bytemuck::{Pod, Zeroable};

use super::{f16_to_f32, f32_to_f16};

/// Weights per `pq2_0` block.
pub const QK_PQ2_0: usize = 128;

/// One `pq2_0` block: `{ ggml_half d; uint8_t qs[32]; }`, scale first.
///
/// Weight `j` has code `u = (qs[j/4] >> 2*(j%4)) & 3` and value `(u - 1) * d`; codes 0, 1, 2, 3
/// mean -1, 0, +1, +2 (3 is never written by the reference quantizer but is legal in files).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockPq2_0 {
    /// Scale, IEEE fp16 bits.
    pub d: u16,
    /// 2-bit codes, four weights per byte, weight `j` at bits `2*(j%4)` of byte `j/4`.
    pub qs: [u8; 32],
}

impl BlockPq2_0 {
    /// The 2-bit code of weight `j` (0..128).
    #[inline]
    pub fn code(&self, j: usize) -> u8 {
        (self.qs[j / 4] >> (2 * (j % 4))) & 3
    }

    /// Sets the 2-bit code of weight `j` (only the low two bits of `u` are used).
    #[inline]
    pub fn set_code(&mut self, j: usize, u: u8) {
        let shift = 2 * (j % 4);
        self.qs[j / 4] = (self.qs[j / 4] & !(3 << shift)) | ((u & 3) << shift);
    }

    /// Builds a block from 128 codes and a scale given as fp16 bits.
    pub fn from_codes(codes: &[u8; QK_PQ2_0], d: u16) -> Self {
        let mut b = BlockPq2_0 {
            d,
            qs: [0; QK_PQ2_0 / 4],
        };
        for (j, &u) in codes.iter().enumerate() {
            b.set_code(j, u);
        }
        b
    }

    /// All 128 codes.
    pub fn codes(&self) -> [u8; QK_PQ2_0] {
        std::array::from_fn(|j| self.code(j))
    }

    /// The reference quantizer: `d = amax`, `code = clamp(round(x / d) + 1, 0, 3)`.
    pub fn quantize(x: &[f32; QK_PQ2_0]) -> Self {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let id = if amax > 0.0 { 1.0 / amax } else { 0.0 };
        let codes = std::array::from_fn(|j| ((x[j] * id).round() + 1.0).clamp(0.0, 3.0) as u8);
        Self::from_codes(&codes, f32_to_f16(amax))
    }

    /// Dequantizes the block: `(code - 1) * d`.
    pub fn dequantize(&self) -> [f32; QK_PQ2_0] {
        let d = f16_to_f32(self.d);
        std::array::from_fn(|j| (self.code(j) as i32 - 1) as f32 * d)
    }
}

/// Quantizes a row (`x.len()` a multiple of 128) into `out` (`x.len() / 128` blocks).
///
/// # Panics
/// If the lengths disagree; callers with untrusted shapes check them first.
pub fn quantize_row_pq2_0(x: &[f32], out: &mut [BlockPq2_0]) {
    super::quantize_row_by(x, out, QK_PQ2_0, |c| {
        BlockPq2_0::quantize(c.try_into().expect("chunk of 128"))
    });
}

/// Dequantizes blocks into `out` (`blocks.len() * 128` values).
///
/// # Panics
/// If the lengths disagree.
pub fn dequantize_row_pq2_0(blocks: &[BlockPq2_0], out: &mut [f32]) {
    super::dequantize_row_by(blocks, out, QK_PQ2_0, |b, chunk| {
        chunk.copy_from_slice(&b.dequantize())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_layout_matches_the_file_definition() {
        let mut b = BlockPq2_0::default();
        b.qs[5] = 0b11_10_01_00;
        assert_eq!(
            [b.code(20), b.code(21), b.code(22), b.code(23)],
            [0, 1, 2, 3]
        );
        assert_eq!(b.dequantize()[23], 2.0 * f16_to_f32(0));
    }

    #[test]
    fn quantize_is_lossless_for_ternary_rows() {
        let x: [f32; 128] = std::array::from_fn(|j| [-0.5f32, 0.0, 0.5][j % 3]);
        let b = BlockPq2_0::quantize(&x);
        assert_eq!(b.dequantize(), x);
        assert!(b.codes().iter().all(|&u| u < 3));
    }

    #[test]
    fn zero_block_quantizes_to_zero_weights() {
        let b = BlockPq2_0::quantize(&[0.0; 128]);
        assert_eq!(b.d, 0);
        assert!(b.codes().iter().all(|&u| u == 1));
    }

    #[test]
    fn code_three_dequantizes_to_plus_two() {
        let b = BlockPq2_0::from_codes(&[3; 128], f32_to_f16(0.25));
        assert!(b.dequantize().iter().all(|&v| v == 0.5));
    }
}
