//! The x86 kernels with `q8_K` activations (one scale per 256 values): the gemv loop and the
//! gemm tiles, written once around a path's dot step ([`DotStep`]).
//!
//! **gemv register layout.** One 256-bit register holds word `wd` of row pair 0 in its low lane
//! and word `wd` of row pair 1 in its high lane (lane = row pair). A slot of that register is then
//! `[row 0: 8 codes | row 1: 8 codes | row 2: 8 codes | row 3: 8 codes]`, all for the same 8
//! weights `k = 8c .. 8c + 8` (`c = 4*wd + s`), so the activation operand is those 8 bytes in
//! every 64-bit quarter ("dup8", [`super::bcast8`]): one `vpbroadcastq` from the `q8_K` bytes,
//! read in place, no scratch copy. A path's [`DotStep::block_dot`] returns `2^SHIFT * dot(u, y)`
//! as int32 `[r0, r0, r1, r1 | r2, r2, r3, r3]` (`u = w + 1`, the stored code).
//!
//! **gemm.** The word-pair layout of the `q8_0` kernels ([`super::q8_0`]): one 256-bit load holds
//! words `2q`, `2q + 1` of a row pair, decoded once to plain `u` ([`super::slots_u`]) and served
//! to every column of up to two `q8_K x4` tiles (8 columns: a verification of up to 8 tokens
//! reads each weight byte once). The activation operands (chunk `8q + s` in the low lane,
//! `8q + 4 + s` in the high lane) are gathered from the tiles once per call into a per-thread
//! buffer. A path's [`DotStep::slots_dot`] gives `[w2q: r0..r3 | w2q+1: r0..r3]` in int32 per
//! column; a lane permute and an add per column pair give `[c: r0..r3 | c': r0..r3]`, then
//! `- sum(y)` and the oracle's float step `acc + (d_w * d_y) * isum`. Loop order: tile pair, then
//! row group, so the operands stay in cache while the weights stream.
//!
//! Float semantics equal the oracle's: per 128-weight block and row,
//! `acc = acc + (d_w * d_y) * (isum as f32)`, two separately rounded IEEE operations (`mulps`,
//! `addps`; no FMA), in block order.

use std::arch::x86_64::*;

use super::prefetch::PassGroups;
use super::q8_0::MAX_TILE_COLS;
use super::{
    DotStep, HotLoop, Path, TilePass, decode_pair, half, prefetch, scales_twice, store_column_pairs,
};
use crate::format::{BlockQ8K, BlockQ8Kx4, BlockT2p, ROWS_PER_T2P};
use crate::kernels::{Gemm, PER_CALL_MIN_BLOCKS, with_per_call_buffer};

/// The `q8_K` gemv entry of path `P`'s table ([`super::table`]): [`Gemv`] on `P`.
pub(super) fn gemv<P: Path>(x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]) {
    // SAFETY: only `P`'s table calls it, handed out after detecting `P`'s features.
    unsafe { P::run(Gemv { x, nb, y, out }) }
}

/// The `q8_K` gemv of the x86 paths: `-2^SHIFT * sum(y)` per 128-value half once per call, for
/// up to [`SUM_CHUNK`] blocks at a time on the stack (longer rows resume each row group's sum
/// from `out`, so the float order is that of one pass), then passes of [`STREAMS`] row groups
/// that lie apart ([`PassGroups`], as the `q8_0` gemvs), the path's [`DotStep::block_dot`]
/// and [`fold_block_pair`] per pair of blocks of each.
struct Gemv<'a> {
    x: &'a [BlockT2p],
    nb: usize,
    y: &'a [BlockQ8K],
    out: &'a mut [f32],
}

impl HotLoop for Gemv<'_> {
    type Out = ();

    #[inline(always)]
    unsafe fn run<D: DotStep>(self) {
        let Gemv { x, nb, y, out } = self;
        let mut neg_ysum = [0i32; SUM_CHUNK];
        for c0 in (0..nb).step_by(SUM_CHUNK) {
            let blocks = c0..(c0 + SUM_CHUNK).min(nb);
            for (n, b) in neg_ysum.iter_mut().zip(blocks.clone()) {
                *n = -(1 << D::SHIFT) * y[b / 2].half_sum(b % 2);
            }
            let ys = &y[c0 / 2..blocks.end / 2];
            for pass in PassGroups::all::<STREAMS>(x.len() / nb) {
                let starts: [usize; STREAMS] = std::array::from_fn(|i| pass.group(i) * nb);
                // SAFETY: the caller guarantees `D`'s features, which include AVX2 and F16C
                // (this and the unsafe blocks below).
                let mut acc =
                    starts.map(|at| unsafe { resume_rows(rows_of(out, at / nb), c0 == 0) });
                // Blocks 2i and 2i + 1 read the two halves of q8_K block i (nb is even): their
                // reductions and float steps share 256-bit instructions; the two float additions
                // into `acc` stay separate and in block order.
                for (i, (yb, nys)) in ys.iter().zip(neg_ysum.chunks_exact(2)).enumerate() {
                    let b = c0 + 2 * i;
                    for (acc, at) in acc.iter_mut().zip(starts) {
                        prefetch::stream_ahead(x, at + b);
                        prefetch::stream_ahead(x, at + b + 1);
                        let pair = &x[at + b..at + b + 2];
                        // SAFETY: as above.
                        *acc = unsafe {
                            let s0 = D::block_dot(&pair[0], half(yb, 0));
                            let s1 = D::block_dot(&pair[1], half(yb, 1));
                            fold_block_pair(D::SHIFT, *acc, pair, yb.d, s0, s1, nys)
                        };
                    }
                }
                for (i, acc) in acc.into_iter().enumerate().take(pass.real) {
                    // SAFETY: as above.
                    unsafe { store_rows(rows_of(out, pass.group(i)), acc) };
                }
            }
        }
    }
}

/// Row groups a [`Gemv`] pass reads side by side, each its own weight stream asked for ahead
/// into L2 ([`prefetch::stream_ahead`]). One group at a time, asking for the next group into
/// L1, streamed a 71 MB matrix at 57-59 % of the memory ceiling on a Sapphire Rapids Xeon (two
/// threads, `avx512-vnni`), against 97-101 % with four streams (two: 80-87 %).
const STREAMS: usize = 4;

/// The 4 outputs of row group `g`.
fn rows_of(out: &mut [f32], g: usize) -> &mut [f32; 4] {
    (&mut out[g * ROWS_PER_T2P..(g + 1) * ROWS_PER_T2P])
        .try_into()
        .expect("4 rows")
}

/// Blocks (even) whose activation sums [`Gemv`] holds at once.
const SUM_CHUNK: usize = 256;

/// The running sums of one row group: zero for the first chunk of blocks, else what the
/// previous chunk stored in `o` (f32 in and out, so the float order is that of one pass).
#[target_feature(enable = "avx2")]
#[inline]
fn resume_rows(o: &[f32; 4], first: bool) -> __m128 {
    if first {
        _mm_setzero_ps()
    } else {
        // SAFETY: reads exactly the 4 floats of `o`, unaligned.
        unsafe { _mm_loadu_ps(o.as_ptr()) }
    }
}

/// Stores the 4 row sums of a row group.
#[target_feature(enable = "avx2")]
#[inline]
fn store_rows(o: &mut [f32; 4], acc: __m128) {
    // SAFETY: writes exactly the 4 floats of `o`, unaligned.
    unsafe { _mm_storeu_ps(o.as_mut_ptr(), acc) }
}

/// The float steps of blocks `2i` and `2i + 1` of a gemv row group (the two halves of one
/// `q8_K` block, scale `d_y`): `s0`, `s1` hold `2^shift * dot(u, y)` of the two blocks as
/// `[r0, r0, r1, r1 | r2, r2, r3, r3]`, `neg_ysum` their `-2^shift * sum(y)`. Adds
/// `(d_w * d_y) * isum` of block `2i`, then of block `2i + 1`, to `acc` (the reductions share
/// 256-bit instructions; the two float additions stay separate and in block order). `shift` is
/// a constant of the path (LLVM folds the shift count into the immediate form).
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn fold_block_pair(
    shift: i32,
    acc: __m128,
    pair: &[BlockT2p],
    d_y: f32,
    s0: __m256i,
    s1: __m256i,
    neg_ysum: &[i32],
) -> __m128 {
    // [b0 r0, b0 r1, b1 r0, b1 r1 | b0 r2, b0 r3, b1 r2, b1 r3] -> rows in order per block.
    let h = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(s0, s1));
    let (n0, n1) = (neg_ysum[0], neg_ysum[1]);
    let ys = _mm256_setr_epi32(n0, n0, n0, n0, n1, n1, n1, n1);
    // Exact: `h + ys` is 2^shift times an integer.
    let isum = _mm256_sra_epi32(_mm256_add_epi32(h, ys), _mm_cvtsi32_si128(shift));
    let scale = _mm256_mul_ps(
        super::scales_ab(&pair[0].d, &pair[1].d),
        _mm256_set1_ps(d_y),
    );
    let prod = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(isum));
    let acc = _mm_add_ps(acc, _mm256_castps256_ps128(prod));
    _mm_add_ps(acc, _mm256_extractf128_ps::<1>(prod))
}

/// The gemm's per-block operands of up to two `q8_K x4` tiles: `ops[c][q][s]` the activation
/// operand of column `c`, word pair `q`, slot `s`.
pub(super) type TileOps = [[[__m256i; 4]; 2]; MAX_TILE_COLS];
/// The gemm's per-block float factors per column pair: `-sum(y)` and `d_y` of column `2cp` in
/// the low lane (4 times) and of `2cp + 1` in the high lane.
pub(super) type PairFactors = [(__m256i, __m256); MAX_TILE_COLS / 2];

thread_local! {
    /// The per-call operands of [`for_each_pass`], reused from call to call.
    static TILE_OPS: std::cell::Cell<Vec<TileOps>> = const { std::cell::Cell::new(Vec::new()) };
    /// The per-call float factors of [`for_each_pass`], reused from call to call.
    static PAIR_F: std::cell::Cell<Vec<PairFactors>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Calls `tile(ops, factors, c0, real)` once per pass of up to [`MAX_TILE_COLS`] columns
/// (`real` of them stored from column `c0`), on the operands of those columns gathered from the
/// `q8_K x4` tiles `y` into this thread's buffers ([`with_per_call_buffer`]). Columns past the
/// last real one read the last tile's zero-padded column 3 and are not stored.
#[target_feature(enable = "avx2")]
pub(super) fn for_each_pass(
    nb: usize,
    y: &[BlockQ8Kx4],
    ncols: usize,
    mut tile: impl FnMut(&[TileOps], &[PairFactors], std::ops::Range<usize>),
) {
    let half_n = nb / 2;
    let tiles_per_pass = MAX_TILE_COLS / 4;
    let ntiles = ncols.div_ceil(4);
    for t0 in (0..ntiles).step_by(tiles_per_pass) {
        let real = (ncols - 4 * t0).min(MAX_TILE_COLS);
        let last = ntiles - 1;
        let at = |c: usize| {
            let t = (t0 + c / 4).min(last);
            let col = if t0 + c / 4 > last { 3 } else { c % 4 };
            (&y[t * half_n..(t + 1) * half_n], col)
        };
        let ops = (0..nb).map(|b| -> TileOps {
            let chunk = |c: usize, ch: usize| {
                let (tile, col) = at(c);
                let off = 32 * (16 * (b % 2) + ch) + 8 * col;
                let v: [i8; 8] = tile[b / 2].qs[off..off + 8].try_into().expect("8 bytes");
                i64::from_le_bytes(v.map(|v| v as u8))
            };
            std::array::from_fn(|c| {
                std::array::from_fn(|q| {
                    std::array::from_fn(|s| {
                        let (lo, hi) = (chunk(c, 8 * q + s), chunk(c, 8 * q + 4 + s));
                        _mm256_setr_epi64x(lo, lo, hi, hi)
                    })
                })
            })
        });
        let factors = (0..nb).map(|b| -> PairFactors {
            std::array::from_fn(|cp| {
                let f = |c: usize| {
                    let (tile, col) = at(c);
                    let yb = &tile[b / 2];
                    (-yb.half_sum(col, b % 2), yb.d[col])
                };
                let ((sa, da), (sz, dz)) = (f(2 * cp), f(2 * cp + 1));
                (
                    _mm256_setr_epi32(sa, sa, sa, sa, sz, sz, sz, sz),
                    _mm256_setr_ps(da, da, da, da, dz, dz, dz, dz),
                )
            })
        });
        with_per_call_buffer(&TILE_OPS, PER_CALL_MIN_BLOCKS, ops, |ops| {
            with_per_call_buffer(&PAIR_F, PER_CALL_MIN_BLOCKS, factors, |pf| {
                tile(ops, pf, 4 * t0..4 * t0 + real)
            })
        });
    }
}

/// The `q8_K x4` gemm entry of path `P`'s table ([`super::table`]): passes of up to
/// [`MAX_TILE_COLS`] columns over the weights ([`for_each_pass`]), each a [`GemmPass`] on `P`.
pub(super) fn gemm<P: Path>(mut g: Gemm<'_, BlockT2p, BlockQ8Kx4>) {
    let (nb, y, ncols) = (g.nb, g.y, g.ncols);
    let pass = |ops: &[TileOps], factors: &[PairFactors], cols| {
        let p = GemmPass {
            g: &mut g,
            ops,
            factors,
            cols,
        };
        // SAFETY: only `P`'s table calls this entry, handed out after detecting `P`'s features.
        unsafe { P::run(p) }
    };
    // SAFETY: as above; every path has AVX2.
    unsafe { for_each_pass(nb, y, ncols, pass) }
}

/// One pass of the gemm over all row groups: `2 * NP` columns computed from the gathered
/// operands, those of `cols` stored ([`TilePass::pass`]).
struct GemmPass<'a, 'g> {
    g: &'a mut Gemm<'g, BlockT2p, BlockQ8Kx4>,
    ops: &'a [TileOps],
    factors: &'a [PairFactors],
    cols: std::ops::Range<usize>,
}

impl TilePass for GemmPass<'_, '_> {
    fn pairs(&self) -> usize {
        self.cols.len().div_ceil(2)
    }

    /// `2 * NP` columns computed, those of `cols` stored, a [`tile_block`] per block.
    #[inline(always)]
    unsafe fn pass<D: DotStep, const NP: usize>(self) {
        let GemmPass {
            g,
            ops: tile_ops,
            factors: pair_f,
            cols,
        } = self;
        let (x, nb) = (g.x, g.nb);
        for (grp, group) in x.chunks_exact(nb).enumerate() {
            // SAFETY: the caller guarantees `D`'s features, which include AVX2 and F16C
            // (this and the unsafe blocks below).
            let mut acc = unsafe { [_mm256_setzero_ps(); NP] };
            for (i, ((blk, ops), pf)) in group.iter().zip(tile_ops).zip(pair_f).enumerate() {
                prefetch::gemm_block(x, nb, grp, i);
                // SAFETY: as above.
                unsafe { tile_block::<D, NP>(&mut acc, blk, ops, pf) };
            }
            // SAFETY: as above.
            unsafe { store_column_pairs(g, cols.clone(), grp, &acc) };
        }
    }
}

/// One block of a [`GemmPass`] for its `NP` column pairs: per word pair, both row pairs are
/// decoded once and serve every column's dot; a lane permute and an add per column pair give
/// `[c: r0..r3 | c': r0..r3]`, then `- sum(y)` and the oracle's `acc + (d_w * d_y) * isum`.
///
/// (An AVX2 function rather than part of the `#[inline(always)]` loop, as
/// [`super::q8_0`]'s `tile_block`: LLVM inlines it into the path's entry point with its AVX2
/// operations already in place.)
///
/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn tile_block<D: DotStep, const NP: usize>(
    acc: &mut [__m256; NP],
    blk: &BlockT2p,
    ops: &TileOps,
    pf: &PairFactors,
) {
    let mut m = [_mm256_setzero_si256(); MAX_TILE_COLS];
    for q in 0..2 {
        let u = decode_pair(blk, q);
        for (m, ops) in m.iter_mut().zip(ops).take(2 * NP) {
            // SAFETY: the caller guarantees `D`'s features.
            let w = unsafe { D::slots_dot(&u, &ops[q]) };
            *m = if q == 0 { w } else { _mm256_add_epi32(*m, w) };
        }
    }
    let dw = scales_twice(&blk.d);
    for (cp, acc) in acc.iter_mut().enumerate() {
        let (lo, hi) = (m[2 * cp], m[2 * cp + 1]);
        let tot = _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(lo, hi),
            _mm256_permute2x128_si256::<0x31>(lo, hi),
        );
        let (neg, dy) = pf[cp];
        let isum = _mm256_add_epi32(tot, neg);
        let scale = _mm256_mul_ps(dw, dy);
        *acc = _mm256_add_ps(*acc, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(isum)));
    }
}
