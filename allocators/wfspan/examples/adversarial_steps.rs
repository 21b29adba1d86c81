//! The adversarial step-count run: many threads, every free remote, and a check of the
//! largest step count seen against the documented bound.
//!
//! ```sh
//! cargo run --release -p alloclab-wfspan --example adversarial_steps -- [THREADS] [OPERATIONS]
//! ```
//!
//! Defaults: 8 threads (4x a 2-core machine: threads are preempted mid-operation), 10 million
//! operations (allocations plus frees). Each thread allocates batches of blocks of random
//! sizes (16 B – 16 KiB) and hands every batch to its neighbour, which frees it: all frees
//! are remote, spans keep being drained, discarded and reclaimed.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::mpsc;
use std::time::Instant;

use alloclab_core::{Allocator, MallocHeap};
use alloclab_wfspan::{WfSpan, step_bound, stranded_bound_bytes};

static HEAP: WfSpan = WfSpan::new();

const BATCH: usize = 256;

fn main() {
    let mut args = std::env::args().skip(1);
    let parse = |arg: Option<String>, default: u64, what: &str| -> u64 {
        match arg {
            None => default,
            Some(s) => s.parse().unwrap_or_else(|_| {
                eprintln!("error: {what} must be a positive integer, got '{s}'");
                std::process::exit(2)
            }),
        }
    };
    let threads = parse(args.next(), 8, "THREADS").max(1) as usize;
    let operations = parse(args.next(), 10_000_000, "OPERATIONS");
    // Each batch is BATCH allocations and BATCH frees.
    let batches_per_thread = (operations / (2 * BATCH as u64 * threads as u64)).max(1);
    let started = Instant::now();
    std::thread::scope(|s| {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads)
            .map(|_| mpsc::sync_channel::<Vec<usize>>(2))
            .unzip();
        for (t, rx) in rxs.into_iter().enumerate() {
            let tx = txs[(t + 1) % threads].clone();
            s.spawn(move || {
                let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                for _ in 0..batches_per_thread {
                    let batch: Vec<usize> = (0..BATCH)
                        .map(|_| {
                            // xorshift: sizes log-uniform-ish over 16 B .. 16 KiB.
                            state ^= state << 13;
                            state ^= state >> 7;
                            state ^= state << 17;
                            let size = 16usize << (state % 11);
                            let size = size + (state >> 8) as usize % size;
                            let layout = Layout::from_size_align(size.min(16384), 16).unwrap();
                            HEAP.allocate(layout).expect("allocation").as_ptr() as usize
                        })
                        .collect();
                    tx.send(batch).expect("neighbour alive");
                    for addr in rx.recv().expect("neighbour alive") {
                        // SAFETY: the neighbour's block, freed once, here: a remote free.
                        unsafe { HEAP.deallocate_unsized(NonNull::new(addr as *mut u8).unwrap()) };
                    }
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let stats = HEAP.stats();
    let heaps = HEAP.heap_count() as u64;
    let bound = step_bound(HEAP.config().span_bytes, heaps);
    let done = batches_per_thread * threads as u64 * 2 * BATCH as u64;
    println!(
        "threads {threads}, operations {done}, all frees remote, {:.2} s",
        elapsed.as_secs_f64()
    );
    println!(
        "max steps: alloc {} (bound {}), free {} (bound {})",
        stats.max_alloc_steps.unwrap(),
        bound.alloc,
        stats.max_free_steps.unwrap(),
        bound.free
    );
    println!(
        "footprint {:.1} MiB; stranded-memory bound A(N) for N = {heaps}: {:.1} MiB",
        stats.footprint_bytes.unwrap() as f64 / 1048576.0,
        stranded_bound_bytes(HEAP.config().span_bytes, heaps) as f64 / 1048576.0
    );
    let within = stats.max_alloc_steps.unwrap() <= bound.alloc
        && stats.max_free_steps.unwrap() <= bound.free;
    println!("within bound: {within}");
    if !within {
        std::process::exit(1);
    }
}
