//! Runs a plan of measurements, each in a fresh worker process, and aggregates the runs.
//!
//! Why a process per measurement: host heaps are process-wide, keep memory cached after a
//! run, and are measured by the process's resident set. A fresh process gives every
//! (workload, allocator, run) the same clean start, and a crash or hang in one allocator
//! fails that measurement with a clear error instead of taking the harness down.
//!
//! Runs are interleaved (run 1 of every job, then run 2 ...) so that a slow phase of a
//! shared, noisy machine spreads over all allocators instead of landing on one.
//!
//! The worker is the `alloclab` binary itself, called as
//! `alloclab __worker --workload W --alloc A --threads N --scale S --seed X`; it prints one
//! JSON line: the [`Sample`]s of that run.

use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use alloclab_core::HostAllocator;

use crate::measure;
use crate::peers::{self, AllocatorInfo, Capability, HostHeapTask};
use crate::results::{Record, Sample};
use crate::workloads::cpu::CpuWorkload;
use crate::workloads::{Params, Scale, WorkloadInfo};

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
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Amount of work.
    pub scale: Scale,
    /// Runs per job.
    pub runs: u32,
    /// Seed of every workload's generator.
    pub seed: u64,
}

impl Plan {
    /// Every job of the plan: each workload × thread count × allocator that fits it.
    pub fn jobs(&self) -> Vec<Job> {
        let mut jobs = Vec::new();
        for &workload in &self.workloads {
            for &threads in &self.threads {
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
/// every run (for progress display) with the job just measured.
///
/// # Errors
///
/// The first [`RunError`]; nothing partial is returned.
pub fn execute(
    plan: &Plan,
    worker_exe: &std::path::Path,
    mut on_run: impl FnMut(&Job, u32),
) -> Result<Vec<Record>, RunError> {
    let jobs = plan.jobs();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); jobs.len()];
    for run in 1..=plan.runs {
        for (job, collected) in jobs.iter().zip(&mut samples) {
            collected.extend(run_worker(worker_exe, job, plan)?);
            on_run(job, run);
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
    Ok(records)
}

fn run_worker(exe: &std::path::Path, job: &Job, plan: &Plan) -> Result<Vec<Sample>, RunError> {
    let mut child = Command::new(exe)
        .args(["__worker", "--workload", job.workload.name])
        .args(["--alloc", job.allocator.name])
        .args(["--threads", &job.threads.to_string()])
        .args(["--scale", plan.scale.as_str()])
        .args(["--seed", &plan.seed.to_string()])
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
                job: job.to_string(),
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
            job: job.to_string(),
            status: status.to_string(),
            message,
        });
    }
    serde_json::from_str(stdout.trim()).map_err(|e| RunError::BadWorkerOutput {
        job: job.to_string(),
        message: e.to_string(),
    })
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
            let cpu = CpuWorkload::from_name(workload.name)
                .ok_or_else(|| format!("workload '{}' has no host-heap runner", workload.name))?;
            peers::with_host_heap(
                allocator.name,
                MeasureHostHeap {
                    workload: cpu,
                    params: request.params,
                },
            )
            .ok_or_else(|| format!("allocator '{}' is not a host heap", allocator.name))
        }
    }
}

/// Runs a cpu workload on a host heap and measures time, footprint and timer overhead.
struct MeasureHostHeap {
    workload: CpuWorkload,
    params: Params,
}

impl HostHeapTask for MeasureHostHeap {
    type Output = Vec<Sample>;

    fn run<A: HostAllocator>(self, alloc: &'static A) -> Vec<Sample> {
        // Initialise the allocator (and this thread's state in it) outside the measurement.
        let warm = core::alloc::Layout::from_size_align(64, 16).expect("valid layout");
        if let Ok(block) = alloc.allocate(warm) {
            // SAFETY: `block` was just allocated with `warm` and is not used again.
            unsafe { alloc.deallocate(block, warm) };
        }
        let overhead_ns = measure::timer_overhead_ns();
        measure::reset_peak_rss();
        let rss_before = measure::current_rss_bytes().unwrap_or(0);
        let m = self.workload.run(alloc, &self.params);
        let peak = measure::peak_rss_bytes().unwrap_or(0);
        let min_sample_ns = m.min_sample.as_nanos().max(1) as f64;
        vec![
            sample("time", "ms", m.elapsed.as_secs_f64() * 1e3),
            sample(
                "peak_footprint",
                "MiB",
                peak.saturating_sub(rss_before) as f64 / f64::from(1u32 << 20),
            ),
            sample(
                "timer_overhead",
                "%",
                2.0 * overhead_ns / min_sample_ns * 100.0,
            ),
        ]
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
