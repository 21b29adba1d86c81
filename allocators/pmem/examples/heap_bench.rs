//! Cost of the persistent heap: flushes and fences per operation, ns per
//! `allocate_into` + `free_from` pair on a file medium (libpmem or native, as
//! `create_best` picks; set `PMEM_IS_PMEM_FORCE=1` for real flush instructions on
//! `/dev/shm`) and on the simulator, and recovery time of a pool holding 1 M live 64-byte
//! objects.
//!
//! ```text
//! PMEM_IS_PMEM_FORCE=1 cargo run --release -p alloclab-pmem --example heap_bench [DIR]
//! ```
//!
//! `DIR` defaults to `/dev/shm`.

use std::alloc::Layout;
use std::path::PathBuf;
use std::time::Instant;

use alloclab_pmem::{Medium, PPtr, PersistentHeap, SimMedium};

const PAIRS: usize = 200_000;
const OBJECTS: usize = 1_000_000;

fn slot<M: Medium>(heap: &PersistentHeap<M>, i: usize) -> *mut PPtr<u8> {
    assert!(8 * (i + 1) <= heap.root_size());
    // SAFETY: inside the root (asserted).
    unsafe { heap.root().add(8 * i).cast() }
}

/// ns per allocate_into + free_from pair, and flushes and fences per operation.
fn pairs<M: Medium>(heap: &PersistentHeap<M>, size: usize, pairs: usize) -> (f64, f64, f64) {
    let layout = Layout::from_size_align(size, 8).unwrap();
    let dest = slot(heap, 0);
    for _ in 0..1000 {
        // SAFETY: a root slot, one thread.
        unsafe {
            heap.allocate_into(dest, layout).unwrap();
            heap.free_from(dest).unwrap();
        }
    }
    let before = heap.medium().stats();
    let start = Instant::now();
    for _ in 0..pairs {
        // SAFETY: as above.
        unsafe {
            heap.allocate_into(dest, layout).unwrap();
            heap.free_from(dest).unwrap();
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / pairs as f64;
    let after = heap.medium().stats();
    let ops = (2 * pairs) as f64;
    (
        ns,
        (after.flushes - before.flushes) as f64 / ops,
        (after.fences - before.fences) as f64 / ops,
    )
}

fn main() {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "/dev/shm".into()));
    let pid = std::process::id();
    println!(
        "PMEM_IS_PMEM_FORCE={:?} PMEM_NO_FLUSH={:?}",
        std::env::var("PMEM_IS_PMEM_FORCE").ok(),
        std::env::var("PMEM_NO_FLUSH").ok()
    );

    let path = dir.join(format!("alloclab-heap-bench-{pid}"));
    let heap = PersistentHeap::create(&path, 64 << 20, 4096).unwrap();
    println!("file medium: {:?}", heap.medium().kind());
    for size in [64, 200, 1024, 4096] {
        let (ns, flushes, fences) = pairs(&heap, size, PAIRS);
        println!(
            "  {size:>5} B: {ns:7.1} ns per allocate_into + free_from; {flushes:.2} flushes, \
             {fences:.2} fences per op"
        );
    }
    drop(heap);
    std::fs::remove_file(&path).unwrap();

    let heap = PersistentHeap::create_on(SimMedium::new(16 << 20), 4096).unwrap();
    println!("simulator:");
    for size in [64, 200] {
        let (ns, flushes, fences) = pairs(&heap, size, PAIRS / 4);
        println!(
            "  {size:>5} B: {ns:7.1} ns per allocate_into + free_from; {flushes:.2} flushes, \
             {fences:.2} fences per op"
        );
    }
    drop(heap);

    // 1 M live 64-byte objects: a linked list (word 0 = next, the rest odd payload), built
    // with reserve + publish in batches of 4096 (one fence per batch).
    let path = dir.join(format!("alloclab-heap-bench-recovery-{pid}"));
    let heap = PersistentHeap::create(&path, 160 << 20, 4096).unwrap();
    let layout = Layout::from_size_align(64, 8).unwrap();
    let start = Instant::now();
    let mut dest = slot(&heap, 0);
    let mut built = 0;
    while built < OBJECTS {
        let mut batch = Vec::with_capacity(4096);
        for _ in 0..4096.min(OBJECTS - built) {
            let r = heap.reserve(layout).unwrap();
            let words = r.as_ptr().cast::<u64>();
            for i in 0..8 {
                // SAFETY: the reserved block is ours, 64 bytes.
                unsafe { words.add(i).write(if i == 0 { 0 } else { 0x1001 }) };
            }
            heap.medium().flush(r.pptr().offset() as usize, r.size());
            let next = r.as_ptr().cast::<PPtr<u8>>();
            batch.push((dest, r));
            dest = next;
        }
        built += batch.len();
        // SAFETY: each dest is the root slot or word 0 of a reserved block; one thread.
        unsafe { heap.publish(&mut batch) };
    }
    println!(
        "built {} objects in {:?}",
        heap.stats().live_blocks,
        start.elapsed()
    );
    drop(heap);
    let mut best = None;
    for _ in 0..3 {
        let heap = PersistentHeap::open(&path).unwrap();
        let report = heap.recovery();
        assert_eq!(report.live_blocks, OBJECTS as u64);
        println!(
            "recovery: {} live blocks, {} bytes, {:?}",
            report.live_blocks, report.live_bytes, report.duration
        );
        best = best.min(Some(report.duration)).or(Some(report.duration));
    }
    println!("recovery of {OBJECTS} live 64-byte objects: best {best:?}");
    std::fs::remove_file(&path).unwrap();
}
