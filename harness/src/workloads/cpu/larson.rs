//! larson: a server simulation, after Larson & Krishnan, "Memory allocation for long-running
//! server applications" (ISMM 1998).
//!
//! Each thread owns [`ARRAYS`] arrays of [`SLOTS`] blocks of random sizes 16-1000 B. A round
//! takes one array and runs [`STEPS_PER_ROUND`] steps on it: pick a random slot, free its
//! block, allocate a new one of a random size. After the round the thread hands the array to
//! the next thread (`i + 1 mod n`), as Larson's threads hand their blocks to the thread that
//! replaces them, and its next round works on an array its predecessor handed it: most frees
//! are of blocks another thread allocated. (Two arrays per thread let a thread start its next
//! round while its predecessor is still finishing one, so the hand-over is a queue operation,
//! not a sleep.)
//!
//! Parameters: [`ARRAYS`] = 2 arrays of [`SLOTS`] = 500 blocks per thread (1000 live blocks per
//! thread), sizes 16-1000 B uniform, [`STEPS_PER_ROUND`] = 1000, `scale.scaled(`[`ROUNDS`]`)`
//! rounds per thread (512 at Small). The initial fill is untimed and uncounted; the final free of
//! every array is timed and counted.

use alloclab_core::HostAllocator;
use rand::Rng as _;

use super::common::{self, Block, Ring};
use crate::workloads::{Measurement, Params};

/// Arrays each thread starts with.
const ARRAYS: usize = 2;
/// Blocks per array.
const SLOTS: usize = 500;
/// Smallest block.
const MIN_SIZE: usize = 16;
/// Largest block.
const MAX_SIZE: usize = 1000;
/// Steps (a free and an allocation) on an array before it is handed on.
const STEPS_PER_ROUND: u64 = 1000;
/// Rounds per thread at [`Scale::Small`](crate::workloads::Scale::Small).
const ROUNDS: u64 = 512;

/// An array of blocks; a slot is `None` only between a step's free and its allocation.
type Slots = Vec<Option<Block>>;

/// Runs larson once; see the module documentation.
pub(super) fn run<A: HostAllocator>(alloc: &A, params: &Params) -> Measurement {
    let rounds = params.scale.scaled(ROUNDS);
    let ring = Ring::<Slots>::new(params.threads, ARRAYS);
    common::run_timed(
        params.threads,
        |i| {
            // Joined first, so that if this thread fails its neighbours see it go.
            let mut ring = ring.join(i);
            let mut rng = common::rng(params.seed, i);
            let arrays: Vec<Slots> = (0..ARRAYS)
                .map(|_| {
                    (0..SLOTS)
                        .map(|_| {
                            let size = rng.random_range(MIN_SIZE..=MAX_SIZE);
                            Some(Block::new(alloc, size, i as u8))
                        })
                        .collect()
                })
                .collect();
            ring.restock(arrays);
            // Coprime lengths: the (slot, size) sequence does not repeat within a run.
            let picks = common::indices(4095, &mut rng, SLOTS);
            let sizes = common::uniform_sizes(4096, &mut rng, MIN_SIZE, MAX_SIZE);
            (ring, picks, sizes)
        },
        |i, (mut ring, mut picks, mut sizes)| {
            let mut ops = 0;
            for _ in 0..rounds {
                let mut slots = ring.next();
                for _ in 0..STEPS_PER_ROUND {
                    let slot = &mut slots[picks.next() as usize];
                    if let Some(old) = slot.take() {
                        // SAFETY: every block in an array came from `alloc`.
                        unsafe { old.free(alloc) };
                    }
                    *slot = Some(Block::new(alloc, sizes.next() as usize, i as u8));
                }
                ops += 2 * STEPS_PER_ROUND;
                ring.pass(slots);
            }
            for block in ring.finish().flatten().flatten() {
                // SAFETY: as above.
                unsafe { block.free(alloc) };
                ops += 1;
            }
            ops
        },
    )
}
