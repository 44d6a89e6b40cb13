//! `sdot` and `smmla` as inline assembly: their intrinsics (`vdotq_s32`, `vmmlaq_s32`) are still
//! unstable in Rust 1.95. Each wrapper is a safe `#[target_feature]` fn, so it can only be called
//! (without `unsafe`) from code compiled for the same features, and inlines into it.

use core::arch::aarch64::{int8x16_t, int32x4_t};
use core::arch::asm;

/// `acc[i] += sum_{j<4} a[4i + j] * b[4i + j]` (SDOT, int8 x int8 into int32, exact).
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(in crate::kernels) fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: the instruction only reads and writes the three vector registers, and the
    // enclosing fn is compiled (and only callable) with dotprod enabled.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `acc` (a 2x2 int32 tile, row-major) += `a` (2x8 int8, row `i` = bytes `8i..8i+8`) times the
/// transpose of `b` (2x8 int8, row `j` = bytes `8j..8j+8`): `acc[2i + j] += a_i . b_j` (SMMLA).
#[inline]
#[target_feature(enable = "neon,i8mm")]
pub(super) fn smmla(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: the instruction only reads and writes the three vector registers, and the
    // enclosing fn is compiled (and only callable) with i8mm enabled.
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}
