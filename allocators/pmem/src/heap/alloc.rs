//! One block at a time: [`allocate_into`](PersistentHeap::allocate_into) and
//! [`free_from`](PersistentHeap::free_from) (the crash-atomic pair: one flush and one fence
//! each), and [`allocate_unlinked`](PersistentHeap::allocate_unlinked) /
//! [`release`](PersistentHeap::release) for callers that link and unlink durably
//! themselves (no flush, no fence). The fast path is the thread's cache; everything else
//! goes to `slabs`.

use super::*;

impl<M: Medium> PersistentHeap<M> {
    /// Allocates a block for `layout` and stores a pointer to it into `dest`, durably:
    /// after a crash `dest` holds either its old value (and the block is free) or the block
    /// (and the block is live). One flush and one fence on the fast path. Whatever `dest`
    /// held before is overwritten (a block it named becomes garbage that recovery frees).
    ///
    /// # Errors
    ///
    /// [`HeapError::ZeroSize`], [`HeapError::UnsupportedAlignment`],
    /// [`HeapError::TooLarge`], [`HeapError::OutOfSpace`]; [`HeapError::MisalignedDest`] and
    /// [`HeapError::DestOutsidePool`] unless `dest` is 8 aligned bytes inside the root or a
    /// live block. Nothing is written on error.
    ///
    /// # Safety
    ///
    /// `dest` must not be accessed concurrently by other threads except through
    /// [`PPtr::load`]/[`PPtr::store`] (in particular not by another `allocate_into` or
    /// `free_from` of the same `dest`), and the block holding it must not be freed meanwhile.
    pub unsafe fn allocate_into(
        &self,
        dest: *mut PPtr<u8>,
        layout: Layout,
    ) -> Result<PPtr<u8>, HeapError> {
        let dest_off = self.check_dest(dest)?;
        let block = self.take(layout, true)?;
        let p = PPtr::from_offset(block.offset as u64);
        // SAFETY: `dest` is 8-aligned and inside the mapping (checked); the caller rules out
        // concurrent non-atomic access.
        unsafe { PPtr::store(dest, p) };
        if bug::PERSIST_PUBLISH {
            // Always (see `bug.rs`).
            self.medium().persist(dest_off, 8);
        }
        Ok(p)
    }

    /// Frees the block `dest` points to and stores null into `dest`, durably: after a crash
    /// `dest` holds the block (still live) or null (and the block is free). One flush and
    /// one fence on the fast path.
    ///
    /// # Errors
    ///
    /// [`HeapError::NullDest`] when `dest` holds null; [`HeapError::NotABlock`] when it holds
    /// anything but the start of a live block (a double free included);
    /// [`HeapError::MisalignedDest`], [`HeapError::DestOutsidePool`] as for
    /// [`allocate_into`](Self::allocate_into). Nothing is written on error.
    ///
    /// # Safety
    ///
    /// As for [`allocate_into`](Self::allocate_into); besides, no other pointer to the block
    /// may be used after this call.
    pub unsafe fn free_from(&self, dest: *mut PPtr<u8>) -> Result<(), HeapError> {
        let dest_off = self.check_dest(dest)?;
        // SAFETY: as in `allocate_into`.
        let p = unsafe { PPtr::load(dest) };
        if p.is_null() {
            return Err(HeapError::NullDest);
        }
        let not_a_block = HeapError::NotABlock { offset: p.offset() };
        let offset = usize::try_from(p.offset()).map_err(|_| not_a_block)?;
        let block = match self.block_containing(offset) {
            Some(b) if b.offset == offset => b,
            _ => return Err(HeapError::NotABlock { offset: p.offset() }),
        };
        // Clearing the live mark first refuses a double free before anything is written.
        if !self.clear_live(self.live_slot(&block)) {
            return Err(HeapError::NotABlock { offset: p.offset() });
        }
        // SAFETY: as above.
        unsafe { PPtr::store(dest, PPtr::NULL) };
        self.medium().persist(dest_off, 8);
        self.give_back(block, true);
        Ok(())
    }

    /// Allocates a block for `layout` that the caller links durably itself: what
    /// [`reserve`](Self::reserve) then [`Reservation::keep`] do, with one lock round trip
    /// instead of two. No flush, no fence; a crash before the caller's link is durable
    /// leaves the block unreachable, and recovery frees it.
    ///
    /// # Errors
    ///
    /// As [`allocate_into`](Self::allocate_into) for the layout.
    pub fn allocate_unlinked(&self, layout: Layout) -> Result<PPtr<u8>, HeapError> {
        // The fast path: a small block on the thread's stack, taken with one visit to the
        // cache and no `Block` to build (the rest, and errors, in `take`).
        let size = layout.size();
        if is_small(size, layout.align()) {
            let c = class_of(size);
            let cached = self.with_cache(|slot| {
                // SAFETY: this thread owns its slot, and nothing else holds its stacks.
                let offset = unsafe { slot.stacks() }[c].pop()?;
                slot.count_allocations(1);
                Some(offset)
            });
            if let Some(Some(offset)) = cached {
                self.set_live(self.small_slot(c, offset as usize));
                return Ok(PPtr::from_offset(offset));
            }
        }
        let block = self.take(layout, true)?;
        Ok(PPtr::from_offset(block.offset as u64))
    }

    /// Gives back the live block at `p` without writing anything persistent: the
    /// counterpart of [`Reservation::keep`], for a caller that has already unlinked the
    /// block durably (cleared every reachable word that named it, and fenced). No flush, no
    /// fence: a block no reachable word names is free at the next recovery anyway.
    ///
    /// # Errors
    ///
    /// [`HeapError::NullDest`] for null; [`HeapError::NotABlock`] unless `p` is the start of
    /// a live block (a double release or a release after [`free_from`](Self::free_from)
    /// included). Nothing changes on error.
    ///
    /// # Safety
    ///
    /// No durable reachable word may still name the block (else, after a crash, recovery
    /// keeps it live while the heap may have handed it out again), and no pointer to it may
    /// be used after this call.
    pub unsafe fn release(&self, p: PPtr<u8>) -> Result<(), HeapError> {
        let block = self.unmark(p)?;
        self.give_back(block, true);
        Ok(())
    }
}
