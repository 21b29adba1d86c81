//! A randomized memory allocator whose whole state is one machine word.
//!
//! [`Randomized`] places every object at random: one of up to 1 KiB in a slot drawn
//! uniformly among at least 256 places of its size class, a larger one at a uniformly
//! random 16-byte-aligned offset inside a free block chosen at random among all that fit.
//! An attacker cannot predict where the next object lands, next to what, or whether it
//! reuses the block he just freed: the ingredients of use-after-free and heap-overflow
//! exploits. Freed memory is zeroed and checked when handed out again, requests are
//! followed by keyed canaries and block headers carry a keyed check, so a double free, a
//! free of a pointer it never returned, an overflow and a write after free abort the
//! process with a message.
//!
//! ```
//! use alloclab_randomized::Randomized;
//!
//! // The whole allocator is one word; everything else lives in the memory it manages.
//! assert_eq!(size_of::<Randomized>(), size_of::<usize>());
//! ```
//!
//! As the program's allocator:
//!
//! ```no_run
//! #[global_allocator]
//! static HEAP: alloclab_randomized::Randomized = alloclab_randomized::Randomized::new();
//!
//! fn main() {
//!     let v: Vec<u64> = (0..1000).collect();
//!     assert_eq!(v.iter().sum::<u64>(), 499_500);
//! }
//! ```
//!
//! For C and C++ programs, `alloclab-preload-randomized` builds it as an `LD_PRELOAD`
//! library.
//!
//! # The design
//!
//! * **One word of state**: the address of the control block, with a lock bit that guards
//!   its construction at the first allocation (see `lock.rs`). The control block (sixteen
//!   arenas, the header key, the table of every mapping, counters) lives in band at the
//!   start of the first 4 MiB chunk.
//! * **Slabs** (`heap/slab/`) serve requests of up to 1,039 bytes (1,040 with the canary
//!   byte) at alignment 16: per arena and size class (15 classes) a slab of 1 MiB with a
//!   bitmap, a 16-bit record and a free-list entry per slot. An allocation draws uniformly
//!   among the free slots of a window of at least 256 slots, from the list of them; a
//!   freed slot is held back for four frees of its class or eight allocations. Frees of
//!   another arena's slots take no lock: they are queued on that arena's stack of slab
//!   frees.
//! * **Blocks** (larger requests, alignments above 16) carry a 16-byte header (size and flags; the previous block's size and a
//!   32-bit keyed tag). Free blocks are on doubly linked lists threaded through them, one
//!   per size class (exact up to 1040 B, four per power of two above), per arena; each
//!   list is a ring closed by a sentinel in the control block, so that pushing and
//!   unlinking take no branch on whether a list is empty.
//! * **Allocation** draws a fitting free block among those at most 32 times the request
//!   (at least 8 KiB; twice the request plus 8 KiB above 1 KiB): a class with probability
//!   proportional to its number of free blocks, then its oldest block; and an offset inside it
//!   uniformly among all aligned offsets that leave the slack before it large enough to
//!   stand as a free block; both slacks go back to the lists. When there are fewer than 64
//!   candidates holding less than 32 requests' worth (16 to 32 KiB), the object goes at a
//!   random offset within the
//!   first 8 KiB of a larger free block or of the chunk's untouched end (the wilderness)
//!   instead, which refills the pool. In a block above 64 KiB the object goes within its
//!   first 8 KiB. Blocks above 1 MiB get their own mapping (one mapping per block would
//!   cost several system calls and a page fault per page for every block recycled).
//! * **Free** checks the pointer (in a mapping of this heap, a header whose keyed tag
//!   verifies, busy), then coalesces with both neighbours. A freed block joins the back of
//!   its list, behind every other free block of its class. Free regions of 1 MiB and more
//!   give their whole pages back to the OS once the arena holds more free memory than live;
//!   so does a freed block of 128 KiB or more that leaves a free region of 256 KiB or more.
//! * **Threads**: each arena has its own lock, a word in band; a thread uses the arena its
//!   `pthread_self` claimed, the first unclaimed one from the arena its identity hashes to
//!   (no thread-local state, `claims.rs`), and takes another when it is busy. Sixteen
//!   arenas at most; `ALLOCLAB_RANDOMIZED_ARENAS` ([`Randomized::ARENAS_ENV`]) limits a heap
//!   to fewer, for a smaller footprint at the price of contention.
//!   A free of another arena's block goes, under the freeing thread's own arena lock, to
//!   that arena's outbox, which pushes such blocks as chains of 16 onto the block's arena's
//!   lock-free stack; a free that finds its block's arena busy pushes the block alone. The
//!   arena's next holder drains the stack (`remote.rs`).
//! * **Random numbers**: ChaCha8 seeded from `getrandom`, one generator per arena; bounded
//!   draws by Lemire's method, with no modulo bias. After `fork` the child reseeds (through
//!   [`ForkHooks::after_fork_in_child`](alloclab_core::ForkHooks::after_fork_in_child)).
//!
//! # Guarantees and limits
//!
//! * Thread-safe through the arena locks: an operation blocks while another thread holds
//!   its arena. Nothing is per-thread, so there is no thread-local cache to exploit and
//!   nothing to leak when threads exit; the price is a lock per operation.
//! * Detected and fatal: double frees of blocks or slots still free (or held back, or
//!   queued), frees of pointers that are misaligned, outside the heap, interior, or whose
//!   header was overwritten;
//!   free-list links corrupted by an overflow (checked before every unlink); a neighbour's
//!   header overwritten (checked when a free merges). A block freed, then reallocated at the
//!   same address, then freed through the stale pointer cannot be told from a legitimate
//!   free (no allocator without quarantine can); placement makes that coincidence rare.
//! * Detection classes ([`Checks`]), each on unless the environment variable
//!   `ALLOCLAB_RANDOMIZED_OFF` names it: freed memory zero-filled and checked when handed
//!   out again (a write after free aborts when the memory is reused), canaries after every
//!   request in a slot and every block request that is not a multiple of 16 (a one-byte
//!   overflow, or an underflow into the slot below, aborts at free or realloc), a
//!   guard page after every block above 1 MiB (an overflow past it faults at once),
//!   zero-size requests answered with pointers into an inaccessible region (a use faults),
//!   and C++'s `delete` checked against its `new` and its size.
//! * The tag is a keyed hash, not a MAC: it stops blind overwrites and stale pointers, not
//!   an attacker who can already read the heap (and so the key).
//! * It does not solve fragmentation: random offsets split free blocks where a first fit
//!   would not, and each size class's window of 256 slots or more becomes memory as the
//!   class's random draws reach its pages, whatever the class holds live (up to 1.7 MB per
//!   arena with every class churning; fewer arenas, fewer windows). The `cpu` suite of
//!   `alloclab-harness` measures the footprint against glibc.
//! * Alignments above 2 MiB are refused; sizes above `isize::MAX / 2` are refused.
//!
//! ## Without `std`
//!
//! The heap needs nothing of the standard library: its memory, entropy and messages come
//! from the C library's system calls. Without its `std` feature (on by default: it links the
//! standard library, and turns on alloclab-core's) the crate is `no_std`; the randomized preload
//! library is built so, and leaves the standard library's panic and backtrace machinery out
//! of the programs it is loaded into.

#![cfg_attr(not(any(feature = "std", test, loom)), no_std)]
#![cfg_attr(loom, allow(dead_code))]

mod claims;
mod lock;
mod remote;

#[cfg(not(loom))]
mod arenas;
#[cfg(not(loom))]
mod bug;
#[cfg(not(loom))]
mod checks;
#[cfg(not(loom))]
mod heap;
#[cfg(not(loom))]
mod os;
#[cfg(not(loom))]
mod randomized;
#[cfg(not(loom))]
mod rng;
#[cfg(not(loom))]
mod root;
#[cfg(not(loom))]
mod zero;

#[cfg(not(loom))]
pub use checks::Checks;
#[cfg(not(loom))]
pub use heap::{Corruption, Counters, HeapShape};
#[cfg(not(loom))]
pub use randomized::Randomized;
