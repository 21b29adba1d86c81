//! [`DramHeap`]: the upper bound of the `pmem` and `storage` suites — a host heap with
//! flushing disabled, as the storage-engine paper's jemalloc-on-DRAM baseline, behind
//! [`PersistentAllocator`].
//!
//! Blocks come from `std::alloc` (the worker's global allocator, glibc malloc), 64-byte
//! aligned and whole cache lines (a size is rounded up to 64 bytes, which
//! [`PersistentAllocator::usable_size`] says), as the other heaps' blocks; a block's offset is its address (the heap's base is 0), so
//! [`at`](PersistentAllocator::at) and [`offset_of`](PersistentAllocator::offset_of) are
//! casts. [`flush`](PersistentAllocator::flush) and [`fence`](PersistentAllocator::fence)
//! do nothing, [`allocate_into`](PersistentAllocator::allocate_into) and
//! [`free_from`](PersistentAllocator::free_from) are a plain allocation or free and a plain
//! store, and nothing survives the process
//! ([`DURABLE`](PersistentAllocator::DURABLE) is `false`;
//! [`open`](PersistentAllocator::open) fails). The root is a zeroed, 64-byte-aligned DRAM block.
//!
//! A `BlockTable` remembers each block's size (which `std::alloc::dealloc` needs) and
//! refuses double frees and foreign offsets.

use std::alloc::Layout;
use std::path::Path;
use std::ptr::NonNull;

use alloclab_core::{
    AllocError, AllocErrorKind, Allocator, PERSISTENT_BLOCK_ALIGN, PersistStats,
    PersistentAllocator, PersistentError, Stats,
};

use super::blocks::{BlockTable, Known};

/// Alignment of every block: a cache line, as alloclab-pmem's and PMDK's blocks here (the
/// engines check that links are multiples of 64).
const ALIGN: usize = PERSISTENT_BLOCK_ALIGN;
/// Alignment of the root (a cache line, as the contract asks).
const ROOT_ALIGN: usize = 64;

fn block_layout(size: usize) -> Result<Layout, String> {
    if size == 0 {
        return Err("dram: cannot allocate 0 bytes".to_owned());
    }
    Layout::from_size_align(size, ALIGN).map_err(|_| format!("dram: {size} bytes is too large"))
}

/// The DRAM baseline (see the module documentation).
pub struct DramHeap {
    root: NonNull<u8>,
    root_layout: Layout,
    blocks: BlockTable,
}

// SAFETY: the root is a plain heap block owned by the heap (threads write disjoint parts of
// it, as the engines' partitions do); the block table is behind mutexes; blocks are plain
// memory whose sharing is the engines' business, as with any persistent heap.
unsafe impl Send for DramHeap {}
// SAFETY: as for `Send`.
unsafe impl Sync for DramHeap {}

impl std::fmt::Debug for DramHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DramHeap")
            .field("root_size", &self.root_layout.size())
            .finish_non_exhaustive()
    }
}

impl DramHeap {
    /// A heap whose root has `root_size` zeroed bytes.
    ///
    /// # Errors
    ///
    /// `root_size` is too large or the host heap is out of memory.
    pub fn new(root_size: usize) -> Result<Self, String> {
        let root_layout = Layout::from_size_align(root_size.max(ROOT_ALIGN), ROOT_ALIGN)
            .map_err(|_| format!("dram: a root of {root_size} bytes is too large"))?;
        // SAFETY: the layout has a non-zero size.
        let root = NonNull::new(unsafe { std::alloc::alloc_zeroed(root_layout) })
            .ok_or_else(|| format!("dram: out of memory for a root of {root_size} bytes"))?;
        Ok(Self {
            root,
            root_layout,
            blocks: BlockTable::new(),
        })
    }
}

impl Allocator for DramHeap {
    type Handle = u64;

    /// [`PersistentAllocator::allocate_unlinked`] of the layout's size; alignments up to a
    /// cache line.
    fn allocate(&self, layout: Layout) -> Result<u64, AllocError> {
        if layout.align() > ALIGN {
            return Err(AllocError::new(
                layout,
                AllocErrorKind::AlignmentUnsupported,
            ));
        }
        if layout.size() == 0 {
            return Err(AllocError::new(layout, AllocErrorKind::ZeroSize));
        }
        self.allocate_unlinked(layout.size())
            .map_err(|_| AllocError::new(layout, AllocErrorKind::OutOfMemory))
    }

    unsafe fn deallocate(&self, handle: u64, _layout: Layout) {
        // SAFETY: the caller's contract: a live block of this heap, used no more.
        let released = unsafe { self.release(handle) };
        debug_assert!(released.is_ok(), "deallocate: {released:?}");
    }

    fn name(&self) -> &str {
        "dram"
    }

    /// Nothing counted.
    fn stats(&self) -> Stats {
        Stats::default()
    }
}

impl PersistentAllocator for DramHeap {
    const DURABLE: bool = false;

    fn create(_path: &Path, _pool_bytes: usize, root_size: usize) -> Result<Self, PersistentError> {
        Ok(Self::new(root_size)?)
    }

    fn open(path: &Path) -> Result<Self, PersistentError> {
        Err(PersistentError::new(format!(
            "dram: nothing persists, so there is no pool to open at {}",
            path.display()
        )))
    }

    fn root(&self) -> *mut u8 {
        self.root.as_ptr()
    }

    fn root_size(&self) -> usize {
        self.root_layout.size()
    }

    fn at(&self, off: u64) -> *mut u8 {
        off as usize as *mut u8
    }

    fn offset_of(&self, p: *const u8) -> u64 {
        p as usize as u64
    }

    fn allocate_unlinked(&self, size: usize) -> Result<u64, PersistentError> {
        let size = self.usable_size(size);
        let layout = block_layout(size)?;
        // SAFETY: a non-zero size (checked by `block_layout`).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(PersistentError::new(format!(
                "dram: out of memory for {size} bytes"
            )));
        }
        let off = p as usize as u64;
        self.blocks.insert(off, size as u64);
        Ok(off)
    }

    unsafe fn release(&self, off: u64) -> Result<(), PersistentError> {
        match self.blocks.take(off).map_err(|e| format!("dram: {e}"))? {
            Known::Live(size) => {
                let layout = block_layout(size as usize)?;
                // SAFETY: `off` is the address of a live block allocated with this layout
                // (the table says so, and now marks it freed); the caller uses it no more.
                unsafe { std::alloc::dealloc(off as usize as *mut u8, layout) };
                Ok(())
            }
            Known::Unknown => Err(PersistentError::new(format!(
                "dram: {off:#x} is not the start of a block of this heap"
            ))),
        }
    }

    unsafe fn allocate_into(&self, dest: *mut u64, size: usize) -> Result<u64, PersistentError> {
        let off = self.allocate_unlinked(size)?;
        // SAFETY: `dest` is an aligned word of the root or a live block, this thread's alone
        // (the caller's contract).
        unsafe { dest.write(off) };
        Ok(off)
    }

    unsafe fn free_from(&self, dest: *mut u64) -> Result<(), PersistentError> {
        // SAFETY: as in `alloc_into`.
        let off = unsafe { dest.read() };
        if off == 0 {
            return Err(PersistentError::new("dram: free_from a null word"));
        }
        // SAFETY: the caller's contract: the block `dest` names is unused after the call.
        unsafe { self.release(off) }?;
        // SAFETY: as in `alloc_into`.
        unsafe { dest.write(0) };
        Ok(())
    }

    /// Blocks are whole cache lines: `size` rounded up to 64 bytes (what is allocated).
    fn usable_size(&self, size: usize) -> usize {
        size.next_multiple_of(ALIGN)
    }

    fn flush(&self, _p: *const u8, _len: usize) {}

    fn fence(&self) {}

    fn persist_counts(&self) -> Option<PersistStats> {
        None
    }
}

impl Drop for DramHeap {
    fn drop(&mut self) {
        for (off, size) in self.blocks.drain_live() {
            if let Ok(layout) = block_layout(size as usize) {
                // SAFETY: a live block of this heap with this layout; `&mut self` means no
                // engine uses the heap any more.
                unsafe { std::alloc::dealloc(off as usize as *mut u8, layout) };
            }
        }
        // SAFETY: allocated in `new` with this layout, freed only here.
        unsafe { std::alloc::dealloc(self.root.as_ptr(), self.root_layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dram_blocks_round_trip_and_a_double_dealloc_is_refused() {
        let heap = DramHeap::create(Path::new("/nonexistent"), 0, 128).unwrap();
        assert_eq!(heap.root_size(), 128);
        assert_eq!(heap.root() as usize % 64, 0);
        // SAFETY: the root is 128 zeroed bytes.
        let root = unsafe { std::slice::from_raw_parts(heap.root(), 128) };
        assert!(root.iter().all(|&b| b == 0));
        let off = heap.allocate_unlinked(1000).unwrap();
        assert_eq!(heap.offset_of(heap.at(off)), off);
        assert_eq!(off % 64, 0);
        // SAFETY: a live 1000-byte block.
        unsafe { heap.at(off).write_bytes(0x5A, 1000) };
        let dest = heap.root().cast::<u64>();
        // SAFETY: the root's first word, this thread's alone.
        unsafe {
            let into = heap.allocate_into(dest, 300).unwrap();
            assert_eq!(dest.read(), into);
            heap.free_from(dest).unwrap();
            assert_eq!(dest.read(), 0);
            assert!(heap.free_from(dest).unwrap_err().message().contains("null"));
            heap.release(off).unwrap();
            assert!(
                heap.release(off)
                    .unwrap_err()
                    .message()
                    .contains("double free")
            );
            assert!(
                heap.release(0x1234)
                    .unwrap_err()
                    .message()
                    .contains("not the start")
            );
        }
        assert!(
            heap.allocate_unlinked(0)
                .unwrap_err()
                .message()
                .contains("0 bytes")
        );
        assert_eq!(heap.persist_counts(), None);
        const { assert!(!DramHeap::DURABLE) };
        assert!(
            DramHeap::open(Path::new("/x"))
                .unwrap_err()
                .message()
                .contains("nothing persists")
        );
    }
}
