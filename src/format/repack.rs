//! Whole-tensor conversion between `pq2_0` rows and T2P row groups.
//!
//! A `rows x k` pq2_0 tensor is `rows` rows of `k / 128` blocks. Its T2P form is
//! `ceil(rows / 4)` row groups of `k / 128` blocks each, block `b` of group `g` holding weights
//! `128b..128b+128` of rows `4g..4g+4`. When `rows` is not a multiple of 4 the last group is
//! padded with zero rows (code 1, scale 0) whose outputs the driver drops. A whole row group
//! has the same byte size in both layouts, and occupies the same byte range in both, which is
//! what makes the in-place repack possible (the padded rows need a buffer of the T2P size).

use bytemuck::Zeroable;

use super::{BlockPq2_0, BlockT2p, QK_PQ2_0, ROWS_PER_T2P};
use crate::error::{Error, Result, check_len};

/// Checks that a `rows x k` matrix can be held in T2P: `rows` positive (the last row group is
/// padded) and `k` a positive multiple of 128 (one T2P block).
pub fn check_matrix_shape(rows: usize, k: usize) -> Result<()> {
    if rows == 0 {
        return Err(Error::Shape("a matrix needs at least one row".into()));
    }
    if k == 0 || !k.is_multiple_of(QK_PQ2_0) {
        return Err(Error::Shape(format!(
            "k = {k} is not a positive multiple of 128"
        )));
    }
    rows.div_ceil(ROWS_PER_T2P)
        .checked_mul(ROWS_PER_T2P * k)
        .ok_or_else(|| Error::Shape(format!("{rows} x {k} overflows")))?;
    Ok(())
}

/// Row groups of a `rows`-row matrix (the last one possibly padded).
pub fn t2p_row_groups(rows: usize) -> usize {
    rows.div_ceil(ROWS_PER_T2P)
}

/// Number of T2P blocks of a valid `rows x k` matrix: `ceil(rows / 4) * k / 128` (equal to the
/// number of pq2_0 blocks / 4 when `rows` is a multiple of 4).
pub fn t2p_block_count(rows: usize, k: usize) -> Result<usize> {
    check_matrix_shape(rows, k)?;
    Ok(t2p_row_groups(rows) * (k / QK_PQ2_0))
}

/// Packs one row group (4 rows of `nb` pq2_0 blocks) into `nb` T2P blocks.
fn pack_group(src: &[BlockPq2_0], nb: usize, dst: &mut [BlockT2p]) {
    super::ternary::repack_group(src, nb * QK_PQ2_0, dst);
}

/// Repacks a `rows x k` pq2_0 tensor (`src`, row-major blocks) into T2P row groups (`dst`):
/// [`repack_to_t2p`](super::repack_to_t2p) at pq2_0, named for the C ABI and the tests.
pub fn repack_pq2_0_to_t2p(
    src: &[BlockPq2_0],
    rows: usize,
    k: usize,
    dst: &mut [BlockT2p],
) -> Result<()> {
    super::repack_to_t2p(src, rows, k, dst)
}

/// The inverse of [`repack_pq2_0_to_t2p`]: T2P row groups back to row-major pq2_0 blocks.
pub fn unpack_t2p_to_pq2_0(
    src: &[BlockT2p],
    rows: usize,
    k: usize,
    dst: &mut [BlockPq2_0],
) -> Result<()> {
    let n = t2p_block_count(rows, k)?;
    let nb = k / QK_PQ2_0;
    check_len("T2P source blocks", n, src.len())?;
    check_len("pq2_0 destination blocks", rows * nb, dst.len())?;
    for (g, group) in src[..n].chunks_exact(nb).enumerate() {
        for (b, block) in group.iter().enumerate() {
            let codes = block.unpack();
            for r in 0..ROWS_PER_T2P.min(rows - 4 * g) {
                dst[(4 * g + r) * nb + b] = BlockPq2_0::from_codes(&codes[r], block.d[r]);
            }
        }
    }
    Ok(())
}

/// Repacks a pq2_0 tensor held as bytes into T2P in place, one row group at a time (the extra
/// memory is one row group). `bytes` holds the `rows * k / 128` pq2_0 blocks at its start and
/// must be as long as the T2P form (longer than the source when `rows % 4 != 0`); afterwards it
/// holds `t2p_block_count(rows, k)` T2P blocks.
pub fn repack_pq2_0_in_place(bytes: &mut [u8], rows: usize, k: usize) -> Result<()> {
    let n = t2p_block_count(rows, k)?;
    let nb = k / QK_PQ2_0;
    let block_bytes = std::mem::size_of::<BlockPq2_0>();
    let group_bytes = nb * std::mem::size_of::<BlockT2p>();
    check_len(
        "tensor bytes",
        n * std::mem::size_of::<BlockT2p>(),
        bytes.len(),
    )?;
    let mut src = vec![BlockPq2_0::zeroed(); 4 * nb];
    let mut dst = vec![BlockT2p::zeroed(); nb];
    for (g, group) in bytes[..n * std::mem::size_of::<BlockT2p>()]
        .chunks_exact_mut(group_bytes)
        .enumerate()
    {
        // The source rows of this group: 4, or fewer in a padded last group.
        let real = ROWS_PER_T2P.min(rows - 4 * g);
        let src_rows = &mut src[..real * nb];
        bytemuck::cast_slice_mut::<BlockPq2_0, u8>(src_rows)
            .copy_from_slice(&group[..real * nb * block_bytes]);
        pack_group(src_rows, nb, &mut dst);
        group.copy_from_slice(bytemuck::cast_slice(&dst));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::RowPairBlock;

    fn random_tensor(rows: usize, k: usize, seed: u64) -> Vec<BlockPq2_0> {
        let mut s = seed;
        (0..rows * k / 128)
            .map(|_| {
                let mut b = BlockPq2_0::default();
                for q in b.qs.iter_mut() {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    *q = (s >> 33) as u8;
                }
                b.d = (s >> 17) as u16 & 0x3bff;
                b
            })
            .collect()
    }

    #[test]
    fn round_trip_including_code_three() {
        let (rows, k) = (12, 512);
        let src = random_tensor(rows, k, 1);
        assert!(src.iter().any(|b| b.codes().contains(&3)));
        let mut t = vec![BlockT2p::default(); t2p_block_count(rows, k).unwrap()];
        repack_pq2_0_to_t2p(&src, rows, k, &mut t).unwrap();
        let mut back = vec![BlockPq2_0::default(); src.len()];
        unpack_t2p_to_pq2_0(&t, rows, k, &mut back).unwrap();
        assert_eq!(back, src);
    }

    #[test]
    fn in_place_equals_out_of_place() {
        let (rows, k) = (8, 768);
        let src = random_tensor(rows, k, 2);
        let mut t = vec![BlockT2p::default(); t2p_block_count(rows, k).unwrap()];
        repack_pq2_0_to_t2p(&src, rows, k, &mut t).unwrap();
        let mut bytes = bytemuck::cast_slice::<_, u8>(&src).to_vec();
        repack_pq2_0_in_place(&mut bytes, rows, k).unwrap();
        assert_eq!(bytes, bytemuck::cast_slice::<_, u8>(&t));
    }

    #[test]
    fn odd_rows_and_k_of_128_round_trip_in_and_out_of_place() {
        for (rows, k) in [(1, 128), (6, 384), (7, 640), (13, 128)] {
            let src = random_tensor(rows, k, rows as u64);
            let n = t2p_block_count(rows, k).unwrap();
            let mut t = vec![BlockT2p::default(); n];
            repack_pq2_0_to_t2p(&src, rows, k, &mut t).unwrap();
            let mut back = vec![BlockPq2_0::default(); src.len()];
            unpack_t2p_to_pq2_0(&t, rows, k, &mut back).unwrap();
            assert_eq!(back, src, "{rows} x {k}");
            // Padding rows are zero weights: code 1, scale 0.
            let last = &t[n - k / 128..];
            for r in rows % 4..if rows % 4 == 0 { 0 } else { 4 } {
                assert!(
                    last.iter()
                        .all(|b| b.d[r] == 0 && (0..128).all(|j| b.code(r, j) == 1))
                );
            }
            let mut bytes = bytemuck::cast_slice::<_, u8>(&src).to_vec();
            bytes.resize(n * std::mem::size_of::<BlockT2p>(), 0xAA);
            repack_pq2_0_in_place(&mut bytes, rows, k).unwrap();
            assert_eq!(
                bytes,
                bytemuck::cast_slice::<_, u8>(&t),
                "{rows} x {k} in place"
            );
        }
    }

    #[test]
    fn bad_shapes_are_rejected() {
        assert!(check_matrix_shape(6, 256).is_ok());
        assert!(check_matrix_shape(4, 128).is_ok());
        assert!(matches!(check_matrix_shape(4, 192), Err(Error::Shape(_))));
        assert!(matches!(check_matrix_shape(0, 256), Err(Error::Shape(_))));
        assert!(matches!(
            check_matrix_shape(usize::MAX - 3, 256),
            Err(Error::Shape(_))
        ));
        let src = random_tensor(4, 256, 3);
        let mut t = vec![BlockT2p::default(); 1];
        assert!(matches!(
            repack_pq2_0_to_t2p(&src, 4, 256, &mut t),
            Err(Error::BufferTooSmall { .. })
        ));
    }
}
