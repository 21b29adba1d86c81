//! [`Randomized`]: the public face of the heap, and its trait implementations.

use core::alloc::Layout;
use core::ptr::{self, NonNull};

use alloclab_core::{
    AllocError, AllocErrorKind, AllocKind, Allocator, ForkHooks, HostAllocator, MallocHeap, Stats,
    move_block, resized_layout,
};

use crate::Checks;
use crate::heap::{
    CHUNK, Corruption, Counters, Expect, GRANULE, HEADER, HeapShape, Invalid, KIND_NEW,
    KIND_NEW_ARRAY, LARGE_MAX, ZEROED_PAYLOAD_MAX, slab_class_of,
};
use crate::lock::StateWord;
use crate::os;
use crate::root::Root;

/// The largest alignment served (a huge block's payload must lie in its mapping's first
/// chunk-sized unit, where the chunk table finds it).
const MAX_ALIGN: usize = CHUNK / 2;

/// The randomized allocator. Its whole state is this one word; see the [crate] docs.
///
/// `const`-constructible, for `#[global_allocator]` and `static`s; the heap is built at the
/// first allocation. Dropping a `Randomized` returns all its memory to the OS.
#[repr(transparent)]
pub struct Randomized {
    state: StateWord,
}

impl Randomized {
    /// The most arenas a heap has: threads claim one each (see the [crate] docs) until
    /// these are all claimed, then share.
    pub const MAX_ARENAS: usize = crate::root::ARENAS;

    /// The environment variable that limits the arenas a heap built by [`new`](Self::new)
    /// or [`with_seed`](Self::with_seed) spreads its threads over: a number from 1 to
    /// [`MAX_ARENAS`](Self::MAX_ARENAS) (by default all of them), read when the heap is
    /// built. Each arena a thread uses keeps a window of 256 slots or more for every slab
    /// class the thread allocates, which random draws bring into memory whatever the class
    /// holds live (up to 1.7 MB per arena with every class in use); fewer arenas keep
    /// fewer windows and make threads beyond the limit share locks and cache lines, as
    /// glibc's `MALLOC_ARENA_MAX` does. Any other value is reported on standard error and
    /// ignored.
    pub const ARENAS_ENV: &'static str = "ALLOCLAB_RANDOMIZED_ARENAS";

    /// A heap that maps nothing until its first allocation, then seeds itself from the OS
    /// and runs every detection class that [`Checks::ENV`] does not switch off.
    pub const fn new() -> Self {
        Self {
            state: StateWord::new(),
        }
    }

    /// A heap built now and seeded with `seed` instead of the OS's entropy: the same seed
    /// and the same requests, from one thread, give the same placements. For experiments
    /// and tests; a heap meant to resist attacks must use [`new`](Self::new). It runs
    /// every detection class that [`Checks::ENV`] does not switch off, over the arenas
    /// [`ARENAS_ENV`](Self::ARENAS_ENV) allows.
    ///
    /// # Errors
    ///
    /// [`AllocErrorKind::OutOfMemory`] if the OS refuses the first chunk.
    pub fn with_seed(seed: u64) -> Result<Self, AllocError> {
        Self::with_seed_checks_and_arenas(seed, Checks::from_env(), crate::arenas::from_env())
    }

    /// As [`with_seed`](Self::with_seed), running exactly `checks` whatever the
    /// environment says: to measure what each class costs, or to test a heap without one.
    /// Its threads use all [`MAX_ARENAS`](Self::MAX_ARENAS) arenas.
    ///
    /// # Errors
    ///
    /// [`AllocErrorKind::OutOfMemory`] if the OS refuses the first chunk.
    pub fn with_seed_and_checks(seed: u64, checks: Checks) -> Result<Self, AllocError> {
        Self::with_seed_checks_and_arenas(seed, checks, Self::MAX_ARENAS)
    }

    /// As [`with_seed_and_checks`](Self::with_seed_and_checks), its threads spread over
    /// the first `arenas` arenas only (see [`ARENAS_ENV`](Self::ARENAS_ENV)).
    ///
    /// # Errors
    ///
    /// [`AllocErrorKind::Other`] if `arenas` is not 1 to [`MAX_ARENAS`](Self::MAX_ARENAS);
    /// [`AllocErrorKind::OutOfMemory`] if the OS refuses the first chunk.
    pub fn with_seed_checks_and_arenas(
        seed: u64,
        checks: Checks,
        arenas: usize,
    ) -> Result<Self, AllocError> {
        if !(1..=Self::MAX_ARENAS).contains(&arenas) {
            return Err(AllocError::new(
                Layout::new::<u8>(),
                AllocErrorKind::Other("an arena count outside 1 to 16"),
            ));
        }
        let heap = Self::new();
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        bytes[8..16].copy_from_slice(b"alloclab");
        let root = Root::create(bytes, checks, arenas).ok_or(AllocError::new(
            Layout::new::<u8>(),
            AllocErrorKind::OutOfMemory,
        ))?;
        heap.state.unlock(root as usize);
        Ok(heap)
    }

    /// The control block, built at the first call. `None` if the OS refuses memory.
    #[inline]
    fn root(&self) -> Option<&Root> {
        let mut root = self.state.root();
        if root == 0 {
            root = self.build()?;
        }
        // SAFETY: a published control block lives as long as `self`; all its mutable parts
        // are behind its own locks.
        Some(unsafe { &*(root as *const Root) })
    }

    /// Builds the control block under the state word's lock (unless another thread did).
    #[cold]
    fn build(&self) -> Option<usize> {
        let root = self.state.lock();
        if root != 0 {
            self.state.unlock(root);
            return Some(root);
        }
        match Root::create(os::entropy(), Checks::from_env(), crate::arenas::from_env()) {
            Some(created) => {
                self.state.unlock(created as usize);
                Some(created as usize)
            }
            None => {
                self.state.unlock(0);
                None
            }
        }
    }

    /// The control block if it exists.
    pub(crate) fn existing_root(&self) -> Option<&Root> {
        let root = self.state.root();
        // SAFETY: as in `root`.
        (root != 0).then(|| unsafe { &*(root as *const Root) })
    }

    /// How many arenas this heap's threads spread over (that of [`ARENAS_ENV`](Self::ARENAS_ENV)
    /// if it is not built yet: it will read it then).
    pub fn arenas(&self) -> usize {
        self.existing_root()
            .map_or_else(crate::arenas::from_env, Root::arenas)
    }

    /// The detection classes this heap runs (those of [`Checks::ENV`] if it is not built
    /// yet: it will read them then).
    pub fn checks(&self) -> Checks {
        self.existing_root()
            .map_or_else(Checks::from_env, Root::checks)
    }

    /// Allocates a block for `layout`.
    #[inline]
    fn allocate_block(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.allocate_block_as(layout, 0)
    }

    /// Allocates a block for `layout`, recording `kind` ([`KIND_NEW`], [`KIND_NEW_ARRAY`],
    /// or 0) in its header.
    #[inline(always)]
    fn allocate_block_as(&self, layout: Layout, kind: usize) -> Result<NonNull<u8>, AllocError> {
        if layout.size() == 0 {
            return self.allocate_zero_size(layout, kind);
        }
        self.allocate_in_heap(layout, kind)
    }

    /// [`allocate_block_as`](Self::allocate_block_as) in a chunk or a mapping of its own,
    /// a zero size included (a 16-byte payload whose canary, with canaries, leaves 0 bytes
    /// usable).
    #[inline(always)]
    fn allocate_in_heap(&self, layout: Layout, kind: usize) -> Result<NonNull<u8>, AllocError> {
        let size = layout.size();
        let align = layout.align().max(GRANULE);
        let oom = || AllocError::new(layout, AllocErrorKind::OutOfMemory);
        let root = match self.existing_root() {
            Some(root) => root,
            None => {
                // A request the heap refuses does not build it.
                block_of(layout)?;
                self.root().ok_or_else(oom)?
            }
        };
        // The slabs' sizes first, as `malloc`'s fast path takes them: the checks below
        // concern the other paths.
        if let Some(class) = slab_class(root.checks(), size, align) {
            return slot_in(root, class, size, kind).ok_or_else(oom);
        }
        let block = block_of(layout)?;
        let payload = if block > LARGE_MAX {
            root.allocate_huge(size, align, kind)
        } else {
            let mut arena = root.lock_any();
            arena.alloc(size, align, kind, root)
        }
        .ok_or_else(oom)?;
        // SAFETY: payload addresses are never 0.
        Ok(unsafe { NonNull::new_unchecked(payload as *mut u8) })
    }

    /// A zero-size block: a unique pointer into the inaccessible region, or (with the class
    /// off, an alignment above 16, or every slot live) an ordinary block of the smallest
    /// size.
    #[cold]
    fn allocate_zero_size(&self, layout: Layout, kind: usize) -> Result<NonNull<u8>, AllocError> {
        let oom = || AllocError::new(layout, AllocErrorKind::OutOfMemory);
        let root = self.root().ok_or_else(oom)?;
        if root.checks().contains(Checks::ZERO_SIZE)
            && layout.align() <= GRANULE
            && let Some(address) = root.allocate_zero_size()
        {
            // SAFETY: region addresses are never 0.
            return Ok(unsafe { NonNull::new_unchecked(address as *mut u8) });
        }
        self.allocate_in_heap(layout, kind)
    }

    /// Frees `ptr` after checking it; aborts on a double or invalid free.
    #[inline]
    fn free_block(&self, ptr: NonNull<u8>) {
        self.free_block_as(ptr, Expect::NOTHING);
    }

    /// Frees `ptr` after checking it, and that it is what `expect` says (C++'s `delete`
    /// and its sized forms); aborts on a double, invalid or mismatched free.
    #[inline(always)]
    fn free_block_as(&self, ptr: NonNull<u8>, expect: Expect) {
        let address = ptr.as_ptr() as usize;
        let result = match self.existing_root() {
            Some(root) => root.free(address, expect),
            None => Err(Invalid::Foreign),
        };
        if let Err(why) = result {
            os::fatal(why.message(), address);
        }
    }

    /// Whether `ptr` is a live block that `free` would accept now, and if not, why —
    /// without aborting. For tests and diagnostics (a program should never need to ask).
    ///
    /// # Errors
    ///
    /// The message `free` would abort with.
    pub fn check_pointer(&self, ptr: *const u8) -> Result<usize, &'static str> {
        match self.existing_root() {
            Some(root) => root.usable_size(ptr as usize),
            None => Err(Invalid::Foreign),
        }
        .map_err(Invalid::message)
    }

    /// The heap's counters, summed over its arenas (all zero before the first allocation).
    pub fn counters(&self) -> Counters {
        self.existing_root().map(Root::counters).unwrap_or_default()
    }

    /// Walks the whole heap and checks its invariants: every header's keyed tag, sizes and
    /// previous-size links, no two free neighbours, the free lists (links, classes, byte
    /// totals) against the blocks, the live-byte counters against the live blocks, every
    /// huge block's descriptor. Takes every lock of the heap meanwhile.
    ///
    /// # Errors
    ///
    /// The first violation found. A correct program never sees one; a program that
    /// overflowed a block may.
    pub fn check(&self) -> Result<HeapShape, Corruption> {
        match self.existing_root() {
            Some(root) => root.check(),
            None => Ok(HeapShape::default()),
        }
    }
}

impl Default for Randomized {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for Randomized {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Randomized")
            .field("built", &(self.state.root() != 0))
            .finish_non_exhaustive()
    }
}

impl Drop for Randomized {
    fn drop(&mut self) {
        let Some(root) = self.existing_root() else {
            return;
        };
        let own = ptr::from_ref(root) as usize;
        // SAFETY: `&mut self`: no other thread uses the heap, and no block outlives it (an
        // allocator's blocks borrow it). The table is read from the first chunk, which is
        // unmapped last.
        unsafe {
            for (base, len) in root.other_mappings() {
                os::unmap(NonNull::new_unchecked(base as *mut u8), len);
            }
            os::unmap(NonNull::new_unchecked(own as *mut u8), CHUNK);
        }
    }
}

impl Allocator for Randomized {
    type Handle = NonNull<u8>;

    /// Blocking (one arena lock). A zero-size layout gets a unique block of the smallest
    /// size.
    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.allocate_block(layout)
    }

    /// Aborts the process on a double free, a foreign or interior pointer, or a corrupted
    /// header, as `free` in the C library does.
    unsafe fn deallocate(&self, handle: NonNull<u8>, _layout: Layout) {
        self.free_block(handle);
    }

    fn name(&self) -> &str {
        "randomized"
    }

    fn stats(&self) -> Stats {
        let counters = self.counters();
        Stats {
            live_bytes: Some(counters.live_bytes),
            footprint_bytes: Some(counters.mapped_bytes),
            peak_footprint_bytes: Some(counters.peak_mapped_bytes),
            allocations: Some(counters.allocations),
            deallocations: Some(counters.deallocations),
            max_alloc_steps: None,
            max_free_steps: None,
        }
    }
}

impl HostAllocator for Randomized {
    /// Without a memset when freed memory is zero-filled ([`Checks::ZERO_FILL`]) and the
    /// block is small enough to be checked in full when handed out (it reads zero then),
    /// or has a fresh mapping of its own.
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let block = self.allocate_block(layout)?;
        let fills = self
            .existing_root()
            .is_some_and(|root| root.checks().contains(Checks::ZERO_FILL));
        let own_mapping = block_bytes(layout).is_some_and(|b| b > LARGE_MAX);
        let zeroed = fills && (layout.size() <= ZEROED_PAYLOAD_MAX || own_mapping);
        if !zeroed {
            // SAFETY: a live block of at least `layout.size()` bytes.
            unsafe { block.as_ptr().write_bytes(0, layout.size()) };
        }
        Ok(block)
    }

    /// In place when the block shrinks or its right neighbour is free and large enough;
    /// otherwise allocate, copy, free.
    unsafe fn reallocate(
        &self,
        ptr: NonNull<u8>,
        old_layout: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        let new_layout = resized_layout(old_layout, new_size)?;
        if self.resize_in_place(ptr, new_size) {
            return Ok(ptr);
        }
        // SAFETY: forwarded from the caller.
        unsafe { move_block(self, ptr, old_layout, new_layout) }
    }
}

impl Randomized {
    /// Resizes the block at `ptr` to `size` bytes without moving it, into its own tail or
    /// a free right neighbour (the wilderness included), its canary rearmed; `false`
    /// (nothing changed) where neither has room, and for blocks with a mapping of their
    /// own. Aborts, as `free` does, on a pointer that is not a live block of this heap.
    fn resize_in_place(&self, ptr: NonNull<u8>, size: usize) -> bool {
        // Blocks in a chunk stay well under the size that gets a mapping of its own
        // (`LARGE_MAX`): growth in place stops at half of it.
        if size > LARGE_MAX / 2 {
            return false;
        }
        self.resize_in_heap(ptr, size)
    }

    /// [`resize_in_place`](Self::resize_in_place) without its bound on the new size: for a
    /// shrink, which never makes a block larger.
    fn resize_in_heap(&self, ptr: NonNull<u8>, size: usize) -> bool {
        let address = ptr.as_ptr() as usize;
        let resized = match self.existing_root() {
            Some(root) => root.resize_in_place(address, size),
            None => Err(Invalid::Foreign),
        };
        resized.unwrap_or_else(|why| os::fatal(why.message(), address))
    }
}

// SAFETY: `usable_size` reads the block's own header, whose size is at least what was asked
// (rounding and absorbed slack only add); `deallocate_unsized` is `deallocate`, which needs
// no layout.
unsafe impl MallocHeap for Randomized {
    unsafe fn usable_size(&self, ptr: NonNull<u8>) -> usize {
        let address = ptr.as_ptr() as usize;
        self.existing_root()
            .map_or(Err(Invalid::Foreign), |root| root.usable_size(address))
            .unwrap_or_else(|why| os::fatal(why.message(), address))
    }

    unsafe fn deallocate_unsized(&self, ptr: NonNull<u8>) {
        self.free_block(ptr);
    }

    /// A slab slot, for a size the slabs serve, once the heap is built: what
    /// [`allocate`](Allocator::allocate) gives for that size at `malloc`'s alignment,
    /// without building a `Layout` or choosing among the paths of every other size.
    #[inline(always)]
    fn try_malloc_fast(&self, size: usize) -> Option<NonNull<u8>> {
        if size == 0 {
            return None;
        }
        let root = self.existing_root()?;
        slot_in(root, slab_class(root.checks(), size, GRANULE)?, size, 0)
    }

    /// Into the block's own tail or a free right neighbour, as
    /// [`reallocate`](HostAllocator::reallocate) grows: C's `realloc` otherwise moves every
    /// block it grows, since the usable size is exactly what was asked (with canaries on),
    /// and random placement leaves a free neighbour beside many blocks.
    unsafe fn grow_in_place(&self, ptr: NonNull<u8>, size: usize) -> bool {
        self.resize_in_place(ptr, size)
    }

    /// The canary moves to the new end (one byte written past it is then caught when the
    /// block is freed, as for any block), and a tail of 32 bytes or more goes back to the
    /// free lists.
    unsafe fn shrink_in_place(&self, ptr: NonNull<u8>, size: usize) {
        self.resize_in_heap(ptr, size);
    }

    /// A free's only system calls are `madvise` (pages given back) and `munmap` (a block
    /// with a mapping of its own), and both keep `errno` (`os::release_pages`,
    /// `os::unmap`); its locks spin and yield (`sched_yield` never fails). So C's `free`
    /// calls it without saving `errno` around every call.
    const FREE_KEEPS_ERRNO: bool = true;

    const RECORDS_KIND: bool = true;

    /// Records `kind` in the block's header, where C++'s `delete` checks it.
    fn allocate_as(&self, layout: Layout, kind: AllocKind) -> Result<NonNull<u8>, AllocError> {
        self.allocate_block_as(layout, kind_bits(kind))
    }

    /// Aborts on a `delete` of a block from `new[]` (or the reverse; a block from `malloc`
    /// may be deleted either way), and on a sized delete whose size is not the block's
    /// (exactly, with canaries; otherwise within its rounding).
    /// With [`Checks::CXX_DELETE`] off, frees as `free` does.
    unsafe fn deallocate_as(&self, ptr: NonNull<u8>, kind: AllocKind, size: Option<usize>) {
        let checked = self
            .existing_root()
            .is_some_and(|root| root.checks().contains(Checks::CXX_DELETE));
        let expect = if checked {
            Expect {
                kind: kind_bits(kind),
                size,
            }
        } else {
            Expect::NOTHING
        };
        self.free_block_as(ptr, expect);
    }
}

/// The bytes a block for `layout` takes (its payload rounded to 16, its header, and for an
/// alignment above 16 that much slack to align it), or `None` if that is unrepresentable:
/// above [`LARGE_MAX`] it gets a mapping of its own.
#[inline(always)]
fn block_bytes(layout: Layout) -> Option<usize> {
    let extra = if layout.align() > GRANULE {
        layout.align()
    } else {
        0
    };
    layout
        .size()
        .checked_next_multiple_of(GRANULE)
        .and_then(|s| s.checked_add(HEADER + extra))
        .filter(|&b| b <= isize::MAX as usize / 2)
}

/// A slot of slab class `class` for `size` bytes asked for as `kind`, in the arena the
/// thread locks; `None` if the OS gives no memory.
#[inline(always)]
fn slot_in(root: &Root, class: usize, size: usize, kind: usize) -> Option<NonNull<u8>> {
    let payload = root.lock_any().slab_alloc(root, class, size, kind)?;
    // SAFETY: payload addresses are never 0.
    Some(unsafe { NonNull::new_unchecked(payload as *mut u8) })
}

/// The bytes of the block that serves `layout` in a chunk or a mapping of its own, or why
/// the heap refuses it (an alignment above [`MAX_ALIGN`], a size past what a block can
/// hold).
#[inline(always)]
fn block_of(layout: Layout) -> Result<usize, AllocError> {
    if layout.align().max(GRANULE) > MAX_ALIGN {
        return Err(AllocError::new(
            layout,
            AllocErrorKind::AlignmentUnsupported,
        ));
    }
    block_bytes(layout).ok_or(AllocError::new(layout, AllocErrorKind::SizeUnsupported))
}

/// The slab class that serves `size` bytes at alignment `align` (at least 16) in a heap
/// running `checks`, if slabs serve it: the size plus a canary byte (with canaries) fits a
/// slot, and the alignment is 16.
#[inline(always)]
pub(crate) fn slab_class(checks: Checks, size: usize, align: usize) -> Option<usize> {
    let canary = usize::from(checks.contains(Checks::CANARIES));
    slab_class_of(size.checked_add(canary)?).filter(|_| align == GRANULE)
}

/// The header's kind bits of `kind`.
fn kind_bits(kind: AllocKind) -> usize {
    match kind {
        AllocKind::Malloc => 0,
        AllocKind::New => KIND_NEW,
        AllocKind::NewArray => KIND_NEW_ARRAY,
    }
}

impl ForkHooks for Randomized {
    /// Takes every lock, so that the child does not inherit one held by a thread it lacks.
    fn prepare_fork(&self) {
        if let Some(root) = self.existing_root() {
            root.lock_all();
        }
    }

    fn after_fork_in_parent(&self) {
        if let Some(root) = self.existing_root() {
            // SAFETY: `prepare_fork` took every lock on this thread.
            unsafe { root.unlock_all(false) };
        }
    }

    /// Releases the locks and reseeds every arena's generator, so that the child's
    /// placements are independent of the parent's.
    fn after_fork_in_child(&self) {
        if let Some(root) = self.existing_root() {
            // SAFETY: `prepare_fork` took every lock on this (now the only) thread.
            unsafe { root.unlock_all(true) };
        }
    }
}

alloclab_core::impl_global_alloc!(Randomized);
