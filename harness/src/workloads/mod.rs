//! Suites and workloads.
//!
//! A workload is a fixed amount of work: it reports how long that work took (and the worker
//! around it measures the footprint). Every workload of a suite needs one
//! [`Capability`] from the allocators it runs on; `alloclab list` shows which fit which.

pub mod cpu;

use core::fmt;
use core::str::FromStr;
use core::time::Duration;

use crate::peers::Capability;

/// How much work a workload does. Small is the default for `alloclab suite`: the whole suite
/// runs in a few minutes on a 2-core machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// 1/64 of small: for tests and smoke runs, not for figures.
    Tiny,
    /// The default: a run takes tens to hundreds of milliseconds.
    #[default]
    Small,
    /// 4x small.
    Medium,
    /// 16x small.
    Large,
}

impl Scale {
    /// A count that is `small` at [`Scale::Small`], scaled for this scale (at least 1).
    pub fn scaled(self, small: u64) -> u64 {
        match self {
            Self::Tiny => (small / 64).max(1),
            Self::Small => small.max(1),
            Self::Medium => small.max(1) * 4,
            Self::Large => small.max(1) * 16,
        }
    }

    /// The name used on the command line and in results.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tiny => "tiny",
            Self::Small => "small",
            Self::Medium => "medium",
            Self::Large => "large",
        }
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scale {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tiny" => Ok(Self::Tiny),
            "small" => Ok(Self::Small),
            "medium" => Ok(Self::Medium),
            "large" => Ok(Self::Large),
            _ => Err(format!(
                "unknown scale '{s}' (expected tiny, small, medium or large)"
            )),
        }
    }
}

/// What a workload is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Amount of work.
    pub scale: Scale,
    /// Seed for every random choice the workload makes, so that all allocators see the same
    /// sequence of requests.
    pub seed: u64,
}

/// What one run of a workload measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measurement {
    /// Wall time of the measured part (setup such as spawning threads excluded).
    pub elapsed: Duration,
    /// Allocator operations performed (allocations + deallocations + reallocations).
    pub operations: u64,
    /// Timed samples taken (for the timer-overhead figure): the shortest sample is at most
    /// `elapsed`, and timing overhead is `samples` timer reads.
    pub samples: u64,
    /// The shortest timed sample.
    pub min_sample: Duration,
}

/// A workload as the registry describes it.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadInfo {
    /// Suite it belongs to (`cpu`, ...).
    pub suite: &'static str,
    /// Name on the command line.
    pub name: &'static str,
    /// One line: what it exercises.
    pub description: &'static str,
    /// What an allocator must offer to run it.
    pub requires: Capability,
}

/// Every suite, in the order `alloclab suite` runs them.
pub const SUITES: &[&str] = &["cpu"];

/// Every workload the harness knows.
pub fn all() -> &'static [WorkloadInfo] {
    cpu::WORKLOADS
}

/// Looks a workload up by name.
pub fn find(name: &str) -> Option<&'static WorkloadInfo> {
    all().iter().find(|w| w.name == name)
}
