//! The arena: its fields, the sentinels of its free lists, and the list operations
//! (push, unlink, counting and drawing by class).

use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicUsize, Ordering};

use super::class::*;
use super::header::*;
use super::*;
use crate::os;
use crate::rng::Rng;

/// The sentinels of one arena's free lists: for each class a pair of words, the `NEXT` and
/// `PREV` links of a block that is never handed out, which closes the class's list into a
/// ring. An empty list's sentinel links to itself. With no list end to test for, pushing
/// and unlinking take no branch on whether a list is empty, which is, for lists that
/// random placement keeps short, a coin toss the processor would mispredict.
///
/// Kept beside the arena rather than in it: the heap reaches them as it reaches blocks, by
/// address, through atomic words that only a shared reference covers.
#[repr(C, align(64))]
pub(crate) struct Lists([AtomicUsize; 2 * CLASSES]);

/// One arena: free lists, wilderness, generator, counters. Threads prefer the arena their
/// identity hashes to and move on to another when it is busy; a block is always freed into
/// the arena of its chunk.
#[repr(C)]
pub(crate) struct Arena {
    /// Whether [`init`](Self::init) has run: the control block is mapped zeroed, and an
    /// arena is set up by the first thread that locks it, so that the arenas no thread
    /// uses never touch their pages (about 4 KiB of resident memory each).
    pub(super) ready: bool,
    /// Whether freed memory is zero-filled and checked when handed out again (see
    /// `fill.rs`); the heap's setting, copied here.
    pub(super) zero_fill: bool,
    /// Whether busy blocks carry a canary after what was asked for (the heap's setting).
    pub(super) canaries: bool,
    /// This arena's index (written in the first word of its chunks).
    pub(super) index: usize,
    /// Key of the header tags (the heap's; copied here to keep it on the arena's lines).
    pub(super) key: u64,
    /// The placement generator (written by `init`).
    pub(super) rng: MaybeUninit<Rng>,
    /// Where the sentinels of the free lists are: the address of class 0's sentinel as a
    /// block (see [`Lists`]); class `c`'s is `16 * c` bytes further.
    pub(super) lists: usize,
    /// Free blocks and bytes on each class's list, as a [tally](tally_of).
    pub(super) class_tally: [u64; CLASSES],
    /// Free blocks and bytes on the lists of each group of [`GROUP`] classes.
    pub(super) group_tally: [u64; CLASSES / GROUP],
    /// Free blocks and bytes on the lists of classes `0..=SMALL_LAST`.
    pub(super) small_tally: u64,
    /// Header of the wilderness (0 if none).
    pub(super) wild: usize,
    /// Address of the newest chunk's sentinel (the wilderness ends there).
    pub(super) wild_end: usize,
    pub(super) live_bytes: u64,
    pub(super) mapped_bytes: u64,
    pub(super) peak_mapped_bytes: u64,
    pub(super) released_bytes: u64,
    pub(super) allocations: u64,
    pub(super) deallocations: u64,
}

/// What the arena needs from the rest of the heap to grow: a new chunk, registered in the
/// chunk table. `None` if the OS or the table refuses.
pub(crate) trait ChunkSource {
    /// Maps and registers a chunk for arena `index`; returns its base.
    fn new_chunk(&self, index: usize) -> Option<usize>;

    /// Maps and registers a slab chunk of class `class` for arena `index`, its header
    /// written (`key`: the canary key, with canaries); returns its base.
    fn new_slab_chunk(&self, index: usize, class: usize, key: Option<u64>) -> Option<usize>;
}

impl Arena {
    /// Whether [`init`](Self::init) has run.
    #[inline(always)]
    pub(crate) fn is_ready(&self) -> bool {
        self.ready
    }

    /// Sets up the arena (zeroed memory, as the control block is mapped, is a valid
    /// `Arena` that is not ready: every field is an integer, a flag or uninitialised), with
    /// `lists` as the sentinels of its free lists, every list empty.
    #[cold]
    pub(crate) fn init(
        &mut self,
        index: usize,
        key: u64,
        zero_fill: bool,
        canaries: bool,
        rng: Rng,
        lists: &Lists,
    ) {
        self.lists = lists.0.as_ptr() as usize - NEXT;
        for class in 0..CLASSES {
            let s = self.sentinel(class);
            lists.0[2 * class].store(s, Ordering::Relaxed);
            lists.0[2 * class + 1].store(s, Ordering::Relaxed);
        }
        self.rng.write(rng);
        self.index = index;
        self.key = key;
        self.zero_fill = zero_fill;
        self.canaries = canaries;
        self.ready = true;
    }

    /// The generator.
    #[inline(always)]
    pub(super) fn rng(&mut self) -> &mut Rng {
        debug_assert!(self.ready);
        // SAFETY: every arena is reached through a lock guard, which initialises it first
        // (`Root`'s `ArenaGuard`), and `init` writes the generator.
        unsafe { self.rng.assume_init_mut() }
    }

    /// Gives the arena `[start, sentinel)` of a fresh chunk as its first memory (the
    /// first chunk's space after the control block). The chunk's bytes are counted by the
    /// control block, which maps it before any arena is set up (see `Root::counters`).
    ///
    /// # Safety
    ///
    /// The range is fresh memory of a registered chunk that belongs to this arena.
    pub(crate) unsafe fn adopt_first(&mut self, start: usize, sentinel: usize) {
        // SAFETY: forwarded.
        unsafe { self.open_wilderness(start, sentinel) };
    }

    /// Replaces the generator's state with a fresh one from the OS (after `fork`, so that
    /// parent and child do not place objects alike).
    pub(crate) fn reseed(&mut self) {
        *self.rng() = Rng::from_seed(os::entropy());
    }

    /// As [`get`], for a header the heap itself reached (a neighbour, a list member): a bad
    /// one means the heap was overwritten, and the process aborts.
    ///
    /// # Safety
    ///
    /// As [`get`].
    #[inline(always)]
    pub(super) unsafe fn get_or_die(&self, h: usize) -> (usize, usize) {
        // SAFETY: forwarded from the caller.
        match unsafe { get(self.key, h) } {
            Some(header) => header,
            None => os::fatal("corrupted block header (heap overflow?)", h + HEADER),
        }
    }

    /// Writes a header.
    ///
    /// # Safety
    ///
    /// As [`put`].
    #[inline(always)]
    pub(super) unsafe fn put(&self, h: usize, w0: usize, prev: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { put(self.key, h, w0, prev) }
    }

    /// Rewrites the previous-size field of the block at `h` (not covered by the tag: one
    /// load and one store of the header's second word, which keeps its tag).
    ///
    /// # Safety
    ///
    /// `h` is a block of this arena.
    #[inline(always)]
    pub(super) unsafe fn set_prev(&self, h: usize, prev: usize) {
        // SAFETY: forwarded from the caller. One whole-word store, so that a remote free
        // checking the header without the lock (`claim_remote`) sees the old word or the
        // new one, each with the same valid tag.
        unsafe {
            let w1 = rd(h + 8);
            wr(h + 8, with_prev(w1, prev));
        }
    }

    /// Marks a header that is no longer a block boundary (its block merged into a free
    /// neighbour) as a free block of size 0 with a valid tag: a second free of the old
    /// block reads as the double free it is, and nothing else ever reads it (walks go by
    /// sizes from block boundaries). It stays until the memory is reused or released.
    ///
    /// # Safety
    ///
    /// `h` lies inside a block of this arena that the caller is rewriting.
    #[inline(always)]
    pub(super) unsafe fn poison(&self, h: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { self.put(h, 0, 0) }
    }

    // ----- free lists ----------------------------------------------------------------

    /// Counts a block of `bytes` bytes onto (`add`) or off class `class`'s list: its
    /// class's, group's and (for a small class) the small classes' tallies, one
    /// read-modify-write each.
    #[inline(always)]
    pub(super) fn count(&mut self, class: usize, bytes: u64, add: bool) {
        let t = tally_of(bytes);
        // Branch-free: whether a slack lands in the small classes is a coin toss.
        let small = t & u64::from(class <= SMALL_LAST).wrapping_neg();
        let (c, g) = (
            class & (CLASSES - 1),
            (class / GROUP) & (CLASSES / GROUP - 1),
        );
        if add {
            self.class_tally[c] += t;
            self.group_tally[g] += t;
            self.small_tally += small;
        } else {
            self.class_tally[c] -= t;
            self.group_tally[g] -= t;
            self.small_tally -= small;
        }
    }

    /// Bytes on all free lists (the group tallies summed: read rarely, so not kept).
    pub(super) fn pool(&self) -> u64 {
        tally_bytes(self.group_tally.iter().sum())
    }

    /// Free blocks and their bytes on the lists of classes `lo..=hi` (`lo <= hi`), in one
    /// pass: classes to the end of `lo`'s group, whole groups, then the classes of `hi`'s
    /// group. Plain index loops (indices masked into the arrays, so without bounds checks):
    /// the ranges are short, and iterator sums spend more on setting up than on adding.
    #[inline]
    pub(super) fn candidates(&self, lo: usize, hi: usize) -> (u64, u64) {
        let (glo, ghi) = (lo / GROUP, hi / GROUP);
        let mut sum = 0u64;
        let head_end = if glo == ghi {
            hi + 1
        } else {
            (glo + 1) * GROUP
        };
        let mut c = lo;
        while c < head_end {
            sum += self.class_tally[c & (CLASSES - 1)];
            c += 1;
        }
        if glo != ghi {
            let mut g = glo + 1;
            while g < ghi {
                sum += self.group_tally[g & (CLASSES / GROUP - 1)];
                g += 1;
            }
            c = ghi * GROUP;
            while c <= hi {
                sum += self.class_tally[c & (CLASSES - 1)];
                c += 1;
            }
        }
        (tally_blocks(sum), tally_bytes(sum))
    }

    /// The [tally](tally_of) of the lists of classes `0..lo` (`lo <= SMALL_LAST`): whole
    /// groups, then the classes of `lo`'s group.
    #[inline]
    pub(super) fn candidates_below(&self, lo: usize) -> u64 {
        let mut sum = 0u64;
        let mut g = 0;
        while g < lo / GROUP {
            sum += self.group_tally[g & (CLASSES / GROUP - 1)];
            g += 1;
        }
        let mut c = lo / GROUP * GROUP;
        while c < lo {
            sum += self.class_tally[c & (CLASSES - 1)];
            c += 1;
        }
        sum
    }

    /// The class in `lo..=hi` holding block number `target` of their lists.
    #[inline]
    pub(super) fn class_of_block(&self, lo: usize, hi: usize, mut target: u64) -> usize {
        let mut class = lo;
        let first_end = hi.min((lo / GROUP + 1) * GROUP - 1);
        while class <= first_end {
            let n = tally_blocks(self.class_tally[class & (CLASSES - 1)]);
            if target < n {
                return class;
            }
            target -= n;
            class += 1;
        }
        let mut group = class / GROUP;
        while group < hi / GROUP {
            let n = tally_blocks(self.group_tally[group & (CLASSES / GROUP - 1)]);
            if target < n {
                break;
            }
            target -= n;
            group += 1;
        }
        class = class.max(group * GROUP);
        while class < hi {
            let n = tally_blocks(self.class_tally[class & (CLASSES - 1)]);
            if target < n {
                return class;
            }
            target -= n;
            class += 1;
        }
        hi
    }

    /// The class holding block number `target` of all the lists, counted from class 0
    /// (`target` is below their total): whole groups, then the classes of one.
    #[inline]
    pub(super) fn class_of_nth(&self, mut target: u64) -> usize {
        let mut group = 0;
        while group < CLASSES / GROUP - 1 {
            let n = tally_blocks(self.group_tally[group]);
            if target < n {
                break;
            }
            target -= n;
            group += 1;
        }
        let mut class = group * GROUP;
        while class < group * GROUP + GROUP - 1 {
            let n = tally_blocks(self.class_tally[class & (CLASSES - 1)]);
            if target < n {
                break;
            }
            target -= n;
            class += 1;
        }
        class
    }

    /// The smallest non-empty class above `class`, if any, from the tallies: the classes
    /// to the end of its group, then the first non-empty group's. It runs only when an
    /// allocation finds too few candidates, so the lists keep no bitmap of non-empty
    /// classes for it (every push and unlink would pay to keep one).
    pub(super) fn next_nonempty_above(&self, class: usize) -> Option<usize> {
        let mut c = class + 1;
        while c < CLASSES && !c.is_multiple_of(GROUP) {
            if tally_blocks(self.class_tally[c]) != 0 {
                return Some(c);
            }
            c += 1;
        }
        let group =
            (c / GROUP..CLASSES / GROUP).find(|&g| tally_blocks(self.group_tally[g]) != 0)?;
        (group * GROUP..(group + 1) * GROUP).find(|&c| tally_blocks(self.class_tally[c]) != 0)
    }

    /// The sentinel of class `class`'s list, as a block address: its `NEXT` and `PREV`
    /// words are the list's oldest and newest blocks (itself when the list is empty).
    #[inline(always)]
    pub(super) fn sentinel(&self, class: usize) -> usize {
        self.lists + GRANULE * (class & (CLASSES - 1))
    }

    /// The oldest block of class `class` (its sentinel if there is none).
    #[inline(always)]
    pub(super) fn oldest(&self, class: usize) -> usize {
        // SAFETY: the sentinel's words lie in the control block, in the first chunk.
        unsafe { rd(self.sentinel(class) + NEXT) }
    }

    /// Appends the free block `h` of `size` bytes to its class (oldest first out, so a
    /// freed block waits behind every other of its class).
    ///
    /// # Safety
    ///
    /// `h` is a free block of this arena, on no list.
    #[inline(always)]
    pub(super) unsafe fn push(&mut self, h: usize, size: usize) {
        let class = class_of(size);
        let s = self.sentinel(class);
        // SAFETY: `h` is a free block of this arena, with room for links; the list's newest
        // block is one too, or the sentinel, whose link words are the sentinel's own.
        // Branch-free: whether a list is empty is a coin toss.
        unsafe {
            let tail = rd(s + PREV);
            wr(h + NEXT, s);
            wr(h + PREV, tail);
            wr(tail + NEXT, h);
            wr(s + PREV, h);
        }
        self.count(class, size as u64, true);
    }

    /// Takes the free block `h` of `size` bytes off its list, after checking its links.
    ///
    /// # Safety
    ///
    /// `h` is a free block of this arena.
    #[inline(always)]
    pub(super) unsafe fn unlink(&mut self, h: usize, size: usize) {
        // SAFETY: forwarded.
        unsafe { self.unlink_from(h, size, class_of(size)) }
    }

    /// [`unlink`](Self::unlink) for a caller that knows the block's class.
    ///
    /// # Safety
    ///
    /// `h` is a free block of this arena, of class `class`.
    #[inline(always)]
    pub(super) unsafe fn unlink_from(&mut self, h: usize, size: usize, class: usize) {
        // SAFETY: `h` is a free block; its links point at free blocks of the same list or
        // at its sentinel (checked before they are followed for writing). The lists are
        // rings through their sentinels, so there is no end to test for.
        unsafe {
            let (next, prev) = (rd(h + NEXT), rd(h + PREV));
            if (rd(next + PREV) != h) | (rd(prev + NEXT) != h) {
                os::fatal(
                    "corrupted free list (heap overflow or write after free?)",
                    h + HEADER,
                );
            }
            wr(prev + NEXT, next);
            wr(next + PREV, prev);
        }
        self.count(class, size as u64, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generators of a heap's arenas are streams of one seed: each arena its own, none
    /// the stream the header key was drawn from (a placement would otherwise give the key
    /// away).
    #[cfg(not(loom))]
    #[test]
    fn every_arena_draws_from_a_stream_of_its_own_apart_from_the_keys() {
        let heap = crate::Randomized::with_seed(77).unwrap();
        let root = heap.existing_root().unwrap();
        let mut firsts: Vec<u64> = (0..crate::root::ARENAS)
            .map(|i| {
                let mut arena = root.lock_arena(i);
                let first = arena.rng().next_u64();
                assert_ne!(first, arena.key, "arena {i} draws the key");
                first
            })
            .collect();
        firsts.sort_unstable();
        firsts.dedup();
        assert_eq!(
            firsts.len(),
            crate::root::ARENAS,
            "two arenas share a stream"
        );
    }

    /// An arena for tests of its tallies alone: nothing else of it is set up.
    fn tallies_only() -> Box<Arena> {
        // SAFETY: zeroed memory is a valid `Arena` (see `Arena::init`); the tests that
        // use this touch only its tallies.
        Box::new(unsafe { core::mem::zeroed() })
    }

    fn clear_tallies(arena: &mut Arena) {
        arena.class_tally = [0; CLASSES];
        arena.group_tally = [0; CLASSES / GROUP];
        arena.small_tally = 0;
    }

    #[test]
    fn class_of_nth_finds_the_class_of_every_block() {
        let mut arena = tallies_only();
        let mut rng = Rng::from_seed_stream([5; 32], 0);
        for round in 0..200u64 {
            clear_tallies(&mut arena);
            // Sparse or dense, some classes empty, some whole groups empty.
            for class in 0..CLASSES {
                if rng.below(4 + round % 5) == 0 && (class / GROUP) as u64 % 3 != round % 3 {
                    let t = (1 + rng.below(3)) * tally_of(class_floor(class) as u64);
                    arena.class_tally[class] += t;
                    arena.group_tally[class / GROUP] += t;
                }
            }
            let mut target = 0u64;
            for class in 0..CLASSES {
                for _ in 0..tally_blocks(arena.class_tally[class]) {
                    assert_eq!(
                        arena.class_of_nth(target),
                        class,
                        "round {round}, block {target}"
                    );
                    assert_eq!(
                        arena.class_of_block(0, CLASSES - 1, target),
                        class,
                        "round {round}, block {target}"
                    );
                    target += 1;
                }
            }
            // From a class `lo` to a class `hi`, counting from `lo`.
            let lo = rng.below(CLASSES as u64) as usize;
            let hi = lo + rng.below((CLASSES - lo) as u64) as usize;
            let mut target = 0u64;
            for class in lo..=hi {
                for _ in 0..tally_blocks(arena.class_tally[class]) {
                    assert_eq!(arena.class_of_block(lo, hi, target), class, "{lo}..={hi}");
                    target += 1;
                }
            }
        }
    }

    #[test]
    fn candidates_sum_the_classes_they_name() {
        let mut arena = tallies_only();
        let mut rng = Rng::from_seed_stream([9; 32], 0);
        for round in 0..100u64 {
            clear_tallies(&mut arena);
            // Every class a different count, so that a sum over the wrong classes shows.
            for class in 0..CLASSES {
                let blocks = rng.below(3 + round % 4);
                for _ in 0..blocks {
                    arena.count(class, class_floor(class) as u64, true);
                }
            }
            let naive = |lo: usize, hi: usize| -> u64 { arena.class_tally[lo..=hi].iter().sum() };
            assert_eq!(
                arena.small_tally,
                naive(0, SMALL_LAST),
                "round {round}: small tally"
            );
            for lo in 0..=SMALL_LAST {
                let below = if lo == 0 { 0 } else { naive(0, lo - 1) };
                assert_eq!(
                    arena.candidates_below(lo),
                    below,
                    "round {round}, below {lo}"
                );
            }
            for _ in 0..64 {
                let lo = rng.below(CLASSES as u64) as usize;
                let hi = lo + rng.below((CLASSES - lo) as u64) as usize;
                let sum = naive(lo, hi);
                assert_eq!(
                    arena.candidates(lo, hi),
                    (tally_blocks(sum), tally_bytes(sum)),
                    "round {round}, {lo}..={hi}"
                );
            }
            assert_eq!(arena.pool(), tally_bytes(naive(0, CLASSES - 1)));
        }
    }

    #[test]
    fn next_nonempty_above_finds_the_smallest_class_above() {
        let mut arena = tallies_only();
        let mut rng = Rng::from_seed_stream([11; 32], 0);
        for round in 0..200u64 {
            clear_tallies(&mut arena);
            // From every class non-empty to a few classes, far apart.
            for class in 0..CLASSES {
                if rng.below(1 + round % 40) == 0 {
                    arena.count(class, class_floor(class) as u64, true);
                }
            }
            for class in 0..CLASSES {
                let expected =
                    (class + 1..CLASSES).find(|&c| tally_blocks(arena.class_tally[c]) != 0);
                assert_eq!(
                    arena.next_nonempty_above(class),
                    expected,
                    "round {round}, above {class}"
                );
            }
        }
    }
}
