//! The chunk table: where every mapping of the heap is registered, found and removed.

use super::*;

impl Root {
    /// The table slot where probing for the mapping based at `base` starts.
    ///
    /// Chunks within the same [`TABLE_RUN`] chunks of address space (2 GiB) get
    /// consecutive slots, on one page of the table; which page is a hash of the address
    /// above that. The OS maps a process's chunks near each other, so a small heap's
    /// entries share one page of the table rather than taking a page each (three pages of
    /// a three-thread program's heap, before). Linear probing then meets runs of
    /// neighbouring chunks; a lookup of a registered chunk still finds its own slot first
    /// unless two bases 2 GiB x 32 apart collide.
    pub(super) fn slot_of(base: usize) -> usize {
        let chunk = base / CHUNK;
        let page = ((chunk / TABLE_RUN) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> (64 - (TABLE / TABLE_RUN).trailing_zeros());
        page as usize * TABLE_RUN + chunk % TABLE_RUN
    }

    /// Adds `entry`; `false` if the table is full. Under the table lock, or before the heap
    /// is published.
    pub(super) fn table_insert(&self, entry: usize) -> bool {
        let mut i = Self::slot_of(entry & !(CHUNK - 1));
        loop {
            let e = self.table[i].load(Ordering::Relaxed);
            if e == TOMBSTONE {
                break;
            }
            if e == 0 {
                let used = self.table_used.load(Ordering::Relaxed);
                if used >= TABLE / 4 * 3 {
                    return false;
                }
                self.table_used.store(used + 1, Ordering::Relaxed);
                break;
            }
            i = (i + 1) & (TABLE - 1);
        }
        self.table[i].store(entry, Ordering::Release);
        true
    }

    /// The kind of the mapping based at `base`, if it is this heap's. Lock-free.
    pub(super) fn table_find(&self, base: usize) -> Option<usize> {
        let mut i = Self::slot_of(base);
        loop {
            let e = self.table[i].load(Ordering::Acquire);
            if e == 0 {
                return None;
            }
            if e != TOMBSTONE && e & !(CHUNK - 1) == base {
                return Some(e & (CHUNK - 1));
            }
            i = (i + 1) & (TABLE - 1);
        }
    }

    /// Replaces the entry of `base` (present) with a tombstone. Under the table lock.
    ///
    /// A tombstone followed by an empty slot ends every probe that reaches it: no entry
    /// lies past it on a probe through it (an insert fills the first tombstone or empty
    /// slot it meets, so the slots between an entry and where its probe starts are never
    /// empty). It is made empty again, and so is each tombstone before it that then ends
    /// its cluster, and they stop counting against the table's limit. Without that, a
    /// program whose mappings come and go at ever-new addresses would fill the table with
    /// tombstones and be refused memory. A lock-free lookup that read the tombstone
    /// walks on to the empty slot; one that reads the empty slot stops there: either way
    /// it finds what is registered.
    pub(super) fn table_remove(&self, base: usize) {
        let mut i = Self::slot_of(base);
        loop {
            let e = self.table[i].load(Ordering::Relaxed);
            if e != TOMBSTONE && e & !(CHUNK - 1) == base {
                self.table[i].store(TOMBSTONE, Ordering::Release);
                break;
            }
            i = (i + 1) & (TABLE - 1);
        }
        let mut cleared = 0;
        while self.table[i].load(Ordering::Relaxed) == TOMBSTONE
            && self.table[(i + 1) & (TABLE - 1)].load(Ordering::Relaxed) == 0
        {
            self.table[i].store(0, Ordering::Release);
            cleared += 1;
            i = i.wrapping_sub(1) & (TABLE - 1);
        }
        if cleared > 0 {
            let used = self.table_used.load(Ordering::Relaxed);
            self.table_used.store(used - cleared, Ordering::Relaxed);
        }
    }

    /// Every mapping but the first chunk, as `(base, len)`.
    pub(crate) fn other_mappings(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let own = self as *const Root as usize;
        self.table
            .iter()
            .filter_map(move |e| {
                let e = e.load(Ordering::Acquire);
                if e == 0 || e == TOMBSTONE || e & !(CHUNK - 1) == own {
                    return None;
                }
                let base = e & !(CHUNK - 1);
                Some(if e & (CHUNK - 1) == KIND_HUGE {
                    // SAFETY: a huge mapping starts with its accessible length (see
                    // `allocate_huge`); its guard page follows.
                    (base, unsafe { rd(base) } + self.guard())
                } else {
                    (base, CHUNK)
                })
            })
            .chain(self.zero.mapping())
    }
}
