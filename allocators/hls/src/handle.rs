//! Relocatable handles and the handle table.
//!
//! An accelerator never holds a heap address: it holds a [`Handle`] (heap, slot,
//! generation), and every access goes through the heap's handle table, whose slot holds the
//! block's current position. The defragmenter moves a block by copying it and rewriting its
//! slot, so handles stay valid across compactions. A freed slot's generation is bumped, so a
//! stale handle is told apart from the slot's next block (up to 2^16 reuses).

use alloclab_core::BlockHandle;

/// Bits of a handle's address left for the block itself: every block gets a window of
/// 1 MiB, the largest heap ([`MAX_HEAP_BYTES`](crate::MAX_HEAP_BYTES)).
const WINDOW_BITS: u32 = 20;
/// Bits of the slot index in a handle's address.
const SLOT_BITS: u32 = 20;
/// Bits of the heap index in a handle's address.
const HEAP_BITS: u32 = 8;

/// A block of on-chip memory, named independently of where it is: (heap, handle-table slot,
/// generation).
///
/// Its [`BlockHandle::address`] is a *virtual* address, `(generation, heap, slot) * 1 MiB`,
/// that never changes while the block lives, even when the defragmenter moves it: live blocks
/// never overlap in it, and it is aligned to 1 MiB. The block's current position in its heap
/// is [`OnChipMemory::location`](crate::OnChipMemory::location).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle {
    pub(crate) heap: u8,
    pub(crate) slot: u32,
    pub(crate) generation: u16,
}

impl Handle {
    /// The heap the block lives in.
    pub fn heap(self) -> usize {
        usize::from(self.heap)
    }

    /// The block's handle-table slot in its heap.
    pub fn slot(self) -> u32 {
        self.slot
    }
}

// SAFETY: a Handle is plain data (integers); its `Eq`, `Debug` and address read no shared
// state.
unsafe impl BlockHandle for Handle {
    fn address(self) -> usize {
        let key = (u64::from(self.generation) << (HEAP_BITS + SLOT_BITS))
            | (u64::from(self.heap) << SLOT_BITS)
            | u64::from(self.slot);
        // 16 + 8 + 20 + 20 = 64 bits: exact on 64-bit targets.
        (key << WINDOW_BITS) as usize
    }
}

/// A live block as the handle table records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// First allocation unit.
    pub start: u32,
    /// Allocation units covered.
    pub units: u32,
    /// Bytes asked for (at most `units * unit_bytes`).
    pub size_bytes: u32,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    generation: u16,
    block: Option<Block>,
}

/// One heap's handle table: slot -> block, with recycled slots.
#[derive(Clone, Debug, Default)]
pub(crate) struct HandleTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
}

impl HandleTable {
    /// Records `block` in a free slot; returns (slot, generation).
    pub(crate) fn insert(&mut self, block: Block) -> (u32, u16) {
        self.live += 1;
        match self.free.pop() {
            Some(slot) => {
                let s = &mut self.slots[slot as usize];
                s.block = Some(block);
                (slot, s.generation)
            }
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    block: Some(block),
                });
                assert!(
                    self.slots.len() <= 1 << SLOT_BITS,
                    "more live blocks than a heap has units"
                );
                ((self.slots.len() - 1) as u32, 0)
            }
        }
    }

    /// The live block in `slot` if its generation is `generation`.
    pub(crate) fn get(&self, slot: u32, generation: u16) -> Option<&Block> {
        let s = self.slots.get(slot as usize)?;
        if s.generation == generation {
            s.block.as_ref()
        } else {
            None
        }
    }

    /// The live block in `slot` (any generation), for the defragmenter.
    pub(crate) fn block_mut(&mut self, slot: u32) -> &mut Block {
        self.slots[slot as usize]
            .block
            .as_mut()
            .expect("the address index names a live slot")
    }

    /// Frees `slot` if it holds a live block of `generation`; returns the block.
    pub(crate) fn remove(&mut self, slot: u32, generation: u16) -> Option<Block> {
        let s = self.slots.get_mut(slot as usize)?;
        if s.generation != generation {
            return None;
        }
        let block = s.block.take()?;
        s.generation = s.generation.wrapping_add(1);
        self.free.push(slot);
        self.live -= 1;
        Some(block)
    }

    /// Live blocks.
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Every live block with its (slot, generation).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, u16, &Block)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.block.as_ref().map(|b| (i as u32, s.generation, b)))
    }
}
