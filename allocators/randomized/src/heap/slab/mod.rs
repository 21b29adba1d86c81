//! Small objects in slabs: a slab per size class and arena, its slots tracked by a bitmap,
//! each allocation a slot drawn at random among the free ones of a window.
//!
//! Requests of up to 1,039 bytes (1,040 with the canary byte) with the default alignment take
//! a slot of one of [`SLOT_SIZES`] (16-byte steps to 128 B, then four sizes per power of two,
//! 16 bytes above its quarters, so that a power of two fits with its canary).
//! Each arena keeps, per class, a *current* slab of 1 MiB (four to a chunk of the chunk
//! table, all of one arena): a header, a bitmap of its slots, a 16-bit record per slot (the
//! request's slack, how the program asked for it, live or freed) beside an entry of the
//! list of the window's free slots, then the slots.
//!
//! **Placement.** An allocation draws a slot uniformly among the free slots of the slab's
//! *window* (its first slots), from a list of them ([`free_entry`]).
//! The window spans at least [`MIN_WINDOW`] = 256 slots and grows whenever fewer than
//! [`MIN_FREE`] of them are free or more than 7/8 are taken, so consecutive blocks land
//! anywhere among at least 256 places. A freed slot is held back until [`DELAY`] more of
//! its class are freed or [`DELAY_ALLOCATIONS`] allocations pass, so the block just freed
//! never comes straight back. A full slab gives way to one of the
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
//!
//! Here: the classes, a slab's layout and header, setting a slab up, and finding the slot
//! a pointer names. `alloc.rs` takes slots (the draw, the window's growth, new slabs, the
//! pages a slot lies on); `free.rs` gives them back (the checks at free, the held-back
//! slots, other threads' frees, resizing in place, idle and empty slabs' pages);
//! `bytes.rs` writes and checks a slot's bytes (canaries, zeroing, the zero check);
//! `walk.rs` is the heap walk's part.

use core::sync::atomic::{AtomicU16, AtomicU64, Ordering};

use super::fill::{WRITE_AFTER_FREE, touch_for_write};
use super::header::canary_byte;
use super::*;
use crate::Checks;
use crate::os;

mod alloc;
mod bytes;
mod free;
#[cfg(all(test, not(loom)))]
mod tests;
mod walk;

pub(crate) use free::claim;
pub(crate) use walk::{SlabCheck, SlabWalk};

/// Slot sizes, smallest first: 16-byte steps to 128 B, then two per power of two, each 16
/// bytes above a power of two or a half step (144, 208, 272, 400, 528, ...), so that a
/// request of a power of two or of one and a half times one, the commonest sizes, fits the
/// slot just above it with its canary byte (128 B in 144, 384 B in 400, 1 KiB in 1,040)
/// instead of taking the next step or, at 1 KiB, the block path.
///
/// Two steps per power of two, not four: every class a thread uses holds a window of at
/// least [`MIN_WINDOW`] slots in its arena, live or not, so a class costs 256 slots of
/// memory before it costs any per object, and a program whose objects spread over many
/// classes with a few hundred of each paid more for the windows than for the coarser
/// rounding. With every class in use an arena's windows span 256 × 3,952 bytes (1.0 MB)
/// where four steps made it 256 × 6,736 (1.7 MB).
pub(crate) const SLOT_SIZES: [usize; 15] = [
    16, 32, 48, 64, 80, 96, 112, 128, 144, 208, 272, 400, 528, 784, 1040,
];
/// Size classes of the slabs.
pub(crate) const SLAB_CLASSES: usize = SLOT_SIZES.len();
/// The largest slot: requests needing more go to the block path.
pub(crate) const SLOT_MAX: usize = SLOT_SIZES[SLAB_CLASSES - 1];
/// Free slots a window keeps at the least before it grows (with [`MIN_WINDOW`] and the
/// 7/8 bound on taken slots: an allocation lands on one of at least 64 free slots, and at
/// least an eighth of the window's).
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
    /// Offset of the records, each beside an entry of the free list (see [`free_entry`]).
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
    /// Offset of the records and free-list entries.
    records: usize,
    /// Offset of slot 0.
    slots: usize,
}

impl Layout {
    const fn of(slot: usize) -> Self {
        // Bitmap (1/8 byte a slot, whole words), record and free-list entry (2 bytes
        // each, side by side: a window's first entries of both lie on the same pages), the
        // slot; 16 bytes of canary before slot 0 and up to 64 of alignment.
        let capacity = ((SLAB - HEAD - 16 - 64 - 8) * 8 / (8 * slot + 33)) & !63;
        let records = HEAD + capacity / 8;
        let slots = (records + 4 * capacity + 16).next_multiple_of(64);
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
    let at = c as *const Slab as usize + c.records as usize + 4 * index;
    // SAFETY: as `bitmap_word`: a slot below the slab's capacity; records are only
    // accessed atomically.
    unsafe { &*(at as *const AtomicU16) }
}

/// Entry `at` of the free list of `c`: the indices of the free slots of its window, in no
/// order, its first `window - live` entries in use (a slot is free when its bit is clear
/// and it lies in the window). A draw picks an entry uniformly and moves the last one into
/// its place, so that an allocation takes a uniformly random free slot in one draw, where
/// drawing among the whole window and again while the slot drawn is taken took eight draws
/// on average in a window 7/8 full (redis under the preload library: 6.8 a slab
/// allocation). Entry `at` sits beside the record of slot `at`.
///
/// # Safety
///
/// `c` is a set-up slab's header and `at` below its capacity; the caller holds its
/// arena's lock for any write.
#[inline(always)]
unsafe fn free_entry(c: &Slab, at: usize) -> *mut u16 {
    (c as *const Slab as usize + c.records as usize + 4 * at + 2) as *mut u16
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

/// The index of the slot at `offset` bytes past slot 0 of `c` (rounded down).
#[inline(always)]
fn slot_index(c: &Slab, offset: usize) -> usize {
    ((offset as u64 * u64::from(c.reciprocal)) >> 32) as usize
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

    /// A snapshot of the counters (slab chunks are never unmapped, so the peak of the
    /// bytes mapped is the bytes mapped).
    pub(crate) fn counters(&self) -> Counters {
        Counters {
            live_bytes: self.live_bytes,
            mapped_bytes: self.mapped_bytes,
            peak_mapped_bytes: self.mapped_bytes,
            released_bytes: self.released_bytes,
            allocations: self.allocations,
            deallocations: self.deallocations,
            ..Counters::default()
        }
    }
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
