//! What one persist (a 64-byte store, flush, fence) costs through each storage heap's
//! `PersistentAllocator::flush`/`fence`, on a pool in /dev/shm with `PMEM_IS_PMEM_FORCE=1` as the
//! `storage` suite runs it: a check that the heaps flush for real and alike. And what the
//! engines' allocator calls cost: `allocate_unlinked` + `release` of a 200-byte column, with 4,096
//! blocks live (the oldest freed first, as an engine's deletes and updates do).
//!
//! `cargo run --release -p alloclab-harness --example storage_heap_cost [iterations]`

use std::path::PathBuf;
use std::time::Instant;

use alloclab_core::PersistentAllocator;
use alloclab_harness::pmem::{AlloclabPmemHeap, DramHeap, PmdkHeap};

fn measure<H: PersistentAllocator>(iterations: usize) {
    if let Err(why) = H::available() {
        println!("{:>14}: skipped ({why})", std::any::type_name::<H>());
        return;
    }
    let path = PathBuf::from(format!(
        "/dev/shm/alloclab-persist-cost-{}",
        std::process::id()
    ));
    let heap = H::create(&path, 64 << 20, 4096).expect("create the pool");
    let name = heap.name().to_owned();
    let lines = 4096 / 64;
    let root = heap.root();
    for (label, flushes_per_fence) in [("store+flush+fence", 1), ("4 stores+flushes, 1 fence", 4)] {
        let start = Instant::now();
        for i in 0..iterations {
            for k in 0..flushes_per_fence {
                let line = (i * flushes_per_fence + k) % lines;
                // SAFETY: a word of the root, which this example alone uses.
                let p = unsafe { root.add(line * 64) };
                // SAFETY: as above.
                unsafe { p.cast::<u64>().write_volatile(i as u64) };
                heap.flush(p, 8);
            }
            heap.fence();
        }
        let ns = start.elapsed().as_nanos() as f64 / iterations as f64;
        println!("{name:>14}: {label:<26} {ns:>8.1} ns");
    }
    let mut live = std::collections::VecDeque::new();
    for _ in 0..4096 {
        live.push_back(heap.allocate_unlinked(200).expect("alloc"));
    }
    let start = Instant::now();
    for _ in 0..iterations {
        let off = live.pop_front().expect("a live block");
        // SAFETY: a block of ours that nothing links.
        unsafe { heap.release(off) }.expect("dealloc");
        live.push_back(heap.allocate_unlinked(200).expect("alloc"));
    }
    let ns = start.elapsed().as_nanos() as f64 / iterations as f64;
    println!("{name:>14}: {:<26} {ns:>8.1} ns", "alloc+release 200 B");
    drop(heap);
    let _ = std::fs::remove_file(&path);
}

fn main() {
    // As the storage workers do, before anything loads libpmem or libpmemobj.
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("PMEM_IS_PMEM_FORCE", "1") };
    let iterations = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("iterations: a number"))
        .unwrap_or(200_000);
    measure::<AlloclabPmemHeap>(iterations);
    measure::<PmdkHeap>(iterations);
    measure::<DramHeap>(iterations);
}
