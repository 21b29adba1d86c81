//! The README's results section, and replacing it between its markers.

use std::fmt::Write as _;

use super::*;
use crate::results::ResultsFile;

/// The README's results section: the machine/commit/parameters line, per suite the
/// geometric-mean summary (of at most [`MAX_CHART_PANELS`] metrics, chosen as for the
/// charts), the clock-read note where the suite times single operations, and a compact table
/// of the `time` ratios (or of the suite's first headline metric if it has no `time`), and a
/// pointer to the full report. A suite of one workload gets its ratios alone, under a
/// heading that says so.
pub fn render_readme_section(results: &ResultsFile, layout: &'static ReportLayout) -> String {
    let view = View::with_layout(results, layout);
    let mut out = String::new();
    out.push_str(&header_line(results));
    out.push('\n');
    if let Some(targets) = layout.targets {
        targets(&mut out, results, "####");
    }
    for &suite in &view.suites {
        let baseline = view.baseline(suite).unwrap_or(NONE);
        let own = layout.of(suite);
        if let Some(section) = own.readme_section {
            section(&mut out, results);
            continue;
        }
        if let Some(head) = own.readme_head {
            head(&mut out, results);
        }
        if let Shape::Values = own.shape {
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
        if let Shape::Transposed { readme_metrics, .. } = own.shape {
            let _ = writeln!(
                out,
                "\n#### Suite `{suite}`: headline figures (median over the runs)\n"
            );
            for workload in view.workloads(suite) {
                // A blank line after a table (a workload may have none here): without it,
                // markdown reads the next table's header as rows of the one before.
                if out.ends_with("|\n") {
                    out.push('\n');
                }
                transposed_table(&mut out, &view, suite, workload, Some(readme_metrics));
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
         `report.md` in the directory the suite wrote (`--out`, by default \
         `target/alloclab-report/`).\n",
    );
    out
}
