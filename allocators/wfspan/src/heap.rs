//! Per-thread heaps: the allocation and free paths.
//!
//! Each thread that allocates owns one heap (see `thread`); a heap outlives its thread and
//! is adopted by the next thread that needs one. Per size class a heap keeps:
//!
//! ```text
//!   active ──▶ the span blocks are taken from
//!   partial ─▶ spans with blocks on their local free list        (owner only)
//!   full ────▶ spans without local free blocks; remote frees may  (owner only)
//!              be waiting on their remote lists
//! ```
//!
//! at most `K` spans in all (`Config::spans_per_class`). Empty spans and free span runs go
//! to a small private cache, and beyond it to the heap's **public** list, from which any
//! thread may take them with one attempt. A heap's help record lets a thread whose search
//! failed ask the others for a span.
//!
//! **Fast paths.** Allocation: pop the free list in the class's [`ClassSlot`] (the active
//! span's local free list, kept in the heap while the span is active), touching one heap
//! cache line and the block. Free by the owner: push on that list if the block is in the
//! active span (found by address when the caller gives the layout), else on the span's
//! local free list. Free by another thread: push on the span's remote list (one swap, one
//! store) and count it.
//!
//! **Slow path (span acquisition)**, in this order, each step bounded: hand out the next
//! remote free of the chain the active span's last swap took (kept in the [`ClassSlot`]
//! while the span is active, so this reads the slot and the block, not the span's header);
//! take one remote free of the active span (the owner takes remote frees one at a time,
//! never walking the whole list), or carve its next block; take a partial span; look at
//! **one** full span for remote frees (round robin); the spare span a helper left; the
//! private cache; the own public list (one attempt); help **one** other heap (H = 1);
//! publish a help request, then try every other heap's public list once (P = N) and the
//! orphan list; collect the request; finally carve a fresh span from the region (one
//! `fetch_add`). When the class already holds `K` spans, the oldest full span is
//! **discarded** first: the owner forgets it and its last remote freer reclaims it. The
//! partial and full spans of a class are entries of a table in the heap ([`ClassState`]):
//! moving a span between them touches no other span.
//!
//! Every operation counts its steps (list nodes visited, CAS attempts, spans looked at);
//! [`step_bound`](crate::step_bound) states the bound.

use core::cell::UnsafeCell;
use core::ptr;

use alloclab_core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use alloclab_core::sync::bump_single_writer;
use crossbeam_utils::CachePadded;

use crate::MAX_SPANS_PER_CLASS;
use crate::WfSpan;
use crate::help::{Collected, HelpRecord};
use crate::remote_free::{Node, take_linked};
use crate::size_class::{MAX_CLASSES, class_bytes};
use crate::span::{DIRTY, Kind, ListId, NO_OWNER, SpanHeader, prefetch};
use crate::span_list::SpanList;

/// How many spans' worth of runs of one class a heap publishes, without needing any run its
/// private cache could not give, before what it publishes gives its pages back
/// (`Config::purge_published`): 16 spans, 1 MiB with the default span size. A heap that
/// frees a few spans and takes them back (a program's batches) publishes and retakes them
/// resident; one that keeps freeing is shrinking, and past this its memory goes back.
/// (Giving back every published run made a loop of batches of 1,600 blocks fault three of
/// its seven spans back in on every batch: glibc-simple took 1.19x as long.)
pub const PURGE_AFTER_SPANS: u32 = 16;

/// Empty active spans remembered as candidates for reuse by other classes.
const IDLE_HINTS: usize = 8;

/// Run classes: runs of 1 to 32 spans, [`RUN_SPANS`]. Class 0 (one span) also holds empty
/// spans waiting to be formatted for any size class.
pub const RUN_CLASSES: usize = 16;

/// The spans of a run of each class: every count to 8, then four classes per doubling (as
/// jemalloc's large classes), so that a run is at most a quarter larger than the spans its
/// object needs. (Powers of two only made a request of exactly 2^r spans' bytes, which
/// does not fit beside the run's header, take twice its size: redis's dictionary tables.)
pub const RUN_SPANS: [usize; RUN_CLASSES] =
    [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32];

/// What `malloc_usable_size` reports of a span run's object: its size rounded up to this
/// (a page), at most the run's room past the object's start. Programs that grow into the
/// room a block reports (redis's query and reply buffers) would otherwise write, and keep
/// resident, up to a whole span past a request of 16 KiB and a little; a page is no more
/// than jemalloc's and mimalloc's classes leave in that range (steps of 4 KiB from 16 to
/// 32 KiB). A resize within the run's room stays in place and moves the figure.
pub const RUN_USABLE_STEP: usize = 4096;

/// The usable bytes of a span run's object of `size` bytes with `room` bytes past its start
/// (see [`RUN_USABLE_STEP`]).
#[inline]
pub fn run_usable_bytes(size: usize, room: usize) -> u32 {
    // A run is at most 32 spans of at most 2 MiB: the room fits 32 bits.
    size.next_multiple_of(RUN_USABLE_STEP).min(room) as u32
}

/// The room of span run `span`, with spans of `span_bytes`: the whole run (its object starts
/// it; the header is in the region's table). What the statistics count as live, and how
/// far the object may grow in place.
///
/// # Safety
///
/// `span` is the header of a span run whose class is set.
#[inline]
pub unsafe fn run_room(span: *const SpanHeader, span_bytes: usize) -> usize {
    // SAFETY: forwarded from the caller: the header is initialised.
    unsafe { span_bytes * RUN_SPANS[usize::from((*span).run_class)] }
}

/// The smallest run class of at least `spans` spans (1 to 32), by a table.
#[inline]
pub fn run_class_of_spans(spans: usize) -> Option<usize> {
    const TABLE: [u8; 33] = {
        let mut table = [0u8; 33];
        let mut spans = 1;
        let mut class = 0;
        while spans <= 32 {
            while RUN_SPANS[class] < spans {
                class += 1;
            }
            table[spans] = class as u8;
            spans += 1;
        }
        table
    };
    TABLE
        .get(spans)
        .filter(|_| spans > 0)
        .map(|&c| usize::from(c))
}

/// A heap's spans of one size class, but the active one (see [`ClassSlot`]), owner only.
///
/// The spans sit in a table of [`MAX_SPANS_PER_CLASS`] entries in the heap, and two bit
/// masks say which entries are *partial* (free blocks on their local free list) and which
/// are *full* (free blocks, if any, on their remote list); a span records its entry. So
/// every move (full to partial on a local free, partial to active, active to full, out when
/// its blocks are all back) reads and writes only this state and the moved span's own
/// header, never another span's: with lists linked through span headers each move also
/// wrote one or two neighbours' headers, cold lines in spans of their own.
///
/// Both lists are first in, first out: a span goes into the first free entry after the
/// last one filled (going round the table), so the first entry in use after that point
/// is the one that has waited longest. That order matters: the full span looked at for
/// remote frees is the one exhausted longest ago, the partial span taken is the one that
/// had the most time to collect free blocks. A full span that gets a local free becomes
/// partial in place, keeping its entry and so its age. (Taking the lowest entry instead
/// made the heap take fresh spans four times as often when every free is remote.)
struct ClassState {
    /// Entries holding partial spans.
    partial: u64,
    /// Entries holding full spans.
    full: u64,
    /// The entry after the last one filled: where the next span goes in (the first free
    /// entry from here) and where the oldest span is found (the first entry in use from
    /// here).
    tail: u32,
    /// Spans of this class the heap owns (active + partial + full).
    owned: u32,
    spans: [*mut SpanHeader; MAX_SPANS_PER_CLASS as usize],
}

/// The first entry set in `mask` (not 0) at or after `from`, going round.
#[inline]
fn next_entry(mask: u64, from: u32) -> u32 {
    let start = from % MAX_SPANS_PER_CLASS;
    (start + mask.rotate_right(start).trailing_zeros()) % MAX_SPANS_PER_CLASS
}

impl ClassState {
    const EMPTY: Self = Self {
        partial: 0,
        full: 0,
        tail: 0,
        owned: 0,
        spans: [ptr::null_mut(); MAX_SPANS_PER_CLASS as usize],
    };

    /// Puts `span` at the back of `list` (partial or full).
    ///
    /// # Safety
    /// Owner only; `span` is owned by this heap, of this class, on no list. Fewer than
    /// [`MAX_SPANS_PER_CLASS`] spans are on the lists (the class owns at most
    /// `Config::spans_per_class` spans, one of them not on a list when this is called:
    /// the active span being retired, or a span just taken off).
    unsafe fn push(&mut self, span: *mut SpanHeader, list: ListId) {
        let used = self.partial | self.full;
        debug_assert!(
            used != u64::MAX,
            "more spans on a class's lists than entries"
        );
        let entry = next_entry(!used, self.tail);
        self.tail = entry + 1;
        self.spans[entry as usize] = span;
        match list {
            ListId::Partial => self.partial |= 1 << entry,
            ListId::Full => self.full |= 1 << entry,
            ListId::None => debug_assert!(false, "push on no list"),
        }
        // SAFETY: owner-only state of a span this heap owns.
        let local = unsafe { (*span).local() };
        local.entry = entry as u8;
        local.list = list;
    }

    /// Takes `span` off its list (partial or full).
    ///
    /// # Safety
    /// Owner only; `span` is on one of this state's lists.
    unsafe fn unlink(&mut self, span: *mut SpanHeader) {
        // SAFETY: owner-only state of a span this heap owns.
        let local = unsafe { (*span).local() };
        let bit = !(1u64 << local.entry);
        self.partial &= bit;
        self.full &= bit;
        local.list = ListId::None;
    }

    /// Takes the oldest partial span off its list; null if none.
    ///
    /// # Safety
    /// Owner only.
    unsafe fn pop_partial(&mut self) -> *mut SpanHeader {
        if self.partial == 0 {
            return ptr::null_mut();
        }
        let entry = next_entry(self.partial, self.tail);
        self.partial &= !(1 << entry);
        let span = self.spans[entry as usize];
        // SAFETY: owner-only state of a span on our list.
        unsafe { (*span).local().list = ListId::None };
        span
    }

    /// Moves `span` from the full list to the partial list, in its entry.
    ///
    /// # Safety
    /// Owner only; `span` is on this state's full list.
    unsafe fn make_partial(&mut self, span: *mut SpanHeader) {
        // SAFETY: owner-only state of a span on our list.
        let local = unsafe { (*span).local() };
        self.full &= !(1 << local.entry);
        self.partial |= 1 << local.entry;
        local.list = ListId::Partial;
    }

    /// The oldest full span, left on its list; null if none.
    fn oldest_full(&self) -> *mut SpanHeader {
        if self.full == 0 {
            return ptr::null_mut();
        }
        self.spans[next_entry(self.full, self.tail) as usize]
    }
}

/// The active span of one size class and the part of its state the common allocation and
/// free touch, on one cache line of the heap: while a span is active its local free list and
/// its count of blocks out live here, not in its header (whose copies are stale until the
/// span is deactivated). The common allocation reads this line and the block it hands out,
/// nothing else; a local free of the active span's blocks writes this line and the block.
#[repr(C, align(64))]
pub struct ClassSlot {
    /// Owner only.
    active: UnsafeCell<ActiveSpan>,
    /// Allocations of this class by the heap's thread. One writer (plain load + store);
    /// anyone may read.
    allocations: AtomicU64,
    /// Frees of blocks of this class by the heap's thread, local or remote. As above.
    deallocations: AtomicU64,
}

/// See [`ClassSlot`].
#[derive(Clone, Copy)]
struct ActiveSpan {
    /// The active span, or null.
    span: *mut SpanHeader,
    /// The span's start, which its blocks mask to, or 0: a free compares this with the
    /// block's address, without finding the header.
    base: usize,
    /// Its local free list (`SpanLocal::free` while active); null when `span` is.
    free: *mut u8,
    /// The chain of its remote frees the owner took and has not handed out yet
    /// (`Consumer`'s backlog, lent to the slot while the span is active): handing one out
    /// needs this line and the node, not the span's header.
    backlog: *mut Node,
    /// Its blocks out (`SpanLocal::allocated` while active).
    allocated: u32,
    /// Remote frees taken from `backlog` since the span became active (added to
    /// `SpanLocal::remote_consumed` when it stops being active).
    consumed: u64,
}

// The common allocation and free touch one line of the heap per class.
const _: () = assert!(core::mem::size_of::<ClassSlot>() == 64);

impl ActiveSpan {
    const NONE: Self = Self {
        span: ptr::null_mut(),
        base: 0,
        free: ptr::null_mut(),
        backlog: ptr::null_mut(),
        allocated: 0,
        consumed: 0,
    };
}

impl ClassSlot {
    const fn new() -> Self {
        Self {
            active: UnsafeCell::new(ActiveSpan::NONE),
            allocations: AtomicU64::new(0),
            deallocations: AtomicU64::new(0),
        }
    }
}

/// A private cache of free span runs of one run class, linked through `SpanLocal::next`.
#[derive(Clone, Copy)]
struct RunCache {
    head: *mut SpanHeader,
    len: u32,
}

/// Owner-only state of a heap.
pub struct HeapLocal {
    /// Next heap bound to the same thread (one per allocator instance it used).
    pub bound_next: *mut Heap,
    classes: [ClassState; MAX_CLASSES],
    runs: [RunCache; RUN_CLASSES],
    /// A span a helper left when the heap had already found one, and its run class.
    spare: (*mut SpanHeader, usize),
    /// Active spans that went empty (every block back): candidates to give up when another
    /// class needs a span, so that an idle class does not sit on a whole span. Hints only:
    /// checked again before use.
    idle: [(*mut SpanHeader, usize); IDLE_HINTS],
    /// Next `idle` slot to overwrite.
    idle_cursor: usize,
    /// Which heap to help next.
    help_cursor: usize,
    /// Per size class, a discarded span with blocks freed into it by this heap's thread,
    /// to take back before a fresh span (see `ADOPT_FREE_SHARE`). Hints only.
    adoptable: [*mut SpanHeader; MAX_CLASSES],
    /// Per run class, the spans of the runs this heap published since it last needed a
    /// run its private cache could not give: past [`PURGE_AFTER_SPANS`] the heap is
    /// shrinking, and (with `Config::purge_published`) what it publishes gives its pages
    /// back.
    published_unused: [u32; RUN_CLASSES],
}

/// Counters a heap's owner updates (plain load + store: one writer) and anyone may read.
/// Small blocks are counted per class in the [`ClassSlot`]s; these count the rest.
#[derive(Default)]
pub struct Counters {
    /// Successful allocations of span runs, and reallocations in place.
    pub allocations: AtomicU64,
    /// Frees of span runs performed by this heap's thread, and reallocations in place.
    pub deallocations: AtomicU64,
    /// Span-run bytes handed out minus span-run bytes freed by this heap's thread,
    /// wrapping: a heap whose thread frees other heaps' runs goes "negative", and the sum
    /// over all heaps is the live total.
    pub net_bytes: AtomicU64,
    /// Most steps of one allocation.
    pub max_alloc_steps: AtomicU64,
    /// Most steps of one free.
    pub max_free_steps: AtomicU64,
}

#[inline]
fn raise(max: &AtomicU64, value: u64) {
    if value > max.load(Ordering::Relaxed) {
        max.store(value, Ordering::Relaxed);
    }
}

/// A per-thread heap. Lives in its own small mapping, never unmapped, so a pointer to it
/// stays valid for the life of the process.
///
/// `repr(C)`, the class slots first: the fast paths address a slot as the heap's address
/// plus the class times the slot's size, with no offset to add. (Left to Rust, the order
/// of the fields put the slots after the help record in some builds, and the C `malloc`
/// added 256 to every slot address.)
#[repr(C)]
pub struct Heap {
    /// Per size class: the active span and the counters of the common paths.
    slots: [ClassSlot; MAX_CLASSES],
    /// `pthread_self()` of the owning thread, or 0 when free to adopt.
    pub owner_tid: AtomicUsize,
    /// Next heap of the same allocator (registry list; set before the heap is published).
    pub registry_next: AtomicPtr<Heap>,
    /// Allocator instance this heap belongs to.
    pub instance: u64,
    /// This heap's help record.
    pub help: CachePadded<HelpRecord>,
    /// Public lists of free span runs, one per run class.
    pub public: [SpanList; RUN_CLASSES],
    /// Counters.
    pub counters: Counters,
    /// Owner-only state.
    pub local: UnsafeCell<HeapLocal>,
}

impl Heap {
    /// Writes a fresh heap at `at`.
    ///
    /// # Safety
    ///
    /// `at` is writable, aligned, exclusively owned memory for a `Heap`.
    pub unsafe fn init(at: *mut Heap, instance: u64) {
        // SAFETY: the caller gives us the memory.
        unsafe {
            at.write(Heap {
                owner_tid: AtomicUsize::new(0),
                registry_next: AtomicPtr::new(ptr::null_mut()),
                instance,
                help: CachePadded::new(HelpRecord::new()),
                slots: [const { ClassSlot::new() }; MAX_CLASSES],
                public: [const { SpanList::new() }; RUN_CLASSES],
                counters: Counters {
                    max_alloc_steps: AtomicU64::new(1),
                    max_free_steps: AtomicU64::new(1),
                    ..Counters::default()
                },
                local: UnsafeCell::new(HeapLocal {
                    bound_next: ptr::null_mut(),
                    classes: [const { ClassState::EMPTY }; MAX_CLASSES],
                    runs: [RunCache {
                        head: ptr::null_mut(),
                        len: 0,
                    }; RUN_CLASSES],
                    spare: (ptr::null_mut(), 0),
                    idle: [(ptr::null_mut(), 0); IDLE_HINTS],
                    idle_cursor: 0,
                    help_cursor: 0,
                    adoptable: [ptr::null_mut(); MAX_CLASSES],
                    published_unused: [0; RUN_CLASSES],
                }),
            })
        }
    }

    /// Owner-only state.
    ///
    /// # Safety
    ///
    /// Only the owning thread calls this, and does not hold two results at once.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn local(&self) -> &mut HeapLocal {
        // SAFETY: per the contract.
        unsafe { &mut *self.local.get() }
    }

    fn as_ptr(&self) -> *mut Heap {
        self as *const Heap as *mut Heap
    }

    /// The slot of `class`.
    ///
    /// # Safety
    ///
    /// `class < MAX_CLASSES`.
    #[inline(always)]
    unsafe fn slot(&self, class: usize) -> &ClassSlot {
        debug_assert!(class < MAX_CLASSES);
        // SAFETY: in bounds per the contract.
        unsafe { self.slots.get_unchecked(class) }
    }

    /// Allocates a block of size class `class`. Null if out of memory.
    ///
    /// # Safety
    ///
    /// Called by the heap's owner; `class` is below the allocator's class count.
    #[inline]
    pub unsafe fn alloc_small(&self, wf: &WfSpan, class: usize) -> *mut u8 {
        // SAFETY: per the contract.
        unsafe {
            let block = self.pop_active(class);
            if !block.is_null() {
                return block;
            }
            self.alloc_small_slow(wf, class)
        }
    }

    /// The fast path of [`alloc_small`](Self::alloc_small): a block off the active span's
    /// free list, else the next remote free of the chain lent to its slot
    /// ([`pop_backlog`](Self::pop_backlog)), or null (the slow path's turn).
    ///
    /// # Safety
    /// As [`alloc_small`](Self::alloc_small).
    #[inline(always)]
    pub unsafe fn pop_active(&self, class: usize) -> *mut u8 {
        // SAFETY: owner-only access to the slot per the contract; `class` is in bounds.
        unsafe {
            let slot = self.slot(class);
            let active = slot.active.get();
            let block = (*active).free;
            if !block.is_null() {
                // A block on the free list holds the next link in its first word.
                let next = block.cast::<*mut u8>().read();
                (*active).free = next;
                (*active).allocated += 1;
                // The next allocation of this class reads `next`'s first word: start loading
                // it now, so that miss is not paid inside that allocation.
                prefetch(next);
                // One step: no need to raise the step maximum (heaps start at 1).
                bump_single_writer(&slot.allocations, 1);
                return block;
            }
            self.pop_backlog(class)
        }
    }

    /// The next remote free of the chain lent to the active span's slot (taken by the swap
    /// of the slow path's step 1), if its producer has linked it; null otherwise. (A fifth of
    /// the frees in the realtime suite are remote: each comes back through here.)
    ///
    /// One node a call, on the fast path's way out (inlined: no call, and no register saved
    /// on the way in). Each node of the chain was last written by the thread that freed it,
    /// and the next node's address is in its link: moving several onto the free list at once
    /// makes one allocation wait for that many cache misses in a row (see the crate README's
    /// *Slow paths*).
    ///
    /// # Safety
    /// As [`alloc_small`](Self::alloc_small); the slot's free list is empty.
    #[inline(always)]
    unsafe fn pop_backlog(&self, class: usize) -> *mut u8 {
        // SAFETY: owner-only access to the slot per the contract.
        unsafe {
            let active = self.slot(class).active.get();
            // Null for an empty chain too.
            let node = take_linked(&mut (*active).backlog);
            if node.is_null() {
                return node.cast();
            }
            // The block goes straight back out: `allocated` is unchanged.
            (*active).consumed += 1;
            self.finish_alloc(class, node.cast(), 2)
        }
    }

    /// Makes `span` the active span of `class`: its free list and count move into the slot.
    ///
    /// # Safety
    /// Owner only; `class` has no active span; `span` is owned by this heap and on no list.
    #[inline]
    unsafe fn install(&self, class: usize, span: *mut SpanHeader) {
        // SAFETY: per the contract.
        unsafe {
            let local = (*span).local();
            *self.slot(class).active.get() = ActiveSpan {
                span,
                base: (*span).base,
                free: local.free,
                backlog: local.remote.lend_backlog(),
                allocated: local.allocated,
                consumed: 0,
            };
        }
    }

    /// Gives the active span of `class` (if any) its state back and returns it (null if
    /// none); the class has no active span after this.
    ///
    /// # Safety
    /// Owner only; `class < MAX_CLASSES`.
    #[inline]
    unsafe fn uninstall(&self, class: usize) -> *mut SpanHeader {
        // SAFETY: per the contract.
        unsafe {
            let active = self.slot(class).active.get();
            let ActiveSpan {
                span,
                free,
                backlog,
                allocated,
                consumed,
                ..
            } = *active;
            if !span.is_null() {
                let local = (*span).local();
                local.free = free;
                local.allocated = allocated;
                local.remote.return_backlog(backlog);
                local.remote_consumed += consumed;
                *active = ActiveSpan::NONE;
            }
            span
        }
    }

    #[cold]
    unsafe fn alloc_small_slow(&self, wf: &WfSpan, class: usize) -> *mut u8 {
        let mut steps = 1;
        // SAFETY: (for the whole block) owner-only access to this heap and the spans it owns.
        unsafe {
            // 0. The fast path tried the next remote free of the chain lent to the slot
            //    (`pop_backlog`); a chain still there has a first node whose producer has
            //    not linked it yet, and the try was a step.
            if !(*self.slot(class).active.get()).backlog.is_null() {
                steps += 1;
            }
            let cs: *mut ClassState = ptr::addr_of_mut!((*self.local.get()).classes[class]);
            let active = self.uninstall(class);
            if !active.is_null() {
                // 1. A remote free of the active span, or a block still to carve.
                let mut block = (*active).take_remote(&mut steps);
                if block.is_null() {
                    block = (*active).carve();
                }
                if !block.is_null() {
                    self.install(class, active);
                    return self.finish_alloc(class, block, steps);
                }
                (*cs).push(active, ListId::Full);
            }
            // 2. A span with local free blocks.
            let span = (*cs).pop_partial();
            if !span.is_null() {
                steps += 1;
                return self.activate(wf, cs, class, span, steps);
            }
            // 3. One full span's remote frees (round robin: it goes to the back).
            let span = (*cs).oldest_full();
            if !span.is_null() {
                steps += 1;
                (*cs).unlink(span);
                if (*span).has_free_block() {
                    return self.activate(wf, cs, class, span, steps);
                }
                (*cs).push(span, ListId::Full);
            }
            // 4. A new span.
            self.alloc_small_fresh(wf, cs, class, steps)
        }
    }

    /// Takes a new span for `class` (discarding a full span first if the class
    /// holds `K`): the discarded span remembered for the class if it can be taken back,
    /// else a span acquired afresh; makes it active and takes a block from it.
    ///
    /// # Safety
    /// Owner only; `cs` is this heap's state of `class`, which has no active span.
    unsafe fn alloc_small_fresh(
        &self,
        wf: &WfSpan,
        cs: *mut ClassState,
        class: usize,
        mut steps: u64,
    ) -> *mut u8 {
        // SAFETY: (for the whole block) owner-only access to this heap and its spans.
        unsafe {
            if (*cs).owned >= wf.config.spans_per_class {
                let old = (*cs).oldest_full();
                if !old.is_null() {
                    (*cs).unlink(old);
                    (*cs).owned -= 1;
                    steps += 1 + self.discard(wf, old);
                }
            }
            // A discarded span of the class with blocks freed into it, before a fresh one.
            let span = self.take_adoptable(wf, class, &mut steps);
            if !span.is_null() {
                (*cs).owned += 1;
                return self.activate(wf, cs, class, span, steps);
            }
            let span = self.acquire_run(wf, 0, &mut steps);
            if span.is_null() {
                raise(&self.counters.max_alloc_steps, steps);
                return ptr::null_mut();
            }
            SpanHeader::format_small(span, class, wf.config.span_bytes, self.as_ptr());
            (*cs).owned += 1;
            self.activate(wf, cs, class, span, steps)
        }
    }

    /// Makes `span` the active span of its class and takes a block from it: a local one, or
    /// a remote free. If the remote free was only under way (the hint saw a push that is not
    /// linked yet), the span goes back to the full list and a new span is taken instead.
    ///
    /// # Safety
    /// Owner only; `span` is owned by this heap and on no list; `class` has no active span.
    unsafe fn activate(
        &self,
        wf: &WfSpan,
        cs: *mut ClassState,
        class: usize,
        span: *mut SpanHeader,
        mut steps: u64,
    ) -> *mut u8 {
        // SAFETY: per the contract.
        unsafe {
            let mut block = (*span).take_local();
            if block.is_null() {
                block = (*span).take_remote(&mut steps);
            }
            if block.is_null() {
                block = (*span).carve();
            }
            if block.is_null() {
                // Nothing after all: fall back to a fresh acquisition next time round.
                (*cs).push(span, ListId::Full);
                return self.alloc_small_fresh(wf, cs, class, steps);
            }
            self.install(class, span);
            self.finish_alloc(class, block, steps)
        }
    }

    /// Counts a slow-path allocation of `class`.
    ///
    /// # Safety
    /// Owner only; `class < MAX_CLASSES`.
    #[inline]
    unsafe fn finish_alloc(&self, class: usize, block: *mut u8, steps: u64) -> *mut u8 {
        // SAFETY: per the contract.
        bump_single_writer(unsafe { &self.slot(class).allocations }, 1);
        raise(&self.counters.max_alloc_steps, steps);
        block
    }

    #[inline]
    fn count_free_steps(&self, steps: u64) {
        if steps > 1 {
            raise(&self.counters.max_free_steps, steps);
        }
    }

    /// Frees `block` of small span `span`, which this heap owns.
    ///
    /// # Safety
    /// Owner only; `block` is a live block of `span`, and `span.owner` is this heap.
    #[inline]
    pub unsafe fn free_local(&self, wf: &WfSpan, span: *mut SpanHeader, block: *mut u8) {
        // SAFETY: per the contract: the block is free memory of ours now; the slot and the
        // span's owner-only state are ours.
        unsafe {
            let class = (*span).class as usize;
            let slot = self.slot(class);
            bump_single_writer(&slot.deallocations, 1);
            let active = slot.active.get();
            if (*active).span == span {
                block.cast::<*mut u8>().write((*active).free);
                (*active).free = block;
                (*active).allocated -= 1;
                if (*active).allocated == 0 {
                    self.note_idle(span, class);
                }
                return;
            }
            (*span).put_local(block);
            if (*span).local().list != ListId::Partial || (*span).local().allocated == 0 {
                let cs: *mut ClassState = ptr::addr_of_mut!((*self.local.get()).classes[class]);
                let steps = self.free_local_moves(wf, cs, span);
                self.count_free_steps(steps);
            }
        }
    }

    /// Frees `block` of small span `span`, which this heap owns, when that moves no span
    /// between lists and leaves a live block in it: `span` is the active span of its class,
    /// or a partial one. Returns whether it did. The fast path of
    /// [`free_local`](Self::free_local).
    ///
    /// # Safety
    /// As [`free_local`](Self::free_local).
    #[inline(always)]
    pub unsafe fn push_active(&self, span: *mut SpanHeader, block: *mut u8) -> bool {
        // SAFETY: per the contract: the block is free memory of ours now; the slot is ours.
        unsafe {
            let class = (*span).class as usize;
            let slot = self.slot(class);
            let active = slot.active.get();
            if (*active).span == span {
                // The span's last block takes the general path, which notes the span idle:
                // the fast path then makes no call, and needs no stack frame.
                if (*active).allocated <= 1 {
                    return false;
                }
                block.cast::<*mut u8>().write((*active).free);
                (*active).free = block;
                (*active).allocated -= 1;
            } else {
                // An inactive span that is partial and keeps a live block stays where it
                // is: the block goes on its local list and nothing moves. A full span
                // turning partial, or a span's last block, take the general path.
                let local = (*span).local();
                if local.list != ListId::Partial || local.allocated <= 1 {
                    return false;
                }
                (*span).put_local(block);
            }
            bump_single_writer(&slot.deallocations, 1);
            true
        }
    }

    /// Frees `block` if it lies in the active span of `class` (found from its address
    /// alone: no header is read); returns whether it did.
    ///
    /// # Safety
    /// Owner only; `class < MAX_CLASSES`; `block` is a live block of the allocator whose
    /// spans are `span_bytes` long.
    #[inline]
    pub unsafe fn free_to_active(&self, class: usize, block: *mut u8, span_bytes: usize) -> bool {
        // SAFETY: per the contract: a live block of our active span is ours to put back.
        unsafe {
            let slot = self.slot(class);
            let active = slot.active.get();
            // A small block's span starts at the block's address masked to the span size; a
            // span run's object or a huge block masks to no active span's start.
            if (*active).base != block as usize & !(span_bytes - 1) {
                return false;
            }
            block.cast::<*mut u8>().write((*active).free);
            (*active).free = block;
            (*active).allocated -= 1;
            if (*active).allocated == 0 {
                self.note_idle((*active).span, class);
            }
            bump_single_writer(&slot.deallocations, 1);
            true
        }
    }

    /// Remembers that the active span of `class` went empty.
    ///
    /// # Safety
    /// Owner only.
    #[cold]
    unsafe fn note_idle(&self, span: *mut SpanHeader, class: usize) {
        // SAFETY: owner-only access per the contract.
        let local = unsafe { self.local() };
        local.idle[local.idle_cursor] = (span, class);
        local.idle_cursor = (local.idle_cursor + 1) % IDLE_HINTS;
    }

    /// After a local free into an inactive span: a full span becomes partial; a span whose
    /// blocks are all back returns to the run cache. Returns the free's steps.
    ///
    /// # Safety
    /// Owner only; `cs` is the state of `span`'s class; `span` is not the active span.
    #[cold]
    unsafe fn free_local_moves(
        &self,
        wf: &WfSpan,
        cs: *mut ClassState,
        span: *mut SpanHeader,
    ) -> u64 {
        // SAFETY: per the contract.
        unsafe {
            let local = (*span).local();
            if local.allocated == 0 {
                if local.list != ListId::None {
                    (*cs).unlink(span);
                }
                (*cs).owned -= 1;
                if self.give_up_empty(span) {
                    1 + self.give_run(wf, span, 0)
                } else {
                    1
                }
            } else if local.list == ListId::Full {
                (*cs).make_partial(span);
                2
            } else {
                1
            }
        }
    }

    /// Forgets a full span that still has blocks out; its last remote freer reclaims it.
    /// Returns the steps taken beyond the first.
    ///
    /// # Safety
    /// Owner only; `span` is owned by this heap and on no list.
    unsafe fn discard(&self, wf: &WfSpan, span: *mut SpanHeader) -> u64 {
        // SAFETY: per the contract; after the `discard` below we touch the span again only
        // if the counter says every block is already back.
        unsafe {
            (*span).owner.store(NO_OWNER, Ordering::Relaxed);
            let local = (*span).local();
            let total = local.remote_consumed + u64::from(local.allocated);
            if (*span).reclaim().discard(total) {
                SpanHeader::reset(span);
                return self.give_run(wf, span, 0);
            }
            0
        }
    }

    /// Remembers `span`, a discarded span of `class` with blocks freed into it, as the span
    /// that class takes back next ([`take_adoptable`](Self::take_adoptable)). A hint: it
    /// replaces the one before, and is checked when used.
    ///
    /// # Safety
    /// Owner only; `class < MAX_CLASSES`.
    #[inline]
    pub unsafe fn note_adoptable(&self, class: usize, span: *mut SpanHeader) {
        // SAFETY: owner-only access per the contract.
        unsafe { self.local().adoptable[class] = span };
    }

    /// The discarded span remembered for `class`, taken back from the discard (one
    /// compare-and-swap, [`ReclaimCounter::adopt`](crate::remote_free::ReclaimCounter::adopt))
    /// and now owned by this heap, on no list; null if there is none or it cannot be taken
    /// back (its blocks all came back, or a free counted itself meanwhile). A span reclaimed,
    /// reused for another class and discarded again since the hint is given up again as
    /// found. Steps: 1, or at most 4 with that give-up.
    ///
    /// # Safety
    /// Owner only; `class < MAX_CLASSES`.
    unsafe fn take_adoptable(&self, wf: &WfSpan, class: usize, steps: &mut u64) -> *mut SpanHeader {
        // SAFETY: (for the whole block) owner-only access. A hint names a span header of
        // the region (single spans stay single spans, and their header page is never given
        // back), so its counter may be read whatever happened to the span since; the span's
        // other fields are read only once the compare-and-swap made it ours.
        unsafe {
            let span = core::mem::replace(&mut self.local().adoptable[class], ptr::null_mut());
            if span.is_null() {
                return span;
            }
            *steps += 1;
            if !(*span).reclaim().adopt() {
                return ptr::null_mut();
            }
            if (*span).kind != Kind::Small || usize::from((*span).class) != class {
                *steps += 1 + self.discard(wf, span);
                return ptr::null_mut();
            }
            (*span).owner.store(self.as_ptr(), Ordering::Relaxed);
            span
        }
    }

    /// Returns a free span run of class `run` to this heap: the private cache if it has
    /// room, else one attempt at the public list, else the private cache anyway (over its
    /// limit until the next release). Returns the steps taken (at most 2).
    ///
    /// # Safety
    /// Owner only; the caller holds `span` exclusively and nothing in it is live.
    pub unsafe fn give_run(&self, wf: &WfSpan, span: *mut SpanHeader, run: usize) -> u64 {
        // SAFETY: per the contract.
        unsafe {
            let local = self.local();
            let cache = &mut local.runs[run];
            if cache.len >= wf.config.cached_runs {
                let published = &mut local.published_unused[run];
                if wf.config.purge_published && *published >= PURGE_AFTER_SPANS {
                    wf.purge_run(span, run);
                }
                if self.public[run].push_once((*span).index, &(*span).link) {
                    *published = published.saturating_add(RUN_SPANS[run] as u32);
                    return 2;
                }
            }
            (*span).local().next = cache.head;
            cache.head = span;
            cache.len += 1;
            1
        }
    }

    /// Gives back the pages of every free span run in this heap's private caches (see
    /// [`WfSpan::purge_run`]); the runs stay cached. Returns the bytes given back.
    ///
    /// # Safety
    /// Owner only.
    pub unsafe fn purge_cached_runs(&self, wf: &WfSpan) -> u64 {
        let mut given = 0;
        // SAFETY: owner-only access; cached runs are free and held by this heap alone.
        unsafe {
            let local = self.local();
            for (run, cache) in local.runs.iter().enumerate() {
                let mut span = cache.head;
                while !span.is_null() {
                    given += wf.purge_run(span, run);
                    span = (*span).local().next;
                }
            }
        }
        given
    }

    /// Takes a free span run of class `run` (one span for `run == 0`): see the module
    /// documentation for the order of sources. Null if the region is exhausted.
    ///
    /// # Safety
    /// Owner only.
    pub unsafe fn acquire_run(&self, wf: &WfSpan, run: usize, steps: &mut u64) -> *mut SpanHeader {
        // SAFETY: (for the whole block) owner-only access; spans taken from lists are held exclusively.
        unsafe {
            let local = self.local();
            // The spare span a helper left.
            if !local.spare.0.is_null() && local.spare.1 == run {
                *steps += 1;
                return core::mem::replace(&mut local.spare.0, ptr::null_mut());
            }
            // The private cache.
            let cache = &mut local.runs[run];
            if !cache.head.is_null() {
                *steps += 1;
                let span = cache.head;
                cache.head = (*span).local().next;
                cache.len -= 1;
                return span;
            }
            // The heap needs more than it keeps: it is not shrinking (see `give_run`).
            local.published_unused[run] = 0;
            // An idle class's empty active span.
            if run == 0 {
                let span = self.take_idle(steps);
                if !span.is_null() {
                    return span;
                }
            }
            // The own public list, one attempt.
            *steps += 1;
            if let Some(index) = self.public[run].pop_once(|i| wf.link_of(i)) {
                return wf.span_at(index);
            }
            // Help one other heap (H = 1).
            *steps += self.help_one(wf);
            // Ask for help, then try every other heap once (P = N) and the orphans.
            self.help.request(run as u32);
            let mut found = ptr::null_mut();
            let mut heap = wf.heaps.load(Ordering::Acquire);
            while !heap.is_null() {
                *steps += 1;
                if heap != self.as_ptr()
                    && let Some(index) = (*heap).public[run].pop_once(|i| wf.link_of(i))
                {
                    found = wf.span_at(index);
                    break;
                }
                heap = (*heap).registry_next.load(Ordering::Acquire);
            }
            if found.is_null() {
                *steps += 1;
                if let Some(index) = wf.orphans[run].pop_once(|i| wf.link_of(i)) {
                    found = wf.span_at(index);
                }
            }
            *steps += 1;
            if let Collected::Span(index) = self.help.collect() {
                let given = wf.span_at(index);
                if found.is_null() {
                    found = given;
                } else {
                    // Two spans: keep the helper's for the next acquisition.
                    let local = self.local();
                    if local.spare.0.is_null() {
                        local.spare = (given, run);
                    } else {
                        let cache = &mut local.runs[run];
                        (*given).local().next = cache.head;
                        cache.head = given;
                        cache.len += 1;
                        *steps += 1;
                    }
                }
            }
            if !found.is_null() {
                return found;
            }
            // A fresh span run from the region.
            *steps += 1;
            wf.fresh_run(run)
        }
    }

    /// Takes an empty active span of some class (remembered in the idle hints), detaching it
    /// from its class; null if no hint still holds. At most [`IDLE_HINTS`] steps.
    ///
    /// # Safety
    /// Owner only.
    unsafe fn take_idle(&self, steps: &mut u64) -> *mut SpanHeader {
        // SAFETY: (for the whole block) owner-only access. A hint is trusted only after the
        // heap's own state confirms it (the span is still this class's active span); only
        // then is the span, owned by this heap, read.
        unsafe {
            let heap = self.local.get();
            for slot in 0..IDLE_HINTS {
                let (span, class) = (*heap).idle[slot];
                if span.is_null() {
                    continue;
                }
                *steps += 1;
                (*heap).idle[slot] = (ptr::null_mut(), 0);
                let active = *self.slot(class).active.get();
                if active.span != span || active.allocated != 0 {
                    continue;
                }
                self.uninstall(class);
                (*heap).classes[class].owned -= 1;
                if self.give_up_empty(span) {
                    return span;
                }
            }
            ptr::null_mut()
        }
    }

    /// Gives up an owned span whose blocks are all back, once no remote free of it is still
    /// about to count itself. Returns `true` if the span was reset and the caller now holds
    /// it; `false` if a remote free has not counted itself yet (its node was already taken
    /// and reused): the span is then left discarded, and that free's count reclaims it.
    ///
    /// # Safety
    /// Owner only; `span` is owned by this heap, on no list, and every block is back.
    unsafe fn give_up_empty(&self, span: *mut SpanHeader) -> bool {
        // SAFETY: per the contract. `discard` with the remote frees consumed as the target
        // succeeds only if each has counted itself, so no late count reaches the reset span.
        unsafe {
            (*span).owner.store(NO_OWNER, Ordering::Relaxed);
            let consumed = (*span).local().remote_consumed;
            if (*span).reclaim().discard(consumed) {
                SpanHeader::reset(span);
                true
            } else {
                false
            }
        }
    }

    /// Looks at one other heap's help record and, if it asks for a kind of span this heap
    /// has spare in its private cache, hands one over. Returns the steps taken.
    ///
    /// # Safety
    /// Owner only.
    unsafe fn help_one(&self, wf: &WfSpan) -> u64 {
        // SAFETY: (for the whole block) owner-only access; a span handed over leaves our cache first.
        unsafe {
            let count = wf.heap_count.load(Ordering::Acquire);
            if count < 2 {
                return 0;
            }
            let local = self.local();
            local.help_cursor = (local.help_cursor + 1) % count;
            let mut steps = 1;
            let mut heap = wf.heaps.load(Ordering::Acquire);
            for _ in 0..local.help_cursor {
                if heap.is_null() {
                    break;
                }
                heap = (*heap).registry_next.load(Ordering::Acquire);
                steps += 1;
            }
            if heap.is_null() || heap == self.as_ptr() {
                return steps;
            }
            let Some(run) = (*heap).help.pending() else {
                return steps;
            };
            let run = run as usize;
            if run >= RUN_CLASSES {
                return steps;
            }
            let cache = &mut local.runs[run];
            if cache.head.is_null() {
                return steps;
            }
            let span = cache.head;
            cache.head = (*span).local().next;
            cache.len -= 1;
            steps += 1;
            if !(*heap).help.complete(run as u32, (*span).index) {
                // The request was withdrawn or already served: keep the span.
                (*span).local().next = cache.head;
                cache.head = span;
                cache.len += 1;
            }
            steps
        }
    }

    /// Allocates an object of `size` bytes aligned to `align` in a span run of class `run`,
    /// zeroed if `zeroed`. Null if out of memory.
    ///
    /// # Safety
    /// Owner only; `size` fits the run and `align < span_bytes`.
    pub unsafe fn alloc_run(
        &self,
        wf: &WfSpan,
        run: usize,
        align: usize,
        size: usize,
        zeroed: bool,
    ) -> *mut u8 {
        let mut steps = 1;
        // SAFETY: per the contract; the run is held exclusively until handed out.
        unsafe {
            let span = self.acquire_run(wf, run, &mut steps);
            if span.is_null() {
                raise(&self.counters.max_alloc_steps, steps);
                return ptr::null_mut();
            }
            // The object starts the run: the run is aligned to the span size, above any
            // alignment a run serves.
            let object = (*span).base as *mut u8;
            debug_assert!(align < wf.config.span_bytes);
            // What reads zero already (a fresh run, or one given back to the OS) is not
            // written: the object is zeroed up to there only.
            let zero_from = core::mem::replace(&mut (*span).zero_from, DIRTY);
            if zeroed {
                object.write_bytes(0, zero_from.min(size));
            }
            (*span).kind = Kind::Run;
            (*span).run_class = run as u8;
            (*span).object_offset = 0;
            let room = run_room(span, wf.config.span_bytes);
            (*span).block_bytes = run_usable_bytes(size, room);
            bump_single_writer(&self.counters.allocations, 1);
            bump_single_writer(&self.counters.net_bytes, room as u64);
            raise(&self.counters.max_alloc_steps, steps);
            object
        }
    }

    /// Frees the object of span run `span` (any thread may: the freer adopts the run).
    ///
    /// # Safety
    /// Owner of this heap only; the run's object is live and is not used again.
    pub unsafe fn free_run(&self, wf: &WfSpan, span: *mut SpanHeader) {
        // SAFETY: per the contract: the object was the run's only block, so the freer holds
        // the whole run now.
        unsafe {
            let run = (*span).run_class as usize;
            let bytes = run_room(span, wf.config.span_bytes) as u64;
            (*span).kind = Kind::Small;
            (*span).zero_from = DIRTY;
            (*span).local().list = ListId::None;
            let steps = 1 + self.give_run(wf, span, run);
            bump_single_writer(&self.counters.deallocations, 1);
            bump_single_writer(&self.counters.net_bytes, bytes.wrapping_neg());
            self.count_free_steps(steps);
        }
    }

    /// Counts a reallocation that kept its block: one free and one allocation of the same
    /// bytes. Owner only (the counters have one writer).
    pub fn count_realloc_in_place(&self) {
        bump_single_writer(&self.counters.allocations, 1);
        bump_single_writer(&self.counters.deallocations, 1);
    }

    /// Counts a remote free of a small block of `class` performed by this heap's thread.
    ///
    /// # Safety
    /// Owner only; `class < MAX_CLASSES`.
    pub unsafe fn count_remote_free(&self, class: usize, steps: u64) {
        // SAFETY: per the contract.
        bump_single_writer(unsafe { &self.slot(class).deallocations }, 1);
        self.count_free_steps(steps);
    }

    /// Live bytes of small blocks counted by this heap, wrapping (see
    /// [`Counters::net_bytes`]), over the first `classes` classes. Any thread may call this.
    pub fn small_net_bytes(&self, classes: usize) -> u64 {
        let mut net = 0u64;
        for (class, slot) in self.slots.iter().enumerate().take(classes) {
            let out = slot
                .allocations
                .load(Ordering::Relaxed)
                .wrapping_sub(slot.deallocations.load(Ordering::Relaxed));
            net = net.wrapping_add(out.wrapping_mul(class_bytes(class) as u64));
        }
        net
    }

    /// Allocations and frees of small blocks counted by this heap. Any thread may call this.
    pub fn small_counts(&self) -> (u64, u64) {
        self.slots.iter().fold((0, 0), |(a, f), slot| {
            (
                a + slot.allocations.load(Ordering::Relaxed),
                f + slot.deallocations.load(Ordering::Relaxed),
            )
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_span_count_takes_the_smallest_run_class_that_holds_it() {
        assert_eq!(run_class_of_spans(0), None);
        assert_eq!(run_class_of_spans(33), None);
        assert!(RUN_SPANS.windows(2).all(|w| w[0] < w[1]));
        for spans in 1..=32 {
            let class = run_class_of_spans(spans).unwrap();
            assert!(RUN_SPANS[class] >= spans, "{spans} spans: class {class}");
            assert!(class == 0 || RUN_SPANS[class - 1] < spans, "{spans} spans");
            assert!(
                RUN_SPANS[class] * 4 <= spans * 5,
                "{spans} spans: class {class}"
            );
        }
    }

    #[test]
    fn next_entry_finds_the_first_set_entry_at_or_after_from_going_round() {
        let max = MAX_SPANS_PER_CLASS;
        for mask in [1u64, 1 << 63, 0b1010_0000, u64::MAX, 0x8000_0001] {
            for from in 0..2 * max {
                let found = next_entry(mask, from);
                let start = from % max;
                let expected = (0..max)
                    .map(|k| (start + k) % max)
                    .find(|&e| mask & (1 << e) != 0)
                    .unwrap();
                assert_eq!(found, expected, "mask {mask:#x}, from {from}");
            }
        }
    }
}
