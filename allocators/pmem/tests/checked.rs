//! alloclab-pmem under `alloclab_core::Checked`: random allocate/free sequences through the
//! core `Allocator` trait give no overlap, no misaligned block, no refused free, and counters
//! that agree with the shadow; threads included.

use std::alloc::Layout;
use std::sync::Arc;

use alloclab_core::{Allocator, Checked, Policy};
use alloclab_pmem::{PersistentHeap, SimMedium};
use proptest::prelude::*;

const POOL_BYTES: usize = 8 << 20;

fn checked_heap() -> Checked<PersistentHeap<SimMedium>> {
    checked_heap_of(POOL_BYTES)
}

fn checked_heap_of(pool_bytes: usize) -> Checked<PersistentHeap<SimMedium>> {
    let heap = PersistentHeap::create_on(SimMedium::new(pool_bytes), 64).unwrap();
    Checked::with_policy(heap, Policy::Record)
}

/// One step: allocate `size` bytes aligned to `align`, or free the live block at `pick`.
#[derive(Clone, Debug)]
enum Op {
    Alloc { size: usize, align: usize },
    Free { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..9000, prop_oneof![Just(1usize), Just(8), Just(16), Just(64)])
            .prop_map(|(size, align)| Op::Alloc { size, align }),
        2 => any::<usize>().prop_map(|pick| Op::Free { pick }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_sequences_break_no_typestate_rule(ops in prop::collection::vec(op(), 1..300)) {
        let heap = checked_heap();
        let mut live: Vec<(alloclab_pmem::PPtr<u8>, Layout)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { size, align } => {
                    let layout = Layout::from_size_align(size, align).unwrap();
                    if let Ok(h) = heap.allocate(layout) {
                        live.push((h, layout));
                    }
                }
                Op::Free { pick } if !live.is_empty() => {
                    let (h, layout) = live.swap_remove(pick % live.len());
                    // SAFETY: a live block of this heap with this layout, freed once.
                    unsafe { heap.deallocate(h, layout) };
                }
                Op::Free { .. } => {}
            }
        }
        prop_assert!(heap.violations().is_empty(), "{:?}", heap.violations());
        prop_assert_eq!(heap.live_blocks(), live.len());
        prop_assert!(heap.check_stats().is_ok(), "{:?}", heap.check_stats());
    }
}

#[test]
fn a_double_free_and_a_foreign_handle_are_caught_before_the_heap_sees_them() {
    let heap = checked_heap();
    let layout = Layout::from_size_align(100, 16).unwrap();
    let a = heap.allocate(layout).unwrap();
    // SAFETY: `a` is live; the second free and the foreign handle are what Checked catches
    // (it forwards neither).
    unsafe {
        heap.deallocate(a, layout);
        heap.deallocate(a, layout);
        heap.deallocate(alloclab_pmem::PPtr::from_offset(a.offset() + 64), layout);
    }
    assert_eq!(heap.violations().len(), 2, "{:?}", heap.violations());
    assert!(heap.check_stats().is_ok());
}

#[test]
fn threads_allocating_and_freeing_through_checked_never_overlap() {
    let heap = Arc::new(checked_heap_of(32 << 20));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let heap = Arc::clone(&heap);
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for i in 0..2000usize {
                    let layout = Layout::from_size_align(1 + (i * 37 + t * 11) % 3000, 16).unwrap();
                    live.push((heap.allocate(layout).unwrap(), layout));
                    if i % 3 != 0 {
                        let (h, layout) = live.swap_remove((i * 7) % live.len());
                        // SAFETY: a live block of this heap, freed once.
                        unsafe { heap.deallocate(h, layout) };
                    }
                }
                for (h, layout) in live {
                    // SAFETY: as above.
                    unsafe { heap.deallocate(h, layout) };
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(heap.violations().is_empty(), "{:?}", heap.violations());
    assert_eq!(heap.live_blocks(), 0);
    assert!(heap.check_stats().is_ok(), "{:?}", heap.check_stats());
}
