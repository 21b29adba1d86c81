//! The persistent heaps, as both persistent-heap suites see them: every one implements
//! [`PersistentAllocator`], and [`with_persistent_heap`] is the one table from a name to an
//! implementation, for the `pmem` suite ([`Slots`] over any heap) and the `storage` suite
//! (its engines over any heap) alike.
//!
//! | name            | type                   | what it is                                             |
//! |-----------------|------------------------|--------------------------------------------------------|
//! | `alloclab-pmem` | [`AlloclabPmemHeap`]   | alloclab's persistent heap on the best medium here (libpmem, else native CLWB/CLFLUSHOPT) |
//! | `pmdk`          | [`PmdkHeap`]           | PMDK's libpmemobj, loaded at run time                  |
//! | `dram`          | [`DramHeap`]           | blocks from the process's heap, nothing flushed, nothing survives |

mod slots;

use alloclab_core::PersistentAllocator;

pub use crate::peers::dram::DramHeap;
pub use crate::peers::libpmemobj::{LIBPMEMOBJ_SONAME, Libpmemobj};
pub use crate::peers::pmdk::PmdkHeap;
pub use alloclab_core::PersistStats;
pub use slots::{SlotClaim, SlotClaims, Slots};

/// alloclab-pmem as the persistent-heap suites open it: a pool file on the best medium here
/// (libpmem, else native CLWB/CLFLUSHOPT).
pub type AlloclabPmemHeap = alloclab_pmem::PersistentHeap<Box<dyn alloclab_pmem::Medium>>;

/// Something to do with a persistent heap, whatever its type: the way to run a generic
/// workload on a heap chosen by name at run time, monomorphised for each.
pub trait PersistentHeapTask {
    /// What the task returns.
    type Output;
    /// Runs the task with the heap type `H`, known by `name`.
    fn run<H: PersistentAllocator>(self, name: &'static str) -> Self::Output;
}

/// The persistent heaps, as registry entries name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersistentHeap {
    /// [`AlloclabPmemHeap`].
    AlloclabPmem,
    /// [`PmdkHeap`].
    Pmdk,
    /// [`DramHeap`].
    Dram,
}

impl PersistentHeap {
    /// Runs `task` with this heap's type, known by `name`.
    pub fn run<T: PersistentHeapTask>(self, name: &'static str, task: T) -> T::Output {
        match self {
            PersistentHeap::AlloclabPmem => task.run::<AlloclabPmemHeap>(name),
            PersistentHeap::Pmdk => task.run::<PmdkHeap>(name),
            PersistentHeap::Dram => task.run::<DramHeap>(name),
        }
    }
}

/// Runs `task` with the persistent heap registered as `name` (`alloclab-pmem`, `pmdk`,
/// `dram`): `None` if no persistent heap has that name.
pub fn with_persistent_heap<T: PersistentHeapTask>(name: &str, task: T) -> Option<T::Output> {
    let info = crate::peers::find(name)?;
    match info.imp {
        crate::peers::Implementation::Persistent(heap) => Some(heap.run(info.name, task)),
        _ => None,
    }
}

/// Whether the persistent heap `name` can run here: `None` if no persistent heap has that
/// name, `Some(Err(reason))` if it cannot (a library is missing).
pub fn availability(name: &str) -> Option<Result<(), String>> {
    struct Probe;
    impl PersistentHeapTask for Probe {
        type Output = Result<(), String>;
        fn run<H: PersistentAllocator>(self, _name: &'static str) -> Result<(), String> {
            H::available().map_err(String::from)
        }
    }
    with_persistent_heap(name, Probe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::{ALLOCATORS, Capability};

    #[test]
    fn alloclab_pmem_and_dram_are_available_and_unknown_names_are_none() {
        assert_eq!(availability("alloclab-pmem"), Some(Ok(())));
        assert_eq!(availability("dram"), Some(Ok(())));
        assert_eq!(availability("system"), None);
    }

    #[test]
    fn every_persistent_heap_dispatches_by_name() {
        struct Name;
        impl PersistentHeapTask for Name {
            type Output = &'static str;
            fn run<H: PersistentAllocator>(self, name: &'static str) -> &'static str {
                name
            }
        }
        for a in ALLOCATORS {
            let name = with_persistent_heap(a.name, Name);
            if a.fits(Capability::PersistentHeap) {
                assert_eq!(name, Some(a.name));
            } else {
                assert_eq!(name, None, "{}", a.name);
            }
        }
    }
}
