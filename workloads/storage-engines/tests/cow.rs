//! The CoW engine against a `BTreeMap` model, on alloclab-pmem over the crash simulator.
//!
//! * functional: seeded random inserts, updates, deletes and reads over thousands of keys
//!   (node splits up to three levels, deletes that empty leaves and shrink the root), with
//!   the whole tree checked against the model and the heap's live blocks against the blocks
//!   the tree reaches (old versions freed after each commit), then a clean reopen;
//! * bad input: updates past a value's end, and inserts the heap has no room for, fail and
//!   change nothing; `create` and `recover` refuse roots that are not what they expect; an
//!   abandoned batch frees its blocks; two partitions of one heap live on two threads;
//! * cost: operations never fence, a commit fences twice, a batch copies each node once;
//! * crash: crash images at every fence of seeded traces (several per fence), each reopened
//!   and recovered: the tree equals the model at the last commit that returned, or, at the
//!   commit's master-record fence, at that commit — nothing lost, nothing resurrected, all
//!   or nothing — and the recovered heap's live blocks are exactly the blocks the tree
//!   reaches (no leak, nothing reachable freed); every eighth image then runs a batch more
//!   and checks again (recovery left a heap that hands out no block the tree uses).
//!
//! Values are drawn so that every aligned word of a tuple is odd (never a block offset),
//! and keys are stored inverted by the engine, so alloclab-pmem's conservative recovery
//! has no false positives and a leak is a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use alloclab_pmem::heap::SLAB_BYTES;
use alloclab_pmem::persist::SplitMix64;
use alloclab_pmem::{PPtr, PersistentHeap, SimMedium};
use alloclab_storage_engines::engines::cow::{Cow, FANOUT, NODE_BYTES, Walk};
use alloclab_storage_engines::{Engine, PersistentAllocator};

type Heap = PersistentHeap<SimMedium>;
type Model = BTreeMap<u64, Vec<u8>>;

const BATCH: usize = <Cow<Heap> as Engine<Heap>>::COMMIT_EVERY;

fn new_heap(bytes: usize) -> Arc<Heap> {
    Arc::new(PersistentHeap::create_on(SimMedium::new(bytes), 128).unwrap())
}

fn root_of(heap: &Heap) -> *mut u8 {
    PersistentAllocator::root(heap)
}

/// The seeded generator of keys, values and operations.
struct Gen {
    rng: SplitMix64,
    /// Keys are drawn from `0..key_space` (spread out), and a few extreme ones.
    key_space: u64,
    max_len: usize,
}

#[derive(Clone, Debug)]
enum Op {
    Read(u64),
    Insert(u64, Vec<u8>),
    Update(u64, usize, Vec<u8>),
    Delete(u64),
}

impl Gen {
    fn new(seed: u64, key_space: u64, max_len: usize) -> Self {
        Gen {
            rng: SplitMix64::new(seed),
            key_space,
            max_len,
        }
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n
    }

    fn key(&mut self) -> u64 {
        if self.below(64) == 0 {
            // Keys whose inverted form is 0, 1, or has the top bit clear.
            [0, u64::MAX, u64::MAX - 1, 1 << 63][self.below(4) as usize]
        } else {
            self.below(self.key_space) * 0x1_0001 + 2
        }
    }

    /// Random bytes whose byte `i` is odd when `(start + i) % 8 == 0`: every aligned word of
    /// a tuple is odd.
    fn bytes(&mut self, start: usize, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| {
                let b = self.rng.next_u64() as u8;
                if (start + i).is_multiple_of(8) {
                    b | 1
                } else {
                    b
                }
            })
            .collect()
    }

    /// An operation with percentages of inserts, updates and deletes (the rest reads).
    fn op(&mut self, model: &Model, insert: u64, update: u64, delete: u64) -> Op {
        let key = self.key();
        let dice = self.below(100);
        if dice < insert {
            let len = self.below(self.max_len as u64 + 1) as usize;
            Op::Insert(key, self.bytes(0, len))
        } else if dice < insert + update {
            let len = model.get(&key).map_or(8, Vec::len);
            let n = self.below(len.min(24) as u64 + 1) as usize;
            let at = self.below((len - n) as u64 + 1) as usize;
            Op::Update(key, at, self.bytes(at, n))
        } else if dice < insert + update + delete {
            Op::Delete(key)
        } else {
            Op::Read(key)
        }
    }
}

/// Applies `op` to the engine and the model; the engine must answer as the model does.
fn apply(cow: &mut Cow<Heap>, model: &mut Model, op: Op) {
    match op {
        Op::Read(key) => {
            let mut out = vec![7];
            let found = cow.read(key, &mut out).unwrap();
            assert_eq!(found, model.contains_key(&key), "read {key}");
            if found {
                assert_eq!(&out, &model[&key], "read {key}");
            }
        }
        Op::Insert(key, value) => {
            let fresh = !model.contains_key(&key);
            assert_eq!(cow.insert(key, &value).unwrap(), fresh, "insert {key}");
            if fresh {
                model.insert(key, value);
            }
        }
        Op::Update(key, at, bytes) => {
            let found = cow.update(key, at, &bytes).unwrap();
            assert_eq!(found, model.contains_key(&key), "update {key}");
            if let Some(v) = model.get_mut(&key) {
                v[at..at + bytes.len()].copy_from_slice(&bytes);
            }
        }
        Op::Delete(key) => {
            let found = cow.delete(key).unwrap();
            assert_eq!(found, model.remove(&key).is_some(), "delete {key}");
        }
    }
}

/// Keys of the model missing from (or different in) `entries`, and keys of `entries`
/// the model lacks.
fn diff(entries: &[(u64, Vec<u8>)], model: &Model) -> (usize, usize) {
    let got: BTreeMap<u64, &Vec<u8>> = entries.iter().map(|(k, v)| (*k, v)).collect();
    let lost = model.iter().filter(|(k, v)| got.get(k) != Some(v)).count();
    let resurrected = got.keys().filter(|k| !model.contains_key(k)).count();
    (lost, resurrected)
}

fn same(entries: &[(u64, Vec<u8>)], model: &Model) -> bool {
    entries.len() == model.len()
        && entries
            .iter()
            .zip(model)
            .all(|((k, v), (mk, mv))| k == mk && v == mv)
}

/// Walks the tree, checks it equals the model, and returns the walk.
fn check_tree(cow: &Cow<Heap>, model: &Model, context: &str) -> Walk {
    let walk = cow.walk().unwrap_or_else(|e| panic!("{context}: {e}"));
    if !same(&walk.entries, model) {
        let (lost, resurrected) = diff(&walk.entries, model);
        panic!("{context}: tree differs from the model: {lost} lost, {resurrected} resurrected");
    }
    walk
}

/// The blocks of `walk` are distinct, live in `heap`, and do not overlap; their bytes.
fn reached_bytes(heap: &Heap, walk: &Walk, context: &str) -> u64 {
    let mut blocks = BTreeMap::new();
    for &b in &walk.blocks {
        let size = heap
            .block_size(PPtr::from_offset(b))
            .unwrap_or_else(|| panic!("{context}: block {b:#x} of the tree is not live"));
        assert!(
            blocks.insert(b, size).is_none(),
            "{context}: {b:#x} twice in the tree"
        );
    }
    let mut end = 0;
    for (&off, &size) in &blocks {
        assert!(
            off >= end,
            "{context}: {off:#x} overlaps a block ending at {end:#x}"
        );
        end = off + size as u64;
    }
    blocks.values().map(|&s| s as u64).sum()
}

/// In a running heap after a commit: the live blocks are exactly the tree's and the
/// partition's spare nodes (live, and none of them in the tree).
fn check_no_leak(heap: &Heap, walk: &Walk, context: &str) {
    reached_bytes(heap, walk, context);
    let tree: BTreeSet<u64> = walk.blocks.iter().copied().collect();
    let spares: BTreeSet<u64> = walk.spares.iter().copied().collect();
    assert_eq!(spares.len(), walk.spares.len(), "{context}: a spare twice");
    for &b in &spares {
        assert!(!tree.contains(&b), "{context}: spare {b:#x} is in the tree");
        assert_eq!(
            heap.block_size(PPtr::from_offset(b)),
            Some(NODE_BYTES),
            "{context}: spare {b:#x} is not a live node block"
        );
    }
    assert_eq!(
        heap.stats().live_blocks,
        (walk.blocks.len() + walk.spares.len()) as u64,
        "{context}: live blocks are not exactly the tree's ({} nodes, {} tuples) and {} spares",
        walk.nodes,
        walk.entries.len(),
        walk.spares.len()
    );
}

/// Reopens the heap from what is durable now and recovers the partition.
fn reopen(heap: &Heap) -> (Arc<Heap>, Cow<Heap>) {
    let image = heap.medium().durable_image();
    let heap = Arc::new(PersistentHeap::open_on(SimMedium::from_image(image)).unwrap());
    let cow = Cow::recover(Arc::clone(&heap), root_of(&heap)).unwrap();
    (heap, cow)
}

#[test]
fn random_operations_match_a_btreemap_model_through_splits_deletes_and_a_clean_reopen() {
    let heap = new_heap(16 << 20);
    let mut cow = Cow::create(Arc::clone(&heap), root_of(&heap)).unwrap();
    let mut model = Model::new();
    let mut g = Gen::new(11, 5_000, 120);
    let mut tallest = 0;
    let mut commits = 0;
    // Grow, churn, shrink: (inserts, updates, deletes) per phase.
    for (phase, &(ins, upd, del, ops)) in [
        (60, 15, 10, 12_000),
        (30, 30, 30, 8_000),
        (10, 20, 60, 8_000),
    ]
    .iter()
    .enumerate()
    {
        for i in 0..ops {
            let op = g.op(&model, ins, upd, del);
            apply(&mut cow, &mut model, op);
            if (i + 1) % BATCH == 0 {
                cow.commit().unwrap();
                commits += 1;
                if commits % 4 == 0 {
                    let walk = check_tree(&cow, &model, &format!("phase {phase} op {i}"));
                    check_no_leak(&heap, &walk, &format!("phase {phase} op {i}"));
                    tallest = tallest.max(walk.height);
                }
            }
        }
    }
    cow.commit().unwrap();
    assert!(
        tallest >= 3,
        "the test never grew a three-level tree ({tallest})"
    );
    let walk = check_tree(&cow, &model, "end");
    check_no_leak(&heap, &walk, "end");
    drop(cow);

    // A clean reopen shows the same tree, and the heap's recovery keeps exactly its blocks.
    let (heap, mut cow) = reopen(&heap);
    let walk = check_tree(&cow, &model, "reopened");
    let bytes = reached_bytes(&heap, &walk, "reopened");
    assert_eq!(heap.recovery().live_blocks, walk.blocks.len() as u64);
    assert_eq!(heap.recovery().live_bytes, bytes);

    // Deleting every key frees every block: nodes emptied, root collapsed, tree empty.
    let keys: Vec<u64> = model.keys().copied().collect();
    for (i, key) in keys.iter().enumerate() {
        assert!(cow.delete(*key).unwrap());
        model.remove(key);
        if i % BATCH == 0 {
            cow.commit().unwrap();
        }
    }
    cow.commit().unwrap();
    let walk = cow.walk().unwrap();
    assert_eq!(
        Walk {
            spares: Vec::new(),
            ..walk.clone()
        },
        Walk::default()
    );
    // Blocks left after deleting everything are the partition's spares only.
    check_no_leak(&heap, &walk, "emptied");
    drop(cow);
    assert_eq!(heap.stats().live_blocks, 0, "dropping left blocks live");
    let (heap, mut cow) = reopen(&heap);
    assert_eq!(heap.recovery().live_blocks, 0);
    assert!(cow.insert(5, b"again").unwrap());
    cow.commit().unwrap();
    let mut out = Vec::new();
    assert!(cow.read(5, &mut out).unwrap());
    assert_eq!(out, b"again");
}

#[test]
fn ascending_and_descending_loads_split_every_level_and_read_back() {
    for descending in [false, true] {
        let heap = new_heap(16 << 20);
        let mut cow = Cow::create(Arc::clone(&heap), root_of(&heap)).unwrap();
        let n = 12_000u64;
        let mut model = Model::new();
        for i in 0..n {
            let key = if descending { n - i } else { i };
            let value = key.to_le_bytes().map(|b| b | 1).to_vec();
            assert!(cow.insert(key, &value).unwrap());
            model.insert(key, value);
            if (i as usize + 1).is_multiple_of(BATCH) {
                cow.commit().unwrap();
            }
        }
        cow.commit().unwrap();
        let walk = check_tree(&cow, &model, "loaded");
        check_no_leak(&heap, &walk, "loaded");
        // 12,000 keys in nodes of at most 31 entries: at least three levels.
        assert!(walk.height >= 3, "height {}", walk.height);
        assert!(walk.nodes * FANOUT >= n as usize);
        let mut out = Vec::new();
        for (key, value) in &model {
            assert!(cow.read(*key, &mut out).unwrap());
            assert_eq!(&out, value);
        }
    }
}

#[test]
fn updates_past_the_end_of_a_value_fail_and_change_nothing() {
    let heap = new_heap(4 << 20);
    let mut cow = Cow::create(Arc::clone(&heap), root_of(&heap)).unwrap();
    let value: Vec<u8> = (0..100u8).map(|b| b | 1).collect();
    assert!(cow.insert(1, &value).unwrap());
    cow.commit().unwrap();
    assert!(cow.insert(2, &value).unwrap()); // Uncommitted: patched in place if updated.
    let (fences, allocations) = (cow.split().fences, heap.stats().allocations);
    for key in [1, 2] {
        let err = cow.update(key, 95, &[1; 10]).unwrap_err();
        assert!(err.contains("past the end"), "{err}");
        assert!(cow.update(key, usize::MAX, &[1]).is_err());
        assert!(cow.update(key, 101, &[]).is_err());
        assert!(cow.update(key, 100, &[]).unwrap()); // An empty range at the end is fine.
        assert!(!cow.insert(key, b"other").unwrap());
        let mut out = Vec::new();
        assert!(cow.read(key, &mut out).unwrap());
        assert_eq!(out, value, "key {key} changed");
    }
    assert!(!cow.update(3, 0, b"x").unwrap());
    assert!(!cow.delete(3).unwrap());
    assert_eq!(
        heap.stats().allocations,
        allocations,
        "a refused call allocated"
    );
    cow.commit().unwrap();
    assert_eq!(cow.split().fences, fences + 2);
    let model = Model::from([(1, value.clone()), (2, value)]);
    drop(cow);
    let (_heap, cow) = reopen(&heap);
    check_tree(&cow, &model, "reopened");
}

#[test]
fn dropping_an_uncommitted_batch_frees_its_blocks_and_keeps_the_last_commit() {
    let heap = new_heap(8 << 20);
    let mut cow = Cow::create(Arc::clone(&heap), root_of(&heap)).unwrap();
    let mut model = Model::new();
    let mut g = Gen::new(8, 2_000, 64);
    for _ in 0..1_000 {
        let op = g.op(&model, 100, 0, 0);
        apply(&mut cow, &mut model, op);
    }
    cow.commit().unwrap();
    let committed = check_tree(&cow, &model, "committed");
    let mut abandoned = model.clone();
    for _ in 0..BATCH - 1 {
        let op = g.op(&abandoned, 40, 30, 30);
        apply(&mut cow, &mut abandoned, op);
    }
    assert_ne!(abandoned, model, "the batch changed nothing");
    drop(cow);
    // The dirty directory and new tuples are freed; the committed tree is all that lives.
    assert_eq!(heap.stats().live_blocks, committed.blocks.len() as u64);
    let cow = Cow::recover(Arc::clone(&heap), root_of(&heap)).unwrap();
    check_no_leak(&heap, &check_tree(&cow, &model, "recovered"), "recovered");
}

#[test]
fn an_insert_the_heap_has_no_room_for_fails_and_changes_nothing() {
    let heap = Arc::new(PersistentHeap::create_on(SimMedium::new(POOL_BYTES), 64).unwrap());
    let mut cow = Cow::create(Arc::clone(&heap), root_of(&heap)).unwrap();
    let mut model = Model::new();
    let value = vec![1u8; 3_000];
    let mut key = 0;
    let err = loop {
        match cow.insert(key, &value) {
            Ok(fresh) => {
                assert!(fresh);
                model.insert(key, value.clone());
                key += 1;
                // Committed: the next insert copies its path before it asks for the
                // tuple, so the failure has node blocks to give back.
                cow.commit().unwrap();
            }
            Err(e) => break e,
        }
        assert!(key < 10_000, "the heap never filled");
    };
    assert!(err.starts_with("cow: "), "{err}");
    let mut out = Vec::new();
    assert!(
        !cow.read(key, &mut out).unwrap(),
        "the failed insert is visible"
    );
    cow.commit().unwrap();
    check_no_leak(&heap, &check_tree(&cow, &model, "full"), "full");
    // A delete frees room that the next insert takes.
    assert!(cow.delete(0).unwrap());
    model.remove(&0);
    cow.commit().unwrap();
    assert!(cow.insert(key, &value).unwrap());
    model.insert(key, value);
    cow.commit().unwrap();
    check_no_leak(&heap, &check_tree(&cow, &model, "refilled"), "refilled");
}

#[test]
fn create_and_recover_refuse_roots_that_are_not_what_they_expect() {
    let heap = new_heap(4 << 20);
    let root = root_of(&heap);
    let err = Cow::recover(Arc::clone(&heap), root).err().unwrap();
    assert!(err.contains("no cow partition"), "{err}");
    assert!(Cow::<Heap>::create(Arc::clone(&heap), std::ptr::null_mut()).is_err());

    let mut cow = Cow::create(Arc::clone(&heap), root).unwrap();
    assert!(cow.insert(9, &[1; 40]).unwrap());
    cow.commit().unwrap();
    drop(cow);
    let err = Cow::create(Arc::clone(&heap), root).err().unwrap();
    assert!(err.contains("not zeroed"), "{err}");
    let mut cow = Cow::recover(Arc::clone(&heap), root).unwrap();
    let mut out = Vec::new();
    assert!(
        cow.read(9, &mut out).unwrap(),
        "create destroyed a partition"
    );
    let tuple = cow.walk().unwrap().blocks[1];
    drop(cow);

    // A master record naming a tuple instead of a node is refused.
    let master = root.cast::<u64>().wrapping_add(1);
    // SAFETY: the partition root's master word; no engine uses the partition now.
    let node = unsafe { master.replace(tuple) };
    let err = Cow::recover(Arc::clone(&heap), root).err().unwrap();
    assert!(err.contains("corrupt"), "{err}");
    // SAFETY: as above.
    unsafe { master.write(node) };
    assert!(Cow::recover(heap, root).is_ok());
}

#[test]
fn operations_never_fence_a_commit_fences_twice_and_a_batch_copies_each_node_once() {
    let heap = new_heap(16 << 20);
    let mut cow = Cow::create(Arc::clone(&heap), root_of(&heap)).unwrap();
    let mut model = Model::new();
    let mut g = Gen::new(5, 3_000, 64);
    while model.len() < 2_000 {
        let op = g.op(&model, 100, 0, 0);
        apply(&mut cow, &mut model, op);
    }
    cow.commit().unwrap();
    for round in 0..20 {
        let before = cow.walk().unwrap();
        let (split, stats) = (cow.split().clone(), heap.stats());
        let keys: Vec<u64> = model
            .iter()
            .filter(|(_, v)| v.len() >= 8)
            .map(|(k, _)| *k)
            .collect();
        let mut updated = BTreeSet::new();
        for _ in 0..BATCH {
            // Mostly neighbours (shared leaves), some repeats (tuples patched in place).
            let key = keys[(round * 97 + g.below(40) as usize) % keys.len()];
            let op = Op::Update(key, 0, g.bytes(0, 8));
            apply(&mut cow, &mut model, op);
            updated.insert(key);
        }
        assert_eq!(cow.split().fences, split.fences, "an operation fenced");
        assert_eq!(cow.split().flushes, split.flushes, "an operation flushed");
        let after = cow.walk().unwrap();
        let old: BTreeSet<u64> = before.blocks[..].iter().copied().collect();
        let copied = after.blocks.iter().filter(|b| !old.contains(b)).count();
        // Every new block of the tree is a node copy or a new tuple; an allocation (or a
        // spare taken) beyond them would be a node copied twice.
        let allocated = heap.stats().allocations - stats.allocations;
        assert_eq!(
            allocated + before.spares.len() as u64 - after.spares.len() as u64,
            copied as u64,
            "round {round}: allocations beyond one copy per node and one tuple per key"
        );
        cow.commit().unwrap();
        assert_eq!(cow.split().fences, split.fences + 2, "round {round}");
        // One flush per new block, one for the master record.
        assert_eq!(cow.split().flushes - split.flushes, copied as u64 + 1);
        assert_eq!(
            heap.stats().frees - stats.frees,
            copied as u64,
            "round {round}: the commit did not free each replaced block"
        );
        check_no_leak(&heap, &check_tree(&cow, &model, "round"), "round");
    }
    // A commit with nothing to commit costs nothing.
    let fences = cow.split().fences;
    cow.commit().unwrap();
    assert_eq!(cow.split().fences, fences);
}

#[test]
fn partitions_of_one_heap_run_on_their_own_threads_and_recover_apart() {
    let heap = new_heap(16 << 20);
    let root = root_of(&heap);
    let part_bytes = <Cow<Heap> as Engine<Heap>>::ROOT_BYTES;
    let engines: Vec<Cow<Heap>> = (0..2)
        .map(|p| Cow::create(Arc::clone(&heap), root.wrapping_add(p * part_bytes)).unwrap())
        .collect();
    let models: Vec<Model> = std::thread::scope(|s| {
        let handles: Vec<_> = engines
            .into_iter()
            .enumerate()
            .map(|(p, mut cow)| {
                s.spawn(move || {
                    let mut model = Model::new();
                    let mut g = Gen::new(100 + p as u64, 2_000, 64);
                    for i in 0..4_000 {
                        let op = g.op(&model, 50, 25, 20);
                        apply(&mut cow, &mut model, op);
                        if (i + 1) % BATCH == 0 {
                            cow.commit().unwrap();
                        }
                    }
                    cow.commit().unwrap();
                    model
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let image = heap.medium().durable_image();
    let heap = Arc::new(PersistentHeap::open_on(SimMedium::from_image(image)).unwrap());
    let root = root_of(&heap);
    let mut blocks = 0;
    for (p, model) in models.iter().enumerate() {
        let cow = Cow::recover(Arc::clone(&heap), root.wrapping_add(p * part_bytes)).unwrap();
        let walk = check_tree(&cow, model, &format!("partition {p}"));
        reached_bytes(&heap, &walk, &format!("partition {p}"));
        blocks += walk.blocks.len() as u64;
    }
    assert_eq!(heap.recovery().live_blocks, blocks);
}

// ---------------------------------------------------------------------------------------
// Crash images.

/// Sixteen slabs of heap, with room for the pool's header, root and metadata.
const POOL_BYTES: usize = 16 * SLAB_BYTES + 32 * 1024;
const IMAGES_PER_FENCE: usize = 4;

#[derive(Debug, Default)]
struct CrashTally {
    images: usize,
    /// Images at a master-record fence that show the new commit.
    new_commits: usize,
    /// Images at a master-record fence that show the old one.
    old_commits: usize,
    /// Images followed by a batch more on the recovered engine.
    continued: usize,
    /// The tallest tree recovered.
    tallest: usize,
    /// Images that recovered an empty tree.
    empty: usize,
}

/// Runs `batches` batches of operations after loading `preload` keys, with `mix(batch)`
/// giving the (insert, update, delete) percentages, capturing crash images at every fence
/// and checking each (see the module documentation).
fn crash_trace(
    seed: u64,
    key_space: u64,
    max_len: usize,
    preload: usize,
    batches: usize,
    mix: impl Fn(usize) -> (u64, u64, u64),
) -> CrashTally {
    let heap = Arc::new(PersistentHeap::create_on(SimMedium::new(POOL_BYTES), 64).unwrap());
    let mut cow = Cow::create(Arc::clone(&heap), root_of(&heap)).unwrap();
    let mut g = Gen::new(seed, key_space, max_len);
    let mut model = Model::new();
    while model.len() < preload {
        let op = g.op(&model, 100, 0, 0);
        apply(&mut cow, &mut model, op);
        if model.len().is_multiple_of(BATCH) {
            cow.commit().unwrap();
        }
    }
    cow.commit().unwrap();
    heap.medium()
        .capture_at_every_fence(IMAGES_PER_FENCE, seed ^ 0xC0_57);
    let mut tally = CrashTally::default();
    for batch in 0..batches {
        let before = model.clone();
        let (ins, upd, del) = mix(batch);
        for _ in 0..BATCH {
            let op = g.op(&model, ins, upd, del);
            apply(&mut cow, &mut model, op);
        }
        cow.commit().unwrap();
        let master_fence = heap.medium().fences();
        for capture in heap.medium().take_captures() {
            let context = format!("seed {seed} batch {batch} fence {}", capture.fence);
            let heap =
                Arc::new(PersistentHeap::open_on(SimMedium::from_image(capture.image)).unwrap());
            let mut recovered = Cow::recover(Arc::clone(&heap), root_of(&heap))
                .unwrap_or_else(|e| panic!("{context}: {e}"));
            let walk = recovered
                .walk()
                .unwrap_or_else(|e| panic!("{context}: {e}"));
            tally.images += 1;
            tally.tallest = tally.tallest.max(walk.height);
            tally.empty += usize::from(walk.entries.is_empty());
            let mut state = if same(&walk.entries, &before) {
                if capture.fence == master_fence {
                    tally.old_commits += 1;
                }
                before.clone()
            } else if capture.fence == master_fence && same(&walk.entries, &model) {
                tally.new_commits += 1;
                model.clone()
            } else {
                let (lost, resurrected) = diff(&walk.entries, &before);
                panic!(
                    "{context}: recovered tree is neither the last commit ({lost} lost, \
                     {resurrected} resurrected against it) nor, at the master fence \
                     {master_fence}, the one in flight"
                );
            };
            let bytes = reached_bytes(&heap, &walk, &context);
            let report = heap.recovery();
            assert_eq!(
                report.live_blocks,
                walk.blocks.len() as u64,
                "{context}: live blocks after recovery are not exactly the tree's"
            );
            assert_eq!(report.live_bytes, bytes, "{context}");
            if tally.images.is_multiple_of(8) {
                tally.continued += 1;
                let mut g = Gen::new(seed ^ tally.images as u64, key_space, max_len);
                for _ in 0..BATCH {
                    let op = g.op(&state, 40, 30, 30);
                    apply(&mut recovered, &mut state, op);
                }
                recovered.commit().unwrap();
                let walk = check_tree(&recovered, &state, &format!("{context}, continued"));
                check_no_leak(&heap, &walk, &format!("{context}, continued"));
            }
        }
    }
    println!("seed {seed}: {tally:?}");
    assert!(
        tally.new_commits > 0 && tally.old_commits > 0,
        "the images never showed both sides of a master switch: {tally:?}"
    );
    tally
}

#[test]
fn crash_images_of_a_growing_tree_show_whole_commits_and_leak_nothing() {
    // From a few keys to a three-level tree: leaf, internal and root splits in flight.
    let tally = crash_trace(1, 1_500, 120, 20, 110, |_| (70, 15, 5));
    assert!(tally.images >= 800, "{tally:?}");
    assert!(tally.tallest >= 3, "{tally:?}");
}

#[test]
fn crash_images_of_a_churning_tree_show_whole_commits_and_leak_nothing() {
    // Updates of committed and new tuples, inserts and deletes in balance.
    let tally = crash_trace(2, 1_200, 120, 700, 110, |_| (30, 40, 30));
    assert!(tally.images >= 800, "{tally:?}");
}

#[test]
fn crash_images_of_a_shrinking_tree_show_whole_commits_and_leak_nothing() {
    // Deletes that empty leaves and internal nodes and collapse the root, then regrowth.
    let tally = crash_trace(3, 900, 120, 800, 110, |b| {
        if b < 80 { (5, 15, 80) } else { (80, 10, 10) }
    });
    assert!(tally.images >= 800, "{tally:?}");
}

#[test]
fn crash_images_of_ycsb_sized_tuples_show_whole_commits_and_leak_nothing() {
    // Values up to 1,000 bytes (tuples of 16 cache lines, each persisted or not on its
    // own), updated a column at a time.
    let tally = crash_trace(4, 300, 1_000, 200, 60, |_| (30, 50, 20));
    assert!(tally.images >= 400, "{tally:?}");
}

#[test]
fn crash_images_of_a_tree_that_empties_and_refills_show_whole_commits_and_leak_nothing() {
    // Sixty keys: a lone leaf that splits in two and merges back by emptying, and commits
    // that empty the whole tree (no node to flush, the master record set to null).
    let tally = crash_trace(5, 60, 120, 0, 80, |b| {
        if b % 4 < 2 { (80, 10, 10) } else { (5, 5, 90) }
    });
    assert!(tally.images >= 400, "{tally:?}");
    assert!(
        tally.empty > 0,
        "no image recovered an empty tree: {tally:?}"
    );
    assert!(tally.tallest >= 2, "{tally:?}");
}
