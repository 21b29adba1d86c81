//! The live map and block lookup: one byte per block slot (`LIVE_PER_SLAB` per slab, the
//! bytes of a slab's blocks adjacent), written with plain stores by the thread that takes or
//! frees the block; what a free checks (a double free is refused) and what recovery's mark
//! pass fills. Also the checks on a caller's destination word and the thread-cache access.

use super::*;

impl<M: Medium> PersistentHeap<M> {
    pub(super) fn base(&self) -> *mut u8 {
        self.pool.base()
    }

    /// Runs `f` with the calling thread's cache of this heap (`None` when the thread's
    /// locals are gone: it is exiting).
    #[inline]
    pub(super) fn with_cache<R>(&self, f: impl FnOnce(&CacheSlot) -> R) -> Option<R> {
        let register = || {
            let slot = Arc::new(CacheSlot::new());
            lock(&self.caches).push(Arc::clone(&slot));
            slot
        };
        with_slot(self.id, register, f)
    }

    pub(super) fn count_allocations(&self, n: u64) {
        if self.with_cache(|slot| slot.count_allocations(n)).is_none() {
            let _global = lock(&self.global);
            self.fallback.count_allocations(n);
        }
    }

    /// Checks that `p` is the start of a live block and clears its live mark: the first half
    /// of a release, which changes nothing on error. The fast path is a small block's start
    /// ([`small_at`](Self::small_at)); null, runs and errors take
    /// [`unmark_slow`](Self::unmark_slow).
    #[inline]
    pub(super) fn unmark(&self, p: PPtr<u8>) -> Result<Block, HeapError> {
        let offset = p.offset() as usize;
        match self.unmark_small(offset) {
            Some(c) => Ok(Block {
                offset,
                size: SIZE_CLASSES[c],
                class: Some(c),
            }),
            None => self.unmark_slow(p),
        }
    }

    /// [`unmark`](Self::unmark)'s fast path: if a live small block starts at pool offset
    /// `offset`, clears its live mark and returns its class; else (not a small block's
    /// start, or not live) `None`, changing nothing.
    #[inline]
    pub(super) fn unmark_small(&self, offset: usize) -> Option<usize> {
        let (c, slot) = self.small_at(offset)?;
        self.clear_live(slot).then_some(c)
    }

    /// [`unmark`](Self::unmark) for anything but a live small block's start.
    #[cold]
    pub(super) fn unmark_slow(&self, p: PPtr<u8>) -> Result<Block, HeapError> {
        if p.is_null() {
            return Err(HeapError::NullDest);
        }
        let not_a_block = || HeapError::NotABlock { offset: p.offset() };
        let offset = usize::try_from(p.offset()).map_err(|_| not_a_block())?;
        let block = match self.block_containing(offset) {
            Some(b) if b.offset == offset => b,
            _ => return Err(not_a_block()),
        };
        if !self.clear_live(self.live_slot(&block)) {
            return Err(not_a_block());
        }
        Ok(block)
    }

    /// The class and live-map slot of the small block that starts exactly at pool offset
    /// `offset`, if one does (live or not): a slab-kind load and a multiplication.
    #[inline]
    pub(super) fn small_at(&self, offset: usize) -> Option<(usize, usize)> {
        // Below the heap, `rel` wraps to a huge value: no slab.
        let rel = offset.wrapping_sub(self.geo.heap_off);
        let slab = rel / SLAB_BYTES;
        let kind = self.kinds.get(slab)?.load(Ordering::Acquire);
        // Free (0) wraps around, run kinds have high bits: neither is a class.
        let c = (kind as usize).wrapping_sub(1);
        if c >= NCLASSES {
            return None;
        }
        let in_slab = rel % SLAB_BYTES;
        let index = block_index(c, in_slab);
        (index * SIZE_CLASSES[c] == in_slab && index < blocks_per_slab(c))
            .then_some((c, slab * LIVE_PER_SLAB + index))
    }

    /// The live-map slot of the class-`c` block that starts at pool offset `offset`.
    #[inline]
    pub(super) fn small_slot(&self, c: usize, offset: usize) -> usize {
        let rel = offset - self.geo.heap_off;
        (rel / SLAB_BYTES) * LIVE_PER_SLAB + block_index(c, rel % SLAB_BYTES)
    }

    /// The live-map slot of `block`: its index in its slab, or the first slot of a run's
    /// head slab.
    pub(super) fn live_slot(&self, block: &Block) -> usize {
        match block.class {
            Some(c) => self.small_slot(c, block.offset),
            None => (block.offset - self.geo.heap_off) / SLAB_BYTES * LIVE_PER_SLAB,
        }
    }

    pub(super) fn is_live(&self, block: &Block) -> bool {
        self.live[self.live_slot(block)].load(Ordering::Acquire) != 0
    }

    /// Starts loading live-map slot `slot`'s line into the cache (a hint: no effect on
    /// what the map holds).
    #[inline]
    pub(super) fn prefetch_live(&self, slot: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            let byte: *const AtomicU8 = &self.live[slot];
            // SAFETY: a prefetch never faults and changes no memory; `byte` is in the map.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    byte.cast::<i8>(),
                )
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    /// Marks live-map slot `slot` live: a plain store by the thread that took its block.
    #[inline]
    pub(super) fn set_live(&self, slot: usize) {
        self.live[slot].store(1, Ordering::Release);
    }

    /// Clears live-map slot `slot`; whether it was set. A load and a store, not a locked
    /// swap: only the thread freeing the block writes its byte.
    #[inline]
    pub(super) fn clear_live(&self, slot: usize) -> bool {
        let byte = &self.live[slot];
        let was = byte.load(Ordering::Acquire) != 0;
        if was {
            byte.store(0, Ordering::Release);
        }
        was
    }

    /// The block of an assigned slab or run that contains pool offset `offset`.
    pub(super) fn block_containing(&self, offset: usize) -> Option<Block> {
        let rel = offset.checked_sub(self.geo.heap_off)?;
        let slab = rel / SLAB_BYTES;
        if slab >= self.geo.nslabs {
            return None;
        }
        let slab_start = self.geo.heap_off + slab * SLAB_BYTES;
        match decode(self.kinds[slab].load(Ordering::Acquire)) {
            Kind::Free => None,
            Kind::Small(c) => {
                let size = SIZE_CLASSES[c];
                let index = block_index(c, rel % SLAB_BYTES);
                (index < blocks_per_slab(c)).then_some(Block {
                    offset: slab_start + index * size,
                    size,
                    class: Some(c),
                })
            }
            Kind::Head(n) => Some(Block {
                offset: slab_start,
                size: n * SLAB_BYTES,
                class: None,
            }),
            Kind::Cont(head) => match decode(self.kinds[head].load(Ordering::Acquire)) {
                Kind::Head(n) => Some(Block {
                    offset: self.geo.heap_off + head * SLAB_BYTES,
                    size: n * SLAB_BYTES,
                    class: None,
                }),
                _ => None,
            },
        }
    }

    /// The pool offset of `dest` if it is 8 aligned bytes in the root or a live block.
    pub(super) fn check_dest(&self, dest: *mut PPtr<u8>) -> Result<usize, HeapError> {
        let address = dest as usize;
        if !address.is_multiple_of(8) {
            return Err(HeapError::MisalignedDest { address });
        }
        let outside = HeapError::DestOutsidePool { address };
        let Some(off) = address.checked_sub(self.base() as usize) else {
            return Err(outside);
        };
        let g = &self.geo;
        if off >= g.root_off && off + 8 <= g.root_off + g.root_len {
            return Ok(off);
        }
        match self.block_containing(off) {
            Some(b) if off + 8 <= b.offset + b.size && self.is_live(&b) => Ok(off),
            _ => Err(outside),
        }
    }
}
