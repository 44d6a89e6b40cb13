//! 512-bit `q8_0` kernels of the AVX-512 VNNI path: one `vpdpbusd` on zmm covers a whole row
//! pair of a T2P block (all four words), where the ymm kernels ([`super::q8_0`]) need two.
//!
//! **Register layout.** One 64-byte load of `qs[p]` holds the four words of row pair `p`; its
//! 128-bit lane `w` is word `w`, i.e. `q8_0` sub-block `w` (weights `32w .. 32w + 32`) of rows
//! `2p` (bytes 0..8) and `2p + 1` (bytes 8..16). Decoded to plain codes `u` per slot `s`
//! ([`decode`]), slot `s` of lane `w` multiplies activation chunk `4w + s` (8 bytes), repeated in
//! both halves of the lane: that operand ([`ColumnBlock::ops`]) is built once per call with one
//! `vpermt2q` per slot and serves both row pairs of every row group.
//!
//! **Reduction.** Per row pair one int32 accumulator `[w: ra, ra', rb, rb']` collects the four
//! slots (four products per lane and instruction, `|.| <= 16 * 3 * 128`, exact), started from
//! `[-sum_w, 0, -sum_w, 0]` so that `dot(u, y) - sum(y) = dot(w, y)` comes out of the same
//! instructions. Two `shufps` and an add turn the two row pairs' accumulators into
//! `I = [w: r0, r1, r2, r3]`, the exact 32-weight sums; `P = d_w,j * I` per lane is one convert
//! and one multiply.
//!
//! **Fold.** Four such `P` (four columns of the gemm, or four row groups of the gemv) are
//! transposed by 128-bit lanes (8 `vshuff32x4`) into `Q_j = [sub-block j of each of the four]`,
//! and the oracle's float steps ([`crate::kernels::fold_q8_0`]) run on 16 values at once:
//! `s = ((Q0 + Q1) + Q2) + Q3`, `acc = acc + d_w * s` (with a scale per 64 weights,
//! `acc = (acc + d_w0 * (Q0 + Q1)) + d_w1 * (Q2 + Q3)`), each a separately rounded `vmulps` /
//! `vaddps` in that order, so the result is bit-identical to the oracle.
//!
//! Cost per 128-weight block and column: 8 `vpdpbusd` + 3 reduction + 2 scale + ~3.3 fold
//! instructions, plus the decode (2 loads, 6 shifts, 8 ANDs) shared by the columns of a pass;
//! the ymm VNNI kernels spend 16 `vpdpbusd`, 2 `vphaddd` and ~13 more per block and column.
//!
//! **GFNI.** The gemv has one column to share the decode with, so the decode is half its
//! instructions. Where the CPU has GFNI (Ice Lake and later, Zen 4 and later; not Cascade
//! Lake), the gemv decodes two of the four slots with one affine transform each
//! ([`decode_gfni`]): 2 loads, 2 shifts, 6 ANDs and 4 transforms. The same loop is compiled
//! for both decodes ([`group_loop`]); on a Zen 4 the GFNI one ran 10-25 % faster from L2
//! (criterion `gemv_2048x2048_q8_0_in_l2`, interleaved). Two columns share the loop as passes
//! of two row groups, three as passes of four row groups and three folds ([`group_passes`]);
//! the wider gemm passes share each decode among four or eight columns and keep the shifts
//! (GFNI measured the same there: the decode is a small part of a four-column pass).

use std::arch::x86_64::*;
use std::ops::Range;

use super::prefetch::{self, PassGroups};
use super::q8_0::column_passes;
use super::slot_codes;
use crate::format::{BlockQ8_0Quad, ROWS_PER_T2P, RowPairBlock};
use crate::kernels::{Gemm, PER_CALL_MIN_BLOCKS, cpu, fold_q8_0, with_per_call_buffer};

/// The operands of one `q8_0` block of one column in the 512-bit layout.
#[derive(Clone, Copy)]
pub(super) struct ColumnBlock {
    /// `ops[s]`: lane `w` = activation chunk `4w + s`, twice.
    ops: [__m512i; 4],
    /// The accumulator start `[w: -sum_w, 0, -sum_w, 0]`.
    init: __m512i,
    /// `d_w` (the column's scale of sub-block `w`) in the four floats of lane `w`.
    d: __m512,
}

thread_local! {
    /// The operands of a call (block-major, then column), reused from call to call.
    static OPS: std::cell::Cell<Vec<ColumnBlock>> = const { std::cell::Cell::new(Vec::new()) };
}

impl ColumnBlock {
    /// The operands of activation block `yb`.
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    fn new(yb: &BlockQ8_0Quad) -> ColumnBlock {
        let q: &[i8; 128] = &yb.qs;
        // SAFETY: both loads read inside the 128 bytes of `q`, unaligned.
        let (lo, hi) = unsafe {
            (
                _mm512_loadu_si512(q.as_ptr().cast()),
                _mm512_loadu_si512(q.as_ptr().add(64).cast()),
            )
        };
        // 64-bit chunk c of the block is element c % 8 of `lo` (c < 8) or of `hi` (index 8 + c).
        let ops = std::array::from_fn(|s| {
            let s = s as i64;
            let idx = _mm512_setr_epi64(s, s, 4 + s, 4 + s, 8 + s, 8 + s, 12 + s, 12 + s);
            _mm512_permutex2var_epi64(lo, idx, hi)
        });
        let n = yb.sums.map(|s| -s);
        #[rustfmt::skip]
        let init = _mm512_setr_epi32(
            n[0], 0, n[0], 0, n[1], 0, n[1], 0, n[2], 0, n[2], 0, n[3], 0, n[3], 0,
        );
        let d = yb.d;
        #[rustfmt::skip]
        let d = _mm512_setr_ps(
            d[0], d[0], d[0], d[0], d[1], d[1], d[1], d[1],
            d[2], d[2], d[2], d[2], d[3], d[3], d[3], d[3],
        );
        ColumnBlock { ops, init, d }
    }
}

/// Both row pairs of a block as plain codes per slot: `u[p][s] = (qs[p] >> 2s) & 3`.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn decode<B: RowPairBlock>(blk: &B) -> [[__m512i; 4]; 2] {
    let m03 = _mm512_set1_epi8(0x03);
    std::array::from_fn(|p| {
        slot_codes(
            row_pair(blk, p),
            |v| _mm512_srli_epi16::<2>(v),
            |v| _mm512_and_si512(v, m03),
        )
    })
}

/// [`decode`] with GFNI: slots 1 and 2 come out of one `vgf2p8affineqb` each (a bit matrix
/// per byte that moves bits `2s, 2s + 1` to bits 0, 1 and clears the rest), slots 0 and 3
/// out of a mask and a shift as before. Five instructions a row pair instead of seven; all
/// four slots as affine transforms gained nothing over the shifts on a Zen 4 (within 1 %),
/// whose affine transforms share the two pipes the `vpdpbusd` run on.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni,gfni")]
#[inline]
fn decode_gfni<B: RowPairBlock>(blk: &B) -> [[__m512i; 4]; 2] {
    let m03 = _mm512_set1_epi8(0x03);
    // Row 7 - i of a qword's matrix gives result bit i: bit 0 <- bit 2s, bit 1 <- bit 2s + 1.
    let slot = |s: u32| _mm512_set1_epi64((((1i64 << (2 * s)) << 8) | (2i64 << (2 * s))) << 48);
    let (s1, s2) = (slot(1), slot(2));
    std::array::from_fn(|p| {
        let v = row_pair(blk, p);
        [
            _mm512_and_si512(v, m03),
            _mm512_gf2p8affine_epi64_epi8::<0>(v, s1),
            _mm512_gf2p8affine_epi64_epi8::<0>(v, s2),
            _mm512_and_si512(_mm512_srli_epi16::<6>(v), m03),
        ]
    })
}

/// The 64 code bytes of row pair `p` of a block (its four words, lane `w` = word `w`).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn row_pair<B: RowPairBlock>(blk: &B, p: usize) -> __m512i {
    let w: &[[u8; 16]; 4] = &blk.words()[p];
    // SAFETY: `w` is 64 contiguous bytes, and loadu has no alignment requirement.
    unsafe { _mm512_loadu_si512(w.as_ptr().cast()) }
}

/// `P = [w: d_w * i_w(r0), .. (r3)]` of one block and column: the four slot dots per row pair,
/// the row-pair reduction and the scale (see the module docs).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn scaled_sums(u: &[[__m512i; 4]; 2], op: &ColumnBlock) -> __m512 {
    let acc = u.each_ref().map(|u| slot_dots(op.init, u, op));
    _mm512_mul_ps(op.d, _mm512_cvtepi32_ps(row_sums(acc)))
}

/// `acc` plus the four slot dots of one row pair's decoded codes `u` with a column's operands.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn slot_dots(mut acc: __m512i, u: &[__m512i; 4], op: &ColumnBlock) -> __m512i {
    for (u, y) in u.iter().zip(&op.ops) {
        acc = _mm512_dpbusd_epi32(acc, *u, *y);
    }
    acc
}

/// The two row pairs' accumulators `[w: ra, ra', rb, rb']` as `I = [w: r0, r1, r2, r3]`.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn row_sums(acc: [__m512i; 2]) -> __m512i {
    let acc = acc.map(|a| _mm512_castsi512_ps(a));
    // [ra, rb] parts from pair 0 and [rc, rd] from pair 1, per lane: even and odd elements.
    let even = _mm512_shuffle_ps::<0b10_00_10_00>(acc[0], acc[1]);
    let odd = _mm512_shuffle_ps::<0b11_01_11_01>(acc[0], acc[1]);
    _mm512_add_epi32(_mm512_castps_si512(even), _mm512_castps_si512(odd))
}

/// The oracle's fold ([`fold_q8_0`]) of four `P` (lane `i` of the result belongs to `p[i]`),
/// `halves` scales per row, with `dw(h)` the row scales of half `h` lane by lane.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn fold4(halves: usize, acc: __m512, p: &[__m512; 4], dw: impl Fn(usize) -> __m512) -> __m512 {
    let t0 = _mm512_shuffle_f32x4::<0b01_00_01_00>(p[0], p[1]);
    let t1 = _mm512_shuffle_f32x4::<0b11_10_11_10>(p[0], p[1]);
    let t2 = _mm512_shuffle_f32x4::<0b01_00_01_00>(p[2], p[3]);
    let t3 = _mm512_shuffle_f32x4::<0b11_10_11_10>(p[2], p[3]);
    let q0 = _mm512_shuffle_f32x4::<0b10_00_10_00>(t0, t2);
    let q1 = _mm512_shuffle_f32x4::<0b11_01_11_01>(t0, t2);
    let q2 = _mm512_shuffle_f32x4::<0b10_00_10_00>(t1, t3);
    let q3 = _mm512_shuffle_f32x4::<0b11_01_11_01>(t1, t3);
    fold_q8_0(
        halves,
        acc,
        [_mm512_add_ps(q0, q1), q2, q3],
        dw,
        |a, b| _mm512_add_ps(a, b),
        |a, b| _mm512_mul_ps(a, b),
    )
}

/// The 4 row scales of half `h` of each of four blocks, `[a: d0..d3 | b | c | e]`, as f32.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn scales4<B: RowPairBlock>(b: [&B; 4], h: usize) -> __m512 {
    let h = b.map(|b| {
        let d = b.scales(h);
        i64::from_le_bytes(std::array::from_fn(|i| (d[i / 2] >> (8 * (i % 2))) as u8))
    });
    _mm512_cvtph_ps(_mm256_setr_epi64x(h[0], h[1], h[2], h[3]))
}

/// The 4 row scales of half `h` of a block in every 128-bit lane, as f32.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn scales_x4<B: RowPairBlock>(blk: &B, h: usize) -> __m512 {
    let d: &[u16; 4] = blk.scales(h);
    // SAFETY: reads the 8 bytes of `d`, unaligned.
    _mm512_broadcast_f32x4(_mm_cvtph_ps(unsafe { _mm_loadl_epi64(d.as_ptr().cast()) }))
}

/// The `q8_0` gemv: four row groups per pass, one `P` each, folded together.
///
/// # Safety
/// The CPU must have AVX2, F16C and AVX-512 F/BW/VL/VNNI (the `avx512-vnni` path's features).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn gemv_q8_0<B: RowPairBlock>(
    x: &[B],
    nb: usize,
    y: &[BlockQ8_0Quad],
    out: &mut [f32],
) {
    // (Closures inherit this function's target features, so they call the kernels safely.)
    let items = y.iter().map(|yb| ColumnBlock::new(yb));
    with_per_call_buffer(&OPS, PER_CALL_MIN_BLOCKS, items, |ops| {
        gemv_rows(x, nb, ops, out)
    })
}

/// [`gemv_q8_0`] on built operands: four row groups a pass.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv_rows<B: RowPairBlock>(x: &[B], nb: usize, ops: &[ColumnBlock], out: &mut [f32]) {
    group_passes::<B, 4, 1, 1>(x, nb, ops, |pass, [acc]| store_groups(out, pass, acc));
}

/// Stores a gemv pass's sums (lane `i`: the four rows of the pass's group `i`) of its real
/// groups.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn store_groups(out: &mut [f32], pass: PassGroups, acc: __m512) {
    let mut sums = [0.0f32; 16];
    // SAFETY: writes exactly the 16 floats of `sums`, unaligned.
    unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), acc) };
    for (i, rows) in sums.chunks_exact(ROWS_PER_T2P).take(pass.real).enumerate() {
        let at = ROWS_PER_T2P * pass.group(i);
        out[at..at + ROWS_PER_T2P].copy_from_slice(rows);
    }
}

/// Passes of `G` row groups times `C` columns, `G * C = 4 * F`: the `P` of a block fill `F`
/// [`fold4`]s. Pair `j` of a pass (its group `j / C`, column `j % C`) is lane `j % 4` of
/// sums `j / 4`, and `store(pass, sums)` gets them with the pass's groups ([`PassGroups`]: a
/// short pass repeats its last group; the copies are not for storing), whose groups lie
/// apart, each a weight stream of its own. `ops` holds `C` columns' operands a block. The gemv
/// is `G = 4, C = 1`; two columns share each decode as `G = 2, C = 2`, three as `G = 4, C = 3`
/// (three folds), instead of a pass of four columns with copies. The blocks are decoded with
/// GFNI where the CPU has it ([`decode_gfni`]).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn group_passes<B: RowPairBlock, const G: usize, const C: usize, const F: usize>(
    x: &[B],
    nb: usize,
    ops: &[ColumnBlock],
    store: impl FnMut(PassGroups, [__m512; F]),
) {
    match cpu::features() & cpu::GFNI != 0 {
        // SAFETY: the CPU has GFNI (detected just now) besides this function's features.
        true => unsafe { group_passes_gfni::<B, G, C, F>(x, nb, ops, store) },
        false => group_passes_shifts::<B, G, C, F>(x, nb, ops, store),
    }
}

/// [`group_passes`] decoding with shifts and masks ([`decode`]).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn group_passes_shifts<B: RowPairBlock, const G: usize, const C: usize, const F: usize>(
    x: &[B],
    nb: usize,
    ops: &[ColumnBlock],
    store: impl FnMut(PassGroups, [__m512; F]),
) {
    // SAFETY: this function has the loop's features, and the closure inherits them.
    unsafe { group_loop::<B, G, C, F>(x, nb, ops, store, |blk| decode(blk)) }
}

/// [`group_passes`] decoding with GFNI: a narrow pass spends much of its instructions on the
/// decode, which its few columns share.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni,gfni")]
fn group_passes_gfni<B: RowPairBlock, const G: usize, const C: usize, const F: usize>(
    x: &[B],
    nb: usize,
    ops: &[ColumnBlock],
    store: impl FnMut(PassGroups, [__m512; F]),
) {
    // SAFETY: this function has the loop's features, and the closure inherits them.
    unsafe { group_loop::<B, G, C, F>(x, nb, ops, store, |blk| decode_gfni(blk)) }
}

/// The loop of [`group_passes`], each block decoded by `decode`: written once for the two
/// decodes and inlined into their entry points, which compile it with their features.
///
/// # Safety
/// The CPU must have the `avx512-vnni` path's features, and the caller must be compiled with
/// them.
#[inline(always)]
unsafe fn group_loop<B: RowPairBlock, const G: usize, const C: usize, const F: usize>(
    x: &[B],
    nb: usize,
    ops: &[ColumnBlock],
    mut store: impl FnMut(PassGroups, [__m512; F]),
    decode: impl Fn(&B) -> [[__m512i; 4]; 2],
) {
    const {
        assert!(
            G * C == 4 * F,
            "a pass fills the four P of each of its folds"
        )
    };
    for pass in PassGroups::all::<G>(x.len() / nb) {
        let starts = std::array::from_fn::<_, G, _>(|i| pass.group(i) * nb);
        // SAFETY: the caller guarantees the features of the helpers called.
        let mut acc = [unsafe { _mm512_setzero_ps() }; F];
        for (b, op) in ops.chunks_exact(C).enumerate() {
            for at in starts {
                prefetch::stream_ahead(x, at + b);
            }
            let blk = starts.map(|at| &x[at + b]);
            let u = blk.map(&decode);
            for (f, acc) in acc.iter_mut().enumerate() {
                // Pair j = 4f + i: group j / C, column j % C.
                let (group, col) = (|i: usize| (4 * f + i) / C, |i: usize| (4 * f + i) % C);
                let lanes: [&B; 4] = std::array::from_fn(|i| blk[group(i)]);
                // SAFETY: as above.
                *acc = unsafe {
                    let p = std::array::from_fn(|i| scaled_sums(&u[group(i)], &op[col(i)]));
                    fold4(B::HALVES, *acc, &p, |h| match G {
                        1 => scales_x4(blk[0], h),
                        _ => scales4(lanes, h),
                    })
                };
            }
        }
        store(pass, acc);
    }
}

/// The `q8_0` gemm: passes of up to [`super::q8_0::MAX_TILE_COLS`] columns over the weights:
/// two or three columns as [`narrow_pass`]es, more in quads of columns (a short quad repeats
/// its last column; the copies are not stored); one column runs through the gemv.
///
/// # Safety
/// The CPU must have AVX2, F16C and AVX-512 F/BW/VL/VNNI (the `avx512-vnni` path's features).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn gemm_q8_0<B: RowPairBlock>(g: Gemm<'_, B, BlockQ8_0Quad>) {
    operand_passes(g, pass_width, |g, ops, cols, width| match width {
        2 => narrow_pass::<B, 2, 2, 1>(g, ops, cols),
        3 => narrow_pass::<B, 4, 3, 3>(g, ops, cols),
        4 => gemm_pass::<B, 1>(g, ops, cols),
        _ => gemm_pass::<B, 2>(g, ops, cols),
    });
}

/// The columns a gemm pass of `real` columns computes: two or three as they are, more
/// rounded up to a quad (the last column repeated), which the folds take four at a time.
fn pass_width(real: usize) -> usize {
    match real {
        2 | 3 => real,
        _ => 4 * real.div_ceil(4),
    }
}

/// A pass of `C` columns (those of `cols` stored) as [`group_passes`] of `G` row groups and
/// `F` folds each.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn narrow_pass<B: RowPairBlock, const G: usize, const C: usize, const F: usize>(
    g: &mut Gemm<'_, B, BlockQ8_0Quad>,
    ops: &[ColumnBlock],
    cols: Range<usize>,
) {
    let (x, nb, ld, out) = (g.x, g.nb, g.ld, &mut *g.out);
    let (c0, real) = (cols.start, cols.len());
    group_passes::<B, G, C, F>(x, nb, ops, |pass, acc| {
        let mut sums = [[0.0f32; 16]; F];
        for (s, acc) in sums.iter_mut().zip(acc) {
            // SAFETY: writes exactly the 16 floats of `s`, unaligned.
            unsafe { _mm512_storeu_ps(s.as_mut_ptr(), acc) };
        }
        for (j, rows) in sums.as_flattened().chunks_exact(ROWS_PER_T2P).enumerate() {
            let (grp, c) = (j / C, j % C);
            if grp < pass.real && c < real {
                let at = (c0 + c) * ld + ROWS_PER_T2P * pass.group(grp);
                out[at..at + ROWS_PER_T2P].copy_from_slice(rows);
            }
        }
    });
}

/// Runs a gemm as [`column_passes`]: a single column through [`gemv_q8_0`], every other pass
/// as `pass(g, ops, cols, width)` on the operands of its columns `cols`, block-major for
/// `width(cols.len())` columns (the last column repeated past the real ones).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn operand_passes<B: RowPairBlock>(
    g: Gemm<'_, B, BlockQ8_0Quad>,
    width: impl Fn(usize) -> usize,
    mut pass: impl FnMut(&mut Gemm<'_, B, BlockQ8_0Quad>, &[ColumnBlock], Range<usize>, usize),
) {
    let nb = g.nb;
    let single = |x: &[B], nb, y: &[BlockQ8_0Quad], out: &mut [f32]| {
        // SAFETY: same CPU features as this function (closures inherit them).
        unsafe { gemv_q8_0(x, nb, y, out) }
    };
    column_passes(g, single, |g, cols, stored| {
        let real = stored.len();
        let width = width(real);
        let items = (0..nb).flat_map(|b| {
            (0..width).map(move |c| ColumnBlock::new(&cols[c.min(real - 1) * nb + b]))
        });
        with_per_call_buffer(&OPS, PER_CALL_MIN_BLOCKS * width, items, |ops| {
            pass(g, ops, stored, width)
        });
    });
}

/// Bytes of operands one chunk of blocks of a gemm pass holds: they stay in L1 (48 KiB on
/// Zen 5, 32 on Zen 4) while every row group streams its weights of the chunk past them. Without
/// the chunks an 8-column pass reads 3 KiB of operands per block from L2 for each row group.
const CHUNK_BYTES: usize = 24 << 10;

/// One pass of `4 * NQ` columns (those of `cols` stored) over every row group, in chunks of
/// blocks ([`CHUNK_BYTES`]): each row group's sums resume from `out` at a chunk's start, so the
/// float order is that of one pass over the row.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemm_pass<B: RowPairBlock, const NQ: usize>(
    g: &mut Gemm<'_, B, BlockQ8_0Quad>,
    ops: &[ColumnBlock],
    cols: std::ops::Range<usize>,
) {
    let (x, nb, ld, out) = (g.x, g.nb, g.ld, &mut *g.out);
    let (c0, real) = (cols.start, cols.len());
    let chunk = (CHUNK_BYTES / (4 * NQ * size_of::<ColumnBlock>())).max(1);
    for b0 in (0..nb).step_by(chunk) {
        let b1 = (b0 + chunk).min(nb);
        let ops = &ops[4 * NQ * b0..4 * NQ * b1];
        for (g, group) in x.chunks_exact(nb).enumerate() {
            let at = |c: usize| (c0 + c) * ld + ROWS_PER_T2P * g;
            let mut l = [[0.0f32; 16]; NQ];
            if b0 > 0 {
                for c in 0..real {
                    l[c / 4][4 * (c % 4)..4 * (c % 4) + 4].copy_from_slice(&out[at(c)..at(c) + 4]);
                }
            }
            // SAFETY: each load reads exactly the 16 floats of one `l`, unaligned.
            let mut acc: [__m512; NQ] =
                std::array::from_fn(|q| unsafe { _mm512_loadu_ps(l[q].as_ptr()) });
            for (b, (blk, op)) in group[b0..b1]
                .iter()
                .zip(ops.chunks_exact(4 * NQ))
                .enumerate()
            {
                prefetch::gemm_block(x, nb, g, b0 + b);
                let u = decode(blk);
                // The second half's scales are read only where the block has them.
                let dw0 = scales_x4(blk, 0);
                let dw = [
                    dw0,
                    if B::HALVES == 2 {
                        scales_x4(blk, 1)
                    } else {
                        dw0
                    },
                ];
                for (acc, op) in acc.iter_mut().zip(op.chunks_exact(4)) {
                    let p = std::array::from_fn(|c| scaled_sums(&u, &op[c]));
                    *acc = fold4(B::HALVES, *acc, &p, |h| dw[h]);
                }
            }
            for (l, acc) in l.iter_mut().zip(acc) {
                // SAFETY: writes exactly the 16 floats of `l`, unaligned.
                unsafe { _mm512_storeu_ps(l.as_mut_ptr(), acc) };
            }
            for c in 0..real {
                out[at(c)..at(c) + 4].copy_from_slice(&l[c / 4][4 * (c % 4)..4 * (c % 4) + 4]);
            }
        }
    }
}

/// The unit-scale gemm ([`crate::kernels::Kernels::gemm_unit`]): the passes of
/// [`gemm_q8_0`], but each column's two row-pair accumulators collect the slot dots of every
/// block of a chunk (8 `vpdpbusd` and 2 adds per block and column, where the float fold costs
/// as much again), reduced to the four rows' integer sums once per chunk.
///
/// # Safety
/// The CPU must have AVX2, F16C and AVX-512 F/BW/VL/VNNI (the `avx512-vnni` path's features).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn gemm_unit<B: RowPairBlock>(g: Gemm<'_, B, BlockQ8_0Quad>) {
    operand_passes(g, pass_width, |g, ops, cols, width| match width {
        2 => unit_pass::<B, 2>(g, ops, cols),
        3 => unit_pass::<B, 3>(g, ops, cols),
        4 => unit_pass::<B, 4>(g, ops, cols),
        _ => unit_pass::<B, 8>(g, ops, cols),
    });
}

/// One pass of `NC` columns (those of `cols` stored) over every row group, in chunks of
/// blocks as [`gemm_pass`]; a chunk's integer sums are added to the earlier chunks' in `out`
/// (exact: integers below 2^24 in f32).
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unit_pass<B: RowPairBlock, const NC: usize>(
    g: &mut Gemm<'_, B, BlockQ8_0Quad>,
    ops: &[ColumnBlock],
    cols: std::ops::Range<usize>,
) {
    let (x, nb, ld, out) = (g.x, g.nb, g.ld, &mut *g.out);
    let (c0, real) = (cols.start, cols.len());
    let chunk = (CHUNK_BYTES / (NC * size_of::<ColumnBlock>())).max(1);
    for b0 in (0..nb).step_by(chunk) {
        let b1 = (b0 + chunk).min(nb);
        let ops = &ops[NC * b0..NC * b1];
        for (g, group) in x.chunks_exact(nb).enumerate() {
            let mut acc = [[_mm512_setzero_si512(); 2]; NC];
            for (b, (blk, op)) in group[b0..b1].iter().zip(ops.chunks_exact(NC)).enumerate() {
                prefetch::gemm_block(x, nb, g, b0 + b);
                let u = decode(blk);
                // Indexed loops over the const bounds keep the accumulators in registers.
                #[allow(clippy::needless_range_loop)]
                for c in 0..NC {
                    for p in 0..2 {
                        let a = _mm512_add_epi32(acc[c][p], op[c].init);
                        acc[c][p] = slot_dots(a, &u[p], &op[c]);
                    }
                }
            }
            #[allow(clippy::needless_range_loop)]
            for c in 0..real {
                // Lane w of I holds word w's sums of the four rows: add the four lanes.
                let i = row_sums(acc[c]);
                let h =
                    _mm256_add_epi32(_mm512_castsi512_si256(i), _mm512_extracti64x4_epi64::<1>(i));
                let rows =
                    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
                let at = (c0 + c) * ld + ROWS_PER_T2P * g;
                let o: &mut [f32; 4] = (&mut out[at..at + 4]).try_into().expect("4 rows");
                // SAFETY: reads and writes exactly the 4 floats of `o`, unaligned.
                unsafe {
                    let before = match b0 {
                        0 => _mm_setzero_ps(),
                        _ => _mm_loadu_ps(o.as_ptr()),
                    };
                    _mm_storeu_ps(o.as_mut_ptr(), _mm_add_ps(before, _mm_cvtepi32_ps(rows)));
                }
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::format::{BlockT2p, BlockT2pG64, QK_PQ2_0, f32_to_f16};
    use crate::kernels::{Isa, scalar};
    use crate::test_rng::XorShift as Rng;

    /// `nb` blocks of `groups` row groups: random codes 0..=3 (code 3 included), random scales,
    /// and an all-zero block.
    pub(in crate::kernels::x86_64) fn weights<B: RowPairBlock>(
        groups: usize,
        nb: usize,
        rng: &mut Rng,
    ) -> Vec<B> {
        (0..groups * nb)
            .map(|i| {
                let mut blk = B::default();
                for r in 0..ROWS_PER_T2P {
                    let codes: [u8; QK_PQ2_0] = match i {
                        1 => [1; QK_PQ2_0], // all weights 0
                        _ => std::array::from_fn(|_| (rng.next() % 4) as u8),
                    };
                    let d: Vec<u16> = (0..B::HALVES)
                        .map(|_| f32_to_f16(0.01 + (rng.next() % 100) as f32 / 997.0))
                        .collect();
                    blk.set_row(r, &codes, &d);
                }
                blk
            })
            .collect()
    }

    /// Activations of one column: -128, +127, zeros and random bytes, block by block.
    pub(in crate::kernels::x86_64) fn column(nb: usize, rng: &mut Rng) -> Vec<BlockQ8_0Quad> {
        (0..nb)
            .map(|b| {
                let qs = std::array::from_fn(|i| match b % 4 {
                    0 => -128,
                    1 => 127,
                    2 if i % 3 == 0 => 0,
                    _ => rng.next() as i8,
                });
                let d = std::array::from_fn(|j| 0.003 * (1 + j + b) as f32);
                BlockQ8_0Quad::from_qs(qs, d)
            })
            .collect()
    }

    /// Both gemv decodes (GFNI where the CPU has it) against the oracle, bit for bit, on row
    /// group counts that leave every length of a short last pass.
    fn decodes_match_the_oracle<B: RowPairBlock>() {
        if !Isa::Avx512Vnni.is_supported() {
            return;
        }
        let gfni = cpu::features() & cpu::GFNI != 0;
        let mut rng = Rng::new(0x6f6e);
        for (groups, nb) in [(1, 1), (2, 3), (3, 2), (4, 5), (5, 4), (9, 3)] {
            let x = weights::<B>(groups, nb, &mut rng);
            let y = column(nb, &mut rng);
            let ops: Vec<ColumnBlock> = y
                .iter()
                // SAFETY: the CPU has the path's features (checked above).
                .map(|yb| unsafe { ColumnBlock::new(yb) })
                .collect();
            let mut want = vec![0.0f32; ROWS_PER_T2P * groups];
            scalar::gemv_q8_0(&x, nb, &y, &mut want);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            let mut got = vec![f32::NAN; want.len()];
            // SAFETY: as above.
            unsafe {
                group_passes_shifts::<B, 4, 1, 1>(&x, nb, &ops, |pass, [acc]| {
                    store_groups(&mut got, pass, acc)
                })
            };
            assert_eq!(bits(&got), bits(&want), "{} shifts {groups}x{nb}", B::NAME);
            if gfni {
                let mut got = vec![f32::NAN; want.len()];
                // SAFETY: as above, and the CPU has GFNI.
                unsafe {
                    group_passes_gfni::<B, 4, 1, 1>(&x, nb, &ops, |pass, [acc]| {
                        store_groups(&mut got, pass, acc)
                    })
                };
                assert_eq!(bits(&got), bits(&want), "{} gfni {groups}x{nb}", B::NAME);
            }
        }
    }

    #[test]
    fn gemv_decodes_match_the_oracle_group_128() {
        decodes_match_the_oracle::<BlockT2p>();
    }

    #[test]
    fn gemv_decodes_match_the_oracle_group_64() {
        decodes_match_the_oracle::<BlockT2pG64>();
    }
}
