//! # alloclab
//!
//! Research memory allocators behind one trait, and a harness that runs them side by side
//! with the allocators people already use.
//!
//! This crate only re-exports: each allocator is its own crate (`alloclab-<name>`) that can
//! be depended on alone, enabled here by a feature of the same name. The core — the
//! [`Allocator`] trait, [`AllocError`], [`Stats`], the [`sync`] shim, [`GlobalAdapter`] and
//! the [`Checked`] typestate wrapper — is always here.
//!
//! The harness (binary `alloclab`, crate `alloclab-harness`) is described in the README.

pub use alloclab_core::{
    AllocError, AllocErrorKind, Allocator, BlockHandle, Checked, ForkHooks, GlobalAdapter,
    GlobalAllocHeap, HostAllocator, MallocHeap, PERSISTENT_BLOCK_ALIGN, PersistStats,
    PersistentAllocator, PersistentError, PersistentHandle, Policy, Stats, SystemHeap, Violation,
    checked, move_block, resized_layout, sync,
};

/// The README's examples, compiled and run as doc tests so that they cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The wait-free span allocator (crate `alloclab-wfspan`).
#[cfg(feature = "wfspan")]
pub use alloclab_wfspan::{self as wfspan, WfSpan};

/// The randomized allocator whose state is one word (crate `alloclab-randomized`).
#[cfg(feature = "randomized")]
pub use alloclab_randomized::{self as randomized, Randomized};

/// The on-chip memory model of an HLS many-accelerator FPGA (crate `alloclab-hls`).
#[cfg(feature = "hls")]
pub use alloclab_hls as hls;

/// The crash-consistent persistent heap (crate `alloclab-pmem`).
#[cfg(feature = "pmem")]
pub use alloclab_pmem as pmem;
