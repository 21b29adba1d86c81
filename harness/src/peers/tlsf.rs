//! [`TlsfHeap`]: rlsf's TLSF behind one mutex, growing by mmap'd chunks.
//!
//! TLSF (Masmano et al., 2004) is the real-time anchor: O(1) allocation and free, a bounded
//! instruction count. rlsf is single-threaded; behind a lock its worst case grows with the
//! number of waiting threads — which is the point of comparing it with wait-free designs.

use core::alloc::Layout;
use core::ptr::{self, NonNull};
use std::sync::Mutex;

use alloclab_core::{AllocError, AllocErrorKind, Allocator, HostAllocator, Stats};
use rlsf::{FlexSource, FlexTlsf};

/// Chunks taken from the OS are at least this large.
const CHUNK_BYTES: usize = 1 << 20;

/// Memory pools for TLSF, mapped with `mmap` and unmapped when the heap is dropped.
#[derive(Debug, Default)]
struct MmapSource;

// SAFETY: `alloc` returns fresh, exclusively owned, page-aligned mappings of the length it
// reports; `dealloc` unmaps exactly such a mapping; nothing else touches them.
unsafe impl FlexSource for MmapSource {
    unsafe fn alloc(&mut self, min_size: usize) -> Option<NonNull<[u8]>> {
        let len = min_size.max(CHUNK_BYTES).checked_next_power_of_two()?;
        // SAFETY: an anonymous private mapping with no address hint has no preconditions.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return None;
        }
        let start = NonNull::new(addr.cast::<u8>())?;
        Some(NonNull::slice_from_raw_parts(start, len))
    }

    unsafe fn dealloc(&mut self, chunk: NonNull<[u8]>) {
        // SAFETY: `chunk` is a mapping returned by `alloc` above, unmapped once.
        unsafe { libc::munmap(chunk.as_ptr().cast(), chunk.len()) };
    }

    fn supports_dealloc(&self) -> bool {
        true
    }

    fn min_align(&self) -> usize {
        4096
    }
}

type Tlsf = FlexTlsf<MmapSource, usize, usize, { usize::BITS as usize }, { usize::BITS as usize }>;

/// `Tlsf` holds raw pointers into its pools, so it is not `Send` by default.
struct Pools(Tlsf);

// SAFETY: the pools are owned exclusively by the `Tlsf`; moving it to another thread moves
// that ownership, and the mutex in `TlsfHeap` lets one thread at a time use it.
unsafe impl Send for Pools {}

/// TLSF behind a mutex: the classic way to share a single-threaded real-time allocator.
///
/// Zero-size layouts are refused with [`AllocErrorKind::ZeroSize`]. Stats: `footprint_bytes`
/// is not tracked (measure the resident set instead).
pub struct TlsfHeap {
    pools: Mutex<Pools>,
}

impl TlsfHeap {
    /// An empty heap; it maps its first chunk on the first allocation.
    pub const fn new() -> Self {
        Self {
            pools: Mutex::new(Pools(Tlsf::new(MmapSource))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pools> {
        // TLSF never panics while holding the lock, so a poisoned lock only means a caller's
        // thread died elsewhere; the heap is intact.
        self.pools.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for TlsfHeap {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for TlsfHeap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("TlsfHeap")
    }
}

impl Allocator for TlsfHeap {
    type Handle = NonNull<u8>;

    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        if layout.size() == 0 {
            return Err(AllocError::new(layout, AllocErrorKind::ZeroSize));
        }
        self.lock()
            .0
            .allocate(layout)
            .ok_or(AllocError::new(layout, AllocErrorKind::OutOfMemory))
    }

    unsafe fn deallocate(&self, handle: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller guarantees `handle` is a live block of this heap allocated with
        // `layout`, hence with `layout.align()`.
        unsafe { self.lock().0.deallocate(handle, layout.align()) }
    }

    fn name(&self) -> &str {
        "rlsf"
    }

    fn stats(&self) -> Stats {
        Stats::default()
    }
}

impl HostAllocator for TlsfHeap {
    unsafe fn reallocate(
        &self,
        ptr: NonNull<u8>,
        old_layout: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        let new_layout = alloclab_core::resized_layout(old_layout, new_size)?;
        // SAFETY: the caller guarantees `ptr` is a live block of this heap with
        // `old_layout`, whose alignment `new_layout` keeps.
        unsafe { self.lock().0.reallocate(ptr, new_layout) }
            .ok_or(AllocError::new(new_layout, AllocErrorKind::OutOfMemory))
    }
}
