//! The T2P row-pair block: 4 rows x 128 weights in 136 bytes.

use bytemuck::{Pod, Zeroable};

use super::QK_PQ2_0;

/// Rows covered by one T2P block (two row pairs).
pub const ROWS_PER_T2P: usize = 4;

/// One T2P block: `{ uint16_t d[4]; uint8_t qs[2][4][16]; }`, the size of four `pq2_0` blocks.
///
/// Byte `qs[p][wd][j]` belongs to row `r = 2p + (j >= 8)` and holds, in bits `2s..2s+1`
/// (slot `s` = 0..3), the code `u = w + 1` of weight `k = 8*(4*wd + s) + (j & 7)` of row `r`.
/// So slot `s` of word `(p, wd)` is 8 consecutive weights of row `2p` followed by the same 8
/// weights of row `2p + 1`, and `v & (3 << 2s)` is `u * 4^s`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockT2p {
    /// fp16 scale bits of rows 0..3.
    pub d: [u16; 4],
    /// Codes: `[row pair][word][byte]`.
    pub qs: [[[u8; 16]; 4]; 2],
}

const _: () = assert!(std::mem::size_of::<BlockT2p>() == 136);

impl BlockT2p {
    /// Where weight `k` (0..128) of row `r` (0..4) lives: `(pair, word, byte, slot)`.
    #[inline]
    pub fn position(r: usize, k: usize) -> (usize, usize, usize, usize) {
        let chunk = k / 8; // = 4*wd + s
        (r / 2, chunk / 4, 8 * (r % 2) + k % 8, chunk % 4)
    }

    /// The code of weight `k` of row `r`.
    #[inline]
    pub fn code(&self, r: usize, k: usize) -> u8 {
        let (p, wd, j, s) = Self::position(r, k);
        (self.qs[p][wd][j] >> (2 * s)) & 3
    }

    /// Packs four rows of 128 codes (0..=3) with their fp16 scales.
    pub fn pack(codes: &[[u8; QK_PQ2_0]; ROWS_PER_T2P], d: [u16; ROWS_PER_T2P]) -> Self {
        let mut b = BlockT2p::default();
        for (r, (row, &dr)) in codes.iter().zip(&d).enumerate() {
            b.set_row(r, row, dr);
        }
        b
    }

    /// Sets row `r` (0..4): its fp16 scale and its 128 codes (only the low two bits of each
    /// are used). Every byte of the row is overwritten, so the other rows are left as they are
    /// and four calls fill a block whatever it held.
    ///
    /// # Panics
    /// If `r >= 4`.
    #[inline]
    pub fn set_row(&mut self, r: usize, codes: &[u8; QK_PQ2_0], d: u16) {
        self.d[r] = d;
        // Weight 32*wd + 8*s + i sits in slot s of byte 8*(r % 2) + i of word (r / 2, wd).
        let half = 8 * (r % 2);
        for (word, c) in self.qs[r / 2].iter_mut().zip(codes.chunks_exact(32)) {
            for (i, out) in word[half..half + 8].iter_mut().enumerate() {
                *out =
                    (c[i] & 3) | (c[8 + i] & 3) << 2 | (c[16 + i] & 3) << 4 | (c[24 + i] & 3) << 6;
            }
        }
    }

    /// The four rows of 128 codes, inverse of [`BlockT2p::pack`].
    pub fn unpack(&self) -> [[u8; QK_PQ2_0]; ROWS_PER_T2P] {
        std::array::from_fn(|r| std::array::from_fn(|k| self.code(r, k)))
    }
}

/// Dequantizes row `r` (0..4) of one row group (`group`: the group's `k / 128` blocks) into
/// `out` (`k` values): `(code - 1) * d` per weight, exactly as the kernels see it.
pub fn dequantize_t2p_row(group: &[BlockT2p], r: usize, out: &mut [f32]) {
    for (b, chunk) in group.iter().zip(out.chunks_exact_mut(QK_PQ2_0)) {
        let d = super::f16_to_f32(b.d[r]);
        for (j, o) in chunk.iter_mut().enumerate() {
            *o = (b.code(r, j) as i32 - 1) as f32 * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_follows_the_design() {
        // Slot 1 of word (1, 2), byte 9: row 3, weight 8*(4*2+1) + 1 = 73.
        assert_eq!(BlockT2p::position(3, 73), (1, 2, 9, 1));
        assert_eq!(BlockT2p::position(0, 0), (0, 0, 0, 0));
        assert_eq!(BlockT2p::position(1, 127), (0, 3, 15, 3));
    }

    #[test]
    fn pack_unpack_round_trips_every_code() {
        let codes = std::array::from_fn(|r| std::array::from_fn(|k| ((k * 7 + r * 3) % 4) as u8));
        let b = BlockT2p::pack(&codes, [1, 2, 3, 4]);
        assert_eq!(b.unpack(), codes);
        assert_eq!(b.d, [1, 2, 3, 4]);
    }

    #[test]
    fn set_row_agrees_with_position_and_leaves_other_rows() {
        let codes: [[u8; 128]; 4] =
            std::array::from_fn(|r| std::array::from_fn(|k| ((k * 5 + r) % 4) as u8));
        let mut b = BlockT2p::default();
        for r in [2, 0, 3, 1] {
            b.set_row(r, &codes[r], r as u16 + 10);
        }
        for (r, row) in codes.iter().enumerate() {
            for (k, &u) in row.iter().enumerate() {
                let (p, wd, j, s) = BlockT2p::position(r, k);
                assert_eq!((b.qs[p][wd][j] >> (2 * s)) & 3, u, "row {r} weight {k}");
            }
        }
        assert_eq!(b.d, [10, 11, 12, 13]);
        // Overwriting one row changes only that row.
        b.set_row(1, &[3; 128], 7);
        assert_eq!(b.unpack()[1], [3; 128]);
        assert_eq!(
            [b.unpack()[0], b.unpack()[2], b.unpack()[3]],
            [codes[0], codes[2], codes[3]]
        );
    }

    #[test]
    fn slot_masks_give_scaled_codes() {
        let mut codes = [[0u8; 128]; 4];
        codes[0][8] = 2; // word 0, slot 1, byte 0
        codes[1][8 * 3 + 5] = 3; // word 0, slot 3, byte 13
        let b = BlockT2p::pack(&codes, [0; 4]);
        assert_eq!(b.qs[0][0][0] & 0x0C, 4 * 2);
        assert_eq!(b.qs[0][0][13] >> 6, 3);
    }
}
