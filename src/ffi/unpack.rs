//! T2P back to any ternary source format (the inverse of `t2p_repack`), for
//! integrations that must hand the original bytes back (ggml's `get_tensor`).

use std::ffi::c_void;

use super::abi::{
    T2P_T2P_BLOCK_BYTES, T2P_TYPE_PQ2_0, T2P_TYPE_PTQ1_0, T2P_TYPE_Q2_0_G128, T2P_TYPE_TQ1_0,
    T2P_TYPE_TQ2_0, blocks, blocks_mut, bytes, bytes_mut, shape, source_bytes,
};
use super::status::{T2pStatus, guard};
use crate::format::{
    BlockPq2_0, BlockPtq1_0, BlockT2p, BlockTq1_0, BlockTq2_0, QK_PQ2_0, ROWS_PER_T2P,
    TernaryBlock, pack_trits, unpack_t2p_to_pq2_0,
};

/// Converts a `rows x k` T2P matrix (`src`, `t2p_repack_size` bytes, 2-byte aligned)
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
        let n = shape(rows, k)?;
        let need_src = n * T2P_T2P_BLOCK_BYTES;
        let need_dst = source_bytes(dst_type, rows, k)?;
        if src.is_null() || dst.is_null() {
            return Err(T2pStatus::NullPointer);
        }
        if src_bytes < need_src || dst_bytes < need_dst {
            return Err(T2pStatus::BufferTooSmall);
        }
        let (s, d) = (src as usize, dst as usize);
        if s < d.saturating_add(need_dst) && d < s.saturating_add(need_src) {
            return Err(T2pStatus::InvalidArgument);
        }
        // SAFETY: readable for src_bytes >= need_src, disjoint from dst (checked above).
        let src = blocks::<BlockT2p>(unsafe { bytes(src, need_src) }?, n)?;
        // SAFETY: writable for dst_bytes >= need_dst.
        let dst = unsafe { bytes_mut(dst, need_dst) }?;
        match dst_type {
            T2P_TYPE_PQ2_0 | T2P_TYPE_Q2_0_G128 => {
                let dst = blocks_mut::<BlockPq2_0>(dst, rows * (k / QK_PQ2_0))?;
                Ok(unpack_t2p_to_pq2_0(src, rows, k, dst)?)
            }
            T2P_TYPE_TQ2_0 => unpack_typed(src, rows, k, dst, encode_tq2_0),
            T2P_TYPE_TQ1_0 => unpack_typed(src, rows, k, dst, encode_tq1_0),
            T2P_TYPE_PTQ1_0 => unpack_typed(src, rows, k, dst, encode_ptq1_0),
            _ => Err(T2pStatus::InvalidArgument),
        }
    })
}

/// Encodes `B::WEIGHTS` codes with one fp16 scale per 128 weights, or `None` if `B` cannot
/// hold them.
type Encode<B> = fn(codes: &[u8], scales: &[u16]) -> Option<B>;

/// All rows of the T2P matrix `src` as `B` blocks into `dst`; nothing is written unless every
/// block encodes.
fn unpack_typed<B: TernaryBlock>(
    src: &[BlockT2p],
    rows: usize,
    k: usize,
    dst: &mut [u8],
    encode: Encode<B>,
) -> Result<(), T2pStatus> {
    let halves = B::WEIGHTS / QK_PQ2_0;
    let nb = k / QK_PQ2_0;
    let dst = blocks_mut::<B>(dst, rows * (k / B::WEIGHTS))?;
    let mut out = Vec::with_capacity(dst.len());
    let mut codes = [0u8; 2 * QK_PQ2_0];
    let mut scales = [0u16; 2];
    for (g, group) in src.chunks_exact(nb).enumerate() {
        // Per T2P block of the group: the four rows' codes and scales.
        let unpacked: Vec<([[u8; QK_PQ2_0]; ROWS_PER_T2P], [u16; ROWS_PER_T2P])> =
            group.iter().map(|b| (b.unpack(), b.d)).collect();
        // A padded last group holds fewer real rows.
        for r in 0..ROWS_PER_T2P.min(rows - ROWS_PER_T2P * g) {
            // Source block i of row r covers the `halves` T2P blocks from i * halves.
            for chunk in unpacked.chunks_exact(halves) {
                for (h, (rows_codes, d)) in chunk.iter().enumerate() {
                    codes[QK_PQ2_0 * h..QK_PQ2_0 * (h + 1)].copy_from_slice(&rows_codes[r]);
                    scales[h] = d[r];
                }
                let block = encode(&codes[..B::WEIGHTS], &scales[..halves])
                    .ok_or(T2pStatus::InvalidArgument)?;
                out.push(block);
            }
        }
    }
    dst.copy_from_slice(&out);
    Ok(())
}

/// The one scale of a 256-weight block, if both halves agree.
fn one_scale(scales: &[u16]) -> Option<u16> {
    scales.iter().all(|&d| d == scales[0]).then_some(scales[0])
}

/// tq2_0: byte `32h + m` holds element `128h + 32l + m` in bits `2l`.
fn encode_tq2_0(codes: &[u8], scales: &[u16]) -> Option<BlockTq2_0> {
    let d = one_scale(scales)?;
    let qs = std::array::from_fn(|j| {
        let (h, m) = (j / 32, j % 32);
        (0..4).fold(0u8, |q, l| q | (codes[128 * h + 32 * l + m] & 3) << (2 * l))
    });
    Some(BlockTq2_0 { qs, d })
}

/// Whether every code fits a base-3 format (0..=2).
fn trits_only(codes: &[u8]) -> bool {
    codes.iter().all(|&u| u <= 2)
}

/// tq1_0: `qs[m]` holds elements `32n + m` (m < 32), `qs[32 + m]` elements `160 + 16n + m`
/// (m < 16), `qh[j]` elements `240 + 4n + j` (4 trits), trit `n` first.
fn encode_tq1_0(codes: &[u8], scales: &[u16]) -> Option<BlockTq1_0> {
    let d = one_scale(scales)?;
    if !trits_only(codes) {
        return None;
    }
    let qs = std::array::from_fn(|j| {
        if j < 32 {
            pack_trits(&std::array::from_fn::<u8, 5, _>(|n| codes[32 * n + j]))
        } else {
            pack_trits(&std::array::from_fn::<u8, 5, _>(|n| {
                codes[160 + 16 * n + j - 32]
            }))
        }
    });
    let qh = std::array::from_fn(|j| {
        pack_trits(&std::array::from_fn::<u8, 4, _>(|n| codes[240 + 4 * n + j]))
    });
    Some(BlockTq1_0 { qs, qh, d })
}

/// ptq1_0 (the element order of its decoder): `qs[m]` holds
/// elements `16n + m` (m < 16), `qs[16 + m]` elements `80 + 8n + m` (m < 8), `qh[h]` elements
/// `120 + 2n + h` (4 trits).
fn encode_ptq1_0(codes: &[u8], scales: &[u16]) -> Option<BlockPtq1_0> {
    if !trits_only(codes) {
        return None;
    }
    let qs = std::array::from_fn(|j| {
        if j < 16 {
            pack_trits(&std::array::from_fn::<u8, 5, _>(|n| codes[16 * n + j]))
        } else {
            pack_trits(&std::array::from_fn::<u8, 5, _>(|n| {
                codes[80 + 8 * n + j - 16]
            }))
        }
    });
    let qh = std::array::from_fn(|h| {
        pack_trits(&std::array::from_fn::<u8, 4, _>(|n| codes[120 + 2 * n + h]))
    });
    Some(BlockPtq1_0 {
        qs,
        qh,
        d: scales[0],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoders are the inverse of the format's own decoders, on random blocks.
    fn round_trip<B: TernaryBlock + PartialEq + std::fmt::Debug>(encode: Encode<B>, max: u8) {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let halves = B::WEIGHTS / QK_PQ2_0;
        for i in 0..300 {
            let codes: Vec<u8> = (0..B::WEIGHTS)
                .map(|_| match i {
                    0 => 0,
                    1 => max,
                    _ => (next() % (max as u64 + 1)) as u8,
                })
                .collect();
            let scales = vec![next() as u16; halves];
            let block = encode(&codes, &scales).expect("encodable");
            let (mut c2, mut s2) = (vec![9u8; B::WEIGHTS], vec![1u16; halves]);
            block.decode(&mut c2, &mut s2);
            assert_eq!((c2, s2), (codes, scales), "{} block {i}", B::NAME);
        }
    }

    #[test]
    fn encoders_invert_the_decoders() {
        round_trip::<BlockTq2_0>(encode_tq2_0, 3);
        round_trip::<BlockTq1_0>(encode_tq1_0, 2);
        round_trip::<BlockPtq1_0>(encode_ptq1_0, 2);
    }

    #[test]
    fn what_a_format_cannot_hold_is_refused() {
        let mut codes = [1u8; 256];
        assert!(encode_tq1_0(&codes, &[5, 6]).is_none(), "two scales");
        assert!(encode_tq2_0(&codes, &[5, 6]).is_none(), "two scales");
        codes[200] = 3;
        assert!(encode_tq1_0(&codes, &[5, 5]).is_none(), "code 3");
        assert!(
            encode_tq2_0(&codes, &[5, 5]).is_some(),
            "tq2_0 holds code 3"
        );
        assert!(encode_ptq1_0(&codes[128..], &[5]).is_none(), "code 3");
    }
}
