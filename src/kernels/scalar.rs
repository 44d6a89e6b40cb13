//! The scalar oracle: plain integer loops that read the layouts by their definitions, with
//! float arithmetic only at the end of each 128-weight block. Every SIMD path is compared with
//! these bit for bit.

use super::{Gemm, Isa, T2pKernels, fold_q8_0};
use crate::format::{
    BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, QK_PQ2_0, QK8_0, ROWS_PER_T2P,
    RowPairBlock, f16_to_f32,
};

pub(super) static KERNELS: T2pKernels = T2pKernels::portable(
    Isa::Scalar,
    (gemv, gemm),
    (gemv_q8_0, gemm_q8_0),
    (gemv_q8_0, gemm_q8_0),
    vec_dot_stock,
);

/// The float step every path shares: `acc + (d_w * d_y) * isum`, two roundings, no FMA.
#[inline(always)]
pub fn accumulate(acc: f32, d_w: f32, d_y: f32, isum: i32) -> f32 {
    acc + (d_w * d_y) * isum as f32
}

/// Exact `sum_k w_k * y_k` over the 128 weights of row `r` of a T2P block, `w = code - 1`.
pub fn t2p_block_isum(x: &BlockT2p, r: usize, y: impl Fn(usize) -> i8) -> i32 {
    (0..QK_PQ2_0)
        .map(|k| (x.code(r, k) as i32 - 1) * y(k) as i32)
        .sum()
}

/// Reference gemv: `out[4g + r] = sum_b d_w * d_y * isum(g, b, r)`.
pub fn gemv(x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]) {
    for (group, rows_out) in x.chunks_exact(nb).zip(out.chunks_exact_mut(ROWS_PER_T2P)) {
        for (r, o) in rows_out.iter_mut().enumerate() {
            let mut acc = 0.0f32;
            for (b, blk) in group.iter().enumerate() {
                let yb = &y[b / 2];
                let isum = t2p_block_isum(blk, r, |k| yb.qs[128 * (b % 2) + k]);
                acc = accumulate(acc, f16_to_f32(blk.d[r]), yb.d, isum);
            }
            *o = acc;
        }
    }
}

/// Reference gemm: column `c` of tile `t = c / 4` is read from the interleaved blocks.
pub fn gemm(g: Gemm<'_, BlockT2p, BlockQ8Kx4>) {
    let (x, nb, y, ncols, out, ld) = g.into_parts();
    let half = nb / 2;
    for c in 0..ncols {
        let tile = &y[(c / 4) * half..(c / 4 + 1) * half];
        let col = c % 4;
        for (g, group) in x.chunks_exact(nb).enumerate() {
            for r in 0..ROWS_PER_T2P {
                let mut acc = 0.0f32;
                for (b, blk) in group.iter().enumerate() {
                    let yb = &tile[b / 2];
                    let isum = t2p_block_isum(blk, r, |k| yb.value(col, 128 * (b % 2) + k));
                    acc = accumulate(acc, f16_to_f32(blk.d[r]), yb.d[col], isum);
                }
                out[c * ld + ROWS_PER_T2P * g + r] = acc;
            }
        }
    }
}

/// The float step of the `q8_0` kernels for one block and row, in llama.cpp's order
/// (`fold_q8_0`): with one weight scale `d_w[0]` (pq2_0),
/// `acc + d_w * (((d0*i0 + d1*i1) + d2*i2) + d3*i3)`; with a scale per 64 weights (Q2_0),
/// `(acc + d_w0 * (d0*i0 + d1*i1)) + d_w1 * (d2*i2 + d3*i3)`. Every operation separately
/// rounded, no FMA.
#[inline(always)]
pub fn accumulate_q8_0(acc: f32, d_w: &[f32], d_y: &[f32; 4], isum: [i32; 4]) -> f32 {
    let p: [f32; 4] = std::array::from_fn(|j| d_y[j] * isum[j] as f32);
    fold_q8_0(
        d_w.len(),
        acc,
        [p[0] + p[1], p[2], p[3]],
        |h| d_w[h],
        |a, b| a + b,
        |a, b| a * b,
    )
}

/// Exact `sum_k w_k * y_k` over each 32-weight quarter of row `r` of a T2P block.
pub fn t2p_block_isums_q8_0<B: RowPairBlock>(x: &B, r: usize, y: &[i8; QK_PQ2_0]) -> [i32; 4] {
    std::array::from_fn(|j| {
        (QK8_0 * j..QK8_0 * (j + 1))
            .map(|k| (x.code(r, k) as i32 - 1) * y[k] as i32)
            .sum()
    })
}

/// Reference `q8_0` gemv: `out[4g + r] = sum_b d_w * sum_j d_y[j] * isum(g, b, r, j)`, with
/// `y` the `nb` activation blocks of one column (per 64 weights for a group-64 block).
pub fn gemv_q8_0<B: RowPairBlock>(x: &[B], nb: usize, y: &[BlockQ8_0Quad], out: &mut [f32]) {
    for (group, rows_out) in x.chunks_exact(nb).zip(out.chunks_exact_mut(ROWS_PER_T2P)) {
        for (r, o) in rows_out.iter_mut().enumerate() {
            let mut acc = 0.0f32;
            for (blk, yb) in group.iter().zip(y) {
                let isum = t2p_block_isums_q8_0(blk, r, &yb.qs);
                let d_w = [0, 1].map(|h| f16_to_f32(blk.scales(h)[r]));
                acc = accumulate_q8_0(acc, &d_w[..B::HALVES], &yb.d, isum);
            }
            *o = acc;
        }
    }
}

/// Reference `q8_0` gemm: column `c` is `y[c * nb .. (c + 1) * nb]`, written to `out[c * ld + r]`.
pub fn gemm_q8_0<B: RowPairBlock>(mut g: Gemm<'_, B, BlockQ8_0Quad>) {
    let rows = g.x.len() / g.nb * ROWS_PER_T2P;
    for (c, col) in g.y.chunks_exact(g.nb).take(g.ncols).enumerate() {
        gemv_q8_0(g.x, g.nb, col, g.column(c, rows));
    }
}

/// Reference stock dot product: pq2_0 blocks as they sit in the file.
pub fn vec_dot_stock(x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in x.iter().enumerate() {
        let yb = &y[b / 2];
        let isum: i32 = (0..QK_PQ2_0)
            .map(|j| (blk.code(j) as i32 - 1) * yb.qs[128 * (b % 2) + j] as i32)
            .sum();
        acc = accumulate(acc, f16_to_f32(blk.d), yb.d, isum);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{f32_to_f16, interleave_q8k_x4};

    fn block_with(codes: impl Fn(usize, usize) -> u8, d: f32) -> BlockT2p {
        let c = std::array::from_fn(|r| std::array::from_fn(|k| codes(r, k)));
        BlockT2p::pack(&c, [f32_to_f16(d); 4])
    }

    #[test]
    fn gemv_counts_codes_as_w_plus_one() {
        // Row r uses code r: weights -1, 0, +1, +2; activations all 1 with d = 1.
        let x = [
            block_with(|r, _| r as u8, 1.0),
            block_with(|r, _| r as u8, 1.0),
        ];
        let y = [BlockQ8K::from_qs([1; 256], 1.0)];
        let mut out = [0.0; 4];
        gemv(&x, 2, &y, &mut out);
        assert_eq!(out, [-256.0, 0.0, 256.0, 512.0]);
    }

    #[test]
    fn gemm_matches_gemv_per_column() {
        let x = [
            block_with(|r, k| ((r + k) % 4) as u8, 0.5),
            block_with(|r, k| ((r * k) % 3) as u8, 2.0),
        ];
        let cols: [BlockQ8K; 4] = std::array::from_fn(|c| {
            BlockQ8K::from_qs(
                std::array::from_fn(|i| (i as i32 - 128 + c as i32) as i8),
                0.25,
            )
        });
        let tile = [interleave_q8k_x4([&cols[0], &cols[1], &cols[2], &cols[3]])];
        let mut out = [0.0; 16];
        gemm(Gemm {
            x: &x,
            nb: 2,
            y: &tile,
            ncols: 3,
            out: &mut out,
            ld: 4,
        });
        for c in 0..3 {
            let mut col = [0.0; 4];
            gemv(&x, 2, &cols[c..c + 1], &mut col);
            assert_eq!(&out[4 * c..4 * c + 4], &col);
        }
        assert_eq!(
            &out[12..],
            &[0.0; 4],
            "column 3 is not real and must not be written"
        );
    }

    #[test]
    fn stock_agrees_with_t2p_on_the_same_weights() {
        let pq: Vec<BlockPq2_0> = (0..8)
            .map(|b| {
                BlockPq2_0::from_codes(
                    &std::array::from_fn(|j| ((j * 5 + b) % 4) as u8),
                    f32_to_f16(0.1 * b as f32),
                )
            })
            .collect();
        let mut t = vec![BlockT2p::default(); 2];
        crate::format::repack_pq2_0_to_t2p(&pq, 4, 256, &mut t).unwrap();
        let y = [BlockQ8K::from_qs(
            std::array::from_fn(|i| (i as i32 % 255 - 127) as i8),
            0.03,
        )];
        let mut out = [0.0; 4];
        gemv(&t, 2, &y, &mut out);
        for r in 0..4 {
            assert_eq!(out[r], vec_dot_stock(&pq[2 * r..2 * r + 2], &y));
        }
    }
}
