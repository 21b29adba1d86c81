//! Block headers: their flags, the keyed tag that guards them, and the checks a pointer
//! passes before the heap trusts it.

use core::sync::atomic::{AtomicUsize, Ordering};

use super::{GRANULE, HEADER};

/// Header flag: the block is handed out.
pub(crate) const BUSY: usize = 1;
/// Header flag: the block is the wilderness of the arena's newest chunk.
pub(crate) const WILD: usize = 2;
/// Header flag: the block has a mapping of its own. In a chunk, where no block is huge,
/// BUSY | HUGE marks a block queued for a remote free.
pub(crate) const HUGE: usize = 4;
/// Header flag: the block is the heap's own (the sentinel that ends a chunk).
pub(crate) const INTERNAL: usize = 8;
/// All flag bits.
pub(crate) const FLAGS: usize = 15;
/// On a free block (where no other meaning applies), the HUGE bit says its whole pages
/// were given back to the OS, so that merging more into it does not give them back again:
/// all but the pages around blocks carved from it and freed since, which stay resident
/// until a free around them spans [`RELEASE_SPAN`](super::RELEASE_SPAN). Slack cut from
/// such a block keeps the bit.
pub(super) const RELEASED: usize = HUGE;

/// The previous-size field in a header's second word: bits 32-51 (the size / 16; a chunk
/// is 2^18 granules).
const PREV_MASK: usize = ((1 << 20) - 1) << 32;
/// On a busy block, bits 52-53 of the header's second word: how the program asked for it
/// ([`KIND_NEW`], [`KIND_NEW_ARRAY`]; 0 for `malloc` and the trait).
const KIND_SHIFT: u32 = 52;
/// Kind bits of a block from C++'s `operator new`.
pub(crate) const KIND_NEW: usize = 1;
/// Kind bits of a block from C++'s `operator new[]`.
pub(crate) const KIND_NEW_ARRAY: usize = 2;
/// On a busy block, bits 58-63 of the header's second word: its canary's length, the bytes
/// between the end of the request and the end of the payload (see [`arm_canary`]).
const CANARY_SHIFT: u32 = 58;

/// Free-block link offsets from the block's start.
pub(super) const NEXT: usize = 16;
pub(super) const PREV: usize = 24;

/// The word at `addr`, as an atomic.
///
/// Every heap word is accessed atomically with relaxed ordering (a plain `mov` on the
/// machines this targets): a header's first word is also claimed by compare-and-swap by
/// a thread that frees into a busy arena (see [`claim_remote`]), and the arena lock orders
/// everything else.
///
/// # Safety
///
/// `addr` is an aligned word inside a live mapping of this heap.
#[inline(always)]
pub(super) unsafe fn word<'a>(addr: usize) -> &'a AtomicUsize {
    // SAFETY: forwarded from the caller; the heap never accesses its words non-atomically.
    unsafe { AtomicUsize::from_ptr(addr as *mut usize) }
}

/// Reads the word at `addr`.
///
/// # Safety
///
/// As [`word`].
#[inline(always)]
pub(crate) unsafe fn rd(addr: usize) -> usize {
    // SAFETY: forwarded from the caller.
    unsafe { word(addr) }.load(Ordering::Relaxed)
}

/// Writes the word at `addr`.
///
/// # Safety
///
/// As [`rd`], and the caller owns the word (its arena's lock, or a block nobody else has).
#[inline(always)]
pub(crate) unsafe fn wr(addr: usize, value: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { word(addr) }.store(value, Ordering::Relaxed)
}

/// The keyed tag of a header at `h` with first word `w0` (size and flags). The HUGE bit is
/// left out: in a chunk it marks a block queued for a remote free (see [`claim_remote`]),
/// set without rewriting the tag.
///
/// The previous-size field is not covered: it changes whenever the left neighbour is cut
/// or merged, and leaving it out lets [`Arena::set_prev`](super::Arena::set_prev) rewrite it with one store instead
/// of checking and recomputing a tag. What it could mislead is checked where it is used:
/// the left neighbour it names must lie in the same chunk and carry a valid tag, be free,
/// and have exactly that size, which only the real left neighbour has (blocks tile the
/// chunk); and a linear overflow cannot reach it without overwriting the first word and
/// the tag before it.
#[inline(always)]
pub(crate) fn tag(key: u64, h: usize, w0: usize) -> u32 {
    let x = (h as u64 ^ key ^ ((w0 & !HUGE) as u64).rotate_left(29))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) as u32
}

/// Writes the header of the block at `h`.
///
/// # Safety
///
/// `h` is a block boundary of a mapping of this heap that the caller may write.
#[inline(always)]
pub(crate) unsafe fn put(key: u64, h: usize, w0: usize, prev: usize) {
    let t = tag(key, h, w0);
    // SAFETY: forwarded from the caller.
    unsafe {
        wr(h, w0);
        wr(h + 8, ((prev / GRANULE) << 32) | t as usize);
    }
}

/// Reads and checks the header at `h`: `(first word, previous size)`, or `None` if the
/// tag does not match.
///
/// # Safety
///
/// `h..h + 16` is mapped memory of this heap.
#[inline(always)]
pub(crate) unsafe fn get(key: u64, h: usize) -> Option<(usize, usize)> {
    // SAFETY: forwarded from the caller.
    let (w0, w1) = unsafe { (rd(h), rd(h + 8)) };
    let prev = ((w1 & PREV_MASK) >> 32) * GRANULE;
    if crate::bug::TAG_NOT_CHECKED {
        return Some((w0, prev));
    }
    (tag(key, h, w0) == w1 as u32).then_some((w0, prev))
}

/// The previous-size field of a header's second word `w1` replaced by `prev`, the rest (tag,
/// canary length) kept.
#[inline(always)]
pub(super) fn with_prev(w1: usize, prev: usize) -> usize {
    (w1 & !PREV_MASK) | ((prev / GRANULE) << 32)
}

/// The canary byte of the block whose payload is at `payload`: keyed (6 bits), odd and
/// at least 0x80, so never the zero a string copy's terminator writes, nor any byte of
/// ASCII text: an overflow by a string operation changes the canary whatever it writes.
/// An overflow that writes exactly the keyed byte (one value in 64 of those above 0x80)
/// goes unseen.
#[inline(always)]
pub(super) fn canary_byte(key: u64, payload: usize) -> u8 {
    (((payload as u64 ^ key.rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        | 0x81
}

/// Gives the busy block at `h` (`size` bytes, header included) a canary after its first
/// `requested` payload bytes: the rest of the payload filled with the keyed byte, and its
/// length in the header.
///
/// # Safety
///
/// `h` is a busy block of this heap that the caller owns (its arena's lock, or it was just
/// allocated), and `requested <= size - HEADER < requested + 64`.
#[inline(always)]
pub(crate) unsafe fn arm_canary(key: u64, h: usize, size: usize, requested: usize) {
    let payload = h + HEADER;
    let len = size - HEADER - requested;
    debug_assert!(len < 64);
    // SAFETY: forwarded from the caller: the header and the payload's tail are its.
    unsafe {
        let w1 = rd(h + 8);
        wr(h + 8, (w1 & !(63 << CANARY_SHIFT)) | (len << CANARY_SHIFT));
        if len > 0 {
            let word = u64::from(canary_byte(key, payload)) * 0x0101_0101_0101_0101;
            let (mut at, end) = (payload + requested, payload + requested + len);
            // Whole words (unaligned), then the bytes left: at most 47 bytes, no call.
            while at + 8 <= end {
                (at as *mut u64).write_unaligned(word);
                at += 8;
            }
            while at < end {
                (at as *mut u8).write(word as u8);
                at += 1;
            }
        }
    }
}

/// Records in the header of the busy block at `h` how the program asked for it.
///
/// # Safety
///
/// As [`arm_canary`].
#[inline(always)]
pub(crate) unsafe fn set_kind(h: usize, kind: usize) {
    // SAFETY: forwarded from the caller.
    unsafe {
        let w1 = rd(h + 8);
        wr(h + 8, (w1 & !(3 << KIND_SHIFT)) | (kind << KIND_SHIFT));
    }
}

/// How the program asked for the busy block at `h` (0: `malloc` or the trait).
///
/// # Safety
///
/// `h` is a header of this heap.
#[inline(always)]
pub(crate) unsafe fn kind_of(h: usize) -> usize {
    // SAFETY: forwarded from the caller.
    unsafe { (rd(h + 8) >> KIND_SHIFT) & 3 }
}

/// What a free was told about the block: how it was allocated (0: nothing, as C's `free`
/// says) and, for a sized delete, its size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expect {
    pub(crate) kind: usize,
    pub(crate) size: Option<usize>,
}

impl Expect {
    /// C's `free`: nothing to check.
    pub(crate) const NOTHING: Expect = Expect {
        kind: 0,
        size: None,
    };

    /// Checks the block at `h` with `usable` bytes against what the free was told:
    /// `delete` of a block from `new[]` (or the reverse) is refused, and so is a size above
    /// `usable`, or more than `slack` below it.
    ///
    /// # Safety
    ///
    /// `h` is a busy block of this heap, its header checked.
    #[inline(always)]
    pub(crate) unsafe fn check(self, h: usize, usable: usize, slack: usize) -> Result<(), Invalid> {
        if self.kind != 0 {
            // SAFETY: forwarded from the caller.
            let kind = unsafe { kind_of(h) };
            // A block from `malloc` may be deleted (the heap cannot tell what libstdc++'s
            // own `operator new`, which calls `malloc`, gave).
            if kind != 0 && kind != self.kind {
                return Err(Invalid::WrongDelete);
            }
        }
        match self.size {
            Some(size) if size > usable || usable - size > slack => Err(Invalid::WrongSize),
            _ => Ok(()),
        }
    }
}

/// The length of the canary of the busy block at `h` (0 if it has none).
///
/// # Safety
///
/// `h` is a header of this heap.
#[inline(always)]
pub(crate) unsafe fn canary_len(h: usize) -> usize {
    // SAFETY: forwarded from the caller.
    unsafe { rd(h + 8) >> CANARY_SHIFT }
}

/// Checks the canary of the busy block at `h` of `size` bytes.
///
/// # Safety
///
/// `h` is a busy block of this heap, its header checked, and nobody else frees it.
#[inline(always)]
pub(crate) unsafe fn check_canary(key: u64, h: usize, size: usize) -> Result<(), Invalid> {
    // SAFETY: forwarded from the caller.
    let len = unsafe { canary_len(h) };
    if len == 0 {
        return Ok(());
    }
    if crate::bug::CANARY_NOT_CHECKED {
        return Ok(());
    }
    let payload = h + HEADER;
    let word = u64::from(canary_byte(key, payload)) * 0x0101_0101_0101_0101;
    let end = h + size;
    let mut at = end - len;
    let mut diff = 0;
    while at + 8 <= end {
        // SAFETY: the canary lies in the block's payload.
        diff |= unsafe { (at as *const u64).read_unaligned() } ^ word;
        at += 8;
    }
    while at < end {
        // SAFETY: as above.
        diff |= u64::from(unsafe { (at as *const u8).read() }) ^ (word & 0xff);
        at += 1;
    }
    if diff == 0 {
        Ok(())
    } else {
        Err(Invalid::Overflow)
    }
}

/// A pointer the heap refuses to free, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// Not 16-byte aligned.
    Misaligned,
    /// Not inside any mapping of this heap.
    Foreign,
    /// Inside the heap, but its header fails the keyed check: an interior pointer, a
    /// pointer the heap never returned, or a header that was overwritten.
    BadHeader,
    /// A block that is already free.
    DoubleFree,
    /// A block whose canary (the bytes past what was asked for) was overwritten.
    Overflow,
    /// A slot whose byte just below (the last of the slot below, a canary or zero) was
    /// overwritten: an underflow of the slot, or an overflow of the one below.
    Underflow,
    /// C++'s `operator delete` of a block from `new[]`, or `delete[]` of one from `new`.
    WrongDelete,
    /// A sized `operator delete` told a size the block was not allocated with.
    WrongSize,
}

impl Invalid {
    /// The message the process dies with.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Self::Misaligned => "free(): invalid pointer (not 16-byte aligned)",
            Self::Foreign => "free(): invalid pointer (not from this heap)",
            Self::BadHeader => {
                "free(): invalid pointer or corrupted block header (interior pointer, pointer never returned by this heap, or heap overflow)"
            }
            Self::DoubleFree => "free(): double free detected",
            Self::Overflow => {
                "heap overflow detected (the bytes past the end of the block were overwritten)"
            }
            Self::Underflow => {
                "heap overflow detected (the byte before the block, the last of the one below it, was overwritten)"
            }
            Self::WrongDelete => {
                "operator delete: mismatched delete (delete of a block from new[], or delete[] of a block from new)"
            }
            Self::WrongSize => {
                "operator delete: sized delete with a size the block was not allocated with"
            }
        }
    }
}

/// A live block, as validation found it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Live {
    /// Its header.
    pub(crate) header: usize,
    /// Its size, header included (for huge blocks: the mapping's length).
    pub(crate) size: usize,
    /// Its previous-size field (for huge blocks: the payload's offset in the mapping).
    pub(crate) prev: usize,
    /// Whether it has a mapping of its own.
    pub(crate) huge: bool,
    /// The length of its canary (0 for huge blocks).
    pub(crate) canary: usize,
}

impl Live {
    /// Bytes the owner may use.
    pub(crate) fn usable(&self) -> usize {
        if self.huge {
            self.size - self.prev
        } else {
            self.size - HEADER - self.canary
        }
    }
}

/// Checks the header of the block whose payload is `payload`, in a chunk of blocks: what
/// `free` must know before it trusts anything about the block.
///
/// # Safety
///
/// `payload - 16 .. payload` lies in a live chunk of this heap (the chunk table said so),
/// and the lock of the chunk's arena is held, or the caller only reads the answer (the
/// usable size of a block the program holds: see [`claim_remote`] for why a header read
/// without the lock is never torn).
pub(crate) unsafe fn validate_in_chunk(key: u64, payload: usize) -> Result<Live, Invalid> {
    let h = payload - HEADER;
    // SAFETY: forwarded from the caller.
    let (w0, prev) = unsafe { get(key, h) }.ok_or(Invalid::BadHeader)?;
    if w0 & (WILD | INTERNAL) != 0 {
        return Err(Invalid::BadHeader);
    }
    // Free already, or queued for a remote free.
    if w0 & BUSY == 0 || w0 & HUGE != 0 {
        return Err(Invalid::DoubleFree);
    }
    Ok(Live {
        header: h,
        size: w0 & !FLAGS,
        prev,
        huge: false,
        // SAFETY: forwarded from the caller.
        canary: unsafe { canary_len(h) },
    })
}

/// Checks the block at `payload` without its arena's lock and marks it queued for a remote
/// free (BUSY | HUGE), so that a second free of it is caught, in the same way, before the
/// first is done. Returns the block's size.
///
/// Sound without the lock: a live block's first word changes only by its owner's resize,
/// its free, or this claim (a compare-and-swap); its second word may be rewritten by the
/// arena's holder (a neighbour's size changed), but always as one word with a matching
/// tag, so the check sees an old or a new header, never a torn one.
///
/// # Safety
///
/// `payload - 16 .. payload` lies in a live chunk of this heap (the chunk table said so).
pub(crate) unsafe fn claim_remote(key: u64, payload: usize) -> Result<usize, Invalid> {
    let h = payload - HEADER;
    // SAFETY: forwarded from the caller.
    let (w0, _) = unsafe { get(key, h) }.ok_or(Invalid::BadHeader)?;
    if w0 & (WILD | INTERNAL) != 0 {
        return Err(Invalid::BadHeader);
    }
    if w0 & BUSY == 0 || w0 & HUGE != 0 {
        return Err(Invalid::DoubleFree);
    }
    // SAFETY: as above.
    unsafe { word(h) }
        .compare_exchange(w0, w0 | HUGE, Ordering::Relaxed, Ordering::Relaxed)
        .map(|_| w0 & !FLAGS)
        .map_err(|_| Invalid::DoubleFree)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn a_tag_depends_on_every_bit_of_the_key_the_address_and_the_first_word() {
        let mut rng = Rng::from_seed_stream([3; 32], 0);
        for _ in 0..64 {
            let key = rng.next_u64();
            let h = (rng.next_u64() as usize) & !(GRANULE - 1);
            let w0 = (rng.next_u64() as usize) & !HUGE;
            let t = tag(key, h, w0);
            // A flipped bit leaves the tag as it was with probability 2^-32: none may.
            for bit in 0..64 {
                assert_ne!(tag(key ^ 1 << bit, h, w0), t, "key bit {bit}");
                assert_ne!(tag(key, h ^ 1 << bit, w0), t, "address bit {bit}");
                if 1 << bit != HUGE {
                    assert_ne!(tag(key, h, w0 ^ 1 << bit), t, "first-word bit {bit}");
                }
            }
        }
    }

    #[test]
    fn canary_bytes_are_odd_above_ascii_and_keyed() {
        let mut rng = Rng::from_seed_stream([4; 32], 0);
        let mut seen = [false; 256];
        for _ in 0..64 {
            let key = rng.next_u64();
            let payload = (rng.next_u64() as usize) & !(GRANULE - 1);
            let c = canary_byte(key, payload);
            seen[usize::from(c)] = true;
            // A key that differs in one bit gives another byte but for the odd collision
            // (1 in 64: the byte has 6 free bits).
            let same = (0..64)
                .filter(|&bit| canary_byte(key ^ 1 << bit, payload) == c)
                .count();
            assert!(same <= 6, "{same} of 64 key bits do not change the canary");
            for bit in 0..64 {
                assert_eq!(canary_byte(key ^ 1 << bit, payload) & 0x81, 0x81);
            }
        }
        // Of the 64 bytes a canary can be, 64 draws see about 41.
        assert!(
            seen.iter().filter(|&&s| s).count() >= 32,
            "64 keys and payloads gave few canary bytes"
        );
        assert!(
            seen[..0x80].iter().all(|&s| !s),
            "a canary byte a text overflow could write"
        );
    }
}
