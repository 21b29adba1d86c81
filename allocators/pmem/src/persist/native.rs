//! [`FileMedium`]: a pool file mapped with `mmap` and flushed by this crate.
//!
//! How it flushes is chosen once, when the file is mapped ([`NativeFlush::for_mapping`]),
//! in libpmem's order:
//!
//! 1. `PMEM_NO_FLUSH=1`: nothing is flushed and a fence is an SFENCE — the caches are in the
//!    persistence domain (eADR), or the caller accepts losing what they hold.
//! 2. The mapping is persistent memory — the kernel accepted `MAP_SYNC`, which only DAX file
//!    systems do — or `PMEM_IS_PMEM_FORCE=1` says to act as if it were (and
//!    `PMEM_IS_PMEM_FORCE=0` says not to): the best cache-line instruction CPUID reports,
//!    CLWB (leaf 7, EBX bit 24), else CLFLUSHOPT (bit 23), else CLFLUSH, each line once, and a
//!    fence is an SFENCE. On a file that is not persistent memory this costs what the
//!    instructions cost but makes nothing durable: it is how the crate is measured on DRAM.
//! 3. Otherwise: `msync(MS_SYNC)` of the pages that hold the flushed bytes, which is durable
//!    when it returns, so a fence does nothing.
//!
//! On targets other than x86_64 only `msync` and "nothing" exist.
//!
//! A failed `msync` cannot be returned through [`Medium::flush`]; it is counted and its
//! error kept ([`FileMedium::sync_failures`], [`FileMedium::last_sync_error`]) so that a
//! caller that cares can check after a batch.

use std::io;
use std::path::Path;
use std::ptr::NonNull;

use super::file::{PoolFile, SyncFailures};
use super::{
    AtomicPersistStats, CACHE_LINE, Medium, MediumError, MediumKind, NativeFlush, PersistStats,
    check_range,
};

impl NativeFlush {
    /// The best cache-line flush instruction this CPU has (CLWB, then CLFLUSHOPT, then
    /// CLFLUSH), or `None` on targets without one.
    pub fn best_instruction() -> Option<NativeFlush> {
        #[cfg(target_arch = "x86_64")]
        {
            let cpu = x86::features();
            if cpu.clwb {
                Some(NativeFlush::Clwb)
            } else if cpu.clflushopt {
                Some(NativeFlush::ClflushOpt)
            } else if cpu.clflush {
                Some(NativeFlush::Clflush)
            } else {
                None
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    /// Whether this CPU and target can flush this way.
    pub fn is_supported(self) -> bool {
        match self {
            NativeFlush::Msync | NativeFlush::None => true,
            #[cfg(target_arch = "x86_64")]
            NativeFlush::Clwb => x86::features().clwb,
            #[cfg(target_arch = "x86_64")]
            NativeFlush::ClflushOpt => x86::features().clflushopt,
            #[cfg(target_arch = "x86_64")]
            NativeFlush::Clflush => x86::features().clflush,
            #[cfg(not(target_arch = "x86_64"))]
            NativeFlush::Clwb | NativeFlush::ClflushOpt | NativeFlush::Clflush => false,
        }
    }

    /// The method for a mapping that is (`is_dax`) or is not persistent memory, after the
    /// environment has had its say (`PMEM_NO_FLUSH`, `PMEM_IS_PMEM_FORCE`; see the module
    /// docs).
    pub fn for_mapping(is_dax: bool) -> NativeFlush {
        if env_flag("PMEM_NO_FLUSH") == Some(true) {
            return NativeFlush::None;
        }
        let is_pmem = env_flag("PMEM_IS_PMEM_FORCE").unwrap_or(is_dax);
        if is_pmem {
            NativeFlush::best_instruction().unwrap_or(NativeFlush::Msync)
        } else {
            NativeFlush::Msync
        }
    }
}

/// `Some(true)` for "1", `Some(false)` for "0", `None` otherwise (libpmem's reading).
fn env_flag(name: &str) -> Option<bool> {
    match std::env::var(name).as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    }
}

/// A pool file mapped `MAP_SHARED` and flushed natively (see the module docs).
///
/// Held under an exclusive `flock` for its life; dropping it unmaps the file and releases
/// the lock. Unflushed stores reach the file when the kernel writes the pages back (or at
/// `msync`); nothing is written on drop beyond what the page cache already holds.
#[derive(Debug)]
pub struct FileMedium {
    base: NonNull<u8>,
    len: usize,
    flush: NativeFlush,
    is_dax: bool,
    page_size: usize,
    stats: AtomicPersistStats,
    sync_failures: SyncFailures,
    file: PoolFile,
}

// SAFETY: the mapping is process-wide memory owned by the medium until drop; the medium's
// own state is immutable after construction or atomic. What callers store through `base()`
// is synchronized by them, as with any shared memory.
unsafe impl Send for FileMedium {}
// SAFETY: as for `Send`: `&FileMedium` only reads immutable fields, updates atomics, and
// issues flush instructions or `msync`, all of which are thread-safe.
unsafe impl Sync for FileMedium {}

impl FileMedium {
    /// Creates a pool file of `len` zero bytes at `path` (refusing an existing file), locks
    /// and maps it, flushing as [`NativeFlush::for_mapping`] chooses.
    ///
    /// # Errors
    ///
    /// [`MediumError::Exists`], [`NotFound`](MediumError::NotFound) (no such directory),
    /// [`PermissionDenied`](MediumError::PermissionDenied), [`ZeroSize`](MediumError::ZeroSize),
    /// [`TooLarge`](MediumError::TooLarge), [`NoSpace`](MediumError::NoSpace),
    /// [`MapFailed`](MediumError::MapFailed). The file is removed again if it was created.
    pub fn create(path: impl AsRef<Path>, len: usize) -> Result<Self, MediumError> {
        Self::create_inner(path.as_ref(), len, None)
    }

    /// As [`create`](Self::create), flushing with `flush` whatever the mapping and the
    /// environment say (for tests and measurements of each method).
    ///
    /// # Errors
    ///
    /// As [`create`](Self::create), and [`MediumError::FlushUnsupported`] (checked before
    /// the file is created).
    pub fn create_with_flush(
        path: impl AsRef<Path>,
        len: usize,
        flush: NativeFlush,
    ) -> Result<Self, MediumError> {
        Self::create_inner(path.as_ref(), len, Some(flush))
    }

    /// Opens the existing pool file at `path`, locks and maps all of it.
    ///
    /// # Errors
    ///
    /// [`MediumError::NotFound`], [`PermissionDenied`](MediumError::PermissionDenied),
    /// [`Locked`](MediumError::Locked) (pool already open by another process),
    /// [`ZeroSize`](MediumError::ZeroSize), [`TooLarge`](MediumError::TooLarge),
    /// [`MapFailed`](MediumError::MapFailed).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MediumError> {
        Self::open_inner(path.as_ref(), None)
    }

    /// As [`open`](Self::open), flushing with `flush`.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open), and [`MediumError::FlushUnsupported`].
    pub fn open_with_flush(
        path: impl AsRef<Path>,
        flush: NativeFlush,
    ) -> Result<Self, MediumError> {
        if !flush.is_supported() {
            return Err(MediumError::FlushUnsupported { flush });
        }
        Self::open_inner(path.as_ref(), Some(flush))
    }

    fn create_inner(
        path: &Path,
        len: usize,
        flush: Option<NativeFlush>,
    ) -> Result<Self, MediumError> {
        if let Some(flush) = flush
            && !flush.is_supported()
        {
            return Err(MediumError::FlushUnsupported { flush });
        }
        let file = PoolFile::create(path, len)?;
        match map_shared(&file) {
            Ok((base, is_dax)) => Ok(Self::assemble(file, base, is_dax, flush)),
            Err(e) => {
                file.discard();
                Err(e)
            }
        }
    }

    fn open_inner(path: &Path, flush: Option<NativeFlush>) -> Result<Self, MediumError> {
        let file = PoolFile::open(path)?;
        let (base, is_dax) = map_shared(&file)?;
        Ok(Self::assemble(file, base, is_dax, flush))
    }

    fn assemble(
        file: PoolFile,
        base: NonNull<u8>,
        is_dax: bool,
        flush: Option<NativeFlush>,
    ) -> Self {
        // SAFETY: `sysconf` has no preconditions.
        let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096);
        Self {
            base,
            len: file.len(),
            flush: flush.unwrap_or_else(|| NativeFlush::for_mapping(is_dax)),
            is_dax,
            page_size,
            stats: AtomicPersistStats::new(),
            sync_failures: SyncFailures::new(),
            file,
        }
    }

    /// How this medium flushes.
    pub fn flush_method(&self) -> NativeFlush {
        self.flush
    }

    /// Whether the kernel mapped the file with `MAP_SYNC` (a DAX file system: persistent
    /// memory, where cache-line flushes make stores durable).
    pub fn is_dax(&self) -> bool {
        self.is_dax
    }

    /// The path the pool was created or opened by.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// How many `msync` calls have failed (their bytes may not be durable).
    pub fn sync_failures(&self) -> u64 {
        self.sync_failures.count()
    }

    /// The error of the latest failed `msync`, if any failed.
    pub fn last_sync_error(&self) -> Option<io::Error> {
        self.sync_failures.last_error()
    }

    fn msync(&self, offset: usize, len: usize) {
        let start = offset & !(self.page_size - 1);
        // SAFETY: `start <= offset < self.len`, so the pointer stays inside the mapping.
        let addr = unsafe { self.base.as_ptr().add(start) };
        // SAFETY: `addr` is page-aligned and `addr..addr + (offset + len - start)` lies in
        // this medium's mapping (`check_range` held).
        let rc = unsafe { libc::msync(addr.cast(), offset + len - start, libc::MS_SYNC) };
        if rc != 0 {
            self.sync_failures.record_last_os_error();
        }
    }
}

/// Maps all of `file` read-write and shared: with `MAP_SYNC` where the kernel accepts it
/// (DAX), plainly otherwise. Returns the base and whether `MAP_SYNC` held.
fn map_shared(file: &PoolFile) -> Result<(NonNull<u8>, bool), MediumError> {
    use std::os::fd::AsRawFd;
    let fd = file.file().as_raw_fd();
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a fresh mapping of a descriptor we own, at an address the kernel picks;
        // nothing existing is replaced. Kernels or file systems without `MAP_SYNC` refuse it
        // (EOPNOTSUPP or EINVAL) and we fall through.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                file.len(),
                prot,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                fd,
                0,
            )
        };
        if p != libc::MAP_FAILED
            && let Some(base) = NonNull::new(p.cast::<u8>())
        {
            return Ok((base, true));
        }
    }
    // SAFETY: as above, without `MAP_SYNC`.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            file.len(),
            prot,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let source = io::Error::last_os_error();
        return Err(if source.raw_os_error() == Some(libc::ENOMEM) {
            MediumError::TooLarge {
                path: file.path().to_path_buf(),
                len: file.len() as u64,
            }
        } else {
            MediumError::MapFailed {
                path: file.path().to_path_buf(),
                source,
            }
        });
    }
    let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| MediumError::MapFailed {
        path: file.path().to_path_buf(),
        source: io::Error::other("mmap returned address 0"),
    })?;
    Ok((base, false))
}

impl Drop for FileMedium {
    fn drop(&mut self) {
        // SAFETY: `base..base + len` is the mapping made in `map_shared`, unmapped only here;
        // the `Medium` contract ends with the medium, so no caller may use it any more.
        // The lock goes when `self.file` closes, after this.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

// SAFETY: `base()..base() + len()` is a read-write `MAP_SHARED` mapping made at construction
// and unmapped only in `Drop`; the kernel never moves it, and the locked, open file keeps
// its length (pool files are not truncated under a lock holder by this crate).
unsafe impl Medium for FileMedium {
    fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn flush(&self, offset: usize, len: usize) {
        check_range(offset, len, self.len);
        self.stats.record_flush(offset, len);
        if len == 0 {
            return;
        }
        match self.flush {
            NativeFlush::Msync => self.msync(offset, len),
            NativeFlush::None => {}
            #[cfg(target_arch = "x86_64")]
            method @ (NativeFlush::Clwb | NativeFlush::ClflushOpt | NativeFlush::Clflush) => {
                let first = offset & !(CACHE_LINE - 1);
                for line in (first..offset + len).step_by(CACHE_LINE) {
                    // SAFETY: `line < offset + len <= self.len`: inside the mapping. The
                    // method was checked against CPUID at construction.
                    unsafe { x86::flush_line(method, self.base.as_ptr().add(line)) };
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            NativeFlush::Clwb | NativeFlush::ClflushOpt | NativeFlush::Clflush => {
                unreachable!("construction refuses unsupported flush methods")
            }
        }
    }

    fn fence(&self) {
        match self.flush {
            // `msync(MS_SYNC)` returned only once the pages were written.
            NativeFlush::Msync => {}
            _ => store_fence(),
        }
        // Counted with no locked instruction (see `counters`).
        self.stats.record_fence();
    }

    fn stats(&self) -> PersistStats {
        self.stats.snapshot()
    }

    fn kind(&self) -> MediumKind {
        MediumKind::Native { flush: self.flush }
    }
}

/// SFENCE on x86_64: orders the flushes before it with the stores after it.
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86_64 baseline, so SFENCE exists.
    unsafe {
        core::arch::x86_64::_mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    crate::sync::raw::fence(crate::sync::Ordering::SeqCst);
}

/// CPUID and the flush instructions.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::sync::raw::OnceLock;
    use std::arch::asm;

    use super::NativeFlush;

    /// The cache-line flush instructions this CPU has.
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Features {
        pub(super) clwb: bool,
        pub(super) clflushopt: bool,
        pub(super) clflush: bool,
    }

    /// What CPUID says (asked once).
    pub(super) fn features() -> Features {
        static FEATURES: OnceLock<Features> = OnceLock::new();
        *FEATURES.get_or_init(|| {
            use core::arch::x86_64::{__cpuid, __cpuid_count};
            let max_leaf = __cpuid(0).eax;
            let clflush = __cpuid(1).edx & (1 << 19) != 0;
            let (clwb, clflushopt) = if max_leaf >= 7 {
                let ebx = __cpuid_count(7, 0).ebx;
                (ebx & (1 << 24) != 0, ebx & (1 << 23) != 0)
            } else {
                (false, false)
            };
            Features {
                clwb,
                clflushopt,
                clflush,
            }
        })
    }

    /// Writes back (CLWB) or evicts (CLFLUSHOPT, CLFLUSH) the line holding `p`.
    ///
    /// # Safety
    ///
    /// `p` is in mapped memory, and the CPU has `method` (per [`features`]). `method` is
    /// one of the three instructions.
    pub(super) unsafe fn flush_line(method: NativeFlush, p: *const u8) {
        // The assembler knows these instructions without a target feature (Rust has none
        // for them), which is why the CPUID check is the caller's contract.
        match method {
            // SAFETY: the caller's contract; CLWB only reads the address's line.
            NativeFlush::Clwb => unsafe {
                asm!("clwb [{}]", in(reg) p, options(nostack, preserves_flags));
            },
            // SAFETY: as above for CLFLUSHOPT.
            NativeFlush::ClflushOpt => unsafe {
                asm!("clflushopt [{}]", in(reg) p, options(nostack, preserves_flags));
            },
            // SAFETY: as above; CLFLUSH is SSE2, baseline on x86_64.
            NativeFlush::Clflush => unsafe { core::arch::x86_64::_mm_clflush(p) },
            NativeFlush::Msync | NativeFlush::None => {
                unreachable!("flush_line is called for instructions only")
            }
        }
    }
}
