//! The must-reach checks of the host-heap issues, computed from a run's records: what the
//! wfspan issue (3) and the randomized allocator's issue (4) ask of the `cpu`, `realtime`
//! and `security` suites, each as a ✓ / ✗ / · line that names the figure it was decided by.
//!
//! The terminal summary, `report.md` and the README's results show them, so that a run says
//! by itself whether a change kept the targets (the storage and training suites have their
//! own: [`storage::report::targets`](crate::workloads::storage::report::targets),
//! [`training::must_reach`](crate::workloads::training::must_reach)).
//!
//! A check is decided only where this run measured everything it covers; otherwise it is
//! `·` and says what is missing (a suite not run, an allocator not asked for, the realtime
//! suite not run at 4× the cores). Every figure is a median over the run's runs, and every
//! ratio compares medians of the same run.

use std::fmt::Write as _;

use crate::report::{View, fmt_value};
use crate::results::{Record, ResultsFile};

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Met on every figure it covers.
    Pass,
    /// Missed (or figures missing).
    Fail,
    /// Not decided by this run.
    NotHere,
}

impl Verdict {
    /// `✓`, `✗` or `·`.
    pub fn mark(self) -> &'static str {
        match self {
            Verdict::Pass => "✓",
            Verdict::Fail => "✗",
            Verdict::NotHere => "·",
        }
    }

    fn of(ok: bool) -> Self {
        if ok { Verdict::Pass } else { Verdict::Fail }
    }
}

/// One must-reach check: its verdict and a line saying what was compared.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// The verdict.
    pub verdict: Verdict,
    /// What the check asks, then the figure that decided it.
    pub line: String,
}

/// The checks of one issue.
#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    /// `wfspan (issue 3)`.
    pub title: &'static str,
    /// Its checks, in the order.
    pub checks: Vec<Check>,
}

const CPU: &str = "cpu";
const REALTIME: &str = "realtime";
const SECURITY: &str = "security";
const WFSPAN: &str = "wfspan";
const RANDOMIZED: &str = "randomized";
const MIMALLOC: &str = "mimalloc";
const SYSTEM: &str = "system";

/// Issue 3: wfspan's time over mimalloc's, geometric mean over the `cpu` workloads.
pub const WFSPAN_TIME_VS_MIMALLOC: f64 = 1.0;
/// Issue 3: no `cpu` workload slower than glibc's malloc by more than this factor.
pub const WFSPAN_TIME_VS_SYSTEM: f64 = 1.1;
/// Issue 3: peak footprint within this factor of mimalloc's on every `cpu` workload.
pub const WFSPAN_FOOTPRINT_VS_MIMALLOC: f64 = 1.5;
/// Issue 3: the allocators wfspan's realtime tail must be lower than.
pub const REALTIME_PEERS: &[&str] = &["system", "mimalloc", "jemalloc", "rlsf", "wf_alloc"];
/// Issue 3: the realtime figures that must be wfspan's lowest.
pub const REALTIME_METRICS: &[&str] = &["alloc_p99.999", "alloc_max", "free_p99.999", "free_max"];
/// Issue 3: the oversubscription of the realtime check (threads per core).
pub const REALTIME_OVERSUBSCRIPTION: usize = 4;
/// Issue 4: the least steady-state placement entropy, bits, for sizes up to
/// [`ENTROPY_MAX_SIZE`].
pub const ENTROPY_MIN_BITS: f64 = 8.0;
/// Issue 4: the sizes the entropy check covers.
pub const ENTROPY_MAX_SIZE: usize = 1024;
/// Issue 4: the highest probability that the next allocation of a size returns the block
/// freed just before.
pub const REUSE_MAX: f64 = 1.0 / 256.0;
/// Issue 4: the misuse cases that must all be caught (the double and invalid frees).
pub const CAUGHT_PREFIXES: &[&str] = &["double_free_", "invalid_free_"];
/// Issue 4: its time over glibc's, geometric mean over the `cpu` workloads.
pub const RANDOMIZED_TIME_VS_SYSTEM: f64 = 1.5;
/// Issue 4: peak footprint within this factor of glibc's on every `cpu` workload.
pub const RANDOMIZED_FOOTPRINT_VS_SYSTEM: f64 = 1.5;

/// The records of one run, looked up by (suite, workload, allocator, threads, metric).
struct Lookup<'a> {
    records: &'a [Record],
    view: View<'a>,
}

impl<'a> Lookup<'a> {
    fn new(results: &'a ResultsFile) -> Self {
        Self {
            records: &results.records,
            view: View::new(results),
        }
    }

    /// The median of (suite, workload, allocator, threads, metric), if finite.
    fn median(
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
    fn ran(&self, suite: &str, allocator: &str) -> bool {
        self.records
            .iter()
            .any(|r| r.suite == suite && r.allocator == allocator)
    }

    fn suite_ran(&self, suite: &str) -> bool {
        self.records.iter().any(|r| r.suite == suite)
    }

    /// The workloads of `suite`, by name.
    fn workloads(&self, suite: &str) -> Vec<&'a str> {
        self.view.workloads(suite)
    }

    /// The thread counts `allocator` ran `suite` at, ascending.
    fn threads(&self, suite: &str, allocator: &str) -> Vec<usize> {
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
    fn metrics(&self, suite: &str, workload: &str, allocator: &str) -> Vec<&'a str> {
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
fn not_here(what: &str, why: &str) -> Check {
    Check {
        verdict: Verdict::NotHere,
        line: format!("{what}: not decided by this run ({why})"),
    }
}

/// The ratio `ours / theirs` of `metric` on every workload of `suite` both ran, per thread
/// count both ran at: `(workload, threads, ratio)`.
fn ratios(
    view: &Lookup<'_>,
    suite: &str,
    metric: &str,
    ours: &str,
    theirs: &str,
) -> Vec<(String, usize, f64)> {
    let mut out = Vec::new();
    for workload in view.workloads(suite) {
        for t in view.threads(suite, ours) {
            let a = view.median(suite, workload, ours, t, metric);
            let b = view.median(suite, workload, theirs, t, metric);
            if let Some((a, b)) = a.zip(b).filter(|(_, b)| *b > 0.0) {
                out.push((workload.to_owned(), t, a / b));
            }
        }
    }
    out
}

/// Why a comparison of `ours` with `theirs` on `suite` cannot be made here, if it cannot.
fn missing(view: &Lookup<'_>, suite: &str, ours: &str, theirs: &[&str]) -> Option<String> {
    if !view.suite_ran(suite) {
        return Some(format!("suite `{suite}` not run"));
    }
    let absent: Vec<&str> = std::iter::once(ours)
        .chain(theirs.iter().copied())
        .filter(|a| !view.ran(suite, a))
        .collect();
    (!absent.is_empty()).then(|| format!("not run on `{suite}`: {}", absent.join(", ")))
}

/// `≤ limit` on the geometric mean over workloads of `ours / theirs` time, worst thread count.
fn time_mean_check(view: &Lookup<'_>, ours: &str, theirs: &str, limit: f64) -> Check {
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

/// `≤ limit` on `ours / theirs` of `metric` on every `cpu` workload: the worst one decides.
fn every_workload_check(
    view: &Lookup<'_>,
    metric: &str,
    what: String,
    ours: &str,
    theirs: &str,
    limit: f64,
) -> Check {
    if let Some(why) = missing(view, CPU, ours, &[theirs]) {
        return not_here(&what, &why);
    }
    let all = ratios(view, CPU, metric, ours, theirs);
    let Some((workload, t, worst)) = all.iter().max_by(|a, b| a.2.total_cmp(&b.2)) else {
        return not_here(&what, &format!("no workload with {metric} of both"));
    };
    let over: Vec<String> = all
        .iter()
        .filter(|(_, _, r)| *r > limit)
        .map(|(w, t, r)| format!("{w} {r:.2}{}", at_threads(view, ours, *t)))
        .collect();
    let detail = if over.is_empty() {
        format!(
            "highest {worst:.2} ({workload}{})",
            at_threads(view, ours, *t)
        )
    } else {
        format!("above on {}", over.join(", "))
    };
    Check {
        verdict: Verdict::of(over.is_empty()),
        line: format!("{what}: {detail}"),
    }
}

/// `, N threads` where `ours` ran the `cpu` suite at more than one thread count.
fn at_threads(view: &Lookup<'_>, ours: &str, t: usize) -> String {
    if view.threads(CPU, ours).len() > 1 {
        format!(", {t} threads")
    } else {
        String::new()
    }
}

/// Which policy the realtime threads ran under at `threads`, from the `sched_fifo` share.
fn policy(view: &Lookup<'_>, workload: &str, threads: usize) -> &'static str {
    let shares: Vec<f64> = view
        .records
        .iter()
        .filter(|r| {
            r.suite == REALTIME
                && r.workload == workload
                && r.threads == threads
                && r.metric == "sched_fifo"
        })
        .map(|r| r.median)
        .collect();
    if shares.is_empty() || shares.iter().all(|s| *s == 0.0) {
        "default time-sharing policy"
    } else if shares.iter().all(|s| *s >= 1.0) {
        "SCHED_FIFO"
    } else {
        "mixed policies"
    }
}

/// Issue 3's realtime check: at 4× the cores wfspan's p99.999 and max of alloc and free are
/// the lowest of every allocator's.
fn realtime_lowest_check(view: &Lookup<'_>, cores: usize) -> Check {
    let threads = REALTIME_OVERSUBSCRIPTION * cores;
    let what = format!(
        "`{REALTIME}` at {REALTIME_OVERSUBSCRIPTION}x the cores ({threads} threads): {WFSPAN}'s {} are the lowest of all allocators",
        REALTIME_METRICS.join(", ")
    );
    if let Some(why) = missing(view, REALTIME, WFSPAN, REALTIME_PEERS) {
        return not_here(&what, &why);
    }
    if !view.threads(REALTIME, WFSPAN).contains(&threads) {
        return not_here(&what, &format!("not run at {threads} threads"));
    }
    let workload = view
        .workloads(REALTIME)
        .first()
        .copied()
        .unwrap_or("latency");
    let mut others = view.view.allocators_in(REALTIME, Some(workload));
    others.retain(|a| *a != WFSPAN);
    let mut parts = Vec::new();
    let mut ok = true;
    for &metric in REALTIME_METRICS {
        let Some(ours) = view.median(REALTIME, workload, WFSPAN, threads, metric) else {
            return not_here(&what, &format!("no {metric} of {WFSPAN}"));
        };
        let best = others
            .iter()
            .filter_map(|a| Some((*a, view.median(REALTIME, workload, a, threads, metric)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match best {
            Some((peer, theirs)) if theirs < ours => {
                ok = false;
                parts.push(format!(
                    "{metric} {} vs {peer} {} ({peer} {:.2}x)",
                    fmt_ns(ours),
                    fmt_ns(theirs),
                    theirs / ours
                ));
            }
            Some((peer, theirs)) => parts.push(format!(
                "{metric} {} (next {peer} {:.2}x)",
                fmt_ns(ours),
                theirs / ours
            )),
            None => parts.push(format!("{metric} {}", fmt_ns(ours))),
        }
    }
    Check {
        verdict: Verdict::of(ok),
        line: format!(
            "{what}: {}; threads under the {}",
            parts.join(", "),
            policy(view, workload, threads)
        ),
    }
}

/// Nanoseconds as ns, µs or ms.
fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Issue 3's step check: the most steps any alloc and free took in the realtime suite stay
/// within [`alloclab_wfspan::step_bound`] for the threads that used the heap (the workload's
/// and the worker's main thread).
fn step_bound_check(view: &Lookup<'_>) -> Check {
    let what = format!(
        "`{REALTIME}`: {WFSPAN}'s most steps per alloc and free within the documented bound"
    );
    if let Some(why) = missing(view, REALTIME, WFSPAN, &[]) {
        return not_here(&what, &why);
    }
    let span_bytes = alloclab_wfspan::Config::DEFAULT.span_bytes;
    let mut parts = Vec::new();
    let mut ok = true;
    for workload in view.workloads(REALTIME) {
        for t in view.threads(REALTIME, WFSPAN) {
            let bound = alloclab_wfspan::step_bound(span_bytes, t as u64 + 1);
            // The most over the runs: the worst run decides, not the median.
            let most = |metric: &str| {
                view.view
                    .get(REALTIME, workload, WFSPAN, t, metric)
                    .map(|r| r.max)
            };
            let (Some(alloc_max), Some(free_max)) =
                (most("alloc_max_steps"), most("free_max_steps"))
            else {
                return not_here(&what, &format!("no step counts at {t} threads"));
            };
            ok &= alloc_max <= bound.alloc as f64 && free_max <= bound.free as f64;
            parts.push(format!(
                "{t} threads: alloc {alloc_max:.0} <= {}, free {free_max:.0} <= {}",
                bound.alloc, bound.free
            ));
        }
    }
    if parts.is_empty() {
        return not_here(&what, "no realtime figures");
    }
    Check {
        verdict: Verdict::of(ok),
        line: format!(
            "{what} (most over the runs; bound for the threads plus the worker's main thread): {}",
            parts.join("; ")
        ),
    }
}

/// The size in a security metric's name (`entropy_steady_64` → 64).
fn size_of_metric(metric: &str, prefix: &str) -> Option<usize> {
    metric.strip_prefix(prefix)?.parse().ok()
}

/// The randomized allocator's medians of the `security` metrics named `prefix` + a size,
/// as (size, median), over every workload and thread count.
fn sized_figures(view: &Lookup<'_>, prefix: &str) -> Vec<(usize, f64)> {
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

/// Issue 4's entropy check over the steady-state heap's sizes up to 1 KiB.
fn entropy_check(view: &Lookup<'_>) -> Check {
    let what = format!(
        "`{SECURITY}`: {RANDOMIZED}'s steady-state placement entropy >= {ENTROPY_MIN_BITS} bits for sizes up to {ENTROPY_MAX_SIZE} B"
    );
    if let Some(why) = missing(view, SECURITY, RANDOMIZED, &[]) {
        return not_here(&what, &why);
    }
    let prefix = "entropy_steady_";
    let mut figures = sized_figures(view, prefix);
    figures.retain(|(size, _)| *size <= ENTROPY_MAX_SIZE);
    let Some(&(size, lowest)) = figures.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
        return not_here(&what, "no steady-state entropy figures");
    };
    // With too few trials the estimate cannot reach the target whatever the placement.
    let ceiling = view
        .records
        .iter()
        .filter(|r| {
            r.suite == SECURITY && r.allocator == RANDOMIZED && r.metric == "entropy_ceiling"
        })
        .map(|r| r.median)
        .fold(f64::INFINITY, f64::min);
    if ceiling < ENTROPY_MIN_BITS {
        return not_here(
            &what,
            &format!("its trials measure at most {ceiling:.2} bits; lowest {lowest:.2} bits"),
        );
    }
    Check {
        verdict: Verdict::of(lowest >= ENTROPY_MIN_BITS),
        line: format!(
            "{what}: lowest {lowest:.2} bits ({size} B; {} sizes)",
            figures.len()
        ),
    }
}

/// Issue 4's immediate-reuse check over every size the reuse workload measures.
fn reuse_check(view: &Lookup<'_>) -> Check {
    let what = format!(
        "`{SECURITY}`: probability that {RANDOMIZED} returns a just-freed block to the next allocation of its size <= 1/256"
    );
    if let Some(why) = missing(view, SECURITY, RANDOMIZED, &[]) {
        return not_here(&what, &why);
    }
    let same = sized_figures(view, "reuse_same_");
    let overlap = sized_figures(view, "reuse_overlap_");
    let Some(&(size, highest)) = same.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
        return not_here(&what, "no reuse figures");
    };
    let overlap = overlap
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(s, v)| {
            format!(
                "; a new block overlapping the freed one: at most {} ({s} B)",
                fmt_value(*v)
            )
        })
        .unwrap_or_default();
    Check {
        verdict: Verdict::of(highest <= REUSE_MAX),
        line: format!(
            "{what}: highest {} ({size} B; {} sizes){overlap}",
            fmt_value(highest),
            same.len()
        ),
    }
}

/// Issue 4's misuse check: every double-free and invalid-free case caught.
fn misuse_check(view: &Lookup<'_>) -> Check {
    let what =
        format!("`{SECURITY}`: {RANDOMIZED} catches every double-free and invalid-free case");
    if let Some(why) = missing(view, SECURITY, RANDOMIZED, &[]) {
        return not_here(&what, &why);
    }
    let mut caught = 0;
    let mut not_caught = Vec::new();
    for workload in view.workloads(SECURITY) {
        for metric in view.metrics(SECURITY, workload, RANDOMIZED) {
            if !CAUGHT_PREFIXES.iter().any(|p| metric.starts_with(p)) {
                continue;
            }
            // Score 1 is caught; the worst run decides.
            let worst = view
                .threads(SECURITY, RANDOMIZED)
                .into_iter()
                .filter_map(|t| view.view.get(SECURITY, workload, RANDOMIZED, t, metric))
                .map(|r| r.min)
                .fold(f64::INFINITY, f64::min);
            if worst >= 1.0 {
                caught += 1;
            } else {
                not_caught.push(metric);
            }
        }
    }
    let total = caught + not_caught.len();
    if total == 0 {
        return not_here(&what, "no misuse figures");
    }
    let detail = if not_caught.is_empty() {
        format!("{caught} of {total} caught in every run")
    } else {
        format!(
            "{caught} of {total} caught in every run; not: {}",
            not_caught.join(", ")
        )
    };
    Check {
        verdict: Verdict::of(not_caught.is_empty()),
        line: format!("{what}: {detail}"),
    }
}

/// The issues' checks over this run; empty if the run measured none of the suites they
/// cover with the allocators they are about.
pub fn host_heap_goals(results: &ResultsFile) -> Vec<Goal> {
    let view = Lookup::new(results);
    let covers = |allocator: &str| {
        [CPU, REALTIME, SECURITY]
            .iter()
            .any(|s| view.ran(s, allocator))
    };
    let mut goals = Vec::new();
    if covers(WFSPAN) {
        goals.push(Goal {
            title: "wfspan (issue 3)",
            checks: vec![
                time_mean_check(&view, WFSPAN, MIMALLOC, WFSPAN_TIME_VS_MIMALLOC),
                every_workload_check(
                    &view,
                    "time",
                    format!(
                        "`{CPU}`: no workload slower than glibc's malloc (`{SYSTEM}`) by more than 10% ({WFSPAN}'s time over {SYSTEM}'s <= {WFSPAN_TIME_VS_SYSTEM})"
                    ),
                    WFSPAN,
                    SYSTEM,
                    WFSPAN_TIME_VS_SYSTEM,
                ),
                every_workload_check(
                    &view,
                    "peak_footprint",
                    format!(
                        "`{CPU}`: peak footprint within {WFSPAN_FOOTPRINT_VS_MIMALLOC}x {MIMALLOC}'s on every workload"
                    ),
                    WFSPAN,
                    MIMALLOC,
                    WFSPAN_FOOTPRINT_VS_MIMALLOC,
                ),
                realtime_lowest_check(&view, results.header.machine.cores.max(1)),
                step_bound_check(&view),
            ],
        });
    }
    if covers(RANDOMIZED) {
        goals.push(Goal {
            title: "randomized (issue 4)",
            checks: vec![
                entropy_check(&view),
                reuse_check(&view),
                misuse_check(&view),
                time_mean_check(&view, RANDOMIZED, SYSTEM, RANDOMIZED_TIME_VS_SYSTEM),
                every_workload_check(
                    &view,
                    "peak_footprint",
                    format!(
                        "`{CPU}`: peak footprint <= {RANDOMIZED_FOOTPRINT_VS_SYSTEM}x glibc's (`{SYSTEM}`) on every workload"
                    ),
                    RANDOMIZED,
                    SYSTEM,
                    RANDOMIZED_FOOTPRINT_VS_SYSTEM,
                ),
            ],
        });
    }
    // Tiny is a smoke-test scale: too few trials and too little work to decide a target.
    let scale = &results.header.parameters.scale;
    if scale == "tiny" {
        for check in goals.iter_mut().flat_map(|g| g.checks.iter_mut()) {
            if check.verdict != Verdict::NotHere {
                check.verdict = Verdict::NotHere;
                check
                    .line
                    .push_str(" (not decided at scale tiny, a smoke test)");
            }
        }
    }
    goals
}

/// The checks as Markdown: a heading of level `heading` (`##`, `####`) per issue, then a
/// list of ✓ / ✗ / · lines. Nothing if there are none.
pub fn markdown(out: &mut String, results: &ResultsFile, heading: &str) {
    for goal in host_heap_goals(results) {
        let _ = writeln!(out, "\n{heading} Must reach: {}\n", goal.title);
        for check in &goal.checks {
            let _ = writeln!(out, "- {} {}", check.verdict.mark(), check.line);
        }
    }
}

/// The checks as plain text for the terminal. Nothing if there are none.
pub fn terminal_text(results: &ResultsFile) -> String {
    let mut out = String::new();
    for goal in host_heap_goals(results) {
        let _ = writeln!(out, "\nmust reach: {}", goal.title);
        for check in &goal.checks {
            let _ = writeln!(out, "{} {}", check.verdict.mark(), check.line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        suite: &str,
        workload: &str,
        allocator: &str,
        threads: usize,
        metric: &str,
        median: f64,
    ) -> Record {
        Record {
            suite: suite.into(),
            workload: workload.into(),
            allocator: allocator.into(),
            threads,
            metric: metric.into(),
            unit: String::new(),
            median,
            min: median,
            max: median,
            runs: 3,
            lower_is_better: true,
        }
    }

    fn results(records: Vec<Record>) -> ResultsFile {
        ResultsFile::of_records(records)
    }

    /// `cpu` records: (workload, allocator, time, footprint) at 2 threads.
    fn cpu(rows: &[(&str, &str, f64, f64)]) -> Vec<Record> {
        rows.iter()
            .flat_map(|&(w, a, time, peak)| {
                [
                    record(CPU, w, a, 2, "time", time),
                    record(CPU, w, a, 2, "peak_footprint", peak),
                ]
            })
            .collect()
    }

    fn goal<'a>(goals: &'a [Goal], title: &str) -> &'a Goal {
        goals
            .iter()
            .find(|g| g.title.starts_with(title))
            .expect("goal present")
    }

    #[test]
    fn cpu_checks_are_decided_by_the_mean_and_by_the_worst_workload() {
        let recs = cpu(&[
            ("a", WFSPAN, 90.0, 3.0),
            ("a", MIMALLOC, 100.0, 2.0),
            ("a", SYSTEM, 100.0, 1.0),
            ("b", WFSPAN, 120.0, 1.0),
            ("b", MIMALLOC, 100.0, 1.0),
            ("b", SYSTEM, 100.0, 1.0),
        ]);
        let goals = host_heap_goals(&results(recs));
        let checks = &goal(&goals, WFSPAN).checks;
        // Geometric mean of 0.9 and 1.2 is 1.04: over 1.0.
        assert_eq!(checks[0].verdict, Verdict::Fail, "{}", checks[0].line);
        assert!(checks[0].line.contains("1.04"), "{}", checks[0].line);
        // b is 1.2x glibc's time: over 1.1.
        assert_eq!(checks[1].verdict, Verdict::Fail, "{}", checks[1].line);
        assert!(checks[1].line.contains("b 1.20"), "{}", checks[1].line);
        // a's footprint is 1.5x mimalloc's: at the limit, met.
        assert_eq!(checks[2].verdict, Verdict::Pass, "{}", checks[2].line);
        // No realtime suite: not decided, and said why.
        assert_eq!(checks[3].verdict, Verdict::NotHere);
        assert!(
            checks[3].line.contains("suite `realtime` not run"),
            "{}",
            checks[3].line
        );
        // The randomized allocator did not run: no goal for it.
        assert!(goals.iter().all(|g| !g.title.starts_with(RANDOMIZED)));
    }

    #[test]
    fn a_missing_peer_leaves_a_check_undecided_instead_of_passing_it() {
        let recs = cpu(&[("a", WFSPAN, 90.0, 1.0), ("a", SYSTEM, 100.0, 1.0)]);
        let goals = host_heap_goals(&results(recs));
        let mean = &goal(&goals, WFSPAN).checks[0];
        assert_eq!(mean.verdict, Verdict::NotHere);
        assert!(mean.line.contains("mimalloc"), "{}", mean.line);
    }

    fn realtime(threads: usize, rows: &[(&str, [f64; 4])]) -> Vec<Record> {
        let mut out = Vec::new();
        for (a, values) in rows {
            for (metric, v) in REALTIME_METRICS.iter().zip(values) {
                out.push(record(REALTIME, "latency", a, threads, metric, *v));
            }
            if *a == WFSPAN {
                out.push(record(
                    REALTIME,
                    "latency",
                    a,
                    threads,
                    "alloc_max_steps",
                    40.0,
                ));
                out.push(record(
                    REALTIME,
                    "latency",
                    a,
                    threads,
                    "free_max_steps",
                    3.0,
                ));
            }
        }
        out
    }

    #[test]
    fn realtime_check_names_the_allocator_that_was_lower_and_the_policy() {
        let mut rows = vec![(WFSPAN, [10.0, 100.0, 10.0, 100.0])];
        for peer in REALTIME_PEERS {
            rows.push((peer, [20.0, 200.0, 20.0, 200.0]));
        }
        let goals = host_heap_goals(&results(realtime(8, &rows)));
        let check = &goal(&goals, WFSPAN).checks[3];
        assert_eq!(check.verdict, Verdict::Pass, "{}", check.line);
        assert!(
            check.line.contains("default time-sharing"),
            "{}",
            check.line
        );

        rows[3].1[1] = 90.0; // jemalloc's alloc max below wfspan's
        let goals = host_heap_goals(&results(realtime(8, &rows)));
        let check = &goal(&goals, WFSPAN).checks[3];
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(
            check
                .line
                .contains(&format!("alloc_max 100 ns vs {} 90 ns", rows[3].0)),
            "{}",
            check.line
        );

        // At 2x the cores only: the 4x check is not decided.
        let goals = host_heap_goals(&results(realtime(4, &rows)));
        assert_eq!(goal(&goals, WFSPAN).checks[3].verdict, Verdict::NotHere);
        // Without rlsf: not decided either.
        rows.retain(|(a, _)| *a != "rlsf");
        let goals = host_heap_goals(&results(realtime(8, &rows)));
        let check = &goal(&goals, WFSPAN).checks[3];
        assert_eq!(check.verdict, Verdict::NotHere);
        assert!(check.line.contains("rlsf"), "{}", check.line);
    }

    #[test]
    fn step_check_compares_the_most_steps_with_the_documented_bound() {
        let rows = [(WFSPAN, [1.0; 4])];
        let mut recs = realtime(2, &rows);
        let bound = alloclab_wfspan::step_bound(alloclab_wfspan::Config::DEFAULT.span_bytes, 3);
        let goals = host_heap_goals(&results(recs.clone()));
        let check = &goal(&goals, WFSPAN).checks[4];
        assert!(
            bound.alloc >= 40,
            "the recorded 40 steps are within the bound"
        );
        assert_eq!(check.verdict, Verdict::Pass, "{}", check.line);
        // One run over the bound fails the check even if the median is within it.
        let steps = recs
            .iter_mut()
            .find(|r| r.metric == "alloc_max_steps")
            .unwrap();
        steps.max = bound.alloc as f64 + 1.0;
        let goals = host_heap_goals(&results(recs));
        assert_eq!(goal(&goals, WFSPAN).checks[4].verdict, Verdict::Fail);
    }

    #[test]
    fn security_checks_cover_every_size_and_every_misuse_case() {
        let mut recs = vec![
            record(
                SECURITY,
                "entropy",
                RANDOMIZED,
                1,
                "entropy_steady_64",
                14.0,
            ),
            record(
                SECURITY,
                "entropy",
                RANDOMIZED,
                1,
                "entropy_steady_1024",
                7.5,
            ),
            // Above 1 KiB: not covered.
            record(
                SECURITY,
                "entropy",
                RANDOMIZED,
                1,
                "entropy_steady_4096",
                2.0,
            ),
            record(SECURITY, "reuse", RANDOMIZED, 1, "reuse_same_64", 0.0),
            record(
                SECURITY,
                "reuse",
                RANDOMIZED,
                1,
                "reuse_same_1024",
                1.0 / 256.0,
            ),
            record(
                SECURITY,
                "misuse",
                RANDOMIZED,
                1,
                "double_free_immediate",
                1.0,
            ),
            record(SECURITY, "misuse", RANDOMIZED, 1, "invalid_free_stack", 1.0),
            // Not a double or invalid free: not covered.
            record(
                SECURITY,
                "misuse",
                RANDOMIZED,
                1,
                "overwrite_neighbour",
                0.0,
            ),
        ];
        let goals = host_heap_goals(&results(recs.clone()));
        let checks = &goal(&goals, RANDOMIZED).checks;
        assert_eq!(checks[0].verdict, Verdict::Fail);
        assert!(
            checks[0].line.contains("7.50 bits (1024 B"),
            "{}",
            checks[0].line
        );
        assert_eq!(checks[1].verdict, Verdict::Pass, "{}", checks[1].line);
        assert_eq!(checks[2].verdict, Verdict::Pass, "{}", checks[2].line);
        assert!(checks[2].line.contains("2 of 2"), "{}", checks[2].line);

        // A case that crashed in one run (score 0.5) is not caught.
        recs[6].min = 0.5;
        let goals = host_heap_goals(&results(recs));
        let misuse = &goal(&goals, RANDOMIZED).checks[2];
        assert_eq!(misuse.verdict, Verdict::Fail);
        assert!(
            misuse.line.contains("not: invalid_free_stack"),
            "{}",
            misuse.line
        );
    }

    #[test]
    fn too_few_trials_or_a_smoke_test_scale_decide_nothing() {
        let recs = vec![
            record(SECURITY, "entropy", RANDOMIZED, 1, "entropy_steady_64", 4.0),
            record(SECURITY, "entropy", RANDOMIZED, 1, "entropy_ceiling", 4.0),
            record(SECURITY, "reuse", RANDOMIZED, 1, "reuse_same_64", 0.5),
        ];
        let goals = host_heap_goals(&results(recs.clone()));
        let checks = &goal(&goals, RANDOMIZED).checks;
        assert_eq!(checks[0].verdict, Verdict::NotHere, "{}", checks[0].line);
        assert!(
            checks[0].line.contains("at most 4.00 bits"),
            "{}",
            checks[0].line
        );
        assert_eq!(checks[1].verdict, Verdict::Fail, "{}", checks[1].line);

        let mut tiny = results(recs);
        tiny.header.parameters.scale = "tiny".into();
        let goals = host_heap_goals(&tiny);
        let reuse = &goal(&goals, RANDOMIZED).checks[1];
        assert_eq!(reuse.verdict, Verdict::NotHere);
        assert!(
            reuse
                .line
                .ends_with("(not decided at scale tiny, a smoke test)"),
            "{}",
            reuse.line
        );
    }

    #[test]
    fn a_run_without_host_heap_suites_has_no_goals() {
        let recs = vec![record(
            "storage",
            "inp-d",
            "alloclab-pmem",
            1,
            "ops_per_s",
            1.0,
        )];
        assert!(host_heap_goals(&results(recs.clone())).is_empty());
        let mut out = String::new();
        markdown(&mut out, &results(recs), "##");
        assert!(out.is_empty());
    }
}
