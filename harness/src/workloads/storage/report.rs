//! The `storage` suite's part of `report.md`, its charts and its terminal summary, made
//! from the records of a [`ResultsFile`]: the generic per-workload tables would spread one
//! comparison over 33 workloads, so this suite gets its own layout.
//!
//! * **Targets** — the three claims alloclab makes for alloclab-pmem under the engines, as
//!   ✓/✗ lines with the figure that decides each ([`targets`]).
//! * **Per mix** — a table (one row per engine, thread count and heap: throughput, its
//!   ratio to PMDK, tail latency, time split, flushes and fences per operation) and a chart,
//!   `storage-throughput-<mix>.svg` (bars of ops/s per heap, grouped by engine and threads).
//! * **Time split** — `storage-split.svg`, one stacked bar per mix and heap (index, crash
//!   consistency, memory management, modification), one panel per engine, at the smallest
//!   thread count.
//! * **Recovery** — heap and engine recovery times per engine, heap and mix.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use alloclab_storage_engines::ENGINES;
use plotters::prelude::*;

pub use crate::targets::{Check, Verdict};

use super::Spec;
use super::ycsb::{KeyChoice, Mix};
use crate::report::{
    GroupAxis, ReportError, escape_cell, fmt_tick, fmt_value, table_header, table_row, write_atomic,
};
use crate::results::{Record, ResultsFile};

/// The suite's name in results.
pub const SUITE: &str = "storage";
/// The heaps, in column order; ratios are against the first.
pub const HEAPS: &[&str] = &["pmdk", "alloclab-pmem", "dram"];
/// The heap the targets are stated for, and the one they compare with.
const OURS: &str = "alloclab-pmem";
const PMDK: &str = "pmdk";
/// The memory-management share target: its limit, %.
pub const MM_SHARE_LIMIT: f64 = 15.0;
/// The write-heavy mixes of the memory-management share target.
pub const MM_MIXES: &[Mix] = &[Mix::D, Mix::G, Mix::H];
/// The throughput target: the ratio alloclab-pmem / PMDK.
pub const SPEEDUP_TARGET: f64 = 1.5;
/// The mixes of the throughput target.
pub const SPEEDUP_MIXES: &[Mix] = &[Mix::C, Mix::D, Mix::F, Mix::G, Mix::H];
/// Where the crash target is checked: the engines' crash tests (the simulator crashes them at every
/// fence and checks every committed operation survives).
pub const CRASH_TEST_COMMAND: &str =
    "cargo test --release -p alloclab-storage-engines --test crash --test cow";

/// The metric of the control's throughput over alloclab-pmem's, same run.
const CONTROL_RATIO: &str = "control_ops_ratio";
/// The metric of the control's memory-management share.
const CONTROL_MM: &str = "control_share_mm";

/// A (mix, key choice) section of the report.
type Section = (Mix, KeyChoice);

/// The suite's records, looked up by (spec, heap, threads, metric).
struct Storage<'a> {
    records: Vec<(Spec, &'a Record)>,
}

impl<'a> Storage<'a> {
    fn new(results: &'a ResultsFile) -> Self {
        Self {
            records: results
                .records
                .iter()
                .filter(|r| r.suite == SUITE)
                .filter_map(|r| Spec::parse(&r.workload).map(|s| (s, r)))
                .collect(),
        }
    }

    fn get(
        &self,
        engine: &str,
        section: Section,
        heap: &str,
        threads: usize,
        metric: &str,
    ) -> Option<&'a Record> {
        self.records
            .iter()
            .find(|(s, r)| {
                s.engine == engine
                    && (s.mix, s.keys) == section
                    && r.allocator == heap
                    && r.threads == threads
                    && r.metric == metric
            })
            .map(|(_, r)| *r)
    }

    fn median(
        &self,
        engine: &str,
        section: Section,
        heap: &str,
        threads: usize,
        metric: &str,
    ) -> Option<f64> {
        self.get(engine, section, heap, threads, metric)
            .map(|r| r.median)
            .filter(|v| v.is_finite())
    }

    /// How far `metric`'s runs at a point spread: max over min, and the runs; `None` when
    /// not measured or not positive.
    fn spread(
        &self,
        engine: &str,
        section: Section,
        heap: &str,
        threads: usize,
        metric: &str,
    ) -> Option<(f64, u32)> {
        self.get(engine, section, heap, threads, metric)
            .filter(|r| r.min > 0.0 && r.max.is_finite())
            .map(|r| (r.max / r.min, r.runs))
    }

    /// How far alloclab-pmem's throughput over PMDK's moved from run to run at a point:
    /// max over min of the run-by-run ratio (run `i` of both heaps shared a process, see
    /// `storage::driver`), and the runs; `None` without per-run values for both.
    fn ratio_spread(&self, engine: &str, section: Section, threads: usize) -> Option<(f64, u32)> {
        let ours = self.get(engine, section, OURS, threads, "ops_per_s")?;
        let theirs = self.get(engine, section, PMDK, threads, "ops_per_s")?;
        let ratio = ours
            .ratio_to(theirs)
            .filter(|r| r.runs > 0 && r.min > 0.0)?;
        Some((ratio.spread(), ratio.runs))
    }

    /// How far the control's throughput over alloclab-pmem's moved from run to run at a
    /// point (max over min), and the runs: the machine's own spread of a ratio of two
    /// heaps there (see `storage`'s "The control").
    fn control_spread(&self, engine: &str, section: Section, threads: usize) -> Option<(f64, u32)> {
        self.spread(engine, section, OURS, threads, CONTROL_RATIO)
    }

    fn engines(&self) -> Vec<&'static str> {
        ENGINES
            .iter()
            .copied()
            .filter(|e| self.records.iter().any(|(s, _)| s.engine == *e))
            .collect()
    }

    fn heaps(&self) -> Vec<&'static str> {
        HEAPS
            .iter()
            .copied()
            .filter(|h| self.records.iter().any(|(_, r)| r.allocator == *h))
            .collect()
    }

    /// The most runs any record of the suite summarises.
    fn runs(&self) -> u32 {
        self.records.iter().map(|(_, r)| r.runs).max().unwrap_or(0)
    }

    fn threads(&self) -> Vec<usize> {
        let mut t: Vec<usize> = self.records.iter().map(|(_, r)| r.threads).collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    fn sections(&self) -> Vec<Section> {
        let mut out = Vec::new();
        for keys in [KeyChoice::Zipfian, KeyChoice::Uniform] {
            for mix in Mix::ALL {
                if self
                    .records
                    .iter()
                    .any(|(s, _)| (s.mix, s.keys) == (mix, keys))
                {
                    out.push((mix, keys));
                }
            }
        }
        out
    }
}

/// Whether the results hold any record of the suite.
pub fn has_storage(results: &ResultsFile) -> bool {
    results.records.iter().any(|r| r.suite == SUITE)
}

fn section_title((mix, keys): Section) -> String {
    format!(
        "mix {} ({}), {} keys",
        mix.name(),
        mix.describe(),
        keys.name()
    )
}

fn section_slug((mix, keys): Section) -> String {
    match keys {
        KeyChoice::Zipfian => mix.name().to_owned(),
        KeyChoice::Uniform => format!("{}-uniform", mix.name()),
    }
}

/// The chart file of one mix's throughput.
pub fn throughput_chart_name(section: Section) -> String {
    format!("storage-throughput-{}.svg", section_slug(section))
}

/// The stacked time-split chart's file.
pub const SPLIT_CHART: &str = "storage-split.svg";

/// The three claims alloclab makes for alloclab-pmem under the storage engines, checked
/// over this run's medians: its memory-management share, its throughput against PMDK, and
/// no committed operation lost in a crash. Each says how far the runs behind its deciding
/// figure spread. A claim over every engine and mix fails on any point measured against
/// it; with every measured point for it but some not measured, it is undecided (·).
pub fn targets(results: &ResultsFile) -> Vec<Check> {
    let view = Storage::new(results);
    let engines = view.engines();
    let missing_engines: Vec<&str> = ENGINES
        .iter()
        .copied()
        .filter(|e| !engines.contains(e))
        .collect();
    let threads = view.threads();
    let mut checks = Vec::new();

    // Memory-management share with alloclab-pmem.
    let mut worst: Option<(f64, String, (&str, Section, usize))> = None;
    let mut widest = Widest::default();
    let mut missing = Vec::new();
    for &engine in &engines {
        for &mix in MM_MIXES {
            for &t in &threads {
                let section = (mix, KeyChoice::Zipfian);
                let at = || format!("{engine}-{} at {t}", mix.name());
                widest.heap(view.spread(engine, section, OURS, t, "share_mm"), at);
                widest.control(view.spread(engine, section, OURS, t, CONTROL_MM), at);
                match view.median(engine, section, OURS, t, "share_mm") {
                    Some(v) => {
                        if worst.as_ref().is_none_or(|(w, _, _)| v > *w) {
                            worst = Some((
                                v,
                                format!("{engine}-{} at {t} thread(s)", mix.name()),
                                (engine, section, t),
                            ));
                        }
                    }
                    None => missing.push(format!("{engine}-{}/{t}", mix.name())),
                }
            }
        }
    }
    let mixes = MM_MIXES
        .iter()
        .map(|m| m.name())
        .collect::<Vec<_>>()
        .join(", ");
    let complete = missing.is_empty() && missing_engines.is_empty();
    let (verdict, detail) = match &worst {
        None => (Verdict::NotHere, "not measured".to_owned()),
        Some((w, at, point)) => {
            let control = view
                .spread(point.0, point.1, OURS, point.2, CONTROL_MM)
                .map(|(s, _)| s);
            let spread = view
                .spread(point.0, point.1, OURS, point.2, "share_mm")
                .map_or(String::new(), |(s, runs)| {
                    spread_note(&[("", s)], runs, control)
                });
            (
                decide(*w <= MM_SHARE_LIMIT, complete),
                format!("highest {w:.1}% ({at}{spread}){}", widest.note()),
            )
        }
    };
    checks.push(Check {
        verdict,
        line: format!(
            "alloclab claims, for alloclab-pmem: memory management takes <= {MM_SHARE_LIMIT}% of engine time on mixes {mixes} in every engine: {detail}{}",
            gaps(&missing, &missing_engines)
        ),
    });

    // alloclab-pmem vs PMDK throughput.
    let mixes = SPEEDUP_MIXES
        .iter()
        .map(|m| m.name())
        .collect::<Vec<_>>()
        .join(", ");
    let pmdk_ran = view.records.iter().any(|(_, r)| r.allocator == PMDK);
    if !pmdk_ran {
        checks.push(Check {
            verdict: Verdict::NotHere,
            line: format!(
                "alloclab claims, for alloclab-pmem: throughput >= {SPEEDUP_TARGET}x PMDK's on mixes {mixes} in every engine: skipped, PMDK was not measured in this run (libpmemobj.so.1 missing, or not asked for)"
            ),
        });
    } else {
        let mut worst: Option<(f64, String, (&str, Section, usize))> = None;
        let mut widest = Widest::default();
        let mut missing = Vec::new();
        for &engine in &engines {
            for &mix in SPEEDUP_MIXES {
                for &t in &threads {
                    let section = (mix, KeyChoice::Zipfian);
                    let at = || format!("{engine}-{} at {t}", mix.name());
                    widest.heap(view.ratio_spread(engine, section, t), at);
                    widest.control(view.control_spread(engine, section, t), at);
                    let ours = view.median(engine, section, OURS, t, "ops_per_s");
                    let theirs = view.median(engine, section, PMDK, t, "ops_per_s");
                    match ours.zip(theirs).filter(|(_, b)| *b > 0.0) {
                        Some((a, b)) => {
                            let r = a / b;
                            if worst.as_ref().is_none_or(|(w, _, _)| r < *w) {
                                worst = Some((
                                    r,
                                    format!("{engine}-{} at {t} thread(s)", mix.name()),
                                    (engine, section, t),
                                ));
                            }
                        }
                        None => missing.push(format!("{engine}-{}/{t}", mix.name())),
                    }
                }
            }
        }
        let complete = missing.is_empty() && missing_engines.is_empty();
        let (verdict, detail) = match &worst {
            None => (Verdict::NotHere, "not measured".to_owned()),
            Some((w, at, (engine, section, t))) => {
                // The run-by-run ratio's spread where the runs kept their values; each
                // heap's own spread otherwise.
                let spreads: Vec<(&str, f64)> = match view.ratio_spread(engine, *section, *t) {
                    Some((s, _)) => vec![("ratio", s)],
                    None => [OURS, PMDK]
                        .into_iter()
                        .filter_map(|h| {
                            view.spread(engine, *section, h, *t, "ops_per_s")
                                .map(|(s, _)| (h, s))
                        })
                        .collect(),
                };
                let runs = view
                    .get(engine, *section, OURS, *t, "ops_per_s")
                    .map_or(0, |r| r.runs);
                let control = view.control_spread(engine, *section, *t).map(|(s, _)| s);
                (
                    decide(*w >= SPEEDUP_TARGET, complete),
                    format!(
                        "lowest {w:.2}x ({at}{}){}",
                        spread_note(&spreads, runs, control),
                        widest.note()
                    ),
                )
            }
        };
        checks.push(Check {
            verdict,
            line: format!(
                "alloclab claims, for alloclab-pmem: throughput >= {SPEEDUP_TARGET}x PMDK's on mixes {mixes} in every engine: {detail}{}",
                gaps(&missing, &missing_engines)
            ),
        });
    }

    // Crash tests: not this run's to decide.
    let durable_jobs = {
        let mut jobs: Vec<(&str, &str, usize)> = view
            .records
            .iter()
            .filter(|(_, r)| r.metric == "recovery_engine_ms")
            .map(|(_, r)| (r.workload.as_str(), r.allocator.as_str(), r.threads))
            .collect();
        jobs.sort_unstable();
        jobs.dedup();
        jobs.len()
    };
    checks.push(Check {
        verdict: Verdict::NotHere,
        line: format!(
            "alloclab claims, for every engine on alloclab-pmem: no committed operation is lost in a crash: decided by the crash tests (`{CRASH_TEST_COMMAND}`), not by this run; here, {durable_jobs} measurement(s) reopened their pool and found every committed item (a loss fails the measurement, see failures)"
        ),
    });
    checks
}

/// The verdict of a claim over every point: failed by any measured point, undecided while a
/// point is missing, else met.
fn decide(measured_ok: bool, complete: bool) -> Verdict {
    match (measured_ok, complete) {
        (false, _) => Verdict::Fail,
        (true, false) => Verdict::NotHere,
        (true, true) => Verdict::Pass,
    }
}

/// `; spread over N runs: alloclab-pmem 1.04, pmdk 1.06` (max over min of each heap's runs at
/// the deciding point), then `, control 1.05` where the control ran, or `; one run`.
fn spread_note(spreads: &[(&str, f64)], runs: u32, control: Option<f64>) -> String {
    if runs <= 1 {
        return "; one run".to_owned();
    }
    let each: Vec<String> = spreads
        .iter()
        .map(|(h, s)| {
            if h.is_empty() {
                format!("{s:.2}")
            } else {
                format!("{h} {s:.2}")
            }
        })
        .collect();
    let control = control.map_or(String::new(), |c| format!(", control {c:.2}"));
    format!(
        "; spread over {runs} runs, max/min: {}{control}",
        each.join(", ")
    )
}

/// The widest spread over a check's points, of alloclab-pmem's figure and of its control's.
#[derive(Default)]
struct Widest {
    heap: Option<(f64, String)>,
    control: Option<(f64, String)>,
}

impl Widest {
    /// Takes a point's spread of alloclab-pmem's figure (`(max/min, runs)`), named by `at`.
    fn heap(&mut self, spread: Option<(f64, u32)>, at: impl FnOnce() -> String) {
        Self::take(&mut self.heap, spread, at);
    }

    /// Takes a point's spread of the control's figure.
    fn control(&mut self, spread: Option<(f64, u32)>, at: impl FnOnce() -> String) {
        Self::take(&mut self.control, spread, at);
    }

    fn take(
        widest: &mut Option<(f64, String)>,
        spread: Option<(f64, u32)>,
        at: impl FnOnce() -> String,
    ) {
        if let Some((s, runs)) = spread
            && runs > 1
            && widest.as_ref().is_none_or(|(w, _)| s > *w)
        {
            *widest = Some((s, at()));
        }
    }

    /// `; widest spread at any point: 1.12 (cow-h at 2), control's 1.20 (inp-f at 1)`, or
    /// nothing for single runs.
    fn note(&self) -> String {
        let Some((s, at)) = &self.heap else {
            return String::new();
        };
        let control = self.control.as_ref().map_or(String::new(), |(c, at)| {
            format!(", control's {c:.2} ({at})")
        });
        format!("; widest spread at any point: {s:.2} ({at}){control}")
    }
}

fn gaps(missing: &[String], missing_engines: &[&str]) -> String {
    let mut out = String::new();
    if !missing_engines.is_empty() {
        let _ = write!(
            out,
            "; engines not measured: {}",
            missing_engines.join(", ")
        );
    }
    if !missing.is_empty() {
        let shown: Vec<&str> = missing.iter().take(6).map(String::as_str).collect();
        let _ = write!(
            out,
            "; no figure for {}{}",
            shown.join(", "),
            if missing.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        );
    }
    out
}

fn pct(v: Option<f64>) -> String {
    v.map_or("—".to_owned(), |v| format!("{v:.0}"))
}

fn num(v: Option<f64>) -> String {
    v.map_or("—".to_owned(), fmt_value)
}

/// The `storage` section of `report.md`.
pub fn markdown(out: &mut String, results: &ResultsFile) {
    let view = Storage::new(results);
    let heaps = view.heaps();
    let threads = view.threads();
    let scale = &results.header.parameters.scale;
    let loaded = scale
        .parse::<crate::workloads::Scale>()
        .map_or(super::LOADED, |s| s.scaled(super::LOADED));
    let _ = writeln!(
        out,
        "\nYCSB on the engines {} over the heaps {}: per measurement, {loaded} items (an \
         8-byte key and five 200-byte columns; 1–256 B for `var`) are loaded, then {loaded} \
         operations run, shared out among the threads (each its own partition over the one \
         heap); Zipfian keys (YCSB's scrambled generator, θ = 0.99) unless marked uniform. \
         Pools in `/dev/shm` with `PMEM_IS_PMEM_FORCE=1` (real cache-line flushes and fences, \
         no media latency). Figures are medians over {runs} run(s); “× pmdk” divides by PMDK's \
         median for the same engine, mix and threads. Latency includes one clock read. The \
         split is the engines' own timing of index / crash consistency / memory management / \
         modification, as % of their sum. Flushes and fences per operation: the engine's own \
         (`eng`), and for heaps that count them, every cache line the medium flushed \
         (`lines`, the engine's and the allocator's). Beside alloclab-pmem runs its control, \
         a second instance of it over the same operations (its figures appear only in the \
         spreads below).",
        view.engines().join(", "),
        heaps.join(", "),
        runs = view.runs(),
    );

    out.push_str("\n### storage: targets\n\n");
    for check in targets(results) {
        let _ = writeln!(out, "- {} {}", check.verdict.mark(), check.line);
    }
    if !heaps.contains(&PMDK) {
        out.push_str(
            "\nPMDK did not run here (libpmemobj.so.1 not found, or not asked for): its columns \
             and ratios are left out.\n",
        );
    }
    spreads_markdown(out, &view);

    for section in view.sections() {
        let _ = writeln!(out, "\n### storage: {}\n", section_title(section));
        let headers: Vec<String> = [
            "engine",
            "threads",
            "heap",
            "ops/s",
            "× pmdk",
            "p99 ns",
            "p99.9 ns",
            "p99.99 ns",
            "split idx/cc/mm/mod %",
            "eng flushes/op",
            "eng fences/op",
            "eng B/op",
            "lines/op",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        table_header(out, &headers, 3);
        for &engine in &view.engines() {
            for &t in &threads {
                for &heap in &heaps {
                    let m = |metric: &str| view.median(engine, section, heap, t, metric);
                    let Some(ops) = m("ops_per_s") else { continue };
                    let ratio = view
                        .median(engine, section, PMDK, t, "ops_per_s")
                        .filter(|b| *b > 0.0)
                        .map_or("—".to_owned(), |b| format!("{:.2}", ops / b));
                    let split = format!(
                        "{}/{}/{}/{}",
                        pct(m("share_index")),
                        pct(m("share_cc")),
                        pct(m("share_mm")),
                        pct(m("share_mod"))
                    );
                    let cells = vec![
                        engine.to_owned(),
                        t.to_string(),
                        escape_cell(heap),
                        fmt_value(ops),
                        ratio,
                        num(m("op_p99")),
                        num(m("op_p99.9")),
                        num(m("op_p99.99")),
                        split,
                        num(m("engine_flushes_per_op")),
                        num(m("engine_fences_per_op")),
                        num(m("engine_bytes_flushed_per_op")),
                        num(m("flushes_per_op")),
                    ];
                    table_row(out, &cells);
                }
            }
        }
        let _ = writeln!(
            out,
            "\n![storage throughput, {}]({})",
            section_title(section),
            throughput_chart_name(section)
        );
    }

    out.push_str("\n### storage: time split\n\n");
    let _ = writeln!(
        out,
        "Share of the engines' timed work per phase at {} thread(s), one stacked bar per mix \
         and heap, one panel per engine.\n\n![storage time split]({SPLIT_CHART})",
        threads.first().copied().unwrap_or(1)
    );

    out.push_str("\n### storage: recovery\n\n");
    out.push_str(
        "Heap recovery (`PersistentAllocator::open` of the pool the run left) + engine recovery (every \
         partition's `recover`, one after another), in ms, at the smallest thread count; the \
         DRAM heap has nothing to recover.\n\n",
    );
    let t = threads.first().copied().unwrap_or(1);
    let sections = view.sections();
    let mut headers = vec!["engine".to_owned(), "heap".to_owned()];
    headers.extend(sections.iter().map(|s| section_slug(*s)));
    table_header(out, &headers, 2);
    for &engine in &view.engines() {
        for &heap in &heaps {
            let cells: Vec<String> = sections
                .iter()
                .map(|&s| {
                    let h = view.median(engine, s, heap, t, "recovery_heap_ms");
                    let e = view.median(engine, s, heap, t, "recovery_engine_ms");
                    match (h, e) {
                        (Some(h), Some(e)) => format!("{} + {}", fmt_value(h), fmt_value(e)),
                        _ => "—".to_owned(),
                    }
                })
                .collect();
            if cells.iter().all(|c| c == "—") {
                continue;
            }
            let mut row = vec![engine.to_owned(), escape_cell(heap)];
            row.extend(cells);
            table_row(out, &row);
        }
    }
}

/// The run-to-run spreads behind the checks, beside the control's: one table per check.
fn spreads_markdown(out: &mut String, view: &Storage<'_>) {
    if view.runs() <= 1 {
        return;
    }
    let _ = writeln!(
        out,
        "\n### storage: run-to-run spread, and the control's\n\n\
         Max/min over the {} runs at each point the checks read. A cell `a / b`: `a` is the \
         spread of alloclab-pmem's figure, `b` the same for its control, a second \
         alloclab-pmem with its own pool and engines over the same operations in the same \
         runs, which differs from the first in nothing but the moment each segment ran and \
         where its memory lies: `b` is what this machine moves such a figure by at that point.",
        view.runs()
    );
    let tables: [(&str, &[Mix], SpreadOf); 2] = [
        (
            "Throughput: alloclab-pmem ÷ PMDK, run by run (`b`: control ÷ alloclab-pmem).",
            SPEEDUP_MIXES,
            |v, e, s, t| (v.ratio_spread(e, s, t), v.control_spread(e, s, t)),
        ),
        (
            "Memory-management share with alloclab-pmem (`b`: the control's share).",
            MM_MIXES,
            |v, e, s, t| {
                (
                    v.spread(e, s, OURS, t, "share_mm"),
                    v.spread(e, s, OURS, t, CONTROL_MM),
                )
            },
        ),
    ];
    for (title, mixes, spread_of) in tables {
        let _ = writeln!(out, "\n{title}\n");
        let mut headers = vec!["engine".to_owned(), "threads".to_owned()];
        headers.extend(mixes.iter().map(|m| m.name().to_owned()));
        table_header(out, &headers, 2);
        for &engine in &view.engines() {
            for &t in &view.threads() {
                let mut row = vec![engine.to_owned(), t.to_string()];
                for &mix in mixes {
                    let (a, b) = spread_of(view, engine, (mix, KeyChoice::Zipfian), t);
                    let cell = |s: Option<(f64, u32)>| {
                        s.map_or("—".to_owned(), |(s, _)| format!("{s:.2}"))
                    };
                    row.push(format!("{} / {}", cell(a), cell(b)));
                }
                table_row(out, &row);
            }
        }
    }
}

/// A point's spread of alloclab-pmem's figure and of its control's.
type SpreadOf = fn(&Storage<'_>, &str, Section, usize) -> (Option<(f64, u32)>, Option<(f64, u32)>);

/// A compact terminal summary: throughput per mix (rows engine × threads, a column per
/// heap and the ratio alloclab-pmem / PMDK), then the targets.
pub fn terminal_text(results: &ResultsFile) -> String {
    let view = Storage::new(results);
    let heaps = view.heaps();
    let mut out = String::new();
    let params = &results.header.parameters;
    let _ = writeln!(
        out,
        "\nstorage: scale {}, {} run(s); ops/s (median), alloclab-pmem ÷ pmdk, mm% with alloclab-pmem",
        params.scale,
        view.runs()
    );
    let _ = write!(out, "{:<16} {:<5} {:>3}", "mix", "eng", "thr");
    for h in &heaps {
        let _ = write!(out, " {h:>14}");
    }
    let _ = writeln!(out, " {:>8} {:>6}", "ratio", "mm%");
    for section in view.sections() {
        for &engine in &view.engines() {
            for &t in &view.threads() {
                let _ = write!(out, "{:<16} {engine:<5} {t:>3}", section_slug(section));
                for &h in &heaps {
                    let _ = write!(
                        out,
                        " {:>14}",
                        num(view.median(engine, section, h, t, "ops_per_s"))
                    );
                }
                let ratio = view
                    .median(engine, section, OURS, t, "ops_per_s")
                    .zip(view.median(engine, section, PMDK, t, "ops_per_s"))
                    .filter(|(_, b)| *b > 0.0)
                    .map_or("—".to_owned(), |(a, b)| format!("{:.2}", a / b));
                let mm = view
                    .median(engine, section, OURS, t, "share_mm")
                    .map_or("—".to_owned(), |v| format!("{v:.1}"));
                let _ = writeln!(out, " {ratio:>8} {mm:>6}");
            }
        }
    }
    for check in targets(results) {
        let _ = writeln!(out, "{} {}", check.verdict.mark(), check.line);
    }
    let clock: Vec<f64> = view
        .records
        .iter()
        .filter(|(_, r)| r.metric == crate::report::CLOCK_READ_METRIC)
        .flat_map(|(_, r)| [r.min, r.max])
        .filter(|v| v.is_finite())
        .collect();
    if !clock.is_empty() {
        let lo = clock.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = clock.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "storage times each operation: every latency includes about one clock read \
             ({lo:.1}-{hi:.1} ns in its workers), not subtracted"
        );
    }
    out
}

/// The README's part for the suite: the targets and the throughput ratios.
pub fn readme(out: &mut String, results: &ResultsFile) {
    let view = Storage::new(results);
    let _ = writeln!(
        out,
        "\n#### Suite `storage`: targets, and alloclab-pmem ÷ PMDK throughput per mix\n"
    );
    for check in targets(results) {
        let _ = writeln!(out, "- {} {}", check.verdict.mark(), check.line);
    }
    let _ = writeln!(
        out,
        "\nEach cell: alloclab-pmem's median throughput over PMDK's; in parentheses, where \
         there were several runs, how far that ratio moved from run to run (max/min of the \
         run-by-run ratio: the heaps of a run share its process, interleaved every {} \
         operations), then how far the control's ratio moved (a second alloclab-pmem over \
         the first, in the same runs: the machine's own spread at that point).\n",
        super::SEGMENT_OPS
    );
    let sections = view.sections();
    let mut headers = vec!["engine".to_owned(), "threads".to_owned()];
    headers.extend(sections.iter().map(|s| section_slug(*s)));
    table_header(out, &headers, 2);
    for &engine in &view.engines() {
        for &t in &view.threads() {
            let mut row = vec![engine.to_owned(), t.to_string()];
            for &s in &sections {
                row.push(ratio_cell(&view, engine, s, t));
            }
            table_row(out, &row);
        }
    }
}

/// alloclab-pmem ÷ PMDK at a point: the ratio of the medians, and in parentheses the
/// run-by-run ratio's spread (max/min) where there were several runs.
fn ratio_cell(view: &Storage<'_>, engine: &str, section: Section, threads: usize) -> String {
    let ratio = view
        .median(engine, section, OURS, threads, "ops_per_s")
        .zip(view.median(engine, section, PMDK, threads, "ops_per_s"))
        .filter(|(_, b)| *b > 0.0)
        .map(|(a, b)| a / b);
    let control = view
        .control_spread(engine, section, threads)
        .filter(|(_, runs)| *runs > 1)
        .map_or(String::new(), |(c, _)| format!("; {c:.2}"));
    match (ratio, view.ratio_spread(engine, section, threads)) {
        (None, _) => "—".to_owned(),
        (Some(r), Some((s, runs))) if runs > 1 => format!("{r:.2} ({s:.2}{control})"),
        (Some(r), _) => format!("{r:.2}"),
    }
}

/// Writes the suite's charts into `dir`: one throughput chart per mix and the time split.
///
/// # Errors
///
/// A chart could not be drawn or written.
pub fn write_charts(dir: &Path, results: &ResultsFile) -> Result<Vec<PathBuf>, ReportError> {
    let view = Storage::new(results);
    let mut paths = Vec::new();
    for section in view.sections() {
        let path = dir.join(throughput_chart_name(section));
        let svg = throughput_svg(&view, section).map_err(|e| ReportError::Chart {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&path, svg.as_bytes())?;
        paths.push(path);
    }
    if !view.records.is_empty() {
        let path = dir.join(SPLIT_CHART);
        let svg = split_svg(&view).map_err(|e| ReportError::Chart {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&path, svg.as_bytes())?;
        paths.push(path);
    }
    Ok(paths)
}

type Drawn = Result<String, Box<dyn std::error::Error>>;

/// Bars of ops/s: one group per (engine, threads), one bar per heap.
fn throughput_svg(view: &Storage<'_>, section: Section) -> Drawn {
    let engines = view.engines();
    let threads = view.threads();
    let heaps = view.heaps();
    let groups: Vec<(&str, usize)> = engines
        .iter()
        .flat_map(|e| threads.iter().map(move |t| (*e, *t)))
        .collect();
    let bars: Vec<(usize, usize, &Record)> = groups
        .iter()
        .enumerate()
        .flat_map(|(gi, (e, t))| {
            heaps.iter().enumerate().filter_map(move |(hi, h)| {
                view.get(e, section, h, *t, "ops_per_s")
                    .filter(|r| r.median.is_finite())
                    .map(|r| (gi, hi, r))
            })
        })
        .collect();
    let top = bars
        .iter()
        .map(|(_, _, r)| r.max.max(r.median))
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        * 1.25;
    let width = (200 + 120 * groups.len() as u32).max(640);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, 420)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .caption(
                format!(
                    "storage: {} — ops/s (higher is better)",
                    section_title(section)
                ),
                ("sans-serif", 20),
            )
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(
                GroupAxis {
                    groups: groups.len().max(1),
                },
                0.0..top,
            )?;
        let x_label = |x: &f64| -> String {
            let i = x.floor();
            groups
                .get(i as usize)
                .filter(|_| i >= 0.0)
                .map_or(String::new(), |(e, t)| format!("{e}, {t} thr"))
        };
        let y_label = |y: &f64| fmt_tick(*y);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(groups.len().max(1))
            .x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .x_desc("engine, threads")
            .y_desc("ops/s")
            .draw()?;
        let n = heaps.len().max(1) as f64;
        let w = 0.8 / n;
        for (hi, heap) in heaps.iter().enumerate() {
            let color = Palette99::pick(hi);
            let mine: Vec<&(usize, usize, &Record)> = bars.iter().filter(|b| b.1 == hi).collect();
            chart
                .draw_series(mine.iter().map(|(gi, hi, r)| {
                    let x0 = *gi as f64 + 0.1 + *hi as f64 * w;
                    Rectangle::new([(x0, 0.0), (x0 + w, r.median)], color.filled())
                }))?
                .label(*heap)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
            chart.draw_series(
                mine.iter()
                    .filter(|(_, _, r)| r.min.is_finite() && r.max.is_finite())
                    .map(|(gi, hi, r)| {
                        let x = *gi as f64 + 0.1 + (*hi as f64 + 0.5) * w;
                        ErrorBar::new_vertical(x, r.min, r.median, r.max, BLACK.stroke_width(1), 6)
                    }),
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// Stacked shares of the four phases: one panel per engine, one bar per (mix, heap).
fn split_svg(view: &Storage<'_>) -> Drawn {
    const PHASES: [(&str, &str); 4] = [
        ("share_index", "index"),
        ("share_cc", "crash consistency"),
        ("share_mm", "memory management"),
        ("share_mod", "modification"),
    ];
    let engines = view.engines();
    let heaps = view.heaps();
    let sections = view.sections();
    let t = view.threads().first().copied().unwrap_or(1);
    let width = (200 + 36 * (sections.len() * heaps.len()) as u32).max(800);
    let height = 40 + 320 * engines.len().max(1) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(
            &format!("storage: time split at {t} thread(s), % of the engines' timed work"),
            ("sans-serif", 20),
        )?;
        let panels = body.split_evenly((engines.len().max(1), 1));
        for (engine, panel) in engines.iter().zip(&panels) {
            let mut chart = ChartBuilder::on(panel)
                .margin(10)
                .caption(
                    format!("{engine}: bars per mix, heaps {}", heaps.join(" | ")),
                    ("sans-serif", 16),
                )
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(
                    GroupAxis {
                        groups: sections.len().max(1),
                    },
                    0.0..130.0,
                )?;
            let x_label = |x: &f64| -> String {
                let i = x.floor();
                sections
                    .get(i as usize)
                    .filter(|_| i >= 0.0)
                    .map_or(String::new(), |s| section_slug(*s))
            };
            let y_label = |y: &f64| {
                if *y <= 100.0 {
                    fmt_tick(*y)
                } else {
                    String::new()
                }
            };
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(sections.len().max(1))
                .x_label_formatter(&x_label)
                .y_label_formatter(&y_label)
                .x_desc("mix")
                .y_desc("%")
                .draw()?;
            let n = heaps.len().max(1) as f64;
            let w = 0.8 / n;
            for (pi, (_, label)) in PHASES.iter().enumerate() {
                let color = Palette99::pick(pi);
                let mut rects = Vec::new();
                for (si, &section) in sections.iter().enumerate() {
                    for (hi, heap) in heaps.iter().enumerate() {
                        let shares: Vec<f64> = PHASES
                            .iter()
                            .map(|(m, _)| view.median(engine, section, heap, t, m).unwrap_or(0.0))
                            .collect();
                        if shares.iter().all(|v| *v == 0.0) {
                            continue;
                        }
                        let below: f64 = shares[..pi].iter().sum();
                        let x0 = si as f64 + 0.1 + hi as f64 * w;
                        rects.push(Rectangle::new(
                            [(x0, below), (x0 + w * 0.9, below + shares[pi])],
                            color.filled(),
                        ));
                    }
                }
                chart
                    .draw_series(rects)?
                    .label(*label)
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::record;

    /// Records of every point the first two claims read: alloclab-pmem at `ours` ops/s and
    /// `mm`% memory management, PMDK at 100 000 ops/s, over five runs whose spread is
    /// 1.05 (alloclab-pmem) and 1.10 (PMDK).
    fn points(engines: &[&str], ours: f64, mm: f64) -> Vec<Record> {
        let mut out = Vec::new();
        for engine in engines {
            for mix in SPEEDUP_MIXES.iter().chain(MM_MIXES) {
                for t in [1, 2] {
                    let w = format!("{engine}-{}", mix.name());
                    let with_runs = |mut r: Record, spread: f64| {
                        r.runs = 5;
                        r.min = r.median / spread.sqrt();
                        r.max = r.median * spread.sqrt();
                        r
                    };
                    out.push(with_runs(
                        record(SUITE, &w, OURS, t, "ops_per_s", ours),
                        1.05,
                    ));
                    out.push(with_runs(
                        record(SUITE, &w, PMDK, t, "ops_per_s", 1e5),
                        1.10,
                    ));
                    out.push(with_runs(record(SUITE, &w, OURS, t, "share_mm", mm), 1.02));
                    out.push(with_runs(
                        record(SUITE, &w, OURS, t, CONTROL_RATIO, 1.0),
                        1.04,
                    ));
                    out.push(with_runs(record(SUITE, &w, OURS, t, CONTROL_MM, mm), 1.03));
                }
            }
        }
        out
    }

    fn checks(records: Vec<Record>) -> Vec<Check> {
        targets(&ResultsFile::of_records(records))
    }

    #[test]
    fn every_point_met_passes_and_says_the_spread_behind_the_deciding_figure() {
        let c = checks(points(ENGINES, 2e5, 9.0));
        assert_eq!(c[0].verdict, Verdict::Pass, "{}", c[0].line);
        assert!(c[0].line.contains("highest 9.0%"), "{}", c[0].line);
        assert!(
            c[0].line
                .contains("spread over 5 runs, max/min: 1.02, control 1.03"),
            "{}",
            c[0].line
        );
        assert_eq!(c[1].verdict, Verdict::Pass, "{}", c[1].line);
        assert!(c[1].line.contains("lowest 2.00x"), "{}", c[1].line);
        assert!(
            c[1].line.contains(
                "spread over 5 runs, max/min: alloclab-pmem 1.05, pmdk 1.10, control 1.04"
            ),
            "{}",
            c[1].line
        );
        assert_eq!(c[2].verdict, Verdict::NotHere, "the crash tests decide");
    }

    #[test]
    fn the_widest_spreads_name_their_points_for_the_heap_and_for_its_control() {
        let mut records = points(ENGINES, 2e5, 9.0);
        for r in &mut records {
            let widen = |r: &mut Record, spread: f64| {
                r.min = r.median / spread.sqrt();
                r.max = r.median * spread.sqrt();
            };
            match (r.workload.as_str(), r.threads, r.metric.as_str()) {
                ("lsm-h", 2, "share_mm") => widen(r, 1.40),
                ("inp-d", 1, CONTROL_MM) => widen(r, 1.30),
                ("cow-g", 1, CONTROL_RATIO) => widen(r, 1.25),
                _ => {}
            }
        }
        let c = checks(records);
        assert!(
            c[0].line.contains(
                "widest spread at any point: 1.40 (lsm-h at 2), control's 1.30 (inp-d at 1)"
            ),
            "{}",
            c[0].line
        );
        // Without per-run values the throughput ratio's spread is each heap's; the widest
        // is of the run-by-run ratio, which needs them: none here, the control's alone.
        assert!(!c[1].line.contains("widest spread"), "{}", c[1].line);
        let mut out = String::new();
        let results = ResultsFile::of_records(checks_records_with_values());
        markdown(&mut out, &results);
        assert!(
            out.contains("run-to-run spread, and the control's"),
            "{out}"
        );
        assert!(out.contains("| inp | 1 | 1.10 / 1.21 |"), "{out}");
        let mut readme_out = String::new();
        readme(&mut readme_out, &results);
        assert!(readme_out.contains("2.00 (1.10; 1.21)"), "{readme_out}");
    }

    /// inp-c at one thread over two runs with per-run values: alloclab-pmem at 200 000 and
    /// 220 000 ops/s, PMDK at 100 000 both times (ratio spread 1.10), and a control ratio of
    /// 1.10 then 0.909... (spread 1.21).
    fn checks_records_with_values() -> Vec<Record> {
        let with = |mut r: Record, values: &[f64]| {
            r.runs = values.len() as u32;
            r.values = values.to_vec();
            r.min = values.iter().copied().fold(f64::INFINITY, f64::min);
            r.max = values.iter().copied().fold(0.0, f64::max);
            r
        };
        vec![
            with(
                record(SUITE, "inp-c", OURS, 1, "ops_per_s", 2.0e5),
                &[2.0e5, 2.2e5],
            ),
            with(
                record(SUITE, "inp-c", PMDK, 1, "ops_per_s", 1.0e5),
                &[1.0e5, 1.0e5],
            ),
            with(
                record(SUITE, "inp-c", OURS, 1, CONTROL_RATIO, 1.0),
                &[1.1, 1.0 / 1.1],
            ),
        ]
    }

    #[test]
    fn a_run_of_some_engines_is_undecided_unless_a_measured_point_fails() {
        // One engine measured (as `alloclab run lsm-h` does): nothing says the others meet it.
        let c = checks(points(&["lsm"], 2e5, 9.0));
        for check in &c[..2] {
            assert_eq!(check.verdict, Verdict::NotHere, "{}", check.line);
            assert!(
                check.line.contains("engines not measured"),
                "{}",
                check.line
            );
        }
        // A point measured against the claim decides it, whatever is missing.
        let c = checks(points(&["lsm"], 1.2e5, 20.0));
        assert_eq!(c[0].verdict, Verdict::Fail, "{}", c[0].line);
        assert_eq!(c[1].verdict, Verdict::Fail, "{}", c[1].line);
        // A missing mix of an engine measured is a gap too.
        let mut records = points(ENGINES, 2e5, 9.0);
        records.retain(|r| !(r.workload == "cow-g" && r.threads == 2));
        let c = checks(records);
        assert_eq!(c[1].verdict, Verdict::NotHere, "{}", c[1].line);
        assert!(c[1].line.contains("no figure for cow-g/2"), "{}", c[1].line);
        // Nothing at all: undecided, not failed.
        let c = checks(Vec::new());
        assert_eq!(c[0].verdict, Verdict::NotHere, "{}", c[0].line);
    }
}
