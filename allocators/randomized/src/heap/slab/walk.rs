//! The heap walk over slabs: every slot's record, bit, canaries and zeroes checked.

use super::bytes::*;
use super::*;

/// What the heap walk checks slabs with: the heap's key and detection classes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlabCheck {
    /// The key of the canaries.
    pub(crate) key: u64,
    /// Whether free slots must read zero.
    pub(crate) zero_fill: bool,
    /// Whether live slots carry canaries.
    pub(crate) canaries: bool,
}

impl SlabCheck {
    /// The heap walk of a slab chunk at `base`: each slab set up in it, see
    /// [`slab`](Self::slab); returns what it counted.
    ///
    /// # Safety
    ///
    /// `base` is a slab chunk of an arena whose lock the caller holds.
    pub(crate) unsafe fn chunk(
        self,
        base: usize,
        shape: &mut HeapShape,
    ) -> Result<SlabWalk, Corruption> {
        let mut walk = SlabWalk::default();
        for at in (base..base + CHUNK).step_by(SLAB) {
            // SAFETY: forwarded; a slab not set up reads as zeros (no capacity).
            if unsafe { header(at) }.capacity == 0 {
                continue;
            }
            // SAFETY: forwarded.
            let one = unsafe { self.slab(at, shape) }?;
            walk.live_bytes += one.live_bytes;
            walk.queued_bytes += one.queued_bytes;
        }
        Ok(walk)
    }
}

/// What the heap walk counts in slabs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlabWalk {
    /// Bytes of live slots.
    pub(crate) live_bytes: u64,
    /// Bytes of freed slots whose bits are still set: held back by their arena, or queued
    /// by another thread and not drained yet (these still count as live in the counters).
    pub(crate) queued_bytes: u64,
}

impl SlabCheck {
    /// The heap walk of one slab: bits against the live count, free slots zero (with
    /// zero-fill) and their records clear, live slots' canaries intact, freed slots whose bits
    /// are still set zero past their first word (a queued slot's link), the free list against
    /// the bits ([`free_list_matches`]). Live slots count in `shape` as live blocks (free
    /// slots are not on any list, and do not count); returns what it counted.
    ///
    /// # Safety
    ///
    /// `base` is a slab, set up, of an arena whose lock the caller holds.
    unsafe fn slab(self, base: usize, shape: &mut HeapShape) -> Result<SlabWalk, Corruption> {
        let SlabCheck {
            key,
            zero_fill,
            canaries,
        } = self;
        // SAFETY: forwarded.
        let c = unsafe { header(base) };
        let slot = c.slot as usize;
        let mut live = 0u32;
        let mut walk = SlabWalk::default();
        for index in 0..c.state.window as usize {
            let held =
                bitmap_word(base, index / 64).load(Ordering::Relaxed) & 1 << (index % 64) != 0;
            let rec = record(c, index).load(Ordering::Relaxed);
            let address = slot_address(c, index);
            if held && rec & LIVE == 0 {
                // Freed, held back (or queued by another thread, linked through its first
                // word): zeroed past the link.
                live += 1;
                walk.queued_bytes += slot as u64;
                if zero_fill && let Some(word) = first_dirty(address + 8, address + slot) {
                    return Err(Corruption::at(audit::FREE_MEMORY_MODIFIED, word));
                }
            } else if held {
                live += 1;
                walk.live_bytes += slot as u64;
                shape.live_blocks += 1;
                shape.live_bytes += slot as u64;
                let size = slot - usize::from(rec & SLACK);
                // SAFETY: a live slot, not queued.
                if canaries && !unsafe { canary_intact(key, address, slot, size) } {
                    return Err(Corruption::at("slab slot canary overwritten", address));
                }
            } else {
                if rec != 0 {
                    return Err(Corruption::at("free slab slot with a record", address));
                }
                if zero_fill && let Some(word) = first_dirty(address, address + slot) {
                    return Err(Corruption::at(audit::FREE_MEMORY_MODIFIED, word));
                }
            }
        }
        if live != c.state.live {
            return Err(Corruption::with(
                "slab's live count disagrees with its bitmap",
                base,
                c.state.live as usize,
                live as usize,
            ));
        }
        // SAFETY: forwarded: a set-up slab, under its arena's lock.
        unsafe { free_list_matches(base, c) }?;
        Ok(walk)
    }
}

/// Whether the free list of the slab at `base` (header `c`, whose live count matches its
/// bitmap) names each free slot of its window exactly once: its entries in use are as many
/// as the free slots, and each is a free slot of the window not named before.
///
/// # Safety
///
/// `base` is a slab, set up, of an arena whose lock the caller holds.
pub(super) unsafe fn free_list_matches(base: usize, c: &Slab) -> Result<(), Corruption> {
    let window = c.state.window as usize;
    let free = window - c.state.live as usize;
    let mut named = [0u64; MAX_CAPACITY / 64];
    for at in 0..free {
        // SAFETY: an entry in use, below the capacity.
        let index = usize::from(unsafe { free_entry(c, at).read() });
        let bit = 1 << (index % 64);
        if index >= window
            || bitmap_word(base, index / 64).load(Ordering::Relaxed) & bit != 0
            || named[index / 64] & bit != 0
        {
            return Err(Corruption::with(
                "slab free list names a slot that is not free, or twice",
                base,
                at,
                index,
            ));
        }
        named[index / 64] |= bit;
    }
    Ok(())
}

/// The most slots a slab holds (its smallest class's).
const MAX_CAPACITY: usize = Layout::of(SLOT_SIZES[0]).capacity;
