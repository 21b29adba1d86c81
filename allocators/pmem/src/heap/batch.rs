//! Several blocks for the price of one visit to the calling thread's cache: a storage
//! engine that needs a copy-on-write path and its tuple, or frees a commit's retired
//! versions, pays the cache's lookup once. `take_many_cached` is the fast path; a request
//! it cannot serve whole goes block by block (`take_many_slow`).

use super::*;

impl<M: Medium> PersistentHeap<M> {
    /// Allocates a block of each of `sizes` bytes (every block is cache-line aligned), in
    /// order, into `out` (one entry each), as
    /// [`allocate_unlinked`](Self::allocate_unlinked) does for each, but with one visit to
    /// the calling thread's cache for all of them: what a storage engine that needs several
    /// blocks for one operation (a copy-on-write path and its tuple) pays once instead of
    /// once a block.
    ///
    /// # Errors
    ///
    /// As [`allocate_unlinked`](Self::allocate_unlinked) for the first size that fails
    /// ([`HeapError::TooLarge`] for a size no layout can describe); the blocks taken for
    /// the sizes before it are given back (nothing is allocated), and `out`'s entries are
    /// unspecified.
    ///
    /// # Panics
    ///
    /// If `out` and `sizes` differ in length.
    pub fn allocate_unlinked_sizes(
        &self,
        sizes: &[usize],
        out: &mut [PPtr<u8>],
    ) -> Result<(), HeapError> {
        assert_eq!(
            sizes.len(),
            out.len(),
            "allocate_unlinked_sizes: one destination per size"
        );
        self.take_many(
            |i| (sizes[i], 1),
            |i| {
                Layout::from_size_align(sizes[i], 1).map_err(|_| HeapError::TooLarge {
                    requested: sizes[i],
                    max: self.geo.nslabs * SLAB_BYTES,
                })
            },
            out,
        )
    }

    /// Takes a block for request `i` of `out.len()`, given as (size, align) by `request` and
    /// as a layout by `layout` (off the fast path), into `out[i]`: the thread's stacks when
    /// every request is a small class with a block to take, else block by block.
    #[inline]
    pub(super) fn take_many(
        &self,
        request: impl Fn(usize) -> (usize, usize),
        layout: impl Fn(usize) -> Result<Layout, HeapError>,
        out: &mut [PPtr<u8>],
    ) -> Result<(), HeapError> {
        if self.with_cache(|slot| self.take_many_cached(slot, &request, out)) == Some(true) {
            return Ok(());
        }
        self.take_many_slow(&layout, out)
    }

    /// [`take_many`](Self::take_many) off the fast path, out of line (so that the fast path
    /// stays small): a run, a class with no block cached and no slab to carve, or a thread
    /// exiting; block by block (reclaiming the caches of exited threads before out of space).
    #[cold]
    #[inline(never)]
    pub(super) fn take_many_slow(
        &self,
        layout: &dyn Fn(usize) -> Result<Layout, HeapError>,
        out: &mut [PPtr<u8>],
    ) -> Result<(), HeapError> {
        for i in 0..out.len() {
            match layout(i).and_then(|layout| self.take(layout, false)) {
                Ok(block) => out[i] = PPtr::from_offset(block.offset as u64),
                Err(e) => {
                    for p in &out[..i] {
                        // Taken just now: live, named by nothing.
                        if let Ok(block) = self.unmark(*p) {
                            self.give_back(block, false);
                        }
                    }
                    return Err(e);
                }
            }
        }
        self.count_allocations(out.len() as u64);
        Ok(())
    }

    /// Gives back every block of `ptrs`, as [`release`](Self::release) does each, with one
    /// visit to the calling thread's cache for all of them.
    ///
    /// # Errors
    ///
    /// The first refusal, as [`release`](Self::release) refuses: that entry changes nothing,
    /// and every other entry is still given back (a block listed twice is refused the
    /// second time).
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release), for every entry.
    pub unsafe fn release_many(&self, ptrs: &[PPtr<u8>]) -> Result<(), HeapError> {
        let mut first = Ok(());
        let cached = self.with_cache(|slot| {
            // SAFETY: this thread owns its slot, and nothing else holds its stacks.
            let freed = self.release_cached(unsafe { slot.stacks() }, ptrs, &mut first);
            slot.count_frees(freed);
        });
        if cached.is_none() {
            // SAFETY: the caller's contract.
            first = unsafe { self.release_uncached(ptrs) };
        }
        first
    }

    /// [`release_many`](Self::release_many) then
    /// [`allocate_unlinked`](Self::allocate_unlinked), with one visit to the calling
    /// thread's cache for both when the allocation is a small class with a block cached: for
    /// a caller that gives blocks back where it takes a new one (a storage engine's
    /// transaction that frees what an earlier one unlinked and allocates a new version). The
    /// last block given back of the class asked for is the one taken (the stacks are LIFO).
    ///
    /// # Errors
    ///
    /// The first refusal of a block given back, as [`release_many`](Self::release_many)
    /// (every other block is still given back, and nothing is allocated); then as
    /// [`allocate_unlinked`](Self::allocate_unlinked).
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release), for every entry of `ptrs`.
    pub unsafe fn release_many_then_allocate(
        &self,
        ptrs: &[PPtr<u8>],
        layout: Layout,
    ) -> Result<PPtr<u8>, HeapError> {
        let size = layout.size();
        let small = is_small(size, layout.align());
        let c = class_of(size.min(MAX_SMALL));
        let mut first = Ok(());
        let cached = self.with_cache(|slot| {
            // SAFETY: this thread owns its slot, and nothing else holds its stacks.
            let stacks = unsafe { slot.stacks() };
            let freed = self.release_cached(stacks, ptrs, &mut first);
            slot.count_frees(freed);
            if !small || first.is_err() {
                return None;
            }
            let offset = stacks[c].pop()?;
            slot.count_allocations(1);
            Some(offset)
        });
        match cached {
            Some(Some(offset)) => {
                self.set_live(self.small_slot(c, offset as usize));
                return Ok(PPtr::from_offset(offset));
            }
            Some(None) => first?,
            // SAFETY: the caller's contract (nothing was given back: no cache).
            None => unsafe { self.release_uncached(ptrs) }?,
        }
        self.allocate_unlinked(layout)
    }

    /// [`release_many_then_allocate`](Self::release_many_then_allocate) for a caller that
    /// knows every block of `ptrs` is live: when the last block of `ptrs` is a small block
    /// of the class `layout` asks for, it is the allocation, handed straight back without
    /// being given back and taken again. Its live mark (set, and set again by the
    /// allocation) and the thread's stack are then not touched, nor is the block checked
    /// against the live map: no access to a live-map line the caller has not touched (the
    /// freed block is one of many, so that line is usually out of the cache, and reading
    /// it was most of the call's cost). The other blocks are given back as
    /// [`release_many`](Self::release_many) does (checked). Otherwise, exactly
    /// [`release_many_then_allocate`](Self::release_many_then_allocate).
    ///
    /// # Errors
    ///
    /// As [`release_many_then_allocate`](Self::release_many_then_allocate); a last block
    /// that is not a small block's start (null, a run, outside the heap) is checked, and
    /// refused, there.
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release), for every entry of `ptrs`; besides, every entry is a
    /// live block (taken from this heap and not given back since): the last one is not
    /// checked, and a block already free would be handed out twice.
    pub unsafe fn release_many_then_reuse(
        &self,
        ptrs: &[PPtr<u8>],
        layout: Layout,
    ) -> Result<PPtr<u8>, HeapError> {
        let size = layout.size();
        if let Some((&last, rest)) = ptrs.split_last()
            && is_small(size, layout.align())
            && let Some((c, slot)) = self.small_at(last.offset() as usize)
            && c == class_of(size)
        {
            debug_assert!(
                self.live[slot].load(Ordering::Relaxed) != 0,
                "release_many_then_reuse of a block that is not live"
            );
            let mut first = Ok(());
            let counted = self.with_cache(|slot| {
                // SAFETY: this thread owns its slot, and nothing else holds its stacks.
                let stacks = unsafe { slot.stacks() };
                let freed = self.release_cached(stacks, rest, &mut first);
                if first.is_err() {
                    // Nothing is allocated after a refusal: the last block goes back too.
                    let last_freed = self.release_cached(stacks, &[last], &mut first);
                    slot.count_frees(freed + last_freed);
                    return;
                }
                // The reused block counts as a free and an allocation, as when it goes
                // through the stack.
                slot.count_frees(freed + 1);
                slot.count_allocations(1);
            });
            if counted.is_none() {
                // A thread whose locals are gone: the checked path, block by block.
                // SAFETY: the caller's contract.
                return unsafe { self.release_many_then_allocate(ptrs, layout) };
            }
            first?;
            return Ok(last);
        }
        // SAFETY: the caller's contract.
        unsafe { self.release_many_then_allocate(ptrs, layout) }
    }

    /// Gives back every block of `ptrs` onto `stacks`, the calling thread's (as
    /// [`release`](Self::release) does each, counting nothing); the number given back. The
    /// first refusal goes to `first` if it holds none yet.
    #[inline]
    pub(super) fn release_cached(
        &self,
        stacks: &mut [Vec<u64>; NCLASSES],
        ptrs: &[PPtr<u8>],
        first: &mut Result<(), HeapError>,
    ) -> u64 {
        if ptrs.len() > 1 {
            // The blocks' live-map bytes are in lines the caller has not touched (the
            // blocks are spread over the heap): ask for all of them first, so that their
            // misses overlap instead of being paid one after another below.
            for &p in ptrs {
                if let Some((_, slot)) = self.small_at(p.offset() as usize) {
                    self.prefetch_live(slot);
                }
            }
        }
        let mut freed = 0;
        for &p in ptrs {
            // `unmark`'s fast path, with the block's class and offset kept in registers.
            let offset = p.offset() as usize;
            if let Some(c) = self.unmark_small(offset) {
                self.push_cached(&mut stacks[c], c, offset);
                freed += 1;
                continue;
            }
            match self.unmark_slow(p) {
                Ok(block) => {
                    self.give_back_cached(stacks, block);
                    freed += 1;
                }
                Err(e) => {
                    if first.is_ok() {
                        *first = Err(e);
                    }
                }
            }
        }
        freed
    }

    /// [`release_many`](Self::release_many) block by block, for a thread with no cache (its
    /// locals are gone: it is exiting).
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release), for every entry.
    #[cold]
    pub(super) unsafe fn release_uncached(&self, ptrs: &[PPtr<u8>]) -> Result<(), HeapError> {
        let mut first = Ok(());
        for &p in ptrs {
            // SAFETY: the caller's contract, for each entry.
            let released = unsafe { self.release(p) };
            if first.is_ok() {
                first = released;
            }
        }
        first
    }

    /// Takes a small block for each request (size, align) of `out`'s entries from the
    /// thread's stacks (refilling an empty one), marks them live and counts them; `false`,
    /// with nothing taken, if a request is not a small class or a class has no block left.
    #[inline]
    pub(super) fn take_many_cached(
        &self,
        slot: &CacheSlot,
        request: impl Fn(usize) -> (usize, usize),
        out: &mut [PPtr<u8>],
    ) -> bool {
        // SAFETY: this thread owns its slot, and nothing else holds its stacks.
        let stacks = unsafe { slot.stacks() };
        for i in 0..out.len() {
            let (size, align) = request(i);
            let small = is_small(size, align);
            let c = class_of(size.min(MAX_SMALL));
            let taken = small.then(|| {
                let stack = &mut stacks[c];
                if stack.is_empty() {
                    self.refill(stack, c);
                }
                stack.pop()
            });
            let Some(Some(offset)) = taken else {
                for (j, p) in out[..i].iter().enumerate().rev() {
                    let c = class_of(request(j).0);
                    self.clear_live(self.small_slot(c, p.offset() as usize));
                    stacks[c].push(p.offset());
                }
                return false;
            };
            self.set_live(self.small_slot(c, offset as usize));
            out[i] = PPtr::from_offset(offset);
        }
        slot.count_allocations(out.len() as u64);
        true
    }
}
