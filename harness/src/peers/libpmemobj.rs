//! PMDK's libpmemobj, the part of its C API the [`pmdk`](super::pmdk) peer calls:
//! [`Libpmemobj`], loaded at run time with `dlopen` (as alloclab-pmem loads libpmem), so
//! that nothing needs PMDK to build and a machine without it only loses this peer, and the
//! C types it passes ([`PMEMoid`], [`PobjAction`], the opaque [`Pool`]).

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

/// The library's soname (PMDK's ABI version 1).
pub const LIBPMEMOBJ_SONAME: &str = "libpmemobj.so.1";
/// Test hook: a soname or path loaded instead of [`LIBPMEMOBJ_SONAME`] (a name that does not
/// exist shows what a machine without PMDK does).
pub const LIBRARY_OVERRIDE_ENV: &str = "ALLOCLAB_PMDK_LIBRARY";
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

/// `PMEMobjpool`, opaque.
pub type Pool = c_void;
type CreateFn =
    unsafe extern "C" fn(*const c_char, *const c_char, usize, libc::mode_t) -> *mut Pool;
type OpenFn = unsafe extern "C" fn(*const c_char, *const c_char) -> *mut Pool;
type CloseFn = unsafe extern "C" fn(*mut Pool);
type RootFn = unsafe extern "C" fn(*mut Pool, usize) -> PMEMoid;
type RootSizeFn = unsafe extern "C" fn(*mut Pool) -> usize;
type DirectFn = unsafe extern "C" fn(PMEMoid) -> *mut c_void;
type PoolByOidFn = unsafe extern "C" fn(PMEMoid) -> *mut Pool;
type FreeFn = unsafe extern "C" fn(*mut PMEMoid);
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

/// The functions of libpmemobj used here (by [`PmdkHeap`](super::pmdk::PmdkHeap)),
/// resolved from `libpmemobj.so.1`.
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
    pub(crate) free: FreeFn,
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
                free: std::mem::transmute::<*mut c_void, FreeFn>(required(c"pmemobj_free")?),
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

/// `path` as a C string for PMDK.
///
/// # Errors
///
/// The path contains a NUL byte.
pub fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: path contains a NUL byte", path.display()))
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
}
