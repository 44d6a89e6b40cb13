//! The AVX2 + F16C path: `maddubs` on slot-masked T2P words.
//!
//! `maddubs(a, b)` multiplies unsigned bytes `a` by signed bytes `b` and adds adjacent pairs into
//! int16 *with saturation*, so every int16 sum is bounded below: codes are `u <= 3` (code 3,
//! weight +2, is legal) and activations `|y| <= 128` (-128 is legal in raw `q8_K`). The slot-3
//! mask `0xC0` would give `192 * 127 * 2 = 48768` and saturate, so slot 3 is always shifted down
//! first.

use std::arch::x86_64::*;

use super::{DotStep, HotLoop, Path, bcast8, chunk8, load_word, load_word_pair};
use crate::format::{BlockT2p, RowPairBlock};
use crate::kernels::Isa;

/// The AVX2 path (a type only: its kernels are reached through [`Path::run`]).
pub(super) enum Avx2 {}

impl Path for Avx2 {
    const ISA: Isa = Isa::Avx2;

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn run<L: HotLoop>(l: L) -> L::Out {
        // SAFETY: AVX2 and F16C, all the loops and this dot step use, are enabled here.
        unsafe { l.run::<Self>() }
    }
}

impl DotStep for Avx2 {
    /// [`block_dot`] returns `4 * dot(u, y)`.
    const SHIFT: i32 = 2;

    #[inline(always)]
    unsafe fn block_dot(blk: &BlockT2p, ys: &[i8; 128]) -> __m256i {
        // SAFETY: the caller guarantees the path's features (AVX2, F16C).
        unsafe { block_dot(blk, ys) }
    }

    #[inline(always)]
    unsafe fn slots_dot(u: &[[__m256i; 4]; 2], ops: &[__m256i; 4]) -> __m256i {
        // SAFETY: as for `block_dot`.
        unsafe { slots_dot(u, ops) }
    }

    #[inline(always)]
    unsafe fn pair_dot<B: RowPairBlock>(blk: &B, q: usize, ops: &[__m256i; 4]) -> __m256i {
        // SAFETY: as for `block_dot`.
        unsafe { pair_dot(blk, q, ops) }
    }
}

/// `4 * dot(u, y)` of one T2P block with its 128 activations, as int32
/// `[r0, r0, r1, r1 | r2, r2, r3, r3]` (each row split over two lanes).
///
/// Per word the 5-op slot split `s0 = v & 3`, `s1 = v & 0xC`, `t = v >> 4`, `s2 = t & 3`,
/// `s3 = t & 0xC` gives `u` (slots 0, 2) and `4u` (slots 1, 3). Slots of equal scale share an
/// int16 accumulator: `a` sums 8 `maddubs` of `u` (each pair `|.| <= 2*3*128 = 768`, total
/// `<= 6144`), `b` sums 8 of `4u` (`<= 2*12*128*8 = 24576`), both below 32767, so no `maddubs`
/// saturates and no int16 add wraps. `madd_epi16` then widens with weights 4 and 1:
/// `4a + b = 4 * dot(u, y)` per row in int32.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn block_dot(blk: &BlockT2p, ys: &[i8; 128]) -> __m256i {
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

/// `dot(u, y)` per row and word of words `2q`, `2q + 1` (the `q8_0` gemv, which decodes per
/// block): per row pair, the slot split of [`block_dot`] and four `maddubs` against the table
/// operands. Each int16 pair is `|.| <= 2*3*128 = 768` for slots 0, 2 and `<= 2*12*128 = 3072`
/// for the `4u` slots 1, 3, so nothing saturates; `p1 + p3` (`<= 6144`) is a multiple of 4, so
/// `>> 2` is exact and the word sum `p0 + p2 + (p1 + p3) / 4` is `<= 3072`. `hadd` of the two row
/// pairs (`<= 6144`) and `madd` by ones give `[w2q: r0, r1, r2, r3 | w2q+1: r0, r1, r2, r3]`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
fn pair_dot<B: RowPairBlock>(blk: &B, q: usize, ops: &[__m256i; 4]) -> __m256i {
    let m03 = _mm256_set1_epi8(0x03);
    let m0c = _mm256_set1_epi8(0x0C);
    let x: [__m256i; 2] = std::array::from_fn(|p| {
        let v = load_word_pair(blk, p, q);
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

/// [`pair_dot`] from decoded slots (plain `u`, shared by the columns of a tile): per row pair
/// four `maddubs` summed in int16 (`<= 4 * 768 = 3072`), then `hadd` (`<= 6144`) and `madd` as
/// there.
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
