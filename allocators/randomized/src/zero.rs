//! Zero-size blocks ([`Checks::ZERO_SIZE`](crate::Checks::ZERO_SIZE)): unique pointers into
//! a region mapped without access, so that a read or a write through one faults at once.
//!
//! The region (1 MiB of address space, no memory) is reserved at the first zero-size
//! request; a bitmap in the control block says which of its 65 536 16-byte slots are live.
//! Taking and returning a slot is one atomic read-modify-write on the bitmap, without a
//! lock. Slots are handed out in an order scrambled by the heap's key, so that the next
//! zero-size pointer is not the last one plus 16. When every slot is live, a zero-size
//! request gets an ordinary block of the smallest size instead.

use core::ptr;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::heap::{GRANULE, Invalid};

/// Slots of the region (a power of two).
const SLOTS: usize = 1 << 16;
/// Bytes of address space the region takes.
pub(crate) const REGION: usize = SLOTS * GRANULE;

/// The region and its bitmap, in the control block (mapped zeroed: no region yet, every
/// slot free).
#[repr(C)]
pub(crate) struct ZeroSize {
    /// The region's base; 0 until the first zero-size request.
    base: AtomicUsize,
    /// Requests so far, scrambled into slot numbers.
    cursor: AtomicUsize,
    /// Zero-size blocks handed out, and freed (reallocations in place count as both, as
    /// `Stats` counts them).
    allocations: AtomicU64,
    deallocations: AtomicU64,
    /// One bit per slot: live.
    live: [AtomicU64; SLOTS / 64],
}

impl ZeroSize {
    /// The region's base, reserving it at the first call; `None` if the OS refuses.
    fn region(&self) -> Option<usize> {
        let base = self.base.load(Ordering::Acquire);
        if base != 0 {
            return Some(base);
        }
        // SAFETY: an anonymous mapping without access, at an address of the kernel's
        // choosing: it touches no existing memory and commits none.
        let fresh = unsafe {
            libc::mmap(
                ptr::null_mut(),
                REGION,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if fresh == libc::MAP_FAILED {
            return None;
        }
        match self
            .base
            .compare_exchange(0, fresh as usize, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Some(fresh as usize),
            Err(winner) => {
                // SAFETY: the mapping just made, which nothing else saw.
                unsafe { libc::munmap(fresh, REGION) };
                Some(winner)
            }
        }
    }

    /// A unique zero-size pointer, or `None` (the region could not be reserved, or every
    /// slot is live).
    pub(crate) fn allocate(&self, key: u64) -> Option<usize> {
        let base = self.region()?;
        for _ in 0..SLOTS {
            let n = self.cursor.fetch_add(1, Ordering::Relaxed);
            // Multiplying by an odd number permutes the slots, and so does the xor: every
            // slot is tried once in SLOTS requests.
            let slot = (n.wrapping_mul(0x9E37_79B9) ^ key as usize) & (SLOTS - 1);
            let bit = 1u64 << (slot % 64);
            // Relaxed: a slot names no memory, so its bit publishes nothing.
            if self.live[slot / 64].fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                self.allocations.fetch_add(1, Ordering::Relaxed);
                return Some(base + slot * GRANULE);
            }
        }
        None
    }

    /// Whether `address` lies in the region.
    #[inline]
    pub(crate) fn contains(&self, address: usize) -> bool {
        let base = self.base.load(Ordering::Relaxed);
        base != 0 && address.wrapping_sub(base) < REGION
    }

    /// The bitmap word and bit of the slot at `address`, which lies in the region.
    fn slot_of(&self, address: usize) -> Result<(&AtomicU64, u64), Invalid> {
        let offset = address - self.base.load(Ordering::Relaxed);
        if !offset.is_multiple_of(GRANULE) {
            return Err(Invalid::Misaligned);
        }
        let slot = offset / GRANULE;
        Ok((&self.live[slot / 64], 1 << (slot % 64)))
    }

    /// Frees the zero-size pointer `address`, which lies in the region.
    pub(crate) fn free(&self, address: usize) -> Result<(), Invalid> {
        let (word, bit) = self.slot_of(address)?;
        if word.fetch_and(!bit, Ordering::Relaxed) & bit == 0 {
            return Err(Invalid::DoubleFree);
        }
        self.deallocations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether `address`, in the region, is a live zero-size pointer.
    pub(crate) fn is_live(&self, address: usize) -> Result<(), Invalid> {
        let (word, bit) = self.slot_of(address)?;
        if word.load(Ordering::Relaxed) & bit == 0 {
            return Err(Invalid::DoubleFree);
        }
        Ok(())
    }

    /// Counts a reallocation of a zero-size block to zero bytes, which keeps it.
    pub(crate) fn count_resize(&self) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        self.deallocations.fetch_add(1, Ordering::Relaxed);
    }

    /// `(allocations, deallocations, live blocks)`.
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        let live = self
            .live
            .iter()
            .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
            .sum();
        (
            self.allocations.load(Ordering::Relaxed),
            self.deallocations.load(Ordering::Relaxed),
            live,
        )
    }

    /// The region, if reserved: `(base, length)`, for the heap's drop.
    pub(crate) fn mapping(&self) -> Option<(usize, usize)> {
        let base = self.base.load(Ordering::Relaxed);
        (base != 0).then_some((base, REGION))
    }
}
