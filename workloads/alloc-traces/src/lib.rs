//! # alloclab-alloc-traces
//!
//! Allocation traces of embedded and data-plane systems, each generated from a seed and a
//! configuration, each a run of allocator calls in the format of `alloclab-training`
//! ([`RunTrace`](alloclab_training::trace::RunTrace)), so that the caching-allocator model
//! ([`replay_caching`](alloclab_training::replay::replay_caching)) and any
//! [`alloclab_core::Allocator`] ([`replay_host`](alloclab_training::replay::replay_host))
//! replay them unchanged.
//!
//! * [`uav`] — a UAV sliding-window map: submaps around a vehicle on a seeded trajectory.
//! * [`switch`] — a switch data-plane block pool: per-port queues of fixed cells, bursty and
//!   skewed arrivals.
//! * [`workload`] — what those two share (errors, a seeded generator, a balance check).
//!
//! The parameters and every figure are in the crate README.
//!
//! ```
//! use alloclab_alloc_traces::switch::{self, SwitchConfig};
//! use alloclab_alloc_traces::uav::{self, UavConfig};
//! use alloclab_alloc_traces::workload::check_balanced;
//! use alloclab_core::SystemHeap;
//! use alloclab_training::replay::replay_host;
//!
//! let map = uav::generate(&UavConfig { steps: 2_000, ..UavConfig::default() }).unwrap();
//! let pool = switch::generate(&SwitchConfig { ticks: 2_000, ..SwitchConfig::default() }).unwrap();
//! for run in [&map.run, &pool.run] {
//!     let balance = check_balanced(run).unwrap();
//!     let replay = replay_host(run, &SystemHeap::new(), 1).unwrap();
//!     assert_eq!(replay.peak_live_bytes, balance.peak_live_bytes);
//! }
//! ```

pub mod switch;
pub mod uav;
pub mod workload;
