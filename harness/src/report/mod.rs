//! `report.md`, the SVG charts and the README's results section, made from a
//! [`ResultsFile`].
//!
//! * [`render_markdown`]: the body of `report.md` — header, one table per workload, one
//!   geometric-mean summary per suite and a timer-overhead note.
//! * [`render_readme_section`]: the shorter version that goes between the README's
//!   [`README_BEGIN`] and [`README_END`] markers (see [`update_readme`]).
//! * [`write_chart_svg`]: one bar chart per workload.
//! * [`write_report`]: the whole report directory (`results.json`, `report.md`, charts).
//!
//! Every file is written atomically: into a temporary file in the same directory, then
//! renamed over the target, so a failure never leaves a half-written file behind.
//!
//! Nothing here depends on the metric names of a particular suite, except that
//! [`METRIC_ORDER`] puts the known metrics first, [`HEADLINE_METRICS`] picks the chart
//! panels of a workload with many metrics, and the two [`QUALIFIER_METRICS`] — they describe
//! the measurement, not the allocator — get notes instead of comparison columns:
//! [`TIMER_OVERHEAD_METRIC`] feeds the timer-overhead section, [`CLOCK_READ_METRIC`] (reported
//! by workloads that time single operations) a note under the workload's table.
//!
//! Many metrics (the `realtime` suite has a dozen) are kept readable by two small rules:
//!
//! * **Tables.** A workload or summary table with more than [`MAX_METRICS_PER_TABLE`]
//!   metrics is split into one table per metric family — the metrics that share the name
//!   before their first `_` (`alloc_p50` … `alloc_max_steps`) — and one table of the metrics
//!   that have no family.
//! * **Charts, and the README's summary.** Where there are more than [`MAX_CHART_PANELS`]
//!   metrics, only the first [`MAX_CHART_PANELS`] in [`HEADLINE_METRICS`] order are drawn
//!   (or summarised): for `realtime`, the p99.999 and the max of alloc and free.
//!
//! **Sweeps.** A metric named `<base>@<x>` ([`SWEEP_SEPARATOR`]) is one point of a sweep of
//! `<base>` over a parameter `x` (the `hls` suite sweeps the heap size). Sweep points get no
//! comparison columns or bars: each workload that has them gets a table (one row per `x`)
//! and a line chart, `<suite>-<workload>-sweep.svg`, one panel per base metric.
//!
//! Output is deterministic: suites follow `parameters.suites`,
//! allocators follow `parameters.allocators` (the first that ran a suite is the baseline of
//! that suite's ratios),
//! anything else is sorted by name, workloads are sorted by name and thread counts
//! ascending.

mod charts;
mod error;
mod files;
mod format;
mod markdown;
mod readme;
mod sweeps;
#[cfg(test)]
mod tests;
mod view;

pub use charts::*;
pub use error::*;
pub use files::*;
pub use format::*;
pub use markdown::*;
pub use readme::*;
pub use sweeps::*;
pub use view::*;

/// The line that opens the results section of the README.
pub const README_BEGIN: &str = "<!-- alloclab:results:begin -->";
/// The line that closes the results section of the README.
pub const README_END: &str = "<!-- alloclab:results:end -->";
/// The metric that measures the share of a timed sample spent reading the clock, in %.
pub const TIMER_OVERHEAD_METRIC: &str = "timer_overhead";
/// A `timer_overhead` median above this many percent makes the report warn, except for
/// workloads that time single operations (they report [`CLOCK_READ_METRIC`]), where it is
/// large by design.
pub const TIMER_OVERHEAD_WARN_PERCENT: f64 = 5.0;
/// The metric that reports the cost of one clock read, in ns, for workloads that time each
/// operation on its own: every figure of theirs contains about one, not subtracted.
pub const CLOCK_READ_METRIC: &str = "clock_read";
/// The metric of the `realtime` suite that says which share of a run's threads ran under
/// `SCHED_FIFO` (1: all, 0: none; see `workloads::realtime::Sched`).
pub const SCHED_FIFO_METRIC: &str = "sched_fifo";
/// Metrics that describe the measurement rather than the allocator: no comparison column,
/// chart panel or mean, but notes of their own.
pub const QUALIFIER_METRICS: &[&str] = &[
    TIMER_OVERHEAD_METRIC,
    CLOCK_READ_METRIC,
    SCHED_FIFO_METRIC,
    crate::workloads::programs::RESULT_DIGEST_METRIC,
];
/// Metrics listed first, in this order (percentiles ascending, so that a row reads from the
/// median to the worst case); any other metric follows, sorted by name.
pub const METRIC_ORDER: &[&str] = &[
    "time",
    "alloc_p50",
    "alloc_p99",
    "alloc_p99.9",
    "alloc_p99.99",
    "alloc_p99.999",
    "alloc_max",
    "alloc_max_steps",
    "free_p50",
    "free_p99",
    "free_p99.9",
    "free_p99.99",
    "free_p99.999",
    "free_max",
    "free_max_steps",
    "remote_free_p99.999",
    "remote_free_max",
    "peak_footprint",
    "failures_total",
    "failures_capacity",
    "failures_fragmentation",
    "failures_rate",
    "heap_reference",
    "heap_zero_failures",
    "cycles_alloc",
    "cycles_free",
    "cycles_defrag_mean",
    "cycles_defrag_max",
    "kernels_per_mcycle",
    "ops_per_s",
    "flushes_per_op",
    "fences_per_op",
    "recovery_ms",
    "recovery_first_alloc_ms",
    CLOCK_READ_METRIC,
    TIMER_OVERHEAD_METRIC,
    SCHED_FIFO_METRIC,
];
/// The metrics a chart (and the README's summary) shows first, in this order, when there are
/// more than [`MAX_CHART_PANELS`]; any other metric follows in [`METRIC_ORDER`].
pub const HEADLINE_METRICS: &[&str] = &[
    "time",
    "alloc_p99.999",
    "alloc_max",
    "free_p99.999",
    "free_max",
    "peak_footprint",
    "failures_total",
    "failures_fragmentation",
    "heap_zero_failures",
    "kernels_per_mcycle",
    "ops_per_s",
    "alloc_p99.9",
    "flushes_per_op",
    "recovery_ms",
];
/// The most panels a chart has (and columns the README's summary table has).
pub const MAX_CHART_PANELS: usize = 4;
/// The most metrics a table of `report.md` has before it is split by metric family.
pub const MAX_METRICS_PER_TABLE: usize = 4;
/// Suites whose workloads are shown one metric per row and one allocator per column (the
/// median, with min–max where the runs differ; no ratios): their many metrics are
/// probabilities, bits and verdicts, which read across allocators better than down, and
/// whose ratios mean little (a ratio to 0 bits). No geometric mean is taken for them.
pub const TRANSPOSED_SUITES: &[&str] = &["security"];
/// Suites whose README summary is each workload's table of values (with the ratios beside
/// them), not a geometric mean of ratios: `gpu`, whose baseline (the queue) lacks some
/// headline metrics and whose figures (probes, % error against a closed form) mean most as
/// values; `training`, whose workloads measure different things (a model's bytes, a
/// planner's savings).
pub const VALUE_SUITES: &[&str] = &["gpu", "training"];
/// The metrics of a [`TRANSPOSED_SUITES`] suite that the README's results section shows.
pub const TRANSPOSED_README_METRICS: &[&str] = &[
    "entropy_fresh_64",
    "entropy_steady_64",
    "entropy_steady_1024",
    "reuse_same_64",
    "distance_median_64",
    "overflow_64B_k8",
    "caught",
    "silent",
];

/// What separates a sweep metric's base name from its parameter (`failures_total@8064`).
pub const SWEEP_SEPARATOR: char = '@';

/// The (base metric, parameter) of a sweep point such as `failures_total@8064`; `None` for
/// any other metric.
pub fn sweep_point(metric: &str) -> Option<(&str, f64)> {
    let (base, x) = metric.split_once(SWEEP_SEPARATOR)?;
    x.parse().ok().map(|x| (base, x))
}

/// What the parameter of each suite's sweeps is, for table headers and chart axes.
/// A workload's own entry comes before its suite's.
pub const SWEEP_PARAMETERS: &[(&str, &str)] = &[
    ("hls", "heap size per heap (B)"),
    ("gpu-free-fraction", "free fraction A/T (%)"),
    ("gpu-sizes", "request size (B)"),
    ("gpu-threads", "requesting threads"),
    ("training-growing-batch", "batch size"),
    ("training-delta", "share of the iteration (%)"),
];

/// The suite whose records get their own layout (must-reach checks, a table and a chart
/// per mix, a time-split chart, a recovery table; see
/// [`workloads::storage::report`](crate::workloads::storage::report)) instead of a table
/// and a chart per workload.
pub const STORAGE_SUITE: &str = "storage";
/// The programs suite's name: its ratios are all to `system` (nothing preloaded), and it
/// has a summary of its own ([`workloads::programs::report`](crate::workloads::programs::report)).
pub const PROGRAMS_SUITE: &str = crate::workloads::programs::SUITE;

/// Placeholder for a value that does not exist.
const NONE: &str = "—";
