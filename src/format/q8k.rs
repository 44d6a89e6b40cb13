//! `q8_K` activations (256 int8 values, an f32 scale and 16 partial sums) and their 4-column
//! interleave `q8_K x4` for the gemm tiles.

use bytemuck::{Pod, Zeroable};

/// Values per `q8_K` block (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// One `q8_K` block: `{ float d; int8_t qs[256]; int16_t bsums[16]; }` (292 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8K {
    /// Scale: value `i` is `qs[i] * d`.
    pub d: f32,
    /// Quantized values.
    pub qs: [i8; 256],
    /// `bsums[i]` = sum of `qs[16i .. 16i + 16]`.
    pub bsums: [i16; 16],
}

const _: () = assert!(super::GgmlType::Q8_K.has_block(QK_K, std::mem::size_of::<BlockQ8K>()));

impl Default for BlockQ8K {
    fn default() -> Self {
        Self::zeroed()
    }
}

impl BlockQ8K {
    /// Builds a block from raw values and a scale, computing `bsums`.
    #[inline(always)]
    pub fn from_qs(qs: [i8; QK_K], d: f32) -> Self {
        let bsums =
            std::array::from_fn(|i| qs[16 * i..16 * i + 16].iter().map(|&q| q as i16).sum());
        BlockQ8K { d, qs, bsums }
    }

    /// Quantizes 256 values exactly as ggml's `quantize_row_q8_K_ref`: the value of largest
    /// magnitude `max` (signed) sets `iscale = -127 / max`, `qs = min(127, nearest_int(iscale * x))`,
    /// `d = 1 / iscale`; an all-zero input gives a zero block.
    #[inline(always)]
    pub fn quantize(x: &[f32; QK_K]) -> Self {
        // The largest magnitude as a max over 16 lanes (any order gives the same max, and the
        // compiler vectorizes it), then the first value of that magnitude: the one ggml's
        // scan keeps. NaNs count as in that scan: never.
        let mut lanes = [0.0f32; 16];
        for chunk in x.chunks_exact(16) {
            for (m, v) in lanes.iter_mut().zip(chunk) {
                *m = m.max(v.abs());
            }
        }
        let amax = lanes.iter().fold(0.0f32, |m, &v| m.max(v));
        if amax == 0.0 {
            return Self::zeroed();
        }
        let max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
        let iscale = -127.0 / max;
        let mut qs = [0i8; QK_K];
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        Self::from_qs(qs, 1.0 / iscale)
    }

    /// Sum of the 128 values of half `h` (0 or 1), from `bsums`.
    #[inline]
    pub fn half_sum(&self, h: usize) -> i32 {
        self.bsums[8 * h..8 * h + 8].iter().map(|&s| s as i32).sum()
    }
}

/// ggml's `nearest_int`: round half to even through the float mantissa (valid for |x| < 2^22,
/// which the quantizer guarantees).
#[inline]
fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Four `q8_K` columns interleaved in 8-byte chunks, the activation operand of the gemm tiles:
/// `qs[32*c + 8*col + i]` = column `col`'s `qs[8*c + i]`; `d[col]`; `bsums[16*col + i]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
pub struct BlockQ8Kx4 {
    /// Scales of the four columns.
    pub d: [f32; 4],
    /// Interleaved values: 8-byte chunk `c` of columns 0, 1, 2, 3, then chunk `c + 1`, ...
    pub qs: [i8; 1024],
    /// Partial sums of 16 values, column-major: `bsums[16*col + i]`.
    pub bsums: [i16; 64],
}

const _: () = assert!(std::mem::size_of::<BlockQ8Kx4>() == 1168);

impl Default for BlockQ8Kx4 {
    fn default() -> Self {
        Self::zeroed()
    }
}

impl BlockQ8Kx4 {
    /// Value `i` (0..256) of column `col` (0..4).
    #[inline]
    pub fn value(&self, col: usize, i: usize) -> i8 {
        self.qs[32 * (i / 8) + 8 * col + i % 8]
    }

    /// Sum of the 128 values of half `h` of column `col`, from `bsums`.
    #[inline]
    pub fn half_sum(&self, col: usize, h: usize) -> i32 {
        self.bsums[16 * col + 8 * h..16 * col + 8 * h + 8]
            .iter()
            .map(|&s| s as i32)
            .sum()
    }
}

/// Interleaves four `q8_K` blocks (one per column) into one `q8_K x4` block.
#[inline(always)]
pub fn interleave_q8k_x4(cols: [&BlockQ8K; 4]) -> BlockQ8Kx4 {
    let mut out = BlockQ8Kx4::zeroed();
    for (col, b) in cols.iter().enumerate() {
        out.d[col] = b.d;
        out.bsums[16 * col..16 * col + 16].copy_from_slice(&b.bsums);
        for c in 0..QK_K / 8 {
            out.qs[32 * c + 8 * col..32 * c + 8 * col + 8].copy_from_slice(&b.qs[8 * c..8 * c + 8]);
        }
    }
    out
}

/// Extracts column `col` of a `q8_K x4` block.
pub fn deinterleave_q8k_x4(b: &BlockQ8Kx4, col: usize) -> BlockQ8K {
    let mut out = BlockQ8K::zeroed();
    out.d = b.d[col];
    out.bsums.copy_from_slice(&b.bsums[16 * col..16 * col + 16]);
    for c in 0..QK_K / 8 {
        out.qs[8 * c..8 * c + 8].copy_from_slice(&b.qs[32 * c + 8 * col..32 * c + 8 * col + 8]);
    }
    out
}

/// Quantizes a row (`x.len()` a multiple of 256) into `out` (`x.len() / 256` blocks).
///
/// # Panics
/// If the lengths disagree.
pub fn quantize_row_q8k(x: &[f32], out: &mut [BlockQ8K]) {
    super::quantize_row_by(x, out, QK_K, <BlockQ8K as super::ActBlock>::quantize);
}

/// Dequantizes `q8_K` blocks into `out` (`blocks.len() * 256` values).
///
/// # Panics
/// If the lengths disagree.
pub fn dequantize_row_q8k(blocks: &[BlockQ8K], out: &mut [f32]) {
    super::dequantize_row_by(blocks, out, QK_K, |b, chunk| {
        for (o, &q) in chunk.iter_mut().zip(b.qs.iter()) {
            *o = q as f32 * b.d;
        }
    });
}

/// Quantizes up to four columns of `k` values each (`cols[i]`, `k` a multiple of 256) into
/// `k / 256` interleaved blocks; missing columns are zero (the padding of a leftover tile).
///
/// # Panics
/// If a column's length is not `k`, more than four columns are given, or `out` is not `k / 256` long.
#[inline(always)]
pub fn quantize_q8k_x4(cols: &[&[f32]], k: usize, out: &mut [BlockQ8Kx4]) {
    assert!(cols.len() <= 4, "at most four columns per tile");
    assert_eq!(out.len() * QK_K, k, "k must be 256 per block");
    for col in cols {
        assert_eq!(col.len(), k, "column length must be k");
    }
    for (b, tile) in out.iter_mut().enumerate() {
        // A loop, not `array::from_fn`: the paths' builds inline this function into code
        // compiled for their features, and `from_fn` stayed a call compiled for SSE2.
        let mut q = [BlockQ8K::zeroed(); 4];
        for (q, col) in q.iter_mut().zip(cols) {
            *q = BlockQ8K::quantize(col[QK_K * b..QK_K * (b + 1)].try_into().expect("256"));
        }
        *tile = interleave_q8k_x4([&q[0], &q[1], &q[2], &q[3]]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_matches_ggml_rules() {
        let mut x = [0.0f32; QK_K];
        x[0] = -2.0; // largest magnitude, negative: iscale = -127 / -2 = 63.5
        x[1] = 1.0;
        x[2] = 2.0;
        x[3] = 0.5 / 63.5; // 0.5 after scaling rounds to even: 0
        x[4] = 1.5 / 63.5; // 1.5 rounds to even: 2
        let b = BlockQ8K::quantize(&x);
        assert_eq!(&b.qs[..5], &[-127, 64, 127, 0, 2]);
        assert_eq!(b.d, 1.0 / (-127.0 / -2.0));
        assert_eq!(b.bsums[0], -127 + 64 + 127 + 2);
    }

    /// ggml's scan for the value of largest magnitude, as `quantize_row_q8_K_ref` writes it.
    fn scan_max(x: &[f32; QK_K]) -> (f32, f32) {
        let (mut max, mut amax) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        (max, amax)
    }

    /// The vectorized search keeps the value ggml's scan keeps: ties of `+a` and `-a` in either
    /// order, NaNs, infinities, a single nonzero value in each lane.
    #[test]
    fn quantize_keeps_the_first_value_of_largest_magnitude() {
        let mut rng = crate::test_rng::XorShift::new(0x8c1);
        for case in 0..200 {
            let mut x: [f32; QK_K] =
                std::array::from_fn(|_| (rng.next() % 2001) as f32 / 1000.0 - 1.0);
            let (i, j) = ((rng.next() % 256) as usize, (rng.next() % 256) as usize);
            match case % 5 {
                0 => (x[i], x[j]) = (3.0, -3.0),
                1 => (x[i], x[j]) = (-3.0, 3.0),
                2 => (x[i], x[j]) = (f32::NAN, 5.0),
                3 => x = std::array::from_fn(|k| if k == i { -0.25 } else { 0.0 }),
                _ => x[i] = f32::NEG_INFINITY,
            }
            let (max, amax) = scan_max(&x);
            let b = BlockQ8K::quantize(&x);
            if amax == 0.0 {
                assert_eq!(b, BlockQ8K::zeroed());
                continue;
            }
            let iscale = -127.0 / max;
            assert_eq!(b.d.to_bits(), (1.0 / iscale).to_bits(), "case {case}");
            let qs: [i8; QK_K] = std::array::from_fn(|k| nearest_int(iscale * x[k]).min(127) as i8);
            assert_eq!(b.qs, qs, "case {case}");
        }
    }

    #[test]
    fn all_zero_input_gives_zero_block() {
        assert_eq!(BlockQ8K::quantize(&[0.0; QK_K]), BlockQ8K::zeroed());
    }

    #[test]
    fn interleave_round_trips() {
        let cols: [BlockQ8K; 4] = std::array::from_fn(|c| {
            BlockQ8K::from_qs(
                std::array::from_fn(|i| (i as i32 * 7 + c as i32 * 31 - 128) as i8),
                c as f32,
            )
        });
        let x4 = interleave_q8k_x4([&cols[0], &cols[1], &cols[2], &cols[3]]);
        for (c, col) in cols.iter().enumerate() {
            assert_eq!(&deinterleave_q8k_x4(&x4, c), col);
            assert_eq!(x4.value(c, 77), col.qs[77]);
            assert_eq!(x4.half_sum(c, 1), col.half_sum(1));
        }
    }
}
