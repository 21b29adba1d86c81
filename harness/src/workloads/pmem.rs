//! The `pmem` suite: a persistent heap's allocation and free of small objects, their cost in
//! flushes and fences, and the time to recover a pool of a million live objects — for
//! alloclab-pmem, PMDK's libpmemobj and a DRAM upper bound, all through
//! [`PersistentAllocator`], with the objects' pointers in [`Slots`] of the root.
//!
//! Two workloads, the same work under two persistence settings of libpmem (the worker sets
//! them before anything loads libpmem, see [`prepare_process`]):
//!
//! | workload     | environment                                  | what it stands for |
//! |--------------|----------------------------------------------|--------------------|
//! | `pmem-flush` | `PMEM_IS_PMEM_FORCE=1`, `PMEM_NO_FLUSH=0`    | ADR: real CLWB/CLFLUSHOPT + SFENCE on every persist, no media latency |
//! | `pmem-eadr`  | `PMEM_IS_PMEM_FORCE=1`, `PMEM_NO_FLUSH=1`    | eADR: caches are persistent, fences only |
//!
//! Pools live in `/dev/shm` (or `$ALLOCLAB_PMEM_DIR`, e.g. a DAX mount; else the temporary
//! directory) and are removed after the run.
//!
//! # The work
//!
//! A pool of [`POOL_BYTES`] with [`SLOTS_PER_THREAD`] slots per thread; thread `i` owns slots
//! `i * SLOTS_PER_THREAD ..` and never touches another's. Each thread first fills its slots
//! (untimed), then runs two phases of `scale.scaled(`[`STEPS`]`)` steps each; a step picks a
//! random slot of its own, frees its block (`free_from`) and allocates a new one of a random
//! size into it (`alloc_into`). Sizes are log-uniform in [`MIN_SIZE`]..=[`MAX_SIZE`] (64 B –
//! 4 KiB; half of them 512 B or less), slots uniform; both come from tables drawn from the
//! run's seed before the clock starts, the same for every heap. Blocks are not written: the
//! figures are the allocator's, not the application's.
//!
//! 1. **Throughput**: the phase is timed as a whole (two clock reads) and gives `ops_per_s`,
//!    alloc+free pairs per second over all threads, and, where the heap counts them, the
//!    heap's flushes and fences per operation over the phase.
//! 2. **Latency**: every call is bracketed by two `Instant::now()` reads (as in the
//!    `realtime` suite; each figure includes about one clock read, `clock_read`), recorded in
//!    HDR histograms (3 significant digits) merged over the threads.
//!
//! **Recovery** is measured in the 1-thread job only (it is single-threaded; a run at other
//! thread counts does not repeat it), for heaps that persist: a second pool of
//! [`recovery_objects`] live [`RECOVERY_OBJECT_SIZE`]-byte objects (1 Mi at Small and above,
//! 16 Ki at Tiny) is created and filled, closed, then opened again: `recovery_ms` is the
//! `open` (PMDK replays its logs there and rebuilds its heap lazily, so the first allocation
//! after the open, `recovery_first_alloc_ms`, is timed too). Every object is checked to have
//! survived (untimed).
//!
//! # Metrics
//!
//! | metric | unit | |
//! |---|---|---|
//! | `ops_per_s` | pairs/s | alloc+free pairs per second, all threads (higher is better) |
//! | `alloc_p50`, `alloc_p99`, `alloc_p99.9` | ns | `alloc_into` latency |
//! | `free_p50`, `free_p99`, `free_p99.9` | ns | `free_from` latency |
//! | `flushes_per_op` | lines/op | cache lines flushed per `alloc_into` or `free_from` (heaps that count) |
//! | `fences_per_op` | fences/op | fences per `alloc_into` or `free_from` (heaps that count) |
//! | `recovery_ms` | ms | `open` of a pool of 1 Mi live objects (1 thread, durable heaps) |
//! | `recovery_first_alloc_ms` | ms | the first `alloc_into` after that `open` |
//!
//! plus `clock_read` and `timer_overhead`, as every workload that times single calls.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::cpu::common::{self, Table};
use super::realtime::{latency_histogram, nanos_between, shortest_ns, timer_samples};
use super::{Params, Scale, ScratchPool, WorkloadInfo};
use crate::measure;
use crate::peers::Capability;
use alloclab_core::PersistentAllocator;

use crate::pmem::{PersistStats, PersistentHeapTask, Slots, with_persistent_heap};
use crate::results::{Sample, sample};

/// Smallest object.
pub const MIN_SIZE: usize = 64;
/// Largest object.
pub const MAX_SIZE: usize = 4096;
/// Slots (live objects) per thread.
pub const SLOTS_PER_THREAD: usize = 1024;
/// Steps (alloc+free pairs) per thread and phase at [`Scale::Small`].
pub const STEPS: u64 = 1 << 16;
/// Size of the pool of the throughput and latency phases (PMDK needs at least 8 MiB).
pub const POOL_BYTES: usize = 128 << 20;
/// Size of each object of the recovery pool.
pub const RECOVERY_OBJECT_SIZE: usize = 64;
/// Live objects in the recovery pool at Small and above.
pub const RECOVERY_OBJECTS: usize = 1 << 20;
/// Directory for the pools instead of `/dev/shm`.
pub const POOL_DIR_ENV: &str = "ALLOCLAB_PMEM_DIR";

/// The registry entries of the `pmem` suite.
pub const WORKLOADS: &[WorkloadInfo] = &[
    WorkloadInfo {
        suite: "pmem",
        name: "pmem-flush",
        description: "persistent alloc+free of 64 B-4 KiB objects with real flushes (PMEM_IS_PMEM_FORCE=1): ops/s, latency, flushes and fences/op, recovery of 1 Mi objects",
        requires: Capability::PersistentHeap,
        default_threads: one_and_two,
    },
    WorkloadInfo {
        suite: "pmem",
        name: "pmem-eadr",
        description: "the same with PMEM_NO_FLUSH=1 too (eADR: fences, no flushes)",
        requires: Capability::PersistentHeap,
        default_threads: one_and_two,
    },
];

/// The suite's default: 1 and 2 threads, whatever the machine.
pub fn one_and_two(_cores: usize) -> Vec<usize> {
    vec![1, 2]
}

/// How libpmem makes stores durable in a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// `PMEM_IS_PMEM_FORCE=1`, `PMEM_NO_FLUSH=0`: cache-line flushes and fences.
    Flush,
    /// `PMEM_IS_PMEM_FORCE=1`, `PMEM_NO_FLUSH=1`: fences only.
    Eadr,
}

impl Persistence {
    /// The persistence of the `pmem` workload `name`.
    pub fn of_workload(name: &str) -> Option<Self> {
        match name {
            "pmem-flush" => Some(Self::Flush),
            "pmem-eadr" => Some(Self::Eadr),
            _ => None,
        }
    }

    /// The libpmem environment variables of this setting.
    pub fn environment(self) -> [(&'static str, &'static str); 2] {
        let no_flush = match self {
            Self::Flush => "0",
            Self::Eadr => "1",
        };
        [("PMEM_IS_PMEM_FORCE", "1"), ("PMEM_NO_FLUSH", no_flush)]
    }

    /// Whether this process's environment is this setting's.
    pub fn is_set(self) -> bool {
        self.environment()
            .iter()
            .all(|(k, v)| std::env::var(k).is_ok_and(|x| x == *v))
    }
}

/// Whether `name` is a workload of this suite.
pub fn is_pmem_workload(name: &str) -> bool {
    Persistence::of_workload(name).is_some()
}

/// Whether a library is already loaded in this process (`RTLD_NOLOAD`).
fn is_loaded(soname: &std::ffi::CStr) -> bool {
    // SAFETY: a NUL-terminated name; RTLD_NOLOAD loads nothing and runs no initializer.
    let handle = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return false;
    }
    // SAFETY: the handle `dlopen` just returned (a reference count it took).
    unsafe { libc::dlclose(handle) };
    true
}

/// Sets the libpmem environment of the `pmem` workload `workload` (and of every `storage`
/// workload: [`Persistence::Flush`]; nothing for other workloads), before anything loads libpmem, which reads it once when it loads.
///
/// # Safety
///
/// No other thread may read or write the environment meanwhile (Rust 2024's
/// `std::env::set_var` contract): call it from a single-threaded process, as the worker's
/// `main` is before it runs the workload.
///
/// # Errors
///
/// libpmem or libpmemobj is already loaded in this process, so the setting would not take.
pub unsafe fn prepare_process(workload: &str) -> Result<(), String> {
    // The `storage` suite flushes for real, as `pmem-flush` does.
    let persistence = Persistence::of_workload(workload)
        .or_else(|| super::storage::is_storage_workload(workload).then_some(Persistence::Flush));
    let Some(persistence) = persistence else {
        return Ok(());
    };
    for soname in [c"libpmem.so.1", c"libpmemobj.so.1"] {
        if is_loaded(soname) {
            return Err(format!(
                "{} is already loaded: the environment of {workload} must be set before",
                soname.to_string_lossy()
            ));
        }
    }
    for (key, value) in persistence.environment() {
        // SAFETY: no other thread touches the environment (the caller's contract).
        unsafe { std::env::set_var(key, value) };
    }
    Ok(())
}

/// Runs `workload` on the slot heap `allocator` and returns its samples.
///
/// # Errors
///
/// A one-line message: unknown names, the heap unavailable, the environment not set by
/// [`prepare_process`], a heap operation failing, or an object lost across recovery.
pub fn run(workload: &str, allocator: &str, params: &Params) -> Result<Vec<Sample>, String> {
    let persistence = Persistence::of_workload(workload)
        .ok_or_else(|| format!("'{workload}' is not a pmem workload"))?;
    if !persistence.is_set() {
        let wanted: Vec<String> = persistence
            .environment()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        return Err(format!(
            "{workload} needs {} set before libpmem loads (alloclab's worker sets it)",
            wanted.join(" ")
        ));
    }
    let task = Measure {
        params: *params,
        dir: pool_dir(),
    };
    let report = with_persistent_heap(allocator, task)
        .ok_or_else(|| format!("allocator '{allocator}' is not a persistent heap"))?
        .map_err(|e| format!("{workload} on {allocator}: {e}"))?;
    Ok(report.samples(measure::timer_overhead_ns()))
}

/// Where pools are created: `$ALLOCLAB_PMEM_DIR`, else `/dev/shm`, else the temporary
/// directory.
pub fn pool_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(POOL_DIR_ENV) {
        return PathBuf::from(dir);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Live objects of the recovery pool at `scale`.
pub fn recovery_objects(scale: Scale) -> usize {
    match scale {
        Scale::Tiny => RECOVERY_OBJECTS / 64,
        _ => RECOVERY_OBJECTS,
    }
}

struct Measure {
    params: Params,
    dir: PathBuf,
}

impl PersistentHeapTask for Measure {
    type Output = Result<Report, String>;
    fn run<H: PersistentAllocator>(self, name: &'static str) -> Result<Report, String> {
        measure::<H>(name, &self.params, &self.dir)
    }
}

/// What one run measured.
#[derive(Debug)]
pub struct Report {
    /// Threads.
    pub threads: usize,
    /// Alloc+free pairs of the throughput phase, all threads.
    pub pairs: u64,
    /// Wall time of the throughput phase.
    pub elapsed: Duration,
    /// The heap's counters over the throughput phase (heaps that count).
    pub persist: Option<PersistStats>,
    /// `alloc_into` latencies of the latency phase, ns.
    pub alloc: Histogram<u64>,
    /// `free_from` latencies of the latency phase, ns.
    pub free: Histogram<u64>,
    /// Every successful `alloc_into` of the run (fill included), all threads.
    pub allocations: u64,
    /// Every successful `free_from` of the run, all threads.
    pub frees: u64,
    /// Slots holding a block at the end of the run.
    pub live_after: u64,
    /// The recovery measurement, where taken.
    pub recovery: Option<Recovery>,
}

/// The recovery measurement.
#[derive(Clone, Copy, Debug)]
pub struct Recovery {
    /// Live objects in the pool.
    pub objects: usize,
    /// [`Slots::open`].
    pub open: Duration,
    /// The first `alloc_into` after the open.
    pub first_alloc: Duration,
}

impl Report {
    /// Operations (`alloc_into` or `free_from`) of the throughput phase.
    pub fn operations(&self) -> u64 {
        2 * self.pairs
    }

    /// The metrics of the [module documentation](self); `clock_read_ns` is the calibrated
    /// cost of one clock read.
    pub fn samples(&self, clock_read_ns: f64) -> Vec<Sample> {
        let seconds = self.elapsed.as_secs_f64().max(1e-9);
        let mut out = vec![sample(
            "ops_per_s",
            "pairs/s",
            self.pairs as f64 / seconds,
            false,
        )];
        for (kind, histogram) in [("alloc", &self.alloc), ("free", &self.free)] {
            for (suffix, quantile) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
                out.push(sample(
                    &format!("{kind}_{suffix}"),
                    "ns",
                    histogram.value_at_quantile(quantile) as f64,
                    true,
                ));
            }
        }
        if let Some(stats) = self.persist {
            let ops = self.operations().max(1) as f64;
            out.push(sample(
                "flushes_per_op",
                "lines/op",
                stats.lines_flushed as f64 / ops,
                true,
            ));
            out.push(sample(
                "fences_per_op",
                "fences/op",
                stats.fences as f64 / ops,
                true,
            ));
        }
        if let Some(r) = self.recovery {
            out.push(sample(
                "recovery_ms",
                "ms",
                r.open.as_secs_f64() * 1e3,
                true,
            ));
            out.push(sample(
                "recovery_first_alloc_ms",
                "ms",
                r.first_alloc.as_secs_f64() * 1e3,
                true,
            ));
        }
        out.extend(timer_samples(
            clock_read_ns,
            shortest_ns(&[&self.alloc, &self.free]),
        ));
        out
    }
}

/// Per-thread tables of one phase.
struct Steps {
    base: usize,
    picks: Table<u32>,
    sizes: Table<u32>,
    allocations: u64,
    frees: u64,
    alloc: Histogram<u64>,
    free: Histogram<u64>,
}

impl Steps {
    /// Thread `i`'s tables for phase `phase` (distinct streams per phase, the same for every
    /// heap).
    fn new(params: &Params, i: usize, phase: u64) -> Self {
        let mut rng = common::rng(params.seed ^ phase.wrapping_mul(0xD1B5_4A32_D192_ED03), i);
        // Coprime lengths: the (slot, size) sequence does not repeat within a phase.
        let picks = common::indices(8191, &mut rng, SLOTS_PER_THREAD);
        let sizes = Table::new(8192, &mut rng, |r| {
            common::log_uniform_size(r, MIN_SIZE, MAX_SIZE) as u32
        });
        Self {
            base: i * SLOTS_PER_THREAD,
            picks,
            sizes,
            allocations: 0,
            frees: 0,
            alloc: latency_histogram(),
            free: latency_histogram(),
        }
    }

    /// One step: free a random slot of ours and allocate a new size into it; timed per call
    /// when `timed`.
    #[inline]
    fn step<H: PersistentAllocator>(&mut self, heap: &Slots<H>, timed: bool) -> Result<(), String> {
        let slot = self.base + self.picks.next() as usize;
        let size = self.sizes.next() as usize;
        if timed {
            let t0 = Instant::now();
            let freed = heap.free_from(slot);
            let t1 = Instant::now();
            freed?;
            self.free.saturating_record(nanos_between(t0, t1));
            let t0 = Instant::now();
            let allocated = heap.alloc_into(slot, size);
            let t1 = Instant::now();
            allocated?;
            self.alloc.saturating_record(nanos_between(t0, t1));
        } else {
            heap.free_from(slot)?;
            heap.alloc_into(slot, size)?;
        }
        self.frees += 1;
        self.allocations += 1;
        Ok(())
    }
}

/// What the threads of a phase hand back.
#[derive(Default)]
struct Collected {
    error: Option<String>,
    allocations: u64,
    frees: u64,
    alloc: Option<Histogram<u64>>,
    free: Option<Histogram<u64>>,
}

impl Collected {
    fn add(&mut self, result: Result<Steps, (Steps, String)>) {
        let steps = match result {
            Ok(s) => s,
            Err((s, e)) => {
                self.error.get_or_insert(e);
                s
            }
        };
        self.allocations += steps.allocations;
        self.frees += steps.frees;
        match &mut self.alloc {
            Some(h) => h.add(&steps.alloc).expect("same bounds"),
            None => self.alloc = Some(steps.alloc),
        }
        match &mut self.free {
            Some(h) => h.add(&steps.free).expect("same bounds"),
            None => self.free = Some(steps.free),
        }
    }
}

/// Runs one phase of `steps` steps per thread on `heap` (see the module docs).
fn phase<H: PersistentAllocator>(
    heap: &Slots<H>,
    params: &Params,
    phase_id: u64,
    steps: u64,
    timed: bool,
) -> (Duration, Collected) {
    let collected = Mutex::new(Collected::default());
    let m = common::run_timed(
        params.threads,
        |i| Steps::new(params, i, phase_id),
        |_, mut s| {
            let mut result = Ok(());
            for _ in 0..steps {
                result = s.step(heap, timed);
                if result.is_err() {
                    break;
                }
            }
            let ops = 2 * s.frees;
            let handed = match result {
                Ok(()) => Ok(s),
                Err(e) => Err((s, e)),
            };
            collected
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .add(handed);
            ops
        },
    );
    (
        m.elapsed,
        collected.into_inner().unwrap_or_else(|e| e.into_inner()),
    )
}

/// Runs the whole workload once on a fresh pool of heap type `H` in `dir`.
///
/// # Errors
///
/// A heap operation fails, or an object is lost across recovery.
/// `name` is the heap's registered name (for error messages).
pub fn measure<H: PersistentAllocator>(
    name: &'static str,
    params: &Params,
    dir: &Path,
) -> Result<Report, String> {
    H::available()?;
    let threads = params.threads.max(1);
    let slots = threads * SLOTS_PER_THREAD;
    let file = ScratchPool::new(dir, "pmem", "steady");
    let heap = Slots::<H>::create(name, &file.0, POOL_BYTES, slots)?;

    // Fill every thread's slots, untimed.
    let fill = Mutex::new(Collected::default());
    common::run_timed(
        threads,
        |i| Steps::new(params, i, 0),
        |_, mut s| {
            let mut result = Ok(());
            for k in 0..SLOTS_PER_THREAD {
                result = heap.alloc_into(s.base + k, s.sizes.next() as usize);
                if result.is_err() {
                    break;
                }
                s.allocations += 1;
            }
            let ops = s.allocations;
            let handed = match result {
                Ok(()) => Ok(s),
                Err(e) => Err((s, e)),
            };
            fill.lock().unwrap_or_else(|e| e.into_inner()).add(handed);
            ops
        },
    );
    let fill = fill.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = fill.error {
        return Err(format!("filling the slots: {e}"));
    }

    let steps = params.scale.scaled(STEPS);
    let before = heap.persist_counts();
    let (elapsed, throughput) = phase(&heap, params, 1, steps, false);
    let after = heap.persist_counts();
    if let Some(e) = throughput.error {
        return Err(e);
    }
    let (_, latency) = phase(&heap, params, 2, steps, true);
    if let Some(e) = &latency.error {
        return Err(e.clone());
    }
    let mut live_after = 0;
    for slot in 0..heap.slots() {
        live_after += u64::from(heap.is_live(slot)?);
    }
    drop(heap);
    drop(file);

    let recovery = if H::DURABLE && threads == 1 {
        Some(recovery::<H>(name, recovery_objects(params.scale), dir)?)
    } else {
        None
    };
    Ok(Report {
        threads,
        pairs: throughput.frees,
        elapsed,
        persist: before.zip(after).map(|(b, a)| a.since(&b)),
        alloc: latency.alloc.unwrap_or_else(latency_histogram),
        free: latency.free.unwrap_or_else(latency_histogram),
        allocations: fill.allocations + throughput.allocations + latency.allocations,
        frees: throughput.frees + latency.frees,
        live_after,
        recovery,
    })
}

/// Pool size for `objects` live small objects and their slots: generous (PMDK rounds a
/// 64-byte object with its header up to 128 bytes), at least [`POOL_BYTES`].
pub fn recovery_pool_bytes(objects: usize) -> usize {
    (objects * 4 * RECOVERY_OBJECT_SIZE + objects * 16 + (32 << 20)).max(POOL_BYTES)
}

/// Creates a pool of `objects` live objects, closes it, and times its `open` and the first
/// allocation after; checks that every object survived.
fn recovery<H: PersistentAllocator>(
    name: &'static str,
    objects: usize,
    dir: &Path,
) -> Result<Recovery, String> {
    let file = ScratchPool::new(dir, "pmem", "recovery");
    let heap = Slots::<H>::create(name, &file.0, recovery_pool_bytes(objects), objects + 1)?;
    for slot in 0..objects {
        heap.alloc_into(slot, RECOVERY_OBJECT_SIZE)?;
    }
    drop(heap);
    let t0 = Instant::now();
    let heap = Slots::<H>::open(name, &file.0)?;
    let open = t0.elapsed();
    let t0 = Instant::now();
    heap.alloc_into(objects, RECOVERY_OBJECT_SIZE)?;
    let first_alloc = t0.elapsed();
    let mut live = 0usize;
    for slot in 0..heap.slots() {
        live += usize::from(heap.is_live(slot)?);
    }
    if heap.slots() != objects + 1 || live != objects + 1 {
        return Err(format!(
            "recovery lost objects: {live} live of {} after reopening a pool of {objects} (+1 allocated after), {} slots",
            objects + 1,
            heap.slots()
        ));
    }
    Ok(Recovery {
        objects,
        open,
        first_alloc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmem::{DramHeap, PmdkHeap};
    use crate::report::{CLOCK_READ_METRIC, TIMER_OVERHEAD_METRIC};
    use alloclab_core::{AllocError, Allocator, PersistentError, Stats};
    use std::alloc::Layout;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn tiny(threads: usize) -> Params {
        Params {
            threads,
            scale: Scale::Tiny,
            seed: 7,
        }
    }

    fn metrics(samples: &[Sample]) -> Vec<&str> {
        samples.iter().map(|s| s.metric.as_str()).collect()
    }

    #[test]
    fn with_dram_live_slots_are_allocations_minus_frees_at_one_and_two_threads() {
        for threads in [1, 2] {
            let report = measure::<DramHeap>("dram", &tiny(threads), &pool_dir()).unwrap();
            let steps = Scale::Tiny.scaled(STEPS);
            let slots = (threads * SLOTS_PER_THREAD) as u64;
            assert_eq!(report.pairs, steps * threads as u64);
            assert_eq!(report.frees, 2 * steps * threads as u64);
            assert_eq!(report.allocations, slots + report.frees);
            assert_eq!(report.live_after, report.allocations - report.frees);
            assert_eq!(report.live_after, slots);
            assert_eq!(report.alloc.len(), steps * threads as u64);
            assert_eq!(report.free.len(), steps * threads as u64);
            assert!(report.persist.is_none());
            assert!(report.recovery.is_none(), "dram has nothing to recover");
            let samples = report.samples(20.0);
            assert_eq!(
                metrics(&samples),
                [
                    "ops_per_s",
                    "alloc_p50",
                    "alloc_p99",
                    "alloc_p99.9",
                    "free_p50",
                    "free_p99",
                    "free_p99.9",
                    CLOCK_READ_METRIC,
                    TIMER_OVERHEAD_METRIC
                ]
            );
            assert!(samples[0].value > 0.0 && !samples[0].lower_is_better);
            for pair in samples[1..4].windows(2) {
                assert!(pair[0].value <= pair[1].value, "{pair:?}");
            }
        }
    }

    /// The DRAM heap, counting a flush (of two lines, 128 bytes) and a fence per
    /// `allocate_into` / `free_from` (to check the per-op arithmetic), and refusing
    /// allocations above `FAIL_ABOVE` bytes (to check how an error reaches the report).
    struct Instrumented<const FAIL_ABOVE: usize> {
        inner: DramHeap,
        calls: AtomicU64,
    }

    impl<const FAIL_ABOVE: usize> Allocator for Instrumented<FAIL_ABOVE> {
        type Handle = u64;
        fn allocate(&self, layout: Layout) -> Result<u64, AllocError> {
            self.inner.allocate(layout)
        }
        unsafe fn deallocate(&self, handle: u64, layout: Layout) {
            // SAFETY: the caller's contract, forwarded.
            unsafe { self.inner.deallocate(handle, layout) }
        }
        fn name(&self) -> &str {
            "instrumented"
        }
        fn stats(&self) -> Stats {
            self.inner.stats()
        }
    }

    impl<const FAIL_ABOVE: usize> PersistentAllocator for Instrumented<FAIL_ABOVE> {
        const DURABLE: bool = false;
        fn create(path: &Path, pool_bytes: usize, root: usize) -> Result<Self, PersistentError> {
            Ok(Self {
                inner: DramHeap::create(path, pool_bytes, root)?,
                calls: AtomicU64::new(0),
            })
        }
        fn open(_path: &Path) -> Result<Self, PersistentError> {
            Err(PersistentError::new("not durable"))
        }
        fn root(&self) -> *mut u8 {
            self.inner.root()
        }
        fn root_size(&self) -> usize {
            self.inner.root_size()
        }
        fn at(&self, off: u64) -> *mut u8 {
            self.inner.at(off)
        }
        fn offset_of(&self, p: *const u8) -> u64 {
            self.inner.offset_of(p)
        }
        fn allocate_unlinked(&self, size: usize) -> Result<u64, PersistentError> {
            self.inner.allocate_unlinked(size)
        }
        unsafe fn release(&self, off: u64) -> Result<(), PersistentError> {
            // SAFETY: the caller's contract, forwarded.
            unsafe { self.inner.release(off) }
        }
        unsafe fn allocate_into(
            &self,
            dest: *mut u64,
            size: usize,
        ) -> Result<u64, PersistentError> {
            if size > FAIL_ABOVE {
                return Err(PersistentError::new("out of space"));
            }
            self.calls.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the caller's contract, forwarded.
            unsafe { self.inner.allocate_into(dest, size) }
        }
        unsafe fn free_from(&self, dest: *mut u64) -> Result<(), PersistentError> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the caller's contract, forwarded.
            unsafe { self.inner.free_from(dest) }
        }
        fn flush(&self, p: *const u8, len: usize) {
            self.inner.flush(p, len);
        }
        fn fence(&self) {
            self.inner.fence();
        }
        fn persist_counts(&self) -> Option<PersistStats> {
            let calls = self.calls.load(Ordering::Relaxed);
            Some(PersistStats {
                lines_flushed: 2 * calls,
                flushes: calls,
                fences: calls,
                bytes_flushed: 128 * calls,
            })
        }
    }

    #[test]
    fn flushes_and_fences_per_op_count_the_throughput_phase_only() {
        let report =
            measure::<Instrumented<{ usize::MAX }>>("counting", &tiny(2), &pool_dir()).unwrap();
        let samples = report.samples(20.0);
        let value = |m: &str| samples.iter().find(|s| s.metric == m).unwrap().value;
        assert_eq!(value("flushes_per_op"), 2.0);
        assert_eq!(value("fences_per_op"), 1.0);
    }

    #[test]
    fn a_heap_error_is_a_one_line_message_not_a_panic() {
        let err = measure::<Instrumented<2048>>("failing", &tiny(2), &pool_dir()).unwrap_err();
        assert!(err.contains("out of space") && !err.contains('\n'), "{err}");
    }

    #[test]
    fn the_environment_is_checked_and_names_are_refused() {
        // The test process never sets the variables (that is the worker's job).
        if !Persistence::Flush.is_set() {
            let err = run("pmem-flush", "dram", &tiny(1)).unwrap_err();
            assert!(
                err.contains("PMEM_IS_PMEM_FORCE=1 PMEM_NO_FLUSH=0"),
                "{err}"
            );
        }
        assert!(
            run("larson", "dram", &tiny(1))
                .unwrap_err()
                .contains("not a pmem")
        );
        assert_eq!(
            Persistence::of_workload("pmem-eadr"),
            Some(Persistence::Eadr)
        );
        assert!(WORKLOADS.iter().all(|w| is_pmem_workload(w.name)));
    }

    #[test]
    fn pmdk_runs_the_workload_and_recovers_every_object() {
        if let Err(reason) = PmdkHeap::available() {
            eprintln!("SKIPPED pmdk_runs_the_workload_and_recovers_every_object: {reason}");
            return;
        }
        // Without PMEM_IS_PMEM_FORCE, PMDK flushes /dev/shm with msync: slow but correct,
        // which is all this checks (the timed figures come from the worker).
        let report = measure::<PmdkHeap>("pmdk", &tiny(1), &pool_dir()).unwrap();
        assert_eq!(report.live_after, SLOTS_PER_THREAD as u64);
        assert_eq!(report.live_after, report.allocations - report.frees);
        let recovery = report.recovery.expect("pmdk is durable");
        assert_eq!(recovery.objects, recovery_objects(Scale::Tiny));
        let samples = report.samples(20.0);
        let names = metrics(&samples);
        assert!(names.contains(&"recovery_ms") && names.contains(&"recovery_first_alloc_ms"));
        assert!(!names.contains(&"flushes_per_op"), "PMDK does not count");
    }
}
