//! PMDK's libpmemobj as a [`PersistentAllocator`]: [`PmdkHeap`], over the run-time loaded
//! [`Libpmemobj`]. The `pmem` suite's slots and the `storage` suite's engines both use it.
//!
//! | `PersistentAllocator` call | libpmemobj | crash-atomic? |
//! |---|---|---|
//! | [`allocate_unlinked`](PersistentAllocator::allocate_unlinked) | `pmemobj_reserve` + `pmemobj_publish` (what `pmemobj_alloc` into a DRAM `PMEMoid` does) | the allocation is; the caller's link is its own (a crash before it leaks the block, as in N-Store) |
//! | [`allocate_unlinked_many`](PersistentAllocator::allocate_unlinked_many) | `pmemobj_reserve` of each + one `pmemobj_publish` (per 8) | as `alloc` |
//! | [`release`](PersistentAllocator::release) | `pmemobj_free` of a DRAM `PMEMoid` | yes |
//! | [`allocate_into`](PersistentAllocator::allocate_into) | `pmemobj_reserve` + `pmemobj_set_value(dest, off)` + `pmemobj_publish` of both | yes: one redo log |
//! | [`free_from`](PersistentAllocator::free_from) | `pmemobj_defer_free` + `pmemobj_set_value(dest, 0)` + `pmemobj_publish` of both | yes: one redo log |
//! | [`flush`](PersistentAllocator::flush) / [`fence`](PersistentAllocator::fence) | `pmemobj_flush` / `pmemobj_drain` | — |
//! | root | `pmemobj_root` | — |
//!
//! **Why reserve/publish for the `*_into` calls.** The engines store 8-byte offsets, but
//! `pmemobj_alloc` with a destination inside the pool writes a whole 16-byte `PMEMoid`
//! there (it logs `pool_uuid_lo` and `off` together), which would clobber the 8 bytes before
//! the engine's word. Allocating into a DRAM `PMEMoid` and then storing, flushing and
//! fencing the offset would be cheaper but not crash-atomic: a crash between the two leaks
//! the block for good (PMDK never collects unreachable objects). PMDK's action API does what
//! the contract asks instead: `pmemobj_set_value` adds the 8-byte store of the offset (or of
//! 0) to the same redo log that `pmemobj_publish` applies to the heap's bitmap, so after a
//! crash the word and the block agree. The pool UUID is implied (every offset is of this
//! pool). That is the same amount of logging `pmemobj_alloc` does for an in-pool `PMEMoid`
//! (one redo log with the metadata change and the destination), so the comparison is fair.
//!
//! **Cache-line-aligned blocks.** PMDK's objects follow a 16-byte header, so they are only
//! 16-byte aligned; alloclab-pmem's blocks, and what the engines expect of a block offset,
//! are 64-byte aligned. Each block is therefore the first 64-byte boundary at least 8 bytes
//! into a PMDK object 64 bytes larger than the size asked rounded up to whole cache lines
//! (the block's [`usable_size`](PersistentAllocator::usable_size)), and the object's offset is kept in the 8
//! bytes before the block (written and flushed before the publish, which drains before it
//! commits), where `release` and `free_from` find it. PMDK pays for this with 64 bytes per
//! block and one cache-line flush per allocation, no extra fence.
//!
//! PMDK flushes through libpmem, with cache-line instructions only when the pool counts as
//! persistent memory (on `/dev/shm`: `PMEM_IS_PMEM_FORCE=1`, which the `storage` worker
//! sets before libpmemobj loads). It does not count its flushes:
//! [`persist_counts`](PersistentAllocator::persist_counts) is `None` (the engines' own are still counted
//! in their `Split`s).
//!
//! PMDK's release build does not detect a double free (it corrupts its heap), so a
//! `LineMap` in DRAM, with a leaf for every line of the pool made when the pool is
//! opened, remembers the blocks handed out and freed in this session and refuses a second
//! free: one atomic instruction per allocation and per free, as for the DRAM baseline.
//! Blocks from before a reopen are not in it: their first free is checked only for being
//! inside the pool and aligned as PMDK's objects are (and is then remembered).

use std::ffi::CStr;
use std::path::Path;
use std::ptr::NonNull;

use std::alloc::Layout;

use alloclab_core::{
    AllocError, AllocErrorKind, Allocator, PERSISTENT_BLOCK_ALIGN, PersistStats,
    PersistentAllocator, PersistentError, Stats,
};

use super::libpmemobj::{Libpmemobj, PMEMoid, PobjAction, Pool, c_path};
use super::lines::{LineMap, Taken};

/// The pool layout name passed to `pmemobj_create` and checked by `pmemobj_open`: a PMDK
/// pool that another program laid out is refused.
pub const LAYOUT: &CStr = c"alloclab";
/// The type number of every block.
const TYPE_NUM: u64 = 2;
/// PMDK's objects are 16-byte aligned (compact headers).
const OBJECT_ALIGN: u64 = 16;
/// The heap's blocks are cache-line aligned, as alloclab-pmem's (the engines check that
/// links are multiples of 64).
const BLOCK_ALIGN: u64 = PERSISTENT_BLOCK_ALIGN as u64;
/// Reservations [`PersistentAllocator::allocate_unlinked_many`] publishes together.
const MANY_CHUNK: usize = 8;
/// The root is cache-line aligned: PMDK's root object is asked for this much more and the
/// heap's root starts at the first 64-byte boundary inside it.
const ROOT_ALIGN: usize = 64;

/// A `pmemobj` pool as a [`PersistentAllocator`] (see the module documentation). Closed
/// on drop.
pub struct PmdkHeap {
    lib: &'static Libpmemobj,
    pool: NonNull<Pool>,
    pool_bytes: u64,
    uuid_lo: u64,
    root: NonNull<u8>,
    root_size: usize,
    blocks: LineMap,
}

// SAFETY: libpmemobj's allocation, free, action, flush and drain functions are thread-safe;
// the pool handle, UUID and root are only read after construction; the line map is shared
// through atomics.
unsafe impl Send for PmdkHeap {}
// SAFETY: as for `Send`.
unsafe impl Sync for PmdkHeap {}

impl std::fmt::Debug for PmdkHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmdkHeap")
            .field("pool_bytes", &self.pool_bytes)
            .field("root_size", &self.root_size)
            .finish_non_exhaustive()
    }
}

impl PmdkHeap {
    /// The heap over an open pool; `new_root` is the root size to create (at `create`) or
    /// `None` to take the existing root (at `open`). Closes the pool on error.
    fn over(
        lib: &'static Libpmemobj,
        pool: NonNull<Pool>,
        path: &Path,
        new_root: Option<usize>,
    ) -> Result<Self, String> {
        let fail = |message: String| {
            // SAFETY: opened or created by the caller, used by nobody else yet.
            unsafe { (lib.close)(pool.as_ptr()) };
            Err(message)
        };
        let pool_bytes = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) => return fail(format!("pmdk: {}: {e}", path.display())),
        };
        let size = match new_root {
            Some(root_size) => root_size.max(1) + ROOT_ALIGN,
            // SAFETY: an open pool.
            None => unsafe { (lib.root_size)(pool.as_ptr()) },
        };
        if size <= ROOT_ALIGN {
            return fail(format!(
                "pmdk: {}: a root of {size} bytes is not a storage pool's",
                path.display()
            ));
        }
        // SAFETY: an open pool; an existing root of at least `size` bytes is returned as it
        // is, a new one is allocated zeroed (and persisted) by PMDK.
        let oid = unsafe { (lib.root)(pool.as_ptr(), size) };
        // SAFETY: `oid` is null or an object of this open pool.
        let object = unsafe { lib.direct(oid) };
        if object.is_null() {
            return fail(format!(
                "pmdk: {}: pmemobj_root({size}): {}",
                path.display(),
                lib.errormsg()
            ));
        }
        let skip = object.align_offset(ROOT_ALIGN);
        // SAFETY: `skip < ROOT_ALIGN < size`: inside the root object.
        let root = unsafe { NonNull::new_unchecked(object.add(skip)) };
        let blocks = LineMap::covering(pool_bytes).map_err(|e| format!("pmdk: {e}"))?;
        Ok(Self {
            lib,
            pool,
            pool_bytes,
            uuid_lo: oid.pool_uuid_lo,
            root,
            root_size: size - ROOT_ALIGN,
            blocks,
        })
    }

    fn base(&self) -> *mut u8 {
        self.pool.as_ptr().cast()
    }

    fn oid(&self, off: u64) -> PMEMoid {
        PMEMoid {
            pool_uuid_lo: self.uuid_lo,
            off,
        }
    }

    /// Checks that `dest` is an aligned word inside the pool.
    fn check_dest(&self, dest: *mut u64) -> Result<(), String> {
        let off = self.offset_of(dest.cast());
        if !dest.is_aligned() || off == 0 || off.saturating_add(8) > self.pool_bytes {
            return Err(format!(
                "pmdk: destination {dest:p} is not an aligned word of the pool"
            ));
        }
        Ok(())
    }

    /// Checks that `off` may be a block of the pool, marks it freed in the table and
    /// returns PMDK's object offset behind it (read from its back-pointer).
    fn take_block(&self, off: u64) -> Result<(Taken, u64), String> {
        let refuse = || format!("pmdk: {off:#x} is not the start of a block");
        if off < BLOCK_ALIGN || !off.is_multiple_of(BLOCK_ALIGN) || off >= self.pool_bytes {
            return Err(refuse());
        }
        // SAFETY: `off - 8` is an aligned word inside the pool (checked above).
        let object = unsafe { self.at(off - 8).cast::<u64>().read() };
        if object >= off || off - object > BLOCK_ALIGN || !object.is_multiple_of(OBJECT_ALIGN) {
            return Err(refuse());
        }
        let known = self.blocks.take_adopting(off as usize);
        if known == Taken::Freed {
            return Err(format!(
                "pmdk: block at offset {off:#x} was freed already (double free refused)"
            ));
        }
        Ok((known, object))
    }

    fn restore_block(&self, off: u64, known: Taken) {
        self.blocks.restore(off as usize, known);
    }

    /// Records a published block as live. Cannot fail: the map covers the pool from its
    /// opening, and blocks are inside it and cache-line aligned.
    fn record(&self, block: u64) {
        let recorded = self.blocks.insert(block as usize, 0);
        debug_assert!(recorded.is_ok(), "{recorded:?}");
    }

    /// Reserves a block of `size` bytes (rounded up to whole cache lines): PMDK's object of
    /// that plus `BLOCK_ALIGN` bytes, the
    /// block at the first 64-byte boundary at least 8 bytes into it, and the object's offset
    /// in the 8 bytes before the block, flushed (the publish that follows drains it before
    /// its redo log commits). Returns the block's offset.
    fn reserve(&self, action: &mut PobjAction, size: usize) -> Result<u64, String> {
        if size == 0 {
            return Err("pmdk: cannot allocate 0 bytes".to_owned());
        }
        let padded = self
            .usable_size(size)
            .checked_add(BLOCK_ALIGN as usize)
            .ok_or_else(|| format!("pmdk: {size} bytes is too large"))?;
        // SAFETY: an open pool; the action lives in DRAM until published or cancelled.
        let oid = unsafe { (self.lib.reserve)(self.pool.as_ptr(), action, padded, TYPE_NUM) };
        if oid.is_null() {
            return Err(format!(
                "pmdk: pmemobj_reserve({padded}): {}",
                self.lib.errormsg()
            ));
        }
        let block = (oid.off + 8).next_multiple_of(BLOCK_ALIGN);
        let back = self.at(block - 8);
        // SAFETY: `block - 8 .. block + size` lies inside the reserved object of at least
        // `size + 64` bytes (`block - oid.off` is 8 to 64), which is ours alone.
        unsafe {
            back.cast::<u64>().write(oid.off);
            (self.lib.flush)(self.pool.as_ptr(), back.cast(), 8);
        }
        Ok(block)
    }

    /// Publishes `actions` (all prepared on this pool); cancels them on failure.
    fn publish(&self, actions: &mut [PobjAction], what: &str) -> Result<(), String> {
        let pool = self.pool.as_ptr();
        // SAFETY: prepared actions of this open pool, published once.
        if unsafe { (self.lib.publish)(pool, actions.as_mut_ptr(), actions.len()) } == 0 {
            return Ok(());
        }
        let message = format!("pmdk: pmemobj_publish ({what}): {}", self.lib.errormsg());
        // SAFETY: the actions were prepared and not applied: cancelling returns a reserved
        // block and drops a deferred free.
        unsafe { (self.lib.cancel)(pool, actions.as_mut_ptr(), actions.len()) };
        Err(message)
    }
}

impl Allocator for PmdkHeap {
    type Handle = u64;

    /// [`PersistentAllocator::allocate_unlinked`] of the layout's size; alignments up to a
    /// cache line.
    fn allocate(&self, layout: Layout) -> Result<u64, AllocError> {
        if layout.align() > PERSISTENT_BLOCK_ALIGN {
            return Err(AllocError::new(
                layout,
                AllocErrorKind::AlignmentUnsupported,
            ));
        }
        if layout.size() == 0 {
            return Err(AllocError::new(layout, AllocErrorKind::ZeroSize));
        }
        self.allocate_unlinked(layout.size())
            .map_err(|_| AllocError::new(layout, AllocErrorKind::Other("pmemobj_reserve failed")))
    }

    unsafe fn deallocate(&self, handle: u64, _layout: Layout) {
        // SAFETY: the caller's contract: a live block of this heap, used no more.
        let released = unsafe { self.release(handle) };
        debug_assert!(released.is_ok(), "deallocate: {released:?}");
    }

    fn name(&self) -> &str {
        "pmdk"
    }

    /// PMDK counts nothing the harness can read.
    fn stats(&self) -> Stats {
        Stats::default()
    }
}

impl PersistentAllocator for PmdkHeap {
    fn available() -> Result<(), PersistentError> {
        Libpmemobj::load().map(|_| ()).map_err(Into::into)
    }

    fn create(path: &Path, pool_bytes: usize, root_size: usize) -> Result<Self, PersistentError> {
        let lib = Libpmemobj::load()?;
        let c_path = c_path(path)?;
        // SAFETY: NUL-terminated path and layout; PMDK creates the file (refusing an existing
        // one) and returns a pool handle or null.
        let pool = unsafe { (lib.create)(c_path.as_ptr(), LAYOUT.as_ptr(), pool_bytes, 0o600) };
        let pool = NonNull::new(pool).ok_or_else(|| {
            format!(
                "pmdk: pmemobj_create {} ({pool_bytes} bytes): {}",
                path.display(),
                lib.errormsg()
            )
        })?;
        Ok(Self::over(lib, pool, path, Some(root_size))?)
    }

    fn open(path: &Path) -> Result<Self, PersistentError> {
        let lib = Libpmemobj::load()?;
        let c_path = c_path(path)?;
        // SAFETY: NUL-terminated path and layout; PMDK replays its logs and returns a handle
        // or null.
        let pool = unsafe { (lib.open)(c_path.as_ptr(), LAYOUT.as_ptr()) };
        let pool = NonNull::new(pool)
            .ok_or_else(|| format!("pmdk: pmemobj_open {}: {}", path.display(), lib.errormsg()))?;
        Ok(Self::over(lib, pool, path, None)?)
    }

    fn root(&self) -> *mut u8 {
        self.root.as_ptr()
    }

    fn root_size(&self) -> usize {
        self.root_size
    }

    fn at(&self, off: u64) -> *mut u8 {
        if off == 0 {
            return std::ptr::null_mut();
        }
        self.base().wrapping_add(off as usize)
    }

    fn offset_of(&self, p: *const u8) -> u64 {
        (p as usize).wrapping_sub(self.base() as usize) as u64
    }

    fn allocate_unlinked(&self, size: usize) -> Result<u64, PersistentError> {
        let mut action = [PobjAction::default()];
        let block = self.reserve(&mut action[0], size)?;
        self.publish(&mut action, "alloc")?;
        self.record(block);
        Ok(block)
    }

    /// One `pmemobj_publish` (one redo log) for each chunk of up to `MANY_CHUNK` (8)
    /// reservations, as an application that allocates several objects at once does with
    /// PMDK's action API.
    fn allocate_unlinked_many(
        &self,
        sizes: &[usize],
        out: &mut Vec<u64>,
    ) -> Result<(), PersistentError> {
        let start = out.len();
        for chunk in sizes.chunks(MANY_CHUNK) {
            let mut actions = [PobjAction::default(); MANY_CHUNK];
            let mut reserved = 0;
            let mut taken = Ok(());
            for (action, &size) in actions.iter_mut().zip(chunk) {
                match self.reserve(action, size) {
                    Ok(block) => {
                        out.push(block);
                        reserved += 1;
                    }
                    Err(e) => {
                        taken = Err(e);
                        break;
                    }
                }
            }
            let taken = match taken {
                Ok(()) => self.publish(&mut actions[..reserved], "alloc_many"),
                Err(e) => {
                    // SAFETY: reserved, not published: cancelling returns the blocks.
                    unsafe {
                        (self.lib.cancel)(self.pool.as_ptr(), actions.as_mut_ptr(), reserved)
                    };
                    Err(e)
                }
            };
            if let Err(e) = taken {
                out.truncate(out.len() - reserved);
                // SAFETY: the earlier chunks' blocks, allocated just now and linked nowhere.
                let _ = unsafe { self.release_many(&out[start..]) };
                out.truncate(start);
                return Err(e.into());
            }
            for &block in &out[out.len() - reserved..] {
                self.record(block);
            }
        }
        Ok(())
    }

    unsafe fn release(&self, off: u64) -> Result<(), PersistentError> {
        let (_, object) = self.take_block(off)?;
        let mut oid = self.oid(object);
        // SAFETY: `object` is the live PMDK object behind the block (the caller's contract;
        // a block freed in this session was refused above); the DRAM copy is nulled.
        unsafe { (self.lib.free)(&mut oid) };
        Ok(())
    }

    unsafe fn allocate_into(&self, dest: *mut u64, size: usize) -> Result<u64, PersistentError> {
        self.check_dest(dest)?;
        let mut actions = [PobjAction::default(); 2];
        let block = self.reserve(&mut actions[0], size)?;
        // SAFETY: `dest` is an aligned word of the pool (checked), ours alone (the caller's
        // contract); PMDK stores the block's offset there when the actions are published.
        unsafe { (self.lib.set_value)(self.pool.as_ptr(), &mut actions[1], dest, block) };
        self.publish(&mut actions, "alloc_into")?;
        self.record(block);
        Ok(block)
    }

    unsafe fn free_from(&self, dest: *mut u64) -> Result<(), PersistentError> {
        self.check_dest(dest)?;
        // SAFETY: an aligned word of the pool, ours alone (the caller's contract).
        let off = unsafe { dest.read() };
        if off == 0 {
            return Err(PersistentError::new("pmdk: free_from a null word"));
        }
        let (known, object) = self.take_block(off)?;
        let mut actions = [PobjAction::default(); 2];
        let pool = self.pool.as_ptr();
        // SAFETY: `object` is the live PMDK object behind the block (the caller's contract,
        // and not freed in this session: checked); `dest` as above.
        unsafe {
            (self.lib.defer_free)(pool, self.oid(object), &mut actions[0]);
            (self.lib.set_value)(pool, &mut actions[1], dest, 0);
        }
        if let Err(e) = self.publish(&mut actions, "free_from") {
            self.restore_block(off, known);
            return Err(e.into());
        }
        Ok(())
    }

    /// Blocks are whole cache lines: `size` rounded up to 64 bytes (what is reserved).
    fn usable_size(&self, size: usize) -> usize {
        size.next_multiple_of(BLOCK_ALIGN as usize)
    }

    fn flush(&self, p: *const u8, len: usize) {
        // SAFETY: an open pool; `p..p + len` is inside it (the trait's contract).
        unsafe { (self.lib.flush)(self.pool.as_ptr(), p.cast(), len) };
    }

    fn fence(&self) {
        // SAFETY: an open pool.
        unsafe { (self.lib.drain)(self.pool.as_ptr()) };
    }

    fn persist_counts(&self) -> Option<PersistStats> {
        None
    }
}

impl Drop for PmdkHeap {
    fn drop(&mut self) {
        // SAFETY: the pool was opened or created by this heap and is closed only here;
        // `&mut self` means no call is in flight.
        unsafe { (self.lib.close)(self.pool.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool path in the pool directory (/dev/shm), removed on drop, even when the test
    /// fails.
    fn scratch(name: &str) -> crate::workloads::ScratchPool {
        crate::workloads::ScratchPool::new(&crate::workloads::pmem::pool_dir(), "pmdk-test", name)
    }

    #[test]
    fn pmdk_blocks_round_trip_double_frees_are_refused_and_the_root_survives_a_reopen() {
        if let Err(reason) = PmdkHeap::available() {
            crate::testing::skipped("pmdk blocks round trip", &reason.to_string());
            return;
        }
        let scratch = scratch("roundtrip");
        let path = &scratch.0;
        let heap = PmdkHeap::create(path, 16 << 20, 256).unwrap();
        assert_eq!(heap.root_size(), 256);
        assert_eq!(heap.root() as usize % 64, 0);
        // SAFETY: the root's 256 bytes, zeroed by PMDK.
        let root = unsafe { std::slice::from_raw_parts(heap.root(), 256) };
        assert!(root.iter().all(|&b| b == 0));
        let dest = heap.root().cast::<u64>();
        let next = heap.root().wrapping_add(8).cast::<u64>();
        // SAFETY: words of the root, this thread's alone; blocks written within their size.
        let (kept, plain) = unsafe {
            next.write(0xDEAD_BEEF);
            heap.persist(next.cast(), 8);
            let kept = heap.allocate_into(dest, 1000).unwrap();
            assert_eq!(dest.read(), kept);
            assert_eq!(next.read(), 0xDEAD_BEEF, "only the 8-byte word is written");
            heap.at(kept).write_bytes(0xA5, 1000);
            heap.persist(heap.at(kept), 1000);
            let plain = heap.allocate_unlinked(200).unwrap();
            assert_eq!(heap.offset_of(heap.at(plain)), plain);
            heap.release(plain).unwrap();
            assert!(
                heap.release(plain)
                    .unwrap_err()
                    .message()
                    .contains("double free")
            );
            assert!(
                heap.release(3)
                    .unwrap_err()
                    .message()
                    .contains("not the start")
            );
            (kept, plain)
        };
        assert_ne!(kept, plain);
        drop(heap);

        let heap = PmdkHeap::open(path).unwrap();
        assert_eq!(heap.root_size(), 256);
        let dest = heap.root().cast::<u64>();
        // SAFETY: as above, on the reopened pool.
        unsafe {
            assert_eq!(dest.read(), kept, "the root survives the reopen");
            assert_eq!(heap.root().add(8).cast::<u64>().read(), 0xDEAD_BEEF);
            let bytes = std::slice::from_raw_parts(heap.at(kept), 1000);
            assert!(bytes.iter().all(|&b| b == 0xA5));
            heap.free_from(dest).unwrap();
            assert_eq!(dest.read(), 0);
            assert!(heap.free_from(dest).unwrap_err().message().contains("null"));
            dest.write(kept);
            assert!(
                heap.free_from(dest)
                    .unwrap_err()
                    .message()
                    .contains("double free")
            );
            dest.write(0);
        }
        assert_eq!(heap.persist_counts(), None);
        drop(heap);
        assert!(
            PmdkHeap::create(path, 16 << 20, 64)
                .unwrap_err()
                .message()
                .contains("pmemobj_create")
        );
    }

    #[test]
    fn a_pool_of_another_layout_is_refused() {
        if let Err(reason) = PmdkHeap::available() {
            crate::testing::skipped("a_pool_of_another_layout_is_refused", &reason.to_string());
            return;
        }
        let scratch = scratch("layout");
        let lib = Libpmemobj::load().unwrap();
        let path = c_path(&scratch.0).unwrap();
        // SAFETY: NUL-terminated path and layout; the pool is closed at once.
        unsafe {
            let pool = (lib.create)(path.as_ptr(), c"another".as_ptr(), 16 << 20, 0o600);
            assert!(!pool.is_null(), "{}", lib.errormsg());
            (lib.close)(pool);
        }
        let err = PmdkHeap::open(&scratch.0).unwrap_err();
        assert!(err.message().contains("pmemobj_open"), "{err}");
    }
}
