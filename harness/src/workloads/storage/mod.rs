//! The `storage` suite: three storage engines in the style of N-Store (in-place update,
//! log-structured merge, copy-on-write; [`alloclab_storage_engines::engines`]) on YCSB, over
//! alloclab-pmem, PMDK's libpmemobj and a DRAM upper bound, all through
//! [`PersistentAllocator`] — the workload of Chen et al., "On the Performance
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
//!    ([`Engine::COMMIT_EVERY`]).
//! 2. **Run** (timed): as many operations again, drawn before the clock starts (the same
//!    for every heap), each timed on its own with two clock reads into an HDR histogram;
//!    the engine commits after every `COMMIT_EVERY` operations (inside the timing of the
//!    operation that completes the batch) and at the end. The phase is timed as a whole
//!    for the throughput. One operation in [`SPLIT_SAMPLE`] (chosen by a hash of its
//!    number, so that commits are sampled as often as other operations) has its time
//!    split measured ([`Split::time_next`]); the split's fenced clock reads slow the
//!    operations they time, so the throughput and the latencies are of the other
//!    operations (each partition's, over its run phase less the sampled operations' time).
//! 3. **Recovery** (durable heaps): the engines and the heap are dropped (a clean close),
//!    the pool is opened again ([`PersistentAllocator::open`]: heap recovery) and every partition is
//!    recovered ([`Engine::recover`], one after another: engine recovery).
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
//!
//! plus `clock_read` and `timer_overhead`.

pub mod report;
#[cfg(test)]
mod testing;
pub mod ycsb;

use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use alloclab_storage_engines::{
    Engine, EngineTask, PersistStats, PersistentAllocator, Phase, Split, with_engine,
};
use hdrhistogram::Histogram;

use self::ycsb::{COLUMN_BYTES, KeyChoice, Mix, Op, PartitionPlan, TUPLE_BYTES};
use super::pmem::{Persistence, pool_dir};
use super::realtime::{latency_histogram, nanos_between, shortest_ns, timer_samples};
use super::{Params, Scale, ScratchPool, WorkloadInfo};
use crate::measure;
use crate::peers::Capability;
use crate::pmem::{PersistentHeapTask, with_persistent_heap};
use crate::results::{Sample, sample};

/// Items loaded, and operations run, at [`Scale::Small`] (all partitions together).
pub const LOADED: u64 = 20_000;
/// Fixed part of the pool.
pub const POOL_BASE_BYTES: usize = 32 << 20;
/// Pool bytes per item loaded or operation run (1,000-byte tuples, with room for the
/// engines' logs, old versions and copies).
pub const POOL_BYTES_PER_ITEM: usize = 3 << 10;
/// Runs per measurement when `--runs` is not given: one (the suite's targets are stated for
/// one run), and what keeps 198 measurements of about a second each within the default suite.
pub const DEFAULT_RUNS: u32 = 1;
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

/// Runs `workload` on the heap `allocator` and returns its samples.
///
/// # Errors
///
/// A one-line message: unknown names, the heap or engine unavailable, the environment not
/// set, an engine or heap operation failing, or an item lost or resurrected across
/// recovery.
pub fn run(workload: &str, allocator: &str, params: &Params) -> Result<Vec<Sample>, String> {
    let spec =
        Spec::parse(workload).ok_or_else(|| format!("'{workload}' is not a storage workload"))?;
    if !Persistence::Flush.is_set() {
        return Err(format!(
            "{workload} needs PMEM_IS_PMEM_FORCE=1 PMEM_NO_FLUSH=0 set before libpmem loads \
             (alloclab's worker sets it)"
        ));
    }
    let report = measure_by_name(spec, allocator, params, &pool_dir())
        .map_err(|e| format!("{workload} on {allocator}: {e}"))?;
    Ok(report.samples(measure::timer_overhead_ns()))
}

/// Measures `spec` on the heap named `allocator` (no environment check: tests use it).
///
/// # Errors
///
/// As [`run`].
pub fn measure_by_name(
    spec: Spec,
    allocator: &str,
    params: &Params,
    dir: &Path,
) -> Result<Report, String> {
    struct ByHeap<'a> {
        spec: Spec,
        params: Params,
        dir: &'a Path,
    }
    impl PersistentHeapTask for ByHeap<'_> {
        type Output = Result<Report, String>;
        fn run<H: PersistentAllocator>(self, _name: &'static str) -> Result<Report, String> {
            H::available()?;
            let engine = self.spec.engine;
            with_engine::<H, _>(engine, ByEngine(self))
                .ok_or_else(|| format!("unknown engine '{engine}'"))??
        }
    }
    struct ByEngine<'a>(ByHeap<'a>);
    impl<H: PersistentAllocator> EngineTask<H> for ByEngine<'_> {
        type Output = Result<Report, String>;
        fn run<E: Engine<H>>(self) -> Result<Report, String> {
            measure::<H, E>(self.0.spec, &self.0.params, self.0.dir)
        }
    }
    with_persistent_heap(
        allocator,
        ByHeap {
            spec,
            params: *params,
            dir,
        },
    )
    .ok_or_else(|| format!("allocator '{allocator}' is not a persistent heap"))?
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
}

/// The recovery measurement.
#[derive(Clone, Copy, Debug)]
pub struct Recovery {
    /// [`PersistentAllocator::open`].
    pub heap: Duration,
    /// Every partition's [`Engine::recover`], one after another.
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
        out.extend(timer_samples(clock_read_ns, shortest_ns(&[&self.latency])));
        out
    }
}

/// One partition's value buffer: a recognisable pattern per key, so a value read back can
/// be told from another key's.
fn fill_value(buf: &mut Vec<u8>, key: u64, bytes: usize) {
    buf.clear();
    let pattern = key.to_le_bytes();
    buf.extend((0..bytes).map(|i| pattern[i % 8] ^ (i / 8) as u8));
}

/// Loads a partition: inserts its items and commits as the engine does.
fn load<H: PersistentAllocator, E: Engine<H>>(
    engine: &mut E,
    plan: &PartitionPlan,
) -> Result<(), String> {
    let mut value = Vec::with_capacity(TUPLE_BYTES);
    for (item, &bytes) in plan.load_bytes.iter().enumerate() {
        let key = plan.key(item as u64);
        fill_value(&mut value, key, bytes as usize);
        if !engine.insert(key, &value)? {
            return Err(format!("load: key {key:#x} exists already"));
        }
        if (item + 1) % E::COMMIT_EVERY.max(1) == 0 {
            engine.commit()?;
        }
    }
    engine.commit()
}

/// What a thread of the run phase hands back.
struct Ran<E> {
    engine: E,
    latency: Histogram<u64>,
    split: Split,
    /// When the partition's first operation began and its last one (the final commit
    /// included) ended.
    began: Instant,
    ended: Instant,
    /// The time the operations sampled for the split took (their number is the split's
    /// [`timed_ops`](Split::timed_ops)).
    sampled_time: Duration,
}

/// One run-phase operation in this many is timed for the split ([`Split::time_next`]).
///
/// The sampled operations are slower (their fenced clock reads keep their phases from
/// overlapping, which costs a faster heap's operations a larger fraction), so the
/// throughput and the latencies are measured on the other operations ([`Report::ops_per_s`]).
/// Counting every operation, one in four sampled took alloclab-pmem's inp-f throughput
/// over PMDK's to 1.50x in a full suite run on the project's 2-core VM (1.8-1.9x in earlier
/// runs without the fences).
pub const SPLIT_SAMPLE: u64 = 4;

/// Whether run-phase operation `n` of a partition is one of the split's sample: a hash of
/// `n` (the SplitMix64 finaliser), so that the sample does not follow the commit period.
fn split_sampled(n: usize) -> bool {
    let mut z = (n as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)).is_multiple_of(SPLIT_SAMPLE)
}

/// Runs a partition's operations, timing each (and a sample of them for the split): the
/// latency of those not sampled goes into `latency`; returns the time the sampled ones
/// took.
fn run_ops<H: PersistentAllocator, E: Engine<H>>(
    engine: &mut E,
    plan: &PartitionPlan,
    latency: &mut Histogram<u64>,
) -> Result<Duration, String> {
    let mut sampled_time = Duration::ZERO;
    let mut value = Vec::with_capacity(TUPLE_BYTES);
    let mut out = Vec::with_capacity(TUPLE_BYTES);
    let column = [0x5Au8; COLUMN_BYTES];
    let every = E::COMMIT_EVERY.max(1);
    for (n, op) in plan.ops.iter().enumerate() {
        // Values are prepared outside the timing, as YCSB's client builds them.
        if let Op::Insert { item, bytes } = *op {
            fill_value(&mut value, plan.key(item), bytes as usize);
        }
        let in_sample = split_sampled(n);
        engine.split().time_next(in_sample);
        let t0 = Instant::now();
        let done = match *op {
            Op::Read { item } => engine.read(plan.key(item), &mut out),
            Op::Insert { item, .. } => engine.insert(plan.key(item), &value),
            Op::Update { item, column: c } => {
                engine.update(plan.key(item), c as usize * COLUMN_BYTES, &column)
            }
            Op::Delete { item } => engine.delete(plan.key(item)),
        };
        let commit = if (n + 1) % every == 0 {
            engine.commit()
        } else {
            Ok(())
        };
        let t1 = Instant::now();
        if !done? {
            return Err(format!("{op:?} (key {:#x}) found no key / a key", {
                let (Op::Read { item }
                | Op::Insert { item, .. }
                | Op::Update { item, .. }
                | Op::Delete { item }) = *op;
                plan.key(item)
            }));
        }
        commit?;
        if in_sample {
            sampled_time += t1.duration_since(t0);
        } else {
            latency.saturating_record(nanos_between(t0, t1));
        }
    }
    // The last commit is no operation's: not in the split's sample (nor is anything the
    // engine does after the run).
    engine.split().time_next(false);
    engine.commit()?;
    Ok(sampled_time)
}

/// Checks that every item that should exist does, with its length, and every deleted item
/// does not; the number of items checked present.
fn check<H: PersistentAllocator, E: Engine<H>>(
    engine: &mut E,
    plan: &PartitionPlan,
) -> Result<u64, String> {
    let (live, deleted) = plan.final_items();
    let mut out = Vec::new();
    let mut missing = 0u64;
    for &item in &live {
        if !engine.read(plan.key(item), &mut out)? {
            missing += 1;
        }
    }
    let mut resurrected = 0u64;
    for &item in &deleted {
        if engine.read(plan.key(item), &mut out)? {
            resurrected += 1;
        }
    }
    if missing > 0 || resurrected > 0 {
        return Err(format!(
            "partition {}: {missing} of {} committed items missing and {resurrected} of {} deleted items back after recovery",
            plan.partition,
            live.len(),
            deleted.len()
        ));
    }
    Ok(live.len() as u64)
}

/// The message of a caught panic.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// The root slice of partition `t`.
fn partition_root<H: PersistentAllocator, E: Engine<H>>(heap: &H, t: usize) -> *mut u8 {
    heap.root().wrapping_add(t * E::ROOT_BYTES)
}

/// Runs the whole workload once on a fresh pool of heap type `H` with engine `E` in `dir`.
///
/// # Errors
///
/// A heap or engine operation fails, or an item is lost or back across recovery.
pub fn measure<H: PersistentAllocator, E: Engine<H>>(
    spec: Spec,
    params: &Params,
    dir: &Path,
) -> Result<Report, String> {
    H::available()?;
    let threads = params.threads.max(1);
    let loaded = params.scale.scaled(LOADED).max(threads as u64);
    let ops = loaded;
    let seed = params.seed ^ (spec.mix as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D);
    let plans = (0..threads)
        .map(|t| {
            ycsb::plan_partition(
                spec.mix,
                spec.keys,
                ycsb::share_of(loaded, t, threads),
                ycsb::share_of(ops, t, threads),
                t,
                threads,
                seed,
            )
        })
        .collect::<Result<Vec<_>, String>>()?;

    let file = ScratchPool::new(dir, "storage", E::NAME);
    let heap = Arc::new(H::create(
        &file.0,
        pool_bytes(loaded, ops),
        threads * E::ROOT_BYTES,
    )?);
    let loaded_barrier = Barrier::new(threads + 1);
    let start = Barrier::new(threads + 1);
    let end = Barrier::new(threads + 1);
    type Outcome<E> = Result<Ran<E>, String>;
    let (persist, ran) = std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .iter()
            .enumerate()
            .map(|(t, plan)| {
                let (heap, loaded_barrier, start, end) = (&heap, &loaded_barrier, &start, &end);
                scope.spawn(move || -> Outcome<E> {
                    let prepared = panic::catch_unwind(AssertUnwindSafe(|| {
                        let root = partition_root::<H, E>(heap, t);
                        let mut engine = E::create(Arc::clone(heap), root)?;
                        load::<H, E>(&mut engine, plan)?;
                        Ok::<_, String>(engine)
                    }))
                    .unwrap_or_else(|p| {
                        Err(format!(
                            "partition {t} panicked while loading: {}",
                            panic_message(&*p)
                        ))
                    });
                    loaded_barrier.wait();
                    start.wait();
                    let result = prepared.and_then(|mut engine| {
                        let before = engine.split().clone();
                        let mut latency = latency_histogram();
                        let began = Instant::now();
                        let ran = panic::catch_unwind(AssertUnwindSafe(|| {
                            run_ops::<H, E>(&mut engine, plan, &mut latency)
                        }))
                        .unwrap_or_else(|p| {
                            Err(format!("partition {t} panicked: {}", panic_message(&*p)))
                        });
                        let ended = Instant::now();
                        ran.map(|sampled_time| Ran {
                            split: engine.split().since(&before),
                            engine,
                            latency,
                            began,
                            ended,
                            sampled_time,
                        })
                    });
                    end.wait();
                    result
                })
            })
            .collect();
        loaded_barrier.wait();
        let before = heap.persist_counts();
        start.wait();
        end.wait();
        let after = heap.persist_counts();
        let ran: Vec<Outcome<E>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a partition thread panicked".to_owned()))
            })
            .collect();
        (before.zip(after).map(|(b, a)| a.since(&b)), ran)
    });
    let ran = ran.into_iter().collect::<Result<Vec<_>, String>>()?;
    // From the first partition's start to the last one's end, as the partitions saw it:
    // a clock read by this thread after the start barrier can come late (with as many
    // partitions as cores, this thread may wait for one while they run), which made
    // throughputs at two threads up to several times too high.
    let began = ran
        .iter()
        .map(|r| r.began)
        .min()
        .expect("a partition at least");
    let ended = ran
        .iter()
        .map(|r| r.ended)
        .max()
        .expect("a partition at least");
    let elapsed = ended.duration_since(began);
    // Each partition's rate over its operations outside the split's sample, summed.
    let ops_per_s = ran
        .iter()
        .zip(&plans)
        .map(|(r, plan)| {
            let seconds = r
                .ended
                .duration_since(r.began)
                .saturating_sub(r.sampled_time)
                .as_secs_f64()
                .max(1e-9);
            (plan.ops.len() as u64).saturating_sub(r.split.timed_ops()) as f64 / seconds
        })
        .sum();
    let mut split = Split::default();
    let mut latency = latency_histogram();
    let mut engines = Vec::with_capacity(threads);
    for r in ran {
        split.add(&r.split);
        latency.add(&r.latency).expect("same bounds");
        engines.push(r.engine);
    }

    let (recovery, live_items) = if H::DURABLE {
        drop(engines);
        drop(heap);
        let t0 = Instant::now();
        let heap = Arc::new(H::open(&file.0)?);
        let heap_time = t0.elapsed();
        let mut engine_time = Duration::ZERO;
        let mut recovered = Vec::with_capacity(threads);
        for t in 0..threads {
            let root = partition_root::<H, E>(&heap, t);
            let t0 = Instant::now();
            let engine = E::recover(Arc::clone(&heap), root)
                .map_err(|e| format!("recovering partition {t}: {e}"))?;
            engine_time += t0.elapsed();
            recovered.push(engine);
        }
        let mut live = 0;
        for (engine, plan) in recovered.iter_mut().zip(&plans) {
            live += check::<H, E>(engine, plan)?;
        }
        (
            Some(Recovery {
                heap: heap_time,
                engine: engine_time,
            }),
            live,
        )
    } else {
        let mut live = 0;
        for (engine, plan) in engines.iter_mut().zip(&plans) {
            live += check::<H, E>(engine, plan)?;
        }
        (None, live)
    };
    drop(file);
    Ok(Report {
        threads,
        loaded,
        ops,
        elapsed,
        ops_per_s,
        latency,
        split,
        persist,
        recovery,
        live_items,
    })
}

/// The scale at which the default suite runs, for the report's parameter line.
pub fn loaded_at(scale: Scale) -> u64 {
    scale.scaled(LOADED)
}

#[cfg(test)]
mod tests {
    use super::testing::ListEngine;
    use super::*;
    use crate::pmem::{AlloclabPmemHeap, DramHeap, PmdkHeap};
    use crate::report::{CLOCK_READ_METRIC, TIMER_OVERHEAD_METRIC};

    fn tiny(threads: usize) -> Params {
        Params {
            threads,
            scale: Scale::Tiny,
            seed: 11,
        }
    }

    fn spec(mix: Mix, keys: KeyChoice) -> Spec {
        Spec {
            engine: "inp",
            mix,
            keys,
        }
    }

    fn metrics(samples: &[Sample]) -> Vec<&str> {
        samples.iter().map(|s| s.metric.as_str()).collect()
    }

    #[test]
    fn the_split_samples_about_one_operation_in_split_sample_at_every_commit_phase() {
        // Operations that complete a batch of 32 (CoW's commits) and the others are
        // sampled alike: within a few percent of 1 / SPLIT_SAMPLE each.
        let n = 1_024_000;
        for phase in [0, 31] {
            let sampled = (0..n)
                .filter(|i| i % 32 == phase && split_sampled(*i))
                .count() as f64;
            let expected = (n / 32) as f64 / SPLIT_SAMPLE as f64;
            assert!(
                (sampled - expected).abs() < 0.1 * expected,
                "{sampled} of {} at phase {phase}",
                n / 32
            );
        }
    }

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
    fn the_driver_runs_every_mix_on_dram_and_finds_every_committed_item() {
        for mix in Mix::ALL {
            for threads in [1, 2] {
                let report = measure::<DramHeap, ListEngine<DramHeap>>(
                    spec(mix, KeyChoice::Zipfian),
                    &tiny(threads),
                    &pool_dir(),
                )
                .unwrap_or_else(|e| panic!("{mix:?}/{threads}: {e}"));
                let loaded = Scale::Tiny.scaled(LOADED);
                assert_eq!(report.loaded, loaded);
                assert_eq!(report.ops, loaded);
                // Every operation is either in the split's sample or has its latency.
                assert_eq!(report.latency.len() + report.split.timed_ops(), loaded);
                assert!(
                    report.split.timed_ops() > 0,
                    "{mix:?}: no operation sampled"
                );
                assert!(report.ops_per_s > 0.0);
                assert!(report.recovery.is_none(), "dram has nothing to recover");
                assert!(report.persist.is_none());
                let p = mix.proportions();
                if p.delete == 100 {
                    assert_eq!(report.live_items, 0);
                } else if p.insert == 0 {
                    assert_eq!(report.live_items, loaded);
                } else {
                    assert!(report.live_items > loaded);
                }
                if p.insert + p.update + p.delete > 0 {
                    assert!(report.split.flushes > 0, "{mix:?} writes and flushes");
                }
            }
        }
    }

    #[test]
    fn alloclab_pmem_counts_flushes_and_recovers_every_item_through_a_reopen() {
        let report = measure::<AlloclabPmemHeap, ListEngine<AlloclabPmemHeap>>(
            spec(Mix::C, KeyChoice::Uniform),
            &tiny(2),
            &pool_dir(),
        )
        .unwrap();
        let recovery = report.recovery.expect("alloclab-pmem is durable");
        assert!(recovery.heap > Duration::ZERO);
        let persist = report.persist.expect("alloclab-pmem counts");
        // The medium sees every flush the engine makes, and the allocator's own.
        assert!(persist.flushes >= report.split.flushes);
        assert!(persist.fences >= report.split.fences);
        let samples = report.samples(20.0);
        let names = metrics(&samples);
        for m in [
            "ops_per_s",
            "op_p99",
            "op_p99.9",
            "op_p99.99",
            "share_index",
            "share_cc",
            "share_mm",
            "share_mod",
            "engine_flushes_per_op",
            "engine_fences_per_op",
            "engine_bytes_flushed_per_op",
            "flushes_per_op",
            "fences_per_op",
            "bytes_flushed_per_op",
            "recovery_heap_ms",
            "recovery_engine_ms",
            CLOCK_READ_METRIC,
            TIMER_OVERHEAD_METRIC,
        ] {
            assert!(names.contains(&m), "no {m} in {names:?}");
        }
        let share: f64 = samples
            .iter()
            .filter(|s| s.metric.starts_with("share_"))
            .map(|s| s.value)
            .sum();
        assert!((share - 100.0).abs() < 1e-6, "shares sum to {share}");
    }

    #[test]
    fn pmdk_runs_the_driver_and_recovers_every_item() {
        if let Err(reason) = PmdkHeap::available() {
            eprintln!("SKIPPED pmdk_runs_the_driver_and_recovers_every_item: {reason}");
            return;
        }
        // Without PMEM_IS_PMEM_FORCE PMDK flushes /dev/shm with msync: slow but correct,
        // which is all this checks.
        for mix in [Mix::D, Mix::H] {
            let report = measure::<PmdkHeap, ListEngine<PmdkHeap>>(
                spec(mix, KeyChoice::Zipfian),
                &tiny(2),
                &pool_dir(),
            )
            .unwrap();
            assert!(report.recovery.is_some());
            assert!(report.persist.is_none(), "PMDK does not count");
            let names = metrics(&report.samples(20.0))
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>();
            assert!(!names.iter().any(|m| m == "flushes_per_op"));
            assert!(names.iter().any(|m| m == "engine_flushes_per_op"));
        }
    }

    #[test]
    fn names_and_the_environment_are_checked_before_anything_runs() {
        let params = tiny(1);
        assert!(
            run("larson", "dram", &params)
                .unwrap_err()
                .contains("not a storage workload")
        );
        if !Persistence::Flush.is_set() {
            let err = run("inp-a", "dram", &params).unwrap_err();
            assert!(err.contains("PMEM_IS_PMEM_FORCE=1"), "{err}");
        }
        let err = measure_by_name(
            spec(Mix::A, KeyChoice::Zipfian),
            "system",
            &params,
            &pool_dir(),
        )
        .unwrap_err();
        assert!(err.contains("not a persistent heap"), "{err}");
    }

    #[test]
    fn the_real_engines_run_on_every_heap_and_recover_every_item() {
        let heaps: Vec<&str> = match PmdkHeap::available() {
            Ok(()) => vec!["dram", "alloclab-pmem", "pmdk"],
            Err(reason) => {
                eprintln!("pmdk left out of the_real_engines_run_on_every_heap: {reason}");
                vec!["dram", "alloclab-pmem"]
            }
        };
        for engine in alloclab_storage_engines::ENGINES {
            for heap in &heaps {
                for (mix, keys) in [
                    (Mix::D, KeyChoice::Zipfian),
                    (Mix::H, KeyChoice::Zipfian),
                    (Mix::F, KeyChoice::Uniform),
                ] {
                    let spec = Spec { engine, mix, keys };
                    let report = measure_by_name(spec, heap, &tiny(2), &pool_dir())
                        .unwrap_or_else(|e| panic!("{engine}/{heap}/{mix:?}: {e}"));
                    assert_eq!(report.ops, Scale::Tiny.scaled(LOADED));
                    assert_eq!(report.recovery.is_some(), *heap != "dram");
                    assert!(
                        report.split.fences > 0,
                        "{engine}/{heap}/{mix:?} commits durably"
                    );
                }
            }
        }
    }

    #[test]
    fn an_engine_not_built_is_named_as_such() {
        for engine in alloclab_storage_engines::ENGINES {
            if let Some(Err(reason)) = alloclab_storage_engines::engine_availability(engine) {
                let err = measure_by_name(
                    Spec {
                        engine,
                        mix: Mix::A,
                        keys: KeyChoice::Zipfian,
                    },
                    "dram",
                    &tiny(1),
                    &pool_dir(),
                )
                .unwrap_err();
                assert_eq!(err, reason);
                assert_eq!(unavailable(&format!("{engine}-a")), Some(reason));
            }
        }
        assert_eq!(unavailable("larson"), None);
    }
}
