//! Every threshold a host heap's target is checked against, in one table, each with who
//! claims it. The storage and training targets keep theirs beside their checks
//! ([`crate::workloads::storage::report`], [`super::training`]).
//!
//! | threshold | value | claimed by |
//! |---|---|---|
//! | [`WFSPAN_TIME_VS_MIMALLOC`] | 1.0 | alloclab (the wfspan paper: wait-freedom need not cost throughput against a lock-free allocator) |
//! | [`WFSPAN_TIME_VS_SYSTEM`] | 1.1 | alloclab |
//! | [`WFSPAN_FOOTPRINT_VS_MIMALLOC`] | 1.5 | alloclab |
//! | [`WFSPAN_PROGRAMS_WALL_VS_MIMALLOC`] | 0.95 | alloclab (a wait-free allocator through the C ABI as fast as in-process, where it is 0.7–0.9× mimalloc) |
//! | [`WFSPAN_PROGRAMS_WALL_WORST_VS_MIMALLOC`] | 1.25 | alloclab |
//! | [`WFSPAN_PROGRAMS_RSS_VS_MIMALLOC`] | 1.0 | alloclab |
//! | [`REDIS_RPS_VS_JEMALLOC`], [`REDIS_RSS_VS_JEMALLOC`] | at least jemalloc's requests/s on every command, at most its peak RSS | alloclab (redis is built for jemalloc) |
//! | [`REALTIME_PEERS`], [`REALTIME_FIFO_CALLS`], [`REALTIME_FIFO_PERCENTILES`], [`REALTIME_FIFO_FLOOR_NS`] | the lowest tail of alloc and free under `SCHED_FIFO`, one thread per core, at p99.999, or at p99.99 where an empty call's p99.999 in the same runs reaches 1 µs (there the figure is the host's interrupts, which hit a call in proportion to its length, not the allocator's tail: on the 2-core VM here an empty call's p99.999 is 14–22 µs, its p99.99 under 0.5 µs) | alloclab (the wfspan paper: bounded steps for every call, so the shortest tail where the scheduler does not time-slice) |
//! | [`PROGRESS_MIN_FREEZES`], [`PROGRESS_OTHERS_MAX_NS`] | no freeze of at least 200 blocks another thread, beyond the freezes the same test finds the machine's pauses lining up with in the gaps between calls; the others' longest call during freezes at most 1 ms beyond the machine's longest pause in the same runs: the longest stretch, during freezes or outside them, of what waits for no frozen thread (the harness's own code between two calls, an empty call, a call while no thread was frozen; about 0.2 ms on a quiet machine, 1–25 ms on the shared 2-core VM here) | the wfspan paper: no thread waits for another |
//! | [`PROGRESS_LOCK`], [`PROGRESS_LOCK_MIN_BLOCKED`] | rlsf, its one lock, blocks on at least 5% of the freezes | alloclab: the measure sees a lock (the share is the lock's hold time over the time a thread spends in calls, waiting included) |
//! | [`ENTROPY_MIN_BITS`] up to [`ENTROPY_MAX_SIZE`] | 8 bits, 1 KiB | the hardened allocators' figure (Guarder, FreeGuard, SlimGuard: 8–10 bits) |
//! | [`REUSE_MAX`] | 1/256 | alloclab (DieHarder's model of reuse delay) |
//! | [`CAUGHT_PREFIXES`] | every double and invalid free | the randomized allocator's paper: randomization defeats misuse |
//! | [`RANDOMIZED_TIME_VS_SYSTEM`] | 1.5 | alloclab (the paper: fast and secure; DieHard reports 1.4× glibc on allocation-heavy programs) |
//! | [`RANDOMIZED_FOOTPRINT_VS_SYSTEM`], [`RANDOMIZED_FOOTPRINT_FLOOR_MIB`], [`RANDOMIZED_FOOTPRINT_SLACK_MIB`] | 1.5× glibc's peak where glibc's is at least 1 MiB, at most 64 KiB above it where it is smaller (a ratio to glibc's few pages measures the pages of a thread's arena, not the heap) | alloclab (the paper: the state is one word and costs no memory) |
//! | [`RANDOMIZED_PROGRAMS_WALL_VS_SYSTEM`], [`RANDOMIZED_PROGRAMS_WALL_WORST_VS_SYSTEM`] | geometric mean over the programs 1.5× glibc's wall time, no program above 2× | alloclab (the paper: fast and secure, on real programs) |
//!
//! wfspan's step bound is its own ([`alloclab_wfspan`]'s documented bound per alloc and free),
//! not a threshold of this table.

/// wfspan's time over mimalloc's, geometric mean over the `cpu` workloads, at most.
pub const WFSPAN_TIME_VS_MIMALLOC: f64 = 1.0;
/// wfspan's time over glibc's malloc's on every `cpu` workload, at most.
pub const WFSPAN_TIME_VS_SYSTEM: f64 = 1.1;
/// wfspan's peak footprint over mimalloc's on every `cpu` workload, at most.
pub const WFSPAN_FOOTPRINT_VS_MIMALLOC: f64 = 1.5;
/// wfspan's wall time over mimalloc's shared library's, both preloaded, geometric mean over
/// the `programs` suite, at most.
pub const WFSPAN_PROGRAMS_WALL_VS_MIMALLOC: f64 = 0.95;
/// wfspan's wall time over mimalloc's shared library's on every program, at most.
pub const WFSPAN_PROGRAMS_WALL_WORST_VS_MIMALLOC: f64 = 1.25;
/// wfspan's peak RSS over mimalloc's shared library's, geometric mean over the `programs`
/// suite, at most.
pub const WFSPAN_PROGRAMS_RSS_VS_MIMALLOC: f64 = 1.0;
/// redis under wfspan: requests/s over jemalloc's shared library's, on every command, at
/// least.
pub const REDIS_RPS_VS_JEMALLOC: f64 = 1.0;
/// redis under wfspan: the server's peak RSS over jemalloc's shared library's, at most.
pub const REDIS_RSS_VS_JEMALLOC: f64 = 1.0;
/// The allocators whose realtime tails wfspan's are compared with.
pub const REALTIME_PEERS: &[&str] = &["system", "mimalloc", "jemalloc", "rlsf", "wf_alloc"];
/// The calls whose tails are compared under `SCHED_FIFO` (`latency-fifo`, one thread per
/// core).
pub const REALTIME_FIFO_CALLS: &[&str] = &["alloc", "free"];
/// The percentiles the `SCHED_FIFO` tails are compared at, deepest first: the first at
/// which an empty call (the floor) stays under [`REALTIME_FIFO_FLOOR_NS`] decides.
pub const REALTIME_FIFO_PERCENTILES: &[&str] = &["p99.999", "p99.99"];
/// The floor below which a percentile measures the allocators rather than the machine
/// (1 µs: a host interrupt inside a call takes 10 µs and more).
pub const REALTIME_FIFO_FLOOR_NS: f64 = 1_000.0;
/// The least freezes per run the `progress` target is judged on.
pub const PROGRESS_MIN_FREEZES: f64 = 200.0;
/// How much longer than the longest gap between two calls in the same windows (the
/// machine's pauses) the longest call of the threads not frozen may be, during freezes
/// (1 ms).
pub const PROGRESS_OTHERS_MAX_NS: f64 = 1_000_000.0;
/// The lock-based heap the `progress` measure is checked against.
pub const PROGRESS_LOCK: &str = "rlsf";
/// The least share of freezes that heap blocks on.
pub const PROGRESS_LOCK_MIN_BLOCKED: f64 = 0.05;
/// The least steady-state placement entropy, bits, for sizes up to [`ENTROPY_MAX_SIZE`].
pub const ENTROPY_MIN_BITS: f64 = 8.0;
/// The largest size the entropy target covers, bytes.
pub const ENTROPY_MAX_SIZE: usize = 1024;
/// The highest probability that the next allocation of a size returns the block freed just
/// before.
pub const REUSE_MAX: f64 = 1.0 / 256.0;
/// The misuse cases that must all be caught: the double and invalid frees.
pub const CAUGHT_PREFIXES: &[&str] = &["double_free_", "invalid_free_"];
/// randomized's time over glibc's, geometric mean over the `cpu` workloads, at most.
pub const RANDOMIZED_TIME_VS_SYSTEM: f64 = 1.5;
/// randomized's peak footprint over glibc's on every `cpu` workload and program where
/// glibc's is at least [`RANDOMIZED_FOOTPRINT_FLOOR_MIB`], at most.
pub const RANDOMIZED_FOOTPRINT_VS_SYSTEM: f64 = 1.5;
/// Below this peak of glibc's (MiB), randomized's is held to [`RANDOMIZED_FOOTPRINT_SLACK_MIB`]
/// above it instead of a ratio.
pub const RANDOMIZED_FOOTPRINT_FLOOR_MIB: f64 = 1.0;
/// How far above glibc's small peaks randomized's may be (MiB): 64 KiB.
pub const RANDOMIZED_FOOTPRINT_SLACK_MIB: f64 = 64.0 / 1024.0;
/// randomized's wall time over glibc's (both through the C ABI; glibc with nothing
/// preloaded), geometric mean over the programs, at most.
pub const RANDOMIZED_PROGRAMS_WALL_VS_SYSTEM: f64 = 1.5;
/// randomized's wall time over glibc's on every program, at most.
pub const RANDOMIZED_PROGRAMS_WALL_WORST_VS_SYSTEM: f64 = 2.0;
