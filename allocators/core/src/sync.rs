//! The one place concurrent code takes its atomics, cells and threads from.
//!
//! Under `cfg(loom)` everything comes from [`loom`](https://docs.rs/loom), so a model test
//! explores every interleaving of the very code that ships; otherwise from `core` (and
//! `Arc`, `Mutex`, `Condvar` and `thread` from `std`, with the `std` feature). Concurrent
//! code in every alloclab crate imports from here, never from `std::sync` directly.
//!
//! [`UnsafeCell`] follows loom's API (`with` / `with_mut` take closures) so that loom can
//! track accesses; the `std` version compiles to plain pointer accesses.
//!
//! Run the models with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --lib <crate>`, or
//! all of them through `cargo xtask test`.

#[cfg(not(loom))]
mod imp {
    pub use core::hint::spin_loop;
    pub use core::sync::atomic;
    #[cfg(feature = "std")]
    pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};
    #[cfg(feature = "std")]
    pub use std::thread;

    /// `core::cell::UnsafeCell` with loom's closure-based access API.
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub struct UnsafeCell<T: ?Sized>(core::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        /// Wraps `value`.
        pub const fn new(value: T) -> Self {
            Self(core::cell::UnsafeCell::new(value))
        }

        /// Unwraps the value.
        pub fn into_inner(self) -> T {
            self.0.into_inner()
        }
    }

    impl<T: ?Sized> UnsafeCell<T> {
        /// Calls `f` with a shared raw pointer to the contents.
        #[inline(always)]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Calls `f` with a mutable raw pointer to the contents.
        #[inline(always)]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }

    /// Runs `f` once (under loom: once per explored interleaving).
    pub fn model<F: Fn() + Sync + Send + 'static>(f: F) {
        f()
    }

    /// Gives up the CPU to another thread that is ready to run (`sched_yield`): what a
    /// spin lock's waiter does once spinning has not helped, with or without `std` (under
    /// loom: a point where the model switches threads).
    #[inline]
    pub fn yield_now() {
        #[cfg(feature = "std")]
        std::thread::yield_now();
        #[cfg(all(not(feature = "std"), unix))]
        // SAFETY: sched_yield has no preconditions, and its result (always 0 on Linux)
        // says nothing a caller acts on.
        unsafe {
            libc::sched_yield();
        }
        #[cfg(all(not(feature = "std"), not(unix)))]
        core::hint::spin_loop();
    }
}

#[cfg(loom)]
mod imp {
    pub use loom::cell::UnsafeCell;
    pub use loom::hint::spin_loop;
    pub use loom::sync::atomic;
    pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
    pub use loom::thread;

    /// Runs `f` under loom's model checker: once per explored interleaving.
    pub fn model<F: Fn() + Sync + Send + 'static>(f: F) {
        loom::model(f)
    }

    /// Yields to the model's other threads.
    pub fn yield_now() {
        loom::thread::yield_now()
    }
}

pub use imp::*;

/// Adds `n` to a counter that only the calling thread writes: a relaxed load and a relaxed
/// store, not a locked add.
///
/// Readers on other threads see each count whole (the store is atomic), possibly a little
/// late. On x86 a locked read-modify-write waits for the thread's pending cache-line
/// write-backs as a fence does, so counters on paths that follow a `CLWB` or that must stay
/// short use this. Two writers would lose counts: the caller guarantees a single writer.
#[inline]
pub fn bump_single_writer(counter: &atomic::AtomicU64, n: u64) {
    counter.store(
        counter.load(atomic::Ordering::Relaxed).wrapping_add(n),
        atomic::Ordering::Relaxed,
    );
}
