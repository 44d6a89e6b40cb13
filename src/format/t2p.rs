//! The T2P row-pair block: 4 rows x 128 weights in 136 bytes ([`BlockT2p`], a scale per 128
//! weights), or in 144 bytes with a scale per 64 ([`BlockT2pG64`], mainline llama.cpp's Q2_0).
//! Both hold the codes in the same slot-mask words, so every kernel decodes them with the same
//! instructions ([`RowPairBlock`]); only the float fold reads one or two scales per row.

use bytemuck::{Pod, Zeroable};

use super::QK_PQ2_0;

/// The metadata key of a GGUF file whose ternary matrices are stored already in the T2P layout
/// ([`GgmlType::T2P`](super::GgmlType::T2P), written by `libt2p convert`): its value is the
/// [`T2P_LAYOUT_VERSION`] the blocks were written in.
pub const T2P_LAYOUT_KEY: &str = "t2p.layout_version";

/// The version of the T2P block bytes ([`BlockT2p`], [`BlockT2pG64`]) this build reads and
/// writes. Raised whenever a block's bytes change meaning, so that a file repacked by another
/// build is refused instead of misread.
pub const T2P_LAYOUT_VERSION: u32 = 1;

/// The codes of a T2P block: `[row pair][word][byte]` (see [`BlockT2p`]).
pub type T2pWords = [[[u8; 16]; 4]; 2];

/// A T2P row-pair block: four rows of 128 weights in the slot-mask words of [`BlockT2p`], with
/// [`RowPairBlock::HALVES`] fp16 scales per row (one per `128 / HALVES` weights).
pub trait RowPairBlock:
    Pod + Default + PartialEq + std::fmt::Debug + Send + Sync + 'static
{
    /// Scales per row and block: 1 (group 128) or 2 (group 64, weights `64h .. 64h + 64`).
    const HALVES: usize;
    /// Weights per scale (`128 / HALVES`).
    const GROUP: usize = QK_PQ2_0 / Self::HALVES;
    /// The layout's name as tools print it.
    const NAME: &'static str;

    /// The code words.
    fn words(&self) -> &T2pWords;

    /// The fp16 scales of rows 0..3 for weights `64h ..` (`h < HALVES`; a group-128 block has
    /// one set for both halves).
    fn scales(&self, h: usize) -> &[u16; 4];

    /// Sets row `r` (0..4): its `HALVES` fp16 scales and its 128 codes (only the low two bits
    /// of each are used). Every byte of the row is overwritten, so the other rows are left as
    /// they are and four calls fill a block whatever it held.
    ///
    /// # Panics
    /// If `r >= 4` or `d.len() != HALVES`.
    fn set_row(&mut self, r: usize, codes: &[u8; QK_PQ2_0], d: &[u16]);

    /// The code of weight `k` (0..128) of row `r` (0..4).
    #[inline]
    fn code(&self, r: usize, k: usize) -> u8 {
        let (p, wd, j, s) = BlockT2p::position(r, k);
        (self.words()[p][wd][j] >> (2 * s)) & 3
    }

    /// The fp16 scale of weight `k` of row `r`.
    #[inline]
    fn scale_of(&self, r: usize, k: usize) -> u16 {
        self.scales(k * Self::HALVES / QK_PQ2_0)[r]
    }

    /// `blocks` as the slice of either layout.
    fn slice(blocks: &[Self]) -> T2pSlice<'_>;

    /// `blocks` as the vector of either layout.
    fn vec(blocks: Vec<Self>) -> T2pVec;
}

/// The blocks of a T2P matrix in either layout, borrowed: what the matmul driver and the C ABI
/// pass around, so one entry serves both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum T2pSlice<'a> {
    /// A scale per 128 weights.
    G128(&'a [BlockT2p]),
    /// A scale per 64 weights.
    G64(&'a [BlockT2pG64]),
}

/// The blocks of a T2P matrix in either layout, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum T2pVec {
    /// A scale per 128 weights.
    G128(Vec<BlockT2p>),
    /// A scale per 64 weights.
    G64(Vec<BlockT2pG64>),
}

impl<'a> T2pSlice<'a> {
    /// Blocks held.
    pub fn len(&self) -> usize {
        match self {
            T2pSlice::G128(b) => b.len(),
            T2pSlice::G64(b) => b.len(),
        }
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Scales per row and block ([`RowPairBlock::HALVES`]).
    pub fn halves(&self) -> usize {
        match self {
            T2pSlice::G128(_) => BlockT2p::HALVES,
            T2pSlice::G64(_) => BlockT2pG64::HALVES,
        }
    }

    /// The layout's name ([`RowPairBlock::NAME`]).
    pub fn name(&self) -> &'static str {
        match self {
            T2pSlice::G128(_) => BlockT2p::NAME,
            T2pSlice::G64(_) => BlockT2pG64::NAME,
        }
    }

    /// Blocks `range`.
    ///
    /// # Panics
    /// If `range` is out of bounds.
    pub fn range(self, range: std::ops::Range<usize>) -> T2pSlice<'a> {
        match self {
            T2pSlice::G128(b) => T2pSlice::G128(&b[range]),
            T2pSlice::G64(b) => T2pSlice::G64(&b[range]),
        }
    }

    /// The bytes of the blocks.
    pub fn bytes(&self) -> &'a [u8] {
        match self {
            T2pSlice::G128(b) => bytemuck::cast_slice(b),
            T2pSlice::G64(b) => bytemuck::cast_slice(b),
        }
    }
}

impl<'a, B: RowPairBlock> From<&'a [B]> for T2pSlice<'a> {
    fn from(b: &'a [B]) -> Self {
        B::slice(b)
    }
}

impl<'a, B: RowPairBlock> From<&'a Vec<B>> for T2pSlice<'a> {
    fn from(b: &'a Vec<B>) -> Self {
        B::slice(b)
    }
}

impl T2pVec {
    /// The blocks, borrowed.
    pub fn as_slice(&self) -> T2pSlice<'_> {
        match self {
            T2pVec::G128(b) => T2pSlice::G128(b),
            T2pVec::G64(b) => T2pSlice::G64(b),
        }
    }
}

/// Writes row `r`'s 128 codes into the code words (weight `32wd + 8s + i` in slot `s` of byte
/// `8 * (r % 2) + i` of word `(r / 2, wd)`).
#[inline]
fn set_row_codes(qs: &mut T2pWords, r: usize, codes: &[u8; QK_PQ2_0]) {
    let half = 8 * (r % 2);
    for (word, c) in qs[r / 2].iter_mut().zip(codes.chunks_exact(32)) {
        for (i, out) in word[half..half + 8].iter_mut().enumerate() {
            *out = (c[i] & 3) | (c[8 + i] & 3) << 2 | (c[16 + i] & 3) << 4 | (c[24 + i] & 3) << 6;
        }
    }
}

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

    /// Packs four rows of 128 codes (0..=3) with their fp16 scales.
    pub fn pack(codes: &[[u8; QK_PQ2_0]; ROWS_PER_T2P], d: [u16; ROWS_PER_T2P]) -> Self {
        let mut b = BlockT2p::default();
        for (r, (row, &dr)) in codes.iter().zip(&d).enumerate() {
            b.set_row(r, row, &[dr]);
        }
        b
    }

    /// The four rows of 128 codes, inverse of [`BlockT2p::pack`].
    pub fn unpack(&self) -> [[u8; QK_PQ2_0]; ROWS_PER_T2P] {
        std::array::from_fn(|r| std::array::from_fn(|k| self.code(r, k)))
    }
}

impl RowPairBlock for BlockT2p {
    const HALVES: usize = 1;
    const NAME: &'static str = "T2P";
    #[inline]
    fn words(&self) -> &T2pWords {
        &self.qs
    }
    #[inline]
    fn scales(&self, _h: usize) -> &[u16; 4] {
        &self.d
    }
    #[inline]
    fn set_row(&mut self, r: usize, codes: &[u8; QK_PQ2_0], d: &[u16]) {
        let [d] = d else {
            panic!("a group-128 T2P row takes one scale, got {}", d.len())
        };
        self.d[r] = *d;
        set_row_codes(&mut self.qs, r, codes);
    }
    fn slice(blocks: &[Self]) -> T2pSlice<'_> {
        T2pSlice::G128(blocks)
    }
    fn vec(blocks: Vec<Self>) -> T2pVec {
        T2pVec::G128(blocks)
    }
}

/// One T2P block with a scale per 64 weights: `{ uint16_t d[2][4]; uint8_t qs[2][4][16]; }`,
/// 144 bytes, the size of the eight Q2_0 (group 64) blocks it holds. `d[h][r]` scales weights
/// `64h .. 64h + 64` of row `r`; `qs` is exactly [`BlockT2p::qs`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockT2pG64 {
    /// fp16 scale bits: `[half][row]`.
    pub d: [[u16; 4]; 2],
    /// Codes: `[row pair][word][byte]`, as in [`BlockT2p`].
    pub qs: T2pWords,
}

const _: () = assert!(std::mem::size_of::<BlockT2pG64>() == 144);

impl RowPairBlock for BlockT2pG64 {
    const HALVES: usize = 2;
    const NAME: &'static str = "T2P g64";
    #[inline]
    fn words(&self) -> &T2pWords {
        &self.qs
    }
    #[inline]
    fn scales(&self, h: usize) -> &[u16; 4] {
        &self.d[h]
    }
    #[inline]
    fn set_row(&mut self, r: usize, codes: &[u8; QK_PQ2_0], d: &[u16]) {
        let [d0, d1] = d else {
            panic!("a group-64 T2P row takes two scales, got {}", d.len())
        };
        (self.d[0][r], self.d[1][r]) = (*d0, *d1);
        set_row_codes(&mut self.qs, r, codes);
    }
    fn slice(blocks: &[Self]) -> T2pSlice<'_> {
        T2pSlice::G64(blocks)
    }
    fn vec(blocks: Vec<Self>) -> T2pVec {
        T2pVec::G64(blocks)
    }
}

/// Dequantizes row `r` (0..4) of one row group (`group`: the group's `k / 128` blocks) into
/// `out` (`k` values): `(code - 1) * d` per weight, exactly as the kernels see it.
pub fn dequantize_t2p_row<B: RowPairBlock>(group: &[B], r: usize, out: &mut [f32]) {
    for (b, chunk) in group.iter().zip(out.chunks_exact_mut(QK_PQ2_0)) {
        for (j, o) in chunk.iter_mut().enumerate() {
            *o = (b.code(r, j) as i32 - 1) as f32 * super::f16_to_f32(b.scale_of(r, j));
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
            b.set_row(r, &codes[r], &[r as u16 + 10]);
        }
        for (r, row) in codes.iter().enumerate() {
            for (k, &u) in row.iter().enumerate() {
                let (p, wd, j, s) = BlockT2p::position(r, k);
                assert_eq!((b.qs[p][wd][j] >> (2 * s)) & 3, u, "row {r} weight {k}");
            }
        }
        assert_eq!(b.d, [10, 11, 12, 13]);
        // Overwriting one row changes only that row.
        b.set_row(1, &[3; 128], &[7]);
        assert_eq!(b.unpack()[1], [3; 128]);
        assert_eq!(
            [b.unpack()[0], b.unpack()[2], b.unpack()[3]],
            [codes[0], codes[2], codes[3]]
        );
    }

    #[test]
    fn group_64_blocks_share_the_code_words_and_keep_both_scales() {
        let codes: [[u8; 128]; 4] =
            std::array::from_fn(|r| std::array::from_fn(|k| ((k * 3 + r) % 4) as u8));
        let (mut a, mut b) = (BlockT2p::default(), BlockT2pG64::default());
        for (r, row) in codes.iter().enumerate() {
            a.set_row(r, row, &[r as u16]);
            b.set_row(r, row, &[10 + r as u16, 20 + r as u16]);
        }
        assert_eq!(a.qs, b.qs);
        assert_eq!(b.d, [[10, 11, 12, 13], [20, 21, 22, 23]]);
        assert_eq!((b.scale_of(2, 63), b.scale_of(2, 64)), (12, 22));
        assert_eq!(a.scale_of(3, 127), 3);
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
