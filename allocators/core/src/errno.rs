//! The calling thread's `errno`, read and written through `__errno_location` (glibc, musl),
//! and a guard that restores it: C's `free` must not change `errno`, and a heap's free path
//! may make a system call (`munmap`, `madvise`) that does when it fails.
//!
//! `std::io::Error::last_os_error` only reads it, and allocates for some error kinds; these
//! functions never allocate.

use core::ffi::c_int;

/// The calling thread's `errno`.
#[inline]
pub fn get() -> c_int {
    // SAFETY: `__errno_location` returns the address of the calling thread's `errno`, valid
    // and aligned for as long as the thread runs.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno` to `value`.
#[inline]
pub fn set(value: c_int) {
    // SAFETY: as in `get`; only this thread accesses its own `errno`.
    unsafe { *libc::__errno_location() = value }
}

/// Restores `errno` to its value at creation when dropped: for functions that POSIX says
/// must not change it (`free`, `posix_memalign`) but that call a heap which may (an `mmap`
/// or `munmap` that fails and is handled).
#[must_use = "errno is restored when the guard is dropped"]
pub struct Preserved(c_int);

impl Preserved {
    /// Remembers the current `errno`.
    #[inline]
    pub fn new() -> Self {
        Self(get())
    }
}

impl Default for Preserved {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Preserved {
    #[inline]
    fn drop(&mut self) {
        set(self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_then_get_round_trips() {
        set(libc::EDOM);
        assert_eq!(get(), libc::EDOM);
        set(0);
        assert_eq!(get(), 0);
    }

    #[test]
    fn preserved_restores_the_value_it_saw() {
        set(libc::ERANGE);
        {
            let _guard = Preserved::new();
            set(libc::ENOMEM);
        }
        assert_eq!(get(), libc::ERANGE);
    }
}
