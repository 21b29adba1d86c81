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
    // Small blocks over more than one chunk, and two huge blocks.
    let small: Vec<_> = (0..6000)
        .map(|_| heap.allocate(layout(1000, 16)).unwrap())
        .collect();
    let huge: Vec<_> = (0..2)
        .map(|_| heap.allocate(layout(3 << 20, 16)).unwrap())
        .collect();
    let shape = heap.check().unwrap();
    assert!(shape.chunks >= 2 && shape.huge_blocks == 2, "{shape:?}");
    // Each huge block's guard page (inaccessible, but mapped) starts where its payload's
    // last page ends: it goes with the block's mapping.
    let guards = huge
        .iter()
        .map(|p| (p.as_ptr() as usize + (3 << 20)).next_multiple_of(4096));
    let addresses: Vec<usize> = small
        .iter()
        .step_by(500)
        .chain(&huge)
        .map(|p| p.as_ptr() as usize)
        .chain(guards)
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
