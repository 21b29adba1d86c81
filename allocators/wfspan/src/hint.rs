//! Hints to the processor: no effect on what the program computes.

/// Starts loading the cache line at `at` (a hint: no effect on what the program computes).
#[inline(always)]
pub(crate) fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no memory, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
