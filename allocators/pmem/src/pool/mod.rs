//! The pool format: header, root object, persistent pointers (on any [`Medium`]).
//!
//! A pool is the whole medium, offsets from its first byte:
//!
//! ```text
//!  0        128       256        256+R'         M + meta              pool_size
//!  ├────────┼─────────┼──────────┼──────────────┼────────────────────┤
//!  │ header │ header  │ root     │ metadata     │ heap               │
//!  │primary │ backup  │ R bytes, │ 1 byte per   │ largest multiple   │
//!  │2 lines │ 2 lines │ R' = R   │ heap line    │ of a line that     │
//!  │        │         │ rounded  │ (allocator's)│ fits               │
//!  │        │         │ to lines │              │                    │
//!  └────────┴─────────┴──────────┴──────────────┴────────────────────┘
//! ```
//!
//! Every region starts on a cache line ([`CACHE_LINE`]); the header's copies each own two
//! lines (see [`header`]). Everything inside a pool refers to other places by offset
//! ([`PPtr`]), so the same bytes mapped at another address are the same pool.
//!
//! Crash consistency of [`Pool::create`]: a pool exists once the primary copy's magic is
//! durable, and the magic is the last thing written before the backup:
//!
//! 1. erase the magic of both copies, persist (an older pool on the medium is gone before
//!    anything of it is overwritten: a crash here leaves it whole or no pool);
//! 2. zero the root and the metadata, write both copies without their magic, persist;
//! 3. write the primary's magic, persist (the pool now opens);
//! 4. write the backup's magic, persist (a crash before this is repaired by `open`).
//!
//! [`Pool::open`] validates before it writes: a refused open leaves every byte as it was;
//! an accepted one rewrites a damaged or missing copy from the good one.

pub mod error;
pub mod header;
pub mod layout;
pub mod ptr;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

pub use error::PoolError;
pub use header::Header;
pub use layout::{Region, min_pool_size};
pub use ptr::PPtr;

use crate::Medium;
use crate::persist::CACHE_LINE;
use header::{
    BACKUP_OFFSET, CopyFault, FORMAT_VERSION, HEADER_AREA_BYTES, HEADER_COPY_BYTES, HeaderBytes,
    KNOWN_FLAGS, MAGIC, PRIMARY_OFFSET,
};
use layout::{MIN_HEAP_BYTES, round_up_to_line};

/// A pool on a medium: its validated header, and the medium.
pub struct Pool<M: Medium> {
    medium: M,
    header: Header,
    /// `medium.base()`, kept here: resolving an offset is a field load and an add, not a
    /// call through the medium (a `Box<dyn Medium>` in pool files) each time.
    base: *mut u8,
}

// SAFETY: `base` is a copy of the medium's base, which the `Medium` contract keeps valid
// and unmoved for the medium's life; the pool shares it exactly as the medium (itself
// `Send + Sync`) does.
unsafe impl<M: Medium> Send for Pool<M> {}
// SAFETY: as above.
unsafe impl<M: Medium> Sync for Pool<M> {}

impl<M: Medium> std::fmt::Debug for Pool<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("base", &self.medium.base())
            .field("kind", &self.medium.kind())
            .field("header", &self.header)
            .finish()
    }
}

impl<M: Medium> Pool<M> {
    /// Formats the whole medium as a new, empty pool with a zeroed root object of
    /// `root_size` bytes and zeroed metadata (the heap is left as it is).
    ///
    /// Whatever the medium held is lost, a pool included. A crash during `create` leaves
    /// either the new empty pool, the old pool untouched, or no pool (see the module
    /// documentation for the order of writes).
    pub fn create(medium: M, root_size: usize) -> Result<Self, PoolError> {
        check_mapping_alignment(&medium)?;
        let layout = layout::layout_for(medium.len(), root_size)?;
        let mut pool_id = [0u8; 16];
        getrandom::fill(&mut pool_id).map_err(|e| PoolError::Entropy {
            reason: e.to_string(),
        })?;
        let header = Header {
            version: FORMAT_VERSION,
            flags: 0,
            pool_size: medium.len() as u64,
            pool_id,
            root_offset: layout.root.offset as u64,
            root_size: layout.root.len as u64,
            metadata_offset: layout.metadata.offset as u64,
            metadata_size: layout.metadata.len as u64,
            heap_offset: layout.heap.offset as u64,
            heap_size: layout.heap.len as u64,
        };
        let image = header.encode();
        let magic_len = MAGIC.len();

        // 1. No pool on the medium before any of an old pool's bytes change.
        for copy in [PRIMARY_OFFSET, BACKUP_OFFSET] {
            write(&medium, copy, &[0; MAGIC.len()]);
            medium.flush(copy, magic_len);
        }
        medium.fence();

        // 2. Root, metadata, and both copies but their magic.
        let root_lines = layout.metadata.offset - layout.root.offset;
        zero(&medium, layout.root.offset, root_lines);
        medium.flush(layout.root.offset, root_lines);
        zero(&medium, layout.metadata.offset, layout.metadata.len);
        medium.flush(layout.metadata.offset, layout.metadata.len);
        for copy in [PRIMARY_OFFSET, BACKUP_OFFSET] {
            write(&medium, copy + magic_len, &image[magic_len..]);
            medium.flush(copy + magic_len, HEADER_COPY_BYTES - magic_len);
        }
        medium.fence();

        // 3. The pool exists.
        write(&medium, PRIMARY_OFFSET, &MAGIC);
        medium.persist(PRIMARY_OFFSET, magic_len);

        // 4. And survives damage to its primary copy.
        write(&medium, BACKUP_OFFSET, &MAGIC);
        medium.persist(BACKUP_OFFSET, magic_len);

        Ok(Self {
            base: medium.base(),
            medium,
            header,
        })
    }

    /// Opens the pool on `medium`: validates a header copy against the medium, then (only
    /// then) repairs the other copy if it differs.
    ///
    /// Refuses, writing nothing, a medium too small for a header, one without the pool
    /// magic, a pool of another format version, a header whose copies both fail their
    /// checksum, unknown flags, a pool larger than the medium (truncated), a root outside
    /// the pool and any other contradiction between layout fields.
    pub fn open(medium: M) -> Result<Self, PoolError> {
        if medium.len() < HEADER_AREA_BYTES {
            return Err(PoolError::TooSmall {
                size: medium.len() as u64,
                min: HEADER_AREA_BYTES as u64,
            });
        }
        check_mapping_alignment(&medium)?;
        let primary_bytes = read_copy(&medium, PRIMARY_OFFSET);
        let backup_bytes = read_copy(&medium, BACKUP_OFFSET);
        let (header, stale_copy) = choose_copy(
            Header::decode(&primary_bytes),
            Header::decode(&backup_bytes),
        )?;
        validate(&header, medium.len())?;

        let image = header.encode();
        let stale_bytes = match stale_copy {
            PRIMARY_OFFSET => primary_bytes,
            _ => backup_bytes,
        };
        if stale_bytes != image {
            write(&medium, stale_copy, &image);
            medium.persist(stale_copy, HEADER_COPY_BYTES);
        }
        Ok(Self {
            base: medium.base(),
            medium,
            header,
        })
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The pool's random id, drawn at creation.
    pub fn pool_id(&self) -> [u8; 16] {
        self.header.pool_id
    }

    /// Bytes of the pool (at most the medium's length).
    pub fn size_bytes(&self) -> usize {
        self.header.pool_size as usize
    }

    /// The first byte of the pool in this mapping.
    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// The root object: where the application keeps its entry points.
    pub fn root_range(&self) -> Region {
        region(self.header.root_offset, self.header.root_size)
    }

    /// The metadata area, zeroed at creation, for the allocator's durable state.
    pub fn metadata_range(&self) -> Region {
        region(self.header.metadata_offset, self.header.metadata_size)
    }

    /// The heap, where blocks are allocated ([`PPtr`]s resolve only into it).
    pub fn heap_range(&self) -> Region {
        region(self.header.heap_offset, self.header.heap_size)
    }

    /// The medium, for flushing and fencing what the allocator writes.
    pub fn medium(&self) -> &M {
        &self.medium
    }

    /// Closes the pool, giving the medium back.
    pub fn into_medium(self) -> M {
        self.medium
    }
}

/// Which copy to trust, and the offset of the other one (to repair if it differs).
fn choose_copy(
    primary: Result<Header, CopyFault>,
    backup: Result<Header, CopyFault>,
) -> Result<(Header, usize), PoolError> {
    // A valid checksum says the copy was written on purpose: by another version (perhaps
    // half-way through an upgrade that this build must not undo), or with reserved bytes.
    for fault in [&primary, &backup]
        .into_iter()
        .filter_map(|c| c.as_ref().err())
    {
        match *fault {
            CopyFault::OtherVersion { version } => {
                return Err(PoolError::UnsupportedVersion {
                    found: version,
                    supported: FORMAT_VERSION,
                });
            }
            CopyFault::ReservedNonZero => {
                return Err(PoolError::InconsistentHeader {
                    reason: "reserved header bytes 96..120 are not zero".into(),
                });
            }
            CopyFault::BadChecksum { .. } | CopyFault::NoMagic { .. } => {}
        }
    }
    match (primary, backup) {
        // The primary is written first, so when both are valid it is the newer.
        (Ok(header), _) => Ok((header, BACKUP_OFFSET)),
        (Err(_), Ok(header)) => Ok((header, PRIMARY_OFFSET)),
        (Err(primary), Err(backup)) => Err(no_valid_copy(primary, backup)),
    }
}

fn no_valid_copy(primary: CopyFault, backup: CopyFault) -> PoolError {
    let damaged = [primary, backup]
        .into_iter()
        .filter_map(|fault| match fault {
            CopyFault::BadChecksum {
                version,
                stored,
                computed,
            } => Some((version, stored, computed)),
            _ => None,
        });
    let damaged: Vec<_> = damaged.collect();
    // Both copies agreeing on another version is likelier a future format than damage.
    if let Some(&(version, ..)) = damaged.iter().find(|(v, ..)| *v != FORMAT_VERSION) {
        return PoolError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        };
    }
    if let Some(&(_, stored, computed)) = damaged.first() {
        return PoolError::BadChecksum { stored, computed };
    }
    match primary {
        CopyFault::NoMagic { found } => PoolError::NotAPool { found },
        _ => unreachable!("a copy with its magic is in `damaged`"),
    }
}

/// Checks a header copy's layout against itself and the medium.
fn validate(header: &Header, medium_len: usize) -> Result<(), PoolError> {
    if header.flags & !KNOWN_FLAGS != 0 {
        return Err(PoolError::UnknownFlags {
            flags: header.flags,
        });
    }
    let actual = medium_len as u64;
    if header.pool_size > actual {
        return Err(PoolError::Truncated {
            recorded: header.pool_size,
            actual,
        });
    }
    // From here on every field that ends inside the pool fits a usize.
    let pool_size = header.pool_size;
    let root_end = header.root_offset.checked_add(header.root_size);
    if header.root_offset < HEADER_AREA_BYTES as u64
        || !header.root_offset.is_multiple_of(CACHE_LINE as u64)
        || root_end.is_none_or(|end| end > pool_size)
    {
        return Err(PoolError::RootOutOfBounds {
            offset: header.root_offset,
            size: header.root_size,
            pool_size,
        });
    }
    let root_lines_end = round_up_to_line(root_end.unwrap_or(0) as usize).unwrap_or(usize::MAX);
    let inconsistent = |reason: String| Err(PoolError::InconsistentHeader { reason });
    for (name, offset, size) in [
        ("metadata", header.metadata_offset, header.metadata_size),
        ("heap", header.heap_offset, header.heap_size),
    ] {
        if !offset.is_multiple_of(CACHE_LINE as u64) || !size.is_multiple_of(CACHE_LINE as u64) {
            return inconsistent(format!(
                "{name} area ({size} bytes at {offset}) is not cache-line aligned"
            ));
        }
        if offset.checked_add(size).is_none_or(|end| end > pool_size) {
            return inconsistent(format!(
                "{name} area ({size} bytes at {offset}) ends past the pool's {pool_size} bytes"
            ));
        }
    }
    if header.metadata_offset < root_lines_end as u64 {
        return inconsistent(format!(
            "metadata area at {} overlaps the root's lines (up to {root_lines_end})",
            header.metadata_offset
        ));
    }
    if header.heap_offset < header.metadata_offset + header.metadata_size {
        return inconsistent(format!(
            "heap at {} overlaps the metadata area ending at {}",
            header.heap_offset,
            header.metadata_offset + header.metadata_size
        ));
    }
    if header.heap_size < MIN_HEAP_BYTES as u64 {
        return inconsistent(format!(
            "heap of {} bytes is smaller than the minimum {MIN_HEAP_BYTES}",
            header.heap_size
        ));
    }
    Ok(())
}

fn region(offset: u64, len: u64) -> Region {
    // Validated at open (or computed at create) to lie inside the mapping.
    Region {
        offset: offset as usize,
        len: len as usize,
    }
}

fn check_mapping_alignment<M: Medium>(medium: &M) -> Result<(), PoolError> {
    let base = medium.base() as usize;
    if !base.is_multiple_of(CACHE_LINE) {
        return Err(PoolError::MisalignedMapping { base });
    }
    Ok(())
}

fn read_copy<M: Medium>(medium: &M, offset: usize) -> HeaderBytes {
    assert!(offset + HEADER_COPY_BYTES <= medium.len());
    let mut bytes = [0u8; HEADER_COPY_BYTES];
    // SAFETY: the range is inside `base()..base() + len()` (asserted), which the `Medium`
    // contract makes readable; `bytes` is a distinct local buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(
            medium.base().add(offset),
            bytes.as_mut_ptr(),
            HEADER_COPY_BYTES,
        );
    }
    bytes
}

fn write<M: Medium>(medium: &M, offset: usize, bytes: &[u8]) {
    assert!(offset + bytes.len() <= medium.len());
    // SAFETY: the range is inside the mapping (asserted), writable by the `Medium`
    // contract; `bytes` is DRAM owned by the caller, never the mapping itself.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), medium.base().add(offset), bytes.len());
    }
}

fn zero<M: Medium>(medium: &M, offset: usize, len: usize) {
    assert!(offset + len <= medium.len());
    // SAFETY: the range is inside the mapping (asserted), writable by the `Medium` contract.
    unsafe { std::ptr::write_bytes(medium.base().add(offset), 0, len) };
}
