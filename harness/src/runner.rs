//! Runs a plan of measurements, each in a fresh worker process, and aggregates the runs.
//!
//! Why a process per measurement: host heaps are process-wide, keep memory cached after a
//! run, and are measured by the process's resident set. A fresh process gives every
//! (workload, allocator, run) the same clean start, and a crash or hang in one allocator
//! fails that measurement with a clear error instead of taking the harness down.
//!
//! Runs are interleaved (run 1 of every job, then run 2 ...) so that a slow phase of a
//! shared, noisy machine spreads over all allocators instead of landing on one. Within a
//! run, the allocators of a (workload, thread count) follow one another, each run starting
//! from the next one ([`round_order`]): no allocator always runs first after another
//! workload, and value `i` of two allocators' records was measured moments apart.
//!
//! The worker is the `alloclab` binary itself, called as
//! `alloclab __worker --workload W --alloc A --threads N --scale S --seed X`; it prints one
//! JSON line: the [`Sample`]s of that run.
//!
//! Thread counts: an explicit `--threads` list applies to every host-heap workload; without
//! one, each workload runs at its suite's default for this machine (the `cpu` suite at the
//! number of logical cores, the `realtime` suite at 1×, 2× and 4× that, the `security` suite
//! at 1, the `pmem` and `storage` suites at 1 and 2). The `hls` suite is a single-threaded
//! simulation and always runs at 1; so does the `gpu` suite, whose thread counts are device
//! threads swept inside each workload.
//!
//! A run whose peak footprint reached [`SETTLE_AFTER_MIB`] (wf_alloc's `latency` at 8
//! threads maps about 5 GiB) is followed by a wait until the machine is quiet again
//! (`settle`): on the 2-core VM this project is measured on, two threads of the next
//! process stalled each other for 20–30 ms at a time for seconds after such a run (a
//! single thread, reading the clock or faulting pages in, saw nothing), and the `progress`
//! runs that followed, whichever allocator they measured, showed those stalls as their
//! longest calls; 20 s after, the same run was clean. The wait ends after two seconds
//! without a 5 ms stall between two threads, or after 8 s (the default suite has three such
//! runs and keeps its time); on that VM it took 4–6.5 s, and
//! the stalls it leaves are fewer, not gone (the `progress` targets read the calls against
//! the machine's pauses for that reason).
//!
//! A `pmem` worker sets libpmem's environment before anything loads it
//! ([`crate::workloads::pmem::prepare_process`], called by the binary's worker entry while it
//! is still single-threaded).

use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use alloclab_core::HostAllocator;

use crate::peers::{self, AllocatorInfo, Capability, HostHeapTask};
use crate::report::{CLOCK_READ_METRIC, SCHED_FIFO_METRIC, TIMER_OVERHEAD_METRIC};
use crate::results::{Failure, Record, Sample};
use crate::workloads::realtime::Sched;
use crate::workloads::storage::HeapSamples;
use crate::workloads::{HostWorkload, Params, Scale, WorkloadInfo};
use crate::{machine, measure};

/// One (workload, allocator, threads) cell of a plan.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    /// The workload.
    pub workload: &'static WorkloadInfo,
    /// The allocator.
    pub allocator: &'static AllocatorInfo,
    /// Worker threads.
    pub threads: usize,
}

impl fmt::Display for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} on {} with {} thread{}",
            self.workload.suite,
            self.workload.name,
            self.allocator.name,
            self.threads,
            if self.threads == 1 { "" } else { "s" }
        )
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Workloads, in order.
    pub workloads: Vec<&'static WorkloadInfo>,
    /// Allocators, in order; the first is the baseline of every ratio.
    pub allocators: Vec<&'static AllocatorInfo>,
    /// Thread counts for every workload, as the user gave them; `None`: each workload's
    /// own default for this machine ([`WorkloadInfo::default_thread_counts`]).
    pub threads: Option<Vec<usize>>,
    /// Amount of work.
    pub scale: Scale,
    /// Runs per job.
    pub runs: u32,
    /// Runs per job of the suites, or single workloads, named here, instead of `runs` (the
    /// `storage` suite's three: see `workloads::storage::DEFAULT_RUNS`); a workload's own
    /// entry wins over its suite's.
    pub runs_per_suite: Vec<(&'static str, u32)>,
    /// Seed of every workload's generator.
    pub seed: u64,
    /// The scheduling policy of the `realtime` suite's workers (see [`Sched`]).
    pub sched: Sched,
}

impl Plan {
    /// The thread counts `workload` runs at: those given, or its default for the logical
    /// cores of this machine (always the default for an on-chip simulation).
    pub fn threads_for(&self, workload: &WorkloadInfo) -> Vec<usize> {
        match &self.threads {
            // A simulation has no threads to vary: its default (1) stands.
            Some(given) if workload.takes_thread_counts() => given.clone(),
            _ => workload.default_thread_counts(machine::logical_cores()),
        }
    }

    /// How many times each job of `workload` runs.
    pub fn runs_for(&self, workload: &WorkloadInfo) -> u32 {
        let named = |name: &str| {
            self.runs_per_suite
                .iter()
                .find(|(n, _)| *n == name)
                .map(|&(_, runs)| runs)
        };
        named(workload.name)
            .or_else(|| named(workload.suite))
            .unwrap_or(self.runs)
    }

    /// Worker runs in the whole plan.
    pub fn total_runs(&self) -> u64 {
        self.jobs()
            .iter()
            .map(|j| u64::from(self.runs_for(j.workload)))
            .sum()
    }

    /// Every thread count of the plan, over all its workloads, ascending.
    pub fn all_thread_counts(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self
            .workloads
            .iter()
            .flat_map(|w| self.threads_for(w))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Every job of the plan: each workload × thread count × allocator that fits it.
    pub fn jobs(&self) -> Vec<Job> {
        let mut jobs = Vec::new();
        for &workload in &self.workloads {
            for threads in self.threads_for(workload) {
                for &allocator in &self.allocators {
                    if allocator.fits(workload.requires) {
                        jobs.push(Job {
                            workload,
                            allocator,
                            threads,
                        });
                    }
                }
            }
        }
        jobs
    }

    /// How long a worker may run before it is considered hung.
    pub fn worker_timeout(&self) -> Duration {
        Duration::from_secs(120 * self.scale.scaled(1))
    }
}

/// Why a plan could not be measured.
#[derive(Debug)]
pub enum RunError {
    /// The worker process could not be started.
    Spawn {
        /// The executable.
        exe: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The worker exited with an error (a panic, an allocation failure, a crash).
    WorkerFailed {
        /// What it was measuring.
        job: String,
        /// Exit status as the OS reports it.
        status: String,
        /// The last line the worker wrote to stderr.
        message: String,
    },
    /// The worker ran past the plan's timeout and was killed.
    WorkerTimedOut {
        /// What it was measuring.
        job: String,
        /// The timeout.
        after: Duration,
    },
    /// The worker's output was not a list of samples.
    BadWorkerOutput {
        /// What it was measuring.
        job: String,
        /// What went wrong.
        message: String,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Spawn { exe, source } => {
                write!(f, "cannot start worker {}: {source}", exe.display())
            }
            Self::WorkerFailed {
                job,
                status,
                message,
            } => write!(f, "{job} failed ({status}): {message}"),
            Self::WorkerTimedOut { job, after } => {
                write!(f, "{job} did not finish within {}s", after.as_secs())
            }
            Self::BadWorkerOutput { job, message } => {
                write!(f, "{job}: unreadable worker output: {message}")
            }
        }
    }
}

impl std::error::Error for RunError {}

/// Measures every job of `plan` `plan.runs` times, each run in a fresh `worker_exe`
/// process, and summarises each (job, metric) into a [`Record`]. `on_run` is called after
/// every run (for progress display) with the job just measured. A job whose worker fails
/// becomes a [`Failure`] (its later runs are skipped) and the plan goes on.
///
/// # Errors
///
/// [`RunError::Spawn`] if no worker can be started at all.
pub fn execute(
    plan: &Plan,
    worker_exe: &std::path::Path,
    mut on_run: impl FnMut(&Job, u32),
) -> Result<Outcome, RunError> {
    let jobs = plan.jobs();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); jobs.len()];
    let mut failures: Vec<Failure> = Vec::new();
    let mut failed = vec![false; jobs.len()];
    let most_runs = jobs
        .iter()
        .map(|j| plan.runs_for(j.workload))
        .max()
        .unwrap_or(plan.runs);
    let units = units(&jobs);
    let mut time_by_suite: Vec<(&'static str, Duration)> = Vec::new();
    for run in 1..=most_runs {
        for unit in round_order(&units, &jobs, run) {
            if run > plan.runs_for(jobs[unit[0]].workload) {
                continue;
            }
            let alive: Vec<usize> = unit.iter().copied().filter(|&i| !failed[i]).collect();
            if alive.is_empty() {
                for &i in &unit {
                    on_run(&jobs[i], run);
                }
                continue;
            }
            let started = Instant::now();
            let outcomes = match run_unit(worker_exe, &jobs, &alive, plan) {
                Ok(outcomes) => outcomes,
                Err(e @ RunError::Spawn { .. }) => return Err(e),
                Err(e) => alive.iter().map(|&i| (i, Err(e.to_string()))).collect(),
            };
            let mut got_all = Vec::new();
            for (i, outcome) in outcomes {
                match outcome {
                    Ok(got) => {
                        got_all.extend_from_slice(&got);
                        samples[i].extend(got);
                    }
                    Err(error) => {
                        // A crashing or hanging allocator would do it again: skip its later
                        // runs.
                        failed[i] = true;
                        let job = &jobs[i];
                        failures.push(Failure {
                            suite: job.workload.suite.to_owned(),
                            workload: job.workload.name.to_owned(),
                            allocator: job.allocator.name.to_owned(),
                            threads: job.threads,
                            run,
                            error,
                        });
                    }
                }
            }
            if mapped_much(&got_all) {
                settle();
            }
            if ran_real_time(&got_all) {
                // The kernel stops real-time threads for the rest of a period once they
                // have used its budget: let the next run start with all of it (see
                // `workloads::realtime`).
                std::thread::sleep(Sched::rt_pause(started.elapsed()));
            }
            let suite = jobs[unit[0]].workload.suite;
            match time_by_suite.iter_mut().find(|(s, _)| *s == suite) {
                Some((_, spent)) => *spent += started.elapsed(),
                None => time_by_suite.push((suite, started.elapsed())),
            }
            for &i in &unit {
                on_run(&jobs[i], run);
            }
        }
    }
    let mut records = Vec::new();
    for (job, collected) in jobs.iter().zip(samples) {
        let mut metrics: Vec<&str> = Vec::new();
        for s in &collected {
            if !metrics.contains(&s.metric.as_str()) {
                metrics.push(&s.metric);
            }
        }
        for metric in metrics {
            let of_metric: Vec<Sample> = collected
                .iter()
                .filter(|s| s.metric == metric)
                .cloned()
                .collect();
            records.push(Record::summarise(
                job.workload.suite,
                job.workload.name,
                job.allocator.name,
                job.threads,
                &of_metric,
            ));
        }
    }
    Ok(Outcome {
        records,
        failures,
        time_by_suite,
    })
}

/// What a plan measured, and what it could not.
#[derive(Debug, Default)]
pub struct Outcome {
    /// One record per (job, metric) with at least one successful run.
    pub records: Vec<Record>,
    /// Jobs whose worker failed (crash, hang, unreadable output).
    pub failures: Vec<Failure>,
    /// Wall time each suite took, its pauses between runs included, in the order the
    /// suites first ran.
    pub time_by_suite: Vec<(&'static str, Duration)>,
}

/// The peak footprint (MiB) from which a run is followed by `settle`.
pub const SETTLE_AFTER_MIB: f64 = 1024.0;
/// How long the machine must run without a pause of [`QUIET_PAUSE`] to count as quiet.
const QUIET_WINDOW: Duration = Duration::from_secs(2);
/// The pause that a quiet machine does not make within [`QUIET_WINDOW`].
const QUIET_PAUSE: Duration = Duration::from_millis(5);
/// The longest `settle` waits.
const SETTLE_MAX: Duration = Duration::from_secs(8);

/// Whether a run's peak footprint reached [`SETTLE_AFTER_MIB`].
fn mapped_much(samples: &[Sample]) -> bool {
    samples
        .iter()
        .any(|s| s.metric == "peak_footprint" && s.unit == "MiB" && s.value >= SETTLE_AFTER_MIB)
}

/// Waits until the machine runs [`QUIET_WINDOW`] without a pause of [`QUIET_PAUSE`] in a
/// hand-over between two threads, at most [`SETTLE_MAX`]; returns how long it waited. Two
/// threads, because the stalls that follow a large run are of one core waiting for another
/// (a single thread reading the clock, or faulting pages in, sees none of them).
fn settle() -> Duration {
    let began = Instant::now();
    while began.elapsed() < SETTLE_MAX {
        if quiet_for(QUIET_WINDOW, QUIET_PAUSE) {
            break;
        }
    }
    began.elapsed()
}

/// Two threads hand a token back and forth for `window`; `false` as soon as one hand-over
/// takes `pause` or more.
fn quiet_for(window: Duration, pause: Duration) -> bool {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let token = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let quiet = AtomicBool::new(true);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for side in 0..2u64 {
            let (token, stop, quiet) = (&token, &stop, &quiet);
            scope.spawn(move || {
                let mut last = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let t = token.load(Ordering::Acquire);
                    let now = Instant::now();
                    if t % 2 == side {
                        token.store(t + 1, Ordering::Release);
                        last = now;
                    } else if now.duration_since(last) >= pause {
                        quiet.store(false, Ordering::Relaxed);
                        stop.store(true, Ordering::Relaxed);
                    }
                    if now.duration_since(start) >= window {
                        stop.store(true, Ordering::Relaxed);
                    }
                    std::hint::spin_loop();
                }
            });
        }
    });
    quiet.load(Ordering::Relaxed)
}

/// Whether any thread of the run that produced `samples` ran under `SCHED_FIFO`.
fn ran_real_time(samples: &[Sample]) -> bool {
    samples
        .iter()
        .any(|s| s.metric == SCHED_FIFO_METRIC && s.value > 0.0)
}

/// The jobs of `jobs` that one worker process measures together, by index, in plan order:
/// all allocators of a (workload, thread count) whose heaps run together
/// ([`WorkloadInfo::heaps_together`]), every other job alone.
pub fn units(jobs: &[Job]) -> Vec<Vec<usize>> {
    let mut units: Vec<Vec<usize>> = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let joins = |unit: &&mut Vec<usize>| {
            let first = &jobs[unit[0]];
            job.workload.heaps_together()
                && std::ptr::eq(first.workload, job.workload)
                && first.threads == job.threads
        };
        match units.iter_mut().find(joins) {
            Some(unit) => unit.push(i),
            None => units.push(vec![i]),
        }
    }
    units
}

/// The order in which run `run` (from 1) measures `units`: plan order, except that the
/// consecutive units of one (workload, thread count) — its allocators, one unit each —
/// start from the `(run - 1)`-th of them and wrap around.
pub fn round_order(units: &[Vec<usize>], jobs: &[Job], run: u32) -> Vec<Vec<usize>> {
    let same_point = |a: &[usize], b: &[usize]| {
        let (a, b) = (&jobs[a[0]], &jobs[b[0]]);
        std::ptr::eq(a.workload, b.workload) && a.threads == b.threads
    };
    let mut order = Vec::with_capacity(units.len());
    let mut start = 0;
    while start < units.len() {
        let len = units[start..]
            .iter()
            .take_while(|u| same_point(u, &units[start]))
            .count();
        let group = &units[start..start + len];
        let first = (run.saturating_sub(1) as usize) % len;
        order.extend(group[first..].iter().chain(&group[..first]).cloned());
        start += len;
    }
    order
}

/// A job's index in the plan, and its samples of one run or why it has none.
type JobOutcome = (usize, Result<Vec<Sample>, String>);

/// Runs the jobs `unit` (indices into `jobs`, all of one workload and thread count) in one
/// worker process: each job's samples, or why it has none.
fn run_unit(
    exe: &std::path::Path,
    jobs: &[Job],
    unit: &[usize],
    plan: &Plan,
) -> Result<Vec<JobOutcome>, RunError> {
    let first = &jobs[unit[0]];
    if !first.workload.heaps_together() {
        let stdout = run_worker(exe, &first.to_string(), first, first.allocator.name, plan)?;
        let samples =
            serde_json::from_str(stdout.trim()).map_err(|e| RunError::BadWorkerOutput {
                job: first.to_string(),
                message: e.to_string(),
            })?;
        return Ok(vec![(unit[0], Ok(samples))]);
    }
    let names: Vec<&str> = unit.iter().map(|&i| jobs[i].allocator.name).collect();
    let label = format!(
        "{}/{} on {} with {} thread{}",
        first.workload.suite,
        first.workload.name,
        names.join(", "),
        first.threads,
        if first.threads == 1 { "" } else { "s" }
    );
    let stdout = run_worker(exe, &label, first, &names.join(","), plan)?;
    let mut heaps: Vec<HeapSamples> =
        serde_json::from_str(stdout.trim()).map_err(|e| RunError::BadWorkerOutput {
            job: label.clone(),
            message: e.to_string(),
        })?;
    Ok(unit
        .iter()
        .map(|&i| {
            let job = &jobs[i];
            let outcome = match heaps
                .iter()
                .position(|(name, _)| name == job.allocator.name)
            {
                Some(at) => heaps.swap_remove(at).1,
                None => Err("the worker reported nothing for this heap".to_owned()),
            };
            (i, outcome.map_err(|e| format!("{job} failed: {e}")))
        })
        .collect())
}

/// Runs a worker process measuring `job`'s workload and thread count on `allocators`
/// (one name, or a comma-separated list for a workload whose heaps run together); its
/// standard output. `label` names the measurement in errors.
fn run_worker(
    exe: &std::path::Path,
    label: &str,
    job: &Job,
    allocators: &str,
    plan: &Plan,
) -> Result<String, RunError> {
    let mut child = Command::new(exe)
        .args(["__worker", "--workload", job.workload.name])
        .args(["--alloc", allocators])
        .args(["--threads", &job.threads.to_string()])
        .args(["--scale", plan.scale.as_str()])
        .args(["--seed", &plan.seed.to_string()])
        .args(["--sched", plan.sched.as_str()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| RunError::Spawn {
            exe: exe.to_owned(),
            source,
        })?;
    let timeout = plan.worker_timeout();
    let started = Instant::now();
    // The worker writes one short line, far below a pipe's capacity, so polling for its exit
    // before reading cannot deadlock.
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|source| RunError::Spawn {
            exe: exe.to_owned(),
            source,
        })? {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(RunError::WorkerTimedOut {
                job: label.to_owned(),
                after: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    if !status.success() {
        let message = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty() && !l.starts_with("note:"))
            .unwrap_or("no message")
            .trim()
            .to_owned();
        return Err(RunError::WorkerFailed {
            job: label.to_owned(),
            status: status.to_string(),
            message,
        });
    }
    Ok(stdout)
}

/// What a worker process is asked to measure.
#[derive(Clone, Debug)]
pub struct WorkerRequest {
    /// Workload name.
    pub workload: String,
    /// Allocator name.
    pub allocator: String,
    /// Parameters.
    pub params: Params,
}

/// The body of a worker process: runs one measurement in this process and returns its
/// samples.
///
/// # Errors
///
/// A one-line message if the workload or allocator is unknown or does not fit.
pub fn worker_main(request: &WorkerRequest) -> Result<Vec<Sample>, String> {
    let workload = crate::workloads::find(&request.workload)
        .ok_or_else(|| format!("unknown workload '{}'", request.workload))?;
    let allocator = peers::find(&request.allocator)
        .ok_or_else(|| format!("unknown allocator '{}'", request.allocator))?;
    if !allocator.fits(workload.requires) {
        return Err(format!(
            "allocator '{}' does not fit workload '{}' (it needs a {})",
            allocator.name, workload.name, workload.requires
        ));
    }
    match workload.requires {
        Capability::HostHeap => {
            let code = HostWorkload::from_name(workload.name)
                .ok_or_else(|| format!("workload '{}' has no host-heap runner", workload.name))?;
            peers::with_host_heap(
                allocator.name,
                MeasureHostHeap {
                    workload: code,
                    params: request.params,
                },
            )
            .ok_or_else(|| format!("allocator '{}' is not a host heap", allocator.name))
        }
        Capability::OnChipModel => {
            crate::workloads::hls::run(workload.name, allocator.name, &request.params)
        }
        Capability::PersistentHeap if workload.heaps_together() => {
            let (_, samples) =
                crate::workloads::storage::run(workload.name, &[allocator.name], &request.params)?
                    .pop()
                    .expect("one outcome per heap");
            samples
        }
        Capability::PersistentHeap => {
            crate::workloads::pmem::run(workload.name, allocator.name, &request.params)
        }
        Capability::GpuPagePool | Capability::GpuMalloc | Capability::GpuThreads => {
            crate::workloads::gpu::run(workload.name, allocator.name, &request.params)
        }
        Capability::CachingModel => {
            crate::workloads::training::run(workload.name, allocator.name, &request.params)
        }
        Capability::Program if workload.name == crate::workloads::security::misuse_c::NAME => {
            crate::workloads::security::misuse_c::run(allocator.name)
        }
        Capability::Program => {
            crate::workloads::programs::run(workload.name, allocator.name, &request.params)
        }
    }
}

/// The body of a worker process for a workload whose heaps run together
/// ([`WorkloadInfo::heaps_together`]): `request.allocator` is a comma-separated list of
/// heaps, measured in this process; each heap's samples, or why it has none, in order.
///
/// # Errors
///
/// A one-line message if the workload or an allocator is unknown or does not fit, or the
/// run as a whole cannot be made.
pub fn worker_together(request: &WorkerRequest) -> Result<Vec<HeapSamples>, String> {
    let workload = crate::workloads::find(&request.workload)
        .ok_or_else(|| format!("unknown workload '{}'", request.workload))?;
    if !workload.heaps_together() {
        return Err(format!(
            "workload '{}' measures one heap per process",
            workload.name
        ));
    }
    let mut names = Vec::new();
    for name in request.allocator.split(',') {
        let allocator = peers::find(name).ok_or_else(|| format!("unknown allocator '{name}'"))?;
        if !allocator.fits(workload.requires) {
            return Err(format!(
                "allocator '{}' does not fit workload '{}' (it needs a {})",
                allocator.name, workload.name, workload.requires
            ));
        }
        names.push(allocator.name);
    }
    crate::workloads::storage::run(workload.name, &names, &request.params)
}

/// Runs a host-heap workload of any suite and adds to its own metrics the footprint, the
/// timer overhead and, where it times single operations, the cost of one clock read.
struct MeasureHostHeap {
    workload: HostWorkload,
    params: Params,
}

impl HostHeapTask for MeasureHostHeap {
    type Output = Vec<Sample>;

    fn run<A: HostAllocator>(self, alloc: &'static A) -> Vec<Sample> {
        // The footprint baseline is taken before the allocator is first used: memory an
        // allocator takes when it starts (mimalloc 3 touches 4 MiB at its first allocation
        // here: two transparent huge pages) is part of its footprint, as in a whole-process
        // peak RSS.
        // Code is mapped in before the baseline: it is not heap, and glibc's malloc alone
        // would have its code resident already (see `measure`).
        measure::prefault_code();
        measure::reset_peak_rss();
        let rss_before = measure::current_rss_bytes().unwrap_or(0);
        // Initialise the allocator (and this thread's state in it) outside the timing,
        // unless the workload needs a heap nobody has used yet.
        if !self.workload.needs_untouched_heap() {
            let warm = core::alloc::Layout::from_size_align(64, 16).expect("valid layout");
            if let Ok(block) = alloc.allocate(warm) {
                // SAFETY: `block` was just allocated with `warm` and is not used again.
                unsafe { alloc.deallocate(block, warm) };
            }
        }
        let overhead_ns = measure::timer_overhead_ns();
        let outcome = self.workload.run(alloc, &self.params);
        let peak = measure::peak_rss_bytes().unwrap_or(0);
        let min_sample_ns = outcome.min_sample.as_nanos().max(1) as f64;
        let mut samples = outcome.samples;
        samples.push(sample(
            "peak_footprint",
            "MiB",
            peak.saturating_sub(rss_before) as f64 / f64::from(1u32 << 20),
        ));
        if outcome.times_single_operations {
            samples.push(sample(CLOCK_READ_METRIC, "ns", overhead_ns));
        }
        samples.push(sample(
            TIMER_OVERHEAD_METRIC,
            "%",
            2.0 * overhead_ns / min_sample_ns * 100.0,
        ));
        samples
    }
}

fn sample(metric: &str, unit: &str, value: f64) -> Sample {
    Sample {
        metric: metric.to_owned(),
        unit: unit.to_owned(),
        value,
        lower_is_better: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads;

    fn plan(threads: Option<Vec<usize>>) -> Plan {
        Plan {
            workloads: ["larson", "latency"]
                .iter()
                .map(|w| workloads::find(w).expect("registered"))
                .collect(),
            allocators: vec![peers::find("system").expect("registered")],
            threads,
            scale: Scale::Tiny,
            runs: 1,
            runs_per_suite: Vec::new(),
            seed: 1,
            sched: Sched::Other,
        }
    }

    /// A one-run plan of the workloads and allocators named, at the thread counts given.
    fn plan_of(workloads: &[&str], allocators: &[&str], threads: Vec<usize>) -> Plan {
        Plan {
            workloads: workloads
                .iter()
                .map(|w| workloads::find(w).expect("registered"))
                .collect(),
            allocators: allocators
                .iter()
                .map(|a| peers::find(a).expect("registered"))
                .collect(),
            threads: Some(threads),
            scale: Scale::Tiny,
            runs: 1,
            runs_per_suite: Vec::new(),
            seed: 1,
            sched: Sched::Other,
        }
    }

    fn threads_of(jobs: &[Job], workload: &str) -> Vec<usize> {
        jobs.iter()
            .filter(|j| j.workload.name == workload)
            .map(|j| j.threads)
            .collect()
    }

    #[test]
    fn without_thread_counts_each_workload_runs_at_its_suites_default() {
        let cores = machine::logical_cores();
        let plan = plan(None);
        let jobs = plan.jobs();
        assert_eq!(threads_of(&jobs, "larson"), [cores]);
        assert_eq!(threads_of(&jobs, "latency"), [cores, 2 * cores, 4 * cores]);
        assert_eq!(plan.all_thread_counts(), [cores, 2 * cores, 4 * cores]);
    }

    #[test]
    fn a_workloads_own_run_count_wins_over_its_suites() {
        let mut plan = plan(None);
        plan.runs = 5;
        plan.runs_per_suite = vec![("progress", 1), ("realtime", 3)];
        let runs = |w: &str| plan.runs_for(workloads::find(w).expect("registered"));
        assert_eq!(runs("progress"), 1);
        assert_eq!(runs("latency"), 3);
        assert_eq!(runs("larson"), 5);
    }

    /// Without `--runs`: the C benchmarks of the `programs` suite run more often than the
    /// real programs of the same suite, and every suite gets its own default.
    #[test]
    fn the_default_run_counts_give_the_short_c_programs_more_runs() {
        let mut plan = plan(None);
        plan.runs = workloads::DEFAULT_RUNS;
        plan.runs_per_suite = workloads::default_runs_per_suite();
        let runs = |w: &str| plan.runs_for(workloads::find(w).expect("registered"));
        for name in workloads::programs::classic_workloads() {
            assert_eq!(
                runs(name),
                workloads::programs::CLASSIC_DEFAULT_RUNS,
                "{name}"
            );
        }
        const { assert!(workloads::programs::CLASSIC_DEFAULT_RUNS > workloads::programs::DEFAULT_RUNS) };
        for w in workloads::all().iter().filter(|w| w.suite == "programs") {
            if !w.name.starts_with("c-") {
                assert_eq!(
                    runs(w.name),
                    workloads::programs::DEFAULT_RUNS,
                    "{}",
                    w.name
                );
            }
        }
        assert_eq!(runs("larson"), workloads::DEFAULT_RUNS);
        assert_eq!(runs("progress"), 1);
        assert_eq!(runs("latency"), workloads::realtime::DEFAULT_RUNS);
        assert_eq!(runs("misuse"), workloads::STEADY_DEFAULT_RUNS);
    }

    #[test]
    fn given_thread_counts_apply_to_every_workload() {
        let plan = plan(Some(vec![3, 1]));
        let jobs = plan.jobs();
        assert_eq!(threads_of(&jobs, "larson"), [3, 1]);
        assert_eq!(threads_of(&jobs, "latency"), [3, 1]);
        assert_eq!(plan.all_thread_counts(), [1, 3]);
    }

    #[test]
    fn the_hls_simulation_runs_at_one_thread_on_the_on_chip_models_only() {
        let plan = plan_of(
            &["mixed-kernels"],
            &["hls-bitmap", "system", "hls-defrag"],
            vec![4, 8],
        );
        let jobs = plan.jobs();
        let names: Vec<&str> = jobs.iter().map(|j| j.allocator.name).collect();
        assert_eq!(names, ["hls-bitmap", "hls-defrag"]);
        assert!(jobs.iter().all(|j| j.threads == 1));
    }

    #[test]
    fn a_storage_workloads_heaps_share_a_worker_per_thread_count_and_other_jobs_run_alone() {
        let plan = plan_of(
            &["larson", "inp-c", "lsm-h"],
            &["system", "pmdk", "alloclab-pmem", "dram", "mimalloc"],
            vec![1, 2],
        );
        let jobs = plan.jobs();
        let units = units(&jobs);
        let described: Vec<(String, usize, Vec<&str>)> = units
            .iter()
            .map(|u| {
                let first = &jobs[u[0]];
                (
                    first.workload.name.to_owned(),
                    first.threads,
                    u.iter().map(|&i| jobs[i].allocator.name).collect(),
                )
            })
            .collect();
        let heaps = vec!["pmdk", "alloclab-pmem", "dram"];
        assert_eq!(
            described,
            [
                ("larson".to_owned(), 1, vec!["system"]),
                ("larson".to_owned(), 1, vec!["mimalloc"]),
                ("larson".to_owned(), 2, vec!["system"]),
                ("larson".to_owned(), 2, vec!["mimalloc"]),
                ("inp-c".to_owned(), 1, heaps.clone()),
                ("inp-c".to_owned(), 2, heaps.clone()),
                ("lsm-h".to_owned(), 1, heaps.clone()),
                ("lsm-h".to_owned(), 2, heaps),
            ]
        );
        // Every job is in exactly one unit.
        let mut all: Vec<usize> = units.concat();
        all.sort_unstable();
        assert_eq!(all, (0..jobs.len()).collect::<Vec<_>>());
    }

    #[test]
    fn each_run_starts_a_points_allocators_from_the_next_one() {
        let plan = plan_of(
            &["larson", "inp-c", "lua"],
            &["system", "pmdk", "wfspan"],
            vec![1, 2],
        );
        let jobs = plan.jobs();
        let units = units(&jobs);
        let described = |run: u32| -> Vec<String> {
            round_order(&units, &jobs, run)
                .iter()
                .map(|u| {
                    let names: Vec<&str> = u.iter().map(|&i| jobs[i].allocator.name).collect();
                    let job = &jobs[u[0]];
                    format!("{}/{}:{}", job.workload.name, job.threads, names.join("+"))
                })
                .collect()
        };
        // lua runs at one thread whatever `--threads` says; pmdk runs only the storage suite,
        // whose heaps share a worker (one unit: nothing to turn).
        let first = [
            "larson/1:system",
            "larson/1:wfspan",
            "larson/2:system",
            "larson/2:wfspan",
            "inp-c/1:pmdk",
            "inp-c/2:pmdk",
            "lua/1:system",
            "lua/1:wfspan",
        ];
        assert_eq!(described(1), first);
        assert_eq!(
            described(2),
            [
                "larson/1:wfspan",
                "larson/1:system",
                "larson/2:wfspan",
                "larson/2:system",
                "inp-c/1:pmdk",
                "inp-c/2:pmdk",
                "lua/1:wfspan",
                "lua/1:system",
            ]
        );
        assert_eq!(described(3), first);
    }

    #[test]
    fn only_a_run_with_real_time_threads_is_followed_by_a_pause() {
        let qualifier = |v: f64| Sample {
            metric: SCHED_FIFO_METRIC.to_owned(),
            unit: "share".to_owned(),
            value: v,
            lower_is_better: false,
        };
        assert!(ran_real_time(&[sample("time", "ms", 1.0), qualifier(1.0)]));
        assert!(!ran_real_time(&[sample("time", "ms", 1.0), qualifier(0.0)]));
        assert!(!ran_real_time(&[sample("time", "ms", 1.0)]));
    }

    #[test]
    fn only_a_run_that_mapped_a_gib_is_followed_by_settling() {
        assert!(mapped_much(&[sample("peak_footprint", "MiB", 5092.8)]));
        assert!(!mapped_much(&[sample("peak_footprint", "MiB", 48.5)]));
        assert!(!mapped_much(&[sample("time", "ms", 5000.0)]));
    }

    fn worker(workload: &str) -> Vec<Sample> {
        worker_main(&WorkerRequest {
            workload: workload.to_owned(),
            allocator: "system".to_owned(),
            params: Params {
                threads: 2,
                scale: Scale::Tiny,
                seed: 3,
            },
        })
        .unwrap_or_else(|e| panic!("{workload}: {e}"))
    }

    fn metrics(samples: &[Sample]) -> Vec<&str> {
        samples.iter().map(|s| s.metric.as_str()).collect()
    }

    #[test]
    fn the_worker_runs_workloads_of_every_suite_and_reports_the_clock_where_it_times_calls() {
        let cpu = worker("larson");
        assert_eq!(
            metrics(&cpu),
            ["time", "peak_footprint", TIMER_OVERHEAD_METRIC]
        );
        let realtime = worker("latency");
        let names = metrics(&realtime);
        for expected in [
            "alloc_p50",
            "alloc_p99.999",
            "alloc_max",
            "free_p50",
            "free_max",
            "peak_footprint",
            CLOCK_READ_METRIC,
            TIMER_OVERHEAD_METRIC,
        ] {
            assert!(names.contains(&expected), "no {expected} in {names:?}");
        }
        let clock = realtime
            .iter()
            .find(|s| s.metric == CLOCK_READ_METRIC)
            .expect("clock_read");
        assert_eq!(clock.unit, "ns");
        assert!(clock.value > 0.0);
    }

    #[test]
    fn the_worker_refuses_unknown_names() {
        let request = |workload: &str, allocator: &str| WorkerRequest {
            workload: workload.to_owned(),
            allocator: allocator.to_owned(),
            params: Params {
                threads: 1,
                scale: Scale::Tiny,
                seed: 0,
            },
        };
        let err = worker_main(&request("nosuch", "system")).unwrap_err();
        assert!(err.contains("unknown workload 'nosuch'"), "{err}");
        let err = worker_main(&request("latency", "nosuch")).unwrap_err();
        assert!(err.contains("unknown allocator 'nosuch'"), "{err}");
    }
}
