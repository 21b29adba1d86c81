//! `report.md`: the whole report.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::*;
use crate::results::{Record, ResultsFile};

/// The body of `report.md`: a header (machine, commit, date, command, parameters, timer
/// overhead); per suite and workload, a table with one row per thread count and allocator,
/// a `median (min–max) unit` column and a ratio-to-baseline column per metric, the best
/// median per metric and thread count in bold (split by metric family where there are
/// many metrics), a note on the clock read inside the figures of a workload that times
/// single operations, and a link to the workload's chart; per suite of several workloads,
/// the geometric mean over workloads of each ratio; and a timer-overhead note that warns about every record whose
/// `timer_overhead` median exceeds [`TIMER_OVERHEAD_WARN_PERCENT`], except for workloads
/// that time single operations.
pub fn render_markdown(results: &ResultsFile, layout: &'static ReportLayout) -> String {
    let view = View::with_layout(results, layout);
    let mut out = String::new();
    out.push_str("# alloclab report\n\n");
    header_list(&mut out, results);
    out.push('\n');
    let baselines: Vec<&str> = view
        .suites
        .iter()
        .filter_map(|s| view.baseline(s))
        .collect();
    let baseline = if baselines.iter().all(|b| Some(b) == baselines.first()) {
        baselines.first().copied().unwrap_or(NONE).to_owned()
    } else {
        "the first allocator asked for that ran the suite".to_owned()
    };
    let _ = writeln!(
        out,
        "Each cell is the median over the runs, then (min–max) and the unit. **Bold** marks \
         the best median of each metric at each thread count. The “× A” columns divide a \
         median by the median of A ({baseline}; the first allocator asked for that ran the \
         suite) for the same workload and thread count; every figure comes from this one \
         run, so the ratios compare like with like. Charts: `<suite>-<workload>.svg` next \
         to this file."
    );
    if let Some(targets) = layout.targets {
        targets(&mut out, results, "##");
    }

    for &suite in &view.suites {
        let own = layout.of(suite);
        let baseline = view.baseline(suite).unwrap_or(NONE);
        let _ = writeln!(out, "\n## Suite `{suite}`");
        for note in results.notes.iter().filter(|n| n.suite == suite) {
            let _ = writeln!(out, "\n{}", note.text);
        }
        if let Some(section) = own.report_section {
            section(&mut out, results);
            continue;
        }
        if let Some(head) = own.report_head {
            head(&mut out, results);
        }
        for workload in view.workloads(suite) {
            let _ = writeln!(out, "\n### {suite}/{workload}");
            if let Shape::Transposed { .. } = own.shape {
                out.push('\n');
                transposed_table(&mut out, &view, suite, workload, None);
                let _ = writeln!(
                    out,
                    "\n![{suite}/{workload}]({})",
                    chart_file_name(suite, workload)
                );
                continue;
            }
            let metrics = view.metrics_in(suite, Some(workload));
            for (title, metrics) in metric_tables(&metrics) {
                out.push('\n');
                if let Some(title) = title {
                    let _ = writeln!(out, "{title}:\n");
                }
                workload_table(&mut out, &view, suite, workload, &metrics);
            }
            if let Some(note) = clock_read_note(&view, suite, Some(workload)) {
                let _ = writeln!(out, "\n{note}");
            }
            let _ = writeln!(
                out,
                "\n![{suite}/{workload}]({})",
                chart_file_name(suite, workload)
            );
            sweep_section(&mut out, &view, suite, workload);
        }
        if let Some(summary) = own.report_summary {
            summary(&mut out, results);
            continue;
        }
        if let Shape::Transposed { .. } = own.shape {
            let _ = writeln!(
                out,
                "\nEach cell is the median over the runs (min–max where they differ); \
                 **bold** marks the best. No ratios and no mean: these figures are \
                 probabilities, bits and verdicts (`score`: 1 caught, 0.5 crashed, 0.25 hung, \
                 0 silent, shown as words), not times."
            );
            continue;
        }
        // A mean over one workload would repeat that workload's table.
        if let [only] = view.workloads(suite)[..] {
            let _ = writeln!(
                out,
                "\nThe suite has one workload, `{only}`: its table above is the suite's \
                 summary, and no mean is taken."
            );
            continue;
        }
        let _ = writeln!(
            out,
            "\n### Suite `{suite}`: geometric mean over workloads of the ratio to {baseline}"
        );
        let metrics = view.metrics_in(suite, None);
        for (title, metrics) in metric_tables(&metrics) {
            out.push('\n');
            if let Some(title) = title {
                let _ = writeln!(out, "{title}:\n");
            }
            summary_table(&mut out, &view, suite, &metrics);
        }
    }

    out.push_str("\n## Timer overhead\n\n");
    timer_overhead_note(&mut out, results);
    failures_section(&mut out, results);
    out
}

/// The measurements that could not be taken, if any.
pub(super) fn failures_section(out: &mut String, results: &ResultsFile) {
    if results.failures.is_empty() {
        return;
    }
    out.push_str("\n## Failed measurements\n\n");
    out.push_str(
        "These measurements have no figures (or fewer runs than asked): the worker failed \
         and the measurement's later runs were skipped.\n\n",
    );
    table_header(
        out,
        &[
            "measurement".to_owned(),
            "threads".to_owned(),
            "run".to_owned(),
            "error".to_owned(),
        ],
        1,
    );
    for f in &results.failures {
        table_row(
            out,
            &[
                escape_cell(&format!("{}/{} on {}", f.suite, f.workload, f.allocator)),
                f.threads.to_string(),
                f.run.to_string(),
                escape_cell(&f.error),
            ],
        );
    }
}

/// The header of `report.md`, as a list.
pub(super) fn header_list(out: &mut String, results: &ResultsFile) {
    let h = &results.header;
    let m = &h.machine;
    let p = &h.parameters;
    let kernel = if m.kernel.is_empty() {
        String::new()
    } else {
        format!(", kernel {}", m.kernel)
    };
    let _ = writeln!(
        out,
        "- **Machine:** {}, {} cores, {} memory ({} {}{kernel})",
        m.cpu_model,
        m.cores,
        fmt_gib(m.memory_bytes),
        m.os,
        m.arch
    );
    let _ = writeln!(
        out,
        "- **Commit:** {}{}",
        code_span(&h.commit),
        if h.commit_dirty { " (dirty)" } else { "" }
    );
    let _ = writeln!(out, "- **Date:** {}", format_utc(h.created_unix_s));
    let _ = writeln!(out, "- **Command:** {}", code_span(&h.command));
    let _ = writeln!(
        out,
        "- **Parameters:** scale {}, {}, threads {}, seed {}",
        p.scale,
        plural(u64::from(p.runs), "run"),
        fmt_threads(&p.threads),
        p.seed
    );
    let _ = writeln!(
        out,
        "- **Timer overhead:** {} ns per clock read",
        fmt_value(h.timer_overhead_ns)
    );
}

/// The one-line summary of machine, commit and parameters used by the README section.
pub(super) fn header_line(results: &ResultsFile) -> String {
    let h = &results.header;
    let m = &h.machine;
    let p = &h.parameters;
    format!(
        "Measured on {} ({} cores, {}) at commit {}{} on {}: {} — scale {}, {}, \
         threads {}, seed {}; timer overhead {} ns per clock read.",
        m.cpu_model,
        m.cores,
        fmt_gib(m.memory_bytes),
        code_span(&h.commit),
        if h.commit_dirty { " (dirty)" } else { "" },
        format_utc(h.created_unix_s),
        code_span(&h.command),
        p.scale,
        plural(u64::from(p.runs), "run"),
        fmt_threads(&p.threads),
        p.seed,
        fmt_value(h.timer_overhead_ns)
    )
}

/// The table of `metrics` of one workload.
pub(super) fn workload_table(
    out: &mut String,
    view: &View<'_>,
    suite: &str,
    workload: &str,
    metrics: &[MetricInfo<'_>],
) {
    // The allocators that ran this workload, or tried to (a failure is a row of dashes);
    // not those of the suite that never run it (the gpu suite's device-only baselines).
    let ran = view.allocators_in(suite, Some(workload));
    let allocators: Vec<&str> = view
        .allocators_in(suite, None)
        .into_iter()
        .filter(|a| {
            ran.contains(a)
                || view
                    .results
                    .failures
                    .iter()
                    .any(|f| f.suite == suite && f.workload == workload && f.allocator == *a)
        })
        .collect();
    let threads = view.threads_in(suite, Some(workload));
    let ratio_header = view.ratio_header(suite);

    let mut headers = vec!["allocator".to_owned(), "threads".to_owned()];
    for m in metrics {
        headers.push(escape_cell(m.name));
        headers.push(ratio_header.clone());
    }
    table_header(out, &headers, 1);

    for &t in &threads {
        // The medians each allocator's cell competes with, per metric.
        let medians: Vec<Vec<f64>> = metrics
            .iter()
            .map(|m| {
                allocators
                    .iter()
                    .filter_map(|a| view.get(suite, workload, a, t, m.name))
                    .map(|r| r.median)
                    .filter(|v| v.is_finite())
                    .collect()
            })
            .collect();
        for &a in &allocators {
            let mut cells = vec![escape_cell(a), t.to_string()];
            for (m, medians) in metrics.iter().zip(&medians) {
                match view.get(suite, workload, a, t, m.name) {
                    Some(r) => {
                        let bold = is_best(r.median, medians, m.lower_is_better);
                        cells.push(fmt_cell(r, bold));
                        cells.push(fmt_ratio(view.ratio(suite, workload, a, t, m.name)));
                    }
                    None => {
                        cells.push(NONE.to_owned());
                        cells.push(NONE.to_owned());
                    }
                }
            }
            table_row(out, &cells);
        }
    }
}

/// A row of a transposed table: its cells, and per allocator cell whether it is the best.
pub(super) type TransposedRow = (Vec<String>, Vec<bool>);

/// The rows of the transposed table of one workload (one thread count per row group):
/// the header (`metric`, `threads`, then the allocators) and one row of plain cells per
/// (metric, thread count), metrics in the order the worker reported them, restricted to
/// `only` if given. The second element of each row says, per allocator cell, whether it is
/// the best median of the row.
pub(super) fn transposed_rows(
    view: &View<'_>,
    suite: &str,
    workload: &str,
    only: Option<&[&str]>,
) -> (Vec<String>, Vec<TransposedRow>) {
    let allocators = view.allocators_in(suite, Some(workload));
    let word = match view.layout.of(suite).shape {
        Shape::Transposed { word, .. } => word,
        Shape::Ratios | Shape::Values => None,
    };
    let mut metrics: Vec<MetricInfo<'_>> = Vec::new();
    for r in view.records_in(suite, Some(workload)) {
        if !QUALIFIER_METRICS.contains(&r.metric.as_str())
            && only.is_none_or(|o| o.contains(&r.metric.as_str()))
            && !metrics.iter().any(|m| m.name == r.metric)
        {
            metrics.push(MetricInfo {
                name: &r.metric,
                unit: &r.unit,
                lower_is_better: r.lower_is_better,
            });
        }
    }
    if let Some(only) = only {
        metrics.sort_by_key(|m| only.iter().position(|o| *o == m.name));
    }
    let mut header = vec!["metric".to_owned(), "threads".to_owned()];
    header.extend(allocators.iter().map(|a| (*a).to_owned()));
    let mut rows = Vec::new();
    for m in &metrics {
        for t in view.threads_in(suite, Some(workload)) {
            let records: Vec<Option<&Record>> = allocators
                .iter()
                .map(|a| view.get(suite, workload, a, t, m.name))
                .collect();
            let medians: Vec<f64> = records.iter().flatten().map(|r| r.median).collect();
            let mut cells = vec![format!("{} [{}]", m.name, m.unit), t.to_string()];
            let mut best = Vec::new();
            for r in &records {
                match r {
                    Some(r) => {
                        cells.push(fmt_plain_cell(r, word));
                        best.push(
                            is_best(r.median, &medians, m.lower_is_better)
                                && medians.iter().any(|v| *v != r.median),
                        );
                    }
                    None => {
                        cells.push(NONE.to_owned());
                        best.push(false);
                    }
                }
            }
            rows.push((cells, best));
        }
    }
    (header, rows)
}

/// A cell of a transposed table: the median, and (min–max) where the runs differ; a value
/// that is a verdict in words, where the suite's layout has them.
pub(super) fn fmt_plain_cell(r: &Record, word: Option<ValueWord>) -> String {
    let value = |v: f64| {
        word.and_then(|w| w(r, v))
            .map_or_else(|| fmt_value(v), str::to_owned)
    };
    if r.min == r.max {
        value(r.median)
    } else {
        format!("{} ({}–{})", value(r.median), value(r.min), value(r.max))
    }
}

/// The transposed Markdown table of one workload; see [`Shape::Transposed`].
pub(super) fn transposed_table(
    out: &mut String,
    view: &View<'_>,
    suite: &str,
    workload: &str,
    only: Option<&[&str]>,
) {
    let (header, rows) = transposed_rows(view, suite, workload, only);
    if rows.is_empty() {
        return;
    }
    let mut header: Vec<String> = header.iter().map(|h| escape_cell(h)).collect();
    header[0] = format!("{suite}/{workload}");
    table_header(out, &header, 1);
    for (cells, best) in rows {
        let mut cells: Vec<String> = cells.iter().map(|c| escape_cell(c)).collect();
        for (cell, best) in cells[2..].iter_mut().zip(best) {
            if best {
                *cell = format!("**{cell}**");
            }
        }
        table_row(out, &cells);
    }
}

/// The transposed table of one workload as plain text, for the terminal; see
/// [`Shape::Transposed`]. Empty if the workload has no records.
pub fn transposed_text(
    results: &ResultsFile,
    layout: &'static ReportLayout,
    suite: &str,
    workload: &str,
) -> String {
    let view = View::with_layout(results, layout);
    let (header, rows) = transposed_rows(&view, suite, workload, None);
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for (cells, _) in &rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(out, "{c:<w$}");
            } else {
                let _ = write!(out, "  {c:>w$}");
            }
        }
        out.push('\n');
    };
    line(&header);
    for (cells, _) in &rows {
        line(cells);
    }
    out
}

/// The geometric-mean table of `metrics` of one suite.
pub(super) fn summary_table(
    out: &mut String,
    view: &View<'_>,
    suite: &str,
    metrics: &[MetricInfo<'_>],
) {
    let allocators = view.allocators_in(suite, None);
    let threads = view.threads_in(suite, None);
    let ratio_header = view.ratio_header(suite);

    let mut headers = vec!["allocator".to_owned(), "threads".to_owned()];
    for m in metrics {
        headers.push(format!("{} {ratio_header}", escape_cell(m.name)));
    }
    table_header(out, &headers, 1);
    let mut partial = false;
    for &t in &threads {
        for &a in &allocators {
            let mut cells = vec![escape_cell(a), t.to_string()];
            for m in metrics {
                let (mean, used, total) = view.geomean(suite, a, t, m.name);
                let mut cell = fmt_ratio(mean);
                if mean.is_some() && used < total {
                    let _ = write!(cell, " ({used}/{total} workloads)");
                    partial = true;
                }
                cells.push(cell);
            }
            table_row(out, &cells);
        }
    }
    if partial {
        out.push_str(
            "\nWorkloads where either median is missing, or the ratio is not positive, are left \
         out of a mean; “(k/n workloads)” says how many counted.\n",
        );
    }
}

/// The note on the clock read inside every figure of the workloads of `suite` (or of
/// `workload`) that report [`CLOCK_READ_METRIC`], followed by the scheduling policy their
/// threads ran under where they report [`SCHED_FIFO_METRIC`]; `None` if none reports a
/// clock read.
pub(super) fn clock_read_note(
    view: &View<'_>,
    suite: &str,
    workload: Option<&str>,
) -> Option<String> {
    let clock: Vec<&Record> = view
        .records_in(suite, workload)
        .filter(|r| r.metric == CLOCK_READ_METRIC)
        .collect();
    let (lo, hi) = range_over_runs(clock.iter().copied())?;
    let unit = &clock[0].unit;
    let mut note = format!(
        "Every latency here is the time between two clock reads around one call, so it \
         includes about one clock read: `{CLOCK_READ_METRIC}` was {}–{} {unit} in these runs \
         (calibrated in each worker). It is not subtracted.",
        fmt_value(lo),
        fmt_value(hi),
    );
    if let Some(sched) = sched_note(view, suite, workload) {
        note.push(' ');
        note.push_str(&sched);
    }
    Some(note)
}

/// Which scheduling policy the threads of `suite` (or of `workload`) ran under, from their
/// [`SCHED_FIFO_METRIC`] records; `None` if there are none.
pub(super) fn sched_note(view: &View<'_>, suite: &str, workload: Option<&str>) -> Option<String> {
    let sched: Vec<&Record> = view
        .records_in(suite, workload)
        .filter(|r| r.metric == SCHED_FIFO_METRIC)
        .collect();
    if sched.is_empty() {
        return None;
    }
    let all_fifo = sched.iter().all(|r| r.min >= 1.0);
    let none_fifo = sched.iter().all(|r| r.max <= 0.0);
    Some(
        if all_fifo {
            "Every thread of every run ran under `SCHED_FIFO` at priority 1 (real-time \
             scheduling: a thread keeps its core until it blocks between two steps, so a tail \
             is the allocator's work, its waits and interrupts, not a peer's time slice)."
        } else if none_fifo {
            "The threads ran under the default time-sharing policy (`--sched fifo` asks for \
             real-time `SCHED_FIFO`, which needs root, `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of \
             at least 1). With more threads than cores, p99.999 and max are then mostly a \
             peer's time slice landing inside a call, whichever the allocator."
        } else {
            "**Mixed scheduling:** some runs' threads ran under `SCHED_FIFO` and some under the \
             default policy (`sched_fifo` below 1 in results.json): their tails do not compare."
        }
        .to_owned(),
    )
}

/// The timer-overhead note: the largest `timer_overhead` value and a warning line for any
/// record whose median exceeds [`TIMER_OVERHEAD_WARN_PERCENT`], except for workloads that
/// time single operations (they report [`CLOCK_READ_METRIC`]), which are named instead.
pub(super) fn timer_overhead_note(out: &mut String, results: &ResultsFile) {
    let h = &results.header;
    let _ = writeln!(
        out,
        "One clock read costs {} ns (median of many).",
        fmt_value(h.timer_overhead_ns)
    );
    let overhead: Vec<&Record> = results
        .records
        .iter()
        .filter(|r| r.metric == TIMER_OVERHEAD_METRIC)
        .collect();
    let largest_median = overhead
        .iter()
        .copied()
        .filter(|r| r.median.is_finite())
        .max_by(|a, b| a.median.total_cmp(&b.median));
    let largest_single = overhead
        .iter()
        .map(|r| r.max)
        .filter(|v| v.is_finite())
        .max_by(f64::total_cmp);
    match (largest_median, largest_single) {
        (Some(r), Some(single)) => {
            let _ = writeln!(
                out,
                "Largest `{TIMER_OVERHEAD_METRIC}` over all records: median {} {unit} \
                 ({}/{}, {}, {}); largest single run {} {unit}.",
                fmt_value(r.median),
                r.suite,
                r.workload,
                r.allocator,
                fmt_thread_count(r.threads),
                fmt_value(single),
                unit = r.unit,
            );
        }
        _ => {
            let _ = writeln!(out, "No `{TIMER_OVERHEAD_METRIC}` records.");
            return;
        }
    }
    let mut per_workload: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for r in &overhead {
        let worst = per_workload.entry((&r.suite, &r.workload)).or_insert(0.0);
        *worst = worst.max(r.median);
    }
    out.push('\n');
    table_header(
        out,
        &[
            "workload".to_owned(),
            "largest median over allocators".to_owned(),
        ],
        1,
    );
    for ((suite, workload), worst) in &per_workload {
        table_row(
            out,
            &[
                format!("{suite}/{workload}"),
                format!("{} %", fmt_value(*worst)),
            ],
        );
    }
    let single_operations: BTreeSet<(&str, &str)> = results
        .records
        .iter()
        .filter(|r| r.metric == CLOCK_READ_METRIC)
        .map(|r| (r.suite.as_str(), r.workload.as_str()))
        .collect();
    let mut over: Vec<&Record> = overhead
        .iter()
        .copied()
        .filter(|r| r.median > TIMER_OVERHEAD_WARN_PERCENT)
        .filter(|r| !single_operations.contains(&(r.suite.as_str(), r.workload.as_str())))
        .collect();
    let view = View::new(results);
    over.sort_by(|a, b| {
        let rank = |r: &Record| {
            (
                view.suites.iter().position(|s| *s == r.suite),
                r.workload.clone(),
                view.allocators.iter().position(|x| *x == r.allocator),
                r.threads,
            )
        };
        rank(a).cmp(&rank(b))
    });
    out.push('\n');
    if !single_operations.is_empty() {
        let list: Vec<String> = single_operations
            .iter()
            .map(|(suite, workload)| format!("{suite}/{workload}"))
            .collect();
        let _ = writeln!(
            out,
            "{} time{} each allocator call on its own: there `{TIMER_OVERHEAD_METRIC}` (two \
             clock reads over the shortest call) is large by design and not warned about; \
             every figure includes about one clock read, reported as `{CLOCK_READ_METRIC}` and \
             not subtracted.\n",
            list.join(", "),
            if list.len() == 1 { "s" } else { "" },
        );
    }
    let other = if single_operations.is_empty() {
        ""
    } else {
        "other "
    };
    if over.is_empty() {
        let _ = writeln!(
            out,
            "No {other}workload's `{TIMER_OVERHEAD_METRIC}` median exceeds \
             {TIMER_OVERHEAD_WARN_PERCENT} %."
        );
    } else {
        let list: Vec<String> = over
            .iter()
            .map(|r| {
                format!(
                    "{}/{} on {} ({}): {} {}",
                    r.suite,
                    r.workload,
                    r.allocator,
                    fmt_thread_count(r.threads),
                    fmt_value(r.median),
                    r.unit
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "**WARNING:** `{TIMER_OVERHEAD_METRIC}` median above \
             {TIMER_OVERHEAD_WARN_PERCENT} % — reading the clock is a visible part of these \
             timings; raise the scale before trusting them: {}.",
            list.join("; ")
        );
    }
}
