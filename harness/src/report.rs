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

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt::{self, Write as _};
use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;

use crate::results::{Record, ResultsFile};

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

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// Why a report, chart or README could not be written. Every message is one line and
/// names the file concerned.
#[derive(Debug)]
pub enum ReportError {
    /// A file or directory could not be read, written or created.
    Io {
        /// What was being done: `"write"`, `"read"`, `"create directory"`.
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The results could not be serialised to JSON.
    Json {
        /// The file that was to be written.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// A chart could not be drawn.
    Chart {
        /// The SVG file that was to be written.
        path: PathBuf,
        /// What went wrong, on one line.
        message: String,
    },
    /// The README lacks the [`README_BEGIN`]/[`README_END`] marker lines, has one of them
    /// more than once, or has them out of order.
    MissingMarkers {
        /// The README.
        path: PathBuf,
        /// What is wrong with the markers.
        problem: String,
    },
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Io {
                action,
                path,
                source,
            } => write!(
                f,
                "cannot {action} {}: {}",
                path.display(),
                one_line(&source.to_string())
            ),
            ReportError::Json { path, source } => write!(
                f,
                "cannot serialise results for {}: {}",
                path.display(),
                one_line(&source.to_string())
            ),
            ReportError::Chart { path, message } => {
                write!(
                    f,
                    "cannot draw chart {}: {}",
                    path.display(),
                    one_line(message)
                )
            }
            ReportError::MissingMarkers { path, problem } => {
                write!(f, "cannot update {}: {}", path.display(), one_line(problem))
            }
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReportError::Io { source, .. } => Some(source),
            ReportError::Json { source, .. } => Some(source),
            ReportError::Chart { .. } | ReportError::MissingMarkers { .. } => None,
        }
    }
}

/// Joins the lines of `s` with spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------
// Indexing the records
// ---------------------------------------------------------------------------------------

/// (suite, workload, allocator, threads, metric).
type Key<'a> = (&'a str, &'a str, &'a str, usize, &'a str);

/// What a table needs to know about a metric.
#[derive(Clone, Debug)]
struct MetricInfo<'a> {
    name: &'a str,
    unit: &'a str,
    lower_is_better: bool,
}

/// The records of a file, indexed, with the orders the report uses.
pub(crate) struct View<'a> {
    results: &'a ResultsFile,
    /// The first record of each key (later duplicates are ignored).
    map: BTreeMap<Key<'a>, &'a Record>,
    /// `parameters.allocators`, then any other allocator of the records, by name.
    allocators: Vec<&'a str>,
    /// The allocator every ratio of a suite divides by: the first of `allocators` with
    /// records in that suite.
    baselines: BTreeMap<&'a str, &'a str>,
    /// `parameters.suites` that have records, then any other suite, by name.
    suites: Vec<&'a str>,
}

impl<'a> View<'a> {
    pub(crate) fn new(results: &'a ResultsFile) -> Self {
        let mut map = BTreeMap::new();
        for r in &results.records {
            map.entry((
                r.suite.as_str(),
                r.workload.as_str(),
                r.allocator.as_str(),
                r.threads,
                r.metric.as_str(),
            ))
            .or_insert(r);
        }
        let params = &results.header.parameters;
        let in_records: BTreeSet<&str> = results
            .records
            .iter()
            .map(|r| r.allocator.as_str())
            .collect();
        let mut allocators: Vec<&str> = Vec::new();
        for a in params
            .allocators
            .iter()
            .map(String::as_str)
            .chain(in_records)
        {
            if !allocators.contains(&a) {
                allocators.push(a);
            }
        }
        let mut baselines = BTreeMap::new();
        for r in &results.records {
            let rank = |a: &str| allocators.iter().position(|x| *x == a);
            let best = baselines
                .entry(r.suite.as_str())
                .or_insert(r.allocator.as_str());
            if rank(&r.allocator) < rank(best) {
                *best = r.allocator.as_str();
            }
        }
        // A program's ratios are to the heap it has without a preload, whatever came first.
        if results
            .records
            .iter()
            .any(|r| r.suite == PROGRAMS_SUITE && r.allocator == "system")
        {
            baselines.insert(PROGRAMS_SUITE, "system");
        }
        let suites_in_records: BTreeSet<&str> =
            results.records.iter().map(|r| r.suite.as_str()).collect();
        let mut suites: Vec<&str> = Vec::new();
        for s in params.suites.iter().map(String::as_str) {
            if suites_in_records.contains(s) && !suites.contains(&s) {
                suites.push(s);
            }
        }
        for s in suites_in_records {
            if !suites.contains(&s) {
                suites.push(s);
            }
        }
        View {
            results,
            map,
            allocators,
            baselines,
            suites,
        }
    }

    /// The records of `suite`, and of `workload` if given.
    fn records_in<'s>(
        &'s self,
        suite: &'s str,
        workload: Option<&'s str>,
    ) -> impl Iterator<Item = &'a Record> + 's {
        self.results
            .records
            .iter()
            .filter(move |r| r.suite == suite && workload.is_none_or(|w| r.workload == w))
    }

    /// The record of (suite, workload, allocator, threads, metric), if any.
    pub(crate) fn get(
        &self,
        suite: &str,
        workload: &str,
        allocator: &str,
        threads: usize,
        metric: &str,
    ) -> Option<&'a Record> {
        self.map
            .get(&(suite, workload, allocator, threads, metric))
            .copied()
    }

    /// The workloads of `suite`, by name.
    pub(crate) fn workloads(&self, suite: &str) -> Vec<&'a str> {
        let set: BTreeSet<&str> = self
            .records_in(suite, None)
            .map(|r| r.workload.as_str())
            .collect();
        set.into_iter().collect()
    }

    /// The allocators with records in `suite` (and `workload`), in report order.
    pub(crate) fn allocators_in(&self, suite: &str, workload: Option<&str>) -> Vec<&'a str> {
        let set: BTreeSet<&str> = self
            .records_in(suite, workload)
            .map(|r| r.allocator.as_str())
            .collect();
        self.allocators
            .iter()
            .copied()
            .filter(|a| set.contains(a))
            .collect()
    }

    /// The thread counts with records in `suite` (and `workload`), ascending.
    pub(crate) fn threads_in(&self, suite: &str, workload: Option<&str>) -> Vec<usize> {
        let set: BTreeSet<usize> = self
            .records_in(suite, workload)
            .map(|r| r.threads)
            .collect();
        set.into_iter().collect()
    }

    /// The metrics with records in `suite` (and `workload`), in [`METRIC_ORDER`] then by
    /// name; unit and direction are those of the metric's first record.
    fn metrics_in(&self, suite: &str, workload: Option<&str>) -> Vec<MetricInfo<'a>> {
        let mut metrics: Vec<MetricInfo<'a>> = Vec::new();
        // Timer overhead and clock cost qualify the measurement rather than the allocator:
        // they get notes of their own, not comparison columns or chart panels.
        for r in self
            .records_in(suite, workload)
            .filter(|r| !QUALIFIER_METRICS.contains(&r.metric.as_str()))
            .filter(|r| sweep_point(&r.metric).is_none())
        {
            if !metrics.iter().any(|m| m.name == r.metric) {
                metrics.push(MetricInfo {
                    name: &r.metric,
                    unit: &r.unit,
                    lower_is_better: r.lower_is_better,
                });
            }
        }
        metrics.sort_by_key(|m| metric_rank(m.name));
        metrics
    }

    /// Median of `allocator` divided by the median of the baseline, same workload, thread
    /// count and metric; `None` if either is missing or the quotient is not finite.
    fn ratio(
        &self,
        suite: &str,
        workload: &str,
        allocator: &str,
        threads: usize,
        metric: &str,
    ) -> Option<f64> {
        let base = self.get(suite, workload, self.baseline(suite)?, threads, metric)?;
        let this = self.get(suite, workload, allocator, threads, metric)?;
        ratio_of(this.median, base.median)
    }

    /// Geometric mean over the workloads of `suite` of the ratio of `allocator` to the
    /// baseline for `metric` at `threads`. Returns the mean (if any ratio was positive) and
    /// (workloads that contributed, workloads that have the metric at that thread count).
    fn geomean(
        &self,
        suite: &str,
        allocator: &str,
        threads: usize,
        metric: &str,
    ) -> (Option<f64>, usize, usize) {
        let mut logs = Vec::new();
        let mut total = 0;
        for w in self.workloads(suite) {
            let has_metric = self
                .allocators
                .iter()
                .any(|a| self.get(suite, w, a, threads, metric).is_some());
            if !has_metric {
                continue;
            }
            total += 1;
            if let Some(r) = self.ratio(suite, w, allocator, threads, metric)
                && r > 0.0
            {
                logs.push(r.ln());
            }
        }
        (geometric_mean_of_logs(&logs), logs.len(), total)
    }

    /// The allocator the ratios of `suite` divide by.
    fn baseline(&self, suite: &str) -> Option<&'a str> {
        self.baselines.get(suite).copied()
    }

    /// The header name of the ratio columns of `suite`.
    fn ratio_header(&self, suite: &str) -> String {
        format!("× {}", self.baseline(suite).unwrap_or("first"))
    }
}

/// Sort key of a metric: its position in [`METRIC_ORDER`], then its name.
fn metric_rank(name: &str) -> (usize, &str) {
    (
        METRIC_ORDER
            .iter()
            .position(|m| *m == name)
            .unwrap_or(METRIC_ORDER.len()),
        name,
    )
}

/// At most [`MAX_CHART_PANELS`] of `metrics` (which are in [`METRIC_ORDER`]): all of them
/// if they are that few, else the first in [`HEADLINE_METRICS`] order.
fn headline<'a>(mut metrics: Vec<MetricInfo<'a>>) -> Vec<MetricInfo<'a>> {
    if metrics.len() > MAX_CHART_PANELS {
        // Stable: metrics outside HEADLINE_METRICS keep their METRIC_ORDER.
        metrics.sort_by_key(|m| {
            HEADLINE_METRICS
                .iter()
                .position(|h| *h == m.name)
                .unwrap_or(HEADLINE_METRICS.len())
        });
        metrics.truncate(MAX_CHART_PANELS);
    }
    metrics
}

/// The family of a metric: its name up to the first `_` (`alloc` for `alloc_p99.9`).
fn family(metric: &str) -> &str {
    metric.split_once('_').map_or(metric, |(family, _)| family)
}

/// `metrics` split into the tables of `report.md`; see [`split_into_tables`].
fn metric_tables<'a>(metrics: &[MetricInfo<'a>]) -> Vec<(Option<String>, Vec<MetricInfo<'a>>)> {
    split_into_tables(metrics.to_vec(), |m| m.name)
}

/// Splits a workload's metrics (`items`, named by `name`, in report order) into tables: one
/// untitled table of all of them if they are at most [`MAX_METRICS_PER_TABLE`]; else one
/// table per family of two or more metrics, titled `` `family_…` ``, in order of first
/// appearance, then one titled `other metrics` of those without a family. Order within a
/// table is kept.
pub fn split_into_tables<T>(
    items: Vec<T>,
    name: impl Fn(&T) -> &str,
) -> Vec<(Option<String>, Vec<T>)> {
    if items.len() <= MAX_METRICS_PER_TABLE {
        return vec![(None, items)];
    }
    let mut families: Vec<(String, Vec<T>)> = Vec::new();
    for item in items {
        let f = family(name(&item)).to_owned();
        match families.iter_mut().find(|(g, _)| *g == f) {
            Some((_, members)) => members.push(item),
            None => families.push((f, vec![item])),
        }
    }
    let mut tables = Vec::new();
    let mut rest = Vec::new();
    for (f, members) in families {
        if members.len() > 1 {
            tables.push((Some(format!("`{f}_…`")), members));
        } else {
            rest.extend(members);
        }
    }
    if !rest.is_empty() {
        tables.push((Some("other metrics".to_owned()), rest));
    }
    tables
}

/// `value / base`, if finite and `base` is not zero.
fn ratio_of(value: f64, base: f64) -> Option<f64> {
    let r = value / base;
    (base != 0.0 && r.is_finite()).then_some(r)
}

fn geometric_mean_of_logs(logs: &[f64]) -> Option<f64> {
    (!logs.is_empty()).then(|| (logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// The geometric mean of the positive, finite values of `values`; `None` if there is none.
pub fn geometric_mean(values: &[f64]) -> Option<f64> {
    let logs: Vec<f64> = values
        .iter()
        .filter(|v| **v > 0.0 && v.is_finite())
        .map(|v| v.ln())
        .collect();
    geometric_mean_of_logs(&logs)
}

/// Whether `value` is the best of `values` (all finite) in the metric's direction, and
/// there is more than one value to compare.
fn is_best(value: f64, values: &[f64], lower_is_better: bool) -> bool {
    if values.len() < 2 || !value.is_finite() {
        return false;
    }
    let best = if lower_is_better {
        values.iter().copied().fold(f64::INFINITY, f64::min)
    } else {
        values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    };
    value == best
}

// ---------------------------------------------------------------------------------------
// Formatting helpers
// ---------------------------------------------------------------------------------------

/// A measured value with about three or four significant digits.
pub fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 1e-4 {
        // Three significant digits.
        let decimals = (2 - a.log10().floor() as i32).max(0) as usize;
        format!("{v:.decimals$}")
    } else {
        format!("{v:.2e}")
    }
}

/// An axis tick: [`fmt_value`] without trailing zeros after the decimal point.
pub(crate) fn fmt_tick(v: f64) -> String {
    let s = fmt_value(v);
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// A ratio, two decimals, or `—`.
fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| NONE.to_owned(), |r| format!("{r:.2}"))
}

/// `median (min–max) unit`, the median in bold if `bold`.
fn fmt_cell(r: &Record, bold: bool) -> String {
    let median = fmt_value(r.median);
    let median = if bold {
        format!("**{median}**")
    } else {
        median
    };
    let unit = if r.unit.is_empty() {
        String::new()
    } else {
        format!(" {}", escape_cell(&r.unit))
    };
    format!("{median} ({}–{}){unit}", fmt_value(r.min), fmt_value(r.max))
}

/// Text safe inside a Markdown table cell.
pub(crate) fn escape_cell(s: &str) -> String {
    one_line(&s.replace('|', "\\|"))
}

/// A Markdown code span containing `s` verbatim.
fn code_span(s: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// One Markdown table row.
pub(crate) fn table_row(out: &mut String, cells: &[String]) {
    out.push('|');
    for c in cells {
        out.push(' ');
        out.push_str(c);
        out.push_str(" |");
    }
    out.push('\n');
}

/// The header and alignment rows of a table; the first `left` columns are left-aligned,
/// the others right-aligned.
pub(crate) fn table_header(out: &mut String, headers: &[String], left: usize) {
    table_row(out, headers);
    let align: Vec<String> = (0..headers.len())
        .map(|i| if i < left { "---" } else { "--:" }.to_owned())
        .collect();
    table_row(out, &align);
}

/// `2026-11-30 12:34:56 UTC` for seconds since the Unix epoch.
pub fn format_utc(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// (year, month, day) of a day count since 1970-01-01 (proleptic Gregorian calendar;
/// Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Bytes as GiB with one decimal.
fn fmt_gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// `1 run`, `2 runs`.
fn plural(count: u64, noun: &str) -> String {
    format!("{count} {noun}{}", if count == 1 { "" } else { "s" })
}

/// `1 thread`, `2 threads`.
fn fmt_thread_count(threads: usize) -> String {
    plural(threads as u64, "thread")
}

fn fmt_threads(threads: &[usize]) -> String {
    if threads.is_empty() {
        return NONE.to_owned();
    }
    threads
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The file name of the chart of one workload: `<suite>-<workload>.svg`, with any
/// character other than ASCII letters, digits, `.`, `_` and `-` replaced by `_`.
pub fn chart_file_name(suite: &str, workload: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("{}-{}.svg", clean(suite), clean(workload))
}

// ---------------------------------------------------------------------------------------
// Markdown
// ---------------------------------------------------------------------------------------

/// The body of `report.md`: a header (machine, commit, date, command, parameters, timer
/// overhead); per suite and workload, a table with one row per thread count and allocator,
/// a `median (min–max) unit` column and a ratio-to-baseline column per metric, the best
/// median per metric and thread count in bold (split by metric family where there are
/// many metrics), a note on the clock read inside the figures of a workload that times
/// single operations, and a link to the workload's chart; per suite of several workloads,
/// the geometric mean over workloads of each ratio; and a timer-overhead note that warns about every record whose
/// `timer_overhead` median exceeds [`TIMER_OVERHEAD_WARN_PERCENT`], except for workloads
/// that time single operations.
pub fn render_markdown(results: &ResultsFile) -> String {
    let view = View::new(results);
    let mut out = String::new();
    out.push_str("# alloclab report\n\n");
    header_list(&mut out, results);
    out.push('\n');
    let baselines: Vec<&str> = view
        .suites
        .iter()
        .filter_map(|s| view.baseline(s))
        .collect();
    let baseline = if baselines.iter().all(|b| Some(b) == baselines.first()) {
        baselines.first().copied().unwrap_or(NONE).to_owned()
    } else {
        "the first allocator asked for that ran the suite".to_owned()
    };
    let _ = writeln!(
        out,
        "Each cell is the median over the runs, then (min–max) and the unit. **Bold** marks \
         the best median of each metric at each thread count. The “× A” columns divide a \
         median by the median of A ({baseline}; the first allocator asked for that ran the \
         suite) for the same workload and thread count; every figure comes from this one \
         run, so the ratios compare like with like. Charts: `<suite>-<workload>.svg` next \
         to this file."
    );
    crate::checks::markdown(&mut out, results, "##");

    for &suite in &view.suites {
        let baseline = view.baseline(suite).unwrap_or(NONE);
        let _ = writeln!(out, "\n## Suite `{suite}`");
        for note in results.notes.iter().filter(|n| n.suite == suite) {
            let _ = writeln!(out, "\n{}", note.text);
        }
        if suite == STORAGE_SUITE {
            crate::workloads::storage::report::markdown(&mut out, results);
            continue;
        }
        if suite == PROGRAMS_SUITE {
            crate::workloads::programs::report::markdown(&mut out, results);
        }
        for workload in view.workloads(suite) {
            let _ = writeln!(out, "\n### {suite}/{workload}");
            if TRANSPOSED_SUITES.contains(&suite) {
                out.push('\n');
                transposed_table(&mut out, &view, suite, workload, None);
                let _ = writeln!(
                    out,
                    "\n![{suite}/{workload}]({})",
                    chart_file_name(suite, workload)
                );
                continue;
            }
            let metrics = view.metrics_in(suite, Some(workload));
            for (title, metrics) in metric_tables(&metrics) {
                out.push('\n');
                if let Some(title) = title {
                    let _ = writeln!(out, "{title}:\n");
                }
                workload_table(&mut out, &view, suite, workload, &metrics);
            }
            if let Some(note) = clock_read_note(&view, suite, Some(workload)) {
                let _ = writeln!(out, "\n{note}");
            }
            let _ = writeln!(
                out,
                "\n![{suite}/{workload}]({})",
                chart_file_name(suite, workload)
            );
            sweep_section(&mut out, &view, suite, workload);
        }
        // The programs suite's means are in its summary above, over the programs every heap
        // ran, not over whichever programs report a metric.
        if suite == PROGRAMS_SUITE {
            continue;
        }
        // The training workloads measure different things: checks, not a mean of ratios.
        if suite == crate::workloads::training::SUITE {
            crate::workloads::training::must_reach(&mut out, results);
            continue;
        }
        if TRANSPOSED_SUITES.contains(&suite) {
            let _ = writeln!(
                out,
                "\nEach cell is the median over the runs (min–max where they differ); \
                 **bold** marks the best. No ratios and no mean: these figures are \
                 probabilities, bits and verdicts (`score`: 1 caught, 0.5 crashed, 0.25 hung, \
                 0 silent, shown as words), not times."
            );
            continue;
        }
        // A mean over one workload would repeat that workload's table.
        if let [only] = view.workloads(suite)[..] {
            let _ = writeln!(
                out,
                "\nThe suite has one workload, `{only}`: its table above is the suite's \
                 summary, and no mean is taken."
            );
            continue;
        }
        let _ = writeln!(
            out,
            "\n### Suite `{suite}`: geometric mean over workloads of the ratio to {baseline}"
        );
        let metrics = view.metrics_in(suite, None);
        for (title, metrics) in metric_tables(&metrics) {
            out.push('\n');
            if let Some(title) = title {
                let _ = writeln!(out, "{title}:\n");
            }
            summary_table(&mut out, &view, suite, &metrics);
        }
    }

    out.push_str("\n## Timer overhead\n\n");
    timer_overhead_note(&mut out, results);
    failures_section(&mut out, results);
    out
}

/// The measurements that could not be taken, if any.
fn failures_section(out: &mut String, results: &ResultsFile) {
    if results.failures.is_empty() {
        return;
    }
    out.push_str("\n## Failed measurements\n\n");
    out.push_str(
        "These measurements have no figures (or fewer runs than asked): the worker failed \
         and the measurement's later runs were skipped.\n\n",
    );
    table_header(
        out,
        &[
            "measurement".to_owned(),
            "threads".to_owned(),
            "run".to_owned(),
            "error".to_owned(),
        ],
        1,
    );
    for f in &results.failures {
        table_row(
            out,
            &[
                escape_cell(&format!("{}/{} on {}", f.suite, f.workload, f.allocator)),
                f.threads.to_string(),
                f.run.to_string(),
                escape_cell(&f.error),
            ],
        );
    }
}

/// The header of `report.md`, as a list.
fn header_list(out: &mut String, results: &ResultsFile) {
    let h = &results.header;
    let m = &h.machine;
    let p = &h.parameters;
    let kernel = if m.kernel.is_empty() {
        String::new()
    } else {
        format!(", kernel {}", m.kernel)
    };
    let _ = writeln!(
        out,
        "- **Machine:** {}, {} cores, {} memory ({} {}{kernel})",
        m.cpu_model,
        m.cores,
        fmt_gib(m.memory_bytes),
        m.os,
        m.arch
    );
    let _ = writeln!(
        out,
        "- **Commit:** {}{}",
        code_span(&h.commit),
        if h.commit_dirty { " (dirty)" } else { "" }
    );
    let _ = writeln!(out, "- **Date:** {}", format_utc(h.created_unix_s));
    let _ = writeln!(out, "- **Command:** {}", code_span(&h.command));
    let _ = writeln!(
        out,
        "- **Parameters:** scale {}, {}, threads {}, seed {}",
        p.scale,
        plural(u64::from(p.runs), "run"),
        fmt_threads(&p.threads),
        p.seed
    );
    let _ = writeln!(
        out,
        "- **Timer overhead:** {} ns per clock read",
        fmt_value(h.timer_overhead_ns)
    );
}

/// The one-line summary of machine, commit and parameters used by the README section.
fn header_line(results: &ResultsFile) -> String {
    let h = &results.header;
    let m = &h.machine;
    let p = &h.parameters;
    format!(
        "Measured on {} ({} cores, {}) at commit {}{} on {}: {} — scale {}, {}, \
         threads {}, seed {}; timer overhead {} ns per clock read.",
        m.cpu_model,
        m.cores,
        fmt_gib(m.memory_bytes),
        code_span(&h.commit),
        if h.commit_dirty { " (dirty)" } else { "" },
        format_utc(h.created_unix_s),
        code_span(&h.command),
        p.scale,
        plural(u64::from(p.runs), "run"),
        fmt_threads(&p.threads),
        p.seed,
        fmt_value(h.timer_overhead_ns)
    )
}

/// The table of `metrics` of one workload.
fn workload_table(
    out: &mut String,
    view: &View<'_>,
    suite: &str,
    workload: &str,
    metrics: &[MetricInfo<'_>],
) {
    // The allocators that ran this workload, or tried to (a failure is a row of dashes);
    // not those of the suite that never run it (the gpu suite's device-only baselines).
    let ran = view.allocators_in(suite, Some(workload));
    let allocators: Vec<&str> = view
        .allocators_in(suite, None)
        .into_iter()
        .filter(|a| {
            ran.contains(a)
                || view
                    .results
                    .failures
                    .iter()
                    .any(|f| f.suite == suite && f.workload == workload && f.allocator == *a)
        })
        .collect();
    let threads = view.threads_in(suite, Some(workload));
    let ratio_header = view.ratio_header(suite);

    let mut headers = vec!["allocator".to_owned(), "threads".to_owned()];
    for m in metrics {
        headers.push(escape_cell(m.name));
        headers.push(ratio_header.clone());
    }
    table_header(out, &headers, 1);

    for &t in &threads {
        // The medians each allocator's cell competes with, per metric.
        let medians: Vec<Vec<f64>> = metrics
            .iter()
            .map(|m| {
                allocators
                    .iter()
                    .filter_map(|a| view.get(suite, workload, a, t, m.name))
                    .map(|r| r.median)
                    .filter(|v| v.is_finite())
                    .collect()
            })
            .collect();
        for &a in &allocators {
            let mut cells = vec![escape_cell(a), t.to_string()];
            for (m, medians) in metrics.iter().zip(&medians) {
                match view.get(suite, workload, a, t, m.name) {
                    Some(r) => {
                        let bold = is_best(r.median, medians, m.lower_is_better);
                        cells.push(fmt_cell(r, bold));
                        cells.push(fmt_ratio(view.ratio(suite, workload, a, t, m.name)));
                    }
                    None => {
                        cells.push(NONE.to_owned());
                        cells.push(NONE.to_owned());
                    }
                }
            }
            table_row(out, &cells);
        }
    }
}

/// A row of a transposed table: its cells, and per allocator cell whether it is the best.
type TransposedRow = (Vec<String>, Vec<bool>);

/// The rows of the transposed table of one workload (one thread count per row group):
/// the header (`metric`, `threads`, then the allocators) and one row of plain cells per
/// (metric, thread count), metrics in the order the worker reported them, restricted to
/// `only` if given. The second element of each row says, per allocator cell, whether it is
/// the best median of the row.
fn transposed_rows(
    view: &View<'_>,
    suite: &str,
    workload: &str,
    only: Option<&[&str]>,
) -> (Vec<String>, Vec<TransposedRow>) {
    let allocators = view.allocators_in(suite, Some(workload));
    let mut metrics: Vec<MetricInfo<'_>> = Vec::new();
    for r in view.records_in(suite, Some(workload)) {
        if !QUALIFIER_METRICS.contains(&r.metric.as_str())
            && only.is_none_or(|o| o.contains(&r.metric.as_str()))
            && !metrics.iter().any(|m| m.name == r.metric)
        {
            metrics.push(MetricInfo {
                name: &r.metric,
                unit: &r.unit,
                lower_is_better: r.lower_is_better,
            });
        }
    }
    if let Some(only) = only {
        metrics.sort_by_key(|m| only.iter().position(|o| *o == m.name));
    }
    let mut header = vec!["metric".to_owned(), "threads".to_owned()];
    header.extend(allocators.iter().map(|a| (*a).to_owned()));
    let mut rows = Vec::new();
    for m in &metrics {
        for t in view.threads_in(suite, Some(workload)) {
            let records: Vec<Option<&Record>> = allocators
                .iter()
                .map(|a| view.get(suite, workload, a, t, m.name))
                .collect();
            let medians: Vec<f64> = records.iter().flatten().map(|r| r.median).collect();
            let mut cells = vec![format!("{} [{}]", m.name, m.unit), t.to_string()];
            let mut best = Vec::new();
            for r in &records {
                match r {
                    Some(r) => {
                        cells.push(fmt_plain_cell(r));
                        best.push(
                            is_best(r.median, &medians, m.lower_is_better)
                                && medians.iter().any(|v| *v != r.median),
                        );
                    }
                    None => {
                        cells.push(NONE.to_owned());
                        best.push(false);
                    }
                }
            }
            rows.push((cells, best));
        }
    }
    (header, rows)
}

/// A cell of a transposed table: the median, and (min–max) where the runs differ; a
/// misuse `score` as its verdict.
fn fmt_plain_cell(r: &Record) -> String {
    use crate::workloads::security::analysis::Verdict;
    let word = |v: f64| {
        Verdict::from_score(v)
            .filter(|_| r.unit == "score")
            .map(|v| v.as_str().to_owned())
    };
    let value = |v: f64| word(v).unwrap_or_else(|| fmt_value(v));
    if r.min == r.max {
        value(r.median)
    } else {
        format!("{} ({}–{})", value(r.median), value(r.min), value(r.max))
    }
}

/// The transposed Markdown table of one workload; see [`TRANSPOSED_SUITES`].
fn transposed_table(
    out: &mut String,
    view: &View<'_>,
    suite: &str,
    workload: &str,
    only: Option<&[&str]>,
) {
    let (header, rows) = transposed_rows(view, suite, workload, only);
    if rows.is_empty() {
        return;
    }
    let mut header: Vec<String> = header.iter().map(|h| escape_cell(h)).collect();
    header[0] = format!("{suite}/{workload}");
    table_header(out, &header, 1);
    for (cells, best) in rows {
        let mut cells: Vec<String> = cells.iter().map(|c| escape_cell(c)).collect();
        for (cell, best) in cells[2..].iter_mut().zip(best) {
            if best {
                *cell = format!("**{cell}**");
            }
        }
        table_row(out, &cells);
    }
}

/// The transposed table of one workload as plain text, for the terminal; see
/// [`TRANSPOSED_SUITES`]. Empty if the workload has no records.
pub fn transposed_text(results: &ResultsFile, suite: &str, workload: &str) -> String {
    let view = View::new(results);
    let (header, rows) = transposed_rows(&view, suite, workload, None);
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for (cells, _) in &rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(out, "{c:<w$}");
            } else {
                let _ = write!(out, "  {c:>w$}");
            }
        }
        out.push('\n');
    };
    line(&header);
    for (cells, _) in &rows {
        line(cells);
    }
    out
}

/// The geometric-mean table of `metrics` of one suite.
fn summary_table(out: &mut String, view: &View<'_>, suite: &str, metrics: &[MetricInfo<'_>]) {
    let allocators = view.allocators_in(suite, None);
    let threads = view.threads_in(suite, None);
    let ratio_header = view.ratio_header(suite);

    let mut headers = vec!["allocator".to_owned(), "threads".to_owned()];
    for m in metrics {
        headers.push(format!("{} {ratio_header}", escape_cell(m.name)));
    }
    table_header(out, &headers, 1);
    let mut partial = false;
    for &t in &threads {
        for &a in &allocators {
            let mut cells = vec![escape_cell(a), t.to_string()];
            for m in metrics {
                let (mean, used, total) = view.geomean(suite, a, t, m.name);
                let mut cell = fmt_ratio(mean);
                if mean.is_some() && used < total {
                    let _ = write!(cell, " ({used}/{total} workloads)");
                    partial = true;
                }
                cells.push(cell);
            }
            table_row(out, &cells);
        }
    }
    if partial {
        out.push_str(
            "\nWorkloads where either median is missing, or the ratio is not positive, are left \
         out of a mean; “(k/n workloads)” says how many counted.\n",
        );
    }
}

/// The note on the clock read inside every figure of the workloads of `suite` (or of
/// `workload`) that report [`CLOCK_READ_METRIC`], followed by the scheduling policy their
/// threads ran under where they report [`SCHED_FIFO_METRIC`]; `None` if none reports a
/// clock read.
fn clock_read_note(view: &View<'_>, suite: &str, workload: Option<&str>) -> Option<String> {
    let clock: Vec<&Record> = view
        .records_in(suite, workload)
        .filter(|r| r.metric == CLOCK_READ_METRIC)
        .collect();
    let lo = clock
        .iter()
        .map(|r| r.min)
        .filter(|v| v.is_finite())
        .min_by(f64::total_cmp)?;
    let hi = clock
        .iter()
        .map(|r| r.max)
        .filter(|v| v.is_finite())
        .max_by(f64::total_cmp)?;
    let unit = &clock[0].unit;
    let mut note = format!(
        "Every latency here is the time between two clock reads around one call, so it \
         includes about one clock read: `{CLOCK_READ_METRIC}` was {}–{} {unit} in these runs \
         (calibrated in each worker). It is not subtracted.",
        fmt_value(lo),
        fmt_value(hi),
    );
    if let Some(sched) = sched_note(view, suite, workload) {
        note.push(' ');
        note.push_str(&sched);
    }
    Some(note)
}

/// Which scheduling policy the threads of `suite` (or of `workload`) ran under, from their
/// [`SCHED_FIFO_METRIC`] records; `None` if there are none.
fn sched_note(view: &View<'_>, suite: &str, workload: Option<&str>) -> Option<String> {
    let sched: Vec<&Record> = view
        .records_in(suite, workload)
        .filter(|r| r.metric == SCHED_FIFO_METRIC)
        .collect();
    if sched.is_empty() {
        return None;
    }
    let all_fifo = sched.iter().all(|r| r.min >= 1.0);
    let none_fifo = sched.iter().all(|r| r.max <= 0.0);
    Some(
        if all_fifo {
            "Every thread of every run ran under `SCHED_FIFO` at priority 1 (real-time \
             scheduling: a thread keeps its core until it blocks between two steps, so a tail \
             is the allocator's work, its waits and interrupts, not a peer's time slice)."
        } else if none_fifo {
            "The threads ran under the default time-sharing policy (`--sched fifo` asks for \
             real-time `SCHED_FIFO`, which needs root, `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of \
             at least 1). With more threads than cores, p99.999 and max are then mostly a \
             peer's time slice landing inside a call, whichever the allocator."
        } else {
            "**Mixed scheduling:** some runs' threads ran under `SCHED_FIFO` and some under the \
             default policy (`sched_fifo` below 1 in results.json): their tails do not compare."
        }
        .to_owned(),
    )
}

/// The timer-overhead note: the largest `timer_overhead` value and a warning line for any
/// record whose median exceeds [`TIMER_OVERHEAD_WARN_PERCENT`], except for workloads that
/// time single operations (they report [`CLOCK_READ_METRIC`]), which are named instead.
fn timer_overhead_note(out: &mut String, results: &ResultsFile) {
    let h = &results.header;
    let _ = writeln!(
        out,
        "One clock read costs {} ns (median of many).",
        fmt_value(h.timer_overhead_ns)
    );
    let overhead: Vec<&Record> = results
        .records
        .iter()
        .filter(|r| r.metric == TIMER_OVERHEAD_METRIC)
        .collect();
    let largest_median = overhead
        .iter()
        .copied()
        .filter(|r| r.median.is_finite())
        .max_by(|a, b| a.median.total_cmp(&b.median));
    let largest_single = overhead
        .iter()
        .map(|r| r.max)
        .filter(|v| v.is_finite())
        .max_by(f64::total_cmp);
    match (largest_median, largest_single) {
        (Some(r), Some(single)) => {
            let _ = writeln!(
                out,
                "Largest `{TIMER_OVERHEAD_METRIC}` over all records: median {} {unit} \
                 ({}/{}, {}, {}); largest single run {} {unit}.",
                fmt_value(r.median),
                r.suite,
                r.workload,
                r.allocator,
                fmt_thread_count(r.threads),
                fmt_value(single),
                unit = r.unit,
            );
        }
        _ => {
            let _ = writeln!(out, "No `{TIMER_OVERHEAD_METRIC}` records.");
            return;
        }
    }
    let mut per_workload: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for r in &overhead {
        let worst = per_workload.entry((&r.suite, &r.workload)).or_insert(0.0);
        *worst = worst.max(r.median);
    }
    out.push('\n');
    table_header(
        out,
        &[
            "workload".to_owned(),
            "largest median over allocators".to_owned(),
        ],
        1,
    );
    for ((suite, workload), worst) in &per_workload {
        table_row(
            out,
            &[
                format!("{suite}/{workload}"),
                format!("{} %", fmt_value(*worst)),
            ],
        );
    }
    let single_operations: BTreeSet<(&str, &str)> = results
        .records
        .iter()
        .filter(|r| r.metric == CLOCK_READ_METRIC)
        .map(|r| (r.suite.as_str(), r.workload.as_str()))
        .collect();
    let mut over: Vec<&Record> = overhead
        .iter()
        .copied()
        .filter(|r| r.median > TIMER_OVERHEAD_WARN_PERCENT)
        .filter(|r| !single_operations.contains(&(r.suite.as_str(), r.workload.as_str())))
        .collect();
    let view = View::new(results);
    over.sort_by(|a, b| {
        let rank = |r: &Record| {
            (
                view.suites.iter().position(|s| *s == r.suite),
                r.workload.clone(),
                view.allocators.iter().position(|x| *x == r.allocator),
                r.threads,
            )
        };
        rank(a).cmp(&rank(b))
    });
    out.push('\n');
    if !single_operations.is_empty() {
        let list: Vec<String> = single_operations
            .iter()
            .map(|(suite, workload)| format!("{suite}/{workload}"))
            .collect();
        let _ = writeln!(
            out,
            "{} time{} each allocator call on its own: there `{TIMER_OVERHEAD_METRIC}` (two \
             clock reads over the shortest call) is large by design and not warned about; \
             every figure includes about one clock read, reported as `{CLOCK_READ_METRIC}` and \
             not subtracted.\n",
            list.join(", "),
            if list.len() == 1 { "s" } else { "" },
        );
    }
    let other = if single_operations.is_empty() {
        ""
    } else {
        "other "
    };
    if over.is_empty() {
        let _ = writeln!(
            out,
            "No {other}workload's `{TIMER_OVERHEAD_METRIC}` median exceeds \
             {TIMER_OVERHEAD_WARN_PERCENT} %."
        );
    } else {
        let list: Vec<String> = over
            .iter()
            .map(|r| {
                format!(
                    "{}/{} on {} ({}): {} {}",
                    r.suite,
                    r.workload,
                    r.allocator,
                    fmt_thread_count(r.threads),
                    fmt_value(r.median),
                    r.unit
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "**WARNING:** `{TIMER_OVERHEAD_METRIC}` median above \
             {TIMER_OVERHEAD_WARN_PERCENT} % — reading the clock is a visible part of these \
             timings; raise the scale before trusting them: {}.",
            list.join("; ")
        );
    }
}

/// The README's results section: the machine/commit/parameters line, per suite the
/// geometric-mean summary (of at most [`MAX_CHART_PANELS`] metrics, chosen as for the
/// charts), the clock-read note where the suite times single operations, and a compact table
/// of the `time` ratios (or of the suite's first headline metric if it has no `time`), and a
/// pointer to `report/report.md`. A suite of one workload gets its ratios alone, under a
/// heading that says so.
pub fn render_readme_section(results: &ResultsFile) -> String {
    let view = View::new(results);
    let mut out = String::new();
    out.push_str(&header_line(results));
    out.push('\n');
    crate::checks::markdown(&mut out, results, "####");
    for &suite in &view.suites {
        let baseline = view.baseline(suite).unwrap_or(NONE);
        if suite == STORAGE_SUITE {
            crate::workloads::storage::report::readme(&mut out, results);
            continue;
        }
        if suite == PROGRAMS_SUITE {
            crate::workloads::programs::report::readme(&mut out, results);
            continue;
        }
        // Model figures of different kinds: the checks, then each workload's values.
        if suite == crate::workloads::training::SUITE {
            crate::workloads::training::must_reach_under(&mut out, results, "####", "report/");
        }
        if VALUE_SUITES.contains(&suite) {
            let _ = writeln!(
                out,
                "\n#### Suite `{suite}`: headline figures (median over the runs)"
            );
            for note in results.notes.iter().filter(|n| n.suite == suite) {
                let _ = writeln!(out, "\n{}", note.text);
            }
            for workload in view.workloads(suite) {
                let metrics = headline(view.metrics_in(suite, Some(workload)));
                if metrics.is_empty() {
                    continue; // Sweeps only: they are in the report.
                }
                let _ = writeln!(out, "\n`{workload}`:\n");
                workload_table(&mut out, &view, suite, workload, &metrics);
            }
            continue;
        }
        if TRANSPOSED_SUITES.contains(&suite) {
            let _ = writeln!(
                out,
                "\n#### Suite `{suite}`: headline figures (median over the runs)\n"
            );
            for workload in view.workloads(suite) {
                transposed_table(
                    &mut out,
                    &view,
                    suite,
                    workload,
                    Some(TRANSPOSED_README_METRICS),
                );
            }
            continue;
        }
        let workloads = view.workloads(suite);
        let metrics = headline(view.metrics_in(suite, None));
        if let [only] = workloads[..] {
            // The mean of one ratio is that ratio: say so, and skip the per-workload table.
            let _ = writeln!(
                out,
                "\n#### Suite `{suite}` (one workload, `{only}`): ratio to {baseline}\n"
            );
            summary_table(&mut out, &view, suite, &metrics);
            if let Some(note) = clock_read_note(&view, suite, None) {
                let _ = writeln!(out, "\n{note}");
            }
            continue;
        }
        let _ = writeln!(
            out,
            "\n#### Suite `{suite}`: geometric mean over workloads of the ratio to {baseline}\n"
        );
        summary_table(&mut out, &view, suite, &metrics);
        if let Some(note) = clock_read_note(&view, suite, None) {
            let _ = writeln!(out, "\n{note}");
        }

        let Some(metric) = metrics
            .iter()
            .find(|m| m.name == "time")
            .or(metrics.first())
        else {
            continue;
        };
        let allocators = view.allocators_in(suite, None);
        let _ = writeln!(
            out,
            "\n#### Suite `{suite}`: `{}` {} per workload\n",
            metric.name,
            view.ratio_header(suite)
        );
        let mut headers = vec!["workload".to_owned(), "threads".to_owned()];
        headers.extend(allocators.iter().map(|a| escape_cell(a)));
        table_header(&mut out, &headers, 1);
        for workload in view.workloads(suite) {
            for t in view.threads_in(suite, Some(workload)) {
                let ratios: Vec<Option<f64>> = allocators
                    .iter()
                    .map(|a| view.ratio(suite, workload, a, t, metric.name))
                    .collect();
                let present: Vec<f64> = ratios.iter().flatten().copied().collect();
                let mut cells = vec![escape_cell(workload), t.to_string()];
                for r in &ratios {
                    let cell = fmt_ratio(*r);
                    match r {
                        Some(v) if is_best(*v, &present, metric.lower_is_better) => {
                            cells.push(format!("**{cell}**"));
                        }
                        _ => cells.push(cell),
                    }
                }
                table_row(&mut out, &cells);
            }
        }
    }
    out.push_str(
        "\nFull tables with min–max ranges, every metric, charts and the timer-overhead check: \
         [report/report.md](report/report.md).\n",
    );
    out
}

// ---------------------------------------------------------------------------------------
// Charts
// ---------------------------------------------------------------------------------------

const PANEL_HEIGHT: u32 = 320;
const TITLE_HEIGHT: u32 = 40;

/// Writes the chart of one workload to `path` (atomically): one panel per metric (at most
/// [`MAX_CHART_PANELS`], chosen by [`HEADLINE_METRICS`]), one above the other, each a bar chart of the median per allocator (grouped by thread count
/// when there are several) with min–max error bars, axes labelled with units, titled
/// `<suite>/<workload>`. Fails if the results have no record of that workload.
pub fn write_chart_svg(
    results: &ResultsFile,
    suite: &str,
    workload: &str,
    path: &Path,
) -> Result<(), ReportError> {
    let view = View::new(results);
    if view.records_in(suite, Some(workload)).next().is_none() {
        return Err(ReportError::Chart {
            path: path.to_path_buf(),
            message: format!("no records for {suite}/{workload}"),
        });
    }
    let svg = render_chart_svg(&view, suite, workload).map_err(|e| ReportError::Chart {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    write_atomic(path, svg.as_bytes())
}

/// Draws the chart into a string.
fn render_chart_svg(
    view: &View<'_>,
    suite: &str,
    workload: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let metrics = headline(view.metrics_in(suite, Some(workload)));
    let allocators = view.allocators_in(suite, Some(workload));
    let threads = view.threads_in(suite, Some(workload));
    let groups = allocators.len().max(1);
    let per_group = (40 * threads.len() as u32).max(90);
    let width = (160 + groups as u32 * per_group).max(640);
    let height = TITLE_HEIGHT + PANEL_HEIGHT * metrics.len().max(1) as u32;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(&format!("{suite}/{workload}"), ("sans-serif", 24))?;
        let panels = body.split_evenly((metrics.len().max(1), 1));
        for (metric, panel) in metrics.iter().zip(&panels) {
            draw_panel(panel, view, suite, workload, metric, &allocators, &threads)?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// The x axis of a bar chart: group `i` spans `i..i + 1`, labelled at its centre.
pub(crate) struct GroupAxis {
    pub(crate) groups: usize,
}

impl Ranged for GroupAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let fraction = value / self.groups as f64;
        limit.0 + ((limit.1 - limit.0) as f64 * fraction).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            // No light mesh lines between groups.
            return Vec::new();
        }
        (0..self.groups).map(|i| i as f64 + 0.5).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.groups as f64
    }
}

/// Draws the bars of one metric.
fn draw_panel<DB: DrawingBackend>(
    panel: &DrawingArea<DB, plotters::coord::Shift>,
    view: &View<'_>,
    suite: &str,
    workload: &str,
    metric: &MetricInfo<'_>,
    allocators: &[&str],
    threads: &[usize],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    // (allocator index, threads index, record) of every bar.
    let bars: Vec<(usize, usize, &Record)> = allocators
        .iter()
        .enumerate()
        .flat_map(|(ai, a)| {
            threads.iter().enumerate().filter_map(move |(ti, t)| {
                view.get(suite, workload, a, *t, metric.name)
                    .filter(|r| r.median.is_finite())
                    .map(|r| (ai, ti, r))
            })
        })
        .collect();

    let values = bars
        .iter()
        .flat_map(|(_, _, r)| [r.min, r.median, r.max])
        .filter(|v| v.is_finite());
    let (mut lo, mut hi) = values.fold((0.0f64, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi <= lo {
        hi = lo + 1.0;
    }
    let span = hi - lo;
    if lo < 0.0 {
        lo -= span * 0.08;
    }
    // Headroom above the highest bar: a margin, or room for the legend of the thread
    // counts (about 18 px per entry in a plot area about 220 px high).
    let legend_share = if threads.len() > 1 {
        ((18 * threads.len() + 20) as f64 / 220.0).min(0.6)
    } else {
        0.08
    };
    hi = lo + (hi - lo) / (1.0 - legend_share);

    let n = allocators.len().max(1);
    let direction = if metric.lower_is_better {
        "lower is better"
    } else {
        "higher is better"
    };
    let mut chart = ChartBuilder::on(panel)
        .margin(10)
        .caption(format!("{} ({direction})", metric.name), ("sans-serif", 18))
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(GroupAxis { groups: n }, lo..hi)?;

    let x_label = |x: &f64| -> String {
        let i = x.floor();
        if i >= 0.0 && (i as usize) < allocators.len() {
            allocators[i as usize].to_owned()
        } else {
            String::new()
        }
    };
    let y_label = |y: &f64| fmt_tick(*y);
    let y_desc = if metric.unit.is_empty() {
        metric.name.to_owned()
    } else {
        format!("{} ({})", metric.name, metric.unit)
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .x_desc("allocator")
        .y_desc(y_desc)
        .draw()?;

    let groups = threads.len().max(1);
    let bar_width = 0.8 / groups as f64;
    let base = 0.0f64.clamp(lo, hi);
    let color = |ai: usize, ti: usize| {
        if groups > 1 {
            Palette99::pick(ti)
        } else {
            Palette99::pick(ai)
        }
    };
    for (ti, t) in threads.iter().enumerate() {
        let mine: Vec<&(usize, usize, &Record)> = bars.iter().filter(|b| b.1 == ti).collect();
        let series = chart.draw_series(mine.iter().map(|(ai, ti, r)| {
            let x0 = *ai as f64 + 0.1 + *ti as f64 * bar_width;
            Rectangle::new(
                [(x0, base), (x0 + bar_width, r.median)],
                color(*ai, *ti).filled(),
            )
        }))?;
        if groups > 1 {
            let c = color(0, ti);
            series
                .label(fmt_thread_count(*t))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
        }
        chart.draw_series(
            mine.iter()
                .filter(|(_, _, r)| r.min.is_finite() && r.max.is_finite())
                .map(|(ai, ti, r)| {
                    let x = *ai as f64 + 0.1 + (*ti as f64 + 0.5) * bar_width;
                    ErrorBar::new_vertical(x, r.min, r.median, r.max, BLACK.stroke_width(1), 8)
                }),
        )?;
    }
    if groups > 1 {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Sweeps
// ---------------------------------------------------------------------------------------

/// The sweep points of one workload: base metric -> allocator -> (x, median), x ascending;
/// bases and allocators in report order. Thread counts are not distinguished (a sweeping
/// workload runs at one).
type Sweeps<'a> = Vec<(&'a str, Vec<(&'a str, Vec<(f64, f64)>)>)>;

fn sweeps<'a>(view: &View<'a>, suite: &str, workload: &str) -> Sweeps<'a> {
    let mut bases: Vec<&'a str> = Vec::new();
    for r in view.records_in(suite, Some(workload)) {
        if let Some((base, _)) = sweep_point(&r.metric)
            && !bases.contains(&base)
        {
            bases.push(base);
        }
    }
    bases.sort_by_key(|b| metric_rank(b));
    bases
        .into_iter()
        .map(|base| {
            let per_allocator = view
                .allocators_in(suite, Some(workload))
                .into_iter()
                .map(|a| {
                    let mut points: Vec<(f64, f64)> = view
                        .records_in(suite, Some(workload))
                        .filter(|r| r.allocator == a)
                        .filter_map(|r| {
                            let (b, x) = sweep_point(&r.metric)?;
                            (b == base && r.median.is_finite()).then_some((x, r.median))
                        })
                        .collect();
                    points.sort_by(|p, q| p.0.total_cmp(&q.0));
                    (a, points)
                })
                .filter(|(_, points)| !points.is_empty())
                .collect();
            (base, per_allocator)
        })
        .collect()
}

/// The name of the parameter `workload` of `suite` sweeps.
fn sweep_parameter(suite: &str, workload: &str) -> &'static str {
    let of = |key: &str| SWEEP_PARAMETERS.iter().find(|(s, _)| *s == key);
    of(workload)
        .or_else(|| of(suite))
        .map_or("parameter", |(_, name)| name)
}

/// The chart file of a workload's sweeps.
pub fn sweep_chart_file_name(suite: &str, workload: &str) -> String {
    chart_file_name(suite, &format!("{workload}-sweep"))
}

/// The sweep table of one workload (one row per parameter value, one column per base
/// metric and allocator) and a link to its chart; nothing if it has no sweep.
fn sweep_section(out: &mut String, view: &View<'_>, suite: &str, workload: &str) {
    let sweeps = sweeps(view, suite, workload);
    if sweeps.is_empty() {
        return;
    }
    let parameter = sweep_parameter(suite, workload);
    let _ = writeln!(
        out,
        "
Sweep over the {parameter} (median of the runs at each point):
"
    );
    let mut headers = vec![escape_cell(parameter)];
    let mut xs: Vec<f64> = Vec::new();
    for (base, per_allocator) in &sweeps {
        for (a, points) in per_allocator {
            headers.push(escape_cell(&format!("{base} {a}")));
            xs.extend(points.iter().map(|p| p.0));
        }
    }
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    table_header(out, &headers, 1);
    for x in xs {
        let mut cells = vec![fmt_value(x)];
        for (_, per_allocator) in &sweeps {
            for (_, points) in per_allocator {
                cells.push(
                    points
                        .iter()
                        .find(|p| p.0 == x)
                        .map_or(NONE.to_owned(), |p| fmt_value(p.1)),
                );
            }
        }
        table_row(out, &cells);
    }
    let _ = writeln!(
        out,
        "
![{suite}/{workload} sweep]({})",
        sweep_chart_file_name(suite, workload)
    );
}

/// Writes the sweep chart of one workload to `path` (atomically): one panel per base
/// metric, one line per allocator, the parameter on the x axis. Fails if the workload has
/// no sweep.
pub fn write_sweep_chart_svg(
    results: &ResultsFile,
    suite: &str,
    workload: &str,
    path: &Path,
) -> Result<(), ReportError> {
    let view = View::new(results);
    let sweeps = sweeps(&view, suite, workload);
    let error = |message: String| ReportError::Chart {
        path: path.to_path_buf(),
        message,
    };
    if sweeps.is_empty() {
        return Err(error(format!("no sweep for {suite}/{workload}")));
    }
    let svg = render_sweep_svg(&sweeps, suite, workload).map_err(|e| error(e.to_string()))?;
    write_atomic(path, svg.as_bytes())
}

fn render_sweep_svg(
    sweeps: &Sweeps<'_>,
    suite: &str,
    workload: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let parameter = sweep_parameter(suite, workload);
    let height = TITLE_HEIGHT + PANEL_HEIGHT * sweeps.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(&format!("{suite}/{workload}: sweep"), ("sans-serif", 24))?;
        let panels = body.split_evenly((sweeps.len(), 1));
        for ((base, per_allocator), panel) in sweeps.iter().zip(&panels) {
            let all = || per_allocator.iter().flat_map(|(_, p)| p.iter());
            // An axis whose positive values span three decades or more (thread counts 1 ..
            // 2^20; a queue's probes against CoRW's) is drawn in log10.
            let log_axis = |values: Vec<f64>| {
                let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                lo > 0.0 && hi / lo >= 1000.0
            };
            let log_x = log_axis(all().map(|p| p.0).collect());
            let log_y = log_axis(all().map(|p| p.1).collect());
            let scale = |v: f64, log: bool| if log { v.log10() } else { v };
            let (x0, x1, y0, y1) = all().fold(
                (
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                ),
                |(x0, x1, y0, y1), &(x, y)| {
                    let (x, y) = (scale(x, log_x), scale(y, log_y));
                    (x0.min(x), x1.max(x), y0.min(y), y1.max(y))
                },
            );
            let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
            let y0 = if log_y { y0 - 0.1 } else { y0.min(0.0) };
            let y1 = if log_y {
                y1 + 0.1
            } else if y1 > y0 {
                y1 + 0.1 * (y1 - y0)
            } else {
                y0 + 1.0
            };
            let mut chart = ChartBuilder::on(panel)
                .margin(10)
                .caption(
                    format!(
                        "{base} (lower is better{})",
                        match (log_x, log_y) {
                            (true, true) => "; log axes",
                            (true, false) => "; log x axis",
                            (false, true) => "; log y axis",
                            (false, false) => "",
                        }
                    ),
                    ("sans-serif", 18),
                )
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(x0..x1, y0..y1)?;
            let x_tick = |v: &f64| fmt_tick(if log_x { 10f64.powf(*v) } else { *v });
            let y_tick = |v: &f64| fmt_tick(if log_y { 10f64.powf(*v) } else { *v });
            chart
                .configure_mesh()
                .x_desc(parameter)
                .y_desc(*base)
                .x_label_formatter(&x_tick)
                .y_label_formatter(&y_tick)
                .draw()?;
            for (i, (allocator, points)) in per_allocator.iter().enumerate() {
                let points: Vec<(f64, f64)> = points
                    .iter()
                    .map(|&(x, y)| (scale(x, log_x), scale(y, log_y)))
                    .collect();
                let points = &points;
                let color = Palette99::pick(i);
                chart
                    .draw_series(LineSeries::new(
                        points.iter().copied(),
                        color.stroke_width(2),
                    ))?
                    .label(*allocator)
                    .legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                    });
                chart.draw_series(
                    points
                        .iter()
                        .map(|&p| Circle::new(p, 3, Palette99::pick(i).filled())),
                )?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// The chart of device memory over one BERT-Large iteration in the `training` suite.
pub const TRAINING_MEMORY_CHART: &str = "training-memory-bert-large.svg";

/// The memory curves of `training-delta` (keep-all and planned, one line each) from the
/// first allocator that recorded them; empty if none did.
fn training_memory_curves<'a>(view: &View<'a>) -> Sweeps<'a> {
    use crate::workloads::training::SUITE;
    let workload = "training-delta";
    let Some(allocator) = view.allocators_in(SUITE, Some(workload)).into_iter().next() else {
        return Vec::new();
    };
    let lines: Vec<(&'a str, Vec<(f64, f64)>)> = [
        ("keep all", "bert-large_keep_all"),
        ("planned", "bert-large_planned"),
    ]
    .into_iter()
    .map(|(label, base)| {
        let mut points: Vec<(f64, f64)> = view
            .records_in(SUITE, Some(workload))
            .filter(|r| r.allocator == allocator)
            .filter_map(|r| {
                let (b, x) = sweep_point(&r.metric)?;
                (b == base && r.median.is_finite()).then_some((x, r.median))
            })
            .collect();
        points.sort_by(|p, q| p.0.total_cmp(&q.0));
        (label, points)
    })
    .filter(|(_, points)| !points.is_empty())
    .collect();
    if lines.is_empty() {
        return Vec::new();
    }
    vec![("GiB live, bert-large (keep all vs planned)", lines)]
}

/// Writes [`TRAINING_MEMORY_CHART`] into `dir` if the results have the curves: device
/// memory over one BERT-Large iteration, keep-all and planned on one chart.
fn write_training_memory_chart(
    dir: &Path,
    results: &ResultsFile,
) -> Result<Option<PathBuf>, ReportError> {
    let view = View::new(results);
    let curves = training_memory_curves(&view);
    if curves.is_empty() {
        return Ok(None);
    }
    let path = dir.join(TRAINING_MEMORY_CHART);
    let svg = render_sweep_svg(&curves, crate::workloads::training::SUITE, "training-delta")
        .map_err(|e| ReportError::Chart {
            path: path.clone(),
            message: e.to_string(),
        })?;
    write_atomic(&path, svg.as_bytes())?;
    Ok(Some(path))
}

// ---------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------

/// The files [`write_report`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportFiles {
    /// The report directory.
    pub dir: PathBuf,
    /// `results.json`.
    pub results_json: PathBuf,
    /// `report.md`.
    pub report_md: PathBuf,
    /// One `<suite>-<workload>.svg` per workload, in report order, each followed by its
    /// `<suite>-<workload>-sweep.svg` if it has sweep points.
    pub charts: Vec<PathBuf>,
    /// Every file written, in the order written: `results.json`, `report.md`, the charts.
    pub paths: Vec<PathBuf>,
}

/// Writes the report directory: creates `dir` (and its parents) if needed, then writes
/// `results.json`, `report.md`, `<suite>-<workload>.svg` for each workload,
/// `<suite>-<workload>-sweep.svg` for each workload with sweep points and, for the
/// `training` suite, [`TRAINING_MEMORY_CHART`], each atomically.
pub fn write_report(dir: &Path, results: &ResultsFile) -> Result<ReportFiles, ReportError> {
    fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        action: "create directory",
        path: dir.to_path_buf(),
        source,
    })?;
    let results_json = dir.join("results.json");
    write_results_json(&results_json, results)?;
    let report_md = dir.join("report.md");
    write_atomic(&report_md, render_markdown(results).as_bytes())?;
    let view = View::new(results);
    let mut charts = Vec::new();
    for &suite in &view.suites {
        if suite == STORAGE_SUITE {
            charts.extend(crate::workloads::storage::report::write_charts(
                dir, results,
            )?);
            continue;
        }
        if suite == crate::workloads::training::SUITE {
            charts.extend(write_training_memory_chart(dir, results)?);
        }
        for workload in view.workloads(suite) {
            let path = dir.join(chart_file_name(suite, workload));
            write_chart_svg(results, suite, workload, &path)?;
            charts.push(path);
            if !sweeps(&view, suite, workload).is_empty() {
                let path = dir.join(sweep_chart_file_name(suite, workload));
                write_sweep_chart_svg(results, suite, workload, &path)?;
                charts.push(path);
            }
        }
    }
    let mut paths = vec![results_json.clone(), report_md.clone()];
    paths.extend(charts.iter().cloned());
    Ok(ReportFiles {
        dir: dir.to_path_buf(),
        results_json,
        report_md,
        charts,
        paths,
    })
}

/// Writes `results` to `path` as pretty-printed JSON (with a final newline), atomically.
pub fn write_results_json(path: &Path, results: &ResultsFile) -> Result<(), ReportError> {
    let mut json = serde_json::to_string_pretty(results).map_err(|source| ReportError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    json.push('\n');
    write_atomic(path, json.as_bytes())
}

/// Replaces the lines between the [`README_BEGIN`] and [`README_END`] marker lines of
/// `readme` (the markers themselves stay) with `section`, atomically. Each marker must be
/// on a line of its own, exactly once, begin before end. The file is left alone if
/// nothing changes.
pub fn update_readme(readme: &Path, section: &str) -> Result<(), ReportError> {
    let text = fs::read_to_string(readme).map_err(|source| ReportError::Io {
        action: "read",
        path: readme.to_path_buf(),
        source,
    })?;
    let updated =
        replace_section(&text, section).map_err(|problem| ReportError::MissingMarkers {
            path: readme.to_path_buf(),
            problem,
        })?;
    if updated == text {
        return Ok(());
    }
    write_atomic(readme, updated.as_bytes())
}

/// `text` with the lines between the markers replaced by `section`, or what is wrong with
/// the markers.
fn replace_section(text: &str, section: &str) -> Result<String, String> {
    // (start of line, end of line including its newline) of each marker line.
    let mut begins = Vec::new();
    let mut ends = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let span = (offset, offset + line.len());
        match line.trim() {
            README_BEGIN => begins.push(span),
            README_END => ends.push(span),
            _ => {}
        }
        offset += line.len();
    }
    let one = |found: &[(usize, usize)], marker: &str| match found {
        [one] => Ok(*one),
        [] => Err(format!("marker line `{marker}` not found")),
        many => Err(format!(
            "marker line `{marker}` appears {} times (once expected)",
            many.len()
        )),
    };
    let begin = one(&begins, README_BEGIN)?;
    let end = one(&ends, README_END)?;
    if end.0 < begin.1 {
        return Err(format!(
            "marker line `{README_END}` comes before `{README_BEGIN}`"
        ));
    }
    let mut out = String::with_capacity(text.len() + section.len());
    out.push_str(&text[..begin.1]);
    if !text[..begin.1].ends_with('\n') {
        out.push('\n');
    }
    out.push_str(section);
    if !section.is_empty() && !section.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&text[end.0..]);
    Ok(out)
}

/// Distinguishes the temporary files of one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `contents` to `path` atomically: into `.<name>.tmp-<pid>-<n>` in the same
/// directory, flushed to disk, then renamed over `path`. On failure the temporary file is
/// removed and `path` is untouched. An existing target's permissions are kept.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), ReportError> {
    let error = |source: io::Error| ReportError::Io {
        action: "write",
        path: path.to_path_buf(),
        source,
    };
    let Some(name) = path.file_name() else {
        return Err(error(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a file name",
        )));
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut attempt = 0;
    let (tmp, mut file) = loop {
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".tmp-{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = dir.join(tmp_name);
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => break (tmp, file),
            // A leftover of an earlier process with the same id: try another name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => return Err(error(e)),
        }
    };
    let result = (|| {
        file.write_all(contents)?;
        if let Ok(meta) = fs::metadata(path)
            && meta.is_file()
        {
            file.set_permissions(meta.permissions())?;
        }
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        error(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{FORMAT_NAME, FORMAT_VERSION, Header, Machine, Parameters};

    fn record(
        workload: &str,
        allocator: &str,
        threads: usize,
        metric: &str,
        median: f64,
    ) -> Record {
        let (unit, lower_is_better) = match metric {
            "time" => ("ms", true),
            "peak_footprint" => ("MiB", true),
            "timer_overhead" => ("%", true),
            _ => ("ops/s", false),
        };
        Record {
            suite: "cpu".into(),
            workload: workload.into(),
            allocator: allocator.into(),
            threads,
            metric: metric.into(),
            unit: unit.into(),
            median,
            min: short(median * 0.9),
            max: short(median * 1.1),
            runs: 3,
            lower_is_better,
        }
    }

    /// `v` rounded to a few decimals, so that its JSON form has few digits.
    fn short(v: f64) -> f64 {
        format!("{v:.6}").parse().unwrap()
    }

    /// Two workloads, three allocators, two threads.
    fn sample() -> ResultsFile {
        let mut records = Vec::new();
        // (workload, allocator, time, peak, overhead)
        let rows = [
            ("larson", "system", 100.0, 10.0, 0.1),
            ("larson", "mimalloc", 80.0, 12.0, 6.5),
            ("larson", "jemalloc", 125.0, 8.0, 0.2),
            ("cache", "system", 50.0, 4.0, 0.01),
            ("cache", "mimalloc", 100.0, 4.0, 0.01),
            ("cache", "jemalloc", 25.0, 5.0, 0.02),
        ];
        for (w, a, time, peak, overhead) in rows {
            records.push(record(w, a, 2, "time", time));
            records.push(record(w, a, 2, "peak_footprint", peak));
            records.push(record(w, a, 2, "timer_overhead", overhead));
        }
        ResultsFile {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            header: Header {
                machine: Machine {
                    cpu_model: "Test CPU 9000".into(),
                    cores: 2,
                    memory_bytes: 25_325_268_992,
                    os: "linux".into(),
                    arch: "x86_64".into(),
                    kernel: "6.1.0".into(),
                },
                commit: "7dea227".into(),
                commit_dirty: true,
                created_unix_s: 1_796_000_000,
                command: "alloclab suite --scale small".into(),
                parameters: Parameters {
                    scale: "small".into(),
                    runs: 3,
                    threads: vec![2],
                    seed: 42,
                    suites: vec!["cpu".into()],
                    allocators: vec!["system".into(), "mimalloc".into(), "jemalloc".into()],
                },
                timer_overhead_ns: 21.5,
            },
            records,
            failures: Vec::new(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn training_must_reach_lines_are_computed_from_the_records() {
        use crate::workloads::training::{CACHING, CACHING_EXPANDABLE, SUITE};
        let mut results = sample();
        results.header.parameters.suites.push(SUITE.into());
        let mut add = |workload: &str, allocator: &str, metric: &str, median: f64| {
            results.records.push(Record {
                suite: SUITE.into(),
                workload: workload.into(),
                allocator: allocator.into(),
                threads: 1,
                metric: metric.into(),
                unit: "x".into(),
                median,
                min: median,
                max: median,
                runs: 1,
                lower_is_better: true,
            });
        };
        for (metric, value) in [
            ("bert-large_saved", 57.7),
            ("bert-large_slowdown", 1.19),
            ("resnet50_saved", 30.0),
            ("resnet50_slowdown", 1.05),
            ("gpt2-large_batch_keep_all", 9.0),
            ("gpt2-large_batch_planned", 69.0),
            ("gpt2-large_batch_growth", 69.0 / 9.0),
        ] {
            add("training-delta", CACHING, metric, value);
        }
        add("training-growing-batch", CACHING, "fragmentation", 5.8);
        let md = render_markdown(&results);
        let checks: Vec<&str> = md
            .lines()
            .skip_while(|l| !l.contains("must reach (issue 9)"))
            .filter(|l| l.starts_with("- "))
            .collect();
        assert_eq!(checks.len(), 5, "{md}");
        assert!(checks[0].starts_with("- ✓") && checks[0].contains("bert-large"));
        assert!(checks[1].starts_with("- ✗") && checks[1].contains("resnet50"));
        assert!(checks[2].starts_with("- ✓") && checks[2].contains("7.67×"));
        assert!(checks[3].starts_with("- ✓") && checks[3].contains("5.80×"));
        // Nothing recorded for the expandable model: said, not guessed.
        assert!(checks[4].contains("not measured"), "{}", checks[4]);
        assert!(md.contains("Cost model: tensor fp16"));
        assert!(!md.contains(&format!("{CACHING_EXPANDABLE} |")));
        // The README carries the same checks and the values, not a mean of ratios.
        let readme = render_readme_section(&results);
        let readme_checks: Vec<&str> = readme
            .lines()
            .skip_while(|l| !l.contains("#### Suite `training`: must reach (issue 9)"))
            .filter(|l| l.starts_with("- "))
            .collect();
        assert_eq!(readme_checks, checks, "{readme}");
        assert!(
            !readme.contains("Suite `training`: geometric mean"),
            "{readme}"
        );
    }

    /// The cells of the row of `allocator` at `threads` in the first table after the line
    /// `heading`.
    fn row(md: &str, heading: &str, allocator: &str, threads: usize) -> Vec<String> {
        let start = md
            .lines()
            .position(|l| l == heading)
            .unwrap_or_else(|| panic!("no heading {heading:?} in\n{md}"));
        let prefix = format!("| {allocator} | {threads} |");
        let line = md
            .lines()
            .skip(start + 1)
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no row {prefix:?} under {heading:?} in\n{md}"));
        line.trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().to_owned())
            .collect()
    }

    /// A fresh, empty directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "alloclab-report-test-{}-{name}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Names of the entries of `dir` that look like temporary files.
    fn temp_files(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect()
    }

    fn rt_record(allocator: &str, threads: usize, metric: &str, unit: &str, median: f64) -> Record {
        Record {
            suite: "realtime".into(),
            workload: "latency".into(),
            allocator: allocator.into(),
            threads,
            metric: metric.into(),
            unit: unit.into(),
            median,
            min: median - 1.0,
            max: median + 1.0,
            runs: 3,
            lower_is_better: true,
        }
    }

    /// [`sample`] plus a `realtime` suite: one workload, every metric the worker reports
    /// (steps for mimalloc only), in scrambled order.
    fn sample_with_realtime() -> ResultsFile {
        let mut results = sample();
        results.header.parameters.suites.push("realtime".into());
        for (allocator, base) in [("system", 100.0), ("mimalloc", 50.0), ("jemalloc", 200.0)] {
            let mut metrics: Vec<(String, &str, f64)> = Vec::new();
            for (k, kind) in ["alloc", "free"].into_iter().enumerate() {
                let percentiles = ["p50", "p99", "p99.9", "p99.99", "p99.999", "max"];
                for (i, p) in percentiles.into_iter().enumerate() {
                    let value = base * (k + 1) as f64 * 10f64.powi(i as i32);
                    metrics.push((format!("{kind}_{p}"), "ns", value));
                }
            }
            metrics.push(("remote_free_p99.999".into(), "ns", base * 1e4));
            metrics.push(("remote_free_max".into(), "ns", base * 1e5));
            metrics.push(("peak_footprint".into(), "MiB", 10.0));
            metrics.push((CLOCK_READ_METRIC.into(), "ns", 30.0 + base / 100.0));
            metrics.push((TIMER_OVERHEAD_METRIC.into(), "%", 250.0));
            if allocator == "mimalloc" {
                metrics.push(("alloc_max_steps".into(), "steps", 12.0));
            }
            metrics.reverse();
            for (metric, unit, value) in metrics {
                results
                    .records
                    .push(rt_record(allocator, 4, &metric, unit, value));
            }
            results.records.push(Record {
                min: 1.0,
                max: 1.0,
                lower_is_better: false,
                ..rt_record(allocator, 4, SCHED_FIFO_METRIC, "share", 1.0)
            });
        }
        results
    }

    #[test]
    fn the_scheduling_policy_is_a_note_that_says_which() {
        let set_fifo = |results: &mut ResultsFile, allocator: &str, v: f64| {
            for r in &mut results.records {
                if r.metric == SCHED_FIFO_METRIC
                    && (allocator.is_empty() || r.allocator == allocator)
                {
                    (r.median, r.min, r.max) = (v, v, v);
                }
            }
        };
        let fifo = "ran under `SCHED_FIFO` at priority 1";
        let other = "default time-sharing policy";
        let mixed = "**Mixed scheduling:**";

        let mut results = sample_with_realtime();
        let md = render_markdown(&results);
        assert!(!md.contains("| sched_fifo"), "a qualifier is not a column");
        assert!(md.contains(fifo) && !md.contains(other) && !md.contains(mixed));
        assert!(render_readme_section(&results).contains(fifo));

        set_fifo(&mut results, "jemalloc", 0.0);
        let md = render_markdown(&results);
        assert!(md.contains(mixed) && !md.contains(fifo), "{md}");

        set_fifo(&mut results, "", 0.0);
        let md = render_markdown(&results);
        assert!(md.contains(other) && !md.contains(fifo) && !md.contains(mixed));

        results.records.retain(|r| r.metric != SCHED_FIFO_METRIC);
        let md = render_markdown(&results);
        assert!(!md.contains(other) && !md.contains(fifo) && !md.contains(mixed));
    }

    /// The header row of the first table after the line `heading`.
    fn header_after(md: &str, heading: &str) -> String {
        md.lines()
            .skip_while(|l| *l != heading)
            .find(|l| l.starts_with("| allocator"))
            .unwrap_or_else(|| panic!("no table after {heading:?} in\n{md}"))
            .to_owned()
    }

    /// [`sample`] plus a `security` suite: two workloads, bits, probabilities and verdicts.
    fn sample_with_security() -> ResultsFile {
        let mut results = sample();
        results.header.parameters.suites.push("security".into());
        let rec =
            |workload: &str, allocator: &str, metric: &str, unit: &str, v: (f64, f64)| Record {
                suite: "security".into(),
                workload: workload.into(),
                allocator: allocator.into(),
                threads: 1,
                metric: metric.into(),
                unit: unit.into(),
                median: v.0,
                min: v.0,
                max: v.1,
                runs: 3,
                lower_is_better: unit == "p",
            };
        for (a, bits, reuse, verdict) in [
            ("system", 0.0, 0.997, 1.0),
            ("mimalloc", 0.0, 0.0247, 0.5),
            ("jemalloc", 9.5, 1.0, 0.0),
        ] {
            results
                .records
                .push(rec("entropy", a, "entropy_steady_64", "bits", (bits, bits)));
            results
                .records
                .push(rec("reuse", a, "reuse_same_64", "p", (reuse, reuse)));
            results.records.push(rec(
                "misuse",
                a,
                "double_free_immediate",
                "score",
                (verdict, verdict.max(0.5)),
            ));
        }
        results
    }

    #[test]
    fn security_tables_have_a_row_per_metric_verdict_words_and_no_ratios_or_mean() {
        let md = render_markdown(&sample_with_security());
        let suite = &md[md.find("## Suite `security`").unwrap()..];
        assert!(suite.contains("| security/entropy | threads | system | mimalloc | jemalloc |"));
        assert!(
            suite.contains("| entropy_steady_64 [bits] | 1 | 0 | 0 | **9.50** |"),
            "{suite}"
        );
        assert!(
            suite.contains("| reuse_same_64 [p] | 1 | 0.997 | **0.0247** | 1.00 |"),
            "{suite}"
        );
        // Verdicts in words; where runs differ, the range in words too.
        assert!(
            suite.contains(
                "| double_free_immediate [score] | 1 | **caught** | crashed | silent (silent–crashed) |"
            ),
            "{suite}"
        );
        assert!(!suite.contains("× system"), "{suite}");
        assert!(!suite.contains("geometric mean"), "{suite}");
        let readme = render_readme_section(&sample_with_security());
        assert!(readme.contains("#### Suite `security`: headline figures"));
        assert!(readme.contains("| reuse_same_64 [p] | 1 |"), "{readme}");
        assert!(!readme.contains("double_free_immediate"), "{readme}");
    }

    #[test]
    fn many_metrics_are_split_into_family_tables_read_from_median_to_worst() {
        let md = render_markdown(&sample_with_realtime());
        let workload = &md[md.find("### realtime/latency").unwrap()..];
        let alloc = header_after(workload, "`alloc_…`:");
        assert_eq!(
            alloc,
            "| allocator | threads | alloc_p50 | × system | alloc_p99 | × system | alloc_p99.9 \
             | × system | alloc_p99.99 | × system | alloc_p99.999 | × system | alloc_max \
             | × system | alloc_max_steps | × system |"
        );
        assert!(
            header_after(workload, "`free_…`:").contains("| free_p99.999 | × system | free_max |")
        );
        assert_eq!(
            header_after(workload, "`remote_…`:"),
            "| allocator | threads | remote_free_p99.999 | × system | remote_free_max | × system |"
        );
        assert_eq!(
            header_after(workload, "other metrics:"),
            "| allocator | threads | peak_footprint | × system |"
        );
        // Steps where counted (alone, so not bold), a dash where not.
        let mi = row(workload, "`alloc_…`:", "mimalloc", 4);
        assert_eq!(mi[14], "12.00 (11.00–13.00) steps");
        assert_eq!(row(workload, "`alloc_…`:", "system", 4)[14], "—");
        assert_eq!(
            row(workload, "`free_…`:", "mimalloc", 4)[2],
            "**100.0** (99.00–101.0) ns"
        );
        // The clock cost is a note beside the figures, not a column.
        assert!(!md.contains("| clock_read"));
        assert!(
            workload.contains("`clock_read` was 29.50–33.00 ns in these runs"),
            "{workload}"
        );
        // The cpu suite, with two metrics, keeps one untitled table.
        assert_eq!(
            header_after(&md, "### cpu/larson"),
            "| allocator | threads | time | × system | peak_footprint | × system |"
        );
        assert!(!md[..md.find("## Suite `realtime`").unwrap()].contains("other metrics"));
    }

    #[test]
    fn a_one_workload_suite_has_no_mean_of_one_ratio() {
        let md = render_markdown(&sample_with_realtime());
        assert!(md.contains("### Suite `cpu`: geometric mean over workloads"));
        assert!(!md.contains("### Suite `realtime`: geometric mean"));
        assert!(md.contains("The suite has one workload, `latency`: its table above"));
    }

    #[test]
    fn single_operation_timing_is_named_not_warned_about() {
        let md = render_markdown(&sample_with_realtime());
        let section = &md[md.find("## Timer overhead").unwrap()..];
        let warning: Vec<&str> = section.lines().filter(|l| l.contains("WARNING")).collect();
        assert_eq!(warning.len(), 1);
        assert!(warning[0].contains("cpu/larson on mimalloc"));
        assert!(!warning[0].contains("realtime"), "{}", warning[0]);
        assert!(section.contains("realtime/latency times each allocator call on its own"));
        // The overhead itself is still listed.
        assert!(
            section.contains("| realtime/latency | 250.0 % |"),
            "{section}"
        );

        // Without the clock-read records the same overhead is warned about.
        let mut unqualified = sample_with_realtime();
        unqualified
            .records
            .retain(|r| r.metric != CLOCK_READ_METRIC);
        let md = render_markdown(&unqualified);
        let warning = md.lines().find(|l| l.contains("WARNING")).unwrap();
        assert!(warning.contains("realtime/latency on system (4 threads): 250.0 %"));
    }

    #[test]
    fn readme_section_of_a_one_workload_suite_shows_its_headline_ratios() {
        let section = render_readme_section(&sample_with_realtime());
        let heading = "#### Suite `realtime` (one workload, `latency`): ratio to system";
        assert_eq!(
            header_after(&section, heading),
            "| allocator | threads | alloc_p99.999 × system | alloc_max × system \
             | free_p99.999 × system | free_max × system |"
        );
        assert_eq!(row(&section, heading, "mimalloc", 4)[2..], ["0.50"; 4]);
        assert_eq!(row(&section, heading, "jemalloc", 4)[2..], ["2.00"; 4]);
        assert!(section.contains("`clock_read` was 29.50–33.00 ns"));
        // No per-workload table repeating the same ratios.
        assert!(!section.contains("Suite `realtime`: `"));
        assert!(!section.contains("| latency |"));
        // The cpu suite keeps its mean and its time table.
        assert!(section.contains("#### Suite `cpu`: `time` × system per workload"));
    }

    #[test]
    fn charts_of_many_metrics_draw_the_headline_panels_only() {
        let dir = scratch("chart-headline");
        let path = dir.join("chart.svg");
        write_chart_svg(&sample_with_realtime(), "realtime", "latency", &path).unwrap();
        let svg = fs::read_to_string(&path).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let panels: Vec<&str> = svg
            .match_indices(" (lower is better)")
            .map(|(i, _)| {
                let start = svg[..i].rfind('>').unwrap() + 1;
                svg[start..i].trim()
            })
            .collect();
        assert_eq!(
            panels,
            ["alloc_p99.999", "alloc_max", "free_p99.999", "free_max"]
        );
    }

    #[test]
    fn tables_split_by_family_only_when_there_are_many_metrics() {
        let few = split_into_tables(vec!["time", "peak_footprint", "x_a", "x_b"], |m| m);
        assert_eq!(few, [(None, vec!["time", "peak_footprint", "x_a", "x_b"])]);
        let many = split_into_tables(
            vec![
                "alloc_p50",
                "free_p50",
                "alloc_max",
                "peak_footprint",
                "free_max",
                "time",
            ],
            |m| m,
        );
        assert_eq!(
            many,
            [
                (Some("`alloc_…`".to_owned()), vec!["alloc_p50", "alloc_max"]),
                (Some("`free_…`".to_owned()), vec!["free_p50", "free_max"]),
                (
                    Some("other metrics".to_owned()),
                    vec!["peak_footprint", "time"]
                ),
            ]
        );
    }

    #[test]
    fn ratios_and_bold_in_workload_tables() {
        let md = render_markdown(&sample());
        // Columns: allocator, threads, time, ×, peak, ×, overhead, ×.
        let sys = row(&md, "### cpu/larson", "system", 2);
        let mi = row(&md, "### cpu/larson", "mimalloc", 2);
        let je = row(&md, "### cpu/larson", "jemalloc", 2);
        assert_eq!(sys[2], "100.0 (90.00–110.0) ms");
        assert_eq!(sys[3], "1.00");
        assert_eq!(mi[2], "**80.00** (72.00–88.00) ms");
        assert_eq!(mi[3], "0.80");
        assert_eq!(je[2], "125.0 (112.5–137.5) ms");
        assert_eq!(je[3], "1.25");
        // Peak footprint: jemalloc is best (lowest).
        assert_eq!(je[4], "**8.00** (7.20–8.80) MiB");
        assert_eq!(mi[5], "1.20");
        assert!(!sys[4].contains("**") && !mi[4].contains("**"));
        // A tie bolds both.
        let sys = row(&md, "### cpu/cache", "system", 2);
        let mi = row(&md, "### cpu/cache", "mimalloc", 2);
        let je = row(&md, "### cpu/cache", "jemalloc", 2);
        assert!(sys[4].starts_with("**4.00**") && mi[4].starts_with("**4.00**"));
        assert!(!je[4].contains("**"));
        assert_eq!(mi[3], "2.00");
        assert_eq!(je[3], "0.50");
        assert!(
            md.contains("| allocator | threads | time | × system | peak_footprint | × system |")
        );
    }

    #[test]
    fn higher_is_better_bolds_the_largest_and_missing_baseline_gives_dash() {
        let mut results = sample();
        results
            .records
            .push(record("larson", "mimalloc", 2, "throughput", 300.0));
        results
            .records
            .push(record("larson", "jemalloc", 2, "throughput", 200.0));
        // A thread count the baseline did not run.
        results
            .records
            .push(record("larson", "mimalloc", 4, "time", 60.0));
        let md = render_markdown(&results);
        let mi = row(&md, "### cpu/larson", "mimalloc", 2);
        let je = row(&md, "### cpu/larson", "jemalloc", 2);
        let sys = row(&md, "### cpu/larson", "system", 2);
        // Unknown metrics come after the known ones; timer overhead is not a comparison
        // column.
        assert!(md.contains("| peak_footprint | × system | throughput | × system |"));
        assert!(!md.contains("| timer_overhead |"));
        assert!(mi[6].starts_with("**300.0**"), "{mi:?}");
        assert!(!je[6].contains("**"));
        assert_eq!((mi[7].as_str(), sys[6].as_str()), ("—", "—"));
        let mi4 = row(&md, "### cpu/larson", "mimalloc", 4);
        // Alone at 4 threads: no bold, no ratio.
        assert_eq!(mi4[2], "60.00 (54.00–66.00) ms");
        assert_eq!(mi4[3], "—");
        assert_eq!(row(&md, "### cpu/larson", "system", 4)[2], "—");
    }

    #[test]
    fn sweep_points_get_a_table_and_a_chart_and_each_suite_its_own_baseline() {
        let mut results = sample();
        results.header.parameters.suites.push("hls".into());
        for (allocator, failures) in [("hls-bitmap", 100.0), ("hls-defrag", 60.0)] {
            let mut push = |metric: String, median: f64| {
                results.records.push(Record {
                    suite: "hls".into(),
                    workload: "mixed-kernels".into(),
                    allocator: allocator.into(),
                    threads: 1,
                    metric,
                    unit: "failures".into(),
                    median,
                    min: median,
                    max: median,
                    runs: 1,
                    lower_is_better: true,
                });
            };
            push("failures_total".into(), failures);
            for (x, f) in [(4096, failures * 2.0), (8192, failures / 2.0)] {
                push(format!("failures_total{SWEEP_SEPARATOR}{x}"), f);
            }
        }
        let md = render_markdown(&results);
        // The cpu suite still divides by system, the hls suite by its own first allocator.
        let defrag = row(&md, "### hls/mixed-kernels", "hls-defrag", 1);
        assert_eq!(defrag[3], "0.60", "{defrag:?}");
        assert!(md.contains("| allocator | threads | failures_total | × hls-bitmap |"));
        assert!(
            !md.contains("| failures_total@"),
            "sweep points are no columns"
        );
        assert!(md.contains("| failures_total hls-bitmap | failures_total hls-defrag |"));
        assert!(md.contains("| 4096 | 200.0 | 120.0 |"), "{md}");
        assert!(md.contains("(hls-mixed-kernels-sweep.svg)"));
        let dir = std::env::temp_dir().join(format!("alloclab-sweep-{}", std::process::id()));
        let files = write_report(&dir, &results).unwrap();
        let sweep = dir.join("hls-mixed-kernels-sweep.svg");
        assert!(files.charts.contains(&sweep));
        let svg = fs::read_to_string(&sweep).unwrap();
        assert!(svg.contains("hls-defrag") && svg.contains("heap size"));
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(
            sweep_point("failures_total@8064"),
            Some(("failures_total", 8064.0))
        );
        assert_eq!(sweep_point("alloc_p99.9"), None);
    }

    #[test]
    fn failed_measurements_are_listed_with_their_error() {
        let mut results = sample();
        assert!(!render_markdown(&results).contains("Failed measurements"));
        results.failures.push(crate::results::Failure {
            suite: "cpu".into(),
            workload: "larson".into(),
            allocator: "jemalloc".into(),
            threads: 2,
            run: 2,
            error: "worker killed by signal 9".into(),
        });
        let md = render_markdown(&results);
        assert!(md.contains("## Failed measurements"));
        assert!(
            md.contains("| cpu/larson on jemalloc | 2 | 2 | worker killed by signal 9 |"),
            "{md}"
        );
    }

    #[test]
    fn summary_is_the_geometric_mean_of_ratios() {
        let md = render_markdown(&sample());
        let heading = "### Suite `cpu`: geometric mean over workloads of the ratio to system";
        let sys = row(&md, heading, "system", 2);
        let mi = row(&md, heading, "mimalloc", 2);
        let je = row(&md, heading, "jemalloc", 2);
        assert_eq!(sys[2..], ["1.00", "1.00"]);
        // time: sqrt(0.8 × 2) = 1.265; sqrt(1.25 × 0.5) = 0.791.
        assert_eq!(mi[2], "1.26");
        assert_eq!(je[2], "0.79");
        // peak: sqrt(1.2 × 1) = 1.095; sqrt(0.8 × 1.25) = 1.
        assert_eq!(mi[3], "1.10");
        assert_eq!(je[3], "1.00");
        // Timer overhead is reported in its own section, not averaged as a ratio.
        assert_eq!(mi.len(), 4, "{mi:?}");
        // Every workload counted: no note about partial means.
        assert!(!md.contains("workloads)"));
    }

    #[test]
    fn summary_says_how_many_workloads_counted() {
        let mut results = sample();
        results.records.retain(|r| {
            !(r.workload == "cache" && r.allocator == "jemalloc" && r.metric == "time")
        });
        let md = render_markdown(&results);
        let heading = "### Suite `cpu`: geometric mean over workloads of the ratio to system";
        assert_eq!(row(&md, heading, "jemalloc", 2)[2], "1.25 (1/2 workloads)");
        assert_eq!(row(&md, heading, "mimalloc", 2)[2], "1.26");
        assert!(md.contains("“(k/n workloads)” says how many counted"));
    }

    #[test]
    fn geometric_mean_of_values() {
        assert!((geometric_mean(&[2.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
        assert!((geometric_mean(&[0.5, 2.0, 1.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((geometric_mean(&[3.0, 0.0, -1.0, f64::NAN]).unwrap() - 3.0).abs() < 1e-12);
        assert_eq!(geometric_mean(&[]), None);
        assert_eq!(geometric_mean(&[0.0]), None);
    }

    #[test]
    fn header_and_timer_overhead_note() {
        let md = render_markdown(&sample());
        assert!(
            md.contains("Test CPU 9000, 2 cores, 23.6 GiB memory"),
            "{md}"
        );
        assert!(md.contains("`7dea227` (dirty)"));
        assert!(md.contains("2026-11-30 00:53:20 UTC"), "{md}");
        assert!(md.contains("`alloclab suite --scale small`"));
        assert!(md.contains("scale small, 3 runs, threads 2, seed 42"));
        assert!(md.contains("21.50 ns"));
        assert!(
            md.contains(
                "median 6.50 % (cpu/larson, mimalloc, 2 threads); largest single run 7.15 %"
            ),
            "{md}"
        );
        let warning: Vec<&str> = md.lines().filter(|l| l.contains("WARNING")).collect();
        assert_eq!(warning.len(), 1);
        assert!(warning[0].contains("cpu/larson on mimalloc (2 threads): 6.50 %"));
        assert!(!warning[0].contains("system") && !warning[0].contains("cache"));

        let mut quiet = sample();
        quiet.header.commit_dirty = false;
        for r in &mut quiet.records {
            if r.metric == TIMER_OVERHEAD_METRIC {
                r.median = r.median.min(1.0);
            }
        }
        let md = render_markdown(&quiet);
        assert!(!md.contains("WARNING") && !md.contains("(dirty)"));
        assert!(md.contains("exceeds 5 %"));
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_utc(951_868_799), "2000-02-29 23:59:59 UTC");
        assert_eq!(format_utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
        assert_eq!(format_utc(4_102_444_800), "2100-01-01 00:00:00 UTC");
        assert_eq!(format_utc(1_796_000_000), "2026-11-30 00:53:20 UTC");
    }

    #[test]
    fn markdown_is_deterministic() {
        let results = sample();
        let md = render_markdown(&results);
        assert_eq!(md, render_markdown(&results));
        let mut shuffled = results.clone();
        shuffled.records.reverse();
        shuffled.records.swap(0, 7);
        assert_eq!(md, render_markdown(&shuffled));
        let readme = render_readme_section(&results);
        assert_eq!(readme, render_readme_section(&shuffled));
        // Allocators in the order asked for, workloads by name.
        let pos = |s: &str| md.find(s).unwrap();
        assert!(pos("| system | 2 |") < pos("| mimalloc | 2 |"));
        assert!(pos("| mimalloc | 2 |") < pos("| jemalloc | 2 |"));
        assert!(pos("### cpu/cache") < pos("### cpu/larson"));
    }

    #[test]
    fn readme_section_has_summary_and_time_ratios() {
        let section = render_readme_section(&sample());
        assert!(section.starts_with("Measured on Test CPU 9000 (2 cores, 23.6 GiB)"));
        assert!(section.contains("[report/report.md](report/report.md)"));
        let heading = "#### Suite `cpu`: `time` × system per workload";
        assert!(section.contains("| workload | threads | system | mimalloc | jemalloc |"));
        assert_eq!(
            row(&section, heading, "larson", 2)[2..],
            ["1.00", "**0.80**", "1.25"]
        );
        assert_eq!(
            row(&section, heading, "cache", 2)[2..],
            ["1.00", "2.00", "**0.50**"]
        );
        let summary = "#### Suite `cpu`: geometric mean over workloads of the ratio to system";
        assert_eq!(row(&section, summary, "mimalloc", 2)[2], "1.26");
        assert!(!section.contains("(min–max)") && !section.contains("WARNING"));
    }

    #[test]
    fn write_report_writes_every_file() {
        let dir = scratch("write-report").join("nested/report");
        let results = sample();
        let files = write_report(&dir, &results).unwrap();
        assert_eq!(files.paths.len(), 4);
        for p in &files.paths {
            assert!(p.is_file(), "{} missing", p.display());
        }
        assert_eq!(
            files.charts,
            [dir.join("cpu-cache.svg"), dir.join("cpu-larson.svg")]
        );
        let json = fs::read_to_string(&files.results_json).unwrap();
        let back: ResultsFile = serde_json::from_str(&json).unwrap();
        assert_eq!(back, results);
        assert_eq!(
            fs::read_to_string(&files.report_md).unwrap(),
            render_markdown(&results)
        );
        assert!(temp_files(&dir).is_empty());
        // Writing again replaces the files.
        write_report(&dir, &results).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 4);
        fs::remove_dir_all(dir.parent().unwrap().parent().unwrap()).unwrap();
    }

    /// serde_json parses floats exactly only with its `float_roundtrip` feature; without
    /// it a value such as `110.00000000000001` (what `100.0 * 1.1` prints as) comes back
    /// one ulp off, so `results.json` does not round-trip exactly.
    #[test]
    fn results_json_round_trips_every_float_exactly() {
        let dir = scratch("float-roundtrip");
        let path = dir.join("results.json");
        let mut results = sample();
        for r in &mut results.records {
            r.min = r.median * 0.9;
            r.max = r.median * 1.1;
        }
        write_results_json(&path, &results).unwrap();
        let back: ResultsFile = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back, results);
    }

    #[test]
    fn sweeps_over_three_decades_get_log_axes_and_negative_values_stay_in_view() {
        let mut results = sample();
        results.header.parameters.suites.push("gpu".into());
        let mut push = |metric: String, median: f64| {
            results.records.push(Record {
                suite: "gpu".into(),
                workload: "gpu-threads".into(),
                allocator: "gpu-queue".into(),
                threads: 1,
                metric,
                unit: "probes".into(),
                median,
                min: median,
                max: median,
                runs: 1,
                lower_is_better: true,
            });
        };
        for x in [1u32, 1024, 1 << 20] {
            push(format!("tas{SWEEP_SEPARATOR}{x}"), f64::from(x) / 2.0 + 0.5);
            push(format!("tas_error{SWEEP_SEPARATOR}{x}"), -1.5);
        }
        let view = View::new(&results);
        let sweeps = sweeps(&view, "gpu", "gpu-threads");
        let svg = render_sweep_svg(&sweeps, "gpu", "gpu-threads").unwrap();
        assert!(svg.contains("tas (lower is better; log axes)"), "{svg}");
        assert!(svg.contains("tas_error (lower is better; log x axis)"));
        assert!(svg.contains("requesting threads"));
        // An allocator of the suite that did not run this workload gets no row in its table.
        let mut other = results.records[results.records.len() - 1].clone();
        other.workload = "gpu-free-fraction".into();
        other.allocator = "gpu-rw".into();
        other.metric = "tas_error_max".into();
        results.records.push(other);
        let md = render_markdown(&results);
        assert!(md.contains("Sweep over the requesting threads"), "{md}");
        let start = md.find("### gpu/gpu-threads").unwrap();
        let end = start + md[start..].find("### Suite `gpu`").unwrap();
        let threads_section = &md[start..end];
        assert!(threads_section.contains("| gpu-queue | 1 |"), "{md}");
        assert!(!threads_section.contains("| gpu-rw |"), "{md}");
        assert!(md.contains("| gpu-rw | 1 |"), "{md}");
        // The README shows the gpu suite's values per workload, not a mean of ratios.
        let readme = render_readme_section(&results);
        let start = readme
            .find("#### Suite `gpu`: headline figures (median over the runs)")
            .expect("a values section for gpu");
        let gpu = &readme[start..];
        assert!(!gpu.contains("geometric mean"), "{readme}");
        assert!(gpu.contains("`gpu-free-fraction`:"), "{readme}");
        assert!(gpu.contains("| gpu-rw | 1 | -1.50"), "{readme}");
        // gpu-threads has sweep metrics only here: no empty table.
        assert!(!gpu.contains("`gpu-threads`:"), "{readme}");
    }

    #[test]
    fn suite_notes_are_printed_under_their_suite_and_optional_in_json() {
        let mut results = sample();
        let suite = results.header.parameters.suites[0].clone();
        results.notes.push(crate::results::SuiteNote {
            suite: suite.clone(),
            text: "CUDA: not run (no CUDA device: test)".into(),
        });
        let md = render_markdown(&results);
        let heading = md.find(&format!("## Suite `{suite}`")).unwrap();
        let note = md.find("CUDA: not run (no CUDA device: test)").unwrap();
        assert!(note > heading, "{md}");
        // A file written before notes existed has none; one without notes writes none.
        let json = serde_json::to_string(&sample()).unwrap();
        assert!(!json.contains("\"notes\""));
        let back: ResultsFile = serde_json::from_str(&json).unwrap();
        assert!(back.notes.is_empty());
    }

    #[test]
    fn chart_is_an_svg_naming_the_workload() {
        let dir = scratch("chart");
        let path = dir.join("chart.svg");
        let mut results = sample();
        write_chart_svg(&results, "cpu", "larson", &path).unwrap();
        let svg = fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("cpu/larson"));
        assert!(svg.contains("time (ms)") && svg.contains("peak_footprint (MiB)"));
        assert!(svg.contains("mimalloc") && svg.contains("jemalloc"));

        // Several thread counts: a legend per thread count.
        results
            .records
            .push(record("larson", "system", 4, "time", 70.0));
        write_chart_svg(&results, "cpu", "larson", &path).unwrap();
        let svg = fs::read_to_string(&path).unwrap();
        assert!(svg.contains("2 threads") && svg.contains("4 threads"));
        results
            .records
            .push(record("larson", "system", 1, "time", 70.0));
        write_chart_svg(&results, "cpu", "larson", &path).unwrap();
        let svg = fs::read_to_string(&path).unwrap();
        assert!(svg.contains("1 thread\n") && svg.contains("4 threads"));

        let err = write_chart_svg(&results, "cpu", "nope", &dir.join("nope.svg")).unwrap_err();
        assert!(matches!(err, ReportError::Chart { .. }));
        assert!(err.to_string().contains("no records for cpu/nope"));
        assert!(!dir.join("nope.svg").exists());
        assert!(temp_files(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn update_readme_replaces_only_the_section() {
        let dir = scratch("readme");
        let readme = dir.join("README.md");
        let before = format!(
            "# Title\n\nIntro.\n\n{README_BEGIN}\nold results\nmore\n{README_END}\n\n## After\n"
        );
        fs::write(&readme, &before).unwrap();
        update_readme(&readme, "new results\n").unwrap();
        let after = fs::read_to_string(&readme).unwrap();
        assert_eq!(
            after,
            format!("# Title\n\nIntro.\n\n{README_BEGIN}\nnew results\n{README_END}\n\n## After\n")
        );
        // Without a final newline the end marker still gets its own line.
        update_readme(&readme, "x").unwrap();
        assert!(
            fs::read_to_string(&readme)
                .unwrap()
                .contains(&format!("{README_BEGIN}\nx\n{README_END}\n"))
        );
        assert!(temp_files(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn update_readme_fails_clearly_on_bad_markers() {
        let dir = scratch("readme-bad");
        let readme = dir.join("README.md");
        let cases = [
            (
                format!("# Title\n{README_END}\n"),
                "`<!-- alloclab:results:begin -->` not found",
            ),
            (
                format!("# Title\n{README_BEGIN}\n"),
                "`<!-- alloclab:results:end -->` not found",
            ),
            (format!("{README_END}\nx\n{README_BEGIN}\n"), "comes before"),
            (
                format!("{README_BEGIN}\n{README_BEGIN}\n{README_END}\n"),
                "appears 2 times",
            ),
            // A marker inside a line of text is not a marker line.
            (
                format!("see {README_BEGIN} and\n{README_END}\n"),
                "begin -->` not found",
            ),
        ];
        for (text, expected) in cases {
            fs::write(&readme, &text).unwrap();
            let err = update_readme(&readme, "new\n").unwrap_err();
            assert!(matches!(err, ReportError::MissingMarkers { .. }));
            let msg = err.to_string();
            assert!(
                msg.starts_with(&format!("cannot update {}: ", readme.display())),
                "{msg}"
            );
            assert!(msg.contains(expected), "{msg}");
            assert!(!msg.contains('\n'));
            assert_eq!(fs::read_to_string(&readme).unwrap(), text, "README changed");
        }
        let err = update_readme(&dir.join("missing.md"), "x").unwrap_err();
        assert!(err.to_string().starts_with("cannot read "), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unwritable_paths_fail_and_leave_no_temp_files() {
        let dir = scratch("unwritable");
        let blocker = dir.join("blocker");
        fs::write(&blocker, "a regular file").unwrap();
        let results = sample();

        let err = write_report(&blocker.join("report"), &results).unwrap_err();
        assert!(
            matches!(
                err,
                ReportError::Io {
                    action: "create directory",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().starts_with(&format!(
            "cannot create directory {}",
            blocker.join("report").display()
        )));

        let target = blocker.join("results.json");
        let err = write_results_json(&target, &results).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("cannot write {}: ", target.display())),
            "{msg}"
        );
        assert!(!msg.contains('\n'));
        assert!(std::error::Error::source(&err).is_some());

        // The temporary file is written, but the rename onto a directory fails: the
        // temporary file must go.
        let target = dir.join("occupied");
        fs::create_dir(&target).unwrap();
        let err = write_results_json(&target, &results).unwrap_err();
        assert!(matches!(err, ReportError::Io { .. }));
        assert!(temp_files(&dir).is_empty(), "{:?}", temp_files(&dir));
        assert!(target.is_dir());
        assert_eq!(fs::read_to_string(&blocker).unwrap(), "a regular file");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn chart_file_names_are_safe() {
        assert_eq!(chart_file_name("cpu", "larson"), "cpu-larson.svg");
        assert_eq!(chart_file_name("cpu", "a/b c"), "cpu-a_b_c.svg");
    }

    #[test]
    fn values_are_formatted_compactly() {
        assert_eq!(fmt_value(0.0), "0");
        assert_eq!(fmt_value(1234.5), "1234");
        assert_eq!(fmt_value(101.25), "101.2");
        assert_eq!(fmt_value(21.5), "21.50");
        assert_eq!(fmt_value(0.5), "0.500");
        assert_eq!(fmt_value(0.01234), "0.0123");
        assert_eq!(fmt_value(0.00001234), "1.23e-5");
        assert_eq!(fmt_tick(100.0), "100");
        assert_eq!(fmt_tick(2.5), "2.5");
        assert_eq!(fmt_tick(1200.0), "1200");
        assert_eq!(code_span("a`b"), "``a`b``");
    }
}
