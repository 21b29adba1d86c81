//! The discrete-event simulation: a trace replayed against an on-chip memory.
//!
//! Every accelerator runs its invocations one after another: it requests its buffers one at
//! a time, computes, frees them one at a time, idles, and starts the next. Each heap has one
//! allocator FSM that serves requests in arrival order (FIFO arbitration): a request issued
//! at cycle `t` starts at `max(t, heap busy until)` and keeps the heap busy for its cycles
//! plus those of any defragmentation it triggers, and the accelerator issues its next
//! request when the previous one is answered. Events are processed in (cycle, sequence)
//! order, so a run is a deterministic function of the trace and the configuration.
//!
//! **Failures.** An invocation makes all of its requests whatever happens (so every
//! configuration sees the same number of requests). If any fails, the invocation counts as
//! failed (its result is invalid) and, as the trace says ([`OnFailure`]), either computes
//! anyway holding the buffers it got — Memluv's failed `malloc` returns the heap base and an
//! HLS datapath does not branch on it — or skips the computation and frees them at once.
//!
//! **Data.** Each accelerator writes a pattern unique to (accelerator, invocation, buffer)
//! into every buffer it gets, and checks it just before freeing it: a block the
//! defragmenter moved must come back byte for byte. Mismatches are counted, never hidden.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::trace::{OnFailure, Trace};
use alloclab_hls::Handle;
use alloclab_hls::{AllocateError, Counters, FailureClass, OnChipMemory};
use alloclab_hls::{ConfigError, OnChipConfig};

/// What a simulation measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    /// Allocation requests made.
    pub requests: u64,
    /// Capacity failures.
    pub capacity_failures: u64,
    /// Fragmentation failures.
    pub fragmentation_failures: u64,
    /// Invocations that got all their buffers and computed.
    pub completed_invocations: u64,
    /// Invocations that lost at least one request.
    pub failed_invocations: u64,
    /// Cycle at which the last accelerator finished.
    pub makespan_cycles: u64,
    /// Buffers whose contents were not what their accelerator wrote (must be zero).
    pub corrupted_buffers: u64,
    /// The memory's counters at the end (cycles per operation, defragmentation, ...).
    pub counters: Counters,
}

impl SimReport {
    /// All failures.
    pub fn failures(&self) -> u64 {
        self.capacity_failures + self.fragmentation_failures
    }

    /// Failures per request.
    pub fn failure_rate(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.failures() as f64 / self.requests as f64
        }
    }

    /// Completed invocations per million cycles of the makespan.
    pub fn kernels_per_mcycle(&self) -> f64 {
        if self.makespan_cycles == 0 {
            0.0
        } else {
            self.completed_invocations as f64 * 1e6 / self.makespan_cycles as f64
        }
    }

    /// Mean cycles per allocation request.
    pub fn cycles_per_alloc(&self) -> f64 {
        ratio(self.counters.alloc_cycles, self.counters.alloc_requests)
    }

    /// Mean cycles per free.
    pub fn cycles_per_free(&self) -> f64 {
        ratio(self.counters.free_cycles, self.counters.frees)
    }

    /// Mean cycles per defragmentation call (0 without calls).
    pub fn cycles_per_defrag(&self) -> f64 {
        ratio(self.counters.defrag_cycles, self.counters.defrag_calls)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The byte at `offset` of the pattern of (accelerator, invocation, buffer).
fn pattern(tag: u64, offset: usize) -> u8 {
    // A period of 251 (prime) so that a block copied to a shifted place does not match.
    (tag as u8).wrapping_add((offset % 251) as u8)
}

fn tag(accelerator: usize, invocation: usize, buffer: usize) -> u64 {
    (accelerator as u64).wrapping_mul(0x9E37_79B9)
        ^ (invocation as u64).wrapping_mul(0x85EB_CA6B)
        ^ (buffer as u64).wrapping_mul(0xC2B2_AE35)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Requesting buffer `b`.
    Allocating(usize),
    /// Freeing the `k`-th buffer in release order (`k == len`: the invocation ends).
    Freeing(usize),
}

struct Accelerator {
    invocation: usize,
    phase: Phase,
    handles: Vec<Option<Handle>>,
    /// Buffer indices in the order they are released.
    release_order: Vec<usize>,
    /// Release cycle of each buffer.
    release_at: Vec<u64>,
    /// When the invocation ends (the computation's end, or earlier if it skips).
    end_at: u64,
    failed: bool,
}

impl Accelerator {
    /// The first position `>= k` in release order whose buffer is held, or `len`.
    fn next_held(&self, k: usize) -> usize {
        (k..self.release_order.len())
            .find(|&j| self.handles[self.release_order[j]].is_some())
            .unwrap_or(self.release_order.len())
    }

    /// When the `k`-th release (or, at `len`, the end) is due, not before `now`.
    fn due(&self, k: usize, now: u64) -> u64 {
        let at = match self.release_order.get(k) {
            Some(&b) => self.release_at[b],
            None => self.end_at,
        };
        at.max(now)
    }
}

/// Replays `trace` against a fresh memory of `config`.
///
/// # Errors
///
/// The configuration's [`ConfigError`], if any.
pub fn simulate(trace: &Trace, config: OnChipConfig) -> Result<SimReport, ConfigError> {
    let mut memory = OnChipMemory::new(config)?;
    let mut busy_until = vec![0u64; config.heaps];
    let mut report = SimReport::default();
    let mut states: Vec<Accelerator> = Vec::with_capacity(trace.accelerators.len());
    let mut events: BinaryHeap<Reverse<(u64, u64, usize)>> = BinaryHeap::new();
    let mut sequence = 0u64;
    for (i, a) in trace.accelerators.iter().enumerate() {
        states.push(Accelerator {
            invocation: 0,
            phase: Phase::Allocating(0),
            handles: Vec::new(),
            release_order: Vec::new(),
            release_at: Vec::new(),
            end_at: 0,
            failed: false,
        });
        if !a.invocations.is_empty() {
            events.push(Reverse((a.start_cycle, sequence, i)));
            sequence += 1;
        }
    }

    while let Some(Reverse((now, _, i))) = events.pop() {
        let heap = memory.heap_of(i);
        let acc = &mut states[i];
        let (invocation, idle_after) = &trace.accelerators[i].invocations[acc.invocation];
        // Requests wait for the heap's FSM (FIFO); the end of an invocation needs no FSM.
        let served = now.max(busy_until[heap]);
        let next = match acc.phase {
            Phase::Allocating(b) => {
                if b == 0 {
                    acc.handles.clear();
                    acc.failed = false;
                }
                report.requests += 1;
                let size = invocation.buffers[b] as usize;
                let cost = match memory.allocate_in(heap, size) {
                    Ok(a) => {
                        let t = tag(i, acc.invocation, b);
                        for (k, byte) in memory
                            .bytes_mut(a.handle)
                            .expect("just allocated")
                            .iter_mut()
                            .enumerate()
                        {
                            *byte = pattern(t, k);
                        }
                        acc.handles.push(Some(a.handle));
                        a.cycles + a.defrag.map_or(0, |d| d.cycles)
                    }
                    Err(AllocateError::Failed(f)) => {
                        match f.class {
                            FailureClass::Capacity => report.capacity_failures += 1,
                            FailureClass::Fragmentation => report.fragmentation_failures += 1,
                        }
                        acc.handles.push(None);
                        acc.failed = true;
                        f.cycles + f.defrag.map_or(0, |d| d.cycles)
                    }
                    Err(e) => unreachable!("trace buffers are non-empty: {e}"),
                };
                busy_until[heap] = served + cost;
                let done = busy_until[heap];
                if b + 1 < invocation.buffers.len() {
                    acc.phase = Phase::Allocating(b + 1);
                    Some(done)
                } else {
                    // The computation starts: schedule the releases.
                    let skip = acc.failed && trace.on_failure == OnFailure::Skip;
                    let compute = if skip { 0 } else { invocation.compute_cycles };
                    let eighths = |b: usize| {
                        if trace.early_release {
                            u64::from(invocation.release_eighths[b])
                        } else {
                            8
                        }
                    };
                    acc.release_at = (0..invocation.buffers.len())
                        .map(|b| done + compute * eighths(b) / 8)
                        .collect();
                    acc.release_order = (0..invocation.buffers.len()).collect();
                    acc.release_order.sort_by_key(|&b| (eighths(b), b));
                    acc.end_at = done + compute;
                    let k = acc.next_held(0);
                    acc.phase = Phase::Freeing(k);
                    Some(acc.due(k, done))
                }
            }
            Phase::Freeing(k) if k < acc.release_order.len() => {
                let b = acc.release_order[k];
                let handle = acc.handles[b]
                    .take()
                    .expect("only held buffers are scheduled");
                let t = tag(i, acc.invocation, b);
                let intact = memory
                    .bytes(handle)
                    .expect("held buffers are live")
                    .iter()
                    .enumerate()
                    .all(|(k, &byte)| byte == pattern(t, k));
                if !intact {
                    report.corrupted_buffers += 1;
                }
                let f = memory.free(handle).expect("held buffers are live");
                busy_until[heap] = served + f.cycles + f.defrag.map_or(0, |d| d.cycles);
                let done = busy_until[heap];
                let next = acc.next_held(k + 1);
                acc.phase = Phase::Freeing(next);
                Some(acc.due(next, done))
            }
            Phase::Freeing(_) => {
                if acc.failed {
                    report.failed_invocations += 1;
                } else {
                    report.completed_invocations += 1;
                }
                report.makespan_cycles = report.makespan_cycles.max(now);
                acc.invocation += 1;
                acc.phase = Phase::Allocating(0);
                (acc.invocation < trace.accelerators[i].invocations.len())
                    .then_some(now + idle_after)
            }
        };
        if let Some(at) = next {
            events.push(Reverse((at, sequence, i)));
            sequence += 1;
        }
    }
    report.counters = *memory.counters();
    debug_assert_eq!(memory.check_invariants(), Ok(()));
    Ok(report)
}
