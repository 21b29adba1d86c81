//! Running a campaign: the copy of the workspace the mutants are applied to, the build and
//! test runs of each (with a time limit), and the results file.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Options;
use super::list::{self, Mutant};
use super::patterns;
use super::summary::{Record, Summary};
use super::verdict::{Failures, Layer, Outcome};

/// Default bound on loom's preemptions in a campaign (lower than the test suite's: each
/// surviving mutant runs every model of its crate).
const LOOM_PREEMPTIONS: &str = "2";
/// Failed tests kept per record.
const FAILED_TESTS_KEPT: usize = 5;

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Passed,
    Failed,
    TimedOut,
}

/// Where a campaign works: the workspace, the copy mutants are applied to, its target
/// directories and logs.
struct Places {
    root: PathBuf,
    out: PathBuf,
    copy: PathBuf,
    logs: PathBuf,
    results: PathBuf,
}

impl Places {
    fn new(out: &Path) -> Result<Self, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or("xtask is not inside the workspace")?
            .to_path_buf();
        let out = if out.is_absolute() {
            out.to_path_buf()
        } else {
            root.join(out)
        };
        let places = Places {
            copy: out.join("workspace"),
            logs: out.join("logs"),
            results: out.join("results.jsonl"),
            out,
            root,
        };
        fs::create_dir_all(&places.logs)
            .map_err(|e| format!("cannot create {}: {e}", places.logs.display()))?;
        Ok(places)
    }
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.env("CARGO_TERM_COLOR", "never");
    c
}

/// Runs `command` with its stdout and stderr to `log`, in a process group of its own that
/// is killed whole after `limit`.
fn run_logged(command: &mut Command, log: &Path, limit: Duration) -> Result<Ended, String> {
    let file = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(if status.success() {
                Ended::Passed
            } else {
                Ended::Failed
            });
        }
        if started.elapsed() > limit {
            // The whole group: cargo, rustc, the test binaries and what they forked.
            kill_group(&child);
            let _ = child.wait();
            return Ok(Ended::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sends SIGKILL to the process group `child` leads (it was spawned with
/// `process_group(0)`, so its id is the group's). Not through the `kill` program: procps's
/// reads `-PID` after a signal as an option, not as a group, unless a `--` comes first.
fn kill_group(child: &std::process::Child) {
    let Ok(group) = libc::pid_t::try_from(child.id()) else {
        return;
    };
    // SAFETY: `kill` with a negative pid signals that process group; no memory is passed.
    // `group` is the id of a child not yet waited for, so not reused, and never 0 or 1
    // (which would name this process's group or every process).
    unsafe { libc::kill(-group, libc::SIGKILL) };
}

/// Makes `copy` hold the workspace's files as they are now (those git tracks, and new ones
/// it does not ignore), writing only those that differ (so that the copy's builds stay
/// incremental from one campaign to the next).
fn sync_copy(root: &Path, copy: &Path) -> Result<(), String> {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run git ls-files: {e}"))?;
    if !listed.status.success() {
        return Err("git ls-files failed: the workspace must be a git checkout".to_owned());
    }
    for name in listed.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name);
        let (from, to) = (root.join(&*name), copy.join(&*name));
        let Ok(bytes) = fs::read(&from) else {
            continue; // deleted in the work tree, not yet in git
        };
        if fs::read(&to).is_ok_and(|old| old == bytes) {
            continue;
        }
        if let Some(dir) = to.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        fs::write(&to, bytes).map_err(|e| format!("{}: {e}", to.display()))?;
    }
    Ok(())
}

/// The mutants cargo-mutants generates for the campaign's crate and files.
fn list_mutants(o: &Options, root: &Path) -> Result<Vec<Mutant>, String> {
    let version = cargo().args(["mutants", "--version"]).output();
    if !version.is_ok_and(|v| v.status.success()) {
        return Err(
            "cargo-mutants is not installed; install it with `cargo install --locked cargo-mutants`"
                .to_owned(),
        );
    }
    let mut command = cargo();
    command
        .args(["mutants", "--list", "--json", "-p", &o.krate])
        // The bug patterns' modules: constant in every real build, so their mutants would
        // all be equivalent.
        .args(["--exclude", "bug.rs"])
        // Test modules under a compound cfg (`cfg(all(test, not(loom)))`), which
        // cargo-mutants does not recognise as test code: inline ones (`mod tests`) and
        // those in files of their own (`policy_tests.rs`). Changing a test tests nothing.
        .args(["--exclude-re", r"\btests::"])
        .args(["--exclude", "*_tests.rs"])
        .current_dir(root);
    for glob in &o.files {
        command.args(["--file", glob]);
    }
    let out = command
        .output()
        .map_err(|e| format!("cannot run cargo mutants: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo mutants --list failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    list::parse(&String::from_utf8_lossy(&out.stdout))
}

/// That `out` holds a campaign's results, for `--report`: a directory without them (a
/// mistyped `--out`) is an error, not a summary of nothing.
fn results_on_file(out: &Path) -> Result<(), String> {
    let results = out.join("results.jsonl");
    if results.is_file() {
        Ok(())
    } else {
        Err(format!(
            "no campaign results in {} (no results.jsonl): run the campaign first, or give --report the --out it ran with",
            out.display()
        ))
    }
}

/// The results on file.
fn read_results(path: &Path) -> Vec<Record> {
    let Ok(text) = fs::read_to_string(path) else {
        return Vec::new();
    };
    // A line cut short by a killed campaign is skipped (its mutant runs again).
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// One campaign's test commands.
struct Runner<'a> {
    o: &'a Options,
    places: &'a Places,
    limit: Duration,
    /// The bug pattern built in (`cfg(alloclab_bug = ...)`), if any.
    bug: Option<&'static str>,
    /// The crates whose tests are the oracle: the campaign's crate and its companions.
    packages: Vec<String>,
}

impl Runner<'_> {
    /// `RUSTFLAGS` with `extra` and the bug pattern's cfg, and the target directory of
    /// builds with those flags (`kind`: `target` or `loom-target`): builds with other
    /// flags would invalidate each other's caches.
    fn flags(&self, extra: &str, kind: &str) -> (String, PathBuf) {
        let mut flags = std::env::var("RUSTFLAGS").unwrap_or_default();
        flags.push(' ');
        flags.push_str(extra);
        let dir = match self.bug {
            Some(bug) => {
                flags.push_str(&format!(" --cfg alloclab_bug=\"{bug}\""));
                format!("patterns-{kind}")
            }
            None => kind.to_owned(),
        };
        (flags.trim().to_owned(), self.places.out.join(dir))
    }

    fn tests(&self, no_run: bool) -> Command {
        let mut c = cargo();
        let (flags, target) = self.flags("", "target");
        // Every test binary runs, after a failure too: the layer credited depends on all
        // that failed. `--tests` takes each crate's unit tests where its library has them
        // (a preload library's does not: it would define `malloc` for itself) and its
        // integration tests.
        c.args(["test", "--no-fail-fast", "--tests"]);
        for p in &self.packages {
            c.args(["-p", p]);
        }
        c.env("RUSTFLAGS", flags)
            .env("CARGO_TARGET_DIR", target)
            .current_dir(&self.places.copy);
        if no_run {
            c.arg("--no-run");
        }
        c
    }

    fn loom(&self) -> Command {
        let mut c = cargo();
        let (flags, target) = self.flags("--cfg loom", "loom-target");
        c.args(["test", "--release", "--lib", "-p", &self.o.krate, "loom"])
            .env("RUSTFLAGS", flags)
            .env(
                "LOOM_MAX_PREEMPTIONS",
                std::env::var("LOOM_MAX_PREEMPTIONS").unwrap_or_else(|_| LOOM_PREEMPTIONS.into()),
            )
            .env("CARGO_TARGET_DIR", target)
            .current_dir(&self.places.copy);
        c
    }

    /// Builds and tests the copy as it is now; `tag` names the logs.
    fn verdict(&self, tag: &str, loom: bool) -> Result<(Outcome, Vec<String>), String> {
        let log = |phase: &str| self.places.logs.join(format!("{tag}.{phase}.log"));
        match run_logged(&mut self.tests(true), &log("build"), self.limit)? {
            Ended::Passed => {}
            Ended::Failed => return Ok((Outcome::Unviable, Vec::new())),
            Ended::TimedOut => return Ok((Outcome::TimedOut, Vec::new())),
        }
        let ended = run_logged(&mut self.tests(false), &log("test"), self.limit)?;
        if ended == Ended::TimedOut {
            return Ok((Outcome::TimedOut, Vec::new()));
        }
        let output = fs::read_to_string(log("test")).unwrap_or_default();
        let failures = Failures::read(&output);
        let mut failed = failures.tests.clone();
        failed.truncate(FAILED_TESTS_KEPT);
        if ended == Ended::Failed {
            // A failure libtest did not report (a binary that died) is a crash.
            let layer = failures.layer().unwrap_or(Layer::CrashOrHang);
            return Ok((Outcome::Caught(layer), failed));
        }
        if loom {
            match run_logged(&mut self.loom(), &log("loom"), self.limit)? {
                Ended::Passed => {}
                Ended::Failed => {
                    let output = fs::read_to_string(log("loom")).unwrap_or_default();
                    let mut failed = Failures::read(&output).tests;
                    failed.truncate(FAILED_TESTS_KEPT);
                    return Ok((Outcome::Caught(Layer::Loom), failed));
                }
                Ended::TimedOut => return Ok((Outcome::TimedOut, Vec::new())),
            }
        }
        Ok((Outcome::Missed, Vec::new()))
    }
}

/// Every `.rs` file under `dir`, concatenated (for the check that each catalogued pattern
/// is injected).
pub fn crate_source(dir: &Path) -> String {
    let mut out = String::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            out.push_str(&crate_source(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&fs::read_to_string(&path).unwrap_or_default());
        }
    }
    out
}

/// The crates whose tests join `krate`'s in the oracle: its preload library
/// (`alloclab-preload-<name>` for `alloclab-<name>`), whose tests reach the heap through the
/// C ABI — the fast paths and `MallocHeap` that only C programs call.
fn companions(root: &Path, krate: &str) -> Vec<String> {
    krate
        .strip_prefix("alloclab-")
        .map(|name| format!("alloclab-preload-{name}"))
        .filter(|preload| crate_dir(root, preload).is_ok())
        .into_iter()
        .collect()
}

/// `krate` and its companions.
fn oracle_packages(root: &Path, krate: &str) -> Vec<String> {
    std::iter::once(krate.to_owned())
        .chain(companions(root, krate))
        .collect()
}

/// The directory of the workspace crate named `krate` (its `Cargo.toml` names it).
fn crate_dir(root: &Path, krate: &str) -> Result<PathBuf, String> {
    let listed = Command::new("git")
        .args(["ls-files", "*Cargo.toml"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run git ls-files: {e}"))?;
    let wanted = format!("name = \"{krate}\"");
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| root.join(l))
        .find(|m| fs::read_to_string(m).is_ok_and(|s| s.lines().any(|l| l.trim() == wanted)))
        .and_then(|m| m.parent().map(Path::to_path_buf))
        .ok_or_else(|| format!("no crate {krate:?} in the workspace"))
}

/// Builds the copy unmutated and checks that its tests (and loom models) pass; returns how
/// long that took.
fn baseline(runner: &Runner<'_>, loom: bool) -> Result<Duration, String> {
    let started = Instant::now();
    let (baseline, failed) = runner.verdict("baseline", loom)?;
    if baseline != Outcome::Missed {
        return Err(format!(
            "the unmutated tests do not pass ({baseline:?}; failed: {failed:?}); see the logs in {}",
            runner.places.logs.display()
        ));
    }
    Ok(started.elapsed())
}

/// Runs the crate's catalogued bug patterns (`--patterns`).
fn run_patterns(o: &Options, places: &Places, dir: &Path) -> Result<(), String> {
    let catalogue = patterns::of(&o.krate);
    if catalogue.is_empty() {
        return Err(format!("the catalogue has no pattern for {}", o.krate));
    }
    let missing = patterns::missing_from(&o.krate, &crate_source(&dir.join("src")));
    if !missing.is_empty() {
        return Err(format!(
            "catalogued but not injected in {}: {}",
            dir.display(),
            missing.join(", ")
        ));
    }
    if o.list_only {
        for p in &catalogue {
            println!("{}: {} ({})", p.name, p.what, p.kind);
        }
        return Ok(());
    }
    sync_copy(&places.root, &places.copy)?;
    let loom = o.loom && crate::LOOM_CRATES.contains(&o.krate.as_str());
    let mut runner = Runner {
        o,
        places,
        limit: o.timeout.unwrap_or(Duration::from_secs(3600)),
        bug: None,
        packages: oracle_packages(&places.root, &o.krate),
    };
    let base = baseline(&runner, loom)?;
    runner.limit = o
        .timeout
        .unwrap_or_else(|| (3 * base).max(Duration::from_secs(120)));
    let path = places.out.join("patterns.jsonl");
    let mut records = read_results(&path);
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let campaign = Instant::now();
    for p in &catalogue {
        if records.iter().any(|r| r.name == p.name) {
            continue;
        }
        if campaign.elapsed() >= o.budget {
            eprintln!(
                "xtask mutants: budget spent; the remaining patterns are left for a later run"
            );
            break;
        }
        runner.bug = Some(p.name);
        let t = Instant::now();
        let (outcome, failed_tests) = runner.verdict(&format!("pattern-{}", p.name), loom)?;
        let record = Record {
            name: p.name.to_owned(),
            file: o.krate.clone(),
            function: String::new(),
            outcome,
            failed_tests,
            seconds: t.elapsed().as_secs_f64(),
        };
        writeln!(
            file,
            "{}",
            serde_json::to_string(&record).map_err(|e| e.to_string())?
        )
        .map_err(|e| e.to_string())?;
        eprintln!("{}: {}", p.name, describe(outcome));
        records.push(record);
    }
    let md = patterns_table(&o.krate, &records);
    let out = places.out.join("patterns.md");
    fs::write(&out, &md).map_err(|e| format!("{}: {e}", out.display()))?;
    print!("{md}");
    Ok(())
}

/// The patterns' results as a Markdown table, in catalogue order.
fn patterns_table(krate: &str, records: &[Record]) -> String {
    let mut md = format!(
        "# Bug patterns injected into {krate}\n\n| pattern | stands for | outcome | failed tests |\n|---|---|---|---|\n"
    );
    for p in patterns::of(krate) {
        let (outcome, tests) = match records.iter().find(|r| r.name == p.name) {
            Some(r) => (describe(r.outcome), r.failed_tests.join(", ")),
            None => ("not run".to_owned(), String::new()),
        };
        md.push_str(&format!(
            "| `{}`: {} | {} | {outcome} | {tests} |\n",
            p.name, p.what, p.kind
        ));
    }
    md
}

/// Runs the campaign `o` describes.
pub fn run(o: &Options) -> Result<(), String> {
    if o.report_only && !o.patterns {
        results_on_file(&o.out)?;
    }
    let places = Places::new(&o.out)?;
    // A crate name that is not the workspace's is an error, not an empty campaign.
    let dir = crate_dir(&places.root, &o.krate)?;
    if o.patterns {
        return run_patterns(o, &places, &dir);
    }
    let all = list_mutants(o, &places.root)?;
    if all.is_empty() {
        return Err(format!(
            "cargo-mutants generated no mutants for {} (do the --files globs match its files?)",
            o.krate
        ));
    }
    let listed: Vec<String> = all.iter().map(|m| m.name.clone()).collect();
    let shard: Vec<&Mutant> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| i % o.shard.1 == o.shard.0)
        .map(|(_, m)| m)
        .collect();
    if o.list_only {
        for m in &shard {
            println!("{}", m.name);
        }
        eprintln!(
            "{} mutants of {} ({} in shard {}/{})",
            all.len(),
            o.krate,
            shard.len(),
            o.shard.0,
            o.shard.1
        );
        return Ok(());
    }
    let mut records = read_results(&places.results);
    if o.report_only {
        return write_summary(o, &places, &listed, &records, 0);
    }
    let done: HashSet<String> = records.iter().map(|r| r.name.clone()).collect();
    let todo: Vec<&Mutant> = shard
        .into_iter()
        .filter(|m| !done.contains(&m.name))
        .collect();
    eprintln!(
        "xtask mutants: {} mutants of {}, {} to run in shard {}/{} ({} on file); copying the workspace",
        all.len(),
        o.krate,
        todo.len(),
        o.shard.0,
        o.shard.1,
        done.len()
    );
    sync_copy(&places.root, &places.copy)?;
    let mut runner = Runner {
        o,
        places: &places,
        limit: o.timeout.unwrap_or(Duration::from_secs(3600)),
        bug: None,
        packages: oracle_packages(&places.root, &o.krate),
    };
    eprintln!(
        "xtask mutants: the oracle is the tests of {}",
        runner.packages.join(", ")
    );
    let loom = o.loom && crate::LOOM_CRATES.contains(&o.krate.as_str());
    // The unmutated crate must pass, or no mutant's failure means anything.
    let base_time = baseline(&runner, loom)?;
    runner.limit = o
        .timeout
        .unwrap_or_else(|| (3 * base_time).max(Duration::from_secs(60)));
    eprintln!(
        "xtask mutants: the unmutated build and tests took {:.0} s; limit per run {:.0} s; loom models {}",
        base_time.as_secs_f64(),
        runner.limit.as_secs_f64(),
        if loom { "on" } else { "off" }
    );
    let mut results = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&places.results)
        .map_err(|e| format!("cannot open {}: {e}", places.results.display()))?;
    let campaign = Instant::now();
    let mut ran = 0;
    for (n, m) in todo.iter().enumerate() {
        if campaign.elapsed() >= o.budget {
            eprintln!(
                "xtask mutants: budget spent; {} mutants left for a later run",
                todo.len() - n
            );
            break;
        }
        let path = places.copy.join(&m.file);
        let source = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let Some(mutated) = m.apply(&source) else {
            return Err(format!(
                "{}: its span is not in {} (listed from another version?)",
                m.name, m.file
            ));
        };
        fs::write(&path, mutated).map_err(|e| format!("{}: {e}", path.display()))?;
        let t = Instant::now();
        let verdict = runner.verdict(&format!("mutant-{n}"), loom);
        // Restored whatever happened.
        fs::write(&path, &source).map_err(|e| format!("{}: {e}", path.display()))?;
        let (outcome, failed_tests) = verdict?;
        let record = Record {
            name: m.name.clone(),
            file: m.file.clone(),
            function: m.function().to_owned(),
            outcome,
            failed_tests,
            seconds: t.elapsed().as_secs_f64(),
        };
        let line = serde_json::to_string(&record).map_err(|e| e.to_string())?;
        writeln!(results, "{line}").map_err(|e| e.to_string())?;
        eprintln!(
            "[{}/{} {:.0} min] {} {}",
            n + 1,
            todo.len(),
            campaign.elapsed().as_secs_f64() / 60.0,
            describe(outcome),
            m.name
        );
        records.push(record);
        ran += 1;
    }
    write_summary(o, &places, &listed, &records, ran)
}

/// Writes `summary.json` and `summary.md` from `records`, and prints the headline.
fn write_summary(
    o: &Options,
    places: &Places,
    listed: &[String],
    records: &[Record],
    ran: usize,
) -> Result<(), String> {
    let summary = Summary::new(&o.krate, listed, records);
    let out = places.results.with_file_name("summary.json");
    let json = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
    fs::write(&out, json + "\n").map_err(|e| format!("{}: {e}", out.display()))?;
    let md = summary.markdown();
    fs::write(out.with_extension("md"), &md).map_err(|e| e.to_string())?;
    eprintln!(
        "xtask mutants: ran {ran}; summary in {} and {}",
        out.display(),
        out.with_extension("md").display()
    );
    println!("{}", md.lines().nth(2).unwrap_or_default());
    Ok(())
}

fn describe(outcome: Outcome) -> String {
    match outcome {
        Outcome::Caught(layer) => format!("caught ({})", layer.name()),
        Outcome::Missed => "MISSED".to_owned(),
        Outcome::TimedOut => "timed out".to_owned(),
        Outcome::Unviable => "unviable".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
    fn ended(pid: u32) -> bool {
        fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    }

    #[test]
    fn a_command_past_its_limit_is_killed_with_everything_it_started() {
        let dir = std::env::temp_dir().join(format!("xtask-run-logged-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("pid");
        // A child that outlives the shell: only a kill of the whole group ends it.
        let script = format!("sleep 60 & echo $! > {}; exec sleep 2", pid_file.display());
        let ended_as = run_logged(
            Command::new("sh").args(["-c", &script]),
            &dir.join("log"),
            Duration::from_millis(500),
        )
        .unwrap();
        let pid: u32 = fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SIGKILL to the group is delivered asynchronously: the orphaned child may still be
        // on its way out when the shell has been reaped. Give it up to five seconds (a
        // wait for the event, not a claim about its speed).
        let deadline = Instant::now() + Duration::from_secs(5);
        let gone = loop {
            if ended(pid) {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(ended_as, Ended::TimedOut);
        assert!(gone, "the command's child {pid} survived the limit");
    }

    #[test]
    fn a_command_within_its_limit_passes_or_fails_as_it_exits() {
        let dir = std::env::temp_dir().join(format!("xtask-run-exit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("log");
        let limit = Duration::from_secs(60);
        let passed = run_logged(
            Command::new("sh").args(["-c", "echo out; echo err >&2"]),
            &log,
            limit,
        );
        let text = fs::read_to_string(&log).unwrap_or_default();
        let failed = run_logged(Command::new("sh").args(["-c", "exit 3"]), &log, limit);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(passed, Ok(Ended::Passed));
        assert_eq!(failed, Ok(Ended::Failed));
        assert!(text.contains("out") && text.contains("err"), "{text:?}");
    }

    #[test]
    fn a_report_of_a_directory_without_results_is_an_error_that_creates_nothing() {
        let dir = std::env::temp_dir().join(format!("xtask-report-{}", std::process::id()));
        let err = results_on_file(&dir).unwrap_err();
        assert!(err.contains("no campaign results"), "{err}");
        assert!(!dir.exists());
        fs::create_dir_all(&dir).unwrap();
        assert!(results_on_file(&dir).is_err());
        fs::write(dir.join("results.jsonl"), "").unwrap();
        assert_eq!(results_on_file(&dir), Ok(()));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_heap_with_a_preload_library_has_its_tests_in_the_oracle() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        assert_eq!(
            oracle_packages(root, "alloclab-wfspan"),
            ["alloclab-wfspan", "alloclab-preload-wfspan"]
        );
        assert_eq!(
            oracle_packages(root, "alloclab-randomized"),
            ["alloclab-randomized", "alloclab-preload-randomized"]
        );
        assert_eq!(oracle_packages(root, "alloclab-pmem"), ["alloclab-pmem"]);
    }
}
