//! The three engines: in-place update, log-structured merge, copy-on-write, and what the
//! first two share: the persistent B+tree ([`btree`]) and the undo/redo transaction log
//! ([`log`]).
//!
//! # Words that are not links
//!
//! alloclab-pmem recovers by conservative reachability (see the [crate
//! documentation](crate)): every aligned word of a reachable block that equals a block
//! offset keeps that block. Block offsets are multiples of 64 below the pool's size, so
//! the engines store every word that is not a link *hidden* ([`hide`]): rotated left by one
//! and with bit 0 flipped. A hidden word is odd unless the word's top bit is set, and even
//! then it is a multiple of 64 below 2^40 (a plausible offset) only for a 2^-29 fraction of
//! the values with that bit set; keys, lengths, counts and the log's copies of old and new
//! words are all hidden, so that crash tests count leaks exactly. Links (child pointers,
//! tuple offsets) are stored raw: they are what keeps blocks alive.
//!
//! # Tuples
//!
//! A tuple block's word 0 is its value's length in bytes, hidden. InP and LSM keep the
//! value's columns out of line, each in a block of its own that the tuple links
//! ([`columns`]); the crash tests' engine without crash consistency keeps the bytes inline
//! from byte 8. Every block is asked for with [`PersistentAllocator::usable_size`] bytes and every byte
//! of it is written (the tail zeroed), so that no stale word of the block's earlier life
//! survives in it.

pub mod btree;
pub mod columns;
pub mod cow;
pub mod inp;
pub mod log;
pub mod lsm;

use super::{PersistentAllocator, Phase, Split};

/// Frees, in one [`Phase::Mm`] span and one call into the heap ([`PersistentAllocator::release_many`]),
/// the blocks that an earlier committed transaction unlinked (InP's and LSM's deferred
/// frees, through [`log::TxLog::free_at_next_alloc`]), emptying `retired`; no span when
/// there is nothing to free.
///
/// # Errors
///
/// The heap refused a block (not a live block); every other block is still freed.
///
/// # Safety
///
/// Every block in `retired` was unlinked by a committed transaction, and a fence made
/// since has made durable that no free line of the log names it any more: the heap may
/// hand it out again at once.
pub(crate) unsafe fn free_retired<H: PersistentAllocator>(
    heap: &H,
    split: &mut Split,
    retired: &mut Vec<u64>,
) -> Result<(), String> {
    if retired.is_empty() {
        return Ok(());
    }
    split.time(Phase::Mm, || {
        // SAFETY: the caller's contract.
        let freed = unsafe { heap.release_many(retired) };
        retired.clear();
        freed.map_err(String::from)
    })
}

/// Hides a data word from conservative reachability (see the module documentation);
/// [`unhide`] is its inverse.
#[inline]
pub fn hide(word: u64) -> u64 {
    word.rotate_left(1) ^ 1
}

/// The inverse of [`hide`].
#[inline]
pub fn unhide(hidden: u64) -> u64 {
    (hidden ^ 1).rotate_right(1)
}

/// Bytes before a tuple's value: its hidden length.
pub(crate) const TUPLE_HEADER: usize = 8;

/// Reads word `i` of the block at `off`.
///
/// # Safety
///
/// `off + 8 * i` is an aligned word inside the heap's mapping.
#[inline]
pub(crate) unsafe fn read_word<H: PersistentAllocator>(heap: &H, off: u64, i: usize) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { heap.at(off).cast::<u64>().add(i).read() }
}

/// Writes word `i` of the block at `off`, volatile: the compiler keeps the program order
/// of these stores, which the log relies on within a cache line (see [`log`]).
///
/// # Safety
///
/// As [`read_word`], and no other thread accesses the word.
#[inline]
pub(crate) unsafe fn write_word<H: PersistentAllocator>(heap: &H, off: u64, i: usize, value: u64) {
    // SAFETY: the caller's contract.
    unsafe { heap.at(off).cast::<u64>().add(i).write_volatile(value) }
}

/// The value length of the tuple at `off`.
///
/// # Safety
///
/// `off` is a live tuple block of this engine.
pub(crate) unsafe fn tuple_len<H: PersistentAllocator>(heap: &H, off: u64) -> usize {
    // SAFETY: word 0 of a live tuple.
    unhide(unsafe { read_word(heap, off, 0) }) as usize
}

/// Writes a whole tuple block at `off` (`block` bytes: [`PersistentAllocator::usable_size`] of the header and value, rounded up to a word): the
/// length, `parts` concatenated as the value, zeros to the block's end; and flushes it.
/// Timed as [`Phase::Mod`] (the copy) and [`Phase::Cc`] (the flush).
///
/// # Safety
///
/// `off` is a block of at least `block` bytes that only this thread uses, and
/// `block >= TUPLE_HEADER + sum of parts`.
#[cfg(test)]
pub(crate) unsafe fn write_tuple<H: PersistentAllocator>(
    heap: &H,
    split: &mut Split,
    off: u64,
    block: usize,
    parts: &[&[u8]],
) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    debug_assert!(block >= TUPLE_HEADER + len);
    let base = heap.at(off);
    split.time(Phase::Mod, || {
        // SAFETY: the block has `block` bytes, `TUPLE_HEADER + len` of them written here
        // and the rest zeroed; the caller owns it.
        unsafe {
            base.cast::<u64>().write(hide(len as u64));
            let mut at = TUPLE_HEADER;
            for part in parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), base.add(at), part.len());
                at += part.len();
            }
            std::ptr::write_bytes(base.add(at), 0, block - at);
        }
    });
    split.flush(heap, base, block);
}

/// Copies the value of the tuple at `off` into `out`, timed as [`Phase::Mod`].
///
/// # Safety
///
/// `off` is a live tuple block of this engine.
#[cfg(test)]
pub(crate) unsafe fn read_tuple<H: PersistentAllocator>(
    heap: &H,
    split: &mut Split,
    off: u64,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    split.time(Phase::Mod, || {
        // SAFETY: the caller's contract.
        let len = unsafe { tuple_len(heap, off) };
        if len > 1 << 30 {
            return Err(format!("tuple at {off:#x}: length {len} is corrupt"));
        }
        out.clear();
        out.reserve(len);
        // SAFETY: a live tuple holds `len` value bytes after its header.
        unsafe {
            std::ptr::copy_nonoverlapping(heap.at(off).add(TUPLE_HEADER), out.as_mut_ptr(), len);
            out.set_len(len);
        }
        Ok(())
    })
}

/// Checks that `[at, at + len)` lies inside a value of `value_len` bytes.
pub(crate) fn check_range(at: usize, len: usize, value_len: usize) -> Result<(), String> {
    match at.checked_add(len) {
        Some(end) if end <= value_len => Ok(()),
        _ => Err(format!(
            "update of {len} bytes at byte {at} is outside the {value_len}-byte value"
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use alloclab_pmem::persist::SplitMix64;
    use alloclab_pmem::{PersistentHeap, SimMedium};

    use super::*;
    use crate::Engine;

    pub(crate) type SimHeap = PersistentHeap<SimMedium>;

    /// Runs `ops` random operations over `keys` keys on `engine`, checking every result
    /// against `model`; commits every `E::COMMIT_EVERY` operations.
    pub(crate) fn random_ops<E: Engine<SimHeap>>(
        engine: &mut E,
        model: &mut BTreeMap<u64, Vec<u8>>,
        seed: u64,
        ops: usize,
        keys: u64,
    ) {
        let mut rng = SplitMix64::new(seed);
        let mut out = Vec::new();
        for i in 0..ops {
            // Keys spread over the range, top bit included.
            let key = (rng.next_u64() % keys).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            match rng.next_u64() % 10 {
                0..=3 => {
                    let len = match rng.next_u64() % 4 {
                        0 => 1000,
                        _ => 1 + (rng.next_u64() % 256) as usize,
                    };
                    let value: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                    let inserted = engine.insert(key, &value).unwrap();
                    assert_eq!(inserted, !model.contains_key(&key), "op {i}: insert");
                    model.entry(key).or_insert(value);
                }
                4..=5 => {
                    let len = model.get(&key).map_or(10, Vec::len);
                    let at = (rng.next_u64() % len as u64) as usize;
                    let n = 1 + (rng.next_u64() % (len - at) as u64) as usize;
                    let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                    let updated = engine.update(key, at, &bytes).unwrap();
                    assert_eq!(updated, model.contains_key(&key), "op {i}: update");
                    if let Some(v) = model.get_mut(&key) {
                        v[at..at + n].copy_from_slice(&bytes);
                    }
                }
                6..=7 => {
                    let deleted = engine.delete(key).unwrap();
                    assert_eq!(deleted, model.remove(&key).is_some(), "op {i}: delete");
                }
                _ => {
                    let found = engine.read(key, &mut out).unwrap();
                    assert_eq!(found.then_some(&out), model.get(&key), "op {i}: read");
                }
            }
            if (i + 1) % E::COMMIT_EVERY == 0 {
                engine.commit().unwrap();
            }
        }
        engine.commit().unwrap();
    }

    /// Every key of `model` reads back its value; `probe` absent keys read as absent.
    pub(crate) fn check_all<E: Engine<SimHeap>>(engine: &mut E, model: &BTreeMap<u64, Vec<u8>>) {
        let mut out = Vec::new();
        for (k, v) in model {
            assert!(engine.read(*k, &mut out).unwrap(), "key {k:#x} missing");
            assert_eq!(&out, v, "key {k:#x}");
        }
    }

    /// Out of space: the failing operation rolls back, nothing committed is lost, nothing
    /// leaks, deletes still work (and, where `delete_frees`, make room for inserts again),
    /// and the durable image recovers.
    pub(crate) fn out_of_space_rolls_back<E: Engine<SimHeap>>(delete_frees: bool) {
        let heap = Arc::new(SimHeap::create_on(SimMedium::new(1 << 20), 64).unwrap());
        let mut engine = E::create(Arc::clone(&heap), PersistentAllocator::root(&*heap)).unwrap();
        let mut model = BTreeMap::new();
        let mut failed = None;
        for k in 0..10_000u64 {
            let value = vec![(k % 251) as u8; 1000];
            match engine.insert(k, &value).and_then(|_| engine.commit()) {
                Ok(()) => {
                    model.insert(k, value);
                }
                Err(e) => {
                    failed = Some((k, e));
                    break;
                }
            }
        }
        let (k, e) = failed.expect("a 1 MiB heap fills up");
        assert!(e.contains("alloclab-pmem"), "{e}");
        let mut out = Vec::new();
        assert!(!engine.read(k, &mut out).unwrap() || model.contains_key(&k));
        check_all(&mut engine, &model);
        let blocks = engine.blocks().unwrap().unwrap();
        assert_eq!(
            heap.stats().live_blocks,
            blocks.len() as u64,
            "the failure leaked"
        );
        // Deletes go on.
        for k in 0..20u64 {
            assert!(engine.delete(k).unwrap());
            engine.commit().unwrap();
            model.remove(&k);
        }
        if delete_frees {
            // A value of the size that filled the heap: its class has the freed blocks.
            assert!(engine.insert(100_000, &[9; 1000]).unwrap());
            engine.commit().unwrap();
            model.insert(100_000, vec![9; 1000]);
        }
        check_all(&mut engine, &model);
        drop(engine);
        let image = heap.medium().durable_image();
        let heap2 = Arc::new(SimHeap::open_on(SimMedium::from_image(image)).unwrap());
        let mut engine =
            E::recover(Arc::clone(&heap2), PersistentAllocator::root(&*heap2)).unwrap();
        check_all(&mut engine, &model);
    }

    /// The engine contract on a simulated heap: random operations against a `BTreeMap`,
    /// blocks exactly accounted, reopen after a clean shutdown, errors that change nothing.
    pub(crate) fn engine_contract<E: Engine<SimHeap>>(ops: usize, keys: u64) {
        let heap = Arc::new(SimHeap::create_on(SimMedium::new(64 << 20), 64).unwrap());
        let root = PersistentAllocator::root(&*heap);
        let mut engine = E::create(Arc::clone(&heap), root).unwrap();
        let mut model = BTreeMap::new();
        random_ops(&mut engine, &mut model, 11, ops, keys);
        check_all(&mut engine, &model);
        let blocks = engine.blocks().unwrap().unwrap();
        assert_eq!(
            heap.stats().live_blocks,
            blocks.len() as u64,
            "runtime leak"
        );

        // Errors: past the value's end, nothing changes.
        let (&k, v) = model.iter().next().unwrap();
        let v = v.clone();
        assert!(engine.update(k, v.len(), b"x").is_err());
        assert!(engine.update(k, usize::MAX, b"xy").is_err());
        assert!(engine.update(k, 0, &vec![7; v.len() + 1]).is_err());
        engine.commit().unwrap();
        assert!(!engine.insert(k, b"other").unwrap());
        assert!(
            !engine.update(u64::MAX - 3, 0, b"z").unwrap() || model.contains_key(&(u64::MAX - 3))
        );
        engine.commit().unwrap();
        let mut out = Vec::new();
        assert!(engine.read(k, &mut out).unwrap());
        assert_eq!(out, v);
        assert_eq!(
            heap.stats().live_blocks,
            blocks.len() as u64,
            "an error leaked"
        );

        // Clean shutdown: the durable image holds everything.
        let split = engine.split().clone();
        assert!(split.fences > 0 && split.flushes > 0);
        drop(engine);
        let image = heap.medium().durable_image();
        let heap2 = Arc::new(SimHeap::open_on(SimMedium::from_image(image)).unwrap());
        let mut engine =
            E::recover(Arc::clone(&heap2), PersistentAllocator::root(&*heap2)).unwrap();
        check_all(&mut engine, &model);
        let blocks = engine.blocks().unwrap().unwrap();
        assert_eq!(
            heap2.stats().live_blocks,
            blocks.len() as u64,
            "leak after reopen"
        );
        // And it keeps working.
        random_ops(&mut engine, &mut model, 12, ops / 4, keys);
        check_all(&mut engine, &model);

        // A foreign root is refused.
        let other = Arc::new(SimHeap::create_on(SimMedium::new(1 << 20), 64).unwrap());
        assert!(E::recover(Arc::clone(&other), PersistentAllocator::root(&*other)).is_err());
    }

    #[test]
    fn hide_is_a_bijection_that_makes_small_words_odd() {
        for w in [
            0,
            1,
            64,
            4096,
            65_536,
            1 << 40,
            u64::MAX >> 1,
            u64::MAX,
            1 << 63,
        ] {
            assert_eq!(unhide(hide(w)), w);
            if w < 1 << 63 {
                assert_eq!(hide(w) % 2, 1, "{w}");
            }
        }
    }

    #[test]
    fn ranges_past_the_value_are_refused() {
        assert!(check_range(0, 10, 10).is_ok());
        assert!(check_range(5, 6, 10).is_err());
        assert!(check_range(usize::MAX, 2, 10).is_err());
    }
}
