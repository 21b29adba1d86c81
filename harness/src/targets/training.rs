//! The targets of the DNN training memory models (the `training` suite): what the DELTA
//! paper claims of its planner, and what PyTorch documents of its caching allocator's
//! expandable segments, checked on alloclab's models of both.

use super::{Check, Claimant, Goal, Verdict};
use crate::results::ResultsFile;
use crate::workloads::training::{CACHING, CACHING_EXPANDABLE, SUITE, TIME_LIMIT};

/// The least share of peak memory the planner must save, %, within [`TIME_LIMIT`]× of the
/// keep-all iteration time (the DELTA paper's figure).
pub const PLANNER_MIN_SAVED_PERCENT: f64 = 40.0;
/// The least factor by which planning must grow GPT-2 Large's largest batch in 40 GiB.
pub const PLANNER_MIN_BATCH_GROWTH: f64 = 5.0;
/// The least peak reserved over peak allocated when the batch grows by one each iteration,
/// without expandable segments (the fragmentation PyTorch documents).
pub const GROWING_BATCH_MIN_FRAGMENTATION: f64 = 1.5;
/// The most peak reserved over peak allocated with expandable segments.
pub const EXPANDABLE_MAX_FRAGMENTATION: f64 = 1.1;

/// The median of `metric` of `workload` on `allocator` in `results`, if recorded.
fn median(results: &ResultsFile, workload: &str, allocator: &str, metric: &str) -> Option<f64> {
    results
        .records
        .iter()
        .find(|r| {
            r.suite == SUITE
                && r.workload == workload
                && r.allocator == allocator
                && r.metric == metric
        })
        .map(|r| r.median)
}

/// A target decided by `ok` (`None`: not measured in this run).
fn check(ok: Option<bool>, line: String) -> Check {
    match ok {
        Some(ok) => Check {
            verdict: Verdict::of(ok),
            line,
        },
        None => Check {
            verdict: Verdict::NotHere,
            line: format!("{line} (not measured in this run)"),
        },
    }
}

/// Formats `value` with `f`, or `—` if it was not measured.
fn or_dash(value: Option<f64>, f: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "—".to_owned(), f)
}

/// The training models' targets over this run: the planner's (DELTA) and the caching
/// model's (PyTorch); empty if the run has no record of the suite.
pub fn goals(results: &ResultsFile) -> Vec<Goal> {
    if !results.records.iter().any(|r| r.suite == SUITE) {
        return Vec::new();
    }
    let delta = "training-delta";
    // The planner figures do not depend on the allocator: take the first that ran.
    let allocator = [CACHING, CACHING_EXPANDABLE]
        .into_iter()
        .find(|a| median(results, delta, a, "bert-large_saved").is_some())
        .unwrap_or(CACHING);
    let mut planner = Vec::new();
    for model in ["bert-large", "resnet50"] {
        let saved = median(results, delta, allocator, &format!("{model}_saved"));
        let slowdown = median(results, delta, allocator, &format!("{model}_slowdown"));
        planner.push(check(
            saved
                .zip(slowdown)
                .map(|(s, d)| s >= PLANNER_MIN_SAVED_PERCENT && d <= TIME_LIMIT),
            format!(
                "the DELTA-style planner saves ≥ {PLANNER_MIN_SAVED_PERCENT}% of peak memory on \
                 {model} within {TIME_LIMIT}× of the keep-all iteration time: saved {}, \
                 slowdown {}",
                or_dash(saved, |s| format!("{s:.1}%")),
                or_dash(slowdown, |d| format!("{d:.3}×")),
            ),
        ));
    }
    let growth = median(results, delta, allocator, "gpt2-large_batch_growth");
    let keep = median(results, delta, allocator, "gpt2-large_batch_keep_all");
    let planned = median(results, delta, allocator, "gpt2-large_batch_planned");
    planner.push(check(
        growth.map(|g| g >= PLANNER_MIN_BATCH_GROWTH),
        format!(
            "GPT-2 Large's largest batch in 40 GiB grows ≥ {PLANNER_MIN_BATCH_GROWTH}×: {} → {} \
             ({})",
            or_dash(keep, |k| format!("{k:.0}")),
            or_dash(planned, |p| format!("{p:.0}")),
            or_dash(growth, |g| format!("{g:.2}×")),
        ),
    ));
    let growing = "training-growing-batch";
    let off = median(results, growing, CACHING, "fragmentation");
    let on = median(results, growing, CACHING_EXPANDABLE, "fragmentation");
    let caching = vec![
        check(
            off.map(|r| r > GROWING_BATCH_MIN_FRAGMENTATION),
            format!(
                "a batch growing by one every iteration fragments the caching allocator without \
                 expandable segments (peak reserved / peak allocated > \
                 {GROWING_BATCH_MIN_FRAGMENTATION}): {}",
                or_dash(off, |r| format!("{r:.2}×")),
            ),
        ),
        check(
            on.map(|r| r < EXPANDABLE_MAX_FRAGMENTATION),
            format!(
                "expandable segments keep it below {EXPANDABLE_MAX_FRAGMENTATION}×: {}",
                or_dash(on, |r| format!("{r:.2}×")),
            ),
        ),
    ];
    vec![
        Goal {
            title: "the training-memory planner model",
            by: Claimant::Paper("the DELTA paper (ACM TACO 2024)"),
            checks: planner,
        },
        Goal {
            title: "the PyTorch caching-allocator model",
            by: Claimant::Paper("PyTorch's CUDA memory-management documentation"),
            checks: caching,
        },
    ]
}
