//! [`AlloclabPmemHeap`]: alloclab-pmem as a slot heap.
//!
//! The root object is a 16-byte header (a magic word and the slot count, persisted at
//! create) followed by `slots` persistent pointers, each the destination of
//! `allocate_into` / `free_from`.

use core::alloc::Layout;
use std::path::Path;

use alloclab_pmem::{Medium, PPtr, PersistentHeap};

use super::{PersistStats, SlotClaims, SlotHeap};

/// Identifies a root laid out by this adapter.
const MAGIC: u64 = 0x616c_6c6f_536c_6f74; // "alloSlot"
/// Bytes of the root before the slots.
const ROOT_HEADER: usize = 16;

/// alloclab-pmem's persistent heap, with the workload's slots in its root.
pub struct AlloclabPmemHeap {
    heap: PersistentHeap<Box<dyn Medium>>,
    slots: usize,
    claims: SlotClaims,
}

impl std::fmt::Debug for AlloclabPmemHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlloclabPmemHeap")
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl AlloclabPmemHeap {
    /// The persistent pointer of `slot` (in range).
    fn slot_ptr(&self, slot: usize) -> *mut PPtr<u8> {
        debug_assert!(slot < self.slots);
        // SAFETY: the root holds ROOT_HEADER bytes then `slots` pointers (checked at create
        // and open), and `slot` is in range.
        unsafe {
            self.heap
                .root()
                .add(ROOT_HEADER)
                .cast::<PPtr<u8>>()
                .add(slot)
        }
    }

    fn wrap(heap: PersistentHeap<Box<dyn Medium>>, slots: usize) -> Self {
        Self {
            heap,
            slots,
            claims: SlotClaims::new(slots),
        }
    }
}

impl SlotHeap for AlloclabPmemHeap {
    fn create(path: &Path, pool_bytes: usize, slots: usize) -> Result<Self, String> {
        let root_size = ROOT_HEADER + slots * size_of::<PPtr<u8>>();
        let heap = PersistentHeap::create(path, pool_bytes, root_size)
            .map_err(|e| format!("alloclab-pmem: {e}"))?;
        let root = heap.root().cast::<u64>();
        // SAFETY: the root is at least ROOT_HEADER bytes, 8-byte aligned, and ours alone.
        unsafe {
            root.write(MAGIC);
            root.add(1).write(slots as u64);
        }
        heap.persist(root.cast::<u8>(), ROOT_HEADER);
        Ok(Self::wrap(heap, slots))
    }

    fn open(path: &Path) -> Result<Self, String> {
        let heap = PersistentHeap::open(path).map_err(|e| format!("alloclab-pmem: {e}"))?;
        let root = heap.root().cast::<u64>();
        // SAFETY: the root is at least ROOT_HEADER bytes (a pool this adapter created).
        let (magic, slots) = unsafe { (root.read(), root.add(1).read()) };
        let slots = usize::try_from(slots).unwrap_or(usize::MAX);
        if magic != MAGIC || ROOT_HEADER + slots.saturating_mul(8) > heap.root_size() {
            return Err(format!(
                "alloclab-pmem: {} is a pool, but not one laid out by the pmem workload",
                path.display()
            ));
        }
        Ok(Self::wrap(heap, slots))
    }

    fn slots(&self) -> usize {
        self.slots
    }

    fn alloc_into(&self, slot: usize, size: usize) -> Result<(), String> {
        let _claim = self.claims.claim(slot)?;
        let layout = Layout::from_size_align(size, 16).map_err(|e| e.to_string())?;
        let dest = self.slot_ptr(slot);
        // SAFETY: `dest` is a slot of the root, claimed by this call.
        if !unsafe { PPtr::load(dest) }.is_null() {
            return Err(format!("slot {slot} already holds a block"));
        }
        // SAFETY: as above; `allocate_into` stores the block's offset into `dest`.
        unsafe { self.heap.allocate_into(dest, layout) }
            .map(|_| ())
            .map_err(|e| format!("alloclab-pmem: {e}"))
    }

    fn free_from(&self, slot: usize) -> Result<(), String> {
        let _claim = self.claims.claim(slot)?;
        // SAFETY: `dest` is a slot of the root, claimed by this call.
        unsafe { self.heap.free_from(self.slot_ptr(slot)) }
            .map_err(|e| format!("alloclab-pmem: slot {slot}: {e}"))
    }

    fn is_live(&self, slot: usize) -> Result<bool, String> {
        let _claim = self.claims.claim(slot)?;
        // SAFETY: a slot of the root, claimed by this call.
        Ok(!unsafe { PPtr::load(self.slot_ptr(slot)) }.is_null())
    }

    fn persist_counts(&self) -> Option<PersistStats> {
        Some(self.heap.stats().persist)
    }
}
