//! Allocator counters.

/// A snapshot of an allocator's counters. `None` means "not tracked by this allocator", never
/// zero: a harness must not read an absent counter as a measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes in live blocks, as the allocator accounts them (it documents whether requested or
    /// rounded-up sizes are counted; either way at least the bytes requested).
    pub live_bytes: Option<u64>,
    /// Bytes currently taken from the OS or the medium (mapped, reserved in a pool, ...).
    pub footprint_bytes: Option<u64>,
    /// The most `footprint_bytes` has been since the allocator was created.
    pub peak_footprint_bytes: Option<u64>,
    /// Successful allocations. A reallocation counts as one deallocation and one
    /// allocation, whether it moved the block or not.
    pub allocations: Option<u64>,
    /// Deallocations.
    pub deallocations: Option<u64>,
    /// The most steps any one allocation took, for allocators that count steps.
    pub max_alloc_steps: Option<u64>,
    /// The most steps any one deallocation took (local or remote), for allocators that count.
    pub max_free_steps: Option<u64>,
}

impl Stats {
    /// Live blocks according to the operation counters, when both are tracked.
    pub fn live_blocks(&self) -> Option<u64> {
        Some(self.allocations?.saturating_sub(self.deallocations?))
    }
}
