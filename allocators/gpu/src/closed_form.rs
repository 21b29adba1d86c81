//! The closed forms of Pham et al. (ICS 2022, TOPC 2025) for the expected cost of N
//! concurrent page requests against T pages of which A are free before the kernel.
//!
//! * TAS (thread average steps): the mean number of probes per requester.
//! * WAS (warp average steps): the mean over warps of the largest probe count in the warp.
//!
//! | design | TAS | WAS |
//! |--------|-----|-----|
//! | queue  | (N+1)/2 | 32/33 · N |
//! | RW     | (T/N) · ln(A/(A−N)) | Σ_{k≥0} [1 − (1 − ((T−A+N)/T)^k)^32] |
//! | RW-BM  | (1/N) · Σ_{k=0}^{N−2} 1 / (1 − ((T−A+k)/T)^32) | — |
//!
//! The RW-BM form assumes in-use pages stay spread at random; RW-BM's own claims break that
//! (see [`rw_bm_tas_word_occupancy`], which follows the word occupancy instead).
//!
//! Everything is computed in `f64` through `ln_1p`/`exp_m1`, so that `1 − q^32` keeps its
//! digits when `q` is within 10^-4 of one (the 0.5 % end of the sweep).
//! Every function needs `N < A <= T`; the forms diverge as A − N reaches zero.

use crate::sim::WARP_LANES;

/// Queue TAS: requester i (1-based, in arrival order) waits for i dequeues, so the mean is
/// (N+1)/2.
pub fn queue_tas(requesters: usize) -> f64 {
    (requesters as f64 + 1.0) / 2.0
}

/// Queue WAS: a warp waits for its latest lane; the largest of 32 uniform positions in 1..N
/// is 32/33 · N on average.
pub fn queue_was(requesters: usize) -> f64 {
    WARP_LANES as f64 / (WARP_LANES as f64 + 1.0) * requesters as f64
}

/// RW TAS: the (k+1)-th page is found after T/(A−k) probes on average; summed over
/// k < N this is T · (H_A − H_{A−N}) ≈ T · ln(A/(A−N)), divided by N.
pub fn rw_tas(total_pages: usize, free_pages: usize, requesters: usize) -> f64 {
    check(total_pages, free_pages, requesters);
    let (t, a, n) = (total_pages as f64, free_pages as f64, requesters as f64);
    t / n * (a / (a - n)).ln()
}

/// RW WAS: the expected largest of 32 geometric probe counts whose failure probability is
/// the occupancy at the end of the kernel, q = (T−A+N)/T:
/// Σ_{k≥0} P(max > k) = Σ_{k≥0} [1 − (1 − q^k)^32]. The sum stops once a term is below
/// 10^-15 of the total (its tail is then smaller still, the terms falling geometrically).
pub fn rw_was(total_pages: usize, free_pages: usize, requesters: usize) -> f64 {
    check(total_pages, free_pages, requesters);
    let (t, a, n) = (total_pages as f64, free_pages as f64, requesters as f64);
    let ln_q = (-(a - n) / t).ln_1p();
    let mut sum = 0.0;
    let mut k = 0u64;
    loop {
        let q_k = if k == 0 { 1.0 } else { (k as f64 * ln_q).exp() };
        // 1 − (1 − q^k)^32 = −expm1(32 · ln(1 − q^k)).
        let term = if q_k >= 1.0 {
            1.0
        } else {
            -(WARP_LANES as f64 * (-q_k).ln_1p()).exp_m1()
        };
        sum += term;
        if term < 1e-15 * sum {
            return sum;
        }
        k += 1;
    }
}

/// RW-BM TAS: with T−A+k pages in use and in-use pages spread at random, a random 32-page
/// word is full with probability ((T−A+k)/T)^32, so the (k+1)-th page costs
/// 1/(1 − ((T−A+k)/T)^32) probes; the paper sums k = 0 ..= N−2 and divides by N.
pub fn rw_bm_tas(total_pages: usize, free_pages: usize, requesters: usize) -> f64 {
    check(total_pages, free_pages, requesters);
    let t = total_pages as f64;
    let n = requesters as f64;
    let sum: f64 = (0..requesters.saturating_sub(1))
        .map(|k| {
            let free_now = (free_pages - k) as f64;
            // 1 − (1 − free/T)^32 without cancellation.
            let p_word_has_free = -(WARP_LANES as f64 * (-free_now / t).ln_1p()).exp_m1();
            1.0 / p_word_has_free
        })
        .sum();
    sum / n
}

/// RW-BM TAS from the algorithm's own word dynamics, a second oracle beside
/// [`rw_bm_tas`].
///
/// The paper's form assumes the in-use pages stay spread at random, as if each claim took a
/// uniformly random free page. RW-BM instead takes a bit of a uniformly random *non-full*
/// word: a word with one free bit is emptied as often as a word with ten is touched, so
/// full words accumulate faster than the form assumes. This follows the expected number of
/// words with j free bits, n_j (binomial at the start), through N claims: a claim costs
/// W/(W − n_0) probes and moves a word from j to j − 1 with probability n_j/(W − n_0). At
/// T = 2^20, N = 5000 it lies 0.8 % above the paper's form at 10 % free and 5.2 % above at
/// 0.5 % free; the simulator follows it within 0.5 %.
pub fn rw_bm_tas_word_occupancy(total_pages: usize, free_pages: usize, requesters: usize) -> f64 {
    check(total_pages, free_pages, requesters);
    const BITS: usize = WARP_LANES;
    let words = (total_pages / BITS) as f64;
    let p = free_pages as f64 / total_pages as f64;
    // n[j] = expected words with j free bits: W · C(32, j) p^j (1 − p)^(32 − j).
    let mut n = [0.0f64; BITS + 1];
    if free_pages == total_pages {
        n[BITS] = words;
    }
    let mut choose = 1.0f64;
    for (j, n_j) in n
        .iter_mut()
        .enumerate()
        .take_while(|_| free_pages < total_pages)
    {
        if j > 0 {
            choose = choose * (BITS + 1 - j) as f64 / j as f64;
        }
        let ln = choose.ln() + j as f64 * p.ln() + (BITS - j) as f64 * (-p).ln_1p();
        *n_j = words * ln.exp();
    }
    let mut probes = 0.0;
    for _ in 0..requesters {
        let non_full = words - n[0];
        probes += words / non_full;
        let before = n;
        for j in 1..=BITS {
            let moved = before[j] / non_full;
            n[j] -= moved;
            n[j - 1] += moved;
        }
    }
    probes / requesters as f64
}

fn check(total_pages: usize, free_pages: usize, requesters: usize) {
    assert!(
        requesters < free_pages && free_pages <= total_pages,
        "closed forms need N < A <= T (N = {requesters}, A = {free_pages}, T = {total_pages})"
    );
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn queue_forms_match_the_notes() {
        assert_eq!(queue_tas(5000), 2500.5);
        assert!((queue_was(33) - 32.0).abs() < 1e-12);
    }

    #[test]
    fn rw_tas_is_the_harmonic_sum_within_its_approximation() {
        let (t, a, n) = (1usize << 20, 5243usize, 5000usize);
        let exact: f64 = (0..n).map(|k| t as f64 / (a - k) as f64).sum::<f64>() / n as f64;
        let form = rw_tas(t, a, n);
        assert!((form - exact).abs() / exact < 1e-3, "{form} vs {exact}");
    }

    #[test]
    fn rw_was_of_a_single_probe_world_is_one() {
        // With every page free at the end (q = 0), every lane succeeds at its first probe.
        assert!((rw_was(1 << 10, 1 << 10, 0) - 1.0).abs() < 1e-12);
        // And it grows as the pool fills: more probes, a larger warp maximum.
        let sparse = rw_was(1 << 20, 5243, 5000);
        let dense = rw_was(1 << 20, 104_858, 5000);
        assert!(sparse > dense && dense > rw_tas(1 << 20, 104_858, 5000));
    }

    #[test]
    fn rw_bm_tas_is_near_one_when_most_words_have_a_free_bit() {
        // At 50 % free a word is full with probability 2^-32.
        let v = rw_bm_tas(1 << 20, 1 << 19, 5000);
        assert!((v - (n_minus_one_over_n(5000))).abs() < 1e-6, "{v}");
        // And it costs fewer probes than RW, which needs a free page, not a free word.
        assert!(rw_bm_tas(1 << 20, 5243, 5000) < rw_tas(1 << 20, 5243, 5000));
    }

    fn n_minus_one_over_n(n: usize) -> f64 {
        (n - 1) as f64 / n as f64
    }
}
