//! The model's memory: one allocation for the matrices the loader repacks ([`WeightArena`]),
//! on huge pages where the system gives them ([`crate::huge_pages`]), and a converted file
//! mapped in place ([`MappedFile`]).

use crate::huge_pages;

/// One zeroed allocation that the loader carves the matrices it repacks out of, one after
/// another, so that a model's weights are one range of memory instead of one allocation per
/// matrix.
///
/// Huge pages need whole 2 MiB ranges of one advised mapping: on their own, the 1.7B's
/// attention matrices (0.5-1.1 MB) got none and its FFN matrices (3.3 MB) one each, 180 of
/// its 436 MB of weights. One allocation holds them all: everything but the two ends.
pub(crate) struct WeightArena {
    words: Vec<u64>,
    /// Bytes handed out.
    used: usize,
}

impl WeightArena {
    /// Room for `bytes` bytes of matrices, or `None` where the allocator has none (a file that
    /// declares more than fits): the loader then allocates matrix by matrix, as without one.
    pub(crate) fn new(bytes: usize) -> Option<WeightArena> {
        let n = bytes.div_ceil(8);
        let layout = std::alloc::Layout::array::<u64>(n).ok()?;
        if layout.size() == 0 {
            return None;
        }
        // SAFETY: the layout's size is not zero.
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` comes from the global allocator with the layout of `n` u64s, all
        // initialized (zero), so a Vec of length and capacity `n` owns it.
        let words = unsafe { Vec::from_raw_parts(p, n, n) };
        huge_pages::advise_vec(&words);
        Some(WeightArena { words, used: 0 })
    }

    /// The next `n` values of `T` (zeroed) and their byte range in [`as_ref`](Self::as_ref);
    /// `None` when fewer bytes are left, or when `T` is not whole 8-byte words (every T2P
    /// block is: 136 and 144 bytes).
    pub(crate) fn take<T: bytemuck::Pod>(
        &mut self,
        n: usize,
    ) -> Option<(std::ops::Range<usize>, &mut [T])> {
        let size = std::mem::size_of::<T>();
        if !size.is_multiple_of(8) || std::mem::align_of::<T>() > 8 {
            return None;
        }
        let bytes = n.checked_mul(size)?;
        let end = self.used.checked_add(bytes)?;
        let words = self.words.get_mut(self.used / 8..end / 8)?;
        let range = self.used..end;
        self.used = end;
        Some((range, bytemuck::cast_slice_mut(words)))
    }
}

impl AsRef<[u8]> for WeightArena {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.words)
    }
}

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
    fn arena_hands_out_zeroed_disjoint_ranges_in_order_until_full() {
        let mut arena = WeightArena::new(3 * 136 + 144).unwrap();
        let (r0, a) = arena.take::<crate::format::BlockT2p>(2).unwrap();
        assert!(a.iter().all(|b| *b == Default::default()));
        a[1].d[3] = 0x1234;
        let (r1, b) = arena.take::<crate::format::BlockT2pG64>(1).unwrap();
        b[0].qs[1][3][15] = 0xab;
        assert_eq!((r0.clone(), r1.clone()), (0..272, 272..416));
        // Not whole 8-byte words: refused, and nothing is used up.
        assert!(arena.take::<[u16; 3]>(1).is_none());
        assert!(arena.take::<crate::format::BlockT2p>(2).is_none());
        let (r2, _) = arena.take::<crate::format::BlockT2p>(1).unwrap();
        assert_eq!(r2, 416..552);
        assert!(arena.take::<u64>(1).is_none());
        let bytes = arena.as_ref();
        assert_eq!(bytes.len(), 552);
        assert_eq!(&bytes[136 + 6..136 + 8], &0x1234u16.to_ne_bytes());
        assert_eq!(bytes[r1.end - 1], 0xab);
        let written = [136 + 6, 136 + 7, r1.end - 1];
        let others = (0..bytes.len()).filter(|i| !written.contains(i));
        assert!(others.into_iter().all(|i| bytes[i] == 0));
        assert!(WeightArena::new(0).is_none());
        assert!(WeightArena::new(usize::MAX).is_none());
    }
}
