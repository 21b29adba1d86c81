//! What a handle must offer so that [`Checked`](crate::Checked) can shadow it.

use core::fmt::Debug;
use core::ptr::NonNull;

/// A block's name in some allocator's address space.
///
/// `address` maps the handle to the first byte of its block in a linear address space
/// private to the allocator (a virtual address, a pool offset, page index × page size). Two
/// live blocks of one allocator overlap exactly when their address ranges
/// `address .. address + layout.size()` do, and a block honours an alignment `a` exactly
/// when `address % a == 0`.
///
/// # Safety
///
/// A handle is plain data: copying it, comparing it, formatting it with `Debug` and calling
/// [`address`](Self::address) must be sound from any thread, concurrently, even where the type
/// is not `Send` or `Sync` (as `NonNull` is not). [`Checked`](crate::Checked) relies on this to
/// keep handles in a shadow shared between threads.
pub unsafe trait BlockHandle: Copy + Eq + Debug {
    /// The address of the block's first byte in the allocator's address space.
    fn address(self) -> usize;
}

// SAFETY: a NonNull<u8> is a plain value; its `Eq`, `Debug` and address read no shared state.
unsafe impl BlockHandle for NonNull<u8> {
    #[inline]
    fn address(self) -> usize {
        self.as_ptr() as usize
    }
}

// SAFETY: a usize is a plain value; its `Eq`, `Debug` and address read no shared state.
unsafe impl BlockHandle for usize {
    #[inline]
    fn address(self) -> usize {
        self
    }
}

// SAFETY: a u64 is a plain value; its `Eq`, `Debug` and address read no shared state.
unsafe impl BlockHandle for u64 {
    #[inline]
    fn address(self) -> usize {
        usize::try_from(self).expect("u64 handle does not fit this platform's address space")
    }
}
