//! The `cpu` suite: the classic allocator benchmarks, rewritten in Rust.
//!
//! Each workload is a generic function over a [`HostAllocator`], monomorphised per
//! allocator so that no dynamic dispatch sits between the workload and the allocator. Each
//! does a fixed amount of work (set by [`Params::scale`]) with a seeded generator, so every
//! allocator sees the same request sequence, and touches the memory it gets (first and last
//! byte at least) so that lazily mapped pages are paid for.
//!
//! | workload      | after                        | what it stresses                                  |
//! |---------------|------------------------------|---------------------------------------------------|
//! | larson        | Larson & Krishnan, 1998      | server simulation: blocks outlive their thread and are freed by its successor |
//! | xmalloc-test  | Lever & Boreham, 2000        | producer/consumer: every block freed by another thread |
//! | cache-scratch | Berger et al. (Hoard), 2000  | passive false sharing: a freed object's cache line reused by another thread |
//! | cache-thrash  | Berger et al. (Hoard), 2000  | active false sharing: small objects of different threads on one line |
//! | glibc-simple  | glibc `bench-malloc-simple`  | one thread, tight malloc/free of small sizes      |
//! | glibc-thread  | glibc `bench-malloc-thread`  | every thread, random small sizes over a working set, no sharing |
//! | mstress       | mimalloc `test-stress`       | mixed sizes, some long-lived, blocks handed between threads |
//! | rptest        | rpmalloc `rpmalloc-benchmark`| random sizes with cross-thread frees              |

mod cache;
pub(super) mod common;
mod glibc;
mod larson;
mod mstress;
mod rptest;
mod xmalloc;

use alloclab_core::HostAllocator;

use super::{Measurement, Params, WorkloadInfo};
use crate::peers::Capability;

/// The workloads of the `cpu` suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuWorkload {
    /// Server simulation with blocks freed by the next generation of threads.
    Larson,
    /// Producer/consumer remote frees.
    XmallocTest,
    /// Passive false sharing.
    CacheScratch,
    /// Active false sharing.
    CacheThrash,
    /// Single-threaded tight malloc/free.
    GlibcSimple,
    /// Per-thread random malloc/free over a working set.
    GlibcThread,
    /// Mixed sizes, long-lived blocks, blocks exchanged between threads.
    Mstress,
    /// Random sizes with cross-thread frees.
    Rptest,
}

/// The registry entries of the `cpu` suite.
pub const WORKLOADS: &[WorkloadInfo] = &[
    info(
        "larson",
        "server simulation: random sizes 16-1000 B, blocks freed by the thread that inherits them",
    ),
    info(
        "xmalloc-test",
        "producer/consumer: each thread allocates batches that its neighbour frees",
    ),
    info(
        "cache-scratch",
        "passive false sharing: each thread frees a neighbour's 8 B object, then allocates and writes its own",
    ),
    info(
        "cache-thrash",
        "active false sharing: each thread allocates, writes and frees its own 8 B objects",
    ),
    info(
        "glibc-simple",
        "one thread: tight malloc/free of 16-256 B in batches",
    ),
    info(
        "glibc-thread",
        "every thread: random 16 B-4 KiB malloc/free over a private working set",
    ),
    info(
        "mstress",
        "mixed sizes (mostly small, some up to 256 KiB), 1 in 4 long-lived, blocks swapped between threads",
    ),
    info(
        "rptest",
        "random 16 B-16 KiB sizes, half of each batch freed by another thread",
    ),
];

const fn info(name: &'static str, description: &'static str) -> WorkloadInfo {
    WorkloadInfo {
        suite: "cpu",
        name,
        description,
        requires: Capability::HostHeap,
        default_threads: super::one_per_core,
    }
}

impl CpuWorkload {
    /// Every workload of the suite, in registry order.
    pub const ALL: [CpuWorkload; 8] = [
        Self::Larson,
        Self::XmallocTest,
        Self::CacheScratch,
        Self::CacheThrash,
        Self::GlibcSimple,
        Self::GlibcThread,
        Self::Mstress,
        Self::Rptest,
    ];

    /// The workload's registry name.
    pub fn name(self) -> &'static str {
        WORKLOADS[self as usize].name
    }

    /// Looks a workload up by registry name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == name)
    }

    /// Runs the workload once against `alloc`.
    ///
    /// # Panics
    ///
    /// If the allocator fails an allocation: the cpu workloads ask for modest sizes, so
    /// running out of memory is a broken run, not a result.
    pub fn run<A: HostAllocator>(self, alloc: &A, params: &Params) -> Measurement {
        match self {
            Self::Larson => larson::run(alloc, params),
            Self::XmallocTest => xmalloc::run(alloc, params),
            Self::CacheScratch => cache::run_scratch(alloc, params),
            Self::CacheThrash => cache::run_thrash(alloc, params),
            Self::GlibcSimple => glibc::run_simple(alloc, params),
            Self::GlibcThread => glibc::run_thread(alloc, params),
            Self::Mstress => mstress::run(alloc, params),
            Self::Rptest => rptest::run(alloc, params),
        }
    }
}
