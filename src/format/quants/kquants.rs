//! ggml's K block types (256 weights with integer sub-block scales) Q4_K, Q5_K and Q6_K, whose
//! activations are `q8_K`, with ggml's scalar dot products.
//!
//! Each block decodes to 256 small integers, one integer scale per 16 weights and, for Q4_K /
//! Q5_K, one integer minimum per 16 ([`KValues`]); the integer sums are then
//! `isum = sum_g sc_g * dot(q_g, y_g)` and `msum = sum_g m_g * sum(y_g)` (from the activation's
//! `bsums`), both exact in int32.

use bytemuck::{Pod, Zeroable};

use super::super::{BlockQ8K, GgmlType, QK_K, f16_to_f32};
use super::{QuantBlock, idot};

/// `{ ggml_half d, dmin; uint8_t scales[12]; uint8_t qs[128]; }`: 8 sub-blocks of 32 with
/// 6-bit scales and minimums; weight = `d * sc * q - dmin * m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ4K {
    /// Super-block scale of the scales, fp16 bits.
    pub d: u16,
    /// Super-block scale of the minimums, fp16 bits.
    pub dmin: u16,
    /// 6-bit scales and minimums, packed as ggml's `get_scale_min_k4` reads them.
    pub scales: [u8; 12],
    /// 4-bit values: bytes `32c .. 32c + 32` hold sub-block `2c` (low) and `2c + 1` (high).
    pub qs: [u8; 128],
}

/// `{ ggml_half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; }`: Q4_K with a
/// fifth bit per weight (bit `2c` / `2c + 1` of `qh[l]` for sub-blocks `2c` / `2c + 1`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ5K {
    /// Super-block scale of the scales, fp16 bits.
    pub d: u16,
    /// Super-block scale of the minimums, fp16 bits.
    pub dmin: u16,
    /// 6-bit scales and minimums.
    pub scales: [u8; 12],
    /// Fifth bits.
    pub qh: [u8; 32],
    /// Low 4 bits, as in Q4_K.
    pub qs: [u8; 128],
}

/// `{ uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; }`: 16 sub-blocks of 16
/// with int8 scales; weight = `d * sc * (q - 32)`, `q` six bits.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ6K {
    /// Low 4 bits.
    pub ql: [u8; 128],
    /// High 2 bits.
    pub qh: [u8; 64],
    /// Scale of each 16 weights.
    pub scales: [i8; 16],
    /// Super-block scale, fp16 bits.
    pub d: u16,
}

/// A K block decoded to integers: `q[i]` the value of weight `i` (offset applied), `sc[g]` and
/// `m[g]` the scale and minimum of weights `16g .. 16g + 16`.
pub(crate) struct KValues {
    pub q: [i8; QK_K],
    pub sc: [i32; 16],
    pub m: [i32; 16],
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and minimum of sub-block `j` (0..8).
#[inline]
pub(crate) fn scale_min_k4(j: usize, s: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// The values of Q4_K / Q5_K (`high` the fifth bits, zero for Q4_K) and their per-16 scales.
fn decode_k4(scales: &[u8; 12], qs: &[u8; 128], qh: Option<&[u8; 32]>) -> KValues {
    let mut v = KValues {
        q: [0; QK_K],
        sc: [0; 16],
        m: [0; 16],
    };
    for c in 0..4 {
        for h in 0..2 {
            let j = 2 * c + h;
            let (sc, m) = scale_min_k4(j, scales);
            v.sc[2 * j..2 * j + 2].fill(sc as i32);
            v.m[2 * j..2 * j + 2].fill(m as i32);
            for l in 0..32 {
                let lo = (qs[32 * c + l] >> (4 * h)) & 0xF;
                let hi = qh.map_or(0, |qh| ((qh[l] >> j) & 1) << 4);
                v.q[64 * c + 32 * h + l] = (lo | hi) as i8;
            }
        }
    }
    v
}

impl BlockQ4K {
    pub(crate) fn values(&self) -> KValues {
        decode_k4(&self.scales, &self.qs, None)
    }
}

impl BlockQ5K {
    pub(crate) fn values(&self) -> KValues {
        decode_k4(&self.scales, &self.qs, Some(&self.qh))
    }
}

impl BlockQ6K {
    pub(crate) fn values(&self) -> KValues {
        let mut v = KValues {
            q: [0; QK_K],
            sc: self.scales.map(|s| s as i32),
            m: [0; 16],
        };
        for n in 0..2 {
            let (ql, qh) = (&self.ql[64 * n..], &self.qh[32 * n..]);
            for l in 0..32 {
                let q = |low: u8, shift: u32| (low | (((qh[l] >> shift) & 3) << 4)) as i8 - 32;
                let y = &mut v.q[128 * n..];
                y[l] = q(ql[l] & 0xF, 0);
                y[l + 32] = q(ql[l + 32] & 0xF, 2);
                y[l + 64] = q(ql[l] >> 4, 4);
                y[l + 96] = q(ql[l + 32] >> 4, 6);
            }
        }
        v
    }
}

/// `[isum, msum]` of decoded values against a `q8_K` block.
fn k_sums(v: &KValues, a: &BlockQ8K) -> [i32; 2] {
    let mut isum = 0;
    let mut msum = 0;
    for g in 0..16 {
        let span = 16 * g..16 * g + 16;
        isum += v.sc[g] * idot(&v.q[span.clone()], &a.qs[span]);
        msum += v.m[g] * a.bsums[g] as i32;
    }
    [isum, msum]
}

/// `acc + ((d * d_a) * isum - (dmin * d_a) * msum)`: ggml's Q4_K / Q5_K fold.
#[inline]
fn fold_with_min(d: u16, dmin: u16, a: &BlockQ8K, [isum, msum]: [i32; 2], acc: f32) -> f32 {
    let dd = f16_to_f32(d) * a.d;
    let dm = f16_to_f32(dmin) * a.d;
    acc + (dd * isum as f32 - dm * msum as f32)
}

/// ggml's `dequantize_row_q4_K` / `_q5_K` for one block.
fn dequantize_with_min(d: u16, dmin: u16, v: &KValues, out: &mut [f32]) {
    let (d, min) = (f16_to_f32(d), f16_to_f32(dmin));
    for (i, o) in out[..QK_K].iter_mut().enumerate() {
        let g = i / 16;
        let d1 = d * v.sc[g] as f32;
        let m1 = min * v.m[g] as f32;
        *o = d1 * v.q[i] as f32 - m1;
    }
}

/// Q4_K and Q5_K differ only in their values: one implementation over both.
macro_rules! k_with_min {
    ($($B:ty => $ty:ident),*) => {
        $(impl QuantBlock for $B {
            const TYPE: GgmlType = GgmlType::$ty;
            const WEIGHTS: usize = QK_K;
            type Act = BlockQ8K;

            fn dequantize(&self, out: &mut [f32]) {
                dequantize_with_min(self.d, self.dmin, &self.values(), out);
            }

            fn int_dot(&self, a: &BlockQ8K) -> [i32; 2] {
                k_sums(&self.values(), a)
            }

            fn fold(&self, a: &BlockQ8K, sums: [i32; 2], acc: f32) -> f32 {
                fold_with_min(self.d, self.dmin, a, sums, acc)
            }

            fn scale_bits(&self) -> [u16; 2] {
                [self.d, self.dmin]
            }
        })*
    };
}
k_with_min!(BlockQ4K => Q4_K, BlockQ5K => Q5_K);

impl QuantBlock for BlockQ6K {
    const TYPE: GgmlType = GgmlType::Q6_K;
    const WEIGHTS: usize = QK_K;
    type Act = BlockQ8K;

    /// `(d * sc) * q`, as ggml's `dequantize_row_q6_K`.
    fn dequantize(&self, out: &mut [f32]) {
        let v = self.values();
        let d = f16_to_f32(self.d);
        for (i, o) in out[..QK_K].iter_mut().enumerate() {
            *o = d * v.sc[i / 16] as f32 * v.q[i] as f32;
        }
    }

    fn int_dot(&self, a: &BlockQ8K) -> [i32; 2] {
        k_sums(&self.values(), a)
    }

    /// `acc + (d * d_a) * isum`.
    fn fold(&self, a: &BlockQ8K, [isum, _]: [i32; 2], acc: f32) -> f32 {
        acc + (f16_to_f32(self.d) * a.d) * isum as f32
    }

    fn scale_bits(&self) -> [u16; 2] {
        [self.d, 0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::f32_to_f16;

    #[test]
    fn scale_min_k4_reads_both_halves() {
        let mut s = [0u8; 12];
        s[0] = 0b11_000101; // sc0 = 5, top bits 3 -> sc4 high
        s[4] = 0b10_000111; // m0 = 7, top bits 2 -> m4 high
        s[8] = 0x9A; // sc4 low 0xA, m4 low 0x9
        assert_eq!(scale_min_k4(0, &s), (5, 7));
        assert_eq!(scale_min_k4(4, &s), (0xA | (3 << 4), 0x9 | (2 << 4)));
    }

    #[test]
    fn q6_k_decodes_as_ggml() {
        let mut b = BlockQ6K::zeroed();
        b.d = f32_to_f16(0.5);
        b.scales = [2; 16];
        b.scales[4] = -3;
        b.ql[0] = 0x5A; // weight 0 low 0xA, weight 64 low 0x5
        b.qh[0] = 0b01_00_00_11; // weight 0 high 3, weight 64 high 0, weight 96 high 1
        let mut out = [0.0; 256];
        b.dequantize(&mut out);
        assert_eq!(out[0], 0.5 * 2.0 * ((0xA | 0x30) - 32) as f32);
        assert_eq!(out[64], 0.5 * -3.0 * (5 - 32) as f32);
        assert_eq!(out[96], 0.5 * 2.0 * ((0x10) - 32) as f32);
        assert_eq!(out[1], 0.5 * 2.0 * -32.0);
    }
}
