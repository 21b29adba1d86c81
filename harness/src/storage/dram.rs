//! [`DramStorage`]: the upper bound of the `storage` suite — a host heap with flushing
//! disabled, as the paper's jemalloc-on-DRAM baseline.
//!
//! Blocks come from `std::alloc` (the worker's global allocator, glibc malloc), 64-byte
//! aligned and whole cache lines (a size is rounded up to 64 bytes, which
//! [`PHeap::usable_size`] says), as the other heaps' blocks; a block's offset is its address (the heap's base is 0), so
//! [`PHeap::at`] and [`PHeap::offset_of`] are casts. [`PHeap::flush`] and [`PHeap::fence`]
//! do nothing, [`PHeap::alloc_into`] and [`PHeap::free_from`] are a plain allocation or
//! free and a plain store, and nothing survives the process ([`PoolFile::DURABLE`] is
//! `false`; [`PoolFile::open`] fails). The root is a zeroed, 64-byte-aligned DRAM block.
//!
//! A [`BlockTable`] remembers each block's size (which `std::alloc::dealloc` needs) and
//! refuses double frees and foreign offsets.

use std::alloc::Layout;
use std::path::Path;
use std::ptr::NonNull;

use super::blocks::{BlockTable, Known};
use super::{PHeap, PersistStats, PoolFile};

/// Alignment of every block: a cache line, as alloclab-pmem's and PMDK's blocks here (the
/// engines check that links are multiples of 64).
const ALIGN: usize = 64;
/// Alignment of the root (a cache line, as the contract asks).
const ROOT_ALIGN: usize = 64;

fn block_layout(size: usize) -> Result<Layout, String> {
    if size == 0 {
        return Err("dram: cannot allocate 0 bytes".to_owned());
    }
    Layout::from_size_align(size, ALIGN).map_err(|_| format!("dram: {size} bytes is too large"))
}

/// The DRAM baseline (see the module documentation of `storage::dram`).
pub struct DramStorage {
    root: NonNull<u8>,
    root_layout: Layout,
    blocks: BlockTable,
}

// SAFETY: the root is a plain heap block owned by the heap (threads write disjoint parts of
// it, as the engines' partitions do); the block table is behind mutexes; blocks are plain
// memory whose sharing is the engines' business, as with any persistent heap.
unsafe impl Send for DramStorage {}
// SAFETY: as for `Send`.
unsafe impl Sync for DramStorage {}

impl std::fmt::Debug for DramStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DramStorage")
            .field("root_size", &self.root_layout.size())
            .finish_non_exhaustive()
    }
}

impl DramStorage {
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

impl PHeap for DramStorage {
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

    fn alloc(&self, size: usize) -> Result<u64, String> {
        let size = self.usable_size(size);
        let layout = block_layout(size)?;
        // SAFETY: a non-zero size (checked by `block_layout`).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(format!("dram: out of memory for {size} bytes"));
        }
        let off = p as usize as u64;
        self.blocks.insert(off, size as u64);
        Ok(off)
    }

    unsafe fn dealloc(&self, off: u64) -> Result<(), String> {
        match self.blocks.take(off).map_err(|e| format!("dram: {e}"))? {
            Known::Live(size) => {
                let layout = block_layout(size as usize)?;
                // SAFETY: `off` is the address of a live block allocated with this layout
                // (the table says so, and now marks it freed); the caller uses it no more.
                unsafe { std::alloc::dealloc(off as usize as *mut u8, layout) };
                Ok(())
            }
            Known::Unknown => Err(format!(
                "dram: {off:#x} is not the start of a block of this heap"
            )),
        }
    }

    unsafe fn alloc_into(&self, dest: *mut u64, size: usize) -> Result<u64, String> {
        let off = self.alloc(size)?;
        // SAFETY: `dest` is an aligned word of the root or a live block, this thread's alone
        // (the caller's contract).
        unsafe { dest.write(off) };
        Ok(off)
    }

    unsafe fn free_from(&self, dest: *mut u64) -> Result<(), String> {
        // SAFETY: as in `alloc_into`.
        let off = unsafe { dest.read() };
        if off == 0 {
            return Err("dram: free_from a null word".to_owned());
        }
        // SAFETY: the caller's contract: the block `dest` names is unused after the call.
        unsafe { self.dealloc(off) }?;
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

impl PoolFile for DramStorage {
    const NAME: &'static str = "dram";
    const DURABLE: bool = false;

    fn create(_path: &Path, _pool_bytes: usize, root_size: usize) -> Result<Self, String> {
        Self::new(root_size)
    }

    fn open(path: &Path) -> Result<Self, String> {
        Err(format!(
            "dram: nothing persists, so there is no pool to open at {}",
            path.display()
        ))
    }
}

impl Drop for DramStorage {
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
        let heap = DramStorage::create(Path::new("/nonexistent"), 0, 128).unwrap();
        assert_eq!(heap.root_size(), 128);
        assert_eq!(heap.root() as usize % 64, 0);
        // SAFETY: the root is 128 zeroed bytes.
        let root = unsafe { std::slice::from_raw_parts(heap.root(), 128) };
        assert!(root.iter().all(|&b| b == 0));
        let off = heap.alloc(1000).unwrap();
        assert_eq!(heap.offset_of(heap.at(off)), off);
        assert_eq!(off % 64, 0);
        // SAFETY: a live 1000-byte block.
        unsafe { heap.at(off).write_bytes(0x5A, 1000) };
        let dest = heap.root().cast::<u64>();
        // SAFETY: the root's first word, this thread's alone.
        unsafe {
            let into = heap.alloc_into(dest, 300).unwrap();
            assert_eq!(dest.read(), into);
            heap.free_from(dest).unwrap();
            assert_eq!(dest.read(), 0);
            assert!(heap.free_from(dest).unwrap_err().contains("null"));
            heap.dealloc(off).unwrap();
            assert!(heap.dealloc(off).unwrap_err().contains("double free"));
            assert!(heap.dealloc(0x1234).unwrap_err().contains("not the start"));
        }
        assert!(heap.alloc(0).unwrap_err().contains("0 bytes"));
        assert_eq!(heap.persist_counts(), None);
        const { assert!(!DramStorage::DURABLE) };
        assert!(
            DramStorage::open(Path::new("/x"))
                .unwrap_err()
                .contains("nothing persists")
        );
    }
}
