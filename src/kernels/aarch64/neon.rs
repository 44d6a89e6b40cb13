//! Plain NEON for cores without dotprod (Cortex-A53 and the like): widening int8 multiply-adds
//! (`smlal`/`smlal2`) into int16 lanes, widened to int32 once per block.
//!
//! The codes are decoded unscaled here (`u` in 0..=3), because int16 lanes have no room for the
//! 4x/16x slot scaling: a product `u * y` is in -384..=381 and a lane collects at most 16 of
//! them per block, so |lane| <= 6144; the pairwise sums at the end stay within int16 up to four
//! lanes (|sum| <= 24576) before widening.

use core::arch::aarch64::*;

use super::{
    Q8_0Dup, Q8_0x4Dot, accumulate, dup8x4, gemm_q8_0_x4, gemm_tiles, gemv_q8_0_dup, load_i8x16x2,
    load_i16x8, load_u8x16, row_scales, slots, stock, store_f32x4, with_q8_0_dup, with_q8_0_tiles,
};
use crate::format::{
    BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, ROWS_PER_T2P, RowPairBlock,
};
use crate::kernels::{Gemm, Isa, T2pKernels};

pub(in crate::kernels) static KERNELS: T2pKernels = T2pKernels::portable(
    Isa::Neon,
    (gemv, gemm),
    (gemv_q8_0, gemm_q8_0),
    (gemv_q8_0, gemm_q8_0),
    vec_dot_stock,
);

/// Four rows' int16 lane accumulators -> `[row 0, row 1, row 2, row 3]` in int32 (exact: sums of
/// up to four lanes fit int16, see the module bounds; the last step widens).
#[inline]
#[target_feature(enable = "neon")]
fn rows_to_i32(r: [int16x8_t; 4]) -> int32x4_t {
    vpaddlq_s16(vpaddq_s16(vpaddq_s16(r[0], r[1]), vpaddq_s16(r[2], r[3])))
}

/// `dot(u, y)` for the four rows of one T2P block against 128 activations (`y[wd]` = chunks
/// `4wd..4wd+4`). The low half of a slot (row `2p`) meets the low half of the dup8 activations,
/// the high half (row `2p + 1`) the high half. Two accumulators per row (by slot parity) for
/// independent chains; each lane collects 8 products.
#[inline]
#[target_feature(enable = "neon")]
fn block_dot_u(x: &BlockT2p, y: &[[i8; 32]; 4]) -> int32x4_t {
    let zero = vdupq_n_s16(0);
    let mut a = [[zero; 2]; 4]; // [row][slot parity]
    let mut word = |wd: usize| {
        let ys = dup8x4(&y[wd]);
        for (p, words) in x.qs.iter().enumerate() {
            let u = slots(load_u8x16(&words[wd]));
            for (s, (u, ys)) in u.iter().zip(&ys).enumerate() {
                let (lo, hi) = (2 * p, 2 * p + 1);
                a[lo][s % 2] = vmlal_s8(a[lo][s % 2], vget_low_s8(*u), vget_low_s8(*ys));
                a[hi][s % 2] = vmlal_high_s8(a[hi][s % 2], *u, *ys);
            }
        }
    };
    // Four calls rather than a loop, so the words are unrolled (no loop per block).
    word(0);
    word(1);
    word(2);
    word(3);
    rows_to_i32(a.map(|r| vaddq_s16(r[0], r[1])))
}

fn gemv(x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]) {
    // SAFETY: reachable only through `KERNELS`, which `aarch64::kernels` hands out only after
    // detecting NEON.
    unsafe { gemv_neon(x, nb, y, out) }
}

fn gemm(g: Gemm<'_, BlockT2p, BlockQ8Kx4>) {
    // SAFETY: as for `gemv`.
    unsafe { gemm_neon(g) }
}

fn gemv_q8_0<B: RowPairBlock>(x: &[B], nb: usize, y: &[BlockQ8_0Quad], out: &mut [f32]) {
    // Once per call: the column in the layout the loop loads without `dup`s.
    with_q8_0_dup(y, |ys| {
        // SAFETY: as for `gemv`.
        unsafe { gemv_q8_0_neon(x, nb, ys, out) }
    })
}

fn gemm_q8_0<B: RowPairBlock>(g: Gemm<'_, B, BlockQ8_0Quad>) {
    with_q8_0_tiles(g.y, g.nb, g.ncols, Q8_0x4Dot::new, |tiles| {
        // SAFETY: as for `gemv`.
        unsafe { gemm_q8_0_neon(g.with_activations(tiles)) }
    })
}

/// The `q8_0` gemv: per word (= quarter), each row's int16 lanes collect 4 products
/// (|lane| <= 4 * 384 = 1536; the low half of a slot, row `2p`, meets the low half of the dup8
/// activations, the high half the high half), widened by [`rows_to_i32`]; `-sum` comes from the
/// layout's start value `[-s, 0, -s, 0]`, whose pairwise add is `-s` in every lane.
#[inline(never)]
#[target_feature(enable = "neon")]
fn gemv_q8_0_neon<B: RowPairBlock>(x: &[B], nb: usize, y: &[Q8_0Dup], out: &mut [f32]) {
    gemv_q8_0_dup(x, nb, y, out, |blk, yb, wd| {
        let mut a = [vdupq_n_s16(0); 4]; // [row]
        for (p, words) in blk.words().iter().enumerate() {
            let u = slots(load_u8x16(&words[wd]));
            for (s, u) in u.iter().enumerate() {
                // SAFETY: `qs[..]` is 16 readable bytes.
                let yv = unsafe { vld1q_s8(yb.qs[4 * wd + s].as_ptr()) };
                a[2 * p] = vmlal_s8(a[2 * p], vget_low_s8(*u), vget_low_s8(yv));
                a[2 * p + 1] = vmlal_high_s8(a[2 * p + 1], *u, yv);
            }
        }
        // SAFETY: `start[wd][0]` is four readable i32.
        let start = unsafe { vld1q_s32(yb.start[wd][0].as_ptr()) };
        vaddq_s32(rows_to_i32(a), vpaddq_s32(start, start))
    });
}

/// The exact sums `[column c: rows 0..3]` of quarter `wd` of a T2P block (its slots `u`) with
/// the four columns of a `q8_0` tile ([`gemm_q8_0_x4`]): 16 int16 accumulators
/// `[row][column]`, the low half of a slot (row `2p`) meets the low half of the column's dup8
/// activations, the high half (row `2p + 1`) the high half; a lane collects 4 products
/// (|lane| <= 4 * 384 = 1536), widened by [`rows_to_i32`]. `-sum` comes from the layout's SDOT
/// start value `[-s, 0, -s, 0]`, whose pairwise add is `-s` in every lane.
#[inline]
#[target_feature(enable = "neon")]
fn q8_0_word(u: &[[int8x16_t; 4]; 2], y: &Q8_0x4Dot, wd: usize) -> [int32x4_t; 4] {
    // Two columns at a time: 8 int16 accumulators next to the 8 decoded slots, no spills.
    let half = |h: usize| -> [int32x4_t; 2] {
        let mut a = [[vdupq_n_s16(0); 2]; 4]; // [row][column of the half]
        for (s, chunk) in y.qs[4 * wd..4 * wd + 4].iter().enumerate() {
            for (k, yc) in chunk[2 * h..2 * h + 2].iter().enumerate() {
                // SAFETY: `yc` is 16 readable bytes.
                let yv = unsafe { vld1q_s8(yc.as_ptr()) };
                for (p, u) in u.iter().enumerate() {
                    let (lo, hi) = (2 * p, 2 * p + 1);
                    a[lo][k] = vmlal_s8(a[lo][k], vget_low_s8(u[s]), vget_low_s8(yv));
                    a[hi][k] = vmlal_high_s8(a[hi][k], u[s], yv);
                }
            }
        }
        std::array::from_fn(|k| {
            // SAFETY: `start[wd][c][0]` is four readable i32.
            let start = unsafe { vld1q_s32(y.start[wd][2 * h + k][0].as_ptr()) };
            let dot_u = rows_to_i32([a[0][k], a[1][k], a[2][k], a[3][k]]);
            vaddq_s32(dot_u, vpaddq_s32(start, start))
        })
    };
    let (l, r) = (half(0), half(1));
    [l[0], l[1], r[0], r[1]]
}

#[inline(never)]
#[target_feature(enable = "neon")]
fn gemm_q8_0_neon<B: RowPairBlock>(g: Gemm<'_, B, Q8_0x4Dot>) {
    gemm_q8_0_x4(g, |u, y, wd| q8_0_word(u, y, wd));
}

fn vec_dot_stock(x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32 {
    // SAFETY: as for `gemv`.
    unsafe { vec_dot_stock_neon(x, y) }
}

#[inline(never)]
#[target_feature(enable = "neon")]
fn gemv_neon(x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]) {
    for (group, o) in x.chunks_exact(nb).zip(out.chunks_exact_mut(ROWS_PER_T2P)) {
        let mut acc = vdupq_n_f32(0.0);
        for (pair, yb) in group.chunks_exact(2).zip(y) {
            let ys: &[[[i8; 32]; 4]; 2] = bytemuck::cast_ref(&yb.qs);
            let bs: &[[i16; 8]; 2] = bytemuck::cast_ref(&yb.bsums);
            let dy = vdupq_n_f32(yb.d);
            for (h, blk) in pair.iter().enumerate() {
                // dot(w, y) = dot(u, y) - sum(y), sum(y) from the eight bsums of this half.
                let ysum = vaddlvq_s16(load_i16x8(&bs[h]));
                let isum = vsubq_s32(block_dot_u(blk, &ys[h]), vdupq_n_s32(ysum));
                acc = accumulate(acc, vmulq_f32(row_scales(&blk.d), dy), isum);
            }
        }
        store_f32x4(o, acc);
    }
}

/// Exact sums `[column c: rows 0..3]` of one T2P block against half a `q8_K x4` block. Each
/// decoded slot serves both rows of its pair and all four columns; `ext #8` swaps the two
/// columns of an activation vector so every row meets every column with `smlal`/`smlal2`.
/// 16 int16 accumulators `[row][column]`, each lane collecting 16 products per block.
#[inline]
#[target_feature(enable = "neon")]
fn tile_block(x: &BlockT2p, y: &[[i8; 32]; 16], sums: int32x4_t) -> [int32x4_t; 4] {
    let zero = vdupq_n_s16(0);
    let mut a = [[zero; 4]; 4]; // [row][column]
    let mut word = |wd: usize| {
        let u = [
            slots(load_u8x16(&x.qs[0][wd])),
            slots(load_u8x16(&x.qs[1][wd])),
        ];
        for s in 0..4 {
            let (b01, b23) = load_i8x16x2(&y[4 * wd + s]);
            // b = [column c | column c + 1], b' = [column c + 1 | column c]
            let b = [
                (b01, vextq_s8::<8>(b01, b01)),
                (b23, vextq_s8::<8>(b23, b23)),
            ];
            for (p, u) in u.iter().enumerate() {
                let w = u[s];
                let (lo, hi) = (2 * p, 2 * p + 1);
                for (cp, &(b, bx)) in b.iter().enumerate() {
                    let (c0, c1) = (2 * cp, 2 * cp + 1);
                    a[lo][c0] = vmlal_s8(a[lo][c0], vget_low_s8(w), vget_low_s8(b));
                    a[lo][c1] = vmlal_s8(a[lo][c1], vget_low_s8(w), vget_low_s8(bx));
                    a[hi][c0] = vmlal_high_s8(a[hi][c0], w, bx);
                    a[hi][c1] = vmlal_high_s8(a[hi][c1], w, b);
                }
            }
        }
    };
    // Four calls rather than a loop, so the words are unrolled (no loop per block).
    word(0);
    word(1);
    word(2);
    word(3);
    let neg = vnegq_s32(sums);
    let mut r = [vdupq_n_s32(0); 4];
    for (c, rc) in r.iter_mut().enumerate() {
        let dot_u = rows_to_i32([a[0][c], a[1][c], a[2][c], a[3][c]]);
        *rc = vaddq_s32(dot_u, super::dup_lane_s32(neg, c));
    }
    r
}

#[inline(never)]
#[target_feature(enable = "neon")]
fn gemm_neon(g: Gemm<'_, BlockT2p, BlockQ8Kx4>) {
    gemm_tiles(g, |b, ys, s| tile_block(b, ys, s));
}

/// The stock layout as it sits in the file, ggml's decode (table lookup, shift, mask, minus one)
/// with `smlal`/`smlal2` instead of SDOT. A product is in -256..=254 and an int16 lane collects
/// 8 per block in each of two accumulators, so |sum of both| <= 4096.
#[inline(never)]
#[target_feature(enable = "neon")]
fn vec_dot_stock_neon(x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32 {
    stock::vec_dot(
        x,
        y,
        vdupq_n_s16(0),
        |a, w, y| vmlal_high_s8(vmlal_s8(a, vget_low_s8(w), vget_low_s8(y)), w, y),
        // A pairwise add (not `vaddq`) joins the two chains, so LLVM keeps them apart instead
        // of reassociating them into one serial chain of `smlal`.
        |a, b| vaddlvq_s16(vpaddq_s16(a, b)),
    )
}
