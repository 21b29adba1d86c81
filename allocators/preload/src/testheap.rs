//! [`TestHeap`]: a small, honest [`MallocHeap`] for testing the preload layer — test
//! infrastructure, not a research allocator. It is slow under contention (one lock) and
//! never returns small-block memory to the OS.
//!
//! It does not use libc's `malloc` (which it replaces when preloaded) or Rust's global
//! allocator (which, inside a preload library, *is* `malloc`): memory comes from `mmap`.
//!
//! ```text
//!  chunk (1 MiB, mmap'd, never unmapped), carved front to back into raw blocks:
//!  ┌──────────┬──────┬────────────┬────┬─ ─ ─
//!  │ 64       │ 32   │ 1024       │ 64 │  ...     raw block sizes: powers of two, 32 B ..
//!  └──────────┴──────┴────────────┴────┴─ ─ ─     256 KiB; free ones sit on one free list
//!                                                  per size, linked through their first word
//!  raw block: [ slack | header: raw base, raw length | user block ...            ]
//!                       (16 bytes, just before the user pointer)
//!
//!  larger raw blocks: their own mapping, unmapped on free.
//! ```
//!
//! Invariants: every raw block is 16-byte aligned and at least 32 bytes; the header of a
//! live block sits in the 16 bytes before the user pointer, inside its raw block; the user
//! pointer is aligned to `max(16, align)`; `raw base + raw length - user pointer` is at
//! least the size asked for (the raw block is asked for `size + max(16, align)` bytes, and
//! aligning up from `raw + 16` moves the user pointer at most `max(16, align)` bytes past
//! `raw`). A raw length above [`MAX_CLASS_BYTES`] means the block is its own mapping.
//!
//! Thread safety: one futex lock around the free lists and the bump pointer. `mmap` of
//! large blocks and `munmap` happen outside it. Fork safety: [`ForkHooks`] takes the lock
//! before `fork` and releases it on both sides.

use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use alloclab_core::{AllocError, AllocErrorKind, Allocator, HostAllocator, MallocHeap, Stats};

use crate::fork::ForkHooks;

/// Bytes of the header before every user pointer (and the smallest alignment served).
const HEADER_BYTES: usize = 16;
/// The smallest raw block: the header and 16 usable bytes.
const MIN_CLASS_SHIFT: u32 = 5;
/// The largest raw block carved from chunks (256 KiB); larger ones get their own mapping.
const MAX_CLASS_SHIFT: u32 = 18;
/// The largest raw block carved from chunks, in bytes.
pub const MAX_CLASS_BYTES: usize = 1 << MAX_CLASS_SHIFT;
const CLASS_COUNT: usize = (MAX_CLASS_SHIFT - MIN_CLASS_SHIFT + 1) as usize;
/// Size of each chunk mapped for small blocks.
const CHUNK_BYTES: usize = 1 << 20;

/// A size-class heap with one lock, over `mmap`. See the [module docs](self).
///
/// Zero-size layouts get a unique block (the smallest class), as `malloc(0)` needs.
pub struct TestHeap {
    lock: FutexLock,
    small: UnsafeCell<SmallBlocks>,
    live_bytes: AtomicU64,
    footprint_bytes: AtomicU64,
    peak_footprint_bytes: AtomicU64,
    allocations: AtomicU64,
    deallocations: AtomicU64,
}

// SAFETY: `small` is only touched with `lock` held; the counters are atomics. The raw
// pointers inside point to mappings owned by the heap, not to thread-local data.
unsafe impl Sync for TestHeap {}
// SAFETY: as above; nothing in the heap is tied to the thread that created it.
unsafe impl Send for TestHeap {}

/// The state behind the lock.
struct SmallBlocks {
    /// Head of the free list of each class (raw blocks, linked through their first word).
    free: [*mut u8; CLASS_COUNT],
    /// The unused tail of the current chunk: `[bump, bump_end)`.
    bump: usize,
    bump_end: usize,
}

impl TestHeap {
    /// An empty heap; maps nothing until the first allocation.
    pub const fn new() -> Self {
        Self {
            lock: FutexLock::new(),
            small: UnsafeCell::new(SmallBlocks {
                free: [ptr::null_mut(); CLASS_COUNT],
                bump: 0,
                bump_end: 0,
            }),
            live_bytes: AtomicU64::new(0),
            footprint_bytes: AtomicU64::new(0),
            peak_footprint_bytes: AtomicU64::new(0),
            allocations: AtomicU64::new(0),
            deallocations: AtomicU64::new(0),
        }
    }

    /// Allocates; also says whether the block is fresh from `mmap` (hence already zero).
    fn allocate_block(&self, layout: Layout) -> Result<(NonNull<u8>, bool), AllocError> {
        let align = layout.align().max(HEADER_BYTES);
        let raw_needed = layout
            .size()
            .checked_add(align)
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or(AllocError::new(layout, AllocErrorKind::SizeUnsupported))?;
        let (raw, raw_len, fresh) = if raw_needed <= MAX_CLASS_BYTES {
            let class = class_of(raw_needed);
            let raw = self
                .take_small(class)
                .ok_or(AllocError::new(layout, AllocErrorKind::OutOfMemory))?;
            (raw, class_bytes(class), false)
        } else {
            let len = raw_needed
                .checked_next_multiple_of(crate::api::page_size())
                .ok_or(AllocError::new(layout, AllocErrorKind::SizeUnsupported))?;
            let raw = map(len).ok_or(AllocError::new(layout, AllocErrorKind::OutOfMemory))?;
            self.add_footprint(len);
            (raw, len, true)
        };
        // `raw` is 16-aligned, so `raw + 16` aligned up to `align` is at most `raw + align`,
        // and `align + size <= raw_len`.
        let user = (raw as usize + HEADER_BYTES).next_multiple_of(align);
        let offset = user - raw as usize;
        // SAFETY: `offset <= align`, so `user` and its header `[user - 16, user)` lie inside
        // the raw block, which this thread now owns; the header is 16-aligned.
        let user = unsafe {
            let user = raw.add(offset);
            user.cast::<[usize; 2]>()
                .sub(1)
                .write([raw as usize, raw_len]);
            NonNull::new_unchecked(user)
        };
        self.live_bytes.fetch_add(raw_len as u64, Ordering::Relaxed);
        self.allocations.fetch_add(1, Ordering::Relaxed);
        Ok((user, fresh))
    }

    /// Pops a raw block of `class`, carving a new one from the chunk if the list is empty.
    fn take_small(&self, class: usize) -> Option<*mut u8> {
        let _guard = self.lock.lock();
        // SAFETY: the lock is held, so this is the only reference to the state.
        let small = unsafe { &mut *self.small.get() };
        let head = *small.free.get(class)?;
        if !head.is_null() {
            // SAFETY: a free raw block's first word is the next free block of its class.
            small.free[class] = unsafe { head.cast::<*mut u8>().read() };
            return Some(head);
        }
        let size = class_bytes(class);
        if small.bump_end - small.bump < size {
            self.refill(small)?;
        }
        let raw = small.bump as *mut u8;
        small.bump += size;
        Some(raw)
    }

    /// Puts the rest of the current chunk on the free lists and maps a new chunk.
    fn refill(&self, small: &mut SmallBlocks) -> Option<()> {
        let chunk = map(CHUNK_BYTES)?;
        self.add_footprint(CHUNK_BYTES);
        while small.bump_end - small.bump >= class_bytes(0) {
            let rest = small.bump_end - small.bump;
            let class = (rest.ilog2() - MIN_CLASS_SHIFT).min(MAX_CLASS_SHIFT - MIN_CLASS_SHIFT);
            let raw = small.bump as *mut u8;
            // SAFETY: `raw` starts an unused, 32-aligned piece of a chunk at least as large
            // as its class; we make it a free block of that class.
            unsafe { push(small, class as usize, raw) };
            small.bump += class_bytes(class as usize);
        }
        small.bump = chunk as usize;
        small.bump_end = chunk as usize + CHUNK_BYTES;
        Some(())
    }

    fn add_footprint(&self, bytes: usize) {
        let now = self
            .footprint_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed)
            + bytes as u64;
        self.peak_footprint_bytes.fetch_max(now, Ordering::Relaxed);
    }

    /// The header of the live block at `user`: its raw base and raw length.
    ///
    /// # Safety
    ///
    /// `user` is a live block of this heap.
    unsafe fn header(user: NonNull<u8>) -> (*mut u8, usize) {
        // SAFETY: every live block has its header in the 16 bytes before it.
        let [raw, len] = unsafe { user.as_ptr().cast::<[usize; 2]>().sub(1).read() };
        (raw as *mut u8, len)
    }
}

impl Default for TestHeap {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for TestHeap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TestHeap")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// The class whose raw blocks hold `raw_needed` bytes (`raw_needed <= MAX_CLASS_BYTES`).
fn class_of(raw_needed: usize) -> usize {
    let shift = raw_needed
        .max(1 << MIN_CLASS_SHIFT)
        .next_power_of_two()
        .trailing_zeros();
    (shift - MIN_CLASS_SHIFT) as usize
}

fn class_bytes(class: usize) -> usize {
    1 << (class + MIN_CLASS_SHIFT as usize)
}

/// Pushes `raw` on the free list of `class`.
///
/// # Safety
///
/// `raw` is a raw block of `class` that nothing else uses; the heap's lock is held.
unsafe fn push(small: &mut SmallBlocks, class: usize, raw: *mut u8) {
    if let Some(head) = small.free.get_mut(class) {
        // SAFETY: the block is ours and at least a word long and aligned.
        unsafe { raw.cast::<*mut u8>().write(*head) };
        *head = raw;
    }
}

/// Maps `len` bytes of fresh, zeroed, private memory.
fn map(len: usize) -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping at an address of the kernel's choice has no
    // preconditions; failure is reported as MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

impl Allocator for TestHeap {
    type Handle = NonNull<u8>;

    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.allocate_block(layout).map(|(block, _)| block)
    }

    unsafe fn deallocate(&self, handle: NonNull<u8>, _layout: Layout) {
        // SAFETY: the caller guarantees `handle` is a live block of this heap.
        unsafe { self.deallocate_unsized(handle) }
    }

    fn name(&self) -> &str {
        "testheap"
    }

    /// Live bytes count whole raw blocks (header and rounding included).
    fn stats(&self) -> Stats {
        Stats {
            live_bytes: Some(self.live_bytes.load(Ordering::Relaxed)),
            footprint_bytes: Some(self.footprint_bytes.load(Ordering::Relaxed)),
            peak_footprint_bytes: Some(self.peak_footprint_bytes.load(Ordering::Relaxed)),
            allocations: Some(self.allocations.load(Ordering::Relaxed)),
            deallocations: Some(self.deallocations.load(Ordering::Relaxed)),
            max_alloc_steps: None,
            max_free_steps: None,
        }
    }
}

impl HostAllocator for TestHeap {
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let (block, fresh) = self.allocate_block(layout)?;
        if !fresh {
            // SAFETY: the block is live and at least `layout.size()` bytes long.
            unsafe { block.as_ptr().write_bytes(0, layout.size()) };
        }
        Ok(block)
    }
}

// SAFETY: `usable_size` is `raw + raw_len - user`, at least the size asked for (module
// invariants), and all of it lies inside the raw block the allocation owns.
// `deallocate_unsized` frees exactly what `deallocate` frees: `deallocate` forwards to it.
unsafe impl MallocHeap for TestHeap {
    unsafe fn usable_size(&self, ptr: NonNull<u8>) -> usize {
        // SAFETY: the caller guarantees `ptr` is a live block of this heap.
        let (raw, len) = unsafe { Self::header(ptr) };
        raw as usize + len - ptr.as_ptr() as usize
    }

    unsafe fn deallocate_unsized(&self, ptr: NonNull<u8>) {
        // SAFETY: the caller guarantees `ptr` is a live block of this heap.
        let (raw, len) = unsafe { Self::header(ptr) };
        self.live_bytes.fetch_sub(len as u64, Ordering::Relaxed);
        self.deallocations.fetch_add(1, Ordering::Relaxed);
        if len > MAX_CLASS_BYTES {
            // SAFETY: a raw length above the largest class means `raw` is a mapping of
            // exactly `len` bytes made for this block alone, now dead.
            unsafe { libc::munmap(raw.cast(), len) };
            self.footprint_bytes
                .fetch_sub(len as u64, Ordering::Relaxed);
        } else {
            let _guard = self.lock.lock();
            // SAFETY: the lock is held; `raw` is the dead block's raw block, of the class
            // its length names.
            unsafe { push(&mut *self.small.get(), class_of(len), raw) };
        }
    }
}

impl ForkHooks for TestHeap {
    fn prepare_fork(&self) {
        self.lock.lock_raw();
    }

    fn after_fork_in_parent(&self) {
        // SAFETY: `prepare_fork` took the lock on this thread.
        unsafe { self.lock.unlock_raw() };
    }

    fn after_fork_in_child(&self) {
        // The child's only thread is the one that took the lock in `prepare_fork`; other
        // threads that were waiting do not exist here, so no wake-up is owed.
        self.lock.reset_in_child();
    }
}

/// A mutex on a futex word (Drepper, "Futexes Are Tricky", mutex 2): 0 free, 1 held,
/// 2 held with possible waiters. Like `std::sync::Mutex` on Linux it never allocates; unlike
/// it, it has explicit lock and unlock, so the fork hooks can hold it across `fork`.
struct FutexLock {
    state: AtomicU32,
}

const FREE: u32 = 0;
const HELD: u32 = 1;
const CONTENDED: u32 = 2;

impl FutexLock {
    const fn new() -> Self {
        Self {
            state: AtomicU32::new(FREE),
        }
    }

    fn lock(&self) -> FutexGuard<'_> {
        self.lock_raw();
        FutexGuard(self)
    }

    #[inline]
    fn lock_raw(&self) {
        if self
            .state
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
    }

    #[cold]
    fn lock_contended(&self) {
        for _ in 0..100 {
            if self.state.load(Ordering::Relaxed) == FREE
                && self
                    .state
                    .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            core::hint::spin_loop();
        }
        // Whoever holds it will see CONTENDED and wake one waiter on unlock.
        while self.state.swap(CONTENDED, Ordering::Acquire) != FREE {
            // SAFETY: waits on our own aligned futex word while it still reads CONTENDED;
            // a spurious or interrupted return is handled by the loop.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.state.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    CONTENDED,
                    ptr::null::<libc::timespec>(),
                );
            }
        }
    }

    /// # Safety
    ///
    /// The lock is held by this thread.
    #[inline]
    unsafe fn unlock_raw(&self) {
        if self.state.swap(FREE, Ordering::Release) == CONTENDED {
            // SAFETY: wakes at most one waiter on our own futex word.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.state.as_ptr(),
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    1,
                );
            }
        }
    }

    fn reset_in_child(&self) {
        self.state.store(FREE, Ordering::Release);
    }
}

struct FutexGuard<'a>(&'a FutexLock);

impl Drop for FutexGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { self.0.unlock_raw() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloclab_core::{Checked, Policy};

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn classes_cover_every_small_raw_size() {
        assert_eq!(class_of(1), 0);
        assert_eq!(class_of(32), 0);
        assert_eq!(class_of(33), 1);
        assert_eq!(class_of(MAX_CLASS_BYTES), CLASS_COUNT - 1);
        for raw in 1..=4096 {
            assert!(class_bytes(class_of(raw)) >= raw);
        }
    }

    #[test]
    fn blocks_honour_alignment_and_usable_size_covers_the_request() {
        let heap = TestHeap::new();
        for align in [1, 8, 16, 32, 64, 4096, 1 << 16, 1 << 20] {
            for size in [0, 1, 15, 16, 17, 1000, 4096, 100_000, 300_000] {
                let l = layout(size, align);
                let p = heap.allocate(l).unwrap();
                assert_eq!(p.as_ptr() as usize % align.max(16), 0);
                // SAFETY: `p` is live; its whole usable size is ours to write.
                unsafe {
                    let usable = heap.usable_size(p);
                    assert!(usable >= size, "size {size} align {align}: {usable}");
                    p.as_ptr().write_bytes(0x5a, usable);
                    heap.deallocate(p, l);
                }
            }
        }
        let stats = heap.stats();
        assert_eq!(stats.live_bytes, Some(0));
        assert_eq!(stats.live_blocks(), Some(0));
    }

    #[test]
    fn zero_size_blocks_are_unique() {
        let heap = TestHeap::new();
        let a = heap.allocate(layout(0, 1)).unwrap();
        let b = heap.allocate(layout(0, 1)).unwrap();
        assert_ne!(a, b);
        // SAFETY: both live.
        unsafe {
            heap.deallocate_unsized(a);
            heap.deallocate_unsized(b);
        }
    }

    #[test]
    fn freed_small_blocks_are_reused() {
        let heap = TestHeap::new();
        let l = layout(100, 16);
        let a = heap.allocate(l).unwrap();
        // SAFETY: `a` is live.
        unsafe { heap.deallocate(a, l) };
        let b = heap.allocate(l).unwrap();
        assert_eq!(a, b, "the free list is LIFO");
        // SAFETY: `b` is live.
        unsafe { heap.deallocate(b, l) };
    }

    #[test]
    fn large_blocks_are_unmapped_on_free() {
        let heap = TestHeap::new();
        let l = layout(4 << 20, 16);
        let p = heap.allocate(l).unwrap();
        let with = heap.stats().footprint_bytes.unwrap();
        assert!(with >= 4 << 20);
        // SAFETY: `p` is live.
        unsafe { heap.deallocate(p, l) };
        assert_eq!(heap.stats().footprint_bytes, Some(0));
        assert_eq!(heap.stats().peak_footprint_bytes, Some(with));
    }

    #[test]
    fn zeroed_allocation_is_zero_even_on_a_dirty_reused_block() {
        let heap = TestHeap::new();
        for size in [1, 100, 5000, 200_000, 400_000] {
            let l = layout(size, 16);
            let p = heap.allocate(l).unwrap();
            // SAFETY: live, `size` bytes; then freed.
            unsafe {
                p.as_ptr().write_bytes(0xff, size);
                heap.deallocate(p, l);
            }
            let q = heap.allocate_zeroed(l).unwrap();
            // SAFETY: live, `size` bytes.
            let bytes = unsafe { core::slice::from_raw_parts(q.as_ptr(), size) };
            assert!(bytes.iter().all(|&b| b == 0));
            // SAFETY: live.
            unsafe { heap.deallocate(q, l) };
        }
    }

    #[test]
    fn chunk_leftovers_go_to_smaller_classes() {
        let heap = TestHeap::new();
        let big = layout(MAX_CLASS_BYTES - 16, 16);
        let half = layout(MAX_CLASS_BYTES / 2 - 16, 16);
        // 3 * 256 KiB + 128 KiB of the first chunk used; the next 256 KiB block needs a
        // second chunk, and the first one's 128 KiB tail goes to the 128 KiB free list ...
        let mut blocks: Vec<_> = (0..3).map(|_| (heap.allocate(big).unwrap(), big)).collect();
        blocks.push((heap.allocate(half).unwrap(), half));
        assert_eq!(heap.stats().footprint_bytes, Some(CHUNK_BYTES as u64));
        blocks.push((heap.allocate(big).unwrap(), big));
        assert_eq!(heap.stats().footprint_bytes, Some(2 * CHUNK_BYTES as u64));
        // ... where the next 128 KiB request finds it, without a third chunk.
        let tail = heap.allocate(half).unwrap();
        let first_chunk = blocks[0].0.as_ptr() as usize;
        assert!((first_chunk..first_chunk + CHUNK_BYTES).contains(&(tail.as_ptr() as usize)));
        assert_eq!(heap.stats().footprint_bytes, Some(2 * CHUNK_BYTES as u64));
        blocks.push((tail, half));
        for (block, l) in blocks {
            // SAFETY: live with this layout, freed once.
            unsafe { heap.deallocate(block, l) };
        }
    }

    #[test]
    fn checked_finds_no_violation_in_a_mixed_sequence() {
        let heap = Checked::with_policy(TestHeap::new(), Policy::Panic);
        let mut live = Vec::new();
        let mut seed = 0x1234_5678_u64;
        for step in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if live.len() > 200 || (step % 3 == 2 && !live.is_empty()) {
                let (p, l) = live.swap_remove(seed as usize % live.len());
                // SAFETY: live with this layout.
                unsafe { heap.deallocate(p, l) };
            } else {
                let size = (seed >> 20) as usize % if step % 50 == 0 { 600_000 } else { 2000 };
                let align = 1 << ((seed >> 8) % 13);
                let l = layout(size, align);
                let p = if step % 5 == 0 {
                    heap.allocate_zeroed(l)
                } else {
                    heap.allocate(l)
                };
                live.push((p.unwrap(), l));
            }
        }
        for (p, l) in live {
            // SAFETY: live with this layout.
            unsafe { heap.deallocate(p, l) };
        }
        assert!(heap.violations().is_empty());
    }

    #[test]
    fn threads_allocating_and_freeing_each_others_blocks_agree_on_contents() {
        static HEAP: TestHeap = TestHeap::new();
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, usize, u8)>(64);
        let producers: Vec<_> = (0..3u8)
            .map(|t| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..5000usize {
                        let size = 1 + (i * 37 + t as usize * 11) % 3000;
                        let p = HEAP.allocate(layout(size, 16)).unwrap();
                        let tag = (i as u8).wrapping_add(t);
                        // SAFETY: live, `size` bytes.
                        unsafe { p.as_ptr().write_bytes(tag, size) };
                        tx.send((p.as_ptr() as usize, size, tag)).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        for (addr, size, tag) in rx {
            let p = NonNull::new(addr as *mut u8).unwrap();
            // SAFETY: sent by a producer, live, `size` bytes; freed once here.
            unsafe {
                let bytes = core::slice::from_raw_parts(p.as_ptr(), size);
                assert!(bytes.iter().all(|&b| b == tag));
                HEAP.deallocate_unsized(p);
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(HEAP.stats().live_blocks(), Some(0));
    }

    #[test]
    fn fork_hooks_release_the_lock_on_both_sides() {
        let heap = TestHeap::new();
        heap.prepare_fork();
        heap.after_fork_in_parent();
        let p = heap.allocate(layout(10, 16)).unwrap();
        // As if another thread held the lock when the process forked.
        heap.lock.lock_raw();
        heap.after_fork_in_child();
        // SAFETY: live.
        unsafe { heap.deallocate_unsized(p) };
    }
}
