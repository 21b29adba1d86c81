//! [`DramHeap`]: the upper bound — slots in DRAM, blocks from the process's global
//! allocator (glibc malloc in the worker), nothing flushed and nothing that survives.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::path::Path;

use super::{PersistStats, SlotClaims, SlotHeap};

/// A block of the DRAM heap: uninitialised bytes, as `malloc` returns them.
type Block = Box<[MaybeUninit<u8>]>;

/// A slot heap with no persistence at all: `Box<[MaybeUninit<u8>]>` per slot (not zeroed,
/// as `malloc`), in a plain array. [`SlotHeap::open`] always fails: nothing survives.
pub struct DramHeap {
    slots: Box<[UnsafeCell<Option<Block>>]>,
    claims: SlotClaims,
}

// SAFETY: a slot's cell is read or written only by a caller holding the slot's claim
// (`SlotClaims`), so no two threads touch one cell at once; the boxes inside are plain owned
// memory.
unsafe impl Sync for DramHeap {}

impl std::fmt::Debug for DramHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DramHeap")
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl DramHeap {
    /// Runs `f` on `slot`'s cell while holding its claim.
    fn with_slot<R>(
        &self,
        slot: usize,
        f: impl FnOnce(&mut Option<Block>) -> R,
    ) -> Result<R, String> {
        let _claim = self.claims.claim(slot)?;
        // SAFETY: the claim is ours until `_claim` drops, after `f`: nobody else reads or
        // writes this cell meanwhile (see `Sync`).
        Ok(f(unsafe { &mut *self.slots[slot].get() }))
    }
}

impl SlotHeap for DramHeap {
    const DURABLE: bool = false;

    fn create(_path: &Path, _pool_bytes: usize, slots: usize) -> Result<Self, String> {
        Ok(Self {
            slots: (0..slots).map(|_| UnsafeCell::new(None)).collect(),
            claims: SlotClaims::new(slots),
        })
    }

    fn open(path: &Path) -> Result<Self, String> {
        Err(format!(
            "dram: nothing persists, so there is no pool to open at {}",
            path.display()
        ))
    }

    fn slots(&self) -> usize {
        self.slots.len()
    }

    fn alloc_into(&self, slot: usize, size: usize) -> Result<(), String> {
        self.with_slot(slot, |cell| {
            if cell.is_some() {
                return Err(format!("slot {slot} already holds a block"));
            }
            *cell = Some(Box::new_uninit_slice(size));
            Ok(())
        })?
    }

    fn free_from(&self, slot: usize) -> Result<(), String> {
        self.with_slot(slot, |cell| match cell.take() {
            Some(block) => {
                drop(block);
                Ok(())
            }
            None => Err(format!("slot {slot} is empty")),
        })?
    }

    fn is_live(&self, slot: usize) -> Result<bool, String> {
        self.with_slot(slot, |cell| cell.is_some())
    }

    fn persist_counts(&self) -> Option<PersistStats> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_hold_one_block_each_and_nothing_reopens() {
        let heap = DramHeap::create(Path::new("/nonexistent"), 0, 3).unwrap();
        assert_eq!(heap.slots(), 3);
        heap.alloc_into(1, 100).unwrap();
        assert!(heap.is_live(1).unwrap());
        assert!(!heap.is_live(0).unwrap());
        assert!(heap.alloc_into(1, 8).unwrap_err().contains("already holds"));
        heap.free_from(1).unwrap();
        assert!(heap.free_from(1).unwrap_err().contains("empty"));
        assert!(heap.alloc_into(3, 8).unwrap_err().contains("out of range"));
        assert_eq!(heap.persist_counts(), None);
        assert!(
            DramHeap::open(Path::new("/x"))
                .unwrap_err()
                .contains("nothing persists")
        );
    }
}
