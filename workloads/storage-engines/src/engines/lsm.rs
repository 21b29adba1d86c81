//! LSM, the log-structured merge engine (N-Store's NVM-aware LSM): a persistent memtable
//! (a [`BTree`] from keys to tuple offsets or tombstones) whose changes go through a
//! write-ahead log ([`TxLog`]: undo and redo images of every memtable word it changes,
//! replayed at recovery), flushed when it holds `MEMTABLE` entries into an immutable sorted
//! array (a *run*) with a bloom filter. A flush also merges the newest runs while the next
//! older one is no larger than what it merges (a binary counter of run sizes, at most
//! [`MAX_RUNS`] runs): a merge drops the tuples that newer versions superseded, and
//! tombstones once it includes the oldest run. Tuples keep their columns out of line
//! ([`columns`](super::columns)), as N-Store's tuples do. Updates are out of place: a new
//! tuple version (tuple and columns) with the column patched; the old one is freed after
//! the next commit if only the memtable named it, or at the merge that drops it.
//!
//! # Partition root (64 bytes)
//!
//! ```text
//!  word 0     MAGIC (odd)
//!  word 1     the memtable's root node (0: empty)
//!  word 2     the log block
//!  words 3..7 the runs, newest first (0: none)
//! ```
//!
//! # Run layout (one block, words)
//!
//! ```text
//!  [hide(n)][hide(bloom_words)][bloom × bloom_words][hide(key) × n][value × n]
//! ```
//!
//! keys ascending; a value is the offset (raw) of a tuple or of a tombstone, a block of its
//! own (see [`columns`](super::columns)); a bloom word keeps bit 0 set and uses bits
//! 1..=63, so it is odd and never looks like a link.
//!
//! # Fences
//!
//! insert, update, delete: one fence to apply the memtable change (its WAL record and the
//! new tuple), one to commit; a flush or merge (once per `MEMTABLE` writes): the run written
//! and flushed with the root words' log records, one fence, one to commit, one after the
//! frees of the memtable's nodes and the merged runs (blocks the heap may hand out again).
//!
//! A flush that fails (the heap out of space) rolls back and leaves the memtable to grow;
//! the next commit tries again.
//!
//! # Recovery
//!
//! The log rolls the open transaction back (memtable words, root words) or the last commit
//! forward; a flush or merge whose frees may not all have happened frees again the old
//! memtable's nodes and the tombstones it dropped, and, for each merged-away run, the run
//! and its tuples and tombstones that no current structure names.

use std::collections::HashSet;
use std::sync::Arc;

use super::btree::BTree;
use super::columns::{
    column_tuple_blocks, is_tombstone, read_column_tuple, value_len, write_column_tuple,
    write_tombstone,
};
use super::log::{FreeKind, TxLog};
use super::{check_range, hide, read_word, unhide, write_word};
use crate::{Engine, PersistentAllocator, Phase, Split};

const MAGIC: u64 = 0x4C53_4D30_454E_4701;
const W_MAGIC: usize = super::log::PARTITION_MAGIC_WORD;
const W_MEM: usize = 1;
const W_LOG: usize = super::log::PARTITION_LOG_WORD;
const W_RUNS: usize = 3;
/// Runs at most (the partition root's words 3..=7).
pub const MAX_RUNS: usize = 5;

/// How many of the newest `runs` a flush of `memtable` entries merges: while the next
/// older run is no larger than what is merged so far (a binary counter: sizes double from
/// run to run, so each entry is merged about log2(entries / memtable) times), and as many
/// more as keep the runs at most [`MAX_RUNS`].
fn merge_count(memtable: usize, runs: &[Run]) -> usize {
    let (mut size, mut m) = (memtable, 0);
    while m < runs.len() && (runs[m].n <= size || runs.len() - m >= MAX_RUNS) {
        size += runs[m].n;
        m += 1;
    }
    m
}
const BLOOM_BITS_PER_KEY: usize = 10;
const BLOOM_PROBES: u64 = 4;

/// A run's geometry, read from its header.
#[derive(Clone, Copy, Debug)]
struct Run {
    off: u64,
    n: usize,
    bloom_words: usize,
}

impl Run {
    fn keys_at(&self) -> usize {
        2 + self.bloom_words
    }

    fn vals_at(&self) -> usize {
        2 + self.bloom_words + self.n
    }

    /// Reads run `off`'s header.
    ///
    /// # Safety
    ///
    /// `off` is a run block the engine reaches.
    unsafe fn open<H: PersistentAllocator>(heap: &H, off: u64) -> Result<Self, String> {
        if off == 0 || !off.is_multiple_of(64) {
            return Err(format!("lsm: run link {off:#x} is invalid"));
        }
        // SAFETY: the caller's contract.
        let (n, bw) = unsafe {
            (
                unhide(read_word(heap, off, 0)),
                unhide(read_word(heap, off, 1)),
            )
        };
        if n > 1 << 32 || bw > 1 << 32 {
            return Err(format!("lsm: run {off:#x} has a corrupt header"));
        }
        Ok(Self {
            off,
            n: n as usize,
            bloom_words: bw as usize,
        })
    }

    fn may_contain<H: PersistentAllocator>(&self, heap: &H, key: u64) -> bool {
        let bits = (self.bloom_words * 63) as u64;
        let (h1, h2) = bloom_hashes(key);
        (0..BLOOM_PROBES).all(|i| {
            let bit = h1.wrapping_add(i.wrapping_mul(h2)) % bits;
            // SAFETY: a bloom word of the run.
            let w = unsafe { read_word(heap, self.off, 2 + (bit / 63) as usize) };
            w >> (1 + bit % 63) & 1 == 1
        })
    }

    fn key<H: PersistentAllocator>(&self, heap: &H, i: usize) -> u64 {
        // SAFETY: key `i < n` of the run.
        unhide(unsafe { read_word(heap, self.off, self.keys_at() + i) })
    }

    fn value<H: PersistentAllocator>(&self, heap: &H, i: usize) -> u64 {
        // SAFETY: value `i < n` of the run.
        unsafe { read_word(heap, self.off, self.vals_at() + i) }
    }

    fn get<H: PersistentAllocator>(&self, heap: &H, key: u64) -> Option<u64> {
        if self.n == 0 || !self.may_contain(heap, key) {
            return None;
        }
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(heap, mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (lo < self.n && self.key(heap, lo) == key).then(|| self.value(heap, lo))
    }

    fn entries<H: PersistentAllocator>(&self, heap: &H) -> Vec<(u64, u64)> {
        (0..self.n)
            .map(|i| (self.key(heap, i), self.value(heap, i)))
            .collect()
    }
}

fn bloom_hashes(key: u64) -> (u64, u64) {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31), (z.rotate_left(32) ^ key) | 1)
}

/// The log-structured merge engine (see the module documentation); `MEMTABLE` is the
/// number of memtable entries that triggers a flush.
pub struct Lsm<H: PersistentAllocator, const MEMTABLE: usize = 1024> {
    heap: Arc<H>,
    root: u64,
    mem: BTree,
    mem_len: usize,
    runs: Vec<Run>,
    log: TxLog,
    split: Split,
    /// The blocks the last commit unlinked, still allocated: freed after the next fence
    /// (see [`commit`](Engine::commit)).
    retired: Vec<u64>,
    /// The blocks a flush or merge frees (scratch).
    gone: Vec<u64>,
}

/// Where a key's newest version is.
#[derive(Clone, Copy, Debug)]
struct Found {
    value: u64,
    in_memtable: bool,
}

impl<H: PersistentAllocator, const MEMTABLE: usize> Lsm<H, MEMTABLE> {
    fn assemble(heap: Arc<H>, root: *mut u8, log: TxLog, split: Split) -> Result<Self, String> {
        let root = heap.offset_of(root);
        let mut runs = Vec::new();
        for i in 0..MAX_RUNS {
            // SAFETY: a run word of the partition root.
            let off = unsafe { read_word(&*heap, root, W_RUNS + i) };
            if off != 0 {
                // SAFETY: a run the root links.
                runs.push(unsafe { Run::open(&*heap, off)? });
            }
        }
        let mem = BTree::new(root + 8 * W_MEM as u64);
        let mem_len = mem.entries(&*heap)?.len();
        Ok(Self {
            heap,
            root,
            mem,
            mem_len,
            runs,
            log,
            split,
            retired: Vec::new(),
            gone: Vec::new(),
        })
    }

    /// The newest version of `key` (a tombstone included).
    fn find(&mut self, key: u64) -> Result<Option<Found>, String> {
        if let Some(value) = self.mem.get(&*self.heap, &mut self.split, key)? {
            return Ok(Some(Found {
                value,
                in_memtable: true,
            }));
        }
        Ok(self.run_value(key).map(|value| Found {
            value,
            in_memtable: false,
        }))
    }

    /// The newest version of `key` in the runs, timed [`Phase::Index`].
    fn run_value(&mut self, key: u64) -> Option<u64> {
        let heap = &*self.heap;
        let runs = &self.runs;
        self.split
            .time(Phase::Index, || runs.iter().find_map(|r| r.get(heap, key)))
    }

    fn finish<T>(&mut self, r: Result<T, String>) -> Result<T, String> {
        match r {
            Ok(v) => {
                self.log.apply(&*self.heap, &mut self.split);
                Ok(v)
            }
            Err(e) => {
                self.log.rollback(&*self.heap, &mut self.split);
                // The memtable may have lost or regained entries: count again.
                self.mem_len = self.mem.entries(&*self.heap)?.len();
                Err(e)
            }
        }
    }

    fn put_tuple(&mut self, key: u64, value: &[u8]) -> Result<Option<u64>, String> {
        let heap = &*self.heap;
        let off = write_column_tuple(heap, &mut self.split, &mut self.log, value)?;
        let old = self
            .mem
            .put(heap, &mut self.split, &mut self.log, key, off)?;
        if old.is_none() {
            self.mem_len += 1;
        }
        Ok(old)
    }

    /// Whether `v`, a value the memtable or a run names, is a tombstone.
    fn is_tombstone(&self, v: u64) -> bool {
        // SAFETY: a live tuple or tombstone.
        unsafe { is_tombstone(&*self.heap, v) }
    }

    /// Lists the tuple at `off` and its columns to be freed after commit.
    fn defer_free_tuple(&mut self, off: u64) -> Result<(), String> {
        // SAFETY: a tuple the memtable named until this transaction.
        for block in unsafe { column_tuple_blocks(&*self.heap, off) }? {
            self.log.defer_free(FreeKind::Block, block)?;
        }
        Ok(())
    }

    /// Flushes the memtable into a new run, or merges it with every run into one.
    fn flush(&mut self) -> Result<(), String> {
        let heap = Arc::clone(&self.heap);
        let heap = &*heap;
        let memtable = self.split.time(Phase::Index, || self.mem.entries(heap))?;
        let nodes = self.mem.nodes(heap)?;
        let merged = merge_count(memtable.len(), &self.runs);
        let mut dropped = Vec::new();
        let entries = self.split.time(Phase::Index, || {
            // Newest first: the memtable, then the merged runs; the first version of a key
            // wins, older ones are dropped (their tuples freed after commit). Tombstones
            // stay unless no older run is left for them to mask.
            let keep_tombstones = merged < self.runs.len();
            let mut all: Vec<(u64, usize, u64)> =
                memtable.iter().map(|&(k, v)| (k, 0, v)).collect();
            for (age, run) in self.runs[..merged].iter().enumerate() {
                all.extend(run.entries(heap).into_iter().map(|(k, v)| (k, age + 1, v)));
            }
            if merged > 0 {
                all.sort_unstable_by_key(|&(k, age, _)| (k, age));
            }
            let mut out = Vec::with_capacity(all.len());
            let mut last = None;
            for (k, _, v) in all {
                if last == Some(k) {
                    dropped.push(v);
                    continue;
                }
                last = Some(k);
                // SAFETY: a tuple or tombstone the memtable or a merged run names.
                if keep_tombstones || !unsafe { is_tombstone(heap, v) } {
                    out.push((k, v));
                } else {
                    dropped.push(v);
                }
            }
            out
        });
        let r = self.write_flush(&entries, merged);
        let new_runs = match r {
            Ok(runs) => runs,
            Err(e) => {
                self.log.rollback(heap, &mut self.split);
                return Err(e);
            }
        };
        self.log.apply(heap, &mut self.split);
        let frees = self.log.commit(heap, &mut self.split);
        self.runs = new_runs;
        self.mem_len = 0;
        let gone = &mut self.gone;
        self.split.time(Phase::Mm, || -> Result<(), String> {
            // Every block the flush unlinked, freed in one call ([`PersistentAllocator::release_many`]):
            // thousands of blocks after a merge, whose allocator state (alloclab-pmem's
            // live-map lines) is spread over the heap and out of the cache, so one visit
            // that asks for all of it at once instead of a call and a miss per block.
            gone.clear();
            for (kind, off) in frees {
                match kind {
                    FreeKind::Tree => gone.extend_from_slice(&nodes),
                    FreeKind::Run | FreeKind::Block => gone.push(off),
                    FreeKind::Keep => {}
                }
            }
            for &t in &dropped {
                // SAFETY: a tuple the committed merge dropped, intact until freed below.
                gone.extend(unsafe { column_tuple_blocks(heap, t)? });
            }
            // SAFETY: nodes of the memtable, runs and tuples the committed transaction
            // unlinked durably, and tuples the committed merge dropped; each once.
            Ok(unsafe { heap.release_many(gone) }?)
        })?;
        self.log.frees_done(heap, &mut self.split, true);
        Ok(())
    }

    /// Writes the new run (if any) and stages the root words; returns the new run list.
    fn write_flush(&mut self, entries: &[(u64, u64)], merged: usize) -> Result<Vec<Run>, String> {
        let heap = Arc::clone(&self.heap);
        let heap = &*heap;
        let mut runs = Vec::new();
        if !entries.is_empty() {
            let n = entries.len();
            let bw = (n * BLOOM_BITS_PER_KEY).max(64).div_ceil(63);
            let words = 2 + bw + 2 * n;
            let (off, block) = self.log.alloc(heap, &mut self.split, 8 * words)?;
            self.split.time(Phase::Index, || {
                let mut image = vec![0u64; block / 8];
                image[0] = hide(n as u64);
                image[1] = hide(bw as u64);
                for w in &mut image[2..2 + bw] {
                    *w = 1;
                }
                let bits = (bw * 63) as u64;
                for (i, &(k, v)) in entries.iter().enumerate() {
                    let (h1, h2) = bloom_hashes(k);
                    for p in 0..BLOOM_PROBES {
                        let bit = h1.wrapping_add(p.wrapping_mul(h2)) % bits;
                        image[2 + (bit / 63) as usize] |= 1 << (1 + bit % 63);
                    }
                    image[2 + bw + i] = hide(k);
                    image[2 + bw + n + i] = v;
                }
                // SAFETY: a fresh block of `block` bytes, this transaction's.
                unsafe {
                    std::ptr::copy_nonoverlapping(image.as_ptr(), heap.at(off).cast(), image.len())
                };
            });
            self.split.flush(heap, heap.at(off), block);
            runs.push(Run {
                off,
                n,
                bloom_words: bw,
            });
        }
        for r in &self.runs[..merged] {
            self.log.defer_free(FreeKind::Run, r.off)?;
        }
        for r in &self.runs[merged..] {
            self.log.defer_free(FreeKind::Keep, r.off)?;
        }
        runs.extend(self.runs[merged..].iter().copied());
        let mem_root = self.mem.root(heap);
        if mem_root != 0 {
            self.log.defer_free(FreeKind::Tree, mem_root)?;
        }
        let mut words = [0u64; 1 + MAX_RUNS];
        for (w, r) in words[1..].iter_mut().zip(&runs) {
            *w = r.off;
        }
        self.log.stage(
            heap,
            &mut self.split,
            self.root + 8 * W_MEM as u64,
            &words[..1],
            Phase::Index,
        )?;
        self.log.stage(
            heap,
            &mut self.split,
            self.root + 8 * W_RUNS as u64,
            &words[1..],
            Phase::Index,
        )?;
        Ok(runs)
    }

    /// Frees what a flush or merge that committed before a crash may not have freed.
    fn redo_frees(
        heap: &H,
        split: &mut Split,
        root: u64,
        pending: &[(FreeKind, u64)],
    ) -> Result<(), String> {
        let mut named: Option<HashSet<u64>> = None;
        for &(kind, off) in pending {
            split.time(Phase::Mm, || -> Result<(), String> {
                match kind {
                    FreeKind::Keep => {}
                    // SAFETY: unlinked by a committed transaction; refused if already free.
                    FreeKind::Block => drop(unsafe { heap.release(off) }),
                    FreeKind::Tree => {
                        let named = match &mut named {
                            Some(s) => s,
                            None => named.insert(Self::named_tuples(heap, root)?),
                        };
                        // The flushed memtable's tombstones that the flush dropped.
                        for (_, v) in BTree::entries_under(heap, off)? {
                            if !named.contains(&v) {
                                // SAFETY: as for a run's tuples below.
                                for b in unsafe { column_tuple_blocks(heap, v)? } {
                                    // SAFETY: as above.
                                    drop(unsafe { heap.release(b) });
                                }
                            }
                        }
                        for n in BTree::nodes_under(heap, off)? {
                            // SAFETY: as above (the frees allocate nothing, so the old
                            // memtable's nodes are as the flush left them).
                            drop(unsafe { heap.release(n) });
                        }
                    }
                    FreeKind::Run => {
                        let named = match &mut named {
                            Some(s) => s,
                            None => named.insert(Self::named_tuples(heap, root)?),
                        };
                        // SAFETY: a merged-away run, intact (nothing was allocated since).
                        let run = unsafe { Run::open(heap, off)? };
                        for (_, v) in run.entries(heap) {
                            if !named.contains(&v) {
                                // SAFETY: a tuple the merge dropped, intact (marked through
                                // the run, whose free line names it).
                                for b in unsafe { column_tuple_blocks(heap, v)? } {
                                    // SAFETY: as above.
                                    drop(unsafe { heap.release(b) });
                                }
                            }
                        }
                        // SAFETY: as above.
                        drop(unsafe { heap.release(off) });
                    }
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// The tuples the memtable and the runs of the partition at `root` name.
    fn named_tuples(heap: &H, root: u64) -> Result<HashSet<u64>, String> {
        let mut out: HashSet<u64> = BTree::new(root + 8 * W_MEM as u64)
            .entries(heap)?
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        for i in 0..MAX_RUNS {
            // SAFETY: a run word of the root.
            let off = unsafe { read_word(heap, root, W_RUNS + i) };
            if off != 0 {
                // SAFETY: a run the root links.
                let run = unsafe { Run::open(heap, off)? };
                out.extend(run.entries(heap).into_iter().map(|(_, v)| v));
            }
        }
        Ok(out)
    }
}

impl<H: PersistentAllocator, const MEMTABLE: usize> Engine<H> for Lsm<H, MEMTABLE> {
    const NAME: &'static str = "lsm";
    const ROOT_BYTES: usize = 64;
    const COMMIT_EVERY: usize = 1;

    fn create(heap: Arc<H>, root: *mut u8) -> Result<Self, String> {
        let mut split = Split::default();
        let (log, log_off) = TxLog::create(&*heap, &mut split)?;
        let root_off = heap.offset_of(root);
        // SAFETY: the partition's zeroed root, this thread's.
        unsafe {
            for i in 0..8 {
                write_word(&*heap, root_off, i, 0);
            }
            write_word(&*heap, root_off, W_LOG, log_off);
            write_word(&*heap, root_off, W_MAGIC, MAGIC);
        }
        split.persist(&*heap, root, 64);
        Self::assemble(heap, root, log, split)
    }

    fn recover(heap: Arc<H>, root: *mut u8) -> Result<Self, String> {
        let mut split = Split::default();
        let root_off = heap.offset_of(root);
        let (mut log, recovered) =
            TxLog::open_partition(&*heap, &mut split, root_off, MAGIC, "lsm")?;
        Self::redo_frees(&*heap, &mut split, root_off, &recovered.pending_frees)?;
        log.finish_recovery(&*heap, &mut split);
        Self::assemble(heap, root, log, split)
    }

    fn read(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, String> {
        match self.find(key)? {
            Some(f) if !self.is_tombstone(f.value) => {
                // SAFETY: a tuple the memtable or a run names.
                unsafe { read_column_tuple(&*self.heap, &mut self.split, f.value, out)? };
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn insert(&mut self, key: u64, value: &[u8]) -> Result<bool, String> {
        let tombstone = match self.find(key)? {
            Some(f) if !self.is_tombstone(f.value) => return Ok(false),
            Some(f) if f.in_memtable => Some(f.value),
            _ => None,
        };
        let r = self.put_tuple(key, value).and_then(|_| match tombstone {
            // The memtable's tombstone the new tuple replaces.
            Some(t) => self.log.defer_free(FreeKind::Block, t),
            None => Ok(()),
        });
        self.finish(r).map(|()| true)
    }

    fn update(&mut self, key: u64, at: usize, bytes: &[u8]) -> Result<bool, String> {
        let Some(found) = self.find(key)?.filter(|f| !self.is_tombstone(f.value)) else {
            return Ok(false);
        };
        let old = found.value;
        // SAFETY: a tuple the memtable or a run names.
        let len = unsafe { value_len(&*self.heap, old) }?;
        check_range(at, bytes.len(), len)?;
        // The new version: the old value with the range patched (out of place).
        let mut value = Vec::with_capacity(len);
        // SAFETY: as above.
        unsafe { read_column_tuple(&*self.heap, &mut self.split, old, &mut value) }?;
        self.split.time(Phase::Mod, || {
            value[at..at + bytes.len()].copy_from_slice(bytes);
        });
        let r = self.put_tuple(key, &value).and_then(|_| {
            if found.in_memtable {
                self.defer_free_tuple(old)
            } else {
                Ok(())
            }
        });
        self.finish(r).map(|()| true)
    }

    fn delete(&mut self, key: u64) -> Result<bool, String> {
        let Some(found) = self.find(key)?.filter(|f| !self.is_tombstone(f.value)) else {
            return Ok(false);
        };
        let heap = Arc::clone(&self.heap);
        // Whether a run still holds a live version once the memtable's is gone (a tombstone
        // must mask it). Found outside the memtable, it came from the runs: no second search.
        let in_runs =
            !found.in_memtable || self.run_value(key).is_some_and(|v| !self.is_tombstone(v));
        let r = (|| {
            if found.in_memtable {
                self.defer_free_tuple(found.value)?;
            }
            if in_runs {
                let tombstone = write_tombstone(&*heap, &mut self.split, &mut self.log)?;
                if self
                    .mem
                    .put(&*heap, &mut self.split, &mut self.log, key, tombstone)?
                    .is_none()
                {
                    self.mem_len += 1;
                }
            } else if self
                .mem
                .remove(&*heap, &mut self.split, &mut self.log, key)?
                .is_some()
            {
                self.mem_len -= 1;
            }
            Ok(())
        })();
        self.finish(r).map(|()| true)
    }

    /// Commits; frees what the *previous* commit unlinked once this one has fenced (for
    /// the reason InP's commit gives: no durable free line may name a block the heap can
    /// hand out again).
    fn commit(&mut self) -> Result<(), String> {
        let heap = &*self.heap;
        let fences = self.split.fences;
        let frees = self.log.commit(heap, &mut self.split);
        if self.split.fences > fences {
            // SAFETY: unlinked by an earlier committed transaction, and no durable free
            // line names them any more (cleared before the fence just made).
            unsafe {
                self.log
                    .free_at_next_alloc(heap, &mut self.split, &mut self.retired, 0)
            }?;
        }
        if !frees.is_empty() {
            self.retired.extend(frees.iter().map(|&(_, off)| off));
            self.log.frees_done(heap, &mut self.split, false);
        }
        if self.mem_len >= MEMTABLE {
            // The operations are committed whatever happens here: a flush that fails (out
            // of space) rolls itself back and is tried again at the next commit.
            let _ = self.flush();
        }
        Ok(())
    }

    fn split(&self) -> &Split {
        &self.split
    }

    fn blocks(&self) -> Result<Option<Vec<u64>>, String> {
        let heap = &*self.heap;
        let mut out = vec![self.log.offset()];
        out.extend(self.mem.nodes(heap)?);
        out.extend(&self.retired);
        out.extend(self.log.freeable());
        let mut tuples: Vec<u64> = self
            .mem
            .entries(heap)?
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        for run in &self.runs {
            out.push(run.off);
            tuples.extend(run.entries(heap).into_iter().map(|(_, v)| v));
        }
        for t in tuples {
            // SAFETY: a tuple or tombstone the memtable or a run names.
            out.extend(unsafe { column_tuple_blocks(heap, t) }?);
        }
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::tests::{SimHeap, engine_contract, out_of_space_rolls_back};

    #[test]
    fn lsm_rolls_back_an_insert_or_flush_that_runs_out_of_space() {
        // LSM deletes write tombstones; space comes back at merges.
        out_of_space_rolls_back::<Lsm<SimHeap, 16>>(false);
    }

    #[test]
    fn lsm_matches_a_btreemap_through_flushes_merges_errors_and_reopen() {
        engine_contract::<Lsm<SimHeap, 64>>(12_000, 2_000);
    }

    #[test]
    fn lsm_with_the_default_memtable_matches_a_btreemap() {
        engine_contract::<Lsm<SimHeap>>(8_000, 1_500);
    }

    #[test]
    fn lsm_flushes_into_runs_and_merges_them_dropping_tombstones() {
        let heap =
            Arc::new(SimHeap::create_on(alloclab_pmem::SimMedium::new(8 << 20), 64).unwrap());
        let mut e: Lsm<SimHeap, 4> =
            Lsm::create(Arc::clone(&heap), PersistentAllocator::root(&*heap)).unwrap();
        let mut largest = 0;
        for k in 0..40u64 {
            e.insert(k, &[k as u8; 20]).unwrap();
            e.commit().unwrap();
            assert!(e.runs.len() <= MAX_RUNS);
            largest = largest.max(e.runs.iter().map(|r| r.n).max().unwrap_or(0));
        }
        // Ten flushes of four: runs of 32 and 8 entries, as a binary counter of ten.
        assert_eq!(e.runs.iter().map(|r| r.n).collect::<Vec<_>>(), [8, 32]);
        assert_eq!(largest, 32, "merges happened");
        for k in 0..40u64 {
            assert!(e.delete(k).unwrap());
            e.commit().unwrap();
        }
        // Every key deleted: once merged, the runs hold no tombstone and no tuple.
        for k in 100..140u64 {
            e.insert(k, &[1]).unwrap();
            e.commit().unwrap();
            e.delete(k).unwrap();
            e.commit().unwrap();
        }
        let live: usize = e.runs.iter().map(|r| r.n).sum::<usize>() + e.mem_len;
        assert!(
            live < 40,
            "tombstones and old versions were reclaimed ({live} entries left)"
        );
        let blocks = e.blocks().unwrap().unwrap();
        assert_eq!(heap.stats().live_blocks, blocks.len() as u64);
        let mut out = Vec::new();
        for k in 0..140u64 {
            assert!(!e.read(k, &mut out).unwrap());
        }
    }
}
