//! Persistent heaps as the `pmem` suite sees them: [`SlotHeap`], one trait over alloclab-pmem,
//! PMDK's libpmemobj and a DRAM baseline.
//!
//! A slot heap is a pool whose root object holds an array of persistent pointers, the
//! *slots*. [`SlotHeap::alloc_into`] allocates a block and stores its persistent pointer in a
//! slot, atomically with respect to a crash (the block is either allocated and in the slot,
//! or neither); [`SlotHeap::free_from`] frees the block in a slot and clears it, atomically
//! too. That is the part of a persistent allocator's interface that both PMDK
//! (`pmemobj_alloc` into a `PMEMoid` inside the pool) and alloclab-pmem (`allocate_into` a
//! `PPtr` inside the pool) offer, so one workload drives both.
//!
//! | name            | type                     | slots live in                                 |
//! |-----------------|--------------------------|-----------------------------------------------|
//! | `pmdk`          | [`PmdkHeap`]             | `PMEMoid[slots]` in `pmemobj_root`            |
//! | `alloclab-pmem` | [`AlloclabPmemHeap`]     | a 16-byte header, then `PPtr<u8>[slots]`, in the heap's root |
//! | `dram`          | [`DramHeap`]             | a `Box<[u8]>` per slot in a plain array, nothing persists |
//!
//! **Slot ownership.** The trait's methods are safe: each heap claims a slot (a flag per
//! slot, in DRAM, see [`SlotClaims`]) for the length of a call, so that two threads that
//! use the same slot at once get an error instead of a data race. The `pmem` workloads give
//! each thread a disjoint range of slots, so a claim is one uncontended atomic swap and one
//! store per call, the same for every heap.

mod alloclab;
mod dram;
mod pmdk;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

pub use alloclab::AlloclabPmemHeap;
pub use alloclab_pmem::PersistStats;
pub use dram::DramHeap;
pub use pmdk::{LIBPMEMOBJ_SONAME, Libpmemobj, PMEMoid, PmdkHeap, PobjAction};
pub(crate) use pmdk::{Pool, c_path};

/// A persistent heap as the `pmem` workloads see it: a pool whose root holds `slots`
/// persistent pointers (see the [module documentation](self)).
///
/// Every method that takes a slot fails with a one-line message if the slot is out of range
/// or in use by another thread at that moment.
pub trait SlotHeap: Send + Sync + Sized {
    /// Whether the heap survives its process: `false` for the DRAM baseline, whose
    /// [`open`](Self::open) always fails and which has no recovery to measure.
    const DURABLE: bool = true;

    /// Whether the heap can be used on this machine; a one-line reason if not (a missing
    /// library: `libpmemobj.so.1 not found: install libpmemobj-dev`).
    ///
    /// # Errors
    ///
    /// The reason the heap cannot be used.
    fn available() -> Result<(), String> {
        Ok(())
    }

    /// Creates a pool of `pool_bytes` at `path` (which must not exist) whose root holds
    /// `slots` empty slots.
    ///
    /// # Errors
    ///
    /// A one-line message naming the path: the file exists, the size is too small, the
    /// library is missing.
    fn create(path: &Path, pool_bytes: usize, slots: usize) -> Result<Self, String>;

    /// Opens the pool at `path`, recovering it as the heap does after a crash or a clean
    /// close (what the `recovery_ms` metric times).
    ///
    /// # Errors
    ///
    /// A one-line message naming the path.
    fn open(path: &Path) -> Result<Self, String>;

    /// The number of slots in the root.
    fn slots(&self) -> usize;

    /// Allocates `size` bytes and stores the block's persistent pointer in `slot`, atomically
    /// with respect to a crash.
    ///
    /// # Errors
    ///
    /// The slot is out of range, in use by another thread or already holds a block; the
    /// heap is out of space or fails.
    fn alloc_into(&self, slot: usize, size: usize) -> Result<(), String>;

    /// Frees the block in `slot` and clears the slot, atomically with respect to a crash.
    ///
    /// # Errors
    ///
    /// The slot is out of range, in use by another thread or empty; the heap fails.
    fn free_from(&self, slot: usize) -> Result<(), String>;

    /// Whether `slot` holds a block.
    ///
    /// # Errors
    ///
    /// The slot is out of range or in use by another thread.
    fn is_live(&self, slot: usize) -> Result<bool, String>;

    /// The heap's persistence counters so far (cache lines flushed, fences), or `None` when
    /// the heap does not count them (PMDK; the DRAM baseline).
    fn persist_counts(&self) -> Option<PersistStats>;
}

/// One flag per slot: whether a call is using it now. Heaps claim a slot for the length of
/// a call (see the [module documentation](self)).
#[derive(Debug)]
pub struct SlotClaims {
    busy: Box<[AtomicBool]>,
}

impl SlotClaims {
    /// `slots` free slots.
    pub fn new(slots: usize) -> Self {
        Self {
            busy: (0..slots).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// The number of slots.
    pub fn len(&self) -> usize {
        self.busy.len()
    }

    /// Whether there are no slots.
    pub fn is_empty(&self) -> bool {
        self.busy.is_empty()
    }

    /// Claims `slot` until the returned guard is dropped.
    ///
    /// # Errors
    ///
    /// `slot` is out of range, or another thread holds it.
    pub fn claim(&self, slot: usize) -> Result<SlotClaim<'_>, String> {
        let flag = self.busy.get(slot).ok_or_else(|| {
            format!(
                "slot {slot} is out of range (the root has {} slots)",
                self.len()
            )
        })?;
        if flag.swap(true, Ordering::Acquire) {
            return Err(format!("slot {slot} is in use by another thread"));
        }
        Ok(SlotClaim { flag })
    }
}

/// A claimed slot; dropping it releases the slot.
#[derive(Debug)]
pub struct SlotClaim<'a> {
    flag: &'a AtomicBool,
}

impl Drop for SlotClaim<'_> {
    fn drop(&mut self) {
        self.flag.store(false, Ordering::Release);
    }
}

/// Something to do with a slot heap, whatever its type: the way to run a generic workload on
/// a persistent heap chosen by name at run time, monomorphised for each.
pub trait SlotHeapTask {
    /// What the task returns.
    type Output;
    /// Runs the task with the heap type `H`.
    fn run<H: SlotHeap>(self) -> Self::Output;
}

/// Runs `task` with the slot heap registered as `name`: `None` if no persistent heap has that
/// name, `Some(Err(reason))` if it exists but is not built in this branch.
pub fn with_slot_heap<T: SlotHeapTask>(name: &str, task: T) -> Option<Result<T::Output, String>> {
    // Keep the match in step with peers::ALLOCATORS (a test checks it).
    Some(match name {
        "pmdk" => Ok(task.run::<PmdkHeap>()),
        // The lead replaces this arm by `Ok(task.run::<alloclab::AlloclabPmemHeap>())`.
        "alloclab-pmem" => Ok(task.run::<alloclab::AlloclabPmemHeap>()),
        "dram" => Ok(task.run::<DramHeap>()),
        _ => return None,
    })
}

/// Whether the slot heap `name` can run here: `None` if no persistent heap has that name,
/// `Some(Err(reason))` if it cannot (library missing, not built in this branch).
pub fn availability(name: &str) -> Option<Result<(), String>> {
    struct Probe;
    impl SlotHeapTask for Probe {
        type Output = Result<(), String>;
        fn run<H: SlotHeap>(self) -> Result<(), String> {
            H::available()
        }
    }
    with_slot_heap(name, Probe).map(|r| r.and_then(|ok| ok))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_claimed_by_one_caller_at_a_time() {
        let claims = SlotClaims::new(2);
        let first = claims.claim(1).unwrap();
        assert!(claims.claim(1).unwrap_err().contains("in use"));
        assert!(claims.claim(0).is_ok());
        drop(first);
        assert!(claims.claim(1).is_ok());
        assert!(claims.claim(2).unwrap_err().contains("out of range"));
    }

    #[test]
    fn alloclab_pmem_and_dram_are_available_and_unknown_names_are_none() {
        assert_eq!(availability("alloclab-pmem"), Some(Ok(())));
        assert_eq!(availability("dram"), Some(Ok(())));
        assert_eq!(availability("system"), None);
    }
}
