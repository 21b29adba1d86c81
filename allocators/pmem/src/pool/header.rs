//! The pool header: two checksummed copies in the first four cache lines.
//!
//! ```text
//! offset  lines   contents
//!      0  0-1     primary copy  (128 bytes)
//!    128  2-3     backup copy   (128 bytes, the same bytes when the pool is healthy)
//! ```
//!
//! One copy, little-endian:
//!
//! ```text
//! offset size field
//!      0   16 magic             "ALLOCLABpmemheap"
//!     16    4 version           FORMAT_VERSION (1)
//!     20    4 flags             none defined in version 1: must be 0
//!     24    8 pool_size         bytes of the pool (<= bytes of the medium)
//!     32   16 pool_id           random at creation
//!     48    8 root_offset       ┐
//!     56    8 root_size         │
//!     64    8 metadata_offset   │ the layout (see layout.rs)
//!     72    8 metadata_size     │
//!     80    8 heap_offset       │
//!     88    8 heap_size         ┘
//!     96   24 reserved          must be 0
//!    120    8 checksum          FNV-1a 64 of bytes 0..120
//! ```
//!
//! The magic, the version at 16..20 and the checksum at 120..128 (FNV-1a 64 of the
//! bytes before it) are frozen for every future version, so that a build can tell "a pool
//! of another version" (valid checksum, other version) from "a damaged pool" (bad
//! checksum). FNV-1a detects every change of a single byte: each step `h = (h ^ b) * P`
//! is a bijection of `h` for a fixed `b` and of `b` for a fixed `h`.
//!
//! Updates write the primary, persist it, then the backup, and persist it: at any crash
//! point at least one copy is whole, and `open` prefers the primary (the newer one).

use crate::persist::CACHE_LINE;

/// The first 16 bytes of each header copy.
pub const MAGIC: [u8; 16] = *b"ALLOCLABpmemheap";

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Flags this build understands (none yet).
pub const KNOWN_FLAGS: u32 = 0;

/// Bytes of one header copy: two cache lines.
pub const HEADER_COPY_BYTES: usize = 2 * CACHE_LINE;

/// Offset of the primary copy.
pub const PRIMARY_OFFSET: usize = 0;

/// Offset of the backup copy.
pub const BACKUP_OFFSET: usize = HEADER_COPY_BYTES;

/// Bytes of the header area (both copies); the root object follows it.
pub const HEADER_AREA_BYTES: usize = 2 * HEADER_COPY_BYTES;

const VERSION_AT: usize = 16;
const FLAGS_AT: usize = 20;
const POOL_SIZE_AT: usize = 24;
const POOL_ID_AT: usize = 32;
const ROOT_OFFSET_AT: usize = 48;
const ROOT_SIZE_AT: usize = 56;
const METADATA_OFFSET_AT: usize = 64;
const METADATA_SIZE_AT: usize = 72;
const HEAP_OFFSET_AT: usize = 80;
const HEAP_SIZE_AT: usize = 88;
const RESERVED_AT: usize = 96;
const CHECKSUM_AT: usize = 120;

/// One header copy as bytes.
pub type HeaderBytes = [u8; HEADER_COPY_BYTES];

/// The decoded fields of a header (a DRAM copy; changing it changes nothing in the pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Format version ([`FORMAT_VERSION`] for any header a `Pool` holds).
    pub version: u32,
    /// Flags (none defined).
    pub flags: u32,
    /// Bytes of the pool.
    pub pool_size: u64,
    /// Random at creation: tells pools (and copies of one pool) apart.
    pub pool_id: [u8; 16],
    /// Offset of the root object.
    pub root_offset: u64,
    /// Bytes of the root object.
    pub root_size: u64,
    /// Offset of the metadata area.
    pub metadata_offset: u64,
    /// Bytes of the metadata area.
    pub metadata_size: u64,
    /// Offset of the heap.
    pub heap_offset: u64,
    /// Bytes of the heap.
    pub heap_size: u64,
}

/// Why one header copy is unusable. The first two say the copy was written on purpose
/// (valid checksum) by something this build does not follow; the last two, that it is
/// damaged or was never written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyFault {
    /// Valid checksum, another format version.
    OtherVersion { version: u32 },
    /// Valid checksum and version, reserved bytes set.
    ReservedNonZero,
    /// Magic present, checksum wrong.
    BadChecksum {
        version: u32,
        stored: u64,
        computed: u64,
    },
    /// No magic.
    NoMagic { found: [u8; 16] },
}

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

fn u32_at(bytes: &HeaderBytes, at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &HeaderBytes, at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

impl Header {
    /// The bytes of one copy: magic, fields, zeroed reserved bytes, checksum.
    pub fn encode(&self) -> HeaderBytes {
        let mut bytes = [0u8; HEADER_COPY_BYTES];
        bytes[..16].copy_from_slice(&MAGIC);
        bytes[VERSION_AT..VERSION_AT + 4].copy_from_slice(&self.version.to_le_bytes());
        bytes[FLAGS_AT..FLAGS_AT + 4].copy_from_slice(&self.flags.to_le_bytes());
        bytes[POOL_ID_AT..POOL_ID_AT + 16].copy_from_slice(&self.pool_id);
        for (at, value) in [
            (POOL_SIZE_AT, self.pool_size),
            (ROOT_OFFSET_AT, self.root_offset),
            (ROOT_SIZE_AT, self.root_size),
            (METADATA_OFFSET_AT, self.metadata_offset),
            (METADATA_SIZE_AT, self.metadata_size),
            (HEAP_OFFSET_AT, self.heap_offset),
            (HEAP_SIZE_AT, self.heap_size),
        ] {
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        let checksum = fnv1a64(&bytes[..CHECKSUM_AT]);
        bytes[CHECKSUM_AT..].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// The header in one copy, or why the copy cannot be used. Checks the copy alone;
    /// whether its layout fits the medium is checked by
    /// [`Pool::open`](super::Pool::open).
    pub(crate) fn decode(bytes: &HeaderBytes) -> Result<Header, CopyFault> {
        if bytes[..16] != MAGIC {
            return Err(CopyFault::NoMagic {
                found: bytes[..16].try_into().expect("16 bytes"),
            });
        }
        let version = u32_at(bytes, VERSION_AT);
        let stored = u64_at(bytes, CHECKSUM_AT);
        let computed = fnv1a64(&bytes[..CHECKSUM_AT]);
        if stored != computed {
            return Err(CopyFault::BadChecksum {
                version,
                stored,
                computed,
            });
        }
        if version != FORMAT_VERSION {
            return Err(CopyFault::OtherVersion { version });
        }
        if bytes[RESERVED_AT..CHECKSUM_AT].iter().any(|&b| b != 0) {
            return Err(CopyFault::ReservedNonZero);
        }
        Ok(Header {
            version,
            flags: u32_at(bytes, FLAGS_AT),
            pool_size: u64_at(bytes, POOL_SIZE_AT),
            pool_id: bytes[POOL_ID_AT..POOL_ID_AT + 16]
                .try_into()
                .expect("16 bytes"),
            root_offset: u64_at(bytes, ROOT_OFFSET_AT),
            root_size: u64_at(bytes, ROOT_SIZE_AT),
            metadata_offset: u64_at(bytes, METADATA_OFFSET_AT),
            metadata_size: u64_at(bytes, METADATA_SIZE_AT),
            heap_offset: u64_at(bytes, HEAP_OFFSET_AT),
            heap_size: u64_at(bytes, HEAP_SIZE_AT),
        })
    }
}

/// Re-seals a copy after a test edited its fields: recomputes the checksum.
#[cfg(test)]
pub(crate) fn reseal(bytes: &mut HeaderBytes) {
    let checksum = fnv1a64(&bytes[..CHECKSUM_AT]);
    bytes[CHECKSUM_AT..].copy_from_slice(&checksum.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            version: FORMAT_VERSION,
            flags: 0,
            pool_size: 1 << 20,
            pool_id: *b"0123456789abcdef",
            root_offset: 256,
            root_size: 100,
            metadata_offset: 384,
            metadata_size: 16_128,
            heap_offset: 16_512,
            heap_size: 1_032_064,
        }
    }

    #[test]
    fn fnv1a64_matches_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn encode_then_decode_gives_the_same_header() {
        let bytes = sample().encode();
        assert_eq!(&bytes[..16], b"ALLOCLABpmemheap");
        assert_eq!(Header::decode(&bytes), Ok(sample()));
    }

    #[test]
    fn every_single_byte_change_of_a_copy_is_refused() {
        let bytes = sample().encode();
        for at in 0..HEADER_COPY_BYTES {
            for flip in [0x01, 0x80, 0xff] {
                let mut damaged = bytes;
                damaged[at] ^= flip;
                let fault = Header::decode(&damaged).expect_err("damaged copy accepted");
                assert!(
                    matches!(
                        fault,
                        CopyFault::NoMagic { .. } | CopyFault::BadChecksum { .. }
                    ),
                    "byte {at} ^ {flip:#x}: {fault:?}"
                );
            }
        }
    }

    #[test]
    fn another_version_with_a_valid_checksum_is_told_apart_from_damage() {
        let mut bytes = sample().encode();
        bytes[VERSION_AT..VERSION_AT + 4].copy_from_slice(&7u32.to_le_bytes());
        assert!(matches!(
            Header::decode(&bytes),
            Err(CopyFault::BadChecksum { version: 7, .. })
        ));
        reseal(&mut bytes);
        assert_eq!(
            Header::decode(&bytes),
            Err(CopyFault::OtherVersion { version: 7 })
        );
    }

    #[test]
    fn reserved_bytes_written_on_purpose_are_refused() {
        let mut bytes = sample().encode();
        bytes[RESERVED_AT + 3] = 1;
        reseal(&mut bytes);
        assert_eq!(Header::decode(&bytes), Err(CopyFault::ReservedNonZero));
    }
}
