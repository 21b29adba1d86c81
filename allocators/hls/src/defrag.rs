//! The defragmenter: budgeted compaction of one heap toward its base.
//!
//! The letter (Kokkinis et al., CAL 2022) does not publish its mechanism; this is the model
//! of `notes/hls.md`. Live blocks are visited in address order (the handle table kept in
//! address order: one table read per block visited) behind a cursor that starts at the heap
//! base. A block above the cursor is copied down to it word by word — one BRAM read and one
//! write per word, overlapped over `ports` ports — and its handle-table slot is rewritten;
//! the cursor then moves past it. The holes below the cursor merge into one free run that
//! grows right above it. Finally the bitmap words of the region that changed are rewritten.
//!
//! A call stops when
//! * the run above the cursor reaches the goal (a failed request's size, or the threshold),
//! * the next block would take the words moved past the budget (blocks move whole, so that
//!   a handle is never left pointing at half a block), or
//! * every block has been visited.
//!
//! So a call never moves more than `budget_words` words, and its cycles are bounded by the
//! budget and the number of live blocks. Blocks only move down and keep their order.

use crate::config::{DefragConfig, OnChipConfig};
use crate::heap::Heap;

/// What one defragmentation call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DefragReport {
    /// Heap words moved (each read once and written once); at most the budget.
    pub words_moved: u64,
    /// Blocks relocated (each one handle-table write).
    pub blocks_moved: u32,
    /// Cycles the call took.
    pub cycles: u64,
    /// Whether it stopped because the next block would have exceeded the budget.
    pub budget_exhausted: bool,
    /// The largest free run of the heap afterwards, in bytes.
    pub largest_free_run_bytes: u64,
}

/// Heap words spanned by bytes `start .. end`.
fn words_spanned(start: u64, end: u64, word_bytes: u64) -> u64 {
    if end <= start {
        0
    } else {
        (end - 1) / word_bytes - start / word_bytes + 1
    }
}

impl Heap {
    /// Compacts toward the base until a free run of `goal_units` units exists (or, with
    /// `None`, as far as the budget allows).
    pub(crate) fn compact(
        &mut self,
        goal_units: Option<u32>,
        config: &OnChipConfig,
        defrag: &DefragConfig,
    ) -> DefragReport {
        let costs = &config.costs;
        let unit = u64::from(config.unit_bytes());
        let word = u64::from(config.word_bytes());
        let budget = u64::from(defrag.budget_words);
        let blocks: Vec<(u32, u32)> = self
            .by_address
            .iter()
            .map(|(&s, &slot)| (s, slot))
            .collect();

        let mut report = DefragReport::default();
        let mut cursor = 0u32;
        let mut table_reads = 0u64;
        let mut accesses = 0u64;
        // The bitmap region that changed: from the first destination to the highest old end.
        let mut changed: Option<(u32, u32)> = None;
        for (start, slot) in blocks {
            if goal_units.is_some_and(|g| start - cursor >= g) {
                break;
            }
            table_reads += 1;
            let units = self.table.block_mut(slot).units;
            if start > cursor {
                let (src, dst) = (u64::from(start) * unit, u64::from(cursor) * unit);
                let len = u64::from(units) * unit;
                let reads = words_spanned(src, src + len, word);
                let writes = words_spanned(dst, dst + len, word);
                let moved = reads.max(writes);
                if report.words_moved + moved > budget {
                    report.budget_exhausted = true;
                    break;
                }
                self.data
                    .copy_within(src as usize..(src + len) as usize, dst as usize);
                self.table.block_mut(slot).start = cursor;
                self.by_address.remove(&start);
                self.by_address.insert(cursor, slot);
                report.words_moved += moved;
                report.blocks_moved += 1;
                accesses += reads + writes;
                let (lo, hi) = changed.unwrap_or((cursor, start + units));
                changed = Some((lo.min(cursor), hi.max(start + units)));
            }
            cursor += units;
        }

        let mut bitmap_writes = 0;
        if let Some((lo, hi)) = changed {
            self.bitmap.fill(lo, hi - lo, false);
            for (&start, &slot) in self.by_address.range(lo..hi) {
                let units = self.table.block_mut(slot).units;
                self.bitmap.fill(start, units, true);
            }
            bitmap_writes = self.bitmap.words_spanned(lo, hi);
            // The merged run starts right above the moved blocks.
            self.next_start = cursor.min(self.bitmap.units());
        }
        let ports = u64::from(defrag.ports);
        report.cycles = config.costs.defrag_fsm_steps * costs.fsm_step
            + (table_reads + u64::from(report.blocks_moved)) * costs.handle_table_access
            + accesses.div_ceil(ports) * costs.heap_word_access
            + bitmap_writes * costs.bitmap_word_write;
        report.largest_free_run_bytes = u64::from(self.bitmap.largest_free_run()) * unit;
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> OnChipConfig {
        OnChipConfig {
            heap_words: 64,
            ..OnChipConfig::default()
        }
    }

    #[test]
    fn full_compaction_leaves_one_free_run_and_keeps_bytes() {
        let c = config();
        let mut heap = Heap::new(&c);
        let a = heap.place(0, 4, 16);
        let _gap = heap.place(4, 4, 16);
        let b = heap.place(8, 8, 32);
        heap.data[32..64].copy_from_slice(&[7u8; 32]);
        heap.release(_gap.slot, _gap.generation);
        let d = DefragConfig::default();
        let report = heap.compact(None, &c, &d);
        assert_eq!(report.blocks_moved, 1);
        assert_eq!(report.words_moved, 8);
        assert_eq!(report.largest_free_run_bytes, 256 - 48);
        assert_eq!(heap.table.get(b.slot, b.generation).unwrap().start, 4);
        assert_eq!(heap.table.get(a.slot, a.generation).unwrap().start, 0);
        assert_eq!(&heap.data[16..48], &[7u8; 32]);
        heap.check(4).unwrap();
        // 4 steps + 2 table reads + 1 table write + 16 accesses over 2 ports + 2 bitmap words
        // (units 4..16 are bitmap bits 16..64).
        assert_eq!(report.cycles, 4 + 3 + 8 + 2);
    }

    #[test]
    fn the_budget_stops_before_a_block_that_would_exceed_it() {
        let c = config();
        let mut heap = Heap::new(&c);
        let gap = heap.place(0, 2, 8);
        heap.place(2, 4, 16);
        heap.place(6, 8, 32);
        heap.release(gap.slot, gap.generation);
        let d = DefragConfig {
            budget_words: 10,
            ..DefragConfig::default()
        };
        let report = heap.compact(None, &c, &d);
        assert_eq!((report.words_moved, report.blocks_moved), (4, 1));
        assert!(report.budget_exhausted);
        heap.check(4).unwrap();
    }
}
