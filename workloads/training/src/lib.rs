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
//!
//! ```
//! use alloclab_training::{ModelConfig, Model, Precision, Trace};
//!
//! let config = ModelConfig::new(Model::ResNet50, 8, Precision::Fp32).unwrap();
//! let trace = Trace::generate(&config);
//! trace.validate().unwrap();
//! assert!(trace.peak_live_bytes() > trace.persistent_bytes());
//! ```

pub mod caching;
pub mod cost;
mod error;
pub mod model;
pub mod planner;
pub mod replay;
pub mod trace;

pub use error::TrainingError;
pub use model::{Model, ModelConfig, Precision};
pub use trace::{RunTrace, Trace};
