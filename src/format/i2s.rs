//! BitNet b1.58's ternary tensors: bitnet.cpp's I2_S (type id 36) and ik_llama.cpp's IQ2_BN
//! (id 135) and IQ1_BN (id 134), their scalar references, their exact repacking into T2P, and
//! the per-token int8 activations the model was trained with.
//!
//! The formats hold a code `c` per weight (`w = (c - 1) * scale`, 2 bits or a base-3 digit)
//! and a scale: one **f32** per tensor (I2_S) or per row (IQ2_BN), one fp16 per row (IQ1_BN,
//! used as the f32 it converts to). A T2P block carries an fp16 scale per row, which
//! cannot hold every f32; so the repacked blocks get scale 1.0 (exact in fp16), the T2P matmul
//! yields the exact integer sums, and the f32 scales are applied afterwards
//! ([`int8_output_scale`]), as f32, the way the reference does.
//!
//! Layouts (facts from bitnet.cpp's `quantize_i2_s` x86 layout and ik_llama.cpp's
//! `dequantize_row_ms_i2s` / `dequantize_row_iq2_bn`):
//! * **I2_S**: the tensor's `n` weights row-major in blocks of 128 weights in 32 bytes; weight
//!   `j` of a block is in byte `j % 32` at bit shift `6 - 2 * (j / 32)`. After the `n / 4`
//!   packed bytes: the f32 scale (little endian), then 28 bytes of padding (`n / 4 + 32` bytes
//!   in all).
//! * **IQ2_BN**: per row, the f32 scale, then `k / 64` blocks of 16 bytes; element `j` (0..16)
//!   of a block is in bits 0-1 of byte `j`, `j + 16` in bits 2-3, `j + 32` in bits 4-5, `j + 48`
//!   in bits 6-7.
//! * **IQ1_BN** (ik_llama.cpp's `quantize_one_row_1bn` / `dequantize_row_iq1_bn`): per row the
//!   fp16 scale, then `k / 64` blocks of 13 bytes. In each quarter `q` (16 weights) of a block,
//!   byte `3q + g` (`g` 0..3) holds weights `16q + 5g .. 16q + 5g + 5` as base-3 digits
//!   (`format::trits`: weight `5g + j` is trit `4 - j`), and weight `16q + 15` is trit
//!   `4 - q` of byte 12.
//!
//! Activations (bitnet.cpp and the HF model): before every ternary matmul each token's vector
//! is quantized with one scale `s = 127 / max(max|x|, 1e-5)`, `q = round_half_even(x * s)`
//! clamped to -128..=127, and `y = (q . (c - 1)) * (scale / s)`.

use super::{BlockQ8_0Quad, BlockT2p, GgmlType, QK_PQ2_0, QK8_0, ROWS_PER_T2P, RowPairBlock};
use crate::error::{Error, Result, check_len};

/// Weights per I2_S block.
pub const QK_I2_S: usize = 128;
/// Bytes of a packed I2_S block.
pub const I2_S_BLOCK_BYTES: usize = 32;
/// Bytes after the packed I2_S codes: the f32 scale and 28 bytes of padding.
pub const I2_S_TRAILER_BYTES: usize = 32;
/// Weights per IQ2_BN block.
pub const QK_IQ2_BN: usize = 64;
/// Bytes of an IQ2_BN block.
pub const IQ2_BN_BLOCK_BYTES: usize = 16;
/// Bytes of an IQ1_BN block (64 weights, as IQ2_BN).
pub const IQ1_BN_BLOCK_BYTES: usize = 13;

/// fp16 1.0: the scale every repacked T2P row gets, so the matmul's sums stay integers.
const ONE_F16: u16 = 0x3c00;

/// The code (0..=3) of weight `j` (0..128) of a 32-byte I2_S block.
#[inline]
pub fn i2s_code(block: &[u8], j: usize) -> u8 {
    (block[j % 32] >> (6 - 2 * (j / 32))) & 3
}

/// The code (0..=3) of weight `j` (0..64) of a 16-byte IQ2_BN block.
#[inline]
pub fn iq2bn_code(block: &[u8], j: usize) -> u8 {
    (block[j % 16] >> (2 * (j / 16))) & 3
}

/// The code (0..=2) of weight `j` (0..64) of a 13-byte IQ1_BN block.
#[inline]
pub fn iq1bn_code(block: &[u8], j: usize) -> u8 {
    let (quarter, i) = (j / 16, j % 16);
    if i == 15 {
        super::trits::trit(block[12], 4 - quarter as u32)
    } else {
        super::trits::trit(block[3 * quarter + i / 5], 4 - (i % 5) as u32)
    }
}

/// Bytes of an IQ1_BN row of `k` weights (`k` a multiple of 64).
pub fn iq1bn_row_bytes(k: usize) -> usize {
    2 + k / QK_IQ2_BN * IQ1_BN_BLOCK_BYTES
}

/// Bytes of an I2_S tensor of `n` weights (`n` a multiple of 128).
pub fn i2s_bytes(n: usize) -> usize {
    n / 4 + I2_S_TRAILER_BYTES
}

/// Bytes of an IQ2_BN tensor of `rows` rows of `k` weights (`k` a multiple of 64).
pub fn iq2bn_bytes(rows: usize, k: usize) -> usize {
    rows * (4 + k / 4)
}

fn shape(rows: usize, k: usize, block: usize, name: &str) -> Result<()> {
    if k == 0 || rows == 0 || !k.is_multiple_of(block) {
        return Err(Error::Shape(format!(
            "{rows} x {k}: {name} needs rows of a positive multiple of {block} weights"
        )));
    }
    Ok(())
}

/// The f32 scale of an I2_S tensor of `n` weights (`data` its `n / 4 + 32` bytes).
pub fn i2s_scale(data: &[u8], n: usize) -> Result<f32> {
    shape(1, n, QK_I2_S, "i2_s")?;
    check_len("i2_s bytes", i2s_bytes(n), data.len())?;
    let at = n / 4;
    Ok(f32::from_le_bytes(
        data[at..at + 4].try_into().expect("4 bytes"),
    ))
}

/// The codes of an I2_S tensor of `n` weights into `codes[..n]`, and its scale: the scalar
/// reference decoder.
pub fn decode_i2s(data: &[u8], n: usize, codes: &mut [u8]) -> Result<f32> {
    let scale = i2s_scale(data, n)?;
    check_len("codes", n, codes.len())?;
    for (block, out) in data[..n / 4]
        .chunks_exact(I2_S_BLOCK_BYTES)
        .zip(codes.chunks_exact_mut(QK_I2_S))
    {
        for (j, c) in out.iter_mut().enumerate() {
            *c = i2s_code(block, j);
        }
    }
    Ok(scale)
}

/// Writes an I2_S tensor from `codes` (0..=3, a multiple of 128 of them) and `scale`: the
/// inverse of [`decode_i2s`] (the padding is zero).
pub fn encode_i2s(codes: &[u8], scale: f32) -> Result<Vec<u8>> {
    let n = codes.len();
    shape(1, n, QK_I2_S, "i2_s")?;
    check_codes(codes)?;
    let mut out = vec![0u8; i2s_bytes(n)];
    for (block, c) in out[..n / 4]
        .chunks_exact_mut(I2_S_BLOCK_BYTES)
        .zip(codes.chunks_exact(QK_I2_S))
    {
        for (j, &u) in c.iter().enumerate() {
            block[j % 32] |= u << (6 - 2 * (j / 32));
        }
    }
    out[n / 4..n / 4 + 4].copy_from_slice(&scale.to_le_bytes());
    Ok(out)
}

/// The codes of an IQ2_BN tensor (`rows x k`) into `codes[..rows * k]`, and its row scales:
/// the scalar reference decoder.
pub fn decode_iq2bn(data: &[u8], rows: usize, k: usize, codes: &mut [u8]) -> Result<Vec<f32>> {
    shape(rows, k, QK_IQ2_BN, "iq2_bn")?;
    check_len("iq2_bn bytes", iq2bn_bytes(rows, k), data.len())?;
    check_len("codes", rows * k, codes.len())?;
    let mut scales = Vec::with_capacity(rows);
    for (row, out) in data.chunks_exact(4 + k / 4).zip(codes.chunks_exact_mut(k)) {
        scales.push(f32::from_le_bytes(row[..4].try_into().expect("4 bytes")));
        for (block, o) in row[4..]
            .chunks_exact(IQ2_BN_BLOCK_BYTES)
            .zip(out.chunks_exact_mut(QK_IQ2_BN))
        {
            for (j, c) in o.iter_mut().enumerate() {
                *c = iq2bn_code(block, j);
            }
        }
    }
    Ok(scales)
}

/// Writes an IQ2_BN tensor from `rows x k` codes (0..=3) and one scale per row: the inverse of
/// [`decode_iq2bn`].
pub fn encode_iq2bn(codes: &[u8], scales: &[f32], k: usize) -> Result<Vec<u8>> {
    let rows = scales.len();
    shape(rows, k, QK_IQ2_BN, "iq2_bn")?;
    check_len("codes", rows * k, codes.len())?;
    check_codes(codes)?;
    let mut out = vec![0u8; iq2bn_bytes(rows, k)];
    for ((row, c), &d) in out
        .chunks_exact_mut(4 + k / 4)
        .zip(codes.chunks_exact(k))
        .zip(scales)
    {
        row[..4].copy_from_slice(&d.to_le_bytes());
        for (block, cb) in row[4..]
            .chunks_exact_mut(IQ2_BN_BLOCK_BYTES)
            .zip(c.chunks_exact(QK_IQ2_BN))
        {
            for (j, &u) in cb.iter().enumerate() {
                block[j % 16] |= u << (2 * (j / 16));
            }
        }
    }
    Ok(out)
}

/// The codes of an IQ1_BN tensor (`rows x k`) into `codes[..rows * k]`, and its row scales
/// (fp16, as f32): the scalar reference decoder.
pub fn decode_iq1bn(data: &[u8], rows: usize, k: usize, codes: &mut [u8]) -> Result<Vec<f32>> {
    shape(rows, k, QK_IQ2_BN, "iq1_bn")?;
    check_len("iq1_bn bytes", rows * iq1bn_row_bytes(k), data.len())?;
    check_len("codes", rows * k, codes.len())?;
    let mut scales = Vec::with_capacity(rows);
    for (row, out) in data
        .chunks_exact(iq1bn_row_bytes(k))
        .zip(codes.chunks_exact_mut(k))
    {
        scales.push(iq1bn_scale(row));
        for (block, o) in row[2..]
            .chunks_exact(IQ1_BN_BLOCK_BYTES)
            .zip(out.chunks_exact_mut(QK_IQ2_BN))
        {
            for (j, c) in o.iter_mut().enumerate() {
                *c = iq1bn_code(block, j);
            }
        }
    }
    Ok(scales)
}

/// The scale of an IQ1_BN row (its first two bytes, fp16).
fn iq1bn_scale(row: &[u8]) -> f32 {
    half::f16::from_le_bytes([row[0], row[1]]).to_f32()
}

/// Writes an IQ1_BN tensor from `rows x k` codes (0..=2) and one scale per row (rounded to
/// fp16), as ik_llama.cpp's quantizer packs them: the inverse of [`decode_iq1bn`].
pub fn encode_iq1bn(codes: &[u8], scales: &[f32], k: usize) -> Result<Vec<u8>> {
    let rows = scales.len();
    shape(rows, k, QK_IQ2_BN, "iq1_bn")?;
    check_len("codes", rows * k, codes.len())?;
    if let Some(i) = codes.iter().position(|&u| u > 2) {
        return Err(Error::InvalidArgument(format!(
            "code {} at weight {i} is not a base-3 digit (iq1_bn holds -1, 0, +1 only)",
            codes[i]
        )));
    }
    let row_bytes = iq1bn_row_bytes(k);
    let mut out = vec![0u8; rows * row_bytes];
    for ((row, c), &d) in out
        .chunks_exact_mut(row_bytes)
        .zip(codes.chunks_exact(k))
        .zip(scales)
    {
        row[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        for (block, cb) in row[2..]
            .chunks_exact_mut(IQ1_BN_BLOCK_BYTES)
            .zip(c.chunks_exact(QK_IQ2_BN))
        {
            let mut last = [0u8; 5];
            for (quarter, q) in cb.chunks_exact(16).enumerate() {
                for g in 0..3 {
                    // `pack_trits` takes the most significant digit first: trit 0 is weight 4.
                    let mut digits: [u8; 5] = q[5 * g..5 * g + 5].try_into().expect("5 codes");
                    digits.reverse();
                    block[3 * quarter + g] = super::trits::pack_trits(&digits);
                }
                last[4 - quarter] = q[15];
            }
            block[12] = super::trits::pack_trits(&last);
        }
    }
    Ok(out)
}

fn check_codes(codes: &[u8]) -> Result<()> {
    match codes.iter().position(|&u| u > 3) {
        Some(i) => Err(Error::InvalidArgument(format!(
            "code {} at weight {i} does not fit 2 bits",
            codes[i]
        ))),
        None => Ok(()),
    }
}

/// Packs the codes `code(row, j)` of a `rows x k` matrix into T2P row groups with every scale
/// 1.0 (a last group of fewer than 4 rows padded with zero weights: code 1, scale 0). Decodes
/// 128 codes at a time, so no copy of the matrix is made.
fn codes_to_t2p(
    rows: usize,
    k: usize,
    dst: &mut [BlockT2p],
    code: impl Fn(usize, usize) -> u8,
) -> Result<()> {
    let n = super::t2p_block_count(rows, k)?;
    check_len("T2P destination blocks", n, dst.len())?;
    let nb = k / QK_PQ2_0;
    for (g, group) in dst.chunks_exact_mut(nb).enumerate() {
        for r in 0..ROWS_PER_T2P {
            let row = 4 * g + r;
            for (b, blk) in group.iter_mut().enumerate() {
                let mut c = [1u8; QK_PQ2_0];
                if row < rows {
                    for (j, u) in c.iter_mut().enumerate() {
                        *u = code(row, b * QK_PQ2_0 + j);
                    }
                }
                let d = if row < rows { ONE_F16 } else { 0 };
                blk.set_row(r, &c, &[d]);
            }
        }
    }
    Ok(())
}

/// Repacks an I2_S tensor (`rows x k`, `k` a multiple of 128) into T2P blocks of scale 1.0
/// (exact: the same codes) and returns its f32 scale.
pub fn repack_i2s_to_t2p(data: &[u8], rows: usize, k: usize, dst: &mut [BlockT2p]) -> Result<f32> {
    shape(rows, k, QK_I2_S, "i2_s")?;
    let scale = i2s_scale(data, rows * k)?;
    // Rows are whole blocks (k % 128 == 0): weight j of row r is weight j % 128 of block
    // (r * k + j) / 128.
    codes_to_t2p(rows, k, dst, |r, j| {
        let at = (r * k + j) / QK_I2_S * I2_S_BLOCK_BYTES;
        i2s_code(&data[at..at + I2_S_BLOCK_BYTES], j % QK_I2_S)
    })?;
    Ok(scale)
}

/// Repacks a BitNet tensor of type `ty` (I2_S, IQ2_BN or IQ1_BN; `rows x k`, `k` a multiple of
/// 128) into T2P blocks of scale 1.0 (exact: the same codes) and returns its f32 scales: I2_S's
/// one tensor scale, or the row scales of the other two.
pub fn repack_bitnet_to_t2p(
    ty: GgmlType,
    data: &[u8],
    rows: usize,
    k: usize,
    dst: &mut [BlockT2p],
) -> Result<Vec<f32>> {
    type Scale = fn(&[u8]) -> f32;
    type Code = fn(&[u8], usize) -> u8;
    let (layout, scale, code): (_, Scale, Code) = match ty {
        GgmlType::I2_S => return Ok(vec![repack_i2s_to_t2p(data, rows, k, dst)?]),
        GgmlType::IQ2_BN => {
            let layout = RowLayout {
                name: "iq2_bn",
                bytes_name: "iq2_bn bytes",
                row_bytes: 4 + k / 4,
                head: 4,
                block_bytes: IQ2_BN_BLOCK_BYTES,
            };
            let scale = |row: &[u8]| f32::from_le_bytes(row[..4].try_into().expect("4 bytes"));
            (layout, scale, iq2bn_code)
        }
        GgmlType::IQ1_BN => {
            let layout = RowLayout {
                name: "iq1_bn",
                bytes_name: "iq1_bn bytes",
                row_bytes: iq1bn_row_bytes(k),
                head: 2,
                block_bytes: IQ1_BN_BLOCK_BYTES,
            };
            (layout, iq1bn_scale, iq1bn_code)
        }
        _ => {
            return Err(Error::InvalidArgument(format!(
                "{} is not a BitNet type",
                ty.name()
            )));
        }
    };
    repack_rows_to_t2p(data, rows, k, dst, layout, scale, code)
}

/// Bytes of a `rows x k` BitNet tensor of type `ty` (as [`repack_bitnet_to_t2p`] takes it), or
/// `None` for another type.
pub fn bitnet_bytes(ty: GgmlType, rows: usize, k: usize) -> Option<usize> {
    match ty {
        GgmlType::I2_S => Some(i2s_bytes(rows * k)),
        GgmlType::IQ2_BN => Some(iq2bn_bytes(rows, k)),
        GgmlType::IQ1_BN => Some(rows * iq1bn_row_bytes(k)),
        _ => None,
    }
}

/// A format of rows that each start with their scale (`head` bytes), then blocks of 64 weights.
struct RowLayout {
    name: &'static str,
    /// What a too-short buffer is called in the error.
    bytes_name: &'static str,
    row_bytes: usize,
    head: usize,
    block_bytes: usize,
}

/// Repacks rows of `layout` into T2P blocks of scale 1.0: `scale(row)` reads a row's scale,
/// `code(block, j)` weight `j` of a 64-weight block.
fn repack_rows_to_t2p(
    data: &[u8],
    rows: usize,
    k: usize,
    dst: &mut [BlockT2p],
    layout: RowLayout,
    scale: impl Fn(&[u8]) -> f32,
    code: impl Fn(&[u8], usize) -> u8,
) -> Result<Vec<f32>> {
    let RowLayout {
        name,
        bytes_name,
        row_bytes,
        head,
        block_bytes,
    } = layout;
    shape(rows, k, QK_PQ2_0, &format!("{name} in T2P"))?;
    let bytes = rows
        .checked_mul(row_bytes)
        .ok_or_else(|| Error::Shape(format!("{rows} rows of {name} overflow")))?;
    check_len(bytes_name, bytes, data.len())?;
    let scales = data.chunks_exact(row_bytes).map(scale).collect();
    codes_to_t2p(rows, k, dst, |r, j| {
        let at = r * row_bytes + head + j / QK_IQ2_BN * block_bytes;
        code(&data[at..at + block_bytes], j % QK_IQ2_BN)
    })?;
    Ok(scales)
}

/// Quantizes one token's activations `x` to int8 with one scale, as bitnet.cpp: `s = 127 /
/// max(max|x|, 1e-5)`, `q = round_half_even(x * s)` clamped to -128..=127 (computed in f32).
/// Writes `q` into `out` and returns `s`.
pub fn quantize_row_i8_absmax(x: &[f32], out: &mut [i8]) -> f32 {
    let s = absmax_scale(x);
    for (q, &v) in out.iter_mut().zip(x) {
        *q = to_i8(v, s);
    }
    s
}

/// `127 / max(max|x|, 1e-5)`. The maximum is taken in 8 lanes (a maximum is the same in any
/// order, and a NaN is skipped in every lane as `f32::max` skips it), which the compiler turns
/// into vector code: a serial fold is one dependent `max` per element.
fn absmax_scale(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = m.max(v.abs());
        }
    }
    let amax = lanes.into_iter().chain(rest.iter().map(|v| v.abs()));
    127.0 / amax.fold(0.0f32, f32::max).max(1e-5)
}

/// `round_half_even(v * s)` clamped to int8 (a NaN becomes 0, as `as` casts it).
#[inline(always)]
fn to_i8(v: f32, s: f32) -> i8 {
    to_int8(v, s) as i8
}

/// [`to_i8`] as an `i32` (in -128..=127), for loops that also sum the values.
///
/// Rounded through the float mantissa: once clamped, `|y| <= 128 < 2^22`, so `y + 1.5 * 2^23`
/// lands where floats are whole numbers and the addition itself rounds half to even, exactly
/// as `f32::round_ties_even` (a test checks every value), and the integer is the difference
/// of the bits. Without SSE4.1 that function is a software routine per element (half of a
/// BitNet prefill's time), and a float-to-int `as` saturates per element: integer steps keep
/// the loop in vector code.
#[inline(always)]
fn to_int8(v: f32, s: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    let y = (v * s).clamp(-128.0, 127.0);
    let q = (y + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32;
    if y.is_nan() { 0 } else { q }
}

/// One token's activations as `q8_0` quads for a T2P matmul of scale-1.0 blocks: the int8
/// values of [`quantize_row_i8_absmax`] with every block scale 1.0, so the matmul yields the
/// integer sums exactly (each below 2^24 for `k` < 132000). Returns `s`.
///
/// # Panics
/// If `x.len() != 128 * out.len()`.
pub fn quantize_row_i8_quads(x: &[f32], out: &mut [BlockQ8_0Quad]) -> f32 {
    assert_eq!(x.len(), QK_PQ2_0 * out.len(), "128 values per quad");
    let s = absmax_scale(x);
    for (quad, xs) in out.iter_mut().zip(x.chunks_exact(QK_PQ2_0)) {
        quad.d = [1.0; 4];
        // Each sub-block's sum from the same integers as its values, in one vector loop (the
        // sums of the stored bytes were a scalar load per byte).
        let blocks = quad.qs.chunks_exact_mut(QK8_0).zip(xs.chunks_exact(QK8_0));
        for ((q, xs), sum) in blocks.zip(&mut quad.sums) {
            *sum = 0;
            for (q, &v) in q.iter_mut().zip(xs) {
                let i = to_int8(v, s);
                *q = i as i8;
                *sum += i;
            }
        }
    }
    s
}

/// The factor an integer sum is multiplied by: `weight scale / s`, in f32 (the one place both
/// the model and the references compute it).
#[inline]
pub fn int8_output_scale(weight_scale: f32, s: f32) -> f32 {
    weight_scale / s
}

/// The scalar reference of a BitNet matmul: `rows x k` codes (row-major, from [`decode_i2s`]
/// or [`decode_iq2bn`]), one weight scale (I2_S) or one per row (IQ2_BN), times `ncols`
/// activation vectors `x` (column after column) quantized per column to int8:
/// `out[c * rows + r] = (sum_j (code - 1) * q_j) as f32 * int8_output_scale(scale_r, s_c)`.
pub fn reference_matmul_int8(
    codes: &[u8],
    scales: &[f32],
    rows: usize,
    k: usize,
    x: &[f32],
    ncols: usize,
) -> Result<Vec<f32>> {
    check_len("codes", rows * k, codes.len())?;
    check_len("activations", k * ncols, x.len())?;
    if scales.len() != 1 && scales.len() != rows {
        return Err(Error::Shape(format!(
            "{} weight scales for {rows} rows (1 or one per row)",
            scales.len()
        )));
    }
    let mut out = vec![0f32; rows * ncols];
    let mut q = vec![0i8; k];
    for (c, xc) in x.chunks_exact(k).enumerate() {
        let s = quantize_row_i8_absmax(xc, &mut q);
        for r in 0..rows {
            let isum: i32 = codes[r * k..(r + 1) * k]
                .iter()
                .zip(&q)
                .map(|(&u, &v)| (u as i32 - 1) * v as i32)
                .sum();
            let ws = scales[if scales.len() == 1 { 0 } else { r }];
            out[c * rows + r] = isum as f32 * int8_output_scale(ws, s);
        }
    }
    Ok(out)
}

/// f32 weights of `codes` with `scales` (one, or one per row of `k`): `(c - 1) * scale`.
pub fn dequantize_codes(codes: &[u8], scales: &[f32], k: usize, out: &mut [f32]) {
    for (i, (o, &u)) in out.iter_mut().zip(codes).enumerate() {
        let d = scales[if scales.len() == 1 { 0 } else { i / k }];
        *o = (u as i32 - 1) as f32 * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::dequantize_t2p_row;

    /// Every half-integer in [-130, 130] and its two float neighbours, every 509th f32 in
    /// between, and the specials round as `round_ties_even` then the clamp.
    #[test]
    fn to_i8_rounds_half_to_even_and_clamps_like_the_definition() {
        let want = |y: f32| y.round_ties_even().clamp(-128.0, 127.0) as i8;
        let halves = (-260..=260).map(|n| n as f32 / 2.0);
        let near = halves.flat_map(|h| [h.next_down(), h, h.next_up()]);
        let top = 130.0f32.to_bits();
        let swept = (0..=top).step_by(509).flat_map(|b| [b, b | 0x8000_0000]);
        for y in near.chain(swept.map(f32::from_bits)) {
            assert_eq!(to_i8(y, 1.0), want(y), "{y}");
        }
        let payload_nans = [0x7fc0_0001, 0xffc0_0005, 0x7f80_0003].map(f32::from_bits);
        for y in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30]
            .into_iter()
            .chain(payload_nans)
        {
            assert_eq!(to_i8(y, 1.0), want(y), "{y}");
        }
    }

    /// The quads hold the values of `quantize_row_i8_absmax`, scale 1.0 and the sums of the
    /// stored values (which the kernels use for the code offset).
    #[test]
    fn quads_hold_the_int8_values_and_their_sums() {
        let x: Vec<f32> = (0..384)
            .map(|i| match i % 97 {
                0 => f32::NAN,
                1 => -12.0,
                _ => ((i * 7919) % 1001) as f32 / 100.0 - 5.0,
            })
            .collect();
        let mut want = vec![0i8; 384];
        let s = quantize_row_i8_absmax(&x, &mut want);
        let mut quads = vec![BlockQ8_0Quad::default(); 3];
        assert_eq!(quantize_row_i8_quads(&x, &mut quads).to_bits(), s.to_bits());
        for (quad, q) in quads.iter().zip(want.chunks_exact(QK_PQ2_0)) {
            let q: [i8; QK_PQ2_0] = q.try_into().unwrap();
            assert_eq!(*quad, BlockQ8_0Quad::from_qs(q, [1.0; 4]));
        }
    }

    /// The lanes give the serial fold's maximum for every length and position of the
    /// largest value, with NaNs, infinities and negative zeros among the values.
    #[test]
    fn absmax_in_lanes_is_the_serial_maximum() {
        let serial = |x: &[f32]| 127.0 / x.iter().fold(0.0f32, |m, &v| m.max(v.abs())).max(1e-5);
        for len in 0..40 {
            for top in 0..len {
                let mut x: Vec<f32> = (0..len).map(|i| ((i * 7) % 11) as f32 * -0.25).collect();
                x[top] = -9.5;
                for special in [f32::NAN, -0.0, f32::INFINITY] {
                    let mut y = x.clone();
                    y[(top + 3) % len] = special;
                    assert_eq!(
                        absmax_scale(&y).to_bits(),
                        serial(&y).to_bits(),
                        "{len} {top} {special}"
                    );
                }
                assert_eq!(absmax_scale(&x), 127.0 / 9.5);
            }
            let zeros = vec![0.0; len];
            assert_eq!(absmax_scale(&zeros), 127.0 / 1e-5);
        }
    }

    #[test]
    fn one_is_exact_in_fp16() {
        assert_eq!(crate::format::f32_to_f16(1.0), ONE_F16);
    }

    #[test]
    fn i2s_layout_matches_the_definition() {
        // Byte b holds weights b, b+32, b+64, b+96 from the most significant pair down.
        let codes = codes_with(&[(0, 2), (32, 0), (127, 3)]);
        let bytes = encode_i2s(&codes, 0.5).unwrap();
        assert_eq!(bytes.len(), 64);
        assert_eq!(bytes[0], 0b10_00_01_01);
        assert_eq!(bytes[31], 0b01_01_01_11);
        assert_eq!(&bytes[32..36], &0.5f32.to_le_bytes());
        let mut back = vec![0u8; 128];
        assert_eq!(decode_i2s(&bytes, 128, &mut back).unwrap(), 0.5);
        assert_eq!(back, codes);
    }

    /// 128 codes 1 (weight 0) but for the `(index, code)` pairs in `set`.
    fn codes_with(set: &[(usize, u8)]) -> Vec<u8> {
        let mut codes = vec![1u8; 128];
        for &(i, c) in set {
            codes[i] = c;
        }
        codes
    }

    #[test]
    fn iq2bn_layout_matches_the_definition() {
        let codes = codes_with(&[(0, 2), (16, 0), (48, 3), (64 + 5, 2)]);
        let bytes = encode_iq2bn(&codes, &[0.25], 128).unwrap();
        assert_eq!(bytes.len(), 4 + 32);
        assert_eq!(&bytes[..4], &0.25f32.to_le_bytes());
        assert_eq!(bytes[4], 0b11_01_00_10);
        assert_eq!(bytes[4 + 16 + 5], 0b01_01_01_10);
        let mut back = vec![0u8; 128];
        assert_eq!(decode_iq2bn(&bytes, 1, 128, &mut back).unwrap(), vec![0.25]);
        assert_eq!(back, codes);
    }

    /// ik_llama.cpp's IQ1_BN block, written from its definition (`quantize_one_row_1bn`):
    /// per group of 5 weights `idx = sum(3^j * q_j)`, byte `ceil(256 * idx / 243)`; the 16th
    /// weight of each quarter goes to the last byte with weight `3^quarter`.
    fn ik_iq1bn_block(q: &[u8]) -> [u8; 13] {
        let byte = |idx: u32| ((256 * idx).div_ceil(243)) as u8;
        let mut out = [0u8; 13];
        let mut last = 0u32;
        for quarter in 0..4 {
            for g in 0..3 {
                let idx = (0..5).map(|j| 3u32.pow(j as u32) * q[16 * quarter + 5 * g + j] as u32);
                out[3 * quarter + g] = byte(idx.sum());
            }
            last += 3u32.pow(quarter as u32) * q[16 * quarter + 15] as u32;
        }
        out[12] = byte(last);
        out
    }

    /// ik_llama.cpp's `dequantize_row_iq1_bn` digit: `v = (u8)(byte * mult)`, `(v + (v >> 1)) >> 7`.
    fn ik_digit(byte: u8, mult: u8) -> u8 {
        let v = byte.wrapping_mul(mult) as u32;
        ((v + (v >> 1)) >> 7) as u8
    }

    #[test]
    fn iq1bn_layout_matches_the_definition() {
        let k_mult = [81u8, 27, 9, 3, 1];
        let (rows, k) = (3, 192);
        let mut codes: Vec<u8> = (0..rows * k).map(|i| ((i * 7 + i / 3) % 3) as u8).collect();
        codes[..64].fill(2);
        codes[64..128].fill(0);
        let scales = [0.5f32, -0.0231, 0.0];
        let bytes = encode_iq1bn(&codes, &scales, k).unwrap();
        assert_eq!(bytes.len(), rows * (2 + 3 * 13));
        for r in 0..rows {
            let row = &bytes[r * 41..(r + 1) * 41];
            let d = half::f16::from_f32(scales[r]);
            assert_eq!(&row[..2], &d.to_le_bytes());
            for b in 0..3 {
                let q = &codes[r * k + 64 * b..r * k + 64 * (b + 1)];
                let block = &row[2 + 13 * b..2 + 13 * (b + 1)];
                assert_eq!(block, ik_iq1bn_block(q), "row {r} block {b}");
                // ik's decoder reads the codes back.
                let mut back = Vec::new();
                for quarter in 0..4 {
                    for g in 0..3 {
                        back.extend(k_mult.iter().map(|&m| ik_digit(block[3 * quarter + g], m)));
                    }
                    back.push(ik_digit(block[12], k_mult[quarter]));
                }
                assert_eq!(back, q, "row {r} block {b}");
            }
        }
        let mut back = vec![0u8; rows * k];
        let got = decode_iq1bn(&bytes, rows, k, &mut back).unwrap();
        let want: Vec<f32> = scales
            .iter()
            .map(|&d| half::f16::from_f32(d).to_f32())
            .collect();
        assert_eq!(got, want);
        assert_eq!(back, codes);
        // Code 3 (+2) has no base-3 digit.
        let mut three = codes.clone();
        three[70] = 3;
        assert!(encode_iq1bn(&three, &scales, k).is_err());
        assert!(decode_iq1bn(&bytes[1..], rows, k, &mut back).is_err());
    }

    #[test]
    fn repack_round_trips_the_codes() {
        let (rows, k): (usize, usize) = (6, 256);
        let codes: Vec<u8> = (0..rows * k).map(|i| ((i * 7 + i / 5) % 4) as u8).collect();
        // A format's repack into fresh blocks: the blocks and the scales it returns.
        let repacked = |repack: &dyn Fn(&mut [BlockT2p]) -> Result<Vec<f32>>| {
            let mut t = vec![BlockT2p::default(); rows.div_ceil(4) * k / 128];
            let scales = repack(&mut t).unwrap();
            (t, scales)
        };
        let i2s_of = |data: &[u8]| repacked(&|t| Ok(vec![repack_i2s_to_t2p(data, rows, k, t)?]));
        let (t2p, scale) = i2s_of(&encode_i2s(&codes, 0.125).unwrap());
        assert_eq!(scale, [0.125]);
        let scales: Vec<f32> = (0..rows).map(|r| r as f32 + 0.5).collect();
        let bn = encode_iq2bn(&codes, &scales, k).unwrap();
        let iq2bn = repacked(&|t| repack_bitnet_to_t2p(GgmlType::IQ2_BN, &bn, rows, k, t));
        assert_eq!(iq2bn, (t2p.clone(), scales.clone()));
        // IQ1_BN holds the ternary codes (no +2): the same blocks as I2_S of those codes.
        let ternary: Vec<u8> = codes.iter().map(|&u| u.min(2)).collect();
        let (t2p_i2s, _) = i2s_of(&encode_i2s(&ternary, 1.0).unwrap());
        let bn1 = encode_iq1bn(&ternary, &scales, k).unwrap();
        let iq1bn = repacked(&|t| repack_bitnet_to_t2p(GgmlType::IQ1_BN, &bn1, rows, k, t));
        assert_eq!(iq1bn, (t2p_i2s, scales.clone()));
        let mut row = vec![0f32; k];
        for r in 0..rows {
            let g = r / 4;
            dequantize_t2p_row(&t2p[g * 2..g * 2 + 2], r % 4, &mut row);
            let want: Vec<f32> = codes[r * k..(r + 1) * k]
                .iter()
                .map(|&u| (u as i32 - 1) as f32)
                .collect();
            assert_eq!(row, want, "row {r}");
        }
        // The padding rows are zero weights.
        dequantize_t2p_row(&t2p[2..4], 3, &mut row);
        assert!(row.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn refuses_bad_shapes_and_sizes() {
        assert!(i2s_scale(&[0; 40], 100).is_err());
        assert!(i2s_scale(&[0; 63], 128).is_err());
        assert!(encode_i2s(&[4; 128], 1.0).is_err());
        let mut t2p = vec![BlockT2p::default(); 1];
        assert!(repack_bitnet_to_t2p(GgmlType::IQ2_BN, &[0; 4 + 16], 1, 64, &mut t2p).is_err());
        assert!(repack_bitnet_to_t2p(GgmlType::IQ1_BN, &[0; 2 + 13], 1, 64, &mut t2p).is_err());
        assert!(repack_bitnet_to_t2p(GgmlType::IQ1_BN, &[0; 2 + 25], 1, 128, &mut t2p).is_err());
    }

    #[test]
    fn int8_quantizer_rounds_half_even_and_hits_the_ends() {
        let x = [1.0f32, -1.0, 0.5 / 127.0, 1.5 / 127.0, 2.5 / 127.0, 0.0];
        let mut q = [0i8; 6];
        let s = quantize_row_i8_absmax(&x, &mut q);
        assert_eq!(s, 127.0);
        assert_eq!(q, [127, -127, 0, 2, 2, 0]);
        let mut z = [5i8; 3];
        assert_eq!(quantize_row_i8_absmax(&[0.0; 3], &mut z), 127.0 / 1e-5);
        assert_eq!(z, [0; 3]);
    }
}
