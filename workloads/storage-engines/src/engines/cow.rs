//! CoW: a copy-on-write B+tree with a master record, in the style of N-Store's CoW engine
//! (itself modelled on LMDB).
//!
//! # Layout
//!
//! ```text
//!  partition root (ROOT_BYTES = 64)         node (NODE_BYTES = 512, one heap block)
//!  ┌────────────┬──────────┬──────┐        ┌────────┬────────────────┬────────────────┬───┐
//!  │ MAGIC      │ master   │ 0 …  │        │ header │ ptrs[0..31]    │ keys[0..31]    │ 0 │
//!  │ word 0     │ word 1   │ 2..8 │        │ word 0 │ words 1..=31   │ words 32..=62  │63 │
//!  └────────────┴────┬─────┴──────┘        └────────┴────────────────┴────────────────┴───┘
//!                    │ offset of the current directory's root node (0: empty partition)
//!                    ▼
//!          internal nodes (level ≥ 1): ptrs[i] is the child holding keys ≥ keys[i]
//!                    │                  (keys[0] is not compared: child 0 takes the rest)
//!                    ▼
//!          leaves (level 0): keys[i] ↦ ptrs[i], the offset of a tuple block
//!                    │
//!                    ▼
//!          tuple block: header word, then the value, zero-padded to a whole cache line
//! ```
//!
//! A node holds 1 to [`FANOUT`] entries (a node that a delete empties is removed from its
//! parent and freed; nodes are not merged otherwise); words past its entries are zero.
//!
//! **Words that are not offsets cannot be taken for offsets.** alloclab-pmem recovers by
//! conservative reachability (see the [crate documentation](crate)), so every word
//! of a reachable block that is not a link is odd or zero: headers are odd
//! (`tag | count << 16 | level << 1 | 1`, `tag | len << 1 | 1`), and keys are stored
//! **bit-inverted** (`!key`), which keeps the full `u64` key space. An inverted key equals
//! a block offset only for keys above `u64::MAX - pool size` (never YCSB's); such a key
//! keeps one block allocated until it is deleted: a leak, never a corruption. Values are
//! the caller's bytes: a value whose aligned words equal block offsets leaks the same way.
//! Unused words of nodes and the pad of tuples are zero, and nodes are written whole.
//! The one place a stale offset can hide is the tail of a tuple's block past its padded
//! size, which keeps whatever the heap left there. A tuple asks for whole cache lines, so
//! with alloclab-pmem (size classes of multiples of 64 bytes) there is no tail when the
//! padded size is a class (YCSB's 1,000-byte tuple: 1,008 → 1,024 bytes). A tuple that
//! shares the nodes' 512-byte class (padded to 448 bytes) has a tail of one cache line: a
//! node's last line holds keys and zeros only, never an offset, which is why a node puts
//! its pointers before its keys. Other tails hold old tuple bytes, or, once a recovery has
//! handed a slab to another class, anything: a bounded leak, never a corruption.
//!
//! # Operations: the dirty directory
//!
//! The *current directory* is the tree the master record names; it is never written. An
//! operation that changes the tree first copies every node of its root-to-leaf path that
//! is not yet dirty into a fresh block (the *dirty directory*: nodes copied in this batch,
//! tracked in a set, so a batch of [`COMMIT_EVERY`](Engine::COMMIT_EVERY) operations copies
//! each node at most once), then changes the copies. A tuple is copied on update (a new
//! block with the old value and the patched column) unless it is itself new in this batch,
//! in which case it is patched in place. Replaced committed nodes and tuples are *retired*:
//! they are still reachable from the master record and are freed only after the commit that
//! unlinks them. Nodes and tuples created and dropped within one batch are freed at once.
//! Each operation allocates everything it needs before it changes anything, so an
//! allocation failure leaves the partition as it was.
//!
//! Operations issue **no flush and no fence**.
//!
//! # Spare nodes
//!
//! Operations take their node blocks (copies, split halves, new roots) from a list of
//! [`SPARE_NODES`] node blocks the partition allocated ahead, linked nowhere, instead of
//! asking the heap for one or two blocks each: a delete, which needs a leaf copy and no
//! tuple, then makes no call into the heap at all, and an insert or update asks only for
//! its tuple. The list is filled again in the commit's call into the heap (the retired
//! nodes it frees are the blocks it takes back, their allocator state still in the cache),
//! and by an operation that finds it short, which takes [`SPARE_NODES`] more with its own
//! blocks. Taking a block from the list is the engine's bookkeeping, timed (as taking
//! one from the operation's own list of blocks was before) in the phase that uses the
//! block; the calls into the heap are [`Phase::Mm`]. Spares are unreachable: a crash frees
//! them in heaps that recover by reachability and leaks them in heaps that persist their
//! allocation state (PMDK: at most [`SPARE_NODES`] blocks per partition, besides the
//! batch's blocks below); dropping the engine frees them.
//!
//! # Commit
//!
//! 1. flush every dirty node and every new tuple, then **fence** (skipped when nothing was
//!    flushed: a batch that only removed nodes);
//! 2. store the dirty root into the master record (one failure-atomic 8-byte store), flush
//!    it, **fence**;
//! 3. free the retired blocks, all in one call ([`PersistentAllocator::release_many`]): no durable word
//!    names them any more; then, in the same [`Phase::Mm`] span, allocate the spare nodes
//!    back up to [`SPARE_NODES`] ([`PersistentAllocator::allocate_unlinked_many`]).
//!
//! Two fences per commit, none per operation: with `COMMIT_EVERY = 32`, 1/16 of a fence
//! per operation. A commit with nothing to commit issues nothing.
//!
//! # Recovery
//!
//! The master record is the truth: [`recover`](Engine::recover) reads it (O(1)). A crash
//! before step 2's fence leaves the old master and the old directory, which no write of the
//! batch touched; a crash after it leaves the new one, whose nodes and tuples step 1 made
//! durable. Everything else — the dirty blocks of an unfinished batch, retired blocks not
//! yet freed — is unreachable from the root: alloclab-pmem's recovery frees it. Heaps that
//! persist their allocation state (PMDK) leak it instead: at most one batch's new blocks
//! (a crash before the commit's second fence) or one batch's retired blocks (a crash
//! between that fence and the end of step 3). [`PersistentAllocator`] cannot enumerate a heap's blocks,
//! so the engine cannot find them after the fact; closing the window would take a
//! persistent list of the batch's blocks, written and fenced before each allocation.
//!
//! # Time split
//!
//! Heap calls are [`Phase::Mm`]; copying a committed node into the dirty directory, the
//! master store and every flush and fence are [`Phase::Cc`] (the crash-consistency work
//! of CoW, as [`Phase::Cc`] documents: "directory copies"); searching the tree and
//! changing the dirty nodes (inserts, splits, removals) are [`Phase::Index`]; tuple bytes
//! written or read are [`Phase::Mod`].
//!
//! A fence (`SFENCE`) does not stop the instructions after it (only later stores wait for
//! the write-backs it orders), and `rdtsc` is not ordered by it, so the wait for a fence
//! lands in whichever span first needs it done (see [`Split`]). The commit's retired
//! blocks are freed right after its second fence, when the write-back of the batch's dirty
//! nodes and tuples (about 17 lines an operation on mix h) is still under way, and the
//! frees (a live-map byte and a stack slot stored per block, some 64 blocks a batch) took
//! that wait as memory management. So the commit first waits for its write-backs inside a
//! [`Phase::Cc`] span (a full fence, `MFENCE`: nothing persistent changes, and the frees
//! would have waited as long). Measured on cow-h, 1 thread, 3 × 7 interleaved runs with
//! and without it (load 4-5 on the 2-core VM): memory management 61-63 against 66-94 ns
//! per operation, crash consistency up by about as much, throughput 838-946 against
//! 738-857 kops/s (no loss within the noise). On InP the same full fence after every
//! fence cost about 30% of inp-g's throughput (the next operation's search overlaps the
//! write-back there), so only CoW's commit, whose next step waits anyway, has it.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};

use crate::{Engine, PersistentAllocator, Phase, Split};

/// Bytes of a node: one heap block (a size class of alloclab-pmem, eight cache lines).
pub const NODE_BYTES: usize = 512;

/// Entries per node (keys and pointers of a leaf, children of an internal node).
pub const FANOUT: usize = 31;

/// Node blocks a partition allocates ahead (see "Spare nodes" in the module
/// documentation): a batch's worth of leaf copies and a few more.
pub const SPARE_NODES: usize = 40;

/// The phase that copying a node into the dirty directory is timed under.
const COPY_PHASE: Phase = Phase::Cc;

const NODE_WORDS: usize = NODE_BYTES / 8;
/// Word index of `keys[0]`.
const KEYS_AT: usize = PTRS_AT + FANOUT;
/// Word index of `ptrs[0]`: the offsets come first, so that a node's last cache line
/// holds keys and zeros only (see the module documentation on stale words).
const PTRS_AT: usize = 1;
const _: () = assert!(KEYS_AT + FANOUT < NODE_WORDS && KEYS_AT + FANOUT > NODE_WORDS - 8);

/// Word 0 of a partition root: "CoW-v1", odd.
const MAGIC: u64 = 0x0031_762D_576F_4301;
/// Word index of the master record in the partition root.
const MASTER: usize = 1;
/// Bytes of the partition root.
const PARTITION_BYTES: usize = 64;

/// The high 16 bits of a node header.
const NODE_TAG: u64 = 0xC0DE << 48;
/// The high 16 bits of a tuple header.
const TUPLE_TAG: u64 = 0x7475 << 48;
/// The tag, the reserved bits 32..48 and bit 0 of a header.
const HEADER_CHECK: u64 = 0xFFFF_FFFF_0000_0001;
/// The deepest tree a partition may hold (levels are 7 bits).
const MAX_LEVEL: u8 = 100;
/// The longest value: a tuple header keeps the length in bits 1..32 (bits 32..48 are
/// reserved and checked to be zero).
pub const MAX_VALUE_BYTES: usize = (1 << 31) - 1;

/// Bytes of a tuple block holding `len` value bytes: the header and the value, padded to a
/// whole cache line (in a cache-line-aligned block, as alloclab-pmem's and PMDK's are, the
/// pad shares the value's last line, so flushing it costs nothing).
fn tuple_bytes(len: usize) -> usize {
    (8 + len).next_multiple_of(64)
}

/// A hasher for block offsets (multiples of 16): a multiply folded so the low bits mix.
#[derive(Default)]
struct OffsetHasher(u64);

impl Hasher for OffsetHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let h = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

type OffsetSet = HashSet<u64, BuildHasherDefault<OffsetHasher>>;

/// A node block, read and written through a raw pointer (no references, so two `Node`s of
/// one block never alias unsoundly).
///
/// Invariant: the pointer is to [`NODE_BYTES`] of a live heap block of this partition,
/// 8-byte aligned, that only this engine instance accesses.
#[derive(Clone, Copy)]
struct Node(*mut u64);

impl Node {
    /// # Safety
    ///
    /// `p` satisfies the type's invariant for as long as the `Node` is used.
    unsafe fn from_raw(p: *mut u8) -> Self {
        Node(p.cast())
    }

    /// The node at `off`, read from the tree: checked for alignment, tag, level and a
    /// count in `1..=FANOUT`.
    fn open<H: PersistentAllocator>(heap: &H, off: u64) -> Result<Self, String> {
        if off == 0 || !off.is_multiple_of(8) {
            return Err(format!("cow: corrupt tree: node offset {off:#x}"));
        }
        // SAFETY: the offset comes from the master record or a node of the tree, which
        // this engine wrote (durably, before linking) with offsets of its node blocks.
        let node = unsafe { Node::from_raw(heap.at(off)) };
        let h = node.word(0);
        let (count, level) = (node.count(), node.level());
        if h & HEADER_CHECK != NODE_TAG | 1 || count == 0 || count > FANOUT || level > MAX_LEVEL {
            return Err(format!(
                "cow: corrupt tree: node {off:#x} has header {h:#018x}"
            ));
        }
        Ok(node)
    }

    fn word(self, i: usize) -> u64 {
        debug_assert!(i < NODE_WORDS);
        // SAFETY: `i < NODE_WORDS`; the type's invariant.
        unsafe { self.0.add(i).read() }
    }

    fn set_word(self, i: usize, v: u64) {
        debug_assert!(i < NODE_WORDS);
        // SAFETY: as in `word`.
        unsafe { self.0.add(i).write(v) }
    }

    fn count(self) -> usize {
        ((self.word(0) >> 16) & 0xFFFF) as usize
    }

    fn level(self) -> u8 {
        ((self.word(0) >> 1) & 0x7F) as u8
    }

    fn set_header(self, level: u8, count: usize) {
        self.set_word(
            0,
            NODE_TAG | ((count as u64) << 16) | (u64::from(level) << 1) | 1,
        );
    }

    fn key(self, i: usize) -> u64 {
        !self.word(KEYS_AT + i)
    }

    fn ptr(self, i: usize) -> u64 {
        self.word(PTRS_AT + i)
    }

    fn set_ptr(self, i: usize, off: u64) {
        self.set_word(PTRS_AT + i, off);
    }

    /// Zeroes the block and makes it an empty node of `level`.
    fn init(self, level: u8) {
        // SAFETY: the type's invariant: `NODE_BYTES` writable bytes.
        unsafe { ptr::write_bytes(self.0, 0, NODE_WORDS) };
        self.set_header(level, 0);
    }

    /// Copies all of `from` (entries and zeroed tail) into this block.
    fn copy_from(self, from: Node) {
        // SAFETY: two distinct node blocks (`self` is a fresh one), `NODE_BYTES` each.
        unsafe { ptr::copy_nonoverlapping(from.0, self.0, NODE_WORDS) };
    }

    /// In a leaf, the first position whose key is `>= key`.
    fn lower_bound(self, key: u64) -> usize {
        let (mut lo, mut hi) = (0, self.count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// In an internal node, the child whose range holds `key`: the last `i` with
    /// `i == 0 || keys[i] <= key`.
    fn child_index(self, key: u64) -> usize {
        let (mut lo, mut hi) = (1, self.count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo - 1
    }

    /// Inserts an entry at `at`, shifting the later ones (`count < FANOUT`).
    fn insert_at(self, at: usize, key: u64, off: u64) {
        let n = self.count();
        debug_assert!(n < FANOUT && at <= n);
        // SAFETY: `at + 1 + (n - at) <= FANOUT` words inside each array.
        unsafe {
            ptr::copy(
                self.0.add(KEYS_AT + at),
                self.0.add(KEYS_AT + at + 1),
                n - at,
            );
            ptr::copy(
                self.0.add(PTRS_AT + at),
                self.0.add(PTRS_AT + at + 1),
                n - at,
            );
        }
        self.set_word(KEYS_AT + at, !key);
        self.set_word(PTRS_AT + at, off);
        self.set_header(self.level(), n + 1);
    }

    /// Removes the entry at `at`, shifting the later ones and zeroing the freed slot.
    fn remove_at(self, at: usize) {
        let n = self.count();
        debug_assert!(at < n);
        // SAFETY: `at + 1 + (n - at - 1) <= FANOUT` words inside each array.
        unsafe {
            ptr::copy(
                self.0.add(KEYS_AT + at + 1),
                self.0.add(KEYS_AT + at),
                n - at - 1,
            );
            ptr::copy(
                self.0.add(PTRS_AT + at + 1),
                self.0.add(PTRS_AT + at),
                n - at - 1,
            );
        }
        self.set_word(KEYS_AT + n - 1, 0);
        self.set_word(PTRS_AT + n - 1, 0);
        self.set_header(self.level(), n - 1);
    }

    /// Moves the entries from `from` on into the empty node `right`, zeroing them here.
    fn move_tail(self, from: usize, right: Node) {
        let n = self.count();
        let moved = n - from;
        // SAFETY: distinct blocks; `from + moved == n <= FANOUT` words in each array.
        unsafe {
            ptr::copy_nonoverlapping(self.0.add(KEYS_AT + from), right.0.add(KEYS_AT), moved);
            ptr::copy_nonoverlapping(self.0.add(PTRS_AT + from), right.0.add(PTRS_AT), moved);
            ptr::write_bytes(self.0.add(KEYS_AT + from), 0, moved);
            ptr::write_bytes(self.0.add(PTRS_AT + from), 0, moved);
        }
        right.set_header(right.level(), moved);
        self.set_header(self.level(), from);
    }
}

/// One level of a root-to-leaf path: the node, and the child taken (internal) or the key's
/// position (leaf).
#[derive(Clone, Copy, Debug)]
struct Step {
    node: u64,
    idx: usize,
}

/// Fills `path` with the root-to-leaf path to `key`; whether the leaf holds it.
fn descend<H: PersistentAllocator>(
    heap: &H,
    root: u64,
    key: u64,
    path: &mut Vec<Step>,
) -> Result<bool, String> {
    path.clear();
    if root == 0 {
        return Ok(false);
    }
    let mut off = root;
    let mut expected: Option<u8> = None;
    loop {
        let node = Node::open(heap, off)?;
        let level = node.level();
        if expected.is_some_and(|l| l != level) {
            return Err(format!(
                "cow: corrupt tree: node {off:#x} at level {level}, expected {expected:?}"
            ));
        }
        if level == 0 {
            let idx = node.lower_bound(key);
            path.push(Step { node: off, idx });
            return Ok(idx < node.count() && node.key(idx) == key);
        }
        let idx = node.child_index(key);
        path.push(Step { node: off, idx });
        off = node.ptr(idx);
        expected = Some(level - 1);
    }
}

/// The value length of the tuple block at `p`, its header checked.
fn tuple_len(p: *const u8, off: u64) -> Result<usize, String> {
    // SAFETY: `p` is a tuple block named by a leaf of this partition, at least one word.
    let h = unsafe { p.cast::<u64>().read() };
    if h & HEADER_CHECK != TUPLE_TAG | 1 {
        return Err(format!(
            "cow: corrupt tree: tuple {off:#x} has header {h:#018x}"
        ));
    }
    Ok(((h >> 1) & MAX_VALUE_BYTES as u64) as usize)
}

/// Writes a tuple block at `p`: header, `len` bytes from `fill`, zero pad to a line.
///
/// # Safety
///
/// `p` is a fresh block of at least `tuple_bytes(len)` bytes, 8-byte aligned.
unsafe fn write_tuple(p: *mut u8, len: usize, fill: impl FnOnce(*mut u8)) {
    let header = TUPLE_TAG | ((len as u64) << 1) | 1;
    // SAFETY: the caller's contract.
    unsafe {
        p.cast::<u64>().write(header);
        fill(p.add(8));
        ptr::write_bytes(p.add(8 + len), 0, tuple_bytes(len) - 8 - len);
    }
}

/// What an operation will do at the key it searches, for the blocks it needs.
#[derive(Clone, Copy)]
enum Intent {
    Read,
    /// Insert if the key is absent.
    Insert,
    /// Update or delete if the key is present.
    Change,
}

/// Nodes of `path` not yet in the dirty directory (the copies a change needs).
fn clean_steps(path: &[Step], dirty: &OffsetSet) -> usize {
    path.iter().filter(|s| !dirty.contains(&s.node)).count()
}

/// Node blocks an insert along `path` needs: copies of its clean nodes, one per full node
/// from the leaf up, one more for a new root (or a first leaf).
fn blocks_for_insert<H: PersistentAllocator>(heap: &H, path: &[Step], dirty: &OffsetSet) -> usize {
    if path.is_empty() {
        return 1;
    }
    let mut splits = 0;
    for (i, s) in path.iter().enumerate().rev() {
        // SAFETY: a node of the tree, just visited by `descend`.
        let node = unsafe { Node::from_raw(heap.at(s.node)) };
        if node.count() < FANOUT {
            break;
        }
        splits += 1;
        if i == 0 {
            splits += 1;
        }
    }
    splits + clean_steps(path, dirty)
}

/// What [`Cow::walk`] found: the entries in key order and every block the tree reaches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    /// Key and value of every entry, in key order.
    pub entries: Vec<(u64, Vec<u8>)>,
    /// Offsets of the nodes and tuples the tree reaches.
    pub blocks: Vec<u64>,
    /// Nodes among `blocks`.
    pub nodes: usize,
    /// Levels (0 for an empty tree, 1 for a lone leaf).
    pub height: usize,
    /// The partition's spare node blocks: allocated, linked nowhere (see "Spare nodes" in
    /// the module documentation).
    pub spares: Vec<u64>,
}

/// The copy-on-write engine (see the module documentation).
pub struct Cow<H: PersistentAllocator> {
    heap: Arc<H>,
    /// The partition root: [`MAGIC`], the master record, zeros.
    part: *mut u64,
    /// The directory root the master record names (durable).
    committed: u64,
    /// The directory root operations see: `committed`, or the dirty directory's root.
    root: u64,
    /// Nodes allocated in this batch (the dirty directory), flushed at commit.
    dirty_nodes: OffsetSet,
    /// Tuples allocated in this batch, flushed at commit.
    dirty_tuples: OffsetSet,
    /// Committed blocks replaced in this batch, freed after the commit.
    retired: Vec<u64>,
    /// The current operation's path.
    path: Vec<Step>,
    /// Node blocks allocated for the current operation, not yet used.
    fresh: Vec<u64>,
    /// Node blocks allocated ahead, linked nowhere, that operations take their node blocks
    /// from (see "Spare nodes" in the module documentation).
    spare: Vec<u64>,
    /// Blocks of this batch the current operation dropped, freed at its end.
    unlinked: Vec<u64>,
    /// The block sizes the current operation asks the heap for (scratch).
    sizes: Vec<usize>,
    split: Split,
}

// SAFETY: the raw pointer is into the heap's root, which the `Arc` keeps alive and which
// is `Send + Sync`; the partition it names is this instance's alone, so moving the
// instance to another thread moves the only user of its blocks with it.
unsafe impl<H: PersistentAllocator> Send for Cow<H> {}

impl<H: PersistentAllocator> Cow<H> {
    fn partition(root: *mut u8) -> Result<*mut u64, String> {
        if root.is_null() || !(root as usize).is_multiple_of(8) {
            return Err(format!(
                "cow: partition root {root:p} is not an aligned address"
            ));
        }
        Ok(root.cast())
    }

    fn new(heap: Arc<H>, part: *mut u64, committed: u64) -> Self {
        Cow {
            heap,
            part,
            committed,
            root: committed,
            dirty_nodes: OffsetSet::default(),
            dirty_tuples: OffsetSet::default(),
            retired: Vec::new(),
            path: Vec::new(),
            fresh: Vec::new(),
            spare: Vec::new(),
            unlinked: Vec::new(),
            sizes: Vec::new(),
            split: Split::default(),
        }
    }

    /// Walks the tree operations see (the dirty directory if there is one), checking every
    /// node (tags, levels, counts, keys strictly increasing and inside the range the parent
    /// gives them, zeroed unused words) and tuple header: for tests and diagnostics, O(n).
    ///
    /// # Errors
    ///
    /// The first inconsistency found.
    pub fn walk(&self) -> Result<Walk, String> {
        let mut walk = Walk {
            spares: self.spare.clone(),
            ..Walk::default()
        };
        if self.root != 0 {
            let height = Node::open(&*self.heap, self.root)?.level() as usize + 1;
            walk.height = height;
            self.walk_node(self.root, height as u8 - 1, 0, None, &mut walk)?;
        }
        Ok(walk)
    }

    fn walk_node(
        &self,
        off: u64,
        level: u8,
        lo: u64,
        hi: Option<u64>,
        walk: &mut Walk,
    ) -> Result<(), String> {
        let heap = &*self.heap;
        let node = Node::open(heap, off)?;
        let bad = |what: &str| Err(format!("cow: corrupt tree: node {off:#x}: {what}"));
        if node.level() != level {
            return bad("wrong level");
        }
        walk.blocks.push(off);
        walk.nodes += 1;
        let n = node.count();
        for w in (PTRS_AT + n..KEYS_AT).chain(KEYS_AT + n..NODE_WORDS) {
            if node.word(w) != 0 {
                return bad("unused word not zero");
            }
        }
        for i in 0..n {
            let key = node.key(i);
            // An internal node's keys[0] is not compared; its range is the parent's.
            let checked = level == 0 || i > 0;
            if checked && (key < lo || hi.is_some_and(|h| key >= h)) {
                return bad("key outside the range its parent gives");
            }
            // keys[0] of an internal node is not compared, so its order is not kept.
            let ordered = if level == 0 { i >= 1 } else { i >= 2 };
            if ordered && node.key(i - 1) >= key {
                return bad("keys not increasing");
            }
            if level == 0 {
                let t = node.ptr(i);
                let p = heap.at(t);
                let len = tuple_len(p, t)?;
                // SAFETY: a tuple block of `tuple_bytes(len)` bytes, named by the leaf.
                let value = unsafe { std::slice::from_raw_parts(p.add(8), len) };
                walk.entries.push((key, value.to_vec()));
                walk.blocks.push(t);
            } else {
                let child_lo = if i == 0 { lo } else { key };
                let child_hi = if i + 1 < n { Some(node.key(i + 1)) } else { hi };
                self.walk_node(node.ptr(i), level - 1, child_lo, child_hi, walk)?;
            }
        }
        Ok(())
    }

    /// Moves `nodes` node blocks from the spares into `fresh` and allocates, if asked, one
    /// tuple block of `tuple` bytes (its offset returned; 0 if not asked). When the spares
    /// are short, the same call into the heap ([`PersistentAllocator::allocate_unlinked_many`]) takes [`SPARE_NODES`]
    /// more. On failure takes nothing from the heap and changes nothing. No call (and no
    /// [`Phase::Mm`] time) when the spares hold the nodes and no tuple is asked for.
    fn alloc_blocks(&mut self, nodes: usize, tuple: Option<usize>) -> Result<u64, String> {
        let heap = &*self.heap;
        let (fresh, spare, sizes) = (&mut self.fresh, &mut self.spare, &mut self.sizes);
        fresh.clear();
        sizes.clear();
        if spare.len() < nodes {
            sizes.resize(nodes - spare.len() + SPARE_NODES, NODE_BYTES);
        }
        sizes.extend(tuple);
        let tuple = if sizes.is_empty() {
            0
        } else {
            self.split.time(Phase::Mm, || {
                heap.allocate_unlinked_many(sizes, spare)
                    .map_err(|e| format!("cow: {e}"))?;
                Ok::<_, String>(match tuple {
                    Some(_) => spare.pop().expect("the tuple's block, allocated last"),
                    None => 0,
                })
            })?
        };
        fresh.extend(spare.drain(spare.len() - nodes..));
        Ok(tuple)
    }

    /// Frees the blocks the operation unlinked (they were never committed).
    fn free_unlinked(&mut self) -> Result<(), String> {
        if self.unlinked.is_empty() {
            return Ok(());
        }
        let heap = &*self.heap;
        let unlinked = &mut self.unlinked;
        self.split.time(Phase::Mm, || {
            // SAFETY: blocks of this batch: no durable word names them.
            let freed = unsafe { heap.release_many(unlinked) };
            unlinked.clear();
            freed.map_err(|e| format!("cow: {e}"))
        })
    }

    /// Copies the clean nodes of `path` into fresh blocks, top-down, relinking each copy in
    /// its (already dirty) parent or as the root, and retires the originals. Uses
    /// one block of `fresh` per clean node.
    fn copy_path(&mut self) {
        let heap = &*self.heap;
        let (path, fresh, dirty, retired) = (
            &mut self.path,
            &mut self.fresh,
            &mut self.dirty_nodes,
            &mut self.retired,
        );
        let root = &mut self.root;
        self.split.time(COPY_PHASE, || {
            for i in 0..path.len() {
                let old = path[i].node;
                if dirty.contains(&old) {
                    continue;
                }
                let new = fresh
                    .pop()
                    .expect("copy_path: a fresh block per clean node");
                // SAFETY: `old` is a node of the tree, `new` a fresh node block.
                let (from, to) =
                    unsafe { (Node::from_raw(heap.at(old)), Node::from_raw(heap.at(new))) };
                to.copy_from(from);
                dirty.insert(new);
                retired.push(old);
                path[i].node = new;
                if i == 0 {
                    *root = new;
                } else {
                    let parent = path[i - 1];
                    // SAFETY: the parent was made dirty one iteration earlier.
                    unsafe { Node::from_raw(heap.at(parent.node)) }.set_ptr(parent.idx, new);
                }
            }
        });
    }

    /// Inserts `(key, tuple)` at the leaf position of `path` (all dirty), splitting full
    /// nodes upward with blocks from `fresh` (a new root included).
    fn insert_entry(&mut self, key: u64, tuple: u64) {
        let heap = &*self.heap;
        let (path, fresh, dirty) = (&self.path, &mut self.fresh, &mut self.dirty_nodes);
        let root = &mut self.root;
        self.split.time(Phase::Index, || {
            if path.is_empty() {
                let leaf = fresh
                    .pop()
                    .expect("insert_entry: a block for the first leaf");
                // SAFETY: a fresh node block.
                let node = unsafe { Node::from_raw(heap.at(leaf)) };
                node.init(0);
                node.insert_at(0, key, tuple);
                dirty.insert(leaf);
                *root = leaf;
                return;
            }
            let (mut key, mut off) = (key, tuple);
            let mut pos = path.len() - 1;
            let mut at = path[pos].idx;
            loop {
                let this = path[pos].node;
                // SAFETY: a dirty node of the path.
                let node = unsafe { Node::from_raw(heap.at(this)) };
                if node.count() < FANOUT {
                    node.insert_at(at, key, off);
                    return;
                }
                let right_off = fresh.pop().expect("insert_entry: a block per split");
                // SAFETY: a fresh node block.
                let right = unsafe { Node::from_raw(heap.at(right_off)) };
                right.init(node.level());
                dirty.insert(right_off);
                let mid = FANOUT.div_ceil(2);
                node.move_tail(mid, right);
                if at < mid {
                    node.insert_at(at, key, off);
                } else {
                    right.insert_at(at - mid, key, off);
                }
                let separator = right.key(0);
                if pos == 0 {
                    let new_root = fresh.pop().expect("insert_entry: a block for a new root");
                    // SAFETY: a fresh node block.
                    let top = unsafe { Node::from_raw(heap.at(new_root)) };
                    top.init(node.level() + 1);
                    top.insert_at(0, node.key(0), this);
                    top.insert_at(1, separator, right_off);
                    dirty.insert(new_root);
                    *root = new_root;
                    return;
                }
                pos -= 1;
                at = path[pos].idx + 1;
                key = separator;
                off = right_off;
            }
        });
    }

    /// Fills `path` for `key`: the offset of its tuple if the tree holds it, and the node
    /// blocks the operation `intent` needs there.
    fn search(&mut self, key: u64, intent: Intent) -> Result<(Option<u64>, usize), String> {
        let heap = &*self.heap;
        let (root, path, dirty) = (self.root, &mut self.path, &self.dirty_nodes);
        self.split.time(Phase::Index, || {
            let tuple = if descend(heap, root, key, path)? {
                let leaf = *path.last().expect("a found key has a path");
                // SAFETY: a node of the tree, just visited by `descend`.
                Some(unsafe { Node::from_raw(heap.at(leaf.node)) }.ptr(leaf.idx))
            } else {
                None
            };
            let nodes = match (intent, tuple) {
                (Intent::Insert, None) => blocks_for_insert(heap, path, dirty),
                (Intent::Change, Some(_)) => clean_steps(path, dirty),
                _ => 0,
            };
            Ok((tuple, nodes))
        })
    }
}

impl<H: PersistentAllocator> Drop for Cow<H> {
    /// Frees the dirty directory and new tuples of an uncommitted batch (the batch is
    /// abandoned; nothing durable names them) and the spare nodes.
    fn drop(&mut self) {
        let batch: Vec<u64> = self
            .dirty_nodes
            .drain()
            .chain(self.dirty_tuples.drain())
            .chain(self.spare.drain(..))
            .collect();
        // SAFETY: allocated in this batch, named by no durable word; never used again.
        let _ = unsafe { self.heap.release_many(&batch) };
    }
}

impl<H: PersistentAllocator> Engine<H> for Cow<H> {
    const NAME: &'static str = "cow";

    const ROOT_BYTES: usize = PARTITION_BYTES;

    /// Group commit of 32 operations: the commit's two fences (~160 ns each) cost 10 ns
    /// per operation, and the upper levels of the tree are copied once per 32 operations
    /// instead of once each. Larger batches gain little more (the leaves, one per
    /// operation, dominate the copies) while the commit's latency (flushing ~32 leaves
    /// and tuples) and the work a crash loses grow with the batch.
    const COMMIT_EVERY: usize = 32;

    fn create(heap: Arc<H>, root: *mut u8) -> Result<Self, String> {
        let part = Self::partition(root)?;
        // SAFETY: `ROOT_BYTES` of the heap's root, this partition's alone.
        let words = unsafe { std::slice::from_raw_parts_mut(part, PARTITION_BYTES / 8) };
        if let Some(w) = words.iter().position(|&w| w != 0) {
            return Err(format!(
                "cow: partition root is not zeroed (word {w} = {:#x}); not overwriting it",
                words[w]
            ));
        }
        let mut cow = Self::new(heap, part, 0);
        cow.split.time(Phase::Cc, || words[0] = MAGIC);
        let heap = Arc::clone(&cow.heap);
        cow.split.persist(&*heap, part.cast(), PARTITION_BYTES);
        Ok(cow)
    }

    fn recover(heap: Arc<H>, root: *mut u8) -> Result<Self, String> {
        let part = Self::partition(root)?;
        // SAFETY: the partition root's first two words.
        let (magic, master) = unsafe { (part.read(), part.add(MASTER).read()) };
        if magic != MAGIC {
            return Err(format!(
                "cow: the partition root holds no cow partition (word 0 = {magic:#x})"
            ));
        }
        if master != 0 {
            Node::open(&*heap, master)?;
        }
        Ok(Self::new(heap, part, master))
    }

    fn read(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, String> {
        let (Some(t), _) = self.search(key, Intent::Read)? else {
            return Ok(false);
        };
        let p = self.heap.at(t);
        self.split.time(Phase::Mod, || {
            let len = tuple_len(p, t)?;
            out.clear();
            // SAFETY: a tuple block of `tuple_bytes(len)` bytes named by the leaf.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(p.add(8), len) });
            Ok(true)
        })
    }

    fn insert(&mut self, key: u64, value: &[u8]) -> Result<bool, String> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!(
                "cow: a value of {} bytes is longer than {MAX_VALUE_BYTES}",
                value.len()
            ));
        }
        let (None, nodes) = self.search(key, Intent::Insert)? else {
            return Ok(false);
        };
        let tuple = self.alloc_blocks(nodes, Some(tuple_bytes(value.len())))?;
        let p = self.heap.at(tuple);
        self.split.time(Phase::Mod, || {
            // SAFETY: a fresh block of `tuple_bytes(value.len())` bytes.
            unsafe {
                write_tuple(p, value.len(), |dst| {
                    ptr::copy_nonoverlapping(value.as_ptr(), dst, value.len())
                })
            }
        });
        self.dirty_tuples.insert(tuple);
        self.copy_path();
        self.insert_entry(key, tuple);
        debug_assert!(self.fresh.is_empty());
        Ok(true)
    }

    fn update(&mut self, key: u64, at: usize, bytes: &[u8]) -> Result<bool, String> {
        let (Some(old), nodes) = self.search(key, Intent::Change)? else {
            return Ok(false);
        };
        let src = self.heap.at(old);
        let len = self.split.time(Phase::Mod, || tuple_len(src, old))?;
        if at.checked_add(bytes.len()).is_none_or(|end| end > len) {
            return Err(format!(
                "cow: update of {} bytes at byte {at} of key {key} is past the end of its \
                 {len}-byte value; nothing changed",
                bytes.len()
            ));
        }
        if bytes.is_empty() {
            return Ok(true);
        }
        if self.dirty_tuples.contains(&old) {
            // New in this batch: no durable word names it, patch it in place.
            self.split.time(Phase::Mod, || {
                // SAFETY: `at + bytes.len() <= len` bytes of the tuple's value.
                unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), src.add(8 + at), bytes.len()) }
            });
            return Ok(true);
        }
        let new = self.alloc_blocks(nodes, Some(tuple_bytes(len)))?;
        let dst = self.heap.at(new);
        self.split.time(Phase::Mod, || {
            // SAFETY: a fresh block of `tuple_bytes(len)` bytes; the old value has `len`
            // bytes and `at + bytes.len() <= len`.
            unsafe {
                write_tuple(dst, len, |d| {
                    ptr::copy_nonoverlapping(src.add(8), d, len);
                    ptr::copy_nonoverlapping(bytes.as_ptr(), d.add(at), bytes.len());
                })
            }
        });
        self.dirty_tuples.insert(new);
        self.retired.push(old);
        self.copy_path();
        let heap = &*self.heap;
        let leaf = *self.path.last().expect("a found key has a path");
        self.split.time(Phase::Index, || {
            // SAFETY: the leaf was made dirty by `copy_path`.
            unsafe { Node::from_raw(heap.at(leaf.node)) }.set_ptr(leaf.idx, new)
        });
        Ok(true)
    }

    fn delete(&mut self, key: u64) -> Result<bool, String> {
        let (Some(tuple), nodes) = self.search(key, Intent::Change)? else {
            return Ok(false);
        };
        self.alloc_blocks(nodes, None)?;
        self.copy_path();
        if self.dirty_tuples.remove(&tuple) {
            self.unlinked.push(tuple);
        } else {
            self.retired.push(tuple);
        }
        let heap = &*self.heap;
        let (path, dirty, retired, unlinked) = (
            &self.path,
            &mut self.dirty_nodes,
            &mut self.retired,
            &mut self.unlinked,
        );
        let root = &mut self.root;
        self.split.time(Phase::Index, || {
            let mut pos = path.len() - 1;
            loop {
                let step = path[pos];
                // SAFETY: a dirty node of the path.
                let node = unsafe { Node::from_raw(heap.at(step.node)) };
                node.remove_at(step.idx);
                if node.count() > 0 {
                    break;
                }
                // Empty: unlink it from its parent (or empty the tree) and free it.
                dirty.remove(&step.node);
                unlinked.push(step.node);
                if pos == 0 {
                    *root = 0;
                    break;
                }
                pos -= 1;
            }
            // A root with one child gives way to the child.
            while *root != 0 {
                // SAFETY: the root is a node of the tree (dirty, or committed and clean).
                let top = unsafe { Node::from_raw(heap.at(*root)) };
                if top.level() == 0 || top.count() > 1 {
                    break;
                }
                if dirty.remove(&*root) {
                    unlinked.push(*root);
                } else {
                    retired.push(*root);
                }
                *root = top.ptr(0);
            }
        });
        self.free_unlinked()?;
        Ok(true)
    }

    fn commit(&mut self) -> Result<(), String> {
        if self.root == self.committed {
            debug_assert!(self.dirty_nodes.is_empty() && self.dirty_tuples.is_empty());
            debug_assert!(self.retired.is_empty());
            return Ok(());
        }
        let heap = Arc::clone(&self.heap);
        let heap = &*heap;
        for &n in &self.dirty_nodes {
            self.split.flush(heap, heap.at(n), NODE_BYTES);
        }
        for &t in &self.dirty_tuples {
            let p = heap.at(t);
            let len = tuple_len(p, t)?;
            self.split.flush(heap, p, tuple_bytes(len));
        }
        if !self.dirty_nodes.is_empty() || !self.dirty_tuples.is_empty() {
            self.split.fence(heap);
        }
        let (master, root) = (self.part.wrapping_add(MASTER), self.root);
        self.split.time(Phase::Cc, || {
            // SAFETY: the master record, an aligned word of this partition's root; one
            // aligned 8-byte store is failure-atomic.
            unsafe { master.write_volatile(root) }
        });
        self.split.persist(heap, master.cast(), 8);
        // Wait, inside a crash-consistency span, for the write-backs the commit's fences
        // ordered (see the module documentation, "Time split"): the frees below would
        // otherwise stall on them and show the commit's wait as memory management.
        self.split.time(Phase::Cc, || fence(Ordering::SeqCst));
        self.committed = root;
        self.dirty_nodes.clear();
        self.dirty_tuples.clear();
        let refill = SPARE_NODES.saturating_sub(self.spare.len());
        if self.retired.is_empty() && refill == 0 {
            return Ok(());
        }
        let (retired, spare, sizes) = (&mut self.retired, &mut self.spare, &mut self.sizes);
        sizes.clear();
        sizes.resize(refill, NODE_BYTES);
        self.split.time(Phase::Mm, || {
            // SAFETY: unlinked by the master switch just made durable; not used again.
            let freed = unsafe { heap.release_many(retired) };
            retired.clear();
            // The spares for the next batch, in the same visit to the heap's allocator: the
            // node blocks just retired, whose allocator state is still in the cache. Out of
            // space here is no error of the commit (it is durable): the next operation that
            // needs a node asks again, and fails then.
            if !sizes.is_empty() {
                let _ = heap.allocate_unlinked_many(sizes, spare);
            }
            freed.map_err(|e| format!("cow: committed, but freeing a retired block: {e}"))
        })
    }

    fn split(&self) -> &Split {
        &self.split
    }
}
