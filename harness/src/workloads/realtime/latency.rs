//! The `latency` workload (and `latency-fifo`, the same under `SCHED_FIFO`): how long one
//! allocation and one free take, in the tail.
//!
//! It times every allocation and every free on its own and reports the distribution of each
//! (an HDR histogram: p50, p99, p99.9, p99.99, p99.999 and max), with more threads than cores
//! by default (1×, 2× and 4× the logical cores), random sizes, and a fifth of the frees done
//! by another thread; beside them, the **floor**: the same two clock reads around a call that
//! does nothing, once a step, so that each tail can be read against what the machine itself
//! adds (interrupts, the hypervisor, the scheduler) in the same run.
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
//! 0.1% of the value recorded, rounded up; `max` too) and saturate at [`HIGHEST_NS`](super::HIGHEST_NS); they
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
//!   `ATTRIBUTE_SLOW_NS` mode), against 42 samples above p99.999 (8 × 2^19 calls, as runs then timed): p99.999
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
//! `scale.scaled(`[`ROUNDS`]`)` timed rounds of [`STEPS_PER_ROUND`] steps per thread at up
//! to one thread per core (after a warm-up of an eighth as many): at Small, 2^19 = 524 288
//! allocations and as many frees per thread (1/64 of that at Tiny). With more threads than
//! cores each thread times its share of the cores' rounds ([`timed_rounds`]: 2^17 each at 4×),
//! so that every thread count times `cores × 2^19` calls of each kind in all; the warm-up
//! stays a thread's own, as the growth it absorbs is per thread. p99.999 is then the value
//! that all but `cores × 5.2` of them are at or below: the 11th largest allocation on a
//! 2-core machine at every thread count (the 6th largest on one core). So p99.999 is a tail
//! percentile and not the maximum under another name, though a handful of events decide it;
//! p99.99 rests on ten times as many. `max` is the single worst call of the run and varies
//! from run to run (see its min–max over the runs); use a larger `--scale` for steadier
//! tails. The count is what fits the time budget: at Small a run at 4× takes about as long
//! as one at 1× (before the share, four times as long: 85 of the suite's 177 s on a 2-core
//! machine).
//!
//! # Metrics
//!
//! All `lower_is_better`: `alloc_p50`, `alloc_p99`, `alloc_p99.9`, `alloc_p99.99`,
//! `alloc_p99.999`, `alloc_max` and the same for `free_` and `floor_` (ns; `floor_` is the
//! empty call); `remote_free_p99`, `remote_free_p99.9`, `remote_free_p99.99`,
//! `remote_free_p99.999` and `remote_free_max` (ns, the remote frees alone: whether a free's
//! tail is its remote frees' or its local ones'); `alloc_max_steps` and `free_max_steps`
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

use super::sched::Sched;
use super::{PERCENTILES, latency_histogram, nanos_between, shortest_ns};
use crate::metrics::SCHED_FIFO_METRIC;
use crate::results::Sample;
use crate::workloads::cpu::common::{self, Block, Ring, RingEnd, Table};
use crate::workloads::{Params, Scale};

/// The metric family of the floor (`floor_p50` .. `floor_max`).
pub const FLOOR: &str = "floor";
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
/// The percentiles reported for the remote frees alone: [`PERCENTILES`] from p99 on.
const REMOTE_PERCENTILES: [(&str, f64); 4] = [
    PERCENTILES[1],
    PERCENTILES[2],
    PERCENTILES[3],
    PERCENTILES[4],
];
/// Rounds per thread at [`Scale::Small`]: 2^19 steps.
pub const ROUNDS: u64 = 1 << 13;
/// Timed rounds per thread: `scale.scaled(`[`ROUNDS`]`)` at up to one thread per core;
/// with more threads than `cores`, their share of the cores' rounds, so that every thread
/// count times the same number of calls in all (and a percentile rests on as many of them),
/// and a run at 4x the cores takes about as long as one at 1x, not four times as long.
pub fn timed_rounds(scale: Scale, threads: usize, cores: usize) -> u64 {
    let rounds = scale.scaled(ROUNDS);
    if threads <= cores.max(1) {
        rounds
    } else {
        (rounds * cores.max(1) as u64 / threads as u64).max(1)
    }
}

/// Untimed rounds per thread before the timed ones at
/// [`Scale::Small`] (scaled like [`ROUNDS`]): 2^16 steps,
/// past the heaps' start-up growth (see the module documentation).
pub const WARM_UP_ROUNDS: u64 = ROUNDS / 8;

/// The latencies of one run, merged over its threads, in nanoseconds.
#[derive(Clone, Debug)]
pub struct Latencies {
    /// Every allocation.
    pub alloc: Histogram<u64>,
    /// Every free, local or remote.
    pub free: Histogram<u64>,
    /// The remote frees alone (also counted in `free`).
    pub remote_free: Histogram<u64>,
    /// The floor: a call that does nothing, timed the same way, once a step.
    pub floor: Histogram<u64>,
    /// Threads that ran under `SCHED_FIFO`, of `threads`.
    pub fifo_threads: usize,
    /// Threads whose latencies these are.
    pub threads: usize,
}

impl Latencies {
    fn new() -> Self {
        Self {
            alloc: latency_histogram(),
            free: latency_histogram(),
            remote_free: latency_histogram(),
            floor: latency_histogram(),
            fifo_threads: 0,
            threads: 0,
        }
    }

    /// Forgets every latency recorded (the warm-up's).
    fn reset_records(&mut self) {
        self.alloc.reset();
        self.free.reset();
        self.remote_free.reset();
        self.floor.reset();
    }

    fn add(&mut self, other: &Self) {
        let same_bounds = "histograms of one run have the same bounds";
        self.alloc.add(&other.alloc).expect(same_bounds);
        self.free.add(&other.free).expect(same_bounds);
        self.remote_free.add(&other.remote_free).expect(same_bounds);
        self.floor.add(&other.floor).expect(same_bounds);
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
        for (kind, histogram) in [
            ("alloc", &self.alloc),
            ("free", &self.free),
            (FLOOR, &self.floor),
        ] {
            if histogram.is_empty() {
                continue;
            }
            for (suffix, quantile) in PERCENTILES {
                samples.push(ns(
                    format!("{kind}_{suffix}"),
                    histogram.value_at_quantile(quantile),
                ));
            }
            samples.push(ns(format!("{kind}_max"), histogram.max()));
        }
        if !self.remote_free.is_empty() {
            // The tail only: where a free's tail comes from, the remote frees or the local
            // ones (their median is a handful of nanoseconds like any free's).
            for (suffix, quantile) in REMOTE_PERCENTILES {
                samples.push(ns(
                    format!("remote_free_{suffix}"),
                    self.remote_free.value_at_quantile(quantile),
                ));
            }
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
    let rounds = timed_rounds(
        params.scale,
        params.threads,
        crate::machine::logical_cores(),
    );
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
                    t.latencies.floor.saturating_record(timed_nothing());
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

/// How long a call that does nothing takes, timed as [`timed_allocate`] times `allocate`:
/// the floor under every figure. The call goes through a function pointer the compiler
/// cannot see through, so it is made, like an allocator's.
#[inline]
fn timed_nothing() -> u64 {
    let nothing: fn() = core::hint::black_box(do_nothing);
    let start = Instant::now();
    nothing();
    let end = Instant::now();
    nanos_between(start, end)
}

/// The call the floor times.
#[inline(never)]
pub(super) fn do_nothing() {
    core::hint::black_box(());
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

#[cfg(test)]
mod tests {
    use core::alloc::Layout;
    use core::ptr::NonNull;

    use alloclab_core::{AllocError, Allocator, Checked, Policy, SystemHeap};

    use super::*;

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
    fn oversubscribed_threads_share_the_cores_rounds() {
        let full = Scale::Small.scaled(ROUNDS);
        assert_eq!(timed_rounds(Scale::Small, 1, 2), full);
        assert_eq!(timed_rounds(Scale::Small, 2, 2), full);
        assert_eq!(timed_rounds(Scale::Small, 4, 2), full / 2);
        assert_eq!(timed_rounds(Scale::Small, 8, 2), full / 4);
        // Every thread count beyond the cores times the cores' calls in all.
        for threads in [3, 4, 8, 16] {
            let total = timed_rounds(Scale::Small, threads, 2) * threads as u64;
            assert!(
                total <= 2 * full && total > 2 * full - threads as u64,
                "{threads}"
            );
        }
        // Never no round at all, and a machine reporting no core counts as one.
        assert_eq!(timed_rounds(Scale::Tiny, 1 << 20, 1), 1);
        assert_eq!(timed_rounds(Scale::Small, 2, 0), full / 2);
    }

    #[test]
    fn every_operation_is_timed_once_and_a_fifth_of_the_frees_are_remote() {
        let heap = Checked::with_policy(SystemHeap::new(), Policy::Record);
        let latencies = measure(&heap, &tiny(2));
        let violations = heap.violations();
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(heap.live_blocks(), 0, "blocks leaked");

        let steps_per_thread =
            timed_rounds(Scale::Tiny, 2, crate::machine::logical_cores()) * STEPS_PER_ROUND;
        assert_eq!(latencies.alloc.len(), 2 * steps_per_thread);
        // One free per step: local ones timed by the stepping thread, remote ones by the
        // thread they were handed to.
        assert_eq!(latencies.free.len(), 2 * steps_per_thread);
        // One empty call timed per step, beside the allocation.
        assert_eq!(latencies.floor.len(), 2 * steps_per_thread);
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
        for kind in ["alloc", "free", FLOOR] {
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
        let remote: Vec<f64> = REMOTE_PERCENTILES
            .iter()
            .map(|(suffix, _)| format!("remote_free_{suffix}"))
            .chain(["remote_free_max".to_owned()])
            .map(|m| value(&samples, &m).unwrap_or_else(|| panic!("no {m}")))
            .collect();
        assert!(
            remote.windows(2).all(|w| w[0] <= w[1]),
            "remote frees' percentiles out of order: {remote:?}"
        );
        // The remote frees are some of the frees: none is slower than the slowest free.
        assert!(remote[remote.len() - 1] <= value(&samples, "free_max").unwrap());
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
        let counted =
            super::super::RealtimeWorkload::Latency.run(&StepCounting(SystemHeap::new()), &tiny(1));
        assert_eq!(value(&counted.samples, "alloc_max_steps"), Some(12.0));
        assert_eq!(value(&counted.samples, "free_max_steps"), Some(5.0));
        assert!(counted.times_single_operations);
        let step = counted
            .samples
            .iter()
            .find(|s| s.metric == "free_max_steps");
        assert_eq!(step.map(|s| s.unit.as_str()), Some("steps"));

        let uncounted = super::super::RealtimeWorkload::Latency.run(&SystemHeap::new(), &tiny(1));
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
}
