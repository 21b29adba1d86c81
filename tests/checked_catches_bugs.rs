//! `Checked` catches what its module documentation says it catches.
//!
//! Deliberately broken allocators written here (overlapping blocks, the same block twice,
//! ignored alignment, dirty "zeroed" memory, lying counters) and deliberate caller bugs on a
//! correct allocator (double free, foreign free, interior free, wrong size or alignment,
//! reallocation of a freed block) must each be reported as exactly one [`Violation`] naming
//! the handles and layouts involved. A faulting deallocation must not reach the wrapped
//! allocator, which must stay usable. Every test allocator counts the deallocations that
//! reach it, so "not forwarded" is measured, not assumed.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use alloclab::checked::Block;
use alloclab::{
    AllocError, AllocErrorKind, Allocator, Checked, HostAllocator, Policy, Stats, SystemHeap,
    Violation,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).expect("test layouts are valid")
}

fn block<H>(handle: H, layout: Layout) -> Block<H> {
    Block { handle, layout }
}

/// `ptr + offset`, for handles that point inside a block.
fn offset(ptr: NonNull<u8>, offset: usize) -> NonNull<u8> {
    // SAFETY: every caller stays inside the block (or arena) `ptr` points to.
    unsafe { ptr.add(offset) }
}

/// The message of a caught panic.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else {
        panic!("panic payload is not a string")
    }
}

/// Runs `f`, expecting it to panic, and returns the panic message.
fn expect_panic(f: impl FnOnce()) -> String {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => panic!("expected a panic, but the call returned"),
        Err(payload) => panic_message(payload),
    }
}

/// After a fault, the checked heap still hands out, checks and takes back blocks without a
/// new violation.
fn assert_still_usable<A: HostAllocator>(heap: &Checked<A>) {
    let before = heap.violations().len();
    let live = heap.live_blocks();
    let l = layout(40, 8);
    let p = heap.allocate(l).expect("the wrapped heap still allocates");
    // SAFETY: `p` is a live block of 40 bytes.
    unsafe { p.as_ptr().write_bytes(0x5A, l.size()) };
    // SAFETY: `p` was just allocated with `l` and is freed once.
    unsafe { heap.deallocate(p, l) };
    assert_eq!(
        heap.violations().len(),
        before,
        "a clean allocate/free was reported"
    );
    assert_eq!(heap.live_blocks(), live);
}

// ---------------------------------------------------------------------------------------------
// A leaked arena for the broken host heaps
// ---------------------------------------------------------------------------------------------

const ARENA_BYTES: usize = 64 * 1024;
const ARENA_ALIGN: usize = 4096;

/// A leaked, 4096-aligned buffer that a broken bump allocator carves blocks from.
struct Arena {
    base: NonNull<u8>,
}

// SAFETY: the arena is leaked, so it lives for the whole process; the allocator only hands
// out pointers into it and never reads or writes it after creation.
unsafe impl Send for Arena {}
// SAFETY: as for `Send`.
unsafe impl Sync for Arena {}

impl Arena {
    /// A new arena, all zero except the bytes listed in `dirt` (offset, value).
    fn new(dirt: &[(usize, u8)]) -> Self {
        let l = layout(ARENA_BYTES, ARENA_ALIGN);
        // SAFETY: `l` has a non-zero size.
        let base = NonNull::new(unsafe { std::alloc::alloc_zeroed(l) }).expect("arena");
        for &(at, value) in dirt {
            assert!(at < ARENA_BYTES);
            // SAFETY: `at` is inside the arena, which nothing else uses yet.
            unsafe { base.as_ptr().add(at).write(value) };
        }
        Self { base }
    }

    fn at(&self, offset: usize) -> NonNull<u8> {
        assert!(offset < ARENA_BYTES);
        // SAFETY: `offset` is inside the arena.
        unsafe { self.base.add(offset) }
    }
}

/// How a [`BuggyBump`] is broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    /// Not broken: the control that shows the checker is quiet on a correct bump allocator.
    None,
    /// Advances the bump pointer by half the block's size, so consecutive blocks overlap.
    ShortAdvance,
    /// Returns the arena's first byte on every call.
    SameBlock,
    /// Never rounds the bump pointer up to the alignment, and starts one byte into the arena.
    IgnoresAlignment,
    /// `allocate_zeroed` returns the arena's bytes without zeroing them.
    DirtyZeroed,
}

/// A bump allocator over a leaked arena that never reuses memory, with one [`Bug`].
struct BuggyBump {
    arena: Arena,
    bug: Bug,
    next: Mutex<usize>,
    /// Deallocations that reached this allocator.
    frees: AtomicUsize,
}

impl BuggyBump {
    fn new(bug: Bug) -> Self {
        Self::with_dirt(bug, &[])
    }

    fn with_dirt(bug: Bug, dirt: &[(usize, u8)]) -> Self {
        Self {
            arena: Arena::new(dirt),
            bug,
            next: Mutex::new(if bug == Bug::IgnoresAlignment { 1 } else { 0 }),
            frees: AtomicUsize::new(0),
        }
    }

    fn base(&self) -> NonNull<u8> {
        self.arena.base
    }

    fn frees(&self) -> usize {
        self.frees.load(Ordering::SeqCst)
    }
}

impl Allocator for BuggyBump {
    type Handle = NonNull<u8>;

    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        if self.bug == Bug::SameBlock {
            return Ok(self.arena.base);
        }
        let mut next = self.next.lock().unwrap();
        let start = if self.bug == Bug::IgnoresAlignment {
            *next
        } else {
            next.next_multiple_of(layout.align())
        };
        let advance = if self.bug == Bug::ShortAdvance {
            (layout.size() / 2).max(1)
        } else {
            layout.size().max(1)
        };
        if start + layout.size() > ARENA_BYTES {
            return Err(AllocError::new(layout, AllocErrorKind::OutOfMemory));
        }
        *next = start + advance;
        Ok(self.arena.at(start))
    }

    unsafe fn deallocate(&self, _handle: NonNull<u8>, _layout: Layout) {
        self.frees.fetch_add(1, Ordering::SeqCst);
    }

    fn name(&self) -> &str {
        "buggy-bump"
    }

    fn stats(&self) -> Stats {
        Stats::default()
    }
}

impl HostAllocator for BuggyBump {
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let ptr = self.allocate(layout)?;
        if self.bug != Bug::DirtyZeroed {
            // SAFETY: `ptr` is a block of at least `layout.size()` bytes in the arena.
            unsafe { ptr.as_ptr().write_bytes(0, layout.size()) };
        }
        Ok(ptr)
    }
}

// ---------------------------------------------------------------------------------------------
// A correct heap with accurate counters, and one that lies about them
// ---------------------------------------------------------------------------------------------

static SYSTEM_HEAP: SystemHeap = SystemHeap::new();

/// The system heap with exact counters; refuses blocks larger than `max_size`.
struct CountingHeap {
    max_size: usize,
    live_bytes: AtomicU64,
    allocations: AtomicU64,
    /// Deallocations that reached this allocator (directly or through `reallocate`).
    deallocations: AtomicU64,
    /// Calls of `reallocate` that reached this allocator.
    reallocations: AtomicUsize,
}

impl CountingHeap {
    fn new() -> Self {
        Self::with_max_size(usize::MAX)
    }

    fn with_max_size(max_size: usize) -> Self {
        Self {
            max_size,
            live_bytes: AtomicU64::new(0),
            allocations: AtomicU64::new(0),
            deallocations: AtomicU64::new(0),
            reallocations: AtomicUsize::new(0),
        }
    }

    fn frees(&self) -> u64 {
        self.deallocations.load(Ordering::SeqCst)
    }

    fn reallocations(&self) -> usize {
        self.reallocations.load(Ordering::SeqCst)
    }
}

impl Allocator for CountingHeap {
    type Handle = NonNull<u8>;

    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        if layout.size() > self.max_size {
            return Err(AllocError::new(layout, AllocErrorKind::OutOfMemory));
        }
        let ptr = SYSTEM_HEAP.allocate(layout)?;
        self.live_bytes
            .fetch_add(layout.size() as u64, Ordering::SeqCst);
        self.allocations.fetch_add(1, Ordering::SeqCst);
        Ok(ptr)
    }

    unsafe fn deallocate(&self, handle: NonNull<u8>, layout: Layout) {
        self.deallocations.fetch_add(1, Ordering::SeqCst);
        self.live_bytes
            .fetch_sub(layout.size() as u64, Ordering::SeqCst);
        // SAFETY: the caller passes a live block of this heap, which took it from the system
        // heap with this layout.
        unsafe { SYSTEM_HEAP.deallocate(handle, layout) }
    }

    fn name(&self) -> &str {
        "counting"
    }

    fn stats(&self) -> Stats {
        Stats {
            live_bytes: Some(self.live_bytes.load(Ordering::SeqCst)),
            allocations: Some(self.allocations.load(Ordering::SeqCst)),
            deallocations: Some(self.deallocations.load(Ordering::SeqCst)),
            ..Stats::default()
        }
    }
}

impl HostAllocator for CountingHeap {
    unsafe fn reallocate(
        &self,
        ptr: NonNull<u8>,
        old_layout: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        self.reallocations.fetch_add(1, Ordering::SeqCst);
        let new_layout = Layout::from_size_align(new_size, old_layout.align())
            .map_err(|_| AllocError::new(old_layout, AllocErrorKind::SizeUnsupported))?;
        let new_ptr = self.allocate(new_layout)?;
        // SAFETY: both blocks are live and distinct and at least `min(old, new)` bytes long;
        // the caller guarantees `ptr` is live with `old_layout`.
        unsafe {
            new_ptr
                .as_ptr()
                .copy_from_nonoverlapping(ptr.as_ptr(), old_layout.size().min(new_size));
            self.deallocate(ptr, old_layout);
        }
        Ok(new_ptr)
    }
}

/// Which counter a [`LyingStats`] gets wrong.
#[derive(Clone, Copy, Debug)]
enum Lie {
    /// Reports this many live bytes fewer than there are.
    HidesLiveBytes(u64),
    /// Reports this many live bytes more than requested (allowed: rounded-up sizes).
    PadsLiveBytes(u64),
    /// Counts every `allocate_zeroed` as two allocations.
    CountsZeroedAllocationsTwice,
    /// Does not count the deallocation inside a `reallocate`.
    ForgetsDeallocationsInReallocate,
}

/// A correct heap whose [`Stats`] lie.
struct LyingStats {
    heap: CountingHeap,
    lie: Lie,
    /// How far the lying counter has drifted.
    drift: AtomicU64,
}

impl LyingStats {
    fn new(lie: Lie) -> Self {
        Self {
            heap: CountingHeap::new(),
            lie,
            drift: AtomicU64::new(0),
        }
    }
}

impl Allocator for LyingStats {
    type Handle = NonNull<u8>;

    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.heap.allocate(layout)
    }

    unsafe fn deallocate(&self, handle: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded under the caller's guarantee.
        unsafe { self.heap.deallocate(handle, layout) }
    }

    fn name(&self) -> &str {
        "liar"
    }

    fn stats(&self) -> Stats {
        let mut s = self.heap.stats();
        let drift = self.drift.load(Ordering::SeqCst);
        match self.lie {
            Lie::HidesLiveBytes(n) => s.live_bytes = s.live_bytes.map(|b| b.saturating_sub(n)),
            Lie::PadsLiveBytes(n) => s.live_bytes = s.live_bytes.map(|b| b + n),
            Lie::CountsZeroedAllocationsTwice => s.allocations = s.allocations.map(|a| a + drift),
            Lie::ForgetsDeallocationsInReallocate => {
                s.deallocations = s.deallocations.map(|d| d - drift);
            }
        }
        s
    }
}

impl HostAllocator for LyingStats {
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let ptr = self.heap.allocate_zeroed(layout)?;
        if let Lie::CountsZeroedAllocationsTwice = self.lie {
            self.drift.fetch_add(1, Ordering::SeqCst);
        }
        Ok(ptr)
    }

    unsafe fn reallocate(
        &self,
        ptr: NonNull<u8>,
        old_layout: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        // SAFETY: forwarded under the caller's guarantee.
        let new_ptr = unsafe { self.heap.reallocate(ptr, old_layout, new_size) }?;
        if let Lie::ForgetsDeallocationsInReallocate = self.lie {
            self.drift.fetch_add(1, Ordering::SeqCst);
        }
        Ok(new_ptr)
    }
}

// ---------------------------------------------------------------------------------------------
// Allocators whose handles are pool offsets, not pointers
// ---------------------------------------------------------------------------------------------

/// A bump allocator over offsets `0..POOL` (no memory behind them) that advances by half the
/// block's size: consecutive blocks overlap.
struct ShortOffsetBump {
    next: Mutex<usize>,
    frees: AtomicUsize,
}

const POOL: usize = 1 << 20;

impl ShortOffsetBump {
    fn new() -> Self {
        Self {
            next: Mutex::new(0),
            frees: AtomicUsize::new(0),
        }
    }
}

impl Allocator for ShortOffsetBump {
    type Handle = usize;

    fn allocate(&self, layout: Layout) -> Result<usize, AllocError> {
        let mut next = self.next.lock().unwrap();
        let start = next.next_multiple_of(layout.align());
        if start + layout.size() > POOL {
            return Err(AllocError::new(layout, AllocErrorKind::OutOfMemory));
        }
        *next = start + (layout.size() / 2).max(1);
        Ok(start)
    }

    unsafe fn deallocate(&self, _handle: usize, _layout: Layout) {
        self.frees.fetch_add(1, Ordering::SeqCst);
    }

    fn name(&self) -> &str {
        "short-offset-bump"
    }

    fn stats(&self) -> Stats {
        Stats::default()
    }
}

/// A correct pool of `SLOTS` fixed 256-byte slots named by offset, with exact counters.
struct OffsetSlab {
    free: Mutex<Vec<usize>>,
    live_bytes: AtomicU64,
    allocations: AtomicU64,
    deallocations: AtomicU64,
}

const SLOT: usize = 256;
const SLOTS: usize = 8;

impl OffsetSlab {
    fn new() -> Self {
        Self {
            // Pop from the end: slot 0 first.
            free: Mutex::new((0..SLOTS).rev().map(|i| i * SLOT).collect()),
            live_bytes: AtomicU64::new(0),
            allocations: AtomicU64::new(0),
            deallocations: AtomicU64::new(0),
        }
    }
}

impl Allocator for OffsetSlab {
    type Handle = usize;

    fn allocate(&self, layout: Layout) -> Result<usize, AllocError> {
        if layout.size() > SLOT || layout.align() > SLOT {
            return Err(AllocError::new(layout, AllocErrorKind::SizeUnsupported));
        }
        let offset = self
            .free
            .lock()
            .unwrap()
            .pop()
            .ok_or(AllocError::new(layout, AllocErrorKind::OutOfMemory))?;
        self.live_bytes
            .fetch_add(layout.size() as u64, Ordering::SeqCst);
        self.allocations.fetch_add(1, Ordering::SeqCst);
        Ok(offset)
    }

    unsafe fn deallocate(&self, handle: usize, layout: Layout) {
        self.live_bytes
            .fetch_sub(layout.size() as u64, Ordering::SeqCst);
        self.deallocations.fetch_add(1, Ordering::SeqCst);
        self.free.lock().unwrap().push(handle);
    }

    fn name(&self) -> &str {
        "offset-slab"
    }

    fn stats(&self) -> Stats {
        Stats {
            live_bytes: Some(self.live_bytes.load(Ordering::SeqCst)),
            allocations: Some(self.allocations.load(Ordering::SeqCst)),
            deallocations: Some(self.deallocations.load(Ordering::SeqCst)),
            ..Stats::default()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Allocator bugs
// ---------------------------------------------------------------------------------------------

#[test]
fn a_correct_bump_allocator_is_not_reported() {
    let heap = Checked::with_policy(
        BuggyBump::with_dirt(Bug::None, &[(5, 0xFF)]),
        Policy::Record,
    );
    let a = heap.allocate(layout(64, 8)).unwrap();
    let b = heap.allocate(layout(1, 1)).unwrap();
    let c = heap.allocate(layout(100, 64)).unwrap();
    let z = heap.allocate_zeroed(layout(32, 16)).unwrap();
    assert_eq!(heap.live_blocks(), 4);
    assert_eq!(heap.live_bytes(), 64 + 1 + 100 + 32);
    // SAFETY: each block is live with the layout it was allocated with, freed once.
    unsafe {
        heap.deallocate(a, layout(64, 8));
        heap.deallocate(b, layout(1, 1));
        heap.deallocate(c, layout(100, 64));
        heap.deallocate(z, layout(32, 16));
    }
    assert_eq!(heap.violations(), vec![]);
    assert_eq!(heap.inner().frees(), 4);
    assert_eq!(heap.live_blocks(), 0);
    assert_eq!(heap.live_bytes(), 0);
}

#[test]
fn overlapping_blocks_are_reported_with_both_handles_and_layouts() {
    let heap = Checked::with_policy(BuggyBump::new(Bug::ShortAdvance), Policy::Record);
    let base = heap.inner().base();
    let la = layout(64, 8);
    let lb = layout(32, 8);
    let a = heap.allocate(la).unwrap();
    assert_eq!(heap.violations(), vec![]);
    let b = heap.allocate(lb).unwrap();
    assert_eq!((a, b), (base, offset(base, 32)));
    assert_eq!(
        heap.violations(),
        vec![Violation::Overlap {
            new: block(b, lb),
            live: block(a, la),
        }]
    );
    // Both blocks are live as far as the caller knows: freeing them is legal and reaches
    // the allocator.
    // SAFETY: `a` and `b` are live with these layouts, freed once each.
    unsafe {
        heap.deallocate(a, la);
        heap.deallocate(b, lb);
    }
    assert_eq!(heap.violations().len(), 1);
    assert_eq!(heap.inner().frees(), 2);
    assert_eq!(heap.live_blocks(), 0);
}

#[test]
fn a_block_overlapping_several_live_blocks_is_reported_once_per_live_block() {
    let heap = Checked::with_policy(BuggyBump::new(Bug::ShortAdvance), Policy::Record);
    let (la, lb, lc, ld) = (layout(64, 8), layout(16, 8), layout(64, 8), layout(8, 8));
    let a = heap.allocate(la).unwrap(); // 0..64
    let b = heap.allocate(lb).unwrap(); // 32..48: inside a
    let c = heap.allocate(lc).unwrap(); // 40..104: overlaps a and b
    let d = heap.allocate(ld).unwrap(); // 72..80: overlaps c only
    assert_eq!(
        heap.violations(),
        vec![
            Violation::Overlap {
                new: block(b, lb),
                live: block(a, la),
            },
            // Nearest live block first.
            Violation::Overlap {
                new: block(c, lc),
                live: block(b, lb),
            },
            Violation::Overlap {
                new: block(c, lc),
                live: block(a, la),
            },
            Violation::Overlap {
                new: block(d, ld),
                live: block(c, lc),
            },
        ]
    );
    // SAFETY: all four are live with these layouts, freed once each.
    unsafe {
        heap.deallocate(a, la);
        heap.deallocate(b, lb);
        heap.deallocate(c, lc);
        heap.deallocate(d, ld);
    }
    assert_eq!(heap.violations().len(), 4);
    assert_eq!(heap.inner().frees(), 4);
    assert_eq!(heap.live_blocks(), 0);
}

#[test]
fn a_block_overlapping_only_freed_blocks_is_not_reported() {
    let heap = Checked::with_policy(BuggyBump::new(Bug::ShortAdvance), Policy::Record);
    let l = layout(64, 8);
    let a = heap.allocate(l).unwrap();
    // SAFETY: `a` is live with `l`.
    unsafe { heap.deallocate(a, l) };
    let b = heap.allocate(l).unwrap(); // 32..96 overlaps the freed 0..64 only
    assert_eq!(b, offset(a, 32));
    assert_eq!(heap.violations(), vec![]);
    // SAFETY: `b` is live with `l`.
    unsafe { heap.deallocate(b, l) };
    assert_eq!(heap.violations(), vec![]);
    assert_eq!(heap.inner().frees(), 2);
}

#[test]
fn a_block_handed_out_twice_is_reported_as_an_overlap_at_the_same_address() {
    let heap = Checked::with_policy(BuggyBump::new(Bug::SameBlock), Policy::Record);
    let l1 = layout(48, 16);
    let l2 = layout(16, 8);
    let a = heap.allocate(l1).unwrap();
    let b = heap.allocate(l2).unwrap();
    assert_eq!(a, b);
    assert_eq!(
        heap.violations(),
        vec![Violation::Overlap {
            new: block(a, l2),
            live: block(a, l1),
        }]
    );
    assert_eq!(heap.live_blocks(), 2, "both hand-outs are tracked apart");
    assert_eq!(heap.live_bytes(), 48 + 16);
    // The caller holds two blocks and frees each once: both frees are legal.
    // SAFETY: two live blocks at this address, one per layout, each freed once.
    unsafe {
        heap.deallocate(a, l1);
        heap.deallocate(b, l2);
    }
    assert_eq!(heap.violations().len(), 1);
    assert_eq!(heap.inner().frees(), 2);
    assert_eq!(heap.live_blocks(), 0);
    // A third free is a double free and does not reach the allocator.
    // SAFETY: deliberately wrong; Checked catches it and does not forward it.
    unsafe { heap.deallocate(a, l2) };
    assert_eq!(
        heap.violations()[1..],
        [Violation::DoubleFree {
            handle: a,
            layout: l2,
            allocated_with: l2,
        }]
    );
    assert_eq!(heap.inner().frees(), 2);
}

#[test]
fn two_blocks_handed_out_at_one_address_can_be_freed_in_either_order() {
    let heap = Checked::with_policy(BuggyBump::new(Bug::SameBlock), Policy::Record);
    let l1 = layout(48, 16);
    let l2 = layout(16, 8);
    let a = heap.allocate(l1).unwrap();
    let b = heap.allocate(l2).unwrap();
    assert_eq!(heap.violations().len(), 1, "the overlap itself");
    // The younger block first: the caller frees it with the layout it was allocated with.
    // SAFETY: two live blocks at this address, one per layout, each freed once.
    unsafe {
        heap.deallocate(b, l2);
        heap.deallocate(a, l1);
    }
    assert_eq!(heap.violations().len(), 1, "{:?}", heap.violations());
    assert_eq!(heap.inner().frees(), 2);
    assert_eq!(heap.live_blocks(), 0);
}

#[test]
fn a_block_that_breaks_the_requested_alignment_is_reported_as_misaligned() {
    let heap = Checked::with_policy(BuggyBump::new(Bug::IgnoresAlignment), Policy::Record);
    let base = heap.inner().base();
    // Offset 1 honours alignment 1: not a violation.
    let a = heap.allocate(layout(3, 1)).unwrap();
    assert_eq!(a, offset(base, 1));
    assert_eq!(heap.violations(), vec![]);
    // Offset 4 does not honour alignment 8.
    let l = layout(24, 8);
    let b = heap.allocate(l).unwrap();
    assert_eq!(b, offset(base, 4));
    assert_eq!(
        heap.violations(),
        vec![Violation::Misaligned { block: block(b, l) }]
    );
    // Offset 28 happens to honour alignment 4: still only the one violation.
    let c = heap.allocate(layout(8, 4)).unwrap();
    assert_eq!(c, offset(base, 28));
    assert_eq!(heap.violations().len(), 1);
    // SAFETY: all three are live with these layouts, freed once each.
    unsafe {
        heap.deallocate(a, layout(3, 1));
        heap.deallocate(b, l);
        heap.deallocate(c, layout(8, 4));
    }
    assert_eq!(heap.violations().len(), 1);
    assert_eq!(
        heap.inner().frees(),
        3,
        "a misaligned block is still freed normally"
    );
}

#[test]
fn allocate_zeroed_returning_a_dirty_block_is_reported_with_the_first_nonzero_offset() {
    let heap = Checked::with_policy(
        BuggyBump::with_dirt(Bug::DirtyZeroed, &[(37, 0xA5), (50, 0x5A)]),
        Policy::Record,
    );
    let base = heap.inner().base();
    let l = layout(64, 16);
    let z = heap.allocate_zeroed(l).unwrap();
    assert_eq!(z, base);
    assert_eq!(
        heap.violations(),
        vec![Violation::NotZeroed {
            block: block(z, l),
            offset: 37,
        }]
    );
    // A dirty block from plain `allocate` is fine; a zeroed one past the dirt is too.
    let a = heap.allocate(layout(64, 16)).unwrap();
    let clean = heap.allocate_zeroed(layout(64, 16)).unwrap();
    assert_eq!(clean, offset(base, 128));
    assert_eq!(heap.violations().len(), 1);
    // SAFETY: all three are live with these layouts, freed once each.
    unsafe {
        heap.deallocate(z, l);
        heap.deallocate(a, l);
        heap.deallocate(clean, l);
    }
    assert_eq!(heap.violations().len(), 1);
    assert_eq!(heap.inner().frees(), 3);
}

#[test]
fn allocate_zeroed_on_a_dirty_arena_is_not_reported_when_the_allocator_zeroes() {
    let heap = Checked::with_policy(
        BuggyBump::with_dirt(Bug::None, &[(37, 0xA5)]),
        Policy::Record,
    );
    let l = layout(64, 16);
    let z = heap.allocate_zeroed(l).unwrap();
    assert_eq!(heap.violations(), vec![]);
    // SAFETY: `z` is live with `l`.
    unsafe { heap.deallocate(z, l) };
    assert_eq!(heap.violations(), vec![]);
}

// ---------------------------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------------------------

#[test]
fn accurate_stats_pass_check_stats_after_allocations_frees_and_reallocations() {
    let counting = CountingHeap::new();
    // Blocks allocated before wrapping: check_stats compares counts since wrapping.
    let before = layout(1000, 8);
    let early: Vec<_> = (0..3).map(|_| counting.allocate(before).unwrap()).collect();
    let heap = Checked::with_policy(counting, Policy::Record);
    assert_eq!(heap.check_stats(), Ok(()));

    let l = layout(100, 16);
    let a = heap.allocate(l).unwrap();
    let b = heap.allocate_zeroed(layout(28, 4)).unwrap();
    assert_eq!(heap.check_stats(), Ok(()));
    // SAFETY: `a` is live with `l`.
    let a = unsafe { heap.reallocate(a, l, 300) }.unwrap();
    assert_eq!(heap.check_stats(), Ok(()));
    // SAFETY: `b` is live with (28, 4).
    unsafe { heap.deallocate(b, layout(28, 4)) };
    assert_eq!(heap.check_stats(), Ok(()));
    // SAFETY: `a` is live with (300, 16) after the reallocation.
    unsafe { heap.deallocate(a, layout(300, 16)) };
    assert_eq!(heap.check_stats(), Ok(()));
    assert_eq!(heap.violations(), vec![]);

    // The check had something to compare: the heap really counted these operations.
    let s = heap.stats();
    assert_eq!(s.allocations, Some(3 + 3));
    assert_eq!(s.deallocations, Some(3));
    assert_eq!(s.live_bytes, Some(3000));
    assert_eq!(heap.inner().reallocations(), 1);

    for p in early {
        // SAFETY: allocated above from the wrapped heap with `before`, freed once, outside
        // the checker (which never saw it).
        unsafe { heap.inner().deallocate(p, before) };
    }
}

#[test]
fn under_reported_live_bytes_fail_check_stats() {
    let heap = Checked::with_policy(LyingStats::new(Lie::HidesLiveBytes(1)), Policy::Record);
    let a = heap.allocate(layout(100, 8)).unwrap();
    let b = heap.allocate(layout(28, 4)).unwrap();
    let expected = Violation::StatsInconsistent {
        counter: "live_bytes",
        checker: 128,
        allocator: 127,
    };
    assert_eq!(heap.check_stats(), Err(expected.clone()));
    assert_eq!(heap.violations(), vec![expected]);
    // SAFETY: both live with these layouts.
    unsafe {
        heap.deallocate(a, layout(100, 8));
        heap.deallocate(b, layout(28, 4));
    }
}

#[test]
fn over_reported_live_bytes_pass_check_stats() {
    let heap = Checked::with_policy(LyingStats::new(Lie::PadsLiveBytes(64)), Policy::Record);
    let a = heap.allocate(layout(100, 8)).unwrap();
    assert_eq!(heap.check_stats(), Ok(()));
    // SAFETY: live with this layout.
    unsafe { heap.deallocate(a, layout(100, 8)) };
    assert_eq!(heap.check_stats(), Ok(()));
    assert_eq!(heap.violations(), vec![]);
}

#[test]
fn a_miscounted_allocation_fails_check_stats() {
    let heap = Checked::with_policy(
        LyingStats::new(Lie::CountsZeroedAllocationsTwice),
        Policy::Record,
    );
    let a = heap.allocate(layout(8, 8)).unwrap();
    assert_eq!(heap.check_stats(), Ok(()));
    let z = heap.allocate_zeroed(layout(8, 8)).unwrap();
    let expected = Violation::StatsInconsistent {
        counter: "allocations",
        checker: 2,
        allocator: 3,
    };
    assert_eq!(heap.check_stats(), Err(expected.clone()));
    assert_eq!(heap.violations(), vec![expected]);
    // SAFETY: both live with this layout.
    unsafe {
        heap.deallocate(a, layout(8, 8));
        heap.deallocate(z, layout(8, 8));
    }
}

#[test]
fn a_missed_deallocation_fails_check_stats() {
    let heap = Checked::with_policy(
        LyingStats::new(Lie::ForgetsDeallocationsInReallocate),
        Policy::Record,
    );
    let a = heap.allocate(layout(8, 8)).unwrap();
    let b = heap.allocate(layout(8, 8)).unwrap();
    // SAFETY: `a` is live with this layout.
    unsafe { heap.deallocate(a, layout(8, 8)) };
    assert_eq!(heap.check_stats(), Ok(()));
    // SAFETY: `b` is live with this layout.
    let b = unsafe { heap.reallocate(b, layout(8, 8), 16) }.unwrap();
    // Allocations agree (2 + 1 for the reallocation); deallocations do not.
    let expected = Violation::StatsInconsistent {
        counter: "deallocations",
        checker: 2,
        allocator: 1,
    };
    assert_eq!(heap.check_stats(), Err(expected.clone()));
    assert_eq!(heap.violations(), vec![expected]);
    // SAFETY: `b` is live with (16, 8).
    unsafe { heap.deallocate(b, layout(16, 8)) };
}

#[test]
fn under_the_panic_policy_lying_stats_panic_naming_the_counter() {
    let heap = Checked::new(LyingStats::new(Lie::HidesLiveBytes(8)));
    let a = heap.allocate(layout(64, 8)).unwrap();
    let msg = expect_panic(|| {
        let _ = heap.check_stats();
    });
    assert!(msg.contains("Checked<liar>"), "{msg}");
    assert!(msg.contains("live_bytes = 56"), "{msg}");
    assert!(msg.contains("expects 64"), "{msg}");
    // SAFETY: live with this layout.
    unsafe { heap.deallocate(a, layout(64, 8)) };
}

// ---------------------------------------------------------------------------------------------
// Caller bugs on a correct allocator
// ---------------------------------------------------------------------------------------------

fn counting() -> Checked<CountingHeap> {
    Checked::with_policy(CountingHeap::new(), Policy::Record)
}

#[test]
fn a_double_free_is_reported_with_both_layouts_and_not_forwarded() {
    let heap = counting();
    let l = layout(48, 16);
    let p = heap.allocate(l).unwrap();
    // SAFETY: `p` is live with `l`.
    unsafe { heap.deallocate(p, l) };
    assert_eq!(heap.inner().frees(), 1);
    // SAFETY: deliberately wrong (and with another layout); Checked catches it.
    unsafe { heap.deallocate(p, layout(32, 8)) };
    assert_eq!(
        heap.violations(),
        vec![Violation::DoubleFree {
            handle: p,
            layout: layout(32, 8),
            allocated_with: l,
        }]
    );
    assert_eq!(
        heap.inner().frees(),
        1,
        "the double free reached the allocator"
    );
    assert_eq!(heap.check_stats(), Ok(()));
    assert_still_usable(&heap);
}

#[test]
fn freeing_a_handle_never_handed_out_is_a_foreign_free_outside_any_block() {
    let heap = counting();
    let live = heap.allocate(layout(64, 8)).unwrap();
    let mut local = [0u8; 16];
    let foreign = NonNull::from(&mut local).cast::<u8>();
    // SAFETY: deliberately wrong; Checked catches it and does not forward it.
    unsafe { heap.deallocate(foreign, layout(16, 1)) };
    assert_eq!(
        heap.violations(),
        vec![Violation::ForeignFree {
            handle: foreign,
            layout: layout(16, 1),
            inside: None,
        }]
    );
    assert_eq!(heap.inner().frees(), 0);
    assert_eq!(heap.live_blocks(), 1);
    // SAFETY: `live` is live with this layout.
    unsafe { heap.deallocate(live, layout(64, 8)) };
    assert_eq!(heap.inner().frees(), 1);
    assert_eq!(heap.check_stats(), Ok(()));
    assert_still_usable(&heap);
}

#[test]
fn freeing_an_interior_pointer_names_the_block_it_points_into() {
    let heap = counting();
    let l = layout(64, 16);
    let p = heap.allocate(l).unwrap();
    let other = heap.allocate(layout(8, 8)).unwrap();
    let interior = offset(p, 16);
    // SAFETY: deliberately wrong; Checked catches it and does not forward it.
    unsafe { heap.deallocate(interior, layout(48, 16)) };
    assert_eq!(
        heap.violations(),
        vec![Violation::ForeignFree {
            handle: interior,
            layout: layout(48, 16),
            inside: Some(block(p, l)),
        }]
    );
    assert_eq!(heap.inner().frees(), 0);
    // The last byte is still inside.
    let last = offset(p, 63);
    // SAFETY: deliberately wrong; not forwarded.
    unsafe { heap.deallocate(last, layout(1, 1)) };
    assert!(matches!(
        heap.violations()[1],
        Violation::ForeignFree { handle, inside: Some(b), .. } if handle == last && b == block(p, l)
    ));
    assert_eq!(heap.inner().frees(), 0);
    assert_eq!(
        heap.live_blocks(),
        2,
        "the block pointed into is still live"
    );
    // SAFETY: both live with these layouts.
    unsafe {
        heap.deallocate(p, l);
        heap.deallocate(other, layout(8, 8));
    }
    assert_eq!(heap.violations().len(), 2);
    assert_eq!(heap.inner().frees(), 2);
    assert_eq!(heap.check_stats(), Ok(()));
    assert_still_usable(&heap);
}

#[test]
fn freeing_with_the_wrong_size_is_a_layout_mismatch_and_the_block_stays_live() {
    let heap = counting();
    let l = layout(48, 16);
    let p = heap.allocate(l).unwrap();
    // SAFETY: deliberately wrong; Checked catches it and does not forward it.
    unsafe { heap.deallocate(p, layout(32, 16)) };
    assert_eq!(
        heap.violations(),
        vec![Violation::LayoutMismatch {
            handle: p,
            freed_with: layout(32, 16),
            allocated_with: l,
        }]
    );
    assert_eq!(heap.inner().frees(), 0);
    assert_eq!(heap.live_blocks(), 1);
    assert_eq!(heap.live_bytes(), 48);
    assert_eq!(heap.check_stats(), Ok(()));
    // SAFETY: now with the right layout.
    unsafe { heap.deallocate(p, l) };
    assert_eq!(heap.violations().len(), 1);
    assert_eq!(heap.inner().frees(), 1);
    assert_eq!(heap.live_blocks(), 0);
    assert_eq!(heap.check_stats(), Ok(()));
    assert_still_usable(&heap);
}

#[test]
fn freeing_with_the_wrong_alignment_is_a_layout_mismatch_and_the_block_stays_live() {
    let heap = counting();
    let l = layout(48, 16);
    let p = heap.allocate(l).unwrap();
    // SAFETY: deliberately wrong; Checked catches it and does not forward it.
    unsafe { heap.deallocate(p, layout(48, 8)) };
    assert_eq!(
        heap.violations(),
        vec![Violation::LayoutMismatch {
            handle: p,
            freed_with: layout(48, 8),
            allocated_with: l,
        }]
    );
    assert_eq!(heap.inner().frees(), 0);
    assert_eq!(heap.live_blocks(), 1);
    // SAFETY: now with the right layout.
    unsafe { heap.deallocate(p, l) };
    assert_eq!(heap.violations().len(), 1);
    assert_eq!(heap.inner().frees(), 1);
    assert_eq!(heap.check_stats(), Ok(()));
    assert_still_usable(&heap);
}

#[test]
fn reallocating_a_freed_block_is_refused_reported_and_not_forwarded() {
    let heap = counting();
    let l = layout(48, 16);
    let p = heap.allocate(l).unwrap();
    // SAFETY: `p` is live with `l`.
    unsafe { heap.deallocate(p, l) };
    // SAFETY: deliberately wrong; Checked catches it and does not forward it.
    let result = unsafe { heap.reallocate(p, l, 96) };
    let err = result.expect_err("reallocating a freed block must fail");
    assert_eq!(err.layout, l);
    assert!(matches!(err.kind, AllocErrorKind::Other(_)), "{err:?}");
    assert_eq!(
        heap.violations(),
        vec![Violation::DoubleFree {
            handle: p,
            layout: l,
            allocated_with: l,
        }]
    );
    assert_eq!(heap.inner().reallocations(), 0);
    assert_eq!(heap.inner().frees(), 1);
    assert_eq!(heap.live_blocks(), 0);
    assert_eq!(heap.check_stats(), Ok(()));
    assert_still_usable(&heap);
}

#[test]
fn reallocating_with_the_wrong_layout_is_refused_and_the_block_stays_live() {
    let heap = counting();
    let l = layout(48, 16);
    let p = heap.allocate(l).unwrap();
    // SAFETY: deliberately wrong; Checked catches it and does not forward it.
    let result = unsafe { heap.reallocate(p, layout(40, 16), 96) };
    assert!(result.is_err());
    assert_eq!(
        heap.violations(),
        vec![Violation::LayoutMismatch {
            handle: p,
            freed_with: layout(40, 16),
            allocated_with: l,
        }]
    );
    assert_eq!(heap.inner().reallocations(), 0);
    assert_eq!(heap.live_blocks(), 1);
    // SAFETY: now with the right layout.
    let q = unsafe { heap.reallocate(p, l, 96) }.unwrap();
    // SAFETY: `q` is live with (96, 16).
    unsafe { heap.deallocate(q, layout(96, 16)) };
    assert_eq!(heap.violations().len(), 1);
    assert_eq!(heap.live_blocks(), 0);
    assert_eq!(heap.check_stats(), Ok(()));
}

#[test]
fn a_reallocation_the_heap_refuses_leaves_the_old_block_live_and_intact() {
    let heap = Checked::with_policy(CountingHeap::with_max_size(64), Policy::Record);
    let l = layout(48, 16);
    let p = heap.allocate(l).unwrap();
    // SAFETY: `p` is live and 48 bytes long.
    unsafe { p.as_ptr().write_bytes(0xC3, 48) };
    // SAFETY: `p` is live with `l`.
    let err = unsafe { heap.reallocate(p, l, 65) }.expect_err("over the heap's maximum");
    assert_eq!(err.kind, AllocErrorKind::OutOfMemory);
    assert_eq!(heap.inner().reallocations(), 1);
    assert_eq!(heap.violations(), vec![]);
    assert_eq!(heap.live_blocks(), 1);
    assert_eq!(heap.live_bytes(), 48);
    assert_eq!(heap.check_stats(), Ok(()));
    // SAFETY: the failed reallocation left `p` live and untouched.
    let bytes = unsafe { core::slice::from_raw_parts(p.as_ptr(), 48) };
    assert!(bytes.iter().all(|&b| b == 0xC3));
    // Still live under its old layout: that free is legal and forwarded; a second is not.
    // SAFETY: `p` is live with `l`.
    unsafe { heap.deallocate(p, l) };
    assert_eq!(heap.violations(), vec![]);
    assert_eq!(heap.inner().frees(), 1);
    assert_eq!(heap.check_stats(), Ok(()));
    // SAFETY: deliberately wrong; not forwarded.
    unsafe { heap.deallocate(p, l) };
    assert!(matches!(heap.violations()[..], [Violation::DoubleFree { handle, .. }] if handle == p));
    assert_eq!(heap.inner().frees(), 1);
}

// ---------------------------------------------------------------------------------------------
// Policy::Panic
// ---------------------------------------------------------------------------------------------

#[test]
fn under_the_panic_policy_a_double_free_panics_with_the_handle_and_is_not_forwarded() {
    let heap = Checked::new(CountingHeap::new());
    let l = layout(48, 16);
    let p = heap.allocate(l).unwrap();
    // SAFETY: `p` is live with `l`.
    unsafe { heap.deallocate(p, l) };
    // SAFETY: deliberately wrong; Checked panics before forwarding it.
    let msg = expect_panic(|| unsafe { heap.deallocate(p, l) });
    assert!(
        msg.contains(&format!("{p:?}")),
        "handle missing from: {msg}"
    );
    assert!(msg.contains("double free"), "{msg}");
    assert!(msg.contains("Checked<counting>"), "{msg}");
    assert!(msg.contains("(size 48, align 16)"), "{msg}");
    assert_eq!(heap.inner().frees(), 1);
    // The shadow survives the panic: the heap is still usable under the panic policy.
    assert_still_usable(&heap);
    assert_eq!(heap.check_stats(), Ok(()));
}

#[test]
fn under_the_panic_policy_an_overlap_panics_naming_both_handles() {
    let heap = Checked::new(BuggyBump::new(Bug::ShortAdvance));
    let base = heap.inner().base();
    let a = heap.allocate(layout(64, 8)).unwrap();
    let msg = expect_panic(|| {
        let _ = heap.allocate(layout(32, 8));
    });
    assert!(msg.contains(&format!("{a:?}")), "{msg}");
    assert!(msg.contains(&format!("{:?}", offset(base, 32))), "{msg}");
    assert!(msg.contains("overlaps live block"), "{msg}");
}

#[test]
fn under_the_panic_policy_a_foreign_free_panics_and_is_not_forwarded() {
    let heap = Checked::new(CountingHeap::new());
    let p = heap.allocate(layout(64, 16)).unwrap();
    let interior = offset(p, 8);
    // SAFETY: deliberately wrong; Checked panics before forwarding it.
    let msg = expect_panic(|| unsafe { heap.deallocate(interior, layout(8, 8)) });
    assert!(msg.contains(&format!("{interior:?}")), "{msg}");
    assert!(
        msg.contains(&format!("points inside live block {p:?}")),
        "{msg}"
    );
    assert_eq!(heap.inner().frees(), 0);
    // SAFETY: `p` is live with this layout.
    unsafe { heap.deallocate(p, layout(64, 16)) };
    assert_eq!(heap.inner().frees(), 1);
}

#[test]
#[should_panic(
    expected = "Checked<short-offset-bump>: bad transition Allocated -> Allocated on \
                           allocate: new block 32 (size 32, align 8) overlaps live block 0 \
                           (size 64, align 8)"
)]
fn under_the_panic_policy_an_offset_overlap_panics_with_both_offsets_and_layouts() {
    let heap = Checked::new(ShortOffsetBump::new());
    let _a = heap.allocate(layout(64, 8)).unwrap();
    let _b = heap.allocate(layout(32, 8)).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Handles that are not pointers
// ---------------------------------------------------------------------------------------------

#[test]
fn checked_is_generic_over_offset_handles_and_reports_overlapping_offsets() {
    let heap = Checked::with_policy(ShortOffsetBump::new(), Policy::Record);
    let la = layout(64, 8);
    let lb = layout(32, 8);
    let a: usize = heap.allocate(la).unwrap();
    let b: usize = heap.allocate(lb).unwrap();
    assert_eq!((a, b), (0, 32));
    assert_eq!(
        heap.violations(),
        vec![Violation::Overlap {
            new: block(32, lb),
            live: block(0, la),
        }]
    );
    // An interior offset names its block; a double free is caught; neither is forwarded.
    // SAFETY: deliberately wrong; Checked catches it and does not forward it.
    unsafe { heap.deallocate(40, layout(8, 8)) };
    // SAFETY: `a` is live with `la`.
    unsafe { heap.deallocate(a, la) };
    // SAFETY: deliberately wrong; Checked catches it and does not forward it.
    unsafe { heap.deallocate(a, la) };
    assert_eq!(
        heap.violations()[1..],
        [
            Violation::ForeignFree {
                handle: 40,
                layout: layout(8, 8),
                inside: Some(block(32, lb)),
            },
            Violation::DoubleFree {
                handle: 0,
                layout: la,
                allocated_with: la,
            },
        ]
    );
    assert_eq!(heap.inner().frees.load(Ordering::SeqCst), 1);
    assert_eq!(heap.live_blocks(), 1);
}

#[test]
fn a_correct_offset_pool_that_reuses_slots_is_not_reported_and_its_stats_check() {
    let heap = Checked::with_policy(OffsetSlab::new(), Policy::Record);
    let l = layout(200, 8);
    let a = heap.allocate(l).unwrap();
    let b = heap.allocate(layout(10, 1)).unwrap();
    assert_eq!((a, b), (0, SLOT));
    // SAFETY: `a` is live with `l`.
    unsafe { heap.deallocate(a, l) };
    // Slot 0 comes back at once; reuse of a freed address is not an overlap.
    let c = heap.allocate(layout(256, 256)).unwrap();
    assert_eq!(c, 0);
    assert_eq!(heap.check_stats(), Ok(()));
    // SAFETY: both live with these layouts.
    unsafe {
        heap.deallocate(b, layout(10, 1));
        heap.deallocate(c, layout(256, 256));
    }
    assert_eq!(heap.violations(), vec![]);
    assert_eq!(heap.live_blocks(), 0);
    assert_eq!(heap.check_stats(), Ok(()));
    assert_eq!(heap.stats().deallocations, Some(3));
    // And the offset pool's own double free is still caught after reuse.
    // SAFETY: deliberately wrong; not forwarded.
    unsafe { heap.deallocate(c, layout(256, 256)) };
    assert_eq!(
        heap.violations(),
        vec![Violation::DoubleFree {
            handle: 0,
            layout: layout(256, 256),
            allocated_with: layout(256, 256),
        }]
    );
    assert_eq!(heap.stats().deallocations, Some(3));
}
