//! Public span lists: single producer (the owning heap), many consumers, each consumer
//! popping with **one** attempt.
//!
//! A heap publishes spans it does not need (empty spans, free span runs) here so other
//! threads can take them instead of asking the OS for more. A consumer makes exactly one
//! compare-and-swap; if it loses a race it moves on to its next source instead of retrying,
//! which is what keeps span acquisition wait-free.
//!
//! The head packs the index of the first span (plus one; 0 is empty) and a 32-bit version
//! that every change increments, so a consumer whose snapshot is stale — the span it saw was
//! popped and pushed again meanwhile — fails its CAS instead of installing a stale `next`
//! (ABA). A false success needs exactly 2^32 changes of one list while one consumer sits
//! between its load and its CAS.
//!
//! Links live in the spans (`Link`), which are never unmapped while the allocator lives, so
//! a consumer may read a stale span's link: the version check then discards what it read.
//!
//! The producer's push makes one CAS per attempt; an attempt fails only if a consumer popped
//! meanwhile, and consumers cannot pop more spans than the list holds, so a push takes at
//! most `len + 1` attempts: bounded.

use alloclab_core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The link word a span carries for the public list it is on.
pub struct Link {
    next: AtomicU32,
}

impl Link {
    /// An unlinked span.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            next: AtomicU32::new(0),
        }
    }

    /// An unlinked span.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            next: AtomicU32::new(0),
        }
    }
}

impl Default for Link {
    fn default() -> Self {
        Self::new()
    }
}

/// A public span list (see the [module documentation](self)). Spans are named by a `u32`
/// index; the caller provides the index-to-link mapping.
pub struct SpanList {
    /// `(index + 1) << 32 | version`; index + 1 == 0 means empty.
    head: AtomicU64,
}

const fn pack(index_plus_one: u32, version: u32) -> u64 {
    (index_plus_one as u64) << 32 | version as u64
}

const fn index_plus_one(head: u64) -> u32 {
    (head >> 32) as u32
}

const fn version(head: u64) -> u32 {
    head as u32
}

impl SpanList {
    /// An empty list.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self {
            head: AtomicU64::new(0),
        }
    }

    /// An empty list.
    #[cfg(loom)]
    pub fn new() -> Self {
        Self {
            head: AtomicU64::new(0),
        }
    }

    /// Whether the list looks empty (a hint).
    #[inline]
    pub fn is_empty(&self) -> bool {
        index_plus_one(self.head.load(Ordering::Relaxed)) == 0
    }

    /// Pushes span `index`, whose link is `link`, retrying until it succeeds. Returns the
    /// number of CAS attempts made. Safe with several producers (the orphan list), but then
    /// lock-free rather than wait-free: use [`push_once`](Self::push_once) on a heap's own
    /// list.
    #[inline]
    pub fn push(&self, index: u32, link: &Link) -> u64 {
        let mut attempts = 0;
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            attempts += 1;
            link.next.store(index_plus_one(head), Ordering::Relaxed);
            // `Release` publishes the span's contents and its link to the consumer whose
            // `Acquire` CAS (or load) takes it.
            match self.head.compare_exchange(
                head,
                pack(index + 1, version(head).wrapping_add(1)),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return attempts,
                Err(now) => head = now,
            }
        }
    }

    /// Pushes span `index` with one attempt: `false` if a consumer popped meanwhile (the
    /// caller keeps the span). Only the list's one producer may call this. Wait-free.
    #[inline]
    pub fn push_once(&self, index: u32, link: &Link) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        link.next.store(index_plus_one(head), Ordering::Relaxed);
        // `Release` publishes the span's contents and link to the consumer that takes it.
        self.head
            .compare_exchange(
                head,
                pack(index + 1, version(head).wrapping_add(1)),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Pops with one attempt: `Some(index)` on success, `None` if the list was empty or the
    /// attempt lost a race.
    #[inline]
    pub fn pop_once<'a>(&self, link_of: impl FnOnce(u32) -> &'a Link) -> Option<u32> {
        let head = self.head.load(Ordering::Acquire);
        let first = index_plus_one(head).checked_sub(1)?;
        // A stale read here (the span was popped and re-linked meanwhile) is caught by the
        // version in the CAS below.
        let next = link_of(first).next.load(Ordering::Relaxed);
        self.head
            .compare_exchange(
                head,
                pack(next, version(head).wrapping_add(1)),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .ok()
            .map(|_| first)
    }
}

impl Default for SpanList {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Spans come off a list last in, first out, each change moving the version on by one;
    /// the emptiness hint follows; an uncontended push takes one attempt, as a producer's
    /// one-attempt push does.
    #[test]
    fn spans_come_off_last_in_first_out_and_every_change_moves_the_version() {
        let list = SpanList::new();
        let links: Vec<Link> = (0..4).map(|_| Link::new()).collect();
        let version_now = |l: &SpanList| version(l.head.load(Ordering::Relaxed));
        assert!(list.is_empty());
        assert_eq!(list.pop_once(|i| &links[i as usize]), None);
        let mut expected_version = version_now(&list);
        for index in [2, 0] {
            assert_eq!(list.push(index, &links[index as usize]), 1);
            expected_version += 1;
            assert_eq!(version_now(&list), expected_version);
            assert!(!list.is_empty());
        }
        assert!(list.push_once(3, &links[3]));
        expected_version += 1;
        assert_eq!(version_now(&list), expected_version);
        for want in [3, 0, 2] {
            assert_eq!(list.pop_once(|i| &links[i as usize]), Some(want));
            expected_version += 1;
            assert_eq!(version_now(&list), expected_version);
        }
        assert!(list.is_empty());
        assert_eq!(list.pop_once(|i| &links[i as usize]), None);
    }

    /// A consumer whose snapshot is stale (the span it saw was popped and pushed back
    /// meanwhile, with another span behind it now) fails its compare-and-swap instead of
    /// installing the link it read: the version tells the two heads apart.
    #[test]
    fn a_stale_snapshot_fails_on_the_version() {
        let list = SpanList::new();
        let links: Vec<Link> = (0..3).map(|_| Link::new()).collect();
        list.push(0, &links[0]);
        list.push(1, &links[1]);
        let stale = list.head.load(Ordering::Acquire);
        let stale_next = links[1].next.load(Ordering::Relaxed);
        // Meanwhile: 1 and 0 popped, 2 pushed, 1 pushed back (the same index on top).
        assert_eq!(list.pop_once(|i| &links[i as usize]), Some(1));
        assert_eq!(list.pop_once(|i| &links[i as usize]), Some(0));
        list.push(2, &links[2]);
        list.push(1, &links[1]);
        assert_eq!(index_plus_one(list.head.load(Ordering::Relaxed)), 2);
        let swapped = list.head.compare_exchange(
            stale,
            pack(stale_next, version(stale).wrapping_add(1)),
            Ordering::Acquire,
            Ordering::Relaxed,
        );
        assert!(swapped.is_err(), "a stale snapshot won");
        assert_eq!(list.pop_once(|i| &links[i as usize]), Some(1));
        assert_eq!(list.pop_once(|i| &links[i as usize]), Some(2));
        assert!(list.is_empty());
    }
}
