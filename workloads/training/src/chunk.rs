//! A PatrickStar-style chunk manager (TPDS 2022): model data in fixed-size chunks that move
//! between host and device on demand, placed from a warm-up iteration.
//!
//! **Layout.** The parameter tensors are packed, in the order the model creates them, into
//! chunks of `chunk_elems` elements (a tensor never spans two chunks, so a chunk must hold
//! the largest one). There are `1 + m` chunk lists with the same layout: the fp16 parameters,
//! and `m` lists of fp32 optimizer data (master weights, Adam's momentum and variance). The
//! fp16 gradients *reuse* the fp16 parameter chunks: an operator's backward writes its weight
//! gradient over its fp16 weights, which the update rewrites from the fp32 master copy
//! (hence mixed precision only). [`search_chunk_size`] picks the size with the least unused
//! space among candidates from the largest tensor up, as the paper's chunk-size search does.
//!
//! **Warm-up.** One iteration of the trace gives the non-model memory (activations,
//! transients, workspaces, activation gradients, the input) live at each step: [`WarmUp`].
//!
//! **Placement and the simulated iteration.** The optimizer-state chunks of the first `g`
//! chunk groups stay on the device (their Adam runs on the GPU); the others stay on the host
//! (their Adam runs on the CPU). At step `s` the fp16 chunks may use
//! `capacity − non_model[s] − g × group bytes`; a forward or backward step needs the chunk of
//! its operator's weights on the device: a missing chunk is loaded over host→device PCIe
//! before the step (on demand, the step waits), and when the room is short, resident chunks
//! are evicted device→host, farthest next use first (the warm-up gives every future access).
//! The optimizer walks the groups: a device group needs its fp16 chunk (gradients) on the
//! device and is charged its share of the trace's optimizer step; a host group's fp16 chunk
//! is moved to the host, if it is on the device, and updated by the CPU at
//! [`ChunkConfig::cpu_optimizer_bytes_per_s`], overlapping the device's work; the next
//! forward pass waits for the CPU. [`plan_chunks`] tries every `g` and keeps the fastest
//! placement that fits; it simulates two iterations and reports the second (steady state:
//! chunks start where the first left them).
//!
//! ```
//! use alloclab_training::chunk::{self, ChunkConfig};
//! use alloclab_training::cost::CostModel;
//! use alloclab_training::{Model, ModelConfig, Precision, Trace};
//!
//! let config = ModelConfig::new(Model::BertLarge, 2, Precision::Mixed)?.with_seq_len(128)?;
//! let trace = Trace::generate(&config);
//! let size = chunk::search_chunk_size(&trace, &chunk::default_candidates(&trace))?;
//! // A 4 GiB device: less than the 4.4 GiB of persistent state alone.
//! let device = CostModel { capacity_bytes: 4 << 30, ..CostModel::a100_40gb() };
//! let out = chunk::plan_chunks(&trace, &device, ChunkConfig::new(size))?;
//! assert!(out.peak_bytes <= device.capacity_bytes);
//! assert!(out.baseline_peak_bytes > device.capacity_bytes);
//! assert!(out.pcie_bytes() > 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::TrainingError;
use crate::cost::CostModel;
use crate::model::{ModelConfig, Precision};
use crate::trace::{Phase, TensorId, TensorKind, Trace};
use core::fmt;

/// Why a chunk plan could not be made.
#[derive(Clone, Debug, PartialEq)]
pub enum ChunkError {
    /// A chunk size of zero elements.
    ZeroChunkSize,
    /// The chunk is smaller than the largest parameter tensor, which must fit in one chunk.
    ChunkTooSmall {
        /// The chunk size given, elements.
        chunk_elems: u64,
        /// The largest parameter tensor, elements.
        largest_tensor_elems: u64,
    },
    /// The chunk manager needs fp32 master weights (mixed precision) for gradients to
    /// reuse the fp16 parameter chunks.
    NeedsMixedPrecision {
        /// The precision given.
        precision: Precision,
    },
    /// The device cannot hold the non-model data of some step plus the one chunk that
    /// step needs, whatever the placement.
    BudgetTooSmall {
        /// Bytes the tightest step needs (non-model data plus one fp16 chunk).
        needed_bytes: u64,
        /// The device capacity.
        capacity_bytes: u64,
    },
    /// A bad CPU optimizer throughput (zero, negative or not finite).
    BadCpuThroughput,
    /// An empty range of chunk sizes to search.
    EmptySearch,
    /// A cost-model or configuration error.
    Training(TrainingError),
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroChunkSize => write!(f, "chunk size must be at least one element"),
            Self::ChunkTooSmall {
                chunk_elems,
                largest_tensor_elems,
            } => write!(
                f,
                "chunk of {chunk_elems} elements cannot hold the largest parameter tensor ({largest_tensor_elems} elements): use a larger chunk or search_chunk_size"
            ),
            Self::NeedsMixedPrecision { precision } => write!(
                f,
                "the chunk manager needs mixed precision (fp32 master weights), got {precision}"
            ),
            Self::BudgetTooSmall {
                needed_bytes,
                capacity_bytes,
            } => write!(
                f,
                "device memory {capacity_bytes} B is below the {needed_bytes} B the tightest step needs (its non-model data and one chunk): use a smaller batch or chunk"
            ),
            Self::BadCpuThroughput => {
                write!(f, "CPU optimizer throughput must be positive and finite")
            }
            Self::EmptySearch => write!(f, "no chunk size to search"),
            Self::Training(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ChunkError {}

impl From<TrainingError> for ChunkError {
    fn from(e: TrainingError) -> Self {
        Self::Training(e)
    }
}

/// Parameters of the chunk manager.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChunkConfig {
    /// Elements per chunk (the same for every chunk list).
    pub chunk_elems: u64,
    /// Bytes per second the CPU optimizer reads and writes (fp16 gradient and parameter,
    /// fp32 master weight and moments), for groups updated on the host.
    pub cpu_optimizer_bytes_per_s: f64,
}

/// Default CPU optimizer throughput: 50 GB/s of optimizer data (about 1.8 G parameters/s
/// for mixed-precision Adam at 28 B per parameter; a vectorised CPU Adam on a two-socket
/// server).
pub const CPU_OPTIMIZER_BYTES_PER_S: f64 = 50e9;

impl ChunkConfig {
    /// Chunks of `chunk_elems` elements, the default CPU optimizer throughput.
    pub fn new(chunk_elems: u64) -> Self {
        Self {
            chunk_elems,
            cpu_optimizer_bytes_per_s: CPU_OPTIMIZER_BYTES_PER_S,
        }
    }
}

/// Where one parameter tensor lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The fp16 weight tensor of the trace.
    pub tensor: TensorId,
    /// The forward operator that owns it.
    pub op: usize,
    /// Its chunk.
    pub chunk: usize,
    /// Offset in the chunk, elements.
    pub offset: u64,
    /// Elements.
    pub elems: u64,
}

/// Parameter tensors packed into chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkLayout {
    /// Elements per chunk.
    pub chunk_elems: u64,
    /// Every parameter tensor, in creation order.
    pub slots: Vec<Slot>,
    /// Number of chunks per list.
    pub chunks: usize,
    /// The chunk holding each forward operator's weights (`None`: no weights).
    pub op_chunk: Vec<Option<usize>>,
}

/// The parameter tensors of `trace`: `(weight tensor, op, elements)` in creation order.
fn params(trace: &Trace) -> Vec<(TensorId, usize, u64)> {
    let net = trace.config.network();
    let weights = trace
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.kind == TensorKind::Weight)
        .map(|(id, _)| id);
    let ops = net
        .ops
        .iter()
        .enumerate()
        .filter(|(_, op)| op.param_elems > 0)
        .map(|(i, op)| (i, op.param_elems));
    weights.zip(ops).map(|(t, (op, e))| (t, op, e)).collect()
}

impl ChunkLayout {
    /// Packs the parameters of `trace` in creation order into chunks of `chunk_elems`,
    /// opening a new chunk when the next tensor does not fit.
    ///
    /// # Errors
    ///
    /// [`ChunkError::ZeroChunkSize`], or [`ChunkError::ChunkTooSmall`] if a tensor is
    /// larger than a chunk.
    pub fn new(trace: &Trace, chunk_elems: u64) -> Result<Self, ChunkError> {
        if chunk_elems == 0 {
            return Err(ChunkError::ZeroChunkSize);
        }
        let params = params(trace);
        let largest = params.iter().map(|p| p.2).max().unwrap_or(0);
        if largest > chunk_elems {
            return Err(ChunkError::ChunkTooSmall {
                chunk_elems,
                largest_tensor_elems: largest,
            });
        }
        let mut slots = Vec::with_capacity(params.len());
        let mut op_chunk = vec![None; trace.forward_ops()];
        let (mut chunk, mut used) = (0usize, 0u64);
        let mut chunks = 0;
        for (tensor, op, elems) in params {
            if used + elems > chunk_elems {
                chunk += 1;
                used = 0;
            }
            slots.push(Slot {
                tensor,
                op,
                chunk,
                offset: used,
                elems,
            });
            op_chunk[op] = Some(chunk);
            used += elems;
            chunks = chunk + 1;
        }
        Ok(Self {
            chunk_elems,
            slots,
            chunks,
            op_chunk,
        })
    }

    /// Elements of parameters in chunk `k`.
    pub fn used_elems(&self, k: usize) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.chunk == k)
            .map(|s| s.elems)
            .sum()
    }

    /// Unused elements over all chunks of one list.
    pub fn wasted_elems(&self) -> u64 {
        self.chunks as u64 * self.chunk_elems - self.slots.iter().map(|s| s.elems).sum::<u64>()
    }
}

/// The largest parameter tensor of `trace`, elements.
pub fn largest_param_elems(trace: &Trace) -> u64 {
    params(trace).iter().map(|p| p.2).max().unwrap_or(0)
}

/// The chunk-size search: among `candidates`, the size whose layout wastes the fewest
/// elements (ties: the smaller chunk); sizes below the largest tensor are skipped.
/// [`default_candidates`] gives the range the figures use.
///
/// # Errors
///
/// [`ChunkError::EmptySearch`] if no candidate can hold the largest tensor.
pub fn search_chunk_size(trace: &Trace, candidates: &[u64]) -> Result<u64, ChunkError> {
    let mut best: Option<(u64, u64)> = None;
    for &c in candidates {
        let Ok(layout) = ChunkLayout::new(trace, c) else {
            continue;
        };
        let key = (layout.wasted_elems(), c);
        if best.is_none_or(|b| key < b) {
            best = Some(key);
        }
    }
    best.map(|b| b.1).ok_or(ChunkError::EmptySearch)
}

/// Candidate chunk sizes: from the largest parameter tensor to twice it, in 1/32 steps,
/// rounded up to 1024 elements.
pub fn default_candidates(trace: &Trace) -> Vec<u64> {
    let largest = largest_param_elems(trace).max(1);
    (0..=32)
        .map(|k| (largest + largest * k / 32).div_ceil(1024) * 1024)
        .collect()
}

/// What a warm-up iteration shows: device bytes live at each step, split into model data
/// (persistent tensors and weight gradients) and non-model data (the rest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarmUp {
    /// Non-model bytes live during each step.
    pub non_model_bytes: Vec<u64>,
    /// Model bytes live during each step, as the trace holds them (no chunks).
    pub model_bytes: Vec<u64>,
}

impl WarmUp {
    /// Measures one iteration of `trace` with every tensor allocated as the trace says.
    pub fn measure(trace: &Trace) -> Self {
        let steps = trace.steps.len();
        let mut non_model = vec![0u64; steps + 1];
        let mut model = vec![0u64; steps + 1];
        for t in &trace.tensors {
            let diff = if t.kind.is_persistent() || t.kind == TensorKind::WeightGradient {
                &mut model
            } else {
                &mut non_model
            };
            diff[t.alloc_step] = diff[t.alloc_step].wrapping_add(t.size_bytes);
            diff[t.free_step + 1] = diff[t.free_step + 1].wrapping_sub(t.size_bytes);
        }
        let prefix = |d: Vec<u64>| {
            let mut live = 0u64;
            d[..steps]
                .iter()
                .map(|&x| {
                    live = live.wrapping_add(x);
                    live
                })
                .collect::<Vec<u64>>()
        };
        // Differences as wrapping sums: each tensor adds at its first step and subtracts
        // after its last, so every prefix is a true (non-negative) live count.
        let non_model_bytes = prefix(non_model);
        let model_bytes = prefix(model);
        Self {
            non_model_bytes,
            model_bytes,
        }
    }

    /// The most bytes live in one step (model plus non-model): the trace's own peak.
    pub fn peak_bytes(&self) -> u64 {
        self.non_model_bytes
            .iter()
            .zip(&self.model_bytes)
            .map(|(a, b)| a + b)
            .max()
            .unwrap_or(0)
    }
}

/// A chunk placement and its simulated steady-state iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkOutcome {
    /// The chunk layout.
    pub layout: ChunkLayout,
    /// Bytes of one fp16 chunk.
    pub fp16_chunk_bytes: u64,
    /// Bytes of one group's optimizer chunks (master weights and moments).
    pub os_group_bytes: u64,
    /// Chunk groups whose optimizer state stays on the device (Adam on the GPU).
    pub groups_on_gpu: usize,
    /// Most device bytes live in a step (non-model data, resident fp16 chunks, device
    /// optimizer chunks).
    pub peak_bytes: u64,
    /// Simulated iteration time (the second of two), seconds.
    pub iteration_s: f64,
    /// Iteration time with every tensor on the device as the trace says.
    pub baseline_iteration_s: f64,
    /// The trace's own peak (every tensor on the device, no chunks).
    pub baseline_peak_bytes: u64,
    /// Bytes moved host→device in the iteration.
    pub h2d_bytes: u64,
    /// Bytes moved device→host in the iteration.
    pub d2h_bytes: u64,
    /// Time forward/backward steps waited for chunk loads.
    pub stall_s: f64,
    /// For each step of the iteration, the fp16 chunks resident while it runs.
    pub resident: Vec<Vec<usize>>,
    /// The device capacity it was planned for.
    pub capacity_bytes: u64,
}

impl ChunkOutcome {
    /// Bytes moved over PCIe, both directions.
    pub fn pcie_bytes(&self) -> u64 {
        self.h2d_bytes + self.d2h_bytes
    }

    /// Iteration time over the keep-everything time.
    pub fn slowdown(&self) -> f64 {
        self.iteration_s / self.baseline_iteration_s
    }
}

struct Sim<'a> {
    trace: &'a Trace,
    cost: &'a CostModel,
    config: ChunkConfig,
    layout: &'a ChunkLayout,
    warm: &'a WarmUp,
    step_s: Vec<f64>,
    cb: u64,
    osb: u64,
}

/// Accesses of fp16 chunks in one iteration: `(step, chunk)`, the optimizer's in group
/// order (host groups included: they need the chunk on the host, so an access there
/// pins nothing but ends the chunk's device life).
fn accesses(trace: &Trace, layout: &ChunkLayout) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for (s, step) in trace.steps.iter().enumerate() {
        match step.phase {
            Phase::Forward | Phase::Backward => {
                if let Some(k) = step.op.and_then(|op| layout.op_chunk[op]) {
                    v.push((s, k));
                }
            }
            Phase::Optimizer => v.extend((0..layout.chunks).map(|k| (s, k))),
        }
    }
    v
}

impl Sim<'_> {
    /// Simulates two iterations with `g` device groups; `None` if some step cannot hold
    /// its chunk.
    fn run(&self, g: usize) -> Option<ChunkOutcome> {
        let cap = self.cost.capacity_bytes;
        let steps = self.trace.steps.len();
        let opt = steps - 1;
        let k_all = self.layout.chunks;
        let pinned = g as u64 * self.osb;
        let room: Vec<i128> = self
            .warm
            .non_model_bytes
            .iter()
            .map(|&n| cap as i128 - n as i128 - pinned as i128)
            .collect();
        let acc = accesses(self.trace, self.layout);
        // Access times as positions in a two-iteration sequence, for farthest next use.
        let per_iter = acc.len();
        let mut uses: Vec<Vec<usize>> = vec![Vec::new(); k_all];
        for it in 0..3 {
            for (i, &(s, k)) in acc.iter().enumerate() {
                // On the host after a host-group update: that access does not keep it.
                if s == opt && k >= g {
                    continue;
                }
                uses[k].push(it * per_iter + i);
            }
        }
        // The first access of chunk `k` at position `from` or later.
        let next_use = |k: usize, from: usize| -> usize {
            let u = &uses[k];
            let i = u.partition_point(|&p| p < from);
            u.get(i).copied().unwrap_or(usize::MAX)
        };
        let opt_total: u64 = self.layout.slots.iter().map(|s| s.elems).sum();
        let mut on_gpu = vec![false; k_all];
        let mut resident_bytes = 0u64;
        let (mut clock, mut h2d_free, mut d2h_free, mut cpu_free) = (0.0f64, 0.0, 0.0, 0.0);
        let mut out = None;
        for it in 0..2 {
            let (mut h2d, mut d2h, mut stall, mut peak) = (0u64, 0u64, 0.0f64, 0u64);
            let iter_start = clock.max(cpu_free);
            clock = iter_start;
            let mut resident_log = vec![Vec::new(); steps];
            let mut ai = 0;
            for s in 0..steps {
                let step_acc: Vec<usize> = {
                    let mut v = Vec::new();
                    while ai < per_iter && acc[ai].0 == s {
                        v.push(ai);
                        ai += 1;
                    }
                    v
                };
                if s != opt {
                    let need = step_acc.first().map(|&i| acc[i].1);
                    let pos = it * per_iter + step_acc.first().map_or(ai, |&i| i + 1);
                    let (ready, h, d) = self.make_room(
                        &mut on_gpu,
                        &mut resident_bytes,
                        need,
                        room[s],
                        pos,
                        &next_use,
                        clock,
                        &mut h2d_free,
                        &mut d2h_free,
                    )?;
                    h2d += h;
                    d2h += d;
                    let start = clock.max(ready);
                    stall += start - clock;
                    clock = start + self.step_s[s];
                    peak = peak.max(self.warm.non_model_bytes[s] + resident_bytes + pinned);
                    resident_log[s] = (0..k_all).filter(|&k| on_gpu[k]).collect();
                    continue;
                }
                // The optimizer, group by group.
                for &i in &step_acc {
                    let k = acc[i].1;
                    let share = self.layout.used_elems(k) as f64 / opt_total as f64;
                    let pos = it * per_iter + i + 1;
                    if k < g {
                        let (ready, h, d) = self.make_room(
                            &mut on_gpu,
                            &mut resident_bytes,
                            Some(k),
                            room[s],
                            pos,
                            &next_use,
                            clock,
                            &mut h2d_free,
                            &mut d2h_free,
                        )?;
                        h2d += h;
                        d2h += d;
                        clock = clock.max(ready) + share * self.step_s[opt];
                    } else {
                        let mut arrive = clock;
                        if on_gpu[k] {
                            on_gpu[k] = false;
                            resident_bytes -= self.cb;
                            let begin = clock.max(d2h_free);
                            d2h_free = begin + self.cost.transfer_seconds(self.cb);
                            d2h += self.cb;
                            arrive = d2h_free;
                        }
                        let bytes = self.layout.used_elems(k) as f64 * self.bytes_per_param();
                        cpu_free =
                            arrive.max(cpu_free) + bytes / self.config.cpu_optimizer_bytes_per_s;
                    }
                    peak = peak.max(self.warm.non_model_bytes[s] + resident_bytes + pinned);
                }
                resident_log[s] = (0..k_all).filter(|&k| on_gpu[k]).collect();
            }
            let end = clock.max(cpu_free).max(d2h_free);
            if it == 1 {
                out = Some(ChunkOutcome {
                    layout: self.layout.clone(),
                    fp16_chunk_bytes: self.cb,
                    os_group_bytes: self.osb,
                    groups_on_gpu: g,
                    peak_bytes: peak,
                    iteration_s: end - iter_start,
                    baseline_iteration_s: self.step_s.iter().sum(),
                    baseline_peak_bytes: self.warm.peak_bytes(),
                    h2d_bytes: h2d,
                    d2h_bytes: d2h,
                    stall_s: stall,
                    resident: resident_log,
                    capacity_bytes: cap,
                });
            }
            clock = end;
        }
        out
    }

    fn bytes_per_param(&self) -> f64 {
        // Read the fp16 gradient, write the fp16 parameter, read and write the fp32 data.
        (2 * 2) as f64 + 2.0 * (self.osb / self.layout.chunk_elems) as f64
    }

    /// Evicts (farthest next use first) until `need` fits in `room`, then loads `need`.
    /// Returns when the chunk is ready and the bytes moved each way.
    #[allow(clippy::too_many_arguments)]
    fn make_room(
        &self,
        on_gpu: &mut [bool],
        resident_bytes: &mut u64,
        need: Option<usize>,
        room: i128,
        pos: usize,
        next_use: &impl Fn(usize, usize) -> usize,
        clock: f64,
        h2d_free: &mut f64,
        d2h_free: &mut f64,
    ) -> Option<(f64, u64, u64)> {
        let missing = need.is_some_and(|k| !on_gpu[k]);
        let want = if missing { self.cb } else { 0 };
        let (mut h, mut d) = (0u64, 0u64);
        let mut evicted_by = clock;
        while (*resident_bytes + want) as i128 > room {
            let victim = (0..on_gpu.len())
                .filter(|&k| on_gpu[k] && Some(k) != need)
                .max_by_key(|&k| (next_use(k, pos), k))?;
            on_gpu[victim] = false;
            *resident_bytes -= self.cb;
            let begin = clock.max(*d2h_free);
            *d2h_free = begin + self.cost.transfer_seconds(self.cb);
            evicted_by = *d2h_free;
            d += self.cb;
        }
        let mut ready = clock;
        if let Some(k) = need.filter(|_| missing) {
            let begin = clock.max(*h2d_free).max(evicted_by);
            *h2d_free = begin + self.cost.transfer_seconds(self.cb);
            ready = *h2d_free;
            on_gpu[k] = true;
            *resident_bytes += self.cb;
            h += self.cb;
        }
        Some((ready, h, d))
    }
}

/// Plans the chunk placement of `trace` on `cost` (capacity included): tries every number
/// of device optimizer groups and keeps the fastest that fits (ties: the lower peak). See
/// the module documentation.
///
/// # Errors
///
/// [`ChunkError::NeedsMixedPrecision`], [`ChunkError::ZeroChunkSize`],
/// [`ChunkError::ChunkTooSmall`], [`ChunkError::BadCpuThroughput`],
/// [`ChunkError::Training`] for a bad cost model, and [`ChunkError::BudgetTooSmall`] when no
/// placement fits.
pub fn plan_chunks(
    trace: &Trace,
    cost: &CostModel,
    config: ChunkConfig,
) -> Result<ChunkOutcome, ChunkError> {
    cost.validate()?;
    if trace.config.precision != Precision::Mixed {
        return Err(ChunkError::NeedsMixedPrecision {
            precision: trace.config.precision,
        });
    }
    if !(config.cpu_optimizer_bytes_per_s.is_finite() && config.cpu_optimizer_bytes_per_s > 0.0) {
        return Err(ChunkError::BadCpuThroughput);
    }
    let layout = ChunkLayout::new(trace, config.chunk_elems)?;
    let warm = WarmUp::measure(trace);
    let p = trace.config.precision;
    let opt_states = trace.config.network().optimizer.states();
    let cb = config.chunk_elems * p.activation_bytes();
    let osb =
        config.chunk_elems * (p.master_bytes().unwrap_or(0) + opt_states * p.optimizer_bytes());
    let step_s = trace
        .steps
        .iter()
        .map(|s| cost.step_seconds(s, p))
        .collect();
    let sim = Sim {
        trace,
        cost,
        config,
        layout: &layout,
        warm: &warm,
        step_s,
        cb,
        osb,
    };
    let mut best: Option<ChunkOutcome> = None;
    for g in (0..=layout.chunks).rev() {
        let Some(o) = sim.run(g) else { continue };
        let better = best.as_ref().is_none_or(|b| {
            o.iteration_s < b.iteration_s
                || (o.iteration_s == b.iteration_s && o.peak_bytes < b.peak_bytes)
        });
        if better {
            best = Some(o);
        }
    }
    best.ok_or_else(|| {
        let needed = trace
            .steps
            .iter()
            .enumerate()
            .map(|(s, step)| {
                let chunk = step.op.and_then(|op| layout.op_chunk[op]).map_or(0, |_| cb);
                warm.non_model_bytes[s]
                    + if step.phase == Phase::Optimizer {
                        0
                    } else {
                        chunk
                    }
            })
            .max()
            .unwrap_or(0);
        ChunkError::BudgetTooSmall {
            needed_bytes: needed,
            capacity_bytes: cost.capacity_bytes,
        }
    })
}

/// The largest batch of `config`'s model (mixed precision) that fits `cost.capacity_bytes`:
/// keeping every tensor on the device (`chunked` false: the trace's peak) or with the chunk
/// manager at the searched chunk size (`chunked` true). Doubling then bisection up to
/// `max_batch`; 0 if not even one sample fits.
///
/// # Errors
///
/// As [`plan_chunks`], except that running out of memory means "does not fit".
pub fn largest_batch_chunked(
    config: &ModelConfig,
    cost: &CostModel,
    chunked: bool,
    max_batch: u32,
) -> Result<u32, ChunkError> {
    cost.validate()?;
    let fits = |b: u32| -> Result<bool, ChunkError> {
        let trace = Trace::generate(&config.with_batch(b)?);
        if !chunked {
            return Ok(trace.peak_live_bytes() <= cost.capacity_bytes);
        }
        let size = search_chunk_size(&trace, &default_candidates(&trace))?;
        match plan_chunks(&trace, cost, ChunkConfig::new(size)) {
            Ok(o) => Ok(o.peak_bytes <= cost.capacity_bytes),
            Err(ChunkError::BudgetTooSmall { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    };
    if max_batch == 0 || !fits(1)? {
        return Ok(0);
    }
    let (mut lo, mut hi) = (1u32, None);
    while hi.is_none() && lo < max_batch {
        let b = lo.saturating_mul(2).min(max_batch);
        if fits(b)? {
            lo = b;
        } else {
            hi = Some(b);
        }
    }
    if let Some(mut hi) = hi {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    Ok(lo)
}
