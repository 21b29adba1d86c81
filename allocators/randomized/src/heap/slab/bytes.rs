//! The bytes of a slot: its canaries, its zeroing at free and the check that it reads zero
//! when handed out.

use super::*;

/// `byte` in every byte of a word.
#[inline(always)]
pub(super) const fn splat(byte: u8) -> u64 {
    byte as u64 * 0x0101_0101_0101_0101
}

/// Writes `byte` over the `n` bytes at `at`, 1 ≤ `n` ≤ 16: two stores of the widest word that
/// fits, overlapping when `n` is not twice its width (no call, no loop).
///
/// # Safety
///
/// The bytes are the caller's to write.
#[inline(always)]
pub(super) unsafe fn fill_span(at: usize, n: usize, byte: u8) {
    debug_assert!((1..=CANARY_SPAN).contains(&n));
    let word = splat(byte);
    // SAFETY: forwarded: every store lies in `[at, at + n)`.
    unsafe {
        if n >= 8 {
            (at as *mut u64).write_unaligned(word);
            ((at + n - 8) as *mut u64).write_unaligned(word);
        } else if n >= 4 {
            (at as *mut u32).write_unaligned(word as u32);
            ((at + n - 4) as *mut u32).write_unaligned(word as u32);
        } else {
            // 1 to 3 bytes: the first, the middle and the last.
            (at as *mut u8).write(byte);
            ((at + n / 2) as *mut u8).write(byte);
            ((at + n - 1) as *mut u8).write(byte);
        }
    }
}

/// The bits in which the `n` bytes at `at`, 1 ≤ `n` ≤ 16, differ from `byte` (0: they all
/// read `byte`), by the same loads [`fill_span`] stores.
///
/// # Safety
///
/// The bytes are readable and not written meanwhile.
#[inline(always)]
pub(super) unsafe fn span_differs(at: usize, n: usize, byte: u8) -> u64 {
    debug_assert!((1..=CANARY_SPAN).contains(&n));
    let word = splat(byte);
    // SAFETY: forwarded: every load lies in `[at, at + n)`.
    unsafe {
        if n >= 8 {
            ((at as *const u64).read_unaligned() ^ word)
                | (((at + n - 8) as *const u64).read_unaligned() ^ word)
        } else if n >= 4 {
            u64::from(
                ((at as *const u32).read_unaligned() ^ word as u32)
                    | (((at + n - 4) as *const u32).read_unaligned() ^ word as u32),
            )
        } else {
            u64::from(
                ((at as *const u8).read() ^ byte)
                    | (((at + n / 2) as *const u8).read() ^ byte)
                    | (((at + n - 1) as *const u8).read() ^ byte),
            )
        }
    }
}

/// Writes the canary of a slot of `slot` bytes at `address` holding `size` bytes: the
/// first [`CANARY_SPAN`] bytes past the request and the slot's last byte.
///
/// # Safety
///
/// The slot is the caller's, and `size < slot`.
#[inline(always)]
pub(super) unsafe fn arm(key: u64, address: usize, slot: usize, size: usize) {
    let byte = canary_byte(key, address);
    let span = (slot - size).min(CANARY_SPAN);
    // SAFETY: forwarded: bytes of the caller's slot (`span` ≥ 1 as `size < slot`).
    unsafe {
        fill_span(address + size, span, byte);
        ((address + slot - 1) as *mut u8).write(byte);
    }
}

/// Zeroes the freed slot at `address` whose record was `rec`: with canaries, what the
/// program and [`arm`] could write (the request, the canary bytes past it and the slot's
/// last byte), since the rest of its slack reads zero already (checked when the slot was
/// handed out, cleared by every resize); without, the whole slot, which the program may
/// use (its usable size).
///
/// # Safety
///
/// The slot is the caller's, freed, and its checks passed.
#[inline(always)]
pub(super) unsafe fn scrub(address: usize, slot: usize, rec: u16, canaries: bool) {
    let len = if canaries {
        (slot - usize::from(rec & SLACK) + CANARY_SPAN).min(slot)
    } else {
        slot
    };
    // SAFETY: forwarded: bytes of the caller's slot, which starts 16-byte aligned and spans
    // a multiple of 16 bytes, so that `len` rounded up to 16 stays inside it.
    unsafe {
        zero_granules(address, len.next_multiple_of(16));
        ((address + slot - 1) as *mut u8).write(0);
    }
}

/// Zeroes the `len` bytes at `at` (both multiples of 16): up to 64 bytes in at most four
/// 16-byte stores, overlapping, without a call; more with `memset`.
///
/// # Safety
///
/// The bytes are the caller's to write.
#[inline(always)]
pub(super) unsafe fn zero_granules(at: usize, len: usize) {
    debug_assert!(at.is_multiple_of(16) && len.is_multiple_of(16) && len > 0);
    // SAFETY: forwarded: every store lies in `[at, at + len)`.
    unsafe {
        if len <= 64 {
            let end = at + len;
            (at as *mut [u64; 2]).write([0; 2]);
            ((end - 16) as *mut [u64; 2]).write([0; 2]);
            if len > 32 {
                ((at + 16) as *mut [u64; 2]).write([0; 2]);
                ((end - 32) as *mut [u64; 2]).write([0; 2]);
            }
        } else {
            (at as *mut u8).write_bytes(0, len);
        }
    }
}

/// Checks the canary [`arm`] wrote.
///
/// # Safety
///
/// As [`arm`]; the slot is live.
#[inline(always)]
pub(super) unsafe fn canary_intact(key: u64, address: usize, slot: usize, size: usize) -> bool {
    let byte = canary_byte(key, address);
    let span = (slot - size).min(CANARY_SPAN);
    // SAFETY: forwarded: bytes of the caller's slot.
    let diff = unsafe {
        span_differs(address + size, span, byte)
            | u64::from(((address + slot - 1) as *const u8).read() ^ byte)
    };
    diff == 0 || crate::bug::CANARY_NOT_CHECKED
}

/// Whether the byte just below the slot at `address` (the last byte of the slot below, or
/// of the canary pad before slot 0) reads as that slot's canary or as zero.
///
/// # Safety
///
/// `address` is a slot of a set-up slab.
#[inline(always)]
pub(super) unsafe fn below_intact(key: u64, address: usize, slot: usize) -> bool {
    // SAFETY: forwarded; the byte is the slab's (a slot's, or the pad's).
    let below = unsafe { ((address - 1) as *const u8).read() };
    below == 0 || below == canary_byte(key, address - slot) || crate::bug::CANARY_NOT_CHECKED
}

/// Checks that `[from, to)` reads zero; aborts naming the first word that does not.
///
/// # Safety
///
/// The range is readable, 16-byte aligned at both ends.
#[inline(always)]
pub(super) unsafe fn check_zero(from: usize, to: usize) {
    let mut at = from;
    let mut acc = 0u64;
    // Four granules at a time (the compiler makes vector loads of them), then granules.
    while at + 64 <= to {
        // SAFETY: forwarded: 64 readable bytes.
        let group = unsafe { (at as *const [u64; 8]).read() };
        acc |= group.iter().fold(0, |a, w| a | w);
        at += 64;
    }
    while at < to {
        // SAFETY: as above: 16 readable bytes.
        let granule = unsafe { (at as *const [u64; 2]).read() };
        acc |= granule[0] | granule[1];
        at += 16;
    }
    if acc != 0 {
        dirty(from, to);
    }
}

/// The first non-zero word of `[from, to)` (8-byte aligned, readable), if any.
pub(super) fn first_dirty(from: usize, to: usize) -> Option<usize> {
    (from..to)
        .step_by(8)
        // SAFETY: callers pass words of a slab.
        .find(|&w| unsafe { rd(w) } != 0)
}

/// Aborts naming the first non-zero word of `[from, to)`.
#[cold]
#[inline(never)]
pub(super) fn dirty(from: usize, to: usize) -> ! {
    let word = (from..to)
        .step_by(8)
        // SAFETY: `check_zero`'s range, readable.
        .find(|&w| unsafe { (w as *const u64).read() } != 0)
        .unwrap_or(from);
    os::fatal(WRITE_AFTER_FREE, word)
}
