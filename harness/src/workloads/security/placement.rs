//! Where blocks land: placement entropy (`entropy`), reuse of a just-freed block
//! (`reuse`) and where a linear overflow lands (`overflow`). See the
//! [suite documentation](super) for the definitions.

use core::ptr::NonNull;
use std::time::Duration;

use alloclab_core::HostAllocator;
use rand::Rng;
use rand::rngs::SmallRng;

use super::analysis::{self, LiveSet};
use super::child;
use crate::results::Sample;
use crate::workloads::cpu::common;
use crate::workloads::{Params, Scale};

/// Sizes whose placement entropy is measured.
pub const ENTROPY_SIZES: [usize; 8] = [16, 32, 64, 128, 256, 512, 1024, 4096];
/// Independent fresh heaps (forked children) per run at [`Scale::Small`].
pub const ENTROPY_TRIALS: u64 = 256;
/// Live blocks of the steady-state heap.
pub const CHURN_LIVE: usize = 4096;
/// Random free-and-replace steps that bring the heap to its steady state.
pub const CHURN_STEPS: usize = 16 * 1024;
/// Smallest block of the churn.
pub const CHURN_MIN: usize = 16;
/// Largest block of the churn.
pub const CHURN_MAX: usize = 1024;
/// Sizes of the `reuse` and `overflow` workloads.
pub const PROBE_SIZES: [usize; 4] = [16, 64, 256, 1024];
/// Immediate-reuse trials per size at [`Scale::Small`].
pub const REUSE_TRIALS: u64 = 4096;
/// Reuse-distance trials per size at [`Scale::Small`].
pub const DISTANCE_TRIALS: u64 = 128;
/// Same-size allocations after which a freed block counts as not reused.
pub const DISTANCE_CAP: usize = 4096;
/// Overflow lengths, in bytes past the requested end of a block.
pub const OVERFLOW_LENGTHS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Live blocks of each probed size in the `overflow` workload at [`Scale::Small`].
pub const OVERFLOW_BLOCKS: u64 = 1024;
/// How long one entropy trial may take before it counts as hung.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(20);

/// A block the workload owns: address and requested size.
type Live = (NonNull<u8>, usize);

/// Allocates `size` bytes. The pointer goes through `black_box`, here and before every
/// free: the compiler knows `malloc` and `free`, and would otherwise drop an allocation
/// that is only freed (or freed twice) and never used — and with it the measurement.
fn alloc_block<A: HostAllocator>(alloc: &A, size: usize) -> NonNull<u8> {
    let ptr = alloc
        .allocate(common::layout(size))
        .unwrap_or_else(|e| panic!("{e}"));
    core::hint::black_box(ptr)
}

/// # Safety
///
/// `ptr` is a live block of `alloc` of `size` bytes, allocated with `common::layout(size)`.
unsafe fn free_block<A: HostAllocator>(alloc: &A, ptr: NonNull<u8>, size: usize) {
    // SAFETY: the caller's promise.
    unsafe { alloc.deallocate(core::hint::black_box(ptr), common::layout(size)) };
}

/// The requests that bring a heap to its steady state, drawn from the run's seed before
/// the heap is touched, so that every trial and every allocator sees the same ones.
pub struct ChurnPlan {
    fill: Vec<u32>,
    /// (slot to free and refill, new size).
    steps: Vec<(u32, u32)>,
}

impl ChurnPlan {
    /// [`CHURN_LIVE`] sizes and [`CHURN_STEPS`] steps from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut rng = common::rng(seed, 0x5ec);
        let size = |rng: &mut SmallRng| common::log_uniform_size(rng, CHURN_MIN, CHURN_MAX) as u32;
        let fill = (0..CHURN_LIVE).map(|_| size(&mut rng)).collect();
        let steps = (0..CHURN_STEPS)
            .map(|_| (rng.random_range(0..CHURN_LIVE) as u32, size(&mut rng)))
            .collect();
        Self { fill, steps }
    }

    /// Fills [`CHURN_LIVE`] blocks into `live` (which must have room: no other allocation
    /// may interleave with the heap's) and runs the steps; the blocks stay live.
    pub fn run<A: HostAllocator>(&self, alloc: &A, live: &mut Vec<Live>) {
        assert!(live.capacity() - live.len() >= self.fill.len());
        let base = live.len();
        for &size in &self.fill {
            live.push((alloc_block(alloc, size as usize), size as usize));
        }
        for &(slot, size) in &self.steps {
            let block = &mut live[base + slot as usize];
            // SAFETY: every block in `live` is live, from `alloc`, of its recorded size.
            unsafe { free_block(alloc, block.0, block.1) };
            *block = (alloc_block(alloc, size as usize), size as usize);
        }
    }
}

/// Frees every block of `live`.
///
/// # Safety
///
/// Every block of `live` is live, from `alloc`, of its recorded size.
unsafe fn free_all<A: HostAllocator>(alloc: &A, live: &mut Vec<Live>) {
    for (ptr, size) in live.drain(..) {
        // SAFETY: the caller's promise.
        unsafe { free_block(alloc, ptr, size) };
    }
}

fn sample(metric: String, unit: &str, value: f64, lower_is_better: bool) -> Sample {
    Sample {
        metric,
        unit: unit.to_owned(),
        value,
        lower_is_better,
    }
}

/// Independent trials (forked fresh heaps) of the `entropy` workload at `scale`: 256 at
/// Small, 1024 at Medium, never fewer than 16 (Tiny).
pub fn entropy_trials(scale: Scale) -> usize {
    scale.scaled(ENTROPY_TRIALS).max(16) as usize
}

/// One trial of the entropy history on a heap nobody has used: `b − a` of two consecutive
/// allocations of each size, fresh then after the churn (`2 × ENTROPY_SIZES.len()`
/// deltas).
fn entropy_history<A: HostAllocator>(alloc: &A, plan: &ChurnPlan, out: &mut Vec<i64>) {
    let mut live: Vec<Live> = Vec::with_capacity(CHURN_LIVE + 4 * ENTROPY_SIZES.len());
    let probe = |live: &mut Vec<Live>, out: &mut Vec<i64>| {
        for size in ENTROPY_SIZES {
            let a = alloc_block(alloc, size);
            let b = alloc_block(alloc, size);
            out.push((b.as_ptr() as i64).wrapping_sub(a.as_ptr() as i64));
            live.push((a, size));
            live.push((b, size));
        }
    };
    probe(&mut live, out);
    plan.run(alloc, &mut live);
    probe(&mut live, out);
}

/// The `entropy` workload: `T` forked children replay one seeded history on a fresh heap
/// each; the samples are the collision and Shannon entropy of each probe over the trials.
///
/// # Panics
///
/// If the process has more than one thread, or a trial fails.
pub fn entropy<A: HostAllocator>(alloc: &A, params: &Params) -> Vec<Sample> {
    child::ensure_single_threaded("entropy");
    let trials = entropy_trials(params.scale);
    let plan = ChurnPlan::new(params.seed);
    let probes = 2 * ENTROPY_SIZES.len();
    // Everything the parent keeps is allocated before the first fork (`vec![v; n]` would
    // clone away the capacity): with `system`, the parent's own heap is the children's, and
    // it must be in the same state at every fork.
    let mut deltas: Vec<Vec<i64>> = (0..probes).map(|_| Vec::with_capacity(trials)).collect();
    let mut out: Vec<i64> = Vec::with_capacity(probes);
    for trial in 0..trials {
        // SAFETY: single-threaded (checked above); the child writes only to its pipe.
        let ended = unsafe {
            child::run_child(TRIAL_TIMEOUT, false, |pipe| {
                out.clear();
                entropy_history(alloc, &plan, &mut out);
                let bytes: Vec<u8> = out.iter().flat_map(|d| d.to_le_bytes()).collect();
                pipe.write_all(&bytes).expect("the parent reads the pipe");
            })
        }
        .unwrap_or_else(|e| panic!("entropy trial {trial}: cannot fork: {e}"));
        assert!(
            ended.succeeded() && ended.data.len() == probes * 8,
            "entropy trial {trial} failed: {}, {} bytes",
            ended.describe(TRIAL_TIMEOUT),
            ended.data.len()
        );
        for (column, chunk) in deltas.iter_mut().zip(ended.data.chunks_exact(8)) {
            column.push(i64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
    }
    // Collision entropy of every probe first, then Shannon: the order of the report.
    let mut samples = Vec::new();
    let mut ceiling = 0.0;
    for shannon in [false, true] {
        for (phase, columns) in [
            ("fresh", &deltas[..ENTROPY_SIZES.len()]),
            ("steady", &deltas[ENTROPY_SIZES.len()..]),
        ] {
            for (size, column) in ENTROPY_SIZES.iter().zip(columns) {
                let e = analysis::entropy(column);
                ceiling = e.ceiling;
                let (name, bits) = if shannon {
                    ("shannon", e.shannon)
                } else {
                    ("entropy", e.collision)
                };
                samples.push(sample(
                    format!("{name}_{phase}_{size}"),
                    "bits",
                    bits,
                    false,
                ));
            }
        }
    }
    samples.push(sample("entropy_ceiling".to_owned(), "bits", ceiling, false));
    samples
}

/// What the `reuse` workload measured for one size.
#[derive(Clone, Debug, PartialEq)]
pub struct Reuse {
    /// Block size.
    pub size: usize,
    /// Share of trials where the allocation right after a free returned the freed block.
    pub same: f64,
    /// Share where it overlapped the freed block's bytes.
    pub overlap: f64,
    /// Per distance trial: the same-size allocations (kept live) until one overlapped the
    /// freed block, `None` if none did within [`DISTANCE_CAP`].
    pub distances: Vec<Option<usize>>,
}

/// Measures reuse of just-freed blocks on a steady-state heap; see the
/// [suite documentation](super).
///
/// # Panics
///
/// If the allocator fails an allocation.
pub fn measure_reuse<A: HostAllocator>(alloc: &A, params: &Params) -> Vec<Reuse> {
    let plan = ChurnPlan::new(params.seed);
    let mut live: Vec<Live> = Vec::with_capacity(CHURN_LIVE);
    plan.run(alloc, &mut live);
    let trials = params.scale.scaled(REUSE_TRIALS) as usize;
    let distance_trials = params.scale.scaled(DISTANCE_TRIALS) as usize;
    // Between trials, two churn steps move the heap on (the same ones for every allocator).
    let mut rng = common::rng(params.seed, 0x7e5e);
    let step = |live: &mut Vec<Live>, rng: &mut SmallRng| {
        for _ in 0..2 {
            let slot = rng.random_range(0..live.len());
            let size = common::log_uniform_size(rng, CHURN_MIN, CHURN_MAX);
            // SAFETY: every block in `live` is live, from `alloc`, of its recorded size.
            unsafe { free_block(alloc, live[slot].0, live[slot].1) };
            live[slot] = (alloc_block(alloc, size), size);
        }
    };
    let mut kept: Vec<NonNull<u8>> = Vec::with_capacity(DISTANCE_CAP);
    let mut results = Vec::with_capacity(PROBE_SIZES.len());
    for size in PROBE_SIZES {
        let (mut same, mut overlap) = (0usize, 0usize);
        for _ in 0..trials {
            let p = alloc_block(alloc, size);
            // SAFETY: `p` was just allocated with this size.
            unsafe { free_block(alloc, p, size) };
            let q = alloc_block(alloc, size);
            same += usize::from(q == p);
            overlap += usize::from(analysis::overlaps(
                q.as_ptr() as usize,
                size,
                p.as_ptr() as usize,
                size,
            ));
            // SAFETY: `q` was just allocated with this size.
            unsafe { free_block(alloc, q, size) };
            step(&mut live, &mut rng);
        }
        let mut distances = Vec::with_capacity(distance_trials);
        for _ in 0..distance_trials {
            let p = alloc_block(alloc, size);
            // SAFETY: `p` was just allocated with this size.
            unsafe { free_block(alloc, p, size) };
            let mut found = None;
            for n in 1..=DISTANCE_CAP {
                let q = alloc_block(alloc, size);
                kept.push(q);
                let (p, q) = (p.as_ptr() as usize, q.as_ptr() as usize);
                if analysis::overlaps(q, size, p, size) {
                    found = Some(n);
                    break;
                }
            }
            distances.push(found);
            for q in kept.drain(..) {
                // SAFETY: every kept block is live, allocated above with this size.
                unsafe { free_block(alloc, q, size) };
            }
            step(&mut live, &mut rng);
        }
        results.push(Reuse {
            size,
            same: same as f64 / trials as f64,
            overlap: overlap as f64 / trials as f64,
            distances,
        });
    }
    // SAFETY: every block of `live` is live, from `alloc`, of its recorded size.
    unsafe { free_all(alloc, &mut live) };
    results
}

impl Reuse {
    /// The samples of this size: `reuse_same_S`, `reuse_overlap_S` (probabilities, lower is
    /// better), `distance_median_S`, `distance_p90_S` (allocations; a trial not reused
    /// within the cap counts as cap + 1) and `distance_never_S` (share of trials not reused
    /// within the cap), the last three higher-is-better.
    pub fn samples(&self) -> Vec<Sample> {
        let s = self.size;
        let censored: Vec<u64> = self
            .distances
            .iter()
            .map(|d| d.unwrap_or(DISTANCE_CAP + 1) as u64)
            .collect();
        let never = self.distances.iter().filter(|d| d.is_none()).count() as f64
            / self.distances.len().max(1) as f64;
        let q = |q| analysis::quantile(&censored, q).unwrap_or(0) as f64;
        vec![
            sample(format!("reuse_same_{s}"), "p", self.same, true),
            sample(format!("reuse_overlap_{s}"), "p", self.overlap, true),
            sample(format!("distance_median_{s}"), "allocs", q(0.5), false),
            sample(format!("distance_p90_{s}"), "allocs", q(0.9), false),
            sample(format!("distance_never_{s}"), "p", never, false),
        ]
    }
}

/// The `reuse` workload's samples.
pub fn reuse<A: HostAllocator>(alloc: &A, params: &Params) -> Vec<Sample> {
    measure_reuse(alloc, params)
        .iter()
        .flat_map(Reuse::samples)
        .collect()
}

/// Measures, on a steady-state heap with [`OVERFLOW_BLOCKS`] (scaled) extra live blocks of
/// each of [`PROBE_SIZES`], the share of those blocks where an overflow of each of
/// [`OVERFLOW_LENGTHS`] bytes lands in another live block: `(size, k, share)`.
///
/// # Panics
///
/// If the allocator fails an allocation or hands out overlapping blocks.
pub fn measure_overflow<A: HostAllocator>(alloc: &A, params: &Params) -> Vec<(usize, usize, f64)> {
    let plan = ChurnPlan::new(params.seed);
    let per_size = params.scale.scaled(OVERFLOW_BLOCKS) as usize;
    let mut live: Vec<Live> = Vec::with_capacity(CHURN_LIVE + per_size * PROBE_SIZES.len());
    plan.run(alloc, &mut live);
    let first_probe = live.len();
    for size in PROBE_SIZES {
        for _ in 0..per_size {
            live.push((alloc_block(alloc, size), size));
        }
    }
    let set = LiveSet::new(
        live.iter()
            .map(|&(p, size)| (p.as_ptr() as usize, size))
            .collect(),
    )
    .expect("the allocator handed out overlapping live blocks");
    let mut out = Vec::new();
    for (i, size) in PROBE_SIZES.into_iter().enumerate() {
        let start = first_probe + i * per_size;
        let probes: Vec<usize> = live[start..start + per_size]
            .iter()
            .map(|&(p, _)| p.as_ptr() as usize)
            .collect();
        for k in OVERFLOW_LENGTHS {
            out.push((size, k, set.overflow_hit_rate(&probes, k)));
        }
    }
    // SAFETY: every block of `live` is live, from `alloc`, of its recorded size.
    unsafe { free_all(alloc, &mut live) };
    out
}

/// The `overflow` workload's samples: `overflow_SB_kK` for size `S` and an overflow of `K` bytes
/// (probability, lower is better).
pub fn overflow<A: HostAllocator>(alloc: &A, params: &Params) -> Vec<Sample> {
    measure_overflow(alloc, params)
        .into_iter()
        .map(|(size, k, p)| sample(format!("overflow_{size}B_k{k}"), "p", p, true))
        .collect()
}
