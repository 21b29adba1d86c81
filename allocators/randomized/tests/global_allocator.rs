//! The randomized heap installed as the process's `#[global_allocator]`: everything this test binary
//! allocates — the test harness, std collections, threads, channels — goes through it.

use alloclab_randomized::Randomized;

#[global_allocator]
static GLOBAL: Randomized = Randomized::new();

// Collections, threads and channels, shared state, reallocation: the tests every global heap runs.
alloclab_core::global_allocator_tests!(GLOBAL);

#[test]
fn ten_thousand_joined_threads_leave_nothing_behind() {
    // Nothing is per-thread: threads that exit leave no cache and no heap to adopt. The
    // live bytes after the threads are what they were before, give or take what other
    // tests running concurrently hold.
    // The first batch lands on every arena, and each sets up a slab for each size class
    // its threads use (a megabyte of address space each); the second must find them.
    let spawn_batch = |batch: usize| {
        for i in 0..5_000 {
            std::thread::spawn(move || {
                let s = format!("thread {batch}.{i}");
                assert!(s.len() > 7);
            })
            .join()
            .unwrap();
        }
    };
    spawn_batch(0);
    let warm = GLOBAL.counters();
    spawn_batch(1);
    let after = GLOBAL.counters();
    assert!(after.allocations >= warm.allocations + 5_000);
    assert!(
        after.mapped_bytes < warm.mapped_bytes + (64 << 20),
        "{warm:?} -> {after:?}"
    );
    GLOBAL
        .check()
        .expect("heap consistent after 10,000 threads");
}

#[test]
fn the_whole_heap_checks_out_after_all_that() {
    let v: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
    drop(v);
    let shape = GLOBAL.check().expect("heap consistent");
    assert!(shape.live_blocks > 0);
}
