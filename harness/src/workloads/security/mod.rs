//! The `security` suite: how hard a heap makes an attacker's life. Where blocks land
//! (placement entropy), whether a freed block comes straight back (use-after-free), where
//! an overflow lands, and whether misuse is caught. After DieHard/DieHarder (placement
//! and reuse entropy, overflow masking) and mimalloc-bench's security programs (misuse
//! caught or not); see `notes/randomized.md`.
//!
//! Every workload runs on one thread (the default), on every host heap (`misuse-c` on every
//! heap a program can run on). Its figures are
//! counts and probabilities of one run, not times; they are the same for every run of a
//! deterministic allocator.
//!
//! # `entropy`: placement entropy, in bits
//!
//! **What is random.** A workload's own randomness must not pass for the allocator's.
//! So the request history is fixed: one sequence of allocations and frees drawn from the
//! run's seed. It is replayed in `T` independent *fresh* heaps, and the entropy is that
//! of the outcome over those heaps: a deterministic allocator gives the same outcome
//! every time, 0 bits, however random the history looks.
//!
//! **How.** The worker process does not touch the heap under test before the workload
//! starts (the runner's warm-up allocation is skipped for this suite; `system` is also the
//! harness's own heap, but what the harness does with it is deterministic too, so it is
//! part of the fixed history). It checks that it is single-threaded and `fork`s `T`
//! children one after the other; each replays the history on its copy of the untouched
//! heap, writes its results to a pipe with `write(2)` and ends with `_exit(0)` (nothing on
//! stdout, no destructors, no stdio flush). A forked child keeps the parent's address
//! space layout, so ASLR does not add randomness either.
//!
//! **What is observed.** At a probe point, two consecutive allocations `a`, `b` of `s`
//! bytes and the delta `b − a`: the attacker knows where their last object landed, how
//! well can they predict the next? Probes are taken for s = 16, 32, 64, 128, 256, 512,
//! 1024 and 4096 bytes, *fresh* (first thing in the new heap) and *steady* (after a churn:
//! [`placement::CHURN_LIVE`] = 4096 live blocks of 16 B–1 KiB, log-uniform, then
//! [`placement::CHURN_STEPS`] = 16384 random free-and-replace steps).
//!
//! **Estimators.** For each (phase, size), the `T` deltas give the *collision entropy*
//! `H2 = −log2 P(two trials agree)`, `P` estimated by the share of equal pairs among the
//! `T·(T−1)/2` pairs. `H2` is a lower bound on Shannon entropy (so a conservative figure)
//! and pairs make it measurable up to about `log2(T²/2)` bits. Where no two trials agree,
//! the figure is that ceiling, `log2(T·(T−1)/2)`, also reported as `entropy_ceiling`: read
//! it as "at least about this much". Also the plug-in Shannon entropy of the empirical
//! distribution, which cannot exceed `log2 T` and reads low once outcomes are about as
//! many as trials. `T` = 256 at Small (`entropy_ceiling` 15.0 bits, Shannon cap 8 bits;
//! at 8 bits of `H2` about 127 of the 32640 pairs agree, so the estimate is within about
//! ±0.15 bits), 1024 at Medium (19.0 and 10 bits), 16 at Tiny. A trial costs a fork and a
//! churn, 1–4 ms here: the `entropy` workload is most of the suite's time.
//!
//! A caveat the measurement shares with real forking servers: an allocator that drew its
//! random seed before the fork (at load time, say) would give every child the same
//! sequence, and 0 bits here; every allocator measured today sets itself up lazily.
//!
//! Metrics: `entropy_fresh_S`, `entropy_steady_S` (`H2`), `shannon_fresh_S`,
//! `shannon_steady_S`, `entropy_ceiling`, all in bits, higher is better.
//!
//! # `reuse`: use-after-free exploitability
//!
//! On a steady-state heap (the same churn), for s = 16, 64, 256 and 1024 bytes:
//!
//! * **Immediate reuse.** `p = alloc(s); free(p); q = alloc(s)`: the share of trials with
//!   `q == p` (`reuse_same_S`) and with `q` overlapping `p`'s `s` bytes
//!   (`reuse_overlap_S`): the chance that an attacker's next allocation lands on the object
//!   a dangling pointer still points to. Lower is better. 4096 trials per size at Small,
//!   two churn steps between trials.
//! * **Reuse distance.** `free(p)`, then same-size allocations, kept live, until one
//!   overlaps `p`, at most [`placement::DISTANCE_CAP`] = 4096: the median
//!   (`distance_median_S`) and 90th percentile (`distance_p90_S`) of that count, a trial
//!   not reused within the cap counting as 4097, and the share of such trials
//!   (`distance_never_S`). Higher is better. 128 trials per size at Small.
//!
//! # `overflow`: where a linear overflow lands
//!
//! On a steady-state heap with 1024 more live blocks of each of 16, 64, 256 and 1024 bytes
//! (at Small), the share of those blocks where an overflow of `k` = 1, 2, 4, 8, 16, 32, 64
//! bytes past the *requested* end reaches another live block's requested bytes
//! (`overflow_SB_kK`, lower is better). Computed from the addresses of all the workload's
//! live blocks (sorted intervals, [`analysis::LiveSet`]); nothing is overwritten. Bytes
//! between blocks — headers, size-class slack, guard gaps — absorb short overflows.
//!
//! # `misuse`: is heap misuse caught?
//!
//! Each case ([`misuse::Case`]) runs in a forked child with its stderr captured: double
//! free (immediate; delayed by 1000 other allocations and frees; interleaved `free(p);
//! free(q); free(p)`), invalid free (a stack address; `p + 1`; `p + 16` inside a 256 B
//! block; a pointer into an `mmap`ed page; one into a static array), and header overwrite
//! (the 16 bytes before a block, then free it; an overflow from a block into its upper
//! neighbour, then free the neighbour), then the classes a hardened allocator catches: a
//! write after free (8 bytes into a freed 64 B block, then 65 536 allocations of 16 to
//! 64 B; 8 bytes 1 MiB into a freed 4 MiB block; 8 bytes through the old pointer of a block
//! that `realloc` moved), a linear overflow or underflow of 1 and 32 bytes past either end
//! of a 64 B block by store, and of 32 by `memcpy`, a zero byte one past a 60 B block (a
//! string terminator), each followed by the block's free, a 1 MiB overflow past a 4 MiB block, and a write and a read through the pointer of a
//! zero-size request. The child then allocates a few blocks and exits.
//! Verdicts ([`analysis::Verdict`]): **caught** (`SIGABRT`: the allocator noticed and
//! aborted; a Rust panic also aborts the child, as it would inside a global allocator; or,
//! in a case whose misuse is a memory access, a `SIGSEGV` or `SIGBUS` at that access itself,
//! before the child reported it done: the allocator unmapped or guarded that memory, which
//! stops the misuse on the spot), **crashed** (another signal, or a fault later on),
//! **silent** (exit 0), **hung** (killed after
//! [`misuse::CASE_TIMEOUT`]). One sample per case: 1 caught, 0.5 crashed, 0.25 hung, 0
//! silent; plus `caught` and `silent` (counts of cases). The first line of each child's
//! stderr — glibc's `free(): double free detected in tcache 2`, say — is printed on the
//! worker's stderr; run a worker by hand to see it:
//! `alloclab __worker --workload misuse --alloc system --threads 1 --scale small --seed 42`.
//!
//! # `misuse-c`: the same cases through the C ABI
//!
//! The cases again, as a C program's bugs, run under every heap a program can run on
//! (alloclab's preload libraries, the peers' shared libraries, the C library's malloc): see
//! [`misuse_c`]. The in-process `misuse` calls each heap through alloclab's trait, with the
//! size at free; this is the path a user's program takes.

pub mod analysis;
pub mod child;
pub mod misuse;
pub mod misuse_c;
pub mod placement;

use std::time::Instant;

use alloclab_core::HostAllocator;

use super::{Outcome, Params, WorkloadInfo};
use crate::peers::Capability;

/// The suite's name.
pub const SUITE: &str = "security";

/// One thread: the default of the `security` suite (its figures do not depend on
/// contention).
pub fn one_thread(_cores: usize) -> Vec<usize> {
    vec![1]
}

/// The registry entries of the `security` suite.
pub const WORKLOADS: &[WorkloadInfo] = &[
    WorkloadInfo {
        suite: "security",
        name: "entropy",
        description: "placement entropy (bits) of consecutive blocks, fresh and steady heap, over forked fresh heaps",
        requires: Capability::HostHeap,
        default_threads: one_thread,
    },
    WorkloadInfo {
        suite: "security",
        name: "reuse",
        description: "use-after-free: P(next same-size alloc returns the block just freed), reuse distance",
        requires: Capability::HostHeap,
        default_threads: one_thread,
    },
    WorkloadInfo {
        suite: "security",
        name: "overflow",
        description: "P(a 1-64 byte linear overflow lands in another live block), steady heap",
        requires: Capability::HostHeap,
        default_threads: one_thread,
    },
    WorkloadInfo {
        suite: "security",
        name: "misuse",
        description: "double and invalid frees, overwrites, writes after free, overflows, zero-size and realloc misuse, each in a child: caught, crashed or silent",
        requires: Capability::HostHeap,
        default_threads: one_thread,
    },
    WorkloadInfo {
        suite: "security",
        name: misuse_c::NAME,
        description: "the misuse cases as a C program's bugs, under LD_PRELOAD: caught, crashed or silent",
        requires: Capability::Program,
        default_threads: one_thread,
    },
];

/// The workloads of the `security` suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecurityWorkload {
    /// Placement entropy.
    Entropy,
    /// Reuse of a just-freed block.
    Reuse,
    /// Where an overflow lands.
    Overflow,
    /// Misuse cases.
    Misuse,
}

impl SecurityWorkload {
    /// Every workload of the suite, in registry order.
    pub const ALL: [SecurityWorkload; 4] =
        [Self::Entropy, Self::Reuse, Self::Overflow, Self::Misuse];

    /// The workload's registry name.
    pub fn name(self) -> &'static str {
        WORKLOADS[self as usize].name
    }

    /// Looks a workload up by registry name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == name)
    }

    /// Runs the workload once against `alloc` (on this thread, whatever `params.threads`
    /// says). `min_sample` is the whole run: nothing in it is timed.
    ///
    /// # Panics
    ///
    /// If the allocator fails an allocation; for `entropy` and `misuse`, if the process
    /// has more than one thread (they fork) or a fork fails.
    pub fn run<A: HostAllocator>(self, alloc: &A, params: &Params) -> Outcome {
        let start = Instant::now();
        let samples = match self {
            Self::Entropy => placement::entropy(alloc, params),
            Self::Reuse => placement::reuse(alloc, params),
            Self::Overflow => placement::overflow(alloc, params),
            Self::Misuse => misuse::misuse(alloc, params.seed),
        };
        Outcome {
            samples,
            min_sample: start.elapsed(),
            times_single_operations: false,
        }
    }
}
