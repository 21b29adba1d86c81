//! A concurrent RW-BM page pool on CPU threads.
//!
//! **Data structure.** One bit per page in 32-bit atomic words, 1 = in use. Pages past the
//! end of the pool in the last word are permanently 1. A request for n ≤ 32 pages is a run
//! of n zero bits inside one word; a block never straddles two words.
//!
//! **Claim** (RW-BM): read a random word, find a run of n zero bits, set them with one
//! `fetch_or`. If a bit of the run was taken meanwhile, the bits this `fetch_or` did set
//! are ours alone and are cleared again (`fetch_and`), and the search resumes in the same
//! word with the value the `fetch_or` returned. A full word sends the search to another
//! random word. After as many random probes as there are words the search sweeps every
//! word once from a random start, and fails only if that sweep found no run.
//!
//! **Free**: `fetch_and` of the complement: it clears exactly the freed bits, whatever
//! other bits of the word change concurrently.
//!
//! **Batch claim** (CoRW's step on one word): `fetch_or(u32::MAX)` takes every free bit of a
//! word at once; the surplus beyond what was wanted goes back with `fetch_and`. Not with a
//! store or an exchange of the old value: between the two, another thread may have freed a
//! page of this word, and writing the old value back would mark it in use forever.
//!
//! **Orderings.** A successful claim is `Acquire` and a free is `Release`: the previous
//! owner's writes to a page happen before the next owner's. Every access to a word is a
//! read-modify-write, so the release sequence of a free is never broken, and the claim that
//! takes the page synchronises with the free that gave it back even if other claims and
//! releases of the word came in between. Undoing bits this thread set a moment ago and
//! never handed out needs no ordering (`Relaxed`).

use core::alloc::Layout;

use alloclab_core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use alloclab_core::{AllocError, AllocErrorKind, Allocator, BlockHandle, Stats};

use crate::rng::{SplitMix64, mix};
use crate::sim::WORD_PAGES;

/// The paper's page size.
pub const DEFAULT_PAGE_SIZE: usize = 512;
/// The most pages one request may take: one bitmap word.
pub const MAX_PAGES_PER_REQUEST: usize = WORD_PAGES;

/// A block of the pool: its first page, and the pool's page size so that
/// [`BlockHandle::address`] can say where it lies (page × page size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageHandle {
    first_page: u32,
    page_size_log2: u8,
}

impl PageHandle {
    /// The index of the block's first page.
    pub fn first_page(self) -> usize {
        self.first_page as usize
    }
}

// SAFETY: a PageHandle is two integers; copying, comparing, formatting it and computing its
// address read no shared state.
unsafe impl BlockHandle for PageHandle {
    #[inline]
    fn address(self) -> usize {
        (self.first_page as usize) << self.page_size_log2
    }
}

/// Why a pool cannot be built, or a release was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// The page size must be a power of two (handles compute addresses by shifting).
    PageSizeNotPowerOfTwo {
        /// The size asked for.
        page_size: usize,
    },
    /// A pool needs between 1 and 2^32 − 32 pages.
    PageCountOutOfRange {
        /// The count asked for.
        pages: usize,
    },
    /// A release of pages that were not all in use (a double free, or the wrong length).
    /// The pages that were in use are free now.
    PagesNotHeld {
        /// The first page released.
        first_page: usize,
        /// How many pages were released.
        pages: usize,
    },
    /// A run that is empty, longer than a word, or crosses a word boundary.
    BadRun {
        /// The first page.
        first_page: usize,
        /// The run length.
        pages: usize,
    },
}

impl core::fmt::Display for PoolError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PoolError::PageSizeNotPowerOfTwo { page_size } => {
                write!(f, "page size {page_size} is not a power of two")
            }
            PoolError::PageCountOutOfRange { pages } => {
                write!(f, "{pages} pages: a pool holds 1 to 2^32 - 32 pages")
            }
            PoolError::PagesNotHeld { first_page, pages } => write!(
                f,
                "released pages {first_page}..{} were not all in use (double free?)",
                first_page + pages
            ),
            PoolError::BadRun { first_page, pages } => write!(
                f,
                "pages {first_page}..{} are not a run of 1 to 32 pages inside one word",
                first_page + pages
            ),
        }
    }
}

impl std::error::Error for PoolError {}

/// A page pool with RW-BM claims; lock-free (a claim retries only when another thread
/// changed the word it works on, or moves to another word).
///
/// ```
/// use alloclab_core::Allocator;
/// use alloclab_gpu::PagePool;
/// use core::alloc::Layout;
///
/// let pool = PagePool::with_default_page_size(1 << 10).unwrap(); // 1024 pages of 512 B
/// let layout = Layout::from_size_align(1500, 8).unwrap(); // 3 pages
/// let block = pool.allocate(layout).unwrap();
/// assert_eq!(pool.pages_in_use(), 3);
/// // SAFETY: `block` came from this pool with this layout and is freed once.
/// unsafe { pool.deallocate(block, layout) };
/// assert_eq!(pool.pages_in_use(), 0);
/// ```
#[derive(Debug)]
pub struct PagePool {
    words: Box<[AtomicU32]>,
    pages: usize,
    page_size_log2: u8,
    /// Seeds each allocation's probe sequence (a Weyl sequence, mixed).
    probe_seed: AtomicU64,
    allocations: AtomicU64,
    deallocations: AtomicU64,
}

impl PagePool {
    /// A pool of `pages` free pages of `page_size` bytes (a power of two).
    ///
    /// # Errors
    ///
    /// [`PoolError::PageSizeNotPowerOfTwo`], [`PoolError::PageCountOutOfRange`].
    pub fn new(pages: usize, page_size: usize) -> Result<Self, PoolError> {
        if !page_size.is_power_of_two() {
            return Err(PoolError::PageSizeNotPowerOfTwo { page_size });
        }
        if pages == 0 || pages > u32::MAX as usize - WORD_PAGES {
            return Err(PoolError::PageCountOutOfRange { pages });
        }
        let word_count = pages.div_ceil(WORD_PAGES);
        let words = (0..word_count)
            .map(|w| {
                let beyond = ((w + 1) * WORD_PAGES).saturating_sub(pages);
                // The last `beyond` bits of the last word are pages that do not exist.
                let padding = if beyond == 0 {
                    0
                } else {
                    u32::MAX << (WORD_PAGES - beyond)
                };
                AtomicU32::new(padding)
            })
            .collect();
        Ok(PagePool {
            words,
            pages,
            page_size_log2: page_size.trailing_zeros() as u8,
            probe_seed: AtomicU64::new(0),
            allocations: AtomicU64::new(0),
            deallocations: AtomicU64::new(0),
        })
    }

    /// A pool of `pages` pages of [`DEFAULT_PAGE_SIZE`] bytes.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_default_page_size(pages: usize) -> Result<Self, PoolError> {
        Self::new(pages, DEFAULT_PAGE_SIZE)
    }

    /// Pages in the pool.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        1 << self.page_size_log2
    }

    /// Pages in use now (a racy snapshot while other threads work).
    pub fn pages_in_use(&self) -> usize {
        let padding = self.words.len() * WORD_PAGES - self.pages;
        self.words
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum::<usize>()
            - padding
    }

    /// Whether `page` is in use now (a racy snapshot while other threads work).
    pub fn is_in_use(&self, page: usize) -> bool {
        self.words[page / WORD_PAGES].load(Ordering::Relaxed) & (1 << (page % WORD_PAGES)) != 0
    }

    /// Claims a run of `pages` (1 ..= 32) consecutive pages inside one word, probing words
    /// in the order `probe` draws; returns the first page, or `None` if the final sweep
    /// found no such run (or `pages` is out of range).
    pub fn claim(&self, pages: usize, probe: &mut SplitMix64) -> Option<usize> {
        if pages == 0 || pages > MAX_PAGES_PER_REQUEST {
            return None;
        }
        self.probe_words(probe, |w| self.claim_in_word(w, pages))
    }

    /// CoRW's step on one word: finds a word with a free page, takes all its free pages
    /// with one `fetch_or`, keeps the lowest `want` (1 ..= 32) of them, appends them to
    /// `out`, and releases the surplus with `fetch_and`. Returns how many it kept (0 if the
    /// final sweep found every word full).
    pub fn claim_batch(&self, want: usize, probe: &mut SplitMix64, out: &mut Vec<usize>) -> usize {
        if want == 0 || want > WORD_PAGES {
            return 0;
        }
        self.probe_words(probe, |w| {
            let word = &self.words[w];
            if word.load(Ordering::Relaxed) == u32::MAX {
                return None;
            }
            let taken = !word.fetch_or(u32::MAX, Ordering::Acquire);
            if taken == 0 {
                return None;
            }
            let mut kept = 0u32;
            let mut rest = taken;
            while rest != 0 && (kept.count_ones() as usize) < want {
                let bit = rest & rest.wrapping_neg();
                kept |= bit;
                rest &= !bit;
                out.push(w * WORD_PAGES + bit.trailing_zeros() as usize);
            }
            if rest != 0 {
                // Only the surplus bits: a concurrent free of another page of this word
                // stays free. Never handed out, so no ordering needed.
                word.fetch_and(!rest, Ordering::Relaxed);
            }
            Some(kept.count_ones() as usize)
        })
        .unwrap_or(0)
    }

    /// Frees the run of `pages` pages from `first_page`.
    ///
    /// # Errors
    ///
    /// [`PoolError::BadRun`] if the run is empty, too long or crosses a word (nothing is
    /// freed); [`PoolError::PagesNotHeld`] if some of its pages were free already (the
    /// others are freed).
    pub fn release(&self, first_page: usize, pages: usize) -> Result<(), PoolError> {
        let offset = first_page % WORD_PAGES;
        if pages == 0 || offset + pages > WORD_PAGES || first_page + pages > self.pages {
            return Err(PoolError::BadRun { first_page, pages });
        }
        let mask = run_mask(pages) << offset;
        let old = self.words[first_page / WORD_PAGES].fetch_and(!mask, Ordering::Release);
        if old & mask == mask {
            Ok(())
        } else {
            Err(PoolError::PagesNotHeld { first_page, pages })
        }
    }

    /// Random words first (as many probes as there are words), then one sweep over all.
    fn probe_words<R>(
        &self,
        probe: &mut SplitMix64,
        mut try_word: impl FnMut(usize) -> Option<R>,
    ) -> Option<R> {
        let n = self.words.len();
        for _ in 0..n {
            if let Some(r) = try_word(probe.below(n)) {
                return Some(r);
            }
        }
        let start = probe.below(n);
        (0..n).find_map(|i| try_word((start + i) % n))
    }

    /// Claims a run of `pages` zero bits in word `w`, retrying in the word while it has one.
    fn claim_in_word(&self, w: usize, pages: usize) -> Option<usize> {
        let word = &self.words[w];
        let run = run_mask(pages);
        let mut seen = word.load(Ordering::Relaxed);
        loop {
            let offset = first_run(!seen, pages)?;
            let mask = run << offset;
            let old = word.fetch_or(mask, Ordering::Acquire);
            if old & mask == 0 {
                return Some(w * WORD_PAGES + offset as usize);
            }
            let set_by_us = mask & !old;
            if set_by_us != 0 {
                // Part of the run was taken meanwhile; give back what this call set.
                word.fetch_and(!set_by_us, Ordering::Relaxed);
            }
            seen = old;
        }
    }

    fn handle(&self, first_page: usize) -> PageHandle {
        PageHandle {
            first_page: first_page as u32,
            page_size_log2: self.page_size_log2,
        }
    }

    /// Pages for `layout`, or why it cannot be served.
    fn pages_for(&self, layout: Layout) -> Result<usize, AllocError> {
        if layout.size() == 0 {
            return Err(AllocError::new(layout, AllocErrorKind::ZeroSize));
        }
        if layout.align() > self.page_size() {
            return Err(AllocError::new(
                layout,
                AllocErrorKind::AlignmentUnsupported,
            ));
        }
        let pages = layout.size().div_ceil(self.page_size());
        if pages > MAX_PAGES_PER_REQUEST {
            return Err(AllocError::new(layout, AllocErrorKind::SizeUnsupported));
        }
        Ok(pages)
    }
}

/// `pages` low bits set (1 ..= 32).
fn run_mask(pages: usize) -> u32 {
    if pages >= WORD_PAGES {
        u32::MAX
    } else {
        (1u32 << pages) - 1
    }
}

/// The lowest offset where `free` has `pages` consecutive set bits.
fn first_run(free: u32, pages: usize) -> Option<u32> {
    let mut starts = free;
    for i in 1..pages {
        starts &= free >> i;
    }
    (starts != 0).then(|| starts.trailing_zeros())
}

/// Sizes are rounded up to whole pages, at most 32 (one word); alignment up to the page
/// size; zero-size layouts fail with [`AllocErrorKind::ZeroSize`]. Lock-free.
impl Allocator for PagePool {
    type Handle = PageHandle;

    fn allocate(&self, layout: Layout) -> Result<PageHandle, AllocError> {
        let pages = self.pages_for(layout)?;
        let seed = self
            .probe_seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        let mut probe = SplitMix64::new(mix(seed));
        let first = self
            .claim(pages, &mut probe)
            .ok_or(AllocError::new(layout, AllocErrorKind::OutOfMemory))?;
        self.allocations.fetch_add(1, Ordering::Relaxed);
        Ok(self.handle(first))
    }

    unsafe fn deallocate(&self, handle: PageHandle, layout: Layout) {
        let pages = self
            .pages_for(layout)
            .expect("deallocate: the layout was never allocatable here");
        let released = self.release(handle.first_page(), pages);
        debug_assert_eq!(released, Ok(()), "deallocate of a block not held");
        self.deallocations.fetch_add(1, Ordering::Relaxed);
    }

    fn name(&self) -> &str {
        "gpu-rwbm"
    }

    fn stats(&self) -> Stats {
        let page_size = self.page_size() as u64;
        let footprint = self.pages as u64 * page_size;
        Stats {
            live_bytes: Some(self.pages_in_use() as u64 * page_size),
            footprint_bytes: Some(footprint),
            peak_footprint_bytes: Some(footprint),
            allocations: Some(self.allocations.load(Ordering::Relaxed)),
            deallocations: Some(self.deallocations.load(Ordering::Relaxed)),
            max_alloc_steps: None,
            max_free_steps: None,
        }
    }
}

#[cfg(test)]
impl PagePool {
    /// A pool of one word per entry of `in_use` (1 = in use), pages of 512 B.
    fn from_words(in_use: &[u32]) -> Self {
        let pool = Self::new(in_use.len() * WORD_PAGES, DEFAULT_PAGE_SIZE).unwrap();
        for (word, &bits) in pool.words.iter().zip(in_use) {
            word.fetch_or(bits, Ordering::Relaxed);
        }
        pool
    }

    fn word(&self, w: usize) -> u32 {
        self.words[w].load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use alloclab_core::sync::atomic::AtomicBool;
    use alloclab_core::sync::{Arc, thread};

    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    #[test]
    fn runs_are_found_inside_one_word() {
        assert_eq!(first_run(0b1110_0110, 1), Some(1));
        assert_eq!(first_run(0b1110_0110, 2), Some(1));
        assert_eq!(first_run(0b1110_0110, 3), Some(5));
        assert_eq!(first_run(0b1110_0110, 4), None);
        assert_eq!(first_run(u32::MAX, 32), Some(0));
        assert_eq!(first_run(u32::MAX >> 1, 32), None);
    }

    #[test]
    fn no_page_is_handed_out_twice_under_four_threads() {
        // 256 pages, so that threads keep meeting in the same words.
        let pool = Arc::new(PagePool::with_default_page_size(256).unwrap());
        let shadow: Arc<Vec<AtomicBool>> =
            Arc::new((0..256).map(|_| AtomicBool::new(false)).collect());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (pool, shadow) = (pool.clone(), shadow.clone());
                thread::spawn(move || {
                    let mut rng = SplitMix64::new(t);
                    let mut held: Vec<(PageHandle, usize)> = Vec::new();
                    let mut batch = Vec::new();
                    let mut served = 0u32;
                    for op in 0..20_000 {
                        if held.len() < 12 && rng.below(3) != 0 {
                            let pages = 1 + rng.below(4);
                            let Ok(h) = pool.allocate(layout(pages * DEFAULT_PAGE_SIZE)) else {
                                continue;
                            };
                            for p in h.first_page()..h.first_page() + pages {
                                assert!(!shadow[p].swap(true, Ordering::Relaxed), "page {p} twice");
                            }
                            held.push((h, pages));
                            served += 1;
                        } else if op % 7 == 0 {
                            batch.clear();
                            pool.claim_batch(1 + rng.below(3), &mut rng, &mut batch);
                            for &p in &batch {
                                assert!(!shadow[p].swap(true, Ordering::Relaxed), "page {p} twice");
                                held.push((pool.handle(p), 1));
                            }
                        } else if !held.is_empty() {
                            let (h, pages) = held.swap_remove(rng.below(held.len()));
                            for p in h.first_page()..h.first_page() + pages {
                                assert!(shadow[p].swap(false, Ordering::Relaxed));
                            }
                            pool.release(h.first_page(), pages).unwrap();
                        }
                    }
                    for (h, pages) in held {
                        for p in h.first_page()..h.first_page() + pages {
                            shadow[p].store(false, Ordering::Relaxed);
                        }
                        pool.release(h.first_page(), pages).unwrap();
                    }
                    served
                })
            })
            .collect();
        let served: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(served > 10_000, "the pool served only {served} allocations");
        assert_eq!(pool.pages_in_use(), 0);
    }

    #[test]
    fn a_freed_page_is_the_one_a_full_pool_hands_out_next() {
        let pool = PagePool::with_default_page_size(64).unwrap();
        let handles: Vec<_> = (0..64)
            .map(|_| pool.allocate(layout(100)).unwrap())
            .collect();
        let err = pool.allocate(layout(100)).unwrap_err();
        assert_eq!(err.kind, AllocErrorKind::OutOfMemory);
        let freed = handles[37];
        // SAFETY: `freed` was allocated with this layout and is freed once.
        unsafe { pool.deallocate(freed, layout(100)) };
        assert_eq!(pool.allocate(layout(100)).unwrap(), freed);
        let stats = pool.stats();
        assert_eq!(stats.live_bytes, Some(64 * 512));
        assert_eq!(
            (stats.allocations, stats.deallocations),
            (Some(65), Some(1))
        );
    }

    #[test]
    fn multi_page_blocks_stay_inside_a_word_and_address_by_page() {
        let pool = PagePool::new(64, 4096).unwrap();
        let a = pool.allocate(layout(32 * 4096)).unwrap();
        let b = pool.allocate(layout(31 * 4096 + 1)).unwrap();
        assert_eq!(
            pool.allocate(layout(4096 + 1)).unwrap_err().kind,
            AllocErrorKind::OutOfMemory
        );
        assert_eq!(a.first_page() % 32, 0);
        assert_eq!(b.first_page() % 32, 0);
        assert_eq!(a.address(), a.first_page() * 4096);
        assert_ne!(a, b);
    }

    #[test]
    fn zero_oversize_and_overaligned_layouts_are_errors() {
        let pool = PagePool::with_default_page_size(1024).unwrap();
        let kind = |size, align| {
            pool.allocate(Layout::from_size_align(size, align).unwrap())
                .unwrap_err()
                .kind
        };
        assert_eq!(kind(0, 1), AllocErrorKind::ZeroSize);
        assert_eq!(kind(32 * 512 + 1, 8), AllocErrorKind::SizeUnsupported);
        assert_eq!(kind(64, 1024), AllocErrorKind::AlignmentUnsupported);
        assert!(pool.allocate(layout(32 * 512)).is_ok());
        assert_eq!(
            PagePool::new(10, 500).unwrap_err(),
            PoolError::PageSizeNotPowerOfTwo { page_size: 500 }
        );
        assert_eq!(
            PagePool::new(0, 512).unwrap_err(),
            PoolError::PageCountOutOfRange { pages: 0 }
        );
    }

    #[test]
    fn pages_past_the_end_are_never_handed_out() {
        let pool = PagePool::with_default_page_size(40).unwrap();
        let mut rng = SplitMix64::new(1);
        let pages: Vec<_> = (0..40).map(|_| pool.claim(1, &mut rng).unwrap()).collect();
        assert!(pages.iter().all(|&p| p < 40));
        assert_eq!(pool.claim(1, &mut rng), None);
        assert_eq!(pool.pages_in_use(), 40);
    }

    #[test]
    fn a_batch_keeps_what_it_wants_and_returns_the_rest() {
        // Word 0: pages 3, 9 and 20 free.
        let pool = PagePool::from_words(&[!((1 << 3) | (1 << 9) | (1 << 20))]);
        let mut out = Vec::new();
        assert_eq!(pool.claim_batch(2, &mut SplitMix64::new(1), &mut out), 2);
        assert_eq!(out, [3, 9]);
        assert_eq!(pool.word(0), !(1 << 20));
    }

    #[test]
    fn double_and_malformed_releases_are_errors() {
        let pool = PagePool::with_default_page_size(64).unwrap();
        let p = pool.claim(2, &mut SplitMix64::new(4)).unwrap();
        assert_eq!(pool.release(p, 2), Ok(()));
        assert_eq!(
            pool.release(p, 2),
            Err(PoolError::PagesNotHeld {
                first_page: p,
                pages: 2
            })
        );
        assert_eq!(
            pool.release(30, 3),
            Err(PoolError::BadRun {
                first_page: 30,
                pages: 3
            })
        );
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use alloclab_core::sync::{Arc, model, thread};

    use super::*;

    /// Word 0 with only the pages in `free` free.
    fn pool_with_free(free: u32) -> Arc<PagePool> {
        Arc::new(PagePool::from_words(&[!free]))
    }

    /// Two threads claim one page each from a word with two free pages: both get one, never
    /// the same, and the word ends with both taken.
    #[test]
    fn two_claims_never_get_the_same_page() {
        model(|| {
            let pool = pool_with_free(0b11);
            let other = {
                let pool = pool.clone();
                thread::spawn(move || pool.claim(1, &mut SplitMix64::new(1)))
            };
            let mine = pool.claim(1, &mut SplitMix64::new(2)).unwrap();
            let theirs = other.join().unwrap().unwrap();
            assert_ne!(mine, theirs);
            assert_eq!(pool.word(0), u32::MAX);
        });
    }

    /// One free page, two claimers: exactly one gets it.
    #[test]
    fn the_last_page_goes_to_exactly_one_claim() {
        model(|| {
            let pool = pool_with_free(0b100);
            let other = {
                let pool = pool.clone();
                thread::spawn(move || pool.claim(1, &mut SplitMix64::new(1)))
            };
            let mine = pool.claim(1, &mut SplitMix64::new(2));
            let theirs = other.join().unwrap();
            assert_eq!(mine.is_some() as u32 + theirs.is_some() as u32, 1);
            assert_eq!(mine.or(theirs), Some(2));
        });
    }

    /// A two-page claim racing a one-page claim on pages 0..3: when the one-page claim wins
    /// page 0, the two-page claim's `fetch_or` sets page 1 and must give it back before
    /// retrying; both succeed, disjoint, and nothing else stays set.
    #[test]
    fn a_multi_page_claim_that_loses_part_of_its_run_gives_back_the_rest() {
        model(|| {
            let pool = pool_with_free(0b111);
            let other = {
                let pool = pool.clone();
                thread::spawn(move || pool.claim(1, &mut SplitMix64::new(1)).unwrap())
            };
            let pair = pool.claim(2, &mut SplitMix64::new(2)).unwrap();
            let single = other.join().unwrap();
            assert!(single < pair || single >= pair + 2);
            assert_eq!(pool.word(0), u32::MAX);
        });
    }

    /// The scenario the notes warn about: a batch claim takes every free bit of the word
    /// (pages 0 and 1), keeps one and releases the surplus, while another thread frees
    /// page 5 of the same word. Neither the surplus page nor page 5 may be lost: the word
    /// ends with exactly the batch's page taken among 0, 1 and 5.
    #[test]
    fn a_surplus_release_racing_a_free_loses_neither_page() {
        model(|| {
            let pool = pool_with_free(0b11);
            let freer = {
                let pool = pool.clone();
                thread::spawn(move || pool.release(5, 1).unwrap())
            };
            let mut out = Vec::new();
            assert_eq!(pool.claim_batch(1, &mut SplitMix64::new(3), &mut out), 1);
            freer.join().unwrap();
            let kept = out[0];
            assert!([0, 1, 5].contains(&kept));
            let free_now = !pool.word(0);
            assert_eq!(free_now, 0b10_0011 & !(1 << kept));
        });
    }
}
