//! [`SimMedium`]: the crash simulator.
//!
//! Two images of the same length, indexed by the same offsets:
//!
//! ```text
//!   working  ──flush(offset, len)──▶  pending: line ↦ [snapshot, snapshot, …]
//!   (plain memory,                      (the line's working contents at each flush
//!    what base() points to)              since the last fence, oldest first)
//!                                                   │ fence()
//!                                                   ▼
//!                                      durable: the latest snapshot of each pending line
//! ```
//!
//! Stores are plain writes to the working image through [`Medium::base`]; the simulator does
//! not see them. A flush copies each cache line it touches, as it is now, into the pending
//! set; a fence moves each pending line's latest snapshot into the durable image and empties
//! the set. That is the Px86 rule: a store is durable once a flush of its line and then a
//! fence have followed it.
//!
//! A power failure now ([`SimMedium::crash_image`]) leaves the durable image, except that
//! every line not yet persisted — its working contents differ from its durable ones, or it
//! has pending snapshots — independently keeps one of: its durable contents, any of its
//! pending snapshots, or its working contents, drawn uniformly among the distinct ones with
//! the caller's random numbers. The cache line is the unit, so an aligned 8-byte store is
//! never torn. What the simulator cannot offer are states of a line between two snapshots it
//! never saw (two unflushed stores to one line, of which only the first survives): Px86
//! allows them, so a crash test here explores a subset of the real crash states at each
//! point, and crash points at every fence ([`SimMedium::capture_at_fence`]) are what widen it.
//!
//! Flush and fence bookkeeping sits behind a mutex, so the simulator may be shared between
//! threads. It is meant for tests: a flush reads the working line while holding that mutex,
//! which races (as a meaningless flush would on hardware) with a store to the same line by
//! another thread that is not ordered with the flush.

use std::alloc::{Layout, alloc_zeroed, dealloc, handle_alloc_error};
use std::collections::BTreeMap;
use std::fmt;
use std::ptr::NonNull;

use crate::sync::raw::SharedArc as Arc;
use crate::sync::{Mutex, MutexGuard};

use super::{CACHE_LINE, Medium, MediumKind, PersistStats, check_range};

/// Alignment of the working image: a page, as a mapping would be.
const PAGE: usize = 4096;

/// A callback run at every fence, before the fence takes effect: the fence's number
/// (1 for the first fence of the medium's life) and the medium.
pub type FenceHook = dyn Fn(u64, &SimMedium) + Send + Sync;

/// A crash image taken at a fence by [`SimMedium::capture_at_fence`] or
/// [`SimMedium::capture_at_every_fence`].
#[derive(Clone, PartialEq, Eq)]
pub struct CrashCapture {
    /// The fence's number (1 for the first): the image is what a crash just before that
    /// fence took effect would leave.
    pub fence: u64,
    /// The image, `len()` bytes: reopen it with [`SimMedium::from_image`].
    pub image: Box<[u8]>,
}

impl fmt::Debug for CrashCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashCapture")
            .field("fence", &self.fence)
            .field("image_len", &self.image.len())
            .finish()
    }
}

/// The workspace's SplitMix64 (`alloclab_core::rng`): enough to draw crash points
/// reproducibly.
pub use alloclab_core::rng::SplitMix64;

/// Which fences to capture crash images at, how many, and the generator that draws them.
#[derive(Debug)]
struct CapturePlan {
    /// `Some(k)`: at fence `k` only; `None`: at every fence.
    fence: Option<u64>,
    images: usize,
    rng: SplitMix64,
}

/// The bookkeeping behind the mutex.
struct SimState {
    /// `round_up(len, CACHE_LINE)` bytes: what survives if nothing unfenced does.
    durable: Box<[u8]>,
    /// Line index ↦ its distinct snapshots since the last fence, oldest first.
    pending: BTreeMap<usize, Vec<[u8; CACHE_LINE]>>,
    stats: PersistStats,
    plan: Option<CapturePlan>,
    captures: Vec<CrashCapture>,
}

/// The crash simulator (see the module docs).
pub struct SimMedium {
    /// The working image: `layout.size() >= round_up(len, CACHE_LINE)` bytes, page-aligned,
    /// owned, freed in `Drop`; the bytes past `len` stay zero.
    working: NonNull<u8>,
    layout: Layout,
    len: usize,
    state: Mutex<SimState>,
    hook: Mutex<Option<Arc<FenceHook>>>,
}

// SAFETY: the working image is heap memory owned by the medium until drop; all other state
// sits behind mutexes. Stores through `base()` are synchronized by their callers.
unsafe impl Send for SimMedium {}
// SAFETY: as for `Send`; through `&SimMedium` the bookkeeping changes only under its
// mutexes, and the working image is only read (by flushes, crash images and copies); the
// module docs name the race with a caller's unordered store that a caller must avoid.
unsafe impl Sync for SimMedium {}

impl fmt::Debug for SimMedium {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimMedium")
            .field("len", &self.len)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl SimMedium {
    /// A medium of `len` zero bytes, all durable.
    pub fn new(len: usize) -> Self {
        Self::with_durable(
            vec![0; len.next_multiple_of(CACHE_LINE)].into_boxed_slice(),
            len,
        )
    }

    /// A medium whose working and durable images are both `image`: a crash image reopened,
    /// as a pool file is after a power failure.
    pub fn from_image(image: impl Into<Box<[u8]>>) -> Self {
        let image: Box<[u8]> = image.into();
        let len = image.len();
        let mut durable = vec![0; len.next_multiple_of(CACHE_LINE)];
        durable[..len].copy_from_slice(&image);
        let medium = Self::with_durable(durable.into_boxed_slice(), len);
        // SAFETY: the working image has at least `len` bytes and is not yet shared.
        unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), medium.working.as_ptr(), len) };
        medium
    }

    fn with_durable(durable: Box<[u8]>, len: usize) -> Self {
        let size = durable.len().max(1).next_multiple_of(PAGE);
        let layout = Layout::from_size_align(size, PAGE).expect("simulated medium too large");
        // SAFETY: `layout` has a non-zero size.
        let working = unsafe { alloc_zeroed(layout) };
        let Some(working) = NonNull::new(working) else {
            handle_alloc_error(layout)
        };
        Self {
            working,
            layout,
            len,
            state: Mutex::new(SimState {
                durable,
                pending: BTreeMap::new(),
                stats: PersistStats::default(),
                plan: None,
                captures: Vec::new(),
            }),
            hook: Mutex::new(None),
        }
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding the lock leaves the bookkeeping consistent (each step is
        // one assignment), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The working contents of line `line` (whole lines exist: the image is padded).
    fn working_line(&self, line: usize) -> [u8; CACHE_LINE] {
        let mut contents = [0; CACHE_LINE];
        // SAFETY: `line * CACHE_LINE + CACHE_LINE <= round_up(len, CACHE_LINE) <=
        // layout.size()`; see the module docs for concurrent stores.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.working.as_ptr().add(line * CACHE_LINE),
                contents.as_mut_ptr(),
                CACHE_LINE,
            );
        }
        contents
    }

    fn lines(&self) -> usize {
        self.len.div_ceil(CACHE_LINE)
    }

    /// The image a power failure would leave now: for every line not yet persisted, one of
    /// its durable contents, pending snapshots and working contents, drawn uniformly among
    /// the distinct ones with `rng` (one call per such line).
    pub fn crash_image(&self, rng: &mut impl FnMut() -> u64) -> Box<[u8]> {
        let state = self.state();
        self.crash_image_locked(&state, rng)
    }

    fn crash_image_locked(&self, state: &SimState, rng: &mut impl FnMut() -> u64) -> Box<[u8]> {
        let mut image = state.durable.clone();
        let mut candidates: Vec<[u8; CACHE_LINE]> = Vec::with_capacity(4);
        for line in 0..self.lines() {
            let range = line * CACHE_LINE..(line + 1) * CACHE_LINE;
            let working = self.working_line(line);
            let durable = &state.durable[range.clone()];
            let pending = state.pending.get(&line);
            if pending.is_none() && working[..] == *durable {
                continue;
            }
            candidates.clear();
            candidates.push(durable.try_into().expect("a line is CACHE_LINE bytes"));
            for snapshot in pending.into_iter().flatten().chain([&working]) {
                if !candidates.contains(snapshot) {
                    candidates.push(*snapshot);
                }
            }
            // Modulo bias is below 2^-60 for a handful of candidates.
            let pick = (rng() % candidates.len() as u64) as usize;
            image[range].copy_from_slice(&candidates[pick]);
        }
        let mut image = image.into_vec();
        image.truncate(self.len);
        image.into_boxed_slice()
    }

    /// What survives a crash now if nothing unfenced does.
    pub fn durable_image(&self) -> Box<[u8]> {
        self.state().durable[..self.len].into()
    }

    /// A copy of the working image (what the program sees now).
    pub fn working_image(&self) -> Box<[u8]> {
        let mut image = vec![0; self.len];
        // SAFETY: the working image has `len` readable bytes; see the module docs for
        // concurrent stores.
        unsafe {
            std::ptr::copy_nonoverlapping(self.working.as_ptr(), image.as_mut_ptr(), self.len)
        };
        image.into_boxed_slice()
    }

    /// Lines a crash now could leave otherwise than the program sees them: lines whose
    /// working contents differ from their durable ones, or that have pending snapshots.
    pub fn unpersisted_lines(&self) -> usize {
        let state = self.state();
        (0..self.lines())
            .filter(|&line| {
                state.pending.contains_key(&line)
                    || self.working_line(line)[..]
                        != state.durable[line * CACHE_LINE..(line + 1) * CACHE_LINE]
            })
            .count()
    }

    /// Lines flushed since the last fence.
    pub fn pending_lines(&self) -> usize {
        self.state().pending.len()
    }

    /// Runs `hook` at every later fence, before the fence takes effect (`None` removes it).
    /// The hook may call [`crash_image`](Self::crash_image) and the other readers, and
    /// flush (the fence that runs it then applies that flush too); it must not fence, which
    /// would run it again.
    pub fn set_fence_hook(&self, hook: Option<Box<FenceHook>>) {
        *self.hook.lock().unwrap_or_else(|e| e.into_inner()) = hook.map(Arc::from);
    }

    /// At fence number `fence` (1 for the first fence of the medium's life), just before it
    /// takes effect, keeps `images` crash images drawn with a [`SplitMix64`] seeded with
    /// `seed`; [`take_captures`](Self::take_captures) hands them over. Replaces any earlier
    /// plan. A crash test runs its trace once per crash point `k = 1, 2, …` with
    /// `capture_at_fence(k, …)` until a run captures nothing (the trace has fewer fences),
    /// and adds a [`crash_image`](Self::crash_image) after the trace's last fence.
    pub fn capture_at_fence(&self, fence: u64, images: usize, seed: u64) {
        self.state().plan = Some(CapturePlan {
            fence: Some(fence),
            images,
            rng: SplitMix64::new(seed),
        });
    }

    /// As [`capture_at_fence`](Self::capture_at_fence) at every later fence, in one run of
    /// the trace (memory: `images * len()` bytes per fence).
    pub fn capture_at_every_fence(&self, images: usize, seed: u64) {
        self.state().plan = Some(CapturePlan {
            fence: None,
            images,
            rng: SplitMix64::new(seed),
        });
    }

    /// The crash images captured so far, in fence order; the plan stays.
    pub fn take_captures(&self) -> Vec<CrashCapture> {
        std::mem::take(&mut self.state().captures)
    }

    /// Fences so far (the number the next fence's hook and capture will not see: it gets
    /// `fences() + 1`).
    pub fn fences(&self) -> u64 {
        self.state().stats.fences
    }
}

impl Drop for SimMedium {
    fn drop(&mut self) {
        // SAFETY: allocated in `with_durable` with this layout, freed only here.
        unsafe { dealloc(self.working.as_ptr(), self.layout) };
    }
}

// SAFETY: `base()..base() + len()` lies in the working image, an owned heap allocation of at
// least `len` bytes that is never moved or freed before `Drop`.
unsafe impl Medium for SimMedium {
    fn base(&self) -> *mut u8 {
        self.working.as_ptr()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn flush(&self, offset: usize, len: usize) {
        check_range(offset, len, self.len);
        let mut state = self.state();
        state.stats.flushes += 1;
        state.stats.lines_flushed += super::lines_touched(offset, len);
        state.stats.bytes_flushed += len as u64;
        if len == 0 {
            return;
        }
        for line in offset / CACHE_LINE..=(offset + len - 1) / CACHE_LINE {
            let snapshot = self.working_line(line);
            let durable = &state.durable[line * CACHE_LINE..(line + 1) * CACHE_LINE];
            if !state.pending.contains_key(&line) && snapshot[..] == *durable {
                // Already durable as it is: nothing a crash could lose.
                continue;
            }
            let snapshots = state.pending.entry(line).or_default();
            if snapshots.last() != Some(&snapshot) {
                snapshots.push(snapshot);
            }
        }
    }

    fn fence(&self) {
        let fence = {
            let mut state = self.state();
            state.stats.fences += 1;
            let fence = state.stats.fences;
            if let Some(mut plan) = state.plan.take() {
                if plan.fence.is_none_or(|k| k == fence) {
                    for _ in 0..plan.images {
                        let image = self.crash_image_locked(&state, &mut || plan.rng.next_u64());
                        state.captures.push(CrashCapture { fence, image });
                    }
                }
                state.plan = Some(plan);
            }
            fence
        };
        let hook = self.hook.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(hook) = hook {
            hook(fence, self);
        }
        let mut state = self.state();
        let SimState {
            durable, pending, ..
        } = &mut *state;
        for (line, snapshots) in std::mem::take(pending) {
            let latest = snapshots.last().expect("a pending line has a snapshot");
            durable[line * CACHE_LINE..(line + 1) * CACHE_LINE].copy_from_slice(latest);
        }
    }

    fn stats(&self) -> PersistStats {
        self.state().stats
    }

    fn kind(&self) -> MediumKind {
        MediumKind::Simulated
    }
}
