//! Inspection: counters, the heap walk that checks every invariant, and what it reports.

use super::class::*;
use super::header::*;
use super::*;

/// Counters of the heap, as [`Randomized::counters`](crate::Randomized::counters) reports
/// them (summed over the arenas).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes in live blocks (headers and rounding included).
    pub live_bytes: u64,
    /// Bytes mapped from the OS (chunks and huge blocks).
    pub mapped_bytes: u64,
    /// The most `mapped_bytes` has been (per arena, summed: an upper bound).
    pub peak_mapped_bytes: u64,
    /// Bytes on the free lists (the pool placement chooses from).
    pub free_list_bytes: u64,
    /// Bytes left in the wildernesses.
    pub wilderness_bytes: u64,
    /// Bytes given back to the OS with `madvise` so far.
    pub released_bytes: u64,
    /// Successful allocations.
    pub allocations: u64,
    /// Frees.
    pub deallocations: u64,
}

/// What the heap walk says of free memory that does not read as freed memory should.
pub(super) const FREE_MEMORY_MODIFIED: &str =
    "free memory modified (a write after free, or a heap bug)";

impl Counters {
    /// Adds `other` to these counters.
    pub(crate) fn add(&mut self, other: &Counters) {
        self.live_bytes += other.live_bytes;
        self.mapped_bytes += other.mapped_bytes;
        self.peak_mapped_bytes += other.peak_mapped_bytes;
        self.free_list_bytes += other.free_list_bytes;
        self.wilderness_bytes += other.wilderness_bytes;
        self.released_bytes += other.released_bytes;
        self.allocations += other.allocations;
        self.deallocations += other.deallocations;
    }
}

impl Arena {
    /// A snapshot of the counters.
    pub(crate) fn counters(&self) -> Counters {
        Counters {
            live_bytes: self.live_bytes,
            mapped_bytes: self.mapped_bytes,
            peak_mapped_bytes: self.peak_mapped_bytes,
            free_list_bytes: self.pool(),
            wilderness_bytes: if self.wild == 0 {
                0
            } else {
                (self.wild_end - self.wild) as u64
            },
            released_bytes: self.released_bytes,
            allocations: self.allocations,
            deallocations: self.deallocations,
        }
    }

    /// Walks one chunk of this arena from `first` (its first block) to its sentinel at
    /// `sentinel`, checking every header and link, and adds what it found to `shape`.
    ///
    /// # Safety
    ///
    /// The chunk is this arena's and its lock is held.
    pub(crate) unsafe fn check_chunk(
        &self,
        first: usize,
        sentinel: usize,
        shape: &mut HeapShape,
    ) -> Result<(), Corruption> {
        let mut h = first;
        let mut prev = 0usize;
        let mut prev_free = false;
        loop {
            // SAFETY: `h` walks block boundaries of a live chunk, from its first block to
            // its sentinel, each step checked against the chunk's end.
            let Some((w0, p)) = (unsafe { get(self.key, h) }) else {
                return Err(Corruption::at("block header fails its keyed check", h));
            };
            if p != prev {
                return Err(Corruption::with(
                    "previous-size field disagrees with the previous block",
                    h,
                    p,
                    prev,
                ));
            }
            let size = w0 & !FLAGS;
            if w0 & INTERNAL != 0 {
                if h != sentinel {
                    return Err(Corruption::at("sentinel before the chunk's end", h));
                }
                return Ok(());
            }
            if size < MIN_BLOCK || !size.is_multiple_of(GRANULE) || h + size > sentinel {
                return Err(Corruption::with("impossible block size", h, size, 0));
            }
            let free = w0 & BUSY == 0;
            if free && prev_free {
                return Err(Corruption::at("two free neighbours not coalesced", h));
            }
            if free && self.zero_fill {
                // SAFETY: a free block of this chunk, past its header and links.
                if let Some(at) = unsafe { self.first_dirty(h + MIN_BLOCK, h + size) } {
                    return Err(Corruption::at(FREE_MEMORY_MODIFIED, at));
                }
            }
            if w0 & WILD != 0 {
                if h != self.wild || h + size != sentinel {
                    return Err(Corruption::at(
                        "wilderness flag on a block that is not the wilderness",
                        h,
                    ));
                }
                // The wilderness ends the walk: its chunk's sentinel is written when it
                // retires.
                shape.wilderness_bytes += size as u64;
                return Ok(());
            } else if free {
                shape.free_blocks += 1;
                shape.free_bytes += size as u64;
            } else {
                // A queued block's payload may have been zeroed by the thread that queued
                // it, canary included (checked then).
                let checked = self.canaries && w0 & (HUGE | INTERNAL) == 0;
                // SAFETY: a busy block of this chunk, under the lock.
                if checked && unsafe { check_canary(self.key, h, size) }.is_err() {
                    return Err(Corruption::at(
                        "canary overwritten (a write past the end of a block)",
                        h + HEADER,
                    ));
                }
                shape.live_blocks += 1;
                shape.live_bytes += size as u64;
            }
            prev_free = free;
            prev = size;
            h += size;
        }
    }

    /// Checks this arena's lists (members free, of their class, links both ways, byte
    /// totals) and that they hold `free_bytes`, the free bytes its chunks hold, and that
    /// its live counter says `live_bytes`.
    ///
    /// # Safety
    ///
    /// The lock is held.
    pub(crate) unsafe fn check_lists(
        &self,
        free_bytes: u64,
        live_bytes: u64,
    ) -> Result<(), Corruption> {
        let mut listed = 0u64;
        for class in 0..CLASSES {
            let end = self.sentinel(class);
            let mut h = self.oldest(class);
            let mut before = end;
            let mut bytes = 0u64;
            let mut members = 0u64;
            let tally = self.class_tally[class];
            while h != end {
                members += 1;
                if members > tally_blocks(tally) {
                    return Err(Corruption::with(
                        "free list longer than its class count (a cycle?)",
                        h,
                        class,
                        0,
                    ));
                }
                // SAFETY: list members are free blocks of this arena.
                let Some((w0, _)) = (unsafe { get(self.key, h) }) else {
                    return Err(Corruption::with(
                        "free-list member fails its keyed check",
                        h,
                        class,
                        0,
                    ));
                };
                if w0 & (BUSY | WILD) != 0 || class_of(w0 & !FLAGS) != class {
                    return Err(Corruption::with(
                        "free-list member is not a free block of the class",
                        h,
                        class,
                        0,
                    ));
                }
                // SAFETY: as above.
                if unsafe { rd(h + PREV) } != before {
                    return Err(Corruption::with("free-list back link broken", h, class, 0));
                }
                bytes += (w0 & !FLAGS) as u64;
                before = h;
                // SAFETY: as above.
                h = unsafe { rd(h + NEXT) };
            }
            // SAFETY: the sentinel's words lie in the control block.
            let tail = unsafe { rd(end + PREV) };
            if tail != before {
                return Err(Corruption::with(
                    "free-list tail is not its last member",
                    tail,
                    class,
                    0,
                ));
            }
            if tally_blocks(tally) != members {
                return Err(Corruption::with(
                    "class block count disagrees with the list",
                    class,
                    tally_blocks(tally) as usize,
                    members as usize,
                ));
            }
            if tally_bytes(tally) != bytes {
                return Err(Corruption::with(
                    "class byte total disagrees with the list",
                    class,
                    tally_bytes(tally) as usize,
                    bytes as usize,
                ));
            }
            listed += bytes;
        }
        for g in 0..CLASSES / GROUP {
            let sum: u64 = self.class_tally[g * GROUP..(g + 1) * GROUP].iter().sum();
            if sum != self.group_tally[g] {
                return Err(Corruption::with(
                    "group tally (blocks and bytes) disagrees with its classes",
                    g,
                    sum as usize,
                    self.group_tally[g] as usize,
                ));
            }
        }
        let small: u64 = self.class_tally[..=SMALL_LAST].iter().sum();
        if small != self.small_tally {
            return Err(Corruption::with(
                "running tally of the small classes disagrees with the lists",
                self.index,
                small as usize,
                self.small_tally as usize,
            ));
        }
        if listed != free_bytes || listed != self.pool() {
            return Err(Corruption::with(
                "free bytes in chunks disagree with the lists",
                self.index,
                free_bytes as usize,
                listed as usize,
            ));
        }
        if live_bytes != self.live_bytes {
            return Err(Corruption::with(
                "live-byte counter disagrees with the live blocks",
                self.index,
                live_bytes as usize,
                self.live_bytes as usize,
            ));
        }
        Ok(())
    }

    /// Where the wilderness is (0 if none): for the walk, which must know which chunk has it.
    pub(crate) fn wilderness(&self) -> usize {
        self.wild
    }
}

/// A broken invariant that [`Randomized::check`](crate::Randomized::check) found. Plain data, so that it can be built with
/// the lock held (formatting it would allocate, perhaps from this very heap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corruption {
    /// Which invariant.
    pub what: &'static str,
    /// The block (or chunk) where it broke; 0 for heap-wide totals.
    pub address: usize,
    /// Two figures that disagree, where there are some (else 0).
    pub found: (usize, usize),
}

impl Corruption {
    pub(crate) fn at(what: &'static str, address: usize) -> Self {
        Self::with(what, address, 0, 0)
    }

    pub(crate) fn with(what: &'static str, address: usize, a: usize, b: usize) -> Self {
        Self {
            what,
            address,
            found: (a, b),
        }
    }
}

impl core::fmt::Display for Corruption {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} at {:#x}", self.what, self.address)?;
        if self.found != (0, 0) {
            write!(f, " (found {} and {})", self.found.0, self.found.1)?;
        }
        Ok(())
    }
}

impl core::error::Error for Corruption {}

/// What [`Randomized::check`](crate::Randomized::check) found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapShape {
    /// Chunks of blocks.
    pub chunks: u64,
    /// Huge blocks (own mappings).
    pub huge_blocks: u64,
    /// Live blocks in chunks.
    pub live_blocks: u64,
    /// Free blocks on the lists.
    pub free_blocks: u64,
    /// Bytes in live blocks (huge ones included), headers included.
    pub live_bytes: u64,
    /// Bytes in free blocks.
    pub free_bytes: u64,
    /// Bytes in the wilderness.
    pub wilderness_bytes: u64,
    /// Live zero-size blocks (pointers into the inaccessible region, no bytes).
    pub zero_size_blocks: u64,
}

impl HeapShape {
    /// Adds an arena's chunks, blocks and bytes (`other`) to this heap's.
    pub(crate) fn add_arena(&mut self, other: &HeapShape) {
        self.chunks += other.chunks;
        self.live_blocks += other.live_blocks;
        self.free_blocks += other.free_blocks;
        self.live_bytes += other.live_bytes;
        self.free_bytes += other.free_bytes;
        self.wilderness_bytes += other.wilderness_bytes;
    }
}
