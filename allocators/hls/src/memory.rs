//! The on-chip memory: `H` heaps, the allocator FSM's costs, failure classes and counters.
//!
//! **Allocation** (Memluv's `malloc`, one heap): round the size up to whole units; if the
//! heap's allocated units plus the request exceed the heap, fail at once — a *capacity*
//! failure. Otherwise scan the bitmap first fit (from the base, or from the cached position);
//! if no run is long enough the failure is due to *fragmentation* (free bytes would have
//! sufficed). With a defragmenter triggered on such failures, compact toward the base until a
//! run of the request's size exists (within the budget; which blocks move is the
//! [`CompactWindow`](crate::CompactWindow)), then scan once more.
//!
//! **Free**: clear the block's bits (a read-modify-write of partial head and tail words),
//! release its handle-table slot. With a free-run threshold, scan the whole bitmap for the
//! largest free run and compact when it is below the threshold.
//!
//! **Cycles.** An operation costs its FSM steps, its bitmap words read and written and its
//! handle-table accesses; a defragmentation call's cycles are counted on their own (see
//! [`DefragReport`]), never inside the allocation or free that triggered it.

use crate::config::{ConfigError, OnChipConfig};
use crate::defrag::DefragReport;
use crate::handle::Handle;
use crate::heap::Heap;

/// Why an allocation of a valid size failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// Not enough free bytes in the heap: allocated + request > heap size.
    Capacity,
    /// Enough free bytes, but no free run long enough.
    Fragmentation,
}

/// A failed allocation: its class and the heap's state when it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocFailure {
    /// Capacity or fragmentation.
    pub class: FailureClass,
    /// The heap asked.
    pub heap: usize,
    /// Bytes asked for.
    pub requested_bytes: u64,
    /// Free bytes of the heap (after any defragmentation).
    pub free_bytes: u64,
    /// The heap's largest free run, in bytes (after any defragmentation).
    pub largest_free_run_bytes: u64,
    /// Cycles the request took (defragmentation excluded).
    pub cycles: u64,
    /// The defragmentation the failure triggered, if any.
    pub defrag: Option<DefragReport>,
}

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocateError {
    /// A size of zero (the model serves no empty blocks).
    ZeroSize,
    /// An alignment above the configured one.
    AlignmentUnsupported {
        /// Asked for.
        align: usize,
        /// The most the configuration offers.
        max: usize,
    },
    /// An accelerator or heap index out of range.
    NoSuchHeap {
        /// The heap index.
        heap: usize,
    },
    /// A request of a valid size that could not be served.
    Failed(AllocFailure),
}

impl core::fmt::Display for AllocateError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::ZeroSize => f.write_str("zero-size request"),
            Self::AlignmentUnsupported { align, max } => {
                write!(f, "alignment {align} above the configured {max}")
            }
            Self::NoSuchHeap { heap } => write!(f, "no heap {heap}"),
            Self::Failed(e) => write!(
                f,
                "{} failure in heap {}: {} bytes asked, {} free, largest free run {}",
                match e.class {
                    FailureClass::Capacity => "capacity",
                    FailureClass::Fragmentation => "fragmentation",
                },
                e.heap,
                e.requested_bytes,
                e.free_bytes,
                e.largest_free_run_bytes
            ),
        }
    }
}

impl std::error::Error for AllocateError {}

/// A handle that names no live block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleHandle(pub Handle);

impl core::fmt::Display for StaleHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?} names no live block", self.0)
    }
}

impl std::error::Error for StaleHandle {}

/// A successful allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// The block.
    pub handle: Handle,
    /// Cycles the request took (defragmentation excluded).
    pub cycles: u64,
    /// The defragmentation it triggered, if any.
    pub defrag: Option<DefragReport>,
}

/// A completed free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Free {
    /// Cycles the free took (defragmentation excluded; the threshold check included).
    pub cycles: u64,
    /// The defragmentation it triggered, if any.
    pub defrag: Option<DefragReport>,
}

/// Where a block is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Heap index.
    pub heap: usize,
    /// Byte offset of the block in its heap.
    pub offset_bytes: u64,
    /// Bytes asked for.
    pub size_bytes: u64,
    /// Bytes the block covers (whole units).
    pub reserved_bytes: u64,
}

/// Totals over the life of an [`OnChipMemory`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Successful allocations.
    pub allocations: u64,
    /// Allocation requests of a valid size (successful or not).
    pub alloc_requests: u64,
    /// Capacity failures.
    pub capacity_failures: u64,
    /// Fragmentation failures.
    pub fragmentation_failures: u64,
    /// Frees.
    pub frees: u64,
    /// Cycles of all allocation requests.
    pub alloc_cycles: u64,
    /// The most cycles one allocation request took.
    pub alloc_cycles_max: u64,
    /// Cycles of all frees.
    pub free_cycles: u64,
    /// The most cycles one free took.
    pub free_cycles_max: u64,
    /// Defragmentation calls.
    pub defrag_calls: u64,
    /// Cycles of all defragmentation calls.
    pub defrag_cycles: u64,
    /// The most cycles one call took.
    pub defrag_cycles_max: u64,
    /// Words moved by all calls.
    pub words_moved: u64,
    /// The most words one call moved.
    pub words_moved_max: u64,
    /// Blocks relocated.
    pub blocks_moved: u64,
    /// Allocated bytes now (whole units), over all heaps.
    pub allocated_bytes: u64,
    /// Bytes asked for by the live blocks.
    pub requested_bytes: u64,
}

impl Counters {
    /// All failures.
    pub fn failures(&self) -> u64 {
        self.capacity_failures + self.fragmentation_failures
    }

    fn record_defrag(&mut self, d: &DefragReport) {
        self.defrag_calls += 1;
        self.defrag_cycles += d.cycles;
        self.defrag_cycles_max = self.defrag_cycles_max.max(d.cycles);
        self.words_moved += d.words_moved;
        self.words_moved_max = self.words_moved_max.max(d.words_moved);
        self.blocks_moved += u64::from(d.blocks_moved);
    }
}

/// The on-chip memory of a many-accelerator design: `H` heaps, one allocator FSM each.
///
/// Single-threaded (`&mut self`): the simulator drives it, and
/// [`SharedOnChip`](crate::SharedOnChip) puts it behind a lock for the
/// [`Allocator`](alloclab_core::Allocator) trait.
#[derive(Clone, Debug)]
pub struct OnChipMemory {
    config: OnChipConfig,
    heaps: Vec<Heap>,
    counters: Counters,
}

impl OnChipMemory {
    /// An empty memory.
    ///
    /// # Errors
    ///
    /// The configuration's [`ConfigError`], if any.
    pub fn new(config: OnChipConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            heaps: (0..config.heaps).map(|_| Heap::new(&config)).collect(),
            config,
            counters: Counters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OnChipConfig {
        &self.config
    }

    /// Totals so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The heap accelerator `accelerator` allocates from: `accelerator mod H`.
    pub fn heap_of(&self, accelerator: usize) -> usize {
        accelerator % self.config.heaps
    }

    /// Allocates `size_bytes` for accelerator `accelerator` (from heap `accelerator mod H`).
    ///
    /// # Errors
    ///
    /// As [`allocate_in`](Self::allocate_in).
    pub fn allocate(
        &mut self,
        accelerator: usize,
        size_bytes: usize,
    ) -> Result<Allocation, AllocateError> {
        self.allocate_in(self.heap_of(accelerator), size_bytes)
    }

    /// Allocates `size_bytes` from heap `heap`.
    ///
    /// # Errors
    ///
    /// [`AllocateError::ZeroSize`], [`AllocateError::NoSuchHeap`], or
    /// [`AllocateError::Failed`] with the failure's class.
    pub fn allocate_in(
        &mut self,
        heap: usize,
        size_bytes: usize,
    ) -> Result<Allocation, AllocateError> {
        if size_bytes == 0 {
            return Err(AllocateError::ZeroSize);
        }
        if heap >= self.heaps.len() {
            return Err(AllocateError::NoSuchHeap { heap });
        }
        let config = self.config;
        let costs = config.costs;
        let unit = u64::from(config.unit_bytes());
        let h = &mut self.heaps[heap];
        let need64 = (size_bytes as u64).div_ceil(unit);
        let mut cycles = costs.alloc_fsm_steps * costs.fsm_step;
        self.counters.alloc_requests += 1;

        let fits = need64 <= u64::from(h.free_units());
        let mut defrag = None;
        let mut found = None;
        if fits {
            let need = need64 as u32;
            let start = if config.cached_start { h.next_start } else { 0 };
            let scan = h.bitmap.first_fit(need, start);
            cycles += scan.words_read * costs.bitmap_word_read;
            found = scan.found;
            if found.is_none()
                && let Some(d) = config.defrag.filter(|d| d.on_fragmentation_failure)
            {
                let report = h.compact(Some(need), &config, &d);
                self.counters.record_defrag(&report);
                defrag = Some(report);
                let retry = h
                    .bitmap
                    .first_fit(need, if config.cached_start { h.next_start } else { 0 });
                cycles += retry.words_read * costs.bitmap_word_read;
                found = retry.found;
            }
        }
        let Some(start) = found else {
            let failure = AllocFailure {
                class: if fits {
                    FailureClass::Fragmentation
                } else {
                    FailureClass::Capacity
                },
                heap,
                requested_bytes: size_bytes as u64,
                free_bytes: u64::from(h.free_units()) * unit,
                largest_free_run_bytes: u64::from(h.bitmap.largest_free_run()) * unit,
                cycles,
                defrag,
            };
            match failure.class {
                FailureClass::Capacity => self.counters.capacity_failures += 1,
                FailureClass::Fragmentation => self.counters.fragmentation_failures += 1,
            }
            self.record_alloc_cycles(cycles);
            return Err(AllocateError::Failed(failure));
        };
        let need = need64 as u32;
        let placed = h.place(start, need, size_bytes as u32);
        cycles += h.bitmap.words_spanned(start, start + need) * costs.bitmap_word_write
            + costs.handle_table_access;
        self.counters.allocations += 1;
        self.counters.allocated_bytes += need64 * unit;
        self.counters.requested_bytes += size_bytes as u64;
        self.record_alloc_cycles(cycles);
        Ok(Allocation {
            handle: Handle {
                heap: heap as u8,
                slot: placed.slot,
                generation: placed.generation,
            },
            cycles,
            defrag,
        })
    }

    fn record_alloc_cycles(&mut self, cycles: u64) {
        self.counters.alloc_cycles += cycles;
        self.counters.alloc_cycles_max = self.counters.alloc_cycles_max.max(cycles);
    }

    /// Frees `handle`'s block.
    ///
    /// # Errors
    ///
    /// [`StaleHandle`] if `handle` names no live block (nothing changes).
    pub fn free(&mut self, handle: Handle) -> Result<Free, StaleHandle> {
        let config = self.config;
        let costs = config.costs;
        let unit = u64::from(config.unit_bytes());
        let h = self
            .heaps
            .get_mut(handle.heap())
            .ok_or(StaleHandle(handle))?;
        let block = h
            .release(handle.slot, handle.generation)
            .ok_or(StaleHandle(handle))?;
        let (start, end) = (block.start, block.start + block.units);
        let written = h.bitmap.words_spanned(start, end);
        // Head and tail words shared with neighbours are read, masked and written back.
        let bpu = u64::from(config.bits_per_unit());
        let wb = u64::from(config.word_bits);
        let partial =
            u64::from(u64::from(start) * bpu % wb != 0) + u64::from(u64::from(end) * bpu % wb != 0);
        let mut cycles = costs.free_fsm_steps * costs.fsm_step
            + costs.handle_table_access
            + partial.min(written) * costs.bitmap_word_read
            + written * costs.bitmap_word_write;
        let mut defrag = None;
        if let Some(d) = config.defrag
            && let Some(threshold) = d.free_run_threshold_bytes
        {
            cycles += h.bitmap.total_words() * costs.bitmap_word_read;
            let largest = h.bitmap.largest_free_run();
            let free = h.free_units();
            let goal = (u64::from(threshold).div_ceil(unit) as u32).min(free);
            if largest < goal {
                let report = h.compact(Some(goal), &config, &d);
                self.counters.record_defrag(&report);
                defrag = Some(report);
            }
        }
        self.counters.frees += 1;
        self.counters.allocated_bytes -= u64::from(block.units) * unit;
        self.counters.requested_bytes -= u64::from(block.size_bytes);
        self.counters.free_cycles += cycles;
        self.counters.free_cycles_max = self.counters.free_cycles_max.max(cycles);
        Ok(Free { cycles, defrag })
    }

    /// Runs the defragmenter on heap `heap` now, as far as its budget allows (a full
    /// compaction if the budget suffices).
    ///
    /// # Panics
    ///
    /// If the configuration has no defragmenter, or `heap` is out of range.
    pub fn compact(&mut self, heap: usize) -> DefragReport {
        let d = self
            .config
            .defrag
            .expect("compact() needs a configuration with a defragmenter");
        let config = self.config;
        let report = self.heaps[heap].compact(None, &config, &d);
        self.counters.record_defrag(&report);
        report
    }

    /// Where `handle`'s block is now.
    ///
    /// # Errors
    ///
    /// [`StaleHandle`] if it names no live block.
    pub fn location(&self, handle: Handle) -> Result<Location, StaleHandle> {
        let unit = u64::from(self.config.unit_bytes());
        let b = self
            .heaps
            .get(handle.heap())
            .and_then(|h| h.table.get(handle.slot, handle.generation))
            .ok_or(StaleHandle(handle))?;
        Ok(Location {
            heap: handle.heap(),
            offset_bytes: u64::from(b.start) * unit,
            size_bytes: u64::from(b.size_bytes),
            reserved_bytes: u64::from(b.units) * unit,
        })
    }

    /// The bytes of `handle`'s block (as many as were asked for).
    ///
    /// # Errors
    ///
    /// [`StaleHandle`] if it names no live block.
    pub fn bytes(&self, handle: Handle) -> Result<&[u8], StaleHandle> {
        let l = self.location(handle)?;
        let start = l.offset_bytes as usize;
        Ok(&self.heaps[l.heap].data[start..start + l.size_bytes as usize])
    }

    /// The bytes of `handle`'s block, writable.
    ///
    /// # Errors
    ///
    /// [`StaleHandle`] if it names no live block.
    pub fn bytes_mut(&mut self, handle: Handle) -> Result<&mut [u8], StaleHandle> {
        let l = self.location(handle)?;
        let start = l.offset_bytes as usize;
        Ok(&mut self.heaps[l.heap].data[start..start + l.size_bytes as usize])
    }

    /// Every live block of heap `heap`: its handle and location, in address order.
    pub fn live_blocks(&self, heap: usize) -> Vec<(Handle, Location)> {
        let h = &self.heaps[heap];
        let mut out: Vec<(Handle, Location)> = h
            .table
            .iter()
            .map(|(slot, generation, _)| {
                let handle = Handle {
                    heap: heap as u8,
                    slot,
                    generation,
                };
                (handle, self.location(handle).expect("live"))
            })
            .collect();
        out.sort_by_key(|(_, l)| l.offset_bytes);
        out
    }

    /// The bit of heap `heap`'s free map that covers granule `granule` (a byte, or a word
    /// with [`BitmapGranularity::Word`](crate::BitmapGranularity::Word)).
    pub fn bitmap_bit(&self, heap: usize, granule: u64) -> bool {
        self.heaps[heap].bitmap.hardware_bit(granule)
    }

    /// Free bytes of heap `heap`.
    pub fn free_bytes(&self, heap: usize) -> u64 {
        u64::from(self.heaps[heap].free_units()) * u64::from(self.config.unit_bytes())
    }

    /// The largest free run of heap `heap`, in bytes.
    pub fn largest_free_run_bytes(&self, heap: usize) -> u64 {
        u64::from(self.heaps[heap].bitmap.largest_free_run()) * u64::from(self.config.unit_bytes())
    }

    /// Checks every heap's invariants (see the `heap` module) and the byte counters.
    ///
    /// # Errors
    ///
    /// A description of the first broken invariant.
    pub fn check_invariants(&self) -> Result<(), String> {
        let unit = self.config.unit_bytes();
        let mut allocated = 0u64;
        let mut requested = 0u64;
        for (i, h) in self.heaps.iter().enumerate() {
            h.check(unit).map_err(|e| format!("heap {i}: {e}"))?;
            for (_, _, b) in h.table.iter() {
                allocated += u64::from(b.units) * u64::from(unit);
                requested += u64::from(b.size_bytes);
            }
        }
        if (allocated, requested) != (self.counters.allocated_bytes, self.counters.requested_bytes)
        {
            return Err(format!(
                "counters say {} allocated / {} requested bytes, blocks hold {allocated} / {requested}",
                self.counters.allocated_bytes, self.counters.requested_bytes
            ));
        }
        Ok(())
    }
}
