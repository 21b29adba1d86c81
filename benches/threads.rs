//! What thread safety costs the heaps that take a lock: one allocate/free pair of 64 B on
//! one thread, alone and while a second thread runs the same pairs on the same heap.
//! `cargo bench --bench threads`.
//!
//! The randomized heap's state is one word, so its thread safety is a lock bit per arena
//! (in band) and a lock-free queue for frees that find their arena busy; glibc's malloc
//! has per-thread caches and arenas. The difference between the two columns of one heap is
//! the cost of sharing it.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use core::alloc::Layout;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use alloclab::HostAllocator;
use alloclab_harness::peers::{self, HostHeapTask};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// Heaps compared: alloclab's lock-based one, and the C library's.
const HEAPS: [&str; 2] = ["randomized", "system"];

struct Pairs<'c, 'g> {
    group: &'g mut criterion::BenchmarkGroup<'c, criterion::measurement::WallTime>,
    contended: bool,
}

fn pair<A: HostAllocator>(alloc: &A, layout: Layout) {
    let block = alloc.allocate(black_box(layout)).expect("allocation");
    // SAFETY: `block` was just allocated with `layout` and is freed once.
    unsafe {
        block.as_ptr().write(1);
        alloc.deallocate(black_box(block), layout);
    }
}

impl HostHeapTask for Pairs<'_, '_> {
    type Output = ();

    fn run<A: HostAllocator>(self, alloc: &'static A) {
        let layout = Layout::from_size_align(64, 16).expect("valid layout");
        let stop = Arc::new(AtomicBool::new(false));
        let rival = self.contended.then(|| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    pair(alloc, layout);
                }
            })
        });
        let label = if self.contended {
            "2 threads"
        } else {
            "1 thread"
        };
        self.group
            .bench_function(BenchmarkId::new(alloc.name(), label), |b| {
                b.iter(|| pair(alloc, layout))
            });
        stop.store(true, Ordering::Relaxed);
        if let Some(rival) = rival {
            rival.join().expect("rival thread");
        }
    }
}

fn lock_cost(c: &mut Criterion) {
    let mut group = c.benchmark_group("alloc_free_64B_threads");
    group.throughput(Throughput::Elements(1));
    for name in HEAPS {
        for contended in [false, true] {
            peers::with_host_heap(
                name,
                Pairs {
                    group: &mut group,
                    contended,
                },
            )
            .expect("a registered host heap");
        }
    }
    group.finish();
}

criterion_group!(benches, lock_cost);
criterion_main!(benches);
