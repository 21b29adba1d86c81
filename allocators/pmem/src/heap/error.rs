//! Why a heap operation failed.

use std::fmt;

use crate::{MediumError, PoolError};

/// Why a [`PersistentHeap`](super::PersistentHeap) operation failed.
///
/// Bad input is reported with one of these, before anything is written: the heap never
/// panics on it and never corrupts itself because of it.
#[derive(Debug)]
#[non_exhaustive]
pub enum HeapError {
    /// The pool layer refused the medium (not a pool, bad checksum, too small, …).
    Pool(PoolError),
    /// The medium could not be created or opened (file exists, locked, not found, …).
    Medium(MediumError),
    /// No room for the request now (it could fit in an emptier heap).
    OutOfSpace {
        /// Bytes asked for.
        requested: usize,
    },
    /// A request for zero bytes.
    ZeroSize,
    /// A request larger than the whole heap could ever serve.
    TooLarge {
        /// Bytes asked for.
        requested: usize,
        /// The largest request this heap can serve.
        max: usize,
    },
    /// An alignment above a cache line (blocks are only cache-line aligned).
    UnsupportedAlignment {
        /// The alignment asked for.
        align: usize,
    },
    /// The destination is not 8 bytes inside the root or inside a live block of this pool.
    DestOutsidePool {
        /// The destination's address.
        address: usize,
    },
    /// The destination is not aligned to 8 bytes.
    MisalignedDest {
        /// The destination's address.
        address: usize,
    },
    /// `free_from` of a destination that holds the null pointer.
    NullDest,
    /// `free_from` of a destination that does not hold the start of a live block (a
    /// pointer into the middle of a block, outside the heap, or to a freed block).
    NotABlock {
        /// The offset the destination holds.
        offset: u64,
    },
}

impl fmt::Display for HeapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pool(e) => write!(f, "pool: {e}"),
            Self::Medium(e) => write!(f, "medium: {e}"),
            Self::OutOfSpace { requested } => {
                write!(f, "out of space: no room for {requested} bytes in the heap")
            }
            Self::ZeroSize => write!(f, "allocation of zero bytes"),
            Self::TooLarge { requested, max } => write!(
                f,
                "request of {requested} bytes exceeds the largest this heap can serve ({max})"
            ),
            Self::UnsupportedAlignment { align } => write!(
                f,
                "alignment {align} is above the {}-byte cache line blocks are aligned to",
                crate::persist::CACHE_LINE
            ),
            Self::DestOutsidePool { address } => write!(
                f,
                "destination {address:#x} is not inside the root or a live block of the pool"
            ),
            Self::MisalignedDest { address } => {
                write!(f, "destination {address:#x} is not aligned to 8 bytes")
            }
            Self::NullDest => write!(f, "free of a destination that holds the null pointer"),
            Self::NotABlock { offset } => write!(
                f,
                "the destination holds {offset:#x}, which is not the start of a live block"
            ),
        }
    }
}

impl std::error::Error for HeapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Pool(e) => Some(e),
            Self::Medium(e) => Some(e),
            _ => None,
        }
    }
}

impl From<PoolError> for HeapError {
    fn from(e: PoolError) -> Self {
        Self::Pool(e)
    }
}

impl From<MediumError> for HeapError {
    fn from(e: MediumError) -> Self {
        Self::Medium(e)
    }
}
