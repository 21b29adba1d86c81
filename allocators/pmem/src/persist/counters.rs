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
//! Each medium has [`THREAD_SLOTS`] slots of four counters, one per thread number. A thread
//! takes a number the first time it counts anything — the smallest one an exited thread gave
//! back, else a new one — and gives it back when it exits; no two live threads hold the same
//! number, so each slot has a single writer at a time, which adds with a relaxed load and a
//! relaxed store (the mutex that hands numbers over orders one holder's counts before the
//! next's). Threads numbered past the slots, and threads counting while they exit (from a
//! thread-local's destructor, after their number went back), count in one more slot, under a
//! mutex. A slot is a cache line of its own, so that two threads' counts never share one.
//! So the path every flush and fence takes is a thread-local load, a bounds check and the
//! adds: no look-up, no registration, nothing to prune; and a process that starts and joins
//! threads over and over keeps using the first few slots.
//!
//! A snapshot sums the slots with relaxed loads: it sees every count of the calling thread,
//! every count of a thread it synchronised with (joined, say), and recent counts of threads
//! still running possibly a little late. Counts of threads that exited stay in their slots.

use crate::sync::raw::{AtomicUsize, StaticMutex};
use std::cell::Cell;

use crate::sync::{AtomicU64, Mutex, Ordering, bump_single_writer};

use super::{PersistStats, lines_touched};

/// Threads with a slot of their own in every medium (later ones share one, under a mutex).
pub const THREAD_SLOTS: usize = 64;

/// One thread's counts on one medium (single writer: the thread), a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(64))]
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

/// [`PersistStats`] kept for a medium shared between threads (see the module documentation
/// of `persist::counters`).
#[derive(Debug)]
pub struct AtomicPersistStats {
    /// Slot `i` is written by the thread numbered `i` only.
    slots: Box<[ThreadCounts]>,
    /// The counts of threads without a slot, written under the mutex.
    shared: Mutex<ThreadCounts>,
}

impl Default for AtomicPersistStats {
    fn default() -> Self {
        Self::new()
    }
}

/// The next new thread number (a plain std atomic: a process-wide counter in a `static`).
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

/// Numbers of exited threads, for the next threads to take (a plain std mutex in a
/// `static`, taken once when a thread takes a number and once when it exits).
static FREE_NUMBERS: StaticMutex<Vec<usize>> = StaticMutex::new(Vec::new());

/// No number yet.
const UNNUMBERED: usize = usize::MAX;
/// The number went back: the thread is exiting.
const GAVE_BACK: usize = usize::MAX - 1;

/// Gives the thread's number back when the thread exits.
struct NumberGuard;

impl Drop for NumberGuard {
    fn drop(&mut self) {
        // `THREAD` has no destructor, so it is still there; counts made from here on (other
        // thread-locals' destructors) go to the shared slot.
        let number = THREAD.with(|n| n.replace(GAVE_BACK));
        if number < GAVE_BACK {
            FREE_NUMBERS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(number);
        }
    }
}

thread_local! {
    /// The calling thread's number (no destructor, so it is there until the thread ends).
    static THREAD: Cell<usize> = const { Cell::new(UNNUMBERED) };
    /// Gives it back (registered when the thread takes its number).
    static GUARD: NumberGuard = const { NumberGuard };
}

/// The calling thread's number, taken on first use; `None` once it gave it back (exiting).
#[inline]
fn thread_number() -> Option<usize> {
    match THREAD.with(Cell::get) {
        UNNUMBERED => take_number(),
        GAVE_BACK => None,
        n => Some(n),
    }
}

/// Takes the smallest number an exited thread gave back, else a new one, and registers its
/// return; `None` if the thread is already exiting.
#[cold]
fn take_number() -> Option<usize> {
    // Registering the guard fails once the thread's destructors run: no number then.
    GUARD.try_with(|_| ()).ok()?;
    let number = {
        let mut free = FREE_NUMBERS.lock().unwrap_or_else(|e| e.into_inner());
        match free.iter().enumerate().min_by_key(|&(_, &n)| n) {
            Some((i, _)) => free.swap_remove(i),
            None => NEXT_THREAD.fetch_add(1, Ordering::Relaxed),
        }
    };
    THREAD.with(|n| n.set(number));
    Some(number)
}

impl AtomicPersistStats {
    /// All zero.
    pub fn new() -> Self {
        Self {
            slots: (0..THREAD_SLOTS).map(|_| ThreadCounts::default()).collect(),
            shared: Mutex::new(ThreadCounts::default()),
        }
    }

    /// Runs `f` with the calling thread's counts of this medium, or, for a thread without a
    /// slot, with the shared counts under their mutex.
    #[inline]
    fn with_counts(&self, f: impl Fn(&ThreadCounts)) {
        match thread_number().and_then(|n| self.slots.get(n)) {
            Some(counts) => f(counts),
            None => f(&lock(&self.shared)),
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

    /// The counters now, all threads together (see the module documentation of
    /// `persist::counters`).
    pub fn snapshot(&self) -> PersistStats {
        let mut total = lock(&self.shared).read();
        for counts in self.slots.iter() {
            let c = counts.read();
            total.lines_flushed += c.lines_flushed;
            total.flushes += c.flushes;
            total.fences += c.fences;
            total.bytes_flushed += c.bytes_flushed;
        }
        total
    }
}

fn lock<T>(m: &Mutex<T>) -> crate::sync::MutexGuard<'_, T> {
    // Every critical section leaves the counts consistent before anything can panic.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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
    }

    #[test]
    fn threads_past_the_slots_share_one_and_every_count_is_kept() {
        let s = Arc::new(AtomicPersistStats::new());
        // More threads than slots (the test's own threads take numbers too): each flushes
        // once and fences once, concurrently.
        let threads: Vec<_> = (0..THREAD_SLOTS + 8)
            .map(|_| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    s.record_flush(0, 128);
                    s.record_fence();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = (THREAD_SLOTS + 8) as u64;
        assert_eq!(counts(&s), (n, 2 * n, n, 128 * n));
        assert!(
            thread_number().unwrap() < NEXT_THREAD.load(std::sync::atomic::Ordering::Relaxed),
            "numbers come from the counter"
        );
    }

    #[test]
    fn exited_threads_give_their_numbers_back_and_their_counts_stay() {
        let s = Arc::new(AtomicPersistStats::new());
        // One thread at a time: each takes a number an earlier one gave back, so (other
        // tests' threads taking some meanwhile) most of them get a slot of their own, where
        // numbers handed out once each would all be past the slots after the first few.
        let rounds = 4 * THREAD_SLOTS;
        let mut in_slots = 0;
        for _ in 0..rounds {
            let s = Arc::clone(&s);
            let number = std::thread::spawn(move || {
                s.record_flush(0, 64);
                thread_number().unwrap()
            })
            .join()
            .unwrap();
            in_slots += usize::from(number < THREAD_SLOTS);
        }
        assert!(
            in_slots > rounds / 2,
            "only {in_slots} of {rounds} threads had a slot"
        );
        let n = rounds as u64;
        assert_eq!(
            counts(&s),
            (n, n, 0, 64 * n),
            "an exited thread's counts were lost"
        );
    }
}
