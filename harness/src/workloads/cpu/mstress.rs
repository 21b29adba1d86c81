//! mstress: mixed sizes, long-lived blocks and blocks swapped between threads, after
//! mimalloc's `test/test-stress.c` (Leijen et al.).
//!
//! Each thread runs rounds of [`STEPS_PER_ROUND`] steps. A step allocates a block (99 in 100
//! of 16 B-1 KiB, 1 in 100 of 1 KiB-256 KiB, both log-uniform); one block in 4 goes to the
//! thread's *retained* set of at most [`RETAINED`] long-lived blocks (replacing, and freeing,
//! a random one once the set is full) and lives across rounds, the others to the round's
//! *data* set. Then, as in test-stress, with probability 66/100 a random data block is
//! freed, and with probability 1/4 a random data block is swapped into a random slot of a
//! shared array of [`TRANSFERS`] atomic pointers, and whatever was there (another thread's
//! block, usually) takes its place, to be freed by this thread (or swapped on again). The
//! data set is freed at the end of each round, the retained set at the end of the run, and
//! the blocks still in the transfer array by the main thread afterwards (counted, not timed:
//! at most [`TRANSFERS`] frees).
//!
//! Parameters: [`STEPS_PER_ROUND`] = 1000, [`RETAINED`] = 1000, [`TRANSFERS`] = 1024,
//! `scale.scaled(`[`ROUNDS`]`)` rounds per thread (512 at Small). Each block carries its size in
//! its first 8 bytes, so a block taken from the transfer array can be freed with its layout.

use core::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};

use alloclab_core::HostAllocator;
use rand::Rng as _;

use super::common::{self, Block, Table};
use crate::workloads::{Measurement, Params};

/// Allocations per round.
const STEPS_PER_ROUND: usize = 1000;
/// Most long-lived blocks a thread keeps.
const RETAINED: usize = 1000;
/// Slots of the shared transfer array.
const TRANSFERS: usize = 1024;
/// Rounds each thread runs at [`Scale::Small`](crate::workloads::Scale::Small).
const ROUNDS: u64 = 512;
/// Smallest block (room for the size header).
const MIN_SIZE: usize = 16;
/// Largest small block.
const SMALL_MAX: usize = 1024;
/// Largest block.
const LARGE_MAX: usize = 256 * 1024;

/// Allocates a block whose first 8 bytes hold its size.
#[inline]
fn new_block<A: HostAllocator>(alloc: &A, size: usize, tag: u8) -> Block {
    let block = Block::new(alloc, size, tag);
    // SAFETY: the block is live, at least 16 bytes and aligned to a word (`common::ALIGN`).
    unsafe { block.ptr().cast::<usize>().write(size) };
    block
}

/// Takes back a block from the transfer array.
///
/// # Safety
///
/// `ptr` was put into the transfer array by [`into_transfer`] and taken out by the caller
/// alone (an atomic swap that returned it), with acquire ordering.
#[inline]
unsafe fn from_transfer(ptr: NonNull<u8>) -> Block {
    // SAFETY: the block is live and its first 8 bytes hold its size, written before the
    // release swap that published it (caller's promise: we acquired it).
    unsafe {
        let size = ptr.cast::<usize>().read();
        Block::from_raw(ptr, size)
    }
}

/// Gives a block to the transfer array (its size is in its header).
#[inline]
fn into_transfer(block: Block) -> *mut u8 {
    block.into_raw().0.as_ptr()
}

/// Runs mstress once; see the [module documentation](self).
pub(super) fn run<A: HostAllocator>(alloc: &A, params: &Params) -> Measurement {
    let rounds = params.scale.scaled(ROUNDS);
    let transfer: Vec<AtomicPtr<u8>> = (0..TRANSFERS)
        .map(|_| AtomicPtr::new(ptr::null_mut()))
        .collect();
    let mut m = common::run_timed(
        params.threads,
        |i| {
            let mut rng = common::rng(params.seed, i);
            let sizes: Table<u32> = Table::new(4096, &mut rng, |r| {
                let size = if r.random_ratio(1, 100) {
                    common::log_uniform_size(r, SMALL_MAX, LARGE_MAX)
                } else {
                    common::log_uniform_size(r, MIN_SIZE, SMALL_MAX)
                };
                size as u32
            });
            // Odd length, coprime with the size table's.
            let words: Table<u32> = Table::new(4093, &mut rng, |r| r.random());
            let data: Vec<Block> = Vec::with_capacity(STEPS_PER_ROUND);
            let retained: Vec<Block> = Vec::with_capacity(RETAINED);
            (sizes, words, data, retained)
        },
        |i, (mut sizes, mut words, mut data, mut retained)| {
            let tag = i as u8;
            let mut ops = 0;
            for _ in 0..rounds {
                for _ in 0..STEPS_PER_ROUND {
                    let block = new_block(alloc, sizes.next() as usize, tag);
                    ops += 1;
                    if words.next() % 4 == 0 {
                        if retained.len() < RETAINED {
                            retained.push(block);
                        } else {
                            let old = core::mem::replace(
                                &mut retained[common::pick(words.next(), RETAINED)],
                                block,
                            );
                            // SAFETY: every block this thread holds came from `alloc`.
                            unsafe { old.free(alloc) };
                            ops += 1;
                        }
                    } else {
                        data.push(block);
                    }
                    if words.next() % 100 < 66 && !data.is_empty() {
                        let victim = data.swap_remove(common::pick(words.next(), data.len()));
                        // SAFETY: as above.
                        unsafe { victim.free(alloc) };
                        ops += 1;
                    }
                    if words.next() % 4 == 0 && !data.is_empty() {
                        let at = common::pick(words.next(), data.len());
                        let slot = &transfer[common::pick(words.next(), TRANSFERS)];
                        let given = data.swap_remove(at);
                        // AcqRel: release publishes our block's header to whoever takes it,
                        // acquire sees the header of the block we take.
                        let taken = slot.swap(into_transfer(given), Ordering::AcqRel);
                        if let Some(taken) = NonNull::new(taken) {
                            // SAFETY: the swap gave us sole ownership of a block that
                            // `into_transfer` published, and acquired it.
                            data.push(unsafe { from_transfer(taken) });
                        }
                    }
                }
                // SAFETY: as above.
                ops += unsafe { common::free_all(alloc, &mut data) };
            }
            // SAFETY: as above.
            ops += unsafe { common::free_all(alloc, &mut retained) };
            ops
        },
    );
    for slot in &transfer {
        if let Some(left) = NonNull::new(slot.swap(ptr::null_mut(), Ordering::Acquire)) {
            // SAFETY: the team is done, so this thread owns what is left in the array; it
            // came from `into_transfer`, and the threads' joins order their writes before
            // this read.
            unsafe { from_transfer(left).free(alloc) };
            m.operations += 1;
        }
    }
    m
}
