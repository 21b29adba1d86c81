//! The storage suite's driver: the heaps compared on a workload, each with one engine per
//! partition over the same operations, loaded, run interleaved segment by segment in one
//! process, then recovered and checked.
//!
//! # Why the heaps run together
//!
//! On the shared 2-core VM this project is measured on, the machine's own speed moves in
//! bursts: a loop of random reads over 64 MiB, timed in 30 ms slices, takes 28 ms in most
//! slices and 32–42 ms in runs of several slices in a row (lag-one correlation 0.65). One
//! heap per process, run after run, left each run's throughput at the mercy of the bursts
//! it met: five runs of `inp-f` at one thread spread 1.44× (max over min) for
//! alloclab-pmem and 1.45× for PMDK, and at 16 times the default scale still 1.25× and
//! 1.45×, so their ratio moved by as much. Alternating the heaps every few milliseconds
//! puts each burst on all of them alike: over the same slices, pairs of alternating slices
//! gave a ratio that spread 1.08× over fifteen 600 ms windows, where whole windows, one
//! after the other, spread 1.45×.
//!
//! So every thread (partition) runs [`SEGMENT_OPS`] operations on one heap's engine, then
//! all threads move on to the next heap together (a barrier, not timed). The order of the
//! heaps within a round is drawn afresh for each round (`round_order`), so that over a run
//! each heap follows each other about equally often: a heap starts its segment in the
//! caches the one before left, and a fixed rotation made one heap follow the same other
//! most of the time (with PMDK, alloclab-pmem and DRAM turning in order, alloclab-pmem
//! followed PMDK in two rounds of three; a second alloclab-pmem added last, following DRAM
//! in three rounds of four, ran 4–13% faster than the first). Each partition's
//! time is the sum of its segments, each timed from the barrier to its last operation's
//! end. The heaps share the process's caches as they share the machine: each starts a
//! segment with some of its hot lines evicted by the others', which costs them all.
//!
//! # The control
//!
//! Where alloclab-pmem is among the heaps, a second instance of it runs too, last in the
//! list, its own pool and engines over the same operations, and its throughput and
//! memory-management share join alloclab-pmem's report as [`Control`]: see the [suite's
//! documentation](super#the-control). A failure of the control is alloclab-pmem's (the same
//! heap failed on the same operations).
//!
//! # Phases, per heap
//!
//! Load (untimed, each heap in turn), run (timed, interleaved), then, for a durable heap,
//! its engines and heap are dropped, the pool reopened and every partition recovered (one
//! heap after another), and every committed item read back (for DRAM, from the running
//! engines). A heap that fails — it cannot be created, an operation errs or panics, an
//! item is lost — fails alone: the others' measurements go on.

use std::marker::PhantomData;
use std::ops::Range;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use alloclab_storage_engines::{
    Engine, EngineTask, PersistStats, PersistentAllocator, Phase, Split, with_engine,
};
use hdrhistogram::Histogram;

use super::ycsb::{self, COLUMN_BYTES, Op, PartitionPlan, TUPLE_BYTES, mix64};
use super::{CONTROLLED_HEAP, Control, Recovery, Report, Spec, pool_bytes};
use crate::pmem::{PersistentHeapTask, with_persistent_heap};
use crate::workloads::realtime::{latency_histogram, nanos_between};
use crate::workloads::{Params, ScratchPool};

/// Run-phase operations each partition runs on one heap before all partitions move on to
/// the next: 0.2–1 ms of work at this suite's throughputs (200 k–1.4 M operations/s per
/// thread here), far shorter than the machine's slow bursts, and long enough that a switch
/// (a barrier, and a few cache lines of the engine's state to fetch again) is a small part
/// of it.
pub const SEGMENT_OPS: usize = 256;

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
pub(super) fn split_sampled(n: usize) -> bool {
    mix64((n as u64).wrapping_add(0x9E37_79B9_7F4A_7C15)).is_multiple_of(SPLIT_SAMPLE)
}

/// Measures `spec` on each heap named in `heaps`, together, alloclab-pmem with its control
/// (see the [module documentation](self)); one outcome per heap, in order.
///
/// # Errors
///
/// The whole measurement: the operations cannot be planned. A heap's own failure is its
/// outcome's.
pub fn measure_together(
    spec: Spec,
    heaps: &[&str],
    params: &Params,
    dir: &Path,
) -> Result<Vec<Result<Report, String>>, String> {
    let plans = plan(spec, params)?;
    let pool = pool_for(&plans);
    let controlled = heaps.iter().position(|h| *h == CONTROLLED_HEAP);
    let contenders = heaps
        .iter()
        .chain(controlled.map(|_| &CONTROLLED_HEAP))
        .map(|name| contender(spec, name, pool, plans.len(), dir))
        .collect();
    let mut reports = drive(contenders, &plans, SEGMENT_OPS);
    if let Some(k) = controlled {
        let control = reports.pop().expect("one outcome per heap and the control");
        with_control(&mut reports[k], control);
    }
    Ok(reports)
}

/// Joins the control's outcome to its heap's: its figures, or its failure as the heap's.
fn with_control(heap: &mut Result<Report, String>, control: Result<Report, String>) {
    match (heap.as_mut(), control) {
        (Ok(report), Ok(control)) => {
            report.control = Some(Control {
                ops_per_s: control.ops_per_s,
                share_mm: control.split.share(Phase::Mm),
            });
        }
        (Ok(_), Err(e)) => {
            *heap = Err(format!(
                "its control (a second instance, same operations) failed: {e}"
            ));
        }
        (Err(_), _) => {}
    }
}

/// Measures `spec` on a heap of type `H` with engine `E` alone (tests use it).
///
/// # Errors
///
/// As [`measure_together`], and the heap's own failure.
pub fn measure<H: PersistentAllocator, E: Engine<H>>(
    spec: Spec,
    params: &Params,
    dir: &Path,
) -> Result<Report, String> {
    let plans = plan(spec, params)?;
    let pool = pool_for(&plans);
    let heap =
        HeapRun::<H, E>::create(pool, plans.len(), dir).map(|h| Box::new(h) as Box<dyn Contender>);
    drive(vec![heap], &plans, SEGMENT_OPS)
        .pop()
        .expect("one outcome per heap")
}

/// The partitions' operations: [`LOADED`](super::LOADED) items (scaled) loaded, as many
/// operations run, shared out among `params.threads` partitions; the same for every heap.
fn plan(spec: Spec, params: &Params) -> Result<Vec<PartitionPlan>, String> {
    let threads = params.threads.max(1);
    let loaded = params.scale.scaled(super::LOADED).max(threads as u64);
    let ops = loaded;
    let seed = params.seed ^ (spec.mix as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D);
    (0..threads)
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
        .collect()
}

/// The pool size for `plans`' items and operations.
fn pool_for(plans: &[PartitionPlan]) -> usize {
    pool_bytes(
        plans.iter().map(|p| p.load_bytes.len() as u64).sum(),
        plans.iter().map(|p| p.ops.len() as u64).sum(),
    )
}

/// The heap named `name` with `spec`'s engine, its pool created.
fn contender(
    spec: Spec,
    name: &str,
    pool: usize,
    partitions: usize,
    dir: &Path,
) -> Result<Box<dyn Contender>, String> {
    struct ByHeap<'a> {
        engine: &'static str,
        pool: usize,
        partitions: usize,
        dir: &'a Path,
    }
    impl PersistentHeapTask for ByHeap<'_> {
        type Output = Result<Box<dyn Contender>, String>;
        fn run<H: PersistentAllocator>(self, _name: &'static str) -> Self::Output {
            let engine = self.engine;
            with_engine::<H, _>(engine, ByEngine(self))
                .ok_or_else(|| format!("unknown engine '{engine}'"))??
        }
    }
    struct ByEngine<'a>(ByHeap<'a>);
    impl<H: PersistentAllocator> EngineTask<H> for ByEngine<'_> {
        type Output = Result<Box<dyn Contender>, String>;
        fn run<E: Engine<H>>(self) -> Self::Output {
            let ByHeap {
                pool,
                partitions,
                dir,
                ..
            } = self.0;
            HeapRun::<H, E>::create(pool, partitions, dir)
                .map(|h| Box::new(h) as Box<dyn Contender>)
        }
    }
    with_persistent_heap(
        name,
        ByHeap {
            engine: spec.engine,
            pool,
            partitions,
            dir,
        },
    )
    .ok_or_else(|| format!("allocator '{name}' is not a persistent heap"))?
}

/// One heap under measurement, its engine type chosen.
trait Contender: Send + Sync {
    /// Partition `t`'s state, its engine not yet created (that is [`Partition::load`]'s,
    /// on the partition's own thread).
    fn partition(&self, t: usize) -> Box<dyn Partition>;
    /// The heap's flush and fence counters (heaps that count).
    fn persist_counts(&self) -> Option<PersistStats>;
    /// Whether the heap keeps its contents across a reopen.
    fn durable(&self) -> bool;
    /// After every partition's engine is dropped: reopens the pool, recovers every
    /// partition and checks its items; `(recovery, items present)`.
    fn recover(self: Box<Self>, plans: &[PartitionPlan]) -> Result<(Recovery, u64), String>;
}

/// One partition of one heap, on its thread.
trait Partition: Send {
    /// Creates the engine and loads the partition's items (untimed).
    fn load(&mut self, plan: &PartitionPlan) -> Result<(), String>;
    /// Runs the run phase's operations `ops` and, if `last`, the final commit, timed.
    fn run(&mut self, plan: &PartitionPlan, ops: Range<usize>, last: bool) -> Result<(), String>;
    /// What the run phase measured; with `check`, every item read back from the engine
    /// first. Drops the engine.
    fn finish(self: Box<Self>, plan: &PartitionPlan, check: bool) -> Result<Ran, String>;
}

/// What a partition's run phase measured.
struct Ran {
    latency: Histogram<u64>,
    split: Split,
    /// The run phase's time: its segments', each from the switch to its last operation's
    /// end.
    busy: Duration,
    /// The time the operations sampled for the split took (their number is the split's
    /// [`timed_ops`](Split::timed_ops)).
    sampled_time: Duration,
    /// Items present, if checked.
    live: Option<u64>,
}

struct HeapRun<H: PersistentAllocator, E: Engine<H>> {
    file: ScratchPool,
    heap: Arc<H>,
    engine: PhantomData<fn() -> E>,
}

impl<H: PersistentAllocator, E: Engine<H>> HeapRun<H, E> {
    fn create(pool: usize, partitions: usize, dir: &Path) -> Result<Self, String> {
        H::available()?;
        let file = ScratchPool::new(dir, "storage", E::NAME);
        let heap = Arc::new(H::create(&file.0, pool, partitions * E::ROOT_BYTES)?);
        Ok(Self {
            file,
            heap,
            engine: PhantomData,
        })
    }
}

/// The root slice of partition `t`.
fn partition_root<H: PersistentAllocator, E: Engine<H>>(heap: &H, t: usize) -> *mut u8 {
    heap.root().wrapping_add(t * E::ROOT_BYTES)
}

impl<H: PersistentAllocator, E: Engine<H>> Contender for HeapRun<H, E> {
    fn partition(&self, t: usize) -> Box<dyn Partition> {
        Box::new(Part::<H, E> {
            heap: Arc::clone(&self.heap),
            t,
            engine: None,
            before: Split::default(),
            latency: latency_histogram(),
            busy: Duration::ZERO,
            sampled_time: Duration::ZERO,
            value: Vec::with_capacity(TUPLE_BYTES),
            out: Vec::with_capacity(TUPLE_BYTES),
        })
    }

    fn persist_counts(&self) -> Option<PersistStats> {
        self.heap.persist_counts()
    }

    fn durable(&self) -> bool {
        H::DURABLE
    }

    fn recover(self: Box<Self>, plans: &[PartitionPlan]) -> Result<(Recovery, u64), String> {
        let Self { file, heap, .. } = *self;
        drop(heap);
        let t0 = Instant::now();
        let heap = Arc::new(H::open(&file.0)?);
        let heap_time = t0.elapsed();
        let mut engine_time = Duration::ZERO;
        let mut recovered = Vec::with_capacity(plans.len());
        for t in 0..plans.len() {
            let root = partition_root::<H, E>(&heap, t);
            let t0 = Instant::now();
            let engine = E::recover(Arc::clone(&heap), root)
                .map_err(|e| format!("recovering partition {t}: {e}"))?;
            engine_time += t0.elapsed();
            recovered.push(engine);
        }
        let mut live = 0;
        let mut out = Vec::new();
        for (engine, plan) in recovered.iter_mut().zip(plans) {
            live += check::<H, E>(engine, plan, &mut out)?;
        }
        drop(recovered);
        drop(heap);
        drop(file);
        Ok((
            Recovery {
                heap: heap_time,
                engine: engine_time,
            },
            live,
        ))
    }
}

struct Part<H: PersistentAllocator, E: Engine<H>> {
    heap: Arc<H>,
    t: usize,
    engine: Option<E>,
    /// The engine's split when the run phase began.
    before: Split,
    latency: Histogram<u64>,
    busy: Duration,
    sampled_time: Duration,
    /// The value an insert writes, prepared outside its timing.
    value: Vec<u8>,
    /// Where a read copies the value.
    out: Vec<u8>,
}

impl<H: PersistentAllocator, E: Engine<H>> Partition for Part<H, E> {
    fn load(&mut self, plan: &PartitionPlan) -> Result<(), String> {
        let root = partition_root::<H, E>(&self.heap, self.t);
        let mut engine = E::create(Arc::clone(&self.heap), root)?;
        for (item, &bytes) in plan.load_bytes.iter().enumerate() {
            let key = plan.key(item as u64);
            fill_value(&mut self.value, key, bytes as usize);
            if !engine.insert(key, &self.value)? {
                return Err(format!("load: key {key:#x} exists already"));
            }
            if (item + 1) % E::COMMIT_EVERY.max(1) == 0 {
                engine.commit()?;
            }
        }
        engine.commit()?;
        self.before = engine.split().clone();
        self.engine = Some(engine);
        Ok(())
    }

    fn run(&mut self, plan: &PartitionPlan, ops: Range<usize>, last: bool) -> Result<(), String> {
        let engine = self.engine.as_mut().ok_or("the partition was not loaded")?;
        let column = [0x5Au8; COLUMN_BYTES];
        let every = E::COMMIT_EVERY.max(1);
        let began = Instant::now();
        for (op, n) in plan.ops[ops.clone()].iter().zip(ops) {
            // Values are prepared outside the operation's timing, as YCSB's client builds
            // them.
            if let Op::Insert { item, bytes } = *op {
                fill_value(&mut self.value, plan.key(item), bytes as usize);
            }
            let in_sample = split_sampled(n);
            engine.split().time_next(in_sample);
            let t0 = Instant::now();
            let done = match *op {
                Op::Read { item } => engine.read(plan.key(item), &mut self.out),
                Op::Insert { item, .. } => engine.insert(plan.key(item), &self.value),
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
                self.sampled_time += t1.duration_since(t0);
            } else {
                self.latency.saturating_record(nanos_between(t0, t1));
            }
        }
        if last {
            // The last commit is no operation's: not in the split's sample (nor is
            // anything the engine does after the run).
            engine.split().time_next(false);
            engine.commit()?;
        }
        self.busy += began.elapsed();
        Ok(())
    }

    fn finish(self: Box<Self>, plan: &PartitionPlan, check_now: bool) -> Result<Ran, String> {
        let Self {
            engine,
            before,
            latency,
            busy,
            sampled_time,
            mut out,
            ..
        } = *self;
        let mut engine = engine.ok_or("the partition was not loaded")?;
        let split = engine.split().since(&before);
        let live = if check_now {
            Some(check::<H, E>(&mut engine, plan, &mut out)?)
        } else {
            None
        };
        Ok(Ran {
            latency,
            split,
            busy,
            sampled_time,
            live,
        })
    }
}

/// The number of segments of a run phase whose longest partition runs `ops` operations.
fn segments(ops: usize, segment_ops: usize) -> usize {
    ops.div_ceil(segment_ops.max(1)).max(1)
}

/// Segment `seg`'s operations of a partition of `ops` operations (empty past its end).
fn segment(seg: usize, ops: usize, segment_ops: usize) -> Range<usize> {
    (seg * segment_ops).min(ops)..((seg + 1) * segment_ops).min(ops)
}

/// The order in which `heaps` heaps run their segments in round `round`: a permutation drawn
/// from the round's number (the same in every partition's thread, and in every run), each
/// order about equally likely.
fn round_order(round: usize, heaps: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..heaps).collect();
    let mut state = (round as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    // Fisher–Yates, with SplitMix64 steps as the random numbers.
    for i in (1..heaps).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        order.swap(i, (mix64(state) % (i as u64 + 1)) as usize);
    }
    order
}

/// One thread's part: partition `t` of every heap still standing.
struct Lane {
    parts: Vec<Option<Box<dyn Partition>>>,
    errors: Vec<Option<String>>,
}

impl Lane {
    /// Runs `f` on heap `k`'s partition unless it already failed; a failure or a panic
    /// becomes its error.
    fn step(
        &mut self,
        k: usize,
        t: usize,
        f: impl FnOnce(&mut dyn Partition) -> Result<(), String>,
    ) {
        if self.errors[k].is_some() {
            return;
        }
        let Some(part) = self.parts[k].as_deref_mut() else {
            return;
        };
        let result = panic::catch_unwind(AssertUnwindSafe(|| f(part)))
            .unwrap_or_else(|p| Err(format!("partition {t} panicked: {}", panic_message(&*p))));
        if let Err(e) = result {
            self.errors[k] = Some(e);
        }
    }
}

/// Loads, runs (interleaved every `segment_ops` operations), recovers and checks every heap
/// in `contenders` over `plans`; one outcome per heap.
fn drive(
    contenders: Vec<Result<Box<dyn Contender>, String>>,
    plans: &[PartitionPlan],
    segment_ops: usize,
) -> Vec<Result<Report, String>> {
    let threads = plans.len();
    let standing: Vec<(usize, &dyn Contender)> = contenders
        .iter()
        .enumerate()
        .filter_map(|(k, c)| c.as_ref().ok().map(|c| (k, &**c)))
        .collect();
    let heaps = standing.len();
    let rounds = segments(
        plans.iter().map(|p| p.ops.len()).max().unwrap_or(0),
        segment_ops,
    );
    let loaded = Barrier::new(threads + 1);
    let start = Barrier::new(threads + 1);
    let switch = Barrier::new(threads);
    let end = Barrier::new(threads + 1);
    type LaneOutcome = Vec<Result<Ran, String>>;
    let (persist, lanes) = std::thread::scope(|scope| {
        let handles: Vec<_> =
            plans
                .iter()
                .enumerate()
                .map(|(t, plan)| {
                    let parts = standing.iter().map(|(_, c)| Some(c.partition(t))).collect();
                    let durable: Vec<bool> = standing.iter().map(|(_, c)| c.durable()).collect();
                    let (loaded, start, switch, end) = (&loaded, &start, &switch, &end);
                    scope.spawn(move || -> LaneOutcome {
                        let mut lane = Lane {
                            parts,
                            errors: vec![None; heaps],
                        };
                        for k in 0..heaps {
                            lane.step(k, t, |p| {
                                p.load(plan)
                                    .map_err(|e| format!("partition {t} while loading: {e}"))
                            });
                        }
                        loaded.wait();
                        start.wait();
                        for round in 0..rounds {
                            let ops = segment(round, plan.ops.len(), segment_ops);
                            for k in round_order(round, heaps) {
                                switch.wait();
                                lane.step(k, t, |p| p.run(plan, ops.clone(), round + 1 == rounds));
                            }
                        }
                        end.wait();
                        let Lane { parts, errors } = lane;
                        parts
                            .into_iter()
                            .zip(errors)
                            .zip(durable)
                            .map(|((part, error), durable)| match (part, error) {
                                (_, Some(e)) => Err(e),
                                (Some(p), None) => panic::catch_unwind(AssertUnwindSafe(|| {
                                    p.finish(plan, !durable)
                                }))
                                .unwrap_or_else(|p| {
                                    Err(format!("partition {t} panicked: {}", panic_message(&*p)))
                                }),
                                (None, None) => Err("no partition".to_owned()),
                            })
                            .collect()
                    })
                })
                .collect();
        loaded.wait();
        let before: Vec<_> = standing.iter().map(|(_, c)| c.persist_counts()).collect();
        start.wait();
        end.wait();
        let after: Vec<_> = standing.iter().map(|(_, c)| c.persist_counts()).collect();
        let lanes: Vec<LaneOutcome> = handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    (0..heaps)
                        .map(|_| Err("a partition thread panicked".to_owned()))
                        .collect()
                })
            })
            .collect();
        let persist: Vec<Option<PersistStats>> = before
            .into_iter()
            .zip(after)
            .map(|(b, a)| b.zip(a).map(|(b, a)| a.since(&b)))
            .collect();
        (persist, lanes)
    });
    // Per heap: its partitions' outcomes, in partition order.
    let mut by_heap: Vec<Vec<Result<Ran, String>>> = (0..heaps).map(|_| Vec::new()).collect();
    for lane in lanes {
        for (k, ran) in lane.into_iter().enumerate() {
            by_heap[k].push(ran);
        }
    }
    let mut by_heap = by_heap.into_iter().zip(persist);
    contenders
        .into_iter()
        .map(|c| {
            let contender = c?;
            let (ran, persist) = by_heap.next().expect("one outcome per standing heap");
            let ran = ran.into_iter().collect::<Result<Vec<Ran>, String>>()?;
            let (recovery, live_items) = if contender.durable() {
                let (recovery, live) = contender.recover(plans)?;
                (Some(recovery), live)
            } else {
                (None, ran.iter().filter_map(|r| r.live).sum())
            };
            Ok(report(&ran, plans, persist, recovery, live_items))
        })
        .collect()
}

/// A heap's report from its partitions' run phases.
fn report(
    ran: &[Ran],
    plans: &[PartitionPlan],
    persist: Option<PersistStats>,
    recovery: Option<Recovery>,
    live_items: u64,
) -> Report {
    // Each partition's rate over its operations outside the split's sample, summed.
    let ops_per_s = ran
        .iter()
        .zip(plans)
        .map(|(r, plan)| {
            let seconds = r
                .busy
                .saturating_sub(r.sampled_time)
                .as_secs_f64()
                .max(1e-9);
            (plan.ops.len() as u64).saturating_sub(r.split.timed_ops()) as f64 / seconds
        })
        .sum();
    let mut split = Split::default();
    let mut latency = latency_histogram();
    for r in ran {
        split.add(&r.split);
        latency.add(&r.latency).expect("same bounds");
    }
    Report {
        threads: plans.len(),
        loaded: plans.iter().map(|p| p.load_bytes.len() as u64).sum(),
        ops: plans.iter().map(|p| p.ops.len() as u64).sum(),
        elapsed: ran.iter().map(|r| r.busy).max().unwrap_or_default(),
        ops_per_s,
        latency,
        split,
        persist,
        recovery,
        live_items,
        control: None,
    }
}

/// One partition's value buffer: a recognisable pattern per key, so a value read back can
/// be told from another key's.
fn fill_value(buf: &mut Vec<u8>, key: u64, bytes: usize) {
    buf.clear();
    let pattern = key.to_le_bytes();
    buf.extend((0..bytes).map(|i| pattern[i % 8] ^ (i / 8) as u8));
}

/// Checks that every item that should exist does, with its length, and every deleted item
/// does not; the number of items checked present.
fn check<H: PersistentAllocator, E: Engine<H>>(
    engine: &mut E,
    plan: &PartitionPlan,
    out: &mut Vec<u8>,
) -> Result<u64, String> {
    let (live, deleted) = plan.final_items();
    let mut missing = 0u64;
    for &item in &live {
        if !engine.read(plan.key(item), out)? {
            missing += 1;
        }
    }
    let mut resurrected = 0u64;
    for &item in &deleted {
        if engine.read(plan.key(item), out)? {
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

#[cfg(test)]
mod tests {
    use super::super::testing::{ListEngine, tiny};
    use super::super::ycsb::{KeyChoice, Mix};
    use super::super::{LOADED, unavailable};
    use super::*;
    use crate::pmem::{AlloclabPmemHeap, DramHeap, PmdkHeap};
    use crate::report::{CLOCK_READ_METRIC, TIMER_OVERHEAD_METRIC};
    use crate::results::Sample;
    use crate::workloads::Scale;
    use crate::workloads::pmem::pool_dir;

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

    /// `spec` on the heap `name` alone.
    fn measure_one(spec: Spec, name: &str, params: &Params) -> Result<Report, String> {
        measure_together(spec, &[name], params, &pool_dir())?
            .pop()
            .expect("one outcome per heap")
    }

    /// The heaps that can run here: PMDK where libpmemobj is installed.
    fn heaps_here() -> Vec<&'static str> {
        match PmdkHeap::available() {
            Ok(()) => vec!["dram", "alloclab-pmem", "pmdk"],
            Err(reason) => {
                eprintln!("pmdk left out: {reason}");
                vec!["dram", "alloclab-pmem"]
            }
        }
    }

    #[test]
    fn segments_cover_every_operation_once_whatever_the_partitions_lengths() {
        for (lens, seg) in [
            (vec![10, 9], 4),
            (vec![256], 256),
            (vec![0, 1], 8),
            (vec![1000, 999, 998], 16),
        ] {
            let rounds = segments(*lens.iter().max().unwrap(), seg);
            for &len in &lens {
                let covered: Vec<usize> = (0..rounds).flat_map(|r| segment(r, len, seg)).collect();
                assert_eq!(covered, (0..len).collect::<Vec<_>>(), "{lens:?} by {seg}");
            }
        }
        assert_eq!(
            segments(0, 16),
            1,
            "an empty run phase still has its final commit"
        );
    }

    #[test]
    fn each_round_orders_every_heap_once_and_each_heap_follows_each_other_about_equally() {
        for heaps in 1..=5 {
            // follows[a][b]: turns in which heap b ran right after heap a, round boundaries
            // included.
            let mut follows = vec![vec![0u32; heaps]; heaps];
            let mut last: Option<usize> = None;
            let rounds = 6_000;
            for round in 0..rounds {
                let order = round_order(round, heaps);
                let mut sorted = order.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..heaps).collect::<Vec<_>>(), "round {round}");
                assert_eq!(order, round_order(round, heaps), "the same in every thread");
                for k in order {
                    if let Some(prev) = last {
                        follows[prev][k] += 1;
                    }
                    last = Some(k);
                }
            }
            if heaps < 3 {
                continue;
            }
            // Every ordered pair of different heaps within 10% of the mean of those pairs
            // (a fixed rotation of three heaps gives 2:1).
            let pairs: Vec<u32> = (0..heaps)
                .flat_map(|a| (0..heaps).filter(move |b| *b != a).map(move |b| (a, b)))
                .map(|(a, b)| follows[a][b])
                .collect();
            let mean = pairs.iter().sum::<u32>() as f64 / pairs.len() as f64;
            for (i, n) in pairs.iter().enumerate() {
                assert!(
                    (*n as f64 - mean).abs() < 0.1 * mean,
                    "{heaps} heaps, pair {i}: {n} against a mean of {mean}: {follows:?}"
                );
            }
        }
    }

    #[test]
    fn alloclab_pmem_is_measured_beside_its_control_and_reports_it() {
        let spec = spec(Mix::D, KeyChoice::Zipfian);
        let reports =
            measure_together(spec, &["dram", "alloclab-pmem"], &tiny(2), &pool_dir()).unwrap();
        assert_eq!(reports.len(), 2, "the control has no outcome of its own");
        assert!(
            reports[0].as_ref().unwrap().control.is_none(),
            "dram has none"
        );
        let ours = reports[1].as_ref().unwrap();
        let control = ours.control.expect("alloclab-pmem has its control");
        assert!(control.ops_per_s > 0.0);
        assert!(
            control.share_mm > 0.0 && control.share_mm < 1.0,
            "{control:?}"
        );
        let samples = ours.samples(20.0);
        let ratio = samples
            .iter()
            .find(|s| s.metric == "control_ops_ratio")
            .expect("the control's ratio");
        assert!(
            (ratio.value - control.ops_per_s / ours.ops_per_s).abs() < 1e-9,
            "{ratio:?}"
        );
        assert!(samples.iter().any(|s| s.metric == "control_share_mm"));
        // A failed control fails its heap, with the reason.
        let mut heap = Ok(measure_one(spec, "dram", &tiny(1)).unwrap());
        with_control(&mut heap, Err("out of space".to_owned()));
        let err = heap.unwrap_err();
        assert!(
            err.contains("its control") && err.contains("out of space"),
            "{err}"
        );
    }

    #[test]
    fn heaps_measured_together_each_get_their_own_figures_and_recover_every_item() {
        let heaps = heaps_here();
        for threads in [1, 2] {
            for (mix, keys) in [
                (Mix::D, KeyChoice::Zipfian),
                (Mix::H, KeyChoice::Zipfian),
                (Mix::F, KeyChoice::Uniform),
            ] {
                let spec = Spec {
                    engine: "lsm",
                    mix,
                    keys,
                };
                let params = tiny(threads);
                let plans = plan(spec, &params).unwrap();
                let pool = pool_bytes(Scale::Tiny.scaled(LOADED), Scale::Tiny.scaled(LOADED));
                let contenders = heaps
                    .iter()
                    .map(|h| contender(spec, h, pool, threads, &pool_dir()))
                    .collect();
                // Segments of 16 operations: many switches between the heaps.
                let reports = drive(contenders, &plans, 16);
                assert_eq!(reports.len(), heaps.len());
                let mut live = Vec::new();
                for (heap, report) in heaps.iter().zip(reports) {
                    let report = report.unwrap_or_else(|e| panic!("{heap}/{mix:?}/{threads}: {e}"));
                    let ops = Scale::Tiny.scaled(LOADED);
                    assert_eq!(report.ops, ops);
                    assert_eq!(
                        report.latency.len() + report.split.timed_ops(),
                        ops,
                        "{heap}"
                    );
                    assert!(report.ops_per_s > 0.0);
                    assert_eq!(report.recovery.is_some(), *heap != "dram", "{heap}");
                    live.push(report.live_items);
                }
                // The same operations on every heap leave the same items.
                assert!(live.windows(2).all(|w| w[0] == w[1]), "{mix:?}: {live:?}");
            }
        }
    }

    #[test]
    fn a_heap_that_cannot_be_had_or_fails_fails_alone() {
        let spec = spec(Mix::C, KeyChoice::Zipfian);
        let reports = measure_together(
            spec,
            &["dram", "system", "alloclab-pmem"],
            &tiny(2),
            &pool_dir(),
        )
        .unwrap();
        assert!(reports[0].is_ok() && reports[2].is_ok());
        let err = reports[1].as_ref().unwrap_err();
        assert!(err.contains("not a persistent heap"), "{err}");
        // A pool far too small (4 MiB for 20,000 items of 1,000 bytes): the load runs out
        // of space, on that heap only.
        let params = Params {
            scale: Scale::Small,
            ..tiny(2)
        };
        let plans = plan(spec, &params).unwrap();
        let pool = pool_bytes(LOADED, LOADED);
        let full = HeapRun::<AlloclabPmemHeap, ListEngine<AlloclabPmemHeap>>::create(
            4 << 20,
            2,
            &pool_dir(),
        )
        .map(|h| Box::new(h) as Box<dyn Contender>);
        let roomy = HeapRun::<DramHeap, ListEngine<DramHeap>>::create(pool, 2, &pool_dir())
            .map(|h| Box::new(h) as Box<dyn Contender>);
        let reports = drive(vec![full, roomy], &plans, 32);
        let err = reports[0].as_ref().unwrap_err();
        assert!(err.contains("while loading"), "{err}");
        let report = reports[1].as_ref().unwrap();
        assert!(report.live_items > 0);
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
                    let report = measure_one(spec, heap, &tiny(2))
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
                let err = measure_one(
                    Spec {
                        engine,
                        mix: Mix::A,
                        keys: KeyChoice::Zipfian,
                    },
                    "dram",
                    &tiny(1),
                )
                .unwrap_err();
                assert_eq!(err, reason);
                assert_eq!(
                    super::super::unavailable(&format!("{engine}-a")),
                    Some(reason)
                );
            }
        }
        assert_eq!(unavailable("larson"), None);
    }
}
