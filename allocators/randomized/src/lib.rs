//! A randomized memory allocator whose whole state is one machine word.
//!
//! [`Randomized`] places every object at a uniformly random 16-byte-aligned offset inside a
//! free block chosen at random among all that fit, so an attacker cannot predict where the
//! next object lands, next to what, or whether it reuses the block he just freed: the
//! ingredients of use-after-free and heap-overflow exploits. Its headers carry a keyed
//! check, so a double free, a free of a pointer it never returned and an overwritten header
//! abort the process with a message, as glibc does.
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
//! * **One word of state**: the address of the control block, with a lock bit (see
//!   `lock.rs`). The control block (free lists, a Fenwick tree of their byte totals, the
//!   ChaCha8 generator, the header key, counters and the table of mappings) lives in band at
//!   the start of the first 4 MiB chunk, which the first allocation maps.
//! * **Blocks** carry a 16-byte header (size and flags; previous block's size and a 32-bit
//!   keyed tag). Free blocks are on doubly linked lists threaded through them, one per
//!   size class (exact up to 1040 B, four per power of two above).
//! * **Allocation** draws a fitting free block with probability proportional to its size,
//!   and an offset inside it uniformly among all aligned offsets that leave the slack before
//!   it large enough to stand as a free block; both slacks go back to the lists. When the
//!   fitting free memory is below max(64 KiB, live/8), the object comes from the chunk's
//!   untouched end (the wilderness) at a random offset within 8 KiB of its front instead,
//!   which refills the pool. Blocks above 256 KiB get their own mapping.
//! * **Free** checks the pointer (in a mapping of this heap, a header whose keyed tag
//!   verifies, busy), then coalesces with both neighbours, and gives the whole pages of a
//!   large free region back to the OS (`madvise(MADV_DONTNEED)`). A freed block joins the
//!   back of its list, behind every other free block of its class.
//! * **Random numbers**: ChaCha8 seeded from `getrandom`; bounded draws by Lemire's method,
//!   with no modulo bias. After `fork` the child reseeds ([`Randomized::after_fork_in_child`]).
//!
//! # Guarantees and limits
//!
//! * Thread-safe through the lock bit: operations block while another thread holds it.
//!   Nothing is per-thread, so there is no thread-local cache to exploit and nothing to
//!   leak when threads exit; the price is contention on many cores.
//! * Detected and fatal: double frees of blocks still free, frees of pointers that are
//!   misaligned, outside the heap, interior, or whose header was overwritten; free-list
//!   links corrupted by an overflow (checked before every unlink). A block freed, then
//!   reallocated at the same address, then freed through the stale pointer cannot be told
//!   from a legitimate free (no allocator without quarantine can); placement makes that
//!   coincidence rare.
//! * The tag is a keyed hash, not a MAC: it stops blind overwrites and stale pointers, not
//!   an attacker who can already read the heap (and so the key).
//! * It does not solve fragmentation: random offsets split free blocks where a first fit
//!   would not. The `cpu` suite of `alloclab-harness` measures the footprint against glibc.
//! * Alignments above 2 MiB are refused; sizes above `isize::MAX` are refused.

#![cfg_attr(loom, allow(dead_code))]

mod lock;
mod remote;

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
pub use heap::{Corruption, Counters, HeapShape};
#[cfg(not(loom))]
pub use randomized::Randomized;
