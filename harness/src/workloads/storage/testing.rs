//! A minimal durable engine for the driver's tests: a persistent chained hash table.
//!
//! The partition's root holds a magic word and the offset of an array of [`BUCKETS`]
//! offsets; each bucket is a singly linked list of tuple blocks `[next, key, len, value…]`.
//! An insert fills and persists a new block, then links it at its bucket's head with one
//! persisted 8-byte store; a delete unlinks the block (one persisted store) and frees it;
//! an update writes in place (not crash-atomic: fine for the driver's tests, which crash
//! nothing). Every operation is committed when it returns.

use std::sync::Arc;

use alloclab_storage_engines::{Engine, PersistentAllocator, Phase, Split};

use crate::workloads::{Params, Scale};

/// The tests' parameters: `threads` partitions at the tiny scale.
pub(super) fn tiny(threads: usize) -> Params {
    Params {
        threads,
        scale: Scale::Tiny,
        seed: 11,
    }
}

const MAGIC: u64 = 0x7465_7374_6c69_7374; // "testlist"
const BUCKETS: usize = 4096;
const HEADER: usize = 24;

/// The test engine (see the [module documentation](self)).
pub struct ListEngine<H: PersistentAllocator> {
    heap: Arc<H>,
    buckets: *mut u64,
    split: Split,
}

// SAFETY: the raw pointer is into the heap, which is `Send + Sync`; one thread uses an
// engine at a time (`&mut self`).
unsafe impl<H: PersistentAllocator> Send for ListEngine<H> {}

fn bucket_of(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize % BUCKETS
}

impl<H: PersistentAllocator> ListEngine<H> {
    /// (address of the word that names the block, the block's offset) of `key`, if there.
    fn find(&mut self, key: u64) -> (*mut u64, u64) {
        let heap = &self.heap;
        // SAFETY: the bucket array and every linked block are live blocks of the heap.
        self.split.time(Phase::Index, || unsafe {
            let mut link = self.buckets.add(bucket_of(key));
            loop {
                let off = link.read();
                if off == 0 {
                    return (link, 0);
                }
                let block = heap.at(off).cast::<u64>();
                if block.add(1).read() == key {
                    return (link, off);
                }
                link = block;
            }
        })
    }
}

impl<H: PersistentAllocator> Engine<H> for ListEngine<H> {
    const NAME: &'static str = "test";
    const ROOT_BYTES: usize = 64;
    const COMMIT_EVERY: usize = 1;

    fn create(heap: Arc<H>, root: *mut u8) -> Result<Self, String> {
        let root = root.cast::<u64>();
        // SAFETY: the partition's root (64 zeroed bytes), this thread's alone.
        let buckets = unsafe {
            let off = heap.allocate_into(root.add(1), BUCKETS * 8)?;
            let buckets = heap.at(off).cast::<u64>();
            buckets.write_bytes(0, BUCKETS);
            heap.persist(buckets.cast(), BUCKETS * 8);
            root.write(MAGIC);
            heap.persist(root.cast(), 8);
            buckets
        };
        Ok(Self {
            heap,
            buckets,
            split: Split::default(),
        })
    }

    fn recover(heap: Arc<H>, root: *mut u8) -> Result<Self, String> {
        let root = root.cast::<u64>();
        // SAFETY: the partition's root, written by `create`.
        let (magic, off) = unsafe { (root.read(), root.add(1).read()) };
        if magic != MAGIC || off == 0 {
            return Err("not a test-engine partition".to_owned());
        }
        let buckets = heap.at(off).cast::<u64>();
        Ok(Self {
            heap,
            buckets,
            split: Split::default(),
        })
    }

    fn read(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, String> {
        let (_, off) = self.find(key);
        if off == 0 {
            return Ok(false);
        }
        let block = self.heap.at(off);
        self.split.time(Phase::Mod, || {
            // SAFETY: a live tuple block: header then `len` bytes.
            unsafe {
                let len = block.cast::<u64>().add(2).read() as usize;
                out.clear();
                out.extend_from_slice(std::slice::from_raw_parts(block.add(HEADER), len));
            }
        });
        Ok(true)
    }

    fn insert(&mut self, key: u64, value: &[u8]) -> Result<bool, String> {
        let (link, found) = self.find(key);
        if found != 0 {
            return Ok(false);
        }
        let heap = Arc::clone(&self.heap);
        let off = self
            .split
            .time(Phase::Mm, || heap.allocate_unlinked(HEADER + value.len()))?;
        let block = heap.at(off);
        self.split.time(Phase::Mod, || {
            // SAFETY: a fresh block of HEADER + len bytes; `link` is the bucket's head word
            // (the search ends at the bucket's last link, which holds 0).
            unsafe {
                let words = block.cast::<u64>();
                words.write(0);
                words.add(1).write(key);
                words.add(2).write(value.len() as u64);
                std::ptr::copy_nonoverlapping(value.as_ptr(), block.add(HEADER), value.len());
            }
        });
        self.split.persist(&*heap, block, HEADER + value.len());
        // SAFETY: `link` is the last (null) link of the bucket, ours alone.
        unsafe { link.write(off) };
        self.split.persist(&*heap, link.cast(), 8);
        Ok(true)
    }

    fn update(&mut self, key: u64, at: usize, bytes: &[u8]) -> Result<bool, String> {
        let (_, off) = self.find(key);
        if off == 0 {
            return Ok(false);
        }
        let block = self.heap.at(off);
        // SAFETY: a live tuple block.
        let len = unsafe { block.cast::<u64>().add(2).read() } as usize;
        if at + bytes.len() > len {
            return Err(format!("update of {}..{} past {len}", at, at + bytes.len()));
        }
        // SAFETY: inside the value (checked).
        let p = unsafe { block.add(HEADER + at) };
        self.split.time(Phase::Mod, || {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) }
        });
        self.split.persist(&*self.heap, p, bytes.len());
        Ok(true)
    }

    fn delete(&mut self, key: u64) -> Result<bool, String> {
        let (link, off) = self.find(key);
        if off == 0 {
            return Ok(false);
        }
        let heap = Arc::clone(&self.heap);
        // SAFETY: `link` names the block; its `next` word is read before it is unlinked.
        unsafe {
            let next = heap.at(off).cast::<u64>().read();
            link.write(next);
        }
        self.split.persist(&*heap, link.cast(), 8);
        self.split.time(Phase::Mm, || {
            // SAFETY: unlinked durably above; nothing uses it again.
            unsafe { heap.release(off) }
        })?;
        Ok(true)
    }

    fn commit(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn split(&self) -> &Split {
        &self.split
    }
}
