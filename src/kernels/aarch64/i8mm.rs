//! NEON + i8mm: SMMLA gemm tiles on the row pairs (`q8_K` and `q8_0` activations); gemv and
//! stock vec_dot are the dotprod ones.

use core::arch::aarch64::*;

use super::asm::smmla;
use super::{
    Q8_0x4Mmla, dotprod, gemm_q8_0_tiles, gemm_tiles, interleave_q8_0, load_i8x16x2, load_u8x16,
    row_scales, slot_scaled, slots,
};
use crate::format::{BlockQ8_0Quad, BlockQ8Kx4, BlockT2p};
use crate::kernels::{Isa, Kernels};

pub(in crate::kernels) static KERNELS: Kernels = Kernels {
    isa: Isa::NeonI8mm,
    gemv: dotprod::gemv,
    gemm,
    gemv_q8_0: dotprod::gemv_q8_0,
    gemm_q8_0,
    vec_dot_stock: dotprod::vec_dot_stock,
};

fn gemm(x: &[BlockT2p], nb: usize, y: &[BlockQ8Kx4], ncols: usize, out: &mut [f32], ld: usize) {
    // SAFETY: reachable only through `KERNELS`, which `aarch64::kernels` hands out only after
    // detecting i8mm (and dotprod).
    unsafe { gemm_i8mm(x, nb, y, ncols, out, ld) }
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
fn gemm_i8mm(
    x: &[BlockT2p],
    nb: usize,
    y: &[BlockQ8Kx4],
    ncols: usize,
    out: &mut [f32],
    ld: usize,
) {
    gemm_tiles(x, nb, y, ncols, out, ld, |b, ys, s| tile_block(b, ys, s));
}

fn gemm_q8_0(
    x: &[BlockT2p],
    nb: usize,
    y: &[BlockQ8_0Quad],
    ncols: usize,
    out: &mut [f32],
    ld: usize,
) {
    let tiles = interleave_q8_0(y, nb, ncols, Q8_0x4Mmla::new);
    // SAFETY: reachable only through `KERNELS`, handed out only after detecting i8mm.
    unsafe { gemm_q8_0_i8mm(x, nb, &tiles, ncols, out, ld) }
}

/// One T2P block of a `q8_0` tile: adds the block's float terms to `acc[2p + cp]` (row pair
/// `p`, column pair `cp`, SMMLA lane order `[r.c, r.c', r'.c, r'.c']`).
///
/// The q8_0 sums are needed per 32-weight quarter, which is one T2P word, so the slots are
/// decoded unscaled (`v & 3`, `(v >> 2) & 3`, `(v >> 4) & 3`, `v >> 6`) and all four meet their
/// activations in one accumulator per (pair, column pair): no per-word recombining of scaled
/// classes. Each accumulator starts at the quarter's `-sum` (so it ends at the exact
/// `i = dot(u) - sum(y)`, |i| <= 32 * 3 * 128 + 32 * 128). The float step runs in the SMMLA
/// lane order: the scales are stored in that order and the row scales are zipped into it, so
/// every lane follows the oracle's `acc + d_w * (((d0*i0 + d1*i1) + d2*i2) + d3*i3)`.
#[inline]
#[target_feature(enable = "neon,i8mm")]
fn q8_0_tile_block(x: &BlockT2p, y: &Q8_0x4Mmla, acc: [float32x4_t; 4]) -> [float32x4_t; 4] {
    let load_i32 = |v: &[i32; 4]| {
        // SAFETY: `v` is four readable i32.
        unsafe { vld1q_s32(v.as_ptr()) }
    };
    let load_f32 = |v: &[f32; 4]| {
        // SAFETY: `v` is four readable f32.
        unsafe { vld1q_f32(v.as_ptr()) }
    };
    // Quarter `wd`: the exact sums `[2p + cp]`.
    let word = |wd: usize| {
        let u = [
            slots(load_u8x16(&x.qs[0][wd])),
            slots(load_u8x16(&x.qs[1][wd])),
        ];
        let neg = [load_i32(&y.neg[wd][0]), load_i32(&y.neg[wd][1])];
        let mut a = [neg[0], neg[1], neg[0], neg[1]];
        for s in 0..4 {
            let (b01, b23) = load_i8x16x2(&y.qs[4 * wd + s]);
            for (p, u) in u.iter().enumerate() {
                a[2 * p] = smmla(a[2 * p], u[s], b01);
                a[2 * p + 1] = smmla(a[2 * p + 1], u[s], b23);
            }
        }
        a
    };
    let i = [word(0), word(1), word(2), word(3)];
    let dw = row_scales(&x.d);
    let dw = [vzip1q_f32(dw, dw), vzip2q_f32(dw, dw)]; // [d_2p, d_2p, d_2p+1, d_2p+1]
    std::array::from_fn(|k| {
        let term = |j: usize| vmulq_f32(vcvtq_f32_s32(i[j][k]), load_f32(&y.d[j][k % 2]));
        let s = vaddq_f32(vaddq_f32(vaddq_f32(term(0), term(1)), term(2)), term(3));
        vaddq_f32(acc[k], vmulq_f32(dw[k / 2], s))
    })
}

#[inline(never)]
#[target_feature(enable = "neon,i8mm")]
fn gemm_q8_0_i8mm(
    x: &[BlockT2p],
    nb: usize,
    tiles: &[Q8_0x4Mmla],
    ncols: usize,
    out: &mut [f32],
    ld: usize,
) {
    gemm_q8_0_tiles(
        x,
        nb,
        tiles,
        ncols,
        out,
        ld,
        |b, y, acc| q8_0_tile_block(b, y, acc),
        // acc[2p + cp] lanes [r2p.c, r2p.c', r2p+1.c, r2p+1.c'] -> columns 2cp, 2cp + 1.
        |a| {
            [
                vuzp1q_f32(a[0], a[2]),
                vuzp2q_f32(a[0], a[2]),
                vuzp1q_f32(a[1], a[3]),
                vuzp2q_f32(a[1], a[3]),
            ]
        },
    );
}
