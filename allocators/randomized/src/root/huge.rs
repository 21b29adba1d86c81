//! Blocks with a mapping of their own, and zero-size requests.

use super::*;

impl Root {
    /// A block with a mapping of its own: `size` bytes aligned to `align`. The mapping
    /// starts with a descriptor (its accessible length, the payload's offset), then the
    /// header. With guard pages, an inaccessible page follows, and the payload is placed
    /// as close to it as the alignment allows (within 15 bytes for `malloc`'s), so that an
    /// overflow past the block faults at once.
    pub(crate) fn allocate_huge(&self, size: usize, align: usize, kind: usize) -> Option<usize> {
        // A zero size (with an alignment that makes the block huge) gets a byte: its
        // payload must lie before the guard page.
        let size = size.max(1);
        let least = align.max(2 * HEADER);
        let len = least
            .checked_add(size)?
            .checked_next_multiple_of(os::page_size())?;
        let guard = self.guard();
        // `least` is a multiple of `align` (a power of two, at least 16), and the payload
        // may move up by less than a page: it stays in the mapping's first chunk-sized
        // unit, where `locate` finds it (`align` is at most half a chunk).
        let offset = if guard > 0 {
            (len - size) & !(align.max(GRANULE) - 1)
        } else {
            least
        };
        debug_assert!(offset >= least && offset + size <= len && offset < CHUNK);
        let base = os::map_aligned(len.checked_add(guard)?, CHUNK)?.as_ptr() as usize;
        // SAFETY: the last page of the mapping just made, which nothing refers to yet.
        if guard > 0 && !unsafe { os::protect_none(base + len, guard) } {
            // SAFETY: the mapping was just made and is referred to by nothing.
            unsafe { os::unmap(ptr::NonNull::new_unchecked(base as *mut u8), len + guard) };
            return None;
        }
        self.table_lock.lock();
        // SAFETY: the mapping is fresh and `offset >= 32`: descriptor and header are apart.
        unsafe {
            wr(base, len);
            wr(base + 8, offset);
            put(self.key, base + offset - HEADER, len | BUSY | HUGE, offset);
            set_kind(base + offset - HEADER, kind);
        }
        let ok = self.table_insert(base | KIND_HUGE);
        self.table_lock.unlock(0);
        if !ok {
            // SAFETY: the mapping was just made and is referred to by nothing.
            unsafe { os::unmap(ptr::NonNull::new_unchecked(base as *mut u8), len + guard) };
            return None;
        }
        self.huge_live_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        self.huge_allocations.fetch_add(1, Ordering::Relaxed);
        Some(base + offset)
    }

    /// Checks a pointer into a huge mapping; under the table lock.
    ///
    /// # Safety
    ///
    /// `base` is a huge mapping in the table, which cannot be removed meanwhile.
    pub(super) unsafe fn validate_huge(
        &self,
        base: usize,
        payload: usize,
    ) -> Result<Live, Invalid> {
        // SAFETY: the descriptor is the mapping's first two words.
        let (len, offset) = unsafe { (rd(base), rd(base + 8)) };
        if payload - base != offset || offset >= len {
            return Err(Invalid::BadHeader);
        }
        // SAFETY: the header lies inside the mapping.
        let (w0, prev) = unsafe { get(self.key, payload - HEADER) }.ok_or(Invalid::BadHeader)?;
        if w0 != len | BUSY | HUGE || prev != offset {
            return Err(Invalid::BadHeader);
        }
        Ok(Live {
            header: payload - HEADER,
            size: len,
            prev: offset,
            huge: true,
            canary: 0,
        })
    }

    /// A unique pointer for a zero-size request (see `zero.rs`), or `None` to serve it as
    /// an ordinary block.
    pub(crate) fn allocate_zero_size(&self) -> Option<usize> {
        self.zero.allocate(self.key)
    }
}
