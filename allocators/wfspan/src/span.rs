//! Spans: the unit wfspan manages.
//!
//! A span is `span_bytes` of the region (64 KiB by default), aligned to its size. Its
//! [`SpanHeader`] is not in the span: the region begins with a table of headers, one
//! [`HEADER_STRIDE`] apart, span `i`'s at `table + i * HEADER_STRIDE`, so a block's header
//! is `table + ((block - spans_start) >> log2(span_bytes)) * HEADER_STRIDE` — a subtract, a
//! compare against the spans' length (a block outside them is huge), two shifts and an
//! add (`WfSpan::header_of`). Huge mappings, outside the region, keep their header in the
//! mapping, before the object ([`huge_header_of`]).
//!
//! **Why not in the span.** With the header at the span's start, blocks began after it at a
//! multiple of their class's alignment: a class whose blocks fill a span exactly (the powers
//! of two from 4 KiB, 12 KiB) lost a block to it, and the header's page stayed resident
//! beside the blocks: 4 KiB of every 64 KiB span of blocks of 4 KiB and more, 6-8% of
//! them. Under redis with values of 1 B-16 KiB (the `programs` suite's check data), spans of
//! such blocks held 35 MiB, and each carried its header's page. In the table, headers take
//! `HEADER_STRIDE` bytes a span, 0.8% of a 64 KiB span, and a span is all blocks: 8 KiB
//! blocks are eight a span, 16 KiB four. The table also needs no colouring: headers at
//! every span's start sat at addresses equal modulo 64 KiB, in one set of every cache level
//! the low address bits index, and were spread over 2 KiB by a per-span offset; in the
//! table consecutive spans' headers are on different lines by construction.
//!
//! Three kinds share the header:
//!
//! ```text
//!  small span  [blk | blk | blk | ... uncarved ... ]   blocks of one class, carved forwards
//!                                                      from the span's start
//!  span run    [object ......................... ]      1-32 spans, one object, at the start
//!  huge        [header | object ................... ]  its own mapping, the header in it
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
use crate::size_class::class_bytes;
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

/// [`SpanHeader::owner`] of a span no heap owns: not null, so that the free fast path may
/// compare the owner with the caller's heap without first checking that the caller has one;
/// an address no heap has (heaps are pages of their own, never at the first page).
pub const NO_OWNER: *mut Heap = ptr::dangling_mut();

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
    /// Index of the span in the region (runs: of their first span); `u32::MAX` for a huge
    /// mapping.
    pub index: u32,
    /// Where the span's (or run's, or huge mapping's) memory starts: its first block, or its
    /// object when `object_offset` is 0.
    pub base: usize,
    /// Huge blocks: offset of the object from the start of the mapping (past the header);
    /// 0 for span runs and small spans, whose memory is all blocks.
    pub object_offset: usize,
    /// Huge blocks: the mapping's start and length.
    pub mapping: (usize, usize),
    /// Free span runs: the offset from the run's start past which its memory is known to
    /// read zero (fresh from the region, or given back to the OS); [`DIRTY`] when nothing is
    /// known. A zeroed allocation of a run zeroes only what lies before it.
    pub zero_from: usize,
    /// The heap that owns a small span; [`NO_OWNER`] when none does (published, discarded,
    /// cached by nobody), and always for span runs and huge mappings, so that a free may
    /// compare it with its heap before reading `kind` — and with a null heap (a thread
    /// without one) too, which no owner equals. Compared, never dereferenced, by non-owners.
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

/// Bytes a huge mapping reserves for its header before the object.
pub const HEADER_BYTES: usize = core::mem::size_of::<SpanHeader>().next_multiple_of(64);

/// Distance between two headers of the region's table: the header's size rounded up to a
/// power of two, so that a span's index becomes its header's offset by one shift.
pub const HEADER_STRIDE: usize = core::mem::size_of::<SpanHeader>().next_power_of_two();
/// `log2(HEADER_STRIDE)`.
pub const HEADER_STRIDE_SHIFT: u32 = HEADER_STRIDE.trailing_zeros();
// A header is aligned for `CachePadded` wherever the table puts it.
const _: () = assert!(HEADER_STRIDE.is_multiple_of(core::mem::align_of::<SpanHeader>()));

/// The bytes of header table a region of `region_bytes` reserves at its start for spans of
/// `span_bytes`: a header for every span the whole region could hold, rounded up to a span
/// so that the spans after it stay aligned.
#[inline]
pub const fn table_bytes(region_bytes: usize, span_bytes: usize) -> usize {
    (region_bytes / span_bytes * HEADER_STRIDE).next_multiple_of(span_bytes)
}

/// The header of the huge mapping holding `block`: at the mapping's start, or, for an
/// object aligned to a span or more, one span before the object (`block - 1`, masked, so
/// that an object aligned to the span size finds it).
#[inline]
pub fn huge_header_of(block: *mut u8, span_bytes: usize) -> *mut SpanHeader {
    ((block as usize - 1) & !(span_bytes - 1)) as *mut SpanHeader
}

/// How many blocks of `class` a span of `span_bytes` holds: the span is all blocks, the
/// first at its start (aligned to the span size, so to every class's alignment), and the
/// rest one after the other.
#[inline]
pub const fn blocks_per_span(class: usize, span_bytes: usize) -> usize {
    span_bytes / class_bytes(class)
}

impl SpanHeader {
    /// Writes a fresh header at `at` for span `index` (`u32::MAX` for a huge mapping) whose
    /// memory starts at `base`.
    ///
    /// # Safety
    ///
    /// `at` is the writable, exclusively owned header of a span, run or huge mapping.
    pub unsafe fn init(at: *mut SpanHeader, index: u32, base: usize) {
        // SAFETY: the caller gives us the memory.
        unsafe {
            at.write(SpanHeader {
                kind: Kind::Small,
                run_class: 0,
                class: 0,
                block_bytes: 0,
                block_count: 0,
                index,
                base,
                object_offset: 0,
                mapping: (0, 0),
                zero_from: DIRTY,
                owner: AtomicPtr::new(NO_OWNER),
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
            (*span).object_offset = 0;
            (*span).block_count = blocks_per_span(class, span_bytes) as u32;
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
            (*span).owner.store(NO_OWNER, Ordering::Relaxed);
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
    /// Owner only.
    #[inline]
    pub unsafe fn take_local(&self) -> *mut u8 {
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
        unsafe { self.carve() }
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
    /// Owner only.
    #[inline]
    pub unsafe fn carve(&self) -> *mut u8 {
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
        let first = self.base + local.carved as usize * bytes;
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
    use crate::size_class::class_align;

    #[test]
    fn the_header_table_is_a_small_share_of_the_region() {
        // 384 bytes of header, 512 in the table: under 1% of a 64 KiB span.
        const { assert!(core::mem::size_of::<SpanHeader>() <= HEADER_STRIDE) };
        const { assert!(HEADER_STRIDE * 100 < (64 << 10)) };
        assert_eq!(1 << HEADER_STRIDE_SHIFT, HEADER_STRIDE);
        for span_bytes in [16 << 10, 64 << 10, 4 << 20] {
            let region = 1 << 30;
            let table = table_bytes(region, span_bytes);
            assert_eq!(table % span_bytes, 0, "spans after the table stay aligned");
            assert!(table >= region / span_bytes * HEADER_STRIDE);
            assert!(table <= region / 32, "{span_bytes}: {table} of {region}");
        }
    }

    /// A span is all blocks: the classes that fill it exactly lose none to a header.
    #[test]
    fn a_span_holds_as_many_blocks_as_fit_in_it() {
        let span_bytes = 64 << 10;
        let blocks = |bytes: usize| {
            let class = crate::size_class::class_of(bytes);
            assert_eq!(class_bytes(class), bytes);
            blocks_per_span(class, span_bytes)
        };
        assert_eq!(blocks(16), 4096);
        assert_eq!(blocks(4 << 10), 16);
        assert_eq!(blocks(8 << 10), 8);
        assert_eq!(blocks(10 << 10), 6);
        assert_eq!(blocks(12 << 10), 5);
        assert_eq!(blocks(16 << 10), 4);
        for class in 0..crate::size_class::class_count(span_bytes) {
            let count = blocks_per_span(class, span_bytes);
            assert!(count >= 1 && count * class_bytes(class) <= span_bytes);
            assert!((count + 1) * class_bytes(class) > span_bytes);
            // The span's start is aligned to the span size: every block is aligned as its
            // class promises.
            assert_eq!(class_bytes(class) % class_align(class), 0);
        }
    }

    #[test]
    fn a_huge_object_finds_the_header_before_it() {
        let span_bytes = 64 << 10;
        let base = 7 * span_bytes;
        // Aligned below a span: the header at the mapping's start, the object after it.
        for align in [16, 64, 4096] {
            let object = base + HEADER_BYTES.next_multiple_of(align);
            assert_eq!(
                huge_header_of(object as *mut u8, span_bytes) as usize,
                base,
                "align {align}"
            );
        }
        // Aligned to a span or more: one span before the object, inside the mapping.
        for align in [span_bytes, 4 * span_bytes] {
            let object = base + align;
            let header = huge_header_of(object as *mut u8, span_bytes) as usize;
            assert_eq!(header, object - span_bytes);
            assert!(header >= base && header + HEADER_BYTES <= object);
        }
    }
}
