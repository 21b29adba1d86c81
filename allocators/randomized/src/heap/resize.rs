//! Resizing a live block in place, into its own tail or a free right neighbour.

use super::header::*;
use super::*;

impl Arena {
    /// Resizes the live block `live` in place to hold `payload` bytes, if its own tail or a
    /// free right neighbour allows. `false` (nothing changed) otherwise.
    ///
    /// # Safety
    ///
    /// `live` came from [`validate_in_chunk`] under this lock hold.
    pub(crate) unsafe fn resize_in_place(&mut self, live: Live, payload: usize) -> bool {
        // SAFETY: forwarded.
        // SAFETY: `live` is a live block of this arena, under its lock; resizing rewrites
        // its header, whose kind is then written back.
        let kind = unsafe { kind_of(live.header) };
        // SAFETY: forwarded.
        let resized = unsafe { self.resize_block(live, payload) };
        if resized && kind != 0 {
            // SAFETY: as above.
            unsafe { set_kind(live.header, kind) };
        }
        if resized && self.canaries {
            // SAFETY: the block is live and this lock's holder's; its new size is in its
            // header, at most 47 bytes past the request.
            unsafe {
                let size = rd(live.header) & !FLAGS;
                arm_canary(self.key, live.header, size, payload);
            }
        }
        if resized {
            // `Stats` counts a reallocation as a free and an allocation, moved or not.
            self.allocations += 1;
            self.deallocations += 1;
        }
        resized
    }

    /// [`resize_in_place`](Self::resize_in_place) without the counters.
    ///
    /// # Safety
    ///
    /// As `resize_in_place`.
    pub(super) unsafe fn resize_block(&mut self, live: Live, payload: usize) -> bool {
        let need = (payload.next_multiple_of(GRANULE) + HEADER).max(MIN_BLOCK);
        let (h, size) = (live.header, live.size);
        // SAFETY: (whole block) `h` is a live block; its right neighbour is reached through
        // its checked header.
        unsafe {
            if need <= size {
                if size - need >= MIN_BLOCK {
                    self.put(h, need | BUSY, live.prev);
                    let rest = h + need;
                    self.put(rest, (size - need) | BUSY, need);
                    self.live_bytes -= (size - need) as u64;
                    self.release(rest, size - need, need, false);
                }
                return true;
            }
            let right = h + size;
            let (rw0, _) = self.get_or_die(right);
            if rw0 & BUSY != 0 {
                return false;
            }
            let rsize = rw0 & !FLAGS;
            let wild = rw0 & WILD != 0;
            let total = size + rsize;
            // The wilderness keeps room for its own header.
            if total < need || (wild && total < need + MIN_BLOCK) {
                return false;
            }
            if !wild {
                self.unlink(right, rsize);
            }
            self.poison(right);
            if self.zero_fill {
                // The neighbour's links and body become the block's: its body must read
                // zero, as any memory handed out (see `fill.rs`); its links are cleared.
                self.scrub(right + HEADER, right + MIN_BLOCK);
                // With the header and links of the rest, if any, which would otherwise
                // overwrite whatever a dangling write left there unseen.
                let checked_end = if total - need >= MIN_BLOCK {
                    h + need + MIN_BLOCK
                } else {
                    h + total
                };
                if checked_end > right + MIN_BLOCK {
                    // The neighbour may be the wilderness, never touched.
                    self.take_block(right + MIN_BLOCK, checked_end, true);
                }
            }
            let grown = if total - need >= MIN_BLOCK {
                need
            } else {
                total
            };
            self.put(h, grown | BUSY, live.prev);
            self.live_bytes += (grown - size) as u64;
            if grown < total {
                let rest = h + grown;
                if wild {
                    // `h + total` is the chunk's sentinel, not written yet (see
                    // `open_wilderness`).
                    self.put(rest, (total - grown) | WILD, grown);
                    self.wild = rest;
                } else {
                    self.put(rest, (total - grown) | (rw0 & RELEASED), grown);
                    self.push(rest, total - grown);
                    self.set_prev(h + total, total - grown);
                }
            } else {
                self.set_prev(h + total, grown);
            }
        }
        true
    }
}
