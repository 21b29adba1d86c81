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
//!   [`allocate_unlinked_many`](PersistentHeap::allocate_unlinked_many) and
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
//! the global mutex; a stack over [`CACHE_LIMIT`] hands its older half back. When both are
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

mod error;
mod recovery;
mod thread_cache;
mod traits;

use std::alloc::Layout;
use std::path::Path;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

// The thread caches' registry holds the loom shim's `Arc` (see `thread_cache`), so this
// module names the same one: the crate then builds under `--cfg loom` too.
use alloclab_core::sync::Arc;

pub use error::HeapError;
use thread_cache::{CacheSlot, with_slot};
pub use traits::PathMedium;

use crate::persist::CACHE_LINE;
use crate::{Medium, PPtr, PersistStats, Pool, create_best, open_best};

/// Bytes per slab.
pub const SLAB_BYTES: usize = 64 * 1024;

/// Block sizes of the small classes, in bytes (each a multiple of a cache line).
pub const SIZE_CLASSES: [usize; 12] = [
    64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
];

/// The largest request served from a small class; larger ones take a run of whole slabs.
pub const MAX_SMALL: usize = 4096;

/// Blocks a thread's cache takes from the global lists at a time.
pub const REFILL_BATCH: usize = 64;

/// Free blocks a thread's cache keeps per class before handing half back to the global
/// lists.
pub const CACHE_LIMIT: usize = 2048;

const NCLASSES: usize = SIZE_CLASSES.len();
const TAG_RUN_HEAD: u8 = 0xFE;
const TAG_RUN_CONT: u8 = 0xFF;
/// Metadata bytes per slab (one per heap line).
const META_PER_SLAB: usize = SLAB_BYTES / CACHE_LINE;
/// Live-map bytes per slab: one per block of the smallest class (the most blocks a slab
/// holds); a slab's blocks use the first [`blocks_per_slab`] of them, a run's head the
/// first.
const LIVE_PER_SLAB: usize = SLAB_BYTES / SIZE_CLASSES[0];

/// Volatile slab kinds, one `AtomicU32` per slab: `0` free; `1..=12` class + 1;
/// `KIND_HEAD | len`; `KIND_CONT | head`.
const KIND_HEAD: u32 = 0x8000_0000;
const KIND_CONT: u32 = 0x4000_0000;
const KIND_LOW: u32 = 0x3FFF_FFFF;

/// What a slab is, decoded from its volatile kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Free,
    Small(usize),
    Head(usize),
    Cont(usize),
}

fn decode(kind: u32) -> Kind {
    if kind & KIND_HEAD != 0 {
        Kind::Head((kind & KIND_LOW) as usize)
    } else if kind & KIND_CONT != 0 {
        Kind::Cont((kind & KIND_LOW) as usize)
    } else if kind == 0 {
        Kind::Free
    } else {
        Kind::Small(kind as usize - 1)
    }
}

/// Blocks of class `c` in one slab: a table lookup (no division on the free path).
#[inline]
fn blocks_per_slab(c: usize) -> usize {
    BLOCKS_PER_SLAB[c]
}

/// [`blocks_per_slab`] of each class.
const BLOCKS_PER_SLAB: [usize; NCLASSES] = {
    let mut n = [0usize; NCLASSES];
    let mut c = 0;
    while c < NCLASSES {
        n[c] = SLAB_BYTES / SIZE_CLASSES[c];
        c += 1;
    }
    n
};

/// Whether a request of `size` bytes aligned to `align` is served from a small class (the
/// thread caches' stacks) rather than as a run of pages.
#[inline]
fn is_small(size: usize, align: usize) -> bool {
    size != 0 && size <= MAX_SMALL && align <= CACHE_LINE
}

/// The smallest class whose blocks hold `size` bytes (`size <= MAX_SMALL`): a table
/// lookup by the size in cache lines.
#[inline]
fn class_of(size: usize) -> usize {
    CLASS_BY_LINES[size.div_ceil(CACHE_LINE)] as usize
}

/// The bytes of the block a request of `size` bytes gets: its size class (a table lookup),
/// or whole slabs above [`MAX_SMALL`].
#[inline]
pub fn usable_size(size: usize) -> usize {
    if size <= MAX_SMALL {
        SIZE_CLASSES[class_of(size)]
    } else {
        size.next_multiple_of(SLAB_BYTES)
    }
}

/// [`class_of`] by the size in whole cache lines (`0..=MAX_SMALL / CACHE_LINE`).
const CLASS_BY_LINES: [u8; MAX_SMALL / CACHE_LINE + 1] = {
    let mut table = [0u8; MAX_SMALL / CACHE_LINE + 1];
    let mut lines = 0;
    while lines < table.len() {
        let mut c = 0;
        while SIZE_CLASSES[c] < lines * CACHE_LINE {
            c += 1;
        }
        table[lines] = c as u8;
        lines += 1;
    }
    table
};

/// Bits of the fixed-point reciprocals in [`LINE_RECIPROCALS`].
const RECIPROCAL_SHIFT: u32 = 22;

/// `ceil(2^22 / lines)` for each class's block size in cache lines: a block's index in its
/// slab is `(line * LINE_RECIPROCALS[c]) >> 22` for every line of a slab (below 2^10), with
/// no division (the error term is below `2^10 / 2^22`, far under the `1 / lines` that would
/// change the quotient; a test checks every line of every class).
const LINE_RECIPROCALS: [usize; NCLASSES] = {
    let mut r = [0usize; NCLASSES];
    let mut c = 0;
    while c < NCLASSES {
        r[c] = (1usize << RECIPROCAL_SHIFT).div_ceil(SIZE_CLASSES[c] / CACHE_LINE);
        c += 1;
    }
    r
};

/// The index, in its slab, of the class-`c` block that holds byte `in_slab` of the slab.
#[inline]
fn block_index(c: usize, in_slab: usize) -> usize {
    ((in_slab / CACHE_LINE) * LINE_RECIPROCALS[c]) >> RECIPROCAL_SHIFT
}

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
    free: [Vec<u64>; NCLASSES],
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
        // only as "no overlap"), so never use more slabs than it describes.
        let nslabs = (heap.len / SLAB_BYTES).min(meta.len / META_PER_SLAB);
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

    /// Allocates a block for `layout` and stores a pointer to it into `dest`, durably:
    /// after a crash `dest` holds either its old value (and the block is free) or the block
    /// (and the block is live). One flush and one fence on the fast path. Whatever `dest`
    /// held before is overwritten (a block it named becomes garbage that recovery frees).
    ///
    /// # Errors
    ///
    /// [`HeapError::ZeroSize`], [`HeapError::UnsupportedAlignment`],
    /// [`HeapError::TooLarge`], [`HeapError::OutOfSpace`]; [`HeapError::MisalignedDest`] and
    /// [`HeapError::DestOutsidePool`] unless `dest` is 8 aligned bytes inside the root or a
    /// live block. Nothing is written on error.
    ///
    /// # Safety
    ///
    /// `dest` must not be accessed concurrently by other threads except through
    /// [`PPtr::load`]/[`PPtr::store`] (in particular not by another `allocate_into` or
    /// `free_from` of the same `dest`), and the block holding it must not be freed meanwhile.
    pub unsafe fn allocate_into(
        &self,
        dest: *mut PPtr<u8>,
        layout: Layout,
    ) -> Result<PPtr<u8>, HeapError> {
        let dest_off = self.check_dest(dest)?;
        let block = self.take(layout, true)?;
        let p = PPtr::from_offset(block.offset as u64);
        // SAFETY: `dest` is 8-aligned and inside the mapping (checked); the caller rules out
        // concurrent non-atomic access.
        unsafe { PPtr::store(dest, p) };
        self.medium().persist(dest_off, 8);
        Ok(p)
    }

    /// Frees the block `dest` points to and stores null into `dest`, durably: after a crash
    /// `dest` holds the block (still live) or null (and the block is free). One flush and
    /// one fence on the fast path.
    ///
    /// # Errors
    ///
    /// [`HeapError::NullDest`] when `dest` holds null; [`HeapError::NotABlock`] when it holds
    /// anything but the start of a live block (a double free included);
    /// [`HeapError::MisalignedDest`], [`HeapError::DestOutsidePool`] as for
    /// [`allocate_into`](Self::allocate_into). Nothing is written on error.
    ///
    /// # Safety
    ///
    /// As for [`allocate_into`](Self::allocate_into); besides, no other pointer to the block
    /// may be used after this call.
    pub unsafe fn free_from(&self, dest: *mut PPtr<u8>) -> Result<(), HeapError> {
        let dest_off = self.check_dest(dest)?;
        // SAFETY: as in `allocate_into`.
        let p = unsafe { PPtr::load(dest) };
        if p.is_null() {
            return Err(HeapError::NullDest);
        }
        let not_a_block = HeapError::NotABlock { offset: p.offset() };
        let offset = usize::try_from(p.offset()).map_err(|_| not_a_block)?;
        let block = match self.block_containing(offset) {
            Some(b) if b.offset == offset => b,
            _ => return Err(HeapError::NotABlock { offset: p.offset() }),
        };
        // Clearing the live mark first refuses a double free before anything is written.
        if !self.clear_live(self.live_slot(&block)) {
            return Err(HeapError::NotABlock { offset: p.offset() });
        }
        // SAFETY: as above.
        unsafe { PPtr::store(dest, PPtr::NULL) };
        self.medium().persist(dest_off, 8);
        self.give_back(block, true);
        Ok(())
    }

    /// Allocates a block for `layout` that the caller links durably itself: what
    /// [`reserve`](Self::reserve) then [`Reservation::keep`] do, with one lock round trip
    /// instead of two. No flush, no fence; a crash before the caller's link is durable
    /// leaves the block unreachable, and recovery frees it.
    ///
    /// # Errors
    ///
    /// As [`allocate_into`](Self::allocate_into) for the layout.
    pub fn allocate_unlinked(&self, layout: Layout) -> Result<PPtr<u8>, HeapError> {
        // The fast path: a small block on the thread's stack, taken with one visit to the
        // cache and no `Block` to build (the rest, and errors, in `take`).
        let size = layout.size();
        if is_small(size, layout.align()) {
            let c = class_of(size);
            let cached = self.with_cache(|slot| {
                // SAFETY: this thread owns its slot, and nothing else holds its stacks.
                let offset = unsafe { slot.stacks() }[c].pop()?;
                slot.count_allocations(1);
                Some(offset)
            });
            if let Some(Some(offset)) = cached {
                self.set_live(self.small_slot(c, offset as usize));
                return Ok(PPtr::from_offset(offset));
            }
        }
        let block = self.take(layout, true)?;
        Ok(PPtr::from_offset(block.offset as u64))
    }

    /// Gives back the live block at `p` without writing anything persistent: the
    /// counterpart of [`Reservation::keep`], for a caller that has already unlinked the
    /// block durably (cleared every reachable word that named it, and fenced). No flush, no
    /// fence: a block no reachable word names is free at the next recovery anyway.
    ///
    /// # Errors
    ///
    /// [`HeapError::NullDest`] for null; [`HeapError::NotABlock`] unless `p` is the start of
    /// a live block (a double release or a release after [`free_from`](Self::free_from)
    /// included). Nothing changes on error.
    ///
    /// # Safety
    ///
    /// No durable reachable word may still name the block (else, after a crash, recovery
    /// keeps it live while the heap may have handed it out again), and no pointer to it may
    /// be used after this call.
    pub unsafe fn release(&self, p: PPtr<u8>) -> Result<(), HeapError> {
        let block = self.unmark(p)?;
        self.give_back(block, true);
        Ok(())
    }

    /// Allocates a block for each of `layouts`, in order, into `out` (one entry each), as
    /// [`allocate_unlinked`](Self::allocate_unlinked) does for each, but with one visit to
    /// the calling thread's cache for all of them: what a storage engine that needs several
    /// blocks for one operation (a copy-on-write path and its tuple) pays once instead of
    /// once a block.
    ///
    /// # Errors
    ///
    /// As [`allocate_unlinked`](Self::allocate_unlinked) for the first layout that fails;
    /// the blocks taken for the layouts before it are given back (nothing is allocated), and
    /// `out`'s entries are unspecified.
    ///
    /// # Panics
    ///
    /// If `out` and `layouts` differ in length.
    pub fn allocate_unlinked_many(
        &self,
        layouts: &[Layout],
        out: &mut [PPtr<u8>],
    ) -> Result<(), HeapError> {
        assert_eq!(
            layouts.len(),
            out.len(),
            "allocate_unlinked_many: one destination per layout"
        );
        self.take_many(
            |i| (layouts[i].size(), layouts[i].align()),
            |i| Ok(layouts[i]),
            out,
        )
    }

    /// [`allocate_unlinked_many`](Self::allocate_unlinked_many) for blocks of `sizes` bytes
    /// (every block is cache-line aligned): for a caller with sizes at hand, with no layout
    /// to build per block.
    ///
    /// # Errors
    ///
    /// As [`allocate_unlinked_many`](Self::allocate_unlinked_many);
    /// [`HeapError::TooLarge`] for a size no layout can describe.
    ///
    /// # Panics
    ///
    /// If `out` and `sizes` differ in length.
    pub fn allocate_unlinked_sizes(
        &self,
        sizes: &[usize],
        out: &mut [PPtr<u8>],
    ) -> Result<(), HeapError> {
        assert_eq!(
            sizes.len(),
            out.len(),
            "allocate_unlinked_sizes: one destination per size"
        );
        self.take_many(
            |i| (sizes[i], 1),
            |i| {
                Layout::from_size_align(sizes[i], 1).map_err(|_| HeapError::TooLarge {
                    requested: sizes[i],
                    max: self.geo.nslabs * SLAB_BYTES,
                })
            },
            out,
        )
    }

    /// Takes a block for request `i` of `out.len()`, given as (size, align) by `request` and
    /// as a layout by `layout` (off the fast path), into `out[i]`: the thread's stacks when
    /// every request is a small class with a block to take, else block by block.
    #[inline]
    fn take_many(
        &self,
        request: impl Fn(usize) -> (usize, usize),
        layout: impl Fn(usize) -> Result<Layout, HeapError>,
        out: &mut [PPtr<u8>],
    ) -> Result<(), HeapError> {
        if self.with_cache(|slot| self.take_many_cached(slot, &request, out)) == Some(true) {
            return Ok(());
        }
        self.take_many_slow(&layout, out)
    }

    /// [`take_many`](Self::take_many) off the fast path, out of line (so that the fast path
    /// stays small): a run, a class with no block cached and no slab to carve, or a thread
    /// exiting; block by block (reclaiming the caches of exited threads before out of space).
    #[cold]
    #[inline(never)]
    fn take_many_slow(
        &self,
        layout: &dyn Fn(usize) -> Result<Layout, HeapError>,
        out: &mut [PPtr<u8>],
    ) -> Result<(), HeapError> {
        for i in 0..out.len() {
            match layout(i).and_then(|layout| self.take(layout, false)) {
                Ok(block) => out[i] = PPtr::from_offset(block.offset as u64),
                Err(e) => {
                    for p in &out[..i] {
                        // Taken just now: live, named by nothing.
                        if let Ok(block) = self.unmark(*p) {
                            self.give_back(block, false);
                        }
                    }
                    return Err(e);
                }
            }
        }
        self.count_allocations(out.len() as u64);
        Ok(())
    }

    /// Gives back every block of `ptrs`, as [`release`](Self::release) does each, with one
    /// visit to the calling thread's cache for all of them.
    ///
    /// # Errors
    ///
    /// The first refusal, as [`release`](Self::release) refuses: that entry changes nothing,
    /// and every other entry is still given back (a block listed twice is refused the
    /// second time).
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release), for every entry.
    pub unsafe fn release_many(&self, ptrs: &[PPtr<u8>]) -> Result<(), HeapError> {
        let mut first = Ok(());
        let cached = self.with_cache(|slot| {
            // SAFETY: this thread owns its slot, and nothing else holds its stacks.
            let freed = self.release_cached(unsafe { slot.stacks() }, ptrs, &mut first);
            slot.count_frees(freed);
        });
        if cached.is_none() {
            // SAFETY: the caller's contract.
            first = unsafe { self.release_uncached(ptrs) };
        }
        first
    }

    /// [`release_many`](Self::release_many) then
    /// [`allocate_unlinked`](Self::allocate_unlinked), with one visit to the calling
    /// thread's cache for both when the allocation is a small class with a block cached: for
    /// a caller that gives blocks back where it takes a new one (a storage engine's
    /// transaction that frees what an earlier one unlinked and allocates a new version). The
    /// last block given back of the class asked for is the one taken (the stacks are LIFO).
    ///
    /// # Errors
    ///
    /// The first refusal of a block given back, as [`release_many`](Self::release_many)
    /// (every other block is still given back, and nothing is allocated); then as
    /// [`allocate_unlinked`](Self::allocate_unlinked).
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release), for every entry of `ptrs`.
    pub unsafe fn release_many_then_allocate(
        &self,
        ptrs: &[PPtr<u8>],
        layout: Layout,
    ) -> Result<PPtr<u8>, HeapError> {
        let size = layout.size();
        let small = is_small(size, layout.align());
        let c = class_of(size.min(MAX_SMALL));
        let mut first = Ok(());
        let cached = self.with_cache(|slot| {
            // SAFETY: this thread owns its slot, and nothing else holds its stacks.
            let stacks = unsafe { slot.stacks() };
            let freed = self.release_cached(stacks, ptrs, &mut first);
            slot.count_frees(freed);
            if !small || first.is_err() {
                return None;
            }
            let offset = stacks[c].pop()?;
            slot.count_allocations(1);
            Some(offset)
        });
        match cached {
            Some(Some(offset)) => {
                self.set_live(self.small_slot(c, offset as usize));
                return Ok(PPtr::from_offset(offset));
            }
            Some(None) => first?,
            // SAFETY: the caller's contract (nothing was given back: no cache).
            None => unsafe { self.release_uncached(ptrs) }?,
        }
        self.allocate_unlinked(layout)
    }

    /// [`release_many_then_allocate`](Self::release_many_then_allocate) for a caller that
    /// knows every block of `ptrs` is live: when the last block of `ptrs` is a small block
    /// of the class `layout` asks for, it is the allocation, handed straight back without
    /// being given back and taken again. Its live mark (set, and set again by the
    /// allocation) and the thread's stack are then not touched, nor is the block checked
    /// against the live map: no access to a live-map line the caller has not touched (the
    /// freed block is one of many, so that line is usually out of the cache, and reading
    /// it was most of the call's cost). The other blocks are given back as
    /// [`release_many`](Self::release_many) does (checked). Otherwise, exactly
    /// [`release_many_then_allocate`](Self::release_many_then_allocate).
    ///
    /// # Errors
    ///
    /// As [`release_many_then_allocate`](Self::release_many_then_allocate); a last block
    /// that is not a small block's start (null, a run, outside the heap) is checked, and
    /// refused, there.
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release), for every entry of `ptrs`; besides, every entry is a
    /// live block (taken from this heap and not given back since): the last one is not
    /// checked, and a block already free would be handed out twice.
    pub unsafe fn release_many_then_reuse(
        &self,
        ptrs: &[PPtr<u8>],
        layout: Layout,
    ) -> Result<PPtr<u8>, HeapError> {
        let size = layout.size();
        if let Some((&last, rest)) = ptrs.split_last()
            && is_small(size, layout.align())
            && let Some((c, slot)) = self.small_at(last.offset() as usize)
            && c == class_of(size)
        {
            debug_assert!(
                self.live[slot].load(Ordering::Relaxed) != 0,
                "release_many_then_reuse of a block that is not live"
            );
            let mut first = Ok(());
            let counted = self.with_cache(|slot| {
                // SAFETY: this thread owns its slot, and nothing else holds its stacks.
                let stacks = unsafe { slot.stacks() };
                let freed = self.release_cached(stacks, rest, &mut first);
                if first.is_err() {
                    // Nothing is allocated after a refusal: the last block goes back too.
                    let last_freed = self.release_cached(stacks, &[last], &mut first);
                    slot.count_frees(freed + last_freed);
                    return;
                }
                // The reused block counts as a free and an allocation, as when it goes
                // through the stack.
                slot.count_frees(freed + 1);
                slot.count_allocations(1);
            });
            if counted.is_none() {
                // A thread whose locals are gone: the checked path, block by block.
                // SAFETY: the caller's contract.
                return unsafe { self.release_many_then_allocate(ptrs, layout) };
            }
            first?;
            return Ok(last);
        }
        // SAFETY: the caller's contract.
        unsafe { self.release_many_then_allocate(ptrs, layout) }
    }

    /// Gives back every block of `ptrs` onto `stacks`, the calling thread's (as
    /// [`release`](Self::release) does each, counting nothing); the number given back. The
    /// first refusal goes to `first` if it holds none yet.
    #[inline]
    fn release_cached(
        &self,
        stacks: &mut [Vec<u64>; NCLASSES],
        ptrs: &[PPtr<u8>],
        first: &mut Result<(), HeapError>,
    ) -> u64 {
        if ptrs.len() > 1 {
            // The blocks' live-map bytes are in lines the caller has not touched (the
            // blocks are spread over the heap): ask for all of them first, so that their
            // misses overlap instead of being paid one after another below.
            for &p in ptrs {
                if let Some((_, slot)) = self.small_at(p.offset() as usize) {
                    self.prefetch_live(slot);
                }
            }
        }
        let mut freed = 0;
        for &p in ptrs {
            // `unmark`'s fast path, with the block's class and offset kept in registers.
            let offset = p.offset() as usize;
            if let Some(c) = self.unmark_small(offset) {
                self.push_cached(&mut stacks[c], c, offset);
                freed += 1;
                continue;
            }
            match self.unmark_slow(p) {
                Ok(block) => {
                    self.give_back_cached(stacks, block);
                    freed += 1;
                }
                Err(e) => {
                    if first.is_ok() {
                        *first = Err(e);
                    }
                }
            }
        }
        freed
    }

    /// [`release_many`](Self::release_many) block by block, for a thread with no cache (its
    /// locals are gone: it is exiting).
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release), for every entry.
    #[cold]
    unsafe fn release_uncached(&self, ptrs: &[PPtr<u8>]) -> Result<(), HeapError> {
        let mut first = Ok(());
        for &p in ptrs {
            // SAFETY: the caller's contract, for each entry.
            let released = unsafe { self.release(p) };
            if first.is_ok() {
                first = released;
            }
        }
        first
    }

    /// Takes a block for `layout` in DRAM only: nothing persistent changes until
    /// [`publish`](Self::publish); a crash before it, or dropping the reservation, frees it.
    ///
    /// # Errors
    ///
    /// As [`allocate_into`](Self::allocate_into) for the layout.
    pub fn reserve(&self, layout: Layout) -> Result<Reservation<'_, M>, HeapError> {
        let block = self.take(layout, false)?;
        Ok(Reservation {
            heap: self,
            block,
            armed: true,
        })
    }

    /// Stores each reservation's block into its destination, flushes each destination's
    /// line and fences once: after a crash each destination holds its old value or its
    /// block (each line independently; use one line, or one destination, when the batch
    /// must be all or nothing). Reservations become published (dropping them does nothing).
    ///
    /// # Panics
    ///
    /// Before writing anything, if a destination is not 8 aligned bytes inside the root or a
    /// live block, a reservation comes from another heap, or was already published.
    ///
    /// # Safety
    ///
    /// As for [`allocate_into`](Self::allocate_into), for every destination.
    pub unsafe fn publish(&self, items: &mut [(*mut PPtr<u8>, Reservation<'_, M>)]) {
        let mut offsets = Vec::with_capacity(items.len());
        for (dest, r) in items.iter() {
            assert!(std::ptr::eq(r.heap, self), "reservation of another heap");
            assert!(r.armed, "reservation already published");
            match self.check_dest(*dest) {
                Ok(off) => offsets.push(off),
                Err(e) => panic!("publish: {e}"),
            }
        }
        for ((dest, r), &off) in items.iter_mut().zip(&offsets) {
            // SAFETY: checked above; the caller rules out concurrent non-atomic access.
            unsafe { PPtr::store(*dest, r.pptr()) };
            self.medium().flush(off, 8);
            r.armed = false;
        }
        self.medium().fence();
        self.count_allocations(items.len() as u64);
    }

    // ---- internals -------------------------------------------------------------------

    fn base(&self) -> *mut u8 {
        self.pool.base()
    }

    /// Runs `f` with the calling thread's cache of this heap (`None` when the thread's
    /// locals are gone: it is exiting).
    #[inline]
    fn with_cache<R>(&self, f: impl FnOnce(&CacheSlot) -> R) -> Option<R> {
        let register = || {
            let slot = Arc::new(CacheSlot::new());
            lock(&self.caches).push(Arc::clone(&slot));
            slot
        };
        with_slot(self.id, register, f)
    }

    fn count_allocations(&self, n: u64) {
        if self.with_cache(|slot| slot.count_allocations(n)).is_none() {
            let _global = lock(&self.global);
            self.fallback.count_allocations(n);
        }
    }

    /// Checks that `p` is the start of a live block and clears its live mark: the first half
    /// of a release, which changes nothing on error. The fast path is a small block's start
    /// ([`small_at`](Self::small_at)); null, runs and errors take
    /// [`unmark_slow`](Self::unmark_slow).
    #[inline]
    fn unmark(&self, p: PPtr<u8>) -> Result<Block, HeapError> {
        let offset = p.offset() as usize;
        match self.unmark_small(offset) {
            Some(c) => Ok(Block {
                offset,
                size: SIZE_CLASSES[c],
                class: Some(c),
            }),
            None => self.unmark_slow(p),
        }
    }

    /// [`unmark`](Self::unmark)'s fast path: if a live small block starts at pool offset
    /// `offset`, clears its live mark and returns its class; else (not a small block's
    /// start, or not live) `None`, changing nothing.
    #[inline]
    fn unmark_small(&self, offset: usize) -> Option<usize> {
        let (c, slot) = self.small_at(offset)?;
        self.clear_live(slot).then_some(c)
    }

    /// [`unmark`](Self::unmark) for anything but a live small block's start.
    #[cold]
    fn unmark_slow(&self, p: PPtr<u8>) -> Result<Block, HeapError> {
        if p.is_null() {
            return Err(HeapError::NullDest);
        }
        let not_a_block = || HeapError::NotABlock { offset: p.offset() };
        let offset = usize::try_from(p.offset()).map_err(|_| not_a_block())?;
        let block = match self.block_containing(offset) {
            Some(b) if b.offset == offset => b,
            _ => return Err(not_a_block()),
        };
        if !self.clear_live(self.live_slot(&block)) {
            return Err(not_a_block());
        }
        Ok(block)
    }

    /// The class and live-map slot of the small block that starts exactly at pool offset
    /// `offset`, if one does (live or not): a slab-kind load and a multiplication.
    #[inline]
    fn small_at(&self, offset: usize) -> Option<(usize, usize)> {
        // Below the heap, `rel` wraps to a huge value: no slab.
        let rel = offset.wrapping_sub(self.geo.heap_off);
        let slab = rel / SLAB_BYTES;
        let kind = self.kinds.get(slab)?.load(Ordering::Acquire);
        // Free (0) wraps around, run kinds have high bits: neither is a class.
        let c = (kind as usize).wrapping_sub(1);
        if c >= NCLASSES {
            return None;
        }
        let in_slab = rel % SLAB_BYTES;
        let index = block_index(c, in_slab);
        (index * SIZE_CLASSES[c] == in_slab && index < blocks_per_slab(c))
            .then_some((c, slab * LIVE_PER_SLAB + index))
    }

    /// Takes a small block for each request (size, align) of `out`'s entries from the
    /// thread's stacks (refilling an empty one), marks them live and counts them; `false`,
    /// with nothing taken, if a request is not a small class or a class has no block left.
    #[inline]
    fn take_many_cached(
        &self,
        slot: &CacheSlot,
        request: impl Fn(usize) -> (usize, usize),
        out: &mut [PPtr<u8>],
    ) -> bool {
        // SAFETY: this thread owns its slot, and nothing else holds its stacks.
        let stacks = unsafe { slot.stacks() };
        for i in 0..out.len() {
            let (size, align) = request(i);
            let small = is_small(size, align);
            let c = class_of(size.min(MAX_SMALL));
            let taken = small.then(|| {
                let stack = &mut stacks[c];
                if stack.is_empty() {
                    self.refill(stack, c);
                }
                stack.pop()
            });
            let Some(Some(offset)) = taken else {
                for (j, p) in out[..i].iter().enumerate().rev() {
                    let c = class_of(request(j).0);
                    self.clear_live(self.small_slot(c, p.offset() as usize));
                    stacks[c].push(p.offset());
                }
                return false;
            };
            self.set_live(self.small_slot(c, offset as usize));
            out[i] = PPtr::from_offset(offset);
        }
        slot.count_allocations(out.len() as u64);
        true
    }

    /// The live-map slot of the class-`c` block that starts at pool offset `offset`.
    #[inline]
    fn small_slot(&self, c: usize, offset: usize) -> usize {
        let rel = offset - self.geo.heap_off;
        (rel / SLAB_BYTES) * LIVE_PER_SLAB + block_index(c, rel % SLAB_BYTES)
    }

    /// The live-map slot of `block`: its index in its slab, or the first slot of a run's
    /// head slab.
    fn live_slot(&self, block: &Block) -> usize {
        match block.class {
            Some(c) => self.small_slot(c, block.offset),
            None => (block.offset - self.geo.heap_off) / SLAB_BYTES * LIVE_PER_SLAB,
        }
    }

    fn is_live(&self, block: &Block) -> bool {
        self.live[self.live_slot(block)].load(Ordering::Acquire) != 0
    }

    /// Starts loading live-map slot `slot`'s line into the cache (a hint: no effect on
    /// what the map holds).
    #[inline]
    fn prefetch_live(&self, slot: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            let byte: *const AtomicU8 = &self.live[slot];
            // SAFETY: a prefetch never faults and changes no memory; `byte` is in the map.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    byte.cast::<i8>(),
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    /// Marks live-map slot `slot` live: a plain store by the thread that took its block.
    #[inline]
    fn set_live(&self, slot: usize) {
        self.live[slot].store(1, Ordering::Release);
    }

    /// Clears live-map slot `slot`; whether it was set. A load and a store, not a locked
    /// swap: only the thread freeing the block writes its byte.
    #[inline]
    fn clear_live(&self, slot: usize) -> bool {
        let byte = &self.live[slot];
        let was = byte.load(Ordering::Acquire) != 0;
        if was {
            byte.store(0, Ordering::Release);
        }
        was
    }

    /// The block of an assigned slab or run that contains pool offset `offset`.
    fn block_containing(&self, offset: usize) -> Option<Block> {
        let rel = offset.checked_sub(self.geo.heap_off)?;
        let slab = rel / SLAB_BYTES;
        if slab >= self.geo.nslabs {
            return None;
        }
        let slab_start = self.geo.heap_off + slab * SLAB_BYTES;
        match decode(self.kinds[slab].load(Ordering::Acquire)) {
            Kind::Free => None,
            Kind::Small(c) => {
                let size = SIZE_CLASSES[c];
                let index = block_index(c, rel % SLAB_BYTES);
                (index < blocks_per_slab(c)).then_some(Block {
                    offset: slab_start + index * size,
                    size,
                    class: Some(c),
                })
            }
            Kind::Head(n) => Some(Block {
                offset: slab_start,
                size: n * SLAB_BYTES,
                class: None,
            }),
            Kind::Cont(head) => match decode(self.kinds[head].load(Ordering::Acquire)) {
                Kind::Head(n) => Some(Block {
                    offset: self.geo.heap_off + head * SLAB_BYTES,
                    size: n * SLAB_BYTES,
                    class: None,
                }),
                _ => None,
            },
        }
    }

    /// The pool offset of `dest` if it is 8 aligned bytes in the root or a live block.
    fn check_dest(&self, dest: *mut PPtr<u8>) -> Result<usize, HeapError> {
        let address = dest as usize;
        if !address.is_multiple_of(8) {
            return Err(HeapError::MisalignedDest { address });
        }
        let outside = HeapError::DestOutsidePool { address };
        let Some(off) = address.checked_sub(self.base() as usize) else {
            return Err(outside);
        };
        let g = &self.geo;
        if off >= g.root_off && off + 8 <= g.root_off + g.root_len {
            return Ok(off);
        }
        match self.block_containing(off) {
            Some(b) if off + 8 <= b.offset + b.size && self.is_live(&b) => Ok(off),
            _ => Err(outside),
        }
    }

    /// Takes a free block for `layout` and sets its live mark; counts an allocation when
    /// `count` (in the calling thread's cache).
    fn take(&self, layout: Layout, count: bool) -> Result<Block, HeapError> {
        let size = layout.size();
        if size == 0 {
            return Err(HeapError::ZeroSize);
        }
        if layout.align() > CACHE_LINE {
            return Err(HeapError::UnsupportedAlignment {
                align: layout.align(),
            });
        }
        let block = if size <= MAX_SMALL {
            let c = class_of(size);
            let offset = self.take_small(c, count)?;
            Block {
                offset,
                size: SIZE_CLASSES[c],
                class: Some(c),
            }
        } else {
            let max = self.geo.nslabs * SLAB_BYTES;
            if size > max {
                return Err(HeapError::TooLarge {
                    requested: size,
                    max,
                });
            }
            let n = size.div_ceil(SLAB_BYTES);
            let head = self
                .assign_run(n)
                .ok_or(HeapError::OutOfSpace { requested: size })?;
            if count {
                self.count_allocations(1);
            }
            Block {
                offset: self.geo.heap_off + head * SLAB_BYTES,
                size: n * SLAB_BYTES,
                class: None,
            }
        };
        self.set_live(self.live_slot(&block));
        Ok(block)
    }

    fn take_small(&self, c: usize, count: bool) -> Result<usize, HeapError> {
        for attempt in 0..2 {
            let fast = self.with_cache(|slot| {
                // SAFETY: this thread owns its slot, and nothing else holds its stacks.
                let stack = &mut unsafe { slot.stacks() }[c];
                if stack.is_empty() && !self.refill(stack, c) {
                    return None;
                }
                slot.count_allocations(u64::from(count));
                stack.pop()
            });
            match fast {
                Some(Some(offset)) => return Ok(offset as usize),
                Some(None) => {}
                None => {
                    if let Some(offset) = self.take_global(c, count) {
                        return Ok(offset);
                    }
                }
            }
            if attempt == 0 {
                // Out of slabs: take what the threads that exited left in their caches.
                self.reclaim_abandoned();
            }
        }
        Err(HeapError::OutOfSpace {
            requested: SIZE_CLASSES[c],
        })
    }

    /// Takes one block of class `c` with no cache (a thread whose locals are gone).
    fn take_global(&self, c: usize, count: bool) -> Option<usize> {
        let mut batch = Vec::new();
        if !self.refill(&mut batch, c) {
            return None;
        }
        let offset = batch.pop()? as usize;
        let mut global = lock(&self.global);
        global.free[c].extend(batch);
        if count {
            self.fallback.count_allocations(1);
        }
        Some(offset)
    }

    /// Moves the blocks cached by threads that exited into the global lists.
    fn reclaim_abandoned(&self) {
        let caches = lock(&self.caches);
        for slot in caches.iter() {
            // SAFETY: the registry mutex is held.
            if let Some(stacks) = unsafe { slot.take_abandoned() } {
                let mut global = lock(&self.global);
                for (list, blocks) in global.free.iter_mut().zip(stacks) {
                    list.extend(blocks);
                }
            }
        }
    }

    /// Moves free blocks of class `c` into `stack` from the global list or a fresh slab;
    /// whether any came.
    fn refill(&self, stack: &mut Vec<u64>, c: usize) -> bool {
        let mut global = lock(&self.global);
        let list = &mut global.free[c];
        if !list.is_empty() {
            let from = list.len().saturating_sub(REFILL_BATCH);
            stack.extend(list.drain(from..));
            return true;
        }
        let Some(slab) = find_free_slab(&mut global) else {
            return false;
        };
        global.slab_free[slab] = false;
        drop(global);
        self.write_tag(slab, c as u8 + 1, None);
        self.medium().fence();
        self.kinds[slab].store(c as u32 + 1, Ordering::Release);
        let start = self.geo.heap_off + slab * SLAB_BYTES;
        let size = SIZE_CLASSES[c];
        // Reversed, so that pops hand out ascending addresses.
        stack.extend(
            (0..blocks_per_slab(c))
                .rev()
                .map(|i| (start + i * size) as u64),
        );
        true
    }

    /// Assigns a run of `n` free slabs (first fit), persisting its tags; its head.
    fn assign_run(&self, n: usize) -> Option<usize> {
        let mut global = lock(&self.global);
        let mut head = None;
        let mut count = 0;
        for (i, &free) in global.slab_free.iter().enumerate() {
            count = if free { count + 1 } else { 0 };
            if count == n {
                head = Some(i + 1 - n);
                break;
            }
        }
        let head = head?;
        global.slab_free[head..head + n].fill(false);
        drop(global);
        for slab in head + 1..head + n {
            self.write_tag(slab, TAG_RUN_CONT, None);
        }
        self.write_tag(head, TAG_RUN_HEAD, Some(n as u32));
        self.medium().fence();
        for slab in head + 1..head + n {
            self.kinds[slab].store(KIND_CONT | head as u32, Ordering::Release);
        }
        self.kinds[head].store(KIND_HEAD | n as u32, Ordering::Release);
        Some(head)
    }

    /// Writes slab `slab`'s tag (and a run head's length, before the tag) and flushes its
    /// tag line; the caller fences.
    fn write_tag(&self, slab: usize, tag: u8, run_len: Option<u32>) {
        let off = self.geo.meta_off + slab * META_PER_SLAB;
        // SAFETY: the tag line lies in the metadata area (`nslabs` is bounded by it), which
        // is inside the mapping; only the thread that took the slab from the pool (under the
        // global mutex) writes it.
        unsafe {
            let line = self.base().add(off);
            if let Some(len) = run_len {
                AtomicU32::from_ptr(line.add(4).cast()).store(len.to_le(), Ordering::Relaxed);
            }
            std::sync::atomic::AtomicU8::from_ptr(line).store(tag, Ordering::Release);
        }
        self.medium().flush(off, 8);
    }

    /// Gives a block whose live mark is already clear back to the thread's cache or the slab
    /// pool; counts a free when `count`.
    fn give_back(&self, block: Block, count: bool) {
        let cached = self.with_cache(|slot| {
            // SAFETY: this thread owns its slot, and nothing else holds its stacks.
            self.give_back_cached(unsafe { slot.stacks() }, block);
            slot.count_frees(u64::from(count));
        });
        if cached.is_some() {
            return;
        }
        // The thread's locals are gone (it is exiting): straight to the global lists.
        match block.class {
            Some(c) => lock(&self.global).free[c].push(block.offset as u64),
            None => self.free_run(block),
        }
        if count {
            let _global = lock(&self.global);
            self.fallback.count_frees(1);
        }
    }

    /// [`give_back`](Self::give_back) with the calling thread's stacks at hand, counting
    /// nothing: a small block goes onto its class's stack (the older half of a stack over
    /// [`CACHE_LIMIT`] to the global list), a run to the slab pool.
    #[inline]
    fn give_back_cached(&self, stacks: &mut [Vec<u64>; NCLASSES], block: Block) {
        match block.class {
            Some(c) => self.push_cached(&mut stacks[c], c, block.offset),
            None => self.free_run(block),
        }
    }

    /// Pushes the free class-`c` block at `offset` onto `stack`, the thread's stack of class
    /// `c`, handing the older half of a stack over [`CACHE_LIMIT`] to the global list.
    #[inline]
    fn push_cached(&self, stack: &mut Vec<u64>, c: usize, offset: usize) {
        stack.push(offset as u64);
        if stack.len() > CACHE_LIMIT {
            self.spill(stack, c);
        }
    }

    /// Moves the older half (the bottom) of a thread's stack of class `c` to the global list.
    #[cold]
    fn spill(&self, stack: &mut Vec<u64>, c: usize) {
        // Straight from the stack into the global list: no temporary vector to allocate,
        // fill and free on a path that storage engines time as memory management.
        let half = stack.len() / 2;
        lock(&self.global).free[c].extend(stack.drain(..half));
    }

    /// Returns the slabs of a run whose live mark is already clear to the slab pool.
    fn free_run(&self, block: Block) {
        let head = (block.offset - self.geo.heap_off) / SLAB_BYTES;
        let n = block.size / SLAB_BYTES;
        // Tags stay as they are (stale tags are read safely at recovery).
        for slab in head..head + n {
            self.kinds[slab].store(0, Ordering::Release);
        }
        let mut global = lock(&self.global);
        global.slab_free[head..head + n].fill(true);
        global.hint = global.hint.min(head);
    }
}

fn find_free_slab(global: &mut Global) -> Option<usize> {
    let n = global.slab_free.len();
    let start = global.hint.min(n);
    let found = (start..n).chain(0..start).find(|&i| global.slab_free[i])?;
    global.hint = found + 1;
    Some(found)
}

/// A block taken by [`PersistentHeap::reserve`], not yet published: dropping it gives the
/// block back.
pub struct Reservation<'a, M: Medium> {
    heap: &'a PersistentHeap<M>,
    block: Block,
    armed: bool,
}

impl<M: Medium> std::fmt::Debug for Reservation<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("block", &self.block)
            .field("published", &!self.armed)
            .finish()
    }
}

impl<M: Medium> Reservation<'_, M> {
    /// The block, as a persistent pointer.
    pub fn pptr(&self) -> PPtr<u8> {
        PPtr::from_offset(self.block.offset as u64)
    }

    /// The block's first byte in this mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        // SAFETY: the block lies inside the heap, inside the mapping.
        unsafe { self.heap.base().add(self.block.offset) }
    }

    /// Bytes in the block (at least the size asked for).
    pub fn size(&self) -> usize {
        self.block.size
    }

    /// Whether [`PersistentHeap::publish`] has stored it (or [`keep`](Self::keep) kept it).
    pub fn is_published(&self) -> bool {
        !self.armed
    }

    /// Keeps the block allocated without storing it anywhere: linking it, durably, is the
    /// caller's (a storage engine that writes the pointer into its own log or node and
    /// persists it with the fence it needs anyway). Nothing persistent changes and no fence
    /// is taken: the block is live because it is reachable, so a crash before the caller's
    /// link is durable leaves it unreachable, and recovery frees it.
    ///
    /// A kept block that the caller never links stays allocated until the next recovery.
    pub fn keep(mut self) -> PPtr<u8> {
        self.armed = false;
        self.heap.count_allocations(1);
        self.pptr()
    }
}

impl<M: Medium> Drop for Reservation<'_, M> {
    fn drop(&mut self) {
        if self.armed && self.heap.clear_live(self.heap.live_slot(&self.block)) {
            self.heap.give_back(self.block, false);
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
