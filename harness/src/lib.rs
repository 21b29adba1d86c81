//! # alloclab-harness
//!
//! Runs workloads against allocators — alloclab's own and the ones people already use — and
//! reports the comparison. The binary is `alloclab` (see `alloclab --help`).
//!
//! * [`peers`]: the existing allocators as [`Allocator`](alloclab_core::Allocator)s, and the
//!   registry of every allocator the harness knows.
//! * [`workloads`]: the suites and their workloads.
//! * [`pmem`]: persistent heaps (alloclab-pmem, PMDK, a DRAM baseline) behind one slot-based
//!   trait, for the `pmem` suite.
//! * [`storage`]: storage engines (InP, LSM, CoW) over persistent heaps, for the `storage`
//!   suite.
//! * [`measure`]: timer calibration and resident-set measurement.
//! * [`runner`]: runs each measurement in a fresh worker process and aggregates runs.
//! * [`results`]: the `results.json` format.
//! * [`report`]: `report.md` and the SVG charts.
//! * [`checks`]: the wfspan and randomized issues' must-reach checks over a run's results.
//! * [`machine`]: what machine a result was measured on.

pub mod checks;
pub mod machine;
pub mod measure;
pub mod peers;
pub mod pmem;
pub mod report;
pub mod results;
pub mod runner;
pub mod storage;
pub mod workloads;
