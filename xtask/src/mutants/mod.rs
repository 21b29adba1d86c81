//! `cargo xtask mutants`: a mutation campaign against one allocator crate, with the
//! project's verification kit as the oracle.
//!
//! [cargo-mutants](https://mutants.rs) generates the mutants (it lists them, with a diff
//! each); this driver applies each to a copy of the workspace, builds the crate's tests,
//! runs them, and runs the crate's loom models when every ordinary test passed, so that it
//! can say which layer caught the mutant (see [`verdict::Layer`]): a bad transition under
//! `Checked`, a crash-consistency test, a loom model, another assertion, or a test binary
//! that died. cargo-mutants's own runner cannot: it runs one test command and reports
//! caught or missed.
//!
//! Each mutant's result is appended to `results.jsonl` as soon as it is known, so a
//! campaign stopped by its budget (or anything else) resumes where it stopped; `--shard
//! K/N` takes every N-th mutant from the K-th, so that a campaign can be split across
//! sessions or machines. The summary (`summary.json`, `summary.md`) is written from every
//! result on file for the mutants listed.

mod campaign;
mod equivalent;
mod list;
mod patterns;
mod summary;
mod verdict;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub use campaign::run;

/// What a campaign runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The crate (`-p` name), e.g. `alloclab-randomized`.
    pub krate: String,
    /// Only mutants in files matching these globs (cargo-mutants's `--file`).
    pub files: Vec<String>,
    /// Stop starting mutants after this long.
    pub budget: Duration,
    /// Time limit of one mutant's tests (its build, its tests, its loom models each); by
    /// default three times the unmutated tests' time, and at least a minute.
    pub timeout: Option<Duration>,
    /// `(k, n)`: the mutants whose index is `k` modulo `n`.
    pub shard: (usize, usize),
    /// Where the results and summaries go.
    pub out: PathBuf,
    /// Whether to run the loom models of mutants every ordinary test let through.
    pub loom: bool,
    /// Only list the mutants (no test runs).
    pub list_only: bool,
    /// Run the crate's catalogued bug patterns instead of cargo-mutants's mutants.
    pub patterns: bool,
    /// Only write the summary from the results on file (no test runs).
    pub report_only: bool,
}

/// The usage text.
pub const USAGE: &str = "\
usage: cargo xtask mutants <crate> [--files GLOB]... [--budget MINUTES] [--timeout SECONDS]
                                   [--shard K/N] [--out DIR] [--no-loom] [--list] [--patterns]
                                   [--report]

  Runs cargo-mutants's mutants of <crate> (e.g. alloclab-randomized) against the crate's
  tests, property tests under Checked, crash tests and loom models, and writes
  DIR/results.jsonl (one line per mutant, appended as it ends: a stopped campaign resumes),
  DIR/summary.json and DIR/summary.md. DIR defaults to target/mutants/<crate>.

  --files GLOB     only mutants in files matching GLOB (repeatable), e.g. 'src/heap/*.rs'
  --budget MINUTES start no mutant after this many minutes (default 60)
  --timeout SECS   limit of each mutant's build, tests and loom run (default: 3x the
                   unmutated tests' time, at least 60)
  --shard K/N      only mutants whose index is K modulo N (default 0/1)
  --no-loom        do not run loom models
  --list           list the mutants (or with --patterns, the patterns) and stop
  --report         write the summary from the results on file and stop
  --patterns       instead of cargo-mutants's mutants, build the crate with each bug of the
                   catalogue (cfg alloclab_bug) in turn: DIR/patterns.jsonl, DIR/patterns.md
";

/// Reads the command line after `mutants`.
pub fn parse(args: &[String]) -> Result<Options, String> {
    let mut it = args.iter();
    let mut krate = None;
    let mut o = Options {
        krate: String::new(),
        files: Vec::new(),
        budget: Duration::from_secs(60 * 60),
        timeout: None,
        shard: (0, 1),
        out: PathBuf::new(),
        loom: true,
        list_only: false,
        patterns: false,
        report_only: false,
    };
    let number = |flag: &str, v: Option<&String>| -> Result<f64, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        match v.parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(format!("{flag}: not a positive number: {v:?}")),
        }
    };
    let mut out = None;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--files" => o
                .files
                .push(it.next().ok_or("--files needs a glob")?.clone()),
            "--budget" => o.budget = Duration::from_secs_f64(60.0 * number(arg, it.next())?),
            "--timeout" => o.timeout = Some(Duration::from_secs_f64(number(arg, it.next())?)),
            "--shard" => {
                let v = it.next().ok_or("--shard needs K/N")?;
                o.shard = v
                    .split_once('/')
                    .and_then(|(k, n)| Some((k.parse().ok()?, n.parse().ok()?)))
                    .filter(|&(k, n): &(usize, usize)| n > 0 && k < n)
                    .ok_or_else(|| format!("--shard: expected K/N with K < N, got {v:?}"))?;
            }
            "--out" => out = Some(PathBuf::from(it.next().ok_or("--out needs a directory")?)),
            "--no-loom" => o.loom = false,
            "--list" => o.list_only = true,
            "--patterns" => o.patterns = true,
            "--report" => o.report_only = true,
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag:?}")),
            name => {
                if krate.replace(name.to_owned()).is_some() {
                    return Err("more than one crate named".to_owned());
                }
            }
        }
    }
    o.krate = krate.ok_or("no crate named")?;
    o.out = out.unwrap_or_else(|| PathBuf::from("target/mutants").join(&o.krate));
    Ok(o)
}

/// `cargo xtask mutants ...`.
pub fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match parse(args) {
        Ok(options) => match run(&options) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask mutants: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("xtask mutants: {e}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_command_line_is_read_with_its_defaults() {
        let o = parse(&args("alloclab-randomized")).unwrap();
        assert_eq!(o.krate, "alloclab-randomized");
        assert_eq!(o.budget, Duration::from_secs(3600));
        assert_eq!(o.shard, (0, 1));
        assert_eq!(o.out, PathBuf::from("target/mutants/alloclab-randomized"));
        assert!(o.loom && !o.list_only && !o.patterns && !o.report_only && o.timeout.is_none());
        let o = parse(&args(
            "--files src/heap/*.rs alloclab-wfspan --budget 1.5 --shard 2/4 --no-loom --timeout 90 --files src/a.rs --patterns",
        ))
        .unwrap();
        assert!(o.patterns);
        assert_eq!(o.files, ["src/heap/*.rs", "src/a.rs"]);
        assert_eq!(o.budget, Duration::from_secs(90));
        assert_eq!(o.timeout, Some(Duration::from_secs(90)));
        assert_eq!(o.shard, (2, 4));
        assert!(!o.loom);
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        for (line, says) in [
            ("", "no crate"),
            ("a b", "more than one"),
            ("a --shard 4/4", "K < N"),
            ("a --shard x", "K/N"),
            ("a --budget -1", "positive"),
            ("a --budget", "needs a value"),
            ("a --frobnicate", "unknown option"),
        ] {
            let e = parse(&args(line)).unwrap_err();
            assert!(e.contains(says), "{line:?}: {e}");
        }
    }
}
