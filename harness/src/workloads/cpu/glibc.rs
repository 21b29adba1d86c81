//! glibc-simple and glibc-thread: after glibc's `benchtests/bench-malloc-simple.c` and
//! `benchtests/bench-malloc-thread.c`.
//!
//! * **glibc-simple**: one thread, whatever `params.threads` says. For each size of
//!   [`SIMPLE_SIZES`] (16-256 B) and each batch length of [`SIMPLE_BATCHES`] (25, 100, 400, 1600),
//!   repeatedly allocate a batch of blocks of that size, then free them in allocation order;
//!   `scale.scaled(`[`SIMPLE_ALLOCATIONS`]`)` allocations (100 000 at Small) per (size, batch)
//!   pair. This is the fast path: thread caches and bins of one size class.
//! * **glibc-thread**: every thread keeps a private working set of [`WORKING_SET`] slots; a
//!   step picks a random slot, frees its block (if any) and allocates a new one of a random
//!   size, 16 B-4 KiB log-uniform (half of them 256 B or less). Nothing is shared between
//!   threads. `scale.scaled(`[`THREAD_STEPS`]`)` steps per thread (2^19 at Small); the
//!   working set starts empty and is freed at the end (timed).

use core::ptr::NonNull;

use alloclab_core::HostAllocator;

use super::common::{self, Block, Table};
use crate::workloads::{Measurement, Params};

/// Block sizes glibc-simple runs through.
const SIMPLE_SIZES: [usize; 5] = [16, 32, 64, 128, 256];
/// Batch lengths glibc-simple runs through.
const SIMPLE_BATCHES: [usize; 4] = [25, 100, 400, 1600];
/// Allocations per (size, batch length) at [`Scale::Small`](crate::workloads::Scale::Small).
const SIMPLE_ALLOCATIONS: u64 = 100_000;

/// Slots of each thread's working set in glibc-thread.
const WORKING_SET: usize = 4096;
/// Smallest block of glibc-thread.
const THREAD_MIN_SIZE: usize = 16;
/// Largest block of glibc-thread.
const THREAD_MAX_SIZE: usize = 4096;
/// Steps each thread takes at [`Scale::Small`](crate::workloads::Scale::Small).
const THREAD_STEPS: u64 = 1 << 19;

/// Runs glibc-simple once; see the module documentation.
pub(super) fn run_simple<A: HostAllocator>(alloc: &A, params: &Params) -> Measurement {
    let allocations = params.scale.scaled(SIMPLE_ALLOCATIONS);
    common::run_timed(
        1,
        |_| Vec::<NonNull<u8>>::with_capacity(SIMPLE_BATCHES[SIMPLE_BATCHES.len() - 1]),
        |_, mut batch| {
            let mut ops = 0;
            for size in SIMPLE_SIZES {
                let layout = common::layout(size);
                for len in SIMPLE_BATCHES {
                    let rounds = (allocations / len as u64).max(1);
                    for _ in 0..rounds {
                        batch.extend((0..len).map(|_| common::allocate(alloc, size, size as u8)));
                        for ptr in batch.drain(..) {
                            // SAFETY: allocated from `alloc` with this layout just above.
                            unsafe { alloc.deallocate(ptr, layout) };
                        }
                    }
                    ops += 2 * rounds * len as u64;
                }
            }
            ops
        },
    )
}

/// Runs glibc-thread once; see the module documentation.
pub(super) fn run_thread<A: HostAllocator>(alloc: &A, params: &Params) -> Measurement {
    let steps = params.scale.scaled(THREAD_STEPS);
    common::run_timed(
        params.threads,
        |i| {
            let mut rng = common::rng(params.seed, i);
            // Coprime lengths: the (slot, size) sequence does not repeat within a run.
            let picks = common::indices(8191, &mut rng, WORKING_SET);
            let sizes: Table<u32> = Table::new(8192, &mut rng, |r| {
                common::log_uniform_size(r, THREAD_MIN_SIZE, THREAD_MAX_SIZE) as u32
            });
            let slots: Vec<Option<Block>> = (0..WORKING_SET).map(|_| None).collect();
            (picks, sizes, slots)
        },
        |i, (mut picks, mut sizes, mut slots)| {
            let mut ops = 0;
            for _ in 0..steps {
                let slot = &mut slots[picks.next() as usize];
                if let Some(old) = slot.take() {
                    // SAFETY: every block in the working set came from `alloc`.
                    unsafe { old.free(alloc) };
                    ops += 1;
                }
                *slot = Some(Block::new(alloc, sizes.next() as usize, i as u8));
                ops += 1;
            }
            for block in slots.into_iter().flatten() {
                // SAFETY: as above.
                unsafe { block.free(alloc) };
                ops += 1;
            }
            ops
        },
    )
}
