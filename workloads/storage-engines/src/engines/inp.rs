//! InP, the in-place update engine (N-Store's InP on persistent memory): the index is a
//! persistent [`BTree`] from keys to tuple offsets, a tuple's columns live out of line in
//! blocks of their own, and every in-place change goes through an undo log ([`TxLog`],
//! which also keeps redo images so that a commit costs one fence) truncated at commit.
//!
//! # Tuples and columns (N-Store's non-inlined fields)
//!
//! A tuple's columns live out of line ([`columns`](super::columns)). An update never
//! writes a column in place: as in N-Store, it allocates a new copy of each column it
//! changes, swaps the tuple's pointer to it through the log, and frees the old copy after
//! commit. So a YCSB insert allocates six blocks (tuple and five columns), an update
//! allocates one and frees one, a delete frees six: the allocator traffic behind the
//! paper's memory-management share.
//!
//! # Partition root (64 bytes)
//!
//! ```text
//!  word 0  MAGIC (odd)
//!  word 1  the B+tree's root node offset (0: empty)
//!  word 2  the log block's offset
//! ```
//!
//! # Operations and fences
//!
//! * **insert**: search (index); allocate the columns and the tuple (`alloc`, no fence: the
//!   index link is the allocation), write and flush them; stage the leaf slot's key and
//!   value and the leaf's count (a split writes fresh nodes whole instead and swaps one
//!   pointer; see [`BTree`]); [`TxLog::apply`]: **1 fence**.
//! * **update**: search; allocate, fill and flush a new copy of each changed column; stage
//!   the tuple's pointer words; list the old columns to free; apply: **1 fence**.
//! * **delete**: search; stage the cleared slot and the count (or unlink an emptied leaf);
//!   the tuple, its columns and any emptied node are freed only after commit (deferred:
//!   the log's free lines name them raw, which keeps them alive until then); apply:
//!   **1 fence**.
//! * **commit**: one 8-byte store of the log's sequence + flush + **1 fence**, then the
//!   previous commit's deferred frees (`dealloc_many`, no fence; one commit late, so that
//!   no durable free line names a block the heap may hand out again), handed to the log
//!   ([`TxLog::free_at_next_alloc`]), which gives them back in the same heap call and
//!   [`Phase::Mm`] span as the next transaction's allocation (or, on a run of
//!   transactions that allocate nothing, all at once when [`FREE_BATCH`](super::log::FREE_BATCH) have
//!   gathered).
//!
//! So two fences per committed write (`COMMIT_EVERY = 1`); reads take none. A failed
//! operation (out of space, a full log) rolls its transaction back; an update past the
//! value's end is refused before anything is written.
//!
//! # Recovery
//!
//! [`TxLog::open`] undoes an uncommitted transaction (relinking what it unlinked, giving
//! back what it allocated) or completes the last commit; the frees of a commit that may not
//! all have happened are done again (the heap refuses those that had).

use std::sync::Arc;

use super::btree::BTree;
use super::columns::{
    COLUMN_BYTES, column_of, column_range, column_tuple_blocks, new_column, read_column_tuple,
    value_len, write_column_tuple,
};
use super::log::{FreeKind, TxLog};
use super::{check_range, write_word};
use crate::{Engine, PersistentAllocator, Phase, Split};

const MAGIC: u64 = 0x494E_5030_454E_4701;
const W_MAGIC: usize = super::log::PARTITION_MAGIC_WORD;
const W_TREE: usize = 1;
const W_LOG: usize = super::log::PARTITION_LOG_WORD;

/// The in-place update engine (see the module documentation).
pub struct Inp<H: PersistentAllocator> {
    heap: Arc<H>,
    tree: BTree,
    log: TxLog,
    split: Split,
    /// The blocks the last commit unlinked, still allocated: freed after the next fence
    /// (see [`commit`](Engine::commit)).
    retired: Vec<u64>,
}

impl<H: PersistentAllocator> Inp<H> {
    fn open_parts(heap: Arc<H>, root: *mut u8, log: TxLog, split: Split) -> Self {
        let root = heap.offset_of(root);
        Self {
            tree: BTree::new(root + 8 * W_TREE as u64),
            heap,
            log,
            split,
            retired: Vec::new(),
        }
    }

    /// The tuple of `key`, if any.
    fn find(&mut self, key: u64) -> Result<Option<u64>, String> {
        self.tree.get(&*self.heap, &mut self.split, key)
    }

    /// Applies the staged changes, or rolls the transaction back on `Err`.
    fn finish<T>(&mut self, r: Result<T, String>) -> Result<T, String> {
        match r {
            Ok(v) => {
                self.log.apply(&*self.heap, &mut self.split);
                Ok(v)
            }
            Err(e) => {
                self.log.rollback(&*self.heap, &mut self.split);
                Err(e)
            }
        }
    }

    fn insert_staged(&mut self, key: u64, value: &[u8]) -> Result<(), String> {
        let heap = &*self.heap;
        let off = write_column_tuple(heap, &mut self.split, &mut self.log, value)?;
        self.tree
            .put(heap, &mut self.split, &mut self.log, key, off)?;
        Ok(())
    }

    fn update_staged(
        &mut self,
        off: u64,
        len: usize,
        at: usize,
        bytes: &[u8],
    ) -> Result<(), String> {
        let end = at + bytes.len();
        for c in at / COLUMN_BYTES..=(end - 1) / COLUMN_BYTES {
            let range = column_range(c, len);
            let heap = &*self.heap;
            // SAFETY: column `c < columns(len)` of a tuple the index links.
            let old = unsafe { column_of(heap, off, c) };
            // SAFETY: a live column block of `range.len()` value bytes.
            let old_bytes =
                unsafe { std::slice::from_raw_parts(heap.at(old).cast_const(), range.len()) };
            // The column's bytes before, inside and after the updated range.
            let (from, to) = (at.max(range.start), end.min(range.end));
            let new = new_column(
                heap,
                &mut self.split,
                &mut self.log,
                &[
                    &old_bytes[..from - range.start],
                    &bytes[from - at..to - at],
                    &old_bytes[to - range.start..],
                ],
            )?;
            self.log.stage(
                heap,
                &mut self.split,
                off + 8 * (1 + c) as u64,
                &[new],
                Phase::Mod,
            )?;
            self.log.defer_free(FreeKind::Block, old)?;
        }
        Ok(())
    }

    /// Lists the tuple at `off` and its columns to be freed after commit.
    fn defer_free_tuple(&mut self, off: u64) -> Result<(), String> {
        // SAFETY: a tuple the index linked until this transaction.
        for block in unsafe { column_tuple_blocks(&*self.heap, off) }? {
            self.log.defer_free(FreeKind::Block, block)?;
        }
        Ok(())
    }
}

impl<H: PersistentAllocator> Engine<H> for Inp<H> {
    const NAME: &'static str = "inp";
    const ROOT_BYTES: usize = 64;
    const COMMIT_EVERY: usize = 1;

    fn create(heap: Arc<H>, root: *mut u8) -> Result<Self, String> {
        let mut split = Split::default();
        let (log, log_off) = TxLog::create(&*heap, &mut split)?;
        let root_off = heap.offset_of(root);
        // SAFETY: the partition's zeroed root words, this thread's.
        unsafe {
            write_word(&*heap, root_off, W_TREE, 0);
            write_word(&*heap, root_off, W_LOG, log_off);
            write_word(&*heap, root_off, W_MAGIC, MAGIC);
        }
        split.persist(&*heap, root, 24);
        Ok(Self::open_parts(heap, root, log, split))
    }

    fn recover(heap: Arc<H>, root: *mut u8) -> Result<Self, String> {
        let mut split = Split::default();
        let root_off = heap.offset_of(root);
        let (mut log, recovered) =
            TxLog::open_partition(&*heap, &mut split, root_off, MAGIC, "inp")?;
        for (kind, off) in recovered.pending_frees {
            if kind == FreeKind::Keep {
                continue;
            }
            if kind != FreeKind::Block {
                return Err(format!("inp: log lists a {kind:?} free, corrupt"));
            }
            // SAFETY: the committed transaction unlinked it; refused if already freed.
            let _ = split.time(Phase::Mm, || unsafe { heap.release(off) });
        }
        log.finish_recovery(&*heap, &mut split);
        Ok(Self::open_parts(heap, root, log, split))
    }

    fn read(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, String> {
        let Some(off) = self.find(key)? else {
            return Ok(false);
        };
        // SAFETY: a tuple the index links.
        unsafe { read_column_tuple(&*self.heap, &mut self.split, off, out) }?;
        Ok(true)
    }

    fn insert(&mut self, key: u64, value: &[u8]) -> Result<bool, String> {
        if self.find(key)?.is_some() {
            return Ok(false);
        }
        let r = self.insert_staged(key, value);
        self.finish(r).map(|()| true)
    }

    fn update(&mut self, key: u64, at: usize, bytes: &[u8]) -> Result<bool, String> {
        let Some(off) = self.find(key)? else {
            return Ok(false);
        };
        // SAFETY: a tuple the index links.
        let len = unsafe { value_len(&*self.heap, off) }?;
        check_range(at, bytes.len(), len)?;
        if bytes.is_empty() {
            return Ok(true);
        }
        let r = self.update_staged(off, len, at, bytes);
        self.finish(r).map(|()| true)
    }

    fn delete(&mut self, key: u64) -> Result<bool, String> {
        let heap = &*self.heap;
        let r = match self.tree.remove(heap, &mut self.split, &mut self.log, key) {
            Ok(Some(tuple)) => self.defer_free_tuple(tuple).map(|()| true),
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        };
        self.finish(r)
    }

    /// Commits; frees what the *previous* commit unlinked once this one has fenced.
    ///
    /// A committed transaction's free lines name its unlinked blocks raw until they are
    /// cleared (flushed here, durable at the next fence). Were the blocks freed at once, the
    /// next transaction could reuse one (a column as a tuple, say: they share a size class)
    /// and a crash before its fence could keep the stale free line together with the reused
    /// block's new links: recovery would free the block and leak the columns it names.
    fn commit(&mut self) -> Result<(), String> {
        let heap = &*self.heap;
        let fences = self.split.fences;
        let frees = self.log.commit(heap, &mut self.split);
        if self.split.fences > fences {
            // SAFETY: unlinked by an earlier committed transaction, and no durable free
            // line names them any more (cleared before the fence just made).
            unsafe {
                self.log.free_at_next_alloc(
                    heap,
                    &mut self.split,
                    &mut self.retired,
                    super::log::FREE_BATCH,
                )
            }?;
        }
        if !frees.is_empty() {
            self.retired.extend(
                frees
                    .iter()
                    .filter(|(k, _)| *k == FreeKind::Block)
                    .map(|&(_, off)| off),
            );
            self.log.frees_done(heap, &mut self.split, false);
        }
        Ok(())
    }

    fn split(&self) -> &Split {
        &self.split
    }

    fn blocks(&self) -> Result<Option<Vec<u64>>, String> {
        let heap = &*self.heap;
        let mut out = vec![self.log.offset()];
        out.extend(self.tree.nodes(heap)?);
        out.extend(&self.retired);
        out.extend(self.log.freeable());
        for (_, tuple) in self.tree.entries(heap)? {
            // SAFETY: a tuple the index links.
            out.extend(unsafe { column_tuple_blocks(heap, tuple) }?);
        }
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::tests::{SimHeap, engine_contract, out_of_space_rolls_back};

    #[test]
    fn inp_rolls_back_an_insert_that_runs_out_of_space() {
        out_of_space_rolls_back::<Inp<SimHeap>>(true);
    }

    #[test]
    fn inp_matches_a_btreemap_through_splits_deletes_errors_and_reopen() {
        engine_contract::<Inp<SimHeap>>(12_000, 2_000);
    }

    #[test]
    fn inp_gives_a_run_of_deletes_back_in_batches_and_holds_at_most_a_batch_more() {
        use std::sync::Arc;

        use crate::engines::log::FREE_BATCH;
        let heap =
            Arc::new(SimHeap::create_on(alloclab_pmem::SimMedium::new(16 << 20), 64).unwrap());
        let mut e = Inp::create(Arc::clone(&heap), PersistentAllocator::root(&*heap)).unwrap();
        for k in 0..300u64 {
            e.insert(k, &[1; 1000]).unwrap();
            e.commit().unwrap();
        }
        let (mut freed, mut batches) = (heap.stats().frees, 0);
        for k in (0..300u64).step_by(2) {
            assert!(e.delete(k).unwrap());
            e.commit().unwrap();
            let now = heap.stats().frees;
            if now != freed {
                assert!(
                    now - freed >= FREE_BATCH as u64,
                    "{} blocks given back on their own",
                    now - freed
                );
                batches += 1;
                freed = now;
            }
            // At most a batch, and the last commit's six.
            assert!(e.log.freeable().len() < FREE_BATCH + 6);
            assert_eq!(
                heap.stats().live_blocks,
                e.blocks().unwrap().unwrap().len() as u64,
                "every block the heap holds live is one the engine names"
            );
        }
        // 150 deletes of six blocks each, one commit late.
        assert!(batches >= 149 * 6 / FREE_BATCH, "{batches} batches");
        // An allocation gives the gathered blocks back with it.
        let held = e.log.freeable().len() as u64;
        e.insert(1001, &[2; 1000]).unwrap();
        assert!(e.log.freeable().is_empty());
        assert_eq!(heap.stats().frees, freed + held);
    }

    #[test]
    fn inp_takes_two_fences_per_committed_write() {
        use std::sync::Arc;
        let heap =
            Arc::new(SimHeap::create_on(alloclab_pmem::SimMedium::new(8 << 20), 64).unwrap());
        let mut e = Inp::create(Arc::clone(&heap), PersistentAllocator::root(&*heap)).unwrap();
        for k in 0..200u64 {
            e.insert(k, &[1; 100]).unwrap();
            e.commit().unwrap();
        }
        let fences = |e: &Inp<SimHeap>| e.split().fences;
        let before = fences(&e);
        e.insert(1000, &[3; 1000]).unwrap();
        e.commit().unwrap();
        e.update(1000, 200, &[5; 200]).unwrap();
        e.commit().unwrap();
        e.delete(7).unwrap();
        e.commit().unwrap();
        let mut out = Vec::new();
        e.read(1000, &mut out).unwrap();
        e.commit().unwrap();
        assert_eq!(
            fences(&e) - before,
            6,
            "insert, update, delete: two fences each; a read none"
        );
    }
}
