//! The x86 lanes of the F16 rows: F16C `vcvtph2ps` widens, `vfmadd` accumulates; two ymm
//! registers (lanes 0..8, 8..16) on the AVX2 path, one zmm on the AVX-512 one. Both are the
//! summation order of [`crate::kernels::f16`] and bit-identical to its scalar reference.

use std::arch::x86_64::*;

use super::prefetch;
use crate::kernels::Gemm;
use crate::kernels::f16::{F16Kernel, LANES, Lanes16, rows_with};

/// The AVX2 and AVX-VNNI paths' F16 rows.
pub(in crate::kernels) const AVX2: F16Kernel = F16Kernel::new(rows_avx2, "avx2");
/// The AVX-512 VNNI path's F16 rows.
pub(in crate::kernels) const AVX512: F16Kernel = F16Kernel::new(rows_avx512, "avx512");

/// Lanes 0..8 and 8..16 in two ymm registers.
#[derive(Clone, Copy)]
struct Avx2(__m256, __m256);

impl Lanes16 for Avx2 {
    type W = (__m256, __m256);

    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller runs on a CPU with AVX.
        unsafe { Avx2(_mm256_setzero_ps(), _mm256_setzero_ps()) }
    }

    #[inline(always)]
    unsafe fn widen(w: *const u16) -> Self::W {
        // SAFETY: the caller guarantees F16C and 16 readable values at `w`.
        unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(w.cast())),
                _mm256_cvtph_ps(_mm_loadu_si128(w.add(8).cast())),
            )
        }
    }

    #[inline(always)]
    unsafe fn fma(self, w: Self::W, x: *const f32) -> Self {
        // SAFETY: the caller guarantees FMA and 16 readable values at `x`.
        unsafe {
            Avx2(
                _mm256_fmadd_ps(w.0, _mm256_loadu_ps(x), self.0),
                _mm256_fmadd_ps(w.1, _mm256_loadu_ps(x.add(8)), self.1),
            )
        }
    }

    #[inline(always)]
    unsafe fn lanes(self) -> [f32; LANES] {
        let mut a = [0.0; LANES];
        // SAFETY: `a` holds 16 values; the caller guarantees AVX.
        unsafe {
            _mm256_storeu_ps(a.as_mut_ptr(), self.0);
            _mm256_storeu_ps(a.as_mut_ptr().add(8), self.1);
        }
        a
    }

    #[inline(always)]
    fn prefetch(w: *const u16) {
        prefetch::line_to_l2(w);
    }
}

/// The 16 lanes in one zmm register.
#[derive(Clone, Copy)]
struct Zmm(__m512);

impl Lanes16 for Zmm {
    type W = __m512;

    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller runs on a CPU with AVX-512F.
        unsafe { Zmm(_mm512_setzero_ps()) }
    }

    #[inline(always)]
    unsafe fn widen(w: *const u16) -> Self::W {
        // SAFETY: the caller guarantees AVX-512F and 16 readable values at `w`.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(w.cast())) }
    }

    #[inline(always)]
    unsafe fn fma(self, w: Self::W, x: *const f32) -> Self {
        // SAFETY: the caller guarantees AVX-512F and 16 readable values at `x`.
        unsafe { Zmm(_mm512_fmadd_ps(w, _mm512_loadu_ps(x), self.0)) }
    }

    #[inline(always)]
    unsafe fn lanes(self) -> [f32; LANES] {
        let mut a = [0.0; LANES];
        // SAFETY: `a` holds 16 values; the caller guarantees AVX-512F.
        unsafe { _mm512_storeu_ps(a.as_mut_ptr(), self.0) };
        a
    }

    #[inline(always)]
    fn prefetch(w: *const u16) {
        prefetch::line_to_l2(w);
    }
}

/// # Safety
/// The CPU must have AVX2, F16C and FMA; the shapes must have been checked.
#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn rows_avx2_impl(g: Gemm<'_, u16, f32>) {
    // SAFETY: this function's features are the lanes' ones; the caller checked the shapes.
    unsafe { rows_with::<Avx2>(g) }
}

/// # Safety
/// The CPU must have AVX-512F, AVX2, F16C and FMA; the shapes must have been checked.
#[target_feature(enable = "avx512f,avx2,f16c,fma")]
unsafe fn rows_avx512_impl(g: Gemm<'_, u16, f32>) {
    // SAFETY: as for `rows_avx2_impl`.
    unsafe { rows_with::<Zmm>(g) }
}

fn rows_avx2(g: Gemm<'_, u16, f32>) {
    // SAFETY: this entry is only in the x86 paths' tables, which are handed out only on CPUs
    // with AVX2, F16C and FMA (`Isa::required_features`); `Kernels::f16_rows` checked the shapes.
    unsafe { rows_avx2_impl(g) }
}

fn rows_avx512(g: Gemm<'_, u16, f32>) {
    // SAFETY: this entry is only in the AVX-512 VNNI path's table, which is handed out only on
    // CPUs with AVX-512F, AVX2, F16C and FMA; `Kernels::f16_rows` checked the shapes.
    unsafe { rows_avx512_impl(g) }
}
