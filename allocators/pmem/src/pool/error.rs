//! Why a pool could not be created, opened or used: one variant per cause, each with the
//! numbers a user needs to act on it.

use std::fmt;

use super::header::MAGIC;

/// Why a pool operation failed.
///
/// A refused [`Pool::open`](super::Pool::open) leaves the medium exactly as it found it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolError {
    /// The medium is smaller than the header (at open) or than the smallest pool with the
    /// requested root (at create).
    TooSmall {
        /// Bytes in the medium.
        size: u64,
        /// Bytes needed at least.
        min: u64,
    },
    /// The mapping does not start on a cache-line boundary, so the header copies would not
    /// sit in lines of their own.
    MisalignedMapping {
        /// The address of the mapping.
        base: usize,
    },
    /// Neither header copy starts with the pool magic: this is not a pool.
    NotAPool {
        /// The first bytes of the primary copy.
        found: [u8; 16],
    },
    /// The pool was written by another format version.
    UnsupportedVersion {
        /// The version in the header.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// Both header copies carry the magic but neither checksum matches.
    BadChecksum {
        /// The checksum stored in the primary copy.
        stored: u64,
        /// The checksum of the primary copy's fields.
        computed: u64,
    },
    /// The header sets flags this build does not know.
    UnknownFlags {
        /// The flags field.
        flags: u32,
    },
    /// The header records a pool larger than the medium: the file was truncated.
    Truncated {
        /// Pool size in the header.
        recorded: u64,
        /// Bytes in the medium.
        actual: u64,
    },
    /// The root object does not lie between the header and the end of the pool.
    RootOutOfBounds {
        /// Root offset in the header.
        offset: u64,
        /// Root size in the header.
        size: u64,
        /// Pool size in the header.
        pool_size: u64,
    },
    /// The header's layout fields contradict each other (overlapping or misaligned regions).
    InconsistentHeader {
        /// What is wrong, in a few words with the numbers.
        reason: String,
    },
    /// [`Pool::root`](super::Pool::root) asked for a type larger than the root object.
    RootTooSmall {
        /// `size_of` the type asked for.
        type_size: usize,
        /// Bytes in the root object.
        root_size: u64,
    },
    /// [`Pool::root`](super::Pool::root) asked for a type whose alignment the root's
    /// address does not meet.
    RootMisaligned {
        /// `align_of` the type asked for.
        type_align: usize,
        /// The root's offset in the pool.
        offset: u64,
    },
    /// The heap has no room for the request (the allocator's error).
    OutOfSpace {
        /// Bytes asked for.
        requested: u64,
    },
    /// The operating system gave no random bytes for the pool id.
    Entropy {
        /// What `getrandom` said.
        reason: String,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooSmall { size, min } => {
                write!(f, "size too small: {size} bytes, at least {min} needed")
            }
            Self::MisalignedMapping { base } => write!(
                f,
                "mapping at {base:#x} is not aligned to a {}-byte cache line",
                crate::persist::CACHE_LINE
            ),
            Self::NotAPool { found } => write!(
                f,
                "not a pool: starts with \"{}\", expected \"{}\"",
                found.escape_ascii(),
                MAGIC.escape_ascii()
            ),
            Self::UnsupportedVersion { found, supported } => {
                write!(
                    f,
                    "pool format version {found}, this build reads {supported}"
                )
            }
            Self::BadChecksum { stored, computed } => write!(
                f,
                "bad header checksum in both copies (primary stores {stored:#018x}, its fields \
                 hash to {computed:#018x})"
            ),
            Self::UnknownFlags { flags } => {
                write!(f, "pool header sets unknown flags {flags:#010x}")
            }
            Self::Truncated { recorded, actual } => write!(
                f,
                "truncated pool: header records {recorded} bytes, the medium holds {actual}"
            ),
            Self::RootOutOfBounds {
                offset,
                size,
                pool_size,
            } => write!(
                f,
                "root object out of bounds: {size} bytes at offset {offset} in a pool of \
                 {pool_size} bytes"
            ),
            Self::InconsistentHeader { reason } => write!(f, "inconsistent pool header: {reason}"),
            Self::RootTooSmall {
                type_size,
                root_size,
            } => write!(
                f,
                "root type of {type_size} bytes does not fit the {root_size}-byte root object"
            ),
            Self::RootMisaligned { type_align, offset } => write!(
                f,
                "root object at offset {offset} is not aligned to {type_align} bytes"
            ),
            Self::OutOfSpace { requested } => {
                write!(f, "out of space: no room for {requested} bytes in the heap")
            }
            Self::Entropy { reason } => write!(f, "cannot draw a random pool id: {reason}"),
        }
    }
}

impl std::error::Error for PoolError {}
