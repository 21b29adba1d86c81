//! How the report lays out each suite ([`LAYOUT`]): what a suite shows beside, or instead
//! of, the plain table and chart per workload and mean of ratios over them.

use std::path::{Path, PathBuf};

use crate::report::{
    ReportError, ReportLayout, Shape, SuiteLayout, Sweeps, View, render_sweep_svg, write_atomic,
};
use crate::results::{Record, ResultsFile};
use crate::workloads::{programs, realtime, security, storage, training};

/// The layout of every suite that needs one, and the targets the report opens with.
pub static LAYOUT: ReportLayout = ReportLayout {
    suites: &[
        // A program's ratios are to the program with nothing preloaded, and its summary
        // (over the programs every heap ran) replaces the mean over whichever programs
        // report a metric.
        SuiteLayout {
            baseline: Some(programs::report::BASELINE),
            report_head: Some(programs::report::markdown),
            report_summary: Some(|_, _| {}),
            readme_section: Some(programs::report::readme),
            terminal: Some(programs::report::terminal_text),
            ..SuiteLayout::plain(programs::SUITE)
        },
        // Tails in time units beside the floor, the progress verdicts in place of a mean
        // (the workloads measure different things), percentile distribution charts.
        SuiteLayout {
            report_head: Some(realtime::report::report_head),
            report_summary: Some(realtime::report::report_summary),
            readme_section: Some(realtime::report::readme),
            charts: Some(realtime::report::write_charts),
            ..SuiteLayout::plain(realtime::SUITE)
        },
        // Probabilities, bits and verdicts: read across allocators, no ratios.
        SuiteLayout {
            shape: Shape::Transposed {
                readme_metrics: &[
                    "entropy_fresh_64",
                    "entropy_steady_64",
                    "entropy_steady_1024",
                    "reuse_same_64",
                    "distance_median_64",
                    "overflow_64B_k8",
                    "caught",
                    "silent",
                ],
                word: Some(misuse_verdict),
            },
            ..SuiteLayout::plain("security")
        },
        SuiteLayout {
            sweep_parameters: &[("hls", "heap size per heap (B)")],
            ..SuiteLayout::plain("hls")
        },
        // The baseline (the queue) lacks some headline metrics, and probes and % error
        // against a closed form mean most as values.
        SuiteLayout {
            shape: Shape::Values,
            sweep_parameters: &[
                ("gpu-free-fraction", "free fraction A/T (%)"),
                ("gpu-sizes", "request size (B)"),
                ("gpu-threads", "requesting threads"),
            ],
            ..SuiteLayout::plain("gpu")
        },
        // A table and a chart per mix, a time-split chart and a recovery table, with the
        // suite's targets.
        SuiteLayout {
            report_section: Some(storage::report::markdown),
            readme_section: Some(storage::report::readme),
            charts: Some(storage::report::write_charts),
            workload_charts: false,
            terminal: Some(storage::report::terminal_text),
            ..SuiteLayout::plain("storage")
        },
        // Workloads that measure different things (a model's bytes, a planner's savings):
        // no mean of ratios, but their values (and the memory chart).
        SuiteLayout {
            shape: Shape::Values,
            sweep_parameters: &[
                ("training-growing-batch", "batch size"),
                ("training-delta", "share of the iteration (%)"),
            ],
            report_summary: Some(training_summary),
            charts: Some(write_training_memory_chart),
            ..SuiteLayout::plain(training::SUITE)
        },
    ],
    targets: Some(crate::targets::markdown),
};

/// In place of a mean over the `training` workloads: where their targets are, and the memory
/// chart if the run drew it.
fn training_summary(out: &mut String, results: &ResultsFile) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "\nThe workloads measure different things, so no mean is taken; their targets open \
         the report. Cost model: {}.",
        training::cost_model().describe()
    );
    let view = View::new(results);
    if !training_memory_curves(&view).is_empty() {
        let _ = writeln!(
            out,
            "\nDevice memory over one BERT-Large iteration (the most GiB live in each 2% of the \
             plan's own iteration), keep-all vs planned:\n\n![training memory]({TRAINING_MEMORY_CHART})"
        );
    }
}

/// A misuse case's `score` as its verdict (caught, crashed, hung, silent).
fn misuse_verdict(record: &Record, value: f64) -> Option<&'static str> {
    (record.unit == "score")
        .then(|| security::analysis::Verdict::from_score(value))
        .flatten()
        .map(security::analysis::Verdict::as_str)
}

/// The chart of device memory over one BERT-Large iteration in the `training` suite.
pub const TRAINING_MEMORY_CHART: &str = "training-memory-bert-large.svg";

/// The workload whose sweep holds the memory curves.
const TRAINING_MEMORY_WORKLOAD: &str = "training-delta";

/// The memory curves of `training-delta` (keep-all and planned, one line each) from the
/// first allocator that recorded them; empty if none did.
fn training_memory_curves<'a>(view: &View<'a>) -> Sweeps<'a> {
    let (suite, workload) = (training::SUITE, TRAINING_MEMORY_WORKLOAD);
    let Some(allocator) = view.allocators_in(suite, Some(workload)).into_iter().next() else {
        return Vec::new();
    };
    let lines: Vec<(&'a str, Vec<(f64, f64)>)> = [
        ("keep all", "bert-large_keep_all"),
        ("planned", "bert-large_planned"),
    ]
    .into_iter()
    .map(|(label, base)| (label, view.sweep_of(suite, workload, allocator, base)))
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
) -> Result<Vec<PathBuf>, ReportError> {
    let view = View::new(results);
    let curves = training_memory_curves(&view);
    if curves.is_empty() {
        return Ok(Vec::new());
    }
    let path = dir.join(TRAINING_MEMORY_CHART);
    let title = format!("{}/{TRAINING_MEMORY_WORKLOAD}: sweep", training::SUITE);
    let svg = render_sweep_svg(&curves, &title, "share of the iteration (%)").map_err(|e| {
        ReportError::Chart {
            path: path.clone(),
            message: e.to_string(),
        }
    })?;
    write_atomic(&path, svg.as_bytes())?;
    Ok(vec![path])
}
