//! The `programs` suite's part of the report: every program's wall time and peak RSS over
//! the C library's malloc (`system`, nothing preloaded), their geometric means, redis's
//! requests per second, whether each program gave the same result under every heap, and the
//! reconciliation of each classic benchmark's in-process ratio with its C program's.

use std::fmt::Write as _;

use alloclab_programs::catalog;

use super::SUITE;
use crate::metrics::RESULT_DIGEST_METRIC;
use crate::report::{View, escape_cell, fmt_value, geometric_mean, table_header, table_row};
use crate::results::{ResultsFile, RunRatio};

/// The heap every ratio of the suite divides by: nothing preloaded.
pub const BASELINE: &str = "system";

/// How far apart an in-process ratio and its C program's may be before the report calls
/// them in disagreement (a factor, either way).
pub const AGREEMENT_FACTOR: f64 = 1.3;

/// Pairs of (in-process allocator, the same allocator preloaded into a program).
pub const SAME_HEAP: &[(&str, &str)] = &[
    ("wfspan", "wfspan"),
    ("randomized", "randomized"),
    ("mimalloc", "libmimalloc"),
    ("jemalloc", "libjemalloc"),
];

/// Whether the results hold any record of the suite.
pub fn has_programs(results: &ResultsFile) -> bool {
    results.records.iter().any(|r| r.suite == SUITE)
}

/// The thread count a program ran at (its only one: the classic benchmarks at the cores,
/// the others at 1; with several, the largest).
fn threads_of(view: &View<'_>, workload: &str) -> Option<usize> {
    view.threads_in(SUITE, Some(workload)).into_iter().max()
}

/// The median of `metric` of `workload` under `allocator`, at the program's thread count.
fn median(view: &View<'_>, workload: &str, allocator: &str, metric: &str) -> Option<f64> {
    let t = threads_of(view, workload)?;
    view.get(SUITE, workload, allocator, t, metric)
        .map(|r| r.median)
}

/// `allocator`'s figure over [`BASELINE`]'s: the median of the run-by-run ratios
/// ([`RunRatio`](crate::results::RunRatio)).
fn ratio(view: &View<'_>, workload: &str, allocator: &str, metric: &str) -> Option<f64> {
    let t = threads_of(view, workload)?;
    let ours = view.get(SUITE, workload, allocator, t, metric)?;
    let base = view.get(SUITE, workload, BASELINE, t, metric)?;
    ours.ratio_to(base).map(|r| r.median)
}

/// A heap under which a program's result was not the one it gave under [`BASELINE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The program.
    pub workload: String,
    /// The heap.
    pub allocator: String,
    /// What differed.
    pub why: String,
}

/// Every (program, heap) whose result differed from the baseline's, or from run to run.
pub fn mismatches(results: &ResultsFile) -> Vec<Mismatch> {
    let view = View::new(results);
    let mut out = Vec::new();
    for workload in view.workloads(SUITE) {
        let Some(t) = threads_of(&view, workload) else {
            continue;
        };
        let base = view.get(SUITE, workload, BASELINE, t, RESULT_DIGEST_METRIC);
        for allocator in view.allocators_in(SUITE, Some(workload)) {
            let Some(r) = view.get(SUITE, workload, allocator, t, RESULT_DIGEST_METRIC) else {
                continue;
            };
            let why = if r.min != r.max {
                Some("the result differed from run to run".to_owned())
            } else {
                match base {
                    Some(b) if b.min == b.max && b.median != r.median => {
                        Some(format!("the result differs from {BASELINE}'s"))
                    }
                    _ => None,
                }
            };
            if let Some(why) = why {
                out.push(Mismatch {
                    workload: workload.to_owned(),
                    allocator: allocator.to_owned(),
                    why,
                });
            }
        }
    }
    out
}

/// One line of the reconciliation: a classic benchmark's ratio of two heaps, in-process and
/// as a C program.
#[derive(Clone, Debug, PartialEq)]
pub struct Reconciled {
    /// The in-process workload (`glibc-thread`).
    pub workload: String,
    /// Threads of both.
    pub threads: usize,
    /// The heap compared (its in-process name).
    pub allocator: String,
    /// The heap it is compared with (its in-process name: `system`, `mimalloc`).
    pub over: String,
    /// The ratio of their `time` medians in-process.
    pub in_process: f64,
    /// The ratio of their `time` medians as C programs under `LD_PRELOAD`.
    pub c_program: f64,
    /// The widest spread of the four figures' runs (max over min): a disagreement no wider
    /// than this could be one noisy run, and is not decided.
    pub spread: f64,
}

impl Reconciled {
    /// How far apart the two ratios are: the larger over the smaller.
    pub fn disagreement(&self) -> f64 {
        (self.in_process / self.c_program).max(self.c_program / self.in_process)
    }

    /// Whether the comparison is decided: the two ratios agree (within
    /// [`AGREEMENT_FACTOR`]), or they are further apart than that and than the runs'
    /// own spread, which a noisy run could otherwise account for.
    pub fn decided(&self) -> bool {
        let apart = self.disagreement();
        apart <= AGREEMENT_FACTOR || apart > self.spread
    }

    /// Decided, and further apart than [`AGREEMENT_FACTOR`].
    pub fn disagrees(&self) -> bool {
        self.decided() && self.disagreement() > AGREEMENT_FACTOR
    }
}

/// The in-process name of a heap that runs programs, and back.
fn program_name(in_process: &str) -> Option<&'static str> {
    if in_process == BASELINE {
        return Some(BASELINE);
    }
    SAME_HEAP
        .iter()
        .find(|(a, _)| *a == in_process)
        .map(|&(_, p)| p)
}

/// For each classic benchmark that ran both in-process (`cpu`) and as a C program, at the
/// same thread count: every heap both ran, over `system` and over mimalloc.
pub fn reconciliation(results: &ResultsFile) -> Vec<Reconciled> {
    let view = View::new(results);
    let mut out = Vec::new();
    for &(program, _, workload) in catalog::CLASSIC_NAMES {
        for t in view.threads_in(SUITE, Some(program)) {
            let time = |suite: &str, w: &str, a: &str| {
                view.get(suite, w, a, t, "time")
                    .filter(|r| r.median > 0.0 && r.min > 0.0)
                    .map(|r| (r.median, r.max / r.min))
            };
            for over in [BASELINE, "mimalloc"] {
                for &(allocator, _) in SAME_HEAP {
                    if allocator == over {
                        continue;
                    }
                    let (Some(p_alloc), Some(p_over)) =
                        (program_name(allocator), program_name(over))
                    else {
                        continue;
                    };
                    let (Some(a), Some(b), Some(c), Some(d)) = (
                        time("cpu", workload, allocator),
                        time("cpu", workload, over),
                        time(SUITE, program, p_alloc),
                        time(SUITE, program, p_over),
                    ) else {
                        continue;
                    };
                    out.push(Reconciled {
                        workload: workload.to_owned(),
                        threads: t,
                        allocator: allocator.to_owned(),
                        over: over.to_owned(),
                        in_process: a.0 / b.0,
                        c_program: c.0 / d.0,
                        spread: a.1.max(b.1).max(c.1).max(d.1),
                    });
                }
            }
        }
    }
    out
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or("—".to_owned(), |r| format!("{r:.2}"))
}

/// The table of one metric's ratios to [`BASELINE`]: a row per program, a column per heap,
/// then the geometric mean over the programs every heap ran.
fn ratio_table(out: &mut String, view: &View<'_>, metric: &str, lower_is_better: bool) {
    let allocators = view.allocators_in(SUITE, None);
    let mut headers = vec!["program".to_owned(), format!("{BASELINE} ({metric})")];
    headers.extend(
        allocators
            .iter()
            .filter(|a| **a != BASELINE)
            .map(|a| escape_cell(a)),
    );
    table_header(out, &headers, 1);
    let workloads = view.workloads(SUITE);
    for workload in &workloads {
        let Some(base) = median(view, workload, BASELINE, metric) else {
            continue;
        };
        let unit = threads_of(view, workload)
            .and_then(|t| view.get(SUITE, workload, BASELINE, t, metric))
            .map_or("", |r| r.unit.as_str());
        let mut cells = vec![escape_cell(workload), format!("{} {unit}", fmt_value(base))];
        let ratios: Vec<Option<f64>> = allocators
            .iter()
            .map(|a| ratio(view, workload, a, metric))
            .collect();
        let present: Vec<f64> = ratios.iter().flatten().copied().collect();
        for (i, a) in allocators.iter().enumerate() {
            if *a == BASELINE {
                continue;
            }
            let best = ratios[i].is_some_and(|r| {
                present
                    .iter()
                    .all(|&o| if lower_is_better { r <= o } else { r >= o })
            });
            let cell = fmt_ratio(ratios[i]);
            cells.push(if best { format!("**{cell}**") } else { cell });
        }
        table_row(out, &cells);
    }
    for group in mean_groups(view) {
        let programs = workloads
            .iter()
            .filter(|w| (group.counted)(w) && median(view, w, BASELINE, metric).is_some())
            .count();
        let mut cells = vec![group.label.to_owned(), "1".to_owned()];
        for a in allocators.iter().filter(|a| **a != BASELINE) {
            // A mean over fewer programs than the others ran would not compare: say how
            // many.
            cells.push(match mean_ratio_of(view, a, metric, group.counted) {
                Some((m, n)) if n == programs => format!("{m:.2}"),
                Some((m, n)) => format!("{m:.2} ({n} of {programs})"),
                None => "—".to_owned(),
            });
        }
        table_row(out, &cells);
    }
}

/// Whether `program` is one of the C allocation benchmarks (the `cpu` suite's workloads
/// as C programs) rather than an application.
fn is_c_benchmark(program: &str) -> bool {
    catalog::find(program).is_some_and(|p| p.takes_threads())
}

/// A set of programs a table's closing mean is taken over.
struct MeanGroup {
    /// Its row's label in `report.md`.
    label: &'static str,
    /// Its row's label on the terminal (16 columns).
    short: &'static str,
    /// Which programs it counts.
    counted: Counted,
}

/// The means a table closes with: over every program and, where both kinds ran, over the
/// applications and over the C benchmarks alone (otherwise the first is the one kind's).
fn mean_groups(view: &View<'_>) -> &'static [MeanGroup] {
    const ALL: MeanGroup = MeanGroup {
        label: "geometric mean",
        short: "geometric mean",
        counted: |_| true,
    };
    const SPLIT: [MeanGroup; 3] = [
        ALL,
        MeanGroup {
            label: "… of the applications",
            short: "… applications",
            counted: |w| !is_c_benchmark(w),
        },
        MeanGroup {
            label: "… of the C benchmarks (`c-*`)",
            short: "… C benchmarks",
            counted: is_c_benchmark,
        },
    ];
    let workloads = view.workloads(SUITE);
    let both =
        workloads.iter().any(|w| is_c_benchmark(w)) && workloads.iter().any(|w| !is_c_benchmark(w));
    if both {
        &SPLIT
    } else {
        core::slice::from_ref(&ALL)
    }
}

/// The geometric mean over programs of `allocator`'s `metric` ratio to [`BASELINE`], with
/// the number of programs it covers.
pub fn mean_ratio(results: &ResultsFile, allocator: &str, metric: &str) -> Option<(f64, usize)> {
    mean_ratio_of(&View::new(results), allocator, metric, |_| true)
}

/// Which programs a mean counts, by name.
type Counted = fn(&str) -> bool;

/// [`mean_ratio`] over the programs `counted` accepts.
fn mean_ratio_of(
    view: &View<'_>,
    allocator: &str,
    metric: &str,
    counted: Counted,
) -> Option<(f64, usize)> {
    let ratios: Vec<f64> = view
        .workloads(SUITE)
        .iter()
        .filter(|w| counted(w))
        .filter_map(|w| ratio(view, w, allocator, metric))
        .collect();
    geometric_mean(&ratios).map(|m| (m, ratios.len()))
}

fn redis_table(out: &mut String, view: &View<'_>) {
    let Some(t) = threads_of(view, "redis") else {
        return;
    };
    let allocators = view.allocators_in(SUITE, Some("redis"));
    let mut headers = vec!["command".to_owned()];
    headers.extend(allocators.iter().map(|a| escape_cell(a)));
    table_header(out, &headers, 1);
    let metrics: Vec<&str> = alloclab_programs::redis::COMMANDS.to_vec();
    for command in metrics {
        let metric = format!("{command}_rps");
        let mut cells = vec![command.to_uppercase()];
        cells.extend(allocators.iter().map(|a| redis_cell(view, t, a, &metric)));
        table_row(out, &cells);
    }
    let mut cells = vec!["server peak RSS [MiB]".to_owned()];
    cells.extend(
        allocators
            .iter()
            .map(|a| redis_cell(view, t, a, "peak_rss")),
    );
    table_row(out, &cells);
}

/// The peer that is the server's own allocator where `system`'s server maps its library.
pub(crate) const REDIS_CONTROL: &str = "libjemalloc";

/// The redis figures that the table, its control note and the redis check read, in order:
/// `(metric, name, higher is better)`, each command's requests/s, then the server's peak
/// RSS.
pub(crate) fn redis_figures() -> impl Iterator<Item = (String, String, bool)> {
    alloclab_programs::redis::COMMANDS
        .iter()
        .map(|c| (format!("{c}_rps"), c.to_uppercase(), true))
        .chain([("peak_rss".to_owned(), "peak RSS".to_owned(), false)])
}

/// jemalloc against itself on redis's `metric` at `t` threads: [`BASELINE`]'s figure over
/// [`REDIS_CONTROL`]'s, run by run, where `system`'s server mapped a `libjemalloc.so` in
/// every run (Debian's is linked with the one the peer preloads); `None` otherwise, or
/// without per-run values.
pub(crate) fn redis_control(view: &View<'_>, t: usize, metric: &str) -> Option<RunRatio> {
    let mapped = view
        .get(
            SUITE,
            "redis",
            BASELINE,
            t,
            alloclab_programs::redis::MAPS_LIBJEMALLOC,
        )
        .is_some_and(|r| r.min >= 1.0);
    if !mapped {
        return None;
    }
    let ours = view.get(SUITE, "redis", BASELINE, t, metric)?;
    let base = view.get(SUITE, "redis", REDIS_CONTROL, t, metric)?;
    ours.ratio_to(base).filter(|r| r.runs > 0)
}

/// Under the redis table, where `system`'s server mapped `libjemalloc.so` in every run: the
/// `libjemalloc` column is then the same library preloaded, jemalloc against itself, and its
/// run-by-run ratios are what the machine alone moves a figure by.
fn redis_control_note(out: &mut String, view: &View<'_>) {
    let Some(t) = threads_of(view, "redis") else {
        return;
    };
    let ranges: Vec<String> = redis_figures()
        .filter_map(|(metric, name, _)| {
            let r = redis_control(view, t, &metric)?;
            Some(format!("{name} {:.2}–{:.2}", r.min, r.max))
        })
        .collect();
    if ranges.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n`{BASELINE}`'s server mapped a `libjemalloc.so` in every run, so beside it the \
         `{REDIS_CONTROL}` column is jemalloc again, preloaded: jemalloc against itself, whose \
         ratios are what the machine alone moves a figure by. Run by run, `{BASELINE}` over \
         `{REDIS_CONTROL}` read {}.",
        ranges.join(", ")
    );
}

/// A cell of the redis table: `allocator`'s median of `metric`, and for any heap but
/// [`BASELINE`] its run-by-run ratio to it in brackets.
fn redis_cell(view: &View<'_>, t: usize, allocator: &str, metric: &str) -> String {
    let Some(r) = view.get(SUITE, "redis", allocator, t, metric) else {
        return "—".to_owned();
    };
    let ratio = view
        .get(SUITE, "redis", BASELINE, t, metric)
        .and_then(|base| r.ratio_to(base))
        .filter(|_| allocator != BASELINE);
    match ratio {
        Some(x) => format!("{} ({:.2})", fmt_value(r.median), x.median),
        None => fmt_value(r.median),
    }
}

fn result_lines(out: &mut String, results: &ResultsFile) {
    let bad = mismatches(results);
    if bad.is_empty() {
        let _ = writeln!(
            out,
            "\nEvery program gave the same result under every heap as under `{BASELINE}`, in \
             every run (its standard output; for redis, the data read back; for git, the \
             objects of the pack it wrote)."
        );
    } else {
        let _ = writeln!(
            out,
            "\nResults that differ (a heap bug, or a program's own nondeterminism):\n"
        );
        for m in bad {
            let _ = writeln!(
                out,
                "- **{}** under `{}`: {}",
                m.workload, m.allocator, m.why
            );
        }
    }
}

fn reconciliation_table(out: &mut String, results: &ResultsFile) {
    let rows = reconciliation(results);
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "\nNo classic benchmark ran both in-process (`cpu`) and as a C program here: no \
             reconciliation."
        );
        return;
    }
    let _ = writeln!(
        out,
        "\nEach classic benchmark in-process (the `cpu` suite, through the allocator trait, \
         sizes known at free) and as a C program (`c-<name>`, through `LD_PRELOAD`), each \
         ratio of the medians of its measured phase (`time`). The two agree when they are \
         within {AGREEMENT_FACTOR}x of each other (✓); they disagree (✗) when further apart \
         than that and than the runs' own spread (`spread`: the largest max / min of the \
         four figures); a gap within that spread is not decided (·). In-process `mimalloc` and `jemalloc` are the crates \
         compiled into alloclab; as programs, the distribution's shared libraries.\n"
    );
    table_header(
        out,
        &[
            "workload".to_owned(),
            "threads".to_owned(),
            "ratio".to_owned(),
            "in-process".to_owned(),
            "C program".to_owned(),
            "apart".to_owned(),
            "spread".to_owned(),
        ],
        3,
    );
    for r in rows {
        let apart = r.disagreement();
        table_row(
            out,
            &[
                escape_cell(&r.workload),
                r.threads.to_string(),
                format!("{} / {}", r.allocator, r.over),
                format!("{:.2}", r.in_process),
                format!("{:.2}", r.c_program),
                if !r.decided() {
                    format!("{apart:.2} ·")
                } else if r.disagrees() {
                    format!("**{apart:.2}** ✗")
                } else {
                    format!("{apart:.2} ✓")
                },
                format!("{:.2}", r.spread),
            ],
        );
    }
}

const METHOD: &str = "Each program runs unmodified, in a fresh process per run. A round runs it \
    once under every heap, one after the other, each round starting from another heap; a \
    ratio is the median over the rounds of the heap's figure over the baseline's of the same \
    round, so that the machine's slow spells, which last longer than a round, fall on both \
    figures of a ratio alike. alloclab's heaps and the peers' shared libraries (`lib*`: Debian's \
    libmimalloc.so.2, libjemalloc.so.2, libtcmalloc_minimal.so.4; hardened_malloc's \
    libhardened_malloc.so, default configuration, built from its source) are put in front of \
    the C library with `LD_PRELOAD`; `system` preloads nothing. Wall time, CPU time and peak RSS come \
    from `wait4` (for redis: the server's peak RSS and CPU time; its wall time is the whole \
    benchmark). Debian's redis-server is linked with jemalloc, so its `system` row is that \
    jemalloc, not the C library's malloc; python3 serves objects under 512 B from its own \
    pymalloc arenas, as it does for its users. The `c-*` programs are the `cpu` suite's \
    allocation benchmarks written in C, which do little but allocate and free; the others are \
    applications. Each table's geometric mean is also given over each kind alone.";

/// The suite's section of `report.md`.
pub fn markdown(out: &mut String, results: &ResultsFile) {
    let view = View::new(results);
    let _ = writeln!(out, "\n{METHOD}");
    let _ = writeln!(
        out,
        "\n### Wall time over `{BASELINE}`'s (median of the run-by-run ratios)\n"
    );
    ratio_table(out, &view, "wall", true);
    let _ = writeln!(out, "\n### Peak RSS over `{BASELINE}`'s\n");
    ratio_table(out, &view, "peak_rss", true);
    let _ = writeln!(out, "\n### CPU time (user + system) over `{BASELINE}`'s\n");
    ratio_table(out, &view, "cpu", true);
    if threads_of(&view, "redis").is_some() {
        let _ = writeln!(
            out,
            "\n### redis: requests per second (ratio to `{BASELINE}`, the server's own jemalloc)\n"
        );
        redis_table(out, &view);
        redis_control_note(out, &view);
    }
    let _ = writeln!(out, "\n### Results");
    result_lines(out, results);
    let _ = writeln!(
        out,
        "\n### In-process and C-program ratios of the classic benchmarks"
    );
    reconciliation_table(out, results);
}

/// The suite's part of the README's results.
pub fn readme(out: &mut String, results: &ResultsFile) {
    let view = View::new(results);
    let _ = writeln!(
        out,
        "\n#### Suite `{SUITE}`: wall time and peak RSS over `{BASELINE}`'s (nothing preloaded)\n"
    );
    let _ = writeln!(out, "{METHOD}\n");
    let _ = writeln!(out, "Wall time:\n");
    ratio_table(out, &view, "wall", true);
    let _ = writeln!(out, "\nPeak RSS:\n");
    ratio_table(out, &view, "peak_rss", true);
    if threads_of(&view, "redis").is_some() {
        let _ = writeln!(out, "\nredis, requests per second:\n");
        redis_table(out, &view);
        redis_control_note(out, &view);
    }
    result_lines(out, results);
    let _ = writeln!(
        out,
        "\n#### Classic benchmarks: in-process and as C programs"
    );
    reconciliation_table(out, results);
}

/// The suite's summary on the terminal.
pub fn terminal_text(results: &ResultsFile) -> String {
    let view = View::new(results);
    let mut out = String::new();
    let allocators = view.allocators_in(SUITE, None);
    let _ = writeln!(
        out,
        "\nprograms: wall time / peak RSS over {BASELINE}'s (medians; {BASELINE} preloads nothing)"
    );
    let _ = write!(out, "{:<16}", "program");
    for a in &allocators {
        let _ = write!(out, " {a:>15}");
    }
    out.push('\n');
    for workload in view.workloads(SUITE) {
        let _ = write!(out, "{workload:<16}");
        for a in &allocators {
            let cell = match (
                ratio(&view, workload, a, "wall"),
                ratio(&view, workload, a, "peak_rss"),
            ) {
                (Some(w), Some(m)) => format!("{w:.2} / {m:.2}"),
                _ => "-".to_owned(),
            };
            let _ = write!(out, " {cell:>15}");
        }
        out.push('\n');
    }
    for group in mean_groups(&view) {
        let _ = write!(out, "{:<16}", group.short);
        for a in &allocators {
            let cell = match (
                mean_ratio_of(&view, a, "wall", group.counted),
                mean_ratio_of(&view, a, "peak_rss", group.counted),
            ) {
                (Some((w, _)), Some((m, _))) => format!("{w:.2} / {m:.2}"),
                _ => "-".to_owned(),
            };
            let _ = write!(out, " {cell:>15}");
        }
        out.push('\n');
    }
    for m in mismatches(results) {
        let _ = writeln!(
            out,
            "result differs: {} under {}: {}",
            m.workload, m.allocator, m.why
        );
    }
    let rows = reconciliation(results);
    let undecided = rows.iter().filter(|r| !r.decided()).count();
    if undecided > 0 {
        let _ = writeln!(
            out,
            "in-process vs C ratios: {undecided} of {} not decided (apart by more than {AGREEMENT_FACTOR}x, but by less than a heap's runs spread)",
            rows.len()
        );
    }
    for r in rows {
        if r.disagrees() {
            let _ = writeln!(
                out,
                "in-process and C ratios apart: {} {} / {}: {:.2} in-process, {:.2} as a C program",
                r.workload, r.allocator, r.over, r.in_process, r.c_program
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Record;

    fn record(
        suite: &str,
        workload: &str,
        allocator: &str,
        metric: &str,
        v: (f64, f64, f64),
    ) -> Record {
        Record {
            suite: suite.into(),
            workload: workload.into(),
            allocator: allocator.into(),
            threads: 2,
            metric: metric.into(),
            unit: "ms".into(),
            median: v.0,
            min: v.1,
            max: v.2,
            runs: 3,
            values: Vec::new(),
            lower_is_better: true,
        }
    }

    fn file(records: Vec<Record>) -> ResultsFile {
        let mut file = ResultsFile::of_records(records);
        file.header.parameters.suites = vec!["cpu".into(), SUITE.into()];
        file.header.parameters.allocators = vec!["wfspan".into(), "system".into()];
        file
    }

    const STEADY: f64 = 1.05;

    fn steady(v: f64) -> (f64, f64, f64) {
        (v, v, v * STEADY)
    }

    #[test]
    fn a_result_that_differs_from_the_baseline_or_between_runs_is_a_mismatch() {
        let results = file(vec![
            record(
                SUITE,
                "sqlite",
                "system",
                RESULT_DIGEST_METRIC,
                (7.0, 7.0, 7.0),
            ),
            record(
                SUITE,
                "sqlite",
                "wfspan",
                RESULT_DIGEST_METRIC,
                (7.0, 7.0, 7.0),
            ),
            record(
                SUITE,
                "lua",
                "system",
                RESULT_DIGEST_METRIC,
                (5.0, 5.0, 5.0),
            ),
            record(
                SUITE,
                "lua",
                "wfspan",
                RESULT_DIGEST_METRIC,
                (6.0, 6.0, 6.0),
            ),
            record(
                SUITE,
                "perl",
                "system",
                RESULT_DIGEST_METRIC,
                (3.0, 3.0, 3.0),
            ),
            record(
                SUITE,
                "perl",
                "wfspan",
                RESULT_DIGEST_METRIC,
                (3.0, 3.0, 4.0),
            ),
        ]);
        let found = mismatches(&results);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found
                .iter()
                .any(|m| m.workload == "lua" && m.why.contains("system's"))
        );
        assert!(
            found
                .iter()
                .any(|m| m.workload == "perl" && m.why.contains("run to run"))
        );
    }

    #[test]
    fn reconciliation_compares_the_two_paths_and_leaves_unsteady_runs_undecided() {
        let results = file(vec![
            // glibc-thread: in-process 0.4, as C 0.6: 1.5 apart, steady runs.
            record("cpu", "glibc-thread", "system", "time", steady(100.0)),
            record("cpu", "glibc-thread", "wfspan", "time", steady(40.0)),
            record(SUITE, "c-glibc-thread", "system", "time", steady(100.0)),
            record(SUITE, "c-glibc-thread", "wfspan", "time", steady(60.0)),
            // larson: the same ratios, but one heap's runs spread 2x.
            record("cpu", "larson", "system", "time", (100.0, 60.0, 120.0)),
            record("cpu", "larson", "wfspan", "time", steady(40.0)),
            record(SUITE, "c-larson", "system", "time", steady(100.0)),
            record(SUITE, "c-larson", "wfspan", "time", steady(60.0)),
            // rptest: 0.5 both ways.
            record("cpu", "rptest", "system", "time", steady(100.0)),
            record("cpu", "rptest", "wfspan", "time", steady(50.0)),
            record(SUITE, "c-rptest", "system", "time", steady(80.0)),
            record(SUITE, "c-rptest", "wfspan", "time", steady(40.0)),
        ]);
        let rows = reconciliation(&results);
        let row = |w: &str| rows.iter().find(|r| r.workload == w).unwrap();
        assert_eq!(rows.len(), 3, "{rows:?}");
        let thread = row("glibc-thread");
        assert!((thread.in_process - 0.4).abs() < 1e-9 && (thread.c_program - 0.6).abs() < 1e-9);
        assert!(thread.decided() && thread.disagrees());
        let larson = row("larson");
        assert!(!larson.decided() && !larson.disagrees(), "{larson:?}");
        assert!((larson.spread - 2.0).abs() < 1e-9);
        let rp = row("rptest");
        assert!(rp.decided() && !rp.disagrees());
        let text = terminal_text(&results);
        assert!(text.contains("1 of 3 not decided"), "{text}");
        assert!(
            text.contains("glibc-thread wfspan / system: 0.40 in-process, 0.60"),
            "{text}"
        );
        assert!(!text.contains("larson wfspan"), "{text}");
    }

    #[test]
    fn every_ratio_divides_by_the_program_with_nothing_preloaded() {
        let results = file(vec![
            record(SUITE, "cc", "wfspan", "wall", steady(90.0)),
            record(SUITE, "cc", "system", "wall", steady(100.0)),
            record(SUITE, "sqlite", "wfspan", "wall", steady(160.0)),
            record(SUITE, "sqlite", "system", "wall", steady(100.0)),
        ]);
        let (mean, n) = mean_ratio(&results, "wfspan", "wall").unwrap();
        assert_eq!(n, 2);
        assert!((mean - (0.9f64 * 1.6).sqrt()).abs() < 1e-9);
        let mut out = String::new();
        markdown(&mut out, &results);
        assert!(out.contains("| cc | 100.0 ms | **0.90** |"), "{out}");
        assert!(out.contains("| sqlite | 100.0 ms | 1.60 |"), "{out}");
    }

    #[test]
    fn the_mean_is_split_into_the_applications_and_the_c_benchmarks_where_both_ran() {
        let apps_only = file(vec![
            record(SUITE, "cc", "wfspan", "wall", steady(90.0)),
            record(SUITE, "cc", "system", "wall", steady(100.0)),
        ]);
        let mut out = String::new();
        markdown(&mut out, &apps_only);
        assert!(!out.contains("of the applications"), "{out}");
        let both = file(vec![
            record(SUITE, "cc", "wfspan", "wall", steady(90.0)),
            record(SUITE, "cc", "system", "wall", steady(100.0)),
            record(SUITE, "sqlite", "wfspan", "wall", steady(160.0)),
            record(SUITE, "sqlite", "system", "wall", steady(100.0)),
            record(SUITE, "c-larson", "wfspan", "wall", steady(40.0)),
            record(SUITE, "c-larson", "system", "wall", steady(10.0)),
        ]);
        let mut out = String::new();
        markdown(&mut out, &both);
        let overall = (0.9f64 * 1.6 * 4.0).cbrt();
        assert!(
            out.contains(&format!("| geometric mean | 1 | {overall:.2} |")),
            "{out}"
        );
        let apps = (0.9f64 * 1.6).sqrt();
        assert!(
            out.contains(&format!("| … of the applications | 1 | {apps:.2} |")),
            "{out}"
        );
        assert!(
            out.contains("| … of the C benchmarks (`c-*`) | 1 | 4.00 |"),
            "{out}"
        );
        // The terminal's summary splits the same way, only where both kinds ran.
        assert!(terminal_text(&both).contains("… C benchmarks"));
        assert!(!terminal_text(&apps_only).contains("… applications"));
    }

    /// A redis record of `metric` for `allocator`, with its run-by-run values.
    fn redis_runs(allocator: &str, metric: &str, values: &[f64]) -> Record {
        let samples: Vec<crate::results::Sample> = values
            .iter()
            .map(|&v| crate::results::sample(metric, "", v, true))
            .collect();
        Record::summarise(SUITE, "redis", allocator, 2, &samples)
    }

    #[test]
    fn the_redis_table_names_jemalloc_against_itself_only_where_the_server_maps_it() {
        let maps = alloclab_programs::redis::MAPS_LIBJEMALLOC;
        let with = |mapped: f64| {
            let mut recs = Vec::new();
            for command in alloclab_programs::redis::COMMANDS {
                let metric = format!("{command}_rps");
                recs.push(redis_runs("system", &metric, &[1000.0, 1000.0, 1000.0]));
                recs.push(redis_runs(REDIS_CONTROL, &metric, &[800.0, 1000.0, 1200.0]));
            }
            recs.push(redis_runs("system", "peak_rss", &[70.0, 70.0, 70.0]));
            recs.push(redis_runs(REDIS_CONTROL, "peak_rss", &[70.0, 77.0, 70.0]));
            recs.push(redis_runs("system", maps, &[mapped; 3]));
            let mut out = String::new();
            markdown(&mut out, &file(recs));
            out
        };
        let out = with(1.0);
        assert!(out.contains("jemalloc against itself"), "{out}");
        // `system` over the peer: 1000 over 800, 1000 and 1200.
        assert!(out.contains("SET 0.83–1.25"), "{out}");
        assert!(out.contains("peak RSS 0.91–1.00"), "{out}");
        // A server on another allocator: the peer is no control.
        let out = with(0.0);
        assert!(out.contains("| SET |"), "{out}");
        assert!(!out.contains("against itself"), "{out}");
    }
}
