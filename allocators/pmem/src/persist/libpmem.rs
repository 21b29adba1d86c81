//! [`PmemFileMedium`]: a pool file mapped and flushed by libpmem, loaded at run time.
//!
//! [`Libpmem::load`] opens `libpmem.so.1` with `dlopen` and looks up the handful of
//! functions used here, once per process; when the library is missing, it says so as a
//! [`MediumError::LibpmemMissing`] and nothing else changes, so the crate builds and runs
//! without PMDK. The library stays loaded for the process's life (never `dlclose`d), which
//! is what lets it be `&'static`.
//!
//! The file is created, opened and locked by this crate under the same rules as
//! [`FileMedium`](super::FileMedium) (libpmem takes no lock of its own); `pmem_map_file`
//! then maps the whole file. A flush is `pmem_flush` when libpmem says the mapping is
//! persistent memory (`pmem_is_pmem`, forced by `PMEM_IS_PMEM_FORCE=1`, and made a no-op
//! by `PMEM_NO_FLUSH=1`), `pmem_msync` otherwise; a fence is `pmem_drain` when it is
//! persistent memory and nothing otherwise (`pmem_msync` is synchronous).

use crate::sync::raw::OnceLock;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

use super::file::{PoolFile, SyncFailures};
use super::{AtomicPersistStats, Medium, MediumError, MediumKind, PersistStats, check_range};

/// The library's soname (PMDK's ABI version 1).
pub const LIBPMEM_SONAME: &str = "libpmem.so.1";

type MapFileFn = unsafe extern "C" fn(
    *const c_char,
    usize,
    c_int,
    libc::mode_t,
    *mut usize,
    *mut c_int,
) -> *mut c_void;
type UnmapFn = unsafe extern "C" fn(*mut c_void, usize) -> c_int;
type IsPmemFn = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type FlushFn = unsafe extern "C" fn(*const c_void, usize);
type DrainFn = unsafe extern "C" fn();
type MsyncFn = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type ErrormsgFn = unsafe extern "C" fn() -> *const c_char;

/// The functions of libpmem this crate calls, resolved from `libpmem.so.1`.
#[derive(Debug)]
pub struct Libpmem {
    map_file: MapFileFn,
    unmap: UnmapFn,
    is_pmem: IsPmemFn,
    flush: FlushFn,
    drain: DrainFn,
    msync: MsyncFn,
    errormsg: ErrormsgFn,
}

impl Libpmem {
    /// The library, loaded on first call; later calls return the same one (or the same
    /// error: a library installed while the process runs is not seen).
    ///
    /// # Errors
    ///
    /// [`MediumError::LibpmemMissing`] when `libpmem.so.1` cannot be loaded or lacks one of
    /// the functions.
    pub fn load() -> Result<&'static Libpmem, MediumError> {
        static LIBRARY: OnceLock<Result<Libpmem, String>> = OnceLock::new();
        LIBRARY
            .get_or_init(Self::open_library)
            .as_ref()
            .map_err(|detail| MediumError::LibpmemMissing {
                detail: detail.clone(),
            })
    }

    fn open_library() -> Result<Libpmem, String> {
        let soname = CString::new(LIBPMEM_SONAME).expect("soname has no NUL");
        // SAFETY: a NUL-terminated name; loading runs libpmem's initializer, which only reads
        // its environment variables and CPU features.
        let handle = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(dl_error());
        }
        let symbol = |name: &CStr| -> Result<*mut c_void, String> {
            // SAFETY: `handle` is a live handle (never closed) and `name` NUL-terminated.
            let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
            if address.is_null() {
                Err(format!("{}: {}", name.to_string_lossy(), dl_error()))
            } else {
                Ok(address)
            }
        };
        // SAFETY: (each transmute) the symbol is libpmem's function of that name, whose C
        // prototype in libpmem.h (ABI 1) is the function type it is converted to; a function
        // pointer and a data pointer have the same size on every target `dlsym` serves.
        unsafe {
            Ok(Libpmem {
                map_file: std::mem::transmute::<*mut c_void, MapFileFn>(symbol(c"pmem_map_file")?),
                unmap: std::mem::transmute::<*mut c_void, UnmapFn>(symbol(c"pmem_unmap")?),
                is_pmem: std::mem::transmute::<*mut c_void, IsPmemFn>(symbol(c"pmem_is_pmem")?),
                flush: std::mem::transmute::<*mut c_void, FlushFn>(symbol(c"pmem_flush")?),
                drain: std::mem::transmute::<*mut c_void, DrainFn>(symbol(c"pmem_drain")?),
                msync: std::mem::transmute::<*mut c_void, MsyncFn>(symbol(c"pmem_msync")?),
                errormsg: std::mem::transmute::<*mut c_void, ErrormsgFn>(symbol(c"pmem_errormsg")?),
            })
        }
    }

    /// `pmem_map_file(path, len, flags, mode, mapped_len, is_pmem)`.
    ///
    /// # Safety
    ///
    /// As libpmem documents it: `path` names a file; the mapping returned (if not null) is
    /// the caller's to `pmem_unmap` and must not be used after.
    pub unsafe fn map_file(
        &self,
        path: &CStr,
        len: usize,
        flags: c_int,
        mode: libc::mode_t,
        mapped_len: &mut usize,
        is_pmem: &mut c_int,
    ) -> *mut c_void {
        // SAFETY: the caller's contract; the out-pointers come from references.
        unsafe { (self.map_file)(path.as_ptr(), len, flags, mode, mapped_len, is_pmem) }
    }

    /// `pmem_unmap(addr, len)`; 0 on success.
    ///
    /// # Safety
    ///
    /// `addr..addr + len` was mapped by [`map_file`](Self::map_file) and nothing uses it
    /// any more.
    pub unsafe fn unmap(&self, addr: *mut c_void, len: usize) -> c_int {
        // SAFETY: the caller's contract.
        unsafe { (self.unmap)(addr, len) }
    }

    /// `pmem_is_pmem(addr, len)`: whether libpmem flushes that range with cache-line
    /// instructions.
    ///
    /// # Safety
    ///
    /// `addr..addr + len` is mapped memory.
    pub unsafe fn is_pmem(&self, addr: *const c_void, len: usize) -> bool {
        // SAFETY: the caller's contract.
        unsafe { (self.is_pmem)(addr, len) != 0 }
    }

    /// `pmem_flush(addr, len)`.
    ///
    /// # Safety
    ///
    /// `addr..addr + len` is mapped memory.
    pub unsafe fn flush(&self, addr: *const c_void, len: usize) {
        // SAFETY: the caller's contract.
        unsafe { (self.flush)(addr, len) }
    }

    /// `pmem_drain()`: waits for earlier `pmem_flush`es.
    pub fn drain(&self) {
        // SAFETY: `pmem_drain` takes nothing and only fences.
        unsafe { (self.drain)() }
    }

    /// `pmem_msync(addr, len)`; 0 on success, else -1 with `errno` set.
    ///
    /// # Safety
    ///
    /// `addr..addr + len` lies in a mapping of a file.
    pub unsafe fn msync(&self, addr: *const c_void, len: usize) -> c_int {
        // SAFETY: the caller's contract.
        unsafe { (self.msync)(addr, len) }
    }

    /// `pmem_errormsg()`: the calling thread's last libpmem error message.
    pub fn errormsg(&self) -> String {
        // SAFETY: `pmem_errormsg` returns a thread-local, NUL-terminated string (or null)
        // valid until the thread's next libpmem call; it is copied at once.
        let message = unsafe { (self.errormsg)() };
        if message.is_null() {
            return String::new();
        }
        // SAFETY: non-null, NUL-terminated, alive until this thread calls libpmem again.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    }
}

/// `dlerror()`'s message, or a generic one.
fn dl_error() -> String {
    // SAFETY: `dlerror` takes nothing; its result is null or a NUL-terminated string valid
    // until the next `dl*` call on this thread, copied at once.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        format!("{LIBPMEM_SONAME}: unknown dlopen error")
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    }
}

/// A pool file mapped and flushed by libpmem (see the module docs).
///
/// Held under an exclusive `flock` for its life; dropping it unmaps the file
/// (`pmem_unmap`) and releases the lock.
#[derive(Debug)]
pub struct PmemFileMedium {
    lib: &'static Libpmem,
    base: NonNull<u8>,
    len: usize,
    is_pmem: bool,
    stats: AtomicPersistStats,
    sync_failures: SyncFailures,
    file: PoolFile,
}

// SAFETY: the mapping is process-wide memory owned by the medium until drop; the medium's
// state is immutable after construction or atomic, and libpmem's flush, drain and msync are
// thread-safe. Stores through `base()` are synchronized by their callers.
unsafe impl Send for PmemFileMedium {}
// SAFETY: as for `Send`.
unsafe impl Sync for PmemFileMedium {}

impl PmemFileMedium {
    /// Creates a pool file of `len` zero bytes at `path` (refusing an existing file), locks
    /// it and maps it with libpmem.
    ///
    /// # Errors
    ///
    /// [`MediumError::LibpmemMissing`] (before anything is created), then as
    /// [`FileMedium::create`](super::FileMedium::create). The file is removed again if it
    /// was created.
    pub fn create(path: impl AsRef<Path>, len: usize) -> Result<Self, MediumError> {
        let lib = Libpmem::load()?;
        let file = PoolFile::create(path.as_ref(), len)?;
        match map_with(lib, &file) {
            Ok((base, is_pmem)) => Ok(Self::assemble(lib, file, base, is_pmem)),
            Err(e) => {
                file.discard();
                Err(e)
            }
        }
    }

    /// Opens the existing pool file at `path`, locks it and maps all of it with libpmem.
    ///
    /// # Errors
    ///
    /// [`MediumError::LibpmemMissing`], then as
    /// [`FileMedium::open`](super::FileMedium::open) (including
    /// [`MediumError::Locked`]: pool already open by another process).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MediumError> {
        let lib = Libpmem::load()?;
        let file = PoolFile::open(path.as_ref())?;
        let (base, is_pmem) = map_with(lib, &file)?;
        Ok(Self::assemble(lib, file, base, is_pmem))
    }

    fn assemble(lib: &'static Libpmem, file: PoolFile, base: NonNull<u8>, is_pmem: bool) -> Self {
        Self {
            lib,
            base,
            len: file.len(),
            is_pmem,
            stats: AtomicPersistStats::new(),
            sync_failures: SyncFailures::new(),
            file,
        }
    }

    /// Whether libpmem flushes this mapping with cache-line instructions (`pmem_is_pmem`).
    pub fn is_pmem(&self) -> bool {
        self.is_pmem
    }

    /// The path the pool was created or opened by.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// How many `pmem_msync` calls have failed (their bytes may not be durable).
    pub fn sync_failures(&self) -> u64 {
        self.sync_failures.count()
    }

    /// The error of the latest failed `pmem_msync`, if any failed.
    pub fn last_sync_error(&self) -> Option<io::Error> {
        self.sync_failures.last_error()
    }
}

/// Maps all of `file` with `pmem_map_file` (no flags: the file exists and keeps its
/// length). Returns the base and whether libpmem treats it as persistent memory.
fn map_with(lib: &Libpmem, file: &PoolFile) -> Result<(NonNull<u8>, bool), MediumError> {
    let path = file.path();
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| MediumError::Io {
        path: path.to_path_buf(),
        op: "pmem_map_file",
        source: io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"),
    })?;
    let mut mapped_len = 0usize;
    let mut mapped_is_pmem: c_int = 0;
    // SAFETY: `c_path` names the file we hold open and locked; the mapping is unmapped in
    // `Drop` (or below, on a length mismatch).
    let addr = unsafe { lib.map_file(&c_path, 0, 0, 0, &mut mapped_len, &mut mapped_is_pmem) };
    let Some(base) = NonNull::new(addr.cast::<u8>()) else {
        let os = io::Error::last_os_error();
        return Err(MediumError::MapFailed {
            path: path.to_path_buf(),
            source: io::Error::new(os.kind(), format!("{} ({os})", lib.errormsg())),
        });
    };
    if mapped_len != file.len() {
        // SAFETY: just mapped, not yet shared.
        unsafe { lib.unmap(addr, mapped_len) };
        return Err(MediumError::MapFailed {
            path: path.to_path_buf(),
            source: io::Error::other(format!(
                "pmem_map_file mapped {mapped_len} bytes of a {}-byte file (file changed under us?)",
                file.len()
            )),
        });
    }
    // SAFETY: `addr..addr + mapped_len` was just mapped. `pmem_is_pmem` is what libpmem's
    // own flush decisions follow (it honours PMEM_IS_PMEM_FORCE); the flag from
    // `pmem_map_file` additionally covers a MAP_SYNC mapping.
    let is_pmem = mapped_is_pmem != 0 || unsafe { lib.is_pmem(addr, mapped_len) };
    Ok((base, is_pmem))
}

impl Drop for PmemFileMedium {
    fn drop(&mut self) {
        // SAFETY: mapped by `map_with`, unmapped only here; the `Medium` contract ends with
        // the medium. The lock goes when `self.file` closes, after this.
        unsafe {
            self.lib.unmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

// SAFETY: `base()..base() + len()` is the read-write shared mapping `pmem_map_file` made at
// construction, unmapped only in `Drop`; the kernel never moves it, and the locked file
// keeps its length.
unsafe impl Medium for PmemFileMedium {
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
        // SAFETY: `offset + len <= self.len` (`check_range`): inside the mapping.
        let addr = unsafe { self.base.as_ptr().add(offset) }.cast::<c_void>();
        if self.is_pmem {
            // SAFETY: `addr..addr + len` is mapped (above).
            unsafe { self.lib.flush(addr, len) };
        } else {
            // SAFETY: as above; `pmem_msync` aligns the range to pages itself.
            let rc = unsafe { self.lib.msync(addr, len) };
            if rc != 0 {
                self.sync_failures.record_last_os_error();
            }
        }
    }

    fn fence(&self) {
        if self.is_pmem {
            self.lib.drain();
        }
        // Counted with no locked instruction (see `counters`): the drain is an SFENCE that
        // the code after it overlaps with the write-backs.
        self.stats.record_fence();
    }

    fn stats(&self) -> PersistStats {
        self.stats.snapshot()
    }

    fn kind(&self) -> MediumKind {
        MediumKind::Libpmem {
            is_pmem: self.is_pmem,
        }
    }
}
