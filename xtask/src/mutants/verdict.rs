//! What a mutant's test run says: which layer of the verification kit caught it, read from
//! the output of `cargo test` (libtest's report of each test binary, and cargo's of a
//! binary that died).

use serde::{Deserialize, Serialize};

/// The layer that caught a mutant, most specific first: a run where several failed is
/// credited to the first of these that did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// A test under `Checked` reported a bad transition (overlap, misalignment, double or
    /// foreign free, layout mismatch, a block not zeroed, counters inconsistent).
    Checked,
    /// A crash-consistency test (a test binary whose name says `crash` or `kill`) failed.
    CrashTest,
    /// A loom model failed (run only when every ordinary test passed).
    Loom,
    /// Another test's assertion failed.
    Assertion,
    /// A test binary died without a test failing: a signal, an abort, a stack overflow.
    CrashOrHang,
}

impl Layer {
    /// Every layer, in the order of credit.
    pub const ALL: [Layer; 5] = [
        Layer::Checked,
        Layer::CrashTest,
        Layer::Loom,
        Layer::Assertion,
        Layer::CrashOrHang,
    ];

    /// The layer's name in the summary and the table.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Checked => "checked",
            Layer::CrashTest => "crash-test",
            Layer::Loom => "loom",
            Layer::Assertion => "assertion",
            Layer::CrashOrHang => "crash-or-hang",
        }
    }
}

/// How one mutant ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "outcome", content = "layer")]
pub enum Outcome {
    /// A test failed: the mutant is caught, by this layer.
    Caught(Layer),
    /// Every test passed: no layer noticed the change.
    Missed,
    /// The tests ran past the time limit (a hang, or an infinite loop the change made).
    TimedOut,
    /// The mutated crate or its tests did not build.
    Unviable,
}

/// The beginnings of `Checked`'s violations (its `Violation`'s `Display`), which it panics
/// with after `Checked<allocator name>: `.
const CHECKED_MESSAGES: [&str; 4] = [
    "bad transition ",
    "bad allocate",
    "bad deallocate",
    "inconsistent stats",
];

/// What one `cargo test` run's output says failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failures {
    /// Tests libtest reported `FAILED`, as `binary::test`: those of crash-test binaries
    /// first (the layer they are credited to), the others in the order they ran.
    pub tests: Vec<String>,
    /// Whether a panic message of a failed test is a `Checked` violation.
    pub checked: bool,
    /// Whether a failed test is in a crash-test binary.
    pub crash_test: bool,
    /// Whether cargo reported a test binary that ended without libtest's report of a
    /// failure (killed by a signal, aborted).
    pub died: bool,
}

impl Failures {
    /// Reads the combined stdout and stderr of `cargo test`.
    pub fn read(output: &str) -> Self {
        let mut found = Failures::default();
        let mut crash_tests = 0;
        // The binary now running: cargo prints "Running tests/heap_crash.rs (target/...)"
        // or "Running unittests src/lib.rs (...)" before each.
        let mut binary = String::new();
        for line in output.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("Running ") {
                binary = binary_name(rest);
            } else if let Some(test) = line
                .strip_prefix("test ")
                .and_then(|t| t.strip_suffix(" ... FAILED"))
            {
                let name = format!("{binary}::{test}");
                if binary.contains("crash") || binary.contains("kill") {
                    found.crash_test = true;
                    found.tests.insert(crash_tests, name);
                    crash_tests += 1;
                } else {
                    found.tests.push(name);
                }
            } else if is_checked_violation(line) {
                found.checked = true;
            } else if line.contains("process didn't exit successfully")
                && (line.contains("signal:") || line.contains("SIGABRT"))
            {
                found.died = true;
            }
        }
        found
    }

    /// The layer these failures are credited to, if any test failed or died.
    pub fn layer(&self) -> Option<Layer> {
        if self.checked {
            Some(Layer::Checked)
        } else if self.crash_test {
            Some(Layer::CrashTest)
        } else if !self.tests.is_empty() {
            Some(Layer::Assertion)
        } else if self.died {
            Some(Layer::CrashOrHang)
        } else {
            None
        }
    }
}

/// Whether `line` is the message of a `Checked` panic: `Checked<name>: ` and a violation.
fn is_checked_violation(line: &str) -> bool {
    line.strip_prefix("Checked<")
        .and_then(|rest| rest.split_once(">: "))
        .is_some_and(|(_, message)| CHECKED_MESSAGES.iter().any(|m| message.starts_with(m)))
}

/// The test binary's name from the rest of cargo's "Running" line: `tests/heap_crash.rs
/// (target/...)` gives `heap_crash`, `unittests src/lib.rs (...)` gives `lib`.
fn binary_name(rest: &str) -> String {
    let path = rest
        .strip_prefix("unittests ")
        .unwrap_or(rest)
        .split_whitespace()
        .next()
        .unwrap_or("");
    let file = path.rsplit('/').next().unwrap_or(path);
    file.strip_suffix(".rs").unwrap_or(file).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSING: &str = "\
     Running unittests src/lib.rs (target/debug/deps/alloclab_wfspan-1234)
running 2 tests
test heap::tests::a ... ok
test heap::tests::b ... ok
test result: ok. 2 passed; 0 failed
";

    #[test]
    fn a_passing_run_has_no_failures() {
        let f = Failures::read(PASSING);
        assert_eq!(f, Failures::default());
        assert_eq!(f.layer(), None);
    }

    #[test]
    fn a_checked_violation_is_credited_to_checked_over_the_assertion_it_fails() {
        let out = format!(
            "{PASSING}     Running tests/allocator.rs (target/debug/deps/allocator-99)
test cross_thread_frees_under_checked_lose_nothing ... FAILED
failures:
---- cross_thread_frees_under_checked_lose_nothing stdout ----
thread 'cross_thread_frees_under_checked_lose_nothing' panicked at allocators/core/src/checked.rs:478:13:
Checked<wfspan>: bad transition Allocated -> Allocated on allocate: new block 0x10 (size 8, align 8) overlaps live block 0x10 (size 8, align 8)
"
        );
        let f = Failures::read(&out);
        assert_eq!(
            f.tests,
            ["allocator::cross_thread_frees_under_checked_lose_nothing"]
        );
        assert_eq!(f.layer(), Some(Layer::Checked));
    }

    #[test]
    fn only_checkeds_own_panic_message_counts_as_a_checked_catch() {
        assert!(is_checked_violation(
            "Checked<randomized>: bad deallocate: 0x10 freed with (size 8, align 8) but allocated with (size 16, align 8)"
        ));
        assert!(is_checked_violation(
            "Checked<x>: inconsistent stats: allocator reports live = 1, checker expects 0"
        ));
        // A test's own message that happens to use the words is not Checked's.
        assert!(!is_checked_violation("bad transition in my state machine"));
        assert!(!is_checked_violation("Checked<x>: something else"));
    }

    #[test]
    fn a_failure_in_a_crash_test_binary_is_a_crash_test_catch() {
        let out = "     Running tests/heap.rs (target/debug/deps/heap-5)
test round_trip ... FAILED
     Running tests/heap_crash.rs (target/debug/deps/heap_crash-77)
test recovery_keeps_every_returned_allocation ... FAILED
thread 'recovery_keeps_every_returned_allocation' panicked at allocators/pmem/tests/heap_crash.rs:300:5:
image 17: slot 3 lost its block
";
        let f = Failures::read(out);
        assert_eq!(f.layer(), Some(Layer::CrashTest));
        assert_eq!(
            f.tests,
            [
                "heap_crash::recovery_keeps_every_returned_allocation",
                "heap::round_trip"
            ]
        );
    }

    #[test]
    fn an_ordinary_assertion_is_an_assertion_catch() {
        let out = "     Running tests/misuse.rs (target/debug/deps/misuse-1)
test double_free_aborts ... FAILED
";
        let f = Failures::read(out);
        assert_eq!(f.tests, ["misuse::double_free_aborts"]);
        assert_eq!(f.layer(), Some(Layer::Assertion));
    }

    #[test]
    fn a_binary_killed_by_a_signal_is_a_crash() {
        let out = "     Running tests/allocator.rs (target/debug/deps/allocator-99)
running 12 tests
error: test failed, to rerun pass `--test allocator`
Caused by:
  process didn't exit successfully: `target/debug/deps/allocator-99` (signal: 11, SIGSEGV: invalid memory reference)
";
        let f = Failures::read(out);
        assert!(f.died && f.tests.is_empty());
        assert_eq!(f.layer(), Some(Layer::CrashOrHang));
    }

    #[test]
    fn binary_names_come_from_cargos_running_lines() {
        assert_eq!(
            binary_name("tests/heap_crash.rs (target/debug/deps/heap_crash-77)"),
            "heap_crash"
        );
        assert_eq!(binary_name("unittests src/lib.rs (target/x)"), "lib");
    }
}
