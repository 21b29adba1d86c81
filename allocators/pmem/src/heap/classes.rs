//! Size classes and slab tags: the twelve classes of [`SIZE_CLASSES`] (64 B … 4 KiB, every
//! block cache-line aligned), the tables that find a request's class by one lookup and a
//! block's index in its slab by a multiplication (no division), and the decoding of the
//! per-slab kind word (small class, run head, run continuation).

use crate::persist::CACHE_LINE;

/// Bytes per slab.
pub const SLAB_BYTES: usize = 64 * 1024;

/// Block sizes of the small classes, in bytes (each a multiple of a cache line).
pub const SIZE_CLASSES: [usize; 12] = [
    64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
];

/// The largest request served from a small class; larger ones take a run of whole slabs.
pub const MAX_SMALL: usize = 4096;

/// Blocks a thread's cache takes from the global lists at a time.
pub const REFILL_BATCH: usize = 64;

/// Free blocks a thread's cache keeps per class before handing half back to the global
/// lists.
pub const CACHE_LIMIT: usize = 2048;

pub(super) const NCLASSES: usize = SIZE_CLASSES.len();
pub(super) const TAG_RUN_HEAD: u8 = 0xFE;
pub(super) const TAG_RUN_CONT: u8 = 0xFF;
/// Metadata bytes per slab (one per heap line).
pub(super) const META_PER_SLAB: usize = SLAB_BYTES / CACHE_LINE;
/// Live-map bytes per slab: one per block of the smallest class (the most blocks a slab
/// holds); a slab's blocks use the first [`blocks_per_slab`] of them, a run's head the
/// first.
pub(super) const LIVE_PER_SLAB: usize = SLAB_BYTES / SIZE_CLASSES[0];

/// Volatile slab kinds, one `AtomicU32` per slab: `0` free; `1..=12` class + 1;
/// `KIND_HEAD | len`; `KIND_CONT | head`.
pub(super) const KIND_HEAD: u32 = 0x8000_0000;
pub(super) const KIND_CONT: u32 = 0x4000_0000;
pub(super) const KIND_LOW: u32 = 0x3FFF_FFFF;
/// The most slabs a heap uses (64 TiB less a slab): a run's length and a head's index
/// fit in a kind's low 30 bits, clear of [`KIND_HEAD`] and [`KIND_CONT`].
pub(super) const MAX_SLABS: usize = KIND_LOW as usize;

/// What a slab is, decoded from its volatile kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Free,
    Small(usize),
    Head(usize),
    Cont(usize),
}

pub(super) fn decode(kind: u32) -> Kind {
    if kind & KIND_HEAD != 0 {
        Kind::Head((kind & KIND_LOW) as usize)
    } else if kind & KIND_CONT != 0 {
        Kind::Cont((kind & KIND_LOW) as usize)
    } else if kind == 0 {
        Kind::Free
    } else {
        Kind::Small(kind as usize - 1)
    }
}

/// Blocks of class `c` in one slab: a table lookup (no division on the free path).
#[inline]
pub(super) fn blocks_per_slab(c: usize) -> usize {
    BLOCKS_PER_SLAB[c]
}

/// [`blocks_per_slab`] of each class.
pub(super) const BLOCKS_PER_SLAB: [usize; NCLASSES] = {
    let mut n = [0usize; NCLASSES];
    let mut c = 0;
    while c < NCLASSES {
        n[c] = SLAB_BYTES / SIZE_CLASSES[c];
        c += 1;
    }
    n
};

/// Whether a request of `size` bytes aligned to `align` is served from a small class (the
/// thread caches' stacks) rather than as a run of pages.
#[inline]
pub(super) fn is_small(size: usize, align: usize) -> bool {
    size != 0 && size <= MAX_SMALL && align <= CACHE_LINE
}

/// The smallest class whose blocks hold `size` bytes (`size <= MAX_SMALL`): a table
/// lookup by the size in cache lines.
#[inline]
pub(super) fn class_of(size: usize) -> usize {
    CLASS_BY_LINES[size.div_ceil(CACHE_LINE)] as usize
}

/// The bytes of the block a request of `size` bytes gets: its size class (a table lookup),
/// or whole slabs above [`MAX_SMALL`].
#[inline]
pub fn usable_size(size: usize) -> usize {
    if size <= MAX_SMALL {
        SIZE_CLASSES[class_of(size)]
    } else {
        size.next_multiple_of(SLAB_BYTES)
    }
}

/// [`class_of`] by the size in whole cache lines (`0..=MAX_SMALL / CACHE_LINE`).
pub(super) const CLASS_BY_LINES: [u8; MAX_SMALL / CACHE_LINE + 1] = {
    let mut table = [0u8; MAX_SMALL / CACHE_LINE + 1];
    let mut lines = 0;
    while lines < table.len() {
        let mut c = 0;
        while SIZE_CLASSES[c] < lines * CACHE_LINE {
            c += 1;
        }
        table[lines] = c as u8;
        lines += 1;
    }
    table
};

/// Bits of the fixed-point reciprocals in [`LINE_RECIPROCALS`].
pub(super) const RECIPROCAL_SHIFT: u32 = 22;

/// `ceil(2^22 / lines)` for each class's block size in cache lines: a block's index in its
/// slab is `(line * LINE_RECIPROCALS[c]) >> 22` for every line of a slab (below 2^10), with
/// no division (the error term is below `2^10 / 2^22`, far under the `1 / lines` that would
/// change the quotient; a test checks every line of every class).
pub(super) const LINE_RECIPROCALS: [usize; NCLASSES] = {
    let mut r = [0usize; NCLASSES];
    let mut c = 0;
    while c < NCLASSES {
        r[c] = (1usize << RECIPROCAL_SHIFT).div_ceil(SIZE_CLASSES[c] / CACHE_LINE);
        c += 1;
    }
    r
};

/// The index, in its slab, of the class-`c` block that holds byte `in_slab` of the slab.
#[inline]
pub(super) fn block_index(c: usize, in_slab: usize) -> usize {
    ((in_slab / CACHE_LINE) * LINE_RECIPROCALS[c]) >> RECIPROCAL_SHIFT
}
