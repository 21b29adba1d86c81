//! The defragmenter: budgeted compaction of one heap toward its base.
//!
//! The letter (Kokkinis et al., CAL 2022) does not publish its mechanism; this is the model
//! of `notes/hls.md`. Live blocks are visited in address order (the handle table kept in
//! address order: one table read per block visited) behind a cursor that starts at the heap
//! base — or, with [`CompactWindow::Cheapest`], at the end of the block below the cheapest
//! window, found by a first pass over the whole table (one more read per live block) that
//! picks the run of consecutive blocks whose slide opens the goal with the fewest units
//! moved. A block above the cursor is copied down to it word by word — one BRAM read and one
//! write per word, overlapped over `ports` ports — and its handle-table slot is rewritten;
//! the cursor then moves past it. The holes below the cursor merge into one free run that
//! grows right above it. Finally the bitmap words of the region that changed are rewritten.
//!
//! A call stops when
//! * the run above the cursor reaches the goal (a failed request's size, or the threshold;
//!   [`CompactWindow::Whole`] ignores the goal),
//! * the next block would take the words moved past the budget (blocks move whole, so that
//!   a handle is never left pointing at half a block), or
//! * every block has been visited.
//!
//! So a call never moves more than `budget_words` words, and its cycles are bounded by the
//! budget and the number of live blocks. Blocks only move down and keep their order.

use crate::config::{CompactWindow, DefragConfig, OnChipConfig};
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

/// The index of the first block of the cheapest window: the run of consecutive blocks
/// `i..j` whose slide down to the hole below block `i` opens a free run of at least `goal`
/// units (the holes `i..=j`, hole `k` lying just below block `k` and hole `n` at the top),
/// moving the fewest units; the lowest on a tie. `None` if the free units fall short.
fn cheapest_window(
    blocks: &[(u32, u32)],
    units: &[u32],
    heap_units: u32,
    goal: u32,
) -> Option<usize> {
    let n = blocks.len();
    // holes[k]: free units just below block k (k == n: above the last block).
    let mut holes = Vec::with_capacity(n + 1);
    let mut end = 0;
    for (k, &(start, _)) in blocks.iter().enumerate() {
        holes.push(u64::from(start - end));
        end = start + units[k];
    }
    holes.push(u64::from(heap_units - end));
    let goal = u64::from(goal);
    let (mut best, mut best_cost) = (None, u64::MAX);
    // Two pointers: for each first block i, the fewest blocks i..j whose holes i..=j reach
    // the goal; j never moves back as i grows.
    let (mut j, mut run, mut cost) = (0usize, holes[0], 0u64);
    for i in 0..=n {
        if i > 0 {
            run -= holes[i - 1];
            if j < i {
                j = i;
                run = holes[i];
                cost = 0;
            } else {
                cost -= u64::from(units[i - 1]);
            }
        }
        while run < goal && j < n {
            cost += u64::from(units[j]);
            j += 1;
            run += holes[j];
        }
        if run < goal {
            break;
        }
        if cost < best_cost {
            (best, best_cost) = (Some(i), cost);
        }
    }
    best
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
        let goal_units = goal_units.filter(|_| defrag.window != CompactWindow::Whole);
        let blocks: Vec<(u32, u32)> = self
            .by_address
            .iter()
            .map(|(&s, &slot)| (s, slot))
            .collect();

        let mut report = DefragReport::default();
        let mut cursor = 0u32;
        let mut table_reads = 0u64;
        let mut first = 0;
        if let (Some(goal), CompactWindow::Cheapest) = (goal_units, defrag.window) {
            // The search pass reads every entry once; the moving pass reads its own again.
            table_reads += blocks.len() as u64;
            let units: Vec<u32> = blocks
                .iter()
                .map(|&(_, slot)| self.table.block_mut(slot).units)
                .collect();
            if let Some(i) = cheapest_window(&blocks, &units, self.bitmap.units(), goal) {
                first = i;
                cursor = if i == 0 {
                    0
                } else {
                    blocks[i - 1].0 + units[i - 1]
                };
            }
        }
        let blocks = &blocks[first..];
        let mut accesses = 0u64;
        // The bitmap region that changed: from the first destination to the highest old end.
        let mut changed: Option<(u32, u32)> = None;
        for &(start, slot) in blocks {
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

#[cfg(test)]
mod window_tests {
    use super::*;
    use proptest::prelude::*;

    /// A 64-unit heap (4-byte units = words): A 0..20, B 22..42, C 44..46, D 50..52,
    /// E 54..62; holes of 2, 2, 4, 2 and 2 units (the largest free run is 4 units). Every
    /// block holds its own byte value.
    fn layout() -> (OnChipConfig, Heap, Vec<crate::heap::Placement>) {
        let c = OnChipConfig {
            heap_words: 64,
            ..OnChipConfig::default()
        };
        let mut heap = Heap::new(&c);
        let mut placed = Vec::new();
        for (k, (start, units)) in [(0, 20), (22, 20), (44, 2), (50, 2), (54, 8)]
            .into_iter()
            .enumerate()
        {
            placed.push(heap.place(start, units, units * 4));
            let (s, e) = (start as usize * 4, (start + units) as usize * 4);
            heap.data[s..e].fill(k as u8 + 1);
        }
        (c, heap, placed)
    }

    fn starts(heap: &mut Heap, placed: &[crate::heap::Placement]) -> Vec<u32> {
        placed
            .iter()
            .map(|p| heap.table.get(p.slot, p.generation).unwrap().start)
            .collect()
    }

    fn run(window: CompactWindow, goal: u32) -> (DefragReport, Vec<u32>) {
        let (c, mut heap, placed) = layout();
        let d = DefragConfig {
            window,
            ..DefragConfig::default()
        };
        let report = heap.compact(Some(goal), &c, &d);
        heap.check(4).unwrap();
        let now = starts(&mut heap, &placed);
        for (k, p) in placed.iter().enumerate() {
            let b = heap.table.get(p.slot, p.generation).unwrap();
            let (s, e) = (b.start as usize * 4, (b.start + b.units) as usize * 4);
            assert!(
                heap.data[s..e].iter().all(|&x| x == k as u8 + 1),
                "block {k}"
            );
        }
        assert!(report.largest_free_run_bytes >= u64::from(goal) * 4);
        (report, now)
    }

    #[test]
    fn each_window_opens_the_goal_moving_what_it_says() {
        // Goal 5 units: from the base, B and C slide (22 words); the cheapest window slides C
        // alone into the 2-unit hole below it (2 words; D alone would tie, C is lower); the
        // whole heap moves B, C, D and E (32 words).
        let (r, at) = run(CompactWindow::FromBase, 5);
        assert_eq!(
            (r.words_moved, r.blocks_moved, at),
            (22, 2, vec![0, 20, 40, 50, 54])
        );
        let (r, at) = run(CompactWindow::Cheapest, 5);
        assert_eq!(
            (r.words_moved, r.blocks_moved, at),
            (2, 1, vec![0, 22, 42, 50, 54])
        );
        let (r, at) = run(CompactWindow::Whole, 5);
        assert_eq!(
            (r.words_moved, r.blocks_moved, at),
            (32, 4, vec![0, 20, 40, 42, 44])
        );
        assert_eq!(r.largest_free_run_bytes, 12 * 4);
        // Goal 7: C and D slide (4 words) rather than B and C (22) or D and E (10).
        let (r, at) = run(CompactWindow::Cheapest, 7);
        assert_eq!((r.words_moved, at), (4, vec![0, 22, 42, 44, 54]));
        // The search reads the table once per live block, the moving pass its blocks again:
        // 4 steps + (5 + 2) reads + 2 writes + 8 accesses over 2 ports + 2 bitmap words
        // (units 42..52 are bits 168..208).
        assert_eq!(r.cycles, 4 + 7 + 2 + 4 + 2);
    }

    #[test]
    fn no_window_when_the_free_units_fall_short() {
        // Holes of 0, 5 and 5 units around two 5-unit blocks.
        let blocks = [(0, 0), (10, 1)];
        assert_eq!(cheapest_window(&blocks, &[5, 5], 20, 11), None);
        assert_eq!(cheapest_window(&blocks, &[5, 5], 20, 10), Some(1));
        // Holes of 2, 7 and 0: only sliding the first block joins enough of them.
        assert_eq!(
            cheapest_window(&[(2, 0), (10, 1)], &[1, 10], 20, 9),
            Some(0)
        );
        assert_eq!(cheapest_window(&[], &[], 20, 20), Some(0));
    }

    proptest! {
        /// On any layout, the cheapest window opens the goal and never moves more words than
        /// sliding from the base (units are words in this configuration).
        #[test]
        fn the_cheapest_window_never_moves_more_than_from_the_base(
            layout in proptest::collection::vec((0u32..6, 1u32..10), 1..12),
            goal in 1u32..40,
        ) {
            let c = OnChipConfig { heap_words: 128, ..OnChipConfig::default() };
            let mut heap = Heap::new(&c);
            let mut at = 0;
            for (hole, units) in layout {
                if at + hole + units > 128 {
                    break;
                }
                heap.place(at + hole, units, units * 4);
                at += hole + units;
            }
            let goal = goal.min(heap.free_units()).max(1);
            let moved = |window| {
                let mut h = heap.clone();
                let d = DefragConfig { window, ..DefragConfig::default() };
                let r = h.compact(Some(goal), &c, &d);
                h.check(4).unwrap();
                (r.words_moved, h.bitmap.largest_free_run())
            };
            let (from_base, run_base) = moved(CompactWindow::FromBase);
            let (cheapest, run_cheapest) = moved(CompactWindow::Cheapest);
            prop_assert!(run_base >= goal && run_cheapest >= goal);
            prop_assert!(cheapest <= from_base, "{} > {}", cheapest, from_base);
        }
    }
}
