//! The persistence interface and its three media.

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
