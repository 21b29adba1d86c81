//! A DELTA-style planner: for each activation, keep it, swap it to the host or recompute
//! it, chosen as a 0/1 knapsack by a polynomial greedy heuristic, and evaluated by a
//! simulator of the compute stream and both PCIe directions.
//!
//! **The simulated iteration.** The compute stream runs the forward steps, then the
//! backward steps; before a backward step runs, every tensor it needs is made resident:
//! a *kept* activation already is; a *swapped* one was prefetched over host→device PCIe;
//! a *recomputed* one (or a transient one that a recomputation needs) is recomputed by
//! re-running its producer, whose inputs are made resident first (recursively). A tensor
//! brought back stays resident until its last use in the backward pass.
//!
//! **Swaps** leave over device→host PCIe in production order, one at a time, each as soon
//! as its producer ends; the device copy is freed when both the transfer and the last
//! forward use are done. **Prefetches** come back in order of need, one at a time: each is
//! issued at the latest step that lets the whole chain of prefetches finish in time on the
//! stall-free timeline (bidirectional prefetching: both directions run concurrently with
//! compute and with each other). A backward step whose prefetch is late *stalls*; stalls
//! are charged to the iteration time. Recomputations are charged their producer's step time.
//!
//! **The heuristic.** Start from keeping everything. Repeatedly simulate, find the peak,
//! and among the kept activations live at the peak pick the option with the least
//! estimated added time per byte saved (recompute: the producer's time; swap: the part
//! of both transfers not covered by the compute between production and peak, and between
//! peak and use, plus 5% for link contention). Keep the change if the simulated peak drops
//! and the iteration stays within the time limit; otherwise undo it and never try that
//! option again. Stop at the memory budget or when no option is left. Each round is one
//! simulation, and there are at most two rounds per activation: polynomial.

use crate::TrainingError;
use crate::caching::CachingConfig;
use crate::cost::CostModel;
use crate::model::ModelConfig;
use crate::replay::replay_caching;
use crate::trace::{RunEvent, RunTrace, TensorId, TensorKind, Trace};

/// What to do with one activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Keep it in device memory from forward to backward.
    Keep,
    /// Copy it to the host after it is produced, free it, prefetch it before it is needed.
    Swap,
    /// Free it after its last forward use, recompute it before the backward needs it.
    Recompute,
}

/// An action for every tensor (only activations' actions matter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    actions: Vec<Action>,
}

impl Plan {
    /// Keep every activation: the trace as generated.
    pub fn keep_all(trace: &Trace) -> Plan {
        Plan {
            actions: vec![Action::Keep; trace.tensors.len()],
        }
    }

    /// The action for `tensor`.
    pub fn action(&self, tensor: TensorId) -> Action {
        self.actions[tensor]
    }

    /// Sets the action for `tensor`; non-activations stay [`Action::Keep`].
    pub fn set(&mut self, trace: &Trace, tensor: TensorId, action: Action) {
        if trace.tensors[tensor].kind == TensorKind::Activation {
            self.actions[tensor] = action;
        }
    }

    /// How many tensors have `action`.
    pub fn count(&self, action: Action) -> usize {
        self.actions.iter().filter(|&&a| a == action).count()
    }
}

/// What the simulator measured for one plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    /// Most device bytes live at once (persistent tensors included).
    pub peak_bytes: u64,
    /// When the peak happens, seconds from the iteration's start.
    pub peak_time_s: f64,
    /// Simulated iteration time, stalls included.
    pub iteration_s: f64,
    /// Time the compute stream waited for prefetches.
    pub stall_s: f64,
    /// Time spent recomputing.
    pub recompute_s: f64,
    /// Bytes copied device→host (the same come back host→device).
    pub bytes_swapped: u64,
    /// Operator re-executions in the backward pass (transients a recomputation needs
    /// included).
    pub ops_recomputed: usize,
}

/// What the compute stream runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// A step of the trace (forward, backward or optimizer).
    Step(usize),
    /// A re-execution of the producer of this tensor, in the backward pass.
    Recompute(TensorId),
}

/// One item of the simulated compute stream.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduledItem {
    /// What runs.
    pub item: Item,
    /// When it starts, seconds from the iteration's start (after any stall).
    pub start_s: f64,
    /// When it ends.
    pub end_s: f64,
    /// Tensors it reads that a plan can move: a recomputation's inputs, a backward step's
    /// saved tensors.
    pub uses: Vec<TensorId>,
}

/// The simulated iteration of a plan in full: the compute stream and when each tensor is
/// resident in device memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// The compute stream in order.
    pub items: Vec<ScheduledItem>,
    /// Residency intervals `(tensor, from_s, to_s)`; persistent tensors have `to_s` infinite.
    /// A tensor may have two (forward, and back in the backward pass).
    pub residency: Vec<(TensorId, f64, f64)>,
    /// The summary.
    pub evaluation: Evaluation,
}

struct Detail {
    schedule: Schedule,
    /// End of each tensor's producer (forward).
    produced_at: Vec<f64>,
    /// Start of each tensor's first backward use on the stall-free timeline of this plan.
    needed_at: Vec<f64>,
}

impl Schedule {
    /// Device bytes live over the iteration: `(time_s, bytes)` after each allocation or
    /// free, in time order (frees first at equal times), for charts of memory over an
    /// iteration. Its maximum is the simulated peak.
    pub fn memory_curve(&self, trace: &Trace) -> Vec<(f64, u64)> {
        let mut deltas: Vec<(f64, bool, u64)> = Vec::with_capacity(2 * self.residency.len());
        for &(t, from, to) in &self.residency {
            let size = trace.tensors[t].size_bytes;
            deltas.push((from, true, size));
            if to.is_finite() {
                deltas.push((to, false, size));
            }
        }
        deltas.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut live = 0u64;
        let mut curve: Vec<(f64, u64)> = Vec::with_capacity(deltas.len());
        for (time, alloc, size) in deltas {
            if alloc {
                live += size;
            } else {
                live -= size;
            }
            curve.push((time, live));
        }
        curve
    }

    /// The schedule's device allocations and frees in time order, as a one-iteration
    /// [`RunTrace`] (persistent tensors allocated first and freed last), so that a plan can
    /// be replayed on the caching-allocator model. Each residency interval is one
    /// allocation; at equal times frees come first, as in the simulation.
    pub fn run_trace(&self, trace: &Trace) -> RunTrace {
        let mut timed: Vec<(f64, bool, RunEvent)> = Vec::with_capacity(2 * self.residency.len());
        let mut persistent = Vec::new();
        for (k, &(t, from, to)) in self.residency.iter().enumerate() {
            let size_bytes = trace.tensors[t].size_bytes;
            let event = |alloc| RunEvent {
                id: k as u64,
                size_bytes,
                alloc,
            };
            if to.is_infinite() {
                persistent.push((event(true), event(false)));
                continue;
            }
            timed.push((from, true, event(true)));
            timed.push((to, false, event(false)));
        }
        timed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut events: Vec<RunEvent> = persistent.iter().map(|p| p.0).collect();
        let start = events.len();
        events.extend(timed.into_iter().map(|(_, _, e)| e));
        let end = events.len();
        events.extend(persistent.iter().map(|p| p.1));
        RunTrace {
            events,
            iterations: core::iter::once(start..end).collect(),
            batches: vec![trace.config.batch],
        }
    }
}

/// Simulates one iteration of `trace` under `plan`.
pub fn evaluate(trace: &Trace, cost: &CostModel, plan: &Plan) -> Evaluation {
    simulate(trace, cost, plan).0
}

/// Simulates one iteration of `trace` under `plan` and returns the whole schedule.
pub fn schedule(trace: &Trace, cost: &CostModel, plan: &Plan) -> Schedule {
    simulate(trace, cost, plan).1.schedule
}

struct Builder<'a> {
    trace: &'a Trace,
    plan: &'a Plan,
    step_s: &'a [f64],
    items: Vec<Item>,
    uses: Vec<Vec<TensorId>>,
    dur: Vec<f64>,
    materialized: Vec<Option<usize>>,
    first_use: Vec<Option<usize>>,
    last_use: Vec<Option<usize>>,
}

impl Builder<'_> {
    fn resident_at_boundary(&self, t: TensorId) -> bool {
        match self.trace.tensors[t].kind {
            TensorKind::Activation => self.plan.action(t) == Action::Keep,
            TensorKind::Transient => false,
            _ => true,
        }
    }

    fn use_at(&mut self, t: TensorId, item: usize) {
        self.first_use[t].get_or_insert(item);
        self.last_use[t] = Some(item);
    }

    fn ensure(&mut self, t: TensorId) {
        if self.resident_at_boundary(t) || self.materialized[t].is_some() {
            return;
        }
        let tensor = &self.trace.tensors[t];
        if tensor.kind == TensorKind::Activation && self.plan.action(t) == Action::Swap {
            // Resident from its prefetch; the deadline is its first use, recorded by the
            // caller when the using item is pushed.
            self.materialized[t] = Some(usize::MAX);
            return;
        }
        let op = tensor
            .producer
            .expect("only operator outputs are ever not resident");
        let inputs = self.trace.op_inputs[op].clone();
        for &u in &inputs {
            self.ensure(u);
        }
        let idx = self.items.len();
        self.items.push(Item::Recompute(t));
        self.uses.push(inputs.clone());
        self.dur.push(self.step_s[op]);
        for &u in &inputs {
            self.use_at(u, idx);
        }
        self.materialized[t] = Some(idx);
    }
}

fn simulate(trace: &Trace, cost: &CostModel, plan: &Plan) -> (Evaluation, Detail) {
    let n = trace.forward_ops();
    let steps = trace.steps.len();
    let tensors = trace.tensors.len();
    let precision = trace.config.precision;
    let step_s: Vec<f64> = trace
        .steps
        .iter()
        .map(|s| cost.step_seconds(s, precision))
        .collect();
    let mut b = Builder {
        trace,
        plan,
        step_s: &step_s,
        items: Vec::with_capacity(steps + n),
        uses: Vec::with_capacity(steps + n),
        dur: Vec::with_capacity(steps + n),
        materialized: vec![None; tensors],
        first_use: vec![None; tensors],
        last_use: vec![None; tensors],
    };
    let mut step_item = vec![0usize; steps];
    for (s, slot) in step_item.iter_mut().enumerate().take(n) {
        *slot = b.items.len();
        b.items.push(Item::Step(s));
        b.uses.push(Vec::new());
        b.dur.push(step_s[s]);
    }
    for s in n..2 * n {
        let op = 2 * n - 1 - s;
        for &t in &trace.op_saved[op] {
            b.ensure(t);
        }
        let idx = b.items.len();
        step_item[s] = idx;
        b.items.push(Item::Step(s));
        b.uses.push(trace.op_saved[op].clone());
        b.dur.push(step_s[s]);
        for &t in &trace.op_saved[op] {
            b.use_at(t, idx);
        }
    }
    step_item[2 * n] = b.items.len();
    b.items.push(Item::Step(2 * n));
    b.uses.push(Vec::new());
    b.dur.push(step_s[2 * n]);
    let Builder {
        items,
        uses,
        dur,
        materialized,
        first_use,
        last_use,
        ..
    } = b;

    // The stall-free timeline.
    let mut start0 = Vec::with_capacity(items.len());
    let mut clock = 0.0;
    for d in &dur {
        start0.push(clock);
        clock += d;
    }

    // Swap-outs, in production order (the forward pass never stalls).
    let swapped: Vec<TensorId> = (0..tensors)
        .filter(|&t| {
            trace.tensors[t].kind == TensorKind::Activation && plan.action(t) == Action::Swap
        })
        .collect();
    let mut swap_out_end = vec![0.0f64; tensors];
    let mut d2h_free = 0.0f64;
    let mut by_production = swapped.clone();
    by_production.sort_by_key(|&t| (trace.tensors[t].producer, t));
    for &t in &by_production {
        let p = trace.tensors[t]
            .producer
            .expect("activations have producers");
        let begin = (start0[p] + dur[p]).max(d2h_free);
        d2h_free = begin + cost.transfer_seconds(trace.tensors[t].size_bytes);
        swap_out_end[t] = d2h_free;
    }

    // Prefetches, in order of need, each issued as late as the chain allows.
    let mut prefetches: Vec<(usize, TensorId)> = swapped
        .iter()
        .filter_map(|&t| first_use[t].map(|d| (d, t)))
        .collect();
    prefetches.sort_unstable();
    let mut trigger = vec![0usize; prefetches.len()];
    let mut latest_next = f64::INFINITY;
    for (k, &(deadline, t)) in prefetches.iter().enumerate().rev() {
        let finish_by = start0[deadline].min(latest_next);
        let latest_start = finish_by - cost.transfer_seconds(trace.tensors[t].size_bytes);
        latest_next = latest_start;
        trigger[k] = start0
            .partition_point(|&s| s <= latest_start)
            .saturating_sub(1);
    }

    // The real timeline.
    let mut start = vec![0.0f64; items.len()];
    let mut end = vec![0.0f64; items.len()];
    let mut prefetch_start = vec![0.0f64; tensors];
    let mut ready = vec![0.0f64; items.len()];
    let mut h2d_free = 0.0f64;
    let mut next = 0;
    let mut stall = 0.0;
    let mut prev_end = 0.0f64;
    for i in 0..items.len() {
        while next < prefetches.len() && trigger[next] <= i {
            let (deadline, t) = prefetches[next];
            let begin = prev_end.max(h2d_free).max(swap_out_end[t]);
            h2d_free = begin + cost.transfer_seconds(trace.tensors[t].size_bytes);
            prefetch_start[t] = begin;
            ready[deadline] = ready[deadline].max(h2d_free);
            next += 1;
        }
        start[i] = prev_end.max(ready[i]);
        stall += start[i] - prev_end;
        end[i] = start[i] + dur[i];
        prev_end = end[i];
    }
    let iteration_s = prev_end;

    // Residency intervals.
    let mut intervals = Vec::with_capacity(tensors + swapped.len() + n);
    let mut produced_at = vec![0.0f64; tensors];
    let mut needed_at = vec![f64::INFINITY; tensors];
    for (t, tensor) in trace.tensors.iter().enumerate() {
        if tensor.kind.is_persistent() {
            intervals.push((t, 0.0, f64::INFINITY));
            continue;
        }
        let last_item = |fallback: usize| last_use[t].map_or(fallback, |l| l.max(fallback));
        match tensor.kind {
            TensorKind::Activation | TensorKind::Transient => {
                let p = tensor.producer.expect("outputs have producers");
                produced_at[t] = end[p];
                let last_forward = tensor
                    .used_by
                    .iter()
                    .copied()
                    .filter(|&s| s < n)
                    .max()
                    .unwrap_or(p);
                if let Some(&s) = tensor.used_by.iter().find(|&&s| s >= n) {
                    needed_at[t] = start0[step_item[s]];
                }
                let action = if tensor.kind == TensorKind::Transient {
                    Action::Recompute
                } else {
                    plan.action(t)
                };
                match action {
                    Action::Keep => {
                        let to = end[last_item(step_item[tensor.free_step])];
                        intervals.push((t, start[p], to));
                    }
                    Action::Swap => {
                        intervals.push((t, start[p], end[last_forward].max(swap_out_end[t])));
                        if let Some(l) = last_use[t] {
                            intervals.push((t, prefetch_start[t], end[l]));
                        }
                    }
                    Action::Recompute => {
                        intervals.push((t, start[p], end[last_forward]));
                        if let (Some(m), Some(l)) = (materialized[t], last_use[t]) {
                            intervals.push((t, start[m], end[l]));
                        }
                    }
                }
            }
            _ => {
                let from = start[step_item[tensor.alloc_step]];
                let to = end[last_item(step_item[tensor.free_step])];
                intervals.push((t, from, to));
            }
        }
    }

    let mut deltas: Vec<(f64, bool, u64)> = Vec::with_capacity(2 * intervals.len());
    for &(t, from, to) in &intervals {
        let size = trace.tensors[t].size_bytes;
        deltas.push((from, true, size));
        if to.is_finite() {
            deltas.push((to, false, size));
        }
    }
    // At equal times frees (false) come before allocations (true).
    deltas.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut live, mut peak, mut peak_time) = (0u64, 0u64, 0.0f64);
    for &(time, alloc, size) in &deltas {
        if alloc {
            live += size;
            if live > peak {
                peak = live;
                peak_time = time;
            }
        } else {
            live -= size;
        }
    }

    let recompute_items: Vec<usize> = (0..items.len())
        .filter(|&i| matches!(items[i], Item::Recompute(_)))
        .collect();
    let evaluation = Evaluation {
        peak_bytes: peak,
        peak_time_s: peak_time,
        iteration_s,
        stall_s: stall,
        recompute_s: recompute_items.iter().map(|&i| dur[i]).sum(),
        bytes_swapped: swapped.iter().map(|&t| trace.tensors[t].size_bytes).sum(),
        ops_recomputed: recompute_items.len(),
    };
    let schedule = Schedule {
        items: items
            .iter()
            .zip(uses)
            .enumerate()
            .map(|(i, (&item, uses))| ScheduledItem {
                item,
                start_s: start[i],
                end_s: end[i],
                uses,
            })
            .collect(),
        residency: intervals,
        evaluation,
    };
    (
        evaluation,
        Detail {
            schedule,
            produced_at,
            needed_at,
        },
    )
}

/// What the planner aims at.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Goal {
    /// Stop as soon as the peak is at most this; `None`: lower the peak as far as possible.
    pub memory_budget_bytes: Option<u64>,
    /// Never accept a plan slower than this multiple of keeping everything; `None`: no limit.
    pub time_limit_factor: Option<f64>,
    /// Whether swapping may be chosen.
    pub allow_swap: bool,
    /// Whether recomputation may be chosen.
    pub allow_recompute: bool,
}

impl Goal {
    /// The lowest peak within `factor` × the keep-all iteration time.
    pub fn min_memory_within(factor: f64) -> Self {
        Self {
            memory_budget_bytes: None,
            time_limit_factor: Some(factor),
            allow_swap: true,
            allow_recompute: true,
        }
    }

    /// The fastest plan the heuristic finds whose peak is at most `budget` bytes.
    pub fn fit_in(budget: u64) -> Self {
        Self {
            memory_budget_bytes: Some(budget),
            time_limit_factor: None,
            allow_swap: true,
            allow_recompute: true,
        }
    }
}

/// A plan and what it does, beside keeping everything.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanOutcome {
    /// The plan.
    pub plan: Plan,
    /// Its simulation.
    pub evaluation: Evaluation,
    /// The simulation of keeping every activation.
    pub baseline: Evaluation,
    /// Whether the peak is within the goal's memory budget (true when there is none).
    pub fits: bool,
}

impl PlanOutcome {
    /// Fraction of the keep-all peak saved (0.4 = 40% less).
    pub fn memory_saved(&self) -> f64 {
        1.0 - self.evaluation.peak_bytes as f64 / self.baseline.peak_bytes as f64
    }

    /// Iteration time over keep-all iteration time.
    pub fn slowdown(&self) -> f64 {
        self.evaluation.iteration_s / self.baseline.iteration_s
    }
}

/// Plans `trace` on `cost` towards `goal` with the greedy knapsack heuristic (see the
/// module documentation).
///
/// # Errors
///
/// [`TrainingError::BadCostParameter`] if `cost` does not validate.
pub fn plan(trace: &Trace, cost: &CostModel, goal: Goal) -> Result<PlanOutcome, TrainingError> {
    cost.validate()?;
    let mut current = Plan::keep_all(trace);
    let (baseline, mut detail) = simulate(trace, cost, &current);
    let mut eval = baseline;
    let time_limit = goal
        .time_limit_factor
        .map_or(f64::INFINITY, |f| f * baseline.iteration_s);
    let tensors = trace.tensors.len();
    let mut tried_swap = vec![!goal.allow_swap; tensors];
    let mut tried_recompute = vec![!goal.allow_recompute; tensors];
    let step_s: Vec<f64> = trace
        .steps
        .iter()
        .map(|s| cost.step_seconds(s, trace.config.precision))
        .collect();
    loop {
        if goal
            .memory_budget_bytes
            .is_some_and(|b| eval.peak_bytes <= b)
        {
            break;
        }
        let mut best: Option<(f64, u64, TensorId, Action)> = None;
        for &(t, from, to) in &detail.schedule.residency {
            let tensor = &trace.tensors[t];
            if tensor.kind != TensorKind::Activation
                || current.action(t) != Action::Keep
                || !(from <= eval.peak_time_s && eval.peak_time_s < to)
            {
                continue;
            }
            let size = tensor.size_bytes;
            let mut consider = |cost_s: f64, action: Action| {
                let ratio = cost_s / size as f64;
                let better = best.is_none_or(|(r, s, _, _)| ratio < r || (ratio == r && size > s));
                if better {
                    best = Some((ratio, size, t, action));
                }
            };
            if !tried_recompute[t] {
                let p = tensor.producer.expect("activations have producers");
                let mut c = step_s[p];
                for &u in &trace.op_inputs[p] {
                    let input = &trace.tensors[u];
                    let gone = input.kind == TensorKind::Transient
                        || (input.kind == TensorKind::Activation
                            && current.action(u) != Action::Keep);
                    if gone && let Some(q) = input.producer {
                        c += step_s[q];
                    }
                }
                consider(c, Action::Recompute);
            }
            if !tried_swap[t] {
                let x = cost.transfer_seconds(size);
                let out_slack = eval.peak_time_s - detail.produced_at[t];
                let in_slack = detail.needed_at[t] - eval.peak_time_s;
                let c = (x - out_slack).max(0.0) + (x - in_slack).max(0.0) + 0.05 * x;
                consider(c, Action::Swap);
            }
        }
        let Some((_, _, t, action)) = best else {
            break;
        };
        current.set(trace, t, action);
        let (next_eval, next_detail) = simulate(trace, cost, &current);
        if next_eval.peak_bytes < eval.peak_bytes && next_eval.iteration_s <= time_limit {
            eval = next_eval;
            detail = next_detail;
        } else {
            current.set(trace, t, Action::Keep);
        }
        match action {
            Action::Swap => tried_swap[t] = true,
            Action::Recompute => tried_recompute[t] = true,
            Action::Keep => {}
        }
    }
    let fits = goal
        .memory_budget_bytes
        .is_none_or(|b| eval.peak_bytes <= b);
    Ok(PlanOutcome {
        plan: current,
        evaluation: eval,
        baseline,
        fits,
    })
}

/// The largest batch of a configuration that fits a memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchFit {
    /// The largest batch found (0 if not even one sample fits).
    pub batch: u32,
    /// The simulation at that batch (`None` when `batch` is 0).
    pub evaluation: Option<Evaluation>,
}

impl BatchFit {
    /// Samples per simulated second at the largest batch.
    pub fn samples_per_s(&self) -> f64 {
        self.evaluation
            .map_or(0.0, |e| f64::from(self.batch) / e.iteration_s)
    }
}

/// The largest batch of `config`'s model and precision whose peak fits
/// `cost.capacity_bytes` in exact bytes: keeping every activation (`planned` false) or with
/// the planner (`planned` true, within `time_limit_factor` of keep-all at the same batch
/// when given). Searches by doubling then bisection, up to `max_batch`; assumes that what
/// fits at a batch fits at every smaller one.
///
/// # Errors
///
/// [`TrainingError::BadCostParameter`] if `cost` does not validate.
pub fn largest_batch(
    config: &ModelConfig,
    cost: &CostModel,
    planned: bool,
    time_limit_factor: Option<f64>,
    max_batch: u32,
) -> Result<BatchFit, TrainingError> {
    cost.validate()?;
    search_batch(max_batch, |b| {
        let trace = Trace::generate(&config.with_batch(b)?);
        if planned {
            let goal = Goal {
                memory_budget_bytes: Some(cost.capacity_bytes),
                time_limit_factor,
                allow_swap: true,
                allow_recompute: true,
            };
            let outcome = plan(&trace, cost, goal)?;
            Ok(outcome.fits.then_some(outcome.evaluation))
        } else {
            let e = evaluate(&trace, cost, &Plan::keep_all(&trace));
            Ok((e.peak_bytes <= cost.capacity_bytes).then_some(e))
        }
    })
}

/// Planner budgets tried, as fractions of the capacity, by [`largest_batch_on`].
pub const ALLOCATOR_MARGINS: [f64; 7] = [1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7];

/// As [`largest_batch`], but a batch fits only if its schedule also replays on the
/// caching-allocator model `allocator` with `cost.capacity_bytes` of device memory without
/// running out (cache flushes allowed): rounding and fragmentation count. The planner is
/// given budgets of [`ALLOCATOR_MARGINS`] × capacity in turn until one replays.
///
/// # Errors
///
/// [`TrainingError::BadCostParameter`] if `cost` does not validate.
pub fn largest_batch_on(
    config: &ModelConfig,
    cost: &CostModel,
    planned: bool,
    time_limit_factor: Option<f64>,
    max_batch: u32,
    allocator: CachingConfig,
) -> Result<BatchFit, TrainingError> {
    cost.validate()?;
    let allocator = CachingConfig {
        capacity_bytes: Some(cost.capacity_bytes),
        ..allocator
    };
    let replays = |trace: &Trace, plan: &Plan| {
        let run = schedule(trace, cost, plan).run_trace(trace);
        replay_caching(&run, allocator, 0).is_ok()
    };
    search_batch(max_batch, |b| {
        let trace = Trace::generate(&config.with_batch(b)?);
        if !planned {
            let keep = Plan::keep_all(&trace);
            let e = evaluate(&trace, cost, &keep);
            return Ok(
                (e.peak_bytes <= cost.capacity_bytes && replays(&trace, &keep)).then_some(e),
            );
        }
        for margin in ALLOCATOR_MARGINS {
            let goal = Goal {
                memory_budget_bytes: Some((cost.capacity_bytes as f64 * margin) as u64),
                time_limit_factor,
                allow_swap: true,
                allow_recompute: true,
            };
            let outcome = plan(&trace, cost, goal)?;
            if !outcome.fits {
                return Ok(None);
            }
            if replays(&trace, &outcome.plan) {
                return Ok(Some(outcome.evaluation));
            }
        }
        Ok(None)
    })
}

/// Doubling then bisection for the largest batch in `1..=max_batch` for which `try_batch`
/// gives an evaluation.
fn search_batch(
    max_batch: u32,
    try_batch: impl Fn(u32) -> Result<Option<Evaluation>, TrainingError>,
) -> Result<BatchFit, TrainingError> {
    let Some(mut best_eval) = try_batch(1)? else {
        return Ok(BatchFit {
            batch: 0,
            evaluation: None,
        });
    };
    let (mut lo, mut hi) = (1u32, None);
    while hi.is_none() && lo < max_batch {
        let b = (lo * 2).min(max_batch);
        match try_batch(b)? {
            Some(e) => {
                lo = b;
                best_eval = e;
            }
            None => hi = Some(b),
        }
    }
    if let Some(mut hi) = hi {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match try_batch(mid)? {
                Some(e) => {
                    lo = mid;
                    best_eval = e;
                }
                None => hi = mid,
            }
        }
    }
    Ok(BatchFit {
        batch: lo,
        evaluation: Some(best_eval),
    })
}
