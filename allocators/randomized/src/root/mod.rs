//! The control block: the arenas, the key, and the table of every mapping of the heap.
//!
//! It sits at the start of the heap's first chunk, whose address is the allocator's one
//! word of state. Each arena has its own lock (the same spin lock as the state word, in
//! band, on the arena's first cache line); the chunk table has one more, taken only to add
//! or remove a mapping. Lock order: arenas by index, then the table.
//!
//! The chunk table is an open-addressing hash set of mapping bases (each or'ed with its
//! kind), probed without a lock: entries are written once (with release ordering) and
//! removed by overwriting them with a tombstone, never moved, so a lookup that races an
//! insertion or a removal sees either the entry or its absence, never another's.
//!
//! Here: the control block, the arenas' locks and which arena a thread takes. Beside it:
//! `table.rs` (the chunk table), `huge.rs` (blocks with a mapping of their own, zero-size
//! requests), `blocks.rs` (free, usable size and resizing, from a pointer the program gave)
//! and `whole.rs` (every lock around `fork`, the counters, the heap walk).

use core::cell::UnsafeCell;
use core::ptr;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::Checks;
use crate::claims::Claims;
use crate::heap::{
    Arena, BUSY, CHUNK, CHUNK_HEADER, ChunkSource, Corruption, Counters, Expect, GRANULE, HEADER,
    HUGE, HeapShape, Invalid, Lists, Live, Slabs, canary_len, check_canary, claim_remote, get, put,
    rd, scrub_queued, set_kind, validate_in_chunk, wr,
};
use crate::lock::StateWord;
use crate::os;
use crate::remote::{Outbox, RemoteFrees};
use crate::rng::Rng;
use crate::zero::ZeroSize;

mod blocks;
mod huge;
mod table;
#[cfg(all(test, not(loom)))]
mod tests;
mod whole;

/// Arenas per heap.
pub(crate) const ARENAS: usize = 16;
/// Entries of the chunk table (a power of two); at most 3/4 are used.
const TABLE: usize = 1 << 14;
// The free-list tallies (`heap::tally_of`) count an arena's free bytes / 16 in 32 bits:
// the table's chunks must stay under that.
const _: () = assert!(TABLE / 4 * 3 * CHUNK / crate::heap::GRANULE <= u32::MAX as usize);
/// Consecutive chunks whose table slots are consecutive: a page of the table.
const TABLE_RUN: usize = 4096 / size_of::<usize>();
const _: () = assert!(TABLE.is_multiple_of(TABLE_RUN));
/// Chunk-table kind of a chunk of blocks.
const KIND_BLOCKS: usize = 1;
/// Chunk-table kind of a huge block's mapping.
const KIND_HUGE: usize = 2;
/// A removed entry.
const TOMBSTONE: usize = 3;
/// Chunk-table kind of a slab chunk (`heap::slab`).
const KIND_SLABS: usize = 4;

/// An arena and its lock, on a page of their own: a thread that sets up an arena touches
/// one page of the control block for it, not two (the slot was 4 224 bytes, straddling
/// pages, before the remote-free stacks moved out of it).
#[repr(C, align(4096))]
struct Slot {
    lock: StateWord,
    arena: UnsafeCell<Arena>,
    /// This arena's frees of other arenas' blocks, waiting to be pushed as chains; under
    /// the lock, like the arena.
    outbox: UnsafeCell<Outbox<ARENAS>>,
    /// The sentinels of the arena's free lists.
    lists: Lists,
}

/// An arena's stacks of frees queued by threads that found it busy: blocks, and slab
/// slots.
#[derive(Default)]
struct Queued {
    blocks: RemoteFrees,
    slots: RemoteFrees,
}

/// A value alone on its cache line(s).
#[repr(C, align(128))]
struct Padded<T>(T);

impl<T> core::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

const _: () = assert!(size_of::<Slot>() == 4096);

/// The control block: a page of shared fields, a page per arena, then the chunk table.
/// A small program touches the first page, one page per arena its threads use, and one
/// page of the table (see [`Root::slot_of`]).
#[repr(C)]
pub(crate) struct Root {
    /// Each arena's stack of frees that found it busy, each on cache lines of its own, so
    /// that their pushes do not steal the holder's lines.
    remote: [Padded<Queued>; ARENAS],
    /// Which thread identity claimed each arena (see `claims.rs`).
    claims: Claims<ARENAS>,
    /// Key of the header tags.
    key: u64,
    /// The detection classes this heap runs ([`Checks`] bits), fixed at creation.
    checks: u8,
    /// Seed of the arenas' generators: arena `i` draws from its stream `i + 1` (the key
    /// came from stream 0), set up when a thread first locks it. Replaced in a forked
    /// child (under every lock), so that the arenas it sets up later do not repeat the
    /// parent's.
    seed: UnsafeCell<[u8; 32]>,
    /// Lock of the table's writers.
    table_lock: StateWord,
    /// Slots of the table in use (entries and tombstones), under `table_lock`.
    table_used: AtomicUsize,
    huge_live_bytes: AtomicU64,
    huge_allocations: AtomicU64,
    huge_deallocations: AtomicU64,
    slots: [Slot; ARENAS],
    /// Each arena's slabs, under its lock (the arena's page has no room for them; the
    /// first arenas' share a page).
    slabs: [UnsafeCell<Slabs>; ARENAS],
    table: [AtomicUsize; TABLE],
    /// Zero-size blocks: their region and bitmap, last, so that a program that never asks
    /// for zero bytes never touches these pages.
    zero: ZeroSize,
}

// SAFETY: every arena is reached only through its lock; the rest is atomics and the key,
// which never changes after creation.
unsafe impl Sync for Root {}

/// Where the first chunk's blocks begin: after the control block.
pub(crate) const ROOT_SPACE: usize = size_of::<Root>().next_multiple_of(64);
const _: () = assert!(ROOT_SPACE + 2 * crate::heap::LARGE_MAX < CHUNK);

/// An arena, locked; unlocked on drop.
pub(crate) struct ArenaGuard<'a> {
    slot: &'a Slot,
    slabs: &'a UnsafeCell<Slabs>,
}

impl core::ops::Deref for ArenaGuard<'_> {
    type Target = Arena;
    fn deref(&self) -> &Arena {
        // SAFETY: the lock is held by this guard.
        unsafe { &*self.slot.arena.get() }
    }
}

impl core::ops::DerefMut for ArenaGuard<'_> {
    fn deref_mut(&mut self) -> &mut Arena {
        // SAFETY: the lock is held by this guard.
        unsafe { &mut *self.slot.arena.get() }
    }
}

impl<'a> ArenaGuard<'a> {
    /// The guard of arena `index` of `root`, whose lock the caller just took; sets the
    /// arena up at its first lock, and first frees the blocks other threads queued there
    /// while it was busy, so that every lock hold sees them freed.
    #[inline]
    fn drained(root: &'a Root, index: usize) -> Self {
        let slot = &root.slots[index];
        let mut guard = ArenaGuard {
            slot,
            slabs: &root.slabs[index],
        };
        if !guard.is_ready() {
            guard.set_up(root, index);
        }
        let remote = &root.remote[index];
        if !remote.blocks.is_empty() {
            let queued = remote.blocks.take_all();
            // SAFETY: the stack holds blocks of this arena, whose lock is held.
            unsafe { guard.drain(queued) };
        }
        if !remote.slots.is_empty() {
            let queued = remote.slots.take_all();
            let (arena, slabs) = guard.parts();
            // SAFETY: the stack holds queued slots of this arena, whose lock is held.
            unsafe { arena.slab_drain(slabs, queued) };
        }
        guard
    }
}

impl ArenaGuard<'_> {
    /// Sets up arena `index` of `root` at its first lock (out of line: once per arena, off
    /// the path of every lock).
    #[cold]
    #[inline(never)]
    fn set_up(&mut self, root: &Root, index: usize) {
        // SAFETY: the seed changes only under every lock (`unlock_all`), and this one is
        // held.
        let seed = unsafe { *root.seed.get() };
        let rng = Rng::from_seed_stream(seed, index as u64 + 1);
        let slot = self.slot;
        let checks = root.checks();
        self.init(
            index,
            root.key,
            checks.contains(Checks::ZERO_FILL),
            checks.contains(Checks::CANARIES),
            rng,
            &slot.lists,
        );
        if index == 0 {
            // Arena 0's first memory is the first chunk's, after the control block; set up
            // only when a thread uses arena 0 (one in sixteen, as a rule), so that a heap
            // whose threads prefer other arenas leaves that page alone.
            let base = root as *const Root as usize;
            // SAFETY: the first chunk's space after the control block is fresh, and arena
            // 0's.
            unsafe { self.adopt_first(base + ROOT_SPACE, base + CHUNK - HEADER) };
        }
    }

    /// The arena and its slabs.
    #[inline(always)]
    pub(crate) fn parts(&mut self) -> (&mut Arena, &mut Slabs) {
        // SAFETY: the lock is held by this guard, which is borrowed mutably.
        unsafe { (&mut *self.slot.arena.get(), &mut *self.slabs.get()) }
    }

    /// Allocates a slot of slab class `class` for `size` bytes asked as `kind`.
    #[inline(always)]
    pub(crate) fn slab_alloc(
        &mut self,
        root: &Root,
        class: usize,
        size: usize,
        kind: usize,
    ) -> Option<usize> {
        let (arena, slabs) = self.parts();
        arena.slab_alloc(slabs, class, size, kind, root)
    }

    /// The arena's slabs.
    pub(crate) fn slabs(&self) -> &Slabs {
        // SAFETY: the lock is held by this guard.
        unsafe { &*self.slabs.get() }
    }

    /// The arena's outbox.
    fn outbox(&mut self) -> &mut Outbox<ARENAS> {
        // SAFETY: the lock is held by this guard, which is borrowed mutably.
        unsafe { &mut *self.slot.outbox.get() }
    }
}

impl Drop for ArenaGuard<'_> {
    fn drop(&mut self) {
        self.slot.lock.unlock(0);
    }
}

impl Root {
    /// This thread's arena: the one its identity claimed (see `claims.rs`), from the one
    /// its identity prefers.
    #[inline(always)]
    pub(crate) fn own_arena(&self) -> usize {
        let me = thread_pointer();
        self.claims.arena_of(me, arena_of(me))
    }
}

/// The arena a thread prefers, from its pthread identity (no thread-local state).
///
/// A thread's `pthread_self` is its control block, at the top of its stack, and stacks are
/// mapped one after another: 2 MiB apart for Rust threads, 8 MiB for C threads (plus a
/// guard page). Summing the address's 2 MiB and 8 MiB digits gives consecutive stacks of
/// either size different arenas (over random bases: the first 13 threads on average with
/// 2 MiB stacks, 15.8 with 8 MiB, of 16 arenas), where a plain hash puts two threads on one
/// arena one time in sixteen, and they then take turns on it. The main thread's stack is
/// elsewhere: it meets another thread's arena with probability 1/16. Where the heap's own
/// mappings lie between the stacks (a C program under the preload library) the spread is
/// lost, and two threads met on one arena in 5 runs of 16: the arena a thread uses is the
/// one its identity claimed from here ([`Root::own_arena`]).
#[cfg(test)]
fn preferred_arena() -> usize {
    arena_of(thread_pointer())
}

/// The arena preferred by the thread whose `pthread_self` is `thread`: the sum of its
/// address's 2 MiB and 8 MiB digits, modulo [`ARENAS`].
#[inline(always)]
const fn arena_of(thread: usize) -> usize {
    ((thread >> 21) + (thread >> 23)) % ARENAS
}

/// This thread's `pthread_self`: on x86-64 Linux, the thread pointer, read from `%fs:0`
/// (the TLS ABI keeps the thread control block's address in its first word, and glibc's
/// and musl's `pthread_self` return that address), without the call through the PLT
/// that `pthread_self` costs on every allocation and free.
#[cfg(all(target_arch = "x86_64", target_os = "linux", not(loom)))]
#[inline(always)]
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: `%fs:0` is mapped in every thread of a Linux x86-64 process (the TLS ABI's
    // thread control block); reading it has no side effects.
    unsafe {
        core::arch::asm!(
            "mov {}, qword ptr fs:[0]",
            out(reg) tp,
            options(nostack, readonly, preserves_flags, pure)
        );
    }
    tp
}

/// This thread's `pthread_self`.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(loom))))]
#[inline(always)]
fn thread_pointer() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

impl Root {
    /// Maps the first chunk and builds the heap in it, running `checks`. `None` if the OS
    /// gives no memory.
    pub(crate) fn create(seed: [u8; 32], checks: Checks, arenas: usize) -> Option<*mut Root> {
        debug_assert!((1..=ARENAS).contains(&arenas));
        let base = os::map_aligned(CHUNK, CHUNK)?.as_ptr() as usize;
        let root = base as *mut Root;
        let key = Rng::from_seed_stream(seed, 0).next_u64();
        // SAFETY: the mapping is fresh, zeroed (a valid `Root`, its arenas not ready),
        // aligned, and larger than `Root`; nothing else refers to it yet.
        unsafe {
            ptr::addr_of_mut!((*root).key).write(key);
            ptr::addr_of_mut!((*root).checks).write(checks.bits());
            ptr::addr_of_mut!((*root).seed).write(UnsafeCell::new(seed));
            Claims::set_limit(ptr::addr_of_mut!((*root).claims), arenas);
            (*root).table_insert(base | KIND_BLOCKS);
        }
        Some(root)
    }

    /// The detection classes this heap runs.
    #[inline(always)]
    pub(crate) fn checks(&self) -> Checks {
        Checks::from_bits(self.checks)
    }

    /// How many arenas, from the first, this heap's threads use.
    pub(crate) fn arenas(&self) -> usize {
        self.claims.limit()
    }

    /// The length of the inaccessible page after each huge block (0 without guard pages).
    fn guard(&self) -> usize {
        if self.checks().contains(Checks::GUARD_PAGES) {
            os::page_size()
        } else {
            0
        }
    }

    /// Locks the arena this thread prefers, or the next free one of the heap's arenas if it
    /// is busy (then waits for the preferred one if all are), and frees what others queued
    /// there meanwhile.
    // The thread's own arena, free, is the path of almost every call, inlined into each
    // caller; the search for another is out of line.
    #[inline(always)]
    pub(crate) fn lock_any(&self) -> ArenaGuard<'_> {
        let first = self.own_arena();
        if self.slots[first].lock.try_lock().is_some() {
            return ArenaGuard::drained(self, first);
        }
        self.lock_other(first)
    }

    /// [`lock_any`](Self::lock_any) when the thread's own arena `first` is busy: the next
    /// free one after it, else `first` when it frees.
    #[cold]
    #[inline(never)]
    fn lock_other(&self, first: usize) -> ArenaGuard<'_> {
        let arenas = self.arenas();
        (1..arenas)
            .map(|i| (first + i) % arenas)
            .find(|&index| self.slots[index].lock.try_lock().is_some())
            .map_or_else(
                || self.lock_arena(first),
                |index| ArenaGuard::drained(self, index),
            )
    }

    /// Locks arena `index` (and frees what others queued there meanwhile).
    pub(crate) fn lock_arena(&self, index: usize) -> ArenaGuard<'_> {
        self.slots[index].lock.lock();
        ArenaGuard::drained(self, index)
    }
}

impl Root {
    /// Maps a chunk, lets `set_up` write its first words (what names its arena) and
    /// registers it as `kind`; its base, or `None` if the OS or the table refuses.
    fn register_chunk(&self, kind: usize, set_up: impl FnOnce(usize)) -> Option<usize> {
        let base = os::map_aligned(CHUNK, CHUNK)?.as_ptr() as usize;
        set_up(base);
        self.table_lock.lock();
        let ok = self.table_insert(base | kind);
        self.table_lock.unlock(0);
        if !ok {
            // SAFETY: the chunk was just made and is referred to by nothing.
            unsafe { os::unmap(ptr::NonNull::new_unchecked(base as *mut u8), CHUNK) };
            return None;
        }
        Some(base)
    }
}

impl ChunkSource for Root {
    fn new_chunk(&self, index: usize) -> Option<usize> {
        // SAFETY: the chunk is fresh; its first word names its arena before anyone can
        // find it in the table.
        self.register_chunk(KIND_BLOCKS, |base| unsafe { wr(base, index) })
    }

    fn new_slab_chunk(&self, index: usize, class: usize, key: Option<u64>) -> Option<usize> {
        // SAFETY: the chunk is fresh; its first slab's header (whose first word names the
        // arena) is written before anyone can find it in the table.
        self.register_chunk(KIND_SLABS, |base| unsafe {
            crate::heap::init_slab(base, index, class, key)
        })
    }
}
