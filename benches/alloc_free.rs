//! Criterion micro-benchmarks: the same-thread allocate/deallocate fast path of every host
//! heap the harness knows, at a few sizes. Compare allocators within one run:
//! `cargo bench --bench alloc_free`.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use core::alloc::Layout;
use std::hint::black_box;

use alloclab::HostAllocator;
use alloclab_harness::peers::{self, Capability, HostHeapTask};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const SIZES: [usize; 4] = [16, 64, 256, 4096];

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

criterion_group!(benches, alloc_free_same_thread);
criterion_main!(benches);
