//! `sdot` and `smmla` as inline assembly: their intrinsics (`vdotq_s32`, `vmmlaq_s32`) are still
//! unstable in Rust 1.95. Each wrapper is a safe `#[target_feature]` fn, so it can only be called
//! (without `unsafe`) from code compiled for the same features, and inlines into it.

use core::arch::aarch64::{int8x16_t, int32x4_t};
use core::arch::asm;

/// A safe wrapper `fn $name(acc, a, b) -> acc` around one accumulating instruction on three
/// vector registers, compiled for (and only callable with) the feature `$feature`. A macro
/// because `asm!` takes its template and `#[target_feature]` its feature as literals, which a
/// generic function cannot be handed.
macro_rules! accumulating_op {
    ($(#[$doc:meta])* $vis:vis fn $name:ident, $feature:literal, $insn:literal) => {
        $(#[$doc])*
        #[inline]
        #[target_feature(enable = "neon", enable = $feature)]
        $vis fn $name(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
            let mut acc = acc;
            // SAFETY: the instruction only reads and writes the three vector registers, and
            // the enclosing fn is compiled (and only callable) with its feature enabled.
            unsafe {
                asm!(
                    $insn,
                    acc = inout(vreg) acc,
                    a = in(vreg) a,
                    b = in(vreg) b,
                    options(pure, nomem, nostack, preserves_flags)
                );
            }
            acc
        }
    };
}

accumulating_op!(
    /// `acc[i] += sum_{j<4} a[4i + j] * b[4i + j]` (SDOT, int8 x int8 into int32, exact).
    pub(in crate::kernels) fn sdot,
    "dotprod",
    "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b"
);

accumulating_op!(
    /// `acc` (a 2x2 int32 tile, row-major) += `a` (2x8 int8, row `i` = bytes `8i..8i+8`) times
    /// the transpose of `b` (2x8 int8, row `j` = bytes `8j..8j+8`): `acc[2i + j] += a_i . b_j`
    /// (SMMLA).
    pub(super) fn smmla,
    "i8mm",
    "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b"
);
