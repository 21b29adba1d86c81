//! Taking a slot: the draw among the window, the window's growth, a new or reusable slab,
//! and the pages a slot lies on made present.

use super::bytes::*;
use super::*;

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
        // Uniform among the window's free slots: an entry of the free list drawn
        // uniformly, the last entry moved into its place.
        let free = (c.state.window - c.state.live) as usize;
        let at = self.rng().below(free as u64) as usize;
        // SAFETY: `at` and `free - 1` are entries in use (`has_room`: `free` is at least
        // MIN_FREE); the slab is this arena's, under its lock.
        let index = unsafe {
            let index = usize::from(free_entry(c, at).read());
            free_entry(c, at).write(free_entry(c, free - 1).read());
            index
        };
        // An entry that names a slot outside the window, or a taken one: the list was
        // written over (it lies below slot 0 of the slab).
        if index >= c.state.window as usize {
            os::fatal(FREE_LIST_CORRUPTED, slot_address(c, index));
        }
        let bits = bitmap_word(base, index / 64);
        let held = bits.load(Ordering::Relaxed);
        if held & 1 << (index % 64) != 0 {
            os::fatal(FREE_LIST_CORRUPTED, slot_address(c, index));
        }
        // Only this arena's holder sets bits, and only it clears them (remote frees are
        // drained under the lock): a plain store keeps every bit.
        bits.store(held | 1 << (index % 64), Ordering::Relaxed);
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
}

/// The message an allocation aborts with when its slab's free list names a slot that is not
/// free.
const FREE_LIST_CORRUPTED: &str = "corrupted slab free list (heap underflow?)";

/// Whether the window of `c` has room for a draw: at least [`MIN_FREE`] free slots and at
/// most 7/8 of them live (a window of fewer than [`MIN_WINDOW`] slots, where it has not
/// grown yet or its pages were given back, has no room).
#[inline(always)]
pub(super) fn has_room(c: &Slab) -> bool {
    let free = c.state.window - c.state.live;
    free >= MIN_FREE && free * 8 >= c.state.window && c.state.window as usize >= MIN_WINDOW
}

/// Grows the window of the slab at `base` to `window` slots, the new slots on its free
/// list; the pages of the new slots' bitmap words are made present for writing first (see
/// `fill::touch_for_write`: a read of a fresh page would map the zero page, and the write
/// that follows would fault again and flush every CPU's translation of it). The slots' own pages wait for their
/// first slot handed out ([`touch_slot`]): a class with a few objects keeps the pages it
/// uses, not its window's.
///
/// # Safety
///
/// `base` is a slab of the caller's arena, under its lock, `c` its header, and
/// `window` at most its capacity and above its window.
pub(super) unsafe fn grow_window(base: usize, c: &mut Slab, window: usize) {
    let old = c.state.window as usize;
    let free = old - c.state.live as usize;
    // SAFETY: forwarded: the new slots are free, and the bitmap and the free list are the
    // arena's; the list's entries `free..free + window - old` lie below the capacity.
    unsafe {
        touch_pages(
            base + HEAD + 8 * (old / 64),
            base + HEAD + 8 * window.div_ceil(64),
        );
        for (k, index) in (old..window).enumerate() {
            free_entry(c, free + k).write(index as u16);
        }
    }
    c.state.window = window as u32;
    count_untouched(base, c);
}

/// Counts the window's pages not touched yet into `c.state.untouched` (see
/// [`touch_slot`]): those from the page of the byte below slot 0 to the page of the
/// window's last byte; `base` is the slab of header `c`.
#[cold]
pub(super) fn count_untouched(base: usize, c: &mut Slab) {
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
pub(super) unsafe fn touch_pages(from: usize, to: usize) {
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
pub(super) unsafe fn touch_slot(base: usize, c: &mut Slab, address: usize, slot: usize) {
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
pub(super) unsafe fn touch_slot_pages(base: usize, c: &mut Slab, address: usize, slot: usize) {
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
