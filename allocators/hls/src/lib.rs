//! # alloclab-hls
//!
//! A cycle-approximate model of the on-chip memory of an HLS many-accelerator FPGA, after
//! Kokkinis, Diamantopoulos & Siozios, "Dynamic Optimization of On-Chip Memories for HLS
//! Targeting Many-Accelerator Platforms" (IEEE CAL 2022), and the framework it builds on
//! (DMM-HLS / Memluv).
//!
//! ```text
//!  accelerator i ──► heap i mod H ─┬─ BRAM words (W bits) ─ the blocks' bytes
//!                                  ├─ free map (bit per byte or per word), first fit
//!                                  ├─ handle table: slot -> (start, units, size)
//!                                  └─ defragmenter: compaction toward the base, budgeted
//! ```
//!
//! * [`OnChipConfig`]: `H` heaps of `heap_words` words of `W` bits, the bitmap's granularity,
//!   alignment, cached start position, [`CycleCosts`], and an optional [`DefragConfig`].
//! * [`OnChipMemory`]: the model. Allocation is Memluv's bitmap first fit over word masks;
//!   every failure is classified ([`FailureClass`]): *capacity* when allocated bytes plus the
//!   request exceed the heap, *fragmentation* when the free bytes would have sufficed. Blocks
//!   are named by relocatable [`Handle`]s, so the defragmenter can move them; the heap holds
//!   real bytes, so a move can be checked byte for byte.
//! * [`SharedOnChip`] / [`AcceleratorPort`]: the model as an [`alloclab_core::Allocator`].
//!
//! The paper's kernels as allocation traces, their discrete-event simulation on this model
//! and the heap-size sweeps are workloads, in the crate `alloclab-hls-kernels`.
//!
//! ```
//! use alloclab_hls::{DefragConfig, OnChipConfig, OnChipMemory};
//!
//! let config = OnChipConfig { heap_words: 64, ..OnChipConfig::default() }
//!     .with_defrag(DefragConfig::default());
//! let mut memory = OnChipMemory::new(config).unwrap();
//! let a = memory.allocate(0, 64).unwrap().handle;
//! let b = memory.allocate(0, 100).unwrap().handle;
//! memory.bytes_mut(b).unwrap().fill(0xAB);
//! memory.free(a).unwrap();
//! let before = memory.location(b).unwrap().offset_bytes;
//! memory.compact(0);
//! assert!(memory.location(b).unwrap().offset_bytes < before);
//! assert!(memory.bytes(b).unwrap().iter().all(|&x| x == 0xAB));
//! memory.check_invariants().unwrap();
//! ```

mod bitmap;
mod config;
mod defrag;
mod handle;
mod heap;
mod memory;
mod shared;

pub use config::{
    BitmapGranularity, CompactWindow, ConfigError, CycleCosts, DefragConfig, MAX_HEAP_BYTES,
    MAX_HEAPS, MAX_WORD_BITS, OnChipConfig,
};
pub use defrag::DefragReport;
pub use handle::Handle;
pub use memory::{
    AllocFailure, AllocateError, Allocation, Counters, FailureClass, Free, Location, OnChipMemory,
    StaleHandle,
};
pub use shared::{AcceleratorPort, FRAGMENTATION_MESSAGE, SharedOnChip};
