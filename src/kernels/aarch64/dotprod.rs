//! NEON + dotprod: the SDOT gemv (slot masks, dup8, eight accumulators), the SDOT gemm tiles
//! (`q8_K` and `q8_0` activations) and the stock-layout SDOT vec_dot.

use core::arch::aarch64::*;

use super::asm::sdot;
use super::{
    Q8_0Dup, Q8_0x4Dot, accumulate, gemm_local_tiles, gemm_q8_0_x4, gemv_q8_0_dup, load_u8x16,
    mul_lane_f32, per_call_layout, row_scales, slot_scaled, slots, stock, store_f32x4, with_halves,
    with_q8_0_dup, with_q8_0_tiles,
};
use crate::format::{
    BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, ROWS_PER_T2P, RowPairBlock,
};
use crate::kernels::{Gemm, Isa, T2pKernels};

pub(in crate::kernels) static KERNELS: T2pKernels = T2pKernels::portable(
    Isa::NeonDotprod,
    (gemv, gemm),
    (gemv_q8_0, gemm_q8_0),
    (gemv_q8_0, gemm_q8_0),
    vec_dot_stock,
);

/// gemv entry (also the i8mm path's gemv).
pub(super) fn gemv(x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]) {
    // Once per call (amortised over every row group of the call, each of which reads the whole
    // column): the column in the layout the SDOT loop loads without `dup`s.
    with_halves(y, Q8KDup::new, |ys| {
        // SAFETY: this fn is reachable only through the dotprod and i8mm `KERNELS`, which
        // `aarch64::kernels` hands out only after detecting dotprod.
        unsafe { gemv_dotprod(x, nb, ys, out) }
    })
}

fn gemm(g: Gemm<'_, BlockT2p, BlockQ8Kx4>) {
    // Once per call (amortised over every row group of the call): each tile's halves in the
    // layout the SDOT tile loads without `dup`s, `nb` per tile.
    with_halves(g.y, Q8Kx4Dup::new, |tiles| {
        // SAFETY: reachable only through `KERNELS`, handed out only after detecting dotprod.
        unsafe { gemm_dotprod(g.with_activations(tiles)) }
    })
}

/// `q8_0` gemv entry (also the i8mm path's).
pub(super) fn gemv_q8_0<B: RowPairBlock>(x: &[B], nb: usize, y: &[BlockQ8_0Quad], out: &mut [f32]) {
    // Once per call (amortised over every row group of the call, each of which reads the whole
    // column): the column in the layout the SDOT loop loads without `dup`s.
    with_q8_0_dup(y, |ys| {
        // SAFETY: reachable only through the dotprod and i8mm `KERNELS`, handed out only after
        // detecting dotprod.
        unsafe { gemv_q8_0_dotprod(x, nb, ys, out) }
    })
}

/// The `q8_0` SDOT gemv. Per word (= quarter), the four unscaled slots of each row pair meet
/// the dup8 activations in one SDOT chain that starts at `[-s, 0, -s, 0]` (|lane| <=
/// 4 * 2 * 3 * 128 + 4096), so the pairwise add of the two pairs is the exact quarter sum of
/// rows 0..3; the float step is [`gemv_q8_0_dup`]'s.
#[inline(never)]
#[target_feature(enable = "neon,dotprod")]
fn gemv_q8_0_dotprod<B: RowPairBlock>(x: &[B], nb: usize, y: &[Q8_0Dup], out: &mut [f32]) {
    gemv_q8_0_dup(x, nb, y, out, |blk, yb, wd| {
        let pair = |p: usize| {
            let u = slots(load_u8x16(&blk.words()[p][wd]));
            // SAFETY: `start[wd][p]` is four readable i32.
            let mut a = unsafe { vld1q_s32(yb.start[wd][p].as_ptr()) };
            for (s, u) in u.iter().enumerate() {
                // SAFETY: `qs[..]` is 16 readable bytes.
                let yv = unsafe { vld1q_s8(yb.qs[4 * wd + s].as_ptr()) };
                a = sdot(a, *u, yv);
            }
            a
        };
        vpaddq_s32(pair(0), pair(1))
    });
}

/// `q8_0` gemm entry: SDOT tiles of four columns.
fn gemm_q8_0<B: RowPairBlock>(g: Gemm<'_, B, BlockQ8_0Quad>) {
    with_q8_0_tiles(g.y, g.nb, g.ncols, Q8_0x4Dot::new, |tiles| {
        // SAFETY: reachable only through `KERNELS`, handed out only after detecting dotprod.
        unsafe { gemm_q8_0_dotprod(g.with_activations(tiles)) }
    })
}

/// The exact sums `[column c: rows 0..3]` of quarter `wd` of a T2P block (its slots `u`) with
/// the four columns of a `q8_0` tile ([`gemm_q8_0_x4`]).
///
/// Per column, two SDOT chains (one per row pair) over the four unscaled slots, each decoded
/// slot serving all four columns; both start at `[-s, 0, -s, 0]`, so the pairwise add gives the
/// exact `i = dot(u) - sum(y)` per row (|lane| <= 4 * 3 * 2 * 128 + 4096). The activations come
/// pre-dup8'ed from [`Q8_0x4Dot`]: one load per SDOT pair, no `dup`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn q8_0_word(u: &[[int8x16_t; 4]; 2], y: &Q8_0x4Dot, wd: usize) -> [int32x4_t; 4] {
    std::array::from_fn(|c| {
        // SAFETY: `start[wd][c][p]` is four readable i32.
        let start = |p: usize| unsafe { vld1q_s32(y.start[wd][c][p].as_ptr()) };
        let (mut a0, mut a1) = (start(0), start(1));
        for (s, chunk) in y.qs[4 * wd..4 * wd + 4].iter().enumerate() {
            // SAFETY: `chunk[c]` is 16 readable bytes.
            let yv = unsafe { vld1q_s8(chunk[c].as_ptr()) };
            a0 = sdot(a0, u[0][s], yv);
            a1 = sdot(a1, u[1][s], yv);
        }
        vpaddq_s32(a0, a1)
    })
}

#[inline(never)]
#[target_feature(enable = "neon,dotprod")]
fn gemm_q8_0_dotprod<B: RowPairBlock>(g: Gemm<'_, B, Q8_0x4Dot>) {
    gemm_q8_0_x4(g, |u, y, wd| q8_0_word(u, y, wd));
}

/// Stock vec_dot entry (also the i8mm path's).
pub(super) fn vec_dot_stock(x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32 {
    // SAFETY: reachable only through the dotprod and i8mm `KERNELS`, handed out only after
    // detecting dotprod.
    unsafe { vec_dot_stock_dotprod(x, y) }
}

/// Half of a `q8_K` block (the 128 activations of one T2P block), laid out for the SDOT gemv
/// once per call (see [`gemv`]): `qs[chunk]` is the 8-value chunk twice (dup8, the operand that
/// meets both rows of a pair, loaded instead of built with a `dup` per slot), `start[p][class]`
/// the start values of the six accumulators of [`block_dot`] (`[-s, 0, -s, 0]` for class 0, `s`
/// the half's sum from `bsums`; zero for the others): each chain starts from its own load, not
/// from a `movi` or a register copy (loads are the idle pipe in this loop). `d` is the block's
/// scale.
#[derive(Clone, Copy)]
struct Q8KDup {
    qs: [[i8; 16]; 16],
    start: [[[i32; 4]; 3]; 2],
    d: f32,
}

per_call_layout!(Q8KDup);

impl Q8KDup {
    fn new(b: &BlockQ8K, h: usize) -> Self {
        let s: i32 = b.bsums[8 * h..8 * h + 8]
            .iter()
            .map(|&v| i32::from(v))
            .sum();
        let mut t = Q8KDup {
            qs: [[0; 16]; 16],
            start: [[[-s, 0, -s, 0], [0; 4], [0; 4]]; 2],
            d: b.d,
        };
        for (chunk, q) in
            t.qs.iter_mut()
                .zip(b.qs[128 * h..128 * h + 128].chunks_exact(8))
        {
            chunk[..8].copy_from_slice(q);
            chunk[8..].copy_from_slice(q);
        }
        t
    }
}

/// The exact `dot(w, y)` of the four rows of one T2P block against its 128 activations, with
/// `u = w + 1` the stored codes.
///
/// Per word `(p, wd)`: three ANDs and a shift give the four slots pre-scaled by 1, 4, 16, 1; each
/// meets its dup8 activations in one SDOT, whose lanes 0-1 collect row `2p` and lanes 2-3 row
/// `2p + 1`. Accumulators `[pair][class]`: slots 0 and 3 (both unscaled) share class 0, which
/// starts at `[-s, 0, -s, 0]` (so the pairwise add subtracts `sum(y)` once per row), slot 1 (4u)
/// is class 1, slot 2 (16u) class 2; `dot = a0 + a1 / 4 + a2 / 16`, exact shifts (multiples of
/// 4 and 16). Bounds: class 0 collects 32 products of at most 3 * 128 per lane plus |s| <=
/// 16384; class 2 16 products of at most 48 * 128 = 6144.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn block_dot(x: &BlockT2p, y: &Q8KDup) -> int32x4_t {
    const CLASS: [usize; 4] = [0, 1, 2, 0];
    // SAFETY: each `start[p][class]` is four readable i32.
    let mut a = y
        .start
        .each_ref()
        .map(|p| p.each_ref().map(|v| unsafe { vld1q_s32(v.as_ptr()) }));
    let mut word = |wd: usize| {
        for (acc, words) in a.iter_mut().zip(&x.qs) {
            let v = load_u8x16(&words[wd]);
            for (s, &cls) in CLASS.iter().enumerate() {
                // SAFETY: `qs[..]` is 16 readable bytes.
                let yv = unsafe { vld1q_s8(y.qs[4 * wd + s].as_ptr()) };
                acc[cls] = sdot(acc[cls], slot_scaled(v, s), yv);
            }
        }
    };
    // Four calls rather than a loop, so the words are unrolled.
    word(0);
    word(1);
    word(2);
    word(3);
    let r = a.map(|a| vsraq_n_s32::<4>(vsraq_n_s32::<2>(a[0], a[1]), a[2]));
    // [row 0, row 1, row 2, row 3]: each row's two partial lanes added pairwise.
    vpaddq_s32(r[0], r[1])
}

#[inline(never)]
#[target_feature(enable = "neon,dotprod")]
fn gemv_dotprod(x: &[BlockT2p], nb: usize, y: &[Q8KDup], out: &mut [f32]) {
    for (group, o) in x.chunks_exact(nb).zip(out.chunks_exact_mut(ROWS_PER_T2P)) {
        let mut acc = vdupq_n_f32(0.0);
        for (blk, yb) in group.iter().zip(y) {
            let dwdy = vmulq_n_f32(row_scales(&blk.d), yb.d);
            acc = accumulate(acc, dwdy, block_dot(blk, yb));
        }
        store_f32x4(o, acc);
    }
}

/// Half of a `q8_K x4` block (the 128 activations of one T2P block, four columns), laid out for
/// the SDOT tile once per call (see [`gemm`]): `qs[chunk][c]` is column `c`'s 8-value chunk
/// twice (dup8, loaded instead of built with a `dup` per column and slot), `start[c][p][class]`
/// the start values of [`tile_block`]'s accumulators (`[-s, 0, -s, 0]` for class 0, `s` the
/// column's half sum from `bsums`; zero for class 1), `d` the four column scales.
#[derive(Clone, Copy)]
struct Q8Kx4Dup {
    qs: [[[i8; 16]; 4]; 16],
    start: [[[[i32; 4]; 2]; 2]; 4],
    d: [f32; 4],
}

per_call_layout!(Q8Kx4Dup);

impl Q8Kx4Dup {
    fn new(b: &BlockQ8Kx4, h: usize) -> Self {
        let mut t = Q8Kx4Dup {
            qs: [[[0; 16]; 4]; 16],
            start: [[[[0; 4]; 2]; 2]; 4],
            d: b.d,
        };
        for (chunk, out) in t.qs.iter_mut().enumerate() {
            // Chunk `chunk` of half `h` is chunk `16h + chunk` of the block: 32 bytes, 8 per column.
            let src = &b.qs[32 * (16 * h + chunk)..32 * (16 * h + chunk) + 32];
            for (c, q) in out.iter_mut().zip(src.chunks_exact(8)) {
                c[..8].copy_from_slice(q);
                c[8..].copy_from_slice(q);
            }
        }
        for (c, start) in t.start.iter_mut().enumerate() {
            let s = b.half_sum(c, h);
            *start = [[[-s, 0, -s, 0], [0; 4]]; 2];
        }
        t
    }
}

/// Exact sums `[column c: rows 0..3]` of one T2P block against its half of a `q8_K x4` block,
/// with SDOT per column. One decoded slot per row pair serves all four columns.
///
/// Four columns x two pairs x four slot accumulators would not fit the 32 vector registers, so
/// slots 0, 1, 3 are decoded unscaled (`v & 3`, `(v >> 2) & 3`, `v >> 6`) into one accumulator
/// (class 0, which starts at `[-s, 0, -s, 0]`, so the pairwise add subtracts the column's
/// `sum(y)` once per row) and slot 2 scaled (`v & 0x30` = 16u) into another (class 1): 16
/// accumulators, each starting from its own load, `dot = a0 + a1 / 16` (exact: a multiple of
/// 16). Bounds: class 0 collects 48 products of at most 3 * 128 per lane plus |s| <= 16384.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn tile_block(x: &BlockT2p, y: &Q8Kx4Dup) -> [int32x4_t; 4] {
    let m3 = vdupq_n_u8(0x03);
    let load = |v: &[i32; 4]| {
        // SAFETY: `v` is four readable i32.
        unsafe { vld1q_s32(v.as_ptr()) }
    };
    // [column][pair][slots 0/1/3 | slot 2]
    let mut a = y
        .start
        .each_ref()
        .map(|c| c.each_ref().map(|p| p.each_ref().map(load)));
    // Four calls rather than a loop, so the words are unrolled.
    let mut word = |wd: usize| {
        let v = [load_u8x16(&x.qs[0][wd]), load_u8x16(&x.qs[1][wd])];
        for s in 0..4 {
            let cls = usize::from(s == 2);
            for (p, &v) in v.iter().enumerate() {
                let w = vreinterpretq_s8_u8(match s {
                    0 => vandq_u8(v, m3),
                    1 => vandq_u8(vshrq_n_u8::<2>(v), m3),
                    2 => vandq_u8(v, vdupq_n_u8(0x30)),
                    _ => vshrq_n_u8::<6>(v),
                });
                for (acc, yc) in a.iter_mut().zip(&y.qs[4 * wd + s]) {
                    // SAFETY: `yc` is 16 readable bytes.
                    let yv = unsafe { vld1q_s8(yc.as_ptr()) };
                    acc[p][cls] = sdot(acc[p][cls], w, yv);
                }
            }
        }
    };
    word(0);
    word(1);
    word(2);
    word(3);
    a.map(|acc| {
        vpaddq_s32(
            vsraq_n_s32::<4>(acc[0][0], acc[0][1]),
            vsraq_n_s32::<4>(acc[1][0], acc[1][1]),
        )
    })
}

#[inline(never)]
#[target_feature(enable = "neon,dotprod")]
fn gemm_dotprod(g: Gemm<'_, BlockT2p, Q8Kx4Dup>) {
    gemm_local_tiles(
        g,
        |blk, yb, acc| {
            let isum = tile_block(blk, yb);
            let dw = row_scales(&blk.d);
            // SAFETY: `yb.d` is four readable f32.
            let dy = unsafe { vld1q_f32(yb.d.as_ptr()) };
            std::array::from_fn(|c| accumulate(acc[c], mul_lane_f32(dw, dy, c), isum[c]))
        },
        |a| a,
    );
}

/// The stock layout as it sits in the file, ggml's way: per 16 weights a table lookup, shift,
/// mask, subtract 1 and one SDOT.
#[inline(never)]
#[target_feature(enable = "neon,dotprod")]
fn vec_dot_stock_dotprod(x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32 {
    stock::vec_dot(
        x,
        y,
        vdupq_n_s32(0),
        |a, w, y| sdot(a, w, y),
        |a, b| vaddvq_s32(vaddq_s32(a, b)),
    )
}
