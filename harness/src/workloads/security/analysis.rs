//! The arithmetic of the `security` suite, free of any allocator: entropy estimates, equal
//! pairs, order statistics of reuse distances, overflow hits over a set of live intervals,
//! and the verdict of a misuse child from its wait status.

use core::fmt;

/// Counts the unordered pairs of equal values in `values` (`Σ c·(c−1)/2` over the counts
/// `c` of each distinct value).
pub fn equal_pairs(values: &[i64]) -> u64 {
    counts(values).iter().map(|&c| c * (c - 1) / 2).sum()
}

/// How often each distinct value occurs, in ascending order of the value.
fn counts(values: &[i64]) -> Vec<u64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let mut counts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let run = sorted[i..].iter().take_while(|&&v| v == sorted[i]).count();
        counts.push(run as u64);
        i += run;
    }
    counts
}

/// Number of unordered pairs of `n` trials, `n·(n−1)/2`.
pub fn pairs(n: usize) -> u64 {
    let n = n as u64;
    n * n.saturating_sub(1) / 2
}

/// An entropy estimate from `n` trials, in bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entropy {
    /// Collision entropy `H2 = −log2 P(two trials agree)`, with `P` estimated by the share
    /// of equal pairs among all `n·(n−1)/2` pairs (an unbiased estimate of `P`). `H2` is a
    /// lower bound on Shannon entropy. Where no pair agrees it is [`Entropy::ceiling`] and
    /// [`Entropy::censored`] is set.
    pub collision: f64,
    /// Whether no two trials agreed, so that `collision` is only the ceiling of what `n`
    /// trials can tell: the entropy is at least about this much.
    pub censored: bool,
    /// Plug-in Shannon entropy of the empirical distribution; at most `log2 n`, and biased
    /// low when there are about as many outcomes as trials.
    pub shannon: f64,
    /// `log2(n·(n−1)/2)`: the largest collision entropy `n` trials can measure.
    pub ceiling: f64,
}

/// Collision and Shannon entropy of the outcomes `values` of independent trials; see
/// [`Entropy`]. Fewer than two trials measure nothing: every figure is 0.
pub fn entropy(values: &[i64]) -> Entropy {
    let n = values.len();
    let all_pairs = pairs(n);
    if all_pairs == 0 {
        return Entropy {
            collision: 0.0,
            censored: false,
            shannon: 0.0,
            ceiling: 0.0,
        };
    }
    let ceiling = (all_pairs as f64).log2();
    let equal = equal_pairs(values);
    let (collision, censored) = if equal == 0 {
        (ceiling, true)
    } else {
        // -log2(equal / all) without the rounding of a tiny quotient.
        ((all_pairs as f64).log2() - (equal as f64).log2(), false)
    };
    let total = n as f64;
    let shannon = counts(values)
        .iter()
        .map(|&c| {
            let p = c as f64 / total;
            -p * p.log2()
        })
        .sum::<f64>()
        .max(0.0);
    Entropy {
        // -0.0 for a constant sample reads badly.
        collision: collision.max(0.0),
        censored,
        shannon,
        ceiling,
    }
}

/// The `q`-quantile (0 ≤ q ≤ 1) of `values` by the nearest-rank method: the smallest value
/// that at least `⌈q·n⌉` of the values are at or below (the smallest value for `q = 0`).
/// `None` for no values.
pub fn quantile(values: &[u64], q: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.saturating_sub(1).min(sorted.len() - 1)])
}

/// Whether the `len_a` bytes at `a` and the `len_b` bytes at `b` share a byte.
pub fn overlaps(a: usize, len_a: usize, b: usize, len_b: usize) -> bool {
    len_a > 0 && len_b > 0 && a < b.saturating_add(len_b) && b < a.saturating_add(len_a)
}

/// Live blocks as `(address, requested bytes)`, sorted by address, for overflow questions.
#[derive(Clone, Debug)]
pub struct LiveSet {
    blocks: Vec<(usize, usize)>,
}

impl LiveSet {
    /// The live set of `blocks` (any order). Live blocks of a correct allocator never
    /// share a byte; `None` if two of these do (the answer would be meaningless).
    pub fn new(mut blocks: Vec<(usize, usize)>) -> Option<Self> {
        blocks.sort_unstable();
        let disjoint = blocks
            .windows(2)
            .all(|w| w[0].0.saturating_add(w[0].1) <= w[1].0);
        disjoint.then_some(Self { blocks })
    }

    /// The gap from the end of the requested bytes of the live block at `address` to the
    /// start of the next live block above it: a linear overflow of `k` bytes past the end
    /// lands in another live block's requested bytes exactly when `k > gap`. `None` if no
    /// live block starts at `address`, or none lies above it.
    pub fn gap_after(&self, address: usize) -> Option<usize> {
        let i = self.blocks.binary_search_by_key(&address, |b| b.0).ok()?;
        let (start, len) = self.blocks[i];
        let next = self.blocks.get(i + 1)?;
        Some(next.0 - (start + len))
    }

    /// The share of `probes` (addresses of live blocks) where an overflow of `k` bytes
    /// past the requested end reaches another live block's requested bytes. Probes that
    /// are not live blocks count as misses; 0 for no probes.
    pub fn overflow_hit_rate(&self, probes: &[usize], k: usize) -> f64 {
        if probes.is_empty() {
            return 0.0;
        }
        let hits = probes
            .iter()
            .filter(|&&p| self.gap_after(p).is_some_and(|gap| k > gap))
            .count();
        hits as f64 / probes.len() as f64
    }
}

/// What became of a child that was made to misuse the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It died of `SIGABRT`: the allocator (or a check inside it) detected the misuse and
    /// stopped the process. The `misuse` workload also counts a memory fault at a bad
    /// access itself as caught (the allocator made that memory inaccessible).
    Caught,
    /// It died of another signal (`SIGSEGV`, `SIGBUS` ...) elsewhere: not detected, but not
    /// silent.
    Crashed,
    /// It ran on and exited normally: the misuse went unnoticed.
    Silent,
    /// It did not finish within the time allowed and was killed (a corrupted structure
    /// looping, a lock never released).
    Hung,
}

impl Verdict {
    /// From the `status` that `waitpid` reported for a child that was not killed for
    /// running too long (`timed_out` false), or [`Verdict::Hung`].
    pub fn from_wait_status(status: i32, timed_out: bool) -> Self {
        if timed_out {
            Self::Hung
        } else if libc::WIFSIGNALED(status) {
            if libc::WTERMSIG(status) == libc::SIGABRT {
                Self::Caught
            } else {
                Self::Crashed
            }
        } else if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Self::Silent
        } else {
            // The children of the suite only exit with 0 or die (a panic aborts); another
            // exit status means something stopped it deliberately: not silent.
            Self::Caught
        }
    }

    /// The value of the verdict as a sample: 1 caught, 0.5 crashed, 0.25 hung, 0 silent
    /// (higher is better: a misuse stopped on the spot is best, one that goes unnoticed
    /// worst).
    pub fn score(self) -> f64 {
        match self {
            Self::Caught => 1.0,
            Self::Crashed => 0.5,
            Self::Hung => 0.25,
            Self::Silent => 0.0,
        }
    }

    /// The verdict whose [`score`](Self::score) is `value`, if any.
    pub fn from_score(value: f64) -> Option<Self> {
        [Self::Caught, Self::Crashed, Self::Hung, Self::Silent]
            .into_iter()
            .find(|v| v.score() == value)
    }

    /// The word for the verdict.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Caught => "caught",
            Self::Crashed => "crashed",
            Self::Silent => "silent",
            Self::Hung => "hung",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_constant_sample_has_no_entropy() {
        let e = entropy(&[7; 100]);
        assert_eq!(e.collision, 0.0);
        assert_eq!(e.shannon, 0.0);
        assert!(!e.censored);
        assert!(close(e.ceiling, (4950f64).log2()));
    }

    #[test]
    fn a_uniform_sample_over_k_values_has_log2_k_bits() {
        // 64 values, each 16 times: P(two trials agree) = 64·C(16,2) / C(1024,2).
        let values: Vec<i64> = (0..1024).map(|i| (i % 64) * 16).collect();
        let e = entropy(&values);
        assert!(close(e.shannon, 6.0), "{e:?}");
        let p = (64.0 * 120.0) / (1024.0 * 1023.0 / 2.0);
        assert!(close(e.collision, -f64::log2(p)), "{e:?}");
        // Exactly equal counts agree a shade less often than independent draws would:
        // a shade over log2 64 = 6.
        assert!(e.collision > 6.0 && e.collision < 6.1, "{e:?}");
    }

    #[test]
    fn two_equally_likely_outcomes_give_about_one_bit() {
        let values: Vec<i64> = (0..1000).map(|i| i % 2).collect();
        let e = entropy(&values);
        assert!(close(e.shannon, 1.0));
        assert!((e.collision - 1.0).abs() < 0.01, "{e:?}");
    }

    #[test]
    fn all_distinct_outcomes_are_censored_at_the_pair_count() {
        let values: Vec<i64> = (0..32).map(|i| i * 4096).collect();
        let e = entropy(&values);
        assert!(e.censored);
        assert!(close(e.collision, (496f64).log2()));
        assert!(close(e.collision, e.ceiling));
        assert!(close(e.shannon, 5.0), "capped at log2 n: {e:?}");
    }

    #[test]
    fn collision_entropy_never_exceeds_shannon_much_and_is_a_lower_bound_on_skew() {
        // One value half the time, the rest spread thin: H2 far below Shannon.
        let mut values = vec![0i64; 500];
        values.extend(1..=500);
        let e = entropy(&values);
        assert!(e.collision < 2.1, "{e:?}");
        assert!(e.shannon > 5.0, "{e:?}");
    }

    #[test]
    fn fewer_than_two_trials_measure_nothing() {
        for values in [&[][..], &[5][..]] {
            let e = entropy(values);
            assert_eq!((e.collision, e.shannon, e.ceiling), (0.0, 0.0, 0.0));
        }
    }

    #[test]
    fn equal_pairs_counts_each_group() {
        assert_eq!(equal_pairs(&[1, 2, 1, 3, 1, 2]), 3 + 1);
        assert_eq!(equal_pairs(&[1, 2, 3]), 0);
        assert_eq!(pairs(4), 6);
        assert_eq!(pairs(0), 0);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v = [5, 1, 4, 2, 3];
        assert_eq!(quantile(&v, 0.5), Some(3));
        assert_eq!(quantile(&v, 0.9), Some(5));
        assert_eq!(quantile(&v, 0.0), Some(1));
        assert_eq!(quantile(&v, 1.0), Some(5));
        assert_eq!(quantile(&[10, 20, 30, 40], 0.5), Some(20));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn overlap_of_byte_ranges() {
        assert!(overlaps(100, 16, 108, 16));
        assert!(overlaps(108, 16, 100, 16));
        assert!(overlaps(100, 64, 110, 4));
        assert!(!overlaps(100, 16, 116, 16), "adjacent ranges share no byte");
        assert!(!overlaps(116, 16, 100, 16));
        assert!(!overlaps(100, 0, 100, 16));
    }

    #[test]
    fn overflow_reaches_the_next_block_when_it_is_longer_than_the_gap() {
        // Blocks: [0,16) [16,32) — adjacent; [40,56) — 8 bytes after; [120,136) last.
        let live = LiveSet::new(vec![(40, 16), (0, 16), (120, 16), (16, 16)]).unwrap();
        assert_eq!(live.gap_after(0), Some(0));
        assert_eq!(live.gap_after(16), Some(8));
        assert_eq!(live.gap_after(40), Some(64));
        assert_eq!(live.gap_after(120), None, "nothing above the last block");
        assert_eq!(live.gap_after(8), None, "not a live block");
        let probes = [0, 16, 40, 120];
        assert_eq!(live.overflow_hit_rate(&probes, 1), 0.25);
        assert_eq!(live.overflow_hit_rate(&probes, 8), 0.25);
        assert_eq!(live.overflow_hit_rate(&probes, 9), 0.5);
        assert_eq!(live.overflow_hit_rate(&probes, 64), 0.5);
        assert_eq!(live.overflow_hit_rate(&probes, 65), 0.75);
        assert_eq!(live.overflow_hit_rate(&[], 65), 0.0);
    }

    #[test]
    fn overlapping_live_blocks_are_refused() {
        assert!(LiveSet::new(vec![(0, 17), (16, 16)]).is_none());
        assert!(LiveSet::new(vec![(0, 16), (16, 16)]).is_some());
    }

    #[test]
    fn verdicts_from_wait_statuses() {
        // Linux encodings: a signal in the low 7 bits; an exit code in bits 8..16.
        let signalled = |sig: i32| sig;
        let exited = |code: i32| code << 8;
        assert_eq!(
            Verdict::from_wait_status(signalled(libc::SIGABRT), false),
            Verdict::Caught
        );
        assert_eq!(
            Verdict::from_wait_status(signalled(libc::SIGSEGV), false),
            Verdict::Crashed
        );
        assert_eq!(
            Verdict::from_wait_status(signalled(libc::SIGBUS), false),
            Verdict::Crashed
        );
        assert_eq!(Verdict::from_wait_status(exited(0), false), Verdict::Silent);
        assert_eq!(Verdict::from_wait_status(exited(3), false), Verdict::Caught);
        assert_eq!(
            Verdict::from_wait_status(signalled(libc::SIGKILL), true),
            Verdict::Hung
        );
        for v in [
            Verdict::Caught,
            Verdict::Crashed,
            Verdict::Hung,
            Verdict::Silent,
        ] {
            assert_eq!(Verdict::from_score(v.score()), Some(v));
        }
        assert_eq!(Verdict::from_score(0.7), None);
    }
}
