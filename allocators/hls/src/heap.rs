//! One BRAM heap: its bytes, its free map, its handle table.
//!
//! Invariants (checked by [`Heap::check`]):
//! * every live block of the handle table covers whole units inside the heap, and no two
//!   overlap;
//! * `by_address` maps exactly the first unit of every live block to its slot;
//! * a unit's bitmap bit is set exactly when a live block covers it;
//! * `allocated_units` is the sum of the live blocks' units.

use std::collections::BTreeMap;

use crate::bitmap::Bitmap;
use crate::config::OnChipConfig;
use crate::handle::{Block, HandleTable};

/// One heap of the on-chip memory.
#[derive(Clone, Debug)]
pub(crate) struct Heap {
    /// The heap's bytes (`heap_words * word_bytes`).
    pub data: Vec<u8>,
    pub bitmap: Bitmap,
    pub table: HandleTable,
    /// First unit of each live block -> its slot, in address order (the order the
    /// defragmenter visits blocks in).
    pub by_address: BTreeMap<u32, u32>,
    pub allocated_units: u32,
    /// Where the next first-fit scan starts when the configuration caches it.
    pub next_start: u32,
}

/// Where a block was placed and what placing it read and wrote.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placement {
    pub slot: u32,
    pub generation: u16,
}

impl Heap {
    pub(crate) fn new(config: &OnChipConfig) -> Self {
        Self {
            data: vec![0; config.heap_bytes() as usize],
            bitmap: Bitmap::new(
                config.heap_units(),
                config.bits_per_unit(),
                config.word_bits,
            ),
            table: HandleTable::default(),
            by_address: BTreeMap::new(),
            allocated_units: 0,
            next_start: 0,
        }
    }

    pub(crate) fn free_units(&self) -> u32 {
        self.bitmap.units() - self.allocated_units
    }

    /// Marks `units` units at `start` as a new block of `size_bytes` bytes.
    pub(crate) fn place(&mut self, start: u32, units: u32, size_bytes: u32) -> Placement {
        debug_assert!(self.bitmap.all(start, units, false));
        self.bitmap.fill(start, units, true);
        let (slot, generation) = self.table.insert(Block {
            start,
            units,
            size_bytes,
        });
        self.by_address.insert(start, slot);
        self.allocated_units += units;
        self.next_start = start + units;
        Placement { slot, generation }
    }

    /// Frees the block in `slot` if it has `generation`.
    pub(crate) fn release(&mut self, slot: u32, generation: u16) -> Option<Block> {
        let block = self.table.remove(slot, generation)?;
        self.by_address.remove(&block.start);
        self.bitmap.fill(block.start, block.units, false);
        self.allocated_units -= block.units;
        Some(block)
    }

    /// Checks the invariants of the module docs.
    pub(crate) fn check(&self, unit_bytes: u32) -> Result<(), String> {
        let units = self.bitmap.units();
        if self.data.len() as u64 != u64::from(units) * u64::from(unit_bytes) {
            return Err("heap bytes do not match its units".to_owned());
        }
        let mut covered = vec![false; units as usize];
        let mut sum = 0u32;
        for (slot, _, b) in self.table.iter() {
            if b.units == 0 || b.start + b.units > units {
                return Err(format!("slot {slot}: block {b:?} outside the heap"));
            }
            if u64::from(b.size_bytes) > u64::from(b.units) * u64::from(unit_bytes) {
                return Err(format!("slot {slot}: block {b:?} smaller than its size"));
            }
            if self.by_address.get(&b.start) != Some(&slot) {
                return Err(format!(
                    "slot {slot}: block {b:?} missing from the address index"
                ));
            }
            for u in b.start..b.start + b.units {
                if std::mem::replace(&mut covered[u as usize], true) {
                    return Err(format!(
                        "slot {slot}: block {b:?} overlaps another at unit {u}"
                    ));
                }
            }
            sum += b.units;
        }
        if self.by_address.len() != self.table.live() {
            return Err(format!(
                "address index has {} entries for {} live blocks",
                self.by_address.len(),
                self.table.live()
            ));
        }
        if sum != self.allocated_units {
            return Err(format!(
                "allocated units {} but live blocks cover {sum}",
                self.allocated_units
            ));
        }
        for (u, &c) in covered.iter().enumerate() {
            if self.bitmap.is_set(u as u32) != c {
                return Err(format!(
                    "bitmap bit of unit {u} is {} but the unit is {}",
                    self.bitmap.is_set(u as u32),
                    if c { "in a live block" } else { "free" }
                ));
            }
        }
        Ok(())
    }
}
