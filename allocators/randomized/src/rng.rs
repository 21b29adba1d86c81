//! The allocator's random numbers: ChaCha8 seeded from the OS, and draws in `[0, n)`
//! without modulo bias.
//!
//! ChaCha8 is a cryptographic stream cipher (8 rounds, the reduced-round variant that
//! `rand` uses for its fast secure generator): its output cannot be predicted from earlier
//! output, so an attacker who sees where some objects landed learns nothing about where the
//! next ones land. Its state (about 300 bytes) lives in band, in the heap's control block.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// The generator of one heap.
pub(crate) struct Rng(ChaCha8Rng);

impl Rng {
    /// A generator seeded with `seed`.
    pub(crate) fn from_seed(seed: [u8; 32]) -> Self {
        Self(ChaCha8Rng::from_seed(seed))
    }

    /// The generator of stream `stream` of `seed` (ChaCha's 64-bit stream number: streams
    /// of one seed are independent).
    pub(crate) fn from_seed_stream(seed: [u8; 32], stream: u64) -> Self {
        let mut rng = ChaCha8Rng::from_seed(seed);
        rng.set_stream(stream);
        Self(rng)
    }

    /// 64 uniformly random bits.
    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniformly random integer in `[0, n)`; `n` must not be 0. Draws 32-bit words when
    /// `n` fits in one (half the generator output per draw), 64-bit ones otherwise.
    #[inline]
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        match u32::try_from(n) {
            Ok(small) => u64::from(below(small, || self.0.next_u32())),
            Err(_) => below(n, || self.0.next_u64()),
        }
    }
}

/// An unsigned word that [`below`] can draw in: `u64` in the allocator, `u16` in the tests
/// (small enough to try every input).
pub(crate) trait Word: Copy + Eq + Ord {
    /// Bits in the word.
    const BITS: u32;
    /// The word as a `u128`.
    fn wide(self) -> u128;
    /// The low `BITS` bits of `x`.
    fn narrow(x: u128) -> Self;
}

impl Word for u64 {
    const BITS: u32 = 64;
    fn wide(self) -> u128 {
        u128::from(self)
    }
    fn narrow(x: u128) -> Self {
        x as u64
    }
}

impl Word for u32 {
    const BITS: u32 = 32;
    fn wide(self) -> u128 {
        u128::from(self)
    }
    fn narrow(x: u128) -> Self {
        x as u32
    }
}

#[cfg(test)]
impl Word for u16 {
    const BITS: u32 = 16;
    fn wide(self) -> u128 {
        u128::from(self)
    }
    fn narrow(x: u128) -> Self {
        x as u16
    }
}

/// Lemire's multiply-and-reject draw of a uniform integer in `[0, n)` from uniform words
/// (D. Lemire, "Fast random integer generation in an interval", ACM TOMACS 2019).
///
/// `x * n` spreads the `2^BITS` words over `n` buckets of `2^BITS / n` or one more words
/// each; the low half of the product says where in its bucket a word fell, and rejecting the
/// `2^BITS mod n` lowest positions leaves every bucket exactly `floor(2^BITS / n)` words.
/// So every result is exactly equally likely (no modulo bias), and a redraw happens with
/// probability below `n / 2^BITS`. The division that computes `2^BITS mod n` runs only when
/// a word lands in the zone that might need rejecting.
#[inline]
pub(crate) fn below<W: Word>(n: W, mut next: impl FnMut() -> W) -> W {
    let n = n.wide();
    debug_assert!(n > 0, "below(0)");
    let modulus = 1u128 << W::BITS;
    let mut product = next().wide() * n;
    let mut low = product % modulus;
    if low < n {
        let threshold = (modulus - n) % n;
        while low < threshold {
            product = next().wide() * n;
            low = product % modulus;
        }
    }
    W::narrow(product >> W::BITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds every 16-bit word once (then zeros, which only a rejection would read) and
    /// counts the results: unbiased means every result is drawn exactly equally often over
    /// the accepted words.
    fn counts(n: u16) -> Vec<u64> {
        let mut counts = vec![0u64; usize::from(n)];
        for first in 0..=u16::MAX {
            let mut fed = false;
            let mut rejected = false;
            let value = below(n, || {
                if fed {
                    // Any word will do after a rejection: this one is always accepted.
                    rejected = true;
                    u16::MAX
                } else {
                    fed = true;
                    first
                }
            });
            if !rejected {
                counts[usize::from(value)] += 1;
            }
        }
        counts
    }

    #[test]
    fn every_result_is_equally_likely_for_every_bound() {
        for n in [
            1u16,
            2,
            3,
            5,
            7,
            10,
            100,
            255,
            1000,
            12_345,
            40_000,
            u16::MAX,
        ] {
            let counts = counts(n);
            // Exactly floor(2^16 / n) accepted words per result: no result is favoured.
            let per_result = (1u64 << 16) / u64::from(n);
            assert!(
                counts.iter().all(|&c| c == per_result),
                "n = {n}: counts range {:?}..{:?}, expected all {per_result}",
                counts.iter().min(),
                counts.iter().max()
            );
        }
    }

    #[test]
    fn plain_modulo_would_have_been_biased_for_the_same_bounds() {
        // The property above is not trivially true of any reduction: `x % 3` over 16-bit
        // words gives 0 once more often than 2.
        let mut counts = [0u32; 3];
        for x in 0..=u16::MAX {
            counts[usize::from(x % 3)] += 1;
        }
        assert_ne!(counts[0], counts[2]);
    }

    #[test]
    fn draws_stay_below_the_bound_and_reach_both_ends() {
        let mut rng = Rng::from_seed([7; 32]);
        let (mut saw_zero, mut saw_top) = (false, false);
        for _ in 0..10_000 {
            let v = rng.below(10);
            assert!(v < 10);
            saw_zero |= v == 0;
            saw_top |= v == 9;
        }
        assert!(saw_zero && saw_top);
        assert_eq!(rng.below(1), 0);
    }

    #[test]
    fn the_same_seed_gives_the_same_stream_and_another_seed_another() {
        let mut a = Rng::from_seed([1; 32]);
        let mut b = Rng::from_seed([1; 32]);
        let mut c = Rng::from_seed([2; 32]);
        let (xa, xb, xc) = (a.next_u64(), b.next_u64(), c.next_u64());
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
    }
}
