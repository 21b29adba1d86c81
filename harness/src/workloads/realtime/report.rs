//! How the report lays out the `realtime` suite: tails in scaled units with the floor beside
//! them, the `progress` verdicts with what each heap blocks on, and a percentile
//! distribution chart per latency workload and thread count (HdrHistogram style: latency on
//! a log axis against 1/(1 - percentile)).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::SUITE;
use super::latency::FLOOR;
use crate::metrics::LINE_ROUND_TRIP_METRIC;
use crate::report::{
    ReportError, View, escape_cell, fmt_duration_ns, range_over_runs, table_header, table_row,
    write_atomic,
};
use crate::results::ResultsFile;

/// What each host heap waits for when another thread is stopped inside one of its calls:
/// the explanation beside its `progress` figures.
pub const BLOCKS_ON: &[(&str, &str)] = &[
    (
        "wfspan",
        "nothing: every call finishes in its own bounded steps (a remote free is one atomic push)",
    ),
    (
        "randomized",
        "little: a thread that finds its arena locked takes another, and a free into a locked arena goes onto that arena's lock-free stack",
    ),
    (
        "system",
        "glibc's arena locks: a thread that frees into, or allocates from, the arena the frozen thread holds",
    ),
    (
        "mimalloc",
        "little: thread-local heaps and atomic remote frees; a page or segment the frozen thread is taking from the OS",
    ),
    (
        "jemalloc",
        "the arena and bin mutexes behind its thread caches: a cache refill or flush waits for a frozen holder",
    ),
    (
        "rlsf",
        "its one mutex: every call of every thread, whenever the frozen thread holds it",
    ),
    (
        "wf_alloc",
        "rarely anything: its hosted GlobalAlloc wrapper, the one it ships, hands out thread tokens and shard state that are not wait-free",
    ),
];

/// The latency workloads, in the order their tables come.
const LATENCY_WORKLOADS: [&str; 2] = ["latency-fifo", "latency"];

/// The tail metrics of the tables, per kind: (column header, metric).
const TAILS: [(&str, &str); 4] = [
    ("alloc p99.999", "alloc_p99.999"),
    ("alloc max", "alloc_max"),
    ("free p99.999", "free_p99.999"),
    ("free max", "free_max"),
];

/// The tails of one latency workload at one thread count: a row per allocator and a last
/// row for the floor (the lowest of the floors the allocators' runs measured: what the
/// machine adds to any call in this run), medians over the runs in scaled units.
fn tails_table(out: &mut String, view: &View<'_>, workload: &str, threads: usize) {
    let headers: Vec<String> = ["allocator".to_owned()]
        .into_iter()
        .chain(TAILS.iter().map(|(h, _)| (*h).to_owned()))
        .collect();
    table_header(out, &headers, 1);
    let median = |a: &str, metric: &str| {
        view.get(SUITE, workload, a, threads, metric)
            .map(|r| r.median)
    };
    let allocators = view.allocators_in(SUITE, Some(workload));
    let best: Vec<Option<f64>> = TAILS
        .iter()
        .map(|(_, m)| {
            allocators
                .iter()
                .filter_map(|a| median(a, m))
                .min_by(f64::total_cmp)
        })
        .collect();
    for a in &allocators {
        if median(a, TAILS[0].1).is_none() {
            continue;
        }
        let mut cells = vec![escape_cell(a)];
        for ((_, metric), best) in TAILS.iter().zip(&best) {
            cells.push(match median(a, metric) {
                Some(v) if Some(v) == *best && allocators.len() > 1 => {
                    format!("**{}**", fmt_duration_ns(v))
                }
                Some(v) => fmt_duration_ns(v),
                None => "—".to_owned(),
            });
        }
        table_row(out, &cells);
    }
    let floor: Vec<String> = TAILS
        .iter()
        .map(|(_, metric)| {
            let floor_metric = floor_of(metric);
            allocators
                .iter()
                .filter_map(|a| median(a, &floor_metric))
                .min_by(f64::total_cmp)
                .map_or("—".to_owned(), fmt_duration_ns)
        })
        .collect();
    let mut cells = vec!["*floor (an empty call)*".to_owned()];
    cells.extend(floor);
    table_row(out, &cells);
}

/// The floor metric beside a tail metric (`alloc_max` → `floor_max`).
fn floor_of(metric: &str) -> String {
    let suffix = metric.split_once('_').map_or(metric, |(_, s)| s);
    format!("{FLOOR}_{suffix}")
}

/// Which policy a latency workload's threads ran under at `threads`, from their
/// `sched_fifo` figures: `SCHED_FIFO`, the default policy, mixed, or not recorded.
pub(crate) fn policy(view: &View<'_>, workload: &str, threads: usize) -> &'static str {
    let shares: Vec<f64> = view
        .allocators_in(SUITE, Some(workload))
        .iter()
        .filter_map(|a| {
            view.get(
                SUITE,
                workload,
                a,
                threads,
                crate::metrics::SCHED_FIFO_METRIC,
            )
        })
        .map(|r| r.median)
        .collect();
    if shares.is_empty() {
        "policy not recorded"
    } else if shares.iter().all(|s| *s >= 1.0) {
        "SCHED_FIFO"
    } else if shares.iter().all(|s| *s <= 0.0) {
        "the default time-sharing policy"
    } else {
        "mixed policies"
    }
}

/// What a thread count measures in a latency workload, in words.
fn what_it_measures(view: &View<'_>, workload: &str, threads: usize) -> String {
    let cores = view
        .threads_in(SUITE, Some(workload))
        .into_iter()
        .min()
        .unwrap_or(threads)
        .max(1);
    let policy = policy(view, workload, threads);
    if threads > cores && policy != "SCHED_FIFO" {
        format!(
            "`{workload}`, {threads} threads ({}x the cores, {policy}): threads take turns on the cores, so the tail is mostly a thread switched out inside a call, the scheduler's time slice or a host interruption, whichever allocator runs",
            threads / cores
        )
    } else {
        format!("`{workload}`, {threads} threads ({policy})")
    }
}

/// The shortest and longest cache-line round trip between two cores timed before the runs
/// of `workload` at `threads` (see `machine::line_round_trip_ns`), if they report it.
fn round_trip_range(view: &View<'_>, workload: &str, threads: usize) -> Option<(f64, f64)> {
    range_over_runs(
        view.allocators_in(SUITE, Some(workload))
            .iter()
            .filter_map(|a| view.get(SUITE, workload, a, threads, LINE_ROUND_TRIP_METRIC)),
    )
}

/// The tails tables of every latency workload and thread count the run has.
fn tails_section(out: &mut String, view: &View<'_>) {
    for workload in LATENCY_WORKLOADS {
        for t in view.threads_in(SUITE, Some(workload)) {
            let machine = round_trip_range(view, workload, t)
                .map(|(lo, hi)| {
                    format!(
                        "; a cache line went from one core to the other and back in {}–{} just \
                         before the runs (`{LINE_ROUND_TRIP_METRIC}`: a VM's figure moves with \
                         where the host runs its vCPUs, and every call that waits for a line \
                         the other core wrote moves with it)",
                        fmt_duration_ns(lo),
                        fmt_duration_ns(hi)
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "\n{} — median over the runs; **bold** is the lowest{machine}:\n",
                what_it_measures(view, workload, t)
            );
            tails_table(out, view, workload, t);
        }
    }
}

/// The `progress` table: per allocator the freezes, how many blocked another thread, the
/// others' longest call during and outside freezes, their throughput during over outside,
/// and what the heap blocks on.
fn progress_section(out: &mut String, view: &View<'_>) {
    let workload = "progress";
    let allocators = view.allocators_in(SUITE, Some(workload));
    if allocators.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n`progress`: one worker at a time frozen for 20 ms inside an allocator call; a freeze \
         *blocked* another worker when one of its calls took at least 10 ms and ended within \
         1 ms after the freeze (median over the runs; blocked: the most in any run):\n"
    );
    let headers: Vec<String> = [
        "allocator",
        "threads",
        "freezes",
        "blocked (the same test on the gaps between calls)",
        "others' longest call, during / outside freezes (an empty call's)",
        "others' longest gap between calls, during / outside",
        "others' throughput during / outside",
        "what a frozen thread holds up",
    ]
    .iter()
    .map(|h| (*h).to_owned())
    .collect();
    table_header(out, &headers, 1);
    for a in &allocators {
        for t in view.threads_in(SUITE, Some(workload)) {
            let get = |m: &str| view.get(SUITE, workload, a, t, m);
            let Some(freezes) = get("freezes") else {
                continue;
            };
            let blocked = get("blocked_freezes").map_or("—".to_owned(), |r| {
                let share = get("blocked_fraction").map_or(f64::NAN, |f| f.median);
                let gaps = get("gap_blocked_freezes")
                    .map_or(String::new(), |g| format!(" ({:.0})", g.max));
                format!("{:.0} ({:.0}%){gaps}", r.max, share * 100.0)
            });
            let pair = |during: &str, outside: &str| match (get(during), get(outside)) {
                (Some(d), Some(o)) => Some(format!(
                    "{} / {}",
                    fmt_duration_ns(d.median),
                    fmt_duration_ns(o.median)
                )),
                _ => None,
            };
            let longest = match (
                pair("others_max_during_freeze", "others_max_outside_freeze"),
                pair("floor_max_during_freeze", "floor_max_outside_freeze"),
            ) {
                (Some(calls), Some(floor)) => format!("{calls} ({floor})"),
                (Some(calls), None) => calls,
                _ => "—".to_owned(),
            };
            let gaps = pair("gaps_max_during_freeze", "gaps_max_outside_freeze")
                .unwrap_or_else(|| "—".to_owned());
            let throughput = get("others_throughput_during_freeze")
                .map_or("—".to_owned(), |r| format!("{:.2}", r.median));
            let holds = BLOCKS_ON
                .iter()
                .find(|(name, _)| name == a)
                .map_or("", |(_, why)| why);
            table_row(
                out,
                &[
                    escape_cell(a),
                    t.to_string(),
                    format!("{:.0}", freezes.median),
                    blocked,
                    longest,
                    gaps,
                    throughput,
                    escape_cell(holds),
                ],
            );
        }
    }
}

/// The chart files of the percentile distributions, one per latency workload and thread
/// count in the run.
fn percentile_charts(view: &View<'_>) -> Vec<(String, &'static str, usize)> {
    LATENCY_WORKLOADS
        .iter()
        .flat_map(|&w| {
            view.threads_in(SUITE, Some(w))
                .into_iter()
                .map(move |t| (format!("{SUITE}-{w}-{t}t-percentiles.svg"), w, t))
        })
        .collect()
}

/// `report.md`, before the workloads' tables: the tails in scaled units beside the floor,
/// and the percentile charts.
pub fn report_head(out: &mut String, results: &ResultsFile) {
    let view = View::new(results);
    let _ = writeln!(
        out,
        "\nThe tails in time units, beside the **floor**: the same two clock reads around a \
         call that does nothing, timed once a step in the same runs (the lowest of the \
         allocators' runs), which is what the machine itself adds to any call."
    );
    tails_section(out, &view);
    let charts = percentile_charts(&view);
    if !charts.is_empty() {
        let _ = writeln!(
            out,
            "\nPercentile distributions (latency against 1/(1 - percentile), both on log axes; \
             the floor dashed):\n"
        );
        for (file, w, t) in charts {
            let _ = writeln!(out, "![{w}, {t} threads]({file})");
        }
    }
}

/// `report.md`, in place of a mean over the workloads (which measure different things): the
/// `progress` verdicts.
pub fn report_summary(out: &mut String, results: &ResultsFile) {
    let view = View::new(results);
    progress_section(out, &view);
    let _ = writeln!(
        out,
        "\nThe workloads measure different things (latencies; freezes that blocked), so no mean \
         is taken."
    );
}

/// The README's section: the tails with the floor, and the `progress` table.
pub fn readme(out: &mut String, results: &ResultsFile) {
    let view = View::new(results);
    let _ = writeln!(
        out,
        "\n#### Suite `realtime`: tails beside the floor, and progress"
    );
    for note in results.notes.iter().filter(|n| n.suite == SUITE) {
        let _ = writeln!(out, "\n{}", note.text);
    }
    tails_section(out, &view);
    progress_section(out, &view);
}

/// The percentile distribution charts: per latency workload and thread count, alloc and
/// free one panel each, a line per allocator and the floor dashed.
pub fn write_charts(dir: &Path, results: &ResultsFile) -> Result<Vec<PathBuf>, ReportError> {
    let view = View::new(results);
    let mut written = Vec::new();
    for (file, workload, threads) in percentile_charts(&view) {
        let path = dir.join(&file);
        let svg = render_percentiles(&view, workload, threads).map_err(|e| ReportError::Chart {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&path, svg.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

/// The percentiles drawn, with their metric suffixes; `max` is drawn at one in the number
/// of calls timed by the smallest run (here: one in a million).
const POINTS: [(&str, f64); 6] = [
    ("p50", 0.5),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("p99.99", 0.9999),
    ("p99.999", 0.99999),
    ("max", 0.999999),
];

fn render_percentiles(
    view: &View<'_>,
    workload: &str,
    threads: usize,
) -> Result<String, Box<dyn std::error::Error>> {
    let allocators = view.allocators_in(SUITE, Some(workload));
    let curve = |a: &str, kind: &str| -> Vec<(f64, f64)> {
        POINTS
            .iter()
            .filter_map(|(suffix, p)| {
                let r = view.get(SUITE, workload, a, threads, &format!("{kind}_{suffix}"))?;
                (r.median > 0.0).then(|| (1.0 / (1.0 - p), r.median))
            })
            .collect()
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 760)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(
            &format!("{SUITE}/{workload}, {threads} threads: latency by percentile"),
            ("sans-serif", 22),
        )?;
        let panels = body.split_evenly((2, 1));
        for (kind, panel) in ["alloc", "free"].iter().zip(&panels) {
            let curves: Vec<(&str, Vec<(f64, f64)>)> = allocators
                .iter()
                .map(|a| (*a, curve(a, kind)))
                .filter(|(_, c)| !c.is_empty())
                .collect();
            let floor = allocators
                .iter()
                .map(|a| curve(a, FLOOR))
                .filter(|c| !c.is_empty())
                .min_by(|a, b| {
                    let last = |c: &Vec<(f64, f64)>| c.last().map_or(f64::INFINITY, |p| p.1);
                    last(a).total_cmp(&last(b))
                });
            let values = curves
                .iter()
                .flat_map(|(_, c)| c.iter().map(|p| p.1))
                .chain(floor.iter().flatten().map(|p| p.1));
            let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
            let (lo, hi) = if lo.is_finite() && hi > lo {
                (lo / 1.5, hi * 1.5)
            } else {
                (1.0, 1e6)
            };
            let mut chart = ChartBuilder::on(panel)
                .margin(12)
                .caption(format!("{kind} (lower is better)"), ("sans-serif", 18))
                .x_label_area_size(40)
                .y_label_area_size(80)
                .build_cartesian_2d((1.5f64..2e6).log_scale(), (lo..hi).log_scale())?;
            chart
                .configure_mesh()
                .x_desc("percentile")
                .y_desc("latency")
                .x_label_formatter(&|x| percentile_label(*x))
                .y_label_formatter(&|y| fmt_duration_ns(*y))
                .draw()?;
            for (i, (a, c)) in curves.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(c.iter().copied(), color.stroke_width(2)))?
                    .label(*a)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
            }
            if let Some(floor) = floor {
                chart
                    .draw_series(DashedLineSeries::new(floor, 6, 4, BLACK.stroke_width(1)))?
                    .label("floor")
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// The tick label of 1/(1 - p): `50%`, `99%`, `99.9%`, ...
fn percentile_label(x: f64) -> String {
    let p = 100.0 * (1.0 - 1.0 / x);
    // `max` is drawn at one in a million (see `POINTS`).
    if x >= 0.99e6 {
        "max".to_owned()
    } else if p < 99.0 {
        format!("{p:.0}%")
    } else {
        let digits = (x.log10().round() as usize).saturating_sub(2);
        format!("{p:.digits$}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Record;

    fn record(workload: &str, allocator: &str, threads: usize, metric: &str, v: f64) -> Record {
        crate::testing::record(SUITE, workload, allocator, threads, metric, v)
    }

    #[test]
    fn durations_take_the_unit_that_keeps_three_figures() {
        assert_eq!(fmt_duration_ns(812.0), "812 ns");
        assert_eq!(fmt_duration_ns(56_640.0), "56.6 µs");
        assert_eq!(fmt_duration_ns(1_234_567.0), "1.23 ms");
        assert_eq!(fmt_duration_ns(2.5e9), "2.50 s");
        assert_eq!(percentile_label(2.0), "50%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(100_000.0), "99.999%");
        assert_eq!(percentile_label(1e6), "max");
        assert_eq!(floor_of("alloc_p99.999"), "floor_p99.999");
        assert_eq!(floor_of("free_max"), "floor_max");
    }

    #[test]
    fn tails_sit_beside_the_floor_and_progress_says_what_each_heap_holds_up() {
        let mut records = Vec::new();
        for (a, scale) in [("wfspan", 1.0), ("rlsf", 3.0)] {
            for (_, metric) in TAILS {
                records.push(record("latency-fifo", a, 2, metric, 10_000.0 * scale));
                records.push(record(
                    "latency-fifo",
                    a,
                    2,
                    &floor_of(metric),
                    900.0 * scale,
                ));
            }
            records.push(record("latency-fifo", a, 2, "sched_fifo", 1.0));
            records.push(record("progress", a, 2, "freezes", 200.0));
            records.push(record(
                "progress",
                a,
                2,
                "blocked_freezes",
                40.0 * (scale - 1.0),
            ));
            records.push(record(
                "progress",
                a,
                2,
                "blocked_fraction",
                0.1 * (scale - 1.0),
            ));
        }
        let results = ResultsFile::of_records(records);
        let mut out = String::new();
        readme(&mut out, &results);
        assert!(
            out.contains("`latency-fifo`, 2 threads (SCHED_FIFO)"),
            "{out}"
        );
        assert!(out.contains("| wfspan | **10.0 µs** |"), "{out}");
        assert!(out.contains("| rlsf | 30.0 µs |"), "{out}");
        // The floor row is the lowest floor of the run.
        assert!(
            out.contains("| *floor (an empty call)* | 900 ns |"),
            "{out}"
        );
        assert!(out.contains("| wfspan | 2 | 200 | 0 (0%) |"), "{out}");
        assert!(out.contains("| rlsf | 2 | 200 | 80 (20%) |"), "{out}");
        assert!(out.contains("its one mutex"), "{out}");

        let dir = std::env::temp_dir().join(format!("alloclab-rt-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let written = write_charts(&dir, &results).unwrap();
        assert_eq!(written.len(), 1, "{written:?}");
        let svg = std::fs::read_to_string(&written[0]).unwrap();
        assert!(
            svg.contains("latency by percentile") && svg.contains("floor"),
            "{svg}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_tails_table_says_the_cache_line_round_trip_of_its_runs_where_they_timed_it() {
        let mut records = Vec::new();
        for a in ["wfspan", "mimalloc"] {
            for (_, metric) in TAILS {
                records.push(record("latency-fifo", a, 2, metric, 1_000.0));
            }
        }
        let caption = |records: Vec<Record>| {
            let mut out = String::new();
            readme(&mut out, &ResultsFile::of_records(records));
            out.lines()
                .find(|l| l.starts_with("`latency-fifo`, 2 threads"))
                .unwrap_or_else(|| panic!("no caption in {out}"))
                .to_owned()
        };
        assert!(!caption(records.clone()).contains(LINE_ROUND_TRIP_METRIC));
        for (a, lo, hi) in [("wfspan", 85.0, 120.0), ("mimalloc", 95.0, 430.0)] {
            records.push(Record {
                min: lo,
                max: hi,
                ..record("latency-fifo", a, 2, LINE_ROUND_TRIP_METRIC, lo)
            });
        }
        let line = caption(records);
        assert!(
            line.contains("and back in 85 ns–430 ns just before the runs"),
            "{line}"
        );
    }
}
