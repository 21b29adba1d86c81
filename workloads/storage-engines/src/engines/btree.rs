//! A persistent B+tree from `u64` keys to `u64` values (tuple offsets, or markers that are
//! not offsets), whose nodes are heap blocks linked by offsets: InP's index and LSM's
//! memtable.
//!
//! # Node layout (one block of [`NODE_BYTES`] = 512 bytes, 64 words)
//!
//! ```text
//!  word 0        hide(count << 1 | is_leaf)
//!  leaf:  words 1..=31 key slots, hidden; words 32..=62 value slots, raw (0: free slot)
//!  inner: words 1..=30 separators, hidden, sorted; words 32..=62 children, raw
//!  word 63       0
//! ```
//!
//! A leaf's entries sit in unsorted *slots* (a slot is used iff its value is not 0), so an
//! insertion or a deletion in a leaf stores two words of one slot and the count, and moves
//! no link. Inner nodes are sorted: child `i` holds the keys `k` with
//! `sep[i-1] <= k < sep[i]`. Unused words are zero, so a node never holds a stale link. The
//! tree's root offset is one word (in the engine's root), 0 for an empty tree.
//!
//! # Crash consistency
//!
//! The tree changes only through a [`TxLog`], whose records make every in-place store
//! undoable and redoable; but the heap's recovery marks blocks *before* the log is rolled,
//! from whatever the crash left, so an in-place change must never leave a crash state in
//! which a link that undo or redo restores is in no durable word. Hence the rule: **every
//! in-place store adds one link or removes one link, never moves one**, and a block whose
//! link is removed is listed in the log's free lines (raw, so it stays marked) until its
//! transaction is over:
//!
//! * insertion into a leaf with a free slot, a value replaced, a deletion that leaves the
//!   leaf non-empty: the slot's key and value words and the count, in place;
//! * a leaf split: both halves are written to **fresh** leaves (the old leaf is freed at
//!   commit), and the parent is copied on write with the new separator: a fresh parent
//!   (the old one freed at commit), and so on up while nodes split; the first ancestor
//!   that does not change shape gets one 8-byte child pointer swapped in place (or the
//!   root word does);
//! * a leaf that becomes empty is freed and its parent copied on write without it; a
//!   parent left empty is freed the same way up the path; a root left with one child is
//!   replaced by it (the root word).
//!
//! Fresh nodes are written whole and flushed before [`TxLog::apply`]'s fence; the one an
//! in-place store links (the top of the fresh subtree) is kept marked through the last
//! commit's redo by the log's links, and the others through it. So a tree operation is
//! failure-atomic with the engine's transaction: two fences per transaction in all, splits
//! included.
//!
//! # Deletion
//!
//! Deletion never merges or rebalances: leaves and inner nodes may stay underfull. Empty
//! nodes are freed (above), so the tree holds no empty node, and its height never exceeds
//! what the insertions built.

use super::log::{FreeKind, TxLog};
#[cfg(test)]
use super::write_word;
use super::{hide, read_word, unhide};
use crate::{PersistentAllocator, Phase, Split};

/// Bytes of a node block.
pub const NODE_BYTES: usize = 512;
const NODE_WORDS: usize = NODE_BYTES / 8;
/// Entries of a leaf.
pub const LEAF_CAP: usize = 31;
/// Children of an inner node.
pub const INNER_CAP: usize = 31;
const KEYS_AT: usize = 1;
const VALS_AT: usize = 32;
/// Deeper than this is a cycle or corruption.
const MAX_HEIGHT: usize = 40;

/// A node read into DRAM (keys plain). A leaf has [`LEAF_CAP`] slots (value 0: free); an
/// inner node its sorted separators and children.
#[derive(Clone, Debug)]
struct Node {
    leaf: bool,
    keys: Vec<u64>,
    vals: Vec<u64>,
}

impl Node {
    fn leaf_of(entries: &[(u64, u64)]) -> Self {
        let mut keys = vec![0; LEAF_CAP];
        let mut vals = vec![0; LEAF_CAP];
        for (i, &(k, v)) in entries.iter().enumerate() {
            keys[i] = k;
            vals[i] = v;
        }
        Self {
            leaf: true,
            keys,
            vals,
        }
    }

    fn count(&self) -> usize {
        if self.leaf {
            self.vals.iter().filter(|&&v| v != 0).count()
        } else {
            self.vals.len()
        }
    }

    fn header(&self) -> u64 {
        hide((self.count() as u64) << 1 | u64::from(self.leaf))
    }

    fn image(&self) -> [u64; NODE_WORDS] {
        let mut w = [0; NODE_WORDS];
        w[0] = self.header();
        for (i, (&k, &v)) in self.keys.iter().zip(&self.vals).enumerate() {
            if !self.leaf || v != 0 {
                w[KEYS_AT + i] = hide(k);
            }
        }
        w[VALS_AT..VALS_AT + self.vals.len()].copy_from_slice(&self.vals);
        if !self.leaf {
            // An inner node has one separator fewer than children.
            w[KEYS_AT + self.keys.len()] = 0;
        }
        w
    }

    /// A leaf's slot holding `key`.
    fn slot_of(&self, key: u64) -> Option<usize> {
        (0..self.vals.len()).find(|&i| self.vals[i] != 0 && self.keys[i] == key)
    }

    /// A leaf's entries, sorted.
    fn sorted_entries(&self) -> Vec<(u64, u64)> {
        let mut e: Vec<(u64, u64)> = self
            .keys
            .iter()
            .zip(&self.vals)
            .filter(|&(_, &v)| v != 0)
            .map(|(&k, &v)| (k, v))
            .collect();
        e.sort_unstable();
        e
    }

    /// The child to descend into for `key`.
    fn child_index(&self, key: u64) -> usize {
        self.keys.partition_point(|&k| k <= key)
    }
}

/// Reads node header `off`: (count, is_leaf).
///
/// # Safety
///
/// `off` is a block of at least [`NODE_BYTES`] the tree reaches.
unsafe fn header<H: PersistentAllocator>(heap: &H, off: u64) -> Result<(usize, bool), String> {
    // SAFETY: the caller's contract.
    let h = unhide(unsafe { read_word(heap, off, 0) });
    let (count, leaf) = (h >> 1, h & 1 == 1);
    let cap = if leaf { LEAF_CAP } else { INNER_CAP } as u64;
    if count > cap || (!leaf && count == 0) {
        return Err(format!("B+tree node {off:#x}: corrupt header {h:#x}"));
    }
    Ok((count as usize, leaf))
}

fn check_node(off: u64) -> Result<(), String> {
    if off == 0 || !off.is_multiple_of(64) {
        return Err(format!("B+tree link {off:#x} is not a node"));
    }
    Ok(())
}

/// Loads node `off` into DRAM.
///
/// # Safety
///
/// As [`header`].
unsafe fn load<H: PersistentAllocator>(heap: &H, off: u64) -> Result<Node, String> {
    // SAFETY: the caller's contract.
    let (count, leaf) = unsafe { header(heap, off)? };
    let word = |i| {
        // SAFETY: a word of the node block (`i < NODE_WORDS`).
        unsafe { read_word(heap, off, i) }
    };
    let node = if leaf {
        let vals: Vec<u64> = (0..LEAF_CAP).map(|i| word(VALS_AT + i)).collect();
        let keys = (0..LEAF_CAP)
            .map(|i| {
                if vals[i] != 0 {
                    unhide(word(KEYS_AT + i))
                } else {
                    0
                }
            })
            .collect();
        Node { leaf, keys, vals }
    } else {
        Node {
            leaf,
            keys: (0..count - 1).map(|i| unhide(word(KEYS_AT + i))).collect(),
            vals: (0..count).map(|i| word(VALS_AT + i)).collect(),
        }
    };
    if leaf && node.count() != count {
        return Err(format!(
            "B+tree leaf {off:#x}: count {count} disagrees with its slots"
        ));
    }
    Ok(node)
}

/// How a node on the path changed, for its parent.
enum Change {
    /// Replaced by this node (a pointer swap in the parent).
    Swap(u64),
    /// Split into these two around a separator.
    Split(u64, u64, u64),
    /// Gone (it became empty).
    Remove,
}

/// A B+tree whose root offset is the word at byte offset `root_word` of the heap (see the
/// module documentation).
#[derive(Clone, Copy, Debug)]
pub struct BTree {
    root_word: u64,
}

impl BTree {
    /// The tree whose root offset lives at byte offset `root_word` (an aligned word of the
    /// engine's root).
    pub fn new(root_word: u64) -> Self {
        Self { root_word }
    }

    /// The root node's offset (0: empty).
    pub fn root<H: PersistentAllocator>(&self, heap: &H) -> u64 {
        // SAFETY: the root word is an aligned word of the engine's root.
        unsafe { read_word(heap, self.root_word, 0) }
    }

    /// The value of `key`, timed [`Phase::Index`].
    ///
    /// # Errors
    ///
    /// A node is corrupt.
    pub fn get<H: PersistentAllocator>(
        &self,
        heap: &H,
        split: &mut Split,
        key: u64,
    ) -> Result<Option<u64>, String> {
        split.time(Phase::Index, || self.get_untimed(heap, key))
    }

    fn get_untimed<H: PersistentAllocator>(
        &self,
        heap: &H,
        key: u64,
    ) -> Result<Option<u64>, String> {
        let mut node = self.root(heap);
        if node == 0 {
            return Ok(None);
        }
        let hidden = hide(key);
        for _ in 0..MAX_HEIGHT {
            check_node(node)?;
            // SAFETY: `node` is a node the tree reaches.
            let (count, leaf) = unsafe { header(heap, node)? };
            if leaf {
                for i in 0..LEAF_CAP {
                    // SAFETY: slot words of the leaf.
                    if unsafe { read_word(heap, node, KEYS_AT + i) } == hidden {
                        // SAFETY: as above.
                        let v = unsafe { read_word(heap, node, VALS_AT + i) };
                        if v != 0 {
                            return Ok(Some(v));
                        }
                    }
                }
                return Ok(None);
            }
            // The first separator above `key`.
            let (mut lo, mut hi) = (0, count - 1);
            while lo < hi {
                let mid = (lo + hi) / 2;
                // SAFETY: a separator word of the node.
                if unhide(unsafe { read_word(heap, node, KEYS_AT + mid) }) <= key {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            // SAFETY: child `lo < count` of the inner node.
            node = unsafe { read_word(heap, node, VALS_AT + lo) };
        }
        Err("B+tree deeper than any tree it builds: corrupt".into())
    }

    /// The path from the root to `key`'s leaf: (node, node contents, index taken).
    fn path<H: PersistentAllocator>(
        &self,
        heap: &H,
        key: u64,
    ) -> Result<Vec<(u64, Node, usize)>, String> {
        let mut path = Vec::new();
        let mut off = self.root(heap);
        while off != 0 {
            if path.len() >= MAX_HEIGHT {
                return Err("B+tree deeper than any tree it builds: corrupt".into());
            }
            check_node(off)?;
            // SAFETY: a node the tree reaches.
            let node = unsafe { load(heap, off)? };
            if node.leaf {
                path.push((off, node, 0));
                break;
            }
            let i = node.child_index(key);
            let next = node.vals[i];
            path.push((off, node, i));
            off = next;
        }
        Ok(path)
    }

    /// Allocates a fresh node in the open transaction, writes `node` into it whole and
    /// flushes it.
    fn fresh<H: PersistentAllocator>(
        heap: &H,
        split: &mut Split,
        log: &mut TxLog,
        node: &Node,
    ) -> Result<u64, String> {
        let (off, bytes) = log.alloc(heap, split, NODE_BYTES)?;
        split.time(Phase::Index, || {
            let image = node.image();
            // SAFETY: a fresh block of `bytes >= NODE_BYTES` bytes, this transaction's.
            unsafe {
                std::ptr::copy_nonoverlapping(image.as_ptr(), heap.at(off).cast(), NODE_WORDS);
                std::ptr::write_bytes(heap.at(off).add(NODE_BYTES), 0, bytes - NODE_BYTES);
            }
        });
        split.flush(heap, heap.at(off), bytes);
        Ok(off)
    }

    /// Stages one word of node `off` (or of the root word, `i = 0`).
    fn stage_word<H: PersistentAllocator>(
        heap: &H,
        split: &mut Split,
        log: &mut TxLog,
        off: u64,
        i: usize,
        value: u64,
    ) -> Result<(), String> {
        log.stage(heap, split, off + 8 * i as u64, &[value], Phase::Index)
    }

    /// Stages a leaf slot and the leaf's count.
    fn stage_slot<H: PersistentAllocator>(
        heap: &H,
        split: &mut Split,
        log: &mut TxLog,
        off: u64,
        leaf: &Node,
        slot: usize,
    ) -> Result<(), String> {
        let (k, v) = (leaf.keys[slot], leaf.vals[slot]);
        Self::stage_word(
            heap,
            split,
            log,
            off,
            KEYS_AT + slot,
            if v != 0 { hide(k) } else { 0 },
        )?;
        Self::stage_word(heap, split, log, off, VALS_AT + slot, v)?;
        Self::stage_word(heap, split, log, off, 0, leaf.header())
    }

    /// Carries `change` of the last node of `path` up through its ancestors (copying each
    /// on write while its shape changes) and into the root word.
    fn propagate<H: PersistentAllocator>(
        &self,
        heap: &H,
        split: &mut Split,
        log: &mut TxLog,
        mut path: Vec<(u64, Node, usize)>,
        mut change: Change,
    ) -> Result<(), String> {
        while let Some((off, mut node, idx)) = path.pop() {
            match change {
                Change::Swap(new) => {
                    return Self::stage_word(heap, split, log, off, VALS_AT + idx, new);
                }
                Change::Split(left, sep, right) => {
                    log.defer_free(FreeKind::Block, off)?;
                    let upper = split.time(Phase::Index, || {
                        node.vals[idx] = left;
                        node.keys.insert(idx, sep);
                        node.vals.insert(idx + 1, right);
                        (node.vals.len() > INNER_CAP).then(|| {
                            let mid = node.vals.len() / 2;
                            let vals = node.vals.split_off(mid);
                            let keys = node.keys.split_off(mid);
                            let sep = node.keys.pop().expect("a separator left of the middle");
                            (
                                Node {
                                    leaf: false,
                                    keys,
                                    vals,
                                },
                                sep,
                            )
                        })
                    });
                    let left = Self::fresh(heap, split, log, &node)?;
                    change = match upper {
                        None => Change::Swap(left),
                        Some((right, sep)) => {
                            Change::Split(left, sep, Self::fresh(heap, split, log, &right)?)
                        }
                    };
                }
                Change::Remove => {
                    log.defer_free(FreeKind::Block, off)?;
                    split.time(Phase::Index, || {
                        node.vals.remove(idx);
                        if !node.keys.is_empty() {
                            node.keys.remove(idx.saturating_sub(1));
                        }
                    });
                    change = if node.vals.is_empty() {
                        Change::Remove
                    } else if path.is_empty() && node.vals.len() == 1 {
                        // A root with one child: the child becomes the root.
                        Change::Swap(node.vals[0])
                    } else {
                        Change::Swap(Self::fresh(heap, split, log, &node)?)
                    };
                }
            }
        }
        let root = match change {
            Change::Swap(new) => new,
            Change::Remove => 0,
            Change::Split(left, sep, right) => {
                let root = Node {
                    leaf: false,
                    keys: vec![sep],
                    vals: vec![left, right],
                };
                Self::fresh(heap, split, log, &root)?
            }
        };
        Self::stage_word(heap, split, log, self.root_word, 0, root)
    }

    /// Sets `key` to `value` (not 0) in the open transaction of `log`, inserting it or
    /// replacing its value; returns the value it replaced. The changes are staged, not
    /// applied: the caller calls [`TxLog::apply`]. A replaced value that is a link is the
    /// caller's to free ([`TxLog::defer_free`]).
    ///
    /// # Errors
    ///
    /// The heap is out of space, the log is full, a node is corrupt; the caller rolls the
    /// transaction back.
    pub fn put<H: PersistentAllocator>(
        &self,
        heap: &H,
        split: &mut Split,
        log: &mut TxLog,
        key: u64,
        value: u64,
    ) -> Result<Option<u64>, String> {
        if value == 0 {
            return Err("B+tree: 0 is not a value".into());
        }
        let mut path = split.time(Phase::Index, || self.path(heap, key))?;
        let Some((leaf_off, mut leaf, _)) = path.pop() else {
            let leaf = Self::fresh(heap, split, log, &Node::leaf_of(&[(key, value)]))?;
            Self::stage_word(heap, split, log, self.root_word, 0, leaf)?;
            return Ok(None);
        };
        enum Step {
            Replace(usize, u64),
            Fill(usize),
            Split(Vec<(u64, u64)>, Vec<(u64, u64)>),
        }
        let step = split.time(Phase::Index, || {
            if let Some(i) = leaf.slot_of(key) {
                let old = leaf.vals[i];
                leaf.vals[i] = value;
                return Step::Replace(i, old);
            }
            if let Some(i) = leaf.vals.iter().position(|&v| v == 0) {
                leaf.keys[i] = key;
                leaf.vals[i] = value;
                return Step::Fill(i);
            }
            let mut all = leaf.sorted_entries();
            let pos = all.partition_point(|&(k, _)| k < key);
            all.insert(pos, (key, value));
            let right = all.split_off(all.len() / 2);
            Step::Split(all, right)
        });
        match step {
            Step::Replace(i, old) => {
                Self::stage_word(heap, split, log, leaf_off, VALS_AT + i, value)?;
                Ok(Some(old))
            }
            Step::Fill(i) => {
                Self::stage_slot(heap, split, log, leaf_off, &leaf, i)?;
                Ok(None)
            }
            Step::Split(left, right) => {
                log.defer_free(FreeKind::Block, leaf_off)?;
                let sep = right[0].0;
                let l = Self::fresh(heap, split, log, &Node::leaf_of(&left))?;
                let r = Self::fresh(heap, split, log, &Node::leaf_of(&right))?;
                self.propagate(heap, split, log, path, Change::Split(l, sep, r))?;
                Ok(None)
            }
        }
    }

    /// Removes `key` in the open transaction of `log` and returns its value (the caller's
    /// to free); frees (at commit) the nodes it empties (see the module documentation).
    ///
    /// # Errors
    ///
    /// The heap is out of space, the log is full, a node is corrupt; the caller rolls the
    /// transaction back.
    pub fn remove<H: PersistentAllocator>(
        &self,
        heap: &H,
        split: &mut Split,
        log: &mut TxLog,
        key: u64,
    ) -> Result<Option<u64>, String> {
        let mut path = split.time(Phase::Index, || self.path(heap, key))?;
        let Some((leaf_off, mut leaf, _)) = path.pop() else {
            return Ok(None);
        };
        let Some(i) = split.time(Phase::Index, || leaf.slot_of(key)) else {
            return Ok(None);
        };
        let old = leaf.vals[i];
        leaf.vals[i] = 0;
        leaf.keys[i] = 0;
        if leaf.count() > 0 {
            Self::stage_slot(heap, split, log, leaf_off, &leaf, i)?;
        } else {
            log.defer_free(FreeKind::Block, leaf_off)?;
            self.propagate(heap, split, log, path, Change::Remove)?;
        }
        Ok(Some(old))
    }

    /// Every (key, value) in key order.
    ///
    /// # Errors
    ///
    /// A node is corrupt.
    pub fn entries<H: PersistentAllocator>(&self, heap: &H) -> Result<Vec<(u64, u64)>, String> {
        let mut out = Vec::new();
        self.walk(heap, &mut |_, node| {
            if node.leaf {
                out.extend(node.sorted_entries());
            }
        })?;
        Ok(out)
    }

    /// Every node's offset.
    ///
    /// # Errors
    ///
    /// A node is corrupt.
    pub fn nodes<H: PersistentAllocator>(&self, heap: &H) -> Result<Vec<u64>, String> {
        let mut out = Vec::new();
        self.walk(heap, &mut |off, _| out.push(off))?;
        Ok(out)
    }

    /// Every node's offset of the tree whose root node is `root` (0: none), for freeing a
    /// tree no root word names any more.
    ///
    /// # Errors
    ///
    /// A node is corrupt.
    pub fn nodes_under<H: PersistentAllocator>(heap: &H, root: u64) -> Result<Vec<u64>, String> {
        let mut out = Vec::new();
        walk_from(heap, root, &mut |off, _| out.push(off))?;
        Ok(out)
    }

    /// Every (key, value) of the tree whose root node is `root` (0: none), for freeing what
    /// a tree no root word names any more links.
    ///
    /// # Errors
    ///
    /// A node is corrupt.
    pub fn entries_under<H: PersistentAllocator>(
        heap: &H,
        root: u64,
    ) -> Result<Vec<(u64, u64)>, String> {
        let mut out = Vec::new();
        walk_from(heap, root, &mut |_, node| {
            if node.leaf {
                out.extend(node.sorted_entries());
            }
        })?;
        Ok(out)
    }

    /// Visits every node, in key order, parents first.
    fn walk<H: PersistentAllocator>(
        &self,
        heap: &H,
        visit: &mut dyn FnMut(u64, &Node),
    ) -> Result<(), String> {
        walk_from(heap, self.root(heap), visit)
    }
}

/// Visits every node under `root`, in key order, parents first.
fn walk_from<H: PersistentAllocator>(
    heap: &H,
    root: u64,
    visit: &mut dyn FnMut(u64, &Node),
) -> Result<(), String> {
    {
        if root == 0 {
            return Ok(());
        }
        let mut stack = vec![(root, 0)];
        let mut seen = 0usize;
        while let Some((off, depth)) = stack.pop() {
            check_node(off)?;
            seen += 1;
            if depth > MAX_HEIGHT || seen > 1 << 32 {
                return Err("B+tree walk: too deep or too many nodes, corrupt".into());
            }
            // SAFETY: a node the tree reaches.
            let node = unsafe { load(heap, off)? };
            visit(off, &node);
            if !node.leaf {
                stack.extend(node.vals.iter().rev().map(|&c| (c, depth + 1)));
            }
        }
        Ok(())
    }
}

/// Writes a node image whole at `off` (tests and bulk builds).
///
/// # Safety
///
/// `off` is a node block only this thread uses.
#[cfg(test)]
unsafe fn store_image<H: PersistentAllocator>(heap: &H, off: u64, image: &[u64; NODE_WORDS]) {
    for (i, &w) in image.iter().enumerate() {
        // SAFETY: the caller's contract.
        unsafe { write_word(heap, off, i, w) };
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use alloclab_pmem::persist::SplitMix64;
    use alloclab_pmem::{PersistentHeap, SimMedium};

    use super::*;

    fn heap() -> PersistentHeap<SimMedium> {
        PersistentHeap::create_on(SimMedium::new(8 << 20), 64).unwrap()
    }

    #[test]
    fn random_puts_and_removes_match_a_btreemap_and_free_every_emptied_node() {
        let heap = heap();
        let mut split = Split::default();
        let (mut log, _) = TxLog::create(&heap, &mut split).unwrap();
        let root_word = heap.offset_of(PersistentAllocator::root(&heap));
        let tree = BTree::new(root_word);
        let mut model = BTreeMap::new();
        let mut rng = SplitMix64::new(7);
        let live0 = heap.stats().live_blocks;
        for round in 0..6000u64 {
            let key = rng.next_u64() % 3000;
            let value = 64 * (1 + rng.next_u64() % 1000);
            if rng.next_u64().is_multiple_of(3) {
                assert_eq!(
                    tree.remove(&heap, &mut split, &mut log, key).unwrap(),
                    model.remove(&key)
                );
            } else {
                assert_eq!(
                    tree.put(&heap, &mut split, &mut log, key, value).unwrap(),
                    model.insert(key, value)
                );
            }
            log.apply(&heap, &mut split);
            for (kind, off) in log.commit(&heap, &mut split) {
                assert_eq!(kind, FreeKind::Block);
                // SAFETY: unlinked by the committed transaction.
                unsafe { PersistentAllocator::release(&heap, off).unwrap() };
            }
            log.frees_done(&heap, &mut split, false);
            if round % 500 == 0 || round > 5990 {
                let entries = tree.entries(&heap).unwrap();
                assert_eq!(
                    entries,
                    model.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>()
                );
                for k in 0..3000 {
                    assert_eq!(
                        tree.get(&heap, &mut split, k).unwrap(),
                        model.get(&k).copied()
                    );
                }
                let nodes = tree.nodes(&heap).unwrap().len() as u64;
                assert_eq!(heap.stats().live_blocks, live0 + nodes, "round {round}");
            }
        }
        // Remove everything: the tree becomes empty and holds no node.
        for k in model.keys() {
            tree.remove(&heap, &mut split, &mut log, *k)
                .unwrap()
                .unwrap();
            log.apply(&heap, &mut split);
            for (_, off) in log.commit(&heap, &mut split) {
                // SAFETY: as above.
                unsafe { PersistentAllocator::release(&heap, off).unwrap() };
            }
            log.frees_done(&heap, &mut split, false);
        }
        assert_eq!(tree.root(&heap), 0);
        assert_eq!(heap.stats().live_blocks, live0);
    }

    #[test]
    fn a_zeroed_node_is_reported_corrupt() {
        let heap = heap();
        let off = PersistentAllocator::allocate_unlinked(&heap, NODE_BYTES).unwrap();
        // SAFETY: our fresh block.
        unsafe { store_image(&heap, off, &[0; NODE_WORDS]) };
        let root_word = heap.offset_of(PersistentAllocator::root(&heap));
        // SAFETY: the root's first word.
        unsafe { write_word(&heap, root_word, 0, off) };
        let tree = BTree::new(root_word);
        assert!(tree.get(&heap, &mut Split::default(), 5).is_err());
        assert!(tree.entries(&heap).is_err());
    }
}
