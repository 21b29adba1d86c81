//! Reservations: a block taken in DRAM only ([`reserve`](PersistentHeap::reserve)), then
//! published into its destinations with one fence for all of them
//! ([`publish`](PersistentHeap::publish)); a dropped, unpublished [`Reservation`] gives its
//! block back.

use super::*;

impl<M: Medium> PersistentHeap<M> {
    /// Takes a block for `layout` in DRAM only: nothing persistent changes until
    /// [`publish`](Self::publish); a crash before it, or dropping the reservation, frees it.
    ///
    /// # Errors
    ///
    /// As [`allocate_into`](Self::allocate_into) for the layout.
    pub fn reserve(&self, layout: Layout) -> Result<Reservation<'_, M>, HeapError> {
        let block = self.take(layout, false)?;
        Ok(Reservation {
            heap: self,
            block,
            armed: true,
        })
    }

    /// Stores each reservation's block into its destination, flushes each destination's
    /// line and fences once: after a crash each destination holds its old value or its
    /// block (each line independently; use one line, or one destination, when the batch
    /// must be all or nothing). Reservations become published (dropping them does nothing).
    ///
    /// # Panics
    ///
    /// Before writing anything, if a destination is not 8 aligned bytes inside the root or a
    /// live block, a reservation comes from another heap, or was already published.
    ///
    /// # Safety
    ///
    /// As for [`allocate_into`](Self::allocate_into), for every destination.
    pub unsafe fn publish(&self, items: &mut [(*mut PPtr<u8>, Reservation<'_, M>)]) {
        let mut offsets = Vec::with_capacity(items.len());
        for (dest, r) in items.iter() {
            assert!(std::ptr::eq(r.heap, self), "reservation of another heap");
            assert!(r.armed, "reservation already published");
            match self.check_dest(*dest) {
                Ok(off) => offsets.push(off),
                Err(e) => panic!("publish: {e}"),
            }
        }
        for ((dest, r), &off) in items.iter_mut().zip(&offsets) {
            // SAFETY: checked above; the caller rules out concurrent non-atomic access.
            unsafe { PPtr::store(*dest, r.pptr()) };
            self.medium().flush(off, 8);
            r.armed = false;
        }
        self.medium().fence();
        self.count_allocations(items.len() as u64);
    }
}

/// A block taken by [`PersistentHeap::reserve`], not yet published: dropping it gives the
/// block back.
pub struct Reservation<'a, M: Medium> {
    heap: &'a PersistentHeap<M>,
    block: Block,
    armed: bool,
}

impl<M: Medium> std::fmt::Debug for Reservation<'_, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("block", &self.block)
            .field("published", &!self.armed)
            .finish()
    }
}

impl<M: Medium> Reservation<'_, M> {
    /// The block, as a persistent pointer.
    pub fn pptr(&self) -> PPtr<u8> {
        PPtr::from_offset(self.block.offset as u64)
    }

    /// The block's first byte in this mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        // SAFETY: the block lies inside the heap, inside the mapping.
        unsafe { self.heap.base().add(self.block.offset) }
    }

    /// Bytes in the block (at least the size asked for).
    pub fn size(&self) -> usize {
        self.block.size
    }

    /// Whether [`PersistentHeap::publish`] has stored it (or [`keep`](Self::keep) kept it).
    pub fn is_published(&self) -> bool {
        !self.armed
    }

    /// Keeps the block allocated without storing it anywhere: linking it, durably, is the
    /// caller's (a storage engine that writes the pointer into its own log or node and
    /// persists it with the fence it needs anyway). Nothing persistent changes and no fence
    /// is taken: the block is live because it is reachable, so a crash before the caller's
    /// link is durable leaves it unreachable, and recovery frees it.
    ///
    /// A kept block that the caller never links stays allocated until the next recovery.
    pub fn keep(mut self) -> PPtr<u8> {
        self.armed = false;
        self.heap.count_allocations(1);
        self.pptr()
    }
}

impl<M: Medium> Drop for Reservation<'_, M> {
    fn drop(&mut self) {
        if self.armed && self.heap.clear_live(self.heap.live_slot(&self.block)) {
            self.heap.give_back(self.block, false);
        }
    }
}
