//! wfspan installed as the process's `#[global_allocator]`: everything this test binary
//! allocates — the test harness, std collections, threads, channels — goes through it.

use alloclab_wfspan::WfSpan;

#[global_allocator]
static GLOBAL: WfSpan = WfSpan::new();

// Collections, threads and channels, shared state, reallocation: the tests every global heap runs.
alloclab_core::global_allocator_tests!(GLOBAL);

#[test]
fn ten_thousand_joined_threads_do_not_grow_the_heap_count() {
    for i in 0..10_000 {
        std::thread::spawn(move || {
            let s = format!("thread {i}");
            assert!(s.len() > 7);
        })
        .join()
        .unwrap();
    }
    // The test harness runs other tests' threads concurrently; heaps are bounded by the
    // threads alive at once, not by the 10,000 started.
    assert!(GLOBAL.heap_count() < 64, "{} heaps", GLOBAL.heap_count());
}
