//! x86_64 kernels: every kernel loop written once, generic over the path's dot step.
//!
//! Three paths share every kernel loop and differ only in their **dot step** ([`DotStep`]), the
//! integer dot product of slot-masked T2P weight registers with activation bytes:
//!
//! | path | dot step | features |
//! |---|---|---|
//! | [`Isa::Avx2`] | `maddubs` (int16 pairs, saturating) + `madd` ([`avx2`]) | AVX2, F16C |
//! | [`Isa::AvxVnni`] | `vpdpbusd`, VEX (four products into an int32 lane, no saturation; [`vnni`]) | + AVX-VNNI |
//! | [`Isa::Avx512Vnni`] | `vpdpbusd`, EVEX on ymm; on zmm for `q8_0` ([`zmm`]) | + AVX-512 F/BW/VL/VNNI |
//! | [`Isa::Amx`] | the AVX-512 one; `tdpbusd` tiles for gemms of 16+ columns ([`amx`]) | + AMX-TILE/INT8 |
//!
//! The hot loops ([`q8k`]'s gemv and gemm pass, [`q8_0`]'s gemv and gemm tile) are plain generic
//! `#[inline(always)]` functions over a `D: DotStep`, behind the [`HotLoop`] trait. A path runs
//! one through its single `#[target_feature]` entry point, [`Path::run`]: the loop, its dot step
//! and the helpers below are inlined into that entry, so LLVM compiles them with the path's
//! features (the loops, operand tables, float folds, tile epilogues and prefetches the AVX-512
//! instance runs are the ones the AVX2 instance runs; only the dot step differs). The per-call
//! operand setup around a loop is written once as plain functions ([`q8k::gemm`],
//! [`q8_0::gemv`], ...), and a path's [`Kernels`] table is [`table`] of its type.
//!
//! What needs only AVX2 + F16C (the helpers below, the bodies of the dot steps, a tile's step
//! per block) is written as `#[target_feature(enable = "avx2,f16c")] #[inline]` functions,
//! called from the `#[inline(always)]` code in `unsafe` blocks: LLVM inlines them into the entry
//! point with their AVX2 operations already combined, which keeps forms such as `vphaddd` and the
//! lane permutes after it single instructions (inlined through `#[inline(always)]`, the same
//! code came out as shuffles plus adds). Only the instruction a path adds, `vpdpbusd`, waits for
//! the entry point's features. `tools/x86_loops.py` prints the block loops of every entry point
//! (size, spills, VEX or EVEX): compare them before and after a change of structure.
//!
//! Exactness: every integer sum of a 128-weight block is exact (each path documents its bounds),
//! and every float step is the oracle's ([`super::scalar`]), separately rounded `mulps` / `addps`
//! in block order, never FMA. So every path is bit-identical to the scalar oracle.

use std::arch::x86_64::*;

use super::{Isa, T2pKernels};
use crate::format::{BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, BlockT2pG64, RowPairBlock};

pub(super) mod act;
mod amx;
pub(super) mod attention;
mod avx2;
pub(super) mod f16;
pub(in crate::kernels) mod prefetch;
mod q8_0;
mod q8k;
pub(super) mod quant;
pub(super) mod quant_vnni;
pub(super) mod quant_zmm;
mod stock;
mod vnni;
mod zmm;

use amx::Amx;
pub(in crate::kernels) use amx::MIN_COLUMNS as AMX_MIN_COLUMNS;
use avx2::Avx2;
use vnni::{Avx512Vnni, AvxVnni};

/// The T2P kernels of an x86 path. Whether this CPU runs the path is asked once, by
/// [`crate::kernels::cpu`] (every x86 path builds on AVX2 + F16C: the shared helpers are
/// compiled for them).
pub(super) const fn t2p(isa: Isa) -> Option<&'static T2pKernels> {
    const AVX2: T2pKernels = table::<Avx2>();
    const AVX_VNNI: T2pKernels = table::<AvxVnni>();
    const AVX512_VNNI: T2pKernels = table::<Avx512Vnni>();
    const AMX: T2pKernels = table::<Amx>();
    match isa {
        Isa::Avx2 => Some(&AVX2),
        Isa::AvxVnni => Some(&AVX_VNNI),
        Isa::Avx512Vnni => Some(&AVX512_VNNI),
        Isa::Amx => Some(&AMX),
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

/// The T2P table of path `P`: the safe entries of every kernel around `P`'s loops. They are
/// sound to call because [`crate::kernels::cpu`] hands a path's table out only after detecting
/// its features, and these tables are the entries' only callers.
const fn table<P: Path>() -> T2pKernels {
    T2pKernels {
        isa: P::ISA,
        gemv: q8k::gemv::<P>,
        gemm: P::gemm_q8k,
        gemv_q8_0: P::gemv_q8_0::<BlockT2p>,
        gemm_q8_0: P::gemm_q8_0::<BlockT2p>,
        gemv_q8_0_g64: P::gemv_q8_0::<BlockT2pG64>,
        gemm_q8_0_g64: P::gemm_q8_0::<BlockT2pG64>,
        gemm_unit: P::gemm_unit,
        vec_dot_stock: stock::vec_dot_stock,
    }
}

/// A path's dot step: what the kernel loops of [`q8k`] and [`q8_0`] leave to the path. Its
/// methods are `#[inline(always)]` forwarders to the path's AVX2 functions (see the module docs)
/// and carry no target features themselves: they are compiled inside the path's entry point
/// ([`Path::run`]), the only place the loops are reached from.
trait DotStep {
    /// [`DotStep::block_dot`] returns `2^SHIFT * dot(u, y)`.
    const SHIFT: i32;

    /// `2^SHIFT * dot(u, y)` of one T2P block with its 128 activations as int32
    /// `[r0, r0, r1, r1 | r2, r2, r3, r3]` (each row split over two lanes; the `q8_K` gemv
    /// layout, [`q8k`]).
    ///
    /// # Safety
    /// The CPU must have the path's features.
    unsafe fn block_dot(blk: &BlockT2p, ys: &[i8; 128]) -> __m256i;

    /// `dot(u, y)` per row and word of words `2q`, `2q + 1`, from the decoded slots of both row
    /// pairs ([`decode_pair`]) and the activation operands of those words, as int32
    /// `[w2q: r0, r1, r2, r3 | w2q+1: r0, r1, r2, r3]` (the word-pair layout, [`q8_0`]).
    ///
    /// # Safety
    /// The CPU must have the path's features.
    unsafe fn slots_dot(u: &[[__m256i; 4]; 2], ops: &[__m256i; 4]) -> __m256i;

    /// [`DotStep::slots_dot`] of words `2q`, `2q + 1` of a block, for loops that decode per
    /// block (the `q8_0` gemv); a path may skip the decode to plain codes.
    ///
    /// # Safety
    /// The CPU must have the path's features.
    #[inline(always)]
    unsafe fn pair_dot<B: RowPairBlock>(blk: &B, q: usize, ops: &[__m256i; 4]) -> __m256i {
        // SAFETY: the caller guarantees the path's features, which include AVX2.
        unsafe { Self::slots_dot(&decode_pair(blk, q), ops) }
    }
}

/// One call of a hot loop, written once over the dot step and run by a path ([`Path::run`]).
trait HotLoop {
    /// What the loop returns.
    type Out;

    /// Runs the loop around `D`'s dot step. Implementations are `#[inline(always)]`, so that
    /// they are compiled inside the entry point that calls them.
    ///
    /// # Safety
    /// The CPU must have `D`'s features.
    unsafe fn run<D: DotStep>(self) -> Self::Out;
}

/// A gemm pass over the column pairs of a tile, written once for any count `NP` of them (1 to
/// 4) so that each count gets its own loop with the pairs unrolled; its [`HotLoop`] picks `NP`.
trait TilePass {
    /// Column pairs this pass computes.
    fn pairs(&self) -> usize;

    /// Runs the pass with `NP` column pairs. Implementations are `#[inline(always)]`.
    ///
    /// # Safety
    /// The CPU must have `D`'s features.
    unsafe fn pass<D: DotStep, const NP: usize>(self);
}

impl<T: TilePass> HotLoop for T {
    type Out = ();

    #[inline(always)]
    unsafe fn run<D: DotStep>(self) {
        // SAFETY: the caller guarantees `D`'s features.
        unsafe {
            match self.pairs() {
                1 => self.pass::<D, 1>(),
                2 => self.pass::<D, 2>(),
                3 => self.pass::<D, 3>(),
                _ => self.pass::<D, 4>(),
            }
        }
    }
}

/// An x86 path: its dot step, its one `#[target_feature]` entry point, and its `q8_0` kernels.
trait Path: DotStep + Sized {
    /// Which path this is.
    const ISA: Isa;

    /// Runs `l` around this path's dot step, compiled for this path's features: the one
    /// `#[target_feature]` function of a path (a `#[target_feature]` function cannot be
    /// `#[inline(always)]`, so the generic loops are inlined into it instead).
    ///
    /// # Safety
    /// The CPU must have the path's features.
    unsafe fn run<L: HotLoop>(l: L) -> L::Out;

    /// The `q8_0` gemv entry of the path's table: the word-pair kernel of [`q8_0`] unless the
    /// path has its own.
    fn gemv_q8_0<B: RowPairBlock>(x: &[B], nb: usize, y: &[BlockQ8_0Quad], out: &mut [f32]) {
        q8_0::gemv::<Self, B>(x, nb, y, out)
    }

    /// The `q8_0` gemm entry of the path's table, as [`Path::gemv_q8_0`].
    fn gemm_q8_0<B: RowPairBlock>(g: super::Gemm<'_, B, BlockQ8_0Quad>) {
        q8_0::gemm::<Self, B>(g)
    }

    /// The unit-scale gemm entry ([`super::Kernels::gemm_unit`]): the integer sums of
    /// [`q8_0`] unless the path has its own.
    fn gemm_unit(g: super::Gemm<'_, BlockT2p, BlockQ8_0Quad>) {
        q8_0::gemm_unit::<Self>(g)
    }

    /// The `q8_K` gemm entry ([`super::Kernels::gemm`]): the tiles of [`q8k`] unless the path
    /// has its own.
    fn gemm_q8k(g: super::Gemm<'_, BlockT2p, BlockQ8Kx4>) {
        q8k::gemm::<Self>(g)
    }
}

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

/// The four slots of a weight register as plain codes ([`slot_codes`]; the tiles decode once
/// per register and serve every column with it).
#[target_feature(enable = "avx2")]
#[inline]
fn slots_u(v: __m256i) -> [__m256i; 4] {
    let m03 = _mm256_set1_epi8(0x03);
    slot_codes(
        v,
        |v| _mm256_srli_epi16::<2>(v),
        |v| _mm256_and_si256(v, m03),
    )
}

/// The four slots of every byte of a weight register as plain codes `u = (v >> 2s) & 3`, for
/// either register width: `shr2` shifts each 16-bit lane right by 2 bits (LLVM folds the
/// repeated shifts into one shift of `v` each), `low2` keeps the low two bits of each byte.
#[inline(always)]
fn slot_codes<V: Copy>(v: V, shr2: impl Fn(V) -> V, low2: impl Fn(V) -> V) -> [V; 4] {
    let s1 = shr2(v);
    let s2 = shr2(s1);
    [v, s1, s2, shr2(s2)].map(low2)
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
        [Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni, Isa::Amx]
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
