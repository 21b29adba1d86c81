//! # alloclab-storage-engines
//!
//! Storage engines in the style of N-Store over persistent heaps, for the harness's
//! `storage` suite.
//!
//! * The heap is any [`PersistentAllocator`] (alloclab-pmem, PMDK, the DRAM baseline; the
//!   dispatch from names is the harness's `pmem::with_persistent_heap`): the
//!   pluggable allocator interface of N-Store (allocate, deallocate, root, recovery) with
//!   the two crash-atomic calls that store the block into, or clear it from, a persistent
//!   word, and the engine's own flush and fence.
//! * [`Engine`]: a key–value storage engine on a heap, one instance per partition.
//! * [`Split`]: where an engine's time goes — index, crash consistency, memory management,
//!   modification — in cycles, for the time-split chart.
//! * [`engines`]: InP, LSM and CoW, and what they are built of (the persistent B+tree, the
//!   transaction log, the out-of-line columns).
//! * [`crash`]: the crash checker, any engine on alloclab-pmem's crash simulator.
//!
//! ```
//! use std::sync::Arc;
//!
//! use alloclab_pmem::{PersistentHeap, SimMedium};
//! use alloclab_storage_engines::engines::inp::Inp;
//! use alloclab_storage_engines::{Engine, PersistentAllocator};
//!
//! type Heap = PersistentHeap<SimMedium>;
//! let heap = Arc::new(Heap::create_on(SimMedium::new(8 << 20), 64).unwrap());
//! let root = PersistentAllocator::root(&*heap);
//! let mut inp = Inp::create(Arc::clone(&heap), root).unwrap();
//! assert!(inp.insert(7, b"seven").unwrap());
//! inp.commit().unwrap();
//! let mut value = Vec::new();
//! assert!(inp.read(7, &mut value).unwrap());
//! assert_eq!(value, b"seven");
//! ```
//!
//! # Offsets, not addresses
//!
//! Everything persistent names a block by its 8-byte offset from the pool's base
//! ([`PersistentAllocator::at`]`(0)`); 0 is null. alloclab-pmem's `PPtr` is that offset;
//! PMDK's `PMEMoid.off` is too (the pool UUID is the heap's); the DRAM baseline's offsets
//! are addresses (its base is 0).
//!
//! # Partitions and threads
//!
//! As in N-Store, the database is partitioned by key among executor threads: each thread
//! owns one [`Engine`] instance (its own index and log) whose persistent root is a
//! [`Engine::ROOT_BYTES`] slice of the heap's root, and all instances share one heap, whose
//! allocator is what the threads contend on.
//!
//! # A note on alloclab-pmem's conservative recovery
//!
//! alloclab-pmem recovers by marking every block whose offset appears as an aligned word in
//! a reachable block. An engine that stores data words equal to block offsets (an 8-byte key
//! such as 65,536, say) keeps such a block allocated until the word changes: a leak, never a
//! corruption. Engines store keys and other data words so that they are odd, or above the
//! pool (see the engines' docs), so that crash tests can count leaks exactly.

pub mod crash;
pub mod engines;

use std::cell::Cell;
use std::sync::Arc;

pub use alloclab_core::{PersistStats, PersistentAllocator};

use alloclab_pmem::{PersistentHeap, SimMedium};

/// The engines of the `storage` suite, in report order.
pub const ENGINES: &[&str] = &["inp", "lsm", "cow"];

/// Something to do with an engine on the heap type `H`, whatever the engine's type.
pub trait EngineTask<H: PersistentAllocator> {
    /// What the task returns.
    type Output;
    /// Runs the task with the engine type `E`.
    fn run<E: Engine<H>>(self) -> Self::Output;
}

/// Runs `task` with the engine registered as `name` (one of [`ENGINES`]) on the heap type
/// `H`: `None` if no engine has that name, `Some(Err(reason))` if it is not built in this
/// branch.
pub fn with_engine<H: PersistentAllocator, T: EngineTask<H>>(
    name: &str,
    task: T,
) -> Option<Result<T::Output, String>> {
    // Keep the match in step with ENGINES (a test checks it).
    Some(Ok(match name {
        "inp" => task.run::<engines::inp::Inp<H>>(),
        "lsm" => task.run::<engines::lsm::Lsm<H>>(),
        "cow" => task.run::<engines::cow::Cow<H>>(),
        _ => return None,
    }))
}

/// Whether the engine `name` can run: `None` if no engine has that name, `Some(Err(reason))`
/// if it is not built in this branch.
pub fn engine_availability(name: &str) -> Option<Result<(), String>> {
    // Any heap type does: every engine is generic over its heap.
    type Heap = PersistentHeap<SimMedium>;
    struct Probe;
    impl EngineTask<Heap> for Probe {
        type Output = ();
        fn run<E: Engine<Heap>>(self) {}
    }
    with_engine::<Heap, _>(name, Probe)
}

/// Where an engine's time goes (the paper's SCAN / CC / MM / MOD split).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Index lookups and index maintenance (B+tree search, node splits, sorted-array
    /// search, bloom filters).
    Index,
    /// Crash consistency: writing the undo log / WAL / directory copies, and every flush
    /// and fence the engine issues itself.
    Cc,
    /// Memory management: every call into the heap's allocator (`allocate_unlinked`, `release`,
    /// `allocate_into`, `free_from`), including the flushes and fences inside it.
    Mm,
    /// Modification: copying tuple data into place and reading it out.
    Mod,
}

impl Phase {
    /// Every phase, in report order.
    pub const ALL: [Phase; 4] = [Phase::Index, Phase::Cc, Phase::Mm, Phase::Mod];

    /// The short name used in results and charts.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Index => "index",
            Phase::Cc => "crash-consistency",
            Phase::Mm => "memory-management",
            Phase::Mod => "modification",
        }
    }
}

/// Cycles spent in each [`Phase`] by one engine instance (one thread), and the engine's
/// own flushes and fences.
///
/// Phases do not nest: an engine times the innermost piece of work under one phase and
/// nothing twice (an allocator call inside log writing is [`Phase::Mm`], the rest of the
/// log writing [`Phase::Cc`]). Time outside every phase (the driver, key generation) is
/// not counted; shares are of the sum of the four.
///
/// # The clock
///
/// A span is two reads of the cycle counter, each after an `LFENCE` (the private `now`):
/// the read that ends a span waits until every instruction before it has completed, its loads
/// included, so a span is charged for its own cache misses and the next span starts
/// clean. A bare `rdtsc` is not ordered by anything: it runs as soon as it is decoded,
/// so a load that misses in one span finishes, on the clock, in whichever later span
/// first waits for it (a dependent instruction, a full reorder buffer). On CoW with mix g
/// that made the split bimodal: the update reads the old tuple's header (a miss: the
/// commit flushed it out of the cache) in a [`Phase::Mod`] span and then allocates the
/// copy's block, whose size class depends on that header, in a [`Phase::Mm`] span.
/// Measured on the project's 2-core VM with alloclab-pmem, 1 thread, 8 interleaved runs
/// (load 3.0–3.3): with a bare `rdtsc` the MM share of cow-g was 9.5–37.1% (median 30.7;
/// MM 203 ns per operation, modification 104); with `LFENCE; rdtsc` 4.9–15.4% (median
/// 7.5; MM 81, modification 620). Fencing only the read that ends a span is not enough:
/// inp-g, whose allocation span follows untimed code, stayed at 2.5–10.2%.
/// The fences cost the operations they time (their phases no longer overlap: 5–15% of
/// cow-g's, cow-h's, inp-g's and inp-h's throughput in one measurement, 20–42% in
/// another), so the suite's driver times a sample of the operations
/// ([`time_next`](Self::time_next)).
///
/// Stores are another matter: `LFENCE` does not wait for the store buffer to drain, nor
/// for the write-backs a `SFENCE` orders. The wait for a fence's write-backs lands in
/// whichever span next needs them to be done (a flush, a locked instruction, a store
/// when the store buffer is full), not necessarily in the fence's own [`Phase::Cc`] span;
/// CoW's commit waits for them inside its [`Phase::Cc`] span for that reason (see its
/// module documentation).
///
/// Each span also carries about one clock read: the harness's `storage_split` example
/// prints what an empty span is attributed on this machine. Shares are not corrected for
/// it, so a phase made of many short spans (memory management with a fast heap) is
/// overstated.
///
/// And a span is wall time: a thread preempted inside a span (a 4 ms time slice when
/// other processes compete for the cores) has the whole slice charged to that span's
/// phase. Over many runs that lands in each phase in proportion to its share, but one run
/// of a 20,000-operation workload (20–40 ms) can take one or two such slices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    cycles: [u64; 4],
    /// Flush calls the engine made itself.
    pub flushes: u64,
    /// Fences the engine made itself.
    pub fences: u64,
    /// Bytes the engine's own flushes covered.
    pub bytes_flushed: u64,
    /// Operations marked timed by [`time_next`](Self::time_next).
    timed_ops: Cell<u64>,
    /// Whether spans are run without reading the clock (see [`time_next`](Self::time_next)).
    untimed: Cell<bool>,
}

impl Split {
    /// Runs `f`, adding its duration to `phase` (unless the current operation is not
    /// timed: see [`time_next`](Self::time_next)).
    #[inline]
    pub fn time<R>(&mut self, phase: Phase, f: impl FnOnce() -> R) -> R {
        if self.untimed.get() {
            return f();
        }
        let start = now();
        let r = f();
        self.cycles[phase as usize] += now().wrapping_sub(start);
        r
    }

    /// Whether the spans of the operation that comes next, up to the next call, are timed
    /// (every span is, until the first call): for a driver that times a sample of the
    /// operations. Counts the operation in [`timed_ops`](Self::timed_ops) when `timed`.
    /// Flushes and fences are counted either way.
    ///
    /// Why sample: the fenced clock reads (see "The clock") keep the phases of a timed
    /// operation from overlapping, which costs the operation time; timing one operation in
    /// a few keeps the shares exact for those operations (each starts after everything
    /// before it completed, so it is charged for its own work only) while the throughput,
    /// measured over all operations, pays the fences for a few.
    pub fn time_next(&self, timed: bool) {
        self.untimed.set(!timed);
        if timed {
            self.timed_ops.set(self.timed_ops.get() + 1);
        }
    }

    /// Operations marked timed by [`time_next`](Self::time_next) so far (what the cycles of
    /// a driver that samples are per).
    pub fn timed_ops(&self) -> u64 {
        self.timed_ops.get()
    }

    /// Cycles (or nanoseconds where there is no cycle counter) spent in `phase`.
    pub fn cycles(&self, phase: Phase) -> u64 {
        self.cycles[phase as usize]
    }

    /// `phase`'s share of the four phases' total, in `0.0..=1.0` (0 when nothing was timed).
    pub fn share(&self, phase: Phase) -> f64 {
        let total: u64 = self.cycles.iter().sum();
        if total == 0 {
            0.0
        } else {
            self.cycles(phase) as f64 / total as f64
        }
    }

    /// Adds another instance's split (to total the threads).
    pub fn add(&mut self, other: &Split) {
        for (a, b) in self.cycles.iter_mut().zip(other.cycles) {
            *a += b;
        }
        self.flushes += other.flushes;
        self.fences += other.fences;
        self.bytes_flushed += other.bytes_flushed;
        self.timed_ops
            .set(self.timed_ops.get() + other.timed_ops.get());
    }

    /// What was added to this split since `earlier`, a snapshot of it (a split only grows).
    pub fn since(&self, earlier: &Split) -> Split {
        Split {
            cycles: std::array::from_fn(|i| self.cycles[i].saturating_sub(earlier.cycles[i])),
            flushes: self.flushes.saturating_sub(earlier.flushes),
            fences: self.fences.saturating_sub(earlier.fences),
            bytes_flushed: self.bytes_flushed.saturating_sub(earlier.bytes_flushed),
            timed_ops: Cell::new(self.timed_ops().saturating_sub(earlier.timed_ops())),
            untimed: Cell::new(false),
        }
    }

    /// A split of the given cycles per phase (in [`Phase::ALL`] order) and no flushes, for
    /// tests and reports.
    pub fn from_cycles(cycles: [u64; 4]) -> Split {
        Split {
            cycles,
            ..Split::default()
        }
    }

    /// Flushes `len` bytes at `p` through `heap`, counted, under [`Phase::Cc`].
    pub fn flush<H: PersistentAllocator>(&mut self, heap: &H, p: *const u8, len: usize) {
        self.flushes += 1;
        self.bytes_flushed += len as u64;
        self.time(Phase::Cc, || heap.flush(p, len));
    }

    /// Fences through `heap`, counted, under [`Phase::Cc`].
    pub fn fence<H: PersistentAllocator>(&mut self, heap: &H) {
        self.fences += 1;
        self.time(Phase::Cc, || heap.fence());
    }

    /// [`flush`](Self::flush) then [`fence`](Self::fence).
    pub fn persist<H: PersistentAllocator>(&mut self, heap: &H, p: *const u8, len: usize) {
        self.flush(heap, p, len);
        self.fence(heap);
    }
}

/// The cycle counter (x86-64 `rdtsc`, after every earlier instruction has completed: see
/// [`Split`], "The clock"), or monotonic nanoseconds elsewhere.
#[inline]
fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `lfence` (SSE2, part of the x86-64 baseline) and `rdtsc` have no
        // preconditions on x86-64.
        unsafe {
            core::arch::x86_64::_mm_lfence();
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// A key–value storage engine on a persistent heap: one partition of the database, used
/// by one thread (see the module documentation).
///
/// Keys are any `u64`; values are byte strings (a YCSB tuple of five 200-byte columns is
/// one 1,000-byte value; the variable-size mix uses 1–256 bytes). An operation is
/// *committed* once a later [`commit`](Self::commit) has returned; the driver calls it
/// after every [`COMMIT_EVERY`](Self::COMMIT_EVERY) operations and at the end. After a
/// crash, [`recover`](Self::recover) must show every committed operation and none of the
/// operations after the last commit that returned, except that operations of the commit
/// that was in flight are all there or all gone.
pub trait Engine<H: PersistentAllocator>: Sized + Send + 'static {
    /// The engine's name in results (`inp`, `lsm`, `cow`).
    const NAME: &'static str;

    /// Bytes of the heap's root one partition uses (a multiple of 64).
    const ROOT_BYTES: usize;

    /// Operations per transaction: 1 for engines that commit every operation (InP, LSM);
    /// the batch size of group commit (CoW).
    const COMMIT_EVERY: usize;

    /// An empty partition whose root is the `ROOT_BYTES` (zeroed) at `root`, inside the
    /// heap's root.
    ///
    /// # Errors
    ///
    /// The heap failed (out of space); a one-line message.
    fn create(heap: Arc<H>, root: *mut u8) -> Result<Self, String>;

    /// The partition at `root` as a crash (or a clean shutdown) left it: undo what was not
    /// committed, redo what was, reclaim what the crash orphaned.
    ///
    /// # Errors
    ///
    /// The root does not hold this engine's partition, or its structures are corrupt.
    fn recover(heap: Arc<H>, root: *mut u8) -> Result<Self, String>;

    /// Copies the value of `key` into `out` (replacing its contents); whether it exists.
    ///
    /// # Errors
    ///
    /// The engine's structures are corrupt.
    fn read(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, String>;

    /// Inserts `key` with `value`; `false` (and nothing changes) if it exists.
    ///
    /// # Errors
    ///
    /// The heap is out of space or failed.
    fn insert(&mut self, key: u64, value: &[u8]) -> Result<bool, String>;

    /// Overwrites `bytes.len()` bytes of `key`'s value at byte `at` (one column); `false`
    /// if the key does not exist.
    ///
    /// # Errors
    ///
    /// The range is outside the value; the heap is out of space or failed.
    fn update(&mut self, key: u64, at: usize, bytes: &[u8]) -> Result<bool, String>;

    /// Deletes `key`; `false` if it does not exist.
    ///
    /// # Errors
    ///
    /// The heap failed.
    fn delete(&mut self, key: u64) -> Result<bool, String>;

    /// Commits every operation since the last commit.
    ///
    /// # Errors
    ///
    /// The heap is out of space or failed.
    fn commit(&mut self) -> Result<(), String>;

    /// Where this instance's time went so far.
    fn split(&self) -> &Split;

    /// The offsets of every heap block this partition reaches (its index, log, tuples, …),
    /// each once, for the crash tests' leak count ([`crash`]); `None` (the default) where the
    /// engine does not say, and leaks are then not counted.
    ///
    /// # Errors
    ///
    /// The engine's structures are corrupt.
    fn blocks(&self) -> Result<Option<Vec<u64>>, String> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untimed_operations_add_no_cycles_but_count_flushes_and_timed_ones_are_counted() {
        let heap = PersistentHeap::create_on(SimMedium::new(1 << 20), 64).unwrap();
        let mut split = Split::default();
        let work = || std::hint::black_box((0..1000u64).sum::<u64>());
        split.time(Phase::Index, work);
        assert!(split.cycles(Phase::Index) > 0, "spans are timed by default");
        assert_eq!(split.timed_ops(), 0);
        let before = split.clone();
        split.time_next(false);
        split.time(Phase::Mm, work);
        split.fence(&heap);
        assert_eq!(split.cycles(Phase::Mm), 0);
        assert_eq!(split.cycles(Phase::Cc), 0);
        assert_eq!(split.fences, 1, "an untimed fence is still counted");
        split.time_next(true);
        split.time(Phase::Mm, work);
        assert!(split.cycles(Phase::Mm) > 0);
        let run = split.since(&before);
        assert_eq!((run.timed_ops(), run.fences), (1, 1));
        let mut total = run.clone();
        total.add(&run);
        assert_eq!(total.timed_ops(), 2);
    }

    #[test]
    fn every_engine_dispatches_by_name() {
        for engine in ENGINES {
            assert_eq!(engine_availability(engine), Some(Ok(())), "{engine}");
        }
        assert_eq!(engine_availability("btree"), None);
    }
}
