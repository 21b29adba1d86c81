//! The `realtime` suite: what a real-time program asks of an allocator.
//!
//! * [`latency`]: how long one allocation and one free take, in the tail (p50 to p99.999 and
//!   max), at 1×, 2× and 4× the cores under the policy `--sched` asks for (the default
//!   time-sharing one unless told), beside the floor (the same timing around a call that
//!   does nothing);
//! * `latency-fifo`: the same at one thread per core under `SCHED_FIFO`, where the process
//!   may use it (else left out, and the report says why): the allocator's own tail with the
//!   scheduler's time slices taken out;
//! * [`progress`]: what wait-freedom promises, measured directly: one worker at a time is
//!   frozen for milliseconds *inside* an allocator call, and the others either go on or wait
//!   for it.
//!
//! [`report`] lays the suite out (tails in scaled units, the floor beside them, percentile
//! distributions and the progress verdicts); [`sched`] is the policy.

use core::time::Duration;
use std::time::Instant;

use alloclab_core::HostAllocator;
use hdrhistogram::Histogram;

use super::{Outcome, Params, WorkloadInfo};
use crate::metrics::{CLOCK_READ_METRIC, LINE_ROUND_TRIP_METRIC, TIMER_OVERHEAD_METRIC};
use crate::peers::Capability;
use crate::results::{Sample, sample};

pub mod latency;
pub mod progress;
pub mod report;
pub mod sched;

pub use latency::{Latencies, measure};
pub use sched::Sched;

/// Largest latency a histogram tells apart (60 s); longer ones are recorded as this.
pub const HIGHEST_NS: u64 = 60_000_000_000;
/// Significant digits of every histogram.
const SIGNIFICANT_DIGITS: u8 = 3;

/// The suite's name.
pub const SUITE: &str = "realtime";

/// Runs per measurement when `--runs` is not given: each run times millions of calls (about
/// 2 s at 4x the cores on 2 cores), so three runs give a median and a spread while the
/// default suite stays within its time.
pub const DEFAULT_RUNS: u32 = 3;

/// Runs of the `progress` workload when `--runs` is not given: one run holds the
/// [`FREEZES`](progress::FREEZES) freezes its check is stated for (each run takes that many
/// 20 ms freezes, about 5 s per allocator), and its figures are counts and maxima over
/// them, not medians of runs.
pub const PROGRESS_DEFAULT_RUNS: u32 = 1;

/// The registry entries of the `realtime` suite.
pub const WORKLOADS: &[WorkloadInfo] = &[
    WorkloadInfo {
        suite: SUITE,
        name: "latency",
        description: "per-call alloc and free latency (p50 .. p99.999, max) and the floor, random 16 B-16 KiB, 20% remote frees",
        requires: Capability::HostHeap,
        default_threads: super::oversubscribed,
    },
    WorkloadInfo {
        suite: SUITE,
        name: "latency-fifo",
        description: "the latency workload under SCHED_FIFO, one thread per core (needs root, CAP_SYS_NICE or RLIMIT_RTPRIO)",
        requires: Capability::HostHeap,
        default_threads: super::one_per_core,
    },
    WorkloadInfo {
        suite: SUITE,
        name: "progress",
        description: "one worker frozen inside an allocator call at a time: how often the others wait for it",
        requires: Capability::HostHeap,
        default_threads: super::one_per_core,
    },
];

/// The workloads of the `realtime` suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RealtimeWorkload {
    /// Per-operation latency of allocation and free, under the policy `--sched` asks for;
    /// see [`latency`].
    Latency,
    /// The same, always under `SCHED_FIFO`; see [`latency`].
    LatencyFifo,
    /// Whether the other threads go on while one is frozen inside a call; see [`progress`].
    Progress,
}

impl RealtimeWorkload {
    /// Every workload of the suite, in registry order.
    pub const ALL: [RealtimeWorkload; 3] = [Self::Latency, Self::LatencyFifo, Self::Progress];

    /// The workload's registry name.
    pub fn name(self) -> &'static str {
        WORKLOADS[self as usize].name
    }

    /// Looks a workload up by registry name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == name)
    }

    /// The policy a worker process puts its threads under for this workload, when the
    /// command line asked for `asked`: `latency` takes what was asked, `latency-fifo` is
    /// `SCHED_FIFO` whatever was asked, and `progress` runs under the default policy (its
    /// controller must get a core while the workers spin; see [`progress`]).
    pub fn policy(self, asked: Sched) -> Sched {
        match self {
            Self::Latency => asked,
            Self::LatencyFifo => Sched::Fifo,
            Self::Progress => Sched::Other,
        }
    }

    /// Runs the workload once against `alloc` and reports its metrics, with the
    /// allocator's step counters read after the run.
    ///
    /// # Panics
    ///
    /// If the allocator fails an allocation, or (`progress`) a worker cannot be frozen.
    pub fn run<A: HostAllocator>(self, alloc: &A, params: &Params) -> Outcome {
        match self {
            Self::Latency | Self::LatencyFifo => {
                // The machine's state beside the tails: a remote free waits for lines the
                // other core wrote, and how long that takes moves with where the host runs
                // the vCPUs.
                let round_trip = crate::machine::line_round_trip_ns();
                let latencies = latency::measure(alloc, params);
                let mut samples = latencies.samples(&alloc.stats());
                if let Some(ns) = round_trip {
                    samples.push(sample(LINE_ROUND_TRIP_METRIC, "ns", ns, true));
                }
                Outcome {
                    samples,
                    min_sample: latencies.shortest(),
                    times_single_operations: true,
                }
            }
            Self::Progress => {
                let config = progress::Config::at(params.scale);
                let report = progress::measure(alloc, params, &config)
                    .unwrap_or_else(|e| panic!("progress: {e}"));
                Outcome {
                    samples: report.samples(),
                    // Calls are timed one by one, but against a freeze of milliseconds: the
                    // clock's share is not the figure's concern.
                    min_sample: Duration::ZERO,
                    times_single_operations: false,
                }
            }
        }
    }
}

/// Why `name` cannot run here, if it cannot: `latency-fifo` where the process may not use
/// `SCHED_FIFO`.
pub fn unavailable(name: &str) -> Option<String> {
    (name == RealtimeWorkload::LatencyFifo.name())
        .then(fifo_refusal)
        .flatten()
}

/// Why this process may not put threads under `SCHED_FIFO` (tried in a thread of its own,
/// so the caller's policy stays as it is), with what would allow it; `None` if it may.
pub fn fifo_refusal() -> Option<String> {
    let refused = std::thread::scope(|s| s.spawn(|| Sched::Fifo.enter().err()).join())
        .unwrap_or_else(|_| Some(std::io::Error::other("the probe thread panicked")))?;
    Some(format!(
        "SCHED_FIFO is not permitted here ({refused}); run as root, or with CAP_SYS_NICE or \
         an RLIMIT_RTPRIO of at least 1"
    ))
}

/// The percentiles reported, with their metric suffixes.
pub const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 0.5),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("p99.99", 0.9999),
    ("p99.999", 0.99999),
];

/// An empty histogram of single-call latencies, in ns, as every suite that times calls
/// one by one keeps them: 1 ns to [`HIGHEST_NS`], [`SIGNIFICANT_DIGITS`] digits.
pub(crate) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_NS, SIGNIFICANT_DIGITS).expect("valid histogram bounds")
}

/// The shortest call recorded in any of `histograms`, in ns (0 if all are empty): for the
/// timer-overhead figure.
pub(crate) fn shortest_ns(histograms: &[&Histogram<u64>]) -> u64 {
    histograms
        .iter()
        .filter(|h| !h.is_empty())
        .map(|h| h.min())
        .min()
        .unwrap_or(0)
}

/// The clock-read and timer-overhead samples of a workload that times single calls: the
/// clock read in ns, and two clock reads as a share of the shortest call timed (`shortest`
/// ns, at least 1).
pub(crate) fn timer_samples(clock_read_ns: f64, shortest: u64) -> [Sample; 2] {
    [
        sample(CLOCK_READ_METRIC, "ns", clock_read_ns, true),
        sample(
            TIMER_OVERHEAD_METRIC,
            "%",
            2.0 * clock_read_ns / shortest.max(1) as f64 * 100.0,
            true,
        ),
    ]
}

/// Nanoseconds from `start` to `end` (0 if `end` is earlier), saturating at `u64::MAX`.
pub(crate) fn nanos_between(start: Instant, end: Instant) -> u64 {
    u64::try_from(end.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_finds_every_workload() {
        for w in RealtimeWorkload::ALL {
            assert_eq!(RealtimeWorkload::from_name(w.name()), Some(w));
            assert_eq!(WORKLOADS[w as usize].suite, SUITE);
        }
        assert_eq!(RealtimeWorkload::Latency.name(), "latency");
        assert_eq!(RealtimeWorkload::from_name("lat"), None);
    }

    #[test]
    fn each_workload_has_its_policy() {
        for asked in [Sched::Fifo, Sched::Other] {
            assert_eq!(RealtimeWorkload::Latency.policy(asked), asked);
            assert_eq!(RealtimeWorkload::LatencyFifo.policy(asked), Sched::Fifo);
            assert_eq!(RealtimeWorkload::Progress.policy(asked), Sched::Other);
        }
        // Only the SCHED_FIFO workload can be unavailable, and then it says why.
        assert_eq!(unavailable("latency"), None);
        assert_eq!(unavailable("progress"), None);
        match unavailable("latency-fifo") {
            Some(why) => assert!(why.contains("CAP_SYS_NICE"), "{why}"),
            None => assert_eq!(fifo_refusal(), None),
        }
    }
}
