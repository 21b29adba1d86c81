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

mod error;
mod file;
pub mod libpmem;
pub mod native;
pub mod sim;

use std::path::Path;

use alloclab_core::sync::atomic::{AtomicU64, Ordering};

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

/// Counters of a medium: what persistence cost so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PersistStats {
    /// Cache lines flushed (each line of each `flush` call counts).
    pub lines_flushed: u64,
    /// `flush` calls.
    pub flushes: u64,
    /// `fence` calls.
    pub fences: u64,
    /// Bytes covered by `flush` calls.
    pub bytes_flushed: u64,
}

impl PersistStats {
    /// The counts since `earlier`, a snapshot of the same counters taken before (each
    /// saturating at 0).
    pub fn since(&self, earlier: &PersistStats) -> PersistStats {
        PersistStats {
            lines_flushed: self.lines_flushed.saturating_sub(earlier.lines_flushed),
            flushes: self.flushes.saturating_sub(earlier.flushes),
            fences: self.fences.saturating_sub(earlier.fences),
            bytes_flushed: self.bytes_flushed.saturating_sub(earlier.bytes_flushed),
        }
    }
}

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

/// [`PersistStats`] kept with atomics, for media shared between threads.
///
/// **Flushes are counted per thread and published at the thread's next fence.** A locked
/// read-modify-write (`fetch_add`) waits on x86 for every earlier `CLWB`/`CLFLUSHOPT` of its
/// thread to complete, as a fence does; counting each flush with one would turn a batch of
/// flushes followed by one fence into a fence per flush (measured: four 8-byte persists
/// under one fence went from 200 ns to 740 ns). So [`record_flush`](Self::record_flush)
/// only adds to plain thread-local counters, and [`record_fence`](Self::record_fence)
/// publishes them with the fence's own count, when no flush is outstanding any more.
/// Pending counts are also published when the thread flushes another medium and when it
/// exits.
///
/// A [`snapshot`](Self::snapshot) sees every count of the calling thread, and every other
/// thread's counts up to that thread's last fence (all of them once it has been joined);
/// counters are relaxed, so a snapshot taken while threads run may mix counts from slightly
/// different moments.
#[derive(Debug, Default)]
pub struct AtomicPersistStats {
    shared: std::sync::Arc<SharedCounts>,
}

#[derive(Debug, Default)]
struct SharedCounts {
    lines_flushed: AtomicU64,
    flushes: AtomicU64,
    fences: AtomicU64,
    bytes_flushed: AtomicU64,
}

/// One thread's flushes on one medium that no fence of the thread has published yet.
struct PendingFlushes {
    owner: std::sync::Weak<SharedCounts>,
    lines_flushed: u64,
    flushes: u64,
    bytes_flushed: u64,
}

impl PendingFlushes {
    fn is_for(&self, shared: &std::sync::Arc<SharedCounts>) -> bool {
        std::ptr::eq(self.owner.as_ptr(), std::sync::Arc::as_ptr(shared))
    }

    /// Adds the pending counts to their medium's counters (if it still exists) and zeroes
    /// them.
    fn publish(&mut self) {
        if self.flushes == 0 {
            return;
        }
        if let Some(shared) = self.owner.upgrade() {
            publish_to(&shared, self);
        }
        self.lines_flushed = 0;
        self.flushes = 0;
        self.bytes_flushed = 0;
    }
}

fn publish_to(shared: &SharedCounts, p: &PendingFlushes) {
    shared.flushes.fetch_add(p.flushes, Ordering::Relaxed);
    shared
        .lines_flushed
        .fetch_add(p.lines_flushed, Ordering::Relaxed);
    shared
        .bytes_flushed
        .fetch_add(p.bytes_flushed, Ordering::Relaxed);
}

/// The calling thread's pending flushes (on the last medium it flushed).
struct PendingSlot(std::cell::RefCell<Option<PendingFlushes>>);

impl Drop for PendingSlot {
    fn drop(&mut self) {
        if let Some(p) = self.0.get_mut() {
            p.publish();
        }
    }
}

thread_local! {
    static PENDING: PendingSlot = const { PendingSlot(std::cell::RefCell::new(None)) };
}

impl AtomicPersistStats {
    /// All zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one `flush(offset, len)` call (in the calling thread's pending counts).
    pub fn record_flush(&self, offset: usize, len: usize) {
        let lines = lines_touched(offset, len);
        let counted = PENDING.try_with(|slot| {
            let mut slot = slot.0.borrow_mut();
            match &mut *slot {
                Some(p) if p.is_for(&self.shared) => {
                    p.lines_flushed += lines;
                    p.flushes += 1;
                    p.bytes_flushed += len as u64;
                }
                other => {
                    if let Some(p) = other.as_mut() {
                        p.publish();
                    }
                    *other = Some(PendingFlushes {
                        owner: std::sync::Arc::downgrade(&self.shared),
                        lines_flushed: lines,
                        flushes: 1,
                        bytes_flushed: len as u64,
                    });
                }
            }
        });
        if counted.is_err() {
            // The thread is exiting and its slot is gone: count directly.
            publish_to(
                &self.shared,
                &PendingFlushes {
                    owner: std::sync::Weak::new(),
                    lines_flushed: lines,
                    flushes: 1,
                    bytes_flushed: len as u64,
                },
            );
        }
    }

    /// Counts one `fence` call and publishes the calling thread's pending flushes on this
    /// medium. Call it after the fence instruction, so that no flush is outstanding.
    pub fn record_fence(&self) {
        let _ = PENDING.try_with(|slot| {
            if let Some(p) = slot
                .0
                .borrow_mut()
                .as_mut()
                .filter(|p| p.is_for(&self.shared))
            {
                p.publish();
            }
        });
        self.shared.fences.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now: everything published, plus the calling thread's pending flushes.
    pub fn snapshot(&self) -> PersistStats {
        let s = &self.shared;
        let mut stats = PersistStats {
            lines_flushed: s.lines_flushed.load(Ordering::Relaxed),
            flushes: s.flushes.load(Ordering::Relaxed),
            fences: s.fences.load(Ordering::Relaxed),
            bytes_flushed: s.bytes_flushed.load(Ordering::Relaxed),
        };
        let _ = PENDING.try_with(|slot| {
            if let Some(p) = slot.0.borrow().as_ref().filter(|p| p.is_for(&self.shared)) {
                stats.lines_flushed += p.lines_flushed;
                stats.flushes += p.flushes;
                stats.bytes_flushed += p.bytes_flushed;
            }
        });
        stats
    }
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

    #[test]
    fn flushes_are_seen_by_their_thread_at_once_and_by_others_after_a_fence_or_exit() {
        let a = std::sync::Arc::new(AtomicPersistStats::new());
        let b = AtomicPersistStats::new();
        a.record_flush(0, 64);
        a.record_flush(60, 8);
        assert_eq!(
            a.snapshot().flushes,
            2,
            "the flushing thread sees its own counts"
        );
        assert_eq!(a.snapshot().lines_flushed, 3);
        let other = {
            let a = a.clone();
            std::thread::spawn(move || a.snapshot()).join().unwrap()
        };
        assert_eq!(
            other.flushes, 0,
            "another thread sees them only after a fence"
        );
        // Flushing another medium publishes the first medium's pending counts.
        b.record_flush(0, 1);
        a.record_fence();
        assert_eq!(a.snapshot().flushes, 2);
        assert_eq!(b.snapshot().flushes, 1);
        assert_eq!(b.snapshot().fences, 0);
        let a2 = a.clone();
        std::thread::spawn(move || {
            a2.record_flush(128, 128);
            // No fence: the thread's exit publishes it.
        })
        .join()
        .unwrap();
        let after = a.snapshot();
        assert_eq!(
            (
                after.flushes,
                after.lines_flushed,
                after.fences,
                after.bytes_flushed
            ),
            (3, 5, 1, 64 + 8 + 128)
        );
        b.record_fence();
        let other = std::thread::spawn(move || b.snapshot()).join().unwrap();
        assert_eq!((other.flushes, other.fences), (1, 1));
    }
}
