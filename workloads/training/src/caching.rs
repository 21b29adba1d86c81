//! A model of PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`).
//!
//! Data structure: *segments* (one `cudaMalloc` each, or with expandable segments one
//! growing virtual range per pool) tiled by *blocks* in address order. Free blocks sit in
//! one of two pools ordered by (size, address): the small pool (requests ≤ 1 MiB, served
//! from 2 MiB segments) and the large pool (larger requests, served from 20 MiB segments
//! below 10 MiB and from segments of the request rounded up to 2 MiB above).
//!
//! * **malloc**: round to 512 B; take the best-fitting free block of the pool (smallest,
//!   then lowest address), subject to `max_split_size`: a request below it never takes a
//!   block at or above it, a request at or above it never takes a block more than 20 MiB
//!   larger. Without a fit, map a new segment (or, with expandable segments, grow the
//!   pool's segment at its end, merging with a free tail block). If the device is full,
//!   release every entirely free segment (`empty_cache`) and try once more. Split the block
//!   when the rest is ≥ 512 B (small) or > 1 MiB (large, and only for requests below
//!   `max_split_size`).
//! * **free**: mark the block free and merge it with free neighbours of the same segment.
//!   Segments are never returned on free, only by `empty_cache`.
//!
//! Invariants ([`CachingAllocator::check_invariants`]): the blocks of a segment tile it
//! without gap or overlap; no two neighbouring blocks are both free; the pools hold exactly
//! the free blocks; allocated ≤ reserved.

use std::collections::{BTreeMap, BTreeSet};

use crate::TrainingError;

/// Requests are rounded up to a multiple of this (`kMinBlockSize`).
pub const MIN_BLOCK_BYTES: u64 = 512;
/// Largest request served by the small pool (`kSmallSize`).
pub const SMALL_REQUEST_BYTES: u64 = 1 << 20;
/// Segment size of the small pool (`kSmallBuffer`).
pub const SMALL_SEGMENT_BYTES: u64 = 2 << 20;
/// Segment size of the large pool for requests below [`MIN_LARGE_ALLOC_BYTES`]
/// (`kLargeBuffer`).
pub const LARGE_SEGMENT_BYTES: u64 = 20 << 20;
/// Requests at or above this get a segment of their own size rounded to
/// [`ROUND_LARGE_BYTES`] (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC_BYTES: u64 = 10 << 20;
/// Rounding of large segments (`kRoundLarge`).
pub const ROUND_LARGE_BYTES: u64 = 2 << 20;

/// Settings of the model (`PYTORCH_CUDA_ALLOC_CONF`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CachingConfig {
    /// `expandable_segments:True`: one growing segment per pool, mapped in pages of 2 MiB
    /// (small pool) or 20 MiB (large pool).
    pub expandable_segments: bool,
    /// `max_split_size_mb`, in bytes; `None` is PyTorch's default (unlimited).
    pub max_split_bytes: Option<u64>,
    /// Device memory; `None` for unlimited.
    pub capacity_bytes: Option<u64>,
}

/// Counters of the model. Byte counts are of rounded block sizes, as PyTorch's
/// `allocated_bytes` and `reserved_bytes` are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CachingStats {
    /// Bytes in allocated blocks.
    pub allocated_bytes: u64,
    /// Bytes in segments (mapped bytes of expandable segments).
    pub reserved_bytes: u64,
    /// Most allocated bytes since the last reset.
    pub peak_allocated_bytes: u64,
    /// Most reserved bytes since the last reset.
    pub peak_reserved_bytes: u64,
    /// Bytes requested by live allocations, before rounding.
    pub requested_bytes: u64,
    /// `malloc` calls.
    pub alloc_calls: u64,
    /// `free` calls.
    pub free_calls: u64,
    /// `cudaMalloc` calls, or mappings that grew an expandable segment.
    pub segment_allocs: u64,
    /// `cudaFree` calls, or unmappings of an expandable segment's tail.
    pub segment_frees: u64,
    /// Times the device was full and cached segments were released to retry.
    pub cache_flushes: u64,
    /// Blocks split.
    pub splits: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Pool {
    Small,
    Large,
}

#[derive(Clone, Copy, Debug)]
struct Block {
    size: u64,
    segment: usize,
    allocated: bool,
    requested: u64,
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    base: u64,
    size: u64,
    pool: Pool,
    live: bool,
    expandable: bool,
}

/// The caching-allocator model. Addresses are in a virtual device address space private to
/// the model.
#[derive(Clone, Debug)]
pub struct CachingAllocator {
    config: CachingConfig,
    blocks: BTreeMap<u64, Block>,
    free_small: BTreeSet<(u64, u64)>,
    free_large: BTreeSet<(u64, u64)>,
    segments: Vec<Segment>,
    /// Expandable segment of each pool, once created.
    expandable: [Option<usize>; 2],
    next_base: u64,
    stats: CachingStats,
}

/// Virtual span reserved for each expandable segment (1 TiB: never the limit here).
const EXPANDABLE_SPAN: u64 = 1 << 40;
/// Gap between ordinary segments, so that two never touch.
const SEGMENT_GAP: u64 = 1 << 21;

fn round_size(size: u64) -> u64 {
    size.max(1).div_ceil(MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES
}

fn pool_of(size: u64) -> Pool {
    if size <= SMALL_REQUEST_BYTES {
        Pool::Small
    } else {
        Pool::Large
    }
}

fn segment_size_for(size: u64) -> u64 {
    if size <= SMALL_REQUEST_BYTES {
        SMALL_SEGMENT_BYTES
    } else if size < MIN_LARGE_ALLOC_BYTES {
        LARGE_SEGMENT_BYTES
    } else {
        size.div_ceil(ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES
    }
}

fn page_of(pool: Pool) -> u64 {
    match pool {
        Pool::Small => SMALL_SEGMENT_BYTES,
        Pool::Large => LARGE_SEGMENT_BYTES,
    }
}

impl CachingAllocator {
    /// An empty allocator with `config`.
    pub fn new(config: CachingConfig) -> Self {
        Self {
            config,
            blocks: BTreeMap::new(),
            free_small: BTreeSet::new(),
            free_large: BTreeSet::new(),
            segments: Vec::new(),
            expandable: [None, None],
            next_base: 1 << 32,
            stats: CachingStats::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> CachingConfig {
        self.config
    }

    /// The counters.
    pub fn stats(&self) -> CachingStats {
        self.stats
    }

    /// Resets the peaks to the current values and the call counters to zero
    /// (`torch.cuda.reset_peak_memory_stats` plus a reset of the counts).
    pub fn reset_counters(&mut self) {
        let s = &mut self.stats;
        s.peak_allocated_bytes = s.allocated_bytes;
        s.peak_reserved_bytes = s.reserved_bytes;
        s.alloc_calls = 0;
        s.free_calls = 0;
        s.segment_allocs = 0;
        s.segment_frees = 0;
        s.cache_flushes = 0;
        s.splits = 0;
    }

    fn free_set(&mut self, pool: Pool) -> &mut BTreeSet<(u64, u64)> {
        match pool {
            Pool::Small => &mut self.free_small,
            Pool::Large => &mut self.free_large,
        }
    }

    /// Allocates `size` bytes; returns the block's device address.
    ///
    /// # Errors
    ///
    /// [`TrainingError::OutOfMemory`] when the device is full even after releasing every
    /// cached segment.
    pub fn malloc(&mut self, size: u64) -> Result<u64, TrainingError> {
        let rounded = round_size(size);
        let pool = pool_of(rounded);
        self.stats.alloc_calls += 1;
        let addr = match self.best_fit(pool, rounded) {
            Some(addr) => addr,
            // As PyTorch's `alloc_block`, the new memory is used directly, without the
            // `max_split_size` checks of the free-block search.
            None => self.grow(pool, rounded)?,
        };
        self.take(addr, pool, rounded, size);
        Ok(addr)
    }

    fn best_fit(&self, pool: Pool, size: u64) -> Option<u64> {
        let set = match pool {
            Pool::Small => &self.free_small,
            Pool::Large => &self.free_large,
        };
        let &(block_size, addr) = set.range((size, 0)..).next()?;
        if let Some(max_split) = self.config.max_split_bytes {
            if size < max_split && block_size >= max_split {
                return None;
            }
            if size >= max_split && block_size >= size + LARGE_SEGMENT_BYTES {
                return None;
            }
        }
        Some(addr)
    }

    /// Marks the free block at `addr` allocated for `size` (rounded) bytes, splitting off
    /// the rest when PyTorch would.
    fn take(&mut self, addr: u64, pool: Pool, size: u64, requested: u64) {
        let block = self.blocks[&addr];
        self.free_set(pool).remove(&(block.size, addr));
        let rest = block.size - size;
        let split = match pool {
            Pool::Small => rest >= MIN_BLOCK_BYTES,
            Pool::Large => {
                self.config.max_split_bytes.is_none_or(|m| size < m) && rest > SMALL_REQUEST_BYTES
            }
        };
        let taken = if split { size } else { block.size };
        if split {
            self.stats.splits += 1;
            self.blocks.insert(
                addr + size,
                Block {
                    size: rest,
                    segment: block.segment,
                    allocated: false,
                    requested: 0,
                },
            );
            self.free_set(pool).insert((rest, addr + size));
        }
        self.blocks.insert(
            addr,
            Block {
                size: taken,
                segment: block.segment,
                allocated: true,
                requested,
            },
        );
        self.stats.allocated_bytes += taken;
        self.stats.requested_bytes += requested;
        self.stats.peak_allocated_bytes = self
            .stats
            .peak_allocated_bytes
            .max(self.stats.allocated_bytes);
    }

    /// Adds memory to `pool` so that a block of `size` fits; returns the free block that
    /// holds it.
    fn grow(&mut self, pool: Pool, size: u64) -> Result<u64, TrainingError> {
        let needed = if self.config.expandable_segments {
            self.expandable_growth(pool, size)
        } else {
            segment_size_for(size)
        };
        if let Some(cap) = self.config.capacity_bytes
            && self.stats.reserved_bytes + needed > cap
        {
            self.stats.cache_flushes += 1;
            self.empty_cache();
            let needed = if self.config.expandable_segments {
                self.expandable_growth(pool, size)
            } else {
                needed
            };
            if self.stats.reserved_bytes + needed > cap {
                return Err(TrainingError::OutOfMemory {
                    requested_bytes: size,
                    reserved_bytes: self.stats.reserved_bytes,
                    capacity_bytes: cap,
                });
            }
        }
        let addr = if self.config.expandable_segments {
            self.map_expandable(pool, needed)
        } else {
            let base = self.next_base;
            self.next_base += needed + SEGMENT_GAP;
            let segment = self.segments.len();
            self.segments.push(Segment {
                base,
                size: needed,
                pool,
                live: true,
                expandable: false,
            });
            self.insert_free(base, needed, segment, pool)
        };
        self.stats.segment_allocs += 1;
        self.stats.reserved_bytes += needed;
        self.stats.peak_reserved_bytes = self
            .stats
            .peak_reserved_bytes
            .max(self.stats.reserved_bytes);
        Ok(addr)
    }

    /// Bytes to map at the end of the pool's expandable segment so that its tail block
    /// (free part included) holds `size`.
    fn expandable_growth(&self, pool: Pool, size: u64) -> u64 {
        let page = page_of(pool);
        let tail_free = self
            .expandable_segment(pool)
            .and_then(|seg| self.tail_block(seg))
            .filter(|(_, b)| !b.allocated)
            .map_or(0, |(_, b)| b.size);
        (size - tail_free.min(size)).div_ceil(page) * page
    }

    fn expandable_segment(&self, pool: Pool) -> Option<usize> {
        self.expandable[pool as usize]
    }

    fn tail_block(&self, segment: usize) -> Option<(u64, Block)> {
        let seg = self.segments[segment];
        self.blocks
            .range(seg.base..seg.base + seg.size)
            .next_back()
            .map(|(&a, &b)| (a, b))
    }

    fn map_expandable(&mut self, pool: Pool, bytes: u64) -> u64 {
        let segment = match self.expandable_segment(pool) {
            Some(s) => s,
            None => {
                let base = self.next_base;
                self.next_base += EXPANDABLE_SPAN;
                self.segments.push(Segment {
                    base,
                    size: 0,
                    pool,
                    live: true,
                    expandable: true,
                });
                let s = self.segments.len() - 1;
                self.expandable[pool as usize] = Some(s);
                s
            }
        };
        let seg = self.segments[segment];
        let end = seg.base + seg.size;
        self.segments[segment].size += bytes;
        self.insert_free(end, bytes, segment, pool)
    }

    /// Inserts a free block and merges it with free neighbours of its segment; returns the
    /// merged block's address.
    fn insert_free(&mut self, mut addr: u64, mut size: u64, segment: usize, pool: Pool) -> u64 {
        if let Some((&prev_addr, &prev)) = self.blocks.range(..addr).next_back()
            && prev.segment == segment
            && !prev.allocated
            && prev_addr + prev.size == addr
        {
            self.free_set(pool).remove(&(prev.size, prev_addr));
            self.blocks.remove(&prev_addr);
            addr = prev_addr;
            size += prev.size;
        }
        if let Some(&next) = self.blocks.get(&(addr + size))
            && next.segment == segment
            && !next.allocated
        {
            self.free_set(pool).remove(&(next.size, addr + size));
            self.blocks.remove(&(addr + size));
            size += next.size;
        }
        self.blocks.insert(
            addr,
            Block {
                size,
                segment,
                allocated: false,
                requested: 0,
            },
        );
        self.free_set(pool).insert((size, addr));
        addr
    }

    /// Frees the block at `addr`.
    ///
    /// # Panics
    ///
    /// If `addr` is not an allocated block (a broken trace).
    pub fn free(&mut self, addr: u64) {
        let block = self
            .blocks
            .remove(&addr)
            .filter(|b| b.allocated)
            .expect("free of an address that is not an allocated block");
        self.stats.free_calls += 1;
        self.stats.allocated_bytes -= block.size;
        self.stats.requested_bytes -= block.requested;
        let pool = self.segments[block.segment].pool;
        self.insert_free(addr, block.size, block.segment, pool);
    }

    /// Releases every entirely free segment (`torch.cuda.empty_cache`); for an expandable
    /// segment, unmaps the whole pages of its free tail.
    pub fn empty_cache(&mut self) {
        for s in 0..self.segments.len() {
            let seg = self.segments[s];
            if !seg.live {
                continue;
            }
            let Some((addr, tail)) = self.tail_block(s) else {
                continue;
            };
            if tail.allocated {
                continue;
            }
            if seg.expandable {
                let page = page_of(seg.pool);
                let release = tail.size / page * page;
                if release == 0 {
                    continue;
                }
                self.free_set(seg.pool).remove(&(tail.size, addr));
                self.blocks.remove(&addr);
                if tail.size > release {
                    let keep = tail.size - release;
                    self.blocks.insert(addr, Block { size: keep, ..tail });
                    self.free_set(seg.pool).insert((keep, addr));
                }
                self.segments[s].size -= release;
                self.stats.reserved_bytes -= release;
                self.stats.segment_frees += 1;
            } else if addr == seg.base && tail.size == seg.size {
                self.free_set(seg.pool).remove(&(tail.size, addr));
                self.blocks.remove(&addr);
                self.segments[s].live = false;
                self.stats.reserved_bytes -= seg.size;
                self.stats.segment_frees += 1;
            }
        }
    }

    /// Live (mapped) segments: `(base, size)`.
    pub fn segments(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segments
            .iter()
            .filter(|s| s.live && s.size > 0)
            .map(|s| (s.base, s.size))
    }

    /// Checks the model's invariants.
    ///
    /// # Errors
    ///
    /// A sentence naming the first invariant that does not hold.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut allocated = 0;
        let mut reserved = 0;
        let mut free_blocks = BTreeSet::new();
        for (s, seg) in self.segments.iter().enumerate() {
            if !seg.live {
                if self
                    .blocks
                    .range(seg.base..seg.base + seg.size.max(1))
                    .next()
                    .is_some()
                {
                    return Err(format!("released segment {s} still has blocks"));
                }
                continue;
            }
            reserved += seg.size;
            let mut cursor = seg.base;
            let mut prev_free = false;
            for (&addr, b) in self.blocks.range(seg.base..seg.base + seg.size.max(1)) {
                if b.segment != s {
                    return Err(format!(
                        "block {addr:#x} inside segment {s} belongs to {}",
                        b.segment
                    ));
                }
                if addr != cursor {
                    return Err(format!(
                        "segment {s}: gap or overlap at {addr:#x} (expected {cursor:#x})"
                    ));
                }
                if b.size == 0 || b.size % MIN_BLOCK_BYTES != 0 {
                    return Err(format!("block {addr:#x} has size {}", b.size));
                }
                if !b.allocated && prev_free {
                    return Err(format!("two neighbouring free blocks at {addr:#x}"));
                }
                prev_free = !b.allocated;
                if b.allocated {
                    allocated += b.size;
                } else {
                    free_blocks.insert((seg.pool, b.size, addr));
                }
                cursor = addr + b.size;
            }
            if cursor != seg.base + seg.size {
                return Err(format!("segment {s} is not tiled to its end"));
            }
        }
        let pooled: BTreeSet<(Pool, u64, u64)> = self
            .free_small
            .iter()
            .map(|&(s, a)| (Pool::Small, s, a))
            .chain(self.free_large.iter().map(|&(s, a)| (Pool::Large, s, a)))
            .collect();
        if pooled != free_blocks {
            return Err("the pools do not hold exactly the free blocks".into());
        }
        let tiled: usize = self
            .segments
            .iter()
            .filter(|s| s.live)
            .map(|s| self.blocks.range(s.base..s.base + s.size.max(1)).count())
            .sum();
        if tiled != self.blocks.len() {
            return Err("a block lies outside every live segment".into());
        }
        if allocated != self.stats.allocated_bytes || reserved != self.stats.reserved_bytes {
            return Err(format!(
                "counters disagree: allocated {allocated} vs {}, reserved {reserved} vs {}",
                self.stats.allocated_bytes, self.stats.reserved_bytes
            ));
        }
        if allocated > reserved {
            return Err("allocated exceeds reserved".into());
        }
        Ok(())
    }
}
