//! Where blocks come from when the thread's cache has none: the global per-class lists
//! (refilled in batches of [`REFILL_BATCH`] under the global mutex), fresh slabs carved
//! (their tag persisted before any block of them is published), runs of whole slabs for
//! requests above [`MAX_SMALL`], and the stacks of threads that exited; and where they go
//! back (a stack over [`CACHE_LIMIT`] spills its older half).

use super::*;

impl<M: Medium> PersistentHeap<M> {
    /// Takes a free block for `layout` and sets its live mark; counts an allocation when
    /// `count` (in the calling thread's cache).
    pub(super) fn take(&self, layout: Layout, count: bool) -> Result<Block, HeapError> {
        let size = layout.size();
        if size == 0 {
            return Err(HeapError::ZeroSize);
        }
        if layout.align() > CACHE_LINE {
            return Err(HeapError::UnsupportedAlignment {
                align: layout.align(),
            });
        }
        let block = if size <= MAX_SMALL {
            let c = class_of(size);
            let offset = self.take_small(c, count)?;
            Block {
                offset,
                size: SIZE_CLASSES[c],
                class: Some(c),
            }
        } else {
            let max = self.geo.nslabs * SLAB_BYTES;
            if size > max {
                return Err(HeapError::TooLarge {
                    requested: size,
                    max,
                });
            }
            let n = size.div_ceil(SLAB_BYTES);
            let head = self
                .assign_run(n)
                .ok_or(HeapError::OutOfSpace { requested: size })?;
            if count {
                self.count_allocations(1);
            }
            Block {
                offset: self.geo.heap_off + head * SLAB_BYTES,
                size: n * SLAB_BYTES,
                class: None,
            }
        };
        self.set_live(self.live_slot(&block));
        Ok(block)
    }

    pub(super) fn take_small(&self, c: usize, count: bool) -> Result<usize, HeapError> {
        for attempt in 0..2 {
            let fast = self.with_cache(|slot| {
                // SAFETY: this thread owns its slot, and nothing else holds its stacks.
                let stack = &mut unsafe { slot.stacks() }[c];
                if stack.is_empty() && !self.refill(stack, c) {
                    return None;
                }
                slot.count_allocations(u64::from(count));
                stack.pop()
            });
            match fast {
                Some(Some(offset)) => return Ok(offset as usize),
                Some(None) => {}
                None => {
                    if let Some(offset) = self.take_global(c, count) {
                        return Ok(offset);
                    }
                }
            }
            if attempt == 0 {
                // Out of slabs: take what the threads that exited left in their caches.
                self.reclaim_abandoned();
            }
        }
        Err(HeapError::OutOfSpace {
            requested: SIZE_CLASSES[c],
        })
    }

    /// Takes one block of class `c` with no cache (a thread whose locals are gone).
    pub(super) fn take_global(&self, c: usize, count: bool) -> Option<usize> {
        let mut batch = Vec::new();
        if !self.refill(&mut batch, c) {
            return None;
        }
        let offset = batch.pop()? as usize;
        let mut global = lock(&self.global);
        global.free[c].append(batch);
        if count {
            self.fallback.count_allocations(1);
        }
        Some(offset)
    }

    /// Moves the blocks cached by threads that exited into the global lists.
    pub(super) fn reclaim_abandoned(&self) {
        let caches = lock(&self.caches);
        for slot in caches.iter() {
            // SAFETY: the registry mutex is held.
            if let Some(stacks) = unsafe { slot.take_abandoned() } {
                let mut global = lock(&self.global);
                for (list, blocks) in global.free.iter_mut().zip(stacks) {
                    list.append(blocks);
                }
            }
        }
    }

    /// Moves free blocks of class `c` into `stack` from the global list or a fresh slab;
    /// whether any came.
    pub(super) fn refill(&self, stack: &mut Vec<u64>, c: usize) -> bool {
        let mut global = lock(&self.global);
        let list = &mut global.free[c];
        if !list.is_empty() {
            let emptied = list.take(REFILL_BATCH, stack);
            drop(global);
            drop(emptied);
            return true;
        }
        let Some(slab) = find_free_slab(&mut global) else {
            return false;
        };
        global.slab_free[slab] = false;
        drop(global);
        self.write_tag(slab, c as u8 + 1, None);
        self.medium().fence();
        self.kinds[slab].store(c as u32 + 1, Ordering::Release);
        let start = self.geo.heap_off + slab * SLAB_BYTES;
        let size = SIZE_CLASSES[c];
        // Reversed, so that pops hand out ascending addresses.
        stack.extend(
            (0..blocks_per_slab(c))
                .rev()
                .map(|i| (start + i * size) as u64),
        );
        true
    }

    /// Assigns a run of `n` free slabs (first fit), persisting its tags; its head.
    pub(super) fn assign_run(&self, n: usize) -> Option<usize> {
        let mut global = lock(&self.global);
        let mut head = None;
        let mut count = 0;
        for (i, &free) in global.slab_free.iter().enumerate() {
            count = if free { count + 1 } else { 0 };
            if count == n {
                head = Some(i + 1 - n);
                break;
            }
        }
        let head = head?;
        global.slab_free[head..head + n].fill(false);
        drop(global);
        for slab in head + 1..head + n {
            self.write_tag(slab, TAG_RUN_CONT, None);
        }
        self.write_tag(head, TAG_RUN_HEAD, Some(n as u32));
        self.medium().fence();
        for slab in head + 1..head + n {
            self.kinds[slab].store(KIND_CONT | head as u32, Ordering::Release);
        }
        self.kinds[head].store(KIND_HEAD | n as u32, Ordering::Release);
        Some(head)
    }

    /// Writes slab `slab`'s tag (and a run head's length, before the tag) and flushes its
    /// tag line; the caller fences.
    pub(super) fn write_tag(&self, slab: usize, tag: u8, run_len: Option<u32>) {
        let off = self.geo.meta_off + slab * META_PER_SLAB;
        // SAFETY: the tag line lies in the metadata area (`nslabs` is bounded by it), which
        // is inside the mapping; only the thread that took the slab from the pool (under the
        // global mutex) writes it.
        unsafe {
            let line = self.base().add(off);
            if let Some(len) = run_len {
                AtomicU32::from_ptr(line.add(4).cast()).store(len.to_le(), Ordering::Relaxed);
            }
            AtomicU8::from_ptr(line).store(tag, Ordering::Release);
        }
        self.medium().flush(off, 8);
    }

    /// Gives a block whose live mark is already clear back to the thread's cache or the slab
    /// pool; counts a free when `count`.
    pub(super) fn give_back(&self, block: Block, count: bool) {
        let cached = self.with_cache(|slot| {
            // SAFETY: this thread owns its slot, and nothing else holds its stacks.
            self.give_back_cached(unsafe { slot.stacks() }, block);
            slot.count_frees(u64::from(count));
        });
        if cached.is_some() {
            return;
        }
        // The thread's locals are gone (it is exiting): straight to the global lists.
        match block.class {
            Some(c) => lock(&self.global).free[c].push(block.offset as u64),
            None => self.free_run(block),
        }
        if count {
            let _global = lock(&self.global);
            self.fallback.count_frees(1);
        }
    }

    /// [`give_back`](Self::give_back) with the calling thread's stacks at hand, counting
    /// nothing: a small block goes onto its class's stack (the older half of a stack over
    /// [`CACHE_LIMIT`] to the global list), a run to the slab pool.
    #[inline]
    pub(super) fn give_back_cached(&self, stacks: &mut [Vec<u64>; NCLASSES], block: Block) {
        match block.class {
            Some(c) => self.push_cached(&mut stacks[c], c, block.offset),
            None => self.free_run(block),
        }
    }

    /// Pushes the free class-`c` block at `offset` onto `stack`, the thread's stack of class
    /// `c`, handing the older half of a stack over [`CACHE_LIMIT`] to the global list.
    #[inline]
    pub(super) fn push_cached(&self, stack: &mut Vec<u64>, c: usize, offset: usize) {
        stack.push(offset as u64);
        if stack.len() > CACHE_LIMIT {
            self.spill(stack, c);
        }
    }

    /// Moves the older half (the bottom) of a thread's stack of class `c` to the global list.
    #[cold]
    pub(super) fn spill(&self, stack: &mut Vec<u64>, c: usize) {
        // The half becomes a chunk of the global list (see `free_list`): filled here, before
        // the mutex, which is then held for a constant-time append.
        let half = stack.len() / 2;
        let older: Vec<u64> = stack.drain(..half).collect();
        lock(&self.global).free[c].append(older);
    }

    /// Returns the slabs of a run whose live mark is already clear to the slab pool.
    pub(super) fn free_run(&self, block: Block) {
        let head = (block.offset - self.geo.heap_off) / SLAB_BYTES;
        let n = block.size / SLAB_BYTES;
        // Tags stay as they are (stale tags are read safely at recovery).
        for slab in head..head + n {
            self.kinds[slab].store(0, Ordering::Release);
        }
        let mut global = lock(&self.global);
        global.slab_free[head..head + n].fill(true);
        global.hint = global.hint.min(head);
    }
}

pub(super) fn find_free_slab(global: &mut Global) -> Option<usize> {
    let n = global.slab_free.len();
    let start = global.hint.min(n);
    let found = (start..n).chain(0..start).find(|&i| global.slab_free[i])?;
    global.hint = found + 1;
    Some(found)
}
