//! `alloclab`: runs workloads against allocators and reports the comparison.
//!
//! ```text
//! alloclab list
//! alloclab run <workload> --alloc a,b,... [--threads N,...] [--scale S] [--runs R] [--json FILE]
//! alloclab suite [--only SUITE,...] [--alloc a,b,...] [--out DIR] [--readme README.md]
//! alloclab exec --alloc a,b,... [--runs R] [--timeout S] [--check-output] [--json FILE] -- CMD ARGS...
//! alloclab percall --alloc a,b,... [--ops LIST] [--size BYTES] [--iterations N] [--instructions] [--json FILE]
//! ```

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use alloclab_harness::peers::{self, AllocatorInfo, Origin};
use alloclab_harness::results::{
    FORMAT_NAME, FORMAT_VERSION, Header, Parameters, ResultsFile, SuiteNote,
};
use alloclab_harness::runner::{self, Plan, WorkerRequest};
use alloclab_harness::workloads::layouts::LAYOUT;
use alloclab_harness::workloads::realtime::Sched;
use alloclab_harness::workloads::{self, Params, SUITES, Scale, WorkloadInfo};
use alloclab_harness::{machine, measure, report};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(
    name = "alloclab",
    version,
    about = "Runs allocator workloads side by side and reports the comparison",
    long_about = "Runs allocator workloads side by side and reports the comparison.\n\n\
        Every measurement runs in a fresh worker process; figures are the median (and \
        min-max) over --runs runs, and ratios are against the first allocator named."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Lists allocators, workloads, and which allocator fits which workload.
    List,
    /// Runs one workload against the allocators named and prints a table.
    Run(RunArgs),
    /// Runs every suite (or those named) and writes a report directory.
    Suite(SuiteArgs),
    /// Runs your own command under each heap named (through LD_PRELOAD) and compares wall
    /// time, CPU time, peak RSS and exit status.
    #[command(
        long_about = "Runs your own command under each heap named and compares them.\n\n\
            alloclab's heaps (wfspan, randomized) and the peers' shared libraries \
            (libmimalloc, libjemalloc, libtcmalloc, libhardened) are put in front of the C library with \
            LD_PRELOAD; `system` runs the command with nothing preloaded. Every run is a \
            fresh process, runs are interleaved across heaps, and wall time, user+sys CPU \
            time and peak RSS come from wait4. The command's output is kept, not shown; its \
            standard input is /dev/null. A run whose exit status (or, with --check-output, \
            whose standard output) differs from the first heap's is flagged, and the exit \
            status is then non-zero.\n\n\
            Example: alloclab exec --alloc system,wfspan,libmimalloc -- python3 -c 'print(sum(range(10**7)))'"
    )]
    Exec(ExecArgs),
    /// Measures what one allocator call costs (malloc, free, calloc, realloc, posix_memalign,
    /// malloc_usable_size, C++ new/delete), through the C ABI under LD_PRELOAD and in-process.
    #[command(
        long_about = "Measures what one allocator call costs, through the C ABI and in-process.\n\n\
            C ABI: a C++ driver (compiled with c++, or $CXX) calls the op in batches of 1000 \
            blocks under the heap's library, preloaded as `alloclab exec` does (system: \
            nothing preloaded). In-process: the same batches in Rust through alloclab's \
            allocator trait, for the heaps compiled in. Only the op is timed (its batch's \
            setup and teardown are not); ns/call is the median of 3 runs, each a fresh \
            process, interleaved across heaps. With --instructions and valgrind, each row \
            also runs under callgrind, collecting inside the timed function alone; the \
            floor (the same loop calling an empty function) is subtracted from instr/call.\n\n\
            Ops: malloc, free, calloc, realloc-same, realloc-grow, posix-memalign, \
            usable-size, new, delete, delete-sized, new-aligned, new-nothrow.\n\n\
            Example: alloclab percall --alloc system,wfspan,libmimalloc --ops malloc,free --instructions"
    )]
    Percall(PercallArgs),
    /// Writes report.md, the charts and (with --readme) the README's results section again
    /// from a results.json, measuring nothing: for a report changed after the run.
    Report(ReportArgs),
    /// Internal: measures one run in this process and prints its samples as JSON.
    #[command(name = "__worker", hide = true)]
    Worker(WorkerArgs),
    /// Internal: one in-process percall measurement; prints its line.
    #[command(name = "__percall", hide = true)]
    PercallWorker(PercallWorkerArgs),
}

#[derive(Args)]
struct Common {
    /// Worker threads for every workload; a comma-separated list measures each [default:
    /// each suite's own: cpu at the number of cores, realtime at 1x, 2x and 4x that, pmem
    /// and storage at 1 and 2; the hls and training simulations and the gpu suite always run
    /// at 1].
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: Vec<u32>,
    /// Amount of work per run: tiny (smoke test), small, medium (4x) or large (16x).
    #[arg(long, default_value = "small")]
    scale: Scale,
    /// Runs per measurement, each in a fresh process [default: 5; the storage suite 3, its
    /// heaps interleaved in one process per run; the training suite 1, it is deterministic; the
    /// programs suite 5, the default too: a whole program takes well under a second, and a
    /// slow spell of a shared machine can cover a run of one heap and not of the other, and
    /// its C benchmarks 9, which take tens of milliseconds, where a pause of the machine
    /// moves a run by tens of percent; the
    /// realtime suite 3, each run holds millions of timed calls, and its progress workload
    /// 1, a run holds the 200 freezes its check is stated for; the security, pmem, gpu and
    /// training-replay suites 3, their figures move little from run to run].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: Option<u32>,
    /// Seed of every workload's random choices (all allocators see the same requests).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Scheduling policy of the realtime suite's threads: other (the default time-sharing
    /// policy, under which threads beyond the core count take turns) or fifo (SCHED_FIFO at
    /// priority 1, as real-time programs run; falls back to the default policy, with a note,
    /// where the process may not use it: it needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO of
    /// at least 1).
    #[arg(long, default_value = "other")]
    sched: Sched,
}

#[derive(Args)]
struct RunArgs {
    /// Workload name (see `alloclab list`).
    workload: String,
    /// Allocators to compare, comma-separated; ratios are against the first.
    #[arg(long, value_delimiter = ',', required = true)]
    alloc: Vec<String>,
    #[command(flatten)]
    common: Common,
    /// Also write the results in the results.json format to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct SuiteArgs {
    /// Suites to run, comma-separated [default: all].
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Allocators to compare, comma-separated [default: all that fit each workload].
    #[arg(long, value_delimiter = ',')]
    alloc: Vec<String>,
    #[command(flatten)]
    common: Common,
    /// Directory for report.md, results.json and the SVG charts.
    #[arg(long, default_value = DEFAULT_REPORT_DIR)]
    out: PathBuf,
    /// Also replace the results section of this README (between its alloclab:results markers).
    #[arg(long, value_name = "FILE")]
    readme: Option<PathBuf>,
}

#[derive(Args)]
struct ExecArgs {
    /// Heaps to run the command on, comma-separated; ratios are against the first (see
    /// `alloclab list`: system, wfspan, randomized, libmimalloc, libjemalloc, libtcmalloc,
    /// libhardened).
    #[arg(long, value_delimiter = ',', required = true)]
    alloc: Vec<String>,
    /// Runs per heap, each in a fresh process.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    runs: u32,
    /// Seconds one run may take before it is killed (with everything it started).
    #[arg(long, default_value_t = 300.0, value_parser = parse_timeout)]
    timeout: f64,
    /// Also flag a run whose standard output differs from the first heap's first run.
    #[arg(long)]
    check_output: bool,
    /// Also write every run's figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<std::ffi::OsString>,
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 86_400.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number of seconds in (0, 86400]")),
    }
}

#[derive(Args)]
struct PercallArgs {
    /// Heaps to measure, comma-separated: those a program can run on (system, wfspan,
    /// randomized, libmimalloc, libjemalloc, libtcmalloc, libhardened) get a C ABI row, those compiled
    /// in (system, wfspan, randomized, mimalloc, jemalloc, rlsf, wf_alloc) an in-process row.
    #[arg(long, value_delimiter = ',', required = true)]
    alloc: Vec<String>,
    /// Ops to measure, comma-separated [default: all].
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// Block size in bytes (1 to 1 GiB).
    #[arg(long, value_name = "BYTES", default_value_t = alloclab_harness::percall::DEFAULT_SIZE,
          value_parser = alloclab_harness::percall::parse_size)]
    size: usize,
    /// Calls per op and run.
    #[arg(long, value_name = "N", default_value_t = alloclab_harness::percall::DEFAULT_ITERATIONS,
          value_parser = alloclab_harness::percall::parse_iterations)]
    iterations: u64,
    /// Also count instructions per call under valgrind's callgrind (20,000 calls per row).
    #[arg(long)]
    instructions: bool,
    /// Also write every row's figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Args)]
struct PercallWorkerArgs {
    #[arg(long)]
    alloc: String,
    #[arg(long)]
    op: String,
    #[arg(long, value_parser = alloclab_harness::percall::parse_size)]
    size: usize,
    #[arg(long, value_parser = alloclab_harness::percall::parse_iterations)]
    iterations: u64,
}

#[derive(Args)]
struct ReportArgs {
    /// A results.json written by `alloclab suite` or `alloclab run --json`.
    results: PathBuf,
    /// Directory for report.md, results.json and the SVG charts.
    #[arg(long, default_value = DEFAULT_REPORT_DIR)]
    out: PathBuf,
    /// Also replace the results section of this README (between its alloclab:results markers).
    #[arg(long, value_name = "FILE")]
    readme: Option<PathBuf>,
}

#[derive(Args)]
struct WorkerArgs {
    #[arg(long)]
    workload: String,
    #[arg(long)]
    alloc: String,
    #[arg(long)]
    threads: usize,
    #[arg(long)]
    scale: Scale,
    #[arg(long)]
    seed: u64,
    #[arg(long, default_value = "other")]
    sched: Sched,
}

fn main() -> ExitCode {
    // Output piped into a program that stops reading (`alloclab list | head`) ends the
    // process quietly, as it does for other command-line tools, instead of panicking in
    // `print!` (Rust ignores SIGPIPE by default). Workers run this same `main`; the one
    // pipe they write, their results to the parent, stays open until they exit.
    // SAFETY: no other thread exists yet, and SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let outcome = match cli.command {
        Cmd::List => {
            print_list();
            Ok(())
        }
        Cmd::Run(args) => run(args),
        Cmd::Suite(args) => suite(args),
        Cmd::Report(args) => rewrite_report(args),
        Cmd::Exec(args) => alloclab_harness::exec::exec(&alloclab_harness::exec::Request {
            allocators: args.alloc,
            runs: args.runs,
            timeout: std::time::Duration::from_secs_f64(args.timeout),
            check_output: args.check_output,
            json: args.json,
            command: args.command,
        }),
        Cmd::Worker(args) => worker(args),
        Cmd::Percall(args) => {
            alloclab_harness::percall::percall(&alloclab_harness::percall::Request {
                allocators: args.alloc,
                ops: args.ops,
                size: args.size,
                iterations: args.iterations,
                instructions: args.instructions,
                json: args.json,
            })
        }
        Cmd::PercallWorker(a) => {
            alloclab_harness::percall::worker(&a.alloc, &a.op, a.size, a.iterations)
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn print_list() {
    println!("Allocators:");
    for a in peers::ALLOCATORS {
        let origin = match a.origin {
            Origin::Alloclab => "alloclab",
            Origin::Peer => "peer",
        };
        let host = a.fits(peers::Capability::HostHeap);
        let program = a.fits(peers::Capability::Program);
        let kind = match (host, program) {
            (true, true) => "; in-process and in programs",
            (true, false) => "; in-process only",
            (false, true) => "; in programs only",
            (false, false) => "",
        };
        println!("  {:<13} [{origin}{kind}] {}", a.name, a.description);
        if let Some(reason) = peers::unavailable(a.name) {
            println!("  {:<13} unavailable: {reason}", "");
        }
    }
    println!(
        "\nIn-process: compiled into alloclab and called through its allocator trait (the cpu, \
         realtime and security suites). In programs: put in front of the C library with \
         LD_PRELOAD (alloclab's preload libraries, the peers' shared libraries lib*) or, for \
         system, nothing preloaded (the programs suite and `alloclab exec`)."
    );
    match peers::libraries::install_line_for_missing() {
        Some(line) => println!("Missing shared libraries of peers: {line}"),
        None => println!("Every peer's shared library is installed."),
    }
    println!("\nWorkloads:");
    for suite in SUITES {
        for w in workloads::all().iter().filter(|w| w.suite == *suite) {
            println!("  {:<14} [{}] {}", w.name, w.suite, w.description);
        }
    }
    println!("\nWhich allocator fits which workload:");
    let width = peers::ALLOCATORS
        .iter()
        .map(|a| a.name.len())
        .max()
        .unwrap_or(0)
        + 2;
    print!("  {:<14}", "");
    for a in peers::ALLOCATORS {
        print!("{:<width$}", a.name);
    }
    println!();
    for w in workloads::all() {
        print!("  {:<14}", w.name);
        for a in peers::ALLOCATORS {
            print!("{:<width$}", if a.fits(w.requires) { "yes" } else { "-" });
        }
        println!();
    }
}

/// The known name closest to `name` (edit distance at most 2), as a "did you mean" hint.
fn suggestion(name: &str, known: &[&str]) -> String {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut diagonal = row[0];
            row[0] = i + 1;
            for (j, &cb) in b.iter().enumerate() {
                let substitution = diagonal + usize::from(ca != cb);
                diagonal = row[j + 1];
                row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
            }
        }
        row[b.len()]
    }
    known
        .iter()
        .map(|k| (distance(name, k), *k))
        .filter(|&(d, _)| d <= 2)
        .min()
        .map_or(String::new(), |(_, k)| format!("; did you mean '{k}'?"))
}

/// Resolves allocator names, with a one-line error naming the unknown one and the known.
fn resolve_allocators(names: &[String]) -> Result<Vec<&'static AllocatorInfo>, String> {
    let mut out: Vec<&'static AllocatorInfo> = Vec::new();
    for name in names {
        let info = peers::find(name).ok_or_else(|| {
            let known: Vec<&str> = peers::ALLOCATORS.iter().map(|a| a.name).collect();
            format!(
                "unknown allocator '{name}' (known: {}){}",
                known.join(", "),
                suggestion(name, &known)
            )
        })?;
        if out.iter().any(|a| a.name == info.name) {
            return Err(format!("allocator '{name}' is named twice"));
        }
        out.push(info);
    }
    Ok(out)
}

/// Where `suite` and `report` write the report unless told otherwise: under cargo's build
/// directory, out of the source tree, so that generated files are never committed by
/// accident (and `cargo clean` removes them).
const DEFAULT_REPORT_DIR: &str = "target/alloclab-report";

/// Suites (or single workloads) that run a different number of times when `--runs` is not
/// given ([`workloads::default_runs_per_suite`]); none when it is.
fn runs_per_suite(common: &Common) -> Vec<(&'static str, u32)> {
    if common.runs.is_some() {
        return Vec::new();
    }
    workloads::default_runs_per_suite()
}

/// The thread counts given on the command line; `None` lets each workload use its suite's
/// default for this machine.
fn thread_counts(common: &Common) -> Option<Vec<usize>> {
    (!common.threads.is_empty()).then(|| common.threads.iter().map(|&t| t as usize).collect())
}

fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} runs  {msg}")
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    bar
}

fn measure_plan(plan: &Plan) -> Result<runner::Outcome, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    if plan
        .workloads
        .iter()
        .any(|w| w.suite == workloads::programs::SUITE)
    {
        // The programs run on preload libraries and compiled benchmarks: build them once,
        // before the first run, so that a build error is one message here.
        let names: Vec<&str> = plan.allocators.iter().map(|a| a.name).collect();
        peers::libraries::ensure_built(&names)?;
        workloads::programs::prepare()?;
    }
    if plan.sched == Sched::Fifo
        && plan
            .workloads
            .iter()
            .any(|w| w.name == workloads::realtime::RealtimeWorkload::Latency.name())
        && let Some(why) = workloads::realtime::fifo_refusal()
    {
        eprintln!(
            "note: `latency` runs under the default policy, and its tails above the core \
             count are mostly the scheduler's time slices: {why}"
        );
    }
    let bar = progress_bar(plan.total_runs());
    let records = runner::execute(plan, &exe, |job, run| {
        bar.set_message(format!(
            "{}/{} {} t={} run {run}/{}",
            job.workload.suite,
            job.workload.name,
            job.allocator.name,
            job.threads,
            plan.runs_for(job.workload)
        ));
        bar.inc(1);
    });
    bar.finish_and_clear();
    let outcome = records.map_err(|e| e.to_string())?;
    if outcome.time_by_suite.len() > 1 {
        let spent: Vec<String> = outcome
            .time_by_suite
            .iter()
            .map(|(suite, d)| format!("{suite} {:.0} s", d.as_secs_f64()))
            .collect();
        eprintln!("time by suite: {}", spent.join(", "));
    }
    for f in &outcome.failures {
        eprintln!(
            "warning: {}/{} on {} with {} threads failed in run {}: {}",
            f.suite, f.workload, f.allocator, f.threads, f.run, f.error
        );
    }
    Ok(outcome)
}

/// The error to exit with when some measurements failed (after the output was written).
fn failures_error(results: &ResultsFile) -> Result<(), String> {
    match results.failures.len() {
        0 => Ok(()),
        n => Err(format!(
            "{n} measurement{} failed (listed above and in the results)",
            if n == 1 { "" } else { "s" }
        )),
    }
}

/// The results of `plan`; `(commit, commit_dirty)` as [`machine::commit`] read them before
/// the measurement began.
fn results_file(
    plan: &Plan,
    suites: Vec<String>,
    outcome: runner::Outcome,
    (commit, commit_dirty): (String, bool),
) -> ResultsFile {
    let mut notes = Vec::new();
    if suites.iter().any(|s| s == "gpu") {
        notes.push(SuiteNote {
            suite: "gpu".to_owned(),
            text: workloads::gpu::device_note(),
        });
    }
    if suites.iter().any(|s| s == workloads::realtime::SUITE)
        && let Some(why) = workloads::realtime::fifo_refusal()
    {
        notes.push(SuiteNote {
            suite: workloads::realtime::SUITE.to_owned(),
            text: format!(
                "`latency-fifo` did not run: {why}. The other workloads ran under the default \
                 time-sharing policy."
            ),
        });
    }
    if suites.iter().any(|s| s == workloads::training::SUITE) {
        notes.push(SuiteNote {
            suite: workloads::training::SUITE.to_owned(),
            text: workloads::training::cost_model_note(),
        });
    }
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    args.insert(0, "alloclab".to_owned());
    ResultsFile {
        format: FORMAT_NAME.to_owned(),
        version: FORMAT_VERSION,
        header: Header {
            machine: machine::describe(),
            commit,
            commit_dirty,
            created_unix_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            command: args.join(" "),
            parameters: Parameters {
                scale: plan.scale.as_str().to_owned(),
                // The most runs any job had (the suites' own counts differ).
                runs: plan
                    .jobs()
                    .iter()
                    .map(|j| plan.runs_for(j.workload))
                    .max()
                    .unwrap_or(plan.runs),
                threads: plan.all_thread_counts(),
                seed: plan.seed,
                suites,
                allocators: plan.allocators.iter().map(|a| a.name.to_owned()).collect(),
            },
            timer_overhead_ns: measure::timer_overhead_ns(),
        },
        records: outcome.records,
        failures: outcome.failures,
        notes,
    }
}

fn run(args: RunArgs) -> Result<(), String> {
    let workload: &'static WorkloadInfo = workloads::find(&args.workload).ok_or_else(|| {
        let known: Vec<&str> = workloads::all().iter().map(|w| w.name).collect();
        format!(
            "unknown workload '{}' (known: {}){}",
            args.workload,
            known.join(", "),
            suggestion(&args.workload, &known)
        )
    })?;
    if let Some(reason) = workloads::unavailable(workload) {
        return Err(format!("workload '{}' cannot run: {reason}", workload.name));
    }
    let allocators = resolve_allocators(&args.alloc)?;
    if let Some(unfit) = allocators.iter().find(|a| !a.fits(workload.requires)) {
        return Err(format!(
            "allocator '{}' does not fit workload '{}' (it needs a {})",
            unfit.name, workload.name, workload.requires
        ));
    }
    if let Some(path) = &args.json {
        alloclab_harness::ensure_writable_file(path)?;
    }
    let plan = Plan {
        workloads: vec![workload],
        allocators,
        threads: thread_counts(&args.common),
        scale: args.common.scale,
        runs: args.common.runs.unwrap_or(workloads::DEFAULT_RUNS),
        runs_per_suite: runs_per_suite(&args.common),
        seed: args.common.seed,
        sched: args.common.sched,
    };
    // The tree as it is when the measurement starts: edits during a long run are not in it.
    let commit = machine::commit();
    let records = measure_plan(&plan)?;
    let results = results_file(&plan, vec![workload.suite.to_owned()], records, commit);
    print!("{}", terminal_table(&results));
    if let Some(path) = &args.json {
        report::write_results_json(path, &results).map_err(|e| e.to_string())?;
        println!("wrote {}", path.display());
    }
    failures_error(&results)
}

fn suite(args: SuiteArgs) -> Result<(), String> {
    let suites: Vec<&str> = if args.only.is_empty() {
        SUITES.to_vec()
    } else {
        let mut chosen = Vec::new();
        for name in &args.only {
            let s = SUITES
                .iter()
                .find(|s| *s == name)
                .ok_or_else(|| format!("unknown suite '{name}' (known: {})", SUITES.join(", ")))?;
            chosen.push(*s);
        }
        chosen
    };
    let mut skipped_engines: Vec<String> = Vec::new();
    let scale = args.common.scale;
    if suites.contains(&workloads::storage::report::SUITE)
        && workloads::storage::WORKLOADS
            .iter()
            .any(|w| !workloads::storage::in_suite_at(w.name, scale))
    {
        eprintln!(
            "note: storage: mixes a, b, e, var and the uniform-key workloads run from --scale \
             medium on (the checks decide on c, d, f, g, h)"
        );
    }
    let chosen_workloads: Vec<&'static WorkloadInfo> = workloads::all()
        .iter()
        .filter(|w| suites.contains(&w.suite))
        .filter(|w| workloads::storage::in_suite_at(w.name, scale))
        .filter(|w| match workloads::unavailable(w) {
            // A program not installed, or a storage engine not built in this branch: its
            // workloads are left out, each reason said once.
            Some(reason) => {
                if !skipped_engines.contains(&reason) {
                    eprintln!("note: skipping {} workloads: {reason}", w.suite);
                    skipped_engines.push(reason);
                }
                false
            }
            None => true,
        })
        .collect();
    if chosen_workloads.is_empty() {
        return Err(format!(
            "no workload of the suites chosen ({}) can run in this build",
            suites.join(", ")
        ));
    }
    let allocators = if args.alloc.is_empty() {
        // Allocators that cannot run here (a missing library) are left out with a note; named
        // with --alloc, they run and their failure is reported like any other.
        peers::ALLOCATORS
            .iter()
            .filter(|a| chosen_workloads.iter().any(|w| a.fits(w.requires)))
            .filter(|a| match peers::unavailable(a.name) {
                Some(reason) => {
                    eprintln!("note: skipping allocator '{}': {reason}", a.name);
                    false
                }
                None => true,
            })
            .collect()
    } else {
        let named = resolve_allocators(&args.alloc)?;
        if let Some(unfit) = named
            .iter()
            .find(|a| !chosen_workloads.iter().any(|w| a.fits(w.requires)))
        {
            return Err(format!(
                "allocator '{}' fits no workload of the suites chosen ({})",
                unfit.name,
                suites.join(", ")
            ));
        }
        named
    };
    alloclab_harness::ensure_writable_dir(&args.out)?;
    if let Some(readme) = &args.readme {
        alloclab_harness::ensure_writable_file(readme)?;
    }
    let plan = Plan {
        workloads: chosen_workloads,
        allocators,
        threads: thread_counts(&args.common),
        scale: args.common.scale,
        runs: args.common.runs.unwrap_or(workloads::DEFAULT_RUNS),
        runs_per_suite: runs_per_suite(&args.common),
        seed: args.common.seed,
        sched: args.common.sched,
    };
    // The tree as it is when the measurement starts: edits during a long run are not in it.
    let commit = machine::commit();
    let records = measure_plan(&plan)?;
    let results = results_file(
        &plan,
        suites.iter().map(|s| (*s).to_owned()).collect(),
        records,
        commit,
    );
    print!("{}", terminal_table(&results));
    write_outputs(&results, &args.out, args.readme.as_deref())?;
    failures_error(&results)
}

/// `alloclab report`: the report of an earlier run, written again by this build.
fn rewrite_report(args: ReportArgs) -> Result<(), String> {
    let results = ResultsFile::read(&args.results)?;
    print!("{}", alloclab_harness::targets::terminal_text(&results));
    write_outputs(&results, &args.out, args.readme.as_deref())
}

/// Writes the report directory and, if asked, the README's results section.
fn write_outputs(results: &ResultsFile, out: &Path, readme: Option<&Path>) -> Result<(), String> {
    let files = report::write_report(out, results, &LAYOUT).map_err(|e| e.to_string())?;
    println!("wrote {} files to {}", files.paths.len(), out.display());
    if let Some(readme) = readme {
        report::update_readme(readme, &report::render_readme_section(results, &LAYOUT))
            .map_err(|e| e.to_string())?;
        println!("updated the results section of {}", readme.display());
    }
    Ok(())
}

/// Names an allocator whose workers fail on purpose, so tests can check that a failed
/// measurement is reported and the rest of the plan goes on.
const INJECT_FAILURE_ENV: &str = "ALLOCLAB_INJECT_WORKER_FAILURE";

fn worker(args: WorkerArgs) -> Result<(), String> {
    let injected = std::env::var(INJECT_FAILURE_ENV).ok();
    let together = workloads::find(&args.workload).is_some_and(|w| w.heaps_together());
    if !together && injected.as_deref() == Some(args.alloc.as_str()) {
        return Err(format!("failure injected by {INJECT_FAILURE_ENV}"));
    }
    // SAFETY: the worker is still single-threaded here (nothing has spawned a thread, and
    // nothing reads the environment concurrently), so setting libpmem's variables before the
    // workload loads libpmem cannot race.
    unsafe { workloads::pmem::prepare_process(&args.workload) }?;
    if let Some(realtime) = workloads::realtime::RealtimeWorkload::from_name(&args.workload) {
        // Threads spawned from now on inherit the policy. Refused: the run goes on under the
        // default policy, and its `sched_fifo` figure says so.
        let _ = realtime.policy(args.sched).enter();
    }
    let request = WorkerRequest {
        workload: args.workload,
        allocator: args.alloc,
        params: Params {
            threads: args.threads.max(1),
            scale: args.scale,
            seed: args.seed,
        },
    };
    let out = if together {
        let mut heaps = runner::worker_together(&request)?;
        // Heaps measured together fail one by one: the failure replaces the heap's samples.
        for (name, outcome) in &mut heaps {
            if injected.as_deref() == Some(name.as_str()) {
                *outcome = Err(format!("failure injected by {INJECT_FAILURE_ENV}"));
            }
        }
        serde_json::to_string(&heaps)
    } else {
        serde_json::to_string(&runner::worker_main(&request)?)
    };
    println!("{}", out.map_err(|e| e.to_string())?);
    Ok(())
}

/// A plain-text table per workload: median (min-max) of each metric, and the ratio of the
/// median to the first allocator's at the same thread count; a workload with many metrics
/// gets one table per metric family, as in `report.md`. The clock-read cost and the timer
/// overhead are summed up at the end.
fn terminal_table(results: &ResultsFile) -> String {
    use std::fmt::Write as _;
    let params = &results.header.parameters;
    let baseline = params.allocators.first().map_or("", String::as_str);
    let mut out = String::new();
    let mut workloads_seen: Vec<(&str, &str)> = Vec::new();
    for r in &results.records {
        if !workloads_seen.contains(&(r.suite.as_str(), r.workload.as_str())) {
            workloads_seen.push((&r.suite, &r.workload));
        }
    }
    let cell = |r: &alloclab_harness::results::Record| {
        format!(
            "{} ({}-{})",
            report::fmt_value(r.median),
            report::fmt_value(r.min),
            report::fmt_value(r.max)
        )
    };
    for &(suite, workload) in &workloads_seen {
        let own = LAYOUT.of(suite);
        // A summary of its own, below.
        if own.terminal.is_some() {
            continue;
        }
        let rows: Vec<_> = results
            .records
            .iter()
            .filter(|r| r.suite == suite && r.workload == workload)
            .collect();
        // The first allocator asked for that ran this workload.
        let baseline = params
            .allocators
            .iter()
            .map(String::as_str)
            .find(|a| rows.iter().any(|r| r.allocator == *a))
            .unwrap_or(baseline);
        let mut metrics: Vec<(&str, &str)> = Vec::new();
        for r in &rows {
            if !report::QUALIFIER_METRICS.contains(&r.metric.as_str())
                && report::sweep_point(&r.metric).is_none()
                && !metrics.iter().any(|(m, _)| *m == r.metric)
            {
                metrics.push((&r.metric, &r.unit));
            }
        }
        metrics.sort_by_key(|(m, _)| {
            report::METRIC_ORDER
                .iter()
                .position(|o| o == m)
                .unwrap_or(report::METRIC_ORDER.len())
        });
        // The runs this workload had: a suite's own default (`--runs` not given) may differ
        // from the plan's.
        let runs = rows.iter().map(|r| r.runs).max().unwrap_or(params.runs);
        if let report::Shape::Transposed { .. } = own.shape {
            let _ = writeln!(
                out,
                "\n{suite}/{workload}: scale {}, {runs} run(s); median (min-max where runs differ)",
                params.scale
            );
            out.push_str(&report::transposed_text(results, &LAYOUT, suite, workload));
            continue;
        }
        let _ = writeln!(
            out,
            "\n{suite}/{workload}: scale {}, {runs} run(s); median (min-max), ratio to {baseline}",
            params.scale
        );
        let mut keys: Vec<(&str, usize)> = Vec::new();
        for r in &rows {
            if !keys.contains(&(r.allocator.as_str(), r.threads)) {
                keys.push((&r.allocator, r.threads));
            }
        }
        for (title, metrics) in report::split_into_tables(metrics, |(m, _)| m) {
            if let Some(title) = title {
                let _ = writeln!(out, "{title}");
            }
            let _ = write!(out, "{:<10} {:>7}", "allocator", "threads");
            for (m, u) in &metrics {
                let _ = write!(out, "  {:>24} {:>7}", format!("{m} [{u}]"), "ratio");
            }
            out.push('\n');
            for &(allocator, threads) in &keys {
                let _ = write!(out, "{allocator:<10} {threads:>7}");
                for (m, _) in &metrics {
                    let find = |a: &str| {
                        rows.iter()
                            .find(|r| r.allocator == a && r.threads == threads && r.metric == *m)
                    };
                    match find(allocator) {
                        Some(r) => {
                            let ratio = find(baseline)
                                .filter(|b| b.median != 0.0)
                                .map_or("-".to_owned(), |b| format!("{:.2}", r.median / b.median));
                            let _ = write!(out, "  {:>24} {ratio:>7}", cell(r));
                        }
                        None => {
                            let _ = write!(out, "  {:>24} {:>7}", "-", "-");
                        }
                    }
                }
                out.push('\n');
            }
        }
    }
    let mut suites_seen: Vec<&str> = Vec::new();
    for &(suite, _) in &workloads_seen {
        if !suites_seen.contains(&suite) {
            suites_seen.push(suite);
        }
    }
    for suite in &suites_seen {
        if let Some(summary) = LAYOUT.of(suite).terminal {
            out.push_str(&summary(results));
        }
    }
    // A suite that writes its own report section states its clock's cost there.
    let own_section = |suite: &str| LAYOUT.of(suite).report_section.is_some();
    out.push_str(&alloclab_harness::targets::terminal_text(results));
    // Workloads that time each call report the clock's cost instead of a small overhead.
    let single_operations: Vec<(&str, &str)> = workloads_seen
        .iter()
        .copied()
        .filter(|(s, _)| !own_section(s))
        .filter(|(s, w)| {
            results
                .records
                .iter()
                .any(|r| r.suite == *s && r.workload == *w && r.metric == report::CLOCK_READ_METRIC)
        })
        .collect();
    let worst = results
        .records
        .iter()
        .filter(|r| r.metric == report::TIMER_OVERHEAD_METRIC)
        .filter(|r| !single_operations.contains(&(r.suite.as_str(), r.workload.as_str())))
        .filter(|r| !own_section(&r.suite))
        .map(|r| r.max)
        .filter(|v| v.is_finite())
        .max_by(f64::total_cmp);
    let _ = write!(
        out,
        "\ntimer overhead: {:.1} ns per clock read",
        results.header.timer_overhead_ns
    );
    match worst {
        Some(worst) => {
            let _ = writeln!(
                out,
                ", at most {worst:.5}% of any timed sample (limit {}%)",
                report::TIMER_OVERHEAD_WARN_PERCENT
            );
        }
        None => out.push('\n'),
    }
    for (suite, workload) in single_operations {
        // The smallest and largest value of `metric` in any run of the workload.
        let extremes = |metric: &str| -> Vec<f64> {
            results
                .records
                .iter()
                .filter(|r| r.suite == suite && r.workload == workload && r.metric == metric)
                .flat_map(|r| [r.min, r.max])
                .collect()
        };
        let clock = extremes(report::CLOCK_READ_METRIC);
        let lo = clock.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = clock.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "{suite}/{workload} times each call: every figure includes about one clock read \
             ({lo:.1}-{hi:.1} ns in its workers), not subtracted"
        );
        let fifo = extremes(report::SCHED_FIFO_METRIC);
        if !fifo.is_empty() {
            let policy = if fifo.iter().all(|&v| v >= 1.0) {
                "SCHED_FIFO (real-time) in every run"
            } else if fifo.iter().all(|&v| v <= 0.0) {
                "the default time-sharing policy (SCHED_OTHER)"
            } else {
                "SCHED_FIFO in some runs only: the tails do not compare"
            };
            let _ = writeln!(out, "{suite}/{workload} threads ran under {policy}");
        }
    }
    out
}
