//! The programs suite's inputs: every script runs under its interpreter, succeeds, prints
//! the same bytes twice and different bytes for a different size; the sqlite script ends
//! with a passing integrity check; the generated C source compiles without a warning, is
//! the same for a seed, differs across seeds and grows with its function count.
//!
//! A missing interpreter or compiler skips its test with a printed line. The sizes are a
//! tenth of the small scale or less, so the whole file takes a few seconds.

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use alloclab_programs::gen_c::{SMALL_FUNCTIONS, generated_c_source};
use alloclab_programs::scripts::{
    ROWS_PLACEHOLDER, SCRIPTS, SQLITE_BULK, SQLITE_SMALL_ROWS, Script, sqlite_script,
};

/// The executable `name` on `PATH`, if any.
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A fresh scratch directory for one test.
fn scratch(test: &str) -> PathBuf {
    common::scratch("scripts", test)
}

/// The output of one run; panics with the program's standard error when it fails.
fn run(mut command: Command, stdin: Option<&str>, what: &str) -> String {
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        pipe.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("{what}: writing stdin: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap_or_else(|e| panic!("{what}: output not UTF-8: {e}"))
}

/// Runs `script` at `size`, with `PYTHONHASHSEED` set to `hash_seed` (so two runs with
/// different seeds check that the output does not hang on string hashing).
fn run_script(script: &Script, file: &Path, size: u64, hash_seed: u32) -> String {
    let mut command = Command::new(script.interpreter);
    command
        .arg(file)
        .arg(size.to_string())
        .env("PYTHONHASHSEED", hash_seed.to_string());
    run(command, None, &format!("{} {size}", script.name))
}

fn check_script(name: &str) {
    let script = SCRIPTS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no script named {name}"));
    if find(script.interpreter).is_none() {
        println!("skipped: {} not found", script.interpreter);
        return;
    }
    let dir = scratch(name);
    let file = dir.join(format!("{name}.script"));
    std::fs::write(&file, script.text).expect("write the script");
    let size = (script.small_size / 10).max(1);
    let first = run_script(script, &file, size, 1);
    let second = run_script(script, &file, size, 2);
    assert_eq!(
        first, second,
        "{name}: two runs at {size} printed different output"
    );
    let lines = first.lines().count();
    assert!(
        (2..=12).contains(&lines),
        "{name}: expected a few lines, got {lines}:\n{first}"
    );
    let other = run_script(script, &file, size + size / 2 + 1, 1);
    assert_ne!(
        first, other,
        "{name}: a different size printed the same output"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn python_json_runs_and_is_deterministic() {
    check_script("python-json");
}

#[test]
fn python_dict_runs_and_is_deterministic() {
    check_script("python-dict");
}

#[test]
fn python_tree_runs_and_is_deterministic() {
    check_script("python-tree");
}

#[test]
fn lua_runs_and_is_deterministic() {
    check_script("lua");
}

#[test]
fn perl_runs_and_is_deterministic() {
    check_script("perl");
}

#[test]
fn the_script_table_is_complete() {
    let names: Vec<&str> = SCRIPTS.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        ["python-json", "python-dict", "python-tree", "lua", "perl"]
    );
    for s in SCRIPTS {
        assert!(s.small_size > 0, "{}: zero small size", s.name);
        assert!(!s.text.trim().is_empty(), "{}: empty script", s.name);
        assert!(
            ["python3", "lua5.4", "perl"].contains(&s.interpreter),
            "{}: unexpected interpreter {}",
            s.name,
            s.interpreter
        );
    }
    const { assert!(SQLITE_SMALL_ROWS > 0) };
    assert!(SQLITE_BULK.contains(ROWS_PLACEHOLDER));
    let text = sqlite_script(1234);
    assert!(!text.contains(ROWS_PLACEHOLDER), "a placeholder was left");
    assert!(text.contains("1234"));
}

#[test]
fn sqlite_bulk_passes_its_integrity_check_and_is_deterministic() {
    if find("sqlite3").is_none() {
        println!("skipped: sqlite3 not found");
        return;
    }
    let rows = (SQLITE_SMALL_ROWS / 10).max(1);
    let sqlite = |rows: u64| {
        let mut command = Command::new("sqlite3");
        command.args(["-batch", ":memory:"]);
        run(
            command,
            Some(&sqlite_script(rows)),
            &format!("sqlite3 {rows} rows"),
        )
    };
    let first = sqlite(rows);
    assert_eq!(
        first.lines().last(),
        Some("ok"),
        "the integrity check did not print ok:\n{first}"
    );
    assert!(
        first.starts_with(&format!("loaded|{}|500|{rows}|", rows / 10)),
        "unexpected first line:\n{first}"
    );
    assert_eq!(first, sqlite(rows), "two runs printed different output");
    assert_ne!(
        first,
        sqlite(rows + rows / 2),
        "a different row count printed the same output"
    );
}

#[test]
fn generated_c_is_deterministic_and_grows() {
    let a = generated_c_source(20, 7);
    assert_eq!(
        a,
        generated_c_source(20, 7),
        "the same seed gave another text"
    );
    assert_ne!(a, generated_c_source(20, 8), "two seeds gave the same text");
    let bigger = generated_c_source(40, 7);
    assert!(
        bigger.len() > a.len() * 3 / 2,
        "40 functions ({} bytes) are not much more than 20 ({} bytes)",
        bigger.len(),
        a.len()
    );
    for i in 0..40 {
        assert!(bigger.contains(&format!(
            "static uint64_t f_{i}(uint64_t x, struct ctx *c)\n{{"
        )));
    }
    assert!(generated_c_source(SMALL_FUNCTIONS, 1).len() > 20_000);
    // Zero functions still makes a unit with one.
    assert!(generated_c_source(0, 1).contains("f_0"));
}

#[test]
fn generated_c_compiles_without_warnings() {
    let Some(cc) = find("cc") else {
        println!("skipped: cc not found");
        return;
    };
    let dir = scratch("gen-c");
    // Several seeds and sizes, at -O2 as the workload compiles it: some warnings
    // (array bounds, uninitialized uses) only appear once the optimizer runs.
    for (functions, seed) in [(1, 1), (12, 2), (24, 3), (16, 4)] {
        let source = dir.join(format!("gen-{functions}-{seed}.c"));
        std::fs::write(&source, generated_c_source(functions, seed)).expect("write the source");
        let mut command = Command::new(&cc);
        command
            .args(["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c"])
            .arg(&source)
            .arg("-o")
            .arg(dir.join(format!("gen-{functions}-{seed}.o")));
        run(
            command,
            None,
            &format!("cc on {functions} functions, seed {seed}"),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
