//! The x86 `q8_0` gemv and gemm of the word-pair layout, written once around a path's dot step
//! ([`DotStep::pair_dot`], [`DotStep::slots_dot`]); the AVX2 and AVX-VNNI paths run them, the
//! AVX-512 one its 512-bit kernels ([`super::zmm`]).
//!
//! **Register layout ("word pairs").** One 256-bit load of `qs[p][2q..2q + 2]` holds words `2q`
//! (low lane) and `2q + 1` (high lane) of row pair `p`. Word `wd` is exactly `q8_0` sub-block `wd`
//! (weights `32wd .. 32wd + 32`), so a lane never mixes activation scales, and the weights need
//! no insert. Slot `s` of that register multiplies activation chunk `8q + s` (low lane) and
//! `8q + 4 + s` (high lane), each 8 bytes repeated in both halves of its lane: that operand is
//! precomputed once per call ([`Q8_0Table`], 256 bytes per block, built with vector loads and
//! permutes into a per-thread buffer: a decode makes thousands of calls per token) and serves
//! both row pairs of every row group.
//!
//! **Reduction.** A path's [`DotStep::pair_dot`] returns `dot(u, y)` (`u = w + 1`, the code) per
//! row and word as int32 `[w2q: r0, r1, r2, r3 | w2q+1: r0, r1, r2, r3]`. Adding the table's
//! `-sum(y)` gives the exact 32-weight sums `i_wd`. Two row groups `A`, `B` are processed per pass:
//! a 128-bit lane permute turns their four word-pair vectors into `I_wd = [A r0..r3 | B r0..r3]`,
//! so the float fold runs once for 8 rows: `s = d0 * I0; s = s + d1 * I1; s = s + d2 * I2;
//! s = s + d3 * I3; acc = acc + d_w * s` with `d_j` the activation scales broadcast and `d_w` the
//! 8 row scales (for a group-64 block, `acc = (acc + d_w0 * (s0 + s1)) + d_w1 * (s2 + s3)`, the
//! shared [`crate::kernels::fold_q8_0`]). Every operation is a separately rounded `mulps`/`addps`
//! in the oracle's order ([`crate::kernels::scalar::accumulate_q8_0`]), so the result is bit-identical to
//! it.
//!
//! The gemm pairs columns instead of row groups: `[c: r0..r3 | c': r0..r3]`, with the scales of
//! the two columns in the two lanes; each decoded register serves every column of a tile of up
//! to [`MAX_TILE_COLS`] columns, so a verification of up to 8 tokens reads each weight once.
//! The tile's operands lie block by block for all its columns ([`TileBlock`]).
//!
//! **Why this form.** Broadcasting each block's activations per row group costs about 1.7x
//! the instructions of the word-pair table, which matters once the next pass's weights are
//! prefetched ([`super::prefetch`]) and the gemv is compute-bound. A tile shares only the weight
//! decode among its columns (the `maddubs`, int16 adds, reduction and fold are per column), so
//! it pays where the gemv waits for memory with that much compute to spare.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{
    DotStep, HotLoop, Path, TilePass, decode_pair, prefetch, prefetch::PassGroups, scales_ab,
    scales_twice, store_column_pairs,
};
use crate::format::{BlockQ8_0Quad, BlockT2p, ROWS_PER_T2P, RowPairBlock};
use crate::kernels::{Gemm, PER_CALL_MIN_BLOCKS, fold_q8_0};

/// Most columns one pass over the weights serves (four column pairs: the decoded slots of a
/// weight register stay in registers while every column multiplies them).
pub(super) const MAX_TILE_COLS: usize = 8;

/// Per-block activation operands of one `q8_0` column in the word-pair layout.
pub(super) struct Q8_0Table {
    /// `ops[b][q][s]`: chunk `8q + s` of block `b` in the low lane, chunk `8q + 4 + s` in the
    /// high lane, each 8 bytes twice.
    pub(super) ops: Vec<[[__m256i; 4]; 2]>,
    /// `neg[b][q]`: `-sum` of sub-block `2q` (low lane, 4 times) and `2q + 1` (high lane).
    pub(super) neg: Vec<[__m256i; 2]>,
}

impl Q8_0Table {
    /// An empty table; [`Q8_0Table::fill`] sizes it.
    pub(super) fn new() -> Self {
        Q8_0Table {
            ops: Vec::new(),
            neg: Vec::new(),
        }
    }

    /// Fills the table for the blocks of one column, reusing its allocation. Per half `q` two
    /// 256-bit loads hold chunks `8q .. 8q + 4` and `8q + 4 .. 8q + 8`; a lane permute and a
    /// 64-bit unpack per slot give the operands, no scalar byte work.
    #[target_feature(enable = "avx2")]
    pub(super) fn fill(&mut self, y: &[BlockQ8_0Quad]) {
        self.ops.clear();
        // Sized for k = 32768 from the first call, so which thread first meets which matrix
        // does not decide when a table grows (a forward pass must not allocate).
        self.ops.reserve(y.len().max(PER_CALL_MIN_BLOCKS));
        self.ops.extend(y.iter().map(|yb| {
            std::array::from_fn(|q| {
                let half: &[i8; 64] = yb.qs[64 * q..64 * q + 64].try_into().expect("64 bytes");
                // SAFETY: both loads read inside the 64 bytes of `half`, unaligned.
                let (l, h) = unsafe {
                    (
                        _mm256_loadu_si256(half.as_ptr().cast()),
                        _mm256_loadu_si256(half.as_ptr().add(32).cast()),
                    )
                };
                let s01 = _mm256_permute2x128_si256::<0x20>(l, h);
                let s23 = _mm256_permute2x128_si256::<0x31>(l, h);
                [
                    _mm256_unpacklo_epi64(s01, s01),
                    _mm256_unpackhi_epi64(s01, s01),
                    _mm256_unpacklo_epi64(s23, s23),
                    _mm256_unpackhi_epi64(s23, s23),
                ]
            })
        }));
        self.neg.clear();
        self.neg.reserve(y.len().max(PER_CALL_MIN_BLOCKS));
        self.neg.extend(y.iter().map(|yb| {
            std::array::from_fn(|q| {
                let (lo, hi) = (-yb.sums[2 * q], -yb.sums[2 * q + 1]);
                _mm256_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi)
            })
        }));
    }
}

thread_local! {
    /// Per-thread operand tables of the `q8_0` kernels: filled per call, allocated once per
    /// thread (a decode calls these kernels thousands of times per token).
    static TABLES: std::cell::RefCell<Vec<Q8_0Table>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` with `n` of this thread's operand tables (contents stale; the caller fills them).
/// Not reentrant: `f` must not call it again.
pub(super) fn with_tables<R>(n: usize, f: impl FnOnce(&mut [Q8_0Table]) -> R) -> R {
    TABLES.with_borrow_mut(|t| {
        while t.len() < n {
            t.push(Q8_0Table::new());
        }
        f(&mut t[..n])
    })
}

/// The operands of one block for every column of a gemm tile, side by side (one bounds check
/// and one cache stream per block): `ops`/`neg` as in [`Q8_0Table`] per column, `d[cp][j]` the
/// scale of sub-block `j` of column `2cp` in the low lane and of `2cp + 1` in the high lane.
pub(super) struct TileBlock {
    pub(super) ops: [[[__m256i; 4]; 2]; MAX_TILE_COLS],
    pub(super) neg: [[__m256i; 2]; MAX_TILE_COLS],
    pub(super) d: [[__m256; 4]; MAX_TILE_COLS / 2],
}

thread_local! {
    /// Per-thread gemm tile operands, allocated once per thread.
    static TILE: std::cell::RefCell<Vec<TileBlock>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on the operands of the `real` columns `cols` (`real * nb` blocks, column after
/// column; `2 <= real <= MAX_TILE_COLS`), an odd last column repeated in the unused slot.
#[target_feature(enable = "avx2")]
pub(super) fn with_tile<R>(
    cols: &[BlockQ8_0Quad],
    nb: usize,
    real: usize,
    f: impl FnOnce(&[TileBlock]) -> R,
) -> R {
    with_tables(MAX_TILE_COLS, |tables| {
        let np = real.div_ceil(2);
        let col = |i: usize| &cols[i.min(real - 1) * nb..(i.min(real - 1) + 1) * nb];
        for (i, t) in tables.iter_mut().enumerate().take(2 * np) {
            t.fill(col(i));
        }
        TILE.with_borrow_mut(|tile| {
            tile.resize_with(nb, || TileBlock {
                ops: [[[_mm256_setzero_si256(); 4]; 2]; MAX_TILE_COLS],
                neg: [[_mm256_setzero_si256(); 2]; MAX_TILE_COLS],
                d: [[_mm256_setzero_ps(); 4]; MAX_TILE_COLS / 2],
            });
            for (b, tb) in tile.iter_mut().enumerate() {
                for (i, t) in tables.iter().enumerate().take(2 * np) {
                    tb.ops[i] = t.ops[b];
                    tb.neg[i] = t.neg[b];
                }
                for cp in 0..np {
                    tb.d[cp] = pair_scales(&col(2 * cp)[b], &col(2 * cp + 1)[b]);
                }
            }
            f(&tile[..nb])
        })
    })
}

/// Column-pair factors of one block for the gemm: the scale `d_j` of column `c` in the low lane
/// and of column `c'` in the high lane, per sub-block `j`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn pair_scales(a: &BlockQ8_0Quad, b: &BlockQ8_0Quad) -> [__m256; 4] {
    std::array::from_fn(|j| {
        let (x, z) = (a.d[j], b.d[j]);
        _mm256_setr_ps(x, x, x, x, z, z, z, z)
    })
}

/// The `q8_0` gemv of path `P` ([`Path::gemv_q8_0`]): the column's operand table ([`Q8_0Table`]),
/// then [`GemvRows`] on `P`.
pub(super) fn gemv<P: Path, B: RowPairBlock>(
    x: &[B],
    nb: usize,
    y: &[BlockQ8_0Quad],
    out: &mut [f32],
) {
    with_tables(1, |t| {
        // SAFETY: only `P`'s table calls this entry, handed out after detecting `P`'s features
        // (which include the AVX2 that `fill` needs).
        unsafe {
            t[0].fill(y);
            P::run(GemvRows {
                x,
                nb,
                y,
                table: &t[0],
                out,
            })
        }
    })
}

/// The `q8_0` gemv on a filled operand table, two row groups per pass ([`PassGroups`]; see the
/// module docs).
struct GemvRows<'a, B> {
    x: &'a [B],
    nb: usize,
    y: &'a [BlockQ8_0Quad],
    table: &'a Q8_0Table,
    out: &'a mut [f32],
}

impl<B: RowPairBlock> HotLoop for GemvRows<'_, B> {
    type Out = ();

    #[inline(always)]
    unsafe fn run<D: DotStep>(self) {
        let GemvRows {
            x,
            nb,
            y,
            table,
            out,
        } = self;
        for pass in PassGroups::all::<{ 2 * GEMV_PAIRS }>(x.len() / nb) {
            // Pair `j` of the pass is its groups `2j`, `2j + 1`; lanes past the last real group
            // repeat it, and the copies are not stored.
            let groups: [[&[B]; 2]; GEMV_PAIRS] = std::array::from_fn(|j| {
                [0, 1].map(|i| {
                    let g = pass.group(2 * j + i);
                    &x[g * nb..(g + 1) * nb]
                })
            });
            // SAFETY: the caller guarantees `D`'s features, which include AVX2 and F16C
            // (this and the unsafe blocks below).
            let mut acc = [unsafe { _mm256_setzero_ps() }; GEMV_PAIRS];
            let blocks = y.iter().zip(table.ops.iter().zip(&table.neg));
            for (i, (yb, (ops, neg))) in blocks.enumerate() {
                for (acc, [a, b]) in acc.iter_mut().zip(&groups) {
                    for g in [a, b] {
                        prefetch::stream_ahead(g, i);
                    }
                    let (ba, bb) = (&a[i], &b[i]);
                    // SAFETY: as above.
                    *acc = unsafe {
                        let m = [
                            D::pair_dot(ba, 0, &ops[0]),
                            D::pair_dot(bb, 0, &ops[0]),
                            D::pair_dot(ba, 1, &ops[1]),
                            D::pair_dot(bb, 1, &ops[1]),
                        ];
                        fold_group_pair(*acc, m, neg, yb, ba, bb)
                    };
                }
            }
            for (j, acc) in acc.into_iter().enumerate() {
                // SAFETY: as above.
                unsafe { store_group_pair(out, pass, j, acc) };
            }
        }
    }
}

/// Pairs of row groups a [`GemvRows`] pass reads side by side, each group its own weight
/// stream ([`PassGroups`]).
const GEMV_PAIRS: usize = 2;

/// The float fold of one block for row groups `A`, `B`: `m` holds their word-pair sums
/// `[A q0, B q0, A q1, B q1]` (`dot(u, y)`); adding `neg` gives the exact 32-weight sums, a lane
/// permute `I_wd = [A r0..r3 | B r0..r3]`, and [`fold_q8_0`] the oracle's float steps.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn fold_group_pair<B: RowPairBlock>(
    acc: __m256,
    m: [__m256i; 4],
    neg: &[__m256i; 2],
    yb: &BlockQ8_0Quad,
    ba: &B,
    bb: &B,
) -> __m256 {
    let [ma0, mb0, ma1, mb1] =
        [(m[0], 0), (m[1], 0), (m[2], 1), (m[3], 1)].map(|(m, q)| _mm256_add_epi32(m, neg[q]));
    let i = [
        _mm256_permute2x128_si256::<0x20>(ma0, mb0),
        _mm256_permute2x128_si256::<0x31>(ma0, mb0),
        _mm256_permute2x128_si256::<0x20>(ma1, mb1),
        _mm256_permute2x128_si256::<0x31>(ma1, mb1),
    ];
    let p: [__m256; 4] =
        std::array::from_fn(|j| _mm256_mul_ps(_mm256_set1_ps(yb.d[j]), _mm256_cvtepi32_ps(i[j])));
    fold_q8_0(
        B::HALVES,
        acc,
        [_mm256_add_ps(p[0], p[1]), p[2], p[3]],
        |h| scales_ab(ba.scales(h), bb.scales(h)),
        |a, b| _mm256_add_ps(a, b),
        |a, b| _mm256_mul_ps(a, b),
    )
}

/// Stores the 4 rows of each real group of pair `j` of a gemv pass (the low half of `acc` is
/// group `2j`, the high half group `2j + 1`).
#[target_feature(enable = "avx2")]
#[inline]
fn store_group_pair(out: &mut [f32], pass: PassGroups, j: usize, acc: __m256) {
    let halves = [_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc)];
    let real = pass.real.saturating_sub(2 * j).min(2);
    for (i, rows) in halves.into_iter().take(real).enumerate() {
        let at = ROWS_PER_T2P * pass.group(2 * j + i);
        let o: &mut [f32; 4] = (&mut out[at..at + 4]).try_into().expect("4 rows");
        // SAFETY: writes exactly the 4 floats of `o`, unaligned.
        unsafe { _mm_storeu_ps(o.as_mut_ptr(), rows) };
    }
}

/// The `q8_0` gemm of path `P` ([`Path::gemm_q8_0`]): up to [`MAX_TILE_COLS`] columns per pass
/// over the weights, as column pairs (an odd last column is paired with itself and stored
/// once), each pass a [`GemmTile`] on `P`; a single column runs through the gemv.
pub(super) fn gemm<P: Path, B: RowPairBlock>(g: Gemm<'_, B, BlockQ8_0Quad>) {
    tile_passes::<P, B>(g, |g, tile, cols| {
        // SAFETY: only `P`'s table calls this entry, handed out after detecting `P`'s features.
        unsafe { P::run(GemmTile { g, tile, cols }) }
    });
}

/// Runs a gemm of path `P` as [`column_passes`]: a single column through the gemv, every other
/// pass as `pass(g, tile, cols)` on the operands of its columns `cols` ([`with_tile`]). A tile
/// takes columns in pairs, so an odd last column of a pass goes through the gemv instead of
/// a copy of itself: three columns cost a two-column pass and a gemv (in L2 on a Zen 4,
/// 54 + 30 us against 100 us for a padded pair of pairs).
fn tile_passes<P: Path, B: RowPairBlock>(
    g: Gemm<'_, B, BlockQ8_0Quad>,
    mut pass: impl FnMut(&mut Gemm<'_, B, BlockQ8_0Quad>, &[TileBlock], Range<usize>),
) {
    let nb = g.nb;
    let rows = g.x.len() / nb * ROWS_PER_T2P;
    column_passes(g, gemv::<P, B>, |g, cols, stored| {
        let paired = stored.len() - stored.len() % 2;
        let pairs = stored.start..stored.start + paired;
        // SAFETY: only `P`'s table reaches this, handed out after detecting `P`'s features;
        // every path has AVX2.
        unsafe {
            with_tile(&cols[..paired * nb], nb, paired, |tile| {
                pass(g, tile, pairs)
            })
        };
        if paired < stored.len() {
            let x = g.x;
            gemv::<P, B>(x, nb, &cols[paired * nb..], g.column(stored.end - 1, rows));
        }
    });
}

/// Runs a `q8_0` gemm as passes of up to [`MAX_TILE_COLS`] columns over the weights: a pass of
/// one column through `gemv(x, nb, y, out)`, any other through `pass(g, y, cols)` with the
/// pass's activations `y` (column after column) and its columns `cols` of `g`.
pub(super) fn column_passes<B: RowPairBlock>(
    mut g: Gemm<'_, B, BlockQ8_0Quad>,
    mut gemv: impl FnMut(&[B], usize, &[BlockQ8_0Quad], &mut [f32]),
    mut pass: impl FnMut(&mut Gemm<'_, B, BlockQ8_0Quad>, &[BlockQ8_0Quad], Range<usize>),
) {
    let (x, nb, y, ncols) = (g.x, g.nb, g.y, g.ncols);
    let rows = x.len() / nb * ROWS_PER_T2P;
    for c0 in (0..ncols).step_by(MAX_TILE_COLS) {
        let real = (ncols - c0).min(MAX_TILE_COLS);
        let cols = &y[c0 * nb..(c0 + real) * nb];
        if real == 1 {
            gemv(x, nb, cols, g.column(c0, rows));
        } else {
            pass(&mut g, cols, c0..c0 + real);
        }
    }
}

/// One pass of the gemm over all row groups on a tile's operands, those of `cols` stored.
struct GemmTile<'a, 'g, B> {
    g: &'a mut Gemm<'g, B, BlockQ8_0Quad>,
    tile: &'a [TileBlock],
    cols: std::ops::Range<usize>,
}

impl<B: RowPairBlock> TilePass for GemmTile<'_, '_, B> {
    fn pairs(&self) -> usize {
        self.cols.len().div_ceil(2)
    }

    /// `2 * NP` columns (those of `cols` stored) over all row groups, a [`tile_block`] per
    /// block; the two halves `q` are written out so that the float fold of each column pair
    /// stays in registers.
    #[inline(always)]
    unsafe fn pass<D: DotStep, const NP: usize>(self) {
        let GemmTile { g, tile, cols } = self;
        let (x, nb) = (g.x, g.nb);
        for (grp, group) in x.chunks_exact(nb).enumerate() {
            // SAFETY: the caller guarantees `D`'s features, which include AVX2 and F16C
            // (this and the unsafe blocks below).
            let mut acc = unsafe { [_mm256_setzero_ps(); NP] };
            for (i, (blk, tb)) in group.iter().zip(tile).enumerate() {
                prefetch::gemm_block(x, nb, grp, i);
                // SAFETY: as above.
                unsafe { tile_block::<D, B, NP>(&mut acc, blk, tb) };
            }
            // SAFETY: as above.
            unsafe { store_column_pairs(g, cols.clone(), grp, &acc) };
        }
    }
}

/// One block of a [`GemmTile`] for its `NP` column pairs: per word pair `q`, both row pairs
/// are decoded once and serve every column.
///
/// (An AVX2 function rather than part of the `#[inline(always)]` loop: LLVM inlines it into the
/// path's entry point with its AVX2 operations already in place, which keeps the `hadd` of the
/// dot step and the lane permutes after it as single instructions; only the dot step's own
/// instructions wait for the entry point's features.)
///
/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn tile_block<D: DotStep, B: RowPairBlock, const NP: usize>(
    acc: &mut [__m256; NP],
    blk: &B,
    tb: &TileBlock,
) {
    // [c: r0..r3 | c': r0..r3] products `d_j * i_j` of sub-blocks 2q, 2q + 1.
    let half = |q: usize, cp: usize, u: &[[__m256i; 4]; 2]| {
        let m: [__m256i; 2] = std::array::from_fn(|h| {
            let c = 2 * cp + h;
            // SAFETY: the caller guarantees `D`'s features.
            let w = unsafe { D::slots_dot(u, &tb.ops[c][q]) };
            _mm256_add_epi32(w, tb.neg[c][q])
        });
        let d = &tb.d[cp];
        let lo = _mm256_permute2x128_si256::<0x20>(m[0], m[1]);
        let hi = _mm256_permute2x128_si256::<0x31>(m[0], m[1]);
        (
            _mm256_mul_ps(d[2 * q], _mm256_cvtepi32_ps(lo)),
            _mm256_mul_ps(d[2 * q + 1], _mm256_cvtepi32_ps(hi)),
        )
    };
    let u0 = decode_pair(blk, 0);
    let s: [__m256; NP] = std::array::from_fn(|cp| {
        let (p0, p1) = half(0, cp, &u0);
        _mm256_add_ps(p0, p1)
    });
    let u1 = decode_pair(blk, 1);
    for (cp, (acc, s01)) in acc.iter_mut().zip(s).enumerate() {
        let (p2, p3) = half(1, cp, &u1);
        *acc = fold_q8_0(
            B::HALVES,
            *acc,
            [s01, p2, p3],
            |h| scales_twice(blk.scales(h)),
            |a, b| _mm256_add_ps(a, b),
            |a, b| _mm256_mul_ps(a, b),
        );
    }
}

/// The unit-scale gemm of path `P` ([`Path::gemm_unit`]): the passes of [`gemm`], but each
/// column's integer sums are collected over all blocks of a row group (two dot steps and two
/// adds per block and column, no float fold) and converted once per row group.
pub(super) fn gemm_unit<P: Path>(g: Gemm<'_, BlockT2p, BlockQ8_0Quad>) {
    tile_passes::<P, BlockT2p>(g, |g, tile, cols| {
        // SAFETY: only `P`'s table calls this entry, handed out after detecting `P`'s features.
        unsafe { P::run(UnitTile { g, tile, cols }) }
    });
}

/// One pass of the unit-scale gemm over all row groups on a tile's operands, those of `cols`
/// stored.
struct UnitTile<'a, 'g> {
    g: &'a mut Gemm<'g, BlockT2p, BlockQ8_0Quad>,
    tile: &'a [TileBlock],
    cols: std::ops::Range<usize>,
}

impl TilePass for UnitTile<'_, '_> {
    fn pairs(&self) -> usize {
        self.cols.len().div_ceil(2)
    }

    /// `2 * NP` columns (those of `cols` stored) over all row groups, a [`unit_block`] per
    /// block.
    #[inline(always)]
    unsafe fn pass<D: DotStep, const NP: usize>(self) {
        let UnitTile { g, tile, cols } = self;
        let (x, nb) = (g.x, g.nb);
        for (grp, group) in x.chunks_exact(nb).enumerate() {
            // SAFETY: the caller guarantees `D`'s features, which include AVX2 (this and the
            // unsafe blocks below).
            let mut acc = unsafe { [[_mm256_setzero_si256(); 2]; NP] };
            for (i, (blk, tb)) in group.iter().zip(tile).enumerate() {
                prefetch::gemm_block(x, nb, grp, i);
                // SAFETY: as above.
                unsafe { unit_block::<D, NP>(&mut acc, blk, tb) };
            }
            // SAFETY: as above.
            let sums: [__m256; NP] = std::array::from_fn(|cp| unsafe { pair_rows(acc[cp]) });
            // SAFETY: as above.
            unsafe { store_column_pairs(g, cols.clone(), grp, &sums) };
        }
    }
}

/// One block of a [`UnitTile`]: per word pair `q`, both row pairs are decoded once and each
/// column adds its dot step and `-sum` to its sums `[w: r0..r3 | w': r0..r3]` (an AVX2
/// function for the reason [`tile_block`] is one).
///
/// # Safety
/// The CPU must have `D`'s features.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn unit_block<D: DotStep, const NP: usize>(
    acc: &mut [[__m256i; 2]; NP],
    blk: &BlockT2p,
    tb: &TileBlock,
) {
    for q in 0..2 {
        let u = decode_pair(blk, q);
        // Indexed loops over the const bounds keep the sums in registers.
        #[allow(clippy::needless_range_loop)]
        for cp in 0..NP {
            for h in 0..2 {
                let c = 2 * cp + h;
                // SAFETY: the caller guarantees `D`'s features.
                let w = unsafe { D::slots_dot(&u, &tb.ops[c][q]) };
                acc[cp][h] = _mm256_add_epi32(acc[cp][h], _mm256_add_epi32(w, tb.neg[c][q]));
            }
        }
    }
}

/// The rows of two columns, `[c: r0..r3 | c': r0..r3]` as f32, from their sums of words
/// `2q` (low lanes) and `2q + 1` (high lanes).
#[target_feature(enable = "avx2")]
#[inline]
fn pair_rows(acc: [__m256i; 2]) -> __m256 {
    let lo = _mm256_permute2x128_si256::<0x20>(acc[0], acc[1]);
    let hi = _mm256_permute2x128_si256::<0x31>(acc[0], acc[1]);
    _mm256_cvtepi32_ps(_mm256_add_epi32(lo, hi))
}
