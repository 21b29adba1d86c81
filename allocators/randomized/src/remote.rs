//! Frees of another arena's blocks: a lock-free stack per arena, drained by the next thread
//! that takes the arena's lock, and per arena an [`Outbox`] that gathers such frees into
//! chains before they are pushed.
//!
//! A thread freeing a block of an arena it does not hold does not wait for that arena's
//! lock: it marks the block (see `heap::claim_remote`, which also catches a second free of
//! it) and pushes it here, linking through the block's own first payload word. Whoever next
//! takes the arena's lock takes the whole stack with one swap and frees the blocks. Pushes
//! are a compare-and-swap loop (lock-free); the drain is one swap.
//!
//! A thread that holds its own arena's lock instead adds the block to that arena's outbox
//! and pushes a chain of [`OUTBOX_BLOCKS`] blocks (or [`OUTBOX_BYTES`]) with one
//! compare-and-swap: the owner's stack head, its lock and its lists then change hands once
//! per chain rather than once per free (larson, where most frees are of the other thread's
//! blocks, spent 43% of its frees on the owner's lock line). A block waits in an outbox
//! until its chain is full, so at most `OUTBOX_BLOCKS - 1` blocks and fewer than
//! `OUTBOX_BYTES` bytes per pair of arenas are freed late; they stay marked queued, so a
//! second free of one is still caught.
//!
//! Ordering: a push writes the links, then publishes the chain with a release CAS; the
//! drain swaps with acquire, so every link it follows was written before it was published.
//! A chain's links may be written by several threads, each under the outbox's arena lock,
//! whose release and acquire order them before the push.

use alloclab_core::sync::atomic::{AtomicUsize, Ordering};

/// The stack: the most recently pushed block's address, or 0.
#[derive(Debug, Default)]
pub(crate) struct RemoteFrees {
    head: AtomicUsize,
}

impl RemoteFrees {
    /// Pushes `node` (non-zero); `set_next(n)` stores the link to the block below it.
    #[inline]
    pub(crate) fn push(&self, node: usize, set_next: impl Fn(usize)) {
        self.push_chain(node, set_next);
    }

    /// Pushes a chain of blocks already linked to one another, `first` on top;
    /// `set_last_next(n)` stores the link from the chain's last block to the block below it.
    #[inline]
    pub(crate) fn push_chain(&self, first: usize, set_last_next: impl Fn(usize)) {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            set_last_next(head);
            match self
                .head
                .compare_exchange_weak(head, first, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// Whether the stack looks non-empty (a cheap check before [`take_all`](Self::take_all)).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed) == 0
    }

    /// Takes every pushed block; the caller follows the links (0 ends the list).
    #[inline]
    pub(crate) fn take_all(&self) -> usize {
        self.head.swap(0, Ordering::Acquire)
    }
}

/// Blocks an outbox gathers for one arena before it pushes them as a chain ...
pub(crate) const OUTBOX_BLOCKS: u32 = 16;
/// ... or fewer, once they hold this many bytes (a large block goes at once).
pub(crate) const OUTBOX_BYTES: u32 = 16 << 10;

/// One arena's frees of other arenas' blocks, a chain per destination arena, linked through
/// the blocks' first payload words (the newest first). Used only under its arena's lock.
/// All zeros is empty, as the control block is mapped.
#[derive(Debug)]
pub(crate) struct Outbox<const N: usize> {
    /// Each chain's newest block (0: empty).
    first: [usize; N],
    /// Each chain's oldest block, whose link the push sets.
    last: [usize; N],
    /// Blocks in each chain.
    blocks: [u32; N],
    /// Bytes in each chain (block sizes, headers included).
    bytes: [u32; N],
}

impl<const N: usize> Outbox<N> {
    /// An empty outbox.
    #[cfg(test)]
    pub(crate) const fn new() -> Self {
        Self {
            first: [0; N],
            last: [0; N],
            blocks: [0; N],
            bytes: [0; N],
        }
    }

    /// Adds the queued block `node` (non-zero) of `size` bytes to the chain for arena `dest`
    /// (below `N`), linking it with `set_next(node, next)`. When the chain is due, empties
    /// it and returns `(first, last)` for [`RemoteFrees::push_chain`].
    #[inline]
    pub(crate) fn add(
        &mut self,
        dest: usize,
        node: usize,
        size: usize,
        set_next: impl Fn(usize, usize),
    ) -> Option<(usize, usize)> {
        let d = dest % N;
        set_next(node, self.first[d]);
        if self.first[d] == 0 {
            self.last[d] = node;
        }
        self.first[d] = node;
        self.blocks[d] += 1;
        self.bytes[d] = self.bytes[d].saturating_add(u32::try_from(size).unwrap_or(u32::MAX));
        if self.blocks[d] < OUTBOX_BLOCKS && self.bytes[d] < OUTBOX_BYTES {
            return None;
        }
        let chain = (self.first[d], self.last[d]);
        self.first[d] = 0;
        self.last[d] = 0;
        self.blocks[d] = 0;
        self.bytes[d] = 0;
        Some(chain)
    }

    /// Empties every chain, calling `hand_over(dest, first, last)` for each non-empty one.
    pub(crate) fn take_all(&mut self, mut hand_over: impl FnMut(usize, usize, usize)) {
        for d in 0..N {
            if self.first[d] != 0 {
                hand_over(d, self.first[d], self.last[d]);
                self.first[d] = 0;
                self.last[d] = 0;
                self.blocks[d] = 0;
                self.bytes[d] = 0;
            }
        }
    }

    /// Blocks waiting for arena `dest`.
    #[cfg(test)]
    pub(crate) fn waiting(&self, dest: usize) -> u32 {
        self.blocks[dest % N]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain is handed over at the block count or the byte bound, whichever comes first,
    /// holds every block added since the last one, newest first, and leaves that
    /// destination empty; other destinations are untouched.
    #[test]
    fn outbox_hands_over_full_chains_in_order() {
        let links = std::cell::RefCell::new(std::collections::HashMap::new());
        let link = |node: usize, next: usize| {
            links.borrow_mut().insert(node, next);
        };
        let mut outbox = Outbox::<4>::new();
        assert_eq!(outbox.add(2, 1000, 64, link), None);
        for i in 1..OUTBOX_BLOCKS - 1 {
            assert_eq!(outbox.add(1, 16 * i as usize, 32, link), None);
        }
        assert_eq!(outbox.waiting(1), OUTBOX_BLOCKS - 2);
        assert_eq!(outbox.add(1, 4096, 32, link), None);
        let (first, last) = outbox.add(1, 8192, 32, link).expect("a full chain");
        assert_eq!((first, last), (8192, 16));
        // Walk it: newest first, then every earlier block, ending at the oldest.
        let mut walked = vec![first];
        while *walked.last().unwrap() != last {
            walked.push(links.borrow()[walked.last().unwrap()]);
        }
        assert_eq!(walked.len(), OUTBOX_BLOCKS as usize);
        assert_eq!(
            &walked[..3],
            &[8192, 4096, 16 * (OUTBOX_BLOCKS as usize - 2)]
        );
        assert_eq!((outbox.waiting(1), outbox.waiting(2)), (0, 1));
        // The byte bound: a block that brings the chain to exactly the bound sends it at
        // once, with what waited before it.
        assert_eq!(
            outbox.add(2, 2000, OUTBOX_BYTES as usize - 64, link),
            Some((2000, 1000))
        );
        assert_eq!(links.borrow()[&2000], 1000);
        assert_eq!(outbox.waiting(2), 0);
        // Taking everything hands over each non-empty chain once.
        outbox.add(0, 48, 32, link);
        outbox.add(3, 64, 32, link);
        outbox.add(3, 80, 32, link);
        let mut taken = Vec::new();
        outbox.take_all(|dest, first, last| taken.push((dest, first, last)));
        assert_eq!(taken, [(0, 48, 48), (3, 80, 64)]);
        assert_eq!((outbox.waiting(0), outbox.waiting(3)), (0, 0));
        outbox.take_all(|_, _, _| panic!("nothing is left"));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use alloclab_core::sync::{Arc, UnsafeCell, model, thread};

    use super::*;

    /// Blocks as the model sees them: a link and a payload word, plain cells whose accesses
    /// loom checks for races.
    struct Nodes {
        next: [UnsafeCell<usize>; 3],
        payload: [UnsafeCell<usize>; 3],
        stack: RemoteFrees,
    }

    impl Nodes {
        /// Three unlinked blocks and an empty stack.
        fn new() -> Self {
            Nodes {
                next: [UnsafeCell::new(0), UnsafeCell::new(0), UnsafeCell::new(0)],
                payload: [UnsafeCell::new(0), UnsafeCell::new(0), UnsafeCell::new(0)],
                stack: RemoteFrees {
                    head: AtomicUsize::new(0),
                },
            }
        }
    }

    fn push(nodes: &Nodes, i: usize) {
        // SAFETY: node `i` belongs to this thread until it is pushed.
        nodes.payload[i].with_mut(|p| unsafe { *p = 100 + i });
        nodes.stack.push(i + 1, |next| {
            // SAFETY: as above; the link is written before the release CAS publishes it.
            nodes.next[i].with_mut(|n| unsafe { *n = next });
        });
    }

    /// Pops everything and returns the node numbers, checking each payload written before
    /// its push is visible.
    fn drain(nodes: &Nodes) -> Vec<usize> {
        let mut seen = Vec::new();
        let mut node = nodes.stack.take_all();
        while node != 0 {
            let i = node - 1;
            // SAFETY: the acquire swap made the pusher's writes visible; nobody else holds
            // a drained node.
            nodes.payload[i].with(|p| assert_eq!(unsafe { *p }, 100 + i));
            seen.push(i);
            // SAFETY: as above.
            node = nodes.next[i].with(|n| unsafe { *n });
        }
        seen
    }

    /// Two threads push while the owner drains once in the middle: every block comes out
    /// exactly once, with the payload its pusher wrote, and none is lost.
    #[test]
    fn concurrent_pushes_and_a_drain_lose_nothing_and_duplicate_nothing() {
        model(|| {
            let nodes = Arc::new(Nodes::new());
            let pushers: Vec<_> = [0usize, 1]
                .into_iter()
                .map(|i| {
                    let nodes = nodes.clone();
                    thread::spawn(move || push(&nodes, i))
                })
                .collect();
            push(&nodes, 2);
            let mut seen = drain(&nodes);
            for p in pushers {
                p.join().unwrap();
            }
            seen.extend(drain(&nodes));
            seen.sort_unstable();
            assert_eq!(seen, [0, 1, 2]);
        });
    }

    /// An outbox's chain (two blocks linked before the push, as under an arena lock) and a
    /// single block pushed at the same time, with a drain in the middle: every block comes
    /// out once, the chain's second block too, with what its writer stored.
    #[test]
    fn a_pushed_chain_and_a_single_push_lose_nothing() {
        model(|| {
            let nodes = Arc::new(Nodes::new());
            let chain = {
                let nodes = nodes.clone();
                thread::spawn(move || {
                    // SAFETY: nodes 0 and 1 belong to this thread until the chain is pushed.
                    nodes.payload[0].with_mut(|p| unsafe { *p = 100 });
                    nodes.payload[1].with_mut(|p| unsafe { *p = 101 });
                    // Node 0 on top, linked to node 1, the chain's last.
                    nodes.next[0].with_mut(|n| unsafe { *n = 2 });
                    nodes.stack.push_chain(1, |below| {
                        // SAFETY: as above.
                        nodes.next[1].with_mut(|n| unsafe { *n = below });
                    });
                })
            };
            push(&nodes, 2);
            let mut seen = drain(&nodes);
            chain.join().unwrap();
            seen.extend(drain(&nodes));
            seen.sort_unstable();
            assert_eq!(seen, [0, 1, 2]);
        });
    }
}
