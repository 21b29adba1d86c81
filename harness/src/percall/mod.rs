//! `alloclab percall`: what one allocator call costs, reached through the C ABI under
//! `LD_PRELOAD` (as real programs reach a heap) and in-process through alloclab's trait.
//!
//! ```text
//! alloclab percall --alloc A,B,... [--ops LIST] [--size BYTES] [--iterations N]
//!                  [--instructions] [--json FILE]
//! ```
//!
//! # The two paths
//!
//! * **C ABI.** The C++ driver of `alloclab_programs::percall` (`percall OP SIZE N`),
//!   compiled with `c++ -O2 -pthread` (`$CXX` when set), run under the heap's library as
//!   `alloclab exec` runs a command: alloclab's preload libraries and the peers' shared
//!   libraries through `LD_PRELOAD`, `system` with nothing preloaded. Every call goes through
//!   the PLT, as a program's does. The C++ ops call the library's own `operator new` and
//!   `delete` where it exports them (alloclab's preload libraries and the peers' do), else
//!   libstdc++'s, which call `malloc` and `free` (`system`: glibc's malloc under
//!   libstdc++'s operators).
//! * **In-process.** The same rounds in Rust, in a fresh process of the harness itself (a
//!   hidden `__percall` subcommand), on heaps compiled into alloclab
//!   ([`Capability::HostHeap`]): `malloc` is [`Allocator::allocate`] with the layout
//!   `malloc` would give (`SIZE` bytes, aligned to 16 or to the size's next power of two
//!   when that is smaller), `free` is [`Allocator::deallocate`] with that layout (the
//!   trait's free is sized), `calloc` is [`HostAllocator::allocate_zeroed`], the reallocs are
//!   [`HostAllocator::reallocate`] and `posix-memalign` an allocation aligned to 64. Heaps that
//!   implement [`MallocHeap`] (wfspan, randomized) also get an *in-process unsized* row for
//!   `free` ([`MallocHeap::deallocate_unsized`], which is what their C `free` calls) and an
//!   in-process `usable-size` ([`MallocHeap::usable_size`]).
//!
//! A heap named gets the rows of the paths it has: `wfspan`, `randomized` and `system` both,
//! the peers' shared libraries (`libmimalloc`, ...) the C ABI only, the compiled-in crates
//! (`mimalloc`, `jemalloc`, `rlsf`, `wf_alloc`) in-process only. The ratio compares a heap
//! with itself, so it exists for the heaps that have both.
//!
//! # What is timed
//!
//! Calls are made in rounds over a batch of 1,000 blocks (fewer when `--iterations` is
//! smaller): a round allocates the batch, runs the measured operation over it, and frees
//! what is left, and only the measured operation is timed (`CLOCK_MONOTONIC` read before and
//! after the whole batch, summed over the rounds). So `free` and the `delete`s are timed on
//! blocks an untimed `malloc`/`operator new` made, `malloc` and the `new`s are timed with
//! untimed frees after them, and the reallocs and `usable-size` are timed between both.
//! One untimed round runs first (a heap's first-use costs). `realloc-same` shrinks a block by
//! an eighth, within its size class on every heap here, so it can stay in place (the table
//! says how often it moved); `realloc-grow` resizes it to `2 * SIZE + 16`, which moves it.
//! Each figure is the median of three runs, each run a fresh process, the runs interleaved
//! across heaps and paths (run 1 of everything, then run 2, ...), so that a slow moment of a
//! shared machine spreads over all of them.
//!
//! # The floor
//!
//! Each path also runs the same loop with an empty, opaque function in place of the
//! allocator call (`floor`): the loop, the call, the return and the store of the result. The
//! table shows its cost per call. It is **included** in ns/call (subtracting a 1-2 ns figure
//! from a 2-3 ns one would make the noise the result) and **subtracted** from instr/call,
//! which is exact. What is left of a C ABI call also holds the PLT's jump, which is part of
//! what the C ABI costs.
//!
//! # Instructions
//!
//! With `--instructions` and valgrind on `PATH`, every row is also run once under
//! `valgrind --tool=callgrind --toggle-collect=<timed function>` at 20,000 calls (or
//! `--iterations`, when smaller). Each measured batch is a function of its own
//! (`percall_timed_malloc` in the driver, an `#[inline(never)]` `percall_timed_*` here),
//! and its warm-up round runs a twin of another name, so callgrind counts the timed calls
//! alone, callees included; the total Ir of the output file's `totals:` line, divided by the
//! calls, less the floor's, is instr/call. Instruction counts do not depend on the machine's
//! load, so these runs go one per core (at most four at a time). Without valgrind the column
//! says so once, with the install line; nothing fails.
//!
//! The in-process rows measure the harness as it was compiled: an unoptimised (debug) build
//! of `alloclab`, and the preload libraries it builds beside itself, measure unoptimised
//! code, and the table says so (`cargo run --release` measures what ships).
//!
//! # n/a
//!
//! A row is n/a where the path exists for the heap but has no twin of the op: C++'s
//! `operator new`/`delete` in-process (Rust has no such operators), and `usable-size` and
//! the unsized `free` in-process on a heap that cannot find a block's size from its address
//! (it does not implement [`MallocHeap`]: the peers behind `GlobalAlloc`).
//!
//! # JSON
//!
//! `--json FILE` writes [`PercallResults`] (format `alloclab-percall`, version 1),
//! atomically, after the table: the machine, the parameters, the floors, and per op one row
//! per heap and path with every run's ns/call, their median, minimum and maximum, the
//! instructions per call (floor subtracted, `null` where not counted), the fraction of calls
//! a realloc moved, and for the C ABI rows the ratios to the same heap's in-process row.
//!
//! [`Allocator::allocate`]: alloclab_core::Allocator::allocate
//! [`Allocator::deallocate`]: alloclab_core::Allocator::deallocate

use core::alloc::Layout;
use core::ptr::{self, NonNull};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use alloclab_core::{HostAllocator, MallocHeap};
use alloclab_programs::percall::{self as driver, PercallOutput};
use alloclab_programs::process::{self, Spec};
use serde::Serialize;

use crate::peers::{self, Capability, HostHeapTask, libraries};
use crate::report::fmt_value;

/// The name of the JSON document `percall --json` writes.
pub const PERCALL_FORMAT: &str = "alloclab-percall";
/// Its version.
pub const PERCALL_FORMAT_VERSION: u32 = 1;

/// Runs per figure, each a fresh process; the figure is their median.
pub const RUNS: u32 = 3;
/// Block size when `--size` is not given.
pub const DEFAULT_SIZE: usize = 64;
/// Calls per op and run when `--iterations` is not given.
pub const DEFAULT_ITERATIONS: u64 = 1_000_000;
/// Calls per op under callgrind (fewer when `--iterations` is smaller).
pub const INSTRUCTION_CALLS: u64 = 20_000;
/// What installs valgrind.
pub const VALGRIND_INSTALL_HINT: &str = "apt-get install -y valgrind";
/// The hidden subcommand that runs one in-process measurement.
pub const WORKER_SUBCOMMAND: &str = "__percall";
/// How long one run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// What `alloclab percall` was asked.
#[derive(Clone, Debug)]
pub struct Request {
    /// Heaps, in order.
    pub allocators: Vec<String>,
    /// Ops by their command-line names; empty: every op.
    pub ops: Vec<String>,
    /// Block size in bytes.
    pub size: usize,
    /// Calls per op and run.
    pub iterations: u64,
    /// Whether to count instructions under callgrind.
    pub instructions: bool,
    /// Where to write the JSON, if anywhere.
    pub json: Option<PathBuf>,
}

/// Parses `--size`: 1 byte to 1 GiB.
///
/// # Errors
///
/// A message naming the value and the range.
pub fn parse_size(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(v) if (1..=driver::MAX_SIZE).contains(&v) => Ok(v),
        _ => Err(format!(
            "size '{text}' is not a number of bytes in 1..={} (1 GiB)",
            driver::MAX_SIZE
        )),
    }
}

/// Parses `--iterations`: at least one call.
///
/// # Errors
///
/// A message naming the value and the range.
pub fn parse_iterations(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(v) if (1..=driver::MAX_ITERATIONS).contains(&v) => Ok(v),
        _ => Err(format!(
            "iterations '{text}' is not a number of calls in 1..={}",
            driver::MAX_ITERATIONS
        )),
    }
}

/// How a row's calls reach the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallPath {
    /// The C driver, the heap preloaded (or the C library's own for `system`).
    CAbi,
    /// In-process, through the allocator trait.
    InProcess,
    /// In-process, through [`MallocHeap::deallocate_unsized`] (`free` only).
    InProcessUnsized,
}

impl CallPath {
    /// The path in the table.
    pub fn label(self) -> &'static str {
        match self {
            Self::CAbi => "C ABI",
            Self::InProcess => "in-process",
            Self::InProcessUnsized => "in-process unsized",
        }
    }
}

/// An operation the in-process twin measures (the `__percall --op` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InProcessOp {
    /// `allocate`.
    Malloc,
    /// `deallocate`, sized.
    FreeSized,
    /// `MallocHeap::deallocate_unsized`.
    FreeUnsized,
    /// `allocate_zeroed`.
    Calloc,
    /// `reallocate` to [`driver::realloc_same_size`].
    ReallocSame,
    /// `reallocate` to [`driver::realloc_grow_size`].
    ReallocGrow,
    /// `allocate` aligned to [`driver::ALIGNMENT`].
    PosixMemalign,
    /// `MallocHeap::usable_size`.
    UsableSize,
    /// The empty call.
    Floor,
}

impl InProcessOp {
    /// Every op.
    pub const ALL: [Self; 9] = [
        Self::Malloc,
        Self::FreeSized,
        Self::FreeUnsized,
        Self::Calloc,
        Self::ReallocSame,
        Self::ReallocGrow,
        Self::PosixMemalign,
        Self::UsableSize,
        Self::Floor,
    ];

    /// Its name on the worker's command line and in its output line; its timed function
    /// is `percall_timed_` and this with underscores.
    pub fn name(self) -> &'static str {
        match self {
            Self::Malloc => "malloc",
            Self::FreeSized => "free-sized",
            Self::FreeUnsized => "free-unsized",
            Self::Calloc => "calloc",
            Self::ReallocSame => "realloc-same",
            Self::ReallocGrow => "realloc-grow",
            Self::PosixMemalign => "posix-memalign",
            Self::UsableSize => "usable-size",
            Self::Floor => driver::FLOOR,
        }
    }

    /// The op called `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Whether it needs a heap that finds a block's size from its address.
    pub fn needs_malloc_heap(self) -> bool {
        matches!(self, Self::FreeUnsized | Self::UsableSize)
    }

    /// What it calls, for the table and the JSON.
    fn calls(self, size: usize) -> String {
        let align = malloc_align(size);
        match self {
            Self::Malloc => format!("allocate({size} B, align {align})"),
            Self::FreeSized => format!("deallocate(p, {size} B align {align})"),
            Self::FreeUnsized => "deallocate_unsized(p)".to_owned(),
            Self::Calloc => format!("allocate_zeroed({size} B, align {align})"),
            Self::ReallocSame => format!("reallocate(p, {} B)", driver::realloc_same_size(size)),
            Self::ReallocGrow => format!("reallocate(p, {} B)", driver::realloc_grow_size(size)),
            Self::PosixMemalign => format!("allocate({size} B, align {})", driver::ALIGNMENT),
            Self::UsableSize => "usable_size(p)".to_owned(),
            Self::Floor => "an empty function".to_owned(),
        }
    }
}

/// What the driver's `op` calls, for the table and the JSON.
fn c_calls(op: &str, size: usize) -> String {
    let a = driver::ALIGNMENT;
    match op {
        "malloc" => format!("malloc({size})"),
        "free" => "free(p)".to_owned(),
        "calloc" => format!("calloc(1, {size})"),
        "realloc-same" => format!("realloc(p, {})", driver::realloc_same_size(size)),
        "realloc-grow" => format!("realloc(p, {})", driver::realloc_grow_size(size)),
        "posix-memalign" => format!("posix_memalign(&p, {a}, {size})"),
        "usable-size" => "malloc_usable_size(p)".to_owned(),
        "new" => format!("operator new({size})"),
        "delete" => "operator delete(p)".to_owned(),
        "delete-sized" => format!("operator delete(p, {size})"),
        "new-aligned" => format!("operator new({size}, align_val_t({a}))"),
        "new-nothrow" => format!("operator new({size}, nothrow)"),
        _ => "an empty function".to_owned(),
    }
}

/// The in-process twin of the driver's `op` on `path`, or why there is none.
fn in_process_twin(op: &str, path: CallPath) -> Result<InProcessOp, &'static str> {
    match (op, path) {
        ("free", CallPath::InProcessUnsized) => Ok(InProcessOp::FreeUnsized),
        (_, CallPath::InProcessUnsized) | (_, CallPath::CAbi) => Err("no such row"),
        ("malloc", _) => Ok(InProcessOp::Malloc),
        ("free", _) => Ok(InProcessOp::FreeSized),
        ("calloc", _) => Ok(InProcessOp::Calloc),
        ("realloc-same", _) => Ok(InProcessOp::ReallocSame),
        ("realloc-grow", _) => Ok(InProcessOp::ReallocGrow),
        ("posix-memalign", _) => Ok(InProcessOp::PosixMemalign),
        ("usable-size", _) => Ok(InProcessOp::UsableSize),
        _ => Err("C++ operator: no in-process twin"),
    }
}

/// Why a heap has no row for `op` (a heap without [`MallocHeap`] for the ops that need it).
const NOT_MALLOC_HEAP: &str = "no size lookup in-process (not a MallocHeap)";

/// The alignment `malloc(size)` guarantees: 16, or the size's next power of two when that
/// is smaller (no object of that size can need more).
fn malloc_align(size: usize) -> usize {
    16.min(size.max(1).next_power_of_two())
}

mod in_process;
mod results;

pub use in_process::*;
pub use results::*;

// ---------------------------------------------------------------------------------------
// The command: jobs, runs, results
// ---------------------------------------------------------------------------------------
/// A heap as asked, with its paths.
struct Heap {
    name: String,
    /// The library to preload for the C ABI rows, when the heap can be preloaded (the inner
    /// `None`: nothing, for `system`).
    c_abi: Option<Option<PathBuf>>,
    in_process: bool,
    malloc_heap: bool,
}

/// A process to run for a row or a floor.
#[derive(Clone, Debug)]
enum Job {
    /// The driver under a preload.
    Driver {
        op: &'static str,
        preload: Option<PathBuf>,
        heap: String,
    },
    /// The harness's in-process worker.
    InProcess { op: InProcessOp, heap: String },
}

impl Job {
    fn describe(&self) -> String {
        match self {
            Self::Driver { op, heap, .. } => format!("{op} under {heap} (C ABI)"),
            Self::InProcess { op, heap } => format!("{} on {heap} (in-process)", op.name()),
        }
    }

    /// The op name the output line must carry.
    fn op_name(&self) -> &'static str {
        match self {
            Self::Driver { op, .. } => op,
            Self::InProcess { op, .. } => op.name(),
        }
    }

    /// The command that runs it, with `prefix` (valgrind and its options) in front.
    fn spec(&self, tools: &Tools, size: usize, calls: u64, prefix: &[OsString]) -> Spec {
        let (program, args, preload): (OsString, Vec<OsString>, Option<PathBuf>) = match self {
            Self::Driver { op, preload, .. } => (
                tools.driver.clone().unwrap_or_default().into(),
                vec![
                    (*op).into(),
                    size.to_string().into(),
                    calls.to_string().into(),
                ],
                preload.clone(),
            ),
            Self::InProcess { op, heap } => (
                tools.exe.clone().into(),
                [
                    WORKER_SUBCOMMAND,
                    "--alloc",
                    heap,
                    "--op",
                    op.name(),
                    "--size",
                    &size.to_string(),
                    "--iterations",
                    &calls.to_string(),
                ]
                .iter()
                .map(OsString::from)
                .collect(),
                None,
            ),
        };
        let mut spec = match prefix.split_first() {
            None => Spec::new(&program, &args),
            Some((tool, options)) => {
                let mut all = options.to_vec();
                all.push(program);
                all.extend(args);
                Spec::new(tool, &all)
            }
        };
        spec.preload = preload;
        spec.timeout = RUN_TIMEOUT;
        spec
    }

    /// The `--toggle-collect` pattern of its timed function.
    fn collect_pattern(&self) -> String {
        match self {
            // The driver's functions are extern "C": the exact name.
            Self::Driver { op, .. } => driver::timed_function(op),
            // Rust's carry a path and generic parameters: any name that holds it.
            Self::InProcess { op, .. } => {
                let name = match op {
                    // Both reallocs share one function; the new size tells them apart.
                    InProcessOp::ReallocSame | InProcessOp::ReallocGrow => "realloc",
                    // posix-memalign is an aligned allocate.
                    InProcessOp::PosixMemalign => "malloc",
                    other => other.name(),
                };
                format!("*{}*", driver::timed_function(name))
            }
        }
    }
}

/// What the jobs run: the driver and this executable.
struct Tools {
    driver: Option<PathBuf>,
    exe: PathBuf,
}

/// Runs `spec` and parses its line.
fn run_one(job: &Job, spec: &Spec, calls: u64) -> Result<PercallOutput, String> {
    let exit = process::run(spec).map_err(|e| format!("{}: {e}", job.describe()))?;
    if !exit.status.success() {
        return Err(format!(
            "{} failed ({}){}",
            job.describe(),
            exit.status_text(),
            exit.last_stderr_line()
                .map_or(String::new(), |l| format!(": {l}"))
        ));
    }
    let out = driver::parse_output(&String::from_utf8_lossy(&exit.stdout))
        .map_err(|e| format!("{}: {e}", job.describe()))?;
    if out.op != job.op_name() || out.calls != calls {
        return Err(format!(
            "{}: the output line is for op={} calls={}",
            job.describe(),
            out.op,
            out.calls
        ));
    }
    Ok(out)
}

/// Runs `job` once under callgrind and returns its instructions per call (floor not
/// subtracted).
fn count_instructions(
    job: &Job,
    tools: &Tools,
    valgrind: &std::path::Path,
    size: usize,
    calls: u64,
    out_file: &std::path::Path,
) -> Result<f64, String> {
    let prefix: Vec<OsString> = vec![
        valgrind.into(),
        "--tool=callgrind".into(),
        format!("--callgrind-out-file={}", out_file.display()).into(),
        format!("--toggle-collect={}", job.collect_pattern()).into(),
    ];
    let spec = job.spec(tools, size, calls, &prefix);
    run_one(job, &spec, calls)?;
    let text = std::fs::read_to_string(out_file)
        .map_err(|e| format!("{}: {}: {e}", job.describe(), out_file.display()))?;
    let _ = std::fs::remove_file(out_file);
    let total = driver::callgrind_total(&text).map_err(|e| format!("{}: {e}", job.describe()))?;
    if total == 0 {
        return Err(format!(
            "{}: callgrind collected nothing inside {}",
            job.describe(),
            job.collect_pattern()
        ));
    }
    Ok(total as f64 / calls as f64)
}

/// A row of the plan: its place, and the job that measures it or why there is none.
struct PlannedRow {
    op: usize,
    heap: usize,
    path: CallPath,
    calls: String,
    job: Result<usize, String>,
}

/// Checks the request, runs it, prints the table, writes the JSON.
///
/// # Errors
///
/// One line, before anything runs: an unknown heap or op, one named twice, a heap with
/// neither path, a bad size or count, a missing library, no C++ compiler, an unwritable JSON
/// path; while running: a run that failed. After the table and JSON are written: rows
/// whose instructions could not be counted.
pub fn percall(request: &Request) -> Result<(), String> {
    parse_size(&request.size.to_string())?;
    parse_iterations(&request.iterations.to_string())?;
    let ops = resolve_ops(&request.ops)?;
    let mut heaps = resolve_heaps(&request.allocators)?;
    if let Some(path) = &request.json {
        crate::ensure_writable_file(path)?;
    }
    let preloaded: Vec<&str> = heaps
        .iter()
        .filter(|h| h.c_abi.is_some())
        .map(|h| h.name.as_str())
        .collect();
    libraries::ensure_built(&preloaded)?;
    let any_preloaded = !preloaded.is_empty();
    for heap in &mut heaps {
        if heap.c_abi.is_some() {
            heap.c_abi = Some(libraries::resolve(&heap.name)?);
        }
    }
    let driver_path = if !any_preloaded {
        None
    } else {
        let cxx = std::env::var_os("CXX").unwrap_or_else(|| "c++".into());
        Some(driver::compile(&driver::default_dir(), &cxx).map_err(|e| e.to_string())?)
    };
    let tools = Tools {
        driver: driver_path,
        exe: std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?,
    };
    let valgrind = if request.instructions {
        process::find_program("valgrind")
    } else {
        None
    };
    let instructions = InstructionsInfo {
        counted: valgrind.is_some(),
        calls: valgrind
            .as_ref()
            .map(|_| request.iterations.min(INSTRUCTION_CALLS)),
        note: match (&valgrind, request.instructions) {
            (Some(_), _) => None,
            (None, true) => Some(format!(
                "not counted: valgrind not found ({VALGRIND_INSTALL_HINT})"
            )),
            (None, false) => Some("not counted (--instructions not given)".to_owned()),
        },
    };

    // The jobs: the floors first, then every row that has a twin.
    let mut jobs: Vec<Job> = Vec::new();
    let c_floor = tools.driver.as_ref().map(|_| {
        jobs.push(Job::Driver {
            op: driver::FLOOR,
            preload: None,
            heap: "system".to_owned(),
        });
        jobs.len() - 1
    });
    let rust_floor = heaps.iter().any(|h| h.in_process).then(|| {
        jobs.push(Job::InProcess {
            op: InProcessOp::Floor,
            heap: "system".to_owned(),
        });
        jobs.len() - 1
    });
    let mut planned: Vec<PlannedRow> = Vec::new();
    for (o, op) in ops.iter().enumerate() {
        for (h, heap) in heaps.iter().enumerate() {
            if let Some(preload) = &heap.c_abi {
                jobs.push(Job::Driver {
                    op,
                    preload: preload.clone(),
                    heap: heap.name.clone(),
                });
                planned.push(PlannedRow {
                    op: o,
                    heap: h,
                    path: CallPath::CAbi,
                    calls: c_calls(op, request.size),
                    job: Ok(jobs.len() - 1),
                });
            }
            if !heap.in_process {
                continue;
            }
            let paths: &[CallPath] = if *op == "free" {
                &[CallPath::InProcess, CallPath::InProcessUnsized]
            } else {
                &[CallPath::InProcess]
            };
            for &path in paths {
                let twin = in_process_twin(op, path).map_err(str::to_owned);
                let twin = twin.and_then(|t| {
                    if t.needs_malloc_heap() && !heap.malloc_heap {
                        Err(NOT_MALLOC_HEAP.to_owned())
                    } else {
                        Ok(t)
                    }
                });
                let calls = twin
                    .as_ref()
                    .map_or_else(|_| "-".to_owned(), |t| t.calls(request.size));
                let job = twin.map(|t| {
                    jobs.push(Job::InProcess {
                        op: t,
                        heap: heap.name.clone(),
                    });
                    jobs.len() - 1
                });
                planned.push(PlannedRow {
                    op: o,
                    heap: h,
                    path,
                    calls,
                    job,
                });
            }
        }
    }

    // A Ctrl-C stops the programs too, not only alloclab.
    process::kill_programs_on_interrupt();
    let progress = Progress::new(
        jobs.len() as u64 * u64::from(RUNS)
            + if valgrind.is_some() {
                jobs.len() as u64
            } else {
                0
            },
    );
    let mut outputs: Vec<Vec<PercallOutput>> = vec![Vec::new(); jobs.len()];
    for run in 1..=RUNS {
        for (j, job) in jobs.iter().enumerate() {
            progress.tick(&format!("run {run}/{RUNS}: {}", job.describe()));
            let spec = job.spec(&tools, request.size, request.iterations, &[]);
            outputs[j].push(run_one(job, &spec, request.iterations)?);
        }
    }
    let mut instructions_per_call: Vec<Option<f64>> = vec![None; jobs.len()];
    let mut warnings: Vec<String> = Vec::new();
    if let Some(valgrind) = &valgrind {
        let calls = request.iterations.min(INSTRUCTION_CALLS);
        let scratch = std::env::temp_dir().join(format!("alloclab-percall-{}", std::process::id()));
        std::fs::create_dir_all(&scratch)
            .map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
        let counted = Mutex::new(vec![None; jobs.len()]);
        let next = AtomicUsize::new(0);
        let workers = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 4);
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| {
                    loop {
                        let j = next.fetch_add(1, Ordering::Relaxed);
                        let Some(job) = jobs.get(j) else { break };
                        progress.tick(&format!("callgrind: {}", job.describe()));
                        let file = scratch.join(format!("callgrind-{j}.out"));
                        let result =
                            count_instructions(job, &tools, valgrind, request.size, calls, &file);
                        counted.lock().expect("no worker panics")[j] = Some(result);
                    }
                });
            }
        });
        let _ = std::fs::remove_dir_all(&scratch);
        for (j, result) in counted
            .into_inner()
            .expect("no worker panics")
            .into_iter()
            .enumerate()
        {
            match result {
                Some(Ok(v)) => instructions_per_call[j] = Some(v),
                Some(Err(e)) => warnings.push(e),
                None => {}
            }
        }
    }
    progress.finish();

    let ns = |j: usize| -> Vec<f64> { outputs[j].iter().map(PercallOutput::ns_per_call).collect() };
    let mut floors = Vec::new();
    let mut floor_instr = [None, None];
    for (k, (job, path)) in [(c_floor, CallPath::CAbi), (rust_floor, CallPath::InProcess)]
        .into_iter()
        .enumerate()
    {
        if let Some(j) = job {
            floor_instr[k] = instructions_per_call[j];
            floors.push(Floor {
                path,
                ns_per_call: Spread::of(&ns(j)),
                instructions_per_call: instructions_per_call[j],
            });
        }
    }
    let mut op_results: Vec<OpResults> = ops
        .iter()
        .map(|op| OpResults {
            op: (*op).to_owned(),
            c_abi_calls: c_calls(op, request.size),
            rows: Vec::new(),
        })
        .collect();
    for p in planned {
        let heap = &heaps[p.heap];
        let floor = floor_instr[usize::from(p.path != CallPath::CAbi)];
        let row = match p.job {
            Ok(j) => {
                let runs = ns(j);
                let (moved, calls) = outputs[j].iter().fold((0u64, 0u64), |(m, c), o| {
                    (m + o.moved.unwrap_or(0), c + o.calls)
                });
                Row {
                    allocator: heap.name.clone(),
                    path: p.path,
                    calls: p.calls,
                    library: library_text(heap, p.path),
                    not_applicable: None,
                    ns_per_call: Some(Spread::of(&runs)),
                    runs_ns_per_call: runs,
                    instructions_per_call: instructions_per_call[j].zip(floor).map(|(v, f)| v - f),
                    moved_fraction: outputs[j]
                        .iter()
                        .any(|o| o.moved.is_some())
                        .then(|| moved as f64 / calls as f64),
                    ratio_to_in_process: None,
                    instructions_ratio_to_in_process: None,
                    ratio_against: None,
                }
            }
            Err(why) => Row {
                allocator: heap.name.clone(),
                path: p.path,
                calls: p.calls,
                library: None,
                not_applicable: Some(why),
                runs_ns_per_call: Vec::new(),
                ns_per_call: None,
                instructions_per_call: None,
                moved_fraction: None,
                ratio_to_in_process: None,
                instructions_ratio_to_in_process: None,
                ratio_against: None,
            },
        };
        op_results[p.op].rows.push(row);
    }
    for op in &mut op_results {
        fill_ratios(&mut op.rows);
    }
    let results = PercallResults {
        format: PERCALL_FORMAT,
        version: PERCALL_FORMAT_VERSION,
        machine: crate::machine::describe(),
        command: std::iter::once("alloclab".to_owned())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        created_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        size: request.size,
        iterations: request.iterations,
        batch: request.iterations.min(driver::BATCH),
        runs: RUNS,
        harness_build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        instructions,
        floors,
        ops: op_results,
    };
    print!("{}", table(&results));
    if let Some(path) = &request.json {
        let mut text = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
        text.push('\n');
        crate::report::write_atomic(path, text.as_bytes()).map_err(|e| e.to_string())?;
        println!("wrote {}", path.display());
    }
    for w in &warnings {
        eprintln!("warning: instructions not counted: {w}");
    }
    match warnings.len() {
        0 => Ok(()),
        n => Err(format!(
            "instructions could not be counted for {n} row{} (warnings above)",
            if n == 1 { "" } else { "s" }
        )),
    }
}

fn library_text(heap: &Heap, path: CallPath) -> Option<String> {
    match (path, &heap.c_abi) {
        (CallPath::CAbi, Some(Some(lib))) => Some(lib.display().to_string()),
        _ => None,
    }
}

/// Sets each C ABI row's ratios to the same heap's in-process row: the unsized one where
/// it was measured (`free`), else the trait's.
fn fill_ratios(rows: &mut [Row]) {
    for i in 0..rows.len() {
        if rows[i].path != CallPath::CAbi || rows[i].ns_per_call.is_none() {
            continue;
        }
        let twin = [CallPath::InProcessUnsized, CallPath::InProcess]
            .into_iter()
            .find_map(|path| {
                rows.iter().find(|r| {
                    r.allocator == rows[i].allocator && r.path == path && r.ns_per_call.is_some()
                })
            });
        let Some(twin) = twin else { continue };
        let (path, ns, instr) = (
            twin.path,
            twin.ns_per_call.map(|s| s.median),
            twin.instructions_per_call,
        );
        let row = &mut rows[i];
        row.ratio_against = Some(path);
        row.ratio_to_in_process = row
            .ns_per_call
            .map(|s| s.median)
            .zip(ns.filter(|v| *v > 0.0))
            .map(|(c, t)| c / t);
        row.instructions_ratio_to_in_process = row
            .instructions_per_call
            .zip(instr.filter(|v| *v > 0.0))
            .map(|(c, t)| c / t);
    }
}

fn resolve_ops(names: &[String]) -> Result<Vec<&'static str>, String> {
    if names.is_empty() {
        return Ok(driver::OPS.to_vec());
    }
    let mut out: Vec<&'static str> = Vec::new();
    for name in names {
        let op = driver::OPS
            .iter()
            .find(|o| **o == name)
            .ok_or_else(|| format!("unknown op '{name}' (known: {})", driver::OPS.join(", ")))?;
        if out.contains(op) {
            return Err(format!("op '{name}' is named twice"));
        }
        out.push(op);
    }
    Ok(out)
}

fn resolve_heaps(names: &[String]) -> Result<Vec<Heap>, String> {
    if names.is_empty() {
        return Err("no allocator named (--alloc A,B,...)".into());
    }
    let mut out: Vec<Heap> = Vec::new();
    for name in names {
        let info = peers::find(name).ok_or_else(|| {
            let known: Vec<&str> = peers::ALLOCATORS
                .iter()
                .filter(|a| a.fits(Capability::HostHeap) || a.fits(Capability::Program))
                .map(|a| a.name)
                .collect();
            format!(
                "unknown allocator '{name}' (those percall can measure: {})",
                known.join(", ")
            )
        })?;
        if out.iter().any(|h| h.name == info.name) {
            return Err(format!("allocator '{name}' is named twice"));
        }
        let c_abi = libraries::source(info.name).map(|_| None);
        let in_process = info.fits(Capability::HostHeap);
        if c_abi.is_none() && !in_process {
            return Err(format!(
                "allocator '{name}' is neither a host heap nor a heap a program can run on: \
                 percall has nothing to call on it"
            ));
        }
        out.push(Heap {
            name: info.name.to_owned(),
            c_abi,
            in_process,
            malloc_heap: is_malloc_heap(info.name),
        });
    }
    Ok(out)
}

/// A progress bar on a terminal, nothing elsewhere.
struct Progress(indicatif::ProgressBar);

impl Progress {
    fn new(total: u64) -> Self {
        use std::io::IsTerminal as _;
        if !std::io::stderr().is_terminal() {
            return Self(indicatif::ProgressBar::hidden());
        }
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} runs  {msg}",
            )
            .expect("valid progress template")
            .progress_chars("=> "),
        );
        Self(bar)
    }

    fn tick(&self, message: &str) {
        self.0.set_message(message.to_owned());
        self.0.inc(1);
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_a_twin_or_a_reason() {
        for op in driver::OPS {
            let twin = in_process_twin(op, CallPath::InProcess);
            let cxx = [
                "new",
                "delete",
                "delete-sized",
                "new-aligned",
                "new-nothrow",
            ];
            assert_eq!(twin.is_err(), cxx.contains(op), "{op}");
        }
        assert_eq!(
            in_process_twin("free", CallPath::InProcessUnsized),
            Ok(InProcessOp::FreeUnsized)
        );
        assert!(in_process_twin("malloc", CallPath::InProcessUnsized).is_err());
    }

    #[test]
    fn in_process_ops_round_trip_their_names() {
        for op in InProcessOp::ALL {
            assert_eq!(InProcessOp::from_name(op.name()), Some(op));
        }
        assert_eq!(InProcessOp::from_name("new"), None);
    }

    #[test]
    fn in_process_rounds_count_every_call() {
        for op in InProcessOp::ALL {
            let heap = if op.needs_malloc_heap() {
                "wfspan"
            } else {
                "system"
            };
            // 2,500 calls: two full batches and a half one.
            let out = measure_in_process(heap, op.name(), 64, 2500).unwrap();
            assert_eq!(out.op, op.name());
            assert_eq!(out.calls, 2500);
            assert_eq!(out.size, 64);
            match op {
                InProcessOp::ReallocSame | InProcessOp::ReallocGrow => {
                    let moved = out.moved.unwrap();
                    assert!(moved <= 2500);
                    if op == InProcessOp::ReallocGrow {
                        // A 64-byte block among a batch of neighbours cannot grow to 144
                        // bytes in place, but where a neighbour happens to be free.
                        assert!(moved >= 1250, "{moved}");
                    }
                }
                _ => assert_eq!(out.moved, None),
            }
        }
        let e = measure_in_process("system", "usable-size", 64, 10).unwrap_err();
        assert!(e.contains(NOT_MALLOC_HEAP), "{e}");
        let e = measure_in_process("libmimalloc", "malloc", 64, 10).unwrap_err();
        assert!(e.contains("not a heap alloclab runs in-process"), "{e}");
        assert!(measure_in_process("system", "new", 64, 10).is_err());
        assert!(measure_in_process("system", "malloc", 0, 10).is_err());
        assert!(measure_in_process("system", "malloc", 64, 0).is_err());
    }

    #[test]
    fn sizes_and_counts_are_checked() {
        assert_eq!(parse_size("64"), Ok(64));
        assert_eq!(parse_size("1073741824"), Ok(1 << 30));
        for bad in ["0", "1073741825", "-1", "x", ""] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("1 GiB"), "{e}");
        }
        assert_eq!(parse_iterations("1"), Ok(1));
        assert!(parse_iterations("0").is_err());
        assert_eq!(malloc_align(64), 16);
        assert_eq!(malloc_align(5), 8);
        assert_eq!(malloc_align(1), 1);
    }

    fn row(allocator: &str, path: CallPath, ns: Option<f64>, instr: Option<f64>) -> Row {
        Row {
            allocator: allocator.into(),
            path,
            calls: String::new(),
            library: None,
            not_applicable: ns.is_none().then(|| "n/a".to_owned()),
            runs_ns_per_call: ns.into_iter().collect(),
            ns_per_call: ns.map(|v| Spread::of(&[v])),
            instructions_per_call: instr,
            moved_fraction: None,
            ratio_to_in_process: None,
            instructions_ratio_to_in_process: None,
            ratio_against: None,
        }
    }

    #[test]
    fn ratios_compare_a_heap_with_itself_the_unsized_free_first() {
        let mut rows = vec![
            row("wfspan", CallPath::CAbi, Some(12.0), Some(60.0)),
            row("wfspan", CallPath::InProcess, Some(4.0), Some(20.0)),
            row("wfspan", CallPath::InProcessUnsized, Some(6.0), Some(30.0)),
            row("system", CallPath::CAbi, Some(10.0), None),
            row("system", CallPath::InProcess, Some(5.0), Some(40.0)),
            row("system", CallPath::InProcessUnsized, None, None),
            row("libmimalloc", CallPath::CAbi, Some(3.0), Some(15.0)),
        ];
        fill_ratios(&mut rows);
        assert_eq!(rows[0].ratio_to_in_process, Some(2.0));
        assert_eq!(rows[0].instructions_ratio_to_in_process, Some(2.0));
        assert_eq!(rows[0].ratio_against, Some(CallPath::InProcessUnsized));
        assert_eq!(rows[3].ratio_to_in_process, Some(2.0));
        assert_eq!(rows[3].instructions_ratio_to_in_process, None);
        assert_eq!(rows[3].ratio_against, Some(CallPath::InProcess));
        assert_eq!(rows[6].ratio_to_in_process, None);
        assert!(rows[1].ratio_to_in_process.is_none());
    }
}
