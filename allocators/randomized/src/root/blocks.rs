//! Blocks by address: free, usable size and resizing in place, each starting from a
//! pointer the program gave.

use super::*;

impl Root {
    /// What the table says about `payload`: its mapping's base and kind.
    fn locate(&self, payload: usize) -> Result<(usize, usize), Invalid> {
        if !payload.is_multiple_of(16) {
            return Err(Invalid::Misaligned);
        }
        let base = payload & !(CHUNK - 1);
        let kind = self.table_find(base).ok_or(Invalid::Foreign)?;
        let own = self as *const Root as usize;
        let first = if base == own {
            ROOT_SPACE
        } else {
            CHUNK_HEADER
        };
        if kind == KIND_BLOCKS && payload - base < first + HEADER {
            return Err(Invalid::BadHeader);
        }
        if kind == KIND_HUGE && payload - base < 2 * HEADER {
            return Err(Invalid::BadHeader);
        }
        Ok((base, kind))
    }

    /// The arena a chunk of blocks belongs to.
    pub(super) fn arena_of(&self, base: usize) -> usize {
        if base == self as *const Root as usize {
            0
        } else {
            // SAFETY: `base` is a chunk of blocks in the table; its first word is its
            // arena's index, written before the chunk was registered.
            unsafe { rd(base) }.min(ARENAS - 1)
        }
    }

    /// Frees `payload`: checks it and frees it, or says why not (nothing changed then).
    // Inlined into its one caller (`Randomized::free_block`), for the same reason as
    // `Arena::alloc`.
    #[inline(always)]
    pub(crate) fn free(&self, payload: usize, expect: Expect) -> Result<(), Invalid> {
        let (base, kind) = match self.locate(payload) {
            Ok(found) => found,
            Err(Invalid::Foreign) if self.zero.contains(payload) => {
                // A zero-size block has no bytes, and records no kind. (A wrong size told
                // for a freed one is still reported as the double free it is.)
                if expect.size.is_some_and(|size| size != 0) {
                    self.zero.is_live(payload)?;
                    return Err(Invalid::WrongSize);
                }
                return self.zero.free(payload);
            }
            Err(why) => return Err(why),
        };
        if kind == KIND_SLABS {
            return self.free_slot(base, payload, expect);
        }
        if kind == KIND_HUGE {
            self.table_lock.lock();
            // SAFETY: under the table lock the mapping stays registered; the header of a
            // mapping that validates is its block's.
            let checked = unsafe { self.validate_huge(base, payload) }.and_then(|live| {
                // SAFETY: a huge block whose header validated.
                unsafe { expect.check(live.header, live.usable(), os::page_size()) }.map(|()| live)
            });
            let live = match checked {
                Ok(live) => live,
                Err(why) => {
                    self.table_lock.unlock(0);
                    return Err(why);
                }
            };
            self.table_remove(base);
            self.table_lock.unlock(0);
            self.huge_live_bytes
                .fetch_sub(live.size as u64, Ordering::Relaxed);
            self.huge_deallocations.fetch_add(1, Ordering::Relaxed);
            // SAFETY: removed from the table; the block was live and its owner frees it.
            unsafe {
                os::unmap(
                    ptr::NonNull::new_unchecked(base as *mut u8),
                    live.size + self.guard(),
                )
            };
            return Ok(());
        }
        let index = self.arena_of(base);
        let slot = &self.slots[index];
        let own = self.own_arena();
        if own != index && self.slots[own].lock.try_lock().is_some() {
            // Another arena's block, and this thread holds its own arena: queue the free in
            // its outbox, to be pushed to the block's arena with a chain of others.
            let mut arena = ArenaGuard::drained(self, own);
            // SAFETY: `payload` lies in a chunk of this heap (checked by `locate`).
            let size = unsafe { claim_remote(self.key, payload) }?;
            // SAFETY: claimed just above, not published yet: the block is this thread's.
            unsafe { self.queue_remote(payload, size, expect) }?;
            // SAFETY: the claimed block's first payload word is ours to link through.
            let link = |node: usize, next: usize| unsafe { wr(node, next) };
            if let Some((first, last)) = arena.outbox().add(index, payload, size, link) {
                self.remote[index]
                    .blocks
                    .push_chain(first, |below| link(last, below));
            }
            return Ok(());
        }
        if slot.lock.try_lock().is_none() {
            // Busy: queue the free for the arena's next holder rather than wait.
            // SAFETY: `payload` lies in a chunk of this heap (checked by `locate`).
            let size = unsafe { claim_remote(self.key, payload) }?;
            // SAFETY: claimed just above, not published yet: the block is this thread's.
            unsafe { self.queue_remote(payload, size, expect) }?;
            // SAFETY: the claimed block's first payload word is ours to link through.
            self.remote[index]
                .blocks
                .push(payload, |next| unsafe { wr(payload, next) });
            return Ok(());
        }
        let mut arena = ArenaGuard::drained(self, index);
        // SAFETY: the chunk is the arena's and its lock is held.
        let live = unsafe { validate_in_chunk(self.key, payload) }?;
        // SAFETY: validated under this lock hold.
        unsafe {
            check_canary(self.key, live.header, live.size)?;
            expect.check(live.header, live.usable(), self.size_slack())?;
            arena.free(live);
        }
        Ok(())
    }

    /// Frees the slab slot at `payload` in the chunk at `base`: under its arena's lock if
    /// that is the arena this thread prefers and the lock is free, else queued on the
    /// arena's stack of slab frees without waiting, for its next holder. A thread that took
    /// another's lock would send that thread's next allocation to another arena, and with
    /// it a window of every size class it uses; one that waited for its own arena's lock,
    /// held by a second thread on the same arena (once every arena is claimed), would spin
    /// there (larson's two threads on one arena, before arenas were claimed: 250-330 ms a
    /// run with the wait, 210-235 ms without, 120 ms with an arena each).
    #[inline(always)]
    fn free_slot(&self, base: usize, payload: usize, expect: Expect) -> Result<(), Invalid> {
        let at = crate::heap::slab_locate(payload)?;
        let index = self.arena_of(base);
        if index == self.own_arena() && self.slots[index].lock.try_lock().is_some() {
            let mut arena = ArenaGuard::drained(self, index);
            let (arena, slabs) = arena.parts();
            // SAFETY: located in a chunk of this arena, whose lock is held.
            return unsafe { arena.slab_free(slabs, at, expect) };
        }
        let node = crate::heap::slab_claim(self.key, self.checks(), at, expect)?;
        // SAFETY: claimed: its first word is ours to link through until the push.
        self.remote[index]
            .slots
            .push(node, |next| unsafe { wr(node, next) });
        Ok(())
    }

    /// How far below a chunk block's usable size a sized delete may say: exact with
    /// canaries (the usable size is what was asked), else the rounding and a slack the
    /// block absorbed (under 48 bytes).
    #[inline(always)]
    fn size_slack(&self) -> usize {
        if self.checks().contains(Checks::CANARIES) {
            0
        } else {
            47
        }
    }

    /// What the thread that queues a remote free of the block at `payload` (`size` bytes)
    /// does first: checks its canary, and with zero-fill zeroes it (see `scrub_queued`).
    ///
    /// # Safety
    ///
    /// The caller claimed the block ([`claim_remote`]) and has not published it yet.
    #[inline(always)]
    unsafe fn queue_remote(
        &self,
        payload: usize,
        size: usize,
        expect: Expect,
    ) -> Result<(), Invalid> {
        // SAFETY: forwarded: the block is the caller's.
        unsafe {
            let h = payload - HEADER;
            check_canary(self.key, h, size)?;
            expect.check(h, size - HEADER - canary_len(h), self.size_slack())?;
            if self.checks().contains(Checks::ZERO_FILL) {
                scrub_queued(payload, size);
            }
        }
        Ok(())
    }

    /// Checks `payload` as `free` would, without freeing; its usable size if live.
    #[inline]
    pub(crate) fn usable_size(&self, payload: usize) -> Result<usize, Invalid> {
        let located = self.locate(payload);
        if matches!(located, Ok((_, KIND_SLABS))) {
            // Read without a lock: the record of a live slot changes only through its
            // owner (a free, or a resize).
            return crate::heap::slab_locate(payload).and_then(|at| {
                crate::heap::slab_usable(at, self.checks().contains(Checks::CANARIES))
            });
        }
        if !matches!(located, Ok((_, KIND_BLOCKS))) {
            return self.usable_size_elsewhere(payload, located);
        }
        // Without the arena's lock: a program asks this of its own live blocks, often
        // (redis asks it after every allocation and before every free, for its memory
        // accounting: two lock round trips more per block, whose removal raised its GET
        // rate by about 6%).
        // The header is read as `claim_remote` reads it: a live block's first word
        // changes only through its owner, and its second word is only ever rewritten
        // whole by the arena's holder, tag and canary length kept, so the check sees one
        // header or the other, never a torn one. A chunk stays mapped while the heap
        // lives, so a stale pointer reads memory of the heap and fails the check.
        // SAFETY: `locate` found the chunk; see above for the lock.
        unsafe { validate_in_chunk(self.key, payload) }.map(|l| l.usable())
    }

    /// [`usable_size`](Self::usable_size) of a pointer outside the chunks of slabs and
    /// blocks, as `locate` placed it: a huge block (the one other kind of mapping), a
    /// zero-size block, or none of this heap's. Out of line, so that the common cases save
    /// no registers for it.
    #[cold]
    #[inline(never)]
    fn usable_size_elsewhere(
        &self,
        payload: usize,
        located: Result<(usize, usize), Invalid>,
    ) -> Result<usize, Invalid> {
        match located {
            Ok((base, _)) => {
                debug_assert_eq!(located.map(|(_, kind)| kind), Ok(KIND_HUGE));
                self.table_lock.lock();
                // SAFETY: under the table lock the mapping stays registered.
                let live = unsafe { self.validate_huge(base, payload) };
                self.table_lock.unlock(0);
                live.map(|l| l.usable())
            }
            Err(Invalid::Foreign) if self.zero.contains(payload) => {
                self.zero.is_live(payload).map(|()| 0)
            }
            Err(why) => Err(why),
        }
    }

    /// Resizes `payload` in place to `size` bytes if its arena can; `Ok(false)` if not
    /// (huge blocks never are).
    pub(crate) fn resize_in_place(&self, payload: usize, size: usize) -> Result<bool, Invalid> {
        let (base, kind) = match self.locate(payload) {
            Ok(found) => found,
            Err(Invalid::Foreign) if self.zero.contains(payload) => {
                // A zero-size block never grows in place: it has no bytes.
                self.zero.is_live(payload)?;
                if size == 0 {
                    self.zero.count_resize();
                }
                return Ok(size == 0);
            }
            Err(why) => return Err(why),
        };
        if kind == KIND_HUGE {
            return Ok(false);
        }
        if kind == KIND_SLABS {
            let mut arena = self.lock_arena(self.arena_of(base));
            let at = crate::heap::slab_locate(payload)?;
            let (arena, slabs) = arena.parts();
            // SAFETY: located in a chunk of this arena, whose lock is held.
            return unsafe { arena.slab_resize(slabs, at, size) };
        }
        let mut arena = self.lock_arena(self.arena_of(base));
        // SAFETY: the chunk's arena lock is held.
        let live = unsafe { validate_in_chunk(self.key, payload) }?;
        // SAFETY: validated under this lock hold; a realloc checks the canary as a free.
        unsafe {
            check_canary(self.key, live.header, live.size)?;
            Ok(arena.resize_in_place(live, size))
        }
    }
}
