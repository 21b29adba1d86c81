//! What the command-line tests of `alloclab` share: the binary under test, pointed at the
//! preload libraries of this build, and scratch directories.

#![allow(dead_code)] // Each test file uses what it needs of this.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory that holds alloclab's preload libraries (wfspan's and randomized's) in
/// this build: `cargo test --workspace` builds them into `target/<profile>/deps/`,
/// `cargo build` beside the binary.
pub fn preload_dir() -> Option<PathBuf> {
    let exe = Path::new(env!("CARGO_BIN_EXE_alloclab"));
    let profile = exe.parent()?;
    [profile.join("deps"), profile.to_owned()]
        .into_iter()
        .find(|d| {
            d.join("liballoclab_preload_wfspan.so").is_file()
                && d.join("liballoclab_preload_randomized.so").is_file()
        })
}

/// `alloclab ARGS...`, not yet run, with the preload libraries taken from this build.
pub fn alloclab_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_alloclab"));
    command.args(args);
    // Tests never build: cargo holds the build directory's lock while they run.
    command.env(
        "ALLOCLAB_PRELOAD_DIR",
        preload_dir().unwrap_or_else(|| PathBuf::from("/nonexistent-alloclab-preload-dir")),
    );
    command
}

/// The standard output of a finished command, as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The standard error of a finished command, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An empty directory of this test process's own, `alloclab-<suite>-<pid>-<name>`.
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("alloclab-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Fails unless the command failed with its error on the first line of stderr, containing
/// `needle` (clap's own errors add one line pointing to `--help`; alloclab's have one).
pub fn assert_one_line_error(out: &Output, needle: &str) {
    assert!(!out.status.success(), "expected failure: {}", stdout(out));
    let err = stderr(out);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.len() == 1 || (lines.len() == 2 && lines[1].contains("--help")),
        "not one line: {err}"
    );
    assert!(lines[0].contains(needle), "{needle:?} not in: {err}");
}
