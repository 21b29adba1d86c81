//! The per-class cache: small freed blocks kept whole, in a bag per exact size, and handed
//! out again at random, so that most allocations and frees of small blocks skip the
//! placement draw, the cut, the coalescing and the list and tally updates.
//!
//! # Policy
//!
//! A freed block of at most [`CACHED_MAX`] bytes (header included: the 64 exact classes)
//! goes, zero-filled, into its size's bag instead of back to the free lists, while the
//! arena's bags hold less than [`CACHE_BYTES`]. A bag keeps its blocks in the order they
//! were freed; when it is full ([`BAG`] blocks) its oldest goes back to the free lists,
//! merged with its free neighbours as any freed block.
//!
//! An allocation of a cached size takes from its bag only when the bag holds at least
//! [`CHOICE`] blocks older than its [`DELAY`] newest, and then a block drawn uniformly among
//! those older ones. So:
//!
//! * a freed block is never handed out before [`DELAY`] more blocks of its size were freed
//!   after it (the allocation right after a free never returns it, and neither do any
//!   number of allocations without frees between them);
//! * each block handed out from a bag is one of at least [`CHOICE`], drawn with the arena's
//!   generator; the blocks themselves were placed at random when they were first carved;
//! * otherwise the allocation is placed as the module documentation of
//!   [`heap`](super) says.
//!
//! # Detection
//!
//! A cached block's header says so: BUSY and WILD together, a pair no other block has, under
//! a valid keyed tag. A free of a cached block (a double free), a `realloc` or a
//! `malloc_usable_size` of one are refused as the double free they are; a free that merges
//! leaves a cached neighbour alone, as it does a live one. With zero-fill, the block's
//! payload is zeroed when it enters its bag and checked when it leaves it, handed out (as
//! much of it as [`take_block`](Arena::take_block) checks of any block) or sent back to the
//! free lists (all of it): a write through a dangling pointer aborts then, naming the word
//! written.

use core::cell::UnsafeCell;

use super::header::*;
use super::*;
use crate::os;

/// The largest block (header included) that is cached: the exact classes' largest.
pub(crate) const CACHED_MAX: usize = 1040;
/// Bags per arena: one per block size from [`MIN_BLOCK`] to [`CACHED_MAX`].
pub(crate) const CACHED_SIZES: usize = (CACHED_MAX - MIN_BLOCK) / GRANULE + 1;
/// Blocks per bag.
pub(crate) const BAG: usize = 32;
/// A bag's newest blocks that are not handed out: a freed block waits for this many more
/// frees of its size.
pub(crate) const DELAY: usize = 16;
/// The fewest blocks an allocation draws among: a bag with fewer than `DELAY + CHOICE`
/// blocks hands out none.
pub(crate) const CHOICE: usize = 8;
/// The most bytes an arena's bags hold together; a free beyond it goes to the free lists.
pub(crate) const CACHE_BYTES: u64 = 256 << 10;
const _: () = assert!(DELAY + CHOICE <= BAG && BAG.is_power_of_two());

/// The header flags of a cached block (see the module documentation).
pub(crate) const CACHED: usize = BUSY | WILD;

/// One size's bag: a ring of block headers, oldest at `head`.
#[repr(C)]
pub(crate) struct Bag {
    head: usize,
    len: usize,
    slots: [usize; BAG],
}

/// An arena's bags, in the control block (zeroed memory: every bag empty). Bags of the
/// smallest sizes, the most used, come first, so that a small program touches one page.
#[repr(C)]
pub(crate) struct Cache(UnsafeCell<[Bag; CACHED_SIZES]>);

impl Cache {
    /// Where the bags are, for the arena that owns them.
    pub(crate) fn bags(&self) -> usize {
        self.0.get() as usize
    }
}

/// Which bag holds blocks of `size` bytes (`MIN_BLOCK..=CACHED_MAX`, a multiple of 16).
#[inline(always)]
fn bag_index(size: usize) -> usize {
    debug_assert!((MIN_BLOCK..=CACHED_MAX).contains(&size) && size.is_multiple_of(GRANULE));
    (size - MIN_BLOCK) / GRANULE
}

impl Arena {
    /// The bag of blocks of `size` bytes.
    ///
    /// # Safety
    ///
    /// The cache is on (`self.cache != 0`) and `size` is a cached size; the lock is held.
    #[inline(always)]
    unsafe fn bag(&mut self, size: usize) -> &mut Bag {
        // SAFETY: `self.cache` is this arena's `Cache` in the control block, reached only
        // under its lock (forwarded), and the index is in range (forwarded).
        unsafe { (*(self.cache as *mut [Bag; CACHED_SIZES])).get_unchecked_mut(bag_index(size)) }
    }

    /// Hands out a cached block of `need` bytes for `requested` payload bytes, if its bag
    /// has enough to draw from (see the module documentation); returns the payload.
    ///
    /// # Safety
    ///
    /// The lock is held; `need` is a block size (a multiple of 16, at least `MIN_BLOCK`).
    #[inline(always)]
    pub(super) unsafe fn cache_take(&mut self, need: usize, requested: usize) -> Option<usize> {
        if self.cache == 0 || need > CACHED_MAX {
            return None;
        }
        // SAFETY: the cache is on and `need` a cached size.
        let len = unsafe { self.bag(need) }.len;
        if len < DELAY + CHOICE {
            return None;
        }
        let r = self.rng().below((len - DELAY) as u64) as usize;
        // SAFETY: as above.
        let bag = unsafe { self.bag(need) };
        // The drawn block's place goes to the oldest, which stays among the older blocks:
        // the newest DELAY keep their places.
        let i = (bag.head + r) % BAG;
        let h = bag.slots[i];
        bag.slots[i] = bag.slots[bag.head];
        bag.head = (bag.head + 1) % BAG;
        bag.len = len - 1;
        // SAFETY: bags hold cached blocks of this arena.
        unsafe {
            let (w0, prev) = self.get_or_die(h);
            if w0 != need | CACHED {
                os::fatal("corrupted block cache (heap overflow?)", h + HEADER);
            }
            if self.zero_fill {
                self.take_block(h + HEADER, h + need);
            }
            self.put(h, need | BUSY, prev);
            if self.canaries {
                arm_canary(self.key, h, need, requested);
            }
        }
        self.cached_bytes -= need as u64;
        self.live_bytes += need as u64;
        self.allocations += 1;
        Some(h + HEADER)
    }

    /// Caches the block at `h` (`size` bytes, no longer counted as live), if the cache is
    /// on, the size cached and the arena's bags have room; `false` otherwise, the block
    /// untouched (but its previous size: a bag's oldest block sent back to make room may
    /// have been its left neighbour, and merged). `scrubbed`: its payload reads zero
    /// already.
    ///
    /// # Safety
    ///
    /// `h` is a block of this arena that nobody uses any more; the lock is held.
    #[inline(always)]
    pub(super) unsafe fn cache_put(&mut self, h: usize, size: usize, scrubbed: bool) -> bool {
        if self.cache == 0 || size > CACHED_MAX {
            return false;
        }
        // SAFETY: the cache is on and `size` a cached size.
        if unsafe { self.bag(size) }.len == BAG {
            // SAFETY: as above.
            unsafe { self.evict_oldest(size) };
        }
        if self.cached_bytes + size as u64 > CACHE_BYTES {
            return false;
        }
        // SAFETY: the block is the caller's to give up; its payload is its own; its
        // neighbours are reached through its checked header.
        unsafe {
            // Both neighbours' headers are checked as a merge would check them, so that an
            // overflow out of this block, or one that rewrote its previous size, is caught
            // at this free, not when the block leaves its bag.
            let prev = prev_of(h);
            if prev != 0 {
                self.left_of(h, prev);
            }
            self.get_or_die(h + size);
            if self.zero_fill && !scrubbed {
                self.scrub(h + HEADER, h + size);
            }
            self.put(h, size | CACHED, prev);
        }
        // SAFETY: as above.
        let bag = unsafe { self.bag(size) };
        bag.slots[(bag.head + bag.len) % BAG] = h;
        bag.len += 1;
        self.cached_bytes += size as u64;
        true
    }

    /// Takes the oldest block out of the bag of `size` bytes and sends it back to the free
    /// lists ([`uncache`](Self::uncache)).
    ///
    /// # Safety
    ///
    /// As [`bag`](Self::bag), and the bag is not empty.
    unsafe fn evict_oldest(&mut self, size: usize) {
        // SAFETY: forwarded.
        let bag = unsafe { self.bag(size) };
        debug_assert!(bag.len > 0);
        let oldest = bag.slots[bag.head];
        bag.head = (bag.head + 1) % BAG;
        bag.len -= 1;
        // SAFETY: bags hold cached blocks of this arena.
        unsafe { self.uncache(oldest) };
    }

    /// Sends the cached block at `h`, taken out of its bag, back to the free lists, after
    /// checking (with zero-fill) that its payload still reads zero.
    ///
    /// # Safety
    ///
    /// `h` is a cached block of this arena, in no bag; the lock is held.
    unsafe fn uncache(&mut self, h: usize) {
        // SAFETY: forwarded: a block of this arena.
        unsafe {
            let (w0, prev) = self.get_or_die(h);
            let size = w0 & !FLAGS;
            if w0 & FLAGS != CACHED {
                os::fatal("corrupted block cache (heap overflow?)", h + HEADER);
            }
            if self.zero_fill {
                self.take_clean(h + HEADER, h + size);
            }
            self.cached_bytes -= size as u64;
            self.release(h, size, prev, true);
        }
    }

    /// Sends every cached block back to the free lists (after the same check as a bag's
    /// oldest gets when it leaves).
    ///
    /// # Safety
    ///
    /// The lock is held.
    pub(crate) unsafe fn flush_cache(&mut self) {
        if self.cache == 0 {
            return;
        }
        for size in (MIN_BLOCK..=CACHED_MAX).step_by(GRANULE) {
            // SAFETY: the cache is on, and `size` a cached size.
            while unsafe { self.bag(size) }.len > 0 {
                // SAFETY: as above.
                unsafe { self.evict_oldest(size) };
            }
        }
    }

    /// Checks the bags against what the walk of the arena's chunks found (`blocks` cached
    /// blocks of `bytes` bytes): each member a cached block of its bag's size, reached
    /// once, and the totals equal.
    ///
    /// # Safety
    ///
    /// The lock is held.
    pub(crate) unsafe fn check_cache(&mut self, blocks: u64, bytes: u64) -> Result<(), Corruption> {
        let (mut members, mut total) = (0u64, 0u64);
        if self.cache != 0 {
            for size in (MIN_BLOCK..=CACHED_MAX).step_by(GRANULE) {
                // SAFETY: the cache is on, and `size` a cached size.
                let bag = unsafe { self.bag(size) };
                if bag.len > BAG || bag.head >= BAG {
                    return Err(Corruption::with(
                        "cache bag out of range",
                        size,
                        bag.head,
                        bag.len,
                    ));
                }
                let (head, len) = (bag.head, bag.len);
                for k in 0..len {
                    // SAFETY: as above.
                    let h = unsafe { self.bag(size) }.slots[(head + k) % BAG];
                    // SAFETY: bag members are cached blocks of this arena: the bags lie in
                    // the control block, which no block's overflow reaches (arena 0's
                    // blocks come after it).
                    let header = unsafe { get(self.key, h) };
                    if header.map(|(w0, _)| w0) != Some(size | CACHED) {
                        return Err(Corruption::with(
                            "cache member is not a cached block of its bag's size",
                            h,
                            size,
                            0,
                        ));
                    }
                    members += 1;
                    total += size as u64;
                }
            }
        }
        if members != blocks || total != bytes || total != self.cached_bytes {
            return Err(Corruption::with(
                "cached blocks in chunks disagree with the bags",
                self.index,
                bytes as usize,
                total as usize,
            ));
        }
        Ok(())
    }
}
