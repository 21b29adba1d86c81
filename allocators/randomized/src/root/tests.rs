//! Tests of the control block: the arenas a thread touches, the chunk table, huge blocks,
//! frees by address and the heap walk.

use core::alloc::Layout;

use alloclab_core::Allocator;

use super::*;
use crate::Randomized;

#[test]
fn the_thread_pointer_is_pthread_self() {
    let check = || {
        // SAFETY: no preconditions.
        assert_eq!(thread_pointer(), unsafe { libc::pthread_self() } as usize);
    };
    check();
    std::thread::spawn(check).join().unwrap();
}

/// The resident pages among the `len` bytes at `base` (a page-aligned mapping).
fn resident_pages(base: usize, len: usize) -> Vec<usize> {
    let page = os::page_size();
    let mut v = vec![0u8; len / page];
    // SAFETY: `base..base + len` is mapped (a chunk of the heap under test); `v` has a
    // byte per page.
    let rc = unsafe { libc::mincore(base as *mut libc::c_void, len, v.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore failed");
    (0..v.len()).filter(|&i| v[i] & 1 != 0).collect()
}

/// One thread allocates and frees from a fresh heap; returns the heap, its control
/// block's address, and the block's address.
fn one_thread_heap(size: usize) -> (Randomized, usize, usize) {
    let heap = Randomized::with_seed(7).expect("first chunk");
    let root = heap.existing_root().expect("built") as *const Root as usize;
    let layout = Layout::from_size_align(size, 16).unwrap();
    let block = std::thread::scope(|s| {
        s.spawn(|| {
            let p = heap.allocate(layout).expect("allocation");
            // SAFETY: allocated just above with `layout`.
            unsafe { heap.deallocate(p.cast(), layout) };
            p.cast::<u8>().as_ptr() as usize
        })
        .join()
        .unwrap()
    });
    (heap, root, block)
}

#[test]
fn a_thread_touches_one_page_of_the_control_block_for_its_arena() {
    let (heap, root, _) = one_thread_heap(64);
    let page = os::page_size();
    let pages = resident_pages(root, ROOT_SPACE.next_multiple_of(page));
    // SAFETY: `root` is the control block of `heap`, alive until the end of the test.
    let r = unsafe { &*(root as *const Root) };
    let page_of = |addr: usize| (addr - root) / page;
    // The pages of the table that hold an entry: the first chunk's and the thread's
    // chunk's, one page unless the two lie on either side of a 2 GiB boundary (which
    // the addresses the OS picks decide).
    let mut table_pages: Vec<usize> = r
        .table
        .iter()
        .filter(|e| e.load(Ordering::Relaxed) != 0)
        .map(|e| page_of(e as *const AtomicUsize as usize))
        .collect();
    table_pages.dedup();
    let slot_pages: Vec<usize> = r
        .slots
        .iter()
        .map(|s| page_of(s as *const Slot as usize))
        .collect();
    // The shared page, one arena's slot, and the table's pages of the two chunks.
    // (Before: the slot straddled two pages, the shared fields had one after the slots,
    // each chunk's table entry a page of its own, and arena 0 was set up at creation,
    // its slot and first block touched whether used or not: 7 or more.)
    // And the page of the arenas' slab states that holds this one's (a 64-byte block is a
    // slab slot).
    let slab_pages: Vec<usize> = r
        .slabs
        .iter()
        .map(|s| page_of(s as *const _ as usize))
        .collect();
    let slots_touched = pages.iter().filter(|p| slot_pages.contains(p)).count();
    assert_eq!(slots_touched, 1, "resident control-block pages {pages:?}");
    let slabs_touched = pages.iter().filter(|p| slab_pages.contains(p)).count();
    assert_eq!(slabs_touched, 1, "resident control-block pages {pages:?}");
    assert!(
        pages.iter().all(|p| *p == 0
            || slot_pages.contains(p)
            || slab_pages.contains(p)
            || table_pages.contains(p)),
        "resident control-block pages {pages:?}, table entries on {table_pages:?}"
    );
    assert!(!table_pages.is_empty() && table_pages.len() <= 2);
    assert!(heap.check().is_ok());
}

#[test]
fn a_chunk_with_a_wilderness_leaves_its_last_page_untouched() {
    // Above the largest slab slot: a block of a chunk with a wilderness.
    let (heap, root, block) = one_thread_heap(2000);
    let chunk = block & !(CHUNK - 1);
    let page = os::page_size();
    let pages = resident_pages(chunk, CHUNK);
    let last = CHUNK / page - 1;
    assert!(!pages.contains(&last), "last page resident: {pages:?}");
    if chunk != root {
        // The thread's own chunk: a few pages at its front.
        assert!(pages.iter().all(|&p| p < 16), "pages {pages:?}");
    }
    assert!(heap.check().is_ok());
}

#[test]
fn a_slab_chunk_touches_its_header_records_and_window_only() {
    let (heap, _, slot) = one_thread_heap(64);
    let chunk = slot & !(CHUNK - 1);
    let page = os::page_size();
    let pages = resident_pages(chunk, CHUNK);
    // The header with the bitmap's start, the records' first page (a page further at
    // most), and the window's first 256 slots of 80 bytes: 20 KiB, six pages at most.
    assert!(pages.len() <= 2 + 2 + 6, "pages {pages:?}");
    let window_end = (slot - chunk) / page;
    assert!(
        pages.iter().all(|&p| p <= window_end + 6),
        "pages {pages:?}, the slot on page {window_end}"
    );
    assert!(heap.check().is_ok());
}

/// The chunk table's slots: the chunks of one run of [`TABLE_RUN`] take consecutive
/// slots on one page of the table, and runs spread over the table's pages.
#[test]
fn a_run_of_chunks_takes_consecutive_slots_on_one_page_of_the_table() {
    let mut rng = Rng::from_seed_stream([9; 32], 0);
    let pages = TABLE / TABLE_RUN;
    let mut used = std::collections::HashSet::new();
    for _ in 0..256 {
        // A run anywhere in a 47-bit address space.
        let runs = 1u64 << (47 - (CHUNK * TABLE_RUN).trailing_zeros());
        let first = rng.below(runs) as usize * TABLE_RUN * CHUNK;
        let slot = Root::slot_of(first);
        assert_eq!(slot % TABLE_RUN, 0, "run at {first:#x}: slot {slot}");
        assert!(slot + TABLE_RUN <= TABLE, "run at {first:#x}: slot {slot}");
        for k in 0..TABLE_RUN {
            assert_eq!(
                Root::slot_of(first + k * CHUNK),
                slot + k,
                "{first:#x} + {k}"
            );
        }
        used.insert(slot / TABLE_RUN);
    }
    assert!(
        used.len() >= pages * 3 / 4,
        "256 runs on {} of {pages} pages",
        used.len()
    );
}

/// `count` chunk bases (never mapped) whose table probes all start at `slot`: the
/// same offset in runs of chunks that hash to the same page, far above where the OS
/// maps anything here.
fn bases_at(slot: usize, count: usize) -> Vec<usize> {
    let run_bytes = TABLE_RUN * CHUNK;
    let first = (1usize << 45) / run_bytes;
    // Runs hash to one of TABLE / TABLE_RUN pages: a few hundred runs hold `count`.
    let bases: Vec<usize> = (first..first + 1024 * count)
        .map(|run| run * run_bytes + slot % TABLE_RUN * CHUNK)
        .filter(|&base| Root::slot_of(base) == slot)
        .take(count)
        .collect();
    assert_eq!(
        bases.len(),
        count,
        "runs whose chunks start their probe at slot {slot}"
    );
    bases
}

/// The chunk table with colliding entries: each goes to the next free slot after
/// where its probe starts (wrapping at the table's end), each is found by its own
/// base with its own kind, a removed one leaves a tombstone that lookups walk past and
/// an insert reuses; and the table refuses an entry past three quarters full.
#[test]
fn the_chunk_table_keeps_colliding_entries_apart_and_refuses_past_three_quarters() {
    let heap = Randomized::with_seed(79).expect("first chunk");
    let root = heap.existing_root().expect("built");
    root.table_lock.lock();
    // Three entries whose probes start at the last slot: the second and third wrap.
    let bases = bases_at(TABLE - 1, 4);
    let kinds = [KIND_BLOCKS, KIND_HUGE, KIND_BLOCKS];
    for (&base, &kind) in bases.iter().zip(&kinds) {
        assert!(root.table_insert(base | kind));
    }
    for (&base, &kind) in bases.iter().zip(&kinds) {
        assert_eq!(root.table_find(base), Some(kind), "{base:#x}");
    }
    assert_eq!(root.table_find(bases[3]), None, "never inserted");
    root.table_remove(bases[0]);
    assert_eq!(root.table_find(bases[0]), None, "removed");
    assert_eq!(
        root.table_find(bases[1]),
        Some(KIND_HUGE),
        "past the tombstone"
    );
    assert_eq!(
        root.table_find(bases[2]),
        Some(KIND_BLOCKS),
        "past the tombstone"
    );
    let used = root.table_used.load(Ordering::Relaxed);
    assert!(root.table_insert(bases[3] | KIND_HUGE));
    assert_eq!(
        root.table_used.load(Ordering::Relaxed),
        used,
        "the tombstone reused"
    );
    assert_eq!(root.table_find(bases[3]), Some(KIND_HUGE));
    for &base in &bases[1..] {
        root.table_remove(base);
    }
    // Fill: the entry that would take the table past three quarters is refused.
    let mut filler = Vec::new();
    let first = (1usize << 46) / CHUNK;
    for chunk in first.. {
        let base = chunk * CHUNK;
        if !root.table_insert(base | KIND_BLOCKS) {
            break;
        }
        filler.push(base);
        assert!(filler.len() <= TABLE, "the table never refused an entry");
    }
    assert_eq!(root.table_used.load(Ordering::Relaxed), TABLE / 4 * 3);
    assert!(
        filler
            .iter()
            .all(|&b| root.table_find(b) == Some(KIND_BLOCKS))
    );
    for base in filler {
        root.table_remove(base);
    }
    // The heap's own chunk is still found, past whatever tombstones are left.
    let own = root as *const Root as usize;
    assert_eq!(root.table_find(own), Some(KIND_BLOCKS));
    root.table_lock.unlock(0);
    assert!(heap.check().is_ok());
}

/// Removing the last entry of a cluster empties its slot and the tombstones before it,
/// which stop counting against the limit; a tombstone with an entry after it stays
/// (lookups of that entry walk past it).
#[test]
fn removing_a_clusters_last_entry_empties_the_tombstones_before_it() {
    // Not dropped if the test fails: its table would then hold made-up mappings,
    // which dropping the heap would read and unmap.
    let heap = core::mem::ManuallyDrop::new(Randomized::with_seed(80).expect("first chunk"));
    let root = heap.existing_root().expect("built");
    root.table_lock.lock();
    // Three entries whose probes start at one slot, with four empty slots from there.
    let slot = (0..TABLE - 4)
        .step_by(97)
        .find(|&s| (s..s + 4).all(|i| root.table[i].load(Ordering::Relaxed) == 0))
        .expect("four empty slots in a row");
    let bases = bases_at(slot, 3);
    let used = root.table_used.load(Ordering::Relaxed);
    for &base in &bases {
        assert!(root.table_insert(base | KIND_HUGE));
    }
    let slot_value = |i: usize| root.table[i].load(Ordering::Relaxed);
    assert_eq!(root.table_used.load(Ordering::Relaxed), used + 3);
    // The middle one: a tombstone with an entry after it.
    root.table_remove(bases[1]);
    assert_eq!(slot_value(slot + 1), TOMBSTONE);
    assert_eq!(root.table_used.load(Ordering::Relaxed), used + 3);
    assert_eq!(
        root.table_find(bases[2]),
        Some(KIND_HUGE),
        "past the tombstone"
    );
    // The last one: it and the tombstone before it are emptied, the first stays.
    root.table_remove(bases[2]);
    assert_eq!((slot_value(slot + 1), slot_value(slot + 2)), (0, 0));
    assert_eq!(root.table_used.load(Ordering::Relaxed), used + 1);
    assert_eq!(root.table_find(bases[0]), Some(KIND_HUGE));
    assert_eq!(root.table_find(bases[1]), None);
    assert_eq!(root.table_find(bases[2]), None);
    root.table_remove(bases[0]);
    assert_eq!(slot_value(slot), 0);
    assert_eq!(root.table_used.load(Ordering::Relaxed), used);
    root.table_lock.unlock(0);
    assert!(heap.check().is_ok());
    drop(core::mem::ManuallyDrop::into_inner(heap));
}

/// Mappings that come and go at ever-new addresses, one or two at a time, never fill
/// the table: four times its size of them are each registered and found.
#[test]
fn mappings_at_ever_new_addresses_never_fill_the_chunk_table() {
    // Not dropped if the test fails: its table would then hold made-up mappings,
    // which dropping the heap would read and unmap.
    let heap = core::mem::ManuallyDrop::new(Randomized::with_seed(81).expect("first chunk"));
    let root = heap.existing_root().expect("built");
    root.table_lock.lock();
    let first = (1usize << 46) / CHUNK;
    let mut previous = None;
    for chunk in first..first + 4 * TABLE {
        let base = chunk * CHUNK;
        assert!(
            root.table_insert(base | KIND_HUGE),
            "mapping {} of a churn refused, {} slots in use",
            chunk - first,
            root.table_used.load(Ordering::Relaxed)
        );
        assert_eq!(root.table_find(base), Some(KIND_HUGE));
        if let Some(previous) = previous.replace(base) {
            root.table_remove(previous);
        }
    }
    root.table_remove(previous.unwrap());
    assert!(root.table_used.load(Ordering::Relaxed) < TABLE / 2);
    let own = root as *const Root as usize;
    assert_eq!(root.table_find(own), Some(KIND_BLOCKS));
    root.table_lock.unlock(0);
    assert!(heap.check().is_ok());
    drop(core::mem::ManuallyDrop::into_inner(heap));
}

/// The arenas that eight threads alive at once, each with a stack of `stack` bytes,
/// prefer.
fn preferred_by_eight_threads(stack: usize) -> Vec<usize> {
    let barrier = std::sync::Barrier::new(8);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                std::thread::Builder::new()
                    .stack_size(stack)
                    .spawn_scoped(s, || {
                        // All alive together: eight stacks at once.
                        barrier.wait();
                        preferred_arena()
                    })
                    .unwrap()
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Threads alive at once prefer different arenas, with Rust's 2 MiB stacks and the C
/// library's 8 MiB ones alike (consecutive stacks of either size map to different
/// arenas), so that they do not take turns on one lock.
#[test]
fn threads_alive_at_once_spread_over_the_arenas() {
    for stack in [2 << 20, 8 << 20] {
        let mut preferred = preferred_by_eight_threads(stack);
        assert!(preferred.iter().all(|&a| a < ARENAS), "{preferred:?}");
        preferred.sort_unstable();
        preferred.dedup();
        assert!(
            preferred.len() >= 4,
            "eight threads with {stack} B stacks on arenas {preferred:?}"
        );
    }
}

/// The spread that `preferred_arena` promises, on stacks laid out as the C library maps
/// them (one after another downwards, each its size plus a guard page, or without one),
/// over random bases: on average, the first 13 consecutive 2 MiB stacks and the first
/// 15.8 consecutive 8 MiB ones meet no arena twice (with a plain hash, 4.7 would).
#[test]
fn consecutive_stacks_of_either_size_prefer_different_arenas() {
    let mut rng = alloclab_core::rng::SplitMix64::new(0x5eed);
    for (stack, least_mean) in [(2usize << 20, 12.5), (8 << 20, 15.0)] {
        for guard in [0, 4096] {
            let bases = 4096;
            let mut before_repeat = 0;
            for _ in 0..bases {
                // The thread pointer: near the top of a stack, anywhere in a 47-bit
                // address space, 16-byte aligned.
                let top = (rng.next_u64() as usize % (1 << 46) + (1 << 40)) & !15;
                let mut seen = [false; ARENAS];
                let mut run = 0;
                for i in 0..ARENAS {
                    let arena = arena_of(top - i * (stack + guard));
                    assert!(arena < ARENAS);
                    if seen[arena] {
                        break;
                    }
                    seen[arena] = true;
                    run += 1;
                }
                before_repeat += run;
            }
            let mean = before_repeat as f64 / bases as f64;
            assert!(
                mean >= least_mean,
                "{stack} B stacks, {guard} B guard: the first {mean:.2} meet no arena twice"
            );
        }
    }
}

/// Arena 0 starts in the first chunk, after the control block, and carves it to its
/// end before it maps a chunk of its own: its blocks lie there, and the heap walk
/// finds them.
#[test]
fn arena_zero_carves_the_first_chunk_after_the_control_block() {
    let heap = Randomized::with_seed(78).expect("first chunk");
    let root = heap.existing_root().expect("built");
    let base = root as *const Root as usize;
    let block = 60 << 10;
    let mut blocks = Vec::new();
    let mapped = heap.counters().mapped_bytes;
    // Until arena 0 maps a chunk: the first one's room after the control block.
    while heap.counters().mapped_bytes == mapped {
        let mut arena = root.lock_arena(0);
        let p = arena.alloc(block, 16, 0, root).expect("allocation");
        drop(arena);
        blocks.push(p);
        assert!(
            blocks.len() <= CHUNK / block,
            "the first chunk never filled"
        );
    }
    let last = blocks.pop().unwrap();
    // Each lands within WINDOW bytes of the wilderness front, the slack before it
    // going to the free lists.
    let least = (CHUNK - ROOT_SPACE) / (block + crate::heap::WINDOW) - 1;
    assert!(
        blocks.len() >= least,
        "{} blocks, {least} expected",
        blocks.len()
    );
    for &p in &blocks {
        assert!(
            p >= base + ROOT_SPACE && p + block <= base + CHUNK,
            "{p:#x} outside the first chunk's room"
        );
    }
    let shape = heap.check().expect("heap walk");
    assert_eq!(shape.live_blocks, blocks.len() as u64 + 1, "{shape:?}");
    let layout = Layout::from_size_align(block, 16).unwrap();
    for p in blocks.into_iter().chain([last]) {
        // SAFETY: allocated above with `layout`'s size and alignment, freed once.
        unsafe { heap.deallocate(core::ptr::NonNull::new(p as *mut u8).unwrap(), layout) };
    }
    assert_eq!(heap.check().expect("heap walk").live_blocks, 0);
}

/// Frees `p` (of `layout`) from a thread whose preferred arena is not this thread's,
/// so that the free is queued for the block's arena rather than done in place.
///
/// The candidates are alive at once: a thread spawned after another one exited may get its
/// stack, and with it its identity and preferred arena, so that threads spawned one after
/// the other can all prefer this thread's arena (as 64 did in one run of the whole suite).
fn free_from_another_arena(heap: &Randomized, p: core::ptr::NonNull<u8>, layout: Layout) {
    const CANDIDATES: usize = 64;
    let mine = preferred_arena();
    let address = p.as_ptr() as usize;
    let freed = std::sync::atomic::AtomicBool::new(false);
    let all_alive = std::sync::Barrier::new(CANDIDATES);
    std::thread::scope(|s| {
        for _ in 0..CANDIDATES {
            s.spawn(|| {
                all_alive.wait();
                if preferred_arena() != mine
                    && freed
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    let p = core::ptr::NonNull::new(address as *mut u8).unwrap();
                    // SAFETY: live, allocated with `layout`, freed once (here: the one
                    // thread that won the flag).
                    unsafe { heap.deallocate(p, layout) };
                }
                // The others stay alive until every candidate has looked.
                all_alive.wait();
            });
        }
    });
    assert!(
        freed.load(Ordering::Acquire),
        "{CANDIDATES} threads alive at once all preferred this thread's arena"
    );
}

/// With zero-fill, the payload of a block freed by another thread reads zero once
/// the owner has taken the free, and is treated as a local free is: one under 64 KiB
/// is zeroed with stores (by the thread that queues it), one of 64 KiB or more has its
/// whole pages given back, none of them written.
#[test]
fn a_remote_free_zeroes_a_small_payload_and_gives_a_large_ones_pages_back() {
    let heap = Randomized::with_seed_and_checks(64, Checks::ALL).unwrap();
    // Live small blocks: a heap that did not shrink, where only the scrub of a large
    // payload gives pages back.
    // (Above the largest request a slab slot takes: the block path's live bytes.)
    let small = Layout::from_size_align(1100, 16).unwrap();
    let live: Vec<_> = (0..1024).map(|_| heap.allocate(small).unwrap()).collect();
    for (payload, least_released) in [
        (32usize << 10, None),
        ((64 << 10) - 16, None),
        (64 << 10, Some(56 << 10)),
        (96 << 10, Some(88 << 10)),
    ] {
        let layout = Layout::from_size_align(payload, 16).unwrap();
        let p = heap.allocate(layout).unwrap();
        // SAFETY: a live block of `payload` bytes.
        unsafe { p.as_ptr().write_bytes(0x5a, payload) };
        let before = heap.counters().released_bytes;
        free_from_another_arena(&heap, p, layout);
        // `counters` completes every queued free first.
        let released = heap.counters().released_bytes - before;
        // SAFETY: a read of freed memory in a chunk, which stays mapped.
        let stale = unsafe { p.as_ptr().add(payload / 2).read_volatile() };
        assert_eq!(stale, 0, "{payload} B: the freed payload reads {stale:#x}");
        match least_released {
            None => assert_eq!(released, 0, "{payload} B: zeroed with stores"),
            Some(least) => assert!(
                released >= least,
                "{payload} B: gave back {released} bytes (at least {least} expected)"
            ),
        }
    }
    heap.check().expect("freed memory reads zero");
    for p in live {
        // SAFETY: allocated above with `small`, freed once.
        unsafe { heap.deallocate(p, small) };
    }
}

#[test]
fn chunks_whose_wilderness_retired_end_with_their_sentinel() {
    let heap = Randomized::with_seed(11).expect("first chunk");
    let layout = Layout::from_size_align(900 << 10, 16).unwrap();
    // Fourteen blocks of 900 KiB fill three 4 MiB chunks or more of one arena, each
    // retiring the wilderness before.
    let blocks: Vec<_> = (0..14)
        .map(|_| heap.allocate(layout).expect("allocation"))
        .collect();
    let shape = heap.check().expect("heap walk");
    assert!(shape.chunks >= 4, "{shape:?}");
    for p in blocks {
        // SAFETY: allocated above with `layout`.
        unsafe { heap.deallocate(p.cast(), layout) };
    }
    let shape = heap.check().expect("heap walk");
    assert_eq!(shape.live_blocks, 0, "{shape:?}");
}

/// A heap limited to `limit` arenas keeps eight threads alive at once, and every object
/// they allocate (slots and blocks), on its first `limit` arenas: with one, all on arena 0;
/// with two, both claimed and shared by the rest; with all sixteen, an arena each.
#[test]
fn a_heap_limited_to_fewer_arenas_keeps_every_thread_and_object_on_them() {
    const THREADS: usize = 8;
    for limit in [1, 2, ARENAS] {
        let heap =
            Randomized::with_seed_checks_and_arenas(31, Checks::ALL, limit).expect("first chunk");
        assert_eq!(heap.arenas(), limit);
        let root = heap.existing_root().expect("built");
        let barrier = std::sync::Barrier::new(THREADS);
        let seen: Vec<(usize, Vec<usize>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let own = root.own_arena();
                        let objects: Vec<usize> = [16, 500, 1040, 4000, 60 << 10]
                            .iter()
                            .map(|&size| {
                                let layout = Layout::from_size_align(size, 16).unwrap();
                                let p = heap.allocate(layout).expect("allocation");
                                let arena = root.arena_of(p.as_ptr() as usize & !(CHUNK - 1));
                                // SAFETY: allocated just above with `layout`.
                                unsafe { heap.deallocate(p, layout) };
                                arena
                            })
                            .collect();
                        // Once more after the heap is set up: the thread's arena is stable.
                        assert_eq!(root.own_arena(), own);
                        (own, objects)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut owns: Vec<usize> = seen.iter().map(|(own, _)| *own).collect();
        for (own, objects) in &seen {
            assert!(*own < limit, "limit {limit}: a thread on arena {own}");
            assert!(
                objects.iter().all(|&a| a < limit),
                "limit {limit}: objects on arenas {objects:?}"
            );
        }
        owns.sort_unstable();
        owns.dedup();
        assert_eq!(
            owns.len(),
            limit.min(THREADS),
            "limit {limit}: arenas {owns:?}"
        );
        heap.check().expect("a sound heap");
    }
}

/// A heap cannot be limited to no arena or to more than it has.
#[test]
fn an_arena_count_outside_one_to_the_arenas_is_refused() {
    for arenas in [0, ARENAS + 1] {
        let Err(err) = Randomized::with_seed_checks_and_arenas(1, Checks::ALL, arenas) else {
            panic!("a heap of {arenas} arenas was built");
        };
        assert!(
            matches!(err.kind, alloclab_core::AllocErrorKind::Other(_)),
            "{err:?}"
        );
    }
}
