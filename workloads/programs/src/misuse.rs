//! The heap-misuse program: each case of the `security` suite's `misuse` workload as a C
//! program's bug, reaching the heap through `malloc`, `free` and `realloc` (no size at
//! free), under whatever heap is preloaded. One case a run, named by the first argument.
//!
//! How a run ends: after a case whose misuse is a memory access the program writes
//! [`ACCESS_DONE`] to standard output, so a memory fault before that line is a fault at the
//! access itself; a program still alive at the end writes [`SURVIVED`] and exits 0 (the
//! misuse went unnoticed); exit 1 means the heap refused an allocation the case needed,
//! exit 2 an unknown case.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::classic::{CompileError, Language, SingleSource, compile_single};

/// The program's source.
pub const SOURCE: &str = include_str!("../c/misuse.c");

/// What the program is compiled with: no optimisation that could drop or fold a misuse (a
/// store to freed memory, a `malloc` whose result only reaches `free`), no builtins that
/// would check a `memcpy` at compile time.
pub const CFLAGS: &[&str] = &["-std=gnu11", "-O1", "-fno-builtin", "-w"];

/// The line written after a bad access that did not fault.
pub const ACCESS_DONE: &str = "access done";

/// The line written by a program that ran to its end.
pub const SURVIVED: &str = "survived";

/// The exit status of a run whose heap refused an allocation the case needed.
pub const EXIT_NO_MEMORY: i32 = 1;

/// The exit status of a run given an unknown case.
pub const EXIT_USAGE: i32 = 2;

/// Writes [`SOURCE`] into `dir` (created if need be) and compiles it with `cc` and
/// [`CFLAGS`] into `dir/misuse`, unless that executable is newer than the source; returns
/// its path. The compiler writes to a temporary name renamed into place, so that two
/// processes compiling into one directory do not trip over each other.
///
/// # Errors
///
/// [`CompileError::NoCompiler`] if `cc` cannot be run, [`CompileError::Failed`] with the
/// compiler's message if it fails, [`CompileError::Io`] if a file cannot be written.
pub fn compile(dir: &Path, cc: &OsStr) -> Result<PathBuf, CompileError> {
    compile_single(
        dir,
        &SingleSource {
            program: "misuse",
            file: "misuse.c",
            text: SOURCE,
            compiler: cc,
            flags: CFLAGS,
            language: Language::C,
        },
    )
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::process::Command;

    use super::*;
    use crate::classic::modified;

    #[test]
    fn the_program_is_compiled_once_and_runs_its_cases_under_the_c_library() {
        let dir = std::env::temp_dir().join(format!("alloclab-misuse-test-{}", std::process::id()));
        let binary = match compile(&dir, "cc".as_ref()) {
            Ok(binary) => binary,
            Err(e) if e.is_missing_toolchain() => {
                eprintln!("SKIPPED: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let built = modified(&binary);
        // Up to date: not compiled again.
        assert_eq!(compile(&dir, "cc".as_ref()).unwrap(), binary);
        assert_eq!(modified(&binary), built);
        // A case the C library's malloc lets through runs to its end.
        let out = Command::new(&binary).arg("overflow_1").output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(SURVIVED),
            "{out:?}"
        );
        // An unknown case is refused.
        let out = Command::new(&binary).arg("no_such_case").output().unwrap();
        assert_eq!(out.status.code(), Some(EXIT_USAGE), "{out:?}");
        // No compiler: said so.
        let e = compile(&dir.join("other"), "alloclab-no-such-cc".as_ref()).unwrap_err();
        assert!(e.is_missing_toolchain(), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
