//! Every ternary block format t2p loads, and their exact conversion into T2P rows.
//!
//! Each format holds a 2-bit code `u = w + 1` per weight (some packed in base 3) and an fp16
//! scale per group; [`TernaryBlock::decode`] yields the codes and one scale per 128 weights, so
//! the T2P result dequantizes to bit-identical weights (`(u - 1) * d` on both sides).

use bytemuck::{Pod, Zeroable};

use super::trits::trit;
use super::{BlockPq2_0, BlockT2p, QK_PQ2_0, f16_to_f32};
use crate::error::{Error, Result, check_len};

/// A block format of ternary weights that can be repacked into T2P.
pub trait TernaryBlock: Pod {
    /// The GGML type id of the format (as stored in GGUF tensor infos).
    const GGML_TYPE: u32;
    /// The format's name as ggml prints it.
    const NAME: &'static str;
    /// Weights per block (128 or 256).
    const WEIGHTS: usize;
    /// Writes the `WEIGHTS` codes (0..=3) into `codes` and one fp16 scale per 128 weights.
    fn decode(&self, codes: &mut [u8], scales: &mut [u16]);
}

impl TernaryBlock for BlockPq2_0 {
    const GGML_TYPE: u32 = 142;
    const NAME: &'static str = "pq2_0";
    const WEIGHTS: usize = QK_PQ2_0;
    fn decode(&self, codes: &mut [u8], scales: &mut [u16]) {
        codes[..QK_PQ2_0].copy_from_slice(&self.codes());
        scales[0] = self.d;
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
const _: () = assert!(std::mem::size_of::<BlockTq2_0>() == 66);

impl TernaryBlock for BlockTq2_0 {
    const GGML_TYPE: u32 = 35;
    const NAME: &'static str = "tq2_0";
    const WEIGHTS: usize = 256;
    fn decode(&self, codes: &mut [u8], scales: &mut [u16]) {
        for (j, &b) in self.qs.iter().enumerate() {
            let (h, m) = (j / 32, j % 32);
            for l in 0..4 {
                codes[128 * h + 32 * l + m] = (b >> (2 * l)) & 3;
            }
        }
        scales[..2].fill(self.d);
    }
}

/// `tq1_0` (llama.cpp mainline, type 34): 256 weights in 54 bytes: `qs[48]` with 5 trits a byte
/// (elements `32n + m` from `qs[m]`, m < 32, then `160 + 16n + m` from `qs[32 + m]`), `qh[4]`
/// with 4 trits a byte (elements `240 + 4n + j` from `qh[j]`), then the fp16 scale.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockTq1_0 {
    /// Base-3 bytes, 5 trits each.
    pub qs: [u8; 48],
    /// Base-3 bytes, 4 trits each.
    pub qh: [u8; 4],
    /// Scale, fp16 bits.
    pub d: u16,
}
const _: () = assert!(std::mem::size_of::<BlockTq1_0>() == 54);

impl TernaryBlock for BlockTq1_0 {
    const GGML_TYPE: u32 = 34;
    const NAME: &'static str = "tq1_0";
    const WEIGHTS: usize = 256;
    fn decode(&self, codes: &mut [u8], scales: &mut [u16]) {
        for n in 0..5 {
            for m in 0..32 {
                codes[32 * n + m] = trit(self.qs[m], n as u32);
            }
            for m in 0..16 {
                codes[160 + 16 * n + m] = trit(self.qs[32 + m], n as u32);
            }
        }
        for n in 0..4 {
            for j in 0..4 {
                codes[240 + 4 * n + j] = trit(self.qh[j], n as u32);
            }
        }
        scales[..2].fill(self.d);
    }
}

/// `ptq1_0` (PrismML, type 143): 128 weights in 28 bytes `{ qs[24]; qh[2]; d }`, base 3. The
/// element order is taken from third-party reports and has **not yet been checked against a real
/// file**: elements `16n + m` are trit `n` of `qs[m]` (m < 16), `80 + 8n + m` trit `n` of
/// `qs[16 + m]` (m < 8), `120 + 2n + h` trit `n` of `qh[h]` (h < 2, n < 4).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockPtq1_0 {
    /// Base-3 bytes, 5 trits each.
    pub qs: [u8; 24],
    /// Base-3 bytes, 4 trits each.
    pub qh: [u8; 2],
    /// Scale, fp16 bits.
    pub d: u16,
}
const _: () = assert!(std::mem::size_of::<BlockPtq1_0>() == 28);

impl TernaryBlock for BlockPtq1_0 {
    const GGML_TYPE: u32 = 143;
    const NAME: &'static str = "ptq1_0 (layout unverified against a real file)";
    const WEIGHTS: usize = 128;
    fn decode(&self, codes: &mut [u8], scales: &mut [u16]) {
        for n in 0..5 {
            for m in 0..16 {
                codes[16 * n + m] = trit(self.qs[m], n as u32);
            }
            for m in 0..8 {
                codes[80 + 8 * n + m] = trit(self.qs[16 + m], n as u32);
            }
        }
        for n in 0..4 {
            for h in 0..2 {
                codes[120 + 2 * n + h] = trit(self.qh[h], n as u32);
            }
        }
        scales[0] = self.d;
    }
}

/// Dequantizes one row of any ternary format (`blocks` covering the row) into `out`.
pub fn dequantize_row<B: TernaryBlock>(blocks: &[B], out: &mut [f32]) -> Result<()> {
    check_len("output values", blocks.len() * B::WEIGHTS, out.len())?;
    let mut codes = vec![0u8; B::WEIGHTS];
    let mut scales = vec![0u16; B::WEIGHTS / QK_PQ2_0];
    for (b, chunk) in blocks.iter().zip(out.chunks_exact_mut(B::WEIGHTS)) {
        b.decode(&mut codes, &mut scales);
        for (i, (o, &u)) in chunk.iter_mut().zip(&codes).enumerate() {
            *o = (u as i32 - 1) as f32 * f16_to_f32(scales[i / QK_PQ2_0]);
        }
    }
    Ok(())
}

/// Repacks row group `g`'s source rows (4 rows of `k / WEIGHTS` blocks each, row-major in `src`)
/// into `k / 128` T2P blocks.
fn repack_group<B: TernaryBlock>(src: &[B], k: usize, dst: &mut [BlockT2p]) {
    let per_row = k / B::WEIGHTS;
    let nb = k / QK_PQ2_0;
    let mut codes = vec![[[0u8; QK_PQ2_0]; 4]; nb];
    let mut scales = vec![[0u16; 4]; nb];
    let mut blk_codes = vec![0u8; B::WEIGHTS];
    let mut blk_scales = vec![0u16; B::WEIGHTS / QK_PQ2_0];
    for r in 0..4 {
        for (i, block) in src[r * per_row..(r + 1) * per_row].iter().enumerate() {
            block.decode(&mut blk_codes, &mut blk_scales);
            for (h, half) in blk_codes.chunks_exact(QK_PQ2_0).enumerate() {
                let b = i * (B::WEIGHTS / QK_PQ2_0) + h;
                codes[b][r].copy_from_slice(half);
                scales[b][r] = blk_scales[h];
            }
        }
    }
    for (b, out) in dst.iter_mut().enumerate() {
        *out = BlockT2p::pack(&codes[b], scales[b]);
    }
}

/// Repacks a `rows x k` tensor of any ternary format (row-major blocks) into T2P row groups.
/// `rows` must be a multiple of 4 and `k` of 256 (which every format's block size divides).
pub fn repack_to_t2p<B: TernaryBlock>(
    src: &[B],
    rows: usize,
    k: usize,
    dst: &mut [BlockT2p],
) -> Result<()> {
    let n = super::t2p_block_count(rows, k)?;
    if !k.is_multiple_of(B::WEIGHTS) {
        return Err(Error::Shape(format!(
            "k = {k} is not a multiple of the {} block ({})",
            B::NAME,
            B::WEIGHTS
        )));
    }
    let per_group = 4 * (k / B::WEIGHTS);
    check_len("source blocks", rows / 4 * per_group, src.len())?;
    check_len("T2P destination blocks", n, dst.len())?;
    let nb = k / QK_PQ2_0;
    for (g, out) in dst[..n].chunks_exact_mut(nb).enumerate() {
        repack_group(&src[g * per_group..(g + 1) * per_group], k, out);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::trits::pack_trits;
    use crate::format::{dequantize_row_pq2_0, f32_to_f16};

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u8 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 40) as u8
        }
    }

    fn t2p_dequant(t: &[BlockT2p], rows: usize, k: usize) -> Vec<f32> {
        let mut pq = vec![BlockPq2_0::default(); rows * k / 128];
        crate::format::unpack_t2p_to_pq2_0(t, rows, k, &mut pq).unwrap();
        let mut out = vec![0.0; rows * k];
        dequantize_row_pq2_0(&pq, &mut out);
        out
    }

    fn check_round_trip<B: TernaryBlock>(src: &[B], rows: usize, k: usize) {
        let mut want = vec![0.0; rows * k];
        dequantize_row(src, &mut want).unwrap();
        let mut t = vec![BlockT2p::default(); rows * k / 512];
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

    fn scale(rng: &mut Lcg) -> u16 {
        match rng.next() % 4 {
            0 => 0,
            1 => 0x8000, // -0.0
            _ => f32_to_f16((rng.next() as f32 - 128.0) / 64.0),
        }
    }

    #[test]
    fn tq2_0_round_trips_with_every_code() {
        let mut rng = Lcg(1);
        let src: Vec<BlockTq2_0> = (0..8 * 512 / 256)
            .map(|_| BlockTq2_0 {
                qs: std::array::from_fn(|_| rng.next()),
                d: scale(&mut rng),
            })
            .collect();
        check_round_trip(&src, 8, 512);
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
        let mut rng = Lcg(2);
        let src: Vec<BlockTq1_0> = (0..4 * 768 / 256)
            .map(|_| BlockTq1_0 {
                qs: std::array::from_fn(|_| rng.next()),
                qh: std::array::from_fn(|_| rng.next()),
                d: scale(&mut rng),
            })
            .collect();
        check_round_trip(&src, 4, 768);
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
        let mut rng = Lcg(3);
        let src: Vec<BlockPtq1_0> = (0..4 * 256 / 128)
            .map(|_| BlockPtq1_0 {
                qs: std::array::from_fn(|_| rng.next()),
                qh: std::array::from_fn(|_| rng.next()),
                d: scale(&mut rng),
            })
            .collect();
        check_round_trip(&src, 4, 256);
    }

    #[test]
    fn pq2_0_through_the_generic_path_equals_the_direct_repack() {
        let mut rng = Lcg(4);
        let src: Vec<BlockPq2_0> = (0..8 * 256 / 128)
            .map(|_| BlockPq2_0 {
                d: scale(&mut rng),
                qs: std::array::from_fn(|_| rng.next()),
            })
            .collect();
        let mut a = vec![BlockT2p::default(); 4];
        let mut b = vec![BlockT2p::default(); 4];
        repack_to_t2p(&src, 8, 256, &mut a).unwrap();
        crate::format::repack_pq2_0_to_t2p(&src, 8, 256, &mut b).unwrap();
        assert_eq!(a, b);
        check_round_trip(&src, 8, 256);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let src = vec![BlockTq2_0::zeroed(); 4];
        let mut t = vec![BlockT2p::default(); 8];
        assert!(
            repack_to_t2p(&src, 4, 512, &mut t).is_err(),
            "too few source blocks"
        );
        assert!(repack_to_t2p(&src, 3, 256, &mut t).is_err(), "rows");
    }
}
