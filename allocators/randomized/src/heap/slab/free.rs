//! Giving a slot back: its checks at free, the held-back slots, the stack of other threads'
//! frees, resizing in place, and the pages of slabs that empty or fall idle.

use super::bytes::*;
use super::*;

impl Arena {
    /// For every class without an allocation in the last [`IDLE_AGE`] slab allocations (a
    /// program that moved on to other sizes): makes its held-back slots free, and gives
    /// back the pages of its current slab if that is then empty.
    #[cold]
    pub(super) fn release_idle(&mut self, slabs: &mut Slabs) {
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
    /// puts it on its slab's free list, and keeps the slab's place: back on its class's
    /// reusable list under 3/4, its pages given back when it empties (a slab that is not
    /// current).
    ///
    /// # Safety
    ///
    /// A slot of a slab of this arena that [`retire`](Self::retire) held back, under the
    /// lock.
    #[inline(always)]
    pub(super) unsafe fn slab_release_slot(&mut self, slabs: &mut Slabs, address: usize) {
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
        // SAFETY: the entry past the last in use lies below the capacity (the slot was
        // taken, so fewer than `window` are free); the slab is this arena's.
        unsafe { free_entry(c, (c.state.window - c.state.live) as usize).write(index as u16) };
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
pub(super) fn slot_checks(
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

/// Gives the pages of an empty slab's slots and records back to the OS and closes its
/// window; the bytes given back.
///
/// # Safety
///
/// `base` is a slab of the caller's arena with no taken slot, under its lock.
pub(super) unsafe fn release_slab(base: usize, c: &mut Slab) -> u64 {
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
