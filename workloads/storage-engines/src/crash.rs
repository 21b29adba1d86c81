//! A crash test for any [`Engine`] on alloclab-pmem over the crash simulator.
//!
//! [`run_crash_test`] runs a seeded random trace (insert, update, delete and read over a
//! small key space, values of mixed sizes, a few updates past a value's end that must fail
//! and change nothing, a commit every [`Engine::COMMIT_EVERY`] operations) while the
//! simulator captures crash images at every fence (several per fence, the surviving cache
//! lines drawn at random). Every image is reopened ([`PersistentHeap::open_on`]), recovered
//! ([`Engine::recover`]) and read key by key; it must show the state of the last commit
//! before it or, for the transaction in flight, the state after it, whole:
//!
//! * a key whose value differs from both, where the last commit had a value, is a **lost**
//!   committed operation;
//! * a key that shows a value neither state has, where the last commit had none, is
//!   **resurrected** (a deleted or uncommitted key back);
//! * an image whose keys each match one of the states but not all the same one is
//!   **torn** (a transaction half applied).
//!
//! Leaks: where the engine names its blocks ([`Engine::blocks`]), every one of them must be
//! live in the recovered heap, and the heap's live blocks after the engine's recovery
//! beyond them are **leaked**. Every few images the recovered engine also runs a few more
//! operations against the model, so that a recovery that leaves unusable structures fails.

use std::collections::BTreeMap;
use std::sync::Arc;

use alloclab_pmem::persist::SplitMix64;
use alloclab_pmem::{PPtr, PersistentHeap, SimMedium};

use super::{Engine, PersistentAllocator};

/// What [`run_crash_test`] runs.
#[derive(Clone, Debug)]
pub struct CrashTestConfig {
    /// Seeds the trace and the surviving lines.
    pub seed: u64,
    /// Operations in the trace.
    pub ops: usize,
    /// Keys are `0..keys` (spread over the `u64` range by a fixed bijection).
    pub keys: u64,
    /// Crash images taken at each fence.
    pub images_per_fence: usize,
    /// Bytes of the simulated pool.
    pub pool_bytes: usize,
    /// Largest value, in bytes (values are 1..=this, mostly small).
    pub max_value: usize,
    /// Every this many images, the recovered engine runs a few more operations (0: never).
    pub exercise_every: usize,
    /// Keys `0..preload` inserted (and committed) before crash images are taken, so that
    /// the trace runs on a deeper structure.
    pub preload: u64,
}

impl Default for CrashTestConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            ops: 200,
            keys: 48,
            images_per_fence: 3,
            pool_bytes: 1 << 20,
            max_value: 300,
            exercise_every: 16,
            preload: 0,
        }
    }
}

/// What [`run_crash_test`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashTestReport {
    /// Operations run (reads included).
    pub ops: usize,
    /// Commits that returned.
    pub commits: usize,
    /// Fences the trace issued (the heap's and the engine's).
    pub fences: u64,
    /// Crash images reopened, recovered and checked.
    pub images: usize,
    /// (image, key) pairs that lost a committed value.
    pub lost_committed: usize,
    /// (image, key) pairs that show a value no allowed state has where the last commit had
    /// none.
    pub resurrected: usize,
    /// Images that mix the states before and after the transaction in flight.
    pub torn: usize,
    /// Live blocks beyond those the recovered engine reaches, summed over the images.
    pub leaked_blocks: u64,
    /// Images whose recovery, reads or follow-up operations returned an error.
    pub failed_recoveries: usize,
    /// Whether the engine named its blocks, so that leaks were counted.
    pub leaks_checked: bool,
    /// The first few violations, described.
    pub failures: Vec<String>,
}

impl CrashTestReport {
    /// Whether no committed operation was lost, nothing resurrected or torn, nothing leaked.
    pub fn clean(&self) -> bool {
        self.lost_committed == 0
            && self.resurrected == 0
            && self.torn == 0
            && self.leaked_blocks == 0
            && self.failed_recoveries == 0
    }

    fn fail(&mut self, what: String) {
        if self.failures.len() < 10 {
            self.failures.push(what);
        }
    }
}

type Model = BTreeMap<u64, Vec<u8>>;

/// The key the test uses for index `i`: spread over the range (small, large, top bit set),
/// so that engines' key encodings are exercised.
fn key_of(i: u64) -> u64 {
    match i % 4 {
        0 => i,
        1 => i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        2 => u64::MAX - i,
        _ => (1 << 40) + 64 * i,
    }
}

struct Gen {
    rng: SplitMix64,
    keys: u64,
    max_value: usize,
}

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    fn key(&mut self) -> u64 {
        key_of(self.below(self.keys))
    }

    /// Bytes that are all odd, so that no aligned word of a value looks like a block offset
    /// and leaks can be counted exactly.
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| (self.rng.next_u64() as u8) | 1).collect()
    }

    fn value(&mut self) -> Vec<u8> {
        let max = self.max_value as u64;
        let len = match self.below(10) {
            0..=5 => 1 + self.below(56.min(max)),
            6..=8 => 1 + self.below(max.min(250)),
            _ => 1 + self.below(max),
        };
        self.bytes(len as usize)
    }
}

/// Runs one random operation on `engine` and `model`; checks what the engine returns.
fn step<E: Engine<PersistentHeap<SimMedium>>>(
    engine: &mut E,
    model: &mut Model,
    g: &mut Gen,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let key = g.key();
    match g.below(20) {
        0..=6 => {
            let value = g.value();
            let inserted = engine.insert(key, &value)?;
            if inserted == model.contains_key(&key) {
                return Err(format!("insert {key:#x} returned {inserted}"));
            }
            model.entry(key).or_insert(value);
        }
        7..=11 => {
            let len = model.get(&key).map_or(8, Vec::len);
            let at = g.below(len as u64) as usize;
            let n = 1 + g.below((len - at).min(64) as u64) as usize;
            let bytes = g.bytes(n);
            let updated = engine.update(key, at, &bytes)?;
            if updated != model.contains_key(&key) {
                return Err(format!("update {key:#x} returned {updated}"));
            }
            if let Some(v) = model.get_mut(&key) {
                v[at..at + n].copy_from_slice(&bytes);
            }
        }
        12 => {
            // Past the value's end: an error, nothing changes.
            if let Some(len) = model.get(&key).map(Vec::len) {
                let bytes = g.bytes(8);
                if engine.update(key, len.saturating_sub(4), &bytes).is_ok() {
                    return Err(format!("update past the end of {key:#x} succeeded"));
                }
            }
        }
        13..=16 => {
            let deleted = engine.delete(key)?;
            if deleted != model.remove(&key).is_some() {
                return Err(format!("delete {key:#x} returned {deleted}"));
            }
        }
        _ => {
            let found = engine.read(key, out)?;
            if found != model.contains_key(&key) || (found && model[&key] != *out) {
                return Err(format!("read {key:#x} disagrees with the model"));
            }
        }
    }
    Ok(())
}

/// Runs the crash test (see the module documentation) for engine `E`.
///
/// # Errors
///
/// The engine failed outside a crash (an operation's result disagrees with the model, an
/// operation returned an error), or the heap could not be created: a one-line message.
/// What goes wrong with a crash image (a violation, or a recovery, read or later
/// operation that fails) is counted in the report instead.
pub fn run_crash_test<E: Engine<PersistentHeap<SimMedium>>>(
    cfg: &CrashTestConfig,
) -> Result<CrashTestReport, String> {
    let heap = PersistentHeap::create_on(SimMedium::new(cfg.pool_bytes), E::ROOT_BYTES.max(64))
        .map_err(|e| format!("crash test: {e}"))?;
    let heap = Arc::new(heap);
    let mut engine = E::create(Arc::clone(&heap), PersistentAllocator::root(&*heap))?;
    let mut g = Gen {
        rng: SplitMix64::new(cfg.seed),
        keys: cfg.keys,
        max_value: cfg.max_value,
    };
    let mut committed = Model::new();
    for i in 0..cfg.preload.min(cfg.keys) {
        let value = g.value();
        if !engine.insert(key_of(i), &value)? {
            return Err(format!("{}: preload: key {i} exists", E::NAME));
        }
        committed.insert(key_of(i), value);
        if (i + 1) % E::COMMIT_EVERY as u64 == 0 {
            engine.commit()?;
        }
    }
    engine.commit()?;
    heap.medium()
        .capture_at_every_fence(cfg.images_per_fence, cfg.seed ^ 0x5EED_C4A5);
    let fences0 = heap.medium().fences();
    let mut report = CrashTestReport::default();
    let mut current = committed.clone();
    let mut captures = Vec::new();
    let mut out = Vec::new();
    let mut in_txn = 0;
    for i in 0..cfg.ops {
        step(&mut engine, &mut current, &mut g, &mut out)
            .map_err(|e| format!("{}: op {i}: {e}", E::NAME))?;
        report.ops += 1;
        in_txn += 1;
        captures.extend(heap.medium().take_captures());
        if in_txn == E::COMMIT_EVERY || i + 1 == cfg.ops {
            engine
                .commit()
                .map_err(|e| format!("{}: commit after op {i}: {e}", E::NAME))?;
            report.commits += 1;
            in_txn = 0;
            captures.extend(heap.medium().take_captures());
            for c in captures.drain(..) {
                let r = check_image::<E>(
                    cfg,
                    &c.image,
                    c.fence,
                    &committed,
                    &current,
                    &mut g,
                    &mut report,
                );
                if let Err(e) = r {
                    report.failed_recoveries += 1;
                    report.fail(e);
                }
            }
            committed.clone_from(&current);
            if let Some(blocks) = engine.blocks()? {
                let live = heap.stats().live_blocks;
                if live != blocks.len() as u64 {
                    return Err(format!(
                        "{}: after op {i}: {live} live blocks, the engine names {}",
                        E::NAME,
                        blocks.len()
                    ));
                }
            }
        }
    }
    report.fences = heap.medium().fences() - fences0;
    Ok(report)
}

/// Reopens, recovers and checks one crash image taken in a transaction that began at
/// `before` and ends at `after`.
fn check_image<E: Engine<PersistentHeap<SimMedium>>>(
    cfg: &CrashTestConfig,
    image: &[u8],
    fence: u64,
    before: &Model,
    after: &Model,
    g: &mut Gen,
    report: &mut CrashTestReport,
) -> Result<(), String> {
    report.images += 1;
    let heap = PersistentHeap::open_on(SimMedium::from_image(image.to_vec()))
        .map_err(|e| format!("{}: fence {fence}: heap recovery: {e}", E::NAME))?;
    let heap = Arc::new(heap);
    let mut engine = E::recover(Arc::clone(&heap), PersistentAllocator::root(&*heap))
        .map_err(|e| format!("{}: fence {fence}: engine recovery: {e}", E::NAME))?;
    let mut seen = Model::new();
    let mut out = Vec::new();
    for i in 0..cfg.keys {
        let key = key_of(i);
        if engine.read(key, &mut out)? {
            seen.insert(key, out.clone());
        }
    }
    if seen != *before && seen != *after {
        let mut mixed = true;
        for i in 0..cfg.keys {
            let key = key_of(i);
            let (got, b, a) = (seen.get(&key), before.get(&key), after.get(&key));
            if got == b || got == a {
                continue;
            }
            mixed = false;
            if b.is_some() {
                report.lost_committed += 1;
                report.fail(format!(
                    "fence {fence}: key {key:#x} lost its committed value"
                ));
            } else {
                report.resurrected += 1;
                report.fail(format!(
                    "fence {fence}: key {key:#x} shows a value never committed"
                ));
            }
        }
        if mixed {
            report.torn += 1;
            report.fail(format!("fence {fence}: a transaction is half applied"));
        }
    }
    if let Some(mut blocks) = engine.blocks()? {
        report.leaks_checked = true;
        blocks.sort_unstable();
        let named = blocks.len();
        blocks.dedup();
        if blocks.len() != named {
            return Err(format!(
                "{}: fence {fence}: the engine names a block twice",
                E::NAME
            ));
        }
        if let Some(b) = blocks
            .iter()
            .find(|&&b| heap.block_size(PPtr::from_offset(b)).is_none())
        {
            return Err(format!(
                "{}: fence {fence}: the engine reaches {b:#x}, which is free",
                E::NAME
            ));
        }
        let live = heap.stats().live_blocks;
        let leaked = live.saturating_sub(blocks.len() as u64);
        if leaked > 0 {
            report.leaked_blocks += leaked;
            // Name them: every live block start the engine does not name.
            let strays: Vec<String> = (0..cfg.pool_bytes as u64)
                .step_by(64)
                .filter(|&off| heap.block_size(PPtr::from_offset(off)).is_some())
                .filter(|off| blocks.binary_search(off).is_err())
                .map(|off| format!("{off:#x}"))
                .collect();
            report.fail(format!(
                "fence {fence}: {leaked} blocks leaked: {}",
                strays.join(" ")
            ));
        }
    }
    if cfg.exercise_every > 0 && report.images.is_multiple_of(cfg.exercise_every) {
        let mut model = seen;
        for _ in 0..2 * E::COMMIT_EVERY.max(4) {
            step(&mut engine, &mut model, g, &mut out)
                .map_err(|e| format!("{}: fence {fence}: after recovery: {e}", E::NAME))?;
        }
        engine.commit()?;
        for (k, v) in &model {
            if !engine.read(*k, &mut out)? || out != *v {
                return Err(format!(
                    "{}: fence {fence}: after recovery, key {k:#x} is wrong",
                    E::NAME
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Split;

    /// An engine with no crash consistency at all: keys and tuple offsets in root slots,
    /// stored in place with no log, flush or fence; deletes free at once. The crash test
    /// must catch it.
    struct Careless {
        heap: Arc<PersistentHeap<SimMedium>>,
        slots: *mut u64,
        split: Split,
    }

    // SAFETY: the raw pointer is into the heap the engine owns an `Arc` of; one thread.
    unsafe impl Send for Careless {}

    const SLOTS: usize = 64;

    impl Careless {
        fn slot(&self, key: u64) -> Option<usize> {
            // SAFETY: slot words of the root (SLOTS pairs).
            (0..SLOTS).find(|&i| unsafe { *self.slots.add(2 * i) } == crate::engines::hide(key))
        }
    }

    impl Engine<PersistentHeap<SimMedium>> for Careless {
        const NAME: &'static str = "careless";
        const ROOT_BYTES: usize = 16 * SLOTS;
        const COMMIT_EVERY: usize = 1;

        fn create(heap: Arc<PersistentHeap<SimMedium>>, root: *mut u8) -> Result<Self, String> {
            Ok(Self {
                heap,
                slots: root.cast(),
                split: Split::default(),
            })
        }

        fn recover(heap: Arc<PersistentHeap<SimMedium>>, root: *mut u8) -> Result<Self, String> {
            Self::create(heap, root)
        }

        fn read(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, String> {
            let Some(i) = self.slot(key) else {
                return Ok(false);
            };
            // SAFETY: the slot's tuple.
            let off = unsafe { *self.slots.add(2 * i + 1) };
            if self.heap.block_size(PPtr::from_offset(off)).is_none() {
                return Ok(false);
            }
            // SAFETY: a live block of ours.
            unsafe { crate::engines::read_tuple(&*self.heap, &mut self.split, off, out) }?;
            Ok(true)
        }

        fn insert(&mut self, key: u64, value: &[u8]) -> Result<bool, String> {
            if self.slot(key).is_some() {
                return Ok(false);
            }
            // SAFETY: slot words of the root.
            let i = (0..SLOTS)
                .find(|&i| unsafe { *self.slots.add(2 * i + 1) } == 0)
                .ok_or("full")?;
            let size = self.heap.usable_size(8 + value.len());
            let off = PersistentAllocator::allocate_unlinked(&*self.heap, size)?;
            // SAFETY: a fresh block; root slot words.
            unsafe {
                crate::engines::write_tuple(&*self.heap, &mut self.split, off, size, &[value]);
                *self.slots.add(2 * i) = crate::engines::hide(key);
                *self.slots.add(2 * i + 1) = off;
            }
            Ok(true)
        }

        fn update(&mut self, key: u64, at: usize, bytes: &[u8]) -> Result<bool, String> {
            let Some(i) = self.slot(key) else {
                return Ok(false);
            };
            // SAFETY: the slot's tuple.
            let off = unsafe { *self.slots.add(2 * i + 1) };
            // SAFETY: a live tuple of ours.
            let len = unsafe { crate::engines::tuple_len(&*self.heap, off) };
            crate::engines::check_range(at, bytes.len(), len)?;
            // SAFETY: inside the tuple.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.heap.at(off).add(8 + at),
                    bytes.len(),
                )
            };
            Ok(true)
        }

        fn delete(&mut self, key: u64) -> Result<bool, String> {
            let Some(i) = self.slot(key) else {
                return Ok(false);
            };
            // SAFETY: slot words; the block is ours and unlinked (not durably: careless).
            unsafe {
                let off = *self.slots.add(2 * i + 1);
                *self.slots.add(2 * i) = 0;
                *self.slots.add(2 * i + 1) = 0;
                PersistentAllocator::release(&*self.heap, off)?;
            }
            Ok(true)
        }

        fn commit(&mut self) -> Result<(), String> {
            Ok(())
        }

        fn split(&self) -> &Split {
            &self.split
        }
    }

    #[test]
    fn an_engine_without_crash_consistency_is_caught() {
        let cfg = CrashTestConfig {
            ops: 150,
            keys: 24,
            exercise_every: 0,
            ..CrashTestConfig::default()
        };
        // The careless engine issues no fence: its crash images come from the heap's own
        // fences (a slab assigned to a size class), few but enough to show the losses.
        let report = run_crash_test::<Careless>(&cfg).unwrap();
        println!("{report:?}");
        assert!(report.images > 0, "no crash image was taken");
        assert!(
            !report.clean(),
            "lost committed operations went unnoticed: {report:?}"
        );
        assert!(report.lost_committed > 0);
    }
}
