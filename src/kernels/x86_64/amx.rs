//! The AMX path: the AVX-512 VNNI path with its `q8_0`, `q8_K` and unit-scale gemms on AMX
//! tiles (Intel Xeon since Sapphire Rapids).
//!
//! One `tdpbusd` multiplies a tile of 16 rows x `K` unsigned bytes by a tile of `K / 4` rows x
//! 16 columns x 4 signed bytes into 16 x 16 int32 sums, four products per sum and step, the
//! `vpdpbusd` of the other paths on a whole tile. The weights go in as their plain codes
//! `u = w + 1` (0..3, unsigned, as the tiles want them) and `sum(y)` comes off once per sum, as
//! on every other path, so every integer sum is exact (`|sum| <= 32 * 3 * 128` per `q8_0`
//! sub-block).
//!
//! **Layouts.** Both operands are staged once per call, in the order the tiles read them:
//!
//! * [`RowTileBlock`]: one T2P block of 16 rows (four row groups) as `a[r][k]`, row `r`'s 128
//!   codes in weight order, and the rows' scales as f32. A tile of `q8_0` sub-block `j` is
//!   `a[..][32j..32j + 32]` (stride 128); the decode is one broadcast, one variable shift and
//!   one AND per T2P word, and one two-source `vpermt2q` per 64 codes of a row: a row pair's
//!   two neighbouring words give each of its rows 64 codes, one 64-byte store ([`stage_rows`]).
//! * [`ColumnTileBlock`]: one activation block of 16 columns as `q[kk][4n + i]` = column `n`'s
//!   value `4kk + i`, the layout `tdpbusd` wants for its second operand, with the columns'
//!   scales and `-sum` per sub-block side by side; staged by vector shuffles
//!   ([`TileActivations`]: 16 x 16 word transposes of `q8_0` columns, word permutes of `q8_K x4`
//!   quads).
//!
//! **The `q8_0` gemm.** The oracle needs the exact sum of every 32-weight sub-block (each has its
//! own activation scale), so a block takes four `tdpbusd` of `K = 32` into four result tiles,
//! which go back to memory once per block; the float fold then runs on 16 columns at once, one
//! zmm per row: `P_j = d_j * f32(i_j)`, then the shared [`fold_q8_0`], each step a separately
//! rounded `vmulps` / `vaddps` in the oracle's order. So the result is bit-identical to the
//! scalar oracle. The fold and the four tile stores a block, not the multiplies, bound this
//! kernel.
//!
//! **The `q8_K` gemm** needs one sum per block (one activation scale per 256 values): two
//! `tdpbusd` of `K = 64` into one result tile, one store, one fold `acc + (d_w * d_y) * isum`.
//!
//! **The unit-scale gemm** (BitNet) needs only the row's integer sum: two `tdpbusd` of
//! `K = 64` per block accumulate in two tiles over the whole row, stored once at the end.
//!
//! One driver runs every kind ([`gemm_tiles`] over a [`TileGemm`]). Column tiles are taken in
//! groups whose operands stay in L2 ([`COLUMN_GROUP_BYTES`]); every group decodes the weights
//! again. Below [`MIN_COLUMNS`] columns the padded tiles lose to the
//! AVX-512 VNNI path's kernels ([`super::zmm`], [`super::q8k`]), which run instead.
//!
//! Linux hands a process the tile state only on request (`arch_prctl`), which
//! [`crate::kernels::cpu`] makes before it reports AMX; each kernel call loads its tile
//! configuration and releases the tiles when it returns.

use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::Cell;

use bytemuck::{Pod, Zeroable};

use super::vnni::Vpdpbusd;
use super::{HotLoop, Path, q8k, zmm};
use crate::format::{BlockQ8_0Quad, BlockQ8Kx4, BlockT2p, QK_PQ2_0, ROWS_PER_T2P, RowPairBlock};
use crate::kernels::{Gemm, Isa, PerCallBuffer, fold_q8_0};

/// The AMX path (a type only: its kernels are reached through [`Path`]).
pub(super) enum Amx {}

/// Fewest columns the tile kernels take; narrower gemms run the AVX-512 kernels. Measured on
/// a Sapphire Rapids class Xeon, one thread, 4096 x 2048 `q8_0` (tiles against AVX-512):
/// 4 columns 0.3x, 8 0.6x, 12 1.0x, 16 1.2x. With `q8_K` the 1.7B's 8-token forward took 2.37-2.39
/// decodes with tiles from 8 columns against 2.24-2.27 from 16.
pub(in crate::kernels) const MIN_COLUMNS: usize = 16;

/// Rows and columns of a result tile.
const TILE: usize = 16;

/// L2 bytes the column operands of one group of column tiles may take.
const COLUMN_GROUP_BYTES: usize = 1 << 20;

impl Vpdpbusd for Amx {
    #[inline(always)]
    unsafe fn dp(acc: __m256i, u: __m256i, y: __m256i) -> __m256i {
        // SAFETY: the caller guarantees AVX-512 VL and VNNI, which the AMX path requires.
        unsafe { _mm256_dpbusd_epi32(acc, u, y) }
    }
}

impl Path for Amx {
    const ISA: Isa = Isa::Amx;

    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn run<L: HotLoop>(l: L) -> L::Out {
        // SAFETY: the loops need AVX2 and F16C, `dp` AVX-512 VL and VNNI: all enabled here.
        unsafe { l.run::<Self>() }
    }

    fn gemv_q8_0<B: RowPairBlock>(x: &[B], nb: usize, y: &[BlockQ8_0Quad], out: &mut [f32]) {
        // SAFETY: only this path's table calls it, handed out after detecting its features,
        // which include the AVX-512 VNNI path's.
        unsafe { zmm::gemv_q8_0(x, nb, y, out) }
    }

    fn gemm_q8_0<B: RowPairBlock>(g: Gemm<'_, B, BlockQ8_0Quad>) {
        // SAFETY: as for `gemv_q8_0`; the tiles were granted before AMX was reported.
        unsafe {
            match g.ncols >= MIN_COLUMNS {
                true => gemm_tiles::<Q8_0Tiles<B>>(g),
                false => zmm::gemm_q8_0(g),
            }
        }
    }

    fn gemm_unit(g: Gemm<'_, BlockT2p, BlockQ8_0Quad>) {
        // SAFETY: as for `gemm_q8_0`.
        unsafe {
            match g.ncols >= MIN_COLUMNS {
                true => gemm_tiles::<UnitTiles>(g),
                false => zmm::gemm_unit(g),
            }
        }
    }

    fn gemm_q8k(g: Gemm<'_, BlockT2p, BlockQ8Kx4>) {
        match g.ncols >= MIN_COLUMNS {
            // SAFETY: as for `gemm_q8_0`.
            true => unsafe { gemm_tiles::<Q8KTiles>(g) },
            false => q8k::gemm::<Self>(g),
        }
    }
}

/// One T2P block of 16 rows, staged for the tiles: `a[r][k]` is the code `u` of weight `k` of
/// row `r`, `dw[h][r]` the row's scale of half `h` as f32.
#[repr(C, align(64))]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RowTileBlock {
    a: [[u8; QK_PQ2_0]; TILE],
    dw: [[f32; TILE]; 2],
}

/// One activation block of 16 columns, staged for the tiles: `q[kk][4n + i]` is value
/// `4kk + i` of column `n`; `neg[j][n]` its `-sum` of sub-block `j`, `d[j][n]` its scale.
/// Columns past the real ones are zero.
#[repr(C, align(64))]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ColumnTileBlock {
    q: [[i8; 4 * TILE]; QK_PQ2_0 / 4],
    neg: [[i32; TILE]; 4],
    d: [[f32; TILE]; 4],
}

/// The 16 x 16 int32 result tiles of one block's four sub-blocks.
#[repr(C, align(64))]
#[derive(Clone, Copy, Pod, Zeroable)]
struct BlockSums([[[i32; TILE]; TILE]; 4]);

thread_local! {
    static ROWS: Cell<Vec<RowTileBlock>> = const { Cell::new(Vec::new()) };
    static COLUMNS: Cell<Vec<ColumnTileBlock>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` on this thread's buffer `buf` holding `n` zeroed items, its allocation reused from
/// call to call (taken out for the call and put back, as [`crate::kernels::with_per_call_buffer`]).
fn with_zeroed<T: Pod, R>(
    buf: &'static PerCallBuffer<T>,
    n: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    let mut v = buf.take();
    v.clear();
    v.resize(n, T::zeroed());
    let r = f(&mut v);
    buf.set(v);
    r
}

/// The 64-byte tile configuration `ldtilecfg` reads (palette 1).
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    /// Tiles `0..8` as `(rows, bytes per row)`.
    const fn new(tiles: [(u8, u16); 8]) -> Self {
        let mut c = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        };
        let mut t = 0;
        while t < 8 {
            c.rows[t] = tiles[t].0;
            c.colsb[t] = tiles[t].1;
            t += 1;
        }
        c
    }
}

/// `q8_0`: weights of one sub-block in tmm0 and tmm1 (16 rows x 32 codes), activations in tmm2
/// and tmm3 (8 rows x 16 columns x 4 values), the four sub-blocks' sums in tmm4..tmm7.
static CONFIG_Q8_0: TileConfig = TileConfig::new([
    (16, 32),
    (16, 32),
    (8, 64),
    (8, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
]);

/// Unit scales: weights of half a block in tmm0 and tmm1 (16 rows x 64 codes), activations in
/// tmm2 and tmm3 (16 rows x 16 columns x 4 values), the row sums in tmm4 and tmm5.
static CONFIG_UNIT: TileConfig = TileConfig::new([
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (16, 64),
    (0, 0),
    (0, 0),
]);

/// The tiles configured as `cfg` for the time of `f`, released after.
///
/// # Safety
/// The process must hold the tile permission and the CPU must have AMX-TILE.
unsafe fn with_tiles<R>(cfg: &'static TileConfig, f: impl FnOnce() -> R) -> R {
    // SAFETY: `cfg` is a valid 64-byte palette-1 configuration; the caller guarantees AMX.
    unsafe { asm!("ldtilecfg [{0}]", in(reg) cfg, options(nostack, readonly)) };
    let r = f();
    // SAFETY: as above; releasing tiles is always allowed once configured.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
    r
}

/// An activation block type the tiles read: how its columns are staged.
trait TileActivations: Sized {
    /// Stages columns `cols` (at most 16) of `y` (`nb` weight blocks a row) for the tiles,
    /// one [`ColumnTileBlock`] per weight block; the columns past them are zero.
    ///
    /// # Safety
    /// The CPU must have the AMX path's vector features.
    unsafe fn stage_columns(
        y: &[Self],
        nb: usize,
        cols: std::ops::Range<usize>,
        tile: &mut [ColumnTileBlock],
    );
}

/// What a tile gemm leaves to its kind (the `q8_0` fold, the unit-scale sums, the `q8_K`
/// fold): its weights and activations, its tile configuration, and how one 16 x 16 result
/// tile is computed from the staged operands.
trait TileGemm {
    /// The weight blocks.
    type Weights: RowPairBlock;
    /// The activation blocks.
    type Act: TileActivations;
    /// The tile configuration [`TileGemm::result_tile`] runs under.
    const CONFIG: &'static TileConfig;

    /// The 16 x 16 results of a row tile and a column tile, one register per row.
    ///
    /// # Safety
    /// The tiles must be configured as [`TileGemm::CONFIG`].
    unsafe fn result_tile(
        rows: &[RowTileBlock],
        cols: &[ColumnTileBlock],
        sums: &mut [BlockSums; 2],
    ) -> [__m512; TILE];
}

/// The `q8_0` gemm on tiles.
struct Q8_0Tiles<B>(std::marker::PhantomData<B>);

/// The unit-scale gemm on tiles.
enum UnitTiles {}

/// The `q8_K` gemm on tiles.
enum Q8KTiles {}

/// The tile gemm of kind `T`: the columns staged once, then for each group of column tiles
/// whose operands fit in L2 ([`COLUMN_GROUP_BYTES`]) and each row tile, the rows staged once
/// and every result tile of the group computed and stored a column at a time.
///
/// # Safety
/// The CPU must have the AMX path's features and the process the tile permission.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn gemm_tiles<T: TileGemm>(g: Gemm<'_, T::Weights, T::Act>) {
    let (x, nb, y, ncols, out, ld) = g.into_parts();
    let ng = x.len() / nb;
    let col_tiles = ncols.div_ceil(TILE);
    let group = (COLUMN_GROUP_BYTES / (nb * size_of::<ColumnTileBlock>())).max(1);
    with_zeroed(&COLUMNS, col_tiles * nb, |cols| {
        for (t, tile) in cols.chunks_exact_mut(nb).enumerate() {
            // SAFETY: the caller guarantees the AMX path's features.
            unsafe { T::Act::stage_columns(y, nb, t * TILE..(t * TILE + TILE).min(ncols), tile) };
        }
        with_zeroed(&ROWS, nb, |rows| {
            let mut sums = [BlockSums::zeroed(); 2];
            // SAFETY: the caller guarantees AMX and the permission.
            unsafe {
                with_tiles(T::CONFIG, || {
                    for t0 in (0..col_tiles).step_by(group) {
                        for g0 in (0..ng).step_by(TILE / ROWS_PER_T2P) {
                            let groups = g0..(g0 + TILE / ROWS_PER_T2P).min(ng);
                            stage_rows(x, nb, groups.clone(), rows);
                            for t in t0..(t0 + group).min(col_tiles) {
                                let tile = &cols[t * nb..(t + 1) * nb];
                                let acc = T::result_tile(rows, tile, &mut sums);
                                let rows_real = ROWS_PER_T2P * groups.len();
                                let cols_real = TILE.min(ncols - t * TILE);
                                for (c, col) in transpose(acc).iter().enumerate().take(cols_real) {
                                    let at = (t * TILE + c) * ld + ROWS_PER_T2P * g0;
                                    store_rows(&mut out[at..at + rows_real], *col);
                                }
                            }
                        }
                    }
                })
            }
        })
    })
}

/// The 16 x 16 transpose of a result tile, rows of registers to columns: two rounds of
/// in-lane unpacks, then two of 128-bit lane shuffles (64 shuffles; the columns of the output
/// lie `ld` apart, so storing the rows' values one by one would cost 256 scattered stores).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn transpose(r: [__m512; TILE]) -> [__m512; TILE] {
    // t[2i]: per lane L, elements 4L, 4L + 1 of rows 2i, 2i + 1 interleaved; t[2i + 1]: 4L + 2, 4L + 3.
    let t: [__m512; TILE] = std::array::from_fn(|n| {
        let (a, b) = (r[n & !1], r[n | 1]);
        match n % 2 {
            0 => _mm512_unpacklo_ps(a, b),
            _ => _mm512_unpackhi_ps(a, b),
        }
    });
    // u[4j + e]: per lane L, element 4L + e of rows 4j .. 4j + 4.
    let u: [__m512; TILE] = std::array::from_fn(|n| {
        let (j, e) = (n / 4, n % 4);
        let (a, b) = (
            _mm512_castps_pd(t[4 * j + e / 2]),
            _mm512_castps_pd(t[4 * j + 2 + e / 2]),
        );
        _mm512_castpd_ps(match e % 2 {
            0 => _mm512_unpacklo_pd(a, b),
            _ => _mm512_unpackhi_pd(a, b),
        })
    });
    // Column 4L + e is lane L of u[e], u[4 + e], u[8 + e], u[12 + e].
    std::array::from_fn(|c| {
        let (l, e) = (c / 4, c % 4);
        let (v, w) = match l / 2 {
            0 => (
                _mm512_shuffle_f32x4::<0x44>(u[e], u[4 + e]),
                _mm512_shuffle_f32x4::<0x44>(u[8 + e], u[12 + e]),
            ),
            _ => (
                _mm512_shuffle_f32x4::<0xEE>(u[e], u[4 + e]),
                _mm512_shuffle_f32x4::<0xEE>(u[8 + e], u[12 + e]),
            ),
        };
        match l % 2 {
            0 => _mm512_shuffle_f32x4::<0x88>(v, w),
            _ => _mm512_shuffle_f32x4::<0xDD>(v, w),
        }
    })
}

/// Stores the first `out.len()` (at most 16) values of a column register.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn store_rows(out: &mut [f32], col: __m512) {
    let mask = (1u32 << out.len().min(TILE)) - 1;
    // SAFETY: the masked store writes only the first `out.len()` floats, inside `out`.
    unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr(), mask as u16, col) };
}

/// `q8_0` activations: a column's 32 words of four values are a row of two 16 x 16 word
/// matrices, whose [`transpose`]s are the rows `tdpbusd` reads; each sub-block's `-sum` and
/// scale go beside them.
impl TileActivations for BlockQ8_0Quad {
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn stage_columns(
        y: &[BlockQ8_0Quad],
        nb: usize,
        cols: std::ops::Range<usize>,
        tile: &mut [ColumnTileBlock],
    ) {
        for (b, t) in tile.iter_mut().enumerate() {
            for half in 0..2 {
                let words: [__m512; TILE] =
                    std::array::from_fn(|n| match cols.start + n < cols.end {
                        // SAFETY: reads 64 of the 128 bytes of the block's `qs`, unaligned.
                        true => unsafe {
                            _mm512_loadu_ps(
                                y[(cols.start + n) * nb + b].qs[64 * half..].as_ptr().cast(),
                            )
                        },
                        false => _mm512_setzero_ps(),
                    });
                for (row, w) in t.q[16 * half..].iter_mut().zip(transpose(words)) {
                    // SAFETY: writes the 64 bytes of `row`, aligned by its block.
                    unsafe { _mm512_store_ps(row.as_mut_ptr().cast(), w) };
                }
            }
            for (n, col) in cols.clone().enumerate() {
                let yb = &y[col * nb + b];
                for j in 0..4 {
                    t.neg[j][n] = -yb.sums[j];
                    t.d[j][n] = yb.d[j];
                }
            }
        }
    }
}

/// `q8_K x4` activations (`nb / 2` blocks a column quad): weight block `b` meets half `b % 2`
/// of block `b / 2`, whose `-sum` and scale go to sub-block 0's place. An 8-value chunk of a
/// quad holds its columns' two words side by side, so the four quads' chunks, in two registers,
/// give rows `2j` and `2j + 1` as their even and odd words.
impl TileActivations for BlockQ8Kx4 {
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn stage_columns(
        y: &[BlockQ8Kx4],
        nb: usize,
        cols: std::ops::Range<usize>,
        tile: &mut [ColumnTileBlock],
    ) {
        let per_quad = nb / 2;
        let live = ((1u32 << cols.len()) - 1) as u16;
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        let quads = cols.start / 4..cols.end.div_ceil(4);
        for (b, t) in tile.iter_mut().enumerate() {
            let h = b % 2;
            for j in 0..QK_PQ2_0 / 8 {
                let chunk = (QK_PQ2_0 / 8) * h + j;
                let at = |i: usize| match quads.start + i < quads.end {
                    // SAFETY: reads the 32 bytes of chunk `chunk` (four columns of 8 values) of one
                    // block's `qs`, unaligned.
                    true => unsafe {
                        let yb = &y[(quads.start + i) * per_quad + b / 2];
                        _mm256_loadu_si256(yb.qs[32 * chunk..].as_ptr().cast())
                    },
                    false => _mm256_setzero_si256(),
                };
                let lo = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(at(0)), at(1));
                let hi = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(at(2)), at(3));
                for (e, idx) in [even, odd].into_iter().enumerate() {
                    let row = _mm512_maskz_permutex2var_epi32(live, lo, idx, hi);
                    // SAFETY: writes the 64 bytes of one row of `t.q`, aligned by its block.
                    unsafe { _mm512_store_si512(t.q[2 * j + e].as_mut_ptr().cast(), row) };
                }
            }
            for (n, col) in cols.clone().enumerate() {
                let yb = &y[col / 4 * per_quad + b / 2];
                t.neg[0][n] = -yb.half_sum(col % 4, h);
                t.d[0][n] = yb.d[col % 4];
            }
        }
    }
}

/// Stages row groups `groups` (at most four) of `x` for the tiles, block by block; the rows
/// past them are zero codes with zero scales.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn stage_rows<B: RowPairBlock>(
    x: &[B],
    nb: usize,
    groups: std::ops::Range<usize>,
    rows: &mut [RowTileBlock],
) {
    // Lane `s` of a broadcast word shifted right by `2s` bits: slot `s` in the low bits.
    let shifts = _mm512_setr_epi64(
        0,
        0,
        0x0002_0002_0002_0002,
        0x0002_0002_0002_0002,
        0x0004_0004_0004_0004,
        0x0004_0004_0004_0004,
        0x0006_0006_0006_0006,
        0x0006_0006_0006_0006,
    );
    let low2 = _mm512_set1_epi8(3);
    // Lane `s` of a decoded word holds 8 codes of the pair's first row (qword `2s`), then 8 of
    // its second (`2s + 1`): two words' even qwords are the first row's 64 codes of both, in
    // slot (weight) order, their odd ones the second row's.
    let first = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
    let second = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    let decode = |word: &[u8; 16]| {
        // SAFETY: reads the 16 bytes of `word`, unaligned.
        let w = unsafe { _mm_loadu_si128(word.as_ptr().cast()) };
        _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i32x4(w), shifts), low2)
    };
    let real = groups.len();
    for (i, grp) in groups.enumerate() {
        for (blk, rb) in x[grp * nb..(grp + 1) * nb].iter().zip(rows.iter_mut()) {
            for (p, pair) in blk.words().iter().enumerate() {
                let r = ROWS_PER_T2P * i + 2 * p;
                for (h, words) in pair.chunks_exact(2).enumerate() {
                    let (a, b) = (decode(&words[0]), decode(&words[1]));
                    for (row, idx) in [(r, first), (r + 1, second)] {
                        let codes = _mm512_permutex2var_epi64(a, idx, b);
                        // SAFETY: writes 64 bytes inside the 128-byte row `row`, unaligned.
                        unsafe {
                            _mm512_storeu_si512(rb.a[row][64 * h..].as_mut_ptr().cast(), codes)
                        };
                    }
                }
            }
            for h in 0..B::HALVES {
                let d = blk.scales(h);
                let at: &mut [f32; 4] = (&mut rb.dw[h][ROWS_PER_T2P * i..][..4])
                    .try_into()
                    .expect("4 rows");
                // SAFETY: reads the 8 bytes of `d` and writes the 16 of `at`, unaligned (F16C
                // conversion is exact).
                unsafe {
                    _mm_storeu_ps(
                        at.as_mut_ptr(),
                        _mm_cvtph_ps(_mm_loadl_epi64(d.as_ptr().cast())),
                    )
                };
            }
        }
    }
    for rb in rows.iter_mut() {
        for r in ROWS_PER_T2P * real..TILE {
            rb.a[r] = [0; QK_PQ2_0];
            rb.dw[0][r] = 0.0;
            rb.dw[1][r] = 0.0;
        }
    }
}

/// The four sub-blocks' exact integer sums `dot(u, y) - sum(y)` of one block into `s`: each
/// result tile starts as the columns' `-sum(y)` in every row (a tile load of stride 0), which
/// spares the fold an integer add per row and sub-block.
///
/// # Safety
/// The tiles must be configured as [`CONFIG_Q8_0`].
#[inline(always)]
unsafe fn block_sums(rb: &RowTileBlock, cb: &ColumnTileBlock, s: &mut BlockSums) {
    // SAFETY: the caller configured the tiles; every tile load reads inside `rb.a` (16 rows
    // of 32 bytes at stride 128), `cb.q` (8 rows of 64 bytes) or `cb.neg` (one row of 64 bytes
    // 16 times), every store writes inside `s` (16 rows of 64 bytes at stride 64).
    unsafe {
        asm!(
            "tileloadd tmm0, [{a} + {sa}*1]",
            "tileloadd tmm2, [{q} + {sq}*1]",
            "tileloadd tmm4, [{n} + {zero}*1 + 0]",
            "tdpbusd tmm4, tmm0, tmm2",
            "tileloadd tmm1, [{a} + {sa}*1 + 32]",
            "tileloadd tmm3, [{q} + {sq}*1 + 512]",
            "tileloadd tmm5, [{n} + {zero}*1 + 64]",
            "tdpbusd tmm5, tmm1, tmm3",
            "tileloadd tmm0, [{a} + {sa}*1 + 64]",
            "tileloadd tmm2, [{q} + {sq}*1 + 1024]",
            "tileloadd tmm6, [{n} + {zero}*1 + 128]",
            "tdpbusd tmm6, tmm0, tmm2",
            "tileloadd tmm1, [{a} + {sa}*1 + 96]",
            "tileloadd tmm3, [{q} + {sq}*1 + 1536]",
            "tileloadd tmm7, [{n} + {zero}*1 + 192]",
            "tdpbusd tmm7, tmm1, tmm3",
            "tilestored [{s} + {ss}*1], tmm4",
            "tilestored [{s} + {ss}*1 + 1024], tmm5",
            "tilestored [{s} + {ss}*1 + 2048], tmm6",
            "tilestored [{s} + {ss}*1 + 3072], tmm7",
            a = in(reg) rb.a.as_ptr(),
            sa = in(reg) QK_PQ2_0,
            q = in(reg) cb.q.as_ptr(),
            sq = in(reg) 4 * TILE,
            s = in(reg) s.0.as_mut_ptr(),
            ss = in(reg) 4 * TILE,
            n = in(reg) cb.neg.as_ptr(),
            zero = in(reg) 0usize,
            options(nostack),
        );
    }
}

/// Blocks `0..blocks` through the tile unit (`issue`) and the vector units (`fold`), block
/// `b + 1`'s tiles issued before block `b`'s fold, into the other of the two result buffers
/// `sums`, so that the tile unit works while the vector units fold.
#[inline(always)]
fn pipelined(
    blocks: usize,
    sums: &mut [BlockSums; 2],
    mut issue: impl FnMut(usize, &mut BlockSums),
    mut fold: impl FnMut(usize, &BlockSums),
) {
    if blocks == 0 {
        return;
    }
    issue(0, &mut sums[0]);
    for b in 0..blocks {
        let [this, next] = match b % 2 {
            0 => sums.each_mut(),
            _ => {
                let [a, c] = sums.each_mut();
                [c, a]
            }
        };
        if b + 1 < blocks {
            issue(b + 1, next);
        }
        fold(b, this);
    }
}

/// A result tile of the `q8_0` gemm, a register per row (16 columns): per block the four
/// sub-blocks' sums ([`block_sums`]) and the shared fold, [`pipelined`].
impl<B: RowPairBlock> TileGemm for Q8_0Tiles<B> {
    type Weights = B;
    type Act = BlockQ8_0Quad;
    const CONFIG: &'static TileConfig = &CONFIG_Q8_0;

    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn result_tile(
        rows: &[RowTileBlock],
        cols: &[ColumnTileBlock],
        sums: &mut [BlockSums; 2],
    ) -> [__m512; TILE] {
        let mut acc = [_mm512_setzero_ps(); TILE];
        // SAFETY: each load reads 16 values of a `[_; 16]` array, aligned by its block.
        let load_i = |v: &[i32; TILE]| unsafe { _mm512_load_si512(v.as_ptr().cast()) };
        // SAFETY: as `load_i`.
        let load_f = |v: &[f32; TILE]| unsafe { _mm512_load_ps(v.as_ptr()) };
        pipelined(
            rows.len().min(cols.len()),
            sums,
            // SAFETY: the caller configured the tiles.
            |b, s| unsafe { block_sums(&rows[b], &cols[b], s) },
            |b, this| {
                let d = cols[b].d.each_ref().map(load_f);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let p: [__m512; 4] = std::array::from_fn(|j| {
                        _mm512_mul_ps(d[j], _mm512_cvtepi32_ps(load_i(&this.0[j][r])))
                    });
                    *acc = fold_q8_0(
                        B::HALVES,
                        *acc,
                        [_mm512_add_ps(p[0], p[1]), p[2], p[3]],
                        |h| _mm512_set1_ps(rows[b].dw[h][r]),
                        |a, b| _mm512_add_ps(a, b),
                        |a, b| _mm512_mul_ps(a, b),
                    );
                }
            },
        );
        acc
    }
}

/// The exact integer sums `dot(u, y) - sum(y)` of one block into `s`, in result tile
/// `tmm4` (`ODD` false) or `tmm5` (`ODD` true), so that the next block's tiles need not wait
/// for this block's store. The result tile starts as the columns' `-sum(y)` in every row (a
/// tile load of stride 0).
///
/// # Safety
/// The tiles must be configured as [`CONFIG_UNIT`].
#[inline(always)]
unsafe fn block_sum_q8k<const ODD: bool>(
    rb: &RowTileBlock,
    cb: &ColumnTileBlock,
    s: &mut [[i32; TILE]; TILE],
) {
    macro_rules! sums_into {
        ($tmm:literal) => {
            // SAFETY: the caller configured the tiles; the loads read inside `rb.a` (16 rows of
            // 64 bytes at stride 128), `cb.q` (16 rows of 64 bytes) and `cb.neg[0]` (one row of
            // 64 bytes 16 times), the store writes the 16 rows of 64 bytes of `s`.
            unsafe {
                asm!(
                    concat!("tileloadd ", $tmm, ", [{n} + {zero}*1]"),
                    "tileloadd tmm0, [{a} + {sa}*1]",
                    "tileloadd tmm2, [{q} + {sq}*1]",
                    concat!("tdpbusd ", $tmm, ", tmm0, tmm2"),
                    "tileloadd tmm1, [{a} + {sa}*1 + 64]",
                    "tileloadd tmm3, [{q} + {sq}*1 + 1024]",
                    concat!("tdpbusd ", $tmm, ", tmm1, tmm3"),
                    concat!("tilestored [{s} + {ss}*1], ", $tmm),
                    a = in(reg) rb.a.as_ptr(),
                    sa = in(reg) QK_PQ2_0,
                    q = in(reg) cb.q.as_ptr(),
                    sq = in(reg) 4 * TILE,
                    n = in(reg) cb.neg.as_ptr(),
                    zero = in(reg) 0usize,
                    s = in(reg) s.as_mut_ptr(),
                    ss = in(reg) 4 * TILE,
                    options(nostack),
                )
            }
        };
    }
    match ODD {
        false => sums_into!("tmm4"),
        true => sums_into!("tmm5"),
    }
}

/// A result tile of the `q8_K` gemm, a register per row: per block the exact sum of its 128
/// weights ([`block_sum_q8k`]), then the oracle's `acc + (d_w * d_y) * isum`, two separately
/// rounded steps (`vmulps`, `vaddps`) on 16 columns at once, [`pipelined`].
impl TileGemm for Q8KTiles {
    type Weights = BlockT2p;
    type Act = BlockQ8Kx4;
    const CONFIG: &'static TileConfig = &CONFIG_UNIT;

    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn result_tile(
        rows: &[RowTileBlock],
        cols: &[ColumnTileBlock],
        sums: &mut [BlockSums; 2],
    ) -> [__m512; TILE] {
        let mut acc = [_mm512_setzero_ps(); TILE];
        pipelined(
            rows.len().min(cols.len()),
            sums,
            // SAFETY: the caller configured the tiles; consecutive blocks' sums go to tmm4 and
            // tmm5 in turn.
            |b, s| unsafe {
                match b % 2 {
                    0 => block_sum_q8k::<false>(&rows[b], &cols[b], &mut s.0[0]),
                    _ => block_sum_q8k::<true>(&rows[b], &cols[b], &mut s.0[0]),
                }
            },
            |b, this| {
                // SAFETY: reads the 16 scales of `d[0]`, aligned by its block.
                let d_y = unsafe { _mm512_load_ps(cols[b].d[0].as_ptr()) };
                for (r, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: reads the 16 sums of one row of `this`, aligned by its block.
                    let isum = unsafe { _mm512_load_si512(this.0[0][r].as_ptr().cast()) };
                    let d = _mm512_mul_ps(_mm512_set1_ps(rows[b].dw[0][r]), d_y);
                    *acc = _mm512_add_ps(*acc, _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
                }
            },
        );
        acc
    }
}

/// A result tile of the unit-scale gemm, the exact integer sums as f32, a register per row:
/// two `tdpbusd` of `K = 64` a block, accumulated over the whole row in two tiles.
impl TileGemm for UnitTiles {
    type Weights = BlockT2p;
    type Act = BlockQ8_0Quad;
    const CONFIG: &'static TileConfig = &CONFIG_UNIT;

    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn result_tile(
        rows: &[RowTileBlock],
        cols: &[ColumnTileBlock],
        _: &mut [BlockSums; 2],
    ) -> [__m512; TILE] {
        // SAFETY: the tiles are configured as `CONFIG_UNIT` (the caller).
        unsafe { asm!("tilezero tmm4", "tilezero tmm5", options(nostack, nomem)) };
        let mut neg = _mm512_setzero_si512();
        for (rb, cb) in rows.iter().zip(cols) {
            // SAFETY: as in `Q8_0Tiles`, with 16 rows of 64 bytes for both operands.
            unsafe {
                asm!(
                    "tileloadd tmm0, [{a} + {sa}*1]",
                    "tileloadd tmm2, [{q} + {sq}*1]",
                    "tdpbusd tmm4, tmm0, tmm2",
                    "tileloadd tmm1, [{a} + {sa}*1 + 64]",
                    "tileloadd tmm3, [{q} + {sq}*1 + 1024]",
                    "tdpbusd tmm5, tmm1, tmm3",
                    a = in(reg) rb.a.as_ptr(),
                    sa = in(reg) QK_PQ2_0,
                    q = in(reg) cb.q.as_ptr(),
                    sq = in(reg) 4 * TILE,
                    options(nostack, readonly),
                );
            }
            for n in &cb.neg {
                // SAFETY: reads the 16 values of `n`, aligned by its block.
                neg = _mm512_add_epi32(neg, unsafe { _mm512_load_si512(n.as_ptr().cast()) });
            }
        }
        let mut halves = [[[0i32; TILE]; TILE]; 2];
        // SAFETY: each store writes the 16 rows of 64 bytes of one `halves[h]`.
        unsafe {
            asm!(
                "tilestored [{s} + {ss}*1], tmm4",
                "tilestored [{s} + {ss}*1 + 1024], tmm5",
                s = in(reg) halves.as_mut_ptr(),
                ss = in(reg) 4 * TILE,
                options(nostack),
            );
        }
        std::array::from_fn(|r| {
            // SAFETY: the loads read the 16 values of one row of each of `halves`, unaligned.
            let i = unsafe {
                _mm512_add_epi32(
                    _mm512_loadu_si512(halves[0][r].as_ptr().cast()),
                    _mm512_loadu_si512(halves[1][r].as_ptr().cast()),
                )
            };
            _mm512_cvtepi32_ps(_mm512_add_epi32(i, neg))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BlockQ8K, BlockT2pG64, interleave_q8k_x4};
    use crate::kernels::x86_64::zmm::tests::{column, weights};
    use crate::kernels::{Kernels, scalar};
    use crate::test_rng::XorShift as Rng;

    /// The AMX kernels, where this CPU and Linux allow them (`T2P_EXPECT_ISAS` makes a
    /// machine with the flags fail where the path is missing).
    fn amx() -> Option<&'static Kernels> {
        Kernels::for_isa(Isa::Amx).ok()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|f| f.to_bits()).collect()
    }

    /// `kernel` against `oracle` on the same operands, bit for bit, with outputs of stride `ld`
    /// that start as NaN (a gap past the rows must stay NaN in both).
    fn assert_same<W, A>(
        (x, nb): (&[W], usize),
        (y, ncols): (&[A], usize),
        ld: usize,
        oracle: impl Fn(Gemm<'_, W, A>),
        kernel: impl Fn(Gemm<'_, W, A>),
        what: &str,
    ) {
        let run = |f: &dyn Fn(Gemm<'_, W, A>)| {
            let mut out = vec![f32::NAN; ld * ncols];
            f(Gemm {
                x,
                nb,
                y,
                ncols,
                out: &mut out[..],
                ld,
            });
            bits(&out)
        };
        assert_eq!(run(&kernel), run(&oracle), "{what}");
    }

    /// `ncols` columns of `nb` blocks, the patterns of [`column`] shifted per column.
    fn columns(ncols: usize, nb: usize, rng: &mut Rng) -> Vec<BlockQ8_0Quad> {
        (0..ncols).flat_map(|_| column(nb, rng)).collect()
    }

    /// The tile gemm against the oracle, bit for bit, on shapes that leave short row tiles
    /// (1 to 3 row groups past a multiple of four) and short column tiles, with an output
    /// stride past the rows (whose gap must stay untouched).
    fn q8_0_matches_the_oracle<B: RowPairBlock>() {
        let Some(k) = amx() else { return };
        let mut rng = Rng::new(0xa3c5);
        for (groups, nb, ncols) in [
            (1, 1, 16),
            (3, 2, 17),
            (4, 3, 31),
            (5, 2, 32),
            (9, 1, 33),
            (6, 4, 47),
        ] {
            let mut x = weights::<B>(groups, nb, &mut rng);
            // Code 3 (+2) in every weight of the first block, met by -128 and +127.
            for r in 0..ROWS_PER_T2P {
                let d: Vec<u16> = (0..B::HALVES).map(|h| x[0].scales(h)[r]).collect();
                x[0].set_row(r, &[3; QK_PQ2_0], &d);
            }
            let y = columns(ncols, nb, &mut rng);
            assert_same(
                (&x, nb),
                (&y, ncols),
                ROWS_PER_T2P * groups + 3,
                scalar::gemm_q8_0,
                |g| k.gemm_q8_0(g),
                &format!("{} {groups}x{nb} x {ncols}", B::NAME),
            );
        }
    }

    #[test]
    fn q8_0_tiles_match_the_oracle_group_128() {
        q8_0_matches_the_oracle::<BlockT2p>();
    }

    #[test]
    fn q8_0_tiles_match_the_oracle_group_64() {
        q8_0_matches_the_oracle::<BlockT2pG64>();
    }

    /// `q8_K`: the tile gemm against the oracle, bit for bit, on shapes with short row and
    /// column tiles (and a last column quad short of four), code 3 against -128 and +127 in the
    /// first blocks, an all-zero activation block, and an output stride past the rows.
    #[test]
    fn q8k_tiles_match_the_oracle() {
        let Some(k) = amx() else { return };
        let mut rng = Rng::new(0x5eed);
        for (groups, nb, ncols) in [
            (1, 2, 16usize),
            (3, 4, 17),
            (5, 2, 31),
            (9, 6, 33),
            (4, 2, 48),
        ] {
            let mut x = weights::<BlockT2p>(groups, nb, &mut rng);
            for r in 0..ROWS_PER_T2P {
                let d = [x[0].d[r]];
                x[0].set_row(r, &[3; QK_PQ2_0], &d);
            }
            let quads = ncols.div_ceil(4);
            let y: Vec<BlockQ8Kx4> = (0..quads * nb / 2)
                .map(|i| {
                    let cols: [BlockQ8K; 4] = std::array::from_fn(|c| {
                        let qs = std::array::from_fn(|_| match (i % (nb / 2), c) {
                            (0, 0) => -128,
                            (0, 1) => 127,
                            (1, 2) => 0,
                            _ => rng.next() as i8,
                        });
                        BlockQ8K::from_qs(
                            qs,
                            0.002 * (1 + i + c) as f32 + (rng.next() % 1000) as f32 * 1e-6,
                        )
                    });
                    interleave_q8k_x4([&cols[0], &cols[1], &cols[2], &cols[3]])
                })
                .collect();
            assert_same(
                (&x, nb),
                (&y, ncols),
                ROWS_PER_T2P * groups + 3,
                scalar::gemm,
                |g| k.gemm(g),
                &format!("{groups}x{nb} x {ncols}"),
            );
        }
    }

    /// Unit scales: the exact integer sums over long rows (every block's code 3 against -128
    /// in the first column), several column groups (`nb` large enough for one tile a group).
    #[test]
    fn unit_tiles_match_the_oracle() {
        let Some(k) = amx() else { return };
        let mut rng = Rng::new(0x1f2e);
        let big = COLUMN_GROUP_BYTES / size_of::<ColumnTileBlock>() + 1;
        for (groups, nb, ncols) in [(1, 2, 16), (5, 8, 35), (2, big, 33)] {
            let mut x = weights::<BlockT2p>(groups, nb, &mut rng);
            let one = crate::format::f32_to_f16(1.0);
            for (i, blk) in x.iter_mut().enumerate() {
                for r in 0..ROWS_PER_T2P {
                    let codes = if i % nb == 0 {
                        [3; QK_PQ2_0]
                    } else {
                        blk.unpack()[r]
                    };
                    blk.set_row(r, &codes, &[one]);
                }
            }
            let mut y = columns(ncols, nb, &mut rng);
            for (i, yb) in y.iter_mut().enumerate() {
                let qs = if i < nb { [-128; QK_PQ2_0] } else { yb.qs };
                *yb = BlockQ8_0Quad::from_qs(qs, [1.0; 4]);
            }
            assert_same(
                (&x, nb),
                (&y, ncols),
                ROWS_PER_T2P * groups,
                scalar::gemm_q8_0,
                |g| k.gemm_unit(g),
                &format!("{groups}x{nb} x {ncols}"),
            );
        }
    }
}
