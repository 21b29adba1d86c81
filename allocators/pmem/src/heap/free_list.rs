//! A class's global list of free block offsets, kept as chunks.
//!
//! A thread whose cache overflows hands its older half back as one chunk it filled before
//! taking the global mutex, and the list takes it in constant time; a refill takes offsets
//! from the newest chunk. So nothing under the mutex copies or reallocates the whole list.
//! A single vector did: as it grew, a spill that crossed its capacity reallocated it under
//! the mutex, and the pages of each new tail were first touched there — under the storage
//! engines' delete mix, spills of 0.1–2.3 ms (lists of 9,000–90,000 offsets), with the
//! other thread waiting on the mutex throughout.

/// Offsets per chunk that [`FreeList::push`] starts (a spilled chunk keeps its own length).
pub(super) const CHUNK: usize = 1024;

/// Free block offsets, newest last (see the [module documentation](self)).
#[derive(Debug, Default)]
pub(super) struct FreeList {
    /// No chunk is empty.
    chunks: Vec<Vec<u64>>,
    len: usize,
}

impl FreeList {
    /// Offsets held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether no offset is held.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds one offset, newest.
    pub(super) fn push(&mut self, offset: u64) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < last.capacity() => last.push(offset),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(offset);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    /// Adds `offsets`, the last newest.
    pub(super) fn extend(&mut self, offsets: impl IntoIterator<Item = u64>) {
        for offset in offsets {
            self.push(offset);
        }
    }

    /// Adds `chunk`'s offsets, its last newest, taking the vector itself: constant time.
    pub(super) fn append(&mut self, chunk: Vec<u64>) {
        if chunk.is_empty() {
            return;
        }
        self.len += chunk.len();
        self.chunks.push(chunk);
    }

    /// Moves up to `n` of the newest offsets onto the end of `into`, in the order they were
    /// added (so that `into`'s last is the newest). Returns the chunks it emptied, for the
    /// caller to drop once it has let go of the mutex.
    pub(super) fn take(&mut self, n: usize, into: &mut Vec<u64>) -> Vec<Vec<u64>> {
        let mut emptied = Vec::new();
        let mut want = n.min(self.len);
        // Gather from the newest chunks back, then move each part in oldest-first order.
        let mut parts = 0;
        let mut from_last = 0;
        for chunk in self.chunks.iter().rev() {
            if want == 0 {
                break;
            }
            from_last = want.min(chunk.len());
            want -= from_last;
            parts += 1;
        }
        let first = self.chunks.len() - parts;
        for (i, chunk) in self.chunks[first..].iter_mut().enumerate() {
            // The oldest part may be a chunk's tail only; the newer ones are whole chunks.
            let k = if i == 0 { from_last } else { chunk.len() };
            let start = chunk.len() - k;
            into.extend(chunk.drain(start..));
            self.len -= k;
        }
        // Only the newest chunks empty (a partly taken one stays, non-empty).
        while self.chunks.last().is_some_and(Vec::is_empty) {
            emptied.push(self.chunks.pop().expect("a last chunk"));
        }
        emptied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list's offsets, oldest first.
    fn contents(list: &FreeList) -> Vec<u64> {
        list.chunks.iter().flatten().copied().collect()
    }

    #[test]
    fn offsets_come_back_newest_first_across_pushes_and_appended_chunks() {
        let mut list = FreeList::default();
        list.extend(0..1500);
        list.append((1500..2524).collect());
        list.push(2524);
        list.append(Vec::new());
        assert_eq!(list.len(), 2525);
        assert_eq!(contents(&list), (0..2525).collect::<Vec<_>>());
        let mut stack = vec![9_999];
        // 64 from the newest end: one pushed offset and 63 of the appended chunk.
        list.take(64, &mut stack);
        assert_eq!(stack[0], 9_999);
        assert_eq!(stack[1..], (2461..2525).collect::<Vec<_>>()[..]);
        assert_eq!(list.len(), 2461);
        assert_eq!(contents(&list), (0..2461).collect::<Vec<_>>());
        // More than one chunk in one take.
        let mut stack = Vec::new();
        list.take(2000, &mut stack);
        assert_eq!(stack, (461..2461).collect::<Vec<_>>());
        assert_eq!(contents(&list), (0..461).collect::<Vec<_>>());
        // More than there is: all of it.
        let mut stack = Vec::new();
        list.take(10_000, &mut stack);
        assert_eq!(stack, (0..461).collect::<Vec<_>>());
        assert!(list.is_empty() && list.chunks.is_empty());
        let mut stack = Vec::new();
        assert!(list.take(5, &mut stack).is_empty());
        assert!(stack.is_empty());
    }

    #[test]
    fn a_take_hands_back_the_chunks_it_emptied_and_keeps_no_empty_chunk() {
        let mut list = FreeList::default();
        list.append(vec![1, 2, 3]);
        list.append(vec![4, 5]);
        list.append(vec![6]);
        let mut stack = Vec::new();
        let emptied = list.take(4, &mut stack);
        assert_eq!(stack, vec![3, 4, 5, 6]);
        assert_eq!(emptied.len(), 2, "the two newest chunks");
        assert!(emptied.iter().all(Vec::is_empty));
        assert_eq!(contents(&list), vec![1, 2]);
        assert!(list.chunks.iter().all(|c| !c.is_empty()));
        // A push after a partial take goes on the end, newest.
        list.push(7);
        let mut stack = Vec::new();
        list.take(1, &mut stack);
        assert_eq!(stack, vec![7]);
    }

    #[test]
    fn pushes_fill_chunks_of_chunk_offsets_before_starting_another() {
        let mut list = FreeList::default();
        list.extend(0..(2 * CHUNK as u64 + 1));
        assert_eq!(list.chunks.len(), 3);
        assert!(list.chunks[..2].iter().all(|c| c.len() == CHUNK));
        // A pushed offset goes into an appended chunk that has room, without growing it,
        // and starts a new chunk after one that has none.
        let mut list = FreeList::default();
        let mut chunk = Vec::with_capacity(CHUNK);
        chunk.extend(0..10);
        list.append(chunk);
        list.push(10);
        assert_eq!(list.chunks.len(), 1);
        list.append(vec![11]);
        list.push(12);
        assert_eq!(list.chunks.len(), 3);
        assert_eq!(contents(&list), (0..13).collect::<Vec<_>>());
    }
}
