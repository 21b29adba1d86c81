//! wfspan as an `Allocator`: every size and alignment, threads, remote frees, reallocation,
//! step bounds and thread churn — under the `Checked` typestate wrapper where it applies.

use core::alloc::Layout;
use core::ptr::NonNull;
use std::sync::mpsc;

use alloclab_core::{Allocator, Checked, HostAllocator, MallocHeap, Policy};
use alloclab_wfspan::{
    Config, MAX_SPANS_PER_CLASS, PURGE_AFTER_SPANS, RUN_USABLE_STEP, WfSpan, step_bound,
    stranded_bound_bytes,
};

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

fn fill(ptr: NonNull<u8>, len: usize, seed: u8) {
    // SAFETY: callers pass live blocks of at least `len` bytes.
    unsafe { ptr.as_ptr().write_bytes(seed, len) };
}

fn check(ptr: NonNull<u8>, len: usize, seed: u8) {
    // SAFETY: callers pass live blocks of at least `len` bytes that they filled.
    let bytes = unsafe { core::slice::from_raw_parts(ptr.as_ptr(), len) };
    assert!(bytes.iter().all(|&b| b == seed), "block contents changed");
}

#[test]
fn every_size_and_alignment_is_served_aligned_and_disjoint() {
    serve_every_size_and_alignment(WfSpan::new());
}

/// The same with the smallest, a middling and the largest span size: the header table's
/// index (a shift by the span size's log) and its length (a header per span, rounded up to
/// a span) follow the span size.
#[test]
fn every_span_size_serves_every_size_and_alignment() {
    for span_bytes in [16 << 10, 256 << 10, 4 << 20] {
        let config = Config {
            span_bytes,
            region_bytes: 1 << 30,
            ..Config::DEFAULT
        };
        // Whole spans of the region, at most a thirty-second of it (16 KiB spans).
        assert_eq!(config.header_table_bytes() % span_bytes, 0);
        assert!(config.header_table_bytes() <= (1 << 30) / 32);
        serve_every_size_and_alignment(WfSpan::with_config(config));
    }
}

/// Allocates every size of a list at every alignment of a list from `heap` (under
/// `Checked`, which catches overlaps), fills and checks each block, and frees them all.
fn serve_every_size_and_alignment(heap: WfSpan) {
    let heap = Checked::with_policy(heap, Policy::Record);
    let mut live = Vec::new();
    let sizes = [
        1,
        7,
        16,
        17,
        100,
        128,
        129,
        1000,
        4096,
        16384,
        16385,
        60000,
        65536,
        300_000,
        3 << 20,
    ];
    let aligns = [1, 8, 16, 32, 64, 256, 4096, 65536, 1 << 20];
    for (i, &size) in sizes.iter().enumerate() {
        for &align in &aligns {
            let l = layout(size, align);
            let p = heap.allocate(l).unwrap();
            assert_eq!(p.as_ptr() as usize % align, 0, "{size} B aligned {align}");
            // SAFETY: live block of ours.
            assert!(unsafe { heap.inner().usable_size(p) } >= size);
            fill(p, size, i as u8);
            live.push((p, l, i as u8));
        }
    }
    for (p, l, seed) in live {
        check(p, l.size(), seed);
        // SAFETY: allocated above with `l`, freed once.
        unsafe { heap.deallocate(p, l) };
    }
    assert!(heap.violations().is_empty(), "{:?}", heap.violations());
    heap.check_stats().unwrap();
    assert_eq!(heap.inner().stats().live_bytes, Some(0));
}

/// A span run's object starts its run (the header is in the region's table), so a request
/// of exactly n spans' bytes (a dictionary's table of 2^r spans) takes n spans up to eight,
/// and at most a quarter more past them. The statistics count a run's whole room as live.
#[test]
fn a_run_takes_at_most_a_quarter_more_spans_than_its_object_needs() {
    let heap = WfSpan::new();
    let span = 64 << 10;
    for spans in 1..=24usize {
        for size in [spans * span, spans * span - 3000, spans * span + 1] {
            let l = layout(size, 16);
            let p = heap.allocate(l).unwrap();
            let room = heap.stats().live_bytes.unwrap() as usize;
            let needed = size.div_ceil(span);
            assert!(room >= size, "{size} B: room {room}");
            // Every count of spans to 8 is a class; past that, four per doubling.
            let most = if needed <= 8 {
                needed * span
            } else {
                needed * span * 5 / 4
            };
            assert!(room <= most, "{size} B: room {room}, {needed} spans needed");
            // SAFETY: live block of ours.
            let usable = unsafe { heap.usable_size(p) };
            assert_eq!(
                usable,
                size.next_multiple_of(RUN_USABLE_STEP).min(room),
                "{size} B"
            );
            // SAFETY: as above.
            unsafe { heap.deallocate(p, l) };
        }
    }
}

/// The C ABI's aligned fast path (`posix_memalign`, aligned `operator new`) gives what the
/// general path gives for the same layout: a block of the same class, aligned as asked,
/// taken from the thread's active span.
#[test]
fn the_aligned_fast_path_serves_the_general_paths_class() {
    let heap = WfSpan::new();
    let mut live = Vec::new();
    let mut align = 32;
    while align <= 16 << 10 {
        for size in [0, 1, 24, 100, 1000, 3000, 8000, 16 << 10] {
            let l = layout(size.max(1), align);
            // One block stays out, so that the next one's free leaves the span active
            // with a free block for the fast path.
            let kept = heap.allocate(l).unwrap();
            // SAFETY: live block of ours.
            let usable = unsafe { heap.usable_size(kept) };
            live.push((kept, usable, live.len() as u8));
            fill(kept, usable, live.len() as u8 - 1);
            let freed = heap.allocate(l).unwrap();
            // SAFETY: live block of ours, freed once.
            unsafe { heap.deallocate_unsized(freed) };
            let rounded = size.max(align).next_multiple_of(align);
            let Some(fast) = heap.try_malloc_aligned_fast(size, align) else {
                assert!(
                    rounded > 16 << 10,
                    "{size} B aligned {align} missed the fast path"
                );
                continue;
            };
            assert!(rounded <= 16 << 10, "{size} B aligned {align}");
            assert_eq!(
                fast.as_ptr() as usize % align,
                0,
                "{size} B aligned {align}"
            );
            // SAFETY: live block of ours.
            let fast_usable = unsafe { heap.usable_size(fast) };
            assert_eq!(fast_usable, usable, "{size} B aligned {align}");
            fill(fast, usable, live.len() as u8);
            live.push((fast, usable, live.len() as u8));
        }
        align *= 2;
    }
    for (p, usable, seed) in live {
        check(p, usable, seed);
        // SAFETY: live block of ours, freed once.
        unsafe { heap.deallocate_unsized(p) };
    }
    assert_eq!(heap.stats().live_bytes, Some(0));
}

/// A span is carved from its start a page at a time, and its header is in the region's
/// table, so a size class a program uses for a few small blocks keeps one page of its span
/// resident.
#[test]
fn a_span_with_one_small_block_out_has_one_page_resident() {
    let heap = WfSpan::new();
    let span_bytes = heap.config().span_bytes;
    let mut blocks = Vec::new();
    for size in [16, 48, 100, 128, 160, 256, 512, 640, 1024] {
        let block = heap.allocate(layout(size, 16)).unwrap();
        fill(block, size, 1);
        blocks.push((block, size));
    }
    for &(block, size) in &blocks {
        let base = block.as_ptr() as usize & !(span_bytes - 1);
        let pages = resident_pages(base, span_bytes)
            .iter()
            .filter(|&&r| r)
            .count();
        assert_eq!(pages, 1, "a span of {size} B blocks with one block out");
    }
    for (block, size) in blocks {
        // SAFETY: live blocks of ours, freed once.
        unsafe { heap.deallocate(block, layout(size, 16)) };
    }
}

#[test]
fn freed_blocks_are_reused_rather_than_growing_the_footprint() {
    let heap = WfSpan::new();
    let l = layout(64, 8);
    for _ in 0..100 {
        let blocks: Vec<_> = (0..10_000).map(|_| heap.allocate(l).unwrap()).collect();
        for b in blocks {
            // SAFETY: allocated above, freed once.
            unsafe { heap.deallocate(b, l) };
        }
    }
    let footprint = heap.stats().footprint_bytes.unwrap();
    assert!(footprint < 4 << 20, "footprint grew to {footprint} bytes");
}

#[test]
fn cross_thread_frees_under_checked_lose_nothing() {
    let heap = Checked::with_policy(WfSpan::new(), Policy::Record);
    let threads = 4;
    let per_thread = 20_000;
    std::thread::scope(|s| {
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        for _ in 0..threads {
            let (tx, rx) = mpsc::channel::<Vec<(usize, usize)>>();
            senders.push(tx);
            receivers.push(rx);
        }
        for (t, rx) in receivers.into_iter().enumerate() {
            let tx = senders[(t + 1) % threads].clone();
            let heap = &heap;
            s.spawn(move || {
                let mut batch = Vec::new();
                for i in 0..per_thread {
                    let size = 8 + (i * 37 + t * 11) % 3000;
                    let p = heap.allocate(layout(size, 8)).unwrap();
                    fill(p, size, (size % 251) as u8);
                    batch.push((p.as_ptr() as usize, size));
                    if batch.len() == 64 {
                        tx.send(std::mem::take(&mut batch)).unwrap();
                    }
                    while let Ok(got) = rx.try_recv() {
                        for (addr, size) in got {
                            let p = NonNull::new(addr as *mut u8).unwrap();
                            check(p, size, (size % 251) as u8);
                            // SAFETY: allocated by a neighbour with this layout, sent here.
                            unsafe { heap.deallocate(p, layout(size, 8)) };
                        }
                    }
                }
                tx.send(batch).unwrap();
                drop(tx);
                for got in rx {
                    for (addr, size) in got {
                        let p = NonNull::new(addr as *mut u8).unwrap();
                        check(p, size, (size % 251) as u8);
                        // SAFETY: as above.
                        unsafe { heap.deallocate(p, layout(size, 8)) };
                    }
                }
            });
        }
        drop(senders);
    });
    assert!(heap.violations().is_empty(), "{:?}", heap.violations());
    assert_eq!(heap.live_blocks(), 0);
    heap.check_stats().unwrap();
}

#[test]
fn counters_agree_with_checked_through_live_small_blocks_and_in_place_reallocations() {
    // `Checked` counts a reallocation as a free and an allocation, and its live bytes as
    // the layouts' sizes: the heap's counters must say as much (live bytes at least, the
    // counts exactly), whether the block moved or not.
    let heap = Checked::with_policy(WfSpan::new(), Policy::Record);
    let mut live = Vec::new();
    for i in 0..200 {
        let size = 16 + (i * 53) % 2000;
        live.push((heap.allocate(layout(size, 8)).unwrap(), size));
    }
    heap.check_stats().unwrap();
    let mut in_place = 0;
    for (p, size) in &mut live {
        let grown = *size + 1;
        // SAFETY: live, with this layout.
        let q = unsafe { heap.reallocate(*p, layout(*size, 8), grown) }.unwrap();
        in_place += usize::from(q == *p);
        (*p, *size) = (q, grown);
    }
    assert!(in_place > 100, "only {in_place} of 200 grew in place");
    heap.check_stats().unwrap();
    let reported = heap.stats().live_bytes.expect("wfspan reports live bytes");
    let asked: usize = live.iter().map(|&(_, size)| size).sum();
    assert!(
        reported >= asked as u64,
        "live bytes {reported} < {asked} asked"
    );
    for (p, size) in live {
        // SAFETY: live, with this layout.
        unsafe { heap.deallocate(p, layout(size, 8)) };
    }
    heap.check_stats().unwrap();
    assert!(heap.violations().is_empty(), "{:?}", heap.violations());
}

/// The block sizes of the default span size's classes: 16-byte steps to 128, then four a
/// power of two, to a quarter of the span.
fn class_sizes() -> Vec<usize> {
    let mut sizes: Vec<usize> = (1..=8).map(|i| 16 * i).collect();
    for k in 7..14 {
        sizes.extend((1..=4).map(|j| (1 << k) + j * (1 << (k - 2))));
    }
    assert_eq!(sizes.last(), Some(&(Config::DEFAULT.span_bytes / 4)));
    sizes
}

/// The statistics count a block of every size class, the largest included, and the frees
/// of a thread that never allocated from the heap (it has no heap of its own to count
/// them in).
#[test]
fn statistics_count_every_class_and_frees_by_threads_without_a_heap() {
    let heap = WfSpan::new();
    let sizes = class_sizes();
    let blocks: Vec<usize> = sizes
        .iter()
        .map(|&size| heap.allocate(layout(size, 16)).unwrap().as_ptr() as usize)
        .collect();
    let stats = heap.stats();
    assert_eq!(stats.allocations, Some(sizes.len() as u64));
    assert_eq!(
        stats.live_bytes,
        Some(sizes.iter().sum::<usize>() as u64),
        "live bytes of one block per class"
    );
    std::thread::scope(|s| {
        s.spawn(|| {
            for (&p, &size) in blocks.iter().zip(&sizes) {
                // SAFETY: allocated above with this layout, freed once, by a thread that
                // never allocated from `heap`.
                unsafe { heap.deallocate(NonNull::new(p as *mut u8).unwrap(), layout(size, 16)) };
            }
        });
    });
    let stats = heap.stats();
    assert_eq!(stats.deallocations, Some(sizes.len() as u64));
    assert_eq!(stats.live_bytes, Some(0));
}

/// The allocator goes by `wfspan` (the harness's `--alloc` name and the preload library's),
/// and its debug form shows its configuration and heap count.
#[test]
fn the_allocator_names_itself_and_shows_its_configuration() {
    let heap = WfSpan::new();
    assert_eq!(heap.name(), "wfspan");
    let p = heap.allocate(layout(64, 8)).unwrap();
    let shown = format!("{heap:?}");
    assert!(
        shown.starts_with("WfSpan")
            && shown.contains("span_bytes: 65536")
            && shown.contains("heaps: 1"),
        "{shown}"
    );
    // SAFETY: live block of ours, freed once.
    unsafe { heap.deallocate(p, layout(64, 8)) };
}

#[test]
fn reallocation_within_the_size_class_stays_in_place_and_keeps_contents() {
    let heap = WfSpan::new();
    let p = heap.allocate(layout(100, 8)).unwrap();
    fill(p, 100, 9);
    // SAFETY: live block with that layout.
    let q = unsafe { heap.reallocate(p, layout(100, 8), 110) }.unwrap();
    assert_eq!(p, q, "100 -> 110 B stays in the 112 B class");
    check(q, 100, 9);
    // SAFETY: live block with that layout.
    let r = unsafe { heap.reallocate(q, layout(110, 8), 5000) }.unwrap();
    assert_ne!(q, r);
    check(r, 100, 9);
    // SAFETY: live block with that layout.
    unsafe { heap.deallocate(r, layout(5000, 8)) };
}

#[test]
fn steps_stay_within_the_bound_when_every_free_is_remote() {
    let heap = WfSpan::new();
    let threads = 4;
    std::thread::scope(|s| {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads)
            .map(|_| mpsc::sync_channel::<Vec<usize>>(4))
            .unzip();
        for (t, rx) in rxs.into_iter().enumerate() {
            let tx = txs[(t + 1) % threads].clone();
            let heap = &heap;
            s.spawn(move || {
                for round in 0..200 {
                    let blocks: Vec<usize> = (0..500)
                        .map(|i| {
                            heap.allocate(layout(16 + (i * 13 + round) % 2000, 8))
                                .unwrap()
                                .as_ptr() as usize
                        })
                        .collect();
                    tx.send(blocks).unwrap();
                    for addr in rx.recv().unwrap() {
                        // SAFETY: a neighbour's block, freed once here: every free is remote.
                        unsafe { heap.deallocate_unsized(NonNull::new(addr as *mut u8).unwrap()) };
                    }
                }
            });
        }
    });
    let stats = heap.stats();
    let bound = step_bound(Config::DEFAULT.span_bytes, heap.heap_count() as u64);
    let (alloc, free) = (
        stats.max_alloc_steps.unwrap(),
        stats.max_free_steps.unwrap(),
    );
    assert!(alloc >= 2, "the slow path never ran: {alloc}");
    // Spans whose blocks all went to other threads must come back to their owner (round
    // robin over its full spans) or be discarded and reclaimed, not pile up: the footprint
    // stays within the paper's bound on memory that helping and the non-linearizable lists
    // can strand, A(N), which is far above what this run holds live (a few MiB).
    let footprint = stats.footprint_bytes.unwrap();
    let stranded = stranded_bound_bytes(Config::DEFAULT.span_bytes, heap.heap_count() as u64);
    assert!(
        footprint <= stranded,
        "footprint {footprint} B above A(N) = {stranded} B"
    );
    assert!(
        alloc <= bound.alloc,
        "alloc took {alloc} steps, bound {}",
        bound.alloc
    );
    assert!(
        free <= bound.free,
        "free took {free} steps, bound {}",
        bound.free
    );
}

#[test]
fn ten_thousand_short_lived_threads_reuse_a_handful_of_heaps() {
    static HEAP: WfSpan = WfSpan::new();
    for _ in 0..10_000 {
        std::thread::spawn(|| {
            let l = layout(48, 8);
            let p = HEAP.allocate(l).unwrap();
            // SAFETY: allocated just above.
            unsafe { HEAP.deallocate(p, l) };
        })
        .join()
        .unwrap();
    }
    assert!(
        HEAP.heap_count() <= 4,
        "{} heaps for sequential threads",
        HEAP.heap_count()
    );
    let footprint = HEAP.stats().footprint_bytes.unwrap();
    assert!(footprint < 8 << 20, "footprint {footprint}");
}

#[test]
fn zero_size_requests_get_distinct_blocks() {
    let heap = WfSpan::new();
    let a = heap.allocate(layout(0, 1)).unwrap();
    let b = heap.allocate(layout(0, 1)).unwrap();
    assert_ne!(a, b);
    // SAFETY: both live, freed once.
    unsafe {
        heap.deallocate(a, layout(0, 1));
        heap.deallocate(b, layout(0, 1));
    }
}

#[test]
fn impossible_sizes_are_errors_not_crashes() {
    let heap = WfSpan::new();
    let err = heap
        .allocate(layout(isize::MAX as usize - 4096, 8))
        .unwrap_err();
    assert_eq!(err.layout.size(), isize::MAX as usize - 4096);
}

#[test]
fn discarded_spans_are_reclaimed_by_their_last_remote_freer_and_reused() {
    // K = 2 spans per class: the owner must discard full spans while another thread still
    // holds their blocks; the last remote free of each discarded span reclaims it.
    let config = Config {
        spans_per_class: 2,
        ..Config::DEFAULT
    };
    let heap = Checked::with_policy(WfSpan::with_config(config), Policy::Record);
    let l = layout(1024, 16);
    let per_span = config.span_bytes / 1024;
    for _round in 0..20 {
        // Ten spans' worth of blocks, allocated here, freed by another thread.
        let blocks: Vec<usize> = (0..10 * per_span)
            .map(|_| heap.allocate(l).unwrap().as_ptr() as usize)
            .collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                // Give this thread a heap, so that its frees are counted and the spans it
                // reclaims go to its cache (a thread without one hands them to the orphans).
                let own = heap.allocate(layout(16, 8)).unwrap();
                // SAFETY: allocated just above.
                unsafe { heap.deallocate(own, layout(16, 8)) };
                for addr in blocks {
                    // SAFETY: allocated above with `l`, freed once, on another thread.
                    unsafe { heap.deallocate(NonNull::new(addr as *mut u8).unwrap(), l) };
                }
            });
        });
    }
    assert!(heap.violations().is_empty(), "{:?}", heap.violations());
    assert_eq!(heap.live_blocks(), 0);
    heap.check_stats().unwrap();
    let stats = heap.inner().stats();
    assert!(
        stats.max_free_steps.unwrap() >= 2,
        "no remote free ever reclaimed a discarded span"
    );
    // Reclaimed spans are reused: twenty rounds of ten spans fit in far fewer than 200.
    let footprint = stats.footprint_bytes.unwrap() as usize;
    assert!(
        footprint < 40 * config.span_bytes,
        "footprint {footprint} B: discarded spans were not reused"
    );
}

#[test]
fn blocks_freed_into_discarded_spans_are_handed_out_again_before_fresh_spans() {
    // K = 2: a thread fills forty spans of one class, so it discards thirty-eight of them
    // full; then it replaces a quarter of the blocks of every span, freeing one and
    // allocating one (a server overwriting values). The discarded spans are taken back and
    // hand those blocks out again (their other blocks are still out, so none is reclaimed),
    // instead of fresh spans from the region.
    let config = Config {
        spans_per_class: 2,
        ..Config::DEFAULT
    };
    let heap = Checked::with_policy(WfSpan::with_config(config), Policy::Record);
    let l = layout(256, 16);
    let per_span = config.span_bytes / 256;
    let mut blocks: Vec<usize> = (0..40 * per_span)
        .map(|_| heap.allocate(l).unwrap().as_ptr() as usize)
        .collect();
    let before = heap.inner().stats().footprint_bytes.unwrap();
    for (i, b) in blocks.iter_mut().enumerate() {
        if i % 4 == 1 {
            // SAFETY: allocated above with `l`, freed once.
            unsafe { heap.deallocate(NonNull::new(*b as *mut u8).unwrap(), l) };
            *b = heap.allocate(l).unwrap().as_ptr() as usize;
        }
    }
    let after = heap.inner().stats().footprint_bytes.unwrap();
    let distinct: std::collections::HashSet<_> = blocks.iter().copied().collect();
    assert_eq!(distinct.len(), blocks.len(), "a block was handed out twice");
    // A quarter of forty spans is ten: taken from the region they would add 640 KiB.
    assert!(
        after <= before + 2 * config.span_bytes as u64,
        "footprint {before} -> {after} B: the blocks freed into discarded spans stayed unused"
    );
    for &b in &blocks {
        // SAFETY: live blocks of `l`, each freed once.
        unsafe { heap.deallocate(NonNull::new(b as *mut u8).unwrap(), l) };
    }
    assert!(heap.violations().is_empty(), "{:?}", heap.violations());
    assert_eq!(heap.live_blocks(), 0);
    heap.check_stats().unwrap();
}

#[test]
fn a_discarded_span_is_taken_back_once_an_eighth_of_its_blocks_and_at_least_two_are_free() {
    // K = 2: a thread that fills six spans of one class has discarded all but two of them
    // full, the third among them. Blocks freed into the third are handed out again before
    // a fresh span once at least one in eight of its blocks (and at least two) are free,
    // not before: a span with a few holes stays discarded. Classes of about 250, 20, 15
    // and 3 blocks a span: thresholds 31, 2, 2 and 2.
    let config = Config {
        spans_per_class: 2,
        ..Config::DEFAULT
    };
    let span_of = |addr: usize| addr & !(config.span_bytes - 1);
    for size in [256, 3072, 4096, 16384] {
        let heap = Checked::with_policy(WfSpan::with_config(config), Policy::Record);
        let l = layout(size, 16);
        let mut live: Vec<usize> = Vec::new();
        let mut spans: Vec<usize> = Vec::new();
        // Allocates until a block comes from another span than the last one; returns it.
        let next_span = |live: &mut Vec<usize>, spans: &mut Vec<usize>| loop {
            let p = heap.allocate(l).unwrap().as_ptr() as usize;
            live.push(p);
            if spans.last() != Some(&span_of(p)) {
                spans.push(span_of(p));
                return span_of(p);
            }
        };
        for _ in 0..6 {
            next_span(&mut live, &mut spans);
        }
        let third = spans[2];
        let freed: Vec<usize> = live
            .iter()
            .copied()
            .filter(|&p| span_of(p) == third)
            .collect();
        let blocks = freed.len();
        let threshold = (blocks / 8).max(2);
        let free = |p: usize| {
            // SAFETY: a live block of `l`, allocated above, freed once.
            unsafe { heap.deallocate(NonNull::new(p as *mut u8).unwrap(), l) };
        };
        for &p in &freed[..threshold - 1] {
            free(p);
        }
        let next = next_span(&mut live, &mut spans);
        assert_ne!(
            next,
            third,
            "{size} B: the third span taken back with {} of {blocks} blocks free",
            threshold - 1
        );
        free(freed[threshold - 1]);
        let next = next_span(&mut live, &mut spans);
        assert_eq!(
            next, third,
            "{size} B: the third span not taken back with {threshold} of {blocks} blocks free"
        );
        // What is out: every block handed out, less one hand-out of each freed above (a
        // block handed out again after it is listed twice).
        for p in &freed[..threshold] {
            let i = live.iter().position(|q| q == p).unwrap();
            live.swap_remove(i);
        }
        for p in live {
            free(p);
        }
        assert!(heap.violations().is_empty(), "{:?}", heap.violations());
        assert_eq!(heap.live_blocks(), 0);
    }
}

#[test]
fn the_stranded_memory_bound_is_n_squared_spans_per_class() {
    // A(N) = (N + (ceil(N/P) + N - 1)(N - 1)) C S with P = N lists queried is N^2 C S.
    for span_bytes in [16 << 10, 64 << 10, 1 << 20] {
        let per_thread = stranded_bound_bytes(span_bytes, 1);
        assert_eq!(per_thread % span_bytes as u64, 0);
        assert!(per_thread >= 8 * span_bytes as u64, "fewer than 8 classes");
        assert_eq!(stranded_bound_bytes(span_bytes, 0), 0);
        for n in 1..=64u64 {
            assert_eq!(
                stranded_bound_bytes(span_bytes, n),
                n * n * per_thread,
                "{n} threads, {span_bytes} B spans"
            );
        }
    }
}

#[test]
fn threads_replacing_each_others_blocks_take_back_discarded_spans_without_sharing_a_block() {
    // K = 2 and two threads that each keep 24 spans' worth of blocks of one class and
    // replace them at random, a third of the frees being the other thread's blocks: spans
    // are discarded, freed into from both sides, taken back by either heap or reclaimed by
    // their last free, over and over. The checker sees every block handed out once at a
    // time and every free match.
    let config = Config {
        spans_per_class: 2,
        ..Config::DEFAULT
    };
    let heap = Checked::with_policy(WfSpan::with_config(config), Policy::Record);
    let l = layout(512, 16);
    let live = 24 * (config.span_bytes / 512);
    let (to_a, from_b) = mpsc::channel::<usize>();
    let (to_b, from_a) = mpsc::channel::<usize>();
    std::thread::scope(|s| {
        for (seed, give, take) in [(1u64, to_b, from_b), (2, to_a, from_a)] {
            let heap = &heap;
            s.spawn(move || {
                let mut rng = alloclab_core::rng::SplitMix64::new(seed);
                let mut mine: Vec<usize> = (0..live)
                    .map(|_| heap.allocate(l).unwrap().as_ptr() as usize)
                    .collect();
                for _ in 0..6 * live {
                    let i = rng.below(mine.len());
                    let old = mine[i];
                    if rng.below(3) == 0 {
                        // Hand it to the other thread, which frees it (a remote free).
                        let _ = give.send(old);
                    } else {
                        // SAFETY: allocated above with `l`, freed once.
                        unsafe { heap.deallocate(NonNull::new(old as *mut u8).unwrap(), l) };
                    }
                    mine[i] = heap.allocate(l).unwrap().as_ptr() as usize;
                    while let Ok(theirs) = take.try_recv() {
                        // SAFETY: the other thread's block, handed over once, freed once.
                        unsafe { heap.deallocate(NonNull::new(theirs as *mut u8).unwrap(), l) };
                    }
                }
                drop(give);
                for b in mine {
                    // SAFETY: live blocks of `l`, each freed once.
                    unsafe { heap.deallocate(NonNull::new(b as *mut u8).unwrap(), l) };
                }
                // What the other thread handed over after its last look.
                for theirs in take {
                    // SAFETY: as above.
                    unsafe { heap.deallocate(NonNull::new(theirs as *mut u8).unwrap(), l) };
                }
            });
        }
    });
    assert!(heap.violations().is_empty(), "{:?}", heap.violations());
    assert_eq!(heap.live_blocks(), 0);
    heap.check_stats().unwrap();
}

#[test]
fn spans_per_class_is_checked_against_the_class_table() {
    for (k, ok) in [
        (0, false),
        (1, true),
        (MAX_SPANS_PER_CLASS, true),
        (65, false),
    ] {
        let config = Config {
            spans_per_class: k,
            ..Config::DEFAULT
        };
        assert_eq!(config.validate().is_ok(), ok, "spans_per_class = {k}");
    }
}

#[test]
fn span_sizes_and_regions_are_checked_at_both_ends() {
    for (span_bytes, ok) in [
        (8 << 10, false),
        (16 << 10, true),
        (48 << 10, false),
        (64 << 10, true),
        ((64 << 10) + 1, false),
        (4 << 20, true),
        (8 << 20, false),
    ] {
        let config = Config {
            span_bytes,
            ..Config::DEFAULT
        };
        assert_eq!(config.validate().is_ok(), ok, "span_bytes = {span_bytes}");
    }
    for (region_bytes, ok) in [(128 << 20, false), ((1 << 30) - 1, false), (1 << 30, true)] {
        for span_bytes in [16 << 10, 4 << 20] {
            let config = Config {
                span_bytes,
                region_bytes,
                ..Config::DEFAULT
            };
            assert_eq!(
                config.validate().is_ok(),
                ok,
                "region_bytes = {region_bytes} with spans of {span_bytes}"
            );
        }
    }
    let config = Config {
        cached_runs: 0,
        ..Config::DEFAULT
    };
    assert!(config.validate().is_err());
}

#[test]
fn a_class_with_a_full_span_table_keeps_every_block() {
    // K = 64: one thread holds blocks in many more spans of one class than its table has
    // entries, frees them in a scattered order (spans move from full to partial to empty
    // while others are discarded), and allocates them again; the checker sees every block
    // stay distinct and every free match.
    let config = Config {
        spans_per_class: MAX_SPANS_PER_CLASS,
        ..Config::DEFAULT
    };
    let heap = Checked::with_policy(WfSpan::with_config(config), Policy::Record);
    let l = layout(4096, 16);
    let per_span = config.span_bytes / 4096;
    let count = 3 * MAX_SPANS_PER_CLASS as usize * per_span;
    let mut blocks: Vec<usize> = (0..count)
        .map(|_| heap.allocate(l).unwrap().as_ptr() as usize)
        .collect();
    for round in 0..4 {
        // Free every third block (a different third each round), then allocate them back.
        let mut kept = Vec::with_capacity(blocks.len());
        let mut freed = 0;
        for (i, &b) in blocks.iter().enumerate() {
            if (i + round) % 3 == 0 {
                // SAFETY: allocated above with `l`, freed once.
                unsafe { heap.deallocate(NonNull::new(b as *mut u8).unwrap(), l) };
                freed += 1;
            } else {
                kept.push(b);
            }
        }
        for _ in 0..freed {
            kept.push(heap.allocate(l).unwrap().as_ptr() as usize);
        }
        blocks = kept;
    }
    let distinct: std::collections::HashSet<_> = blocks.iter().copied().collect();
    assert_eq!(distinct.len(), count, "a block was handed out twice");
    for &b in &blocks {
        // SAFETY: live blocks of `l`, each freed once.
        unsafe { heap.deallocate(NonNull::new(b as *mut u8).unwrap(), l) };
    }
    assert!(heap.violations().is_empty(), "{:?}", heap.violations());
}

#[test]
fn freed_huge_mappings_are_reused_and_the_cache_stays_bounded() {
    use alloclab_wfspan::{HUGE_CACHE_BYTES, HUGE_CACHE_SLOTS};
    let heap = WfSpan::new();
    let l = layout(6 << 20, 16);
    let a = heap.allocate(l).unwrap();
    fill(a, l.size(), 0x5a);
    // SAFETY: live block of `heap`, freed once.
    unsafe { heap.deallocate(a, l) };
    let footprint = heap.stats().footprint_bytes.unwrap();
    // The same size again takes the cached mapping: same address, no new footprint.
    let b = heap.allocate(l).unwrap();
    assert_eq!(a, b, "the freed mapping was not reused");
    assert_eq!(heap.stats().footprint_bytes.unwrap(), footprint);
    // SAFETY: live block of `heap`, freed once.
    unsafe { heap.deallocate(b, l) };

    // Zeroed memory from a reused mapping is zero, though the mapping held 0x5a.
    let z = heap.allocate_zeroed(l).unwrap();
    assert_eq!(z, a);
    check(z, l.size(), 0);
    fill(z, l.size(), 0x77);
    // SAFETY: live block of `heap`, freed once.
    unsafe { heap.deallocate(z, l) };
    // A smaller huge block takes the cached mapping too; its pages past twice the block's
    // size go back to the OS, so they read as zero, while the block's own kept theirs.
    // (2.5 MiB: above the largest span run, 2 MiB.)
    let small = layout(5 << 19, 16);
    let c = heap.allocate(small).unwrap();
    assert_eq!(
        c, z,
        "the cached mapping was not reused for a smaller block"
    );
    // SAFETY: `c` is live; its usable size is readable.
    unsafe {
        let usable = heap.usable_size(c);
        assert!(
            usable >= l.size(),
            "the block did not get the whole mapping"
        );
        let bytes = core::slice::from_raw_parts(c.as_ptr(), usable);
        assert_eq!(bytes[0], 0x77);
        assert_eq!(
            bytes[l.size() - 1],
            0,
            "pages past twice the block were kept"
        );
        heap.deallocate(c, small);
    }

    // Many huge blocks freed at once: beyond the cache's bounds they are unmapped.
    let many: Vec<_> = (0..3 * HUGE_CACHE_SLOTS)
        .map(|_| heap.allocate(l).unwrap())
        .collect();
    let live_footprint = heap.stats().footprint_bytes.unwrap();
    for p in many {
        // SAFETY: live blocks of `heap`, each freed once.
        unsafe { heap.deallocate(p, l) };
    }
    let after = heap.stats().footprint_bytes.unwrap();
    assert!(after < live_footprint, "nothing was unmapped");
    // What stays mapped beyond the spans is the cache: at most its byte bound.
    assert!(
        after <= footprint + HUGE_CACHE_BYTES as u64,
        "{} bytes stayed mapped beyond the cache's {HUGE_CACHE_BYTES}",
        after - footprint
    );
    assert_eq!(heap.stats().live_bytes, Some(0));
}

#[test]
fn huge_blocks_aligned_to_a_span_or_more_are_served_and_freed() {
    let heap = WfSpan::new();
    for align in [64 << 10, 1 << 20, 4 << 20] {
        let l = layout(5 << 20, align);
        let a = heap.allocate(l).unwrap();
        assert_eq!(a.as_ptr() as usize % align, 0);
        fill(a, l.size(), 1);
        // SAFETY: live block of `heap`, freed once.
        unsafe { heap.deallocate(a, l) };
    }
    assert_eq!(heap.stats().live_bytes, Some(0));
}

/// The mincore residency of `len` bytes at `addr` (page-aligned), one bool per page; an
/// error (`ENOMEM`) where part of the range is not mapped.
fn mincore(addr: usize, len: usize) -> std::io::Result<Vec<bool>> {
    let page = 4096;
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: `mincore` only reads the page tables; `resident` has one byte per page.
    let rc = unsafe { libc::mincore(addr as *mut libc::c_void, len, resident.as_mut_ptr().cast()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(resident.into_iter().map(|r| r & 1 == 1).collect())
}

/// The residency of a mapped range, one bool per page.
fn resident_pages(addr: usize, len: usize) -> Vec<bool> {
    mincore(addr, len).unwrap_or_else(|e| panic!("mincore at {addr:#x}: {e}"))
}

/// A zeroed block of a run fresh from the region is not written: the OS's pages read zero
/// already, and stay out of memory until the program touches them (a `calloc` of a large
/// array costs no page faults up front).
#[test]
fn a_zeroed_block_of_a_fresh_run_leaves_its_pages_untouched() {
    let heap = WfSpan::new();
    let l = layout(1 << 20, 16);
    let p = heap.allocate_zeroed(l).unwrap();
    let start = p.as_ptr() as usize;
    // The object starts its run (the header is in the region's table): every page of it.
    assert_eq!(start % heap.config().span_bytes, 0);
    let pages = resident_pages(start, l.size());
    let touched = pages.iter().filter(|&&r| r).count();
    assert_eq!(touched, 0, "{touched} of {} pages written", pages.len());
    // SAFETY: a live block of `l` bytes.
    let bytes = unsafe { core::slice::from_raw_parts(p.as_ptr(), l.size()) };
    assert!(bytes.iter().all(|&b| b == 0));
    // SAFETY: live block of ours, freed once.
    unsafe { heap.deallocate(p, l) };
}

/// The span region is handed out to its last span and no further: a 1 GiB region of 4 MiB
/// spans, the first of them the header table's, serves 255 one-span runs, or 127 two-span
/// runs, then reports the allocator out of memory (not a block past the region).
#[test]
fn the_span_region_is_used_to_its_end_and_then_reports_out_of_memory() {
    let config = Config {
        span_bytes: 4 << 20,
        region_bytes: 1 << 30,
        ..Config::DEFAULT
    };
    assert_eq!(config.header_table_bytes(), config.span_bytes);
    for (size, runs) in [(2usize << 20, 255), (6 << 20, 127)] {
        let heap = WfSpan::with_config(config);
        let l = layout(size, 16);
        let mut served = Vec::new();
        let error = loop {
            match heap.allocate(l) {
                Ok(p) => served.push(p.as_ptr() as usize),
                Err(e) => break e,
            }
            assert!(
                served.len() <= runs,
                "{size} B: more than {runs} runs served"
            );
        };
        assert_eq!(served.len(), runs, "{size} B blocks served");
        assert!(
            error.to_string().contains("out of memory"),
            "{size} B: {error}"
        );
        let lowest = served.iter().min().unwrap() & !(config.span_bytes - 1);
        let spans_bytes = config.region_bytes - config.header_table_bytes();
        assert!(
            served.iter().all(|&p| p + size <= lowest + spans_bytes),
            "{size} B: a block past the region"
        );
    }
}

/// With `purge_published`, a heap that keeps publishing free span runs beyond its private
/// cache without taking any back gives their pages back (every page: the header is in the
/// region's table) past `PURGE_AFTER_SPANS`, and they are handed out again zeroed where
/// asked.
#[test]
fn published_runs_give_their_pages_back_and_come_back_zeroed() {
    let heap = WfSpan::with_config(Config {
        purge_published: true,
        ..Config::DEFAULT
    });
    let span_bytes = heap.config().span_bytes;
    let cached = heap.config().cached_runs as usize;
    // Runs of two spans (100 KiB objects): the first 8 published stay resident.
    let published_resident = PURGE_AFTER_SPANS as usize / 2;
    let l = layout(100 << 10, 16);
    let runs: Vec<_> = (0..cached + published_resident + 4)
        .map(|_| heap.allocate(l).unwrap())
        .collect();
    for &p in &runs {
        fill(p, l.size(), 0xab);
    }
    for &p in &runs {
        // SAFETY: live blocks of ours, freed once.
        unsafe { heap.deallocate(p, l) };
    }
    assert!(heap.purged_bytes() > 0, "nothing given back");
    let purged: Vec<_> = runs
        .iter()
        .map(|p| p.as_ptr() as usize & !(span_bytes - 1))
        .filter(|&base| resident_pages(base, 2 * span_bytes).iter().all(|r| !r))
        .collect();
    assert!(
        purged.len() >= 4 && purged.len() <= runs.len() - cached - published_resident,
        "{} of {} runs given back; the private cache keeps {cached}, and {published_resident} \
         are published resident",
        purged.len(),
        runs.len()
    );
    // Back again, zeroed, whether cached (dirty) or given back.
    let again: Vec<_> = (0..runs.len())
        .map(|_| heap.allocate_zeroed(l).unwrap())
        .collect();
    for &p in &again {
        check(p, l.size(), 0);
        // SAFETY: live block of ours, freed once.
        unsafe { heap.deallocate(p, l) };
    }
}

/// A heap that frees a batch of runs and takes them back, again and again, publishes the
/// few its private cache cannot hold and retakes them resident: nothing is given back, so
/// no page faults back in.
#[test]
fn batches_freed_and_taken_back_give_nothing_back() {
    let heap = WfSpan::with_config(Config {
        purge_published: true,
        ..Config::DEFAULT
    });
    let l = layout(100 << 10, 16);
    let batch = heap.config().cached_runs as usize + 3;
    for _ in 0..50 {
        let runs: Vec<_> = (0..batch).map(|_| heap.allocate(l).unwrap()).collect();
        for p in runs {
            fill(p, 64, 1);
            // SAFETY: live block of ours, freed once.
            unsafe { heap.deallocate(p, l) };
        }
    }
    assert_eq!(heap.purged_bytes(), 0);
}

/// Without `purge_published` (the default) no free makes a system call; `trim` gives the
/// thread's cached runs and the cached huge mappings back on request.
#[test]
fn trim_gives_cached_runs_and_huge_mappings_back() {
    let heap = WfSpan::new();
    let run = layout(100 << 10, 16);
    let huge = layout(4 << 20, 16);
    let blocks: Vec<_> = [run, run, huge]
        .iter()
        .map(|&l| {
            let p = heap.allocate(l).unwrap();
            fill(p, l.size(), 0x5a);
            (p, l)
        })
        .collect();
    for &(p, l) in &blocks {
        // SAFETY: live blocks of ours, freed once.
        unsafe { heap.deallocate(p, l) };
    }
    assert_eq!(heap.purged_bytes(), 0, "a free gave pages back by default");
    let footprint = heap.stats().footprint_bytes.unwrap();
    let given = heap.trim();
    assert!(
        given >= (4 << 20) + 2 * (100 << 10),
        "trim gave back {given} bytes"
    );
    // What it reports: the cached runs' pages given back, and the huge mapping unmapped
    // (which leaves the footprint).
    let unmapped = footprint - heap.stats().footprint_bytes.unwrap();
    assert_eq!(given, heap.purged_bytes() + unmapped);
    assert_eq!(heap.trim(), 0, "a second trim finds nothing left");
    let p = heap.allocate_zeroed(run).unwrap();
    check(p, run.size(), 0);
    // SAFETY: live block of ours, freed once.
    unsafe { heap.deallocate(p, run) };
}

/// Whether the page at `addr` is mapped.
fn mapped(addr: usize) -> bool {
    mincore(addr, 4096).is_ok()
}

/// Dropping an instance that is not a `static` gives its address space back: the whole
/// span region and the huge mappings it kept cached. In a forked child, where no other
/// thread can map something at the addresses freed before they are looked at.
/// Runs `f` in a forked child (given 20 seconds) and checks that it returned.
fn in_child(f: impl FnOnce() + std::panic::UnwindSafe) {
    // SAFETY: the child runs `f` and leaves with `_exit`; it allocates, which is sound after
    // `fork` here: the test harness's threads hold no allocator lock while they wait for
    // their own tests (and the child has `alarm` should one be held).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: a plain system call.
        unsafe { libc::alarm(20) };
        let passed = std::panic::catch_unwind(f).is_ok();
        // SAFETY: ends the child without running the parent's destructors or handlers.
        unsafe { libc::_exit(if passed { 0 } else { 1 }) }
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed (wait status {status:#x}); its message is above"
    );
}

#[test]
fn dropping_an_instance_unmaps_its_region_and_its_cached_mappings() {
    in_child(|| {
        let config = Config {
            region_bytes: 1 << 30,
            ..Config::DEFAULT
        };
        let heap = WfSpan::with_config(config);
        let run = heap.allocate(layout(100 << 10, 16)).unwrap();
        let huge = heap.allocate(layout(4 << 20, 16)).unwrap();
        // SAFETY: live blocks of ours, freed once.
        unsafe {
            heap.deallocate(run, layout(100 << 10, 16));
            heap.deallocate(huge, layout(4 << 20, 16));
        }
        // The first span run starts the spans, after the header table.
        let region =
            (run.as_ptr() as usize & !(config.span_bytes - 1)) - config.header_table_bytes();
        let pages = [
            region,
            region + config.header_table_bytes(),
            region + config.region_bytes - 4096,
            huge.as_ptr() as usize & !4095,
        ];
        assert!(
            pages.iter().all(|&p| mapped(p)),
            "mapped while the heap lives"
        );
        drop(heap);
        for p in pages {
            assert!(!mapped(p), "{p:#x} still mapped (region at {region:#x})");
        }
    });
}

/// A huge block is a mapping of its own: it is served where the span region cannot be
/// reserved (an address-space limit below it), where small blocks are out of memory.
#[test]
fn huge_blocks_need_no_span_region() {
    in_child(|| {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().next().unwrap().parse().unwrap();
        // Room for a few huge blocks above what the process maps, not for a 1 GiB region.
        let limit = pages * 4096 + (256 << 20);
        let rlimit = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: a plain system call with a valid argument; only this child is limited.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rlimit) }, 0);
        let heap = WfSpan::with_config(Config {
            region_bytes: 1 << 30,
            ..Config::DEFAULT
        });
        let huge = layout(8 << 20, 16);
        let p = heap.allocate(huge).unwrap();
        fill(p, huge.size(), 0x42);
        check(p, huge.size(), 0x42);
        assert!(
            heap.allocate(layout(100, 16)).is_err(),
            "a small block without a span region"
        );
        // SAFETY: live block of ours, freed once.
        unsafe { heap.deallocate(p, huge) };
        assert_eq!(heap.stats().live_bytes, Some(0));
    });
}

/// The C ABI's free, from a thread that never allocated (no heap, no chain: its head is
/// null): the fast path compares the null head with the span's owner, which is never null,
/// and pushes small blocks as remote frees; a span run's object and a huge block go down
/// the general path. Every free is counted.
#[test]
fn a_thread_without_a_heap_frees_through_the_c_fast_path() {
    let heap = WfSpan::new();
    let sizes = [16, 48, 1000, 16 << 10, 100 << 10, 4 << 20];
    let blocks: Vec<(usize, usize)> = sizes
        .iter()
        .map(|&size| {
            let p = heap.allocate(layout(size, 16)).unwrap();
            fill(p, size, 3);
            (p.as_ptr() as usize, size)
        })
        .collect();
    let fast = std::thread::scope(|s| {
        s.spawn(|| {
            let mut fast = Vec::new();
            for &(p, _) in &blocks {
                let block = NonNull::new(p as *mut u8).unwrap();
                // SAFETY: live blocks of `heap`, each freed once, here.
                let freed = unsafe { heap.try_deallocate_fast(block) };
                if !freed {
                    // SAFETY: as above: the fast path changed nothing.
                    unsafe { heap.deallocate_unsized(block) };
                }
                fast.push(freed);
            }
            fast
        })
        .join()
        .unwrap()
    });
    assert_eq!(fast, [true, true, true, true, false, false]);
    let stats = heap.stats();
    assert_eq!(stats.deallocations, Some(sizes.len() as u64));
    assert_eq!(stats.live_bytes, Some(0));
}

/// The C ABI's free compares the block's span owner with the head of the thread's chain of
/// heaps; a thread that has used a second instance since must still free the first one's
/// blocks as their owner (back on its active span, reused at once), not as a remote free.
#[test]
fn a_thread_using_two_instances_frees_each_ones_blocks_as_their_owner() {
    let first = WfSpan::new();
    let second = WfSpan::new();
    let l = layout(48, 16);
    let kept = first.allocate(l).unwrap();
    let a = first.allocate(l).unwrap();
    // The second instance's heap is now the head of this thread's chain.
    let b = second.allocate(l).unwrap();
    for (heap, block) in [(&first, a), (&second, b)] {
        // SAFETY: a live block of `heap`; freed once here.
        let freed = unsafe { heap.try_deallocate_fast(block) };
        if !freed {
            // SAFETY: as above: the fast path changed nothing.
            unsafe { heap.deallocate_unsized(block) };
        }
        let again = heap.allocate(l).unwrap();
        assert_eq!(
            again, block,
            "the block went back to its owner's active span"
        );
        // SAFETY: live block of `heap`, freed once.
        unsafe { heap.deallocate(again, l) };
    }
    // SAFETY: live block of `first`, freed once.
    unsafe { first.deallocate(kept, l) };
    assert_eq!(first.stats().live_bytes, Some(0));
    assert_eq!(second.stats().live_bytes, Some(0));
}

/// Configurations whose largest class is a quarter of the span and the class table's limit
/// is that (16 KiB spans), the table's own end (64 KiB) or neither (1 MiB).
fn span_configs() -> [Config; 3] {
    [16 << 10, 64 << 10, 1 << 20].map(|span_bytes| Config {
        span_bytes,
        region_bytes: 1 << 30,
        ..Config::DEFAULT
    })
}

/// `malloc`'s fast path gives, for every size up to the largest class the class table
/// covers (a quarter span, at most 16 KiB), the block the general path would give — same
/// class, same usable size — and leaves every larger size to the general path.
#[test]
fn the_malloc_fast_path_serves_every_tabled_size_as_allocate_would() {
    for config in span_configs() {
        let heap = WfSpan::with_config(config);
        let limit = (config.span_bytes / 4).min(16 << 10);
        let mut live = Vec::new();
        for size in (0..=limit + 512).step_by(8).chain([limit - 1, limit + 1]) {
            let l = layout(size.max(1), 16);
            // One block stays out, so that the next one's free leaves the span active with
            // a free block for the fast path.
            let kept = heap.allocate(l).unwrap();
            // SAFETY: live block of ours.
            let usable = unsafe { heap.usable_size(kept) };
            live.push(kept);
            let freed = heap.allocate(l).unwrap();
            // SAFETY: live block of ours, freed once.
            unsafe { heap.deallocate_unsized(freed) };
            let what = format!("{size} B with spans of {} B", config.span_bytes);
            match heap.try_malloc_fast(size) {
                Some(fast) => {
                    assert!(size <= limit, "{what}: above the table, yet served");
                    assert_eq!(fast.as_ptr() as usize % 16, 0, "{what}");
                    // SAFETY: live block of ours.
                    assert_eq!(unsafe { heap.usable_size(fast) }, usable, "{what}");
                    live.push(fast);
                }
                None => assert!(size > limit, "{what}: missed the fast path"),
            }
        }
        for p in live {
            // SAFETY: live blocks of ours, freed once.
            unsafe { heap.deallocate_unsized(p) };
        }
        assert_eq!(heap.stats().live_bytes, Some(0));
    }
}

/// A span run's object reports its size rounded up to a page, not its whole run, and grows
/// into the rest of its run in place, through `reallocate` and through the hook C's
/// `realloc` takes (`grow_in_place`), its usable size following; a block of a size class
/// does not grow.
#[test]
fn a_run_object_grows_into_its_run_in_place_and_reports_what_it_holds() {
    let heap = WfSpan::new();
    let p = heap.allocate(layout(20_000, 16)).unwrap();
    // SAFETY: (whole test) every pointer is a live block of ours, resized and freed once.
    unsafe {
        assert_eq!(heap.usable_size(p), 20_480);
        fill(p, 20_000, 7);
        assert!(heap.grow_in_place(p, 40_000));
        assert_eq!(heap.usable_size(p), 40_960);
        check(p, 20_000, 7);
        let q = heap.reallocate(p, layout(40_000, 16), 60_000).unwrap();
        assert_eq!(q, p, "a run of one span holds 60,000 bytes");
        assert_eq!(heap.usable_size(p), 61_440);
        check(p, 20_000, 7);
        let q = heap.reallocate(p, layout(60_000, 16), 17_000).unwrap();
        assert_eq!(q, p);
        assert_eq!(heap.usable_size(p), 20_480);
        // Past its run: the caller moves it.
        assert!(!heap.grow_in_place(p, 200_000));
        assert_eq!(heap.usable_size(p), 20_480);
        heap.deallocate(p, layout(17_000, 16));
        let small = heap.allocate(layout(100, 16)).unwrap();
        let usable = heap.usable_size(small);
        assert!(!heap.grow_in_place(small, usable + 1));
        heap.deallocate(small, layout(100, 16));
    }
    assert_eq!(heap.stats().live_bytes, Some(0));
}

/// A request up to a quarter of a span is a block of a size class, no larger than that
/// quarter; a larger one is a span run, the rest of its span its room, the request rounded
/// up to a page its usable size.
#[test]
fn requests_above_a_quarter_span_are_span_runs() {
    for config in span_configs() {
        let heap = WfSpan::with_config(config);
        let quarter = config.span_bytes / 4;
        for size in [
            quarter - 16,
            quarter,
            quarter + 1,
            quarter + 16,
            2 * quarter,
        ] {
            let l = layout(size, 16);
            let p = heap.allocate(l).unwrap();
            // SAFETY: live block of ours.
            let usable = unsafe { heap.usable_size(p) };
            let what = format!("{size} B with spans of {} B", config.span_bytes);
            if size <= quarter {
                assert!(usable <= quarter, "{what}: {usable} B usable");
            } else {
                // The run is the object's alone: the rest of the span counts as live.
                let room = heap.stats().live_bytes.unwrap() as usize;
                assert!(room > 2 * quarter, "{what}: {room} B of room");
                assert_eq!(
                    usable,
                    size.next_multiple_of(RUN_USABLE_STEP).min(room),
                    "{what}"
                );
            }
            // SAFETY: live block of ours, freed once.
            unsafe { heap.deallocate(p, l) };
        }
    }
}

/// C's `malloc_trim` says whether anything went back to the OS: yes with a freed huge
/// block's mapping cached, no once nothing is left.
#[test]
fn malloc_trim_reports_whether_anything_went_back() {
    let heap = WfSpan::new();
    let huge = layout(4 << 20, 16);
    let p = heap.allocate(huge).unwrap();
    // SAFETY: live block of ours, freed once.
    unsafe { heap.deallocate(p, huge) };
    assert!(MallocHeap::trim(&heap), "a cached huge mapping was left");
    assert!(!MallocHeap::trim(&heap), "a second trim found something");
}

/// The footprint counts huge mappings beside the span region and the metadata; the peak is
/// the footprint while nothing has been given back, and keeps the most it reached after.
#[test]
fn the_footprint_counts_huge_mappings_and_the_peak_keeps_the_most() {
    let heap = WfSpan::new();
    let small = layout(100, 16);
    let s = heap.allocate(small).unwrap();
    let before = heap.stats();
    assert!(before.footprint_bytes.unwrap() > 0);
    assert_eq!(before.peak_footprint_bytes, before.footprint_bytes);
    let huge = layout(8 << 20, 16);
    let h = heap.allocate(huge).unwrap();
    let with_huge = heap.stats();
    assert!(
        with_huge.footprint_bytes.unwrap() >= before.footprint_bytes.unwrap() + (8 << 20),
        "{with_huge:?} after {before:?}"
    );
    assert_eq!(with_huge.peak_footprint_bytes, with_huge.footprint_bytes);
    // SAFETY: live blocks of ours, freed once.
    unsafe {
        heap.deallocate(h, huge);
        heap.deallocate(s, small);
    }
    heap.trim();
    let after = heap.stats();
    assert!(
        after.footprint_bytes < with_huge.footprint_bytes,
        "{after:?}"
    );
    assert_eq!(after.peak_footprint_bytes, with_huge.peak_footprint_bytes);
}
