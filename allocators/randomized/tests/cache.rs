//! The cache of freed small blocks (the per-size bags of `heap/cache.rs`), from outside:
//! how long a freed block waits before it is handed out again and among how many it is
//! drawn, how much the bags may hold, and that the detection classes hold for a block that
//! passes through a bag (zero-fill and its check, canaries, double frees, neighbours'
//! headers).

mod common;

use core::ptr::NonNull;
use std::collections::{HashMap, HashSet};

use alloclab_core::{Allocator, HostAllocator, MallocHeap};
use alloclab_randomized::{Checks, Randomized};
use common::{Rng, expect_abort, fill, layout, log_uniform};

/// The newest frees of a size that its bag does not hand out (the crate's `DELAY`).
const DELAY: usize = 16;
/// The fewest blocks a bag hands one out from (the crate's `CHOICE`).
const CHOICE: usize = 8;
/// Blocks per bag (the crate's `BAG`).
const BAG: usize = 32;
/// The most bytes an arena's bags hold (the crate's `CACHE_BYTES`).
const CACHE_BYTES: u64 = 256 << 10;

const DOUBLE: &str = "free(): double free detected";
const WRITE_AFTER_FREE: &str = "write after free detected";
const OVERFLOW: &str = "heap overflow detected";
const NEIGHBOUR: &str = "corrupted block header (heap overflow?)";

/// Frees `ptr` through the unsized (C `free`) entry point.
fn free(heap: &Randomized, ptr: *mut u8) {
    // SAFETY: none: some tests call it on freed pointers on purpose, in a child process
    // that must abort before the heap could be harmed.
    unsafe { heap.deallocate_unsized(NonNull::new(ptr).unwrap()) };
}

/// `count` live blocks of `size` bytes.
fn blocks(heap: &Randomized, size: usize, count: usize) -> Vec<NonNull<u8>> {
    (0..count)
        .map(|_| heap.allocate(layout(size, 16)).unwrap())
        .collect()
}

#[test]
fn a_freed_block_waits_for_more_frees_of_its_size_and_comes_back_drawn_among_several() {
    let heap = Randomized::with_seed(31).unwrap();
    let mut rng = Rng::new(31);
    let mut live = blocks(&heap, 64, 40);
    // Address -> the number of frees when it was freed.
    let mut freed_at: HashMap<usize, usize> = HashMap::new();
    let (mut frees, mut waits) = (0usize, Vec::new());
    for _ in 0..20_000 {
        let p = live.swap_remove(rng.below(live.len()));
        free(&heap, p.as_ptr());
        frees += 1;
        freed_at.insert(p.as_ptr() as usize, frees);
        let q = heap.allocate(layout(64, 16)).unwrap();
        if let Some(at) = freed_at.remove(&(q.as_ptr() as usize)) {
            waits.push(frees - at);
        }
        live.push(q);
    }
    // The cache serves nearly every allocation of a steady churn of one size ...
    assert!(waits.len() > 19_000, "{} of 20000 reused", waits.len());
    // ... never a block freed fewer than DELAY frees ago (so never the one just freed) ...
    let shortest = *waits.iter().min().unwrap();
    assert!(
        shortest >= DELAY,
        "a block came back after {shortest} frees"
    );
    // ... and not in the order they were freed: drawn among at least CHOICE, so the wait
    // varies (a queue would give one wait for every block).
    let distinct: HashSet<usize> = waits.iter().copied().collect();
    assert!(
        distinct.len() >= 2 * CHOICE,
        "only {} distinct waits",
        distinct.len()
    );
    heap.check().unwrap();
    for p in live {
        free(&heap, p.as_ptr());
    }
}

#[test]
fn the_bags_hold_at_most_their_budget_and_trim_empties_them() {
    let heap = Randomized::with_seed(32).unwrap();
    let mut rng = Rng::new(32);
    let live: Vec<(NonNull<u8>, usize)> = (0..6000)
        .map(|_| {
            let size = log_uniform(&mut rng, 16, 1024);
            (heap.allocate(layout(size, 16)).unwrap(), size)
        })
        .collect();
    for (p, _) in &live {
        free(&heap, p.as_ptr());
    }
    let counters = heap.counters();
    assert_eq!(counters.live_bytes, 0);
    assert!(counters.cached_bytes > 0, "nothing cached");
    // One thread: one arena.
    assert!(
        counters.cached_bytes <= CACHE_BYTES,
        "{} bytes cached",
        counters.cached_bytes
    );
    let shape = heap.check().unwrap();
    assert_eq!(shape.cached_bytes, counters.cached_bytes);
    assert!(shape.cached_blocks <= 64 * BAG as u64);
    heap.trim();
    assert_eq!(heap.counters().cached_bytes, 0);
    let shape = heap.check().unwrap();
    assert_eq!((shape.cached_blocks, shape.live_blocks), (0, 0));
}

#[test]
fn without_the_cache_nothing_is_kept() {
    let heap = Randomized::with_seed_checks_and_cache(33, Checks::ALL, false).unwrap();
    for p in blocks(&heap, 64, 100) {
        free(&heap, p.as_ptr());
    }
    assert_eq!(heap.counters().cached_bytes, 0);
    assert_eq!(heap.check().unwrap().cached_blocks, 0);
}

#[test]
fn a_block_handed_out_from_a_bag_reads_zero_and_gets_a_canary_for_its_new_size() {
    let heap = Randomized::with_seed_and_checks(34, Checks::ALL).unwrap();
    let filled = blocks(&heap, 64, BAG);
    for &p in &filled {
        fill(p, 64, 0xab);
        free(&heap, p.as_ptr());
    }
    let was_freed: HashSet<usize> = filled.iter().map(|p| p.as_ptr() as usize).collect();
    // 49 bytes take a 64-byte payload, as 64 do: the same bag.
    let p = heap.allocate(layout(49, 16)).unwrap();
    assert!(
        was_freed.contains(&(p.as_ptr() as usize)),
        "not from the bag"
    );
    // SAFETY: a live block of at least 49 bytes.
    let bytes = unsafe { core::slice::from_raw_parts(p.as_ptr(), 49) };
    assert!(bytes.iter().all(|&b| b == 0), "stale data handed out");
    // With canaries, the usable size is what was asked: the canary was re-armed.
    // SAFETY: live.
    assert_eq!(unsafe { heap.usable_size(p) }, 49);
    expect_abort(&[OVERFLOW], || {
        // SAFETY: none: one byte past the request, on purpose, in the child.
        unsafe { p.as_ptr().add(49).write(0x41) };
        free(&heap, p.as_ptr());
    });
    let z = heap.allocate_zeroed(layout(64, 16)).unwrap();
    assert!(
        was_freed.contains(&(z.as_ptr() as usize)),
        "not from the bag"
    );
    // SAFETY: a live block of 64 bytes.
    let zeroed = unsafe { core::slice::from_raw_parts(z.as_ptr(), 64) };
    assert!(
        zeroed.iter().all(|&b| b == 0),
        "calloc from a bag not zeroed"
    );
    free(&heap, p.as_ptr());
    free(&heap, z.as_ptr());
    heap.check().unwrap();
}

#[test]
fn a_cached_block_is_freed_once_only() {
    let heap = Randomized::with_seed_and_checks(35, Checks::ALL).unwrap();
    let live = blocks(&heap, 64, 4);
    free(&heap, live[0].as_ptr());
    assert_eq!(
        heap.counters().cached_bytes,
        80,
        "the block is not in a bag"
    );
    assert_eq!(heap.check_pointer(live[0].as_ptr()), Err(DOUBLE));
    expect_abort(&[DOUBLE], || free(&heap, live[0].as_ptr()));
    expect_abort(&[DOUBLE], || {
        // SAFETY: none: a realloc of a freed block, on purpose.
        let _ = unsafe { heap.reallocate(live[0], layout(64, 16), 128) };
    });
    for p in &live[1..] {
        free(&heap, p.as_ptr());
    }
    heap.check().unwrap();
}

#[test]
fn a_write_into_a_cached_block_is_caught_when_it_leaves_its_bag() {
    let heap = Randomized::with_seed_and_checks(36, Checks::ALL).unwrap();
    let live = blocks(&heap, 64, BAG + 8);
    let stale = live[0].as_ptr();
    free(&heap, stale);
    let message = expect_abort(&[WRITE_AFTER_FREE], || {
        // SAFETY: none: a write through a dangling pointer, on purpose, in the child.
        unsafe { stale.add(24).cast::<u64>().write(0x4141_4141_4141_4141) };
        // The bag fills; its oldest, the block written, goes back to the free lists,
        // checked, at the BAG + 1-th free.
        for p in &live[1..] {
            free(&heap, p.as_ptr());
        }
    });
    let written = format!("{:x}", stale as usize + 24);
    assert!(
        message.contains(&written),
        "{message:?} does not name 0x{written}"
    );
    // The heap walk sees it too, without anything leaving a bag.
    // SAFETY: as above, in the parent, undone before the heap is used again.
    unsafe { stale.add(24).write(1) };
    let corruption = heap.check().unwrap_err();
    assert!(
        corruption.to_string().contains("free memory modified"),
        "{corruption}"
    );
    // SAFETY: the byte written back as it was.
    unsafe { stale.add(24).write(0) };
    for p in &live[1..] {
        free(&heap, p.as_ptr());
    }
    heap.check().unwrap();
}

#[test]
fn a_free_into_a_bag_still_checks_both_neighbours_headers() {
    let heap = Randomized::with_seed_and_checks(37, Checks::ALL).unwrap();
    let (live, (p, _, _)) = common::blocks_with_a_sandwich(&heap, 64, 3000);
    let target = live[p];
    // SAFETY: live.
    let usable = unsafe { heap.usable_size(target) };
    // A block this small goes to a bag, where nothing merges: the free itself must look
    // at the neighbour its overflow reached.
    expect_abort(&[NEIGHBOUR], || {
        // SAFETY: none: 16 bytes over the right neighbour's header (past the canary, which
        // a 64-byte request does not have), on purpose.
        unsafe { target.as_ptr().add(usable).write_bytes(0x42, 16) };
        free(&heap, target.as_ptr());
    });
    for q in live {
        free(&heap, q.as_ptr());
    }
    heap.check().unwrap();
}
