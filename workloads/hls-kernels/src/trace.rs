//! Allocation traces: which kernel each accelerator runs, and every invocation's buffers,
//! compute time and idle time, drawn from a seed.
//!
//! A trace depends only on its [`TraceConfig`] (seed included), never on the memory it is
//! replayed against, so the baseline and the defragmenter see exactly the same requests.
//! Accelerator `i` runs `kernels[i mod kernels.len()]` and draws from its own generator
//! (seeded from the trace seed and `i`), so adding accelerators does not reshuffle the others.

use crate::kernels::{Invocation, Kernel};
use alloclab_core::rng::SplitMix64;

/// What an accelerator does when one of its allocation requests fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnFailure {
    /// Run anyway, as an HLS kernel on Memluv does (a failed `malloc` returns the heap
    /// base and the generated datapath does not branch on it): the invocation keeps its
    /// other buffers for its whole compute time, and its result is invalid.
    #[default]
    ComputeAnyway,
    /// Skip the computation: free the buffers obtained at once (a kernel that checks).
    Skip,
}

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceConfig {
    /// Accelerator instances.
    pub accelerators: usize,
    /// Kernels, assigned round robin: accelerator `i` runs `kernels[i mod len]`.
    pub kernels: Vec<Kernel>,
    /// Invocations per accelerator.
    pub invocations: u32,
    /// Idle cycles between two invocations of an accelerator (and before its first) are
    /// drawn uniformly from `0..=max_idle_cycles`.
    pub max_idle_cycles: u64,
    /// What an accelerator does when a request fails.
    pub on_failure: OnFailure,
    /// Free each buffer at its kernel's release point (see [`Kernel`]) instead of all at the
    /// end of the computation.
    pub early_release: bool,
    /// Seed.
    pub seed: u64,
}

impl TraceConfig {
    /// The mixed heterogeneous trace for `heaps` heaps: ten accelerators per heap, one
    /// instance of each kernel (accelerator `i` runs kernel `(i / heaps) mod 10` and uses heap
    /// `i mod heaps`), `invocations` each, up to 2000 idle cycles between invocations,
    /// computing anyway when a request fails (Memluv's behaviour), buffers freed at the end.
    pub fn mixed(heaps: usize, invocations: u32, seed: u64) -> Self {
        let heaps = heaps.max(1);
        Self {
            accelerators: 10 * heaps,
            kernels: (0..10 * heaps)
                .map(|i| Kernel::ALL[(i / heaps) % Kernel::ALL.len()])
                .collect(),
            invocations,
            max_idle_cycles: 2000,
            on_failure: OnFailure::ComputeAnyway,
            early_release: false,
            seed,
        }
    }
}

/// One accelerator's part of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceleratorTrace {
    /// The kernel it runs.
    pub kernel: Kernel,
    /// Cycle of its first invocation.
    pub start_cycle: u64,
    /// Its invocations, each with the idle cycles that follow it.
    pub invocations: Vec<(Invocation, u64)>,
}

/// A whole trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// One entry per accelerator, by index.
    pub accelerators: Vec<AcceleratorTrace>,
    /// What an accelerator does when a request fails.
    pub on_failure: OnFailure,
    /// Whether buffers are freed at their release points.
    pub early_release: bool,
}

impl Trace {
    /// Generates the trace `config` describes.
    ///
    /// # Panics
    ///
    /// If `config.kernels` is empty while there are accelerators.
    pub fn generate(config: &TraceConfig) -> Self {
        assert!(
            config.accelerators == 0 || !config.kernels.is_empty(),
            "a trace with accelerators needs at least one kernel"
        );
        let accelerators = (0..config.accelerators)
            .map(|i| {
                let mut rng = SplitMix64::new(
                    config.seed ^ (i as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F),
                );
                let kernel = config.kernels[i % config.kernels.len()];
                let start_cycle = rng.range_inclusive(0, config.max_idle_cycles);
                let invocations = (0..config.invocations)
                    .map(|_| {
                        let inv = kernel.invocation(&mut rng);
                        (inv, rng.range_inclusive(0, config.max_idle_cycles))
                    })
                    .collect();
                AcceleratorTrace {
                    kernel,
                    start_cycle,
                    invocations,
                }
            })
            .collect();
        Self {
            accelerators,
            on_failure: config.on_failure,
            early_release: config.early_release,
        }
    }

    /// Allocation requests in the whole trace.
    pub fn requests(&self) -> u64 {
        self.accelerators
            .iter()
            .flat_map(|a| &a.invocations)
            .map(|(inv, _)| inv.buffers.len() as u64)
            .sum()
    }

    /// The largest single buffer of the trace, in bytes.
    pub fn largest_buffer(&self) -> u32 {
        self.accelerators
            .iter()
            .flat_map(|a| &a.invocations)
            .flat_map(|(inv, _)| inv.buffers.iter().copied())
            .max()
            .unwrap_or(0)
    }
}
