//! rptest: random sizes with cross-thread frees, in the style of rpmalloc's
//! `rpmalloc-benchmark` (Mattias Jansson).
//!
//! Each thread repeatedly allocates a batch of [`BATCH`] blocks of random sizes 16 B-16 KiB
//! (log-uniform: half of them 512 B or less), frees every other block itself, hands the
//! other half to the next thread (`i + 1 mod n`) and frees a half its predecessor handed
//! it. Half of all frees are remote. The half-batch vectors circulate, so the bookkeeping
//! allocates nothing inside the timed region, and each thread starts with [`DEPTH`] empty
//! ones, so that a hand-over waits only when a thread is that many batches ahead.
//!
//! Parameters: [`BATCH`] = 256 blocks, sizes 16 B-16 KiB log-uniform, queues of [`DEPTH`] = 4
//! half-batches, `scale.scaled(`[`BATCHES`]`)` batches per thread (1024 at Small).

use alloclab_core::HostAllocator;

use super::common::{self, Block, Ring, Table};
use crate::workloads::{Measurement, Params};

/// Blocks per batch (half kept, half handed on).
const BATCH: usize = 256;
/// Half-batches a thread may be ahead of its neighbour.
const DEPTH: usize = 4;
/// Smallest block.
const MIN_SIZE: usize = 16;
/// Largest block.
const MAX_SIZE: usize = 16 * 1024;
/// Batches each thread allocates at [`Scale::Small`](crate::workloads::Scale::Small).
const BATCHES: u64 = 1024;

/// Runs rptest once; see the module documentation.
pub(super) fn run<A: HostAllocator>(alloc: &A, params: &Params) -> Measurement {
    let batches = params.scale.scaled(BATCHES);
    let ring = Ring::<Vec<Block>>::new(params.threads, DEPTH);
    common::run_timed(
        params.threads,
        |i| {
            // Joined first, so that if this thread fails its neighbours see it go.
            let mut ring = ring.join(i);
            ring.restock((0..DEPTH).map(|_| Vec::with_capacity(BATCH / 2)));
            let mut rng = common::rng(params.seed, i);
            let sizes: Table<u32> = Table::new(4096, &mut rng, |r| {
                common::log_uniform_size(r, MIN_SIZE, MAX_SIZE) as u32
            });
            (ring, sizes, Vec::with_capacity(BATCH / 2))
        },
        |i, (mut ring, mut sizes, mut kept)| {
            for _ in 0..batches {
                let mut handed = ring.next();
                // SAFETY: every block here and in flight came from `alloc`.
                unsafe { common::free_all(alloc, &mut handed) };
                for _ in 0..BATCH / 2 {
                    kept.push(Block::new(alloc, sizes.next() as usize, i as u8));
                    handed.push(Block::new(alloc, sizes.next() as usize, i as u8));
                }
                // SAFETY: as above.
                unsafe { common::free_all(alloc, &mut kept) };
                ring.pass(handed);
            }
            for mut handed in ring.finish() {
                // SAFETY: as above.
                unsafe { common::free_all(alloc, &mut handed) };
            }
            2 * batches * BATCH as u64
        },
    )
}
