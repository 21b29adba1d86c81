//! Recovery from slab tags as crashes and old runs leave them (the rules are in the
//! `heap` module's documentation): a run head that no longer describes a run, a recorded
//! length that runs past the heap, and the bytes after the last tag line, which in a pool
//! whose heap is a whole number of slabs are the first block's data. The images are made
//! by a heap, then their tag lines are written as a crash at the wrong moment would have
//! left them.

use std::alloc::Layout;

use alloclab_pmem::heap::SLAB_BYTES;
use alloclab_pmem::{PPtr, PersistentHeap, SimMedium};

/// A run head's tag; its length in slabs is bytes 4..8 of its tag line.
const TAG_RUN_HEAD: u8 = 0xFE;
/// Bytes of the metadata area per slab: a tag line per slab, one byte per heap line.
const TAG_LINE_STRIDE: usize = SLAB_BYTES / 64;

/// A heap of `slabs` slabs in a pool whose metadata area ends where the heap begins.
fn exact_heap(slabs: usize) -> PersistentHeap<SimMedium> {
    let create = |len| PersistentHeap::create_on(SimMedium::new(len), 512).unwrap();
    let meta_offset = create(4 << 20).pool().metadata_range().offset;
    let heap = create(meta_offset + slabs * (SLAB_BYTES + TAG_LINE_STRIDE));
    let (meta, space) = (heap.pool().metadata_range(), heap.pool().heap_range());
    assert_eq!((space.len, meta.end()), (slabs * SLAB_BYTES, space.offset));
    heap
}

fn slot(heap: &PersistentHeap<SimMedium>, i: usize) -> *mut PPtr<u8> {
    assert!((i + 1) * 8 <= heap.root_size());
    // SAFETY: inside the root (asserted).
    unsafe { heap.root().add(i * 8).cast() }
}

/// Allocates `size` bytes into root slot `i`, fills them with `byte` and persists them;
/// returns the block's offset in the heap.
fn allocate_filled(heap: &PersistentHeap<SimMedium>, i: usize, size: usize, byte: u8) -> usize {
    let layout = Layout::from_size_align(size, 8).unwrap();
    // SAFETY: a root slot, no other thread.
    let p = unsafe { heap.allocate_into(slot(heap, i), layout) }.unwrap();
    let ptr = heap.resolve(p).unwrap();
    // SAFETY: a live block of at least `size` bytes.
    unsafe { std::ptr::write_bytes(ptr, byte, size) };
    heap.persist(ptr, size);
    p.offset() as usize - heap.pool().heap_range().offset
}

/// The durable image of `heap` with slab `slab`'s tag line rewritten as a run head of
/// `len` slabs.
fn with_head(heap: &PersistentHeap<SimMedium>, slab: usize, len: u32) -> Box<[u8]> {
    let mut image = heap.medium().durable_image();
    let line = heap.pool().metadata_range().offset + slab * TAG_LINE_STRIDE;
    image[line] = TAG_RUN_HEAD;
    image[line + 4..line + 8].copy_from_slice(&len.to_le_bytes());
    image
}

/// Opens `image` and checks, for each `(i, size, byte)` of `slots`, that root slot `i`
/// holds a live block whose first `size` bytes are `byte`; returns the number of live
/// blocks recovery found.
fn reopen_and_check(image: Box<[u8]>, slots: &[(usize, usize, u8)]) -> u64 {
    let heap = PersistentHeap::open_on(SimMedium::from_image(image)).unwrap();
    for &(i, size, byte) in slots {
        // SAFETY: a root slot.
        let p = unsafe { PPtr::load(slot(&heap, i)) };
        let ptr = heap.resolve(p).expect("the slot's block");
        assert!(
            heap.block_size(p).is_some_and(|b| b >= size),
            "slot {i}: the block is not live after recovery"
        );
        // SAFETY: a live block of at least `size` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(ptr, size) };
        assert!(bytes.iter().all(|&b| b == byte), "slot {i}: data changed");
    }
    heap.recovery().live_blocks
}

#[test]
fn the_bytes_after_the_last_tag_line_are_not_read_as_a_tag() {
    let heap = exact_heap(63);
    // The heap's first block, every byte of it reading as the tag of a small class.
    let offset = allocate_filled(&heap, 0, 4096, 5);
    assert_eq!(offset, 0, "the first block starts the heap");
    let live = reopen_and_check(heap.medium().durable_image(), &[(0, 4096, 5)]);
    assert_eq!(live, 1);
}

/// A head whose slabs are not all continuations is not a run: the state a thread leaves
/// that took a slab for a run (its tag line still the head of an older run) while another
/// took the next slab for small blocks and published one, when a crash comes before the
/// first thread's tags are persisted.
#[test]
fn a_stale_run_head_covering_a_slab_in_use_since_is_not_a_run() {
    let heap = exact_heap(63);
    // Slab 0 for one class, slab 1 for another; slab 0 then left empty.
    assert_eq!(allocate_filled(&heap, 0, 64, 0x11), 0);
    let second = allocate_filled(&heap, 1, 128, 0x22);
    assert_eq!(second / SLAB_BYTES, 1, "the second class's slab");
    // SAFETY: root slot 0 holds a live block.
    unsafe { heap.free_from(slot(&heap, 0)) }.unwrap();
    for len in [2, 3, 63] {
        let live = reopen_and_check(with_head(&heap, 0, len), &[(1, 128, 0x22)]);
        assert_eq!(live, 1, "a head of {len} slabs over slab 1");
    }
}

/// A head whose recorded length runs past the last slab is not a run, whatever the
/// bytes past the tag lines read as (here: continuations).
#[test]
fn a_run_head_longer_than_the_slabs_left_is_not_a_run() {
    let heap = exact_heap(63);
    // The first block fills the bytes read as the tags of slabs 63, 64, ... with the
    // continuation tag.
    assert_eq!(allocate_filled(&heap, 0, 4096, 0xFF), 0);
    // The last slab: free, its tag line rewritten as a head of 2 to 4 slabs.
    for len in [2, 3, 4] {
        let live = reopen_and_check(with_head(&heap, 62, len), &[(0, 4096, 0xFF)]);
        assert_eq!(live, 1, "a head of {len} slabs at the last slab");
    }
}

/// Recovery rebuilds a live run's continuation slabs as part of it: a persistent pointer
/// stored past the run's first slab is a valid destination before and after a reopen, and
/// what it links is live after the next one.
#[test]
fn a_run_recovered_holds_destinations_in_every_slab() {
    let heap = exact_heap(63);
    let big = 200 << 10;
    allocate_filled(&heap, 0, big, 0);
    let small = Layout::from_size_align(64, 8).unwrap();
    let dest_in = |heap: &PersistentHeap<SimMedium>, at: usize| {
        // SAFETY: root slot 0 holds the run.
        let run = heap.resolve(unsafe { PPtr::load(slot(heap, 0)) }).unwrap();
        // SAFETY: `at` is inside the run, 8-aligned.
        unsafe { run.add(at).cast::<PPtr<u8>>() }
    };
    // Before a reopen, and after: the third slab of the run.
    let at = 2 * SLAB_BYTES + 64;
    // SAFETY: a destination inside a live block, no other thread.
    unsafe { heap.allocate_into(dest_in(&heap, at), small) }.unwrap();
    let reopened =
        PersistentHeap::open_on(SimMedium::from_image(heap.medium().durable_image())).unwrap();
    assert_eq!(reopened.recovery().live_blocks, 2);
    let at = 3 * SLAB_BYTES + 128;
    // SAFETY: as above.
    unsafe { reopened.allocate_into(dest_in(&reopened, at), small) }
        .expect("a destination in the run's last slab after recovery");
    let again =
        PersistentHeap::open_on(SimMedium::from_image(reopened.medium().durable_image())).unwrap();
    assert_eq!(again.recovery().live_blocks, 3);
}

/// Stores a persistent pointer to pool offset `to` at `at` and persists it.
fn store_durably(heap: &PersistentHeap<SimMedium>, at: *mut PPtr<u8>, to: u64) {
    // SAFETY: `at` is a root slot or 8 aligned bytes inside a block, no other thread.
    unsafe { PPtr::store(at, PPtr::from_offset(to)) };
    heap.persist(at.cast_const().cast(), 8);
}

/// The pool offset of the block in root slot `i`, and the slot cleared (durably): the
/// block stays allocated in this heap, and is unreachable for the next recovery.
fn unlink(heap: &PersistentHeap<SimMedium>, i: usize) -> u64 {
    // SAFETY: a root slot.
    let p = unsafe { PPtr::load(slot(heap, i)) };
    store_durably(heap, slot(heap, i), 0);
    p.offset()
}

/// The mark pass takes a word for a pointer only when it holds a block's start: a word
/// pointing inside a small block, inside a run's first slab, or at the slack after a
/// slab's last block keeps nothing alive, and what such a place holds is not followed.
/// (The same link, from a block the root points at, keeps its target.)
#[test]
fn only_a_pointer_to_a_blocks_start_keeps_anything_alive() {
    let cases: [(&str, usize, u64); 3] = [
        // A 128-byte block, pointed at 64 bytes in; its second half holds the link.
        ("inside a small block", 128, 64),
        // A run of four slabs, pointed at 4 KiB into its first slab; the link is at 100 KiB.
        ("inside a run's first slab", 200 << 10, 4096),
        // A slab of 192-byte blocks (341 of them, 64 bytes left over), pointed at the
        // slack after the last block; the link is in the next slab's first block.
        ("at a slab's slack", 192, (SLAB_BYTES / 192 * 192) as u64),
    ];
    for (what, size, inside) in cases {
        let heap = exact_heap(63);
        allocate_filled(&heap, 0, size, 0);
        // The next slab's first block (the third case's link holder), and the target.
        allocate_filled(&heap, 1, 64, 0);
        allocate_filled(&heap, 2, 256, 0);
        let (block, next_slab, target) = (unlink(&heap, 0), unlink(&heap, 1), unlink(&heap, 2));
        let holder = match size {
            128 => block + 64,
            192 => next_slab,
            _ => block + (100 << 10),
        };
        if size == 192 {
            assert_eq!(
                next_slab,
                block + SLAB_BYTES as u64,
                "{what}: the next slab"
            );
        }
        let at = heap
            .resolve(PPtr::from_offset(holder))
            .unwrap()
            .cast::<PPtr<u8>>();
        store_durably(&heap, at, target);
        let live_after = |root_word: u64| {
            store_durably(&heap, slot(&heap, 0), root_word);
            PersistentHeap::open_on(SimMedium::from_image(heap.medium().durable_image()))
                .unwrap()
                .recovery()
                .live_blocks
        };
        // The block holding the link, from its start: it and the target live.
        let holder_block = if size == 192 { next_slab } else { block };
        assert_eq!(
            live_after(holder_block),
            2,
            "{what}: the link from a live block"
        );
        assert_eq!(
            live_after(block + inside),
            0,
            "{what}: a pointer {inside} bytes into the block at {block:#x} kept blocks alive"
        );
    }
}
