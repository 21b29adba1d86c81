//! Suites and workloads.
//!
//! A workload is a fixed amount of work: it reports how long that work took, or how long
//! each of its operations took (and the worker around it measures the footprint). Every
//! workload of a suite needs one [`Capability`] from the allocators it runs on; `alloclab
//! list` shows which fit which.
//!
//! | suite      | workloads                                  | default threads        |
//! |------------|--------------------------------------------|------------------------|
//! | `cpu`      | see [`cpu`]                                | the number of cores    |
//! | `programs` | real programs and C versions of the `cpu` workloads, see [`programs`] | the cores (C benchmarks); 1 |
//! | `realtime` | `latency`, see [`realtime`]                | 1×, 2× and 4× the cores |
//! | `security` | `entropy`, `reuse`, `overflow`, `misuse`, see [`security`] | 1                |
//! | `hls`      | `mixed-kernels`, see [`hls`] (simulated)   | 1 (always)             |
//! | `pmem`     | `pmem-flush`, `pmem-eadr`, see [`pmem`]    | 1 and 2                |
//! | `gpu`      | `gpu-free-fraction`, `gpu-sizes`, `gpu-threads`, see [`gpu`] (CPU model; CUDA when present) | 1 (device threads are swept inside) |
//! | `storage`  | `<engine>-<mix>[-uniform]`, see [`storage`] | 1 and 2               |
//! | `training` | `training-caching`, `training-growing-batch`, `training-delta`, see [`training`] (simulated) | 1 (always) |
//! | `training-replay` | `training-replay-uav`, `-switch`, `-resnet50`, see [`training::ReplayWorkload`] | 1 |
//!
//! A worker process finds the code of a host-heap workload by name through
//! [`HostWorkload::from_name`], runs an on-chip workload through [`hls::run`], a
//! persistent-heap workload through [`pmem::run`] or [`storage::run`] and a GPU workload
//! through [`gpu::run`] and a caching-allocator model workload through [`training::run`].

pub mod cpu;
pub mod gpu;
pub mod hls;
pub mod layouts;
pub mod pmem;
pub mod programs;
pub mod realtime;
pub mod security;
pub mod storage;
pub mod training;

use core::fmt;
use core::str::FromStr;
use core::time::Duration;
use std::sync::LazyLock;

use alloclab_core::HostAllocator;

use crate::peers::Capability;
use crate::results::Sample;

/// How much work a workload does. Small is the default for `alloclab suite`: the whole suite
/// runs in a few minutes on a 2-core machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// 1/64 of small: for tests and smoke runs, not for figures.
    Tiny,
    /// The default: a run takes tens to hundreds of milliseconds.
    #[default]
    Small,
    /// 4x small.
    Medium,
    /// 16x small.
    Large,
}

impl Scale {
    /// A count that is `small` at [`Scale::Small`], scaled for this scale (at least 1).
    pub fn scaled(self, small: u64) -> u64 {
        match self {
            Self::Tiny => (small / 64).max(1),
            Self::Small => small.max(1),
            Self::Medium => small.max(1) * 4,
            Self::Large => small.max(1) * 16,
        }
    }

    /// Work relative to [`Scale::Small`]: 1/64, 1, 4 or 16.
    pub fn factor(self) -> f64 {
        match self {
            Self::Tiny => 1.0 / 64.0,
            Self::Small => 1.0,
            Self::Medium => 4.0,
            Self::Large => 16.0,
        }
    }

    /// The name used on the command line and in results.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tiny => "tiny",
            Self::Small => "small",
            Self::Medium => "medium",
            Self::Large => "large",
        }
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scale {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tiny" => Ok(Self::Tiny),
            "small" => Ok(Self::Small),
            "medium" => Ok(Self::Medium),
            "large" => Ok(Self::Large),
            _ => Err(format!(
                "unknown scale '{s}' (expected tiny, small, medium or large)"
            )),
        }
    }
}

/// What a workload is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Amount of work.
    pub scale: Scale,
    /// Seed for every random choice the workload makes, so that all allocators see the same
    /// sequence of requests.
    pub seed: u64,
}

/// What one run of a workload measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measurement {
    /// Wall time of the measured part (setup such as spawning threads excluded).
    pub elapsed: Duration,
    /// Allocator operations performed (allocations + deallocations + reallocations).
    pub operations: u64,
    /// Timed samples taken (for the timer-overhead figure): the shortest sample is at most
    /// `elapsed`, and timing overhead is `samples` timer reads.
    pub samples: u64,
    /// The shortest timed sample.
    pub min_sample: Duration,
}

/// A workload as the registry describes it.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadInfo {
    /// Suite it belongs to (`cpu`, ...).
    pub suite: &'static str,
    /// Name on the command line.
    pub name: &'static str,
    /// One line: what it exercises.
    pub description: &'static str,
    /// What an allocator must offer to run it.
    pub requires: Capability,
    /// The thread counts it runs at when the user names none, given the number of logical
    /// cores (see [`WorkloadInfo::default_thread_counts`]).
    pub default_threads: fn(cores: usize) -> Vec<usize>,
}

impl WorkloadInfo {
    /// Whether the heaps compared on this workload are measured together, interleaved in
    /// one worker process, rather than each in a process of its own: the `storage` suite's
    /// (see [`storage::driver`] for why).
    pub fn heaps_together(&self) -> bool {
        self.suite == storage::report::SUITE
    }

    /// The thread counts this workload runs at on a machine with `cores` logical cores when
    /// the user names none: [`default_threads`](Self::default_threads), each at least 1,
    /// ascending, without repeats.
    pub fn default_thread_counts(&self, cores: usize) -> Vec<usize> {
        let mut counts: Vec<usize> = (self.default_threads)(cores.max(1))
            .into_iter()
            .map(|t| t.max(1))
            .collect();
        counts.sort_unstable();
        counts.dedup();
        if counts.is_empty() {
            counts.push(cores.max(1));
        }
        counts
    }
}

/// One thread per core: the default of the `cpu` suite.
pub fn one_per_core(cores: usize) -> Vec<usize> {
    vec![cores]
}

/// 1×, 2× and 4× the cores: the default of the `realtime` suite, whose tails are meant to be
/// read with more threads than cores.
pub fn oversubscribed(cores: usize) -> Vec<usize> {
    vec![cores, 2 * cores, 4 * cores]
}

/// Every suite, in the order `alloclab suite` runs them.
pub const SUITES: &[&str] = &[
    "cpu",
    programs::SUITE,
    "realtime",
    "security",
    "hls",
    "pmem",
    "storage",
    "gpu",
    "training",
    "training-replay",
];

/// The workloads of every suite, in [`SUITES`] order.
static ALL: LazyLock<Vec<WorkloadInfo>> = LazyLock::new(|| {
    let programs = programs::workloads();
    [
        cpu::WORKLOADS,
        &programs,
        realtime::WORKLOADS,
        security::WORKLOADS,
        hls::WORKLOADS,
        pmem::WORKLOADS,
        gpu::WORKLOADS,
        storage::WORKLOADS,
        training::WORKLOADS,
        training::REPLAY_WORKLOADS,
    ]
    .into_iter()
    .flatten()
    .copied()
    .collect()
});

/// Runs per measurement when `--runs` is not given.
pub const DEFAULT_RUNS: u32 = 5;

/// Runs of the `security`, `pmem`, `gpu` and `training-replay` suites when `--runs` is not
/// given: each `security` run holds hundreds of forked trials (the entropy and reuse
/// estimates) or a verdict per case (misuse); the `pmem` suite's ratios, the `gpu` suite's
/// CPU model and the replays of fixed traces move by a few percent from run to run, where
/// the microbenchmarks of `cpu` move by tens.
pub const STEADY_DEFAULT_RUNS: u32 = 3;

/// The suites, and single workloads, that run other than [`DEFAULT_RUNS`] times when
/// `--runs` is not given, single workloads first (the first entry naming a workload or its
/// suite decides, see `runner::Plan::runs_for`).
pub fn default_runs_per_suite() -> Vec<(&'static str, u32)> {
    let classic = programs::classic_workloads().map(|name| (name, programs::CLASSIC_DEFAULT_RUNS));
    classic
        .chain([
            ("progress", realtime::PROGRESS_DEFAULT_RUNS),
            ("security", STEADY_DEFAULT_RUNS),
            ("pmem", STEADY_DEFAULT_RUNS),
            ("gpu", STEADY_DEFAULT_RUNS),
            ("training-replay", STEADY_DEFAULT_RUNS),
            ("storage", storage::DEFAULT_RUNS),
            // The training suite is deterministic: one run says it all.
            (training::SUITE, 1),
            (programs::SUITE, programs::DEFAULT_RUNS),
            (realtime::SUITE, realtime::DEFAULT_RUNS),
        ])
        .collect()
}

/// Every workload the harness knows, suite by suite in [`SUITES`] order.
pub fn all() -> &'static [WorkloadInfo] {
    &ALL
}

/// Looks a workload up by name.
pub fn find(name: &str) -> Option<&'static WorkloadInfo> {
    all().iter().find(|w| w.name == name)
}

/// Why `workload` cannot run here or in this build, as one line with what to install; `None`
/// when it can.
pub fn unavailable(workload: &WorkloadInfo) -> Option<String> {
    match workload.suite {
        programs::SUITE => programs::unavailable(workload.name),
        realtime::SUITE => realtime::unavailable(workload.name),
        security::SUITE if workload.name == security::misuse_c::NAME => {
            security::misuse_c::unavailable()
        }
        _ => storage::unavailable(workload.name),
    }
}

impl WorkloadInfo {
    /// Whether a `--threads` list applies to this workload: host threads that the harness
    /// starts (not a simulation's, not the GPU's, not a real program's own threads).
    pub fn takes_thread_counts(&self) -> bool {
        self.requires.runs_on_host_threads()
            && (self.suite != programs::SUITE || programs::takes_threads(self.name))
    }
}

/// A workload that runs on a host heap, as a worker process finds it by name: the code
/// behind a [`WorkloadInfo`] that requires [`Capability::HostHeap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostWorkload {
    /// A workload of the `cpu` suite.
    Cpu(cpu::CpuWorkload),
    /// A workload of the `realtime` suite.
    Realtime(realtime::RealtimeWorkload),
    /// A workload of the `security` suite.
    Security(security::SecurityWorkload),
    /// A trace replay of the `training-replay` suite.
    TrainingReplay(training::ReplayWorkload),
}

/// What one run of a [`HostWorkload`] reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The workload's own metrics (`time`; or latency percentiles, ...).
    pub samples: Vec<Sample>,
    /// The shortest timed sample, for the `timer_overhead` figure.
    pub min_sample: Duration,
    /// Whether every allocator operation was timed on its own (two clock reads around one
    /// call). Such figures contain a clock read each by design, so the worker also reports
    /// the raw cost of one (`clock_read`) for the reader to subtract.
    pub times_single_operations: bool,
}

impl HostWorkload {
    /// The host-heap workload registered under `name`, of whichever suite.
    pub fn from_name(name: &str) -> Option<Self> {
        cpu::CpuWorkload::from_name(name)
            .map(Self::Cpu)
            .or_else(|| realtime::RealtimeWorkload::from_name(name).map(Self::Realtime))
            .or_else(|| security::SecurityWorkload::from_name(name).map(Self::Security))
            .or_else(|| training::ReplayWorkload::from_name(name).map(Self::TrainingReplay))
    }

    /// The workload's registry name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu(w) => w.name(),
            Self::Realtime(w) => w.name(),
            Self::Security(w) => w.name(),
            Self::TrainingReplay(w) => w.name(),
        }
    }

    /// Whether the heap must be untouched when the workload starts: the `security`
    /// suite's `entropy` replays its history in fresh heaps forked from the worker, so the
    /// runner must not warm the heap up first (an allocator that seeds itself at its first
    /// use would otherwise hand every child the same seed).
    pub fn needs_untouched_heap(self) -> bool {
        matches!(self, Self::Security(_))
    }

    /// Runs the workload once against `alloc`.
    ///
    /// # Panics
    ///
    /// If the allocator fails an allocation (the workloads ask for modest sizes).
    pub fn run<A: HostAllocator>(self, alloc: &A, params: &Params) -> Outcome {
        match self {
            Self::Cpu(w) => {
                let m = w.run(alloc, params);
                Outcome {
                    samples: vec![Sample {
                        metric: "time".to_owned(),
                        unit: "ms".to_owned(),
                        value: m.elapsed.as_secs_f64() * 1e3,
                        lower_is_better: true,
                    }],
                    min_sample: m.min_sample,
                    times_single_operations: false,
                }
            }
            Self::Realtime(w) => w.run(alloc, params),
            Self::Security(w) => w.run(alloc, params),
            Self::TrainingReplay(w) => w.run(alloc, params),
        }
    }
}

/// A pool file under a scratch directory (`/dev/shm` for the persistent-heap suites), named
/// after the suite, the worker's pid and a counter, and removed when dropped.
pub(crate) struct ScratchPool(pub(crate) std::path::PathBuf);

impl ScratchPool {
    /// A fresh path for `suite`'s pool `what` in `dir` (nothing is created).
    pub(crate) fn new(dir: &std::path::Path, suite: &str, what: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!(
            "alloclab-{suite}-{}-{n}-{what}.pool",
            std::process::id()
        ));
        // A pool left behind by a killed worker of the same pid and counter.
        let _ = std::fs::remove_file(&path);
        Self(path)
    }
}

impl Drop for ScratchPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_workload_has_code_under_its_own_name() {
        for w in all() {
            assert!(SUITES.contains(&w.suite), "{} has no suite", w.name);
            match w.requires {
                Capability::HostHeap => {
                    let code = HostWorkload::from_name(w.name)
                        .unwrap_or_else(|| panic!("no code for workload {}", w.name));
                    assert_eq!(code.name(), w.name);
                }
                Capability::OnChipModel => assert!(hls::is_hls_workload(w.name), "{}", w.name),
                Capability::PersistentHeap => match w.suite {
                    "pmem" => assert!(pmem::is_pmem_workload(w.name), "{}", w.name),
                    "storage" => assert!(storage::is_storage_workload(w.name), "{}", w.name),
                    other => panic!("{} of suite {other} needs a persistent heap", w.name),
                },
                Capability::GpuPagePool | Capability::GpuMalloc | Capability::GpuThreads => {
                    assert!(gpu::is_gpu_workload(w.name), "{}", w.name);
                    assert_eq!(w.suite, "gpu");
                }
                Capability::CachingModel => {
                    assert!(training::is_training_workload(w.name), "{}", w.name);
                    assert_eq!(w.suite, "training");
                }
                Capability::Program if w.suite == security::SUITE => {
                    assert_eq!(w.name, security::misuse_c::NAME);
                }
                Capability::Program => {
                    assert!(
                        alloclab_programs::catalog::find(w.name).is_some(),
                        "{}",
                        w.name
                    );
                    assert_eq!(w.suite, programs::SUITE);
                }
            }
        }
        assert_eq!(HostWorkload::from_name("no-such-workload"), None);
    }

    #[test]
    fn workload_names_are_unique_across_suites() {
        let mut names: Vec<&str> = all().iter().map(|w| w.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before);
    }

    #[test]
    fn cpu_runs_once_per_core_latency_at_one_two_and_four_times_security_at_one_pmem_at_one_and_two()
     {
        for cores in [1, 2, 6] {
            for w in all() {
                let expected = match w.suite {
                    "cpu" => vec![cores],
                    "programs" if programs::takes_threads(w.name) => vec![cores],
                    "programs" => vec![1],
                    "realtime" if w.name == "latency" => vec![cores, 2 * cores, 4 * cores],
                    "realtime" => vec![cores],
                    "security" => vec![1],
                    "hls" => vec![1],
                    "pmem" | "storage" => vec![1, 2],
                    "gpu" | "training" | "training-replay" => vec![1],
                    other => panic!("unexpected suite {other}"),
                };
                assert_eq!(w.default_thread_counts(cores), expected, "{}", w.name);
            }
        }
    }

    #[test]
    fn default_thread_counts_are_positive_sorted_and_distinct() {
        let info = WorkloadInfo {
            suite: "test",
            name: "test",
            description: "",
            requires: Capability::HostHeap,
            default_threads: |cores| vec![4 * cores, 0, cores, cores],
        };
        assert_eq!(info.default_thread_counts(2), [1, 2, 8]);
        assert_eq!(info.default_thread_counts(0), [1, 4]);
        let none = WorkloadInfo {
            default_threads: |_| Vec::new(),
            ..info
        };
        assert_eq!(none.default_thread_counts(3), [3]);
    }
}
