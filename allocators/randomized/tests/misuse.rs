//! Misuse of the randomized heap, each case in a forked child: double frees (immediate,
//! delayed, interleaved, of another thread's block), invalid frees (stack, unaligned, interior, foreign mapping,
//! static, never returned, freed huge block), overwritten headers (the block's own, its
//! right neighbour's, its previous-size field alone) and writes after free. Every one must
//! abort the child with `SIGABRT` and the message glibc users expect; a child that survives
//! fails the test. Accesses the heap makes impossible (through a zero-size pointer, past a
//! huge block into its guard page, into a freed huge block) must fault instead.
//!
//! All setup (allocations, first frees, churn) happens in the parent, with heaps built by
//! `with_seed` so that the layouts are reproducible; the child only performs the final
//! misuse (and any corrupting write), then dies.

mod common;

use core::ptr::NonNull;

use alloclab_core::{Allocator, HostAllocator, MallocHeap};
use alloclab_randomized::{Checks, Randomized};
use common::{
    Rng, aligned_blocks_with_a_sandwich, blocks_with_a_sandwich, expect_abort, expect_fault, fill,
    layout, log_uniform,
};

const DOUBLE: &str = "free(): double free detected";
const BAD_HEADER: &str = "free(): invalid pointer or corrupted block header";
const FOREIGN: &str = "free(): invalid pointer (not from this heap)";
const MISALIGNED: &str = "free(): invalid pointer (not 16-byte aligned)";
const NEIGHBOUR: &str = "corrupted block header (heap overflow?)";
const WRITE_AFTER_FREE: &str = "write after free detected";
const OVERFLOW: &str = "heap overflow detected";
const UNDERFLOW: &str = "heap overflow detected (the byte before the block";

/// Frees `ptr` through the unsized (C `free`) entry point.
fn free(heap: &Randomized, ptr: *mut u8) {
    // SAFETY: none: these tests call it on pointers that are not live blocks on purpose,
    // in a child process that must abort before the heap could be harmed.
    unsafe { heap.deallocate_unsized(NonNull::new(ptr).unwrap()) };
}

/// Frees every block of `blocks` but those in `keep_out` (which the test freed itself).
fn free_rest(heap: &Randomized, blocks: &[NonNull<u8>], keep_out: &[usize]) {
    for (i, p) in blocks.iter().enumerate() {
        if !keep_out.contains(&i) {
            free(heap, p.as_ptr());
        }
    }
    heap.check().expect("the parent's heap stays consistent");
    assert_eq!(heap.counters().live_bytes, 0);
}

#[test]
fn immediate_double_free_aborts_with_double_free() {
    let heap = Randomized::with_seed(1).unwrap();
    let (blocks, (p, _, _)) = blocks_with_a_sandwich(&heap, 64, 3000);
    free(&heap, blocks[p].as_ptr());
    let err = heap.check_pointer(blocks[p].as_ptr()).unwrap_err();
    assert!(err.contains("double free"), "{err}");
    expect_abort(&[DOUBLE], || free(&heap, blocks[p].as_ptr()));
    free_rest(&heap, &blocks, &[p]);
}

#[test]
fn immediate_double_free_of_a_coalesced_block_still_aborts() {
    // The only block of a fresh heap merges back into the wilderness when freed: its header
    // is gone, so the second free is caught as a pointer the heap does not hand out.
    let heap = Randomized::with_seed(2).unwrap();
    let p = heap.allocate(layout(100, 8)).unwrap();
    free(&heap, p.as_ptr());
    expect_abort(&[DOUBLE, BAD_HEADER], || free(&heap, p.as_ptr()));
    heap.check().unwrap();
}

#[test]
fn delayed_double_free_aborts() {
    let heap = Randomized::with_seed(3).unwrap();
    let (blocks, (p, _, _)) = blocks_with_a_sandwich(&heap, 64, 3000);
    free(&heap, blocks[p].as_ptr());
    // A thousand allocations and frees in between, some of the same size: the freed
    // block may be reused and freed again, merged or split meanwhile.
    let mut rng = Rng::new(3);
    let mut churn = Vec::new();
    for i in 0..1000 {
        let size = if i % 4 == 0 {
            64
        } else {
            log_uniform(&mut rng, 16, 4096)
        };
        churn.push(heap.allocate(layout(size, 16)).unwrap());
        if churn.len() > 20 || i == 999 {
            while let Some(q) = churn.pop() {
                free(&heap, q.as_ptr());
            }
        }
    }
    expect_abort(&[DOUBLE, BAD_HEADER], || free(&heap, blocks[p].as_ptr()));
    free_rest(&heap, &blocks, &[p]);
}

#[test]
fn interleaved_double_free_aborts_with_double_free() {
    let heap = Randomized::with_seed(4).unwrap();
    let (blocks, (p, left, right)) = blocks_with_a_sandwich(&heap, 64, 3000);
    // Another block, not a neighbour of p: freeing it cannot touch p's header.
    let q = (0..blocks.len())
        .find(|&i| ![p, left, right].contains(&i))
        .unwrap();
    free(&heap, blocks[p].as_ptr());
    free(&heap, blocks[q].as_ptr());
    expect_abort(&[DOUBLE], || free(&heap, blocks[p].as_ptr()));
    free_rest(&heap, &blocks, &[p, q]);
}

/// A block another thread allocated, freed from this thread (which queues the free in its
/// own arena's outbox, or on the block's arena's stack, or frees it at once if both threads
/// share an arena), then freed again: caught as a double free while the first free waits.
#[test]
fn double_free_of_another_threads_block_aborts_with_double_free() {
    let heap = Randomized::with_seed(8).unwrap();
    let blocks: Vec<usize> = std::thread::scope(|s| {
        s.spawn(|| {
            (0..40)
                .map(|_| {
                    let p = heap.allocate(layout(48, 8)).unwrap();
                    fill(p, 48, 0x33);
                    p.as_ptr() as usize
                })
                .collect()
        })
        .join()
        .unwrap()
    });
    let ptrs: Vec<NonNull<u8>> = blocks
        .iter()
        .map(|&a| NonNull::new(a as *mut u8).unwrap())
        .collect();
    // Fewer frees than a chain holds: the last ones are still waiting when the misuse comes.
    free(&heap, ptrs[0].as_ptr());
    free(&heap, ptrs[1].as_ptr());
    let err = heap.check_pointer(ptrs[1].as_ptr()).unwrap_err();
    assert!(err.contains("double free"), "{err}");
    expect_abort(&[DOUBLE], || free(&heap, ptrs[1].as_ptr()));
    free_rest(&heap, &ptrs, &[0, 1]);
}

#[test]
fn reallocating_a_freed_block_aborts_with_double_free() {
    let heap = Randomized::with_seed(5).unwrap();
    let (blocks, (p, _, _)) = blocks_with_a_sandwich(&heap, 64, 3000);
    free(&heap, blocks[p].as_ptr());
    expect_abort(&[DOUBLE], || {
        // SAFETY: none, on purpose (see `free`).
        let _ = unsafe { heap.reallocate(blocks[p], layout(64, 16), 100) };
    });
    free_rest(&heap, &blocks, &[p]);
}

#[test]
fn freeing_a_stack_address_aborts() {
    let heap = Randomized::with_seed(6).unwrap();
    let live = heap.allocate(layout(64, 8)).unwrap();
    #[repr(align(16))]
    struct Local([u8; 64]);
    let mut local = Local([7; 64]);
    let on_stack = local.0.as_mut_ptr();
    expect_abort(&[FOREIGN], || free(&heap, on_stack));
    free(&heap, live.as_ptr());
}

#[test]
fn freeing_an_unaligned_pointer_aborts() {
    let heap = Randomized::with_seed(7).unwrap();
    let p = heap.allocate(layout(256, 16)).unwrap();
    for delta in [1usize, 8] {
        // SAFETY: inside the 256-byte block.
        let inside = unsafe { p.as_ptr().add(delta) };
        expect_abort(&[MISALIGNED], || free(&heap, inside));
    }
    free(&heap, p.as_ptr());
    heap.check().unwrap();
}

#[test]
fn freeing_an_interior_pointer_aborts() {
    let heap = Randomized::with_seed(8).unwrap();
    let p = heap.allocate(layout(256, 16)).unwrap();
    fill(p, 256, 0x5a);
    for delta in [16usize, 32, 128, 240] {
        // SAFETY: inside the 256-byte block.
        let inside = unsafe { p.as_ptr().add(delta) };
        expect_abort(&[BAD_HEADER], || free(&heap, inside));
    }
    free(&heap, p.as_ptr());
    heap.check().unwrap();
}

#[test]
fn freeing_a_foreign_mapping_aborts() {
    let heap = Randomized::with_seed(9).unwrap();
    let live = heap.allocate(layout(64, 8)).unwrap();
    let foreign = common::ForeignPage::new();
    let page = foreign.start();
    // SAFETY: inside the page.
    let middle = unsafe { page.add(2048) };
    expect_abort(&[FOREIGN], || free(&heap, page));
    expect_abort(&[FOREIGN], || free(&heap, middle));
    drop(foreign);
    free(&heap, live.as_ptr());
}

#[test]
fn freeing_a_static_aborts() {
    #[repr(align(16))]
    struct Aligned([u8; 64]);
    static DATA: Aligned = Aligned([1; 64]);
    let heap = Randomized::with_seed(10).unwrap();
    let live = heap.allocate(layout(64, 8)).unwrap();
    let at = DATA.0.as_ptr().cast_mut();
    expect_abort(&[FOREIGN], || free(&heap, at));
    free(&heap, live.as_ptr());
}

#[test]
fn freeing_a_never_returned_heap_address_aborts() {
    // Inside a chunk of this heap, but in the untouched wilderness: no header there.
    let heap = Randomized::with_seed(11).unwrap();
    let p = heap.allocate(layout(64, 16)).unwrap();
    let wilderness = ((p.as_ptr() as usize & !(common::CHUNK - 1)) + common::CHUNK / 2) as *mut u8;
    expect_abort(&[BAD_HEADER], || free(&heap, wilderness));
    free(&heap, p.as_ptr());
}

#[test]
fn freeing_a_freed_huge_block_aborts() {
    let heap = Randomized::with_seed(12).unwrap();
    let huge = heap.allocate(layout(1 << 20, 16)).unwrap();
    free(&heap, huge.as_ptr());
    expect_abort(&[FOREIGN], || free(&heap, huge.as_ptr()));
    let live = heap.allocate(layout(1 << 20, 16)).unwrap();
    // SAFETY: inside the live huge block.
    let interior = unsafe { live.as_ptr().add(4096) };
    expect_abort(&[BAD_HEADER], || free(&heap, interior));
    free(&heap, live.as_ptr());
    heap.check().unwrap();
}

/// A request of blocks with headers, in chunks of blocks (an alignment above 16), that
/// lie back to back (48 bytes and a 16-byte header: a multiple of the alignment).
const BLOCK: usize = 48;
/// Their alignment.
const BLOCK_ALIGN: usize = 32;

#[test]
fn overwriting_a_blocks_header_aborts_its_free() {
    let heap = Randomized::with_seed(13).unwrap();
    let (blocks, (p, _, _)) = aligned_blocks_with_a_sandwich(&heap, BLOCK, BLOCK_ALIGN, 3000);
    let other = heap.allocate(layout(300, BLOCK_ALIGN)).unwrap();
    for target in [blocks[p], other] {
        expect_abort(&[BAD_HEADER], || {
            // SAFETY: none, on purpose: the 16 bytes before the payload are the heap's
            // header (an underflow of the block, or an overflow of its left neighbour).
            unsafe { target.as_ptr().sub(16).write_bytes(0x41, 16) };
            free(&heap, target.as_ptr());
        });
    }
    free(&heap, other.as_ptr());
    free_rest(&heap, &blocks, &[]);
}

#[test]
fn overwriting_the_right_neighbours_header_aborts_the_free() {
    let heap = Randomized::with_seed(14).unwrap();
    let (blocks, (p, _, right)) = aligned_blocks_with_a_sandwich(&heap, BLOCK, BLOCK_ALIGN, 3000);
    let single = heap.allocate(layout(100, BLOCK_ALIGN)).unwrap();
    // A live right neighbour (p's) and a free or wilderness one (the first block's, in
    // most layouts): free reads either when it coalesces.
    for target in [blocks[p], single] {
        // SAFETY: `target` is live.
        let usable = unsafe { heap.usable_size(target) };
        // Past a request that is not a multiple of 16, its canary is hit first.
        expect_abort(&[NEIGHBOUR, OVERFLOW], || {
            // SAFETY: none, on purpose: a 16-byte linear overflow past the usable end.
            unsafe { target.as_ptr().add(usable).write_bytes(0x42, 16) };
            free(&heap, target.as_ptr());
        });
    }
    // The neighbour itself fails its own check too.
    let neighbour = blocks[right];
    expect_abort(&[BAD_HEADER], || {
        // SAFETY: as above.
        unsafe { neighbour.as_ptr().sub(16).write_bytes(0x42, 16) };
        free(&heap, neighbour.as_ptr());
    });
    free(&heap, single.as_ptr());
    free_rest(&heap, &blocks, &[]);
}

#[test]
fn overwriting_only_the_previous_size_field_aborts_the_free() {
    // The previous size is the one header field the keyed tag does not cover (cuts and
    // merges rewrite it with one store); free must still refuse a left neighbour it names
    // outside the chunk, or where no block of that size starts.
    let heap = Randomized::with_seed(16).unwrap();
    let (blocks, (p, _, _)) = aligned_blocks_with_a_sandwich(&heap, BLOCK, BLOCK_ALIGN, 3000);
    let target = blocks[p];
    // SAFETY: the header's second word is the 8 bytes before the payload.
    let prev = unsafe { target.as_ptr().sub(8).cast::<u64>().read() } >> 32;
    for wrong in [u64::from(u32::MAX), prev + 1] {
        // All ones also claims a 63-byte canary (the field's top bits), which fails first.
        expect_abort(&[NEIGHBOUR, OVERFLOW], || {
            // SAFETY: none, on purpose: rewrites only the high half of the header's second
            // word (the previous size, in 16-byte units), keeping size, flags and tag.
            unsafe { target.as_ptr().sub(4).cast::<u32>().write(wrong as u32) };
            free(&heap, target.as_ptr());
        });
    }
    free_rest(&heap, &blocks, &[]);
}

#[test]
fn overwriting_the_bytes_before_a_slot_aborts_its_free_as_an_overflow() {
    // A slot has no header: the bytes before it are the end of the slot below, whose last
    // byte is that slot's canary (or zero, when it is free). An underflow of the block, or
    // an overflow of its left neighbour, changes it: with text (0x41), always, since no
    // canary byte is below 0x80.
    let heap = Randomized::with_seed(13).unwrap();
    for size in [16, 64, 100, 1000] {
        let (blocks, (p, left, _)) = blocks_with_a_sandwich(&heap, size, 3000);
        for target in [blocks[p], blocks[left]] {
            expect_abort(&[UNDERFLOW], || {
                // SAFETY: none, on purpose: the 16 bytes before the slot.
                unsafe { target.as_ptr().sub(16).write_bytes(0x41, 16) };
                free(&heap, target.as_ptr());
            });
        }
        free_rest(&heap, &blocks, &[]);
    }
}

#[test]
fn an_overflow_into_the_next_slot_aborts_the_free_of_either_slot() {
    let heap = Randomized::with_seed(14).unwrap();
    for size in [16, 64, 100, 1000] {
        let (blocks, (p, _, right)) = blocks_with_a_sandwich(&heap, size, 3000);
        for freed in [blocks[p], blocks[right]] {
            expect_abort(&[OVERFLOW], || {
                // SAFETY: `p` is live.
                let end = unsafe { heap.usable_size(blocks[p]) };
                let gap = blocks[right].as_ptr() as usize - blocks[p].as_ptr() as usize - end;
                // SAFETY: none, on purpose: from the end of `p`'s request over its canary
                // and 16 bytes into its right neighbour.
                unsafe { blocks[p].as_ptr().add(end).write_bytes(0x42, gap + 16) };
                free(&heap, freed.as_ptr());
            });
        }
        free_rest(&heap, &blocks, &[]);
    }
}

#[test]
fn usable_size_of_a_freed_block_aborts() {
    let heap = Randomized::with_seed(15).unwrap();
    let (blocks, (p, _, _)) = blocks_with_a_sandwich(&heap, 64, 3000);
    free(&heap, blocks[p].as_ptr());
    expect_abort(&[DOUBLE], || {
        // SAFETY: none, on purpose.
        let _ = unsafe { heap.usable_size(blocks[p]) };
    });
    free_rest(&heap, &blocks, &[p]);
}

#[test]
#[should_panic(expected = "survived the misuse")]
fn a_child_that_survives_fails_the_test() {
    // The harness itself: a "misuse" that is in fact a correct free must be reported.
    let heap = Randomized::with_seed(16).unwrap();
    let p = heap.allocate(layout(64, 16)).unwrap();
    expect_abort(&[DOUBLE], || free(&heap, p.as_ptr()));
}

/// Allocates blocks of 16 to 64 bytes until the process dies (or `limit` blocks): sooner
/// or later one of them is carved from the memory a dangling write hit (the smaller sizes
/// reach slacks too small for a 64-byte block).
fn allocate_until_caught(heap: &Randomized, limit: usize) {
    for i in 0..limit {
        let p = heap.allocate(layout(16 * (1 + i % 4), 16)).unwrap();
        core::hint::black_box(p);
    }
}

#[test]
fn a_write_after_free_aborts_when_the_memory_is_handed_out_again() {
    let heap = Randomized::with_seed_and_checks(17, Checks::ALL).unwrap();
    let (blocks, (p, _, _)) = blocks_with_a_sandwich(&heap, 64, 3000);
    free(&heap, blocks[p].as_ptr());
    let stale = blocks[p].as_ptr();
    let message = expect_abort(&[WRITE_AFTER_FREE], || {
        // SAFETY: none: a write through a dangling pointer, on purpose, in the child.
        unsafe { stale.add(32).cast::<u64>().write(0x4141_4141_4141_4141) };
        allocate_until_caught(&heap, 100_000);
    });
    // The message names the word written.
    let written = format!("{:x}", stale as usize + 32);
    assert!(
        message.contains(&written),
        "{message:?} does not name 0x{written}"
    );
    free_rest(&heap, &blocks, &[p]);
}

#[test]
fn the_heap_walk_reports_a_write_after_free() {
    let heap = Randomized::with_seed_and_checks(18, Checks::ALL).unwrap();
    let (blocks, (p, _, _)) = blocks_with_a_sandwich(&heap, 256, 3000);
    free(&heap, blocks[p].as_ptr());
    heap.check().expect("freed memory reads zero");
    // SAFETY: none: a write through a dangling pointer, into a free block of a heap this
    // test owns and checks (no allocation follows that could be carved from it).
    unsafe { blocks[p].as_ptr().add(100).write(1) };
    let corruption = heap.check().unwrap_err();
    assert!(
        corruption.to_string().contains("free memory modified"),
        "{corruption}"
    );
    // SAFETY: the byte written back as it was: the heap is whole again.
    unsafe { blocks[p].as_ptr().add(100).write(0) };
    free_rest(&heap, &blocks, &[p]);
}

#[test]
fn without_zero_fill_freed_memory_keeps_its_data_and_is_not_checked() {
    let heap =
        Randomized::with_seed_and_checks(19, Checks::ALL.without(Checks::ZERO_FILL)).unwrap();
    let (blocks, (p, _, _)) = blocks_with_a_sandwich(&heap, 256, 3000);
    free(&heap, blocks[p].as_ptr());
    // SAFETY: a read of freed memory, still mapped, that the class would have zeroed.
    let stale = unsafe { blocks[p].as_ptr().add(100).read() };
    assert_ne!(stale, 0, "the filled pattern was zeroed without the class");
    heap.check()
        .expect("nothing checks free memory without the class");
    free_rest(&heap, &blocks, &[p]);
}

#[test]
fn a_grow_that_moves_frees_the_old_block_and_a_write_through_it_is_caught() {
    let heap = Randomized::with_seed_and_checks(20, Checks::ALL).unwrap();
    let (blocks, (p, _, _)) = blocks_with_a_sandwich(&heap, 64, 3000);
    let old = blocks[p];
    // Both neighbours are live: the block cannot grow in place.
    // SAFETY: a live 64-byte block of this heap.
    let new = unsafe { heap.reallocate(old, layout(64, 16), 4096) }.unwrap();
    assert_ne!(new, old, "a grow with no room returned the old address");
    assert_eq!(heap.check_pointer(old.as_ptr()), Err(DOUBLE));
    expect_abort(&[WRITE_AFTER_FREE], || {
        // SAFETY: none: a write through the pointer realloc replaced, on purpose.
        unsafe { old.as_ptr().add(16).write(0x41) };
        allocate_until_caught(&heap, 100_000);
    });
    free(&heap, new.as_ptr());
    free_rest(&heap, &blocks, &[p]);
}

#[test]
fn a_zero_size_pointer_faults_when_read_or_written_and_its_double_free_aborts() {
    let heap = Randomized::with_seed_and_checks(21, Checks::ALL).unwrap();
    let z = heap.allocate(layout(0, 1)).unwrap();
    expect_fault(|| {
        // SAFETY: none: a write through a zero-size pointer, on purpose.
        unsafe { core::ptr::write_volatile(z.as_ptr(), 1) };
    });
    expect_fault(|| {
        // SAFETY: none: a read through a zero-size pointer, on purpose.
        core::hint::black_box(unsafe { core::ptr::read_volatile(z.as_ptr()) });
    });
    free(&heap, z.as_ptr());
    expect_abort(&[DOUBLE], || free(&heap, z.as_ptr()));
    expect_abort(&[MISALIGNED], || free(&heap, z.as_ptr().wrapping_add(1)));
}

#[test]
fn an_overflow_past_a_huge_block_faults_at_its_first_byte() {
    let heap = Randomized::with_seed_and_checks(22, Checks::ALL).unwrap();
    let size = 4 << 20;
    let p = heap.allocate(layout(size, 16)).unwrap();
    fill(p, size, 0x5a);
    expect_fault(|| {
        // SAFETY: none: one byte past the block, on purpose.
        unsafe { core::ptr::write_volatile(p.as_ptr().add(size), 1) };
    });
    // A size that is not a multiple of 16 leaves at most 15 bytes before the guard.
    let odd = (3 << 20) + 5;
    let q = heap.allocate(layout(odd, 16)).unwrap();
    expect_fault(|| {
        // SAFETY: none: 16 bytes past the block, on purpose.
        unsafe { core::ptr::write_volatile(q.as_ptr().add(odd + 15), 1) };
    });
    free(&heap, q.as_ptr());
    free(&heap, p.as_ptr());
    assert_eq!(heap.counters().live_bytes, 0);
}

#[test]
fn a_write_into_a_freed_huge_block_faults() {
    let heap = Randomized::with_seed_and_checks(23, Checks::ALL).unwrap();
    let size = 4 << 20;
    let p = heap.allocate(layout(size, 16)).unwrap();
    // Freed in the forked child, right before the write: freed in this process, the range
    // could be mapped again by another test's thread before the fork (the write then lands
    // in that mapping, and the child survives), as a mutation campaign's runs showed.
    expect_fault(|| {
        free(&heap, p.as_ptr());
        // SAFETY: none: a write into an unmapped block, on purpose.
        unsafe { core::ptr::write_volatile(p.as_ptr().add(1 << 20), 1) };
    });
}

#[test]
fn a_one_byte_overflow_past_any_request_aborts_at_free_and_at_realloc() {
    let heap = Randomized::with_seed_and_checks(24, Checks::ALL).unwrap();
    for size in [1, 15, 17, 60, 100, 1000, 4095] {
        let p = heap.allocate(layout(size, 16)).unwrap();
        // SAFETY: a live block of this heap.
        let usable = unsafe { heap.usable_size(p) };
        assert_eq!(usable, size, "usable is what was asked");
        heap.check().expect("canaries intact");
        expect_abort(&[OVERFLOW], || {
            // SAFETY: none: the string terminator an off-by-one copy writes, on purpose.
            unsafe { p.as_ptr().add(size).write(0) };
            free(&heap, p.as_ptr());
        });
        // Any byte but the canary's own (an overflow that writes exactly the keyed byte,
        // one value in 64, goes unseen, as the README says): its complement.
        // SAFETY: one byte past the request, inside the block (it holds the canary).
        let other = !unsafe { p.as_ptr().add(size).read() };
        expect_abort(&[OVERFLOW], || {
            // SAFETY: as above.
            unsafe { p.as_ptr().add(size).write(other) };
            // SAFETY: live, with this layout.
            let _ = unsafe { heap.reallocate(p, layout(size, 16), size * 2) };
        });
        // The heap walk sees it too, in the parent.
        // SAFETY: one byte past the request, inside the block: restored below.
        let saved = unsafe { p.as_ptr().add(size).read() };
        // SAFETY: as above.
        unsafe { p.as_ptr().add(size).write(saved ^ 1) };
        let corruption = heap.check().unwrap_err();
        assert!(
            corruption.to_string().contains("canary overwritten"),
            "{corruption}"
        );
        // SAFETY: as above.
        unsafe { p.as_ptr().add(size).write(saved) };
        free(&heap, p.as_ptr());
    }
    heap.check().unwrap();
}

#[test]
fn a_realloc_in_place_moves_the_canary_to_the_new_end() {
    let heap = Randomized::with_seed_and_checks(25, Checks::ALL).unwrap();
    let (mut p, mut old) = (heap.allocate(layout(100, 16)).unwrap(), 100);
    let mut in_place = 0;
    for size in [90, 40, 5, 100] {
        // SAFETY: live, with the size it was last given.
        let q = unsafe { heap.reallocate(p, layout(old, 16), size) }.unwrap();
        in_place += usize::from(q == p);
        // SAFETY: a live block of this heap.
        assert_eq!(unsafe { heap.usable_size(q) }, size);
        heap.check().expect("the canary follows the new size");
        (p, old) = (q, size);
    }
    assert!(in_place >= 3, "the shrinks stay in place");
    free(&heap, p.as_ptr());
}

/// The hooks C's `realloc` resizes through (`MallocHeap::grow_in_place`,
/// `shrink_in_place`) keep the canary at the new end as `reallocate` does, and a grow finds
/// a free right neighbour.
#[test]
fn the_c_realloc_hooks_resize_in_place_and_move_the_canary() {
    let heap = Randomized::with_seed_and_checks(27, Checks::ALL).unwrap();
    let p = heap.allocate(layout(96, 16)).unwrap();
    // Something after it, so that its right neighbour is a free block, not the wilderness.
    let after = heap.allocate(layout(4000, 16)).unwrap();
    // SAFETY: (whole block) `p` is live, of 96 bytes, then of the size last given.
    unsafe {
        heap.shrink_in_place(p, 60);
        assert_eq!(heap.usable_size(p), 60);
        heap.check().expect("the canary follows the shrink");
        // One byte past the new end is an overflow, as past any request: the canary's
        // complement (a fixed byte would be the keyed canary itself, which depends on the
        // block's address, in one run of 128).
        let saved = p.as_ptr().add(60).read();
        p.as_ptr().add(60).write(!saved);
        assert!(
            heap.check().is_err(),
            "a byte past a shrunk block went unseen"
        );
        p.as_ptr().add(60).write(saved);
        heap.check().unwrap();
        // The shrink gave its tail back: the block grows into it again without moving.
        assert!(heap.grow_in_place(p, 90));
        assert_eq!(heap.usable_size(p), 90);
        heap.check().expect("the canary follows the grow");
        // A grow past what a block in a chunk may hold is refused, and changes nothing.
        assert!(!heap.grow_in_place(p, 1 << 20));
        assert_eq!(heap.usable_size(p), 90);
    }
    // A block of a chunk above the bound on growth in place still shrinks in place.
    let big = heap.allocate(layout(800_000, 16)).unwrap();
    // SAFETY: `big` is live, of 800 000 bytes.
    unsafe {
        heap.shrink_in_place(big, 700_000);
        assert_eq!(heap.usable_size(big), 700_000);
    }
    heap.check().expect("the canary follows a large shrink");
    free(&heap, big.as_ptr());
    free(&heap, p.as_ptr());
    free(&heap, after.as_ptr());
    assert_eq!(heap.counters().live_bytes, 0);
    heap.check().unwrap();
}

#[test]
fn a_delete_that_does_not_match_its_new_or_its_size_aborts() {
    use alloclab_core::AllocKind::{Malloc, New, NewArray};
    const MISMATCH: &str = "operator delete: mismatched delete";
    const WRONG_SIZE: &str = "operator delete: sized delete with a size";
    let heap = Randomized::with_seed_and_checks(26, Checks::ALL).unwrap();
    for (size, align) in [(24, 16), (100, 16), (48, 64), (3 << 20, 16), (0, 16)] {
        let l = layout(size, align);
        // Matched forms, sized and not, free without complaint.
        for kind in [New, NewArray] {
            let p = heap.allocate_as(l, kind).unwrap();
            // SAFETY: live, freed once, as it was allocated.
            unsafe { heap.deallocate_as(p, kind, Some(size)) };
            let p = heap.allocate_as(l, kind).unwrap();
            // SAFETY: as above.
            unsafe { heap.deallocate_as(p, kind, None) };
        }
        // A block from malloc may be deleted either way.
        let p = heap.allocate_as(l, Malloc).unwrap();
        // SAFETY: as above.
        unsafe { heap.deallocate_as(p, NewArray, None) };
        let p = heap.allocate_as(l, New).unwrap();
        if size > 0 {
            expect_abort(&[MISMATCH], || {
                // SAFETY: none: delete[] of a block from new, on purpose.
                unsafe { heap.deallocate_as(p, NewArray, None) };
            });
        }
        expect_abort(&[WRONG_SIZE], || {
            // SAFETY: none: a sized delete with a size the block was not allocated with.
            unsafe { heap.deallocate_as(p, New, Some(size + 4096)) };
        });
        // SAFETY: live, freed once, as it was allocated.
        unsafe { heap.deallocate_as(p, New, Some(size)) };
    }
    assert_eq!(heap.counters().live_bytes, 0);
    heap.check().unwrap();
}

#[test]
fn without_the_cxx_delete_class_a_mismatched_delete_frees() {
    use alloclab_core::AllocKind::{New, NewArray};
    let heap =
        Randomized::with_seed_and_checks(27, Checks::ALL.without(Checks::CXX_DELETE)).unwrap();
    let p = heap.allocate_as(layout(64, 16), New).unwrap();
    // SAFETY: live, freed once (the mismatch is the point, and is let through).
    unsafe { heap.deallocate_as(p, NewArray, Some(4000)) };
    assert_eq!(heap.counters().live_bytes, 0);
    heap.check().unwrap();
}

#[test]
fn without_canaries_a_sized_delete_may_name_any_size_within_the_rounding() {
    use alloclab_core::AllocKind::New;
    const WRONG_SIZE: &str = "operator delete: sized delete with a size";
    let heap = Randomized::with_seed_and_checks(28, Checks::ALL.without(Checks::CANARIES)).unwrap();
    // Without canaries the usable size is the rounded payload (and a slack under 48 bytes
    // the block may have absorbed): a C++ program's sized delete names what it asked for,
    // which may lie that far below it.
    for size in [1, 17, 50, 100, 1000] {
        let p = heap.allocate_as(layout(size, 16), New).unwrap();
        // SAFETY: live.
        let usable = unsafe { heap.usable_size(p) };
        assert!(
            usable > size || size.is_multiple_of(16),
            "{size}: usable {usable}"
        );
        // SAFETY: live, freed once, with the size it was allocated with.
        unsafe { heap.deallocate_as(p, New, Some(size)) };
    }
    // A size above the usable one is still refused.
    let p = heap.allocate_as(layout(50, 16), New).unwrap();
    // SAFETY: live.
    let usable = unsafe { heap.usable_size(p) };
    expect_abort(&[WRONG_SIZE], || {
        // SAFETY: none: a sized delete naming more than the block holds, on purpose.
        unsafe { heap.deallocate_as(p, New, Some(usable + 1)) };
    });
    // SAFETY: live, freed once.
    unsafe { heap.deallocate_as(p, New, Some(50)) };
    assert_eq!(heap.counters().live_bytes, 0);
}

/// Whether any page of `len` bytes at `addr` (page-aligned) is mapped: `mincore` fails with
/// `ENOMEM` on a range with an unmapped page, so each page is asked alone.
fn any_page_mapped(addr: usize, len: usize) -> bool {
    let page = 4096;
    (0..len / page).any(|i| {
        let mut v = 0u8;
        // SAFETY: `mincore` only reads the page tables; `v` has room for one page.
        unsafe { libc::mincore((addr + i * page) as *mut libc::c_void, page, &mut v) == 0 }
    })
}

#[test]
fn freeing_a_huge_block_unmaps_its_whole_mapping_guard_page_included() {
    let heap = Randomized::with_seed_and_checks(29, Checks::ALL).unwrap();
    for size in [(1 << 20) + 1, 3 << 20, (5 << 20) + 4000] {
        let p = heap.allocate(layout(size, 16)).unwrap();
        let chunk = common::CHUNK;
        let base = p.as_ptr() as usize & !(chunk - 1);
        // The mapping: the payload's pages, then the guard page right after its end.
        let end = (p.as_ptr() as usize + size).next_multiple_of(4096) + 4096;
        assert!(any_page_mapped(base, end - base));
        // Freed and checked in a forked child, so that no other test's thread can map the
        // range again in between.
        expect_fault(|| {
            free(&heap, p.as_ptr());
            if !any_page_mapped(base, end - base) {
                // SAFETY: none: a write into the unmapped range, on purpose: the child
                // faults only if the whole mapping is gone.
                unsafe { core::ptr::write_volatile(base as *mut u8, 1) };
            }
        });
        free(&heap, p.as_ptr());
    }
}

#[test]
fn freeing_the_first_bytes_of_a_mapping_aborts_without_reading_before_it() {
    // The start of a chunk (the control block, or a chunk's arena index) and of a huge
    // block's mapping (its descriptor) hold no block: a free there is refused before the
    // heap reads a header 16 bytes below the pointer, which would lie outside the mapping.
    let heap = Randomized::with_seed(12).unwrap();
    let small = heap.allocate(layout(64, 16)).unwrap();
    let huge = heap.allocate(layout(3 << 20, 16)).unwrap();
    for p in [small, huge] {
        let base = p.as_ptr() as usize & !(common::CHUNK - 1);
        for at in [base, base + 16] {
            expect_abort(&[BAD_HEADER], || free(&heap, at as *mut u8));
        }
    }
    free(&heap, huge.as_ptr());
    free(&heap, small.as_ptr());
}

#[test]
fn reallocating_a_pointer_from_outside_the_heap_aborts_as_foreign() {
    // A realloc checks its pointer as a free does; one that is neither in a mapping of the
    // heap nor in its zero-size region is foreign, whichever side of the region it lies.
    let heap = Randomized::with_seed(13).unwrap();
    // The zero-size region exists once a zero-size block was asked for.
    let z = heap.allocate(layout(0, 1)).unwrap();
    #[repr(align(16))]
    struct OnStack([u8; 64]);
    let local = OnStack([0; 64]);
    let stack = NonNull::new(core::hint::black_box(local.0.as_ptr()) as *mut u8).unwrap();
    static STATIC: OnStack = OnStack([0; 64]);
    let global = NonNull::new(STATIC.0.as_ptr() as *mut u8).unwrap();
    for p in [stack, global] {
        expect_abort(&[FOREIGN], || {
            // SAFETY: none: a realloc of memory the heap never gave, on purpose.
            let _ = unsafe { heap.reallocate(p, layout(64, 16), 128) };
        });
    }
    core::hint::black_box(&local);
    free(&heap, z.as_ptr());
}
