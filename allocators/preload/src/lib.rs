//! # alloclab-preload
//!
//! Turns any alloclab host heap into a drop-in `malloc` for C and C++ programs, loaded with
//! `LD_PRELOAD`.
//!
//! * [`api`] — the C allocation functions (`malloc`, `free`, `calloc`, `realloc`,
//!   `reallocarray`, `posix_memalign`, `aligned_alloc`, `memalign`, `valloc`, `pvalloc`,
//!   `malloc_usable_size`, and glibc's `malloc_trim`, `malloc_stats`, `mallinfo`,
//!   `mallinfo2`) written once, generic over a [`MallocHeap`]: argument checks,
//!   overflow checks, `errno`, the alignment every `malloc` result has, and what zero sizes
//!   mean.
//! * [`cxx`] — C++'s `operator new` and `operator delete` in every form (plain, array,
//!   sized, aligned, `nothrow`), with `std::new_handler` and `std::bad_alloc`.
//! * [`export_malloc_api!`] — a macro a `cdylib` invokes once to export those functions
//!   under their C and C++ (Itanium ABI) names, plus the marker
//!   `alloclab_preload_heap_name()`.
//! * [`fork`] — [`ForkHooks`], for heaps that hold locks, registered with
//!   `pthread_atfork` at the first allocation.
//! * `testheap` (feature `testheap`) — a small mutex-protected heap that is test
//!   infrastructure for this layer, not a research allocator.
//! * `driver` (feature `test-driver`) — the integration tests every preload library runs:
//!   a multi-threaded C program, `python3` and `sqlite3` under `LD_PRELOAD`.
//!
//! A preload library is a few lines (this is `testheap-so/src/lib.rs`):
//!
//! ```ignore
//! use alloclab_preload::testheap::TestHeap;
//!
//! static HEAP: TestHeap = TestHeap::new();
//!
//! alloclab_preload::export_malloc_api! {
//!     heap: HEAP,
//!     name: "testheap",
//!     fork_hooks: HEAP,
//! }
//! ```
//!
//! (Not compiled as a doc test: a test binary that defines `malloc` would route the test
//! harness itself through it.)
//!
//! ## What a heap must provide
//!
//! * [`MallocHeap`]: the size of a block from its address, and a free without a layout.
//! * A `static` the library can refer to: a `const` constructor, no lazy initialisation
//!   through Rust's global allocator (inside the preload library the global allocator *is*
//!   `malloc`, so it would recurse into the heap).
//! * Panic-free allocation and free paths: the exported functions are `extern "C"`, so a
//!   panic aborts the process, and the panic machinery itself allocates.
//! * No thread-local storage with destructors or lazy allocation, for the same reason:
//!   glibc allocates some TLS through `malloc`.
//! * Fork safety: after `fork` only the forking thread exists in the child. Any lock another
//!   thread held at that moment stays held forever, so a heap with locks implements
//!   [`ForkHooks`] (take every lock before `fork`, release in both
//!   processes after) and passes `fork_hooks:` to the macro. A wait-free or lock-free heap
//!   needs nothing, as long as a structure that a thread was in the middle of updating at
//!   the fork is still usable by the child (true of single-word CAS/swap protocols; a
//!   per-thread cache of a thread that no longer exists in the child is only leaked).
//!
//! Linux (glibc or musl) only: `errno` is reached through `__errno_location`.
//!
//! ## Without the standard library
//!
//! With its `std` feature off (and alloclab-core's), the crate is `no_std`, and a preload
//! library built with `panic = "abort"` (the workspace's `preload` profile) leaves the
//! standard library out: [`export_malloc_api!`] then defines the panic handler
//! ([`panic::abort_with_message`]). The standard library's panic and backtrace machinery
//! is most of a small library's code, and a program's resident memory holds the pages of
//! it that are touched.

#![cfg_attr(not(any(feature = "std", test, loom)), no_std)]

pub mod api;
pub mod cxx;
pub use alloclab_core::errno;
mod export;
pub mod fork;
mod line;
pub mod panic;

/// The C library's types, for what [`export_malloc_api!`] expands to in a library that does
/// not name `libc` itself.
#[doc(hidden)]
pub use libc as __libc;

/// For [`export_malloc_api!`]: `alloclab_core::without_std!`, reached from the library that
/// invokes it.
#[doc(hidden)]
pub use alloclab_core as __core;

#[cfg(feature = "test-driver")]
pub mod driver;
#[cfg(any(test, feature = "testheap"))]
pub mod testheap;

pub use alloclab_core::MallocHeap;
pub use api::MALLOC_ALIGNMENT;
pub use fork::ForkHooks;
