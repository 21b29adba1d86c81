//! PMDK's libpmemobj as a [`SlotHeap`]: [`PmdkHeap`], over [`Libpmemobj`], the library
//! loaded at run time with `dlopen` (as alloclab-pmem loads libpmem), so that nothing needs
//! PMDK to build and a machine without it only loses this peer.
//!
//! The pool is a `pmemobj_create` pool with layout [`LAYOUT`]; its root object is a
//! [`RootHeader`] (a magic word and the slot count, persisted at creation) followed by
//! `PMEMoid[slots]`. [`SlotHeap::alloc_into`] is `pmemobj_alloc` with the slot's `PMEMoid` as
//! the destination: it lies inside the pool, so PMDK sets it in the same redo log as the
//! allocation (atomically); [`SlotHeap::free_from`] is `pmemobj_free`, which clears it the
//! same way. No constructor is passed, so blocks are not initialised (as `malloc`).
//!
//! PMDK flushes with cache-line instructions when libpmem says the pool is persistent
//! memory: on `/dev/shm` only under `PMEM_IS_PMEM_FORCE=1` (else every flush is an
//! `msync`); `PMEM_NO_FLUSH=1` then leaves only the fences (eADR). libpmem reads both when it
//! loads, which is why the `pmem` workers set them before anything loads it. PMDK does not
//! count its flushes, so [`SlotHeap::persist_counts`] is `None`.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::OnceLock;

use super::{PersistStats, SlotClaims, SlotHeap};

/// The library's soname (PMDK's ABI version 1).
pub const LIBPMEMOBJ_SONAME: &str = "libpmemobj.so.1";
/// Test hook: a soname or path loaded instead of [`LIBPMEMOBJ_SONAME`] (a name that does not
/// exist shows what a machine without PMDK does).
pub const LIBRARY_OVERRIDE_ENV: &str = "ALLOCLAB_PMDK_LIBRARY";
/// The pool layout name passed to `pmemobj_create` and checked by `pmemobj_open`.
pub const LAYOUT: &CStr = c"alloclab-slots";
/// The first word of the root object.
pub const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"alcslots");
/// The type number every block is allocated with.
const TYPE_NUM: u64 = 1;

/// PMDK's persistent pointer: the pool's UUID (low half) and the offset in the pool; null
/// when `off` is 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct PMEMoid {
    /// Low 64 bits of the pool's UUID.
    pub pool_uuid_lo: u64,
    /// Offset of the object from the pool's start; 0 is null.
    pub off: u64,
}

impl PMEMoid {
    /// Whether the oid is null (`OID_IS_NULL`).
    pub fn is_null(self) -> bool {
        self.off == 0
    }
}

/// The root object's fixed part; `PMEMoid[slots]` follows it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RootHeader {
    /// [`ROOT_MAGIC`].
    pub magic: u64,
    /// Number of slots after the header.
    pub slots: u64,
}

/// `PMEMobjpool`, opaque.
pub(crate) type Pool = c_void;
type CreateFn =
    unsafe extern "C" fn(*const c_char, *const c_char, usize, libc::mode_t) -> *mut Pool;
type OpenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut Pool;
type CloseFn = unsafe extern "C" fn(*mut Pool);
type RootFn = unsafe extern "C" fn(*mut Pool, usize) -> PMEMoid;
type RootSizeFn = unsafe extern "C" fn(*mut Pool) -> usize;
type DirectFn = unsafe extern "C" fn(PMEMoid) -> *mut c_void;
type PoolByOidFn = unsafe extern "C" fn(PMEMoid) -> *mut Pool;
type Constructor = unsafe extern "C" fn(*mut Pool, *mut c_void, *mut c_void) -> c_int;
type AllocFn = unsafe extern "C" fn(
    *mut Pool,
    *mut PMEMoid,
    usize,
    u64,
    Option<Constructor>,
    *mut c_void,
) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut PMEMoid);
type PersistFn = unsafe extern "C" fn(*mut Pool, *const c_void, usize);
type ErrormsgFn = unsafe extern "C" fn() -> *const c_char;
type FlushFn = unsafe extern "C" fn(*mut Pool, *const c_void, usize);
type DrainFn = unsafe extern "C" fn(*mut Pool);
type ReserveFn = unsafe extern "C" fn(*mut Pool, *mut PobjAction, usize, u64) -> PMEMoid;
type SetValueFn = unsafe extern "C" fn(*mut Pool, *mut PobjAction, *mut u64, u64);
type DeferFreeFn = unsafe extern "C" fn(*mut Pool, PMEMoid, *mut PobjAction);
type PublishFn = unsafe extern "C" fn(*mut Pool, *mut PobjAction, usize) -> c_int;
type CancelFn = unsafe extern "C" fn(*mut Pool, *mut PobjAction, usize);

/// PMDK's `struct pobj_action` (`libpmemobj/action_base.h`, ABI 1): an opaque 128-byte
/// record of a reserved allocation, a deferred free or a deferred 8-byte store, kept in
/// DRAM until `pmemobj_publish` applies a batch of them in one redo log.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PobjAction {
    kind: u32,
    data: [u32; 3],
    data2: [u64; 14],
}

/// How `pmemobj_direct` is done: the exported function, or (in versions where it is only a
/// static inline in the headers) the pool's address plus the offset.
#[derive(Clone, Copy, Debug)]
enum Direct {
    Exported(DirectFn),
    PoolPlusOffset(PoolByOidFn),
}

/// The functions of libpmemobj used here (by the `pmem` suite's slot heap and the `storage`
/// suite's [`PmdkStorage`](crate::storage::PmdkStorage)), resolved from `libpmemobj.so.1`.
/// Each field is the C function of the same name with a `pmemobj_` prefix; calling one is
/// `unsafe` with that function's contract.
#[derive(Debug)]
pub struct Libpmemobj {
    pub(crate) create: CreateFn,
    pub(crate) open: OpenFn,
    pub(crate) close: CloseFn,
    pub(crate) root: RootFn,
    pub(crate) root_size: RootSizeFn,
    direct: Direct,
    pub(crate) alloc: AllocFn,
    pub(crate) free: FreeFn,
    pub(crate) persist: PersistFn,
    pub(crate) flush: FlushFn,
    pub(crate) drain: DrainFn,
    pub(crate) reserve: ReserveFn,
    pub(crate) set_value: SetValueFn,
    pub(crate) defer_free: DeferFreeFn,
    pub(crate) publish: PublishFn,
    pub(crate) cancel: CancelFn,
    errormsg: ErrormsgFn,
}

impl Libpmemobj {
    /// The library, loaded on first call ([`LIBPMEMOBJ_SONAME`], or what the environment
    /// variable `ALLOCLAB_PMDK_LIBRARY` names); later calls return the same one or the same
    /// error. It is never unloaded.
    ///
    /// # Errors
    ///
    /// `libpmemobj.so.1 not found: install libpmemobj-dev` when it cannot be loaded; a
    /// message naming the function when one is missing.
    pub fn load() -> Result<&'static Libpmemobj, String> {
        static LIBRARY: OnceLock<Result<Libpmemobj, String>> = OnceLock::new();
        LIBRARY
            .get_or_init(|| {
                let name = std::env::var(LIBRARY_OVERRIDE_ENV)
                    .unwrap_or_else(|_| LIBPMEMOBJ_SONAME.to_owned());
                Self::load_from(&name)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Loads the library from `name` (a soname or a path), uncached.
    ///
    /// # Errors
    ///
    /// `<name> not found: install libpmemobj-dev`, or a message naming a missing function.
    pub fn load_from(name: &str) -> Result<Libpmemobj, String> {
        let missing = || format!("{name} not found: install libpmemobj-dev");
        let c_name = CString::new(name).map_err(|_| missing())?;
        // SAFETY: a NUL-terminated name; loading runs libpmemobj's (and libpmem's)
        // initializers, which read their environment variables and CPU features.
        let handle = unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(missing());
        }
        let symbol = |symbol: &CStr| -> Option<*mut c_void> {
            // SAFETY: `handle` is a live handle (never closed), `symbol` NUL-terminated.
            let address = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
            (!address.is_null()).then_some(address)
        };
        let required = |s: &CStr| {
            symbol(s).ok_or_else(|| {
                format!(
                    "{name} lacks {}: not PMDK's libpmemobj ABI 1",
                    s.to_string_lossy()
                )
            })
        };
        // SAFETY: (each transmute) the symbol is libpmemobj's function of that name, whose C
        // prototype in libpmemobj/*.h (ABI 1, Linux: no U/W suffixes) is the function type it
        // is converted to; function and data pointers have the same size where dlsym works.
        unsafe {
            let direct = match symbol(c"pmemobj_direct") {
                Some(f) => Direct::Exported(std::mem::transmute::<*mut c_void, DirectFn>(f)),
                None => Direct::PoolPlusOffset(std::mem::transmute::<*mut c_void, PoolByOidFn>(
                    required(c"pmemobj_pool_by_oid")?,
                )),
            };
            Ok(Libpmemobj {
                create: std::mem::transmute::<*mut c_void, CreateFn>(required(c"pmemobj_create")?),
                open: std::mem::transmute::<*mut c_void, OpenFn>(required(c"pmemobj_open")?),
                close: std::mem::transmute::<*mut c_void, CloseFn>(required(c"pmemobj_close")?),
                root: std::mem::transmute::<*mut c_void, RootFn>(required(c"pmemobj_root")?),
                root_size: std::mem::transmute::<*mut c_void, RootSizeFn>(required(
                    c"pmemobj_root_size",
                )?),
                direct,
                alloc: std::mem::transmute::<*mut c_void, AllocFn>(required(c"pmemobj_alloc")?),
                free: std::mem::transmute::<*mut c_void, FreeFn>(required(c"pmemobj_free")?),
                persist: std::mem::transmute::<*mut c_void, PersistFn>(required(
                    c"pmemobj_persist",
                )?),
                flush: std::mem::transmute::<*mut c_void, FlushFn>(required(c"pmemobj_flush")?),
                drain: std::mem::transmute::<*mut c_void, DrainFn>(required(c"pmemobj_drain")?),
                reserve: std::mem::transmute::<*mut c_void, ReserveFn>(required(
                    c"pmemobj_reserve",
                )?),
                set_value: std::mem::transmute::<*mut c_void, SetValueFn>(required(
                    c"pmemobj_set_value",
                )?),
                defer_free: std::mem::transmute::<*mut c_void, DeferFreeFn>(required(
                    c"pmemobj_defer_free",
                )?),
                publish: std::mem::transmute::<*mut c_void, PublishFn>(required(
                    c"pmemobj_publish",
                )?),
                cancel: std::mem::transmute::<*mut c_void, CancelFn>(required(c"pmemobj_cancel")?),
                errormsg: std::mem::transmute::<*mut c_void, ErrormsgFn>(required(
                    c"pmemobj_errormsg",
                )?),
            })
        }
    }

    /// `pmemobj_errormsg()`: this thread's last libpmemobj error, copied.
    pub fn errormsg(&self) -> String {
        // SAFETY: returns null or a thread-local NUL-terminated string valid until this
        // thread's next libpmemobj call; it is copied at once.
        let message = unsafe { (self.errormsg)() };
        if message.is_null() {
            return "unknown libpmemobj error".to_owned();
        }
        // SAFETY: as above.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    }

    /// The address of the object `oid` names (`pmemobj_direct`); null for a null oid.
    ///
    /// # Safety
    ///
    /// `oid` is null or names an object of a pool open in this process.
    pub unsafe fn direct(&self, oid: PMEMoid) -> *mut u8 {
        if oid.is_null() {
            return std::ptr::null_mut();
        }
        match self.direct {
            // SAFETY: the caller's contract.
            Direct::Exported(direct) => unsafe { direct(oid) }.cast(),
            Direct::PoolPlusOffset(pool_by_oid) => {
                // SAFETY: the caller's contract: the pool is open, so PMDK finds it by UUID.
                let pool = unsafe { pool_by_oid(oid) }.cast::<u8>();
                if pool.is_null() {
                    return pool;
                }
                // SAFETY: `off` is an offset inside that pool (what `pmemobj_direct` adds).
                unsafe { pool.add(oid.off as usize) }
            }
        }
    }
}

/// A `pmemobj` pool whose root holds slots (see the module docs). Closed on drop.
#[derive(Debug)]
pub struct PmdkHeap {
    lib: &'static Libpmemobj,
    pool: NonNull<Pool>,
    oids: NonNull<PMEMoid>,
    slots: usize,
    claims: SlotClaims,
}

// SAFETY: libpmemobj's allocation, free and persist functions are thread-safe; the pool
// handle and the root are only read after construction, and each slot's `PMEMoid` is
// touched only by a caller holding the slot's claim (or by PMDK on that caller's behalf).
unsafe impl Send for PmdkHeap {}
// SAFETY: as for `Send`.
unsafe impl Sync for PmdkHeap {}

pub(crate) fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: path contains a NUL byte", path.display()))
}

fn root_bytes(slots: usize) -> Option<usize> {
    slots
        .checked_mul(size_of::<PMEMoid>())?
        .checked_add(size_of::<RootHeader>())
}

impl PmdkHeap {
    /// The slot's `PMEMoid` in the root.
    fn oid(&self, slot: usize) -> *mut PMEMoid {
        debug_assert!(slot < self.slots);
        // SAFETY: `slot < self.slots` (callers hold a claim, which checks it): inside the
        // root's array.
        unsafe { self.oids.as_ptr().add(slot) }
    }

    /// The heap over an open pool whose root has been checked; closes the pool on error.
    fn over(
        lib: &'static Libpmemobj,
        pool: NonNull<Pool>,
        path: &Path,
        new_slots: Option<usize>,
    ) -> Result<Self, String> {
        let fail = |message: String| {
            // SAFETY: opened or created by the caller, used by nobody else yet.
            unsafe { (lib.close)(pool.as_ptr()) };
            Err(message)
        };
        let size = match new_slots {
            Some(slots) => match root_bytes(slots) {
                Some(bytes) => bytes,
                None => {
                    return fail(format!(
                        "{}: {slots} slots do not fit a root",
                        path.display()
                    ));
                }
            },
            // SAFETY: an open pool.
            None => unsafe { (lib.root_size)(pool.as_ptr()) },
        };
        if size < size_of::<RootHeader>() {
            return fail(format!(
                "{}: root of {size} bytes holds no slot array",
                path.display()
            ));
        }
        // SAFETY: an open pool; an existing root of at least `size` bytes is returned as it
        // is, a new one is allocated zeroed.
        let root = unsafe { (lib.root)(pool.as_ptr(), size) };
        // SAFETY: `root` is null or an object of this open pool.
        let Some(header) = NonNull::new(unsafe { lib.direct(root) }.cast::<RootHeader>()) else {
            return fail(format!(
                "{}: pmemobj_root: {}",
                path.display(),
                lib.errormsg()
            ));
        };
        let slots = match new_slots {
            Some(slots) => {
                // SAFETY: the root is at least `size` bytes, 64-byte aligned, ours alone; the
                // header is made durable before the heap is used.
                unsafe {
                    header.as_ptr().write(RootHeader {
                        magic: ROOT_MAGIC,
                        slots: slots as u64,
                    });
                    (lib.persist)(
                        pool.as_ptr(),
                        header.as_ptr().cast(),
                        size_of::<RootHeader>(),
                    );
                }
                slots
            }
            None => {
                // SAFETY: the root holds at least a header (checked above).
                let found = unsafe { header.as_ptr().read() };
                let slots = usize::try_from(found.slots).unwrap_or(usize::MAX);
                if found.magic != ROOT_MAGIC || root_bytes(slots).is_none_or(|b| b > size) {
                    return fail(format!(
                        "{}: the root is not an alloclab slot array ({size} bytes, {} slots claimed)",
                        path.display(),
                        found.slots
                    ));
                }
                slots
            }
        };
        // SAFETY: the array follows the header inside the root (size checked above).
        let oids = unsafe { NonNull::new_unchecked(header.as_ptr().add(1).cast::<PMEMoid>()) };
        Ok(Self {
            lib,
            pool,
            oids,
            slots,
            claims: SlotClaims::new(slots),
        })
    }
}

impl SlotHeap for PmdkHeap {
    fn available() -> Result<(), String> {
        Libpmemobj::load().map(|_| ())
    }

    fn create(path: &Path, pool_bytes: usize, slots: usize) -> Result<Self, String> {
        let lib = Libpmemobj::load()?;
        let c_path = c_path(path)?;
        // SAFETY: NUL-terminated path and layout; PMDK creates the file (refusing an existing
        // one) and returns a pool handle or null.
        let pool = unsafe { (lib.create)(c_path.as_ptr(), LAYOUT.as_ptr(), pool_bytes, 0o600) };
        let pool = NonNull::new(pool).ok_or_else(|| {
            format!(
                "pmemobj_create {} ({pool_bytes} bytes): {}",
                path.display(),
                lib.errormsg()
            )
        })?;
        Self::over(lib, pool, path, Some(slots))
    }

    fn open(path: &Path) -> Result<Self, String> {
        let lib = Libpmemobj::load()?;
        let c_path = c_path(path)?;
        // SAFETY: NUL-terminated path and layout; PMDK replays its logs and returns a handle
        // or null.
        let pool = unsafe { (lib.open)(c_path.as_ptr(), LAYOUT.as_ptr()) };
        let pool = NonNull::new(pool)
            .ok_or_else(|| format!("pmemobj_open {}: {}", path.display(), lib.errormsg()))?;
        Self::over(lib, pool, path, None)
    }

    fn slots(&self) -> usize {
        self.slots
    }

    fn alloc_into(&self, slot: usize, size: usize) -> Result<(), String> {
        let _claim = self.claims.claim(slot)?;
        let oid = self.oid(slot);
        // SAFETY: the slot is ours (claim); `oid` points into the root.
        if !unsafe { oid.read() }.is_null() {
            return Err(format!("slot {slot} already holds a block"));
        }
        // SAFETY: an open pool; `oid` lies inside it, so PMDK sets it atomically with the
        // allocation; no constructor.
        let rc = unsafe {
            (self.lib.alloc)(
                self.pool.as_ptr(),
                oid,
                size,
                TYPE_NUM,
                None,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(format!("pmemobj_alloc({size}): {}", self.lib.errormsg()));
        }
        Ok(())
    }

    fn free_from(&self, slot: usize) -> Result<(), String> {
        let _claim = self.claims.claim(slot)?;
        let oid = self.oid(slot);
        // SAFETY: the slot is ours (claim); `oid` points into the root.
        if unsafe { oid.read() }.is_null() {
            return Err(format!("slot {slot} is empty"));
        }
        // SAFETY: `oid` names a live block of this pool (set by `pmemobj_alloc`); PMDK frees
        // it and nulls `oid` atomically.
        unsafe { (self.lib.free)(oid) };
        Ok(())
    }

    fn is_live(&self, slot: usize) -> Result<bool, String> {
        let _claim = self.claims.claim(slot)?;
        // SAFETY: the slot is ours (claim); its oid lies in the root.
        Ok(!unsafe { self.oid(slot).read() }.is_null())
    }

    fn persist_counts(&self) -> Option<PersistStats> {
        None
    }
}

impl Drop for PmdkHeap {
    fn drop(&mut self) {
        // SAFETY: the pool was opened or created by this heap and is closed only here; `&mut
        // self` means no call is in flight.
        unsafe { (self.lib.close)(self.pool.as_ptr()) };
    }
}

impl PmdkHeap {
    /// The address of the block in `slot` (null when empty), for tests.
    ///
    /// # Errors
    ///
    /// As [`SlotHeap::is_live`].
    pub fn block_address(&self, slot: usize) -> Result<*mut u8, String> {
        let _claim = self.claims.claim(slot)?;
        // SAFETY: the slot is ours; its oid is null or a block of this open pool.
        Ok(unsafe { self.lib.direct(self.oid(slot).read()) })
    }

    /// The pool's base address (`pmemobj_direct` adds offsets to it).
    pub fn pool_base(&self) -> *mut u8 {
        self.pool.as_ptr().cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_named_with_the_package_to_install() {
        let err = Libpmemobj::load_from("libpmemobj-not-here.so.1").unwrap_err();
        assert_eq!(
            err,
            "libpmemobj-not-here.so.1 not found: install libpmemobj-dev"
        );
        match Libpmemobj::load_from(LIBPMEMOBJ_SONAME) {
            Ok(_) => {}
            Err(e) => assert_eq!(e, "libpmemobj.so.1 not found: install libpmemobj-dev"),
        }
    }

    /// A pool path in the pool directory (/dev/shm), removed on drop, even when the test
    /// fails.
    fn scratch(name: &str) -> crate::workloads::ScratchPool {
        crate::workloads::ScratchPool::new(&crate::workloads::pmem::pool_dir(), "pmdk-test", name)
    }

    #[test]
    fn pmdk_round_trips_blocks_through_slots_and_a_reopen() {
        if let Err(reason) = PmdkHeap::available() {
            eprintln!("SKIPPED pmdk_round_trips_blocks_through_slots_and_a_reopen: {reason}");
            return;
        }
        let scratch = scratch("roundtrip");
        let path = &scratch.0;
        let heap = PmdkHeap::create(path, 16 << 20, 8).unwrap();
        assert_eq!(heap.slots(), 8);
        heap.alloc_into(3, 200).unwrap();
        heap.alloc_into(5, 4096).unwrap();
        assert!(heap.alloc_into(3, 8).unwrap_err().contains("already holds"));
        let block = heap.block_address(3).unwrap();
        assert!(!block.is_null());
        // The block lies in the pool's mapping, past the root.
        let base = heap.pool_base();
        assert!(block > base && (block as usize) < base as usize + (16 << 20));
        assert_eq!(block as usize % 16, 0, "PMDK blocks are 16-byte aligned");
        // SAFETY: a live 200-byte block of ours.
        unsafe { block.write_bytes(0xA5, 200) };
        heap.free_from(5).unwrap();
        assert!(heap.free_from(5).unwrap_err().contains("empty"));
        assert!(!heap.is_live(5).unwrap());
        assert_eq!(heap.persist_counts(), None);
        drop(heap);

        let heap = PmdkHeap::open(path).unwrap();
        assert_eq!(heap.slots(), 8);
        let live: Vec<usize> = (0..8).filter(|&s| heap.is_live(s).unwrap()).collect();
        assert_eq!(live, [3]);
        let block = heap.block_address(3).unwrap();
        // SAFETY: the block survived the reopen with its 200 bytes.
        let bytes = unsafe { std::slice::from_raw_parts(block, 200) };
        assert!(bytes.iter().all(|&b| b == 0xA5));
        heap.free_from(3).unwrap();
        drop(heap);
        assert!(
            PmdkHeap::create(path, 16 << 20, 8)
                .unwrap_err()
                .contains("pmemobj_create")
        );
        std::fs::remove_file(path).unwrap();
        assert!(PmdkHeap::open(path).unwrap_err().contains("pmemobj_open"));
    }

    #[test]
    fn a_pmdk_pool_of_another_layout_or_root_is_refused() {
        if let Err(reason) = PmdkHeap::available() {
            eprintln!("SKIPPED a_pmdk_pool_of_another_layout_or_root_is_refused: {reason}");
            return;
        }
        let lib = Libpmemobj::load().unwrap();
        let scratch = scratch("foreign");
        let path = &scratch.0;
        let c = c_path(path).unwrap();
        // SAFETY: as in `create`, with an empty root of 8 bytes.
        unsafe {
            let pool = (lib.create)(c.as_ptr(), LAYOUT.as_ptr(), 16 << 20, 0o600);
            assert!(!pool.is_null(), "{}", lib.errormsg());
            let root = (lib.root)(pool, 8);
            assert!(!root.is_null());
            (lib.close)(pool);
        }
        let err = PmdkHeap::open(path).unwrap_err();
        assert!(
            err.contains("no slot array") || err.contains("not an alloclab"),
            "{err}"
        );
        std::fs::remove_file(path).unwrap();
    }
}
