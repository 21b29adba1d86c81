//! randomized's targets: placement entropy, immediate reuse, misuse caught, and its time
//! and footprint against glibc, in-process (`cpu`) and on real programs (`programs`).

use super::lookup::*;
use super::thresholds::*;
use super::{Check, Claimant, Goal, Verdict};
use crate::report::fmt_value;
use crate::workloads::security::misuse::Case;

/// The entropy target over the steady-state heap's sizes up to 1 KiB.
pub(super) fn entropy_check(view: &Lookup<'_>) -> Check {
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

/// The immediate-reuse target over every size the reuse workload measures.
pub(super) fn reuse_check(view: &Lookup<'_>) -> Check {
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

/// The misuse cases a check covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MisuseScope {
    /// The double frees and invalid frees ([`CAUGHT_PREFIXES`]): the paper's claim.
    DoubleAndInvalidFrees,
    /// Every case of the `misuse` workload: alloclab's claim of a hardened allocator.
    Every,
}

/// The misuse target: every case of `scope` caught (an abort, or a fault at the bad access
/// itself) in every run.
pub(super) fn misuse_check(view: &Lookup<'_>, scope: MisuseScope) -> Check {
    let what = match scope {
        MisuseScope::DoubleAndInvalidFrees => {
            format!("`{SECURITY}`: {RANDOMIZED} catches every double-free and invalid-free case")
        }
        MisuseScope::Every => format!(
            "`{SECURITY}`: {RANDOMIZED} catches every misuse case (write after free, overflows and underflows, zero-size blocks, realloc, double and invalid frees), by an abort or by a fault at the bad access"
        ),
    };
    if let Some(why) = missing(view, SECURITY, RANDOMIZED, &[]) {
        return not_here(&what, &why);
    }
    // Per workload (the cases in-process, `misuse`; as a C program's bugs, `misuse-c`):
    // cases caught in every run, and those that were not.
    let mut counts: Vec<(&str, usize, usize)> = Vec::new();
    let mut not_caught = Vec::new();
    for workload in view.workloads(SECURITY) {
        let (mut caught, mut total) = (0, 0);
        for metric in view.metrics(SECURITY, workload, RANDOMIZED) {
            let covered = match scope {
                MisuseScope::DoubleAndInvalidFrees => {
                    CAUGHT_PREFIXES.iter().any(|p| metric.starts_with(p))
                }
                MisuseScope::Every => Case::from_name(metric).is_some(),
            };
            if !covered {
                continue;
            }
            // Score 1 is caught; the worst run decides.
            let worst = view
                .threads(SECURITY, RANDOMIZED)
                .into_iter()
                .filter_map(|t| view.view.get(SECURITY, workload, RANDOMIZED, t, metric))
                .map(|r| r.min)
                .fold(f64::INFINITY, f64::min);
            total += 1;
            if worst >= 1.0 {
                caught += 1;
            } else {
                not_caught.push(format!("{metric} (`{workload}`)"));
            }
        }
        if total > 0 {
            counts.push((workload, caught, total));
        }
    }
    if counts.is_empty() {
        return not_here(&what, "no misuse figures");
    }
    let tally: Vec<String> = counts
        .iter()
        .map(|(workload, caught, total)| format!("{caught} of {total} in `{workload}`"))
        .collect();
    let detail = if not_caught.is_empty() {
        format!("{} caught in every run", tally.join(", "))
    } else {
        format!(
            "{} caught in every run; not: {}",
            tally.join(", "),
            not_caught.join(", ")
        )
    };
    Check {
        verdict: Verdict::of(not_caught.is_empty()),
        line: format!("{what}: {detail}"),
    }
}

/// The footprint target on `suite`'s `metric` (MiB): at most
/// [`RANDOMIZED_FOOTPRINT_VS_SYSTEM`] times glibc's where glibc's is at least
/// [`RANDOMIZED_FOOTPRINT_FLOOR_MIB`], else at most [`RANDOMIZED_FOOTPRINT_SLACK_MIB`] above
/// it, on every workload (medians).
pub(super) fn footprint_check(view: &Lookup<'_>, suite: &str, metric: &str) -> Check {
    let what = format!(
        "`{suite}`: {RANDOMIZED}'s {} <= {RANDOMIZED_FOOTPRINT_VS_SYSTEM}x glibc's (`{SYSTEM}`) where glibc's is at least {RANDOMIZED_FOOTPRINT_FLOOR_MIB} MiB, and at most {} KiB above it where smaller, on every workload",
        metric.replace('_', " "),
        RANDOMIZED_FOOTPRINT_SLACK_MIB * 1024.0
    );
    if let Some(why) = missing(view, suite, RANDOMIZED, &[SYSTEM]) {
        return not_here(&what, &why);
    }
    let pairs = medians(view, suite, metric, RANDOMIZED, SYSTEM);
    if pairs.is_empty() {
        return not_here(&what, &format!("no workload with {metric} of both"));
    }
    let (large, small): (Vec<_>, Vec<_>) = pairs
        .iter()
        .partition(|(_, _, _, b)| *b >= RANDOMIZED_FOOTPRINT_FLOOR_MIB);
    let over: Vec<String> = large
        .iter()
        .filter(|(_, _, a, b)| a / b > RANDOMIZED_FOOTPRINT_VS_SYSTEM)
        .map(|(w, t, a, b)| {
            format!(
                "{w} {:.2}x{}",
                a / b,
                at_threads(view, suite, RANDOMIZED, *t)
            )
        })
        .chain(
            small
                .iter()
                .filter(|(_, _, a, b)| a - b > RANDOMIZED_FOOTPRINT_SLACK_MIB)
                .map(|(w, t, a, b)| {
                    format!(
                        "{w} +{:.0} KiB{}",
                        (a - b) * 1024.0,
                        at_threads(view, suite, RANDOMIZED, *t)
                    )
                }),
        )
        .collect();
    let mut detail = Vec::new();
    if let Some((w, _, a, b)) = large
        .iter()
        .max_by(|x, y| (x.2 / x.3).total_cmp(&(y.2 / y.3)))
    {
        detail.push(format!("highest {:.2}x ({w})", a / b));
    }
    if let Some((w, _, a, b)) = small
        .iter()
        .max_by(|x, y| (x.2 - x.3).total_cmp(&(y.2 - y.3)))
    {
        detail.push(format!(
            "most above a small one +{:.0} KiB ({w})",
            (a - b) * 1024.0
        ));
    }
    let line = if over.is_empty() {
        format!("{what}: {}", detail.join("; "))
    } else {
        format!("{what}: above on {}", over.join(", "))
    };
    Check {
        verdict: Verdict::of(over.is_empty()),
        line,
    }
}

/// randomized's targets over this run: what its paper claims (randomization defeats misuse)
/// and alloclab's own, on placement, time and footprint.
pub(super) fn goals(view: &Lookup<'_>) -> [Goal; 2] {
    let paper = Goal {
        title: "randomized",
        by: Claimant::Paper(
            "the randomized allocator's paper: random placement protects against misuse",
        ),
        checks: vec![misuse_check(view, MisuseScope::DoubleAndInvalidFrees)],
    };
    let ours = Goal {
        title: "randomized",
        by: Claimant::Alloclab,
        checks: vec![
            entropy_check(view),
            reuse_check(view),
            time_mean_check(view, RANDOMIZED, SYSTEM, RANDOMIZED_TIME_VS_SYSTEM),
            footprint_check(view, CPU, "peak_footprint"),
            mean_over_workloads_check(
                view,
                PROGRAMS,
                "wall",
                format!(
                    "`{PROGRAMS}`: geometric mean over the programs of {RANDOMIZED}'s wall time over glibc's (`{SYSTEM}`, nothing preloaded) <= {RANDOMIZED_PROGRAMS_WALL_VS_SYSTEM}"
                ),
                RANDOMIZED,
                SYSTEM,
                RANDOMIZED_PROGRAMS_WALL_VS_SYSTEM,
            ),
            every_workload_check(
                view,
                PROGRAMS,
                "wall",
                format!(
                    "`{PROGRAMS}`: no program's wall time above {RANDOMIZED_PROGRAMS_WALL_WORST_VS_SYSTEM}x glibc's"
                ),
                RANDOMIZED,
                SYSTEM,
                RANDOMIZED_PROGRAMS_WALL_WORST_VS_SYSTEM,
            ),
            footprint_check(view, PROGRAMS, "peak_rss"),
            misuse_check(view, MisuseScope::Every),
        ],
    };
    [paper, ours]
}
