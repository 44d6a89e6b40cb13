//! Transparent huge pages for the weights a decode streams every token, and for the bandwidth
//! probe that measures their ceiling (the KV cache stays on 4 KiB pages: `KvBuf::resize`).
//!
//! Linux often runs transparent huge pages in `madvise` mode: only ranges marked with
//! `madvise(MADV_HUGEPAGE)` get 2 MiB pages. On 4 KiB pages a weight stream crosses a page
//! every 4 KiB; the hardware prefetchers stop at each crossing and each needs a page-table
//! walk whose entries the streamed weights keep evicting. On a Zen 4 (2 threads) that capped
//! the 1.7B's and the 27B's ternary matmuls near 30 GB/s whatever the memory gave, and on
//! 2 MiB pages they followed the memory (README, issue 41). The advice changes no byte and is
//! only a hint: elsewhere (other systems, THP off or `always`) these are plain allocations.
//!
//! On by default; `T2P_HUGEPAGES=0` turns it off. The cost is at load: a fresh huge page is
//! cleared whole at its first touch, and where free memory is fragmented the kernel (THP
//! `defrag` at its usual `madvise`) compacts memory to find one.

use std::sync::OnceLock;

use bytemuck::Zeroable;

/// The huge page size of x86-64 and most aarch64 kernels; a smaller real size only makes the
/// advised range a little shorter than it could be.
const HUGE_PAGE: usize = 2 << 20;

/// Whether huge pages are asked for: unless `T2P_HUGEPAGES=0`.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("T2P_HUGEPAGES").is_none_or(|v| v != "0"))
}

/// `n` zeroed values of `T`, from `calloc` (a large allocation is fresh zero pages the kernel
/// maps on first touch, so the threads that fill it fault its pages in, not one `memset`), on
/// huge pages where asked for and possible.
pub fn zeroed_vec<T: Zeroable>(n: usize) -> Vec<T> {
    let v = bytemuck::zeroed_vec::<T>(n);
    advise_vec(&v);
    v
}

/// Advises huge pages for the whole allocation of `v` (its capacity, touched or not): pages
/// not yet touched then come as huge pages.
pub fn advise_vec<T>(v: &Vec<T>) {
    advise_range(v.as_ptr().cast(), v.capacity() * std::mem::size_of::<T>());
}

/// `madvise(MADV_HUGEPAGE)` on the whole huge pages inside `len` bytes at `p` (nothing for a
/// range shorter than one).
fn advise_range(p: *const u8, len: usize) {
    if len < HUGE_PAGE || !enabled() {
        return;
    }
    let start = (p as usize).next_multiple_of(HUGE_PAGE);
    let end = (p as usize).saturating_add(len) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        advise(start, end - start);
    }
}

#[cfg(target_os = "linux")]
fn advise(start: usize, len: usize) {
    // SAFETY: `start..start + len` lies inside one live allocation of the caller (a `Vec`'s
    // buffer, rounded inwards to whole huge pages). MADV_HUGEPAGE only flags the mapping: it
    // changes no byte, unmaps nothing and hands out no pointer; on failure (THP compiled out,
    // an old kernel) the mapping is left as it was, so the result is ignored.
    unsafe {
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_start: usize, _len: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_vec_is_zero_and_writable() {
        for n in [0, 1, 1000, (5 << 20) + 3] {
            let mut v: Vec<u16> = zeroed_vec(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 0));
            if let Some(x) = v.last_mut() {
                *x = 7;
            }
            advise_vec(&v);
            assert_eq!(v.last().copied(), (n > 0).then_some(7));
        }
    }
}
