//! The `security` suite, run as the runner runs it: in worker processes (the `entropy` and
//! `misuse` workloads fork, which they only do in a single-threaded process), at tiny
//! scale, on heaps whose behaviour is known.

use std::collections::BTreeMap;
use std::process::{Command, Output};

use alloclab_harness::results::{ResultsFile, Sample};
use alloclab_harness::workloads::security::misuse::Case;

fn alloclab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_alloclab"))
        .args(args)
        .output()
        .expect("alloclab runs")
}

/// Runs one worker and returns its samples by metric, and its stderr. Checks that stdout
/// is exactly one JSON line: forked children must not write to it.
fn worker(workload: &str, alloc: &str) -> (BTreeMap<String, Sample>, String) {
    let out = alloclab(&[
        "__worker",
        "--workload",
        workload,
        "--alloc",
        alloc,
        "--threads",
        "1",
        "--scale",
        "tiny",
        "--seed",
        "42",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{workload} on {alloc} failed: {stderr}"
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    assert_eq!(
        stdout.lines().count(),
        1,
        "{workload} on {alloc}: stdout is not one line: {stdout:?}"
    );
    let samples: Vec<Sample> = serde_json::from_str(stdout.trim()).expect("samples as JSON");
    let by_metric = samples.into_iter().map(|s| (s.metric.clone(), s)).collect();
    (by_metric, stderr)
}

fn value(samples: &BTreeMap<String, Sample>, metric: &str) -> f64 {
    samples
        .get(metric)
        .unwrap_or_else(|| panic!("no {metric} in {:?}", samples.keys()))
        .value
}

#[test]
fn deterministic_heaps_have_no_placement_entropy_fresh_or_steady() {
    for alloc in ["system", "wfspan"] {
        let (samples, _) = worker("entropy", alloc);
        let ceiling = value(&samples, "entropy_ceiling");
        // 16 trials: 120 pairs.
        assert!((ceiling - 120f64.log2()).abs() < 1e-9, "{ceiling}");
        let mut seen = 0;
        for (metric, s) in &samples {
            if metric.starts_with("entropy_fresh_")
                || metric.starts_with("entropy_steady_")
                || metric.starts_with("shannon_")
            {
                seen += 1;
                assert_eq!(s.unit, "bits");
                assert!(!s.lower_is_better);
                assert!(
                    s.value.abs() < 1e-9,
                    "{alloc}: {metric} = {} bits: a replayed history placed blocks differently",
                    s.value
                );
            }
        }
        assert_eq!(seen, 4 * 8, "{alloc}: {:?}", samples.keys());
    }
}

#[test]
fn glibc_hands_a_just_freed_block_straight_back() {
    let (samples, _) = worker("reuse", "system");
    // tcache is LIFO per size: the next same-size allocation is the block just freed.
    for size in [16, 64, 256, 1024] {
        let same = value(&samples, &format!("reuse_same_{size}"));
        let overlap = value(&samples, &format!("reuse_overlap_{size}"));
        assert!(same > 0.9, "{size} B: P(q == p) = {same}");
        assert!(overlap >= same, "{size} B: overlap {overlap} < same {same}");
        assert_eq!(value(&samples, &format!("distance_median_{size}")), 1.0);
        assert_eq!(value(&samples, &format!("distance_never_{size}")), 0.0);
    }
    assert!(samples["reuse_same_64"].lower_is_better);
    assert!(!samples["distance_median_64"].lower_is_better);
}

#[test]
fn glibc_size_fields_absorb_short_overflows_but_not_long_ones() {
    let (samples, _) = worker("overflow", "system");
    // Between two glibc chunks' payloads lies at least the 8-byte size field of the upper
    // chunk; a 16-byte request sits in a 32-byte chunk, so 16 more bytes reach the next.
    for size in [16, 64, 256, 1024] {
        let rates: Vec<f64> = [1, 2, 4, 8, 16, 32, 64]
            .iter()
            .map(|k| value(&samples, &format!("overflow_{size}B_k{k}")))
            .collect();
        assert!(
            rates.windows(2).all(|w| w[0] <= w[1]),
            "{size} B: a longer overflow hit less often: {rates:?}"
        );
        for (k, rate) in [1, 2, 4, 8].iter().zip(&rates) {
            assert_eq!(*rate, 0.0, "{size} B, {k} bytes: {rate}");
        }
    }
    assert!(value(&samples, "overflow_16B_k64") > 0.5);
}

#[test]
fn glibc_catches_double_and_invalid_frees_and_says_so_on_stderr() {
    let (samples, stderr) = worker("misuse", "system");
    for case in [
        "double_free_immediate",
        "double_free_interleaved",
        "invalid_free_unaligned",
        "invalid_free_stack",
    ] {
        assert_eq!(value(&samples, case), 1.0, "{case} not caught: {stderr}");
    }
    assert!(
        stderr.contains("misuse/invalid_free_unaligned on system: caught")
            && stderr.contains("free(): invalid pointer"),
        "{stderr}"
    );
    assert!(stderr.contains("double free detected"), "{stderr}");
    let caught = value(&samples, "caught");
    let silent = value(&samples, "silent");
    assert!(
        caught >= 4.0 && caught + silent <= Case::ALL.len() as f64,
        "{caught} {silent}"
    );
}

#[test]
fn jemalloc_does_not_notice_a_double_free() {
    // jemalloc without its debug options trusts the caller: the child runs on.
    let (samples, stderr) = worker("misuse", "jemalloc");
    assert_eq!(
        value(&samples, "double_free_immediate"),
        0.0,
        "expected silent: {stderr}"
    );
    assert!(stderr.contains("misuse/double_free_immediate on jemalloc: silent (exit 0)"));
}

#[test]
fn the_randomized_heap_places_replayed_histories_differently_every_time() {
    // The estimator's other side: a heap that draws placements from the OS's entropy
    // must show it. 16 trials at tiny scale, 120 pairs of children: at most 7 pairs agree
    // (collision entropy above the ceiling less 3 bits). For two draws among a fresh
    // window of 256 slots, 4 or more agreeing pairs come in about 1 run in 1,300 (a bound
    // of 2 bits fails on those), 8 or more in none of 300,000 simulated runs; a heap
    // drawing among 8 places has 15 on average, one that does not draw at all 120.
    let (samples, _) = worker("entropy", "randomized");
    let ceiling = value(&samples, "entropy_ceiling");
    for size in [16, 64, 256, 1024] {
        for phase in ["fresh", "steady"] {
            let bits = value(&samples, &format!("entropy_{phase}_{size}"));
            assert!(
                bits > ceiling - 3.0,
                "{phase} {size} B: {bits} bits of at most {ceiling}"
            );
        }
    }
}

#[test]
fn the_randomized_heap_catches_every_misuse_case_and_rarely_reuses_a_freed_block() {
    let (samples, stderr) = worker("misuse", "randomized");
    for case in Case::ALL {
        assert_eq!(
            value(&samples, case.name()),
            1.0,
            "{} not caught: {stderr}",
            case.name()
        );
    }
    assert_eq!(value(&samples, "silent"), 0.0, "{stderr}");
    // Its blocks above 1 MiB have mappings of their own, unmapped when freed and followed
    // by a guard page, and zero-size pointers point into an inaccessible region: those
    // accesses fault at once, which counts as caught.
    for case in [
        "write_after_free_large",
        "overflow_large",
        "zero_size_write",
        "zero_size_read",
    ] {
        assert!(
            stderr.contains(&format!(
                "misuse/{case} on randomized: caught (signal 11 (SIGSEGV) at the bad access)"
            )),
            "{case}: {stderr}"
        );
    }
    assert!(
        stderr.contains("alloclab-randomized: write after free detected"),
        "{stderr}"
    );
    assert!(
        stderr.contains("alloclab-randomized: free(): double free detected"),
        "{stderr}"
    );
    let (samples, _) = worker("reuse", "randomized");
    for size in [16, 64, 256] {
        let same = value(&samples, &format!("reuse_same_{size}"));
        assert!(same < 1.0 / 32.0, "{size} B: P(q == p) = {same}");
    }
}

#[test]
fn the_suite_runs_every_workload_on_every_host_heap_at_one_thread() {
    let dir = std::env::temp_dir().join(format!("alloclab-security-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = alloclab(&[
        "suite",
        "--only",
        "security",
        "--scale",
        "tiny",
        "--runs",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "suite failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: ResultsFile =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    assert!(results.failures.is_empty(), "{:?}", results.failures);
    assert_eq!(results.header.parameters.threads, [1]);
    let host_heaps: Vec<&str> = alloclab_harness::peers::ALLOCATORS
        .iter()
        .filter(|a| a.fits(alloclab_harness::peers::Capability::HostHeap))
        .map(|a| a.name)
        .collect();
    for workload in ["entropy", "reuse", "overflow", "misuse"] {
        for alloc in &host_heaps {
            assert!(
                results
                    .records
                    .iter()
                    .any(|r| r.workload == workload && r.allocator == *alloc),
                "no {workload} record for {alloc}"
            );
        }
    }
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("## Suite `security`"));
    let _ = std::fs::remove_dir_all(&dir);
}
