//! [`PersistentAllocator`]: the extension of [`Allocator`] for heaps that live in a pool and
//! survive their process (alloclab-pmem, PMDK's libpmemobj, and a DRAM baseline that
//! pretends to).
//!
//! # Offsets, not addresses
//!
//! A persistent heap names a block by its 8-byte offset from the pool's base; 0 is null.
//! The offset is what a persistent structure stores (in the root or in a block) to link a
//! block, and it stays valid when the pool is mapped elsewhere by a later process. The
//! heap's [`Allocator::Handle`] is that offset in a type of its choosing
//! ([`PersistentHandle`]: alloclab-pmem's `PPtr<u8>`, a plain `u64` elsewhere).
//!
//! # Crash atomicity
//!
//! "Durable" means flushed and fenced: after a crash the word holds the value. Two calls
//! are crash-atomic together with the persistent word that receives the block:
//! [`allocate_into`](PersistentAllocator::allocate_into) (after a crash the word holds its
//! old value and the block is free, or the block and it is live) and
//! [`free_from`](PersistentAllocator::free_from) (the block is freed and the word is 0, or
//! neither). [`allocate`](Allocator::allocate) /
//! [`allocate_unlinked`](PersistentAllocator::allocate_unlinked) and
//! [`release`](PersistentAllocator::release) are for callers that link and unlink blocks
//! durably themselves (a storage engine's log or commit): a crash before the caller's link
//! is durable frees the block in heaps that recover by reachability (alloclab-pmem) and may
//! leak it in heaps that persist their allocation state (PMDK).

use core::fmt;
use std::path::Path;

use crate::{Allocator, BlockHandle};

/// The block alignment every [`PersistentAllocator`] guarantees: a cache line, so that a
/// block's first line is its own to flush.
pub const PERSISTENT_BLOCK_ALIGN: usize = 64;

/// A persistent heap's handle: a block's offset from the pool's base, 0 for null.
///
/// # Safety
///
/// `Self` has the size, alignment and representation of a `u64` holding
/// [`offset`](Self::offset), so that a persistent word (`*mut u64`) may be read and written
/// as a `*mut Self` and back; [`BlockHandle::address`] is the offset.
pub unsafe trait PersistentHandle: BlockHandle {
    /// The block's offset from the pool's base (0: null).
    fn offset(self) -> u64;
    /// The handle of the block at `offset` (0: null).
    fn from_offset(offset: u64) -> Self;
}

// SAFETY: a u64 is its own representation; its `address` is itself.
unsafe impl PersistentHandle for u64 {
    #[inline]
    fn offset(self) -> u64 {
        self
    }
    #[inline]
    fn from_offset(offset: u64) -> Self {
        offset
    }
}

/// Counters of a heap's persistence: what making bytes durable cost so far.
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

/// Why a persistent heap refused a call: one line that names the heap and the cause
/// (`pmdk: pmemobj_open /dev/shm/x: Invalid argument`, `alloclab-pmem: slot 3 is empty`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistentError(String);

impl PersistentError {
    /// An error with this message (conventionally `heap-name: what went wrong`).
    #[cold]
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PersistentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PersistentError {}

impl From<PersistentError> for String {
    fn from(e: PersistentError) -> String {
        e.0
    }
}

impl From<String> for PersistentError {
    fn from(message: String) -> Self {
        Self(message)
    }
}

/// A heap that lives in a pool and survives its process (see the module
/// documentation): the [`Allocator`] calls, plus the root, the crash-atomic
/// [`allocate_into`](Self::allocate_into) / [`free_from`](Self::free_from), the caller's
/// own flush and fence, and creating and reopening (recovering) a pool by path.
///
/// Every block is at least [`PERSISTENT_BLOCK_ALIGN`]-aligned. Every `*mut u64` destination
/// must be an 8-byte-aligned word inside the heap's root or a live block.
///
/// [`Allocator::allocate`] is [`allocate_unlinked`](Self::allocate_unlinked) for the
/// layout's size (the alignment at most [`PERSISTENT_BLOCK_ALIGN`]);
/// [`Allocator::deallocate`] is [`release`](Self::release).
pub trait PersistentAllocator: Allocator<Handle: PersistentHandle> + Sized + 'static {
    /// Whether the heap survives its process: `false` for a DRAM baseline, whose
    /// [`open`](Self::open) always fails and which has no recovery to measure.
    const DURABLE: bool = true;

    /// Whether the heap can be used on this machine; a one-line reason if not (a missing
    /// library: `libpmemobj.so.1 not found: install libpmemobj-dev`).
    ///
    /// # Errors
    ///
    /// The reason.
    fn available() -> Result<(), PersistentError> {
        Ok(())
    }

    /// Creates a pool of `pool_bytes` at `path` (which must not exist) with a zeroed root of
    /// `root_size` bytes.
    ///
    /// # Errors
    ///
    /// A one-line message naming the path: the file exists, the size is too small, the
    /// library is missing.
    fn create(path: &Path, pool_bytes: usize, root_size: usize) -> Result<Self, PersistentError>;

    /// Opens the pool at `path`, recovering it as the heap does after a crash or a clean
    /// close.
    ///
    /// # Errors
    ///
    /// A one-line message naming the path (not a pool, another heap's pool, corrupted).
    fn open(path: &Path) -> Result<Self, PersistentError>;

    /// The root: [`root_size`](Self::root_size) bytes, cache-line aligned, zeroed when the
    /// pool was created, where the application keeps what it must find after a reopen.
    fn root(&self) -> *mut u8;

    /// Bytes in the root.
    fn root_size(&self) -> usize;

    /// The address of the block at offset `off` in this mapping (0 gives a null pointer).
    fn at(&self, off: u64) -> *mut u8;

    /// The offset of `p`, an address inside the pool (the inverse of [`at`](Self::at)).
    fn offset_of(&self, p: *const u8) -> u64;

    /// Allocates `size` bytes, not linked from anywhere: the block is the caller's to fill
    /// and to link, durably, from a persistent structure (see the module
    /// documentation for what a crash before the link does).
    ///
    /// # Errors
    ///
    /// Zero or too large a size, out of space, the heap failed.
    fn allocate_unlinked(&self, size: usize) -> Result<u64, PersistentError>;

    /// Frees the block at `off`, which the caller has already unlinked durably.
    ///
    /// # Errors
    ///
    /// `off` is not the start of a live block (a double free included); nothing changes.
    ///
    /// # Safety
    ///
    /// No durable word reachable from the root may still name the block, and no pointer
    /// into it may be used after the call.
    unsafe fn release(&self, off: u64) -> Result<(), PersistentError>;

    /// Allocates one block of each of `sizes`, as
    /// [`allocate_unlinked`](Self::allocate_unlinked) does each, and appends their offsets
    /// to `out` in order: all of them, or none (on error the blocks taken for earlier sizes
    /// are freed and `out` is as it was). A heap that can take them for the price of one
    /// visit to its allocator does (alloclab-pmem: one visit to the thread's cache; PMDK:
    /// one `pmemobj_publish`); the default takes them one by one.
    ///
    /// # Errors
    ///
    /// As [`allocate_unlinked`](Self::allocate_unlinked), for the first size that fails.
    fn allocate_unlinked_many(
        &self,
        sizes: &[usize],
        out: &mut Vec<u64>,
    ) -> Result<(), PersistentError> {
        let start = out.len();
        for &size in sizes {
            match self.allocate_unlinked(size) {
                Ok(off) => out.push(off),
                Err(e) => {
                    for off in out.drain(start..) {
                        // SAFETY: allocated just now, linked nowhere, not used again.
                        let _ = unsafe { self.release(off) };
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Frees every block of `offs`, as [`release`](Self::release) does each (a heap that can
    /// free them for the price of one visit to its allocator does; the default frees them
    /// one by one).
    ///
    /// # Errors
    ///
    /// The first block refused, which changes nothing; every other block is still freed.
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release), for every block.
    unsafe fn release_many(&self, offs: &[u64]) -> Result<(), PersistentError> {
        let mut first = Ok(());
        for &off in offs {
            // SAFETY: the caller's contract, for each block.
            let freed = unsafe { self.release(off) };
            if first.is_ok() {
                first = freed;
            }
        }
        first
    }

    /// Frees every block of `frees`, as [`release_many`](Self::release_many), then
    /// allocates `size` bytes, as [`allocate_unlinked`](Self::allocate_unlinked): for a
    /// caller that gives blocks back where it takes a new one, so that a heap that can do
    /// both for the price of one visit to its allocator does; the default makes the two
    /// calls.
    ///
    /// # Errors
    ///
    /// The first block refused, as [`release_many`](Self::release_many) (every other block
    /// is still freed, and nothing is allocated); then as
    /// [`allocate_unlinked`](Self::allocate_unlinked). A heap may hand the last block of
    /// `frees` straight back as the allocation without checking it (alloclab-pmem does,
    /// when its size class fits), so a block that is not live need not be refused here.
    ///
    /// # Safety
    ///
    /// As [`release`](Self::release), for every block of `frees`; besides, every block of
    /// `frees` is live (allocated, and not freed since).
    unsafe fn release_many_then_allocate(
        &self,
        frees: &[u64],
        size: usize,
    ) -> Result<u64, PersistentError> {
        // SAFETY: the caller's contract.
        unsafe { self.release_many(frees) }?;
        self.allocate_unlinked(size)
    }

    /// Allocates `size` bytes and stores the block's offset into `dest`, atomically with
    /// respect to a crash: after one, `dest` holds its old value (and the block is free) or
    /// the block (and it is live). Returns the offset.
    ///
    /// # Errors
    ///
    /// As [`allocate_unlinked`](Self::allocate_unlinked); `dest` outside the pool. Nothing
    /// is written on error.
    ///
    /// # Safety
    ///
    /// `dest` is an aligned word of the root or of a live block that no other thread
    /// accesses during the call; whatever block it named before is the caller's to free.
    unsafe fn allocate_into(&self, dest: *mut u64, size: usize) -> Result<u64, PersistentError>;

    /// Frees the block `dest` names and stores 0 into `dest`, atomically with respect to a
    /// crash.
    ///
    /// # Errors
    ///
    /// `dest` holds 0 or not the start of a live block; nothing is written.
    ///
    /// # Safety
    ///
    /// As [`allocate_into`](Self::allocate_into); no pointer into the block may be used
    /// after it.
    unsafe fn free_from(&self, dest: *mut u64) -> Result<(), PersistentError>;

    /// Writes back the cache lines of `len` bytes at `p` (an address inside the pool)
    /// toward persistence; durable after the next [`fence`](Self::fence).
    fn flush(&self, p: *const u8, len: usize);

    /// Orders every earlier flush: what they covered is durable once this returns.
    fn fence(&self);

    /// [`flush`](Self::flush) then [`fence`](Self::fence).
    fn persist(&self, p: *const u8, len: usize) {
        self.flush(p, len);
        self.fence();
    }

    /// The bytes a block asked for with `size` really spans (its size class), so that a
    /// caller can initialise all of it: a reused block's unrequested tail may hold stale
    /// words equal to block offsets, which a heap that recovers by conservative reachability
    /// (alloclab-pmem) would take for links (a leak). The default is `size`.
    fn usable_size(&self, size: usize) -> usize {
        size
    }

    /// Flushes and fences so far, all threads together, or `None` where the heap does not
    /// count them (PMDK, which flushes inside the library; a DRAM baseline).
    fn persist_counts(&self) -> Option<PersistStats>;
}
