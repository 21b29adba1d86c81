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

use std::cell::Cell;
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

    /// Frees every block of `frees`, as [`dealloc_many`](Self::dealloc_many), then allocates
    /// `size` bytes, as [`alloc`](Self::alloc): for an engine that gives blocks back where it
    /// takes a new one (a transaction that frees what an earlier one unlinked), so that a
    /// heap that can do both for the price of one visit to its allocator does
    /// (alloclab-pmem: one visit to the thread's cache); the default makes the two calls.
    ///
    /// # Errors
    ///
    /// The first block refused, as [`dealloc_many`](Self::dealloc_many) (every other block
    /// is still freed, and nothing is allocated); then as [`alloc`](Self::alloc). A heap
    /// may hand the last block of `frees` straight back as the allocation without checking
    /// it (alloclab-pmem does, when its size class fits), so a block that is not live need
    /// not be refused here.
    ///
    /// # Safety
    ///
    /// As [`dealloc`](Self::dealloc), for every block of `frees`; besides, every block of
    /// `frees` is live (allocated, and not freed since).
    unsafe fn dealloc_many_then_alloc(&self, frees: &[u64], size: usize) -> Result<u64, String> {
        // SAFETY: the caller's contract.
        unsafe { self.dealloc_many(frees) }?;
        self.alloc(size)
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
/// Each span also carries about one clock read: the `storage_split` example prints what
/// an empty span is attributed on this machine. Shares are not corrected for it, so a
/// phase made of many short spans (memory management with a fast heap) is overstated.
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
    fn untimed_operations_add_no_cycles_but_count_flushes_and_timed_ones_are_counted() {
        let heap = DramStorage::new(64).unwrap();
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
