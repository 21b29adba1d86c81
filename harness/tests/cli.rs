//! The `alloclab` command line, run as a user runs it: results, reports and errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use alloclab_harness::results::ResultsFile;
use alloclab_harness::workloads::realtime::Sched;

fn alloclab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_alloclab"))
        .args(args)
        .output()
        .expect("alloclab runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("alloclab-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn assert_one_line_error(out: &Output, needle: &str) {
    assert!(
        !out.status.success(),
        "expected failure, got {:?}",
        out.status
    );
    let err = stderr(out);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.iter().any(|l| l.contains(needle)),
        "stderr does not mention {needle:?}: {err}"
    );
}

#[test]
fn list_names_every_allocator_and_workload() {
    let out = alloclab(&["list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for a in alloclab_harness::peers::ALLOCATORS {
        assert!(text.contains(a.name), "list lacks allocator {}", a.name);
    }
    for w in alloclab_harness::workloads::all() {
        assert!(text.contains(w.name), "list lacks workload {}", w.name);
    }
}

#[test]
fn run_writes_one_record_per_allocator_and_metric() {
    let dir = scratch("run");
    let json = dir.join("out.json");
    let out = alloclab(&[
        "run",
        "larson",
        "--alloc",
        "system,mimalloc",
        "--threads",
        "2",
        "--scale",
        "tiny",
        "--runs",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "run failed: {}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ratio to system"), "no table: {stdout}");
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(results.header.parameters.allocators, ["system", "mimalloc"]);
    assert_eq!(results.header.parameters.runs, 2);
    for alloc in ["system", "mimalloc"] {
        for metric in ["time", "peak_footprint", "timer_overhead"] {
            let r = results
                .records
                .iter()
                .find(|r| r.allocator == alloc && r.metric == metric)
                .unwrap_or_else(|| panic!("no {metric} record for {alloc}"));
            assert_eq!((r.workload.as_str(), r.threads, r.runs), ("larson", 2, 2));
            assert!(r.min <= r.median && r.median <= r.max);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn suite_writes_report_results_and_a_chart_per_workload() {
    let dir = scratch("suite");
    let report = dir.join("report");
    let out = alloclab(&[
        "suite",
        "--only",
        "cpu",
        "--alloc",
        "system,rlsf",
        "--scale",
        "tiny",
        "--runs",
        "1",
        "--threads",
        "2",
        "--out",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "suite failed: {}", stderr(&out));
    assert!(report.join("report.md").is_file());
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(report.join("results.json")).unwrap())
            .unwrap();
    for w in alloclab_harness::workloads::all()
        .iter()
        .filter(|w| w.suite == "cpu")
    {
        assert!(
            results.records.iter().any(|r| r.workload == w.name),
            "no record for {}",
            w.name
        );
        let svg = report.join(format!("{}-{}.svg", w.suite, w.name));
        assert!(svg.is_file(), "missing chart {}", svg.display());
    }

    // `report` writes the same report again from the results alone, and the README section.
    let again = dir.join("again");
    let readme = dir.join("README.md");
    std::fs::write(
        &readme,
        "# x\n<!-- alloclab:results:begin -->\nold\n<!-- alloclab:results:end -->\n",
    )
    .unwrap();
    let out = alloclab(&[
        "report",
        report.join("results.json").to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
        "--readme",
        readme.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "report failed: {}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(again.join("report.md")).unwrap(),
        std::fs::read_to_string(report.join("report.md")).unwrap()
    );
    let readme = std::fs::read_to_string(&readme).unwrap();
    assert!(
        !readme.contains("old") && readme.contains("#### Suite `cpu`"),
        "{readme}"
    );
    // Neither wfspan nor the randomized allocator ran: no target lines for them.
    assert!(
        !readme.contains("Targets: wfspan") && !readme.contains("Targets: randomized"),
        "{readme}"
    );

    // A file that is not a results file, or of another version, is refused by name.
    let bad = dir.join("bad.json");
    let report_of_bad = || {
        alloclab(&[
            "report",
            bad.to_str().unwrap(),
            "--out",
            again.to_str().unwrap(),
        ])
    };
    std::fs::write(&bad, "not json").unwrap();
    assert_one_line_error(&report_of_bad(), "bad.json is not an alloclab results file");
    let json = std::fs::read_to_string(report.join("results.json")).unwrap();
    std::fs::write(&bad, json.replacen("\"version\": 1", "\"version\": 99", 1)).unwrap();
    assert_one_line_error(&report_of_bad(), "format version 99");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A suite of several suites says how long each took; without `--runs`, each workload runs
/// as many times as its own default, and the table says so (`progress`: one run, `latency`:
/// three, not the plan's five).
#[test]
fn a_suite_says_how_long_each_suite_took_and_how_often_each_workload_ran() {
    let dir = scratch("suite-times");
    let out = alloclab(&[
        "suite",
        "--only",
        "cpu",
        "--only",
        "realtime",
        "--alloc",
        "system",
        "--scale",
        "tiny",
        "--threads",
        "2",
        "--out",
        dir.join("report").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "suite failed: {}", stderr(&out));
    let err = stderr(&out);
    let line = err
        .lines()
        .find(|l| l.starts_with("time by suite: "))
        .unwrap_or_else(|| panic!("no time by suite in {err}"));
    let spent: Vec<(&str, f64)> = line["time by suite: ".len()..]
        .split(", ")
        .map(|part| {
            let (suite, secs) = part.split_once(' ').expect("suite and time");
            let secs = secs.strip_suffix(" s").expect("seconds");
            (suite, secs.parse().expect("a number of seconds"))
        })
        .collect();
    assert_eq!(
        spent.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        ["cpu", "realtime"]
    );
    assert!(spent.iter().all(|&(_, secs)| secs >= 0.0));
    let text = String::from_utf8_lossy(&out.stdout);
    for said in [
        "cpu/glibc-simple: scale tiny, 5 run(s)",
        "realtime/latency: scale tiny, 3 run(s)",
        "realtime/progress: scale tiny, 1 run(s)",
    ] {
        assert!(text.contains(said), "{said} not in {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hls_suite_compares_the_models_at_one_thread_with_a_sweep_chart() {
    let dir = scratch("hls-suite");
    let report = dir.join("report");
    let out = alloclab(&[
        "suite",
        "--only",
        "hls",
        "--scale",
        "tiny",
        "--runs",
        "1",
        "--threads",
        "3",
        "--out",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "suite failed: {}", stderr(&out));
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(report.join("results.json")).unwrap())
            .unwrap();
    assert_eq!(
        results.header.parameters.allocators,
        ["hls-bitmap", "hls-defrag"]
    );
    let get = |allocator: &str, metric: &str| {
        results
            .records
            .iter()
            .find(|r| r.allocator == allocator && r.metric == metric)
            .unwrap_or_else(|| panic!("no {metric} for {allocator}"))
    };
    assert!(results.records.iter().all(|r| r.threads == 1));
    assert_eq!(get("hls-defrag", "failures_fragmentation").median, 0.0);
    assert_eq!(
        get("hls-defrag", "heap_reference").median,
        get("hls-bitmap", "heap_reference").median
    );
    assert!(report.join("hls-mixed-kernels.svg").is_file());
    assert!(report.join("hls-mixed-kernels-sweep.svg").is_file());
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("× hls-bitmap"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn training_suite_runs_once_on_both_caching_models_with_checks_and_a_memory_chart() {
    let dir = scratch("training-suite");
    let report = dir.join("report");
    let out = alloclab(&[
        "suite",
        "--only",
        "training",
        "--scale",
        "tiny",
        "--out",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "suite failed: {}", stderr(&out));
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(report.join("results.json")).unwrap())
            .unwrap();
    assert_eq!(
        results.header.parameters.allocators,
        ["pytorch-caching", "pytorch-caching-expandable"]
    );
    assert!(
        results
            .records
            .iter()
            .all(|r| r.threads == 1 && r.runs == 1)
    );
    for workload in [
        "training-caching",
        "training-growing-batch",
        "training-delta",
    ] {
        assert!(
            results.records.iter().any(|r| r.workload == workload),
            "no records of {workload}"
        );
    }
    assert!(report.join("training-memory-bert-large.svg").is_file());
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(
        md.contains("Targets: the training-memory planner model"),
        "{md}"
    );
    assert!(md.contains("Cost model"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn realtime_run_reports_ordered_latency_percentiles_and_the_clock_cost() {
    let dir = scratch("realtime-run");
    let json = dir.join("out.json");
    let out = alloclab(&[
        "run",
        "latency",
        "--alloc",
        "system",
        "--scale",
        "tiny",
        "--runs",
        "1",
        "--threads",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "run failed: {}", stderr(&out));
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(results.header.parameters.suites, ["realtime"]);
    assert_eq!(results.header.parameters.threads, [2]);
    let median = |metric: &str| {
        let r = results
            .records
            .iter()
            .find(|r| r.metric == metric)
            .unwrap_or_else(|| panic!("no {metric} record"));
        assert_eq!(
            (r.suite.as_str(), r.workload.as_str(), r.allocator.as_str()),
            ("realtime", "latency", "system")
        );
        assert_eq!((r.threads, r.runs), (2, 1));
        r.median
    };
    for kind in ["alloc", "free"] {
        let tail: Vec<f64> = ["p50", "p99", "p99.9", "p99.99", "p99.999", "max"]
            .iter()
            .map(|p| median(&format!("{kind}_{p}")))
            .collect();
        assert!(tail[0] > 0.0, "{kind}: {tail:?}");
        assert!(tail.windows(2).all(|w| w[0] <= w[1]), "{kind}: {tail:?}");
    }
    assert!(median("clock_read") > 0.0);
    median("timer_overhead");
    median("peak_footprint");
    assert_eq!(
        median("sched_fifo"),
        0.0,
        "--sched other ran under SCHED_FIFO"
    );
    // The system heap counts no steps.
    assert!(!results.records.iter().any(|r| r.metric.ends_with("_steps")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn realtime_suite_runs_at_one_two_and_four_times_the_cores_by_default() {
    let dir = scratch("realtime-suite");
    let report = dir.join("report");
    let out = alloclab(&[
        "suite",
        "--only",
        "realtime",
        "--alloc",
        "system",
        "--scale",
        "tiny",
        "--runs",
        "1",
        "--sched",
        "fifo",
        "--out",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "suite failed: {}", stderr(&out));
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(report.join("results.json")).unwrap())
            .unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let expected = [cores, 2 * cores, 4 * cores];
    assert_eq!(results.header.parameters.threads, expected);
    let mut measured: Vec<usize> = results.records.iter().map(|r| r.threads).collect();
    measured.sort_unstable();
    measured.dedup();
    assert_eq!(measured, expected);
    assert!(report.join("realtime-latency.svg").is_file());
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("### realtime/latency"));
    assert!(md.contains("`clock_read` was"), "no clock-read note:\n{md}");
    // With `--sched fifo` every run is real-time where this process may use SCHED_FIFO (as
    // root in CI), none where it may not, and the report says which.
    let permitted = std::thread::spawn(|| Sched::Fifo.enter().is_ok())
        .join()
        .unwrap();
    let fifo: Vec<f64> = results
        .records
        .iter()
        .filter(|r| r.metric == "sched_fifo" && r.workload == "latency")
        .map(|r| r.median)
        .collect();
    assert_eq!(fifo.len(), 3, "one sched_fifo record per thread count");
    // `latency-fifo` runs, at one thread per core and under SCHED_FIFO, exactly where it may;
    // `progress` runs anyway, at one thread per core.
    let of = |workload: &str| -> Vec<usize> {
        let mut t: Vec<usize> = results
            .records
            .iter()
            .filter(|r| r.workload == workload)
            .map(|r| r.threads)
            .collect();
        t.dedup();
        t
    };
    assert_eq!(
        of("latency-fifo"),
        if permitted { vec![cores] } else { vec![] }
    );
    assert_eq!(of("progress"), [cores]);
    let expected = if permitted { 1.0 } else { 0.0 };
    assert!(
        fifo.iter().all(|&v| v == expected),
        "{fifo:?}, permitted: {permitted}"
    );
    let note = if permitted {
        "ran under `SCHED_FIFO` at priority 1"
    } else {
        "default time-sharing policy"
    };
    assert!(md.contains(note), "no scheduling note {note:?}:\n{md}");
    assert!(
        !md.contains("| sched_fifo"),
        "sched_fifo is a qualifier, not a table column"
    );
    if !permitted {
        assert!(stderr(&out).contains("SCHED_FIFO is not permitted"));
        assert!(md.contains("`latency-fifo` did not run"), "{md}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unknown_allocator_is_a_one_line_error_naming_the_known_ones() {
    let out = alloclab(&[
        "run",
        "larson",
        "--alloc",
        "system,nosuch",
        "--scale",
        "tiny",
    ]);
    assert_one_line_error(&out, "unknown allocator 'nosuch'");
    assert!(
        stderr(&out).contains("mimalloc"),
        "known allocators not listed"
    );
}

#[test]
fn unknown_workload_and_suite_are_errors() {
    assert_one_line_error(
        &alloclab(&["run", "nosuch", "--alloc", "system"]),
        "unknown workload 'nosuch'",
    );
    assert_one_line_error(
        &alloclab(&["run", "larsen", "--alloc", "system"]),
        "did you mean 'larson'?",
    );
    assert_one_line_error(
        &alloclab(&["run", "larson", "--alloc", "jemaloc"]),
        "did you mean 'jemalloc'?",
    );
    assert_one_line_error(
        &alloclab(&["suite", "--only", "nosuch"]),
        "unknown suite 'nosuch'",
    );
}

#[test]
fn bad_numbers_are_rejected_before_anything_runs() {
    for args in [
        &["run", "larson", "--alloc", "system", "--threads", "0"][..],
        &["run", "larson", "--alloc", "system", "--threads", "two"],
        &["run", "larson", "--alloc", "system", "--runs", "0"],
        &["run", "larson", "--alloc", "system", "--scale", "huge"],
        &["run", "latency", "--alloc", "system", "--sched", "rr"],
    ] {
        let out = alloclab(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr(&out).contains("error"), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn unwritable_output_paths_fail_before_measuring_and_leave_nothing() {
    let dir = scratch("unwritable");
    let file = dir.join("plain-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let under_file = file.join("report");
    let out = alloclab(&[
        "suite",
        "--scale",
        "tiny",
        "--out",
        under_file.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, "cannot write to");
    let json_under_file = file.join("out.json");
    let out = alloclab(&[
        "run",
        "larson",
        "--alloc",
        "system",
        "--scale",
        "tiny",
        "--json",
        json_under_file.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, "cannot write to");
    let out = alloclab(&[
        "run",
        "larson",
        "--alloc",
        "system",
        "--json",
        dir.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, "is a directory");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1, "files left behind: {left:?}");
    assert!(Path::new(&file).is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failing_worker_is_reported_and_the_rest_of_the_suite_still_runs() {
    let dir = scratch("failing-worker");
    let report = dir.join("report");
    let out = Command::new(env!("CARGO_BIN_EXE_alloclab"))
        .args(["suite", "--only", "cpu", "--alloc", "system,mimalloc"])
        .args(["--scale", "tiny", "--runs", "2", "--threads", "2"])
        .arg("--out")
        .arg(&report)
        .env("ALLOCLAB_INJECT_WORKER_FAILURE", "mimalloc")
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a failed measurement must fail the command"
    );
    assert!(
        stderr(&out).contains("8 measurements failed"),
        "{}",
        stderr(&out)
    );
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(report.join("results.json")).unwrap())
            .unwrap();
    assert_eq!(
        results.failures.len(),
        8,
        "one failure per workload, later runs skipped"
    );
    assert!(
        results
            .failures
            .iter()
            .all(|f| f.allocator == "mimalloc" && f.run == 1)
    );
    assert!(results.records.iter().all(|r| r.allocator == "system"));
    assert_eq!(
        results
            .records
            .iter()
            .filter(|r| r.metric == "time")
            .count(),
        8,
        "system was still measured on every workload"
    );
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("## Failed measurements"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pmem_suite_runs_alloclab_pmem_and_the_dram_bound_and_skips_a_missing_pmdk_with_the_reason() {
    let dir = scratch("pmem-no-pmdk");
    let report = dir.join("report");
    let missing = "libpmemobj-missing-for-test.so.1";
    let list = Command::new(env!("CARGO_BIN_EXE_alloclab"))
        .arg("list")
        .env("ALLOCLAB_PMDK_LIBRARY", missing)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains(&format!(
            "unavailable: {missing} not found: install libpmemobj-dev"
        )),
        "{text}"
    );
    assert!(
        !text.contains("unavailable: alloclab-pmem"),
        "alloclab-pmem needs no library: {text}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_alloclab"))
        .args(["suite", "--only", "pmem", "--scale", "tiny", "--runs", "1"])
        .arg("--out")
        .arg(&report)
        .env("ALLOCLAB_PMDK_LIBRARY", missing)
        .output()
        .unwrap();
    assert!(out.status.success(), "suite failed: {}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "skipping allocator 'pmdk': {missing} not found: install libpmemobj-dev"
        )),
        "{}",
        stderr(&out)
    );
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(report.join("results.json")).unwrap())
            .unwrap();
    assert_eq!(
        results.header.parameters.allocators,
        ["alloclab-pmem", "dram"]
    );
    for workload in ["pmem-flush", "pmem-eadr"] {
        for threads in [1, 2] {
            assert!(
                results.records.iter().any(|r| r.workload == workload
                    && r.threads == threads
                    && r.metric == "ops_per_s"
                    && r.median > 0.0),
                "no ops_per_s for {workload} at {threads}"
            );
        }
    }
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("### pmem/pmem-flush") && md.contains("ops_per_s"));
    // Named explicitly, a missing PMDK is a failed measurement with the reason.
    let out = Command::new(env!("CARGO_BIN_EXE_alloclab"))
        .args([
            "run",
            "pmem-eadr",
            "--alloc",
            "dram,pmdk",
            "--scale",
            "tiny",
        ])
        .args(["--runs", "1", "--threads", "1"])
        .env("ALLOCLAB_PMDK_LIBRARY", missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not found: install libpmemobj-dev"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pmem_run_on_pmdk_reports_latency_and_recovery_where_pmdk_is_installed() {
    if let Err(reason) = alloclab_harness::pmem::Libpmemobj::load() {
        eprintln!(
            "SKIPPED pmem_run_on_pmdk_reports_latency_and_recovery_where_pmdk_is_installed: {reason}"
        );
        return;
    }
    let dir = scratch("pmem-pmdk");
    let json = dir.join("out.json");
    let out = alloclab(&[
        "run",
        "pmem-flush",
        "--alloc",
        "pmdk,dram",
        "--scale",
        "tiny",
        "--runs",
        "1",
        "--threads",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "run failed: {}", stderr(&out));
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let has = |alloc: &str, metric: &str| {
        results
            .records
            .iter()
            .any(|r| r.allocator == alloc && r.metric == metric)
    };
    for metric in ["ops_per_s", "alloc_p99.9", "free_p50", "recovery_ms"] {
        assert!(has("pmdk", metric), "pmdk lacks {metric}");
    }
    assert!(
        !has("pmdk", "flushes_per_op"),
        "PMDK does not count flushes"
    );
    assert!(has("dram", "ops_per_s") && !has("dram", "recovery_ms"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn storage_run_reports_throughput_split_flushes_and_recovery_per_heap() {
    let dir = scratch("storage-run");
    let json = dir.join("out.json");
    let out = alloclab(&[
        "run",
        "lsm-c",
        "--alloc",
        "alloclab-pmem,dram",
        "--scale",
        "tiny",
        "--threads",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "run failed: {}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("storage: scale tiny, 3 run(s)"), "{text}");
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let metric = |alloc: &str, m: &str| {
        results
            .records
            .iter()
            .find(|r| r.allocator == alloc && r.metric == m)
            .map(|r| (r.median, r.runs))
    };
    for m in ["ops_per_s", "op_p99.99", "share_mm", "engine_fences_per_op"] {
        for alloc in ["alloclab-pmem", "dram"] {
            let (v, runs) = metric(alloc, m).unwrap_or_else(|| panic!("no {m} for {alloc}"));
            assert!(v >= 0.0);
            assert_eq!(runs, 3, "the storage suite runs three times by default");
        }
    }
    assert!(metric("alloclab-pmem", "recovery_heap_ms").is_some());
    assert!(metric("alloclab-pmem", "flushes_per_op").is_some());
    assert!(
        metric("dram", "recovery_heap_ms").is_none(),
        "nothing to recover"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn storage_bad_arguments_are_one_line_errors() {
    assert_one_line_error(
        &alloclab(&["run", "inp-z", "--alloc", "dram"]),
        "did you mean 'inp-a'?",
    );
    assert_one_line_error(
        &alloclab(&["run", "inp-c-uniform", "--alloc", "dram"]),
        "unknown workload 'inp-c-uniform'",
    );
    assert_one_line_error(
        &alloclab(&["run", "cow-d", "--alloc", "system"]),
        "allocator 'system' does not fit workload 'cow-d' (it needs a persistent heap)",
    );
    assert_one_line_error(
        &alloclab(&["suite", "--only", "storage", "--alloc", "mimalloc"]),
        "fits no workload of the suites chosen (storage)",
    );
    assert_one_line_error(
        &alloclab(&["run", "cow-d", "--alloc", "dram", "--runs", "0"]),
        "--runs",
    );
}

#[test]
fn storage_suite_reports_the_checks_and_skips_a_missing_pmdk_with_the_reason() {
    let dir = scratch("storage-no-pmdk");
    let report = dir.join("report");
    let missing = "libpmemobj-missing-for-test.so.1";
    let out = Command::new(env!("CARGO_BIN_EXE_alloclab"))
        .args([
            "suite",
            "--only",
            "storage",
            "--scale",
            "tiny",
            "--threads",
            "1",
        ])
        .arg("--out")
        .arg(&report)
        .env("ALLOCLAB_PMDK_LIBRARY", missing)
        .output()
        .unwrap();
    assert!(out.status.success(), "suite failed: {}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("skipping allocator 'pmdk': {missing} not found")),
        "{}",
        stderr(&out)
    );
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    for needle in [
        "### storage: targets",
        "throughput >= 1.5x PMDK's",
        "skipped, PMDK was not measured",
        "### storage: mix d (R10/I90), zipfian keys",
        "### storage: mix h (D100), zipfian keys",
        "### storage: recovery",
        "storage-split.svg",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle:?}");
    }
    assert!(
        !md.contains("### storage/"),
        "no generic per-workload tables"
    );
    // Below --scale medium the suite runs the mixes its checks decide on, and says so.
    assert!(
        !md.contains("uniform keys"),
        "uniform-key workloads left out"
    );
    assert!(
        stderr(&out).contains(
            "mixes a, b, e, var and the uniform-key workloads run from --scale medium on"
        ),
        "{}",
        stderr(&out)
    );
    for chart in [
        "storage-split.svg",
        "storage-throughput-h.svg",
        "storage-throughput-c.svg",
    ] {
        let svg = std::fs::read_to_string(report.join(chart)).unwrap();
        assert!(svg.starts_with("<svg"), "{chart}");
    }
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(report.join("results.json")).unwrap())
            .unwrap();
    assert_eq!(
        results.header.parameters.allocators,
        ["alloclab-pmem", "dram"]
    );
    assert_eq!(
        results
            .records
            .iter()
            .filter(|r| r.metric == "ops_per_s")
            .count(),
        15 * 2,
        "c, d, f, g and h on three engines, two heaps"
    );
    // Three runs, each value kept in run order (the heaps of run i shared its process).
    assert!(
        results
            .records
            .iter()
            .all(|r| r.runs == 3 && r.values.len() == 3)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
