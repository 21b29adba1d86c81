//! [`LineMap`]: which 64-byte lines of the address space start a live block of one heap,
//! kept outside the blocks, so that a free can be checked without reading freed memory.
//!
//! Four bits per line: *live*, *seen* (a block started here at some point, so a free of it
//! that finds it not live is a double free rather than a foreign pointer) and two bits of
//! the block's *lead* (how far above its host allocation it starts, in 16-byte steps). An
//! allocation sets its line's bits with one `fetch_or`, a free clears *live* and the lead
//! with one `fetch_and`: no lock, no probe, no entry that outlives the block but two bits.
//!
//! The map is a two-level radix tree over the 47-bit user address space: a root of 2^17
//! entries (1 GiB each) and, under each part of the address space the heap's blocks come
//! from, a leaf of 2^24 lines (8 MiB, allocated zeroed, so its pages cost memory only where
//! blocks are). The root is 1 MiB, zeroed the same way.

use std::alloc::Layout;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Bytes per line: the alignment of every block the map records.
pub const LINE: usize = 64;
/// Address bits the map covers (the x86-64 and AArch64 user address space).
const ADDRESS_BITS: u32 = 47;
/// Lines per leaf (`2^LEAF_BITS`).
const LEAF_BITS: u32 = 24;
const ROOT_ENTRIES: usize = 1 << (ADDRESS_BITS - LINE.trailing_zeros() - LEAF_BITS);
/// Bits per line, and lines per word.
const LINE_BITS: u32 = 4;
const LINES_PER_WORD: usize = (u64::BITS / LINE_BITS) as usize;
const LEAF_WORDS: usize = (1 << LEAF_BITS) / LINES_PER_WORD;

const LIVE: u64 = 0b0001;
const SEEN: u64 = 0b0010;
const LEAD_SHIFT: u32 = 2;
const LEAD_MASK: u64 = 0b1100;

/// Steps of a block's lead (the host heap's alignment).
pub const LEAD_STEP: usize = 16;
/// The largest lead the map can record (three steps).
pub const MAX_LEAD: usize = 3 * LEAD_STEP;

/// What a free found at a line (see [`LineMap::take`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// A live block with this lead; now recorded as freed.
    Live { lead: usize },
    /// A block started here and was freed already: a double free. Nothing changed.
    Freed,
    /// No block of this heap ever started here. Nothing changed.
    Unknown,
}

/// The live blocks of one heap by line (see the [module documentation](self)).
pub struct LineMap {
    root: ptr::NonNull<AtomicPtr<AtomicU64>>,
}

// SAFETY: the root and leaves are shared memory reached only through atomics; leaves are
// installed with a compare-and-swap and freed only by `Drop`.
unsafe impl Send for LineMap {}
// SAFETY: as for `Send`.
unsafe impl Sync for LineMap {}

impl std::fmt::Debug for LineMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineMap").finish_non_exhaustive()
    }
}

fn root_layout() -> Layout {
    Layout::array::<AtomicPtr<AtomicU64>>(ROOT_ENTRIES).expect("a 1 MiB array")
}

fn leaf_layout() -> Layout {
    Layout::array::<AtomicU64>(LEAF_WORDS).expect("an 8 MiB array")
}

/// The root index, word index and shift of the line at `addr`, or `None` outside the map.
fn locate(addr: usize) -> Option<(usize, usize, u32)> {
    if !addr.is_multiple_of(LINE) || addr >> ADDRESS_BITS != 0 {
        return None;
    }
    let line = addr / LINE;
    let in_leaf = line & ((1 << LEAF_BITS) - 1);
    Some((
        line >> LEAF_BITS,
        in_leaf / LINES_PER_WORD,
        (in_leaf % LINES_PER_WORD) as u32 * LINE_BITS,
    ))
}

impl LineMap {
    /// An empty map.
    ///
    /// # Errors
    ///
    /// The host heap cannot give the root's 1 MiB.
    pub fn new() -> Result<Self, String> {
        // SAFETY: a non-zero size; all-zero bytes are null pointers.
        let root = unsafe { std::alloc::alloc_zeroed(root_layout()) };
        let root =
            ptr::NonNull::new(root.cast()).ok_or("line map: out of memory for its root (1 MiB)")?;
        Ok(Self { root })
    }

    /// An empty map whose leaves for addresses `0..bytes` exist from the start, so that
    /// [`insert`](Self::insert) of an aligned address below `bytes` cannot fail (for heaps
    /// whose offsets start at 0, as a pool's).
    ///
    /// # Errors
    ///
    /// `bytes` is beyond the map, or the host heap cannot give the root or a leaf.
    pub fn covering(bytes: u64) -> Result<Self, String> {
        if bytes > 1 << ADDRESS_BITS {
            return Err(format!(
                "line map: {bytes} bytes is beyond its 2^{ADDRESS_BITS}"
            ));
        }
        let map = Self::new()?;
        let leaf_bytes = (LINE as u64) << LEAF_BITS;
        for index in 0..bytes.div_ceil(leaf_bytes) as usize {
            map.word_or_create(index, 0)?;
        }
        Ok(map)
    }

    fn entry(&self, index: usize) -> &AtomicPtr<AtomicU64> {
        debug_assert!(index < ROOT_ENTRIES);
        // SAFETY: `index` is within the root, which lives as long as `self`.
        unsafe { &*self.root.as_ptr().add(index) }
    }

    /// The word holding the line at (`index`, `word`), or `None` where no leaf exists.
    fn word(&self, index: usize, word: usize) -> Option<&AtomicU64> {
        let leaf = self.entry(index).load(Ordering::Acquire);
        // SAFETY: a leaf installed by `word_or_create` lives as long as `self`.
        (!leaf.is_null()).then(|| unsafe { &*leaf.add(word) })
    }

    fn word_or_create(&self, index: usize, word: usize) -> Result<&AtomicU64, String> {
        if let Some(w) = self.word(index, word) {
            return Ok(w);
        }
        // SAFETY: a non-zero size; zeroed words are lines with nothing recorded.
        let fresh: *mut AtomicU64 = unsafe { std::alloc::alloc_zeroed(leaf_layout()) }.cast();
        if fresh.is_null() {
            return Err("line map: out of memory for a leaf (8 MiB of address space)".to_owned());
        }
        let leaf = match self.entry(index).compare_exchange(
            ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh,
            Err(theirs) => {
                // SAFETY: ours, never published.
                unsafe { std::alloc::dealloc(fresh.cast(), leaf_layout()) };
                theirs
            }
        };
        // SAFETY: as in `word`.
        Ok(unsafe { &*leaf.add(word) })
    }

    /// Records a live block at `addr` (64-byte aligned), `lead` bytes (a multiple of
    /// [`LEAD_STEP`], at most [`MAX_LEAD`]) above its host allocation.
    ///
    /// # Errors
    ///
    /// `addr` is unaligned or outside the map, or a leaf cannot be allocated; nothing is
    /// recorded.
    pub fn insert(&self, addr: usize, lead: usize) -> Result<(), String> {
        debug_assert!(lead.is_multiple_of(LEAD_STEP) && lead <= MAX_LEAD);
        let (index, word, shift) =
            locate(addr).ok_or_else(|| format!("line map: {addr:#x} cannot be recorded"))?;
        let bits = LIVE | SEEN | ((lead / LEAD_STEP) as u64) << LEAD_SHIFT;
        let previous = self
            .word_or_create(index, word)?
            .fetch_or(bits << shift, Ordering::Relaxed);
        debug_assert_eq!(
            (previous >> shift) & (LIVE | LEAD_MASK),
            0,
            "a line recorded live twice"
        );
        Ok(())
    }

    /// Records the block at `addr` as freed and says what it was.
    pub fn take(&self, addr: usize) -> Taken {
        let Some((index, word, shift)) = locate(addr) else {
            return Taken::Unknown;
        };
        let Some(word) = self.word(index, word) else {
            return Taken::Unknown;
        };
        let previous = word.fetch_and(!((LIVE | LEAD_MASK) << shift), Ordering::Relaxed) >> shift;
        if previous & LIVE != 0 {
            Taken::Live {
                lead: ((previous & LEAD_MASK) >> LEAD_SHIFT) as usize * LEAD_STEP,
            }
        } else if previous & SEEN != 0 {
            Taken::Freed
        } else {
            Taken::Unknown
        }
    }

    /// As [`take`](Self::take), but a line no block of this map started at (a block from
    /// before a reopen) is recorded as seen, so that freeing it again is refused as a
    /// double free. Returns [`Taken::Unknown`] for such a line.
    pub fn take_adopting(&self, addr: usize) -> Taken {
        let taken = self.take(addr);
        if taken == Taken::Unknown
            && let Some((index, word, shift)) = locate(addr)
            && let Ok(word) = self.word_or_create(index, word)
        {
            word.fetch_or(SEEN << shift, Ordering::Relaxed);
        }
        taken
    }

    /// Undoes a [`take_adopting`](Self::take_adopting) whose free then failed: the line is
    /// live again with its lead, or, if it was adopted, unknown again.
    pub fn restore(&self, addr: usize, taken: Taken) {
        let Some((index, word, shift)) = locate(addr) else {
            return;
        };
        let Some(word) = self.word(index, word) else {
            return;
        };
        match taken {
            Taken::Live { lead } => {
                let bits = LIVE | ((lead / LEAD_STEP) as u64) << LEAD_SHIFT;
                word.fetch_or(bits << shift, Ordering::Relaxed);
            }
            Taken::Unknown => {
                word.fetch_and(!(SEEN << shift), Ordering::Relaxed);
            }
            Taken::Freed => {}
        }
    }

    /// Every live block, (address, lead), each recorded as freed. Reads every leaf whole
    /// (a leaf's untouched pages read as zero without being allocated).
    pub fn drain_live(&mut self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for index in 0..ROOT_ENTRIES {
            let leaf = self.entry(index).load(Ordering::Acquire);
            if leaf.is_null() {
                continue;
            }
            for w in 0..LEAF_WORDS {
                // SAFETY: within a live leaf.
                let word = unsafe { &*leaf.add(w) };
                let mut bits = word.load(Ordering::Relaxed);
                let mut live = bits & LIVE_IN_EVERY_LINE;
                while live != 0 {
                    let shift = live.trailing_zeros();
                    let lead = ((bits >> shift) & LEAD_MASK) >> LEAD_SHIFT;
                    let line =
                        (index << LEAF_BITS) + w * LINES_PER_WORD + (shift / LINE_BITS) as usize;
                    out.push((line * LINE, lead as usize * LEAD_STEP));
                    bits &= !((LIVE | LEAD_MASK) << shift);
                    live &= live - 1;
                }
                word.store(bits, Ordering::Relaxed);
            }
        }
        out
    }
}

/// The *live* bit of every line of a word.
const LIVE_IN_EVERY_LINE: u64 = 0x1111_1111_1111_1111;

impl Drop for LineMap {
    fn drop(&mut self) {
        for index in 0..ROOT_ENTRIES {
            let leaf = self.entry(index).load(Ordering::Acquire);
            if !leaf.is_null() {
                // SAFETY: installed by `word_or_create` with this layout, freed only here.
                unsafe { std::alloc::dealloc(leaf.cast(), leaf_layout()) };
            }
        }
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.root.as_ptr().cast(), root_layout()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_live_from_insert_to_take_then_freed_and_others_are_unknown() {
        let map = LineMap::new().unwrap();
        let base = 0x7f00_1234_0000usize;
        for (i, lead) in [0, 16, 32, 48].into_iter().enumerate() {
            map.insert(base + i * LINE, lead).unwrap();
        }
        // Neighbouring lines in one word keep their own leads.
        for (i, lead) in [0, 16, 32, 48].into_iter().enumerate() {
            assert_eq!(map.take(base + i * LINE), Taken::Live { lead });
            assert_eq!(map.take(base + i * LINE), Taken::Freed);
        }
        // Reused: live again, with its new lead.
        map.insert(base, 32).unwrap();
        assert_eq!(map.take(base), Taken::Live { lead: 32 });
        assert_eq!(map.take(base + 4 * LINE), Taken::Unknown);
        assert_eq!(map.take(base + 8), Taken::Unknown, "unaligned");
        assert_eq!(map.take(0x1000_0000), Taken::Unknown, "no leaf there");
        assert_eq!(map.take(1 << 50), Taken::Unknown, "outside the map");
        assert!(map.insert(1 << 50, 0).is_err());
        assert!(map.insert(base + 8, 0).is_err());
    }

    #[test]
    fn adopted_lines_refuse_a_second_free_and_failed_frees_are_undone() {
        let map = LineMap::covering(3 << 30).unwrap();
        // Covered: inserts anywhere below 3 GiB need no new leaf.
        map.insert((3 << 30) - LINE, 16).unwrap();
        let adopted = 0x4000;
        assert_eq!(map.take_adopting(adopted), Taken::Unknown);
        assert_eq!(map.take_adopting(adopted), Taken::Freed);
        let live = 0x8000;
        map.insert(live, 48).unwrap();
        let taken = map.take_adopting(live);
        assert_eq!(taken, Taken::Live { lead: 48 });
        map.restore(live, taken);
        assert_eq!(map.take(live), Taken::Live { lead: 48 });
        let other = 0xc000;
        let taken = map.take_adopting(other);
        map.restore(other, taken);
        assert_eq!(
            map.take(other),
            Taken::Unknown,
            "an undone adoption is forgotten"
        );
        assert!(LineMap::covering(1 << 48).is_err());
    }

    #[test]
    fn drain_finds_every_live_line_across_leaves_and_words_and_only_those() {
        let mut map = LineMap::new().unwrap();
        let mut live: Vec<(usize, usize)> = (0..200usize)
            .map(|i| {
                let addr = (i % 3) * (1 << 30) + 0x5000_0000 + i * 7 * LINE;
                (addr, (i % 4) * LEAD_STEP)
            })
            .collect();
        for &(addr, lead) in &live {
            map.insert(addr, lead).unwrap();
        }
        for &(addr, _) in live.iter().step_by(5) {
            assert!(matches!(map.take(addr), Taken::Live { .. }));
        }
        live = live
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % 5 != 0)
            .map(|(_, b)| b)
            .collect();
        let mut drained = map.drain_live();
        drained.sort_unstable();
        live.sort_unstable();
        assert_eq!(drained, live);
        assert!(map.drain_live().is_empty());
        assert_eq!(map.take(live[0].0), Taken::Freed);
    }

    #[test]
    fn threads_recording_lines_of_one_word_lose_none() {
        let map = LineMap::new().unwrap();
        let base = 0x6000_0000usize;
        std::thread::scope(|s| {
            for t in 0..4 {
                let map = &map;
                s.spawn(move || {
                    for round in 0..2000 {
                        // Lines t, t + 4, t + 8, t + 12: all in the same word.
                        let addr = base + (t + 4 * (round % 4)) * LINE;
                        map.insert(addr, t % 4 * LEAD_STEP).unwrap();
                        assert_eq!(
                            map.take(addr),
                            Taken::Live {
                                lead: t % 4 * LEAD_STEP
                            }
                        );
                    }
                });
            }
        });
        for line in 0..16 {
            assert_eq!(map.take(base + line * LINE), Taken::Freed);
        }
    }
}
