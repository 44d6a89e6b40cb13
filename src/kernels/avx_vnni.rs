//! x86_64 AVX2 + AVX-VNNI: `vpdpbusd` on slot-masked T2P words.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed bytes and adds each group of four products
//! into an int32 lane, **without** the int16 saturation of AVX2's `maddubs`. So a masked slot
//! can stay in place even for slot 3 (`v & 0xC0` = 64u, at most 192, is a valid unsigned byte),
//! and one instruction replaces `maddubs` + `add` (+ `madd`). The register layout, the dup8
//! activation operands and the float steps are those of the AVX2 path ([`super::avx2`]), so the
//! outputs are bit-identical to it and to the scalar oracle.
//!
//! Integer bounds: an int32 lane collects 4 products per instruction, at most 16 per block and
//! slot class, each `|u * 4^s * y| <= 192 * 128`, so every lane stays below 2^22.

use std::arch::x86_64::*;

use super::avx2::{bcast8, chunk8, gemv_q8k_loop, load_word, scales};
use super::x86_q8_0::{load_word_pair, slots_u};
use super::{Isa, Kernels};
use crate::format::{BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, ROWS_PER_T2P};

static KERNELS: Kernels = Kernels {
    isa: Isa::AvxVnni,
    gemv,
    gemm,
    gemv_q8_0,
    gemm_q8_0,
    vec_dot_stock: super::avx2::vec_dot_stock,
};

/// The AVX-VNNI kernels, if this CPU has AVX2, F16C and AVX-VNNI. As for the AVX2 path, the safe
/// wrappers are only reachable through here.
pub(super) fn kernels() -> Option<&'static Kernels> {
    if is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("f16c")
        && is_x86_feature_detected!("avxvnni")
    {
        Some(&KERNELS)
    } else {
        None
    }
}

fn gemv(x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]) {
    // SAFETY: KERNELS is only handed out by `kernels()`, after AVX2, F16C and AVX-VNNI were
    // detected.
    unsafe { gemv_vnni(x, nb, y, out) }
}

fn gemm(x: &[BlockT2p], nb: usize, y: &[BlockQ8Kx4], ncols: usize, out: &mut [f32], ld: usize) {
    // SAFETY: as in `gemv`.
    unsafe { gemm_vnni(x, nb, y, ncols, out, ld) }
}

fn gemv_q8_0(x: &[BlockT2p], nb: usize, y: &[BlockQ8_0Quad], out: &mut [f32]) {
    // SAFETY: as in `gemv`.
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
    // SAFETY: as in `gemv`.
    unsafe { gemm_q8_0_impl(x, nb, y, ncols, out, ld) }
}

/// `acc + dot4(u, y)` per int32 lane (`vpdpbusd`, VEX form).
#[target_feature(enable = "avx2,f16c,avxvnni")]
#[inline]
fn dp(acc: __m256i, u: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(acc, u, y)
}

/// `64 * dot(u, y)` of one T2P block with its 128 activations, `[r0, r0, r1, r1 | r2, r2, r3, r3]`.
///
/// The masks `0x03, 0x0C, 0x30, 0xC0` give `4^s * u` for slot `s` with one AND each; four
/// accumulators (one per slot class) collect the four words, and `64 a0 + 16 a1 + 4 a2 + a3`
/// = `64 * dot(u, y)` recombines them with shifts.
#[target_feature(enable = "avx2,f16c,avxvnni")]
#[inline]
fn block_u64(blk: &BlockT2p, ys: &[i8; 128]) -> __m256i {
    let masks = [
        _mm256_set1_epi8(0x03),
        _mm256_set1_epi8(0x0C),
        _mm256_set1_epi8(0x30),
        _mm256_set1_epi8(0xC0u8 as i8),
    ];
    let mut a = [_mm256_setzero_si256(); 4];
    for wd in 0..4 {
        let v = load_word(blk, wd);
        for (s, (a, m)) in a.iter_mut().zip(&masks).enumerate() {
            *a = dp(*a, _mm256_and_si256(v, *m), bcast8(chunk8(ys, 4 * wd + s)));
        }
    }
    _mm256_add_epi32(
        _mm256_add_epi32(_mm256_slli_epi32::<6>(a[0]), _mm256_slli_epi32::<4>(a[1])),
        _mm256_add_epi32(_mm256_slli_epi32::<2>(a[2]), a[3]),
    )
}

/// T2P gemv: the AVX2 gemv's loop with [`block_u64`] (`>> 6` in the fold instead of `>> 2`).
#[target_feature(enable = "avx2,f16c,avxvnni")]
unsafe fn gemv_vnni(x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]) {
    // SAFETY: this function has the AVX2 and F16C features the loop needs.
    unsafe { gemv_q8k_loop::<6>(x, nb, y, out, |blk, ys| block_u64(blk, ys)) }
}

/// T2P gemm on `q8_K x4` tiles: the AVX2 gemm's loop order and float steps; per word the four
/// plain slots serve the four columns, one `vpdpbusd` per slot and column into an int32
/// accumulator per column.
#[target_feature(enable = "avx2,f16c,avxvnni")]
unsafe fn gemm_vnni(
    x: &[BlockT2p],
    nb: usize,
    y: &[BlockQ8Kx4],
    ncols: usize,
    out: &mut [f32],
    ld: usize,
) {
    let half_n = nb / 2;
    let rows_idx = _mm256_setr_epi32(0, 1, 0, 1, 2, 3, 2, 3);
    let c01_idx = _mm256_setr_epi32(0, 0, 1, 1, 0, 0, 1, 1);
    let c23_idx = _mm256_setr_epi32(2, 2, 3, 3, 2, 2, 3, 3);
    // Per-thread, allocated once per thread (a forward pass must not allocate).
    let mut sums = SUMS.take();
    sums.clear();
    sums.reserve(nb.max(super::x86_q8_0::MIN_BLOCKS));
    sums.resize(nb, [0; 4]);
    for (t, tile) in y.chunks_exact(half_n).enumerate().take(ncols.div_ceil(4)) {
        let real = (ncols - 4 * t).min(4);
        for (b, s) in sums.iter_mut().enumerate() {
            *s = std::array::from_fn(|col| tile[b / 2].half_sum(col, b % 2));
        }
        for (g, group) in x.chunks_exact(nb).enumerate() {
            let mut acc01 = _mm256_setzero_ps();
            let mut acc23 = _mm256_setzero_ps();
            for (b, blk) in group.iter().enumerate() {
                super::prefetch::blocks::<1>(x, (g + 1) * nb + b);
                let yb = &tile[b / 2];
                let ys: &[i8; 512] = yb.qs[512 * (b % 2)..512 * (b % 2) + 512]
                    .try_into()
                    .expect("512 values");
                // Two accumulators per column (even and odd slots): a chain of 16 dependent
                // `vpdpbusd` per block would be latency-bound.
                let mut a = [[_mm256_setzero_si256(); 2]; 4];
                for wd in 0..4 {
                    let sl = slots_u(load_word(blk, wd));
                    for (s, &w) in sl.iter().enumerate() {
                        let c = 4 * wd + s;
                        for (col, acc) in a.iter_mut().enumerate() {
                            let off = 32 * c + 8 * col;
                            let chunk: &[i8; 8] = ys[off..off + 8].try_into().expect("8 bytes");
                            acc[s % 2] = dp(acc[s % 2], w, bcast8(chunk));
                        }
                    }
                }
                let a = a.map(|[e, o]| _mm256_add_epi32(e, o));
                // [r0, r0, r1, r1 | r2, r2, r3, r3] per column, then pairs of columns.
                let h01 = _mm256_hadd_epi32(a[0], a[1]);
                let h23 = _mm256_hadd_epi32(a[2], a[3]);
                let s = &sums[b];
                // SAFETY: reads the 16 bytes of `s`, unaligned.
                let s4 = _mm256_castsi128_si256(unsafe { _mm_loadu_si128(s.as_ptr().cast()) });
                let i01 = _mm256_sub_epi32(h01, _mm256_permutevar8x32_epi32(s4, c01_idx));
                let i23 = _mm256_sub_epi32(h23, _mm256_permutevar8x32_epi32(s4, c23_idx));
                let dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(scales(blk)), rows_idx);
                let d: &[f32; 4] = &yb.d;
                // SAFETY: reads the 4 floats of `d`, unaligned.
                let dy = _mm256_castps128_ps256(unsafe { _mm_loadu_ps(d.as_ptr()) });
                let sc01 = _mm256_mul_ps(dw, _mm256_permutevar8x32_ps(dy, c01_idx));
                let sc23 = _mm256_mul_ps(dw, _mm256_permutevar8x32_ps(dy, c23_idx));
                acc01 = _mm256_add_ps(acc01, _mm256_mul_ps(sc01, _mm256_cvtepi32_ps(i01)));
                acc23 = _mm256_add_ps(acc23, _mm256_mul_ps(sc23, _mm256_cvtepi32_ps(i23)));
            }
            store_tile(out, ld, 4 * t, real, g, [acc01, acc23]);
        }
    }
    SUMS.set(sums);
}

thread_local! {
    /// [`gemm_vnni`]'s per-block activation sums of one tile, reused from call to call.
    static SUMS: std::cell::Cell<Vec<[i32; 4]>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Writes the `real` columns of a 4-column result `[c r0, c r1, c' r0, c' r1 | c r2, c r3, ...]`
/// (column pairs 0-1 and 2-3) for row group `g`, columns from `c0`.
#[target_feature(enable = "avx2,f16c,avxvnni")]
#[inline]
fn store_tile(out: &mut [f32], ld: usize, c0: usize, real: usize, g: usize, acc: [__m256; 2]) {
    let mut l = [[0.0f32; 8]; 2];
    // SAFETY: writes exactly the 8 floats of each array, unaligned.
    unsafe {
        _mm256_storeu_ps(l[0].as_mut_ptr(), acc[0]);
        _mm256_storeu_ps(l[1].as_mut_ptr(), acc[1]);
    }
    for col in 0..real {
        let (l, j) = (&l[col / 2], 2 * (col % 2));
        let base = (c0 + col) * ld + ROWS_PER_T2P * g;
        out[base..base + 4].copy_from_slice(&[l[j], l[j + 1], l[j + 4], l[j + 5]]);
    }
}

/// `dot(u, y)` per row and word from the decoded slots of both row pairs (the shared `q8_0`
/// driver, [`super::x86_q8_0`]): one `vpdpbusd` per slot into an int32 accumulator per row pair
/// (`[ra, ra, rb, rb]` per lane, four products a lane), then `hadd` gives
/// `[w2q: r0, r1, r2, r3 | w2q+1: r0, r1, r2, r3]`. Lanes stay below `32 * 3 * 128`.
#[target_feature(enable = "avx2,f16c,avxvnni")]
#[inline]
fn slots_dot(u: &[[__m256i; 4]; 2], ops: &[__m256i; 4]) -> __m256i {
    let x = u.map(|u| {
        let mut a = _mm256_setzero_si256();
        for (u, y) in u.iter().zip(ops) {
            a = dp(a, *u, *y);
        }
        a
    });
    _mm256_hadd_epi32(x[0], x[1])
}

/// [`slots_dot`] of words `2q`, `2q + 1` of a block (the gemv decodes per block).
#[target_feature(enable = "avx2,f16c,avxvnni")]
#[inline]
fn pair_dot(blk: &BlockT2p, q: usize, ops: &[__m256i; 4]) -> __m256i {
    let u = [
        slots_u(load_word_pair(blk, 0, q)),
        slots_u(load_word_pair(blk, 1, q)),
    ];
    slots_dot(&u, ops)
}

super::x86_q8_0::q8_0_kernels!("avx2,f16c,avxvnni");
