//! `vpdpbusd` dot steps for ggml's 32-weight block types whose codes are unsigned: Q4_0 and
//! Q5_0 (codes offset by 8 and 16; the embeddings and LM heads of community TQ1_0 / TQ2_0
//! files), Q4_1 and Q5_1, written once for the two encodings ([`Vpdpbusd`]): the AVX-VNNI
//! path's table here, the AVX-512 one's through [`super::quant_zmm`].
//!
//! `vpdpbusd` multiplies the unsigned codes by the int8 activations and adds each four products
//! into an int32 lane, one instruction where AVX2 takes a sign trick, `maddubs` and `madd`
//! ([`super::quant`]); an offset comes back as a second `vpdpbusd` of the offset against the
//! activations. The lanes differ from the AVX2 step's; their total, all the driver keeps, is
//! the same exact integer (an int32 lane holds at most 4 x 31 x 128), so the results are the
//! reference's bit for bit. The driver, tiles and folds are the AVX2 path's.

use std::arch::x86_64::*;
use std::marker::PhantomData;

use super::quant::{self, Avx2Block, DotStep};
use super::vnni::{Avx512Vnni, AvxVnni, Vpdpbusd};
use crate::format::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};
use crate::kernels::Gemm;
use crate::kernels::quant::{QuantEntry, QuantKernels};

/// The AVX-VNNI path's table: the `vpdpbusd` steps for the types with unsigned codes, the AVX2
/// path's entries for the others.
pub(in crate::kernels) static KERNELS: QuantKernels = QuantKernels {
    q4_0: QuantEntry::new(rows_avx_vnni::<BlockQ4_0>, "avx-vnni"),
    q4_1: QuantEntry::new(rows_avx_vnni::<BlockQ4_1>, "avx-vnni"),
    q5_0: QuantEntry::new(rows_avx_vnni::<BlockQ5_0>, "avx-vnni"),
    q5_1: QuantEntry::new(rows_avx_vnni::<BlockQ5_1>, "avx-vnni"),
    ..quant::KERNELS
};

/// The same steps in the AVX-512 encoding, the AVX2 path's entries for the other types: the
/// base of the AVX-512 path's table.
pub(super) const AVX512_VNNI: QuantKernels = QuantKernels {
    q4_0: QuantEntry::new(rows_avx512_vnni::<BlockQ4_0>, "avx512-vnni"),
    q4_1: QuantEntry::new(rows_avx512_vnni::<BlockQ4_1>, "avx512-vnni"),
    q5_0: QuantEntry::new(rows_avx512_vnni::<BlockQ5_0>, "avx512-vnni"),
    q5_1: QuantEntry::new(rows_avx512_vnni::<BlockQ5_1>, "avx512-vnni"),
    ..quant::KERNELS
};

fn rows_avx_vnni<B: UnsignedCodes>(g: Gemm<'_, B, B::Act>) {
    /// # Safety
    /// The CPU must have AVX2, F16C and AVX-VNNI.
    #[target_feature(enable = "avx2,f16c,avxvnni")]
    unsafe fn rows<B: UnsignedCodes>(g: Gemm<'_, B, B::Act>) {
        // SAFETY: the CPU has AVX2, F16C and AVX-VNNI (this fn's contract).
        unsafe { quant::drive::<B, Vnni<AvxVnni>>(g) }
    }
    // SAFETY: this entry is only in the AVX-VNNI path's table, handed out only on CPUs with
    // AVX2, F16C and AVX-VNNI (`Isa::required_features`).
    unsafe { rows::<B>(g) }
}

fn rows_avx512_vnni<B: UnsignedCodes>(g: Gemm<'_, B, B::Act>) {
    /// # Safety
    /// The CPU must have AVX2, F16C and AVX-512 F/BW/VL/VNNI.
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn rows<B: UnsignedCodes>(g: Gemm<'_, B, B::Act>) {
        // SAFETY: the CPU has AVX2, F16C and AVX-512 VL/VNNI (this fn's contract).
        unsafe { quant::drive::<B, Vnni<Avx512Vnni>>(g) }
    }
    // SAFETY: this entry is only in the tables of the AVX-512 VNNI and AMX paths, handed out
    // only on CPUs with AVX2, F16C and AVX-512 F/BW/VL/VNNI (`Isa::required_features`).
    unsafe { rows::<B>(g) }
}

/// A 32-weight block type whose codes are unsigned bytes: weight = code - [`OFFSET`](Self::OFFSET).
trait UnsignedCodes: Avx2Block {
    /// What the codes are offset by.
    const OFFSET: i8;
    /// The 32 codes, in the order of [`acts`](Self::acts).
    ///
    /// # Safety
    /// The CPU must have AVX2.
    unsafe fn codes(&self) -> __m256i;
    /// The activation block's 32 values.
    fn acts(a: &Self::Act) -> &[i8; 32];
}

impl UnsignedCodes for BlockQ4_0 {
    const OFFSET: i8 = 8;
    #[inline(always)]
    unsafe fn codes(&self) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { quant::nibbles(&self.qs) }
    }
    fn acts(a: &BlockQ8_0) -> &[i8; 32] {
        &a.qs
    }
}

impl UnsignedCodes for BlockQ5_0 {
    const OFFSET: i8 = 16;
    #[inline(always)]
    unsafe fn codes(&self) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { _mm256_or_si256(quant::nibbles(&self.qs), quant::fifth_bits(self.qh)) }
    }
    fn acts(a: &BlockQ8_0) -> &[i8; 32] {
        &a.qs
    }
}

impl UnsignedCodes for BlockQ4_1 {
    const OFFSET: i8 = 0;
    #[inline(always)]
    unsafe fn codes(&self) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { quant::nibbles(&self.qs) }
    }
    fn acts(a: &BlockQ8_1) -> &[i8; 32] {
        &a.qs
    }
}

impl UnsignedCodes for BlockQ5_1 {
    const OFFSET: i8 = 0;
    #[inline(always)]
    unsafe fn codes(&self) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { _mm256_or_si256(quant::nibbles(&self.qs), quant::fifth_bits(self.qh)) }
    }
    fn acts(a: &BlockQ8_1) -> &[i8; 32] {
        &a.qs
    }
}

/// The `vpdpbusd` dot step of the encoding `V`.
struct Vnni<V>(PhantomData<V>);

impl<B: UnsignedCodes, V: Vpdpbusd> DotStep<B> for Vnni<V> {
    #[inline(always)]
    unsafe fn dot(b: &B, a: &B::Act) -> (__m256i, i32) {
        // SAFETY: the caller guarantees AVX2 and `V`'s features.
        unsafe {
            let (u, y) = (b.codes(), quant::load32(B::acts(a)));
            let zero = _mm256_setzero_si256();
            let sum = V::dp(zero, u, y);
            if B::OFFSET == 0 {
                (sum, 0)
            } else {
                let offset = V::dp(zero, _mm256_set1_epi8(B::OFFSET), y);
                (_mm256_sub_epi32(sum, offset), 0)
            }
        }
    }
}
