//! Criterion micro-benchmarks of every host heap the harness knows, at a few sizes. Compare
//! allocators within one run: `cargo bench --bench alloc_free`.
//!
//! * `alloc_free_same_thread`: allocate and free one block on one thread, the fast path.
//! * `remote_free`: free, on thread B, blocks that thread A allocated — the path a block
//!   takes back to its owner. A allocates a batch of [`REMOTE_BATCH`] blocks and hands it
//!   over, then waits while B frees the batch; only B's frees are timed, and the figure is
//!   per free.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use core::alloc::Layout;
use core::ptr::NonNull;
use std::hint::black_box;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use alloclab::HostAllocator;
use alloclab_harness::peers::{self, Capability, HostHeapTask};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const SIZES: [usize; 4] = [16, 64, 256, 4096];
/// Block sizes of the remote-free group: a small size class and a page-sized one.
const REMOTE_SIZES: [usize; 2] = [64, 4096];
/// Blocks thread A hands to thread B at a time.
const REMOTE_BATCH: usize = 1024;

struct PairBench<'c, 'g> {
    group: &'g mut criterion::BenchmarkGroup<'c, criterion::measurement::WallTime>,
    size: usize,
}

impl HostHeapTask for PairBench<'_, '_> {
    type Output = ();

    fn run<A: HostAllocator>(self, alloc: &'static A) {
        let layout = Layout::from_size_align(self.size, 16).expect("valid layout");
        self.group
            .bench_function(BenchmarkId::new(alloc.name(), self.size), |b| {
                b.iter(|| {
                    let block = alloc.allocate(black_box(layout)).expect("allocation");
                    // SAFETY: `block` was just allocated with `layout` and is freed once.
                    unsafe {
                        block.as_ptr().write(1);
                        alloc.deallocate(black_box(block), layout);
                    }
                })
            });
    }
}

fn alloc_free_same_thread(c: &mut Criterion) {
    let mut group = c.benchmark_group("alloc_free_same_thread");
    group.throughput(Throughput::Elements(1));
    for size in SIZES {
        for info in peers::ALLOCATORS
            .iter()
            .filter(|a| a.fits(Capability::HostHeap))
        {
            peers::with_host_heap(
                info.name,
                PairBench {
                    group: &mut group,
                    size,
                },
            );
        }
    }
    group.finish();
}

/// Blocks allocated on one thread, to be freed on another.
struct Batch(Vec<NonNull<u8>>);

// SAFETY: the batch owns its blocks alone (thread A forgets them once sent); moving it moves
// that ownership to thread B, which frees them through the same allocator, and every
// `Allocator` is `Send + Sync`.
unsafe impl Send for Batch {}

struct RemoteFreeBench<'c, 'g> {
    group: &'g mut criterion::BenchmarkGroup<'c, criterion::measurement::WallTime>,
    size: usize,
}

impl HostHeapTask for RemoteFreeBench<'_, '_> {
    type Output = ();

    fn run<A: HostAllocator>(self, alloc: &'static A) {
        let layout = Layout::from_size_align(self.size, 16).expect("valid layout");
        self.group
            .bench_function(BenchmarkId::new(alloc.name(), self.size), |b| {
                b.iter_custom(|iters| remote_frees(alloc, layout, iters))
            });
    }
}

/// Frees `iters` blocks on this thread that a second thread allocated, in batches, and
/// returns the time spent in the frees alone.
fn remote_frees<A: HostAllocator>(alloc: &'static A, layout: Layout, iters: u64) -> Duration {
    let (want, wanted) = mpsc::channel::<usize>();
    let (hand_over, handed) = mpsc::channel::<Batch>();
    std::thread::scope(|scope| {
        // Thread A: allocates each batch asked for, touches it, hands it over, and waits.
        scope.spawn(move || {
            for n in wanted {
                let blocks = (0..n)
                    .map(|_| {
                        let block = alloc.allocate(layout).expect("allocation");
                        // SAFETY: the block is live, at least one byte, and ours alone.
                        unsafe { block.as_ptr().write(1) };
                        block
                    })
                    .collect();
                if hand_over.send(Batch(blocks)).is_err() {
                    return;
                }
            }
        });
        // Thread B (this one): asks for a batch, then frees it, timed.
        let mut elapsed = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let n = left.min(REMOTE_BATCH as u64);
            want.send(n as usize).expect("thread A is alive");
            let Batch(blocks) = handed.recv().expect("thread A hands a batch over");
            let start = Instant::now();
            for block in &blocks {
                // SAFETY: thread A allocated `block` from `alloc` with `layout` and gave it
                // up; it is freed exactly once, here.
                unsafe { alloc.deallocate(black_box(*block), layout) };
            }
            elapsed += start.elapsed();
            left -= n;
        }
        drop(want);
        elapsed
    })
}

fn remote_free(c: &mut Criterion) {
    let mut group = c.benchmark_group("remote_free");
    group.throughput(Throughput::Elements(1));
    for size in REMOTE_SIZES {
        for info in peers::ALLOCATORS
            .iter()
            .filter(|a| a.fits(Capability::HostHeap))
        {
            peers::with_host_heap(
                info.name,
                RemoteFreeBench {
                    group: &mut group,
                    size,
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, alloc_free_same_thread, remote_free);
criterion_main!(benches);
