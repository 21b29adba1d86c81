//! The `realtime` suite: how long one allocation and one free take, in the tail.
//!
//! A real-time program cares about its worst operation, not its average one. The suite's one
//! workload, `latency`, times every allocation and every free on its own and reports the
//! distribution of each (an HDR histogram: p50, p99, p99.9, p99.99, p99.999 and max), with
//! more threads than cores by default (1×, 2× and 4× the logical cores), random sizes, and a
//! fifth of the frees done by another thread.
//!
//! # The workload
//!
//! Each thread keeps a working set of [`WORKING_SET`] live blocks of random sizes, 16 B to
//! 16 KiB, log-uniform (half of them 512 B or less, as in the `cpu` suite's rptest), filled
//! before the clock starts. A step picks a random slot, frees its block and allocates a new
//! one of a random size in its place. With probability 1/5 ([`REMOTE_FREE_PERCENT`]) the old
//! block is not freed by this thread but handed to the next thread (`i + 1 mod n`), which
//! frees it; every [`STEPS_PER_ROUND`] steps a thread passes the blocks it collected and
//! frees the batch its predecessor passed it, over the `cpu` suite's bounded ring (a thread
//! may run [`DEPTH`] rounds ahead of its predecessor). With one thread the hand-over goes to
//! the thread itself: a delayed free, not a remote one. Each new block has its first and
//! last byte written, after its allocation has been timed. Sizes, slots and the remote
//! choices come from tables drawn from the run's seed before the clock starts, so every
//! allocator sees the same requests.
//!
//! **Warm-up.** A thread's first `scale.scaled(`[`WARM_UP_ROUNDS`]`)` rounds (an eighth as
//! many as the timed ones) run exactly like the others, clock reads included, but their
//! records are dropped. Filling the working set
//! does not bring a heap to its steady state: the churn — random sizes replacing each other,
//! remote frees — makes every heap grow for a while after the fill, and that growth is a
//! start-up transient (page faults on fresh memory, arenas, caches being sized) whose share
//! of the tail would otherwise depend on the scale of the run. Measured at the small scale
//! with 8 threads, the allocations that faulted after the fill were, for wfspan and
//! jemalloc, mostly within a thread's first 16 Ki allocations; those of mimalloc and the
//! system heap kept coming to the end, as they return memory and take it back (steady-state
//! behaviour, which the warm-up leaves in the figures). Every allocator runs the same
//! warm-up.
//!
//! # What is timed, and how
//!
//! Every call is bracketed by two `std::time::Instant::now()` reads (the clock the harness
//! calibrates): `allocate` alone (not the touch of the block), `deallocate` alone. The
//! difference, in nanoseconds, goes into the thread's histogram of allocations or of frees
//! (remote frees are frees: they go into the freeing thread's free histogram, and also into
//! a histogram of remote frees). Histograms keep 3 significant digits (each figure is within
//! 0.1% of the value recorded, rounded up; `max` too) and saturate at [`HIGHEST_NS`]; they
//! are merged over the threads at the end.
//!
//! * **Timer overhead is inside every figure, and not subtracted.** Two reads around an
//!   empty region measure about one clock read, so each latency is the call plus roughly
//!   `clock_read` ns, the calibrated cost of one read that the worker reports beside the
//!   figures. `timer_overhead` (2 × clock read / shortest sample, in %) is therefore large
//!   here, by design; the report lists it but does not warn about it for this suite.
//! * **The tail includes the scheduler.** By default the threads run under the system's
//!   time-sharing policy, and with more threads than cores a thread can be descheduled in
//!   the middle of a call so that a peer gets its turn; that call then lasts until the
//!   thread's turn comes back. That is part of what the suite measures: a lock-based
//!   allocator also makes every thread that wants the lock wait for a descheduled holder, a
//!   wait-free one does not; a wait-free allocator still cannot prevent its own thread's
//!   preemption. It also decides the extreme figures at 2x and 4x. At 4x on a 2-core
//!   machine (8 threads, small scale, `examples/rt_probe`, a loaded machine) 26 to 100
//!   allocations and 25 to 141 frees a run took longer than 50 µs (wfspan, jemalloc and
//!   mimalloc alike, two runs each), nearly all of them
//!   switched out for a peer or held up by an interrupt or the hypervisor (its
//!   `ATTRIBUTE_SLOW_NS` mode), against 42 samples above p99.999 (8 × 2^19 calls): p99.999
//!   and `max` there are mostly the length of those interruptions, and move from run to
//!   run more than between the faster allocators. The lower percentiles show the
//!   allocator's own work.
//! * **Real-time scheduling, on request.** With `--sched fifo` each worker process puts its
//!   threads under `SCHED_FIFO` at priority 1 ([`Sched::enter`]), as real-time programs run
//!   (the paper's prototype was measured at real-time priority). A `SCHED_FIFO` thread is
//!   not time-sliced against its peers: it keeps its core until it blocks (here: waiting
//!   for its predecessor's batch, between two steps, untimed), so a call's latency is the
//!   allocator's work plus interrupts and what the allocator itself waits for (a lock whose
//!   holder is off-core, a page fault, a system call). Without the privilege
//!   (`CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of at least 1; root has it) the threads stay
//!   under the default policy, with a note. The `sched_fifo` figure (the share of a run's
//!   threads that ran under `SCHED_FIFO`, 1 or 0) and the report say which policy each run
//!   had. The kernel lets real-time threads take 95% of each second (`sched_rt_runtime_us`
//!   / `sched_rt_period_us`) and stops them for the rest once they have: that pause (50 ms)
//!   lands inside whatever call is running. A core's use beyond the budget is paid back one
//!   budget a period, so the runner waits after each `SCHED_FIFO` run one period more than
//!   the run's length in budgets ([`Sched::rt_pause`]): the next run, whichever allocator's,
//!   starts with the whole budget. A run longer than the budget is still stopped once: at
//!   the small scale and 4x on a 2-core machine wfspan, jemalloc and mimalloc runs take
//!   about 0.7 s, but slower allocators' take longer, and their `max` then includes the
//!   pause.
//! * **Blocking between steps is not timed.** A thread waiting for its predecessor's batch
//!   waits between two steps.
//!
//! # How many operations
//!
//! `scale.scaled(`[`ROUNDS`]`)` timed rounds of [`STEPS_PER_ROUND`] steps per thread (after
//! the warm-up's eighth as many): at Small,
//! 2^19 = 524 288 allocations and as many frees per thread, 2^20 (just over a million)
//! operations in all (1/64 of that at Tiny). The merged histogram of `n` threads holds
//! `n × 2^19` samples of each kind, and p99.999 is the value that all but `n × 5.2` of them
//! are at or below: the 11th largest allocation at 2 threads, the 42nd largest at 8 (the 6th
//! largest on a one-core machine at 1×). So p99.999 is a tail percentile and not the maximum
//! under another name, though a handful of events decide it; p99.99 rests on ten times as
//! many. `max` is the single worst call of the run and varies from run to run (see its
//! min–max over the runs); use a larger `--scale` for steadier tails. The count is what fits
//! the time budget: at Small the whole suite (5 allocators × 3 thread counts × 5 runs) takes
//! about two minutes on a 2-core machine, most of it at 4× oversubscription.
//!
//! # Metrics
//!
//! All `lower_is_better`: `alloc_p50`, `alloc_p99`, `alloc_p99.9`, `alloc_p99.99`,
//! `alloc_p99.999`, `alloc_max` and the same for `free_` (ns); `remote_free_p99.999` and
//! `remote_free_max` (ns, the remote frees alone); `alloc_max_steps` and `free_max_steps`
//! (steps, the allocator's own counters after the run, whole worker process) only where the
//! allocator's [`Stats`] tracks them; `sched_fifo` (the share of the run's threads that ran
//! under `SCHED_FIFO`: 1 or 0; it qualifies the others and is reported as a note). The worker
//! adds `peak_footprint`, `clock_read` and `timer_overhead`.

use core::mem;
use core::time::Duration;
use std::sync::Mutex;
use std::time::Instant;

use alloclab_core::{HostAllocator, Stats};
use hdrhistogram::Histogram;
use rand::Rng;

use super::cpu::common::{self, Block, Ring, RingEnd, Table};
use super::{Outcome, Params, WorkloadInfo};
use crate::peers::Capability;
use crate::report::{CLOCK_READ_METRIC, SCHED_FIFO_METRIC, TIMER_OVERHEAD_METRIC};
use crate::results::{Sample, sample};

/// Live blocks per thread.
pub const WORKING_SET: usize = 1024;
/// Smallest block.
pub const MIN_SIZE: usize = 16;
/// Largest block.
pub const MAX_SIZE: usize = 16 * 1024;
/// Share of frees handed to the next thread, in percent.
pub const REMOTE_FREE_PERCENT: u32 = 20;
/// Steps between two hand-overs of a thread's collected remote frees.
pub const STEPS_PER_ROUND: u64 = 64;
/// Rounds a thread may be ahead of its predecessor.
pub const DEPTH: usize = 4;
/// Rounds per thread at [`Scale::Small`](crate::workloads::Scale::Small): 2^19 steps.
pub const ROUNDS: u64 = 1 << 13;
/// Untimed rounds per thread before the timed ones at
/// [`Scale::Small`](crate::workloads::Scale::Small) (scaled like [`ROUNDS`]): 2^16 steps,
/// past the heaps' start-up growth (see the module documentation).
pub const WARM_UP_ROUNDS: u64 = ROUNDS / 8;
/// Largest latency a histogram tells apart (60 s); longer ones are recorded as this.
pub const HIGHEST_NS: u64 = 60_000_000_000;
/// Significant digits of every histogram.
const SIGNIFICANT_DIGITS: u8 = 3;

/// The scheduling policy the suite's worker processes run their threads under; see the
/// module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sched {
    /// `SCHED_FIFO` at priority 1, where the process may use it; else the default policy.
    #[default]
    Fifo,
    /// The default time-sharing policy (`SCHED_OTHER`).
    Other,
}

impl Sched {
    /// The name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fifo => "fifo",
            Self::Other => "other",
        }
    }

    /// Puts the calling thread (and the threads it spawns from now on, which inherit its
    /// policy) under this policy. `Other` changes nothing.
    ///
    /// # Errors
    ///
    /// The OS error if the process may not use `SCHED_FIFO` (`EPERM` without
    /// `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of at least 1); the thread's policy is then
    /// unchanged.
    pub fn enter(self) -> std::io::Result<()> {
        if self == Self::Other {
            return Ok(());
        }
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: `param` is a valid `sched_param`; pid 0 is the calling thread.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Whether the calling thread runs under `SCHED_FIFO`.
    pub fn current_is_fifo() -> bool {
        // SAFETY: no preconditions; pid 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) == libc::SCHED_FIFO }
    }

    /// How long to wait after a `SCHED_FIFO` run that took `run` (wall time) before the next
    /// one, so that it does not start with the kernel's real-time budget already spent: the
    /// budget is `sched_rt_runtime_us` of every `sched_rt_period_us`, a core's real-time use
    /// beyond it is paid back one budget a period, and a run used at most `run` of each core.
    /// So `period × (1 + ⌊run / runtime⌋)`; nothing where real-time threads are not limited
    /// (`sched_rt_runtime_us` of -1). Where the files cannot be read, Linux's defaults
    /// (0.95 s of every 1 s).
    pub fn rt_pause(run: Duration) -> Duration {
        let read = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
        };
        let period = read("sched_rt_period_us").unwrap_or(1_000_000);
        let runtime = read("sched_rt_runtime_us").unwrap_or(950_000);
        rt_pause_for(run, period, runtime)
    }
}

/// [`Sched::rt_pause`] for a period and a budget in µs (a budget below 0: unlimited).
fn rt_pause_for(run: Duration, period_us: i64, runtime_us: i64) -> Duration {
    if runtime_us < 0 || period_us <= 0 {
        return Duration::ZERO;
    }
    let periods = 1 + run.as_micros() / u128::try_from(runtime_us.max(1)).unwrap_or(1);
    let pause_us = u128::try_from(period_us).unwrap_or(0) * periods;
    Duration::from_micros(u64::try_from(pause_us).unwrap_or(u64::MAX))
}

impl core::fmt::Display for Sched {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::str::FromStr for Sched {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fifo" => Ok(Self::Fifo),
            "other" => Ok(Self::Other),
            _ => Err(format!(
                "unknown scheduling policy '{s}': expected fifo or other"
            )),
        }
    }
}

/// The suite's name.
pub const SUITE: &str = "realtime";

/// Runs per measurement when `--runs` is not given: each run times millions of calls (about
/// 2 s at 4x the cores on 2 cores), so three runs give a median and a spread while the
/// default suite stays within its time.
pub const DEFAULT_RUNS: u32 = 3;

/// The registry entries of the `realtime` suite.
pub const WORKLOADS: &[WorkloadInfo] = &[WorkloadInfo {
    suite: SUITE,
    name: "latency",
    description: "per-call alloc and free latency (p50 .. p99.999, max), random 16 B-16 KiB, 20% remote frees",
    requires: Capability::HostHeap,
    default_threads: super::oversubscribed,
}];

/// The workloads of the `realtime` suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RealtimeWorkload {
    /// Per-operation latency of allocation and free; see the module documentation.
    Latency,
}

impl RealtimeWorkload {
    /// Every workload of the suite, in registry order.
    pub const ALL: [RealtimeWorkload; 1] = [Self::Latency];

    /// The workload's registry name.
    pub fn name(self) -> &'static str {
        WORKLOADS[self as usize].name
    }

    /// Looks a workload up by registry name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == name)
    }

    /// Runs the workload once against `alloc` and reports its metrics, with the
    /// allocator's step counters read after the run.
    ///
    /// # Panics
    ///
    /// If the allocator fails an allocation.
    pub fn run<A: HostAllocator>(self, alloc: &A, params: &Params) -> Outcome {
        match self {
            Self::Latency => {
                let latencies = measure(alloc, params);
                Outcome {
                    samples: latencies.samples(&alloc.stats()),
                    min_sample: latencies.shortest(),
                    times_single_operations: true,
                }
            }
        }
    }
}

/// The latencies of one run, merged over its threads, in nanoseconds.
#[derive(Clone, Debug)]
pub struct Latencies {
    /// Every allocation.
    pub alloc: Histogram<u64>,
    /// Every free, local or remote.
    pub free: Histogram<u64>,
    /// The remote frees alone (also counted in `free`).
    pub remote_free: Histogram<u64>,
    /// Threads that ran under `SCHED_FIFO`, of `threads`.
    pub fifo_threads: usize,
    /// Threads whose latencies these are.
    pub threads: usize,
}

/// The percentiles reported, with their metric suffixes.
pub const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 0.5),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("p99.99", 0.9999),
    ("p99.999", 0.99999),
];

/// An empty histogram of single-call latencies, in ns, as every suite that times calls
/// one by one keeps them: 1 ns to [`HIGHEST_NS`], [`SIGNIFICANT_DIGITS`] digits.
pub(crate) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_NS, SIGNIFICANT_DIGITS).expect("valid histogram bounds")
}

/// The shortest call recorded in any of `histograms`, in ns (0 if all are empty): for the
/// timer-overhead figure.
pub(crate) fn shortest_ns(histograms: &[&Histogram<u64>]) -> u64 {
    histograms
        .iter()
        .filter(|h| !h.is_empty())
        .map(|h| h.min())
        .min()
        .unwrap_or(0)
}

/// The clock-read and timer-overhead samples of a workload that times single calls: the
/// clock read in ns, and two clock reads as a share of the shortest call timed (`shortest`
/// ns, at least 1).
pub(crate) fn timer_samples(clock_read_ns: f64, shortest: u64) -> [Sample; 2] {
    [
        sample(CLOCK_READ_METRIC, "ns", clock_read_ns, true),
        sample(
            TIMER_OVERHEAD_METRIC,
            "%",
            2.0 * clock_read_ns / shortest.max(1) as f64 * 100.0,
            true,
        ),
    ]
}

impl Latencies {
    fn new() -> Self {
        Self {
            alloc: latency_histogram(),
            free: latency_histogram(),
            remote_free: latency_histogram(),
            fifo_threads: 0,
            threads: 0,
        }
    }

    /// Forgets every latency recorded (the warm-up's).
    fn reset_records(&mut self) {
        self.alloc.reset();
        self.free.reset();
        self.remote_free.reset();
    }

    fn add(&mut self, other: &Self) {
        let same_bounds = "histograms of one run have the same bounds";
        self.alloc.add(&other.alloc).expect(same_bounds);
        self.free.add(&other.free).expect(same_bounds);
        self.remote_free.add(&other.remote_free).expect(same_bounds);
        self.fifo_threads += other.fifo_threads;
        self.threads += other.threads;
    }

    /// The shortest operation timed (for the timer-overhead figure).
    pub fn shortest(&self) -> Duration {
        Duration::from_nanos(shortest_ns(&[&self.alloc, &self.free]))
    }

    /// The metrics of the module documentation; `stats` are the allocator's
    /// counters after the run, and give the `_max_steps` metrics where they are tracked.
    pub fn samples(&self, stats: &Stats) -> Vec<Sample> {
        let mut samples = Vec::new();
        for (kind, histogram) in [("alloc", &self.alloc), ("free", &self.free)] {
            for (suffix, quantile) in PERCENTILES {
                samples.push(ns(
                    format!("{kind}_{suffix}"),
                    histogram.value_at_quantile(quantile),
                ));
            }
            samples.push(ns(format!("{kind}_max"), histogram.max()));
        }
        if !self.remote_free.is_empty() {
            samples.push(ns(
                "remote_free_p99.999".to_owned(),
                self.remote_free.value_at_quantile(0.99999),
            ));
            samples.push(ns("remote_free_max".to_owned(), self.remote_free.max()));
        }
        if self.threads > 0 {
            samples.push(Sample {
                metric: SCHED_FIFO_METRIC.to_owned(),
                unit: "share".to_owned(),
                value: self.fifo_threads as f64 / self.threads as f64,
                lower_is_better: false,
            });
        }
        for (metric, steps) in [
            ("alloc_max_steps", stats.max_alloc_steps),
            ("free_max_steps", stats.max_free_steps),
        ] {
            if let Some(steps) = steps {
                samples.push(Sample {
                    metric: metric.to_owned(),
                    unit: "steps".to_owned(),
                    value: steps as f64,
                    lower_is_better: true,
                });
            }
        }
        samples
    }
}

fn ns(metric: String, value: u64) -> Sample {
    Sample {
        metric,
        unit: "ns".to_owned(),
        value: value as f64,
        lower_is_better: true,
    }
}

/// What one thread works with.
struct Thread {
    ring: RingEnd<Vec<Block>>,
    slots: Vec<Option<Block>>,
    /// Blocks collected for the next thread this round.
    outgoing: Vec<Block>,
    picks: Table<u32>,
    sizes: Table<u32>,
    remote: Table<bool>,
    latencies: Latencies,
}

/// Runs the latency workload once and returns its histograms; see the
/// module documentation.
///
/// # Panics
///
/// If the allocator fails an allocation.
pub fn measure<A: HostAllocator>(alloc: &A, params: &Params) -> Latencies {
    let rounds = params.scale.scaled(ROUNDS);
    let warm_up_rounds = params.scale.scaled(WARM_UP_ROUNDS);
    let round_len = STEPS_PER_ROUND as usize;
    let ring = Ring::<Vec<Block>>::new(params.threads, DEPTH);
    let finished: Mutex<Vec<Latencies>> = Mutex::new(Vec::with_capacity(params.threads));
    common::run_timed(
        params.threads,
        |i| {
            // Joined first, so that if this thread fails its neighbours see it go.
            let mut ring = ring.join(i);
            ring.restock((0..DEPTH).map(|_| Vec::with_capacity(round_len)));
            let mut rng = common::rng(params.seed, i);
            // Coprime lengths (2^13, 2^13 - 1 and 4093, a prime): the combined sequence of
            // (slot, size, remote) does not repeat within a run.
            let picks = common::indices(8191, &mut rng, WORKING_SET);
            let sizes: Table<u32> = Table::new(8192, &mut rng, |r| {
                common::log_uniform_size(r, MIN_SIZE, MAX_SIZE) as u32
            });
            let remote = Table::new(4093, &mut rng, |r| r.random_ratio(REMOTE_FREE_PERCENT, 100));
            let mut sizes = sizes;
            let slots = (0..WORKING_SET)
                .map(|_| Some(Block::new(alloc, sizes.next() as usize, i as u8)))
                .collect();
            Thread {
                ring,
                slots,
                outgoing: Vec::with_capacity(round_len),
                picks,
                sizes,
                remote,
                latencies: Latencies {
                    fifo_threads: usize::from(Sched::current_is_fifo()),
                    threads: 1,
                    ..Latencies::new()
                },
            }
        },
        |i, mut t| {
            let tag = i as u8;
            for round in 0..warm_up_rounds + rounds {
                if round == warm_up_rounds {
                    // The warm-up ran the same code; only its records are dropped.
                    t.latencies.reset_records();
                }
                for _ in 0..STEPS_PER_ROUND {
                    let slot = &mut t.slots[t.picks.next() as usize];
                    let old = slot.take().expect("the working set is always full");
                    if t.remote.next() {
                        t.outgoing.push(old);
                    } else {
                        // SAFETY: every block of the working set came from `alloc`.
                        let ns = unsafe { timed_free(alloc, old) };
                        t.latencies.free.saturating_record(ns);
                    }
                    let size = t.sizes.next() as usize;
                    *slot = Some(timed_allocate(alloc, size, tag, &mut t.latencies.alloc));
                }
                let mut incoming = t.ring.next();
                // The batch taken in round `r` was passed in the predecessor's round
                // `r - DEPTH` (the first `DEPTH` are this thread's empty stock): those passed
                // in its warm-up are freed like the others, and not recorded.
                let recorded = round >= warm_up_rounds + DEPTH as u64;
                // SAFETY: every block in flight came from `alloc`.
                unsafe { free_remote(alloc, &mut incoming, &mut t.latencies, recorded) };
                let outgoing = mem::replace(&mut t.outgoing, incoming);
                t.ring.pass(outgoing);
            }
            for mut batch in t.ring.finish() {
                // SAFETY: as above.
                unsafe { free_remote(alloc, &mut batch, &mut t.latencies, true) };
            }
            // The working set was filled before the clock started; it is emptied untimed.
            for block in t.slots.into_iter().flatten() {
                // SAFETY: as above.
                unsafe { block.free(alloc) };
            }
            finished
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(t.latencies);
            2 * rounds * STEPS_PER_ROUND
        },
    );
    let mut merged = Latencies::new();
    for latencies in finished.into_inner().unwrap_or_else(|e| e.into_inner()) {
        merged.add(&latencies);
    }
    merged
}

/// Allocates and touches a `size`-byte block, recording how long `allocate` took.
#[inline]
fn timed_allocate<A: HostAllocator>(
    alloc: &A,
    size: usize,
    tag: u8,
    latencies: &mut Histogram<u64>,
) -> Block {
    let layout = common::layout(size);
    let start = Instant::now();
    let result = alloc.allocate(layout);
    let end = Instant::now();
    let ptr = result.unwrap_or_else(|e| panic!("{e}"));
    latencies.saturating_record(nanos_between(start, end));
    // SAFETY: the block was just allocated with `layout(size)` and is ours alone.
    unsafe {
        common::touch(ptr, size, tag);
        Block::from_raw(ptr, size)
    }
}

/// Frees `block` and returns how long `deallocate` took, in nanoseconds.
///
/// # Safety
///
/// `alloc` allocated `block`.
#[inline]
unsafe fn timed_free<A: HostAllocator>(alloc: &A, block: Block) -> u64 {
    let (ptr, size) = block.into_raw();
    let layout = common::layout(size);
    let start = Instant::now();
    // SAFETY: the block is live, owned by us alone, allocated by `alloc` (caller's promise)
    // with exactly `layout(size)`.
    unsafe { alloc.deallocate(ptr, layout) };
    let end = Instant::now();
    nanos_between(start, end)
}

/// Frees every block of a batch another thread handed over, each timed, as remote frees;
/// records the times if `recorded` (not for a batch passed during the warm-up).
///
/// # Safety
///
/// `alloc` allocated every block of `batch`.
unsafe fn free_remote<A: HostAllocator>(
    alloc: &A,
    batch: &mut Vec<Block>,
    latencies: &mut Latencies,
    recorded: bool,
) {
    for block in batch.drain(..) {
        // SAFETY: `alloc` allocated it (caller's promise).
        let ns = unsafe { timed_free(alloc, block) };
        if recorded {
            latencies.free.saturating_record(ns);
            latencies.remote_free.saturating_record(ns);
        }
    }
}

/// Nanoseconds from `start` to `end` (0 if `end` is earlier), saturating at `u64::MAX`.
pub(crate) fn nanos_between(start: Instant, end: Instant) -> u64 {
    u64::try_from(end.saturating_duration_since(start).as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use core::alloc::Layout;
    use core::ptr::NonNull;

    use alloclab_core::{AllocError, Allocator, Checked, Policy, SystemHeap};

    use super::*;
    use crate::workloads::Scale;

    fn tiny(threads: usize) -> Params {
        Params {
            threads,
            scale: Scale::Tiny,
            seed: 7,
        }
    }

    fn value(samples: &[Sample], metric: &str) -> Option<f64> {
        samples.iter().find(|s| s.metric == metric).map(|s| s.value)
    }

    #[test]
    fn every_operation_is_timed_once_and_a_fifth_of_the_frees_are_remote() {
        let heap = Checked::with_policy(SystemHeap::new(), Policy::Record);
        let latencies = measure(&heap, &tiny(2));
        let violations = heap.violations();
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(heap.live_blocks(), 0, "blocks leaked");

        let steps_per_thread = Scale::Tiny.scaled(ROUNDS) * STEPS_PER_ROUND;
        assert_eq!(latencies.alloc.len(), 2 * steps_per_thread);
        // One free per step: local ones timed by the stepping thread, remote ones by the
        // thread they were handed to.
        assert_eq!(latencies.free.len(), 2 * steps_per_thread);
        let remote_share = latencies.remote_free.len() as f64 / latencies.free.len() as f64;
        assert!(
            (0.17..=0.23).contains(&remote_share),
            "{remote_share} of the frees were remote"
        );
    }

    #[test]
    fn percentiles_are_reported_in_order_for_alloc_and_free() {
        let latencies = measure(&SystemHeap::new(), &tiny(2));
        let samples = latencies.samples(&Stats::default());
        for kind in ["alloc", "free"] {
            let names: Vec<String> = PERCENTILES
                .iter()
                .map(|(suffix, _)| format!("{kind}_{suffix}"))
                .chain([format!("{kind}_max")])
                .collect();
            let values: Vec<f64> = names
                .iter()
                .map(|m| value(&samples, m).unwrap_or_else(|| panic!("no {m}")))
                .collect();
            assert!(values[0] > 0.0, "{kind}: p50 of zero");
            assert!(
                values.windows(2).all(|w| w[0] <= w[1]),
                "{kind}: {names:?} = {values:?} out of order"
            );
        }
        assert!(
            value(&samples, "remote_free_max").unwrap() <= value(&samples, "free_max").unwrap()
        );
        assert!(
            samples
                .iter()
                .filter(|s| s.metric != SCHED_FIFO_METRIC)
                .all(|s| s.lower_is_better && s.unit == "ns")
        );
        assert!(latencies.shortest() > Duration::ZERO);
    }

    /// The system heap, claiming to count steps.
    struct StepCounting(SystemHeap);

    impl Allocator for StepCounting {
        type Handle = NonNull<u8>;
        fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
            self.0.allocate(layout)
        }
        unsafe fn deallocate(&self, handle: NonNull<u8>, layout: Layout) {
            // SAFETY: forwarded with the caller's promise.
            unsafe { self.0.deallocate(handle, layout) }
        }
        fn name(&self) -> &str {
            "step-counting"
        }
        fn stats(&self) -> Stats {
            Stats {
                max_alloc_steps: Some(12),
                max_free_steps: Some(5),
                ..Stats::default()
            }
        }
    }

    impl HostAllocator for StepCounting {}

    #[test]
    fn steps_are_reported_only_where_the_allocator_counts_them() {
        let counted = RealtimeWorkload::Latency.run(&StepCounting(SystemHeap::new()), &tiny(1));
        assert_eq!(value(&counted.samples, "alloc_max_steps"), Some(12.0));
        assert_eq!(value(&counted.samples, "free_max_steps"), Some(5.0));
        assert!(counted.times_single_operations);
        let step = counted
            .samples
            .iter()
            .find(|s| s.metric == "free_max_steps");
        assert_eq!(step.map(|s| s.unit.as_str()), Some("steps"));

        let uncounted = RealtimeWorkload::Latency.run(&SystemHeap::new(), &tiny(1));
        assert!(
            uncounted
                .samples
                .iter()
                .all(|s| !s.metric.ends_with("_steps")),
            "steps reported for an allocator that does not count them"
        );
    }

    #[test]
    fn is_clean_with_one_thread_and_with_more_threads_than_cores() {
        for threads in [1, 5] {
            let heap = Checked::with_policy(SystemHeap::new(), Policy::Record);
            let latencies = measure(&heap, &tiny(threads));
            assert!(heap.violations().is_empty(), "{threads} threads");
            assert_eq!(heap.live_blocks(), 0, "{threads} threads: blocks leaked");
            assert_eq!(latencies.free.len(), latencies.alloc.len());
        }
    }

    #[test]
    fn sched_fifo_reports_the_policy_the_threads_ran_under() {
        // Under the test harness's own (default) policy.
        let samples = measure(&SystemHeap::new(), &tiny(2)).samples(&Stats::default());
        assert_eq!(value(&samples, SCHED_FIFO_METRIC), Some(0.0));
        // Threads spawned by a SCHED_FIFO thread inherit its policy.
        let fifo = std::thread::spawn(|| {
            Sched::Fifo.enter().ok()?;
            let samples = measure(&SystemHeap::new(), &tiny(2)).samples(&Stats::default());
            Some(value(&samples, SCHED_FIFO_METRIC))
        })
        .join()
        .unwrap();
        match fifo {
            Some(share) => assert_eq!(share, Some(1.0)),
            None => eprintln!("skipped the SCHED_FIFO half: not permitted here"),
        }
    }

    #[test]
    fn sched_policies_parse_and_other_changes_nothing() {
        for sched in [Sched::Fifo, Sched::Other] {
            assert_eq!(sched.as_str().parse::<Sched>(), Ok(sched));
        }
        let err = "rr".parse::<Sched>().unwrap_err();
        assert!(err.contains("fifo or other"), "{err}");
        std::thread::spawn(|| {
            Sched::Other.enter().unwrap();
            assert!(!Sched::current_is_fifo());
        })
        .join()
        .unwrap();
        // A run within the budget waits one period; a longer one, a period more for each
        // budget it used; none where real-time threads are not limited.
        let ms = Duration::from_millis;
        assert_eq!(rt_pause_for(ms(700), 1_000_000, 950_000), ms(1000));
        assert_eq!(rt_pause_for(ms(2000), 1_000_000, 950_000), ms(3000));
        assert_eq!(rt_pause_for(ms(2000), 1_000_000, -1), Duration::ZERO);
        assert!(Sched::rt_pause(ms(1)) <= Sched::rt_pause(ms(5000)));
    }

    #[test]
    fn the_registry_finds_the_workload() {
        assert_eq!(
            RealtimeWorkload::from_name("latency"),
            Some(RealtimeWorkload::Latency)
        );
        assert_eq!(RealtimeWorkload::Latency.name(), "latency");
        assert_eq!(WORKLOADS[0].suite, "realtime");
    }
}
