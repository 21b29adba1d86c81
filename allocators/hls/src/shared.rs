//! The model behind the [`Allocator`] trait.
//!
//! [`SharedOnChip`] puts an [`OnChipMemory`] behind a lock (the hardware serialises
//! requests at each heap's FSM too). As an allocator it serves accelerator 0, so heap 0;
//! [`SharedOnChip::port`] gives the allocator an accelerator `i` sees, bound to heap
//! `i mod H`. Handles are [`Handle`]s: relocatable, with stable virtual addresses, so
//! [`Checked`](alloclab_core::Checked) can shadow them across compactions.
//!
//! Requests are refused with [`AllocErrorKind::ZeroSize`] for size 0,
//! [`AllocErrorKind::AlignmentUnsupported`] above the configured alignment,
//! [`AllocErrorKind::OutOfMemory`] for capacity failures and
//! `AllocErrorKind::Other("fragmentation ...")` for fragmentation failures.

use core::alloc::Layout;

use alloclab_core::sync::Mutex;
use alloclab_core::{AllocError, AllocErrorKind, Allocator, Stats};

use crate::config::{ConfigError, OnChipConfig};
use crate::handle::Handle;
use crate::memory::{AllocateError, FailureClass, OnChipMemory};

/// The message of a fragmentation failure through the trait.
pub const FRAGMENTATION_MESSAGE: &str =
    "fragmentation: enough free bytes, but no free run long enough";

/// An [`OnChipMemory`] shared between threads, usable as an [`Allocator`].
#[derive(Debug)]
pub struct SharedOnChip {
    name: String,
    memory: Mutex<OnChipMemory>,
}

/// The allocator accelerator `accelerator` sees: its heap of a [`SharedOnChip`].
#[derive(Clone, Copy, Debug)]
pub struct AcceleratorPort<'a> {
    shared: &'a SharedOnChip,
    accelerator: usize,
}

impl SharedOnChip {
    /// A model named `name` (for reports).
    ///
    /// # Errors
    ///
    /// The configuration's [`ConfigError`], if any.
    pub fn new(name: impl Into<String>, config: OnChipConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            name: name.into(),
            memory: Mutex::new(OnChipMemory::new(config)?),
        })
    }

    /// Runs `f` on the model under its lock (to read bytes, locations, counters).
    pub fn with<R>(&self, f: impl FnOnce(&mut OnChipMemory) -> R) -> R {
        let mut guard = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    /// The allocator of accelerator `accelerator`.
    pub fn port(&self, accelerator: usize) -> AcceleratorPort<'_> {
        AcceleratorPort {
            shared: self,
            accelerator,
        }
    }

    fn allocate_for(&self, accelerator: usize, layout: Layout) -> Result<Handle, AllocError> {
        let kind = |e: AllocateError| match e {
            AllocateError::ZeroSize => AllocErrorKind::ZeroSize,
            AllocateError::AlignmentUnsupported { .. } => AllocErrorKind::AlignmentUnsupported,
            AllocateError::NoSuchHeap { .. } => AllocErrorKind::Other("no such heap"),
            AllocateError::Failed(f) => match f.class {
                FailureClass::Capacity => AllocErrorKind::OutOfMemory,
                FailureClass::Fragmentation => AllocErrorKind::Other(FRAGMENTATION_MESSAGE),
            },
        };
        self.with(|m| {
            let max = m.config().align_bytes as usize;
            if layout.align() > max {
                return Err(AllocError::new(
                    layout,
                    kind(AllocateError::AlignmentUnsupported {
                        align: layout.align(),
                        max,
                    }),
                ));
            }
            m.allocate(accelerator, layout.size())
                .map(|a| a.handle)
                .map_err(|e| AllocError::new(layout, kind(e)))
        })
    }

    fn deallocate_handle(&self, handle: Handle, layout: Layout) {
        self.with(|m| {
            let size = m.location(handle).map(|l| l.size_bytes);
            assert_eq!(
                size,
                Ok(layout.size() as u64),
                "deallocate: {handle:?} is not a live block of this size"
            );
            m.free(handle).expect("checked live above");
        });
    }

    fn stats_of(&self) -> Stats {
        self.with(|m| {
            let c = m.counters();
            let footprint = m.config().heap_bytes() * m.config().heaps as u64;
            Stats {
                live_bytes: Some(c.allocated_bytes),
                footprint_bytes: Some(footprint),
                peak_footprint_bytes: Some(footprint),
                allocations: Some(c.allocations),
                deallocations: Some(c.frees),
                max_alloc_steps: Some(c.alloc_cycles_max),
                max_free_steps: Some(c.free_cycles_max),
            }
        })
    }
}

/// Accelerator 0's view (heap 0). `max_alloc_steps` and `max_free_steps` are cycles,
/// defragmentation excluded; `live_bytes` counts whole units; the footprint is all heaps.
impl Allocator for SharedOnChip {
    type Handle = Handle;

    fn allocate(&self, layout: Layout) -> Result<Handle, AllocError> {
        self.allocate_for(0, layout)
    }

    /// # Panics
    ///
    /// If `handle` is not a live block of `layout.size()` bytes (the caller broke the
    /// contract; the model is left unchanged).
    unsafe fn deallocate(&self, handle: Handle, layout: Layout) {
        self.deallocate_handle(handle, layout);
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn stats(&self) -> Stats {
        self.stats_of()
    }
}

/// As [`SharedOnChip`]'s impl, for one accelerator's heap; stats are those of the whole
/// memory.
impl Allocator for AcceleratorPort<'_> {
    type Handle = Handle;

    fn allocate(&self, layout: Layout) -> Result<Handle, AllocError> {
        self.shared.allocate_for(self.accelerator, layout)
    }

    /// # Panics
    ///
    /// As [`SharedOnChip`]'s.
    unsafe fn deallocate(&self, handle: Handle, layout: Layout) {
        self.shared.deallocate_handle(handle, layout);
    }

    fn name(&self) -> &str {
        &self.shared.name
    }

    fn stats(&self) -> Stats {
        self.shared.stats_of()
    }
}
