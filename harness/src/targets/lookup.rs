//! What the host heaps' targets share: the run's records looked up by key, and the checks
//! several targets make (a geometric mean of time ratios, a ratio on every workload).

use super::{Check, Verdict};
use crate::report::View;
use crate::results::{Record, ResultsFile};

/// The suites and allocators the host heaps' targets name.
pub(super) const CPU: &str = "cpu";
pub(super) const PROGRAMS: &str = "programs";
pub(super) const REALTIME: &str = "realtime";
pub(super) const SECURITY: &str = "security";
pub(super) const WFSPAN: &str = "wfspan";
pub(super) const RANDOMIZED: &str = "randomized";
pub(super) const MIMALLOC: &str = "mimalloc";
pub(super) const SYSTEM: &str = "system";
/// The peers' shared libraries, which the `programs` suite preloads as it does alloclab's.
pub(super) const LIBMIMALLOC: &str = "libmimalloc";
pub(super) const LIBJEMALLOC: &str = "libjemalloc";

/// The records of one run, looked up by (suite, workload, allocator, threads, metric).
pub(super) struct Lookup<'a> {
    pub(super) records: &'a [Record],
    pub(super) view: View<'a>,
}

impl<'a> Lookup<'a> {
    pub(super) fn new(results: &'a ResultsFile) -> Self {
        Self {
            records: &results.records,
            view: View::new(results),
        }
    }

    /// The median of (suite, workload, allocator, threads, metric), if finite.
    pub(super) fn median(
        &self,
        suite: &str,
        workload: &str,
        allocator: &str,
        t: usize,
        metric: &str,
    ) -> Option<f64> {
        self.view
            .get(suite, workload, allocator, t, metric)
            .map(|r| r.median)
            .filter(|v| v.is_finite())
    }

    /// Whether `allocator` has any record in `suite`.
    pub(super) fn ran(&self, suite: &str, allocator: &str) -> bool {
        self.records
            .iter()
            .any(|r| r.suite == suite && r.allocator == allocator)
    }

    pub(super) fn suite_ran(&self, suite: &str) -> bool {
        self.records.iter().any(|r| r.suite == suite)
    }

    /// The workloads of `suite`, by name.
    pub(super) fn workloads(&self, suite: &str) -> Vec<&'a str> {
        self.view.workloads(suite)
    }

    /// The thread counts `allocator` ran `suite` at, ascending.
    pub(super) fn threads(&self, suite: &str, allocator: &str) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .records
            .iter()
            .filter(|r| r.suite == suite && r.allocator == allocator)
            .map(|r| r.threads)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The metrics `allocator` reported for `workload` of `suite`, in record order.
    pub(super) fn metrics(&self, suite: &str, workload: &str, allocator: &str) -> Vec<&'a str> {
        let mut out: Vec<&str> = Vec::new();
        for r in self
            .records
            .iter()
            .filter(|r| r.suite == suite && r.workload == workload && r.allocator == allocator)
        {
            if !out.contains(&r.metric.as_str()) {
                out.push(&r.metric);
            }
        }
        out
    }
}

/// A `·` check for `what`, saying why this run does not decide it.
pub(super) fn not_here(what: &str, why: &str) -> Check {
    Check {
        verdict: Verdict::NotHere,
        line: format!("{what}: not decided by this run ({why})"),
    }
}

/// The ratio `ours / theirs` of `metric` on every workload of `suite` both ran, per thread
/// count both ran at: `(workload, threads, ratio)`, the median of the run-by-run ratios
/// ([`RunRatio`](crate::results::RunRatio)).
pub(super) fn ratios(
    view: &Lookup<'_>,
    suite: &str,
    metric: &str,
    ours: &str,
    theirs: &str,
) -> Vec<(String, usize, f64)> {
    paired(view, suite, metric, ours, theirs)
        .into_iter()
        .map(|p| (p.workload, p.threads, p.ratio))
        .collect()
}

/// One workload's comparison: the median of the run-by-run ratios and each run's ratio.
pub(super) struct Paired {
    pub(super) workload: String,
    pub(super) threads: usize,
    pub(super) ratio: f64,
    /// Each run's ratio, in run order; empty when the runs could not be paired.
    pub(super) runs: Vec<f64>,
}

/// [`ratios`], with each run's ratio.
pub(super) fn paired(
    view: &Lookup<'_>,
    suite: &str,
    metric: &str,
    ours: &str,
    theirs: &str,
) -> Vec<Paired> {
    let mut out = Vec::new();
    for workload in view.workloads(suite) {
        for t in view.threads(suite, ours) {
            let a = view.view.get(suite, workload, ours, t, metric);
            let b = view.view.get(suite, workload, theirs, t, metric);
            let Some((a, b)) = a.zip(b) else { continue };
            if let Some(r) = a.ratio_to(b) {
                let runs = a.run_ratios(b).unwrap_or_default();
                out.push(Paired {
                    workload: workload.to_owned(),
                    threads: t,
                    ratio: r.median,
                    runs,
                });
            }
        }
    }
    out
}

/// The fewest paired runs of every workload for [`mean_interval`] to resample.
pub(super) const RESAMPLE_MIN_RUNS: usize = 3;
/// Resamples drawn by [`mean_interval`].
const RESAMPLES: usize = 1000;

/// Where the geometric mean over workloads of each workload's median run-by-run ratio
/// lands when each workload's runs are drawn again with replacement (a bootstrap of
/// [`RESAMPLES`] draws from a fixed seed, so the same records give the same figures): its
/// 5th and 95th percentiles. How far one run of the suite can move the mean on this
/// machine, from the runs themselves. A workload with fewer than [`RESAMPLE_MIN_RUNS`]
/// paired runs (a run that failed, records without per-run values) stays at its ratio in
/// every draw; `None` when no workload has enough runs to draw from.
pub(super) fn mean_interval(workloads: &[&Paired]) -> Option<(f64, f64)> {
    if !workloads.iter().any(|p| p.runs.len() >= RESAMPLE_MIN_RUNS) {
        return None;
    }
    let mut rng = alloclab_core::rng::SplitMix64::new(0x5eed_b007_57a9);
    let mut means = Vec::with_capacity(RESAMPLES);
    let mut draw = Vec::new();
    for _ in 0..RESAMPLES {
        let mut log_sum = 0.0;
        for p in workloads {
            let runs = &p.runs;
            if runs.len() < RESAMPLE_MIN_RUNS {
                log_sum += p.ratio.ln();
                continue;
            }
            draw.clear();
            draw.extend((0..runs.len()).map(|_| runs[rng.below(runs.len())]));
            draw.sort_by(f64::total_cmp);
            log_sum += crate::results::median_of_sorted(&draw).ln();
        }
        means.push((log_sum / workloads.len() as f64).exp());
    }
    means.sort_by(f64::total_cmp);
    Some((means[RESAMPLES / 20], means[RESAMPLES - 1 - RESAMPLES / 20]))
}

/// `(workload, threads, ours, theirs)`: the medians of `metric` of both, over every
/// workload (and thread count of `ours`) of `suite` both ran, `theirs` positive.
pub(super) fn medians(
    view: &Lookup<'_>,
    suite: &str,
    metric: &str,
    ours: &str,
    theirs: &str,
) -> Vec<(String, usize, f64, f64)> {
    let mut out = Vec::new();
    for workload in view.workloads(suite) {
        for t in view.threads(suite, ours) {
            let a = view.median(suite, workload, ours, t, metric);
            let b = view.median(suite, workload, theirs, t, metric);
            if let Some((a, b)) = a.zip(b).filter(|(_, b)| *b > 0.0) {
                out.push((workload.to_owned(), t, a, b));
            }
        }
    }
    out
}

/// Why a comparison of `ours` with `theirs` on `suite` cannot be made here, if it cannot.
pub(super) fn missing(
    view: &Lookup<'_>,
    suite: &str,
    ours: &str,
    theirs: &[&str],
) -> Option<String> {
    if !view.suite_ran(suite) {
        return Some(format!("suite `{suite}` not run"));
    }
    let absent: Vec<&str> = std::iter::once(ours)
        .chain(theirs.iter().copied())
        .filter(|a| !view.ran(suite, a))
        .collect();
    (!absent.is_empty()).then(|| format!("not run on `{suite}`: {}", absent.join(", ")))
}

/// The comparisons of [`paired`], or the `·` check for `what` saying why there are none
/// (the suite or an allocator not run, or no workload both measured).
fn compared(
    view: &Lookup<'_>,
    suite: &str,
    metric: &str,
    what: &str,
    ours: &str,
    theirs: &str,
) -> Result<Vec<Paired>, Check> {
    if let Some(why) = missing(view, suite, ours, &[theirs]) {
        return Err(not_here(what, &why));
    }
    let all = paired(view, suite, metric, ours, theirs);
    if all.is_empty() {
        return Err(not_here(
            what,
            &format!("no workload with {metric} of both"),
        ));
    }
    Ok(all)
}

/// `≤ limit` on the geometric mean of `ours / theirs` of `metric` over every workload (and
/// thread count) of `suite` both ran; `what` names the figure.
///
/// With [`RESAMPLE_MIN_RUNS`] or more paired runs of any workload the check is decided by
/// [`mean_interval`]: met when the whole interval is at most `limit`, missed when it is
/// all above, and otherwise undecided (`·`), saying how far the runs reach. On a shared
/// machine one run of a suite of short programs moves such a mean by several percent.
pub(super) fn mean_over_workloads_check(
    view: &Lookup<'_>,
    suite: &str,
    metric: &str,
    what: String,
    ours: &str,
    theirs: &str,
    limit: f64,
) -> Check {
    let all = match compared(view, suite, metric, &what, ours, theirs) {
        Ok(all) => all,
        Err(undecided) => return undecided,
    };
    let mean = (all.iter().map(|p| p.ratio.ln()).sum::<f64>() / all.len() as f64).exp();
    let workloads: Vec<&Paired> = all.iter().collect();
    let Some((lo, hi)) = mean_interval(&workloads) else {
        return Check {
            verdict: Verdict::of(mean <= limit),
            line: format!("{what}: {mean:.3} ({} workloads)", all.len()),
        };
    };
    let figure = format!(
        "{mean:.3} ({} workloads; {lo:.3}–{hi:.3} in 90% of the runs resampled)",
        all.len()
    );
    if hi <= limit || lo > limit {
        Check {
            verdict: Verdict::of(hi <= limit),
            line: format!("{what}: {figure}"),
        }
    } else {
        Check {
            verdict: Verdict::NotHere,
            line: format!("{what}: not decided by this run: {figure}, on both sides of {limit}"),
        }
    }
}

/// `≤ limit` on the geometric mean over workloads of `ours / theirs` time, worst thread count.
pub(super) fn time_mean_check(view: &Lookup<'_>, ours: &str, theirs: &str, limit: f64) -> Check {
    let what = format!(
        "`{CPU}`: geometric mean over the workloads of {ours}'s time over {theirs}'s <= {limit}"
    );
    if let Some(why) = missing(view, CPU, ours, &[theirs]) {
        return not_here(&what, &why);
    }
    let all = ratios(view, CPU, "time", ours, theirs);
    let mut worst: Option<(f64, usize, usize)> = None;
    for t in view.threads(CPU, ours) {
        let logs: Vec<f64> = all
            .iter()
            .filter(|(_, at, _)| *at == t)
            .map(|(_, _, r)| r.ln())
            .collect();
        if logs.is_empty() {
            continue;
        }
        let mean = (logs.iter().sum::<f64>() / logs.len() as f64).exp();
        if worst.is_none_or(|(w, _, _)| mean > w) {
            worst = Some((mean, t, logs.len()));
        }
    }
    match worst {
        None => not_here(
            &what,
            &format!("no workload with times of both {ours} and {theirs}"),
        ),
        Some((mean, t, n)) => Check {
            verdict: Verdict::of(mean <= limit),
            line: format!("{what}: {mean:.2} ({n} workloads, {t} threads)"),
        },
    }
}

/// `≤ limit` on `ours / theirs` of `metric` on every workload of `suite`: the worst one
/// decides.
///
/// A workload with [`RESAMPLE_MIN_RUNS`] or more paired runs is judged, as
/// [`mean_over_workloads_check`] judges a mean, by where the median of its runs lands when
/// they are drawn again ([`mean_interval`] of the one workload): beyond the limit when the
/// middle 90% of the draws are, within it when they are, and otherwise undecided (`·`,
/// with the range), unless another workload is beyond it (`✗`, the undecided ones named
/// after those beyond).
pub(super) fn every_workload_check(
    view: &Lookup<'_>,
    suite: &str,
    metric: &str,
    what: String,
    ours: &str,
    theirs: &str,
    limit: f64,
) -> Check {
    let all = match compared(view, suite, metric, &what, ours, theirs) {
        Ok(all) => all,
        Err(undecided) => return undecided,
    };
    let Some(worst) = all.iter().max_by(|a, b| a.ratio.total_cmp(&b.ratio)) else {
        return not_here(&what, &format!("no workload with {metric} of both"));
    };
    let name = |p: &Paired| {
        format!(
            "{} {:.2}{}",
            p.workload,
            p.ratio,
            at_threads(view, suite, ours, p.threads)
        )
    };
    let mut over = Vec::new();
    let mut unsure = Vec::new();
    for p in &all {
        match mean_interval(&[p]) {
            Some((lo, _)) if lo > limit => over.push(name(p)),
            Some((lo, hi)) if hi > limit => {
                unsure.push(format!("{} (resampled {lo:.2}–{hi:.2})", name(p)));
            }
            Some(_) => {}
            None if p.ratio > limit => over.push(name(p)),
            None => {}
        }
    }
    let (verdict, detail) = if !over.is_empty() {
        // The workloads this run cannot place are named too: a fix for those above must
        // not pass for the whole check.
        let undecided = if unsure.is_empty() {
            String::new()
        } else {
            format!("; not decided on {}", unsure.join(", "))
        };
        (
            Verdict::Fail,
            format!("above on {}{undecided}", over.join(", ")),
        )
    } else if !unsure.is_empty() {
        (
            Verdict::NotHere,
            format!(
                "not decided by this run: its runs resampled reach both sides of {limit} on {}",
                unsure.join(", ")
            ),
        )
    } else {
        (
            Verdict::Pass,
            format!(
                "highest {:.2} ({}{})",
                worst.ratio,
                worst.workload,
                at_threads(view, suite, ours, worst.threads)
            ),
        )
    };
    Check {
        verdict,
        line: format!("{what}: {detail}"),
    }
}

/// `, N threads` where `ours` ran `suite` at more than one thread count.
pub(super) fn at_threads(view: &Lookup<'_>, suite: &str, ours: &str, t: usize) -> String {
    if view.threads(suite, ours).len() > 1 {
        format!(", {t} threads")
    } else {
        String::new()
    }
}

/// The size in a security metric's name (`entropy_steady_64` → 64).
pub(super) fn size_of_metric(metric: &str, prefix: &str) -> Option<usize> {
    metric.strip_prefix(prefix)?.parse().ok()
}

/// The randomized allocator's medians of the `security` metrics named `prefix` + a size,
/// as (size, median), over every workload and thread count.
pub(super) fn sized_figures(view: &Lookup<'_>, prefix: &str) -> Vec<(usize, f64)> {
    let mut figures = Vec::new();
    for workload in view.workloads(SECURITY) {
        for metric in view.metrics(SECURITY, workload, RANDOMIZED) {
            let Some(size) = size_of_metric(metric, prefix) else {
                continue;
            };
            for t in view.threads(SECURITY, RANDOMIZED) {
                if let Some(v) = view.median(SECURITY, workload, RANDOMIZED, t, metric) {
                    figures.push((size, v));
                }
            }
        }
    }
    figures
}
