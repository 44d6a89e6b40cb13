//! The model's large buffers (weights, KV cache) on transparent huge pages where the kernel
//! allows it.
//!
//! Linux often runs transparent huge pages in `madvise` mode: only ranges marked with
//! `madvise(MADV_HUGEPAGE)` get 2 MiB pages. A weight matrix read once per token on 4 KiB pages
//! walks a page table entry (and often a TLB miss) every 4 KiB; on 2 MiB pages 512 times
//! fewer, and loading faults it in 512 times fewer page faults. The advice changes no byte and
//! is only a hint: elsewhere (other systems, THP off) these are plain allocations.
//!
//! Off unless `T2P_HUGEPAGES=1`: with THP `defrag` at its usual `madvise`, every huge-page
//! fault in an advised range compacts memory synchronously, and with the page cache holding the
//! model file (the usual case right after it was read) that cost a 7 GB load 25-50 % more
//! kernel time than the 4 KiB pages did (README, performance), more than any decode gain this
//! machine could measure.

use std::sync::OnceLock;

use bytemuck::Zeroable;

/// The huge page size of x86-64 and most aarch64 kernels; a smaller real size only makes the
/// advised range a little shorter than it could be.
const HUGE_PAGE: usize = 2 << 20;

/// Whether huge pages are asked for (`T2P_HUGEPAGES=1`).
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("T2P_HUGEPAGES").is_some_and(|v| v == "1"))
}

/// `n` zeroed values of `T`, from `calloc` (a large allocation is fresh zero pages the kernel
/// maps on first touch, so the threads that fill it fault its pages in, not one `memset`), on
/// huge pages where asked for and possible.
pub(crate) fn zeroed_vec<T: Zeroable>(n: usize) -> Vec<T> {
    let v = bytemuck::zeroed_vec::<T>(n);
    advise_huge(v.as_ptr().cast(), std::mem::size_of_val(v.as_slice()));
    v
}

/// Advises huge pages for the whole allocation of `v` (its capacity, touched or not): pages
/// not yet touched then come as huge pages.
pub(crate) fn advise_huge_vec<T>(v: &Vec<T>) {
    advise_huge(v.as_ptr().cast(), v.capacity() * std::mem::size_of::<T>());
}

/// `madvise(MADV_HUGEPAGE)` on the whole huge pages inside `len` bytes at `p` (nothing for a
/// range shorter than one).
fn advise_huge(p: *const u8, len: usize) {
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

/// A whole file mapped read-only (`mmap`, `MAP_PRIVATE`), its pages faulted in at once
/// (`MAP_POPULATE`) so the first token does not pay for them: a file of T2P blocks
/// (`libt2p convert`) is used where it lies in the page cache, with no copy and no fresh pages
/// to clear, and processes loading the same file share its memory.
///
/// Like every loader that maps its model (llama.cpp's too), it relies on the file not being
/// truncated or rewritten while mapped: a shorter file would fault on access.
#[cfg(unix)]
pub(crate) struct MappedFile {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value until `Drop`; any thread may read it.
#[cfg(unix)]
unsafe impl Send for MappedFile {}
// SAFETY: as above: shared references only read.
#[cfg(unix)]
unsafe impl Sync for MappedFile {}

#[cfg(unix)]
impl MappedFile {
    /// Maps all of `file` (which must not be empty).
    pub(crate) fn new(file: &std::fs::File) -> std::io::Result<MappedFile> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| std::io::Error::other("file larger than the address space"))?;
        if len == 0 {
            return Err(std::io::Error::other("cannot map an empty file"));
        }
        #[cfg(target_os = "linux")]
        let flags = libc::MAP_PRIVATE | libc::MAP_POPULATE;
        #[cfg(not(target_os = "linux"))]
        let flags = libc::MAP_PRIVATE;
        // SAFETY: a fresh read-only private mapping of an open descriptor at an address of the
        // kernel's choosing: it aliases no Rust memory; failure is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                flags,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p.cast()).ok_or_else(std::io::Error::last_os_error)?;
        Ok(MappedFile { ptr, len })
    }
}

#[cfg(unix)]
impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr..ptr + len` is a live read-only mapping owned by `self` (see `new`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(unix)]
impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; no borrow of it outlives `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

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
            advise_huge_vec(&v);
            assert_eq!(v.last().copied(), (n > 0).then_some(7));
        }
    }
}
