//! The model's invariants under random operation sequences: the bitmap matches the live
//! blocks, handles find their data after every compaction, data survives byte for byte, the
//! budget is never exceeded, failures are classified by the free bytes — and the trait view
//! passes the typestate checker.

use core::alloc::Layout;

use alloclab_core::{AllocErrorKind, Allocator, Checked, Policy};
use alloclab_hls::{
    AllocateError, BitmapGranularity, CompactWindow, DefragConfig, FailureClass, Handle,
    OnChipConfig, OnChipMemory, SharedOnChip,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Alloc { accelerator: usize, size: usize },
    Free { pick: usize },
    Compact { heap: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..8, 1usize..300).prop_map(|(accelerator, size)| Op::Alloc { accelerator, size }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (0usize..2).prop_map(|heap| Op::Compact { heap }),
    ]
}

fn window() -> impl Strategy<Value = CompactWindow> {
    prop_oneof![
        Just(CompactWindow::FromBase),
        Just(CompactWindow::Cheapest),
        Just(CompactWindow::Whole),
    ]
}

fn config() -> impl Strategy<Value = OnChipConfig> {
    (
        prop_oneof![Just(8u32), Just(32), Just(64), Just(128)],
        any::<bool>(),
        any::<bool>(),
        1u32..64,
        any::<bool>(),
        prop_oneof![Just(None), (16u32..256).prop_map(Some)],
        1u32..=2,
        window(),
    )
        .prop_map(
            |(
                word_bits,
                per_word,
                cached_start,
                budget_words,
                on_failure,
                threshold,
                ports,
                window,
            )| {
                let word_bytes = word_bits / 8;
                OnChipConfig {
                    heaps: 2,
                    // About 1 KiB, a whole number of 16-byte units.
                    heap_words: 1024 / word_bytes,
                    word_bits,
                    granularity: if per_word {
                        BitmapGranularity::Word
                    } else {
                        BitmapGranularity::Byte
                    },
                    align_bytes: 4,
                    cached_start,
                    costs: Default::default(),
                    defrag: Some(DefragConfig {
                        on_fragmentation_failure: on_failure || threshold.is_none(),
                        free_run_threshold_bytes: threshold,
                        budget_words,
                        ports,
                        window,
                    }),
                }
            },
        )
}

/// The byte an accelerator writes at `offset` of block number `id`.
fn pattern(id: u64, offset: usize) -> u8 {
    (id as u8)
        .wrapping_mul(31)
        .wrapping_add((offset % 253) as u8)
}

/// Checks everything the model promises after each step.
fn check(m: &OnChipMemory, live: &[(Handle, u64, usize)]) -> Result<(), TestCaseError> {
    m.check_invariants().map_err(TestCaseError::fail)?;
    let c = m.config();
    for heap in 0..c.heaps {
        let blocks = m.live_blocks(heap);
        // The hardware bitmap, granule by granule, is set exactly inside live blocks.
        let granule = u64::from(c.granule_bytes());
        let mut covered = vec![false; (c.heap_bytes() / granule) as usize];
        for (_, l) in &blocks {
            for g in l.offset_bytes / granule..(l.offset_bytes + l.reserved_bytes) / granule {
                covered[g as usize] = true;
            }
        }
        for (g, &used) in covered.iter().enumerate() {
            prop_assert_eq!(
                m.bitmap_bit(heap, g as u64),
                used,
                "heap {} granule {}",
                heap,
                g
            );
        }
    }
    for &(h, id, size) in live {
        let bytes = m.bytes(h).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(bytes.len(), size);
        for (k, &b) in bytes.iter().enumerate() {
            prop_assert_eq!(b, pattern(id, k), "block {} byte {} moved or lost", id, k);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn random_sequences_keep_every_invariant_and_every_byte(
        config in config(),
        ops in proptest::collection::vec(op(), 1..160),
    ) {
        let mut m = OnChipMemory::new(config).unwrap();
        let budget = u64::from(config.defrag.unwrap().budget_words);
        let mut live: Vec<(Handle, u64, usize)> = Vec::new();
        let mut next_id = 0u64;
        for op in ops {
            let defrag = match op {
                Op::Alloc { accelerator, size } => {
                    let heap = m.heap_of(accelerator);
                    let free_before = m.free_bytes(heap);
                    match m.allocate(accelerator, size) {
                        Ok(a) => {
                            prop_assert_eq!(a.handle.heap(), accelerator % config.heaps);
                            let id = next_id;
                            next_id += 1;
                            for (k, b) in m.bytes_mut(a.handle).unwrap().iter_mut().enumerate() {
                                *b = pattern(id, k);
                            }
                            live.push((a.handle, id, size));
                            a.defrag
                        }
                        Err(AllocateError::Failed(f)) => {
                            let unit = u64::from(config.unit_bytes());
                            let need = (size as u64).div_ceil(unit) * unit;
                            // Classified by the free bytes before the request.
                            let expected = if need <= free_before {
                                FailureClass::Fragmentation
                            } else {
                                FailureClass::Capacity
                            };
                            prop_assert_eq!(f.class, expected);
                            prop_assert!(f.largest_free_run_bytes < need);
                            f.defrag
                        }
                        Err(e) => return Err(TestCaseError::fail(e.to_string())),
                    }
                }
                Op::Free { pick } => {
                    if live.is_empty() {
                        None
                    } else {
                        let (h, _, _) = live.swap_remove(pick % live.len());
                        let f = m.free(h).unwrap();
                        prop_assert!(m.free(h).is_err(), "a freed handle is stale");
                        f.defrag
                    }
                }
                Op::Compact { heap } => Some(m.compact(heap)),
            };
            if let Some(d) = defrag {
                prop_assert!(d.words_moved <= budget, "moved {} > budget {}", d.words_moved, budget);
            }
            check(&m, &live)?;
        }
        prop_assert!(m.counters().words_moved_max <= budget);
    }

    #[test]
    fn with_a_sufficient_budget_no_failure_is_due_to_fragmentation(
        sizes in proptest::collection::vec((1usize..400, any::<bool>()), 1..200),
        window in window(),
    ) {
        let config = OnChipConfig { heap_words: 512, ..OnChipConfig::default() }
            .with_defrag(DefragConfig { budget_words: 512, window, ..DefragConfig::default() });
        let mut m = OnChipMemory::new(config).unwrap();
        let mut live = Vec::new();
        for (size, free_one) in sizes {
            match m.allocate(0, size) {
                Ok(a) => live.push(a.handle),
                Err(AllocateError::Failed(f)) => prop_assert_eq!(f.class, FailureClass::Capacity),
                Err(e) => return Err(TestCaseError::fail(e.to_string())),
            }
            if free_one && live.len() > 1 {
                m.free(live.remove(live.len() / 2)).unwrap();
            }
        }
        prop_assert_eq!(m.counters().fragmentation_failures, 0);
    }
}

#[test]
fn the_baseline_fails_for_fragmentation_where_the_defragmenter_succeeds() {
    let base = OnChipConfig {
        heap_words: 64,
        ..OnChipConfig::default()
    };
    let run = |config: OnChipConfig| {
        let mut m = OnChipMemory::new(config).unwrap();
        // Four 64-byte blocks fill 256 bytes; free the 1st and 3rd: 128 bytes free in two
        // 64-byte holes.
        let h: Vec<Handle> = (0..4).map(|_| m.allocate(0, 64).unwrap().handle).collect();
        m.bytes_mut(h[1]).unwrap().fill(7);
        m.bytes_mut(h[3]).unwrap().fill(9);
        m.free(h[0]).unwrap();
        m.free(h[2]).unwrap();
        let result = m.allocate(0, 100);
        (m, h, result)
    };
    let (_, _, baseline) = run(base);
    match baseline {
        Err(AllocateError::Failed(f)) => {
            assert_eq!(f.class, FailureClass::Fragmentation);
            assert_eq!((f.free_bytes, f.largest_free_run_bytes), (128, 64));
        }
        other => panic!("expected a fragmentation failure, got {other:?}"),
    }
    let (m, h, defrag) = run(base.with_defrag(DefragConfig::default()));
    let a = defrag.expect("compaction makes room");
    let d = a.defrag.expect("the failure triggered a compaction");
    // Only as far as the request needs: the 2nd block slides to the base, and the two holes
    // merge into 128 bytes above it; the 4th block stays.
    assert_eq!((d.blocks_moved, d.words_moved), (1, 16));
    assert_eq!(m.location(h[1]).unwrap().offset_bytes, 0);
    assert_eq!(m.location(a.handle).unwrap().offset_bytes, 64);
    assert!(m.bytes(h[1]).unwrap().iter().all(|&b| b == 7));
    assert!(m.bytes(h[3]).unwrap().iter().all(|&b| b == 9));
    // Capacity: more than the free bytes.
    let mut m = m;
    match m.allocate(0, 200) {
        Err(AllocateError::Failed(f)) => assert_eq!(f.class, FailureClass::Capacity),
        other => panic!("expected a capacity failure, got {other:?}"),
    }
    m.check_invariants().unwrap();
}

#[test]
fn the_trait_view_passes_the_typestate_checker_across_compactions() {
    let config = OnChipConfig {
        heaps: 2,
        heap_words: 256,
        ..OnChipConfig::default()
    }
    .with_defrag(DefragConfig::default());
    let shared = SharedOnChip::new("hls-defrag", config).unwrap();
    let checked = Checked::with_policy(shared, Policy::Record);
    let mut live = Vec::new();
    for i in 0..400usize {
        let layout = Layout::from_size_align(1 + (i * 37) % 200, 4).unwrap();
        match checked.allocate(layout) {
            Ok(h) => live.push((h, layout)),
            Err(e) => assert!(matches!(e.kind, AllocErrorKind::OutOfMemory), "{e}"),
        }
        if i % 3 == 0 && !live.is_empty() {
            let (h, l) = live.remove((i * 7) % live.len());
            // SAFETY: `h` is live and was allocated with `l`.
            unsafe { checked.deallocate(h, l) };
        }
    }
    assert!(
        checked.violations().is_empty(),
        "{:?}",
        checked.violations()
    );
    checked.check_stats().unwrap();
    assert!(checked.inner().with(|m| m.counters().defrag_calls) > 0);
    let port = checked.inner().port(1);
    let h = port
        .allocate(Layout::from_size_align(8, 4).unwrap())
        .unwrap();
    assert_eq!(h.heap(), 1);
    let e = port
        .allocate(Layout::from_size_align(8, 8).unwrap())
        .unwrap_err();
    assert_eq!(e.kind, AllocErrorKind::AlignmentUnsupported);
    let e = port
        .allocate(Layout::from_size_align(0, 1).unwrap())
        .unwrap_err();
    assert_eq!(e.kind, AllocErrorKind::ZeroSize);
}
