//! Small objects in slabs: a slab per size class and arena, its slots tracked by a bitmap,
//! each allocation a slot drawn at random among the free ones of a window.
//!
//! Requests of up to 1,039 bytes (1,040 with the canary byte) with the default alignment take
//! a slot of one of [`SLOT_SIZES`] (16-byte steps to 128 B, then four sizes per power of two,
//! 16 bytes above its quarters, so that a power of two fits with its canary).
//! Each arena keeps, per class, a *current* slab of 1 MiB (four to a chunk of the chunk
//! table, all of one arena): a header, a bitmap of its slots, a 16-bit record per slot (the
//! request's slack, how the program asked for it, live or freed), then the slots.
//!
//! **Placement.** An allocation draws a slot uniformly among the slab's *window* (its first
//! slots) and draws again while it drew a taken one: uniform among the window's free slots.
//! The window spans at least [`MIN_WINDOW`] = 256 slots and grows whenever fewer than
//! [`MIN_FREE`] of them are free or more than 7/8 are taken (8 draws at worst on average),
//! so consecutive blocks land anywhere among at least 256 places. A freed slot is held back
//! until [`DELAY`] more of its class are freed or [`DELAY_ALLOCATIONS`] allocations pass,
//! so the block just freed never comes straight back. A full slab gives way to one of the
//! class's slabs that frees brought back under 3/4, or to a new one; a slab that empties
//! (not the current one), or a current one whose class has had no allocation in
//! [`IDLE_AGE`] allocations, gives its pages back.
//!
//! **Checks.** What the block path's headers catch, the slabs catch without headers:
//!
//! * **double free**: the slot's record is not live (freed, held back, or queued); a slot
//!   another thread queued is checked against the bitmap when its arena drains it;
//! * **invalid free**: outside every chunk (the chunk table), inside a slab but not at a
//!   slot's start (an interior pointer), misaligned;
//! * **overflow and underflow**: with canaries, every slot keeps at least one byte past the
//!   request: the first 16 bytes past it and the slot's last byte hold a keyed byte (odd, above 0x7f),
//!   checked at free and at resize; and the last byte of the slot *below* a freed one must
//!   read as that slot's canary or as zero (free), so an underflow of one block, or an
//!   overflow of its neighbour that ran past the neighbour's canary, is caught when the
//!   block is freed;
//! * **write after free**: with zero-fill, a freed slot is zeroed and checked to read zero
//!   when handed out again (in full up to 320 bytes, its first and last 128 bytes above),
//!   and by the heap walk meanwhile.
//!
//! Slots are never merged: a free writes the slot, its record and a bit. The free of another
//! arena's slot takes no lock: it claims the slot (its record, with a compare-and-swap that
//! catches a second free), checks and zeroes it, and pushes it onto that arena's stack of
//! slab frees, which the arena's next holder drains. A thread taking another's lock would
//! send that thread's next allocation to another arena, and with it a window of every size
//! class it uses.

use core::sync::atomic::{AtomicU16, AtomicU64, Ordering};

use super::fill::{WRITE_AFTER_FREE, touch_for_write};
use super::header::canary_byte;
use super::*;
use crate::Checks;
use crate::os;

/// Slot sizes, smallest first: 16-byte steps to 128 B, then four per power of two, each 16
/// bytes above a quarter step (144, 176, 208, 240, then 272, ...), so that a request of a
/// power of two, the commonest sizes, fits the slot just above it with its canary byte
/// (256 B in 272, 1 KiB in 1,040) instead of taking the next quarter (320) or, at 1 KiB,
/// the block path.
pub(crate) const SLOT_SIZES: [usize; 21] = [
    16, 32, 48, 64, 80, 96, 112, 128, 144, 176, 208, 240, 272, 336, 400, 464, 528, 656, 784, 912,
    1040,
];
/// Size classes of the slabs.
pub(crate) const SLAB_CLASSES: usize = SLOT_SIZES.len();
/// The largest slot: requests needing more go to the block path.
pub(crate) const SLOT_MAX: usize = SLOT_SIZES[SLAB_CLASSES - 1];
/// Free slots a window keeps at the least before it grows (with [`MIN_WINDOW`] and the
/// 7/8 bound on taken slots: a draw finds a free slot in eight tries at worst on average).
pub(crate) const MIN_FREE: u32 = 64;
/// Slots a window spans at the least: a draw picks one of at least this many places (the
/// free ones among them), 8 bits of placement entropy and more.
pub(crate) const MIN_WINDOW: usize = 256;
/// Freed slots of a class held back from draws at most, oldest first: a freed slot is
/// drawn among the others again once [`DELAY`] more of its class were freed, or after
/// [`DELAY_ALLOCATIONS`] slab allocations, whichever comes first. The slot just freed
/// never comes straight back.
const DELAY: usize = 4;
/// Slab allocations after which a held-back slot is released (a program that frees once
/// and then only allocates gets its memory back, and a write through a dangling pointer
/// into it is caught when the slot is handed out again).
const DELAY_ALLOCATIONS: u64 = 8;
/// Bytes of a slab: a chunk of the chunk table holds `CHUNK / SLAB` of them, all of one
/// arena.
pub(crate) const SLAB: usize = 1 << 20;
/// Bytes of a slab before its bitmap.
const HEAD: usize = 128;
/// Record bits: the request's slack (slot bytes past it).
const SLACK: u16 = 0x7ff;
/// Record bits: how the program asked for the block (`KIND_NEW`, `KIND_NEW_ARRAY`).
const KIND_SHIFT: u16 = 11;
/// Record bit: live (handed out and not freed).
const LIVE: u16 = 1 << 14;
/// Record bit: freed, its bit still set: held back among its class's freed last, or queued
/// by another thread on its arena's stack.
const QUEUED: u16 = 1 << 15;
/// Canary bytes written right past a request (the rest of a longer slack stays zero, and
/// the slot's last byte is a canary too).
const CANARY_SPAN: usize = 16;
/// Slab allocations between two looks for idle slabs to give back.
const IDLE_EVERY: u64 = 4096;
/// Slab allocations without one of its class after which a class's current slab gives
/// its held-back slots back to draws, and its pages back to the OS if it is then empty.
const IDLE_AGE: u64 = 16384;

/// The class of a slot of at least `need` bytes (1 to [`SLOT_MAX`]), by `need` in 16-byte
/// granules.
const CLASS_OF: [u8; SLOT_MAX / 16 + 1] = {
    let mut table = [0u8; SLOT_MAX / 16 + 1];
    let mut granules = 0;
    while granules <= SLOT_MAX / 16 {
        let mut class = 0;
        while SLOT_SIZES[class] < granules * 16 {
            class += 1;
        }
        table[granules] = class as u8;
        granules += 1;
    }
    table
};

/// The class of a request of `need` bytes (its size, plus one canary byte with canaries),
/// if the slabs take it.
#[inline(always)]
pub(crate) fn class_of(need: usize) -> Option<usize> {
    CLASS_OF.get(need.div_ceil(16)).map(|&c| usize::from(c))
}

/// The header of a slab, at its base: what never changes after the slab is set up on
/// its first cache line (every free reads it, from any thread), what its
/// arena's holder changes on the next ([`State`]), so that a thread freeing another arena's
/// slot does not take that line from the thread allocating there.
#[repr(C)]
struct Slab {
    /// The arena's index: the first word of every chunk of a heap names its arena (a slab
    /// chunk's first slab's header).
    arena: usize,
    /// Slot bytes.
    slot: u32,
    /// Slots in the slab.
    capacity: u32,
    /// The class.
    class: u32,
    /// Offset of the records.
    records: u32,
    /// Offset of slot 0.
    slots: u32,
    /// `ceil(2^32 / slot)`: an offset below 4 MiB times this, shifted right by 32, is the
    /// offset over the slot size, rounded down (exactly: the error stays under
    /// `2^22 / 2^32`, below `1 / slot` for every slot size that is not a power of two, and
    /// nothing for those that are).
    reciprocal: u32,
    state: State,
}

/// The part of a slab's header that changes, under its arena's lock.
#[repr(C, align(64))]
struct State {
    /// The window: slots `0..window` are drawn among (a multiple of 64, or `capacity`).
    window: u32,
    /// Slots whose bit is set: live, held back after their free, or queued by another
    /// thread until the arena drains them.
    live: u32,
    /// Whether the slab is on its class's list of slabs to take when the current one is
    /// full.
    listed: u32,
    /// Pages from the one below slot 0 to the window's last whose bit in `touched` is
    /// clear: at 0, as in a slab in use for a while, every slot of the window is on
    /// touched pages, and an allocation reads no bit.
    untouched: u32,
    /// The next slab on that list.
    next: usize,
    /// The slab's 4 KiB pages made present for writing (a bit each): a slot's pages are
    /// touched when a slot on them is first handed out, not when the window reaches them.
    touched: [u64; SLAB / fill::PAGE_MIN / 64],
}

impl State {
    /// A slab's state with `window` slots drawn among and `live` of them taken: on no list,
    /// no page touched (a fresh slab has both at 0).
    const fn new(window: u32, live: u32) -> Self {
        State {
            window,
            live,
            listed: 0,
            untouched: 0,
            next: 0,
            touched: [0; SLAB / fill::PAGE_MIN / 64],
        }
    }
}

const _: () = assert!(size_of::<Slab>() <= HEAD);

/// A slab's layout, from its slot size.
#[derive(Clone, Copy)]
struct Layout {
    capacity: usize,
    /// Offset of the records.
    records: usize,
    /// Offset of slot 0.
    slots: usize,
}

impl Layout {
    const fn of(slot: usize) -> Self {
        // Bitmap (1/8 byte a slot, whole words), record (2 bytes), the slot; 16 bytes of
        // canary before slot 0 and up to 64 of alignment.
        let capacity = ((SLAB - HEAD - 16 - 64 - 8) * 8 / (8 * slot + 17)) & !63;
        let records = HEAD + capacity / 8;
        let slots = (records + 2 * capacity + 16).next_multiple_of(64);
        Layout {
            capacity,
            records,
            slots,
        }
    }
}

const _: () =
    assert!(Layout::of(SLOT_MAX).slots + Layout::of(SLOT_MAX).capacity * SLOT_MAX <= SLAB);
const _: () = assert!(Layout::of(16).slots + Layout::of(16).capacity * 16 <= SLAB);
const _: () = assert!(CHUNK.is_multiple_of(SLAB));
const _: () = assert!(Layout::of(SLOT_MAX).capacity >= 3 * MIN_WINDOW);

/// One arena's slabs: per class its current slab, its reusable slabs and its held-back
/// slots; counters. Under the arena's lock; all zeros is empty.
#[derive(Debug)]
#[repr(align(2048))]
pub(crate) struct Slabs {
    current: [usize; SLAB_CLASSES],
    /// The next slab of the newest slab chunk (a multiple of `CHUNK` when none is left).
    carve: usize,
    /// Slabs not current whose taken slots fell to 3/4 or fewer (a stack).
    reusable: [usize; SLAB_CLASSES],
    /// Each class's slots freed last, held back from draws (0: none), and where the next
    /// goes.
    delayed: [[usize; DELAY]; SLAB_CLASSES],
    /// When each was freed, as a slab allocation count.
    delayed_at: [[u64; DELAY]; SLAB_CLASSES],
    /// The ring's next entry to fill, and its oldest entry (equal when it is empty or
    /// full).
    delay_next: [u8; SLAB_CLASSES],
    delay_old: [u8; SLAB_CLASSES],
    /// The slab allocation count at each class's last allocation.
    last_used: [u64; SLAB_CLASSES],
    pub(super) live_bytes: u64,
    pub(super) mapped_bytes: u64,
    pub(super) released_bytes: u64,
    pub(super) allocations: u64,
    pub(super) deallocations: u64,
}

/// A slab slot the program gave, located.
#[derive(Clone, Copy)]
pub(crate) struct SlotRef {
    slab: usize,
    index: usize,
    address: usize,
}

/// The slab header at `base`.
///
/// # Safety
///
/// `base` is a slab of a registered slab chunk; the caller holds its arena's lock for any
/// write.
#[inline(always)]
unsafe fn header<'a>(base: usize) -> &'a mut Slab {
    // SAFETY: forwarded from the caller.
    unsafe { &mut *(base as *mut Slab) }
}

#[inline(always)]
fn bitmap_word<'a>(base: usize, word: usize) -> &'a AtomicU64 {
    // SAFETY: callers pass a slab of a registered slab chunk and a word below its
    // capacity / 64;
    // bitmap words are only accessed atomically.
    unsafe { &*((base + HEAD + 8 * word) as *const AtomicU64) }
}

#[inline(always)]
fn record<'a>(c: &Slab, index: usize) -> &'a AtomicU16 {
    let at = c as *const Slab as usize + c.records as usize + 2 * index;
    // SAFETY: as `bitmap_word`: a slot below the slab's capacity; records are only
    // accessed atomically.
    unsafe { &*(at as *const AtomicU16) }
}

#[inline(always)]
fn slot_address(c: &Slab, index: usize) -> usize {
    c as *const Slab as usize + c.slots as usize + index * c.slot as usize
}

/// Writes the header of a fresh slab at `base` for arena `arena` and class `class`, before
/// anything can find it; with canaries, `key` arms the pad before slot 0 (it
/// reads as the canary of a slot below it).
///
/// # Safety
///
/// `base` is a fresh slab that nothing else refers to.
pub(crate) unsafe fn init_slab(base: usize, arena: usize, class: usize, key: Option<u64>) {
    let slot = SLOT_SIZES[class];
    let layout = Layout::of(slot);
    // SAFETY: forwarded: the slab is the caller's, zeroed.
    unsafe {
        (base as *mut Slab).write(Slab {
            arena,
            slot: slot as u32,
            capacity: layout.capacity as u32,
            state: State::new(0, 0),
            class: class as u32,
            records: layout.records as u32,
            slots: layout.slots as u32,
            reciprocal: (1u64 << 32).div_ceil(slot as u64) as u32,
        });
        if let Some(key) = key {
            let pad = base + layout.slots;
            ((pad - 1) as *mut u8).write(canary_byte(key, pad - slot));
        }
    }
}

/// `byte` in every byte of a word.
#[inline(always)]
const fn splat(byte: u8) -> u64 {
    byte as u64 * 0x0101_0101_0101_0101
}

/// Writes `byte` over the `n` bytes at `at`, 1 ≤ `n` ≤ 16: two stores of the widest word that
/// fits, overlapping when `n` is not twice its width (no call, no loop).
///
/// # Safety
///
/// The bytes are the caller's to write.
#[inline(always)]
unsafe fn fill_span(at: usize, n: usize, byte: u8) {
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
unsafe fn span_differs(at: usize, n: usize, byte: u8) -> u64 {
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
unsafe fn arm(key: u64, address: usize, slot: usize, size: usize) {
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
unsafe fn scrub(address: usize, slot: usize, rec: u16, canaries: bool) {
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
unsafe fn zero_granules(at: usize, len: usize) {
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
unsafe fn canary_intact(key: u64, address: usize, slot: usize, size: usize) -> bool {
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
unsafe fn below_intact(key: u64, address: usize, slot: usize) -> bool {
    // SAFETY: forwarded; the byte is the slab's (a slot's, or the pad's).
    let below = unsafe { ((address - 1) as *const u8).read() };
    below == 0 || below == canary_byte(key, address - slot) || crate::bug::CANARY_NOT_CHECKED
}

/// The index of the slot at `offset` bytes past slot 0 of `c` (rounded down).
#[inline(always)]
fn slot_index(c: &Slab, offset: usize) -> usize {
    ((offset as u64 * u64::from(c.reciprocal)) >> 32) as usize
}

/// Checks that `[from, to)` reads zero; aborts naming the first word that does not.
///
/// # Safety
///
/// The range is readable, 16-byte aligned at both ends.
#[inline(always)]
unsafe fn check_zero(from: usize, to: usize) {
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
fn first_dirty(from: usize, to: usize) -> Option<usize> {
    (from..to)
        .step_by(8)
        // SAFETY: callers pass words of a slab.
        .find(|&w| unsafe { rd(w) } != 0)
}

/// Aborts naming the first non-zero word of `[from, to)`.
#[cold]
#[inline(never)]
fn dirty(from: usize, to: usize) -> ! {
    let word = (from..to)
        .step_by(8)
        // SAFETY: `check_zero`'s range, readable.
        .find(|&w| unsafe { (w as *const u64).read() } != 0)
        .unwrap_or(from);
    os::fatal(WRITE_AFTER_FREE, word)
}

impl Slabs {
    /// Bytes of the slots held back after their free.
    pub(crate) fn held_back_bytes(&self) -> u64 {
        self.delayed
            .iter()
            .flatten()
            .filter(|&&address| address != 0)
            // SAFETY: a held-back slot of a set-up slab.
            .map(|&address| u64::from(unsafe { header(address & !(SLAB - 1)) }.slot))
            .sum()
    }

    /// Bytes in live slots.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// A snapshot of the counters, added to `counters`.
    pub(crate) fn add_counters(&self, counters: &mut Counters) {
        counters.live_bytes += self.live_bytes;
        counters.mapped_bytes += self.mapped_bytes;
        counters.peak_mapped_bytes += self.mapped_bytes;
        counters.released_bytes += self.released_bytes;
        counters.allocations += self.allocations;
        counters.deallocations += self.deallocations;
    }
}

impl Arena {
    /// Allocates a slot of class `class` for `size` bytes asked as `kind`; `None` if the OS
    /// gives no memory.
    #[inline(always)]
    pub(crate) fn slab_alloc(
        &mut self,
        slabs: &mut Slabs,
        class: usize,
        size: usize,
        kind: usize,
        source: &impl ChunkSource,
    ) -> Option<usize> {
        let mut base = slabs.current[class];
        // SAFETY: current slabs are this arena's, whose lock the caller holds.
        if base == 0 || !unsafe { has_room(header(base)) } {
            base = self.slab_refill(slabs, class, source)?;
        }
        // SAFETY: as above.
        let c = unsafe { header(base) };
        // Uniform among the window's free slots: a slot drawn uniformly, again while it is
        // live (at most 7/8 of them are: 8 draws at worst on average, 2 at half full).
        let window = u64::from(c.state.window);
        let index = loop {
            let index = self.rng().below(window) as usize;
            let bits = bitmap_word(base, index / 64);
            let held = bits.load(Ordering::Relaxed);
            if held & 1 << (index % 64) == 0 {
                // Only this arena's holder sets bits, and only it clears them (remote frees
                // are drained under the lock): a plain store keeps every bit.
                bits.store(held | 1 << (index % 64), Ordering::Relaxed);
                break index;
            }
        };
        c.state.live += 1;
        let slot = c.slot as usize;
        let address = slot_address(c, index);
        // SAFETY: a free slot of this slab, ours under the lock.
        unsafe { touch_slot(base, c, address, slot) };
        if self.zero_fill {
            // SAFETY: a free slot of this slab, ours under the lock.
            unsafe {
                if slot <= fill::CHECK_FULL {
                    check_zero(address, address + slot);
                } else {
                    check_zero(address, address + fill::CHECK_EDGE);
                    check_zero(address + slot - fill::CHECK_EDGE, address + slot);
                }
            }
        }
        let slack = slot - size;
        record(c, index).store(
            LIVE | slack as u16 | (kind as u16) << KIND_SHIFT,
            Ordering::Relaxed,
        );
        if self.canaries {
            // SAFETY: the slot was just taken; `size < slot` with canaries.
            unsafe { arm(self.key, address, slot, size) };
        }
        slabs.live_bytes += slot as u64;
        slabs.allocations += 1;
        slabs.last_used[class] = slabs.allocations;
        let old = usize::from(slabs.delay_old[class]);
        let held = slabs.delayed[class][old];
        if held != 0 && slabs.allocations - slabs.delayed_at[class][old] >= DELAY_ALLOCATIONS {
            slabs.delayed[class][old] = 0;
            slabs.delay_old[class] = ((old + 1) % DELAY) as u8;
            // SAFETY: a held-back slot of this arena, under its lock.
            unsafe { self.slab_release_slot(slabs, held) };
        }
        if slabs.allocations.is_multiple_of(IDLE_EVERY) {
            self.release_idle(slabs);
        }
        Some(address)
    }

    /// Makes room in class `class`: grows the current slab's window, or replaces the slab
    /// with a reusable one or a new one. Returns the slab to draw from.
    #[cold]
    #[inline(never)]
    fn slab_refill(
        &mut self,
        slabs: &mut Slabs,
        class: usize,
        source: &impl ChunkSource,
    ) -> Option<usize> {
        let mut base = slabs.current[class];
        loop {
            if base != 0 {
                // SAFETY: this arena's slab, under its lock.
                let c = unsafe { header(base) };
                if has_room(c) {
                    return Some(base);
                }
                if c.state.window < c.capacity {
                    let live = c.state.live as usize;
                    let want = (live + MIN_FREE as usize)
                        .max(live * 8 / 7 + 64)
                        .max(MIN_WINDOW);
                    let window = want.next_multiple_of(64).min(c.capacity as usize);
                    // SAFETY: this slab; the new slots are free and never handed out since
                    // the window last reached them.
                    unsafe { grow_window(base, c, window) };
                    continue;
                }
                // Full: it comes back when frees bring it under 3/4.
                slabs.current[class] = 0;
            }
            base = slabs.reusable[class];
            if base != 0 {
                // SAFETY: as above.
                let c = unsafe { header(base) };
                slabs.reusable[class] = c.state.next;
                c.state.listed = 0;
                c.state.next = 0;
            } else {
                let key = self.canaries.then_some(self.key);
                if slabs.carve.is_multiple_of(CHUNK) {
                    // Out of slabs (or none yet): a chunk, its first slab set up.
                    base = source.new_slab_chunk(self.index, class, key)?;
                    slabs.mapped_bytes += CHUNK as u64;
                } else {
                    base = slabs.carve;
                    // SAFETY: the next slab of this arena's newest slab chunk, untouched.
                    unsafe { init_slab(base, self.index, class, key) };
                }
                slabs.carve = base + SLAB;
            }
            slabs.current[class] = base;
        }
    }

    /// For every class without an allocation in the last [`IDLE_AGE`] slab allocations (a
    /// program that moved on to other sizes): makes its held-back slots free, and gives
    /// back the pages of its current slab if that is then empty.
    #[cold]
    fn release_idle(&mut self, slabs: &mut Slabs) {
        for class in 0..SLAB_CLASSES {
            let base = slabs.current[class];
            if base == 0 || slabs.allocations - slabs.last_used[class] < IDLE_AGE {
                continue;
            }
            for at in 0..DELAY {
                let held = core::mem::take(&mut slabs.delayed[class][at]);
                if held != 0 {
                    // SAFETY: a held-back slot of this arena, under its lock.
                    unsafe { self.slab_release_slot(slabs, held) };
                }
            }
            slabs.delay_next[class] = 0;
            slabs.delay_old[class] = 0;
            // SAFETY: this arena's slab, under its lock.
            let c = unsafe { header(base) };
            if c.state.live == 0 && c.state.window > 0 {
                // SAFETY: empty: nothing in its slots or records is needed.
                slabs.released_bytes += unsafe { release_slab(base, c) };
            }
        }
    }

    /// Frees the slot `at` of this arena, located already (see [`locate`]):
    /// checks its canaries and what the free was told, zeroes it, clears its bit.
    ///
    /// # Safety
    ///
    /// `at` came from `slab_locate` on a slab of this arena, whose lock the caller holds.
    #[inline(always)]
    pub(crate) unsafe fn slab_free(
        &mut self,
        slabs: &mut Slabs,
        at: SlotRef,
        expect: Expect,
    ) -> Result<(), Invalid> {
        let (c, r, rec) = live(at)?;
        let slot = c.slot as usize;
        slot_checks(self.key, self.canaries, at.address, slot, rec, expect)?;
        if self.zero_fill {
            // SAFETY: as above: the program gave the slot back.
            unsafe { scrub(at.address, slot, rec, self.canaries) };
        }
        r.store(QUEUED, Ordering::Relaxed);
        // SAFETY: forwarded.
        unsafe { self.retire(slabs, c, at.address) };
        Ok(())
    }

    /// Counts the freed slot at `address` of the slab `c` (its record says queued, its
    /// bit is still set) as freed, and holds it back among its class's [`DELAY`] freed
    /// last; the oldest of those becomes free to draw.
    ///
    /// # Safety
    ///
    /// A freed slot of a slab of this arena, zeroed, under the lock.
    #[inline(always)]
    unsafe fn retire(&mut self, slabs: &mut Slabs, c: &Slab, address: usize) {
        let class = c.class as usize;
        slabs.live_bytes -= u64::from(c.slot);
        slabs.deallocations += 1;
        let at = usize::from(slabs.delay_next[class]);
        let evicted = core::mem::replace(&mut slabs.delayed[class][at], address);
        slabs.delayed_at[class][at] = slabs.allocations;
        slabs.delay_next[class] = ((at + 1) % DELAY) as u8;
        if evicted != 0 {
            // The ring was full: the oldest was the one replaced.
            slabs.delay_old[class] = slabs.delay_next[class];
            // SAFETY: a held-back slot of this arena.
            unsafe { self.slab_release_slot(slabs, evicted) };
        }
    }

    /// Makes the held-back slot at `address` free to draw: clears its record and its bit,
    /// and keeps the slab's place: back on its class's reusable list under 3/4, its pages
    /// given back when it empties (a slab that is not current).
    ///
    /// # Safety
    ///
    /// A slot of a slab of this arena that [`retire`](Self::retire) held back, under the
    /// lock.
    #[inline(always)]
    unsafe fn slab_release_slot(&mut self, slabs: &mut Slabs, address: usize) {
        let base = address & !(SLAB - 1);
        // SAFETY: forwarded.
        let c = unsafe { header(base) };
        let index = slot_index(c, address - base - c.slots as usize);
        record(c, index).store(0, Ordering::Relaxed);
        let bits = bitmap_word(base, index / 64);
        bits.store(
            bits.load(Ordering::Relaxed) & !(1 << (index % 64)),
            Ordering::Relaxed,
        );
        c.state.live -= 1;
        let class = c.class as usize;
        if slabs.current[class] == base {
            return;
        }
        if c.state.live == 0 && c.state.window > 0 {
            // SAFETY: empty, and not current: nothing in it is needed.
            slabs.released_bytes += unsafe { release_slab(base, c) };
        }
        if c.state.listed == 0 && c.state.live <= c.capacity / 4 * 3 {
            c.state.listed = 1;
            c.state.next = slabs.reusable[class];
            slabs.reusable[class] = base;
        }
    }

    /// Frees the slots other threads queued on this arena's stack of slab frees (linked
    /// through their first words; `head` from `RemoteFrees::take_all`).
    ///
    /// # Safety
    ///
    /// The stack's slots are this arena's, queued, zeroed but for their links where
    /// zero-fill is on; the lock is held.
    pub(crate) unsafe fn slab_drain(&mut self, slabs: &mut Slabs, mut node: usize) {
        while node != 0 {
            // SAFETY: forwarded: a queued slot, linked through its first word.
            let next = unsafe { rd(node) };
            // SAFETY: as above.
            unsafe { wr(node, 0) };
            let base = node & !(SLAB - 1);
            // SAFETY: a slot of this arena's slab.
            let c = unsafe { header(base) };
            let index = slot_index(c, node - base - c.slots as usize);
            if bitmap_word(base, index / 64).load(Ordering::Relaxed) & 1 << (index % 64) == 0 {
                // Claimed while free: a second free of a slot freed before, or one never
                // handed out (the thread that queued it does not read the bitmap: the line
                // is this arena's).
                os::fatal(Invalid::DoubleFree.message(), node);
            }
            // SAFETY: forwarded: queued (its record says so), zeroed.
            unsafe { self.retire(slabs, c, node) };
            node = next;
        }
    }

    /// Resizes the live slot `at` to `size` bytes if it fits; `false` (nothing changed)
    /// if not.
    ///
    /// # Safety
    ///
    /// As [`slab_free`](Self::slab_free).
    pub(crate) unsafe fn slab_resize(
        &mut self,
        slabs: &mut Slabs,
        at: SlotRef,
        size: usize,
    ) -> Result<bool, Invalid> {
        let (c, r, rec) = live(at)?;
        let slot = c.slot as usize;
        // A realloc checks the canaries as a free does.
        slot_checks(
            self.key,
            self.canaries,
            at.address,
            slot,
            rec,
            Expect::NOTHING,
        )?;
        let need = size + usize::from(self.canaries);
        if need > slot {
            return Ok(false);
        }
        let old = slot - usize::from(rec & SLACK);
        if self.canaries && size < old {
            // The bytes the block gives up, and the old canary's past them, read as free
            // memory would before the new canary covers its first ones: the slack past a
            // canary reads zero (what `scrub` relies on).
            let end = (old + CANARY_SPAN).min(slot - 1);
            // SAFETY: the slot is the caller's.
            unsafe { ((at.address + size) as *mut u8).write_bytes(0, end - size) };
        }
        r.store(((slot - size) as u16) | (rec & !SLACK), Ordering::Relaxed);
        if self.canaries {
            if size > old {
                // SAFETY: as above; the old canary's bytes the block now covers are the
                // program's, the rest of the slack is cleared first.
                unsafe { ((at.address + old) as *mut u8).write_bytes(0, slot - 1 - old) };
            }
            // SAFETY: as above; `size < slot`.
            unsafe { arm(self.key, at.address, slot, size) };
        }
        // `Stats` counts a reallocation as a free and an allocation, moved or not.
        slabs.allocations += 1;
        slabs.deallocations += 1;
        Ok(true)
    }
}

/// The checks of a free of the live slot at `address` with record `rec`: its canaries (its
/// own and the last byte below it) and what C++'s `delete` said.
#[inline(always)]
fn slot_checks(
    key: u64,
    canaries: bool,
    address: usize,
    slot: usize,
    rec: u16,
    expect: Expect,
) -> Result<(), Invalid> {
    let size = slot - usize::from(rec & SLACK);
    // Without canaries nothing is read.
    if canaries {
        // SAFETY: callers pass a live slot of this heap, whose bytes and the one below it
        // are the heap's.
        let (own, below) = unsafe {
            (
                canary_intact(key, address, slot, size),
                below_intact(key, address, slot),
            )
        };
        if !own {
            return Err(Invalid::Overflow);
        }
        if !below {
            return Err(Invalid::Underflow);
        }
    }
    if expect.kind != 0 {
        let kind = usize::from(rec >> KIND_SHIFT) & 3;
        if kind != 0 && kind != expect.kind {
            return Err(Invalid::WrongDelete);
        }
    }
    match expect.size {
        // Exactly what was asked with canaries (the usable size); without, any size the
        // slot's class serves (the usable size is the slot's).
        Some(told) if canaries && told != size => Err(Invalid::WrongSize),
        Some(told) if !canaries && class_of(told) != class_of(slot) => Err(Invalid::WrongSize),
        _ => Ok(()),
    }
}

/// Whether the window of `c` has room for a draw: at least [`MIN_FREE`] free slots and at
/// most 7/8 of them live (a window of fewer than [`MIN_WINDOW`] slots, where it has not
/// grown yet or its pages were given back, has no room).
#[inline(always)]
fn has_room(c: &Slab) -> bool {
    let free = c.state.window - c.state.live;
    free >= MIN_FREE && free * 8 >= c.state.window && c.state.window as usize >= MIN_WINDOW
}

/// Grows the window of the slab at `base` to `window` slots; the pages of the new slots'
/// bitmap words are made present for writing first (see `fill::touch_for_write`: a draw
/// that read a fresh page would map the zero page, and the write that follows would fault
/// again and flush every CPU's translation of it). The slots' own pages wait for their
/// first slot handed out ([`touch_slot`]): a class with a few objects keeps the pages it
/// uses, not its window's.
///
/// # Safety
///
/// `base` is a slab of the caller's arena, under its lock, `c` its header, and
/// `window` at most its capacity and above its window.
unsafe fn grow_window(base: usize, c: &mut Slab, window: usize) {
    let old = c.state.window as usize;
    // SAFETY: forwarded: the new slots are free, and the bitmap is the arena's.
    unsafe {
        touch_pages(
            base + HEAD + 8 * (old / 64),
            base + HEAD + 8 * window.div_ceil(64),
        )
    };
    c.state.window = window as u32;
    count_untouched(base, c);
}

/// Counts the window's pages not touched yet into `c.state.untouched` (see
/// [`touch_slot`]): those from the page of the byte below slot 0 to the page of the
/// window's last byte; `base` is the slab of header `c`.
#[cold]
fn count_untouched(base: usize, c: &mut Slab) {
    let window = c.state.window as usize;
    c.state.untouched = if window == 0 {
        0
    } else {
        let first = (slot_address(c, 0) - 1 - base) / fill::PAGE_MIN;
        let last = (slot_address(c, window) - 1 - base) / fill::PAGE_MIN;
        (first..=last)
            .filter(|&page| c.state.touched[page / 64] & 1 << (page % 64) == 0)
            .count() as u32
    };
}

/// Makes every page of `[from, to)` present for writing.
///
/// # Safety
///
/// `from` is 16-byte aligned; the range is free memory of a slab of the caller's arena
/// (or its bitmap), under its lock.
unsafe fn touch_pages(from: usize, to: usize) {
    let mut at = from;
    while at < to {
        // SAFETY: forwarded: a 16-byte granule of the range.
        unsafe { touch_for_write(at, at + 16) };
        at = (at & !(fill::PAGE_MIN - 1)) + fill::PAGE_MIN;
    }
}

/// Makes the pages of the slot at `address` (`slot` bytes, in the slab at `base` whose
/// header is `c`), and the page of the byte just below it, present for writing before the
/// slot is checked and handed out, where no slot on them was handed out since the slab was
/// set up or gave its pages back: the check reads the slot, and the free reads the byte
/// below it (see [`grow_window`] for why a read must not come first).
///
/// # Safety
///
/// The slot is free, in a slab of the caller's arena, under its lock.
#[inline(always)]
unsafe fn touch_slot(base: usize, c: &mut Slab, address: usize, slot: usize) {
    if c.state.untouched == 0 {
        return;
    }
    let below = (address - 1 - base) / fill::PAGE_MIN;
    let last = (address + slot - 1 - base) / fill::PAGE_MIN;
    let touched = |page: usize| c.state.touched[page / 64] & 1 << (page % 64) != 0;
    if !touched(below) || !touched(last) {
        // SAFETY: forwarded.
        unsafe { touch_slot_pages(base, c, address, slot) };
    }
}

/// [`touch_slot`] for pages not touched yet: each is made present by an atomic add of 0 to
/// a word of it ([`touch_for_write`]), which changes nothing. A page whose bit is clear
/// holds no slot handed out since, so every word of it is free memory of this arena (or,
/// below slot 0, the slab's own bytes).
///
/// # Safety
///
/// As `touch_slot`.
#[cold]
#[inline(never)]
unsafe fn touch_slot_pages(base: usize, c: &mut Slab, address: usize, slot: usize) {
    for at in [address - 16, address, address + slot - 16] {
        let page = (at - base) / fill::PAGE_MIN;
        if c.state.touched[page / 64] & 1 << (page % 64) == 0 {
            // SAFETY: forwarded: a 16-byte granule of the slab, on a page holding no slot
            // handed out (free memory, or the pad below slot 0), under the lock.
            unsafe { touch_for_write(at, at + 16) };
            c.state.touched[page / 64] |= 1 << (page % 64);
        }
    }
    count_untouched(base, c);
}

/// Gives the pages of an empty slab's slots and records back to the OS and closes its
/// window; the bytes given back.
///
/// # Safety
///
/// `base` is a slab of the caller's arena with no taken slot, under its lock.
unsafe fn release_slab(base: usize, c: &mut Slab) -> u64 {
    let end = slot_address(c, c.state.window as usize);
    let (records, slots) = (base + c.records as usize, base + c.slots as usize);
    // SAFETY: forwarded: nothing in the range is live, and all of it reads zero after.
    let records = unsafe { os::release_pages(records, slots - 16) };
    // SAFETY: as above.
    let slots = unsafe { os::release_pages(slots, end) };
    c.state.window = 0;
    c.state.touched = [0; SLAB / fill::PAGE_MIN / 64];
    c.state.untouched = 0;
    (records.len() + slots.len()) as u64
}

/// The slot `payload` names in its slab (of a registered slab chunk), if it is a slot's
/// start. A slab of the chunk not set up yet reads as zeros: no slot.
#[inline(always)]
pub(crate) fn locate(payload: usize) -> Result<SlotRef, Invalid> {
    let base = payload & !(SLAB - 1);
    // SAFETY: the slab lies in a registered slab chunk; its layout is fixed once set up.
    let c = unsafe { header(base) };
    let offset = payload
        .checked_sub(base + c.slots as usize)
        .ok_or(Invalid::BadHeader)?;
    let index = slot_index(c, offset);
    if index * c.slot as usize != offset || index >= c.capacity as usize {
        return Err(Invalid::BadHeader);
    }
    Ok(SlotRef {
        slab: base,
        index,
        address: payload,
    })
}

/// The slab of the slot `at`, its record and what the record holds, if the slot is live
/// (handed out and not freed); else a double free (of a slot freed, held back, queued, or
/// never handed out).
#[inline(always)]
fn live<'a>(at: SlotRef) -> Result<(&'a Slab, &'a AtomicU16, u16), Invalid> {
    // SAFETY: `locate` found the slot in a slab of a registered slab chunk.
    let c: &Slab = unsafe { header(at.slab) };
    let r = record(c, at.index);
    let rec = r.load(Ordering::Relaxed);
    if rec & LIVE == 0 {
        return Err(Invalid::DoubleFree);
    }
    Ok((c, r, rec))
}

/// The usable size of the live slot `at`: what was asked with canaries (the bytes past it
/// are the canary), the whole slot without.
pub(crate) fn usable(at: SlotRef, canaries: bool) -> Result<usize, Invalid> {
    let (c, _, rec) = live(at)?;
    let slot = c.slot;
    if canaries {
        Ok(slot as usize - usize::from(rec & SLACK))
    } else {
        Ok(slot as usize)
    }
}

/// Queues the free of the slot `at` for its arena, whose lock is busy: claims the slot
/// (its record's queued flag, with a compare-and-swap that catches a second free), checks
/// it as a free does, and zeroes it with zero-fill (`checks`: the heap's); returns its
/// address, to be pushed with its first word as the link.
pub(crate) fn claim(
    key: u64,
    checks: Checks,
    at: SlotRef,
    expect: Expect,
) -> Result<usize, Invalid> {
    let (c, r, rec) = live(at)?;
    let slot = c.slot;
    slot_checks(
        key,
        checks.contains(Checks::CANARIES),
        at.address,
        slot as usize,
        rec,
        expect,
    )?;
    r.compare_exchange(rec, QUEUED, Ordering::Relaxed, Ordering::Relaxed)
        .map_err(|_| Invalid::DoubleFree)?;
    if checks.contains(Checks::ZERO_FILL) {
        // SAFETY: claimed: the slot is this thread's until it is pushed.
        unsafe {
            scrub(
                at.address,
                slot as usize,
                rec,
                checks.contains(Checks::CANARIES),
            )
        };
    }
    Ok(at.address)
}

/// What the heap walk checks slabs with: the heap's key and detection classes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlabCheck {
    /// The key of the canaries.
    pub(crate) key: u64,
    /// Whether free slots must read zero.
    pub(crate) zero_fill: bool,
    /// Whether live slots carry canaries.
    pub(crate) canaries: bool,
}

impl SlabCheck {
    /// The heap walk of a slab chunk at `base`: each slab set up in it, see
    /// [`slab`](Self::slab); returns what it counted.
    ///
    /// # Safety
    ///
    /// `base` is a slab chunk of an arena whose lock the caller holds.
    pub(crate) unsafe fn chunk(
        self,
        base: usize,
        shape: &mut HeapShape,
    ) -> Result<SlabWalk, Corruption> {
        let mut walk = SlabWalk::default();
        for at in (base..base + CHUNK).step_by(SLAB) {
            // SAFETY: forwarded; a slab not set up reads as zeros (no capacity).
            if unsafe { header(at) }.capacity == 0 {
                continue;
            }
            // SAFETY: forwarded.
            let one = unsafe { self.slab(at, shape) }?;
            walk.live_bytes += one.live_bytes;
            walk.queued_bytes += one.queued_bytes;
        }
        Ok(walk)
    }
}

/// What the heap walk counts in slabs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlabWalk {
    /// Bytes of live slots.
    pub(crate) live_bytes: u64,
    /// Bytes of freed slots whose bits are still set: held back by their arena, or queued
    /// by another thread and not drained yet (these still count as live in the counters).
    pub(crate) queued_bytes: u64,
}

impl SlabCheck {
    /// The heap walk of one slab: bits against the live count, free slots zero (with
    /// zero-fill) and their records clear, live slots' canaries intact, freed slots whose bits
    /// are still set zero past their first word (a queued slot's link). Live slots count in
    /// `shape` as live blocks (free slots are not on any list, and do not count); returns what
    /// it counted.
    ///
    /// # Safety
    ///
    /// `base` is a slab, set up, of an arena whose lock the caller holds.
    unsafe fn slab(self, base: usize, shape: &mut HeapShape) -> Result<SlabWalk, Corruption> {
        let SlabCheck {
            key,
            zero_fill,
            canaries,
        } = self;
        // SAFETY: forwarded.
        let c = unsafe { header(base) };
        let slot = c.slot as usize;
        let mut live = 0u32;
        let mut walk = SlabWalk::default();
        for index in 0..c.state.window as usize {
            let held =
                bitmap_word(base, index / 64).load(Ordering::Relaxed) & 1 << (index % 64) != 0;
            let rec = record(c, index).load(Ordering::Relaxed);
            let address = slot_address(c, index);
            if held && rec & LIVE == 0 {
                // Freed, held back (or queued by another thread, linked through its first
                // word): zeroed past the link.
                live += 1;
                walk.queued_bytes += slot as u64;
                if zero_fill && let Some(word) = first_dirty(address + 8, address + slot) {
                    return Err(Corruption::at(audit::FREE_MEMORY_MODIFIED, word));
                }
            } else if held {
                live += 1;
                walk.live_bytes += slot as u64;
                shape.live_blocks += 1;
                shape.live_bytes += slot as u64;
                let size = slot - usize::from(rec & SLACK);
                // SAFETY: a live slot, not queued.
                if canaries && !unsafe { canary_intact(key, address, slot, size) } {
                    return Err(Corruption::at("slab slot canary overwritten", address));
                }
            } else {
                if rec != 0 {
                    return Err(Corruption::at("free slab slot with a record", address));
                }
                if zero_fill && let Some(word) = first_dirty(address, address + slot) {
                    return Err(Corruption::at(audit::FREE_MEMORY_MODIFIED, word));
                }
            }
        }
        if live != c.state.live {
            return Err(Corruption::with(
                "slab's live count disagrees with its bitmap",
                base,
                c.state.live as usize,
                live as usize,
            ));
        }
        Ok(walk)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_request_takes_the_smallest_slot_that_holds_it() {
        for need in 0..=SLOT_MAX {
            let class = class_of(need).expect("a slot up to the largest");
            assert!(
                SLOT_SIZES[class] >= need,
                "{need}: slot {}",
                SLOT_SIZES[class]
            );
            if class > 0 {
                assert!(SLOT_SIZES[class - 1] < need, "{need}: a smaller slot fits");
            }
        }
        assert_eq!(class_of(SLOT_MAX + 1), None);
        assert_eq!(class_of(usize::MAX / 2), None);
    }

    /// A 16-byte-aligned buffer of 160 bytes, each `fill`.
    #[repr(align(16))]
    struct Buffer([u8; 160]);

    #[test]
    fn a_canary_span_is_written_and_read_exactly_over_its_bytes() {
        for n in 1..=CANARY_SPAN {
            for start in 0..16 {
                let mut buffer = Buffer([0; 160]);
                // Every access goes through this pointer, the span's as the test's.
                let base = buffer.0.as_mut_ptr() as usize + 32;
                // SAFETY: offsets -32..128 from `base` lie in the buffer, which nothing
                // else uses.
                let byte = |i: usize| unsafe { ((base + i) as *const u8).read() };
                // SAFETY: as above.
                let flip = |i: usize, bits: u8| unsafe {
                    let at = (base + i) as *mut u8;
                    at.write(at.read() ^ bits);
                };
                // SAFETY: as above.
                unsafe { fill_span(base + start, n, 0xa5) };
                for i in 0..32 {
                    let inside = (start..start + n).contains(&i);
                    assert_eq!(
                        byte(i),
                        if inside { 0xa5 } else { 0 },
                        "n {n}, start {start}, byte {i}"
                    );
                }
                // SAFETY: as above.
                assert_eq!(unsafe { span_differs(base + start, n, 0xa5) }, 0);
                for at in start..start + n {
                    flip(at, 0x10);
                    // SAFETY: as above.
                    let diff = unsafe { span_differs(base + start, n, 0xa5) };
                    assert_ne!(diff, 0, "n {n}, start {start}: byte {at} changed, unseen");
                    flip(at, 0x10);
                }
                // Bytes around the span are not the span's.
                flip(start + n, 1);
                if start > 0 {
                    flip(start - 1, 1);
                }
                // SAFETY: as above.
                assert_eq!(unsafe { span_differs(base + start, n, 0xa5) }, 0);
            }
        }
    }

    #[test]
    fn zeroing_granules_clears_exactly_them() {
        for len in (16..=128).step_by(16) {
            let mut buffer = Buffer([0xff; 160]);
            let base = buffer.0.as_mut_ptr() as usize;
            // SAFETY: `[16, 16 + len)` lies in the buffer, 16-byte aligned.
            unsafe { zero_granules(base + 16, len) };
            for i in 0..160 {
                let inside = (16..16 + len).contains(&i);
                // SAFETY: a byte of the buffer.
                let b = unsafe { ((base + i) as *const u8).read() };
                assert_eq!(b, if inside { 0 } else { 0xff }, "len {len}, byte {i}");
            }
        }
    }

    #[test]
    fn the_reciprocal_divides_every_offset_of_every_slab_exactly() {
        for (class, &slot) in SLOT_SIZES.iter().enumerate() {
            let layout = Layout::of(slot);
            assert!(layout.slots + layout.capacity * slot <= SLAB, "{slot}");
            assert!(
                layout.records + 2 * layout.capacity + 16 <= layout.slots,
                "{slot}"
            );
            let header = Slab {
                arena: 0,
                slot: slot as u32,
                capacity: layout.capacity as u32,
                class: class as u32,
                records: layout.records as u32,
                slots: layout.slots as u32,
                reciprocal: (1u64 << 32).div_ceil(slot as u64) as u32,
                state: State::new(0, 0),
            };
            // Every 16-byte-aligned offset a pointer into the slab can have.
            for offset in (0..SLAB - layout.slots).step_by(16) {
                assert_eq!(
                    slot_index(&header, offset),
                    offset / slot,
                    "{slot} B, {offset}"
                );
            }
        }
    }

    #[test]
    fn the_untouched_count_follows_the_window_and_the_slots_handed_out() {
        let mapping = os::map_aligned(SLAB, SLAB).expect("a slab's worth of memory");
        let base = mapping.as_ptr() as usize;
        let class = class_of(272).unwrap();
        let slot = SLOT_SIZES[class];
        // SAFETY: a fresh mapping of one slab, this test's alone.
        unsafe { init_slab(base, 0, class, None) };
        // SAFETY: as above.
        let c = unsafe { header(base) };
        let page_of = |address: usize| (address - base) / fill::PAGE_MIN;
        let span = |c: &Slab, window: usize| {
            page_of(slot_address(c, 0) - 1)..=page_of(slot_address(c, window) - 1)
        };
        // SAFETY: a set-up slab, its window above 0 and within its capacity.
        unsafe { grow_window(base, c, MIN_WINDOW) };
        assert_eq!(c.state.untouched as usize, span(c, MIN_WINDOW).count());
        // Slots handed out from the top: the count falls as their pages are touched, and
        // reaches 0 when every page of the window is.
        let mut last = c.state.untouched;
        for index in (0..MIN_WINDOW).rev() {
            // SAFETY: a free slot of the slab, in its window.
            unsafe { touch_slot(base, c, slot_address(c, index), slot) };
            assert!(c.state.untouched <= last, "slot {index}");
            last = c.state.untouched;
        }
        assert_eq!(c.state.untouched, 0);
        // A wider window counts only its new pages.
        let old = span(c, MIN_WINDOW);
        // SAFETY: as above.
        unsafe { grow_window(base, c, 2 * MIN_WINDOW) };
        let new = span(c, 2 * MIN_WINDOW)
            .filter(|page| !old.contains(page))
            .count();
        assert_eq!(c.state.untouched as usize, new);
        // SAFETY: the slab's slots were never handed to anyone.
        unsafe { os::unmap(mapping, SLAB) };
    }

    #[test]
    fn a_window_always_leaves_room_for_a_draw_among_many() {
        // The growth rule of `slab_refill`, for every live count a slab can hold: the
        // window it grows to has room (or is the whole slab).
        for &slot in &SLOT_SIZES {
            let capacity = Layout::of(slot).capacity;
            for live in 0..capacity {
                let want = (live + MIN_FREE as usize)
                    .max(live * 8 / 7 + 64)
                    .max(MIN_WINDOW);
                let window = want.next_multiple_of(64).min(capacity);
                let header = Slab {
                    arena: 0,
                    slot: slot as u32,
                    capacity: capacity as u32,
                    class: 0,
                    records: 0,
                    slots: 0,
                    reciprocal: 0,
                    state: State::new(window as u32, live as u32),
                };
                if window < capacity {
                    assert!(has_room(&header), "{slot} B, {live} live: window {window}");
                }
            }
        }
    }
}
