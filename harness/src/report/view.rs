//! The records of a results file, indexed, in the orders the report uses.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::results::{Record, ResultsFile};

/// (suite, workload, allocator, threads, metric).
pub(super) type Key<'a> = (&'a str, &'a str, &'a str, usize, &'a str);

/// What a table needs to know about a metric.
#[derive(Clone, Debug)]
pub(super) struct MetricInfo<'a> {
    pub(super) name: &'a str,
    pub(super) unit: &'a str,
    pub(super) lower_is_better: bool,
}

/// The records of a file, indexed, with the orders the report uses.
pub(crate) struct View<'a> {
    pub(super) results: &'a ResultsFile,
    /// The first record of each key (later duplicates are ignored).
    pub(super) map: BTreeMap<Key<'a>, &'a Record>,
    /// `parameters.allocators`, then any other allocator of the records, by name.
    pub(super) allocators: Vec<&'a str>,
    /// The allocator every ratio of a suite divides by: the first of `allocators` with
    /// records in that suite.
    pub(super) baselines: BTreeMap<&'a str, &'a str>,
    /// `parameters.suites` that have records, then any other suite, by name.
    pub(super) suites: Vec<&'a str>,
    /// How each suite is laid out.
    pub(super) layout: &'static ReportLayout,
}

impl<'a> View<'a> {
    pub(crate) fn new(results: &'a ResultsFile) -> Self {
        Self::with_layout(results, &ReportLayout::PLAIN)
    }

    /// The records of `results`, with each suite's ratios to the baseline its `layout`
    /// names, where that allocator ran.
    pub(crate) fn with_layout(results: &'a ResultsFile, layout: &'static ReportLayout) -> Self {
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
        for suite in layout.suites {
            if let Some(base) = suite.baseline
                && results
                    .records
                    .iter()
                    .any(|r| r.suite == suite.suite && r.allocator == base)
            {
                baselines.insert(suite.suite, base);
            }
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
            layout,
        }
    }

    /// The records of `suite`, and of `workload` if given.
    pub(super) fn records_in<'s>(
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

    /// The points (x, median) of the sweep of `base` (metrics `<base>@<x>`) that
    /// `allocator` ran in `suite`/`workload`, x ascending; points without a finite median
    /// are left out.
    pub(crate) fn sweep_of(
        &self,
        suite: &str,
        workload: &str,
        allocator: &str,
        base: &str,
    ) -> Vec<(f64, f64)> {
        let mut points: Vec<(f64, f64)> = self
            .records_in(suite, Some(workload))
            .filter(|r| r.allocator == allocator)
            .filter_map(|r| {
                let (b, x) = sweep_point(&r.metric)?;
                (b == base && r.median.is_finite()).then_some((x, r.median))
            })
            .collect();
        points.sort_by(|p, q| p.0.total_cmp(&q.0));
        points
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
    pub(super) fn metrics_in(&self, suite: &str, workload: Option<&str>) -> Vec<MetricInfo<'a>> {
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
    pub(super) fn ratio(
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
    pub(super) fn geomean(
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
    pub(super) fn baseline(&self, suite: &str) -> Option<&'a str> {
        self.baselines.get(suite).copied()
    }

    /// The header name of the ratio columns of `suite`.
    pub(super) fn ratio_header(&self, suite: &str) -> String {
        format!("× {}", self.baseline(suite).unwrap_or("first"))
    }
}

/// The lowest `min` and the highest `max` of `records`, finite values only: the range a
/// figure took over every run of them. `None` if there is none.
pub(crate) fn range_over_runs<'r>(
    records: impl IntoIterator<Item = &'r Record>,
) -> Option<(f64, f64)> {
    records
        .into_iter()
        .map(|r| (r.min, r.max))
        .fold(None, |range, (min, max)| {
            let (lo, hi) = range.unwrap_or((f64::INFINITY, f64::NEG_INFINITY));
            let lo = if min.is_finite() { lo.min(min) } else { lo };
            let hi = if max.is_finite() { hi.max(max) } else { hi };
            Some((lo, hi))
        })
        .filter(|(lo, hi)| lo.is_finite() && hi.is_finite())
}

/// Sort key of a metric: its position in [`METRIC_ORDER`], then its name.
pub(super) fn metric_rank(name: &str) -> (usize, &str) {
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
pub(super) fn headline<'a>(mut metrics: Vec<MetricInfo<'a>>) -> Vec<MetricInfo<'a>> {
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
pub(super) fn family(metric: &str) -> &str {
    metric.split_once('_').map_or(metric, |(family, _)| family)
}

/// `metrics` split into the tables of `report.md`; see [`split_into_tables`].
pub(super) fn metric_tables<'a>(
    metrics: &[MetricInfo<'a>],
) -> Vec<(Option<String>, Vec<MetricInfo<'a>>)> {
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
pub(super) fn ratio_of(value: f64, base: f64) -> Option<f64> {
    let r = value / base;
    (base != 0.0 && r.is_finite()).then_some(r)
}

pub(super) fn geometric_mean_of_logs(logs: &[f64]) -> Option<f64> {
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
pub(super) fn is_best(value: f64, values: &[f64], lower_is_better: bool) -> bool {
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
