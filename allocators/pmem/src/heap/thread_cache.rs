//! Per-thread caches of free blocks: the allocation fast path, with no lock and no locked
//! instruction.
//!
//! # Why no locked instruction
//!
//! A storage engine allocates right after flushing the block it just filled (a column, a
//! node). On x86 a locked read-modify-write (a mutex's `cmpxchg`, an atomic `fetch_or`)
//! waits for the write-backs of earlier `CLWB`/`CLFLUSHOPT`s as a fence does, so a
//! lock on the fast path costs an engine a fence per call (about 200 ns here), not the 20 ns
//! a micro-benchmark shows. So the fast path only loads and stores: it pops from or pushes
//! onto the calling thread's own stack of free offsets for the block's size class, counts
//! with single-writer counters, and marks the block in a byte map, a byte per block (see
//! `live` in the [heap](super)).
//!
//! # Ownership
//!
//! A [`CacheSlot`] belongs to one (thread, heap) pair: the thread reaches it through its
//! thread-local list (keyed by the heap's unique id), the heap through its registry (for
//! the counters, and to take back the blocks of threads that exited). The stacks are the
//! owner's alone while it lives; when the thread exits, its [`Owner`] drops and marks the
//! slot *abandoned* (`Release`), after which the heap may take the stacks (under its
//! registry mutex, after an `Acquire` load of the flag). A thread's slots for heaps that no
//! longer exist (the registry dropped: the thread's `Arc` is the last) are pruned when the
//! thread meets a new heap.
//!
//! A stack over [`CACHE_LIMIT`](super::CACHE_LIMIT) hands half back to the global lists; an
//! empty one refills from them (both under the global mutex, off the fast path). Blocks in
//! the caches of live threads cannot be taken by others: at most `CACHE_LIMIT` blocks per
//! class per live thread are out of other threads' reach when the heap reports out of
//! space.
//!
//! # Loom
//!
//! The slot's cell, counters and abandoned flag come from the loom shim (`crate::sync`);
//! the loom model below drives a [`CacheSlot`] and its [`Owner`] directly (an owner thread
//! filling its stacks and exiting, the heap taking them under its registry mutex, a reader
//! of the counters). [`with_slot`]'s thread-local list is not in the model: loom's threads
//! share the OS thread's `thread_local!`s.

use std::cell::RefCell;

use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering, UnsafeCell, bump_single_writer};

use super::NCLASSES;

/// One thread's free blocks of one heap, per class, and its counters.
pub(super) struct CacheSlot {
    /// The owner's stacks of free block offsets (see the module documentation).
    free: UnsafeCell<[Vec<u64>; NCLASSES]>,
    /// Allocations counted by the owner (single writer: a load and a store, no lock).
    allocations: AtomicU64,
    /// Frees counted by the owner (single writer).
    frees: AtomicU64,
    /// Set (`Release`) when the owner thread exits; its stacks are the heap's then.
    abandoned: AtomicBool,
}

// SAFETY: `free` is reached only by the owner thread while `abandoned` is false, and after
// that only under the heap's registry mutex (see the module documentation); the counters are
// atomics.
unsafe impl Sync for CacheSlot {}
// SAFETY: as above; the offsets are plain integers.
unsafe impl Send for CacheSlot {}

impl CacheSlot {
    pub(super) fn new() -> Self {
        Self {
            free: UnsafeCell::new(Default::default()),
            allocations: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
        }
    }

    /// Adds `n` allocations (owner only).
    #[inline]
    pub(super) fn count_allocations(&self, n: u64) {
        bump_single_writer(&self.allocations, n);
    }

    /// Adds `n` frees (owner only).
    #[inline]
    pub(super) fn count_frees(&self, n: u64) {
        bump_single_writer(&self.frees, n);
    }

    /// (allocations, frees) counted so far.
    pub(super) fn counts(&self) -> (u64, u64) {
        (
            self.allocations.load(Ordering::Relaxed),
            self.frees.load(Ordering::Relaxed),
        )
    }

    /// The owner's stacks.
    ///
    /// # Safety
    ///
    /// The caller is the owner thread and holds no other reference to them.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub(super) unsafe fn stacks(&self) -> &mut [Vec<u64>; NCLASSES] {
        // SAFETY: the caller's contract (the access is recorded, under loom, when it starts).
        self.free.with_mut(|stacks| unsafe { &mut *stacks })
    }

    /// The stacks of an abandoned slot, emptied; `None` while its owner lives.
    ///
    /// # Safety
    ///
    /// The caller holds the heap's registry mutex (one taker at a time).
    pub(super) unsafe fn take_abandoned(&self) -> Option<[Vec<u64>; NCLASSES]> {
        if !self.abandoned.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: the owner is gone (the `Acquire` above pairs with `Owner::drop`), and the
        // registry mutex excludes other takers.
        Some(
            self.free
                .with_mut(|stacks| std::mem::take(unsafe { &mut *stacks })),
        )
    }
}

/// A thread's hold on its slot of one heap.
struct Owner {
    heap_id: u64,
    slot: Arc<CacheSlot>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.slot.abandoned.store(true, Ordering::Release);
    }
}

thread_local! {
    static OWNED: RefCell<Vec<Owner>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with the calling thread's slot of the heap `heap_id`, creating it with
/// `register` (which must also record it in the heap's registry) on first use; `None` when
/// the thread's locals are already destroyed (a thread exiting), where the caller takes its
/// slow path. `f` must not call `with_slot` again.
#[inline]
pub(super) fn with_slot<R>(
    heap_id: u64,
    register: impl FnOnce() -> Arc<CacheSlot>,
    f: impl FnOnce(&CacheSlot) -> R,
) -> Option<R> {
    OWNED
        .try_with(|owned| {
            let mut owned = owned.borrow_mut();
            let i = match owned.iter().position(|o| o.heap_id == heap_id) {
                Some(i) => i,
                None => {
                    // Slots of heaps that are gone (only this thread still holds them).
                    owned.retain(|o| Arc::strong_count(&o.slot) > 1);
                    owned.push(Owner {
                        heap_id,
                        slot: register(),
                    });
                    owned.len() - 1
                }
            };
            f(&owned[i].slot)
        })
        .ok()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The ids of the heaps the calling thread holds a slot of, in its list's order.
    fn owned_ids() -> Vec<u64> {
        OWNED.with(|owned| owned.borrow().iter().map(|o| o.heap_id).collect())
    }

    /// A thread finds its slot of a heap again by the heap's id (registering it once, its
    /// blocks still there); meeting a new heap drops its slots of heaps that are gone (the
    /// registry's `Arc` dropped) and keeps those of live heaps, whose slots stay owned (not
    /// abandoned) until the thread exits.
    #[test]
    fn a_thread_keeps_its_slots_of_live_heaps_and_drops_those_of_heaps_that_are_gone() {
        let registry_a = std::thread::spawn(|| {
            let register = |registry: &mut Option<Arc<CacheSlot>>| {
                let slot = Arc::new(CacheSlot::new());
                *registry = Some(Arc::clone(&slot));
                slot
            };
            let mut registry_a = None;
            let pushed = with_slot(
                1,
                || register(&mut registry_a),
                // SAFETY: this thread owns its slot, and nothing else holds its stacks.
                |slot| unsafe { slot.stacks() }[2].push(4096),
            );
            assert_eq!(pushed, Some(()), "no slot for a thread whose locals live");
            let mut registry_b = None;
            with_slot(2, || register(&mut registry_b), |_| ()).unwrap();
            assert_eq!(owned_ids(), [1, 2]);
            // Heap 2 is dropped (its registry with it); heap 1 lives.
            drop(registry_b);
            let mut registry_c = None;
            with_slot(3, || register(&mut registry_c), |_| ()).unwrap();
            assert_eq!(owned_ids(), [1, 3], "the slots kept on meeting a new heap");
            let again = with_slot(
                1,
                || panic!("heap 1's slot registered twice"),
                // SAFETY: as above.
                |slot| unsafe { slot.stacks() }[2].pop(),
            );
            assert_eq!(
                again,
                Some(Some(4096)),
                "heap 1's block left the thread's slot"
            );
            let registry_a = registry_a.unwrap();
            assert!(!registry_a.abandoned.load(Ordering::Acquire));
            registry_a
        })
        .join()
        .unwrap();
        assert!(
            registry_a.abandoned.load(Ordering::Acquire),
            "a slot whose owner exited is not abandoned"
        );
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::Mutex;
    use alloclab_core::sync::{model, thread};

    /// The hand-off of an exiting thread's blocks: the heap (under its registry mutex) sees
    /// either nothing (the owner still lives) or every block the owner pushed, never a
    /// stack in the middle of a push; the counters a reader sees are whole and never
    /// above what the owner counted.
    #[test]
    fn loom_an_abandoned_slot_hands_over_every_block_and_only_after_its_owner_exits() {
        model(|| {
            let registry = Arc::new(Mutex::new(()));
            let slot = Arc::new(CacheSlot::new());
            let owner = Owner {
                heap_id: 1,
                slot: Arc::clone(&slot),
            };
            let thread = thread::spawn(move || {
                // SAFETY: this thread owns the slot until `owner` drops.
                let stacks = unsafe { owner.slot.stacks() };
                stacks[0].push(64);
                stacks[3].push(4096);
                owner.slot.count_allocations(2);
                owner.slot.count_frees(1);
                drop(owner);
            });
            let (allocations, frees) = slot.counts();
            assert!(allocations <= 2 && frees <= 1);
            let taken = {
                let _registry = registry.lock().unwrap();
                // SAFETY: the registry mutex is held.
                unsafe { slot.take_abandoned() }
            };
            if let Some(stacks) = &taken {
                assert_eq!(
                    (stacks[0].as_slice(), stacks[3].as_slice()),
                    (&[64][..], &[4096][..])
                );
                assert_eq!(slot.counts(), (2, 1));
            }
            thread.join().unwrap();
            let _registry = registry.lock().unwrap();
            // SAFETY: the registry mutex is held.
            let later = unsafe { slot.take_abandoned() };
            match taken {
                // Taken once: the second take finds the stacks empty.
                Some(_) => assert!(later.unwrap().iter().all(Vec::is_empty)),
                None => assert_eq!(later.unwrap()[0], [64]),
            }
        });
    }

    /// Two takers of one abandoned slot (two heaps' threads reclaiming at once is ruled out
    /// by the registry mutex): exactly one gets the blocks.
    #[test]
    fn loom_two_takers_under_the_registry_mutex_get_the_blocks_once() {
        model(|| {
            let registry = Arc::new(Mutex::new(()));
            let slot = Arc::new(CacheSlot::new());
            let owner = Owner {
                heap_id: 1,
                slot: Arc::clone(&slot),
            };
            // SAFETY: this thread owns the slot until `owner` drops.
            let stacks = unsafe { owner.slot.stacks() };
            stacks[1].push(128);
            drop(owner);
            let take = |registry: Arc<Mutex<()>>, slot: Arc<CacheSlot>| {
                let _registry = registry.lock().unwrap();
                // SAFETY: the registry mutex is held.
                unsafe { slot.take_abandoned() }.map_or(0, |s| s[1].len())
            };
            let (r, s) = (Arc::clone(&registry), Arc::clone(&slot));
            let other = thread::spawn(move || take(r, s));
            let mine = take(registry, slot);
            assert_eq!(mine + other.join().unwrap(), 1);
        });
    }
}
