//! What wfspan takes from the OS: one large reservation of address space for spans, small
//! mappings for heap metadata, and direct mappings for huge blocks.
//!
//! The span region is reserved once (`MAP_NORESERVE`: address space, not memory) and handed
//! out with a `fetch_add` on a bump pointer, so taking a fresh span is one wait-free RMW; the
//! kernel supplies physical pages on first touch. Huge blocks are the one place wfspan calls
//! `mmap`/`munmap` on the allocation path: documented as not wait-free.

use alloclab_core::errno::Preserved;
use core::ptr::{self, NonNull};

/// Maps `len` bytes of fresh zeroed memory, or `None`.
///
/// `reserve_only`: address space without committing swap (`MAP_NORESERVE`).
pub fn map(len: usize, reserve_only: bool) -> Option<NonNull<u8>> {
    let flags = libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS
        | if reserve_only { libc::MAP_NORESERVE } else { 0 };
    // SAFETY: an anonymous mapping without an address hint has no preconditions.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        None
    } else {
        NonNull::new(addr.cast())
    }
}

/// Unmaps `len` bytes at `addr`.
///
/// # Safety
///
/// `addr..addr + len` is (part of) a mapping made by [`map`] that nothing uses any more.
/// `errno` is left as it was (a free calls this, and C's `free` keeps `errno`).
pub unsafe fn unmap(addr: NonNull<u8>, len: usize) {
    let _errno = Preserved::new();
    // SAFETY: the caller guarantees the range is ours and unused.
    unsafe { libc::munmap(addr.as_ptr().cast(), len) };
}

/// Gives the pages of `addr..addr + len` back to the OS (`MADV_DONTNEED`): the range stays
/// mapped and reads as zero; its next touch faults a fresh page in. `errno` is left as it
/// was.
///
/// # Safety
///
/// `addr..addr + len` is page-aligned, inside a mapping made by [`map`], and holds nothing
/// anyone needs.
pub unsafe fn discard(addr: usize, len: usize) {
    let _errno = Preserved::new();
    // SAFETY: the caller guarantees the range is ours and unused; MADV_DONTNEED on private
    // anonymous memory only drops its contents.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
}

/// Reserves an address range of up to `len` bytes aligned to `align` (a power of two): tries
/// `len`, then halves down to `min_len`. Returns the aligned start and the usable length.
pub fn reserve_aligned(len: usize, min_len: usize, align: usize) -> Option<(NonNull<u8>, usize)> {
    let mut want = len;
    while want >= min_len {
        if let Some(start) = map_aligned_with(want, align, true) {
            return Some((start, want));
        }
        want /= 2;
    }
    None
}

/// Maps `len` bytes of committed memory aligned to `align` (a power of two). Returns the
/// start and the length (to unmap with [`unmap`]).
pub fn map_aligned(len: usize, align: usize) -> Option<(NonNull<u8>, usize)> {
    map_aligned_with(len, align, false).map(|start| (start, len))
}

fn map_aligned_with(len: usize, align: usize, reserve_only: bool) -> Option<NonNull<u8>> {
    let base = map(len.checked_add(align)?, reserve_only)?;
    let start = (base.as_ptr() as usize).next_multiple_of(align);
    let lead = start - base.as_ptr() as usize;
    // SAFETY: trimming the unaligned lead and the unused tail of our own fresh mapping.
    unsafe {
        if lead > 0 {
            unmap(base, lead);
        }
        let tail = align - lead;
        if tail > 0 {
            unmap(NonNull::new_unchecked((start + len) as *mut u8), tail);
        }
        // `start` lies inside a successful mapping, hence non-null.
        Some(NonNull::new_unchecked(start as *mut u8))
    }
}

/// The system page size.
pub fn page_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 { page as usize } else { 4096 }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Whether the page at `addr` is mapped (`mincore` fails with `ENOMEM` on one that is
    /// not).
    fn mapped(addr: usize) -> bool {
        let mut resident = 0u8;
        // SAFETY: `mincore` only reads the page tables of one page and writes one byte.
        unsafe { libc::mincore(addr as *mut libc::c_void, page_bytes(), &mut resident) == 0 }
    }

    /// An aligned mapping is cut out of a larger one: what lies before the aligned start
    /// (the lead) and after its end (the tail) is given back, so that only `len` bytes stay
    /// mapped. Another thread may map something right beside it before the test looks; a
    /// lead or tail left mapped is there every time.
    #[test]
    fn an_aligned_mapping_leaves_nothing_mapped_before_or_after_it() {
        let page = page_bytes();
        let (len, align) = (16 * page, 1 << 30);
        let mut seen = Vec::new();
        let clean = (0..8).any(|_| {
            let start = map_aligned_with(len, align, true).expect("1 GiB of address space");
            let s = start.as_ptr() as usize;
            assert_eq!(s % align, 0);
            assert!(mapped(s) && mapped(s + len - page));
            let around = (mapped(s - page), mapped(s + len));
            seen.push(around);
            // SAFETY: the mapping just made, unused.
            unsafe { unmap(start, len) };
            around == (false, false)
        });
        assert!(
            clean,
            "pages mapped (before, after) the aligned range in every try: {seen:?}"
        );
    }
}
