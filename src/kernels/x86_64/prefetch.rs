//! Software prefetch of the x86 kernels' weight streams, and the order in which a gemv pass
//! walks its row groups ([`PassGroups`]).
//!
//! A row group's blocks are contiguous, but a kernel walks them in short runs (k = 2048 is 16
//! blocks, 2176 bytes, per row group). The hardware prefetchers follow such runs badly: in the
//! runner's decode (bonsai-1.7b synth, Zen 3) the `q8_0` gemv spent a quarter of its samples on
//! its first weight load and ran 23 % slower than on the kernel bench's long rows. Each kernel
//! therefore asks for the bytes it reads next while it reads the current ones, at the same
//! rate, and the gemvs read row groups that lie apart, so that each stream runs long.

use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T1, _mm_prefetch};

/// Hints the CPU to bring blocks `at .. at + N` of `x` into L1, one request per 64-byte line
/// from the first block's start (consecutive calls cover a run). Indices past the end of `x`
/// are fine: nothing is read.
#[inline(always)]
pub(in crate::kernels) fn blocks<const N: usize>(x: &[impl Sized], at: usize) {
    blocks_hint::<N, _MM_HINT_T0>(x, at)
}

/// [`blocks`] into L2 only, for the `q8_0` gemvs, which ask for a whole pass (2 or 4 row
/// groups) ahead: past k = 4096 two passes outgrow a 32 KiB L1, and lines brought there pushed
/// out the pass being read and its operands. On a Zen 4 (`gemv_32768x8192_q8_0`, criterion,
/// interleaved) the 512-bit gemv went from 9.1-10.6 to 15.1-15.9 GiB/s on one thread, the AVX2
/// one from 8.6-9.2 to 10.7-10.9; at k = 2048 the two hints measured the same.
#[inline(always)]
pub(in crate::kernels) fn blocks_to_l2<const N: usize>(x: &[impl Sized], at: usize) {
    blocks_hint::<N, _MM_HINT_T1>(x, at)
}

/// [`blocks`] with the cache-level hint `HINT`.
#[inline(always)]
fn blocks_hint<const N: usize, const HINT: i32>(x: &[impl Sized], at: usize) {
    let p = x.as_ptr().wrapping_add(at).cast::<i8>();
    for line in 0..(N * elem_size(x)).div_ceil(64) {
        // SAFETY: a prefetch is only a hint: it never faults and reads nothing into the
        // program, so any address is sound (SSE is part of x86_64).
        unsafe { _mm_prefetch::<HINT>(p.wrapping_add(64 * line)) };
    }
}

/// Bytes ahead in each of its weight streams ([`PassGroups`]) that a gemv pass asks for into
/// L2: 32 T2P blocks, 17 KB for the 512-bit gemv's four streams.
const STREAM_BYTES_AHEAD: usize = 32 * 136;

/// Hints the CPU to bring the block [`STREAM_BYTES_AHEAD`] past block `at` of the weight
/// stream `x` into L2 (called once per block a stream reads, it keeps that distance).
#[inline(always)]
pub(in crate::kernels) fn stream_ahead<B>(x: &[B], at: usize) {
    blocks_to_l2::<1>(x, at + STREAM_BYTES_AHEAD.div_ceil(size_of::<B>()))
}

/// The row groups one pass of a gemv (or a narrow gemm) reads side by side, `G` weight
/// streams: group `i` of the pass is `first + i * stride`, the first `real` of them real (the
/// rest repeat the last real one; their sums are not for storing).
///
/// The groups of a pass lie `groups / G` apart, not next to each other, so that each stream runs
/// on through a `1 / G` share of the matrix. Next to each other, a stream ended after one row
/// group (2176 bytes at k = 2048) and the next pass started `G` new ones, which the hardware
/// prefetchers had to find again: on a Zen 4 (two threads, from memory) the 512-bit gemv at
/// k = 2048 streamed 10-20 % below the one at k = 8192, and the 1.7B's decode (every matrix
/// k = 2048 but one) gained about 5 % from the change. Each stream asks for its own blocks
/// ahead ([`stream_ahead`]).
#[derive(Clone, Copy, Debug)]
pub(in crate::kernels) struct PassGroups {
    /// The pass's first group.
    pub first: usize,
    /// Groups from one of the pass's streams to the next.
    pub stride: usize,
    /// The real groups of the pass (at least 1, at most `G`).
    pub real: usize,
}

impl PassGroups {
    /// The passes of `G` row groups over `groups` row groups: pass `p` takes `p`, `p + s`,
    /// `p + 2s`, .. with `s = ceil(groups / G)`.
    pub(in crate::kernels) fn all<const G: usize>(groups: usize) -> impl Iterator<Item = Self> {
        let stride = groups.div_ceil(G);
        (0..stride).map(move |first| PassGroups {
            first,
            stride,
            real: (groups - first).div_ceil(stride).min(G),
        })
    }

    /// Row group `i` of the pass, the last real one for `i >= real`.
    pub(in crate::kernels) fn group(&self, i: usize) -> usize {
        self.first + i.min(self.real - 1) * self.stride
    }
}

/// Row groups ahead that a gemm pass asks for into L2 ([`gemm_block`]).
pub(in crate::kernels) const L2_GROUPS_AHEAD: usize = 4;

/// The prefetch of a gemm pass that reads block `b` of row group `g` (`nb` blocks a group):
/// the same block of group `g + 1` into L1, read a group later, and of group
/// `g + L2_GROUPS_AHEAD` into L2. The L1 hint alone is too short from memory where a pass has
/// few columns: on a Zen 4 (criterion `gemm_32768x8192_narrow_q8_0`, two threads, interleaved)
/// the L2 hint took a 4-column pass from 5.2-5.7 to 4.6-4.8 ms, with no change in L2.
#[inline(always)]
pub(in crate::kernels) fn gemm_block(x: &[impl Sized], nb: usize, g: usize, b: usize) {
    blocks::<1>(x, (g + 1) * nb + b);
    blocks_to_l2::<1>(x, (g + L2_GROUPS_AHEAD) * nb + b);
}

/// Hints the CPU to bring `x[at..at + len]` into L1, one request per 64-byte line (the
/// attention loops' K and V rows). Indices past the end of `x` are fine, as in [`blocks`].
#[inline(always)]
pub(in crate::kernels) fn span<T>(x: &[T], at: usize, len: usize) {
    span_hint::<T, _MM_HINT_T0>(x, at, len)
}

/// [`span`] into L2 only: the far hint of a stream read from memory, which keeps more lines in
/// flight than the L1 fill buffers a near hint waits on.
#[inline(always)]
pub(in crate::kernels) fn span_to_l2<T>(x: &[T], at: usize, len: usize) {
    span_hint::<T, _MM_HINT_T1>(x, at, len)
}

/// [`span`] with the cache-level hint `HINT`.
#[inline(always)]
fn span_hint<T, const HINT: i32>(x: &[T], at: usize, len: usize) {
    let p = x.as_ptr().wrapping_add(at).cast::<i8>();
    for line in 0..(len * size_of::<T>()).div_ceil(64) {
        // SAFETY: as in `blocks`: a prefetch never faults and reads nothing into the program.
        unsafe { _mm_prefetch::<HINT>(p.wrapping_add(64 * line)) };
    }
}

/// Hints the CPU to bring the 64-byte line holding `p` into L2 (the F16 rows, which ask two
/// tiles ahead). Any address is fine, as in [`blocks`].
#[inline(always)]
pub(in crate::kernels) fn line_to_l2<T>(p: *const T) {
    // SAFETY: as in `blocks`: a prefetch never faults and reads nothing into the program.
    unsafe { _mm_prefetch::<_MM_HINT_T1>(p.cast()) };
}

/// Bytes of one element of `x`.
#[inline(always)]
fn elem_size<T>(_: &[T]) -> usize {
    size_of::<T>()
}

#[cfg(test)]
mod tests {
    use super::PassGroups;

    /// Every row group is a real lane of exactly one pass, lanes past `real` repeat the last
    /// real group, and a pass's real groups lie `stride` apart.
    fn passes_cover_every_group_once<const G: usize>() {
        for groups in 0..40 {
            let mut seen = vec![0u32; groups];
            for pass in PassGroups::all::<G>(groups) {
                assert!((1..=G).contains(&pass.real), "{G} x {groups}: {pass:?}");
                for i in 0..G {
                    let g = pass.group(i);
                    assert!(g < groups, "{G} x {groups}: {pass:?} lane {i}");
                    match i < pass.real {
                        true => {
                            assert_eq!(g, pass.first + i * pass.stride);
                            seen[g] += 1;
                        }
                        false => assert_eq!(g, pass.group(pass.real - 1)),
                    }
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{G} x {groups}: {seen:?}");
        }
    }

    #[test]
    fn passes_of_one_two_and_four_groups_cover_every_group_once() {
        passes_cover_every_group_once::<1>();
        passes_cover_every_group_once::<2>();
        passes_cover_every_group_once::<4>();
    }
}
