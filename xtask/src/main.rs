//! Project automation.
//!
//! `cargo xtask test` — every test of the workspace (unit, integration, doc), then every
//! loom model. Loom models live in test modules whose names start with `loom` inside
//! `cfg(loom)`; they are built with `--cfg loom` in a target directory of their own
//! (`target/loom`) so the two builds do not invalidate each other. The number of
//! preemptions loom explores is bounded by `LOOM_MAX_PREEMPTIONS` (default 3), which keeps
//! the models to minutes on a 2-core machine.

use std::env;
use std::process::{Command, ExitCode};

/// Crates that contain loom models.
const LOOM_CRATES: &[&str] = &[
    "alloclab-core",
    "alloclab-wfspan",
    "alloclab-randomized",
    "alloclab-gpu",
    "alloclab-pmem",
];

/// Default bound on loom's preemptions per execution.
const DEFAULT_LOOM_MAX_PREEMPTIONS: &str = "3";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask test [--no-loom]\n\n  test   runs every test of the workspace, then the loom models"
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

fn test(flags: &[String]) -> ExitCode {
    let mut ok = step(
        "cargo test --workspace",
        cargo().args(["test", "--workspace"]),
    );
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
    if ok {
        eprintln!("\nxtask: all tests passed");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
