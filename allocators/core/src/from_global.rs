//! [`GlobalAllocHeap`]: any [`GlobalAlloc`] (the system allocator, mimalloc, jemalloc ...)
//! as an [`Allocator`] — the inverse of [`GlobalAdapter`](crate::GlobalAdapter).

use core::alloc::{GlobalAlloc, Layout};
use core::fmt;
use core::ptr::NonNull;
#[cfg(feature = "std")]
use std::alloc::System;

use crate::{AllocError, AllocErrorKind, Allocator, HostAllocator, Stats};

/// A [`GlobalAlloc`] seen through the [`Allocator`] trait.
///
/// It tracks no counters (every [`Stats`] field is `None`): measure such heaps from the
/// outside (the harness reads the process's resident set). Zero-size layouts are refused
/// with [`AllocErrorKind::ZeroSize`], since `GlobalAlloc` leaves them undefined.
///
/// ```
/// use alloclab_core::{Allocator, GlobalAllocHeap};
/// use core::alloc::Layout;
/// use std::alloc::System;
///
/// static HEAP: GlobalAllocHeap<System> = GlobalAllocHeap::wrap(&System, "system");
/// let layout = Layout::new::<[u64; 4]>();
/// let block = HEAP.allocate(layout).unwrap();
/// unsafe { HEAP.deallocate(block, layout) };
/// ```
pub struct GlobalAllocHeap<G: 'static> {
    inner: &'static G,
    name: &'static str,
}

/// The platform's `malloc`/`free`/`posix_memalign`/`realloc`, through [`std::alloc::System`].
#[cfg(feature = "std")]
pub type SystemHeap = GlobalAllocHeap<System>;

impl<G: 'static> GlobalAllocHeap<G> {
    /// Wraps `inner`, reported under `name`.
    pub const fn wrap(inner: &'static G, name: &'static str) -> Self {
        Self { inner, name }
    }
}

#[cfg(feature = "std")]
impl SystemHeap {
    /// The system allocator, named `system`.
    pub const fn new() -> Self {
        Self::wrap(&System, "system")
    }
}

#[cfg(feature = "std")]
impl Default for SystemHeap {
    fn default() -> Self {
        Self::new()
    }
}

impl<G: 'static> Clone for GlobalAllocHeap<G> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<G: 'static> Copy for GlobalAllocHeap<G> {}

impl<G: 'static> fmt::Debug for GlobalAllocHeap<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("GlobalAllocHeap").field(&self.name).finish()
    }
}

impl<G: GlobalAlloc + Sync + 'static> Allocator for GlobalAllocHeap<G> {
    type Handle = NonNull<u8>;

    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        if layout.size() == 0 {
            return Err(AllocError::new(layout, AllocErrorKind::ZeroSize));
        }
        // SAFETY: the layout has non-zero size.
        NonNull::new(unsafe { self.inner.alloc(layout) })
            .ok_or(AllocError::new(layout, AllocErrorKind::OutOfMemory))
    }

    #[inline]
    unsafe fn deallocate(&self, handle: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller guarantees `handle` is a live block of `inner` with `layout`.
        unsafe { self.inner.dealloc(handle.as_ptr(), layout) }
    }

    fn name(&self) -> &str {
        self.name
    }

    fn stats(&self) -> Stats {
        Stats::default()
    }
}

impl<G: GlobalAlloc + Sync + 'static> HostAllocator for GlobalAllocHeap<G> {
    #[inline]
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        if layout.size() == 0 {
            return Err(AllocError::new(layout, AllocErrorKind::ZeroSize));
        }
        // SAFETY: the layout has non-zero size.
        NonNull::new(unsafe { self.inner.alloc_zeroed(layout) })
            .ok_or(AllocError::new(layout, AllocErrorKind::OutOfMemory))
    }

    #[inline]
    unsafe fn reallocate(
        &self,
        ptr: NonNull<u8>,
        old_layout: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        let new_layout = crate::resized_layout(old_layout, new_size)?;
        // SAFETY: the caller guarantees `ptr`/`old_layout` name a live block of `inner`;
        // `new_size` is non-zero and does not overflow when rounded up to the alignment.
        NonNull::new(unsafe { self.inner.realloc(ptr.as_ptr(), old_layout, new_size) })
            .ok_or(AllocError::new(new_layout, AllocErrorKind::OutOfMemory))
    }
}
