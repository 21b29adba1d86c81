//! Helpers of the harness's own tests.

/// Says on the process's stderr (past the test harness's capture, which hides what passing
/// tests print) that `test` could not run here and why, in the form `cargo xtask test`
/// counts: `SKIPPED: <test>: <reason>`.
pub(crate) fn skipped(test: &str, reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}
