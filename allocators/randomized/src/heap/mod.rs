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
//! | size | flags (BUSY, WILD,   | canary (6),   | next free | prev free | ...
//! |        HUGE, INTERNAL)      | kind (2), prev|           |           |
//! |                             | /16 (20), tag |           |           |
//! +-----------------------------+---------------+-----------+-----------+
//! ```
//!
//! * `size` includes the header and is a multiple of 16; a block's payload starts right
//!   after its header, so payloads are 16-byte aligned.
//! * `prev size` is the size of the physically previous block (0 for the first block of a
//!   chunk): free finds its left neighbour with it, and the right one by adding `size`.
//! * `canary`, on a live block with [`Checks::CANARIES`](crate::Checks::CANARIES), is how
//!   many bytes at the end of its payload hold the keyed canary byte (0 to 47: the rounding
//!   to 16, and a slack too small to stand alone); see `arm_canary`. `kind` says whether
//!   C++'s `operator new` or `new[]` asked for it (0: `malloc` or the trait), for the
//!   checks of [`Checks::CXX_DELETE`](crate::Checks::CXX_DELETE).
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

mod alloc;
mod arena;
mod audit;
mod class;
mod fill;
mod free;
mod header;
#[cfg(all(test, not(loom)))]
mod policy_tests;
mod resize;
mod slab;

pub(crate) use arena::{Arena, ChunkSource, Lists};
pub use audit::{Corruption, Counters, HeapShape};
pub(crate) use fill::ZEROED_PAYLOAD_MAX;
pub(crate) use free::scrub_queued;
pub(crate) use header::{
    BUSY, Expect, HUGE, Invalid, KIND_NEW, KIND_NEW_ARRAY, Live, canary_len, check_canary,
    claim_remote, get, put, rd, set_kind, validate_in_chunk, wr,
};
pub(crate) use slab::{
    SlabCheck, SlabWalk, Slabs, claim as slab_claim, class_of as slab_class_of, init_slab,
    locate as slab_locate, usable as slab_usable,
};

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
