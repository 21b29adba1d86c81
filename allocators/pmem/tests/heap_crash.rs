//! Crash tests of the persistent heap on the simulator.
//!
//! A seeded random trace builds small linked structures: every node has two pointer
//! fields (words 0 and 1) and odd payload words after them (an odd word is never a block
//! offset, so the conservative scan has no false positives and a leak is a failure). Steps:
//! `allocate_into` a null slot (a root slot or a node's field) then write and persist the
//! node; `free_from` the slot of a leaf; reserve one to three nodes, write them, publish
//! them into null slots; reserve and drop; rewrite a node's payload. The simulator captures
//! crash images at every fence (several per fence, surviving lines drawn at random); each
//! image is reopened with `PersistentHeap::open_on` and checked:
//!
//! * every slot of the model before the step holds its value before the step, or (for the
//!   slots the step changes) its value after: nothing that returned is lost, no nulled
//!   destination comes back, and no slot holds anything else;
//! * the blocks reachable from the root (following the pointer fields) are exactly the
//!   live blocks of the recovered heap (count and bytes: no leak, nothing reachable free),
//!   and they do not overlap;
//! * blocks reserved after recovery (many, on every eighth image until the heap is full)
//!   overlap neither a reachable block nor each other.

use std::alloc::Layout;
use std::collections::{BTreeMap, BTreeSet};

use alloclab_pmem::heap::SLAB_BYTES;
use alloclab_pmem::persist::SplitMix64;
use alloclab_pmem::{HeapError, Medium, PPtr, PersistentHeap, SimMedium};

/// Six slabs of heap with their metadata, header and root.
const POOL_BYTES: usize = 6 * SLAB_BYTES + 8 * 1024;
const ROOT_SLOTS: usize = 32;
const IMAGES_PER_FENCE: usize = 4;
/// Crash images each of the four tests checks at least: 4 × 2,500 = 10,000 over the suite
/// (about 11,000 are taken).
const MIN_IMAGES_PER_TEST: usize = 2_500;

struct Trace {
    heap: PersistentHeap<SimMedium>,
    st: State,
}

/// The model and generator of a trace (apart from its heap, so that reservations may
/// borrow the heap while the model changes).
struct State {
    rng: SplitMix64,
    base: usize,
    root_off: u64,
    /// Slot offset ↦ value: the root slots and both fields of every live node.
    slots: BTreeMap<u64, u64>,
    /// Live node ↦ the slot that holds it.
    nodes: BTreeMap<u64, u64>,
    /// Crash images checked.
    images: usize,
    /// Largest allowed node count (beyond it the trace frees).
    max_nodes: usize,
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

fn word(image: &[u8], off: u64) -> u64 {
    let off = off as usize;
    u64::from_le_bytes(image[off..off + 8].try_into().unwrap())
}

impl Trace {
    fn new(seed: u64, max_nodes: usize) -> Self {
        let heap = PersistentHeap::create_on(SimMedium::new(POOL_BYTES), ROOT_SLOTS * 8).unwrap();
        heap.medium()
            .capture_at_every_fence(IMAGES_PER_FENCE, seed ^ 0xC4A5);
        let root_off = heap.root() as u64 - heap.medium().base() as u64;
        let slots = (0..ROOT_SLOTS as u64)
            .map(|i| (root_off + 8 * i, 0))
            .collect();
        let st = State {
            rng: SplitMix64::new(seed),
            base: heap.medium().base() as usize,
            root_off,
            slots,
            nodes: BTreeMap::new(),
            images: 0,
            max_nodes,
        };
        Self { heap, st }
    }

    /// One random step; checks the crash images of its fences.
    fn step(&mut self) {
        let heap = &self.heap;
        let st = &mut self.st;
        let before = st.slots.clone();
        let leaves: Vec<u64> = st
            .nodes
            .keys()
            .copied()
            .filter(|&n| st.slots[&n] == 0 && st.slots[&(n + 8)] == 0)
            .collect();
        let choice = st.below(10);
        let full = st.nodes.len() >= st.max_nodes;
        if (choice < 3 || full) && !leaves.is_empty() {
            let node = leaves[st.below(leaves.len())];
            let slot = st.nodes[&node];
            // SAFETY: the slot is the root's or a live node's; one thread.
            unsafe { heap.free_from(st.addr(slot).cast()) }.unwrap();
            st.slots.insert(slot, 0);
            st.slots.remove(&node);
            st.slots.remove(&(node + 8));
            st.nodes.remove(&node);
        } else if choice < 7 {
            let nulls = st.null_slots();
            let slot = nulls[st.below(nulls.len())];
            let size = st.size();
            // SAFETY: as above.
            match unsafe { heap.allocate_into(st.addr(slot).cast(), layout(size)) } {
                Ok(p) => {
                    st.add_node(slot, p.offset());
                    st.write_node(heap, p.offset(), size);
                    heap.medium().fence();
                }
                Err(HeapError::OutOfSpace { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        } else if choice < 9 {
            let mut nulls = st.null_slots();
            let k = 1 + st.below(3.min(nulls.len()));
            let mut items = Vec::new();
            for _ in 0..k {
                let size = st.size();
                let Ok(r) = heap.reserve(layout(size)) else {
                    continue;
                };
                let slot = nulls.swap_remove(st.below(nulls.len()));
                st.write_node(heap, r.pptr().offset(), size);
                items.push((st.addr(slot).cast::<PPtr<u8>>(), r));
            }
            if st.below(4) == 0 {
                drop(items); // Reserve and drop.
            } else {
                heap.medium().fence();
                // SAFETY: null slots of the root or live nodes; one thread.
                unsafe { heap.publish(&mut items) };
                for (dest, r) in &items {
                    let slot = *dest as u64 - st.base as u64;
                    st.add_node(slot, r.pptr().offset());
                }
            }
        } else if !st.nodes.is_empty() {
            // Rewrite a node's payload (odd words after its fields).
            let index = st.below(st.nodes.len());
            let node = *st.nodes.keys().nth(index).unwrap();
            let size = 16 + 8 * st.below(7);
            let block = heap.block_size(PPtr::from_offset(node)).unwrap();
            let salt = st.rng.next_u64() | 1;
            for i in 2..size.min(block) / 8 {
                // SAFETY: inside the live node's block.
                unsafe { st.addr(node + 8 * i as u64).cast::<u64>().write(salt) };
            }
            heap.persist(st.addr(node), size.min(block));
        }
        for capture in heap.medium().take_captures() {
            st.check(&before, &capture.image, capture.fence);
        }
    }
}

impl State {
    fn below(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n as u64) as usize
    }

    fn addr(&self, off: u64) -> *mut u8 {
        (self.base + off as usize) as *mut u8
    }

    fn size(&mut self) -> usize {
        match self.below(20) {
            0..=9 => 16 + self.below(49),
            10..=14 => 65 + self.below(64),
            15..=17 => 200 + self.below(57),
            18 => 600 + self.below(425),
            _ => 70_000,
        }
    }

    fn null_slots(&self) -> Vec<u64> {
        self.slots
            .iter()
            .filter(|&(_, &v)| v == 0)
            .map(|(&s, _)| s)
            .collect()
    }

    /// Writes a fresh node at `p` (`size` bytes asked): null fields, odd payload; flushes.
    fn write_node(&mut self, heap: &PersistentHeap<SimMedium>, p: u64, size: usize) {
        let ptr = self.addr(p).cast::<u64>();
        let salt = self.rng.next_u64() | 1;
        for i in 0..size / 8 {
            let value = if i < 2 {
                0
            } else {
                salt.wrapping_add(2 * i as u64)
            };
            // SAFETY: inside the node's block (`size` bytes asked), 8-aligned.
            unsafe { ptr.add(i).write(value) };
        }
        heap.medium().flush(p as usize, size / 8 * 8);
    }

    fn add_node(&mut self, slot: u64, p: u64) {
        self.slots.insert(slot, p);
        self.slots.insert(p, 0);
        self.slots.insert(p + 8, 0);
        self.nodes.insert(p, slot);
    }

    /// Checks one crash image taken during a step that began in state `before` and ended
    /// in `self.slots`.
    fn check(&mut self, before: &BTreeMap<u64, u64>, image: &[u8], fence: u64) {
        self.images += 1;
        for (&slot, &old) in before {
            let got = word(image, slot);
            let new = self.slots.get(&slot).copied();
            assert!(
                got == old || Some(got) == new,
                "fence {fence}: slot {slot:#x} holds {got:#x}, expected {old:#x} or {new:?}"
            );
        }
        let heap = PersistentHeap::open_on(SimMedium::from_image(image.to_vec())).unwrap();
        // Reachable from the root by the pointer fields (odd words are stale payload).
        let mut reachable = BTreeMap::new();
        let mut stack: Vec<u64> = (0..ROOT_SLOTS as u64)
            .map(|i| word(image, self.root_off + 8 * i))
            .collect();
        while let Some(p) = stack.pop() {
            if p == 0 || p % 2 == 1 || reachable.contains_key(&p) {
                continue;
            }
            let size = heap
                .block_size(PPtr::from_offset(p))
                .unwrap_or_else(|| panic!("fence {fence}: reachable {p:#x} is not live"));
            reachable.insert(p, size);
            stack.extend([word(image, p), word(image, p + 8)]);
        }
        let report = heap.recovery();
        assert_eq!(
            report.live_blocks,
            reachable.len() as u64,
            "fence {fence}: live blocks after recovery are not exactly the reachable ones"
        );
        assert_eq!(
            report.live_bytes,
            reachable.values().sum::<usize>() as u64,
            "fence {fence}"
        );
        let mut end = 0;
        for (&off, &size) in &reachable {
            assert!(
                off >= end,
                "fence {fence}: {off:#x} overlaps a block ending at {end:#x}"
            );
            end = off + size as u64;
        }
        // New blocks never overlap reachable ones or each other.
        let exhaust = self.images.is_multiple_of(8);
        let mut taken = BTreeSet::new();
        let mut reservations = Vec::new();
        for _ in 0..if exhaust { usize::MAX } else { 40 } {
            let size = self.size();
            let r = match heap.reserve(layout(size)) {
                Ok(r) => r,
                Err(HeapError::OutOfSpace { .. }) if exhaust && size <= 4096 => break,
                Err(HeapError::OutOfSpace { .. }) => continue,
                Err(e) => panic!("{e}"),
            };
            let (lo, hi) = (r.pptr().offset(), r.pptr().offset() + r.size() as u64);
            let below = reachable.range(..hi).next_back();
            assert!(
                below.is_none_or(|(&o, &s)| o + s as u64 <= lo),
                "fence {fence}: new block {lo:#x} overlaps reachable {below:?}"
            );
            assert!(taken.insert(lo), "fence {fence}: {lo:#x} handed out twice");
            reservations.push(r);
        }
    }
}

fn run(seed: u64, traces: u64, steps: usize, max_nodes: usize) {
    let mut images = 0;
    for t in 0..traces {
        let mut trace = Trace::new(seed * 1000 + t, max_nodes);
        for _ in 0..steps {
            trace.step();
        }
        images += trace.st.images;
    }
    println!("seed {seed}: {images} crash images, no violation");
    assert!(images >= MIN_IMAGES_PER_TEST, "only {images} crash images");
}

#[test]
fn crash_images_of_shallow_structures() {
    run(1, 3, 160, 12);
}

#[test]
fn crash_images_of_bushy_structures() {
    run(2, 3, 160, 40);
}

#[test]
fn crash_images_of_full_heaps() {
    run(3, 3, 160, 200);
}

#[test]
fn crash_images_of_long_traces() {
    run(4, 1, 480, 60);
}
