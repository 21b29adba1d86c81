//! The persistent heap: a Ralloc-style allocator on a [`Pool`], whose only persistent
//! metadata is which slab serves which size class, and whose free lists live in DRAM and are
//! rebuilt on open by a mark pass from the root.
//!
//! # Layout
//!
//! The pool's heap area is cut into slabs of [`SLAB_BYTES`] (64 KiB; a tail shorter than a
//! slab is unused). A slab is free, serves one size class of [`SIZE_CLASSES`] (64 B … 4 KiB,
//! blocks cut from the slab's start, every block cache-line aligned; the tail that no whole
//! block fills is unused), or belongs to a *run* of whole slabs serving one request larger
//! than 4 KiB.
//!
//! The pool's metadata area has one byte per heap line; the heap uses the bytes of each
//! slab's first line only (its *tag line*):
//!
//! * byte 0, the **tag**: `0` never assigned, `1..=12` small class `tag - 1`, `0xFE` head of
//!   a run, `0xFF` continuation of a run;
//! * bytes 4..8 of a run head: the run's length in slabs (little-endian `u32`), written
//!   before the tag, in the same line.
//!
//! A tag is written and persisted (flush + fence) when a slab is assigned (off the fast
//! path: once per 64 KiB carved, once per large request), always **before** any block of
//! it is published. Nothing persistent changes when a slab or run becomes free: tags go
//! stale and are read with these rules at recovery (scanning slabs in order):
//!
//! * a head is a run only if every slab of its recorded length carries a continuation tag
//!   (a torn or stale head is not a run; the slabs after it are read on their own);
//! * a continuation that no valid head covers is free;
//! * a small tag is a slab of that class.
//!
//! These rules are sound because a live slab's tag was persisted before its blocks were
//! published, and a stale head can only cover slabs whose tags are still continuations,
//! which no live slab outside a valid run carries.
//!
//! # Operations and crash consistency
//!
//! A block is live iff it is reachable from the root; nothing else is durable.
//!
//! * [`allocate_into`](PersistentHeap::allocate_into): pop a block from the calling thread's
//!   cache, [`PPtr::store`] it into `dest` (one failure-atomic 8-byte store), flush `dest`'s
//!   line, fence. **1 flush, 1 fence.** A crash before the fence leaves the block
//!   unreachable (free after recovery) or reachable (live): never both.
//! * [`free_from`](PersistentHeap::free_from): load the block from `dest`, store null,
//!   flush, fence, then give the block back to the thread's cache. **1 flush, 1 fence.**
//! * [`reserve`](PersistentHeap::reserve) takes a block in DRAM only;
//!   [`publish`](PersistentHeap::publish) stores every destination, flushes each line and
//!   fences once. A dropped, unpublished [`Reservation`] returns its block.
//! * [`allocate_unlinked`](PersistentHeap::allocate_unlinked) (or [`Reservation::keep`])
//!   and [`release`](PersistentHeap::release) are the same two
//!   operations for a caller that links and unlinks blocks durably itself (a storage
//!   engine, inside the fence of its own log or commit): **no flush, no fence**; since a
//!   block is live iff reachable, the caller's durable link is the allocation.
//!   [`allocate_unlinked_sizes`](PersistentHeap::allocate_unlinked_sizes) and
//!   [`release_many`](PersistentHeap::release_many) do the same for several blocks with one
//!   visit to the thread's cache (an engine's copy-on-write path and tuple, a commit's
//!   retired versions).
//!   [`release_many_then_allocate`](PersistentHeap::release_many_then_allocate) gives
//!   blocks back and takes one in that one visit;
//!   [`release_many_then_reuse`](PersistentHeap::release_many_then_reuse), for a caller
//!   that vouches the blocks are live, hands the last one straight back when its class
//!   fits, without reading its live-map byte (a line the caller has not touched).
//!
//! The block's contents are the caller's (persist them with
//! [`persist`](PersistentHeap::persist) before publishing, or after: a crash in between
//! keeps a reachable block with whatever bytes reached the medium).
//!
//! # Per-thread caches
//!
//! Each thread has its own per-class stacks of free block offsets for each heap it uses
//! (`heap::thread_cache`): the fast path pops or pushes with no lock and no locked instruction
//! (a locked instruction after a flush waits for it like a fence), and finds a request's
//! class by a table lookup and a block's index in its slab by a multiplication (no
//! division). An empty stack refills (a
//! batch of [`REFILL_BATCH`]) from the global per-class lists, or carves a fresh slab, under
//! the global mutex; a stack over [`CACHE_LIMIT`] hands its older half back, as a chunk it
//! fills before taking the mutex (the global lists are lists of chunks, `heap::free_list`,
//! so that nothing under the mutex copies or regrows a whole list). When both are
//! empty the stacks of threads that exited are taken into the global lists before reporting
//! [`HeapError::OutOfSpace`]. Runs are taken first-fit from the global slab map. Small slabs
//! go back to the slab pool only at recovery (when all their blocks are free), not at run
//! time.
//!
//! A volatile map with one byte per block says which blocks are live (a byte, so that the
//! thread that takes or frees a block writes it with a plain store); it is what
//! [`free_from`](PersistentHeap::free_from) and [`release`](PersistentHeap::release) check
//! and clear, so a double free is refused (unless two threads free one block at the same
//! time, which their contract rules out), and what recovery's mark pass fills. Each slab has
//! `LIVE_PER_SLAB` bytes of it (as many as its smallest class has blocks), indexed by the
//! block's index in the slab: the bytes of a slab's blocks are adjacent, so that the map's
//! lines an engine touches stay few (one or two per slab of 512 B–1 KiB blocks, where a
//! byte per heap line spread them over sixteen) and stay in the cache.
//!
//! # Recovery
//!
//! [`open_on`](PersistentHeap::open_on) reads the slab tags, then marks from the root:
//! every aligned 8-byte word of the root and of every marked block that is a *valid block
//! start* — inside an assigned slab at a block boundary of its class, or the first byte of a
//! valid run — marks that block. Blocks not marked are free; small slabs with no marked block
//! and unmarked runs return to the slab pool. The scan is conservative: **the leak bound is
//! that a block stays allocated while any reachable word (data included, and stale bytes of
//! reachable blocks that were never overwritten) equals its offset**; such a block is freed
//! by a later recovery once no reachable word names it. Data that never holds a value equal
//! to a block offset (odd numbers, say, or values below the heap's offset) leaks nothing.

mod alloc;
mod batch;
mod bug;
mod classes;
mod error;
mod free_list;
mod live;
mod recovery;
mod reservation;
mod slabs;
mod thread_cache;
mod traits;

use crate::sync::raw::{AtomicU8, AtomicU32, AtomicU64};
use crate::sync::{Mutex, MutexGuard, Ordering};
use std::alloc::Layout;
use std::path::Path;
use std::time::Duration;

// The thread caches' registry holds the loom shim's `Arc` (see `thread_cache`).
use crate::sync::Arc;

use classes::*;
pub use classes::{CACHE_LIMIT, MAX_SMALL, REFILL_BATCH, SIZE_CLASSES, SLAB_BYTES, usable_size};
pub use error::HeapError;
use free_list::FreeList;
pub use reservation::Reservation;
use thread_cache::{CacheSlot, with_slot};
pub use traits::PathMedium;

use crate::persist::CACHE_LINE;
use crate::{Medium, PPtr, PersistStats, Pool, create_best, open_best};

/// A block: its offset in the pool and what it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    offset: usize,
    size: usize,
    /// `Some(class)` for a small block, `None` for a run.
    class: Option<usize>,
}

/// What recovery found when the heap was opened (zeros for a created heap).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Blocks reachable from the root (live after recovery).
    pub live_blocks: u64,
    /// Bytes of those blocks (block sizes, not the sizes asked for).
    pub live_bytes: u64,
    /// Time from the validated pool to the usable heap (tag scan, mark, sweep).
    pub duration: Duration,
}

/// Counters of a heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// The medium's persistence counters (every flush and fence, the heap's and callers').
    pub persist: PersistStats,
    /// Blocks allocated since open (`allocate_into` and published reservations).
    pub allocations: u64,
    /// Blocks freed since open.
    pub frees: u64,
    /// Blocks live now: recovered + allocations − frees.
    pub live_blocks: u64,
}

/// Global free lists and the slab map.
struct Global {
    /// Per class, the free blocks no thread caches.
    free: [FreeList; NCLASSES],
    /// `true` for a slab in the slab pool.
    slab_free: Vec<bool>,
    /// Where the search for one free slab starts.
    hint: usize,
}

/// Where things are, from the pool's validated header.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    root_off: usize,
    root_len: usize,
    meta_off: usize,
    heap_off: usize,
    nslabs: usize,
    pool_len: usize,
}

/// A persistent heap on a medium (see the module documentation).
pub struct PersistentHeap<M: Medium = Box<dyn Medium>> {
    pool: Pool<M>,
    geo: Geometry,
    kinds: Box<[AtomicU32]>,
    /// One byte per block slot ([`LIVE_PER_SLAB`] per slab, see
    /// [`live_slot`](Self::live_slot)): 1 for each live (or reserved) block.
    live: Box<[AtomicU8]>,
    /// This heap's key in the threads' cache lists (unique in the process).
    id: u64,
    /// Every thread's cache of this heap (for the counters, and the blocks of threads
    /// that exited).
    caches: Mutex<Vec<Arc<CacheSlot>>>,
    /// Counts of the calls made by threads whose locals are gone (exiting): written only
    /// under the `global` mutex.
    fallback: CacheSlot,
    global: Mutex<Global>,
    recovery: RecoveryReport,
}

impl<M: Medium> std::fmt::Debug for PersistentHeap<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentHeap")
            .field("pool", &self.pool)
            .field("slabs", &self.geo.nslabs)
            .field("recovery", &self.recovery)
            .finish_non_exhaustive()
    }
}

static NEXT_HEAP_ID: AtomicU64 = AtomicU64::new(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its data consistent before anything can panic.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PersistentHeap<Box<dyn Medium>> {
    /// Creates a pool file of `size` bytes at `path` (libpmem when it loads, else the native
    /// medium) holding an empty heap and a zeroed root of `root_size` bytes.
    ///
    /// # Errors
    ///
    /// [`HeapError::Medium`] when the file cannot be created (it exists, …);
    /// [`HeapError::Pool`] when `size` is too small for the root.
    pub fn create(
        path: impl AsRef<Path>,
        size: usize,
        root_size: usize,
    ) -> Result<Self, HeapError> {
        Self::create_on(create_best(path, size)?, root_size)
    }

    /// Opens the pool file at `path` and recovers its heap.
    ///
    /// # Errors
    ///
    /// [`HeapError::Medium`] (not found, locked by another process, empty, …) or
    /// [`HeapError::Pool`] (not a pool, bad checksum, truncated, other version, …); the file
    /// is left as it was.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, HeapError> {
        Self::open_on(open_best(path)?)
    }
}

impl<M: Medium> PersistentHeap<M> {
    /// Formats `medium` as a new pool with an empty heap and a zeroed root of `root_size`
    /// bytes (whatever the medium held is lost).
    ///
    /// # Errors
    ///
    /// [`HeapError::Pool`] when the medium is too small or misaligned.
    pub fn create_on(medium: M, root_size: usize) -> Result<Self, HeapError> {
        let pool = Pool::create(medium, root_size)?;
        let heap = Self::new(pool);
        let nslabs = heap.geo.nslabs;
        lock(&heap.global).slab_free = vec![true; nslabs];
        Ok(heap)
    }

    /// Opens the pool on `medium` and rebuilds the heap's free lists by marking from the
    /// root (see the module documentation); [`recovery`](Self::recovery) reports what it
    /// found.
    ///
    /// # Errors
    ///
    /// [`HeapError::Pool`] when the pool layer refuses the medium (nothing is written then).
    pub fn open_on(medium: M) -> Result<Self, HeapError> {
        let pool = Pool::open(medium)?;
        let mut heap = Self::new(pool);
        heap.recover();
        Ok(heap)
    }

    fn new(pool: Pool<M>) -> Self {
        let root = pool.root_range();
        let meta = pool.metadata_range();
        let heap = pool.heap_range();
        // The metadata area has a byte per heap line (validated by the pool's layout rules
        // only as "no overlap"), so never use more slabs than it describes, nor more than a
        // kind word can number.
        let nslabs = (heap.len / SLAB_BYTES)
            .min(meta.len / META_PER_SLAB)
            .min(MAX_SLABS);
        let geo = Geometry {
            root_off: root.offset,
            root_len: root.len,
            meta_off: meta.offset,
            heap_off: heap.offset,
            nslabs,
            pool_len: pool.size_bytes(),
        };
        Self {
            geo,
            kinds: (0..nslabs).map(|_| AtomicU32::new(0)).collect(),
            live: (0..nslabs * LIVE_PER_SLAB)
                .map(|_| AtomicU8::new(0))
                .collect(),
            id: NEXT_HEAP_ID.fetch_add(1, Ordering::Relaxed),
            caches: Mutex::new(Vec::new()),
            fallback: CacheSlot::new(),
            global: Mutex::new(Global {
                free: Default::default(),
                slab_free: vec![false; nslabs],
                hint: 0,
            }),
            recovery: RecoveryReport::default(),
            pool,
        }
    }

    /// The root object's first byte (`root_size()` bytes, zeroed at creation).
    pub fn root(&self) -> *mut u8 {
        // SAFETY: the root lies inside the mapping (validated by the pool).
        unsafe { self.base().add(self.geo.root_off) }
    }

    /// Bytes in the root object.
    pub fn root_size(&self) -> usize {
        self.geo.root_len
    }

    /// The medium the pool lives on.
    pub fn medium(&self) -> &M {
        self.pool.medium()
    }

    /// The pool under the heap.
    pub fn pool(&self) -> &Pool<M> {
        &self.pool
    }

    /// What recovery found when this heap was opened.
    pub fn recovery(&self) -> RecoveryReport {
        self.recovery
    }

    /// The address `p` names in this mapping (`None` for null or outside the heap).
    pub fn resolve(&self, p: PPtr<u8>) -> Option<*mut u8> {
        self.pool.resolve(p)
    }

    /// The size of the live block that starts at `p`, if one does (reserved blocks count).
    pub fn block_size(&self, p: PPtr<u8>) -> Option<usize> {
        let offset = usize::try_from(p.offset()).ok()?;
        let block = self.block_containing(offset)?;
        (block.offset == offset && self.is_live(&block)).then_some(block.size)
    }

    /// Makes `len` bytes at `ptr` durable (flush + fence), for the caller's own writes.
    ///
    /// # Panics
    ///
    /// If the range is not inside the pool's mapping.
    pub fn persist(&self, ptr: *const u8, len: usize) {
        let offset = (ptr as usize).wrapping_sub(self.base() as usize);
        assert!(
            offset <= self.geo.pool_len && len <= self.geo.pool_len - offset,
            "persist of {len} bytes at {ptr:p}: outside the pool"
        );
        self.medium().persist(offset, len);
    }

    /// The counters now (exact once the threads that used the heap are joined).
    pub fn stats(&self) -> HeapStats {
        let (mut allocations, mut frees) = {
            let _global = lock(&self.global);
            self.fallback.counts()
        };
        for slot in lock(&self.caches).iter() {
            let (a, f) = slot.counts();
            allocations += a;
            frees += f;
        }
        HeapStats {
            persist: self.medium().stats(),
            allocations,
            frees,
            live_blocks: self.recovery.live_blocks + allocations - frees,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_table_is_the_smallest_class_that_fits() {
        for size in 1..=MAX_SMALL {
            let c = class_of(size);
            assert!(SIZE_CLASSES[c] >= size, "{size}");
            assert!(c == 0 || SIZE_CLASSES[c - 1] < size, "{size}");
        }
    }

    #[test]
    fn usable_size_is_the_smallest_class_or_whole_slabs() {
        for size in 0..=MAX_SMALL {
            let expected = SIZE_CLASSES.into_iter().find(|&c| c >= size);
            assert_eq!(Some(usable_size(size)), expected, "{size}");
        }
        assert_eq!(usable_size(MAX_SMALL + 1), SLAB_BYTES);
        assert_eq!(usable_size(SLAB_BYTES + 1), 2 * SLAB_BYTES);
    }

    #[test]
    fn every_block_of_a_slab_has_its_own_live_slot_inside_the_slabs_share() {
        for (c, &size) in SIZE_CLASSES.iter().enumerate() {
            assert_eq!(blocks_per_slab(c), SLAB_BYTES / size);
            assert!(blocks_per_slab(c) <= LIVE_PER_SLAB, "class {c}");
            for i in 0..blocks_per_slab(c) {
                // The slot index of block `i` is `i`: distinct, and below the slab's share.
                assert_eq!(block_index(c, i * size), i, "class {c}, block {i}");
            }
        }
    }

    #[test]
    fn reciprocal_block_indexes_equal_division_on_every_line_of_every_class() {
        for (c, &size) in SIZE_CLASSES.iter().enumerate() {
            for in_slab in (0..SLAB_BYTES).step_by(CACHE_LINE / 2) {
                assert_eq!(
                    block_index(c, in_slab),
                    in_slab / size,
                    "class {c}, {in_slab}"
                );
            }
        }
    }
}
