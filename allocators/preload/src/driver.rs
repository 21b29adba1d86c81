//! The integration tests every preload library runs, written once (feature `test-driver`).
//!
//! Each test takes the path of a built preload `.so`, runs real programs under
//! `LD_PRELOAD=<so>`, and panics (failing the calling `#[test]`) with the program's output
//! if anything is off. A test whose tool (`cc`, `python3`, `sqlite3`) is not installed
//! prints `SKIPPED: ...` to stderr and returns [`Outcome::Skipped`]; it never passes
//! without checking.
//!
//! A preload package's `tests/preload.rs` is one line, [`preload_tests!`](crate::preload_tests)
//! (the library's crate name, and the `name:` it gave `export_malloc_api!`); or it calls the
//! functions itself:
//!
//! ```no_run
//! use alloclab_preload::driver;
//!
//! #[test]
//! fn c_program_under_preload() {
//!     let so = driver::cdylib_beside_test_executable("alloclab_preload_testheap");
//!     let _ = driver::c_program_under_preload(&so, "testheap");
//! }
//! # fn main() {}
//! ```
//!
//! Why a feature of this crate rather than a file each package includes with `#[path]`:
//! the driver is compiled, documented and linted once, and a new preload package needs
//! only a dev-dependency with `features = ["test-driver"]`. Cargo unifies features within
//! a build, so the `.so` built for tests also contains the driver's code, unused and
//! unexported; release builds of the library do not.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use std::{env, fs, thread};

/// The C program [`c_program_under_preload`] compiles and runs.
pub const STRESS_C_SOURCE: &str = include_str!("driver/stress.c");

/// The C++ program [`cxx_program_under_preload`] compiles and runs.
pub const CXX_SOURCE: &str = include_str!("driver/cxx.cc");

/// The C program [`misuse_under_preload`] compiles and runs, once per case: the one the
/// harness's `misuse-c` workload runs under every heap, kept with the other C programs the
/// harness runs.
pub const MISUSE_C_SOURCE: &str = include_str!("../../../workloads/programs/c/misuse.c");

/// The cases of [`MISUSE_C_SOURCE`]: those of alloclab's `security` suite, by the same
/// names.
pub const MISUSE_CASES: [&str; 23] = [
    "double_free_immediate",
    "double_free_delayed",
    "double_free_interleaved",
    "invalid_free_stack",
    "invalid_free_unaligned",
    "invalid_free_interior",
    "invalid_free_mmap",
    "invalid_free_static",
    "overwrite_header",
    "overwrite_neighbour",
    "write_after_free",
    "write_after_free_large",
    "overflow_1",
    "overflow_32",
    "underflow_1",
    "underflow_32",
    "overflow_memcpy",
    "overflow_terminator",
    "overflow_large",
    "zero_size_write",
    "zero_size_read",
    "realloc_write_after_move",
    "realloc_overflow_after_shrink",
];

/// The C++ program [`cxx_misuse_under_preload`] compiles and runs, once per case.
pub const MISUSE_CXX_SOURCE: &str = include_str!("driver/misuse.cc");

/// The cases of [`MISUSE_CXX_SOURCE`].
pub const MISUSE_CXX_CASES: [&str; 3] = [
    "delete_of_new_array",
    "delete_array_of_new",
    "sized_delete_wrong_size",
];

/// How a misuse case of [`MISUSE_C_SOURCE`] or [`MISUSE_CXX_SOURCE`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MisuseEnd {
    /// Killed by `SIGABRT`, with the first line of its standard error.
    Aborted(String),
    /// Killed by `SIGSEGV` or `SIGBUS` at the bad access itself (before it said it was
    /// done): the heap had made that memory inaccessible.
    FaultedAtAccess,
    /// Killed otherwise, or by a fault elsewhere: how.
    Crashed(String),
    /// It ran to the end: the misuse went unnoticed.
    Survived,
}

impl MisuseEnd {
    /// Whether the heap stopped the misuse: an abort, or a fault at the access.
    pub fn caught(&self) -> bool {
        matches!(self, Self::Aborted(_) | Self::FaultedAtAccess)
    }
}

/// How long any one program may run before it is killed and the test fails (a deadlock in
/// the heap shows up as a timeout, not a hung test run).
pub const PROGRAM_TIMEOUT: Duration = Duration::from_secs(300);

/// Whether a test ran its checks or could not (a tool is missing).
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Outcome {
    /// Every check ran and held.
    Passed,
    /// The named tool is not installed; nothing was checked.
    Skipped(String),
}

/// The `lib<name>.so` that cargo built beside the running test executable.
///
/// Integration tests run from `target/<profile>/deps/<test>-<hash>`. Before running them
/// `cargo test` builds the package's library into that same `deps/` directory, provided
/// the library is linkable: a preload package declares `crate-type = ["cdylib", "rlib"]`,
/// because cargo does not build a cdylib-only library for integration tests. `deps/` is
/// looked at first, since `target/<profile>/lib<name>.so` is only refreshed by
/// `cargo build` and may be stale. `lib_name` is the library's crate name
/// (`alloclab_preload_testheap`).
///
/// # Panics
///
/// If the library is in neither place (with the places looked at).
pub fn cdylib_beside_test_executable(lib_name: &str) -> PathBuf {
    let exe = env::current_exe().expect("the test executable's path");
    let file = format!("lib{lib_name}.so");
    let deps = exe.parent().expect("the test executable is in a directory");
    let candidates: Vec<PathBuf> = [deps.join(&file)]
        .into_iter()
        .chain(deps.parent().map(|profile| profile.join(&file)))
        .collect();
    candidates
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{file} not found beside {} (looked at {candidates:?}); does the package \
                 have crate-type = [\"cdylib\", \"rlib\"]?",
                exe.display()
            )
        })
}

/// The `lib<name>.so` that `cargo build --profile <profile> -p <package>` built, in
/// `target/<profile>/` beside the running test executable's `target/<test profile>/`; `Err`
/// (after saying so on stderr, with the command that builds it) when it is not there.
/// `cargo test` cannot build it (it builds with the test profile), so `cargo xtask test`
/// builds it first.
pub fn cdylib_of_profile(lib_name: &str, package: &str, profile: &str) -> Result<PathBuf, Outcome> {
    let exe = env::current_exe().expect("the test executable's path");
    let file = format!("lib{lib_name}.so");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("the test executable is in target/<profile>/deps");
    let path = target.join(profile).join(&file);
    if path.is_file() {
        return Ok(path);
    }
    let reason = format!(
        "{} not built (cargo build --profile {profile} -p {package})",
        path.display()
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {file} of the {profile} profile: {reason}"
    );
    Err(Outcome::Skipped(reason))
}

/// Compiles [`STRESS_C_SOURCE`] with `cc` and runs it under `LD_PRELOAD=so`: the rules of
/// every exported function (return values, `errno`, alignment, zero sizes, overflow,
/// failed `realloc` leaving the block), the heap's statistics (`mallinfo2` counting a live
/// block and its free, `malloc_stats` writing the heap's figures), eight threads of mixed
/// allocation with content checks and cross-thread frees, and forks from a multi-threaded
/// process. Checks that the program printed `heap: <heap_name>` (the preload is in effect)
/// and that `malloc` resolved into the preloaded object.
///
/// # Panics
///
/// If the program fails to compile, exits non-zero, times out, or prints something else.
pub fn c_program_under_preload(so: &Path, heap_name: &str) -> Outcome {
    c_program_under_preload_with_env(so, heap_name, &[])
        .map_or_else(|skip| skip, |_| Outcome::Passed)
}

/// As [`c_program_under_preload`], with the variables `env` added to the program's
/// environment (a heap's settings); returns what the program wrote to standard error.
///
/// # Errors
///
/// [`Outcome::Skipped`] where `cc` is missing.
///
/// # Panics
///
/// As [`c_program_under_preload`].
pub fn c_program_under_preload_with_env(
    so: &Path,
    heap_name: &str,
    env: &[(&str, &str)],
) -> Result<String, Outcome> {
    if let Some(skip) = require_tools("c_program_under_preload", &["cc"]) {
        return Err(skip);
    }
    let dir = ScratchDir::new("c-program");
    let source = dir.path().join("stress.c");
    let binary = dir.path().join("stress");
    fs::write(&source, STRESS_C_SOURCE).expect("write stress.c");
    let compiled = run(Command::new("cc")
        .args([
            "-std=gnu11",
            "-O2",
            "-g",
            "-Wall",
            "-fno-builtin",
            "-pthread",
            "-o",
        ])
        .arg(&binary)
        .arg(&source)
        .arg("-ldl"));
    assert_success("cc stress.c", &compiled);

    let ran = run(preloaded(
        Command::new(&binary).envs(env.iter().copied()),
        so,
    ));
    assert_success("stress under LD_PRELOAD", &ran);
    let expected = [
        format!("heap: {heap_name}"),
        "malloc from preload: yes".to_owned(),
        "rules: ok".to_owned(),
        "glibc aliases: ok".to_owned(),
        "statistics: ok".to_owned(),
        "stress: ok threads=8 ops=200000".to_owned(),
        "fork: ok forks=16".to_owned(),
        "all ok".to_owned(),
    ];
    assert_lines("stress under LD_PRELOAD", &ran, &expected);
    // `malloc_stats` is the heap's, not glibc's (which would say `Arena 0:`).
    assert!(
        ran.stderr
            .contains(&format!("alloclab {heap_name}:\nsystem bytes     = "))
            && ran.stderr.contains("\nin use bytes     = "),
        "malloc_stats under LD_PRELOAD wrote something else:\n{}",
        ran.stderr
    );
    Ok(ran.stderr)
}

/// Compiles [`CXX_SOURCE`] with `c++ -std=c++17` and runs it under `LD_PRELOAD=so`: every
/// form of `operator new` and `operator delete` must resolve to the preload library, give
/// aligned, usable blocks and free them (sizes up to 3 MB, alignments up to 2 MiB, a wrong
/// size at sized delete included); a failed allocation must call the new handler until it
/// is uninstalled and then throw `std::bad_alloc`, and the `nothrow` forms return null;
/// four threads delete each other's blocks.
///
/// # Panics
///
/// If the program fails to compile, exits non-zero, times out, or prints something else.
pub fn cxx_program_under_preload(so: &Path) -> Outcome {
    if let Some(skip) = require_tools("cxx_program_under_preload", &["c++"]) {
        return skip;
    }
    let dir = ScratchDir::new("cxx-program");
    let source = dir.path().join("cxx.cc");
    let binary = dir.path().join("cxx");
    fs::write(&source, CXX_SOURCE).expect("write cxx.cc");
    let compiled = run(Command::new("c++")
        .args(["-std=c++17", "-O2", "-Wall", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .arg("-ldl"));
    assert_success("c++ cxx.cc", &compiled);
    let library = so
        .file_stem()
        .and_then(OsStr::to_str)
        .expect("the library's file name is UTF-8");
    let ran = run(preloaded(Command::new(&binary).arg(library), so));
    assert_success("cxx under LD_PRELOAD", &ran);
    let expected = [
        "symbols: ok 20".to_owned(),
        "forms: ok".to_owned(),
        "failure: ok handler_calls=3".to_owned(),
        "threads: ok 4".to_owned(),
        "all ok".to_owned(),
    ];
    assert_lines("cxx under LD_PRELOAD", &ran, &expected);
    Outcome::Passed
}

/// The Python program [`python_under_preload`] runs: a 100 000-entry dict, a JSON round
/// trip, sorting; prints a digest of the results and which heap `ctypes` finds.
pub const PYTHON_SOURCE: &str = r#"
import ctypes, hashlib, json, random
try:
    marker = ctypes.CDLL(None).alloclab_preload_heap_name
    marker.restype = ctypes.c_char_p
    heap = marker().decode()
except AttributeError:
    heap = "none"
print("heap:", heap)
d = {f"key{i}": [i, i * i, "v" * (i % 37), {"odd": i % 2 == 1}] for i in range(100_000)}
text = json.dumps(d, sort_keys=True)
back = json.loads(text)
assert back == d, "json round trip changed the dict"
keys = list(back)
random.Random(7).shuffle(keys)
keys.sort(key=lambda k: (back[k][1] % 1009, k))
words = sorted(("x" * (i % 50) + str(i) for i in range(50_000)), reverse=True)
digest = hashlib.sha256(("".join(keys[:1000]) + "".join(words[:1000])).encode()).hexdigest()
print("work:", len(back), len(text), keys[0], keys[-1], words[0], digest)
"#;

/// Runs [`PYTHON_SOURCE`] with `python3 -c`, first without the preload (the oracle) and
/// then under `LD_PRELOAD=so`: both must exit 0 and print the same `work:` line, and the
/// preloaded run must report `heap: <heap_name>`.
///
/// # Panics
///
/// If either run fails or the outputs differ.
pub fn python_under_preload(so: &Path, heap_name: &str) -> Outcome {
    if let Some(skip) = require_tools("python_under_preload", &["python3"]) {
        return skip;
    }
    let oracle = run(Command::new("python3").args(["-c", PYTHON_SOURCE]));
    assert_success("python3 without preload", &oracle);
    assert_lines("python3 without preload", &oracle, &["heap: none"]);
    let work = oracle
        .stdout
        .lines()
        .find(|line| line.starts_with("work: "))
        .expect("the oracle run prints its work line")
        .to_owned();

    let ran = run(preloaded(
        Command::new("python3").args(["-c", PYTHON_SOURCE]),
        so,
    ));
    assert_success("python3 under LD_PRELOAD", &ran);
    assert_lines(
        "python3 under LD_PRELOAD",
        &ran,
        &[format!("heap: {heap_name}"), work],
    );
    Outcome::Passed
}

/// Rows [`sqlite3_under_preload`] inserts.
pub const SQLITE_ROWS: u64 = 10_000;

/// Runs the `sqlite3` shell under `LD_PRELOAD=so` on a database file: creates a table,
/// inserts [`SQLITE_ROWS`] rows (one `INSERT` each) in a transaction, builds an index, and
/// checks the answers of aggregate, indexed and range queries and of
/// `PRAGMA integrity_check` against values computed here. The shell's `.shell` command
/// confirms from inside the process that the `.so` is mapped.
///
/// # Panics
///
/// If `sqlite3` fails or prints anything else.
pub fn sqlite3_under_preload(so: &Path) -> Outcome {
    if let Some(skip) = require_tools("sqlite3_under_preload", &["sqlite3"]) {
        return skip;
    }
    let dir = ScratchDir::new("sqlite3");
    let database = dir.path().join("test.db");
    let v = |i: u64| (i * 7919) % 10_007;
    let payload_len = |i: u64| i % 200;

    let so_name = so
        .file_name()
        .and_then(OsStr::to_str)
        .expect("a UTF-8 file name");
    let mut script = String::new();
    script
        .push_str("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v INTEGER, payload TEXT);\n");
    script.push_str("BEGIN;\n");
    for i in 1..=SQLITE_ROWS {
        let payload = "p".repeat(payload_len(i) as usize);
        writeln!(
            script,
            "INSERT INTO t VALUES({i}, 'row-{i:05}', {}, '{payload}');",
            v(i)
        )
        .expect("write to a String");
    }
    script.push_str("COMMIT;\n");
    script.push_str("CREATE INDEX t_v ON t(v);\n");
    script.push_str(
        "SELECT 'count', count(*), sum(v), sum(length(payload)), min(name), max(name) FROM t;\n",
    );
    // INDEXED BY fails the statement if the index is unusable.
    script.push_str("SELECT 'low', count(*), sum(id) FROM t INDEXED BY t_v WHERE v < 500;\n");
    script.push_str("SELECT 'at', id, name FROM t INDEXED BY t_v WHERE v = 5000;\n");
    script.push_str("SELECT 'range', group_concat(id) FROM (SELECT id FROM t WHERE v BETWEEN 100 AND 104 ORDER BY v);\n");
    script.push_str("PRAGMA integrity_check;\n");
    writeln!(
        script,
        ".shell grep -q {so_name} /proc/$PPID/maps && echo preload-mapped || echo preload-missing"
    )
    .expect("write to a String");

    let rows = 1..=SQLITE_ROWS;
    let sum_v: u64 = rows.clone().map(v).sum();
    let sum_payload: u64 = rows.clone().map(payload_len).sum();
    let low: Vec<u64> = rows.clone().filter(|&i| v(i) < 500).collect();
    let at: Vec<u64> = rows.clone().filter(|&i| v(i) == 5000).collect();
    let mut range: Vec<u64> = rows.filter(|&i| (100..=104).contains(&v(i))).collect();
    range.sort_by_key(|&i| v(i));
    let mut expected = vec![
        format!("count|{SQLITE_ROWS}|{sum_v}|{sum_payload}|row-00001|row-{SQLITE_ROWS:05}"),
        format!("low|{}|{}", low.len(), low.iter().sum::<u64>()),
    ];
    expected.extend(at.iter().map(|i| format!("at|{i}|row-{i:05}")));
    expected.push(format!(
        "range|{}",
        range
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    ));
    expected.push("ok".to_owned());
    expected.push("preload-mapped".to_owned());

    let ran = run_with_stdin(
        preloaded(Command::new("sqlite3").arg("-bail").arg(&database), so),
        script.as_bytes(),
    );
    assert_success("sqlite3 under LD_PRELOAD", &ran);
    let actual: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(
        actual,
        expected.iter().map(String::as_str).collect::<Vec<_>>(),
        "sqlite3 under LD_PRELOAD printed something else; stderr:\n{}",
        ran.stderr
    );
    Outcome::Passed
}

/// Defines the preload tests ([`c_program_under_preload`], [`python_under_preload`],
/// [`sqlite3_under_preload`]) as `#[test]` functions for one preload library, in its
/// package's `tests/preload.rs`:
///
/// ```no_run
/// alloclab_preload::preload_tests!(lib: "alloclab_preload_wfspan", heap: "wfspan");
/// # fn main() {}
/// ```
///
/// `lib` is the library's crate name (the `.so` is `lib<lib>.so` beside the test
/// executable); `heap` is the `name:` given to
/// [`export_malloc_api!`](crate::export_malloc_api).
///
/// With `profile:` and `package:`, the tests run against the library as
/// [`cdylib_of_profile`] finds it (built with that cargo profile), and are skipped, saying
/// so, when it has not been built.
#[macro_export]
macro_rules! preload_tests {
    (lib: $lib:literal, heap: $heap:literal $(,)?) => {
        fn preloaded_library() -> ::core::option::Option<::std::path::PathBuf> {
            ::core::option::Option::Some($crate::driver::cdylib_beside_test_executable($lib))
        }
        $crate::preload_tests!(@tests $heap);
    };
    (lib: $lib:literal, heap: $heap:literal, profile: $profile:literal,
        package: $package:literal $(,)?) => {
        fn preloaded_library() -> ::core::option::Option<::std::path::PathBuf> {
            $crate::driver::cdylib_of_profile($lib, $package, $profile).ok()
        }
        $crate::preload_tests!(@tests $heap);
    };
    (@tests $heap:literal) => {
        #[test]
        fn c_program_under_preload_keeps_every_rule_and_survives_threads_and_fork() {
            if let ::core::option::Option::Some(so) = preloaded_library() {
                let _ = $crate::driver::c_program_under_preload(&so, $heap);
            }
        }

        #[test]
        fn cxx_program_under_preload_gets_every_operator_new_and_delete_from_the_heap() {
            if let ::core::option::Option::Some(so) = preloaded_library() {
                let _ = $crate::driver::cxx_program_under_preload(&so);
            }
        }

        #[test]
        fn python_under_preload_computes_what_it_computes_without() {
            if let ::core::option::Option::Some(so) = preloaded_library() {
                let _ = $crate::driver::python_under_preload(&so, $heap);
            }
        }

        #[test]
        fn sqlite3_under_preload_answers_queries_correctly() {
            if let ::core::option::Option::Some(so) = preloaded_library() {
                let _ = $crate::driver::sqlite3_under_preload(&so);
            }
        }
    };
}

/// Compiles [`MISUSE_C_SOURCE`] and runs each case of [`MISUSE_CASES`] under
/// `LD_PRELOAD=so` (core dumps off), returning how each ended. `Err` (after saying so on
/// stderr) if `cc` is not installed.
///
/// # Panics
///
/// If the program fails to compile, or a case exits with a status other than 0.
pub fn misuse_under_preload(so: &Path) -> Result<Vec<(&'static str, MisuseEnd)>, Outcome> {
    misuse_cases(
        so,
        ("cc", &["-std=gnu11", "-O1", "-fno-builtin", "-w"]),
        ("misuse.c", MISUSE_C_SOURCE),
        &MISUSE_CASES,
    )
}

/// Compiles [`MISUSE_CXX_SOURCE`] (with `c++ -O0`) and runs each case of
/// [`MISUSE_CXX_CASES`] under `LD_PRELOAD=so`, as [`misuse_under_preload`] does.
///
/// # Panics
///
/// As [`misuse_under_preload`].
pub fn cxx_misuse_under_preload(so: &Path) -> Result<Vec<(&'static str, MisuseEnd)>, Outcome> {
    misuse_cases(
        so,
        ("c++", &["-std=c++17", "-O0", "-w"]),
        ("misuse.cc", MISUSE_CXX_SOURCE),
        &MISUSE_CXX_CASES,
    )
}

/// Compiles `source` (a file name and its text) with `compiler` and its flags, and runs
/// it once per case under `LD_PRELOAD=so`, core dumps off.
fn misuse_cases(
    so: &Path,
    (compiler, flags): (&str, &[&str]),
    (name, text): (&str, &str),
    cases: &[&'static str],
) -> Result<Vec<(&'static str, MisuseEnd)>, Outcome> {
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    if let Some(skip) = require_tools(&format!("misuse cases of {name}"), &[compiler]) {
        return Err(skip);
    }
    let dir = ScratchDir::new("misuse");
    let source = dir.path().join(name);
    let binary = dir.path().join("misuse");
    fs::write(&source, text).expect("write the misuse program");
    let compiled = run(Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&binary)
        .arg(&source));
    assert_success(&format!("{compiler} {name}"), &compiled);
    let ends = cases
        .iter()
        .map(|&case| {
            let mut command = Command::new(&binary);
            command.arg(case);
            // SAFETY: the closure runs in the child between fork and exec and only calls
            // `setrlimit`, which is async-signal-safe.
            unsafe {
                command.pre_exec(|| {
                    let none = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    libc::setrlimit(libc::RLIMIT_CORE, &none);
                    Ok(())
                });
            }
            let ran = run(preloaded(&mut command, so));
            let first_line = ran.stderr.lines().next().unwrap_or("").to_owned();
            let end = match ran.status.signal() {
                Some(libc::SIGABRT) => MisuseEnd::Aborted(first_line),
                Some(libc::SIGSEGV | libc::SIGBUS) if !ran.stdout.contains("access done") => {
                    MisuseEnd::FaultedAtAccess
                }
                Some(signal) => MisuseEnd::Crashed(format!("signal {signal}: {first_line}")),
                None => {
                    assert!(
                        ran.status.success() && ran.stdout.contains("survived"),
                        "misuse {case} ended with {}: {}",
                        ran.status,
                        ran.stderr
                    );
                    MisuseEnd::Survived
                }
            };
            (case, end)
        })
        .collect();
    Ok(ends)
}

/// What a finished program printed.
#[derive(Debug)]
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

fn preloaded<'c>(command: &'c mut Command, so: &Path) -> &'c mut Command {
    command.env("LD_PRELOAD", so)
}

fn run(command: &mut Command) -> Finished {
    run_with_stdin(command, b"")
}

/// Runs `command` with `stdin` as its input, collecting its output, killing it after
/// [`PROGRAM_TIMEOUT`].
fn run_with_stdin(command: &mut Command, stdin: &[u8]) -> Finished {
    let what = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let input = stdin.to_vec();
    let mut pipe_in = child.stdin.take().expect("piped stdin");
    let writer = thread::spawn(move || {
        // A program that exits early closes its end; that shows in its status instead.
        let _ = pipe_in.write_all(&input);
    });
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the program") {
            break status;
        }
        if started.elapsed() > PROGRAM_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} ran for more than {PROGRAM_TIMEOUT:?} (deadlock?); stdout so far:\n{}",
                stdout.join().unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    Finished {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn assert_success(what: &str, finished: &Finished) {
    assert!(
        finished.status.success(),
        "{what} failed ({}).\nstdout:\n{}\nstderr:\n{}",
        finished.status,
        finished.stdout,
        finished.stderr
    );
}

/// Every line of `expected` appears, in order, among the lines of stdout.
fn assert_lines(what: &str, finished: &Finished, expected: &[impl AsRef<str>]) {
    let mut lines = finished.stdout.lines();
    for want in expected {
        let want = want.as_ref();
        assert!(
            lines.any(|line| line == want),
            "{what}: expected the line {want:?} (in order).\nstdout:\n{}\nstderr:\n{}",
            finished.stdout,
            finished.stderr
        );
    }
}

/// `Some(Skipped)` (after saying so on stderr) if any of `tools` is not on `PATH`.
fn require_tools(test: &str, tools: &[&str]) -> Option<Outcome> {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|tool| !on_path(tool))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let reason = format!("{} not installed", missing.join(", "));
    // Written to the process's stderr directly: the test harness captures `eprintln!` of
    // passing tests, and a skip must be seen.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
    Some(Outcome::Skipped(reason))
}

fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    env::var_os("PATH").is_some_and(|path| {
        env::split_paths(&path).any(|dir| {
            fs::metadata(dir.join(tool))
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
    })
}

/// A fresh directory under the system temporary directory, removed on drop unless the
/// test is failing (then it is kept, and named, for a look at what was run).
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(tag: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let path = env::temp_dir().join(format!(
            "alloclab-preload-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("kept {} for inspection", self.0.display());
        } else {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}
