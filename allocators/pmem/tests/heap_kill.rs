//! Process-kill tests: a child process allocates and frees on a pool file until the parent
//! kills it with SIGKILL at a random moment; the parent reopens the pool and checks it.

mod common;

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use alloclab_pmem::persist::SplitMix64;
use alloclab_pmem::{HeapError, Medium, PPtr, PersistentHeap};
use common::TempPath;

/// Environment variable naming the pool the child works on.
const CHILD_POOL: &str = "ALLOCLAB_PMEM_TEST_HEAP_KILL_POOL";
/// Environment variable with the child's seed.
const CHILD_SEED: &str = "ALLOCLAB_PMEM_TEST_HEAP_KILL_SEED";
const ROOT_SLOTS: usize = 64;

fn slot<M: Medium>(heap: &PersistentHeap<M>, i: usize) -> *mut PPtr<u8> {
    // SAFETY: i < ROOT_SLOTS, inside the root.
    unsafe { heap.root().add(8 * i).cast() }
}

fn field<M: Medium>(heap: &PersistentHeap<M>, node: PPtr<u8>) -> *mut PPtr<u8> {
    heap.resolve(node).unwrap().cast()
}

fn load(p: *mut PPtr<u8>) -> PPtr<u8> {
    // SAFETY: a root slot or a live node's field.
    unsafe { PPtr::load(p) }
}

/// Allocates into `dest` and writes a node: two null fields, odd payload, persisted.
fn alloc_node<M: Medium>(heap: &PersistentHeap<M>, dest: *mut PPtr<u8>, rng: &mut SplitMix64) {
    let size = match rng.next_u64() % 50 {
        0 => 70_000,
        n => 16 + (n as usize * 61) % 3000,
    };
    // SAFETY: `dest` is a null root slot or a null field of a live node; one thread.
    let p = match unsafe { heap.allocate_into(dest, Layout::from_size_align(size, 8).unwrap()) } {
        Ok(p) => p,
        Err(HeapError::OutOfSpace { .. }) => return,
        Err(e) => panic!("{e}"),
    };
    let ptr = heap.resolve(p).unwrap().cast::<u64>();
    for i in 0..size / 8 {
        // SAFETY: inside the block.
        unsafe {
            ptr.add(i)
                .write(if i < 2 { 0 } else { (i as u64) << 1 | 1 })
        };
    }
    heap.persist(ptr.cast(), size / 8 * 8);
}

/// Run by `a_pool_survives_sigkill_at_random_moments` as its child: random allocations and
/// frees (trees of depth two hanging off the root) until killed.
#[test]
#[ignore = "the child of a_pool_survives_sigkill_at_random_moments"]
fn child_allocates_and_frees_until_killed() {
    let Ok(path) = std::env::var(CHILD_POOL) else {
        return;
    };
    let seed = std::env::var(CHILD_SEED).unwrap().parse().unwrap();
    let heap = PersistentHeap::open(&path).unwrap();
    println!("CHILD-READY");
    let mut rng = SplitMix64::new(seed);
    loop {
        let root = slot(&heap, (rng.next_u64() % ROOT_SLOTS as u64) as usize);
        let node = load(root);
        if node.is_null() {
            alloc_node(&heap, root, &mut rng);
            continue;
        }
        let child = field(&heap, node);
        // SAFETY: root slots and fields of live nodes; one thread; only leaves are freed.
        unsafe {
            if !load(child).is_null() {
                heap.free_from(child).unwrap();
            } else if rng.next_u64().is_multiple_of(2) {
                alloc_node(&heap, child, &mut rng);
            } else {
                heap.free_from(root).unwrap();
            }
        }
    }
}

/// Checks the invariants of a reopened pool: reachable blocks are live, disjoint and all
/// the live blocks; new blocks overlap none of them; the heap still allocates and frees.
fn check(heap: &PersistentHeap) -> usize {
    let mut reachable = BTreeMap::new();
    let mut stack: Vec<PPtr<u8>> = (0..ROOT_SLOTS).map(|i| load(slot(heap, i))).collect();
    while let Some(p) = stack.pop() {
        if p.is_null() || p.offset() % 2 == 1 || reachable.contains_key(&p.offset()) {
            continue;
        }
        let size = heap
            .block_size(p)
            .unwrap_or_else(|| panic!("reachable {p:?} is not live"));
        reachable.insert(p.offset(), size);
        let fields = field(heap, p);
        // SAFETY: the first two words of a live block.
        stack.extend([load(fields), load(unsafe { fields.add(1) })]);
    }
    let mut end = 0;
    for (&off, &size) in &reachable {
        assert!(off >= end, "{off:#x} overlaps a block ending at {end:#x}");
        end = off + size as u64;
    }
    assert_eq!(
        heap.recovery().live_blocks,
        reachable.len() as u64,
        "a leak"
    );
    let mut reservations = Vec::new();
    for i in 0..500 {
        let size = [24, 100, 1000, 4000, 70_000][i % 5];
        let Ok(r) = heap.reserve(Layout::from_size_align(size, 8).unwrap()) else {
            continue;
        };
        let lo = r.pptr().offset();
        let below = reachable.range(..lo + r.size() as u64).next_back();
        assert!(
            below.is_none_or(|(&o, &s)| o + s as u64 <= lo),
            "{lo:#x} overlaps {below:?}"
        );
        reservations.push(r);
    }
    drop(reservations);
    // Still usable: allocate into a null root slot and free it.
    if let Some(i) = (0..ROOT_SLOTS).find(|&i| load(slot(heap, i)).is_null()) {
        // SAFETY: a null root slot; one thread.
        unsafe {
            heap.allocate_into(slot(heap, i), Layout::new::<[u64; 4]>())
                .unwrap();
            heap.free_from(slot(heap, i)).unwrap();
        }
    }
    reachable.len()
}

#[test]
fn a_pool_survives_sigkill_at_random_moments() {
    let path = TempPath::new("heap-kill");
    drop(PersistentHeap::create(path.path(), 8 << 20, ROOT_SLOTS * 8).unwrap());
    let mut rng = SplitMix64::new(0x5EED);
    let mut seen = Vec::new();
    for round in 0..6 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_allocates_and_frees_until_killed",
                "--ignored",
                "--nocapture",
            ])
            .env(CHILD_POOL, path.path())
            .env(CHILD_SEED, round.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let ready = stdout
            .lines()
            .any(|line| line.unwrap().contains("CHILD-READY"));
        assert!(ready, "the child never opened the pool");
        std::thread::sleep(Duration::from_millis(20 + rng.next_u64() % 200));
        child.kill().unwrap();
        child.wait().unwrap();
        let heap = PersistentHeap::open(path.path()).unwrap();
        seen.push(check(&heap));
    }
    println!("live blocks after each kill: {seen:?}");
    assert!(seen.iter().any(|&n| n > 0), "the children never allocated");
}
