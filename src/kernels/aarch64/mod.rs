//! aarch64 kernels: plain NEON ([`Isa::Neon`]: `smlal` gemv and tiles), NEON + dotprod
//! ([`Isa::NeonDotprod`]: SDOT gemv and 4-column SDOT tiles) and NEON + i8mm ([`Isa::NeonI8mm`]:
//! the dotprod gemv with SMMLA tiles, 4 columns for `q8_K`, 8 for `q8_0`).
//!
//! Activation layouts: the kernels keep the signatures of [`super::GemvFn`] & co. (plain `q8_K`,
//! `q8_K x4` and per-column `q8_0`), and where a loop wants another layout (activations dup8'ed
//! for SDOT, column pairs interleaved for SMMLA, `-sum(y)` as accumulator start values) the
//! entry builds it once per call ([`with_layout`], the one helper of all three paths) into a
//! per-thread buffer reused from call to call, which every row group of the call then reads: the
//! cost is one pass over the activations, against `row groups` passes of work, and no allocation
//! after a thread's first call of a size.
//! `tools/arm-throughput.sh` shows what each loop costs on LLVM's CPU models.
//!
//! Exactness: every integer sum of a 128-weight block is exact (int32 accumulators, int16 only
//! where the bound is shown next to the code), and the float step is the oracle's
//! `acc + (d_w * d_y) * (isum as f32)` as a separate `fmul`, `fmul`, `fadd` per block in block
//! order (for q8_0 activations the four scaled 32-weight sums of [`super::scalar::accumulate_q8_0`]),
//! never a fused multiply-add. So every path is bit-identical to [`super::scalar`].
//!
//! Safety: weights and activations are read only through references to whole blocks (each vector
//! load reads inside one `&[u8; 16]`-sized field), so a wrong length can panic but never read out
//! of bounds. The dotprod/i8mm code is `#[target_feature]` code; its statics are handed out
//! only after runtime detection ([`crate::kernels::cpu`]).
//!
//! The kernels use the q8_K `bsums` and the q8_0 `sums` for `sum(y)` (to turn the stored codes
//! `u = w + 1` back into weights), so they rely on the invariant that these are the sums of
//! `qs`, as ggml does.

use core::arch::aarch64::*;

use super::{
    Gemm, Isa, PER_CALL_MIN_BLOCKS, PerCallBuffer, T2pKernels, fold_q8_0, with_per_call_buffer,
};
use crate::format::{BlockQ8_0Quad, BlockQ8Kx4, BlockT2p, ROWS_PER_T2P, RowPairBlock};

pub(in crate::kernels) mod asm;
mod dotprod;
pub(super) mod f16;
mod i8mm;
mod neon;
pub(super) mod quant;

/// The T2P kernels of an aarch64 path. Whether this CPU runs the path is asked once, by
/// [`crate::kernels::cpu`] (the i8mm path uses the dotprod gemv, so it needs both).
pub(super) const fn t2p(isa: Isa) -> Option<&'static T2pKernels> {
    match isa {
        Isa::Neon => Some(&neon::KERNELS),
        Isa::NeonDotprod => Some(&dotprod::KERNELS),
        Isa::NeonI8mm => Some(&i8mm::KERNELS),
        _ => None,
    }
}

/// A per-call activation layout (one value per T2P block, tile-major for a gemm), with the
/// per-thread buffer it is built into ([`with_layout`]). Declared by [`per_call_layout!`].
trait Layout: Sized + 'static {
    /// This thread's buffer of the layout.
    fn buffer() -> &'static PerCallBuffer<Self>;
}

/// Declares the per-thread buffer of a [`Layout`] type and implements the trait. A macro
/// because a `thread_local!` static cannot be generic: each type needs its own, declared where
/// its type is named.
macro_rules! per_call_layout {
    ($t:ty) => {
        impl $crate::kernels::aarch64::Layout for $t {
            fn buffer() -> &'static $crate::kernels::PerCallBuffer<Self> {
                thread_local! {
                    static BUF: std::cell::Cell<Vec<$t>> =
                        const { std::cell::Cell::new(Vec::new()) };
                }
                &BUF
            }
        }
    };
}
pub(crate) use per_call_layout;

/// The per-call layout helper of every aarch64 kernel that wants one: `item(0..n)` built into
/// this thread's buffer for `T` (see [`with_per_call_buffer`]), then `f` on it.
fn with_layout<T: Layout, R>(
    n: usize,
    item: impl FnMut(usize) -> T,
    f: impl FnOnce(&[T]) -> R,
) -> R {
    with_per_call_buffer(T::buffer(), n.max(PER_CALL_MIN_BLOCKS), (0..n).map(item), f)
}

// Helpers shared by the paths. They need only base NEON; Rust still wants `#[target_feature]`
// on every caller of a NEON intrinsic, so each carries `neon` and inlines into the kernels.

/// Loads a 16-byte word.
#[inline]
#[target_feature(enable = "neon")]
pub(in crate::kernels) fn load_u8x16(a: &[u8; 16]) -> uint8x16_t {
    // SAFETY: `a` is a reference to 16 readable bytes; vld1q_u8 has no alignment requirement.
    unsafe { vld1q_u8(a.as_ptr()) }
}

/// Loads 32 int8 as two vectors (one `ldp`).
#[inline]
#[target_feature(enable = "neon")]
pub(in crate::kernels) fn load_i8x16x2(a: &[i8; 32]) -> (int8x16_t, int8x16_t) {
    // SAFETY: both loads read inside the 32 bytes `a` refers to (offsets 0 and 16).
    unsafe { (vld1q_s8(a.as_ptr()), vld1q_s8(a.as_ptr().add(16))) }
}

/// Loads eight int16.
#[inline]
#[target_feature(enable = "neon")]
fn load_i16x8(a: &[i16; 8]) -> int16x8_t {
    // SAFETY: `a` is a reference to eight readable i16.
    unsafe { vld1q_s16(a.as_ptr()) }
}

/// Stores four floats.
#[inline]
#[target_feature(enable = "neon")]
fn store_f32x4(out: &mut [f32], v: float32x4_t) {
    let out: &mut [f32; 4] = (&mut out[..4]).try_into().expect("four outputs");
    // SAFETY: `out` is a reference to four writable f32.
    unsafe { vst1q_f32(out.as_mut_ptr(), v) }
}

/// The four row scales of a T2P block, fp16 -> f32 (exact; `fcvtl` on the u16 bits).
#[inline]
#[target_feature(enable = "neon")]
fn row_scales(d: &[u16; 4]) -> float32x4_t {
    // SAFETY: `d` is a reference to four readable u16.
    let bits = unsafe { vld1_u16(d.as_ptr()) };
    vcvt_f32_f16(vreinterpret_f16_u16(bits))
}

/// One fp16 scale -> f32 (exact), through the same vector conversion.
#[inline]
#[target_feature(enable = "neon")]
fn scale_f32(d: u16) -> f32 {
    vgetq_lane_f32::<0>(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(d))))
}

/// The oracle's float step for four lanes: `acc + dwdy * isum`, as separate multiply and add
/// (`dwdy` is already the rounded product `d_w * d_y`). Never `vfmaq`/`vmlaq`: a fused
/// multiply-add would round once instead of twice and differ from the oracle.
#[inline]
#[target_feature(enable = "neon")]
fn accumulate(acc: float32x4_t, dwdy: float32x4_t, isum: int32x4_t) -> float32x4_t {
    vaddq_f32(acc, vmulq_f32(dwdy, vcvtq_f32_s32(isum)))
}

/// A vector holding 64-bit half `LANE` of `v` twice ("dup8": the same eight activations for both
/// rows of a pair).
#[inline]
#[target_feature(enable = "neon")]
fn dup8<const LANE: i32>(v: int8x16_t) -> int8x16_t {
    vreinterpretq_s8_s64(vdupq_laneq_s64::<LANE>(vreinterpretq_s64_s8(v)))
}

/// The four 8-byte chunks of `a`, each dup8'ed (one `ldp` and four `dup`).
#[inline]
#[target_feature(enable = "neon")]
fn dup8x4(a: &[i8; 32]) -> [int8x16_t; 4] {
    let (y01, y23) = load_i8x16x2(a);
    [
        dup8::<0>(y01),
        dup8::<1>(y01),
        dup8::<0>(y23),
        dup8::<1>(y23),
    ]
}

/// Lane `lane` of `v` in every lane (`lane` is a constant after unrolling).
#[inline]
#[target_feature(enable = "neon")]
fn dup_lane_s32(v: int32x4_t, lane: usize) -> int32x4_t {
    match lane {
        0 => vdupq_laneq_s32::<0>(v),
        1 => vdupq_laneq_s32::<1>(v),
        2 => vdupq_laneq_s32::<2>(v),
        _ => vdupq_laneq_s32::<3>(v),
    }
}

/// Slot `s` of a T2P word, scaled in place: `v & 0x03` = u, `v & 0x0C` = 4u, `v & 0x30` = 16u,
/// and `v >> 6` = u for slot 3 (as a signed byte, `v & 0xC0` = 64u would read 128 as -128).
/// Every result is 0..=48, a non-negative int8.
#[inline]
#[target_feature(enable = "neon")]
fn slot_scaled(v: uint8x16_t, s: usize) -> int8x16_t {
    vreinterpretq_s8_u8(match s {
        0 => vandq_u8(v, vdupq_n_u8(0x03)),
        1 => vandq_u8(v, vdupq_n_u8(0x0C)),
        2 => vandq_u8(v, vdupq_n_u8(0x30)),
        _ => vshrq_n_u8::<6>(v),
    })
}

/// The sums of the 128 values of half `h` of each column of a `q8_K x4` block, from `bsums`:
/// `[column 0, 1, 2, 3]`.
///
/// int16 is exact up to the last step: a bsum is in -2048..=2032, a sum of four in
/// -8192..=8128; the final pairwise add widens.
#[inline]
#[target_feature(enable = "neon")]
fn tile_half_sums(yb: &BlockQ8Kx4, h: usize) -> int32x4_t {
    let b: &[[[i16; 8]; 2]; 4] = bytemuck::cast_ref(&yb.bsums); // [column][half]
    let c = |col: usize| load_i16x8(&b[col][h]);
    let q01 = vpaddq_s16(c(0), c(1)); // [column 0: 4 pair sums, column 1: 4]
    let q23 = vpaddq_s16(c(2), c(3));
    vpaddlq_s16(vpaddq_s16(q01, q23))
}

/// `v * w[lane]` (one `fmul` by element; `lane` is a constant after unrolling).
#[inline]
#[target_feature(enable = "neon")]
fn mul_lane_f32(v: float32x4_t, w: float32x4_t, lane: usize) -> float32x4_t {
    match lane {
        0 => vmulq_laneq_f32::<0>(v, w),
        1 => vmulq_laneq_f32::<1>(v, w),
        2 => vmulq_laneq_f32::<2>(v, w),
        _ => vmulq_laneq_f32::<3>(v, w),
    }
}

/// The gemm tile loop shared by all aarch64 paths. For every row group and every 4-column tile,
/// `block(x, y, sums)` returns the exact integer sums `[column c: rows 0..3]` of one T2P block
/// against half of a `q8_K x4` block (`y[c]` = 8-byte chunk `c` of the four columns, `sums` the
/// four columns' sums over that half); the float step follows the oracle. Only the `ncols` real
/// columns of the last, zero-padded tile are written.
#[inline]
#[target_feature(enable = "neon")]
fn gemm_tiles(
    g: Gemm<'_, BlockT2p, BlockQ8Kx4>,
    block: impl Fn(&BlockT2p, &[[i8; 32]; 16], int32x4_t) -> [int32x4_t; 4],
) {
    let (x, nb, y, ncols, out, ld) = g.into_parts();
    let half = nb / 2;
    for (g, group) in x.chunks_exact(nb).enumerate() {
        // Row group outer, tiles inner: the group's weights stay in L1 across the tiles.
        for (t, tile) in y.chunks_exact(half).enumerate() {
            let mut acc = [vdupq_n_f32(0.0); 4];
            // One block per iteration (not a pair sharing a q8_K x4 block): the 16 integer
            // accumulators and the 4 float ones then fit the registers without spills.
            for (b, blk) in group.iter().enumerate() {
                let (yb, h) = (&tile[b / 2], b % 2);
                let ys: &[[[i8; 32]; 16]; 2] = bytemuck::cast_ref(&yb.qs);
                let isum = block(blk, &ys[h], tile_half_sums(yb, h));
                let dw = row_scales(&blk.d);
                // SAFETY: `yb.d` is four readable f32.
                let dy = unsafe { vld1q_f32(yb.d.as_ptr()) };
                for (c, (acc, isum)) in acc.iter_mut().zip(isum).enumerate() {
                    *acc = accumulate(*acc, mul_lane_f32(dw, dy, c), isum);
                }
            }
            let real = ncols.saturating_sub(4 * t).min(4);
            for (c, a) in acc.iter().enumerate().take(real) {
                let o = (4 * t + c) * ld + 4 * g;
                store_f32x4(&mut out[o..o + 4], *a);
            }
        }
    }
}

/// The four slots of a T2P word as unscaled codes `u`: `v & 3`, `(v >> 2) & 3`, `(v >> 4) & 3`,
/// `v >> 6`.
#[inline]
#[target_feature(enable = "neon")]
fn slots(v: uint8x16_t) -> [int8x16_t; 4] {
    let m3 = vdupq_n_u8(3);
    [
        vandq_u8(v, m3),
        vandq_u8(vshrq_n_u8::<2>(v), m3),
        vandq_u8(vshrq_n_u8::<4>(v), m3),
        vshrq_n_u8::<6>(v),
    ]
    .map(|v| vreinterpretq_s8_u8(v))
}

/// Word `wd` of both row pairs of `x`, decoded to unscaled slots ([`slots`]): `u[p][s]`.
#[inline]
#[target_feature(enable = "neon")]
fn pair_slots<B: RowPairBlock>(x: &B, wd: usize) -> [[int8x16_t; 4]; 2] {
    [
        slots(load_u8x16(&x.words()[0][wd])),
        slots(load_u8x16(&x.words()[1][wd])),
    ]
}

/// One `q8_0` block of the gemv's column, laid out for the SDOT and `smlal` gemvs (built once
/// per call, amortised over every row group of the call, each of which reads the whole column): `qs[chunk]` is the 8-value chunk
/// twice (dup8: the operand that meets both rows of a pair), `start[j][p] = [-s_j, 0, -s_j, 0]`
/// the start value of quarter `j`'s accumulator of row pair `p` (after the pairwise add each row
/// holds `-s_j` once; stored per pair, so each chain starts from its own load rather than a
/// register copy), `d` the four scales.
#[derive(Clone, Copy)]
struct Q8_0Dup {
    qs: [[i8; 16]; 16],
    start: [[[i32; 4]; 2]; 4],
    d: [f32; 4],
}

per_call_layout!(Q8_0Dup);

impl Q8_0Dup {
    fn new(b: &BlockQ8_0Quad) -> Self {
        let mut t = Q8_0Dup {
            qs: [[0; 16]; 16],
            start: b.sums.map(|s| [[-s, 0, -s, 0]; 2]),
            d: b.d,
        };
        for (chunk, q) in t.qs.iter_mut().zip(b.qs.chunks_exact(8)) {
            chunk[..8].copy_from_slice(q);
            chunk[8..].copy_from_slice(q);
        }
        t
    }
}

/// The `q8_0` gemv shared by the aarch64 paths: `word(x, y, j)` gives the exact quarter sums
/// `i_j` of rows 0..3 (`dot(u, y) - sum(y)` over 32 weights); the float step is the oracle's
/// ([`fold_q8_0`]), each product and sum a separate `fmul`/`fadd`.
#[inline]
#[target_feature(enable = "neon")]
fn gemv_q8_0_dup<B: RowPairBlock>(
    x: &[B],
    nb: usize,
    y: &[Q8_0Dup],
    out: &mut [f32],
    word: impl Fn(&B, &Q8_0Dup, usize) -> int32x4_t,
) {
    for (group, o) in x.chunks_exact(nb).zip(out.chunks_exact_mut(ROWS_PER_T2P)) {
        let mut acc = vdupq_n_f32(0.0);
        for (blk, yb) in group.iter().zip(y) {
            let i = |j: usize| vcvtq_f32_s32(word(blk, yb, j));
            // SAFETY: `yb.d` is four readable f32.
            let d = unsafe { vld1q_f32(yb.d.as_ptr()) };
            let s01 = vaddq_f32(vmulq_laneq_f32::<0>(i(0), d), vmulq_laneq_f32::<1>(i(1), d));
            let (p2, p3) = (vmulq_laneq_f32::<2>(i(2), d), vmulq_laneq_f32::<3>(i(3), d));
            acc = fold_q8_0(
                B::HALVES,
                acc,
                [s01, p2, p3],
                |h| row_scales(blk.scales(h)),
                |a, b| vaddq_f32(a, b),
                |a, b| vmulq_f32(a, b),
            );
        }
        store_f32x4(o, acc);
    }
}

/// `q8_0` activations of one 4-column tile for one T2P block, laid out for SDOT and `smlal`
/// (built by [`with_q8_0_tiles`] once per gemm call).
///
/// `qs[chunk][c]` is column `c`'s 8-value chunk twice ("dup8", the operand that meets both rows
/// of a pair), stored so the tiles load it instead of spending a `dup` per column and slot.
/// `start[j][c][p] = [-s, 0, -s, 0]` (`s` = the sum of quarter `j` of column `c`) is the start
/// value of row pair `p`'s SDOT accumulator: after the pairwise add each row holds `-s` once.
/// It is stored once per pair so that each chain starts from its own load, not a register copy.
/// `d[j]` = the scales of quarter `j` of columns 0..3.
#[derive(Clone, Copy)]
struct Q8_0x4Dot {
    qs: [[[i8; 16]; 4]; 16],
    start: [[[[i32; 4]; 2]; 4]; 4],
    d: [[f32; 4]; 4],
}

per_call_layout!(Q8_0x4Dot);

impl Q8_0x4Dot {
    fn new(cols: [&BlockQ8_0Quad; 4]) -> Self {
        let mut t = Q8_0x4Dot {
            qs: [[[0; 16]; 4]; 16],
            start: [[[[0; 4]; 2]; 4]; 4],
            d: [[0.0; 4]; 4],
        };
        for (c, col) in cols.iter().enumerate() {
            for (chunk, q) in t.qs.iter_mut().zip(col.qs.chunks_exact(8)) {
                chunk[c][..8].copy_from_slice(q);
                chunk[c][8..].copy_from_slice(q);
            }
            for j in 0..4 {
                t.start[j][c] = [[-col.sums[j], 0, -col.sums[j], 0]; 2];
                t.d[j][c] = col.d[j];
            }
        }
        t
    }
}

/// Rearranges the `ncols * nb` column-major `q8_0` blocks of a gemm call into tile-major
/// `W`-column tiles built by `tile` (tile `t`, block `b` at `t * nb + b`; the last tile
/// zero-padded, which adds nothing to any sum and is never stored), then runs `f` on them.
///
/// This is done inside the kernel, once per call, into a per-thread buffer ([`with_layout`]):
/// the kernel signature (and so the driver and the C ABI) keeps the plain per-column `q8_0`
/// layout, and the cost (one pass over the activations) is amortised over every row group of the
/// call, each of which reads the whole buffer.
fn with_q8_0_tiles<T: Layout, R, const W: usize>(
    y: &[BlockQ8_0Quad],
    nb: usize,
    ncols: usize,
    tile: impl Fn([&BlockQ8_0Quad; W]) -> T,
    f: impl FnOnce(&[T]) -> R,
) -> R {
    let zero = BlockQ8_0Quad::default();
    let item = |i: usize| {
        let (t, b) = (i / nb, i % nb);
        tile(std::array::from_fn(|j| {
            let c = W * t + j;
            if c < ncols { &y[c * nb + b] } else { &zero }
        }))
    };
    with_layout(ncols.div_ceil(W) * nb, item, f)
}

/// Runs `f` on the `q8_0` gemv's column in the [`Q8_0Dup`] layout (one per block).
fn with_q8_0_dup<R>(y: &[BlockQ8_0Quad], f: impl FnOnce(&[Q8_0Dup]) -> R) -> R {
    with_layout(y.len(), |b| Q8_0Dup::new(&y[b]), f)
}

/// Runs `f` on the halves of `y` (the 128 activations of one T2P block each; `q8_K` or
/// `q8_K x4` blocks) in the layout `half(block, h)` builds, `2 * y.len()` in block order.
fn with_halves<B, T: Layout, R>(
    y: &[B],
    half: impl Fn(&B, usize) -> T,
    f: impl FnOnce(&[T]) -> R,
) -> R {
    with_layout(2 * y.len(), |i| half(&y[i / 2], i % 2), f)
}

/// The tile loop over activations laid out by the kernel itself (one `T` per T2P block and
/// 4-column tile, `nb` per tile; the `q8_0` tiles and the dotprod `q8_K` tile). For every row
/// group and every tile, `block(x, y, acc)` adds one T2P block's float terms to the tile's four
/// accumulators (in the path's own lane order, following the oracle's float order lane by lane)
/// and `columns` turns them into `[column c: rows 0..3]`. Only the `ncols` real columns are
/// stored.
#[inline]
#[target_feature(enable = "neon")]
fn gemm_local_tiles<B, T>(
    g: Gemm<'_, B, T>,
    block: impl Fn(&B, &T, [float32x4_t; 4]) -> [float32x4_t; 4],
    columns: impl Fn([float32x4_t; 4]) -> [float32x4_t; 4],
) {
    let (x, nb, tiles, ncols, out, ld) = g.into_parts();
    for (g, group) in x.chunks_exact(nb).enumerate() {
        // Row group outer, tiles inner: the group's weights stay in L1 across the tiles.
        for (t, tile) in tiles.chunks_exact(nb).enumerate() {
            let mut acc = [vdupq_n_f32(0.0); 4];
            for (blk, yb) in group.iter().zip(tile) {
                acc = block(blk, yb, acc);
            }
            let real = ncols.saturating_sub(4 * t).min(4);
            for (c, a) in columns(acc).iter().enumerate().take(real) {
                let o = (4 * t + c) * ld + 4 * g;
                store_f32x4(&mut out[o..o + 4], *a);
            }
        }
    }
}

/// The `q8_0` gemm on [`Q8_0x4Dot`] tiles of the SDOT and `smlal` paths ([`gemm_local_tiles`]).
/// Per T2P block and quarter (= word) `wd`, both row pairs are decoded once ([`pair_slots`]) and
/// `word(&u, tile, wd)`, the path's integer step, gives the exact sums `[column c: rows 0..3]`;
/// the float step ([`q8_0_fold_columns`]) adds the block's terms to the tile's accumulators.
#[inline]
#[target_feature(enable = "neon")]
fn gemm_q8_0_x4<B: RowPairBlock>(
    g: Gemm<'_, B, Q8_0x4Dot>,
    word: impl Fn(&[[int8x16_t; 4]; 2], &Q8_0x4Dot, usize) -> [int32x4_t; 4],
) {
    let block = |x: &B, y: &Q8_0x4Dot, acc: [float32x4_t; 4]| {
        let sums = |wd: usize| word(&pair_slots(x, wd), y, wd);
        let i = [sums(0), sums(1), sums(2), sums(3)];
        q8_0_fold_columns(acc, x, i, &y.d)
    };
    gemm_local_tiles(g, block, |a| a);
}

/// The `q8_0` float step of a tile block of `x` in `[column c: rows 0..3]` order: per column,
/// the oracle's fold ([`fold_q8_0`]) with `i[j][c]` the exact quarter sums and `d[j]` the
/// quarter's four column scales; separate `fmul`/`fadd` as in the oracle.
#[inline]
#[target_feature(enable = "neon")]
fn q8_0_fold_columns<B: RowPairBlock>(
    acc: [float32x4_t; 4],
    x: &B,
    i: [[int32x4_t; 4]; 4],
    d: &[[f32; 4]; 4],
) -> [float32x4_t; 4] {
    // SAFETY: each `d[j]` is four readable f32.
    let d = d.each_ref().map(|dj| unsafe { vld1q_f32(dj.as_ptr()) });
    let dw = [0, B::HALVES - 1].map(|h| row_scales(x.scales(h)));
    std::array::from_fn(|c| {
        let term = |j: usize| mul_lane_f32(vcvtq_f32_s32(i[j][c]), d[j], c);
        fold_q8_0(
            B::HALVES,
            acc[c],
            [vaddq_f32(term(0), term(1)), term(2), term(3)],
            |h| dw[h],
            |a, b| vaddq_f32(a, b),
            |a, b| vmulq_f32(a, b),
        )
    })
}

/// Shared pieces of the stock-layout (pq2_0 as in the file) vec_dot: the ggml NEON decode of
/// 16 weights, table lookup, shift, mask, subtract 1.
mod stock {
    use core::arch::aarch64::*;

    use crate::format::{BlockPq2_0, BlockQ8K};

    /// `tbl` indices: group `q` of 16 weights (`16q..16q+16` of a 64-weight half) reads bytes
    /// `4q..4q+4`, each four times.
    const IDX: [[u8; 16]; 4] =
        crate::kernels::const_table!([[u8; 16]; 4], |q, l| (4 * q + l / 4) as u8);
    /// Per-lane right shifts (negative left shifts) `2 * (lane % 4)`.
    const SHIFTS: [i8; 16] = [0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6, 0, -2, -4, -6];

    /// The decode constants, loaded once per call.
    pub(super) struct Consts {
        idx: [uint8x16_t; 4],
        shifts: int8x16_t,
    }

    impl Consts {
        #[inline]
        #[target_feature(enable = "neon")]
        pub(super) fn new() -> Self {
            Consts {
                idx: IDX.map(|i| super::load_u8x16(&i)),
                // SAFETY: SHIFTS is 16 readable bytes.
                shifts: unsafe { vld1q_s8(SHIFTS.as_ptr()) },
            }
        }

        /// Weights `16q..16q+16` of the 64 whose codes are in `raw` (16 bytes), as int8
        /// `code - 1` in -1..=2.
        #[inline]
        #[target_feature(enable = "neon")]
        pub(super) fn decode(&self, raw: uint8x16_t, q: usize) -> int8x16_t {
            let spread = vqtbl1q_u8(raw, self.idx[q]);
            let codes = vandq_u8(vshlq_u8(spread, self.shifts), vdupq_n_u8(3));
            vsubq_s8(vreinterpretq_s8_u8(codes), vdupq_n_s8(1))
        }
    }

    /// ggml's stock-layout vec_dot loop, shared by the NEON and SDOT paths: each pq2_0 block of
    /// `x` (two per `q8_K` block of `y`) decoded 16 weights at a time, `step(acc, w, y)` meeting
    /// them with their activations in two independent chains (starting at `zero`; two chains so
    /// the multiply-adds overlap), `isum` the block's exact integer sum of both; then ggml's
    /// float step, one block at a time.
    #[inline]
    #[target_feature(enable = "neon")]
    pub(super) fn vec_dot<A: Copy>(
        x: &[BlockPq2_0],
        y: &[BlockQ8K],
        zero: A,
        step: impl Fn(A, int8x16_t, int8x16_t) -> A,
        isum: impl Fn(A, A) -> i32,
    ) -> f32 {
        let k = Consts::new();
        let mut acc = 0.0f32;
        for (pair, yb) in x.chunks_exact(2).zip(y) {
            let ys: &[[[i8; 32]; 4]; 2] = bytemuck::cast_ref(&yb.qs);
            for (blk, ys) in pair.iter().zip(ys) {
                let raw: &[[u8; 16]; 2] = bytemuck::cast_ref(&blk.qs);
                let mut s = [zero; 2];
                for (half, raw) in raw.iter().enumerate() {
                    let raw = super::load_u8x16(raw);
                    for j in 0..2 {
                        let (y0, y1) = super::load_i8x16x2(&ys[2 * half + j]);
                        s[0] = step(s[0], k.decode(raw, 2 * j), y0);
                        s[1] = step(s[1], k.decode(raw, 2 * j + 1), y1);
                    }
                }
                acc += (super::scale_f32(blk.d) * yb.d) * isum(s[0], s[1]) as f32;
            }
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Gemm, Isa, Kernels};
    use crate::format::{
        BlockPq2_0, BlockQ8K, BlockT2p, f32_to_f16, interleave_q8k_x4, repack_pq2_0_to_t2p,
    };

    /// The aarch64 paths this CPU runs.
    fn paths() -> Vec<&'static Kernels> {
        [Isa::Neon, Isa::NeonDotprod, Isa::NeonI8mm]
            .into_iter()
            .filter_map(|isa| Kernels::for_isa(isa).ok())
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// The integer bounds the kernels argue for, at their extremes: every code one value (3 is
    /// +2, the largest product with -128), every activation -128 or +127, unit scales so the
    /// outputs are the exact sums, through gemv, a padded 3-column gemm and the stock vec_dot.
    #[test]
    fn extreme_codes_and_activations_are_exact() {
        let (rows, k) = (8, 512);
        for code in 0..4u8 {
            for act in [-128i8, 127, -1] {
                let pq =
                    vec![BlockPq2_0::from_codes(&[code; 128], f32_to_f16(1.0)); rows * k / 128];
                let mut w = vec![BlockT2p::default(); rows * k / 512];
                repack_pq2_0_to_t2p(&pq, rows, k, &mut w).unwrap();
                let y = vec![BlockQ8K::from_qs([act; 256], 1.0); k / 256];
                let exact = (code as f32 - 1.0) * act as f32 * k as f32;
                let zero = BlockQ8K::default();
                let x4: Vec<_> = y
                    .iter()
                    .map(|b| interleave_q8k_x4([b, b, b, &zero]))
                    .collect();
                for kern in paths() {
                    let mut out = vec![0.0; rows];
                    kern.gemv(&w, k / 128, &y, &mut out);
                    assert!(
                        out.iter().all(|&v| v == exact),
                        "{} gemv {code} {act}",
                        kern.isa()
                    );
                    let mut out = vec![f32::NAN; 4 * rows];
                    kern.gemm(Gemm {
                        x: &w,
                        nb: k / 128,
                        y: &x4,
                        ncols: 3,
                        out: &mut out,
                        ld: rows,
                    });
                    assert!(
                        out[..3 * rows].iter().all(|&v| v == exact),
                        "{} gemm",
                        kern.isa()
                    );
                    assert!(
                        out[3 * rows..].iter().all(|v| v.is_nan()),
                        "padding written"
                    );
                    let stock = kern.vec_dot_stock(&pq[..k / 128], &y);
                    assert_eq!(stock, exact, "{} stock {code} {act}", kern.isa());
                }
            }
        }
    }

    /// Random codes, activations and scales (zero and negative scales included): bit-identical
    /// to the oracle on every aarch64 path, for gemv, gemm and the stock vec_dot.
    #[test]
    fn random_blocks_match_the_oracle_bit_for_bit() {
        let (rows, k) = (8, 768);
        let mut s = 0x1234_5678_u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let pq: Vec<BlockPq2_0> = (0..rows * k / 128)
            .map(|_| {
                let codes = std::array::from_fn(|_| (next() % 4) as u8);
                let d = f32_to_f16((next() % 2001) as f32 / 1000.0 - 1.0);
                BlockPq2_0::from_codes(&codes, d)
            })
            .collect();
        let mut w = vec![BlockT2p::default(); rows * k / 512];
        repack_pq2_0_to_t2p(&pq, rows, k, &mut w).unwrap();
        let cols: Vec<Vec<BlockQ8K>> = (0..4)
            .map(|_| {
                (0..k / 256)
                    .map(|_| {
                        let d = (next() % 1000) as f32 / 997.0 + 0.001;
                        BlockQ8K::from_qs(std::array::from_fn(|_| next() as i8), d)
                    })
                    .collect()
            })
            .collect();
        let x4: Vec<_> = (0..k / 256)
            .map(|b| interleave_q8k_x4([&cols[0][b], &cols[1][b], &cols[2][b], &cols[3][b]]))
            .collect();
        let oracle = Kernels::for_isa(Isa::Scalar).unwrap();
        let mut want_v = vec![0.0; rows];
        oracle.gemv(&w, k / 128, &cols[0], &mut want_v);
        let mut want_m = vec![0.0; 4 * rows];
        oracle.gemm(Gemm {
            x: &w,
            nb: k / 128,
            y: &x4,
            ncols: 4,
            out: &mut want_m,
            ld: rows,
        });
        let want_s: Vec<f32> = (0..rows)
            .map(|r| oracle.vec_dot_stock(&pq[r * k / 128..(r + 1) * k / 128], &cols[0]))
            .collect();
        for kern in paths() {
            let mut got = vec![0.0; rows];
            kern.gemv(&w, k / 128, &cols[0], &mut got);
            assert_eq!(bits(&got), bits(&want_v), "{} gemv", kern.isa());
            let mut got = vec![0.0; 4 * rows];
            kern.gemm(Gemm {
                x: &w,
                nb: k / 128,
                y: &x4,
                ncols: 4,
                out: &mut got,
                ld: rows,
            });
            assert_eq!(bits(&got), bits(&want_m), "{} gemm", kern.isa());
            let got: Vec<f32> = (0..rows)
                .map(|r| kern.vec_dot_stock(&pq[r * k / 128..(r + 1) * k / 128], &cols[0]))
                .collect();
            assert_eq!(bits(&got), bits(&want_s), "{} stock", kern.isa());
        }
    }

    /// Detection is consistent: i8mm implies dotprod implies NEON among the paths offered.
    #[test]
    fn paths_follow_detection() {
        let has = |isa| Kernels::for_isa(isa).is_ok();
        assert!(has(Isa::Neon), "NEON is part of every aarch64 Linux target");
        assert_eq!(
            has(Isa::NeonDotprod),
            std::arch::is_aarch64_feature_detected!("dotprod")
        );
        assert_eq!(
            has(Isa::NeonI8mm),
            std::arch::is_aarch64_feature_detected!("dotprod")
                && std::arch::is_aarch64_feature_detected!("i8mm")
        );
    }
}
