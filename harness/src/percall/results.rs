//! What `alloclab percall` measured: the JSON document (`alloclab-percall`, version 1) and
//! the terminal table.

use super::*;

/// The JSON document: the parameters, the floors and every row.
#[derive(Debug, Serialize)]
pub struct PercallResults {
    /// [`PERCALL_FORMAT`].
    pub format: &'static str,
    /// [`PERCALL_FORMAT_VERSION`].
    pub version: u32,
    /// The machine.
    pub machine: crate::results::Machine,
    /// The command line.
    pub command: String,
    /// When the runs ended (seconds since the Unix epoch).
    pub created_unix_s: u64,
    /// Block size, bytes.
    pub size: usize,
    /// Calls per op and run.
    pub iterations: u64,
    /// Blocks per round.
    pub batch: u64,
    /// Runs per figure (the figure is their median).
    pub runs: u32,
    /// `release` or `debug`: how this `alloclab` (whose code the in-process rows run) was
    /// compiled.
    pub harness_build: &'static str,
    /// How instructions were counted, if they were.
    pub instructions: InstructionsInfo,
    /// The floor of each path measured.
    pub floors: Vec<Floor>,
    /// One entry per op, in the order asked.
    pub ops: Vec<OpResults>,
}

/// How instructions were counted.
#[derive(Debug, Serialize)]
pub struct InstructionsInfo {
    /// Whether they were.
    pub counted: bool,
    /// Calls per op under callgrind, when counted.
    pub calls: Option<u64>,
    /// Why not, when not: not asked, or valgrind missing (with the install line).
    pub note: Option<String>,
}

/// The loop with an empty call, on one path.
#[derive(Debug, Serialize)]
pub struct Floor {
    /// The path (`c-abi` or `in-process`).
    pub path: CallPath,
    /// Nanoseconds per call over the runs (included in every row's ns/call).
    pub ns_per_call: Spread,
    /// Instructions per call (subtracted from every row's instructions per call).
    pub instructions_per_call: Option<f64>,
}

/// Median, min and max over the runs.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    pub(super) fn of(values: &[f64]) -> Self {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        Self {
            median: crate::results::median_of_sorted(&v),
            min: v.first().copied().unwrap_or(0.0),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

/// One op: what each path calls, and its rows.
#[derive(Debug, Serialize)]
pub struct OpResults {
    /// The op's command-line name.
    pub op: String,
    /// What the C ABI rows call.
    pub c_abi_calls: String,
    /// One row per heap and path, in the order of the heaps asked.
    pub rows: Vec<Row>,
}

/// One heap on one path.
#[derive(Debug, Serialize)]
pub struct Row {
    /// The heap.
    pub allocator: String,
    /// The path.
    pub path: CallPath,
    /// What the row calls.
    pub calls: String,
    /// The library preloaded (C ABI rows; `null` for `system`, which preloads nothing).
    pub library: Option<String>,
    /// Why the row has no figures (`null` where it has).
    pub not_applicable: Option<String>,
    /// Nanoseconds per call of each run, in order.
    pub runs_ns_per_call: Vec<f64>,
    /// Their median, min and max (floor included).
    pub ns_per_call: Option<Spread>,
    /// Instructions per call, the floor's subtracted (`null`: not counted).
    pub instructions_per_call: Option<f64>,
    /// For the reallocs: the fraction of calls that returned another block, over all runs.
    pub moved_fraction: Option<f64>,
    /// C ABI rows: ns/call over the same heap's in-process ns/call.
    pub ratio_to_in_process: Option<f64>,
    /// C ABI rows: the same for instructions per call.
    pub instructions_ratio_to_in_process: Option<f64>,
    /// C ABI rows: the in-process row the ratios are against (`in-process-unsized` for
    /// `free` where the heap has one: it does the C `free`'s work, finding the size).
    pub ratio_against: Option<CallPath>,
}

/// The terminal table: a header, the floors, then one table per op.
pub fn table(results: &PercallResults) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "percall: {} B blocks, {} calls per op and run in batches of {}; ns/call: median of \
         {} runs (min-max), each a fresh process, runs interleaved across heaps",
        results.size, results.iterations, results.batch, results.runs
    );
    if results.harness_build == "debug" {
        let _ = writeln!(
            out,
            "note: this alloclab is a debug build: the in-process rows (and alloclab's preload \
             libraries built beside it) run unoptimised code; build with --release"
        );
    }
    let counted = results.instructions.counted;
    match (&results.instructions.note, results.instructions.calls) {
        (Some(note), _) => {
            let _ = writeln!(out, "instr/call: {note}");
        }
        (None, Some(calls)) => {
            let _ = writeln!(
                out,
                "instr/call: callgrind inside the timed function over {calls} calls, the \
                 floor subtracted"
            );
        }
        (None, None) => {}
    }
    let floors: Vec<String> = results
        .floors
        .iter()
        .map(|f| {
            let instr = f
                .instructions_per_call
                .map_or(String::new(), |v| format!(", {} instr", fmt_value(v)));
            format!(
                "{} {} ns{instr}",
                f.path.label(),
                fmt_value(f.ns_per_call.median)
            )
        })
        .collect();
    if !floors.is_empty() {
        let _ = writeln!(
            out,
            "floor (the same loop calling an empty function), per call: {}; included in \
             ns/call{}",
            floors.join("; "),
            if counted {
                ", subtracted from instr/call"
            } else {
                ""
            }
        );
    }
    for op in &results.ops {
        let _ = writeln!(out, "\n{} (C ABI: {})", op.op, op.c_abi_calls);
        let resizes = op.rows.iter().any(|r| r.moved_fraction.is_some());
        let _ = write!(
            out,
            "{:<12} {:<19} {:>22} {:>11} {:>9}",
            "heap", "path", "ns/call", "instr/call", "C/in-proc"
        );
        if counted {
            let _ = write!(out, " {:>11}", "instr ratio");
        }
        if resizes {
            let _ = write!(out, " {:>6}", "moved");
        }
        out.push_str("  in-process call\n");
        for r in &op.rows {
            let ns = match (&r.ns_per_call, &r.not_applicable) {
                (Some(s), _) => format!(
                    "{} ({}-{})",
                    fmt_value(s.median),
                    fmt_value(s.min),
                    fmt_value(s.max)
                ),
                _ => "n/a".to_owned(),
            };
            let instr = match (r.instructions_per_call, &r.not_applicable) {
                (Some(v), _) => format!("{v:.1}"),
                (None, Some(_)) => "n/a".to_owned(),
                (None, None) => "-".to_owned(),
            };
            let ratio = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.2}"));
            let mut line = String::new();
            let _ = write!(
                line,
                "{:<12} {:<19} {:>22} {:>11} {:>9}",
                r.allocator,
                r.path.label(),
                ns,
                instr,
                ratio(r.ratio_to_in_process)
            );
            if counted {
                let _ = write!(line, " {:>11}", ratio(r.instructions_ratio_to_in_process));
            }
            if resizes {
                let moved = r
                    .moved_fraction
                    .map_or(String::new(), |m| format!("{:.0}%", m * 100.0));
                let _ = write!(line, " {moved:>6}");
            }
            let what = match (&r.not_applicable, r.path) {
                (Some(why), _) => why.as_str(),
                (None, CallPath::CAbi) => "",
                (None, _) => r.calls.as_str(),
            };
            let _ = write!(line, "  {what}");
            out.push_str(line.trim_end());
            out.push('\n');
        }
        if op.op == "free"
            && op
                .rows
                .iter()
                .any(|r| r.ratio_against == Some(CallPath::InProcessUnsized))
        {
            let _ = writeln!(
                out,
                "(C free's ratio is to the unsized in-process free where the heap has one: \
                 both find the block's size)"
            );
        }
    }
    out
}
