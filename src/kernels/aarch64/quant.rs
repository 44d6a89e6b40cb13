//! NEON + dotprod (SDOT) kernels for the ggml block types LM heads come in: Q4_0 and Q8_0
//! (community repacks and fallbacks) and Q6_K (`llama-quantize`'s default mix). The other types
//! run the scalar reference on aarch64.
//!
//! SDOT multiplies signed bytes by signed bytes into int32 lanes with no intermediate
//! saturation, so the weights go in as their signed values (`q - 8`, `q - 32`, Q8_0 as stored)
//! and each block's integer sums are exactly the reference's ([`QuantBlock::int_dot`]); the
//! float step is the reference's own [`QuantBlock::fold`], block after block. So the results
//! equal the scalar path bit for bit.

use core::arch::aarch64::*;

use super::asm::sdot;
use super::{load_i8x16x2, load_u8x16};
use crate::format::{BlockQ4_0, BlockQ6K, BlockQ8_0, BlockQ8K, QuantBlock};
use crate::kernels::Gemm;
use crate::kernels::quant::{QuantEntry, QuantKernels, Step, scalar};

/// The dotprod and i8mm paths' table: SDOT for Q4_0, Q8_0 and Q6_K, the scalar reference's
/// entries (named `scalar`) for the other types.
pub(in crate::kernels) static KERNELS: QuantKernels = QuantKernels {
    q4_0: Sdot::ENTRY,
    q8_0: Sdot::ENTRY,
    q6_k: Sdot::ENTRY,
    ..scalar::KERNELS
};

/// The SDOT steps.
struct Sdot;

impl<B: SdotBlock> Step<B> for Sdot {
    const ENTRY: QuantEntry<B> = QuantEntry::new(rows_dotprod::<B>, "neon-dotprod");
}

fn rows_dotprod<B: SdotBlock>(g: Gemm<'_, B, B::Act>) {
    // SAFETY: this entry is only in the dotprod and i8mm paths' tables, which are handed out
    // only on CPUs with NEON and dotprod (`Isa::required_features`).
    unsafe { rows::<B>(g) }
}

/// A block type's SDOT integer sums.
trait SdotBlock: QuantBlock {
    /// [`QuantBlock::int_dot`], with SDOT.
    ///
    /// # Safety
    ///
    /// The CPU must have NEON and dotprod.
    unsafe fn sdot_sums(&self, a: &Self::Act) -> [i32; 2];
}

/// # Safety
///
/// The CPU must have NEON and dotprod.
#[target_feature(enable = "neon,dotprod")]
unsafe fn rows<B: SdotBlock>(g: Gemm<'_, B, B::Act>) {
    let (x, nb, y, ncols, out, ld) = g.into_parts();
    for (r, row) in x.chunks_exact(nb).enumerate() {
        for (c, col) in y.chunks_exact(nb).take(ncols).enumerate() {
            out[c * ld + r] = row.iter().zip(col).fold(0.0, |acc, (b, a)| {
                // SAFETY: the CPU has dotprod (this fn's contract).
                b.fold(a, unsafe { b.sdot_sums(a) }, acc)
            });
        }
    }
}

/// The sums of 32 signed weights, `w0` then `w1`, against the values of a Q8_0 block: `isum`,
/// and no `msum` (the types that take Q8_0 activations have no minimums).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot_q8_0(w0: int8x16_t, w1: int8x16_t, a: &BlockQ8_0) -> [i32; 2] {
    let (y0, y1) = load_i8x16x2(&a.qs);
    let acc = sdot(sdot(vdupq_n_s32(0), w0, y0), w1, y1);
    [vaddvq_s32(acc), 0]
}

impl SdotBlock for BlockQ8_0 {
    /// # Safety
    ///
    /// As [`SdotBlock::sdot_sums`].
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn sdot_sums(&self, a: &BlockQ8_0) -> [i32; 2] {
        let (w0, w1) = load_i8x16x2(&self.qs);
        sdot_q8_0(w0, w1, a)
    }
}

impl SdotBlock for BlockQ4_0 {
    /// Weight `j` is the low nibble of byte `j`, weight `16 + j` its high nibble, minus 8.
    ///
    /// # Safety
    ///
    /// As [`SdotBlock::sdot_sums`].
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn sdot_sums(&self, a: &BlockQ8_0) -> [i32; 2] {
        let q = load_u8x16(&self.qs);
        let eight = vdupq_n_s8(8);
        let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), eight);
        let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(q)), eight);
        sdot_q8_0(lo, hi, a)
    }
}

impl SdotBlock for BlockQ6K {
    /// Per half `n` of 128 weights and `l < 32`: weight `l` is the low nibble of `ql[l]` with
    /// bits 0-1 of `qh[l]` above it, weight `32 + l` the low nibble of `ql[32 + l]` with bits
    /// 2-3, weights `64 + l` / `96 + l` the high nibbles with bits 4-5 / 6-7; minus 32. Each
    /// 16 weights' SDOT lanes are multiplied by their int8 scale (`|lane| <= 4 * 32 * 128`).
    ///
    /// # Safety
    ///
    /// As [`SdotBlock::sdot_sums`].
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    unsafe fn sdot_sums(&self, a: &BlockQ8K) -> [i32; 2] {
        let low = vdupq_n_u8(0x0F);
        let two = vdupq_n_u8(0x30);
        let offset = vdupq_n_s8(32);
        let mut acc = vdupq_n_s32(0);
        for n in 0..2 {
            for half in 0..2 {
                // Bytes `l = 16 half .. 16 half + 16` of this half's `ql` runs and `qh`.
                let at = 16 * half;
                let ql0 = load_u8x16(self.ql[64 * n + at..][..16].try_into().expect("16"));
                let ql1 = load_u8x16(self.ql[64 * n + 32 + at..][..16].try_into().expect("16"));
                let qh = load_u8x16(self.qh[32 * n + at..][..16].try_into().expect("16"));
                let codes = [
                    vorrq_u8(vandq_u8(ql0, low), vandq_u8(vshlq_n_u8::<4>(qh), two)),
                    vorrq_u8(vandq_u8(ql1, low), vandq_u8(vshlq_n_u8::<2>(qh), two)),
                    vorrq_u8(vshrq_n_u8::<4>(ql0), vandq_u8(qh, two)),
                    vorrq_u8(vshrq_n_u8::<4>(ql1), vandq_u8(vshrq_n_u8::<2>(qh), two)),
                ];
                for (quarter, q) in codes.into_iter().enumerate() {
                    // Weights `128n + 32 quarter + at ..`: sub-block `8n + 2 quarter + half`.
                    let at_w = 128 * n + 32 * quarter + at;
                    let y: &[i8; 16] = a.qs[at_w..][..16].try_into().expect("16");
                    // SAFETY: `y` is 16 readable bytes.
                    let y = unsafe { vld1q_s8(y.as_ptr()) };
                    let w = vsubq_s8(vreinterpretq_s8_u8(q), offset);
                    let dot = sdot(vdupq_n_s32(0), w, y);
                    let sc = self.scales[8 * n + 2 * quarter + half] as i32;
                    acc = vmlaq_n_s32(acc, dot, sc);
                }
            }
        }
        [vaddvq_s32(acc), 0]
    }
}
