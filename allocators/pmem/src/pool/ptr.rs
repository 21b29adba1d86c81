//! Persistent pointers: offsets from the pool's base, typed, resolved against the heap.
//!
//! A [`PPtr<T>`] is a `u64` offset (0 is null: offset 0 is the header, never a block),
//! so a pool mapped at another address, or copied to another medium, keeps every pointer
//! valid. It is 8 bytes, and [`PPtr::store`] writes it with one aligned 8-byte store,
//! which is failure-atomic: after a crash the location holds the old pointer or the new
//! one, never a mix. This is the property the allocator's `allocate_into(dest)` builds on
//! (publishing a block is one such store, then a persist of its line).

use crate::sync::Ordering;
use crate::sync::raw::AtomicU64;
use std::fmt;
use std::marker::PhantomData;

use crate::Medium;

use super::{Pool, PoolError};

/// A typed persistent pointer: an offset from the pool's base (0 = null).
///
/// Only a number: creating one is safe, and [`Pool::resolve`] checks it before it becomes
/// an address.
#[repr(transparent)]
pub struct PPtr<T> {
    offset: u64,
    // `fn() -> T`: a PPtr owns no T and is Send + Sync whatever T is, like an integer.
    _points_to: PhantomData<fn() -> T>,
}

const _: () = assert!(size_of::<PPtr<u8>>() == 8 && size_of::<PPtr<[u64; 9]>>() == 8);

impl<T> PPtr<T> {
    /// The null pointer.
    pub const NULL: Self = Self::from_offset(0);

    /// The null pointer.
    pub const fn null() -> Self {
        Self::NULL
    }

    /// A pointer to `offset` bytes from the pool's base (0 is null).
    pub const fn from_offset(offset: u64) -> Self {
        Self {
            offset,
            _points_to: PhantomData,
        }
    }

    /// The offset from the pool's base.
    pub const fn offset(self) -> u64 {
        self.offset
    }

    /// Whether this is the null pointer.
    pub const fn is_null(self) -> bool {
        self.offset == 0
    }

    /// The same offset as a pointer to another type.
    pub const fn cast<U>(self) -> PPtr<U> {
        PPtr::from_offset(self.offset)
    }

    /// Stores `value` at `dest` with one aligned 8-byte store (failure-atomic: a crash
    /// keeps the old pointer or the new one). Release ordering, so a thread that
    /// [`load`](Self::load)s the new pointer sees what was written to the block before.
    /// Durability still needs a `persist` of `dest`'s line.
    ///
    /// # Safety
    ///
    /// `dest` must be valid for writes of 8 bytes, aligned to 8, and not accessed
    /// concurrently except through [`PPtr::store`] and [`PPtr::load`].
    pub unsafe fn store(dest: *mut PPtr<T>, value: PPtr<T>) {
        // SAFETY: `PPtr` is a transparent `u64`; the caller guarantees `dest` is valid,
        // 8-aligned (as `AtomicU64` needs) and only accessed atomically.
        let slot = unsafe { AtomicU64::from_ptr(dest.cast::<u64>()) };
        slot.store(value.offset, Ordering::Release);
    }

    /// Loads the pointer at `src` with one aligned 8-byte load (Acquire, pairing with
    /// [`store`](Self::store)).
    ///
    /// # Safety
    ///
    /// `src` must be valid for reads and writes of 8 bytes (as pool memory is: an atomic
    /// view needs writable memory even to load), aligned to 8, and not written
    /// concurrently except through [`PPtr::store`].
    pub unsafe fn load(src: *const PPtr<T>) -> PPtr<T> {
        // SAFETY: as in `store`; the caller guarantees validity, alignment and atomic-only
        // concurrent access. `AtomicU64::load` does not write through the pointer.
        let slot = unsafe { AtomicU64::from_ptr(src.cast::<u64>().cast_mut()) };
        Self::from_offset(slot.load(Ordering::Acquire))
    }
}

impl<T> Clone for PPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for PPtr<T> {}

impl<T> PartialEq for PPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.offset == other.offset
    }
}

impl<T> Eq for PPtr<T> {}

impl<T> std::hash::Hash for PPtr<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.offset.hash(state);
    }
}

impl<T> Default for PPtr<T> {
    fn default() -> Self {
        Self::NULL
    }
}

impl<T> fmt::Debug for PPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PPtr({:#x})", self.offset)
    }
}

impl<M: Medium> Pool<M> {
    /// The address `p` points to in this mapping, if `p` is not null, the whole `T` lies in
    /// the heap, and the address is aligned for `T`.
    pub fn resolve<T>(&self, p: PPtr<T>) -> Option<*mut T> {
        let heap = self.heap_range();
        let offset = usize::try_from(p.offset()).ok()?;
        if p.is_null() || offset >= heap.end() || !heap.contains_range(offset, size_of::<T>()) {
            return None;
        }
        // SAFETY: `offset` is inside the heap, which is inside the mapping.
        let address = unsafe { self.base().add(offset) }.cast::<T>();
        address.is_aligned().then_some(address)
    }

    /// The persistent pointer to `address`, if it lies in this mapping's heap (the inverse
    /// of [`resolve`](Self::resolve)).
    pub fn pptr_of<T>(&self, address: *const T) -> Option<PPtr<T>> {
        let offset = (address as usize).checked_sub(self.base() as usize)?;
        let p = PPtr::from_offset(offset as u64);
        self.resolve(p).map(|_| p)
    }

    /// The root object as a `T`, if `T` fits in it and its address is aligned for `T`.
    ///
    /// The root is zeroed at creation; reading it as a `T` for which all-zero bytes are
    /// not a valid value is the caller's responsibility.
    pub fn root<T>(&self) -> Result<*mut T, PoolError> {
        let root = self.root_range();
        if size_of::<T>() > root.len {
            return Err(PoolError::RootTooSmall {
                type_size: size_of::<T>(),
                root_size: root.len as u64,
            });
        }
        // SAFETY: the root lies inside the mapping (validated at open, computed at create).
        let address = unsafe { self.base().add(root.offset) }.cast::<T>();
        if !address.is_aligned() {
            return Err(PoolError::RootMisaligned {
                type_align: align_of::<T>(),
                offset: root.offset as u64,
            });
        }
        Ok(address)
    }
}
