//! The `misuse-c` workload: the cases of the `misuse` workload as a C program's bugs
//! ([`alloclab_programs::misuse`]), run under every heap a program can run on: alloclab's
//! and the peers' shared libraries through `LD_PRELOAD`, `system` with nothing preloaded.
//! This is how a user meets a heap's checks: through `malloc`, `free` and `realloc`, with no
//! size at free, in a process the heap did not set up.
//!
//! Each case is a fresh run of the program (`misuse CASE`), core dumps off, killed after
//! [`CASE_TIMEOUT`]. Verdicts as in the `misuse` workload: **caught** (`SIGABRT`, or a
//! `SIGSEGV`/`SIGBUS` at the bad access itself, before the program wrote
//! [`ACCESS_DONE`](alloclab_programs::misuse::ACCESS_DONE)), **crashed** (another signal, a
//! fault later on, or the heap refused an allocation the case needed), **hung**, **silent**
//! (it ran to its end). The samples are the `misuse` workload's: a score per case, `caught`
//! and `silent`.

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};

use alloclab_programs::misuse as program;
use alloclab_programs::process::{self, RunError, Spec};

use super::analysis::Verdict;
use super::child::Ended;
use super::misuse::{CASE_TIMEOUT, Case, Outcome, fault_at_access, samples};
use crate::peers::libraries;
use crate::results::Sample;

/// The workload's registry name.
pub const NAME: &str = "misuse-c";

/// The C compiler the program is built with.
const CC: &str = "cc";

/// What is missing to run the workload here (a C compiler), with the line that installs
/// it; `None` when it can run.
pub fn unavailable() -> Option<String> {
    process::find_program(CC).is_none().then(|| {
        format!(
            "no C compiler ({CC}): {}",
            alloclab_programs::classic::INSTALL_HINT
        )
    })
}

/// Compiles the program (once per version of its source) and runs every case under
/// `allocator`.
///
/// # Errors
///
/// One line: the allocator cannot be preloaded or its library is missing, the program does
/// not compile, or a run cannot be started.
pub fn run(allocator: &str) -> Result<Vec<Sample>, String> {
    let preload = libraries::resolve(allocator)?;
    let binary = program::compile(&binary_dir(), CC.as_ref()).map_err(|e| e.to_string())?;
    no_core_dumps();
    let outcomes = Case::ALL
        .into_iter()
        .map(|case| run_case(&binary, preload.as_deref(), case))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(samples(NAME, allocator, &outcomes))
}

/// Where the program is compiled: beside the classic benchmarks, one directory per version
/// of their sources and of this one.
fn binary_dir() -> PathBuf {
    let classic = alloclab_programs::catalog::classic_dir();
    let name = classic
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    classic.with_file_name(format!(
        "{name}-misuse-{:013x}",
        process::digest(program::SOURCE.as_bytes())
    ))
}

/// Core dumps off for this process and the runs it starts: a run that aborts as it should
/// must not leave a core file behind (or wait for one to be written).
fn no_core_dumps() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write the struct they are given; lowering the
    // soft limit under the hard one is always allowed. Where either fails, cores are written
    // as the system says: nothing else changes.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CORE, &mut limit) == 0 {
            limit.rlim_cur = 0;
            let _ = libc::setrlimit(libc::RLIMIT_CORE, &limit);
        }
    }
}

/// Runs one case and classifies how it ended.
fn run_case(binary: &Path, preload: Option<&Path>, case: Case) -> Result<Outcome, String> {
    let mut spec = Spec::new(binary, [case.name()]);
    spec.preload = preload.map(Path::to_owned);
    spec.timeout = CASE_TIMEOUT;
    let exit = match process::run(&spec) {
        Ok(exit) => exit,
        Err(RunError::TimedOut { .. }) => {
            let ended = Ended {
                status: 0,
                timed_out: true,
                data: Vec::new(),
                stderr: Vec::new(),
            };
            return Ok(Outcome {
                case,
                verdict: Verdict::Hung,
                ended: ended.describe(CASE_TIMEOUT),
                evidence: String::new(),
            });
        }
        Err(e) => return Err(format!("misuse case {}: {e}", case.name())),
    };
    let ended = Ended {
        status: exit.status.into_raw(),
        timed_out: false,
        data: exit.stdout,
        stderr: exit.stderr,
    };
    let verdict = classify(case, ended.status, &String::from_utf8_lossy(&ended.data))?;
    let mut how = ended.describe(CASE_TIMEOUT);
    match verdict {
        Verdict::Caught if libc::WIFSIGNALED(ended.status) && !is_abort(ended.status) => {
            how.push_str(" at the bad access");
        }
        Verdict::Crashed if !libc::WIFSIGNALED(ended.status) => {
            how.push_str(" (the heap refused an allocation)");
        }
        _ => {}
    }
    Ok(Outcome {
        case,
        verdict,
        ended: how,
        evidence: ended.first_stderr_line(),
    })
}

/// Whether the wait status `status` is a death by `SIGABRT`.
fn is_abort(status: i32) -> bool {
    libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGABRT
}

/// The verdict on a run of `case` that ended with the wait status `status` after writing
/// `stdout`.
///
/// # Errors
///
/// The program refused its arguments (exit 2): alloclab and its program disagree on the
/// cases.
fn classify(case: Case, status: i32, stdout: &str) -> Result<Verdict, String> {
    if libc::WIFSIGNALED(status) {
        let done = stdout.contains(program::ACCESS_DONE);
        return Ok(if is_abort(status) || fault_at_access(case, status, done) {
            Verdict::Caught
        } else {
            Verdict::Crashed
        });
    }
    match libc::WEXITSTATUS(status) {
        0 if stdout.contains(program::SURVIVED) => Ok(Verdict::Silent),
        // Exit 0 without the last line: something ended the program early (an `exit` in the
        // heap's error path): not silent.
        0 => Ok(Verdict::Caught),
        program::EXIT_NO_MEMORY => Ok(Verdict::Crashed),
        program::EXIT_USAGE => Err(format!(
            "the misuse program does not know the case {}",
            case.name()
        )),
        _ => Ok(Verdict::Caught),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signalled(signal: i32) -> i32 {
        signal
    }

    fn exited(code: i32) -> i32 {
        code << 8
    }

    #[test]
    fn a_run_is_judged_by_its_signal_its_exit_and_what_it_wrote() {
        let verdict = classify;
        assert_eq!(
            verdict(Case::DoubleFreeImmediate, signalled(libc::SIGABRT), ""),
            Ok(Verdict::Caught)
        );
        // A fault at the bad access is caught; after it, or in a case that is not an
        // access, a crash.
        assert_eq!(
            verdict(Case::WriteAfterFreeLarge, signalled(libc::SIGSEGV), ""),
            Ok(Verdict::Caught)
        );
        assert_eq!(
            verdict(
                Case::WriteAfterFreeLarge,
                signalled(libc::SIGSEGV),
                "access done\n"
            ),
            Ok(Verdict::Crashed)
        );
        assert_eq!(
            verdict(Case::DoubleFreeImmediate, signalled(libc::SIGSEGV), ""),
            Ok(Verdict::Crashed)
        );
        assert_eq!(
            verdict(Case::Overflow1, exited(0), "survived\n"),
            Ok(Verdict::Silent)
        );
        assert_eq!(verdict(Case::Overflow1, exited(0), ""), Ok(Verdict::Caught));
        assert_eq!(
            verdict(Case::Overflow1, exited(program::EXIT_NO_MEMORY), ""),
            Ok(Verdict::Crashed)
        );
        assert!(verdict(Case::Overflow1, exited(program::EXIT_USAGE), "").is_err());
    }

    #[test]
    fn every_case_runs_under_the_c_library_and_a_case_it_lets_through_reads_silent() {
        if let Some(missing) = unavailable() {
            eprintln!("SKIPPED: {missing}");
            return;
        }
        let samples = run("system").unwrap();
        let score = |name: &str| {
            samples
                .iter()
                .find(|s| s.metric == name)
                .map(|s| s.value)
                .unwrap_or_else(|| panic!("no sample {name}"))
        };
        for case in Case::ALL {
            assert!(
                Verdict::from_score(score(case.name())).is_some(),
                "{}",
                case.name()
            );
        }
        // glibc's malloc keeps no canary: a one-byte overflow into a block's slack is never
        // seen, and the program runs to its end.
        assert_eq!(score("overflow_1"), Verdict::Silent.score());
        // It checks a double free in its thread cache.
        assert_eq!(score("double_free_immediate"), Verdict::Caught.score());
        let counted = score("caught") + score("silent");
        assert!(counted <= Case::ALL.len() as f64);
    }
}
