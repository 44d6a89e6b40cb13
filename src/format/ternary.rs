//! Every ternary block format t2p loads, and their exact conversion into T2P rows.
//!
//! Each format holds a 2-bit code `u = w + 1` per weight (some packed in base 3) and an fp16
//! scale per group; [`TernaryBlock::decode`] yields the codes and one scale per group of its T2P
//! layout ([`TernaryBlock::Target`]: 128 weights, or 64 for mainline's Q2_0), so the T2P result
//! dequantizes to bit-identical weights (`(u - 1) * d` on both sides).
//! [`TernaryBlock::encode`] is the inverse (used by `libt2p synth` and the tests): it refuses
//! what a format cannot hold instead of rounding it.

use bytemuck::{Pod, Zeroable};

use super::trits::{decode_trits, pack_trits};
use super::{
    BlockPq2_0, BlockQ2_0g64, BlockT2p, BlockT2pG64, GgmlType, QK_PQ2_0, ROWS_PER_T2P,
    RowPairBlock, f16_to_f32,
};
use crate::error::{Error, Result, check_len};

/// A block format of ternary weights that can be repacked into T2P.
pub trait TernaryBlock: Pod {
    /// The GGML type of the format (as stored in GGUF tensor infos); its name and block size
    /// come from the type table.
    const GGML_TYPE: GgmlType;
    /// The format's name as ggml prints it.
    const NAME: &'static str = match Self::GGML_TYPE.table_name() {
        Some(name) => name,
        None => panic!("a ternary block's type must be in the GGML type table"),
    };
    /// Weights per block (64, 128 or 256).
    const WEIGHTS: usize = match Self::GGML_TYPE.block() {
        Some((weights, _)) => weights as usize,
        None => panic!("a ternary block's type must be in the GGML type table"),
    };
    /// The T2P layout the format repacks into: [`BlockT2p`] (a scale per 128 weights), or
    /// [`BlockT2pG64`] for a format with a scale per 64.
    type Target: RowPairBlock;
    /// Scales [`decode`](Self::decode) writes per block: one per `Target::GROUP` weights.
    const SCALES: usize = Self::WEIGHTS.div_ceil(<Self::Target as RowPairBlock>::GROUP);
    /// Writes the `WEIGHTS` codes (0..=3) into `codes` and the `SCALES` fp16 scales.
    ///
    /// # Panics
    /// If `codes` is shorter than `WEIGHTS` or `scales` than `SCALES`.
    fn decode(&self, codes: &mut [u8], scales: &mut [u16]);
    /// Builds a block from `WEIGHTS` codes and `SCALES` fp16 scales, so that
    /// [`decode`](Self::decode) gives them back exactly. Refused: wrong lengths, codes above 3
    /// (above 2 for the base-3 formats), and two different scales for a 256-weight format.
    fn encode(codes: &[u8], scales: &[u16]) -> Result<Self>;
}

/// Whether `B`'s struct is the block the type table gives for its type.
const fn matches_table<B: TernaryBlock>() -> bool {
    B::GGML_TYPE.has_block(B::WEIGHTS, std::mem::size_of::<B>())
}

const _: () = assert!(
    matches_table::<BlockPq2_0>()
        && matches_table::<BlockTq2_0>()
        && matches_table::<BlockTq1_0>()
        && matches_table::<BlockPtq1_0>()
        && matches_table::<BlockQ2_0g64>()
);

/// Checks the arguments of [`TernaryBlock::encode`] (every code at most `max_code`, `SCALES`
/// scales, all of them equal) and returns the block's scale.
fn check_encode<B: TernaryBlock>(codes: &[u8], scales: &[u16], max_code: u8) -> Result<u16> {
    if codes.len() != B::WEIGHTS || scales.len() != B::SCALES {
        return Err(Error::Shape(format!(
            "a {} block takes {} codes and {} scales, got {} and {}",
            B::NAME,
            B::WEIGHTS,
            B::SCALES,
            codes.len(),
            scales.len()
        )));
    }
    if let Some(i) = codes.iter().position(|&u| u > max_code) {
        return Err(Error::InvalidArgument(format!(
            "code {} at weight {i} does not fit a {} block (codes 0..={max_code})",
            codes[i],
            B::NAME
        )));
    }
    if scales.iter().any(|&d| d != scales[0]) {
        return Err(Error::InvalidArgument(format!(
            "a {} block has one scale per {} weights, got different scales {:04x?}",
            B::NAME,
            B::WEIGHTS,
            scales
        )));
    }
    Ok(scales[0])
}

/// The codes of pq2_0's linear 2-bit layout (also mainline Q2_0's): weight `j` in bits
/// `2 * (j % 4)` of `qs[j / 4]`, four codes a byte into the first `4 * qs.len()` of `codes`.
fn decode_2bit(qs: &[u8], codes: &mut [u8]) {
    for (c, &q) in codes[..4 * qs.len()].chunks_exact_mut(4).zip(qs) {
        c.copy_from_slice(&[q & 3, (q >> 2) & 3, (q >> 4) & 3, q >> 6]);
    }
}

/// The inverse of [`decode_2bit`] into zeroed `qs`, for codes already checked to be at most 3.
fn encode_2bit(codes: &[u8], qs: &mut [u8]) {
    for (j, &u) in codes.iter().enumerate() {
        qs[j / 4] |= u << (2 * (j % 4));
    }
}

/// `tq2_0` (llama.cpp mainline, type 35): 256 weights in 66 bytes, planar 2-bit codes: byte
/// `32h + m` holds elements `128h + m + 32l` in bits `2l` (l = 0..4); the fp16 scale is last.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockTq2_0 {
    /// 2-bit codes.
    pub qs: [u8; 64],
    /// Scale, fp16 bits.
    pub d: u16,
}

impl TernaryBlock for BlockTq2_0 {
    type Target = BlockT2p;
    const GGML_TYPE: GgmlType = GgmlType::TQ2_0;
    fn decode(&self, codes: &mut [u8], scales: &mut [u16]) {
        // Byte 32h + m holds element 128h + 32l + m in bits 2l: 32 contiguous codes per (h, l).
        for (half, qs) in codes[..256]
            .chunks_exact_mut(128)
            .zip(self.qs.chunks_exact(32))
        {
            for (l, out) in half.chunks_exact_mut(32).enumerate() {
                for (o, &b) in out.iter_mut().zip(qs) {
                    *o = (b >> (2 * l)) & 3;
                }
            }
        }
        scales[..2].fill(self.d);
    }
    fn encode(codes: &[u8], scales: &[u16]) -> Result<Self> {
        let d = check_encode::<Self>(codes, scales, 3)?;
        let mut qs = [0u8; 64];
        for (j, q) in qs.iter_mut().enumerate() {
            let (h, m) = (j / 32, j % 32);
            for l in 0..4 {
                *q |= codes[128 * h + 32 * l + m] << (2 * l);
            }
        }
        Ok(BlockTq2_0 { qs, d })
    }
}

/// Defines the base-3 block structs `{ qs; qh; d }` of [`decode_base3`]'s layout, one size each.
macro_rules! base3_block {
    ($($(#[$doc:meta])* $B:ident { qs: $qs:literal, qh: $qh:literal })*) => {
        $($(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
        pub struct $B {
            /// Base-3 bytes, 5 trits each.
            pub qs: [u8; $qs],
            /// Base-3 bytes, 4 trits each.
            pub qh: [u8; $qh],
            /// Scale, fp16 bits.
            pub d: u16,
        })*
    };
}
base3_block! {
    /// `tq1_0` (llama.cpp mainline, type 34): 256 weights in 54 bytes: `qs[48]` with 5 trits a byte
    /// (elements `32n + m` from `qs[m]`, m < 32, then `160 + 16n + m` from `qs[32 + m]`), `qh[4]`
    /// with 4 trits a byte (elements `240 + 4n + j` from `qh[j]`), then the fp16 scale.
    BlockTq1_0 { qs: 48, qh: 4 }
    /// `ptq1_0` (PrismML, type 143): 128 weights in 28 bytes `{ qs[24]; qh[2]; d }`, base 3. The
    /// element order is the one PrismML's own x86 kernel reads (`ggml_vec_dot_ptq1_0_q8_0` in the
    /// fork's `ggml-cpu/arch/x86/quants.c`, commit 04e39def): elements `16n + m` are trit `n` of `qs[m]` (m < 16), `80 + 8n + m` trit `n` of
    /// `qs[16 + m]` (m < 8), `120 + 2n + h` trit `n` of `qh[h]` (h < 2, n < 4).
    BlockPtq1_0 { qs: 24, qh: 2 }
}

/// The base-3 element order tq1_0 and ptq1_0 share, for `8 * a` weights with `a = 8 *
/// qh.len()`: elements `a n + m` are trit `n` of `qs[m]` (m < a), `5a + (a / 2) n + m` trit
/// `n` of `qs[a + m]` (m < a / 2), `15a / 2 + (a / 8) n + j` trit `n` of `qh[j]` (n < 4). Writes
/// the codes into `codes[..8 * a]`.
fn decode_base3(qs: &[u8], qh: &[u8], codes: &mut [u8]) {
    let (a, c) = (8 * qh.len(), qh.len());
    let b = a / 2;
    let (lo, hi) = qs.split_at(a);
    for n in 0..5 {
        decode_trits(lo, n as u32, &mut codes[a * n..a * n + a]);
        let at = 5 * a + b * n;
        decode_trits(hi, n as u32, &mut codes[at..at + b]);
    }
    for n in 0..4 {
        let at = 5 * a + 5 * b + c * n;
        decode_trits(qh, n as u32, &mut codes[at..at + c]);
    }
}

/// The inverse of [`decode_base3`], for codes already checked to be at most 2.
fn encode_base3(codes: &[u8], qs: &mut [u8], qh: &mut [u8]) {
    let (a, c) = (8 * qh.len(), qh.len());
    let b = a / 2;
    let (lo, hi) = qs.split_at_mut(a);
    for (m, q) in lo.iter_mut().enumerate() {
        *q = pack_trits(&std::array::from_fn::<u8, 5, _>(|n| codes[a * n + m]));
    }
    for (m, q) in hi.iter_mut().enumerate() {
        *q = pack_trits(&std::array::from_fn::<u8, 5, _>(|n| {
            codes[5 * a + b * n + m]
        }));
    }
    for (j, q) in qh.iter_mut().enumerate() {
        *q = pack_trits(&std::array::from_fn::<u8, 4, _>(|n| {
            codes[5 * a + 5 * b + c * n + j]
        }));
    }
}

/// The formats that are one code layout's (`decode(fields.., codes)` and `encode(codes,
/// fields..)` over the block's code arrays) with one scale `d` per block: pq2_0 and mainline's
/// group-64 Q2_0 (pq2_0's linear 2-bit codes, a scale per 128 or 64, so [`BlockT2p`] or
/// [`BlockT2pG64`]), tq1_0 and ptq1_0 (the base-3 layout in two sizes). `max` is the highest
/// code the layout holds.
macro_rules! layout_block {
    ($($B:ident => $ty:ident, $T:ident, $decode:ident / $encode:ident ($($f:ident),*), max $max:literal;)*) => {
        $(impl TernaryBlock for $B {
            type Target = $T;
            const GGML_TYPE: GgmlType = GgmlType::$ty;
            fn decode(&self, codes: &mut [u8], scales: &mut [u16]) {
                $decode($(&self.$f,)* &mut codes[..Self::WEIGHTS]);
                scales[..Self::SCALES].fill(self.d);
            }
            fn encode(codes: &[u8], scales: &[u16]) -> Result<Self> {
                let d = check_encode::<Self>(codes, scales, $max)?;
                let mut b = Self { d, ..Self::zeroed() };
                $encode(codes, $(&mut b.$f),*);
                Ok(b)
            }
        })*
    };
}
layout_block! {
    BlockPq2_0 => PQ2_0, BlockT2p, decode_2bit / encode_2bit(qs), max 3;
    BlockQ2_0g64 => Q2_0_G64, BlockT2pG64, decode_2bit / encode_2bit(qs), max 3;
    BlockTq1_0 => TQ1_0, BlockT2p, decode_base3 / encode_base3(qs, qh), max 2;
    BlockPtq1_0 => PTQ1_0, BlockT2p, decode_base3 / encode_base3(qs, qh), max 2;
}

/// Dequantizes one row of any ternary format (`blocks` covering the row) into `out`.
pub fn dequantize_row<B: TernaryBlock>(blocks: &[B], out: &mut [f32]) -> Result<()> {
    check_len("output values", blocks.len() * B::WEIGHTS, out.len())?;
    let mut codes = vec![0u8; B::WEIGHTS];
    let mut scales = vec![0u16; B::SCALES];
    let group = <B::Target as RowPairBlock>::GROUP;
    for (b, chunk) in blocks.iter().zip(out.chunks_exact_mut(B::WEIGHTS)) {
        b.decode(&mut codes, &mut scales);
        for (i, (o, &u)) in chunk.iter_mut().zip(&codes).enumerate() {
            *o = (u as i32 - 1) as f32 * f16_to_f32(scales[i / group]);
        }
    }
    Ok(())
}

/// Repacks row group `g`'s source rows (4 rows of `k / WEIGHTS` blocks each, row-major in `src`)
/// into `k / 128` T2P blocks.
pub(super) fn repack_group<B: TernaryBlock>(src: &[B], k: usize, dst: &mut [B::Target]) {
    // pq2_0, the format of nearly every model, moves its codes byte-wise without decoding them
    // one at a time (loading a 7 GB model is then bound by memory, not by this loop).
    if B::GGML_TYPE == GgmlType::PQ2_0
        && let (Ok(s), Ok(d)) = (
            bytemuck::try_cast_slice::<B, BlockPq2_0>(src),
            bytemuck::try_cast_slice_mut::<B::Target, BlockT2p>(dst),
        )
    {
        return repack_group_pq2_0(s, k, d);
    }
    repack_group_decoded(src, k, dst);
}

/// `SPREAD[v]`: the four 2-bit fields of byte `v` moved to bits `8m..8m + 2` (field `m`).
const SPREAD: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut v = 0;
    while v < 256 {
        let mut m = 0;
        while m < 4 {
            t[v] |= (((v >> (2 * m)) & 3) as u32) << (8 * m);
            m += 1;
        }
        v += 1;
    }
    t
};

/// 32 pq2_0 codes (8 bytes, weight `j` in slot `j % 4` of byte `j / 4`) in T2P order (weight
/// `8s + i` in slot `s` of byte `i`): a 4 x 8 transpose of 2-bit fields. Source byte `2s + h`
/// holds weights `8s + 4h + m`, which go to slot `s` of bytes `4h + m`.
#[inline]
fn transpose_32(q: &[u8]) -> [u8; 8] {
    let (mut lo, mut hi) = (0u32, 0u32);
    for s in 0..4 {
        lo |= SPREAD[q[2 * s] as usize] << (2 * s);
        hi |= SPREAD[q[2 * s + 1] as usize] << (2 * s);
    }
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&lo.to_le_bytes());
    out[4..].copy_from_slice(&hi.to_le_bytes());
    out
}

/// [`repack_group`] for pq2_0: the same bytes as [`repack_group_decoded`] (the tests compare
/// them), 8 table lookups per 32 weights instead of a decode and a pack per weight.
fn repack_group_pq2_0(src: &[BlockPq2_0], k: usize, dst: &mut [BlockT2p]) {
    let nb = k / QK_PQ2_0;
    let real = (src.len() / nb.max(1)).min(ROWS_PER_T2P);
    for (b, t) in dst.iter_mut().enumerate().take(nb) {
        for r in 0..ROWS_PER_T2P {
            let half = 8 * (r % 2);
            if r < real {
                let block = &src[r * nb + b];
                t.d[r] = block.d;
                for (wd, q) in block.qs.chunks_exact(8).enumerate() {
                    t.qs[r / 2][wd][half..half + 8].copy_from_slice(&transpose_32(q));
                }
            } else {
                // A padded row: zero weights (code 1 everywhere, scale 0).
                t.d[r] = 0;
                for word in t.qs[r / 2].iter_mut() {
                    word[half..half + 8].fill(0x55);
                }
            }
        }
    }
}

/// [`repack_group`] for any format: each source block decoded into codes and scales, each T2P
/// row set from them.
fn repack_group_decoded<B: TernaryBlock>(src: &[B], k: usize, dst: &mut [B::Target]) {
    let per_row = k / B::WEIGHTS;
    let group = <B::Target as RowPairBlock>::GROUP;
    // One step decodes `span` weights of a row: one source block of 128 or 256 weights (one
    // or two T2P blocks' row `r`), or two 64-weight blocks (one T2P block's row).
    let span = B::WEIGHTS.max(QK_PQ2_0);
    let (src_per_step, t2p_per_step) = (span / B::WEIGHTS, span / QK_PQ2_0);
    let mut codes = [0u8; 256];
    let mut scales = [0u16; 4];
    // A padded last group has fewer source rows: the missing ones are zero weights.
    let real = (src.len() / per_row).min(ROWS_PER_T2P);
    let zero_scales = [0u16; 2];
    for t in dst.iter_mut() {
        for r in real..ROWS_PER_T2P {
            t.set_row(
                r,
                &[1; QK_PQ2_0],
                &zero_scales[..<B::Target as RowPairBlock>::HALVES],
            );
        }
    }
    for (r, row) in src.chunks_exact(per_row).take(ROWS_PER_T2P).enumerate() {
        for (blocks, out) in row
            .chunks_exact(src_per_step)
            .zip(dst.chunks_exact_mut(t2p_per_step))
        {
            for (i, block) in blocks.iter().enumerate() {
                let (c, s) = (i * B::WEIGHTS, i * B::SCALES);
                block.decode(&mut codes[c..c + B::WEIGHTS], &mut scales[s..s + B::SCALES]);
            }
            let (chunks, _) = codes[..span].as_chunks::<QK_PQ2_0>();
            let per_t2p = QK_PQ2_0 / group;
            for (t, (blk, c)) in out.iter_mut().zip(chunks).enumerate() {
                blk.set_row(r, c, &scales[t * per_t2p..(t + 1) * per_t2p]);
            }
        }
    }
}

/// Repacks a `rows x k` tensor of any ternary format (row-major blocks) into T2P row groups.
/// `k` must be a multiple of the format's block (128 or 256); a last group of fewer than 4
/// rows is padded with zero rows.
pub fn repack_to_t2p<B: TernaryBlock>(
    src: &[B],
    rows: usize,
    k: usize,
    dst: &mut [B::Target],
) -> Result<()> {
    let n = super::t2p_block_count(rows, k)?;
    if !k.is_multiple_of(B::WEIGHTS) {
        return Err(Error::Shape(format!(
            "k = {k} is not a multiple of the {} block ({})",
            B::NAME,
            B::WEIGHTS
        )));
    }
    let per_row = k / B::WEIGHTS;
    check_len("source blocks", rows * per_row, src.len())?;
    check_len("T2P destination blocks", n, dst.len())?;
    let nb = k / QK_PQ2_0;
    for (g, out) in dst[..n].chunks_exact_mut(nb).enumerate() {
        repack_group(
            &src[4 * g * per_row..(4 * g + 4).min(rows) * per_row],
            k,
            out,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{dequantize_row_pq2_0, f32_to_f16};

    #[test]
    fn pq2_0_fast_repack_equals_the_decoded_one() {
        let mut rng = Lcg(7);
        for (rows, k) in [(4usize, 128usize), (8, 512), (3, 256), (13, 384), (1, 128)] {
            let src: Vec<BlockPq2_0> = (0..rows * k / 128)
                .map(|_| BlockPq2_0 {
                    d: u16::from_le_bytes(rng.bytes::<2>()),
                    qs: rng.bytes::<32>(),
                })
                .collect();
            let nb = k / 128;
            for g in 0..rows.div_ceil(4) {
                let rows_g = &src[4 * g * nb..(4 * g + 4).min(rows) * nb];
                let mut fast = vec![BlockT2p::default(); nb];
                let mut slow = vec![BlockT2p::default(); nb];
                repack_group_pq2_0(rows_g, k, &mut fast);
                repack_group_decoded(rows_g, k, &mut slow);
                assert_eq!(fast, slow, "{rows} x {k}, group {g}");
            }
        }
    }

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u8 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 40) as u8
        }

        /// `N` random bytes (valid or not for the format).
        fn bytes<const N: usize>(&mut self) -> [u8; N] {
            std::array::from_fn(|_| self.next())
        }

        /// `n` random blocks.
        fn blocks<B: Random>(&mut self, n: usize) -> Vec<B> {
            (0..n).map(|_| B::random(self)).collect()
        }
    }

    /// A random block or block field: scales from [`scale`] (zeros and finite values), code
    /// bytes uniform (valid for the format or not).
    trait Random {
        fn random(r: &mut Lcg) -> Self;
    }

    impl Random for u16 {
        fn random(r: &mut Lcg) -> Self {
            scale(r)
        }
    }

    impl<const N: usize> Random for [u8; N] {
        fn random(r: &mut Lcg) -> Self {
            r.bytes()
        }
    }

    /// Every ternary block is random field by field, in the order given.
    macro_rules! random_block {
        ($($B:ident { $($f:ident),* })*) => {
            $(impl Random for $B {
                fn random(r: &mut Lcg) -> Self {
                    $B { $($f: Random::random(r)),* }
                }
            })*
        };
    }
    random_block!(
        BlockPq2_0 { d, qs }
        BlockTq2_0 { qs, d }
        BlockTq1_0 { qs, qh, d }
        BlockPtq1_0 { qs, qh, d }
        BlockQ2_0g64 { d, qs }
    );

    fn t2p_dequant<T: RowPairBlock>(t: &[T], rows: usize, k: usize) -> Vec<f32> {
        let nb = k / 128;
        let mut out = vec![0.0; rows * k];
        for (r, row) in out.chunks_exact_mut(k).enumerate() {
            crate::format::dequantize_t2p_row(&t[r / 4 * nb..(r / 4 + 1) * nb], r % 4, row);
        }
        out
    }

    #[test]
    fn t2p_dequant_agrees_with_the_pq2_0_unpack() {
        let mut rng = Lcg(9);
        let src: Vec<BlockPq2_0> = rng.blocks(8 * 256 / 128);
        let mut t = vec![BlockT2p::default(); 4];
        repack_to_t2p(&src, 8, 256, &mut t).unwrap();
        let mut pq = vec![BlockPq2_0::default(); src.len()];
        crate::format::unpack_t2p_to_pq2_0(&t, 8, 256, &mut pq).unwrap();
        let mut want = vec![0.0; 8 * 256];
        dequantize_row_pq2_0(&pq, &mut want);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&t2p_dequant(&t, 8, 256)), bits(&want));
    }

    fn check_round_trip<B: TernaryBlock>(src: &[B], rows: usize, k: usize) {
        let mut want = vec![0.0; rows * k];
        dequantize_row(src, &mut want).unwrap();
        let mut t = vec![B::Target::default(); rows.div_ceil(4) * k / 128];
        repack_to_t2p(src, rows, k, &mut t).unwrap();
        let got = t2p_dequant(&t, rows, k);
        assert!(
            want.iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{}",
            B::NAME
        );
    }

    /// [`check_round_trip`] of random blocks (`Lcg(seed)`) of a `rows x k` tensor.
    fn check_random_round_trip<B: TernaryBlock + Random>(seed: u64, rows: usize, k: usize) {
        check_round_trip(&Lcg(seed).blocks::<B>(rows * k / B::WEIGHTS), rows, k);
    }

    fn scale(rng: &mut Lcg) -> u16 {
        match rng.next() % 4 {
            0 => 0,
            1 => 0x8000, // -0.0
            _ => f32_to_f16((rng.next() as f32 - 128.0) / 64.0),
        }
    }

    #[test]
    fn tq2_0_round_trips_with_every_code() {
        check_random_round_trip::<BlockTq2_0>(1, 8, 512);
    }

    #[test]
    fn tq2_0_element_order_is_planar() {
        let mut b = BlockTq2_0::zeroed();
        b.qs[32 + 5] = 0b11_10_01_00; // elements 128+5+32l have codes l
        let mut codes = [0u8; 256];
        b.decode(&mut codes, &mut [0; 2]);
        assert_eq!(
            [codes[133], codes[165], codes[197], codes[229]],
            [0, 1, 2, 3]
        );
    }

    #[test]
    fn tq1_0_round_trips_on_valid_and_invalid_bytes() {
        check_random_round_trip::<BlockTq1_0>(2, 4, 768);
    }

    #[test]
    fn tq1_0_element_order_matches_its_packing() {
        // Element e gets trit e % 3; pack as the format says and read back through decode.
        let want: [u8; 256] = std::array::from_fn(|e| (e % 3) as u8);
        let mut b = BlockTq1_0::zeroed();
        for m in 0..32 {
            b.qs[m] = pack_trits(&(0..5).map(|n| want[32 * n + m]).collect::<Vec<_>>());
        }
        for m in 0..16 {
            b.qs[32 + m] = pack_trits(&(0..5).map(|n| want[160 + 16 * n + m]).collect::<Vec<_>>());
        }
        for j in 0..4 {
            b.qh[j] = pack_trits(&(0..4).map(|n| want[240 + 4 * n + j]).collect::<Vec<_>>());
        }
        let mut codes = [0u8; 256];
        b.decode(&mut codes, &mut [0; 2]);
        assert_eq!(codes, want);
    }

    #[test]
    fn ptq1_0_round_trips() {
        check_random_round_trip::<BlockPtq1_0>(3, 4, 256);
    }

    #[test]
    fn pq2_0_through_the_generic_path_equals_the_direct_repack() {
        let mut rng = Lcg(4);
        let src: Vec<BlockPq2_0> = rng.blocks(8 * 256 / 128);
        let mut a = vec![BlockT2p::default(); 4];
        let mut b = vec![BlockT2p::default(); 4];
        repack_to_t2p(&src, 8, 256, &mut a).unwrap();
        crate::format::repack_pq2_0_to_t2p(&src, 8, 256, &mut b).unwrap();
        assert_eq!(a, b);
        // Both use `repack_group`: check it against a weight-by-weight packing by position.
        let mut naive = vec![BlockT2p::default(); 4];
        for (i, blk) in src.iter().enumerate() {
            let (row, b) = (i / 2, i % 2); // 2 blocks of 128 per row
            let t = &mut naive[row / 4 * 2 + b];
            t.d[row % 4] = blk.d;
            for k in 0..128 {
                let (p, wd, j, s) = BlockT2p::position(row % 4, k);
                t.qs[p][wd][j] |= blk.code(k) << (2 * s);
            }
        }
        assert_eq!(a, naive);
        check_round_trip(&src, 8, 256);
    }

    /// Random codes (0..=max) and scales, encoded, must decode to themselves.
    fn check_encode_round_trip<B: TernaryBlock>(max: u8, seed: u64) {
        let mut rng = Lcg(seed);
        let ns = B::SCALES;
        for i in 0..200 {
            let codes: Vec<u8> = match i {
                0..3 => vec![i as u8; B::WEIGHTS], // all -1, all 0, all +1
                3 => vec![max; B::WEIGHTS],
                _ => (0..B::WEIGHTS).map(|_| rng.next() % (max + 1)).collect(),
            };
            let d = if i % 7 == 0 { 0 } else { scale(&mut rng) };
            let scales = vec![d; ns];
            let b = B::encode(&codes, &scales).unwrap();
            let (mut c2, mut s2) = (vec![9u8; B::WEIGHTS], vec![1u16; ns]);
            b.decode(&mut c2, &mut s2);
            assert_eq!(c2, codes, "{} block {i}", B::NAME);
            assert_eq!(s2, scales, "{} block {i}", B::NAME);
        }
    }

    #[test]
    fn encoders_round_trip_through_decode() {
        check_encode_round_trip::<BlockPq2_0>(3, 10);
        check_encode_round_trip::<BlockTq2_0>(3, 11);
        check_encode_round_trip::<BlockTq1_0>(2, 12);
        check_encode_round_trip::<BlockPtq1_0>(2, 13);
        check_encode_round_trip::<BlockQ2_0g64>(3, 15);
    }

    #[test]
    fn q2_0_g64_round_trips_with_a_scale_per_64_and_padded_rows() {
        let mut rng = Lcg(5);
        for rows in [8, 7, 1] {
            let src: Vec<BlockQ2_0g64> = rng.blocks(rows * 384 / 64);
            check_round_trip(&src, rows, 384);
        }
    }

    #[test]
    fn q2_0_g64_element_order_is_pq2_0_s() {
        // The same code bytes as pq2_0: two g64 blocks are one pq2_0 block with two scales.
        let mut rng = Lcg(6);
        let pq = BlockPq2_0 {
            d: 0x3c00,
            qs: std::array::from_fn(|_| rng.next()),
        };
        let halves: [BlockQ2_0g64; 2] = std::array::from_fn(|h| BlockQ2_0g64 {
            d: 0x3c00,
            qs: pq.qs[16 * h..16 * h + 16].try_into().unwrap(),
        });
        let (mut a, mut b) = ([0.0f32; 128], [0.0f32; 128]);
        dequantize_row(&[pq], &mut a).unwrap();
        dequantize_row(&halves, &mut b).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn encoders_agree_with_the_existing_block_constructors() {
        let mut rng = Lcg(14);
        let codes: [u8; 128] = std::array::from_fn(|_| rng.next() % 4);
        assert_eq!(
            BlockPq2_0::encode(&codes, &[0x3c00]).unwrap(),
            BlockPq2_0::from_codes(&codes, 0x3c00)
        );
        // tq2_0: byte 32h + m holds element 128h + 32l + m in bits 2l.
        let mut codes = [0u8; 256];
        codes[128 + 5] = 1;
        codes[128 + 32 + 5] = 2;
        codes[128 + 96 + 5] = 3;
        let b = BlockTq2_0::encode(&codes, &[7, 7]).unwrap();
        assert_eq!(b.qs[32 + 5], 0b11_00_10_01);
        assert_eq!(b.qs.iter().filter(|&&q| q != 0).count(), 1);
        assert_eq!(b.d, 7);
    }

    #[test]
    fn encoders_refuse_what_the_format_cannot_hold() {
        let mut codes = vec![1u8; 256];
        codes[17] = 3;
        assert!(BlockTq1_0::encode(&codes, &[0, 0]).is_err(), "+2 in base 3");
        assert!(BlockTq2_0::encode(&codes, &[0, 0]).is_ok(), "+2 in 2 bits");
        assert!(BlockPtq1_0::encode(&codes[..128], &[0]).is_err());
        codes[17] = 4;
        assert!(BlockTq2_0::encode(&codes, &[0, 0]).is_err(), "code 4");
        codes[17] = 1;
        let e = BlockTq2_0::encode(&codes, &[0x3c00, 0x4000]).unwrap_err();
        assert!(e.to_string().contains("one scale per 256"), "{e}");
        assert!(BlockTq1_0::encode(&codes, &[0x3c00, 0x3c01]).is_err());
        assert!(BlockTq1_0::encode(&codes[..128], &[0]).is_err(), "length");
        assert!(
            BlockPq2_0::encode(&codes[..128], &[0, 0]).is_err(),
            "scales"
        );
    }

    #[test]
    fn bad_shapes_are_errors() {
        let src = vec![BlockTq2_0::zeroed(); 4];
        let mut t = vec![BlockT2p::default(); 8];
        assert!(
            repack_to_t2p(&src, 4, 512, &mut t).is_err(),
            "too few source blocks"
        );
        assert!(repack_to_t2p(&src, 0, 256, &mut t).is_err(), "no rows");
        assert!(
            repack_to_t2p(&src, 4, 128, &mut t).is_err(),
            "k below the tq2_0 block"
        );
        // Three rows are a padded row group now.
        assert!(
            repack_to_t2p(&src[..3], 3, 256, &mut t).is_ok(),
            "three rows"
        );
    }
}
