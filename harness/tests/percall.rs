//! `alloclab percall` run as a user runs it: every op's rows under system and wfspan, the
//! JSON, instructions under callgrind where valgrind is installed, and every kind of bad
//! input.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{alloclab_command, assert_one_line_error, preload_dir, stderr, stdout};

use serde_json::Value;

fn command(args: &[&str]) -> std::process::Command {
    let mut full = vec!["percall"];
    full.extend_from_slice(args);
    alloclab_command(&full)
}

fn percall(args: &[&str]) -> Output {
    command(args).output().expect("alloclab runs")
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("percall", name)
}

/// A C++ compiler is there to build the driver.
fn have_cxx() -> bool {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned());
    alloclab_programs::process::find_program(&cxx).is_some()
}

/// The heaps to test: system, and wfspan where its preload library is built.
fn heaps() -> &'static str {
    if preload_dir().is_some() {
        "system,wfspan"
    } else {
        println!("note: wfspan's preload library is not built here; testing system only");
        "system"
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The row of `op` for `heap` on `path` (`c-abi`, `in-process`, `in-process-unsized`).
fn row<'a>(doc: &'a Value, op: &str, heap: &str, path: &str) -> &'a Value {
    let op_entry = doc["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == op)
        .unwrap_or_else(|| panic!("no op {op}"));
    op_entry["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["allocator"] == heap && r["path"] == path)
        .unwrap_or_else(|| panic!("no row {op} {heap} {path}"))
}

const OPS: [&str; 12] = [
    "malloc",
    "free",
    "calloc",
    "realloc-same",
    "realloc-grow",
    "posix-memalign",
    "usable-size",
    "new",
    "delete",
    "delete-sized",
    "new-aligned",
    "new-nothrow",
];
const CXX_OPS: [&str; 5] = [
    "new",
    "delete",
    "delete-sized",
    "new-aligned",
    "new-nothrow",
];

#[test]
fn every_op_has_rows_under_system_and_wfspan_and_the_json_holds_them() {
    if !have_cxx() {
        println!("skipped: no C++ compiler (apt-get install -y g++)");
        return;
    }
    let heaps = heaps();
    let dir = scratch("rows");
    let json = dir.join("percall.json");
    let out = percall(&[
        "--alloc",
        heaps,
        "--iterations",
        "2500",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "percall failed: {}", stderr(&out));
    let table = stdout(&out);
    for op in OPS {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(&format!("{op} (C ABI: "))),
            "no table for {op}: {table}"
        );
    }
    assert!(table.contains("instr/call: not counted (--instructions not given)"));
    let doc = read_json(&json);
    assert_eq!(doc["format"], "alloclab-percall");
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["size"], 64);
    assert_eq!(doc["iterations"], 2500);
    assert_eq!(doc["batch"], 1000);
    assert_eq!(doc["instructions"]["counted"], false);
    let floors = doc["floors"].as_array().unwrap();
    assert_eq!(floors.len(), 2);
    for heap in heaps.split(',') {
        for op in OPS {
            let c = row(&doc, op, heap, "c-abi");
            let runs = c["runs_ns_per_call"].as_array().unwrap();
            assert_eq!(runs.len(), 3, "{op} {heap}");
            for ns in runs {
                let ns = ns.as_f64().unwrap();
                assert!(ns.is_finite() && ns > 0.0, "{op} {heap}: {ns} ns/call");
            }
            let median = c["ns_per_call"]["median"].as_f64().unwrap();
            assert!(median.is_finite() && median > 0.0, "{op} {heap}");
            assert!(c["instructions_per_call"].is_null());
            assert_eq!(c["library"].is_null(), heap == "system", "{op} {heap}");
            let inp = row(&doc, op, heap, "in-process");
            let expect_na = CXX_OPS.contains(&op) || (op == "usable-size" && heap == "system");
            assert_eq!(inp["not_applicable"].is_string(), expect_na, "{op} {heap}");
            if expect_na {
                assert!(inp["ns_per_call"].is_null(), "{op} {heap}");
                assert!(c["ratio_to_in_process"].is_null(), "{op} {heap}");
            } else {
                assert!(inp["ns_per_call"]["median"].as_f64().unwrap() > 0.0);
                assert!(c["ratio_to_in_process"].as_f64().unwrap() > 0.0);
            }
        }
        // The unsized free in-process: wfspan has one, system (no MallocHeap) does not.
        let unsized_free = row(&doc, "free", heap, "in-process-unsized");
        assert_eq!(
            unsized_free["not_applicable"].is_null(),
            heap == "wfspan",
            "{heap}"
        );
        // realloc-grow moves nearly every block on every heap; the counts are there.
        for path in ["c-abi", "in-process"] {
            let moved = row(&doc, "realloc-grow", heap, path)["moved_fraction"]
                .as_f64()
                .unwrap();
            assert!(moved > 0.5, "{heap} {path}: realloc-grow moved {moved}");
            let same = row(&doc, "realloc-same", heap, path)["moved_fraction"]
                .as_f64()
                .unwrap();
            assert!((0.0..=1.0).contains(&same), "{heap} {path}");
        }
    }
}

#[test]
fn instructions_per_call_are_plausible_where_valgrind_is_installed() {
    if alloclab_programs::process::find_program("valgrind").is_none() {
        println!("skipped: valgrind not found (apt-get install -y valgrind): no instruction check");
        return;
    }
    if !have_cxx() {
        println!("skipped: no C++ compiler (apt-get install -y g++)");
        return;
    }
    let heaps = heaps();
    let dir = scratch("instr");
    let json = dir.join("instr.json");
    let out = percall(&[
        "--alloc",
        heaps,
        "--ops",
        "malloc,free",
        "--iterations",
        "5000",
        "--instructions",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "percall failed: {}", stderr(&out));
    let doc = read_json(&json);
    assert_eq!(doc["instructions"]["counted"], true);
    assert_eq!(doc["instructions"]["calls"], 5000);
    // The loop, a call, a return and a store: a handful of instructions (in-process, a few
    // dozen unoptimised, in the dev profile of `cargo test`; the driver is always -O2).
    for floor in doc["floors"].as_array().unwrap() {
        let f = floor["instructions_per_call"].as_f64().unwrap();
        let bound = if floor["path"] == "in-process" && cfg!(debug_assertions) {
            200.0
        } else {
            40.0
        };
        assert!(f >= 2.0 && f < bound, "floor {}: {f}", floor["path"]);
    }
    // glibc's malloc through the C ABI: tens of instructions, not zero (collection missed
    // the function) and not thousands (collection caught more than the timed calls).
    let system = row(&doc, "malloc", "system", "c-abi")["instructions_per_call"]
        .as_f64()
        .unwrap();
    println!("system malloc through the C ABI: {system:.1} instructions per call");
    assert!((10.0..1000.0).contains(&system), "{system}");
    if heaps.contains("wfspan") {
        let wfspan = row(&doc, "malloc", "wfspan", "in-process")["instructions_per_call"]
            .as_f64()
            .unwrap();
        // Unoptimised (the dev profile of `cargo test`), wfspan's fast path takes a few
        // hundred instructions; optimised, a few dozen.
        let bound = if cfg!(debug_assertions) {
            2000.0
        } else {
            200.0
        };
        println!("wfspan malloc in-process: {wfspan:.1} instructions per call (bound {bound})");
        assert!(wfspan > 0.0 && wfspan < bound, "{wfspan}");
        for path in ["c-abi", "in-process", "in-process-unsized"] {
            let v = row(&doc, "free", "wfspan", path)["instructions_per_call"]
                .as_f64()
                .unwrap();
            assert!(v > 0.0, "free {path}: {v}");
        }
    }
    assert!(stdout(&out).contains("the floor subtracted"));
}

#[test]
fn without_valgrind_the_instructions_column_says_so_and_nothing_fails() {
    // An empty PATH: no valgrind. mimalloc runs in-process only, so no compiler is needed.
    let empty = scratch("no-valgrind");
    let out = command(&[
        "--alloc",
        "mimalloc",
        "--ops",
        "malloc",
        "--iterations",
        "200",
        "--instructions",
    ])
    .env("PATH", &empty)
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    let note = "instr/call: not counted: valgrind not found (apt-get install -y valgrind)";
    assert_eq!(table.matches(note).count(), 1, "{table}");
    let mimalloc_row = table
        .lines()
        .find(|l| l.starts_with("mimalloc "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(mimalloc_row.contains("in-process"), "{mimalloc_row}");
}

#[test]
fn bad_input_is_one_line_and_writes_nothing() {
    let dir = scratch("bad");
    let json = dir.join("never.json");
    let json_arg = json.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--alloc", "no-such-heap"],
            "unknown allocator 'no-such-heap'",
        ),
        (&["--alloc", "pmdk"], "percall has nothing to call on it"),
        (&["--alloc", "system,system"], "named twice"),
        (
            &["--alloc", "system", "--ops", "mallok"],
            "unknown op 'mallok'",
        ),
        (
            &["--alloc", "system", "--ops", "free,free"],
            "op 'free' is named twice",
        ),
        (
            &["--alloc", "system", "--size", "0"],
            "is not a number of bytes",
        ),
        (&["--alloc", "system", "--size", "1073741825"], "1 GiB"),
        (
            &["--alloc", "system", "--size", "lots"],
            "is not a number of bytes",
        ),
        (
            &["--alloc", "system", "--iterations", "0"],
            "is not a number of calls",
        ),
    ];
    for (args, needle) in cases {
        let mut all = args.to_vec();
        all.extend(["--json", json_arg]);
        let out = percall(&all);
        assert_one_line_error(&out, needle);
        assert!(!json.exists(), "{args:?} wrote the JSON");
    }
    // A JSON path that cannot be written: its parent is a file.
    let file = dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let inside = file.join("x.json");
    let out = percall(&["--alloc", "system", "--json", inside.to_str().unwrap()]);
    assert_one_line_error(&out, "cannot write to");
}

#[test]
fn a_missing_library_or_compiler_is_named_with_what_installs_it() {
    let empty = scratch("no-lib");
    let out = command(&["--alloc", "wfspan", "--ops", "malloc", "--iterations", "10"])
        .env("ALLOCLAB_PRELOAD_DIR", &empty)
        .output()
        .unwrap();
    assert_one_line_error(
        &out,
        "cargo build --profile preload -p alloclab-preload-wfspan",
    );

    // A fresh temporary directory, so that the driver is not already compiled there.
    let tmp = scratch("no-cxx");
    let out = command(&["--alloc", "system", "--ops", "malloc", "--iterations", "10"])
        .env("TMPDIR", &tmp)
        .env("CXX", "/nonexistent/alloclab-no-cxx")
        .output()
        .unwrap();
    assert_one_line_error(&out, "apt-get install -y g++");
}
