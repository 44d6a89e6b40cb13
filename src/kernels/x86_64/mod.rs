//! x86_64 kernels: one source per kernel, instantiated per ISA path.
//!
//! Three paths share every kernel loop and differ only in their **dot step**, the integer dot
//! product of slot-masked T2P weight registers with activation bytes:
//!
//! | path | dot step | features |
//! |---|---|---|
//! | [`Isa::Avx2`] | `maddubs` (int16 pairs, saturating) + `madd` | AVX2, F16C |
//! | [`Isa::AvxVnni`] | `vpdpbusd`, VEX (four products into an int32 lane, no saturation) | + AVX-VNNI |
//! | [`Isa::Avx512Vnni`] | `vpdpbusd`, EVEX on ymm; on zmm for `q8_0` ([`zmm`]) | + AVX-512 F/BW/VL/VNNI |
//!
//! Each path module supplies its dot steps under fixed names (`SHIFT` and `block_dot` for the
//! `q8_K` gemv, `slots_dot` and `pair_dot` for the tiles and the `q8_0` kernels) and calls
//! [`x86_path!`], which compiles every kernel of [`q8k`] and [`q8_0`] with that path's
//! `target_feature`s around them: the loops, operand tables, float folds, tile epilogues and
//! prefetches the AVX-512 instance runs are the ones the AVX2 instance runs. The helpers below
//! (word loads, broadcasts, scale conversions, slot decoding) are AVX2 functions that inline into
//! every instance.
//!
//! Exactness: every integer sum of a 128-weight block is exact (each path documents its bounds),
//! and every float step is the oracle's ([`super::scalar`]), separately rounded `mulps` / `addps`
//! in block order, never FMA. So every path is bit-identical to the scalar oracle.

use std::arch::x86_64::*;

use super::{Isa, T2pKernels};
use crate::format::{BlockQ8K, RowPairBlock};

pub(super) mod attention;
mod avx2;
pub(super) mod f16;
pub(in crate::kernels) mod prefetch;
mod q8_0;
mod q8k;
pub(super) mod quant;
pub(super) mod quant_zmm;
mod stock;
mod vnni;
mod zmm;

/// The T2P kernels of an x86 path. Whether this CPU runs the path is asked once, by
/// [`crate::kernels::cpu`] (every x86 path builds on AVX2 + F16C: the shared helpers are
/// compiled for them).
pub(super) const fn t2p(isa: Isa) -> Option<&'static T2pKernels> {
    match isa {
        Isa::Avx2 => Some(&avx2::KERNELS),
        Isa::AvxVnni => Some(&vnni::avx_vnni::KERNELS),
        Isa::Avx512Vnni => Some(&vnni::avx512_vnni::KERNELS),
        _ => None,
    }
}

#[cfg(test)]
use super::Kernels;

/// The table of an x86 path, if this CPU runs it.
#[cfg(test)]
fn kernels(isa: Isa) -> Option<&'static Kernels> {
    Kernels::for_isa(isa).ok()
}

/// Defines `KERNELS` (the path's [`Kernels`]) in the calling path module, with every x86 kernel
/// compiled for `$feat` around that module's dot steps. The safe wrappers are only reachable
/// through [`kernels`], after the path's features were detected: that is what makes their
/// `unsafe` calls sound.
macro_rules! x86_path {
    ($isa:expr, $feat:literal) => {
        $crate::kernels::x86_64::x86_path!(@loops $isa, $feat);
        $crate::kernels::x86_64::q8_0::q8_0_kernels!($feat);
    };
    // The AVX-512 VNNI path: its q8_0 kernels are the 512-bit ones of `x86::zmm`.
    ($isa:expr, $feat:literal, zmm) => {
        $crate::kernels::x86_64::x86_path!(@loops $isa, $feat);
        use $crate::kernels::x86_64::zmm::{gemm_q8_0 as gemm_q8_0_impl, gemv_q8_0 as gemv_q8_0_impl};
    };
    (@loops $isa:expr, $feat:literal) => {
        pub(in $crate::kernels::x86_64) static KERNELS: $crate::kernels::T2pKernels =
            $crate::kernels::T2pKernels {
                isa: $isa,
                gemv: |x, nb, y, out| {
                    // SAFETY: KERNELS is handed out only after this path's features were detected.
                    unsafe { gemv_q8k_impl(x, nb, y, out) }
                },
                gemm: |g| {
                    // SAFETY: as for `gemv`.
                    unsafe { gemm_q8k_impl(g) }
                },
                gemv_q8_0: |x, nb, y, out| {
                    // SAFETY: as for `gemv`.
                    unsafe { gemv_q8_0_impl(x, nb, y, out) }
                },
                gemm_q8_0: |g| {
                    // SAFETY: as for `gemv`.
                    unsafe { gemm_q8_0_impl(g) }
                },
                gemv_q8_0_g64: |x, nb, y, out| {
                    // SAFETY: as for `gemv`.
                    unsafe { gemv_q8_0_impl(x, nb, y, out) }
                },
                gemm_q8_0_g64: |g| {
                    // SAFETY: as for `gemv`.
                    unsafe { gemm_q8_0_impl(g) }
                },
                vec_dot_stock: $crate::kernels::x86_64::stock::vec_dot_stock,
            };

        /// The `q8_K` gemv (`q8k::gemv_q8k_loop` around this path's `block_dot`).
        ///
        /// # Safety
        ///
        /// The CPU must have `$feat` (the path's table is built only after detection).
        #[target_feature(enable = $feat)]
        unsafe fn gemv_q8k_impl(
            x: &[$crate::format::BlockT2p],
            nb: usize,
            y: &[$crate::format::BlockQ8K],
            out: &mut [f32],
        ) {
            // SAFETY: this function has the features the loop (AVX2, F16C) and the dot need.
            unsafe {
                $crate::kernels::x86_64::q8k::gemv_q8k_loop::<SHIFT>(x, nb, y, out, |b, ys| {
                    block_dot(b, ys)
                })
            }
        }

        $crate::kernels::x86_64::q8k::q8k_gemm_kernel!($feat);
    };
}
pub(super) use x86_path;

/// Word `wd` of both row pairs: low lane = pair 0 (rows 0, 1), high lane = pair 1 (rows 2, 3).
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn load_word<B: RowPairBlock>(blk: &B, wd: usize) -> __m256i {
    let lo: &[u8; 16] = &blk.words()[0][wd];
    let hi: &[u8; 16] = &blk.words()[1][wd];
    // SAFETY: both pointers come from 16-byte arrays, and loadu has no alignment requirement.
    unsafe { _mm256_loadu2_m128i(hi.as_ptr().cast(), lo.as_ptr().cast()) }
}

/// Words `2q` and `2q + 1` of row pair `p` (one 256-bit load, low lane = word `2q`).
#[target_feature(enable = "avx2")]
#[inline]
fn load_word_pair<B: RowPairBlock>(blk: &B, p: usize, q: usize) -> __m256i {
    let w: &[[u8; 16]; 2] = blk.words()[p][2 * q..2 * q + 2]
        .try_into()
        .expect("two words");
    // SAFETY: `w` is 32 contiguous bytes, and loadu has no alignment requirement.
    unsafe { _mm256_loadu_si256(w.as_ptr().cast()) }
}

/// The 8 bytes in every 64-bit quarter of a register ("dup8" in both lanes).
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn bcast8(chunk: &[i8; 8]) -> __m256i {
    // SAFETY: loadl_epi64 reads exactly the 8 bytes of `chunk`, unaligned.
    unsafe { _mm256_broadcastq_epi64(_mm_loadl_epi64(chunk.as_ptr().cast())) }
}

/// 8-byte chunk `c` (0..16) of a 128-value activation half.
#[inline(always)]
fn chunk8(ys: &[i8; 128], c: usize) -> &[i8; 8] {
    ys[8 * c..8 * c + 8].try_into().expect("8 bytes")
}

/// Activation half `h` (0 or 1) of a `q8_K` block: the 128 values one T2P block multiplies.
#[inline(always)]
fn half(yb: &BlockQ8K, h: usize) -> &[i8; 128] {
    yb.qs[128 * h..128 * h + 128]
        .try_into()
        .expect("128 values")
}

/// The four slots of every byte of the register `$v` as plain codes `u = (v >> 2s) & 3`, with
/// the `set1_epi8`, `and` and `srli_epi16` of its width: one decode for the 256- and 512-bit
/// paths, expanded in place.
macro_rules! slot_codes {
    ($v:expr, $set1:ident, $and:ident, $srli:ident) => {{
        let (v, m03) = ($v, $set1(0x03));
        [
            $and(v, m03),
            $and($srli::<2>(v), m03),
            $and($srli::<4>(v), m03),
            $and($srli::<6>(v), m03),
        ]
    }};
}
use slot_codes;

/// The four slots of a weight register as plain codes ([`slot_codes`]; the tiles decode once
/// per register and serve every column with it).
#[target_feature(enable = "avx2")]
#[inline]
fn slots_u(v: __m256i) -> [__m256i; 4] {
    slot_codes!(v, _mm256_set1_epi8, _mm256_and_si256, _mm256_srli_epi16)
}

/// Words `2q`, `2q + 1` of both row pairs of a block, decoded to plain slots ([`slots_u`]).
#[target_feature(enable = "avx2")]
#[inline]
fn decode_pair<B: RowPairBlock>(blk: &B, q: usize) -> [[__m256i; 4]; 2] {
    [
        slots_u(load_word_pair(blk, 0, q)),
        slots_u(load_word_pair(blk, 1, q)),
    ]
}

/// The 8 row scales `[a: d0..d3 | b: d0..d3]` of two blocks (their scales of one half,
/// [`RowPairBlock::scales`]) as f32 (F16C conversion is exact).
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn scales_ab(da: &[u16; 4], db: &[u16; 4]) -> __m256 {
    // SAFETY: each load reads the 8 bytes of one `d` array, unaligned.
    let h = unsafe {
        _mm_unpacklo_epi64(
            _mm_loadl_epi64(da.as_ptr().cast()),
            _mm_loadl_epi64(db.as_ptr().cast()),
        )
    };
    _mm256_cvtph_ps(h)
}

/// 4 row scales in both lanes, `[d0..d3 | d0..d3]` as f32.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn scales_twice(d: &[u16; 4]) -> __m256 {
    scales_ab(d, d)
}

/// Stores the columns `cols` of a tile result for row group `grp`: `acc[cp]` holds
/// `[c: r0..r3 | c': r0..r3]` for tile columns `c = 2cp`, `c' = 2cp + 1`, written to column
/// `cols.start + c` of `g`'s output at row `4 * grp`.
#[target_feature(enable = "avx2")]
#[inline]
fn store_column_pairs<W, A>(
    g: &mut crate::kernels::Gemm<'_, W, A>,
    cols: std::ops::Range<usize>,
    grp: usize,
    acc: &[__m256],
) {
    let mut l = [[0.0f32; 8]; q8_0::MAX_TILE_COLS / 2];
    for (l, acc) in l.iter_mut().zip(acc) {
        // SAFETY: writes exactly the 8 floats of `l`, unaligned.
        unsafe { _mm256_storeu_ps(l.as_mut_ptr(), *acc) };
    }
    for (c, col) in cols.enumerate() {
        let base = col * g.ld + crate::format::ROWS_PER_T2P * grp;
        let h = 4 * (c % 2);
        g.out[base..base + 4].copy_from_slice(&l[c / 2][h..h + 4]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BlockPq2_0, BlockT2p, f32_to_f16, interleave_q8k_x4};
    use crate::kernels::{Gemm, scalar};

    /// Every x86 path this CPU runs.
    fn paths() -> impl Iterator<Item = &'static Kernels> {
        [Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni]
            .into_iter()
            .filter_map(kernels)
    }

    fn t2p(codes: impl Fn(usize, usize) -> u8, d: f32) -> BlockT2p {
        let c = std::array::from_fn(|r| std::array::from_fn(|k| codes(r, k)));
        BlockT2p::pack(&c, [f32_to_f16(d); 4])
    }

    /// The saturation traps: code 3 with -128 and +127 in every position, on gemv and gemm.
    #[test]
    fn code_three_with_extreme_activations_is_exact() {
        for (k, v) in paths().flat_map(|k| [-128i8, 127, -127].map(|v| (k, v))) {
            let x = [t2p(|_, _| 3, 1.0), t2p(|r, j| ((r + j) % 4) as u8, 1.0)];
            let y = [BlockQ8K::from_qs([v; 256], 1.0)];
            let mut want = [0.0; 4];
            let mut got = [0.0; 4];
            scalar::gemv(&x, 2, &y, &mut want);
            k.gemv(&x, 2, &y, &mut got);
            let isa = k.isa();
            assert_eq!(
                got.map(f32::to_bits),
                want.map(f32::to_bits),
                "{isa} gemv {v}"
            );
            let tile = [interleave_q8k_x4([&y[0], &y[0], &y[0], &y[0]])];
            let mut want = [0.0; 16];
            let mut got = [0.0; 16];
            scalar::gemm(Gemm {
                x: &x,
                nb: 2,
                y: &tile,
                ncols: 4,
                out: &mut want,
                ld: 4,
            });
            k.gemm(Gemm {
                x: &x,
                nb: 2,
                y: &tile,
                ncols: 4,
                out: &mut got,
                ld: 4,
            });
            assert_eq!(
                got.map(f32::to_bits),
                want.map(f32::to_bits),
                "{isa} gemm {v}"
            );
            let pq = [BlockPq2_0::from_codes(&[3; 128], f32_to_f16(1.0)); 2];
            assert_eq!(
                k.vec_dot_stock(&pq, &y).to_bits(),
                scalar::vec_dot_stock(&pq, &y).to_bits()
            );
        }
    }

    /// Every code in every slot position against -128/+127 mixes, several tiles, real columns only.
    #[test]
    fn gemm_writes_only_real_columns_of_the_last_tile() {
        let x: Vec<BlockT2p> = (0..4)
            .map(|i| t2p(|r, j| ((r * 3 + j * 7 + i) % 4) as u8, 0.5 + i as f32))
            .collect();
        let cols: Vec<BlockQ8K> = (0..8)
            .map(|c| {
                BlockQ8K::from_qs(
                    std::array::from_fn(|i| {
                        if (i + c) % 3 == 0 {
                            -128
                        } else {
                            127 - c as i8
                        }
                    }),
                    0.1 * (c + 1) as f32,
                )
            })
            .collect();
        let tiles = [
            interleave_q8k_x4([&cols[0], &cols[1], &cols[2], &cols[3]]),
            interleave_q8k_x4([&cols[4], &cols[5], &cols[6], &cols[7]]),
        ];
        for (k, ncols) in paths().flat_map(|k| (5..=8).map(move |n| (k, n))) {
            let ld = 9;
            let mut want = vec![f32::NAN; ld * 8];
            let mut got = vec![f32::NAN; ld * 8];
            scalar::gemm(Gemm {
                x: &x,
                nb: 2,
                y: &tiles,
                ncols,
                out: &mut want,
                ld,
            });
            k.gemm(Gemm {
                x: &x,
                nb: 2,
                y: &tiles,
                ncols,
                out: &mut got,
                ld,
            });
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{} ncols {ncols}", k.isa());
        }
    }
}
