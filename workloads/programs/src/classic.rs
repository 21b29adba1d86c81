//! C versions of the eight classic allocator benchmarks of the harness's `cpu` suite.
//!
//! The `cpu` suite runs larson, xmalloc-test, cache-scratch, cache-thrash, glibc-simple,
//! glibc-thread, mstress and rptest in-process, through a Rust trait. The programs here are
//! the same eight written in C: compiled with the system's `cc` and run as real programs, they
//! reach any malloc through `LD_PRELOAD` (`malloc` and `free` with no size at free, threads
//! from pthreads). Each uses the Rust workload's parameters, generator (rand's `SmallRng`,
//! bit for bit) and tables, so that both make the same requests in the same order on every
//! thread, and times the same phase; each file's header comment states what it does
//! differently, and `bench.h`'s what they all do.
//!
//! Every program takes `THREADS SCALE SEED` (`SCALE` one of `tiny`, `small`, `medium`,
//! `large`, with the meaning of the harness's `Scale`), and on success exits 0 and writes
//!
//! * one line on standard output, the same for given arguments whatever the allocator and
//!   the thread interleaving (see [`parse_output`]):
//!   `WORKLOAD threads=T scale=S seed=X operations=N checksum=0x%016x`, where `operations`
//!   counts allocator calls as the Rust workload counts them and `checksum` hashes the
//!   sizes asked for and the tags written into the blocks and read back when they are freed;
//! * one line `alloclab-time-ms MS` on standard error: the measured phase in milliseconds.
//!
//! Bad arguments exit 2 with a usage line; a failed malloc exits 1 naming the size.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, SystemTime};

/// One classic benchmark's C source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassicProgram {
    /// The workload's name, the same as the `cpu` suite's; also the name of the executable
    /// [`compile`] builds, and the first word of the program's output line.
    pub name: &'static str,
    /// The C source (it includes `bench.h`, [`BENCH_H`]).
    pub source: &'static str,
}

/// The header every program includes: the generator, the tables, the timed thread team,
/// the ring of queues, the touch, argument parsing and the output lines.
pub const BENCH_H: &str = include_str!("../c/bench.h");

/// The eight programs, in the `cpu` suite's registry order.
pub const CLASSIC: &[ClassicProgram] = &[
    ClassicProgram {
        name: "larson",
        source: include_str!("../c/larson.c"),
    },
    ClassicProgram {
        name: "xmalloc-test",
        source: include_str!("../c/xmalloc-test.c"),
    },
    ClassicProgram {
        name: "cache-scratch",
        source: include_str!("../c/cache-scratch.c"),
    },
    ClassicProgram {
        name: "cache-thrash",
        source: include_str!("../c/cache-thrash.c"),
    },
    ClassicProgram {
        name: "glibc-simple",
        source: include_str!("../c/glibc-simple.c"),
    },
    ClassicProgram {
        name: "glibc-thread",
        source: include_str!("../c/glibc-thread.c"),
    },
    ClassicProgram {
        name: "mstress",
        source: include_str!("../c/mstress.c"),
    },
    ClassicProgram {
        name: "rptest",
        source: include_str!("../c/rptest.c"),
    },
];

/// The compiler flags [`compile`] uses (the sources also build warning-free with
/// `-Werror`; it is left out so that a newer compiler's new warnings cannot stop a run).
pub const CFLAGS: &[&str] = &["-O2", "-pthread", "-std=gnu11", "-Wall", "-Wextra"];

/// What to install when there is no C compiler, or no C library headers.
pub const INSTALL_HINT: &str = "apt-get install -y gcc libc6-dev";

/// The language a program is written in, which says what compiles it and what to install
/// when that is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    /// C, compiled with `cc` ([`INSTALL_HINT`]).
    C,
    /// C++, compiled with `c++` ([`CXX_INSTALL_HINT`](crate::percall::CXX_INSTALL_HINT)).
    Cxx,
}

impl Language {
    /// `C` or `C++`.
    pub fn name(self) -> &'static str {
        match self {
            Self::C => "C",
            Self::Cxx => "C++",
        }
    }

    /// The extension of a source file: `c` or `cc`.
    pub fn extension(self) -> &'static str {
        match self {
            Self::C => "c",
            Self::Cxx => "cc",
        }
    }

    /// The command that installs the compiler and the standard library's headers.
    pub fn install_hint(self) -> &'static str {
        match self {
            Self::C => INSTALL_HINT,
            Self::Cxx => crate::percall::CXX_INSTALL_HINT,
        }
    }
}

/// The prefix of the time line a program writes on standard error.
pub const TIME_PREFIX: &str = "alloclab-time-ms ";

/// The program of [`CLASSIC`] called `name`.
pub fn find(name: &str) -> Option<&'static ClassicProgram> {
    CLASSIC.iter().find(|c| c.name == name)
}

/// Why [`compile`] failed.
#[derive(Debug)]
pub enum CompileError {
    /// The compiler could not be started: it is not installed (or not where it was said
    /// to be).
    NoCompiler {
        /// The compiler that was asked for.
        cc: OsString,
        /// The language it compiles.
        language: Language,
    },
    /// The compiler ran and failed on a program.
    Failed {
        /// The program it failed on.
        program: &'static str,
        /// The program's language.
        language: Language,
        /// How the compiler exited.
        status: ExitStatus,
        /// What it wrote on standard error.
        stderr: String,
    },
    /// A source, a binary or the directory could not be written, or the compiler could not
    /// be started for a reason other than its absence.
    Io {
        /// The file or directory concerned (the compiler, when it could not be started).
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl CompileError {
    /// Whether the failure is a missing compiler or missing standard library headers, which
    /// the language's install hint ([`INSTALL_HINT`] for C) fixes, rather than a broken
    /// source.
    pub fn is_missing_toolchain(&self) -> bool {
        match self {
            Self::NoCompiler { .. } => true,
            Self::Failed { stderr, .. } => missing_header(stderr),
            Self::Io { .. } => false,
        }
    }
}

/// Whether a compiler's message says that a system header is missing (no libc6-dev, no
/// libstdc++-dev: C++'s headers have no `.h`, `fatal error: new: No such file or directory`).
fn missing_header(stderr: &str) -> bool {
    stderr
        .lines()
        .any(|l| l.contains("fatal error:") && l.contains(": No such file"))
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoCompiler { cc, language } => write!(
                f,
                "no {} compiler: `{}` cannot be run (install one with `{}`)",
                language.name(),
                cc.to_string_lossy(),
                language.install_hint()
            ),
            Self::Failed {
                program,
                language,
                status,
                stderr,
            } => {
                write!(
                    f,
                    "the {} compiler failed on {program}.{} ({status})",
                    language.name(),
                    language.extension()
                )?;
                if missing_header(stderr) {
                    write!(
                        f,
                        "; the {} library headers are missing (`{}`)",
                        language.name(),
                        language.install_hint()
                    )?;
                }
                write!(f, ":\n{}", stderr.trim_end())
            }
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for CompileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> CompileError + '_ {
    move |source| CompileError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes `text` to `path` unless the file already holds it (so that its modification time,
/// which says whether the binary is stale, moves only when the text does). The new text goes
/// to a temporary file first and is renamed into place, so that a concurrent compile never
/// reads half a file.
pub(crate) fn write_if_changed(path: &Path, text: &str) -> Result<(), CompileError> {
    if fs::read(path).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(());
    }
    let tmp = temp_name(path);
    fs::write(&tmp, text).map_err(io_error(&tmp))?;
    fs::rename(&tmp, path).map_err(io_error(path))
}

/// A name next to `path` that no other process uses.
pub(crate) fn temp_name(path: &Path) -> PathBuf {
    let mut name = OsString::from(".");
    name.push(path.file_name().unwrap_or_else(|| OsStr::new("file")));
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

/// When `path` was last written, if it exists.
pub(crate) fn modified(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The command that compiles `source` with `compiler` and `flags` into `out`: nothing on
/// its standard input or output, its messages on a pipe.
fn compiler_command(compiler: &OsStr, flags: &[&str], out: &Path, source: &Path) -> Command {
    let mut command = Command::new(compiler);
    command
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(source)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Why `compiler` (of `language`) could not be started: not installed, or another error.
fn start_error(compiler: &OsStr, language: Language, e: io::Error) -> CompileError {
    if e.kind() == io::ErrorKind::NotFound {
        CompileError::NoCompiler {
            cc: compiler.to_owned(),
            language,
        }
    } else {
        CompileError::Io {
            path: PathBuf::from(compiler),
            source: e,
        }
    }
}

/// One program of one source file: its name (the executable's), the source's file name and
/// text, the compiler, its flags and the language.
pub(crate) struct SingleSource<'a> {
    pub(crate) program: &'static str,
    pub(crate) file: &'a str,
    pub(crate) text: &'a str,
    pub(crate) compiler: &'a OsStr,
    pub(crate) flags: &'a [&'a str],
    pub(crate) language: Language,
}

/// Writes the source into `dir` (created if need be) and compiles it into `dir/<program>`,
/// returning the executable's path. An executable newer than its source is kept as it is;
/// the source is rewritten only when its text changed; the compiler writes a temporary name
/// that is renamed into place, so that two processes compiling into one directory do not
/// trip over each other.
///
/// # Errors
///
/// [`CompileError::NoCompiler`] if the compiler cannot be run, [`CompileError::Failed`] with
/// its message if it fails, [`CompileError::Io`] if a file cannot be written.
pub(crate) fn compile_single(dir: &Path, what: &SingleSource<'_>) -> Result<PathBuf, CompileError> {
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    let source = dir.join(what.file);
    write_if_changed(&source, what.text)?;
    let binary = dir.join(what.program);
    if let (Some(built), Some(written)) = (modified(&binary), modified(&source))
        && built > written
    {
        return Ok(binary);
    }
    let tmp = temp_name(&binary);
    let output = compiler_command(what.compiler, what.flags, &tmp, &source)
        .output()
        .map_err(|e| start_error(what.compiler, what.language, e))?;
    if !output.status.success() {
        let _ = fs::remove_file(&tmp);
        return Err(CompileError::Failed {
            program: what.program,
            language: what.language,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    fs::rename(&tmp, &binary).map_err(io_error(&binary))?;
    Ok(binary)
}

/// A compile in progress: the program, its temporary output and the compiler process.
struct Job {
    program: &'static ClassicProgram,
    tmp: PathBuf,
    binary: PathBuf,
    child: Child,
}

/// Writes [`BENCH_H`] and the sources of [`CLASSIC`] into `dir` (created if need be) and
/// compiles each with `cc` and [`CFLAGS`] into an executable named after it, returning the
/// executables' paths in [`CLASSIC`] order.
///
/// An executable newer than both its source and `bench.h` is kept as it is, so a repeated
/// call costs a few `stat`s; sources are rewritten only when their text changed. The stale
/// ones are compiled concurrently, each to a temporary name renamed into place, so that two
/// processes compiling into one directory do not trip over each other.
///
/// # Errors
///
/// [`CompileError::NoCompiler`] if `cc` cannot be run, [`CompileError::Failed`] with the
/// compiler's message if it fails on a program (the first that failed), and
/// [`CompileError::Io`] if a file cannot be written.
pub fn compile(dir: &Path, cc: &OsStr) -> Result<Vec<PathBuf>, CompileError> {
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    let header = dir.join("bench.h");
    write_if_changed(&header, BENCH_H)?;
    let header_time = modified(&header);
    let mut binaries = Vec::with_capacity(CLASSIC.len());
    let mut stale = Vec::new();
    for program in CLASSIC {
        let source = dir.join(format!("{}.c", program.name));
        write_if_changed(&source, program.source)?;
        let binary = dir.join(program.name);
        let newest_input = modified(&source).max(header_time);
        let fresh = match (modified(&binary), newest_input) {
            (Some(built), Some(input)) => built > input,
            _ => false,
        };
        if !fresh {
            stale.push((program, source, binary.clone()));
        }
        binaries.push(binary);
    }

    let mut jobs = Vec::with_capacity(stale.len());
    let mut first_error = None;
    for (program, source, binary) in stale {
        let tmp = temp_name(&binary);
        let spawned = compiler_command(cc, CFLAGS, &tmp, &source).spawn();
        match spawned {
            Ok(child) => jobs.push(Job {
                program,
                tmp,
                binary,
                child,
            }),
            Err(e) => {
                first_error = Some(start_error(cc, Language::C, e));
                break;
            }
        }
    }
    // Wait for every compiler started, even after a failure, so that none is left behind.
    for job in jobs {
        let result = job.child.wait_with_output();
        let outcome = match result {
            Ok(out) if out.status.success() => {
                fs::rename(&job.tmp, &job.binary).map_err(io_error(&job.binary))
            }
            Ok(out) => Err(CompileError::Failed {
                program: job.program.name,
                language: Language::C,
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }),
            Err(e) => Err(CompileError::Io {
                path: PathBuf::from(cc),
                source: e,
            }),
        };
        if let Err(e) = outcome {
            let _ = fs::remove_file(&job.tmp);
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(binaries),
    }
}

/// A program's standard output when it is exactly one line (a final newline allowed).
pub(crate) fn result_line(stdout: &str) -> Result<&str, String> {
    let line = stdout.strip_suffix('\n').unwrap_or(stdout);
    if line.is_empty() {
        return Err("no result line on standard output".into());
    }
    if line.contains('\n') {
        return Err(format!(
            "expected one line on standard output, got {}",
            stdout.lines().count()
        ));
    }
    Ok(line)
}

/// The value of the next `key=value` word of an output line, or why there is none.
pub(crate) fn next_field<'a>(
    words: &mut impl Iterator<Item = &'a str>,
    key: &str,
    line: &str,
) -> Result<&'a str, String> {
    let word = words
        .next()
        .ok_or_else(|| format!("no {key}= in {line:?}"))?;
    word.strip_prefix(key)
        .and_then(|w| w.strip_prefix('='))
        .ok_or_else(|| format!("expected {key}=..., got {word:?} in {line:?}"))
}

/// `text`, the value of `key`, as a decimal number (digits only, no sign).
pub(crate) fn decimal(key: &str, text: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{key}={text} is not a decimal number"));
    }
    text.parse::<u64>()
        .map_err(|e| format!("{key}={text}: {e}"))
}

/// What one run of a classic program reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassicOutput {
    /// The workload's name (the first word of the output line).
    pub workload: String,
    /// The threads it was asked for (glibc-simple runs one whatever this says).
    pub threads: usize,
    /// The scale (`tiny`, `small`, `medium` or `large`).
    pub scale: String,
    /// The seed.
    pub seed: u64,
    /// Allocator calls, counted as the in-process workload counts them.
    pub operations: u64,
    /// The allocator-independent checksum of the work done.
    pub checksum: u64,
    /// The measured phase, timed as the in-process workload times it.
    pub time: Duration,
}

/// Parses a classic program's standard output and standard error.
///
/// Standard output must be exactly the one result line (a final newline allowed):
/// `WORKLOAD threads=T scale=S seed=X operations=N checksum=0x` followed by 16 hex digits.
/// Standard error must hold exactly one line `alloclab-time-ms MS` (milliseconds, a
/// non-negative decimal); other lines (an allocator's messages, say) are ignored.
///
/// # Errors
///
/// A message saying what is missing or malformed.
pub fn parse_output(stdout: &str, stderr: &str) -> Result<ClassicOutput, String> {
    let line = result_line(stdout)?;
    let mut words = line.split(' ');
    let workload = words.next().unwrap_or_default();
    if workload.is_empty() || workload.contains('=') {
        return Err(format!("no workload name at the start of {line:?}"));
    }
    let mut field = |key: &str| next_field(&mut words, key, line);
    let threads = decimal("threads", field("threads")?)?;
    let scale = field("scale")?;
    if !matches!(scale, "tiny" | "small" | "medium" | "large") {
        return Err(format!("unknown scale={scale}"));
    }
    let seed = decimal("seed", field("seed")?)?;
    let operations = decimal("operations", field("operations")?)?;
    let checksum_text = field("checksum")?;
    let checksum = checksum_text
        .strip_prefix("0x")
        .filter(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or_else(|| format!("checksum={checksum_text} is not 0x and 16 hex digits"))?;
    if let Some(extra) = words.next() {
        return Err(format!("unexpected {extra:?} at the end of {line:?}"));
    }

    let mut times = stderr.lines().filter_map(|l| l.strip_prefix(TIME_PREFIX));
    let ms_text = times
        .next()
        .ok_or_else(|| "no alloclab-time-ms line on standard error".to_owned())?;
    if times.next().is_some() {
        return Err("more than one alloclab-time-ms line on standard error".into());
    }
    let ms_text = ms_text.trim();
    let ms: f64 = ms_text
        .parse()
        .ok()
        .filter(|ms: &f64| ms.is_finite() && *ms >= 0.0 && !ms_text.starts_with(['+', '-']))
        .ok_or_else(|| format!("alloclab-time-ms {ms_text}: not a non-negative number"))?;
    let time = Duration::from_nanos((ms * 1e6).round() as u64);

    Ok(ClassicOutput {
        workload: workload.to_owned(),
        threads: usize::try_from(threads).map_err(|e| format!("threads={threads}: {e}"))?,
        scale: scale.to_owned(),
        seed,
        operations,
        checksum,
        time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str =
        "larson threads=2 scale=tiny seed=7 operations=34000 checksum=0x1947a2c52fb7444d\n";

    #[test]
    fn names_are_the_cpu_suites() {
        let names: Vec<&str> = CLASSIC.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "larson",
                "xmalloc-test",
                "cache-scratch",
                "cache-thrash",
                "glibc-simple",
                "glibc-thread",
                "mstress",
                "rptest"
            ]
        );
        for c in CLASSIC {
            assert!(
                c.source
                    .contains(&format!("#define BENCH_NAME \"{}\"", c.name)),
                "{}",
                c.name
            );
            assert!(c.source.contains("#include \"bench.h\""), "{}", c.name);
            assert_eq!(find(c.name), Some(c));
        }
        assert!(BENCH_H.contains("ALLOCLAB_BENCH_H"));
    }

    #[test]
    fn parses_a_good_run() {
        let out = parse_output(LINE, "some allocator chatter\nalloclab-time-ms 12.345\n").unwrap();
        assert_eq!(
            out,
            ClassicOutput {
                workload: "larson".into(),
                threads: 2,
                scale: "tiny".into(),
                seed: 7,
                operations: 34000,
                checksum: 0x1947_a2c5_2fb7_444d,
                time: Duration::from_micros(12_345),
            }
        );
        // No final newline is fine too.
        assert!(parse_output(LINE.trim_end(), "alloclab-time-ms 0.000").is_ok());
    }

    #[test]
    fn rejects_bad_output() {
        let time = "alloclab-time-ms 1.000\n";
        for stdout in [
            "",
            "\n",
            "larson threads=2 scale=tiny seed=7 operations=34000\n",
            "larson threads=2 scale=huge seed=7 operations=34000 checksum=0x1947a2c52fb7444d\n",
            "larson threads=x scale=tiny seed=7 operations=34000 checksum=0x1947a2c52fb7444d\n",
            "larson threads=2 scale=tiny seed=7 operations=-1 checksum=0x1947a2c52fb7444d\n",
            "larson threads=2 scale=tiny seed=7 operations=34000 checksum=0x1947a2c5\n",
            "larson threads=2 scale=tiny seed=7 operations=34000 checksum=1947a2c52fb7444d00\n",
            "larson seed=7 threads=2 scale=tiny operations=34000 checksum=0x1947a2c52fb7444d\n",
            "larson threads=2 scale=tiny seed=7 operations=34000 checksum=0x1947a2c52fb7444d x\n",
            "threads=2 scale=tiny seed=7 operations=34000 checksum=0x1947a2c52fb7444d\n",
        ] {
            assert!(parse_output(stdout, time).is_err(), "{stdout:?}");
        }
        let two = format!("{LINE}{LINE}");
        assert!(parse_output(&two, time).is_err());
        for stderr in [
            "",
            "alloclab-time-ms\n",
            "alloclab-time-ms x\n",
            "alloclab-time-ms -1.0\n",
            "alloclab-time-ms inf\n",
            "alloclab-time-ms 1.0\nalloclab-time-ms 2.0\n",
        ] {
            assert!(parse_output(LINE, stderr).is_err(), "{stderr:?}");
        }
    }

    #[test]
    fn errors_say_what_to_install() {
        let none = CompileError::NoCompiler {
            cc: "cc".into(),
            language: Language::C,
        };
        assert!(none.to_string().contains(INSTALL_HINT));
        assert!(none.is_missing_toolchain());
    }

    #[test]
    fn a_missing_compiler_is_told_apart() {
        let dir =
            std::env::temp_dir().join(format!("alloclab-classic-nocc-{}", std::process::id()));
        let err = compile(&dir, OsStr::new("/nonexistent/alloclab-no-cc")).unwrap_err();
        let _ = fs::remove_dir_all(&dir);
        assert!(matches!(err, CompileError::NoCompiler { .. }), "{err}");
    }
}
