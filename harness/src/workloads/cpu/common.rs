//! What the `cpu` workloads share (and the `realtime` suite borrows): owned blocks that may
//! cross threads, the timed thread team, a ring of channels between neighbouring threads,
//! and pre-generated random tables.
//!
//! The timed team ([`run_timed`]) is the only place a `cpu` workload reads the clock: every
//! thread prepares (generates its tables, fills its working set), all meet at a barrier, the
//! main thread reads the clock, the threads work, all meet at a second barrier and the main
//! thread reads the clock again. One sample per run, so timer overhead is two clock reads.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use alloclab_core::HostAllocator;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::workloads::Measurement;

/// Alignment of every block the `cpu`, `realtime` and `security` workloads ask for: a
/// word's, the most their blocks hold, and what a Rust program's word-holding objects ask.
///
/// Not the 16 bytes glibc's `malloc` happens to give. The same benchmarks as C programs
/// (the `programs` suite's `c-*`) call plain `malloc`, which asks for no alignment, and the
/// `mimalloc` crate passes every alignment to `mi_malloc_aligned`: asked for 16, it
/// over-allocates a block below 16 bytes from its 32-byte blocks, and a size whose class
/// (not a power of two) has no free block at hand from the next class up, by `size + 15`
/// (100 bytes from 128-byte blocks instead of 112). On the AMD EPYC VM `mstress` at 2
/// threads took 15.7 ms under it asked for 16 and 11.5 ms asked for 8, `rptest` 17.0 and
/// 10.3 (medians of five interleaved runs); as a C program, `mstress` under the same
/// mimalloc sources built as a preload library took 13.6 ms. glibc's and alloclab's heaps
/// hand out the same blocks either way (none is below 16 bytes); jemalloc now gives an
/// 8-byte request one of its 8-byte blocks, as its `malloc(8)` does, where asked for 16 it
/// gave a 16-byte one.
pub(in crate::workloads) const ALIGN: usize = 8;
// `mstress` keeps a block's size in its first word.
const _: () = assert!(ALIGN >= core::mem::align_of::<usize>());

/// The layout of a `size`-byte block.
#[inline]
pub(in crate::workloads) fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, ALIGN).expect("workload sizes are small and non-zero")
}

/// Allocates `size` bytes and writes `tag` to its first and last byte (so that a lazily
/// mapped page is paid for now). Panics with the allocator's error if it fails: the `cpu`
/// workloads ask for modest sizes, so running out of memory is a broken run.
#[inline]
pub(in crate::workloads) fn allocate<A: HostAllocator>(
    alloc: &A,
    size: usize,
    tag: u8,
) -> NonNull<u8> {
    let ptr = alloc
        .allocate(layout(size))
        .unwrap_or_else(|e| panic!("{e}"));
    // SAFETY: the block was just allocated with `layout(size)`, so it is live and `size`
    // bytes long.
    unsafe { touch(ptr, size, tag) };
    ptr
}

/// Writes `tag` to the first and last byte of a block, so that a lazily mapped page is paid
/// for now; volatile so that the touch is not elided along with a malloc/free pair the
/// compiler can see through.
///
/// # Safety
///
/// `ptr` is a live block of at least `size >= 1` bytes that nobody else is using.
#[inline]
pub(in crate::workloads) unsafe fn touch(ptr: NonNull<u8>, size: usize, tag: u8) {
    // SAFETY: both bytes lie inside the block (caller's promise).
    unsafe {
        ptr.as_ptr().write_volatile(tag);
        ptr.as_ptr().add(size - 1).write_volatile(tag);
    }
}

/// A live block this thread owns, with the size it was allocated with.
#[derive(Debug)]
pub(in crate::workloads) struct Block {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: a `Block` is the sole owner of a live allocation (it is neither `Copy` nor
// `Clone`), so moving it to another thread moves that ownership; nobody else reads or writes
// the memory. Freeing it there is allowed because every `Allocator` is `Send + Sync`.
unsafe impl Send for Block {}

impl Block {
    /// Allocates and touches a `size`-byte block (see [`allocate`]).
    #[inline]
    pub(in crate::workloads) fn new<A: HostAllocator>(alloc: &A, size: usize, tag: u8) -> Self {
        Self {
            ptr: allocate(alloc, size, tag),
            size,
        }
    }

    /// Takes ownership of a block allocated elsewhere.
    ///
    /// # Safety
    ///
    /// `ptr` is a live block of `size` bytes allocated with [`layout`]`(size)`, owned by
    /// nobody else from now on.
    #[inline]
    pub(in crate::workloads) unsafe fn from_raw(ptr: NonNull<u8>, size: usize) -> Self {
        Self { ptr, size }
    }

    /// The start of the block.
    #[inline]
    pub(in crate::workloads) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Gives up ownership without freeing: the caller now owns the block (and must free
    /// it, with [`layout`]`(size)`, through the allocator that allocated it).
    #[inline]
    pub(in crate::workloads) fn into_raw(self) -> (NonNull<u8>, usize) {
        (self.ptr, self.size)
    }

    /// Frees the block.
    ///
    /// # Safety
    ///
    /// `alloc` is the allocator that allocated it.
    #[inline]
    pub(in crate::workloads) unsafe fn free<A: HostAllocator>(self, alloc: &A) {
        // SAFETY: the block is live, owned by `self` alone, allocated by `alloc` (caller's
        // promise) with exactly `layout(self.size)`.
        unsafe { alloc.deallocate(self.ptr, layout(self.size)) }
    }
}

/// Frees every block of `blocks` (leaving it empty, capacity kept) and returns how many.
///
/// # Safety
///
/// `alloc` allocated every block of `blocks`.
pub(in crate::workloads) unsafe fn free_all<A: HostAllocator>(
    alloc: &A,
    blocks: &mut Vec<Block>,
) -> u64 {
    let n = blocks.len() as u64;
    for block in blocks.drain(..) {
        // SAFETY: `alloc` allocated it (caller's promise).
        unsafe { block.free(alloc) };
    }
    n
}

/// A generator for thread `index` of a run seeded with `seed`: each thread has its own
/// stream, the same for every allocator.
pub(in crate::workloads) fn rng(seed: u64, index: usize) -> SmallRng {
    // Spread the index over all bits (a Weyl step) so neighbouring threads' seeds differ
    // in more than the low bits.
    SmallRng::seed_from_u64(seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A table of random values generated before the timed region and read round-robin inside
/// it, so that the timed loop pays for an array read, not for a generator. Tables read
/// together have coprime lengths (a power of two and an odd number), so their combined
/// sequence does not repeat for the product of the lengths.
pub(in crate::workloads) struct Table<T> {
    values: Box<[T]>,
    next: usize,
}

impl<T: Copy> Table<T> {
    /// `len` values drawn by `draw`.
    pub(in crate::workloads) fn new(
        len: usize,
        rng: &mut SmallRng,
        mut draw: impl FnMut(&mut SmallRng) -> T,
    ) -> Self {
        assert!(len > 0, "a table needs at least one value");
        Self {
            values: (0..len).map(|_| draw(rng)).collect(),
            next: 0,
        }
    }

    /// The next value, wrapping around at the end.
    #[inline]
    pub(in crate::workloads) fn next(&mut self) -> T {
        let value = self.values[self.next];
        self.next += 1;
        if self.next == self.values.len() {
            self.next = 0;
        }
        value
    }
}

/// A table of `len` sizes drawn uniformly from `min..=max`.
pub(in crate::workloads) fn uniform_sizes(
    len: usize,
    rng: &mut SmallRng,
    min: usize,
    max: usize,
) -> Table<u32> {
    Table::new(len, rng, |r| r.random_range(min..=max) as u32)
}

/// A table of `len` indices drawn uniformly from `0..n`.
pub(in crate::workloads) fn indices(len: usize, rng: &mut SmallRng, n: usize) -> Table<u32> {
    Table::new(len, rng, |r| r.random_range(0..n) as u32)
}

/// A size from `min..=max` (powers of two) with a log-uniform spread: a power-of-two range
/// `[2^k, 2^(k+1)]` is picked uniformly, then a size within it. Small sizes are as frequent
/// as in real programs (half the requests of 16 B-16 KiB are under 512 B).
pub(in crate::workloads) fn log_uniform_size(rng: &mut SmallRng, min: usize, max: usize) -> usize {
    debug_assert!(min.is_power_of_two() && max.is_power_of_two() && min < max);
    let k = rng.random_range(min.trailing_zeros()..max.trailing_zeros());
    rng.random_range(1usize << k..=1usize << (k + 1))
}

/// A uniform index below `n` from 32 random bits (Lemire's multiply-shift; the bias is at
/// most `n / 2^32`, nothing for a benchmark's choices).
#[inline]
pub(in crate::workloads) fn pick(word: u32, n: usize) -> usize {
    ((u64::from(word) * n as u64) >> 32) as usize
}

/// Runs `threads` threads as one timed team and measures the work between the barriers.
///
/// Thread `i` calls `prepare(i)` (untimed), waits for the whole team, then calls
/// `work(i, state)`, which returns the allocator operations it performed; the clock runs
/// from the moment every thread is prepared until every thread's `work` has returned.
///
/// The clock is read by the last thread to reach each barrier, as it arrives: at the start
/// before it lets the others go, at the end as the last work returns. A thread outside the
/// team (the caller) that read it after the barrier would read it when the scheduler next
/// gave it a core, and with the team on every core that is late: on 2 cores, a run of a
/// team of 2 was under-measured by up to the whole run that way.
///
/// A panic in `prepare` or `work` still reaches both barriers (so the others are not left
/// waiting) and is raised again once the team is done.
pub(in crate::workloads) fn run_timed<S, P, W>(threads: usize, prepare: P, work: W) -> Measurement
where
    P: Fn(usize) -> S + Sync,
    W: Fn(usize, S) -> u64 + Sync,
{
    let threads = threads.max(1);
    let start = ClockBarrier::new(threads);
    let end = ClockBarrier::new(threads);
    let (elapsed, operations) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (start, end, prepare, work) = (&start, &end, &prepare, &work);
                scope.spawn(move || {
                    let state = panic::catch_unwind(AssertUnwindSafe(|| prepare(i)));
                    let t0 = start.wait();
                    let ops =
                        state.and_then(|s| panic::catch_unwind(AssertUnwindSafe(|| work(i, s))));
                    let t1 = end.wait();
                    (t1 - t0, ops)
                })
            })
            .collect();
        let mut elapsed = core::time::Duration::ZERO;
        let mut operations = 0;
        for h in handles {
            let (took, ops) = h.join().unwrap_or_else(|p| panic::resume_unwind(p));
            elapsed = took;
            operations += ops.unwrap_or_else(|p| panic::resume_unwind(p));
        }
        (elapsed, operations)
    });
    Measurement {
        elapsed,
        operations,
        samples: 1,
        min_sample: elapsed,
    }
}

/// A barrier for a fixed number of threads whose last arrival reads the clock before it
/// releases the others, and hands every thread that reading.
pub(in crate::workloads) struct ClockBarrier {
    threads: usize,
    state: Mutex<ClockBarrierState>,
    released: Condvar,
}

struct ClockBarrierState {
    arrived: usize,
    /// Set by the last arrival.
    at: Option<Instant>,
}

impl ClockBarrier {
    /// A barrier for `threads` threads (at least 1), used once.
    pub(in crate::workloads) fn new(threads: usize) -> Self {
        Self {
            threads: threads.max(1),
            state: Mutex::new(ClockBarrierState {
                arrived: 0,
                at: None,
            }),
            released: Condvar::new(),
        }
    }

    /// Waits until every thread has arrived; returns when the last one did.
    pub(in crate::workloads) fn wait(&self) -> Instant {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.arrived += 1;
        if state.arrived == self.threads {
            let now = Instant::now();
            state.at = Some(now);
            self.released.notify_all();
            return now;
        }
        loop {
            if let Some(at) = state.at {
                return at;
            }
            state = self.released.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// One thread's place in a [`Ring`]: it takes items from its stock, then from its
/// predecessor, and passes them on to its successor.
pub(in crate::workloads) struct RingEnd<T> {
    to_next: SyncSender<T>,
    from_prev: Receiver<T>,
    stock: Vec<T>,
    depth: usize,
    passed: usize,
    received: usize,
}

impl<T> RingEnd<T> {
    /// Adds `items` to this thread's stock, which it works on before anything its
    /// predecessor passes. Panics if the stock would exceed the ring's depth.
    pub(in crate::workloads) fn restock(&mut self, items: impl IntoIterator<Item = T>) {
        self.stock.extend(items);
        assert!(
            self.stock.len() <= self.depth,
            "more stock than the ring has room for"
        );
    }

    /// The next item to work on: from this thread's stock while it lasts, then from the
    /// previous thread (waiting for it). Panics if that thread is gone (it panicked) rather
    /// than waiting forever.
    pub(in crate::workloads) fn next(&mut self) -> T {
        if let Some(item) = self.stock.pop() {
            return item;
        }
        self.received += 1;
        self.from_prev
            .recv()
            .unwrap_or_else(|_| panic!("the previous thread of the ring stopped early"))
    }

    /// Passes `item` to the next thread, waiting while its queue is full. Panics if that
    /// thread is gone.
    pub(in crate::workloads) fn pass(&mut self, item: T) {
        self.passed += 1;
        if self.to_next.send(item).is_err() {
            panic!("the next thread of the ring stopped early");
        }
    }

    /// What this thread still holds or is owed once it is done: the rest of its stock, and
    /// the items the previous thread passed that it has not taken (waiting for them). Every
    /// thread of the ring must pass the same number of items in all.
    pub(in crate::workloads) fn finish(mut self) -> impl Iterator<Item = T> {
        let owed = self.passed - self.received;
        let stock = core::mem::take(&mut self.stock);
        stock.into_iter().chain((0..owed).map(move |_| self.next()))
    }
}

/// A ring of threads, each passing items to the next (`i` to `(i + 1) % n`) over a bounded
/// queue; with one thread, the thread passes to itself. Each thread joins once, bringing a
/// stock of at most `depth` items ([`RingEnd::restock`]).
///
/// The stock is the ring's slack: a thread works on its stock first, so that in steady
/// state every queue holds items and a thread waits only when it is `depth` items ahead of
/// its predecessor (in lockstep, each hand-over would put a thread to sleep and wake it, and
/// that would be what the workload measured).
///
/// No deadlock, as long as every thread alternates [`next`](RingEnd::next) and
/// [`pass`](RingEnd::pass) and passes the same number of items: before a pass a thread has
/// passed fewer than `depth` items more than it received, so the queues cannot all be full
/// at once, and a thread waiting to receive has a predecessor that has not passed yet.
pub(in crate::workloads) struct Ring<T> {
    ends: Vec<Mutex<Option<RingEnd<T>>>>,
}

impl<T> Ring<T> {
    /// A ring of `n` threads whose queues hold `depth` items (at least 1).
    pub(in crate::workloads) fn new(n: usize, depth: usize) -> Self {
        let (n, depth) = (n.max(1), depth.max(1));
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| sync_channel(depth)).unzip();
        // Thread i receives on channel i and sends on channel (i + 1) % n.
        let mut senders: Vec<Option<SyncSender<T>>> = senders.into_iter().map(Some).collect();
        let ends = receivers
            .into_iter()
            .enumerate()
            .map(|(i, from_prev)| {
                let to_next = senders[(i + 1) % n]
                    .take()
                    .expect("each sender is taken once");
                Mutex::new(Some(RingEnd {
                    to_next,
                    from_prev,
                    stock: Vec::new(),
                    depth,
                    passed: 0,
                    received: 0,
                }))
            })
            .collect();
        Self { ends }
    }

    /// Thread `i` joins, with no stock yet. Panics if `i` joins twice. Join before anything
    /// that may fail, so that if this thread panics its neighbours see it go instead of
    /// waiting for it.
    pub(in crate::workloads) fn join(&self, i: usize) -> RingEnd<T> {
        self.ends[i]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("each thread joins the ring once")
    }
}

#[cfg(test)]
mod tests {
    use std::panic::AssertUnwindSafe;
    use std::time::{Duration, Instant};

    #[test]
    fn the_clock_barrier_hands_every_thread_the_last_arrival_time() {
        let barrier = super::ClockBarrier::new(3);
        let got: Vec<(Instant, Instant, Instant)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3u64)
                .map(|i| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        std::thread::sleep(Duration::from_millis(20 * i));
                        let arrived = Instant::now();
                        let at = barrier.wait();
                        (arrived, at, Instant::now())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let last_arrival = got.iter().map(|g| g.0).max().unwrap();
        for (arrived, at, left) in &got {
            assert_eq!(*at, got[0].1, "every thread gets the same reading");
            assert!(
                *at >= last_arrival && *at >= *arrived,
                "read after everyone arrived"
            );
            assert!(*at <= *left, "read before anyone left");
        }
    }

    #[test]
    fn a_timed_team_measures_its_slowest_thread() {
        let m = super::run_timed(
            2,
            |_| (),
            |i, ()| {
                std::thread::sleep(Duration::from_millis(10 + 30 * i as u64));
                1
            },
        );
        assert_eq!(m.operations, 2);
        assert!(m.elapsed >= Duration::from_millis(40), "{:?}", m.elapsed);
    }

    use alloclab_core::{Checked, Policy, SystemHeap};

    use super::super::CpuWorkload;
    use crate::workloads::{Params, Scale};

    fn params(threads: usize, seed: u64) -> Params {
        Params {
            threads,
            scale: Scale::Tiny,
            seed,
        }
    }

    fn checked_run(workload: CpuWorkload, params: &Params) -> u64 {
        let heap = Checked::with_policy(SystemHeap::new(), Policy::Record);
        let m = workload.run(&heap, params);
        let violations = heap.violations();
        assert!(violations.is_empty(), "{}: {violations:?}", workload.name());
        assert_eq!(heap.live_blocks(), 0, "{}: blocks leaked", workload.name());
        assert!(m.operations > 0, "{}: no operations", workload.name());
        assert!(!m.elapsed.is_zero(), "{}: zero elapsed", workload.name());
        assert_eq!(m.samples, 1);
        assert_eq!(m.min_sample, m.elapsed);
        m.operations
    }

    /// For each workload, a module with two tests: two checked runs at two threads with the
    /// same seed (clean, no leak, same operation count), and checked runs at one thread
    /// (rings send to themselves) and three (more threads than cores).
    macro_rules! workload_tests {
        ($($name:ident => $workload:expr,)*) => {
            $(
                mod $name {
                    use super::*;

                    #[test]
                    fn is_clean_and_deterministic() {
                        let w = $workload;
                        let first = checked_run(w, &params(2, 7));
                        let again = checked_run(w, &params(2, 7));
                        let name = w.name();
                        assert_eq!(first, again, "{name}: same seed, different operation count");
                    }

                    #[test]
                    fn is_clean_with_one_thread_and_with_three() {
                        checked_run($workload, &params(1, 7));
                        checked_run($workload, &params(3, 11));
                    }
                }
            )*
        };
    }

    workload_tests! {
        larson => CpuWorkload::Larson,
        xmalloc_test => CpuWorkload::XmallocTest,
        cache_scratch => CpuWorkload::CacheScratch,
        cache_thrash => CpuWorkload::CacheThrash,
        glibc_simple => CpuWorkload::GlibcSimple,
        glibc_thread => CpuWorkload::GlibcThread,
        mstress => CpuWorkload::Mstress,
        rptest => CpuWorkload::Rptest,
    }

    #[test]
    fn glibc_simple_runs_one_thread_whatever_it_is_asked() {
        let heap = SystemHeap::new();
        let one = CpuWorkload::GlibcSimple.run(&heap, &params(1, 3));
        let four = CpuWorkload::GlibcSimple.run(&heap, &params(4, 3));
        assert_eq!(one.operations, four.operations);
    }

    #[test]
    fn a_panicking_thread_does_not_hang_the_team() {
        let result = std::panic::catch_unwind(|| {
            super::run_timed(
                3,
                |_| (),
                |i, ()| {
                    assert_ne!(i, 1, "thread 1 fails");
                    1
                },
            )
        });
        assert!(result.is_err());
    }

    #[test]
    fn a_thread_that_fails_does_not_hang_its_ring() {
        let ring = super::Ring::<usize>::new(3, 2);
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            super::run_timed(
                3,
                |i| {
                    let mut end = ring.join(i);
                    end.restock([i, i]);
                    end
                },
                |i, mut end| {
                    assert_ne!(i, 1, "thread 1 fails");
                    for _ in 0..10 {
                        let item = end.next();
                        end.pass(item);
                    }
                    end.finish().count() as u64
                },
            )
        }));
        assert!(result.is_err());
    }

    #[test]
    fn a_ring_passes_items_to_the_next_thread_and_settles_its_debts() {
        for threads in 1..=3 {
            let ring = super::Ring::<usize>::new(threads, 2);
            let m = super::run_timed(
                threads,
                |i| {
                    let mut end = ring.join(i);
                    end.restock([i]);
                    end
                },
                |i, mut end| {
                    let mine = end.next();
                    assert_eq!(mine, i);
                    end.pass(mine);
                    let from_prev = end.next();
                    assert_eq!(from_prev, (i + threads - 1) % threads);
                    end.pass(from_prev);
                    let owed: Vec<usize> = end.finish().collect();
                    assert_eq!(owed, [(i + 2 * threads - 2) % threads]);
                    1
                },
            );
            assert_eq!(m.operations, threads as u64);
        }
    }

    #[test]
    fn a_ring_hands_back_unused_stock() {
        let ring = super::Ring::<usize>::new(2, 3);
        super::run_timed(
            2,
            |i| {
                let mut end = ring.join(i);
                end.restock([10 * i, 10 * i + 1, 10 * i + 2]);
                end
            },
            |i, mut end| {
                let item = end.next();
                end.pass(item);
                let mut rest: Vec<usize> = end.finish().collect();
                rest.sort_unstable();
                // Its last stock item went first; two are left, and it is owed one.
                let prev = 1 - i;
                let mut expected = vec![10 * i, 10 * i + 1, 10 * prev + 2];
                expected.sort_unstable();
                assert_eq!(rest, expected);
                1
            },
        );
    }

    #[test]
    fn the_workloads_requests_reach_mimallocs_own_size_classes() {
        use alloclab_core::Allocator;
        // mimalloc keeps 8-byte blocks 8 bytes apart, as its `malloc(8)` hands them out;
        // asked for 16-byte alignment, the mimalloc crate over-allocates each from its
        // 32-byte blocks instead.
        let heap = &crate::peers::MIMALLOC;
        let mut blocks: Vec<usize> = (0..64)
            .map(|_| heap.allocate(super::layout(8)).expect("8 bytes").as_ptr() as usize)
            .collect();
        blocks.sort_unstable();
        let closest = blocks
            .windows(2)
            .map(|w| w[1] - w[0])
            .min()
            .expect("64 blocks");
        for &p in &blocks {
            let p = core::ptr::NonNull::new(p as *mut u8).expect("allocated");
            // SAFETY: allocated just above with this layout, freed once.
            unsafe { heap.deallocate(p, super::layout(8)) };
        }
        assert_eq!(closest, 8, "8-byte blocks at least {closest} bytes apart");
    }
}
