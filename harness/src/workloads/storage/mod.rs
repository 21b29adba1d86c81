//! The `storage` suite: three storage engines in the style of N-Store (in-place update,
//! log-structured merge, copy-on-write; [`alloclab_storage_engines::engines`]) on YCSB, over
//! alloclab-pmem, PMDK's libpmemobj and a DRAM upper bound, all through
//! [`PersistentAllocator`](alloclab_storage_engines::PersistentAllocator) — the workload of Chen et al., "On the Performance
//! Intricacies of Persistent Memory Aware Storage Engines" (TKDE 2023).
//!
//! # Workloads
//!
//! One workload per engine and mix, `<engine>-<mix>` (`inp-a` … `cow-var`, Zipfian keys),
//! and `<engine>-<mix>-uniform` for the mixes whose key choice matters most to the paper's
//! read paths (a and f) with uniform keys; see [`ycsb`] for the mixes, tuples and key
//! choosers. The allocators are the `pmem` suite's persistent heaps (`pmdk`,
//! `alloclab-pmem`, `dram`).
//!
//! # The work
//!
//! A pool of [`pool_bytes`] in `/dev/shm` (or `$ALLOCLAB_PMEM_DIR`), with
//! `PMEM_IS_PMEM_FORCE=1`: real CLWB/CLFLUSHOPT + SFENCE for both alloclab-pmem (libpmem,
//! else native) and PMDK, no media latency; the worker sets it before libpmem loads (see
//! [`super::pmem::prepare_process`]). Each of the `T` threads owns a partition: its own
//! engine instance, whose root is a slice of the heap's root, over the one shared heap.
//!
//! 1. **Load** (untimed): [`LOADED`] items (scaled by `--scale`) shared out among the
//!    partitions, each inserted and committed as the engine commits
//!    ([`Engine::COMMIT_EVERY`](alloclab_storage_engines::Engine::COMMIT_EVERY)).
//! 2. **Run** (timed): as many operations again, drawn before the clock starts (the same
//!    for every heap), each timed on its own with two clock reads into an HDR histogram;
//!    the engine commits after every `COMMIT_EVERY` operations (inside the timing of the
//!    operation that completes the batch) and at the end. The heaps measured together run
//!    in turn, [`SEGMENT_OPS`] operations per partition at a time (see [`driver`]: the
//!    machine's slow spells then fall on all of them alike), and each partition's time is
//!    the sum of its segments. One operation in [`SPLIT_SAMPLE`] (chosen by a hash of its
//!    number, so that commits are sampled as often as other operations) has its time
//!    split measured ([`Split::time_next`]); the split's fenced clock reads slow the
//!    operations they time, so the throughput and the latencies are of the other
//!    operations (each partition's, over its run phase less the sampled operations' time).
//! 3. **Recovery** (durable heaps): the engines and the heap are dropped (a clean close),
//!    the pool is opened again ([`PersistentAllocator::open`](alloclab_storage_engines::PersistentAllocator::open): heap recovery) and every partition is
//!    recovered ([`Engine::recover`](alloclab_storage_engines::Engine::recover), one after another: engine recovery).
//! 4. **Check** (untimed): every item that should exist after the run is read back from the
//!    recovered engines (from the running ones for DRAM), and every deleted one is absent;
//!    a single miss fails the measurement.
//!
//! # Metrics
//!
//! | metric | unit | |
//! |---|---|---|
//! | `ops_per_s` | ops/s | run-phase operations per second, all threads (those not sampled for the split) |
//! | `op_p50`, `op_p99`, `op_p99.9`, `op_p99.99` | ns | one operation (its commit included), one clock read included; those not sampled for the split |
//! | `share_index`, `share_cc`, `share_mm`, `share_mod` | % | the engines' time split over the run phase's sampled operations, summed over threads ([`Split`]) |
//! | `engine_flushes_per_op`, `engine_fences_per_op`, `engine_bytes_flushed_per_op` | /op | the engines' own flush calls, fences and bytes flushed |
//! | `flushes_per_op`, `fences_per_op`, `bytes_flushed_per_op` | /op | everything the heap's medium flushed (cache lines) and fenced, engines' flushes included (heaps that count: alloclab-pmem) |
//! | `recovery_heap_ms`, `recovery_engine_ms` | ms | heap open, and all partitions' recovery (durable heaps) |
//! | `control_ops_ratio` | x | alloclab-pmem only: its control's `ops_per_s` over its own, same run (see [`driver`]) |
//! | `control_share_mm` | % | alloclab-pmem only: its control's `share_mm` |
//!
//! plus `clock_read` and `timer_overhead`.
//!
//! # The control
//!
//! Wherever alloclab-pmem ([`CONTROLLED_HEAP`]) is measured, a second instance of it — its
//! own pool and engines, over the same operations — runs beside it in the same process,
//! interleaved like every heap. The two differ in nothing but the moment each segment ran
//! and where their memory lies, so how far the control's throughput over the first moves
//! from run to run is how far this machine moves a ratio of two heaps at that point: the
//! floor under the spread of alloclab-pmem ÷ PMDK. Its memory-management share is a second
//! sample of alloclab-pmem's, and its spread the floor under that share's.

pub mod driver;
pub mod report;
#[cfg(test)]
mod testing;
pub mod ycsb;

use std::time::Duration;

use alloclab_storage_engines::{PersistStats, Phase, Split};
use hdrhistogram::Histogram;

pub use self::driver::{SEGMENT_OPS, SPLIT_SAMPLE, measure, measure_together};
use self::ycsb::{KeyChoice, Mix};
use super::pmem::{Persistence, pool_dir};
use super::realtime::{shortest_ns, timer_samples};
use super::{Params, Scale, WorkloadInfo};
use crate::measure;
use crate::peers::Capability;
use crate::results::{Sample, sample};

/// Items loaded, and operations run, at [`Scale::Small`] (all partitions together).
pub const LOADED: u64 = 20_000;
/// Fixed part of the pool.
pub const POOL_BASE_BYTES: usize = 32 << 20;
/// Pool bytes per item loaded or operation run (1,000-byte tuples, with room for the
/// engines' logs, old versions and copies).
pub const POOL_BYTES_PER_ITEM: usize = 3 << 10;
/// Runs per measurement when `--runs` is not given: three, each a process in which every
/// heap runs, interleaved (see [`driver`]); the checks read the medians and state how far
/// the runs spread.
pub const DEFAULT_RUNS: u32 = 3;
/// The mixes that also run with uniform keys.
pub const UNIFORM_MIXES: &[Mix] = &[Mix::A, Mix::F];

macro_rules! storage_workload {
    ($engine:literal, $mix:literal, $what:literal) => {
        WorkloadInfo {
            suite: "storage",
            name: concat!($engine, "-", $mix),
            description: concat!("YCSB ", $what, " on the ", $engine, " engine, zipfian keys"),
            requires: Capability::PersistentHeap,
            default_threads: super::pmem::one_and_two,
        }
    };
    ($engine:literal, $mix:literal, $what:literal, uniform) => {
        WorkloadInfo {
            suite: "storage",
            name: concat!($engine, "-", $mix, "-uniform"),
            description: concat!("YCSB ", $what, " on the ", $engine, " engine, uniform keys"),
            requires: Capability::PersistentHeap,
            default_threads: super::pmem::one_and_two,
        }
    };
}

macro_rules! engine_workloads {
    ($engine:literal) => {
        [
            storage_workload!($engine, "a", "a (R100)"),
            storage_workload!($engine, "b", "b (R90/I10)"),
            storage_workload!($engine, "c", "c (R50/I50)"),
            storage_workload!($engine, "d", "d (R10/I90)"),
            storage_workload!($engine, "e", "e (R90/U10)"),
            storage_workload!($engine, "f", "f (R50/U50)"),
            storage_workload!($engine, "g", "g (R10/U90)"),
            storage_workload!($engine, "h", "h (D100)"),
            storage_workload!($engine, "var", "var (R50/I50, 1-256 B values)"),
            storage_workload!($engine, "a", "a (R100)", uniform),
            storage_workload!($engine, "f", "f (R50/U50)", uniform),
        ]
    };
}

const INP: [WorkloadInfo; 11] = engine_workloads!("inp");
const LSM: [WorkloadInfo; 11] = engine_workloads!("lsm");
const COW: [WorkloadInfo; 11] = engine_workloads!("cow");

/// The registry entries of the `storage` suite: every engine × mix, then the uniform ones.
pub const WORKLOADS: &[WorkloadInfo] = &[
    INP[0], INP[1], INP[2], INP[3], INP[4], INP[5], INP[6], INP[7], INP[8], INP[9], INP[10],
    LSM[0], LSM[1], LSM[2], LSM[3], LSM[4], LSM[5], LSM[6], LSM[7], LSM[8], LSM[9], LSM[10],
    COW[0], COW[1], COW[2], COW[3], COW[4], COW[5], COW[6], COW[7], COW[8], COW[9], COW[10],
];

/// What a `storage` workload name stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The engine (`inp`, `lsm`, `cow`).
    pub engine: &'static str,
    /// The mix.
    pub mix: Mix,
    /// The key chooser.
    pub keys: KeyChoice,
}

impl Spec {
    /// The workload `name` (`inp-a`, `cow-f-uniform`), if it is one of this suite's.
    pub fn parse(name: &str) -> Option<Self> {
        let (rest, keys) = match name.strip_suffix("-uniform") {
            Some(rest) => (rest, KeyChoice::Uniform),
            None => (name, KeyChoice::Zipfian),
        };
        let (engine, mix) = rest.split_once('-')?;
        let engine = *alloclab_storage_engines::ENGINES
            .iter()
            .find(|e| **e == engine)?;
        let mix = Mix::from_name(mix)?;
        if keys == KeyChoice::Uniform && !UNIFORM_MIXES.contains(&mix) {
            return None;
        }
        Some(Self { engine, mix, keys })
    }
}

/// Whether the workload `name` belongs to the suite at `scale`: the mixes the checks decide
/// on ([`report::SPEEDUP_MIXES`], [`report::MM_MIXES`], Zipfian keys) at every scale, the
/// others (a, b, e, var and the uniform-key workloads) from `--scale medium` on, where the
/// suite's time allows them. `alloclab run` measures any of them at any scale.
pub fn in_suite_at(name: &str, scale: Scale) -> bool {
    let Some(spec) = Spec::parse(name) else {
        return true;
    };
    matches!(scale, Scale::Medium | Scale::Large)
        || (spec.keys == KeyChoice::Zipfian
            && (report::SPEEDUP_MIXES.contains(&spec.mix) || report::MM_MIXES.contains(&spec.mix)))
}

/// Whether `name` is a workload of this suite.
pub fn is_storage_workload(name: &str) -> bool {
    Spec::parse(name).is_some()
}

/// Why the workload `name` cannot run in this build (its engine is not built), if it
/// cannot; `None` for workloads of other suites.
pub fn unavailable(name: &str) -> Option<String> {
    let spec = Spec::parse(name)?;
    alloclab_storage_engines::engine_availability(spec.engine).and_then(Result::err)
}

/// The pool size for `items` loaded items and `ops` operations.
pub fn pool_bytes(items: u64, ops: u64) -> usize {
    POOL_BASE_BYTES + (items + ops) as usize * POOL_BYTES_PER_ITEM
}

/// The heap measured beside a second instance of itself, its control (see [the module
/// documentation](self#the-control)).
pub const CONTROLLED_HEAP: &str = "alloclab-pmem";

/// What one heap of a run measured: its samples, or why it has none.
pub type HeapSamples = (String, Result<Vec<Sample>, String>);

/// Runs `workload` on the heaps `allocators`, together (see [`driver`]), and returns each
/// heap's samples, in order.
///
/// # Errors
///
/// For the whole run, a one-line message: an unknown workload, the environment not set.
/// A heap's own failure (unknown or unavailable, an engine or heap operation failing, an
/// item lost or resurrected across recovery) is its outcome's.
pub fn run(
    workload: &str,
    allocators: &[&str],
    params: &Params,
) -> Result<Vec<HeapSamples>, String> {
    let spec =
        Spec::parse(workload).ok_or_else(|| format!("'{workload}' is not a storage workload"))?;
    if !Persistence::Flush.is_set() {
        return Err(format!(
            "{workload} needs PMEM_IS_PMEM_FORCE=1 PMEM_NO_FLUSH=0 set before libpmem loads \
             (alloclab's worker sets it)"
        ));
    }
    let clock_read_ns = measure::timer_overhead_ns();
    let reports = measure_together(spec, allocators, params, &pool_dir())?;
    Ok(allocators
        .iter()
        .zip(reports)
        .map(|(heap, report)| {
            (
                (*heap).to_owned(),
                report
                    .map(|r| r.samples(clock_read_ns))
                    .map_err(|e| format!("{workload} on {heap}: {e}")),
            )
        })
        .collect())
}

/// What one run measured.
#[derive(Debug)]
pub struct Report {
    /// Threads (partitions).
    pub threads: usize,
    /// Items loaded, all partitions.
    pub loaded: u64,
    /// Operations of the run phase, all partitions.
    pub ops: u64,
    /// Wall time of the run phase.
    pub elapsed: Duration,
    /// Run-phase operations per second, all threads, over the operations not sampled for
    /// the split: each partition's such operations over its run phase less the time of its
    /// sampled ones (whose fenced clock reads slow them), summed over the partitions.
    pub ops_per_s: f64,
    /// Per-operation latency, ns, all threads, of the operations not sampled for the split.
    pub latency: Histogram<u64>,
    /// The engines' split over the run phase, summed over threads.
    pub split: Split,
    /// The heap's counters over the run phase (heaps that count).
    pub persist: Option<PersistStats>,
    /// Heap and engine recovery (durable heaps).
    pub recovery: Option<Recovery>,
    /// Items that exist after the run, all partitions (checked after recovery).
    pub live_items: u64,
    /// What the heap's control measured in the same run ([`CONTROLLED_HEAP`] only).
    pub control: Option<Control>,
}

/// What a heap's control measured: a second instance of the heap, with its own pool and
/// engines over the same operations, interleaved with the others in the same run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Control {
    /// Its [`Report::ops_per_s`].
    pub ops_per_s: f64,
    /// Its memory-management share, `0.0..=1.0`.
    pub share_mm: f64,
}

/// The recovery measurement.
#[derive(Clone, Copy, Debug)]
pub struct Recovery {
    /// [`PersistentAllocator::open`](alloclab_storage_engines::PersistentAllocator::open).
    pub heap: Duration,
    /// Every partition's [`Engine::recover`](alloclab_storage_engines::Engine::recover), one after another.
    pub engine: Duration,
}

/// The metric of each phase's share.
pub fn share_metric(phase: Phase) -> &'static str {
    match phase {
        Phase::Index => "share_index",
        Phase::Cc => "share_cc",
        Phase::Mm => "share_mm",
        Phase::Mod => "share_mod",
    }
}

impl Report {
    /// The metrics of the [module documentation](self); `clock_read_ns` is the calibrated
    /// cost of one clock read.
    pub fn samples(&self, clock_read_ns: f64) -> Vec<Sample> {
        let ops = self.ops.max(1) as f64;
        let mut out = vec![sample("ops_per_s", "ops/s", self.ops_per_s, false)];
        for (suffix, q) in [
            ("p50", 0.5),
            ("p99", 0.99),
            ("p99.9", 0.999),
            ("p99.99", 0.9999),
        ] {
            out.push(sample(
                &format!("op_{suffix}"),
                "ns",
                self.latency.value_at_quantile(q) as f64,
                true,
            ));
        }
        for phase in Phase::ALL {
            out.push(sample(
                share_metric(phase),
                "%",
                self.split.share(phase) * 100.0,
                phase != Phase::Mod,
            ));
        }
        out.push(sample(
            "engine_flushes_per_op",
            "flushes/op",
            self.split.flushes as f64 / ops,
            true,
        ));
        out.push(sample(
            "engine_fences_per_op",
            "fences/op",
            self.split.fences as f64 / ops,
            true,
        ));
        out.push(sample(
            "engine_bytes_flushed_per_op",
            "B/op",
            self.split.bytes_flushed as f64 / ops,
            true,
        ));
        if let Some(p) = self.persist {
            out.push(sample(
                "flushes_per_op",
                "lines/op",
                p.lines_flushed as f64 / ops,
                true,
            ));
            out.push(sample(
                "fences_per_op",
                "fences/op",
                p.fences as f64 / ops,
                true,
            ));
            out.push(sample(
                "bytes_flushed_per_op",
                "B/op",
                p.bytes_flushed as f64 / ops,
                true,
            ));
        }
        if let Some(r) = self.recovery {
            out.push(sample(
                "recovery_heap_ms",
                "ms",
                r.heap.as_secs_f64() * 1e3,
                true,
            ));
            out.push(sample(
                "recovery_engine_ms",
                "ms",
                r.engine.as_secs_f64() * 1e3,
                true,
            ));
        }
        if let Some(c) = self.control {
            out.push(sample(
                "control_ops_ratio",
                "x",
                c.ops_per_s / self.ops_per_s.max(f64::MIN_POSITIVE),
                false,
            ));
            out.push(sample("control_share_mm", "%", c.share_mm * 100.0, true));
        }
        out.extend(timer_samples(clock_read_ns, shortest_ns(&[&self.latency])));
        out
    }
}

/// The scale at which the default suite runs, for the report's parameter line.
pub fn loaded_at(scale: Scale) -> u64 {
    scale.scaled(LOADED)
}

#[cfg(test)]
mod tests {
    use super::testing::tiny;
    use super::*;

    #[test]
    fn workload_names_parse_into_engine_mix_and_keys_and_others_are_refused() {
        assert_eq!(
            Spec::parse("cow-f-uniform"),
            Some(Spec {
                engine: "cow",
                mix: Mix::F,
                keys: KeyChoice::Uniform
            })
        );
        assert_eq!(Spec::parse("lsm-var").map(|s| s.mix), Some(Mix::Var));
        for bad in [
            "inp",
            "inp-z",
            "btree-a",
            "inp-c-uniform",
            "inp-a-zipfian",
            "pmem-flush",
        ] {
            assert_eq!(Spec::parse(bad), None, "{bad}");
        }
        assert_eq!(WORKLOADS.len(), 33);
        assert!(WORKLOADS.iter().all(|w| is_storage_workload(w.name)));
    }

    #[test]
    fn names_and_the_environment_are_checked_before_anything_runs() {
        let params = tiny(1);
        assert!(
            run("larson", &["dram"], &params)
                .unwrap_err()
                .contains("not a storage workload")
        );
        if !Persistence::Flush.is_set() {
            let err = run("inp-a", &["dram"], &params).unwrap_err();
            assert!(err.contains("PMEM_IS_PMEM_FORCE=1"), "{err}");
        }
    }
}
