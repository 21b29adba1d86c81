//! # alloclab-harness
//!
//! Runs workloads against allocators — alloclab's own and the ones people already use — and
//! reports the comparison. The binary is `alloclab` (see `alloclab --help`).
//!
//! * [`peers`]: the existing allocators as [`Allocator`](alloclab_core::Allocator)s, and the
//!   registry of every allocator the harness knows.
//! * [`workloads`]: the suites and their workloads (the `storage` suite's engines are the
//!   crate [`alloclab_storage_engines`]).
//! * [`pmem`]: persistent heaps (alloclab-pmem, PMDK, a DRAM baseline) behind one slot-based
//!   trait, for the `pmem` suite.
//! * [`measure`]: timer calibration and resident-set measurement.
//! * [`runner`]: runs each measurement in a fresh worker process and aggregates runs.
//! * [`results`]: the `results.json` format.
//! * [`report`]: `report.md` and the SVG charts.
//! * [`percall`]: `alloclab percall`, the cost of one allocator call through the C ABI and
//!   in-process.
//! * [`targets`]: the claims about alloclab's allocators, checked against a run's results.
//! * [`metrics`]: the metric names more than one part reads.
//! * [`machine`]: what machine a result was measured on.

pub mod exec;
pub mod machine;
pub mod measure;
pub mod metrics;
pub mod peers;
pub mod percall;
pub mod pmem;
pub mod report;
pub mod results;
pub mod runner;
pub mod targets;
pub mod workloads;

#[cfg(test)]
mod testing;

use std::path::Path;

/// Checks that `dir` can be created and written, before any minutes are spent measuring.
///
/// # Errors
///
/// One line naming the directory.
pub fn ensure_writable_dir(dir: &Path) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("cannot write to {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(format!(".alloclab-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Checks that `file` can be written: not a directory, in a directory that can be.
///
/// # Errors
///
/// One line naming the file.
pub fn ensure_writable_file(file: &Path) -> Result<(), String> {
    if file.is_dir() {
        return Err(format!(
            "cannot write to {}: it is a directory",
            file.display()
        ));
    }
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    ensure_writable_dir(parent)
}
