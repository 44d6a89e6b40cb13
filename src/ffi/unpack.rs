//! T2P back to any ternary source format (the inverse of `t2p_repack`), for
//! integrations that must hand the original bytes back (ggml's `get_tensor`).

use std::ffi::c_void;

use super::abi::{
    blocks, blocks_mut, bytes, bytes_mut, overlaps, source_bytes, source_type, t2p_blocks_of,
    t2p_bytes,
};
use super::status::{T2pStatus, guard};
use crate::format::{
    BlockPq2_0, BlockT2p, GgmlType, QK_PQ2_0, ROWS_PER_T2P, RowPairBlock, TernaryBlock,
    unpack_t2p_to_pq2_0, with_block_type,
};

/// Converts a `rows x k` T2P matrix (`src`, `t2p_repacked_size` bytes, 2-byte aligned)
/// back to the source format `dst_type` (`T2P_TYPE_*`) in `dst` (`t2p_source_size`
/// bytes, aligned like its blocks), the inverse of `t2p_repack`. The buffers
/// must not overlap.
///
/// Exact for every matrix that came from that format: pq2_0 and tq2_0 give the original bytes
/// back; the base-3 formats (tq1_0, ptq1_0) write each byte in the canonical form
/// `ceil(256 * q / 243)` that ggml's quantizer writes, so bytes that decode to the same trits
/// in another form come back canonical (the dequantized weights are identical either way).
/// A matrix the format cannot hold is `T2P_STATUS_INVALID_ARGUMENT` and nothing is written:
/// code 3 (+2) for tq1_0 / ptq1_0, or two different scales within one 256-weight block of
/// tq1_0 / tq2_0.
///
/// # Safety
/// `src` readable for `src_bytes` bytes, `dst` writable for `dst_bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_unpack(
    dst_type: u32,
    src: *const c_void,
    src_bytes: usize,
    dst: *mut c_void,
    dst_bytes: usize,
    rows: usize,
    k: usize,
) -> T2pStatus {
    guard(|| {
        let n = t2p_blocks_of(rows, k)?;
        let need_src = t2p_bytes(dst_type, rows, k)?;
        let need_dst = source_bytes(dst_type, rows, k)?;
        if src.is_null() || dst.is_null() {
            return Err(T2pStatus::NullPointer);
        }
        if src_bytes < need_src || dst_bytes < need_dst {
            return Err(T2pStatus::BufferTooSmall);
        }
        if overlaps(src, need_src, dst, need_dst) {
            return Err(T2pStatus::InvalidArgument);
        }
        // SAFETY: readable for src_bytes >= need_src, disjoint from dst (checked above).
        let src = unsafe { bytes(src, need_src) }?;
        // SAFETY: writable for dst_bytes >= need_dst.
        let dst = unsafe { bytes_mut(dst, need_dst) }?;
        match source_type(dst_type)? {
            // The direct inverse of the repack, without the per-block encoding.
            GgmlType::PQ2_0 => {
                let src = blocks::<BlockT2p>(src, n)?;
                let dst = blocks_mut::<BlockPq2_0>(dst, rows * (k / QK_PQ2_0))?;
                Ok(unpack_t2p_to_pq2_0(src, rows, k, dst)?)
            }
            ty => with_block_type!(ternary ty,
                B => unpack_typed::<B>(src, rows, k, dst),
                _ => Err(T2pStatus::InvalidArgument),
            ),
        }
    })
}

/// All rows of the T2P matrix `src` (bytes of `B::Target` blocks) as `B` blocks into `dst`;
/// nothing is written unless every block encodes ([`TernaryBlock::encode`] refuses what `B`
/// cannot hold).
fn unpack_typed<B: TernaryBlock>(
    src: &[u8],
    rows: usize,
    k: usize,
    dst: &mut [u8],
) -> Result<(), T2pStatus> {
    let src = blocks::<B::Target>(src, t2p_blocks_of(rows, k)?)?;
    let dst = blocks_mut::<B>(dst, rows * (k / B::WEIGHTS))?;
    let (nb, halves) = (k / QK_PQ2_0, <B::Target as RowPairBlock>::HALVES);
    let mut out = Vec::with_capacity(dst.len());
    // One row at a time: its codes and its scales (one per `Target::GROUP` weights).
    let mut codes = vec![0u8; k];
    let mut scales = vec![0u16; nb * halves];
    for r in 0..rows {
        let (g, rr) = (r / ROWS_PER_T2P, r % ROWS_PER_T2P);
        for (b, blk) in src[g * nb..(g + 1) * nb].iter().enumerate() {
            for (j, c) in codes[QK_PQ2_0 * b..QK_PQ2_0 * (b + 1)]
                .iter_mut()
                .enumerate()
            {
                *c = blk.code(rr, j);
            }
            for h in 0..halves {
                scales[b * halves + h] = blk.scales(h)[rr];
            }
        }
        for (c, d) in codes
            .chunks_exact(B::WEIGHTS)
            .zip(scales.chunks_exact(B::SCALES))
        {
            out.push(B::encode(c, d).map_err(|_| T2pStatus::InvalidArgument)?);
        }
    }
    dst.copy_from_slice(&out);
    Ok(())
}
