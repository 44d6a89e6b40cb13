//! x86_64 AVX2 + F16C kernels: `maddubs` on slot-masked T2P words.
//!
//! **Register layout.** One 256-bit register holds word `wd` of row pair 0 in its low lane and
//! word `wd` of row pair 1 in its high lane (lane = row pair). A slot of that register is then
//! `[row 0: 8 codes | row 1: 8 codes | row 2: 8 codes | row 3: 8 codes]`, all for the same 8
//! weights `k = 8c .. 8c + 8` (`c = 4*wd + s`), so the activation operand is those 8 bytes in
//! every 64-bit quarter ("dup8" in both halves of both lanes). That operand is exactly what one
//! `vpbroadcastq` from the `q8_K` bytes produces, so the activations need no scratch copy: the
//! column (or the `q8_K x4` tile, whose 8-byte chunks are already per column) is read in place,
//! and the arrangement costs one broadcast load per operand, no shuffles.
//!
//! **Exactness.** `maddubs(a, b)` multiplies unsigned bytes `a` by signed bytes `b` and adds
//! adjacent pairs into int16 *with saturation*, so every int16 sum is bounded below:
//! codes are `u <= 3` (code 3, weight +2, is legal) and activations `|y| <= 128` (-128 is legal in
//! raw `q8_K`). The slot-3 mask `0xC0` would give `192 * 127 * 2 = 48768` and saturate, so slot 3
//! is always shifted down first.
//!
//! Float semantics equal the oracle's: per 128-weight block and row,
//! `acc = acc + (d_w * d_y) * (isum as f32)`, two separately rounded IEEE operations (`mulps`,
//! `addps`; no FMA), in block order; with q8_0 activations the four scaled 32-weight sums of
//! [`super::scalar::accumulate_q8_0`], in the same order.

use std::arch::x86_64::*;

use super::{Isa, Kernels};
use crate::format::{BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, ROWS_PER_T2P};

static KERNELS: Kernels = Kernels {
    isa: Isa::Avx2,
    gemv,
    gemm,
    gemv_q8_0,
    gemm_q8_0,
    vec_dot_stock,
};

/// The AVX2 kernels, if this CPU has AVX2 and F16C. The safe wrappers in [`KERNELS`] are only
/// reachable through here, which is what makes their `unsafe` calls sound.
pub(super) fn kernels() -> Option<&'static Kernels> {
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c") {
        Some(&KERNELS)
    } else {
        None
    }
}

fn gemv(x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]) {
    // SAFETY: KERNELS is only handed out by `kernels()`, after AVX2 and F16C were detected.
    unsafe { gemv_avx2(x, nb, y, out) }
}

fn gemm(x: &[BlockT2p], nb: usize, y: &[BlockQ8Kx4], ncols: usize, out: &mut [f32], ld: usize) {
    // SAFETY: as in `gemv`, the CPU features were detected before KERNELS could be reached.
    unsafe { gemm_avx2(x, nb, y, ncols, out, ld) }
}

fn gemv_q8_0(x: &[BlockT2p], nb: usize, y: &[BlockQ8_0Quad], out: &mut [f32]) {
    // SAFETY: as in `gemv`, the CPU features were detected before KERNELS could be reached.
    unsafe { gemv_q8_0_impl(x, nb, y, out) }
}

fn gemm_q8_0(
    x: &[BlockT2p],
    nb: usize,
    y: &[BlockQ8_0Quad],
    ncols: usize,
    out: &mut [f32],
    ld: usize,
) {
    // SAFETY: as in `gemv`, the CPU features were detected before KERNELS could be reached.
    unsafe { gemm_q8_0_impl(x, nb, y, ncols, out, ld) }
}

pub(super) fn vec_dot_stock(x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32 {
    // SAFETY: as in `gemv`, the CPU features were detected before KERNELS could be reached.
    unsafe { vec_dot_stock_avx2(x, y) }
}

/// Word `wd` of both row pairs: low lane = pair 0 (rows 0, 1), high lane = pair 1 (rows 2, 3).
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) fn load_word(blk: &BlockT2p, wd: usize) -> __m256i {
    let lo: &[u8; 16] = &blk.qs[0][wd];
    let hi: &[u8; 16] = &blk.qs[1][wd];
    // SAFETY: both pointers come from 16-byte arrays, and loadu has no alignment requirement.
    unsafe { _mm256_loadu2_m128i(hi.as_ptr().cast(), lo.as_ptr().cast()) }
}

/// The 8 bytes in every 64-bit quarter of a register ("dup8" in both lanes).
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) fn bcast8(chunk: &[i8; 8]) -> __m256i {
    // SAFETY: loadl_epi64 reads exactly the 8 bytes of `chunk`, unaligned.
    unsafe { _mm256_broadcastq_epi64(_mm_loadl_epi64(chunk.as_ptr().cast())) }
}

/// `[d0, d1, d2, d3]` of a T2P block as f32 (F16C conversion is exact).
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) fn scales(blk: &BlockT2p) -> __m128 {
    let d: &[u16; 4] = &blk.d;
    // SAFETY: reads the 8 bytes of `d`, unaligned.
    unsafe { _mm_cvtph_ps(_mm_loadl_epi64(d.as_ptr().cast())) }
}

/// 8-byte chunk `c` (0..16) of a 128-value activation half.
#[inline(always)]
pub(super) fn chunk8(ys: &[i8; 128], c: usize) -> &[i8; 8] {
    ys[8 * c..8 * c + 8].try_into().expect("8 bytes")
}

/// Activation half `h` (0 or 1) of a `q8_K` block: the 128 values one T2P block multiplies.
#[inline(always)]
pub(super) fn half(yb: &BlockQ8K, h: usize) -> &[i8; 128] {
    yb.qs[128 * h..128 * h + 128]
        .try_into()
        .expect("128 values")
}

/// T2P gemv.
///
/// Per word the 5-op slot split `s0 = v & 3`, `s1 = v & 0xC`, `t = v >> 4`, `s2 = t & 3`,
/// `s3 = t & 0xC` gives `u` (slots 0, 2) and `4u` (slots 1, 3). Slots of equal scale share an
/// int16 accumulator: `a` sums 8 `maddubs` of `u` (each pair `|.| <= 2*3*128 = 768`, total
/// `<= 6144`), `b` sums 8 of `4u` (`<= 2*12*128*8 = 24576`), both below 32767, so no `maddubs`
/// saturates and no int16 add wraps. `madd_epi16` then widens with weights 4 and 1:
/// `4a + b = 4 * dot(u, y)` per row in int32, and `dot(w, y) = dot(u, y) - sum(y)` with `sum(y)`
/// from `bsums`; the division by 4 is an exact arithmetic shift.
#[target_feature(enable = "avx2,f16c")]
unsafe fn gemv_avx2(x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]) {
    // SAFETY: this function has the AVX2 and F16C features the loop needs.
    unsafe { gemv_q8k_loop::<2>(x, nb, y, out, |blk, ys| block_u4(blk, ys)) }
}

/// The `q8_K` gemv of the x86 paths around a block dot `block(blk, ys)` =
/// `2^SHIFT * dot(u, y)` as `[r0, r0, r1, r1 | r2, r2, r3, r3]`: `-2^SHIFT * sum(y)` per
/// 128-value half once per call, for up to [`SUM_CHUNK`] blocks at a time on the stack (longer
/// rows resume each row group's sum from `out`, so the float order is that of one pass), the
/// next row group prefetched, and [`fold_block_pair`] per pair of blocks.
///
/// # Safety
/// The CPU must have AVX2 and F16C (the callers are compiled for them and inline this loop).
#[inline(always)]
pub(super) unsafe fn gemv_q8k_loop<const SHIFT: i32>(
    x: &[BlockT2p],
    nb: usize,
    y: &[BlockQ8K],
    out: &mut [f32],
    block: impl Fn(&BlockT2p, &[i8; 128]) -> __m256i,
) {
    let mut neg_ysum = [0i32; SUM_CHUNK];
    for c0 in (0..nb).step_by(SUM_CHUNK) {
        let blocks = c0..(c0 + SUM_CHUNK).min(nb);
        for (n, b) in neg_ysum.iter_mut().zip(blocks.clone()) {
            *n = -(1 << SHIFT) * y[b / 2].half_sum(b % 2);
        }
        let ys = &y[c0 / 2..blocks.end / 2];
        let groups = x.chunks_exact(nb).zip(out.chunks_exact_mut(ROWS_PER_T2P));
        for (g, (group, o)) in groups.enumerate() {
            let o: &mut [f32; 4] = o.try_into().expect("4 rows");
            // SAFETY (this and the other calls below): the caller guarantees AVX2 and F16C.
            let mut acc = unsafe { resume_rows(o, c0 == 0) };
            // Blocks 2i and 2i + 1 read the two halves of q8_K block i (nb is even): their
            // reductions and float steps share 256-bit instructions; the two float additions
            // into `acc` stay separate and in block order.
            let pairs = group[blocks.clone()].chunks_exact(2).zip(ys);
            for (i, ((pair, yb), nys)) in pairs.zip(neg_ysum.chunks_exact(2)).enumerate() {
                super::prefetch::blocks::<2>(x, (g + 1) * nb + c0 + 2 * i);
                let s0 = block(&pair[0], half(yb, 0));
                let s1 = block(&pair[1], half(yb, 1));
                // SAFETY: as above.
                acc = unsafe { fold_block_pair::<SHIFT>(acc, pair, yb.d, s0, s1, nys) };
            }
            // SAFETY: writes exactly the 4 floats of `o`, unaligned.
            unsafe { _mm_storeu_ps(o.as_mut_ptr(), acc) };
        }
    }
}

/// Blocks (even) whose activation sums [`gemv_q8k_loop`] holds at once.
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

/// The float steps of blocks `2i` and `2i + 1` of a gemv row group (the two halves of one
/// `q8_K` block, scale `d_y`): `s0`, `s1` hold `2^SHIFT * dot(u, y)` of the two blocks as
/// `[r0, r0, r1, r1 | r2, r2, r3, r3]`, `neg_ysum` their `-2^SHIFT * sum(y)`. Adds
/// `(d_w * d_y) * isum` of block `2i`, then of block `2i + 1`, to `acc` (the reductions share
/// 256-bit instructions; the two float additions stay separate and in block order).
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) fn fold_block_pair<const SHIFT: i32>(
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
    // Exact: `h + ys` is 2^SHIFT times an integer.
    let isum = _mm256_srai_epi32::<SHIFT>(_mm256_add_epi32(h, ys));
    let d0: &[u16; 4] = &pair[0].d;
    let d1: &[u16; 4] = &pair[1].d;
    // SAFETY: each load reads the 8 bytes of one `d` array, unaligned.
    let dh = unsafe {
        _mm_unpacklo_epi64(
            _mm_loadl_epi64(d0.as_ptr().cast()),
            _mm_loadl_epi64(d1.as_ptr().cast()),
        )
    };
    let scale = _mm256_mul_ps(_mm256_cvtph_ps(dh), _mm256_set1_ps(d_y));
    let prod = _mm256_mul_ps(scale, _mm256_cvtepi32_ps(isum));
    let acc = _mm_add_ps(acc, _mm256_castps256_ps128(prod));
    _mm_add_ps(acc, _mm256_extractf128_ps::<1>(prod))
}

/// `4 * dot(u, y)` of one T2P block with its 128 activations, as int32
/// `[r0, r0, r1, r1 | r2, r2, r3, r3]` (each row split over two lanes); see [`gemv_avx2`].
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn block_u4(blk: &BlockT2p, ys: &[i8; 128]) -> __m256i {
    let m03 = _mm256_set1_epi8(0x03);
    let m0c = _mm256_set1_epi8(0x0C);
    let mut a = _mm256_setzero_si256();
    let mut bq = _mm256_setzero_si256();
    for wd in 0..4 {
        let v = load_word(blk, wd);
        let t = _mm256_srli_epi16::<4>(v);
        let s0 = _mm256_and_si256(v, m03);
        let s1 = _mm256_and_si256(v, m0c);
        let s2 = _mm256_and_si256(t, m03);
        let s3 = _mm256_and_si256(t, m0c);
        let c = 4 * wd;
        let p0 = _mm256_maddubs_epi16(s0, bcast8(chunk8(ys, c)));
        let p1 = _mm256_maddubs_epi16(s1, bcast8(chunk8(ys, c + 1)));
        let p2 = _mm256_maddubs_epi16(s2, bcast8(chunk8(ys, c + 2)));
        let p3 = _mm256_maddubs_epi16(s3, bcast8(chunk8(ys, c + 3)));
        a = _mm256_add_epi16(a, _mm256_add_epi16(p0, p2));
        bq = _mm256_add_epi16(bq, _mm256_add_epi16(p1, p3));
    }
    _mm256_add_epi32(
        _mm256_madd_epi16(a, _mm256_set1_epi16(4)),
        _mm256_madd_epi16(bq, _mm256_set1_epi16(1)),
    )
}

/// T2P gemm on `q8_K x4` tiles: each decoded slot register serves all four columns.
///
/// The word-pair layout of the `q8_0` kernels ([`super::x86_q8_0`]): one 256-bit load holds
/// words `2q`, `2q + 1` of a row pair, decoded once to plain `u` (`(v >> 2s) & 3`); the
/// activation operands (chunk `8q + s` in the low lane, `8q + 4 + s` in the high lane) are
/// gathered from the tile once per call. One int16 accumulator per column and row pair sums the
/// 16 `maddubs` of a block: each pair is `|.| <= 2*3*128 = 768`, so the total is `<= 12288`, and
/// the `hadd` of the two row pairs `<= 24576` (no saturation, no wrap). `madd` by ones gives
/// `[words 0, 2: r0..r3 | words 1, 3: r0..r3]` per column; a lane permute and an add per column
/// pair give `[c: r0..r3 | c': r0..r3]`, then `- sum(y)` and the oracle's float step
/// `acc + (d_w * d_y) * isum`. Two tiles (8 columns) share one pass over the weights, so a
/// verification of up to 8 tokens reads each weight byte once; loop order: tile pair, then row
/// group, so the operands stay in cache while the weights stream.
#[target_feature(enable = "avx2,f16c")]
unsafe fn gemm_avx2(
    x: &[BlockT2p],
    nb: usize,
    y: &[BlockQ8Kx4],
    ncols: usize,
    out: &mut [f32],
    ld: usize,
) {
    use super::x86_q8_0::MAX_TILE_COLS;
    let half_n = nb / 2;
    let (mut tile_ops, mut pair_f) = (TILE_OPS.take(), PAIR_F.take());
    tile_ops.reserve(nb.max(super::x86_q8_0::MIN_BLOCKS));
    pair_f.reserve(nb.max(super::x86_q8_0::MIN_BLOCKS));
    let tiles_per_pass = MAX_TILE_COLS / 4;
    let ntiles = ncols.div_ceil(4);
    for t0 in (0..ntiles).step_by(tiles_per_pass) {
        let real = (ncols - 4 * t0).min(MAX_TILE_COLS);
        // Columns past the last real tile read that tile's zero-padded column 3 and are not
        // stored.
        let last = ntiles - 1;
        let at = |c: usize| {
            let t = (t0 + c / 4).min(last);
            let col = if t0 + c / 4 > last { 3 } else { c % 4 };
            (&y[t * half_n..(t + 1) * half_n], col)
        };
        tile_ops.clear();
        pair_f.clear();
        for b in 0..nb {
            let h = b % 2;
            let chunk = |c: usize, ch: usize| {
                let (tile, col) = at(c);
                let off = 32 * (16 * h + ch) + 8 * col;
                let v: [i8; 8] = tile[b / 2].qs[off..off + 8].try_into().expect("8 bytes");
                i64::from_le_bytes(v.map(|v| v as u8))
            };
            tile_ops.push(std::array::from_fn(|c| {
                std::array::from_fn(|q| {
                    std::array::from_fn(|s| {
                        let (lo, hi) = (chunk(c, 8 * q + s), chunk(c, 8 * q + 4 + s));
                        _mm256_setr_epi64x(lo, lo, hi, hi)
                    })
                })
            }));
            pair_f.push(std::array::from_fn(|cp| {
                let f = |c: usize| {
                    let (tile, col) = at(c);
                    let yb = &tile[b / 2];
                    (-yb.half_sum(col, h), yb.d[col])
                };
                let ((sa, da), (sz, dz)) = (f(2 * cp), f(2 * cp + 1));
                (
                    _mm256_setr_epi32(sa, sa, sa, sa, sz, sz, sz, sz),
                    _mm256_setr_ps(da, da, da, da, dz, dz, dz, dz),
                )
            }));
        }
        let c0 = 4 * t0;
        // SAFETY: same CPU features as this function.
        unsafe {
            match real.div_ceil(2) {
                1 => gemm_q8k_tile::<1>(x, nb, &tile_ops, &pair_f, out, ld, c0, real),
                2 => gemm_q8k_tile::<2>(x, nb, &tile_ops, &pair_f, out, ld, c0, real),
                3 => gemm_q8k_tile::<3>(x, nb, &tile_ops, &pair_f, out, ld, c0, real),
                _ => gemm_q8k_tile::<4>(x, nb, &tile_ops, &pair_f, out, ld, c0, real),
            }
        }
    }
    TILE_OPS.set(tile_ops);
    PAIR_F.set(pair_f);
}

/// One `q8_K x4` tile (`2 * NP` columns computed, `real` stored) over all row groups; see
/// [`gemm_avx2`].
#[target_feature(enable = "avx2,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_q8k_tile<const NP: usize>(
    x: &[BlockT2p],
    nb: usize,
    tile_ops: &[[[[__m256i; 4]; 2]; super::x86_q8_0::MAX_TILE_COLS]],
    pair_f: &[[(__m256i, __m256); super::x86_q8_0::MAX_TILE_COLS / 2]],
    out: &mut [f32],
    ld: usize,
    c0: usize,
    real: usize,
) {
    use super::x86_q8_0::{load_word_pair, scales_twice, slots_u};
    let ones = _mm256_set1_epi16(1);
    for (g, group) in x.chunks_exact(nb).enumerate() {
        let mut acc = [_mm256_setzero_ps(); NP];
        for (i, ((blk, ops), pf)) in group.iter().zip(tile_ops).zip(pair_f).enumerate() {
            super::prefetch::blocks::<1>(x, (g + 1) * nb + i);
            // Per word pair: decode both row pairs once, then per column the 8 `maddubs` and
            // their reduction (keeps 8 decoded + 4 accumulator registers live).
            let mut m = [_mm256_setzero_si256(); super::x86_q8_0::MAX_TILE_COLS];
            for q in 0..2 {
                let u = [
                    slots_u(load_word_pair(blk, 0, q)),
                    slots_u(load_word_pair(blk, 1, q)),
                ];
                for (m, ops) in m.iter_mut().zip(ops).take(2 * NP) {
                    let x = u.map(|u| {
                        let p01 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(u[0], ops[q][0]),
                            _mm256_maddubs_epi16(u[1], ops[q][1]),
                        );
                        let p23 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(u[2], ops[q][2]),
                            _mm256_maddubs_epi16(u[3], ops[q][3]),
                        );
                        _mm256_add_epi16(p01, p23)
                    });
                    let w = _mm256_madd_epi16(_mm256_hadd_epi16(x[0], x[1]), ones);
                    *m = if q == 0 { w } else { _mm256_add_epi32(*m, w) };
                }
            }
            let dw = scales_twice(blk);
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
        let mut l = [[0.0f32; 8]; NP];
        for (l, acc) in l.iter_mut().zip(acc) {
            // SAFETY: writes exactly the 8 floats of `l`, unaligned.
            unsafe { _mm256_storeu_ps(l.as_mut_ptr(), acc) };
        }
        for c in 0..real {
            let base = (c0 + c) * ld + ROWS_PER_T2P * g;
            let h = 4 * (c % 2);
            out[base..base + 4].copy_from_slice(&l[c / 2][h..h + 4]);
        }
    }
}

/// `dot(u, y)` per row and word of words `2q`, `2q + 1` (see [`super::x86_q8_0`]): per row pair,
/// the slot split of [`block_u4`] (`s0 = v & 3`, `s1 = v & 0xC`, `s2 = t & 3`, `s3 = t & 0xC`,
/// `t = v >> 4`) and four `maddubs` against the table operands. Each int16 pair is
/// `|.| <= 2*3*128 = 768` for slots 0, 2 and `<= 2*12*128 = 3072` for the `4u` slots 1, 3, so
/// nothing saturates; `p1 + p3` (`<= 6144`) is a multiple of 4, so `>> 2` is exact and the word
/// sum `p0 + p2 + (p1 + p3) / 4` is `<= 3072`. `hadd` of the two row pairs (`<= 6144`) and
/// `madd` by ones give `[w2q: r0, r1, r2, r3 | w2q+1: r0, r1, r2, r3]` in int32.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn pair_dot(blk: &BlockT2p, q: usize, ops: &[__m256i; 4]) -> __m256i {
    let m03 = _mm256_set1_epi8(0x03);
    let m0c = _mm256_set1_epi8(0x0C);
    let x: [__m256i; 2] = std::array::from_fn(|p| {
        let v = super::x86_q8_0::load_word_pair(blk, p, q);
        let t = _mm256_srli_epi16::<4>(v);
        let p0 = _mm256_maddubs_epi16(_mm256_and_si256(v, m03), ops[0]);
        let p1 = _mm256_maddubs_epi16(_mm256_and_si256(v, m0c), ops[1]);
        let p2 = _mm256_maddubs_epi16(_mm256_and_si256(t, m03), ops[2]);
        let p3 = _mm256_maddubs_epi16(_mm256_and_si256(t, m0c), ops[3]);
        _mm256_add_epi16(
            _mm256_add_epi16(p0, p2),
            _mm256_srai_epi16::<2>(_mm256_add_epi16(p1, p3)),
        )
    });
    _mm256_madd_epi16(_mm256_hadd_epi16(x[0], x[1]), _mm256_set1_epi16(1))
}

/// [`pair_dot`] from decoded slots (plain `u`, shared by the columns of a gemm tile): per row
/// pair four `maddubs` summed in int16 (`<= 4 * 768 = 3072`), then `hadd` and `madd` as there.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn slots_dot(u: &[[__m256i; 4]; 2], ops: &[__m256i; 4]) -> __m256i {
    let x = u.map(|u| {
        let p01 = _mm256_add_epi16(
            _mm256_maddubs_epi16(u[0], ops[0]),
            _mm256_maddubs_epi16(u[1], ops[1]),
        );
        let p23 = _mm256_add_epi16(
            _mm256_maddubs_epi16(u[2], ops[2]),
            _mm256_maddubs_epi16(u[3], ops[3]),
        );
        _mm256_add_epi16(p01, p23)
    });
    _mm256_madd_epi16(_mm256_hadd_epi16(x[0], x[1]), _mm256_set1_epi16(1))
}

super::x86_q8_0::q8_0_kernels!("avx2,f16c");

/// The stock algorithm on `pq2_0` as it sits in the file, ported to AVX2 as ggml would: unpack
/// the 2-bit codes with shift + mask, restore weight order with byte/word unpacks, subtract 1,
/// then a signed dot product. The signed dot uses `maddubs(|y|, sign(w, y))` rather than ggml's
/// usual `maddubs(|w|, sign(y, w))`: the latter negates -128 (legal in raw `q8_K`) to -128, while
/// `|y| = 128` is a valid unsigned byte, so this form is exact (`2*128*2 = 512` per int16 pair,
/// 4 summed `<= 2048`).
#[target_feature(enable = "avx2,f16c")]
unsafe fn vec_dot_stock_avx2(x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let one8 = _mm256_set1_epi8(1);
    let ones = _mm256_set1_epi16(1);
    let mut acc = 0.0f32;
    for (b, blk) in x.iter().enumerate() {
        let yb = &y[b / 2];
        let ys = half(yb, b % 2);
        let qs: &[u8; 32] = &blk.qs;
        // SAFETY: reads the 32 bytes of `qs`, unaligned.
        let q = unsafe { _mm256_loadu_si256(qs.as_ptr().cast()) };
        // Byte i of c_s holds the code of weight 4i + s (per 128-bit lane).
        let c0 = _mm256_and_si256(q, m3);
        let c1 = _mm256_and_si256(_mm256_srli_epi16::<2>(q), m3);
        let c2 = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m3);
        let c3 = _mm256_and_si256(_mm256_srli_epi16::<6>(q), m3);
        let lo01 = _mm256_unpacklo_epi8(c0, c1);
        let hi01 = _mm256_unpackhi_epi8(c0, c1);
        let lo23 = _mm256_unpacklo_epi8(c2, c3);
        let hi23 = _mm256_unpackhi_epi8(c2, c3);
        // Per lane (lane 0: weights 0..63, lane 1: 64..127), 16 consecutive weights each.
        let q0 = _mm256_unpacklo_epi16(lo01, lo23); // 0..15   | 64..79
        let q1 = _mm256_unpackhi_epi16(lo01, lo23); // 16..31  | 80..95
        let q2 = _mm256_unpacklo_epi16(hi01, hi23); // 32..47  | 96..111
        let q3 = _mm256_unpackhi_epi16(hi01, hi23); // 48..63  | 112..127
        let w = [
            _mm256_permute2x128_si256::<0x20>(q0, q1),
            _mm256_permute2x128_si256::<0x20>(q2, q3),
            _mm256_permute2x128_si256::<0x31>(q0, q1),
            _mm256_permute2x128_si256::<0x31>(q2, q3),
        ];
        let mut s16 = _mm256_setzero_si256();
        for (i, &wi) in w.iter().enumerate() {
            let w8 = _mm256_sub_epi8(wi, one8);
            let yv: &[i8; 32] = ys[32 * i..32 * i + 32].try_into().expect("32 values");
            // SAFETY: reads the 32 bytes of `yv`, unaligned.
            let yv = unsafe { _mm256_loadu_si256(yv.as_ptr().cast()) };
            let p = _mm256_maddubs_epi16(_mm256_abs_epi8(yv), _mm256_sign_epi8(w8, yv));
            s16 = _mm256_add_epi16(s16, p);
        }
        let s32 = _mm256_madd_epi16(s16, ones);
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(s32),
            _mm256_extracti128_si256::<1>(s32),
        );
        let s = _mm_hadd_epi32(s, s);
        let isum = _mm_cvtsi128_si32(_mm_hadd_epi32(s, s));
        acc = super::scalar::accumulate(acc, crate::format::f16_to_f32(blk.d), yb.d, isum);
    }
    acc
}

thread_local! {
    // Per-call operand buffers, allocated once per thread: a decode calls these kernels
    // hundreds of times per token, and the forward pass must not allocate after its first call.
    // Each kernel takes its buffer out and puts it back (a panic in between only loses it).
    static TILE_OPS: std::cell::Cell<Vec<[[[__m256i; 4]; 2]; super::x86_q8_0::MAX_TILE_COLS]>> =
        const { std::cell::Cell::new(Vec::new()) };
    static PAIR_F: std::cell::Cell<Vec<[(__m256i, __m256); super::x86_q8_0::MAX_TILE_COLS / 2]>> =
        const { std::cell::Cell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{f32_to_f16, interleave_q8k_x4};
    use crate::kernels::scalar;

    fn t2p(codes: impl Fn(usize, usize) -> u8, d: f32) -> BlockT2p {
        let c = std::array::from_fn(|r| std::array::from_fn(|k| codes(r, k)));
        BlockT2p::pack(&c, [f32_to_f16(d); 4])
    }

    /// The saturation traps: code 3 with -128 and +127 in every position, on gemv and gemm.
    #[test]
    fn code_three_with_extreme_activations_is_exact() {
        let Some(k) = kernels() else { return };
        for v in [-128i8, 127, -127] {
            let x = [t2p(|_, _| 3, 1.0), t2p(|r, j| ((r + j) % 4) as u8, 1.0)];
            let y = [BlockQ8K::from_qs([v; 256], 1.0)];
            let mut want = [0.0; 4];
            let mut got = [0.0; 4];
            scalar::gemv(&x, 2, &y, &mut want);
            k.gemv(&x, 2, &y, &mut got);
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "gemv {v}");
            let tile = [interleave_q8k_x4([&y[0], &y[0], &y[0], &y[0]])];
            let mut want = [0.0; 16];
            let mut got = [0.0; 16];
            scalar::gemm(&x, 2, &tile, 4, &mut want, 4);
            k.gemm(&x, 2, &tile, 4, &mut got, 4);
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "gemm {v}");
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
        let Some(k) = kernels() else { return };
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
        for ncols in 5..=8 {
            let ld = 9;
            let mut want = vec![f32::NAN; ld * 8];
            let mut got = vec![f32::NAN; ld * 8];
            scalar::gemm(&x, 2, &tiles, ncols, &mut want, ld);
            k.gemm(&x, 2, &tiles, ncols, &mut got, ld);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "ncols {ncols}");
        }
    }
}
