//! How the report lays out each suite, supplied by the suites: the report itself names none.
//!
//! A suite without a [`SuiteLayout`] gets [`SuiteLayout::plain`]: per workload a table of
//! medians and ratios to the suite's first allocator and a bar chart, then the geometric
//! mean of the ratios over the workloads. A suite's layout changes what it needs to, at
//! fixed hook points: in `report.md` its whole section ([`SuiteLayout::report_section`]),
//! what comes before the workload tables ([`SuiteLayout::report_head`]) or in place of the
//! mean ([`SuiteLayout::report_summary`]); in the README its whole section
//! ([`SuiteLayout::readme_section`]) or what comes before its figures
//! ([`SuiteLayout::readme_head`]); charts of its own ([`SuiteLayout::charts`]), beside or in
//! place of the workloads' ([`SuiteLayout::workload_charts`]). [`Shape`] says how the
//! figures read, [`SuiteLayout::sweep_parameters`] names the parameter of each sweep.

use std::path::{Path, PathBuf};

use super::ReportError;
use crate::results::{Record, ResultsFile};

/// Writes Markdown about a run's results: a section of the report or of the README.
pub type SectionWriter = fn(&mut String, &ResultsFile);

/// Writes the targets a report opens with (claims checked against the run's figures), under
/// headings that start with the given prefix (`"##"`, `"####"`).
pub type TargetsWriter = fn(&mut String, &ResultsFile, &str);

/// Writes charts of a run's results into a directory and returns the files written.
pub type ChartWriter = fn(&Path, &ResultsFile) -> Result<Vec<PathBuf>, ReportError>;

/// Names a value in words where the number means a verdict (a misuse case's `score`), or
/// `None` to print the number.
pub type ValueWord = fn(&Record, f64) -> Option<&'static str>;

/// How a suite's figures read.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// Times and rates: ratios to the baseline, geometric means over workloads.
    Ratios,
    /// Figures that mean most as values (a model's bytes, % error against a closed form):
    /// the README shows each workload's headline values, not a mean of ratios.
    Values,
    /// Probabilities, bits and verdicts: one metric per row and one allocator per column,
    /// medians with min–max, no ratios and no mean.
    Transposed {
        /// The metrics the README's section shows.
        readme_metrics: &'static [&'static str],
        /// Words for values that are verdicts.
        word: Option<ValueWord>,
    },
}

/// How the report lays out one suite.
#[derive(Clone, Copy, Debug)]
pub struct SuiteLayout {
    /// The suite's name, as in its records.
    pub suite: &'static str,
    /// How its figures read.
    pub shape: Shape,
    /// The allocator its ratios divide by when it ran, whichever was asked for first (the
    /// `programs` suite's: the program with nothing preloaded).
    pub baseline: Option<&'static str>,
    /// The parameter of its sweeps, for table headers and chart axes: (workload or suite,
    /// what the parameter is); a workload's entry comes before its suite's.
    pub sweep_parameters: &'static [(&'static str, &'static str)],
    /// Writes the suite's whole section of `report.md`.
    pub report_section: Option<SectionWriter>,
    /// Writes what comes in `report.md` before the workloads' tables.
    pub report_head: Option<SectionWriter>,
    /// Writes what comes in `report.md` in place of the geometric mean over the workloads.
    pub report_summary: Option<SectionWriter>,
    /// Writes the suite's whole section of the README's results.
    pub readme_section: Option<SectionWriter>,
    /// Writes what comes in the README before the suite's figures.
    pub readme_head: Option<SectionWriter>,
    /// Charts of the suite's own.
    pub charts: Option<ChartWriter>,
    /// Whether each workload also gets its bar chart (and sweep chart).
    pub workload_charts: bool,
    /// The suite's whole summary on the terminal, in place of a table per workload.
    pub terminal: Option<fn(&ResultsFile) -> String>,
}

impl SuiteLayout {
    /// The layout of a suite that changes nothing.
    pub const fn plain(suite: &'static str) -> Self {
        SuiteLayout {
            suite,
            shape: Shape::Ratios,
            baseline: None,
            sweep_parameters: &[],
            report_section: None,
            report_head: None,
            report_summary: None,
            readme_section: None,
            readme_head: None,
            charts: None,
            workload_charts: true,
            terminal: None,
        }
    }
}

/// What a report needs besides the records: each suite's layout, and the targets the report
/// opens with.
#[derive(Clone, Copy, Debug)]
pub struct ReportLayout {
    /// The suites' layouts; a suite not listed is laid out [`SuiteLayout::plain`].
    pub suites: &'static [SuiteLayout],
    /// Writes the targets (claims checked against this run's figures), if any.
    pub targets: Option<TargetsWriter>,
}

impl ReportLayout {
    /// No suite layouts and no targets: every suite laid out plainly.
    pub const PLAIN: ReportLayout = ReportLayout {
        suites: &[],
        targets: None,
    };

    /// The layout of `suite`: its own, or [`SuiteLayout::plain`].
    pub fn of(&self, suite: &str) -> SuiteLayout {
        self.suites
            .iter()
            .find(|l| l.suite == suite)
            .copied()
            .unwrap_or(SuiteLayout::plain(""))
    }

    /// What the parameter of `suite`'s sweeps of `workload` is.
    pub fn sweep_parameter(&self, suite: &str, workload: &str) -> &'static str {
        let params = self.of(suite).sweep_parameters;
        let of = |key: &str| params.iter().find(|(s, _)| *s == key);
        of(workload)
            .or_else(|| of(suite))
            .map_or("parameter", |(_, name)| name)
    }
}
