//! The persistence interface and its three media.
//!
//! [`Medium`] is the one narrow interface: bytes at offsets `0..len()` of one mapping, made
//! durable by [`Medium::flush`] then [`Medium::fence`]. Its implementations, one per file:
//!
//! * [`sim::SimMedium`] — the crash simulator: a durable image beside the working one;
//!   flushes snapshot cache lines, fences move the snapshots into the durable image, and
//!   [`sim::SimMedium::crash_image`] draws what a power failure would leave now.
//! * [`native::FileMedium`] — a file mapped with `mmap` and flushed by this crate: CLWB,
//!   CLFLUSHOPT or CLFLUSH (chosen by CPUID) when the mapping is persistent memory or
//!   `PMEM_IS_PMEM_FORCE=1` says to act as if it were, `msync` otherwise, nothing under
//!   `PMEM_NO_FLUSH=1` (eADR).
//! * [`libpmem::PmemFileMedium`] — a file mapped and flushed by libpmem, which is loaded with
//!   `dlopen` at run time so that nothing here needs PMDK to build or run.
//!
//! [`create_best`] and [`open_best`] pick libpmem when it loads and the native medium
//! otherwise. The two file media share one set of rules ([`MediumError`] says which broke):
//! `create` refuses an existing file, `open` refuses an empty one, and a pool file is held
//! under an exclusive `flock` for the medium's life, so a second open fails.

mod counters;
mod error;
mod file;
pub mod libpmem;
pub mod native;
pub mod sim;

use std::path::Path;

pub use counters::AtomicPersistStats;
pub use error::MediumError;
pub use libpmem::{Libpmem, PmemFileMedium};
pub use native::FileMedium;
pub use sim::{CrashCapture, SimMedium, SplitMix64};

/// Bytes per cache line: the unit of flushing and of crash atomicity (an aligned 8-byte
/// store is also failure-atomic within its line).
pub const CACHE_LINE: usize = 64;

/// What kind of medium a pool lives on, and how it flushes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediumKind {
    /// A file mapped by libpmem; `is_pmem` as `pmem_is_pmem` says (forced to true by
    /// `PMEM_IS_PMEM_FORCE=1`).
    Libpmem {
        /// Whether libpmem flushes with cache-line instructions (true) or `msync` (false).
        is_pmem: bool,
    },
    /// A file mapped with `mmap`, flushed by this crate.
    Native {
        /// The instruction or call used.
        flush: NativeFlush,
    },
    /// The crash simulator.
    Simulated,
}

/// How the native medium flushes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NativeFlush {
    /// CLWB + SFENCE.
    Clwb,
    /// CLFLUSHOPT + SFENCE.
    ClflushOpt,
    /// CLFLUSH (ordered; the fence is a no-op besides SFENCE).
    Clflush,
    /// `msync(MS_SYNC)` of the pages touched (files that are not persistent memory).
    Msync,
    /// Nothing (eADR: caches are in the persistence domain), as `PMEM_NO_FLUSH=1` asks.
    None,
}

/// Counters of a medium: what persistence cost so far (the core type, so that every
/// persistent heap reports the same one).
pub use alloclab_core::PersistStats;

/// Bytes at offsets `0..len()` of one mapping, and the operations that make them durable.
///
/// Offsets, not addresses, so that the simulator can keep a durable image indexed the same
/// way. A store to the mapping is durable once the line holding it has been flushed and a
/// fence has followed the flush; until then a crash may keep its old or its new contents.
///
/// # Safety
///
/// Implementors guarantee that `base()..base() + len()` is readable and writable memory for
/// the medium's whole life, never moved.
pub unsafe trait Medium: Send + Sync {
    /// The first byte of the mapping.
    fn base(&self) -> *mut u8;
    /// Bytes in the mapping.
    fn len(&self) -> usize;
    /// Whether the mapping is empty (never, for a pool).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Starts writing back the cache lines that hold `offset..offset + len` (no ordering
    /// guarantee until [`fence`](Self::fence)).
    fn flush(&self, offset: usize, len: usize);
    /// Waits until every line flushed before it is durable.
    fn fence(&self);
    /// `flush` then `fence`.
    fn persist(&self, offset: usize, len: usize) {
        self.flush(offset, len);
        self.fence();
    }
    /// The counters so far.
    fn stats(&self) -> PersistStats;
    /// What kind of medium this is.
    fn kind(&self) -> MediumKind;
}

// SAFETY: a box delegates every method to the medium it owns, which upholds the contract;
// the box never moves the medium's mapping.
unsafe impl<T: Medium + ?Sized> Medium for Box<T> {
    fn base(&self) -> *mut u8 {
        (**self).base()
    }
    fn len(&self) -> usize {
        (**self).len()
    }
    fn is_empty(&self) -> bool {
        (**self).is_empty()
    }
    fn flush(&self, offset: usize, len: usize) {
        (**self).flush(offset, len)
    }
    fn fence(&self) {
        (**self).fence()
    }
    fn persist(&self, offset: usize, len: usize) {
        (**self).persist(offset, len)
    }
    fn stats(&self) -> PersistStats {
        (**self).stats()
    }
    fn kind(&self) -> MediumKind {
        (**self).kind()
    }
}

/// Cache lines that hold any byte of `offset..offset + len` (0 when `len` is 0).
pub fn lines_touched(offset: usize, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    let first = offset / CACHE_LINE;
    let last = (offset + len - 1) / CACHE_LINE;
    (last - first + 1) as u64
}

/// Panics unless `offset..offset + len` lies within a medium of `medium_len` bytes: flushing
/// outside the mapping is a caller's bug, and on a file medium it would fault.
#[track_caller]
pub(crate) fn check_range(offset: usize, len: usize, medium_len: usize) {
    assert!(
        offset.checked_add(len).is_some_and(|end| end <= medium_len),
        "flush of {offset}..{offset}+{len} outside a medium of {medium_len} bytes"
    );
}

/// Creates a pool file of `len` bytes at `path` on the best medium available: libpmem when
/// `libpmem.so.1` loads, else [`FileMedium`] (native flushing).
///
/// # Errors
///
/// As [`PmemFileMedium::create`] or [`FileMedium::create`]: the file exists, `len` is 0 or
/// too large, no space, permission, or the mapping failed.
pub fn create_best(path: impl AsRef<Path>, len: usize) -> Result<Box<dyn Medium>, MediumError> {
    let path = path.as_ref();
    match Libpmem::load() {
        Ok(_) => Ok(Box::new(PmemFileMedium::create(path, len)?)),
        Err(_) => Ok(Box::new(FileMedium::create(path, len)?)),
    }
}

/// Opens the existing pool file at `path` on the best medium available (as [`create_best`]).
///
/// # Errors
///
/// As [`PmemFileMedium::open`] or [`FileMedium::open`]: not found, permission, empty file,
/// pool already open by another process, or the mapping failed.
pub fn open_best(path: impl AsRef<Path>) -> Result<Box<dyn Medium>, MediumError> {
    let path = path.as_ref();
    match Libpmem::load() {
        Ok(_) => Ok(Box::new(PmemFileMedium::open(path)?)),
        Err(_) => Ok(Box::new(FileMedium::open(path)?)),
    }
}

impl std::fmt::Debug for dyn Medium {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Medium")
            .field("kind", &self.kind())
            .field("len", &self.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod stats_tests {
    use super::*;

    #[test]
    fn since_subtracts_each_counter_and_saturates_at_zero() {
        let before = PersistStats {
            lines_flushed: 3,
            flushes: 2,
            fences: 1,
            bytes_flushed: 100,
        };
        let after = PersistStats {
            lines_flushed: 10,
            flushes: 2,
            fences: 4,
            bytes_flushed: 90,
        };
        assert_eq!(
            after.since(&before),
            PersistStats {
                lines_flushed: 7,
                flushes: 0,
                fences: 3,
                bytes_flushed: 0
            }
        );
    }
}
