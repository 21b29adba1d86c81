//! [`DramHeap`]: the upper bound of the `pmem` and `storage` suites — a host heap with
//! flushing disabled, as the storage-engine paper's jemalloc-on-DRAM baseline, behind
//! [`PersistentAllocator`].
//!
//! Blocks come from the C heap (`malloc`, glibc's in the harness), 64-byte aligned and
//! whole cache lines (a size is rounded up to 64 bytes, which
//! [`PersistentAllocator::usable_size`] says), as the other heaps' blocks; a block's offset
//! is its address (the heap's base is 0), so [`at`](PersistentAllocator::at) and
//! [`offset_of`](PersistentAllocator::offset_of) are casts.
//! [`flush`](PersistentAllocator::flush) and [`fence`](PersistentAllocator::fence) do
//! nothing, [`allocate_into`](PersistentAllocator::allocate_into) and
//! [`free_from`](PersistentAllocator::free_from) are a plain allocation or free and a plain
//! store, and nothing survives the process ([`DURABLE`](PersistentAllocator::DURABLE) is
//! `false`; [`open`](PersistentAllocator::open) fails). The root is a zeroed,
//! 64-byte-aligned DRAM block.
//!
//! A block is cut from a plain `malloc` of 48 bytes more, at its first cache line: glibc's
//! aligned allocation path (`posix_memalign`) costs several times its plain one (88 against
//! 12 ns for a free and an allocation here), which would make the baseline measure glibc's
//! alignment code. A `LineMap` records each live block's line and how far above its host
//! allocation it starts (which `free` needs), and refuses double frees and foreign offsets
//! with one atomic instruction per allocation and per free and no lock: a baseline that
//! paid a lock and a hash probe on every call (as PMDK's adapter does, whose heap cannot
//! tell) would bound nothing from above.

use std::alloc::Layout;
use std::path::Path;
use std::ptr::NonNull;

use alloclab_core::{
    AllocError, AllocErrorKind, Allocator, PERSISTENT_BLOCK_ALIGN, PersistStats,
    PersistentAllocator, PersistentError, Stats,
};

use super::lines::{LINE, LineMap, MAX_LEAD, Taken};

/// Alignment of every block: a cache line, as alloclab-pmem's and PMDK's blocks here (the
/// engines check that links are multiples of 64).
const ALIGN: usize = PERSISTENT_BLOCK_ALIGN;
/// Alignment of the root (a cache line, as the contract asks).
const ROOT_ALIGN: usize = 64;

/// What is asked of the C heap for a block of `size` usable bytes (a multiple of
/// [`ALIGN`]): room to start it at the first cache line of what comes back (`malloc`
/// returns 16-byte-aligned memory, so the block starts at most [`MAX_LEAD`] bytes in).
fn host_bytes(size: usize) -> Result<usize, String> {
    if size == 0 {
        return Err("dram: cannot allocate 0 bytes".to_owned());
    }
    size.checked_add(MAX_LEAD)
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .ok_or_else(|| format!("dram: {size} bytes is too large"))
}

const _: () = assert!(ALIGN == LINE);

/// The DRAM baseline (see the module documentation).
pub struct DramHeap {
    root: NonNull<u8>,
    root_layout: Layout,
    blocks: LineMap,
}

// SAFETY: the root is a plain heap block owned by the heap (threads write disjoint parts of
// it, as the engines' partitions do); the line map is shared through atomics; blocks are plain
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
        let blocks = LineMap::new().map_err(|e| {
            // SAFETY: allocated above with this layout, not yet shared.
            unsafe { std::alloc::dealloc(root.as_ptr(), root_layout) };
            format!("dram: {e}")
        })?;
        Ok(Self {
            root,
            root_layout,
            blocks,
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
        let bytes = host_bytes(size)?;
        // SAFETY: plain `malloc` of a non-zero size.
        let p = unsafe { libc::malloc(bytes) }.cast::<u8>();
        if p.is_null() {
            return Err(PersistentError::new(format!(
                "dram: out of memory for {size} bytes"
            )));
        }
        let lead = p.align_offset(ALIGN);
        let block = p as usize + lead;
        if let Err(e) = self.blocks.insert(block, lead) {
            // SAFETY: just allocated by `malloc`, not handed out.
            unsafe { libc::free(p.cast()) };
            return Err(PersistentError::new(format!("dram: {e}")));
        }
        Ok(block as u64)
    }

    unsafe fn release(&self, off: u64) -> Result<(), PersistentError> {
        match self.blocks.take(off as usize) {
            Taken::Live { lead } => {
                // SAFETY: `off` was a live block, `lead` bytes into its `malloc` allocation
                // (the map says so, and now marks it freed); the caller uses it no more.
                unsafe { libc::free((off as usize - lead) as *mut libc::c_void) };
                Ok(())
            }
            Taken::Freed => Err(PersistentError::new(format!(
                "dram: block at {off:#x} was freed already (double free refused)"
            ))),
            Taken::Unknown => Err(PersistentError::new(format!(
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

    /// Blocks are whole cache lines: `size` rounded up to 64 bytes (what is allocated;
    /// `usize::MAX` for a size that cannot be, which no allocation then satisfies).
    fn usable_size(&self, size: usize) -> usize {
        size.checked_next_multiple_of(ALIGN).unwrap_or(usize::MAX)
    }

    fn flush(&self, _p: *const u8, _len: usize) {}

    fn fence(&self) {}

    fn persist_counts(&self) -> Option<PersistStats> {
        None
    }
}

impl Drop for DramHeap {
    fn drop(&mut self) {
        for (block, lead) in self.blocks.drain_live() {
            // SAFETY: a live block of this heap, `lead` bytes into its `malloc` allocation;
            // `&mut self` means no engine uses the heap any more.
            unsafe { libc::free((block - lead) as *mut libc::c_void) };
        }
        // SAFETY: allocated in `new` with this layout, freed only here.
        unsafe { std::alloc::dealloc(self.root.as_ptr(), self.root_layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cut_from_plain_allocations_are_whole_aligned_lines_of_their_own() {
        let heap = DramHeap::new(64).unwrap();
        let blocks: Vec<(u64, usize)> = (0..300)
            .map(|i| {
                let size = 1 + i * 37 % 2000;
                (
                    heap.allocate_unlinked(size).unwrap(),
                    heap.usable_size(size),
                )
            })
            .collect();
        for (i, &(off, usable)) in blocks.iter().enumerate() {
            assert_eq!(off % 64, 0);
            // SAFETY: a live block of `usable` bytes.
            unsafe { heap.at(off).write_bytes(i as u8, usable) };
        }
        for (i, &(off, usable)) in blocks.iter().enumerate() {
            // SAFETY: as above; nothing else wrote into it.
            let bytes = unsafe { std::slice::from_raw_parts(heap.at(off), usable) };
            assert!(bytes.iter().all(|&b| b == i as u8), "block {i} overwritten");
            // SAFETY: live, used no more.
            unsafe { heap.release(off).unwrap() };
        }
        assert!(
            heap.allocate_unlinked(usize::MAX - 100)
                .unwrap_err()
                .message()
                .contains("too large")
        );
        assert!(
            heap.allocate_unlinked(usize::MAX)
                .unwrap_err()
                .message()
                .contains("too large")
        );
        // Blocks left live are given back when the heap goes (Miri and ASan would see a
        // leak or a bad free).
        heap.allocate_unlinked(100).unwrap();
        drop(heap);
    }

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
