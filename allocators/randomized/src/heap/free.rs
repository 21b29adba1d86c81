//! Free: merging with both neighbours, giving pages back to the OS, and the drain of the
//! remote-free stack.

use super::header::*;
use super::*;
use crate::os;

impl Arena {
    /// Frees a block that [`validate_in_chunk`] accepted under this lock hold.
    ///
    /// # Safety
    ///
    /// As said; the block is in a chunk of this arena.
    #[inline(always)]
    pub(crate) unsafe fn free(&mut self, live: Live) {
        // SAFETY: forwarded.
        unsafe { self.free_block(live, false) };
    }

    /// [`free`](Self::free), told whether the payload reads zero already (zeroed by the
    /// thread that queued a remote free, see [`prescrubbed`]).
    ///
    /// # Safety
    ///
    /// As `free`.
    #[inline(always)]
    unsafe fn free_block(&mut self, live: Live, scrubbed: bool) {
        self.live_bytes -= live.size as u64;
        self.deallocations += 1;
        // SAFETY: `live` is a block of this arena.
        unsafe { self.release(live.header, live.size, live.prev, scrubbed) };
    }

    /// Returns the block at `h` (`size` bytes, previous size `prev`, no longer counted as
    /// live) to the free memory, merged with free neighbours. `scrubbed`: its payload reads
    /// zero already (with zero-fill, it is zeroed here otherwise).
    ///
    /// # Safety
    ///
    /// `h` is a block of this arena that nobody uses any more.
    #[inline(always)]
    pub(super) unsafe fn release(&mut self, h: usize, size: usize, prev: usize, scrubbed: bool) {
        let (mut start, mut total, mut start_prev) = (h, size, prev);
        // Whether the free neighbour merged on each side (if any) had its pages given back
        // already; the wilderness past its front was never touched, or was given back.
        let (mut left_released, mut right_released) = (true, true);
        // SAFETY: (whole block) neighbours are found through checked headers of this arena.
        unsafe {
            if prev != 0 {
                // The previous size is not covered by the tag: it must at least keep the
                // left neighbour in this chunk (the neighbour's own tag and size checks
                // do the rest).
                if prev > h & (CHUNK - 1) {
                    os::fatal("corrupted block header (heap overflow?)", h + HEADER);
                }
                let left = h - prev;
                let (lw0, lprev) = self.get_or_die(left);
                if lw0 & (BUSY | WILD) == 0 {
                    if lw0 & !FLAGS != prev {
                        os::fatal("corrupted block header (sizes disagree)", h + HEADER);
                    }
                    left_released = lw0 & RELEASED != 0;
                    self.unlink(left, prev);
                    self.poison(h);
                    (start, total, start_prev) = (left, total + prev, lprev);
                }
            }
            let right = h + size;
            let (rw0, _) = self.get_or_die(right);
            let rsize = rw0 & !FLAGS;
            let wild = rw0 & WILD != 0;
            // The right neighbour's header, if it merges, is left as it is: a free (or
            // wilderness) header with a valid tag, which a free through it reports as a
            // double (or invalid) free, and which nothing else reads (walks go by sizes
            // from block boundaries). Only a busy header must never outlive its block
            // (see `poison`).
            if wild {
                // The wilderness past its front was never touched (or was given back).
                total += rsize;
            } else if rw0 & BUSY == 0 {
                right_released = rw0 & RELEASED != 0;
                self.unlink(right, rsize);
                total += rsize;
            }
            if self.zero_fill && (wild || rw0 & BUSY == 0) {
                // Inside free memory only poisoned headers may be left (see `fill.rs`):
                // the merged neighbour's header is poisoned and its links cleared.
                self.poison(right);
                self.scrub(right + HEADER, right + MIN_BLOCK);
            }
            // Large free regions give their whole pages back, once the arena holds more
            // free memory than live (and at least TRIM_MIN), or when a block of at least
            // RELEASE_BLOCK leaves one: all of them the first time, then only around each
            // block freed into it (when that is worth a system call), and of a neighbour
            // merged on one side only the part not given back yet. A heap that frees and
            // reallocates the same small blocks over and over keeps their memory.
            let mut released = false;
            // The pages given back, which read zero afterwards without a memset.
            let mut given_back = 0..0;
            // One comparison on the common path: both rules need `2 * RELEASE_BLOCK`.
            if total >= 2 * RELEASE_BLOCK
                && (size >= RELEASE_BLOCK
                    || (total >= RELEASE_MIN
                        && self.pool() + if wild { 0 } else { total as u64 }
                            > TRIM_MIN.max(self.live_bytes)))
            {
                let page = os::page_size();
                let lo = if left_released {
                    (start + MIN_BLOCK).max(h.saturating_sub(page))
                } else {
                    start + MIN_BLOCK
                };
                let hi = if right_released {
                    (start + total).min(h + size + page)
                } else {
                    start + total
                };
                if hi >= lo + RELEASE_SPAN || !(left_released && right_released) {
                    given_back = os::release_pages(lo, hi);
                    self.released_bytes += given_back.len() as u64;
                }
                released = true;
            }
            if self.zero_fill && !scrubbed {
                // The freed payload reads zero from now on: the pages given back already
                // do; a large payload's whole pages are given back now; the rest is
                // zeroed.
                let (payload, end) = (h + HEADER, h + size);
                if given_back.is_empty() && end - payload >= fill::SCRUB_RELEASE {
                    given_back = os::release_pages(payload, end);
                    self.released_bytes += given_back.len() as u64;
                }
                if !given_back.is_empty() && given_back.start < end && given_back.end > payload {
                    self.scrub(payload, given_back.start.max(payload));
                    self.scrub(given_back.end.min(end), end);
                } else {
                    self.scrub(payload, end);
                }
            }
            if wild {
                // Its end is the chunk's sentinel, not written yet (see
                // `open_wilderness`).
                self.put(start, total | WILD, start_prev);
                self.wild = start;
            } else {
                self.put(
                    start,
                    total | if released { RELEASED } else { 0 },
                    start_prev,
                );
                self.push(start, total);
                if crate::bug::FREE_BLOCK_PUSHED_TWICE {
                    self.push(start, total);
                }
                self.set_prev(start + total, total);
            }
        }
    }

    /// Frees the blocks of a list taken from the arena's remote-free stack (linked through
    /// their first payload word, 0-terminated), each queued by [`claim_remote`].
    ///
    /// # Safety
    ///
    /// The list came from this arena's stack; its blocks are this arena's.
    pub(crate) unsafe fn drain(&mut self, mut payload: usize) {
        while payload != 0 {
            // SAFETY: a queued block of this arena; its header was checked when it was
            // queued, and only this lock's holder touches it now.
            unsafe {
                let next = rd(payload);
                let h = payload - HEADER;
                let (w0, prev) = self.get_or_die(h);
                if w0 & (BUSY | HUGE) != BUSY | HUGE {
                    os::fatal("corrupted remote-free queue", payload);
                }
                wr(h, w0 & !HUGE);
                let size = w0 & !FLAGS;
                let scrubbed = self.zero_fill && prescrubbed(size);
                if scrubbed {
                    // The queue's link: the one word the freeing thread left.
                    wr(payload, 0);
                }
                self.free_block(
                    Live {
                        header: h,
                        size,
                        prev,
                        huge: false,
                        canary: 0,
                    },
                    scrubbed,
                );
                payload = next;
            }
        }
    }
}

/// Whether a block of `size` bytes queued for a remote free has its payload zeroed, but for
/// its first word (the queue's link), by the thread that queued it, when zero-fill is on:
/// that thread was using the block, so its lines are likely in its cache, where the owner
/// that drains the queue would pull each one across. Payloads of
/// [`SCRUB_RELEASE`](fill::SCRUB_RELEASE) bytes or more are left to the owner, which gives
/// their pages back instead.
#[inline(always)]
pub(crate) fn prescrubbed(size: usize) -> bool {
    size - HEADER < fill::SCRUB_RELEASE
}

/// Zeroes the payload of a block of `size` bytes queued for a remote free, but for its
/// first word (see [`prescrubbed`]).
///
/// # Safety
///
/// `payload` is a block of this heap that the caller just queued (claimed) and has not
/// published yet.
#[inline(always)]
pub(crate) unsafe fn scrub_queued(payload: usize, size: usize) {
    if prescrubbed(size) {
        let from = payload + 8;
        let to = payload - HEADER + size;
        // SAFETY: forwarded; the payload is the caller's until it is published.
        unsafe { (from as *mut u8).write_bytes(0, to - from) };
    }
}
