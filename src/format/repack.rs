//! Whole-tensor conversion between `pq2_0` rows and T2P row groups.
//!
//! A `rows x k` pq2_0 tensor is `rows` rows of `k / 128` blocks. Its T2P form is `rows / 4`
//! row groups of `k / 128` blocks each, block `b` of group `g` holding weights `128b..128b+128`
//! of rows `4g..4g+4`. Both have exactly the same byte size, and one row group occupies the same
//! byte range in both, which is what makes the in-place repack possible.

use bytemuck::Zeroable;

use super::{BlockPq2_0, BlockT2p, QK_K, QK_PQ2_0, ROWS_PER_T2P};
use crate::error::{Error, Result, check_len};

/// Checks that a `rows x k` matrix can be held in T2P: `rows` a multiple of 4 and `k` a
/// non-zero multiple of 256 (one `q8_K` activation block covers two T2P blocks).
pub fn check_matrix_shape(rows: usize, k: usize) -> Result<()> {
    if rows == 0 || !rows.is_multiple_of(ROWS_PER_T2P) {
        return Err(Error::Shape(format!(
            "rows = {rows} is not a positive multiple of 4"
        )));
    }
    if k == 0 || !k.is_multiple_of(QK_K) {
        return Err(Error::Shape(format!(
            "k = {k} is not a positive multiple of 256"
        )));
    }
    rows.checked_mul(k)
        .ok_or_else(|| Error::Shape(format!("{rows} x {k} overflows")))?;
    Ok(())
}

/// Number of T2P blocks (equal to the number of pq2_0 blocks / 4) of a valid `rows x k` matrix.
pub fn t2p_block_count(rows: usize, k: usize) -> Result<usize> {
    check_matrix_shape(rows, k)?;
    Ok(rows / ROWS_PER_T2P * (k / QK_PQ2_0))
}

/// Packs one row group (4 rows of `nb` pq2_0 blocks) into `nb` T2P blocks.
fn pack_group(src: &[BlockPq2_0], nb: usize, dst: &mut [BlockT2p]) {
    super::ternary::repack_group(src, nb * QK_PQ2_0, dst);
}

/// Repacks a `rows x k` pq2_0 tensor (`src`, row-major blocks) into T2P row groups (`dst`).
pub fn repack_pq2_0_to_t2p(
    src: &[BlockPq2_0],
    rows: usize,
    k: usize,
    dst: &mut [BlockT2p],
) -> Result<()> {
    let n = t2p_block_count(rows, k)?;
    check_len("pq2_0 source blocks", 4 * n, src.len())?;
    check_len("T2P destination blocks", n, dst.len())?;
    let nb = k / QK_PQ2_0;
    for (g, out) in dst[..n].chunks_exact_mut(nb).enumerate() {
        pack_group(&src[4 * nb * g..4 * nb * (g + 1)], nb, out);
    }
    Ok(())
}

/// The inverse of [`repack_pq2_0_to_t2p`]: T2P row groups back to row-major pq2_0 blocks.
pub fn unpack_t2p_to_pq2_0(
    src: &[BlockT2p],
    rows: usize,
    k: usize,
    dst: &mut [BlockPq2_0],
) -> Result<()> {
    let n = t2p_block_count(rows, k)?;
    check_len("T2P source blocks", n, src.len())?;
    check_len("pq2_0 destination blocks", 4 * n, dst.len())?;
    let nb = k / QK_PQ2_0;
    for (g, group) in src[..n].chunks_exact(nb).enumerate() {
        for (b, block) in group.iter().enumerate() {
            let codes = block.unpack();
            for r in 0..ROWS_PER_T2P {
                dst[(4 * g + r) * nb + b] = BlockPq2_0::from_codes(&codes[r], block.d[r]);
            }
        }
    }
    Ok(())
}

/// Repacks a pq2_0 tensor held as bytes into T2P in place, one row group at a time (the extra
/// memory is one row group). Afterwards `bytes` holds `t2p_block_count(rows, k)` T2P blocks.
pub fn repack_pq2_0_in_place(bytes: &mut [u8], rows: usize, k: usize) -> Result<()> {
    let n = t2p_block_count(rows, k)?;
    let group_bytes = (k / QK_PQ2_0) * std::mem::size_of::<BlockT2p>();
    check_len(
        "tensor bytes",
        n * std::mem::size_of::<BlockT2p>(),
        bytes.len(),
    )?;
    let nb = k / QK_PQ2_0;
    let mut src = vec![BlockPq2_0::zeroed(); 4 * nb];
    let mut dst = vec![BlockT2p::zeroed(); nb];
    for group in bytes[..n * std::mem::size_of::<BlockT2p>()].chunks_exact_mut(group_bytes) {
        bytemuck::cast_slice_mut::<BlockPq2_0, u8>(&mut src).copy_from_slice(group);
        pack_group(&src, nb, &mut dst);
        group.copy_from_slice(bytemuck::cast_slice(&dst));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn bad_shapes_are_rejected() {
        assert!(matches!(check_matrix_shape(6, 256), Err(Error::Shape(_))));
        assert!(matches!(check_matrix_shape(4, 128), Err(Error::Shape(_))));
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
