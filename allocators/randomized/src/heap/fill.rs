//! Zero-filled free memory: freed blocks are zeroed, and every block is checked to read
//! zero before it is handed out again ([`Checks::ZERO_FILL`](crate::Checks::ZERO_FILL)).
//!
//! The invariant, while the class is on: every byte of a free block (on a list, or the
//! wilderness) reads zero, except
//!
//! * its first 32 bytes: its header and its list links;
//! * headers that stopped being block boundaries when their block merged into a free
//!   neighbour: each is *poisoned* (a free header of size 0 with a valid keyed tag, see
//!   [`Arena::poison`]) so that a second free through the old pointer reads as the double
//!   free it is. A poisoned header is the one non-zero pattern allowed inside free memory;
//!   a write through a dangling pointer would have to forge a keyed tag to pass as one.
//!
//! Fresh memory from the OS and pages given back with `madvise` read zero, so the invariant
//! holds from the start. A freed payload of [`SCRUB_RELEASE`] bytes or more has its whole
//! pages given back rather than written (no page the program never touched is faulted in
//! to be zeroed), the rest is zeroed.
//!
//! A write after free breaks the invariant, and the next allocation that carves a block
//! over the word written finds it and aborts, naming its address. An allocation checks its
//! whole block when it is at most [`CHECK_FULL`] bytes, and the first and last
//! [`CHECK_EDGE`] bytes of a larger one (each line read is a cache miss where random
//! placement left it cold, on lines a program may never touch); both ends hold every
//! header the allocation writes into free memory (its own and the slack's after it), so no
//! header ever overwrites a dangling write unseen. A block checked in full reads zero;
//! `calloc` zeroes a larger one. Most of the class's cost is the zeroing at free, not the
//! check: checking 128 bytes in full and 64 at each end instead changed the class's cost
//! on larson, glibc-simple, glibc-thread and mstress by less than the runs' spread.

use super::header::*;
use super::*;
use crate::os;

/// Blocks up to this many bytes (header and the slack's header after it included) are
/// checked in full when handed out.
pub(super) const CHECK_FULL: usize = 320;
/// The largest payload whose block is always checked in full (its header and the slack's
/// header after it count against [`CHECK_FULL`]): such a block reads zero when handed out.
pub(crate) const ZEROED_PAYLOAD_MAX: usize = CHECK_FULL - HEADER - MIN_BLOCK;
/// Of a larger block, this many bytes at each end are checked.
pub(super) const CHECK_EDGE: usize = 128;
/// A freed payload at least this large has its whole pages given back to the OS (which
/// reads zero afterwards) instead of being zeroed with stores.
pub(super) const SCRUB_RELEASE: usize = 64 << 10;

/// The message a write after free aborts with.
pub(super) const WRITE_AFTER_FREE: &str = "write after free detected (freed memory was modified)";

/// Makes the pages of `[from, to)` (at most two: the range is shorter than a page) present
/// and writable before the check reads them, with an atomic add of 0 to the range's first
/// word in each, which changes nothing (`lock xadd` on x86-64: one instruction that writes,
/// where an `or` whose result is used becomes a load and a compare-and-swap loop, and the
/// load faults the page in for reading). A check that read a page the OS had not mapped yet
/// (fresh memory, or pages given back with `madvise`) would map the shared zero page, and
/// the header written right after would then replace it: a copy-on-write fault that
/// flushes the page's translation on every other CPU running the process (an
/// inter-processor interrupt each, and on a VM an exit to the hypervisor). On mstress at 2
/// threads that flush was about a fifth of randomized's samples (`perf record -e
/// cpu-clock`; 17,290 page faults a run against glibc's 1,965). A write fault on a page
/// that is not present maps a fresh zeroed page, with no flush.
///
/// # Safety
///
/// `from` and `to` are 16-byte aligned, `from < to`, `to - from` at most a page, and the
/// range lies in free memory of this heap that the caller owns (its arena's lock).
#[inline(always)]
pub(super) unsafe fn touch_for_write(from: usize, to: usize) {
    // The operand goes through `black_box`: the compiler turns an add of a known 0, which
    // changes nothing, into a plain load, and a load maps the zero page.
    let zero = core::hint::black_box(0);
    // SAFETY: forwarded from the caller: an aligned word of memory the caller owns, to which
    // adding 0 writes back what it held.
    unsafe {
        word(from).fetch_add(zero, core::sync::atomic::Ordering::Relaxed);
        let last = to - 8;
        if last / PAGE_MIN != from / PAGE_MIN {
            word(last & !(PAGE_MIN - 1)).fetch_add(zero, core::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The smallest page size of the machines this runs on: a range within one such page is
/// within one page of any larger size.
pub(super) const PAGE_MIN: usize = 4096;

impl Arena {
    /// Zeroes `[from, to)`: freed bytes (the payload of a block being freed).
    ///
    /// # Safety
    ///
    /// The range lies in a block of this arena that nobody uses any more.
    #[inline(always)]
    pub(super) unsafe fn scrub(&self, from: usize, to: usize) {
        if to > from {
            // SAFETY: forwarded from the caller; the lock orders these stores before any
            // reuse of the memory.
            unsafe { (from as *mut u8).write_bytes(0, to - from) };
        }
    }

    /// Checks the block `[from, to)` being handed out (see the module documentation): in
    /// full up to [`CHECK_FULL`] bytes, else its first and last [`CHECK_EDGE`]; returns
    /// whether it was checked in full (and so reads zero). The pages it reads are made
    /// present for writing first ([`touch_for_write`]): always for a larger block, whose
    /// ends lie on pages of their own more often than not (on mstress, glibc-thread and
    /// rptest at 2 threads, 26%, 16% and 12% of randomized's time, medians of 9 interleaved
    /// rounds), and for a smaller one where `fresh` says its memory may never have been
    /// touched (the wilderness), since an atomic add on every small allocation cost
    /// glibc-simple about 3% for pages that are present.
    ///
    /// # Safety
    ///
    /// As [`take_clean`](Self::take_clean).
    #[inline(always)]
    pub(super) unsafe fn take_block(&self, from: usize, to: usize, fresh: bool) -> bool {
        // SAFETY: forwarded; both ends lie in the range.
        unsafe {
            if to - from <= CHECK_FULL {
                if fresh {
                    touch_for_write(from, to);
                }
                self.take_clean(from, to);
                true
            } else {
                touch_for_write(from, from + CHECK_EDGE);
                touch_for_write(to - CHECK_EDGE, to);
                self.take_clean(from, from + CHECK_EDGE);
                self.take_clean(to - CHECK_EDGE, to);
                false
            }
        }
    }

    /// Checks that `[from, to)` of free memory reads zero, except for poisoned headers,
    /// which it clears; aborts on anything else: a write after free. Afterwards the range
    /// reads zero.
    ///
    /// # Safety
    ///
    /// `from` and `to` are 16-byte aligned, and the range lies in free memory of this
    /// arena (under its lock) that is being handed out.
    #[inline(always)]
    pub(super) unsafe fn take_clean(&self, from: usize, to: usize) {
        debug_assert!(from.is_multiple_of(GRANULE) && to.is_multiple_of(GRANULE));
        let mut at = from;
        // A group of four granules at a time, the common case (nothing but zeros) with
        // one branch per 64 bytes.
        while at + 64 <= to {
            // SAFETY: forwarded from the caller: 64 readable bytes at a 16-byte-aligned
            // address.
            let group = unsafe { (at as *const [u64; 8]).read() };
            if group.iter().fold(0, |acc, w| acc | w) != 0 {
                // SAFETY: forwarded.
                unsafe { self.clear_granules(at, at + 64) };
            }
            at += 64;
        }
        // SAFETY: forwarded.
        unsafe { self.clear_granules(at, to) };
    }

    /// The granule-by-granule check of [`take_clean`](Self::take_clean).
    ///
    /// # Safety
    ///
    /// As `take_clean`.
    #[inline(always)]
    unsafe fn clear_granules(&self, from: usize, to: usize) {
        let mut at = from;
        while at < to {
            // SAFETY: forwarded from the caller.
            let (w0, w1) = unsafe { (rd(at), rd(at + 8)) };
            if w0 | w1 != 0 {
                if let Some(word) = self.dirty_word(at, w0, w1) {
                    os::fatal(WRITE_AFTER_FREE, word);
                }
                // SAFETY: as above: a poisoned header inside the memory being handed out.
                unsafe { wr(at + 8, 0) };
            }
            at += GRANULE;
        }
    }

    /// Whether `[from, to)` of free memory keeps the invariant (for the heap walk): the
    /// address of the first word that breaks it, if any.
    ///
    /// # Safety
    ///
    /// As [`take_clean`](Self::take_clean), except that nothing is handed out or changed.
    pub(super) unsafe fn first_dirty(&self, from: usize, to: usize) -> Option<usize> {
        (from..to).step_by(GRANULE).find_map(|at| {
            // SAFETY: forwarded from the caller.
            let (w0, w1) = unsafe { (rd(at), rd(at + 8)) };
            self.dirty_word(at, w0, w1)
        })
    }

    /// Of the granule at `at` in free memory, whose words are `w0` and `w1`: the address of
    /// the word that breaks the invariant, or `None` if it reads zero or is a poisoned
    /// header.
    #[inline(always)]
    fn dirty_word(&self, at: usize, w0: usize, w1: usize) -> Option<usize> {
        if w0 != 0 {
            Some(at)
        } else if w1 != 0 && w1 != tag(self.key, at, 0) as usize {
            Some(at + 8)
        } else {
            None
        }
    }
}
