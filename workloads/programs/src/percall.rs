//! The per-call driver: a C++ program that times one allocator operation, called through
//! the C ABI as real programs call it, for `alloclab percall`.
//!
//! `percall OP SIZE ITERATIONS` calls one operation of the C allocation API (or C++'s
//! `operator new`/`delete`) ITERATIONS times on SIZE-byte blocks, in rounds over a batch of
//! [`BATCH`] blocks, timing only the operation: the batch's setup (the blocks `free` frees,
//! say) and teardown are untimed. Each timed batch is a function of its own,
//! `percall_timed_<op>` ([`timed_function`]), that a profiler can collect inside
//! (`valgrind --tool=callgrind --toggle-collect=percall_timed_malloc`); `floor` runs the
//! same loop calling an empty function, the cost of the loop itself. The source's header
//! comment ([`SOURCE`]) states the method and what each op calls.
//!
//! On success the program exits 0 and writes one line (see [`parse_output`]):
//! `percall op=OP size=S calls=N ns_total=T`, with ` moved=M` after it for the two reallocs.
//! Bad arguments exit 2 with a usage line; a failed allocation exits 1 naming the op and
//! the size.
//!
//! [`callgrind_total`] reads the instruction count back from a callgrind output file.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::classic::{
    CompileError, Language, SingleSource, compile_single, decimal, next_field, result_line,
};

/// The driver's C++ source.
pub const SOURCE: &str = include_str!("../c/percall.cc");

/// The name of the executable [`compile`] builds (and of its source, `percall.cc`).
pub const PROGRAM: &str = "percall";

/// The compiler flags [`compile`] uses (the source also builds warning-free with
/// `-Werror`; it is left out so that a newer compiler's new warnings cannot stop a run).
pub const CXXFLAGS: &[&str] = &["-O2", "-pthread", "-std=gnu++17", "-Wall", "-Wextra"];

/// What to install when there is no C++ compiler, or no C++ library headers.
pub const CXX_INSTALL_HINT: &str = "apt-get install -y g++";

/// Blocks per round: the batch the driver allocates, operates on and frees (fewer when the
/// call count is smaller).
pub const BATCH: u64 = 1000;

/// The largest block size the driver takes (1 GiB).
pub const MAX_SIZE: usize = 1 << 30;

/// The most calls the driver takes.
pub const MAX_ITERATIONS: u64 = 1_000_000_000_000;

/// The operations the driver measures, by their command-line names, in the order
/// `alloclab percall` reports them.
pub const OPS: &[&str] = &[
    "malloc",
    "free",
    "calloc",
    "realloc-same",
    "realloc-grow",
    "posix-memalign",
    "usable-size",
    "new",
    "delete",
    "delete-sized",
    "new-aligned",
    "new-nothrow",
];

/// The driver's extra op: the loop with an empty function in place of the allocator call.
pub const FLOOR: &str = "floor";

/// The alignment `posix-memalign` and `new-aligned` ask for.
pub const ALIGNMENT: usize = 64;

/// The size `realloc-same` resizes a `size`-byte block to: an eighth smaller, which stays in
/// the block's size class on the heaps alloclab knows (growing by an eighth leaves it at 64
/// bytes on all of them but glibc's), so a heap that reallocates in place does so.
pub const fn realloc_same_size(size: usize) -> usize {
    size - size / 8
}

/// The size `realloc-grow` resizes a `size`-byte block to: past its class, so it usually
/// moves.
pub const fn realloc_grow_size(size: usize) -> usize {
    2 * size + 16
}

/// The function that holds `op`'s timed batch: `percall_timed_` and the op with
/// underscores (`percall_timed_realloc_same`).
pub fn timed_function(op: &str) -> String {
    format!("percall_timed_{}", op.replace('-', "_"))
}

/// A directory for the driver that depends on its source and the user, in the system's
/// temporary directory: a changed source gets a directory of its own.
pub fn default_dir() -> PathBuf {
    // SAFETY: getuid cannot fail and has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!(
        "alloclab-percall-{uid}-{:013x}",
        crate::process::digest(SOURCE.as_bytes())
    ))
}

/// Writes [`SOURCE`] to `dir/percall.cc` (`dir` created if need be) and compiles it with
/// `cxx` and [`CXXFLAGS`] into `dir/percall`, returning the executable's path.
///
/// An executable newer than its source is kept as it is; the source is rewritten only when
/// its text changed; the compiler writes a temporary name that is renamed into place, so
/// that two processes compiling into one directory do not trip over each other.
///
/// # Errors
///
/// [`CompileError::NoCompiler`] if `cxx` cannot be run, [`CompileError::Failed`] with the
/// compiler's message if it fails, [`CompileError::Io`] if a file cannot be written.
pub fn compile(dir: &Path, cxx: &OsStr) -> Result<PathBuf, CompileError> {
    compile_single(
        dir,
        &SingleSource {
            program: PROGRAM,
            file: &format!("{PROGRAM}.cc"),
            text: SOURCE,
            compiler: cxx,
            flags: CXXFLAGS,
            language: Language::Cxx,
        },
    )
}

/// What one run of the driver (or of its in-process twin) reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PercallOutput {
    /// The op, by its command-line name.
    pub op: String,
    /// The block size asked for (for the reallocs: the size of the block before the call).
    pub size: u64,
    /// The timed calls.
    pub calls: u64,
    /// Nanoseconds over all timed batches.
    pub ns_total: u64,
    /// For the reallocs: how many calls returned a block other than the one they were
    /// given; `None` for every other op.
    pub moved: Option<u64>,
}

impl PercallOutput {
    /// Nanoseconds per call.
    pub fn ns_per_call(&self) -> f64 {
        self.ns_total as f64 / self.calls as f64
    }
}

/// The result line, as the driver writes it (without the newline): what
/// [`parse_output`] reads back.
impl fmt::Display for PercallOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "percall op={} size={} calls={} ns_total={}",
            self.op, self.size, self.calls, self.ns_total
        )?;
        if let Some(moved) = self.moved {
            write!(f, " moved={moved}")?;
        }
        Ok(())
    }
}

/// Parses the driver's standard output: exactly one line (a final newline allowed),
/// `percall op=OP size=S calls=N ns_total=T`, optionally followed by ` moved=M`, the numbers
/// decimal, `calls` at least 1 and `moved` at most `calls`.
///
/// # Errors
///
/// A message saying what is missing or malformed.
pub fn parse_output(stdout: &str) -> Result<PercallOutput, String> {
    let line = result_line(stdout)?;
    let mut words = line.split(' ');
    if words.next() != Some("percall") {
        return Err(format!(
            "expected a line starting with 'percall ', got {line:?}"
        ));
    }
    let mut field = |key: &str| next_field(&mut words, key, line);
    let number = decimal;
    let op = field("op")?;
    if op.is_empty() || !op.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') {
        return Err(format!("op={op} is not an op name"));
    }
    let size = number("size", field("size")?)?;
    let calls = number("calls", field("calls")?)?;
    if calls == 0 {
        return Err("calls=0: nothing was timed".into());
    }
    let ns_total = number("ns_total", field("ns_total")?)?;
    let moved = match words.next() {
        None => None,
        Some(word) => {
            let text = word
                .strip_prefix("moved=")
                .ok_or_else(|| format!("unexpected {word:?} at the end of {line:?}"))?;
            let moved = number("moved", text)?;
            if moved > calls {
                return Err(format!("moved={moved} is more than calls={calls}"));
            }
            Some(moved)
        }
    };
    if let Some(extra) = words.next() {
        return Err(format!("unexpected {extra:?} at the end of {line:?}"));
    }
    Ok(PercallOutput {
        op: op.to_owned(),
        size,
        calls,
        ns_total,
        moved,
    })
}

/// The instructions (event `Ir`) a callgrind output file counts in all: its `totals:` line,
/// or its `summary:` line where there is no `totals:` (callgrind writes both; older versions
/// only the second). With `--toggle-collect`, that is the instructions executed inside the
/// function named, its callees included.
///
/// # Errors
///
/// If the file names events other than `Ir` first, or holds neither line, or the count is
/// not a number.
pub fn callgrind_total(text: &str) -> Result<u64, String> {
    if let Some(events) = text.lines().find_map(|l| l.strip_prefix("events:")) {
        let first = events.split_whitespace().next().unwrap_or("");
        if first != "Ir" {
            return Err(format!(
                "the callgrind file counts {first:?} first, not Ir (instructions)"
            ));
        }
    }
    let line = |key: &str| text.lines().find_map(|l| l.strip_prefix(key));
    let value = line("totals:")
        .or_else(|| line("summary:"))
        .ok_or("no totals: or summary: line in the callgrind file")?;
    let first = value.split_whitespace().next().unwrap_or("");
    first
        .parse::<u64>()
        .map_err(|_| format!("the callgrind total {first:?} is not a number"))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn parses_a_good_line() {
        let out =
            parse_output("percall op=malloc size=64 calls=1000000 ns_total=14907509\n").unwrap();
        assert_eq!(
            out,
            PercallOutput {
                op: "malloc".into(),
                size: 64,
                calls: 1_000_000,
                ns_total: 14_907_509,
                moved: None,
            }
        );
        assert!((out.ns_per_call() - 14.907_509).abs() < 1e-9);
        let realloc =
            parse_output("percall op=realloc-same size=64 calls=10 ns_total=0 moved=3").unwrap();
        assert_eq!(realloc.moved, Some(3));
        assert_eq!(realloc.op, "realloc-same");
        // What the in-process twin prints is what the driver prints.
        for out in [out, realloc] {
            assert_eq!(parse_output(&format!("{out}\n")), Ok(out));
        }
    }

    #[test]
    fn rejects_bad_lines() {
        for stdout in [
            "",
            "\n",
            "percall\n",
            "percal op=malloc size=64 calls=1 ns_total=1\n",
            "percall op=malloc size=64 calls=1\n",
            "percall op=malloc calls=1 size=64 ns_total=1\n",
            "percall op=Malloc size=64 calls=1 ns_total=1\n",
            "percall op= size=64 calls=1 ns_total=1\n",
            "percall op=malloc size=-64 calls=1 ns_total=1\n",
            "percall op=malloc size=64 calls=0 ns_total=1\n",
            "percall op=malloc size=64 calls=1 ns_total=1.5\n",
            "percall op=malloc size=64 calls=1 ns_total=99999999999999999999\n",
            "percall op=malloc size=64 calls=1 ns_total=1 x\n",
            "percall op=realloc-same size=64 calls=1 ns_total=1 moved=2\n",
            "percall op=realloc-same size=64 calls=1 ns_total=1 moved=1 x\n",
            "percall op=malloc size=64 calls=1 ns_total=1\npercall op=malloc size=64 calls=1 ns_total=1\n",
        ] {
            assert!(parse_output(stdout).is_err(), "{stdout:?}");
        }
    }

    #[test]
    fn reads_callgrinds_totals() {
        let file = "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\n\
                    events: Ir\nsummary: 123456\n\nfn=(1) main\n5 10\ntotals: 123456\n";
        assert_eq!(callgrind_total(file), Ok(123_456));
        // Only a summary line (older callgrind).
        assert_eq!(callgrind_total("events: Ir\nsummary: 42\n"), Ok(42));
        // Several events: the first is Ir.
        assert_eq!(callgrind_total("events: Ir Dr Dw\ntotals: 7 3 2\n"), Ok(7));
        assert!(callgrind_total("events: Dr\ntotals: 7\n").is_err());
        assert!(callgrind_total("events: Ir\n").is_err());
        assert!(callgrind_total("events: Ir\ntotals: many\n").is_err());
    }

    #[test]
    fn names_and_sizes() {
        assert_eq!(timed_function("realloc-same"), "percall_timed_realloc_same");
        assert_eq!(timed_function(FLOOR), "percall_timed_floor");
        for op in OPS.iter().chain([&FLOOR]) {
            assert!(
                SOURCE.contains(&format!("OP(\"{op}\", {}", op.replace('-', "_"))),
                "{op} is not in the driver's table"
            );
            assert!(
                SOURCE.contains(&format!("PERCALL_OP({},", op.replace('-', "_"))),
                "{op} has no timed function"
            );
        }
        assert_eq!(realloc_same_size(64), 56);
        assert_eq!(realloc_same_size(7), 7);
        assert_eq!(realloc_grow_size(64), 144);
        assert!(SOURCE.contains("op_size = size - size / 8"));
        assert!(SOURCE.contains("op_size = 2 * size + 16"));
        assert!(SOURCE.contains(&format!("BATCH = {BATCH};")));
    }

    #[test]
    fn a_missing_compiler_says_what_to_install() {
        let dir =
            std::env::temp_dir().join(format!("alloclab-percall-nocxx-{}", std::process::id()));
        let err = compile(&dir, OsStr::new("/nonexistent/alloclab-no-cxx")).unwrap_err();
        let _ = fs::remove_dir_all(&dir);
        assert!(matches!(err, CompileError::NoCompiler { .. }), "{err}");
        assert!(err.is_missing_toolchain());
        let text = err.to_string();
        assert!(text.contains("no C++ compiler"), "{text}");
        assert!(text.contains(CXX_INSTALL_HINT), "{text}");
    }
}
