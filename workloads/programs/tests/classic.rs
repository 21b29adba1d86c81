//! The C versions of the classic benchmarks: they compile, run at tiny scale with two
//! threads, count the operations the Rust workloads' parameters give, print the same line on
//! every run (whatever the thread interleaving, and under another malloc where one is
//! installed), change their checksum with the seed, and reject bad arguments.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use alloclab_programs::classic::{self, CLASSIC, ClassicOutput, CompileError};

/// mimalloc as Debian installs it: when it is there, the programs also run under it.
const MIMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2";

/// Scale::scaled at tiny: 1/64, at least 1.
fn tiny(small: u64) -> u64 {
    (small / 64).max(1)
}

/// The operations the in-process workload counts at tiny scale with `threads` threads,
/// from the parameters of harness/src/workloads/cpu/*.rs.
fn expected_operations(name: &str, threads: u64) -> u64 {
    match name {
        "larson" => {
            // Every round: STEPS_PER_ROUND frees and as many allocations; at the end each
            // thread frees the ARRAYS arrays of SLOTS blocks left to it.
            let (arrays, slots, steps, rounds) = (2, 500, 1000, tiny(512));
            threads * (2 * steps * rounds + arrays * slots)
        }
        "xmalloc-test" => {
            let (batch, batches) = (256, tiny(2048));
            threads * 2 * batches * batch
        }
        "cache-scratch" => {
            // The free of the object the main thread gave, then allocate + free per object.
            threads * (1 + 2 * tiny(120_000))
        }
        "cache-thrash" => threads * 2 * tiny(120_000),
        "glibc-simple" => {
            // One thread whatever `threads` says.
            let allocations = tiny(100_000);
            let sizes = [16u64, 32, 64, 128, 256];
            let lengths = [25u64, 100, 400, 1600];
            let per_size: u64 = lengths
                .iter()
                .map(|&len| 2 * (allocations / len).max(1) * len)
                .sum();
            per_size * sizes.len() as u64
        }
        "glibc-thread" => {
            // Every block allocated is freed, during the steps or at the end.
            threads * 2 * tiny(1 << 19)
        }
        "mstress" => {
            // Every block allocated (one per step) is freed once, by some thread or by the
            // main thread at the end.
            let (steps, rounds) = (1000, tiny(512));
            2 * threads * rounds * steps
        }
        "rptest" => {
            let (batch, batches) = (256, tiny(1024));
            threads * 2 * batches * batch
        }
        other => panic!("no expected count for {other}"),
    }
}

/// The programs, compiled once for all tests; `None` if there is no C compiler.
fn binaries() -> Option<&'static [PathBuf]> {
    static BINARIES: OnceLock<Option<Vec<PathBuf>>> = OnceLock::new();
    BINARIES
        .get_or_init(|| {
            // Kept between runs (a second compile of fresh binaries is a few stats).
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("classic");
            match classic::compile(&dir, "cc".as_ref()) {
                Ok(binaries) => Some(binaries),
                Err(e) if e.is_missing_toolchain() => None,
                Err(e) => panic!("{e}"),
            }
        })
        .as_deref()
}

macro_rules! binaries_or_skip {
    () => {
        match binaries() {
            Some(b) => b,
            None => {
                println!("skipped: no C compiler");
                return;
            }
        }
    };
}

fn run(binary: &Path, args: &[&str], preload: Option<&str>) -> Output {
    let mut cmd = Command::new(binary);
    cmd.args(args).env_remove("LD_PRELOAD");
    if let Some(lib) = preload {
        cmd.env("LD_PRELOAD", lib);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("{}: {e}", binary.display()))
}

/// Runs a program, checks that it succeeded and parses what it wrote.
fn run_ok(binary: &Path, args: &[&str], preload: Option<&str>) -> (String, ClassicOutput) {
    let out = run(binary, args, preload);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{} {args:?}: {}\n{stderr}",
        binary.display(),
        out.status
    );
    let parsed = classic::parse_output(&stdout, &stderr)
        .unwrap_or_else(|e| panic!("{} {args:?}: {e}\n{stdout}{stderr}", binary.display()));
    (stdout, parsed)
}

#[test]
fn every_program_compiles_to_an_executable_named_after_it() {
    let binaries = binaries_or_skip!();
    assert_eq!(binaries.len(), CLASSIC.len());
    for (binary, program) in binaries.iter().zip(CLASSIC) {
        assert_eq!(binary.file_name().unwrap(), program.name);
        assert!(binary.is_file(), "{}", binary.display());
    }
}

#[test]
fn a_second_compile_keeps_the_binaries() {
    let binaries = binaries_or_skip!();
    let dir = binaries[0].parent().unwrap();
    let before: Vec<_> = binaries
        .iter()
        .map(|b| b.metadata().unwrap().modified().unwrap())
        .collect();
    let again = classic::compile(dir, "cc".as_ref()).unwrap();
    assert_eq!(again, binaries);
    let after: Vec<_> = again
        .iter()
        .map(|b| b.metadata().unwrap().modified().unwrap())
        .collect();
    assert_eq!(before, after, "fresh binaries were rebuilt");
}

#[test]
fn each_program_does_the_rust_workloads_work_deterministically() {
    let binaries = binaries_or_skip!();
    let mimalloc = Path::new(MIMALLOC).exists().then_some(MIMALLOC);
    for (binary, program) in binaries.iter().zip(CLASSIC) {
        let name = program.name;
        let (first, out) = run_ok(binary, &["2", "tiny", "7"], None);
        assert_eq!(out.workload, name);
        assert_eq!(out.threads, 2);
        assert_eq!(out.scale, "tiny");
        assert_eq!(out.seed, 7);
        assert_eq!(
            out.operations,
            expected_operations(name, 2),
            "{name}: operations"
        );
        assert!(!out.time.is_zero(), "{name}: zero time");

        // The same line on every run, whatever the interleaving of the threads.
        for _ in 0..2 {
            let (again, _) = run_ok(binary, &["2", "tiny", "7"], None);
            assert_eq!(again, first, "{name}: two runs, two results");
        }
        // And under another malloc.
        if let Some(lib) = mimalloc {
            let (under, _) = run_ok(binary, &["2", "tiny", "7"], Some(lib));
            assert_eq!(under, first, "{name}: a different result under {lib}");
        }

        // Another seed, another checksum (the same work).
        let (_, other) = run_ok(binary, &["2", "tiny", "8"], None);
        assert_ne!(other.checksum, out.checksum, "{name}: the seed is ignored");
        assert_eq!(other.operations, out.operations, "{name}");

        // One thread and three: the counts follow the thread count.
        for threads in [1, 3] {
            let t = threads.to_string();
            let (_, o) = run_ok(binary, &[&t, "tiny", "7"], None);
            assert_eq!(
                o.operations,
                expected_operations(name, threads),
                "{name} at {t}"
            );
        }
    }
}

#[test]
fn bad_arguments_exit_2_with_a_usage_line() {
    let binaries = binaries_or_skip!();
    let bad: &[&[&str]] = &[
        &[],
        &["2", "tiny"],
        &["2", "tiny", "7", "extra"],
        &["0", "tiny", "7"],
        &["-1", "tiny", "7"],
        &["two", "tiny", "7"],
        &["2", "huge", "7"],
        &["2", "Tiny", "7"],
        &["2", "tiny", "-7"],
        &["2", "tiny", "0x7"],
        &["2", "tiny", "18446744073709551616"],
        &["2", "tiny", ""],
    ];
    for (binary, program) in binaries.iter().zip(CLASSIC) {
        for args in bad {
            let out = run(binary, args, None);
            assert_eq!(out.status.code(), Some(2), "{} {args:?}", program.name);
            assert!(out.stdout.is_empty(), "{} {args:?}", program.name);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("usage:"),
                "{} {args:?}: {stderr}",
                program.name
            );
        }
        // The largest seed is fine.
        run_ok(binary, &["1", "tiny", "18446744073709551615"], None);
    }
}

#[test]
fn a_compiler_that_fails_is_reported_with_its_message() {
    // `false` as the compiler: it runs, and fails.
    let dir = std::env::temp_dir().join(format!("alloclab-classic-false-{}", std::process::id()));
    let result = classic::compile(&dir, "false".as_ref());
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Err(CompileError::Failed { program, .. }) => assert_eq!(program, CLASSIC[0].name),
        Err(CompileError::NoCompiler { .. }) => println!("skipped: no `false` to run"),
        other => panic!("expected a failed compile, got {other:?}"),
    }
}
