//! A crash-consistent persistent heap: the allocator ([`heap`], [`PersistentHeap`]), the pool
//! file format ([`pool`]) and the persistence layer ([`persist`]).
//!
//! Everything that makes bytes durable goes through one narrow interface, [`Medium`]:
//! bytes at offsets of one mapping, made durable by [`Medium::flush`] and
//! [`Medium::fence`]. Three kinds of medium implement it:
//!
//! * a file mapped through **libpmem** (`pmem_map_file`, `pmem_flush`, `pmem_drain`; loaded
//!   at run time with `dlopen`, so the crate builds and runs without PMDK);
//! * a file mapped with `mmap` and flushed **natively** (CLWB or CLFLUSHOPT chosen at run
//!   time, then SFENCE; `msync` when the file is not persistent memory);
//! * a **simulator**: a durable image beside the working one, into which flushes and fences
//!   move cache lines, and which can produce the image a crash would leave.
//!
//! The pool format ([`pool`]) sits on any medium: a versioned, checksummed header, a root
//! object, position-independent offsets and typed persistent pointers.

pub mod heap;
pub mod persist;
pub mod pool;
mod sync;

pub use heap::{HeapError, HeapStats, PathMedium, PersistentHeap, RecoveryReport, Reservation};

pub use persist::{
    FileMedium, Medium, MediumError, MediumKind, PersistStats, PmemFileMedium, SimMedium,
    create_best, open_best,
};
pub use pool::{PPtr, Pool, PoolError};
