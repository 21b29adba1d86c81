//! Storage engines in the style of N-Store over persistent heaps, for the `storage` suite.
//!
//! * [`PHeap`]: a persistent heap as an engine sees it — the pluggable allocator interface
//!   of N-Store (allocate, deallocate, root, recovery) with the two crash-atomic calls that
//!   store the block into, or clear it from, a persistent word ([`PHeap::alloc_into`],
//!   [`PHeap::free_from`]), and the engine's own flush and fence.
//! * [`PoolFile`]: the heaps that live in a pool file (created and reopened by path).
//! * [`Engine`]: a key–value storage engine on a `PHeap`, one instance per partition.
//! * [`Split`]: where an engine's time goes — index, crash consistency, memory management,
//!   modification — in cycles, for the time-split chart.
//!
//! # Offsets, not addresses
//!
//! Everything persistent names a block by its 8-byte offset from [`PHeap::at`]`(0)`; 0 is
//! null. alloclab-pmem's `PPtr` is that offset; PMDK's `PMEMoid.off` is too (the pool UUID
//! is the heap's); the DRAM baseline's offsets are addresses (its base is 0).
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

pub mod alloclab;
mod blocks;
pub mod crash;
mod dram;
pub mod engines;
mod pmdk;

use std::path::Path;
use std::sync::Arc;

pub use alloclab_pmem::PersistStats;
pub use blocks::{BlockTable, Known};
pub use dram::DramStorage;
pub use pmdk::{PmdkStorage, STORAGE_LAYOUT};

/// alloclab-pmem as the `storage` suite opens it: a pool file on the best medium here
/// (libpmem, else native CLWB/CLFLUSHOPT).
pub type AlloclabPmemStorage = alloclab_pmem::PersistentHeap<Box<dyn alloclab_pmem::Medium>>;

/// Something to do with a storage heap, whatever its type: the way to run a generic
/// workload on a heap chosen by name at run time, monomorphised for each.
pub trait StorageHeapTask {
    /// What the task returns.
    type Output;
    /// Runs the task with the heap type `H`.
    fn run<H: PoolFile>(self) -> Self::Output;
}

/// Runs `task` with the storage heap registered as `name` (the `pmem` suite's names:
/// `pmdk`, `alloclab-pmem`, `dram`): `None` if no persistent heap has that name.
pub fn with_storage_heap<T: StorageHeapTask>(name: &str, task: T) -> Option<T::Output> {
    // Keep the match in step with peers::ALLOCATORS (a test checks it).
    Some(match name {
        "pmdk" => task.run::<PmdkStorage>(),
        "alloclab-pmem" => task.run::<AlloclabPmemStorage>(),
        "dram" => task.run::<DramStorage>(),
        _ => return None,
    })
}

/// The engines of the `storage` suite, in report order.
pub const ENGINES: &[&str] = &["inp", "lsm", "cow"];

/// Something to do with an engine on the heap type `H`, whatever the engine's type.
pub trait EngineTask<H: PHeap> {
    /// What the task returns.
    type Output;
    /// Runs the task with the engine type `E`.
    fn run<E: Engine<H>>(self) -> Self::Output;
}

/// Runs `task` with the engine registered as `name` (one of [`ENGINES`]) on the heap type
/// `H`: `None` if no engine has that name, `Some(Err(reason))` if it is not built in this
/// branch.
pub fn with_engine<H: PHeap, T: EngineTask<H>>(
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
    struct Probe;
    impl EngineTask<DramStorage> for Probe {
        type Output = ();
        fn run<E: Engine<DramStorage>>(self) {}
    }
    with_engine::<DramStorage, _>(name, Probe)
}

/// A persistent heap as the storage engines see it (see the [module documentation](self)).
///
/// Every `*mut u64` destination must be an 8-byte-aligned word inside the heap's root or a
/// live block. "Durable" means flushed and fenced: after a crash the word holds the value.
pub trait PHeap: Send + Sync + 'static {
    /// The root: [`root_size`](Self::root_size) bytes, cache-line aligned, zeroed when the
    /// heap was created, where engines keep their partitions' roots.
    fn root(&self) -> *mut u8;

    /// Bytes in the root.
    fn root_size(&self) -> usize;

    /// The address of the block at offset `off` (0 gives a null pointer).
    fn at(&self, off: u64) -> *mut u8;

    /// The offset of `p`, an address inside the heap (the inverse of [`at`](Self::at)).
    fn offset_of(&self, p: *const u8) -> u64;

    /// Allocates `size` bytes (N-Store's `allocate`): the block is the caller's to fill and
    /// to link, durably, from a persistent structure. A crash before the link is durable
    /// frees it in heaps that recover by reachability (alloclab-pmem) and may leak it in
    /// heaps that persist their allocation state (PMDK), as in N-Store.
    ///
    /// # Errors
    ///
    /// Zero or too large a size, out of space, the heap failed; a one-line message.
    fn alloc(&self, size: usize) -> Result<u64, String>;

    /// Frees the block at `off` (N-Store's `deallocate`), which the caller has already
    /// unlinked durably.
    ///
    /// # Errors
    ///
    /// `off` is not the start of a live block (a double free included); nothing changes.
    ///
    /// # Safety
    ///
    /// No durable word reachable from the root may still name the block, and no pointer
    /// into it may be used after the call.
    unsafe fn dealloc(&self, off: u64) -> Result<(), String>;

    /// Allocates one block of each of `sizes`, as [`alloc`](Self::alloc) does each, and
    /// appends their offsets to `out` in order: all of them, or none (on error the blocks
    /// taken for earlier sizes are freed and `out` is as it was). For an engine that needs
    /// several blocks for one operation: a heap that can take them for the price of one
    /// visit to its allocator does (alloclab-pmem: one visit to the thread's cache; PMDK:
    /// one `pmemobj_publish`); the default takes them one by one.
    ///
    /// # Errors
    ///
    /// As [`alloc`](Self::alloc), for the first size that fails.
    fn alloc_many(&self, sizes: &[usize], out: &mut Vec<u64>) -> Result<(), String> {
        let start = out.len();
        for &size in sizes {
            match self.alloc(size) {
                Ok(off) => out.push(off),
                Err(e) => {
                    for off in out.drain(start..) {
                        // SAFETY: allocated just now, linked nowhere, not used again.
                        let _ = unsafe { self.dealloc(off) };
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Frees every block of `offs`, as [`dealloc`](Self::dealloc) does each (a heap that
    /// can free them for the price of one visit to its allocator does; the default frees
    /// them one by one).
    ///
    /// # Errors
    ///
    /// The first block refused, which changes nothing; every other block is still freed.
    ///
    /// # Safety
    ///
    /// As [`dealloc`](Self::dealloc), for every block.
    unsafe fn dealloc_many(&self, offs: &[u64]) -> Result<(), String> {
        let mut first = Ok(());
        for &off in offs {
            // SAFETY: the caller's contract, for each block.
            let freed = unsafe { self.dealloc(off) };
            if first.is_ok() {
                first = freed;
            }
        }
        first
    }

    /// Allocates `size` bytes and stores the block's offset into `dest`, atomically with
    /// respect to a crash: after one, `dest` holds its old value (and the block is free) or
    /// the block (and it is live). Returns the offset.
    ///
    /// # Errors
    ///
    /// As [`alloc`](Self::alloc); `dest` outside the heap. Nothing is written on error.
    ///
    /// # Safety
    ///
    /// `dest` is an aligned word of the root or of a live block that no other thread
    /// accesses during the call; whatever block it named before is the caller's to free.
    unsafe fn alloc_into(&self, dest: *mut u64, size: usize) -> Result<u64, String>;

    /// Frees the block `dest` names and stores 0 into `dest`, atomically with respect to a
    /// crash.
    ///
    /// # Errors
    ///
    /// `dest` holds 0 or not the start of a live block; nothing is written.
    ///
    /// # Safety
    ///
    /// As [`alloc_into`](Self::alloc_into); no pointer into the block may be used after it.
    unsafe fn free_from(&self, dest: *mut u64) -> Result<(), String>;

    /// Writes back the cache lines of `len` bytes at `p` (an address inside the heap)
    /// toward persistence; durable after the next [`fence`](Self::fence).
    fn flush(&self, p: *const u8, len: usize);

    /// Orders every earlier flush: what they covered is durable once this returns.
    fn fence(&self);

    /// [`flush`](Self::flush) then [`fence`](Self::fence).
    fn persist(&self, p: *const u8, len: usize) {
        self.flush(p, len);
        self.fence();
    }

    /// The bytes a block asked for with `size` really spans (its size class), so that an
    /// engine can initialise all of it: a reused block's unrequested tail may hold stale
    /// words equal to block offsets, which a heap that recovers by conservative reachability
    /// (alloclab-pmem) would take for links (a leak). Engines ask for this many bytes. The
    /// default is `size` (heaps whose recovery never reads block contents).
    fn usable_size(&self, size: usize) -> usize {
        size
    }

    /// Flushes and fences so far, all threads together (for flushes, fences and bytes per
    /// operation), or `None` where the heap does not count them (PMDK, which flushes
    /// inside the library; its engines' own flushes are still counted by [`Split`]).
    fn persist_counts(&self) -> Option<PersistStats>;
}

/// A [`PHeap`] that lives in a pool file.
pub trait PoolFile: PHeap + Sized {
    /// The name the harness knows the heap by (`alloclab-pmem`, `pmdk`, `dram`).
    const NAME: &'static str;

    /// Whether the heap survives its process (`false` for the DRAM baseline, which has no
    /// recovery to measure and whose [`open`](Self::open) fails).
    const DURABLE: bool = true;

    /// Whether the heap can be used here; a one-line reason if not (a missing library).
    ///
    /// # Errors
    ///
    /// The reason.
    fn available() -> Result<(), String> {
        Ok(())
    }

    /// Creates a pool of `pool_bytes` at `path` (which must not exist) with a zeroed root of
    /// `root_size` bytes.
    ///
    /// # Errors
    ///
    /// A one-line message naming the path.
    fn create(path: &Path, pool_bytes: usize, root_size: usize) -> Result<Self, String>;

    /// Opens the pool at `path`, recovering the heap (what heap recovery time measures).
    ///
    /// # Errors
    ///
    /// A one-line message naming the path.
    fn open(path: &Path) -> Result<Self, String>;
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
    /// Memory management: every call into the heap's allocator (`alloc`, `dealloc`,
    /// `alloc_into`, `free_from`), including the flushes and fences inside it.
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
/// # The clock's own cost, and its correction
///
/// Each span also carries about one clock read: an empty span is attributed 17–45 ns on
/// the project's 2-core VM (the `storage_split` example prints it), which is most of a
/// span around one alloclab-pmem allocation, so a phase made of many short spans (memory
/// management with a fast heap) is overstated. A split therefore keeps two totals per
/// phase:
///
/// * **raw** ([`raw_cycles`](Self::raw_cycles), [`raw_share`](Self::raw_share)): the sum
///   of the spans as measured;
/// * **corrected** ([`cycles`](Self::cycles), [`share`](Self::share)): the sum of the spans
///   less the split's per-span overhead each, never below zero for any span
///   (`span.saturating_sub(overhead)`).
///
/// The overhead is 0 (corrected = raw) until [`calibrate`](Self::calibrate) measures it on
/// the calling thread: the median, over rounds, of the mean attribution of back-to-back
/// empty spans. The `storage` driver calibrates every worker's split after loading and
/// before the run phase, so the same correction rule applies to every phase, heap, engine
/// and thread count. (On this VM one alloclab-pmem `alloc_many` of one node measured
/// 32 ns per call in its own span, 17 ns as the empty span, and 15 ns per call with one
/// span around 256 calls: the corrected 15 ns matches the batched figure; the
/// `storage_split` example repeats that check.)
///
/// And `rdtsc` is not ordered by `SFENCE`: the wait for a fence's write-backs lands in
/// whichever span next needs them to be done (a flush, a locked instruction), not
/// necessarily in the fence's own [`Phase::Cc`] span.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Per phase: the spans less `span_overhead` each (saturating).
    cycles: [u64; 4],
    /// Per phase: the spans as measured.
    raw: [u64; 4],
    /// Per phase: the number of spans.
    spans: [u64; 4],
    /// Cycles subtracted from each span (0 until calibrated).
    span_overhead: u64,
    /// Flush calls the engine made itself.
    pub flushes: u64,
    /// Fences the engine made itself.
    pub fences: u64,
    /// Bytes the engine's own flushes covered.
    pub bytes_flushed: u64,
}

impl Split {
    /// Runs `f`, adding its duration to `phase`.
    #[inline]
    pub fn time<R>(&mut self, phase: Phase, f: impl FnOnce() -> R) -> R {
        let start = now();
        let r = f();
        let span = now().wrapping_sub(start);
        self.record(phase, span);
        r
    }

    /// Adds one span of `span` cycles to `phase`: as measured to the raw total, less the
    /// per-span overhead (never below zero) to the corrected one.
    #[inline]
    fn record(&mut self, phase: Phase, span: u64) {
        let p = phase as usize;
        self.raw[p] += span;
        self.cycles[p] += span.saturating_sub(self.span_overhead);
        self.spans[p] += 1;
    }

    /// Measures what the clock attributes to an empty span on the calling thread (the
    /// median over [`CALIBRATION_ROUNDS`](Self::CALIBRATION_ROUNDS) rounds of the mean of
    /// [`CALIBRATION_SPANS`](Self::CALIBRATION_SPANS) back-to-back empty spans), makes it
    /// this split's per-span overhead for the spans timed from now on, and returns it.
    pub fn calibrate(&mut self) -> u64 {
        let mut means: Vec<u64> = (0..Self::CALIBRATION_ROUNDS)
            .map(|_| {
                let mut probe = Split::default();
                for i in 0..Self::CALIBRATION_SPANS {
                    probe.time(Phase::Mm, || std::hint::black_box(i));
                }
                probe.raw_cycles(Phase::Mm) / Self::CALIBRATION_SPANS as u64
            })
            .collect();
        means.sort_unstable();
        self.span_overhead = means[means.len() / 2];
        self.span_overhead
    }

    /// Rounds of [`calibrate`](Self::calibrate).
    pub const CALIBRATION_ROUNDS: usize = 33;
    /// Empty spans per round of [`calibrate`](Self::calibrate).
    pub const CALIBRATION_SPANS: usize = 256;

    /// Sets the per-span overhead by hand (tests; the driver uses
    /// [`calibrate`](Self::calibrate)).
    pub fn set_span_overhead(&mut self, cycles: u64) {
        self.span_overhead = cycles;
    }

    /// The cycles subtracted from each span timed now (0 until calibrated).
    pub fn span_overhead(&self) -> u64 {
        self.span_overhead
    }

    /// Cycles (or nanoseconds where there is no cycle counter) spent in `phase`, corrected
    /// for the clock's per-span overhead (see [the type's documentation](Self)).
    pub fn cycles(&self, phase: Phase) -> u64 {
        self.cycles[phase as usize]
    }

    /// Cycles spent in `phase` as measured, with no correction.
    pub fn raw_cycles(&self, phase: Phase) -> u64 {
        self.raw[phase as usize]
    }

    /// Spans timed under `phase`.
    pub fn spans(&self, phase: Phase) -> u64 {
        self.spans[phase as usize]
    }

    /// `phase`'s share of the four phases' corrected total, in `0.0..=1.0` (0 when nothing
    /// was timed).
    pub fn share(&self, phase: Phase) -> f64 {
        share_of(&self.cycles, phase)
    }

    /// `phase`'s share of the four phases' raw total (no correction), in `0.0..=1.0`.
    pub fn raw_share(&self, phase: Phase) -> f64 {
        share_of(&self.raw, phase)
    }

    /// Adds another instance's split (to total the threads); the per-span overhead stays
    /// this split's own.
    pub fn add(&mut self, other: &Split) {
        for (a, b) in self.cycles.iter_mut().zip(other.cycles) {
            *a += b;
        }
        for (a, b) in self.raw.iter_mut().zip(other.raw) {
            *a += b;
        }
        for (a, b) in self.spans.iter_mut().zip(other.spans) {
            *a += b;
        }
        self.flushes += other.flushes;
        self.fences += other.fences;
        self.bytes_flushed += other.bytes_flushed;
    }

    /// What was added to this split since `earlier`, a snapshot of it (a split only grows).
    pub fn since(&self, earlier: &Split) -> Split {
        Split {
            cycles: std::array::from_fn(|i| self.cycles[i].saturating_sub(earlier.cycles[i])),
            raw: std::array::from_fn(|i| self.raw[i].saturating_sub(earlier.raw[i])),
            spans: std::array::from_fn(|i| self.spans[i].saturating_sub(earlier.spans[i])),
            span_overhead: self.span_overhead,
            flushes: self.flushes.saturating_sub(earlier.flushes),
            fences: self.fences.saturating_sub(earlier.fences),
            bytes_flushed: self.bytes_flushed.saturating_sub(earlier.bytes_flushed),
        }
    }

    /// A split of the given cycles per phase (in [`Phase::ALL`] order, raw and corrected
    /// alike) and no flushes, for tests and reports.
    pub fn from_cycles(cycles: [u64; 4]) -> Split {
        Split {
            cycles,
            raw: cycles,
            ..Split::default()
        }
    }

    /// Flushes `len` bytes at `p` through `heap`, counted, under [`Phase::Cc`].
    pub fn flush<H: PHeap + ?Sized>(&mut self, heap: &H, p: *const u8, len: usize) {
        self.flushes += 1;
        self.bytes_flushed += len as u64;
        self.time(Phase::Cc, || heap.flush(p, len));
    }

    /// Fences through `heap`, counted, under [`Phase::Cc`].
    pub fn fence<H: PHeap + ?Sized>(&mut self, heap: &H) {
        self.fences += 1;
        self.time(Phase::Cc, || heap.fence());
    }

    /// [`flush`](Self::flush) then [`fence`](Self::fence).
    pub fn persist<H: PHeap + ?Sized>(&mut self, heap: &H, p: *const u8, len: usize) {
        self.flush(heap, p, len);
        self.fence(heap);
    }
}

/// `phase`'s share of the sum of `cycles`, in `0.0..=1.0` (0 when the sum is 0).
fn share_of(cycles: &[u64; 4], phase: Phase) -> f64 {
    let total: u64 = cycles.iter().sum();
    if total == 0 {
        0.0
    } else {
        cycles[phase as usize] as f64 / total as f64
    }
}

/// The cycle counter (x86-64 `rdtsc`), or monotonic nanoseconds elsewhere.
#[inline]
fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` has no preconditions on x86-64.
        unsafe { core::arch::x86_64::_rdtsc() }
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
/// by one thread (see the [module documentation](self)).
///
/// Keys are any `u64`; values are byte strings (a YCSB tuple of five 200-byte columns is
/// one 1,000-byte value; the variable-size mix uses 1–256 bytes). An operation is
/// *committed* once a later [`commit`](Self::commit) has returned; the driver calls it
/// after every [`COMMIT_EVERY`](Self::COMMIT_EVERY) operations and at the end. After a
/// crash, [`recover`](Self::recover) must show every committed operation and none of the
/// operations after the last commit that returned, except that operations of the commit
/// that was in flight are all there or all gone.
pub trait Engine<H: PHeap>: Sized + Send {
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

    /// The same split, for the driver to [`calibrate`](Split::calibrate) before it times.
    fn split_mut(&mut self) -> &mut Split;

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
    use crate::peers::{ALLOCATORS, Capability};

    #[test]
    fn the_per_span_correction_subtracts_the_overhead_from_each_span_never_below_zero() {
        let mut split = Split::default();
        // Uncalibrated: corrected = raw.
        split.record(Phase::Cc, 7);
        assert_eq!(
            (split.cycles(Phase::Cc), split.raw_cycles(Phase::Cc)),
            (7, 7)
        );
        split.set_span_overhead(10);
        let before = split.clone();
        for span in [25, 5, 10] {
            split.record(Phase::Mm, span);
        }
        split.record(Phase::Index, 100);
        // 25 − 10, then 5 and 10 clamp at 0 (not −5 taken from the 25).
        assert_eq!(split.cycles(Phase::Mm), 15);
        assert_eq!(split.raw_cycles(Phase::Mm), 40);
        assert_eq!(split.spans(Phase::Mm), 3);
        assert_eq!(split.cycles(Phase::Index), 90);
        assert_eq!(split.raw_cycles(Phase::Index), 100);
        // Shares: corrected over the corrected total, raw over the raw total.
        assert!((split.share(Phase::Mm) - 15.0 / (7.0 + 15.0 + 90.0)).abs() < 1e-12);
        assert!((split.raw_share(Phase::Mm) - 40.0 / (7.0 + 40.0 + 100.0)).abs() < 1e-12);
        // What was added since the snapshot, and totals over threads, keep both.
        let ran = split.since(&before);
        assert_eq!(ran.cycles(Phase::Cc), 0);
        assert_eq!((ran.cycles(Phase::Mm), ran.raw_cycles(Phase::Mm)), (15, 40));
        assert_eq!(ran.span_overhead(), 10);
        let mut total = Split::default();
        total.add(&ran);
        total.add(&ran);
        assert_eq!(total.cycles(Phase::Mm), 30);
        assert_eq!(total.raw_cycles(Phase::Index), 200);
        assert_eq!(total.spans(Phase::Mm), 6);
        assert_eq!(
            total.span_overhead(),
            0,
            "the total's own, not the workers'"
        );
    }

    #[test]
    fn calibration_sets_the_overhead_the_spans_after_it_lose() {
        let mut split = Split::default();
        let overhead = split.calibrate();
        assert_eq!(split.span_overhead(), overhead);
        #[cfg(target_arch = "x86_64")]
        assert!(overhead > 0, "two rdtsc reads never return the same count");
        for i in 0..1000u64 {
            split.time(Phase::Mm, || std::hint::black_box(i));
        }
        let (raw, corrected) = (split.raw_cycles(Phase::Mm), split.cycles(Phase::Mm));
        assert!(corrected <= raw);
        // Each span loses at most the overhead, and none goes below zero.
        assert!(raw - corrected <= 1000 * overhead);
        assert_eq!(split.spans(Phase::Mm), 1000);
    }

    #[test]
    fn every_engine_and_every_persistent_heap_dispatches_by_name() {
        for engine in ENGINES {
            assert_eq!(engine_availability(engine), Some(Ok(())), "{engine}");
        }
        assert_eq!(engine_availability("btree"), None);
        struct Name;
        impl StorageHeapTask for Name {
            type Output = &'static str;
            fn run<H: PoolFile>(self) -> &'static str {
                H::NAME
            }
        }
        for a in ALLOCATORS {
            let name = with_storage_heap(a.name, Name);
            if a.fits(Capability::PersistentHeap) {
                assert_eq!(name, Some(a.name));
            } else {
                assert_eq!(name, None, "{}", a.name);
            }
        }
    }
}
