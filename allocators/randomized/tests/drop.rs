//! Dropping a heap gives every mapping it made back to the OS: its chunks and the mappings
//! of its huge blocks, guard pages included. Alone in its test binary, so that no other test maps memory into the
//! addresses the drop frees while the process's map is read.

mod common;

use alloclab_core::Allocator;
use alloclab_randomized::Randomized;
use common::layout;

/// The address ranges mapped in this process, from `/proc/self/maps`.
fn mappings() -> Vec<(usize, usize)> {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .map(|line| {
            let range = line.split_whitespace().next().unwrap();
            let (start, end) = range.split_once('-').unwrap();
            (
                usize::from_str_radix(start, 16).unwrap(),
                usize::from_str_radix(end, 16).unwrap(),
            )
        })
        .collect()
}

fn is_mapped(addr: usize, maps: &[(usize, usize)]) -> bool {
    maps.iter()
        .any(|&(start, end)| (start..end).contains(&addr))
}

#[test]
fn dropping_a_heap_unmaps_its_chunks_and_huge_blocks() {
    let heap = Randomized::with_seed(3).unwrap();
    // Small blocks over more than one chunk, and three huge blocks: two within a chunk's
    // size, one over two chunks' (its mapping's length is its own, not a chunk's).
    let small: Vec<_> = (0..6000)
        .map(|_| heap.allocate(layout(1000, 16)).unwrap())
        .collect();
    let sizes = [3 << 20, 3 << 20, 9 << 20];
    let huge: Vec<_> = sizes
        .iter()
        .map(|&size| heap.allocate(layout(size, 16)).unwrap())
        .collect();
    let shape = heap.check().unwrap();
    assert!(shape.chunks >= 2 && shape.huge_blocks == 3, "{shape:?}");
    // Each huge block's last byte, and its guard page (inaccessible, but mapped), which
    // starts where its payload's last page ends: they go with the block's mapping.
    let ends = huge.iter().zip(sizes).flat_map(|(p, size)| {
        let end = p.as_ptr() as usize + size;
        [end - 1, end.next_multiple_of(4096)]
    });
    let addresses: Vec<usize> = small
        .iter()
        .step_by(500)
        .chain(&huge)
        .map(|p| p.as_ptr() as usize)
        .chain(ends)
        .collect();
    let before = mappings();
    assert!(addresses.iter().all(|&a| is_mapped(a, &before)));
    drop(heap);
    let after = mappings();
    let still: Vec<_> = addresses
        .iter()
        .filter(|&&a| is_mapped(a, &after))
        .map(|a| format!("{a:#x}"))
        .collect();
    assert!(still.is_empty(), "still mapped after the drop: {still:?}");
}
