//! Properties of the caching-allocator model and of replay.

use alloclab_core::{Checked, SystemHeap};
use alloclab_training::caching::{
    CachingAllocator, CachingConfig, LARGE_SEGMENT_BYTES, MIN_BLOCK_BYTES, SMALL_SEGMENT_BYTES,
};
use alloclab_training::replay::{replay_caching, replay_host};
use alloclab_training::{Model, ModelConfig, Precision, RunTrace, Trace, TrainingError};

/// xorshift64*: deterministic sizes and choices without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Mostly small sizes, some between 1 and 10 MiB, some above.
    fn size(&mut self) -> u64 {
        match self.below(10) {
            0..=5 => 1 + self.below(1 << 20),
            6..=7 => (1 << 20) + self.below(9 << 20),
            _ => (10 << 20) + self.below(60 << 20),
        }
    }
}

fn configs() -> Vec<CachingConfig> {
    let mut v = Vec::new();
    for expandable_segments in [false, true] {
        for max_split_bytes in [None, Some(8 << 20), Some(40 << 20)] {
            v.push(CachingConfig {
                expandable_segments,
                max_split_bytes,
                capacity_bytes: None,
            });
        }
    }
    v
}

#[test]
fn random_workloads_keep_every_invariant_and_free_everything() {
    for (k, config) in configs().into_iter().enumerate() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 + k as u64);
        let mut heap = CachingAllocator::new(config);
        let mut live: Vec<(u64, u64)> = Vec::new();
        for _ in 0..3000 {
            if live.is_empty() || rng.below(100) < 55 {
                let size = rng.size();
                let addr = heap.malloc(size).unwrap();
                for &(a, s) in &live {
                    let rounded = s.div_ceil(MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES;
                    let mine = size.div_ceil(MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES;
                    assert!(
                        addr + mine <= a || a + rounded <= addr,
                        "{config:?}: overlap"
                    );
                }
                live.push((addr, size));
            } else {
                let i = rng.below(live.len() as u64) as usize;
                let (addr, _) = live.swap_remove(i);
                heap.free(addr);
            }
            heap.check_invariants()
                .unwrap_or_else(|e| panic!("{config:?}: {e}"));
            let s = heap.stats();
            assert!(s.allocated_bytes <= s.reserved_bytes);
            assert!(s.requested_bytes <= s.allocated_bytes);
        }
        for (addr, _) in live.drain(..) {
            heap.free(addr);
        }
        heap.check_invariants().unwrap();
        assert_eq!(heap.stats().allocated_bytes, 0);
        heap.empty_cache();
        heap.check_invariants().unwrap();
        assert_eq!(
            heap.stats().reserved_bytes,
            0,
            "{config:?}: every freed block returns"
        );
    }
}

#[test]
fn sizes_round_to_512_bytes_and_pools_take_pytorchs_segment_sizes() {
    let mut heap = CachingAllocator::new(CachingConfig::default());
    let a = heap.malloc(1).unwrap();
    assert_eq!(heap.stats().allocated_bytes, 512);
    assert_eq!(heap.stats().reserved_bytes, SMALL_SEGMENT_BYTES);
    // A second small request splits the same 2 MiB segment.
    let b = heap.malloc(1000).unwrap();
    assert_eq!(heap.stats().segment_allocs, 1);
    assert_eq!(b, a + 512);
    // 3 MiB: a 20 MiB large segment, split.
    heap.malloc(3 << 20).unwrap();
    assert_eq!(
        heap.stats().reserved_bytes,
        SMALL_SEGMENT_BYTES + LARGE_SEGMENT_BYTES
    );
    // 11 MiB + 1 fits in the 17 MiB left of that segment.
    heap.malloc((11 << 20) + 1).unwrap();
    assert_eq!(heap.stats().segment_allocs, 2);
    // 25 MiB + 1: its own segment, rounded to 2 MiB (26 MiB).
    heap.malloc((25 << 20) + 1).unwrap();
    assert_eq!(
        heap.stats().reserved_bytes,
        SMALL_SEGMENT_BYTES + LARGE_SEGMENT_BYTES + (26 << 20)
    );
    // 5 MiB fits in the 6 MiB left of the 20 MiB segment: no new segment.
    heap.malloc(5 << 20).unwrap();
    assert_eq!(heap.stats().segment_allocs, 3);
    heap.check_invariants().unwrap();
}

#[test]
fn a_freed_block_serves_the_next_request_of_its_size() {
    let mut heap = CachingAllocator::new(CachingConfig::default());
    let a = heap.malloc(64 << 20).unwrap();
    heap.free(a);
    let b = heap.malloc(64 << 20).unwrap();
    assert_eq!(a, b);
    assert_eq!(heap.stats().segment_allocs, 1);
    // A slightly larger request does not fit the cached block: a new segment.
    heap.free(b);
    heap.malloc((64 << 20) + (2 << 20)).unwrap();
    assert_eq!(heap.stats().segment_allocs, 2);
    assert_eq!(heap.stats().reserved_bytes, (64 << 20) + (66 << 20));
}

#[test]
fn max_split_size_keeps_small_requests_out_of_oversize_blocks() {
    let config = CachingConfig {
        max_split_bytes: Some(32 << 20),
        ..CachingConfig::default()
    };
    let mut heap = CachingAllocator::new(config);
    let big = heap.malloc(100 << 20).unwrap();
    heap.free(big);
    // Below max_split: must not carve the 100 MiB block.
    heap.malloc(4 << 20).unwrap();
    assert_eq!(heap.stats().segment_allocs, 2);
    // At or above max_split, within 20 MiB of the block's size: takes it whole, unsplit.
    let again = heap.malloc(90 << 20).unwrap();
    assert_eq!(again, big);
    assert_eq!(heap.stats().allocated_bytes, (100 << 20) + (4 << 20));
    heap.check_invariants().unwrap();
}

#[test]
fn expandable_segment_grows_at_its_end_and_merges_the_free_tail() {
    let config = CachingConfig {
        expandable_segments: true,
        ..CachingConfig::default()
    };
    let mut heap = CachingAllocator::new(config);
    let a = heap.malloc(30 << 20).unwrap();
    assert_eq!(heap.stats().reserved_bytes, 40 << 20);
    let b = heap.malloc(30 << 20).unwrap();
    assert_eq!(
        b,
        a + (30 << 20),
        "the second block follows the first in one range"
    );
    assert_eq!(heap.stats().reserved_bytes, 60 << 20);
    heap.free(a);
    heap.free(b);
    // Both freed blocks merged: a 61 MiB request fits after mapping one more page only.
    heap.malloc(61 << 20).unwrap();
    assert_eq!(heap.stats().reserved_bytes, 80 << 20);
    assert_eq!(heap.segments().count(), 1);
    heap.check_invariants().unwrap();
}

#[test]
fn a_full_device_flushes_the_cache_then_reports_out_of_memory() {
    let config = CachingConfig {
        capacity_bytes: Some(100 << 20),
        ..CachingConfig::default()
    };
    let mut heap = CachingAllocator::new(config);
    let a = heap.malloc(60 << 20).unwrap();
    heap.free(a);
    // 60 MiB cached + 62 MiB would exceed 100 MiB: the cached segment is released first.
    let b = heap.malloc((60 << 20) + 1).unwrap();
    assert_eq!(heap.stats().cache_flushes, 1);
    assert_eq!(heap.stats().reserved_bytes, 62 << 20);
    let err = heap.malloc(50 << 20).unwrap_err();
    assert!(matches!(err, TrainingError::OutOfMemory { .. }), "{err}");
    heap.free(b);
    heap.check_invariants().unwrap();
}

fn growing_run(n0: u32, iterations: u32) -> RunTrace {
    let c = ModelConfig::new(Model::ResNet50, n0, Precision::Fp32).unwrap();
    let batches: Vec<u32> = (n0..n0 + iterations).collect();
    RunTrace::new(&c, &batches).unwrap()
}

#[test]
fn a_growing_batch_fragments_without_expandable_segments_and_not_with_them() {
    let run = growing_run(16, 8);
    let without = replay_caching(&run, CachingConfig::default(), 97).unwrap();
    let with = replay_caching(
        &run,
        CachingConfig {
            expandable_segments: true,
            ..CachingConfig::default()
        },
        97,
    )
    .unwrap();
    let last_without = without.iterations.last().unwrap();
    let last_with = with.iterations.last().unwrap();
    assert!(last_without.fragmentation() > 1.5, "{last_without:?}");
    assert!(last_with.fragmentation() < 1.1, "{last_with:?}");
    // Reserved grows from iteration to iteration without, not with.
    let first_without = without.iterations[0].stats.peak_reserved_bytes;
    assert!(last_without.stats.peak_reserved_bytes > 2 * first_without);
}

#[test]
fn a_fixed_batch_reaches_a_steady_state_with_no_new_segments() {
    let c = ModelConfig::new(Model::BertLarge, 2, Precision::Mixed)
        .unwrap()
        .with_seq_len(128)
        .unwrap();
    let run = RunTrace::new(&c, &[2, 2, 2]).unwrap();
    for expandable_segments in [false, true] {
        let r = replay_caching(
            &run,
            CachingConfig {
                expandable_segments,
                ..CachingConfig::default()
            },
            101,
        )
        .unwrap();
        assert_eq!(r.iterations[2].stats.segment_allocs, 0);
        assert_eq!(
            r.iterations[1].stats.alloc_calls,
            r.iterations[2].stats.alloc_calls
        );
    }
}

#[test]
fn replay_never_needs_less_than_the_exact_peak() {
    for model in Model::ALL {
        let mut c = ModelConfig::new(model, 2, Precision::Mixed).unwrap();
        if c.seq_len > 0 {
            c = c.with_seq_len(64).unwrap();
        }
        let trace = Trace::generate(&c);
        let run = RunTrace::new(&c, &[2]).unwrap();
        let r = replay_caching(&run, CachingConfig::default(), 0).unwrap();
        assert_eq!(r.peak_requested_bytes, trace.peak_live_bytes(), "{model}");
        assert!(r.total.peak_allocated_bytes >= r.peak_requested_bytes);
        assert!(r.total.peak_reserved_bytes >= r.total.peak_allocated_bytes);
    }
}

#[test]
fn host_replay_passes_the_typestate_checker() {
    let c = ModelConfig::new(Model::ResNet50, 2, Precision::Fp32).unwrap();
    let run = RunTrace::new(&c, &[2, 3]).unwrap();
    let heap = Checked::new(SystemHeap::new());
    let r = replay_host(&run, &heap, 4096).unwrap();
    assert!(heap.violations().is_empty(), "{:?}", heap.violations());
    assert!(r.peak_live_bytes > 0);
    assert_eq!(
        r.allocations as usize,
        run.events.iter().filter(|e| e.alloc).count()
    );
}
