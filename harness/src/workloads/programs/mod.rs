//! The `programs` suite: real, unmodified programs under every heap a program can run on.
//!
//! Each workload is a program of [`alloclab_programs::catalog`]: redis-server under
//! redis-benchmark, the sqlite3 shell, python3, lua and perl scripts, the C compiler, git
//! packing a generated history with two threads of its own, and C versions of the `cpu` suite's classic benchmarks (`c-larson`, ...). A worker runs the
//! program once under the heap named: alloclab's heaps and the peers' shared libraries through
//! `LD_PRELOAD`, `system` with nothing preloaded. This is the path real programs take to an
//! allocator: the C ABI through the PLT, frees without a size, threads the allocator did not
//! start. The figures come from outside the program (`wait4`): wall time, user + system CPU
//! time, peak RSS; the classic benchmarks also report their measured phase (`time`), timed as
//! the in-process versions time theirs, which is what [`report`]'s reconciliation compares.
//!
//! Every run also reports `result_digest`, a digest of the program's output (for redis, of
//! the data read back from the server; for git, of the objects its pack holds): the report flags a heap under which a program's
//! result differs from its result under `system`.

pub mod report;

use crate::metrics::RESULT_DIGEST_METRIC;

use std::path::PathBuf;
use std::time::Duration;

use alloclab_programs::catalog::{self, Context};

use super::{Params, WorkloadInfo};
use crate::peers::{Capability, libraries};
use crate::results::Sample;

/// The suite's name.
pub const SUITE: &str = "programs";

/// Runs per measurement when `--runs` is not given. A whole program takes 20 ms to half a
/// second, and a shared machine's slow spells, seconds long, slow one by up to 2x: with
/// three runs the median of the run-by-run ratios still followed a spell on some program
/// of every run (lua under wfspan over libmimalloc read 1.58 in one, 1.05 over nine), with
/// five it moved by a few percent. The suite's part of the default `alloclab suite` is
/// about a minute on a 2-core machine.
pub const DEFAULT_RUNS: u32 = 5;

/// Runs per measurement of the C versions of the classic benchmarks when `--runs` is not
/// given. They take 10-60 ms at the small scale, process start included, so a pause of the
/// machine that a real program's half second absorbs moves one of their runs by tens of
/// percent: in one default suite (2-core AMD EPYC VM, 7 December 2026) wfspan's runs of
/// `c-cache-scratch` read 0.57 to 1.34 times libmimalloc's, and the check that no program
/// is above 1.25x could not decide on a median of 0.86 from five runs. Nine runs cost the
/// suite about 15 s more there.
pub const CLASSIC_DEFAULT_RUNS: u32 = 9;

/// The workloads that run [`CLASSIC_DEFAULT_RUNS`] times by default.
pub fn classic_workloads() -> impl Iterator<Item = &'static str> {
    catalog::CLASSIC_NAMES.iter().map(|&(name, _, _)| name)
}

/// The registry entries of the suite, one per program of the catalog.
pub fn workloads() -> Vec<WorkloadInfo> {
    catalog::all()
        .iter()
        .map(|p| WorkloadInfo {
            suite: SUITE,
            name: p.name,
            description: p.description,
            requires: Capability::Program,
            default_threads: if p.takes_threads() {
                super::one_per_core
            } else {
                |_| vec![1]
            },
        })
        .collect()
}

/// Whether `--threads` applies to the program `workload` (the classic benchmarks only; the
/// real programs have threads of their own).
pub fn takes_threads(workload: &str) -> bool {
    catalog::find(workload).is_some_and(catalog::Program::takes_threads)
}

/// What is missing to run `workload` here, with the line that installs it; `None` when it
/// can run, or when it is not a program of this suite.
pub fn unavailable(workload: &str) -> Option<String> {
    catalog::find(workload).and_then(catalog::Program::missing)
}

/// Runs the program `workload` once under `allocator` and returns its figures and result
/// digest.
///
/// # Errors
///
/// One line: the allocator cannot be preloaded or its library is missing, the program is
/// missing, fails, times out or prints something unreadable.
pub fn run(workload: &str, allocator: &str, params: &Params) -> Result<Vec<Sample>, String> {
    let program = catalog::find(workload).ok_or_else(|| format!("unknown program '{workload}'"))?;
    let preload = libraries::resolve(allocator)?;
    // An interrupted suite stops the program it is running, too.
    alloclab_programs::process::kill_programs_on_interrupt();
    let scratch = Scratch::new()?;
    let ctx = Context {
        preload,
        threads: params.threads,
        scale: params.scale.as_str(),
        factor: params.scale.factor(),
        seed: params.seed,
        scratch: scratch.0.clone(),
        timeout: Duration::from_secs(100 * params.scale.scaled(1)),
    };
    let measured = program.run(&ctx)?;
    let mut samples: Vec<Sample> = measured
        .figures
        .into_iter()
        .map(|f| Sample {
            metric: f.metric,
            unit: f.unit.to_owned(),
            value: f.value,
            lower_is_better: f.lower_is_better,
        })
        .collect();
    samples.push(Sample {
        metric: RESULT_DIGEST_METRIC.to_owned(),
        unit: "digest".to_owned(),
        value: measured.digest as f64,
        lower_is_better: true,
    });
    Ok(samples)
}

/// Compiles the classic benchmarks before a plan runs, so that a compiler error is one
/// message up front rather than a failure per run.
///
/// # Errors
///
/// The compiler's message.
pub fn prepare() -> Result<(), String> {
    if catalog::find("c-larson")
        .and_then(catalog::Program::missing)
        .is_some()
    {
        return Ok(()); // No compiler: the suite skips these programs with the install line.
    }
    alloclab_programs::classic::compile(&catalog::classic_dir(), "cc".as_ref())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A scratch directory for one run's inputs, removed afterwards.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("alloclab-programs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
