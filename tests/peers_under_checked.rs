//! Every host-heap peer in the harness registry, run under [`Checked`] on random operation
//! sequences, keeps its contract: no overlap, alignment honoured, zeroed memory zero,
//! contents kept by `reallocate`, nothing left live once everything is freed — on one thread
//! and with blocks freed on another thread than the one that allocated them.
//!
//! The peers are found through `alloclab_harness::peers::ALLOCATORS` and dispatched with
//! `with_host_heap`, so a peer added to the registry is tested here without editing this file.
//!
//! The peers are `&'static` statics and `Checked` takes its allocator by value, and the core
//! has no blanket `Allocator` impl for `&A`: [`Peer`] is the thin wrapper that forwards.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Barrier, LazyLock};
use std::thread;

use alloclab::{AllocError, Allocator, Checked, HostAllocator, Policy, Stats};
use alloclab_harness::peers::{ALLOCATORS, Capability, HostHeapTask, with_host_heap};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{TestCaseError, TestRunner};

/// Random sequences per peer, single-threaded.
const SINGLE_THREADED_CASES: u32 = 512;
/// Random 4-thread runs per peer.
const MULTI_THREADED_CASES: u32 = 96;
const THREADS: usize = 4;
const MAX_OPS: usize = 48;
const MAX_SIZE: usize = 8192;
const MAX_ALIGN_LOG2: u32 = 12;

// ---------------------------------------------------------------------------------------------
// A `&'static` peer as an owned allocator
// ---------------------------------------------------------------------------------------------

/// A `&'static` host heap as an allocator `Checked` can own.
struct Peer<A: 'static>(&'static A);

impl<A: HostAllocator> Allocator for Peer<A> {
    type Handle = NonNull<u8>;

    fn allocate(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.0.allocate(layout)
    }

    unsafe fn deallocate(&self, handle: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded under the caller's guarantee.
        unsafe { self.0.deallocate(handle, layout) }
    }

    fn name(&self) -> &str {
        self.0.name()
    }

    fn stats(&self) -> Stats {
        self.0.stats()
    }
}

impl<A: HostAllocator> HostAllocator for Peer<A> {
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        self.0.allocate_zeroed(layout)
    }

    unsafe fn reallocate(
        &self,
        ptr: NonNull<u8>,
        old_layout: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        // SAFETY: forwarded under the caller's guarantee.
        unsafe { self.0.reallocate(ptr, old_layout, new_size) }
    }
}

// ---------------------------------------------------------------------------------------------
// Operations and the block contents they check
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        size: usize,
        align_log2: u32,
    },
    AllocZeroed {
        size: usize,
        align_log2: u32,
    },
    Free {
        which: Index,
    },
    Realloc {
        which: Index,
        new_size: usize,
    },
    /// Multi-threaded runs only: hand a live block to the next thread, which frees it.
    Give {
        which: Index,
    },
}

fn size() -> impl Strategy<Value = usize> {
    // Many small blocks (the busiest size classes) and sizes across the whole range.
    prop_oneof![1..=64usize, 1..=MAX_SIZE]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (size(), 0..=MAX_ALIGN_LOG2).prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
        1 => (size(), 0..=MAX_ALIGN_LOG2)
            .prop_map(|(size, align_log2)| Op::AllocZeroed { size, align_log2 }),
        2 => any::<Index>().prop_map(|which| Op::Free { which }),
        2 => (any::<Index>(), size()).prop_map(|(which, new_size)| Op::Realloc { which, new_size }),
    ]
}

fn op_with_give() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => op(),
        1 => any::<Index>().prop_map(|which| Op::Give { which }),
    ]
}

/// Pseudo-random bytes; block `id` holds `PATTERN[id % 251..][..size]`.
static PATTERN: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..MAX_SIZE + 256)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
});

fn pattern(id: u64, len: usize) -> &'static [u8] {
    let start = (id % 251) as usize;
    &PATTERN[start..start + len]
}

/// A block the test holds.
#[derive(Debug)]
struct Live {
    ptr: NonNull<u8>,
    layout: Layout,
    id: u64,
}

// SAFETY: a `Live` is the sole owner of its block; sending it hands the block to another
// thread, which is how blocks are freed remotely.
unsafe impl Send for Live {}

impl Live {
    fn bytes(&self, len: usize) -> &[u8] {
        assert!(len <= self.layout.size());
        // SAFETY: the block is live, owned by this `Live`, and at least `len` bytes long.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), len) }
    }

    fn fill(&self) {
        let p = pattern(self.id, self.layout.size());
        // SAFETY: the block is live, owned by this `Live`, and `layout.size()` bytes long;
        // the pattern table does not overlap it.
        unsafe {
            self.ptr
                .as_ptr()
                .copy_from_nonoverlapping(p.as_ptr(), p.len())
        };
    }

    fn check(&self, len: usize, when: &str) -> Result<(), TestCaseError> {
        let found = self.bytes(len);
        let want = pattern(self.id, len);
        if found != want {
            let at = found.iter().zip(want).position(|(a, b)| a != b).unwrap();
            return Err(TestCaseError::fail(format!(
                "{when}: block {} at {:?} {:?} differs from its pattern at offset {at} \
                 (found {:#04x}, wrote {:#04x})",
                self.id, self.ptr, self.layout, found[at], want[at]
            )));
        }
        Ok(())
    }
}

/// One thread's view of a run: its live blocks and the ids it hands out.
struct Worker<'h, A: HostAllocator + 'static> {
    heap: &'h Checked<Peer<A>>,
    live: Vec<Live>,
    thread: u64,
    next_id: u64,
    /// Blocks this worker freed that another thread allocated.
    remote_frees: usize,
}

impl<'h, A: HostAllocator + 'static> Worker<'h, A> {
    fn new(heap: &'h Checked<Peer<A>>, thread: usize) -> Self {
        Self {
            heap,
            live: Vec::new(),
            thread: thread as u64,
            next_id: (thread as u64) << 32,
            remote_frees: 0,
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn allocate(
        &mut self,
        size: usize,
        align_log2: u32,
        zeroed: bool,
    ) -> Result<(), TestCaseError> {
        let layout = Layout::from_size_align(size, 1 << align_log2).unwrap();
        let result = if zeroed {
            self.heap.allocate_zeroed(layout)
        } else {
            self.heap.allocate(layout)
        };
        let ptr = result.map_err(|e| TestCaseError::fail(format!("{layout:?}: {e}")))?;
        let block = Live {
            ptr,
            layout,
            id: self.id(),
        };
        if zeroed && let Some(at) = block.bytes(size).iter().position(|&b| b != 0) {
            // Checked records this too; fail here with the offset in the message.
            self.live.push(block);
            return Err(TestCaseError::fail(format!(
                "allocate_zeroed {layout:?} returned a non-zero byte at offset {at}"
            )));
        }
        block.fill();
        self.live.push(block);
        Ok(())
    }

    fn take(&mut self, which: &Index) -> Option<Live> {
        (!self.live.is_empty()).then(|| self.live.swap_remove(which.index(self.live.len())))
    }

    fn free(&mut self, block: Live) -> Result<(), TestCaseError> {
        if block.id >> 32 != self.thread {
            self.remote_frees += 1;
        }
        let checked = block.check(block.layout.size(), "free");
        // SAFETY: `block` is live with this layout and owned here; freed once.
        unsafe { self.heap.deallocate(block.ptr, block.layout) };
        checked
    }

    fn reallocate(&mut self, which: &Index, new_size: usize) -> Result<(), TestCaseError> {
        let Some(block) = self.take(which) else {
            return Ok(());
        };
        // SAFETY: `block` is live with this layout and owned here.
        match unsafe { self.heap.reallocate(block.ptr, block.layout, new_size) } {
            Ok(ptr) => {
                let moved = Live {
                    ptr,
                    layout: Layout::from_size_align(new_size, block.layout.align()).unwrap(),
                    id: block.id,
                };
                let kept = block.layout.size().min(new_size);
                let checked = moved.check(kept, "after reallocate");
                moved.fill();
                self.live.push(moved);
                checked
            }
            Err(e) => {
                let what = format!("reallocate {:?} to {new_size}: {e}", block.layout);
                self.live.push(block);
                Err(TestCaseError::fail(what))
            }
        }
    }

    /// Applies `op`; `Give` returns the block to hand over.
    fn apply(&mut self, op: &Op) -> Result<Option<Live>, TestCaseError> {
        match op {
            Op::Alloc { size, align_log2 } => self.allocate(*size, *align_log2, false)?,
            Op::AllocZeroed { size, align_log2 } => self.allocate(*size, *align_log2, true)?,
            Op::Free { which } => {
                if let Some(block) = self.take(which) {
                    self.free(block)?;
                }
            }
            Op::Realloc { which, new_size } => self.reallocate(which, *new_size)?,
            Op::Give { which } => return Ok(self.take(which)),
        }
        Ok(None)
    }

    /// Frees every block still held, checking each; the first failure wins.
    fn free_all(&mut self) -> Result<(), TestCaseError> {
        let mut result = Ok(());
        for block in std::mem::take(&mut self.live) {
            let r = self.free(block);
            if result.is_ok() {
                result = r;
            }
        }
        result
    }
}

/// What must hold once a run has freed everything.
fn check_clean<A: HostAllocator>(heap: &Checked<Peer<A>>) -> Result<(), TestCaseError> {
    prop_assert_eq!(heap.violations(), vec![], "Checked reported violations");
    prop_assert_eq!(heap.live_blocks(), 0, "blocks left live after every free");
    prop_assert_eq!(heap.live_bytes(), 0, "bytes left live after every free");
    prop_assert_eq!(heap.check_stats(), Ok(()));
    Ok(())
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(ProptestConfig {
        // Direct runner use has no source file to key regressions to.
        failure_persistence: None,
        ..ProptestConfig::with_cases(cases)
    })
}

// ---------------------------------------------------------------------------------------------
// The properties
// ---------------------------------------------------------------------------------------------

/// One random sequence on one thread.
fn single_threaded<A: HostAllocator>(alloc: &'static A, ops: &[Op]) -> Result<(), TestCaseError> {
    let heap = Checked::with_policy(Peer(alloc), Policy::Record);
    let mut worker = Worker::new(&heap, 0);
    let mut result = Ok(());
    for op in ops {
        result = worker.apply(op).map(drop);
        if result.is_err() {
            break;
        }
    }
    let freed = worker.free_all();
    result?;
    freed?;
    check_clean(&heap)
}

/// One random sequence per thread, all under one `Checked`; `Give` sends a block to the next
/// thread, which takes it into its own set (and frees, reallocates or passes it on).
fn multi_threaded<A: HostAllocator>(
    alloc: &'static A,
    sequences: &[Vec<Op>],
    remote_frees: &AtomicUsize,
) -> Result<(), TestCaseError> {
    let heap = Checked::with_policy(Peer(alloc), Policy::Record);
    let barrier = Barrier::new(sequences.len());
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..sequences.len())
        .map(|_| mpsc::channel::<Live>())
        .unzip();
    let mut senders: Vec<Option<mpsc::Sender<Live>>> = senders.into_iter().map(Some).collect();
    // Thread i sends to thread i + 1.
    senders.rotate_left(1);
    let outcomes: Vec<Result<(), TestCaseError>> = thread::scope(|s| {
        let handles: Vec<_> = sequences
            .iter()
            .zip(receivers)
            .zip(senders)
            .enumerate()
            .map(|(i, ((ops, rx), tx))| {
                let (heap, barrier) = (&heap, &barrier);
                s.spawn(move || {
                    let mut tx = tx;
                    let mut worker = Worker::new(heap, i + 1);
                    let mut result = Ok(());
                    barrier.wait();
                    for op in ops {
                        worker.live.extend(rx.try_iter());
                        match worker.apply(op) {
                            Ok(Some(given)) => {
                                tx.as_ref().unwrap().send(given).expect("receiver alive");
                            }
                            Ok(None) => {}
                            Err(e) => {
                                result = Err(e);
                                break;
                            }
                        }
                    }
                    // Nothing more to give: the next thread's drain can finish.
                    tx.take();
                    let freed = worker.free_all();
                    // Frees of blocks the previous thread handed over, here.
                    let mut remote = Ok(());
                    for block in rx {
                        let r = worker.free(block);
                        if remote.is_ok() {
                            remote = r;
                        }
                    }
                    remote_frees.fetch_add(worker.remote_frees, Ordering::Relaxed);
                    result.and(freed).and(remote)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect()
    });
    for outcome in outcomes {
        outcome?;
    }
    check_clean(&heap)
}

#[derive(Clone, Copy)]
struct SingleThreaded;

impl HostHeapTask for SingleThreaded {
    type Output = Result<(), String>;

    fn run<A: HostAllocator>(self, alloc: &'static A) -> Self::Output {
        runner(SINGLE_THREADED_CASES)
            .run(&prop::collection::vec(op(), 1..=MAX_OPS), |ops| {
                single_threaded(alloc, &ops)
            })
            .map_err(|e| format!("{}: {e}", alloc.name()))
    }
}

#[derive(Clone, Copy)]
struct MultiThreaded;

impl HostHeapTask for MultiThreaded {
    type Output = Result<(), String>;

    fn run<A: HostAllocator>(self, alloc: &'static A) -> Self::Output {
        let sequence = prop::collection::vec(op_with_give(), 1..=MAX_OPS);
        let remote_frees = AtomicUsize::new(0);
        runner(MULTI_THREADED_CASES)
            .run(&prop::collection::vec(sequence, THREADS), |sequences| {
                multi_threaded(alloc, &sequences, &remote_frees)
            })
            .map_err(|e| format!("{}: {e}", alloc.name()))?;
        // The property is about cross-thread frees: make sure it exercised some.
        match remote_frees.into_inner() {
            0 => Err(format!(
                "{}: no block was freed on another thread",
                alloc.name()
            )),
            _ => Ok(()),
        }
    }
}

/// The peers are process-wide statics, and `Checked::check_stats` compares a heap's
/// counters with what one test did: tests that use the peers take turns.
static PEERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `task` on every host heap in the registry; panics listing every peer that failed.
fn for_every_host_heap<T: HostHeapTask<Output = Result<(), String>> + Copy>(task: T) {
    let _turn = PEERS.lock().unwrap_or_else(|e| e.into_inner());
    let mut tested = Vec::new();
    let mut failures = Vec::new();
    for info in ALLOCATORS.iter().filter(|a| a.fits(Capability::HostHeap)) {
        match with_host_heap(info.name, task) {
            Some(Ok(())) => tested.push(info.name),
            Some(Err(e)) => failures.push(e),
            None => failures.push(format!(
                "{}: registered as a host heap, not dispatchable",
                info.name
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        tested.contains(&"system"),
        "the registry lost the system heap: {tested:?}"
    );
}

#[test]
fn every_host_heap_peer_keeps_its_contract_under_checked() {
    for_every_host_heap(SingleThreaded);
}

#[test]
fn every_host_heap_peer_keeps_its_contract_with_blocks_freed_on_other_threads() {
    for_every_host_heap(MultiThreaded);
}
