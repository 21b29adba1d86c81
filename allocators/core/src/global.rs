//! [`GlobalAdapter`]: any [`HostAllocator`] as a [`GlobalAlloc`].

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, NonNull};

use crate::HostAllocator;

/// Makes a [`HostAllocator`] usable as `#[global_allocator]` (or wherever a
/// [`GlobalAlloc`] is wanted).
///
/// Failed allocations return null, as `GlobalAlloc` requires; the [`AllocError`]'s reason
/// is dropped, so read [`Allocator::stats`] or call the allocator directly when it matters.
///
/// The wrapped allocator must not allocate from the global heap itself when it is installed
/// as the global allocator, or it will recurse.
///
/// ```
/// use alloclab_core::{GlobalAdapter, SystemHeap};
///
/// #[global_allocator]
/// static GLOBAL: GlobalAdapter<SystemHeap> = GlobalAdapter::new(SystemHeap::new());
///
/// let v: Vec<u32> = (0..100).collect();
/// assert_eq!(v.iter().sum::<u32>(), 4950);
/// ```
///
/// [`AllocError`]: crate::AllocError
/// [`Allocator::stats`]: crate::Allocator::stats
#[derive(Debug, Default)]
pub struct GlobalAdapter<A>(A);

impl<A> GlobalAdapter<A> {
    /// Wraps `allocator`.
    pub const fn new(allocator: A) -> Self {
        Self(allocator)
    }

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.0
    }
}

// SAFETY: every method forwards to a `HostAllocator`, whose contract is the `GlobalAlloc`
// contract with errors as values: blocks fit their layout, are live until deallocated, and
// `reallocate` keeps the contents. Null is returned exactly when the allocator fails.
unsafe impl<A: HostAllocator> GlobalAlloc for GlobalAdapter<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.0
            .allocate(layout)
            .map_or(ptr::null_mut(), NonNull::as_ptr)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.0
            .allocate_zeroed(layout)
            .map_or(ptr::null_mut(), NonNull::as_ptr)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `GlobalAlloc::dealloc` requires `ptr` to be a live block of this allocator
        // with this layout, hence non-null.
        unsafe { self.0.deallocate(NonNull::new_unchecked(ptr), layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `dealloc`; `reallocate` has the same precondition as `GlobalAlloc::realloc`.
        unsafe {
            self.0
                .reallocate(NonNull::new_unchecked(ptr), layout, new_size)
                .map_or(ptr::null_mut(), NonNull::as_ptr)
        }
    }
}

/// Implements [`GlobalAlloc`] for a concrete [`HostAllocator`] type by forwarding, as
/// [`GlobalAdapter`] does for a wrapped one: for heaps that are used as
/// `static A: MyHeap = MyHeap::new();` directly, without the wrapper.
///
/// ```
/// # use core::alloc::Layout;
/// # use core::ptr::NonNull;
/// # use alloclab_core::{AllocError, Allocator, HostAllocator, Stats, SystemHeap};
/// struct MyHeap(SystemHeap);
/// impl Allocator for MyHeap {
///     type Handle = NonNull<u8>;
///     fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
///         self.0.allocate(layout)
///     }
///     unsafe fn deallocate(&self, block: NonNull<u8>, layout: Layout) {
///         unsafe { self.0.deallocate(block, layout) }
///     }
///     fn name(&self) -> &str { "my-heap" }
///     fn stats(&self) -> Stats { Stats::default() }
/// }
/// impl HostAllocator for MyHeap {}
/// alloclab_core::impl_global_alloc!(MyHeap);
///
/// #[global_allocator]
/// static GLOBAL: MyHeap = MyHeap(SystemHeap::new());
/// let v: Vec<u8> = vec![7; 100];
/// assert_eq!(v[99], 7);
/// ```
#[macro_export]
macro_rules! impl_global_alloc {
    ($heap:ty) => {
        // SAFETY: every method forwards to the type's `HostAllocator` implementation, whose
        // contract is the `GlobalAlloc` contract with errors as values: blocks fit their
        // layout, are live until deallocated, and `reallocate` keeps the contents. Null is
        // returned exactly when the allocator fails.
        unsafe impl ::core::alloc::GlobalAlloc for $heap {
            #[inline]
            unsafe fn alloc(&self, layout: ::core::alloc::Layout) -> *mut u8 {
                $crate::Allocator::allocate(self, layout)
                    .map_or(::core::ptr::null_mut(), ::core::ptr::NonNull::as_ptr)
            }

            #[inline]
            unsafe fn alloc_zeroed(&self, layout: ::core::alloc::Layout) -> *mut u8 {
                $crate::HostAllocator::allocate_zeroed(self, layout)
                    .map_or(::core::ptr::null_mut(), ::core::ptr::NonNull::as_ptr)
            }

            #[inline]
            unsafe fn dealloc(&self, ptr: *mut u8, layout: ::core::alloc::Layout) {
                // SAFETY: `GlobalAlloc::dealloc` requires `ptr` to be a live block of this
                // allocator with this layout, hence non-null.
                unsafe {
                    $crate::Allocator::deallocate(
                        self,
                        ::core::ptr::NonNull::new_unchecked(ptr),
                        layout,
                    )
                }
            }

            #[inline]
            unsafe fn realloc(
                &self,
                ptr: *mut u8,
                layout: ::core::alloc::Layout,
                new_size: usize,
            ) -> *mut u8 {
                // SAFETY: as in `dealloc`; `reallocate` has the precondition of
                // `GlobalAlloc::realloc`.
                unsafe {
                    $crate::HostAllocator::reallocate(
                        self,
                        ::core::ptr::NonNull::new_unchecked(ptr),
                        layout,
                        new_size,
                    )
                    .map_or(::core::ptr::null_mut(), ::core::ptr::NonNull::as_ptr)
                }
            }
        }
    };
}
