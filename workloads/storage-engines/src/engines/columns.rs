//! Tuples whose columns live out of line (N-Store's non-inlined fields), for InP and LSM.
//!
//! N-Store keeps a tuple's fixed-size fields in the tuple and each variable-length field
//! (YCSB's 200-byte string columns) in a block of its own that the tuple points to,
//! allocated from the persistent heap. Here a value is cut into columns of
//! [`COLUMN_BYTES`] (the last may be shorter):
//!
//! ```text
//!  tuple block   [hide(len)][column 0 offset][column 1 offset] … (raw links), zero tail
//!  column block  the column's bytes, zero tail
//! ```
//!
//! Every block is allocated through the open transaction's log ([`TxLog::alloc`]: a
//! rollback or a crash before commit gives it back) and written whole and flushed before
//! the transaction's apply fence; the tuple is the one block an engine links, its columns
//! are reached through it. A YCSB tuple is six blocks.
//!
//! A *tombstone* (LSM's record of a delete, a memtable entry as in N-Store) is a tuple
//! block with no columns whose length word is `TOMBSTONE_LEN` (`u64::MAX >> 1`).

use super::log::TxLog;
use super::{TUPLE_HEADER, hide, read_word, tuple_len};
use crate::{PersistentAllocator, Phase, Split};

/// Bytes of a column: a YCSB tuple's five 200-byte strings are five columns.
pub const COLUMN_BYTES: usize = 200;

/// Values longer than this are refused as corrupt.
const MAX_LEN: usize = 1 << 30;

/// The length a tombstone's word 0 holds (hidden): no value has it.
const TOMBSTONE_LEN: u64 = u64::MAX >> 1;

/// Allocates, writes and flushes a tombstone in `log`'s open transaction; returns its
/// offset, for the caller to link.
///
/// # Errors
///
/// The heap is out of space; the log is full.
pub(crate) fn write_tombstone<H: PersistentAllocator>(
    heap: &H,
    split: &mut Split,
    log: &mut TxLog,
) -> Result<u64, String> {
    let (off, block) = log.alloc(heap, split, TUPLE_HEADER)?;
    let base = heap.at(off);
    split.time(Phase::Mod, || {
        // SAFETY: a fresh block of `block >= 8` bytes, this transaction's.
        unsafe {
            base.cast::<u64>().write(hide(TOMBSTONE_LEN));
            std::ptr::write_bytes(base.add(8), 0, block - 8);
        }
    });
    split.flush(heap, base, block);
    Ok(off)
}

/// Whether the block at `off` is a tombstone.
///
/// # Safety
///
/// `off` is a live tuple or tombstone.
pub(crate) unsafe fn is_tombstone<H: PersistentAllocator>(heap: &H, off: u64) -> bool {
    // SAFETY: the caller's contract.
    unsafe { read_word(heap, off, 0) == hide(TOMBSTONE_LEN) }
}

/// Columns of a value of `len` bytes.
pub(crate) fn columns(len: usize) -> usize {
    len.div_ceil(COLUMN_BYTES)
}

/// The byte range of column `c` in a value of `len` bytes.
pub(crate) fn column_range(c: usize, len: usize) -> std::ops::Range<usize> {
    c * COLUMN_BYTES..len.min((c + 1) * COLUMN_BYTES)
}

/// The offset of column `c` of the tuple at `off`.
///
/// # Safety
///
/// `off` is a live column tuple with more than `c` columns.
pub(crate) unsafe fn column_of<H: PersistentAllocator>(heap: &H, off: u64, c: usize) -> u64 {
    // SAFETY: the caller's contract: word `1 + c` of the tuple block.
    unsafe { read_word(heap, off, 1 + c) }
}

/// The value length of the column tuple at `off`, checked.
///
/// # Safety
///
/// `off` is a live column tuple.
pub(crate) unsafe fn value_len<H: PersistentAllocator>(
    heap: &H,
    off: u64,
) -> Result<usize, String> {
    // SAFETY: the caller's contract.
    let len = unsafe { tuple_len(heap, off) };
    if len > MAX_LEN {
        return Err(format!("tuple at {off:#x}: length {len} is corrupt"));
    }
    Ok(len)
}

/// Allocates a column block in `log`'s open transaction holding `parts` concatenated (zeros
/// to the block's end) and flushes it; returns its offset.
///
/// # Errors
///
/// The heap is out of space; the log is full.
pub(crate) fn new_column<H: PersistentAllocator>(
    heap: &H,
    split: &mut Split,
    log: &mut TxLog,
    parts: &[&[u8]],
) -> Result<u64, String> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let (off, block) = log.alloc(heap, split, len.max(1))?;
    fill_column(heap, split, off, block, parts);
    Ok(off)
}

/// Writes `parts` concatenated into the fresh column block at `off` of `block` bytes,
/// zeros to its end, and flushes it.
fn fill_column<H: PersistentAllocator>(
    heap: &H,
    split: &mut Split,
    off: u64,
    block: usize,
    parts: &[&[u8]],
) {
    let base = heap.at(off);
    split.time(Phase::Mod, || {
        // SAFETY: a fresh block of `block` bytes, at least the parts' length (the caller
        // asked for that many), this transaction's.
        unsafe {
            let mut at = 0;
            for part in parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), base.add(at), part.len());
                at += part.len();
            }
            std::ptr::write_bytes(base.add(at), 0, block - at);
        }
    });
    split.flush(heap, base, block);
}

/// Allocates, writes and flushes a column tuple of `value` (its columns, then the tuple) in
/// `log`'s open transaction, all its blocks in one call into the heap
/// ([`TxLog::alloc_many`]); returns the tuple's offset, for the caller to link.
///
/// # Errors
///
/// The heap is out of space; the log is full (the caller rolls the transaction back).
pub(crate) fn write_column_tuple<H: PersistentAllocator>(
    heap: &H,
    split: &mut Split,
    log: &mut TxLog,
    value: &[u8],
) -> Result<u64, String> {
    let n = columns(value.len());
    let mut sizes: Vec<usize> = (0..n)
        .map(|c| column_range(c, value.len()).len().max(1))
        .collect();
    sizes.push(TUPLE_HEADER + 8 * n);
    let mut blocks = Vec::with_capacity(n + 1);
    log.alloc_many(heap, split, &sizes, &mut blocks)?;
    let mut words = Vec::with_capacity(1 + n);
    words.push(hide(value.len() as u64));
    for (c, &(off, block)) in blocks[..n].iter().enumerate() {
        fill_column(
            heap,
            split,
            off,
            block,
            &[&value[column_range(c, value.len())]],
        );
        words.push(off);
    }
    let (off, block) = blocks[n];
    let base = heap.at(off);
    split.time(Phase::Mod, || {
        // SAFETY: a fresh block of `block >= 8 * (1 + n)` bytes, this transaction's.
        unsafe {
            std::ptr::copy_nonoverlapping(words.as_ptr(), base.cast::<u64>(), words.len());
            std::ptr::write_bytes(base.add(8 * words.len()), 0, block - 8 * words.len());
        }
    });
    split.flush(heap, base, block);
    Ok(off)
}

/// Copies the value of the column tuple at `off` into `out` (replacing its contents), timed
/// as [`Phase::Mod`].
///
/// # Errors
///
/// The tuple's length is corrupt.
///
/// # Safety
///
/// `off` is a live column tuple.
pub(crate) unsafe fn read_column_tuple<H: PersistentAllocator>(
    heap: &H,
    split: &mut Split,
    off: u64,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    split.time(Phase::Mod, || {
        // SAFETY: the caller's contract.
        let len = unsafe { value_len(heap, off) }?;
        out.clear();
        out.reserve(len);
        for c in 0..columns(len) {
            // SAFETY: column `c` of the tuple, a live block of the range's bytes.
            let bytes = unsafe {
                let col = column_of(heap, off, c);
                std::slice::from_raw_parts(heap.at(col).cast_const(), column_range(c, len).len())
            };
            out.extend_from_slice(bytes);
        }
        Ok(())
    })
}

/// The blocks of the column tuple at `off`: its columns, then the tuple (a tombstone: just
/// itself).
///
/// # Errors
///
/// The tuple's length is corrupt.
///
/// # Safety
///
/// `off` is a live column tuple (or one unlinked whose blocks are not yet freed).
pub(crate) unsafe fn column_tuple_blocks<H: PersistentAllocator>(
    heap: &H,
    off: u64,
) -> Result<Vec<u64>, String> {
    // SAFETY: the caller's contract.
    if unsafe { is_tombstone(heap, off) } {
        return Ok(vec![off]);
    }
    // SAFETY: the caller's contract.
    let n = columns(unsafe { value_len(heap, off) }?);
    let mut out: Vec<u64> = (0..n)
        // SAFETY: as above, `c < n`.
        .map(|c| unsafe { column_of(heap, off, c) })
        .collect();
    out.push(off);
    Ok(out)
}
