//! Importing PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`) as a [`RunTrace`].
//!
//! `_dump_snapshot` pickles (protocol 4 on Python ≤ 3.13, 5 on 3.14) a dict with `segments`
//! (the allocator's segments and their blocks at the time of the snapshot) and
//! `device_traces` (one list per device of the allocator's recent events, a ring buffer of
//! `trace_alloc_max_entries`). Each event is a dict with `action`, `addr`, `size`, `stream`,
//! `frames` and, in newer versions, `time_us`. The file is read by the restricted
//! [`crate::pickle`] VM, which never runs pickle code.
//!
//! **How the events become allocator calls.**
//! * `alloc` allocates a block of `size` bytes at `addr` (sizes in the trace are the
//!   allocator's rounded block sizes).
//! * PyTorch logs `free_requested` when the tensor is released and `free_completed` when the
//!   block is back in the pool; the two differ when the block was used on another stream
//!   (`record_stream`) and waits for that stream's events. [`FreeAt::Completed`] (the
//!   default) frees at `free_completed`, when the memory can really be reused: what the
//!   allocator held. [`FreeAt::Requested`] frees at `free_requested`: what the program held.
//!   A legacy `free` action counts as both.
//! * A free of a block the window never saw allocated (the ring buffer had dropped its
//!   `alloc`) is a block that existed before the window: its allocation is placed at the
//!   start of the trace, before every other event ([`SnapshotStats::pre_window_blocks`]).
//! * Blocks still allocated at the end are freed after the window (teardown), so the trace is
//!   balanced; [`SnapshotStats::live_at_end`] counts them, to check against the
//!   `active_allocated` (and, under [`FreeAt::Completed`], `active_awaiting_free`) blocks of
//!   the snapshot's `segments`.
//! * `segment_alloc` / `segment_free` / `segment_map` / `segment_unmap`, `oom` and `snapshot`
//!   are counted, not replayed (the replay's own allocator decides its segments); unknown
//!   actions are counted in [`SnapshotStats::other_actions`].
//!
//! The run has one "iteration" (batch 0) covering the window, so
//! [`crate::replay::replay_caching`] reports the window's peaks, and the pre-window blocks and
//! teardown lie outside it.

use core::fmt;
use std::collections::{HashMap, HashSet};

use crate::pickle::{Limits, Pickle, PickleError, Value};
use crate::trace::{RunEvent, RunTrace};

/// When a freed block's memory is released in the imported trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FreeAt {
    /// At `free_completed`: the block is back in the allocator's pool.
    #[default]
    Completed,
    /// At `free_requested`: the program released the tensor.
    Requested,
}

/// What to import.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// Which entry of `device_traces` (the CUDA device index).
    pub device: usize,
    /// When frees take effect.
    pub free_at: FreeAt,
    /// Limits for the unpickler.
    pub limits: Option<Limits>,
}

/// Why a snapshot was not imported.
#[derive(Clone, Debug, PartialEq)]
pub enum SnapshotError {
    /// The file is no pickle this reader accepts.
    Pickle(PickleError),
    /// The pickle is not shaped like a snapshot.
    Shape {
        /// Where (e.g. `device_traces[0][12].size`).
        path: String,
        /// What was expected there.
        expected: &'static str,
    },
    /// The requested device has no trace.
    NoSuchDevice {
        /// The device asked for.
        device: usize,
        /// How many device traces the file has.
        devices: usize,
    },
    /// Two events contradict each other.
    Inconsistent {
        /// Index of the event in the device trace.
        index: usize,
        /// What was wrong.
        what: String,
    },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pickle(e) => write!(f, "{e}"),
            Self::Shape { path, expected } => {
                write!(
                    f,
                    "not a PyTorch memory snapshot: {path} should be {expected}"
                )
            }
            Self::NoSuchDevice { device, devices } => write!(
                f,
                "device {device} has no trace: the snapshot has {devices} device trace(s)"
            ),
            Self::Inconsistent { index, what } => {
                write!(f, "inconsistent device trace at event {index}: {what}")
            }
        }
    }
}

impl std::error::Error for SnapshotError {}

impl From<PickleError> for SnapshotError {
    fn from(e: PickleError) -> Self {
        SnapshotError::Pickle(e)
    }
}

/// Counts from an import.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Events in the device trace.
    pub events: usize,
    /// `alloc` events.
    pub allocs: usize,
    /// `free_requested` events.
    pub free_requested: usize,
    /// `free_completed` events (and legacy `free`).
    pub free_completed: usize,
    /// Frees whose `free_completed` came later than the next event after its
    /// `free_requested` (deferred by cross-stream use).
    pub deferred_frees: usize,
    /// Blocks freed in the window but allocated before it.
    pub pre_window_blocks: usize,
    /// Blocks still allocated at the end of the window (freed in the teardown).
    pub live_at_end: usize,
    /// `segment_alloc` + `segment_map` events.
    pub segment_grows: usize,
    /// `segment_free` + `segment_unmap` events.
    pub segment_shrinks: usize,
    /// `oom` events.
    pub ooms: usize,
    /// `snapshot` markers and actions this importer does not know.
    pub other_actions: usize,
    /// Distinct streams seen.
    pub streams: usize,
    /// The most bytes allocated at once in the window, counting pre-window blocks.
    pub peak_live_bytes: u64,
    /// `active_allocated` blocks in the snapshot's `segments` (PyTorch's live set at the end).
    pub active_blocks_in_segments: usize,
    /// `active_awaiting_free` blocks in `segments`: freed by the program, waiting for another
    /// stream (live at the end under [`FreeAt::Completed`], not under [`FreeAt::Requested`]).
    pub awaiting_free_blocks_in_segments: usize,
    /// Bytes reserved by the snapshot's `segments` (`total_size` summed), device `device`.
    pub reserved_bytes_in_segments: u64,
}

/// An imported snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The allocator calls: pre-window blocks, the window (iteration 0), teardown.
    pub run: RunTrace,
    /// What the import found.
    pub stats: SnapshotStats,
}

impl Snapshot {
    /// Parses a `_dump_snapshot` file and converts device `options.device`.
    ///
    /// # Errors
    ///
    /// [`SnapshotError::Pickle`] if the restricted unpickler refuses the file, and the other
    /// variants if it is not a consistent snapshot.
    pub fn from_pickle_bytes(
        bytes: &[u8],
        options: &ImportOptions,
    ) -> Result<Snapshot, SnapshotError> {
        let pickle = Pickle::parse(bytes, &options.limits.unwrap_or_default())?;
        Snapshot::from_pickle(&pickle, options)
    }

    /// Converts an already parsed snapshot pickle.
    ///
    /// # Errors
    ///
    /// As [`Snapshot::from_pickle_bytes`], less the unpickling.
    pub fn from_pickle(
        pickle: &Pickle,
        options: &ImportOptions,
    ) -> Result<Snapshot, SnapshotError> {
        let root = pickle.root();
        if root.as_dict().is_none() {
            return Err(shape("the root", "a dict"));
        }
        let traces = root
            .get("device_traces")
            .ok_or_else(|| shape("device_traces", "present"))?
            .as_list()
            .ok_or_else(|| shape("device_traces", "a list"))?;
        let devices = traces.len();
        let trace = traces
            .get(options.device)
            .ok_or(SnapshotError::NoSuchDevice {
                device: options.device,
                devices,
            })?
            .as_list()
            .ok_or_else(|| shape(format!("device_traces[{}]", options.device), "a list"))?;
        let mut stats = segment_stats(&root, options.device)?;
        let (run, s) = convert(&trace, options)?;
        stats.events = s.events;
        stats.allocs = s.allocs;
        stats.free_requested = s.free_requested;
        stats.free_completed = s.free_completed;
        stats.deferred_frees = s.deferred_frees;
        stats.pre_window_blocks = s.pre_window_blocks;
        stats.live_at_end = s.live_at_end;
        stats.segment_grows = s.segment_grows;
        stats.segment_shrinks = s.segment_shrinks;
        stats.ooms = s.ooms;
        stats.other_actions = s.other_actions;
        stats.streams = s.streams;
        stats.peak_live_bytes = s.peak_live_bytes;
        Ok(Snapshot { run, stats })
    }
}

fn shape(path: impl Into<String>, expected: &'static str) -> SnapshotError {
    SnapshotError::Shape {
        path: path.into(),
        expected,
    }
}

fn segment_stats(root: &Value<'_>, device: usize) -> Result<SnapshotStats, SnapshotError> {
    let mut stats = SnapshotStats::default();
    let Some(segments) = root.get("segments") else {
        return Ok(stats);
    };
    let segments = segments
        .as_list()
        .ok_or_else(|| shape("segments", "a list"))?;
    for (i, seg) in segments.iter().enumerate() {
        if let Some(d) = seg.get("device").and_then(|d| d.as_u64())
            && d != device as u64
        {
            continue;
        }
        stats.reserved_bytes_in_segments += seg
            .get("total_size")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| shape(format!("segments[{i}].total_size"), "a non-negative int"))?;
        if let Some(blocks) = seg.get("blocks").and_then(|b| b.as_list()) {
            stats.active_blocks_in_segments += blocks
                .iter()
                .filter(|b| b.get("state").and_then(|s| s.as_str()) == Some("active_allocated"))
                .count();
        }
    }
    Ok(stats)
}

/// The conversion's state.
#[derive(Default)]
struct Converter {
    prefix: Vec<RunEvent>,
    window: Vec<RunEvent>,
    /// addr -> (id, size) of blocks allocated and not yet freed.
    live: HashMap<u64, (u64, u64)>,
    next_id: u64,
    stats: SnapshotStats,
}

impl Converter {
    fn alloc(&mut self, index: usize, addr: u64, size: u64) -> Result<(), SnapshotError> {
        if self.live.contains_key(&addr) {
            return Err(SnapshotError::Inconsistent {
                index,
                what: format!("alloc at 0x{addr:x}, which is allocated and not freed"),
            });
        }
        self.live.insert(addr, (self.next_id, size));
        self.window.push(RunEvent {
            id: self.next_id,
            size_bytes: size,
            alloc: true,
        });
        self.next_id += 1;
        Ok(())
    }

    /// Frees the block at `addr`, or records a block allocated before the window.
    fn free(&mut self, index: usize, addr: u64, size: u64) -> Result<(), SnapshotError> {
        let id = match self.live.remove(&addr) {
            Some((id, sz)) if sz == size => id,
            Some((_, sz)) => {
                return Err(SnapshotError::Inconsistent {
                    index,
                    what: format!("block at 0x{addr:x} allocated with {sz} B, freed with {size} B"),
                });
            }
            None => {
                let id = self.next_id;
                self.next_id += 1;
                self.prefix.push(RunEvent {
                    id,
                    size_bytes: size,
                    alloc: true,
                });
                self.stats.pre_window_blocks += 1;
                id
            }
        };
        self.window.push(RunEvent {
            id,
            size_bytes: size,
            alloc: false,
        });
        Ok(())
    }
}

/// Converts one device trace.
fn convert(
    trace: &[Value<'_>],
    options: &ImportOptions,
) -> Result<(RunTrace, SnapshotStats), SnapshotError> {
    let mut c = Converter::default();
    c.stats.events = trace.len();
    // Blocks whose `free_requested` was seen and whose `free_completed` is still to come:
    // addr -> index of the request.
    let mut requested: HashMap<u64, usize> = HashMap::new();
    let mut streams: HashSet<i128> = HashSet::new();
    for (index, e) in trace.iter().enumerate() {
        let path = |field: &str| format!("device_traces[{}][{index}].{field}", options.device);
        let action = e
            .get("action")
            .ok_or_else(|| shape(path("action"), "present"))?
            .as_str()
            .ok_or_else(|| shape(path("action"), "a str"))?;
        if let Some(s) = e.get("stream")
            && let crate::pickle::Object::Int(v) = s.object()
        {
            streams.insert(*v);
        }
        let addr_size = || -> Result<(u64, u64), SnapshotError> {
            let addr = e
                .get("addr")
                .and_then(|v| v.as_u64())
                .ok_or_else(|| shape(path("addr"), "a non-negative int"))?;
            let size = e
                .get("size")
                .and_then(|v| v.as_u64())
                .ok_or_else(|| shape(path("size"), "a non-negative int"))?;
            Ok((addr, size))
        };
        match action {
            "alloc" => {
                let (addr, size) = addr_size()?;
                c.stats.allocs += 1;
                if requested.contains_key(&addr) {
                    return Err(SnapshotError::Inconsistent {
                        index,
                        what: format!("alloc at 0x{addr:x} before its free_completed"),
                    });
                }
                c.alloc(index, addr, size)?;
            }
            "free_requested" => {
                let (addr, size) = addr_size()?;
                c.stats.free_requested += 1;
                if requested.insert(addr, index).is_some() {
                    return Err(SnapshotError::Inconsistent {
                        index,
                        what: format!("second free_requested of the block at 0x{addr:x}"),
                    });
                }
                if options.free_at == FreeAt::Requested {
                    c.free(index, addr, size)?;
                }
            }
            "free_completed" | "free" => {
                let (addr, size) = addr_size()?;
                c.stats.free_completed += 1;
                let asked = requested.remove(&addr);
                if asked.is_some_and(|i| i + 1 < index) {
                    c.stats.deferred_frees += 1;
                }
                // Under `Requested` the block was freed at its request already (a completion
                // without a request, as in old traces, frees here).
                if options.free_at == FreeAt::Completed || asked.is_none() {
                    c.free(index, addr, size)?;
                }
            }
            "segment_alloc" | "segment_map" => c.stats.segment_grows += 1,
            "segment_free" | "segment_unmap" => c.stats.segment_shrinks += 1,
            "oom" => c.stats.ooms += 1,
            _ => c.stats.other_actions += 1,
        }
    }
    let mut stats = c.stats;
    // Pre-window blocks are live from the start of the window.
    stats.peak_live_bytes = peak_of(c.prefix.iter().chain(c.window.iter()));
    stats.live_at_end = c.live.len();
    stats.streams = streams.len();
    let mut teardown: Vec<(u64, u64)> = c.live.into_values().collect();
    teardown.sort_unstable();
    let mut events = c.prefix;
    let start = events.len();
    events.extend(c.window);
    let end = events.len();
    events.extend(teardown.into_iter().map(|(id, size)| RunEvent {
        id,
        size_bytes: size,
        alloc: false,
    }));
    Ok((
        RunTrace {
            events,
            iterations: core::iter::once(start..end).collect(),
            batches: vec![0],
        },
        stats,
    ))
}

/// The most bytes live at once over a stream of events.
pub fn peak_of<'e>(events: impl IntoIterator<Item = &'e RunEvent>) -> u64 {
    let mut bytes = 0u64;
    let mut peak = 0u64;
    for e in events {
        if e.alloc {
            bytes += e.size_bytes;
            peak = peak.max(bytes);
        } else {
            bytes = bytes.saturating_sub(e.size_bytes);
        }
    }
    peak
}
