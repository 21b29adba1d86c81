//! Functional tests of the persistent heap on the simulator and on files.

mod common;

use std::alloc::Layout;
use std::collections::BTreeMap;

use alloclab_pmem::heap::{CACHE_LIMIT, SLAB_BYTES};
use alloclab_pmem::{HeapError, Medium, MediumError, PPtr, PersistentHeap, PoolError, SimMedium};
use common::TempPath;
use proptest::prelude::*;

const MIB: usize = 1 << 20;

fn sim_heap(len: usize) -> PersistentHeap<SimMedium> {
    PersistentHeap::create_on(SimMedium::new(len), 512).unwrap()
}

fn root_slot<M: Medium>(heap: &PersistentHeap<M>, i: usize) -> *mut PPtr<u8> {
    assert!((i + 1) * 8 <= heap.root_size());
    // SAFETY: inside the root (asserted).
    unsafe { heap.root().add(i * 8).cast() }
}

fn load(slot: *mut PPtr<u8>) -> PPtr<u8> {
    // SAFETY: every slot used here is an aligned word of the root or of a live block.
    unsafe { PPtr::load(slot) }
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// Reopens the heap from what a crash right now would certainly keep (the durable image).
fn reopen(heap: &PersistentHeap<SimMedium>) -> PersistentHeap<SimMedium> {
    PersistentHeap::open_on(SimMedium::from_image(heap.medium().durable_image())).unwrap()
}

/// Asserts that `blocks` (offset ↦ size) do not overlap and lie in the heap.
fn assert_disjoint(blocks: &BTreeMap<u64, usize>) {
    let mut end = 0;
    for (&off, &size) in blocks {
        assert!(
            off >= end,
            "block {off:#x} overlaps the previous one ending at {end:#x}"
        );
        end = off + size as u64;
    }
}

#[test]
fn allocate_write_free_round_trips_for_sizes_from_1_byte_to_1_mib() {
    let heap = sim_heap(8 * MIB);
    let sizes = [
        1, 7, 8, 63, 64, 65, 100, 192, 200, 1000, 4095, 4096, 4097, 65536, 65537, MIB,
    ];
    let mut blocks = BTreeMap::new();
    for (i, &size) in sizes.iter().enumerate() {
        // SAFETY: a root slot, no other thread.
        let p = unsafe { heap.allocate_into(root_slot(&heap, i), layout(size)) }.unwrap();
        assert_eq!(load(root_slot(&heap, i)), p);
        let block = heap.block_size(p).unwrap();
        assert!(block >= size, "{size} got a block of {block}");
        assert_eq!(p.offset() % 64, 0);
        let ptr = heap.resolve(p).unwrap();
        // SAFETY: the block is live and `block` bytes long.
        unsafe { std::ptr::write_bytes(ptr, i as u8 | 1, block) };
        heap.persist(ptr, block);
        blocks.insert(p.offset(), block);
    }
    assert_disjoint(&blocks);
    for (i, &size) in sizes.iter().enumerate() {
        let p = load(root_slot(&heap, i));
        let ptr = heap.resolve(p).unwrap();
        // SAFETY: live, at least `size` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(ptr, size) };
        assert!(
            bytes.iter().all(|&b| b == i as u8 | 1),
            "block {i} overwritten"
        );
    }
    let reopened = reopen(&heap);
    assert_eq!(reopened.recovery().live_blocks, sizes.len() as u64);
    assert_eq!(
        reopened.recovery().live_bytes,
        blocks.values().sum::<usize>() as u64
    );
    for i in 0..sizes.len() {
        let p = load(root_slot(&heap, i));
        // SAFETY: a root slot holding a live block.
        unsafe { heap.free_from(root_slot(&heap, i)) }.unwrap();
        assert!(load(root_slot(&heap, i)).is_null());
        assert_eq!(heap.block_size(p), None);
    }
    let stats = heap.stats();
    assert_eq!(
        (stats.allocations, stats.frees, stats.live_blocks),
        (16, 16, 0)
    );
    assert_eq!(reopen(&heap).recovery().live_blocks, 0);
}

#[test]
fn the_fast_path_costs_one_flush_and_one_fence_per_operation() {
    let heap = sim_heap(4 * MIB);
    for size in [8, 64, 200, 1000, 4096] {
        // Warm up: the first allocation of a class assigns a slab (one more fence).
        // SAFETY: root slots, no other thread.
        unsafe {
            heap.allocate_into(root_slot(&heap, 0), layout(size))
                .unwrap();
            heap.free_from(root_slot(&heap, 0)).unwrap();
        }
        for _ in 0..50 {
            for op in 0..2 {
                let before = heap.medium().stats();
                // SAFETY: as above.
                unsafe {
                    if op == 0 {
                        heap.allocate_into(root_slot(&heap, 1), layout(size))
                            .unwrap();
                    } else {
                        heap.free_from(root_slot(&heap, 1)).unwrap();
                    }
                }
                let after = heap.medium().stats();
                let (flushes, fences) =
                    (after.flushes - before.flushes, after.fences - before.fences);
                let lines = after.lines_flushed - before.lines_flushed;
                assert!(
                    flushes <= 2 && fences <= 2,
                    "{size}: {flushes} flushes {fences} fences"
                );
                assert_eq!((flushes, lines, fences), (1, 1, 1), "size {size} op {op}");
            }
        }
    }
}

#[test]
fn reserve_publish_stores_every_dest_with_one_fence_and_a_dropped_reservation_returns_its_block() {
    let heap = sim_heap(2 * MIB);
    let mut items: Vec<_> = (0..3)
        .map(|i| {
            let r = heap.reserve(layout(100 + i * 300)).unwrap();
            // SAFETY: the reserved block is ours, `size()` bytes.
            unsafe { std::ptr::write_bytes(r.as_ptr(), 0x55, r.size()) };
            heap.medium().flush(r.pptr().offset() as usize, r.size());
            (root_slot(&heap, i), r)
        })
        .collect();
    let pptrs: Vec<_> = items.iter().map(|(_, r)| r.pptr()).collect();
    // Unpublished: not reachable, so a crash now frees them.
    assert_eq!(reopen(&heap).recovery().live_blocks, 0);
    for (_, r) in &items {
        assert!(!r.is_published());
        let shown = format!("{r:?}");
        assert!(
            shown.starts_with("Reservation {") && shown.ends_with("published: false }"),
            "{shown}"
        );
    }
    let before = heap.medium().stats();
    // SAFETY: root slots, no other thread.
    unsafe { heap.publish(&mut items) };
    let after = heap.medium().stats();
    assert_eq!(after.fences - before.fences, 1);
    assert_eq!(after.flushes - before.flushes, 3);
    for (_, r) in &items {
        assert!(r.is_published());
        assert!(format!("{r:?}").ends_with("published: true }"));
    }
    drop(items);
    for (i, p) in pptrs.iter().enumerate() {
        assert_eq!(load(root_slot(&heap, i)), *p);
        assert!(
            heap.block_size(*p).is_some(),
            "a published block stays live"
        );
    }
    assert_eq!(reopen(&heap).recovery().live_blocks, 3);
    assert_eq!(heap.stats().allocations, 3);

    let r = heap.reserve(layout(64)).unwrap();
    let p = r.pptr();
    assert_eq!(heap.block_size(p), Some(64));
    drop(r);
    assert_eq!(heap.block_size(p), None);
    assert_eq!(heap.stats().live_blocks, 3);
}

#[test]
fn keep_allocate_unlinked_and_release_write_nothing_persistent_and_recovery_follows_the_callers_link()
 {
    let heap = sim_heap(4 * MIB);
    // The first block of a class carves a slab, whose tag is persisted (off the fast path).
    drop(heap.reserve(layout(200)).unwrap());
    let before = heap.stats().persist;
    let kept = heap.reserve(layout(200)).unwrap().keep();
    let unlinked = heap.allocate_unlinked(layout(200)).unwrap();
    assert_ne!(kept, unlinked);
    assert_eq!(
        heap.stats().persist,
        before,
        "keep or allocate_unlinked flushed or fenced"
    );
    assert_eq!(heap.stats().live_blocks, 2);
    assert_eq!(heap.block_size(unlinked), Some(256));
    // The caller links `kept` itself, durably; `unlinked` it never links.
    // SAFETY: root slot 0 is an aligned word of the root, used by this thread only.
    unsafe { PPtr::store(root_slot(&heap, 0), kept) };
    heap.persist(root_slot(&heap, 0).cast(), 8);
    let after_link = heap.stats().persist;

    let recovered = reopen(&heap);
    assert_eq!(
        recovered.block_size(kept),
        Some(256),
        "a linked kept block is live"
    );
    assert_eq!(
        recovered.block_size(unlinked),
        None,
        "an unlinked one is freed"
    );
    assert_eq!(recovered.recovery().live_blocks, 1);

    // Release: the caller unlinks durably first, then gives the block back.
    // SAFETY: as above.
    unsafe { PPtr::store(root_slot(&heap, 0), PPtr::NULL) };
    heap.persist(root_slot(&heap, 0).cast(), 8);
    let after_unlink = heap.stats().persist;
    // SAFETY: no durable word names `kept` any more, and it is not used again.
    unsafe { heap.release(kept) }.unwrap();
    assert_eq!(
        heap.stats().persist,
        after_unlink,
        "release flushed or fenced"
    );
    assert_ne!(after_unlink, after_link);
    assert_eq!(heap.block_size(kept), None);
    // SAFETY: release refuses a block that is not live and null, writing nothing.
    let (again, null) = unsafe { (heap.release(kept), heap.release(PPtr::NULL)) };
    assert!(
        matches!(again, Err(HeapError::NotABlock { .. })),
        "{again:?}"
    );
    assert!(matches!(null, Err(HeapError::NullDest)), "{null:?}");
    // SAFETY: `unlinked` is live and named by nothing durable.
    unsafe { heap.release(unlinked) }.unwrap();
    assert_eq!(heap.stats().live_blocks, 0);
}

/// The edges of what `take` serves: alignments up to a cache line (each block aligned so),
/// a reservation reporting the size of the block it holds — a small class or a run of
/// whole slabs — and, in an empty heap, one run of every slab at once.
#[test]
fn alignments_up_to_a_line_reservation_sizes_and_a_run_of_the_whole_heap_are_served() {
    let heap = sim_heap(4 * MIB);
    let Err(HeapError::TooLarge { max, .. }) = heap.allocate_unlinked(layout(1 << 40)) else {
        panic!("a 1 TiB block was not too large");
    };
    assert_eq!(max % SLAB_BYTES, 0);
    let whole = heap
        .allocate_unlinked(layout(max))
        .expect("every slab as one run");
    assert_eq!(heap.block_size(whole), Some(max));
    // SAFETY: live, named by nothing durable, not used again.
    unsafe { heap.release(whole) }.unwrap();
    for align in [1, 8, 16, 32, 64] {
        let l = Layout::from_size_align(48, align).unwrap();
        let p = heap.allocate_unlinked(l).unwrap();
        let r = heap.reserve(l).unwrap();
        for (p, how) in [(p, "allocated"), (r.keep(), "reserved")] {
            let address = heap.resolve(p).unwrap() as usize;
            assert_eq!(address % align, 0, "a block {how} for alignment {align}");
            // SAFETY: live, named by nothing durable, not used again.
            unsafe { heap.release(p) }.unwrap();
        }
    }
    // With blocks of the smallest class cached (the fast paths' stacks non-empty), a zero
    // size and an alignment over a cache line are still refused by every entry point.
    let warm = heap.allocate_unlinked(layout(48)).unwrap();
    // SAFETY: as above.
    unsafe { heap.release(warm) }.unwrap();
    let zero = Layout::from_size_align(0, 8).unwrap();
    let wide = Layout::from_size_align(48, 128).unwrap();
    // SAFETY: the lists are empty: nothing is released.
    let refusals = unsafe {
        [
            (heap.allocate_unlinked(zero), heap.allocate_unlinked(wide)),
            (
                heap.reserve(zero).map(|r| r.keep()),
                heap.reserve(wide).map(|r| r.keep()),
            ),
            (
                heap.release_many_then_allocate(&[], zero),
                heap.release_many_then_allocate(&[], wide),
            ),
            (
                heap.release_many_then_reuse(&[], zero),
                heap.release_many_then_reuse(&[], wide),
            ),
        ]
    };
    for (i, (zero, wide)) in refusals.into_iter().enumerate() {
        assert!(matches!(zero, Err(HeapError::ZeroSize)), "{i}: {zero:?}");
        assert!(
            matches!(wide, Err(HeapError::UnsupportedAlignment { align: 128 })),
            "{i}: {wide:?}"
        );
    }
    assert_eq!(heap.stats().live_blocks, 0);
    for size in [1, 64, 65, 4096, 4097, SLAB_BYTES, 3 * SLAB_BYTES - 100] {
        let r = heap.reserve(layout(size)).unwrap();
        let reserved = r.size();
        let p = r.keep();
        assert!(reserved >= size, "{reserved} bytes reserved for {size}");
        assert_eq!(
            heap.block_size(p),
            Some(reserved),
            "a reservation of {size}"
        );
        // SAFETY: as above.
        unsafe { heap.release(p) }.unwrap();
    }
    assert_eq!(heap.stats().live_blocks, 0);
}

/// A destination word may lie anywhere in a live block, a run's later slabs included.
#[test]
fn a_destination_in_a_runs_later_slab_is_accepted() {
    let heap = sim_heap(4 * MIB);
    // Runs after the first slab too (a run's head is found from its later slabs).
    let before = heap.allocate_unlinked(layout(2 * SLAB_BYTES)).unwrap();
    let run = heap.allocate_unlinked(layout(3 * SLAB_BYTES)).unwrap();
    assert_ne!(run.offset(), before.offset());
    let base = heap.resolve(run).unwrap();
    for at in [0, 8, SLAB_BYTES + 64, 2 * SLAB_BYTES, 3 * SLAB_BYTES - 8] {
        // SAFETY: `at` is 8-aligned and inside the live run.
        let dest = unsafe { base.add(at) }.cast::<PPtr<u8>>();
        // SAFETY: an aligned word of a live block, used by this thread only.
        let p = unsafe { heap.allocate_into(dest, layout(64)) }
            .unwrap_or_else(|e| panic!("a destination {at} bytes into a run: {e:?}"));
        assert_eq!(load(dest), p);
        // SAFETY: as above; `dest` names the block.
        unsafe { heap.free_from(dest) }.unwrap();
    }
    // SAFETY: live, named by nothing durable.
    unsafe {
        heap.release(run).unwrap();
        heap.release(before).unwrap();
    }
    assert_eq!(heap.stats().live_blocks, 0);
}

/// `release` takes a block's start only: a pointer into a live block — the middle of a
/// small block, a word into a run, a run's later slab — is refused, and the block stays
/// live and whole until its own start is released.
#[test]
fn release_refuses_a_pointer_into_a_live_block_and_keeps_the_block() {
    let heap = sim_heap(4 * MIB);
    let small = heap.allocate_unlinked(layout(200)).unwrap();
    let run = heap.allocate_unlinked(layout(2 * SLAB_BYTES)).unwrap();
    let run_size = heap.block_size(run).unwrap();
    assert!(run_size >= 2 * SLAB_BYTES);
    for (block, inside) in [
        (small, 8),
        (small, 64),
        (small, 248),
        (run, 8),
        (run, SLAB_BYTES as u64),
        (run, run_size as u64 - 8),
    ] {
        let p = PPtr::from_offset(block.offset() + inside);
        // SAFETY: release refuses a pointer that is not a live block's start, writing
        // nothing.
        let refused = unsafe { heap.release(p) };
        assert!(
            matches!(refused, Err(HeapError::NotABlock { offset }) if offset == p.offset()),
            "{inside} bytes into a block: {refused:?}"
        );
        assert!(heap.block_size(block).is_some(), "the block was freed");
        assert_eq!(heap.stats().live_blocks, 2);
    }
    // A byte into every block of whole slabs of the class, whatever its place in its slab.
    let mut many = vec![PPtr::NULL; 40];
    heap.allocate_unlinked_sizes(&[200; 40], &mut many).unwrap();
    for p in many.iter().chain([&small]) {
        let inside = PPtr::from_offset(p.offset() + 1);
        // SAFETY: as above.
        let refused = unsafe { heap.release(inside) };
        assert!(
            matches!(refused, Err(HeapError::NotABlock { .. })),
            "a byte into a block: {refused:?}"
        );
    }
    assert_eq!(heap.stats().live_blocks, 42);
    // SAFETY: all are live and named by nothing durable.
    unsafe {
        heap.release_many(&many).unwrap();
        heap.release(small).unwrap();
        heap.release(run).unwrap();
    }
    assert_eq!(heap.stats().live_blocks, 0);
}

#[test]
#[should_panic(expected = "publish")]
fn publish_into_a_dest_outside_the_pool_panics_before_writing() {
    let heap = sim_heap(MIB);
    let mut outside = PPtr::<u8>::NULL;
    let r = heap.reserve(layout(64)).unwrap();
    // SAFETY: the destination is a valid local; the heap refuses it.
    unsafe { heap.publish(&mut [(&raw mut outside, r)]) };
}

#[test]
fn bad_requests_and_bad_destinations_are_errors_that_write_nothing() {
    let heap = sim_heap(MIB);
    let slot = root_slot(&heap, 0);
    let fences = heap.medium().stats().fences;
    // SAFETY: every call gets a root slot or a pointer the heap must refuse.
    unsafe {
        assert!(matches!(
            heap.allocate_into(slot, layout(0)),
            Err(HeapError::ZeroSize)
        ));
        assert!(matches!(
            heap.allocate_into(slot, Layout::from_size_align(64, 128).unwrap()),
            Err(HeapError::UnsupportedAlignment { align: 128 })
        ));
        assert!(matches!(
            heap.allocate_into(slot, layout(4 * MIB)),
            Err(HeapError::TooLarge { .. })
        ));
        let mut local = PPtr::<u8>::NULL;
        assert!(matches!(
            heap.allocate_into(&raw mut local, layout(8)),
            Err(HeapError::DestOutsidePool { .. })
        ));
        assert!(matches!(
            heap.allocate_into(heap.root().add(4).cast(), layout(8)),
            Err(HeapError::MisalignedDest { .. })
        ));
        assert!(matches!(
            heap.allocate_into(heap.root().add(heap.root_size()).cast(), layout(8)),
            Err(HeapError::DestOutsidePool { .. })
        ));
        assert!(matches!(heap.free_from(slot), Err(HeapError::NullDest)));
        assert!(matches!(
            heap.free_from(&raw mut local),
            Err(HeapError::DestOutsidePool { .. })
        ));
    }
    assert_eq!(
        heap.medium().stats().fences,
        fences,
        "an error wrote something"
    );
    assert!(load(slot).is_null());

    // SAFETY: root slots, no other thread.
    unsafe {
        let p = heap.allocate_into(slot, layout(256)).unwrap();
        let inner = root_slot(&heap, 1);
        // A pointer into the middle of a block, and then a freed block, are not blocks.
        PPtr::store(inner, PPtr::from_offset(p.offset() + 64));
        assert!(matches!(
            heap.free_from(inner),
            Err(HeapError::NotABlock { .. })
        ));
        PPtr::store(inner, p);
        heap.free_from(slot).unwrap();
        assert!(matches!(
            heap.free_from(inner),
            Err(HeapError::NotABlock { .. })
        ));
        // A destination inside a freed block is refused.
        let field = heap.resolve(p).unwrap().cast::<PPtr<u8>>();
        assert!(matches!(
            heap.allocate_into(field, layout(8)),
            Err(HeapError::DestOutsidePool { .. })
        ));
        // Offsets outside the heap.
        PPtr::store(inner, PPtr::from_offset(8));
        assert!(matches!(
            heap.free_from(inner),
            Err(HeapError::NotABlock { offset: 8 })
        ));
        PPtr::store(inner, PPtr::from_offset(u64::MAX - 63));
        assert!(matches!(
            heap.free_from(inner),
            Err(HeapError::NotABlock { .. })
        ));
    }
}

#[test]
fn many_at_once_allocates_and_releases_as_one_at_a_time_with_nothing_persistent() {
    let heap = sim_heap(4 * MIB);
    // Sizes of several classes, a repeated one, and a run (served block by block).
    let sizes = [512, 1000, 512, 64, 4096, 100_000];
    let mut out = vec![PPtr::NULL; sizes.len()];
    // The first block of a class carves a slab, and a run is assigned, with their tags
    // persisted (off the fast path); after that, small blocks write nothing persistent.
    heap.allocate_unlinked_sizes(&sizes, &mut out).unwrap();
    let before = heap.stats().persist;
    heap.allocate_unlinked_sizes(&sizes[..5], &mut out[..5])
        .unwrap();
    assert_eq!(
        heap.stats().persist,
        before,
        "allocate_unlinked_sizes flushed or fenced"
    );
    let first_run = out[5];
    out[5] = heap.allocate_unlinked(layout(100_000)).unwrap();
    // SAFETY: named by nothing.
    unsafe { heap.release(first_run) }.unwrap();
    let before = heap.stats().persist;
    assert_eq!(heap.stats().live_blocks, 5 + 6);
    let mut blocks = BTreeMap::new();
    for (p, &size) in out.iter().zip(&sizes) {
        let got = heap.block_size(*p).expect("a live block");
        assert!(got >= size, "{got} < {size}");
        blocks.insert(p.offset(), got);
    }
    assert_eq!(blocks.len(), sizes.len(), "a block handed out twice");
    assert_disjoint(&blocks);

    // Release them all, with a double entry and a null in the list: those are refused,
    // the rest freed, nothing persistent written.
    let mut list = out.clone();
    list.insert(2, out[0]);
    list.push(PPtr::NULL);
    // SAFETY: the blocks are named by nothing durable and not used again.
    let released = unsafe { heap.release_many(&list) };
    assert!(
        matches!(released, Err(HeapError::NotABlock { offset }) if offset == out[0].offset()),
        "{released:?}"
    );
    assert_eq!(
        heap.stats().persist,
        before,
        "release_many flushed or fenced"
    );
    assert_eq!(heap.stats().live_blocks, 5);
    for p in &out {
        assert_eq!(heap.block_size(*p), None);
    }
    // Zero sizes are refused before anything is taken.
    let err = heap.allocate_unlinked_sizes(&[64, 0], &mut out[..2]);
    assert!(matches!(err, Err(HeapError::ZeroSize)), "{err:?}");
    assert_eq!(heap.stats().live_blocks, 5, "a refused batch kept a block");
    // A size no layout can describe is too large, with the same bound `allocate_unlinked`
    // reports for a size above the heap; the block taken before it goes back.
    let Err(HeapError::TooLarge { max, .. }) = heap.allocate_unlinked(layout(1 << 40)) else {
        panic!("a 1 TiB block was not too large");
    };
    assert!(max > 0 && max < 4 * MIB, "{max}: not the heap's span");
    let err = heap.allocate_unlinked_sizes(&[64, usize::MAX], &mut out[..2]);
    assert!(
        matches!(err, Err(HeapError::TooLarge { requested: usize::MAX, max: m }) if m == max),
        "{err:?}, the heap's bound being {max}"
    );
    assert_eq!(heap.stats().live_blocks, 5, "a refused batch kept a block");
}

#[test]
fn release_many_then_reuse_hands_the_last_block_back_when_its_class_fits_else_allocates() {
    let heap = sim_heap(4 * MIB);
    let mut blocks = vec![PPtr::NULL; 4];
    heap.allocate_unlinked_sizes(&[200, 1000, 200, 200], &mut blocks)
        .unwrap();
    let before = heap.stats();

    // The last block is of the class asked for: it is the allocation, still live; the
    // others are given back.
    // SAFETY: the blocks are live, named by nothing and not used again.
    let taken = unsafe { heap.release_many_then_reuse(&blocks[..3], layout(250)) }.unwrap();
    assert_eq!(taken, blocks[2]);
    assert_eq!(heap.block_size(taken), Some(256));
    assert_eq!(heap.block_size(blocks[0]), None);
    assert_eq!(heap.block_size(blocks[1]), None);
    let after = heap.stats();
    assert_eq!(after.live_blocks, 2, "three given back, one taken");
    assert_eq!(after.frees - before.frees, 3);
    assert_eq!(after.allocations - before.allocations, 1);
    assert_eq!(after.persist, before.persist, "flushed or fenced");

    // A class that does not fit: given back, and the allocation takes another block (the
    // 256-byte block freed above is the one on top of its stack, not the one given back).
    // SAFETY: as above.
    let other = unsafe { heap.release_many_then_reuse(&[taken], layout(64)) }.unwrap();
    assert_eq!(heap.block_size(taken), None);
    assert_eq!(heap.block_size(other), Some(64));
    assert_eq!(heap.stats().live_blocks, 2);

    // A refused block among the others: nothing is allocated, the last is given back too.
    // SAFETY: `blocks[3]` is live; `blocks[0]` is free (refused, not reused).
    let refused = unsafe { heap.release_many_then_reuse(&[blocks[0], blocks[3]], layout(200)) };
    assert!(
        matches!(refused, Err(HeapError::NotABlock { offset }) if offset == blocks[0].offset()),
        "{refused:?}"
    );
    assert_eq!(heap.block_size(blocks[3]), None, "kept after a refusal");
    assert_eq!(heap.stats().live_blocks, 1);

    // A last entry that is not a small block's start is checked, and refused.
    let inside = PPtr::from_offset(other.offset() + 8);
    // SAFETY: `other` is live; the second entry names no block.
    let refused = unsafe { heap.release_many_then_reuse(&[other, inside], layout(64)) };
    assert!(
        matches!(refused, Err(HeapError::NotABlock { .. })),
        "{refused:?}"
    );
    assert_eq!(heap.stats().live_blocks, 0);
}

#[test]
fn release_many_then_allocate_frees_then_takes_the_last_freed_block_or_refuses_and_takes_none() {
    let heap = sim_heap(4 * MIB);
    let mut blocks = vec![PPtr::NULL; 4];
    heap.allocate_unlinked_sizes(&[200, 200, 1000, 200], &mut blocks)
        .unwrap();
    let before = heap.stats().persist;
    assert_eq!(heap.stats().live_blocks, 4);

    // Two 256-byte blocks and a 1,024-byte one back; a 200-byte request takes the last
    // 256-byte block given back (the thread's stacks are LIFO), live again.
    let given = [blocks[0], blocks[2], blocks[1]];
    // SAFETY: the blocks are named by nothing and not used again.
    let taken = unsafe { heap.release_many_then_allocate(&given, layout(200)) }.unwrap();
    assert_eq!(taken, blocks[1]);
    assert_eq!(heap.block_size(taken), Some(256));
    assert_eq!(heap.block_size(blocks[0]), None);
    assert_eq!(heap.block_size(blocks[2]), None);
    assert_eq!(heap.stats().live_blocks, 2, "three freed, one taken");
    assert_eq!(
        heap.stats().persist,
        before,
        "release_many_then_allocate flushed or fenced"
    );

    // A block given back twice is refused: the others are still freed, nothing is taken.
    // SAFETY: as above.
    let refused = unsafe { heap.release_many_then_allocate(&[blocks[3], blocks[0]], layout(64)) };
    assert!(
        matches!(refused, Err(HeapError::NotABlock { offset }) if offset == blocks[0].offset()),
        "{refused:?}"
    );
    assert_eq!(heap.block_size(blocks[3]), None);
    assert_eq!(heap.stats().live_blocks, 1, "the refused call took a block");

    // Nothing to give back, and a request no small class serves: the allocation alone.
    // SAFETY: nothing given back.
    let large = unsafe { heap.release_many_then_allocate(&[], layout(100_000)) }.unwrap();
    assert_eq!(heap.block_size(large), Some(2 * SLAB_BYTES));
    // SAFETY: as above.
    let zero = unsafe { heap.release_many_then_allocate(&[taken], layout(0)) };
    assert!(matches!(zero, Err(HeapError::ZeroSize)), "{zero:?}");
    assert_eq!(
        heap.block_size(taken),
        None,
        "given back before the refused allocation"
    );
}

#[test]
fn many_by_size_takes_the_blocks_the_layouts_would_and_refuses_as_they_would() {
    let heap = sim_heap(4 * MIB);
    // Small classes (the cached path) and a run (block by block).
    let sizes = [512, 1000, 64, 100_000];
    let mut out = [PPtr::NULL; 4];
    heap.allocate_unlinked_sizes(&sizes, &mut out).unwrap();
    let mut blocks = BTreeMap::new();
    for (p, &size) in out.iter().zip(&sizes) {
        let got = heap.block_size(*p).expect("a live block");
        assert!(got >= size, "{got} < {size}");
        assert_eq!(p.offset() % 64, 0, "not cache-line aligned");
        blocks.insert(p.offset(), got);
    }
    assert_eq!(blocks.len(), sizes.len(), "a block handed out twice");
    assert_disjoint(&blocks);
    assert_eq!(heap.stats().live_blocks, 4);
    // A zero size, after a good one: refused, and the good one is given back.
    let err = heap.allocate_unlinked_sizes(&[512, 0], &mut out[..2]);
    assert!(matches!(err, Err(HeapError::ZeroSize)), "{err:?}");
    // Too large for a layout: refused, nothing kept.
    let err = heap.allocate_unlinked_sizes(&[64, usize::MAX], &mut out[..2]);
    assert!(matches!(err, Err(HeapError::TooLarge { .. })), "{err:?}");
    assert_eq!(heap.stats().live_blocks, 4, "a refused batch kept a block");
}

#[test]
fn a_batch_that_runs_out_of_space_takes_nothing() {
    // Room for four slabs.
    let heap = sim_heap(4 * SLAB_BYTES + 64 * 1024);
    let mut out = [PPtr::NULL; 4];
    let sizes = [4096; 4];
    let mut live = 0;
    let err = loop {
        match heap.allocate_unlinked_sizes(&sizes, &mut out) {
            Ok(()) => live += 4,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, HeapError::OutOfSpace { requested: 4096 }),
        "{err}"
    );
    assert_eq!(heap.stats().live_blocks, live, "a failed batch kept blocks");
    // What is left is still there, one at a time.
    let mut more = 0;
    while heap.allocate_unlinked(layout(4096)).is_ok() {
        more += 1;
    }
    assert!(more < 4, "{more} blocks left, a batch of 4 should have fit");
    assert_eq!(live + more, 4 * 16);
}

#[test]
fn out_of_space_is_an_error_value_and_the_heap_recovers_from_it() {
    // Room for four slabs.
    let heap = sim_heap(4 * SLAB_BYTES + 64 * 1024);
    let mut count = 0;
    // Chain 4 KiB blocks: each block's first word receives the next.
    let mut dest = root_slot(&heap, 0);
    let err = loop {
        // SAFETY: `dest` is the root slot or the first word of the last live block.
        match unsafe { heap.allocate_into(dest, layout(4096)) } {
            Ok(p) => {
                count += 1;
                dest = heap.resolve(p).unwrap().cast();
            }
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, HeapError::OutOfSpace { requested: 4096 }),
        "{err}"
    );
    assert!((4 * 16..=5 * 16).contains(&count), "{count} blocks");
    assert!(load(dest).is_null(), "a failed allocation wrote its dest");
    // SAFETY: root slots.
    unsafe {
        assert!(matches!(
            heap.allocate_into(root_slot(&heap, 1), layout(100_000)),
            Err(HeapError::OutOfSpace { .. })
        ));
        // Freeing the chain's head makes room again (its rest becomes garbage until a
        // recovery: the heap does not free what the block pointed to).
        heap.free_from(root_slot(&heap, 0)).unwrap();
        let p = heap
            .allocate_into(root_slot(&heap, 1), layout(4096))
            .unwrap();
        // The block's stale first word still names the chain's second block: clear it, or
        // recovery (conservatively) keeps the whole chain.
        let ptr = heap.resolve(p).unwrap();
        ptr.cast::<u64>().write(0);
        heap.persist(ptr, 8);
    }
    // Recovery frees the unreachable rest of the chain.
    let reopened = reopen(&heap);
    assert_eq!(reopened.recovery().live_blocks, 1);
    let mut dest = root_slot(&reopened, 2);
    for _ in 0..count - 2 {
        // SAFETY: as above.
        let p = unsafe { reopened.allocate_into(dest, layout(4096)) }.unwrap();
        dest = reopened.resolve(p).unwrap().cast();
    }
}

#[test]
fn threads_allocate_and_free_concurrently_without_overlap() {
    let heap = sim_heap(16 * MIB);
    let threads = 4;
    std::thread::scope(|s| {
        for t in 0..threads {
            let heap = &heap;
            s.spawn(move || {
                let mut rng = alloclab_pmem::persist::SplitMix64::new(t as u64);
                for _ in 0..2000 {
                    let slot = root_slot(heap, t * 8 + (rng.next_u64() % 8) as usize);
                    // SAFETY: each thread owns its eight root slots.
                    unsafe {
                        if load(slot).is_null() {
                            let size = 1 + (rng.next_u64() % 3000) as usize;
                            heap.allocate_into(slot, layout(size)).unwrap();
                        } else {
                            heap.free_from(slot).unwrap();
                        }
                    }
                }
            });
        }
    });
    let mut blocks = BTreeMap::new();
    for i in 0..threads * 8 {
        let p = load(root_slot(&heap, i));
        if !p.is_null() {
            blocks.insert(p.offset(), heap.block_size(p).unwrap());
        }
    }
    assert_disjoint(&blocks);
    let stats = heap.stats();
    assert_eq!(stats.live_blocks, blocks.len() as u64);
    assert_eq!(stats.allocations - stats.frees, blocks.len() as u64);
    assert_eq!(reopen(&heap).recovery().live_blocks, blocks.len() as u64);
}

/// What a thread's last allocation and free see, made from another thread-local's
/// destructor after the heap's cache of that thread is gone: `(block, its size while live,
/// its size after the release, allocations and frees counted meanwhile)`.
type AtExit = (PPtr<u8>, Option<usize>, Option<usize>, u64, u64);

/// A thread that allocates and frees while its locals are being destroyed (from another
/// thread-local's destructor, after its cache of the heap is gone) takes the heap's global
/// lists: it is served a live block, frees it, and both are counted.
#[test]
fn a_thread_whose_cache_is_gone_allocates_and_frees_through_the_global_lists() {
    use std::cell::RefCell;
    use std::sync::{Arc, mpsc};

    struct LastWork(
        Arc<PersistentHeap<SimMedium>>,
        mpsc::Sender<Result<AtExit, HeapError>>,
    );
    impl Drop for LastWork {
        fn drop(&mut self) {
            let heap = &self.0;
            let before = heap.stats();
            let work = heap.allocate_unlinked(layout(3000)).and_then(|p| {
                let live = heap.block_size(p);
                // SAFETY: live, named by nothing durable, not used again.
                unsafe { heap.release(p) }?;
                let after = heap.stats();
                Ok((
                    p,
                    live,
                    heap.block_size(p),
                    after.allocations - before.allocations,
                    after.frees - before.frees,
                ))
            });
            // The receiver waits for it: a failed send only means the test already failed.
            let _ = self.1.send(work);
        }
    }
    thread_local! {
        static LAST: RefCell<Option<LastWork>> = const { RefCell::new(None) };
    }

    let heap = Arc::new(sim_heap(4 * MIB));
    let (send, receive) = mpsc::channel();
    let worker = {
        let heap = Arc::clone(&heap);
        std::thread::spawn(move || {
            // Registered first, so destroyed after the cache this thread then creates
            // (thread-locals are destroyed in the reverse order of their first use).
            LAST.with(|last| *last.borrow_mut() = Some(LastWork(Arc::clone(&heap), send)));
            let p = heap.allocate_unlinked(layout(3000)).unwrap();
            // SAFETY: as above.
            unsafe { heap.release(p) }.unwrap();
        })
    };
    worker.join().unwrap();
    let (p, live, freed, allocations, frees) = receive
        .recv()
        .expect("the destructor ran")
        .expect("a block for a thread whose cache is gone");
    assert_eq!(live, Some(3072), "the block at {p:?} was not live");
    assert_eq!(freed, None, "the release left the block live");
    assert_eq!((allocations, frees), (1, 1));
    let stats = heap.stats();
    assert_eq!(
        (stats.allocations, stats.frees, stats.live_blocks),
        (2, 2, 0)
    );
}

/// Blocks that a thread left in its cache when it exited are taken again once the heap
/// runs out of free slabs: another thread gets every block of the class back.
#[test]
fn blocks_cached_by_an_exited_thread_are_taken_again_when_the_slabs_run_out() {
    fn take_all(heap: &PersistentHeap<SimMedium>) -> Vec<PPtr<u8>> {
        let mut taken = Vec::new();
        loop {
            match heap.allocate_unlinked(layout(4000)) {
                Ok(p) => taken.push(p),
                Err(HeapError::OutOfSpace { .. }) => return taken,
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    let heap = sim_heap(2 * MIB);
    let first = std::thread::scope(|s| {
        s.spawn(|| {
            let taken = take_all(&heap);
            for &p in &taken {
                // SAFETY: live, named by nothing durable, not used again.
                unsafe { heap.release(p) }.unwrap();
            }
            taken.len()
        })
        .join()
        .unwrap()
    });
    assert!(first > 100, "{first} blocks of 4 KiB in 2 MiB");
    let second = take_all(&heap);
    assert_eq!(
        second.len(),
        first,
        "blocks left in an exited thread's cache"
    );
    assert_eq!(heap.stats().live_blocks, first as u64);
}

/// A live thread keeps up to `CACHE_LIMIT` freed blocks of a class in its cache; one more
/// hands the older half of its stack — the blocks it freed first — to the global list,
/// where another thread takes them. (The owner takes whole slabs of 64-byte blocks, so
/// that its cache is empty when it starts freeing.)
#[test]
fn a_threads_cache_keeps_up_to_its_limit_and_hands_the_older_half_on() {
    let per_slab = SLAB_BYTES / 64;
    assert_eq!(CACHE_LIMIT % per_slab, 0);
    let taken = CACHE_LIMIT + per_slab;
    for (freed, spilled) in [(CACHE_LIMIT, 0), (CACHE_LIMIT + 1, CACHE_LIMIT.div_ceil(2))] {
        let heap = sim_heap(4 * MIB);
        let (done_freeing, freeing_done) = std::sync::mpsc::channel();
        let (taken_all, all_taken) = std::sync::mpsc::channel::<()>();
        let (blocks, others) = std::thread::scope(|s| {
            let heap = &heap;
            let owner = s.spawn(move || {
                let mut blocks = vec![PPtr::NULL; taken];
                heap.allocate_unlinked_sizes(&vec![64; taken], &mut blocks)
                    .unwrap();
                for &p in &blocks[..freed] {
                    // SAFETY: live, named by nothing durable, not used again.
                    unsafe { heap.release(p) }.unwrap();
                }
                done_freeing.send(()).unwrap();
                // Alive, its cache owned, until the other thread has taken its blocks.
                all_taken.recv().unwrap();
                blocks
            });
            freeing_done.recv().unwrap();
            let mut others = vec![PPtr::NULL; CACHE_LIMIT / 2];
            heap.allocate_unlinked_sizes(&vec![64; CACHE_LIMIT / 2], &mut others)
                .unwrap();
            taken_all.send(()).unwrap();
            (owner.join().unwrap(), others)
        });
        let freed_order: Vec<u64> = blocks[..freed].iter().map(|p| p.offset()).collect();
        let mut from_the_owner: Vec<u64> = others
            .iter()
            .map(|p| p.offset())
            .filter(|o| freed_order.contains(o))
            .collect();
        from_the_owner.sort_unstable();
        let mut older_half = freed_order[..spilled].to_vec();
        older_half.sort_unstable();
        assert_eq!(
            from_the_owner,
            older_half,
            "after {freed} frees, the other thread took {} of the owner's blocks",
            from_the_owner.len()
        );
    }
}

/// A released run's slabs go back to the pool and the next run takes them (first fit),
/// leaving the run before them alone.
#[test]
fn a_released_runs_slabs_are_taken_again_by_the_next_run() {
    let heap = sim_heap(4 * MIB);
    let first = heap.allocate_unlinked(layout(SLAB_BYTES)).unwrap();
    let second = heap.allocate_unlinked(layout(2 * SLAB_BYTES)).unwrap();
    // SAFETY: live, named by nothing durable, not used again.
    unsafe { heap.release(second) }.unwrap();
    assert_eq!(
        heap.block_size(first),
        Some(SLAB_BYTES),
        "the run before it"
    );
    let third = heap.allocate_unlinked(layout(2 * SLAB_BYTES)).unwrap();
    assert_eq!(third.offset(), second.offset());
    assert_eq!(heap.block_size(third), Some(2 * SLAB_BYTES));
    // SAFETY: as above.
    unsafe {
        heap.release(third).unwrap();
        heap.release(first).unwrap();
    }
    let Err(HeapError::TooLarge { max, .. }) = heap.allocate_unlinked(layout(1 << 40)) else {
        panic!("a 1 TiB block was not too large");
    };
    let whole = heap
        .allocate_unlinked(layout(max))
        .expect("every slab as one run, once the runs are given back");
    // SAFETY: as above.
    unsafe { heap.release(whole) }.unwrap();
}

#[test]
fn a_file_pool_reopens_with_its_blocks_and_bad_files_are_refused() {
    let path = TempPath::new("heap-file");
    {
        let heap = PersistentHeap::create(path.path(), 4 * MIB, 256).unwrap();
        // SAFETY: root slots.
        unsafe {
            let p = heap
                .allocate_into(root_slot(&heap, 0), layout(1000))
                .unwrap();
            let ptr = heap.resolve(p).unwrap();
            ptr.write_bytes(0x77, 1000);
            heap.persist(ptr, 1000);
            heap.allocate_into(root_slot(&heap, 1), layout(300_000))
                .unwrap();
        }
        // The pool is locked while open.
        let err = PersistentHeap::open(path.path()).unwrap_err();
        assert!(
            matches!(err, HeapError::Medium(MediumError::Locked { .. })),
            "{err}"
        );
    }
    let heap = PersistentHeap::open(path.path()).unwrap();
    assert_eq!(heap.recovery().live_blocks, 2);
    let p = load(root_slot(&heap, 0));
    // SAFETY: a live block of 1000 bytes.
    let bytes = unsafe { std::slice::from_raw_parts(heap.resolve(p).unwrap(), 1000) };
    assert!(bytes.iter().all(|&b| b == 0x77));
    drop(heap);

    let not_a_pool = TempPath::new("heap-not-a-pool");
    std::fs::write(not_a_pool.path(), vec![0x42u8; 1 << 16]).unwrap();
    let err = PersistentHeap::open(not_a_pool.path()).unwrap_err();
    assert!(
        matches!(err, HeapError::Pool(PoolError::NotAPool { .. })),
        "{err}"
    );
    assert_eq!(
        std::fs::read(not_a_pool.path()).unwrap(),
        vec![0x42u8; 1 << 16]
    );
    let missing = TempPath::new("heap-missing");
    let err = PersistentHeap::open(missing.path()).unwrap_err();
    assert!(
        matches!(err, HeapError::Medium(MediumError::NotFound { .. })),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Recovery of a pool holding N objects (in chains hanging off root slots, some freed
    /// again) finds exactly the N still reachable, with their block sizes.
    #[test]
    fn recovery_finds_exactly_the_live_objects(
        sizes in prop::collection::vec(1usize..4200, 0..300),
        frees in prop::collection::vec(any::<bool>(), 64),
    ) {
        let heap = sim_heap(4 * MIB);
        // Per root slot, the chain's blocks; each block's first word points to the next.
        let mut chains: Vec<Vec<PPtr<u8>>> = vec![Vec::new(); 64];
        for (i, &size) in sizes.iter().enumerate() {
            let chain = &mut chains[i % 64];
            let dest = match chain.last() {
                None => root_slot(&heap, i % 64),
                Some(&p) => heap.resolve(p).unwrap().cast(),
            };
            // SAFETY: a root slot or the first word of a live block.
            let p = unsafe { heap.allocate_into(dest, layout(size.max(8))) }.unwrap();
            let ptr = heap.resolve(p).unwrap();
            let block = heap.block_size(p).unwrap();
            // Null next pointer, odd payload (never a block offset).
            // SAFETY: a live block of `block` bytes.
            unsafe {
                ptr.write_bytes(0x11, block);
                ptr.cast::<u64>().write(0);
            }
            heap.persist(ptr, block);
            chain.push(p);
        }
        // Free the last block of some chains.
        for (chain, &free) in chains.iter_mut().zip(&frees) {
            if free && chain.len() >= 2 {
                let dest = heap.resolve(chain[chain.len() - 2]).unwrap().cast();
                // SAFETY: the first word of a live block, holding the chain's last block.
                unsafe { heap.free_from(dest) }.unwrap();
                chain.pop();
            }
        }
        let n: usize = chains.iter().map(Vec::len).sum();
        let bytes: usize = chains.iter().flatten().map(|&p| heap.block_size(p).unwrap()).sum();
        let reopened = reopen(&heap);
        prop_assert_eq!(reopened.recovery().live_blocks, n as u64);
        prop_assert_eq!(reopened.recovery().live_bytes, bytes as u64);
        for &p in chains.iter().flatten() {
            prop_assert_eq!(reopened.block_size(p), heap.block_size(p));
        }
        // The rebuilt live map frees each recovered chain's last block once, and refuses
        // it the second time.
        for (i, chain) in chains.iter().enumerate() {
            let Some(&last) = chain.last() else { continue };
            let dest = match chain.len() {
                1 => root_slot(&reopened, i),
                len => reopened.resolve(chain[len - 2]).unwrap().cast(),
            };
            // SAFETY: a root slot or the first word of a live block, naming `last`.
            unsafe { reopened.free_from(dest) }.unwrap();
            // SAFETY: nothing names `last` any more; the release is refused.
            let again = unsafe { reopened.release(last) };
            prop_assert!(
                matches!(again, Err(HeapError::NotABlock { .. })),
                "second free accepted: {:?}",
                again
            );
        }
    }
}

#[test]
fn the_debug_form_names_the_pool_its_slabs_and_what_recovery_found() {
    let heap = sim_heap(4 * MIB);
    for i in 0..2 {
        // SAFETY: a root slot, no other thread.
        unsafe { heap.allocate_into(root_slot(&heap, i), layout(100)) }.unwrap();
    }
    let reopened = reopen(&heap);
    let text = format!("{reopened:?}");
    assert!(text.starts_with("PersistentHeap {"), "{text}");
    assert!(text.contains(&format!("{:?}", reopened.pool())), "{text}");
    assert!(text.contains("live_blocks: 2"), "{text}");
    let slabs: usize = text
        .split("slabs: ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no slab count in {text}"));
    // The heap is what the pool leaves after its header and tag lines: most of 4 MiB.
    assert!(
        slabs > 0 && slabs * SLAB_BYTES <= 4 * MIB && slabs * SLAB_BYTES >= 3 * MIB,
        "{slabs} slabs of {SLAB_BYTES} bytes in {text}"
    );
}
