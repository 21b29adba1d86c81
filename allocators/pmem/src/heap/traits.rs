//! The core traits on [`PersistentHeap`]: [`Allocator`] with `Handle = PPtr<u8>` (so that
//! [`Checked`](alloclab_core::Checked) wraps it and every "allocate and free" workload runs
//! on it) and [`PersistentAllocator`].
//!
//! [`Allocator::allocate`] and
//! [`allocate_unlinked`](PersistentAllocator::allocate_unlinked) are
//! [`PersistentHeap::allocate_unlinked`]; [`Allocator::deallocate`] and
//! [`release`](PersistentAllocator::release) are [`PersistentHeap::release`]: the heap's
//! blocks are live because they are reachable, so a caller's own durable link is the
//! allocation and costs the allocator no flush and no fence. The batch calls are
//! [`PersistentHeap::allocate_unlinked_sizes`], [`PersistentHeap::release_many`] and
//! [`PersistentHeap::release_many_then_reuse`] (one visit to the thread's cache; the last
//! block freed, when it has the size class asked for, handed straight back without a look
//! at the live map). [`PathMedium`] says how a pool is created and reopened by path on a
//! medium type.

use std::alloc::Layout;
use std::path::Path;

use alloclab_core::{
    AllocError, AllocErrorKind, Allocator, BlockHandle, PersistentAllocator, PersistentError,
    PersistentHandle, Stats,
};

use super::{HeapError, PersistentHeap, usable_size};
use crate::persist::PersistStats;
use crate::{Medium, PPtr, SimMedium, create_best, open_best};

/// Blocks are asked for with this alignment at least (every block is cache-line aligned
/// anyway).
const ALIGN: usize = 16;

// SAFETY: a PPtr is a plain offset; its `Eq`, `Debug` and address read no shared state.
unsafe impl<T> BlockHandle for PPtr<T> {
    #[inline]
    fn address(self) -> usize {
        self.offset() as usize
    }
}

// SAFETY: `PPtr<u8>` is `repr(transparent)` over its `u64` offset (the `PhantomData` is
// zero-sized), and its address is that offset.
unsafe impl PersistentHandle for PPtr<u8> {
    #[inline]
    fn offset(self) -> u64 {
        PPtr::offset(self)
    }
    #[inline]
    fn from_offset(offset: u64) -> Self {
        PPtr::from_offset(offset)
    }
}

/// A medium that a pool can be created on, and reopened from, by path: the file media
/// (`Box<dyn Medium>`, libpmem or native, as [`create_best`] picks), and the simulator,
/// which lives in memory and refuses paths.
pub trait PathMedium: Medium + Sized + 'static {
    /// A medium of `len` bytes for a new pool at `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be created; the medium has no files.
    fn create_at(path: &Path, len: usize) -> Result<Self, HeapError>;

    /// The medium of the existing pool at `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be opened; the medium has no files.
    fn open_at(path: &Path) -> Result<Self, HeapError>;
}

impl PathMedium for Box<dyn Medium> {
    fn create_at(path: &Path, len: usize) -> Result<Self, HeapError> {
        Ok(create_best(path, len)?)
    }

    fn open_at(path: &Path) -> Result<Self, HeapError> {
        Ok(open_best(path)?)
    }
}

impl PathMedium for SimMedium {
    fn create_at(path: &Path, _len: usize) -> Result<Self, HeapError> {
        Err(HeapError::Medium(crate::MediumError::Io {
            path: path.to_owned(),
            op: "open by path",
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the simulator keeps its pool in memory (SimMedium::new)",
            ),
        }))
    }

    fn open_at(path: &Path) -> Result<Self, HeapError> {
        Self::create_at(path, 0)
    }
}

/// A heap error as the trait reports it (out of line: error paths stay off the fast ones).
#[cold]
#[inline(never)]
fn message(e: &HeapError) -> PersistentError {
    PersistentError::new(format!("alloclab-pmem: {e}"))
}

fn layout(size: usize) -> Result<Layout, PersistentError> {
    Layout::from_size_align(size, ALIGN)
        .map_err(|_| PersistentError::new(format!("alloclab-pmem: {size} bytes is too large")))
}

/// The core error kind of a heap error.
#[cold]
fn alloc_error(layout: Layout, e: &HeapError) -> AllocError {
    let kind = match e {
        HeapError::ZeroSize => AllocErrorKind::ZeroSize,
        HeapError::TooLarge { .. } => AllocErrorKind::SizeUnsupported,
        HeapError::UnsupportedAlignment { .. } => AllocErrorKind::AlignmentUnsupported,
        HeapError::OutOfSpace { .. } => AllocErrorKind::OutOfMemory,
        _ => AllocErrorKind::Other("the persistent heap failed"),
    };
    AllocError::new(layout, kind)
}

impl<M: Medium> Allocator for PersistentHeap<M> {
    type Handle = PPtr<u8>;

    /// A block linked from nowhere ([`PersistentHeap::allocate_unlinked`]): free again
    /// after the next recovery unless the caller links it from the root. Zero-size layouts
    /// fail with [`AllocErrorKind::ZeroSize`].
    fn allocate(&self, layout: Layout) -> Result<PPtr<u8>, AllocError> {
        self.allocate_unlinked(layout)
            .map_err(|e| alloc_error(layout, &e))
    }

    unsafe fn deallocate(&self, handle: PPtr<u8>, _layout: Layout) {
        // SAFETY: the caller's contract: a live block of this heap, used no more (and, for
        // a block it linked, unlinked durably).
        let released = unsafe { self.release(handle) };
        debug_assert!(released.is_ok(), "deallocate: {released:?}");
    }

    fn name(&self) -> &str {
        "alloclab-pmem"
    }

    /// Allocation and free counts since open; live bytes and footprint are not tracked.
    fn stats(&self) -> Stats {
        let s = PersistentHeap::stats(self);
        Stats {
            allocations: Some(s.allocations),
            deallocations: Some(s.frees),
            ..Stats::default()
        }
    }
}

impl<M: PathMedium> PersistentAllocator for PersistentHeap<M> {
    fn create(path: &Path, pool_bytes: usize, root_size: usize) -> Result<Self, PersistentError> {
        M::create_at(path, pool_bytes)
            .and_then(|medium| Self::create_on(medium, root_size))
            .map_err(|e| message(&e))
    }

    fn open(path: &Path) -> Result<Self, PersistentError> {
        M::open_at(path)
            .and_then(Self::open_on)
            .map_err(|e| message(&e))
    }

    fn root(&self) -> *mut u8 {
        PersistentHeap::root(self)
    }

    fn root_size(&self) -> usize {
        PersistentHeap::root_size(self)
    }

    #[inline]
    fn at(&self, off: u64) -> *mut u8 {
        if off == 0 {
            return std::ptr::null_mut();
        }
        self.pool().base().wrapping_add(off as usize)
    }

    #[inline]
    fn offset_of(&self, p: *const u8) -> u64 {
        (p as usize).wrapping_sub(self.pool().base() as usize) as u64
    }

    #[inline]
    fn allocate_unlinked(&self, size: usize) -> Result<u64, PersistentError> {
        PersistentHeap::allocate_unlinked(self, layout(size)?)
            .map(PPtr::offset)
            .map_err(|e| message(&e))
    }

    #[inline]
    unsafe fn release(&self, off: u64) -> Result<(), PersistentError> {
        // SAFETY: the caller unlinked the block durably and will not use it again.
        unsafe { PersistentHeap::release(self, PPtr::from_offset(off)) }.map_err(|e| message(&e))
    }

    fn allocate_unlinked_many(
        &self,
        sizes: &[usize],
        out: &mut Vec<u64>,
    ) -> Result<(), PersistentError> {
        let start = out.len();
        // Zeros one by one: a count of one or two, where `resize` calls `memset`.
        out.extend(sizes.iter().map(|_| 0));
        let dest = &mut out[start..];
        // SAFETY: `PPtr<u8>` is a `repr(transparent)` `u64` offset.
        let dest = unsafe {
            std::slice::from_raw_parts_mut(dest.as_mut_ptr().cast::<PPtr<u8>>(), dest.len())
        };
        // Blocks are cache-line aligned, above `ALIGN`: the sizes are the whole request.
        match self.allocate_unlinked_sizes(sizes, dest) {
            Ok(()) => Ok(()),
            Err(e) => {
                out.truncate(start);
                Err(message(&e))
            }
        }
    }

    unsafe fn release_many(&self, offs: &[u64]) -> Result<(), PersistentError> {
        // SAFETY: `PPtr<u8>` is a `repr(transparent)` `u64` offset.
        let ptrs =
            unsafe { std::slice::from_raw_parts(offs.as_ptr().cast::<PPtr<u8>>(), offs.len()) };
        // SAFETY: the caller's contract is `release_many`'s.
        unsafe { PersistentHeap::release_many(self, ptrs) }.map_err(|e| message(&e))
    }

    unsafe fn release_many_then_allocate(
        &self,
        frees: &[u64],
        size: usize,
    ) -> Result<u64, PersistentError> {
        // SAFETY: `PPtr<u8>` is a `repr(transparent)` `u64` offset.
        let ptrs =
            unsafe { std::slice::from_raw_parts(frees.as_ptr().cast::<PPtr<u8>>(), frees.len()) };
        // SAFETY: the caller's contract is `release_many_then_reuse`'s (the blocks are
        // live: see `PersistentAllocator::release_many_then_allocate`).
        unsafe { self.release_many_then_reuse(ptrs, layout(size)?) }
            .map(PPtr::offset)
            .map_err(|e| message(&e))
    }

    unsafe fn allocate_into(&self, dest: *mut u64, size: usize) -> Result<u64, PersistentError> {
        // SAFETY: `PPtr<u8>` is one `u64` offset; the caller's contract is `allocate_into`'s.
        unsafe { PersistentHeap::allocate_into(self, dest.cast::<PPtr<u8>>(), layout(size)?) }
            .map(PPtr::offset)
            .map_err(|e| message(&e))
    }

    unsafe fn free_from(&self, dest: *mut u64) -> Result<(), PersistentError> {
        // SAFETY: as in `allocate_into`; the caller's contract is `free_from`'s.
        unsafe { PersistentHeap::free_from(self, dest.cast::<PPtr<u8>>()) }.map_err(|e| message(&e))
    }

    fn usable_size(&self, size: usize) -> usize {
        usable_size(size)
    }

    #[inline]
    fn flush(&self, p: *const u8, len: usize) {
        let offset = self.offset_of(p) as usize;
        self.medium().flush(offset, len);
    }

    #[inline]
    fn fence(&self) {
        self.medium().fence();
    }

    fn persist_counts(&self) -> Option<PersistStats> {
        Some(PersistentHeap::stats(self).persist)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip_and_unlinked_blocks_survive_recovery_only_when_linked() {
        let heap = PersistentHeap::create_on(SimMedium::new(1 << 20), 64).unwrap();
        let linked = PersistentAllocator::allocate_unlinked(&heap, 300).unwrap();
        let orphan = PersistentAllocator::allocate_unlinked(&heap, 300).unwrap();
        assert_eq!(heap.offset_of(heap.at(linked)), linked);
        assert!(heap.at(0).is_null());
        let dest = PersistentAllocator::root(&heap).cast::<u64>();
        // SAFETY: the root's first word, this thread's only.
        unsafe { dest.write(linked) };
        PersistentAllocator::persist(&heap, dest.cast(), 8);
        let image = heap.medium().durable_image();
        let recovered = PersistentHeap::open_on(SimMedium::from_image(image)).unwrap();
        assert!(recovered.block_size(PPtr::from_offset(linked)).is_some());
        assert!(recovered.block_size(PPtr::from_offset(orphan)).is_none());
        // SAFETY: `orphan` is named by nothing durable; a second release is refused.
        unsafe {
            PersistentAllocator::release(&heap, orphan).unwrap();
            assert!(PersistentAllocator::release(&heap, orphan).is_err());
        }
    }

    #[test]
    fn the_simulator_refuses_paths() {
        let err = <PersistentHeap<SimMedium> as PersistentAllocator>::create(
            Path::new("/tmp/x"),
            1 << 20,
            64,
        )
        .unwrap_err();
        assert!(err.message().contains("in memory"), "{err}");
    }
}
