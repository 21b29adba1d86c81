//! xmalloc-test: producer/consumer, after Lever & Boreham's `xmalloc-test` ("malloc()
//! Performance in a Multithreaded Linux Environment", USENIX 2000).
//!
//! Each thread allocates batches of [`BATCH`] blocks of random sizes 16-256 B and hands each
//! batch to its neighbour (`i + 1 mod n`) over a bounded queue; before filling a batch it
//! frees a batch its other neighbour handed it. Every block is freed by a thread other than
//! the one that allocated it (with one thread, by the same thread). The batch vectors
//! circulate, so the bookkeeping allocates nothing inside the timed region, and each thread
//! starts with [`DEPTH`] empty ones, so that a hand-over waits only when a thread is that
//! many batches ahead of its neighbour.
//!
//! Parameters: [`BATCH`] = 256 blocks per message, sizes 16-256 B uniform, queues of
//! [`DEPTH`] = 4 messages, `scale.scaled(`[`BATCHES`]`)` batches per thread (2048 at Small).

use alloclab_core::HostAllocator;

use super::common::{self, Block, Ring};
use crate::workloads::{Measurement, Params};

/// Blocks per message.
const BATCH: usize = 256;
/// Batches a thread may be ahead of its neighbour.
const DEPTH: usize = 4;
/// Smallest block.
const MIN_SIZE: usize = 16;
/// Largest block.
const MAX_SIZE: usize = 256;
/// Batches each thread allocates at [`Scale::Small`](crate::workloads::Scale::Small).
const BATCHES: u64 = 2048;

/// Runs xmalloc-test once; see the module documentation.
pub(super) fn run<A: HostAllocator>(alloc: &A, params: &Params) -> Measurement {
    let batches = params.scale.scaled(BATCHES);
    let ring = Ring::<Vec<Block>>::new(params.threads, DEPTH);
    common::run_timed(
        params.threads,
        |i| {
            // Joined first, so that if this thread fails its neighbours see it go.
            let mut ring = ring.join(i);
            ring.restock((0..DEPTH).map(|_| Vec::with_capacity(BATCH)));
            let mut rng = common::rng(params.seed, i);
            let sizes = common::uniform_sizes(4096, &mut rng, MIN_SIZE, MAX_SIZE);
            (ring, sizes)
        },
        |i, (mut ring, mut sizes)| {
            for _ in 0..batches {
                let mut batch = ring.next();
                // SAFETY: every block in flight came from `alloc`.
                unsafe { common::free_all(alloc, &mut batch) };
                batch.extend((0..BATCH).map(|_| Block::new(alloc, sizes.next() as usize, i as u8)));
                ring.pass(batch);
            }
            for mut batch in ring.finish() {
                // SAFETY: as above.
                unsafe { common::free_all(alloc, &mut batch) };
            }
            2 * batches * BATCH as u64
        },
    )
}
