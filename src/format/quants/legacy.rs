//! ggml's 32-weight block types (Q4_0, Q4_1, Q5_0, Q5_1; Q8_0 lives in `q8_0.rs`) and the
//! `q8_1` activations of Q4_1 / Q5_1, with ggml's scalar dot products.
//!
//! Integer sums are exact; each fold is the float expression of ggml's scalar
//! `ggml_vec_dot_*_q8_*` for one block, evaluated in the same order.

use bytemuck::{Pod, Zeroable};

use super::super::{BlockQ8_0, GgmlType, QK8_0, f16_to_f32, f32_to_f16};
use super::{ActBlock, QuantBlock, idot};

/// `{ ggml_half d; uint8_t qs[16]; }`: weight `j` is `(nibble_j - 8) * d`, nibbles `j < 16` in
/// the low halves of `qs`, `j >= 16` in the high halves.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ4_0 {
    /// Scale, fp16 bits.
    pub d: u16,
    /// Packed nibbles.
    pub qs: [u8; 16],
}

/// `{ ggml_half d, m; uint8_t qs[16]; }`: weight `j` is `nibble_j * d + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ4_1 {
    /// Scale, fp16 bits.
    pub d: u16,
    /// Minimum, fp16 bits.
    pub m: u16,
    /// Packed nibbles.
    pub qs: [u8; 16],
}

/// `{ ggml_half d; uint8_t qh[4]; uint8_t qs[16]; }`: weight `j` is `(q_j - 16) * d` with the
/// fifth bit of `q_j` in bit `j` of the little-endian word `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ5_0 {
    /// Scale, fp16 bits.
    pub d: u16,
    /// Fifth bits, a little-endian `u32`.
    pub qh: [u8; 4],
    /// Packed low nibbles.
    pub qs: [u8; 16],
}

/// `{ ggml_half d, m; uint8_t qh[4]; uint8_t qs[16]; }`: weight `j` is `q_j * d + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ5_1 {
    /// Scale, fp16 bits.
    pub d: u16,
    /// Minimum, fp16 bits.
    pub m: u16,
    /// Fifth bits, a little-endian `u32`.
    pub qh: [u8; 4],
    /// Packed low nibbles.
    pub qs: [u8; 16],
}

/// ggml's `block_q8_1`: `{ ggml_half d, s; int8_t qs[32]; }` with `s = d * sum(qs)`, the
/// activations of Q4_1 / Q5_1.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ8_1 {
    /// Scale, fp16 bits.
    pub d: u16,
    /// `d * sum(qs)` (with `d` before its fp16 rounding), fp16 bits.
    pub s: u16,
    /// Quantized values.
    pub qs: [i8; QK8_0],
}

impl ActBlock for BlockQ8_1 {
    const VALUES: usize = QK8_0;

    /// As ggml's x86 `quantize_row_q8_1`: `d = amax / 127`, `q = round_half_even(x * 127 / amax)`,
    /// `s = d * sum(q)`; an all-zero block is zeros.
    fn quantize(x: &[f32]) -> Self {
        let (qs, d) = super::super::q8_0::quantize_32(x.try_into().expect("32 values"));
        let sum: i32 = qs.iter().map(|&q| q as i32).sum();
        BlockQ8_1 {
            d: f32_to_f16(d),
            s: f32_to_f16(d * sum as f32),
            qs,
        }
    }
}

/// Quantizes `x` into ggml `block_q8_0`s (`x.len() / 32` of them), as ggml's x86 quantizer.
pub fn quantize_q8_0_blocks(x: &[f32], out: &mut [BlockQ8_0]) {
    super::quantize_act(x, out);
}

/// The 32 values of packed nibbles: low halves then high halves.
#[inline]
fn nibbles(qs: &[u8; 16]) -> [u8; 32] {
    std::array::from_fn(|j| if j < 16 { qs[j] & 0xF } else { qs[j - 16] >> 4 })
}

/// The 32 five-bit values of packed nibbles and the `qh` word.
#[inline]
fn fives(qs: &[u8; 16], qh: [u8; 4]) -> [u8; 32] {
    let qh = u32::from_le_bytes(qh);
    let lo = nibbles(qs);
    std::array::from_fn(|j| lo[j] | (((qh >> j) & 1) << 4) as u8)
}

fn signed(u: [u8; 32], offset: u8) -> [i8; 32] {
    u.map(|v| v as i8 - offset as i8)
}

/// The scales of a legacy block: [`Scaled`] or [`Offset`], which decide the weight's float
/// expression, the activation type and ggml's fold.
pub trait LegacyScale {
    /// The activation block ggml multiplies the type with.
    type Act: ActBlock;
    /// Writes the weights of the block's integer values `q`.
    fn weights(&self, q: [i8; 32], out: &mut [f32]);
    /// ggml's fold of one block's integer sum `isum` into `acc`.
    fn fold(&self, a: &Self::Act, isum: i32, acc: f32) -> f32;
    /// The fp16 bits of the scale and of the minimum (0 where there is none).
    fn bits(&self) -> [u16; 2];
    /// The activation block's 32 integer values.
    fn act_values(a: &Self::Act) -> &[i8; 32];
}

/// Weight `q * d` (Q4_0, Q5_0, Q8_0), activations `q8_0`; the fp16 bits of `d`.
pub struct Scaled(u16);

/// Weight `q * d + m` (Q4_1, Q5_1), activations `q8_1`; the fp16 bits of `d` and `m`.
pub struct Offset(u16, u16);

impl LegacyScale for Scaled {
    type Act = BlockQ8_0;
    fn act_values(a: &BlockQ8_0) -> &[i8; 32] {
        &a.qs
    }
    fn weights(&self, q: [i8; 32], out: &mut [f32]) {
        let d = f16_to_f32(self.0);
        for (o, q) in out.iter_mut().zip(q) {
            *o = q as f32 * d;
        }
    }
    /// `acc + isum * (d_w * d_a)`.
    fn fold(&self, a: &BlockQ8_0, isum: i32, acc: f32) -> f32 {
        acc + isum as f32 * (f16_to_f32(self.0) * f16_to_f32(a.d))
    }
    fn bits(&self) -> [u16; 2] {
        [self.0, 0]
    }
}

impl LegacyScale for Offset {
    type Act = BlockQ8_1;
    fn act_values(a: &BlockQ8_1) -> &[i8; 32] {
        &a.qs
    }
    fn weights(&self, q: [i8; 32], out: &mut [f32]) {
        let (d, m) = (f16_to_f32(self.0), f16_to_f32(self.1));
        for (o, q) in out.iter_mut().zip(q) {
            *o = q as f32 * d + m;
        }
    }
    /// `acc + ((d_w * d_a) * isum + m_w * s_a)`.
    fn fold(&self, a: &BlockQ8_1, isum: i32, acc: f32) -> f32 {
        let dd = f16_to_f32(self.0) * f16_to_f32(a.d);
        acc + (dd * isum as f32 + f16_to_f32(self.1) * f16_to_f32(a.s))
    }
    fn bits(&self) -> [u16; 2] {
        [self.0, self.1]
    }
}

/// A legacy 32-weight type: its integer values and its [`LegacyScale`], all the types differ
/// in. Every one is a [`QuantBlock`] through the one implementation below.
pub trait LegacyBlock: Pod + Send + Sync {
    /// The GGML type id.
    const TYPE: GgmlType;
    /// The scale's type, which decides the activations, the weights and the fold.
    type Scale: LegacyScale;
    /// The block's scale.
    fn scale(&self) -> Self::Scale;
    /// The block's 32 integer values.
    fn values(&self) -> [i8; 32];
}

impl<B: LegacyBlock> QuantBlock for B {
    const TYPE: GgmlType = <B as LegacyBlock>::TYPE;
    const WEIGHTS: usize = QK8_0;
    type Act = <B::Scale as LegacyScale>::Act;

    fn dequantize(&self, out: &mut [f32]) {
        self.scale().weights(self.values(), out);
    }

    fn int_dot(&self, a: &Self::Act) -> [i32; 2] {
        [idot(&self.values(), B::Scale::act_values(a)), 0]
    }

    fn fold(&self, a: &Self::Act, [isum, _]: [i32; 2], acc: f32) -> f32 {
        self.scale().fold(a, isum, acc)
    }

    fn scale_bits(&self) -> [u16; 2] {
        self.scale().bits()
    }
}

impl LegacyBlock for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;
    type Scale = Scaled;
    fn scale(&self) -> Scaled {
        Scaled(self.d)
    }
    fn values(&self) -> [i8; 32] {
        signed(nibbles(&self.qs), 8)
    }
}

impl LegacyBlock for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;
    type Scale = Scaled;
    fn scale(&self) -> Scaled {
        Scaled(self.d)
    }
    fn values(&self) -> [i8; 32] {
        signed(fives(&self.qs, self.qh), 16)
    }
}

impl LegacyBlock for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;
    type Scale = Scaled;
    fn scale(&self) -> Scaled {
        Scaled(self.d)
    }
    fn values(&self) -> [i8; 32] {
        self.qs
    }
}

impl LegacyBlock for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;
    type Scale = Offset;
    fn scale(&self) -> Offset {
        Offset(self.d, self.m)
    }
    fn values(&self) -> [i8; 32] {
        signed(nibbles(&self.qs), 0)
    }
}

impl LegacyBlock for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;
    type Scale = Offset;
    fn scale(&self) -> Offset {
        Offset(self.d, self.m)
    }
    fn values(&self) -> [i8; 32] {
        signed(fives(&self.qs, self.qh), 0)
    }
}

/// Mainline llama.cpp's Q2_0 (id 42, group 64): `{ ggml_half d; uint8_t qs[16]; }`, weight `j`
/// is `((qs[j / 4] >> 2 * (j % 4)) & 3) - 1` times `d`: pq2_0's codes with half the group.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ2_0g64 {
    /// Scale, fp16 bits.
    pub d: u16,
    /// 2-bit codes `u = w + 1`, four per byte.
    pub qs: [u8; 16],
}

/// The two `q8_0` blocks a [`BlockQ2_0g64`] multiplies (64 values).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ8_0x2 {
    /// Values 0..32 and 32..64.
    pub b: [BlockQ8_0; 2],
}

impl ActBlock for BlockQ8_0x2 {
    const VALUES: usize = 2 * QK8_0;
    fn quantize(x: &[f32]) -> Self {
        BlockQ8_0x2 {
            b: [
                BlockQ8_0::quantize_slice(&x[..32]),
                BlockQ8_0::quantize_slice(&x[32..64]),
            ],
        }
    }
}

impl BlockQ2_0g64 {
    /// The 64 weights as integers `u - 1` (code 3 gives +2).
    pub fn values(&self) -> [i8; 64] {
        std::array::from_fn(|j| ((self.qs[j / 4] >> (2 * (j % 4))) & 3) as i8 - 1)
    }
}

impl QuantBlock for BlockQ2_0g64 {
    const TYPE: GgmlType = GgmlType::Q2_0_G64;
    const WEIGHTS: usize = 64;
    type Act = BlockQ8_0x2;

    fn dequantize(&self, out: &mut [f32]) {
        let d = f16_to_f32(self.d);
        for (o, q) in out.iter_mut().zip(self.values()) {
            *o = q as f32 * d;
        }
    }

    /// `[isum0, isum1]`: the two 32-weight halves.
    fn int_dot(&self, a: &BlockQ8_0x2) -> [i32; 2] {
        let v = self.values();
        [idot(&v[..32], &a.b[0].qs), idot(&v[32..], &a.b[1].qs)]
    }

    /// `acc + d_w * (d_a0 * isum0 + d_a1 * isum1)`: ggml's `ggml_vec_dot_q2_0_q8_0`.
    fn fold(&self, a: &BlockQ8_0x2, [i0, i1]: [i32; 2], acc: f32) -> f32 {
        let (d0, d1) = (f16_to_f32(a.b[0].d), f16_to_f32(a.b[1].d));
        acc + f16_to_f32(self.d) * (d0 * i0 as f32 + d1 * i1 as f32)
    }

    fn scale_bits(&self) -> [u16; 2] {
        [self.d, 0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_and_q5_0_decode_as_ggml() {
        let mut b = BlockQ4_0 {
            d: f32_to_f16(0.5),
            qs: [0; 16],
        };
        b.qs[0] = 0xF3; // weight 0: 3 - 8, weight 16: 15 - 8
        let mut out = [0.0; 32];
        b.dequantize(&mut out);
        assert_eq!((out[0], out[16], out[1]), (-2.5, 3.5, -4.0));
        let mut c = BlockQ5_0 {
            d: f32_to_f16(1.0),
            qh: 0x0001_0001u32.to_le_bytes(),
            qs: [0; 16],
        };
        c.qs[0] = 0x21;
        c.dequantize(&mut out);
        // weight 0: 1 | 16 -> 17 - 16; weight 16: 2 | 16 -> 18 - 16; weight 1: 0 - 16.
        assert_eq!((out[0], out[16], out[1]), (1.0, 2.0, -16.0));
    }

    #[test]
    fn q8_1_sum_is_scaled_by_the_unrounded_d() {
        let mut x = [0.0f32; 32];
        x[0] = 1.0;
        x[1] = -0.5;
        let b = BlockQ8_1::quantize(&x);
        assert_eq!(b.qs[0], 127);
        assert_eq!(b.qs[1], -64); // -63.5 rounds to even
        assert_eq!(f16_to_f32(b.s), f16_to_f32(f32_to_f16(63.0 / 127.0)));
    }
}
