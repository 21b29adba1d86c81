//! [`WfSpan`]: the allocator instance, its configuration, and the trait implementations.

use core::alloc::Layout;
use core::ptr::{self, NonNull};

use alloclab_core::sync::atomic::{AtomicPtr, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use alloclab_core::{
    AllocError, AllocErrorKind, Allocator, HostAllocator, MallocHeap, Stats, resized_layout,
};

use crate::heap::{Heap, RUN_CLASSES, RUN_SPANS, run_class_of_spans, run_room, run_usable_bytes};
use crate::os;
use crate::remote_free::{Counted, Node};
use crate::size_class::{class_count, class_for, small_class, table_class, table_limit};
use crate::span::{
    HEADER_STRIDE, HEADER_STRIDE_SHIFT, Kind, SpanHeader, huge_header_of, table_bytes,
};
use crate::span_list::{Link, SpanList};
use crate::thread;

mod config;
mod huge;

use config::MIN_REGION_BYTES;
pub use config::{Config, MAX_SPANS_PER_CLASS};
pub use huge::{HUGE_CACHE_BYTES, HUGE_CACHE_SLOTS};

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const READY: u8 = 2;

/// The free of a small block whose span the head of the thread's chain does not own, as a
/// separate function that cannot unwind (`extern "C"`), so that the C `free` reaches it with
/// a jump and its fast path saves no register for it: [`WfSpan::free_remote`], or the local
/// free if the span is the caller's heap of this instance after all (the thread has used
/// another instance since).
///
/// # Safety
///
/// `block` is a live block of `wf` in the small span `span`.
#[inline(never)]
unsafe extern "C" fn free_small_out_of_line(wf: &WfSpan, span: *mut SpanHeader, block: *mut u8) {
    let me = wf.heap_if_any();
    // SAFETY: per the contract; `me` is the caller's heap of `wf` or null, and owns `span`
    // only if the owner compares equal.
    unsafe {
        if !me.is_null() && (*span).owner.load(Ordering::Relaxed) == me {
            (*me).free_local(wf, span, block);
        } else {
            wf.free_remote(span, block, me);
        }
    }
}

/// A discarded span (given up full by a heap at its `spans_per_class`) keeps the blocks
/// freed into it out of use until its last block comes back; with blocks freed at random
/// across many spans (a server overwriting values) that stranded a sixth of the memory of
/// the spans of the busiest class (redis-benchmark under the preload library: 4.4 MiB of
/// 320-byte blocks in 425 discarded spans). A free that leaves at least one in
/// `ADOPT_FREE_SHARE` of a discarded span's blocks free (and at least two) has its heap
/// remember the span, and the heap takes it back ([`Heap::take_adoptable`]) the next time
/// that class needs a span, instead of a fresh one. Taken back when the class needs it, not
/// at the free: a thread that only frees (a list drained) would otherwise hold spans whose
/// blocks all came back, where a discarded span is reclaimed by its last free.
pub const ADOPT_FREE_SHARE: u64 = 8;

/// The free blocks from which a discarded span of `blocks` blocks is taken back.
#[inline]
const fn adopt_at(blocks: u64) -> u64 {
    let share = blocks / ADOPT_FREE_SHARE;
    if share < 2 { 2 } else { share }
}

/// Source of instance identifiers (0 means "not yet assigned").
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// The wfspan allocator. See the [crate documentation](crate).
pub struct WfSpan {
    pub(crate) config: Config,
    max_class: usize,
    /// The largest size [`table_class`] classes among this allocator's classes: 16 KiB, or
    /// the largest class of smaller spans.
    table_limit: usize,
    /// `log2(span_bytes)`, for [`header_of`](Self::header_of).
    span_shift: u32,
    state: AtomicU8,
    id: AtomicU64,
    /// The reserved region: the header table ([`span::table_bytes`](crate::span::table_bytes)
    /// of it), then the spans.
    region_base: AtomicUsize,
    region_end: AtomicUsize,
    /// Where the spans start (after the header table) and how many bytes of them the region
    /// holds: a block is a span's when `block - spans_base < spans_len`. Zero before the
    /// region is reserved, so that no block is.
    spans_base: AtomicUsize,
    spans_len: AtomicUsize,
    /// The next span never handed out (bump allocation).
    region_next: AtomicUsize,
    /// Registry of every heap, newest first.
    pub(crate) heaps: AtomicPtr<Heap>,
    pub(crate) heap_count: AtomicUsize,
    /// Span runs reclaimed by threads that had no heap (exiting threads): lock-free pushes.
    pub(crate) orphans: [SpanList; RUN_CLASSES],
    huge_bytes: AtomicU64,
    huge_peak_bytes: AtomicU64,
    huge_live_bytes: AtomicU64,
    huge_allocations: AtomicU64,
    huge_deallocations: AtomicU64,
    /// Freed huge mappings kept for reuse (see [`HUGE_CACHE_SLOTS`]): each slot holds a
    /// mapping's base with its length in spans in the low bits (0: empty).
    huge_cache: [AtomicUsize; HUGE_CACHE_SLOTS],
    /// Bytes of the mappings in `huge_cache` (at most [`HUGE_CACHE_BYTES`]).
    huge_cached_bytes: AtomicUsize,
    metadata_bytes: AtomicU64,
    heapless_frees: AtomicU64,
    heapless_bytes: AtomicU64,
    /// Bytes of free span runs given back to the OS ([`WfSpan::purge_run`]).
    purged_bytes: AtomicU64,
}

/// Most steps one operation may take (see [`step_bound`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepBound {
    /// Any allocation served from spans or span runs.
    pub alloc: u64,
    /// Any free of a block from a span or span run, local or remote.
    pub free: u64,
}

/// The most steps one operation can take when at most `threads` threads use the allocator
/// (allocating or freeing), for spans of `span_bytes`.
///
/// With `n` threads — so at most `n` heaps, and at most `n` producers stalled mid-push, each
/// parking one chain (threads that only free count too: they can stall a push):
///
/// * alloc ≤ `36 + 5n`. The fast path is 1 step: a block of the active span's free list or,
///   that list empty, the next remote free of the chain kept in its slot (2). The slow path
///   (1, and 1 more where that chain's first node was not linked yet) takes one remote free
///   of the active span
///   (≤ `3 + n`: the backlog, each parked chain, one swap), a partial span (1),
///   one full span (1, then ≤ `3 + n` to take its remote free), and otherwise a new span: a
///   discard (≤ 3), the discarded span remembered for the class taken back (1, then ≤ `3 +
///   n` to take its remote free, and if it had none after all a second discard, ≤ 3; or,
///   reused for another class meanwhile, given up again, ≤ 3), else one acquired: the spare,
///   cache, idle spans (≤ 8) and own public list (≤ 3), helping one heap (≤ `n + 2`), one
///   attempt on each other heap's list (≤ `n`), the orphans, the collect and a fresh span
///   (≤ 3). Remote frees are taken one at a time, so no step depends on how many blocks a
///   span holds.
/// * free ≤ 4: a push (local or remote), a list move or a span release (a cache push or one
///   public-list attempt), and the reclaim of a discarded span.
///
/// Outside the bound: huge blocks (their own OS mapping), a thread's first allocation
/// (registration), and frees by a thread without a heap that reclaim a span or free a span
/// run — those push onto the lock-free orphan list, which may retry.
pub const fn step_bound(span_bytes: usize, threads: u64) -> StepBound {
    let _ = span_bytes;
    StepBound {
        alloc: 36 + 5 * threads,
        free: 4,
    }
}

/// The paper's bound on memory that the non-linearizable lists and helping can strand,
/// `A(N) = (N + (⌈N/P⌉ + N − 1)(N − 1)) · C · S` with `P = N` lists queried, `C` size
/// classes and spans of `S` bytes.
pub const fn stranded_bound_bytes(span_bytes: usize, threads: u64) -> u64 {
    let n = threads;
    let p = threads;
    let classes = class_count(span_bytes) as u64;
    let per_class = if n == 0 {
        0
    } else {
        n + (n.div_ceil(p) + n - 1) * (n - 1)
    };
    per_class * classes * span_bytes as u64
}

impl WfSpan {
    /// An allocator with [`Config::DEFAULT`]. Nothing is reserved until the first
    /// allocation.
    pub const fn new() -> Self {
        Self::with_config(Config::DEFAULT)
    }

    /// An allocator with `config`.
    ///
    /// # Panics
    ///
    /// If `config` is invalid ([`Config::validate`]); in a `static` that is a compile error.
    pub const fn with_config(config: Config) -> Self {
        if let Err(message) = config.validate() {
            panic!("{}", message);
        }
        Self {
            config,
            max_class: class_count(config.span_bytes) - 1,
            table_limit: table_limit(class_count(config.span_bytes) - 1),
            span_shift: config.span_bytes.trailing_zeros(),
            state: AtomicU8::new(UNINIT),
            id: AtomicU64::new(0),
            region_base: AtomicUsize::new(0),
            region_end: AtomicUsize::new(0),
            spans_base: AtomicUsize::new(0),
            spans_len: AtomicUsize::new(0),
            region_next: AtomicUsize::new(0),
            heaps: AtomicPtr::new(ptr::null_mut()),
            heap_count: AtomicUsize::new(0),
            orphans: [const { SpanList::new() }; RUN_CLASSES],
            huge_bytes: AtomicU64::new(0),
            huge_peak_bytes: AtomicU64::new(0),
            huge_live_bytes: AtomicU64::new(0),
            huge_allocations: AtomicU64::new(0),
            huge_deallocations: AtomicU64::new(0),
            huge_cache: [const { AtomicUsize::new(0) }; HUGE_CACHE_SLOTS],
            huge_cached_bytes: AtomicUsize::new(0),
            metadata_bytes: AtomicU64::new(0),
            heapless_frees: AtomicU64::new(0),
            heapless_bytes: AtomicU64::new(0),
            purged_bytes: AtomicU64::new(0),
        }
    }

    /// The configuration.
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// The number of heaps (threads that have allocated, at most as many as were alive at
    /// once).
    pub fn heap_count(&self) -> usize {
        self.heap_count.load(Ordering::Acquire)
    }

    /// [`step_bound`] for this allocator's span size and its current number of heaps (valid
    /// when every thread that frees has also allocated).
    pub fn current_step_bound(&self) -> StepBound {
        step_bound(self.config.span_bytes, self.heap_count() as u64)
    }

    /// Reserves the span region on first use. Lock-free for the winner; others wait for it
    /// (once per process).
    #[cold]
    fn init(&self) -> Result<(), AllocErrorKind> {
        loop {
            match self.state.compare_exchange(
                UNINIT,
                INITIALIZING,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(READY) => return Ok(()),
                Err(_) => core::hint::spin_loop(),
            }
        }
        let reserved = os::reserve_aligned(
            self.config.region_bytes,
            MIN_REGION_BYTES.max(self.config.span_bytes << 5),
            self.config.span_bytes,
        );
        let Some((base, len)) = reserved else {
            self.state.store(UNINIT, Ordering::Release);
            return Err(AllocErrorKind::OutOfMemory);
        };
        let base = base.as_ptr() as usize;
        // The header table first (a header for every span the whole reservation could hold,
        // a few more than follow it), then the spans, still aligned.
        let table = table_bytes(len, self.config.span_bytes);
        self.region_base.store(base, Ordering::Relaxed);
        self.region_end.store(base + len, Ordering::Relaxed);
        self.spans_base.store(base + table, Ordering::Relaxed);
        self.spans_len.store(len - table, Ordering::Relaxed);
        self.region_next.store(base + table, Ordering::Relaxed);
        self.id.store(
            NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
        self.state.store(READY, Ordering::Release);
        Ok(())
    }

    #[inline]
    fn ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == READY
    }

    /// The calling thread's heap, registering the thread if needed.
    #[inline]
    fn heap(&self) -> Result<&Heap, AllocErrorKind> {
        // Before `init` the id is 0, which no heap carries: the lookup misses and the thread
        // registers, which initialises first.
        let heap = thread::lookup(self.id.load(Ordering::Relaxed));
        if !heap.is_null() {
            // SAFETY: heaps are never unmapped.
            return Ok(unsafe { &*heap });
        }
        self.register_thread()
    }

    /// The calling thread's heap if it has one (never registers).
    #[inline]
    fn heap_if_any(&self) -> *mut Heap {
        thread::lookup(self.id.load(Ordering::Relaxed))
    }

    #[cold]
    fn register_thread(&self) -> Result<&Heap, AllocErrorKind> {
        if !self.ready() {
            self.init()?;
        }
        let instance = self.id.load(Ordering::Relaxed);
        let tid = thread::current_tid();
        // Adopt a heap a finished thread left.
        let mut heap = self.heaps.load(Ordering::Acquire);
        while !heap.is_null() {
            // SAFETY: heaps are never unmapped; `owner_tid` is atomic.
            unsafe {
                if (*heap).owner_tid.load(Ordering::Relaxed) == 0
                    && (*heap)
                        .owner_tid
                        .compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    thread::bind(heap);
                    return Ok(&*heap);
                }
                heap = (*heap).registry_next.load(Ordering::Acquire);
            }
        }
        // None free: map a new one and publish it.
        let bytes = core::mem::size_of::<Heap>().next_multiple_of(os::page_bytes());
        let memory = os::map(bytes, false).ok_or(AllocErrorKind::OutOfMemory)?;
        let heap = memory.as_ptr().cast::<Heap>();
        // SAFETY: fresh, page-aligned, exclusively ours; `Heap` needs at most 128-byte
        // alignment (`CachePadded`).
        unsafe {
            Heap::init(heap, instance);
            (*heap).owner_tid.store(tid, Ordering::Relaxed);
            let mut head = self.heaps.load(Ordering::Relaxed);
            loop {
                (*heap).registry_next.store(head, Ordering::Relaxed);
                match self.heaps.compare_exchange_weak(
                    head,
                    heap,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => head = now,
                }
            }
            self.heap_count.fetch_add(1, Ordering::AcqRel);
            self.metadata_bytes
                .fetch_add(bytes as u64, Ordering::Relaxed);
            thread::bind(heap);
            Ok(&*heap)
        }
    }

    /// A fresh span run of class `run` from the region, header initialised; null when the
    /// region is exhausted. One `fetch_add`: wait-free.
    pub(crate) fn fresh_run(&self, run: usize) -> *mut SpanHeader {
        let bytes = self.config.span_bytes * RUN_SPANS[run];
        let at = self.region_next.fetch_add(bytes, Ordering::Relaxed);
        if at + bytes > self.region_end.load(Ordering::Relaxed) {
            return ptr::null_mut();
        }
        let index = ((at - self.spans_base.load(Ordering::Relaxed)) >> self.span_shift) as u32;
        let span = self.span_at(index);
        // SAFETY: the span `index` and the range `at..at + bytes` were just handed to us
        // alone by the bump; the range was never touched, so it reads zero.
        unsafe {
            SpanHeader::init(span, index, at);
            (*span).zero_from = 0;
        }
        span
    }

    /// Gives the pages of a free span run of class `run` back to the OS (its header is in
    /// the table, which lists and caches link through): the run stays where it is and reads
    /// zero. Nothing to do for a run that reads zero already (fresh, or given back before).
    /// A system call: see [`Config::purge_published`]. Returns the bytes given back.
    ///
    /// # Safety
    ///
    /// The caller holds `span`, a free span run of class `run` of this allocator with no
    /// live block, exclusively.
    pub(crate) unsafe fn purge_run(&self, span: *mut SpanHeader, run: usize) -> u64 {
        let len = self.config.span_bytes * RUN_SPANS[run];
        // SAFETY: per the contract the run is ours alone and holds no live block.
        unsafe {
            if (*span).zero_from == 0 {
                return 0;
            }
            os::discard((*span).base, len);
            (*span).zero_from = 0;
        }
        let given = len as u64;
        self.purged_bytes.fetch_add(given, Ordering::Relaxed);
        given
    }

    /// Bytes of free span runs given back to the OS so far ([`Config::purge_published`],
    /// [`WfSpan::trim`]); they fault back in, zeroed, when a run is used again.
    pub fn purged_bytes(&self) -> u64 {
        self.purged_bytes.load(Ordering::Relaxed)
    }

    /// Gives back to the OS what the calling thread's heap keeps for later: the pages of the
    /// free span runs in its private caches (all but each run's first page; the runs stay
    /// cached) and every cached huge mapping (unmapped). Returns the bytes given back.
    /// C's `malloc_trim` from the preload library. Not wait-free: it makes system calls,
    /// and looks at each cached run once.
    pub fn trim(&self) -> u64 {
        let mut given = 0;
        let heap = self.heap_if_any();
        if !heap.is_null() {
            // SAFETY: our own heap (never unmapped), owner-only state touched by its owner.
            given += unsafe { (*heap).purge_cached_runs(self) };
        }
        for slot in &self.huge_cache {
            let word = slot.swap(0, Ordering::Acquire);
            if word == 0 {
                continue;
            }
            let base = word & !(self.config.span_bytes - 1);
            // SAFETY: the mapping is ours alone since the swap; the free that cached it
            // wrote its length in its header, at its start.
            let len = unsafe { huge::cached_mapping_len(base) };
            self.huge_cached_bytes.fetch_sub(len, Ordering::Relaxed);
            self.unmap_huge(base, len);
            given += len as u64;
        }
        given
    }

    /// The header of span `index` of the region: its entry of the header table.
    #[inline]
    pub(crate) fn span_at(&self, index: u32) -> *mut SpanHeader {
        (self.region_base.load(Ordering::Relaxed) + ((index as usize) << HEADER_STRIDE_SHIFT))
            as *mut SpanHeader
    }

    /// The header of the span (or span run) holding `block` if it lies in the region's spans,
    /// else `None` (a huge block). A subtract, a compare, two shifts and an add: the free
    /// fast path's form.
    #[inline(always)]
    fn region_header_of(&self, block: *mut u8) -> Option<*mut SpanHeader> {
        let offset = (block as usize).wrapping_sub(self.spans_base.load(Ordering::Relaxed));
        if offset >= self.spans_len.load(Ordering::Relaxed) {
            return None;
        }
        Some(
            (self.region_base.load(Ordering::Relaxed)
                + ((offset >> self.span_shift) << HEADER_STRIDE_SHIFT))
                as *mut SpanHeader,
        )
    }

    /// The header of any live block of this allocator: its span's entry of the table, or
    /// the header in its huge mapping.
    #[inline]
    pub(crate) fn header_of(&self, block: *mut u8) -> *mut SpanHeader {
        match self.region_header_of(block) {
            Some(span) => span,
            None => huge_header_of(block, self.config.span_bytes),
        }
    }

    /// The public-list link of span `index`.
    #[inline]
    pub(crate) fn link_of(&self, index: u32) -> &Link {
        // SAFETY: span headers inside the region stay mapped while `self` lives; a stale
        // index read by a racing consumer still names a header of the region.
        unsafe { &(*self.span_at(index)).link }
    }

    #[inline]
    fn allocate_block(&self, layout: Layout) -> Result<NonNull<u8>, AllocErrorKind> {
        match self.allocate_fast(layout) {
            Some(block) => Ok(block),
            None => self.allocate_block_slow(layout, false),
        }
    }

    /// The fast path: a small request from a registered thread, served from the free list
    /// of its active span. `None` sends the request down the slow path.
    #[inline(always)]
    fn allocate_fast(&self, layout: Layout) -> Option<NonNull<u8>> {
        let class = small_class(layout.size(), layout.align(), self.max_class)?;
        let heap = thread::lookup(self.id.load(Ordering::Relaxed));
        if heap.is_null() {
            return None;
        }
        // SAFETY: our own heap (never unmapped); `class` is within the class count.
        NonNull::new(unsafe { (*heap).pop_active(class) })
    }

    /// The C ABI's fast path once the size is known to have a table class: the thread's
    /// active span of the class of `size` gives the block; `None` sends the request down
    /// the general path.
    ///
    /// # Safety
    ///
    /// `size` is at most `self.table_limit`.
    #[inline(always)]
    unsafe fn pop_table_class(&self, size: usize) -> Option<NonNull<u8>> {
        // SAFETY: per the contract; `table_limit` is a `table_limit`.
        let class = unsafe { table_class(size) };
        let heap = thread::lookup(self.id.load(Ordering::Relaxed));
        if heap.is_null() {
            return None;
        }
        // SAFETY: our own heap (never unmapped); `class` is at most the class of
        // `table_limit`, within the class count.
        NonNull::new(unsafe { (*heap).pop_active(class) })
    }

    /// Everything but the fast path: the active span's slow path, registration, classes by
    /// bit scan, runs, huge blocks. With `zeroed` the block's `layout.size()` bytes read
    /// zero, and memory known to read zero already (a fresh run or mapping) is not written.
    #[inline(never)]
    fn allocate_block_slow(
        &self,
        layout: Layout,
        zeroed: bool,
    ) -> Result<NonNull<u8>, AllocErrorKind> {
        let size = layout.size().max(1);
        let align = layout.align();
        if let Some(class) = class_for(size, align, self.max_class) {
            let heap = self.heap()?;
            // SAFETY: our own heap; `class` is within the class count.
            let block = unsafe { heap.alloc_small(self, class) };
            let block = NonNull::new(block).ok_or(AllocErrorKind::OutOfMemory)?;
            if zeroed {
                // SAFETY: a live block of at least `size` bytes.
                unsafe { block.as_ptr().write_bytes(0, layout.size()) };
            }
            return Ok(block);
        }
        if let Some(run) = self.run_class_for(size, align) {
            let heap = self.heap()?;
            // SAFETY: our own heap; the object fits the run, at its start.
            let block = unsafe { heap.alloc_run(self, run, align, size, zeroed) };
            return NonNull::new(block).ok_or(AllocErrorKind::OutOfMemory);
        }
        self.allocate_huge(size, align, zeroed)
    }

    /// The run class ([`RUN_SPANS`]) of an object of `size` bytes aligned to `align` that
    /// no size class serves, or `None` if it needs a huge mapping. The object starts its
    /// run, which is aligned to the span size: alignments below that are free.
    fn run_class_for(&self, size: usize, align: usize) -> Option<usize> {
        if align >= self.config.span_bytes {
            return None;
        }
        run_class_of_spans(size.div_ceil(self.config.span_bytes))
    }

    /// Frees a block of this allocator allocated with `layout`. The layout only picks the
    /// size class whose active span is compared with the block's span (by address): a block
    /// of the caller's own active span goes back without reading its span's header. Any
    /// other block takes [`free_block`](Self::free_block).
    ///
    /// # Safety
    ///
    /// `block` is a live block of `self`.
    #[inline]
    unsafe fn free_block_sized(&self, block: NonNull<u8>, layout: Layout) {
        let me = self.heap_if_any();
        if !me.is_null()
            && let Some(class) = small_class(layout.size(), layout.align(), self.max_class)
            // SAFETY: our own heap (never unmapped); `class` is within the class count; the
            // block is live, and goes back only if it lies in our active span of `class`.
            && unsafe { (*me).free_to_active(class, block.as_ptr(), self.config.span_bytes) }
        {
            return;
        }
        // SAFETY: per the contract.
        unsafe { self.free_block_of(block.as_ptr(), me) }
    }

    /// The fast path of a free without a size: a block of a small span, pushed on the
    /// caller's active span or an inactive partial one it owns (when no span moves between
    /// lists), or on the span's remote list when another heap owns it. Returns whether the
    /// block was freed.
    ///
    /// # Safety
    ///
    /// `block` is a live block of `self`; if this returns `true` it is dead.
    #[inline(always)]
    unsafe fn free_fast(&self, block: NonNull<u8>) -> bool {
        // The head of the thread's chain, not its heap of this instance: the span of a block
        // of this instance is owned by a heap of this instance or by none, so an owner equal
        // to the head is the caller's heap of this instance, found without comparing
        // instances (a thread bound to other instances since looks the long way, below).
        // Null for a thread without a heap: no span's owner is null (`NO_OWNER`), so the
        // compare below sends it on with no test of its own.
        let me = thread::head();
        let Some(span) = self.region_header_of(block.as_ptr()) else {
            return false;
        };
        // SAFETY: `block` is live, so its header is initialised; a small span's owner is
        // compared, not dereferenced, and equals our heap only if we own the span.
        unsafe {
            // Only small spans have an owner (span runs and huge mappings keep `NO_OWNER`),
            // so our own heap there means a small span of ours, kind unread.
            if (*span).owner.load(Ordering::Relaxed) == me {
                debug_assert!(!me.is_null());
                debug_assert!((*span).kind == Kind::Small);
                debug_assert_eq!(me, self.heap_if_any());
                return (*me).push_active(span, block.as_ptr());
            }
            if (*span).kind != Kind::Small {
                return false;
            }
            // Another heap's block (or a discarded span's): the remote push, wait-free, in
            // a function of its own so that the local frees keep a frameless fast path.
            free_small_out_of_line(self, span, block.as_ptr());
            true
        }
    }

    /// Frees any block of this allocator.
    ///
    /// # Safety
    ///
    /// `block` is a live block of `self`.
    #[inline]
    unsafe fn free_block(&self, block: NonNull<u8>) {
        // SAFETY: per the contract.
        unsafe { self.free_block_of(block.as_ptr(), self.heap_if_any()) }
    }

    /// Frees any block of this allocator; `me` is the caller's heap (or null).
    ///
    /// # Safety
    ///
    /// `block` is a live block of `self`; `me` is `self.heap_if_any()`.
    #[inline]
    unsafe fn free_block_of(&self, block: *mut u8, me: *mut Heap) {
        let span = self.header_of(block);
        // SAFETY: `block` is live, so its header is initialised; a small span's owner is
        // compared, not dereferenced, and equals our heap only if we own the span.
        unsafe {
            if (*span).kind == Kind::Small
                && !me.is_null()
                && (*span).owner.load(Ordering::Relaxed) == me
            {
                (*me).free_local(self, span, block);
                return;
            }
            self.free_block_slow(span, block, me);
        }
    }

    /// Every free but the owner's free of a small block: remote frees, runs, huge blocks.
    ///
    /// # Safety
    ///
    /// `block` is a live block of `self` whose header is `span`; `me` is the caller's heap
    /// (or null), and if `span` is small it is not `me`'s.
    #[inline(never)]
    unsafe fn free_block_slow(&self, span: *mut SpanHeader, block: *mut u8, me: *mut Heap) {
        // SAFETY: (for the whole block) `block` is live, so its header is initialised and stays so.
        unsafe {
            match (*span).kind {
                Kind::Small => self.free_remote(span, block, me),
                Kind::Run => {
                    if me.is_null() {
                        let run = (*span).run_class as usize;
                        let bytes = run_room(span, self.config.span_bytes);
                        (*span).kind = Kind::Small;
                        (*span).zero_from = crate::span::DIRTY;
                        self.orphans[run].push((*span).index, &(*span).link);
                        self.heapless_frees.fetch_add(1, Ordering::Relaxed);
                        self.heapless_bytes
                            .fetch_add(bytes as u64, Ordering::Relaxed);
                    } else {
                        (*me).free_run(self, span);
                    }
                }
                Kind::Huge => {
                    let (base, len) = (*span).mapping;
                    self.huge_deallocations.fetch_add(1, Ordering::Relaxed);
                    self.huge_live_bytes
                        .fetch_sub((len - (*span).object_offset) as u64, Ordering::Relaxed);
                    // A mapping whose header sits at its base (any alignment below a span)
                    // can serve the next huge block; others go back to the OS.
                    let reusable = (*span).object_offset < self.config.span_bytes;
                    if !(reusable && self.cache_mapping(base, len)) {
                        self.unmap_huge(base, len);
                    }
                }
            }
        }
    }

    /// A free by a thread that does not own the span: push, count, and reclaim the span if
    /// it was discarded and this was its last block; if it was discarded and this free left
    /// a share of [`ADOPT_FREE_SHARE`] of its blocks free, the caller's heap remembers it as
    /// the span to take back when its class next needs one.
    ///
    /// # Safety
    ///
    /// `block` is a live block of small span `span`; `me` is the caller's heap or null.
    #[inline]
    unsafe fn free_remote(&self, span: *mut SpanHeader, block: *mut u8, me: *mut Heap) {
        // SAFETY: (for the whole block) per the contract; a reclaimed span is held exclusively.
        unsafe {
            // Read while the block is live: the span cannot be reclaimed and reused before.
            let bytes = u64::from((*span).block_bytes);
            let class = usize::from((*span).class);
            let blocks = u64::from((*span).block_count);
            (*span).remote_list().push(block.cast::<Node>());
            let mut steps = 1;
            match (*span).reclaim().remote_free() {
                Counted::Last => steps += self.reclaim_discarded(span, me),
                Counted::Discarded { out }
                    if !me.is_null() && blocks - out.min(blocks) >= adopt_at(blocks) =>
                {
                    (*me).note_adoptable(class, span);
                }
                _ => {}
            }
            if me.is_null() {
                self.heapless_frees.fetch_add(1, Ordering::Relaxed);
                self.heapless_bytes.fetch_add(bytes, Ordering::Relaxed);
            } else {
                (*me).count_remote_free(class, steps);
            }
        }
    }

    /// Takes back a discarded span whose last remote free the caller just pushed; returns
    /// the steps beyond the push.
    ///
    /// # Safety
    ///
    /// `span` is a small span whose `remote_free` the caller's free just reported `Last`, so
    /// the caller holds it exclusively; `me` is the caller's heap or null.
    #[cold]
    #[inline(never)]
    unsafe fn reclaim_discarded(&self, span: *mut SpanHeader, me: *mut Heap) -> u64 {
        // SAFETY: per the contract.
        unsafe {
            SpanHeader::reset(span);
            if me.is_null() {
                self.orphans[0].push((*span).index, &(*span).link);
                0
            } else {
                (*me).give_run(self, span, 0)
            }
        }
    }

    /// Records that the live block at `ptr`, which [`fits_in_place`](Self::fits_in_place)
    /// accepted for `size` bytes, now holds them: a span run's usable bytes follow its
    /// object's size (see [`RUN_USABLE_STEP`](crate::heap::RUN_USABLE_STEP)); a block of a
    /// size class or a huge mapping keeps its figure.
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of `self`, which the caller may resize.
    unsafe fn resized_in_place(&self, ptr: NonNull<u8>, size: usize) {
        let span = self.header_of(ptr.as_ptr());
        // SAFETY: the block is live, so its header is initialised; a run's object is the
        // only block of its run, and the caller's to resize.
        unsafe {
            if (*span).kind == Kind::Run {
                (*span).block_bytes =
                    run_usable_bytes(size, run_room(span, self.config.span_bytes));
            }
        }
    }

    /// The usable bytes of a live block.
    ///
    /// # Safety
    ///
    /// `block` is a live block of `self`.
    #[inline]
    unsafe fn block_usable_size(&self, block: NonNull<u8>) -> usize {
        let span = self.header_of(block.as_ptr());
        // SAFETY: the block is live, so its header is initialised.
        unsafe {
            match (*span).kind {
                Kind::Small => (*span).block_bytes as usize,
                Kind::Run => (*span).block_bytes as usize,
                Kind::Huge => (*span).mapping.1 - (*span).object_offset,
            }
        }
    }

    /// Whether a block of `usable` bytes at `block` can serve `new_layout` in place: same
    /// size class (or run class), or a huge block at least half used.
    ///
    /// # Safety
    ///
    /// `block` is a live block of `self`.
    unsafe fn fits_in_place(&self, block: NonNull<u8>, new_layout: Layout) -> bool {
        let span = self.header_of(block.as_ptr());
        let size = new_layout.size();
        // SAFETY: the block is live, so its header is initialised.
        unsafe {
            match (*span).kind {
                Kind::Small => {
                    class_for(size, new_layout.align(), self.max_class)
                        == Some((*span).class as usize)
                }
                Kind::Run => {
                    size <= run_room(span, self.config.span_bytes)
                        && class_for(size, new_layout.align(), self.max_class).is_none()
                        && self.run_class_for(size, new_layout.align())
                            == Some(usize::from((*span).run_class))
                }
                Kind::Huge => {
                    let usable = self.block_usable_size(block);
                    size <= usable && size > usable / 2
                }
            }
        }
    }

    /// Unmaps every span and cached huge mapping, for an instance that is not a `static`.
    fn release_region(&mut self) {
        let span_bytes = self.config.span_bytes;
        for i in 0..HUGE_CACHE_SLOTS {
            let word = core::mem::take(self.huge_cache[i].get_mut());
            if word != 0 {
                let base = word & !(span_bytes - 1);
                // SAFETY: a cached mapping is unused; its header, at its start, holds its
                // length.
                let len = unsafe { huge::cached_mapping_len(base) };
                self.unmap_huge(base, len);
            }
        }
        let base = *self.region_base.get_mut();
        let end = *self.region_end.get_mut();
        if let Some(base) = NonNull::new(base as *mut u8) {
            // SAFETY: the region was mapped by `init`; `&mut self` means no thread can use
            // it any more (blocks still live are the caller's bug, as for any allocator).
            unsafe { os::unmap(base, end - base.as_ptr() as usize) };
        }
    }
}

impl Default for WfSpan {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for WfSpan {
    fn drop(&mut self) {
        self.release_region();
    }
}

impl core::fmt::Debug for WfSpan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WfSpan")
            .field("config", &self.config)
            .field("heaps", &self.heap_count())
            .finish()
    }
}

impl Allocator for WfSpan {
    type Handle = NonNull<u8>;

    /// Wait-free (see [`step_bound`]) except for huge blocks and a thread's first call.
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.allocate_block(layout)
            .map_err(|kind| AllocError::new(layout, kind))
    }

    #[inline]
    unsafe fn deallocate(&self, handle: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller guarantees `handle` is a live block of ours.
        unsafe { self.free_block_sized(handle, layout) }
    }

    fn name(&self) -> &str {
        "wfspan"
    }

    /// Live bytes count whole blocks (rounded up to the size class); footprint is the
    /// spans handed out so far and their headers, plus huge mappings, plus heap records.
    /// Step maxima are over every heap.
    fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        let (mut allocs, mut frees, mut net_bytes) = (0, 0, 0u64);
        let (mut alloc_steps, mut free_steps) = (0, 0);
        let mut heap = self.heaps.load(Ordering::Acquire);
        while !heap.is_null() {
            // SAFETY: heaps are never unmapped; the counters are atomics.
            unsafe {
                let c = &(*heap).counters;
                let (small_allocs, small_frees) = (*heap).small_counts();
                allocs += c.allocations.load(Ordering::Relaxed) + small_allocs;
                frees += c.deallocations.load(Ordering::Relaxed) + small_frees;
                net_bytes = net_bytes
                    .wrapping_add(c.net_bytes.load(Ordering::Relaxed))
                    .wrapping_add((*heap).small_net_bytes(self.max_class + 1));
                alloc_steps = c.max_alloc_steps.load(Ordering::Relaxed).max(alloc_steps);
                free_steps = c.max_free_steps.load(Ordering::Relaxed).max(free_steps);
                heap = (*heap).registry_next.load(Ordering::Acquire);
            }
        }
        frees += self.heapless_frees.load(Ordering::Relaxed);
        allocs += self.huge_allocations.load(Ordering::Relaxed);
        frees += self.huge_deallocations.load(Ordering::Relaxed);
        let live = net_bytes
            .wrapping_sub(self.heapless_bytes.load(Ordering::Relaxed))
            .wrapping_add(self.huge_live_bytes.load(Ordering::Relaxed));
        // The spans handed out so far, and their entries of the header table.
        let spans = self
            .region_next
            .load(Ordering::Relaxed)
            .min(self.region_end.load(Ordering::Relaxed))
            .saturating_sub(self.spans_base.load(Ordering::Relaxed));
        let region = (spans + (spans >> self.span_shift) * HEADER_STRIDE) as u64;
        let meta = self.metadata_bytes.load(Ordering::Relaxed);
        stats.allocations = Some(allocs);
        stats.deallocations = Some(frees);
        // A snapshot taken while other threads run may catch a free counted before its
        // allocation: clamp the wrapped difference.
        stats.live_bytes = Some(if live > u64::MAX / 2 { 0 } else { live });
        stats.footprint_bytes = Some(region + meta + self.huge_bytes.load(Ordering::Relaxed));
        stats.peak_footprint_bytes =
            Some(region + meta + self.huge_peak_bytes.load(Ordering::Relaxed));
        stats.max_alloc_steps = Some(alloc_steps);
        stats.max_free_steps = Some(free_steps);
        stats
    }
}

impl HostAllocator for WfSpan {
    /// What reads zero already — a fresh huge mapping, the part of a span run past its
    /// header that is fresh from the region or was given back to the OS — is not written;
    /// the rest of the block is zeroed.
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        match self.allocate_fast(layout) {
            Some(block) => {
                // SAFETY: a live block of at least `layout.size()` bytes.
                unsafe { block.as_ptr().write_bytes(0, layout.size()) };
                Ok(block)
            }
            None => self
                .allocate_block_slow(layout, true)
                .map_err(|kind| AllocError::new(layout, kind)),
        }
    }

    /// In place when the new size falls in the block's own size class (or run class); else
    /// allocate, copy, free.
    unsafe fn reallocate(
        &self,
        ptr: NonNull<u8>,
        old_layout: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        let new_layout = resized_layout(old_layout, new_size)?;
        // SAFETY: the caller guarantees `ptr` is a live block of ours.
        if unsafe { self.fits_in_place(ptr, new_layout) } {
            // Counted as a free and an allocation, as `Stats` defines a reallocation; the
            // block's bytes do not change.
            let heap = self
                .heap()
                .map_err(|kind| AllocError::new(new_layout, kind))?;
            heap.count_realloc_in_place();
            // SAFETY: as above; the block is the caller's to resize.
            unsafe { self.resized_in_place(ptr, new_size) };
            return Ok(ptr);
        }
        // SAFETY: forwarded from the caller.
        unsafe { alloclab_core::move_block(self, ptr, old_layout, new_layout) }
    }
}

// SAFETY: `usable_size` reports the block's class size, its run's object size rounded up to a
// page within the run's room, or its mapping's remainder, all set aside for the block;
// `grow_in_place` grows a run's object only within its run's room; `deallocate_unsized` is
// `deallocate`, which never reads the layout; and the only system calls a free makes
// (`os::unmap`, `os::discard`) restore `errno`.
unsafe impl MallocHeap for WfSpan {
    const FREE_KEEPS_ERRNO: bool = true;

    /// A size up to the largest class the table covers (16 KiB with the default spans) is
    /// one table load; the thread's active span of that class gives the block.
    #[inline(always)]
    fn try_malloc_fast(&self, size: usize) -> Option<NonNull<u8>> {
        if size > self.table_limit {
            return None;
        }
        // SAFETY: `size` is at most `table_limit`.
        unsafe { self.pop_table_class(size) }
    }

    /// The class of the size rounded up to a multiple of the alignment (one table load, as
    /// for `malloc`): a block's address is a multiple of the largest power of two dividing
    /// its class size (`size_class::class_align`), and the
    /// smallest class holding a multiple of `align` is a multiple of `align` itself
    /// (`size_class::aligned_table_class_is_class_for` checks every size and alignment).
    /// That is the class [`class_for`] finds by stepping up from the size.
    #[inline(always)]
    fn try_malloc_aligned_fast(&self, size: usize, align: usize) -> Option<NonNull<u8>> {
        // `align` is a power of two; `size` may be anything, so round without overflow.
        if size > self.table_limit || align > self.table_limit {
            return None;
        }
        // A mask, not `next_multiple_of` (a division): both are at most `table_limit`.
        let rounded = (size.max(align) + align - 1) & !(align - 1);
        if rounded > self.table_limit {
            return None;
        }
        // SAFETY: `rounded` is at most `table_limit`.
        unsafe { self.pop_table_class(rounded) }
    }

    #[inline(always)]
    unsafe fn try_deallocate_fast(&self, ptr: NonNull<u8>) -> bool {
        // SAFETY: per the trait contract `ptr` is live.
        unsafe { self.free_fast(ptr) }
    }

    #[inline]
    unsafe fn usable_size(&self, ptr: NonNull<u8>) -> usize {
        // SAFETY: per the trait contract `ptr` is live.
        unsafe { self.block_usable_size(ptr) }
    }

    /// A span run's object grows into the rest of its run (what `usable_size` reports
    /// follows its size, see [`RUN_USABLE_STEP`](crate::heap::RUN_USABLE_STEP)); a block of
    /// a size class or a huge mapping does not grow.
    unsafe fn grow_in_place(&self, ptr: NonNull<u8>, size: usize) -> bool {
        let span = self.header_of(ptr.as_ptr());
        // SAFETY: per the trait contract `ptr` is live (its header initialised) and the
        // caller's to resize.
        unsafe {
            if (*span).kind != Kind::Run
                || !Layout::from_size_align(size, 16)
                    .is_ok_and(|layout| self.fits_in_place(ptr, layout))
            {
                return false;
            }
            self.resized_in_place(ptr, size);
        }
        true
    }

    /// The size picks the size class whose active span is compared with the block's span
    /// by address, as a sized free does; a wrong size only misses that shortcut.
    #[inline]
    unsafe fn deallocate_with_size(&self, ptr: NonNull<u8>, size: usize) {
        match Layout::from_size_align(size.max(1), 16) {
            // SAFETY: per the trait contract `ptr` is live; `free_block_sized` uses the
            // layout only to compare addresses (see its documentation).
            Ok(layout) => unsafe { self.free_block_sized(ptr, layout) },
            // SAFETY: as above.
            Err(_) => unsafe { self.free_block(ptr) },
        }
    }

    #[inline]
    unsafe fn deallocate_unsized(&self, ptr: NonNull<u8>) {
        // SAFETY: per the trait contract `ptr` is live.
        unsafe { self.free_block(ptr) }
    }

    /// [`WfSpan::trim`]: the calling thread's cached span runs and the cached huge mappings.
    fn trim(&self) -> bool {
        WfSpan::trim(self) > 0
    }
}

alloclab_core::impl_global_alloc!(WfSpan);
