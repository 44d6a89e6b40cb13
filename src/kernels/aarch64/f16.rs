//! The aarch64 lanes of the F16 rows: four q registers (lanes 0..4, ..., 12..16), `fcvtl` /
//! `fcvtl2` widen (as inline assembly: the `float16x4_t` intrinsics are unstable in Rust 1.95;
//! the conversions are baseline ARMv8), `fmla` (`vfmaq_f32`) accumulates. The summation order of
//! [`crate::kernels::f16`], bit-identical to its scalar reference.

use core::arch::aarch64::*;
use core::arch::asm;

use crate::kernels::Gemm;
use crate::kernels::f16::{F16Kernel, LANES, Lanes16, rows_with};

/// Every aarch64 path's F16 rows.
pub(in crate::kernels) const NEON: F16Kernel = F16Kernel::new(rows_neon, "neon");

/// Lanes `4i..4i + 4` in register `i`.
#[derive(Clone, Copy)]
struct Neon([float32x4_t; 4]);

/// The 8 f16 values of `h` widened to f32 (exact): lanes 0..4 and 4..8.
#[inline]
#[target_feature(enable = "neon")]
fn widen8(h: uint16x8_t) -> (float32x4_t, float32x4_t) {
    let (lo, hi): (float32x4_t, float32x4_t);
    // SAFETY: the two instructions only read `h` and write the two output registers; the
    // enclosing fn is compiled for NEON, of which the fp16 conversions are part.
    unsafe {
        asm!(
            "fcvtl {lo:v}.4s, {h:v}.4h",
            "fcvtl2 {hi:v}.4s, {h:v}.8h",
            h = in(vreg) h,
            lo = out(vreg) lo,
            hi = out(vreg) hi,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    (lo, hi)
}

impl Lanes16 for Neon {
    type W = [float32x4_t; 4];

    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller runs on a CPU with NEON.
        unsafe { Neon([vdupq_n_f32(0.0); 4]) }
    }

    #[inline(always)]
    unsafe fn widen(w: *const u16) -> Self::W {
        // SAFETY: the caller guarantees NEON and 16 readable values at `w`.
        unsafe {
            let (a, b) = widen8(vld1q_u16(w));
            let (c, d) = widen8(vld1q_u16(w.add(8)));
            [a, b, c, d]
        }
    }

    #[inline(always)]
    unsafe fn fma(self, w: Self::W, x: *const f32) -> Self {
        // SAFETY: the caller guarantees NEON and 16 readable values at `x`.
        unsafe {
            Neon(std::array::from_fn(|i| {
                vfmaq_f32(self.0[i], w[i], vld1q_f32(x.add(4 * i)))
            }))
        }
    }

    #[inline(always)]
    unsafe fn lanes(self) -> [f32; LANES] {
        let mut a = [0.0; LANES];
        for (i, v) in self.0.into_iter().enumerate() {
            // SAFETY: `a` holds 16 values; the caller guarantees NEON.
            unsafe { vst1q_f32(a.as_mut_ptr().add(4 * i), v) };
        }
        a
    }
}

/// # Safety
/// The CPU must have NEON; the shapes must have been checked.
#[target_feature(enable = "neon")]
unsafe fn rows_neon_impl(g: Gemm<'_, u16, f32>) {
    // SAFETY: this function's features are the lanes' ones; the caller checked the shapes.
    unsafe { rows_with::<Neon>(g) }
}

fn rows_neon(g: Gemm<'_, u16, f32>) {
    // SAFETY: this entry is only in the aarch64 paths' tables, which are handed out only on
    // CPUs with NEON (`Isa::required_features`); `Kernels::f16_rows` checked the shapes.
    unsafe { rows_neon_impl(g) }
}
