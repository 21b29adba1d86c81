//! [`Slots`]: the `pmem` suite's view of a persistent heap — a pool whose root holds an
//! array of persistent pointers, the *slots*, each the destination of the heap's
//! crash-atomic [`allocate_into`](PersistentAllocator::allocate_into) and
//! [`free_from`](PersistentAllocator::free_from).
//!
//! The root is a 16-byte header (a magic word and the slot count, persisted at create)
//! followed by `slots` 8-byte block offsets. The same layout for every heap, so one
//! workload drives them all with the same calls.
//!
//! **Slot ownership.** The methods are safe: a call claims its slot (a flag per slot, in
//! DRAM, see [`SlotClaims`]) for its length, so that two threads that use the same slot at
//! once get an error instead of a data race. The `pmem` workloads give each thread a
//! disjoint range of slots, so a claim is one uncontended atomic swap and one store per
//! call, the same for every heap.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use alloclab_core::{PersistStats, PersistentAllocator};

/// Identifies a root laid out by [`Slots`].
const MAGIC: u64 = u64::from_le_bytes(*b"alcslots");
/// Bytes of the root before the slots.
const ROOT_HEADER: usize = 16;

/// A persistent heap whose root holds `slots` persistent pointers (see the module
/// documentation).
pub struct Slots<H> {
    heap: H,
    name: &'static str,
    slots: usize,
    claims: SlotClaims,
}

impl<H> std::fmt::Debug for Slots<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots")
            .field("heap", &self.name)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl<H: PersistentAllocator> Slots<H> {
    /// Creates a pool of `pool_bytes` at `path` (which must not exist) whose root holds
    /// `slots` empty slots; `name` prefixes error messages.
    ///
    /// # Errors
    ///
    /// A one-line message naming the path: the file exists, the size is too small, the
    /// library is missing.
    pub fn create(
        name: &'static str,
        path: &Path,
        pool_bytes: usize,
        slots: usize,
    ) -> Result<Self, String> {
        let root_size = slots
            .checked_mul(8)
            .and_then(|b| b.checked_add(ROOT_HEADER))
            .ok_or_else(|| format!("{name}: {slots} slots do not fit a root"))?;
        let heap = H::create(path, pool_bytes, root_size)?;
        let root = heap.root().cast::<u64>();
        // SAFETY: the root is at least ROOT_HEADER bytes, cache-line aligned, and ours alone.
        unsafe {
            root.write(MAGIC);
            root.add(1).write(slots as u64);
        }
        heap.persist(root.cast::<u8>(), ROOT_HEADER);
        Ok(Self::wrap(heap, name, slots))
    }

    /// Opens the pool at `path`, recovering it as the heap does after a crash or a clean
    /// close (what the `recovery_ms` metric times).
    ///
    /// # Errors
    ///
    /// A one-line message naming the path (not a pool, or not one laid out with slots).
    pub fn open(name: &'static str, path: &Path) -> Result<Self, String> {
        let heap = H::open(path)?;
        let root = heap.root().cast::<u64>();
        if heap.root_size() < ROOT_HEADER {
            return Err(refused(name, path));
        }
        // SAFETY: the root is at least ROOT_HEADER bytes (checked), cache-line aligned.
        let (magic, slots) = unsafe { (root.read(), root.add(1).read()) };
        let slots = usize::try_from(slots).unwrap_or(usize::MAX);
        if magic != MAGIC || ROOT_HEADER.saturating_add(slots.saturating_mul(8)) > heap.root_size()
        {
            return Err(refused(name, path));
        }
        Ok(Self::wrap(heap, name, slots))
    }

    fn wrap(heap: H, name: &'static str, slots: usize) -> Self {
        Self {
            heap,
            name,
            slots,
            claims: SlotClaims::new(slots),
        }
    }

    /// The heap.
    pub fn heap(&self) -> &H {
        &self.heap
    }

    /// The number of slots in the root.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The persistent word of `slot` (in range).
    #[inline]
    fn word(&self, slot: usize) -> *mut u64 {
        debug_assert!(slot < self.slots);
        // SAFETY: the root holds ROOT_HEADER bytes then `slots` words (checked at create and
        // open), and `slot` is in range.
        unsafe { self.heap.root().add(ROOT_HEADER).cast::<u64>().add(slot) }
    }

    /// Allocates `size` bytes and stores the block's offset in `slot`, atomically with
    /// respect to a crash.
    ///
    /// # Errors
    ///
    /// The slot is out of range, in use by another thread or already holds a block; the
    /// heap is out of space or fails.
    pub fn alloc_into(&self, slot: usize, size: usize) -> Result<(), String> {
        let _claim = self.claims.claim(slot)?;
        let dest = self.word(slot);
        // SAFETY: a word of the root, claimed by this call.
        if unsafe { dest.read() } != 0 {
            return Err(format!("slot {slot} already holds a block"));
        }
        // SAFETY: as above; `allocate_into` stores the block's offset into `dest`.
        unsafe { self.heap.allocate_into(dest, size) }
            .map(|_| ())
            .map_err(String::from)
    }

    /// Frees the block in `slot` and clears the slot, atomically with respect to a crash.
    ///
    /// # Errors
    ///
    /// The slot is out of range, in use by another thread or empty; the heap fails.
    pub fn free_from(&self, slot: usize) -> Result<(), String> {
        let _claim = self.claims.claim(slot)?;
        let dest = self.word(slot);
        // SAFETY: a word of the root, claimed by this call.
        if unsafe { dest.read() } == 0 {
            return Err(format!("{}: slot {slot} is empty", self.name));
        }
        // SAFETY: as above; the block is the slot's alone, used by nobody after this.
        unsafe { self.heap.free_from(dest) }.map_err(|e| format!("slot {slot}: {e}"))
    }

    /// Whether `slot` holds a block.
    ///
    /// # Errors
    ///
    /// The slot is out of range or in use by another thread.
    pub fn is_live(&self, slot: usize) -> Result<bool, String> {
        let _claim = self.claims.claim(slot)?;
        // SAFETY: a word of the root, claimed by this call.
        Ok(unsafe { self.word(slot).read() } != 0)
    }

    /// The heap's persistence counters so far, or `None` where it does not count them.
    pub fn persist_counts(&self) -> Option<PersistStats> {
        self.heap.persist_counts()
    }
}

#[cold]
fn refused(name: &str, path: &Path) -> String {
    format!(
        "{name}: {} is a pool, but not one laid out by the pmem workload",
        path.display()
    )
}

/// One flag per slot: whether a call is using it now (see the module
/// documentation).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pmem::{AlloclabPmemHeap, DramHeap, PmdkHeap};

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
    fn dram_slots_hold_one_block_each_and_nothing_reopens() {
        let slots = Slots::<DramHeap>::create("dram", Path::new("/nonexistent"), 0, 3).unwrap();
        assert_eq!(slots.slots(), 3);
        slots.alloc_into(1, 100).unwrap();
        assert!(slots.is_live(1).unwrap());
        assert!(!slots.is_live(0).unwrap());
        assert!(
            slots
                .alloc_into(1, 8)
                .unwrap_err()
                .contains("already holds")
        );
        slots.free_from(1).unwrap();
        assert!(slots.free_from(1).unwrap_err().contains("empty"));
        assert!(slots.alloc_into(3, 8).unwrap_err().contains("out of range"));
        assert_eq!(slots.persist_counts(), None);
        let err = Slots::<DramHeap>::open("dram", Path::new("/x")).unwrap_err();
        assert!(err.contains("nothing persists"), "{err}");
    }

    fn scratch(name: &str) -> crate::workloads::ScratchPool {
        crate::workloads::ScratchPool::new(&crate::workloads::pmem::pool_dir(), "slots-test", name)
    }

    /// Blocks in slots survive a reopen; a pool whose root is not laid out with slots is
    /// refused.
    fn slots_survive_a_reopen<H: PersistentAllocator>(name: &'static str) {
        if let Err(reason) = H::available() {
            crate::testing::skipped(&format!("{name} slots"), &reason.to_string());
            return;
        }
        let pool = scratch(name);
        let slots = Slots::<H>::create(name, &pool.0, 16 << 20, 4).unwrap();
        slots.alloc_into(0, 100).unwrap();
        slots.alloc_into(2, 5000).unwrap();
        slots.free_from(0).unwrap();
        drop(slots);
        let slots = Slots::<H>::open(name, &pool.0).unwrap();
        assert_eq!(slots.slots(), 4);
        let live: Vec<bool> = (0..4).map(|s| slots.is_live(s).unwrap()).collect();
        assert_eq!(live, [false, false, true, false]);
        slots.free_from(2).unwrap();
        drop(slots);

        let other = scratch(&format!("{name}-bare"));
        drop(H::create(&other.0, 16 << 20, 64).unwrap());
        let err = Slots::<H>::open(name, &other.0).unwrap_err();
        assert!(
            err.contains("not one laid out by the pmem workload"),
            "{err}"
        );
    }

    #[test]
    fn alloclab_pmem_slots_survive_a_reopen_and_a_bare_pool_is_refused() {
        slots_survive_a_reopen::<AlloclabPmemHeap>("alloclab-pmem");
    }

    #[test]
    fn pmdk_slots_survive_a_reopen_and_a_bare_pool_is_refused() {
        slots_survive_a_reopen::<PmdkHeap>("pmdk");
    }
}
