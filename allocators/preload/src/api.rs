//! The C allocation API over any [`MallocHeap`]: the semantics, written once.
//!
//! Each function here is the body of the C function of the same name; [`export_malloc_api!`]
//! wraps them in `#[no_mangle] extern "C"` functions bound to one heap. They never panic
//! (all arithmetic is checked), never allocate through Rust's global allocator, and set
//! `errno` as POSIX specifies.
//!
//! Choices, where the standards leave room (all of them glibc's, since programs are written
//! against glibc):
//!
//! * **Alignment.** Every block is aligned to at least [`MALLOC_ALIGNMENT`] (16 bytes on
//!   x86_64, glibc's `MALLOC_ALIGNMENT`), whatever its size; smaller alignments asked of
//!   `memalign`/`aligned_alloc`/`posix_memalign` get 16 too.
//! * **Zero sizes.** `malloc(0)`, `calloc(0, n)`, `posix_memalign(&p, a, 0)` and friends
//!   return a unique, freeable pointer, never `NULL`: the heap is asked for a zero-size
//!   layout, and gives a unique block of its smallest size (wfspan) or a unique pointer to
//!   no bytes, which faults when used (randomized).
//! * **`realloc(p, 0)`** with `p` non-null frees `p` and returns `NULL` without setting
//!   `errno` (glibc's behaviour; C23 makes it undefined, POSIX lets it be either).
//!   `realloc(NULL, n)` is `malloc(n)`.
//! * **`realloc` in place.** A block is kept when the new size fits its usable size and does
//!   not strand more than half of it (or 256 bytes, whichever is more), and the heap is
//!   told its new size (`MallocHeap::shrink_in_place`: a heap with canaries moves the
//!   canary to the new end); a block that outgrew its usable size grows in place where
//!   the heap can (`MallocHeap::grow_in_place`); otherwise the data moves to a new block
//!   of the new size. A shrink that cannot get a new block keeps the
//!   old one, so shrinking never fails. A grow that fails returns `NULL` with `ENOMEM` and
//!   leaves the old block intact. Alignment beyond 16 is not kept by `realloc` (as in C).
//! * **`aligned_alloc`** follows C17: any size; the alignment must be a power of two, else
//!   `NULL` with `EINVAL` (glibc 2.38 and later).
//! * **`memalign`** rounds an alignment that is not a power of two up to the next one, and
//!   fails with `EINVAL` only when that overflows (glibc).
//! * **`pvalloc(0)`** returns one page.
//! * A heap that refuses an alignment ([`AllocErrorKind::AlignmentUnsupported`]) makes the
//!   aligned functions fail with `EINVAL`; every other failure is `ENOMEM`.
//! * `free` and `posix_memalign` leave `errno` as they found it (POSIX.1-2024), and so
//!   does `malloc_trim`.
//!
//! [`export_malloc_api!`]: crate::export_malloc_api

use core::alloc::Layout;
use core::ffi::{c_int, c_void};
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicUsize, Ordering};

use alloclab_core::{AllocError, AllocErrorKind, AllocKind, MallocHeap};

use crate::errno;

/// The alignment of every block `malloc` returns: glibc's `MALLOC_ALIGNMENT` — 16 bytes on
/// x86_64, aarch64 and i386, twice the pointer size elsewhere. Programs (and compilers,
/// which vectorise on the assumption) rely on it.
pub const MALLOC_ALIGNMENT: usize = if cfg!(target_arch = "x86") {
    16
} else {
    2 * size_of::<usize>()
};

/// A realloc that would leave at most this many bytes of the block unused stays in place
/// even when that is more than half the block (moving small blocks gains nothing).
const SHRINK_IN_PLACE_SLACK_BYTES: usize = 256;

/// `malloc(size)`: a block of at least `size` bytes aligned to [`MALLOC_ALIGNMENT`]; a
/// unique pointer for `size == 0`. `NULL` and `ENOMEM` on failure.
#[inline(always)]
pub fn malloc<H: MallocHeap>(heap: &H, size: usize) -> *mut c_void {
    const _: () = assert!(MALLOC_ALIGNMENT <= 16, "try_malloc_fast aligns to 16");
    if let Some(block) = heap.try_malloc_fast(size) {
        return block.as_ptr().cast();
    }
    malloc_general(size, heap)
}

/// [`malloc`] past the heap's fast path: a separate function, so that `malloc` calls it in
/// tail position and its own fast path needs no stack frame. The program's argument comes
/// first, where the C caller put it, so that the fast path moves no register for the call. `extern "C"` (it cannot
/// unwind), so that the call is a plain jump: a call that may unwind out of an exported
/// C function is wrapped in an abort-on-unwind guard, and cannot be a tail call.
#[inline(never)]
pub(crate) extern "C" fn malloc_general<H: MallocHeap>(size: usize, heap: &H) -> *mut c_void {
    match allocate(heap, size, MALLOC_ALIGNMENT) {
        Ok(block) => block.as_ptr().cast(),
        Err(_) => fail(libc::ENOMEM),
    }
}

/// `free(ptr)`: nothing for `NULL`; otherwise returns the block to `heap`. `errno` is left
/// unchanged.
///
/// # Safety
///
/// `ptr` is `NULL` or a live block returned by one of these functions for this `heap`; it
/// is dead afterwards.
#[inline(always)]
pub unsafe fn free<H: MallocHeap>(heap: &H, ptr: *mut c_void) {
    let Some(block) = NonNull::new(ptr.cast::<u8>()) else {
        return;
    };
    // SAFETY: the caller guarantees `block` is a live block of `heap`.
    if unsafe { heap.try_deallocate_fast(block) } {
        return;
    }
    // SAFETY: as above; the fast path changed nothing.
    unsafe { free_general(block, heap) }
}

/// [`free`] past the heap's fast path (see [`malloc_general`]).
///
/// # Safety
///
/// As [`free`], for a non-null `block`.
#[inline(never)]
unsafe extern "C" fn free_general<H: MallocHeap>(block: NonNull<u8>, heap: &H) {
    if H::FREE_KEEPS_ERRNO {
        // SAFETY: the caller guarantees `block` is a live block of `heap`.
        unsafe { heap.deallocate_unsized(block) }
    } else {
        let _errno = errno::Preserved::new();
        // SAFETY: as above.
        unsafe { heap.deallocate_unsized(block) }
    }
}

/// `calloc(count, size)`: `count * size` zero bytes aligned to [`MALLOC_ALIGNMENT`]; a
/// unique pointer when the product is zero. `NULL` and `ENOMEM` if the product overflows or
/// the heap fails.
///
/// A block from the heap's `malloc` fast path is zeroed here; the general path asks the heap
/// for zeroed memory (which may know that fresh memory is zero already).
#[inline(always)]
pub fn calloc<H: MallocHeap>(heap: &H, count: usize, size: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        return fail(libc::ENOMEM);
    };
    if let Some(block) = heap.try_malloc_fast(total) {
        // SAFETY: the fast path returned a live block of at least `total` bytes.
        unsafe { block.as_ptr().write_bytes(0, total) };
        return block.as_ptr().cast();
    }
    calloc_general(heap, total)
}

/// [`calloc`] past the heap's fast path (see [`malloc_general`]).
#[inline(never)]
extern "C" fn calloc_general<H: MallocHeap>(heap: &H, total: usize) -> *mut c_void {
    let Some(layout) = layout(total, MALLOC_ALIGNMENT) else {
        return fail(libc::ENOMEM);
    };
    match heap.allocate_zeroed(layout) {
        Ok(block) => block.as_ptr().cast(),
        Err(_) => fail(libc::ENOMEM),
    }
}

/// `realloc(ptr, size)`: see the module documentation for the cases. On failure returns
/// `NULL` with `ENOMEM` and `ptr` stays live and unchanged.
///
/// # Safety
///
/// As [`free`] for `ptr`. On success (including `size == 0`) `ptr` is dead unless it is the
/// pointer returned.
pub unsafe fn realloc<H: MallocHeap>(heap: &H, ptr: *mut c_void, size: usize) -> *mut c_void {
    let Some(old) = NonNull::new(ptr.cast::<u8>()) else {
        return malloc(heap, size);
    };
    if size == 0 {
        // SAFETY: the caller guarantees `ptr` is a live block of `heap`.
        unsafe { free(heap, ptr) };
        return ptr::null_mut();
    }
    // SAFETY: as above.
    let usable = unsafe { heap.usable_size(old) };
    let fits = size <= usable;
    if fits && usable - size <= (usable / 2).max(SHRINK_IN_PLACE_SLACK_BYTES) {
        if size < usable {
            // SAFETY: as above; `size` is at most the usable size.
            unsafe { heap.shrink_in_place(old, size) };
        }
        return ptr;
    }
    // SAFETY: as above; the block is the caller's to resize.
    if !fits && unsafe { heap.grow_in_place(old, size) } {
        return ptr;
    }
    match allocate(heap, size, MALLOC_ALIGNMENT) {
        Ok(new) => {
            // SAFETY: `old` is live with `usable` readable bytes, `new` is a distinct live
            // block of at least `size` bytes, and we copy the smaller of the two. Bytes past
            // what the program wrote are copied as they are (uninitialised bytes are fine
            // to copy as raw memory). Then `old` is freed, as the caller expects.
            unsafe {
                new.as_ptr()
                    .copy_from_nonoverlapping(old.as_ptr(), usable.min(size));
                heap.deallocate_unsized(old);
            }
            new.as_ptr().cast()
        }
        // A shrink that cannot move keeps its block: it is big enough.
        Err(_) if fits => ptr,
        Err(_) => fail(libc::ENOMEM),
    }
}

/// `reallocarray(ptr, count, size)`: [`realloc`] to `count * size` bytes, failing with
/// `ENOMEM` (and `ptr` intact) if the product overflows.
///
/// # Safety
///
/// As [`realloc`].
#[inline]
pub unsafe fn reallocarray<H: MallocHeap>(
    heap: &H,
    ptr: *mut c_void,
    count: usize,
    size: usize,
) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: forwarded from the caller.
        Some(total) => unsafe { realloc(heap, ptr, total) },
        None => fail(libc::ENOMEM),
    }
}

/// `posix_memalign(memptr, alignment, size)`: stores a block aligned to `alignment` in
/// `*memptr` and returns 0; returns `EINVAL` if `alignment` is not a power of two multiple
/// of `sizeof(void *)`, `ENOMEM` if the heap fails. On failure `*memptr` is not written.
/// Never changes `errno`.
///
/// # Safety
///
/// `memptr` is valid for a write of one pointer.
pub unsafe fn posix_memalign<H: MallocHeap>(
    heap: &H,
    memptr: *mut *mut c_void,
    alignment: usize,
    size: usize,
) -> c_int {
    if !alignment.is_power_of_two() || !alignment.is_multiple_of(size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    if let Some(block) = try_aligned_fast(heap, size, alignment) {
        // SAFETY: the caller guarantees `memptr` is writable.
        unsafe { memptr.write(block.as_ptr().cast()) };
        return 0;
    }
    // SAFETY: forwarded from the caller.
    unsafe { posix_memalign_general(heap, memptr, alignment, size) }
}

/// [`posix_memalign`] past the heap's fast path (see [`malloc_general`]), for an
/// `alignment` already checked.
///
/// # Safety
///
/// As [`posix_memalign`].
#[inline(never)]
unsafe extern "C" fn posix_memalign_general<H: MallocHeap>(
    heap: &H,
    memptr: *mut *mut c_void,
    alignment: usize,
    size: usize,
) -> c_int {
    let _errno = errno::Preserved::new();
    match allocate(heap, size, alignment) {
        Ok(block) => {
            // SAFETY: the caller guarantees `memptr` is writable.
            unsafe { memptr.write(block.as_ptr().cast()) };
            0
        }
        Err(error) => errno_for_aligned(error),
    }
}

/// The heap's fast path for a block of `size` bytes aligned to `alignment` (`None` unless
/// it is a power of two): [`MallocHeap::try_malloc_fast`] up to [`MALLOC_ALIGNMENT`], which every block
/// has, [`MallocHeap::try_malloc_aligned_fast`] above it.
#[inline(always)]
pub(crate) fn try_aligned_fast<H: MallocHeap>(
    heap: &H,
    size: usize,
    alignment: usize,
) -> Option<NonNull<u8>> {
    // Folded away where the caller has checked it already; C++'s `align_val_t` forms
    // pass what the program gave, and the general path refuses what is not a power of two.
    if !alignment.is_power_of_two() {
        return None;
    }
    if alignment <= MALLOC_ALIGNMENT {
        heap.try_malloc_fast(size)
    } else {
        heap.try_malloc_aligned_fast(size, alignment)
    }
}

/// `aligned_alloc(alignment, size)` (C17): a block aligned to `alignment`, any `size`.
/// `NULL` with `EINVAL` if `alignment` is not a power of two, with `ENOMEM` if the heap
/// fails.
#[inline]
pub fn aligned_alloc<H: MallocHeap>(heap: &H, alignment: usize, size: usize) -> *mut c_void {
    if !alignment.is_power_of_two() {
        return fail(libc::EINVAL);
    }
    aligned_or_errno(heap, alignment, size)
}

/// `memalign(alignment, size)` (glibc): alignments up to [`MALLOC_ALIGNMENT`] (0 included)
/// are `malloc`; others are rounded up to a power of two. `NULL` with `EINVAL` if that
/// rounding overflows, with `ENOMEM` if the heap fails.
#[inline]
pub fn memalign<H: MallocHeap>(heap: &H, alignment: usize, size: usize) -> *mut c_void {
    if alignment <= MALLOC_ALIGNMENT {
        return malloc(heap, size);
    }
    match alignment.checked_next_power_of_two() {
        Some(alignment) => aligned_or_errno(heap, alignment, size),
        None => fail(libc::EINVAL),
    }
}

/// `valloc(size)`: `memalign(page_size, size)`.
#[inline]
pub fn valloc<H: MallocHeap>(heap: &H, size: usize) -> *mut c_void {
    aligned_or_errno(heap, page_size(), size)
}

/// `pvalloc(size)`: a page-aligned block of `size` rounded up to whole pages (one page for
/// `size == 0`). `NULL` with `ENOMEM` if the rounding overflows or the heap fails.
#[inline]
pub fn pvalloc<H: MallocHeap>(heap: &H, size: usize) -> *mut c_void {
    let page = page_size();
    match size.max(1).checked_next_multiple_of(page) {
        Some(rounded) => aligned_or_errno(heap, page, rounded),
        None => fail(libc::ENOMEM),
    }
}

/// `malloc_usable_size(ptr)`: the bytes usable at `ptr` (at least what was asked for); 0
/// for `NULL`.
///
/// # Safety
///
/// `ptr` is `NULL` or a live block returned by one of these functions for this `heap`.
#[inline]
pub unsafe fn malloc_usable_size<H: MallocHeap>(heap: &H, ptr: *mut c_void) -> usize {
    match NonNull::new(ptr.cast::<u8>()) {
        // SAFETY: the caller guarantees `block` is a live block of `heap`.
        Some(block) => unsafe { heap.usable_size(block) },
        None => 0,
    }
}

/// `malloc_trim(pad)` (glibc): gives memory the heap keeps for later back to the OS
/// ([`MallocHeap::trim`]); 1 if any went back, else 0. `pad` (what glibc leaves at the top
/// of its heap) has no meaning for heaps without a top, and is ignored.
#[inline]
pub fn malloc_trim<H: MallocHeap>(heap: &H, pad: usize) -> c_int {
    let _ = pad;
    let _errno = errno::Preserved::new();
    c_int::from(heap.trim())
}

/// `malloc_stats()` (glibc): writes the heap's figures to standard error, one per line, in
/// glibc's `name = value` form:
///
/// ```text
/// alloclab wfspan:
/// system bytes     =    4390912
/// in use bytes     =      74128
/// max system bytes =    4390912
/// allocations      =       1234
/// frees            =       1200
/// ```
///
/// `system bytes` is what the heap took from the OS ([`Stats::footprint_bytes`]), `in use
/// bytes` what its live blocks hold as it counts them ([`Stats::live_bytes`]; wfspan counts
/// a span run's whole room), `max system bytes` the most it took; a figure the heap does not
/// keep reads `n/a`. Nothing is allocated; `errno` is kept.
///
/// [`Stats::footprint_bytes`]: alloclab_core::Stats::footprint_bytes
/// [`Stats::live_bytes`]: alloclab_core::Stats::live_bytes
pub fn malloc_stats<H: MallocHeap>(heap: &H, name: &str) {
    let _errno = errno::Preserved::new();
    stats_text(&heap.stats(), name).write_to(2);
}

/// The text [`malloc_stats`] writes for `stats` of the heap called `name`.
pub(crate) fn stats_text(stats: &alloclab_core::Stats, name: &str) -> crate::line::Line {
    use core::fmt::Write as _;
    let mut line = crate::line::Line::default();
    let _ = write!(line, "alloclab {name}:");
    let _ = line.write_str("\n");
    for (label, value) in [
        ("system bytes    ", stats.footprint_bytes),
        ("in use bytes    ", stats.live_bytes),
        ("max system bytes", stats.peak_footprint_bytes),
        ("allocations     ", stats.allocations),
        ("frees           ", stats.deallocations),
    ] {
        // Right-aligned in ten columns, as glibc's `%10u`.
        let _ = match value {
            Some(v) => write!(line, "{label} = {v:>10}"),
            None => write!(line, "{label} = {:>10}", "n/a"),
        };
        let _ = line.write_str("\n");
    }
    line
}

/// `mallinfo2()` (glibc 2.33 and later): the heap's figures in glibc's structure. `arena`
/// is what the heap took from the OS ([`Stats::footprint_bytes`]), `uordblks` what its live
/// blocks hold ([`Stats::live_bytes`]), `fordblks` the difference (what it holds free or
/// keeps for its own use); the other fields describe glibc's arenas, free lists and mmapped
/// chunks, which these heaps do not have, and are 0 (`usmblks` is 0 in glibc too). A
/// figure the heap does not keep is 0. `errno` is kept.
///
/// [`Stats::footprint_bytes`]: alloclab_core::Stats::footprint_bytes
/// [`Stats::live_bytes`]: alloclab_core::Stats::live_bytes
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn mallinfo2<H: MallocHeap>(heap: &H) -> libc::mallinfo2 {
    let _errno = errno::Preserved::new();
    let stats = heap.stats();
    let footprint = stats.footprint_bytes.unwrap_or(0);
    let live = stats.live_bytes.unwrap_or(0);
    let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    libc::mallinfo2 {
        arena: size(footprint),
        ordblks: 0,
        smblks: 0,
        hblks: 0,
        hblkhd: 0,
        usmblks: 0,
        fsmblks: 0,
        uordblks: size(live),
        fordblks: size(footprint.saturating_sub(live)),
        keepcost: 0,
    }
}

/// `mallinfo()` (glibc, deprecated there for `mallinfo2`): [`mallinfo2`]'s figures in
/// `int` fields, each at most `INT_MAX` (glibc's own wraps a figure past 2 GiB around).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn mallinfo<H: MallocHeap>(heap: &H) -> libc::mallinfo {
    let wide = mallinfo2(heap);
    let int = |v: usize| c_int::try_from(v).unwrap_or(c_int::MAX);
    libc::mallinfo {
        arena: int(wide.arena),
        ordblks: int(wide.ordblks),
        smblks: int(wide.smblks),
        hblks: int(wide.hblks),
        hblkhd: int(wide.hblkhd),
        usmblks: int(wide.usmblks),
        fsmblks: int(wide.fsmblks),
        uordblks: int(wide.uordblks),
        fordblks: int(wide.fordblks),
        keepcost: int(wide.keepcost),
    }
}

/// The system page size (`sysconf(_SC_PAGESIZE)`, read once; 4096 if it cannot be read).
pub fn page_size() -> usize {
    static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);
    let cached = PAGE_SIZE.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: `sysconf` has no preconditions; `_SC_PAGESIZE` never fails on Linux.
    let queried = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = usize::try_from(queried)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    PAGE_SIZE.store(page, Ordering::Relaxed);
    page
}

/// The layout of a C request: aligned to at least [`MALLOC_ALIGNMENT`]. A zero size stays
/// zero: every host heap gives a zero-size layout a unique live block (see
/// [`Allocator`](alloclab_core::Allocator)), and a heap may make it one that no access can
/// use. `None` if it cannot be represented (size too large).
#[inline(always)]
fn layout(size: usize, alignment: usize) -> Option<Layout> {
    Layout::from_size_align(size, alignment.max(MALLOC_ALIGNMENT)).ok()
}

/// A block of `size` bytes aligned to `alignment` (a power of two), with the C rules of
/// [`layout`] applied.
#[inline(always)]
pub(crate) fn allocate<H: MallocHeap>(
    heap: &H,
    size: usize,
    alignment: usize,
) -> Result<NonNull<u8>, AllocError> {
    allocate_as(heap, size, alignment, AllocKind::Malloc)
}

/// [`allocate`], the block asked for as `kind` says ([`MallocHeap::allocate_as`]).
#[inline(always)]
pub(crate) fn allocate_as<H: MallocHeap>(
    heap: &H,
    size: usize,
    alignment: usize,
    kind: AllocKind,
) -> Result<NonNull<u8>, AllocError> {
    match layout(size, alignment) {
        Some(layout) => match kind {
            AllocKind::Malloc => heap.allocate(layout),
            _ => heap.allocate_as(layout, kind),
        },
        // Only reachable with a power-of-two alignment, so the size is what overflowed.
        None => Err(AllocError::new(
            Layout::new::<u8>(),
            AllocErrorKind::SizeUnsupported,
        )),
    }
}

/// The shared body of `aligned_alloc`, `memalign`, `valloc` and `pvalloc` once
/// `alignment` is known to be a power of two.
#[inline(always)]
fn aligned_or_errno<H: MallocHeap>(heap: &H, alignment: usize, size: usize) -> *mut c_void {
    if let Some(block) = try_aligned_fast(heap, size, alignment) {
        return block.as_ptr().cast();
    }
    aligned_general(heap, alignment, size)
}

/// [`aligned_or_errno`] past the heap's fast path (see [`malloc_general`]).
#[inline(never)]
extern "C" fn aligned_general<H: MallocHeap>(
    heap: &H,
    alignment: usize,
    size: usize,
) -> *mut c_void {
    match allocate(heap, size, alignment) {
        Ok(block) => block.as_ptr().cast(),
        Err(error) => fail(errno_for_aligned(error)),
    }
}

#[inline]
fn errno_for_aligned(error: AllocError) -> c_int {
    match error.kind {
        AllocErrorKind::AlignmentUnsupported => libc::EINVAL,
        _ => libc::ENOMEM,
    }
}

#[cold]
fn fail(code: c_int) -> *mut c_void {
    errno::set(code);
    ptr::null_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testheap::TestHeap;

    fn addr(p: *mut c_void) -> usize {
        p as usize
    }

    #[test]
    fn malloc_stats_writes_each_figure_on_its_line_and_says_which_it_lacks() {
        let stats = alloclab_core::Stats {
            live_bytes: Some(74_128),
            footprint_bytes: Some(4_390_912),
            peak_footprint_bytes: None,
            allocations: Some(1_234),
            deallocations: Some(1_200),
            max_alloc_steps: None,
            max_free_steps: None,
        };
        let text = stats_text(&stats, "testheap");
        assert_eq!(
            text.as_str(),
            "alloclab testheap:\n\
             system bytes     =    4390912\n\
             in use bytes     =      74128\n\
             max system bytes =        n/a\n\
             allocations      =       1234\n\
             frees            =       1200\n"
        );
    }

    #[test]
    fn mallinfo2_reports_what_the_heap_holds_and_what_is_live() {
        let heap = TestHeap::new();
        let before = mallinfo2(&heap);
        let p = malloc(&heap, 100_000);
        let during = mallinfo2(&heap);
        assert!(during.uordblks >= before.uordblks + 100_000);
        assert!(during.arena >= during.uordblks);
        assert_eq!(during.fordblks, during.arena - during.uordblks);
        // SAFETY: a live block of `heap`, freed once.
        unsafe { free(&heap, p) };
        assert!(mallinfo2(&heap).uordblks + 100_000 <= during.uordblks);
        let narrow = mallinfo(&heap);
        assert_eq!(narrow.uordblks as usize, mallinfo2(&heap).uordblks);
    }

    #[test]
    fn malloc_zero_returns_unique_aligned_pointers() {
        let heap = TestHeap::new();
        let a = malloc(&heap, 0);
        let b = malloc(&heap, 0);
        assert!(!a.is_null() && !b.is_null());
        assert_ne!(a, b);
        assert_eq!(addr(a) % MALLOC_ALIGNMENT, 0);
        // SAFETY: both are live blocks of `heap`.
        unsafe {
            free(&heap, a);
            free(&heap, b);
        }
    }

    #[test]
    fn every_malloc_result_is_sixteen_byte_aligned_and_big_enough() {
        let heap = TestHeap::new();
        for size in (1..2000).chain([4095, 4096, 70_000, 300_000]) {
            let p = malloc(&heap, size);
            assert_eq!(addr(p) % 16, 0, "size {size}");
            // SAFETY: `p` is live; we write its whole usable size, then free it.
            unsafe {
                let usable = malloc_usable_size(&heap, p);
                assert!(usable >= size);
                p.cast::<u8>().write_bytes(0xa5, usable);
                free(&heap, p);
            }
        }
    }

    #[test]
    fn impossible_sizes_fail_with_enomem() {
        let heap = TestHeap::new();
        for size in [usize::MAX, isize::MAX as usize, isize::MAX as usize - 8] {
            errno::set(0);
            assert!(malloc(&heap, size).is_null());
            assert_eq!(errno::get(), libc::ENOMEM);
        }
    }

    #[test]
    fn calloc_overflow_fails_with_enomem_and_zero_products_get_blocks() {
        let heap = TestHeap::new();
        errno::set(0);
        assert!(calloc(&heap, usize::MAX / 2 + 1, 2).is_null());
        assert_eq!(errno::get(), libc::ENOMEM);
        let a = calloc(&heap, 0, 7);
        let b = calloc(&heap, 7, 0);
        assert!(!a.is_null() && !b.is_null() && a != b);
        // SAFETY: live blocks of `heap`.
        unsafe {
            free(&heap, a);
            free(&heap, b);
        }
    }

    #[test]
    fn calloc_zeroes_a_reused_dirty_block() {
        let heap = TestHeap::new();
        for size in [24, 100, 1000, 5000] {
            let p = malloc(&heap, size);
            // SAFETY: `p` is live with `size` bytes; freed before `calloc` may reuse it.
            unsafe {
                p.cast::<u8>().write_bytes(0xab, size);
                free(&heap, p);
            }
            let q = calloc(&heap, 1, size).cast::<u8>();
            // SAFETY: `q` is live with `size` bytes.
            let bytes = unsafe { core::slice::from_raw_parts(q, size) };
            assert!(bytes.iter().all(|&b| b == 0), "size {size}");
            // SAFETY: live block of `heap`.
            unsafe { free(&heap, q.cast()) };
        }
    }

    #[test]
    fn realloc_keeps_contents_and_failure_leaves_the_block_intact() {
        let heap = TestHeap::new();
        // SAFETY: every pointer used is live at the time; each is freed once.
        unsafe {
            let p = realloc(&heap, ptr::null_mut(), 40).cast::<u8>();
            assert!(!p.is_null());
            for i in 0..40 {
                p.add(i).write(i as u8);
            }
            let p = realloc(&heap, p.cast(), 100_000).cast::<u8>();
            assert!((0..40).all(|i| p.add(i).read() == i as u8));
            let p = realloc(&heap, p.cast(), 10).cast::<u8>();
            assert!((0..10).all(|i| p.add(i).read() == i as u8));
            errno::set(0);
            assert!(realloc(&heap, p.cast(), usize::MAX - 4096).is_null());
            assert_eq!(errno::get(), libc::ENOMEM);
            assert!((0..10).all(|i| p.add(i).read() == i as u8));
            errno::set(0);
            assert!(reallocarray(&heap, p.cast(), usize::MAX / 2 + 1, 4).is_null());
            assert_eq!(errno::get(), libc::ENOMEM);
            assert!((0..10).all(|i| p.add(i).read() == i as u8));
            errno::set(libc::EDOM);
            assert!(realloc(&heap, p.cast(), 0).is_null());
            assert_eq!(errno::get(), libc::EDOM, "realloc(p, 0) is a free");
        }
    }

    #[test]
    fn realloc_shrinks_in_place_when_little_would_be_stranded() {
        let heap = TestHeap::new();
        // SAFETY: live blocks of `heap`, each freed once.
        unsafe {
            let p = malloc(&heap, 1000);
            let usable = malloc_usable_size(&heap, p);
            assert_eq!(realloc(&heap, p, usable), p);
            assert_eq!(realloc(&heap, p, usable / 2 + 1), p);
            let small = realloc(&heap, p, 8);
            assert!(malloc_usable_size(&heap, small) < usable);
            free(&heap, small);
        }
    }

    #[test]
    fn posix_memalign_checks_alignment_and_never_touches_errno() {
        let heap = TestHeap::new();
        let sentinel = 0x5e57_usize as *mut c_void;
        for bad in [0, 1, 2, 3, 4, 12, 24, 48, 100] {
            let mut p = sentinel;
            errno::set(libc::EDOM);
            // SAFETY: `&mut p` is writable.
            let rc = unsafe { posix_memalign(&heap, &mut p, bad, 16) };
            assert_eq!(rc, libc::EINVAL);
            assert_eq!(p, sentinel);
            assert_eq!(errno::get(), libc::EDOM);
        }
        for alignment in [8, 16, 32, 64, 4096, 1 << 16, 1 << 20] {
            for size in [0, 1, 17, 1000, 100_000] {
                let mut p = ptr::null_mut();
                errno::set(libc::EDOM);
                // SAFETY: `&mut p` is writable; the block is live until freed.
                unsafe {
                    assert_eq!(posix_memalign(&heap, &mut p, alignment, size), 0);
                    assert_eq!(addr(p) % alignment.max(16), 0);
                    assert!(malloc_usable_size(&heap, p) >= size);
                    p.cast::<u8>().write_bytes(1, size);
                    free(&heap, p);
                }
                assert_eq!(errno::get(), libc::EDOM);
            }
        }
        let mut p = sentinel;
        errno::set(libc::EDOM);
        // SAFETY: `&mut p` is writable.
        let rc = unsafe { posix_memalign(&heap, &mut p, 64, usize::MAX - 100) };
        assert_eq!(rc, libc::ENOMEM);
        assert_eq!(p, sentinel);
        assert_eq!(errno::get(), libc::EDOM);
    }

    #[test]
    fn aligned_alloc_rejects_non_powers_of_two_with_einval() {
        let heap = TestHeap::new();
        for bad in [0, 3, 24, 48, 1000] {
            errno::set(0);
            assert!(aligned_alloc(&heap, bad, 64).is_null());
            assert_eq!(errno::get(), libc::EINVAL);
        }
        for (alignment, size) in [(1, 5), (8, 5), (64, 100), (4096, 4096), (1 << 20, 3)] {
            let p = aligned_alloc(&heap, alignment, size);
            assert_eq!(addr(p) % alignment.max(16), 0);
            // SAFETY: live block of `heap`.
            unsafe { free(&heap, p) };
        }
        errno::set(0);
        assert!(aligned_alloc(&heap, 64, usize::MAX - 10).is_null());
        assert_eq!(errno::get(), libc::ENOMEM);
    }

    #[test]
    fn memalign_rounds_up_and_valloc_pvalloc_are_page_aligned() {
        let heap = TestHeap::new();
        let page = page_size();
        // SAFETY: live blocks of `heap`, each freed once.
        unsafe {
            let p = memalign(&heap, 48, 10);
            assert_eq!(addr(p) % 64, 0);
            free(&heap, p);
            let p = memalign(&heap, 0, 10);
            assert_eq!(addr(p) % 16, 0);
            free(&heap, p);
            errno::set(0);
            assert!(memalign(&heap, usize::MAX / 2 + 2, 10).is_null());
            assert_eq!(errno::get(), libc::EINVAL);

            let p = valloc(&heap, 100);
            assert_eq!(addr(p) % page, 0);
            free(&heap, p);
            for size in [0, 1, page, page + 1] {
                let p = pvalloc(&heap, size);
                assert_eq!(addr(p) % page, 0);
                assert!(malloc_usable_size(&heap, p) >= size.max(1).next_multiple_of(page));
                free(&heap, p);
            }
            errno::set(0);
            assert!(pvalloc(&heap, usize::MAX - 10).is_null());
            assert_eq!(errno::get(), libc::ENOMEM);
        }
    }

    #[test]
    fn free_of_null_is_a_no_op_and_free_keeps_errno() {
        let heap = TestHeap::new();
        // SAFETY: NULL, then live blocks of `heap`.
        unsafe {
            free(&heap, ptr::null_mut());
            assert_eq!(malloc_usable_size(&heap, ptr::null_mut()), 0);
            for size in [10, 1 << 20] {
                let p = malloc(&heap, size);
                errno::set(libc::EDOM);
                free(&heap, p);
                assert_eq!(errno::get(), libc::EDOM);
            }
        }
    }
}
