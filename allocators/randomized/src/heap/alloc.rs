//! Allocation: the choice of a free block, the random offset inside it, the slack
//! returned to the lists, the wilderness.

use super::class::*;
use super::header::*;
use super::*;
use crate::os;

impl Arena {
    /// Allocates a block whose payload holds `payload` bytes aligned to `align`; returns the
    /// payload address. `None` if no memory can be had.
    ///
    /// `payload` rounded up, plus the header and `align` (if over 16), must be at most
    /// [`LARGE_MAX`]; larger requests are the root's.
    // Inlined into its one caller (`Randomized::allocate`): a call here cost a second
    // prologue and epilogue (about 18 instructions) on every allocation.
    #[inline(always)]
    pub(crate) fn alloc(
        &mut self,
        payload: usize,
        align: usize,
        kind: usize,
        chunks: &dyn ChunkSource,
    ) -> Option<usize> {
        // `HEADER_COUNTED` is `HEADER` (see `bug.rs`).
        let need = (payload.next_multiple_of(GRANULE) + crate::bug::HEADER_COUNTED).max(MIN_BLOCK);
        // Worst case for a larger alignment: the first aligned offset is 16, too small for the
        // slack to stand alone, so the object starts `align + 16` in.
        let want = if align > GRANULE {
            need + align + GRANULE
        } else {
            need
        };
        let (first, partial) = fitting_classes(want);
        // Small objects draw among blocks up to 32 times their size (at least 8 KiB), for
        // entropy; larger ones among blocks at most twice their size plus a window, so
        // that they do not split free regions much larger than themselves.
        let cap = if want <= RANGE_MIN / RANGE {
            RANGE_MIN
        } else if want <= 1056 {
            want * RANGE
        } else {
            2 * want + WINDOW
        };
        let last = class_of(cap.min(CHUNK)).max(first);
        // `below`: for the small classes, the blocks of the classes below `first`.
        let (blocks, bytes, below) = if last == SMALL_LAST {
            let below = self.candidates_below(first);
            let fitting = self.small_tally - below;
            (
                tally_blocks(fitting),
                tally_bytes(fitting),
                Some(tally_blocks(below)),
            )
        } else {
            let (blocks, bytes) = self.candidates(first, last);
            (blocks, bytes, None)
        };
        // Enough candidates: many blocks, or (fewer, but large ones) many bytes.
        let reserve = (want as u64 * RESERVE_REQUESTS).clamp(RESERVE_MIN, RESERVE_MAX);
        let enough = blocks >= RESERVE_BLOCKS || (blocks > 0 && bytes >= reserve);
        // SAFETY: (whole block) every address below is a block of this arena reached from
        // its lists, its wilderness or its own headers, under the lock.
        unsafe {
            let (h, size, prev, max_offset, wild) = if enough {
                self.draw(first, last, blocks, below, align)
            } else {
                self.refill(first, last, partial, blocks, below, want, align, chunks)?
            };
            let obj = self.place(h, size, prev, need, payload, align, max_offset, wild);
            if kind != 0 {
                set_kind(obj - HEADER, kind);
            }
            Some(obj)
        }
    }

    /// Where an allocation goes when there are too few candidates: `(block, size, previous
    /// size, largest offset, whether it is the wilderness)`, the block off every list.
    /// Carves fresh slack from the front of the smallest larger block, or of the
    /// wilderness; failing both, draws among the few candidates there are, then takes a
    /// block of the partly fitting class, then a new chunk's wilderness.
    ///
    /// # Safety
    ///
    /// As [`alloc`](Self::alloc)'s body: the lock is held.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    pub(super) unsafe fn refill(
        &mut self,
        first: usize,
        last: usize,
        partial: Option<usize>,
        blocks: u64,
        below: Option<u64>,
        want: usize,
        align: usize,
        chunks: &dyn ChunkSource,
    ) -> Option<(usize, usize, usize, usize, bool)> {
        // SAFETY: (whole block) as in `alloc`.
        unsafe {
            let window = WINDOW.max(align + GRANULE);
            if let Some(class) = self.next_nonempty_above(last) {
                let h = self.oldest(class);
                let (w0, prev) = self.get_or_die(h);
                let size = w0 & !FLAGS;
                self.unlink_from(h, size, class);
                return Some((h, size, prev, window, false));
            }
            if self.wild != 0 && self.wild_end - self.wild >= want + MIN_BLOCK {
                return Some(self.wilderness_block(window));
            }
            if blocks > 0 {
                return Some(self.draw(first, last, blocks, below, align));
            }
            if let Some(class) = partial {
                let end = self.sentinel(class);
                let mut h = self.oldest(class);
                while h != end {
                    let (w0, prev) = self.get_or_die(h);
                    let size = w0 & !FLAGS;
                    if size >= want {
                        self.unlink(h, size);
                        return Some((h, size, prev, size, false));
                    }
                    h = rd(h + NEXT);
                }
            }
            let base = chunks.new_chunk(self.index)?;
            self.retire_wilderness();
            self.add_mapped(CHUNK as u64);
            self.open_wilderness(base + CHUNK_HEADER, base + CHUNK - HEADER);
            Some(self.wilderness_block(window))
        }
    }

    /// Draws a block among classes `first..=last`: a class with probability proportional to
    /// its number of free blocks (the class a uniformly drawn fitting block would have),
    /// then that class's oldest block, which it takes off its list: `(block, size,
    /// previous size, largest offset, false)`, as [`place`](Self::place) takes them.
    ///
    /// `below`, if known, is the number of blocks in the classes below `first`: the class
    /// is then found by counting from class 0, a group at a time.
    ///
    /// # Safety
    ///
    /// Those classes hold `blocks > 0` blocks (and those below them `below`).
    #[inline(always)]
    pub(super) unsafe fn draw(
        &mut self,
        first: usize,
        last: usize,
        blocks: u64,
        below: Option<u64>,
        align: usize,
    ) -> (usize, usize, usize, usize, bool) {
        let target = self.rng().below(blocks);
        let class = match below {
            Some(below) => self.class_of_nth(below + target),
            None => self.class_of_block(first, last, target),
        };
        let h = self.oldest(class);
        // SAFETY: forwarded; `h` heads a non-empty list.
        unsafe {
            let (w0, prev) = self.get_or_die(h);
            let size = w0 & !FLAGS;
            self.unlink_from(h, size, class);
            // In a large block the object goes within its first WINDOW bytes (or past the
            // first aligned place, for an alignment above it): a random offset anywhere in
            // it would cut it into two slacks too small for the next request of its size
            // (the large requests that draw such blocks), and the heap would grow to make
            // up for them.
            let max_offset = if size > SPREAD_MAX {
                WINDOW.max(align + GRANULE)
            } else {
                size
            };
            (h, size, prev, max_offset, false)
        }
    }

    /// The wilderness as [`place`](Self::place) takes a block, objects going within
    /// `window` bytes of its front.
    ///
    /// # Safety
    ///
    /// The wilderness exists.
    pub(super) unsafe fn wilderness_block(
        &self,
        window: usize,
    ) -> (usize, usize, usize, usize, bool) {
        let h = self.wild;
        // SAFETY: the wilderness header is the arena's.
        let (_, prev) = unsafe { self.get_or_die(h) };
        (h, self.wild_end - h, prev, window, true)
    }

    /// Cuts an object of block size `need` (payload aligned to `align`, `requested` bytes of
    /// it asked for) out of the free block `h` of `size` bytes (previous size `prev`), off
    /// every list, at a uniformly random offset at most `max_offset`; the slack on both
    /// sides becomes free blocks (or the wilderness again, if `h` was the wilderness).
    /// Returns the payload address.
    ///
    /// # Safety
    ///
    /// `h` is a free block (or the wilderness, then `wild`) of this arena, on no list, large
    /// enough for `need` at the alignment.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) unsafe fn place(
        &mut self,
        h: usize,
        size: usize,
        prev: usize,
        need: usize,
        requested: usize,
        align: usize,
        max_offset: usize,
        wild: bool,
    ) -> usize {
        // The wilderness keeps room for its own header after the object.
        let room = if wild { size - MIN_BLOCK } else { size };
        debug_assert!(room >= need, "block {size} too small for {need}");
        let offset = if align <= GRANULE {
            // What `offsets` and `nth_offset` give at the payload alignment, where every
            // block's payload is aligned: offset 0, then MIN_BLOCK, MIN_BLOCK + 16, ...
            let last = max_offset.min(room - need);
            let count = if last >= MIN_BLOCK {
                (last - MIN_BLOCK) / GRANULE + 2
            } else {
                1
            };
            match self.rng().below(count as u64) as usize {
                0 => 0,
                k => MIN_BLOCK + (k - 1) * GRANULE,
            }
        } else {
            let (count, from, step) = offsets(h, room, need, align, max_offset);
            if count == 0 {
                // A broken invariant of the callers, never an input: refuse to write
                // outside the block.
                os::fatal(
                    "internal error: no aligned place in the drawn block",
                    h + HEADER,
                );
            }
            let zero = (h + HEADER).is_multiple_of(align);
            let k = self.rng().below(count as u64) as usize;
            nth_offset(zero, from, step, k)
        };
        let tail = size - offset - need;
        let obj_size = if tail < MIN_BLOCK { need + tail } else { need };
        // Slack cut from a block whose pages were given back keeps saying so: a later free
        // beside it then gives back only the pages around the freed block, not the whole
        // region again (see `release`).
        let released = if wild {
            0
        } else {
            // SAFETY: `h` is the header of the free block being cut, off every list.
            unsafe { rd(h) & RELEASED }
        };
        let obj = h + offset;
        let after = obj + obj_size;
        let end = h + size;
        if self.zero_fill {
            debug_assert!(offset == 0 || offset >= MIN_BLOCK);
            // The object, its header included, and the header and links of the slack
            // after it: every new block boundary would otherwise overwrite whatever a
            // dangling write left there unseen.
            let checked_end = if after < end {
                after + MIN_BLOCK
            } else {
                after
            };
            // SAFETY: the object and the slack's first MIN_BLOCK bytes lie in the free
            // block being cut, off every list; the block's own header and links are its
            // first MIN_BLOCK bytes.
            unsafe {
                if offset == 0 {
                    self.scrub(obj + HEADER, h + MIN_BLOCK);
                    self.take_block(h + MIN_BLOCK, checked_end, wild);
                } else {
                    self.take_block(obj, checked_end, wild);
                }
            }
        }
        // SAFETY: all addresses are boundaries inside the block being cut, or `end`, the
        // block after it.
        unsafe {
            let obj_prev = if offset > 0 {
                self.put(h, offset | released, prev);
                self.push(h, offset);
                offset
            } else {
                prev
            };
            self.put(obj, obj_size | BUSY, obj_prev);
            if self.canaries {
                arm_canary(self.key, obj, obj_size, requested);
            }
            if after < end {
                let rest = end - after;
                if wild {
                    // `end` is the chunk's sentinel, written only when the wilderness
                    // retires (see `open_wilderness`).
                    self.put(after, rest | WILD, obj_size);
                    self.wild = after;
                } else {
                    self.put(after, rest | released, obj_size);
                    self.push(after, rest);
                    self.set_prev(end, rest);
                }
            } else {
                debug_assert!(!wild);
                self.set_prev(end, obj_size);
            }
        }
        self.live_bytes += obj_size as u64;
        self.allocations += 1;
        obj + HEADER
    }

    /// The old wilderness (if any) goes to the free lists.
    ///
    /// # Safety
    ///
    /// The lock is held.
    pub(super) unsafe fn retire_wilderness(&mut self) {
        if self.wild == 0 {
            return;
        }
        let (h, size) = (self.wild, self.wild_end - self.wild);
        // SAFETY: the wilderness is a block of this arena, and its end the chunk's
        // sentinel.
        unsafe {
            let (_, prev) = self.get_or_die(h);
            self.put(h, size, prev);
            self.push(h, size);
            self.put(self.wild_end, BUSY | INTERNAL, size);
        }
        self.wild = 0;
        self.wild_end = 0;
    }

    /// Makes `[start, sentinel)` the wilderness, whose chunk ends with a sentinel at
    /// `sentinel`.
    ///
    /// The sentinel header is written when the wilderness retires
    /// ([`retire_wilderness`](Self::retire_wilderness)), not now: until then the only block
    /// that reaches it is the wilderness, whose end is `wild_end`, and nothing reads past
    /// it. So a chunk's last page is touched only once the chunk is full, not by every
    /// arena a thread sets up (one page in three of a small program's heap).
    ///
    /// # Safety
    ///
    /// The range is fresh memory of a chunk of this arena.
    pub(super) unsafe fn open_wilderness(&mut self, start: usize, sentinel: usize) {
        // SAFETY: forwarded.
        unsafe { self.put(start, (sentinel - start) | WILD, 0) };
        self.wild = start;
        self.wild_end = sentinel;
    }

    pub(super) fn add_mapped(&mut self, bytes: u64) {
        self.mapped_bytes += bytes;
        self.peak_mapped_bytes = self.peak_mapped_bytes.max(self.mapped_bytes);
    }
}
