//! SplitMix64, the one small seeded generator of the workspace: simulations, traces, crash
//! tests and probe sequences draw from it so that each is reproducible from one `u64` and
//! does not depend on a random-number crate's version. Not for anything that must be
//! unpredictable (the randomized allocator seeds itself from the OS).

/// Steele, Lea and Flood's SplitMix64 (the seeding generator of `xoshiro`). Passes BigCrush;
/// one add and three multiply-xorshift steps per output.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose whole future is fixed by `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state)
    }

    /// A value in `0..bound` (`bound > 0`), by Lemire's multiply-shift. The bias is below
    /// `bound / 2^64`, under 2^-40 for bounds below 2^24.
    #[inline]
    pub fn below(&mut self, bound: usize) -> usize {
        debug_assert!(bound > 0);
        ((u128::from(self.next_u64()) * bound as u128) >> 64) as usize
    }

    /// A value in `lo..=hi` (`lo <= hi`, and not the whole `u64` range), by the same
    /// multiply-shift as [`below`](Self::below).
    #[inline]
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi && hi - lo < u64::MAX);
        let span = hi - lo + 1;
        lo + ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`: the top 53 bits.
    #[inline]
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    #[inline]
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f64()
    }

    /// Shuffles `items` uniformly (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// SplitMix64's finaliser: a bijection on `u64` that spreads every input bit.
#[inline]
pub const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_splitmix64s() {
        // The reference outputs of SplitMix64 seeded with 1234567 (Vigna's splitmix64.c):
        // every seeded trace and simulation in the workspace depends on this stream.
        let mut rng = SplitMix64::new(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
    }

    #[test]
    fn draws_stay_in_their_ranges_and_shuffles_permute() {
        let mut rng = SplitMix64::new(42);
        for _ in 0..10_000 {
            assert!(rng.below(7) < 7);
            assert!((10..=12).contains(&rng.range_inclusive(10, 12)));
            let x = rng.uniform(-1.0, 1.0);
            assert!((-1.0..1.0).contains(&x));
        }
        let mut items: Vec<u32> = (0..100).collect();
        rng.shuffle(&mut items);
        assert_ne!(items, (0..100).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..100).collect::<Vec<_>>());
    }
}
