//! Where the root, the metadata and the heap go in a pool of a given size.
//!
//! Every region starts and (except the root's recorded size) ends on a cache line, so
//! that flushing one region never writes back a line of another. The metadata area gets
//! one byte per heap cache line ([`HEAP_BYTES_PER_METADATA_BYTE`]); the heap is the
//! largest multiple of a line that fits with its metadata, so the heap grows with the
//! pool size and never shrinks when the pool grows (which makes [`min_pool_size`] exact).

use crate::persist::CACHE_LINE;

use super::error::PoolError;
use super::header::HEADER_AREA_BYTES;

/// Heap bytes per byte of metadata: one metadata byte per heap cache line.
pub const HEAP_BYTES_PER_METADATA_BYTE: usize = CACHE_LINE;

/// The smallest heap a pool is created with: one page.
pub const MIN_HEAP_BYTES: usize = 4096;

/// A range of a pool, as an offset from the pool's base and a length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// First byte, from the pool's base.
    pub offset: usize,
    /// Bytes in the region.
    pub len: usize,
}

impl Region {
    /// One past the last byte.
    pub const fn end(&self) -> usize {
        self.offset + self.len
    }

    /// Whether `offset..offset + len` lies inside the region (without overflow).
    pub const fn contains_range(&self, offset: usize, len: usize) -> bool {
        match offset.checked_add(len) {
            Some(end) => offset >= self.offset && end <= self.end(),
            None => false,
        }
    }
}

/// The regions of a pool after its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolLayout {
    pub(crate) root: Region,
    pub(crate) metadata: Region,
    pub(crate) heap: Region,
}

pub(crate) const fn round_up_to_line(n: usize) -> Option<usize> {
    match n.checked_add(CACHE_LINE - 1) {
        Some(m) => Some(m & !(CACHE_LINE - 1)),
        None => None,
    }
}

const fn metadata_bytes_for_heap(heap_bytes: usize) -> usize {
    // heap_bytes is a multiple of a line, so this cannot overflow.
    (heap_bytes / HEAP_BYTES_PER_METADATA_BYTE).div_ceil(CACHE_LINE) * CACHE_LINE
}

/// The largest heap (a multiple of a line) that fits in `avail` bytes with its metadata.
fn largest_heap_in(avail: usize) -> usize {
    let footprint = |heap: usize| heap + metadata_bytes_for_heap(heap);
    let ratio = HEAP_BYTES_PER_METADATA_BYTE as u128;
    let estimate = (avail as u128 * ratio / (ratio + 1)) as usize;
    let mut heap = estimate & !(CACHE_LINE - 1);
    while heap > 0 && footprint(heap) > avail {
        heap -= CACHE_LINE;
    }
    while footprint(heap + CACHE_LINE) <= avail {
        heap += CACHE_LINE;
    }
    heap
}

/// The offset of the metadata area for a root of `root_size` bytes.
fn metadata_offset(root_size: usize) -> Option<usize> {
    HEADER_AREA_BYTES.checked_add(round_up_to_line(root_size)?)
}

/// The smallest pool that [`Pool::create`](super::Pool::create) accepts for a root of
/// `root_size` bytes (`None` when it does not fit in a `usize`).
pub fn min_pool_size(root_size: usize) -> Option<usize> {
    metadata_offset(root_size)?
        .checked_add(MIN_HEAP_BYTES)?
        .checked_add(metadata_bytes_for_heap(MIN_HEAP_BYTES))
}

/// The layout of a new pool of `pool_size` bytes with a root of `root_size` bytes.
pub(crate) fn layout_for(pool_size: usize, root_size: usize) -> Result<PoolLayout, PoolError> {
    let too_small = PoolError::TooSmall {
        size: pool_size as u64,
        min: min_pool_size(root_size).map_or(u64::MAX, |min| min as u64),
    };
    let Some(metadata_offset) = metadata_offset(root_size) else {
        return Err(too_small);
    };
    let usable_end = pool_size & !(CACHE_LINE - 1);
    let Some(avail) = usable_end.checked_sub(metadata_offset) else {
        return Err(too_small);
    };
    let heap_len = largest_heap_in(avail);
    if heap_len < MIN_HEAP_BYTES {
        return Err(too_small);
    }
    let metadata = Region {
        offset: metadata_offset,
        len: metadata_bytes_for_heap(heap_len),
    };
    Ok(PoolLayout {
        root: Region {
            offset: HEADER_AREA_BYTES,
            len: root_size,
        },
        metadata,
        heap: Region {
            offset: metadata.end(),
            len: heap_len,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_pool_size_is_exactly_the_threshold_of_layout_for() {
        for root_size in [0, 1, 63, 64, 65, 1000, 4096] {
            let min = min_pool_size(root_size).unwrap();
            assert!(layout_for(min, root_size).is_ok(), "root {root_size}");
            assert_eq!(
                layout_for(min - 1, root_size),
                Err(PoolError::TooSmall {
                    size: (min - 1) as u64,
                    min: min as u64
                })
            );
        }
    }

    #[test]
    fn regions_are_ordered_line_aligned_and_inside_the_pool() {
        for pool_size in (4_000..300_000)
            .step_by(997)
            .chain([1 << 20, (1 << 30) + 17])
        {
            let Ok(layout) = layout_for(pool_size, 200) else {
                assert!(pool_size < min_pool_size(200).unwrap());
                continue;
            };
            let PoolLayout {
                root,
                metadata,
                heap,
            } = layout;
            assert_eq!(root.offset, HEADER_AREA_BYTES);
            assert!(round_up_to_line(root.end()).unwrap() <= metadata.offset);
            assert!(metadata.end() <= heap.offset);
            assert!(heap.end() <= pool_size);
            for r in [metadata, heap] {
                assert_eq!(r.offset % CACHE_LINE, 0);
                assert_eq!(r.len % CACHE_LINE, 0);
            }
            assert!(metadata.len * HEAP_BYTES_PER_METADATA_BYTE >= heap.len);
            // The heap is the largest that fits: one more line would not, with its metadata.
            let grown = heap.len + CACHE_LINE;
            assert!(metadata.offset + grown + metadata_bytes_for_heap(grown) > pool_size);
        }
    }

    #[test]
    fn heap_never_shrinks_when_the_pool_grows() {
        let mut last = 0;
        for pool_size in min_pool_size(64).unwrap()..min_pool_size(64).unwrap() + 20_000 {
            let heap = layout_for(pool_size, 64).unwrap().heap.len;
            assert!(heap >= last, "pool {pool_size}: heap {heap} < {last}");
            last = heap;
        }
    }

    #[test]
    fn rounding_up_to_a_line_gives_the_first_line_boundary_at_or_after() {
        for n in 0..=4 * CACHE_LINE {
            let r = round_up_to_line(n).unwrap();
            assert!(
                r.is_multiple_of(CACHE_LINE) && r >= n && r - n < CACHE_LINE,
                "{n} -> {r}"
            );
        }
        assert_eq!(round_up_to_line(usize::MAX), None);
    }

    /// The heap's size comes from an estimate corrected by a few lines, not from a walk over
    /// the pool: pools of a terabyte and more are laid out at once, the heap the largest
    /// that fits.
    #[test]
    fn pools_up_to_the_address_space_are_laid_out_directly() {
        for pool_size in [1 << 30, 1 << 40, 1 << 50, usize::MAX & !(CACHE_LINE - 1)] {
            let layout = layout_for(pool_size, 64).unwrap();
            assert!(layout.heap.end() <= pool_size);
            let grown = layout.heap.len + CACHE_LINE;
            let needed = layout.metadata.offset as u128
                + grown as u128
                + metadata_bytes_for_heap(grown) as u128;
            assert!(
                needed > pool_size as u128,
                "pool {pool_size}: a larger heap fits"
            );
        }
    }

    /// Every region starts on a line, so the space left for heap and metadata is a whole
    /// number of lines; for such space the estimate needs no correction.
    #[test]
    fn for_a_whole_number_of_lines_the_estimate_is_the_largest_heap() {
        for avail in (0..=4 << 20).step_by(CACHE_LINE) {
            let estimate = (avail * HEAP_BYTES_PER_METADATA_BYTE
                / (HEAP_BYTES_PER_METADATA_BYTE + 1))
                & !(CACHE_LINE - 1);
            assert_eq!(largest_heap_in(avail), estimate, "{avail} bytes");
        }
    }

    #[test]
    fn absurd_root_sizes_are_too_small_errors_not_overflows() {
        assert_eq!(
            layout_for(1 << 20, usize::MAX),
            Err(PoolError::TooSmall {
                size: 1 << 20,
                min: u64::MAX
            })
        );
    }
}
