//! The two `vpdpbusd` paths, AVX-VNNI (VEX) and AVX-512 VNNI (EVEX on ymm), from one source.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed bytes and adds each group of four products
//! into an int32 lane, **without** the int16 saturation of AVX2's `maddubs`. So a masked slot
//! can stay in place even for slot 3 (`v & 0xC0` = 64u, at most 192, is a valid unsigned byte),
//! and one instruction replaces `maddubs` + `add` (+ `madd`). The register layouts, operands and
//! float steps are the shared ones ([`super::q8k`], [`super::q8_0`]), so the outputs are
//! bit-identical to the AVX2 path and to the scalar oracle. The two paths differ only in the
//! encoding of that one instruction (`dp` below); the AVX-512 one also lets LLVM use EVEX forms
//! and the 32 vector registers elsewhere.
//!
//! Integer bounds: an int32 lane collects 4 products per instruction, at most 16 per block and
//! slot class, each `|u * 4^s * y| <= 192 * 128`, so every lane stays below 2^22.

/// Defines a path module `$name` whose dot step is `$dp`, compiled for `$feat`.
macro_rules! vnni_path {
    ($name:ident, $isa:expr, $feat:literal, $dp:path $(, $zmm:ident)?) => {
        pub(super) mod $name {
            use std::arch::x86_64::*;

            use crate::format::{BlockT2p, RowPairBlock};
            use crate::kernels::Isa;
            use crate::kernels::x86_64::{bcast8, chunk8, decode_pair, load_word};

            crate::kernels::x86_64::x86_path!($isa, $feat $(, $zmm)?);

            /// [`block_dot`] returns `64 * dot(u, y)`.
            const SHIFT: i32 = 6;

            /// `acc + dot4(u, y)` per int32 lane.
            #[target_feature(enable = $feat)]
            #[inline]
            fn dp(acc: __m256i, u: __m256i, y: __m256i) -> __m256i {
                $dp(acc, u, y)
            }

            /// `64 * dot(u, y)` of one T2P block with its 128 activations,
            /// `[r0, r0, r1, r1 | r2, r2, r3, r3]`. The masks `0x03, 0x0C, 0x30, 0xC0` give
            /// `4^s * u` for slot `s` with one AND each; four accumulators (one per slot class)
            /// collect the four words, and `64 a0 + 16 a1 + 4 a2 + a3` = `64 * dot(u, y)`
            /// recombines them with shifts.
            #[target_feature(enable = $feat)]
            #[inline]
            fn block_dot(blk: &BlockT2p, ys: &[i8; 128]) -> __m256i {
                let masks = [0x03u8, 0x0C, 0x30, 0xC0].map(|m| _mm256_set1_epi8(m as i8));
                let mut a = [_mm256_setzero_si256(); 4];
                for wd in 0..4 {
                    let v = load_word(blk, wd);
                    for (s, (a, m)) in a.iter_mut().zip(&masks).enumerate() {
                        *a = dp(*a, _mm256_and_si256(v, *m), bcast8(chunk8(ys, 4 * wd + s)));
                    }
                }
                _mm256_add_epi32(
                    _mm256_add_epi32(_mm256_slli_epi32::<6>(a[0]), _mm256_slli_epi32::<4>(a[1])),
                    _mm256_add_epi32(_mm256_slli_epi32::<2>(a[2]), a[3]),
                )
            }

            /// `dot(u, y)` per row and word from the decoded slots of both row pairs: one
            /// `vpdpbusd` per slot into an int32 accumulator per row pair (`[ra, ra, rb, rb]`
            /// per lane, four products a lane), then `hadd` gives
            /// `[w2q: r0, r1, r2, r3 | w2q+1: r0, r1, r2, r3]`. Lanes stay below `32 * 3 * 128`.
            #[target_feature(enable = $feat)]
            #[inline]
            fn slots_dot(u: &[[__m256i; 4]; 2], ops: &[__m256i; 4]) -> __m256i {
                let x = u.map(|u| {
                    let mut a = _mm256_setzero_si256();
                    for (u, y) in u.iter().zip(ops) {
                        a = dp(a, *u, *y);
                    }
                    a
                });
                _mm256_hadd_epi32(x[0], x[1])
            }

            /// [`slots_dot`] of words `2q`, `2q + 1` of a block (the gemv decodes per block).
            #[target_feature(enable = $feat)]
            #[allow(dead_code)] // the AVX-512 path runs the zmm q8_0 kernels instead
            #[inline]
            fn pair_dot<B: RowPairBlock>(blk: &B, q: usize, ops: &[__m256i; 4]) -> __m256i {
                slots_dot(&decode_pair(blk, q), ops)
            }
        }
    };
}

vnni_path!(
    avx_vnni,
    Isa::AvxVnni,
    "avx2,f16c,avxvnni",
    _mm256_dpbusd_avx_epi32
);
vnni_path!(
    avx512_vnni,
    Isa::Avx512Vnni,
    "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    _mm256_dpbusd_epi32,
    zmm
);
