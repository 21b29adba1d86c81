//! wfspan's targets: its `cpu` time and footprint against mimalloc and glibc, its realtime
//! tails, and its step bound.

use super::lookup::*;
use super::thresholds::*;
use super::{Check, Claimant, Goal, Verdict};

/// The realtime target: at 4× the cores wfspan's p99.999 and max of alloc and free are
/// the lowest of every allocator's.
pub(super) fn realtime_lowest_check(view: &Lookup<'_>, cores: usize) -> Check {
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

/// The step bound: the most steps any alloc and free took in the realtime suite stay
/// within [`alloclab_wfspan::step_bound`] for the threads that used the heap (the workload's
/// and the worker's main thread).
pub(super) fn step_bound_check(view: &Lookup<'_>) -> Check {
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

/// The paper's claim that this crate checks on every run, and alloclab's own targets.
pub(super) fn goals(view: &Lookup<'_>, cores: usize) -> [Goal; 2] {
    let paper = Goal {
        title: "wfspan",
        by: Claimant::Paper(
            "the wfspan paper (Ouyang & Zhu 2022): every alloc and free in bounded steps",
        ),
        checks: vec![step_bound_check(view)],
    };
    let ours = Goal {
        title: "wfspan",
        by: Claimant::Alloclab,
        checks: vec![
            time_mean_check(view, WFSPAN, MIMALLOC, WFSPAN_TIME_VS_MIMALLOC),
            every_workload_check(
                view,
                "time",
                format!(
                    "`{CPU}`: no workload slower than glibc's malloc (`{SYSTEM}`) by more than 10% ({WFSPAN}'s time over {SYSTEM}'s <= {WFSPAN_TIME_VS_SYSTEM})"
                ),
                WFSPAN,
                SYSTEM,
                WFSPAN_TIME_VS_SYSTEM,
            ),
            every_workload_check(
                view,
                "peak_footprint",
                format!(
                    "`{CPU}`: peak footprint within {WFSPAN_FOOTPRINT_VS_MIMALLOC}x {MIMALLOC}'s on every workload"
                ),
                WFSPAN,
                MIMALLOC,
                WFSPAN_FOOTPRINT_VS_MIMALLOC,
            ),
            realtime_lowest_check(view, cores),
        ],
    };
    [paper, ours]
}
