//! Tests of the report.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::results::{
    FORMAT_NAME, FORMAT_VERSION, Header, Machine, Parameters, Record, ResultsFile,
};
use crate::workloads::layouts::LAYOUT;

fn record(workload: &str, allocator: &str, threads: usize, metric: &str, median: f64) -> Record {
    let (unit, lower_is_better) = match metric {
        "time" => ("ms", true),
        "peak_footprint" => ("MiB", true),
        "timer_overhead" => ("%", true),
        _ => ("ops/s", false),
    };
    Record {
        suite: "cpu".into(),
        workload: workload.into(),
        allocator: allocator.into(),
        threads,
        metric: metric.into(),
        unit: unit.into(),
        median,
        min: short(median * 0.9),
        max: short(median * 1.1),
        runs: 3,
        values: Vec::new(),
        lower_is_better,
    }
}

/// `v` rounded to a few decimals, so that its JSON form has few digits.
fn short(v: f64) -> f64 {
    format!("{v:.6}").parse().unwrap()
}

/// Two workloads, three allocators, two threads.
fn sample() -> ResultsFile {
    let mut records = Vec::new();
    // (workload, allocator, time, peak, overhead)
    let rows = [
        ("larson", "system", 100.0, 10.0, 0.1),
        ("larson", "mimalloc", 80.0, 12.0, 6.5),
        ("larson", "jemalloc", 125.0, 8.0, 0.2),
        ("cache", "system", 50.0, 4.0, 0.01),
        ("cache", "mimalloc", 100.0, 4.0, 0.01),
        ("cache", "jemalloc", 25.0, 5.0, 0.02),
    ];
    for (w, a, time, peak, overhead) in rows {
        records.push(record(w, a, 2, "time", time));
        records.push(record(w, a, 2, "peak_footprint", peak));
        records.push(record(w, a, 2, "timer_overhead", overhead));
    }
    ResultsFile {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        header: Header {
            machine: Machine {
                cpu_model: "Test CPU 9000".into(),
                cores: 2,
                memory_bytes: 25_325_268_992,
                os: "linux".into(),
                arch: "x86_64".into(),
                kernel: "6.1.0".into(),
            },
            commit: "7dea227".into(),
            commit_dirty: true,
            created_unix_s: 1_796_000_000,
            command: "alloclab suite --scale small".into(),
            parameters: Parameters {
                scale: "small".into(),
                runs: 3,
                threads: vec![2],
                seed: 42,
                suites: vec!["cpu".into()],
                allocators: vec!["system".into(), "mimalloc".into(), "jemalloc".into()],
            },
            timer_overhead_ns: 21.5,
        },
        records,
        failures: Vec::new(),
        notes: Vec::new(),
    }
}

#[test]
fn training_targets_are_computed_from_the_records() {
    use crate::workloads::training::{CACHING, CACHING_EXPANDABLE, SUITE};
    let mut results = sample();
    results.header.parameters.suites.push(SUITE.into());
    let mut add = |workload: &str, allocator: &str, metric: &str, median: f64| {
        results.records.push(Record {
            suite: SUITE.into(),
            workload: workload.into(),
            allocator: allocator.into(),
            threads: 1,
            metric: metric.into(),
            unit: "x".into(),
            median,
            min: median,
            max: median,
            runs: 1,
            values: Vec::new(),
            lower_is_better: true,
        });
    };
    for (metric, value) in [
        ("bert-large_saved", 57.7),
        ("bert-large_slowdown", 1.19),
        ("resnet50_saved", 30.0),
        ("resnet50_slowdown", 1.05),
        ("gpt2-large_batch_keep_all", 9.0),
        ("gpt2-large_batch_planned", 69.0),
        ("gpt2-large_batch_growth", 69.0 / 9.0),
    ] {
        add("training-delta", CACHING, metric, value);
    }
    add("training-growing-batch", CACHING, "fragmentation", 5.8);
    let md = render_markdown(&results, &LAYOUT);
    let targets = |text: &str, heading: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.starts_with(&format!("{heading} Targets: the training")))
            .take_while(|l| !l.starts_with(&format!("{heading} Suite")))
            .filter(|l| l.starts_with("- "))
            .map(str::to_owned)
            .collect()
    };
    let checks = targets(&md, "##");
    assert_eq!(checks.len(), 5, "{md}");
    assert!(checks[0].starts_with("- ✓") && checks[0].contains("bert-large"));
    assert!(checks[1].starts_with("- ✗") && checks[1].contains("resnet50"));
    assert!(checks[2].starts_with("- ✓") && checks[2].contains("7.67×"));
    assert!(checks[3].starts_with("- ✓") && checks[3].contains("5.80×"));
    // Nothing recorded for the expandable model: said, not guessed.
    assert!(checks[4].contains("not measured"), "{}", checks[4]);
    assert!(md.contains("Cost model: tensor fp16"), "{md}");
    assert!(md.contains("Targets: the training-memory planner model, claimed by the DELTA paper"));
    assert!(!md.contains(&format!("{CACHING_EXPANDABLE} |")));
    // The README carries the same checks and the values, not a mean of ratios.
    let readme = render_readme_section(&results, &LAYOUT);
    assert_eq!(targets(&readme, "####"), checks, "{readme}");
    assert!(
        !readme.contains("Suite `training`: geometric mean"),
        "{readme}"
    );
}

/// The cells of the row of `allocator` at `threads` in the first table after the line
/// `heading`.
fn row(md: &str, heading: &str, allocator: &str, threads: usize) -> Vec<String> {
    let start = md
        .lines()
        .position(|l| l == heading)
        .unwrap_or_else(|| panic!("no heading {heading:?} in\n{md}"));
    let prefix = format!("| {allocator} | {threads} |");
    let line = md
        .lines()
        .skip(start + 1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no row {prefix:?} under {heading:?} in\n{md}"));
    line.trim_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_owned())
        .collect()
}

/// A fresh, empty directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "alloclab-report-test-{}-{name}",
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Names of the entries of `dir` that look like temporary files.
fn temp_files(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

fn rt_record(allocator: &str, threads: usize, metric: &str, unit: &str, median: f64) -> Record {
    Record {
        suite: "realtime".into(),
        workload: "latency".into(),
        allocator: allocator.into(),
        threads,
        metric: metric.into(),
        unit: unit.into(),
        median,
        min: median - 1.0,
        max: median + 1.0,
        runs: 3,
        values: Vec::new(),
        lower_is_better: true,
    }
}

/// [`sample`] plus a `realtime` suite: one workload, every metric the worker reports
/// (steps for mimalloc only), in scrambled order.
fn sample_with_realtime() -> ResultsFile {
    let mut results = sample();
    results.header.parameters.suites.push("realtime".into());
    for (allocator, base) in [("system", 100.0), ("mimalloc", 50.0), ("jemalloc", 200.0)] {
        let mut metrics: Vec<(String, &str, f64)> = Vec::new();
        for (k, kind) in ["alloc", "free"].into_iter().enumerate() {
            let percentiles = ["p50", "p99", "p99.9", "p99.99", "p99.999", "max"];
            for (i, p) in percentiles.into_iter().enumerate() {
                let value = base * (k + 1) as f64 * 10f64.powi(i as i32);
                metrics.push((format!("{kind}_{p}"), "ns", value));
            }
        }
        metrics.push(("remote_free_p99.999".into(), "ns", base * 1e4));
        metrics.push(("remote_free_max".into(), "ns", base * 1e5));
        metrics.push(("peak_footprint".into(), "MiB", 10.0));
        metrics.push((CLOCK_READ_METRIC.into(), "ns", 30.0 + base / 100.0));
        metrics.push((TIMER_OVERHEAD_METRIC.into(), "%", 250.0));
        if allocator == "mimalloc" {
            metrics.push(("alloc_max_steps".into(), "steps", 12.0));
        }
        metrics.reverse();
        for (metric, unit, value) in metrics {
            results
                .records
                .push(rt_record(allocator, 4, &metric, unit, value));
        }
        results.records.push(Record {
            min: 1.0,
            max: 1.0,
            lower_is_better: false,
            ..rt_record(allocator, 4, SCHED_FIFO_METRIC, "share", 1.0)
        });
    }
    results
}

#[test]
fn the_scheduling_policy_is_a_note_that_says_which() {
    let set_fifo = |results: &mut ResultsFile, allocator: &str, v: f64| {
        for r in &mut results.records {
            if r.metric == SCHED_FIFO_METRIC && (allocator.is_empty() || r.allocator == allocator) {
                (r.median, r.min, r.max) = (v, v, v);
            }
        }
    };
    let fifo = "ran under `SCHED_FIFO` at priority 1";
    let other = "default time-sharing policy";
    let mixed = "**Mixed scheduling:**";

    let mut results = sample_with_realtime();
    let md = render_markdown(&results, &LAYOUT);
    assert!(!md.contains("| sched_fifo"), "a qualifier is not a column");
    assert!(md.contains(fifo) && !md.contains(other) && !md.contains(mixed));
    assert!(render_readme_section(&results, &ReportLayout::PLAIN).contains(fifo));
    assert!(render_readme_section(&results, &LAYOUT).contains("(SCHED_FIFO)"));

    set_fifo(&mut results, "jemalloc", 0.0);
    let md = render_markdown(&results, &LAYOUT);
    assert!(md.contains(mixed) && !md.contains(fifo), "{md}");

    set_fifo(&mut results, "", 0.0);
    let md = render_markdown(&results, &LAYOUT);
    assert!(md.contains(other) && !md.contains(fifo) && !md.contains(mixed));

    results.records.retain(|r| r.metric != SCHED_FIFO_METRIC);
    let md = render_markdown(&results, &LAYOUT);
    assert!(!md.contains(other) && !md.contains(fifo) && !md.contains(mixed));
}

/// The header row of the first table after the line `heading`.
fn header_after(md: &str, heading: &str) -> String {
    md.lines()
        .skip_while(|l| *l != heading)
        .find(|l| l.starts_with("| allocator"))
        .unwrap_or_else(|| panic!("no table after {heading:?} in\n{md}"))
        .to_owned()
}

/// [`sample`] plus a `security` suite: two workloads, bits, probabilities and verdicts.
fn sample_with_security() -> ResultsFile {
    let mut results = sample();
    results.header.parameters.suites.push("security".into());
    let rec = |workload: &str, allocator: &str, metric: &str, unit: &str, v: (f64, f64)| Record {
        suite: "security".into(),
        workload: workload.into(),
        allocator: allocator.into(),
        threads: 1,
        metric: metric.into(),
        unit: unit.into(),
        median: v.0,
        min: v.0,
        max: v.1,
        runs: 3,
        values: Vec::new(),
        lower_is_better: unit == "p",
    };
    for (a, bits, reuse, verdict) in [
        ("system", 0.0, 0.997, 1.0),
        ("mimalloc", 0.0, 0.0247, 0.5),
        ("jemalloc", 9.5, 1.0, 0.0),
    ] {
        results
            .records
            .push(rec("entropy", a, "entropy_steady_64", "bits", (bits, bits)));
        results
            .records
            .push(rec("reuse", a, "reuse_same_64", "p", (reuse, reuse)));
        results.records.push(rec(
            "misuse",
            a,
            "double_free_immediate",
            "score",
            (verdict, verdict.max(0.5)),
        ));
    }
    results
}

#[test]
fn security_tables_have_a_row_per_metric_verdict_words_and_no_ratios_or_mean() {
    let md = render_markdown(&sample_with_security(), &LAYOUT);
    let suite = &md[md.find("## Suite `security`").unwrap()..];
    assert!(suite.contains("| security/entropy | threads | system | mimalloc | jemalloc |"));
    assert!(
        suite.contains("| entropy_steady_64 [bits] | 1 | 0 | 0 | **9.50** |"),
        "{suite}"
    );
    assert!(
        suite.contains("| reuse_same_64 [p] | 1 | 0.997 | **0.0247** | 1.00 |"),
        "{suite}"
    );
    // Verdicts in words; where runs differ, the range in words too.
    assert!(
        suite.contains(
            "| double_free_immediate [score] | 1 | **caught** | crashed | silent (silent–crashed) |"
        ),
        "{suite}"
    );
    assert!(!suite.contains("× system"), "{suite}");
    assert!(!suite.contains("geometric mean"), "{suite}");
    let readme = render_readme_section(&sample_with_security(), &LAYOUT);
    assert!(readme.contains("#### Suite `security`: headline figures"));
    assert!(readme.contains("| reuse_same_64 [p] | 1 |"), "{readme}");
    assert!(!readme.contains("double_free_immediate"), "{readme}");
    // Each workload's table stands apart: a table's last row is followed by a blank line,
    // never by the next table's header.
    let headers: Vec<usize> = readme
        .match_indices("| security/")
        .map(|(at, _)| at)
        .collect();
    assert_eq!(headers.len(), 2, "{readme}");
    for &at in &headers[1..] {
        assert!(readme[..at].ends_with("|\n\n"), "{readme}");
    }
}

#[test]
fn many_metrics_are_split_into_family_tables_read_from_median_to_worst() {
    let md = render_markdown(&sample_with_realtime(), &LAYOUT);
    let workload = &md[md.find("### realtime/latency").unwrap()..];
    let alloc = header_after(workload, "`alloc_…`:");
    assert_eq!(
        alloc,
        "| allocator | threads | alloc_p50 | × system | alloc_p99 | × system | alloc_p99.9 \
         | × system | alloc_p99.99 | × system | alloc_p99.999 | × system | alloc_max \
         | × system | alloc_max_steps | × system |"
    );
    assert!(header_after(workload, "`free_…`:").contains("| free_p99.999 | × system | free_max |"));
    assert_eq!(
        header_after(workload, "`remote_…`:"),
        "| allocator | threads | remote_free_p99.999 | × system | remote_free_max | × system |"
    );
    assert_eq!(
        header_after(workload, "other metrics:"),
        "| allocator | threads | peak_footprint | × system |"
    );
    // Steps where counted (alone, so not bold), a dash where not.
    let mi = row(workload, "`alloc_…`:", "mimalloc", 4);
    assert_eq!(mi[14], "12.00 (11.00–13.00) steps");
    assert_eq!(row(workload, "`alloc_…`:", "system", 4)[14], "—");
    assert_eq!(
        row(workload, "`free_…`:", "mimalloc", 4)[2],
        "**100.0** (99.00–101.0) ns"
    );
    // The clock cost is a note beside the figures, not a column.
    assert!(!md.contains("| clock_read"));
    assert!(
        workload.contains("`clock_read` was 29.50–33.00 ns in these runs"),
        "{workload}"
    );
    // The cpu suite, with two metrics, keeps one untitled table.
    assert_eq!(
        header_after(&md, "### cpu/larson"),
        "| allocator | threads | time | × system | peak_footprint | × system |"
    );
    assert!(!md[..md.find("## Suite `realtime`").unwrap()].contains("other metrics"));
}

#[test]
fn a_one_workload_suite_has_no_mean_of_one_ratio() {
    // The plain layout: the harness's own replaces the realtime suite's summary.
    let md = render_markdown(&sample_with_realtime(), &ReportLayout::PLAIN);
    assert!(md.contains("### Suite `cpu`: geometric mean over workloads"));
    assert!(!md.contains("### Suite `realtime`: geometric mean"));
    assert!(md.contains("The suite has one workload, `latency`: its table above"));
}

#[test]
fn single_operation_timing_is_named_not_warned_about() {
    let md = render_markdown(&sample_with_realtime(), &LAYOUT);
    let section = &md[md.find("## Timer overhead").unwrap()..];
    let warning: Vec<&str> = section.lines().filter(|l| l.contains("WARNING")).collect();
    assert_eq!(warning.len(), 1);
    assert!(warning[0].contains("cpu/larson on mimalloc"));
    assert!(!warning[0].contains("realtime"), "{}", warning[0]);
    assert!(section.contains("realtime/latency times each allocator call on its own"));
    // The overhead itself is still listed.
    assert!(
        section.contains("| realtime/latency | 250.0 % |"),
        "{section}"
    );

    // Without the clock-read records the same overhead is warned about.
    let mut unqualified = sample_with_realtime();
    unqualified
        .records
        .retain(|r| r.metric != CLOCK_READ_METRIC);
    let md = render_markdown(&unqualified, &LAYOUT);
    let warning = md.lines().find(|l| l.contains("WARNING")).unwrap();
    assert!(warning.contains("realtime/latency on system (4 threads): 250.0 %"));
}

#[test]
fn readme_section_of_a_one_workload_suite_shows_its_headline_ratios() {
    // The plain layout: the harness's own lays the realtime suite out by itself.
    let section = render_readme_section(&sample_with_realtime(), &ReportLayout::PLAIN);
    let heading = "#### Suite `realtime` (one workload, `latency`): ratio to system";
    assert_eq!(
        header_after(&section, heading),
        "| allocator | threads | alloc_p99.999 × system | alloc_max × system \
         | free_p99.999 × system | free_max × system |"
    );
    assert_eq!(row(&section, heading, "mimalloc", 4)[2..], ["0.50"; 4]);
    assert_eq!(row(&section, heading, "jemalloc", 4)[2..], ["2.00"; 4]);
    assert!(section.contains("`clock_read` was 29.50–33.00 ns"));
    // No per-workload table repeating the same ratios.
    assert!(!section.contains("Suite `realtime`: `"));
    assert!(!section.contains("| latency |"));
    // The cpu suite keeps its mean and its time table.
    assert!(section.contains("#### Suite `cpu`: `time` × system per workload"));
}

#[test]
fn charts_of_many_metrics_draw_the_headline_panels_only() {
    let dir = scratch("chart-headline");
    let path = dir.join("chart.svg");
    write_chart_svg(&sample_with_realtime(), "realtime", "latency", &path).unwrap();
    let svg = fs::read_to_string(&path).unwrap();
    fs::remove_dir_all(&dir).unwrap();
    let panels: Vec<&str> = svg
        .match_indices(" (lower is better)")
        .map(|(i, _)| {
            let start = svg[..i].rfind('>').unwrap() + 1;
            svg[start..i].trim()
        })
        .collect();
    assert_eq!(
        panels,
        ["alloc_p99.999", "alloc_max", "free_p99.999", "free_max"]
    );
}

#[test]
fn durations_spanning_a_decade_go_on_a_log_axis_in_time_units() {
    let dir = scratch("chart-log");
    let path = dir.join("chart.svg");
    let mut results = sample_with_realtime();
    let on_log_axis = |results: &ResultsFile| {
        write_chart_svg(results, "realtime", "latency", &path).unwrap();
        let svg = fs::read_to_string(&path).unwrap();
        (
            svg.contains("alloc_max (log scale)"),
            svg.contains(" µs\n") || svg.contains(" ms\n"),
        )
    };
    // Ten times apart and more: log axis, ticks in µs or ms.
    for (i, r) in results
        .records
        .iter_mut()
        .filter(|r| r.metric == "alloc_max")
        .enumerate()
    {
        let v = if i == 0 { 2e3 } else { 5e5 };
        (r.median, r.min, r.max) = (v, v, v);
    }
    assert_eq!(on_log_axis(&results), (true, true));
    // Within a factor of two: the plain linear axis.
    for r in results
        .records
        .iter_mut()
        .filter(|r| r.metric == "alloc_max")
    {
        (r.median, r.min, r.max) = (3e3, 3e3, 4e3);
    }
    assert!(!on_log_axis(&results).0);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tables_split_by_family_only_when_there_are_many_metrics() {
    let few = split_into_tables(vec!["time", "peak_footprint", "x_a", "x_b"], |m| m);
    assert_eq!(few, [(None, vec!["time", "peak_footprint", "x_a", "x_b"])]);
    let many = split_into_tables(
        vec![
            "alloc_p50",
            "free_p50",
            "alloc_max",
            "peak_footprint",
            "free_max",
            "time",
        ],
        |m| m,
    );
    assert_eq!(
        many,
        [
            (Some("`alloc_…`".to_owned()), vec!["alloc_p50", "alloc_max"]),
            (Some("`free_…`".to_owned()), vec!["free_p50", "free_max"]),
            (
                Some("other metrics".to_owned()),
                vec!["peak_footprint", "time"]
            ),
        ]
    );
}

#[test]
fn ratios_and_bold_in_workload_tables() {
    let md = render_markdown(&sample(), &LAYOUT);
    // Columns: allocator, threads, time, ×, peak, ×, overhead, ×.
    let sys = row(&md, "### cpu/larson", "system", 2);
    let mi = row(&md, "### cpu/larson", "mimalloc", 2);
    let je = row(&md, "### cpu/larson", "jemalloc", 2);
    assert_eq!(sys[2], "100.0 (90.00–110.0) ms");
    assert_eq!(sys[3], "1.00");
    assert_eq!(mi[2], "**80.00** (72.00–88.00) ms");
    assert_eq!(mi[3], "0.80");
    assert_eq!(je[2], "125.0 (112.5–137.5) ms");
    assert_eq!(je[3], "1.25");
    // Peak footprint: jemalloc is best (lowest).
    assert_eq!(je[4], "**8.00** (7.20–8.80) MiB");
    assert_eq!(mi[5], "1.20");
    assert!(!sys[4].contains("**") && !mi[4].contains("**"));
    // A tie bolds both.
    let sys = row(&md, "### cpu/cache", "system", 2);
    let mi = row(&md, "### cpu/cache", "mimalloc", 2);
    let je = row(&md, "### cpu/cache", "jemalloc", 2);
    assert!(sys[4].starts_with("**4.00**") && mi[4].starts_with("**4.00**"));
    assert!(!je[4].contains("**"));
    assert_eq!(mi[3], "2.00");
    assert_eq!(je[3], "0.50");
    assert!(md.contains("| allocator | threads | time | × system | peak_footprint | × system |"));
}

#[test]
fn higher_is_better_bolds_the_largest_and_missing_baseline_gives_dash() {
    let mut results = sample();
    results
        .records
        .push(record("larson", "mimalloc", 2, "throughput", 300.0));
    results
        .records
        .push(record("larson", "jemalloc", 2, "throughput", 200.0));
    // A thread count the baseline did not run.
    results
        .records
        .push(record("larson", "mimalloc", 4, "time", 60.0));
    let md = render_markdown(&results, &LAYOUT);
    let mi = row(&md, "### cpu/larson", "mimalloc", 2);
    let je = row(&md, "### cpu/larson", "jemalloc", 2);
    let sys = row(&md, "### cpu/larson", "system", 2);
    // Unknown metrics come after the known ones; timer overhead is not a comparison
    // column.
    assert!(md.contains("| peak_footprint | × system | throughput | × system |"));
    assert!(!md.contains("| timer_overhead |"));
    assert!(mi[6].starts_with("**300.0**"), "{mi:?}");
    assert!(!je[6].contains("**"));
    assert_eq!((mi[7].as_str(), sys[6].as_str()), ("—", "—"));
    let mi4 = row(&md, "### cpu/larson", "mimalloc", 4);
    // Alone at 4 threads: no bold, no ratio.
    assert_eq!(mi4[2], "60.00 (54.00–66.00) ms");
    assert_eq!(mi4[3], "—");
    assert_eq!(row(&md, "### cpu/larson", "system", 4)[2], "—");
}

#[test]
fn sweep_points_get_a_table_and_a_chart_and_each_suite_its_own_baseline() {
    let mut results = sample();
    results.header.parameters.suites.push("hls".into());
    for (allocator, failures) in [("hls-bitmap", 100.0), ("hls-defrag", 60.0)] {
        let mut push = |metric: String, median: f64| {
            results.records.push(Record {
                suite: "hls".into(),
                workload: "mixed-kernels".into(),
                allocator: allocator.into(),
                threads: 1,
                metric,
                unit: "failures".into(),
                median,
                min: median,
                max: median,
                runs: 1,
                values: Vec::new(),
                lower_is_better: true,
            });
        };
        push("failures_total".into(), failures);
        for (x, f) in [(4096, failures * 2.0), (8192, failures / 2.0)] {
            push(format!("failures_total{SWEEP_SEPARATOR}{x}"), f);
        }
    }
    let md = render_markdown(&results, &LAYOUT);
    // The cpu suite still divides by system, the hls suite by its own first allocator.
    let defrag = row(&md, "### hls/mixed-kernels", "hls-defrag", 1);
    assert_eq!(defrag[3], "0.60", "{defrag:?}");
    assert!(md.contains("| allocator | threads | failures_total | × hls-bitmap |"));
    assert!(
        !md.contains("| failures_total@"),
        "sweep points are no columns"
    );
    assert!(md.contains("| failures_total hls-bitmap | failures_total hls-defrag |"));
    assert!(md.contains("| 4096 | 200.0 | 120.0 |"), "{md}");
    assert!(md.contains("(hls-mixed-kernels-sweep.svg)"));
    let dir = std::env::temp_dir().join(format!("alloclab-sweep-{}", std::process::id()));
    let files = write_report(&dir, &results, &LAYOUT).unwrap();
    let sweep = dir.join("hls-mixed-kernels-sweep.svg");
    assert!(files.charts.contains(&sweep));
    let svg = fs::read_to_string(&sweep).unwrap();
    assert!(svg.contains("hls-defrag") && svg.contains("heap size"));
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(
        sweep_point("failures_total@8064"),
        Some(("failures_total", 8064.0))
    );
    assert_eq!(sweep_point("alloc_p99.9"), None);
}

#[test]
fn failed_measurements_are_listed_with_their_error() {
    let mut results = sample();
    assert!(!render_markdown(&results, &LAYOUT).contains("Failed measurements"));
    results.failures.push(crate::results::Failure {
        suite: "cpu".into(),
        workload: "larson".into(),
        allocator: "jemalloc".into(),
        threads: 2,
        run: 2,
        error: "worker killed by signal 9".into(),
    });
    let md = render_markdown(&results, &LAYOUT);
    assert!(md.contains("## Failed measurements"));
    assert!(
        md.contains("| cpu/larson on jemalloc | 2 | 2 | worker killed by signal 9 |"),
        "{md}"
    );
}

#[test]
fn summary_is_the_geometric_mean_of_ratios() {
    let md = render_markdown(&sample(), &LAYOUT);
    let heading = "### Suite `cpu`: geometric mean over workloads of the ratio to system";
    let sys = row(&md, heading, "system", 2);
    let mi = row(&md, heading, "mimalloc", 2);
    let je = row(&md, heading, "jemalloc", 2);
    assert_eq!(sys[2..], ["1.00", "1.00"]);
    // time: sqrt(0.8 × 2) = 1.265; sqrt(1.25 × 0.5) = 0.791.
    assert_eq!(mi[2], "1.26");
    assert_eq!(je[2], "0.79");
    // peak: sqrt(1.2 × 1) = 1.095; sqrt(0.8 × 1.25) = 1.
    assert_eq!(mi[3], "1.10");
    assert_eq!(je[3], "1.00");
    // Timer overhead is reported in its own section, not averaged as a ratio.
    assert_eq!(mi.len(), 4, "{mi:?}");
    // Every workload counted: no note about partial means.
    assert!(!md.contains("workloads)"));
}

#[test]
fn summary_says_how_many_workloads_counted() {
    let mut results = sample();
    results
        .records
        .retain(|r| !(r.workload == "cache" && r.allocator == "jemalloc" && r.metric == "time"));
    let md = render_markdown(&results, &LAYOUT);
    let heading = "### Suite `cpu`: geometric mean over workloads of the ratio to system";
    assert_eq!(row(&md, heading, "jemalloc", 2)[2], "1.25 (1/2 workloads)");
    assert_eq!(row(&md, heading, "mimalloc", 2)[2], "1.26");
    assert!(md.contains("“(k/n workloads)” says how many counted"));
}

#[test]
fn geometric_mean_of_values() {
    assert!((geometric_mean(&[2.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
    assert!((geometric_mean(&[0.5, 2.0, 1.0]).unwrap() - 1.0).abs() < 1e-12);
    assert!((geometric_mean(&[3.0, 0.0, -1.0, f64::NAN]).unwrap() - 3.0).abs() < 1e-12);
    assert_eq!(geometric_mean(&[]), None);
    assert_eq!(geometric_mean(&[0.0]), None);
}

#[test]
fn header_and_timer_overhead_note() {
    let md = render_markdown(&sample(), &LAYOUT);
    assert!(
        md.contains("Test CPU 9000, 2 cores, 23.6 GiB memory"),
        "{md}"
    );
    assert!(md.contains("`7dea227` (dirty)"));
    assert!(md.contains("2026-11-30 00:53:20 UTC"), "{md}");
    assert!(md.contains("`alloclab suite --scale small`"));
    assert!(md.contains("scale small, 3 runs, threads 2, seed 42"));
    assert!(md.contains("21.50 ns"));
    assert!(
        md.contains("median 6.50 % (cpu/larson, mimalloc, 2 threads); largest single run 7.15 %"),
        "{md}"
    );
    let warning: Vec<&str> = md.lines().filter(|l| l.contains("WARNING")).collect();
    assert_eq!(warning.len(), 1);
    assert!(warning[0].contains("cpu/larson on mimalloc (2 threads): 6.50 %"));
    assert!(!warning[0].contains("system") && !warning[0].contains("cache"));

    let mut quiet = sample();
    quiet.header.commit_dirty = false;
    for r in &mut quiet.records {
        if r.metric == TIMER_OVERHEAD_METRIC {
            r.median = r.median.min(1.0);
        }
    }
    let md = render_markdown(&quiet, &LAYOUT);
    assert!(!md.contains("WARNING") && !md.contains("(dirty)"));
    assert!(md.contains("exceeds 5 %"));
}

#[test]
fn dates_are_utc_calendar_dates() {
    assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(format_utc(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(format_utc(951_868_799), "2000-02-29 23:59:59 UTC");
    assert_eq!(format_utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
    assert_eq!(format_utc(4_102_444_800), "2100-01-01 00:00:00 UTC");
    assert_eq!(format_utc(1_796_000_000), "2026-11-30 00:53:20 UTC");
}

#[test]
fn markdown_is_deterministic() {
    let results = sample();
    let md = render_markdown(&results, &LAYOUT);
    assert_eq!(md, render_markdown(&results, &LAYOUT));
    let mut shuffled = results.clone();
    shuffled.records.reverse();
    shuffled.records.swap(0, 7);
    assert_eq!(md, render_markdown(&shuffled, &LAYOUT));
    let readme = render_readme_section(&results, &LAYOUT);
    assert_eq!(readme, render_readme_section(&shuffled, &LAYOUT));
    // Allocators in the order asked for, workloads by name.
    let pos = |s: &str| md.find(s).unwrap();
    assert!(pos("| system | 2 |") < pos("| mimalloc | 2 |"));
    assert!(pos("| mimalloc | 2 |") < pos("| jemalloc | 2 |"));
    assert!(pos("### cpu/cache") < pos("### cpu/larson"));
}

#[test]
fn readme_section_has_summary_and_time_ratios() {
    let section = render_readme_section(&sample(), &LAYOUT);
    assert!(section.starts_with("Measured on Test CPU 9000 (2 cores, 23.6 GiB)"));
    assert!(section.contains("`target/alloclab-report/`"), "{section}");
    let heading = "#### Suite `cpu`: `time` × system per workload";
    assert!(section.contains("| workload | threads | system | mimalloc | jemalloc |"));
    assert_eq!(
        row(&section, heading, "larson", 2)[2..],
        ["1.00", "**0.80**", "1.25"]
    );
    assert_eq!(
        row(&section, heading, "cache", 2)[2..],
        ["1.00", "2.00", "**0.50**"]
    );
    let summary = "#### Suite `cpu`: geometric mean over workloads of the ratio to system";
    assert_eq!(row(&section, summary, "mimalloc", 2)[2], "1.26");
    assert!(!section.contains("(min–max)") && !section.contains("WARNING"));
}

#[test]
fn write_report_writes_every_file() {
    let dir = scratch("write-report").join("nested/report");
    let results = sample();
    let files = write_report(&dir, &results, &LAYOUT).unwrap();
    assert_eq!(files.paths.len(), 4);
    for p in &files.paths {
        assert!(p.is_file(), "{} missing", p.display());
    }
    assert_eq!(
        files.charts,
        [dir.join("cpu-cache.svg"), dir.join("cpu-larson.svg")]
    );
    let json = fs::read_to_string(&files.results_json).unwrap();
    let back: ResultsFile = serde_json::from_str(&json).unwrap();
    assert_eq!(back, results);
    assert_eq!(
        fs::read_to_string(&files.report_md).unwrap(),
        render_markdown(&results, &LAYOUT)
    );
    assert!(temp_files(&dir).is_empty());
    // Writing again replaces the files.
    write_report(&dir, &results, &LAYOUT).unwrap();
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 4);
    fs::remove_dir_all(dir.parent().unwrap().parent().unwrap()).unwrap();
}

/// serde_json parses floats exactly only with its `float_roundtrip` feature; without
/// it a value such as `110.00000000000001` (what `100.0 * 1.1` prints as) comes back
/// one ulp off, so `results.json` does not round-trip exactly.
#[test]
fn results_json_round_trips_every_float_exactly() {
    let dir = scratch("float-roundtrip");
    let path = dir.join("results.json");
    let mut results = sample();
    for r in &mut results.records {
        r.min = r.median * 0.9;
        r.max = r.median * 1.1;
    }
    write_results_json(&path, &results).unwrap();
    let back: ResultsFile = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(back, results);
}

#[test]
fn sweeps_over_three_decades_get_log_axes_and_negative_values_stay_in_view() {
    let mut results = sample();
    results.header.parameters.suites.push("gpu".into());
    let mut push = |metric: String, median: f64| {
        results.records.push(Record {
            suite: "gpu".into(),
            workload: "gpu-threads".into(),
            allocator: "gpu-queue".into(),
            threads: 1,
            metric,
            unit: "probes".into(),
            median,
            min: median,
            max: median,
            runs: 1,
            values: Vec::new(),
            lower_is_better: true,
        });
    };
    for x in [1u32, 1024, 1 << 20] {
        push(format!("tas{SWEEP_SEPARATOR}{x}"), f64::from(x) / 2.0 + 0.5);
        push(format!("tas_error{SWEEP_SEPARATOR}{x}"), -1.5);
    }
    let view = View::new(&results);
    let sweeps = sweeps(&view, "gpu", "gpu-threads");
    let parameter = LAYOUT.sweep_parameter("gpu", "gpu-threads");
    let svg = render_sweep_svg(&sweeps, "gpu/gpu-threads: sweep", parameter).unwrap();
    assert!(svg.contains("tas (lower is better; log axes)"), "{svg}");
    assert!(svg.contains("tas_error (lower is better; log x axis)"));
    assert!(svg.contains("requesting threads"));
    // An allocator of the suite that did not run this workload gets no row in its table.
    let mut other = results.records[results.records.len() - 1].clone();
    other.workload = "gpu-free-fraction".into();
    other.allocator = "gpu-rw".into();
    other.metric = "tas_error_max".into();
    results.records.push(other);
    let md = render_markdown(&results, &LAYOUT);
    assert!(md.contains("Sweep over the requesting threads"), "{md}");
    let start = md.find("### gpu/gpu-threads").unwrap();
    let end = start + md[start..].find("### Suite `gpu`").unwrap();
    let threads_section = &md[start..end];
    assert!(threads_section.contains("| gpu-queue | 1 |"), "{md}");
    assert!(!threads_section.contains("| gpu-rw |"), "{md}");
    assert!(md.contains("| gpu-rw | 1 |"), "{md}");
    // The README shows the gpu suite's values per workload, not a mean of ratios.
    let readme = render_readme_section(&results, &LAYOUT);
    let start = readme
        .find("#### Suite `gpu`: headline figures (median over the runs)")
        .expect("a values section for gpu");
    let gpu = &readme[start..];
    assert!(!gpu.contains("geometric mean"), "{readme}");
    assert!(gpu.contains("`gpu-free-fraction`:"), "{readme}");
    assert!(gpu.contains("| gpu-rw | 1 | -1.50"), "{readme}");
    // gpu-threads has sweep metrics only here: no empty table.
    assert!(!gpu.contains("`gpu-threads`:"), "{readme}");
}

#[test]
fn suite_notes_are_printed_under_their_suite_and_optional_in_json() {
    let mut results = sample();
    let suite = results.header.parameters.suites[0].clone();
    results.notes.push(crate::results::SuiteNote {
        suite: suite.clone(),
        text: "CUDA: not run (no CUDA device: test)".into(),
    });
    let md = render_markdown(&results, &LAYOUT);
    let heading = md.find(&format!("## Suite `{suite}`")).unwrap();
    let note = md.find("CUDA: not run (no CUDA device: test)").unwrap();
    assert!(note > heading, "{md}");
    // A file written before notes existed has none; one without notes writes none.
    let json = serde_json::to_string(&sample()).unwrap();
    assert!(!json.contains("\"notes\""));
    let back: ResultsFile = serde_json::from_str(&json).unwrap();
    assert!(back.notes.is_empty());
}

#[test]
fn chart_is_an_svg_naming_the_workload() {
    let dir = scratch("chart");
    let path = dir.join("chart.svg");
    let mut results = sample();
    write_chart_svg(&results, "cpu", "larson", &path).unwrap();
    let svg = fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("cpu/larson"));
    assert!(svg.contains("time (ms)") && svg.contains("peak_footprint (MiB)"));
    assert!(svg.contains("mimalloc") && svg.contains("jemalloc"));

    // Several thread counts: a legend per thread count.
    results
        .records
        .push(record("larson", "system", 4, "time", 70.0));
    write_chart_svg(&results, "cpu", "larson", &path).unwrap();
    let svg = fs::read_to_string(&path).unwrap();
    assert!(svg.contains("2 threads") && svg.contains("4 threads"));
    results
        .records
        .push(record("larson", "system", 1, "time", 70.0));
    write_chart_svg(&results, "cpu", "larson", &path).unwrap();
    let svg = fs::read_to_string(&path).unwrap();
    assert!(svg.contains("1 thread\n") && svg.contains("4 threads"));

    let err = write_chart_svg(&results, "cpu", "nope", &dir.join("nope.svg")).unwrap_err();
    assert!(matches!(err, ReportError::Chart { .. }));
    assert!(err.to_string().contains("no records for cpu/nope"));
    assert!(!dir.join("nope.svg").exists());
    assert!(temp_files(&dir).is_empty());
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn update_readme_replaces_only_the_section() {
    let dir = scratch("readme");
    let readme = dir.join("README.md");
    let before = format!(
        "# Title\n\nIntro.\n\n{README_BEGIN}\nold results\nmore\n{README_END}\n\n## After\n"
    );
    fs::write(&readme, &before).unwrap();
    update_readme(&readme, "new results\n").unwrap();
    let after = fs::read_to_string(&readme).unwrap();
    assert_eq!(
        after,
        format!("# Title\n\nIntro.\n\n{README_BEGIN}\nnew results\n{README_END}\n\n## After\n")
    );
    // Without a final newline the end marker still gets its own line.
    update_readme(&readme, "x").unwrap();
    assert!(
        fs::read_to_string(&readme)
            .unwrap()
            .contains(&format!("{README_BEGIN}\nx\n{README_END}\n"))
    );
    assert!(temp_files(&dir).is_empty());
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn update_readme_fails_clearly_on_bad_markers() {
    let dir = scratch("readme-bad");
    let readme = dir.join("README.md");
    let cases = [
        (
            format!("# Title\n{README_END}\n"),
            "`<!-- alloclab:results:begin -->` not found",
        ),
        (
            format!("# Title\n{README_BEGIN}\n"),
            "`<!-- alloclab:results:end -->` not found",
        ),
        (format!("{README_END}\nx\n{README_BEGIN}\n"), "comes before"),
        (
            format!("{README_BEGIN}\n{README_BEGIN}\n{README_END}\n"),
            "appears 2 times",
        ),
        // A marker inside a line of text is not a marker line.
        (
            format!("see {README_BEGIN} and\n{README_END}\n"),
            "begin -->` not found",
        ),
    ];
    for (text, expected) in cases {
        fs::write(&readme, &text).unwrap();
        let err = update_readme(&readme, "new\n").unwrap_err();
        assert!(matches!(err, ReportError::MissingMarkers { .. }));
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("cannot update {}: ", readme.display())),
            "{msg}"
        );
        assert!(msg.contains(expected), "{msg}");
        assert!(!msg.contains('\n'));
        assert_eq!(fs::read_to_string(&readme).unwrap(), text, "README changed");
    }
    let err = update_readme(&dir.join("missing.md"), "x").unwrap_err();
    assert!(err.to_string().starts_with("cannot read "), "{err}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unwritable_paths_fail_and_leave_no_temp_files() {
    let dir = scratch("unwritable");
    let blocker = dir.join("blocker");
    fs::write(&blocker, "a regular file").unwrap();
    let results = sample();

    let err = write_report(&blocker.join("report"), &results, &LAYOUT).unwrap_err();
    assert!(
        matches!(
            err,
            ReportError::Io {
                action: "create directory",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().starts_with(&format!(
        "cannot create directory {}",
        blocker.join("report").display()
    )));

    let target = blocker.join("results.json");
    let err = write_results_json(&target, &results).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("cannot write {}: ", target.display())),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
    assert!(std::error::Error::source(&err).is_some());

    // The temporary file is written, but the rename onto a directory fails: the
    // temporary file must go.
    let target = dir.join("occupied");
    fs::create_dir(&target).unwrap();
    let err = write_results_json(&target, &results).unwrap_err();
    assert!(matches!(err, ReportError::Io { .. }));
    assert!(temp_files(&dir).is_empty(), "{:?}", temp_files(&dir));
    assert!(target.is_dir());
    assert_eq!(fs::read_to_string(&blocker).unwrap(), "a regular file");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn chart_file_names_are_safe() {
    assert_eq!(chart_file_name("cpu", "larson"), "cpu-larson.svg");
    assert_eq!(chart_file_name("cpu", "a/b c"), "cpu-a_b_c.svg");
}

#[test]
fn values_are_formatted_compactly() {
    assert_eq!(fmt_value(0.0), "0");
    assert_eq!(fmt_value(1234.5), "1234");
    assert_eq!(fmt_value(101.25), "101.2");
    assert_eq!(fmt_value(21.5), "21.50");
    assert_eq!(fmt_value(0.5), "0.500");
    assert_eq!(fmt_value(0.01234), "0.0123");
    assert_eq!(fmt_value(0.00001234), "1.23e-5");
    assert_eq!(fmt_tick(100.0), "100");
    assert_eq!(fmt_tick(2.5), "2.5");
    assert_eq!(fmt_tick(1200.0), "1200");
    assert_eq!(code_span("a`b"), "``a`b``");
}

#[test]
fn a_range_over_runs_spans_every_finite_min_and_max() {
    let with = |min: f64, max: f64| Record {
        min,
        max,
        ..rt_record("system", 2, CLOCK_READ_METRIC, "ns", min)
    };
    assert_eq!(range_over_runs([]), None);
    let records = [
        with(30.0, 33.0),
        with(28.5, f64::INFINITY),
        with(f64::NAN, 41.0),
    ];
    assert_eq!(range_over_runs(&records), Some((28.5, 41.0)));
    assert_eq!(range_over_runs(&[with(f64::NAN, f64::INFINITY)]), None);
}
