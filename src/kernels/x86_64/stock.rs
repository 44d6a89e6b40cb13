//! The stock algorithm on `pq2_0` as it sits in the file, the baseline the T2P layout is
//! measured against: one AVX2 implementation, which every x86 path uses.

use std::arch::x86_64::*;

use super::half;
use crate::format::{BlockPq2_0, BlockQ8K};

/// [`vec_dot_stock_avx2`] behind the safe [`crate::kernels::Kernels`] entry.
pub(super) fn vec_dot_stock(x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32 {
    // SAFETY: every x86 path's KERNELS (the only callers) is handed out only after AVX2 and
    // F16C were detected.
    unsafe { vec_dot_stock_avx2(x, y) }
}

/// The stock algorithm on `pq2_0` as it sits in the file, ported to AVX2 as ggml would: unpack
/// the 2-bit codes with shift + mask, restore weight order with byte/word unpacks, subtract 1,
/// then a signed dot product. The signed dot uses `maddubs(|y|, sign(w, y))` rather than ggml's
/// usual `maddubs(|w|, sign(y, w))`: the latter negates -128 (legal in raw `q8_K`) to -128, while
/// `|y| = 128` is a valid unsigned byte, so this form is exact (`2*128*2 = 512` per int16 pair,
/// 4 summed `<= 2048`).
///
/// # Safety
///
/// The CPU must have AVX2 and F16C; `y` must hold a `q8_K` block for every two blocks of `x`.
#[target_feature(enable = "avx2,f16c")]
unsafe fn vec_dot_stock_avx2(x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let one8 = _mm256_set1_epi8(1);
    let ones = _mm256_set1_epi16(1);
    let mut acc = 0.0f32;
    for (b, blk) in x.iter().enumerate() {
        let yb = &y[b / 2];
        let ys = half(yb, b % 2);
        let qs: &[u8; 32] = &blk.qs;
        // SAFETY: reads the 32 bytes of `qs`, unaligned.
        let q = unsafe { _mm256_loadu_si256(qs.as_ptr().cast()) };
        // Byte i of c_s holds the code of weight 4i + s (per 128-bit lane).
        let c0 = _mm256_and_si256(q, m3);
        let c1 = _mm256_and_si256(_mm256_srli_epi16::<2>(q), m3);
        let c2 = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m3);
        let c3 = _mm256_and_si256(_mm256_srli_epi16::<6>(q), m3);
        let lo01 = _mm256_unpacklo_epi8(c0, c1);
        let hi01 = _mm256_unpackhi_epi8(c0, c1);
        let lo23 = _mm256_unpacklo_epi8(c2, c3);
        let hi23 = _mm256_unpackhi_epi8(c2, c3);
        // Per lane (lane 0: weights 0..63, lane 1: 64..127), 16 consecutive weights each.
        let q0 = _mm256_unpacklo_epi16(lo01, lo23); // 0..15   | 64..79
        let q1 = _mm256_unpackhi_epi16(lo01, lo23); // 16..31  | 80..95
        let q2 = _mm256_unpacklo_epi16(hi01, hi23); // 32..47  | 96..111
        let q3 = _mm256_unpackhi_epi16(hi01, hi23); // 48..63  | 112..127
        let w = [
            _mm256_permute2x128_si256::<0x20>(q0, q1),
            _mm256_permute2x128_si256::<0x20>(q2, q3),
            _mm256_permute2x128_si256::<0x31>(q0, q1),
            _mm256_permute2x128_si256::<0x31>(q2, q3),
        ];
        let mut s16 = _mm256_setzero_si256();
        for (i, &wi) in w.iter().enumerate() {
            let w8 = _mm256_sub_epi8(wi, one8);
            let yv: &[i8; 32] = ys[32 * i..32 * i + 32].try_into().expect("32 values");
            // SAFETY: reads the 32 bytes of `yv`, unaligned.
            let yv = unsafe { _mm256_loadu_si256(yv.as_ptr().cast()) };
            let p = _mm256_maddubs_epi16(_mm256_abs_epi8(yv), _mm256_sign_epi8(w8, yv));
            s16 = _mm256_add_epi16(s16, p);
        }
        let s32 = _mm256_madd_epi16(s16, ones);
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(s32),
            _mm256_extracti128_si256::<1>(s32),
        );
        let s = _mm_hadd_epi32(s, s);
        let isum = _mm_cvtsi128_si32(_mm_hadd_epi32(s, s));
        acc = crate::kernels::scalar::accumulate(acc, crate::format::f16_to_f32(blk.d), yb.d, isum);
    }
    acc
}
