//! Which arena a thread uses: each arena can be claimed by one thread identity (its
//! `pthread_self`), so that threads that hash to the same arena still get one each.
//!
//! A thread's identity hashes to a preferred arena. Without claims, two threads whose
//! identities hash alike share an arena for their whole lives: its lock, its slabs' windows
//! and their cache lines travel between their cores. The hash of the thread pointer alone
//! cannot avoid that where the heap's own mappings sit between thread stacks (under the
//! preload library, two threads of a C program shared an arena in 5 runs of 16; larson and
//! mstress then took about twice their time). So an arena records the identity of the
//! first thread that used it: a thread finds the arena it claimed (the preferred one: one
//! load; any other: the one a table of hints, indexed by another digit of the identity,
//! names, checked against the claim, and failing that a scan of a word per arena), or
//! claims the first unclaimed arena from its preferred one (a compare-and-swap from 0),
//! or, every arena claimed, shares its preferred one as before. A heap may limit its
//! threads to its first arenas (`Randomized::ARENAS_ENV`): then only those are claimed, a
//! thread's preferred arena is taken modulo the limit once it has to claim or share one,
//! and a thread that finds them all claimed shares one of them. (Without the hints, a
//! thread whose preferred arena another had claimed scanned on every allocation and free:
//! 3 to 4% of glibc-simple's samples under the preload library, `perf record -e
//! cpu-clock`.) Claims are never released (nothing runs when a thread exits);
//! a thread that reuses an exited thread's identity (glibc reuses stacks and their thread
//! control blocks) inherits its arena.
//!
//! The claim words are written once each (0 to an identity, with a compare-and-swap), so a
//! scan that races a claim sees the word before or after it: a thread never takes an arena
//! another identity claimed, and two threads racing for one unclaimed arena get one each
//! (the loser moves on). Relaxed ordering suffices: a claim only routes a thread to an
//! arena, whose lock orders everything that matters. A hint is only ever believed after
//! the claim it names is read and found to be the thread's own, so a stale hint, or one
//! two threads overwrite in turn, costs a scan and nothing else.

use alloclab_core::sync::atomic::{AtomicUsize, Ordering};

/// Entries of the table of hints.
const HINTS: usize = 64;

/// The hint entry of identity `me`: its 4 KiB digits, where thread control blocks on
/// stacks mapped one after another (8 MiB and a guard page apart for C threads, 2 MiB and
/// one for Rust's) differ by one.
#[inline(always)]
const fn hint_of(me: usize) -> usize {
    (me >> 12) % HINTS
}

/// The claims of `N` arenas: the identity of the thread that claimed each (0: none), and
/// where a thread found its own last.
#[derive(Debug)]
pub(crate) struct Claims<const N: usize> {
    owner: [AtomicUsize; N],
    /// For each [`hint_of`] an identity's, the arena the last thread with it found as its
    /// own.
    hint: [AtomicUsize; HINTS],
    /// How many arenas, from the first, threads may claim (1 to `N`): the others are never
    /// claimed, so never used. Fixed when the claims are made.
    limit: usize,
}

impl<const N: usize> Claims<N> {
    /// No arena claimed; threads may claim the first `limit` (1 to `N`).
    #[cfg(any(loom, test))]
    pub(crate) fn new(limit: usize) -> Self {
        assert!((1..=N).contains(&limit), "an arena limit of {limit} of {N}");
        Self {
            owner: core::array::from_fn(|_| AtomicUsize::new(0)),
            hint: core::array::from_fn(|_| AtomicUsize::new(0)),
            limit,
        }
    }

    /// Sets the arenas threads may claim on claims that were all zero until now (as a
    /// fresh mapping reads, where every arena is unclaimed but `limit` is not valid yet).
    ///
    /// # Safety
    ///
    /// `this` points to claims that nothing else refers to yet; `limit` is 1 to `N`.
    pub(crate) unsafe fn set_limit(this: *mut Self, limit: usize) {
        debug_assert!((1..=N).contains(&limit));
        // SAFETY: forwarded from the caller.
        unsafe { core::ptr::addr_of_mut!((*this).limit).write(limit) };
    }

    /// How many arenas, from the first, threads may claim.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The arena of the thread `me` (non-zero), whose identity prefers `preferred` (below
    /// `N`): the one it claimed, or the first unclaimed from `preferred` on (claimed now),
    /// or `preferred` when every arena is claimed by another identity; `preferred` modulo
    /// the limit in the last two where the limit is below `N`. Always below the limit.
    #[inline(always)]
    pub(crate) fn arena_of(&self, me: usize, preferred: usize) -> usize {
        if self.owner[preferred].load(Ordering::Relaxed) == me {
            return preferred;
        }
        let hinted = self.hint[hint_of(me)].load(Ordering::Relaxed) % N;
        if self.owner[hinted].load(Ordering::Relaxed) == me {
            return hinted;
        }
        self.find_or_claim(me, preferred)
    }

    /// [`arena_of`](Self::arena_of) past its first look.
    #[cold]
    #[inline(never)]
    fn find_or_claim(&self, me: usize, preferred: usize) -> usize {
        // From the preferred arena on: a claim is the first arena unclaimed from there at
        // the time, so a thread's own is a few words on (and none is ever released).
        let limit = self.limit;
        let preferred = preferred % limit;
        let mut from_preferred = (0..limit).map(|k| (preferred + k) % limit);
        let own = from_preferred
            .clone()
            .find(|&i| self.owner[i].load(Ordering::Relaxed) == me)
            .or_else(|| {
                from_preferred.find(|&i| {
                    self.owner[i].load(Ordering::Relaxed) == 0
                        && self.owner[i]
                            .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                            .is_ok()
                })
            });
        match own {
            Some(own) => {
                self.hint[hint_of(me)].store(own, Ordering::Relaxed);
                own
            }
            None => preferred,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn claims<const N: usize>() -> Claims<N> {
        Claims::new(N)
    }

    #[test]
    fn threads_that_prefer_one_arena_get_one_each_until_every_arena_is_claimed() {
        let c = claims::<4>();
        // Four identities, all preferring arena 2: 2, 3, 0, 1 in turn.
        let got: Vec<usize> = (1..=4).map(|me| c.arena_of(me * 16, 2)).collect();
        assert_eq!(got, [2, 3, 0, 1]);
        // Each finds its own again, from any preferred arena.
        for (i, me) in (1..=4).enumerate() {
            assert_eq!(c.arena_of(me * 16, 2), got[i]);
            assert_eq!(c.arena_of(me * 16, (i + 1) % 4), got[i]);
        }
        // A fifth identity shares its preferred arena.
        assert_eq!(c.arena_of(5 * 16, 1), 1);
        assert_eq!(c.arena_of(5 * 16, 3), 3);
    }

    #[test]
    fn with_a_limit_threads_claim_and_then_share_only_the_first_arenas() {
        let c = Claims::<8>::new(3);
        // Preferred arenas past the limit count modulo it: 6 is 0, 7 is 1, 5 is 2.
        assert_eq!(c.arena_of(0x10, 6), 0);
        assert_eq!(c.arena_of(0x20, 7), 1);
        assert_eq!(c.arena_of(0x30, 6), 2, "the next unclaimed from 0");
        // Each finds its own again, whatever it prefers.
        for (me, own) in [(0x10, 0), (0x20, 1), (0x30, 2)] {
            for preferred in 0..8 {
                assert_eq!(c.arena_of(me, preferred), own);
            }
        }
        // Every arena under the limit claimed: later identities share, never past it.
        for me in 4..200 {
            for preferred in 0..8 {
                assert_eq!(c.arena_of(me * 16, preferred), preferred % 3);
            }
        }
        assert!(c.owner[3..].iter().all(|o| o.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_thread_whose_preferred_arena_is_taken_finds_its_own_by_the_hint_and_only_its_own() {
        let c = claims::<16>();
        let (first, second) = (0x7000_0000_1000, 0x7000_0080_2000);
        assert_eq!(c.arena_of(first, 5), 5);
        assert_eq!(c.arena_of(second, 5), 6);
        assert_eq!(c.hint[hint_of(second)].load(Ordering::Relaxed), 6);
        // A second arena under one identity is made by hand here: the lookup answers with
        // the one the hint names, where a scan from the preferred arena would answer 6.
        c.owner[7].store(second, Ordering::Relaxed);
        c.hint[hint_of(second)].store(7, Ordering::Relaxed);
        assert_eq!(c.arena_of(second, 5), 7);
        // A hint naming another identity's arena is not believed: the identity sharing the
        // entry claims an arena of its own, and the first finds one of its own again.
        let third = second + (HINTS << 12);
        assert_eq!(hint_of(third), hint_of(second));
        assert_eq!(c.arena_of(third, 5), 8, "took the arena the hint named");
        assert_eq!(c.hint[hint_of(third)].load(Ordering::Relaxed), 8);
        assert_eq!(c.arena_of(second, 5), 6, "took the arena the hint named");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use alloclab_core::sync::{Arc, model, thread};

    use super::*;

    /// Two threads that prefer the same arena claim at once: they get different arenas, and
    /// each finds its own afterwards.
    #[test]
    fn racing_claims_get_an_arena_each() {
        model(|| {
            let c = Arc::new(Claims::<2>::new(2));
            let other = {
                let c = c.clone();
                thread::spawn(move || {
                    let a = c.arena_of(0x20, 0);
                    assert_eq!(c.arena_of(0x20, 1), a);
                    a
                })
            };
            let mine = c.arena_of(0x10, 0);
            assert_eq!(c.arena_of(0x10, 1), mine);
            let theirs = other.join().unwrap();
            assert_ne!(mine, theirs);
        });
    }

    /// Two threads racing for the one arena of three that a limit leaves them: one claims
    /// it, the other shares it, and neither is ever sent past the limit.
    #[test]
    fn racing_claims_under_a_limit_of_one_share_the_first_arena() {
        model(|| {
            let c = Arc::new(Claims::<3>::new(1));
            let other = {
                let c = c.clone();
                thread::spawn(move || [c.arena_of(0x20, 2), c.arena_of(0x20, 1)])
            };
            let mine = [c.arena_of(0x10, 1), c.arena_of(0x10, 2)];
            assert_eq!(mine, [0, 0]);
            assert_eq!(other.join().unwrap(), [0, 0]);
            let owner = c.owner[0].load(Ordering::Relaxed);
            assert!(owner == 0x10 || owner == 0x20, "{owner:#x}");
            assert_eq!(c.owner[1].load(Ordering::Relaxed), 0);
            assert_eq!(c.owner[2].load(Ordering::Relaxed), 0);
        });
    }
}
