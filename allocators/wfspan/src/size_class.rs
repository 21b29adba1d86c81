//! Size classes: 16 B steps up to 128 B, then four classes per power of two, up to a
//! quarter of the span (16 KiB with 64 KiB spans): at most 25% internal fragmentation above
//! 128 B.
//!
//! ```text
//!   class  0..=7 : 16, 32, 48, ..., 128
//!   class  8..   : for each power of two 2^k (k >= 7): 2^k + {1,2,3,4} * 2^(k-2)
//!                  160, 192, 224, 256, 320, 384, 448, 512, 640, ...
//!                  ..., 10240, 12288, 14336, 16384, 20480, ...
//! ```
//!
//! Spans are aligned to their size and a span's blocks start at its start, so every block's
//! address is a multiple of the largest power of two dividing its class size. A request
//! with an alignment above 16 takes the smallest class at least as large whose size that
//! power of two covers. (A span is all blocks — its header is in the region's table — so
//! the classes that divide the span fill it: four 16 KiB blocks, eight of 8 KiB. While the
//! header sat at the span's start, a 16 KiB span held three, and a class of 15 KiB, four of
//! which fit beside the header, took requests of 14,337 to 15,360 bytes; without the
//! header it saved nothing, and went.)

/// The smallest block.
pub const MIN_BLOCK_BYTES: usize = 16;
/// Classes of 16 B steps.
const FINE_CLASSES: usize = 8;
const FINE_MAX: usize = FINE_CLASSES * MIN_BLOCK_BYTES;
/// The most classes any span size can have (spans up to 4 MiB: blocks up to 1 MiB).
pub const MAX_CLASSES: usize = FINE_CLASSES + 4 * 13;

/// The class of `size >= 1` among 16-byte steps and four classes per power of two.
const fn four_per_octave_class(size: usize) -> usize {
    if size <= FINE_MAX {
        size.div_ceil(MIN_BLOCK_BYTES) - 1
    } else {
        let s = size - 1;
        let k = (usize::BITS - 1 - s.leading_zeros()) as usize;
        FINE_CLASSES + (k - 7) * 4 + ((s >> (k - 2)) & 3)
    }
}

/// The block size of class `class`.
#[inline]
pub const fn class_bytes(class: usize) -> usize {
    if class < FINE_CLASSES {
        (class + 1) * MIN_BLOCK_BYTES
    } else {
        let k = 7 + (class - FINE_CLASSES) / 4;
        let sub = (class - FINE_CLASSES) % 4;
        (1 << k) + (sub + 1) * (1 << (k - 2))
    }
}

/// The class of a `size`-byte request (`size >= 1`; 0 is classed as 1), whatever the span
/// size.
#[inline]
pub const fn class_of(size: usize) -> usize {
    four_per_octave_class(if size == 0 { 1 } else { size })
}

/// The alignment every block of `class` has (a span's first block starts at a multiple of
/// it): the largest power of two dividing the class size.
#[inline]
pub const fn class_align(class: usize) -> usize {
    1 << class_bytes(class).trailing_zeros()
}

/// Sizes up to this are classed by a table lookup, without a bit scan (16 KiB: the largest
/// class of the default span size).
const COARSE_TABLE_MAX: usize = 16 << 10;
/// Entries of [`CLASS_TABLE`]: one per 16 bytes up to [`COARSE_TABLE_MAX`].
const TABLE_ENTRIES: usize = COARSE_TABLE_MAX / MIN_BLOCK_BYTES + 1;

/// The class of `size <= COARSE_TABLE_MAX`: `CLASS_TABLE[(size + 15) / 16]`. One entry per
/// 16 bytes, 1 KiB in all: one add, one shift and one load, with no branch on the size
/// (request sizes are often random). A table of 16-byte steps up to 1 KiB and 256-byte
/// steps above, chosen by a conditional move, was 130 bytes but took five more
/// instructions on every `malloc`; the entries of the common small sizes share the first
/// cache lines either way.
static CLASS_TABLE: [u8; TABLE_ENTRIES] = {
    let mut table = [0u8; TABLE_ENTRIES];
    let mut i = 1;
    while i < TABLE_ENTRIES {
        table[i] = class_of(i * MIN_BLOCK_BYTES) as u8;
        i += 1;
    }
    table
};

/// The index of `size <= COARSE_TABLE_MAX` in [`CLASS_TABLE`] (0 for size 0, whose class is
/// the 16-byte one).
#[inline(always)]
fn table_index(size: usize) -> usize {
    // A shift rather than `div_ceil` (`size` is small: no overflow).
    (size + MIN_BLOCK_BYTES - 1) >> MIN_BLOCK_BYTES.trailing_zeros()
}

/// The class of `size`: one table load.
///
/// # Safety
///
/// `size` is at most a [`table_limit`] (16 KiB at most).
#[inline(always)]
pub unsafe fn table_class(size: usize) -> usize {
    debug_assert!(size <= COARSE_TABLE_MAX);
    // SAFETY: `table_index` of a size up to `COARSE_TABLE_MAX` is at most
    // `TABLE_ENTRIES - 1`, the table's last index.
    unsafe { *CLASS_TABLE.get_unchecked(table_index(size)) as usize }
}

/// The largest size [`table_class`] may be asked of with classes up to `max_class`: every
/// size up to it has a class of at most `max_class`.
pub const fn table_limit(max_class: usize) -> usize {
    let largest = class_bytes(max_class);
    if largest < COARSE_TABLE_MAX {
        largest
    } else {
        COARSE_TABLE_MAX
    }
}

/// The class of a request with at most 16-byte alignment among classes up to `max_class`
/// (the fast path: a table load up to 16 KiB, a bit scan above), or `None`.
#[inline]
pub fn small_class(size: usize, align: usize, max_class: usize) -> Option<usize> {
    if align > MIN_BLOCK_BYTES {
        return None;
    }
    let class = if size <= COARSE_TABLE_MAX {
        // SAFETY: `table_index` of a size up to `COARSE_TABLE_MAX` is at most
        // `TABLE_ENTRIES - 1`, the table's last index.
        unsafe { *CLASS_TABLE.get_unchecked(table_index(size)) as usize }
    } else {
        class_of(size)
    };
    let class = crate::bug::class_for_size(class, size);
    (class <= max_class).then_some(class)
}

/// The class serving `size` bytes at alignment `align` among classes up to `max_class`, or
/// `None` if none does. Takes at most [`MAX_CLASSES`] steps (in practice one to four).
#[inline]
pub fn class_for(size: usize, align: usize, max_class: usize) -> Option<usize> {
    if align <= MIN_BLOCK_BYTES {
        return small_class(size, align, max_class);
    }
    let mut class = class_of(size.max(align).max(1));
    while class <= max_class {
        if class_align(class) >= align {
            return Some(class);
        }
        class += 1;
    }
    None
}

/// The number of classes for spans of `span_bytes`: blocks up to a quarter of the span.
pub const fn class_count(span_bytes: usize) -> usize {
    class_of(span_bytes / 4) + 1
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_size_maps_to_the_smallest_class_that_holds_it() {
        for size in 1..=16384 {
            let c = class_of(size);
            assert!(class_bytes(c) >= size, "class {c} too small for {size}");
            if c > 0 {
                assert!(
                    class_bytes(c - 1) < size,
                    "class {} would hold {size}",
                    c - 1
                );
            }
        }
    }

    #[test]
    fn the_class_tables_agree_with_the_computed_class() {
        for size in 0..=(COARSE_TABLE_MAX + 4096) {
            for max_class in [class_count(16 << 10) - 1, 36, MAX_CLASSES - 1] {
                let expected = Some(class_of(size)).filter(|&c| c <= max_class);
                assert_eq!(small_class(size, 16, max_class), expected, "size {size}");
                assert_eq!(small_class(size, 8, max_class), expected, "size {size}");
            }
        }
        assert_eq!(small_class(64, 32, 36), None);
    }

    #[test]
    fn the_table_limit_keeps_every_tabled_class_among_the_allocators_classes() {
        for span_bytes in [16 << 10, 32 << 10, 64 << 10, 1 << 20, 4 << 20] {
            let max_class = class_count(span_bytes) - 1;
            let limit = table_limit(max_class);
            assert!(limit <= COARSE_TABLE_MAX);
            for size in 0..=limit {
                // SAFETY: `size` is at most a table limit.
                let class = unsafe { table_class(size) };
                assert_eq!(class, class_of(size), "size {size}");
                assert!(class <= max_class, "size {size}, spans of {span_bytes}");
            }
        }
        assert_eq!(table_limit(class_count(64 << 10) - 1), 16 << 10);
        assert_eq!(table_limit(class_count(16 << 10) - 1), 4 << 10);
        // The table ends at the entry of its largest size: no line of it is never read.
        assert_eq!(CLASS_TABLE.len(), table_index(COARSE_TABLE_MAX) + 1);
    }

    #[test]
    fn classes_above_128_bytes_waste_at_most_a_quarter() {
        for size in 129..=65536 {
            let waste = class_bytes(class_of(size)) - size;
            assert!(waste * 4 <= size, "{size} wastes {waste}");
        }
    }

    #[test]
    fn sixty_four_kib_spans_have_36_classes_up_to_16_kib() {
        assert_eq!(class_count(64 << 10), 36);
        assert_eq!(class_bytes(35), 16 << 10);
        assert_eq!(class_bytes(34), 14 << 10);
        assert_eq!(class_of(14 << 10), 34);
        assert_eq!(class_of((14 << 10) + 1), 35);
        assert_eq!(class_of(16 << 10), 35);
        assert_eq!(class_of((16 << 10) + 1), 36);
        assert_eq!(class_bytes(36), 20 << 10);
    }

    /// The per-class arrays of a heap hold exactly the classes of the largest span size
    /// the configuration accepts (4 MiB: blocks up to 1 MiB): every span size fits, and no
    /// slot is one that no span size uses.
    #[test]
    fn the_class_bound_is_the_class_count_of_the_largest_span() {
        assert_eq!(class_count(4 << 20), MAX_CLASSES);
        assert_eq!(class_bytes(MAX_CLASSES - 1), 1 << 20);
        for span_bytes in (14..=22).map(|k| 1usize << k) {
            assert!(class_count(span_bytes) <= MAX_CLASSES);
        }
    }

    #[test]
    fn aligned_requests_get_a_class_whose_blocks_are_aligned() {
        for align in [32, 64, 128, 256, 512, 1024, 4096] {
            for size in [1, 24, 100, 1000, 3000] {
                let c = class_for(size, align, class_count(64 << 10) - 1).expect("fits in a span");
                assert!(class_bytes(c) >= size);
                assert!(class_align(c) >= align, "class {c} not aligned to {align}");
            }
        }
        assert_eq!(class_for(100, 32 << 10, class_count(64 << 10) - 1), None);
    }

    /// The C ABI's aligned fast path classes `size` rounded up to a multiple of `align` with
    /// the table; that must be the class the general path finds, aligned as asked.
    #[test]
    fn aligned_table_class_is_class_for() {
        let max_class = class_count(64 << 10) - 1;
        let limit = table_limit(max_class);
        let mut align = 32;
        while align <= limit {
            for size in 0..=limit {
                let rounded = size.max(align).next_multiple_of(align);
                if rounded > limit {
                    break;
                }
                // SAFETY: `rounded` is at most a table limit.
                let class = unsafe { table_class(rounded) };
                assert_eq!(
                    Some(class),
                    class_for(size.max(1), align, max_class),
                    "size {size}, align {align}"
                );
                assert!(class_align(class) >= align, "size {size}, align {align}");
            }
            align *= 2;
        }
    }
}
