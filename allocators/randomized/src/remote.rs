//! Frees that found their arena busy: a lock-free stack per arena, drained by the next
//! thread that takes the arena's lock.
//!
//! A thread freeing a block of an arena another thread holds does not wait for the lock: it
//! marks the block (see `heap::claim_remote`, which also catches a second free of it) and
//! pushes it here, linking through the block's own first payload word. Whoever next takes
//! the arena's lock to allocate takes the whole stack with one swap and frees the blocks.
//! Pushes are a compare-and-swap loop (lock-free); the drain is one swap.
//!
//! Ordering: a push writes the link, then publishes the block with a release CAS; the drain
//! swaps with acquire, so every link it follows was written before it was published.

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
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            set_next(head);
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed)
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
            let nodes = Arc::new(Nodes {
                next: [UnsafeCell::new(0), UnsafeCell::new(0), UnsafeCell::new(0)],
                payload: [UnsafeCell::new(0), UnsafeCell::new(0), UnsafeCell::new(0)],
                stack: RemoteFrees {
                    head: AtomicUsize::new(0),
                },
            });
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
}
