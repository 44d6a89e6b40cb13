//! The AVX-512 (F/BW/VL + VNNI) path's kernels for ggml block types: the AVX2 path's driver,
//! tiles and folds ([`super::quant`]), compiled for AVX-512, with a 512-bit dot step for Q6_K,
//! `llama-quantize`'s LM-head type, the `vpdpbusd` steps of [`super::quant_vnni`] for the
//! 32-weight types with unsigned codes, and the AVX2 path's kernels for the other types.
//!
//! Q6_K in 512 bits: each 64-byte `ql` load holds the low nibbles of 64 consecutive weights and
//! the high nibbles of the next 64, and a broadcast 32-byte `qh` shifted per 256-bit half
//! (`vpsllvq` / `vpsrlvq`) puts their two high bits in place; `maddubs` (codes <= 63, pairs
//! <= 2 * 63 * 128, no saturation) then `vpdpwssd` with each 16 weights' int16 scale adds
//! into int32 lanes. The `-32` offset comes back once per block from the activation sums, as
//! in the AVX2 step, so the integer sums are the reference's exactly.

use std::arch::x86_64::*;

use super::quant::{self, Avx2Block, DotStep};
use super::quant_vnni;
use crate::format::{BlockQ6K, BlockQ8K};
use crate::kernels::quant::{QuantEntry, QuantKernels};
use crate::kernels::{Gemm, const_table};

/// The AVX-512 VNNI path's table: its own step for Q6_K, the `vpdpbusd` steps for the
/// 32-weight types with unsigned codes, the AVX2 path's entries (named `avx2`) for the others.
pub(in crate::kernels) static KERNELS: QuantKernels = QuantKernels {
    q6_k: QuantEntry::new(q6_k, "avx512-vnni"),
    ..quant_vnni::AVX512_VNNI
};

fn q6_k(g: Gemm<'_, BlockQ6K, BlockQ8K>) {
    // SAFETY: this entry is only in the AVX-512 VNNI path's table, which is handed out only on
    // CPUs with AVX2, F16C, AVX-512 F/BW/VL and VNNI (`Isa::required_features`).
    unsafe { rows::<BlockQ6K>(g) }
}

/// # Safety
///
/// The CPU must have AVX2, F16C, AVX-512 F/BW/VL and VNNI.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn rows<B: ZmmBlock>(g: Gemm<'_, B, B::Act>) {
    // SAFETY: the CPU has every feature `Zmm` needs (this fn's contract).
    unsafe { quant::drive::<B, Zmm>(g) }
}

/// A block type's 512-bit dot step.
trait ZmmBlock: Avx2Block {
    /// [`Avx2Block::dot`]'s sums: `isum` spread over eight int32 lanes, and `msum`.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX2, F16C, AVX-512 F/BW/VL and VNNI.
    unsafe fn dot_zmm(&self, a: &Self::Act) -> (__m256i, i32);
}

/// The 512-bit dot steps, [`ZmmBlock::dot_zmm`].
struct Zmm;

impl<B: ZmmBlock> DotStep<B> for Zmm {
    #[inline(always)]
    unsafe fn dot(b: &B, a: &B::Act) -> (__m256i, i32) {
        // SAFETY: the caller guarantees the AVX-512 features.
        unsafe { b.dot_zmm(a) }
    }
}

/// `vpermw` indices: word `j` of chunk `v` (weights `64v .. 64v + 64`) takes the scale of its
/// 16 weights, `4v + j / 8`, from the sixteen int16 scales.
const Q6K_SCALE_WORDS: [[i16; 32]; 4] = const_table!([[i16; 32]; 4], |v, j| (4 * v + j / 8) as i16);

impl ZmmBlock for BlockQ6K {
    /// # Safety
    ///
    /// As [`ZmmBlock::dot_zmm`].
    #[inline]
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn dot_zmm(&self, a: &BlockQ8K) -> (__m256i, i32) {
        let low = _mm512_set1_epi8(0x0F);
        let two = _mm512_set1_epi8(0x30);
        let (sc16, offset) = quant::q6k_scales_and_offset(self, a);
        let mut acc = _mm512_zextsi256_si512(offset);
        let sc = _mm512_zextsi256_si512(sc16);
        // Bytes 0..32 of a broadcast `qh` serve weights `l`, bytes 32..64 weights `32 + l`.
        let to_low = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2);
        let to_high = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
        for n in 0..2 {
            // SAFETY: bytes `64n .. 64n + 64` of `ql` (128) and `32n .. 32n + 32` of `qh` (64).
            let (ql, qh) = unsafe {
                (
                    _mm512_loadu_si512(self.ql.as_ptr().add(64 * n).cast()),
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(self.qh.as_ptr().add(32 * n).cast())),
                )
            };
            let codes = [
                _mm512_or_si512(
                    _mm512_and_si512(ql, low),
                    _mm512_and_si512(_mm512_sllv_epi64(qh, to_low), two),
                ),
                _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), low),
                    _mm512_and_si512(_mm512_srlv_epi64(qh, to_high), two),
                ),
            ];
            for (h, q) in codes.into_iter().enumerate() {
                let v = 2 * n + h;
                // SAFETY: activation bytes `64v .. 64v + 64` of 256; the index table is 64
                // bytes.
                let (y, pick) = unsafe {
                    (
                        _mm512_loadu_si512(a.qs.as_ptr().add(64 * v).cast()),
                        _mm512_loadu_si512(Q6K_SCALE_WORDS[v].as_ptr().cast()),
                    )
                };
                let p = _mm512_maddubs_epi16(q, y);
                acc = _mm512_dpwssd_epi32(acc, p, _mm512_permutexvar_epi16(pick, sc));
            }
        }
        let sum = _mm256_add_epi32(
            _mm512_castsi512_si256(acc),
            _mm512_extracti64x4_epi64::<1>(acc),
        );
        (sum, 0)
    }
}
