//! The targets a report opens with: claims about alloclab's allocators and models — what is
//! claimed, by whom (a paper, or alloclab itself), the figure — each checked against a run's
//! records and shown as a ✓ / ✗ / · line that names the figure it was decided by.
//!
//! One file per subject: `wfspan` and `randomized` (over the `cpu`, `programs`, `realtime`
//! and `security` suites), [`training`] (the DNN training memory models), their thresholds in
//! one table ([`thresholds`]). The `storage` suite's targets are written by its own report
//! section.
//!
//! A target is decided only where the run measured everything it covers; otherwise it is `·`
//! and says what is missing (a suite not run, an allocator not asked for). Every figure is a
//! median over the run's runs, and every ratio compares medians of the same run.

use std::fmt::{self, Write as _};

use crate::results::ResultsFile;

mod lookup;
mod randomized;
pub mod thresholds;
pub mod training;
mod wfspan;

#[cfg(test)]
mod tests;

use lookup::{CPU, Lookup, PROGRAMS, RANDOMIZED, REALTIME, SECURITY, WFSPAN};
pub use thresholds::*;

/// How a target came out.
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

    /// [`Verdict::Pass`] if `ok`, else [`Verdict::Fail`].
    pub fn of(ok: bool) -> Self {
        if ok { Verdict::Pass } else { Verdict::Fail }
    }
}

/// One target: its verdict and a line saying what is claimed, then the figure that decided
/// it.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// The verdict.
    pub verdict: Verdict,
    /// What is claimed, then the figure that decided it.
    pub line: String,
}

/// Who makes the claims of a [`Goal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claimant {
    /// A paper (or a project's own documentation), as the report cites it.
    Paper(&'static str),
    /// alloclab: a target the project sets its own code.
    Alloclab,
}

impl fmt::Display for Claimant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Claimant::Paper(paper) => write!(f, "claimed by {paper}"),
            Claimant::Alloclab => f.write_str("set by alloclab"),
        }
    }
}

/// The targets of one subject from one claimant.
#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    /// What the claims are about: an allocator (`wfspan`) or a model.
    pub title: &'static str,
    /// Who claims them.
    pub by: Claimant,
    /// Its targets.
    pub checks: Vec<Check>,
}

/// The host heaps' targets over this run; empty if the run measured none of the suites they
/// cover with the allocators they are about.
pub fn host_heap_goals(results: &ResultsFile) -> Vec<Goal> {
    let view = Lookup::new(results);
    let covers = |allocator: &str| {
        [CPU, PROGRAMS, REALTIME, SECURITY]
            .iter()
            .any(|s| view.ran(s, allocator))
    };
    let mut goals = Vec::new();
    if covers(WFSPAN) {
        goals.extend(wfspan::goals(&view, results.header.machine.cores.max(1)));
    }
    if covers(RANDOMIZED) {
        goals.extend(randomized::goals(&view));
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
/// Every goal this run's records bear on.
pub fn goals(results: &ResultsFile) -> Vec<Goal> {
    let mut goals = host_heap_goals(results);
    goals.extend(training::goals(results));
    goals
}

/// The targets as Markdown, a heading of level `heading` (`##`, `####`) per goal, then a
/// list of ✓ / ✗ / · lines. Nothing if no goal applies.
pub fn markdown(out: &mut String, results: &ResultsFile, heading: &str) {
    for goal in goals(results) {
        let _ = writeln!(out, "\n{heading} Targets: {}, {}\n", goal.title, goal.by);
        for check in &goal.checks {
            let _ = writeln!(out, "- {} {}", check.verdict.mark(), check.line);
        }
    }
}

/// The targets as plain text for the terminal. Nothing if no goal applies.
pub fn terminal_text(results: &ResultsFile) -> String {
    let mut out = String::new();
    for goal in goals(results) {
        let _ = writeln!(out, "\ntargets: {}, {}", goal.title, goal.by);
        for check in &goal.checks {
            let _ = writeln!(out, "{} {}", check.verdict.mark(), check.line);
        }
    }
    out
}
