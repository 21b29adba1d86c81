//! `alloclab exec`: the user's own command under each heap named, measured from outside.
//!
//! Every run is a fresh process; runs are interleaved across heaps (run 1 under each, then
//! run 2 ...), so that a slow minute of a shared machine is spread over all of them. Each run
//! is measured by `wait4`: wall time, user + system CPU time and peak RSS (`ru_maxrss`, the
//! largest of the command and the descendants it waited for). The command's standard output
//! and error are kept, not shown; its standard input is `/dev/null`.
//!
//! A run whose exit status differs from the first heap's first run, or (with
//! `--check-output`) whose standard output does, is flagged in the table and the JSON, and
//! the command exits non-zero after writing them.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use alloclab_programs::process::{self, Exit, Spec};
use serde::Serialize;

use crate::peers::libraries;
use crate::report::{self, fmt_value};

/// What `alloclab exec` was asked.
#[derive(Clone, Debug)]
pub struct Request {
    /// Heaps, in order; ratios are against the first.
    pub allocators: Vec<String>,
    /// Runs per heap.
    pub runs: u32,
    /// How long one run may take.
    pub timeout: Duration,
    /// Whether a run's standard output must equal the first heap's.
    pub check_output: bool,
    /// Where to write the JSON, if anywhere.
    pub json: Option<PathBuf>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

/// The name and version of the JSON document `exec --json` writes.
pub const EXEC_FORMAT: &str = "alloclab-exec";
/// Its version.
pub const EXEC_FORMAT_VERSION: u32 = 1;

/// The JSON document: the request, the machine, and every run of every heap.
#[derive(Debug, Serialize)]
pub struct ExecResults {
    /// [`EXEC_FORMAT`].
    pub format: &'static str,
    /// [`EXEC_FORMAT_VERSION`].
    pub version: u32,
    /// The machine.
    pub machine: crate::results::Machine,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Runs per heap.
    pub runs: u32,
    /// The timeout of one run, seconds.
    pub timeout_s: f64,
    /// Whether standard output was compared.
    pub check_output: bool,
    /// When the runs ended (seconds since the Unix epoch).
    pub created_unix_s: u64,
    /// One entry per heap, in the order asked.
    pub allocators: Vec<HeapRuns>,
}

/// Every run under one heap, and their summary.
#[derive(Debug, Serialize)]
pub struct HeapRuns {
    /// The heap's name.
    pub allocator: String,
    /// The library preloaded; `null`: nothing (the program's own malloc).
    pub library: Option<String>,
    /// The runs, in order.
    pub runs: Vec<RunFigures>,
    /// Median, min and max of each figure, and the median's ratio to the first heap's.
    pub summary: Summary,
    /// Whether any run was flagged.
    pub flagged: bool,
}

/// One run.
#[derive(Debug, Serialize)]
pub struct RunFigures {
    /// 1-based run number.
    pub run: u32,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// User CPU time, seconds.
    pub user_s: f64,
    /// System CPU time, seconds.
    pub sys_s: f64,
    /// Peak resident set, bytes.
    pub peak_rss_bytes: u64,
    /// `exit 0`, `killed by signal 11 (SIGSEGV)`, ...
    pub status: String,
    /// The exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Digest of its standard output (52-bit FNV-1a).
    pub stdout_digest: u64,
    /// Why this run is flagged, if it is: its status or output differs from the first heap's
    /// first run.
    pub differs: Option<String>,
}

/// Median (min-max) of each figure over a heap's runs.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Wall time, seconds.
    pub wall_s: Spread,
    /// User + system CPU time, seconds.
    pub cpu_s: Spread,
    /// Peak RSS, MiB.
    pub peak_rss_mib: Spread,
}

/// Median, min, max, and the median over the first heap's median.
#[derive(Debug, Serialize)]
pub struct Spread {
    /// Median over the runs.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// `median` over the first heap's median (`null` where that is 0).
    pub ratio: Option<f64>,
}

fn spread(values: &[f64], base: Option<f64>) -> Spread {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let median = crate::results::median_of_sorted(&v);
    Spread {
        median,
        min: v.first().copied().unwrap_or(0.0),
        max: v.last().copied().unwrap_or(0.0),
        ratio: base.filter(|b| *b > 0.0).map(|b| median / b),
    }
}

/// Checks the request, runs it, prints the table, writes the JSON.
///
/// # Errors
///
/// One line, before anything runs: an unknown heap, one that cannot be preloaded, a missing
/// library, a command that does not exist, an unwritable JSON path; or while running: a run
/// past the timeout. After the table and JSON are written: flagged runs.
pub fn exec(request: &Request) -> Result<(), String> {
    let Some(program) = request.command.first() else {
        return Err("no command given (usage: alloclab exec --alloc A,B -- CMD ARGS...)".into());
    };
    let names: Vec<&str> = request.allocators.iter().map(String::as_str).collect();
    for (i, name) in names.iter().enumerate() {
        if crate::peers::find(name).is_none() {
            let known: Vec<&str> = libraries::preloadable().map(|(n, _)| n).collect();
            return Err(format!(
                "unknown allocator '{name}' (those a program can run on: {})",
                known.join(", ")
            ));
        }
        if names[..i].contains(name) {
            return Err(format!("allocator '{name}' is named twice"));
        }
        if libraries::source(name).is_none() {
            return Err(libraries::not_preloadable(name));
        }
    }
    let program_text = program.to_string_lossy().into_owned();
    let found = process::find_program(&program_text)
        .ok_or_else(|| format!("command '{program_text}' not found"))?;
    if let Some(path) = &request.json {
        crate::ensure_writable_file(path)?;
    }
    libraries::ensure_built(&names)?;
    // A Ctrl-C stops the command too, not only alloclab (it runs in a group of its own).
    process::kill_programs_on_interrupt();
    let libraries: Vec<Option<PathBuf>> = names
        .iter()
        .map(|n| libraries::resolve(n))
        .collect::<Result<_, _>>()?;

    let mut exits: Vec<Vec<Exit>> = names.iter().map(|_| Vec::new()).collect();
    for run in 1..=request.runs {
        for (i, name) in names.iter().enumerate() {
            let mut spec = Spec::new(&found, &request.command[1..]);
            spec.preload.clone_from(&libraries[i]);
            spec.timeout = request.timeout;
            let exit = process::run(&spec).map_err(|e| format!("run {run} under {name}: {e}"))?;
            exits[i].push(exit);
        }
    }

    let reference = &exits[0][0];
    let mut heaps = Vec::new();
    let base = |f: fn(&Exit) -> f64| {
        let v: Vec<f64> = exits[0].iter().map(f).collect();
        spread(&v, None).median
    };
    let wall = |e: &Exit| e.wall.as_secs_f64();
    let cpu = |e: &Exit| e.cpu().as_secs_f64();
    let rss = |e: &Exit| e.peak_rss_bytes as f64 / f64::from(1u32 << 20);
    let (base_wall, base_cpu, base_rss) = (base(wall), base(cpu), base(rss));
    for (i, name) in names.iter().enumerate() {
        let runs: Vec<RunFigures> = exits[i]
            .iter()
            .enumerate()
            .map(|(r, e)| {
                let mut differs = Vec::new();
                if e.status != reference.status {
                    differs.push(format!(
                        "{} where {} gave {}",
                        e.status_text(),
                        names[0],
                        reference.status_text()
                    ));
                }
                if request.check_output && e.stdout != reference.stdout {
                    differs.push(format!("standard output differs from {}'s", names[0]));
                }
                RunFigures {
                    run: r as u32 + 1,
                    wall_s: e.wall.as_secs_f64(),
                    user_s: e.user.as_secs_f64(),
                    sys_s: e.sys.as_secs_f64(),
                    peak_rss_bytes: e.peak_rss_bytes,
                    status: e.status_text(),
                    exit_code: e.status.code(),
                    signal: std::os::unix::process::ExitStatusExt::signal(&e.status),
                    stdout_digest: process::digest(&e.stdout),
                    differs: (!differs.is_empty()).then(|| differs.join("; ")),
                }
            })
            .collect();
        let values = |f: fn(&Exit) -> f64| exits[i].iter().map(f).collect::<Vec<f64>>();
        let flagged = runs.iter().any(|r| r.differs.is_some());
        heaps.push(HeapRuns {
            allocator: (*name).to_owned(),
            library: libraries[i].as_ref().map(|p| p.display().to_string()),
            summary: Summary {
                wall_s: spread(&values(wall), Some(base_wall)),
                cpu_s: spread(&values(cpu), Some(base_cpu)),
                peak_rss_mib: spread(&values(rss), Some(base_rss)),
            },
            runs,
            flagged,
        });
    }
    let results = ExecResults {
        format: EXEC_FORMAT,
        version: EXEC_FORMAT_VERSION,
        machine: crate::machine::describe(),
        command: request
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        runs: request.runs,
        timeout_s: request.timeout.as_secs_f64(),
        check_output: request.check_output,
        created_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        allocators: heaps,
    };
    print!("{}", table(&results));
    if let Some(path) = &request.json {
        let mut text = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        text.push('\n');
        report::write_atomic(path, text.as_bytes()).map_err(|e| e.to_string())?;
        println!("wrote {}", path.display());
    }
    let flagged: Vec<&str> = results
        .allocators
        .iter()
        .filter(|h| h.flagged)
        .map(|h| h.allocator.as_str())
        .collect();
    if flagged.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "runs under {} differ from {}'s (flagged above)",
            flagged.join(", "),
            names[0]
        ))
    }
}

/// `arg` as a POSIX shell would need it typed: as it is when it holds only safe characters,
/// else in single quotes.
fn shell_quoted(arg: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !arg.is_empty() && arg.chars().all(safe) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// The terminal table: one row per heap.
pub fn table(results: &ExecResults) -> String {
    let mut out = String::new();
    let base = results
        .allocators
        .first()
        .map_or("", |h| h.allocator.as_str());
    let _ = writeln!(
        out,
        "{}: {} run(s) per heap, interleaved; median (min-max), ratio to {base}",
        results
            .command
            .iter()
            .map(|a| shell_quoted(a))
            .collect::<Vec<_>>()
            .join(" "),
        results.runs
    );
    let _ = writeln!(
        out,
        "{:<12} {:>26} {:>6} {:>26} {:>6} {:>26} {:>6}  exit",
        "allocator", "wall [s]", "ratio", "cpu [s]", "ratio", "peak RSS [MiB]", "ratio"
    );
    let cell = |s: &Spread| {
        format!(
            "{} ({}-{})",
            fmt_value(s.median),
            fmt_value(s.min),
            fmt_value(s.max)
        )
    };
    let ratio = |s: &Spread| s.ratio.map_or("-".to_owned(), |r| format!("{r:.2}"));
    for h in &results.allocators {
        let mut statuses: Vec<&str> = h.runs.iter().map(|r| r.status.as_str()).collect();
        statuses.dedup();
        let _ = writeln!(
            out,
            "{:<12} {:>26} {:>6} {:>26} {:>6} {:>26} {:>6}  {}{}",
            h.allocator,
            cell(&h.summary.wall_s),
            ratio(&h.summary.wall_s),
            cell(&h.summary.cpu_s),
            ratio(&h.summary.cpu_s),
            cell(&h.summary.peak_rss_mib),
            ratio(&h.summary.peak_rss_mib),
            statuses.join(", "),
            if h.flagged { "  FLAGGED" } else { "" }
        );
    }
    for h in &results.allocators {
        for r in &h.runs {
            if let Some(why) = &r.differs {
                let _ = writeln!(out, "flagged: {} run {}: {why}", h.allocator, r.run);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_quoted_only_where_a_shell_needs_it() {
        assert_eq!(shell_quoted("python3"), "python3");
        assert_eq!(shell_quoted("--alloc=a,b"), "--alloc=a,b");
        assert_eq!(shell_quoted("print(1)"), "'print(1)'");
        assert_eq!(shell_quoted("it's"), "'it'\\''s'");
        assert_eq!(shell_quoted(""), "''");
    }

    #[test]
    fn a_spread_is_the_median_with_its_range_and_ratio() {
        let s = spread(&[3.0, 1.0, 2.0], Some(4.0));
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(s.ratio, Some(0.5));
        assert_eq!(spread(&[1.0, 3.0], Some(0.0)).ratio, None);
        assert_eq!(spread(&[1.0, 3.0], None).median, 2.0);
    }
}
