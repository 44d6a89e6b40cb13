//! NEON + i8mm: SMMLA gemm tiles on the row pairs (`q8_K` and `q8_0` activations); gemv and
//! stock vec_dot are the dotprod ones.

use core::arch::aarch64::*;

use super::asm::smmla;
use super::dotprod::{gemv, gemv_q8_0, vec_dot_stock};
use super::{
    gemm_tiles, load_i8x16x2, load_u8x16, pair_slots, per_call_layout, row_scales, slot_scaled,
    store_f32x4, with_q8_0_tiles,
};
use crate::format::{BlockQ8_0Quad, BlockQ8Kx4, BlockT2p, RowPairBlock};
use crate::kernels::{Gemm, Isa, T2pKernels, fold_q8_0};

pub(in crate::kernels) static KERNELS: T2pKernels = T2pKernels::portable(
    Isa::NeonI8mm,
    (gemv, gemm),
    (gemv_q8_0, gemm_q8_0),
    (gemv_q8_0, gemm_q8_0),
    vec_dot_stock,
);

fn gemm(g: Gemm<'_, BlockT2p, BlockQ8Kx4>) {
    // SAFETY: reachable only through `KERNELS`, which `aarch64::kernels` hands out only after
    // detecting i8mm (and dotprod).
    unsafe { gemm_i8mm(g) }
}

/// Exact sums `[column c: rows 0..3]` of one T2P block against half a `q8_K x4` block.
///
/// A decoded slot of row pair `p` is already the 2x8 operand SMMLA wants (8 weights of row `2p`,
/// then the same 8 of row `2p + 1`), and the `q8_K x4` chunk is two 2x8 operands (columns 0-1,
/// columns 2-3): four SMMLA per slot, each operand used twice. Accumulators
/// `[pair][column pair][class]` have lanes `[r2p.c, r2p.c', r2p+1.c, r2p+1.c']`; slots 0 and 3
/// (both unscaled) share class 0, slot 1 (4u) is class 1, slot 2 (16u) class 2: 12 independent
/// chains. `-sum(y)` of each column is folded into the class-0 start values, so
/// `dot(w) = a0 + a1 / 4 + a2 / 16` with exact shifts (multiples of 4 and 16).
#[inline]
#[target_feature(enable = "neon,i8mm")]
fn tile_block(x: &BlockT2p, y: &[[i8; 32]; 16], sums: int32x4_t) -> [int32x4_t; 4] {
    const CLASS: [usize; 4] = [0, 1, 2, 0];
    let zero = vdupq_n_s32(0);
    let neg = vreinterpretq_s64_s32(vnegq_s32(sums));
    // [-s0, -s1, -s0, -s1] and [-s2, -s3, -s2, -s3]: the lane layout of one SMMLA tile.
    let start = [
        vreinterpretq_s32_s64(vdupq_laneq_s64::<0>(neg)),
        vreinterpretq_s32_s64(vdupq_laneq_s64::<1>(neg)),
    ];
    let mut a = [start.map(|s| [s, zero, zero]); 2]; // [pair][column pair][class]
    // Written as four calls rather than a loop so the words are unrolled (no loop counter or
    // address arithmetic between the SMMLAs).
    let mut word = |wd: usize| {
        let v = [load_u8x16(&x.qs[0][wd]), load_u8x16(&x.qs[1][wd])];
        for (s, &cls) in CLASS.iter().enumerate() {
            let (b01, b23) = load_i8x16x2(&y[4 * wd + s]);
            for (acc, &v) in a.iter_mut().zip(&v) {
                let w = slot_scaled(v, s);
                acc[0][cls] = smmla(acc[0][cls], w, b01);
                acc[1][cls] = smmla(acc[1][cls], w, b23);
            }
        }
    };
    word(0);
    word(1);
    word(2);
    word(3);
    let t =
        a.map(|pair| pair.map(|acc| vsraq_n_s32::<4>(vsraq_n_s32::<2>(acc[0], acc[1]), acc[2])));
    // Row-major 2x2 tiles to columns: even lanes are the pair's column 2cp, odd lanes 2cp + 1.
    [
        vuzp1q_s32(t[0][0], t[1][0]),
        vuzp2q_s32(t[0][0], t[1][0]),
        vuzp1q_s32(t[0][1], t[1][1]),
        vuzp2q_s32(t[0][1], t[1][1]),
    ]
}

#[inline(never)]
#[target_feature(enable = "neon,i8mm")]
fn gemm_i8mm(g: Gemm<'_, BlockT2p, BlockQ8Kx4>) {
    gemm_tiles(g, |b, ys, s| tile_block(b, ys, s));
}

fn gemm_q8_0<B: RowPairBlock>(g: Gemm<'_, B, BlockQ8_0Quad>) {
    with_q8_0_tiles(g.y, g.nb, g.ncols, Q8_0x8Mmla::new, |tiles| {
        // SAFETY: reachable only through `KERNELS`, handed out only after detecting i8mm.
        unsafe { gemm_q8_0_i8mm(g.with_activations(tiles)) }
    })
}

/// `q8_0` activations of one 8-column tile for one T2P block, laid out for SMMLA (built by
/// [`with_q8_0_tiles`] once per gemm call).
///
/// Eight columns, not four: the q8_0 sums are needed per 32-weight quarter, so the slots are
/// decoded unscaled (six instructions per word and pair instead of four), and sharing each
/// decoded slot among four column pairs instead of two halves that cost per column.
///
/// `qs[chunk][cp]` is the 2x8 SMMLA operand of column pair `cp` (8 values of column `2cp`, then
/// of `2cp + 1`). `neg[j][p][cp]` and `d[j][cp]` hold `[x_c, x_c', x_c, x_c']` for quarter `j`,
/// the lane order of a 2x2 SMMLA tile (`[r.c, r.c', r'.c, r'.c']`): `-sum` is the start value of
/// the accumulators (stored once per row pair `p`, so each accumulator starts from its own load
/// rather than a register copy), and the scales multiply the tile lane by lane.
#[derive(Clone, Copy)]
struct Q8_0x8Mmla {
    qs: [[[i8; 16]; 4]; 16],
    neg: [[[[i32; 4]; 4]; 2]; 4],
    d: [[[f32; 4]; 4]; 4],
}

per_call_layout!(Q8_0x8Mmla);

impl Q8_0x8Mmla {
    fn new(cols: [&BlockQ8_0Quad; 8]) -> Self {
        let mut t = Q8_0x8Mmla {
            qs: [[[0; 16]; 4]; 16],
            neg: [[[[0; 4]; 4]; 2]; 4],
            d: [[[0.0; 4]; 4]; 4],
        };
        for (c, col) in cols.iter().enumerate() {
            let (cp, h) = (c / 2, c % 2);
            for (chunk, q) in t.qs.iter_mut().zip(col.qs.chunks_exact(8)) {
                chunk[cp][8 * h..8 * h + 8].copy_from_slice(q);
            }
            for j in 0..4 {
                for lane in [h, h + 2] {
                    t.neg[j][0][cp][lane] = -col.sums[j];
                    t.neg[j][1][cp][lane] = -col.sums[j];
                    t.d[j][cp][lane] = col.d[j];
                }
            }
        }
        t
    }
}

/// One T2P block of a `q8_0` tile on its first `CP` column pairs (4, or 2 for a last tile of at
/// most four real columns): adds the block's float terms to `acc[p][cp]` (row pair `p`, SMMLA
/// lane order).
///
/// Per quarter (= word), each row pair's four unscaled slots (`v & 3`, `(v >> 2) & 3`,
/// `(v >> 4) & 3`, `v >> 6`) meet the column pairs in one SMMLA chain per (pair, column pair)
/// that starts at the quarter's `-sum`, so it ends at the exact quarter sum
/// (|i| <= 32 * 3 * 128 + 32 * 128). The float step runs in the SMMLA lane order, the row
/// scales zipped into it, so every lane follows the oracle's fold ([`fold_q8_0`]; separate
/// `fmul`/`fadd`; the first two quarters are summed as they come, which keeps the order and
/// frees their registers).
#[inline]
#[target_feature(enable = "neon,i8mm")]
fn q8_0_tile_block<B: RowPairBlock, const CP: usize>(
    x: &B,
    y: &Q8_0x8Mmla,
    acc: [[float32x4_t; CP]; 2],
) -> [[float32x4_t; CP]; 2] {
    let load_i32 = |v: &[i32; 4]| {
        // SAFETY: `v` is four readable i32.
        unsafe { vld1q_s32(v.as_ptr()) }
    };
    let load_f32 = |v: &[f32; 4]| {
        // SAFETY: `v` is four readable f32.
        unsafe { vld1q_f32(v.as_ptr()) }
    };
    // Quarter `wd`'s float terms `[p][cp]`, added to `s` (`s = None` for the first quarter).
    let word = |wd: usize, s: Option<[[float32x4_t; CP]; 2]>| {
        let u = pair_slots(x, wd);
        let mut a: [[int32x4_t; CP]; 2] =
            std::array::from_fn(|p| std::array::from_fn(|cp| load_i32(&y.neg[wd][p][cp])));
        for slot in 0..4 {
            for cp in 0..CP {
                // SAFETY: `qs[..][cp]` is 16 readable bytes.
                let b = unsafe { vld1q_s8(y.qs[4 * wd + slot][cp].as_ptr()) };
                for (a, u) in a.iter_mut().zip(&u) {
                    a[cp] = smmla(a[cp], u[slot], b);
                }
            }
        }
        let term = |p: usize, cp: usize| vmulq_f32(vcvtq_f32_s32(a[p][cp]), load_f32(&y.d[wd][cp]));
        std::array::from_fn(|p| {
            std::array::from_fn(|cp| match s {
                None => term(p, cp),
                Some(s) => vaddq_f32(s[p][cp], term(p, cp)),
            })
        })
    };
    // Four calls rather than a loop, so the quarters are unrolled.
    let s01 = word(1, Some(word(0, None)));
    let (p2, p3) = (word(2, None), word(3, None));
    // [d_2p, d_2p, d_2p+1, d_2p+1] per row pair `p` and half `h`.
    let dw = [0, B::HALVES - 1].map(|h| {
        let d = row_scales(x.scales(h));
        [vzip1q_f32(d, d), vzip2q_f32(d, d)]
    });
    std::array::from_fn(|p| {
        std::array::from_fn(|cp| {
            fold_q8_0(
                B::HALVES,
                acc[p][cp],
                [s01[p][cp], p2[p][cp], p3[p][cp]],
                |h| dw[h][p],
                |a, b| vaddq_f32(a, b),
                |a, b| vmulq_f32(a, b),
            )
        })
    })
}

/// The `q8_0` tiles of one row group and one 8-column tile on `CP` column pairs; stores the
/// `real` real columns of the tile (`out[c * ld..]`, column `c` of the tile).
#[inline]
#[target_feature(enable = "neon,i8mm")]
fn q8_0_tile<B: RowPairBlock, const CP: usize>(
    group: &[B],
    tile: &[Q8_0x8Mmla],
    real: usize,
    out: &mut [f32],
    ld: usize,
) {
    let mut acc = [[vdupq_n_f32(0.0); CP]; 2];
    for (blk, yb) in group.iter().zip(tile) {
        acc = q8_0_tile_block::<B, CP>(blk, yb, acc);
    }
    // acc[p][cp] lanes [r2p.c, r2p.c', r2p+1.c, r2p+1.c'] -> columns 2cp, 2cp + 1.
    for (cp, (&lo, &hi)) in acc[0].iter().zip(&acc[1]).enumerate() {
        let cols = [vuzp1q_f32(lo, hi), vuzp2q_f32(lo, hi)];
        for (h, v) in cols.into_iter().enumerate() {
            let c = 2 * cp + h;
            if c < real {
                store_f32x4(&mut out[c * ld..c * ld + 4], v);
            }
        }
    }
}

#[inline(never)]
#[target_feature(enable = "neon,i8mm")]
fn gemm_q8_0_i8mm<B: RowPairBlock>(g: Gemm<'_, B, Q8_0x8Mmla>) {
    let (x, nb, tiles, ncols, out, ld) = g.into_parts();
    for (g, group) in x.chunks_exact(nb).enumerate() {
        // Row group outer, tiles inner: the group's weights stay in L1 across the tiles.
        for (t, tile) in tiles.chunks_exact(nb).enumerate() {
            let real = (ncols - 8 * t).min(8);
            let out = &mut out[8 * t * ld + 4 * g..];
            // A last tile of at most four real columns runs on two column pairs only.
            if real > 4 {
                q8_0_tile::<B, 4>(group, tile, real, out, ld);
            } else {
                q8_0_tile::<B, 2>(group, tile, real, out, ld);
            }
        }
    }
}
