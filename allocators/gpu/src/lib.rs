//! # alloclab-gpu — the GPU random-search page allocator
//!
//! After Pham et al., "Dynamic Memory Management in Massively Parallel Systems: A Case on
//! GPUs" (ICS 2022) and its TOPC 2025 version: thousands of GPU threads each need a page,
//! and instead of queueing on a shared free list every thread probes random pages (RW) or
//! random 32-page bitmap words (RW-BM), optionally starting next to its last page (CRW) or
//! sharing what its warp found (CoRW).
//!
//! * [`sim`] — a round-synchronous simulator of N requesters in warps of 32 that measures
//!   TAS (mean probes per thread) and WAS (mean over warps of the slowest lane's probes),
//!   and [`sim::sweep`] over the pool's free fraction.
//! * [`closed_form`] — the paper's formulas for those costs, the simulator's oracle.
//! * [`PagePool`] — a real concurrent RW-BM page pool on CPU threads (atomics from
//!   [`alloclab_core::sync`], so the loom models check the shipped code), implementing
//!   [`alloclab_core::Allocator`] with [`PageHandle`]s.
//! * [`device`] — the CUDA kernels of `kernels/`, compiled at run time with NVRTC and
//!   launched through cudarc (feature `cuda`; nothing CUDA is needed to build, and a missing
//!   driver is an error value, not a panic), and [`check`], the host checks of the pool after
//!   every kernel.
//!
//! ```
//! use alloclab_gpu::sim::{simulate, Design, SimConfig};
//!
//! let config = SimConfig { total_pages: 1 << 16, free_pages: 6554, requesters: 500, seed: 1 };
//! let rw = simulate(Design::Rw, &config).unwrap();
//! let queue = simulate(Design::Queue, &config).unwrap();
//! assert_eq!(rw.pages_claimed, 500);
//! assert!(rw.tas < queue.tas); // about 10 random probes against 250 turns in the queue
//! ```
//!
//! US patent application 2024/0345746 claims the random-probe idea; see the README.

pub mod check;
pub mod closed_form;
pub mod device;
mod pool;
pub mod rng;
pub mod sim;

pub use pool::{DEFAULT_PAGE_SIZE, MAX_PAGES_PER_REQUEST, PageHandle, PagePool, PoolError};
