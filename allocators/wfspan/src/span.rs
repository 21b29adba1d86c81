//! Spans: the unit wfspan manages.
//!
//! A span is `span_bytes` of the region (64 KiB by default), aligned to its size, with a
//! [`SpanHeader`] near its start. Any block's header is found by masking, then adding the
//! span's colour: `base = (block - 1) & !(span_bytes - 1)` (minus one, so that a block
//! aligned to the span size — only huge ones — finds a header placed one span before it),
//! `header = base + colour(base)`.
//!
//! **Colouring.** Were every header at its span's start, all headers would sit at addresses
//! equal modulo 64 KiB: the same set of every cache level indexed by the low address bits
//! (L1 and, on most x86 cores, L2), which holds 8 to 16 lines. A thread touching a few dozen
//! spans then missed on the header in nearly every call. The colour, `(base / span_bytes) %
//! COLOURS` steps of 128 bytes, spreads consecutive spans' headers over 2 KiB (32 sets of a
//! 4 KiB-period L1, 16 times as many headers held) while keeping every header in the span's
//! first page. It costs a small span at most 1920 bytes of block room.
//!
//! Three kinds share the header:
//!
//! ```text
//!  small span  [header | blk | blk | blk | ... uncarved ... ]   blocks of one class, carved
//!                                                               forwards after the header
//!  span run    [header | object ........................ ]      1-32 spans, one object
//!  huge        [header | object ............................ ]  its own mapping
//! ```
//!
//! A small span's state is split by who may touch it:
//!
//! * owner-only ([`SpanLocal`]): the local free list, the carving cursor, how many blocks
//!   are out, the deferred stalled remote frees, list links. Only the thread that owns the
//!   span's heap touches them. While the span is its class's active span, the free list and
//!   the count of blocks out live in the heap's slot for the class instead (`heap`), and
//!   these copies are stale.
//! * shared: the read-mostly fields every free reads (kind, owner, block size), the
//!   public-list link, and what remote frees write ([`RemoteSide`]: the remote-free list
//!   and the reclaim counter). The owner-only state and the remote side each have a cache
//!   line of their own, so a remote free touches two lines of the header, neither
//!   invalidates the owner's line nor reads a line the owner writes in its common paths.

use core::cell::UnsafeCell;
use core::ptr;

use alloclab_core::sync::atomic::{AtomicPtr, Ordering};
use crossbeam_utils::CachePadded;

use crate::heap::Heap;
pub(crate) use crate::hint::prefetch;
use crate::remote_free::{Consumer, ReclaimCounter, RemoteFreeList};
use crate::size_class::{class_align, class_bytes};
use crate::span_list::Link;

/// What a span holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Blocks of one size class.
    Small = 1,
    /// One object in a run of spans (`heap::RUN_SPANS`).
    Run = 2,
    /// One object in its own OS mapping.
    Huge = 3,
}

/// Which of its heap's lists a small span is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListId {
    /// None: the active span, a cached empty span, or not owned.
    None,
    /// Spans with free blocks on their local free list.
    Partial,
    /// Spans whose free blocks, if any, are on their remote list.
    Full,
}

/// Owner-only state of a small span.
pub struct SpanLocal {
    /// Local free list (through the blocks' first word).
    pub free: *mut u8,
    /// Blocks carved so far (carving goes forwards from the first block).
    pub carved: u32,
    /// Blocks handed out and not yet back on the local free list (includes blocks freed
    /// remotely whose frees the owner has not consumed yet).
    pub allocated: u32,
    /// Remote frees the owner consumed since the span was formatted.
    pub remote_consumed: u64,
    /// The owner's side of the remote-free list: taken, not yet handed out, and stalled.
    pub remote: Consumer,
    /// Link in a run cache.
    pub next: *mut SpanHeader,
    /// Which of its class's lists the span is on (see `heap::ClassState`) ...
    pub list: ListId,
    /// ... and in which entry of the class's table.
    pub entry: u8,
}

/// [`SpanHeader::zero_from`] of a run whose memory may hold anything.
pub const DIRTY: usize = usize::MAX;

/// The header at the start of every span, span run and huge mapping.
#[repr(C)]
pub struct SpanHeader {
    /// What the span holds.
    pub kind: Kind,
    /// Run class (an index into `heap::RUN_SPANS`) of a span run; 0 for a small span.
    pub run_class: u8,
    /// Size class of a small span.
    pub class: u16,
    /// Block size of a small span; of a span run, its object's usable bytes
    /// (`heap::run_usable_bytes`).
    pub block_bytes: u32,
    /// Blocks that fit in a small span.
    pub block_count: u32,
    /// Index of the span in the region (runs: of their first span).
    pub index: u32,
    /// Runs and huge blocks: offset of the object from the start of the run or mapping;
    /// small spans: offset of the first block from the start of the span.
    pub object_offset: usize,
    /// Huge blocks: the mapping's start and length.
    pub mapping: (usize, usize),
    /// Free span runs: the offset from the run's start past which its memory is known to
    /// read zero (fresh from the region, or given back to the OS); [`DIRTY`] when nothing is
    /// known. A zeroed allocation of a run zeroes only what lies before it.
    pub zero_from: usize,
    /// The heap that owns a small span; null when none does (published, discarded, cached
    /// by nobody), and always null for span runs and huge mappings, so that a free may
    /// compare it with its heap before reading `kind`. Compared, never dereferenced, by
    /// non-owners.
    pub owner: AtomicPtr<Heap>,
    /// Link for the public span lists.
    pub link: Link,
    /// Owner-only state, on a line of its own: every free reads the fields above (kind,
    /// owner, block size), so the owner's writes must not invalidate them on other cores.
    pub local: CachePadded<UnsafeCell<SpanLocal>>,
    /// What remote frees write, on one line of its own.
    pub remote: CachePadded<RemoteSide>,
}

/// The part of a span header that frees from threads other than the owner write: both on
/// one cache line, so that a remote free touches one line of the span's besides the
/// read-mostly fields (the owner reads it only to take remote frees, and to discard).
pub struct RemoteSide {
    /// Frees from threads other than the owner.
    pub list: RemoteFreeList,
    /// Who reclaims a discarded span.
    pub reclaim: ReclaimCounter,
}

/// How many bytes of blocks one [`SpanHeader::carve`] makes ready: the rest of a page.
pub const CARVE_BYTES: usize = 4096;

/// Bytes reserved for the header at the start of a span.
pub const HEADER_BYTES: usize = core::mem::size_of::<SpanHeader>().next_multiple_of(64);

/// How many header positions spans take in turn (see the module documentation).
pub const COLOURS: usize = 16;
/// Distance between two header positions: the header's alignment (`CachePadded`).
const COLOUR_STEP_BYTES: usize = 128;
/// The largest offset of a header from its span's start.
pub const MAX_COLOUR_BYTES: usize = (COLOURS - 1) * COLOUR_STEP_BYTES;

/// The bits of an address that [`colour_bytes`] keeps, once shifted by [`colour_shift`].
pub const COLOUR_MASK: usize = MAX_COLOUR_BYTES;
const _: () = assert!(COLOURS.is_power_of_two() && COLOUR_STEP_BYTES.is_power_of_two());

/// How far [`colour_bytes`] shifts a span's address: the span size's bits less the colour
/// step's (spans are at least 16 KiB, so this never underflows).
#[inline]
pub const fn colour_shift(span_bytes: usize) -> u32 {
    span_bytes.trailing_zeros() - COLOUR_STEP_BYTES.trailing_zeros()
}

/// The header of the span holding `block`, from the span mask (`!(span_bytes - 1)`) and
/// [`colour_shift`] computed once: what [`SpanHeader::of`] computes, for the fast paths.
#[inline(always)]
pub fn header_of_block(block: *mut u8, span_mask: usize, colour_shift: u32) -> *mut SpanHeader {
    let base = (block as usize - 1) & span_mask;
    (base + ((base >> colour_shift) & COLOUR_MASK)) as *mut SpanHeader
}
// A header of any colour stays in its span's first 4 KiB page (one fault, one TLB entry).
const _: () = assert!(MAX_COLOUR_BYTES + HEADER_BYTES <= 4096);

/// Offset of the header from the start of the span at `base` (aligned to `span_bytes`).
#[inline]
pub fn colour_bytes(base: usize, span_bytes: usize) -> usize {
    // `((base / span_bytes) % COLOURS) * COLOUR_STEP_BYTES`: the span's index bits shifted
    // straight into place, one shift and one mask.
    (base >> colour_shift(span_bytes)) & COLOUR_MASK
}

/// The header of the span (or run, or huge mapping) that starts at `base`, aligned to
/// `span_bytes`.
#[inline]
pub fn header_at(base: usize, span_bytes: usize) -> *mut SpanHeader {
    (base + colour_bytes(base, span_bytes)) as *mut SpanHeader
}

/// The start of the span whose header is `header`.
#[inline]
pub fn span_base(header: *const SpanHeader, span_bytes: usize) -> usize {
    header as usize & !(span_bytes - 1)
}

/// Where a span of `span_bytes` holding blocks of `class`, its header `colour` bytes in,
/// puts its first block, and how many blocks it holds: `(offset of the first block, count)`.
///
/// The first block goes at the first multiple of the class's alignment after the header:
/// every block is then aligned as the class promises (its size is a multiple of that
/// alignment too), and the first blocks share the header's page, so a span with a few blocks
/// out has one page resident, not two. A class whose blocks would fill the span exactly
/// (with 64 KiB spans the powers of two from 4 KiB up) loses one block to the header: the
/// 16 KiB class holds three blocks a span, not four, and the 8 KiB class seven; the 15 KiB
/// class (`size_class::SPLIT_CLASS_BYTES`) holds four.
pub const fn small_layout(class: usize, span_bytes: usize, colour: usize) -> (usize, usize) {
    let first = (colour + HEADER_BYTES).next_multiple_of(class_align(class));
    (first, (span_bytes - first) / class_bytes(class))
}

impl SpanHeader {
    /// Writes a fresh header for span `index` at `at`.
    ///
    /// # Safety
    ///
    /// `at` is the writable, exclusively owned start of a span, run or huge mapping.
    pub unsafe fn init(at: *mut SpanHeader, index: u32) {
        // SAFETY: the caller gives us the memory.
        unsafe {
            at.write(SpanHeader {
                kind: Kind::Small,
                run_class: 0,
                class: 0,
                block_bytes: 0,
                block_count: 0,
                index,
                object_offset: 0,
                mapping: (0, 0),
                zero_from: DIRTY,
                owner: AtomicPtr::new(ptr::null_mut()),
                link: Link::new(),
                local: CachePadded::new(UnsafeCell::new(SpanLocal {
                    free: ptr::null_mut(),
                    carved: 0,
                    allocated: 0,
                    remote_consumed: 0,
                    remote: Consumer::new(),
                    next: ptr::null_mut(),
                    list: ListId::None,
                    entry: 0,
                })),
                remote: CachePadded::new(RemoteSide {
                    list: RemoteFreeList::new(),
                    reclaim: ReclaimCounter::new(),
                }),
            })
        }
    }

    /// The header of the span holding `block`.
    #[inline]
    pub fn of(block: *mut u8, span_bytes: usize) -> *mut SpanHeader {
        header_at((block as usize - 1) & !(span_bytes - 1), span_bytes)
    }

    /// Formats an unowned, empty span for blocks of `class`, owned by `owner`.
    ///
    /// # Safety
    ///
    /// The caller owns `span` exclusively: no block of it is live, nobody else holds it.
    pub unsafe fn format_small(
        span: *mut SpanHeader,
        class: usize,
        span_bytes: usize,
        owner: *mut Heap,
    ) {
        let block_bytes = class_bytes(class);
        // SAFETY: exclusive ownership per the contract.
        unsafe {
            (*span).kind = Kind::Small;
            (*span).run_class = 0;
            (*span).class = class as u16;
            (*span).block_bytes = block_bytes as u32;
            let (first, count) = small_layout(
                class,
                span_bytes,
                span as usize - span_base(span, span_bytes),
            );
            (*span).object_offset = first;
            (*span).block_count = count as u32;
            (*span).zero_from = DIRTY;
            (*span).owner.store(owner, Ordering::Relaxed);
            let local = &mut *(*span).local.get();
            local.free = ptr::null_mut();
            local.carved = 0;
            local.allocated = 0;
            local.remote_consumed = 0;
            local.remote = Consumer::new();
            local.next = ptr::null_mut();
            local.list = ListId::None;
        }
    }

    /// Forgets every block of a span whose blocks are all free, so it can be reused for
    /// anything: the one party that holds it calls this.
    ///
    /// # Safety
    ///
    /// The caller holds `span` exclusively and no block of it is live; every remote free of
    /// it has completed (so its remote list may be dropped).
    pub unsafe fn reset(span: *mut SpanHeader) {
        // SAFETY: exclusive ownership per the contract.
        unsafe {
            (*span).owner.store(ptr::null_mut(), Ordering::Relaxed);
            (*span).zero_from = DIRTY;
            (*span).remote_list().reset();
            (*span).reclaim().reset();
            let local = &mut *(*span).local.get();
            local.free = ptr::null_mut();
            local.carved = 0;
            local.allocated = 0;
            local.remote_consumed = 0;
            local.remote = Consumer::new();
            local.list = ListId::None;
        }
    }

    /// The remote-free list.
    #[inline]
    pub fn remote_list(&self) -> &RemoteFreeList {
        &self.remote.list
    }

    /// The reclaim counter.
    #[inline]
    pub fn reclaim(&self) -> &ReclaimCounter {
        &self.remote.reclaim
    }

    /// Owner-only state.
    ///
    /// # Safety
    ///
    /// Only the owner of the span (or the one party holding an unowned span) calls this, and
    /// does not keep two of the references alive at once.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn local(&self) -> &mut SpanLocal {
        // SAFETY: per the contract, nobody else touches the owner-only state.
        unsafe { &mut *self.local.get() }
    }

    /// Pops a block from the local free list, or carves a new one unless remote frees are
    /// waiting (those are reused first, to keep the footprint down: the caller's slow path
    /// takes them). Null if neither applies.
    ///
    /// # Safety
    ///
    /// Owner only; `span_bytes` is the span size it was formatted with.
    #[inline]
    pub unsafe fn take_local(&self, span_bytes: usize) -> *mut u8 {
        // SAFETY: owner-only access per the contract.
        let local = unsafe { self.local() };
        let block = local.free;
        if !block.is_null() {
            // SAFETY: a block on the local free list holds the next link in its first word.
            let next = unsafe { block.cast::<*mut u8>().read() };
            local.free = next;
            local.allocated += 1;
            // The next allocation of this class reads `next`'s first word: start loading it
            // now, so that miss is not paid inside that allocation.
            prefetch(next);
            return block;
        }
        if self.remote_list().has_nodes(&local.remote) {
            return ptr::null_mut();
        }
        // SAFETY: owner-only access per the contract.
        unsafe { self.carve(span_bytes) }
    }

    /// Carves never-used blocks (forwards, after the blocks carved before): returns the
    /// first and puts the rest of a batch of [`CARVE_BYTES`] (at least one block, at most
    /// what is left) on the local free list, lowest address first, so that they go out in
    /// address order.
    /// Null when the span is fully carved.
    ///
    /// A batch rather than one block a call: a span emptied and handed to another class
    /// (or formatted fresh) is carved again from scratch, and carving one block per slow
    /// path made 93 of 100 allocations slow in a loop of 1,600 256-byte blocks. The batch
    /// is one step of the step bound, of at most `CARVE_BYTES / 16` link writes, all to
    /// memory the next allocations touch anyway.
    ///
    /// # Safety
    ///
    /// Owner only; `span_bytes` is the span size it was formatted with.
    #[inline]
    pub unsafe fn carve(&self, span_bytes: usize) -> *mut u8 {
        // SAFETY: owner-only access per the contract.
        let local = unsafe { self.local() };
        let left = self.block_count - local.carved;
        if left == 0 {
            return ptr::null_mut();
        }
        let bytes = self.block_bytes as usize;
        // The uncarved blocks begin where the carved ones end. The batch ends with the page
        // `first` lies in (at least one block), so that carving, which writes a link into
        // every block of the batch, faults in no page before the program needs it.
        let first =
            span_base(self, span_bytes) + self.object_offset + local.carved as usize * bytes;
        let page_end = (first & !(CARVE_BYTES - 1)) + CARVE_BYTES;
        let batch = ((page_end - first) / bytes).clamp(1, left as usize);
        let mut next = local.free;
        for i in (1..batch).rev() {
            let block = (first + i * bytes) as *mut u8;
            // SAFETY: an uncarved block of this span: free memory of ours, big enough and
            // aligned for a link.
            unsafe { block.cast::<*mut u8>().write(next) };
            next = block;
        }
        local.free = next;
        local.carved += batch as u32;
        local.allocated += 1;
        first as *mut u8
    }

    /// Puts a block back on the local free list (a local free, or a consumed remote free).
    ///
    /// # Safety
    ///
    /// Owner only; `block` is a block of this span that is no longer live.
    #[inline]
    pub unsafe fn put_local(&self, block: *mut u8) {
        // SAFETY: owner-only access per the contract; the block is free memory of ours.
        unsafe {
            let local = self.local();
            block.cast::<*mut u8>().write(local.free);
            local.free = block;
            local.allocated -= 1;
        }
    }

    /// Takes one remotely freed block and hands it out at once; null if none can be taken
    /// now. Adds its steps (at most `3 + stalled producers`) to `steps`.
    ///
    /// # Safety
    ///
    /// Owner only.
    #[inline]
    pub unsafe fn take_remote(&self, steps: &mut u64) -> *mut u8 {
        // SAFETY: owner-only access. The consumer state is moved out for the pop so that no
        // two references to the owner-only state overlap.
        unsafe {
            let mut consumer = core::mem::take(&mut self.local().remote);
            let node = self.remote_list().pop(&mut consumer, steps);
            let local = self.local();
            local.remote = consumer;
            if !node.is_null() {
                // The block goes straight back out: `allocated` is unchanged.
                local.remote_consumed += 1;
            }
            node.cast()
        }
    }

    /// Whether the owner could take a block now, locally or from remote frees (a hint for
    /// remote frees: one may be under way).
    ///
    /// # Safety
    ///
    /// Owner only.
    #[inline]
    pub unsafe fn has_free_block(&self) -> bool {
        // SAFETY: owner-only access.
        let local = unsafe { self.local() };
        !local.free.is_null()
            || local.carved < self.block_count
            || self.remote_list().has_nodes(&local.remote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_of_a_span_finds_its_header_whatever_the_colour() {
        let span_bytes = 64 << 10;
        for i in 1..=(2 * COLOURS) {
            let base = i * span_bytes;
            let header = header_at(base, span_bytes);
            assert_eq!(span_base(header, span_bytes), base);
            assert_eq!(
                header as usize % 128,
                0,
                "header not aligned for CachePadded"
            );
            let first_block = header as usize + HEADER_BYTES;
            // A huge or span-aligned object starts one span later and finds the same header.
            let aligned = base + span_bytes;
            for block in [
                first_block,
                base + span_bytes / 2,
                base + span_bytes - 16,
                aligned,
            ] {
                assert_eq!(SpanHeader::of(block as *mut u8, span_bytes), header);
                // The fast paths' form, from the mask and shift computed once.
                let fast = header_of_block(
                    block as *mut u8,
                    !(span_bytes - 1),
                    colour_shift(span_bytes),
                );
                assert_eq!(fast, header, "block {block:#x}");
            }
        }
    }

    /// Blocks a 64 KiB span holds for the classes of 4-16 KiB, at its worst colour and its
    /// best: the header takes a block's place in the classes that would fill the span, and
    /// four 15 KiB blocks fit beside it where three of 16 KiB do.
    #[test]
    fn the_header_takes_a_blocks_place_in_spans_of_large_aligned_classes() {
        let span_bytes = 64 << 10;
        let blocks = |kib: usize| {
            let class = crate::size_class::class_of(kib << 10);
            assert_eq!(class_bytes(class), kib << 10);
            let counts: Vec<usize> = (0..COLOURS)
                .map(|c| small_layout(class, span_bytes, c * COLOUR_STEP_BYTES).1)
                .collect();
            (*counts.iter().min().unwrap(), *counts.iter().max().unwrap())
        };
        assert_eq!(blocks(4), (15, 15));
        assert_eq!(blocks(8), (7, 7));
        assert_eq!(blocks(10), (6, 6));
        assert_eq!(blocks(12), (5, 5));
        assert_eq!(blocks(14), (4, 4));
        assert_eq!(blocks(15), (4, 4));
        assert_eq!(blocks(16), (3, 3));
        // Every layout keeps its blocks aligned as the class promises, inside the span.
        for class in 0..crate::size_class::class_count(span_bytes) {
            for c in 0..COLOURS {
                let colour = c * COLOUR_STEP_BYTES;
                let (first, count) = small_layout(class, span_bytes, colour);
                assert!(first >= colour + HEADER_BYTES);
                assert_eq!(first % class_align(class), 0);
                assert!(count >= 1 && first + count * class_bytes(class) <= span_bytes);
            }
        }
    }

    #[test]
    fn consecutive_spans_put_their_headers_in_different_cache_sets() {
        let span_bytes = 64 << 10;
        let l1_set = |addr: usize| (addr / 64) % 64;
        let sets: std::collections::HashSet<usize> = (0..COLOURS)
            .map(|i| l1_set(header_at(i * span_bytes, span_bytes) as usize))
            .collect();
        assert_eq!(sets.len(), COLOURS);
    }
}
