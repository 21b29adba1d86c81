//! Replaying a [`RunTrace`] on the caching-allocator model or on any
//! [`alloclab_core::Allocator`].

use core::alloc::Layout;
use std::collections::HashMap;

use alloclab_core::Allocator;

use crate::TrainingError;
use crate::caching::{CachingAllocator, CachingConfig, CachingStats};
use crate::trace::RunTrace;

/// What one iteration did on the caching model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IterationStats {
    /// Batch size of the iteration.
    pub batch: u32,
    /// Counters over the iteration (peaks are within the iteration).
    pub stats: CachingStats,
    /// Reserved bytes at the end of the iteration.
    pub reserved_at_end: u64,
}

impl IterationStats {
    /// Reserved / allocated at the iteration's peaks: 1.0 is no fragmentation.
    pub fn fragmentation(&self) -> f64 {
        self.stats.peak_reserved_bytes as f64 / self.stats.peak_allocated_bytes.max(1) as f64
    }
}

/// The result of replaying a run on the caching model.
#[derive(Clone, Debug, PartialEq)]
pub struct CachingReplay {
    /// One entry per iteration.
    pub iterations: Vec<IterationStats>,
    /// Counters over the whole run (peaks since the start).
    pub total: CachingStats,
    /// The most bytes live at once before rounding (what an exact allocator would need).
    pub peak_requested_bytes: u64,
}

/// Replays `run` on a fresh [`CachingAllocator`] with `config`, checking the model's
/// invariants every `check_every` events (0: never).
///
/// # Errors
///
/// [`TrainingError::OutOfMemory`] if the device fills up.
pub fn replay_caching(
    run: &RunTrace,
    config: CachingConfig,
    check_every: usize,
) -> Result<CachingReplay, TrainingError> {
    let mut heap = CachingAllocator::new(config);
    let mut addrs: HashMap<u64, u64> = HashMap::new();
    let mut iterations = Vec::with_capacity(run.iterations.len());
    let mut peak_requested = 0;
    let mut total = CachingStats::default();
    let mut apply = |heap: &mut CachingAllocator, i: usize| -> Result<(), TrainingError> {
        let e = run.events[i];
        if e.alloc {
            let addr = heap.malloc(e.size_bytes)?;
            addrs.insert(e.id, addr);
            peak_requested = peak_requested.max(heap.stats().requested_bytes);
        } else {
            let addr = addrs
                .remove(&e.id)
                .expect("trace frees a tensor it never allocated");
            heap.free(addr);
        }
        if check_every > 0 && i.is_multiple_of(check_every) {
            heap.check_invariants()
                .expect("caching-allocator invariant");
        }
        Ok(())
    };
    let first = run.iterations.first().map_or(run.events.len(), |r| r.start);
    for i in 0..first {
        apply(&mut heap, i)?;
    }
    for (k, range) in run.iterations.iter().enumerate() {
        heap.reset_counters();
        for i in range.clone() {
            apply(&mut heap, i)?;
        }
        let s = heap.stats();
        accumulate(&mut total, &s);
        iterations.push(IterationStats {
            batch: run.batches[k],
            stats: s,
            reserved_at_end: s.reserved_bytes,
        });
    }
    let last = run.iterations.last().map_or(first, |r| r.end);
    for i in last..run.events.len() {
        apply(&mut heap, i)?;
    }
    if check_every > 0 {
        heap.check_invariants()
            .expect("caching-allocator invariant");
    }
    total.allocated_bytes = heap.stats().allocated_bytes;
    total.reserved_bytes = heap.stats().reserved_bytes;
    Ok(CachingReplay {
        iterations,
        total,
        peak_requested_bytes: peak_requested,
    })
}

fn accumulate(total: &mut CachingStats, s: &CachingStats) {
    total.peak_allocated_bytes = total.peak_allocated_bytes.max(s.peak_allocated_bytes);
    total.peak_reserved_bytes = total.peak_reserved_bytes.max(s.peak_reserved_bytes);
    total.alloc_calls += s.alloc_calls;
    total.free_calls += s.free_calls;
    total.segment_allocs += s.segment_allocs;
    total.segment_frees += s.segment_frees;
    total.cache_flushes += s.cache_flushes;
    total.splits += s.splits;
}

/// The result of replaying a run on a host heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostReplay {
    /// The most bytes live at once, as requested (after scaling).
    pub peak_live_bytes: u64,
    /// The heap's peak footprint, where it reports one.
    pub peak_footprint_bytes: Option<u64>,
    /// Allocations made.
    pub allocations: u64,
}

/// Replays `run` on a host heap with every size divided by `scale` (at least 1 byte), so
/// that a trace of tens of gigabytes fits in a host's memory; blocks are 64-byte aligned.
///
/// # Errors
///
/// The heap's [`alloclab_core::AllocError`] if an allocation fails; blocks allocated so far
/// are freed first.
pub fn replay_host<A: Allocator>(
    run: &RunTrace,
    heap: &A,
    scale: u64,
) -> Result<HostReplay, alloclab_core::AllocError> {
    replay_aligned(run, heap, scale, 64)
}

/// [`replay_host`] with blocks aligned to `align` bytes (a power of two): for allocators
/// that serve smaller alignments only, such as the on-chip model's 4-byte words.
///
/// # Errors
///
/// As [`replay_host`]; an `align` the allocator does not support fails the first
/// allocation.
///
/// # Panics
///
/// If `align` is not a power of two.
pub fn replay_aligned<A: Allocator>(
    run: &RunTrace,
    heap: &A,
    scale: u64,
    align: usize,
) -> Result<HostReplay, alloclab_core::AllocError> {
    assert!(
        align.is_power_of_two(),
        "alignment {align} is not a power of two"
    );
    let scale = scale.max(1);
    let mut live: HashMap<u64, (A::Handle, Layout)> = HashMap::new();
    let mut bytes = 0u64;
    let mut peak = 0u64;
    let mut allocations = 0;
    let mut result = Ok(());
    for e in &run.events {
        let size = (e.size_bytes / scale).max(1);
        if e.alloc {
            let layout =
                Layout::from_size_align(size as usize, align).expect("scaled size fits a layout");
            match heap.allocate(layout) {
                Ok(h) => {
                    live.insert(e.id, (h, layout));
                    bytes += size;
                    peak = peak.max(bytes);
                    allocations += 1;
                }
                Err(err) => {
                    result = Err(err);
                    break;
                }
            }
        } else if let Some((h, layout)) = live.remove(&e.id) {
            // SAFETY: `h` came from `heap.allocate(layout)` above and was removed from `live`,
            // so it is live and freed exactly once.
            unsafe { heap.deallocate(h, layout) };
            bytes -= size;
        }
    }
    for (_, (h, layout)) in live.drain() {
        // SAFETY: as above: every handle left in `live` is live and freed once here.
        unsafe { heap.deallocate(h, layout) };
    }
    result?;
    Ok(HostReplay {
        peak_live_bytes: peak,
        peak_footprint_bytes: heap.stats().peak_footprint_bytes,
        allocations,
    })
}
