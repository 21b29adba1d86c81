//! # alloclab-hls-kernels
//!
//! The workloads of the on-chip memory model ([`alloclab_hls`]): allocation traces of the
//! accelerator kernels that Kokkinis, Diamantopoulos & Siozios evaluate ("Dynamic
//! Optimization of On-Chip Memories for HLS Targeting Many-Accelerator Platforms", IEEE CAL
//! 2022: Phoenix, CHStone, MiBench), the discrete-event simulation that replays a trace on a
//! memory, and the heap-size sweeps of the harness's `hls` suite.
//!
//! * [`Kernel`], [`TraceConfig`], [`Trace`]: allocation traces, deterministic per seed.
//! * [`simulate`]: a trace on an [`OnChipMemory`](alloclab_hls::OnChipMemory), FIFO
//!   arbitration at each heap's allocator FSM; [`SimReport`] its figures.
//! * [`Experiment`]: the reference heap, the smallest zero-failure heap and the failure
//!   curves of a configuration against the baseline.
//!
//! ```
//! use alloclab_hls::OnChipConfig;
//! use alloclab_hls_kernels::{Trace, TraceConfig, simulate};
//!
//! let trace = Trace::generate(&TraceConfig::mixed(3, 4, 7));
//! let config = OnChipConfig { heaps: 3, ..OnChipConfig::default() };
//! let report = simulate(&trace, config).unwrap();
//! assert_eq!(report, simulate(&trace, config).unwrap());
//! ```

mod kernels;
mod sim;
mod sweep;
mod trace;

pub use kernels::{Invocation, Kernel};
pub use sim::{SimReport, simulate};
pub use sweep::{Experiment, ExperimentError, ExperimentResult, simulate_at};
pub use trace::{AcceleratorTrace, OnFailure, Trace, TraceConfig};
