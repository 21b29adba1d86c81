//! The transaction log of InP (its undo log) and of LSM (its write-ahead log): undo *and*
//! redo images of every in-place change, the blocks a transaction allocated, and the
//! blocks it will free after commit.
//!
//! # Layout (one block of [`LOG_BYTES`], words)
//!
//! ```text
//!  line 0        [magic][hide(seq)][l0 … l5]                    header; links, raw
//!  lines 1..=4   [tag][hide(kinds)][e0 … e5]  × FREE_LINES      deferred frees, raw
//!  lines 5..=8   [tag][0][hide(a0) … hide(a5)] × ALLOC_LINES    allocations, hidden
//!  word 72 …     records, packed:
//!     [tag][hide(kind | n << 8)][hide(target)][hide(checksum)][hide(old) × n][hide(new) × n]
//! ```
//!
//! `seq` numbers the open transaction; commit increments it; `tag = hide(seq)` marks what
//! belongs to a transaction. A record is valid if its checksum (over its other words)
//! matches: the records of a transaction are the longest valid prefix carrying its tag. A
//! record says that the `n` words at byte offset `target` change from `old` to `new`.
//!
//! # What keeps which block marked
//!
//! The heap's recovery (alloclab-pmem's, by conservative reachability) marks blocks
//! *before* the log is rolled back or forward, from whatever words the crash left. So:
//!
//! * Record words and alloc entries are hidden ([`hide`]): stale ones never keep a block.
//! * The **free lines** hold raw offsets: the blocks the open transaction unlinks stay
//!   marked while undo may relink them (their contents are durable: they were linked).
//! * The **links** (words 2..=7 of the header line) hold, raw, the fresh blocks the
//!   transaction's in-place stores link (at most [`LINK_SLOTS`]; fresh blocks they point to
//!   are reached through them). They are written only *after* the apply fence (a fresh
//!   block's contents must be durable before anything marks it: stale contents would mark
//!   stale blocks), and in the header line, which the commit's sequence store follows in
//!   program order: a commit that reached the medium brings its links with it (x86 keeps
//!   stores to one cache line in order; the simulator keeps whole lines), so redo never
//!   links a block the heap's recovery freed. The next transaction clears them before its
//!   own apply fence, when the last commit's redo can no longer be needed.
//!
//! Every engine built on this log also obeys one rule in its in-place stores: **add one
//! link or remove one link, never move one** (see the B+tree), so that no crash state
//! between the apply fence and the commit fence loses a link that undo or redo restores.
//!
//! # Protocol (fences per transaction)
//!
//! 1. An operation allocates ([`TxLog::alloc`]: no fence), fills and flushes its fresh
//!    blocks, computes the new images of the words it changes in place and
//!    [`stage`](TxLog::stage)s them (a record each), and lists the blocks it unlinks
//!    ([`defer_free`](TxLog::defer_free)).
//! 2. [`apply`](TxLog::apply): flush the records, alloc and free lines, **fence** (undo
//!    images durable before any in-place store), then store the new words in place, write
//!    the links, and flush them (no fence).
//! 3. [`commit`](TxLog::commit): store `seq + 1` in the header, flush, **fence**. The
//!    in-place stores of step 2 and the header travel in the same fence: if the header
//!    reached the medium and some in-place word did not, recovery redoes the records of
//!    transaction `seq` from their new images (a committed transaction's records stay in
//!    the log until the next transaction overwrites them, which it starts only after the
//!    commit fence, when the in-place words are durable).
//! 4. Then the deferred frees (no fence; the free lines are cleared and flushed, durable at
//!    the next fence, or fenced at once where an entry is a structure the engine walks).
//!
//! So **two fences per transaction**, whatever it changes; a transaction that logged
//! nothing commits with none.
//!
//! # Recovery ([`TxLog::open`])
//!
//! Records carrying `seq` (the open transaction): undo them newest first from their old
//! images, fence, then give back the blocks of its alloc lines (a refusal from the heap
//! means its recovery already freed the block). Else records carrying `seq − 1` (the last
//! commit, possibly not all in place): redo them. Free lines carrying a number below `seq`
//! belong to a committed transaction whose frees may not all have happened: the engine
//! frees them ([`Recovered::pending_frees`]); free lines of the open transaction are
//! dropped (undo relinked the blocks). Then [`finish_recovery`](TxLog::finish_recovery)
//! clears the free lines, the links and the first record (fence), and moves to `seq + 1`
//! (fence), so that undone records can never be redone. Recovery allocates nothing, so
//! partitions sharing a heap may recover one after the other (all of them before any runs
//! an operation) and no block a later one gives back can have been handed out again. Recovery is idempotent: a crash during it is
//! recovered the same way.
//!
//! A heap that persists its allocation state (PMDK) must refuse a double free as the
//! [`PersistentAllocator::release`] contract says: recovery relies on it.

use super::{hide, read_word, unhide, write_word};
use crate::{PersistentAllocator, Phase, Split};

/// Bytes of a log block.
pub const LOG_BYTES: usize = 16 * 1024;
/// The word of an engine's partition root that holds the engine's magic number.
pub(crate) const PARTITION_MAGIC_WORD: usize = 0;
/// The word of an engine's partition root that holds the offset of its log.
pub(crate) const PARTITION_LOG_WORD: usize = 2;

const LOG_WORDS: usize = LOG_BYTES / 8;
const MAGIC: u64 = 0x4C4F_4731_5458_4C01 | 1;
/// Cache lines of deferred frees.
pub const FREE_LINES: usize = 4;
const FREE_PER_LINE: usize = 6;
/// Deferred frees one transaction may list.
pub const MAX_FREES: usize = FREE_LINES * FREE_PER_LINE;
const FREE_AT: usize = 8;
/// Cache lines of allocations.
pub const ALLOC_LINES: usize = 4;
/// Blocks one transaction may allocate.
pub const MAX_ALLOCS: usize = ALLOC_LINES * FREE_PER_LINE;
const ALLOC_AT: usize = FREE_AT + 8 * FREE_LINES;
const RECORDS_AT: usize = ALLOC_AT + 8 * ALLOC_LINES;
const HEADER_WORDS: usize = 4;
/// Blocks InP lets [`TxLog::free_at_next_alloc`] gather, with no allocation to give them
/// back in, before they go back on their own: one heap call (and one [`Phase::Mm`] span)
/// per this many blocks on a run of deletes (42 YCSB deletes, six blocks each) instead
/// of one per commit. (LSM gathers none: on its mix h, batches measured slower.)
pub const FREE_BATCH: usize = 256;
/// Words of the header line that keep the blocks a transaction links in place marked.
pub const LINK_SLOTS: usize = 6;
const KIND_WORDS: u64 = 1;

/// What a deferred free frees (the engine interprets it; see each engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeKind {
    /// One block.
    Block = 0,
    /// A structure the engine walks (LSM: a memtable's nodes).
    Tree = 1,
    /// A structure the engine walks (LSM: a merged-away run and its superseded tuples).
    Run = 2,
    /// Nothing to free: a block whose link the transaction moves (within one line of the
    /// engine's root), listed only so that it stays marked whatever part of the move a crash
    /// keeps.
    Keep = 3,
}

impl FreeKind {
    fn from_bits(bits: u64) -> Option<Self> {
        match bits {
            0 => Some(Self::Block),
            1 => Some(Self::Tree),
            2 => Some(Self::Run),
            3 => Some(Self::Keep),
            _ => None,
        }
    }
}

/// What recovery of a log left for the engine to do.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The frees of the last committed transaction that may not have happened: the engine
    /// gives these back (a refusal from the heap means it already had) before
    /// [`TxLog::finish_recovery`].
    pub pending_frees: Vec<(FreeKind, u64)>,
    /// Records undone (an open transaction rolled back).
    pub undone: usize,
    /// Records redone (a commit completed).
    pub redone: usize,
    /// Blocks of the rolled-back transaction given back (or found already free).
    pub released: usize,
}

/// An in-place change waiting for [`TxLog::apply`]: its new words are
/// `staged_words[at..at + n]` of the log.
struct Staged {
    target: u64,
    at: usize,
    n: usize,
    phase: Phase,
}

/// A parsed record.
struct Record {
    kind: u64,
    target: u64,
    /// Word index of the old images in the log block.
    at: usize,
    n: usize,
}

/// The transaction log of one partition (see the module documentation).
pub struct TxLog {
    off: u64,
    seq: u64,
    /// Next record word.
    pos: usize,
    /// Records from here to `pos` are not yet flushed.
    unflushed: usize,
    staged: Vec<Staged>,
    /// The new words of every staged change, in order (one buffer for all of them, kept
    /// from one transaction to the next: staging allocates no DRAM once warm).
    staged_words: Vec<u64>,
    /// Scratch for the old words a [`stage`](Self::stage) compares (kept, as above).
    old_words: Vec<u64>,
    frees: Vec<(FreeKind, u64)>,
    /// Free entries already written to the free lines.
    frees_written: usize,
    /// Blocks the open transaction allocated.
    allocs: Vec<u64>,
    /// Allocation entries of the open transaction already written to the alloc lines.
    allocs_written: usize,
    /// Blocks of the open transaction that its staged words link in place (kept marked
    /// from the header line once durable; see the module documentation).
    links: Vec<u64>,
    /// The transaction whose links the header line holds (0: none).
    links_of: u64,
    /// Whether the open transaction logged anything.
    dirty: bool,
    /// Blocks the engine may give back to the heap at once (see
    /// [`free_at_next_alloc`](TxLog::free_at_next_alloc)), given back in the [`Phase::Mm`]
    /// span of the next allocation, or once enough have gathered (see `free_at_next_alloc`).
    freeable: Vec<u64>,
    /// The usable sizes of an [`alloc_many`](TxLog::alloc_many) call (scratch, kept so that
    /// a transaction's allocation allocates no DRAM).
    usable: Vec<usize>,
}

fn checksum(words: impl IntoIterator<Item = u64>) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for w in words {
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01B3).rotate_left(29);
    }
    h
}

impl TxLog {
    /// A fresh log: allocates its block (timed [`Phase::Mm`]), writes it and persists it.
    /// The caller links the returned offset durably (nothing does until it does).
    ///
    /// # Errors
    ///
    /// The heap is out of space.
    pub fn create<H: PersistentAllocator>(
        heap: &H,
        split: &mut Split,
    ) -> Result<(Self, u64), String> {
        let bytes = heap.usable_size(LOG_BYTES);
        let off = split.time(Phase::Mm, || heap.allocate_unlinked(bytes))?;
        split.time(Phase::Cc, || {
            // SAFETY: a fresh block of `bytes` bytes, ours.
            unsafe {
                std::ptr::write_bytes(heap.at(off), 0, bytes);
                write_word(heap, off, 0, MAGIC);
                write_word(heap, off, 1, hide(1));
            }
        });
        split.persist(heap, heap.at(off), bytes);
        let log = Self {
            off,
            seq: 1,
            pos: RECORDS_AT,
            unflushed: RECORDS_AT,
            staged: Vec::new(),
            staged_words: Vec::new(),
            old_words: Vec::new(),
            frees: Vec::new(),
            frees_written: 0,
            allocs: Vec::new(),
            allocs_written: 0,
            links: Vec::new(),
            links_of: 0,
            dirty: false,
            freeable: Vec::new(),
            usable: Vec::new(),
        };
        Ok((log, off))
    }

    /// The offset of the log block.
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// Opens the log of the partition whose root is at `root_off` — the root's word
    /// `PARTITION_MAGIC_WORD` (0) must be `magic` and word `PARTITION_LOG_WORD` (2) the log — as
    /// [`open`](Self::open) does.
    ///
    /// # Errors
    ///
    /// The root is not this engine's partition, or its log is not a log block.
    pub fn open_partition<H: PersistentAllocator>(
        heap: &H,
        split: &mut Split,
        root_off: u64,
        magic: u64,
        engine: &str,
    ) -> Result<(Self, Recovered), String> {
        // SAFETY: the partition's root words (the root is at least three words).
        let (found, log_off) = unsafe {
            (
                read_word(heap, root_off, PARTITION_MAGIC_WORD),
                read_word(heap, root_off, PARTITION_LOG_WORD),
            )
        };
        if found != magic {
            return Err(format!(
                "{engine}: the root does not hold a partition of {engine}"
            ));
        }
        Self::open(heap, split, log_off)
    }

    /// Opens the log at `off` after a crash or a clean shutdown and rolls its open
    /// transaction back, or its last commit forward (see the module documentation). The
    /// engine then does [`Recovered::pending_frees`] and calls
    /// [`finish_recovery`](Self::finish_recovery).
    ///
    /// # Errors
    ///
    /// `off` is not a log block.
    pub fn open<H: PersistentAllocator>(
        heap: &H,
        split: &mut Split,
        off: u64,
    ) -> Result<(Self, Recovered), String> {
        if off == 0 || !off.is_multiple_of(8) {
            return Err(format!("log offset {off:#x} is invalid"));
        }
        // SAFETY: `off` is the log block named by the engine's root (live: reachable).
        let (magic, seq) = unsafe { (read_word(heap, off, 0), unhide(read_word(heap, off, 1))) };
        if magic != MAGIC || seq == 0 {
            return Err(format!("log at {off:#x}: bad magic or sequence"));
        }
        let mut log = Self {
            off,
            seq,
            pos: RECORDS_AT,
            unflushed: RECORDS_AT,
            staged: Vec::new(),
            staged_words: Vec::new(),
            old_words: Vec::new(),
            frees: Vec::new(),
            frees_written: 0,
            allocs: Vec::new(),
            allocs_written: 0,
            links: Vec::new(),
            links_of: 0,
            dirty: false,
            freeable: Vec::new(),
            usable: Vec::new(),
        };
        let recovered = log.roll(heap, split);
        Ok((log, recovered))
    }

    /// Rolls the log's state back (open transaction) or forward (last commit), as recovery
    /// and [`rollback`](Self::rollback) do.
    fn roll<H: PersistentAllocator>(&mut self, heap: &H, split: &mut Split) -> Recovered {
        let mut out = Recovered::default();
        let open = self.parse(heap, self.seq);
        split.time(Phase::Cc, || {
            if !open.is_empty() {
                for r in open.iter().rev().filter(|r| r.kind == KIND_WORDS) {
                    self.copy_image(heap, r, r.at);
                }
            } else {
                for r in self.parse(heap, self.seq - 1) {
                    if r.kind == KIND_WORDS {
                        self.copy_image(heap, &r, r.at + r.n);
                        out.redone += 1;
                    }
                }
            }
        });
        out.undone = open.iter().filter(|r| r.kind == KIND_WORDS).count();
        split.fence(heap);
        for line in 0..ALLOC_LINES {
            let at = ALLOC_AT + 8 * line;
            // SAFETY: words of the log block.
            if unsafe { read_word(heap, self.off, at) } != hide(self.seq) {
                continue;
            }
            for i in 0..FREE_PER_LINE {
                // SAFETY: as above.
                let e = unhide(unsafe { read_word(heap, self.off, at + 2 + i) });
                if e != 0 && e != unhide(0) {
                    // SAFETY: the open transaction allocated the block and undo unlinked
                    // it durably; a refusal means the heap's recovery already freed it.
                    let _ = split.time(Phase::Mm, || unsafe { heap.release(e) });
                    out.released += 1;
                }
            }
        }
        for line in 0..FREE_LINES {
            let at = FREE_AT + 8 * line;
            // SAFETY: words of the log block.
            let (tag, kinds) = unsafe {
                (
                    read_word(heap, self.off, at),
                    read_word(heap, self.off, at + 1),
                )
            };
            if tag == 0 || unhide(tag) >= self.seq {
                continue;
            }
            let kinds = unhide(kinds);
            for i in 0..FREE_PER_LINE {
                // SAFETY: as above.
                let e = unsafe { read_word(heap, self.off, at + 2 + i) };
                let kind = FreeKind::from_bits((kinds >> (2 * i)) & 3);
                if let (true, Some(kind)) = (e != 0, kind) {
                    out.pending_frees.push((kind, e));
                }
            }
        }
        out
    }

    /// Stores a record's old (`from = r.at`) or new (`from = r.at + r.n`) image in place and
    /// flushes it.
    fn copy_image<H: PersistentAllocator>(&self, heap: &H, r: &Record, from: usize) {
        let dst = heap.at(r.target).cast::<u64>();
        for i in 0..r.n {
            // SAFETY: the record was validated (checksum) and its target is a word range of
            // a block the engine reaches; the log words are inside the log block.
            unsafe {
                dst.add(i)
                    .write(unhide(read_word(heap, self.off, from + i)))
            };
        }
        heap.flush(dst.cast(), r.n * 8);
    }

    /// Word `i` of the log block.
    fn word<H: PersistentAllocator>(&self, heap: &H, i: usize) -> u64 {
        debug_assert!(i < LOG_WORDS);
        // SAFETY: `i < LOG_WORDS`: a word of the live log block.
        unsafe { read_word(heap, self.off, i) }
    }

    /// The longest valid prefix of records carrying `seq`.
    fn parse<H: PersistentAllocator>(&self, heap: &H, seq: u64) -> Vec<Record> {
        let mut out = Vec::new();
        let mut pos = RECORDS_AT;
        let tag = hide(seq);
        while pos + HEADER_WORDS <= LOG_WORDS && self.word(heap, pos) == tag {
            let kn = unhide(self.word(heap, pos + 1));
            let (kind, n) = (kn & 0xFF, (kn >> 8) as usize);
            let end = pos + HEADER_WORDS + 2 * n;
            if kind != KIND_WORDS || n > LOG_WORDS || end > LOG_WORDS {
                break;
            }
            let target = unhide(self.word(heap, pos + 2));
            let stored = unhide(self.word(heap, pos + 3));
            let sum = checksum(
                (0..3)
                    .chain(HEADER_WORDS..HEADER_WORDS + 2 * n)
                    .map(|i| self.word(heap, pos + i)),
            );
            if sum != stored {
                break;
            }
            out.push(Record {
                kind,
                target,
                at: pos + HEADER_WORDS,
                n,
            });
            pos = end;
        }
        out
    }

    /// Clears the free lines and the first record, moves to the next transaction number:
    /// the end of recovery (two fences).
    pub fn finish_recovery<H: PersistentAllocator>(&mut self, heap: &H, split: &mut Split) {
        split.time(Phase::Cc, || {
            // SAFETY: words of the log block.
            unsafe {
                std::ptr::write_bytes(
                    heap.at(self.off).cast::<u64>().add(FREE_AT),
                    0,
                    8 * (FREE_LINES + ALLOC_LINES),
                );
                write_word(heap, self.off, RECORDS_AT, 0);
                std::ptr::write_bytes(heap.at(self.off).cast::<u64>().add(2), 0, LINK_SLOTS);
            }
        });
        split.flush(heap, heap.at(self.off), 64);
        let free_lines = heap.at(self.off + 8 * FREE_AT as u64);
        split.flush(heap, free_lines, 8 * (RECORDS_AT + 1 - FREE_AT));
        split.fence(heap);
        self.seq += 1;
        self.store_seq(heap, split);
        self.pos = RECORDS_AT;
        self.unflushed = RECORDS_AT;
        self.staged.clear();
        self.staged_words.clear();
        self.frees.clear();
        self.frees_written = 0;
        self.allocs.clear();
        self.allocs_written = 0;
        self.links.clear();
        self.links_of = 0;
        self.dirty = false;
    }

    fn store_seq<H: PersistentAllocator>(&self, heap: &H, split: &mut Split) {
        split.time(Phase::Cc, || {
            // SAFETY: word 1 of the log block.
            unsafe { write_word(heap, self.off, 1, hide(self.seq)) }
        });
        split.persist(heap, heap.at(self.off), 16);
    }

    /// Appends a record; the caller has checked the space.
    fn append<H: PersistentAllocator>(
        &mut self,
        heap: &H,
        kind: u64,
        target: u64,
        old: &[u64],
        new: &[u64],
    ) {
        let n = old.len();
        let pos = self.pos;
        let base = heap.at(self.off).cast::<u64>();
        // SAFETY: `pos + HEADER_WORDS + 2n <= LOG_WORDS`, checked by the caller.
        unsafe {
            let w = base.add(pos);
            w.write(hide(self.seq));
            w.add(1).write(hide(kind | (n as u64) << 8));
            w.add(2).write(hide(target));
            for (i, &o) in old.iter().enumerate() {
                w.add(HEADER_WORDS + i).write(hide(o));
            }
            for (i, &o) in new.iter().enumerate() {
                w.add(HEADER_WORDS + n + i).write(hide(o));
            }
            let sum = checksum(
                (0..3)
                    .chain(HEADER_WORDS..HEADER_WORDS + 2 * n)
                    .map(|i| w.add(i).read()),
            );
            w.add(3).write(hide(sum));
        }
        self.pos = pos + HEADER_WORDS + 2 * n;
        self.dirty = true;
    }

    fn space(&self, n: usize) -> Result<(), String> {
        if self.pos + HEADER_WORDS + 2 * n > LOG_WORDS {
            return Err(format!(
                "transaction log full ({LOG_BYTES} bytes): the transaction is too large"
            ));
        }
        Ok(())
    }

    /// Allocates a block of at least `size` bytes for the open transaction (timed
    /// [`Phase::Mm`]) and logs it (an *alloc* record, [`Phase::Cc`]): a rollback or a crash
    /// before commit gives it back. Returns its offset and its usable size, all of which the
    /// caller initialises and flushes before [`apply`](Self::apply).
    ///
    /// # Errors
    ///
    /// The heap is out of space; the log is full (the block is given back).
    pub fn alloc<H: PersistentAllocator>(
        &mut self,
        heap: &H,
        split: &mut Split,
        size: usize,
    ) -> Result<(u64, usize), String> {
        if self.allocs.len() >= MAX_ALLOCS {
            return Err(format!(
                "a transaction may allocate at most {MAX_ALLOCS} blocks"
            ));
        }
        let bytes = heap.usable_size(size);
        let freeable = &mut self.freeable;
        let off = split.time(Phase::Mm, || {
            if freeable.is_empty() {
                return heap.allocate_unlinked(bytes);
            }
            // SAFETY: `free_at_next_alloc`'s contract.
            let off = unsafe { heap.release_many_then_allocate(freeable, bytes) };
            freeable.clear();
            off
        })?;
        self.allocs.push(off);
        self.dirty = true;
        Ok((off, bytes))
    }

    /// Allocates a block of at least each of `sizes` bytes for the open transaction, all in
    /// one call into the heap ([`PersistentAllocator::allocate_unlinked_many`], one [`Phase::Mm`] span), and logs
    /// them as [`alloc`](Self::alloc) does each; appends each block's offset and usable
    /// size to `out`, in order. All or nothing.
    ///
    /// # Errors
    ///
    /// The heap is out of space; the log would be full. Nothing is allocated.
    pub fn alloc_many<H: PersistentAllocator>(
        &mut self,
        heap: &H,
        split: &mut Split,
        sizes: &[usize],
        out: &mut Vec<(u64, usize)>,
    ) -> Result<(), String> {
        if self.allocs.len() + sizes.len() > MAX_ALLOCS {
            return Err(format!(
                "a transaction may allocate at most {MAX_ALLOCS} blocks"
            ));
        }
        let usable = &mut self.usable;
        usable.clear();
        usable.extend(sizes.iter().map(|&s| heap.usable_size(s)));
        let start = self.allocs.len();
        let (allocs, freeable) = (&mut self.allocs, &mut self.freeable);
        split.time(Phase::Mm, || {
            // SAFETY: `free_at_next_alloc`'s contract.
            unsafe { give_back(heap, freeable) }?;
            heap.allocate_unlinked_many(usable, allocs)
        })?;
        out.extend(
            self.allocs[start..]
                .iter()
                .copied()
                .zip(usable.iter().copied()),
        );
        self.dirty = true;
        Ok(())
    }

    /// Takes `blocks` (emptying it) to give back to the heap in the [`Phase::Mm`] span of
    /// the log's next allocation, together with what that allocation takes (one span and
    /// one heap call instead of two). Blocks held from earlier calls that no allocation has
    /// taken since are given back now (one span) once at least `gather` of them are held:
    /// `0` gives them back at every call; [`FREE_BATCH`] lets a run of deletes gather them
    /// (one span and one heap call for several transactions' frees instead of one each,
    /// InP). The heap's state evolves as if each block were freed here, except that up to
    /// `gather` free blocks (and the last call's) stay allocated a little longer: nothing
    /// allocates before they are given back.
    ///
    /// # Errors
    ///
    /// The heap refused a block given back now (not a live block); the others are freed.
    ///
    /// # Safety
    ///
    /// Every block was unlinked by a committed transaction, and a fence made since has made
    /// durable that no free line of the log names it any more (InP's and LSM's deferred
    /// frees after the next commit's fence): the heap may hand it out again at once. Every
    /// block is live and handed to the log once ([`PersistentAllocator::release_many_then_allocate`] may
    /// reuse one without checking).
    pub unsafe fn free_at_next_alloc<H: PersistentAllocator>(
        &mut self,
        heap: &H,
        split: &mut Split,
        blocks: &mut Vec<u64>,
        gather: usize,
    ) -> Result<(), String> {
        let left = if self.freeable.len() >= gather {
            // SAFETY: the caller's contract, given when these blocks came.
            unsafe { super::free_retired(heap, split, &mut self.freeable) }
        } else {
            Ok(())
        };
        self.freeable.append(blocks);
        left
    }

    /// The blocks [`free_at_next_alloc`](Self::free_at_next_alloc) holds, still allocated.
    pub fn freeable(&self) -> &[u64] {
        &self.freeable
    }

    /// Logs that the `new.len()` words at byte offset `target` (8-aligned, inside the
    /// engine's root or a block it reaches) become `new` at [`apply`](Self::apply), where
    /// they are stored timed as `phase`. Only the changed range is logged; nothing if
    /// nothing changes.
    ///
    /// # Errors
    ///
    /// The log is full; nothing is logged.
    pub fn stage<H: PersistentAllocator>(
        &mut self,
        heap: &H,
        split: &mut Split,
        target: u64,
        new: &[u64],
        phase: Phase,
    ) -> Result<(), String> {
        let mut old = std::mem::take(&mut self.old_words);
        let staged = split.time(Phase::Cc, || {
            let src = heap.at(target).cast::<u64>();
            old.clear();
            // SAFETY: the caller's contract: `new.len()` words at `target`.
            old.extend((0..new.len()).map(|i| unsafe { src.add(i).read() }));
            let Some(first) = (0..new.len()).find(|&i| old[i] != new[i]) else {
                return Ok(());
            };
            let last = (0..new.len())
                .rev()
                .find(|&i| old[i] != new[i])
                .unwrap_or(first);
            let n = last + 1 - first;
            self.space(n)?;
            for &w in &new[first..=last] {
                if w != 0 && !self.links.contains(&w) && self.allocs.contains(&w) {
                    if self.links.len() == LINK_SLOTS {
                        return Err(format!(
                            "a transaction may link at most {LINK_SLOTS} new blocks in place"
                        ));
                    }
                    self.links.push(w);
                }
            }
            let at = target + 8 * first as u64;
            self.append(heap, KIND_WORDS, at, &old[first..=last], &new[first..=last]);
            self.staged.push(Staged {
                target: at,
                at: self.staged_words.len(),
                n,
                phase,
            });
            self.staged_words.extend_from_slice(&new[first..=last]);
            Ok(())
        });
        self.old_words = old;
        staged
    }

    /// Lists `off` to be freed after commit (kept alive until then, and relinked by undo).
    ///
    /// # Errors
    ///
    /// More than [`MAX_FREES`] in one transaction.
    pub fn defer_free(&mut self, kind: FreeKind, off: u64) -> Result<(), String> {
        if self.frees.len() >= MAX_FREES {
            return Err(format!(
                "a transaction may free at most {MAX_FREES} structures"
            ));
        }
        self.frees.push((kind, off));
        self.dirty = true;
        Ok(())
    }

    /// Makes the records durable (one fence), then stores the staged words in place and
    /// flushes them (see the module documentation).
    pub fn apply<H: PersistentAllocator>(&mut self, heap: &H, split: &mut Split) {
        let mut fence = !self.staged.is_empty();
        if self.frees_written < self.frees.len() {
            let first = self.frees_written / FREE_PER_LINE;
            let last = (self.frees.len() - 1) / FREE_PER_LINE;
            split.time(Phase::Cc, || {
                for line in first..=last {
                    let end = self.frees.len().min((line + 1) * FREE_PER_LINE);
                    let entries = &self.frees[line * FREE_PER_LINE..end];
                    let kinds = entries
                        .iter()
                        .enumerate()
                        .fold(0, |k, (i, &(kind, _))| k | (kind as u64) << (2 * i));
                    let mut raw = [0u64; FREE_PER_LINE];
                    for (r, e) in raw.iter_mut().zip(entries) {
                        *r = e.1;
                    }
                    self.write_line(heap, FREE_AT + 8 * line, hide(kinds), &raw);
                }
            });
            let at = heap.at(self.off + 8 * (FREE_AT + 8 * first) as u64);
            split.flush(heap, at, 64 * (last + 1 - first));
            self.frees_written = self.frees.len();
            fence = true;
        }
        if self.allocs_written < self.allocs.len() {
            let first = self.allocs_written / FREE_PER_LINE;
            let last = (self.allocs.len() - 1) / FREE_PER_LINE;
            split.time(Phase::Cc, || {
                for line in first..=last {
                    let end = self.allocs.len().min((line + 1) * FREE_PER_LINE);
                    let mut hidden = [0u64; FREE_PER_LINE];
                    for (h, &a) in hidden
                        .iter_mut()
                        .zip(&self.allocs[line * FREE_PER_LINE..end])
                    {
                        *h = hide(a);
                    }
                    self.write_line(heap, ALLOC_AT + 8 * line, 0, &hidden);
                }
            });
            let at = heap.at(self.off + 8 * (ALLOC_AT + 8 * first) as u64);
            split.flush(heap, at, 64 * (last + 1 - first));
            self.allocs_written = self.allocs.len();
            fence = true;
        }
        if self.links_of != 0 && self.links_of != self.seq {
            // The last commit's links: its redo can no longer be needed.
            split.time(Phase::Cc, || {
                // SAFETY: the link words of the header line.
                unsafe {
                    std::ptr::write_bytes(heap.at(self.off).cast::<u64>().add(2), 0, LINK_SLOTS)
                }
            });
            split.flush(heap, heap.at(self.off), 64);
            self.links_of = 0;
        }
        if self.unflushed < self.pos {
            let at = heap.at(self.off + 8 * self.unflushed as u64);
            split.flush(heap, at, 8 * (self.pos - self.unflushed));
            self.unflushed = self.pos;
        }
        if !fence {
            return;
        }
        split.fence(heap);
        for s in &self.staged {
            let dst = heap.at(s.target).cast::<u64>();
            let words = &self.staged_words[s.at..s.at + s.n];
            split.time(s.phase, || {
                // SAFETY: the staged range, inside what the engine reaches (see `stage`).
                unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), dst, words.len()) }
            });
            split.flush(heap, dst.cast(), 8 * words.len());
        }
        self.staged.clear();
        self.staged_words.clear();
        if !self.links.is_empty() {
            // Now that the fresh blocks are durable, keep the ones linked in place marked
            // (for redo) from the header line, which the commit's sequence store follows.
            split.time(Phase::Cc, || {
                for i in 0..LINK_SLOTS {
                    let w = self.links.get(i).copied().unwrap_or(0);
                    // SAFETY: the link words of the header line.
                    unsafe { write_word(heap, self.off, 2 + i, w) };
                }
            });
            split.flush(heap, heap.at(self.off), 64);
            self.links_of = self.seq;
        }
    }

    /// Writes one free or alloc line: `second`, `entries` (zero-padded), and the open
    /// transaction's tag **last**: a line keeps its stores in program order through a crash
    /// (x86; the simulator keeps whole lines), so a line that carries the tag carries its
    /// entries, never an older transaction's.
    fn write_line<H: PersistentAllocator>(
        &self,
        heap: &H,
        at: usize,
        second: u64,
        entries: &[u64],
    ) {
        let line = heap.at(self.off).cast::<u64>().wrapping_add(at);
        // SAFETY: a free or alloc line of the log block; volatile stores so that the
        // compiler keeps their order (the tag last).
        unsafe {
            line.add(1).write_volatile(second);
            for i in 0..FREE_PER_LINE {
                line.add(2 + i)
                    .write_volatile(entries.get(i).copied().unwrap_or(0));
            }
            line.write_volatile(hide(self.seq));
        }
    }

    /// Commits the open transaction (one fence; none if it logged nothing) and returns the
    /// frees it deferred, for the engine to do now and then report with
    /// [`frees_done`](Self::frees_done).
    pub fn commit<H: PersistentAllocator>(
        &mut self,
        heap: &H,
        split: &mut Split,
    ) -> Vec<(FreeKind, u64)> {
        if !self.dirty {
            return Vec::new();
        }
        self.apply(heap, split);
        self.seq += 1;
        self.store_seq(heap, split);
        self.pos = RECORDS_AT;
        self.unflushed = RECORDS_AT;
        self.dirty = false;
        self.allocs.clear();
        self.allocs_written = 0;
        self.links.clear();
        std::mem::take(&mut self.frees)
    }

    /// Clears the free lines after the engine did a commit's frees: flushed, and fenced at
    /// once only if `fence` (where an entry is a structure the engine walks, whose blocks the
    /// heap may hand out again before the next fence).
    pub fn frees_done<H: PersistentAllocator>(&mut self, heap: &H, split: &mut Split, fence: bool) {
        if self.frees_written == 0 {
            return;
        }
        let lines = self.frees_written.div_ceil(FREE_PER_LINE);
        split.time(Phase::Cc, || {
            // SAFETY: the free lines of the log block.
            unsafe {
                std::ptr::write_bytes(heap.at(self.off).cast::<u64>().add(FREE_AT), 0, 8 * lines)
            }
        });
        split.flush(heap, heap.at(self.off + 8 * FREE_AT as u64), 64 * lines);
        if fence {
            split.fence(heap);
        }
        self.frees_written = 0;
    }

    /// Rolls the open transaction back after an error, as recovery would: undoes what was
    /// applied, gives back what it allocated, drops its deferred frees, and starts the next
    /// transaction.
    pub fn rollback<H: PersistentAllocator>(&mut self, heap: &H, split: &mut Split) {
        if !self.dirty {
            return;
        }
        // Write the alloc and free lines and flush the records, storing nothing in place
        // (unapplied records undo to what is there).
        self.staged.clear();
        self.staged_words.clear();
        self.links.clear();
        self.apply(heap, split);
        let _ = self.roll(heap, split);
        self.finish_recovery(heap, split);
    }
}

/// Gives `blocks` back to the heap in one call and empties it (nothing if empty).
///
/// # Safety
///
/// As [`TxLog::free_at_next_alloc`], for every block.
unsafe fn give_back<H: PersistentAllocator>(heap: &H, blocks: &mut Vec<u64>) -> Result<(), String> {
    if blocks.is_empty() {
        return Ok(());
    }
    // SAFETY: the caller's contract.
    let freed = unsafe { heap.release_many(blocks) };
    blocks.clear();
    freed.map_err(String::from)
}
