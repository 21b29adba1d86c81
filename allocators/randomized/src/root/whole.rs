//! The whole heap at once: every lock (around `fork`), the counters and the heap walk.

use super::*;

impl Root {
    /// Takes every lock (arenas by index, then the table): before `fork`.
    ///
    /// Arenas no thread has used stay as they are (nobody can have queued frees there: they
    /// have no blocks), so a `fork` does not touch their pages.
    pub(crate) fn lock_all(&self) {
        for (index, slot) in self.slots.iter().enumerate() {
            slot.lock.lock();
            // SAFETY: the lock was just taken.
            if unsafe { (*slot.arena.get()).is_ready() } {
                core::mem::forget(ArenaGuard::drained(self, index));
            }
        }
        self.table_lock.lock();
    }

    /// Releases what [`lock_all`](Self::lock_all) took; in a forked child, also reseeds
    /// every arena's generator.
    ///
    /// # Safety
    ///
    /// This thread holds every lock (it called `lock_all`).
    pub(crate) unsafe fn unlock_all(&self, reseed: bool) {
        if reseed {
            // SAFETY: every lock is held, so no arena is being set up from the seed.
            unsafe { *self.seed.get() = os::entropy() };
        }
        self.table_lock.unlock(0);
        for slot in &self.slots {
            // SAFETY: the lock is held.
            let arena = unsafe { &mut *slot.arena.get() };
            if reseed && arena.is_ready() {
                arena.reseed();
            }
            slot.lock.unlock(0);
        }
    }

    /// Locks arena `index` if a thread has used it; `None` (and unlocked) if not.
    fn lock_if_used(&self, index: usize) -> Option<ArenaGuard<'_>> {
        let slot = &self.slots[index];
        slot.lock.lock();
        // SAFETY: the lock was just taken.
        if unsafe { (*slot.arena.get()).is_ready() } {
            Some(ArenaGuard::drained(self, index))
        } else {
            slot.lock.unlock(0);
            None
        }
    }

    /// Pushes every arena's outbox chains to their arenas, so that the next lock of each
    /// arena completes every free queued so far (the counters and the heap walk count
    /// queued blocks as live).
    fn flush_outboxes(&self) {
        for i in 0..ARENAS {
            let Some(mut arena) = self.lock_if_used(i) else {
                continue;
            };
            arena.outbox().take_all(|dest, first, last| {
                // SAFETY: `last` is a claimed block of arena `dest`, linked through its first
                // payload word, which is ours until the push publishes it.
                self.remote[dest]
                    .blocks
                    .push_chain(first, |below| unsafe { wr(last, below) });
            });
        }
    }

    /// The counters of all arenas and huge blocks, every queued free completed first.
    pub(crate) fn counters(&self) -> Counters {
        self.flush_outboxes();
        // The first chunk is mapped whether or not arena 0 has been set up in it.
        let first = CHUNK as u64;
        let mut total = Counters {
            mapped_bytes: first,
            peak_mapped_bytes: first,
            ..Counters::default()
        };
        for i in 0..ARENAS {
            if let Some(arena) = self.lock_if_used(i) {
                total.add(&arena.counters());
                total.add(&arena.slabs().counters());
            }
        }
        let huge = self.huge_live_bytes.load(Ordering::Relaxed);
        total.live_bytes += huge;
        total.mapped_bytes += huge;
        total.peak_mapped_bytes += huge;
        total.allocations += self.huge_allocations.load(Ordering::Relaxed);
        total.deallocations += self.huge_deallocations.load(Ordering::Relaxed);
        let (zero_allocations, zero_deallocations, _) = self.zero.counts();
        total.allocations += zero_allocations;
        total.deallocations += zero_deallocations;
        total
    }

    /// Walks the whole heap under all its locks; see [`crate::Randomized::check`].
    pub(crate) fn check(&self) -> Result<HeapShape, Corruption> {
        self.flush_outboxes();
        self.lock_all();
        // SAFETY: every lock is held.
        let result = unsafe { self.check_locked() };
        // SAFETY: taken just above.
        unsafe { self.unlock_all(false) };
        result
    }

    /// # Safety
    ///
    /// Every lock is held.
    unsafe fn check_locked(&self) -> Result<HeapShape, Corruption> {
        let own = self as *const Root as usize;
        let mut shapes = [HeapShape::default(); ARENAS];
        let mut total = HeapShape::default();
        let mut huge_bytes = 0u64;
        let mut slab_walks = [crate::heap::SlabWalk::default(); ARENAS];
        for entry in &self.table {
            let e = entry.load(Ordering::Relaxed);
            if e == 0 || e == TOMBSTONE {
                continue;
            }
            let base = e & !(CHUNK - 1);
            if self.table_find(base).is_none() {
                return Err(Corruption::at("chunk unreachable in the chunk table", base));
            }
            if e & (CHUNK - 1) == KIND_HUGE {
                // SAFETY: a registered huge mapping; its descriptor says where its header is.
                let offset = unsafe { rd(base + 8) };
                // SAFETY: as above.
                match unsafe { self.validate_huge(base, base + offset) } {
                    Ok(live) => huge_bytes += live.size as u64,
                    Err(_) => {
                        return Err(Corruption::at(
                            "huge block header disagrees with its descriptor",
                            base,
                        ));
                    }
                }
                total.huge_blocks += 1;
                continue;
            }
            let index = self.arena_of(base);
            if e & (CHUNK - 1) == KIND_SLABS {
                let checks = self.checks();
                shapes[index].chunks += 1;
                let check = crate::heap::SlabCheck {
                    key: self.key,
                    zero_fill: checks.contains(Checks::ZERO_FILL),
                    canaries: checks.contains(Checks::CANARIES),
                };
                // SAFETY: a registered slab chunk of arena `index`; every lock is held.
                let walk = unsafe { check.chunk(base, &mut shapes[index]) }?;
                slab_walks[index].live_bytes += walk.live_bytes;
                slab_walks[index].queued_bytes += walk.queued_bytes;
                continue;
            }
            let first = if base == own {
                base + ROOT_SPACE
            } else {
                base + CHUNK_HEADER
            };
            // SAFETY: all locks are held.
            let arena = unsafe { &*self.slots[index].arena.get() };
            shapes[index].chunks += 1;
            if !arena.is_ready() {
                // Only the first chunk is mapped before its arena is set up: it holds no
                // blocks until a thread uses arena 0.
                if base != own {
                    return Err(Corruption::at("chunk of an arena never set up", base));
                }
                continue;
            }
            // SAFETY: the chunk is this arena's; its lock is held.
            unsafe { arena.check_chunk(first, base + CHUNK - HEADER, &mut shapes[index]) }?;
        }
        for (index, shape) in shapes.iter().enumerate() {
            // SAFETY: all locks are held.
            let arena = unsafe { &*self.slots[index].arena.get() };
            if !arena.is_ready() {
                total.chunks += shape.chunks;
                continue;
            }
            // SAFETY: all locks are held.
            let slabs = unsafe { &*self.slabs[index].get() };
            let walk = slab_walks[index];
            // The counters count a queued slot as live until its arena drains it.
            let counted = walk.live_bytes + walk.queued_bytes - slabs.held_back_bytes();
            if slabs.live_bytes() != counted {
                return Err(Corruption::with(
                    "slab live bytes disagree with the slab chunks",
                    index,
                    counted as usize,
                    slabs.live_bytes() as usize,
                ));
            }
            // SAFETY: as above.
            unsafe { arena.check_lists(shape.free_bytes, shape.live_bytes - walk.live_bytes) }?;
            let wild = arena.wilderness();
            if wild != 0 && shape.wilderness_bytes == 0 {
                return Err(Corruption::at(
                    "wilderness outside every chunk of its arena",
                    wild,
                ));
            }
            total.add_arena(shape);
        }
        if huge_bytes != self.huge_live_bytes.load(Ordering::Relaxed) {
            return Err(Corruption::with(
                "huge live bytes disagree with the huge mappings",
                0,
                huge_bytes as usize,
                self.huge_live_bytes.load(Ordering::Relaxed) as usize,
            ));
        }
        total.live_bytes += huge_bytes;
        total.zero_size_blocks = self.zero.counts().2;
        Ok(total)
    }
}
