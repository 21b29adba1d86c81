//! The `results.json` format (also what `alloclab run --json FILE` writes).
//!
//! Stable: fields are only ever added, and a change that would break a reader bumps
//! [`FORMAT_VERSION`]. The whole file is one JSON object:
//!
//! ```json
//! {
//!   "format": "alloclab-results",
//!   "version": 1,
//!   "header": {
//!     "machine": { "cpu_model": "...", "cores": 2, "memory_bytes": 25325268992,
//!                  "os": "linux", "arch": "x86_64", "kernel": "6.1.0" },
//!     "commit": "7dea227…", "commit_dirty": false,
//!     "created_unix_s": 1796000000,
//!     "command": "alloclab suite",
//!     "parameters": { "scale": "small", "runs": 3, "threads": [2], "seed": 42,
//!                     "suites": ["cpu"], "allocators": ["system", "mimalloc"] },
//!     "timer_overhead_ns": 21.5
//!   },
//!   "records": [
//!     { "suite": "cpu", "workload": "larson", "allocator": "mimalloc", "threads": 2,
//!       "metric": "time", "unit": "ms", "median": 101.2, "min": 99.8, "max": 104.0,
//!       "runs": 3, "lower_is_better": true }
//!   ],
//!   "failures": [
//!     { "suite": "realtime", "workload": "latency", "allocator": "wf_alloc", "threads": 8,
//!       "run": 1, "error": "… did not finish within 120s" }
//!   ]
//! }
//! ```
//!
//! A measurement whose worker crashed, hung or printed nothing is listed in `failures` (its
//! later runs are skipped) and the rest of the plan goes on.
//!
//! One record per (suite, workload, allocator, threads, metric). `median`, `min` and `max`
//! are over `runs` runs, each in a fresh process. Metrics of the `cpu` suite: `time` (ms,
//! wall time of the fixed amount of work), `peak_footprint` (MiB: peak resident set minus
//! the resident set before the allocator was first used, code mapped in before that),
//! `timer_overhead` (% of the shortest timed
//! sample spent reading the clock). Metrics of the `realtime` suite (see
//! [`workloads::realtime`](crate::workloads::realtime)): `alloc_p50`, `alloc_p99`,
//! `alloc_p99.9`, `alloc_p99.99`, `alloc_p99.999`, `alloc_max` and the same for `free_` and
//! `remote_free_p99` to `remote_free_p99.999` and `remote_free_max` (ns per call, one
//! clock read included);
//! `alloc_max_steps`, `free_max_steps` (steps, only for allocators that count them);
//! `peak_footprint`; `clock_read` (ns, the cost of one clock read in that worker);
//! `timer_overhead`. Metrics of the `security` suite (see
//! [`workloads::security`](crate::workloads::security); none is a time):
//! `entropy_{fresh,steady}_S`, `shannon_{fresh,steady}_S`, `entropy_ceiling` (bits, higher
//! is better); `reuse_same_S`, `reuse_overlap_S` (probability `p`, lower is better),
//! `distance_median_S`, `distance_p90_S` (allocations), `distance_never_S` (`p`), higher is
//! better; `overflow_SB_kK` (`p`, lower is better); one `score` per misuse case (1 caught,
//! 0.5 crashed, 0.25 hung, 0 silent) and `caught`, `silent` (cases); plus
//! `peak_footprint` and `timer_overhead` (negligible: nothing is timed).

use serde::{Deserialize, Serialize};

/// The value of the `format` field.
pub const FORMAT_NAME: &str = "alloclab-results";
/// The current format version.
pub const FORMAT_VERSION: u32 = 1;

/// A whole `results.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultsFile {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] when written.
    pub version: u32,
    /// Where, when and how the figures were measured.
    pub header: Header,
    /// The figures.
    pub records: Vec<Record>,
    /// Measurements that could not be taken (a worker crashed, timed out, or printed no
    /// samples). Absent from files written before this field existed.
    #[serde(default)]
    pub failures: Vec<Failure>,
    /// One-line notes about a suite's run as a whole: the `gpu` suite says whether its
    /// CUDA kernels ran, on which device, or why not. Absent in files written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<SuiteNote>,
}

impl ResultsFile {
    /// Reads a `results.json` written by `alloclab suite` or `alloclab run --json`.
    ///
    /// # Errors
    ///
    /// A message naming the file if it cannot be read, is not JSON of this format, or was
    /// written in another format version.
    pub fn read(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let results: Self = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not an alloclab results file: {e}", path.display()))?;
        if results.format != FORMAT_NAME {
            return Err(format!(
                "{} is a '{}' file, not '{FORMAT_NAME}'",
                path.display(),
                results.format
            ));
        }
        if results.version != FORMAT_VERSION {
            return Err(format!(
                "{} is in format version {}; this alloclab reads version {FORMAT_VERSION}",
                path.display(),
                results.version
            ));
        }
        Ok(results)
    }
}

/// A note about one suite's run (see [`ResultsFile::notes`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuiteNote {
    /// The suite.
    pub suite: String,
    /// One line.
    pub text: String,
}

/// A measurement that failed: which one, and the error, in one line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// Suite.
    pub suite: String,
    /// Workload.
    pub workload: String,
    /// Allocator.
    pub allocator: String,
    /// Worker threads.
    pub threads: usize,
    /// The run (1-based) that failed; later runs of the same measurement were skipped.
    pub run: u32,
    /// What went wrong.
    pub error: String,
}

/// Where, when and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The machine.
    pub machine: Machine,
    /// `git rev-parse HEAD` of the tree that was measured, or `"unknown"`.
    pub commit: String,
    /// Whether the tree had uncommitted changes.
    pub commit_dirty: bool,
    /// When the run ended, in seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// The command line, for reproduction.
    pub command: String,
    /// The parameters shared by every record.
    pub parameters: Parameters,
    /// Cost of one clock read (`Instant::now`), median of many, in nanoseconds.
    pub timer_overhead_ns: f64,
}

/// The machine a result was measured on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model as the OS names it.
    pub cpu_model: String,
    /// Logical cores available to the process.
    pub cores: usize,
    /// Physical memory.
    pub memory_bytes: u64,
    /// Operating system (`std::env::consts::OS`).
    pub os: String,
    /// Architecture (`std::env::consts::ARCH`).
    pub arch: String,
    /// Kernel release, where known.
    pub kernel: String,
}

/// Parameters shared by every record of a file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Parameters {
    /// `small`, `medium` or `large`.
    pub scale: String,
    /// Runs per (workload, allocator, threads).
    pub runs: u32,
    /// Thread counts measured, over all workloads, ascending (each suite may run at its own;
    /// every record names its thread count).
    pub threads: Vec<usize>,
    /// Seed of every workload's generator.
    pub seed: u64,
    /// Suites run.
    pub suites: Vec<String>,
    /// Allocators asked for, in the order given (ratios are against the first).
    pub allocators: Vec<String>,
}

/// One figure: a metric of one workload on one allocator at one thread count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Suite.
    pub suite: String,
    /// Workload.
    pub workload: String,
    /// Allocator.
    pub allocator: String,
    /// Worker threads.
    pub threads: usize,
    /// What was measured (`time`, `peak_footprint`, ...).
    pub metric: String,
    /// Unit of `median`, `min`, `max` (`ms`, `MiB`, `%`, ...).
    pub unit: String,
    /// Median over the runs.
    pub median: f64,
    /// Smallest value seen.
    pub min: f64,
    /// Largest value seen.
    pub max: f64,
    /// Number of runs.
    pub runs: u32,
    /// Each run's value, in run order. Runs are interleaved across allocators (and the heaps
    /// of a workload whose heaps run together share each run's process), so value `i` of
    /// two allocators' records was measured at about the same time: their ratio run by run
    /// tells how far a comparison moves between runs. Empty in files written before it was
    /// kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<f64>,
    /// Whether a smaller value is better.
    pub lower_is_better: bool,
}

/// One value of one metric from one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Metric name.
    pub metric: String,
    /// Unit.
    pub unit: String,
    /// Value.
    pub value: f64,
    /// Whether a smaller value is better.
    pub lower_is_better: bool,
}

/// A [`Sample`] of `value` in `unit` for `metric`: what every workload's metrics are built
/// from.
pub fn sample(metric: &str, unit: &str, value: f64, lower_is_better: bool) -> Sample {
    Sample {
        metric: metric.to_owned(),
        unit: unit.to_owned(),
        value,
        lower_is_better,
    }
}

impl Record {
    /// Summarises the values of one metric over several runs. `samples` must be non-empty
    /// and all of one metric.
    pub fn summarise(
        suite: &str,
        workload: &str,
        allocator: &str,
        threads: usize,
        samples: &[Sample],
    ) -> Record {
        assert!(!samples.is_empty(), "a record needs at least one run");
        let in_order: Vec<f64> = samples.iter().map(|s| s.value).collect();
        let mut values = in_order.clone();
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = median_of_sorted(&values);
        Record {
            suite: suite.to_owned(),
            workload: workload.to_owned(),
            allocator: allocator.to_owned(),
            threads,
            metric: samples[0].metric.clone(),
            unit: samples[0].unit.clone(),
            median,
            min: values[0],
            max: values[n - 1],
            runs: n as u32,
            values: in_order,
            lower_is_better: samples[0].lower_is_better,
        }
    }

    /// This record's figure over `base`'s, measured in the same runs: see [`RunRatio`].
    /// `None` when `base`'s median is not positive or a ratio is not finite.
    pub fn ratio_to(&self, base: &Record) -> Option<RunRatio> {
        if let Some(mut ratios) = self.run_ratios(base) {
            ratios.sort_by(f64::total_cmp);
            return Some(RunRatio {
                median: median_of_sorted(&ratios),
                min: ratios[0],
                max: ratios[ratios.len() - 1],
                runs: ratios.len() as u32,
            });
        }
        let median = self.median / base.median;
        (base.median > 0.0 && median.is_finite()).then_some(RunRatio {
            median,
            min: median,
            max: median,
            runs: 0,
        })
    }

    /// Each run's value over `base`'s value of the same run, in run order; `None` when the
    /// two cannot be paired (no per-run values, different run counts) or a ratio is not a
    /// finite non-negative number.
    pub fn run_ratios(&self, base: &Record) -> Option<Vec<f64>> {
        if self.values.is_empty() || self.values.len() != base.values.len() {
            return None;
        }
        let ratios: Vec<f64> = self
            .values
            .iter()
            .zip(&base.values)
            .map(|(a, b)| a / b)
            .collect();
        ratios
            .iter()
            .all(|r| r.is_finite() && *r >= 0.0)
            .then_some(ratios)
    }
}

/// One allocator's figure over another's, run by run.
///
/// Runs are interleaved (run `i` of every allocator of a workload one after the other, see
/// `runner`), so value `i` of two records was measured minutes apart at most, and usually
/// within a second: the ratio of the two is taken run by run and the median of those ratios
/// is the figure. A shared machine's slow spells last longer than one round of a program
/// under every heap, so they fall on both values of a pair alike and cancel in its ratio,
/// where the median of each allocator's own runs keeps whichever spell its middle run hit.
/// Records without per-run values (files written before they were kept) or with different
/// run counts (a run that failed) give the ratio of the medians, `runs` 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunRatio {
    /// The median of the run-by-run ratios.
    pub median: f64,
    /// The smallest run's ratio.
    pub min: f64,
    /// The largest run's ratio.
    pub max: f64,
    /// The runs paired; 0 when the ratio is of the medians.
    pub runs: u32,
}

impl RunRatio {
    /// How far the run-by-run ratio moved: its largest over its smallest (1 for one run or
    /// for a ratio of medians).
    pub fn spread(&self) -> f64 {
        if self.min > 0.0 {
            self.max / self.min
        } else {
            f64::INFINITY
        }
    }

    /// Whether the runs were paired and every run's ratio lies below `limit`.
    pub fn every_run_below(&self, limit: f64) -> bool {
        self.runs > 0 && self.max < limit
    }
}

/// The median of values sorted in ascending order (the mean of the middle two for an even
/// count; 0 for none).
pub fn median_of_sorted(values: &[f64]) -> f64 {
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
impl ResultsFile {
    /// A file of `records` measured on a made-up machine with empty parameters, for tests.
    pub(crate) fn of_records(records: Vec<Record>) -> Self {
        ResultsFile {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            header: Header {
                machine: Machine {
                    cpu_model: "Test CPU".into(),
                    cores: 2,
                    memory_bytes: 1 << 30,
                    os: "linux".into(),
                    arch: "x86_64".into(),
                    kernel: "6.1.0".into(),
                },
                commit: "0000000".into(),
                commit_dirty: false,
                created_unix_s: 1_796_000_000,
                command: "alloclab suite".into(),
                parameters: Parameters {
                    scale: "small".into(),
                    runs: 3,
                    threads: vec![],
                    seed: 42,
                    suites: vec![],
                    allocators: vec![],
                },
                timer_overhead_ns: 20.0,
            },
            records,
            failures: Vec::new(),
            notes: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(value: f64) -> Sample {
        Sample {
            metric: "time".into(),
            unit: "ms".into(),
            value,
            lower_is_better: true,
        }
    }

    fn summarised(allocator: &str, values: &[f64]) -> Record {
        let samples: Vec<Sample> = values.iter().map(|&v| sample(v)).collect();
        Record::summarise("programs", "lua", allocator, 1, &samples)
    }

    #[test]
    fn a_ratio_pairs_the_runs_of_both_records_and_takes_the_median() {
        // A slow spell on runs 2 and 3 of both: the medians' ratio (100 / 60) is off, each
        // run's ratio is not.
        let ours = summarised("wfspan", &[50.0, 100.0, 105.0]);
        let base = summarised("libmimalloc", &[55.0, 110.0, 60.0]);
        let r = ours.ratio_to(&base).unwrap();
        assert_eq!(r.runs, 3);
        assert!((r.median - 100.0 / 110.0).abs() < 1e-12, "{r:?}");
        assert!((r.min - 50.0 / 55.0).abs() < 1e-12 && (r.max - 1.75).abs() < 1e-12);
        assert!((r.spread() - 1.75 / (50.0 / 55.0)).abs() < 1e-12);
        assert!(!r.every_run_below(1.0));
        assert!(r.every_run_below(1.8));
        // Without per-run values, or with a run missing on one side, the medians' ratio.
        let mut old = ours.clone();
        old.values.clear();
        let r = old.ratio_to(&base).unwrap();
        assert_eq!((r.median, r.runs, r.spread()), (100.0 / 60.0, 0, 1.0));
        assert!(
            !r.every_run_below(2.0),
            "unpaired runs say nothing run by run"
        );
        let short = summarised("wfspan", &[50.0, 100.0]);
        assert_eq!(short.ratio_to(&base).unwrap().runs, 0);
        // A base of zero gives no ratio.
        assert!(
            ours.ratio_to(&summarised("system", &[0.0, 0.0, 0.0]))
                .is_none()
        );
    }

    #[test]
    fn summary_takes_median_min_max_over_runs_and_keeps_each_in_order() {
        let r = Record::summarise(
            "cpu",
            "larson",
            "system",
            2,
            &[sample(3.0), sample(1.0), sample(2.0)],
        );
        assert_eq!((r.median, r.min, r.max, r.runs), (2.0, 1.0, 3.0, 3));
        assert_eq!(r.values, [3.0, 1.0, 2.0], "each run's value, in run order");
        let r = Record::summarise("cpu", "larson", "system", 2, &[sample(4.0), sample(1.0)]);
        assert_eq!((r.median, r.min, r.max, r.runs), (2.5, 1.0, 4.0, 2));
    }
}
