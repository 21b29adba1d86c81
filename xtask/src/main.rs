//! Project automation.
//!
//! `cargo xtask test` — every test of the workspace (unit, integration, doc), then every
//! loom model. It first builds the wfspan and randomized preload libraries with the
//! `preload` profile (no standard library), which their tests run against as well as
//! against the ones `cargo test` builds. Loom models live in test modules whose names start with `loom` inside
//! `cfg(loom)`; they are built with `--cfg loom` in a target directory of their own
//! (`target/loom`) so the two builds do not invalidate each other. The number of
//! preemptions loom explores is bounded by `LOOM_MAX_PREEMPTIONS` (default 3), which keeps
//! the models to minutes on a 2-core machine.
//!
//! A test that cannot run here (no GPU, no NVRTC, no PMDK, a program not installed, running
//! as root where it needs an unprivileged user) passes without checking anything, so it says
//! so: it writes `SKIPPED: <test>: <reason>` to the process's stderr, past the test harness's
//! capture. `cargo xtask test` passes the tests' stderr through, and ends with how many
//! tests skipped and why, so that a skip is never mistaken for a pass.
//!
//! `cargo xtask mutants <crate>` — a mutation campaign: cargo-mutants's mutants of an
//! allocator crate, each built and tested in a copy of the workspace, with the layer of the
//! verification kit that caught it (see the `mutants` module).

use std::env;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, ExitCode, Stdio};

mod mutants;

/// Crates that contain loom models.
pub(crate) const LOOM_CRATES: &[&str] = &[
    "alloclab-core",
    "alloclab-wfspan",
    "alloclab-randomized",
    "alloclab-gpu",
    "alloclab-pmem",
    "alloclab-preload",
];

/// Default bound on loom's preemptions per execution.
const DEFAULT_LOOM_MAX_PREEMPTIONS: &str = "3";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("mutants") => mutants::main(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask test [--no-loom]\n       cargo xtask mutants <crate> [options]\n\n  test      runs every test of the workspace, then the loom models\n  mutants   a mutation campaign against an allocator crate (cargo xtask mutants --help)"
            );
            ExitCode::from(2)
        }
    }
}

fn cargo() -> Command {
    Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

fn step(name: &str, command: &mut Command) -> bool {
    eprintln!("\n==> {name}");
    match command.status() {
        Ok(status) if status.success() => true,
        Ok(status) => {
            eprintln!("xtask: {name} failed ({status})");
            false
        }
        Err(e) => {
            eprintln!("xtask: cannot run {name}: {e}");
            false
        }
    }
}

/// The marker a test that could not run writes at the start of a line on stderr.
const SKIP_MARKER: &str = "SKIPPED: ";

/// Runs `command` like [`step`], passing its stderr through line by line, and returns
/// whether it succeeded with the lines that start with [`SKIP_MARKER`].
fn step_counting_skips(name: &str, command: &mut Command) -> (bool, Vec<String>) {
    eprintln!("\n==> {name}");
    let mut child = match command.stderr(Stdio::piped()).spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("xtask: cannot run {name}: {e}");
            return (false, Vec::new());
        }
    };
    let mut skips = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        let mut out = std::io::stderr().lock();
        for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
            let line = String::from_utf8_lossy(&line).into_owned();
            let _ = writeln!(out, "{line}");
            if let Some(skip) = line.strip_prefix(SKIP_MARKER) {
                skips.push(skip.to_owned());
            }
        }
    }
    match child.wait() {
        Ok(status) if status.success() => (true, skips),
        Ok(status) => {
            eprintln!("xtask: {name} failed ({status})");
            (false, skips)
        }
        Err(e) => {
            eprintln!("xtask: cannot wait for {name}: {e}");
            (false, skips)
        }
    }
}

fn test(flags: &[String]) -> ExitCode {
    // The preload libraries as programs get them (the `preload` profile, without the
    // standard library), which their tests run against beside the ones `cargo test` builds;
    // one command each, since cargo unifies the features of the packages one command builds.
    let mut built = true;
    for package in ["alloclab-preload-wfspan", "alloclab-preload-randomized"] {
        built &= step(
            &format!("cargo build --profile preload -p {package}"),
            cargo().args(["build", "--profile", "preload", "-p", package]),
        );
    }
    let (mut ok, skips) = step_counting_skips(
        "cargo test --workspace",
        cargo().args(["test", "--workspace"]),
    );
    ok &= built;
    if ok && !flags.iter().any(|f| f == "--no-loom") {
        let preemptions = env::var("LOOM_MAX_PREEMPTIONS")
            .unwrap_or_else(|_| DEFAULT_LOOM_MAX_PREEMPTIONS.to_owned());
        let mut rustflags = env::var("RUSTFLAGS").unwrap_or_default();
        rustflags.push_str(" --cfg loom");
        let target_dir = env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_owned());
        for krate in LOOM_CRATES {
            ok &= step(
                &format!("loom models of {krate} (LOOM_MAX_PREEMPTIONS={preemptions})"),
                cargo()
                    .args(["test", "--release", "--lib", "-p", krate, "loom"])
                    .env("RUSTFLAGS", rustflags.trim())
                    .env("LOOM_MAX_PREEMPTIONS", &preemptions)
                    .env("CARGO_TARGET_DIR", format!("{target_dir}/loom")),
            );
        }
    }
    if skips.is_empty() {
        eprintln!("\nxtask: no test skipped");
    } else {
        eprintln!(
            "\nxtask: {} test{} skipped (they checked nothing here):",
            skips.len(),
            if skips.len() == 1 { "" } else { "s" }
        );
        for skip in &skips {
            eprintln!("  {skip}");
        }
    }
    if ok {
        eprintln!("\nxtask: all tests passed");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
