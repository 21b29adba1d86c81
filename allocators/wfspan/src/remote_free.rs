//! Per-span remote-free lists: wait-free multi-producer, single-consumer.
//!
//! A thread that frees a block of a span it does not own pushes the block here; the span's
//! owner takes the whole list with one swap. The push is the paper's non-linearizable
//! two-step:
//!
//! ```text
//!   producer:  node.next = PENDING;  prev = head.swap(node);  node.next = prev;
//!   consumer:  chain = head.swap(null);  walk chain while next != PENDING
//! ```
//!
//! Both sides finish in a bounded number of steps (no CAS retry loop). The price: a producer
//! paused between its swap and its link leaves its node — and everything pushed before it
//! that the consumer has not yet taken — unreachable for a while. The consumer must not hand
//! out such a *stalled* node (the producer is about to write its link word), so it parks it
//! on a list threaded through the node's second word, which producers never touch, and looks
//! again when it next runs dry. Memory stranded this way is bounded by one chain per paused
//! producer.
//!
//! The consumer takes nodes **one at a time** ([`RemoteFreeList::pop`]): from the chain it
//! took last (its *backlog*), else from a parked chain whose link has arrived, else by taking
//! the whole list with one swap. So handing out a remotely freed block costs `O(1)` steps
//! plus a look at each parked chain (at most one per stalled producer) — never a walk of the
//! whole list.
//!
//! Nodes are the freed blocks themselves (every block is at least 16 bytes: two words).
//!
//! Memory ordering: the producer's final `Release` store of `next` pairs with the consumer's
//! `Acquire` load of it, so a consumer that sees a link also sees the node it points to as
//! it was when pushed. The producer's swap (`AcqRel`) pairs with the consumer's swap
//! (`Acquire`) so the consumer sees `PENDING` or the link, never the block's old contents.

use core::ptr;

use alloclab_core::sync::atomic::{AtomicPtr, Ordering};

use crate::hint::prefetch;

/// The first two words of a free block on a remote-free list.
#[repr(C)]
pub struct Node {
    /// Link to the node pushed before this one; [`PENDING`] between the producer's swap and
    /// its link.
    next: AtomicPtr<Node>,
    /// Consumer-only: link in the consumer's deferred list.
    deferred_next: *mut Node,
}

/// The link value of a node whose producer has swapped it in but not yet linked it. Blocks
/// are at least 16-byte aligned, so address 1 is never a node.
pub const PENDING: *mut Node = ptr::without_provenance_mut(1);

impl Node {
    /// A node as it is before being pushed.
    pub fn new() -> Self {
        Self {
            next: AtomicPtr::new(ptr::null_mut()),
            deferred_next: ptr::null_mut(),
        }
    }
}

#[cfg(all(test, loom))]
impl Node {
    /// The link word, for models that emulate the consumer reusing a block.
    pub(crate) fn link_word(&self) -> &AtomicPtr<Node> {
        &self.next
    }
}

impl Default for Node {
    fn default() -> Self {
        Self::new()
    }
}

/// A wait-free MPSC list of free blocks (see the [module documentation](self)).
pub struct RemoteFreeList {
    head: AtomicPtr<Node>,
}

/// The consumer's side of a list: the chain it took and has not handed out yet (its
/// backlog), and the parked nodes whose producers had not linked them yet.
#[derive(Debug)]
pub struct Consumer {
    backlog: *mut Node,
    parked: *mut Node,
    parked_len: usize,
}

impl Consumer {
    /// Nothing taken, nothing parked.
    pub const fn new() -> Self {
        Self {
            backlog: ptr::null_mut(),
            parked: ptr::null_mut(),
            parked_len: 0,
        }
    }

    /// How many stalled chains are parked.
    pub fn parked(&self) -> usize {
        self.parked_len
    }

    /// Pops the backlog's first node if its link has arrived; parks it otherwise.
    ///
    /// # Safety
    ///
    /// Consumer only; backlog nodes were pushed with [`RemoteFreeList::push`].
    #[inline]
    unsafe fn pop_backlog(&mut self, steps: &mut u64) -> *mut Node {
        if self.backlog.is_null() {
            return ptr::null_mut();
        }
        *steps += 1;
        // SAFETY: per the contract, the backlog is a chain of pushed nodes.
        let node = unsafe { take_linked(&mut self.backlog) };
        if node.is_null() {
            // The first node's producer has not linked it yet: park it.
            let stalled = self.backlog;
            // SAFETY: the second word is consumer-only; the producer writes only `next`.
            unsafe { (*stalled).deferred_next = self.parked };
            self.parked = stalled;
            self.parked_len += 1;
            self.backlog = ptr::null_mut();
        }
        node
    }

    /// Lends the backlog out (see [`take_linked`]): the owner keeps it beside its active
    /// span's free list while the span is active, and gives it back with
    /// [`return_backlog`](Self::return_backlog). Leaves the backlog empty.
    pub fn lend_backlog(&mut self) -> *mut Node {
        core::mem::replace(&mut self.backlog, ptr::null_mut())
    }

    /// Takes back a backlog lent with [`lend_backlog`](Self::lend_backlog), after
    /// [`take_linked`] took any number of nodes from its front.
    pub fn return_backlog(&mut self, backlog: *mut Node) {
        debug_assert!(self.backlog.is_null(), "a lent backlog is returned once");
        self.backlog = backlog;
    }

    /// Makes the first parked node whose link has arrived the backlog. Returns whether one
    /// was found; adds a step per parked node looked at.
    ///
    /// # Safety
    ///
    /// Consumer only.
    unsafe fn unpark(&mut self, steps: &mut u64) -> bool {
        let mut prev: *mut Node = ptr::null_mut();
        let mut node = self.parked;
        while !node.is_null() {
            *steps += 1;
            // SAFETY: parked nodes are pushed, not handed out; `deferred_next` is ours.
            unsafe {
                let next_parked = (*node).deferred_next;
                if (*node).next.load(Ordering::Acquire) != PENDING {
                    if prev.is_null() {
                        self.parked = next_parked;
                    } else {
                        (*prev).deferred_next = next_parked;
                    }
                    self.parked_len -= 1;
                    self.backlog = node;
                    return true;
                }
                prev = node;
                node = next_parked;
            }
        }
        false
    }
}

/// Takes the first node of a backlog chain (a chain taken by the consumer's swap, as in
/// [`Consumer`]) if its producer has linked it, advancing `backlog` to the next node: one
/// step, no write to shared memory. Null, and `backlog` unchanged, if the chain is empty or
/// its first node is still [`PENDING`] (the caller must then not hand it out; the
/// [`Consumer`] parks it).
///
/// Also starts loading the next node's line (written by the thread that freed it), which
/// the next take reads.
///
/// # Safety
///
/// Consumer only; `backlog` is null or a chain of nodes pushed with
/// [`RemoteFreeList::push`] and taken by the consumer's swap, none handed out yet.
#[inline]
pub unsafe fn take_linked(backlog: &mut *mut Node) -> *mut Node {
    let node = *backlog;
    if node.is_null() {
        return node;
    }
    // SAFETY: `node` was pushed and not yet handed out: its first word is the atomic link,
    // written by its producer only.
    let next = unsafe { (*node).next.load(Ordering::Acquire) };
    if next == PENDING {
        return ptr::null_mut();
    }
    *backlog = next;
    prefetch(next.cast());
    node
}

impl Default for Consumer {
    fn default() -> Self {
        Self::new()
    }
}

impl RemoteFreeList {
    /// An empty list.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// An empty list.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Pushes a freed block: three stores, no retry. Wait-free, 1 step.
    ///
    /// # Safety
    ///
    /// `node` points to at least two writable, 8-aligned words that nobody else uses until a
    /// consumer hands the node out again.
    #[inline]
    pub unsafe fn push(&self, node: *mut Node) {
        // SAFETY: the caller gives us the node's memory; `next` is its first word, written
        // as an atomic so a consumer may read it concurrently.
        unsafe {
            ptr::addr_of_mut!((*node).next).write(AtomicPtr::new(PENDING));
            let (swap, link) = crate::bug::PUSH_ORDERINGS; // AcqRel, Release
            let prev = self.head.swap(node, swap);
            (*node).next.store(prev, link);
        }
    }

    /// Forgets every node, for a span being reused.
    ///
    /// Only when no push is under way and none will start: every block of the span is back.
    pub fn reset(&self) {
        self.head.store(ptr::null_mut(), Ordering::Relaxed);
    }

    /// Whether the list looks empty (a hint: a push may be under way).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
    }

    /// Whether the consumer could get a node now (a hint: reads the list head relaxed).
    #[inline]
    pub fn has_nodes(&self, consumer: &Consumer) -> bool {
        !consumer.backlog.is_null() || consumer.parked_len > 0 || !self.is_empty()
    }

    /// Takes one freed node: from the backlog, else a parked chain whose link arrived, else
    /// the whole list (one swap). Null if none can be handed out now. Adds its steps to
    /// `steps`: at most `3 + consumer.parked()`.
    ///
    /// The node's link has been read: the caller may reuse its memory at once.
    ///
    /// # Safety
    ///
    /// Only one thread (the owner) pops from this list, always with the same `consumer`,
    /// and every node was pushed with [`push`](Self::push).
    #[inline]
    pub unsafe fn pop(&self, consumer: &mut Consumer, steps: &mut u64) -> *mut Node {
        // SAFETY: (for the whole block) we are the one consumer, per the contract.
        unsafe {
            let node = consumer.pop_backlog(steps);
            if !node.is_null() {
                return node;
            }
            if consumer.parked_len > 0 && consumer.unpark(steps) {
                return consumer.pop_backlog(steps);
            }
            if self.is_empty() {
                return ptr::null_mut();
            }
            *steps += 1;
            consumer.backlog = self.head.swap(ptr::null_mut(), Ordering::Acquire);
            consumer.pop_backlog(steps)
        }
    }

    /// Pops until nothing more can be handed out now, giving each node to `consume`.
    /// Returns the steps taken.
    ///
    /// # Safety
    ///
    /// As [`pop`](Self::pop).
    pub unsafe fn drain(&self, consumer: &mut Consumer, mut consume: impl FnMut(*mut Node)) -> u64 {
        let mut steps = 0;
        loop {
            // SAFETY: per the contract.
            let node = unsafe { self.pop(consumer, &mut steps) };
            if node.is_null() {
                return steps;
            }
            consume(node);
        }
    }
}

impl Default for RemoteFreeList {
    fn default() -> Self {
        Self::new()
    }
}

/// What one remote free's count found ([`ReclaimCounter::remote_free`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// The span has an owner: nothing more to do.
    Owned,
    /// The span was discarded and this free was the last one out: the caller must reclaim
    /// it.
    Last,
    /// The span was discarded and `out` of the remote frees it will see are still to come
    /// (its blocks still out, or frees already taken back whose counts are late).
    Discarded {
        /// Remote frees still to come.
        out: u64,
    },
}

/// Tells the last remote freer of a discarded span that it must reclaim it.
///
/// Every remote free, after its push, counts itself with one `fetch_add`. An owner that
/// discards a span (stops tracking it while blocks are still out) sets the total number of
/// remote frees the span will ever see — those it consumed plus the blocks still out — and
/// raises the `DISCARDED` flag with one RMW. Exactly one party then sees the count reach the
/// target: the owner, if every free already happened, or else the freer whose increment
/// completes it. Both sides are one RMW: wait-free. Until then an owner may take the span
/// back ([`adopt`](ReclaimCounter::adopt)) with one compare-and-swap that fails if any
/// free counted itself in between, so exactly one of "adopted" and "reclaimed" happens.
pub struct ReclaimCounter {
    count: AtomicU64,
    target: AtomicU64,
}

use alloclab_core::sync::atomic::AtomicU64;

const DISCARDED: u64 = 1 << 63;

impl ReclaimCounter {
    /// A counter for a span with no remote frees yet.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            target: AtomicU64::new(0),
        }
    }

    /// A counter for a span with no remote frees yet.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            target: AtomicU64::new(0),
        }
    }

    /// Counts one remote free (after its push) and says what the count found.
    #[inline]
    pub fn remote_free(&self) -> Counted {
        let old = self
            .count
            .fetch_add(crate::bug::REMOTE_FREE_STEP, Ordering::AcqRel); // 1
        if old & DISCARDED == 0 {
            return Counted::Owned;
        }
        // The target was stored before the `Release` half of `discard`'s RMW, and this RMW
        // reads from its release sequence, so the load below sees it.
        let seen = (old & !DISCARDED) + 1;
        let target = self.target.load(Ordering::Relaxed);
        if crate::bug::is_last_free(seen == target, seen, target) {
            Counted::Last
        } else {
            Counted::Discarded {
                out: target.saturating_sub(seen),
            }
        }
    }

    /// Takes a discarded span back for an owner, with one compare-and-swap: succeeds only
    /// while frees are still to come (the count below the target: no free has found itself
    /// the last one, so none is reclaiming the span) and no free counts itself in between.
    /// Then the flag is down with the count kept, every later free counts as a free of an
    /// owned span, none reclaims it, and the caller owns the span with the state its last
    /// owner left (the `Acquire` halves see what that owner wrote before `discard`). A free
    /// that counts itself in between makes it fail; the free that completes the count still
    /// reclaims the span. Wait-free: two loads, one RMW, one load.
    ///
    /// The word seen may be an earlier life's: the span reclaimed, reset, reused and
    /// discarded again with the same count since the first load, or discarded, taken back
    /// and discarded again. The compare-and-swap then takes back the span's current life,
    /// which is as good, if frees are still to come in it; but a discard that found every
    /// free already in (its discarder reclaims the span itself) leaves the same word as one
    /// with frees to come. The target that discard stored before its RMW, seen through the
    /// compare-and-swap, tells them apart, and such a span is left to its reclaimer.
    pub fn adopt(&self) -> bool {
        let word = self.count.load(Ordering::Acquire);
        if word & DISCARDED == 0 {
            return false;
        }
        let seen = word & !DISCARDED;
        // The load above read `discard`'s RMW or a later one: the target is visible.
        if seen >= self.target.load(Ordering::Relaxed) {
            return false;
        }
        if self
            .count
            .compare_exchange(word, word & !DISCARDED, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // The RMW read from the latest discard's: its target is visible.
        seen < self.target.load(Ordering::Relaxed)
    }

    /// Discards the span: it will see `total_remote_frees` remote frees over its life (those
    /// already counted included). Returns `true` if all of them already happened: the caller
    /// must reclaim the span itself. Called once, by the owner.
    pub fn discard(&self, total_remote_frees: u64) -> bool {
        self.target.store(total_remote_frees, Ordering::Relaxed);
        let old = self.count.fetch_or(DISCARDED, Ordering::AcqRel);
        old & !DISCARDED == total_remote_frees
    }

    /// Forgets all counts, for a span being reused. Only by the one party that owns the span.
    pub fn reset(&self) {
        self.count.store(0, Ordering::Relaxed);
        self.target.store(0, Ordering::Relaxed);
    }

    /// Whether the span is discarded, and the remote frees counted (for the loom models).
    #[cfg(test)]
    pub fn state(&self) -> (bool, u64) {
        let word = self.count.load(Ordering::Acquire);
        (word & DISCARDED != 0, word & !DISCARDED)
    }
}

impl Default for ReclaimCounter {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Pops one node, checking the documented bound on its steps.
    fn pop(list: &RemoteFreeList, consumer: &mut Consumer) -> *mut Node {
        let mut steps = 0;
        let bound = 3 + consumer.parked() as u64;
        // SAFETY: this thread is the list's only consumer; every node was pushed.
        let node = unsafe { list.pop(consumer, &mut steps) };
        assert!(steps <= bound, "a pop took {steps} steps, bound {bound}");
        node
    }

    /// A node whose producer stops between its swap and its link (as a paused thread does),
    /// parked by the consumer, holds back the node pushed before it but not those pushed
    /// after; once linked, both come out. When nothing is left, the hints say so.
    #[test]
    fn a_chain_whose_producer_has_not_linked_it_is_parked_until_the_link_arrives() {
        let list = RemoteFreeList::new();
        let mut consumer = Consumer::new();
        let [a, b, c] = [(); 3].map(|()| Box::into_raw(Box::new(Node::new())));
        assert!(list.is_empty() && !list.has_nodes(&consumer));
        // SAFETY: the test's own nodes, each pushed once.
        unsafe { list.push(a) };
        assert!(!list.is_empty() && list.has_nodes(&consumer));
        // `b`'s push stops after its swap: its link word still reads PENDING.
        // SAFETY: as above.
        unsafe { ptr::addr_of_mut!((*b).next).write(AtomicPtr::new(PENDING)) };
        let prev = list.head.swap(b, Ordering::AcqRel);
        assert_eq!(prev, a);

        assert!(
            pop(&list, &mut consumer).is_null(),
            "a node handed out unlinked"
        );
        assert_eq!(consumer.parked(), 1);
        assert!(list.is_empty(), "the chain was taken with one swap");
        assert!(
            list.has_nodes(&consumer),
            "a parked chain still holds nodes"
        );

        // SAFETY: as above.
        unsafe { list.push(c) };
        assert_eq!(
            pop(&list, &mut consumer),
            c,
            "a later push is not held back"
        );
        assert!(pop(&list, &mut consumer).is_null());
        assert_eq!(consumer.parked(), 1);

        // The producer links `b`.
        // SAFETY: `b` is still ours to link, as its producer would.
        unsafe { (*b).next.store(prev, Ordering::Release) };
        assert_eq!(pop(&list, &mut consumer), b);
        assert_eq!(consumer.parked(), 0);
        assert_eq!(pop(&list, &mut consumer), a);
        assert!(pop(&list, &mut consumer).is_null());
        assert!(list.is_empty() && !list.has_nodes(&consumer));
        for node in [a, b, c] {
            // SAFETY: boxed above, handed out, freed once.
            drop(unsafe { Box::from_raw(node) });
        }
    }
}
