//! # alloclab-core
//!
//! What every alloclab allocator shares:
//!
//! * [`Allocator`] — the one trait at the centre. Each allocator chooses what a block is
//!   called in its address space ([`Allocator::Handle`]): a pointer for host heaps, a pool
//!   offset for a persistent heap, a page index for a GPU page pool.
//! * [`HostAllocator`] — the extension for heaps whose handles are pointers into this
//!   process (realloc, zeroed allocation); [`GlobalAdapter`] turns one into a
//!   [`GlobalAlloc`](core::alloc::GlobalAlloc).
//! * [`PersistentAllocator`] — the extension for heaps that live in a pool and survive their
//!   process: a root, crash-atomic [`allocate_into`](PersistentAllocator::allocate_into) /
//!   [`free_from`](PersistentAllocator::free_from) of a persistent word, the caller's flush
//!   and fence, creating and reopening a pool by path.
//! * [`AllocError`] — which layout failed and why; [`Stats`] — live bytes, footprint,
//!   operation counts and step maxima, each `None` where an allocator does not count it.
//! * [`sync`] — atomics, cells and threads from `std`, or from `loom` under `cfg(loom)`, so
//!   that the code that is model-checked is the code that ships.
//! * [`errno`] (Unix) — the calling thread's `errno`, and a guard that restores it around a
//!   free path's system calls (C's `free` must not change it).
//! * [`Checked`] — a typestate wrapper that shadows every handle an allocator gives out and
//!   reports overlap, double free, foreign free, misalignment and layout mismatches.
//!
//! ```
//! use alloclab_core::{Allocator, Checked, HostAllocator, SystemHeap};
//! use core::alloc::Layout;
//!
//! let heap = Checked::new(SystemHeap::new());
//! let layout = Layout::from_size_align(48, 16).unwrap();
//! let block = heap.allocate(layout).unwrap();
//! unsafe { heap.deallocate(block, layout) };
//! assert!(heap.violations().is_empty());
//! ```
//!
//! ## Without `std`
//!
//! The `std` feature (on by default) brings [`Checked`], [`SystemHeap`], the persistent-heap
//! trait (pools are opened by path) and the shim's `Arc`, `Mutex` and `thread`. Without it
//! the crate is `no_std`: the traits, errors, statistics, atomics and cells a heap needs,
//! and nothing that allocates. A C library built on an alloclab heap uses that to leave
//! the standard library, and with it its panic and backtrace machinery, out of the
//! programs it is loaded into ([`without_std!`]).

#![cfg_attr(not(any(feature = "std", loom, test)), no_std)]

#[cfg(feature = "std")]
pub mod checked;
#[cfg(unix)]
pub mod errno;
mod error;
mod from_global;
mod global;
#[cfg(feature = "std")]
mod global_tests;
mod handle;
#[cfg(feature = "std")]
mod persistent;
pub mod rng;
mod stats;
pub mod sync;

use core::alloc::Layout;
use core::ptr::NonNull;

#[cfg(feature = "std")]
pub use checked::{Checked, Policy, Violation};
pub use error::{AllocError, AllocErrorKind};
pub use from_global::GlobalAllocHeap;
#[cfg(feature = "std")]
pub use from_global::SystemHeap;
pub use global::GlobalAdapter;
pub use handle::BlockHandle;
#[cfg(feature = "std")]
pub use persistent::{
    PERSISTENT_BLOCK_ALIGN, PersistStats, PersistentAllocator, PersistentError, PersistentHandle,
};
pub use stats::Stats;

/// Its tokens when this crate is built without its `std` feature, nothing when with it.
///
/// Whether the standard library is linked into a `no_std` artifact depends on the features
/// the whole build turns on, which the artifact's own crate cannot see; this crate's `std`
/// feature is on whenever a crate in the build needs `std` of it. A `no_std` C library uses
/// it for what only a build without the standard library may define, its panic handler:
///
/// ```ignore
/// alloclab_core::without_std! {
///     #[panic_handler]
///     fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
///         loop {}
///     }
/// }
/// ```
#[cfg(not(feature = "std"))]
#[macro_export]
macro_rules! without_std {
    ($($item:item)*) => { $($item)* };
}

/// Its tokens when this crate is built without its `std` feature, nothing when with it.
#[cfg(feature = "std")]
#[macro_export]
macro_rules! without_std {
    ($($item:item)*) => {};
}

/// What a heap with locks does around `fork` (`alloclab-preload` registers these with
/// `pthread_atfork` for a preloaded heap).
///
/// After `fork` the child has one thread, a copy of the one that forked; a lock another
/// thread held at that moment would stay held forever there. The cure (glibc's malloc does
/// it) is to take every heap lock before the fork and release it on both sides after.
///
/// The three run on the forking thread: `prepare` just before the fork (take every lock,
/// in a fixed order), `parent` and `child` just after it in each process (release them; in
/// the child, reinitialising is fine, since no other thread exists there).
pub trait ForkHooks: Sync {
    /// Before `fork`: brings the heap to a state that is consistent without other threads
    /// (typically: takes all its locks).
    fn prepare_fork(&self);
    /// After `fork`, in the parent: undoes [`prepare_fork`](Self::prepare_fork).
    fn after_fork_in_parent(&self);
    /// After `fork`, in the child: makes the heap usable by the one thread there.
    fn after_fork_in_child(&self);
}

/// A memory allocator: hands out blocks that fit a [`Layout`] and takes them back.
///
/// Implementations are shared between threads (`Send + Sync`); each documents whether its
/// operations are wait-free, lock-free or blocking.
///
/// **Zero-size layouts.** An allocator either returns a unique live handle for a zero-size
/// layout or fails with [`AllocErrorKind::ZeroSize`]; it documents which.
pub trait Allocator: Send + Sync {
    /// How a block is named in this allocator's address space.
    type Handle: BlockHandle;

    /// Allocates a block that fits `layout`.
    ///
    /// # Errors
    ///
    /// Returns an [`AllocError`] naming `layout` and the reason when no block can be given.
    fn allocate(&self, layout: Layout) -> Result<Self::Handle, AllocError>;

    /// Returns a block to the allocator.
    ///
    /// # Safety
    ///
    /// `handle` was returned by [`allocate`](Self::allocate) (or a reallocation) of this
    /// same allocator with this same `layout`, and has not been deallocated since. After
    /// the call the block must not be used.
    unsafe fn deallocate(&self, handle: Self::Handle, layout: Layout);

    /// A short, stable name (used on the command line and in reports).
    fn name(&self) -> &str;

    /// A snapshot of the allocator's counters. Fields it does not track are `None`.
    fn stats(&self) -> Stats;
}

/// A heap whose handles are pointers into this process's memory.
///
/// The default methods are correct for any such heap; an allocator overrides them when it
/// can do better (grow in place, hand out memory that is already zero).
pub trait HostAllocator: Allocator<Handle = NonNull<u8>> {
    /// Allocates a block that fits `layout` whose bytes are all zero.
    ///
    /// # Errors
    ///
    /// As [`Allocator::allocate`].
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let ptr = self.allocate(layout)?;
        // SAFETY: `allocate` returned a live block of at least `layout.size()` bytes.
        unsafe { ptr.as_ptr().write_bytes(0, layout.size()) };
        Ok(ptr)
    }

    /// Resizes the block at `ptr` to `new_size` bytes, keeping its alignment and the first
    /// `min(old_layout.size(), new_size)` bytes of its contents.
    ///
    /// On success the old handle is dead and the returned one is live with layout
    /// `(new_size, old_layout.align())`. On failure the old block is untouched and live.
    ///
    /// # Errors
    ///
    /// As [`resized_layout`] (zero or overflowing `new_size`); otherwise as
    /// [`Allocator::allocate`].
    ///
    /// # Safety
    ///
    /// As [`Allocator::deallocate`] for `ptr` and `old_layout`.
    unsafe fn reallocate(
        &self,
        ptr: NonNull<u8>,
        old_layout: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        let new_layout = resized_layout(old_layout, new_size)?;
        // SAFETY: forwarded from the caller.
        unsafe { move_block(self, ptr, old_layout, new_layout) }
    }
}

/// Reallocation by moving: allocates `new_layout`, copies the common prefix, frees the old
/// block. What [`HostAllocator::reallocate`] does by default, for implementations that
/// handle some cases in place and fall back to this.
///
/// # Errors
///
/// As [`Allocator::allocate`]; the old block is then untouched and live.
///
/// # Safety
///
/// `ptr` is a live block of `heap` allocated with `old_layout`.
pub unsafe fn move_block<A: HostAllocator + ?Sized>(
    heap: &A,
    ptr: NonNull<u8>,
    old_layout: Layout,
    new_layout: Layout,
) -> Result<NonNull<u8>, AllocError> {
    let new_ptr = heap.allocate(new_layout)?;
    // SAFETY: both blocks are live, distinct, and at least `min(old, new)` bytes long; the
    // old one is freed once, with its layout.
    unsafe {
        new_ptr
            .as_ptr()
            .copy_from_nonoverlapping(ptr.as_ptr(), old_layout.size().min(new_layout.size()));
        heap.deallocate(ptr, old_layout);
    }
    Ok(new_ptr)
}

/// The layout a reallocation of a block of `old` to `new_size` bytes asks for: the same
/// alignment, the new size.
///
/// # Errors
///
/// [`AllocErrorKind::ZeroSize`] if `new_size` is zero (resizing to nothing is a free, and
/// should be written as one), [`AllocErrorKind::SizeUnsupported`] if `new_size` rounded up
/// to the alignment overflows `isize`.
pub fn resized_layout(old: Layout, new_size: usize) -> Result<Layout, AllocError> {
    let new_layout = Layout::from_size_align(new_size, old.align())
        .map_err(|_| AllocError::new(old, AllocErrorKind::SizeUnsupported))?;
    if new_size == 0 {
        return Err(AllocError::new(new_layout, AllocErrorKind::ZeroSize));
    }
    Ok(new_layout)
}

/// A host heap that can serve C's `malloc` family: it finds a block's size from its address,
/// since `free(ptr)` and `malloc_usable_size(ptr)` do not say it.
///
/// # Safety
///
/// Implementors guarantee that [`usable_size`](Self::usable_size) returns at least the size
/// the block was allocated with, that the whole usable size may be written, and that
/// [`deallocate_unsized`](Self::deallocate_unsized) frees exactly like
/// [`Allocator::deallocate`] with the block's layout, and, where
/// [`FREE_KEEPS_ERRNO`](Self::FREE_KEEPS_ERRNO) is `true`, that it never changes the calling
/// thread's `errno`.
pub unsafe trait MallocHeap: HostAllocator {
    /// Whether [`deallocate_unsized`](Self::deallocate_unsized) leaves `errno` as it found it
    /// (it makes no system call, or restores `errno` around the ones it makes). POSIX says
    /// `free` does not change `errno`; where this is `false` the C `free` built on the heap
    /// saves and restores it around every call, two calls of `__errno_location` on the
    /// hottest path a C program has.
    const FREE_KEEPS_ERRNO: bool = false;

    /// Whether the heap records how each block was asked for
    /// ([`allocate_as`](Self::allocate_as)) and checks it when the block is freed
    /// ([`deallocate_as`](Self::deallocate_as)). A C++ layer then skips the heap's fast
    /// paths, which know nothing of it, for `operator new` and `delete`.
    const RECORDS_KIND: bool = false;

    /// The number of bytes usable at `ptr` (at least the size asked for).
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of this heap.
    unsafe fn usable_size(&self, ptr: NonNull<u8>) -> usize;

    /// Frees `ptr` without being told its layout.
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of this heap; it must not be used afterwards.
    unsafe fn deallocate_unsized(&self, ptr: NonNull<u8>);

    /// The heap's fast path for C's `malloc(size)`, tried before the general one: a block
    /// of at least `size` bytes aligned to 16 (`malloc`'s alignment on 64-bit targets),
    /// exactly as [`Allocator::allocate`] would give for that layout, or `None` to take the
    /// general path (which then does whatever it does, fast path included). `size` is any
    /// value the program passed, 0 and impossible ones included; the fast path may refuse
    /// any of them, and must not fail in any other way. It is meant to be inlined into
    /// `malloc`, whose general path is a separate function called in tail position. The
    /// default has no fast path.
    #[inline(always)]
    fn try_malloc_fast(&self, size: usize) -> Option<NonNull<u8>> {
        let _ = size;
        None
    }

    /// The heap's fast path for an aligned allocation (`posix_memalign`, `aligned_alloc`,
    /// `memalign`, C++'s aligned `operator new`): a block of at least `size` bytes aligned to
    /// `align`, exactly as [`Allocator::allocate`] would give for that layout, or `None` to
    /// take the general path. `align` is a power of two larger than 16 (smaller alignments
    /// take [`try_malloc_fast`](Self::try_malloc_fast)); `size` is any value the program
    /// passed. As for `try_malloc_fast`, the fast path may refuse anything and must not fail
    /// in any other way. The default has no fast path.
    #[inline(always)]
    fn try_malloc_aligned_fast(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        let _ = (size, align);
        None
    }

    /// The heap's fast path for `free`, tried before
    /// [`deallocate_unsized`](Self::deallocate_unsized): returns `true` if it freed `ptr`,
    /// `false` (having changed nothing) to take the general path. It never changes `errno`.
    /// The default has no fast path.
    ///
    /// # Safety
    ///
    /// As [`deallocate_unsized`](Self::deallocate_unsized) when it returns `true`.
    #[inline(always)]
    unsafe fn try_deallocate_fast(&self, ptr: NonNull<u8>) -> bool {
        let _ = ptr;
        false
    }

    /// Grows the live block at `ptr` to at least `size` bytes without moving it, where the
    /// heap set aside room past what [`usable_size`](Self::usable_size) reports; returns
    /// whether it did (and `usable_size` then reports at least `size`). C's `realloc` tries
    /// it before it moves a block that outgrew its usable size. The default never grows.
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of this heap, which the caller may resize.
    #[inline]
    unsafe fn grow_in_place(&self, ptr: NonNull<u8>, size: usize) -> bool {
        let _ = (ptr, size);
        false
    }

    /// Tells the heap that the live block at `ptr` stays where it is as a block of `size`
    /// bytes, at most its usable size: C's `realloc` keeps a block that shrinks by a
    /// little. A heap that guards the end of what was asked for (a canary past it) moves
    /// the guard to the new end, so that the bytes given up are guarded as well, and may
    /// take back what the block no longer needs; [`usable_size`](Self::usable_size) then
    /// reports at least `size`. The default leaves the block as it is.
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of this heap, which the caller may resize, and `size` is at
    /// most its usable size.
    #[inline]
    unsafe fn shrink_in_place(&self, ptr: NonNull<u8>, size: usize) {
        let _ = (ptr, size);
    }

    /// Gives memory the heap keeps for later back to the OS, as glibc's `malloc_trim` does
    /// (C's `malloc_trim` of a preload library calls it); returns whether any went back.
    /// The default keeps everything.
    fn trim(&self) -> bool {
        false
    }

    /// Frees `ptr`, told the size the program believes it allocated (C++ sized delete). The
    /// size is a hint that may be wrong (a program's bug): an implementation may use it to
    /// find the block faster but must free correctly whatever it says. The default ignores
    /// it.
    ///
    /// # Safety
    ///
    /// As [`deallocate_unsized`](Self::deallocate_unsized).
    #[inline]
    unsafe fn deallocate_with_size(&self, ptr: NonNull<u8>, size: usize) {
        let _ = size;
        // SAFETY: forwarded from the caller.
        unsafe { self.deallocate_unsized(ptr) }
    }

    /// Allocates a block for `layout` the way `kind` says a program asked for it (C++'s
    /// `operator new` or `operator new[]`), so that a heap that records it can check that
    /// the block is freed the same way ([`deallocate_as`](Self::deallocate_as)). The
    /// default allocates as [`Allocator::allocate`] does and records nothing.
    ///
    /// # Errors
    ///
    /// As [`Allocator::allocate`].
    #[inline]
    fn allocate_as(&self, layout: Layout, kind: AllocKind) -> Result<NonNull<u8>, AllocError> {
        let _ = kind;
        self.allocate(layout)
    }

    /// Frees `ptr` the way `kind` says (C++'s `operator delete` or `operator delete[]`), told
    /// the size the program believes it allocated if it says (sized delete). A heap that
    /// records how blocks were asked for may refuse a mismatch (a `delete` of a block from
    /// `new[]`) or a wrong size as it refuses a double free; the default frees as
    /// [`deallocate_with_size`](Self::deallocate_with_size) or
    /// [`deallocate_unsized`](Self::deallocate_unsized) does.
    ///
    /// # Safety
    ///
    /// As [`deallocate_unsized`](Self::deallocate_unsized).
    #[inline]
    unsafe fn deallocate_as(&self, ptr: NonNull<u8>, kind: AllocKind, size: Option<usize>) {
        let _ = kind;
        // SAFETY: forwarded from the caller.
        unsafe {
            match size {
                Some(size) => self.deallocate_with_size(ptr, size),
                None => self.deallocate_unsized(ptr),
            }
        }
    }
}

/// How a program asked for a block, for heaps that check that it is freed the same way
/// ([`MallocHeap::allocate_as`], [`MallocHeap::deallocate_as`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AllocKind {
    /// C's `malloc` family (and every allocation through [`Allocator`]).
    Malloc,
    /// C++'s `operator new`, freed with `operator delete`.
    New,
    /// C++'s `operator new[]`, freed with `operator delete[]`.
    NewArray,
}
