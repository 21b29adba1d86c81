//! [`BlockTable`]: which blocks of a heap are live, kept in DRAM by the adapters of heaps
//! that cannot say so themselves.
//!
//! PMDK's release build frees a block twice without complaint (corrupting its heap), and
//! `std::alloc` needs a block's size back to free it; the table gives both adapters the
//! [`PersistentAllocator::release`](alloclab_core::PersistentAllocator::release) contract: a double free, or a free of something
//! that is not a block, is refused with an error and changes nothing.
//!
//! One entry per offset ever handed out: its size while live, [`FREED`] after. 64 shards,
//! each a mutex over a hash map keyed by offset, chosen by the offset's cache line, so that
//! threads working on different blocks rarely meet on a lock (one uncontended lock and one
//! map probe per allocation and per free, the same for PMDK and the DRAM baseline).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;

/// The size recorded for a block that has been freed.
const FREED: u64 = u64::MAX;
/// Shards (a power of two).
const SHARDS: usize = 64;

/// Hashes an offset with one multiplication (offsets are distinct and well spread already).
#[derive(Default)]
struct OffsetHasher(u64);

impl Hasher for OffsetHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

type Shard = HashMap<u64, u64, BuildHasherDefault<OffsetHasher>>;

/// What the table knows of an offset a caller wants to free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// Live, with this size; now marked freed.
    Live(u64),
    /// Never handed out in this session (a block from before a reopen, or garbage); the
    /// table is unchanged.
    Unknown,
}

/// The live blocks of one heap (see the [module documentation](self)).
pub struct BlockTable {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
}

impl std::fmt::Debug for BlockTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockTable").finish_non_exhaustive()
    }
}

impl Default for BlockTable {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockTable {
    /// An empty table.
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(Shard::default())))
                .collect(),
        }
    }

    fn shard(&self, off: u64) -> std::sync::MutexGuard<'_, Shard> {
        let line = off >> 6;
        let index = (line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS;
        // A poisoned shard only means another thread panicked between two map calls, which
        // leave the map consistent.
        self.shards[index].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `off` as a live block of `size` bytes (a fresh allocation; a freed entry at
    /// the same offset is replaced).
    pub fn insert(&self, off: u64, size: u64) {
        debug_assert_ne!(size, FREED);
        self.shard(off).insert(off, size);
    }

    /// Marks `off` freed and returns what it was.
    ///
    /// # Errors
    ///
    /// `off` was freed already (a double free); nothing changes.
    pub fn take(&self, off: u64) -> Result<Known, String> {
        let mut shard = self.shard(off);
        match shard.get_mut(&off) {
            Some(size) if *size == FREED => Err(format!(
                "block at offset {off:#x} was freed already (double free refused)"
            )),
            Some(size) => Ok(Known::Live(std::mem::replace(size, FREED))),
            None => Ok(Known::Unknown),
        }
    }

    /// As [`take`](Self::take), but an unknown offset (a block from before a reopen) is
    /// recorded as freed too, so that freeing it again is refused.
    ///
    /// # Errors
    ///
    /// As [`take`](Self::take).
    pub fn take_adopting(&self, off: u64) -> Result<Known, String> {
        let mut shard = self.shard(off);
        match shard.get_mut(&off) {
            Some(size) if *size == FREED => Err(format!(
                "block at offset {off:#x} was freed already (double free refused)"
            )),
            Some(size) => Ok(Known::Live(std::mem::replace(size, FREED))),
            None => {
                shard.insert(off, FREED);
                Ok(Known::Unknown)
            }
        }
    }

    /// Forgets `off` (undoes a [`take_adopting`](Self::take_adopting) of an unknown block
    /// whose free then failed).
    pub fn forget(&self, off: u64) {
        self.shard(off).remove(&off);
    }

    /// Marks `off` live again with `size` bytes (undoes a [`take`](Self::take) whose free
    /// then failed).
    pub fn restore(&self, off: u64, size: u64) {
        self.insert(off, size);
    }

    /// Every live block, (offset, size), emptying the table.
    pub fn drain_live(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            out.extend(shard.drain().filter(|&(_, size)| size != FREED));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_freed_once_and_unknown_offsets_are_told_apart() {
        let table = BlockTable::new();
        table.insert(4096, 200);
        assert_eq!(table.take(4096), Ok(Known::Live(200)));
        assert!(table.take(4096).unwrap_err().contains("double free"));
        assert_eq!(table.take(8192), Ok(Known::Unknown));
        table.insert(4096, 64);
        table.insert(128, 8);
        assert_eq!(table.take(4096), Ok(Known::Live(64)));
        assert_eq!(table.drain_live(), [(128, 8)]);
        assert_eq!(table.take_adopting(512), Ok(Known::Unknown));
        assert!(
            table
                .take_adopting(512)
                .unwrap_err()
                .contains("double free")
        );
    }
}
