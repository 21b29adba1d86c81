//! The randomized heap as an `Allocator`, `HostAllocator` and `MallocHeap`: random
//! workloads checked block by block and with the heap walker, the edge cases of sizes and
//! alignments, reallocation in place, the non-aborting pointer check, and threads freeing
//! each other's blocks. Heaps come from `with_seed`, so every run sees the same layouts.

mod common;

use core::ptr::NonNull;
use std::collections::BTreeMap;
use std::sync::mpsc;

use alloclab_core::{AllocErrorKind, Allocator, ForkHooks, HostAllocator, MallocHeap};
use alloclab_randomized::{Checks, Randomized};
use common::{Rng, blocks_with_a_sandwich, expect_filled, fill, layout, log_uniform};
use proptest::prelude::*;

/// Blocks above this (header and alignment slack included) get their own mapping.
const LARGE_MAX: usize = 1 << 20;

/// Whether a block of `size` bytes aligned to `align` gets a mapping of its own (as
/// `allocate_block` decides: payload rounded to 16, header, and the alignment if over 16).
fn is_huge(size: usize, align: usize) -> bool {
    let extra = if align > 16 { align } else { 0 };
    size.max(1).next_multiple_of(16) + 16 + extra > LARGE_MAX
}

#[test]
fn the_whole_state_is_one_word() {
    assert_eq!(size_of::<Randomized>(), size_of::<usize>());
    assert_eq!(size_of::<Option<Randomized>>(), 2 * size_of::<usize>());
}

/// The heap's name, as the harness and the preload library report it, and its debug form,
/// which says whether the heap has been built (its first chunk mapped).
#[test]
fn the_heap_names_itself_and_its_debug_form_says_whether_it_is_built() {
    let heap = Randomized::new();
    assert_eq!(heap.name(), "randomized");
    assert_eq!(format!("{heap:?}"), "Randomized { built: false, .. }");
    let p = heap.allocate(layout(24, 8)).unwrap();
    assert_eq!(format!("{heap:?}"), "Randomized { built: true, .. }");
    // SAFETY: live, allocated with this layout, freed once.
    unsafe { heap.deallocate(p, layout(24, 8)) };
}

/// Between `prepare_fork` and the hook after the `fork`, the heap's locks are held: an
/// allocation on another thread waits for them, so that no thread changes the heap while
/// the child's copy of it is taken.
#[test]
fn an_allocation_waits_while_the_fork_hooks_hold_the_heap() {
    let heap = Randomized::with_seed(9).unwrap();
    let l = layout(64, 16);
    let p = heap.allocate(l).unwrap();
    // SAFETY: live, allocated with `l`, freed once.
    unsafe { heap.deallocate(p, l) };
    heap.prepare_fork();
    let (done, finished) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let p = heap.allocate(l).unwrap();
            // SAFETY: as above.
            unsafe { heap.deallocate(p, l) };
            done.send(()).unwrap();
        });
        let early = finished.recv_timeout(std::time::Duration::from_millis(200));
        heap.after_fork_in_parent();
        assert!(
            early.is_err(),
            "another thread allocated while prepare_fork held the heap"
        );
        finished.recv().unwrap();
    });
}

// ----- random workloads ----------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        size: usize,
        align_log: u32,
        zeroed: bool,
    },
    Free(usize),
    Realloc(usize, usize),
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 0..=1024usize,
        4 => 0..=70_000usize,
        1 => (LARGE_MAX - (64 << 10))..=(LARGE_MAX + (300 << 10)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (size(), 0..=12u32, any::<bool>())
            .prop_map(|(size, align_log, zeroed)| Op::Alloc { size, align_log, zeroed }),
        3 => any::<usize>().prop_map(Op::Free),
        2 => (any::<usize>(), prop_oneof![1 => Just(0usize), 20 => size()])
            .prop_map(|(i, s)| Op::Realloc(i, s)),
    ]
}

/// A live block of the model: payload, requested layout, usable size, fill byte.
struct Block {
    ptr: NonNull<u8>,
    size: usize,
    align: usize,
    usable: usize,
    seed: u8,
}

/// The model of the heap: the live blocks, by address, and what the counters must say.
struct Model<'a> {
    heap: &'a Randomized,
    live: BTreeMap<usize, Block>,
    allocations: u64,
    deallocations: u64,
    next_seed: u8,
}

impl<'a> Model<'a> {
    fn new(heap: &'a Randomized) -> Self {
        Self {
            heap,
            live: BTreeMap::new(),
            allocations: 0,
            deallocations: 0,
            next_seed: 0,
        }
    }

    fn seed(&mut self) -> u8 {
        self.next_seed = self.next_seed.wrapping_add(1).max(1);
        self.next_seed
    }

    /// Checks a new block (aligned, large enough, disjoint from every live one), fills its
    /// whole usable size and records it.
    fn add(&mut self, ptr: NonNull<u8>, size: usize, align: usize) {
        let addr = ptr.as_ptr() as usize;
        assert_eq!(
            addr % align,
            0,
            "{size} B at {addr:#x} not aligned to {align}"
        );
        // SAFETY: a live block of this heap.
        let usable = unsafe { self.heap.usable_size(ptr) };
        assert!(usable >= size, "usable {usable} < requested {size}");
        assert_eq!(self.heap.check_pointer(ptr.as_ptr()), Ok(usable));
        if let Some((&before, b)) = self.live.range(..=addr).next_back() {
            assert!(
                before + b.usable <= addr,
                "{addr:#x} overlaps the block at {before:#x}"
            );
        }
        if let Some((&after, _)) = self.live.range(addr..).next() {
            assert!(
                addr + usable <= after,
                "{addr:#x}+{usable} overlaps the block at {after:#x}"
            );
        }
        let seed = self.seed();
        fill(ptr, usable, seed);
        self.live.insert(
            addr,
            Block {
                ptr,
                size,
                align,
                usable,
                seed,
            },
        );
    }

    fn nth(&self, i: usize) -> Option<usize> {
        (!self.live.is_empty()).then(|| *self.live.keys().nth(i % self.live.len()).unwrap())
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Alloc {
                size,
                align_log,
                zeroed,
            } => {
                let align = 1usize << align_log;
                let l = layout(size, align);
                let ptr = if zeroed {
                    let p = self.heap.allocate_zeroed(l).unwrap();
                    expect_filled(p, size, 0, "allocate_zeroed");
                    p
                } else {
                    self.heap.allocate(l).unwrap()
                };
                self.allocations += 1;
                self.add(ptr, size, align);
            }
            Op::Free(i) => {
                let Some(addr) = self.nth(i) else { return };
                let b = self.live.remove(&addr).unwrap();
                expect_filled(b.ptr, b.usable, b.seed, "before free");
                // SAFETY: live, allocated with this layout, freed once.
                unsafe { self.heap.deallocate(b.ptr, layout(b.size, b.align)) };
                self.deallocations += 1;
            }
            Op::Realloc(i, new_size) => {
                let Some(addr) = self.nth(i) else { return };
                let b = self.live.remove(&addr).unwrap();
                expect_filled(b.ptr, b.usable, b.seed, "before realloc");
                let old = layout(b.size, b.align);
                // SAFETY: live, allocated with `old`.
                let result = unsafe { self.heap.reallocate(b.ptr, old, new_size) };
                if new_size == 0 {
                    let err = result.unwrap_err();
                    assert_eq!(err.kind, AllocErrorKind::ZeroSize);
                    expect_filled(b.ptr, b.usable, b.seed, "after a refused realloc");
                    self.live.insert(addr, b);
                    return;
                }
                let q = result.unwrap();
                let kept = b.size.min(new_size);
                expect_filled(q, kept, b.seed, "after realloc");
                let huge = is_huge(b.size, b.align);
                // `Stats` counts a reallocation as one free and one allocation, whether it
                // moved the block or not.
                self.allocations += 1;
                self.deallocations += 1;
                if q == b.ptr {
                    assert!(!huge, "a huge block was resized in place");
                } else {
                    assert!(
                        huge || new_size > b.size || new_size > LARGE_MAX / 2,
                        "shrinking {} B to {new_size} B moved the block",
                        b.size
                    );
                }
                self.add(q, new_size, b.align);
            }
        }
    }

    /// The heap walker and the counters agree with the model.
    fn verify(&self) {
        let shape = self
            .heap
            .check()
            .unwrap_or_else(|c| panic!("heap check: {c}"));
        let counters = self.heap.counters();
        assert_eq!(
            shape.live_blocks + shape.huge_blocks + shape.zero_size_blocks,
            self.live.len() as u64,
            "{shape:?}"
        );
        assert_eq!(shape.live_bytes, counters.live_bytes);
        assert_eq!(counters.allocations, self.allocations, "{counters:?}");
        assert_eq!(counters.deallocations, self.deallocations, "{counters:?}");
        let usable: u64 = self.live.values().map(|b| b.usable as u64).sum();
        assert!(counters.live_bytes >= usable, "{counters:?} < {usable}");
        let stats = self.heap.stats();
        assert_eq!(stats.live_bytes, Some(counters.live_bytes));
        assert_eq!(stats.allocations, Some(self.allocations));
    }

    fn free_all(&mut self) {
        let ops: Vec<usize> = (0..self.live.len()).collect();
        for _ in ops {
            self.apply(&Op::Free(0));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Random allocations (sizes 0 to 70 000 B and huge ones, alignments 1 to 4096, zeroed
    /// or not), frees and reallocations: every block aligned, large enough, disjoint from
    /// the others, its contents intact until it is freed or resized; the heap walker and
    /// the counters agree with the model every few operations; nothing is live at the end.
    #[test]
    fn random_workloads_keep_blocks_intact_and_the_heap_consistent(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let heap = Randomized::with_seed(seed).unwrap();
        let mut model = Model::new(&heap);
        for (i, op) in ops.iter().enumerate() {
            model.apply(op);
            if i % 7 == 6 {
                model.verify();
            }
        }
        model.verify();
        model.free_all();
        model.verify();
        prop_assert_eq!(heap.counters().live_bytes, 0);
        prop_assert_eq!(heap.counters().allocations, heap.counters().deallocations);
    }
}

#[test]
fn every_size_and_alignment_is_served_aligned_and_disjoint() {
    let heap = Randomized::with_seed(0x5eed).unwrap();
    let mut model = Model::new(&heap);
    let sizes = [
        0,
        1,
        7,
        15,
        16,
        17,
        31,
        32,
        33,
        100,
        1000,
        1040,
        1041,
        4096,
        60_000,
        131_072,
        200_000,
        262_000,
        262_144,
        300_000,
        3 << 20,
    ];
    for &size in &sizes {
        for align_log in [0u32, 3, 4, 5, 6, 8, 12, 16, 20, 21] {
            model.apply(&Op::Alloc {
                size,
                align_log,
                zeroed: size % 2 == 1,
            });
        }
        model.verify();
    }
    // Resize them all (shrinks, grows, to and from huge), keeping their alignments.
    for i in 0..model.live.len() {
        model.apply(&Op::Realloc(i, [100, 5000, 300_000][i % 3]));
    }
    model.verify();
    model.free_all();
    model.verify();
    assert_eq!(heap.counters().live_bytes, 0);
}

// ----- edge cases ----------------------------------------------------------------------

/// Blocks up to 1 MiB (the 16-256 KiB tiles of a sliding-window map, say) come from the
/// arenas' chunks, not from a mapping of their own each: recycling them costs no system
/// call. Mapped bytes stay at a few chunks however many times they are recycled.
#[test]
fn blocks_up_to_a_mebibyte_are_recycled_in_chunks_without_mappings_of_their_own() {
    let heap = Randomized::with_seed(31).unwrap();
    let mut rng = Rng::new(32);
    let mut live = Vec::new();
    for round in 0..2000 {
        let size = [16usize << 10, 64 << 10, 256 << 10][rng.below(3)];
        live.push((heap.allocate(layout(size, 64)).unwrap(), size));
        if live.len() > 8 {
            let (p, size) = live.swap_remove(rng.below(live.len()));
            // SAFETY: live, allocated with this layout, freed once.
            unsafe { heap.deallocate(p, layout(size, 64)) };
        }
        if round % 256 == 0 {
            let shape = heap.check().unwrap();
            assert_eq!(shape.huge_blocks, 0, "{shape:?}");
        }
    }
    let counters = heap.counters();
    assert!(counters.peak_mapped_bytes <= 4 * (4 << 20), "{counters:?}");
    for (p, size) in live {
        // SAFETY: as above.
        unsafe { heap.deallocate(p, layout(size, 64)) };
    }
    // At the bound: a block of exactly `LARGE_MAX` bytes (payload, header and, above 16,
    // the alignment's slack) is an arena's; a granule more is a mapping of its own.
    for (size, align, huge) in [
        (LARGE_MAX - 16, 16, false),
        (LARGE_MAX - 16, 8, false),
        (LARGE_MAX - 16, 1, false),
        (LARGE_MAX - 16 - 64, 64, false),
        (LARGE_MAX - 15, 16, true),
        (LARGE_MAX - 16 - 63, 64, true),
        (LARGE_MAX, 16, true),
    ] {
        assert_eq!(is_huge(size, align), huge);
        let p = heap.allocate(layout(size, align)).unwrap();
        assert_eq!(
            heap.check().unwrap().huge_blocks,
            u64::from(huge),
            "{size} bytes aligned to {align}"
        );
        // SAFETY: as above.
        unsafe { heap.deallocate(p, layout(size, align)) };
    }
}

#[test]
fn zero_size_requests_get_unique_pointers_without_bytes() {
    let heap = Randomized::with_seed_and_checks(21, Checks::ALL).unwrap();
    let blocks: Vec<_> = (0..100)
        .map(|_| heap.allocate(layout(0, 1)).unwrap())
        .collect();
    let mut addrs: Vec<usize> = blocks.iter().map(|p| p.as_ptr() as usize).collect();
    addrs.sort_unstable();
    addrs.dedup();
    assert_eq!(addrs.len(), 100, "zero-size blocks share addresses");
    // Not consecutive: the slots are handed out in a scrambled order.
    let consecutive = blocks
        .windows(2)
        .filter(|w| w[1].as_ptr() as usize == w[0].as_ptr() as usize + 16)
        .count();
    assert!(
        consecutive < 10,
        "{consecutive} of 99 zero-size pointers follow the last"
    );
    for p in &blocks {
        assert_eq!(heap.check_pointer(p.as_ptr()), Ok(0));
    }
    let shape = heap.check().unwrap();
    assert_eq!((shape.zero_size_blocks, shape.live_blocks), (100, 0));
    // A zero-size block reallocates to a real one, its (no) contents kept.
    let first = blocks[0];
    // SAFETY: live, with the layout it was allocated with.
    let grown = unsafe { heap.reallocate(first, layout(0, 1), 64) }.unwrap();
    assert_ne!(grown, first);
    assert_eq!(
        heap.check_pointer(first.as_ptr()),
        Err("free(): double free detected")
    );
    assert!(heap.check_pointer(grown.as_ptr()).unwrap() >= 64);
    // SAFETY: live, freed once.
    unsafe { heap.deallocate(grown, layout(64, 1)) };
    for p in blocks.into_iter().skip(1) {
        // SAFETY: live, freed once.
        unsafe { heap.deallocate(p, layout(0, 1)) };
    }
    assert_eq!(heap.counters().live_bytes, 0);
    assert_eq!(heap.check().unwrap().zero_size_blocks, 0);
    let counters = heap.counters();
    assert_eq!(counters.allocations, counters.deallocations);
}

#[test]
fn without_the_zero_size_class_zero_size_requests_get_ordinary_blocks() {
    let heap =
        Randomized::with_seed_and_checks(21, Checks::ALL.without(Checks::ZERO_SIZE)).unwrap();
    let blocks: Vec<_> = (0..20)
        .map(|_| heap.allocate(layout(0, 1)).unwrap())
        .collect();
    for p in &blocks {
        // No byte asked for: the canary fills the whole payload.
        assert_eq!(heap.check_pointer(p.as_ptr()), Ok(0));
    }
    assert_eq!(heap.check().unwrap().live_blocks, 20);
    for p in blocks {
        // SAFETY: live, freed once.
        unsafe { heap.deallocate(p, layout(0, 1)) };
    }
    assert_eq!(heap.counters().live_bytes, 0);
}

#[test]
fn impossible_sizes_are_errors_and_leave_the_heap_consistent() {
    let heap = Randomized::with_seed(22).unwrap();
    let p = heap.allocate(layout(1000, 16)).unwrap();
    fill(p, 1000, 0x77);
    let usable = heap.check_pointer(p.as_ptr());
    assert!(usable.is_ok_and(|u| u >= 1000), "{usable:?}");
    let before = heap.counters();
    for (size, align) in [
        (isize::MAX as usize, 1),
        (isize::MAX as usize - 15, 16),
        (isize::MAX as usize / 2, 8),
    ] {
        let err = heap.allocate(layout(size, align)).unwrap_err();
        assert_eq!(err.kind, AllocErrorKind::SizeUnsupported, "{size}");
        assert_eq!(err.layout, layout(size, align));
        let err = heap.allocate_zeroed(layout(size, align)).unwrap_err();
        assert_eq!(err.kind, AllocErrorKind::SizeUnsupported, "{size}");
    }
    // Within the supported range but beyond any address space: the OS says no.
    let err = heap.allocate(layout(1 << 60, 16)).unwrap_err();
    assert_eq!(err.kind, AllocErrorKind::OutOfMemory);
    // Resizing to impossible sizes fails and leaves the block live and intact.
    for new_size in [usize::MAX, isize::MAX as usize, isize::MAX as usize / 2] {
        // SAFETY: live, allocated with this layout.
        let err = unsafe { heap.reallocate(p, layout(1000, 16), new_size) }.unwrap_err();
        assert_eq!(err.kind, AllocErrorKind::SizeUnsupported, "{new_size}");
    }
    // SAFETY: as above.
    let err = unsafe { heap.reallocate(p, layout(1000, 16), 1 << 60) }.unwrap_err();
    assert_eq!(err.kind, AllocErrorKind::OutOfMemory);
    expect_filled(p, 1000, 0x77, "after failed requests");
    assert_eq!(heap.check_pointer(p.as_ptr()), usable);
    let after = heap.counters();
    assert_eq!(after.allocations, before.allocations);
    assert_eq!(after.live_bytes, before.live_bytes);
    heap.check().unwrap();
    // GlobalAlloc reports failure as null.
    // SAFETY: a valid layout; a null result is checked.
    let null = unsafe { core::alloc::GlobalAlloc::alloc(&heap, layout(1 << 60, 16)) };
    assert!(null.is_null());
    // SAFETY: live, allocated with this layout, freed once.
    unsafe { heap.deallocate(p, layout(1000, 16)) };
    assert_eq!(heap.counters().live_bytes, 0);
}

#[test]
fn alignments_above_two_mebibytes_are_refused_and_two_is_served() {
    let heap = Randomized::with_seed(23).unwrap();
    for align_log in [22u32, 23, 30] {
        let err = heap.allocate(layout(64, 1 << align_log)).unwrap_err();
        assert_eq!(err.kind, AllocErrorKind::AlignmentUnsupported);
    }
    let big = heap.allocate(layout(64, 2 << 20)).unwrap();
    assert_eq!(big.as_ptr() as usize % (2 << 20), 0);
    assert!(heap.check_pointer(big.as_ptr()).unwrap() >= 64);
    heap.check().unwrap();
    // SAFETY: live, freed once.
    unsafe { heap.deallocate(big, layout(64, 2 << 20)) };
    assert_eq!(heap.counters().live_bytes, 0);
    heap.check().unwrap();
}

// ----- reallocation --------------------------------------------------------------------

#[test]
fn a_slot_resizes_in_place_within_its_slot_and_moves_beyond_it() {
    for seed in 0..20 {
        let heap = Randomized::with_seed(seed).unwrap();
        let l = layout(100, 8);
        let p = heap.allocate(l).unwrap();
        fill(p, 100, 0x31);
        // 110 bytes and a canary byte fit the 112-byte slot of 100.
        // SAFETY: live, allocated with `l`.
        let q = unsafe { heap.reallocate(p, l, 110) }.unwrap();
        assert_eq!(q, p, "seed {seed}: a grow within the slot moved the block");
        expect_filled(q, 100, 0x31, "after growing in the slot");
        assert_eq!(heap.check_pointer(q.as_ptr()), Ok(110));
        fill(q, 110, 0x32);
        // SAFETY: live, now of 110 bytes.
        let r = unsafe { heap.reallocate(q, layout(110, 8), 20) }.unwrap();
        assert_eq!(r, p, "seed {seed}: a shrink moved the block");
        assert_eq!(heap.check_pointer(r.as_ptr()), Ok(20));
        heap.check().unwrap();
        // Beyond the slot: a new block, never the old address (the old one is live while
        // the bytes move).
        // SAFETY: live, now of 20 bytes.
        let s = unsafe { heap.reallocate(r, layout(20, 8), 4000) }.unwrap();
        assert_ne!(s, p, "seed {seed}: a grow past the slot kept the address");
        expect_filled(s, 20, 0x32, "after moving");
        assert!(heap.check_pointer(p.as_ptr()).is_err());
        heap.check().unwrap();
        // SAFETY: live, now of 4000 bytes.
        unsafe { heap.deallocate(s, layout(4000, 8)) };
        assert_eq!(heap.counters().live_bytes, 0);
    }
}

#[test]
fn the_first_block_grows_in_place_into_the_wilderness_and_shrinks_in_place() {
    // An alignment above 16: a block with a header in a chunk of blocks, not a slab slot.
    for seed in 0..20 {
        let heap = Randomized::with_seed(seed).unwrap();
        let l = layout(100, 32);
        let p = heap.allocate(l).unwrap();
        fill(p, 100, 0x31);
        // SAFETY: live, allocated with `l`.
        let q = unsafe { heap.reallocate(p, l, 4000) }.unwrap();
        assert_eq!(
            q, p,
            "seed {seed}: growing into the wilderness moved the block"
        );
        expect_filled(q, 100, 0x31, "after growing");
        assert!(heap.check_pointer(q.as_ptr()).unwrap() >= 4000);
        fill(q, 4000, 0x32);
        // SAFETY: live, now of 4000 bytes.
        let r = unsafe { heap.reallocate(q, layout(4000, 32), 10) }.unwrap();
        assert_eq!(r, p, "seed {seed}: shrinking moved the block");
        expect_filled(r, 10, 0x32, "after shrinking");
        assert!(heap.check_pointer(r.as_ptr()).unwrap() < 4000);
        heap.check().unwrap();
        // SAFETY: live, now of 10 bytes.
        unsafe { heap.deallocate(r, layout(10, 32)) };
        assert_eq!(heap.counters().live_bytes, 0);
        // One allocation, two reallocations in place (each a free and an allocation).
        assert_eq!(heap.counters().allocations, 3);
        assert_eq!(heap.counters().deallocations, 3);
    }
}

#[test]
fn a_block_grows_in_place_into_a_free_right_neighbour() {
    let heap = Randomized::with_seed(31).unwrap();
    let l = layout(4000, 16);
    let p = heap.allocate(l).unwrap();
    // Something after it, so that its right neighbour is no longer the wilderness.
    let after = heap.allocate(layout(100, 16)).unwrap();
    fill(p, 4000, 9);
    // SAFETY: live with `l`. The freed tail joins p's right neighbour (free or not).
    let q = unsafe { heap.reallocate(p, l, 64) }.unwrap();
    assert_eq!(q, p);
    // SAFETY: live, of 64 bytes; its right neighbour is a free block of over 3900 bytes.
    let r = unsafe { heap.reallocate(q, layout(64, 16), 3000) }.unwrap();
    assert_eq!(r, p, "growing into a free right neighbour moved the block");
    expect_filled(r, 64, 9, "after growing in place");
    heap.check().unwrap();
    // Growing past what is free there moves it, keeping the contents.
    fill(r, 3000, 10);
    // SAFETY: live, of 3000 bytes.
    let s = unsafe { heap.reallocate(r, layout(3000, 16), 120_000) }.unwrap();
    expect_filled(s, 3000, 10, "after moving");
    heap.check().unwrap();
    // SAFETY: live blocks, freed once each.
    unsafe {
        heap.deallocate(s, layout(120_000, 16));
        heap.deallocate(after, layout(100, 16));
    }
    assert_eq!(heap.counters().live_bytes, 0);
    heap.check().unwrap();
}

// ----- the non-aborting pointer check ---------------------------------------------------

#[test]
fn check_pointer_accepts_live_blocks_and_names_every_kind_of_bad_pointer() {
    let heap = Randomized::with_seed(41).unwrap();
    let not_from_heap = "not from this heap";
    let misaligned = "not 16-byte aligned";
    let bad_header = "invalid pointer or corrupted block header";

    let (blocks, (p, _, _)) = blocks_with_a_sandwich(&heap, 256, 2000);
    let live = blocks[p];
    // SAFETY: a live block.
    let usable = unsafe { heap.usable_size(live) };
    assert!(usable >= 256);
    assert_eq!(heap.check_pointer(live.as_ptr()), Ok(usable));

    let at = |delta: usize| live.as_ptr().wrapping_add(delta);
    assert!(heap.check_pointer(at(16)).unwrap_err().contains(bad_header));
    assert!(
        heap.check_pointer(at(128))
            .unwrap_err()
            .contains(bad_header)
    );
    assert!(heap.check_pointer(at(1)).unwrap_err().contains(misaligned));
    assert!(heap.check_pointer(at(8)).unwrap_err().contains(misaligned));

    let local = [0u128; 4];
    let err = heap.check_pointer(local.as_ptr().cast()).unwrap_err();
    assert!(err.contains(not_from_heap), "{err}");
    static DATA: [u128; 4] = [0; 4];
    let err = heap.check_pointer(DATA.as_ptr().cast()).unwrap_err();
    assert!(err.contains(not_from_heap), "{err}");
    assert!(
        heap.check_pointer(core::ptr::null())
            .unwrap_err()
            .contains(not_from_heap)
    );
    let page = common::ForeignPage::new();
    let err = heap.check_pointer(page.start()).unwrap_err();
    assert!(err.contains(not_from_heap), "{err}");
    drop(page);
    // The heap's own control block, at the start of the first chunk.
    let chunk = (live.as_ptr() as usize & !(common::CHUNK - 1)) as *const u8;
    assert!(heap.check_pointer(chunk.wrapping_add(16)).is_err());

    // Freed: the block kept its header (both neighbours are live), marked free.
    // SAFETY: live, freed once.
    unsafe { heap.deallocate(live, layout(256, 16)) };
    let err = heap.check_pointer(live.as_ptr()).unwrap_err();
    assert!(err.contains("double free"), "{err}");

    // Huge blocks: live, interior, freed.
    let huge = heap.allocate(layout(1 << 20, 64)).unwrap();
    assert!(heap.check_pointer(huge.as_ptr()).unwrap() >= 1 << 20);
    let err = heap
        .check_pointer(huge.as_ptr().wrapping_add(4096))
        .unwrap_err();
    assert!(err.contains(bad_header), "{err}");
    // SAFETY: live, freed once.
    unsafe { heap.deallocate(huge, layout(1 << 20, 64)) };
    let err = heap.check_pointer(huge.as_ptr()).unwrap_err();
    assert!(err.contains(not_from_heap), "{err}");

    heap.check().unwrap();
    for (i, b) in blocks.into_iter().enumerate() {
        if i != p {
            // SAFETY: live, freed once.
            unsafe { heap.deallocate(b, layout(256, 16)) };
        }
    }
    assert_eq!(heap.counters().live_bytes, 0);
    heap.check().unwrap();
}

/// C's `malloc` takes a fast path for the sizes the slabs serve (1 byte up to the largest
/// slot, less its canary byte with canaries): each gets what `allocate` gives at `malloc`'s
/// alignment, a 16-byte-aligned slot of the same usable size, freed as any block. Zero, the
/// sizes above, and a heap not built yet are left to the general path.
#[test]
fn the_malloc_fast_path_serves_the_slab_sizes_as_allocate_does() {
    let unbuilt = Randomized::new();
    assert_eq!(unbuilt.try_malloc_fast(16), None);
    assert_eq!(
        unbuilt.counters(),
        Default::default(),
        "the fast path built the heap"
    );
    for checks in [Checks::ALL, Checks::ALL.without(Checks::CANARIES)] {
        let heap = Randomized::with_seed_and_checks(7, checks).unwrap();
        let largest = 1040 - usize::from(checks.contains(Checks::CANARIES));
        for size in 0..=largest + 64 {
            let what = format!("{size} B, {checks:?}");
            let Some(fast) = heap.try_malloc_fast(size) else {
                assert!(size == 0 || size > largest, "{what}: missed the fast path");
                continue;
            };
            assert!(
                (1..=largest).contains(&size),
                "{what}: served past the slabs"
            );
            assert_eq!(fast.as_ptr() as usize % 16, 0, "{what}");
            let general = heap.allocate(layout(size, 16)).unwrap();
            assert_eq!(
                heap.check_pointer(fast.as_ptr()),
                heap.check_pointer(general.as_ptr()),
                "{what}: usable sizes differ"
            );
            fill(fast, size, size as u8);
            fill(general, size, !(size as u8));
            expect_filled(fast, size, size as u8, &what);
            // SAFETY: live blocks of this heap, each freed once.
            unsafe {
                heap.deallocate_unsized(fast);
                heap.deallocate(general, layout(size, 16));
            }
        }
        heap.check().unwrap();
        assert_eq!(heap.counters().live_bytes, 0, "{checks:?}");
    }
}

#[test]
fn an_unbuilt_heap_owns_no_pointer() {
    let heap = Randomized::new();
    let x = 0u128;
    assert!(heap.check_pointer((&raw const x).cast()).is_err());
    assert_eq!(heap.counters(), Default::default());
    assert_eq!(heap.check().unwrap(), Default::default());
}

// ----- threads -------------------------------------------------------------------------

/// Four threads × 50 000 operations: random sizes, a third of the blocks handed to the next
/// thread, which frees them. Frees into an arena another thread holds go through the
/// lock-free remote-free queue (the block is marked and pushed, and the arena's next
/// allocation frees it). Every block is checked before it is freed. Returns when every
/// block has been freed by the program.
fn cross_thread_workload(heap: &Randomized) {
    let threads = 4;
    let per_thread = 50_000;
    std::thread::scope(|s| {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads)
            .map(|_| mpsc::channel::<Vec<(usize, usize)>>())
            .unzip();
        for (t, rx) in receivers.into_iter().enumerate() {
            let tx = senders[(t + 1) % threads].clone();
            s.spawn(move || {
                let mut rng = Rng::new(t as u64);
                let mut own: Vec<(NonNull<u8>, usize)> = Vec::new();
                let mut batch = Vec::new();
                let free = |(p, size): (NonNull<u8>, usize)| {
                    expect_filled(p, size.min(64), (size % 251) as u8, "cross-thread");
                    // SAFETY: live, allocated with this layout, freed once.
                    unsafe { heap.deallocate(p, layout(size, 8)) };
                };
                for _ in 0..per_thread {
                    match rng.below(3) {
                        0 if !own.is_empty() => {
                            let i = rng.below(own.len());
                            free(own.swap_remove(i));
                        }
                        _ => {
                            let size = log_uniform(&mut rng, 1, 8192);
                            let p = heap.allocate(layout(size, 8)).unwrap();
                            fill(p, size.min(64), (size % 251) as u8);
                            if rng.below(3) == 0 {
                                batch.push((p.as_ptr() as usize, size));
                            } else {
                                own.push((p, size));
                            }
                        }
                    }
                    if batch.len() == 32 {
                        tx.send(std::mem::take(&mut batch)).unwrap();
                    }
                    while let Ok(got) = rx.try_recv() {
                        for (addr, size) in got {
                            free((NonNull::new(addr as *mut u8).unwrap(), size));
                        }
                    }
                }
                tx.send(batch).unwrap();
                drop(tx);
                own.drain(..).for_each(free);
                for got in rx {
                    for (addr, size) in got {
                        free((NonNull::new(addr as *mut u8).unwrap(), size));
                    }
                }
            });
        }
        drop(senders);
    });
}

/// After the cross-thread workload the heap walker finds every header, link and total
/// consistent, and each block the walk still sees as live is one whose free is queued:
/// counted as allocated and not yet as deallocated, in the counters and the walk alike.
#[test]
fn cross_thread_frees_keep_the_heap_consistent() {
    let heap = Randomized::with_seed(51).unwrap();
    cross_thread_workload(&heap);
    let shape = heap.check().unwrap_or_else(|c| panic!("heap check: {c}"));
    let counters = heap.counters();
    assert_eq!(
        shape.live_bytes, counters.live_bytes,
        "{counters:?} {shape:?}"
    );
    assert_eq!(
        counters.allocations - counters.deallocations,
        shape.live_blocks,
        "{counters:?} {shape:?}"
    );
    assert!(counters.allocations > 100_000, "{counters:?}");
    // The heap still works, from this thread, after the others have gone.
    let p = heap.allocate(layout(1000, 8)).unwrap();
    // SAFETY: live, freed once.
    unsafe { heap.deallocate(p, layout(1000, 8)) };
    heap.check().unwrap();
}

/// The stricter property: once the program has freed every block, live bytes return to
/// the baseline (0 for a fresh heap): `counters` and `check` first complete every free
/// still queued, in an outbox or on an arena's remote-free stack.
#[test]
fn cross_thread_frees_return_live_bytes_to_the_baseline() {
    let heap = Randomized::with_seed(51).unwrap();
    cross_thread_workload(&heap);
    heap.check().unwrap_or_else(|c| panic!("heap check: {c}"));
    let counters = heap.counters();
    assert_eq!(
        counters.live_bytes, 0,
        "live bytes after every block was freed: {counters:?}"
    );
    assert_eq!(counters.allocations, counters.deallocations);
}

#[test]
fn freeing_many_small_blocks_gives_their_pages_back_once_a_large_region_forms() {
    let heap = Randomized::with_seed(61).unwrap();
    let mut rng = Rng::new(61);
    let mut blocks = Vec::new();
    let mut total = 0usize;
    while total < 20 << 20 {
        let size = 1000 + rng.below(11_000);
        let l = layout(size, 16);
        let p = heap.allocate(l).unwrap();
        // Touch every page of the block, as a program would.
        fill(p, size, 0x5a);
        blocks.push((p, l));
        total += size;
    }
    assert_eq!(
        heap.counters().released_bytes,
        0,
        "nothing to give back yet"
    );
    for (p, l) in blocks {
        // SAFETY: allocated above with `l`, freed once.
        unsafe { heap.deallocate(p, l) };
    }
    let counters = heap.counters();
    assert_eq!(counters.live_bytes, 0);
    // Once the freed blocks merge into regions of a mebibyte and more, their whole pages
    // go back: most of the 20 MiB, not just the pages around the last frees.
    assert!(
        counters.released_bytes >= 10 << 20,
        "only {} bytes given back of {} freed",
        counters.released_bytes,
        total
    );
    heap.check().expect("consistent after the release");
}

#[test]
fn a_freed_block_of_128_kib_or_more_gives_its_pages_back_a_smaller_one_keeps_them() {
    // Without zero-fill, which gives back the pages of every freed payload of 64 KiB or
    // more (see the next test).
    let heap =
        Randomized::with_seed_and_checks(62, Checks::ALL.without(Checks::ZERO_FILL)).unwrap();
    // Live small blocks: a heap that did not shrink, where free regions of a mebibyte and
    // more keep their pages (see the test above).
    let live = live_small_blocks(&heap);
    let (released, _) = free_a_touched_block(&heap, 96 << 10);
    assert_eq!(released, 0, "a 96 KiB block kept its pages");
    let (released, _) = free_a_touched_block(&heap, 200 << 10);
    assert!(
        released >= 190 << 10,
        "a 200 KiB block gave back only {released} bytes"
    );
    heap.check().expect("consistent after the release");
    free_small_blocks(&heap, live);
}

/// The size of [`live_small_blocks`]'s blocks: above the largest request a slab slot takes
/// (1,039 bytes and its canary byte), so that they are the block path's live bytes.
const SMALL_BLOCK: usize = 1100;

/// 1024 live blocks of [`SMALL_BLOCK`] bytes: a heap that did not shrink.
fn live_small_blocks(heap: &Randomized) -> Vec<NonNull<u8>> {
    (0..1024)
        .map(|_| heap.allocate(layout(SMALL_BLOCK, 16)).unwrap())
        .collect()
}

/// Frees what [`live_small_blocks`] allocated.
fn free_small_blocks(heap: &Randomized, live: Vec<NonNull<u8>>) {
    for p in live {
        // SAFETY: allocated by `live_small_blocks` with this layout, freed once.
        unsafe { heap.deallocate(p, layout(SMALL_BLOCK, 16)) };
    }
}

/// Allocates a block of `size` bytes (at most 1 MiB: in a chunk, which stays mapped), fills
/// it and frees it: the bytes this free gave back to the OS, and the byte in the middle of
/// the freed block afterwards.
fn free_a_touched_block(heap: &Randomized, size: usize) -> (u64, u8) {
    let l = layout(size, 16);
    let p = heap.allocate(l).unwrap();
    fill(p, size, 0x5a);
    let before = heap.counters().released_bytes;
    // SAFETY: allocated just above with `l`, freed once.
    unsafe { heap.deallocate(p, l) };
    // SAFETY: a read of freed memory in a chunk, which stays mapped: what the free left.
    let stale = unsafe { p.as_ptr().add(size / 2).read_volatile() };
    (heap.counters().released_bytes - before, stale)
}

#[test]
fn with_zero_fill_a_freed_payload_of_64_kib_or_more_gives_its_pages_back_and_reads_zero() {
    let heap = Randomized::with_seed_and_checks(63, Checks::ALL).unwrap();
    let live = live_small_blocks(&heap);
    let (released, stale) = free_a_touched_block(&heap, 32 << 10);
    assert_eq!(
        (released, stale),
        (0, 0),
        "a 32 KiB payload is zeroed with stores"
    );
    let (released, stale) = free_a_touched_block(&heap, 96 << 10);
    assert!(
        released >= 88 << 10,
        "a 96 KiB payload gave back only {released} bytes"
    );
    assert_eq!(stale, 0);
    heap.check().expect("freed memory reads zero");
    free_small_blocks(&heap, live);
}

/// A heap that frees and reallocates the same memory keeps its pages: 2 MiB of blocks of
/// [`SMALL_BLOCK`] bytes (the block path's) freed side by side (a free region of two mebibytes, but fewer free bytes than the 4 MiB
/// the arena must hold before it trims) and allocated again, round after round, costs no
/// system call. (A heap that shrank gives them back: see
/// `freeing_many_small_blocks_gives_their_pages_back_once_a_large_region_forms`.)
#[test]
fn a_heap_that_frees_and_reallocates_the_same_memory_keeps_its_pages() {
    let heap =
        Randomized::with_seed_and_checks(64, Checks::ALL.without(Checks::ZERO_FILL)).unwrap();
    let l = layout(SMALL_BLOCK, 16);
    let mut live: Vec<NonNull<u8>> = (0..3072).map(|_| heap.allocate(l).unwrap()).collect();
    for round in 0..4 {
        // The lowest two thirds by address: neighbours, which merge into one free region.
        live.sort_by_key(|p| p.as_ptr() as usize);
        let kept = live.split_off(2048);
        for p in std::mem::replace(&mut live, kept) {
            // SAFETY: allocated with `l`, freed once.
            unsafe { heap.deallocate(p, l) };
        }
        let counters = heap.counters();
        assert!(
            counters.free_list_bytes >= 2 << 20,
            "round {round}: the freed blocks hold {} bytes of free lists",
            counters.free_list_bytes
        );
        assert_eq!(
            counters.released_bytes, 0,
            "round {round}: pages given back by a heap holding {} live bytes: {counters:?}",
            counters.live_bytes
        );
        live.extend((0..2048).map(|_| heap.allocate(l).unwrap()));
    }
    for p in live {
        // SAFETY: allocated with `l`, freed once.
        unsafe { heap.deallocate(p, l) };
    }
    assert_eq!(heap.counters().live_bytes, 0);
    heap.check().expect("consistent");
}

/// Once a large free region has given its pages back, a small block carved from it and freed
/// again costs no system call: the pages around it are too few to be worth one (less than
/// 64 KiB), so they stay resident until the region is used again; the region's other pages
/// are not given back a second time either.
#[test]
fn a_small_block_freed_into_memory_already_given_back_makes_no_system_call() {
    let heap = Randomized::with_seed(65).unwrap();
    // Blocks of 160 KiB, whose pages go back as soon as they merge into a free region
    // twice their size: freed in address order, all of them but the first few.
    let l = layout(160 << 10, 16);
    let mut blocks: Vec<_> = (0..64).map(|_| heap.allocate(l).unwrap()).collect();
    blocks.sort_by_key(|p| p.as_ptr() as usize);
    for &p in &blocks {
        fill(p, 160 << 10, 0x5a);
    }
    for p in blocks {
        // SAFETY: allocated with `l`, freed once.
        unsafe { heap.deallocate(p, l) };
    }
    let released = heap.counters().released_bytes;
    assert!(released >= 8 << 20, "only {released} bytes given back");
    for size in [16usize, 1024, 4096, 16 << 10] {
        let l = layout(size, 16);
        for _ in 0..64 {
            let p = heap.allocate(l).unwrap();
            fill(p, size, 0xa5);
            // SAFETY: allocated with `l`, freed once.
            unsafe { heap.deallocate(p, l) };
        }
        assert_eq!(
            heap.counters().released_bytes,
            released,
            "freeing {size} B blocks into released memory gave pages back"
        );
    }
    heap.check().expect("consistent");
}

/// The heap walk names the word that a write after free changed, whichever of a granule's
/// two words it is, and passes again once the word reads zero.
#[test]
fn the_heap_walk_names_the_word_a_write_after_free_changed() {
    let heap = Randomized::with_seed_and_checks(66, Checks::ALL).unwrap();
    let l = layout(256, 16);
    // Live neighbours on both sides keep the freed block where it is.
    let blocks: Vec<_> = (0..64).map(|_| heap.allocate(l).unwrap()).collect();
    let victim = blocks[32];
    // SAFETY: allocated with `l`, freed once (and not freed again below).
    unsafe { heap.deallocate(victim, l) };
    heap.check().expect("consistent before the write");
    // Payload words 0 and 1 hold the free block's links; from word 2 on it reads zero.
    for word in 2..32 {
        let at = victim.as_ptr() as usize + 8 * word;
        // SAFETY: a write after free into a chunk, which stays mapped, undone below.
        unsafe { ((at + 3) as *mut u8).write_volatile(0xa5) };
        let corruption = heap.check().expect_err("a write after free");
        assert_eq!(
            corruption.address, at,
            "word {word}: the walk named {:#x}, the write was to {at:#x} ({corruption})",
            corruption.address
        );
        // SAFETY: as above: the byte written.
        unsafe { ((at + 3) as *mut u8).write_volatile(0) };
        heap.check()
            .expect("consistent once the word reads zero again");
    }
    for (i, p) in blocks.into_iter().enumerate() {
        if i != 32 {
            // SAFETY: allocated with `l`, freed once.
            unsafe { heap.deallocate(p, l) };
        }
    }
}

/// `calloc` zeroes a block too large to be checked in full when handed out: a write through
/// a dangling pointer into the middle of a freed block, which only the ends are checked
/// for, does not show through the next `calloc` that places a block there — down to the
/// largest arena block, the last size that is not a fresh mapping of its own.
#[test]
fn calloc_reads_zero_over_a_dangling_write_into_the_largest_arena_block() {
    let heap = Randomized::with_seed_and_checks(71, Checks::ALL).unwrap();
    let size = LARGE_MAX - 16;
    let l = layout(size, 16);
    assert!(!is_huge(size, 16));
    let freed: Vec<_> = (0..16).map(|_| heap.allocate(l).unwrap()).collect();
    let mut dangling = Vec::new();
    for &p in &freed {
        // SAFETY: live, allocated with `l`, freed once.
        unsafe { heap.deallocate(p, l) };
        // SAFETY: a write after free into a chunk, which stays mapped: the bug a program
        // might have, away from the ends that the next allocation over it checks.
        unsafe { p.as_ptr().add(size / 2).write_volatile(0xa5) };
        dangling.push(p.as_ptr() as usize + size / 2);
    }
    let mut over_a_dangling_write = 0;
    let live: Vec<_> = (0..16).map(|_| heap.allocate_zeroed(l).unwrap()).collect();
    for &p in &live {
        expect_filled(p, size, 0, "calloc");
        let start = p.as_ptr() as usize;
        over_a_dangling_write += dangling
            .iter()
            .filter(|&&d| (start..start + size).contains(&d))
            .count();
    }
    assert!(
        over_a_dangling_write > 0,
        "no calloc placed a block over a dangling write"
    );
    for p in live {
        // SAFETY: live, allocated with `l`, freed once.
        unsafe { heap.deallocate(p, l) };
    }
}

#[test]
fn the_mapped_byte_counters_follow_the_chunks_the_heap_maps() {
    // Every chunk is 4 MiB; the counters say what the heap walk finds mapped, and the
    // peak is never below the current figure.
    const CHUNK: u64 = 4 << 20;
    let heap = Randomized::with_seed(41).unwrap();
    let mut live = Vec::new();
    let mut chunks_seen = 0;
    // About 12 MiB of 1 KiB blocks from one thread: its arena maps chunks one after another.
    for i in 0..12_000 {
        live.push(heap.allocate(layout(1000, 16)).unwrap());
        if i % 3000 == 2999 {
            let (shape, counters) = (heap.check().unwrap(), heap.counters());
            assert_eq!(
                counters.mapped_bytes,
                shape.chunks * CHUNK,
                "{shape:?} {counters:?}"
            );
            assert!(counters.peak_mapped_bytes >= counters.mapped_bytes);
            assert!(shape.chunks >= chunks_seen);
            chunks_seen = shape.chunks;
        }
    }
    assert!(chunks_seen >= 3, "12 MiB in {chunks_seen} chunks");
    for p in live {
        // SAFETY: live, allocated with this layout, freed once.
        unsafe { heap.deallocate(p, layout(1000, 16)) };
    }
}

/// Without guard pages a huge block's payload follows its mapping's descriptor and its own
/// header, not the end of the mapping: it is aligned as asked (16 bytes at least, for
/// `malloc`'s alignments too), holds what is written into it, and frees without a size.
#[test]
fn without_guard_pages_a_huge_block_keeps_its_alignment_and_its_descriptor() {
    let heap =
        Randomized::with_seed_and_checks(43, Checks::ALL.without(Checks::GUARD_PAGES)).unwrap();
    for align in [1, 8, 16, 32, 4096] {
        for size in [LARGE_MAX, (1 << 20) + 1, (3 << 20) + 5] {
            assert!(is_huge(size, align));
            let p = heap.allocate(layout(size, align)).unwrap();
            let at = p.as_ptr() as usize;
            assert_eq!(at % align.max(16), 0, "{size} at {align}: {at:#x}");
            assert_eq!(heap.check_pointer(p.as_ptr()).map(|u| u >= size), Ok(true));
            fill(p, size, align as u8);
            expect_filled(p, size, align as u8, "a huge block without a guard page");
            // SAFETY: live, freed once.
            unsafe { heap.deallocate_unsized(p) };
        }
    }
}

/// Minor page faults of the calling thread so far.
fn thread_minor_faults() -> i64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct; getrusage writes it.
    unsafe {
        let mut usage: libc::rusage = core::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
        usage.ru_minflt
    }
}

/// Handing out blocks in memory the OS never mapped faults each page in once, for writing:
/// the write-after-free check does not read a page first (which maps the shared zero page,
/// and the header written next then replaces it, a second fault that flushes the page's
/// translation on every CPU running the process).
#[test]
fn blocks_in_fresh_memory_fault_each_page_in_once() {
    let heap = Randomized::with_seed_and_checks(7, Checks::ALL).unwrap();
    let page = 4096;
    // Warm the heap's own pages (its control block, the chunk table, the arena).
    let warm = heap.allocate(layout(64, 16)).unwrap();
    let mut blocks = Vec::with_capacity(512);
    let mut pages = std::collections::BTreeSet::new();
    let before = thread_minor_faults();
    for i in 0..512 {
        // Larger blocks are checked at both ends, smaller ones in full.
        let size = if i % 2 == 0 { 3000 } else { 200 };
        let p = heap.allocate(layout(size, 16)).unwrap();
        let at = p.as_ptr() as usize;
        // SAFETY: a live block of `size` bytes.
        unsafe { p.as_ptr().write(1) };
        // Every page the allocation may have touched: its header and first bytes, its last
        // bytes and the header of the slack after it.
        for addr in [at - 16, at + 128, at + size - 128, at + size + 48] {
            pages.insert(addr / page);
        }
        blocks.push((p, size));
    }
    let faults = thread_minor_faults() - before;
    assert!(
        faults <= pages.len() as i64 + 32,
        "{faults} page faults for {} pages the allocations touched",
        pages.len()
    );
    for (p, size) in blocks {
        // SAFETY: live blocks of these sizes, freed once.
        unsafe { heap.deallocate(p, layout(size, 16)) };
    }
    // SAFETY: as above.
    unsafe { heap.deallocate(warm, layout(64, 16)) };
}

/// Pages of `[start, start + len)` (page-aligned) that are resident, by `mincore`.
fn resident_pages(start: usize, len: usize) -> usize {
    let page = 4096;
    let mut present = vec![0u8; len.div_ceil(page)];
    // SAFETY: the range is mapped (a slab of a live heap) and `present` has a byte per page.
    let rc = unsafe { libc::mincore(start as *mut libc::c_void, len, present.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    present.iter().filter(|&&p| p & 1 != 0).count()
}

/// A size class holding one object keeps the pages it uses, not its window's: a 500-byte
/// request takes a 528-byte slot in a window of 256 of them (33 pages), and its slab, whose
/// other slots were never handed out, has its header, a page of records and bitmap, the
/// slot's pages and the one below resident, no more.
///
/// Where transparent huge pages are on for every mapping (`always`), the kernel may back the
/// slab with a 2 MiB page at its first touch, and residency says nothing: the test says so
/// and checks nothing.
#[test]
fn a_class_with_one_object_keeps_the_pages_it_uses_not_its_windows() {
    const SLAB: usize = 1 << 20;
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    if thp.is_ok_and(|mode| mode.contains("[always]")) {
        eprintln!(
            "SKIPPED: a_class_with_one_object_keeps_the_pages_it_uses_not_its_windows: \
             transparent huge pages are on for every mapping"
        );
        return;
    }
    let heap = Randomized::with_seed(67).unwrap();
    let l = layout(500, 16);
    let p = heap.allocate(l).unwrap();
    fill(p, 500, 0x3c);
    let slab = p.as_ptr() as usize & !(SLAB - 1);
    let resident = resident_pages(slab, SLAB);
    assert!(
        (2..=6).contains(&resident),
        "{resident} pages of the slab resident for one 500-byte object"
    );
    // SAFETY: allocated just above with `l`, freed once.
    unsafe { heap.deallocate(p, l) };
    heap.check().expect("consistent");
}
