//! Where the crate's concurrent code takes its atomics, locks and cells from: the workspace's
//! shim, [`alloclab_core::sync`] (`std`, or `loom` under `cfg(loom)`, so that the per-thread
//! caches' loom model runs the code that ships), and [`raw`], the words loom cannot model,
//! each with its reason.

pub(crate) use alloclab_core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
pub(crate) use alloclab_core::sync::{Arc, Mutex, MutexGuard, UnsafeCell, bump_single_writer};

/// Exempt from the loom shim: `std` atomics, always.
///
/// * [`AtomicU8`], [`AtomicU32`]: the heap's **live map** (a byte per block slot) and **slab
///   kinds** (a word per slab), hundreds of thousands of them per heap, and the **tag line**
///   words written into the mapped pool with `from_ptr`. Loom tracks every atomic object it
///   is given (its store history, per execution); a map of that size is no model, and a word
///   of mapped pool memory is not an object loom created. Each byte is written by the one
///   thread that takes or frees its block (the heap's contract), so there is no interleaving
///   to explore beyond the per-thread caches', which the model covers.
/// * [`AtomicU64`](raw::AtomicU64): **persistent words** (`PPtr::load` / `PPtr::store` over
///   the mapping, with `from_ptr`: the same reason) and the **process-wide counters in
///   statics** (the next heap id): loom's atomics cannot be built in a `static`.
/// * [`AtomicUsize`], [`StaticMutex`]: the persistence counters' thread numbers, in statics
///   (as above).
/// * [`fence`]: the ordering the native medium's flushes need from the CPU (an `SFENCE`
///   stand-in on other targets); it orders write-backs to the medium, which loom does not
///   model.
/// * [`OnceLock`], [`SharedArc`]: a library probed once per process (`dlopen` of libpmem,
///   CPUID), and the simulator's immutable crash hook: set once, then only read.
pub(crate) mod raw {
    pub(crate) use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize};
    // The native medium's fence on targets without SFENCE.
    #[cfg_attr(target_arch = "x86_64", allow(unused_imports))]
    pub(crate) use std::sync::atomic::fence;
    pub(crate) use std::sync::{Arc as SharedArc, Mutex as StaticMutex, OnceLock};
}
