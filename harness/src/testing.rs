//! Helpers of the harness's own tests.

/// Says on the process's stderr (past the test harness's capture, which hides what passing
/// tests print) that `test` could not run here and why, in the form `cargo xtask test`
/// counts: `SKIPPED: <test>: <reason>`.
pub(crate) fn skipped(test: &str, reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}

/// A record of one run's summary with min = median = max, unit-less, lower is better: the
/// record the targets' and the report layouts' tests build their results from.
#[cfg(test)]
pub(crate) fn record(
    suite: &str,
    workload: &str,
    allocator: &str,
    threads: usize,
    metric: &str,
    median: f64,
) -> crate::results::Record {
    crate::results::Record {
        suite: suite.into(),
        workload: workload.into(),
        allocator: allocator.into(),
        threads,
        metric: metric.into(),
        unit: String::new(),
        median,
        min: median,
        max: median,
        runs: 3,
        values: Vec::new(),
        lower_is_better: true,
    }
}
