//! The two `vpdpbusd` paths, AVX-VNNI (VEX) and AVX-512 VNNI (EVEX on ymm), with one dot step.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed bytes and adds each group of four products
//! into an int32 lane, **without** the int16 saturation of AVX2's `maddubs`. So a masked slot
//! can stay in place even for slot 3 (`v & 0xC0` = 64u, at most 192, is a valid unsigned byte),
//! and one instruction replaces `maddubs` + `add` (+ `madd`). The register layouts, operands and
//! float steps are the shared ones ([`super::q8k`], [`super::q8_0`]), so the outputs are
//! bit-identical to the AVX2 path and to the scalar oracle. The two paths differ only in the
//! encoding of that one instruction ([`Vpdpbusd`]); the AVX-512 one also lets LLVM use EVEX forms
//! and the 32 vector registers elsewhere, and runs its own 512-bit `q8_0` kernels ([`super::zmm`]).
//!
//! Integer bounds: an int32 lane collects 4 products per instruction, at most 16 per block and
//! slot class, each `|u * 4^s * y| <= 192 * 128`, so every lane stays below 2^22.

use std::arch::x86_64::*;

use super::{DotStep, HotLoop, Path, bcast8, chunk8, load_word, zmm};
use crate::format::{BlockQ8_0Quad, BlockT2p, RowPairBlock};
use crate::kernels::{Gemm, Isa};

/// The AVX-VNNI path (a type only: its kernels are reached through [`Path::run`]).
pub(super) enum AvxVnni {}

/// The AVX-512 VNNI path (a type only, as [`AvxVnni`]).
pub(super) enum Avx512Vnni {}

impl Path for AvxVnni {
    const ISA: Isa = Isa::AvxVnni;

    #[target_feature(enable = "avx2,f16c,avxvnni")]
    unsafe fn run<L: HotLoop>(l: L) -> L::Out {
        // SAFETY: the loops need AVX2 and F16C, `dp` AVX-VNNI: this function has all three.
        unsafe { l.run::<Self>() }
    }
}

impl Path for Avx512Vnni {
    const ISA: Isa = Isa::Avx512Vnni;

    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn run<L: HotLoop>(l: L) -> L::Out {
        // SAFETY: the loops need AVX2 and F16C, `dp` AVX-512 VL and VNNI: all enabled here.
        unsafe { l.run::<Self>() }
    }

    fn gemv_q8_0<B: RowPairBlock>(x: &[B], nb: usize, y: &[BlockQ8_0Quad], out: &mut [f32]) {
        // SAFETY: only this path's table calls it, handed out after detecting its features.
        unsafe { zmm::gemv_q8_0(x, nb, y, out) }
    }

    fn gemm_q8_0<B: RowPairBlock>(g: Gemm<'_, B, BlockQ8_0Quad>) {
        // SAFETY: as for `gemv_q8_0`.
        unsafe { zmm::gemm_q8_0(g) }
    }

    fn gemm_unit(g: Gemm<'_, BlockT2p, BlockQ8_0Quad>) {
        // SAFETY: as for `gemv_q8_0`.
        unsafe { zmm::gemm_unit(g) }
    }
}

/// The one instruction the two paths encode differently (the AMX path's dot step is the
/// AVX-512 one).
pub(super) trait Vpdpbusd {
    /// `acc + dot4(u, y)` per int32 lane (`u` unsigned, `y` signed bytes).
    ///
    /// # Safety
    /// The CPU must have the path's features.
    unsafe fn dp(acc: __m256i, u: __m256i, y: __m256i) -> __m256i;
}

impl Vpdpbusd for AvxVnni {
    #[inline(always)]
    unsafe fn dp(acc: __m256i, u: __m256i, y: __m256i) -> __m256i {
        // SAFETY: the caller guarantees AVX-VNNI.
        unsafe { _mm256_dpbusd_avx_epi32(acc, u, y) }
    }
}

impl Vpdpbusd for Avx512Vnni {
    #[inline(always)]
    unsafe fn dp(acc: __m256i, u: __m256i, y: __m256i) -> __m256i {
        // SAFETY: the caller guarantees AVX-512 VL and VNNI.
        unsafe { _mm256_dpbusd_epi32(acc, u, y) }
    }
}

impl<V: Vpdpbusd> DotStep for V {
    /// [`block_dot`] returns `64 * dot(u, y)`.
    const SHIFT: i32 = 6;

    #[inline(always)]
    unsafe fn block_dot(blk: &BlockT2p, ys: &[i8; 128]) -> __m256i {
        // SAFETY: the caller guarantees the path's features (AVX2 and the path's `vpdpbusd`).
        unsafe { block_dot::<V>(blk, ys) }
    }

    #[inline(always)]
    unsafe fn slots_dot(u: &[[__m256i; 4]; 2], ops: &[__m256i; 4]) -> __m256i {
        // SAFETY: as for `block_dot`.
        unsafe { slots_dot::<V>(u, ops) }
    }
}

/// `64 * dot(u, y)` of one T2P block with its 128 activations ([`DotStep::block_dot`]). The
/// masks `0x03, 0x0C, 0x30, 0xC0` give `4^s * u` for slot `s` with one AND each; four
/// accumulators (one per slot class) collect the four words, and `64 a0 + 16 a1 + 4 a2 + a3` =
/// `64 * dot(u, y)` recombines them with shifts.
///
/// (Like the AVX2 dot steps, the body is an AVX2 function that LLVM inlines into the path's
/// entry point: inlined that late, its `hadd`s and shifts keep their one-instruction forms.)
///
/// # Safety
/// The CPU must have `V`'s features.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn block_dot<V: Vpdpbusd>(blk: &BlockT2p, ys: &[i8; 128]) -> __m256i {
    let masks = [0x03u8, 0x0C, 0x30, 0xC0].map(|m| _mm256_set1_epi8(m as i8));
    let mut a = [_mm256_setzero_si256(); 4];
    for wd in 0..4 {
        let v = load_word(blk, wd);
        for (s, (a, m)) in a.iter_mut().zip(&masks).enumerate() {
            // SAFETY: the caller guarantees `V`'s features.
            *a = unsafe { V::dp(*a, _mm256_and_si256(v, *m), bcast8(chunk8(ys, 4 * wd + s))) };
        }
    }
    _mm256_add_epi32(
        _mm256_add_epi32(_mm256_slli_epi32::<6>(a[0]), _mm256_slli_epi32::<4>(a[1])),
        _mm256_add_epi32(_mm256_slli_epi32::<2>(a[2]), a[3]),
    )
}

/// `dot(u, y)` per row and word from the decoded slots of both row pairs
/// ([`DotStep::slots_dot`]): one `vpdpbusd` per slot into an int32 accumulator per row pair
/// (`[ra, ra, rb, rb]` per lane, four products a lane), then `hadd` gives
/// `[w2q: r0..r3 | w2q+1: r0..r3]`. Lanes stay below `32 * 3 * 128`.
///
/// # Safety
/// The CPU must have `V`'s features.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn slots_dot<V: Vpdpbusd>(u: &[[__m256i; 4]; 2], ops: &[__m256i; 4]) -> __m256i {
    let x = u.map(|u| {
        let mut a = _mm256_setzero_si256();
        for (u, y) in u.iter().zip(ops) {
            // SAFETY: the caller guarantees `V`'s features.
            a = unsafe { V::dp(a, *u, *y) };
        }
        a
    });
    _mm256_hadd_epi32(x[0], x[1])
}
