//! Blocks too big for a span run: each in a mapping of its own, with a bounded cache of
//! freed mappings. The one path of wfspan that makes system calls.

use core::ptr::NonNull;

use alloclab_core::AllocErrorKind;
use alloclab_core::sync::atomic::Ordering;

use super::WfSpan;
use crate::os;
use crate::span::{HEADER_BYTES, Kind, MAX_COLOUR_BYTES, SpanHeader, colour_bytes, header_at};

/// How many freed huge mappings (blocks too big for a span run, 2 MiB and up with the
/// default spans) wfspan keeps for reuse instead of unmapping them (the smallest that fits
/// serves the next huge request). A program that
/// allocates and frees blocks of a few MiB in turn otherwise pays an `mmap`, a `munmap`
/// and a page fault per page on every block; glibc avoids the same by raising its mmap
/// threshold after such a free, so that later blocks of that size come from its heap.
pub const HUGE_CACHE_SLOTS: usize = 8;

/// The most bytes the huge-mapping cache holds at once. Its pages stay resident (they were
/// touched), so this bounds the memory the cache can keep from the OS.
pub const HUGE_CACHE_BYTES: usize = 64 << 20;

/// The bytes to map for a huge block of `size` aligned to `align`: room for the header at
/// any colour (the actual offset follows the mapping's colour), whole pages. `None` when
/// that overflows or exceeds half the address space.
fn huge_mapping_bytes(size: usize, align: usize, span_bytes: usize) -> Option<usize> {
    let offset_bound = if align >= span_bytes {
        align
    } else {
        (MAX_COLOUR_BYTES + HEADER_BYTES).next_multiple_of(align)
    };
    offset_bound
        .checked_add(size)
        .and_then(|t| t.checked_next_multiple_of(os::page_bytes()))
        .filter(|&t| t <= isize::MAX as usize / 2)
}

impl WfSpan {
    /// A block in its own mapping: the one path that makes system calls. A mapping from the
    /// huge cache is reused when one fits (at least the bytes needed, at most twice); `zero`
    /// asks for zeroed memory, which a fresh mapping already is.
    #[cold]
    pub(super) fn allocate_huge(
        &self,
        size: usize,
        align: usize,
        zero: bool,
    ) -> Result<NonNull<u8>, AllocErrorKind> {
        let span_bytes = self.config.span_bytes;
        if !self.ready() {
            self.init()?;
        }
        let total =
            huge_mapping_bytes(size, align, span_bytes).ok_or(AllocErrorKind::SizeUnsupported)?;
        let cached = if align < span_bytes {
            self.take_cached_mapping(total)
        } else {
            None
        };
        let fresh = cached.is_none();
        let (base, len) = match cached {
            Some(mapping) => mapping,
            None => {
                let (base, len) = os::map_aligned(total, align.max(span_bytes))
                    .ok_or(AllocErrorKind::OutOfMemory)?;
                let now = self.huge_bytes.fetch_add(len as u64, Ordering::Relaxed) + len as u64;
                self.huge_peak_bytes.fetch_max(now, Ordering::Relaxed);
                (base.as_ptr() as usize, len)
            }
        };
        let offset = if align >= span_bytes {
            align
        } else {
            (colour_bytes(base, span_bytes) + HEADER_BYTES).next_multiple_of(align)
        };
        let object = base + offset;
        let header = SpanHeader::of(object as *mut u8, span_bytes);
        // SAFETY: the header lies inside our mapping (fresh, or taken from the cache and so
        // ours alone), before the object.
        unsafe {
            SpanHeader::init(header, u32::MAX);
            (*header).kind = Kind::Huge;
            (*header).object_offset = offset;
            (*header).mapping = (base, len);
            if zero && !fresh {
                (object as *mut u8).write_bytes(0, size);
            }
        }
        self.huge_allocations.fetch_add(1, Ordering::Relaxed);
        self.huge_live_bytes
            .fetch_add((len - offset) as u64, Ordering::Relaxed);
        // SAFETY: inside a successful mapping, hence non-null.
        Ok(unsafe { NonNull::new_unchecked(object as *mut u8) })
    }

    /// Takes the smallest cached mapping of at least `need` bytes; bounded: one look at
    /// each slot, one exchange. Of a mapping more than twice the size needed, the pages
    /// past twice `need` go back to the OS (`madvise`), so a block keeps at most its own
    /// size of another block's pages resident.
    ///
    /// Measured on `scripts/huge-blocks.c` (4 blocks of 1–16 MiB live, one replaced 400
    /// times, every page touched; 2-core VM): reuse of mappings up to twice the request
    /// only took 0.92–1.08 s at 124 MB peak RSS; any fit, keeping the whole mapping, 0.21 s
    /// at 106 MB, but a small block could then pin a large mapping's pages for good; any
    /// fit trimmed to the request 0.81 s at 99 MB (the trimmed pages fault back in when a
    /// larger block reuses the mapping); any fit trimmed to twice the request, this,
    /// 0.49–0.54 s at 99 MB; glibc 0.92–0.98 s at 72 MB.
    fn take_cached_mapping(&self, need: usize) -> Option<(usize, usize)> {
        let span_bytes = self.config.span_bytes;
        // The low bits of a slot say the mapping's length in spans (rounded down): a hint
        // read before the slot is ours; the header says the exact length after.
        let mut best: Option<(usize, usize)> = None;
        for (i, slot) in self.huge_cache.iter().enumerate() {
            let word = slot.load(Ordering::Relaxed);
            let hint = (word & (span_bytes - 1)) * span_bytes;
            if word == 0 || hint + span_bytes <= need {
                continue;
            }
            if best.is_none_or(|(_, smallest)| hint < smallest) {
                best = Some((i, hint));
            }
        }
        let (i, _) = best?;
        let word = self.huge_cache[i].load(Ordering::Relaxed);
        if word == 0
            || self.huge_cache[i]
                .compare_exchange(word, 0, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        let base = word & !(span_bytes - 1);
        // SAFETY: the mapping is ours alone since the exchange; its header (at its base's
        // colour, as for any huge block aligned below a span) was written by the free that
        // cached it.
        let len = unsafe { (*header_at(base, span_bytes)).mapping.1 };
        self.huge_cached_bytes.fetch_sub(len, Ordering::Relaxed);
        if len >= need {
            if len > 2 * need {
                // SAFETY: past `need` (a multiple of the page size) the mapping holds
                // nothing: it was free, and the block about to be made of it uses `need`
                // bytes.
                unsafe { os::discard(base + 2 * need, len - 2 * need) };
            }
            return Some((base, len));
        }
        // Another mapping took the slot in between, smaller than the hint said: give it
        // back, or unmap it if that fails.
        if !self.cache_mapping(base, len) {
            self.unmap_huge(base, len);
        }
        None
    }

    /// Puts the freed mapping `base..base + len` in the huge cache; `false` (and nothing
    /// changed) when the cache is full or the mapping is too big for it.
    pub(super) fn cache_mapping(&self, base: usize, len: usize) -> bool {
        let span_bytes = self.config.span_bytes;
        let spans = len / span_bytes;
        if spans == 0 || spans >= span_bytes || len > HUGE_CACHE_BYTES {
            return false;
        }
        if self.huge_cached_bytes.fetch_add(len, Ordering::Relaxed) + len > HUGE_CACHE_BYTES {
            self.huge_cached_bytes.fetch_sub(len, Ordering::Relaxed);
            return false;
        }
        for slot in &self.huge_cache {
            if slot.load(Ordering::Relaxed) == 0
                && slot
                    .compare_exchange(0, base | spans, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
            {
                return true;
            }
        }
        self.huge_cached_bytes.fetch_sub(len, Ordering::Relaxed);
        false
    }

    /// Unmaps a huge mapping nobody uses any more.
    pub(super) fn unmap_huge(&self, base: usize, len: usize) {
        self.huge_bytes.fetch_sub(len as u64, Ordering::Relaxed);
        // SAFETY: the mapping is ours alone and unused (freed, or just taken from the cache).
        unsafe { os::unmap(NonNull::new_unchecked(base as *mut u8), len) };
    }
}
