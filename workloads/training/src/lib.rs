//! # alloclab-training
//!
//! DNN training memory without a GPU: what the tensors of a training iteration are, how
//! PyTorch's CUDA caching allocator would hold them, and how much a DELTA-style planner can
//! take off the peak by swapping activations to the host or recomputing them.
//!
//! * [`model`] — layer descriptions of ResNet-50/101, BERT-Large, GPT-2 Large/XL.
//! * [`trace`] — per-iteration tensor traces (alloc/free, size, producer and users,
//!   phase, kind) and multi-iteration runs at changing batch sizes.
//! * [`caching`] — a model of `c10::cuda::CUDACachingAllocator` (512 B rounding, small and
//!   large pools, best fit with splitting, `max_split_size`, expandable segments).
//! * [`replay`] — a run replayed on the caching model or on any
//!   [`alloclab_core::Allocator`].
//! * [`cost`] — the device cost model (compute, HBM and PCIe bandwidth, capacity).
//! * [`planner`] — the DELTA-style keep / swap / recompute planner and its simulator.
//! * [`pickle`] — a restricted unpickler (data opcodes only, never runs pickle code).
//! * [`snapshot`] — PyTorch memory snapshots (`_dump_snapshot`) imported as a [`RunTrace`].
//! * [`chunk`] — a PatrickStar-style chunk manager (model data in chunks moved between host
//!   and device, placed from a warm-up iteration).
//! * [`tensile`] — a TENSILE-style swap scheduler for several jobs sharing one device.
//!
//! The parameters, the simplifications and every figure are in the crate README.
//!
//! ```
//! use alloclab_training::caching::CachingConfig;
//! use alloclab_training::cost::CostModel;
//! use alloclab_training::planner::{self, Goal};
//! use alloclab_training::replay::replay_caching;
//! use alloclab_training::{Model, ModelConfig, Precision, RunTrace, Trace, TrainingError};
//!
//! # fn main() -> Result<(), TrainingError> {
//! let config = ModelConfig::new(Model::ResNet50, 8, Precision::Fp32)?;
//! let trace = Trace::generate(&config);
//! trace.validate().expect("generated traces are valid");
//!
//! // PyTorch's caching allocator over three iterations at batch 8, 9, 10.
//! let run = RunTrace::new(&config, &[8, 9, 10])?;
//! let replay = replay_caching(&run, CachingConfig::default(), 0)?;
//! assert!(replay.total.peak_reserved_bytes >= replay.total.peak_allocated_bytes);
//!
//! // The lowest peak within 1.2x of the keep-all iteration time.
//! let outcome = planner::plan(&trace, &CostModel::a100_40gb(), Goal::min_memory_within(1.2))?;
//! assert!(outcome.evaluation.peak_bytes < outcome.baseline.peak_bytes);
//! assert!(outcome.slowdown() <= 1.2);
//! # Ok(())
//! # }
//! ```

pub mod caching;
pub mod chunk;
pub mod cost;
mod error;
pub mod model;
pub mod pickle;
pub mod planner;
pub mod replay;
pub mod snapshot;
pub mod tensile;
pub mod trace;

pub use error::TrainingError;
pub use model::{Model, ModelConfig, Precision};
pub use trace::{RunTrace, Trace};
