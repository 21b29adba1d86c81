//! The allocator's one word of state: the address of its control block, with a lock bit.
//!
//! ```text
//!   63                                   1   0
//!  +--------------------------------------+---+
//!  | address of the control block (or 0)   | L |
//!  +--------------------------------------+---+
//! ```
//!
//! The control block sits at the start of the heap's first chunk, which is aligned to the
//! chunk size, so bit 0 of its address is free for the lock. Zero means "no heap yet": the
//! first thread to take the lock maps the first chunk, and publishes its address when it
//! unlocks. Everything else the allocator knows (free lists, the generator, the key that
//! signs headers, the chunk table) lives in band, in the memory it manages.
//!
//! The same type is the lock of each arena (there the payload bits are unused), so that the
//! model below checks the lock every heap operation takes.
//!
//! Locking is a test-and-test-and-set spin lock: spin with exponential backoff on a plain
//! load (so waiting threads share the line instead of bouncing it), then yield the CPU to a
//! holder that may have been descheduled. Acquire on lock, release on unlock: everything
//! the holder wrote to the heap is visible to the next holder.

use alloclab_core::sync::atomic::{AtomicUsize, Ordering};
use alloclab_core::sync::{spin_loop, yield_now};

/// The lock bit.
const LOCKED: usize = 1;

/// Spins (doubling each time) before a waiter starts yielding its time slice.
const SPIN_LIMIT: u32 = 6;

/// The state word.
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct StateWord(AtomicUsize);

impl StateWord {
    /// An unlocked word with no heap behind it.
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Self {
        Self(AtomicUsize::new(0))
    }

    /// An unlocked word with no heap behind it.
    #[cfg(loom)]
    pub(crate) fn new() -> Self {
        Self(AtomicUsize::new(0))
    }

    /// Takes the lock, and returns the control block's address (0 if there is no heap yet:
    /// the caller then builds it and passes its address to [`unlock`](Self::unlock)).
    #[inline]
    pub(crate) fn lock(&self) -> usize {
        let mut seen = self.0.load(Ordering::Relaxed);
        let mut round = 0u32;
        loop {
            if seen & LOCKED == 0 {
                match self.0.compare_exchange_weak(
                    seen,
                    seen | LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return seen,
                    Err(now) => {
                        seen = now;
                        continue;
                    }
                }
            }
            if round < SPIN_LIMIT {
                for _ in 0..(1u32 << round) {
                    spin_loop();
                }
                round += 1;
            } else {
                yield_now();
            }
            seen = self.0.load(Ordering::Relaxed);
        }
    }

    /// Releases the lock taken by [`lock`](Self::lock), publishing `root` (the address
    /// `lock` returned, or the one just built).
    #[inline]
    pub(crate) fn unlock(&self, root: usize) {
        debug_assert_eq!(root & LOCKED, 0);
        self.0.store(root, Ordering::Release);
    }

    /// The control block's address as last published (0 if none), without locking: for a
    /// heap that is exclusively owned (`&mut`), or a racy look.
    pub(crate) fn root(&self) -> usize {
        self.0.load(Ordering::Acquire) & !LOCKED
    }

    /// Takes the lock if it is free now; returns what [`lock`](Self::lock) would.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<usize> {
        let seen = self.0.load(Ordering::Relaxed);
        if seen & LOCKED != 0 {
            return None;
        }
        self.0
            .compare_exchange(seen, seen | LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
    }

    /// Whether some thread holds the lock now (a racy look, for tests).
    #[cfg(test)]
    pub(crate) fn is_locked(&self) -> bool {
        self.0.load(Ordering::Relaxed) & LOCKED != 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lock_returns_what_the_last_unlock_published() {
        let word = StateWord::new();
        assert_eq!(word.lock(), 0);
        assert!(word.is_locked());
        word.unlock(0x1000);
        assert!(!word.is_locked());
        assert_eq!(word.root(), 0x1000);
        assert_eq!(word.try_lock(), Some(0x1000));
        assert_eq!(word.try_lock(), None);
        word.unlock(0x1000);
    }

    #[test]
    fn the_word_is_one_machine_word() {
        assert_eq!(size_of::<StateWord>(), size_of::<usize>());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use alloclab_core::sync::{Arc, UnsafeCell, model, thread};

    use super::*;

    /// What the lock protects in the model: a heap that is built once (address 0x40) and a
    /// counter that only the holder touches, as a plain cell whose accesses loom tracks.
    struct Guarded {
        word: StateWord,
        builds: UnsafeCell<u32>,
        counter: UnsafeCell<u32>,
    }

    fn locked_increment(g: &Guarded) {
        let mut root = g.word.lock();
        if root == 0 {
            // SAFETY: the lock is held.
            g.builds.with_mut(|b| unsafe { *b += 1 });
            root = 0x40;
        }
        // SAFETY: the lock is held; loom reports any unsynchronised access.
        g.counter.with_mut(|c| unsafe { *c += 1 });
        g.word.unlock(root);
    }

    /// Two threads race to the first lock of a heap that does not exist yet: exactly one
    /// builds it, every increment is seen (mutual exclusion with acquire/release), and the
    /// published address survives.
    #[test]
    fn the_heap_is_built_once_and_the_lock_excludes() {
        model(|| {
            let g = Arc::new(Guarded {
                word: StateWord::new(),
                builds: UnsafeCell::new(0),
                counter: UnsafeCell::new(0),
            });
            let others: Vec<_> = (0..1)
                .map(|_| {
                    let g = g.clone();
                    thread::spawn(move || locked_increment(&g))
                })
                .collect();
            locked_increment(&g);
            for t in others {
                t.join().unwrap();
            }
            let root = g.word.lock();
            assert_eq!(root, 0x40);
            // SAFETY: the lock is held.
            g.builds.with(|b| assert_eq!(unsafe { *b }, 1));
            // SAFETY: the lock is held.
            g.counter.with(|c| assert_eq!(unsafe { *c }, 2));
            g.word.unlock(root);
        });
    }
}
