//! # wfspan — wait-free dynamic memory management
//!
//! After Ouyang & Zhu, "wfspan: Wait-free Dynamic Memory Management", ACM TECS 21(4), 2022.
//! Every allocation and free finishes in a bounded number of steps, whatever the other
//! threads do — a thread can be preempted forever in the middle of an operation and nobody
//! waits for it. The price is a bounded amount of memory that such stalls can strand.
//!
//! ```
//! use alloclab_wfspan::WfSpan;
//!
//! #[global_allocator]
//! static GLOBAL: WfSpan = WfSpan::new();
//!
//! let v: Vec<u64> = (0..1000).collect();
//! assert_eq!(v.iter().sum::<u64>(), 499_500);
//! ```
//!
//! ## Structure
//!
//! * **Spans** (`span`): `span_bytes` (64 KiB) aligned to their size, one size class each,
//!   all blocks; their headers are a table at the region's start, found from any block by
//!   its offset in the region (a subtract, a compare and two shifts).
//! * **Size classes** (`size_class`): 16 B to a quarter span; bigger objects take a run of
//!   1 to 32 spans (every count to 8, then four per doubling); bigger still, or aligned to a span or more, get their own OS
//!   mapping — the one path that is **not** wait-free (it is a system call).
//! * **Per-thread heaps** (`heap`): per class an active span, partial and full spans (at most
//!   `K` per class), a private cache of empty spans and a public single-producer,
//!   multi-consumer span list that other threads pop with **one** attempt (`span_list`).
//! * **Remote frees** (`remote_free`): a per-span wait-free MPSC list (swap the head, then
//!   link), taken by the owner one node at a time; a counter tells the last remote freer of
//!   a discarded span to reclaim it — and keeps an owner from reusing an empty span while a
//!   remote free of it has not counted itself yet.
//! * **Helping** (`help`): a thread whose one-shot pops failed publishes a request; every
//!   thread helps at most H = 1 other and queries P = N public lists.
//! * **Threads** (`thread`): a heap per thread found through a thread-local word (`tls`:
//!   initial-exec ELF TLS on x86_64 Linux, two instructions from the thread pointer, also
//!   in the `LD_PRELOAD` library), released at
//!   thread exit by a pthread key destructor, adopted by the next thread — no allocation on
//!   any of these paths, so `WfSpan` can be the global allocator.
//! * Fresh spans come from one reserved region (`os`) with a `fetch_add` on a bump pointer.
//!
//! ## Bounds
//!
//! [`step_bound`] gives the most steps one allocation or free can take with `n` threads;
//! every operation counts its steps and [`Stats`](alloclab_core::Stats) reports the maxima
//! seen, so a user can check "wait-free" without trusting a stopwatch.
//! [`stranded_bound_bytes`] gives the paper's bound on memory that helping can strand.
//!
//! ## Limits
//!
//! * A `WfSpan` should live for the whole process (a `static`). Dropping one unmaps its
//!   spans; its heap records (a few KiB per thread that used it) stay mapped so that exiting
//!   threads can still release them.
//! * Zero-size requests get a 16-byte block (a unique pointer, as `malloc(0)` gives).
//! * Registering a thread (its first allocation) and the first allocation of the process
//!   are lock-free, not wait-free: they may retry a CAS, or wait for the one thread that
//!   reserves the region.
//!
//! ## Without `std`
//!
//! On x86_64 Linux the crate needs nothing of the standard library, and without its `std`
//! feature (on by default) it is `no_std`; the wfspan preload library is built so. Elsewhere
//! its thread-local word is a `thread_local!`, which needs `std`.

#![cfg_attr(not(any(feature = "std", test, loom)), no_std)]
#![cfg_attr(loom, allow(dead_code))]

mod bug;
pub mod help;
mod hint;
pub mod remote_free;
pub mod span_list;

#[cfg(not(loom))]
mod heap;
#[cfg(not(loom))]
mod os;
#[cfg(not(loom))]
pub mod size_class;
#[cfg(not(loom))]
mod span;
#[cfg(not(loom))]
mod thread;
#[cfg(not(loom))]
mod tls;

#[cfg(not(loom))]
mod allocator;

#[cfg(not(loom))]
pub use allocator::{
    Config, HUGE_CACHE_BYTES, HUGE_CACHE_SLOTS, MAX_SPANS_PER_CLASS, StepBound, WfSpan, step_bound,
    stranded_bound_bytes,
};
#[cfg(not(loom))]
pub use heap::{PURGE_AFTER_SPANS, RUN_USABLE_STEP};

#[cfg(all(test, loom))]
mod loom_tests;
