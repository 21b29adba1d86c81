//! The allocators the harness runs: the existing ones ("peers") as
//! [`Allocator`](alloclab_core::Allocator)s, and the registry of every allocator it knows.
//!
//! Peers live here and never inside an allocator crate. Host-heap peers are process-wide
//! statics (most of them are process-wide by nature); the harness runs each measurement in a
//! fresh worker process, so one allocator's cached memory never shows in another's figures.

pub mod dram;
mod hls;
pub mod libpmemobj;
pub mod libraries;
mod lines;
pub mod pmdk;
mod tlsf;

use core::alloc::GlobalAlloc;
use core::fmt;

use alloclab_core::{GlobalAllocHeap, HostAllocator, SystemHeap};
use alloclab_hls::OnChipConfig;
use alloclab_training::caching::CachingConfig;

use alloclab_gpu::device::DeviceDesign;
use alloclab_gpu::sim::Design;

use crate::workloads::gpu::GpuAllocator;

pub use hls::HLS_HEAPS;
pub use tlsf::TlsfHeap;

/// What an allocator offers, and so which workloads it can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Hands out pointers into this process; thread-safe; any size and alignment a program
    /// asks of `malloc`.
    HostHeap,
    /// A simulated on-chip memory (`alloclab-hls`): runs in-process, measured in cycles,
    /// not in time.
    OnChipModel,
    /// A persistent heap ([`PersistentAllocator`](alloclab_core::PersistentAllocator)):
    /// driven through [`Slots`](crate::pmem::Slots) by the `pmem` suite (a pool file whose
    /// root holds slots that blocks are allocated into and freed from, crash-atomically) and
    /// by the storage engines of the `storage` suite.
    PersistentHeap,
    /// A GPU page design (`alloclab-gpu`) over a pool with a given free fraction: its CPU
    /// model, and its CUDA kernel when a device is present.
    GpuPagePool,
    /// A GPU allocator of byte-sized requests (4 B .. 8 KiB): the warp-aggregated malloc
    /// (CPU: the concurrent page pool) or CUDA's in-kernel malloc (device only).
    GpuMalloc,
    /// A GPU allocator of one 512 B page per thread at 2^0 .. 2^20 threads.
    GpuThreads,
    /// A model of PyTorch's CUDA caching allocator (`alloclab-training`): replays DNN
    /// training tensor traces in process, measured in bytes and calls, not in time.
    CachingModel,
    /// A heap a separate, unmodified program can run on: a shared library put in front of
    /// the C library with `LD_PRELOAD` (see [`libraries`]), or the C library's malloc itself.
    Program,
}

impl Capability {
    /// Whether the workload's thread count is host threads, so that `--threads` applies
    /// (not for simulations, whose default stands, nor for the GPU suite, which sweeps device
    /// threads inside each workload).
    pub fn runs_on_host_threads(self) -> bool {
        matches!(self, Self::HostHeap | Self::PersistentHeap | Self::Program)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::HostHeap => "host heap",
            Self::OnChipModel => "on-chip memory model",
            Self::PersistentHeap => "persistent heap",
            Self::GpuPagePool => "GPU page design",
            Self::GpuMalloc => "GPU byte allocator",
            Self::GpuThreads => "GPU allocator of pages per thread",
            Self::CachingModel => "caching-allocator model",
            Self::Program => "heap a program can run on (LD_PRELOAD, or the C library's malloc)",
        })
    }
}

/// Whose allocator it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// One of alloclab's research allocators.
    Alloclab,
    /// An existing allocator, for comparison.
    Peer,
}

/// An allocator as the registry describes it.
#[derive(Clone, Copy, Debug)]
pub struct AllocatorInfo {
    /// Name on the command line and in reports.
    pub name: &'static str,
    /// One line: what it is.
    pub description: &'static str,
    /// Ours or a peer.
    pub origin: Origin,
    /// What it offers.
    pub capabilities: &'static [Capability],
    /// The code behind the name.
    pub imp: Implementation,
}

/// The code behind a registry entry, which each capability's dispatch runs.
#[derive(Clone, Copy, Debug)]
pub enum Implementation {
    /// An in-process host heap ([`with_host_heap`]).
    Host(HostHeap),
    /// An on-chip memory model: its configuration.
    OnChip(fn() -> OnChipConfig),
    /// A GPU design or allocator.
    Gpu(GpuAllocator),
    /// A model of PyTorch's caching allocator: its configuration.
    Caching(fn() -> CachingConfig),
    /// A persistent heap ([`with_persistent_heap`](crate::pmem::with_persistent_heap)).
    Persistent(crate::pmem::PersistentHeap),
    /// A peer's shared library as the distribution ships it, which the `programs` suite
    /// preloads into programs ([`libraries`]).
    SharedLibrary {
        /// Its soname.
        soname: &'static str,
        /// The Debian package that ships it.
        package: &'static str,
    },
    /// A peer's shared library that its maintainers ship as source only: the user builds it
    /// and names the file in an environment variable ([`libraries`]); the `programs` suite
    /// preloads it into programs.
    UserBuiltLibrary {
        /// The file its build makes.
        file: &'static str,
        /// The environment variable that holds the file's path.
        env: &'static str,
        /// Where its source is and how it is built, in a few words.
        build: &'static str,
    },
}

/// The in-process host heaps, one per static of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostHeap {
    /// [`WFSPAN`].
    Wfspan,
    /// [`RANDOMIZED`].
    Randomized,
    /// [`SYSTEM`].
    System,
    /// [`MIMALLOC`].
    Mimalloc,
    /// [`JEMALLOC`].
    Jemalloc,
    /// [`RLSF`].
    Rlsf,
    /// [`WF_ALLOC`].
    WfAlloc,
}

impl HostHeap {
    /// Runs `task` on this heap.
    pub fn run<T: HostHeapTask>(self, task: T) -> T::Output {
        match self {
            HostHeap::Wfspan => task.run(&WFSPAN),
            HostHeap::Randomized => task.run(&RANDOMIZED),
            HostHeap::System => task.run(&SYSTEM),
            HostHeap::Mimalloc => task.run(&MIMALLOC),
            HostHeap::Jemalloc => task.run(&JEMALLOC),
            HostHeap::Rlsf => task.run(&RLSF),
            HostHeap::WfAlloc => task.run(&WF_ALLOC),
        }
    }

    /// The library that puts this heap in front of a program's C library: alloclab's
    /// preload libraries for its heaps, nothing for the C library's own malloc, `None` for
    /// the in-process peers (whose shared libraries are registered under their own names).
    pub const fn preload(self) -> Option<libraries::Source> {
        match self {
            HostHeap::Wfspan => Some(libraries::Source::Alloclab {
                package: "alloclab-preload-wfspan",
                file: "liballoclab_preload_wfspan.so",
            }),
            HostHeap::Randomized => Some(libraries::Source::Alloclab {
                package: "alloclab-preload-randomized",
                file: "liballoclab_preload_randomized.so",
            }),
            HostHeap::System => Some(libraries::Source::Nothing),
            HostHeap::Mimalloc | HostHeap::Jemalloc | HostHeap::Rlsf | HostHeap::WfAlloc => None,
        }
    }

    /// Runs `task` on this heap if it serves C's `malloc` family itself
    /// ([`MallocHeap`](alloclab_core::MallocHeap): alloclab's heaps, which their preload
    /// libraries export); `None` for the others.
    pub fn run_malloc<T: MallocHeapTask>(self, task: T) -> Option<T::Output> {
        match self {
            HostHeap::Wfspan => Some(task.run(&WFSPAN)),
            HostHeap::Randomized => Some(task.run(&RANDOMIZED)),
            HostHeap::System
            | HostHeap::Mimalloc
            | HostHeap::Jemalloc
            | HostHeap::Rlsf
            | HostHeap::WfAlloc => None,
        }
    }
}

impl AllocatorInfo {
    /// Whether it can run a workload that requires `capability`.
    pub fn fits(&self, capability: Capability) -> bool {
        self.capabilities.contains(&capability)
    }
}

/// Every allocator the harness knows, in the order reports compare them: the host heaps
/// (alloclab's first, then the peers), then the on-chip models (the no-defragmentation
/// baseline first, so that it is the suite's reference), then the persistent heaps (PMDK
/// first, the reference the `pmem` suite's targets are stated against; the DRAM upper bound
/// last), then the GPU designs (the paper's queue first: the `gpu` suite's reference), then
/// the caching-allocator models (the default first: the `training` suite's reference).
pub const ALLOCATORS: &[AllocatorInfo] = &[
    AllocatorInfo {
        name: "wfspan",
        description: "alloclab's wait-free span allocator (Ouyang & Zhu 2022): bounded steps per alloc and free",
        origin: Origin::Alloclab,
        capabilities: &[Capability::HostHeap, Capability::Program],
        imp: Implementation::Host(HostHeap::Wfspan),
    },
    AllocatorInfo {
        name: "randomized",
        description: "alloclab's randomized allocator: one word of state, random block and offset per object, keyed headers",
        origin: Origin::Alloclab,
        capabilities: &[Capability::HostHeap, Capability::Program],
        imp: Implementation::Host(HostHeap::Randomized),
    },
    AllocatorInfo {
        name: "system",
        description: "the C library's malloc (glibc ptmalloc2 here): per-thread arenas, bins, locks; for a program, nothing preloaded",
        origin: Origin::Peer,
        capabilities: &[Capability::HostHeap, Capability::Program],
        imp: Implementation::Host(HostHeap::System),
    },
    peer(
        "mimalloc",
        HostHeap::Mimalloc,
        "Microsoft's mimalloc 3.3 (the mimalloc crate, compiled in): per-thread heaps, free-list sharding, delayed remote frees",
    ),
    peer(
        "jemalloc",
        HostHeap::Jemalloc,
        "jemalloc (tikv-jemallocator, compiled in): thread caches, arenas, size-class slabs",
    ),
    peer(
        "rlsf",
        HostHeap::Rlsf,
        "rlsf's TLSF (O(1) two-level segregated fit) behind one mutex, over 1 MiB mmap chunks",
    ),
    peer(
        "wf_alloc",
        HostHeap::WfAlloc,
        "wf_alloc 0.1: a public wfspan-style prototype, through its hosted (not wait-free) GlobalAlloc wrapper",
    ),
    shared_library(
        "libmimalloc",
        "libmimalloc.so.2",
        "libmimalloc2.0",
        "mimalloc 2.0 as Debian ships it (libmimalloc.so.2), preloaded into programs",
    ),
    shared_library(
        "libjemalloc",
        "libjemalloc.so.2",
        "libjemalloc2",
        "jemalloc 5.3 as Debian ships it (libjemalloc.so.2), preloaded into programs",
    ),
    shared_library(
        "libtcmalloc",
        "libtcmalloc_minimal.so.4",
        "libtcmalloc-minimal4",
        "gperftools' tcmalloc as Debian ships it (libtcmalloc_minimal.so.4), preloaded into programs",
    ),
    AllocatorInfo {
        name: "libhardened",
        description: "GrapheneOS's hardened_malloc in its default configuration (zero on free, write-after-free check, random slots, canaries, quarantines), built by the user, preloaded into programs",
        origin: Origin::Peer,
        capabilities: &[Capability::Program],
        imp: Implementation::UserBuiltLibrary {
            file: "libhardened_malloc.so",
            env: "ALLOCLAB_LIBHARDENED",
            build: "build it from its source (github.com/GrapheneOS/hardened_malloc) with `make`",
        },
    },
    AllocatorInfo {
        name: "hls-bitmap",
        description: "on-chip baseline: Memluv's bitmap first fit, no defragmentation (alloclab-hls model)",
        origin: Origin::Peer,
        capabilities: &[Capability::OnChipModel],
        imp: Implementation::OnChip(hls::bitmap),
    },
    AllocatorInfo {
        name: "hls-defrag",
        description: "alloclab's on-chip model with the defragmenter: compaction on fragmentation failures, budgeted",
        origin: Origin::Alloclab,
        capabilities: &[Capability::OnChipModel],
        imp: Implementation::OnChip(hls::defrag),
    },
    AllocatorInfo {
        name: "pmdk",
        description: "PMDK's libpmemobj (pmemobj_alloc/pmemobj_free into PMEMoid slots), loaded at run time",
        origin: Origin::Peer,
        capabilities: &[Capability::PersistentHeap],
        imp: Implementation::Persistent(crate::pmem::PersistentHeap::Pmdk),
    },
    AllocatorInfo {
        name: "alloclab-pmem",
        description: "alloclab's crash-consistent persistent heap (allocate_into/free_from into PPtr slots)",
        origin: Origin::Alloclab,
        capabilities: &[Capability::PersistentHeap],
        imp: Implementation::Persistent(crate::pmem::PersistentHeap::AlloclabPmem),
    },
    AllocatorInfo {
        name: "dram",
        description: "upper bound: the same slots in DRAM, blocks from malloc, nothing persisted",
        origin: Origin::Peer,
        capabilities: &[Capability::PersistentHeap],
        imp: Implementation::Persistent(crate::pmem::PersistentHeap::Dram),
    },
    gpu(
        "gpu-queue",
        GpuAllocator::Pages(Some(Design::Queue), DeviceDesign::Queue),
        "GPU baseline: the paper's queue of free pages, CAS on the head (CPU model; CUDA kernel when a device is present)",
        Origin::Peer,
        &[Capability::GpuPagePool, Capability::GpuThreads],
    ),
    gpu(
        "gpu-queue-ticket",
        GpuAllocator::Pages(None, DeviceDesign::QueueTicket),
        "GPU baseline: a queue of free pages with one atomicAdd ticket per dequeue (CUDA only)",
        Origin::Peer,
        &[Capability::GpuPagePool, Capability::GpuThreads],
    ),
    gpu(
        "gpu-rw",
        GpuAllocator::Pages(Some(Design::Rw), DeviceDesign::Rw),
        "alloclab-gpu RW: one word per page, random pages",
        Origin::Alloclab,
        &[Capability::GpuPagePool, Capability::GpuThreads],
    ),
    gpu(
        "gpu-rw-bm",
        GpuAllocator::Pages(Some(Design::RwBm), DeviceDesign::RwBm),
        "alloclab-gpu RW-BM: one bit per page, random 32-page words",
        Origin::Alloclab,
        &[Capability::GpuPagePool, Capability::GpuThreads],
    ),
    gpu(
        "gpu-crw",
        GpuAllocator::Pages(Some(Design::Crw), DeviceDesign::Crw),
        "alloclab-gpu CRW: the page after the thread's last one first, then random",
        Origin::Alloclab,
        &[Capability::GpuPagePool, Capability::GpuThreads],
    ),
    gpu(
        "gpu-corw",
        GpuAllocator::Pages(Some(Design::CoRw), DeviceDesign::CoRw),
        "alloclab-gpu CoRW: a warp probes 32 words (1024 pages) per step and shares the free pages",
        Origin::Alloclab,
        &[Capability::GpuPagePool, Capability::GpuThreads],
    ),
    gpu(
        "gpu-warp-malloc",
        GpuAllocator::WarpMalloc,
        "alloclab-gpu warp-aggregated malloc over the RW-BM bitmap (CPU: the concurrent page pool)",
        Origin::Alloclab,
        &[Capability::GpuMalloc, Capability::GpuThreads],
    ),
    gpu(
        "cuda-malloc",
        GpuAllocator::CudaMalloc,
        "GPU baseline: CUDA's in-kernel malloc/free (CUDA only; heap raised to 4 GiB)",
        Origin::Peer,
        &[Capability::GpuMalloc, Capability::GpuThreads],
    ),
    AllocatorInfo {
        name: "pytorch-caching",
        description: "model of PyTorch's CUDA caching allocator (alloclab-training): 512 B rounding, 2 / 20 MiB segments, best fit with splitting",
        origin: Origin::Peer,
        capabilities: &[Capability::CachingModel],
        imp: Implementation::Caching(crate::workloads::training::plain_caching),
    },
    AllocatorInfo {
        name: "pytorch-caching-expandable",
        description: "the same model with expandable_segments:True: one growing virtual segment per pool, mapped in 2 / 20 MiB pages",
        origin: Origin::Peer,
        capabilities: &[Capability::CachingModel],
        imp: Implementation::Caching(crate::workloads::training::expandable_caching),
    },
];

const fn gpu(
    name: &'static str,
    allocator: GpuAllocator,
    description: &'static str,
    origin: Origin,
    capabilities: &'static [Capability],
) -> AllocatorInfo {
    AllocatorInfo {
        name,
        description,
        origin,
        capabilities,
        imp: Implementation::Gpu(allocator),
    }
}

const fn shared_library(
    name: &'static str,
    soname: &'static str,
    package: &'static str,
    description: &'static str,
) -> AllocatorInfo {
    AllocatorInfo {
        name,
        description,
        origin: Origin::Peer,
        capabilities: &[Capability::Program],
        imp: Implementation::SharedLibrary { soname, package },
    }
}

const fn peer(name: &'static str, heap: HostHeap, description: &'static str) -> AllocatorInfo {
    AllocatorInfo {
        name,
        description,
        origin: Origin::Peer,
        capabilities: &[Capability::HostHeap],
        imp: Implementation::Host(heap),
    }
}

/// The configuration of the on-chip model registered as `name`; `None` for other names.
pub fn on_chip_config(name: &str) -> Option<OnChipConfig> {
    match find(name)?.imp {
        Implementation::OnChip(config) => Some(config()),
        _ => None,
    }
}

/// The GPU design or allocator registered as `name`; `None` for other names.
pub fn gpu_allocator(name: &str) -> Option<GpuAllocator> {
    match find(name)?.imp {
        Implementation::Gpu(allocator) => Some(allocator),
        _ => None,
    }
}

/// The caching-allocator configuration registered as `name`; `None` for other names.
pub fn caching_config(name: &str) -> Option<CachingConfig> {
    match find(name)?.imp {
        Implementation::Caching(config) => Some(config()),
        _ => None,
    }
}

/// Looks an allocator up by name.
pub fn find(name: &str) -> Option<&'static AllocatorInfo> {
    ALLOCATORS.iter().find(|a| a.name == name)
}

/// Why the allocator `name` cannot run on this machine or in this build, if it cannot: a
/// persistent heap whose library is missing (`libpmemobj.so.1 not found: install
/// libpmemobj-dev`) or that is not built in this branch, or a peer's shared library that is
/// not installed (`libtcmalloc_minimal.so.4 not found: apt-get install -y
/// libtcmalloc-minimal4`) or, built from source, not named. `None` for every other
/// allocator.
pub fn unavailable(name: &str) -> Option<String> {
    libraries::unavailable(name).or_else(|| crate::pmem::availability(name).and_then(Result::err))
}

/// wfspan, alloclab's wait-free span allocator.
pub static WFSPAN: alloclab_wfspan::WfSpan = alloclab_wfspan::WfSpan::new();
/// The randomized allocator.
pub static RANDOMIZED: alloclab_randomized::Randomized = alloclab_randomized::Randomized::new();
/// The C library's malloc.
pub static SYSTEM: SystemHeap = SystemHeap::new();
/// mimalloc.
pub static MIMALLOC: GlobalAllocHeap<mimalloc::MiMalloc> =
    GlobalAllocHeap::wrap(&mimalloc::MiMalloc, "mimalloc");
/// jemalloc.
pub static JEMALLOC: GlobalAllocHeap<tikv_jemallocator::Jemalloc> =
    GlobalAllocHeap::wrap(&tikv_jemallocator::Jemalloc, "jemalloc");
/// TLSF behind a lock.
pub static RLSF: TlsfHeap = TlsfHeap::new();

type WfAllocGlobal = wf_alloc::global::HostedLazyGlobalWfSpanAllocator;
/// wf_alloc's hosted wrapper: 64 thread tokens per shard, 1024 spans (64 MiB) per shard.
static WF_ALLOC_GLOBAL: WfAllocGlobal = WfAllocGlobal::new(64, 1024);
/// wf_alloc.
pub static WF_ALLOC: GlobalAllocHeap<WfAllocGlobal> =
    GlobalAllocHeap::wrap(&WF_ALLOC_GLOBAL, "wf_alloc");

/// Something to do with a host heap, whatever its type: the way to run a generic workload
/// on an allocator chosen by name at run time, monomorphised for each.
pub trait HostHeapTask {
    /// What the task returns.
    type Output;
    /// Runs the task on `alloc`.
    fn run<A: HostAllocator>(self, alloc: &'static A) -> Self::Output;
}

/// Runs `task` on the host heap named `name`; `None` if no host heap has that name.
pub fn with_host_heap<T: HostHeapTask>(name: &str, task: T) -> Option<T::Output> {
    match find(name)?.imp {
        Implementation::Host(heap) => Some(heap.run(task)),
        _ => None,
    }
}

/// Something to do with a heap that serves C's `malloc` family, whatever its type.
pub trait MallocHeapTask {
    /// What the task returns.
    type Output;
    /// Runs the task on `heap`.
    fn run<A: alloclab_core::MallocHeap>(self, heap: &'static A) -> Self::Output;
}

/// Runs `task` on the host heap named `name` if it serves C's `malloc` family itself (see
/// [`HostHeap::run_malloc`]); `None` otherwise.
pub fn with_malloc_heap<T: MallocHeapTask>(name: &str, task: T) -> Option<T::Output> {
    match find(name)?.imp {
        Implementation::Host(heap) => heap.run_malloc(task),
        _ => None,
    }
}

// Compile-time check that every static peer is a usable `GlobalAlloc`-backed heap.
const _: fn() = || {
    fn is_global_alloc<G: GlobalAlloc + Sync>() {}
    is_global_alloc::<mimalloc::MiMalloc>();
    is_global_alloc::<tikv_jemallocator::Jemalloc>();
    is_global_alloc::<WfAllocGlobal>();
};

#[cfg(test)]
mod tests {
    use super::*;

    struct Name;
    impl HostHeapTask for Name {
        type Output = String;
        fn run<A: HostAllocator>(self, alloc: &'static A) -> String {
            alloc.name().to_owned()
        }
    }

    #[test]
    fn every_on_chip_model_in_the_registry_has_a_configuration() {
        for info in ALLOCATORS
            .iter()
            .filter(|a| a.fits(Capability::OnChipModel))
        {
            let config = on_chip_config(info.name)
                .unwrap_or_else(|| panic!("{} has no on-chip configuration", info.name));
            assert_eq!(config.validate(), Ok(()), "{}", info.name);
        }
        assert!(on_chip_config("system").is_none());
    }

    #[test]
    fn every_persistent_heap_in_the_registry_is_dispatchable_and_only_those() {
        for info in ALLOCATORS {
            let dispatched = crate::pmem::availability(info.name).is_some();
            assert_eq!(
                dispatched,
                info.fits(Capability::PersistentHeap),
                "{}: registry and with_persistent_heap disagree",
                info.name
            );
        }
        assert_eq!(unavailable("system"), None);
        assert_eq!(unavailable("dram"), None);
        assert_eq!(unavailable("alloclab-pmem"), None);
    }

    #[test]
    fn every_implementation_matches_the_capabilities_its_entry_claims() {
        for info in ALLOCATORS {
            let (capability, expected) = match info.imp {
                Implementation::Host(_) => (Capability::HostHeap, true),
                Implementation::OnChip(_) => (Capability::OnChipModel, true),
                Implementation::Caching(_) => (Capability::CachingModel, true),
                Implementation::Gpu(GpuAllocator::Pages(..)) => (Capability::GpuPagePool, true),
                Implementation::Gpu(_) => (Capability::GpuMalloc, true),
                Implementation::Persistent(_) => (Capability::PersistentHeap, true),
                Implementation::SharedLibrary { .. } | Implementation::UserBuiltLibrary { .. } => {
                    (Capability::Program, true)
                }
            };
            assert_eq!(info.fits(capability), expected, "{}", info.name);
        }
        let names: std::collections::BTreeSet<&str> = ALLOCATORS.iter().map(|a| a.name).collect();
        assert_eq!(names.len(), ALLOCATORS.len(), "a name is registered twice");
    }

    #[test]
    fn only_alloclab_heaps_dispatch_as_malloc_heaps() {
        struct MallocName;
        impl MallocHeapTask for MallocName {
            type Output = String;
            fn run<A: alloclab_core::MallocHeap>(self, heap: &'static A) -> String {
                heap.name().to_owned()
            }
        }
        for info in ALLOCATORS {
            let dispatched = with_malloc_heap(info.name, MallocName);
            if info.fits(Capability::HostHeap) && info.origin == Origin::Alloclab {
                assert_eq!(dispatched.as_deref(), Some(info.name));
            } else {
                assert_eq!(dispatched, None, "{}", info.name);
            }
        }
    }

    #[test]
    fn every_host_heap_in_the_registry_is_dispatchable_under_its_own_name() {
        for info in ALLOCATORS.iter().filter(|a| a.fits(Capability::HostHeap)) {
            assert_eq!(
                with_host_heap(info.name, Name).as_deref(),
                Some(info.name),
                "registry entry {} does not dispatch to an allocator of that name",
                info.name
            );
        }
        assert!(with_host_heap("no-such-allocator", Name).is_none());
    }
}
