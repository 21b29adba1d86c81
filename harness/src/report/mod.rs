//! `report.md`, the SVG charts and the README's results section, made from a
//! [`ResultsFile`](crate::results::ResultsFile).
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
//! The report names no suite: what a suite shows beside or instead of the plain tables and
//! charts, and the targets the report opens with, come in a [`ReportLayout`] that the caller
//! passes (the harness's is `workloads::layouts::LAYOUT`); with [`ReportLayout::PLAIN`] every
//! suite is laid out alike. The modules: `view` indexes the records, `format`
//! formats values and cells, `markdown` writes `report.md`, `readme` the README section,
//! `charts` and `sweeps` the SVG charts, `files` the directory, `layout` the hooks.
//!
//! Metric names come from [`crate::metrics`]: [`METRIC_ORDER`] puts the known metrics first, [`HEADLINE_METRICS`] picks the chart
//! panels of a workload with many metrics, and the [`QUALIFIER_METRICS`] — they describe
//! the measurement, not the allocator — get notes instead of comparison columns:
//! [`TIMER_OVERHEAD_METRIC`] feeds the timer-overhead section, [`CLOCK_READ_METRIC`] (reported
//! by workloads that time single operations) a note under the workload's table, with the
//! scheduling policy ([`SCHED_FIFO_METRIC`]) where the runs report it; the `realtime`
//! suite's tables say the machine's cache-line round trip ([`LINE_ROUND_TRIP_METRIC`]).
//!
//! Many metrics (a latency workload has a dozen) are kept readable by two small rules:
//!
//! * **Tables.** A workload or summary table with more than [`MAX_METRICS_PER_TABLE`]
//!   metrics is split into one table per metric family — the metrics that share the name
//!   before their first `_` (`alloc_p50` … `alloc_max_steps`) — and one table of the metrics
//!   that have no family.
//! * **Charts, and the README's summary.** Where there are more than [`MAX_CHART_PANELS`]
//!   metrics, only the first [`MAX_CHART_PANELS`] in [`HEADLINE_METRICS`] order are drawn
//!   (or summarised): for a latency workload, the p99.999 and the max of alloc and free.
//!
//! **Sweeps.** A metric named `<base>@<x>` ([`SWEEP_SEPARATOR`]) is one point of a sweep of
//! `<base>` over a parameter `x` (a heap size, a thread count), named by the suite's layout. Sweep points get no
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
mod layout;
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
pub use layout::*;
pub use markdown::*;
pub use readme::*;
pub use sweeps::*;
pub use view::*;

pub use crate::metrics::{
    CLOCK_READ_METRIC, HEADLINE_METRICS, LINE_ROUND_TRIP_METRIC, METRIC_ORDER, QUALIFIER_METRICS,
    SCHED_FIFO_METRIC, SWEEP_SEPARATOR, TIMER_OVERHEAD_METRIC, sweep_point,
};

/// The line that opens the results section of the README.
pub const README_BEGIN: &str = "<!-- alloclab:results:begin -->";
/// The line that closes the results section of the README.
pub const README_END: &str = "<!-- alloclab:results:end -->";
/// A `timer_overhead` median above this many percent makes the report warn, except for
/// workloads that time single operations (they report [`CLOCK_READ_METRIC`]), where it is
/// large by design.
pub const TIMER_OVERHEAD_WARN_PERCENT: f64 = 5.0;
/// The most panels a chart has (and columns the README's summary table has).
pub const MAX_CHART_PANELS: usize = 4;
/// The most metrics a table of `report.md` has before it is split by metric family.
pub const MAX_METRICS_PER_TABLE: usize = 4;

/// Placeholder for a value that does not exist.
const NONE: &str = "—";
