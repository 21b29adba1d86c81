//! An arena: in-band block headers, free lists, random placement, coalescing. Every method
//! of [`Arena`] runs with the arena's lock held (it takes `&mut Arena`); the chunk table and
//! huge blocks are the [`Root`](crate::root::Root)'s.
//!
//! # Memory layout
//!
//! Memory comes from the OS in chunks of [`CHUNK`] bytes aligned to their size. A chunk is
//! a sequence of blocks, each starting with a 16-byte header, and ends with a zero-size
//! *sentinel* header (written when the chunk's wilderness retires, see below):
//!
//! ```text
//!  header (16 B)                                   free blocks only
//! +-----------------------------+---------------+-----------+-----------+
//! | size | flags (BUSY, WILD,   | prev size/16  | next free | prev free | ...
//! |        HUGE, INTERNAL)      | (32) | tag(32)|           |           |
//! +-----------------------------+---------------+-----------+-----------+
//! ```
//!
//! * `size` includes the header and is a multiple of 16; a block's payload starts right
//!   after its header, so payloads are 16-byte aligned.
//! * `prev size` is the size of the physically previous block (0 for the first block of a
//!   chunk): free finds its left neighbour with it, and the right one by adding `size`.
//! * `tag` is a 32-bit keyed hash of the header's address and its first word (size and
//!   flags). The key is drawn from the OS at start and kept in the control block. A header
//!   that was overwritten, a pointer into the middle of a block and a pointer to memory the
//!   heap never handed out all fail the check with probability 1 - 2^-32, and the process
//!   aborts instead of trusting them. The previous size is left out of the tag, so that
//!   cutting or merging a block rewrites its right neighbour's header with one store; the
//!   left neighbour it names is checked instead (same chunk, valid tag, exactly that size
//!   if free), and a linear overflow cannot reach it without breaking the tag first.
//! * A header that stops being a block boundary is overwritten only where it was busy
//!   (`poison`): a free header left inside a merged block still reads as free, so a free
//!   through it is caught as a double free either way.
//! * A free block is on the free list of its size class (a doubly linked ring threaded
//!   through the free blocks themselves and closed by a sentinel in the control block, see
//!   [`Lists`]); links are checked before every unlink (`next.prev == self`,
//!   `prev.next == self`).
//! * The newest chunk has a *wilderness*: a free block with the WILD flag at its untouched
//!   end, kept off the free lists and carved from the front, so memory is touched only as it
//!   is needed.
//!
//! Each chunk belongs to one arena, whose index is the chunk's first word (the first chunk
//! instead starts with the [`Root`](crate::root::Root) control block, and belongs to arena
//! 0). Blocks above [`LARGE_MAX`] get a mapping of their own (HUGE flag), unmapped on free.
//!
//! # Placement
//!
//! An allocation of block size `want` draws a free block among those that fit and are at
//! most [`RANGE`] times larger (at least [`RANGE_MIN`] bytes; for requests above 1 KiB, at
//! most twice the request plus [`WINDOW`]): a class with probability proportional to its
//! number of free blocks (per-class tallies of blocks and bytes, each one word, summed in
//! groups of eight classes, and a running tally of the classes up to [`RANGE_MIN`], where
//! most requests' candidates end), as the
//! class of a uniformly drawn block would be, then the oldest block of that class. It
//! places the object at a uniformly random 16-byte-aligned offset inside the block; the
//! slack on either side goes back to the free lists. Drawing by count rather than by bytes
//! splits large free blocks less often (less fragmentation) at no cost in entropy here.
//!
//! When there are fewer than [`RESERVE_BLOCKS`] candidates holding fewer bytes than
//! [`RESERVE_REQUESTS`] requests of this size (at least [`RESERVE_MIN`], at most
//! [`RESERVE_MAX`]), the object instead goes at a uniformly random offset within the first [`WINDOW`]
//! bytes of a larger free block (the smallest there is) or else of the wilderness, which
//! adds that slack to the candidates:
//! so the pool the choice is made from never shrinks to a few blocks, and a steady-state
//! heap stays as unpredictable as a fresh one. Limiting candidates to blocks of comparable
//! size keeps small objects from being scattered through large free blocks, which would
//! leave none for large requests (and touch pages all over the heap).

use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::os;
use crate::rng::Rng;

/// Payload alignment, and the granularity of every size.
pub(crate) const GRANULE: usize = 16;
/// Bytes of header before every payload.
pub(crate) const HEADER: usize = 16;
/// The smallest block: a header and the two links of a free block.
pub(crate) const MIN_BLOCK: usize = 32;
/// Bytes per chunk (and their alignment).
pub(crate) const CHUNK: usize = 4 << 20;
/// Bytes at the start of a chunk (other than the first) before its blocks: the arena index.
pub(crate) const CHUNK_HEADER: usize = 64;
/// Blocks larger than this (header and alignment slack included) get their own mapping.
pub(crate) const LARGE_MAX: usize = 1 << 20;
/// How far into a larger block, or past the wilderness front, a carved object may land.
pub(crate) const WINDOW: usize = 8 << 10;
/// Blocks larger than this (drawn only by requests above 28 KiB) take their object within
/// their first [`WINDOW`] bytes instead of anywhere.
const SPREAD_MAX: usize = 64 << 10;
/// Candidate blocks are at most this many times the request ...
const RANGE: usize = 32;
/// ... or this many bytes, if more.
const RANGE_MIN: usize = 8 << 10;
/// The least candidate free memory to choose from before carving fresh slack instead: room
/// for this many requests of the size asked (a fixed 32 KiB held small requests' heaps
/// larger than they need; glibc-simple's peak footprint over glibc's went from 1.43 to
/// 1.34 in 9 interleaved runs on a loaded machine, 1.55 to 1.54 on a quiet one; entropy and
/// reuse figures unchanged) ...
const RESERVE_REQUESTS: u64 = 32;
/// ... but at least this many bytes ...
const RESERVE_MIN: u64 = 16 << 10;
/// ... and at most this many ...
const RESERVE_MAX: u64 = 32 << 10;
/// ... unless there are at least this many candidate blocks.
const RESERVE_BLOCKS: u64 = 64;
/// A free that leaves a free region at least this large gives its whole pages back to the
/// OS (`madvise(MADV_DONTNEED)`), like glibc's trim threshold: not for every small hole,
/// since each call costs a system call, page faults when the memory is used again, and a
/// TLB shootdown that stalls every other thread of the process.
const RELEASE_MIN: usize = 1 << 20;
/// ... and only once the arena's free lists hold more than this, and more than its live
/// bytes: a heap that shrank, not one that frees and reallocates the same memory.
const TRIM_MIN: u64 = 4 << 20;
/// A freed block at least this large (glibc's default mmap threshold, above which glibc
/// gives a freed block straight back to the OS) gives its whole pages back when it leaves a
/// free region of at least twice its size, however much the arena holds: such blocks are
/// few, so the system calls and page faults are few (mstress: about 1 000 calls, 2 500
/// more page faults and 8 ms more system time per run of about 130 ms), and their pages
/// would otherwise stay resident among free fragments that smaller requests scatter
/// objects over (mstress's peak footprint: 4.6 to 3.2 MiB).
const RELEASE_BLOCK: usize = 128 << 10;
const _: () = assert!(RELEASE_MIN >= 2 * RELEASE_BLOCK);
/// The least span of pages worth a `madvise` call around a block freed into a region whose
/// pages were given back already.
const RELEASE_SPAN: usize = 64 << 10;
/// Free-list classes: 64 exact (32 B to 1040 B) and 4 per power of two above.
const CLASSES: usize = 128;
/// Classes per group of the two-level byte totals.
const GROUP: usize = 8;
/// The class of [`RANGE_MIN`]: the last candidate class of every request of at most
/// `RANGE_MIN / RANGE` bytes (most requests), whose candidates are then counted from
/// running totals of the classes up to it.
const SMALL_LAST: usize = 76;

/// Header flag: the block is handed out.
pub(crate) const BUSY: usize = 1;
/// Header flag: the block is the wilderness of the arena's newest chunk.
pub(crate) const WILD: usize = 2;
/// Header flag: the block has a mapping of its own. In a chunk, where no block is huge,
/// BUSY | HUGE marks a block queued for a remote free.
pub(crate) const HUGE: usize = 4;
/// Header flag: the block is the heap's own (the sentinel that ends a chunk).
pub(crate) const INTERNAL: usize = 8;
/// All flag bits.
pub(crate) const FLAGS: usize = 15;
/// On a free block (where no other meaning applies), the HUGE bit says its whole pages
/// were given back to the OS, so that merging more into it does not give them back again.
const RELEASED: usize = HUGE;

/// Free-block link offsets from the block's start.
const NEXT: usize = 16;
const PREV: usize = 24;

/// The word at `addr`, as an atomic.
///
/// Every heap word is accessed atomically with relaxed ordering (a plain `mov` on the
/// machines this targets): a header's first word is also claimed by compare-and-swap by
/// a thread that frees into a busy arena (see [`claim_remote`]), and the arena lock orders
/// everything else.
///
/// # Safety
///
/// `addr` is an aligned word inside a live mapping of this heap.
#[inline(always)]
unsafe fn word<'a>(addr: usize) -> &'a AtomicUsize {
    // SAFETY: forwarded from the caller; the heap never accesses its words non-atomically.
    unsafe { AtomicUsize::from_ptr(addr as *mut usize) }
}

/// Reads the word at `addr`.
///
/// # Safety
///
/// As [`word`].
#[inline(always)]
pub(crate) unsafe fn rd(addr: usize) -> usize {
    // SAFETY: forwarded from the caller.
    unsafe { word(addr) }.load(Ordering::Relaxed)
}

/// Writes the word at `addr`.
///
/// # Safety
///
/// As [`rd`], and the caller owns the word (its arena's lock, or a block nobody else has).
#[inline(always)]
pub(crate) unsafe fn wr(addr: usize, value: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { word(addr) }.store(value, Ordering::Relaxed)
}

/// The keyed tag of a header at `h` with first word `w0` (size and flags). The HUGE bit is
/// left out: in a chunk it marks a block queued for a remote free (see [`claim_remote`]),
/// set without rewriting the tag.
///
/// The previous-size field is not covered: it changes whenever the left neighbour is cut
/// or merged, and leaving it out lets [`Arena::set_prev`] rewrite it with one store instead
/// of checking and recomputing a tag. What it could mislead is checked where it is used:
/// the left neighbour it names must lie in the same chunk and carry a valid tag, be free,
/// and have exactly that size, which only the real left neighbour has (blocks tile the
/// chunk); and a linear overflow cannot reach it without overwriting the first word and
/// the tag before it.
#[inline(always)]
pub(crate) fn tag(key: u64, h: usize, w0: usize) -> u32 {
    let x = (h as u64 ^ key ^ ((w0 & !HUGE) as u64).rotate_left(29))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) as u32
}

/// Writes the header of the block at `h`.
///
/// # Safety
///
/// `h` is a block boundary of a mapping of this heap that the caller may write.
#[inline(always)]
pub(crate) unsafe fn put(key: u64, h: usize, w0: usize, prev: usize) {
    let t = tag(key, h, w0);
    // SAFETY: forwarded from the caller.
    unsafe {
        wr(h, w0);
        wr(h + 8, ((prev / GRANULE) << 32) | t as usize);
    }
}

/// Reads and checks the header at `h`: `(first word, previous size)`, or `None` if the
/// tag does not match.
///
/// # Safety
///
/// `h..h + 16` is mapped memory of this heap.
#[inline(always)]
pub(crate) unsafe fn get(key: u64, h: usize) -> Option<(usize, usize)> {
    // SAFETY: forwarded from the caller.
    let (w0, w1) = unsafe { (rd(h), rd(h + 8)) };
    let prev = (w1 >> 32) * GRANULE;
    (tag(key, h, w0) == w1 as u32).then_some((w0, prev))
}

/// The free-list class of a free block of `size` bytes, by formula.
#[inline(always)]
const fn class_by_formula(size: usize) -> usize {
    if size <= 1040 {
        size / GRANULE - 2
    } else {
        let log = usize::BITS as usize - 1 - size.leading_zeros() as usize;
        let sub = (size >> (log - 2)) & 3;
        let class = 64 + (log - 10) * 4 + sub;
        if class < CLASSES { class } else { CLASSES - 1 }
    }
}

/// Sizes below this find their class in [`SMALL_CLASS`].
const TABLE_LIMIT: usize = 16 << 10;

/// The class of every block size below [`TABLE_LIMIT`], by size / 16 (one load instead of
/// a branch on `size <= 1040`, which the slacks of random offsets make a coin toss).
static SMALL_CLASS: [u8; TABLE_LIMIT / GRANULE] = {
    let mut table = [0u8; TABLE_LIMIT / GRANULE];
    let mut i = MIN_BLOCK / GRANULE;
    while i < table.len() {
        table[i] = class_by_formula(i * GRANULE) as u8;
        i += 1;
    }
    table
};

/// The free-list class of a free block of `size` bytes (at least [`MIN_BLOCK`]).
#[inline(always)]
pub(crate) fn class_of(size: usize) -> usize {
    if size < TABLE_LIMIT {
        usize::from(SMALL_CLASS[(size / GRANULE) & (TABLE_LIMIT / GRANULE - 1)])
    } else {
        class_by_formula(size)
    }
}

/// The smallest size class `class` can hold.
#[inline]
pub(crate) fn class_floor(class: usize) -> usize {
    if class < 64 {
        32 + GRANULE * class
    } else {
        let k = class - 64;
        let log = 10 + k / 4;
        (1 << log) + (k % 4) * (1 << (log - 2))
    }
}

/// One free block of `bytes` bytes as a free-list *tally*: bytes / 16 in the high 32 bits,
/// the number of blocks in the low 32 (so that a count is read as a 32-bit word, without a
/// shift), so that one addition counts both and one load reads both. Neither half can
/// carry into the other: an arena's free bytes are at most the heap's chunks (at most `3/4`
/// of the chunk table's entries, 48 GiB; asserted in `root`), under `2^32 * 16` bytes, and
/// its free blocks at most a 32nd of that.
#[inline(always)]
fn tally_of(bytes: u64) -> u64 {
    debug_assert!(bytes.is_multiple_of(GRANULE as u64) && bytes < 1 << 32);
    // `(bytes / 16) << 32`, as one shift: `bytes` is a multiple of 16.
    bytes << (32 - GRANULE.trailing_zeros()) | 1
}

/// The blocks a [tally](tally_of) counts.
#[inline(always)]
fn tally_blocks(tally: u64) -> u64 {
    u64::from(tally as u32)
}

/// The bytes a [tally](tally_of) counts.
#[inline(always)]
fn tally_bytes(tally: u64) -> u64 {
    (tally >> 32) * GRANULE as u64
}

/// The first class all of whose blocks are at least `want` bytes, and the class below it
/// that may hold some that are (when `want` is not a class floor).
#[inline]
fn fitting_classes(want: usize) -> (usize, Option<usize>) {
    let class = class_of(want);
    if want <= 1040 || class_floor(class) == want {
        (class, None)
    } else {
        (class + 1, Some(class))
    }
}

/// The places an object of block size `need` (payload aligned to `align`) can take in a
/// block of `size` bytes at `start`, at offsets up to `max_offset`: `(count, from, step)`,
/// where the places are offset 0 if the payload is aligned there, then `from`, `from +
/// step`, ... Offsets are 0 or at least [`MIN_BLOCK`], so that any slack before the object
/// can stand as a free block.
fn offsets(
    start: usize,
    size: usize,
    need: usize,
    align: usize,
    max_offset: usize,
) -> (usize, usize, usize) {
    // `step` is a power of two: round with masks, divide with shifts.
    let step = align.max(GRANULE);
    let mask = step - 1;
    let first = ((start + HEADER + mask) & !mask) - (start + HEADER);
    if size < need {
        return (0, first, step);
    }
    let last = max_offset.min(size - need);
    let (zero, from) = if first == 0 {
        (1, (MIN_BLOCK + mask) & !mask)
    } else if first < MIN_BLOCK {
        (0, first + ((MIN_BLOCK - first + mask) & !mask))
    } else {
        (0, first)
    };
    if zero == 0 && from > last {
        return (0, from, step);
    }
    let rest = if from <= last {
        ((last - from) >> step.trailing_zeros()) + 1
    } else {
        0
    };
    (zero + rest, from, step)
}

/// The `k`-th place of [`offsets`] (`zero`: whether offset 0 is one of them).
fn nth_offset(zero: bool, from: usize, step: usize, k: usize) -> usize {
    match (zero, k) {
        (true, 0) => 0,
        (true, k) => from + (k - 1) * step,
        (false, k) => from + k * step,
    }
}

/// Counters of the heap, as [`Randomized::counters`](crate::Randomized::counters) reports
/// them (summed over the arenas).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes in live blocks (headers and rounding included).
    pub live_bytes: u64,
    /// Bytes mapped from the OS (chunks and huge blocks).
    pub mapped_bytes: u64,
    /// The most `mapped_bytes` has been (per arena, summed: an upper bound).
    pub peak_mapped_bytes: u64,
    /// Bytes on the free lists (the pool placement chooses from).
    pub free_list_bytes: u64,
    /// Bytes left in the wildernesses.
    pub wilderness_bytes: u64,
    /// Bytes given back to the OS with `madvise` so far.
    pub released_bytes: u64,
    /// Successful allocations.
    pub allocations: u64,
    /// Frees.
    pub deallocations: u64,
}

impl Counters {
    /// Adds `other` to these counters.
    pub(crate) fn add(&mut self, other: &Counters) {
        self.live_bytes += other.live_bytes;
        self.mapped_bytes += other.mapped_bytes;
        self.peak_mapped_bytes += other.peak_mapped_bytes;
        self.free_list_bytes += other.free_list_bytes;
        self.wilderness_bytes += other.wilderness_bytes;
        self.released_bytes += other.released_bytes;
        self.allocations += other.allocations;
        self.deallocations += other.deallocations;
    }
}

/// A pointer the heap refuses to free, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// Not 16-byte aligned.
    Misaligned,
    /// Not inside any mapping of this heap.
    Foreign,
    /// Inside the heap, but its header fails the keyed check: an interior pointer, a
    /// pointer the heap never returned, or a header that was overwritten.
    BadHeader,
    /// A block that is already free.
    DoubleFree,
}

impl Invalid {
    /// The message the process dies with.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Self::Misaligned => "free(): invalid pointer (not 16-byte aligned)",
            Self::Foreign => "free(): invalid pointer (not from this heap)",
            Self::BadHeader => {
                "free(): invalid pointer or corrupted block header (interior pointer, pointer never returned by this heap, or heap overflow)"
            }
            Self::DoubleFree => "free(): double free detected",
        }
    }
}

/// A live block, as validation found it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Live {
    /// Its header.
    pub(crate) header: usize,
    /// Its size, header included (for huge blocks: the mapping's length).
    pub(crate) size: usize,
    /// Its previous-size field (for huge blocks: the payload's offset in the mapping).
    pub(crate) prev: usize,
    /// Whether it has a mapping of its own.
    pub(crate) huge: bool,
}

impl Live {
    /// Bytes the owner may use.
    pub(crate) fn usable(&self) -> usize {
        if self.huge {
            self.size - self.prev
        } else {
            self.size - HEADER
        }
    }
}

/// Checks the header of the block whose payload is `payload`, in a chunk of blocks: what
/// `free` must know before it trusts anything about the block.
///
/// # Safety
///
/// `payload - 16 .. payload` lies in a live chunk of this heap (the chunk table said so),
/// and the lock of the chunk's arena is held.
pub(crate) unsafe fn validate_in_chunk(key: u64, payload: usize) -> Result<Live, Invalid> {
    let h = payload - HEADER;
    // SAFETY: forwarded from the caller.
    let (w0, prev) = unsafe { get(key, h) }.ok_or(Invalid::BadHeader)?;
    if w0 & (WILD | INTERNAL) != 0 {
        return Err(Invalid::BadHeader);
    }
    // Free already, or queued for a remote free.
    if w0 & BUSY == 0 || w0 & HUGE != 0 {
        return Err(Invalid::DoubleFree);
    }
    Ok(Live {
        header: h,
        size: w0 & !FLAGS,
        prev,
        huge: false,
    })
}

/// Checks the block at `payload` without its arena's lock and marks it queued for a remote
/// free (BUSY | HUGE), so that a second free of it is caught, in the same way, before the
/// first is done. Returns the block's size.
///
/// Sound without the lock: a live block's first word changes only by its owner's resize,
/// its free, or this claim (a compare-and-swap); its second word may be rewritten by the
/// arena's holder (a neighbour's size changed), but always as one word with a matching
/// tag, so the check sees an old or a new header, never a torn one.
///
/// # Safety
///
/// `payload - 16 .. payload` lies in a live chunk of this heap (the chunk table said so).
pub(crate) unsafe fn claim_remote(key: u64, payload: usize) -> Result<usize, Invalid> {
    let h = payload - HEADER;
    // SAFETY: forwarded from the caller.
    let (w0, _) = unsafe { get(key, h) }.ok_or(Invalid::BadHeader)?;
    if w0 & (WILD | INTERNAL) != 0 {
        return Err(Invalid::BadHeader);
    }
    if w0 & BUSY == 0 || w0 & HUGE != 0 {
        return Err(Invalid::DoubleFree);
    }
    // SAFETY: as above.
    unsafe { word(h) }
        .compare_exchange(w0, w0 | HUGE, Ordering::Relaxed, Ordering::Relaxed)
        .map(|_| w0 & !FLAGS)
        .map_err(|_| Invalid::DoubleFree)
}

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
    ready: bool,
    /// This arena's index (written in the first word of its chunks).
    index: usize,
    /// Key of the header tags (the heap's; copied here to keep it on the arena's lines).
    key: u64,
    /// The placement generator (written by `init`).
    rng: MaybeUninit<Rng>,
    /// Where the sentinels of the free lists are: the address of class 0's sentinel as a
    /// block (see [`Lists`]); class `c`'s is `16 * c` bytes further.
    lists: usize,
    /// Free blocks and bytes on each class's list, as a [tally](tally_of).
    class_tally: [u64; CLASSES],
    /// Free blocks and bytes on the lists of each group of [`GROUP`] classes.
    group_tally: [u64; CLASSES / GROUP],
    /// Free blocks and bytes on the lists of classes `0..=SMALL_LAST`.
    small_tally: u64,
    /// Header of the wilderness (0 if none).
    wild: usize,
    /// Address of the newest chunk's sentinel (the wilderness ends there).
    wild_end: usize,
    live_bytes: u64,
    mapped_bytes: u64,
    peak_mapped_bytes: u64,
    released_bytes: u64,
    allocations: u64,
    deallocations: u64,
}

/// What the arena needs from the rest of the heap to grow: a new chunk, registered in the
/// chunk table. `None` if the OS or the table refuses.
pub(crate) trait ChunkSource {
    /// Maps and registers a chunk for arena `index`; returns its base.
    fn new_chunk(&self, index: usize) -> Option<usize>;
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
    pub(crate) fn init(&mut self, index: usize, key: u64, rng: Rng, lists: &Lists) {
        self.lists = lists.0.as_ptr() as usize - NEXT;
        for class in 0..CLASSES {
            let s = self.sentinel(class);
            lists.0[2 * class].store(s, Ordering::Relaxed);
            lists.0[2 * class + 1].store(s, Ordering::Relaxed);
        }
        self.rng.write(rng);
        self.index = index;
        self.key = key;
        self.ready = true;
    }

    /// The generator.
    #[inline(always)]
    fn rng(&mut self) -> &mut Rng {
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
    unsafe fn get_or_die(&self, h: usize) -> (usize, usize) {
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
    unsafe fn put(&self, h: usize, w0: usize, prev: usize) {
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
    unsafe fn set_prev(&self, h: usize, prev: usize) {
        // SAFETY: forwarded from the caller. One whole-word store, so that a remote free
        // checking the header without the lock (`claim_remote`) sees the old word or the
        // new one, each with the same valid tag.
        unsafe {
            let w1 = rd(h + 8);
            wr(h + 8, ((prev / GRANULE) << 32) | (w1 & 0xFFFF_FFFF));
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
    unsafe fn poison(&self, h: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { self.put(h, 0, 0) }
    }

    // ----- free lists ----------------------------------------------------------------

    /// Counts a block of `bytes` bytes onto (`add`) or off class `class`'s list: its
    /// class's, group's and (for a small class) the small classes' tallies, one
    /// read-modify-write each.
    #[inline(always)]
    fn count(&mut self, class: usize, bytes: u64, add: bool) {
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
    fn pool(&self) -> u64 {
        tally_bytes(self.group_tally.iter().sum())
    }

    /// Free blocks and their bytes on the lists of classes `lo..=hi` (`lo <= hi`), in one
    /// pass: classes to the end of `lo`'s group, whole groups, then the classes of `hi`'s
    /// group. Plain index loops (indices masked into the arrays, so without bounds checks):
    /// the ranges are short, and iterator sums spend more on setting up than on adding.
    #[inline]
    fn candidates(&self, lo: usize, hi: usize) -> (u64, u64) {
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
    fn candidates_below(&self, lo: usize) -> u64 {
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
    fn class_of_block(&self, lo: usize, hi: usize, mut target: u64) -> usize {
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
    fn class_of_nth(&self, mut target: u64) -> usize {
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
    fn next_nonempty_above(&self, class: usize) -> Option<usize> {
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
    fn sentinel(&self, class: usize) -> usize {
        self.lists + GRANULE * (class & (CLASSES - 1))
    }

    /// The oldest block of class `class` (its sentinel if there is none).
    #[inline(always)]
    fn oldest(&self, class: usize) -> usize {
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
    unsafe fn push(&mut self, h: usize, size: usize) {
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
    unsafe fn unlink(&mut self, h: usize, size: usize) {
        // SAFETY: forwarded.
        unsafe { self.unlink_from(h, size, class_of(size)) }
    }

    /// [`unlink`](Self::unlink) for a caller that knows the block's class.
    ///
    /// # Safety
    ///
    /// `h` is a free block of this arena, of class `class`.
    #[inline(always)]
    unsafe fn unlink_from(&mut self, h: usize, size: usize, class: usize) {
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

    // ----- allocation ----------------------------------------------------------------

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
        chunks: &dyn ChunkSource,
    ) -> Option<usize> {
        let need = (payload.next_multiple_of(GRANULE) + HEADER).max(MIN_BLOCK);
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
            Some(self.place(h, size, prev, need, align, max_offset, wild))
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
    unsafe fn refill(
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
    unsafe fn draw(
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
    unsafe fn wilderness_block(&self, window: usize) -> (usize, usize, usize, usize, bool) {
        let h = self.wild;
        // SAFETY: the wilderness header is the arena's.
        let (_, prev) = unsafe { self.get_or_die(h) };
        (h, self.wild_end - h, prev, window, true)
    }

    /// Cuts an object of block size `need` (payload aligned to `align`) out of the free
    /// block `h` of `size` bytes (previous size `prev`), off every list, at a uniformly
    /// random offset at most `max_offset`; the slack on both sides becomes free blocks (or
    /// the wilderness again, if `h` was the wilderness). Returns the payload address.
    ///
    /// # Safety
    ///
    /// `h` is a free block (or the wilderness, then `wild`) of this arena, on no list, large
    /// enough for `need` at the alignment.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn place(
        &mut self,
        h: usize,
        size: usize,
        prev: usize,
        need: usize,
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
        let obj = h + offset;
        let after = obj + obj_size;
        let end = h + size;
        // SAFETY: all addresses are boundaries inside the block being cut, or `end`, the
        // block after it.
        unsafe {
            let obj_prev = if offset > 0 {
                self.put(h, offset, prev);
                self.push(h, offset);
                offset
            } else {
                prev
            };
            self.put(obj, obj_size | BUSY, obj_prev);
            if after < end {
                let rest = end - after;
                if wild {
                    // `end` is the chunk's sentinel, written only when the wilderness
                    // retires (see `open_wilderness`).
                    self.put(after, rest | WILD, obj_size);
                    self.wild = after;
                } else {
                    self.put(after, rest, obj_size);
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
    unsafe fn retire_wilderness(&mut self) {
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
    unsafe fn open_wilderness(&mut self, start: usize, sentinel: usize) {
        // SAFETY: forwarded.
        unsafe { self.put(start, (sentinel - start) | WILD, 0) };
        self.wild = start;
        self.wild_end = sentinel;
    }

    fn add_mapped(&mut self, bytes: u64) {
        self.mapped_bytes += bytes;
        self.peak_mapped_bytes = self.peak_mapped_bytes.max(self.mapped_bytes);
    }

    // ----- free ----------------------------------------------------------------------

    /// Frees a block that [`validate_in_chunk`] accepted under this lock hold.
    ///
    /// # Safety
    ///
    /// As said; the block is in a chunk of this arena.
    #[inline(always)]
    pub(crate) unsafe fn free(&mut self, live: Live) {
        self.live_bytes -= live.size as u64;
        self.deallocations += 1;
        // SAFETY: `live` is a block of this arena.
        unsafe { self.release(live.header, live.size, live.prev) };
    }

    /// Returns the block at `h` (`size` bytes, previous size `prev`, no longer counted as
    /// live) to the free memory, merged with free neighbours.
    ///
    /// # Safety
    ///
    /// `h` is a block of this arena that nobody uses any more.
    #[inline(always)]
    unsafe fn release(&mut self, h: usize, size: usize, prev: usize) {
        let (mut start, mut total, mut start_prev) = (h, size, prev);
        // Whether every free neighbour merged here had its pages given back already.
        let mut neighbours_released = true;
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
                    neighbours_released &= lw0 & RELEASED != 0;
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
                neighbours_released &= rw0 & RELEASED != 0;
                self.unlink(right, rsize);
                total += rsize;
            }
            // Large free regions give their whole pages back, once the arena holds more
            // free memory than live (and at least TRIM_MIN), or when a block of at least
            // RELEASE_BLOCK leaves one: all of them the first time, then only around each
            // block freed into it (when that is worth a system call). A heap that frees and
            // reallocates the same small blocks over and over keeps their memory.
            let mut released = false;
            // One comparison on the common path: both rules need `2 * RELEASE_BLOCK`.
            if total >= 2 * RELEASE_BLOCK
                && (size >= RELEASE_BLOCK
                    || (total >= RELEASE_MIN
                        && self.pool() + if wild { 0 } else { total as u64 }
                            > TRIM_MIN.max(self.live_bytes)))
            {
                let page = os::page_size();
                let (lo, hi) = if neighbours_released {
                    let lo = (start + MIN_BLOCK).max(h.saturating_sub(page));
                    (lo, (start + total).min(h + size + page))
                } else {
                    (start + MIN_BLOCK, start + total)
                };
                if hi >= lo + RELEASE_SPAN || !neighbours_released {
                    self.released_bytes += os::release_pages(lo, hi) as u64;
                }
                released = true;
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
                self.free(Live {
                    header: h,
                    size: w0 & !FLAGS,
                    prev,
                    huge: false,
                });
                payload = next;
            }
        }
    }

    // ----- resizing in place ---------------------------------------------------------

    /// Resizes the live block `live` in place to hold `payload` bytes, if its own tail or a
    /// free right neighbour allows. `false` (nothing changed) otherwise.
    ///
    /// # Safety
    ///
    /// `live` came from [`validate_in_chunk`] under this lock hold.
    pub(crate) unsafe fn resize_in_place(&mut self, live: Live, payload: usize) -> bool {
        // SAFETY: forwarded.
        let resized = unsafe { self.resize_block(live, payload) };
        if resized {
            // `Stats` counts a reallocation as a free and an allocation, moved or not.
            self.allocations += 1;
            self.deallocations += 1;
        }
        resized
    }

    /// [`resize_in_place`](Self::resize_in_place) without the counters.
    ///
    /// # Safety
    ///
    /// As `resize_in_place`.
    unsafe fn resize_block(&mut self, live: Live, payload: usize) -> bool {
        let need = (payload.next_multiple_of(GRANULE) + HEADER).max(MIN_BLOCK);
        let (h, size) = (live.header, live.size);
        // SAFETY: (whole block) `h` is a live block; its right neighbour is reached through
        // its checked header.
        unsafe {
            if need <= size {
                if size - need >= MIN_BLOCK {
                    self.put(h, need | BUSY, live.prev);
                    let rest = h + need;
                    self.put(rest, (size - need) | BUSY, need);
                    self.live_bytes -= (size - need) as u64;
                    self.release(rest, size - need, need);
                }
                return true;
            }
            let right = h + size;
            let (rw0, _) = self.get_or_die(right);
            if rw0 & BUSY != 0 {
                return false;
            }
            let rsize = rw0 & !FLAGS;
            let wild = rw0 & WILD != 0;
            let total = size + rsize;
            // The wilderness keeps room for its own header.
            if total < need || (wild && total < need + MIN_BLOCK) {
                return false;
            }
            if !wild {
                self.unlink(right, rsize);
            }
            self.poison(right);
            let grown = if total - need >= MIN_BLOCK {
                need
            } else {
                total
            };
            self.put(h, grown | BUSY, live.prev);
            self.live_bytes += (grown - size) as u64;
            if grown < total {
                let rest = h + grown;
                if wild {
                    // `h + total` is the chunk's sentinel, not written yet (see
                    // `open_wilderness`).
                    self.put(rest, (total - grown) | WILD, grown);
                    self.wild = rest;
                } else {
                    self.put(rest, total - grown, grown);
                    self.push(rest, total - grown);
                    self.set_prev(h + total, total - grown);
                }
            } else {
                self.set_prev(h + total, grown);
            }
        }
        true
    }

    // ----- inspection ----------------------------------------------------------------

    /// A snapshot of the counters.
    pub(crate) fn counters(&self) -> Counters {
        Counters {
            live_bytes: self.live_bytes,
            mapped_bytes: self.mapped_bytes,
            peak_mapped_bytes: self.peak_mapped_bytes,
            free_list_bytes: self.pool(),
            wilderness_bytes: if self.wild == 0 {
                0
            } else {
                (self.wild_end - self.wild) as u64
            },
            released_bytes: self.released_bytes,
            allocations: self.allocations,
            deallocations: self.deallocations,
        }
    }

    /// Walks one chunk of this arena from `first` (its first block) to its sentinel at
    /// `sentinel`, checking every header and link, and adds what it found to `shape`.
    ///
    /// # Safety
    ///
    /// The chunk is this arena's and its lock is held.
    pub(crate) unsafe fn check_chunk(
        &self,
        first: usize,
        sentinel: usize,
        shape: &mut HeapShape,
    ) -> Result<(), Corruption> {
        let mut h = first;
        let mut prev = 0usize;
        let mut prev_free = false;
        loop {
            // SAFETY: `h` walks block boundaries of a live chunk, from its first block to
            // its sentinel, each step checked against the chunk's end.
            let Some((w0, p)) = (unsafe { get(self.key, h) }) else {
                return Err(Corruption::at("block header fails its keyed check", h));
            };
            if p != prev {
                return Err(Corruption::with(
                    "previous-size field disagrees with the previous block",
                    h,
                    p,
                    prev,
                ));
            }
            let size = w0 & !FLAGS;
            if w0 & INTERNAL != 0 {
                if h != sentinel {
                    return Err(Corruption::at("sentinel before the chunk's end", h));
                }
                return Ok(());
            }
            if size < MIN_BLOCK || !size.is_multiple_of(GRANULE) || h + size > sentinel {
                return Err(Corruption::with("impossible block size", h, size, 0));
            }
            let free = w0 & BUSY == 0;
            if free && prev_free {
                return Err(Corruption::at("two free neighbours not coalesced", h));
            }
            if w0 & WILD != 0 {
                if h != self.wild || h + size != sentinel {
                    return Err(Corruption::at(
                        "wilderness flag on a block that is not the wilderness",
                        h,
                    ));
                }
                // The wilderness ends the walk: its chunk's sentinel is written when it
                // retires.
                shape.wilderness_bytes += size as u64;
                return Ok(());
            } else if free {
                shape.free_blocks += 1;
                shape.free_bytes += size as u64;
            } else {
                shape.live_blocks += 1;
                shape.live_bytes += size as u64;
            }
            prev_free = free;
            prev = size;
            h += size;
        }
    }

    /// Checks this arena's lists (members free, of their class, links both ways, byte
    /// totals) and that they hold `free_bytes`, the free bytes its chunks hold, and that
    /// its live counter says `live_bytes`.
    ///
    /// # Safety
    ///
    /// The lock is held.
    pub(crate) unsafe fn check_lists(
        &self,
        free_bytes: u64,
        live_bytes: u64,
    ) -> Result<(), Corruption> {
        let mut listed = 0u64;
        for class in 0..CLASSES {
            let end = self.sentinel(class);
            let mut h = self.oldest(class);
            let mut before = end;
            let mut bytes = 0u64;
            let mut members = 0u64;
            let tally = self.class_tally[class];
            while h != end {
                members += 1;
                if members > tally_blocks(tally) {
                    return Err(Corruption::with(
                        "free list longer than its class count (a cycle?)",
                        h,
                        class,
                        0,
                    ));
                }
                // SAFETY: list members are free blocks of this arena.
                let Some((w0, _)) = (unsafe { get(self.key, h) }) else {
                    return Err(Corruption::with(
                        "free-list member fails its keyed check",
                        h,
                        class,
                        0,
                    ));
                };
                if w0 & (BUSY | WILD) != 0 || class_of(w0 & !FLAGS) != class {
                    return Err(Corruption::with(
                        "free-list member is not a free block of the class",
                        h,
                        class,
                        0,
                    ));
                }
                // SAFETY: as above.
                if unsafe { rd(h + PREV) } != before {
                    return Err(Corruption::with("free-list back link broken", h, class, 0));
                }
                bytes += (w0 & !FLAGS) as u64;
                before = h;
                // SAFETY: as above.
                h = unsafe { rd(h + NEXT) };
            }
            // SAFETY: the sentinel's words lie in the control block.
            let tail = unsafe { rd(end + PREV) };
            if tail != before {
                return Err(Corruption::with(
                    "free-list tail is not its last member",
                    tail,
                    class,
                    0,
                ));
            }
            if tally_blocks(tally) != members {
                return Err(Corruption::with(
                    "class block count disagrees with the list",
                    class,
                    tally_blocks(tally) as usize,
                    members as usize,
                ));
            }
            if tally_bytes(tally) != bytes {
                return Err(Corruption::with(
                    "class byte total disagrees with the list",
                    class,
                    tally_bytes(tally) as usize,
                    bytes as usize,
                ));
            }
            listed += bytes;
        }
        for g in 0..CLASSES / GROUP {
            let sum: u64 = self.class_tally[g * GROUP..(g + 1) * GROUP].iter().sum();
            if sum != self.group_tally[g] {
                return Err(Corruption::with(
                    "group tally (blocks and bytes) disagrees with its classes",
                    g,
                    sum as usize,
                    self.group_tally[g] as usize,
                ));
            }
        }
        let small: u64 = self.class_tally[..=SMALL_LAST].iter().sum();
        if small != self.small_tally {
            return Err(Corruption::with(
                "running tally of the small classes disagrees with the lists",
                self.index,
                small as usize,
                self.small_tally as usize,
            ));
        }
        if listed != free_bytes || listed != self.pool() {
            return Err(Corruption::with(
                "free bytes in chunks disagree with the lists",
                self.index,
                free_bytes as usize,
                listed as usize,
            ));
        }
        if live_bytes != self.live_bytes {
            return Err(Corruption::with(
                "live-byte counter disagrees with the live blocks",
                self.index,
                live_bytes as usize,
                self.live_bytes as usize,
            ));
        }
        Ok(())
    }

    /// Where the wilderness is (0 if none): for the walk, which must know which chunk has it.
    pub(crate) fn wilderness(&self) -> usize {
        self.wild
    }
}

/// A broken invariant that [`Randomized::check`](crate::Randomized::check) found. Plain data, so that it can be built with
/// the lock held (formatting it would allocate, perhaps from this very heap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corruption {
    /// Which invariant.
    pub what: &'static str,
    /// The block (or chunk) where it broke; 0 for heap-wide totals.
    pub address: usize,
    /// Two figures that disagree, where there are some (else 0).
    pub found: (usize, usize),
}

impl Corruption {
    pub(crate) fn at(what: &'static str, address: usize) -> Self {
        Self::with(what, address, 0, 0)
    }

    pub(crate) fn with(what: &'static str, address: usize, a: usize, b: usize) -> Self {
        Self {
            what,
            address,
            found: (a, b),
        }
    }
}

impl core::fmt::Display for Corruption {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} at {:#x}", self.what, self.address)?;
        if self.found != (0, 0) {
            write!(f, " (found {} and {})", self.found.0, self.found.1)?;
        }
        Ok(())
    }
}

impl std::error::Error for Corruption {}

/// What [`Randomized::check`](crate::Randomized::check) found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapShape {
    /// Chunks of blocks.
    pub chunks: u64,
    /// Huge blocks (own mappings).
    pub huge_blocks: u64,
    /// Live blocks in chunks.
    pub live_blocks: u64,
    /// Free blocks on the lists.
    pub free_blocks: u64,
    /// Bytes in live blocks (huge ones included), headers included.
    pub live_bytes: u64,
    /// Bytes in free blocks.
    pub free_bytes: u64,
    /// Bytes in the wilderness.
    pub wilderness_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_exact_to_1040_bytes_then_four_per_doubling() {
        for size in (32..=1040).step_by(16) {
            assert_eq!(class_floor(class_of(size)), size);
        }
        let mut last = class_of(1040);
        for size in (1056..(4 << 20)).step_by(16) {
            let class = class_of(size);
            assert!(class >= last, "classes not monotone at {size}");
            assert!(class_floor(class) <= size, "floor above size at {size}");
            assert!(class == CLASSES - 1 || size < class_floor(class + 1));
            last = class;
        }
        assert!(last < CLASSES);
    }

    #[test]
    fn the_class_table_agrees_with_the_formula() {
        for size in (MIN_BLOCK..4 * TABLE_LIMIT).step_by(GRANULE) {
            assert_eq!(class_of(size), class_by_formula(size), "size {size}");
        }
    }

    #[test]
    fn class_of_nth_finds_the_class_of_every_block() {
        // SAFETY: zeroed memory is a valid `Arena` (see `Arena::init`); only its tallies
        // are used here.
        let mut arena: Box<Arena> = Box::new(unsafe { core::mem::zeroed() });
        let mut rng = Rng::from_seed_stream([5; 32], 0);
        for round in 0..200u64 {
            arena.class_tally = [0; CLASSES];
            arena.group_tally = [0; CLASSES / GROUP];
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
    fn small_last_is_the_class_of_range_min() {
        assert_eq!(SMALL_LAST, class_of(RANGE_MIN));
        // Every request of at most RANGE_MIN / RANGE bytes ends its candidates there.
        assert!(class_of(RANGE_MIN / RANGE) < SMALL_LAST);
    }

    #[test]
    fn fitting_classes_hold_only_blocks_that_fit() {
        for want in (32..(300 << 10)).step_by(16) {
            let (first, partial) = fitting_classes(want);
            assert!(class_floor(first) >= want || first == class_of(want) && want <= 1040);
            if let Some(p) = partial {
                assert_eq!(p + 1, first);
                assert!(class_floor(p) < want);
            }
        }
    }

    #[test]
    fn offsets_are_zero_or_leave_room_for_a_free_block_and_respect_alignment() {
        for align in [16usize, 32, 64, 256, 4096] {
            for start in [0x1000usize, 0x1010, 0x1020, 0x1030] {
                for size in [32usize, 48, 64, 96, 200 * 16, 8192] {
                    let need = 32;
                    let want = need + if align > 16 { align + 16 } else { 0 };
                    let (count, from, step) = offsets(start, size, need, align, usize::MAX);
                    let zero = (start + HEADER).is_multiple_of(align);
                    if size >= want {
                        assert!(count > 0, "no place for {need} in {size} at {align}");
                    }
                    for k in 0..count {
                        let o = nth_offset(zero, from, step, k);
                        assert!(o == 0 || o >= MIN_BLOCK);
                        assert!(o + need <= size);
                        assert_eq!((start + o + HEADER) % align, 0);
                    }
                }
            }
        }
    }

    #[test]
    fn the_payload_alignment_shortcut_of_place_agrees_with_offsets() {
        // `place` computes the places at 16-byte alignment without `offsets`.
        for start in (0x1000usize..0x1040).step_by(16) {
            for room in (32usize..1200).step_by(16) {
                for need in [32usize, 48, 80, 272] {
                    for max_offset in [0usize, 16, 32, 48, 1000, WINDOW, usize::MAX] {
                        if room < need {
                            continue;
                        }
                        let (count, from, step) = offsets(start, room, need, 16, max_offset);
                        let last = max_offset.min(room - need);
                        let short = if last >= MIN_BLOCK {
                            (last - MIN_BLOCK) / GRANULE + 2
                        } else {
                            1
                        };
                        assert_eq!(count, short, "{start:#x} {room} {need} {max_offset}");
                        for k in 0..count {
                            let o = if k == 0 {
                                0
                            } else {
                                MIN_BLOCK + (k - 1) * GRANULE
                            };
                            assert_eq!(nth_offset(true, from, step, k), o);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_offset_count_is_every_aligned_offset_but_those_below_a_free_block() {
        // A 128-byte block, 32-byte object, 16-byte alignment: offsets 0, 32, 48, ..., 96.
        let (count, from, step) = offsets(0x2000, 128, 32, 16, usize::MAX);
        assert_eq!((count, from, step), (6, 32, 16));
        // Capped by a window.
        assert_eq!(offsets(0x2000, 128, 32, 16, 48).0, 3);
    }
}
