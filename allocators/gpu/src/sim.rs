//! The round-synchronous simulator: N requesters in warps of 32 against T pages, A of them
//! free before the kernel, measuring TAS and WAS exactly as the paper defines them.
//!
//! **State.** One bit per page in 32-bit words, 1 = in use (as in the real pool). Which A
//! pages are free is a seeded uniform subset (Floyd's sampling, O(A)).
//!
//! **Rounds.** In each round every still-unsatisfied requester makes one probe. A probe's
//! target is decided from the state at the start of the round (what a lane read); the
//! round's probes are then resolved in a seeded random order, as the atomics would
//! serialise them: a probe whose target page is still free claims it, any other fails and
//! the requester probes again next round. So two lanes aiming at the same free page in one
//! round: one wins, the other spends a probe.
//!
//! **What a probe is, per design.**
//! * [`Design::Queue`]: one attempt on the queue head (the CAS every waiting requester
//!   retries). Exactly one attempt succeeds per round, the first in the round's order, so a
//!   requester served in round r made r probes: its position in the arrival order, which is
//!   a uniform permutation. This is the model behind TAS = (N+1)/2 and WAS = 32/33 · N.
//! * [`Design::Rw`]: one uniformly random page; claimed if free.
//! * [`Design::RwBm`]: one uniformly random 32-page word; the requester takes the word's
//!   first free bit at its turn in the round, and fails if the word is full by then. Two
//!   lanes in a word with two free bits both succeed, as in [`PagePool`](crate::PagePool),
//!   whose `fetch_or` loop stays in the word while it has a free bit. (Counting a lost race
//!   inside a word as a failed probe instead, i.e. aiming at the first free bit as read at
//!   the start of the round, adds about 0.07 probes at 10 % free, where TAS is about 1.04:
//!   +7 %, from the ~N²/(2·T/32) pairs of lanes that meet in a word in the first round.)
//! * [`Design::Crw`]: first the page after the requester's last one, then as RW. Each
//!   requester's last page is a seeded random page; with free pages spread at random this
//!   costs what RW does. CRW pays off when free pages are clustered, which this sweep
//!   does not model.
//! * [`Design::CoRw`]: a warp step: the warp's lanes read 32 consecutive words (1024 pages)
//!   from a random start and hand the free bits found to the lanes still in need; each
//!   unsatisfied lane counts one probe per step. Warps are resolved in random order, each
//!   taking only the bits it hands out (the real kernel takes all and releases the surplus
//!   at once; here the release is immediate).
//!
//! TAS = mean probes per requester; WAS = mean over warps of the largest probe count in the
//! warp (the last warp may have fewer than 32 lanes).

use crate::closed_form;
use crate::rng::SplitMix64;

/// Lanes in a warp.
pub const WARP_LANES: usize = 32;
/// Pages per bitmap word.
pub const WORD_PAGES: usize = 32;

/// The designs the simulator knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Design {
    /// A queue of free pages (the baseline).
    Queue,
    /// Random walk: one word per page, probe a random page.
    Rw,
    /// Random walk on a bitmap: probe a random 32-page word, take its first free bit.
    RwBm,
    /// Clustered random walk: the page after the last one first, then random.
    Crw,
    /// Collaborative random walk: a warp reads 32 consecutive words per step and shares.
    CoRw,
}

impl Design {
    /// Every design, baseline first.
    pub const ALL: [Design; 5] = [
        Design::Queue,
        Design::Rw,
        Design::RwBm,
        Design::Crw,
        Design::CoRw,
    ];

    /// The paper's name.
    pub fn name(self) -> &'static str {
        match self {
            Design::Queue => "queue",
            Design::Rw => "RW",
            Design::RwBm => "RW-BM",
            Design::Crw => "CRW",
            Design::CoRw => "CoRW",
        }
    }

    /// The closed-form TAS, where the notes give one.
    pub fn closed_form_tas(
        self,
        total_pages: usize,
        free_pages: usize,
        requesters: usize,
    ) -> Option<f64> {
        match self {
            Design::Queue => Some(closed_form::queue_tas(requesters)),
            Design::Rw => Some(closed_form::rw_tas(total_pages, free_pages, requesters)),
            Design::RwBm => Some(closed_form::rw_bm_tas(total_pages, free_pages, requesters)),
            Design::Crw | Design::CoRw => None,
        }
    }

    /// The closed-form WAS, where the notes give one.
    pub fn closed_form_was(
        self,
        total_pages: usize,
        free_pages: usize,
        requesters: usize,
    ) -> Option<f64> {
        match self {
            Design::Queue => Some(closed_form::queue_was(requesters)),
            Design::Rw => Some(closed_form::rw_was(total_pages, free_pages, requesters)),
            Design::RwBm | Design::Crw | Design::CoRw => None,
        }
    }
}

/// One kernel to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// T: pages in the pool (a multiple of 32).
    pub total_pages: usize,
    /// A: pages free before the kernel.
    pub free_pages: usize,
    /// N: concurrent requesters, one page each.
    pub requesters: usize,
    /// Fixes the free subset, the probes and the resolution order.
    pub seed: u64,
}

/// Why a configuration cannot be simulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimError {
    /// T is zero or not a multiple of the 32 pages of a word.
    PagesNotWholeWords {
        /// The T asked for.
        total_pages: usize,
    },
    /// A > T, or A < N: some requester would probe forever.
    NotEnoughFreePages {
        /// A.
        free_pages: usize,
        /// N.
        requesters: usize,
        /// T.
        total_pages: usize,
    },
}

impl core::fmt::Display for SimError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SimError::PagesNotWholeWords { total_pages } => write!(
                f,
                "{total_pages} pages is not a positive multiple of {WORD_PAGES}; round T up"
            ),
            SimError::NotEnoughFreePages {
                free_pages,
                requesters,
                total_pages,
            } => write!(
                f,
                "need N <= A <= T, got N = {requesters}, A = {free_pages}, T = {total_pages}"
            ),
        }
    }
}

impl std::error::Error for SimError {}

/// What one simulated kernel measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimResult {
    /// Mean probes per requester.
    pub tas: f64,
    /// Mean over warps of the largest probe count in the warp.
    pub was: f64,
    /// Rounds until every requester held a page.
    pub rounds: u64,
    /// Pages whose bit went from free to in use (N, unless the simulator is wrong).
    pub pages_claimed: usize,
}

/// Simulates one kernel of `design`.
///
/// # Errors
///
/// [`SimError`] when T is not whole words or N ≤ A ≤ T does not hold.
pub fn simulate(design: Design, config: &SimConfig) -> Result<SimResult, SimError> {
    let SimConfig {
        total_pages,
        free_pages,
        requesters,
        seed,
    } = *config;
    if total_pages == 0 || total_pages % WORD_PAGES != 0 {
        return Err(SimError::PagesNotWholeWords { total_pages });
    }
    if free_pages > total_pages || requesters > free_pages {
        return Err(SimError::NotEnoughFreePages {
            free_pages,
            requesters,
            total_pages,
        });
    }
    let mut rng = SplitMix64::new(seed);
    let mut pages = Bitmap::with_random_free_subset(total_pages, free_pages, &mut rng);
    let in_use_before = pages.in_use();
    let mut probes = vec![0u32; requesters];
    let rounds = match design {
        Design::Queue => run_queue(&mut probes, &mut rng),
        Design::Rw => run_page_probes(&mut pages, &mut probes, &mut rng, None),
        Design::Crw => {
            let last: Vec<usize> = (0..requesters).map(|_| rng.below(total_pages)).collect();
            run_page_probes(&mut pages, &mut probes, &mut rng, Some(&last))
        }
        Design::RwBm => run_rw_bm(&mut pages, &mut probes, &mut rng),
        Design::CoRw => run_corw(&mut pages, &mut probes, &mut rng),
    };
    let pages_claimed = if design == Design::Queue {
        // The queue hands out pages from its own list; the bitmap is not its state.
        requesters
    } else {
        pages.in_use() - in_use_before
    };
    Ok(SimResult {
        tas: mean_probes(&probes),
        was: mean_warp_max(&probes),
        rounds,
        pages_claimed,
    })
}

/// The pool state before a kernel, as the simulator draws it: one bit per page in 32-bit
/// words, 1 = in use, every page in use except a seeded uniform subset of `free_pages`.
/// The device runs start from the same states as the CPU model.
///
/// # Errors
///
/// [`SimError`] when T is not whole words or A > T.
pub fn random_occupancy(
    total_pages: usize,
    free_pages: usize,
    seed: u64,
) -> Result<Vec<u32>, SimError> {
    if total_pages == 0 || !total_pages.is_multiple_of(WORD_PAGES) {
        return Err(SimError::PagesNotWholeWords { total_pages });
    }
    if free_pages > total_pages {
        return Err(SimError::NotEnoughFreePages {
            free_pages,
            requesters: 0,
            total_pages,
        });
    }
    let mut rng = SplitMix64::new(seed);
    Ok(Bitmap::with_random_free_subset(total_pages, free_pages, &mut rng).words)
}

fn mean_probes(probes: &[u32]) -> f64 {
    if probes.is_empty() {
        return 0.0;
    }
    probes.iter().map(|&p| f64::from(p)).sum::<f64>() / probes.len() as f64
}

fn mean_warp_max(probes: &[u32]) -> f64 {
    let warps = probes.chunks(WARP_LANES);
    let count = warps.len();
    if count == 0 {
        return 0.0;
    }
    warps
        .map(|w| f64::from(w.iter().copied().max().unwrap_or(0)))
        .sum::<f64>()
        / count as f64
}

/// One bit per page, 1 = in use.
struct Bitmap {
    words: Vec<u32>,
}

impl Bitmap {
    /// Every page in use except a uniform random subset of `free_pages` (Floyd's algorithm:
    /// for j in T−A..T take a random t ≤ j, or j itself if t is already taken).
    fn with_random_free_subset(
        total_pages: usize,
        free_pages: usize,
        rng: &mut SplitMix64,
    ) -> Self {
        let mut map = Bitmap {
            words: vec![u32::MAX; total_pages / WORD_PAGES],
        };
        for j in total_pages - free_pages..total_pages {
            let t = rng.below(j + 1);
            let page = if map.is_free(t) { j } else { t };
            map.words[page / WORD_PAGES] &= !(1 << (page % WORD_PAGES));
        }
        map
    }

    #[inline]
    fn is_free(&self, page: usize) -> bool {
        self.words[page / WORD_PAGES] & (1 << (page % WORD_PAGES)) == 0
    }

    /// Claims `page` if it is free.
    #[inline]
    fn try_claim(&mut self, page: usize) -> bool {
        let word = &mut self.words[page / WORD_PAGES];
        let bit = 1 << (page % WORD_PAGES);
        let was_free = *word & bit == 0;
        *word |= bit;
        was_free
    }

    fn in_use(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// The queue: one successful dequeue per round, the first of the round's random order,
/// which is a uniformly random waiting requester; the others' attempts fail. A requester
/// served in round r made r probes. O(N): nobody's count is touched until it is served.
fn run_queue(probes: &mut [u32], rng: &mut SplitMix64) -> u64 {
    let mut waiting: Vec<u32> = (0..probes.len() as u32).collect();
    let mut round = 0u32;
    while !waiting.is_empty() {
        round += 1;
        let served = waiting.swap_remove(rng.below(waiting.len()));
        probes[served as usize] = round;
    }
    u64::from(round)
}

/// RW (and CRW when `last_pages` is given): each waiting requester probes one page.
fn run_page_probes(
    pages: &mut Bitmap,
    probes: &mut [u32],
    rng: &mut SplitMix64,
    last_pages: Option<&[usize]>,
) -> u64 {
    let total_pages = pages.words.len() * WORD_PAGES;
    let mut waiting: Vec<u32> = (0..probes.len() as u32).collect();
    let mut rounds = 0;
    while !waiting.is_empty() {
        rounds += 1;
        rng.shuffle(&mut waiting);
        // The target is fixed before the round (a random page, or the page after the last
        // one), so drawing it at resolution time is the same as drawing it at the start.
        waiting.retain(|&r| {
            let r = r as usize;
            let target = match last_pages {
                Some(last) if probes[r] == 0 => (last[r] + 1) % total_pages,
                _ => rng.below(total_pages),
            };
            probes[r] += 1;
            !pages.try_claim(target)
        });
    }
    rounds
}

/// RW-BM: each waiting requester probes a random word and takes its first free bit at
/// its turn in the round's order (the pool's `fetch_or` loop stays in the word while it has
/// a free bit, so a lost race inside a word is not a new probe); a full word fails.
fn run_rw_bm(pages: &mut Bitmap, probes: &mut [u32], rng: &mut SplitMix64) -> u64 {
    let words = pages.words.len();
    let mut waiting: Vec<u32> = (0..probes.len() as u32).collect();
    let mut rounds = 0;
    while !waiting.is_empty() {
        rounds += 1;
        rng.shuffle(&mut waiting);
        waiting.retain(|&r| {
            probes[r as usize] += 1;
            let word = &mut pages.words[rng.below(words)];
            if *word == u32::MAX {
                return true;
            }
            *word |= 1 << word.trailing_ones();
            false
        });
    }
    rounds
}

/// CoRW: per step, a warp reads 32 consecutive words from a random start and hands their
/// free bits, lowest first, to its lanes still in need.
fn run_corw(pages: &mut Bitmap, probes: &mut [u32], rng: &mut SplitMix64) -> u64 {
    let words = pages.words.len();
    let warp_count = probes.len().div_ceil(WARP_LANES);
    // Lanes still in need, per warp: the warp's lanes from `next_lane[w]` on.
    let mut next_lane: Vec<usize> = (0..warp_count).map(|w| w * WARP_LANES).collect();
    let mut waiting_warps: Vec<u32> = (0..warp_count as u32).collect();
    let mut rounds = 0;
    while !waiting_warps.is_empty() {
        rounds += 1;
        rng.shuffle(&mut waiting_warps);
        waiting_warps.retain(|&w| {
            let w = w as usize;
            let end = ((w + 1) * WARP_LANES).min(probes.len());
            for p in &mut probes[next_lane[w]..end] {
                *p += 1;
            }
            let start = rng.below(words);
            for j in 0..WARP_LANES.min(words) {
                if next_lane[w] == end {
                    break;
                }
                let word = &mut pages.words[(start + j) % words];
                while *word != u32::MAX && next_lane[w] < end {
                    *word |= 1 << word.trailing_ones();
                    next_lane[w] += 1;
                }
            }
            next_lane[w] < end
        });
    }
    rounds
}

/// Mean and (sample) standard deviation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeanSd {
    /// The mean.
    pub mean: f64,
    /// The sample standard deviation (0 for one sample).
    pub sd: f64,
}

impl MeanSd {
    fn of(values: &[f64]) -> Self {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let sd = if values.len() > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        MeanSd { mean, sd }
    }
}

/// TAS of the process the paper's RW-BM closed form describes, for comparison with
/// [`Design::RwBm`]: requesters one after another, each probing uniformly random words until
/// one is not full, and then taking a uniformly random free page *of the whole pool* (not of
/// the word it found). That keeps the free pages a uniform random subset after every claim,
/// which is the form's assumption (a word is full with probability ((T−A+k)/T)^32); RW-BM
/// itself takes a bit of the word it found, so words with few free bits fill up faster than
/// that. Seeded like [`simulate`].
///
/// # Errors
///
/// As [`simulate`].
pub fn rw_bm_uniform_claims_tas(config: &SimConfig) -> Result<f64, SimError> {
    let SimConfig {
        total_pages,
        free_pages,
        requesters,
        seed,
    } = *config;
    if total_pages == 0 || !total_pages.is_multiple_of(WORD_PAGES) {
        return Err(SimError::PagesNotWholeWords { total_pages });
    }
    if free_pages > total_pages || requesters > free_pages {
        return Err(SimError::NotEnoughFreePages {
            free_pages,
            requesters,
            total_pages,
        });
    }
    let mut rng = SplitMix64::new(seed);
    let mut pages = Bitmap::with_random_free_subset(total_pages, free_pages, &mut rng);
    let mut free: Vec<usize> = (0..total_pages).filter(|&p| pages.is_free(p)).collect();
    let words = pages.words.len();
    let mut probes = 0u64;
    for _ in 0..requesters {
        loop {
            probes += 1;
            if pages.words[rng.below(words)] != u32::MAX {
                break;
            }
        }
        let page = free.swap_remove(rng.below(free.len()));
        pages.try_claim(page);
    }
    Ok(probes as f64 / requesters.max(1) as f64)
}

/// A sweep over free fractions.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepConfig {
    /// T.
    pub total_pages: usize,
    /// N.
    pub requesters: usize,
    /// A/T at each point; A = round(fraction · T).
    pub free_fractions: Vec<f64>,
    /// One simulated kernel per seed per point.
    pub seeds: Vec<u64>,
    /// The designs to run.
    pub designs: Vec<Design>,
}

impl SweepConfig {
    /// The paper's main experiment: T = 2^20 pages, N = 5000, A/T = 10, 5, 2, 1, 0.5 %, all
    /// designs, with `seeds`.
    pub fn paper(seeds: Vec<u64>) -> Self {
        SweepConfig {
            total_pages: 1 << 20,
            requesters: 5000,
            free_fractions: vec![0.10, 0.05, 0.02, 0.01, 0.005],
            seeds,
            designs: Design::ALL.to_vec(),
        }
    }
}

/// One (design, free fraction) point of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPoint {
    /// The design.
    pub design: Design,
    /// A/T as asked.
    pub free_fraction: f64,
    /// A.
    pub free_pages: usize,
    /// TAS over the seeds.
    pub tas: MeanSd,
    /// WAS over the seeds.
    pub was: MeanSd,
    /// The closed-form TAS, where there is one.
    pub tas_closed_form: Option<f64>,
    /// For RW-BM, [`closed_form::rw_bm_tas_word_occupancy`]: the TAS the algorithm's own
    /// word dynamics predict.
    pub tas_word_occupancy: Option<f64>,
    /// The closed-form WAS, where there is one.
    pub was_closed_form: Option<f64>,
}

impl SweepPoint {
    /// |measured − closed form| / closed form, for TAS.
    pub fn tas_relative_error(&self) -> Option<f64> {
        self.tas_closed_form.map(|c| (self.tas.mean - c).abs() / c)
    }
}

/// Runs every design at every point with every seed.
///
/// # Errors
///
/// The first [`SimError`] (a point with A < N, or T not whole words).
pub fn sweep(config: &SweepConfig) -> Result<Vec<SweepPoint>, SimError> {
    let mut points = Vec::new();
    for &design in &config.designs {
        for &fraction in &config.free_fractions {
            let free_pages = (fraction * config.total_pages as f64).round() as usize;
            let mut tas = Vec::new();
            let mut was = Vec::new();
            for &seed in &config.seeds {
                let r = simulate(
                    design,
                    &SimConfig {
                        total_pages: config.total_pages,
                        free_pages,
                        requesters: config.requesters,
                        seed,
                    },
                )?;
                tas.push(r.tas);
                was.push(r.was);
            }
            points.push(SweepPoint {
                design,
                free_fraction: fraction,
                free_pages,
                tas: MeanSd::of(&tas),
                was: MeanSd::of(&was),
                tas_closed_form: design.closed_form_tas(
                    config.total_pages,
                    free_pages,
                    config.requesters,
                ),
                tas_word_occupancy: (design == Design::RwBm).then(|| {
                    closed_form::rw_bm_tas_word_occupancy(
                        config.total_pages,
                        free_pages,
                        config.requesters,
                    )
                }),
                was_closed_form: design.closed_form_was(
                    config.total_pages,
                    free_pages,
                    config.requesters,
                ),
            });
        }
    }
    Ok(points)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn small(seed: u64) -> SimConfig {
        SimConfig {
            total_pages: 1 << 14,
            free_pages: 800,
            requesters: 700,
            seed,
        }
    }

    #[test]
    fn every_design_gives_each_requester_one_page_that_was_free() {
        for design in Design::ALL {
            let r = simulate(design, &small(3)).unwrap();
            assert_eq!(r.pages_claimed, 700, "{design:?}");
            assert!(r.tas >= 1.0 && r.was >= r.tas, "{design:?}: {r:?}");
        }
    }

    #[test]
    fn the_free_subset_has_exactly_a_pages() {
        let mut rng = SplitMix64::new(9);
        let map = Bitmap::with_random_free_subset(1 << 12, 1000, &mut rng);
        assert_eq!(map.in_use(), (1 << 12) - 1000);
    }

    #[test]
    fn a_seed_fixes_the_result_and_another_seed_changes_it() {
        let a = simulate(Design::Rw, &small(1)).unwrap();
        assert_eq!(a, simulate(Design::Rw, &small(1)).unwrap());
        assert_ne!(a, simulate(Design::Rw, &small(2)).unwrap());
    }

    #[test]
    fn impossible_kernels_are_errors() {
        let mut c = small(1);
        c.requesters = 801;
        assert!(matches!(
            simulate(Design::Rw, &c),
            Err(SimError::NotEnoughFreePages { .. })
        ));
        c.total_pages = 1000;
        assert_eq!(
            simulate(Design::Rw, &c),
            Err(SimError::PagesNotWholeWords { total_pages: 1000 })
        );
    }

    /// alloclab's target: TAS of queue, RW and RW-BM within 5 % of the closed forms at every
    /// point of the paper's sweep (T = 2^20, N = 5000, A/T = 10, 5, 2, 1, 0.5 %), mean of
    /// seeds 1..=4.
    ///
    /// **Why 5 %.** Over 16 seeds (`cargo run --release -p alloclab-gpu --example free_fraction_sweep`)
    /// the relative standard deviation of one kernel's TAS is at most 1.6 % for RW (where
    /// the last ~A−N claims each need a geometric number of ~T/(A−N) probes) and 1.7 % for
    /// RW-BM; the queue's TAS is exactly (N+1)/2. The mean of 4 seeds has a relative
    /// standard error under 0.85 %, so 5 % is about six standard errors: a simulator that
    /// agrees with a form does not fail by chance, and one off by a few percent does.
    ///
    /// **The exception.** RW-BM at 0.5 % free measures 5.7 % above the paper's form. That
    /// form assumes in-use pages stay spread at random; RW-BM's claims (first free bit of a
    /// uniformly random non-full word) empty one-free-bit words faster than that.
    /// [`closed_form::rw_bm_tas_word_occupancy`], which follows the word occupancy, is itself
    /// 5.2 % above the paper's form there, and the simulator is within 2 % of it at every
    /// point. So this test pins the gap at 0.5 % (between 4 and 8 %) instead of hiding it.
    #[test]
    fn tas_of_queue_rw_and_rw_bm_is_within_5_percent_of_the_closed_forms() {
        let mut config = SweepConfig::paper(vec![1, 2, 3, 4]);
        config.designs = vec![Design::Queue, Design::Rw, Design::RwBm];
        for p in sweep(&config).unwrap() {
            let err = p.tas_relative_error().unwrap();
            let at = format!(
                "{} at {} %: {p:?}",
                p.design.name(),
                p.free_fraction * 100.0
            );
            if p.design == Design::RwBm {
                let model = p.tas_word_occupancy.unwrap();
                assert!((p.tas.mean - model).abs() / model < 0.02, "{at}");
                if p.free_fraction < 0.01 {
                    assert!((0.04..0.08).contains(&err), "{at}");
                    continue;
                }
            }
            assert!(err < 0.05, "{at}");
        }
    }

    /// Why RW-BM leaves the paper's form near full: the form is exact for the process it
    /// describes (free pages kept uniformly random, [`rw_bm_uniform_claims_tas`]): that
    /// process is within 1.5 % of it at every point, 0.5 % free included, while RW-BM (a bit of
    /// the word it found) is 4 % or more above it at 0.5 % free. Same seeds, same pools.
    #[test]
    fn the_rw_bm_form_is_exact_for_uniform_claims_and_rw_bm_departs_from_it_near_full() {
        let config = SweepConfig::paper(vec![1, 2, 3, 4]);
        for &fraction in &config.free_fractions {
            let free_pages = (fraction * config.total_pages as f64).round() as usize;
            let form = closed_form::rw_bm_tas(config.total_pages, free_pages, config.requesters);
            let mean = |f: &dyn Fn(&SimConfig) -> f64| {
                config
                    .seeds
                    .iter()
                    .map(|&seed| {
                        f(&SimConfig {
                            total_pages: config.total_pages,
                            free_pages,
                            requesters: config.requesters,
                            seed,
                        })
                    })
                    .sum::<f64>()
                    / config.seeds.len() as f64
            };
            let uniform = mean(&|c| rw_bm_uniform_claims_tas(c).unwrap());
            let rw_bm = mean(&|c| simulate(Design::RwBm, c).unwrap().tas);
            let at = format!(
                "{} % free: form {form}, uniform {uniform}, RW-BM {rw_bm}",
                fraction * 100.0
            );
            assert!((uniform - form).abs() / form < 0.015, "{at}");
            if fraction < 0.01 {
                assert!(rw_bm > form * 1.04, "{at}");
            }
        }
    }

    /// WAS beside its forms: the queue's is 32/33 · N (within 1 %, the partial last warp
    /// included); RW's form takes the end-of-kernel occupancy for every probe, an upper
    /// bound that the measurement meets when A ≫ N and stays below otherwise.
    #[test]
    fn was_of_queue_matches_and_was_of_rw_stays_under_its_bound() {
        let mut config = SweepConfig::paper(vec![1, 2]);
        config.designs = vec![Design::Queue, Design::Rw];
        for p in sweep(&config).unwrap() {
            let form = p.was_closed_form.unwrap();
            match p.design {
                Design::Queue => assert!((p.was.mean - form).abs() / form < 0.01, "{p:?}"),
                _ => assert!(p.was.mean < form * 1.05, "{p:?}"),
            }
        }
    }

    #[test]
    fn corw_needs_fewer_probes_than_rw_bm_and_rw_bm_fewer_than_rw() {
        let c = SimConfig {
            total_pages: 1 << 20,
            free_pages: 10_486,
            requesters: 5000,
            seed: 5,
        };
        let tas = |d| simulate(d, &c).unwrap().tas;
        assert!(tas(Design::CoRw) < tas(Design::RwBm));
        assert!(tas(Design::RwBm) < tas(Design::Rw));
    }
}
