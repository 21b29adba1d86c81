//! `alloclab exec` and the `programs` suite, run as a user runs them: a real command under
//! every heap a program can run on, its figures and JSON, and every kind of bad input.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::{alloclab_command, assert_one_line_error, preload_dir, stderr, stdout};

fn alloclab(args: &[&str]) -> Output {
    alloclab_command(args).output().expect("alloclab runs")
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("exec", name)
}

/// The heaps a program can run on that are here: alloclab's (when built) and every peer
/// library that is installed, `system` first.
fn heaps_here() -> Vec<&'static str> {
    let mut heaps = vec!["system"];
    if preload_dir().is_some() {
        heaps.extend(["wfspan", "randomized"]);
    } else {
        println!("note: alloclab's preload libraries are not built here; testing without them");
    }
    for lib in ["libmimalloc", "libjemalloc", "libtcmalloc"] {
        match alloclab_harness::peers::unavailable(lib) {
            None => heaps.push(lib),
            Some(why) => println!("note: {lib} left out: {why}"),
        }
    }
    heaps
}

const PYTHON: &str =
    "d = {str(i): [i] * 3 for i in range(20000)}\nprint(sum(len(v) for v in d.values()))";

#[test]
fn exec_runs_python_under_every_heap_here_and_writes_every_run_to_json() {
    if alloclab_programs::process::find_program("python3").is_none() {
        println!("skipped: python3 not found");
        return;
    }
    let heaps = heaps_here();
    let dir = scratch("python");
    let json = dir.join("exec.json");
    let alloc = heaps.join(",");
    let out = alloclab(&[
        "exec",
        "--alloc",
        &alloc,
        "--runs",
        "2",
        "--check-output",
        "--json",
        json.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        PYTHON,
    ]);
    assert!(out.status.success(), "exec failed: {}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("ratio to system"), "{table}");
    assert!(!table.contains("FLAGGED"), "{table}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["format"], "alloclab-exec");
    let entries = doc["allocators"].as_array().unwrap();
    assert_eq!(entries.len(), heaps.len());
    let digest = &entries[0]["runs"][0]["stdout_digest"];
    for (entry, heap) in entries.iter().zip(&heaps) {
        assert_eq!(entry["allocator"], *heap);
        // system preloads nothing; every other heap names the library it preloaded.
        assert_eq!(entry["library"].is_null(), *heap == "system", "{heap}");
        let runs = entry["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        for run in runs {
            assert_eq!(run["exit_code"], 0, "{heap}");
            assert_eq!(&run["stdout_digest"], digest, "{heap}");
            assert!(run["wall_s"].as_f64().unwrap() > 0.0);
            // A python3 that built a 20,000-entry dict has more than 5 MiB resident.
            assert!(run["peak_rss_bytes"].as_u64().unwrap() > 5 << 20, "{heap}");
        }
        let ratio = entry["summary"]["wall_s"]["ratio"].as_f64().unwrap();
        assert!(ratio > 0.0);
    }
    assert_eq!(entries[0]["summary"]["wall_s"]["ratio"], 1.0);
}

#[test]
fn exec_flags_a_run_whose_exit_status_or_output_differs() {
    let dir = scratch("flag");
    // The command fails when a library is preloaded, prints what it saw otherwise.
    let script = "if [ -n \"$LD_PRELOAD\" ]; then echo preloaded; exit 3; fi; echo plain";
    let heaps = heaps_here();
    let Some(other) = heaps.get(1) else {
        println!("skipped: no heap here besides system");
        return;
    };
    let alloc = format!("system,{other}");
    let json = dir.join("flag.json");
    let out = alloclab(&[
        "exec",
        "--alloc",
        &alloc,
        "--runs",
        "1",
        "--check-output",
        "--json",
        json.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert!(!out.status.success());
    assert!(stdout(&out).contains("FLAGGED"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("runs under {other} differ")),
        "{}",
        stderr(&out)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let why = doc["allocators"][1]["runs"][0]["differs"].as_str().unwrap();
    assert!(why.contains("exit 3 where system gave exit 0"), "{why}");
    assert!(why.contains("standard output differs"), "{why}");
    assert_eq!(doc["allocators"][0]["flagged"], false);
}

#[test]
fn exec_bad_input_is_one_line_and_writes_nothing() {
    let dir = scratch("bad");
    let json = dir.join("never.json");
    let json_arg = json.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--alloc", "no-such-heap", "--", "true"],
            "unknown allocator 'no-such-heap'",
        ),
        (
            &["--alloc", "mimalloc", "--", "true"],
            "'libmimalloc' its shared library",
        ),
        (&["--alloc", "rlsf", "--", "true"], "cannot be preloaded"),
        (&["--alloc", "system,system", "--", "true"], "named twice"),
        (
            &["--alloc", "system", "--", "alloclab-no-such-command"],
            "command 'alloclab-no-such-command' not found",
        ),
        (
            &["--alloc", "system", "--timeout", "0.3", "--", "sleep", "30"],
            "did not finish within 0.3 s",
        ),
        (&["--alloc", "system", "--runs", "0", "--", "true"], "0"),
        (
            &["--alloc", "system", "--timeout", "0", "--", "true"],
            "not a number of seconds",
        ),
    ];
    for (args, needle) in cases {
        let mut full = vec!["exec", "--json", json_arg];
        full.extend_from_slice(args);
        let started = std::time::Instant::now();
        let out = alloclab(&full);
        assert_one_line_error(&out, needle);
        assert!(started.elapsed().as_secs() < 20, "{args:?} took too long");
        assert!(!json.exists(), "{args:?} left {}", json.display());
    }
    // A preload directory without alloclab's libraries: the library is named, nothing runs.
    let out = Command::new(env!("CARGO_BIN_EXE_alloclab"))
        .args([
            "exec",
            "--alloc",
            "system,wfspan",
            "--json",
            json_arg,
            "--",
            "true",
        ])
        .env("ALLOCLAB_PRELOAD_DIR", &dir)
        .output()
        .unwrap();
    assert_one_line_error(&out, "liballoclab_preload_wfspan.so not found");
    assert!(!json.exists());
    // An unwritable JSON path fails before the command runs.
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());
    let out = alloclab(&[
        "exec",
        "--alloc",
        "system",
        "--json",
        "/proc/alloclab/x.json",
        "--",
        "sh",
        "-c",
        &touch,
    ]);
    assert_one_line_error(&out, "cannot write to /proc/alloclab");
    assert!(
        !marker.exists(),
        "the command ran before the output path was checked"
    );
    // No command at all is clap's usage error.
    let out = alloclab(&["exec", "--alloc", "system"]);
    assert!(!out.status.success());
}

#[test]
fn list_says_which_heaps_run_programs_and_how_to_install_missing_libraries() {
    let out = alloclab(&["list"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for lib in ["libmimalloc", "libjemalloc", "libtcmalloc"] {
        assert!(text.contains(lib), "{text}");
    }
    match alloclab_harness::peers::libraries::install_line_for_missing() {
        Some(line) => assert!(text.contains(&line), "{text}"),
        None => assert!(
            text.contains("Every peer's shared library is installed"),
            "{text}"
        ),
    }
    assert!(text.contains("in-process crate") || text.contains("compiled into alloclab"));
}

#[test]
fn programs_suite_runs_each_program_with_the_same_result_under_every_heap() {
    let heaps = heaps_here();
    let dir = scratch("suite");
    let alloc = heaps.join(",");
    let out_dir = dir.join("report");
    let out = alloclab(&[
        "suite",
        "--only",
        "programs",
        "--alloc",
        &alloc,
        "--scale",
        "tiny",
        "--runs",
        "1",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "suite failed: {}\n{}",
        stderr(&out),
        stdout(&out)
    );
    let text = stdout(&out);
    assert!(
        text.contains("programs: wall time / peak RSS over system's"),
        "{text}"
    );
    assert!(!text.contains("result differs"), "{text}");
    let results =
        alloclab_harness::results::ResultsFile::read(&out_dir.join("results.json")).unwrap();
    assert!(alloclab_harness::workloads::programs::report::mismatches(&results).is_empty());
    // Every program whose executables are here ran under every heap.
    for p in alloclab_programs::catalog::all() {
        if let Some(why) = p.missing() {
            assert!(
                stderr(&out).contains(&why),
                "{} skipped without a note",
                p.name
            );
            continue;
        }
        for heap in &heaps {
            assert!(
                results
                    .records
                    .iter()
                    .any(|r| r.workload == p.name && r.allocator == *heap && r.metric == "wall"),
                "{} did not run under {heap}",
                p.name
            );
        }
    }
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(report.contains("### Wall time over `system`'s"), "{report}");
    assert!(report.contains("### Peak RSS over `system`'s"));
}

#[test]
fn an_interrupted_exec_stops_the_command_it_runs() {
    let dir = scratch("interrupt");
    let pid_file = dir.join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_alloclab"))
        .args([
            "exec", "--alloc", "system", "--runs", "1", "--", "sh", "-c", &script,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let pid: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break pid;
        }
        assert!(
            started.elapsed().as_secs() < 20,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert!(!status.success());
    // The command (now `sleep`, pid unchanged by exec) is gone or a zombie awaiting its
    // new parent, within moments.
    let gone = |pid: i32| {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            // The state follows the parenthesised command name.
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        }
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !gone(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the command outlived alloclab"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
