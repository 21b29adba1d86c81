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
pub trait BlockHandle: Copy + Eq + Debug {
    /// The address of the block's first byte in the allocator's address space.
    fn address(self) -> usize;
}

impl BlockHandle for NonNull<u8> {
    #[inline]
    fn address(self) -> usize {
        self.as_ptr() as usize
    }
}

impl BlockHandle for usize {
    #[inline]
    fn address(self) -> usize {
        self
    }
}

impl BlockHandle for u64 {
    #[inline]
    fn address(self) -> usize {
        usize::try_from(self).expect("u64 handle does not fit this platform's address space")
    }
}
