//! alloclab-pmem as a [`PHeap`], on any medium: pool files for the suite, the simulator for
//! the engines' crash tests.
//!
//! [`alloc`](PHeap::alloc) is [`PersistentHeap::allocate_unlinked`] and
//! [`dealloc`](PHeap::dealloc) is [`PersistentHeap::release`]: the heap's blocks are live
//! because they are reachable, so an engine's own durable link is the allocation and costs
//! the allocator no flush and no fence. [`alloc_many`](PHeap::alloc_many) and
//! [`dealloc_many`](PHeap::dealloc_many) are [`PersistentHeap::allocate_unlinked_sizes`] and
//! [`PersistentHeap::release_many`]: one visit to the thread's cache for several blocks;
//! [`dealloc_many_then_alloc`](PHeap::dealloc_many_then_alloc) (a transaction's frees of
//! what an earlier one unlinked, with its allocation) is
//! [`PersistentHeap::release_many_then_reuse`]: one visit for both, and the last block
//! freed, when it has the size class asked for, handed straight back without a look at
//! the live map.

use std::alloc::Layout;
use std::path::Path;

use alloclab_pmem::{Medium, PPtr, PersistentHeap};

use super::{PHeap, PersistStats, PoolFile};

/// Blocks are aligned to 16 bytes at least (every block is cache-line aligned anyway).
const ALIGN: usize = 16;

/// A heap error as the adapter reports it (out of line: error paths stay off the fast ones).
#[cold]
#[inline(never)]
fn message(e: &alloclab_pmem::HeapError) -> String {
    format!("alloclab-pmem: {e}")
}

fn layout(size: usize) -> Result<Layout, String> {
    Layout::from_size_align(size, ALIGN)
        .map_err(|_| format!("alloclab-pmem: {size} bytes is too large"))
}

impl<M: Medium + 'static> PHeap for PersistentHeap<M> {
    fn root(&self) -> *mut u8 {
        PersistentHeap::root(self)
    }

    fn root_size(&self) -> usize {
        PersistentHeap::root_size(self)
    }

    fn at(&self, off: u64) -> *mut u8 {
        if off == 0 {
            return std::ptr::null_mut();
        }
        self.pool().base().wrapping_add(off as usize)
    }

    fn offset_of(&self, p: *const u8) -> u64 {
        (p as usize).wrapping_sub(self.pool().base() as usize) as u64
    }

    fn alloc(&self, size: usize) -> Result<u64, String> {
        self.allocate_unlinked(layout(size)?)
            .map(PPtr::offset)
            .map_err(|e| message(&e))
    }

    unsafe fn dealloc(&self, off: u64) -> Result<(), String> {
        // SAFETY: the caller unlinked the block durably and will not use it again.
        unsafe { self.release(PPtr::from_offset(off)) }.map_err(|e| message(&e))
    }

    fn alloc_many(&self, sizes: &[usize], out: &mut Vec<u64>) -> Result<(), String> {
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

    unsafe fn dealloc_many(&self, offs: &[u64]) -> Result<(), String> {
        // SAFETY: `PPtr<u8>` is a `repr(transparent)` `u64` offset.
        let ptrs =
            unsafe { std::slice::from_raw_parts(offs.as_ptr().cast::<PPtr<u8>>(), offs.len()) };
        // SAFETY: the caller's contract is `release_many`'s.
        unsafe { self.release_many(ptrs) }.map_err(|e| message(&e))
    }

    unsafe fn dealloc_many_then_alloc(&self, frees: &[u64], size: usize) -> Result<u64, String> {
        // SAFETY: `PPtr<u8>` is a `repr(transparent)` `u64` offset.
        let ptrs =
            unsafe { std::slice::from_raw_parts(frees.as_ptr().cast::<PPtr<u8>>(), frees.len()) };
        // SAFETY: the caller's contract is `release_many_then_reuse`'s (the blocks are
        // live: see `PHeap::dealloc_many_then_alloc`).
        unsafe { self.release_many_then_reuse(ptrs, layout(size)?) }
            .map(PPtr::offset)
            .map_err(|e| message(&e))
    }

    unsafe fn alloc_into(&self, dest: *mut u64, size: usize) -> Result<u64, String> {
        // SAFETY: `PPtr<u8>` is one `u64` offset; the caller's contract is `allocate_into`'s.
        unsafe { self.allocate_into(dest.cast::<PPtr<u8>>(), layout(size)?) }
            .map(PPtr::offset)
            .map_err(|e| message(&e))
    }

    unsafe fn free_from(&self, dest: *mut u64) -> Result<(), String> {
        // SAFETY: as in `alloc_into`; the caller's contract is `free_from`'s.
        unsafe { PersistentHeap::free_from(self, dest.cast::<PPtr<u8>>()) }.map_err(|e| message(&e))
    }

    fn usable_size(&self, size: usize) -> usize {
        alloclab_pmem::heap::usable_size(size)
    }

    fn flush(&self, p: *const u8, len: usize) {
        let offset = self.offset_of(p) as usize;
        self.medium().flush(offset, len);
    }

    fn fence(&self) {
        self.medium().fence();
    }

    fn persist_counts(&self) -> Option<PersistStats> {
        Some(self.stats().persist)
    }
}

impl PoolFile for PersistentHeap<Box<dyn Medium>> {
    const NAME: &'static str = "alloclab-pmem";

    fn create(path: &Path, pool_bytes: usize, root_size: usize) -> Result<Self, String> {
        PersistentHeap::create(path, pool_bytes, root_size).map_err(|e| message(&e))
    }

    fn open(path: &Path) -> Result<Self, String> {
        PersistentHeap::open(path).map_err(|e| message(&e))
    }
}

#[cfg(test)]
mod tests {
    use alloclab_pmem::SimMedium;

    use super::*;

    #[test]
    fn offsets_round_trip_and_alloc_links_survive_recovery_by_reachability() {
        let heap = PersistentHeap::create_on(SimMedium::new(1 << 20), 64).unwrap();
        let linked = PHeap::alloc(&heap, 300).unwrap();
        let orphan = PHeap::alloc(&heap, 300).unwrap();
        assert_eq!(heap.offset_of(heap.at(linked)), linked);
        assert!(heap.at(0).is_null());
        let dest = PHeap::root(&heap).cast::<u64>();
        // SAFETY: the root's first word, this thread's only.
        unsafe { dest.write(linked) };
        PHeap::persist(&heap, dest.cast(), 8);
        let image = heap.medium().durable_image();
        let recovered = PersistentHeap::open_on(SimMedium::from_image(image)).unwrap();
        assert!(recovered.block_size(PPtr::from_offset(linked)).is_some());
        assert!(recovered.block_size(PPtr::from_offset(orphan)).is_none());
        // SAFETY: `orphan` is named by nothing durable; a second dealloc is refused.
        unsafe {
            heap.dealloc(orphan).unwrap();
            assert!(heap.dealloc(orphan).is_err());
        }
    }
}
