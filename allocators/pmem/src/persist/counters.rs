//! [`AtomicPersistStats`]: a file medium's persistence counters, kept per thread with no
//! locked instruction.
//!
//! # Why no locked instruction
//!
//! On x86 a locked read-modify-write (`lock xadd`, a mutex's `cmpxchg`) waits for every
//! earlier `CLWB`/`CLFLUSHOPT` of its thread to be written back, as `MFENCE` does. `SFENCE`
//! (libpmem's `pmem_drain`, the native fence) does not stop the core: it only keeps later
//! stores and flushes behind the write-backs, while loads and arithmetic go on, so the code
//! after a fence (an index search, the next operation's set-up) overlaps the write-back
//! latency. A locked add right after the fence throws that overlap away: measured here (a
//! VM on a Xeon with CLWB, a `/dev/shm` file), four lines written and `CLWB`ed, `SFENCE`,
//! then ~300 cycles of independent loads: 610–800 cycles an iteration with the fence alone,
//! 1,070–1,280 with a `lock xadd` after it (and the `SFENCE` timed alone looks like ~115
//! cycles, the `SFENCE` + `lock xadd` like 680–950: the wait moves to the locked add). An
//! earlier version of these counters published each thread's counts with `fetch_add`s after
//! every fence, which made every fence of alloclab-pmem a full wait and showed as the
//! storage engines' crash-consistency time costing twice PMDK's with the same flushes and
//! fences (PMDK's `pmemobj_drain` is an `SFENCE` and nothing else).
//!
//! # Layout
//!
//! Each (thread, medium) pair has a slot of four counters with a single writer, its thread,
//! which adds with a relaxed load and a relaxed store. The medium's registry holds every
//! slot (an `Arc`), so the counts of threads that exited stay counted; a thread finds its
//! slot in a thread-local list keyed by the registry's address, which the list's `Weak`
//! keeps from being reused while the entry exists. A thread's entries for media that no
//! longer exist are pruned when it meets a new medium. The registry's mutex is taken once
//! per (thread, medium) pair, and by [`AtomicPersistStats::snapshot`].
//!
//! A snapshot sums the slots with relaxed loads: it sees every count of the calling thread,
//! every count of a thread it synchronised with (joined, say), and recent counts of threads
//! still running possibly a little late.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use alloclab_core::sync::atomic::{AtomicU64, Ordering};
use alloclab_core::sync::{Mutex, bump_single_writer};

use super::{PersistStats, lines_touched};

/// One thread's counts on one medium (single writer: the thread).
#[derive(Debug, Default)]
struct ThreadCounts {
    lines_flushed: AtomicU64,
    flushes: AtomicU64,
    fences: AtomicU64,
    bytes_flushed: AtomicU64,
}

impl ThreadCounts {
    fn read(&self) -> PersistStats {
        PersistStats {
            lines_flushed: self.lines_flushed.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            fences: self.fences.load(Ordering::Relaxed),
            bytes_flushed: self.bytes_flushed.load(Ordering::Relaxed),
        }
    }
}

/// Every thread's slot of one medium.
#[derive(Debug, Default)]
struct Registry {
    /// The slots of the threads that used the medium (exited ones included), and, last,
    /// the slot of counts made by threads whose thread-locals were already gone (exiting),
    /// written under the mutex.
    slots: Mutex<(Vec<Arc<ThreadCounts>>, ThreadCounts)>,
}

/// [`PersistStats`] kept for a medium shared between threads (see the [module
/// documentation](self)).
#[derive(Debug, Default)]
pub struct AtomicPersistStats {
    registry: Arc<Registry>,
}

type Entry = (Weak<Registry>, Arc<ThreadCounts>);

thread_local! {
    static SLOTS: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

impl AtomicPersistStats {
    /// All zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` with the calling thread's counts of this medium (registering them on first
    /// use), or, when the thread's locals are gone (it is exiting), with the registry's
    /// slot for such counts, under its mutex.
    ///
    /// Every flush and fence of the medium comes here, so the path of a thread that has
    /// its slot (a look-up in its short list) is small enough to inline into them; the rest
    /// is [`with_counts_slow`](Self::with_counts_slow).
    #[inline]
    fn with_counts(&self, f: impl Fn(&ThreadCounts)) {
        let key = Arc::as_ptr(&self.registry);
        let counted = SLOTS.try_with(|slots| {
            let slots = slots.try_borrow().ok()?;
            f(find(&slots, key)?);
            Some(())
        });
        if counted != Ok(Some(())) {
            self.with_counts_slow(&f);
        }
    }

    /// [`with_counts`](Self::with_counts) for a thread without a slot for this medium yet,
    /// or whose locals are gone.
    #[cold]
    #[inline(never)]
    fn with_counts_slow(&self, f: &dyn Fn(&ThreadCounts)) {
        let key = Arc::as_ptr(&self.registry);
        let counted = SLOTS.try_with(|slots| {
            let mut slots = slots.borrow_mut();
            if let Some(counts) = find(&slots, key) {
                f(counts);
                return;
            }
            // Entries of media that are gone (their `Weak` kept the address from reuse).
            slots.retain(|(r, _)| r.strong_count() > 0);
            let counts = Arc::new(ThreadCounts::default());
            lock(&self.registry.slots).0.push(Arc::clone(&counts));
            f(&counts);
            slots.push((Arc::downgrade(&self.registry), counts));
        });
        if counted.is_err() {
            f(&lock(&self.registry.slots).1);
        }
    }

    /// Counts one `flush(offset, len)` call.
    #[inline]
    pub fn record_flush(&self, offset: usize, len: usize) {
        let lines = lines_touched(offset, len);
        self.with_counts(|c| {
            bump_single_writer(&c.lines_flushed, lines);
            bump_single_writer(&c.flushes, 1);
            bump_single_writer(&c.bytes_flushed, len as u64);
        });
    }

    /// Counts one `fence` call.
    #[inline]
    pub fn record_fence(&self) {
        self.with_counts(|c| bump_single_writer(&c.fences, 1));
    }

    /// The counters now, all threads together (see the [module documentation](self)).
    pub fn snapshot(&self) -> PersistStats {
        let slots = lock(&self.registry.slots);
        let mut total = slots.1.read();
        for counts in &slots.0 {
            let c = counts.read();
            total.lines_flushed += c.lines_flushed;
            total.flushes += c.flushes;
            total.fences += c.fences;
            total.bytes_flushed += c.bytes_flushed;
        }
        total
    }
}

/// The counts in `slots` of the medium whose registry is at `key`.
#[inline]
fn find(slots: &[Entry], key: *const Registry) -> Option<&ThreadCounts> {
    let (_, counts) = slots.iter().find(|(r, _)| Weak::as_ptr(r) == key)?;
    Some(counts)
}

fn lock<T>(m: &Mutex<T>) -> alloclab_core::sync::MutexGuard<'_, T> {
    // Every critical section leaves the registry consistent before anything can panic.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(s: &AtomicPersistStats) -> (u64, u64, u64, u64) {
        let p = s.snapshot();
        (p.flushes, p.lines_flushed, p.fences, p.bytes_flushed)
    }

    #[test]
    fn every_threads_counts_are_seen_fence_or_not_and_outlive_the_thread() {
        let a = Arc::new(AtomicPersistStats::new());
        let b = AtomicPersistStats::new();
        a.record_flush(0, 64);
        a.record_flush(60, 8);
        assert_eq!(
            counts(&a),
            (2, 3, 0, 72),
            "the flushing thread sees its own"
        );
        // Another medium in the same thread is counted apart.
        b.record_flush(0, 1);
        b.record_fence();
        assert_eq!(counts(&b), (1, 1, 1, 1));
        let a2 = Arc::clone(&a);
        let seen_by_other = std::thread::spawn(move || {
            let seen = counts(&a2);
            a2.record_flush(128, 128);
            a2.record_fence();
            a2.record_flush(0, 8);
            // No fence after the last flush: it is counted all the same.
            seen
        })
        .join()
        .unwrap();
        assert_eq!(
            seen_by_other,
            (2, 3, 0, 72),
            "another thread sees counts without any fence"
        );
        assert_eq!(
            counts(&a),
            (4, 6, 1, 72 + 128 + 8),
            "an exited thread's counts stay"
        );
        assert_eq!(counts(&b), (1, 1, 1, 1));
    }

    #[test]
    fn a_new_medium_starts_from_zero_after_an_old_one_is_dropped() {
        for _ in 0..3 {
            let s = AtomicPersistStats::new();
            assert_eq!(counts(&s), (0, 0, 0, 0));
            s.record_flush(0, 64);
            s.record_fence();
            assert_eq!(counts(&s), (1, 1, 1, 64));
        }
        // The thread keeps entries only for media that still exist (plus the last one met).
        let live = SLOTS.with(|s| s.borrow().len());
        assert!(live <= 2, "{live} entries kept");
    }
}
