//! The free map of one heap, and first fit over it.
//!
//! **Storage.** One bit per allocation unit, packed in `u64`s (bit set: the unit belongs to a
//! live block). Every block covers whole units, so the free map the hardware keeps — one bit
//! per byte or per word, `bits_per_unit` bits per unit — is this one with each bit repeated
//! `bits_per_unit` times; [`Bitmap::hardware_bit`] reads it that way. The cycle costs are
//! counted in words of *that* bitmap (`word_bits` bits each), so a bit-per-byte map costs
//! `bits_per_unit` times more words to scan than a bit-per-word one over the same bytes.
//!
//! **First fit with word masks** (Memluv): the FSM streams bitmap words from the start
//! position; a run of free bits may begin inside one word (head mask), cover whole zero words
//! and end inside another (tail mask). Each word is read once, so a scan costs the number of
//! bitmap words from the one holding the start position to the one holding the last unit of
//! the run found (or the heap's end). With a cached start position the scan wraps around to
//! the base once and costs the words of both passes.

/// The free map of one heap.
#[derive(Clone, Debug)]
pub(crate) struct Bitmap {
    bits: Vec<u64>,
    units: u32,
    /// Hardware bitmap bits per unit.
    bits_per_unit: u32,
    /// Bits per hardware bitmap word.
    word_bits: u32,
}

/// What one first-fit scan found and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scan {
    /// The first unit of the run found.
    pub found: Option<u32>,
    /// Hardware bitmap words read.
    pub words_read: u64,
}

impl Bitmap {
    pub(crate) fn new(units: u32, bits_per_unit: u32, word_bits: u32) -> Self {
        Self {
            bits: vec![0; (units as usize).div_ceil(64)],
            units,
            bits_per_unit,
            word_bits,
        }
    }

    pub(crate) fn units(&self) -> u32 {
        self.units
    }

    pub(crate) fn is_set(&self, unit: u32) -> bool {
        self.bits[(unit / 64) as usize] >> (unit % 64) & 1 == 1
    }

    /// The bit of the hardware free map that covers granule `granule` (a byte, or a word).
    pub(crate) fn hardware_bit(&self, granule: u64) -> bool {
        self.is_set((granule / u64::from(self.bits_per_unit)) as u32)
    }

    /// Sets (`used`) or clears every unit of `start .. start + len`.
    pub(crate) fn fill(&mut self, start: u32, len: u32, used: bool) {
        let (mut unit, end) = (start, start + len);
        debug_assert!(end <= self.units);
        while unit < end {
            let word = (unit / 64) as usize;
            let lo = unit % 64;
            let n = (end - unit).min(64 - lo);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << lo
            };
            if used {
                self.bits[word] |= mask;
            } else {
                self.bits[word] &= !mask;
            }
            unit += n;
        }
    }

    /// Whether every unit of `start .. start + len` is in the state `used`.
    pub(crate) fn all(&self, start: u32, len: u32, used: bool) -> bool {
        (start..start + len).all(|u| self.is_set(u) == used)
    }

    /// The first unit at or after `from` whose bit is `used`; `self.units` if none.
    fn next(&self, from: u32, used: bool) -> u32 {
        if from >= self.units {
            return self.units;
        }
        let mut word = (from / 64) as usize;
        let flip = if used { 0 } else { u64::MAX };
        let mut bits = (self.bits[word] ^ flip) & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                let unit = word as u32 * 64 + bits.trailing_zeros();
                return unit.min(self.units);
            }
            word += 1;
            if word == self.bits.len() {
                return self.units;
            }
            bits = self.bits[word] ^ flip;
        }
    }

    /// The first free run of at least `need` units starting in `from .. limit` (it may extend
    /// past `limit`), and the unit after the last one the scan looked at.
    fn first_run(&self, from: u32, limit: u32, need: u32) -> (Option<u32>, u32) {
        let mut pos = from;
        loop {
            let free = self.next(pos, false);
            if free >= limit || free >= self.units {
                return (None, limit.min(self.units));
            }
            let used = self.next(free, true);
            if used - free >= need {
                return (Some(free), free + need);
            }
            pos = used;
        }
    }

    /// Hardware bitmap words spanned by units `start .. end` (`end > start`).
    pub(crate) fn words_spanned(&self, start: u32, end: u32) -> u64 {
        if end <= start {
            return 0;
        }
        let (bpu, wb) = (u64::from(self.bits_per_unit), u64::from(self.word_bits));
        let first = u64::from(start) * bpu / wb;
        let last = (u64::from(end) * bpu - 1) / wb;
        last - first + 1
    }

    /// First fit for `need` units, scanning from `start` (to the end, then from the base).
    pub(crate) fn first_fit(&self, need: u32, start: u32) -> Scan {
        let start = if start >= self.units { 0 } else { start };
        let (found, scanned_to) = self.first_run(start, self.units, need);
        let mut words_read = self.words_spanned(start, scanned_to);
        if found.is_some() || start == 0 {
            return Scan { found, words_read };
        }
        // Wrap: runs that start before the cached position (they may cross it).
        let (found, scanned_to) = self.first_run(0, start, need);
        words_read += self.words_spanned(0, scanned_to.max(1));
        Scan { found, words_read }
    }

    /// The longest run of free units.
    pub(crate) fn largest_free_run(&self) -> u32 {
        let (mut pos, mut best) = (0, 0);
        while pos < self.units {
            let free = self.next(pos, false);
            if free >= self.units {
                break;
            }
            let used = self.next(free, true);
            best = best.max(used - free);
            pos = used;
        }
        best
    }

    /// Hardware bitmap words in the whole map.
    pub(crate) fn total_words(&self) -> u64 {
        self.words_spanned(0, self.units)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_finds_the_lowest_run_that_is_long_enough() {
        let mut b = Bitmap::new(200, 1, 32);
        b.fill(0, 10, true);
        b.fill(13, 50, true); // hole of 3 at 10
        b.fill(70, 100, true); // hole of 7 at 63, hole of 30 at 170
        assert_eq!(b.first_fit(3, 0).found, Some(10));
        assert_eq!(b.first_fit(4, 0).found, Some(63));
        assert_eq!(b.first_fit(8, 0).found, Some(170));
        assert_eq!(b.first_fit(31, 0).found, None);
        assert_eq!(b.largest_free_run(), 30);
        // From a cached position past every hole, the scan wraps to the base.
        assert_eq!(b.first_fit(3, 180).found, Some(180));
        assert_eq!(b.first_fit(25, 180).found, Some(170));
        assert_eq!(b.first_fit(5, 175).found, Some(175));
        assert_eq!(b.first_fit(3, 190).found, Some(190));
        assert_eq!(b.first_fit(11, 190).found, Some(170));
    }

    #[test]
    fn scans_cost_the_hardware_words_they_cross() {
        // 4 bits per unit, 32-bit words: 8 units per word.
        let mut b = Bitmap::new(64, 4, 32);
        assert_eq!(b.total_words(), 8);
        // An empty map: the first word holds the run.
        assert_eq!(b.first_fit(8, 0).words_read, 1);
        assert_eq!(b.first_fit(9, 0).words_read, 2);
        b.fill(0, 20, true);
        // The run starts at unit 20 (word 2) and ends at 23: words 0, 1, 2.
        assert_eq!(
            b.first_fit(4, 0),
            Scan {
                found: Some(20),
                words_read: 3
            }
        );
        // A failed scan reads every word.
        assert_eq!(
            b.first_fit(45, 0),
            Scan {
                found: None,
                words_read: 8
            }
        );
        assert!(b.hardware_bit(79) && !b.hardware_bit(80));
    }

    #[test]
    fn fill_sets_and_clears_exactly_the_range_across_words() {
        let mut b = Bitmap::new(300, 1, 8);
        b.fill(60, 140, true);
        assert!(b.all(60, 140, true) && b.all(0, 60, false) && b.all(200, 100, false));
        b.fill(64, 64, false);
        assert!(b.all(60, 4, true) && b.all(64, 64, false) && b.all(128, 72, true));
        assert_eq!(b.largest_free_run(), 100);
    }
}
