//! [`Checked`]: a typestate checker that wraps any [`Allocator`].
//!
//! After Permchecker (Cronburg & Guyer, OOPSLA 2021): every block the wrapped allocator
//! hands out carries a typestate in a shadow map, and every operation is checked as a
//! transition between states, so that an allocator bug is reported at the call that
//! commits it, with the offending handle, rather than as a crash much later.
//!
//! ```text
//!                allocate (no overlap, aligned)          deallocate (same layout)
//!   Unallocated ───────────────────────────────▶ Allocated ─────────────────────▶ Freed
//!        ▲                                                                          │
//!        └────────────────────── the address is handed out again ◀──────────────────┘
//! ```
//!
//! Bad transitions and what they are reported as:
//!
//! | transition                                              | [`Violation`]          |
//! |---------------------------------------------------------|------------------------|
//! | allocate returns bytes that are already `Allocated`     | `Overlap`              |
//! | allocate returns an address that breaks the alignment   | `Misaligned`           |
//! | `allocate_zeroed` returns a block with a non-zero byte  | `NotZeroed`            |
//! | deallocate of a `Freed` handle                          | `DoubleFree`           |
//! | deallocate of a handle never handed out                 | `ForeignFree`          |
//! | deallocate with a layout other than the allocation's    | `LayoutMismatch`       |
//! | counters disagree with the shadow ([`Checked::check_stats`]) | `StatsInconsistent` |
//!
//! The shadow is per block, not per byte: a `BTreeMap` of live blocks ordered by address,
//! which answers "does this range overlap a live block" in `O(log n)`. A faulting
//! deallocation is *not* forwarded to the wrapped allocator, so a checked run keeps going
//! without corrupting it.
//!
//! **Concurrency.** The shadow sits behind one mutex (from [`crate::sync`], so loom can
//! check it). A deallocation retires its block from the shadow *before* the wrapped
//! allocator sees it, and an allocation is recorded *after* the wrapped allocator returns,
//! so a block recycled between threads can never be reported as a false overlap; a real
//! overlap is reported by whichever of the two allocations is recorded second.
//!
//! **Cost.** One lock and a few map operations per call, plus memory for every address ever
//! freed and not yet reused. `Checked` is a test tool; it allocates from the global heap, so
//! it cannot itself be the `#[global_allocator]`.

use core::alloc::Layout;
use core::fmt;
use core::ptr::NonNull;
use std::collections::BTreeMap;

use crate::sync::Mutex;
use crate::{AllocError, AllocErrorKind, Allocator, BlockHandle, HostAllocator, Stats};

/// What [`Checked`] does when it finds a violation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// Panic at the faulting call, with the violation as the message.
    #[default]
    Panic,
    /// Record it (see [`Checked::violations`]) and carry on.
    Record,
}

/// A block as the checker saw it handed out: its handle and the layout asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block<H> {
    /// The handle the allocator returned.
    pub handle: H,
    /// The layout it was allocated with.
    pub layout: Layout,
}

/// A bad typestate transition, with everything needed to find the bug.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation<H> {
    /// `allocate` returned a block whose bytes overlap a block that is still live.
    Overlap {
        /// The block just returned.
        new: Block<H>,
        /// The live block it overlaps.
        live: Block<H>,
    },
    /// `allocate` returned a block whose address is not a multiple of the layout's alignment.
    Misaligned {
        /// The misaligned block.
        block: Block<H>,
    },
    /// `allocate_zeroed` returned a block with a non-zero byte.
    NotZeroed {
        /// The block.
        block: Block<H>,
        /// Offset of the first non-zero byte.
        offset: usize,
    },
    /// `deallocate` of a handle that was already freed and not handed out again.
    DoubleFree {
        /// The handle.
        handle: H,
        /// The layout passed to this second deallocation.
        layout: Layout,
        /// The layout the block was allocated with.
        allocated_with: Layout,
    },
    /// `deallocate` of a handle this allocator never handed out (or of an interior address).
    ForeignFree {
        /// The handle.
        handle: H,
        /// The layout passed to the deallocation.
        layout: Layout,
        /// The live block the handle points into, if it is an interior address.
        inside: Option<Block<H>>,
    },
    /// `deallocate` with a layout that differs (in size or alignment) from the allocation's.
    LayoutMismatch {
        /// The handle.
        handle: H,
        /// The layout passed to the deallocation.
        freed_with: Layout,
        /// The layout the block was allocated with.
        allocated_with: Layout,
    },
    /// The allocator's counters disagree with what the checker saw.
    StatsInconsistent {
        /// Which counter.
        counter: &'static str,
        /// What the checker expects (for `live_bytes`: the minimum it may report).
        checker: u64,
        /// What the allocator reports.
        allocator: u64,
    },
}

impl<H: fmt::Debug> fmt::Display for Violation<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lay = |l: &Layout| format!("(size {}, align {})", l.size(), l.align());
        match self {
            Self::Overlap { new, live } => write!(
                f,
                "bad transition Allocated -> Allocated on allocate: new block {:?} {} overlaps live block {:?} {}",
                new.handle,
                lay(&new.layout),
                live.handle,
                lay(&live.layout)
            ),
            Self::Misaligned { block } => write!(
                f,
                "bad allocate: block {:?} is not aligned to {} for layout {}",
                block.handle,
                block.layout.align(),
                lay(&block.layout)
            ),
            Self::NotZeroed { block, offset } => write!(
                f,
                "bad allocate_zeroed: block {:?} {} has a non-zero byte at offset {offset}",
                block.handle,
                lay(&block.layout)
            ),
            Self::DoubleFree {
                handle,
                layout,
                allocated_with,
            } => write!(
                f,
                "bad transition Freed -> Freed on deallocate: double free of {handle:?} {} (allocated with {})",
                lay(layout),
                lay(allocated_with)
            ),
            Self::ForeignFree {
                handle,
                layout,
                inside,
            } => {
                write!(
                    f,
                    "bad transition Unallocated -> Freed on deallocate: {handle:?} {} was never handed out",
                    lay(layout)
                )?;
                if let Some(b) = inside {
                    write!(
                        f,
                        "; it points inside live block {:?} {}",
                        b.handle,
                        lay(&b.layout)
                    )?;
                }
                Ok(())
            }
            Self::LayoutMismatch {
                handle,
                freed_with,
                allocated_with,
            } => write!(
                f,
                "bad deallocate: {handle:?} freed with {} but allocated with {}",
                lay(freed_with),
                lay(allocated_with)
            ),
            Self::StatsInconsistent {
                counter,
                checker,
                allocator,
            } => write!(
                f,
                "inconsistent stats: allocator reports {counter} = {allocator}, checker expects {checker}"
            ),
        }
    }
}

impl<H: fmt::Debug> std::error::Error for Violation<H> {}

/// Where a block ends in the allocator's address space. Zero-size blocks occupy one
/// address, since the handles of two live blocks must still differ.
fn end_of(start: usize, layout: Layout) -> usize {
    start.saturating_add(layout.size().max(1))
}

struct Shadow<H> {
    /// Live blocks keyed by (address, sequence number): the sequence keeps two blocks handed
    /// out at the same address (an allocator bug) apart.
    live: BTreeMap<(usize, u64), Block<H>>,
    /// Blocks freed and not yet handed out again, by address.
    freed: BTreeMap<usize, Block<H>>,
    /// The largest extent of any block seen, which bounds how far back an overlap scan goes
    /// once live blocks may overlap.
    max_extent: usize,
    /// Whether the live blocks are pairwise disjoint (true until an overlap is recorded).
    /// While they are, ends increase with starts, so a scan backwards from an address can
    /// stop at the first block that ends at or before it: `O(log n)` per check.
    disjoint: bool,
    next_seq: u64,
    live_bytes: u64,
    allocations: u64,
    deallocations: u64,
    violations: Vec<Violation<H>>,
}

impl<H: BlockHandle> Shadow<H> {
    /// Records a block the allocator just returned, checking the Unallocated -> Allocated
    /// transition.
    fn record_allocation(&mut self, block: Block<H>) -> Vec<Violation<H>> {
        let mut found = Vec::new();
        let start = block.handle.address();
        let end = end_of(start, block.layout);
        if !start.is_multiple_of(block.layout.align()) {
            found.push(Violation::Misaligned { block });
        }
        for other in self.live_blocks_ending_after(start, end) {
            found.push(Violation::Overlap {
                new: block,
                live: *other,
            });
        }
        if found.iter().any(|v| matches!(v, Violation::Overlap { .. })) {
            self.disjoint = false;
        }
        let reused: Vec<usize> = self.freed.range(start..end).map(|(&a, _)| a).collect();
        for address in reused {
            self.freed.remove(&address);
        }
        self.max_extent = self.max_extent.max(end - start);
        self.live.insert((start, self.next_seq), block);
        self.next_seq += 1;
        self.live_bytes += block.layout.size() as u64;
        self.allocations += 1;
        found
    }

    /// Live blocks that start before `before` and end after `after`, nearest first: with
    /// `before = end, after = start` the blocks overlapping `start..end`; with both equal to
    /// an address, the blocks containing it (other than one starting there).
    fn live_blocks_ending_after(
        &self,
        after: usize,
        before: usize,
    ) -> impl Iterator<Item = &Block<H>> {
        let scan_from = if self.disjoint {
            0
        } else {
            after.saturating_sub(self.max_extent)
        };
        let disjoint = self.disjoint;
        self.live
            .range((scan_from, 0)..(before, 0))
            .rev()
            .map(move |(&(s, _), b)| (end_of(s, b.layout) > after, b))
            .take_while(move |&(overlaps, _)| overlaps || !disjoint)
            .filter(|&(overlaps, _)| overlaps)
            .map(|(_, b)| b)
    }

    /// Retires a block the caller is about to free, checking the Allocated -> Freed
    /// transition. Returns the violation if the block must not reach the allocator.
    fn retire(&mut self, handle: H, layout: Layout) -> Option<Violation<H>> {
        let start = handle.address();
        // Prefer the entry whose layout matches: if a buggy allocator handed the same address
        // out twice, freeing either block correctly must not be reported as a mismatch.
        let mut at_start = self
            .live
            .range((start, 0)..=(start, u64::MAX))
            .filter(|(_, b)| b.handle == handle);
        let key = at_start
            .clone()
            .find(|(_, b)| b.layout == layout)
            .or_else(|| at_start.next())
            .map(|(k, _)| *k);
        let Some(key) = key else {
            if let Some(freed) = self.freed.get(&start).filter(|b| b.handle == handle) {
                return Some(Violation::DoubleFree {
                    handle,
                    layout,
                    allocated_with: freed.layout,
                });
            }
            let inside = self.live_blocks_ending_after(start, start).next().copied();
            return Some(Violation::ForeignFree {
                handle,
                layout,
                inside,
            });
        };
        let block = self.live[&key];
        if block.layout != layout {
            return Some(Violation::LayoutMismatch {
                handle,
                freed_with: layout,
                allocated_with: block.layout,
            });
        }
        self.live.remove(&key);
        self.freed.insert(start, block);
        self.live_bytes -= layout.size() as u64;
        self.deallocations += 1;
        None
    }
}

/// Wraps an allocator and checks every handle it gives out and takes back.
///
/// See the [module documentation](self) for the states, the violations and the cost.
///
/// ```
/// use alloclab_core::{Allocator, Checked, Policy, SystemHeap, Violation};
/// use core::alloc::Layout;
///
/// let heap = Checked::with_policy(SystemHeap::new(), Policy::Record);
/// let layout = Layout::new::<u64>();
/// let a = heap.allocate(layout).unwrap();
/// unsafe { heap.deallocate(a, layout) };
/// unsafe { heap.deallocate(a, layout) }; // caught, and not passed on to malloc
/// assert!(matches!(heap.violations()[0], Violation::DoubleFree { .. }));
/// ```
pub struct Checked<A: Allocator> {
    inner: A,
    policy: Policy,
    /// Counters of the wrapped allocator when it was wrapped; checks compare differences.
    baseline: Stats,
    shadow: Mutex<Shadow<A::Handle>>,
}

// SAFETY: the shadow stores handles only to copy, compare, print them and read their
// address, never to reach the memory they name. `BlockHandle` is an unsafe trait whose
// implementors promise exactly those operations are sound from any thread (handles are plain
// data), so sending or sharing them — which `NonNull` forbids by default — cannot race. The
// shadow itself is behind a mutex, and the wrapped allocator is `Send + Sync` by the
// `Allocator` bound.
unsafe impl<A: Allocator> Send for Checked<A> {}
// SAFETY: as for `Send` above.
unsafe impl<A: Allocator> Sync for Checked<A> {}

impl<A: Allocator> Checked<A> {
    /// Wraps `inner`; violations panic at the faulting call.
    pub fn new(inner: A) -> Self {
        Self::with_policy(inner, Policy::Panic)
    }

    /// Wraps `inner` with the given policy.
    pub fn with_policy(inner: A, policy: Policy) -> Self {
        let baseline = inner.stats();
        Self {
            inner,
            policy,
            baseline,
            shadow: Mutex::new(Shadow {
                live: BTreeMap::new(),
                freed: BTreeMap::new(),
                max_extent: 0,
                disjoint: true,
                next_seq: 0,
                live_bytes: 0,
                allocations: 0,
                deallocations: 0,
                violations: Vec::new(),
            }),
        }
    }

    /// The wrapped allocator.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// Every violation recorded so far (under [`Policy::Record`]).
    pub fn violations(&self) -> Vec<Violation<A::Handle>> {
        self.shadow().violations.clone()
    }

    /// Blocks the checker considers live.
    pub fn live_blocks(&self) -> usize {
        self.shadow().live.len()
    }

    /// Bytes requested by the blocks the checker considers live.
    pub fn live_bytes(&self) -> u64 {
        self.shadow().live_bytes
    }

    /// Compares the wrapped allocator's counters with the shadow. Call it when no operation
    /// is in flight: the allocator's live bytes must be at least the bytes requested by live
    /// blocks, and its allocation/deallocation counts (since wrapping) must match the
    /// checker's. Counters the allocator does not track are skipped.
    ///
    /// # Errors
    ///
    /// The first [`Violation::StatsInconsistent`] found (also recorded, or a panic under
    /// [`Policy::Panic`]).
    pub fn check_stats(&self) -> Result<(), Violation<A::Handle>> {
        let stats = self.inner.stats();
        let (live_bytes, allocations, deallocations) = {
            let s = self.shadow();
            (s.live_bytes, s.allocations, s.deallocations)
        };
        let since =
            |now: Option<u64>, then: Option<u64>| Some(now?.wrapping_sub(then.unwrap_or(0)));
        let mut found = None;
        if let Some(reported) = stats.live_bytes.filter(|&r| r < live_bytes) {
            found = Some(Violation::StatsInconsistent {
                counter: "live_bytes",
                checker: live_bytes,
                allocator: reported,
            });
        } else if let Some(reported) =
            since(stats.allocations, self.baseline.allocations).filter(|&r| r != allocations)
        {
            found = Some(Violation::StatsInconsistent {
                counter: "allocations",
                checker: allocations,
                allocator: reported,
            });
        } else if let Some(reported) =
            since(stats.deallocations, self.baseline.deallocations).filter(|&r| r != deallocations)
        {
            found = Some(Violation::StatsInconsistent {
                counter: "deallocations",
                checker: deallocations,
                allocator: reported,
            });
        }
        match found {
            None => Ok(()),
            Some(v) => {
                self.report(vec![v.clone()]);
                Err(v)
            }
        }
    }

    fn shadow(&self) -> crate::sync::MutexGuard<'_, Shadow<A::Handle>> {
        // A panic under `Policy::Panic` happens after the guard is dropped, so poisoning
        // only follows a panic inside the wrapped allocator; the shadow is still coherent.
        self.shadow.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `found` and, under [`Policy::Panic`], panics with the first one. Must be
    /// called without the shadow lock held.
    fn report(&self, found: Vec<Violation<A::Handle>>) {
        if found.is_empty() {
            return;
        }
        if self.policy == Policy::Panic {
            panic!("Checked<{}>: {}", self.inner.name(), found[0]);
        }
        self.shadow().violations.extend(found);
    }

    fn record_allocation(&self, handle: A::Handle, layout: Layout) {
        let found = self.shadow().record_allocation(Block { handle, layout });
        self.report(found);
    }

    /// Retires `handle`; `false` if it must not be passed to the wrapped allocator.
    fn retire(&self, handle: A::Handle, layout: Layout) -> bool {
        let found = self.shadow().retire(handle, layout);
        let ok = found.is_none();
        self.report(found.into_iter().collect());
        ok
    }
}

impl<A: Allocator> Allocator for Checked<A> {
    type Handle = A::Handle;

    fn allocate(&self, layout: Layout) -> Result<A::Handle, AllocError> {
        let handle = self.inner.allocate(layout)?;
        self.record_allocation(handle, layout);
        Ok(handle)
    }

    /// Checks the transition, then forwards to the wrapped allocator only if it is legal.
    ///
    /// # Safety
    ///
    /// The wrapped allocator's contract, except that handles it never gave out, handles
    /// already freed and wrong layouts are caught rather than undefined behaviour.
    unsafe fn deallocate(&self, handle: A::Handle, layout: Layout) {
        if self.retire(handle, layout) {
            // SAFETY: the shadow confirms `handle` is live with exactly `layout`, and it is
            // now retired so no other caller can free it again through this wrapper.
            unsafe { self.inner.deallocate(handle, layout) }
        }
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

impl<A: HostAllocator> HostAllocator for Checked<A> {
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<u8>, AllocError> {
        let ptr = self.inner.allocate_zeroed(layout)?;
        self.record_allocation(ptr, layout);
        // SAFETY: the block is live and `layout.size()` bytes long.
        let bytes = unsafe { core::slice::from_raw_parts(ptr.as_ptr(), layout.size()) };
        if let Some(offset) = bytes.iter().position(|&b| b != 0) {
            self.report(vec![Violation::NotZeroed {
                block: Block {
                    handle: ptr,
                    layout,
                },
                offset,
            }]);
        }
        Ok(ptr)
    }

    /// Checks the old block as a deallocation and the new one as an allocation.
    ///
    /// # Errors
    ///
    /// [`AllocErrorKind::Other`] if the old block fails the deallocation check (it is then
    /// not passed on); otherwise whatever the wrapped allocator returns, with the old block
    /// still live.
    ///
    /// # Safety
    ///
    /// As [`HostAllocator::reallocate`], with the same leniency as
    /// [`deallocate`](Allocator::deallocate).
    unsafe fn reallocate(
        &self,
        ptr: NonNull<u8>,
        old_layout: Layout,
        new_size: usize,
    ) -> Result<NonNull<u8>, AllocError> {
        let new_layout = crate::resized_layout(old_layout, new_size)?;
        if !self.retire(ptr, old_layout) {
            return Err(AllocError::new(
                old_layout,
                AllocErrorKind::Other("checked: reallocate of a block that is not live"),
            ));
        }
        // SAFETY: the shadow confirmed `ptr` is live with `old_layout`.
        match unsafe { self.inner.reallocate(ptr, old_layout, new_size) } {
            Ok(new_ptr) => {
                self.record_allocation(new_ptr, new_layout);
                Ok(new_ptr)
            }
            Err(e) => {
                // The old block is still live: put it back. It cannot overlap anything,
                // since it was live a moment ago and the allocator did not free it.
                let mut shadow = self.shadow();
                shadow.freed.remove(&ptr.address());
                shadow.deallocations -= 1;
                shadow.allocations -= 1;
                let _ = shadow.record_allocation(Block {
                    handle: ptr,
                    layout: old_layout,
                });
                Err(e)
            }
        }
    }
}

impl<A: Allocator + fmt::Debug> fmt::Debug for Checked<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checked")
            .field("inner", &self.inner)
            .field("policy", &self.policy)
            .field("live_blocks", &self.live_blocks())
            .finish()
    }
}

/// A one-block lock-free allocator for the recycling models below: the block at
/// [`one_slot::ADDRESS`] is taken by a compare-exchange and given back by a release store.
#[cfg(test)]
mod one_slot {
    use core::alloc::Layout;

    use crate::sync::atomic::{AtomicBool, Ordering};
    use crate::{AllocError, AllocErrorKind, Allocator, Stats};

    /// Where the one block lives in the allocator's (offset) address space.
    pub(super) const ADDRESS: usize = 64;
    /// How large the one block is.
    pub(super) const BYTES: usize = 64;

    /// One block, taken or free.
    pub(super) struct OneSlot {
        taken: AtomicBool,
    }

    impl OneSlot {
        pub(super) fn new() -> Self {
            Self {
                taken: AtomicBool::new(false),
            }
        }

        /// Gives the block back without going through [`Allocator::deallocate`], for the
        /// model of a checker that frees before it retires.
        pub(super) fn release(&self) {
            self.taken.store(false, Ordering::Release);
        }
    }

    impl Allocator for OneSlot {
        type Handle = usize;

        fn allocate(&self, layout: Layout) -> Result<usize, AllocError> {
            if layout.size() > BYTES || !ADDRESS.is_multiple_of(layout.align()) {
                return Err(AllocError::new(layout, AllocErrorKind::SizeUnsupported));
            }
            self.taken
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .map(|_| ADDRESS)
                .map_err(|_| AllocError::new(layout, AllocErrorKind::OutOfMemory))
        }

        unsafe fn deallocate(&self, _handle: usize, _layout: Layout) {
            self.release();
        }

        fn name(&self) -> &str {
            "one-slot"
        }

        fn stats(&self) -> Stats {
            Stats::default()
        }
    }
}

/// Model checks of the claim in the module documentation: a block recycled between threads
/// is never reported as a false overlap, because a deallocation retires the block from the
/// shadow before the wrapped allocator sees it and an allocation is recorded after the
/// wrapped allocator returns.
///
/// Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p
/// alloclab-core --lib loom`.
#[cfg(all(test, loom))]
mod loom_tests {
    use core::alloc::Layout;
    use std::sync::Arc as StdArc;
    use std::sync::atomic::{
        AtomicBool as StdAtomicBool, AtomicUsize as StdAtomicUsize, Ordering as StdOrdering,
    };

    use super::one_slot::{ADDRESS, OneSlot};
    use super::{Checked, Policy, Violation};
    use crate::sync::{Arc, model, thread};
    use crate::{AllocError, Allocator, Stats};

    /// The same block, except that `deallocate` does nothing: the caller has already
    /// released it with [`OneSlot::release`] (the wrong order the checker must not use).
    struct ReleasedBeforeRetire(OneSlot);

    impl Allocator for ReleasedBeforeRetire {
        type Handle = usize;

        fn allocate(&self, layout: Layout) -> Result<usize, AllocError> {
            self.0.allocate(layout)
        }

        unsafe fn deallocate(&self, _handle: usize, _layout: Layout) {}

        fn name(&self) -> &str {
            "one-slot-released-before-retire"
        }

        fn stats(&self) -> Stats {
            Stats::default()
        }
    }

    const LAYOUT: Layout = match Layout::from_size_align(32, 8) {
        Ok(l) => l,
        Err(_) => panic!("valid layout"),
    };

    /// What the executions of one model showed, across all of them.
    #[derive(Default)]
    struct Seen {
        executions: StdAtomicUsize,
        /// Executions in which every allocation attempt of both threads got the block.
        all_got_it: StdAtomicUsize,
    }

    /// Two threads each try `rounds` times to allocate the one block and free it at once,
    /// under one `Checked`; every explored execution must end without a violation.
    fn recycle_between_two_threads(rounds: usize) -> Seen {
        let seen = StdArc::new(Seen::default());
        let in_model = StdArc::clone(&seen);
        model(move || {
            in_model.executions.fetch_add(1, StdOrdering::Relaxed);
            let heap = Arc::new(Checked::with_policy(OneSlot::new(), Policy::Record));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let heap = Arc::clone(&heap);
                    thread::spawn(move || {
                        let mut got = 0;
                        for _ in 0..rounds {
                            if let Ok(block) = heap.allocate(LAYOUT) {
                                assert_eq!(block, ADDRESS);
                                got += 1;
                                // SAFETY: `block` was just allocated with `LAYOUT`, freed once.
                                unsafe { heap.deallocate(block, LAYOUT) };
                            }
                        }
                        got
                    })
                })
                .collect();
            let got: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            assert_eq!(heap.violations(), vec![], "blocks got per thread: {got:?}");
            assert_eq!(heap.live_blocks(), 0);
            assert!(got.iter().any(|&n| n > 0), "nobody got the only block");
            if got.iter().all(|&n| n == rounds) {
                in_model.all_got_it.fetch_add(1, StdOrdering::Relaxed);
            }
        });
        StdArc::into_inner(seen).expect("the model is done with it")
    }

    fn assert_explored(seen: &Seen) {
        let executions = seen.executions.load(StdOrdering::Relaxed);
        assert!(executions > 1, "loom explored {executions} execution(s)");
        // Some execution handed the block from one thread to the other.
        assert!(seen.all_got_it.load(StdOrdering::Relaxed) > 0);
        eprintln!("loom explored {executions} executions");
    }

    #[test]
    fn loom_a_block_recycled_between_threads_is_never_a_false_overlap() {
        assert_explored(&recycle_between_two_threads(1));
    }

    #[test]
    fn loom_a_block_recycled_back_and_forth_twice_is_never_a_false_overlap() {
        assert_explored(&recycle_between_two_threads(2));
    }

    /// The negative control: if the block reached the allocator before it was retired from
    /// the shadow, some interleaving would report a recycled block as an overlap — so the
    /// model above is able to see the difference the ordering makes.
    #[test]
    fn loom_releasing_before_retiring_would_report_a_false_overlap() {
        let false_overlap = StdArc::new(StdAtomicBool::new(false));
        let in_model = StdArc::clone(&false_overlap);
        model(move || {
            let heap = Arc::new(Checked::with_policy(
                ReleasedBeforeRetire(OneSlot::new()),
                Policy::Record,
            ));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let heap = Arc::clone(&heap);
                    thread::spawn(move || {
                        if let Ok(block) = heap.allocate(LAYOUT) {
                            // The wrong order: the allocator gets the block back first.
                            heap.inner().0.release();
                            // SAFETY: `block` was allocated with `LAYOUT`; the wrapped
                            // allocator's `deallocate` does nothing.
                            unsafe { heap.deallocate(block, LAYOUT) };
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            if heap
                .violations()
                .iter()
                .any(|v| matches!(v, Violation::Overlap { .. }))
            {
                in_model.store(true, StdOrdering::Relaxed);
            }
        });
        assert!(
            false_overlap.load(StdOrdering::Relaxed),
            "loom found no interleaving in which the wrong order reports an overlap"
        );
    }
}

/// The loom model's scenario with real threads, many times: a block recycled between two
/// threads through a lock-free one-slot allocator is never reported as an overlap.
#[cfg(all(test, not(loom)))]
mod recycle_stress_tests {
    use core::alloc::Layout;
    use std::sync::Barrier;

    use super::one_slot::{ADDRESS, OneSlot};
    use super::{Checked, Policy};
    use crate::Allocator;
    use crate::sync::{Arc, thread};

    #[test]
    fn a_block_recycled_between_real_threads_is_never_a_false_overlap() {
        const ROUNDS: usize = 20;
        const TRIES_PER_THREAD: usize = 25_000;
        let layout = Layout::from_size_align(32, 8).unwrap();
        let mut got_per_thread = [0usize; 2];
        for _ in 0..ROUNDS {
            let heap = Arc::new(Checked::with_policy(OneSlot::new(), Policy::Record));
            let start = Arc::new(Barrier::new(2));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (heap, start) = (Arc::clone(&heap), Arc::clone(&start));
                    thread::spawn(move || {
                        start.wait();
                        let mut got = 0;
                        for _ in 0..TRIES_PER_THREAD {
                            if let Ok(block) = heap.allocate(layout) {
                                assert_eq!(block, ADDRESS);
                                got += 1;
                                // SAFETY: `block` was just allocated with `layout`, freed once.
                                unsafe { heap.deallocate(block, layout) };
                            }
                        }
                        got
                    })
                })
                .collect();
            for (total, t) in got_per_thread.iter_mut().zip(threads) {
                *total += t.join().unwrap();
            }
            assert_eq!(heap.violations(), vec![]);
            assert_eq!(heap.live_blocks(), 0);
        }
        // The block really went back and forth between the threads.
        assert!(
            got_per_thread.iter().all(|&n| n > 0),
            "a thread never got the block: {got_per_thread:?}"
        );
    }
}
