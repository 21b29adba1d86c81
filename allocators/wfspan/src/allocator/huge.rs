//! Blocks too big for a span run: each in a mapping of its own, with a bounded cache of
//! freed mappings. The one path of wfspan that makes system calls.

use core::ptr::NonNull;

use alloclab_core::AllocErrorKind;
use alloclab_core::sync::atomic::Ordering;

use super::WfSpan;
use crate::os;
use crate::span::{HEADER_BYTES, Kind, SpanHeader, huge_header_of};

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

/// Where a huge block aligned to `align` starts in its mapping: past the header at the
/// mapping's start, or, aligned to a span or more, at `align` (the header one span before it,
/// [`huge_header_of`]).
fn huge_object_offset(align: usize, span_bytes: usize) -> usize {
    if align >= span_bytes {
        align
    } else {
        HEADER_BYTES.next_multiple_of(align)
    }
}

/// The bytes to map for a huge block of `size` aligned to `align`: its header and the
/// object, whole pages. `None` when that overflows or exceeds half the address space.
fn huge_mapping_bytes(size: usize, align: usize, span_bytes: usize) -> Option<usize> {
    huge_object_offset(align, span_bytes)
        .checked_add(size)
        .and_then(|t| t.checked_next_multiple_of(os::page_bytes()))
        .filter(|&t| t <= isize::MAX as usize / 2)
}

/// The length of the cached huge mapping at `base`, from its header at its start (only
/// mappings whose header is there, blocks aligned below a span, are cached).
///
/// # Safety
///
/// `base` is a mapping taken from the huge cache (or about to be unmapped with it), which
/// nobody else uses: the free that cached it wrote its header.
pub(super) unsafe fn cached_mapping_len(base: usize) -> usize {
    // SAFETY: per the contract.
    unsafe { (*(base as *const SpanHeader)).mapping.1 }
}

impl WfSpan {
    /// A block in its own mapping: the one path that makes system calls. The smallest cached
    /// mapping that holds the block is reused (its pages past twice the block's size given
    /// back); `zero` asks for zeroed memory, which a fresh mapping already is. Needs nothing
    /// of the span region, which need not be reserved.
    #[cold]
    pub(super) fn allocate_huge(
        &self,
        size: usize,
        align: usize,
        zero: bool,
    ) -> Result<NonNull<u8>, AllocErrorKind> {
        let span_bytes = self.config.span_bytes;
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
        let offset = huge_object_offset(align, span_bytes);
        let object = base + offset;
        let header = huge_header_of(object as *mut u8, span_bytes);
        // SAFETY: the header lies inside our mapping (fresh, or taken from the cache and so
        // ours alone), before the object.
        unsafe {
            SpanHeader::init(header, u32::MAX, base);
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
        // SAFETY: the mapping is ours alone since the exchange; its header (at its start, as
        // for any huge block aligned below a span) was written by the free that cached it.
        let len = unsafe { cached_mapping_len(base) };
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

#[cfg(all(test, not(loom)))]
mod tests {
    use core::alloc::Layout;

    use alloclab_core::{Allocator, MallocHeap};

    use super::super::Config;
    use super::*;

    const MIB: usize = 1 << 20;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 16).unwrap()
    }

    /// The mapping `(base, len)` of huge block `block`.
    fn mapping(heap: &WfSpan, block: NonNull<u8>) -> (usize, usize) {
        // SAFETY: a live huge block: its header is initialised.
        unsafe { (*heap.header_of(block.as_ptr())).mapping }
    }

    /// The bases of the mappings in the cache, slot by slot (0: empty).
    fn cached(heap: &WfSpan) -> Vec<usize> {
        let mask = !(heap.config.span_bytes - 1);
        heap.huge_cache
            .iter()
            .map(|s| s.load(Ordering::Relaxed) & mask)
            .collect()
    }

    fn free(heap: &WfSpan, block: NonNull<u8>, size: usize) {
        // SAFETY: live blocks of `heap` allocated with this layout, each freed once.
        unsafe { heap.deallocate(block, layout(size)) };
    }

    /// The mapping of a huge block has room for its header and the object at every
    /// alignment, for sizes at every position in a page (so that rounding up to whole pages
    /// never hides a shortfall); sizes past half the address space have none.
    #[test]
    fn a_huge_mapping_holds_the_header_and_the_object() {
        let span = Config::DEFAULT.span_bytes;
        let in_page = (0..os::page_bytes()).step_by(16).map(|d| 4 * MIB - d);
        for size in [2 * MIB + 1, 3 * MIB, 16 * MIB + 4095]
            .into_iter()
            .chain(in_page)
        {
            for align in [16, 64, 4096, span / 2, span, 4 * span] {
                let total = huge_mapping_bytes(size, align, span).unwrap();
                assert_eq!(total % os::page_bytes(), 0);
                let offset = huge_object_offset(align, span);
                assert_eq!(offset % align, 0);
                assert!(offset >= HEADER_BYTES);
                assert!(
                    offset + size <= total,
                    "{size} B aligned {align}: {total} B mapped"
                );
            }
        }
        let half = isize::MAX as usize / 2;
        assert_eq!(huge_mapping_bytes(half, 16, span), None);
        assert_eq!(huge_mapping_bytes(usize::MAX - 100, 16, span), None);
        assert!(huge_mapping_bytes(half / 2, 16, span).is_some());
    }

    /// Of the cached mappings, a huge request takes the smallest that holds it (slots
    /// filled with a large, a small and a middle one); one larger than all maps afresh.
    /// A block counts its usable size as live while it lives.
    #[test]
    fn the_cache_serves_the_smallest_mapping_that_fits() {
        let heap = WfSpan::new();
        let sizes = [12 * MIB, 3 * MIB, 6 * MIB];
        let blocks: Vec<_> = sizes
            .iter()
            .map(|&s| {
                let live = heap.stats().live_bytes.unwrap();
                let b = heap.allocate(layout(s)).unwrap();
                // SAFETY: live block of ours.
                let usable = unsafe { heap.usable_size(b) };
                assert_eq!(heap.stats().live_bytes.unwrap(), live + usable as u64);
                b
            })
            .collect();
        let bases: Vec<usize> = blocks.iter().map(|&b| mapping(&heap, b).0).collect();
        for (&b, &s) in blocks.iter().zip(&sizes) {
            free(&heap, b, s);
        }
        assert_eq!(heap.stats().live_bytes, Some(0));
        let mut slots = cached(&heap);
        slots.retain(|&b| b != 0);
        assert_eq!(slots, bases, "every freed mapping cached, in slot order");
        for (want, size) in [(2, 5 * MIB), (0, 10 * MIB), (1, 5 * MIB / 2), (2, 6 * MIB)] {
            let b = heap.allocate(layout(size)).unwrap();
            assert_eq!(
                mapping(&heap, b).0,
                bases[want],
                "{size} B took another mapping than the smallest that fits"
            );
            // SAFETY: live block of ours.
            unsafe { b.as_ptr().write_bytes(0x33, heap.usable_size(b)) };
            free(&heap, b, size);
        }
        let b = heap.allocate(layout(13 * MIB)).unwrap();
        assert!(
            !bases.contains(&mapping(&heap, b).0),
            "13 MiB fits no cached mapping"
        );
        free(&heap, b, 13 * MIB);
    }

    /// A cached mapping taken for a block over half its size keeps every page (nothing is
    /// given back below twice the block's size).
    #[test]
    fn a_mapping_reused_for_a_block_over_half_its_size_keeps_its_pages() {
        let heap = WfSpan::new();
        let a = heap.allocate(layout(6 * MIB)).unwrap();
        // SAFETY: live block of ours.
        let usable = unsafe { heap.usable_size(a) };
        // SAFETY: as above.
        unsafe { a.as_ptr().write_bytes(0x5a, usable) };
        free(&heap, a, 6 * MIB);
        let b = heap.allocate(layout(4 * MIB)).unwrap();
        assert_eq!(b, a, "the cached mapping was not reused");
        // SAFETY: live block of ours, `usable` bytes long (the same mapping).
        let bytes = unsafe { core::slice::from_raw_parts(b.as_ptr(), usable) };
        assert!(
            bytes.iter().all(|&x| x == 0x5a),
            "pages below twice the block were dropped"
        );
        free(&heap, b, 4 * MIB);
    }

    /// The slot's hint says a mapping's length in whole spans; a request between its true
    /// length and the next span finds it too small once taken, and gives it back to the
    /// cache, where it serves a request it holds.
    #[test]
    fn a_mapping_the_hint_overstates_goes_back_to_the_cache() {
        let heap = WfSpan::new();
        let span = heap.config.span_bytes;
        let page = os::page_bytes();
        let size = 4 * MIB;
        let a = heap.allocate(layout(size)).unwrap();
        let (base, len) = mapping(&heap, a);
        free(&heap, a, size);
        assert!(
            len % span + page < span,
            "the mapping ends {} B into a span",
            len % span
        );
        // A request whose mapping would be one page longer than the cached one.
        let over = heap.allocate(layout(size + page)).unwrap();
        assert_ne!(mapping(&heap, over).0, base, "a mapping too small was used");
        assert!(cached(&heap).contains(&base), "the mapping left the cache");
        assert_eq!(heap.huge_cached_bytes.load(Ordering::Relaxed), len);
        let again = heap.allocate(layout(size)).unwrap();
        assert_eq!(again, a);
        // SAFETY: live block of ours.
        unsafe { again.as_ptr().write_bytes(0x11, heap.usable_size(again)) };
        free(&heap, again, size);
        free(&heap, over, size + page);
    }

    /// The cache holds at most `HUGE_CACHE_BYTES`: a mapping of exactly that size is kept;
    /// mappings that would take it past the bound are unmapped.
    #[test]
    fn the_cache_holds_up_to_its_byte_bound() {
        let heap = WfSpan::new();
        let span = heap.config.span_bytes;
        let overhead = huge_mapping_bytes(2 * MIB, 16, span).unwrap() - 2 * MIB;
        let exact = HUGE_CACHE_BYTES - overhead;
        assert_eq!(huge_mapping_bytes(exact, 16, span), Some(HUGE_CACHE_BYTES));
        let a = heap.allocate(layout(exact)).unwrap();
        free(&heap, a, exact);
        assert_eq!(
            heap.huge_cached_bytes.load(Ordering::Relaxed),
            HUGE_CACHE_BYTES
        );
        let b = heap.allocate(layout(exact)).unwrap();
        assert_eq!(b, a, "the mapping of the cache's size was not kept");
        free(&heap, b, exact);
        assert!(MallocHeap::trim(&heap));
        // Four mappings of 20 MiB: three fit under 64 MiB, the fourth is unmapped.
        let blocks: Vec<_> = (0..4)
            .map(|_| heap.allocate(layout(20 * MIB)).unwrap())
            .collect();
        for b in blocks {
            free(&heap, b, 20 * MIB);
        }
        let held = heap.huge_cached_bytes.load(Ordering::Relaxed);
        assert!(held <= HUGE_CACHE_BYTES, "{held} B cached");
        assert_eq!(cached(&heap).iter().filter(|&&b| b != 0).count(), 3);
    }
}
