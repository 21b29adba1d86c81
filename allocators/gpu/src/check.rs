//! Host-side checks of a page pool after a kernel: what the device run hands back is checked
//! here, on plain slices, so the checks themselves are tested without a GPU.
//!
//! The pool state is one bit per page in 32-bit words, 1 = in use (the RW designs' word per
//! page, and the queue's ring of free pages, are converted to that form first). After an
//! allocation kernel that started from `before`:
//!
//! * every page handed out was free in `before` ([`CheckError::WasInUse`]),
//! * no page is handed out twice ([`CheckError::HandedOutTwice`]),
//! * the pool's bitmap is `before` with exactly the pages handed out set
//!   ([`CheckError::BitmapMismatch`]): nothing claimed and not handed out (a leak), nothing
//!   handed out and not marked.
//!
//! After the free kernel the bitmap is `before` again ([`check_restored`]).

use crate::sim::WORD_PAGES;

/// What a check found wrong: the first violation, with enough to find it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckError {
    /// A block reaches past the pool or across a bitmap word.
    OutOfRange {
        /// The block's first page.
        first_page: u64,
        /// Its length in pages.
        pages: u32,
    },
    /// A page was handed out that was in use before the kernel.
    WasInUse {
        /// The page.
        page: u64,
    },
    /// Two requesters hold the same page.
    HandedOutTwice {
        /// The page.
        page: u64,
    },
    /// The bitmap word differs from what the pages held say it should be.
    BitmapMismatch {
        /// The word's index.
        word: usize,
        /// What it should be.
        expected: u32,
        /// What the device left there.
        found: u32,
    },
    /// Two blocks from an address-handing allocator (CUDA's malloc) overlap, or one is null.
    Overlap {
        /// The requester whose block overlaps the next one (or is null).
        requester: usize,
        /// Its address.
        address: u64,
    },
    /// The state and the blocks do not have the sizes the run was set up with.
    Shape {
        /// What differs.
        what: &'static str,
    },
}

impl core::fmt::Display for CheckError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CheckError::OutOfRange { first_page, pages } => write!(
                f,
                "block of {pages} pages at page {first_page} reaches past the pool or across a word"
            ),
            CheckError::WasInUse { page } => {
                write!(
                    f,
                    "page {page} was handed out but was in use before the kernel"
                )
            }
            CheckError::HandedOutTwice { page } => {
                write!(f, "page {page} was handed out twice")
            }
            CheckError::BitmapMismatch {
                word,
                expected,
                found,
            } => write!(
                f,
                "bitmap word {word} is {found:#010x}, the pages held say {expected:#010x}"
            ),
            CheckError::Overlap { requester, address } => write!(
                f,
                "the block of requester {requester} at {address:#x} is null or overlaps the next"
            ),
            CheckError::Shape { what } => write!(f, "inconsistent check input: {what}"),
        }
    }
}

impl std::error::Error for CheckError {}

/// Checks the pool after an allocation kernel: `before` is the bitmap it started from,
/// `after` the bitmap it left, `blocks` the (first page, pages) each requester holds
/// (requesters that gave up are left out).
///
/// # Errors
///
/// The first violation found (see the module docs).
pub fn check_claims(
    before: &[u32],
    after: &[u32],
    blocks: impl IntoIterator<Item = (u64, u32)>,
) -> Result<(), CheckError> {
    if before.len() != after.len() {
        return Err(CheckError::Shape {
            what: "bitmaps of different lengths",
        });
    }
    let total_pages = (before.len() * WORD_PAGES) as u64;
    let mut held = vec![0u32; before.len()];
    for (first_page, pages) in blocks {
        let start_bit = (first_page % WORD_PAGES as u64) as u32;
        if pages == 0 || first_page >= total_pages || start_bit + pages > WORD_PAGES as u32 {
            return Err(CheckError::OutOfRange { first_page, pages });
        }
        let word = (first_page / WORD_PAGES as u64) as usize;
        let mask = if pages == 32 {
            u32::MAX
        } else {
            ((1u32 << pages) - 1) << start_bit
        };
        let first_bad =
            |bits: u32| first_page + u64::from((bits & mask).trailing_zeros() - start_bit);
        if before[word] & mask != 0 {
            return Err(CheckError::WasInUse {
                page: first_bad(before[word]),
            });
        }
        if held[word] & mask != 0 {
            return Err(CheckError::HandedOutTwice {
                page: first_bad(held[word]),
            });
        }
        held[word] |= mask;
    }
    for (word, ((&b, &h), &found)) in before.iter().zip(&held).zip(after).enumerate() {
        let expected = b | h;
        if expected != found {
            return Err(CheckError::BitmapMismatch {
                word,
                expected,
                found,
            });
        }
    }
    Ok(())
}

/// Checks the pool after the free kernel: every page handed out is free again, so the
/// bitmap is what it was before the allocation kernel.
///
/// # Errors
///
/// [`CheckError::BitmapMismatch`] at the first word that differs.
pub fn check_restored(before: &[u32], after_free: &[u32]) -> Result<(), CheckError> {
    check_claims(before, after_free, core::iter::empty())
}

/// The bitmap of a word-per-page pool (RW, CRW): page p is in use iff `pages[p] != 0`.
/// `pages.len()` must be a multiple of 32.
pub fn bitmap_of_page_words(pages: &[u32]) -> Vec<u32> {
    pages
        .chunks(WORD_PAGES)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u32, |w, (i, &p)| w | (u32::from(p != 0) << i))
        })
        .collect()
}

/// The bitmap of a queue pool: every page in use except those on the queue.
///
/// # Errors
///
/// [`CheckError::HandedOutTwice`] if a page is on the queue twice, [`CheckError::OutOfRange`]
/// if one is past the pool.
pub fn bitmap_of_free_list(
    total_pages: usize,
    free_pages: impl IntoIterator<Item = u32>,
) -> Result<Vec<u32>, CheckError> {
    let mut words = vec![u32::MAX; total_pages.div_ceil(WORD_PAGES)];
    for page in free_pages {
        let p = page as usize;
        if p >= total_pages {
            return Err(CheckError::OutOfRange {
                first_page: u64::from(page),
                pages: 1,
            });
        }
        let bit = 1u32 << (p % WORD_PAGES);
        if words[p / WORD_PAGES] & bit == 0 {
            return Err(CheckError::HandedOutTwice {
                page: u64::from(page),
            });
        }
        words[p / WORD_PAGES] &= !bit;
    }
    Ok(words)
}

/// The free pages of a bitmap, ascending (a queue's initial contents).
pub fn free_pages_of(bitmap: &[u32]) -> Vec<u32> {
    let mut free = Vec::new();
    for (w, &word) in bitmap.iter().enumerate() {
        let mut bits = !word;
        while bits != 0 {
            free.push((w * WORD_PAGES) as u32 + bits.trailing_zeros());
            bits &= bits - 1;
        }
    }
    free
}

/// Checks blocks handed out as addresses (CUDA's malloc): none null, none overlapping.
/// `blocks` are (address, size in bytes) per requester.
///
/// # Errors
///
/// [`CheckError::Overlap`] naming the first requester (in address order) whose block is
/// null or runs into the next one.
pub fn check_disjoint_addresses(blocks: &[(u64, u32)]) -> Result<(), CheckError> {
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_unstable_by_key(|&i| blocks[i].0);
    for (k, &i) in order.iter().enumerate() {
        let (address, size) = blocks[i];
        let end = address.checked_add(u64::from(size));
        let next = order.get(k + 1).map(|&j| blocks[j].0);
        let overlaps = match (end, next) {
            (None, _) => true,
            (Some(end), Some(next)) => end > next,
            (Some(_), None) => false,
        };
        if address == 0 || overlaps {
            return Err(CheckError::Overlap {
                requester: i,
                address,
            });
        }
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn claims_of_free_pages_that_the_bitmap_shows_pass() {
        let before = vec![0xffff_0000, u32::MAX, 0];
        let after = vec![0xffff_0003, u32::MAX, 0xf0];
        check_claims(&before, &after, [(0, 1), (1, 1), (64 + 4, 4)]).unwrap();
        check_restored(&before, &before).unwrap();
    }

    #[test]
    fn a_page_handed_out_twice_is_found() {
        let before = vec![0];
        let after = vec![0b111];
        assert_eq!(
            check_claims(&before, &after, [(0, 2), (1, 2)]),
            Err(CheckError::HandedOutTwice { page: 1 })
        );
    }

    #[test]
    fn a_page_that_was_in_use_is_found() {
        let before = vec![0b100];
        let after = vec![0b111];
        assert_eq!(
            check_claims(&before, &after, [(0, 3)]),
            Err(CheckError::WasInUse { page: 2 })
        );
    }

    #[test]
    fn a_leaked_or_unmarked_page_is_a_bitmap_mismatch() {
        let before = vec![0, 0];
        // Page 33 set but held by nobody: a leak.
        let leak = check_claims(&before, &[1, 2], [(0, 1)]);
        assert_eq!(
            leak,
            Err(CheckError::BitmapMismatch {
                word: 1,
                expected: 0,
                found: 2
            })
        );
        // Page 0 held but not set.
        assert!(matches!(
            check_claims(&before, &[0, 0], [(0, 1)]),
            Err(CheckError::BitmapMismatch { word: 0, .. })
        ));
        // A free kernel that forgot a page.
        assert!(check_restored(&before, &[4, 0]).is_err());
    }

    #[test]
    fn blocks_past_the_pool_or_across_words_are_out_of_range() {
        let z = vec![0, 0];
        for (first, pages) in [(64, 1), (30, 3), (0, 0), (0, 33)] {
            assert_eq!(
                check_claims(&z, &z, [(first, pages)]),
                Err(CheckError::OutOfRange {
                    first_page: first,
                    pages
                })
            );
        }
        assert!(check_claims(&z, &[0, u32::MAX], [(32, 32)]).is_ok());
    }

    #[test]
    fn page_words_and_free_lists_convert_to_the_same_bitmap() {
        let mut pages = vec![1u32; 64];
        pages[3] = 0;
        pages[40] = 0;
        let from_words = bitmap_of_page_words(&pages);
        assert_eq!(from_words, vec![!(1 << 3), !(1 << 8)]);
        assert_eq!(free_pages_of(&from_words), vec![3, 40]);
        assert_eq!(bitmap_of_free_list(64, [40, 3]).unwrap(), from_words);
        assert_eq!(
            bitmap_of_free_list(64, [3, 3]),
            Err(CheckError::HandedOutTwice { page: 3 })
        );
        assert!(bitmap_of_free_list(64, [64]).is_err());
    }

    #[test]
    fn overlapping_or_null_addresses_are_found() {
        check_disjoint_addresses(&[(0x2000, 16), (0x1000, 0x1000)]).unwrap();
        assert_eq!(
            check_disjoint_addresses(&[(0x2000, 16), (0x1000, 0x1001)]),
            Err(CheckError::Overlap {
                requester: 1,
                address: 0x1000
            })
        );
        assert!(check_disjoint_addresses(&[(0, 16)]).is_err());
    }
}
