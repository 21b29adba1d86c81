//! Size classes of the free lists, the tallies that count them, and the offsets random
//! placement draws from.

use super::*;

/// The free-list class of a free block of `size` bytes, by formula.
#[inline(always)]
pub(super) const fn class_by_formula(size: usize) -> usize {
    if size <= 1040 {
        size / GRANULE - 2
    } else {
        let log = usize::BITS as usize - 1 - size.leading_zeros() as usize;
        let sub = (size >> (log - 2)) & 3;
        let class = 64 + (log - 10) * 4 + sub;
        if class < CLASSES { class } else { CLASSES - 1 }
    }
}

/// Sizes below this find their class in [`SMALL_CLASS`].
pub(super) const TABLE_LIMIT: usize = 16 << 10;

/// The class of every block size below [`TABLE_LIMIT`], by size / 16 (one load instead of
/// a branch on `size <= 1040`, which the slacks of random offsets make a coin toss).
pub(super) static SMALL_CLASS: [u8; TABLE_LIMIT / GRANULE] = {
    let mut table = [0u8; TABLE_LIMIT / GRANULE];
    let mut i = MIN_BLOCK / GRANULE;
    while i < table.len() {
        table[i] = class_by_formula(i * GRANULE) as u8;
        i += 1;
    }
    table
};

/// The free-list class of a free block of `size` bytes (at least [`MIN_BLOCK`]).
#[inline(always)]
pub(crate) fn class_of(size: usize) -> usize {
    if size < TABLE_LIMIT {
        usize::from(SMALL_CLASS[(size / GRANULE) & (TABLE_LIMIT / GRANULE - 1)])
    } else {
        class_by_formula(size)
    }
}

/// The smallest size class `class` can hold.
#[inline]
pub(crate) fn class_floor(class: usize) -> usize {
    if class < 64 {
        32 + GRANULE * class
    } else {
        let k = class - 64;
        let log = 10 + k / 4;
        (1 << log) + (k % 4) * (1 << (log - 2))
    }
}

/// One free block of `bytes` bytes as a free-list *tally*: bytes / 16 in the high 32 bits,
/// the number of blocks in the low 32 (so that a count is read as a 32-bit word, without a
/// shift), so that one addition counts both and one load reads both. Neither half can
/// carry into the other: an arena's free bytes are at most the heap's chunks (at most `3/4`
/// of the chunk table's entries, 48 GiB; asserted in `root`), under `2^32 * 16` bytes, and
/// its free blocks at most a 32nd of that.
#[inline(always)]
pub(super) fn tally_of(bytes: u64) -> u64 {
    debug_assert!(bytes.is_multiple_of(GRANULE as u64) && bytes < 1 << 32);
    // `(bytes / 16) << 32`, as one shift: `bytes` is a multiple of 16.
    bytes << (32 - GRANULE.trailing_zeros()) | 1
}

/// The blocks a [tally](tally_of) counts.
#[inline(always)]
pub(super) fn tally_blocks(tally: u64) -> u64 {
    u64::from(tally as u32)
}

/// The bytes a [tally](tally_of) counts.
#[inline(always)]
pub(super) fn tally_bytes(tally: u64) -> u64 {
    (tally >> 32) * GRANULE as u64
}

/// The first class all of whose blocks are at least `want` bytes, and the class below it
/// that may hold some that are (when `want` is not a class floor).
#[inline]
pub(super) fn fitting_classes(want: usize) -> (usize, Option<usize>) {
    let class = class_of(want);
    if want <= 1040 || class_floor(class) == want {
        (class, None)
    } else {
        (class + 1, Some(class))
    }
}

/// The places an object of block size `need` (payload aligned to `align`) can take in a
/// block of `size` bytes at `start`, at offsets up to `max_offset`: `(count, from, step)`,
/// where the places are offset 0 if the payload is aligned there, then `from`, `from +
/// step`, ... Offsets are 0 or at least [`MIN_BLOCK`], so that any slack before the object
/// can stand as a free block.
pub(super) fn offsets(
    start: usize,
    size: usize,
    need: usize,
    align: usize,
    max_offset: usize,
) -> (usize, usize, usize) {
    // `step` is a power of two: round with masks, divide with shifts.
    let step = align.max(GRANULE);
    let mask = step - 1;
    let first = ((start + HEADER + mask) & !mask) - (start + HEADER);
    if size < need {
        return (0, first, step);
    }
    let last = max_offset.min(size - need);
    let (zero, from) = if first == 0 {
        (1, (MIN_BLOCK + mask) & !mask)
    } else if first < MIN_BLOCK {
        (0, first + ((MIN_BLOCK - first + mask) & !mask))
    } else {
        (0, first)
    };
    if zero == 0 && from > last {
        return (0, from, step);
    }
    let rest = if from <= last {
        ((last - from) >> step.trailing_zeros()) + 1
    } else {
        0
    };
    (zero + rest, from, step)
}

/// The `k`-th place of [`offsets`] (`zero`: whether offset 0 is one of them).
pub(super) fn nth_offset(zero: bool, from: usize, step: usize, k: usize) -> usize {
    match (zero, k) {
        (true, 0) => 0,
        (true, k) => from + (k - 1) * step,
        (false, k) => from + k * step,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_exact_to_1040_bytes_then_four_per_doubling() {
        for size in (32..=1040).step_by(16) {
            assert_eq!(class_floor(class_of(size)), size);
        }
        let mut last = class_of(1040);
        for size in (1056..(4 << 20)).step_by(16) {
            let class = class_of(size);
            assert!(class >= last, "classes not monotone at {size}");
            assert!(class_floor(class) <= size, "floor above size at {size}");
            assert!(class == CLASSES - 1 || size < class_floor(class + 1));
            last = class;
        }
        assert!(last < CLASSES);
    }

    #[test]
    fn the_class_table_agrees_with_the_formula() {
        for size in (MIN_BLOCK..4 * TABLE_LIMIT).step_by(GRANULE) {
            assert_eq!(class_of(size), class_by_formula(size), "size {size}");
        }
    }

    #[test]
    fn small_last_is_the_class_of_range_min() {
        assert_eq!(SMALL_LAST, class_of(RANGE_MIN));
        // Every request of at most RANGE_MIN / RANGE bytes ends its candidates there.
        assert!(class_of(RANGE_MIN / RANGE) < SMALL_LAST);
    }

    #[test]
    fn fitting_classes_hold_only_blocks_that_fit() {
        for want in (32..(300 << 10)).step_by(16) {
            let (first, partial) = fitting_classes(want);
            assert!(class_floor(first) >= want || first == class_of(want) && want <= 1040);
            if let Some(p) = partial {
                assert_eq!(p + 1, first);
                assert!(class_floor(p) < want);
            }
        }
    }

    #[test]
    fn offsets_are_zero_or_leave_room_for_a_free_block_and_respect_alignment() {
        for align in [16usize, 32, 64, 256, 4096] {
            for start in [0x1000usize, 0x1010, 0x1020, 0x1030] {
                for size in [32usize, 48, 64, 96, 200 * 16, 8192] {
                    let need = 32;
                    let want = need + if align > 16 { align + 16 } else { 0 };
                    let (count, from, step) = offsets(start, size, need, align, usize::MAX);
                    let zero = (start + HEADER).is_multiple_of(align);
                    if size >= want {
                        assert!(count > 0, "no place for {need} in {size} at {align}");
                    }
                    for k in 0..count {
                        let o = nth_offset(zero, from, step, k);
                        assert!(o == 0 || o >= MIN_BLOCK);
                        assert!(o + need <= size);
                        assert_eq!((start + o + HEADER) % align, 0);
                    }
                }
            }
        }
    }

    #[test]
    fn the_payload_alignment_shortcut_of_place_agrees_with_offsets() {
        // `place` computes the places at 16-byte alignment without `offsets`.
        for start in (0x1000usize..0x1040).step_by(16) {
            for room in (32usize..1200).step_by(16) {
                for need in [32usize, 48, 80, 272] {
                    for max_offset in [0usize, 16, 32, 48, 1000, WINDOW, usize::MAX] {
                        if room < need {
                            continue;
                        }
                        let (count, from, step) = offsets(start, room, need, 16, max_offset);
                        let last = max_offset.min(room - need);
                        let short = if last >= MIN_BLOCK {
                            (last - MIN_BLOCK) / GRANULE + 2
                        } else {
                            1
                        };
                        assert_eq!(count, short, "{start:#x} {room} {need} {max_offset}");
                        for k in 0..count {
                            let o = if k == 0 {
                                0
                            } else {
                                MIN_BLOCK + (k - 1) * GRANULE
                            };
                            assert_eq!(nth_offset(true, from, step, k), o);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_offset_count_is_every_aligned_offset_but_those_below_a_free_block() {
        // A 128-byte block, 32-byte object, 16-byte alignment: offsets 0, 32, 48, ..., 96.
        let (count, from, step) = offsets(0x2000, 128, 32, 16, usize::MAX);
        assert_eq!((count, from, step), (6, 32, 16));
        // Capped by a window.
        assert_eq!(offsets(0x2000, 128, 32, 16, 48).0, 3);
    }
}
