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

use core::cell::UnsafeCell;
use core::ptr;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::Checks;
use crate::heap::{
    Arena, BUSY, CHUNK, CHUNK_HEADER, ChunkSource, Corruption, Counters, Expect, GRANULE, HEADER,
    HUGE, HeapShape, Invalid, Lists, Live, canary_len, check_canary, claim_remote, get, put, rd,
    scrub_queued, set_kind, validate_in_chunk, wr,
};
use crate::lock::StateWord;
use crate::os;
use crate::remote::{Outbox, RemoteFrees};
use crate::rng::Rng;
use crate::zero::ZeroSize;

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
    remote: [Padded<RemoteFrees>; ARENAS],
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
        let mut guard = ArenaGuard { slot };
        if !guard.is_ready() {
            guard.set_up(root, index);
        }
        let remote = &root.remote[index];
        if !remote.is_empty() {
            let queued = remote.take_all();
            // SAFETY: the stack holds blocks of this arena, whose lock is held.
            unsafe { guard.drain(queued) };
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

/// The arena a thread prefers, from its pthread identity (no thread-local state).
///
/// A thread's `pthread_self` is its control block, at the top of its stack, and stacks are
/// mapped one after another: 2 MiB apart for Rust threads, 8 MiB for C threads (plus a
/// guard page). Summing the address's 2 MiB and 8 MiB digits gives consecutive stacks of
/// either size different arenas (over random bases: the first 13 threads on average with
/// 2 MiB stacks, 15.8 with 8 MiB, of 16 arenas), where a plain hash puts two threads on one
/// arena one time in sixteen, and they then take turns on it. The main thread's stack is
/// elsewhere: it meets another thread's arena with probability 1/16.
#[inline(always)]
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
    pub(crate) fn create(seed: [u8; 32], checks: Checks) -> Option<*mut Root> {
        let base = os::map_aligned(CHUNK, CHUNK)?.as_ptr() as usize;
        let root = base as *mut Root;
        let key = Rng::from_seed_stream(seed, 0).next_u64();
        // SAFETY: the mapping is fresh, zeroed (a valid `Root`, its arenas not ready),
        // aligned, and larger than `Root`; nothing else refers to it yet.
        unsafe {
            ptr::addr_of_mut!((*root).key).write(key);
            ptr::addr_of_mut!((*root).checks).write(checks.bits());
            ptr::addr_of_mut!((*root).seed).write(UnsafeCell::new(seed));
            (*root).table_insert(base | KIND_BLOCKS);
        }
        Some(root)
    }

    /// The detection classes this heap runs.
    #[inline(always)]
    pub(crate) fn checks(&self) -> Checks {
        Checks::from_bits(self.checks)
    }

    /// The length of the inaccessible page after each huge block (0 without guard pages).
    fn guard(&self) -> usize {
        if self.checks().contains(Checks::GUARD_PAGES) {
            os::page_size()
        } else {
            0
        }
    }

    /// Locks the arena this thread prefers, or the next free one if it is busy (then waits
    /// for the preferred one if all are), and frees what others queued there meanwhile.
    #[inline]
    pub(crate) fn lock_any(&self) -> ArenaGuard<'_> {
        let first = preferred_arena();
        (0..ARENAS)
            .map(|i| (first + i) % ARENAS)
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

    // ----- chunk table ---------------------------------------------------------------

    /// The table slot where probing for the mapping based at `base` starts.
    ///
    /// Chunks within the same [`TABLE_RUN`] chunks of address space (2 GiB) get
    /// consecutive slots, on one page of the table; which page is a hash of the address
    /// above that. The OS maps a process's chunks near each other, so a small heap's
    /// entries share one page of the table rather than taking a page each (three pages of
    /// a three-thread program's heap, before). Linear probing then meets runs of
    /// neighbouring chunks; a lookup of a registered chunk still finds its own slot first
    /// unless two bases 2 GiB x 32 apart collide.
    fn slot_of(base: usize) -> usize {
        let chunk = base / CHUNK;
        let page = ((chunk / TABLE_RUN) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> (64 - (TABLE / TABLE_RUN).trailing_zeros());
        page as usize * TABLE_RUN + chunk % TABLE_RUN
    }

    /// Adds `entry`; `false` if the table is full. Under the table lock, or before the heap
    /// is published.
    fn table_insert(&self, entry: usize) -> bool {
        let mut i = Self::slot_of(entry & !(CHUNK - 1));
        loop {
            let e = self.table[i].load(Ordering::Relaxed);
            if e == TOMBSTONE {
                break;
            }
            if e == 0 {
                let used = self.table_used.load(Ordering::Relaxed);
                if used >= TABLE / 4 * 3 {
                    return false;
                }
                self.table_used.store(used + 1, Ordering::Relaxed);
                break;
            }
            i = (i + 1) & (TABLE - 1);
        }
        self.table[i].store(entry, Ordering::Release);
        true
    }

    /// The kind of the mapping based at `base`, if it is this heap's. Lock-free.
    fn table_find(&self, base: usize) -> Option<usize> {
        let mut i = Self::slot_of(base);
        loop {
            let e = self.table[i].load(Ordering::Acquire);
            if e == 0 {
                return None;
            }
            if e != TOMBSTONE && e & !(CHUNK - 1) == base {
                return Some(e & (CHUNK - 1));
            }
            i = (i + 1) & (TABLE - 1);
        }
    }

    /// Replaces the entry of `base` (present) with a tombstone. Under the table lock.
    ///
    /// A tombstone followed by an empty slot ends every probe that reaches it: no entry
    /// lies past it on a probe through it (an insert fills the first tombstone or empty
    /// slot it meets, so the slots between an entry and where its probe starts are never
    /// empty). It is made empty again, and so is each tombstone before it that then ends
    /// its cluster, and they stop counting against the table's limit. Without that, a
    /// program whose mappings come and go at ever-new addresses would fill the table with
    /// tombstones and be refused memory. A lock-free lookup that read the tombstone
    /// walks on to the empty slot; one that reads the empty slot stops there: either way
    /// it finds what is registered.
    fn table_remove(&self, base: usize) {
        let mut i = Self::slot_of(base);
        loop {
            let e = self.table[i].load(Ordering::Relaxed);
            if e != TOMBSTONE && e & !(CHUNK - 1) == base {
                self.table[i].store(TOMBSTONE, Ordering::Release);
                break;
            }
            i = (i + 1) & (TABLE - 1);
        }
        let mut cleared = 0;
        while self.table[i].load(Ordering::Relaxed) == TOMBSTONE
            && self.table[(i + 1) & (TABLE - 1)].load(Ordering::Relaxed) == 0
        {
            self.table[i].store(0, Ordering::Release);
            cleared += 1;
            i = i.wrapping_sub(1) & (TABLE - 1);
        }
        if cleared > 0 {
            let used = self.table_used.load(Ordering::Relaxed);
            self.table_used.store(used - cleared, Ordering::Relaxed);
        }
    }

    /// Every mapping but the first chunk, as `(base, len)`.
    pub(crate) fn other_mappings(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let own = self as *const Root as usize;
        self.table
            .iter()
            .filter_map(move |e| {
                let e = e.load(Ordering::Acquire);
                if e == 0 || e == TOMBSTONE || e & !(CHUNK - 1) == own {
                    return None;
                }
                let base = e & !(CHUNK - 1);
                Some(if e & (CHUNK - 1) == KIND_HUGE {
                    // SAFETY: a huge mapping starts with its accessible length (see
                    // `allocate_huge`); its guard page follows.
                    (base, unsafe { rd(base) } + self.guard())
                } else {
                    (base, CHUNK)
                })
            })
            .chain(self.zero.mapping())
    }

    // ----- huge blocks ---------------------------------------------------------------

    /// A block with a mapping of its own: `size` bytes aligned to `align`. The mapping
    /// starts with a descriptor (its accessible length, the payload's offset), then the
    /// header. With guard pages, an inaccessible page follows, and the payload is placed
    /// as close to it as the alignment allows (within 15 bytes for `malloc`'s), so that an
    /// overflow past the block faults at once.
    pub(crate) fn allocate_huge(&self, size: usize, align: usize, kind: usize) -> Option<usize> {
        // A zero size (with an alignment that makes the block huge) gets a byte: its
        // payload must lie before the guard page.
        let size = size.max(1);
        let least = align.max(2 * HEADER);
        let len = least
            .checked_add(size)?
            .checked_next_multiple_of(os::page_size())?;
        let guard = self.guard();
        // `least` is a multiple of `align` (a power of two, at least 16), and the payload
        // may move up by less than a page: it stays in the mapping's first chunk-sized
        // unit, where `locate` finds it (`align` is at most half a chunk).
        let offset = if guard > 0 {
            (len - size) & !(align.max(GRANULE) - 1)
        } else {
            least
        };
        debug_assert!(offset >= least && offset + size <= len && offset < CHUNK);
        let base = os::map_aligned(len.checked_add(guard)?, CHUNK)?.as_ptr() as usize;
        // SAFETY: the last page of the mapping just made, which nothing refers to yet.
        if guard > 0 && !unsafe { os::protect_none(base + len, guard) } {
            // SAFETY: the mapping was just made and is referred to by nothing.
            unsafe { os::unmap(ptr::NonNull::new_unchecked(base as *mut u8), len + guard) };
            return None;
        }
        self.table_lock.lock();
        // SAFETY: the mapping is fresh and `offset >= 32`: descriptor and header are apart.
        unsafe {
            wr(base, len);
            wr(base + 8, offset);
            put(self.key, base + offset - HEADER, len | BUSY | HUGE, offset);
            set_kind(base + offset - HEADER, kind);
        }
        let ok = self.table_insert(base | KIND_HUGE);
        self.table_lock.unlock(0);
        if !ok {
            // SAFETY: the mapping was just made and is referred to by nothing.
            unsafe { os::unmap(ptr::NonNull::new_unchecked(base as *mut u8), len + guard) };
            return None;
        }
        self.huge_live_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        self.huge_allocations.fetch_add(1, Ordering::Relaxed);
        Some(base + offset)
    }

    /// Checks a pointer into a huge mapping; under the table lock.
    ///
    /// # Safety
    ///
    /// `base` is a huge mapping in the table, which cannot be removed meanwhile.
    unsafe fn validate_huge(&self, base: usize, payload: usize) -> Result<Live, Invalid> {
        // SAFETY: the descriptor is the mapping's first two words.
        let (len, offset) = unsafe { (rd(base), rd(base + 8)) };
        if payload - base != offset || offset >= len {
            return Err(Invalid::BadHeader);
        }
        // SAFETY: the header lies inside the mapping.
        let (w0, prev) = unsafe { get(self.key, payload - HEADER) }.ok_or(Invalid::BadHeader)?;
        if w0 != len | BUSY | HUGE || prev != offset {
            return Err(Invalid::BadHeader);
        }
        Ok(Live {
            header: payload - HEADER,
            size: len,
            prev: offset,
            huge: true,
            canary: 0,
        })
    }

    /// A unique pointer for a zero-size request (see `zero.rs`), or `None` to serve it as
    /// an ordinary block.
    pub(crate) fn allocate_zero_size(&self) -> Option<usize> {
        self.zero.allocate(self.key)
    }

    // ----- blocks by address ---------------------------------------------------------

    /// What the table says about `payload`: its mapping's base and kind.
    fn locate(&self, payload: usize) -> Result<(usize, usize), Invalid> {
        if !payload.is_multiple_of(16) {
            return Err(Invalid::Misaligned);
        }
        let base = payload & !(CHUNK - 1);
        let kind = self.table_find(base).ok_or(Invalid::Foreign)?;
        let own = self as *const Root as usize;
        let first = if base == own {
            ROOT_SPACE
        } else {
            CHUNK_HEADER
        };
        if kind == KIND_BLOCKS && payload - base < first + HEADER {
            return Err(Invalid::BadHeader);
        }
        if kind == KIND_HUGE && payload - base < 2 * HEADER {
            return Err(Invalid::BadHeader);
        }
        Ok((base, kind))
    }

    /// The arena a chunk of blocks belongs to.
    fn arena_of(&self, base: usize) -> usize {
        if base == self as *const Root as usize {
            0
        } else {
            // SAFETY: `base` is a chunk of blocks in the table; its first word is its
            // arena's index, written before the chunk was registered.
            unsafe { rd(base) }.min(ARENAS - 1)
        }
    }

    /// Frees `payload`: checks it and frees it, or says why not (nothing changed then).
    // Inlined into its one caller (`Randomized::free_block`), for the same reason as
    // `Arena::alloc`.
    #[inline(always)]
    pub(crate) fn free(&self, payload: usize, expect: Expect) -> Result<(), Invalid> {
        let (base, kind) = match self.locate(payload) {
            Ok(found) => found,
            Err(Invalid::Foreign) if self.zero.contains(payload) => {
                // A zero-size block has no bytes, and records no kind. (A wrong size told
                // for a freed one is still reported as the double free it is.)
                if expect.size.is_some_and(|size| size != 0) {
                    self.zero.is_live(payload)?;
                    return Err(Invalid::WrongSize);
                }
                return self.zero.free(payload);
            }
            Err(why) => return Err(why),
        };
        if kind == KIND_HUGE {
            self.table_lock.lock();
            // SAFETY: under the table lock the mapping stays registered; the header of a
            // mapping that validates is its block's.
            let checked = unsafe { self.validate_huge(base, payload) }.and_then(|live| {
                // SAFETY: a huge block whose header validated.
                unsafe { expect.check(live.header, live.usable(), os::page_size()) }.map(|()| live)
            });
            let live = match checked {
                Ok(live) => live,
                Err(why) => {
                    self.table_lock.unlock(0);
                    return Err(why);
                }
            };
            self.table_remove(base);
            self.table_lock.unlock(0);
            self.huge_live_bytes
                .fetch_sub(live.size as u64, Ordering::Relaxed);
            self.huge_deallocations.fetch_add(1, Ordering::Relaxed);
            // SAFETY: removed from the table; the block was live and its owner frees it.
            unsafe {
                os::unmap(
                    ptr::NonNull::new_unchecked(base as *mut u8),
                    live.size + self.guard(),
                )
            };
            return Ok(());
        }
        let index = self.arena_of(base);
        let slot = &self.slots[index];
        let own = preferred_arena();
        if own != index && self.slots[own].lock.try_lock().is_some() {
            // Another arena's block, and this thread holds its own arena: queue the free in
            // its outbox, to be pushed to the block's arena with a chain of others.
            let mut arena = ArenaGuard::drained(self, own);
            // SAFETY: `payload` lies in a chunk of this heap (checked by `locate`).
            let size = unsafe { claim_remote(self.key, payload) }?;
            // SAFETY: claimed just above, not published yet: the block is this thread's.
            unsafe { self.queue_remote(payload, size, expect) }?;
            // SAFETY: the claimed block's first payload word is ours to link through.
            let link = |node: usize, next: usize| unsafe { wr(node, next) };
            if let Some((first, last)) = arena.outbox().add(index, payload, size, link) {
                self.remote[index].push_chain(first, |below| link(last, below));
            }
            return Ok(());
        }
        if slot.lock.try_lock().is_none() {
            // Busy: queue the free for the arena's next holder rather than wait.
            // SAFETY: `payload` lies in a chunk of this heap (checked by `locate`).
            let size = unsafe { claim_remote(self.key, payload) }?;
            // SAFETY: claimed just above, not published yet: the block is this thread's.
            unsafe { self.queue_remote(payload, size, expect) }?;
            // SAFETY: the claimed block's first payload word is ours to link through.
            self.remote[index].push(payload, |next| unsafe { wr(payload, next) });
            return Ok(());
        }
        let mut arena = ArenaGuard::drained(self, index);
        // SAFETY: the chunk is the arena's and its lock is held.
        let live = unsafe { validate_in_chunk(self.key, payload) }?;
        // SAFETY: validated under this lock hold.
        unsafe {
            check_canary(self.key, live.header, live.size)?;
            expect.check(live.header, live.usable(), self.size_slack())?;
            arena.free(live);
        }
        Ok(())
    }

    /// How far below a chunk block's usable size a sized delete may say: exact with
    /// canaries (the usable size is what was asked), else the rounding and a slack the
    /// block absorbed (under 48 bytes).
    #[inline(always)]
    fn size_slack(&self) -> usize {
        if self.checks().contains(Checks::CANARIES) {
            0
        } else {
            47
        }
    }

    /// What the thread that queues a remote free of the block at `payload` (`size` bytes)
    /// does first: checks its canary, and with zero-fill zeroes it (see `scrub_queued`).
    ///
    /// # Safety
    ///
    /// The caller claimed the block ([`claim_remote`]) and has not published it yet.
    #[inline(always)]
    unsafe fn queue_remote(
        &self,
        payload: usize,
        size: usize,
        expect: Expect,
    ) -> Result<(), Invalid> {
        // SAFETY: forwarded: the block is the caller's.
        unsafe {
            let h = payload - HEADER;
            check_canary(self.key, h, size)?;
            expect.check(h, size - HEADER - canary_len(h), self.size_slack())?;
            if self.checks().contains(Checks::ZERO_FILL) {
                scrub_queued(payload, size);
            }
        }
        Ok(())
    }

    /// Checks `payload` as `free` would, without freeing; its usable size if live.
    pub(crate) fn usable_size(&self, payload: usize) -> Result<usize, Invalid> {
        let (base, kind) = match self.locate(payload) {
            Ok(found) => found,
            Err(Invalid::Foreign) if self.zero.contains(payload) => {
                return self.zero.is_live(payload).map(|()| 0);
            }
            Err(why) => return Err(why),
        };
        if kind == KIND_HUGE {
            self.table_lock.lock();
            // SAFETY: under the table lock the mapping stays registered.
            let live = unsafe { self.validate_huge(base, payload) };
            self.table_lock.unlock(0);
            return live.map(|l| l.usable());
        }
        let _arena = self.lock_arena(self.arena_of(base));
        // SAFETY: the chunk's arena lock is held.
        unsafe { validate_in_chunk(self.key, payload) }.map(|l| l.usable())
    }

    /// Resizes `payload` in place to `size` bytes if its arena can; `Ok(false)` if not
    /// (huge blocks never are).
    pub(crate) fn resize_in_place(&self, payload: usize, size: usize) -> Result<bool, Invalid> {
        let (base, kind) = match self.locate(payload) {
            Ok(found) => found,
            Err(Invalid::Foreign) if self.zero.contains(payload) => {
                // A zero-size block never grows in place: it has no bytes.
                self.zero.is_live(payload)?;
                if size == 0 {
                    self.zero.count_resize();
                }
                return Ok(size == 0);
            }
            Err(why) => return Err(why),
        };
        if kind == KIND_HUGE {
            return Ok(false);
        }
        let mut arena = self.lock_arena(self.arena_of(base));
        // SAFETY: the chunk's arena lock is held.
        let live = unsafe { validate_in_chunk(self.key, payload) }?;
        // SAFETY: validated under this lock hold; a realloc checks the canary as a free.
        unsafe {
            check_canary(self.key, live.header, live.size)?;
            Ok(arena.resize_in_place(live, size))
        }
    }

    // ----- whole heap ----------------------------------------------------------------

    /// Takes every lock (arenas by index, then the table): before `fork`.
    ///
    /// Arenas no thread has used stay as they are (nobody can have queued frees there: they
    /// have no blocks), so a `fork` does not touch their pages.
    pub(crate) fn lock_all(&self) {
        for (index, slot) in self.slots.iter().enumerate() {
            slot.lock.lock();
            // SAFETY: the lock was just taken.
            if unsafe { (*slot.arena.get()).is_ready() } {
                core::mem::forget(ArenaGuard::drained(self, index));
            }
        }
        self.table_lock.lock();
    }

    /// Releases what [`lock_all`](Self::lock_all) took; in a forked child, also reseeds
    /// every arena's generator.
    ///
    /// # Safety
    ///
    /// This thread holds every lock (it called `lock_all`).
    pub(crate) unsafe fn unlock_all(&self, reseed: bool) {
        if reseed {
            // SAFETY: every lock is held, so no arena is being set up from the seed.
            unsafe { *self.seed.get() = os::entropy() };
        }
        self.table_lock.unlock(0);
        for slot in &self.slots {
            // SAFETY: the lock is held.
            let arena = unsafe { &mut *slot.arena.get() };
            if reseed && arena.is_ready() {
                arena.reseed();
            }
            slot.lock.unlock(0);
        }
    }

    /// Locks arena `index` if a thread has used it; `None` (and unlocked) if not.
    fn lock_if_used(&self, index: usize) -> Option<ArenaGuard<'_>> {
        let slot = &self.slots[index];
        slot.lock.lock();
        // SAFETY: the lock was just taken.
        if unsafe { (*slot.arena.get()).is_ready() } {
            Some(ArenaGuard::drained(self, index))
        } else {
            slot.lock.unlock(0);
            None
        }
    }

    /// Pushes every arena's outbox chains to their arenas, so that the next lock of each
    /// arena completes every free queued so far (the counters and the heap walk count
    /// queued blocks as live).
    fn flush_outboxes(&self) {
        for i in 0..ARENAS {
            let Some(mut arena) = self.lock_if_used(i) else {
                continue;
            };
            arena.outbox().take_all(|dest, first, last| {
                // SAFETY: `last` is a claimed block of arena `dest`, linked through its first
                // payload word, which is ours until the push publishes it.
                self.remote[dest].push_chain(first, |below| unsafe { wr(last, below) });
            });
        }
    }

    /// The counters of all arenas and huge blocks, every queued free completed first.
    pub(crate) fn counters(&self) -> Counters {
        self.flush_outboxes();
        // The first chunk is mapped whether or not arena 0 has been set up in it.
        let first = CHUNK as u64;
        let mut total = Counters {
            mapped_bytes: first,
            peak_mapped_bytes: first,
            ..Counters::default()
        };
        for i in 0..ARENAS {
            if let Some(arena) = self.lock_if_used(i) {
                total.add(&arena.counters());
            }
        }
        let huge = self.huge_live_bytes.load(Ordering::Relaxed);
        total.live_bytes += huge;
        total.mapped_bytes += huge;
        total.peak_mapped_bytes += huge;
        total.allocations += self.huge_allocations.load(Ordering::Relaxed);
        total.deallocations += self.huge_deallocations.load(Ordering::Relaxed);
        let (zero_allocations, zero_deallocations, _) = self.zero.counts();
        total.allocations += zero_allocations;
        total.deallocations += zero_deallocations;
        total
    }

    /// Walks the whole heap under all its locks; see [`crate::Randomized::check`].
    pub(crate) fn check(&self) -> Result<HeapShape, Corruption> {
        self.flush_outboxes();
        self.lock_all();
        // SAFETY: every lock is held.
        let result = unsafe { self.check_locked() };
        // SAFETY: taken just above.
        unsafe { self.unlock_all(false) };
        result
    }

    /// # Safety
    ///
    /// Every lock is held.
    unsafe fn check_locked(&self) -> Result<HeapShape, Corruption> {
        let own = self as *const Root as usize;
        let mut shapes = [HeapShape::default(); ARENAS];
        let mut total = HeapShape::default();
        let mut huge_bytes = 0u64;
        for entry in &self.table {
            let e = entry.load(Ordering::Relaxed);
            if e == 0 || e == TOMBSTONE {
                continue;
            }
            let base = e & !(CHUNK - 1);
            if self.table_find(base).is_none() {
                return Err(Corruption::at("chunk unreachable in the chunk table", base));
            }
            if e & (CHUNK - 1) == KIND_HUGE {
                // SAFETY: a registered huge mapping; its descriptor says where its header is.
                let offset = unsafe { rd(base + 8) };
                // SAFETY: as above.
                match unsafe { self.validate_huge(base, base + offset) } {
                    Ok(live) => huge_bytes += live.size as u64,
                    Err(_) => {
                        return Err(Corruption::at(
                            "huge block header disagrees with its descriptor",
                            base,
                        ));
                    }
                }
                total.huge_blocks += 1;
                continue;
            }
            let index = self.arena_of(base);
            let first = if base == own {
                base + ROOT_SPACE
            } else {
                base + CHUNK_HEADER
            };
            // SAFETY: all locks are held.
            let arena = unsafe { &*self.slots[index].arena.get() };
            shapes[index].chunks += 1;
            if !arena.is_ready() {
                // Only the first chunk is mapped before its arena is set up: it holds no
                // blocks until a thread uses arena 0.
                if base != own {
                    return Err(Corruption::at("chunk of an arena never set up", base));
                }
                continue;
            }
            // SAFETY: the chunk is this arena's; its lock is held.
            unsafe { arena.check_chunk(first, base + CHUNK - HEADER, &mut shapes[index]) }?;
        }
        for (index, shape) in shapes.iter().enumerate() {
            // SAFETY: all locks are held.
            let arena = unsafe { &*self.slots[index].arena.get() };
            if !arena.is_ready() {
                total.chunks += shape.chunks;
                continue;
            }
            // SAFETY: as above.
            unsafe { arena.check_lists(shape.free_bytes, shape.live_bytes) }?;
            let wild = arena.wilderness();
            if wild != 0 && shape.wilderness_bytes == 0 {
                return Err(Corruption::at(
                    "wilderness outside every chunk of its arena",
                    wild,
                ));
            }
            total.chunks += shape.chunks;
            total.live_blocks += shape.live_blocks;
            total.free_blocks += shape.free_blocks;
            total.live_bytes += shape.live_bytes;
            total.free_bytes += shape.free_bytes;
            total.wilderness_bytes += shape.wilderness_bytes;
        }
        if huge_bytes != self.huge_live_bytes.load(Ordering::Relaxed) {
            return Err(Corruption::with(
                "huge live bytes disagree with the huge mappings",
                0,
                huge_bytes as usize,
                self.huge_live_bytes.load(Ordering::Relaxed) as usize,
            ));
        }
        total.live_bytes += huge_bytes;
        total.zero_size_blocks = self.zero.counts().2;
        Ok(total)
    }
}

impl ChunkSource for Root {
    fn new_chunk(&self, index: usize) -> Option<usize> {
        let base = os::map_aligned(CHUNK, CHUNK)?.as_ptr() as usize;
        // SAFETY: the chunk is fresh; its first word names its arena before anyone can
        // find it in the table.
        unsafe { wr(base, index) };
        self.table_lock.lock();
        let ok = self.table_insert(base | KIND_BLOCKS);
        self.table_lock.unlock(0);
        if !ok {
            // SAFETY: the chunk was just made and is referred to by nothing.
            unsafe { os::unmap(ptr::NonNull::new_unchecked(base as *mut u8), CHUNK) };
            return None;
        }
        Some(base)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use core::alloc::Layout;

    use alloclab_core::Allocator;

    use super::*;
    use crate::Randomized;

    #[test]
    fn the_thread_pointer_is_pthread_self() {
        let check = || {
            // SAFETY: no preconditions.
            assert_eq!(thread_pointer(), unsafe { libc::pthread_self() } as usize);
        };
        check();
        std::thread::spawn(check).join().unwrap();
    }

    /// The resident pages among the `len` bytes at `base` (a page-aligned mapping).
    fn resident_pages(base: usize, len: usize) -> Vec<usize> {
        let page = os::page_size();
        let mut v = vec![0u8; len / page];
        // SAFETY: `base..base + len` is mapped (a chunk of the heap under test); `v` has a
        // byte per page.
        let rc = unsafe { libc::mincore(base as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore failed");
        (0..v.len()).filter(|&i| v[i] & 1 != 0).collect()
    }

    /// One thread allocates and frees from a fresh heap; returns the heap, its control
    /// block's address, and the block's address.
    fn one_thread_heap(size: usize) -> (Randomized, usize, usize) {
        let heap = Randomized::with_seed(7).expect("first chunk");
        let root = heap.existing_root().expect("built") as *const Root as usize;
        let layout = Layout::from_size_align(size, 16).unwrap();
        let block = std::thread::scope(|s| {
            s.spawn(|| {
                let p = heap.allocate(layout).expect("allocation");
                // SAFETY: allocated just above with `layout`.
                unsafe { heap.deallocate(p.cast(), layout) };
                p.cast::<u8>().as_ptr() as usize
            })
            .join()
            .unwrap()
        });
        (heap, root, block)
    }

    #[test]
    fn a_thread_touches_one_page_of_the_control_block_for_its_arena() {
        let (heap, root, _) = one_thread_heap(64);
        let page = os::page_size();
        let pages = resident_pages(root, ROOT_SPACE.next_multiple_of(page));
        // SAFETY: `root` is the control block of `heap`, alive until the end of the test.
        let r = unsafe { &*(root as *const Root) };
        let page_of = |addr: usize| (addr - root) / page;
        // The pages of the table that hold an entry: the first chunk's and the thread's
        // chunk's, one page unless the two lie on either side of a 2 GiB boundary (which
        // the addresses the OS picks decide).
        let table_pages: Vec<usize> = r
            .table
            .iter()
            .filter(|e| e.load(Ordering::Relaxed) != 0)
            .map(|e| page_of(e as *const AtomicUsize as usize))
            .collect();
        let slot_pages: Vec<usize> = r
            .slots
            .iter()
            .map(|s| page_of(s as *const Slot as usize))
            .collect();
        // The shared page, one arena's slot, and the table's pages of the two chunks.
        // (Before: the slot straddled two pages, the shared fields had one after the slots,
        // each chunk's table entry a page of its own, and arena 0 was set up at creation,
        // its slot and first block touched whether used or not: 7 or more.)
        let slots_touched = pages.iter().filter(|p| slot_pages.contains(p)).count();
        assert_eq!(slots_touched, 1, "resident control-block pages {pages:?}");
        assert!(
            pages
                .iter()
                .all(|p| *p == 0 || slot_pages.contains(p) || table_pages.contains(p)),
            "resident control-block pages {pages:?}, table entries on {table_pages:?}"
        );
        assert!(!table_pages.is_empty() && table_pages.len() <= 2);
        assert!(heap.check().is_ok());
    }

    #[test]
    fn a_chunk_with_a_wilderness_leaves_its_last_page_untouched() {
        let (heap, root, block) = one_thread_heap(64);
        let chunk = block & !(CHUNK - 1);
        let page = os::page_size();
        let pages = resident_pages(chunk, CHUNK);
        let last = CHUNK / page - 1;
        assert!(!pages.contains(&last), "last page resident: {pages:?}");
        if chunk != root {
            // The thread's own chunk: a few pages at its front.
            assert!(pages.iter().all(|&p| p < 16), "pages {pages:?}");
        }
        assert!(heap.check().is_ok());
    }

    /// The chunk table's slots: the chunks of one run of [`TABLE_RUN`] take consecutive
    /// slots on one page of the table, and runs spread over the table's pages.
    #[test]
    fn a_run_of_chunks_takes_consecutive_slots_on_one_page_of_the_table() {
        let mut rng = Rng::from_seed_stream([9; 32], 0);
        let pages = TABLE / TABLE_RUN;
        let mut used = std::collections::HashSet::new();
        for _ in 0..256 {
            // A run anywhere in a 47-bit address space.
            let runs = 1u64 << (47 - (CHUNK * TABLE_RUN).trailing_zeros());
            let first = rng.below(runs) as usize * TABLE_RUN * CHUNK;
            let slot = Root::slot_of(first);
            assert_eq!(slot % TABLE_RUN, 0, "run at {first:#x}: slot {slot}");
            assert!(slot + TABLE_RUN <= TABLE, "run at {first:#x}: slot {slot}");
            for k in 0..TABLE_RUN {
                assert_eq!(
                    Root::slot_of(first + k * CHUNK),
                    slot + k,
                    "{first:#x} + {k}"
                );
            }
            used.insert(slot / TABLE_RUN);
        }
        assert!(
            used.len() >= pages * 3 / 4,
            "256 runs on {} of {pages} pages",
            used.len()
        );
    }

    /// `count` chunk bases (never mapped) whose table probes all start at `slot`: the
    /// same offset in runs of chunks that hash to the same page, far above where the OS
    /// maps anything here.
    fn bases_at(slot: usize, count: usize) -> Vec<usize> {
        let run_bytes = TABLE_RUN * CHUNK;
        let first = (1usize << 45) / run_bytes;
        // Runs hash to one of TABLE / TABLE_RUN pages: a few hundred runs hold `count`.
        let bases: Vec<usize> = (first..first + 1024 * count)
            .map(|run| run * run_bytes + slot % TABLE_RUN * CHUNK)
            .filter(|&base| Root::slot_of(base) == slot)
            .take(count)
            .collect();
        assert_eq!(
            bases.len(),
            count,
            "runs whose chunks start their probe at slot {slot}"
        );
        bases
    }

    /// The chunk table with colliding entries: each goes to the next free slot after
    /// where its probe starts (wrapping at the table's end), each is found by its own
    /// base with its own kind, a removed one leaves a tombstone that lookups walk past and
    /// an insert reuses; and the table refuses an entry past three quarters full.
    #[test]
    fn the_chunk_table_keeps_colliding_entries_apart_and_refuses_past_three_quarters() {
        let heap = Randomized::with_seed(79).expect("first chunk");
        let root = heap.existing_root().expect("built");
        root.table_lock.lock();
        // Three entries whose probes start at the last slot: the second and third wrap.
        let bases = bases_at(TABLE - 1, 4);
        let kinds = [KIND_BLOCKS, KIND_HUGE, KIND_BLOCKS];
        for (&base, &kind) in bases.iter().zip(&kinds) {
            assert!(root.table_insert(base | kind));
        }
        for (&base, &kind) in bases.iter().zip(&kinds) {
            assert_eq!(root.table_find(base), Some(kind), "{base:#x}");
        }
        assert_eq!(root.table_find(bases[3]), None, "never inserted");
        root.table_remove(bases[0]);
        assert_eq!(root.table_find(bases[0]), None, "removed");
        assert_eq!(
            root.table_find(bases[1]),
            Some(KIND_HUGE),
            "past the tombstone"
        );
        assert_eq!(
            root.table_find(bases[2]),
            Some(KIND_BLOCKS),
            "past the tombstone"
        );
        let used = root.table_used.load(Ordering::Relaxed);
        assert!(root.table_insert(bases[3] | KIND_HUGE));
        assert_eq!(
            root.table_used.load(Ordering::Relaxed),
            used,
            "the tombstone reused"
        );
        assert_eq!(root.table_find(bases[3]), Some(KIND_HUGE));
        for &base in &bases[1..] {
            root.table_remove(base);
        }
        // Fill: the entry that would take the table past three quarters is refused.
        let mut filler = Vec::new();
        let first = (1usize << 46) / CHUNK;
        for chunk in first.. {
            let base = chunk * CHUNK;
            if !root.table_insert(base | KIND_BLOCKS) {
                break;
            }
            filler.push(base);
            assert!(filler.len() <= TABLE, "the table never refused an entry");
        }
        assert_eq!(root.table_used.load(Ordering::Relaxed), TABLE / 4 * 3);
        assert!(
            filler
                .iter()
                .all(|&b| root.table_find(b) == Some(KIND_BLOCKS))
        );
        for base in filler {
            root.table_remove(base);
        }
        // The heap's own chunk is still found, past whatever tombstones are left.
        let own = root as *const Root as usize;
        assert_eq!(root.table_find(own), Some(KIND_BLOCKS));
        root.table_lock.unlock(0);
        assert!(heap.check().is_ok());
    }

    /// Removing the last entry of a cluster empties its slot and the tombstones before it,
    /// which stop counting against the limit; a tombstone with an entry after it stays
    /// (lookups of that entry walk past it).
    #[test]
    fn removing_a_clusters_last_entry_empties_the_tombstones_before_it() {
        // Not dropped if the test fails: its table would then hold made-up mappings,
        // which dropping the heap would read and unmap.
        let heap = core::mem::ManuallyDrop::new(Randomized::with_seed(80).expect("first chunk"));
        let root = heap.existing_root().expect("built");
        root.table_lock.lock();
        // Three entries whose probes start at one slot, with four empty slots from there.
        let slot = (0..TABLE - 4)
            .step_by(97)
            .find(|&s| (s..s + 4).all(|i| root.table[i].load(Ordering::Relaxed) == 0))
            .expect("four empty slots in a row");
        let bases = bases_at(slot, 3);
        let used = root.table_used.load(Ordering::Relaxed);
        for &base in &bases {
            assert!(root.table_insert(base | KIND_HUGE));
        }
        let slot_value = |i: usize| root.table[i].load(Ordering::Relaxed);
        assert_eq!(root.table_used.load(Ordering::Relaxed), used + 3);
        // The middle one: a tombstone with an entry after it.
        root.table_remove(bases[1]);
        assert_eq!(slot_value(slot + 1), TOMBSTONE);
        assert_eq!(root.table_used.load(Ordering::Relaxed), used + 3);
        assert_eq!(
            root.table_find(bases[2]),
            Some(KIND_HUGE),
            "past the tombstone"
        );
        // The last one: it and the tombstone before it are emptied, the first stays.
        root.table_remove(bases[2]);
        assert_eq!((slot_value(slot + 1), slot_value(slot + 2)), (0, 0));
        assert_eq!(root.table_used.load(Ordering::Relaxed), used + 1);
        assert_eq!(root.table_find(bases[0]), Some(KIND_HUGE));
        assert_eq!(root.table_find(bases[1]), None);
        assert_eq!(root.table_find(bases[2]), None);
        root.table_remove(bases[0]);
        assert_eq!(slot_value(slot), 0);
        assert_eq!(root.table_used.load(Ordering::Relaxed), used);
        root.table_lock.unlock(0);
        assert!(heap.check().is_ok());
        drop(core::mem::ManuallyDrop::into_inner(heap));
    }

    /// Mappings that come and go at ever-new addresses, one or two at a time, never fill
    /// the table: four times its size of them are each registered and found.
    #[test]
    fn mappings_at_ever_new_addresses_never_fill_the_chunk_table() {
        // Not dropped if the test fails: its table would then hold made-up mappings,
        // which dropping the heap would read and unmap.
        let heap = core::mem::ManuallyDrop::new(Randomized::with_seed(81).expect("first chunk"));
        let root = heap.existing_root().expect("built");
        root.table_lock.lock();
        let first = (1usize << 46) / CHUNK;
        let mut previous = None;
        for chunk in first..first + 4 * TABLE {
            let base = chunk * CHUNK;
            assert!(
                root.table_insert(base | KIND_HUGE),
                "mapping {} of a churn refused, {} slots in use",
                chunk - first,
                root.table_used.load(Ordering::Relaxed)
            );
            assert_eq!(root.table_find(base), Some(KIND_HUGE));
            if let Some(previous) = previous.replace(base) {
                root.table_remove(previous);
            }
        }
        root.table_remove(previous.unwrap());
        assert!(root.table_used.load(Ordering::Relaxed) < TABLE / 2);
        let own = root as *const Root as usize;
        assert_eq!(root.table_find(own), Some(KIND_BLOCKS));
        root.table_lock.unlock(0);
        assert!(heap.check().is_ok());
        drop(core::mem::ManuallyDrop::into_inner(heap));
    }

    /// The arenas that eight threads alive at once, each with a stack of `stack` bytes,
    /// prefer.
    fn preferred_by_eight_threads(stack: usize) -> Vec<usize> {
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    std::thread::Builder::new()
                        .stack_size(stack)
                        .spawn_scoped(s, || {
                            // All alive together: eight stacks at once.
                            barrier.wait();
                            preferred_arena()
                        })
                        .unwrap()
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Threads alive at once prefer different arenas, with Rust's 2 MiB stacks and the C
    /// library's 8 MiB ones alike (consecutive stacks of either size map to different
    /// arenas), so that they do not take turns on one lock.
    #[test]
    fn threads_alive_at_once_spread_over_the_arenas() {
        for stack in [2 << 20, 8 << 20] {
            let mut preferred = preferred_by_eight_threads(stack);
            assert!(preferred.iter().all(|&a| a < ARENAS), "{preferred:?}");
            preferred.sort_unstable();
            preferred.dedup();
            assert!(
                preferred.len() >= 4,
                "eight threads with {stack} B stacks on arenas {preferred:?}"
            );
        }
    }

    /// The spread that `preferred_arena` promises, on stacks laid out as the C library maps
    /// them (one after another downwards, each its size plus a guard page, or without one),
    /// over random bases: on average, the first 13 consecutive 2 MiB stacks and the first
    /// 15.8 consecutive 8 MiB ones meet no arena twice (with a plain hash, 4.7 would).
    #[test]
    fn consecutive_stacks_of_either_size_prefer_different_arenas() {
        let mut rng = alloclab_core::rng::SplitMix64::new(0x5eed);
        for (stack, least_mean) in [(2usize << 20, 12.5), (8 << 20, 15.0)] {
            for guard in [0, 4096] {
                let bases = 4096;
                let mut before_repeat = 0;
                for _ in 0..bases {
                    // The thread pointer: near the top of a stack, anywhere in a 47-bit
                    // address space, 16-byte aligned.
                    let top = (rng.next_u64() as usize % (1 << 46) + (1 << 40)) & !15;
                    let mut seen = [false; ARENAS];
                    let mut run = 0;
                    for i in 0..ARENAS {
                        let arena = arena_of(top - i * (stack + guard));
                        assert!(arena < ARENAS);
                        if seen[arena] {
                            break;
                        }
                        seen[arena] = true;
                        run += 1;
                    }
                    before_repeat += run;
                }
                let mean = before_repeat as f64 / bases as f64;
                assert!(
                    mean >= least_mean,
                    "{stack} B stacks, {guard} B guard: the first {mean:.2} meet no arena twice"
                );
            }
        }
    }

    /// Arena 0 starts in the first chunk, after the control block, and carves it to its
    /// end before it maps a chunk of its own: its blocks lie there, and the heap walk
    /// finds them.
    #[test]
    fn arena_zero_carves_the_first_chunk_after_the_control_block() {
        let heap = Randomized::with_seed(78).expect("first chunk");
        let root = heap.existing_root().expect("built");
        let base = root as *const Root as usize;
        let block = 60 << 10;
        let mut blocks = Vec::new();
        let mapped = heap.counters().mapped_bytes;
        // Until arena 0 maps a chunk: the first one's room after the control block.
        while heap.counters().mapped_bytes == mapped {
            let mut arena = root.lock_arena(0);
            let p = arena.alloc(block, 16, 0, root).expect("allocation");
            drop(arena);
            blocks.push(p);
            assert!(
                blocks.len() <= CHUNK / block,
                "the first chunk never filled"
            );
        }
        let last = blocks.pop().unwrap();
        // Each lands within WINDOW bytes of the wilderness front, the slack before it
        // going to the free lists.
        let least = (CHUNK - ROOT_SPACE) / (block + crate::heap::WINDOW) - 1;
        assert!(
            blocks.len() >= least,
            "{} blocks, {least} expected",
            blocks.len()
        );
        for &p in &blocks {
            assert!(
                p >= base + ROOT_SPACE && p + block <= base + CHUNK,
                "{p:#x} outside the first chunk's room"
            );
        }
        let shape = heap.check().expect("heap walk");
        assert_eq!(shape.live_blocks, blocks.len() as u64 + 1, "{shape:?}");
        let layout = Layout::from_size_align(block, 16).unwrap();
        for p in blocks.into_iter().chain([last]) {
            // SAFETY: allocated above with `layout`'s size and alignment, freed once.
            unsafe { heap.deallocate(core::ptr::NonNull::new(p as *mut u8).unwrap(), layout) };
        }
        assert_eq!(heap.check().expect("heap walk").live_blocks, 0);
    }

    /// Frees `p` (of `layout`) from a thread whose preferred arena is not this thread's,
    /// so that the free is queued for the block's arena rather than done in place.
    fn free_from_another_arena(heap: &Randomized, p: core::ptr::NonNull<u8>, layout: Layout) {
        let mine = preferred_arena();
        let address = p.as_ptr() as usize;
        for _ in 0..64 {
            let queued = std::thread::scope(|s| {
                s.spawn(|| {
                    if preferred_arena() == mine {
                        return false;
                    }
                    let p = core::ptr::NonNull::new(address as *mut u8).unwrap();
                    // SAFETY: live, allocated with `layout`, freed once (here).
                    unsafe { heap.deallocate(p, layout) };
                    true
                })
                .join()
                .unwrap()
            });
            if queued {
                return;
            }
        }
        panic!("64 threads all preferred this thread's arena");
    }

    /// With zero-fill, the payload of a block freed by another thread reads zero once
    /// the owner has taken the free, and is treated as a local free is: one under 64 KiB
    /// is zeroed with stores (by the thread that queues it), one of 64 KiB or more has its
    /// whole pages given back, none of them written.
    #[test]
    fn a_remote_free_zeroes_a_small_payload_and_gives_a_large_ones_pages_back() {
        let heap = Randomized::with_seed_and_checks(64, Checks::ALL).unwrap();
        // Live small blocks: a heap that did not shrink, where only the scrub of a large
        // payload gives pages back.
        let small = Layout::from_size_align(1024, 16).unwrap();
        let live: Vec<_> = (0..1024).map(|_| heap.allocate(small).unwrap()).collect();
        for (payload, least_released) in [
            (32usize << 10, None),
            ((64 << 10) - 16, None),
            (64 << 10, Some(56 << 10)),
            (96 << 10, Some(88 << 10)),
        ] {
            let layout = Layout::from_size_align(payload, 16).unwrap();
            let p = heap.allocate(layout).unwrap();
            // SAFETY: a live block of `payload` bytes.
            unsafe { p.as_ptr().write_bytes(0x5a, payload) };
            let before = heap.counters().released_bytes;
            free_from_another_arena(&heap, p, layout);
            // `counters` completes every queued free first.
            let released = heap.counters().released_bytes - before;
            // SAFETY: a read of freed memory in a chunk, which stays mapped.
            let stale = unsafe { p.as_ptr().add(payload / 2).read_volatile() };
            assert_eq!(stale, 0, "{payload} B: the freed payload reads {stale:#x}");
            match least_released {
                None => assert_eq!(released, 0, "{payload} B: zeroed with stores"),
                Some(least) => assert!(
                    released >= least,
                    "{payload} B: gave back {released} bytes (at least {least} expected)"
                ),
            }
        }
        heap.check().expect("freed memory reads zero");
        for p in live {
            // SAFETY: allocated above with `small`, freed once.
            unsafe { heap.deallocate(p, small) };
        }
    }

    #[test]
    fn chunks_whose_wilderness_retired_end_with_their_sentinel() {
        let heap = Randomized::with_seed(11).expect("first chunk");
        let layout = Layout::from_size_align(900 << 10, 16).unwrap();
        // Fourteen blocks of 900 KiB fill three 4 MiB chunks or more of one arena, each
        // retiring the wilderness before.
        let blocks: Vec<_> = (0..14)
            .map(|_| heap.allocate(layout).expect("allocation"))
            .collect();
        let shape = heap.check().expect("heap walk");
        assert!(shape.chunks >= 4, "{shape:?}");
        for p in blocks {
            // SAFETY: allocated above with `layout`.
            unsafe { heap.deallocate(p.cast(), layout) };
        }
        let shape = heap.check().expect("heap walk");
        assert_eq!(shape.live_blocks, 0, "{shape:?}");
    }
}
